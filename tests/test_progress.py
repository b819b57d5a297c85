"""Progress reports (distsdfg/runtime/progress.py): rank 0 names a phase still running after a couple
of seconds and its time when it ends; short phases, verbose=False and DISTSDFG_PROGRESS=0 print nothing."""
import time

import pytest

from distsdfg.runtime import progress


class Rank:
    def __init__(self, rank):
        self.rank = rank


def _run(seconds, **kw):
    with progress.phase("prog: compile (2 kernels)", after=0.05, **kw):
        time.sleep(seconds)


def test_a_long_phase_is_named_then_timed(capsys):
    _run(0.3)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "[distsdfg] prog: compile (2 kernels) ..."
    assert lines[1].startswith("[distsdfg] prog: compile (2 kernels) done in 0.") and lines[1].endswith(" s")


@pytest.mark.parametrize("seconds,kw,env", [
    (0.0, {}, None),                          # shorter than the threshold
    (0.3, {"verbose": False}, None),          # turned off by the caller
    (0.3, {}, "0"),                           # turned off in the environment
    (0.3, {"comm": Rank(1)}, None),           # not rank 0
])
def test_silent(capsys, monkeypatch, seconds, kw, env):
    if env is not None:
        monkeypatch.setenv(progress.ENV, env)
    _run(seconds, **kw)
    assert capsys.readouterr().err == ""


def test_verbose_true_reports_even_when_the_environment_says_no(capsys, monkeypatch):
    monkeypatch.setenv(progress.ENV, "0")
    _run(0.3, verbose=True, comm=Rank(0))
    assert "done in" in capsys.readouterr().err


def test_a_failing_phase_says_so(capsys):
    with pytest.raises(RuntimeError):
        with progress.phase("prog: lower", after=0.05):
            time.sleep(0.2)
            raise RuntimeError("boom")
    assert "[distsdfg] prog: lower failed in 0." in capsys.readouterr().err
