"""Replicated kernels: a small kernel whose inputs every rank holds runs on every rank.

A kernel the schedule leaves on one rank (a grid of ones) runs on rank 0, and its results travel
to the ranks that read them. When every rank of the widest grid already holds all its inputs
whole (it reads none, like ``arange``; a one-element value; the output of another replicated
kernel; a home buffer already filled whole on every rank, like a ZeRO-1 parameter gathered for a
layer norm; a read-only argument that every rank passes whole), computing it on every rank moves
nothing, and its readers find its output on their own rank. ``ReplicatedKernels`` (a mixin of
``loops.MachineRewriter``) gives such a kernel a grid with one more axis, over ``P`` ranks, that
no map parameter uses: every rank runs all iterations on whole local buffers, and the steps that
fill and read them are planned with that grid like any other kernel's (copies within a rank
where the data is there). Where an input is missing on some ranks (a home split by rows), the
kernel is replicated only when fetching it whole to every rank moves no more bytes than running
it on rank 0 would: rank 0's fetch of what it lacks plus the outputs sent out
(``worth_replicating``).

**Partial sums.** A kernel linear in inputs held as partial sums on every rank (a batch-split
reduction's result; ``analysis/linearity.py``), whose other inputs every rank holds, also runs on
every rank, on each rank's own partial sums: its output is partial sums in turn, summed once where a
reader needs the sum (``partial_sums.PartialKernels``, shared with the straight-line rewriter; a
kernel the schedule splits runs unsplit there where that pays, ``whole_on_partials``). A home left
as such partial sums at the end of a state that the next one follows directly stays unsummed into
that state (``deferred``), and so on along a straight chain of states until a kernel reads it (GPT's
tied gradient: ``lm_head``'s product in one state, added to the lookup's 27 states later), and a
transient home no later state uses is not summed into its home at all (``dead_after``).

Example, 2 ranks, ZeRO-1 (GPT's position embedding): ``pos = arange(T)`` runs on both ranks
(nothing moves), ``wpe[pos]`` gathers the row-split ``wpe`` on both (``T C`` elements, DDP's
share) instead of fetching rank 1's rows to rank 0 and sending the ``T x C`` result to rank 1;
in the backward, the batch sum of the gradient stays partial through ``where(valid, g, 0)`` and
``onehot(pos)^T @ g`` on both ranks and is reduce-scattered once into the update's rows.
"""
from __future__ import annotations

from typing import Optional

import sympy
from dace import data as dt

from ..analysis.constraints import ArrayConstraint, KernelPlan
from ..values.plan import ALL_HOME
from .partial_sums import REPLICA_AXIS, PartialKernels

__all__ = ["REPLICA_AXIS", "ReplicatedKernels", "replicated_layout_boxes"]


def replicated_layout_boxes(shape) -> tuple:
    """The one box of a whole array of ``shape`` (what every rank of a replicated grid holds)."""
    return (tuple((sympy.Integer(0), sympy.sympify(s) - 1) for s in shape),)


class ReplicatedKernels(PartialKernels):
    """Which unsplit kernels run on every rank, and their reads and writes (a mixin of ``MachineRewriter``)."""

    # -- decision ------------------------------------------------------------------------------
    def replicated_plan(self, kp: KernelPlan) -> KernelPlan:
        """``kp`` with the replicated grid when it is worth it (``kp`` itself otherwise)."""
        if kp.nranks != 1 and self.most > 1:      # split: unsplit on partial sums where that pays
            whole = self.whole_on_partials(kp)
            planned = kp if whole is None else self.replicated_plan(whole)
            return kp if planned is whole else planned
        if kp.nranks != 1 or self.most <= 1 or kp.kernel.runtime_symbols or kp.kernel.kind not in ("map", "library"):
            return kp
        missing, outputs, partial = [], [], []   # inputs fetched whole to every rank; partial sums
        for arr, c in kp.arrays.items():
            x = self.root(arr)
            if c.write is not None:
                if c.is_read or c.split_reduction or not c.write_exact or not c.write_covers or x in self.placed \
                        or isinstance(self.sdfg.arrays[x], dt.Scalar):
                    return kp
                outputs.append(x)
                continue
            there = self.everywhere(x)
            if there is None:
                if not self.partial_everywhere(x):
                    return kp
                partial.append(arr)
            elif not there:
                missing.append(x)
        if partial:
            # Partial sums in, partial sums out: only where the kernel is linear in them and its
            # outputs are plain buffers (a map writes a home in place; one-element arrays are summed
            # where they are written).
            if missing or not self.linear_in(kp, partial) or any(
                    x in self.repl or (kp.kernel.kind == "map" and x in self.homes) for x in outputs):
                return kp
        elif not self.worth_replicating(missing, outputs):
            return kp
        if partial:
            return self.on_partials(kp)
        self.replicated_kernels.add(kp.kernel.index)
        return self.on_every_rank(kp)

    def everywhere(self, x: str) -> Optional[bool]:
        """Whether every rank holds ``x``'s current value whole (None: partial sums)."""
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
        return h.kind == "repl" or self.whole_on_all(h, x)

    def partial_plan(self, kp: KernelPlan) -> KernelPlan:
        return kp           # decided by ``replicated_plan`` (with homes and replicated kernels)

    def outlives(self, x: str, state) -> bool:
        """``x`` is used in a later state (or a loop), or is an argument (``note_last_uses``)."""
        last = self.last_use.get(x, 0)
        return not self.sdfg.arrays[x].transient or x in self.placed or last is None or last > self.state_order[state]

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

    def deferred(self, x: str) -> bool:
        """Home array ``x`` is left as partial sums, the whole array on every rank, by a state that the
        next one follows directly (``following``): they are summed into the home at that state's end
        instead (or where a kernel there reads them whole), so that a kernel there that is linear in
        them runs on every rank's own partial sums, and they are summed once, after it. Still partial
        at that state's end (no kernel read them), they are carried on, along a straight chain of
        states, to the first reader (or summed where the chain ends)."""
        st = self.data.get(x)
        return (self.following is not None and st is not None and bool(st.holdings) and not self.has_home(x)
                and self.partial_everywhere(x))

    def note_last_uses(self, states, events, trips):
        """Per array, the last state (in lowering order) that uses it; arrays used in a loop: none."""
        self.last_use = {}
        for i, st in enumerate(states):
            looped = trips.get(st, ("1", False))[0] != "1"
            for ev in events[st]:
                arrays = ev[1].arrays if ev[0] == "kernel" else ev[1]
                for a in arrays:
                    x = self.root(a)
                    self.last_use[x] = None if looped or self.last_use.get(x, 0) is None else i
        self.state_order = {st: i for i, st in enumerate(states)}

    def dead_after(self, x: str, state) -> bool:
        """No later state uses the transient home array ``x``: its value need not reach its home."""
        last = self.last_use.get(x)
        desc = self.sdfg.arrays[x]
        return desc.transient and x not in self.placed and last is not None and last <= self.state_order[state]

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
