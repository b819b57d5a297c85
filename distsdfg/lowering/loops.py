"""Lowering of programs with control flow: arrays stay distributed across loop iterations.

With loops or branches the program order of kernels is no longer a straight line, so the
data-flow rewriting of ``rewriter.Rewriter`` runs state by state and every state boundary
keeps one fixed arrangement per array:

* **home** arrays (touched by a kernel split over several ranks and live across states) live
  in a *home buffer* on their owners (``plan.HomeSpec``): scattered once when the program
  starts, gathered once when it ends. Map kernels read and write the home buffer in place with
  global indices; before a kernel reads, an in-place ``Isend/Irecv`` step fetches the ghost
  cells it lacks from their owners (a halo exchange), and after a kernel writes, the
  elements it wrote outside its own block go back to their owners. Any other distributed copy
  left at the end of a state is redistributed into the home buffer.
* **replicated** arrays (one element, e.g. a residual norm or a step size) are valid on every
  rank at every boundary: a kernel's partial sums become an ``Allreduce``, so that tasklets
  and loop conditions compute the same values and take the same branches on all ranks.
* everything else keeps rank 0's copy valid (the thesis' root path), and arrays that live in
  one state only are never gathered. Unsplit kernels whose inputs every rank holds run on
  every rank instead of rank 0 (``replicate.ReplicatedKernels``).

Every communication step records its state's trip count (``StepSpec.repeats``), so that
``comm_report`` gives per-run totals.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Set, Tuple

import dace
import networkx as nx
import sympy
from dace import data as dt
from dace.sdfg import SDFG, SDFGState, nodes

from .. import dace_compat as dc
from ..analysis.constraints import ArrayConstraint, KernelPlan
from .ordering import order_before, writers_through_view
from ..errors import DistributedLoweringError
from .lowered import ArrayState, Holding
from .boundary import BoundarySteps
from .home_planning import Home, HomePlanning
from .replicate import ReplicatedKernels
from .rewriter import Rewriter
from ..analysis.controlflow import loop_trips
from ..values.plan import ALL_HOME, ROOT_HOME, HomeSpec, Layout, StepSpec, axis_symbols, boxes_text
from ..values.exprs import box_covers, same_rank_blocks

__all__ = ["MachineRewriter", "loop_trips"]


class MachineRewriter(HomePlanning, BoundarySteps, ReplicatedKernels, Rewriter):
    """``Rewriter`` for a state machine: per state, with homes and replicated arrays at boundaries."""

    def __init__(self, sdfg: SDFG, *, viewed: set, views: Dict[str, str], placed: Set[str] = frozenset(),
                 device: bool = False):
        super().__init__(sdfg, linear=False, viewed=viewed, views=views)
        self.placed = set(placed)            # arguments in distributed placement (see lowering/placement.py)
        self.device = device                 # the device code path (GPU buffers, or its emulation)
        self.boundary: Dict[str, str] = {}   # placed array -> the home whose owned blocks users pass
        self.homes: Dict[str, Home] = {}
        self.extra_homes: List[HomeSpec] = []
        self.repl: Set[str] = set()
        self.live: Set[str] = set()          # arrays whose value crosses a state boundary
        self.written: Set[str] = set()       # arrays some state writes
        self.last: Dict[str, nodes.AccessNode] = {}      # home buffer -> its latest node in this state
        self.readers: Dict[str, List[nodes.Node]] = {}   # home buffer -> nodes done reading it since
        self.alias_written: Set[Tuple[int, str]] = set()
        self.alias_read: Set[str] = set()
        self.reading_for: Optional[nodes.Node] = None     # the kernel whose inputs are being read
        self.replicated_kernels, self.partial_kernels, self.replicated_homes, self.most = set(), set(), set(), 1
        self.following, self.carried_stale = None, set()       # (replicate.py: partial sums carried)

    # -- layouts ------------------------------------------------------------------------------
    def kernel_layout(self, kp: KernelPlan, buffer: str, boxes, home: str) -> Layout:
        return Layout(buffer, kp.kernel.label, kp.grid,
                      axis_symbols(kp.rank_syms, kp.grid),
                      boxes_text(boxes), (), (), None, (), home)

    def home_layout(self, x: str) -> Layout:
        h = self.homes[x]
        return Layout(h.buffer, f"home of {x}", (), (), (), (), (), None, (), h.name)

    def whole(self, x: str, where: str) -> Layout:
        """The program's own array ``x``, whole on rank 0 (ROOT_HOME) or on every rank (ALL_HOME)."""
        return Layout(x, "rank 0" if where == ROOT_HOME else "every rank", (), (), (), (), (), None, (), where)

    def home_holding(self, x: str, state: SDFGState) -> Holding:
        return Holding(self.home_layout(x), "home", (), (), (), (), (), state, None)

    def repl_holding(self, x: str, state: SDFGState, node=None) -> Holding:
        return Holding(self.whole(x, ALL_HOME), "repl", (), (), (), (), (), state, node)

    def has_home(self, x: str) -> bool:
        st = self.data.get(x)
        return st is not None and any(h.kind == "home" for h in st.holdings)

    # -- nodes and ordering -------------------------------------------------------------------
    def buffer_node(self, buffer: str, state: SDFGState) -> nodes.AccessNode:
        n = self.last.get(buffer)
        if n is None:
            n = self.last[buffer] = state.add_read(buffer)
        return n

    def holder_node(self, h: Holding, state: SDFGState) -> nodes.AccessNode:
        if h.kind == "home":
            return self.buffer_node(h.layout.local, state)
        if h.kind == "repl":
            return h.node if h.node is not None and h.state is state else self.latest_global(state, h.layout.local)
        return super().holder_node(h, state)

    def latest_global(self, state: SDFGState, x: str) -> nodes.AccessNode:
        """The last written access node of the program's array ``x`` in ``state`` (or a fresh read).

        While a kernel's inputs are read (``self.reading_for``), nodes downstream of that kernel
        do not count: an unsplit kernel that updates a replicated array in place (an optimizer's
        step counter, ``st[0] = st[0] + 1``) already writes a node of ``x``, and reading from it
        would close a cycle through the kernel."""
        order = {n: i for i, n in enumerate(dc.top_level_nodes(state))}
        written = [n for n in state.data_nodes() if n.data == x and state.in_degree(n) > 0]
        kernel = self.reading_for
        if kernel is not None and written:
            after = nx.descendants(state.nx, kernel)
            written = [n for n in written if n not in after]
        if written:
            return max(written, key=lambda n: order.get(n, -1))
        return state.add_read(x)

    def before_write(self, state: SDFGState, buffer: str, writer: nodes.Node):
        """Order ``writer`` after everything that read ``buffer`` (or wrote it) earlier in the state."""
        prev = [n for n in self.readers.get(buffer, []) + [self.last.get(buffer)] if n is not None]
        preds = set(state.predecessors(writer))
        for n in prev:
            if n is writer or n in preds or n not in state.nodes() or nx.has_path(state.nx, writer, n):
                continue
            state.add_nedge(n, writer, dace.Memlet())
        self.readers[buffer] = []

    def buffers(self) -> Set[str]:
        return {h.buffer for h in self.homes.values()}

    def dm(self, state, spec, src, dst):
        bufs = self.buffers()
        node = super().dm(state, spec, src, dst)
        if dst.data in bufs:
            self.before_write(state, dst.data, node)
            self.last[dst.data] = dst
        elif src is not None and src.data in bufs:
            self.readers.setdefault(src.data, []).append(dst)
        return node

    def raw_step(self, x: str, source: Layout, dest: Layout, *, inplace: bool = False) -> StepSpec:
        """A redistribution between two layouts that belong to no single kernel."""
        import numpy as np
        desc = self.sdfg.arrays[x]
        np_dtype = np.dtype(desc.dtype.as_numpy_dtype())
        if x in self.boundary:      # the argument is a block now: the array's shape is its home's
            gshape, strides = self.homes[x].global_shape, ()
        else:
            gshape, strides = tuple(str(s) for s in desc.shape), tuple(str(s) for s in desc.strides)
        s = StepSpec(index=len(self.steps), kind="redist", array=x, local=dest.local, kernel=-1,
                     kernel_label=dest.kernel_label, dtype=np_dtype.name, itemsize=np_dtype.itemsize, grid=dest.grid,
                     rank_syms=dest.rank_syms, boxes=dest.boxes, origin=dest.origin, local_shape=dest.local_shape,
                     global_shape=gshape, source=source,
                     global_strides=strides, view_shape=dest.view_shape, home=dest.home,
                     clip=dest.clip, inplace=inplace, repeats=self.repeats[0], at_most=self.repeats[1])
        self.steps.append(s)
        return s

    # -- boundary arrangements ------------------------------------------------------------------
    def sync_home(self, x: str, state: SDFGState):
        """Bring ``x``'s current value into its home buffer (nothing when it is there already)."""
        st = self.data[x]
        if self.has_home(x):
            return
        h = self.homes[x]
        if st.holdings:
            # Every holding is a valid copy: the one with the home's anchor blocks moves nothing
            # (the kernel the home was anchored at), else the latest.
            a = h.anchor
            same = [g for g in st.holdings if g.layout.op is None and (g.layout.kernel_label, g.layout.grid,
                    g.layout.boxes, g.layout.view_shape) == (a.kernel_label, a.grid, a.boxes, a.view_shape)]
            src = same[-1] if same else st.holdings[-1]
            src_node, source = self.holder_node(src, state), src.layout
        elif st.root_valid:
            src_node, source = self.latest_global(state, x), self.whole(x, ROOT_HOME)
        else:
            raise DistributedLoweringError(f"internal: `{x}` has no valid copy at the end of state `{state.label}`")
        new = state.add_access(h.buffer)
        self.dm(state, self.raw_step(x, source, self.home_layout(x)), src_node, new)
        st.holdings.append(self.home_holding(x, state))

    def replicate(self, x: str, state: SDFGState) -> nodes.AccessNode:
        """Make every rank's own ``x`` hold its value (Allreduce of partial sums, Allgatherv, ...)."""
        st = self.state_of(x)
        new = state.add_access(x)
        if st.holdings:
            src = st.holdings[-1]
            self.dm(state, self.raw_step(x, src.layout, self.whole(x, ALL_HOME)), self.holder_node(src, state), new)
        else:
            self.dm(state, self.raw_step(x, self.whole(x, ROOT_HOME), self.whole(x, ALL_HOME), inplace=True),
                    self.latest_global(state, x), new)
        st.root_valid = st.all_valid = True
        return new

    def ensure_root(self, x: str, node: nodes.Node, state: SDFGState):
        """Gather ``x`` to rank 0 before ``node`` (which reads or partly writes rank 0's copy)."""
        st = self.data[x]
        if st.root_valid:
            return
        if not st.holdings:
            raise DistributedLoweringError(f"internal: `{x}` has no valid copy before `{node}`")
        h = st.holdings[-1]
        src_node = self.holder_node(h, state)
        if isinstance(node, nodes.AccessNode) and node.data == x and state.in_degree(node) == 0:
            target = node
        else:
            feeders = [e.src for e in state.in_edges(node) if isinstance(e.src, nodes.AccessNode)
                       and e.src.data == x and state.in_degree(e.src) == 0]
            target = feeders[0] if feeders else None
        if target is None:
            target = state.add_access(x)
            for first in writers_through_view(state, node):
                order_before(state, target, first)
        self.dm(state, self.raw_step(x, h.layout, self.whole(x, ROOT_HOME)), src_node, target)
        st.root_valid = True

    # -- per state ------------------------------------------------------------------------------
    def begin_state(self, state: SDFGState, trips):
        self.repeats = trips.get(state, ("1", False))
        into = self.carries_into(state, trips)
        carried = self.carried if into else {}
        self.data, self.last, self.readers = self.everywhere_carried(into), {}, {}
        for x in self.homes:
            # Rank 0 holds the program's array whole only in root placement (until a state writes it).
            # Copies the state before read (a weight gathered for the forward) stay valid here when
            # this state follows it directly: the backward reads them instead of gathering again.
            home = self.home_holding(x, state)
            if carried and x in self.carried_whole:
                home = dataclasses.replace(home, whole=self.carried_whole[x])
            stale = into and x in self.carried_stale      # partial sums left for this state to sum
            self.data[x] = ArrayState(([] if stale else [home]) + carried.get(x, []),
                                      root_valid=x not in self.written and x not in self.placed)
        for x in self.repl:
            self.data[x] = ArrayState([self.repl_holding(x, state)], root_valid=True, all_valid=True)

    def carries_into(self, state: SDFGState, trips, prev=None) -> bool:
        """``state`` runs once, right after the state lowered before it (``prev``) and only after it."""
        prev = getattr(self, "previous", None) if prev is None else prev
        if (prev is None or state.parent_graph is not prev.parent_graph or trips.get(state, ("1", False))[0] != "1"
                or trips.get(prev, ("1", False))[0] != "1"):
            return False
        g = state.parent_graph
        ins, outs = g.in_edges(state), g.out_edges(prev)
        return ([e.src for e in ins] == [prev] and [e.dst for e in outs] == [state]
                and not ins[0].data.assignments and ins[0].data.is_unconditional())

    def carry(self, state: SDFGState):
        """The valid copies of each home array other than its home (read copies; partial sums only where
        the home was left unsummed, ``replicate.deferred``), for the next state (``begin_state``)."""
        self.previous, self.carried_all = state, self.valid_on_all_ranks()
        stale = self.carried_stale = {x for x in self.homes if self.deferred(x)}
        self.carried = {x: [h for h in self.data[x].holdings if h.kind != "home" and (x in stale or not h.partial)]
                        for x in self.homes if x in self.data}
        # Home buffers whose ghost cells hold the whole array stay so: the buffer persists.
        self.carried_whole = {x: h.whole for x in self.homes if x in self.data
                              for h in self.data[x].holdings if h.kind == "home" and h.whole}

    def end_state(self, state: SDFGState):
        for x in [x for x in self.homes if not self.deferred(x) and not self.dead_after(x, state)]:  # replicate.py
            self.sync_home(x, state)
        for x in [x for x in sorted(self.repl) if not self.data[x].all_valid]:
            self.replicate(x, state)
        for x in sorted(dc.interstate_reads(self.sdfg, state)):
            # A condition reads it: every rank must see rank 0's value, or ranks take other branches.
            if x in self.homes or (x not in self.repl and not self.valid_everywhere(x)):
                self.replicate(x, state)

    def run(self, segments: List[List[SDFGState]], plans: Dict[nodes.Node, KernelPlan]):
        states = [st for seg in segments for st in seg]
        events = {st: self.events([st], plans) for st in states}
        trips = loop_trips(self.sdfg)
        self.most = max((kp.nranks for kp in plans.values()), default=1)     # ranks of the widest grid
        self.classify(states, events, trips)
        self.note_last_uses(states, events, trips)
        self.previous, self.carried, self.carried_whole, self.carried_all = None, {}, {}, set()
        for i, st in enumerate(states):
            self.begin_state(st, trips)
            self.future = list(events[st])
            self.drain()
            nxt = states[i + 1] if i + 1 < len(states) else None
            self.following = nxt if nxt is not None and self.carries_into(nxt, trips, st) else None
            self.end_state(st)
            self.carry(st)
        self.enter_and_exit()

    # -- kernels --------------------------------------------------------------------------------
    def alias_ok(self, kp: KernelPlan, arr: str, c: ArrayConstraint) -> bool:
        """A map kernel that reads or plainly writes a home array by its own name uses the home
        buffer itself (global indices; the buffer spans the kernel's blocks); so does a library
        kernel that reads one (``library_reads_home``)."""
        if kp.kernel.kind != "map":
            return self.library_reads_home(kp, arr, c)
        return (arr in self.homes and arr not in self.views
                and (c.write is None or (not c.partial and c.write_exact)))

    def library_reads_home(self, kp: KernelPlan, arr: str, c: ArrayConstraint) -> bool:
        """Whether a library kernel split over every rank reads the home array ``arr`` in place: it
        only reads it, by its own name, in the home's own blocks (never more than a rank owns: a
        transposed access would grow every buffer towards the whole array), while the home holds
        its value. Such a kernel runs on its exact blocks (``exact_library``), so the BLAS call or
        reduction reads the home buffer where the rank's block lies, instead of a copy of the block."""
        return (self.exact_library(kp) and c.write is None and arr in self.homes and arr not in self.views
                and self.has_home(arr)
                and same_rank_blocks(self.homes[arr].anchor, self.kernel_layout(kp, "", c.reads, "")))

    def exact_library(self, kp: KernelPlan) -> bool:
        """Library kernels split over every rank run on their exact blocks, in buffers indexed as map
        kernels index theirs: they read homes in place and share buffers with map kernels."""
        return (kp.kernel.kind == "library" and kp.nranks >= max(self.most, 2)
                and all(len(c.reads) <= 1 and (c.write is not None or c.reads) for c in kp.arrays.values()))

    def indexes_globally(self, buffer: str) -> bool:
        return buffer in self.buffers() or super().indexes_globally(buffer)

    def kernel_event(self, kp: KernelPlan):
        kp = self.replicated_plan(kp)       # on every rank, where its inputs are (replicate.py)
        state, self.alias_read = kp.kernel.state, set()
        for arr, c in kp.arrays.items():
            x = self.root(arr)
            if c.write is None or x not in self.homes:
                continue
            if self.alias_ok(kp, arr, c):
                if not c.write_covers or c.is_read:
                    self.sync_home(x, state)
                self.alias_written.add((kp.kernel.index, x))
            elif self.write_mode(arr, c) == "root":
                self.ensure_root(x, kp.kernel.node, state)
        super().kernel_event(kp)
        aliased = self.alias_read or any(i == kp.kernel.index for i, _ in self.alias_written)
        if kp.kernel.kind == "map" and kp.nranks == 1 and aliased:
            # Home buffers span only the blocks a rank owns; a map on one rank indexes them globally.
            self.members_only(kp)
        if kp.kernel.kind == "map":
            outs = [e.dst for e in state.out_edges(state.exit_node(kp.kernel.node))]
        else:
            outs = [e.dst for e in state.out_edges(kp.kernel.node)]
        for x in self.alias_read:
            if (kp.kernel.index, x) not in self.alias_written:
                self.readers.setdefault(self.homes[x].buffer, []).extend(outs)

    def read_input(self, kp, arr, c, state, src_node, local_of, boxes=None):
        x = self.root(arr)
        desc = self.sdfg.arrays[x]
        if (kp.kernel.kind == "map" and c.write is None and isinstance(desc, dt.Scalar) and not desc.transient
                and src_node is not None and src_node.data == x):
            return src_node, x       # a scalar argument: every rank holds rank 0's value already
        if boxes is None and self.alias_ok(kp, arr, c) and self.has_home(x):
            h = self.homes[x]
            h.accesses.append(self.kernel_layout(kp, h.buffer, c.reads, h.name))
            self.alias_read.add(x)
            st = self.data[x]
            at = next(i for i, g in enumerate(st.holdings) if g.kind == "home")
            if kp.nranks <= st.holdings[at].whole:     # an earlier kernel fetched all of x into the home
                # buffers of ranks 0..whole-1 and nothing has written x since: the ghost cells are valid
                return self.buffer_node(h.buffer, state), h.buffer
            new = state.add_access(h.buffer)
            spec = self.spec(kp, "redist", x, h.buffer, c, c.reads, source=self.home_layout(x), home=h.name,
                             inplace=True)
            self.dm(state, spec, self.buffer_node(h.buffer, state), new)
            ranks = {str(r) for r in kp.rank_syms}      # every rank of kp reads all of x (a layer norm's weight)?
            whole = any(box_covers(box, self.homes[x].global_shape) and not ranks & {
                str(f) for se in box for e in se for f in sympy.sympify(e).free_symbols} for box in c.reads)
            if whole:
                st.holdings[at] = dataclasses.replace(st.holdings[at], whole=max(kp.nranks, st.holdings[at].whole))
            if whole and kp.nranks == self.most:
                # the filled home is also a copy other kernels (a tied weight's product) read locally
                st.holdings.append(Holding(self.kernel_layout(kp, h.buffer, c.reads, h.name), "ghost", kp.grid,
                                           kp.rank_syms, (), (), tuple(c.reads), state, new))
            return new, h.buffer
        self.reading_for = kp.kernel.node
        try:
            return super().read_input(kp, arr, c, state, src_node, local_of, boxes)
        finally:
            self.reading_for = None

    def add_local(self, kp: KernelPlan, arr: str, c: ArrayConstraint, *, offset: bool) -> str:
        if (kp.kernel.index, arr) in self.alias_written:
            return self.homes[arr].buffer
        return super().add_local(kp, arr, c, offset=offset)

    def write_output(self, kp, arr, c, state, lw, dst_node):
        x = self.root(arr)
        st = self.state_of(arr)
        if (kp.kernel.index, x) in self.alias_written:
            h = self.homes[x]
            self.before_write(state, h.buffer, kp.kernel.node)
            self.last[h.buffer] = lw
            h.accesses.append(self.kernel_layout(kp, h.buffer, [c.write], h.name))
            # Elements written outside the rank's own block go back to their owners.
            new = state.add_access(h.buffer)
            self.dm(state, self.raw_step(x, self.kernel_layout(kp, h.buffer, [c.write], h.name), self.home_layout(x),
                                         inplace=True), lw, new)
            st.holdings = [self.home_holding(x, state)]
            st.root_valid = st.all_valid = False
            return
        if x in self.repl and arr == x and self.write_mode(arr, c) != "root":
            op = c.op if c.split_reduction else None
            h = self.holding(kp, arr, lw.data, c, [c.write], op, state, lw)
            self.dm(state, self.raw_step(x, h.layout, self.whole(x, ALL_HOME)), lw, dst_node)
            st.holdings = [self.repl_holding(x, state, dst_node)]
            st.root_valid = st.all_valid = True
            return
        if isinstance(self.sdfg.arrays[x], dt.Scalar) and arr == x and c.write is not None and c.write_exact:
            # A reduction to a scalar (``np.sum(r * r)``): every rank gets the value (Allreduce).
            op = c.op if c.split_reduction else None
            h = self.holding(kp, arr, lw.data, c, [c.write], op, state, lw)
            self.dm(state, self.raw_step(x, h.layout, self.whole(x, ALL_HOME)), lw, dst_node)
            st.holdings, st.root_valid, st.all_valid = [], True, True
            return
        super().write_output(kp, arr, c, state, lw, dst_node)
        st.all_valid = st.root_valid and kp.kernel.index in self.replicated_kernels    # (replicate.py)

    def needs_gather(self, arr: str) -> bool:
        x = self.root(arr)
        if x in self.homes or x in self.repl:
            return False
        nxt = self.next_use(arr)
        return nxt == "root" or (nxt == "end" and x in self.live)

    def root_event_use(self, ev: Tuple, arr: str) -> Optional[str]:
        cp = self.copy_of(ev)
        if cp is not None:             # a copy between distributed copies: a read of its source
            return "hold" if arr == cp[1] else None
        return "root" if arr in {self.root(a) for a in ev[1]} and ev[3] is not None else None

    # -- rank-0 accesses ----------------------------------------------------------------------
    def copy_of(self, ev) -> Optional[Tuple[str, str, nodes.AccessNode, object, Tuple]]:
        """``(source, home array, source node, edge, clip)`` when the event copies a box of an array
        into the same box of a home array of the same shape (``x[:] = tmp``, ``A[1:-1] = B[1:-1]``):
        done between distributed copies, not through rank 0. ``clip`` is the box, () for all."""
        if ev[0] != "root" or len(ev) < 5 or not isinstance(ev[3], nodes.AccessNode):
            return None
        n, state = ev[3], ev[4]
        outs = [e for e in state.out_edges(n) if isinstance(e.dst, nodes.AccessNode)]
        if len(outs) != 1 or len(ev[2]) != 1:
            return None
        e = outs[0]
        src, dst = n.data, e.dst.data
        if dst not in self.homes or src in self.views or dst in self.views or not self.fusable(src):
            return None
        sd, dd = self.sdfg.arrays[src], self.sdfg.arrays[dst]
        if [sympy.sympify(s) for s in sd.shape] != [sympy.sympify(s) for s in dd.shape]:
            return None
        m = e.data
        if m.wcr is not None or m.subset is None:
            return None
        other = m.other_subset if m.other_subset is not None else m.subset
        a, b = m.subset.ndrange(), other.ndrange()
        if len(a) != len(dd.shape) or any(sympy.simplify(sympy.sympify(x) - sympy.sympify(y)) != 0
                                          for ra, rb in zip(a, b) for x, y in zip(ra, rb)):
            return None
        if any(sympy.sympify(st) != 1 for _, _, st in a):
            return None
        full = all(sympy.simplify(sympy.sympify(lo)) == 0 and sympy.simplify(sympy.sympify(hi) - (sympy.sympify(n) - 1)) == 0
                   for (lo, hi, _), n in zip(a, dd.shape))
        clip = () if full else tuple((str(lo), str(hi)) for lo, hi, _ in a)
        return src, dst, n, e, clip

    def root_event(self, ev: Tuple):
        node, state = ev[3], ev[4]
        if node is None:           # interstate reads: end_state makes them valid on every rank
            return
        cp = self.copy_of(ev)
        if cp is not None:
            src, dst, n, e, clip = cp
            if clip:       # the rest of dst keeps its value: start from its home
                self.sync_home(dst, state)
            st = self.state_of(src)
            if st.holdings:
                h = st.holdings[-1]
                src_node, source = self.holder_node(h, state), h.layout
            else:
                src_node, source = n, self.whole(src, ROOT_HOME)
            state.remove_edge(e)
            home = self.homes[dst]
            if clip:
                source = dataclasses.replace(source, clip=clip)
            dest = dataclasses.replace(self.home_layout(dst), clip=clip)
            self.dm(state, self.raw_step(dst, source, dest), src_node, state.add_access(home.buffer))
            self.drop_if_isolated(state, e.dst)
            if src_node is not n:
                self.drop_if_isolated(state, n)
            self.data[dst] = ArrayState([self.home_holding(dst, state)], root_valid=False)
            return
        touched = {self.root(a) for a in ev[1]}
        writes = {self.root(a) for a in ev[2]}
        for x in sorted(touched):
            if x in self.homes:
                self.ensure_root(x, node, state)
        inputs_everywhere = all(self.valid_everywhere(x) for x in touched - writes)
        for x in writes:
            st = self.state_of(x)
            keep = st.all_valid or self._size_one(x) if x in self.sdfg.arrays else False
            st.holdings, st.root_valid = [], True
            st.all_valid = inputs_everywhere and keep
            if x in self.repl and st.all_valid:
                outs = [e.dst for e in state.out_edges(node) if isinstance(e.dst, nodes.AccessNode) and e.dst.data == x]
                st.holdings = [self.repl_holding(x, state, outs[0] if outs else None)]
