"""Run every contender on every workload, then write the tables, plots and JSON.

    python -m benchmarks --sizes documented --nprocs 2 4 --repeats 5 --out benchmarks/results

Contenders: distsdfg with the auto schedule and the classic ones (``benchmarks.schedules``),
the hand-written mpi4py version and Heat on ``mpiexec -n P`` (one job per P, the PMPI byte
counter preloaded), DaCe in one process, Dask on a local cluster of P workers, and JAX on P
CPU devices in its own environment (``--jax-python``; ``benchmarks/jax_versions.py``). A
contender that cannot run here is listed as "not available" with the reason. Writes
``results.json``, ``results.md``, ``times.png`` and ``scaling.png`` to ``--out``.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from distsdfg.lowering.blas import thread_env

from . import report
from distsdfg.testing.pmpi import build as build_counter
from distsdfg.testing.pmpi import cache_dir
from .scaling import PROCS as SCALING_PROCS
from .scaling import WORKLOADS as SCALING_WORKLOADS
from .scaling import scaling as scaling_view
from .schedules import NAMES as SCHEDULES
from .workloads import PRESETS, WORKLOADS, sizes_of

ROOT = Path(__file__).resolve().parent.parent
CONTENDERS = ("distsdfg", "mpi4py", "dace", "dask", "jax", "cupynumeric", "heat")
NUMPY_BLAS = "NumPy's bundled OpenBLAS"
HEAT_NOTE = ("heat 1.8.0 requires torch<2.11.1 and imports torchvision; here torch is 2.13.0 (CPU) and the only "
             "torchvision for it (0.28.0) is a CUDA build whose extension does not load with a CPU torch")


def environment(extra: Optional[dict] = None) -> Dict[str, str]:
    """The subprocesses' environment: this Python's bin first on PATH (mpiexec, mpicc), the
    repository importable, one thread per process."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(thread_env(1))
    # DaCe's simplify iterates over sets of names: a fixed hash seed builds the same SDFG on
    # every rank and in every run, so the build cache finds it.
    env.setdefault("PYTHONHASHSEED", "0")
    env.update(extra or {})
    return env


def run_worker(config: dict, command_prefix: List[str], timeout: float, env: Dict[str, str]) -> dict:
    """Run ``benchmarks.worker`` with ``config``; its JSON, or ``{"error": ...}`` when it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg, out = Path(tmp, "config.json"), Path(tmp, "out.json")
        cfg.write_text(json.dumps(config))
        cmd = command_prefix + ["-m", "benchmarks.worker", str(cfg), str(out)]
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s"}
        if proc.returncode != 0 or not out.exists():
            return {"error": f"exit code {proc.returncode}: {proc.stderr[-1500:]}"}
        return json.loads(out.read_text())


def mpi_command(nprocs: int, counter: Path) -> List[str]:
    """``mpiexec`` with the counter preloaded in the ranks only (not in mpiexec or the compilers)."""
    return ["mpiexec", "-n", str(nprocs), "-genv", "LD_PRELOAD", str(counter), sys.executable, "-m", "mpi4py"]


def unavailable(workloads: Sequence[str], preset: str, nprocs: Sequence[int], contender: str, reason: str):
    return [{"workload": w, "sizes": sizes_of(WORKLOADS[w], preset), "nprocs": p, "contender": contender,
             "status": "not available", "reason": reason} for w in workloads for p in nprocs]


def failed(workloads, preset, nprocs, contender, reason):
    return [dict(r, status="failed") for r in unavailable(workloads, preset, nprocs, contender, reason)]


def heat_reason(env: Dict[str, str]) -> str:
    """Why Heat is not run: it does not import here, or no Heat versions are written."""
    probe = subprocess.run([sys.executable, "-c", "import heat"], env=env, capture_output=True, text=True,
                           timeout=300)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["import failed"])[-1]
        return f"{last} ({HEAT_NOTE})"
    return "heat imports, but this runner has no Heat versions of the workloads yet"


def run_all(args) -> dict:
    """Every requested contender on every workload; the rows, the BLAS used and the scaling view."""
    env = environment()
    builds = str(cache_dir() / "builds")
    base = {"preset": args.sizes, "workloads": args.workloads, "repeats": args.repeats, "seed": 0,
            "build_folder": builds, "nprocs": args.nprocs}
    rows: List[dict] = []
    blas_used = None
    counter = build_counter()
    mpi_contenders = [c for c in ("distsdfg", "mpi4py") if c in args.contenders]
    for P in args.nprocs if mpi_contenders else []:
        cfg = dict(base, mode="mpi", schedules=list(SCHEDULES) if "distsdfg" in args.contenders else [],
                   handwritten="mpi4py" in args.contenders)
        res = run_worker(cfg, mpi_command(P, counter), args.timeout, env)
        rows += res.get("rows") or failed(args.workloads, args.sizes, [P], "/".join(mpi_contenders), res["error"])
        blas_used = res.get("blas", blas_used)
        _progress(f"P={P}: {len(res.get('rows', []))} rows")
    if "dace" in args.contenders:
        res = run_worker(dict(base, mode="single"), [sys.executable], args.timeout, env)
        rows += res.get("rows") or failed(args.workloads, args.sizes, [1], "dace (1 process)", res["error"])
        blas_used = res.get("blas", blas_used)
        _progress("single process done")
    if "dask" in args.contenders:
        if importlib.util.find_spec("dask") and importlib.util.find_spec("distributed"):
            res = run_worker(dict(base, mode="dask"), [sys.executable], args.timeout, env)
            rows += res.get("rows") or failed(args.workloads, args.sizes, args.nprocs, "dask", res["error"])
        else:
            rows += unavailable(args.workloads, args.sizes, args.nprocs, "dask",
                                "dask[array,distributed] is not installed (pip install -e '.[bench]')")
        _progress("dask done")
    if "jax" in args.contenders:
        rows += run_jax(args, env)
        _progress("jax done")
    if "cupynumeric" in args.contenders:
        rows += unavailable(args.workloads, args.sizes, args.nprocs, "cupynumeric", cupynumeric_reason(args, env))
    if "heat" in args.contenders:
        rows += unavailable(args.workloads, args.sizes, args.nprocs, "heat", heat_reason(env))
    views = []
    if args.scaling_procs:
        views = scaling_view(args.scaling_workloads, args.sizes, args.scaling_procs, args.tables_max_procs)
        _progress("scaling done")
    return {"rows": rows, "scaling": views, "blas": {"compiled programs": blas_used or "n/a",
                                                       "mpi4py, Dask, NumPy reference": NUMPY_BLAS}}


def cupynumeric_reason(args, env: Dict[str, str]) -> str:
    """Why cuPyNumeric is not run: no environment with it, or ``import cupynumeric`` fails there
    (PyPI's legate 26.6 links the CUDA driver, ``libcuda.so.1``, also for CPU runs)."""
    python = args.cupynumeric_python or os.environ.get("DISTSDFG_CUPYNUMERIC_PYTHON")
    if not python or not Path(python).exists():
        return ("no cuPyNumeric environment: create one with `python -m venv cpn && cpn/bin/pip install "
                "nvidia-cupynumeric` and pass --cupynumeric-python cpn/bin/python")
    jenv = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    probe = subprocess.run([python, "-c", "import cupynumeric"], env=jenv, capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        return (probe.stderr.strip().splitlines() or ["import failed"])[-1]
    return "cupynumeric imports, but this runner has no cuPyNumeric versions of the workloads yet"


def run_jax(args, env: Dict[str, str]) -> List[dict]:
    """``benchmarks/jax_versions.py`` in the JAX environment, once per P (P = 1 included): the
    workloads' inputs and NumPy references go through an ``.npz`` file (JAX needs NumPy 2)."""
    import numpy as np

    from .worker import make_inputs
    python = args.jax_python or os.environ.get("DISTSDFG_JAX_PYTHON")
    procs = sorted({1, *args.nprocs})
    if not python or not Path(python).exists():
        return unavailable(args.workloads, args.sizes, procs, "jax",
                           "no JAX environment: create one with `python -m venv jaxenv && jaxenv/bin/pip install jax` "
                           "(JAX needs NumPy 2) and pass --jax-python jaxenv/bin/python")
    rows: List[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = {}
        for wname in args.workloads:
            w = WORKLOADS[wname]
            inputs = make_inputs(w, sizes_of(w, args.sizes), 0)
            cases.update({f"{wname}/{k}": v for k, v in inputs.items()})
            cases[f"{wname}/__order__"] = np.array(json.dumps(list(inputs)))
            cases[f"{wname}/__ref__"] = np.asarray(w.reference(**inputs))
            cases[f"{wname}/__rtol__"] = np.array(w.rtol)
        path = Path(tmp, "cases.npz")
        np.savez(path, **cases)
        jenv = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        for P in procs:
            out = Path(tmp, f"jax{P}.json")
            cmd = [python, str(ROOT / "benchmarks" / "jax_versions.py"), str(path), str(P), str(args.repeats), str(out)]
            if shutil.which("taskset") and P <= (os.cpu_count() or 1):
                # XLA's CPU matrix products use every core whatever its flags say: P cores, like P ranks
                cmd = ["taskset", "-c", f"0-{P - 1}"] + cmd
            try:
                proc = subprocess.run(cmd, cwd=ROOT, env=jenv, capture_output=True, text=True, timeout=args.timeout)
                err = None if proc.returncode == 0 and out.exists() else f"exit code {proc.returncode}: {proc.stderr[-1500:]}"
            except subprocess.TimeoutExpired:
                err = f"timed out after {args.timeout:.0f} s"
            if err:
                rows += failed(args.workloads, args.sizes, [P], "jax", err)
                continue
            res = json.loads(out.read_text())
            rows += [dict(r, sizes=sizes_of(WORKLOADS[r["workload"]], args.sizes), version=res["jax"])
                     for r in res["rows"]]
    return rows


def _progress(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def machine() -> Dict[str, str]:
    """What the run happened on: CPU (lscpu), Python, and the versions of the packages compared."""
    from importlib import metadata
    info = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "python": platform.python_version(), "platform": platform.platform()}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in lscpu.splitlines():
            key, _, val = line.partition(":")
            if key.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "L2 cache", "L3 cache"):
                info[key.strip()] = val.strip()
    except OSError:
        pass
    for pkg in ("dace", "numpy", "mpi4py", "mpich", "dask", "distributed", "mkl"):
        try:
            info[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            info[pkg] = "not installed"
    return info


def write(results: dict, out: Path) -> List[Path]:
    """results.json, results.md and the plots; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    rows = results["rows"]
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    files = [out / "results.json"]
    nprocs = sorted({r["nprocs"] for r in rows if r["nprocs"] > 1})
    md = [f"# Benchmark results ({results['config']['sizes']} sizes)", "",
          "Machine: " + ", ".join(f"{k} {v}" for k, v in results["machine"].items()), "",
          "BLAS: " + "; ".join(f"{k}: {v}" for k, v in results["blas"].items()), "",
          f"Run time: {results['elapsed_s']:.0f} s", "",
          "## distsdfg (auto schedule) relative to the others", "", report.headline(rows, nprocs), "",
          "## All contenders", "", report.table(rows), ""]
    if results["scaling"]:
        md += ["## Planning and lowering time without execution", "", report.scaling_table(results["scaling"]), ""]
    for name, plot, data in (("times.png", report.plot_times, rows), ("scaling.png", report.plot_scaling,
                                                                      results["scaling"])):
        if data and plot(data, str(out / name)):
            files.append(out / name)
            md += [f"![{name}]({name})", ""]
    (out / "results.md").write_text("\n".join(md))
    return files + [out / "results.md"]


def parse(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", choices=PRESETS, default="small")
    ap.add_argument("--nprocs", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    ap.add_argument("--scaling-procs", type=int, nargs="*", default=list(SCALING_PROCS),
                    help="rank counts for the planning/lowering view (none: skip it)")
    ap.add_argument("--scaling-workloads", nargs="+", default=list(SCALING_WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--tables-max-procs", type=int, default=256,
                    help="largest P whose comm_report tables the scaling view solves")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per worker job")
    ap.add_argument("--cupynumeric-python", help="an environment with nvidia-cupynumeric "
                    "(default: $DISTSDFG_CUPYNUMERIC_PYTHON); probed with `import cupynumeric`")
    ap.add_argument("--jax-python", help="the interpreter of an environment with JAX (default: $DISTSDFG_JAX_PYTHON)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    return ap.parse_args(argv)


def main(argv=None) -> dict:
    args = parse(argv)
    t0 = time.time()
    results = run_all(args)
    results.update(config={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                   machine=machine(), elapsed_s=time.time() - t0)
    files = write(results, args.out)
    print((args.out / "results.md").read_text())
    print("wrote " + ", ".join(str(f) for f in files), file=sys.stderr)
    return results


if __name__ == "__main__":
    main()
