"""The distsdfg schedules the benchmark compares: the planner's and three classic ones.

- ``auto``: ``distsdfg.auto_schedule`` (EinDecomp over the time model: compute at calibrated
  rates plus alpha-beta communication; ``$DISTSDFG_CALIBRATION`` or ``distsdfg calibrate``'s file).
- ``data-parallel``: every kernel splits its leading output dimension (``auto.data_parallel_schedule``).
- ``sqrt``: every kernel splits its last two output dimensions as a sqrt(P) x sqrt(P) grid
  (``auto.sqrt_schedule``).
- ``reduction-parallel``: kernels with a reduction split their reduction labels as far as
  they can (partial results, reduced afterwards); kernels without one stay data-parallel.
"""
from __future__ import annotations

import math
from typing import Dict, Tuple

from distsdfg import auto_schedule
from distsdfg.analysis.eingraph import EinGraph, build_graph
from distsdfg.planner.auto import data_parallel_schedule, sqrt_schedule, viable

NAMES = ("auto", "data-parallel", "sqrt", "reduction-parallel")

Grids = Dict[str, Tuple[int, ...]]


def reduction_parallel(g: EinGraph, nprocs: int) -> Grids:
    """Per kernel with reduction labels: the viable vector that splits them into the most parts
    (ties: the one listed first); other kernels as in the data-parallel schedule."""
    out = dict(data_parallel_schedule(g, nprocs).as_dict())
    for v in g.vertices:
        agg = [v.labels.index(l) for l in v.agg]
        cands = viable(v, nprocs)
        if agg and cands:
            out[v.key] = max(cands, key=lambda d: math.prod(d[i] for i in agg))
    return out


def schedule_for(name: str, sdfg, nprocs: int, symbols: dict) -> Grids:
    """The grids of schedule ``name`` for ``sdfg`` on ``nprocs`` ranks at these sizes."""
    if name == "auto":
        return dict(auto_schedule(sdfg, nprocs, **symbols).as_dict())
    g = build_graph(sdfg, **symbols)
    if name == "data-parallel":
        return dict(data_parallel_schedule(g, nprocs).as_dict())
    if name == "sqrt":
        return dict(sqrt_schedule(g, nprocs).as_dict())
    if name == "reduction-parallel":
        return reduction_parallel(g, nprocs)
    raise ValueError(f"unknown schedule {name!r}: use one of {NAMES}")


def describe(grids: Grids) -> str:
    """A short text: the distinct grids in program order, e.g. ``(2, 1, 2) (4, 1)``."""
    seen = []
    for grid in grids.values():
        if tuple(grid) not in seen:
            seen.append(tuple(grid))
    return " ".join(str(tuple(g)) for g in seen)
