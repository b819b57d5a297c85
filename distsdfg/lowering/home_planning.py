"""Which arrays of a program with control flow get a distributed home, and their buffers.

``HomePlanning`` is the part of ``loops.MachineRewriter`` that classifies arrays before the
rewrite: one-element arrays are replicated on every rank; arrays that a split kernel touches and
whose values cross a state boundary get a *home* (``Home``, frozen into ``plan.HomeSpec``): a
buffer on their owners whose blocks start as the blocks of the kernel that does the most work
on the array, preferring kernels outside loops and plain writes; arguments in distributed
placement get one even if no kernel splits them.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Set, Tuple

import dace
import sympy
from dace import data as dt
from dace.sdfg import SDFGState

from .. import dace_compat as dc
from ..analysis.constraints import ArrayConstraint, KernelPlan
from ..values.plan import HomeSpec, Layout

__all__ = ["Home", "HomePlanning"]


def _work(kp: KernelPlan) -> int:
    from ..analysis.tiling import rough_work
    return max(rough_work(m.info.ranges) for m in kp.kernel.maps)


@dataclasses.dataclass
class Home:
    """A home being built: ``HomeSpec`` without the accesses frozen yet."""
    name: str
    array: str
    buffer: str
    anchor: Layout
    accesses: List[Layout]
    origin_syms: Tuple[str, ...]
    shape_syms: Tuple[str, ...]
    global_shape: Tuple[str, ...]


class HomePlanning:
    """Array classification and home buffers (a mixin of ``loops.MachineRewriter``)."""

    def _size_one(self, name: str) -> bool:
        desc = self.sdfg.arrays[name]
        return sympy.sympify(desc.total_size) == 1

    def classify(self, states: List[SDFGState], events: Dict[SDFGState, List[Tuple]],
                 trips: Dict[SDFGState, Tuple[str, bool]]):
        arrays = self.sdfg.arrays
        for name, desc in arrays.items():
            if desc.transient and self.most == 1:
                continue      # no kernel runs on other ranks: rank 0 keeps it (conditions: end_state)
            if (not isinstance(desc, (dt.View, dt.Scalar)) and name not in self.viewed and name not in self.views
                    and self._size_one(name)):
                self.repl.add(name)
        split: Dict[str, List[Tuple[bool, KernelPlan, str, ArrayConstraint]]] = {}
        root_in_loop: Set[str] = set()
        for st in states:
            killed: Set[str] = set()
            in_loop = trips.get(st, ("1", False))[0] != "1"
            for ev in events[st]:
                if ev[0] == "kernel":
                    kp = ev[1]
                    for arr, c in kp.arrays.items():
                        x = self.root(arr)
                        if x not in killed and (c.is_read or not c.write_covers):
                            self.live.add(x)
                        if c.write is not None:
                            self.written.add(x)
                            if c.write_covers and not c.is_read:
                                killed.add(x)
                        if kp.nranks > 1:
                            split.setdefault(x, []).append((in_loop, kp, arr, c))
                else:
                    for a in ev[1]:
                        x = self.root(a)
                        if x not in killed:
                            self.live.add(x)
                        if in_loop:
                            root_in_loop.add(x)
                    self.written |= {self.root(a) for a in ev[2]}
                    cp = self.copy_of(ev)
                    if cp is not None and not cp[4]:
                        killed.add(cp[1])
        for name, desc in arrays.items():
            if not desc.transient:
                self.live.add(name)
        for x, uses in split.items():
            if x in self.repl or not self.fusable(x) or x not in self.live or x in self.views:
                continue
            if x in root_in_loop and x not in self.placed and not any(u[0] for u in uses):
                continue    # a loop on rank 0 uses it, no split kernel in a loop: rank 0 keeps it
            self.add_home(x, uses)
        for x in sorted(self.placed - set(self.homes)):
            self.add_home(x, [])          # no kernel splits it: owners get even row blocks

    def add_home(self, x: str, uses):
        """Declare ``x``'s home buffer (shape and origin are per-rank symbols) and pick its anchor."""
        # A kernel that accumulates into x (not partial sums of a split reduction) makes x's plain
        # writes that read nothing its initialisation (an einsum's reset map): not the anchor.
        accumulated = any(u[2] == x and u[3].write is not None and u[3].partial and not u[3].split_reduction
                          for u in uses)

        def rank(u):
            in_loop, kp, arr, c = u
            plain = c.write is not None and not c.partial and c.write_exact
            init = accumulated and plain and not c.is_read
            return (not in_loop, not plain or init, c.write is None, -_work(kp), kp.kernel.index)
        own = [u for u in uses if u[2] == x]
        name = f"h{len(self.homes)}"
        desc = self.sdfg.arrays[x]
        buffer = f"__dsdfg_home_{x.strip('_')}"
        while buffer in self.sdfg.arrays:
            buffer += "_"
        # Partial sums span the whole array on every rank: start from another kernel's blocks.
        partial = [u for u in uses if (u[2] == x or u[2] in self.views) and u[3].write is not None
                   and u[3].split_reduction and u[3].op is not None]
        own = [u for u in own if not (u[3].write is not None and u[3].split_reduction)]
        # Kernels that use the array only through a reshape (a DaCe View): their blocks, mapped
        # onto the array's shape when the home is solved (where they are blocks of it).
        viewed = [u for u in uses if u[2] != x and u[2] in self.views
                  and not (u[3].write is not None and u[3].split_reduction)]
        if own:
            _, kp, _, c = min(own, key=rank)
            boxes = [c.write] if c.write is not None else c.reads
            anchor = self.kernel_layout(kp, buffer, boxes, name)
        elif viewed:
            _, kp, arr, c = min(viewed, key=rank)
            boxes = [c.write] if c.write is not None else c.reads
            anchor = dataclasses.replace(self.kernel_layout(kp, buffer, boxes, name),
                                         view_shape=tuple(str(s) for s in self.sdfg.arrays[arr].shape))
        elif partial:
            # Only partial sums: the writer's blocks (replicated over its split reduction axis),
            # each shared block split among the ranks that share it (``op``, see
            # ``homes.solve_homes``): its sums are combined by one Reduce_scatter in place.
            _, kp, arr, c = min(partial, key=rank)
            view = tuple(str(s) for s in self.sdfg.arrays[arr].shape) if arr != x else ()
            anchor = dataclasses.replace(self.kernel_layout(kp, buffer, [c.write], name), op=c.op, view_shape=view)
        elif x in self.placed and x not in self.written and self.most > 1:
            anchor = self.replicated_home_anchor(x, buffer, name)    # read only, by unsplit kernels
        else:     # no kernel's blocks to start from
            anchor = Layout(buffer, f"home of {x}", (1,), ("",), (), (), (), home=name)
        osyms, ssyms = self.buffer_symbols(name, len(desc.shape))
        self.sdfg.add_array(buffer, [dc.sym(s) for s in ssyms], desc.dtype, transient=True,
                            offset=[-dc.sym(s) for s in osyms])
        self.homes[x] = Home(name, x, buffer, anchor, [], osyms, ssyms, tuple(str(s) for s in desc.shape))

    def buffer_symbols(self, name: str, nd: int) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
        """Per-rank symbols of a buffer's origin and shape (declared in the SDFG)."""
        osyms = tuple(f"__dsdfg_{name}_o{d}" for d in range(nd))
        ssyms = tuple(f"__dsdfg_{name}_s{d}" for d in range(nd))
        for s in osyms + ssyms:
            self.sdfg.add_symbol(s, dace.int64)
        return osyms, ssyms

    def home_specs(self) -> List[HomeSpec]:
        out = [HomeSpec(h.name, h.array, h.buffer, h.global_shape, h.anchor, tuple(h.accesses), h.origin_syms,
                        h.shape_syms, boundary=h.buffer == h.array) for h in self.homes.values()]
        return out + list(self.extra_homes)
