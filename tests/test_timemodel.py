"""The planner's time model: compute of each rank's block plus alpha-beta communication.
No compile, no MPI (the conftest points the calibration file at a path that does not exist)."""
import dataclasses
import json

import pytest

import distsdfg
from distsdfg.analysis.eingraph import build_graph
from distsdfg.planner.auto import graph_cost, search
from distsdfg.planner.costmodel import AlphaBetaModel
from distsdfg.planner.timemodel import (DEFAULTS, Rates, TimeModel, get_model, load_rates, measure_compute)
from test_planner import _graph      # an EinGraph of a registry program at its sizes


def _workload(name, **sizes):
    """The EinGraph of a benchmark workload (its program has symbolic sizes)."""
    from benchmarks import workloads
    return build_graph(workloads.get(name).program.to_sdfg(), **sizes)


def test_defaults_without_a_calibration_file():
    assert load_rates() is DEFAULTS and DEFAULTS.source == "defaults"
    m = get_model(None)
    assert isinstance(m, TimeModel) and m.rates == DEFAULTS
    assert isinstance(get_model("time"), TimeModel)
    sd, g, sizes = _graph("matmul", M=256, N=128, K=192)
    assert distsdfg.auto_schedule(sd, 2, **sizes).as_dict() == {g.vertices[0].key: (2, 1, 1)}
    assert "[defaults]" in distsdfg.explain(sd, nprocs=2, **sizes)


def test_calibration_file_round_trip(tmp_path, monkeypatch):
    mine = Rates(gemm=12e9, gemm_half=(3.0, 5.0, 7.0), memory=3e9, alpha=2e-6, beta=1e-9)
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({**mine.to_dict(), "ranks": 2}))
    got = load_rates(str(path))
    assert got == dataclasses.replace(mine, source=str(path))
    monkeypatch.setenv("DISTSDFG_CALIBRATION", str(path))
    assert get_model("time").rates == got                     # the default path follows the variable
    ab = AlphaBetaModel.from_file()
    assert (ab.alpha, ab.beta) == (2e-6, 1e-9)
    assert str(path) in distsdfg.TimeModel().rates.describe()
    # An older file (alpha and beta only) keeps the default compute rates.
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"alpha": 3e-6, "beta": 2e-10, "ranks": 4}))
    r = load_rates(str(old))
    assert (r.alpha, r.beta, r.gemm, r.memory, r.gemm_half) == (3e-6, 2e-10, DEFAULTS.gemm, DEFAULTS.memory,
                                                                DEFAULTS.gemm_half)
    with pytest.raises(OSError):
        load_rates(str(tmp_path / "missing.json"))


def test_measure_compute_gives_positive_rates():
    d = measure_compute(size=128, thin=8, repeats=2)
    assert d["gemm"] > 1e8 and d["memory"] > 1e8
    assert len(d["gemm_half"]) == 3 and all(1.0 <= h <= 512 for h in d["gemm_half"])
    json.dumps(d)                                             # what calibrate writes


def test_thin_and_uneven_blocks_cost_more():
    r = DEFAULTS
    # Same flops: a product with an extent of 8 runs at about a third of a square one's rate.
    assert r.gemm_seconds(8, 4096, 4096) > 2.5 * r.gemm_seconds(1024, 512, 256)
    assert r.gemm_seconds(512, 512, 512, itemsize=4) == pytest.approx(r.gemm_seconds(512, 512, 512) / 2)
    sd, g, sizes = _graph("matmul", M=90, N=64, K=64)
    v = g.vertices[0]
    m = TimeModel(DEFAULTS)
    split = lambda d: dict(zip(v.labels, d))        # noqa: E731
    # 90 rows in 4 blocks: the largest is 23 rows, priced, not 22.5.
    assert m.compute(v, split((4, 1, 1))) == pytest.approx(DEFAULTS.gemm_seconds(23, 64, 64))


def test_time_prefers_the_measured_faster_grid_where_bytes_do_not():
    """matmul 1024^3 on 4 ranks: the bytes model takes (2, 1, 2) (17% fewer bytes), which packs A's
    blocks and reduces C's partial sums and ran 2x slower than the row split (docs/benchmarks.md);
    the time model takes the row split. The MLP at P = 2: bytes take Megatron's column/row
    split (10% fewer bytes, packed W1 blocks, a reduce-scatter), time the row split (measured
    faster, docs/planner.md)."""
    sd, g, sizes = _graph("matmul", M=1024, N=1024, K=1024)
    assert search(g, 4, get_model("bytes"), "dp").splits == ((2, 1, 2),)
    assert search(g, 4, TimeModel(DEFAULTS), "dp").splits == ((4, 1, 1),)
    g = _workload("mlp", NB=1024, NI=1024, NH=2048, NO=512)
    gemms = [v.index for v in g.vertices if v.kind == "library"]
    by_bytes = search(g, 2, get_model("bytes"), "dp").splits
    by_time = search(g, 2, TimeModel(DEFAULTS), "dp").splits
    assert [by_bytes[i] for i in gemms] == [(1, 2, 1), (1, 1, 2)]
    assert all(d[0] == 2 for d in by_time)


def test_time_model_keeps_ties_and_search_is_exact():
    # At P = 2 the row split of A @ B wins by packing and partial sums, softmax by its batch split.
    for name, sizes, want in (("matmul", dict(M=256, N=256, K=256), (2, 1, 1)), ("softmax", {}, (2, 1, 1, 1))):
        sd, g, sizes = _graph(name, **sizes)
        m = TimeModel(DEFAULTS)
        plan = search(g, 2, m, "dp")
        assert all(d == want for d in plan.splits), (name, plan.splits)
        assert plan.value == pytest.approx(search(g, 2, m, "exhaustive").value)
        assert plan.value == pytest.approx(graph_cost(g, plan.splits, m))
    # Equal times (an element-wise kernel at P = 4 over a square array): the tie-break takes the
    # contiguous row blocks, and adds less than a nanosecond.
    sd, g, sizes = _graph("add_odd")
    m = TimeModel(DEFAULTS)
    plan = search(g, 2, m, "dp")
    assert plan.splits[0][0] == 2


def test_resets_follow_their_accumulator():
    """A reset map whose blocks are not the accumulator's would be filled apart: the time model
    prices that, so every reset takes its einsum's grid."""
    g = _workload("megatron", MB=4, MS=128, ME=256, MH=8, MEH=32, MF=1024)
    plan = search(g, 2, TimeModel(DEFAULTS), "dp")
    for e in g.edges:
        if e.acc and g.vertices[e.src].constant:
            u, v = g.vertices[e.src], g.vertices[e.dst]
            out = dict(zip(v.labels, plan.splits[v.index]))
            assert dict(zip(u.labels, plan.splits[u.index])) == {l: out.get(l, 1) for l in u.labels}


def test_explain_names_the_rates_and_seconds():
    sd, g, sizes = _graph("mlp")
    text = distsdfg.explain(sd, nprocs=4, **sizes)
    assert "model time" in text and "rates: GEMM" in text and " s" in text
    assert "model bytes" in distsdfg.explain(sd, nprocs=4, cost_model="bytes", **sizes)
