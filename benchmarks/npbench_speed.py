"""Speed report on public code: NPBench's DaCe kernels and the programs of
``benchmarks.user_programs``, timed against NumPy and DaCe alone, on one and two ranks.

    python -m benchmarks.npbench_speed --npbench DIR [--reps 7] [--work FOLDER] [names...]

For each kernel one ``mpiexec -n 2`` job (a crash or a hang costs one kernel) times, in
interleaved rounds (one call of each contender per round, medians over ``--reps`` rounds):

* **NumPy**: NPBench's NumPy version, on rank 0;
* **DaCe alone**: the same ``@dace.program`` after ``auto_optimize(sdfg, DeviceType.CPU)`` and
  ``sdfg.compile()``, as NPBench's ``dace_cpu`` runs it, in a process of its own that never imports
  distsdfg (``benchmarks/dace_alone.py``), on rank 0's core;
* **distsdfg P=1**: ``lower(sdfg, "auto", nprocs=1)``, compiled on a one-rank communicator;
* **distsdfg P=2**: ``lower(sdfg, "auto", nprocs=2)`` with root placement (rank 0 passes and
  receives the arrays whole), and with ``placement="distributed"`` (each rank passes its blocks,
  ``distsdfg.layout``).

While rank 0 times a one-process contender, rank 1 sleeps; a P=2 call takes the longest of the
ranks' own times for it, and a rank that is done waits asleep (MPI's blocking calls would spin on
a core the other rank may need on a machine with other work). Every timed result is compared
with NumPy's (relative max-norm error; 1e-10 float64, 1e-5 float32); a contender whose result
differs is reported as wrong, not timed. Sizes: NPBench's "M" preset, scaled by ``SPEED_SIZES``
so that NumPy takes roughly 50-500 ms on one core of this machine. Rank 0 appends one JSON line
per kernel to ``FOLDER/speed.jsonl``; the driver prints the table (``table``).
"""
from __future__ import annotations

from distsdfg.dace_compat.semantics import parse as semantic_parse
import copy
import json
import math
import os
import subprocess
import sys
import time
import traceback
from typing import Dict, List, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

#: Sizes that replace NPBench's "M" preset where NumPy would take far less than 50 ms or far
#: more than 500 ms on one core here (the other parameters keep their "M" value).
SPEED_SIZES: Dict[str, Dict[str, object]] = {
    "jacobi_2d": dict(TSTEPS=80, N=500), "heat_3d": dict(TSTEPS=50, N=50), "hdiff": dict(I=192, J=192, K=160),
    "atax": dict(M=8000, N=10000), "go_fast": dict(N=8000), "compute": dict(M=5000, N=5000),
    "covariance": dict(M=1000, N=1400), "conv2d": dict(N=8, C_in=3, C_out=8, K=5, H=64, W=64),
    "gemm": dict(NI=1600, NJ=1800, NK=2000), "k2mm": dict(NI=800, NJ=900, NK=1100, NL=1200),
    "k3mm": dict(NI=800, NJ=900, NK=1000, NL=1100, NM=1200), "bicg": dict(M=8000, N=10000),
    "mvt": dict(N=8000), "gesummv": dict(N=8000), "gemver": dict(N=4000), "syrk": dict(M=500, N=600),
    "syr2k": dict(M=400, N=500), "doitgen": dict(NR=128, NQ=128, NP=128), "jacobi_1d": dict(TSTEPS=1000, N=40000),
    "fdtd_2d": dict(TMAX=50, NX=500, NY=600), "softmax": dict(N=16, H=16, SM=256),
    "mlp": dict(N=8, S0=10000, S1=2000, S2=1000), "arc_distance": dict(N=10000000),
    "azimint_naive": dict(N=400000, npt=100), "vadv": dict(I=160, J=160, K=160),
    "cavity_flow": dict(ny=101, nx=101, nt=100, nit=50), "channel_flow": dict(ny=101, nx=101, nit=50),
    "nbody": dict(N=100, tEnd=1.0), "spmv": dict(M=40000, N=40000, nnz=1000000),
    "lenet": dict(N=16), "resnet": dict(N=8, W=56, H=56, C1=64, C2=32), "correlation": dict(M=1000, N=1200),
    "trmm": dict(M=600, N=700), "symm": dict(M=400, N=500), "mandelbrot1": dict(XN=500, YN=500, maxiter=50),
    "seidel_2d": dict(TSTEPS=2, N=300), "cholesky": dict(N=1000), "lu": dict(N=400), "gramschmidt": dict(M=400, N=300),
    "durbin": dict(N=4000), "trisolv": dict(N=4000), "ludcmp": dict(N=400), "deriche": dict(W=1000, H=1200),
    "floyd_warshall": dict(N=200), "nussinov": dict(N=200), "adi": dict(TSTEPS=20, N=300),
}

#: Kernels whose work is mostly BLAS products, convolutions or an MLP (the compute-bound geomean).
COMPUTE_BOUND = {"gemm", "k2mm", "k3mm", "syrk", "syr2k", "symm", "trmm", "doitgen", "conv2d", "mlp", "lenet",
                 "resnet", "covariance", "correlation", "kmeans_step"}

CONTENDERS = ("numpy", "dace", "p1", "p2", "p2d")


# -- the benchmarks -----------------------------------------------------------------------------------
def speed_bench(spec: dict):
    """The benchmark of ``spec`` (``{"kind": "npbench"|"user", "name", "root", "sizes"}``)."""
    if spec["kind"] == "user":
        from .user_programs import PROGRAMS
        return PROGRAMS[spec["name"]]
    from distsdfg.testing.npbench import discover
    bench = {b.name: b for b in discover(spec["root"])}[spec["name"]]
    sizes = dict(spec["sizes"])
    bench.sizes = lambda: dict(sizes)
    return bench


def npbench_spec(bench, root: str) -> dict:
    sizes = {**bench.info["parameters"]["M"], **SPEED_SIZES.get(bench.name, {})}
    return {"kind": "npbench", "name": bench.name, "root": root, "sizes": sizes}


def numpy_call(bench, args):
    if hasattr(bench, "numpy_call"):
        return bench.numpy_call(args)
    fn = getattr(bench._module("_numpy"), bench.info["func_name"])
    return fn(*[args[a] for a in bench.info["input_args"]])


# -- the worker: one kernel under mpiexec -n 2 ---------------------------------------------------------
def _sleep_barrier(comm, poll: float = 0.002) -> None:
    """A barrier whose waiting ranks sleep (they would take rank 0's other core spinning in MPI)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(poll)


def dace_blas_env() -> Dict[str, str]:
    """What a DaCe user sets for DaCe to use the MKL wheel (``MKLROOT``), if it is installed; DaCe
    alone picks MKL for its BLAS nodes then, else its reference loops."""
    from distsdfg.lowering import blas
    found, _ = blas.find_mkl()
    if found is None:
        return {}
    root = blas.mkl_root(*found)
    lib = str(root / "lib")
    return {"MKLROOT": str(root), "LD_LIBRARY_PATH": lib + os.pathsep + os.environ.get("LD_LIBRARY_PATH", "")}


class _DaceAlone:
    """The DaCe-alone server (``benchmarks/dace_alone.py``) of one kernel."""

    def __init__(self, spec: dict):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTSDFG_", "PMI_", "MPI", "HYDRA"))}
        env["PYTHONPATH"] = ""
        env.update(dace_blas_env())
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "dace_alone.py"), json.dumps(spec)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     cwd=os.getcwd())
        self.ready = self._line()

    def _line(self) -> dict:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                return {"error": f"DaCe alone exited ({self.proc.wait()})"}
            if line.startswith("{"):
                return json.loads(line)

    def run(self) -> dict:
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return self._line()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass
            self.proc.wait(30)


def _distributed_call(fn, sdfg, bench, args, comm, placed: bool):
    """One call of a compiled program on every rank; rank 0 gets (ms, outputs)."""
    import distsdfg
    mine = copy.deepcopy(args) if comm.rank == 0 or placed else {k: v for k, v in args.items()
                                                                  if not isinstance(v, np.ndarray)}
    layouts, sizes = {}, {}
    if placed:
        sizes = plan_sizes(semantic_parse(bench.program()), args)
        for name, v in list(mine.items()):
            if isinstance(v, np.ndarray):
                lay = distsdfg.layout(fn, name, **sizes)
                if lay.placement == "distributed":
                    layouts[name] = lay
                    mine[name] = np.ascontiguousarray(lay.block(v, comm.rank))
                elif comm.rank != 0:
                    mine[name] = None
        mine.update(sizes)      # ranks that pass blocks give the sizes
    # Each rank times its own call; the call took the longest of them. The ranks wait for each other
    # asleep, so that a rank that is done (or runs nothing: a program whole on rank 0) takes no core.
    _sleep_barrier(comm, poll=0.0002)
    t = time.perf_counter()
    ret = fn(**mine)
    mine_ms = (time.perf_counter() - t) * 1e3
    _sleep_barrier(comm)
    ms = max(comm.allgather(mine_ms))
    for name, lay in layouts.items():      # assembled at rank 0 for the check, after the timing
        blocks = comm.gather(mine[name], root=0)
        if comm.rank == 0:
            mine[name] = lay.assemble(blocks)
    if placed:                              # results: every rank's block of each
        rets = [] if ret is None else list(ret) if isinstance(ret, tuple) else [ret]
        names = sorted(n for n, d in fn.sdfg.arrays.items() if n.startswith("__return") and not d.transient)
        for i, name in enumerate(names):
            lay = distsdfg.layout(fn, name, **sizes)
            if lay.placement == "distributed":
                blocks = comm.gather(rets[i] if i < len(rets) else None, root=0)
                if comm.rank == 0 and i < len(rets):
                    rets[i] = lay.assemble(blocks)
        if rets:
            ret = tuple(rets) if isinstance(ret, tuple) else rets[0]
    if comm.rank != 0:
        return None
    from distsdfg.testing.npbench import outputs
    return ms, outputs(ret, mine, bench.output_names())


def distsdfg_sizes(sdfg, args) -> Dict[str, int]:
    """The size symbols of ``sdfg`` that the arrays of ``args`` give."""
    from distsdfg.runtime.program import symbol_values
    arrays = {k: v for k, v in args.items() if isinstance(v, np.ndarray)}
    return {k: int(v) for k, v in symbol_values(sdfg, arrays, {}).items() if k in map(str, sdfg.free_symbols)}


def plan_sizes(sdfg, args) -> Dict[str, int]:
    """Every size symbol of ``sdfg``: from the arrays' shapes and the integer arguments (loop counts)."""
    sizes = {k: int(v) for k, v in args.items() if isinstance(v, (int, np.integer)) and k in map(str, sdfg.free_symbols)}
    sizes.update(distsdfg_sizes(sdfg, args))
    return sizes


def run_kernel(spec: dict, reps: int, comm, placements=("root", "distributed")) -> Optional[dict]:
    """Collective over a 2-rank ``comm``: time the contenders of one kernel; rank 0's record."""
    import distsdfg
    from mpi4py import MPI
    from distsdfg.testing.npbench import rel_error, tolerance, outputs
    rank = comm.rank
    bench = speed_bench(spec)
    rec = {"kernel": spec["name"], "kind": spec["kind"], "sizes": spec.get("sizes"), "reps": reps,
           "ms": {}, "err": {}, "failed": {}, "compile_s": {}}
    # Rank 0's arguments on every rank: NPBench's initialisations draw unseeded random numbers, and
    # the blocks that distributed placement passes must be blocks of the arrays rank 0 checks with.
    args = comm.bcast(bench.arguments() if rank == 0 else None, root=0)
    ref = None
    if rank == 0:
        ref = bench.reference(args)
        rec["tol"] = tolerance(ref)
    progs = {}
    # 1. DaCe alone (rank 0's server) and distsdfg P=1 (a one-rank communicator) while rank 1 sleeps.
    if rank == 0:
        dace = _DaceAlone(spec)
        if "error" in dace.ready:
            rec["failed"]["dace"] = dace.ready["error"]
        else:
            rec["compile_s"]["dace"], rec["dace_blas"] = dace.ready["compile_s"], dace.ready.get("blas")
        try:
            t = time.perf_counter()
            sd = semantic_parse(bench.program())
            sd.name = f"speed1_{spec['name']}"
            distsdfg.lower(sd, "auto", nprocs=1, plan_options=plan_sizes(sd, args))
            progs["p1"] = (distsdfg.compile(sd, comm=MPI.COMM_SELF), sd)
            rec["compile_s"]["p1"] = round(time.perf_counter() - t, 1)
            rec["p1_whole"] = bool(getattr(progs["p1"][0], "lowered", None) is not None
                                   and progs["p1"][0].lowered.rank0_only)
        except Exception as exc:
            rec["failed"]["p1"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    _sleep_barrier(comm)
    # 2. distsdfg P=2, root and distributed placement (collective).
    for key, placement in (("p2", None), ("p2d", "distributed")):
        if (placement or "root") not in placements:
            continue
        try:
            t = time.perf_counter()
            sd = semantic_parse(bench.program())
            sd.name = f"speed2{'d' if placement else ''}_{spec['name']}"
            distsdfg.lower(sd, "auto", nprocs=comm.size, placement=placement, plan_options=plan_sizes(sd, args))
            fn = distsdfg.compile(sd, comm=comm)
            progs[key] = (fn, sd)
            low = getattr(fn, "lowered", None)
            rec[f"{key}_whole"] = bool(low is not None and low.rank0_only)
            rec["compile_s"][key] = round(time.perf_counter() - t, 1)
        except Exception as exc:
            rec["failed"][key] = f"{type(exc).__name__}: {str(exc)[:300]}"
        failed = comm.allgather(key in rec["failed"])
        if any(failed):
            progs.pop(key, None)
            rec["failed"].setdefault(key, "failed on another rank")
    # 3. Interleaved rounds: one call of each contender per round (the first round warms up).
    times: Dict[str, List[float]] = {c: [] for c in CONTENDERS}
    for r in range(reps + 1):
        if rank == 0:
            mine = copy.deepcopy(args)
            t = time.perf_counter()
            got = numpy_call(bench, mine)
            times["numpy"].append((time.perf_counter() - t) * 1e3)
            if "dace" not in rec["failed"]:
                ans = dace.run()
                if "ms" not in ans:
                    rec["failed"]["dace"] = ans.get("error", "no answer")
                else:
                    times["dace"].append(ans["ms"])
                    rec["err"]["dace"] = max(rec["err"].get("dace", 0.0), ans["err"])
            if "p1" in progs:
                fn, sd = progs["p1"]
                mine = copy.deepcopy(args)
                try:
                    t = time.perf_counter()
                    ret = fn(**mine)
                    times["p1"].append((time.perf_counter() - t) * 1e3)
                    rec["err"]["p1"] = max(rec["err"].get("p1", 0.0),
                                           rel_error(outputs(ret, mine, bench.output_names()), ref))
                except Exception as exc:
                    rec["failed"]["p1"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    progs.pop("p1")
        _sleep_barrier(comm)
        for key in ("p2", "p2d"):
            if key not in progs:
                continue
            fn, sd = progs[key]
            try:
                out = _distributed_call(fn, sd, bench, args, comm, placed=key == "p2d")
                ok = True
            except Exception as exc:
                rec["failed"][key] = f"{type(exc).__name__}: {str(exc)[:300]}"
                ok, out = False, None
            if not all(comm.allgather(ok)):
                progs.pop(key)
                rec["failed"].setdefault(key, "failed on another rank")
                continue
            if rank == 0:
                ms, got = out
                times[key].append(ms)
                rec["err"][key] = max(rec["err"].get(key, 0.0), rel_error(got, ref))
    if rank == 0:
        dace.close()
        for c, ts in times.items():
            if len(ts) > 1 and c not in rec["failed"]:
                rec["ms"][c] = float(np.median(ts[1:]))
        for c, e in rec["err"].items():
            if e > rec["tol"]:
                rec["failed"][c] = f"wrong result (rel. err {e:.1e})"
                rec["ms"].pop(c, None)
        return rec
    return None


def _worker(argv: List[str]) -> int:
    import warnings
    from mpi4py import MPI
    warnings.simplefilter("ignore")
    out, reps, spec, placements = argv[0], int(argv[1]), json.loads(argv[2]), argv[3].split(",")
    comm = MPI.COMM_WORLD
    try:
        rec = run_kernel(spec, reps, comm, placements)
    except Exception as exc:
        rec = {"kernel": spec["name"], "kind": spec["kind"], "crashed": f"{type(exc).__name__}: {exc}"[:400],
               "trace": traceback.format_exc()[-1500:]} if comm.rank == 0 else None
        if comm.rank == 0:
            _append(out, rec)
        comm.Abort(1)
    if rec is not None:
        _append(out, rec)
    return 0


def _append(path: str, rec: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps({k: rec.get(k) for k in ("kernel", "ms", "failed")})[:600], flush=True)


# -- the driver ------------------------------------------------------------------------------------------
def _done(path: str) -> Dict[str, dict]:
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {r["kernel"]: r for r in map(json.loads, filter(None, f.read().splitlines()))}


def run(specs: List[dict], work: str, reps: int, timeout: float, placements=("root", "distributed")) -> Dict[str, dict]:
    out = os.path.join(work, "speed.jsonl")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    for spec in specs:
        if spec["name"] in _done(out):
            continue
        cmd = ["timeout", str(int(timeout)), "mpiexec", "-n", "2", sys.executable, "-m", "mpi4py", "-m",
               "benchmarks.npbench_speed", "--worker", out, str(reps), json.dumps(spec), ",".join(placements)]
        t = time.time()
        proc = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True)
        if spec["name"] not in _done(out):
            _append(out, {"kernel": spec["name"], "kind": spec["kind"],
                          "crashed": f"launch exited {proc.returncode} after {time.time() - t:.0f} s: "
                                     f"{(proc.stdout + proc.stderr)[-400:]}"})
    return _done(out)


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a and b else None


def _geomean(xs: List[float]) -> Optional[float]:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _f(x: Optional[float], fmt: str = "{:.2f}") -> str:
    return fmt.format(x) if x is not None else "-"


def table(records: List[dict]) -> str:
    """The report as Markdown: milliseconds, ratios, failures, and the summary lines."""
    rows = ["| kernel | NumPy ms | DaCe alone ms | P=1 ms | P=2 ms | P=2 dist. ms | P=1 / DaCe | P=1 / NumPy "
            "| P=2 / P=1 | P=2 dist. / P=1 | notes |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    r_dace, r_p2, r_p2c, over = [], [], [], []
    for rec in records:
        ms = rec.get("ms", {})
        if "crashed" in rec:
            rows.append(f"| {rec['kernel']} | | | | | | | | | | crashed: {' '.join(rec['crashed'].split())[:160]} |")
            continue
        p1d, p1n = _ratio(ms.get("p1"), ms.get("dace")), _ratio(ms.get("p1"), ms.get("numpy"))
        p21, p2d1 = _ratio(ms.get("p2"), ms.get("p1")), _ratio(ms.get("p2d"), ms.get("p1"))
        notes = []
        if rec.get("p2_whole"):
            notes.append("P=2 whole on rank 0")
        for c, why in rec.get("failed", {}).items():
            notes.append(f"{c}: {' '.join(str(why).split())[:100]}")
        r_dace.append(p1d)
        r_p2.append(min(x for x in (p21, p2d1) if x) if (p21 or p2d1) else None)
        if rec["kernel"] in COMPUTE_BOUND:
            r_p2c.append(p21)
        if p1d and p1d > 1.3:
            over.append(rec["kernel"])
        rows.append(f"| {rec['kernel']} | {_f(ms.get('numpy'), '{:.1f}')} | {_f(ms.get('dace'), '{:.1f}')} | "
                    f"{_f(ms.get('p1'), '{:.1f}')} | {_f(ms.get('p2'), '{:.1f}')} | {_f(ms.get('p2d'), '{:.1f}')} | "
                    f"{_f(p1d)} | {_f(p1n)} | {_f(p21)} | {_f(p2d1)} | {'; '.join(notes).replace('|', '/')} |")
    timed = [x for x in r_dace if x]
    summary = [
        f"P=1 / DaCe alone: geomean {_f(_geomean(timed))} over {len(timed)} kernels; above 1.3: "
        f"{', '.join(over) or 'none'}",
        f"P=2 / P=1 (the better placement): geomean {_f(_geomean([x for x in r_p2 if x]))}; above 1.0: "
        f"{sum(1 for x in r_p2 if x and x > 1.0)} of {sum(1 for x in r_p2 if x)}",
        f"P=2 / P=1 on compute-bound kernels (root placement): geomean {_f(_geomean([x for x in r_p2c if x]))}",
    ]
    return "\n".join(rows) + "\n\n" + "\n".join(f"- {s}" for s in summary) + "\n"


def main(argv: List[str]) -> int:
    if argv[:1] == ["--worker"]:
        return _worker(argv[1:])
    import argparse
    ap = argparse.ArgumentParser(prog="python -m benchmarks.npbench_speed", description=__doc__.split("\n\n")[0])
    ap.add_argument("--npbench", required=True, help="an NPBench checkout (github.com/spcl/npbench)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--work", default="npbench_speed")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per kernel (compiles included)")
    ap.add_argument("--no-user", action="store_true", help="leave out benchmarks.user_programs")
    ap.add_argument("--placements", default="root,distributed",
                    help="P=2 placements to time: root, distributed or both (comma-separated)")
    ap.add_argument("names", nargs="*", help="kernels (default: every NPBench kernel in SPEED_SIZES and the user programs)")
    opts = ap.parse_args(argv)
    from distsdfg.testing.npbench import discover
    from .user_programs import PROGRAMS
    root = os.path.abspath(opts.npbench)
    found = {b.name: b for b in discover(root)}
    specs = []
    names = opts.names or ([] if opts.no_user else list(PROGRAMS)) + [n for n in SPEED_SIZES if n in found]
    for n in names:
        if n in PROGRAMS:
            specs.append({"kind": "user", "name": n})
        elif n in found:
            specs.append(npbench_spec(found[n], root))
        else:
            print(f"no kernel {n!r}", file=sys.stderr)
            return 2
    work = os.path.abspath(opts.work)
    os.makedirs(work, exist_ok=True)
    done = run(specs, work, opts.reps, opts.timeout, tuple(opts.placements.split(",")))
    load = os.getloadavg()
    print(f"{len(done)} kernels, 2 ranks, {opts.reps} interleaved rounds; load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
    print(table([done[s["name"]] for s in specs if s["name"] in done]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
