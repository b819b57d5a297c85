"""Kernels linear in partial sums run on every rank's own partial sums: one reduction after them.

A split reduction (a contraction over a batch-split axis) leaves every rank with its own partial
sums of the whole output (``Holding.partial``, op ``sum``). A kernel linear in such inputs
(``analysis/linearity.py``: ``x + y``, ``x - 0.5 * y``, ``where(m, x, 0)``, ``onehot^T @ x``) can run
whole on every rank, on the rank's own partial sums, and its output is partial sums in turn
(DTensor's ``Partial`` through a linear operator): one reduction of the output, where a reader
needs the sum, replaces one per input. ``PartialKernels`` (a mixin of both rewriters: of
``PartialRewriter`` for straight-line programs, through ``replicate.ReplicatedKernels`` of
``loops.MachineRewriter``) gives such a kernel the replicated grid (one more axis over ``P`` ranks
that no map parameter uses, ``replicate.REPLICA_AXIS``), reads its partial inputs as they are and
holds its output as partial sums.

A kernel the schedule splits (an element-wise kernel split like its reader) runs unsplit on the
partial sums only where that pays (``whole_on_partials``): no partial input is used again (a
later reader that needs its sum would reduce it anyway, and the output besides), and the output is
no larger than the partial inputs together. Example, 2 ranks: ``C = A1 @ B1 - 0.5 * (A2 @ B2)``
with both contractions split over their inner axis and the element-wise kernels by rows: every
rank scales and subtracts its own whole partial products, and ``C`` is reduce-scattered once
instead of each product (GPT's tied embedding: the two gradient contributions added on every
rank, then one ``Reduce_scatter``). ``x + D`` (affine in ``x``) reduces ``x`` first.

Across states, ``replicate.ReplicatedKernels.deferred`` carries a home left as partial sums along
a straight chain of states, so that the linear kernel reading it later runs on them.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import sympy
from dace import data as dt

from .. import dace_compat as dc
from ..analysis.constraints import ArrayConstraint, KernelPlan, kernel_constraints
from ..values.exprs import box_covers

__all__ = ["PartialKernels"]

#: The rank symbol of a replicated kernel's extra grid axis; no box uses it, no SDFG declares it.
REPLICA_AXIS = "__dsdfg_replica"


class PartialKernels:
    """Which kernels run on every rank's own partial sums, and their reads and writes (a mixin of
    a rewriter, before ``rewriter.Rewriter`` in the method order)."""

    def run(self, segments, plans):
        self.partial_kernels, self.most = set(), max((kp.nranks for kp in plans.values()), default=1)
        super().run(segments, plans)

    def kernel_event(self, kp: KernelPlan):
        super().kernel_event(self.partial_plan(kp))

    # -- decision ------------------------------------------------------------------------------
    def partial_plan(self, kp: KernelPlan) -> KernelPlan:
        """``kp`` on every rank's own partial sums where it is linear in them, every other input is
        an argument scalar, and it writes plain whole arrays (``kp`` itself otherwise)."""
        whole = self.whole_on_partials(kp) if self.most > 1 else None
        if whole is None:
            return kp
        partial = []
        for arr, c in whole.arrays.items():
            x = self.root(arr)
            desc = self.sdfg.arrays[x]
            if c.write is not None:
                if (c.is_read or c.split_reduction or not c.write_exact or not c.write_covers or not self.fusable(x)
                        or arr in self.views):
                    return kp
            elif self.partial_everywhere(x):
                partial.append(arr)
            elif not (isinstance(desc, dt.Scalar) and not desc.transient):
                return kp
        return self.on_partials(whole) if self.linear_in(whole, partial) else kp

    def on_partials(self, kp: KernelPlan) -> KernelPlan:
        """``kp`` on every rank of the widest grid, on the ranks' own partial sums."""
        self.partial_kernels.add(kp.kernel.index)
        return self.on_every_rank(kp)

    def on_every_rank(self, kp: KernelPlan) -> KernelPlan:
        """``kp`` with the replicated grid axis: all its iterations on every rank of the widest grid."""
        return dataclasses.replace(kp, grid=tuple(kp.grid) + (self.most,),
                                   rank_syms=tuple(kp.rank_syms) + (dc.sym(REPLICA_AXIS),))

    def whole_on_partials(self, kp: KernelPlan) -> Optional[KernelPlan]:
        """The unsplit plan of the map kernel ``kp`` where running it on every rank's own partial
        sums may pay: some inputs are partial sums on every rank, none of them is used again, and
        the one output is no larger than they are (one reduction of it instead of one per input)."""
        if kp.kernel.kind != "map" or kp.kernel.runtime_symbols:
            return None
        partial, size = [], sympy.Integer(0)
        for arr, c in kp.arrays.items():
            x = self.root(arr)
            if c.write is None and c.is_read and self.partial_everywhere(x):
                if arr in self.views or self.used_later(x, kp.kernel.state):
                    return None
                partial.append(x)
                size += sympy.sympify(self.sdfg.arrays[x].total_size)
        outputs = [self.root(a) for a, c in kp.arrays.items() if c.write is not None]
        if not partial or len(outputs) != 1 or (
                size - sympy.sympify(self.sdfg.arrays[outputs[0]].total_size)).is_nonnegative is not True:
            return None
        return kp if kp.nranks == 1 else kernel_constraints(kp.kernel, {})

    def used_later(self, x: str, state) -> bool:
        """``x`` is used after the kernel being rewritten: by a later event of the segment, or after
        it (``outlives``)."""
        for ev in self.future:
            if x in (self.touches(ev[1]) if ev[0] == "kernel" else {self.root(a) for a in ev[1]}):
                return True
        return self.outlives(x, state)

    def outlives(self, x: str, state) -> bool:
        """``x`` is used after the segment: the program's arguments (straight-line programs)."""
        return not self.sdfg.arrays[x].transient or not self.linear

    def whole_on_all(self, h, x: str) -> bool:
        """Every rank of the widest grid holds all of ``x`` in holding ``h``."""
        n = 1
        for g in h.grid:
            n *= g
        syms = {str(s) for s, g in zip(h.rank_syms, h.grid) if g > 1}
        shape = self.sdfg.arrays[x].shape
        used = [{str(f) for se in box for e in se for f in sympy.sympify(e).free_symbols} for box in h.boxes]
        return n >= self.most and any(box_covers(box, shape) and not syms & u for box, u in zip(h.boxes, used))

    def partial_everywhere(self, x: str) -> bool:
        """``x`` is held as partial sums, the whole array on every rank (a batch-split reduction's result)."""
        st = self.data.get(x)
        h = st.holdings[-1] if st is not None and st.holdings else None
        return h is not None and h.layout.op == "sum" and h.kind in ("map", "library") and self.whole_on_all(h, x)

    def linear_in(self, kp: KernelPlan, arrays) -> bool:
        """The kernel's outputs are linear in the inputs ``arrays`` (analysis/linearity.py)."""
        from ..analysis.linearity import kernel_linear
        return kernel_linear(kp.kernel, set(arrays))

    # -- rewriting -----------------------------------------------------------------------------
    def members_only(self, kp: KernelPlan):
        if kp.kernel.index not in self.partial_kernels:
            super().members_only(kp)        # (every rank runs all iterations on partial sums)

    def write_output(self, kp, arr, c, state, lw, dst_node):
        """A kernel run on every rank's partial sums holds partial sums of its output (summed where
        a whole value is needed: a Reduce_scatter into a split reader, a Reduce to rank 0)."""
        if kp.kernel.index not in self.partial_kernels:
            return super().write_output(kp, arr, c, state, lw, dst_node)
        st = self.state_of(arr)
        st.holdings, st.root_valid = [self.holding(kp, arr, lw.data, c, [c.write], "sum", state, lw)], False
        if self.needs_gather(arr):
            self.dm(state, self.spec(kp, "reduce", arr, lw.data, c, [c.write], op="sum", acc=False), lw, dst_node)
            st.root_valid = True

    def read_input(self, kp, arr, c: ArrayConstraint, state, src_node, local_of, boxes=None):
        """A kernel on partial sums reads each rank's own partial sums as they are (a copy within
        the rank at most)."""
        st = self.data.get(self.root(arr))
        if kp.kernel.index in self.partial_kernels and c.write is None and st is not None and st.holdings \
                and st.holdings[-1].partial:
            h = st.holdings[-1]
            plain = dataclasses.replace(h, layout=dataclasses.replace(h.layout, op=None))
            if self.can_alias(plain, kp, c, arr in self.views):
                return self.holder_node(h, state), h.layout.local
            local = local_of()
            lr = state.add_access(local)
            self.dm(state, self.spec(kp, "redist", arr, local, c, c.reads if boxes is None else boxes,
                                     source=plain.layout), self.holder_node(h, state), lr)
            return lr, local
        return super().read_input(kp, arr, c, state, src_node, local_of, boxes)
