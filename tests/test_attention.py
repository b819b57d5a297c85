"""The thesis' multi-head self-attention (seed 004, 8.1.4) and its fused-QKV form, head-parallel on
4 ranks: attention without communication, the output projection's partial sums over
E = H * E_H combined once, nothing of the head-split tensors through rank 0.

Unit tier (lowered, ``comm_report`` is symbolic) plus one 4-rank mpiexec job for both programs."""
import warnings

import pytest

import distsdfg
from distsdfg.dace_compat.views import view_permutation
from distsdfg.errors import SizeError
from distsdfg.testing.mpirun import bytes_mismatch, launch_cases
from distsdfg.testing.programs import MHSA_FUSED_SCHEDULE, MHSA_FUSED_SIZES, MHSA_SIZES, MHSA_THESIS_SCHEDULE, get

SIZES = dict(MHSA_SIZES)
B, S, E, H, D = (SIZES[k] for k in ("BATCH", "SEQ", "EMB", "HEADS", "HDIM"))
FUSED = dict(MHSA_FUSED_SIZES)            # 8 heads: 2 per rank
INPUTS = {"mhsa_thesis": {"x", "W_Q", "W_K", "W_V", "W_O"}, "mhsa_fused": {"x", "X_0", "W_QKV", "W_O"}}
REDUCTIONS = ("Reduce", "Allreduce", "Reduce_scatter", "Alltoallv")


def _sizes(name):
    return FUSED if name == "mhsa_fused" else SIZES


def _lowered(name, schedule):
    warnings.simplefilter("ignore")
    sdfg = get(name).sdfg()
    if schedule == "auto":
        distsdfg.lower(sdfg, "auto", nprocs=4, plan_options=_sizes(name))
    else:
        distsdfg.lower(sdfg, schedule)
    return sdfg


@pytest.fixture(scope="module")
def reports():
    out = {}
    for name, sched in (("mhsa_thesis", MHSA_THESIS_SCHEDULE), ("mhsa_thesis", "auto"), ("mhsa_fused", "auto")):
        sdfg = _lowered(name, sched)
        out[name, "auto" if sched == "auto" else "hand"] = (sdfg, distsdfg.comm_report(sdfg, **_sizes(name)))
    return out


def _check_head_parallel(report, inputs):
    """Inputs scattered or broadcast, one reduction of the output projection's partial sums (and,
    where the result's rows are split too, the gather of its row blocks); no head-split tensor
    through rank 0."""
    between = [s for s in report if s.array not in inputs]
    outputs = {s.array for s in between if s.collective in REDUCTIONS}
    assert len(outputs) == 1, between
    (out,) = outputs
    assert [s.collective for s in between if s.collective in REDUCTIONS] in (["Reduce"], ["Allreduce"],
                                                                             ["Reduce_scatter"]), between
    assert all(s.collective in ("Scatterv", "Bcast") for s in report if s.array in inputs)
    assert not [s for s in between if s.collective in ("Gatherv", "Scatterv", "Bcast") and s.array != out], between
    return between


def _bytes(report):
    return sum(sum(s.sent) for s in report)


def test_view_permutation_of_a_transposed_operand():
    # K (B, H, S, D) read as (B*H, D, S) with strides (S*D, 1, D): batch and head merged, S and D swapped.
    assert view_permutation((2, 4, 8, 3), (8, 3, 8), (24, 1, 3)) == (0, 1, 3, 2)
    assert view_permutation((5, 7), (7, 5), (1, 7)) == (1, 0)
    assert view_permutation((5, 7), (35,), (1,)) is None          # a reshape: nothing to permute
    assert view_permutation((5, 7), (7, 4), (1, 7)) is None       # no whole dimension: a slice


def test_common_refinement_of_a_reshape():
    from distsdfg.geometry.boxes import common_refinement, reshape_box
    assert common_refinement([(2, 8, 48), (2, 8, 8, 6)]) == (2, 8, 8, 6)
    assert common_refinement([(6,), (2, 3), (3, 2)]) is None
    # Heads 2-3 of 8, their q and k columns (4 of 6): no block of (2, 8, 48), a block of the refinement.
    with pytest.raises(ValueError):
        reshape_box(((0, 0, 2, 0), (2, 8, 2, 4)), (2, 8, 8, 6), (2, 8, 48))
    assert reshape_box(((0, 0, 12), (2, 8, 12)), (2, 8, 48), (2, 8, 8, 6)) == ((0, 0, 2, 0), (2, 8, 2, 6))


def test_thesis_mhsa_hand_schedule_reduces_once(reports):
    sdfg, report = reports["mhsa_thesis", "hand"]
    between = _check_head_parallel(report, INPUTS["mhsa_thesis"])
    # (batch halves) x (head pairs): the row halves' partial sums meet in 2 groups, then rank 0 gets them.
    assert [s.collective for s in between] == ["Reduce", "Gatherv"]
    item = 8
    weights = 3 * (E * H * D) // 2 * 3 * item + E * E // 2 * 3 * item      # each rank: its head pair's columns
    x = B * S * E // 2 * 3 * item                                          # each rank: its batch half
    out = 2 * (B * S * E // 2) * item + (B * S * E // 2) * item            # Reduce in 2 groups, then Gatherv
    assert _bytes(report) == weights + x + out == 18_432
    plans = distsdfg.comm_plans(sdfg, **SIZES)
    assert all(p.collective == "local" for p in plans), [str(p) for p in plans]


def test_thesis_mhsa_auto_plans_the_same_head_parallel_layout(reports):
    # The planner sees the transposed K through its permuting copy (no Alltoallw of K_perm) and the
    # reshape of the head-split values as the output projection's reduction dimension.
    sdfg, report = reports["mhsa_thesis", "auto"]
    between = _check_head_parallel(report, INPUTS["mhsa_thesis"])
    assert [s.collective for s in between] == ["Reduce", "Gatherv"]
    assert _bytes(report) == 18_432
    assert all(p.collective == "local" for p in distsdfg.comm_plans(sdfg, **SIZES))


def test_fused_qkv_auto_is_head_parallel_at_the_ideal_bytes(reports):
    sdfg, report = reports["mhsa_fused", "auto"]
    between = _check_head_parallel(report, INPUTS["mhsa_fused"])
    # The planner's tie-break (fewer bytes summed as partial results) may prefer an equal-bytes
    # schedule that splits the projection's rows in two and exchanges head pairs (an Alltoallw)
    # over the pure head split: both move the ideal bytes below, with one Reduce of the output.
    assert [s.collective for s in between if s.collective != "Alltoallw"] in (["Reduce"], ["Reduce", "Gatherv"])
    # Two heads per rank: x to every rank, its heads' 2 * 3 * D columns of W_QKV and 2 * D rows of
    # W_O, its partial (B*S, E) sum of the output projection to rank 0.
    b, s, e, d, hp = FUSED["BATCH"], FUSED["SEQ"], FUSED["EMB"], FUSED["HDIM"], FUSED["HEADS"] // 4
    item = 8
    assert _bytes(report) == 3 * item * (b * s * e + e * 3 * d * hp + d * hp * e + b * s * e) == 18_432
    sched = sdfg._distsdfg.schedule.as_dict()
    assert sched["einsum_gemm.gemm_map"] == (1, 4, 1)           # the QKV projection split by heads
    if sched["einsum_gemm_2.gemm_map"] == (1, 1, 4):             # the pure head split: nothing moves between
        assert all(p.collective == "local" for p in distsdfg.comm_plans(sdfg, **FUSED))


def test_sizes_that_break_the_reshape_are_refused(reports):
    sdfg, _ = reports["mhsa_thesis", "hand"]
    with pytest.raises(SizeError, match="reshape"):
        distsdfg.comm_report(sdfg, **{**SIZES, "EMB": 12})      # E != H * E_H


# -- distributed placement (results stay on the ranks) -------------------------------------------------

@pytest.fixture(scope="module")
def distributed():
    warnings.simplefilter("ignore")
    out = {}
    for name, hand in (("mhsa_thesis", MHSA_THESIS_SCHEDULE), ("mhsa_fused", MHSA_FUSED_SCHEDULE)):
        for kind in ("hand", "auto"):
            sdfg = get(name).sdfg()
            if kind == "auto":        # the planner verifies its candidates lowered in this placement
                distsdfg.lower(sdfg, "auto", nprocs=4, plan_options=_sizes(name), placement="distributed")
            else:
                distsdfg.lower(sdfg, hand, placement="distributed")
            out[name, kind] = (sdfg, distsdfg.comm_report(sdfg, **_sizes(name)))
    return out


@pytest.mark.parametrize("name", ["mhsa_thesis", "mhsa_fused"])
def test_distributed_hand_schedule_reduce_scatters_the_output_once(distributed, name):
    # Inputs arrive in their blocks and the output leaves in its blocks: the only communication is
    # the output projection's partial sums, combined by one Reduce_scatter into even pieces of
    # the blocks the ranks share (no Alltoallw/Alltoallv of head-split tensors, nothing to rank 0).
    sdfg, report = distributed[name, "hand"]
    assert [(s.array, s.collective) for s in report] == [("__return", "Reduce_scatter")], report
    sz = _sizes(name)
    rows = sz["BATCH"] * sz["SEQ"] * sz["EMB"]
    # thesis: 2 groups (batch halves) of 2 (head pairs), each rank sends the half of its group's
    # block it does not keep; fused: one group of 4, each rank sends 3/4 of the whole output.
    groups, k = (2, 2) if name == "mhsa_thesis" else (1, 4)
    block = rows // groups
    assert _bytes(report) == groups * k * (block - block // k) * 8 == (2048 if name == "mhsa_thesis" else 6144)
    lay = distsdfg.layout(sdfg, "__return", nprocs=4, **sz)
    assert all(b is not None for b in lay.blocks) and all(len(lay.replicas(q)) == 1 for q in range(4))


@pytest.mark.parametrize("name", ["mhsa_thesis", "mhsa_fused"])
def test_distributed_auto_is_no_worse_than_the_hand_schedule(distributed, name):
    # The planner prices its candidates lowered in distributed placement (a schedule the solver
    # refuses is skipped): no Alltoallv, at most one combine of partial sums, and never more bytes
    # than the head-parallel hand schedule (the row-parallel output projection needs none).
    _, hand = distributed[name, "hand"]
    sdfg, report = distributed[name, "auto"]
    assert not [s for s in report if s.collective == "Alltoallv"], report
    assert len([s for s in report if s.collective in ("Reduce_scatter", "Allreduce", "Reduce")]) <= 1, report
    assert _bytes(report) <= _bytes(hand)
    moved = [s.array for s in report if s.collective == "Alltoallw"]
    assert len(moved) == len(set(moved)), report        # no array there and back
    assert all(p.collective in ("local", "Alltoallw", "Reduce_scatter", "Allreduce")
               for p in distsdfg.comm_plans(sdfg, **_sizes(name)))


def _case(name, sched):
    return name + ":" + ";".join(f"{k}={','.join(map(str, v))}" for k, v in sched.items())


CASES = [_case("mhsa_thesis", MHSA_THESIS_SCHEDULE), _case("mhsa_fused", MHSA_FUSED_SCHEDULE)]
PLACED = [_case("mhsa_thesis@distributed", MHSA_THESIS_SCHEDULE), _case("mhsa_fused@distributed", MHSA_FUSED_SCHEDULE)]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return launch_cases(4, CASES + PLACED, tmp_path_factory.mktemp("attention"), timeout=900, jobs=2)


@pytest.mark.parametrize("case", CASES)
def test_head_parallel_attention_on_4_ranks(results, case):
    r = results[case]
    assert "error" not in r, r.get("trace", r.get("error"))
    assert r["shape_ok"] and r["rel_err"] <= 1e-10, r["rel_err"]
    assert bytes_mismatch(r) is None, bytes_mismatch(r)          # PMPI-measured bytes == comm_report
    name = case.split(":")[0]
    inputs = INPUTS[name]
    between = [s for s in r["report"] if s["array"] not in inputs]
    assert [s["collective"] for s in between] == (["Reduce", "Gatherv"] if name == "mhsa_thesis" else ["Reduce"])
    assert sum(sum(s["sent"]) for s in r["report"]) == 18_432


@pytest.mark.parametrize("case", PLACED)
def test_distributed_attention_on_4_ranks(results, case):
    # Blocks in, blocks out: the assembled result equals NumPy's, and the one Reduce_scatter of
    # the output projection's partial sums is all that moves (PMPI bytes == comm_report).
    r = results[case]
    assert "error" not in r, r.get("trace", r.get("error"))
    assert r["shape_ok"] and r["rel_err"] <= 1e-10, r["rel_err"]
    assert bytes_mismatch(r) is None, bytes_mismatch(r)
    assert "__return" in r["boundary"] and set(r["boundary"]) <= INPUTS[case.split("@")[0]] | {"__return"}
    assert [(s["array"], s["collective"]) for s in r["report"]] == [("__return", "Reduce_scatter")]
