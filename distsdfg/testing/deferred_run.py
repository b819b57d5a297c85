"""Programs planned at their first call, and non-root ranks that pass no data, under mpiexec.

    mpiexec -n 4 python -m mpi4py -m distsdfg.testing.deferred_run OUT.json [matmul] [mlp]
    mpiexec -n 4 python -m mpi4py -m distsdfg.testing.deferred_run --memory N old|new OUT.json

The first form lowers a symbolic-size matmul and MLP with ``lower(sdfg, "auto", nprocs=P)``
(no sizes) and calls each with several size sets, counting on every rank how often the
planner, the lowering and DaCe's compiler ran; non-root ranks call with the sizes only, with
None for the arrays, or with full arrays (the old form). Rank 0 checks every result against
NumPy; every rank records what it got back and, for a warm call, its largest Python
allocation (tracemalloc). ``--memory N FORM`` measures a non-root rank's memory for a
N x N x N matmul on a (2, 2, 1) grid: ``old`` passes full zero arrays on every rank (what the
examples did before), ``new`` passes the sizes only. It uses only what the old API had, so
the same file measures an older checkout too.
"""
# No ``from __future__ import annotations``: DaCe reads the program's annotations as types.
from ..dace_compat.semantics import parse as semantic_parse
import json
import sys
import traceback
import tracemalloc
import warnings

import dace
import numpy as np

from distsdfg.testing.placement_run import _peak_rss

NB, NI, NHID, NO = (dace.symbol(s) for s in ("NB", "NI", "NHID", "NO"))


@dace.program
def mlp_sym(x: dace.float64[NB, NI], W1: dace.float64[NI, NHID], b1: dace.float64[NHID], W2: dace.float64[NHID, NO],
            b2: dace.float64[NO]):
    h = np.maximum(x @ W1 + b1, 0.0)
    return h @ W2 + b2


def _mlp_inputs(rng, nb, ni, nh, no):
    return {"x": rng.random((nb, ni)) - 0.5, "W1": rng.random((ni, nh)) - 0.5, "b1": rng.random(nh) - 0.5,
            "W2": rng.random((nh, no)) - 0.5, "b2": rng.random(no) - 0.5}


def _mlp_ref(x, W1, b1, W2, b2):
    return np.maximum(x @ W1 + b1, 0.0) @ W2 + b2


def _rel(a, b) -> float:
    if a is None or np.shape(a) != np.shape(b):
        return float("inf")
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-300))


class Counts:
    """How often this rank planned, lowered a copy, and built a program (C++ compile)."""

    def __init__(self):
        from ..runtime import toolchain
        from ..runtime.deferred import Deferred
        self.n = {"plan": 0, "lower": 0, "build": 0}
        for cls, name, key in ((Deferred, "plan", "plan"), (Deferred, "lower", "lower"),
                               (toolchain, "build_program", "build")):
            self._wrap(cls, name, key)

    def _wrap(self, cls, name, key):
        orig = getattr(cls, name)

        def counted(*args, **kwargs):
            self.n[key] += 1
            return orig(*args, **kwargs)
        setattr(cls, name, counted)

    def reset(self):
        self.n = dict.fromkeys(self.n, 0)

    def snapshot(self):
        return dict(self.n)


def _call(fn, comm, args, sizes, form: str):
    """Call ``fn`` on every rank: rank 0 with ``args``; the others in ``form``: 'sizes' (keywords
    only), 'none' (None for every array, no sizes) or 'full' (zero arrays of the full shapes)."""
    if comm.rank == 0:
        return fn(**args)
    if form == "sizes":
        return fn(**sizes)
    if form == "none":
        return fn(**{k: None for k in args})
    return fn(**{k: np.zeros_like(v) for k, v in args.items()}, **sizes)


def _warm_peak(fn, comm, args, sizes) -> int:
    """This rank's largest Python allocation during a call whose program is planned and compiled."""
    comm.Barrier()
    tracemalloc.start()
    _call(fn, comm, args, sizes, "sizes")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return int(peak)


def run_matmul(comm, counts) -> dict:
    import distsdfg
    from ..runtime.deferred import Deferred
    from distsdfg.testing.programs import get
    sdfg = get("matmul").sdfg()
    sdfg.name = "matmul_deferred_run"
    # The bytes model: its plans for the size sets below differ (a new schedule, a new build);
    # the time model's would take the row split for all of them.
    distsdfg.lower(sdfg, "auto", nprocs=comm.size, plan_options={"verify": False, "cost_model": "bytes"})
    rec = {"case": "matmul", "deferred": isinstance(sdfg._distsdfg, Deferred), "calls": []}
    fn = distsdfg.compile(sdfg)
    rng = np.random.default_rng(7)
    # (M, N, K), how the other ranks call; the third size set has another schedule, the fourth the first's.
    plan = [((64, 64, 64), "sizes"), ((64, 64, 64), "none"), ((256, 8, 8), "full"), ((512, 512, 512), "sizes")]
    for (m, n, k), form in plan:
        A, B = rng.random((m, k)), rng.random((k, n))
        out = _call(fn, comm, {"A": A, "B": B}, {"M": m, "N": n, "K": k}, form)
        rec["calls"].append({"sizes": [m, n, k], "form": form, "counts": comm.gather(counts.snapshot()),
                             "rel_err": _rel(out, A @ B) if comm.rank == 0 else None,
                             "others_got": comm.gather(None if out is None else type(out).__name__)})
    m = n = k = 512
    A, B = rng.random((m, k)), rng.random((k, n))
    rec["peak"] = comm.gather(_warm_peak(fn, comm, {"A": A, "B": B}, {"M": m, "N": n, "K": k}))
    rec["array_bytes"] = m * k * 8
    rec["counts_after_warm"] = comm.gather(counts.snapshot())
    rec["schedules"] = {str(dict(key)): str(p.lowered.schedule) for key, p in fn.programs.items()}
    return rec


def run_mlp(comm, counts) -> dict:
    import distsdfg
    from ..runtime.deferred import Deferred
    sdfg = semantic_parse(mlp_sym)
    distsdfg.lower(sdfg, "auto", nprocs=comm.size, plan_options={"verify": False})
    rec = {"case": "mlp", "deferred": isinstance(sdfg._distsdfg, Deferred), "calls": []}
    fn = distsdfg.compile(sdfg)
    rng = np.random.default_rng(11)
    # The second size set gets the first one's schedule (rows split four ways): planned, not compiled.
    for dims, form in [((64, 16, 24, 8), "sizes"), ((64, 16, 24, 8), "none"), ((40, 12, 20, 8), "sizes")]:
        args = _mlp_inputs(rng, *dims)
        out = _call(fn, comm, args, dict(zip(("NB", "NI", "NHID", "NO"), dims)), form)
        rec["calls"].append({"sizes": list(dims), "form": form, "counts": comm.gather(counts.snapshot()),
                             "rel_err": _rel(out, _mlp_ref(**args)) if comm.rank == 0 else None,
                             "others_got": comm.gather(None if out is None else type(out).__name__)})
    return rec


CASES = {"matmul": run_matmul, "mlp": run_mlp}


def measure_memory(comm, n: int, form: str) -> dict:
    """A non-root rank's memory for one matmul call, from before it makes its arguments."""
    import distsdfg
    from distsdfg.testing.programs import get
    sdfg = get("matmul").sdfg()
    sdfg.name = "matmul_memory_run"
    distsdfg.lower(sdfg, {"_MatMult_.gemm_map": (2, 2, 1)})
    fn = distsdfg.compile(sdfg)
    sizes = {"M": n, "N": n, "K": n}
    rng = np.random.default_rng(3)
    A, B = (rng.random((n, n)), rng.random((n, n))) if comm.rank == 0 else (None, None)
    comm.Barrier()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    rss0 = _peak_rss()
    tracemalloc.start()
    if comm.rank == 0:
        out = fn(A=A, B=B)
    elif form == "old":
        out = fn(A=np.zeros((n, n)), B=np.zeros((n, n)))
    else:
        out = fn(**sizes)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = _peak_rss() - rss0
    err = _rel(out, A @ B) if comm.rank == 0 else None
    return {"case": f"memory {n} {form}", "n": n, "array_bytes": n * n * 8, "rel_err": err,
            "tracemalloc_peak": comm.gather(int(peak)), "rss_growth": comm.gather(int(rss))}


def main(argv):
    from mpi4py import MPI
    warnings.simplefilter("ignore")
    comm = MPI.COMM_WORLD
    if argv[0] == "--memory":
        results = [measure_memory(comm, int(argv[1]), argv[2])]
        out_path = argv[3]
    else:
        out_path = argv[0]
        counts = Counts()
        results = []
        for run in [CASES[c] for c in argv[1:]] or list(CASES.values()):
            counts.reset()       # each case counts from zero
            try:
                rec = run(comm, counts)
            except Exception as exc:      # recorded; the test reports it
                rec = {"case": run.__name__, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
            results.append(rec)
    if comm.rank == 0:
        for r in results:
            print(f"[deferred] {json.dumps(r)[:600]}", flush=True)
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main(sys.argv[1:])
