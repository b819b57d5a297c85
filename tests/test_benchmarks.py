"""Smoke test of the benchmark runner (``python -m benchmarks``) at tiny sizes.

One run of the runner on 2 ranks (matmul and the element-wise chain, every contender,
one repeat, a two-point scaling view) is shared by the tests below: every contender that
runs must match NumPy, and for every distsdfg run the PMPI library's byte counts must equal
``comm_report`` call by call and rank by rank. No timing is asserted. Dask runs only where
it is installed (``pip install -e '.[bench]'``); Heat does not install next to this torch.
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from distsdfg.testing import pmpi  # noqa: E402
from benchmarks.handwritten import blocks  # noqa: E402
from benchmarks.schedules import schedule_for  # noqa: E402
from benchmarks.workloads import WORKLOADS, sizes_of  # noqa: E402

WORKLOADS_RUN = ["matmul_square", "elementwise"]


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    cmd = [sys.executable, "-m", "benchmarks", "--sizes", "tiny", "--nprocs", "2", "--repeats", "1",
           "--workloads", *WORKLOADS_RUN, "--scaling-procs", "4", "64", "--scaling-workloads", "matmul_square",
           "--timeout", "600", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    data["out"] = out
    return data


def rows_of(results, prefix):
    return [r for r in results["rows"] if r["contender"].startswith(prefix)]


@pytest.mark.parametrize("contender", ["distsdfg", "mpi4py", "dace"])
def test_contender_matches_numpy(results, contender):
    rows = rows_of(results, contender)
    assert {r["workload"] for r in rows} == set(WORKLOADS_RUN)
    for r in rows:
        assert r["status"] in ("ok", "same"), r.get("reason")
        if r["status"] == "ok":
            assert r["correct"], (r["workload"], r["contender"], r["rel_err"])
            assert len(r["times"]) == 1


def test_every_classic_schedule_is_reported(results):
    names = {r["contender"] for r in rows_of(results, "distsdfg")}
    assert names == {"distsdfg auto", "distsdfg data-parallel", "distsdfg sqrt", "distsdfg reduction-parallel"}
    for r in rows_of(results, "distsdfg"):
        if r["status"] == "same":      # an identical schedule names the run it shares
            twin = [x for x in rows_of(results, r["same_as"]) if x["workload"] == r["workload"]]
            assert twin and twin[0]["schedule"] == r["schedule"]


def test_pmpi_bytes_equal_comm_report(results):
    runs = [r for r in rows_of(results, "distsdfg") if r["status"] == "ok"]
    assert runs
    for r in runs:
        assert r["pmpi_equals_report"], (r["workload"], r["contender"], r["pmpi"], r["report"])
        assert r["pmpi_total"] == r["report_total"]
        assert sum(r["pmpi_total"]["sent"]) == sum(r["pmpi_total"]["received"]) > 0
        assert r["model_bytes"] == sum(r["report_total"]["sent"])


def test_handwritten_bytes_are_counted(results):
    """The counter sees mpi4py's calls too (its large-count forms): a row block each way."""
    for r in rows_of(results, "mpi4py"):
        assert sum(r["pmpi_total"]["sent"]) == sum(r["pmpi_total"]["received"]) > 0
        assert r["control_bytes"] == 0


def test_dask(results):
    rows = rows_of(results, "dask")
    if not (importlib.util.find_spec("dask") and importlib.util.find_spec("distributed")):
        assert all(r["status"] == "not available" for r in rows)
        pytest.skip("Dask contender skipped: dask[array,distributed] is not installed (pip install -e '.[bench]')")
    assert rows and all(r["status"] == "ok" and r["correct"] for r in rows), rows


def test_heat(results):
    rows = rows_of(results, "heat")
    assert rows and all(r["status"] == "not available" and r["reason"] for r in rows)
    pytest.skip(f"Heat contender not available: {rows[0]['reason']}")


def test_outputs_written(results):
    out = results["out"]
    md = (out / "results.md").read_text()
    assert "| workload | P | contender |" in md and "x mpi4py P=2" in md
    assert results["blas"]["compiled programs"]
    if importlib.util.find_spec("matplotlib"):
        assert (out / "times.png").stat().st_size > 0 and (out / "scaling.png").stat().st_size > 0
    view = results["scaling"]
    assert [r["nprocs"] for r in view] == [4, 64]
    assert all(r["plan_s"] > 0 and r["lower_s"] > 0 and r["bytes"] > 0 for r in view)


# -- pieces, without the runner ----------------------------------------------------------------------
def test_reduction_parallel_splits_the_reduction():
    w = WORKLOADS["matmul_square"]
    sizes = sizes_of(w, "tiny")
    grids = schedule_for("reduction-parallel", w.program.to_sdfg(), 4, w.symbols(sizes, {}))
    assert grids["_MatMult_.gemm_map"] == (1, 1, 4)


def test_blocks_cover_the_range():
    assert blocks(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert blocks(1, 2) == [(0, 0), (0, 1)]


COUNTED = """
import numpy as np
from mpi4py import MPI
from distsdfg.testing.pmpi import Counters, preloaded
c = Counters(preloaded())
comm = MPI.COMM_WORLD
control = comm.Dup()
c.set_control(control)
c.reset()
a = np.zeros(10)
comm.Bcast(a, root=0)                                       # root sends 80 B to each other rank
comm.Allreduce(MPI.IN_PLACE, np.zeros(7), op=MPI.SUM)       # 7 doubles, split 4 + 3
control.bcast({"ignored": 1}, root=0)                       # counted apart
snap = c.snapshot()
snaps = control.gather(snap, root=0)                        # after the snapshot: not counted
if comm.rank == 0:
    print(repr(dict(enumerate(snaps))))
"""


def test_counter_convention(tmp_path):
    """Byte counts of single MPI calls on 2 ranks, by comm_report's convention."""
    lib = pmpi.build(tmp_path)
    script = tmp_path / "counted.py"
    script.write_text(COUNTED)
    proc = subprocess.run(["mpiexec", "-n", "2", "-genv", "LD_PRELOAD", str(lib), sys.executable, "-m", "mpi4py",
                           str(script)], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    snaps = eval(proc.stdout.strip().splitlines()[-1])
    assert snaps[0]["data"]["Bcast"] == (1, 80, 0) and snaps[1]["data"]["Bcast"] == (1, 0, 80)
    # reduce-scatter sends the other piece, allgather sends mine: rank 0 holds 4 elements, rank 1 3
    assert snaps[0]["data"]["Allreduce"] == (1, (3 + 4) * 8, (3 + 4) * 8)
    assert snaps[1]["data"]["Allreduce"] == (1, (4 + 3) * 8, (4 + 3) * 8)
    assert all(set(s["control"]) == {"Bcast"} for s in snaps.values())


def test_counter_built_from_two_threads_at_once(tmp_path, monkeypatch):
    """Jobs launched side by side from threads (``launch_cases(..., jobs=2)``) may both build the
    counter into a fresh cache: each thread compiles to a file of its own before the rename (one
    shared per-process name made the second rename fail on a fresh clone's first test)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor
    both_compiled, run = threading.Barrier(2, timeout=60), subprocess.run

    def compile_together(*args, **kwargs):      # both threads compile before either renames
        done = run(*args, **kwargs)
        both_compiled.wait()
        return done
    monkeypatch.setattr(pmpi.subprocess, "run", compile_together)
    with ThreadPoolExecutor(2) as pool:
        built = [f.result() for f in [pool.submit(pmpi.build, tmp_path) for _ in range(2)]]
    assert built[0] == built[1] and built[0].exists()
    assert not list(tmp_path.glob("*.tmp"))
