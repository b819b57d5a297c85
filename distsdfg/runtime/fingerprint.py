"""Every rank compiles the plan rank 0 compiles: a fingerprint of the lowering, compared before the build.

Each rank traces and lowers its program itself; rank 0 builds the binary from its own lowering, and
every rank then plans its communication steps and stand-ins from the step numbers of its own lowered
SDFG. Ranks whose lowerings differ (another program, another schedule, another order of DaCe's
rewrites) would index steps that do not exist, or wait forever in a step the others never enter.
So ``compile`` first compares, on every rank, a digest of each part of the lowering (``plan_parts``:
the schedule, the kernels' grids, the communication steps, the homes, the arrays, and the nodes that
run the steps) with rank 0's, in one small ``allgather``. Where a part differs, the ranks exchange
that part in full and every rank raises the same ``PlanMismatchError`` naming the part, the first
entry that differs and both ranks' versions of it.

Example on 2 ranks, rank 1 lowered with another grid::

    PlanMismatchError: rank 1 lowered `prog` differently from rank 0 (kernels, entry 0 of 1):
      rank 0: KernelGrid(index=0, label='gemm_map', ..., grid=(2, 1), ...)
      rank 1: KernelGrid(index=0, label='gemm_map', ..., grid=(1, 2), ...)
    ...
"""
from __future__ import annotations

import hashlib
import time
from typing import Dict, List, Optional, Sequence, Tuple

from dace.sdfg import SDFG

from ..errors import PlanMismatchError
from ..lowering.lowered import Lowered
from ..mpi import DistributedMemlet

__all__ = ["PARTS", "plan_parts", "digests", "fingerprint", "first_difference", "mismatch", "check_same_plan"]

#: The parts of a lowering that every rank must share, in the order they are compared.
PARTS = ("schedule", "kernels", "steps", "homes", "boundary", "arrays", "nodes")

_SHOW = 400     # characters of an entry quoted in the error


def plan_parts(sdfg: SDFG, low: Lowered) -> Dict[str, Tuple[str, ...]]:
    """The lowering of ``sdfg`` as text, part by part (``PARTS``): what a rank plans and calls with."""
    nodes, stepped = [], set()
    for sd in sdfg.all_sdfgs_recursive():
        for state in sd.states():
            for node in state.nodes():
                if isinstance(node, DistributedMemlet):
                    nodes.append(f"{sd.name}/{state.label}: {node.label} runs step {node.step}")
                    if sd is sdfg:
                        stepped |= {e.data.data for e in state.all_edges(node) if e.data.data is not None}
    # The arrays a rank passes or its steps fill and read. Other transients live inside rank 0's
    # binary, which every rank runs: DaCe's own rewrites (map fusion in ``auto_optimize``) may shape
    # them differently from one process to the next, and that changes nothing a rank does.
    arrays = tuple(sorted(f"{n}: {type(d).__name__} {d.dtype.to_string()} {tuple(map(str, d.shape))}"
                          f"{' transient' if d.transient else ''}" for n, d in sdfg.arrays.items()
                          if not d.transient or n in stepped)
                   ) + tuple(f"symbol {s}" for s in sorted(map(str, sdfg.free_symbols)))
    return {
        "schedule": (low.schedule.to_json(),),
        "kernels": tuple(repr(k) for k in low.kernels),
        "steps": tuple(repr(s) for s in low.steps),
        "homes": tuple(repr(h) for h in low.homes),
        "boundary": tuple(f"{k} -> {v}" for k, v in sorted(low.boundary.items())),
        "arrays": arrays,
        "nodes": tuple(sorted(nodes)),
    }


def digests(parts: Dict[str, Sequence[str]]) -> Tuple[str, ...]:
    """One short digest per part, in ``PARTS`` order: what the ranks compare first."""
    return tuple(hashlib.sha1("\n".join(parts[p]).encode()).hexdigest()[:16] for p in PARTS)


def fingerprint(sdfg: SDFG, low: Lowered) -> str:
    """One digest of the whole lowering: equal on two processes exactly when ``plan_parts`` are."""
    return hashlib.sha1(" ".join(digests(plan_parts(sdfg, low))).encode()).hexdigest()[:16]


def mismatch(name: str, rank: int, part: str, ours: Sequence[str], theirs: Sequence[str]) -> str:
    """The message for rank ``rank``'s ``part`` (``theirs``) that differs from rank 0's (``ours``)."""
    def show(entries, i):
        return entries[i][:_SHOW] if i < len(entries) else "(no such entry)"

    first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return (f"rank {rank} lowered `{name}` differently from rank 0 ({part}, entry {first} of {len(ours)} on rank 0, "
            f"{len(theirs)} on rank {rank}):\n  rank 0: {show(ours, first)}\n  rank {rank}: {show(theirs, first)}\n"
            f"Every rank must trace and lower the same program with the same schedule and options: give every rank "
            f"the same model, inputs' shapes and schedule (a schedule planned on one rank: broadcast it, or "
            f"lower with \"auto\" and `nprocs`), and start the ranks with one PYTHONHASHSEED (e.g. "
            f"`PYTHONHASHSEED=0 mpiexec ...`) if the program is built by code that iterates over sets.")


def _idle_allgather(comm, obj, poll: float = 0.002):
    """``comm.allgather(obj)`` whose early ranks sleep until every rank has arrived (set-up only:
    ranks reach ``compile`` after lowerings that take seconds, and would otherwise spin on a core)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(poll)
    return comm.allgather(obj)


def check_same_plan(comm, sdfg: SDFG, low: Lowered) -> None:
    """Collective over ``comm``: raise ``PlanMismatchError`` on every rank unless every rank lowered
    ``sdfg`` as rank 0 did."""
    if comm is None or comm.size == 1:
        return
    parts = plan_parts(sdfg, low)
    every = _idle_allgather(comm, digests(parts))
    differ: List[Tuple[int, int]] = [(q, i) for q in range(1, len(every)) for i in range(len(PARTS))
                                     if every[q][i] != every[0][i]]
    if not differ:
        return
    rank, index = differ[0]
    part = PARTS[index]
    full = comm.allgather(parts[part] if comm.rank in (0, rank) else None)
    raise PlanMismatchError(mismatch(low.original_name, rank, part, full[0], full[rank]))


def first_difference(a: Dict[str, Sequence[str]], b: Dict[str, Sequence[str]]) -> Optional[str]:
    """The first part (``PARTS`` order) in which two lowerings differ, or None."""
    return next((p for p in PARTS if tuple(a[p]) != tuple(b[p])), None)
