"""The rewrite of a tiled program: rank-local kernels with local buffers, and DistributedMemlet nodes
between them (``Rewriter``); ``pipeline.lower_sdfg`` runs it."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import dace
import numpy as np
import sympy
from dace import subsets
from dace.sdfg import SDFG, SDFGState, nodes

from .. import dace_compat as dc
from ..analysis.constraints import ArrayConstraint, KernelPlan
from ..errors import DistributedLoweringError
from ..mpi import DistributedMemlet
from ..mpi.distributed_memlet import step_node_name
from .nested_strides import restride_into
from .ordering import order_before
from .replicate import REPLICA_AXIS
from ..values.plan import Layout, StepSpec, axis_symbols, boxes_text
from .lowered import (COMM_ARG, PLAN_ARRAY, PLAN_LEN, RUNTIME_ARGS, ArrayState, Holding, KernelGrid,
                      Lowered, same_blocks)

__all__ = ["Lowered", "KernelGrid", "Rewriter", "PLAN_ARRAY", "PLAN_LEN", "COMM_ARG", "RUNTIME_ARGS"]

_IDENTITY = {"sum": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}


def _local_name(sdfg: SDFG, arr: str, k: int) -> str:
    base = f"__dsdfg_{arr.strip('_')}_k{k}"
    name, n = base, 1
    while name in sdfg.arrays:
        n += 1
        name = f"{base}_{n}"
    return name


class Rewriter:
    """Rewrites kernels in program order, keeping data distributed between them (thesis 4.5).

    Every kernel gets local buffers. A kernel's input comes from the array's latest distributed
    copy when there is one (a grid-to-grid ``redist`` step, or the very buffer when the layouts
    are provably equal), else from rank 0 (``scatter``). A kernel that writes a whole array
    leaves a distributed copy behind; it is gathered to rank 0 only when something there
    reads it next (a node we do not distribute, a read-modify-write kernel) or when the program
    ends and the array is not a transient.
    """

    def __init__(self, sdfg: SDFG, *, linear: bool, viewed: set, views: Dict[str, str]):
        self.sdfg = sdfg
        self.views = views
        self.steps: List[StepSpec] = []
        self.members: Dict[int, str] = {}     # kernel index -> its membership symbol (KernelGrid.member)
        self.linear = linear
        self.viewed = viewed
        self.data: Dict[str, ArrayState] = {}
        self.future: List[Tuple] = []     # remaining events of the segment, for look-ahead
        self.touched: set = set()         # global arrays whose access nodes we edited
        self.repeats: Tuple[str, bool] = ("1", False)   # trip count of the state being rewritten
        self.global_locals: set = set()   # local buffers indexed with the array's global indices

    # -- helpers --------------------------------------------------------------------------------
    def root(self, arr: str) -> str:
        """The array a unit-dimension view stands for (the array itself otherwise)."""
        return self.views.get(arr, arr)

    def coords(self, arr: str, c: ArrayConstraint, boxes):
        """``(array, boxes, origin, local shape, view shape)``: a view's blocks stay in the view's
        coordinates and are mapped onto the array's when the plan is solved."""
        if arr not in self.views:
            return arr, boxes, c.alloc_start, c.alloc_shape, ()
        return (self.views[arr], boxes, c.alloc_start, c.alloc_shape,
                tuple(str(s) for s in self.sdfg.arrays[arr].shape))

    def spec(self, kp: KernelPlan, kind: str, arr: str, local: str, c: ArrayConstraint, boxes, *, op=None,
             acc=False, source: Optional[Layout] = None, home: str = "", inplace: bool = False,
             pad: bool = False) -> StepSpec:
        start, shape, view = c.alloc_start, c.alloc_shape, ()
        if kind == "redist":     # between distributed copies: named by the underlying array
            arr, boxes, start, shape, view = self.coords(arr, c, boxes)
        desc = self.sdfg.arrays[arr]
        np_dtype = np.dtype(desc.dtype.as_numpy_dtype())
        s = StepSpec(
            index=len(self.steps), kind=kind, array=arr, local=local, kernel=kp.kernel.index,
            kernel_label=kp.kernel.label, dtype=np_dtype.name, itemsize=np_dtype.itemsize, grid=kp.grid,
            rank_syms=axis_symbols(kp.rank_syms, kp.grid),
            boxes=boxes_text(boxes),
            origin=tuple(str(o) for o in start), local_shape=tuple(str(s) for s in shape),
            global_shape=tuple(str(s) for s in desc.shape), op=op, acc=acc, exact=c.write_exact, source=source,
            view_shape=view, global_strides=tuple(str(s) for s in desc.strides), home=home, inplace=inplace,
            repeats=self.repeats[0], at_most=self.repeats[1], pad=pad)
        self.steps.append(s)
        return s

    def dm(self, state: SDFGState, spec: StepSpec, src: Optional[nodes.AccessNode], dst: nodes.AccessNode):
        node = DistributedMemlet(step_node_name(spec.index, spec.kind, spec.array), step=spec.index,
                                 kind=spec.kind, array=spec.array, has_input=src is not None)
        state.add_node(node)
        plan = state.add_read(PLAN_ARRAY)
        state.add_edge(plan, None, node, "_plan", dace.Memlet.from_array(PLAN_ARRAY, self.sdfg.arrays[PLAN_ARRAY]))
        comm = state.add_read(COMM_ARG)
        state.add_edge(comm, None, node, "_comm", dace.Memlet.from_array(COMM_ARG, self.sdfg.arrays[COMM_ARG]))
        if src is not None:
            state.add_edge(src, None, node, "_in", dace.Memlet.from_array(src.data, self.sdfg.arrays[src.data]))
        state.add_edge(node, "_out", dst, None, dace.Memlet.from_array(dst.data, self.sdfg.arrays[dst.data]))
        return node

    def add_local(self, kp: KernelPlan, arr: str, c: ArrayConstraint, *, offset: bool) -> str:
        """A local buffer of ``arr`` for ``kp``: indexed from zero, or (``offset``) with the array's
        global indices (its first element is the global index ``c.alloc_start``)."""
        desc = self.sdfg.arrays[arr]
        name = _local_name(self.sdfg, arr, kp.kernel.index)
        off = [-sympy.sympify(s) for s in c.alloc_start] if offset else None
        self.sdfg.add_array(name, [sympy.sympify(s) for s in c.alloc_shape], desc.dtype, transient=True,
                            offset=off)
        if offset:
            self.global_locals.add(name)
        return name

    def upstream_source(self, state: SDFGState, arr: str, before: nodes.Node) -> nodes.AccessNode:
        """The access node holding ``arr``'s latest value before ``before`` runs (or a fresh read)."""
        import networkx as nx
        cands = [n for n in state.data_nodes() if n.data == arr and state.in_degree(n) > 0
                 and not nx.has_path(state.nx, before, n)]
        if cands:
            order = {n: i for i, n in enumerate(dc.top_level_nodes(state))}
            return max(cands, key=lambda n: order.get(n, -1))
        return state.add_read(arr)

    def layout(self, kp: KernelPlan, arr: str, local: str, c: ArrayConstraint, boxes, op=None) -> Layout:
        _, boxes, start, shape, view = self.coords(arr, c, boxes)
        return Layout(local, kp.kernel.label, kp.grid,
                      axis_symbols(kp.rank_syms, kp.grid),
                      boxes_text(boxes),
                      tuple(str(o) for o in start), tuple(str(s) for s in shape), op, view)

    def holding(self, kp, arr, local, c, boxes, op, state, node) -> Holding:
        # Through a view the buffer's indexing differs from the array's: never alias it ("kind").
        kind = self.indexing(kp) + ("+view" if arr in self.views else "")
        return Holding(self.layout(kp, arr, local, c, boxes, op), kind, kp.grid, kp.rank_syms,
                       tuple(c.alloc_start), tuple(c.alloc_shape), tuple(boxes), state, node)

    def state_of(self, arr: str) -> ArrayState:
        return self.data.setdefault(self.root(arr), ArrayState())

    # -- data flow between kernels ----------------------------------------------------------------
    def fusable(self, arr: str) -> bool:
        arr = self.root(arr)
        return arr not in self.viewed and not isinstance(self.sdfg.arrays[arr], dace.data.Scalar)

    def touches(self, kp: KernelPlan) -> Dict[str, ArrayConstraint]:
        return {self.root(a): c for a, c in kp.arrays.items()}

    def write_mode(self, arr: str, c: ArrayConstraint) -> str:
        """How a kernel's write of ``arr`` is treated: 'hold' (its blocks become the array's distributed
        copy), 'acc' (it accumulates into the current value, which it reads first, into a copy it then
        holds) or 'root' (the result goes back to rank 0 at once)."""
        if not self.fusable(arr):
            return "root"
        if c.write_covers:
            return "hold"
        if c.partial and not c.init_covered and c.write_full and not c.is_read:
            return "acc"
        return "root"

    def next_use(self, arr: str) -> str:
        """What happens to ``arr`` next in this segment: 'hold' (a kernel overwrites it whole),
        'root' (something needs rank 0's copy) or 'end'. Kernel reads do not count."""
        arr = self.root(arr)
        for ev in self.future:
            if ev[0] == "kernel":
                c = self.touches(ev[1]).get(arr)
                if c is not None and c.write is not None:
                    return "root" if self.write_mode(arr, c) == "root" else "hold"
            else:
                use = self.root_event_use(ev, arr)
                if use is not None:
                    return use
        return "end"

    def root_event_use(self, ev: Tuple, arr: str) -> Optional[str]:
        """What a rank-0 event does to ``arr`` for ``next_use`` (None: nothing that counts); a read
        through a reshape view of ``arr`` (an einsum reading ``prod`` as ``(4, 36)``) is a use of it."""
        return "root" if arr in {self.root(a) for a in ev[1]} else None

    def needs_gather(self, arr: str) -> bool:
        nxt = self.next_use(arr)
        if nxt == "root":
            return True
        if nxt == "end":
            return not self.sdfg.arrays[self.root(arr)].transient or not self.linear
        return False

    def source_for(self, kp: KernelPlan, arr: str, c: ArrayConstraint) -> Optional[Holding]:
        st = self.data.get(self.root(arr))
        if st is None or not st.holdings or not self.fusable(arr):
            return None
        return st.holdings[-1]

    def can_alias(self, h: Holding, kp: KernelPlan, c: ArrayConstraint, arr_is_view: bool = False) -> bool:
        """The consumer can read the holder's buffer as is: same grid, same block, same indexing."""
        if h.partial or c.write is not None or arr_is_view or getattr(self, "no_alias", False):
            return False
        if h.kind != self.indexing(kp):
            # Map buffers are indexed from their block's origin, library buffers from zero: the
            # same buffer serves both only where every origin is zero (e.g. a grid of one rank).
            zero = all(sympy.sympify(o) == 0 for o in tuple(c.alloc_start) + tuple(h.alloc_start))
            if {h.kind, self.indexing(kp)} != {"map", "library"} or not zero:
                return False
        if len(c.reads) != 1 or len(h.boxes) != 1:
            return False
        return same_blocks(h, kp, c)

    def holder_node(self, h: Holding, state: SDFGState) -> nodes.AccessNode:
        return h.node if h.state is state else state.add_read(h.layout.local)

    def read_input(self, kp: KernelPlan, arr: str, c: ArrayConstraint, state: SDFGState, src_node, local_of,
                   boxes=None):
        """The access node a kernel reads ``arr`` from (its local buffer, filled here)."""
        boxes = c.reads if boxes is None else boxes
        h = self.source_for(kp, arr, c)
        if h is not None and c.is_read and self.can_alias(h, kp, c, arr in self.views):
            return self.holder_node(h, state), h.layout.local
        local = local_of()
        lr = state.add_access(local)
        if h is not None:
            self.dm(state, self.spec(kp, "redist", arr, local, c, boxes, source=h.layout), self.holder_node(h, state),
                    lr)
        else:
            if not self.state_of(arr).root_valid:
                raise DistributedLoweringError(f"internal: `{arr}` is neither on rank 0 nor distributed before "
                                               f"`{kp.kernel.label}`")
            if src_node is None:
                src_node = self.upstream_source(state, arr, kp.kernel.node)
            self.dm(state, self.spec(kp, "scatter", arr, local, c, boxes), src_node, lr)
        if c.write is None and c.read_covers and self.fusable(arr):
            self.state_of(arr).holdings.append(self.holding(kp, arr, local, c, c.reads, None, state, lr))
        return lr, local

    def write_output(self, kp: KernelPlan, arr: str, c: ArrayConstraint, state: SDFGState, lw, dst_node):
        st = self.state_of(arr)
        mode = self.write_mode(arr, c)
        if mode in ("hold", "acc"):
            op = c.op if c.split_reduction else None
            h = self.holding(kp, arr, lw.data, c, [c.write], op, state, lw)
            if kp.kernel.kind == "map" and mode == "hold" and op is None:
                h.const = dc.constant_map_value(state, kp.kernel.node)
            st.holdings = [h]
            st.root_valid = False
            if self.needs_gather(arr):
                if mode == "hold":
                    step = self.write_step(kp, arr, lw.data, c)
                elif op is not None:   # the blocks already hold the old value (once): a plain reduction
                    step = self.spec(kp, "reduce", arr, lw.data, c, [c.write], op=op, acc=False)
                else:
                    step = self.spec(kp, "gather", arr, lw.data, c, [c.write])
                self.dm(state, step, lw, dst_node)
                st.root_valid = True
        else:
            self.dm(state, self.write_step(kp, arr, lw.data, c), lw, dst_node)
            st.holdings, st.root_valid = [], True

    def root_access(self, arrays: set, writes: set):
        for arr in writes:
            self.state_of(arr).holdings = []
            self.state_of(arr).root_valid = True

    def pre_steps(self, state, kp, arr, c, local, target):
        """Local buffer initialisation the kernel needs before it runs (identity fill or read-modify-write)."""
        if c.write is None or c.is_read:
            return
        pre = None
        h = self.source_for(kp, arr, c)
        if self.write_mode(arr, c) == "acc" and h is not None and h.const == _IDENTITY[c.op]:
            # The array was just reset to the operator's identity (an einsum's reset map): the
            # accumulation can start from the identity on every rank, nothing to move.
            pre = state.add_access(local)
            self.dm(state, self.spec(kp, "fill", arr, local, c, [c.write], op=c.op), None, pre)
        elif self.write_mode(arr, c) == "acc":      # start from the current value of the block
            pre, _ = self.read_input(kp, arr, c, state, None, lambda: local, boxes=[c.write])
            if c.split_reduction:
                # Ranks that share the block each add a partial result: only the first keeps the
                # old value, the others start from the operator's identity.
                again = state.add_access(local)
                fill = self.dm(state, self.spec(kp, "fill", arr, local, c, [c.write], op=c.op, acc=True), None, again)
                state.add_nedge(pre, fill, dace.Memlet())
                pre = again
        elif c.partial and not c.init_covered:
            pre = state.add_access(local)
            self.dm(state, self.spec(kp, "fill", arr, local, c, [c.write], op=c.op), None, pre)
        elif not c.partial and not c.write_exact:
            pre = state.add_access(local)
            src = self.upstream_source(state, arr, target)
            self.dm(state, self.spec(kp, "scatter", arr, local, c, [c.write]), src, pre)
        if pre is not None:     # through a library node's inputs: a Reduce takes no extra edge
            order_before(state, pre, target)

    def write_step(self, kp, arr, local, c):
        if c.partial:
            return self.spec(kp, "reduce", arr, local, c, [c.write], op=c.op, acc=not c.init_covered)
        return self.spec(kp, "gather", arr, local, c, [c.write])

    def drop_if_isolated(self, state: SDFGState, node: nodes.AccessNode):
        """Remove ``node`` when nothing reads or writes it any more (with its unit views, which only
        connect it to itself)."""
        if node not in state.nodes() or not isinstance(node, nodes.AccessNode):
            return
        group, todo = {node}, [node]
        while todo:
            n = todo.pop()
            for e in state.all_edges(n):
                other = e.dst if e.src is n else e.src
                if not isinstance(other, nodes.AccessNode) or self.root(other.data) != self.root(n.data):
                    return          # still used by something else
                if other not in group:
                    group.add(other)
                    todo.append(other)
        for n in group:
            state.remove_node(n)

    # -- kernels --------------------------------------------------------------------------------
    def map_kernel(self, kp: KernelPlan):
        k = kp.kernel
        state, me = k.state, k.node
        mx = state.exit_node(me)
        amap = k.maps[0]
        me.map.range = kp.tiled_range(amap, clamp=True)
        if dc.accesses_indirectly(amap.accesses) or self.unoffset_buffers(kp):
            self.members_only(kp)
        inner = dc.scope_edges(state, me)
        for arr, c in kp.arrays.items():
            names = {}

            def local_of(arr=arr, c=c):
                if "local" not in names:
                    names["local"] = self.add_local(kp, arr, c, offset=True)
                return names["local"]

            ins = [e for e in state.in_edges(me) if not e.data.is_empty() and e.data.data == arr]
            box = subsets.Range([(s, sympy.sympify(s) + sympy.sympify(n) - 1, 1)
                                 for s, n in zip(c.alloc_start, c.alloc_shape)])
            if c.is_read:
                lr, local = self.read_input(kp, arr, c, state, ins[0].src if ins else None, local_of)
                if not ins:
                    state.add_nedge(lr, me, dace.Memlet())   # a conditional write's block, read first
                for e in ins:
                    state.add_edge(lr, None, me, e.dst_conn, dace.Memlet(data=local, subset=box))
                    state.remove_edge(e)
                    self.drop_if_isolated(state, e.src)
            else:
                local = local_of()
            for e in inner:
                if e.data.data == arr:
                    e.data.data = local
                    restride_into(e, self.sdfg.arrays[arr], self.sdfg.arrays[local])
            self.pre_steps(state, kp, arr, c, local, me)
            if c.write is not None:
                outs = [e for e in state.out_edges(mx) if not e.data.is_empty() and e.data.data == arr]
                lw = state.add_access(local)
                for e in outs:
                    state.add_edge(mx, e.src_conn, lw, None, dace.Memlet(data=local, subset=box,
                                                                          wcr=e.data.wcr if c.partial else None))
                    state.remove_edge(e)
                self.write_output(kp, arr, c, state, lw, outs[0].dst)
                for e in outs:
                    self.drop_if_isolated(state, e.dst)

    @staticmethod
    def unoffset_buffers(kp: KernelPlan) -> bool:
        """Some array is indexed by a split map parameter in a dimension where its local buffer does
        not start at the rank's block (allocated whole, e.g. for a triangular write ``L[i, 0:i+1]``,
        and indexed globally): a rank outside the grid would run iterations past that buffer."""
        syms = {str(x) for x in kp.rank_syms if x is not None}
        me = kp.kernel.node
        split = {p for p, (lo, hi, _) in zip(me.map.params, me.map.range.ranges)
                 if {str(x) for x in sympy.sympify(lo).free_symbols | sympy.sympify(hi).free_symbols} & syms}
        if not split:
            return False
        for e in dc.scope_edges(kp.kernel.state, me):
            c = kp.arrays.get(e.data.data)
            if c is None or e.data.subset is None or not c.alloc_start:
                continue
            for d, (lo, hi, _) in enumerate(e.data.subset.ranges):
                used = {str(x) for x in sympy.sympify(lo).free_symbols | sympy.sympify(hi).free_symbols}
                start = {str(x) for x in sympy.sympify(c.alloc_start[d]).free_symbols} if d < len(c.alloc_start) else set()
                if used & split and not start & syms:
                    return True
        return False

    def members_only(self, kp: KernelPlan):
        """Ranks outside the map kernel's grid run none of its iterations (a membership symbol,
        ``KernelGrid.member``, empties its first range there)."""
        me = kp.kernel.node
        if kp.kernel.index in self.members:
            return
        self.members[kp.kernel.index] = member = f"__dsdfg_k{kp.kernel.index}_in"
        self.sdfg.add_symbol(member, dace.int64)
        m = dc.sym(member)
        lo, hi, st = me.map.range.ranges[0]
        me.map.range = subsets.Range([(lo, m * hi + (1 - m) * (lo - st), st)] + list(me.map.range.ranges[1:]))

    def exact_library(self, kp: KernelPlan) -> bool:
        """Whether the library kernel runs on each rank's exact block (its memlets cut to the block's
        size, which may differ per rank) instead of whole local buffers of one size on every rank,
        padded where the grid does not divide an axis (``MachineRewriter``: where it reads home
        buffers in place)."""
        return False

    def indexing(self, kp: KernelPlan) -> str:
        """How ``kp`` indexes its local buffers: ``"map"`` from their block's origin (global indices;
        map kernels and exact library kernels), ``"library"`` from zero."""
        return "map" if kp.kernel.kind == "map" or self.exact_library(kp) else kp.kernel.kind

    def indexes_globally(self, buffer: str) -> bool:
        """Whether ``buffer`` is indexed with the array's global indices (a map kernel's or exact
        library kernel's local buffer, a home buffer)."""
        return buffer in self.global_locals

    def library_memlet(self, kp: KernelPlan, buffer: str, box, exact: bool) -> dace.Memlet:
        """The memlet between a library node and its buffer: the whole buffer, or (``exact``) the
        rank's block in it, empty on ranks whose block lies past the array's end."""
        desc = self.sdfg.arrays[buffer]
        if not exact or box is None:
            return dace.Memlet.from_array(buffer, desc)
        syms = {str(x) for x in kp.rank_syms if x is not None}
        ranges = []
        for s, e in box:
            s, e = sympy.sympify(s), sympy.sympify(e)
            if {str(x) for x in s.free_symbols | e.free_symbols} & syms:
                e = sympy.Max(s - 1, e)
            ranges.append((s, e, 1) if self.indexes_globally(buffer) else (0, e - s, 1))
        return dace.Memlet(data=buffer, subset=subsets.Range(ranges))

    def library_kernel(self, kp: KernelPlan):
        k = kp.kernel
        state, node = k.state, k.node
        locals_: Dict[str, str] = {}
        exact = self.exact_library(kp)

        def local_of(arr):
            if arr not in locals_:
                locals_[arr] = self.add_local(kp, arr, kp.arrays[arr], offset=exact)
            return locals_[arr]

        for e in [e for e in state.in_edges(node) if not e.data.is_empty()]:
            arr = e.data.data
            c = kp.arrays[arr]
            if arr in locals_ and c.write is None:     # a second connector reading the same array
                lr = state.add_read(locals_[arr])
            elif kp.pads(c) and not exact:
                lr = self.padded_input(kp, arr, c, state, e.src, local_of(arr))
            else:
                lr, locals_[arr] = self.read_input(kp, arr, c, state, e.src, lambda arr=arr: local_of(arr))
            state.add_edge(lr, None, node, e.dst_conn, self.library_memlet(kp, lr.data, c.reads[0], exact))
            state.remove_edge(e)
            self.drop_if_isolated(state, e.src)
        for arr, c in kp.arrays.items():
            if c.write is not None:
                self.pre_steps(state, kp, arr, c, local_of(arr), node)
        for e in [e for e in state.out_edges(node) if not e.data.is_empty()]:
            arr = e.data.data
            c = kp.arrays[arr]
            lw = state.add_access(local_of(arr))
            state.add_edge(node, e.src_conn, lw, None, self.library_memlet(kp, lw.data, c.write, exact))
            state.remove_edge(e)
            self.write_output(kp, arr, c, state, lw, e.dst)
            self.drop_if_isolated(state, e.dst)

    def padded_input(self, kp: KernelPlan, arr: str, c: ArrayConstraint, state: SDFGState, src_node, local: str):
        """``arr``'s local buffer filled with the operator's identity, then its block written into it (never
        another kernel's buffer: the padding must hold the identity, whatever sits there)."""
        pre = state.add_access(local)
        self.dm(state, self.spec(kp, "fill", arr, local, c, c.reads, op=kp.pad_op, pad=True), None, pre)
        self.no_alias = True
        try:
            lr, _ = self.read_input(kp, arr, c, state, src_node, lambda: local)
        finally:
            self.no_alias = False
        for e in state.in_edges(lr):
            state.add_nedge(pre, e.src, dace.Memlet())
        return lr

    # -- program order ----------------------------------------------------------------------------
    def events(self, states: List[SDFGState], plans: Dict[nodes.Node, KernelPlan]) -> List[Tuple]:
        """Kernels and rank-0 accesses of ``states`` in program order (before any rewriting)."""
        out: List[Tuple] = []
        for st in states:
            for n in dc.top_level_nodes(st):
                if n in plans:
                    out.append(("kernel", plans[n]))
                elif isinstance(n, nodes.AccessNode):
                    # A copy between arrays; a unit view and its array are one array here.
                    touched = {e.dst.data for e in st.out_edges(n) if isinstance(e.dst, nodes.AccessNode)
                               and self.root(e.dst.data) != self.root(n.data)}
                    if touched:
                        out.append(("root", touched | {n.data}, touched, n, st))
                elif not isinstance(n, (nodes.ExitNode,)):
                    reads = {e.data.data for e in st.in_edges(n) if not e.data.is_empty()}
                    writes = {e.data.data for e in st.out_edges(n) if not e.data.is_empty()}
                    if isinstance(n, nodes.EntryNode):      # a scope we do not distribute
                        ex = st.exit_node(n)
                        writes |= {e.data.data for e in st.out_edges(ex) if not e.data.is_empty()}
                    if reads or writes:
                        out.append(("root", reads | writes, writes, n, st))
            reads = dc.interstate_reads(self.sdfg, st)
            if reads:
                out.append(("root", reads, set(), None, st))
        return out

    def kernel_event(self, kp: KernelPlan):
        for s, g in zip(kp.rank_syms, kp.grid):
            if g > 1 and str(s) not in self.sdfg.symbols and str(s) != REPLICA_AXIS:
                self.sdfg.add_symbol(str(s), dace.int64)
        self.touched |= set(kp.arrays) | set(self.touches(kp))
        if kp.kernel.kind == "map":
            self.map_kernel(kp)
        else:
            self.library_kernel(kp)

    def root_event(self, ev: Tuple):
        self.root_access({self.root(a) for a in ev[1]}, {self.root(a) for a in ev[2]})

    def drain(self):
        """Rewrite the remaining events of the segment in order."""
        while self.future:
            ev = self.future.pop(0)
            if ev[0] == "kernel":
                self.kernel_event(ev[1])
            else:
                self.root_event(ev)

    def run(self, segments: List[List[SDFGState]], plans: Dict[nodes.Node, KernelPlan]):
        for states in segments:
            self.data = {}
            self.future = self.events(states, plans)
            self.drain()
