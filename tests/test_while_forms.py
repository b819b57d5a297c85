"""Convergence loops as users write them (``while diff > tol and steps < max_steps:`` with a Python
int counter, an early ``break``, ``while True:`` left by a ``break``) run on 1 and 2 ranks and match NumPy (mpiexec jobs of
``tests/data/while_forms_run.py``; the parse itself is tested in test_parse_errors.py)."""
import os
import re
import subprocess
import sys

import pytest

from distsdfg.launch.mpiexec import mpiexec_argv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tests", "data", "while_forms_run.py")


@pytest.mark.parametrize("ranks", [1, 2])
def test_convergence_loops_match_numpy(tmp_path, ranks):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run(mpiexec_argv(ranks, [SCRIPT], timeout=900), cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ": steps " in ln]
    assert len(lines) == 15, proc.stdout
    for ln in lines:
        got, want, err = re.search(r"steps (\d+)/(\d+) error (\S+)", ln).groups()
        assert got == want and float(err) <= 1e-10, ln
    assert any("converge_diff tol=0.05" in ln and "steps 144/144" in ln for ln in lines), lines   # converged early
