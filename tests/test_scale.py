"""Solving for many ranks without comparing every pair: the indexed solver gives exactly the
plans of the pairwise definitions (unit tier: no compile, no MPI)."""
import dataclasses
import itertools

import numpy as np
import pytest

from distsdfg.geometry.boxindex import BoxIndex, any_overlap
from distsdfg.mpi.encode import encode_plan
from distsdfg.errors import UnsupportedProgramError
from distsdfg.solver.redistribute import Message, intersect, plan_redistribution, subtract
from distsdfg.solver.solve import ConcreteRedist, given_values, lowered_of, solve_plan
from distsdfg.testing.simulate import grid_blocks


# -- the pairwise definitions the indexed code must agree with --------------------------------------
def _meets(a, b):
    return intersect(a, b) is not None


def _overlap_pairwise(boxes):
    bs = [b for b in boxes if b is not None]
    return any(_meets(a, b) for a, b in itertools.combinations(bs, 2))


def _fetch_pairwise(src, dst):
    """Every receiver tries every other rank in turn, the nearest after it first. Where distinct
    source blocks are disjoint, each first holder of a block sends its block's intersections with
    what the receiver lacks (nothing is cut further); otherwise what is left is cut after each."""
    P = len(src)
    msgs = []
    distinct = list(dict.fromkeys(b for b in src if b is not None))
    disjoint = not _overlap_pairwise(distinct)
    for q, need in enumerate(dst):
        if need is None:
            continue
        own = intersect(src[q], need)
        if own is not None:
            msgs.append(Message(q, q, own))
        rest = subtract(need, src[q])
        if disjoint:
            used = {src[q]}
            for p in [(q + i) % P for i in range(1, P)]:
                if src[p] is None or src[p] in used:
                    continue
                used.add(src[p])
                msgs += [Message(p, q, intersect(b, src[p])) for b in rest if _meets(b, src[p])]
            continue
        for p in [(q + i) % P for i in range(1, P)]:
            if not rest:
                break
            nxt = []
            for b in rest:
                piece = intersect(b, src[p])
                if piece is None:
                    nxt.append(b)
                    continue
                msgs.append(Message(p, q, piece))
                nxt.extend(subtract(b, piece))
            rest = nxt
    msgs.sort(key=lambda m: (m.src, m.dst))
    return tuple(msgs)


def _partial_pairwise(src, dst):
    return tuple(Message(p, q, intersect(s, d)) for q, d in enumerate(dst) for p, s in enumerate(src)
                 if _meets(s, d))


# -- layouts ----------------------------------------------------------------------------------------
SHAPE = (24, 18, 10)


def _random_boxes(rng, P, empty=0.2):
    out = []
    for _ in range(P):
        if rng.random() < empty:
            out.append(None)
            continue
        st = tuple(int(rng.integers(0, n)) for n in SHAPE)
        out.append((st, tuple(int(rng.integers(1, n - s + 1)) for s, n in zip(st, SHAPE))))
    return out


def _layouts(P, rng):
    """Grids of blocks (some replicated, some with ranks left over), halos, random boxes."""
    out = []
    for grid in [(P, 1, 1), (1, P, 1), (2, P // 2, 1), (P // 4, 2, 2)]:
        out.append(grid_blocks(SHAPE, grid))
    out.append(grid_blocks(SHAPE, (2, 2, P // 4), dims=[0, 1, None]))       # replicated over the last axis
    out.append(grid_blocks(SHAPE, (P // 2, 1, 1)) + [None] * (P - P // 2))     # half the ranks idle
    rows = grid_blocks(SHAPE, (P, 1, 1))
    out.append([None if b is None else ((max(b[0][0] - 1, 0),) + b[0][1:],
                                        (min(b[0][0] + b[1][0] + 1, SHAPE[0]) - max(b[0][0] - 1, 0),) + b[1][1:])
                for b in rows])                                                 # rows with a halo of 1
    out.append([(tuple(0 for _ in SHAPE), SHAPE)] * P)                           # whole on every rank
    out += [_random_boxes(rng, P) for _ in range(3)]
    return out


@pytest.mark.parametrize("P", [4, 8, 12])
def test_index_hits_and_overlap_match_pairwise(P):
    rng = np.random.default_rng(P)
    layouts = _layouts(P, rng)
    for lay in layouts:
        index = BoxIndex(lay)
        for query in [b for other in layouts for b in other]:
            want = [p for p, b in enumerate(lay) if b is not None and query is not None and _meets(b, query)]
            assert index.hits(query) == want
        assert any_overlap(lay) == _overlap_pairwise(lay)


@pytest.mark.parametrize("P", [4, 8, 12])
def test_redistribution_messages_match_pairwise(P):
    """Alltoallw/Isend-Irecv fetches and Alltoallv contributions over every pair of layouts."""
    rng = np.random.default_rng(100 + P)
    layouts = _layouts(P, rng)
    seen = set()
    for src, dst in itertools.product(layouts, repeat=2):
        plan = plan_redistribution("X", src, dst, None, inplace=True)
        assert plan.messages == tuple(m for m in _fetch_pairwise(src, dst) if m.src != m.dst)
        seen.add(plan.collective)
        for op in ("sum", None):
            try:
                plan = plan_redistribution("X", src, dst, op)
            except UnsupportedProgramError:
                assert op is None or not _overlap_pairwise(src)
                continue         # some destination element is held by no rank
            if plan.collective == "Alltoallv":
                assert plan.messages == _partial_pairwise(src, dst)
            if plan.collective == "Alltoallw":
                assert plan.messages == _fetch_pairwise(src, dst)
            seen.add(plan.collective)
    assert {"Alltoallw", "Alltoallv", "Isend/Irecv", "Allgatherv", "local"} <= seen


def _own(plan, r):
    """The whole plan as rank ``r`` needs it: the messages it sends or receives."""
    return dataclasses.replace(plan, messages=tuple(m for m in plan.messages if r in (m.src, m.dst)), rank=r)


@pytest.mark.parametrize("P", [4, 8])
def test_per_rank_plans_are_the_whole_plans_messages(P):
    """``plan_redistribution(rank=r)``: the whole plan's collective, groups and pieces, and exactly
    the messages rank r sends or receives, in the same order."""
    rng = np.random.default_rng(200 + P)
    layouts = _layouts(P, rng)
    for src, dst in itertools.product(layouts, repeat=2):
        for op, inplace in (("sum", False), (None, False), (None, True)):
            try:
                whole = plan_redistribution("X", src, dst, op, inplace=inplace)
            except UnsupportedProgramError:
                for r in range(P):
                    with pytest.raises(UnsupportedProgramError):
                        plan_redistribution("X", src, dst, op, inplace=inplace, rank=r)
                continue
            for r in range(P):
                assert plan_redistribution("X", src, dst, op, inplace=inplace, rank=r) == _own(whole, r)
    with pytest.raises(ValueError, match="rank 1 alone"):
        plan_redistribution("X", layouts[0], layouts[1], rank=1).traffic()


def _lowered(sdfg, schedule, **sizes):
    import distsdfg
    distsdfg.lower(sdfg, schedule)
    return lowered_of(sdfg), given_values(sdfg, sizes)


def _check_tables(low, values, P):
    """Every rank's call-time solve equals the whole solve restricted to that rank, table for table."""
    whole = solve_plan(low, values, P)
    redists = 0
    for r in range(P):
        mine = solve_plan(low, values, P, rank=r)
        want = [dataclasses.replace(cs, plan=_own(cs.plan, r)) if isinstance(cs, ConcreteRedist) else cs
                for cs in whole]
        assert mine == want
        assert np.array_equal(encode_plan(mine, r), encode_plan(want, r))
        redists += sum(isinstance(cs, ConcreteRedist) and cs.plan.collective != "local" for cs in mine)
    return redists


def test_per_rank_solve_of_programs(programs, P=6):
    """Whole programs (symbolic lowering, no compile): grid-to-grid steps between matrix products
    (partial sums, Alltoallw), an MLP, and in-place halo exchanges of a Jacobi loop."""
    import distsdfg
    moved = 0
    for name, sizes in [("matrix_chain", dict(NS=40, NT=8, NH=64)), ("mlp", {}), ("jacobi2d", dict(N=18, TSTEPS=3))]:
        sdfg = getattr(programs, name).to_sdfg()
        sched = distsdfg.auto_schedule(sdfg, P, verify=False, **sizes)
        moved += _check_tables(*_lowered(sdfg, sched, **sizes), P)
    assert moved > 0


def test_comm_report_summary(programs):
    """Summaries equal the per-rank report summed, call by call; they are the default above
    SUMMARY_ABOVE ranks; format_report and the bytes total read both kinds."""
    import distsdfg
    from distsdfg.solver.report import SUMMARY_ABOVE, CommSummary, format_report, sent_once
    sdfg = programs.get("mlp").sdfg()
    sizes = {}
    distsdfg.lower(sdfg, distsdfg.auto_schedule(sdfg, 8, verify=False))
    full = distsdfg.comm_report(sdfg, nprocs=8, **sizes)
    summ = distsdfg.comm_report(sdfg, nprocs=8, summary=True, **sizes)
    assert full and len(summ) == len(full) and all(isinstance(s, CommSummary) for s in summ)
    for f, s in zip(full, summ):
        assert (s.collective, s.array, s.nranks, s.repeats) == (f.collective, f.array, 8, f.repeats)
        assert (s.bytes_sent, s.bytes_received) == (sum(f.sent), sum(f.received))
        assert (s.max_sent, s.max_received) == (max(f.sent), max(f.received))
        assert s.ranks == sum(1 for a, b in zip(f.sent, f.received) if a or b)
        assert 0 < s.pairs <= 8 * 7
        if f.collective in ("Scatterv", "Bcast"):          # one sender per receiver: root or group head
            assert s.pairs == sum(1 for b in f.received if b)
        if f.collective == "Gatherv":
            assert s.pairs == sum(1 for b in f.sent if b)
    assert format_report(summ).splitlines()[-1] == format_report(full).splitlines()[-1]
    big = distsdfg.comm_report(sdfg, nprocs=SUMMARY_ABOVE + 1, **sizes)
    assert big and all(isinstance(s, CommSummary) and s.nranks == SUMMARY_ABOVE + 1 for s in big)
    assert sum(sent_once(s) for s in big) == sum(sent_once(s) for s in
                                                  distsdfg.comm_report(sdfg, nprocs=SUMMARY_ABOVE + 1, summary=False))
