"""The planner's search: viable partitioning vectors per EinGraph vertex and the searchers over them.

``viable`` enumerates a vertex's vectors; ``Problem`` holds the cost model's vertex and edge
costs over the candidates; ``SEARCHERS`` are ``dp`` (exact on trees and while the frontier stays
small, else the paper's linearisation into paths), ``greedy`` and ``exhaustive`` (see
``distsdfg.planner.auto`` for how ``auto_schedule`` picks and checks one). ``sqrt_schedule`` and
``data_parallel_schedule`` are the baselines; ``graph_cost`` prices any assignment.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Dict, List, Optional, Sequence, Tuple

from .costmodel import CostModel
from ..analysis.eingraph import EinGraph, Vertex
from ..dace_compat.source import named
from ..errors import DistributedLoweringError, ScheduleError
from ..values.schedule import Schedule

__all__ = ["viable", "factors", "candidates", "Plan", "Problem", "dp", "SEARCHERS", "sqrt_schedule",
           "data_parallel_schedule", "graph_cost", "CANDIDATE_LIMIT"]

FRONTIER_LIMIT = 200_000
EXHAUSTIVE_LIMIT = 2_000_000
#: Above this many candidate vectors for some vertex, ``dp`` searches a pruned problem (``prune.multilevel``).
CANDIDATE_LIMIT = 64


def factors(n: int) -> List[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def viable(v: Vertex, nprocs: int, *, allow_fewer: bool = False) -> List[Tuple[int, ...]]:
    """Partitioning vectors for ``v``: products exactly ``nprocs`` (at most, with ``allow_fewer``)."""
    pow2 = nprocs & (nprocs - 1) == 0
    totals = [nprocs] if not allow_fewer else [t for t in range(nprocs, 0, -1) if nprocs % t == 0 or not pow2]

    def parts_for(total):
        opts = []
        for label, bound in zip(v.labels, v.bounds):
            cand = [k for k in factors(total) if (not pow2 or k & (k - 1) == 0) and k <= bound]
            if label in v.even:
                cand = [k for k in cand if bound % k == 0]
            if label in v.unsplit:      # the lowering would refuse it (an unreduced write)
                cand = [1]
            opts.append(cand)
        out = []
        for combo in itertools.product(*opts):
            if math.prod(combo) == total:
                out.append(combo)
        return out

    for t in totals:
        found = parts_for(t)
        if found and not allow_fewer:
            return found
        if allow_fewer:
            pass
    if allow_fewer:
        return [c for t in totals for c in parts_for(t)] or [tuple(1 for _ in v.labels)]
    # Not enough parallel work for nprocs kernel calls: use as many as the extents allow.
    for t in range(nprocs - 1, 0, -1):
        found = parts_for(t)
        if found:
            return found
    return [tuple(1 for _ in v.labels)]


@dataclasses.dataclass(frozen=True)
class Plan:
    """A searched assignment: one vector per vertex, and its cost under the model."""
    splits: Tuple[Tuple[int, ...], ...]
    value: float

    def schedule(self, g: EinGraph, sdfg_name: Optional[str] = None) -> Schedule:
        return Schedule.of({v.key: tuple(int(x) for x in d) for v, d in zip(g.vertices, self.splits)},
                           sdfg=sdfg_name)


class Problem:
    """Costs as arrays: ``vc[v][a]`` for candidate ``a`` of vertex ``v``, ``em(i)[a, b]`` for edge
    ``i`` with its producer on candidate ``a`` and its consumer on ``b``. Choices are indices."""

    def __init__(self, g: EinGraph, model: CostModel, cands: List[List[Tuple[int, ...]]], *, ties: bool = True):
        import numpy as np
        self.g, self.model, self.cands = g, model, cands
        self.splits = [[dict(zip(v.labels, d)) for d in cands[v.index]] for v in g.vertices]
        # A kernel in a loop, and the data it takes from its producers, cost once per iteration.
        self.vc = [v.repeats * np.array([model.value(model.vertex(g, v, sp)) for sp in self.splits[v.index]],
                                        dtype=float) for v in g.vertices]
        self.tie = _ties(g, model, self.splits) if ties else [np.zeros(len(sp)) for sp in self.splits]
        self.vc = [c + t for c, t in zip(self.vc, self.tie)]
        self._em: Dict[int, "np.ndarray"] = {}
        self.preds: Dict[int, List[int]] = {v.index: [] for v in g.vertices}
        for i, e in enumerate(g.edges):
            self.preds[e.dst].append(i)
        self.seeds: List[Optional[List[int]]] = []

    def index_of(self, schedule: Schedule) -> Optional[List[int]]:
        """Candidate indices of a schedule's vectors (None if one is not a candidate)."""
        d = schedule.as_dict()
        try:
            return [self.cands[v.index].index(tuple(d[v.key])) for v in self.g.vertices]
        except (KeyError, ValueError):
            return None

    def em(self, i: int):
        if i not in self._em:
            e = self.g.edges[i]
            self._em[i] = self.g.vertices[e.dst].repeats * self.model.edge_costs(self.g, e, self.splits[e.src],
                                                                                 self.splits[e.dst])
        return self._em[i]

    def total(self, idx: Sequence[int]) -> float:
        """What the searchers minimise: the model's value plus the tie-break (see ``_ties``)."""
        t = sum(float(self.vc[v][idx[v]]) for v in range(len(idx)))
        t += sum(float(self.em(i)[idx[e.src], idx[e.dst]]) for i, e in enumerate(self.g.edges))
        return t

    def value(self, idx: Sequence[int]) -> float:
        """The model's value of a choice (without the tie-break)."""
        return self.total(idx) - sum(float(self.tie[v][idx[v]]) for v in range(len(idx)))

    def incoming(self, v: int, fixed: Dict[int, int], skip: Sequence[int] = ()):
        """Cost vector over ``v``'s candidates of its edges from producers already fixed."""
        import numpy as np
        out = np.zeros(len(self.cands[v]))
        for i in self.preds[v]:
            u = self.g.edges[i].src
            if u in fixed and u not in skip:
                out += self.em(i)[fixed[u], :]
        return out

    def between(self, u: int, v: int):
        """Summed cost matrix of all edges from ``u`` to ``v``."""
        import numpy as np
        m = np.zeros((len(self.cands[u]), len(self.cands[v])))
        for i in self.preds[v]:
            if self.g.edges[i].src == u:
                m = m + self.em(i)
        return m


def _ties(g: EinGraph, model: CostModel, splits) -> List:
    """Per vertex and candidate, the model's ``tie`` scaled so that all vertices together add at
    most ``model.tie_scale`` (less than any difference of two values): the search stays exact
    under the model and only chooses among equal values by it."""
    import numpy as np
    scale = float(getattr(model, "tie_scale", 0.0) or 0.0)
    zero = [np.zeros(len(s)) for s in splits]
    if scale <= 0:
        return zero
    raw = [v.repeats * np.array([model.tie(g, v, sp) for sp in splits[v.index]], dtype=float) for v in g.vertices]
    norm = sum(float(r.max()) for r in raw if len(r))
    if norm <= 0:
        return zero
    return [scale * r / norm for r in raw]


# -- searchers (each returns one candidate index per vertex) -----------------------------------------
def _greedy(pb: Problem) -> List[int]:
    import numpy as np
    chosen: Dict[int, int] = {}
    for v in pb.g.vertices:
        chosen[v.index] = int(np.argmin(pb.vc[v.index] + pb.incoming(v.index, chosen)))
    return [chosen[v.index] for v in pb.g.vertices]


def _exhaustive(pb: Problem) -> List[int]:
    n = math.prod(len(c) for c in pb.cands)
    if n > EXHAUSTIVE_LIMIT:
        raise DistributedLoweringError(f"exhaustive search over {n:,} combinations is too large; use searcher='dp'")
    best, best_val = None, math.inf
    for combo in itertools.product(*[range(len(c)) for c in pb.cands]):
        val = pb.total(combo)
        if val < best_val:
            best, best_val = combo, val
    return list(best)


def _tree_dp(pb: Problem) -> List[int]:
    """Exact when every vertex's output feeds at most one vertex (seed 000, 8.2-8.3)."""
    import numpy as np
    g = pb.g
    M: Dict[int, "np.ndarray"] = {}
    arg: Dict[Tuple[int, int], "np.ndarray"] = {}
    for v in g.vertices:
        cost = pb.vc[v.index].copy()
        for u in sorted({g.edges[i].src for i in pb.preds[v.index]}):
            tot = M[u][:, None] + pb.between(u, v.index)
            arg[(u, v.index)] = np.argmin(tot, axis=0)
            cost += tot.min(axis=0)
        M[v.index] = cost
    chosen: Dict[int, int] = {}
    stack = [(s, int(np.argmin(M[s]))) for s in (v.index for v in g.vertices if not g.consumers(v.index))]
    while stack:
        v, a = stack.pop()
        if v in chosen:
            continue
        chosen[v] = a
        for u in {g.edges[i].src for i in pb.preds[v]}:
            stack.append((u, int(arg[(u, v)][a])))
    return [chosen[v.index] for v in g.vertices]


def _frontier_size(pb: Problem) -> int:
    g = pb.g
    last_use = {v.index: max([e.dst for e in g.consumers(v.index)], default=v.index) for v in g.vertices}
    live, worst = [], 1
    for v in range(len(g.vertices)):
        live = [u for u in live + [v] if last_use[u] > v]
        worst = max(worst, math.prod(len(pb.cands[u]) for u in live) * len(pb.cands[v]))
    return worst


def _frontier_dp(pb: Problem) -> List[int]:
    """Exact DP along the topological order, carrying the choices of producers still needed."""
    g = pb.g
    n = len(g.vertices)
    last_use = {v.index: max([e.dst for e in g.consumers(v.index)], default=v.index) for v in g.vertices}
    live: List[int] = []
    states: Dict[Tuple, Tuple[float, Tuple]] = {(): (0.0, ())}   # live choices -> (cost, all choices)
    for v in range(n):
        nlive = [u for u in live + [v] if last_use[u] > v]
        new: Dict[Tuple, Tuple[float, Tuple]] = {}
        for key, (cost, hist) in states.items():
            fixed = dict(enumerate(hist))
            inc = pb.incoming(v, fixed)
            for a in range(len(pb.cands[v])):
                c = cost + pb.vc[v][a] + inc[a]
                full = dict(zip(live, key))
                full[v] = a
                nkey = tuple(full[u] for u in nlive)
                if nkey not in new or c < new[nkey][0]:
                    new[nkey] = (c, hist + (a,))
        live, states = nlive, new
    return list(min(states.values(), key=lambda t: t[0])[1])


def _paths(g: EinGraph) -> List[List[int]]:
    """Longest paths first over the vertices not yet on a path (seed 000, 8.4)."""
    left = {v.index for v in g.vertices}
    succ: Dict[int, List[int]] = {v.index: sorted({e.dst for e in g.consumers(v.index)}) for v in g.vertices}
    out = []
    while left:
        best: Dict[int, List[int]] = {}
        for v in sorted(left, reverse=True):
            nxt = [best[w] for w in succ[v] if w in left and w in best]
            best[v] = [v] + (max(nxt, key=len) if nxt else [])
        path = max(best.values(), key=lambda p: (len(p), -p[0]))
        out.append(path)
        left -= set(path)
    return out


def _linearised_dp(pb: Problem) -> List[int]:
    """Optimise along the longest path, then the next, each seeing the vertices already decided
    (the paper ignores edges to other paths; pricing the decided ones can only help)."""
    import numpy as np
    chosen: Dict[int, int] = {}
    for path in _paths(pb.g):
        M, back = [], []
        for k, v in enumerate(path):
            base = pb.vc[v] + pb.incoming(v, chosen)
            if k == 0:
                M.append(base)
                back.append(None)
                continue
            tot = M[-1][:, None] + pb.between(path[k - 1], v)
            back.append(np.argmin(tot, axis=0))
            M.append(base + tot.min(axis=0))
        a = int(np.argmin(M[-1]))
        for k in range(len(path) - 1, -1, -1):
            chosen[path[k]] = a
            if k:
                a = int(back[k][a])
    return [chosen[v.index] for v in pb.g.vertices]


def _refine(pb: Problem, idx: List[int], sweeps: int = 6) -> List[int]:
    """Local search: each vertex in turn takes its best vector with all others fixed."""
    import numpy as np
    cur = dict(enumerate(idx))
    outs: Dict[int, List[int]] = {}
    for i, e in enumerate(pb.g.edges):
        outs.setdefault(e.src, []).append(i)
    for _ in range(sweeps):
        improved = False
        for v in range(len(idx)):
            vec = pb.vc[v] + pb.incoming(v, cur)
            for i in outs.get(v, []):
                vec = vec + pb.em(i)[:, cur[pb.g.edges[i].dst]]
            a = int(np.argmin(vec))
            if vec[a] < vec[cur[v]] * (1 - 1e-12) - 1e-9:
                cur[v] = a
                improved = True
        if not improved:
            break
    return [cur[v] for v in range(len(idx))]


def dp(pb: Problem) -> List[int]:
    if pb.g.is_tree():
        return _tree_dp(pb)
    if _frontier_size(pb) <= FRONTIER_LIMIT:
        return _frontier_dp(pb)
    # The linearisation ignores edges between paths: start from the best of it, greedy and the
    # baselines, then improve vertex by vertex with every edge priced.
    seeds = [_linearised_dp(pb), _greedy(pb)] + [s for s in pb.seeds if s is not None]
    return min((_refine(pb, s) for s in seeds), key=pb.total)


SEARCHERS = {"dp": dp, "greedy": _greedy, "exhaustive": _exhaustive}


def candidates(g: EinGraph, nprocs: int, model: CostModel, allow_fewer: bool) -> List[List[Tuple[int, ...]]]:
    cands = []
    for v in g.vertices:
        cs = [d for d in viable(v, nprocs, allow_fewer=allow_fewer) if model.fits(v, dict(zip(v.labels, d)))]
        if not cs:
            raise ScheduleError(f"{named(v.key, v.source)} has no partitioning that fits the memory limit on {nprocs} ranks")
        cands.append(cs)
    return cands


def _spread(v: Vertex, nprocs: int, labels: Sequence[str]) -> Tuple[int, ...]:
    """Split ``labels`` as evenly as possible (largest extents first) into ``nprocs`` parts."""
    d = {l: 1 for l in v.labels}
    rest = nprocs
    order = [l for l in labels if l in d]
    while rest > 1 and order:
        p = min(k for k in factors(rest) if k > 1)
        fits = [l for l in order if d[l] * p <= v.bound(l) and (l not in v.even or v.bound(l) % (d[l] * p) == 0)
                and l not in v.unsplit]
        if not fits:
            break
        l = min(fits, key=lambda x: (d[x], -v.bound(x)))
        d[l] *= p
        rest //= p
    return tuple(d[l] for l in v.labels)


def sqrt_schedule(g: EinGraph, nprocs: int) -> Schedule:
    """The SQRT heuristic: every output split as a sqrt(P) x sqrt(P) grid, reductions unsplit."""
    out = {}
    for v in g.vertices:
        outl = [l for o in v.outputs for l in o.labels if l is not None]
        outl = list(dict.fromkeys(outl))[-2:] or list(v.labels)
        out[v.key] = _spread(v, nprocs, outl)
    return Schedule.of(out)


def data_parallel_schedule(g: EinGraph, nprocs: int) -> Schedule:
    """Split the leading output dimension (batch, rows) P ways, then the next if it is too short."""
    out = {}
    for v in g.vertices:
        outl = [l for o in v.outputs for l in o.labels if l is not None]
        outl = list(dict.fromkeys(outl)) or list(v.labels)
        d = {l: 1 for l in v.labels}
        rest = nprocs
        for l in outl:
            take = max(k for k in factors(rest) if k <= v.bound(l) and (l not in v.even or v.bound(l) % k == 0)
                       and (k == 1 or l not in v.unsplit))
            d[l] = take
            rest //= take
            if rest == 1:
                break
        out[v.key] = tuple(d[l] for l in v.labels)
    return Schedule.of(out)


def graph_cost(g: EinGraph, splits: Sequence[Tuple[int, ...]], model: CostModel) -> float:
    """The model's value of one assignment of vectors to the vertices of ``g``."""
    pb = Problem(g, model, [[tuple(d)] for d in splits], ties=False)
    return pb.value([0] * len(splits))
