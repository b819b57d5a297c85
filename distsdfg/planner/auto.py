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

The searchers live in ``distsdfg.planner.searchers``, the pruned search for many ranks in
``distsdfg.planner.prune``. The result is a Schedule of driver maps that ``lower`` accepts.
"""
from __future__ import annotations

import copy
import warnings
from typing import List, Optional, Tuple, Union

from dace.sdfg import SDFG

from .costmodel import CostModel
from ..config import SPLIT_GAIN, WHOLE_WHEN_CHEAPER
from ..values.modes import Placement
from .timemodel import get_model
from ..analysis.eingraph import EinGraph, build_graph
from ..checks import positive_int, require_sdfg
from ..errors import DistributedLoweringError, OptionError, SymbolicSizeError
from ..analysis.kernels import maps
from ..lowering.pipeline import lower_sdfg, validate_lowered
from .prune import multilevel
from ..solver.report import comm_report, sent_once
from ..values.schedule import Schedule, as_schedule, resolve_names
from .searchers import (CANDIDATE_LIMIT, SEARCHERS, Plan, Problem, candidates, data_parallel_schedule, graph_cost,
                        sqrt_schedule, viable)
from ..dace_compat.semantics import with_numpy_semantics

__all__ = ["viable", "whole_schedule", "whole_or_split", "auto_schedule", "schedule_cost", "search", "Plan", "sqrt_schedule",
           "data_parallel_schedule", "SEARCHERS", "graph_cost", "measured_bytes"]   # search's parts: distsdfg.planner.searchers
def search(g: EinGraph, nprocs: int, model: CostModel, searcher: str = "dp", *,
           allow_fewer: bool = False) -> Plan:
    """The searcher's plan. ``dp`` is exact over every viable vector (see the module docstring)
    while no vertex has more than ``CANDIDATE_LIMIT`` of them; above, it searches the pruned
    problem of ``prune.multilevel`` (exact over the kept vectors) and improves the result by local moves."""
    if searcher not in SEARCHERS:
        raise OptionError(f"unknown searcher {searcher!r}: use one of {sorted(SEARCHERS)}")
    cands = candidates(g, nprocs, model, allow_fewer)
    if searcher == "dp" and max((len(c) for c in cands), default=0) > CANDIDATE_LIMIT and not allow_fewer and nprocs >= 4:
        return multilevel(g, nprocs, model, cands, search)
    pb = Problem(g, model, cands)
    pb.seeds = [pb.index_of(data_parallel_schedule(g, nprocs)), pb.index_of(sqrt_schedule(g, nprocs))]
    idx = SEARCHERS[searcher](pb)
    return Plan(tuple(cands[v][a] for v, a in enumerate(idx)), pb.value(idx))


# -- baselines ----------------------------------------------------------------------------------------


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
    sched = as_schedule(schedule)
    infos = maps(sdfg)
    known = {m.key: len(m.params) for m in infos}
    if any(key not in known for key in sched.keys()):      # labels (gemm_map) and "*", as lower resolves them
        from ..analysis.kernels import find_kernels, main_map_infos
        grids = resolve_names(sched.as_dict(), infos, main_map_infos(find_kernels(sdfg)))
        sched = Schedule(tuple(sorted(grids.items())), sched.sdfg)
    sched.validate_for(known, sdfg_name=sdfg.name, sources={m.key: m.source for m in infos})
    return sched


def _splits_of(g: EinGraph, schedule) -> List[Tuple[int, ...]]:
    sched = as_schedule(schedule).as_dict()
    out = []
    for v in g.vertices:
        grid = sched.get(v.key)
        out.append(tuple(grid) if grid is not None else tuple(1 for _ in v.labels))
    return out


@with_numpy_semantics
def schedule_cost(sdfg: SDFG, schedule, model="bytes", *, inputs: Union[Placement, str] = Placement.ROOT,
                  **sizes) -> float:
    """The cost model's value for any schedule (hand-written or searched)."""
    require_sdfg(sdfg, "distsdfg.schedule_cost")
    schedule = _checked(sdfg, schedule)
    g = build_graph(sdfg, **sizes)
    return graph_cost(g, _splits_of(g, schedule), get_model(model, inputs=inputs))


@with_numpy_semantics
def auto_schedule(sdfg: SDFG, nprocs: int, *, cost_model="time", searcher: str = "dp",
                  inputs: Union[Placement, str] = Placement.ROOT,
                  memory_limit: Optional[int] = None, allow_fewer: bool = False, verify: Optional[bool] = None,
                  placement=None, whole: Optional[bool] = None, **sizes) -> Schedule:
    """Choose a schedule for ``sdfg`` on ``nprocs`` ranks (EinDecomp).

    ``whole`` (default: on unless ``DISTSDFG_WHOLE=0``, ``distsdfg.config``): with the time model
    and root placement, the schedule of all ones (the whole program on rank 0, which ``lower``
    builds as DaCe alone would) when the best split schedule is priced at more than
    ``1 / config.SPLIT_GAIN`` of it: splitting a small or memory-bound program, whose inputs
    rank 0 must first scatter, loses.

    ``cost_model``: 'time' (the default: each rank's compute at calibrated rates plus
    alpha-beta communication, ``planner.timemodel``), 'bytes' (this runtime's communication),
    'paper' (EinDecomp's bound), 'alpha-beta' (bytes priced as time, no compute) or a
    CostModel. ``inputs``: 'root' (inputs and outputs live on rank 0 and their scatter and
    gather are priced) or 'distributed'. ``memory_limit``: bytes of local buffers per rank per
    kernel. ``verify`` (default: on for graphs of at most 40 kernels): with the bytes model,
    also prices the searched schedule and the data-parallel and SQRT baselines exactly, by
    lowering copies of the SDFG and reading ``comm_report``, and returns the one that moves the
    fewest bytes; with the time model, returns the first of them in the model's order whose
    lowering DaCe validates (the model already prices what the bytes model counts), except with
    ``inputs='distributed'``, where both models are verified by bytes as follows. With ``inputs='distributed'``
    the copies are lowered in ``placement`` (default ``"distributed"``), and the schedule searched
    with root pricing is a candidate too; a candidate the lowering or the solver refuses is skipped.
    """
    require_sdfg(sdfg, "distsdfg.auto_schedule")
    nprocs = positive_int(nprocs, "auto_schedule's nprocs")
    g = _graph(sdfg, sizes, f"auto_schedule(sdfg, {nprocs}", deferrable=True)
    model = get_model(cost_model, inputs=inputs, memory_limit=memory_limit)
    plan = search(g, nprocs, model, searcher, allow_fewer=allow_fewer)
    best = plan.schedule(g, sdfg.name)
    if verify is None:
        verify = len(g.vertices) <= 40 and cost_model in ("bytes", "time", None) and inputs in Placement.values()
    if verify and model.name == "time" and inputs != Placement.DISTRIBUTED:
        cands = [best, data_parallel_schedule(g, nprocs), sqrt_schedule(g, nprocs)]
        order = sorted(range(len(cands)), key=lambda i: (graph_cost(g, _splits_of(g, cands[i]), model), i))
        best = _first_valid(sdfg, nprocs, [cands[i] for i in order], sizes)
    elif verify:
        cands = [best, data_parallel_schedule(g, nprocs), sqrt_schedule(g, nprocs)]
        if inputs == Placement.DISTRIBUTED:
            # The bytes model prices the program's boundary, not the homes a distributed placement
            # keeps between states: the root-priced search's schedule is often the better one there.
            root = search(g, nprocs, get_model(cost_model, inputs=Placement.ROOT, memory_limit=memory_limit), searcher,
                          allow_fewer=allow_fewer)
            cands.insert(1, root.schedule(g, sdfg.name))
            placement = Placement.DISTRIBUTED if placement in (None, Placement.ROOT) else placement
        best = _verified(sdfg, g, nprocs, cands, sizes, placement if inputs == Placement.DISTRIBUTED else None)
    best, _ = whole_or_split(g, best, model, nprocs, inputs, whole)
    return best.with_sdfg(sdfg.name) if best.sdfg is None else best


def whole_or_split(g: EinGraph, best: Schedule, model: CostModel, nprocs: int, inputs: str,
                   whole: Optional[bool] = None) -> Tuple[Schedule, str]:
    """``best`` or, where the whole program on one rank is priced at most ``SPLIT_GAIN`` times
    ``best``'s cost (time model, root placement, ``whole`` on: default ``config.WHOLE_WHEN_CHEAPER``),
    the schedule of all ones; with a line that says which and why ('' when not compared)."""
    if whole is None:
        whole = WHOLE_WHEN_CHEAPER.get()
    if not (whole and nprocs > 1 and inputs == Placement.ROOT and model.name == "time"):
        return best, ""
    ones = whole_schedule(best)
    split_cost = graph_cost(g, _splits_of(g, best), model)
    whole_cost = graph_cost(g, _splits_of(g, ones), model)
    if whole_cost <= split_cost * SPLIT_GAIN:
        return ones, (f"the whole program runs on rank 0 (as DaCe alone builds it): the best split schedule is "
                      f"priced at {_fmt(split_cost, 's')}, one rank at {_fmt(whole_cost, 's')}, and a split must be "
                      f"priced {SPLIT_GAIN:g}x faster to be chosen")
    return best, (f"split: priced at {_fmt(split_cost, 's')} against {_fmt(whole_cost, 's')} for the whole "
                  f"program on rank 0")


def whole_schedule(schedule: Schedule) -> Schedule:
    """``schedule`` with every grid made of ones: the whole program on one rank."""
    return Schedule.of({k: (1,) * len(g) for k, g in schedule.as_dict().items()}, sdfg=schedule.sdfg)


def measured_bytes(sdfg: SDFG, schedule, nprocs: int, **sizes) -> int:
    """Total bytes ``comm_report`` gives for ``schedule`` (lowers a copy of ``sdfg``)."""
    return _priced(sdfg, schedule, nprocs, sizes)[0]


def _priced(sdfg: SDFG, schedule, nprocs: int, sizes, placement=None):
    """``(bytes, lowered copy)``: the copy is lowered without DaCe's validation and rank-local
    optimisation, which change no communication (``validate_lowered`` checks a chosen one)."""
    sd = copy.deepcopy(sdfg)
    sd._distsdfg = None
    sched = Schedule.of(as_schedule(schedule).as_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lower_sdfg(sd, sched, optimize=False, validate=False, placement=placement)
        return sum(sent_once(s) for s in comm_report(sd, nprocs=nprocs, summary=True, **sizes)), sd


def _first_valid(sdfg, nprocs, candidates, sizes, placement=None) -> Schedule:
    """The first candidate whose lowering the pipeline accepts and DaCe validates (the first if none)."""
    for cand in candidates:
        try:
            _, sd = _priced(sdfg, Schedule.of(cand.as_dict()), nprocs, sizes, placement)
            validate_lowered(sd, sdfg.name, cand)
        except DistributedLoweringError:
            continue
        return Schedule.of(cand.as_dict(), sdfg=sdfg.name)
    return Schedule.of(candidates[0].as_dict(), sdfg=sdfg.name)


def _verified(sdfg, g, nprocs, candidates, sizes, placement=None) -> Schedule:
    """The candidate that moves the fewest bytes when lowered (in ``placement``; ties: the earlier
    one) and whose lowering DaCe validates; the first candidate if none can be priced."""
    priced, seen = [], set()
    for i, cand in enumerate(candidates):
        key = cand.to_json()
        if key in seen:         # the searched schedule is often one of the baselines
            continue
        seen.add(key)
        try:
            b, sd = _priced(sdfg, Schedule.of(cand.as_dict()), nprocs, sizes, placement)
        except DistributedLoweringError:
            continue
        priced.append((b, i, cand, sd))
    for _, _, cand, sd in sorted(priced, key=lambda x: x[:2]):
        try:
            validate_lowered(sd, sdfg.name, cand)
        except DistributedLoweringError:
            continue
        return Schedule.of(cand.as_dict(), sdfg=sdfg.name)
    return Schedule.of(candidates[0].as_dict(), sdfg=sdfg.name)


def _fmt(x: float, unit: str, sign: bool = False) -> str:
    if unit == "s":
        return f"{x:+.3e} s" if sign else f"{x:.3e} s"
    return f"{x:+,.0f} B" if sign else f"{x:,.0f} B"
