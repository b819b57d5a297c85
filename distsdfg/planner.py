"""EinDecomp (seed 000, sections 8.1-8.4): choose every kernel's process grid from a cost model.

``auto_schedule`` builds the EinGraph of an SDFG, enumerates each vertex's viable
partitioning vectors (exactly P kernel calls, powers of two when P is one, no split larger
than an extent, even splits where a library node reduces), and searches:

- ``dp``: dynamic programming over a topological order. Exact on trees (every output has
  one consumer); on other DAGs exact by carrying the still-needed producers' choices while
  that state stays small, else the paper's linearisation into paths (8.4), where each path
  sees the vertices already decided.
- ``greedy``: each vertex in turn takes its cheapest vector given the decided producers.
- ``exhaustive``: every combination (small graphs only).

The result is a Schedule of driver maps that ``lower`` accepts.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Dict, List, Optional, Sequence, Tuple

from dace.sdfg import SDFG

from .costmodel import CostModel, get_model
from .eingraph import EinGraph, Vertex, build_graph
from .checks import positive_int, require_sdfg
from .errors import DistributedLoweringError, OptionError, ScheduleError, SymbolicSizeError
from .schedule import Schedule, as_schedule

__all__ = ["viable", "auto_schedule", "schedule_cost", "explain", "search", "Plan", "sqrt_schedule",
           "data_parallel_schedule", "SEARCHERS"]

FRONTIER_LIMIT = 200_000
EXHAUSTIVE_LIMIT = 2_000_000
#: Above this many candidate vectors for some vertex, ``dp`` searches a pruned problem (``prune.multilevel``).
CANDIDATE_LIMIT = 64


def _factors(n: int) -> List[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def viable(v: Vertex, nprocs: int, *, allow_fewer: bool = False) -> List[Tuple[int, ...]]:
    """Partitioning vectors for ``v``: products exactly ``nprocs`` (at most, with ``allow_fewer``)."""
    pow2 = nprocs & (nprocs - 1) == 0
    totals = [nprocs] if not allow_fewer else [t for t in range(nprocs, 0, -1) if nprocs % t == 0 or not pow2]

    def parts_for(total):
        opts = []
        for label, bound in zip(v.labels, v.bounds):
            cand = [k for k in _factors(total) if (not pow2 or k & (k - 1) == 0) and k <= bound]
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


class _Problem:
    """Costs as arrays: ``vc[v][a]`` for candidate ``a`` of vertex ``v``, ``em(i)[a, b]`` for edge
    ``i`` with its producer on candidate ``a`` and its consumer on ``b``. Choices are indices."""

    def __init__(self, g: EinGraph, model: CostModel, cands: List[List[Tuple[int, ...]]]):
        import numpy as np
        self.g, self.model, self.cands = g, model, cands
        self.splits = [[dict(zip(v.labels, d)) for d in cands[v.index]] for v in g.vertices]
        # A kernel in a loop, and the data it takes from its producers, cost once per iteration.
        self.vc = [v.repeats * np.array([model.value(model.vertex(g, v, sp)) for sp in self.splits[v.index]],
                                        dtype=float) for v in g.vertices]
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
        t = sum(float(self.vc[v][idx[v]]) for v in range(len(idx)))
        t += sum(float(self.em(i)[idx[e.src], idx[e.dst]]) for i, e in enumerate(self.g.edges))
        return t

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


# -- searchers (each returns one candidate index per vertex) -----------------------------------------
def _greedy(pb: _Problem) -> List[int]:
    import numpy as np
    chosen: Dict[int, int] = {}
    for v in pb.g.vertices:
        chosen[v.index] = int(np.argmin(pb.vc[v.index] + pb.incoming(v.index, chosen)))
    return [chosen[v.index] for v in pb.g.vertices]


def _exhaustive(pb: _Problem) -> List[int]:
    n = math.prod(len(c) for c in pb.cands)
    if n > EXHAUSTIVE_LIMIT:
        raise DistributedLoweringError(f"exhaustive search over {n:,} combinations is too large; use searcher='dp'")
    best, best_val = None, math.inf
    for combo in itertools.product(*[range(len(c)) for c in pb.cands]):
        val = pb.total(combo)
        if val < best_val:
            best, best_val = combo, val
    return list(best)


def _tree_dp(pb: _Problem) -> List[int]:
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


def _frontier_size(pb: _Problem) -> int:
    g = pb.g
    last_use = {v.index: max([e.dst for e in g.consumers(v.index)], default=v.index) for v in g.vertices}
    live, worst = [], 1
    for v in range(len(g.vertices)):
        live = [u for u in live + [v] if last_use[u] > v]
        worst = max(worst, math.prod(len(pb.cands[u]) for u in live) * len(pb.cands[v]))
    return worst


def _frontier_dp(pb: _Problem) -> List[int]:
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


def _linearised_dp(pb: _Problem) -> List[int]:
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


def _refine(pb: _Problem, idx: List[int], sweeps: int = 6) -> List[int]:
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


def _dp(pb: _Problem) -> List[int]:
    if pb.g.is_tree():
        return _tree_dp(pb)
    if _frontier_size(pb) <= FRONTIER_LIMIT:
        return _frontier_dp(pb)
    # The linearisation ignores edges between paths: start from the best of it, greedy and the
    # baselines, then improve vertex by vertex with every edge priced.
    seeds = [_linearised_dp(pb), _greedy(pb)] + [s for s in pb.seeds if s is not None]
    return min((_refine(pb, s) for s in seeds), key=pb.total)


SEARCHERS = {"dp": _dp, "greedy": _greedy, "exhaustive": _exhaustive}


def _candidates(g: EinGraph, nprocs: int, model: CostModel, allow_fewer: bool) -> List[List[Tuple[int, ...]]]:
    cands = []
    for v in g.vertices:
        cs = [d for d in viable(v, nprocs, allow_fewer=allow_fewer) if model.fits(v, dict(zip(v.labels, d)))]
        if not cs:
            raise ScheduleError(f"map `{v.key}` has no partitioning that fits the memory limit on {nprocs} ranks")
        cands.append(cs)
    return cands


def search(g: EinGraph, nprocs: int, model: CostModel, searcher: str = "dp", *,
           allow_fewer: bool = False) -> Plan:
    """The searcher's plan. ``dp`` is exact over every viable vector (see the module docstring)
    while no vertex has more than ``CANDIDATE_LIMIT`` of them; above, it searches the pruned
    problem of ``prune.multilevel`` (exact over the kept vectors) and improves the result by local moves."""
    if searcher not in SEARCHERS:
        raise OptionError(f"unknown searcher {searcher!r}: use one of {sorted(SEARCHERS)}")
    cands = _candidates(g, nprocs, model, allow_fewer)
    if searcher == "dp" and max((len(c) for c in cands), default=0) > CANDIDATE_LIMIT and not allow_fewer and nprocs >= 4:
        from .prune import multilevel
        return multilevel(g, nprocs, model, cands)
    pb = _Problem(g, model, cands)
    pb.seeds = [pb.index_of(data_parallel_schedule(g, nprocs)), pb.index_of(sqrt_schedule(g, nprocs))]
    idx = SEARCHERS[searcher](pb)
    return Plan(tuple(cands[v][a] for v, a in enumerate(idx)), pb.total(idx))


# -- baselines ----------------------------------------------------------------------------------------
def _spread(v: Vertex, nprocs: int, labels: Sequence[str]) -> Tuple[int, ...]:
    """Split ``labels`` as evenly as possible (largest extents first) into ``nprocs`` parts."""
    d = {l: 1 for l in v.labels}
    rest = nprocs
    order = [l for l in labels if l in d]
    while rest > 1 and order:
        p = min(k for k in _factors(rest) if k > 1)
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
            take = max(k for k in _factors(rest) if k <= v.bound(l) and (l not in v.even or v.bound(l) % k == 0)
                       and (k == 1 or l not in v.unsplit))
            d[l] = take
            rest //= take
            if rest == 1:
                break
        out[v.key] = tuple(d[l] for l in v.labels)
    return Schedule.of(out)


# -- public functions -----------------------------------------------------------------------------------
def _graph(sdfg: SDFG, sizes: dict, call: str, deferrable: bool = False) -> EinGraph:
    """``build_graph``; without the sizes it needs, a refusal that says how to plan (``call``: the
    caller's call up to its keyword sizes, e.g. ``auto_schedule(sdfg, 4``)."""
    try:
        return build_graph(sdfg, **sizes)
    except SymbolicSizeError as exc:
        known = set(sizes) | set(sdfg.constants)
        need = ", ".join(f"{s}=..." for s in sorted(str(x) for x in sdfg.free_symbols) if s not in known)
        later = (" Or let the program plan itself: after lower(sdfg, 'auto', nprocs=P) without sizes, "
                 "compile(sdfg) gives a program that plans, lowers and compiles at its first call, for the sizes "
                 "of that call's arguments (once per set of sizes)") if deferrable else ""
        raise SymbolicSizeError(
            f"{call}) needs concrete sizes: {exc.what} depends on `{exc.symbol}`. Plan now by passing the sizes: "
            f"{call}, {need or exc.symbol + '=...'}).{later}", exc.symbol, exc.what) from None


def _checked(sdfg: SDFG, schedule) -> Schedule:
    """``schedule`` as a Schedule whose keys and grid lengths fit ``sdfg`` (as ``lower`` checks them)."""
    from .kernels import maps
    sched = as_schedule(schedule)
    sched.validate_for({m.key: len(m.params) for m in maps(sdfg)}, sdfg_name=sdfg.name)
    return sched


def _splits_of(g: EinGraph, schedule) -> List[Tuple[int, ...]]:
    sched = as_schedule(schedule).as_dict()
    out = []
    for v in g.vertices:
        grid = sched.get(v.key)
        out.append(tuple(grid) if grid is not None else tuple(1 for _ in v.labels))
    return out


def schedule_cost(sdfg: SDFG, schedule, model="bytes", *, inputs: str = "root", **sizes) -> float:
    """The cost model's value for any schedule (hand-written or searched)."""
    require_sdfg(sdfg, "distsdfg.schedule_cost")
    schedule = _checked(sdfg, schedule)
    g = build_graph(sdfg, **sizes)
    return graph_cost(g, _splits_of(g, schedule), get_model(model, inputs=inputs))


def graph_cost(g: EinGraph, splits: Sequence[Tuple[int, ...]], model: CostModel) -> float:
    """The model's value of one assignment of vectors to the vertices of ``g``."""
    pb = _Problem(g, model, [[tuple(d)] for d in splits])
    return pb.total([0] * len(splits))


def auto_schedule(sdfg: SDFG, nprocs: int, *, cost_model="bytes", searcher: str = "dp", inputs: str = "root",
                  memory_limit: Optional[int] = None, allow_fewer: bool = False, verify: Optional[bool] = None,
                  **sizes) -> Schedule:
    """Choose a schedule for ``sdfg`` on ``nprocs`` ranks (EinDecomp).

    ``cost_model``: 'bytes' (this runtime's communication, the default), 'paper'
    (EinDecomp's bound), 'alpha-beta' (calibrated time) or a CostModel. ``inputs``: 'root'
    (inputs and outputs live on rank 0 and their scatter and gather are priced) or
    'distributed'. ``memory_limit``: bytes of local buffers per rank per kernel. ``verify``
    (default: on for graphs of at most 40 kernels) also prices the searched schedule and the
    data-parallel and SQRT baselines exactly, by lowering copies of the SDFG and reading
    ``comm_report``, and returns the one that moves the fewest bytes.
    """
    require_sdfg(sdfg, "distsdfg.auto_schedule")
    nprocs = positive_int(nprocs, "auto_schedule's nprocs")
    g = _graph(sdfg, sizes, f"auto_schedule(sdfg, {nprocs}", deferrable=True)
    model = get_model(cost_model, inputs=inputs, memory_limit=memory_limit)
    plan = search(g, nprocs, model, searcher, allow_fewer=allow_fewer)
    best = plan.schedule(g, sdfg.name)
    if verify is None:
        verify = len(g.vertices) <= 40 and cost_model in ("bytes", None) and inputs == "root"
    if verify:
        best = _verified(sdfg, g, nprocs, [best, data_parallel_schedule(g, nprocs), sqrt_schedule(g, nprocs)], sizes)
    return best.with_sdfg(sdfg.name) if best.sdfg is None else best


def measured_bytes(sdfg: SDFG, schedule, nprocs: int, **sizes) -> int:
    """Total bytes ``comm_report`` gives for ``schedule`` (lowers a copy of ``sdfg``)."""
    import copy
    import warnings

    from .lowering import lower_sdfg
    from .report import comm_report, sent_once
    sd = copy.deepcopy(sdfg)
    sd._distsdfg = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lower_sdfg(sd, Schedule.of(as_schedule(schedule).as_dict()), optimize=False, validate=False)
        return sum(sent_once(s) for s in comm_report(sd, nprocs=nprocs, summary=True, **sizes))


def _verified(sdfg, g, nprocs, candidates, sizes) -> Schedule:
    best, best_bytes = candidates[0], None
    for cand in candidates:
        try:
            b = measured_bytes(sdfg, Schedule.of(cand.as_dict()), nprocs, **sizes)
        except DistributedLoweringError:
            continue
        if best_bytes is None or b < best_bytes:
            best, best_bytes = cand, b
    return Schedule.of(best.as_dict(), sdfg=sdfg.name)


def explain(sdfg: SDFG, schedule=None, *, nprocs: Optional[int] = None, cost_model="bytes", inputs: str = "root",
            alternatives: int = 2, **sizes) -> str:
    """Per map: its grid, the predicted bytes it causes (its own and its incoming edges'), and the
    runner-up grids with what they would cost with everything else fixed."""
    require_sdfg(sdfg, "distsdfg.explain")
    if nprocs is not None:
        nprocs = positive_int(nprocs, "explain's nprocs")
    if schedule is not None:
        schedule = _checked(sdfg, schedule)
    g = _graph(sdfg, sizes, "explain(sdfg" + (f", nprocs={nprocs}" if schedule is None and nprocs else ""))
    model = get_model(cost_model, inputs=inputs)
    if schedule is None:
        if nprocs is None:
            raise ScheduleError("explain needs a schedule or nprocs (to plan one)")
        schedule = auto_schedule(sdfg, nprocs, cost_model=model, inputs=inputs, verify=False, **sizes)
    splits = _splits_of(g, schedule)
    P = nprocs or max(math.prod(d) for d in splits)
    cands = [sorted(set(viable(v, P)) | {splits[v.index]}) for v in g.vertices]
    pb = _Problem(g, model, cands)
    cur = {v.index: cands[v.index].index(splits[v.index]) for v in g.vertices}
    unit = "s" if model.name == "alpha-beta" else "B"

    def local(v):
        """Cost vector over v's candidates of v and its edges, the other vertices as scheduled."""
        c = pb.vc[v] + pb.incoming(v, cur)
        for i, e in enumerate(g.edges):
            if e.src == v:
                c = c + pb.em(i)[:, cur[e.dst]]
        return c

    total = pb.total([cur[v.index] for v in g.vertices])
    lines = [f"schedule for {sdfg.name} on {P} ranks, model {model.name}: predicted total {_fmt(total, unit)}",
             f"  {'map':48s} {'grid':18s} cost of the map and its incoming and outgoing data"]
    for v in g.vertices:
        vec = local(v.index)
        mine = float(vec[cur[v.index]])
        lines.append(f"  {v.key:48s} {str(splits[v.index]):18s} {_fmt(mine, unit)}")
        alts = sorted((float(vec[a]), cands[v.index][a]) for a in range(len(vec)) if a != cur[v.index])
        for c, x in alts[:alternatives]:
            lines.append(f"  {'':48s}   or {str(x):15s} {_fmt(c, unit)} ({_fmt(c - mine, unit, sign=True)})")
    return "\n".join(lines)


def _fmt(x: float, unit: str, sign: bool = False) -> str:
    if unit == "s":
        return f"{x:+.3e} s" if sign else f"{x:.3e} s"
    return f"{x:+,.0f} B" if sign else f"{x:,.0f} B"
