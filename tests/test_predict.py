"""distsdfg.planner.predict: a lowered plan priced on a machine model. Unit tier, no compile."""
import dataclasses
import json
import warnings

import dace
import pytest

import distsdfg
from distsdfg.errors import OptionError
from distsdfg.planner.predict import PRESETS, Machine, machine, predict, predict_curve

N = dace.symbol("N")


@dace.program
def square_mm(A: dace.float64[N, N], B: dace.float64[N, N]):
    return A @ B


def _sdfg():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return square_mm.to_sdfg()


def test_machines_round_trip_and_calibration_files(tmp_path):
    m = PRESETS["daint-xc50"]
    assert Machine.from_json(m.to_json()) == m and "daint-xc50" in str(m)
    assert machine(None) == PRESETS["this-machine"] and machine("daint-xc50") is m
    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps({"alpha": 2e-6, "beta": 3e-10, "ranks": 4}))      # what distsdfg calibrate writes
    got = machine(str(cal))
    assert (got.alpha, got.beta, got.flop_rate) == (2e-6, 3e-10, PRESETS["this-machine"].flop_rate)
    own = tmp_path / "m.json"
    own.write_text(m.to_json())
    assert machine(str(own)) == m
    with pytest.raises(OptionError, match="unknown machine"):
        machine("cray-1")


def test_row_split_matmul_is_priced_by_its_roots_bytes_and_its_flops():
    """gemm (4, 1, 1) at N=64 from rank 0: the root sends 3/4 of A (Scatterv) and B to three ranks
    (Bcast), and receives 3/4 of C (Gatherv): 4.5 N^2 doubles on the busiest rank; each rank
    multiplies a quarter of the rows: 2 N^3 / 4 flops."""
    sdfg = _sdfg()
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"gemm_map": (4, 1, 1)}))
    bytes_only = Machine("bytes", alpha=0.0, beta=1.0, flop_rate=1e30, memory_bandwidth=1e30)
    p = predict(sdfg, bytes_only, nprocs=4, N=64)
    assert p.comm_seconds == pytest.approx(4.5 * 64 * 64 * 8)
    flops_only = Machine("flops", alpha=0.0, beta=0.0, flop_rate=1.0, memory_bandwidth=1e30)
    q = predict(sdfg, flops_only, nprocs=4, N=64)
    assert q.comm_seconds == 0 and q.compute_seconds == pytest.approx(2 * 64 ** 3 / 4, rel=0.01)
    latency = dataclasses.replace(bytes_only, alpha=1.0, beta=0.0)
    # Scatterv and Gatherv: the root talks to 3 ranks each; Bcast: ceil(log2 4) = 2 rounds
    assert predict(sdfg, latency, nprocs=4, N=64).comm_seconds == pytest.approx(3 + 2 + 3)


def test_root_placement_scales_sublinearly_and_distributed_placement_does_not():
    """The shape of the thesis' figure 8.2 (an 8192^3-like matmul on a Piz-Daint-like machine):
    with the operands scattered from and gathered to rank 0, the root's bytes bound the speedup;
    with distributed placement the kernel's work divides."""
    root = predict_curve(_sdfg, [1, 8], "daint-xc50", N=2048)
    dist = predict_curve(_sdfg, [1, 8], "daint-xc50", placement="distributed", N=2048)
    assert root[0].seconds == pytest.approx(dist[0].seconds)
    assert root[1].seconds > root[0].seconds / 2           # far from 8x
    assert dist[0].seconds / dist[1].seconds > 6


def test_cli_prints_and_writes_the_curve(tmp_path, capsys):
    import os
    from distsdfg.launch.cli import main
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path / "curve.json"
    main(["predict", os.path.join(root, "examples", "matmul.py") + ":matmul", "-n", "1,2", "--sizes", "M=64", "N=48",
          "K=32", "--machine", "daint-xc50", "--json", str(out)])
    text = capsys.readouterr().out
    assert "daint-xc50" in text and "P=    2" in text
    points = json.loads(out.read_text())["points"]
    assert [p["nprocs"] for p in points] == [1, 2] and points[0]["comm_seconds"] == 0


def test_ranks_sharing_cores_compute_slower_and_partial_sums_cost_their_combination():
    """``cores``: 4 ranks on 2 cores take twice the per-rank kernel time of 4 ranks with a core
    each; a split reduction axis adds the combination of the received partial sums."""
    sdfg = _sdfg()
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"gemm_map": (1, 2, 2)}))
    own = Machine("own", alpha=0.0, beta=0.0, flop_rate=1.0, memory_bandwidth=1e30)
    shared = dataclasses.replace(own, cores=2)
    a, b = predict(sdfg, own, nprocs=4, N=64), predict(sdfg, shared, nprocs=4, N=64)
    assert b.compute_seconds == pytest.approx(2 * a.compute_seconds) and a.comm_seconds < 1e-20
    assert shared.oversubscription(1) == 1 and shared.oversubscription(8) == 4
    # the partial sums of C (k split in two): each Reduce/Allreduce receiver combines what it gets
    mem = Machine("mem", alpha=0.0, beta=0.0, flop_rate=1e30, memory_bandwidth=1.0)
    steps = distsdfg.comm_report(sdfg, nprocs=4, summary=True, N=64)
    combined = sum(3 * s.max_received for s in steps if s.collective in ("Reduce", "Allreduce", "Reduce_scatter"))
    assert combined > 0
    assert predict(sdfg, mem, nprocs=4, N=64).comm_seconds == pytest.approx(combined)
    old = json.dumps({k: v for k, v in json.loads(shared.to_json()).items() if k != "cores"})
    assert Machine.from_json(old).cores == 0 and Machine.from_json(shared.to_json()) == shared
