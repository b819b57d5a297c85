"""The distsdfg command: run (local ranks, --check), plan --json/--plot, slurm scripts, failures."""
import json
import os
import stat
import subprocess
import sys

import pytest

from distsdfg.launch.mpiexec import launcher_argv, mpiexec_argv, srun_argv
from distsdfg.launch.slurm import SlurmJob, sbatch_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)


def _env(extra_path=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["PATH"] = os.pathsep.join(filter(None, [extra_path, BIN, env.get("PATH", "")]))
    return env


def _distsdfg(args, cwd, timeout=900, extra_path=None, **env):
    return subprocess.run([sys.executable, "-m", "distsdfg"] + args, cwd=cwd, env={**_env(extra_path), **env},
                          capture_output=True, text=True, timeout=timeout)


MLP = ["_MatMult_.gemm_map=1,4,1", "_Add__map=1,4", "_numpy_maximum__map=1,4", "_MatMult__2.gemm_map=1,1,4"]


@pytest.mark.parametrize("program,schedule", [
    ("examples/mlp.py:mlp", MLP),
    ("examples/softmax.py:softmax", ["auto"]),
])
def test_run_example_with_check(tmp_path, program, schedule):
    r = _distsdfg(["run", os.path.join(ROOT, program), "-n", "4", "--check", "--schedule"] + schedule, tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "check against a single-process run: OK" in r.stderr
    # Only rank 0 reports.
    assert r.stderr.count("ran on 4 ranks") == 1
    # The second run finds the build.
    r2 = _distsdfg(["run", os.path.join(ROOT, program), "-n", "4", "--schedule"] + schedule, tmp_path)
    assert r2.returncode == 0 and "reusing the build" in r2.stderr, r2.stderr[-2000:]


def test_an_example_takes_any_rank_count(tmp_path):
    """The examples derive their grids from the communicator: the Megatron MLP on 3 ranks (uneven
    blocks of the 512 hidden units), launched from another folder, which gets no build folder."""
    r = _distsdfg(["launch", "-n", "3", os.path.join(ROOT, "examples/mlp.py")], tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "on 3 ranks" in r.stdout and "-> OK" in r.stdout
    assert os.listdir(tmp_path) == []


def test_runs_are_bitwise_deterministic(tmp_path):
    import numpy as np
    args = ["run", os.path.join(ROOT, "examples/matmul.py:matmul"), "-n", "4", "--schedule", "gemm_map=2,1,2",
            "--sizes", "M=64", "N=48", "K=40"]
    outs = []
    for k in range(2):
        r = _distsdfg(args + ["--save", str(tmp_path / f"out{k}.npz")], tmp_path)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(np.load(tmp_path / f"out{k}.npz")["arr_0"])
    assert outs[0].tobytes() == outs[1].tobytes()


def test_failing_rank_ends_the_job(tmp_path):
    r = _distsdfg(["run", os.path.join(ROOT, "tests/data/faulty.py"), "-n", "4", "--schedule", "_Mult__map=4",
                   "--timeout", "300"], tmp_path, timeout=400)
    assert r.returncode != 0
    # The rank's own stderr line may be lost when MPI_Abort ends mpiexec; the launcher's summary is not.
    assert "the job stopped. rank 2 failed: RuntimeError: rank 2 cannot read its input file" in r.stderr, r.stderr


def test_plan_json_equals_comm_report(tmp_path):
    import distsdfg
    from distsdfg.launch.runner import load_program
    r = _distsdfg(["plan", os.path.join(ROOT, "examples/matmul.py:matmul"), "-n", "4", "--json", "--schedule",
                   "gemm_map=2,1,2", "--sizes", "M=256", "N=128", "K=192", "--plot", str(tmp_path / "b.png")],
                  tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    prog, _ = load_program(os.path.join(ROOT, "examples/matmul.py:matmul"))
    sd = prog.to_sdfg()
    distsdfg.lower(sd, {"_MatMult_.gemm_map": (2, 1, 2)})
    want = distsdfg.comm_report(sd, nprocs=4, M=256, N=128, K=192)
    assert [(s["collective"], s["array"], s["sent"], s["received"]) for s in got["steps"]] == \
        [(s.collective, s.array, list(s.sent), list(s.received)) for s in want]
    assert got["total_bytes"] == sum(sum(s.sent) for s in want)
    assert got["io_lower_bound_per_rank"]["_MatMult_.gemm_map"] > 0
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plan_with_distributed_placement_moves_nothing(tmp_path):
    r = _distsdfg(["plan", os.path.join(ROOT, "examples/matmul.py:matmul"), "-n", "4", "--json", "--schedule",
                   "gemm_map=2,2,1", "--sizes", "M=256", "N=128", "K=192", "--placement", "distributed"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    assert got["steps"] == [] and got["total_bytes"] == 0


def test_launcher_follows_the_environment():
    plain = launcher_argv(4, ["x.py"], env={"PATH": os.environ["PATH"]}, timeout=60)
    assert plain == mpiexec_argv(4, ["x.py"], timeout=60)
    assert srun_argv(8, ["x.py"])[:2] == ["srun", "--ntasks=8"]


def test_sbatch_script_content():
    job = SlurmJob("prog.py:f", nodes=128, ntasks_per_node=1, gpus_per_node=1, time="00:30:00", partition="normal",
                   account="s123", constraint="gpu", modules=("daint-gpu", "cray-python"), env=(("FOO", "a b"),),
                   target="gpu", run_args=("--schedule", "auto"))
    s = sbatch_script(job)
    for line in ["#SBATCH --nodes=128", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=1",
                 "#SBATCH --time=00:30:00", "#SBATCH --partition=normal", "#SBATCH --account=s123",
                 "#SBATCH --constraint=gpu", "module load daint-gpu", "export MPICH_RDMA_ENABLED_CUDA=1",
                 "export FOO='a b'", "export OMP_NUM_THREADS=1"]:
        assert any(l == line or l.startswith(line + " ") for l in s.splitlines()), line
    lines = s.splitlines()
    compile_line = next(i for i, l in enumerate(lines) if "--compile-only" in l)
    srun_line = next(i for i, l in enumerate(lines) if l.startswith("srun "))
    assert compile_line < srun_line and "-n 128" in lines[srun_line] and "--target gpu" in lines[srun_line]


def test_slurm_writes_jobname_sbatch_for_a_program_or_any_driver_script(tmp_path, monkeypatch, capsys):
    """`distsdfg slurm FILE.py:FUNC` and `distsdfg slurm ... -- python train.py ARGS`: the script is named
    after the job, and the ranks run this interpreter (with -m mpi4py), not a bare `python`."""
    from distsdfg.launch.cli import main
    monkeypatch.chdir(tmp_path)
    main(["slurm", "--nodes", "2", "--ntasks-per-node", "4", "--", "python", "train.py", "--epochs", "3"])
    lines = (tmp_path / "distsdfg-train.sbatch").read_text().splitlines()
    assert "#SBATCH --job-name=distsdfg-train" in lines and not any("--compile-only" in l for l in lines)
    assert f"srun --ntasks=8 --ntasks-per-node=4 {sys.executable} -m mpi4py train.py --epochs 3" in lines
    main(["slurm", "examples/matmul.py:matmul", "--job-name", "mm"])
    assert (tmp_path / "mm.sbatch").exists()
    main(["slurm", "examples/matmul.py:matmul"])
    script = (tmp_path / "distsdfg-matmul.sbatch").read_text()
    assert f"{sys.executable} -m distsdfg run examples/matmul.py:matmul -n 1" in script
    assert " python " not in script
    assert SlurmJob(command=("./a.out", "x")).rank_command() == ["./a.out", "x"]
    for argv in (["slurm"], ["slurm", "p.py:f", "--", "python", "t.py"]):
        with pytest.raises(SystemExit):
            main(argv)
        assert "a driver script after `--`" in capsys.readouterr().err


def test_sizes_come_from_the_inputs_hook():
    """`run/plan/explain --schedule auto` without --sizes: the shapes of the arrays that the module's
    inputs(sizes) returns fix the size symbols; sizes given win."""
    from distsdfg.launch.runner import load_program, sizes_from_inputs
    prog, mod = load_program(os.path.join(ROOT, "examples/matmul.py:matmul"))
    sdfg = prog.to_sdfg()
    assert sizes_from_inputs(mod, sdfg, {}) == {"M": 256, "N": 128, "K": 192}
    assert sizes_from_inputs(mod, sdfg, {"M": 64}) == {"M": 64, "N": 128, "K": 192}
    assert sizes_from_inputs(object(), sdfg, {"N": 3}) == {"N": 3}          # no hook


def test_hostfile_reaches_mpiexec():
    argv = launcher_argv(8, ["x.py"], env={"SLURM_JOB_ID": "1", "SLURM_NTASKS": "8"}, hostfile="hosts")
    assert argv[1:5] == ["-f", "hosts", "-n", "8"]


def _standins(d):
    """srun and sbatch that run locally with the bundled mpiexec."""
    d.mkdir()
    (d / "srun").write_text('#!/bin/bash\nn=1\nargs=()\nfor a in "$@"; do case "$a" in --ntasks=*) n="${a#*=}";;'
                            ' --ntasks-per-node=*) ;; *) args+=("$a");; esac; done\n'
                            f'exec "{BIN}/mpiexec" -n "$n" "${{args[@]}}"\n')
    (d / "sbatch").write_text('#!/bin/bash\nscript="$1"\nout=$(grep -- "--output=" "$script" | sed "s/.*--output=//;'
                              ' s/%j/42/")\nexport SLURM_JOB_ID=42 SLURM_NTASKS=4\nbash "$script" > "$out" 2>&1\n'
                              'rc=$?\necho "Submitted batch job 42"\ncat "$out"\nexit $rc\n')
    for f in ("srun", "sbatch"):
        (d / f).chmod((d / f).stat().st_mode | stat.S_IEXEC)


def test_slurm_script_runs_under_standins(tmp_path):
    _standins(tmp_path / "bin")
    r = _distsdfg(["slurm", os.path.join(ROOT, "examples/matmul.py:matmul"), "--nodes", "2", "--ntasks-per-node", "2",
                   "--time", "00:10:00", "--schedule", "gemm_map=2,2,1", "--sizes", "M=128", "N=64", "K=96",
                   "--check", "--job-name", "mm", "--submit"], tmp_path, extra_path=str(tmp_path / "bin"),
                  DISTSDFG_BUILDS=str(tmp_path / "builds"))          # a first build, whatever the cache holds
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert (tmp_path / "mm.sbatch").exists()
    out = (tmp_path / "mm-42.out").read_text()
    assert "compiled in" in out                                   # the compile step before srun
    assert "reusing the build" in out                             # srun's rank 0 compiled nothing
    assert "check against a single-process run: OK" in out


def test_info_names_versions_blas_and_compilers(tmp_path):
    import dace
    import numpy as np

    from distsdfg.lowering import blas
    r = _distsdfg(["info"], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    fields = dict(line.split(":", 1) for line in r.stdout.splitlines())
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    assert fields["DaCe"] == dace.__version__ and fields["NumPy"].startswith(np.__version__)
    assert "MPICH" in fields["MPI library"] or "Open MPI" in fields["MPI library"]
    assert {"distsdfg", "mpi4py", "C++ compiler", "CMake", "nvcc", "Python", "threads per rank"} <= set(fields)
    info = blas.info()
    if info.optimized:
        assert fields["BLAS"] == f"{info.name} {info.version}" and info.library in fields["BLAS library"]
    else:
        assert fields["BLAS"].startswith("NONE") and "distsdfg[mkl]" in fields["BLAS"]
    if info.implementation != "MKL":        # the optional backend: where it is, or how to install it
        assert fields["Intel MKL"].startswith("installed") == (blas.find_mkl()[0] is not None)


def test_threads_per_rank_reaches_every_rank(tmp_path):
    # Each rank writes its own file: two ranks printing to one forwarded stdout may interleave their lines.
    script = tmp_path / "threads.py"
    script.write_text("import os, sys\nfrom mpi4py import MPI\nfrom distsdfg.lowering import blas\n"
                      "rank = MPI.COMM_WORLD.rank\n"
                      "line = ' '.join(str(v) for v in (rank, blas.threads_per_rank(), os.environ['OMP_NUM_THREADS'], "
                      "os.environ['MKL_NUM_THREADS'], os.environ['MKL_THREADING_LAYER']))\n"
                      "open(os.path.join(sys.argv[1], f'rank{rank}.txt'), 'w').write(line)\n")
    r = _distsdfg(["launch", "-n", "2", "--threads-per-rank", "2", "--timeout", "300", str(script), str(tmp_path)],
                  tmp_path, timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [(tmp_path / f"rank{k}.txt").read_text() for k in range(2)]
    assert lines == ["0 2 2 2 GNU", "1 2 2 2 GNU"]


def test_check_compares_each_output_with_its_tolerance():
    import numpy as np

    from distsdfg.launch.runner import compare_outputs
    ref = {"return": np.linspace(1.0, 2.0, 6), "T": np.ones((2, 3), np.float32), "h": np.arange(4)}
    good = {"return": ref["return"] * (1 + 1e-12), "T": ref["T"] * np.float32(1 + 3e-6), "h": np.arange(4)}
    lines, problems = compare_outputs(good, ref)
    assert not problems and len(lines) == 3
    assert lines[0].startswith("return (float64[6]): max relative error 1.") and "(tolerance 1e-10)" in lines[0]
    assert "(tolerance 1e-05)" in lines[1] and "(tolerance 0)" in lines[2]
    bad = {"return": ref["return"] + 1e-8, "T": ref["T"] * np.float32(1 + 1e-3), "h": np.arange(4)[::-1]}
    _, problems = compare_outputs(bad, ref)
    assert [p.split(":")[0] for p in problems] == ["return", "T", "h"], problems
    assert "max relative error 5.00e-09 > 1e-10" in problems[0]
    nan = dict(good, **{"return": np.where(np.arange(6) == 2, np.nan, good["return"])})
    assert compare_outputs(nan, ref)[1] == ["return: max relative error inf > 1e-10"]
    assert compare_outputs({"return": ref["return"]}, ref)[1] == ["T: missing from the distributed run",
                                                                 "h: missing from the distributed run"]


def test_check_compares_arguments_updated_in_place_and_catches_a_wrong_one(monkeypatch, capsys, tmp_path):
    """In process, one rank: a program that returns nothing but updates T and writes S is checked on
    both; a result made wrong after the run (1e-9 relative) fails the check with the argument's name."""
    from mpi4py import MPI

    from distsdfg.launch.runner import run_program
    from distsdfg.runtime.program import DistributedProgram
    monkeypatch.chdir(tmp_path)
    spec = os.path.join(ROOT, "tests/data/heat_inplace.py:heat")
    assert run_program(spec, check=True, comm=MPI.COMM_SELF, schedule=["auto"]) == 0
    err = capsys.readouterr().err
    assert "updated in place: T, S" in err and "T (float64[41]): max relative error" in err
    assert "S (float64[41]): max relative error" in err and "check against a single-process run: OK (2 outputs)" in err

    call = DistributedProgram.__call__

    def wrong(self, *args, **kw):
        out = call(self, *args, **kw)
        kw["S"][7] *= 1 + 1e-9
        return out
    monkeypatch.setattr(DistributedProgram, "__call__", wrong)
    assert run_program(spec, check=True, comm=MPI.COMM_SELF, schedule=["auto"]) == 3
    err = capsys.readouterr().err
    assert "check against a single-process run FAILED: S: max relative error" in err and "> 1e-10" in err
