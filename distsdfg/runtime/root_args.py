"""What ranks other than 0 pass and get back when arrays live on rank 0 (root placement).

Rank 0 passes the program's arrays whole. The runtime's steps between rank 0's whole array and
the ranks' blocks (Scatterv, Gatherv, Reduce to rank 0, redistributions from or to rank 0's
copy) read and write that array on rank 0 only: the other ranks hand MPI a pointer it never
follows. So a non-root rank may leave such an argument out, or pass None, and the program gets
a one-element stand-in. An array that other code touches on every rank (a tasklet or nested
SDFG outside the distributed kernels, a branch condition, a copy kept on every rank such as a
replicated scalar) gets a zero-filled array of its full shape instead, as before. Results at
rank 0 are not allocated on the other ranks, and come back there as None.
"""
from __future__ import annotations

from typing import Dict, FrozenSet, Optional

import numpy as np
from dace import data as dt
from dace.sdfg import SDFG

from ..lowering.rewriter import PLAN_ARRAY, Lowered
from ..mpi import DistributedMemlet
from ..values.plan import ALL_HOME, StepSpec, evaluate

__all__ = ["RootArguments", "DeviceStandIn", "rank0_only_arrays", "check_blocks", "missing_replicas", "replica_values",
           "unequal_replicas"]


def _every_rank(step: StepSpec) -> bool:
    """The step reads or writes the program's array itself on every rank (not on rank 0 alone)."""
    return step.home == ALL_HOME or (step.source is not None and step.source.home == ALL_HOME)


def rank0_only_arrays(sdfg: SDFG, low: Lowered) -> FrozenSet[str]:
    """The argument arrays at rank 0 (return values included) that no code dereferences on other ranks."""
    args = {n for n, d in sdfg.arrays.items()
            if isinstance(d, dt.Array) and not d.transient and n != PLAN_ARRAY and n not in low.boundary}
    touched = set()
    for state in sdfg.all_states():
        for node in state.data_nodes():
            if node.data not in args:
                continue
            for e in state.all_edges(node):
                other = e.dst if e.src is node else e.src
                if e.data.is_empty():
                    continue
                if not isinstance(other, DistributedMemlet) or _every_rank(low.steps[other.step]):
                    touched.add(node.data)
    for e in sdfg.all_interstate_edges():
        touched |= e.data.read_symbols() & args
    for region in sdfg.all_control_flow_regions():      # loop and branch regions: their conditions
        if not isinstance(region, SDFG):
            touched |= set(map(str, region.used_symbols(all_symbols=True))) & args
    return frozenset(args - touched)


class DeviceStandIn:
    """What a non-root rank passes for an array rank 0 passes in device memory (``GPU_Global``, the
    device-argument variant: ``distsdfg.lowering.device_args``): the address of a host stand-in,
    offered as DaCe takes device arrays (``__cuda_array_interface__``). The steps on device buffers
    hand it to MPI on non-root ranks, which never follows it; a full-size stand-in (an array other
    code touches on every rank) is host memory that ``cudaMemcpyDefault`` copies from correctly."""

    def __init__(self, host: np.ndarray):
        self.host = host
        self.__cuda_array_interface__ = {"shape": host.shape, "typestr": host.dtype.str, "version": 3,
                                         "data": (host.__array_interface__["data"][0], False), "strides": None}


class RootArguments:
    """One program's arguments at rank 0: what stands in for them on the other ranks."""

    def __init__(self, sdfg: SDFG, low: Lowered):
        self.only_root = rank0_only_arrays(sdfg, low)
        self.arrays = {n: d for n, d in sdfg.arrays.items()
                       if isinstance(d, dt.Array) and not d.transient and n != PLAN_ARRAY and n not in low.boundary}
        self.returns = sorted(n for n, d in sdfg.arrays.items() if n.startswith("__return") and not d.transient)
        self.placed = frozenset(low.boundary)
        self._tiny: Dict[str, np.ndarray] = {}

    def stand_in(self, name: str, values: Dict[str, int]) -> Optional[np.ndarray]:
        """What a non-root rank passes for ``name`` when it passes nothing (None: let DaCe allocate it)."""
        desc = self.arrays[name]
        dtype = np.dtype(desc.dtype.as_numpy_dtype())
        if name in self.only_root:
            if dtype.str not in self._tiny:
                self._tiny[dtype.str] = np.zeros(1, dtype)
            return self._tiny[dtype.str]
        if name.startswith("__return"):
            return None
        return np.zeros(tuple(evaluate(str(s), values) for s in desc.shape), dtype)

    def fill(self, call: Dict, values: Dict[str, int]) -> None:
        """Non-root rank: a stand-in for every argument at rank 0 that this rank left out or passed as None."""
        from dace import dtypes
        for name in self.arrays:
            if call.get(name) is None:
                arr = self.stand_in(name, values)
                if arr is None:
                    call.pop(name, None)
                elif self.arrays[name].storage == dtypes.StorageType.GPU_Global:
                    call[name] = DeviceStandIn(arr)
                else:
                    call[name] = arr

    def nothing(self):
        """What a rank that does not run a rank-0-only program returns (None per result)."""
        return tuple(None for _ in self.returns) if len(self.returns) > 1 else None

    def results(self, out, rank: int, copy: bool = True):
        """The caller's copy of the program's results: None on non-root ranks for results at rank 0.
        ``copy=False``: ``out`` is fresh memory (``dace_compat.fresh_return_arrays``), handed over."""
        many = isinstance(out, tuple)
        outs = list(out) if many else [out]
        names = self.returns if len(self.returns) == len(outs) else [None] * len(outs)
        done = [None if rank != 0 and name is not None and name not in self.placed
                else np.copy(o) if copy and isinstance(o, np.ndarray) else o for name, o in zip(names, outs)]
        return tuple(done) if many else done[0]


def check_blocks(sdfg, low: Lowered, kwargs: Dict, blocks: Dict, rank: int) -> Optional[str]:
    """Why this rank's call cannot run (None: it can): its distributed-placement arguments must be
    present, of its block's shape, dtype and contiguous, and its one-element arguments present."""
    for x, shape in blocks.items():
        arr = kwargs.get(x)
        if arr is None:
            if x.startswith("__return"):
                continue
            return f"missing argument `{x}` (rank {rank} passes its block of shape {shape})"
        if not isinstance(arr, np.ndarray):
            return f"argument `{x}` must be a NumPy array (this rank's block), got {type(arr).__name__}"
        if tuple(arr.shape) != tuple(shape):
            return (f"argument `{x}` on rank {rank} has shape {tuple(arr.shape)}, but this rank's block "
                    f"is {tuple(shape)} (distributed placement: pass distsdfg.layout(sdfg, {x!r}, ...).block(...) "
                    f"or load it with .load(path, rank))")
        want = np.dtype(sdfg.arrays[x].dtype.as_numpy_dtype())
        if arr.dtype != want:
            return f"argument `{x}` has dtype {arr.dtype} but the program expects {want}; convert it with .astype"
        if not arr.flags.c_contiguous:
            return f"argument `{x}` on rank {rank} is not contiguous; pass np.ascontiguousarray(...)"
    return missing_replicas(low, kwargs, rank)      # the one-element arguments


def missing_replicas(low: Lowered, kwargs: Dict, rank: int) -> Optional[str]:
    """Why this rank's call cannot run (None: it can): in distributed placement every rank passes
    the one-element arguments (``Lowered.replicas``), which are not broadcast from rank 0."""
    missing = [r for r in getattr(low, "replicas", ()) if not isinstance(kwargs.get(r), np.ndarray)]
    if not missing:
        return None
    return (f"rank {rank} did not pass {', '.join(f'`{r}`' for r in missing)}: in distributed placement every rank "
            f"passes the one-element arguments, with the same value (they are not broadcast from rank 0)")


def replica_values(low: Lowered, kwargs: Dict) -> Dict[str, tuple]:
    """This rank's one-element arguments (``Lowered.replicas``) as (dtype, bytes), to compare across ranks."""
    return {r: (kwargs[r].dtype.str, kwargs[r].tobytes()) for r in getattr(low, "replicas", ())
            if isinstance(kwargs.get(r), np.ndarray)}


def unequal_replicas(low: Lowered, gathered) -> Optional[str]:
    """Why a call cannot run when the ranks passed different values of a one-element argument
    (``gathered``: every rank's ``replica_values``, by rank), else None. Each rank's kernels read its
    own copy, so unequal copies would make the replicas of every result they touch diverge."""
    def show(v):
        return np.frombuffer(v[1], dtype=np.dtype(v[0])).tolist()

    for r in getattr(low, "replicas", ()):
        first = gathered[0].get(r)
        for q, vals in enumerate(gathered[1:], start=1):
            mine = vals.get(r)
            if first is not None and mine is not None and mine != first:
                return (f"`{r}` differs between ranks: rank 0 passes {show(first)}, rank {q} passes {show(mine)}; "
                        f"in distributed placement every rank passes the one-element arguments with the same value "
                        f"(they are not broadcast from rank 0)")
    return None
