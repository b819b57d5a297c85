"""The lowering pass: rank-tile kernels, give them local buffers, and insert DistributedMemlet nodes."""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Dict, List, Optional, Tuple

import dace
import numpy as np
import sympy
from dace import subsets
from dace.sdfg import SDFG, SDFGState, nodes

from . import dace_compat as dc
from .constraints import ArrayConstraint, KernelPlan, kernel_constraints
from .errors import DistributedLoweringError, ScheduleError, UnsupportedProgramError
from .kernels import Kernel, find_kernels
from .mpi import DistributedMemlet
from .plan import StepSpec
from .schedule import Schedule

__all__ = ["Lowered", "lower_sdfg", "PLAN_ARRAY", "PLAN_LEN"]

PLAN_ARRAY = "__dsdfg_plan"
PLAN_LEN = "__dsdfg_plan_len"


@dataclasses.dataclass
class KernelGrid:
    """What the runtime needs of one kernel: its grid and the symbols of its rank coordinates."""
    index: int
    label: str
    keys: Tuple[str, ...]
    grid: Tuple[int, ...]
    rank_syms: Tuple[str, ...]


@dataclasses.dataclass
class Lowered:
    """Everything ``lower`` decided, kept on the SDFG for ``compile`` and ``comm_report``."""
    schedule: Schedule
    original_name: str
    steps: List[StepSpec]
    kernels: List[KernelGrid]
    even_checks: List[Tuple[str, int, str, int]]   # (map key, axis, extent expr, parts)
    target: str = "cpu"

    @property
    def nprocs(self) -> int:
        return max([int(np.prod(k.grid)) for k in self.kernels] + [1])


def _local_name(sdfg: SDFG, arr: str, k: int) -> str:
    base = f"__dsdfg_{arr.strip('_')}_k{k}"
    name, n = base, 1
    while name in sdfg.arrays:
        n += 1
        name = f"{base}_{n}"
    return name


class _Rewriter:
    def __init__(self, sdfg: SDFG):
        self.sdfg = sdfg
        self.steps: List[StepSpec] = []

    # -- helpers --------------------------------------------------------------------------------
    def spec(self, kp: KernelPlan, kind: str, arr: str, local: str, c: ArrayConstraint, boxes, *, op=None,
             acc=False) -> StepSpec:
        desc = self.sdfg.arrays[arr]
        np_dtype = np.dtype(desc.dtype.as_numpy_dtype())
        s = StepSpec(
            index=len(self.steps), kind=kind, array=arr, local=local, kernel=kp.kernel.index,
            kernel_label=kp.kernel.label, dtype=np_dtype.name, itemsize=np_dtype.itemsize, grid=kp.grid,
            rank_syms=tuple(str(s) if g > 1 else "" for s, g in zip(kp.rank_syms, kp.grid)),
            boxes=tuple(tuple((str(b), str(e)) for b, e in box) for box in boxes),
            origin=tuple(str(o) for o in c.alloc_start), local_shape=tuple(str(s) for s in c.alloc_shape),
            global_shape=tuple(str(s) for s in desc.shape), op=op, acc=acc, exact=c.write_exact)
        self.steps.append(s)
        return s

    def dm(self, state: SDFGState, spec: StepSpec, src: Optional[nodes.AccessNode], dst: nodes.AccessNode):
        node = DistributedMemlet(f"dm_{spec.index}_{spec.kind}_{spec.array.strip('_')}", step=spec.index,
                                 kind=spec.kind, array=spec.array, has_input=src is not None)
        state.add_node(node)
        plan = state.add_read(PLAN_ARRAY)
        state.add_edge(plan, None, node, "_plan", dace.Memlet.from_array(PLAN_ARRAY, self.sdfg.arrays[PLAN_ARRAY]))
        if src is not None:
            state.add_edge(src, None, node, "_in", dace.Memlet.from_array(src.data, self.sdfg.arrays[src.data]))
        state.add_edge(node, "_out", dst, None, dace.Memlet.from_array(dst.data, self.sdfg.arrays[dst.data]))
        return node

    def add_local(self, kp: KernelPlan, arr: str, c: ArrayConstraint, *, offset: bool) -> str:
        desc = self.sdfg.arrays[arr]
        name = _local_name(self.sdfg, arr, kp.kernel.index)
        off = [-sympy.sympify(s) for s in c.alloc_start] if offset else None
        self.sdfg.add_array(name, [sympy.sympify(s) for s in c.alloc_shape], desc.dtype, transient=True,
                            offset=off)
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

    def pre_steps(self, state, kp, arr, c, local, target):
        """Local buffer initialisation the kernel needs before it runs (identity fill or read-modify-write)."""
        if c.write is None or c.is_read:
            return
        pre = None
        if c.partial and not c.init_covered:
            pre = state.add_access(local)
            self.dm(state, self.spec(kp, "fill", arr, local, c, [c.write], op=c.op), None, pre)
        elif not c.partial and not c.write_exact:
            pre = state.add_access(local)
            src = self.upstream_source(state, arr, target)
            self.dm(state, self.spec(kp, "scatter", arr, local, c, [c.write]), src, pre)
        if pre is not None:
            state.add_nedge(pre, target, dace.Memlet())

    def write_step(self, kp, arr, local, c):
        if c.partial:
            return self.spec(kp, "reduce", arr, local, c, [c.write], op=c.op, acc=not c.init_covered)
        return self.spec(kp, "gather", arr, local, c, [c.write])

    # -- kernels --------------------------------------------------------------------------------
    def map_kernel(self, kp: KernelPlan):
        k = kp.kernel
        state, me = k.state, k.node
        mx = state.exit_node(me)
        amap = k.maps[0]
        me.map.range = kp.tiled_range(amap, clamp=True)
        inner = dc.scope_edges(state, me)
        for arr, c in kp.arrays.items():
            local = self.add_local(kp, arr, c, offset=True)
            box = subsets.Range([(s, sympy.sympify(s) + sympy.sympify(n) - 1, 1)
                                 for s, n in zip(c.alloc_start, c.alloc_shape)])
            for e in inner:
                if e.data.data == arr:
                    e.data.data = local
            if c.is_read:
                ins = [e for e in state.in_edges(me) if not e.data.is_empty() and e.data.data == arr]
                lr = state.add_access(local)
                self.dm(state, self.spec(kp, "scatter", arr, local, c, c.reads), ins[0].src, lr)
                for e in ins:
                    state.add_edge(lr, None, me, e.dst_conn, dace.Memlet(data=local, subset=box))
                    state.remove_edge(e)
            self.pre_steps(state, kp, arr, c, local, me)
            if c.write is not None:
                outs = [e for e in state.out_edges(mx) if not e.data.is_empty() and e.data.data == arr]
                lw = state.add_access(local)
                for e in outs:
                    state.add_edge(mx, e.src_conn, lw, None, dace.Memlet(data=local, subset=box,
                                                                          wcr=e.data.wcr if c.partial else None))
                    state.remove_edge(e)
                self.dm(state, self.write_step(kp, arr, local, c), lw, outs[0].dst)
                for e in outs[1:]:
                    if state.degree(e.dst) == 0:
                        state.remove_node(e.dst)

    def library_kernel(self, kp: KernelPlan):
        k = kp.kernel
        state, node = k.state, k.node
        locals_: Dict[str, str] = {}
        for arr, c in kp.arrays.items():
            locals_[arr] = self.add_local(kp, arr, c, offset=False)
        for e in [e for e in state.in_edges(node) if not e.data.is_empty()]:
            arr = e.data.data
            c, local = kp.arrays[arr], locals_[arr]
            lr = state.add_access(local)
            self.dm(state, self.spec(kp, "scatter", arr, local, c, c.reads or [c.write]), e.src, lr)
            state.add_edge(lr, None, node, e.dst_conn, dace.Memlet.from_array(local, self.sdfg.arrays[local]))
            state.remove_edge(e)
        for arr, c in kp.arrays.items():
            self.pre_steps(state, kp, arr, c, locals_[arr], node)
        for e in [e for e in state.out_edges(node) if not e.data.is_empty()]:
            arr = e.data.data
            c, local = kp.arrays[arr], locals_[arr]
            lw = state.add_access(local)
            state.add_edge(node, e.src_conn, lw, None, dace.Memlet.from_array(local, self.sdfg.arrays[local]))
            self.dm(state, self.write_step(kp, arr, local, c), lw, e.dst)
            state.remove_edge(e)


def _schedule_hash(sdfg_name: str, schedule: Schedule, target: str) -> str:
    h = hashlib.sha1(f"{sdfg_name}|{schedule.to_json()}|{target}".encode()).hexdigest()
    return h[:10]


def lower_sdfg(sdfg: SDFG, schedule: Schedule, *, target: str = "cpu") -> SDFG:
    if getattr(sdfg, "_distsdfg", None) is not None:
        raise DistributedLoweringError(f"SDFG `{sdfg.name}` is already lowered; lower a fresh copy "
                                       f"(prog.to_sdfg()) for another schedule")
    dc.repair_init_accumulate_races(sdfg)
    kernels = find_kernels(sdfg)
    known = {m.info.key: len(m.info.params) for k in kernels for m in k.maps}
    schedule.validate_for(known, sdfg_name=sdfg.name)
    grids = schedule.as_dict()
    plans: List[KernelPlan] = []
    for k in kernels:
        if k.kind == "opaque":
            continue
        plans.append(kernel_constraints(k, grids))

    even_checks = []
    for kp in plans:
        for axis, extent in kp.even_axes:
            key = max(kp.kernel.maps, key=lambda m: len(m.info.params)).info.key
            parts = kp.grid[axis]
            ext = sympy.sympify(extent)
            if ext.is_Number:
                if int(ext) % parts:
                    raise ScheduleError(
                        f"map `{key}` axis {axis} (extent {int(ext)}) is split {parts} ways, which does not divide "
                        f"{int(ext)}; `{kp.kernel.label}` reduces over this axis as a library node and needs even "
                        f"blocks: use a grid dimension that divides {int(ext)}")
            else:
                even_checks.append((key, axis, str(ext), parts))

    sdfg.add_symbol(PLAN_LEN, dace.int64)
    sdfg.add_array(PLAN_ARRAY, [dc.sym(PLAN_LEN)], dace.int64)
    rw = _Rewriter(sdfg)
    kgrids = []
    for kp in plans:
        for s, g in zip(kp.rank_syms, kp.grid):
            if g > 1 and str(s) not in sdfg.symbols:
                sdfg.add_symbol(str(s), dace.int64)
        if kp.kernel.kind == "map":
            rw.map_kernel(kp)
        else:
            rw.library_kernel(kp)
        kgrids.append(KernelGrid(kp.kernel.index, kp.kernel.label, tuple(m.info.key for m in kp.kernel.maps),
                                 kp.grid, tuple(str(s) if g > 1 else "" for s, g in zip(kp.rank_syms, kp.grid))))
    original = sdfg.name
    sdfg.name = f"{original}_d{_schedule_hash(original, schedule, target)}"
    sdfg._distsdfg = Lowered(schedule.with_sdfg(original) if schedule.sdfg is None else schedule, original,
                             rw.steps, kgrids, even_checks, target)
    sdfg.validate()
    return sdfg
