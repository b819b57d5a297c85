"""Ranks that lowered a program differently fail at compile on every rank, naming the difference; ranks
that disagree at a call fail on every rank within seconds, naming the disagreement; a rank
left waiting for ranks that never call aborts the job, naming them (2-rank mpiexec jobs)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from distsdfg.launch.mpiexec import mpiexec_argv
from distsdfg.runtime.callsync import call_timeout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tests", "data", "call_disagreements.py")


def test_call_timeout_is_configurable(monkeypatch):
    monkeypatch.delenv("DISTSDFG_CALL_TIMEOUT", raising=False)
    assert call_timeout() == 30.0
    monkeypatch.setenv("DISTSDFG_CALL_TIMEOUT", "2.5")
    assert call_timeout() == 2.5


def _job(tmp_path, mode):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    argv = mpiexec_argv(2, [SCRIPT, str(tmp_path), mode], timeout=240, genv={"DISTSDFG_CALL_TIMEOUT": "3"})
    r = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
    logs = [(tmp_path / f"rank{k}.txt").read_text() for k in range(2)]
    return r, logs


def _ended_within(logs, r, seconds):
    import time
    start = max(float(next(l for l in log.splitlines() if l.startswith("alone")).split()[1]) for log in logs)
    assert time.time() - start < seconds, r.stderr[-2000:]


@pytest.mark.parametrize("mode", ["agree-then-rank1-alone", "rank0-alone"])
def test_disagreeing_ranks_fail_everywhere_and_a_lonely_call_aborts(tmp_path, mode):
    r, logs = _job(tmp_path, mode)
    assert r.returncode not in (0, 124), r.stderr[-2000:]
    _ended_within(logs, r, 30)
    for log in logs:
        assert "not aborted" not in log
    if mode == "agree-then-rank1-alone":
        for log in logs:        # the same named error on both ranks, and the next call runs
            assert "args: InputError: rank 0: add takes 3 positional arguments (A, B, C), got 4" in log, log
            assert "sizes: InputError: the ranks disagree on the size `N` of `add`: rank 0 has N=10" in log, log
            assert "rank 1 passes N=12" in log and "good: " in log, log
        assert "good: [1.0, 2.0, 3.0]" in logs[0]
        assert "rank 1 waited 6 s at the start of a call of `add`, and rank 0" in r.stderr, r.stderr[-2000:]
    else:
        assert "rank 0 waited 3 s at the start of a call of `add` for ranks [1], which never called it" in r.stderr


def test_ranks_passing_different_scalars_fail_on_every_rank(tmp_path):
    r, logs = _job(tmp_path, "scalars")
    assert r.returncode == 0, r.stderr[-2000:]
    for log in logs:        # the same named error on both ranks, and the next calls run
        assert ("lr: ScalarMismatchError: the ranks disagree on the scalar argument `lr` of `axpy`: rank 0 passes "
                "lr=0.1, rank 1 passes lr=0.2; ") in log, log
        assert "lr0d: ScalarMismatchError: " in log and "rank 0 passes lr=0.5, rank 1 passes lr=0.25" in log, log
        start = float(next(l for l in log.splitlines() if l.startswith("start")).split()[1])
        end = float(next(l for l in log.splitlines() if l.startswith("end")).split()[1])
        assert end - start < 30, log
    assert "left out: [0.5, 1.5, 2.5]" in logs[0] and "same: [2.0, 3.0, 4.0]" in logs[0], logs[0]


def test_scalar_mismatch_names_the_argument_and_values():
    from distsdfg.runtime.callsync import scalar_arguments, scalar_mismatch
    assert scalar_arguments({"lr": 0.1, "N": 10, "A": np.zeros(3), "B": None, "s": np.array(2.0), "k": np.int32(3)},
                            skip={"N"}) == {"lr": 0.1, "s": 2.0, "k": 3}
    assert scalar_mismatch("f", [{"lr": 0.1}, {"lr": 0.1}, {}]) is None      # left out: rank 0's
    assert scalar_mismatch("f", [{"x": float("nan")}, {"x": np.nan}]) is None
    assert scalar_mismatch("f", [{"k": 3}, {"k": 3.0}, {"k": np.int64(3)}]) is None
    msg = scalar_mismatch("f", [{"lr": 0.1, "tol": 1e-6}, {"lr": 0.1, "tol": 1e-6}, {"tol": 1e-5}])
    assert msg.startswith("the ranks disagree on the scalar argument `tol` of `f`: rank 0 passes tol=1e-06, "
                          "rank 2 passes tol=1e-05;"), msg
    msg = scalar_mismatch("f", [{"k": 0}] + [{"k": r} for r in range(1, 7)])
    assert "rank 4 passes k=4 and 2 more ranks" in msg, msg


def test_ranks_that_lowered_differently_fail_at_compile_on_every_rank(tmp_path):
    r, logs = _job(tmp_path, "different-plans")
    assert r.returncode == 0, r.stderr[-2000:]
    for log in logs:        # the same named error on both ranks, before anything is built
        assert "compile: PlanMismatchError: rank 1 lowered `add` differently from rank 0 (schedule" in log, log
        assert "PYTHONHASHSEED" in log and "not aborted" in log, log
