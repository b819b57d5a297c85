"""BLAS by default: planned distsdfg programs (the library's BLAS, OpenBLAS or MKL; root placement) against
NumPy and hand-written mpi4py.

    mpiexec -n P python -m mpi4py -m benchmarks.blas_default [--repeats 7] [--out FILE.json]

Cases: ``A @ B`` 1024^3 and the two-layer MLP (x 512x512, hidden 1024, out 512), float64, each
lowered with ``lower(sdfg, "auto", nprocs=P)`` and compiled with the library's own set-up (no
BLAS configuration here). Contenders, timed interleaved (one call of each per round, all ranks
between barriers, the slowest rank's time): distsdfg; NumPy on rank 0 (P=1); the hand-written
mpi4py+NumPy version (P>1). Every contender's result is checked against NumPy first.
Run with one thread per process (``distsdfg.lowering.blas.thread_env(1)``), as ``python -m benchmarks`` does.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

CASES = {
    "matmul 1024^3": ("matmul_square", dict(M=1024, N=1024, K=1024)),
    "mlp 512x512x1024": ("mlp", dict(NB=512, NI=512, NH=1024, NO=512)),
}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from mpi4py import MPI

    import distsdfg
    from .handwritten import VERSIONS
    from .workloads import get
    comm = MPI.COMM_WORLD
    P, rank = comm.size, comm.rank
    results = {"nprocs": P, "blas": str(distsdfg.lowering.blas.info()), "cases": {}}
    for label, (wname, sizes) in CASES.items():
        w = get(wname)
        inputs = w.inputs(sizes, np.random.default_rng(0))      # the same on every rank
        ref = w.reference(**inputs)
        sdfg = w.program.to_sdfg()
        sdfg.name = f"blasdef_{wname}_p{P}"
        distsdfg.lower(sdfg, "auto", nprocs=P, plan_options=sizes)
        fn = distsdfg.compile(sdfg)
        contenders = {"distsdfg": lambda: fn(**inputs, **sizes)}
        if P == 1:
            contenders["numpy"] = lambda: w.reference(**inputs)
        else:
            hand = VERSIONS[wname]
            contenders["mpi4py"] = lambda: hand(comm, **inputs)
        times = {k: [] for k in contenders}
        for k, call in contenders.items():           # first call: checked, not timed
            out = call()
            if rank == 0:
                err = float(np.abs(out - ref).max() / np.abs(ref).max())
                assert err < 1e-10, f"{label} {k}: relative error {err}"
        for _ in range(args.repeats):
            for k, call in contenders.items():
                comm.Barrier()
                t0 = time.perf_counter()
                call()
                times[k].append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
        results["cases"][label] = {"schedule": {k: list(g) for k, g in sdfg._distsdfg.schedule.grids},
                                   **{k: {"median": float(np.median(v)), "times": v} for k, v in times.items()}}
        if rank == 0:
            med = {k: float(np.median(v)) for k, v in times.items()}
            print(f"P={P} {label}: " + ", ".join(f"{k} {m * 1e3:.1f} ms" for k, m in med.items()), flush=True)
    if rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
