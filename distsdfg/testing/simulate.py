"""A single-process simulator of CommPlans: every rank's buffers as NumPy arrays in one process.

``run_plan(plan, sources)`` takes each rank's source buffer as a full-size array (only its
block is meaningful) and returns what each rank's destination block holds after the plan,
following the same semantics as the C++ runtime. Tests use it to check the redistribution
planner on many layout pairs without MPI.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from ..solver.redistribute import Box, CommPlan, intersect
from ..analysis.tiling import block_span
from ..values.modes import Collective

_OPS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
_IDENTITY = {"sum": 0.0, "prod": 1.0, "max": -np.inf, "min": np.inf}


def _sl(box: Box):
    return tuple(slice(s, s + n) for s, n in zip(*box))


def run_plan(plan: CommPlan, sources: List[np.ndarray]) -> List[Optional[np.ndarray]]:
    P = plan.nranks
    shape = sources[0].shape
    out = [np.full(shape, np.nan) for _ in range(P)]
    c, op = plan.collective, plan.op
    if c in (Collective.LOCAL, Collective.ALLTOALLW):
        for m in plan.messages:
            out[m.dst][_sl(m.box)] = sources[m.src][_sl(m.box)]
    elif c == Collective.ALLTOALLV:
        for q in range(P):
            if plan.dst[q] is not None:
                out[q][_sl(plan.dst[q])] = _IDENTITY[op]
        for m in sorted(plan.messages, key=lambda m: m.src):
            s = _sl(m.box)
            out[m.dst][s] = _OPS[op](out[m.dst][s], sources[m.src][s])
    elif c in (Collective.ALLREDUCE, Collective.REDUCE_SCATTER, Collective.REDUCE):
        for g in plan.groups:
            blk = _sl(plan.src[g[0]])
            total = sources[g[0]][blk].copy()
            for q in g[1:]:
                total = _OPS[op](total, sources[q][blk])
            full = np.full(shape, np.nan)
            full[blk] = total
            for q in g:
                if plan.dst[q] is not None:
                    out[q][_sl(plan.dst[q])] = full[_sl(plan.dst[q])]
    elif c == Collective.ALLGATHERV:
        for g in plan.groups:
            for q in g:
                for r in g:
                    out[q][_sl(plan.pieces[r])] = sources[r][_sl(plan.pieces[r])]
    else:
        raise ValueError(c)
    return [out[q][_sl(plan.dst[q])] if plan.dst[q] is not None else None for q in range(P)]


def grid_blocks(shape, grid, dims=None) -> List[Optional[Box]]:
    """Even blocks of ``shape`` for a rank grid; ``dims[a]`` is the array dimension grid axis
    ``a`` splits (None: the axis replicates). Ranks beyond the grid hold nothing."""
    dims = list(range(len(grid))) if dims is None else dims
    n = int(np.prod(grid))
    out = []
    for q in range(n):
        coords = np.unravel_index(q, grid) if grid else ()
        start, size = [0] * len(shape), list(shape)
        for a, d in enumerate(dims):
            if d is None:
                continue
            start[d], size[d] = block_span(shape[d], grid[a], int(coords[a]))
        out.append((tuple(start), tuple(size)) if all(size) else None)
    return out


__all__ = ["run_plan", "grid_blocks", "intersect"]
