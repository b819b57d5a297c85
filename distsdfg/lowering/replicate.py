"""Replicated map kernels: a small kernel whose inputs every rank holds runs on every rank.

A map kernel the schedule leaves on one rank (a grid of ones) runs on rank 0, and its results
travel to the ranks that read them. When every rank of the widest grid already holds all its
inputs whole (it reads none, like ``arange``; a one-element value; the output of another
replicated kernel; a home buffer already filled whole on every rank, like a ZeRO-1 parameter
gathered for a layer norm; a read-only argument that every rank passes whole), computing it on
every rank moves nothing, and its readers find its output on their own rank. ``ReplicatedKernels``
(a mixin of ``loops.MachineRewriter``) gives such a kernel a grid with one more axis, over
``P`` ranks, that no map parameter uses: every rank runs all iterations on whole local buffers,
and the steps that fill and read them are planned with that grid like any other kernel's
(copies within a rank where the data is there). Where an input is missing on some ranks (a home
split by rows), the kernel is replicated only when fetching it whole to every rank moves no more
bytes than running it on rank 0 would: rank 0's fetch of what it lacks plus the outputs sent
out (``worth_replicating``). Example, 2 ranks, ZeRO-1: ``pos = arange(T)`` runs on both ranks
(nothing moves), ``wpe[pos]`` gathers the row-split ``wpe`` on both (``T C`` elements moved, as
DDP's share of ``wpe`` does) instead of fetching rank 1's rows to rank 0 and sending the ``T x C``
result to rank 1.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import sympy
from dace import data as dt

from .. import dace_compat as dc
from ..analysis.constraints import ArrayConstraint, KernelPlan
from ..values.exprs import box_covers
from ..values.plan import ALL_HOME

__all__ = ["REPLICA_AXIS", "ReplicatedKernels", "replicated_layout_boxes"]

#: The rank symbol of a replicated kernel's extra grid axis; no box uses it, no SDFG declares it.
REPLICA_AXIS = "__dsdfg_replica"


def replicated_layout_boxes(shape) -> tuple:
    """The one box of a whole array of ``shape`` (what every rank of a replicated grid holds)."""
    return (tuple((sympy.Integer(0), sympy.sympify(s) - 1) for s in shape),)


class ReplicatedKernels:
    """Which unsplit map kernels run on every rank, and their reads (a mixin of ``MachineRewriter``)."""

    # -- decision ------------------------------------------------------------------------------
    def replicated_plan(self, kp: KernelPlan) -> KernelPlan:
        """``kp`` with the replicated grid when it is worth it (``kp`` itself otherwise)."""
        if kp.kernel.kind != "map" or kp.nranks != 1 or self.most <= 1 or kp.kernel.runtime_symbols:
            return kp
        missing = []                      # inputs some rank lacks whole: fetched to every rank
        outputs = []
        for arr, c in kp.arrays.items():
            x = self.root(arr)
            if c.write is not None:
                if c.is_read or c.partial or not c.write_exact or not c.write_covers or x in self.placed \
                        or isinstance(self.sdfg.arrays[x], dt.Scalar):
                    return kp
                outputs.append(x)
                continue
            there = self.everywhere(x)
            if there is None:
                return kp
            if not there:
                missing.append(x)
        if not self.worth_replicating(missing, outputs):
            return kp
        grid = tuple(kp.grid) + (self.most,)
        rsyms = tuple(kp.rank_syms) + (dc.sym(REPLICA_AXIS),)
        rep = dataclasses.replace(kp, grid=grid, rank_syms=rsyms)
        self.replicated_kernels.add(kp.kernel.index)
        return rep

    def everywhere(self, x: str) -> Optional[bool]:
        """Whether every rank holds ``x``'s current value whole (None: partial sums, never replicated)."""
        desc = self.sdfg.arrays[x]
        if isinstance(desc, dt.Scalar) and not desc.transient:
            return True
        st = self.data.get(x)
        if st is None or not st.holdings:
            return self.valid_everywhere(x)
        if x in self.homes and self.has_home(x):
            home = next(h for h in st.holdings if h.kind == "home")
            return home.whole >= self.most or x in self.replicated_homes
        h = st.holdings[-1]
        if h.partial:
            return None
        if h.kind == "repl":
            return True
        n = 1
        for g in h.grid:
            n *= g
        syms = {str(s) for s, g in zip(h.rank_syms, h.grid) if g > 1}
        shape = self.sdfg.arrays[x].shape
        return n >= self.most and any(
            box_covers(box, shape) and not syms & {str(f) for se in box for e in se for f in sympy.sympify(e).free_symbols}
            for box in h.boxes)

    def worth_replicating(self, missing, outputs) -> bool:
        """Fetching the ``missing`` inputs whole to every rank moves no more than running on rank 0:
        rank 0 fetches ``1/P`` of them (owned evenly) and sends every output to the other ranks."""
        if not missing:
            return True

        def size(x):
            d = self.sdfg.arrays[x]
            return sympy.sympify(d.total_size) * d.dtype.bytes
        p = self.most
        fetch = sum((size(x) for x in missing), sympy.Integer(0))
        sent = sum((size(x) for x in outputs), sympy.Integer(0))
        margin = sympy.simplify(sent + fetch / p - fetch)
        return bool(margin.is_nonnegative) if not margin.is_number else margin >= 0

    def replicated_home_anchor(self, x: str, buffer: str, name: str):
        """The anchor of a read-only argument in distributed placement that no split kernel touches:
        every rank owns it whole (passes it whole), so kernels on any rank read it where they run."""
        from ..values.plan import Layout, boxes_text
        self.replicated_homes.add(x)
        boxes = boxes_text(replicated_layout_boxes(self.sdfg.arrays[x].shape))
        return Layout(buffer, f"home of {x}", (self.most,), (REPLICA_AXIS,), boxes, (), (), None, (), name)

    # -- valid on every rank ---------------------------------------------------------------------
    def valid_everywhere(self, x: str) -> bool:
        """Every rank's own copy of the program's array ``x`` holds its value."""
        desc = self.sdfg.arrays.get(x)
        if desc is None or (isinstance(desc, dt.Scalar) and not desc.transient):
            return True               # scalar arguments: every rank passes the same value
        st = self.data.get(x)
        return st is not None and st.all_valid

    def valid_on_all_ranks(self) -> set:
        """Arrays other than homes and one-element ones that every rank holds at the end of a state."""
        return {x for x, st in self.data.items() if st.all_valid and x not in self.homes and x not in self.repl}

    def everywhere_carried(self, into: bool) -> dict:
        """At the start of a state that runs right after the previous one (``into``), the arrays every
        rank held at its end still hold their value there (no kernel ran in between)."""
        from .lowered import ArrayState
        return {x: ArrayState([], root_valid=True, all_valid=True) for x in (self.carried_all if into else ())}

    # -- rewriting -----------------------------------------------------------------------------
    def write_step(self, kp, arr, local, c):
        """A replicated kernel's output is copied into every rank's own array (no rank sends it)."""
        if kp.kernel.index not in self.replicated_kernels:
            return super().write_step(kp, arr, local, c)
        src = self.layout(kp, arr, local, c, [c.write])
        return self.raw_step(self.root(arr), src, self.whole(self.root(arr), ALL_HOME))

    def members_only(self, kp: KernelPlan):
        if kp.kernel.index in self.replicated_kernels:
            return          # every rank runs all iterations (its inputs are whole there)
        super().members_only(kp)

    def read_input(self, kp, arr, c: ArrayConstraint, state, src_node, local_of, boxes=None):
        """A kernel reads an array every rank holds as the program's own array (no kernel copy of it)
        by a copy within each rank, not from rank 0."""
        x = self.root(arr)
        st = self.data.get(x)
        if (c.write is None and (st is None or not st.holdings) and self.valid_everywhere(x)
                and not isinstance(self.sdfg.arrays[x], dt.Scalar)):
            local = local_of()
            lr = state.add_access(local)
            self.reading_for = kp.kernel.node
            try:
                src = self.latest_global(state, x)
            finally:
                self.reading_for = None
            self.dm(state, self.spec(kp, "redist", arr, local, c, c.reads if boxes is None else boxes,
                                     source=self.whole(x, ALL_HOME)), src, lr)
            return lr, local
        return super().read_input(kp, arr, c, state, src_node, local_of, boxes)
