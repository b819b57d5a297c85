"""The program's boundary in the loop-aware rewrite: entering and leaving, and distributed placement.

``BoundarySteps`` is the part of ``loops.MachineRewriter`` that works at the program's start and
end: it scatters the homes of the arrays the program keeps distributed once on entry and gathers
the written ones once on exit, and for arguments the user passes already distributed
(``placement="distributed"``, docs/placement.md) it makes the argument a per-rank block: the home
buffer itself where every rank's buffer provably is its owned block, a block copied into the
home on entry (and back on exit) otherwise.
"""
from __future__ import annotations

from .. import dace_compat as dc
from ..solver.homes import owns_anchor_blocks
from ..values.exprs import same_rank_blocks
from ..values.plan import ALL_HOME, ROOT_HOME, HomeSpec, Layout

__all__ = ["BoundarySteps"]


class BoundarySteps:
    """Entry and exit steps and placed arguments (a mixin of ``loops.MachineRewriter``, whose
    homes, layouts and step helpers it uses)."""

    def enter_and_exit(self):
        """Scatter the homes of the program's arrays once at the start, gather them once at the end."""
        sdfg = self.sdfg
        self.repeats = ("1", False)
        sinks = [s for s in sdfg.nodes() if sdfg.out_degree(s) == 0]
        self.place_arguments()
        args = [x for x in self.homes if not sdfg.arrays[x].transient or x in self.boundary]
        repl_args = [x for x in sorted(self.repl) if not sdfg.arrays[x].transient]
        if self.placed:
            # Distributed placement: every rank passes the one-element arguments (the learning
            # rate, a step counter) with the same value, so none is broadcast from rank 0 on entry;
            # the runtime refuses a call that leaves one out on a rank (``Lowered.replicas``).
            self.replicas = tuple(x for x in repl_args if not x.startswith("__return"))
            repl_args = []
        if args or repl_args:
            enter = sdfg.add_state_before(sdfg.start_state, "distsdfg_enter", is_start_block=True)
            self.last, self.readers = {}, {}
            for x in args:
                h = self.homes[x]
                if h.buffer == x or x.startswith("__return"):   # the argument is the home / a return value
                    continue
                src = self.boundary_layout(x) if x in self.boundary else self.whole(x, ROOT_HOME)
                self.dm(enter, self.raw_step(x, src, self.home_layout(x)), enter.add_read(x),
                        enter.add_access(h.buffer))
            for x in repl_args:
                self.dm(enter, self.raw_step(x, self.whole(x, ROOT_HOME), self.whole(x, ALL_HOME), inplace=True),
                        enter.add_read(x), enter.add_write(x))
        out = [x for x in args if x in self.written and self.homes[x].buffer != x]
        if out:
            for sink in sinks:
                leave = sdfg.add_state_after(sink, "distsdfg_exit")
                self.last, self.readers = {}, {}
                for x in out:
                    h = self.homes[x]
                    dst = self.boundary_layout(x) if x in self.boundary else self.whole(x, ROOT_HOME)
                    self.dm(leave, self.raw_step(x, self.home_layout(x), dst),
                            leave.add_read(h.buffer), leave.add_write(x))

    # -- distributed placement ------------------------------------------------------------------
    def boundary_layout(self, x: str) -> Layout:
        return Layout(x, f"{x} as passed", (), (), (), (), (), None, (), self.boundary[x])

    def anchor_blocks(self, anchor: Layout, access: Layout) -> bool:
        """Whether ``access`` gives every rank the anchor's block. The device code path stages only
        transient homes to the GPU (``gpu.OffloadKernels``): there an argument stays the home buffer
        only where every kernel names the anchor's very grid, rank symbols and boxes."""
        if getattr(self, "device", False):
            return (access.grid, access.rank_syms, access.boxes) == (anchor.grid, anchor.rank_syms, anchor.boxes)
        return same_rank_blocks(anchor, access)

    def place_arguments(self):
        """Make each placed argument a per-rank block: its home's owned block, passed by the user.

        Whatever still uses the program's whole array (code that runs on rank 0, a condition)
        gets a full-size transient stand-in, filled from the home when needed. The argument *is*
        the home buffer when every rank's buffer provably equals its owned block, the block
        ``distsdfg.layout`` tells the user to pass: every kernel uses the anchor's blocks
        (``exprs.same_rank_blocks``: no ghost cells) and the owned blocks contain them
        (``homes.owns_anchor_blocks``; not so for reads at a stride, ``A[2 * i]``, whose blocks
        leave gaps, so that the owners get even rows). Otherwise the argument holds the owned
        block and the home buffer is filled from it on entry (a local copy, or messages where the
        buffer reaches into other ranks' blocks) and copied back on exit.
        """
        sdfg = self.sdfg
        # The renames in two batches of one walk of the SDFG each (``dace_compat.rename_data``):
        # every argument to its stand-in, then the home buffers that become arguments.
        stand_ins = {}
        for x in sorted(self.placed):
            stand_in = f"__dsdfg_whole_{x.strip('_')}"
            while stand_in in sdfg.arrays or stand_in in stand_ins.values():
                stand_in += "_"
            stand_ins[x] = stand_in
        dc.rename_data(sdfg, stand_ins)
        homes = {}
        for x in sorted(self.placed):
            h = self.homes[x]
            desc = sdfg.arrays[stand_ins[x]]
            desc.transient = True
            self.touched.add(stand_ins[x])
            sizes = {str(s) for n in h.global_shape for s in dc.symbolic.pystr_to_symbolic(n).free_symbols}
            if not h.accesses or (all(self.anchor_blocks(h.anchor, a) for a in h.accesses)
                                  and owns_anchor_blocks(h.anchor, sizes)):
                # Kernels index the home only within the owned blocks: no ghost cells, no gaps.
                homes[h.buffer] = x
                self.boundary[x] = h.name
                continue
            name = f"{h.name}b"
            osyms, ssyms = self.buffer_symbols(name, len(desc.shape))
            sdfg.add_array(x, [dc.sym(s) for s in ssyms], desc.dtype)
            self.extra_homes.append(HomeSpec(name, x, x, h.global_shape, h.anchor, (), osyms, ssyms, boundary=True))
            self.boundary[x] = name
        dc.rename_data(sdfg, homes)
        for buffer, x in homes.items():
            sdfg.arrays[x].transient = False
            self.homes[x].buffer = x
