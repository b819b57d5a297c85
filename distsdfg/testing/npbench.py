"""Generality report on NPBench's DaCe kernels, loaded at run time from a checkout.

    python -m distsdfg.testing.npbench --npbench DIR [-n 4] [--work FOLDER] [--timeout S] [names...]

``DIR`` is a checkout of https://github.com/spcl/npbench (cloned there when absent and git can
reach the network). Nothing of NPBench is copied into this repository: each benchmark's
``bench_info/<name>.json`` names its module, its initialisation and its arguments; the report
imports ``<module>.py`` (``initialize``), ``<module>_numpy.py`` (the reference) and
``<module>_dace.py`` (the ``@dace.program``) from ``DIR`` and runs them at small sizes (the "S"
preset, shrunk by ``SIZES`` below where "S" is too large for an oversubscribed run).

Two phases, each in its own processes so that a crash costs one kernel, not the report:

1. **distributed** (``mpiexec -n P``, many kernels per launch): ``lower(sdfg, "auto", nprocs=P)``
   with no sizes given, ``compile``, one call with the NumPy inputs; rank 0 compares every output
   with NumPy's;
2. **baseline** (one process), for the kernels that did not run correctly: DaCe 1.0.2 itself
   compiles and runs the kernel; a kernel it cannot compile, or whose single-process result differs
   from NumPy's, is *skipped* (with DaCe's error) and left out of the percentage.

``--fast-build 1`` (the default) compiles with ``-O0`` (``DACE_compiler_cpu_args``): the report
checks results, and compiles dominate its time. A kernel DaCe alone fails to build so is built
again with DaCe's default settings before it is skipped.

Each kernel lands in one class:

* ``distributed`` -- correct, and the lowered program splits at least one kernel over the ranks;
* ``one rank`` -- correct, but the plan runs everything on one rank;
* ``refused`` -- a ``DistributedLoweringError`` (its class and message);
* ``wrong`` -- the result differs from NumPy's (relative error above ``tolerance``);
* ``crashed`` -- any other exception, or the launch died / timed out in this kernel.

Rank 0 appends one JSON line per kernel to ``FOLDER/results.jsonl`` as soon as it is done; when a
launch dies the driver records the kernel it was in as crashed and relaunches for the rest.
"""
from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
import time
import traceback
import warnings
from typing import Dict, List, Optional

import numpy as np

__all__ = ["discover", "Bench", "classify_result", "SIZES", "main"]

NPBENCH_URL = "https://github.com/spcl/npbench"

# Sizes that replace the "S" preset's (S is sized for one fast process; these keep a 4-rank run on
# two cores in seconds). Parameters not named keep their S value.
SIZES: Dict[str, Dict[str, object]] = {
    "adi": dict(TSTEPS=2, N=20), "arc_distance": dict(N=1000), "atax": dict(M=40, N=50),
    "azimint_hist": dict(N=4000, npt=10), "azimint_naive": dict(N=4000, npt=10), "bicg": dict(M=40, N=50),
    "cavity_flow": dict(ny=21, nx=21, nt=3, nit=2), "channel_flow": dict(ny=21, nx=21, nit=2),
    "cholesky": dict(N=20), "cholesky2": dict(N=20), "compute": dict(M=40, N=50),
    "contour_integral": dict(NR=10, NM=20, slab_per_bc=2),
    "conv2d": dict(N=2, C_in=3, C_out=4, K=2, H=10, W=10), "correlation": dict(M=20, N=24),
    "covariance": dict(M=20, N=24), "crc16": dict(N=64), "deriche": dict(W=24, H=20),
    "doitgen": dict(NR=6, NQ=8, NP=10), "durbin": dict(N=20), "fdtd_2d": dict(TMAX=3, NX=20, NY=22),
    "floyd_warshall": dict(N=20), "gemm": dict(NI=20, NJ=22, NK=24), "gemver": dict(N=30),
    "gesummv": dict(N=30), "go_fast": dict(N=40), "gramschmidt": dict(M=14, N=12), "hdiff": dict(I=8, J=8, K=6),
    "heat_3d": dict(TSTEPS=3, N=10), "jacobi_1d": dict(TSTEPS=5, N=40), "jacobi_2d": dict(TSTEPS=3, N=20),
    "k2mm": dict(NI=16, NJ=17, NK=18, NL=19), "k3mm": dict(NI=16, NJ=17, NK=18, NL=19, NM=20),
    "lenet": dict(N=2), "lu": dict(N=20), "ludcmp": dict(N=20),
    "mandelbrot1": dict(XN=20, YN=20, maxiter=10), "mandelbrot2": dict(XN=20, YN=20, maxiter=10),
    "mlp": dict(N=4, S0=64, S1=32, S2=16), "mvt": dict(N=40), "nbody": dict(N=12, tEnd=0.2),
    "nussinov": dict(N=16), "resnet": dict(N=2, W=6, H=6, C1=8, C2=4), "seidel_2d": dict(TSTEPS=2, N=16),
    "softmax": dict(N=2, H=4, SM=16), "spmv": dict(M=64, N=64, nnz=256), "stockham_fft": dict(R=2, K=4),
    "symm": dict(M=16, N=20), "syr2k": dict(M=14, N=20), "syrk": dict(M=14, N=20), "trisolv": dict(N=30),
    "trmm": dict(M=16, N=20), "vadv": dict(I=8, J=8, K=6),
}


class Bench:
    """One NPBench benchmark as its ``bench_info`` JSON describes it."""

    def __init__(self, root: str, info: dict):
        self.root, self.info = root, info
        self.name = info["module_name"]
        self.folder = os.path.join(root, "npbench", "benchmarks", info["relative_path"])

    @property
    def has_dace(self) -> bool:
        return os.path.exists(self._path("_dace"))

    def _path(self, suffix: str) -> str:
        return os.path.join(self.folder, f"{self.name}{suffix}.py")

    def _module(self, suffix: str):
        spec = importlib.util.spec_from_file_location(f"npbench_{self.name}{suffix}", self._path(suffix))
        mod = importlib.util.module_from_spec(spec)
        sys.path.insert(0, self.folder)      # a module may import its neighbours
        try:
            spec.loader.exec_module(mod)
        finally:
            sys.path.remove(self.folder)
        return mod

    def sizes(self) -> Dict[str, object]:
        return {**self.info["parameters"]["S"], **SIZES.get(self.name, {})}

    def arguments(self) -> Dict[str, object]:
        """The kernel's keyword arguments at ``sizes()`` (NPBench's initialisation)."""
        data = dict(self.sizes())
        init = self.info.get("init")
        if init:
            fn = getattr(self._module(""), init["func_name"])
            out = fn(*[data[a] for a in init["input_args"]])
            names = init["output_args"]
            data.update(zip(names, out if len(names) > 1 else (out,)))
        return {a: data[a] for a in self.info["input_args"]}

    def program(self):
        return getattr(self._module("_dace"), self.info["func_name"])

    def reference(self, args):
        args = copy.deepcopy(args)
        # positionally, in ``input_args`` order, as NPBench calls it (mandelbrot's NumPy version
        # names the sizes ``xn, yn`` where the DaCe one has the symbols ``XN, YN``)
        ret = getattr(self._module("_numpy"), self.info["func_name"])(*[args[a] for a in self.info["input_args"]])
        return outputs(ret, args, self.output_names())

    def output_names(self) -> List[str]:
        """The arguments the kernel updates: NPBench's ``output_args``; where it lists none (e.g.
        doitgen, which updates ``A`` in place and returns nothing), every array argument."""
        return list(self.info.get("output_args") or self.info.get("array_args", []))


def outputs(ret, args, names) -> Dict[str, np.ndarray]:
    """What a kernel produced: its return value(s) and the arguments it updates in place."""
    out = {}
    if ret is not None:
        for i, r in enumerate(ret if isinstance(ret, (tuple, list)) else (ret,)):
            out[f"return{i}"] = np.asarray(r)
    for n in names:
        out[n] = np.asarray(args[n])
    return out


def semantic_parse(program):
    """``program``'s SDFG parsed with NumPy semantics (``distsdfg.numpy_semantics``). Imported here, not
    at the top: ``benchmarks/dace_alone.py`` loads this module as a file, outside the package, to time
    DaCe alone without importing distsdfg."""
    from ..dace_compat.semantics import parse
    return parse(program)


def discover(root: str) -> List[Bench]:
    """Every benchmark of the checkout at ``root`` that has a DaCe kernel, by module name."""
    folder = os.path.join(root, "bench_info")
    benches = []
    for f in sorted(os.listdir(folder)):
        if f.endswith(".json"):
            with open(os.path.join(folder, f)) as fh:
                b = Bench(root, json.load(fh)["benchmark"])
            if b.has_dace:
                benches.append(b)
    return benches


def rel_error(out: Dict[str, np.ndarray], ref: Dict[str, np.ndarray]) -> float:
    """The largest relative error (max-norm) over the outputs; inf for a missing or misshapen one."""
    worst = 0.0
    if not any(k.startswith("return") for k in out) and any(not k.startswith("return") for k in out):
        ref = {k: r for k, r in ref.items() if not k.startswith("return")}   # NumPy's version returns an argument
    if not ref:
        return float("inf")
    for k, r in ref.items():
        o = out.get(k)
        if o is not None and np.size(o) == 1 and np.size(r) == 1:     # DaCe returns a scalar as shape (1,)
            o = np.reshape(o, np.shape(r))
        if o is None or np.shape(o) != np.shape(r):
            return float("inf")
        o, r = np.asarray(o), np.asarray(r)
        if r.size == 0:
            continue
        if not np.issubdtype(r.dtype, np.inexact) and not np.issubdtype(r.dtype, np.complexfloating):
            o, r = o.astype(np.float64), r.astype(np.float64)
        scale = max(float(np.nanmax(np.abs(r))), 1e-300)
        if not np.array_equal(np.isnan(o), np.isnan(r)):
            return float("inf")
        d = np.abs(np.where(np.isnan(r), 0, o - r))
        worst = max(worst, float(np.max(d)) / scale)
    return worst


def tolerance(ref: Dict[str, np.ndarray]) -> float:
    single = any(np.asarray(r).dtype in (np.float32, np.complex64) for r in ref.values())
    return 1e-5 if single else 1e-10


def classify_result(r: dict) -> str:
    """The class of one distributed result record (see the module docstring)."""
    if "error_class" in r:
        return "refused" if r.get("refused") else "crashed"
    if r["rel_err"] > r["tol"]:
        return "wrong"
    return "distributed" if r["split"] else "one rank"


# -- phase 1: DaCe itself, one process --------------------------------------------------------------
#: DaCe's settings for the report's quick builds (``--fast-build 1``)
FAST_BUILD = {"DACE_compiler_cpu_args": "-std=c++14 -fPIC -O0 -Wno-unused-parameter -Wno-unused-label",
              "DACE_compiler_build_type": "Debug"}


def baseline(bench: Bench) -> dict:
    """Compile and run the kernel with DaCe alone; ``ok`` when it matches NumPy. A kernel that fails
    with the quick build settings is tried again with DaCe's own (a kernel DaCe compiles must count)."""
    rec = _baseline(bench)
    fast = {k: v for k, v in FAST_BUILD.items() if os.environ.get(k) == v}
    if rec["ok"] or not fast:
        return rec
    for k in fast:
        del os.environ[k]
    try:
        again = _baseline(bench, suffix="_default_build")
    finally:
        os.environ.update(fast)
    again["detail"] = (f"with DaCe's default build settings (the quick ones failed: {rec['detail']})" if again["ok"]
                       else again["detail"] + " (also with DaCe's default build settings)")
    return again


def _error_line(exc: Exception) -> str:
    """The line of a (CMake, compiler) error message that says what went wrong."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    key = next((ln for ln in lines if any(w in ln for w in ("Could NOT", "error:", "Error:"))), None)
    head = lines[0] if lines else ""
    return f"{head} {key}" if key and key != head else head


def _baseline(bench: Bench, suffix: str = "") -> dict:
    from ..runtime.program import symbol_values
    t0 = time.time()
    try:
        args = bench.arguments()
        ref = bench.reference(args)
        sdfg = semantic_parse(bench.program())
        sdfg.name = f"npb_{bench.name}{suffix}"
        mine = copy.deepcopy(args)
        arrays = {k: v for k, v in mine.items() if isinstance(v, np.ndarray)}
        syms = {k: v for k, v in symbol_values(sdfg, arrays, {}).items() if k in sdfg.free_symbols}
        call = {k: v for k, v in mine.items() if k in sdfg.arglist() or k in sdfg.free_symbols}
        ret = sdfg(**call, **{k: v for k, v in syms.items() if k not in call})
        err = rel_error(outputs(ret, mine, bench.output_names()), ref)
        tol = tolerance(ref)
        return {"kernel": bench.name, "ok": err <= tol, "rel_err": err, "seconds": time.time() - t0,
                "detail": "" if err <= tol else f"DaCe's own result differs from NumPy's ({err:.2e})"}
    except Exception as exc:
        return {"kernel": bench.name, "ok": False, "seconds": time.time() - t0,
                "detail": f"{type(exc).__name__}: {_error_line(exc)[:300]}"}


# -- phase 2: distributed, under mpiexec ---------------------------------------------------------------
def run_distributed(bench: Bench, comm) -> Optional[dict]:
    """Collective: lower with the auto schedule (no sizes), compile, call; rank 0's record."""
    import distsdfg
    from distsdfg.errors import DistributedLoweringError
    t0 = time.time()
    rec = {"kernel": bench.name}
    try:
        args = bench.arguments()
        ref = bench.reference(args) if comm.rank == 0 else None
        sdfg = semantic_parse(bench.program())
        sdfg.name = f"npbd_{bench.name}"
        distsdfg.lower(sdfg, "auto", nprocs=comm.size)
        fn = distsdfg.compile(sdfg, comm=comm)
        mine = copy.deepcopy(args)
        ret = fn(**mine)
        progs = list(fn.programs.values()) if hasattr(fn, "programs") else [fn]
        low = progs[0].lowered
        grids = [tuple(int(g) for g in k.grid) for k in low.kernels]
        split = (not low.rank0_only) and any(int(np.prod(g)) > 1 for g in grids)
        rec.update(split=bool(split), schedule={k: list(v) for k, v in low.schedule.as_dict().items()},
                   kernels_split=sum(int(np.prod(g)) > 1 for g in grids), kernels=len(grids))
        if comm.rank == 0:
            rec["rank0_maps"] = whole_on_rank0(bench)
            rec["tol"] = tolerance(ref)
            got = outputs(ret, mine, bench.output_names())
            rec["rel_err"] = rel_error(got, ref)
            rec["errors"] = {k: rel_error({k: got[k]}, {k: ref[k]}) for k in ref if k in got}
    except DistributedLoweringError as exc:
        rec.update(error_class=type(exc).__name__, refused=True, detail=str(exc))
    except Exception as exc:      # recorded as crashed; the other kernels go on
        rec.update(error_class=type(exc).__name__, detail=str(exc)[:500], trace=traceback.format_exc()[-2000:])
    rec["seconds"] = round(time.time() - t0, 1)
    if comm.rank == 0:
        rec["class"] = classify_result(rec)
        return rec
    return None


def whole_on_rank0(bench: Bench) -> Dict[str, List[str]]:
    """The maps the lowering leaves whole on rank 0 (their ranges or accesses depend on a symbol the
    program sets while it runs), with those symbols; found on a fresh copy of the program."""
    from distsdfg import dace_compat as dc
    from ..analysis.kernels import find_kernels
    try:
        sdfg = semantic_parse(bench.program())
        dc.simplify(sdfg)
        return {m.info.key: list(k.runtime_symbols) for k in find_kernels(sdfg) if k.runtime_symbols for m in k.maps}
    except Exception as exc:      # only a detail of the report
        return {"?": [f"{type(exc).__name__}: {exc}"[:200]]}


def _worker(argv: List[str]) -> int:
    """``--worker baseline|mpi ROOT OUT.jsonl names...``: run the kernels, append one line each."""
    warnings.simplefilter("ignore")
    phase, root, out, names = argv[0], argv[1], argv[2], argv[3:]
    benches = {b.name: b for b in discover(root)}
    comm = None
    if phase == "mpi":
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    for name in names:
        if comm is None or comm.rank == 0:
            with open(out + ".current", "w") as f:
                f.write(name)
        rec = baseline(benches[name]) if comm is None else run_distributed(benches[name], comm)
        if rec is not None:
            with open(out, "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(json.dumps({k: v for k, v in rec.items() if k not in ("trace", "schedule")})[:300], flush=True)
        if comm is not None:
            comm.Barrier()
    return 0


def _done(path: str) -> Dict[str, dict]:
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {r["kernel"]: r for r in map(json.loads, filter(None, f.read().splitlines()))}


def _drive(phase: str, root: str, out: str, names: List[str], nprocs: int, timeout: float, batch: int) -> Dict[str, dict]:
    """Run ``names`` through the worker in launches of ``batch`` kernels; a launch that dies or times
    out marks its current kernel crashed, and the rest are relaunched."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    while True:
        done = _done(out)
        todo = [n for n in names if n not in done]
        if not todo:
            return done
        chunk = todo[:batch]
        cmd = [sys.executable, "-m", "distsdfg.testing.npbench", "--worker", phase, root, out, *chunk]
        if phase == "mpi":
            cmd = ["mpiexec", "-n", str(nprocs), sys.executable, "-m", "mpi4py", *cmd[1:]]
        if os.path.exists(out + ".current"):
            os.remove(out + ".current")
        rc, tail = _launch(cmd, env, out, timeout)
        sys.stderr.write(tail[-600:] if rc else "")
        if not set(chunk) - set(_done(out)):
            continue
        cur = open(out + ".current").read().strip() if os.path.exists(out + ".current") else chunk[0]
        if cur in _done(out):        # died between kernels: the next one
            cur = next(n for n in chunk if n not in _done(out))
        rec = {"kernel": cur, "class": "crashed", "ok": False, "error_class": f"launch {rc}",
               "detail": f"the launch died in this kernel ({rc}): {tail[-300:]}"}
        with open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")


def _launch(cmd, env, out: str, timeout: float):
    """Run one launch; kill it when one kernel takes longer than ``timeout`` seconds (a hang)."""
    import signal
    import tempfile
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=os.path.dirname(out), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        seen, since = None, time.time()
        while proc.poll() is None:
            time.sleep(2)
            cur = (open(out + ".current").read() if os.path.exists(out + ".current") else None, len(_done(out)))
            if cur != seen:
                seen, since = cur, time.time()
            elif time.time() - since > timeout:
                proc.terminate()            # mpiexec passes it on to the ranks
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                return "timeout", f"no progress for {timeout:.0f}s (killed)"
        log.seek(0)
        return proc.returncode, log.read()[-1500:]


def table(benches: List[Bench], base: Dict[str, dict], dist: Dict[str, dict]) -> str:
    """The report as a Markdown table, with the counts."""
    rows = ["| kernel | sizes | class | detail |", "|---|---|---|---|"]
    counts: Dict[str, int] = {}
    for b in benches:
        sizes = ", ".join(f"{k}={v}" for k, v in b.sizes().items())
        if b.name in base and not base[b.name].get("ok"):
            cls, detail = "skipped (DaCe)", base[b.name].get("detail", "")
        elif b.name in dist:
            r = dist[b.name]
            cls = r.get("class", classify_result(r))
            if cls in ("distributed", "one rank"):
                detail = f"{r['kernels_split']} of {r['kernels']} kernels split; rel. err {r['rel_err']:.1e}"
                whole = r.get("rank0_maps") or {}
                if whole:
                    syms = sorted({s for v in whole.values() for s in v})
                    detail += f"; {len(whole)} maps whole on rank 0 (ranges depend on {', '.join(syms)})"
                elif not r["kernels"]:
                    detail += "; no map outside loops that carry values from one iteration to the next"
            elif cls == "wrong":
                detail = f"rel. err {r['rel_err']:.1e}"
            else:
                detail = f"{r.get('error_class')}: {r.get('detail', '')}"
        else:
            continue
        counts[cls] = counts.get(cls, 0) + 1
        rows.append(f"| {b.name} | {sizes} | {cls} | {' '.join(detail.split())[:240].replace('|', '/')} |")
    compiled = sum(v for k, v in counts.items() if k != "skipped (DaCe)")
    good = counts.get("distributed", 0)
    head = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    pct = f"{100.0 * good / compiled:.0f}%" if compiled else "-"
    return "\n".join(rows) + f"\n\n{head}; correct and distributed: {good} of {compiled} that DaCe compiles ({pct})\n"


def ensure_checkout(root: str) -> str:
    if not os.path.isdir(os.path.join(root, "bench_info")):
        print(f"no NPBench checkout at {root}; cloning {NPBENCH_URL}", file=sys.stderr)
        subprocess.run(["git", "clone", "--depth", "1", NPBENCH_URL, root], check=True)
    return root


def main(argv: List[str]) -> int:
    if argv[:1] == ["--worker"]:
        return _worker(argv[1:])
    opts = {"--npbench": None, "-n": "4", "--work": "npbench_run", "--timeout": "420", "--batch": "8", "--fast-build": "1"}
    names = []
    while argv:
        if argv[0] in opts:
            opts[argv[0]], argv = argv[1], argv[2:]
        else:
            names.append(argv.pop(0))
    if not opts["--npbench"]:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    root = os.path.abspath(ensure_checkout(opts["--npbench"]))
    work = os.path.abspath(opts["--work"])
    os.makedirs(work, exist_ok=True)
    found = {b.name: b for b in discover(root)}
    benches = [found[n] for n in names if n in found] if names else list(found.values())   # in the order given
    nprocs, timeout, batch = int(opts["-n"]), float(opts["--timeout"]), int(opts["--batch"])
    if opts["--fast-build"] != "0":      # -O0: these runs check results; compiles dominate the time
        for k, v in FAST_BUILD.items():
            os.environ.setdefault(k, v)
    dist = _drive("mpi", root, os.path.join(work, f"dist{nprocs}.jsonl"), [b.name for b in benches], nprocs,
                  timeout, batch)
    # DaCe alone, one process, only where the distributed run did not succeed: did DaCe compile it?
    again = [b.name for b in benches if dist.get(b.name, {}).get("class") not in ("distributed", "one rank")]
    base = _drive("baseline", root, os.path.join(work, "baseline.jsonl"), again, 1, timeout, batch)
    commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"NPBench {commit or '(not a git checkout)'}, {nprocs} ranks, lower(sdfg, 'auto', nprocs={nprocs})\n")
    print(table(benches, base, dist))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
