"""``explain``: a schedule's grids and predicted costs, one row per group of maps the user wrote as one.

Maps that come from one source line, or that follow one another on the same grid and exchange
nothing (an element-wise chain), are one row: their grid, what they cost together with the data
that enters and leaves them, and what they would cost on another grid, all of them moved together.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple, Union

from dace.sdfg import SDFG

from ..analysis.eingraph import EinGraph, Vertex
from ..checks import positive_int, require_sdfg
from ..dace_compat.semantics import with_numpy_semantics
from ..errors import ScheduleError
from ..values.modes import Placement
from .auto import _checked, _fmt, _graph, _splits_of, auto_schedule, whole_or_split
from .searchers import Problem, viable
from .timemodel import get_model

__all__ = ["explain", "map_groups"]

#: Width of the first column (a group's title).
TITLE = 56


def map_groups(g: EinGraph, splits: Sequence[Tuple[int, ...]],
               exchanged: Dict[Tuple[int, int], float]) -> List[List[Vertex]]:
    """The vertices of ``g`` in order, cut into runs that ``explain`` shows as one row: a vertex
    joins the run before it when it has the same grid and comes from the same source line, or
    reads from the run and every edge between them moves nothing (``exchanged[(u, v)]``: the cost of
    the edges from ``u`` to ``v`` at the scheduled grids)."""
    groups: List[List[Vertex]] = []
    for v in g.vertices:
        last = groups[-1] if groups else None
        if last is not None and splits[v.index] == splits[last[-1].index]:
            same_line = bool(v.source) and v.source == last[-1].source
            links = [exchanged[(u.index, v.index)] for u in last if (u.index, v.index) in exchanged]
            if same_line or (links and not any(links)):
                last.append(v)
                continue
        groups.append([v])
    return groups


def _title(group: List[Vertex]) -> str:
    """``heat.py:17 Tn[1:-1, 1:-1] = ...`` for one line, ``heat.py:17-21 (6 maps)`` for several."""
    lines = _lines(group)
    if len(lines) == 1 and lines[0][0]:
        return lines[0][0]
    where = [s.split(" ", 1)[0] for s, _ in lines if s]
    files = {w.rsplit(":", 1)[0] for w in where}
    if len(where) == len(lines) and len(files) == 1:
        nums = sorted(int(w.rsplit(":", 1)[1]) for w in where)
        return f"{where[0].rsplit(':', 1)[0]}:{nums[0]}-{nums[-1]} ({len(group)} maps)"
    return f"{group[0].key} ... ({len(group)} maps)" if len(group) > 1 else group[0].key


def _lines(group: List[Vertex]) -> List[Tuple[str, List[str]]]:
    """(source line, map keys) per distinct line of ``group``, in order ('' for maps without one)."""
    out: List[Tuple[str, List[str]]] = []
    for v in group:
        if out and out[-1][0] == v.source:
            out[-1][1].append(v.key)
        else:
            out.append((v.source, [v.key]))
    return out


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


class _Costs:
    """A group's cost under the problem ``pb``: its vertices' own plus every edge that enters, leaves
    or stays inside it, each once, at the choice ``cur`` with the group's vertices moved to ``grid``."""

    def __init__(self, pb: Problem, cur: Dict[int, int]):
        self.pb, self.cur = pb, cur

    def of(self, group: List[Vertex], grid: Optional[Tuple[int, ...]] = None) -> Optional[float]:
        pb, members = self.pb, {v.index for v in group}
        pick = dict(self.cur)
        for v in members:
            if grid is not None:
                if grid not in pb.cands[v]:
                    return None
                pick[v] = pb.cands[v].index(grid)
        cost = sum(float(pb.vc[v][pick[v]]) for v in members)
        for i, e in enumerate(pb.g.edges):
            if e.src in members or e.dst in members:
                cost += float(pb.em(i)[pick[e.src], pick[e.dst]])
        return cost


@with_numpy_semantics
def explain(sdfg: SDFG, schedule=None, *, nprocs: Optional[int] = None, cost_model="time",
            inputs: Union[Placement, str] = Placement.ROOT,
            alternatives: int = 2, **sizes) -> str:
    """Per group of maps (one source line, or an element-wise chain on one grid): its grid, the
    predicted cost it causes (its own and its incoming and outgoing data's: seconds under the time
    model, which also names the rates it used; bytes under 'bytes'), the maps it holds with the
    user's source lines, and the runner-up grids with what they would cost with everything else fixed."""
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
        schedule = auto_schedule(sdfg, nprocs, cost_model=model, inputs=inputs, verify=False, whole=False, **sizes)
        schedule, choice = whole_or_split(g, schedule, model, nprocs, inputs)
    else:
        choice = ""
    splits = _splits_of(g, schedule)
    P = nprocs or max(math.prod(d) for d in splits)
    cands = [sorted(set(viable(v, P)) | {splits[v.index]}) for v in g.vertices]
    pb = Problem(g, model, cands)
    cur = {v.index: cands[v.index].index(splits[v.index]) for v in g.vertices}
    unit = "s" if model.name in ("alpha-beta", "time") else "B"
    exchanged: Dict[Tuple[int, int], float] = {}
    for i, e in enumerate(g.edges):
        exchanged[(e.src, e.dst)] = exchanged.get((e.src, e.dst), 0.0) + float(pb.em(i)[cur[e.src], cur[e.dst]])
    costs = _Costs(pb, cur)

    total = pb.value([cur[v.index] for v in g.vertices])
    lines = [f"schedule for {sdfg.name} on {P} ranks, model {model.name}: predicted total {_fmt(total, unit)}"]
    if choice:
        lines.append(f"  {choice}")
    if getattr(model, "rates", None) is not None:
        lines.append(f"  rates: {model.rates.describe()}")
    lines.append(f"  {'maps (source line)':{TITLE}s} {'grid':12s} cost of the maps and their incoming and outgoing data")
    for group in map_groups(g, splits, exchanged):
        grid = splits[group[0].index]
        mine = costs.of(group)
        lines.append(f"  {_cut(_title(group), TITLE):{TITLE}s} {str(grid):12s} {_fmt(mine, unit)}")
        spans = _lines(group)
        for source, keys in spans:
            lead = f"{source}: " if source and len(spans) > 1 else ""
            lines.append(f"      {lead}{', '.join(keys)}")
        alts = []
        for x in sorted(set().union(*(set(cands[v.index]) for v in group)) - {grid}):
            c = costs.of(group, x)
            if c is not None:
                alts.append((c, x))
        for c, x in sorted(alts)[:alternatives]:
            lines.append(f"      or {str(x):15s} {_fmt(c, unit)} ({_fmt(c - mine, unit, sign=True)})")
    return "\n".join(lines)
