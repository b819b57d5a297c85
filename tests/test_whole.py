"""The whole program on rank 0 (``distsdfg.lowering.whole``), the planner's choice of it, maps fused
before planning, and released results written again.

Symbolic tier (lowering and planning only) plus compiled runs in this process on mpi4py's one-rank
COMM_WORLD, against NumPy. ``conftest.py`` turns the whole-program path off for the other test files
(``DISTSDFG_WHOLE=0``); these tests turn it on.
"""
import gc

import dace
import numpy as np
import pytest

import distsdfg
from distsdfg.config import SPLIT_GAIN, WHOLE_WHEN_CHEAPER
from distsdfg.mpi import DistributedMemlet

N, M, K = dace.symbol("N"), dace.symbol("M"), dace.symbol("K")
TSTEPS = dace.symbol("TSTEPS")


@dace.program
def chain(x: dace.float64[N], y: dace.float64[N]):
    return np.exp((x * y + 2) * -0.5) * x - y


@dace.program
def jacobi(A: dace.float64[N, N], B: dace.float64[N, N]):
    for t in range(1, TSTEPS):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])


@dace.program
def triangular(C: dace.float64[N, N], A: dace.float64[N, M]):
    for i in range(N):
        C[i, :i + 1] *= 0.5
        for k in range(M):
            C[i, :i + 1] += A[i, k] * A[:i + 1, k]


@dace.program
def mlp(x: dace.float64[M, K], w: dace.float64[K, N]):
    h = np.maximum(x @ w, 0.0)
    return np.sum(h, axis=1)


def _steps(sdfg):
    return [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, DistributedMemlet)]


def _maps(sdfg):
    return sum(isinstance(n, dace.nodes.MapEntry) for n, _ in sdfg.all_nodes_recursive())


@pytest.fixture
def whole_on(monkeypatch):
    monkeypatch.setenv(WHOLE_WHEN_CHEAPER.env, "1")


def test_flag_reads_the_environment(monkeypatch):
    monkeypatch.setenv(WHOLE_WHEN_CHEAPER.env, "0")
    assert not WHOLE_WHEN_CHEAPER.get()
    for on in ("", "1", "yes"):
        monkeypatch.setenv(WHOLE_WHEN_CHEAPER.env, on)
        assert WHOLE_WHEN_CHEAPER.get()


def test_one_rank_is_the_program_as_dace_optimises_it(whole_on):
    sdfg = jacobi.to_sdfg()
    written = _maps(sdfg)
    distsdfg.lower(sdfg, "auto", nprocs=1, plan_options=dict(N=40, TSTEPS=5))
    low = sdfg._distsdfg
    assert low.rank0_only and low.steps == [] and not _steps(sdfg)
    assert _maps(sdfg) < written            # each sweep's element-wise chain fused into one map
    assert distsdfg.comm_report(sdfg, N=40, TSTEPS=5) == [] or all(
        r.bytes_sent == 0 for r in distsdfg.comm_report(sdfg, N=40, TSTEPS=5))


def test_one_rank_turns_independent_triangular_loops_into_maps(whole_on):
    """DaCe's LoopToMap refuses a loop whose inner ranges depend on its variable; the whole program
    turns it with distsdfg's test (``analysis.loopmaps``), so its inner maps enter no parallel region
    per iteration (about 0.4 us each, even on one thread)."""
    sdfg = triangular.to_sdfg()
    distsdfg.lower(sdfg, "auto", nprocs=1, plan_options=dict(N=30, M=20))
    top = [n for st in sdfg.states() for n in st.nodes() if isinstance(n, dace.nodes.MapEntry)
           and st.entry_node(n) is None]
    assert [tuple(m.map.params) for m in top] == [("i",)]


@pytest.mark.parametrize("prog", ["chain", "jacobi", "converge", "mlp", "triangular"])
def test_one_rank_whole_against_numpy(whole_on, prog):
    rng = np.random.default_rng(5)
    if prog == "chain":
        x, y = rng.random(1000), rng.random(1000)
        sdfg = chain.to_sdfg()
        want = np.exp((x * y + 2) * -0.5) * x - y
        call = dict(x=x, y=y)
    elif prog == "jacobi":
        A, B = rng.random((30, 30)), rng.random((30, 30))
        a, b = A.copy(), B.copy()
        for _ in range(1, 6):
            b[1:-1, 1:-1] = 0.2 * (a[1:-1, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] + a[2:, 1:-1] + a[:-2, 1:-1])
            a[1:-1, 1:-1] = 0.2 * (b[1:-1, 1:-1] + b[1:-1, :-2] + b[1:-1, 2:] + b[2:, 1:-1] + b[:-2, 1:-1])
        sdfg = jacobi.to_sdfg()
        call, want = dict(A=A, B=B, TSTEPS=6), None
    elif prog == "converge":       # a while loop with a max-change test (benchmarks.user_programs)
        from benchmarks.user_programs import heat_while, heat_while_np
        T = np.zeros((24, 24))
        T[0, :] = 1.0
        t = T.copy()
        want = heat_while_np(t, 1e-4, 50)
        sdfg = heat_while.to_sdfg()
        call = dict(T=T, tol=1e-4, max_steps=50)
    elif prog == "triangular":
        C, A = rng.random((30, 30)), rng.random((30, 20))
        want = C.copy()
        for i in range(30):
            want[i, :i + 1] *= 0.5
            want[i, :i + 1] += A[:i + 1] @ A[i]
        sdfg = triangular.to_sdfg()
        call = dict(C=C, A=A)
    else:
        x, w = rng.random((20, 30)), rng.random((30, 10))
        sdfg = mlp.to_sdfg()
        call, want = dict(x=x, w=w), np.sum(np.maximum(x @ w, 0.0), axis=1)
    sdfg.name = f"whole_{prog}"
    distsdfg.lower(sdfg, "auto", nprocs=1)
    fn = distsdfg.compile(sdfg)
    got = fn(**call)
    if prog == "jacobi":
        np.testing.assert_allclose(call["A"], a, rtol=1e-12)
        np.testing.assert_allclose(call["B"], b, rtol=1e-12)
    elif prog == "converge":
        np.testing.assert_array_equal(np.asarray(got).reshape(-1), want)
        np.testing.assert_allclose(call["T"], t, rtol=1e-12)
    elif prog == "triangular":
        np.testing.assert_allclose(call["C"], want, rtol=1e-12)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-12)
    progs = list(fn.programs.values()) if hasattr(fn, "programs") else [fn]     # planned at the first call
    assert progs and all(p.lowered.rank0_only for p in progs)


def test_released_results_are_written_again_kept_ones_never(whole_on):
    sdfg = chain.to_sdfg()
    sdfg.name = "whole_chain_pool"
    distsdfg.lower(sdfg, "auto", nprocs=1)
    fn = distsdfg.compile(sdfg)
    x, y = np.arange(100000.0), np.ones(100000)
    kept = [fn(x=x, y=y) for _ in range(2)]          # warm-up call (through DaCe), then the fast path
    first = kept[1].copy()
    view = kept[1][10:20]                             # a view keeps its base in use
    del kept
    gc.collect()
    seen = set()
    for i in range(4):
        r = fn(x=x + i, y=y)
        np.testing.assert_allclose(r, np.exp(((x + i) * y + 2) * -0.5) * (x + i) - y)
        seen.add(r.__array_interface__["data"][0])
        del r
    np.testing.assert_array_equal(view, first[10:20])     # never overwritten while viewed
    assert len(seen) == 1                                 # released results are written again


def test_planner_keeps_small_programs_whole_and_splits_large_products(whole_on):
    sdfg = mlp.to_sdfg()
    small = distsdfg.auto_schedule(sdfg, 4, M=8, K=8, N=8)
    assert small.nprocs == 1
    large = distsdfg.auto_schedule(sdfg, 4, M=4096, K=4096, N=4096)
    assert large.nprocs > 1
    assert SPLIT_GAIN > 1


def test_whole_schedule_lowers_for_rank0_alone(whole_on):
    sdfg = mlp.to_sdfg()
    distsdfg.lower(sdfg, "auto", nprocs=4, plan_options=dict(M=8, K=8, N=8))
    low = sdfg._distsdfg
    assert low.rank0_only and low.steps == [] and low.schedule.nprocs == 1


def test_split_programs_are_fused_before_planning():
    sdfg = jacobi.to_sdfg()
    written = {m.key for m in distsdfg.maps(jacobi.to_sdfg())}
    distsdfg.lower(sdfg, "auto", nprocs=2, plan_options=dict(N=400, TSTEPS=5))
    planned = set(sdfg._distsdfg.schedule.keys())
    assert len(planned) < len(written)       # each sweep one map
    assert sdfg._distsdfg.schedule.nprocs == 2


def test_prefuse_off_plans_the_maps_as_written(monkeypatch):
    monkeypatch.setenv("DISTSDFG_PREFUSE", "0")
    sdfg = jacobi.to_sdfg()
    written = {m.key for m in distsdfg.maps(jacobi.to_sdfg())}
    distsdfg.lower(sdfg, "auto", nprocs=2, plan_options=dict(N=400, TSTEPS=5))
    assert set(sdfg._distsdfg.schedule.keys()) <= written


def test_two_ranks_run_whole_programs_on_rank0_without_moving_data(tmp_path):
    """One 2-rank mpiexec (``distsdfg.testing.whole_run``, PMPI counter preloaded): a stencil loop and a
    reduction the planner keeps whole, three calls each: rank 0's results equal NumPy's, rank 1 gets
    None, and no data moves: rank 0 sends each call's control message, nothing else."""
    import json
    import os
    import subprocess
    import sys

    from distsdfg.testing.mpirun import checkout_env, counted_argv
    out = tmp_path / "whole.json"
    argv = counted_argv(2, ["-m", "distsdfg.testing.whole_run", str(out)], timeout=600)
    proc = subprocess.run(argv, env=checkout_env(DISTSDFG_WHOLE="1"), cwd=str(tmp_path), capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = json.loads(out.read_text())
    assert [r["program"] for r in records] == ["smooth", "scale_sum"]
    for r in records:
        assert r["rank0_only"] and r["others_none"], r
        assert len(r["errors"]) == 3 and max(r["errors"]) < 1e-12, r
        # Only each call's control messages (arguments checked, the verdict to every rank): a few hundred
        # bytes a call, where the arrays are 12.8 KB.
        for calls in r["calls"]:
            assert sum(sent for _, sent in calls.values()) < 3 * 300, r
