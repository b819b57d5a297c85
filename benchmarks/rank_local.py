"""Rank-local speed: distsdfg programs against NumPy (1 rank) and hand-written mpi4py (P ranks).

Run under MPI, one thread per process (the numbers in docs/benchmarks.md, "Rank-local code")::

    OMP_NUM_THREADS=1 mpiexec -n 2 python -m mpi4py -m benchmarks.rank_local [--reps 7] [--no-optimize]

Every program is lowered with ``lower(sdfg, "auto", nprocs=P)`` and root placement, compiled
once, checked against NumPy, then timed interleaved with the reference (NumPy on one rank,
the hand-written mpi4py version of ``benchmarks.handwritten`` on more): a barrier, one call,
a barrier, per sample; medians of ``--reps`` samples. ``overhead`` is a warm call of a tiny
program (16 elements) minus the compiled SDFG called directly with the same arguments.
"""

import argparse
import time

import dace
import numpy as np
from mpi4py import MPI

import distsdfg
from distsdfg.lowering.rewriter import COMM_ARG, PLAN_ARRAY, PLAN_LEN

from . import handwritten
from .workloads import elementwise, elementwise_ref, softmax, softmax_ref

B, H, S = (dace.symbol(x) for x in ("B", "H", "S"))


@dace.program
def rowmax(x: dace.float32[B, H, S, S]):
    return np.maximum.reduce(x, axis=-1, keepdims=True)


def rowmax_ref(x):
    return np.max(x, axis=-1, keepdims=True)


def rowmax_mpi(comm, x):
    rows = x.reshape(-1, x.shape[-1])
    out = handwritten.gather_rows(comm, rowmax_ref(handwritten.scatter_rows(comm, rows)), rows.shape[0])
    return out.reshape(x.shape[:-1] + (1,)) if out is not None else None


def _rand(rng, shape, dtype):
    return (rng.random(shape) - 0.5).astype(dtype)


#: name -> (program, sizes, inputs(rng), NumPy reference, hand-written mpi4py version, rtol)
PROGRAMS = {
    "elementwise": (elementwise, dict(N=4_000_000),
                    lambda r: {"x": _rand(r, 4_000_000, np.float64), "y": _rand(r, 4_000_000, np.float64)},
                    elementwise_ref, handwritten.elementwise, 1e-12),
    "softmax": (softmax, dict(B=8, H=16, S=128), lambda r: {"inp": _rand(r, (8, 16, 128, 128), np.float32)},
                softmax_ref, handwritten.softmax, 1e-5),
    "rowmax": (rowmax, dict(B=8, H=16, S=128), lambda r: {"x": _rand(r, (8, 16, 128, 128), np.float32)},
               rowmax_ref, rowmax_mpi, 0.0),
}


def build(prog, sizes, comm, optimize=True):
    sdfg = prog.to_sdfg()
    distsdfg.lower(sdfg, "auto", nprocs=comm.size, plan_options=dict(sizes), optimize=optimize)
    return distsdfg.compile(sdfg, comm=comm)


def timed(comm, fn) -> float:
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    comm.Barrier()
    return time.perf_counter() - t0


def measure(name, comm, reps, optimize=True):
    prog, sizes, inputs, ref, mpi_version, rtol = PROGRAMS[name]
    rng = np.random.default_rng(0)
    args = inputs(rng)
    fn = build(prog, sizes, comm, optimize)
    out = fn(**args)
    if comm.rank == 0:
        want = ref(**args)
        err = np.max(np.abs(out - want)) / max(np.max(np.abs(want)), 1e-30)
        assert err <= max(rtol, 1e-15) * 10, f"{name}: relative error {err}"
    if comm.size == 1:
        def reference():
            return ref(**args)
    else:
        def reference():
            return mpi_version(comm, **args)
    ours, theirs = [], []
    for _ in range(reps):
        ours.append(timed(comm, lambda: fn(**args)))
        theirs.append(timed(comm, reference))
    return float(np.median(ours)), float(np.median(theirs))


def overhead(comm, reps, optimize=True):
    """Median seconds of a warm call on 16 elements: through distsdfg, and the compiled SDFG alone."""
    fn = build(elementwise, dict(N=16), comm, optimize)
    x, y = np.ones(16), np.ones(16)
    fn(x=x, y=y)
    table, _, _, _ = fn.plan({"N": 16})
    direct_args = dict(x=x, y=y, N=16, **{PLAN_ARRAY: table, PLAN_LEN: int(table.shape[0]), COMM_ARG: fn._fcomm})
    for kg in fn.lowered.kernels:
        for s in kg.rank_syms:
            if s:
                direct_args[s] = 0 if comm.size == 1 else int(np.unravel_index(comm.rank, kg.grid)[kg.rank_syms.index(s)])
    ours, direct = [], []
    for _ in range(reps * 20):
        t0 = time.perf_counter()
        fn(x=x, y=y)
        ours.append(time.perf_counter() - t0)
        comm.Barrier()
        t0 = time.perf_counter()
        fn._compiled(**direct_args)
        direct.append(time.perf_counter() - t0)
        comm.Barrier()
    return float(np.median(ours)), float(np.median(direct))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--programs", nargs="*", default=list(PROGRAMS))
    ap.add_argument("--no-optimize", action="store_true", help="lower(..., optimize=False)")
    ap.add_argument("--no-overhead", action="store_true")
    a = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    against = "NumPy" if comm.size == 1 else "mpi4py"
    rows = []
    for name in a.programs:
        ours, theirs = measure(name, comm, a.reps, not a.no_optimize)
        rows.append(f"| {name} | {comm.size} | {ours * 1e3:.2f} ms | {theirs * 1e3:.2f} ms ({against}) | "
                    f"{ours / theirs:.2f}x |")
    if not a.no_overhead:
        ours, direct = overhead(comm, a.reps, not a.no_optimize)
        rows.append(f"| per-call overhead (n=16) | {comm.size} | {ours * 1e6:.0f} us | {direct * 1e6:.0f} us "
                    f"(compiled SDFG alone) | +{(ours - direct) * 1e6:.0f} us |")
    if comm.rank == 0:
        print("| program | ranks | distsdfg | reference | ratio |\n|---|---|---|---|---|")
        print("\n".join(rows), flush=True)


if __name__ == "__main__":
    main()
