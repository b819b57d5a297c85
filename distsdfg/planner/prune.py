"""Planning for many ranks: a pruned search when kernels have too many candidate grids.

With five loop labels and P = 1024 a kernel has about a thousand viable vectors, and pricing
every pair of two neighbours' vectors (each pair: every rank's block) does not finish.
``multilevel`` plans for P/4 ranks first (recursively, down to a size the exact search takes
whole), keeps per kernel only the vectors that refine that plan (plus, up to ``NEAR_RANKS``,
those one factor away, and the baselines'), searches that problem with ``searchers.dp``, and
then improves the result by local moves with every edge priced (``moves``).
"""
from __future__ import annotations

import math
from typing import List, Tuple

from .costmodel import CostModel
from ..analysis.eingraph import EinGraph
from .searchers import Plan, Problem, data_parallel_schedule, dp, factors, graph_cost, sqrt_schedule
from ..values.schedule import Schedule

__all__ = ["multilevel", "moves", "NEAR_RANKS"]

#: Up to this many ranks the pruned problem also keeps the vectors one factor away from the refinements.
NEAR_RANKS = 64


def _coarser(nprocs: int) -> int:
    """The rank count a multilevel search plans for first: the largest divisor at most P/4."""
    return max(k for k in factors(nprocs) if 4 * k <= nprocs)


def multilevel(g: EinGraph, nprocs: int, model: CostModel, cands: List[List[Tuple[int, ...]]], search) -> Plan:
    """Plan for P/4 ranks (recursively), then keep per vertex only the vectors that refine the
    coarse one (every label's split a multiple of it), up to ``NEAR_RANKS`` ranks also those one
    factor away from a refinement, and the baselines' vectors; search that pruned problem with
    ``searchers.dp`` (exact over the kept vectors where ``dp`` is exact), then move factors
    between labels while that lowers the total.

    A heuristic: grids that refine no good grid for fewer ranks are not priced at all. Under the
    model the result is never worse than the data-parallel and SQRT baselines (they stay
    candidates and seed ``dp``); measured against the unpruned search in docs/benchmarks.md."""
    coarse = search(g, _coarser(nprocs), model, "dp")
    seeds = [data_parallel_schedule(g, nprocs).as_dict(), sqrt_schedule(g, nprocs).as_dict()]
    kept = []
    for v, cs in zip(g.vertices, cands):
        base = coarse.splits[v.index]
        keep = [d for d in cs if all(x % b == 0 for x, b in zip(d, base))]
        if nprocs <= NEAR_RANKS:        # and the vectors one factor away from those
            keep += [d for d in cs if d not in keep and any(_one_move(r, d) for r in keep)]
        for sd in seeds:
            d = tuple(sd.get(v.key, ()))
            if d in cs and d not in keep:
                keep.append(d)
        kept.append(keep or cs)
    pb = Problem(g, model, kept)
    pb.seeds = [pb.index_of(Schedule.of(sd)) for sd in seeds]
    idx = dp(pb)
    splits = moves(g, model, cands, [kept[v][a] for v, a in enumerate(idx)], sweeps=4 if nprocs <= 256 else 2)
    return Plan(tuple(splits), graph_cost(g, splits, model))


def moves(g: EinGraph, model: CostModel, cands, splits: List[Tuple[int, ...]], sweeps: int = 4):
    """Local search with every edge priced: each vertex in turn tries the vectors one factor away
    from its own (a prime factor moved from one label to another), alone and together with the
    vertices symmetric to it (same labels, extents and vector: the heads of a layer), and keeps
    the move that lowers the total most."""
    splits = list(splits)
    best = graph_cost(g, splits, model)
    for _ in range(sweeps):
        improved = False
        for v in g.vertices:
            cur = splits[v.index]
            twins = [w.index for w in g.vertices if w.labels == v.labels and tuple(w.bounds) == tuple(v.bounds)
                     and splits[w.index] == cur]
            for d in [d for d in cands[v.index] if _one_move(cur, d)]:
                for group in ([v.index], twins) if len(twins) > 1 else ([v.index],):
                    trial = list(splits)
                    for w in group:
                        if d in cands[w]:
                            trial[w] = d
                    c = graph_cost(g, trial, model)
                    if c < best * (1 - 1e-12) - 1e-9:
                        best, splits, improved = c, trial, True
            # (later vertices see the improved splits)
        if not improved:
            break
    return splits


def _one_move(a: Tuple[int, ...], b: Tuple[int, ...]) -> bool:
    """``b`` is ``a`` with one prime factor moved from one label to another."""
    diff = [(x, y) for x, y in zip(a, b) if x != y]
    if len(diff) != 2:
        return False
    (x1, y1), (x2, y2) = diff
    if y1 * x2 == x1 * y2 or x1 * x2 != y1 * y2:
        return False
    f = max(x1, y1) // min(x1, y1)
    return max(x1, y1) % min(x1, y1) == 0 and all(f % k for k in range(2, int(math.isqrt(f)) + 1))
