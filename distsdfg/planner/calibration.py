"""``distsdfg calibrate``: measure the time model's rates on this machine and write them to a file.

Run on every rank under mpiexec (``distsdfg calibrate -n P``). ``alpha`` and ``beta`` come from
timed Scatter calls from rank 0 (the planner prices rank 0's scatters and gathers per byte of
the whole, and exchanges between kernels per byte per rank); the compute rates from
``timemodel.measure_compute`` run on every rank at once (ranks share the machine's cores and
memory as they will in a program), the slowest rank's figures kept. Rank 0 writes the JSON that
``timemodel.load_rates`` (and ``AlphaBetaModel.from_file``, ``distsdfg predict --machine FILE``)
reads.
"""
from __future__ import annotations

import json
import os
import time
from typing import Dict, Optional

import numpy as np

from .costmodel import _calibration_path
from .timemodel import load_rates, measure_compute

__all__ = ["calibrate", "calibrate_main"]


def _scatter_seconds(comm, nbytes: int, repeats: int) -> float:
    n = max(1, nbytes // 8)
    send = np.ones(n * comm.size) if comm.rank == 0 else None
    recv = np.empty(n)
    comm.Scatter(send, recv, root=0)
    best = float("inf")
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        comm.Scatter(send, recv, root=0)
        comm.Barrier()
        best = min(best, time.perf_counter() - t0)
    return best


def calibrate(comm=None, *, sizes=(8, 1 << 22), repeats: int = 20, compute: bool = True,
              path: Optional[str] = None) -> Dict[str, float]:
    """Measure ``alpha`` (s per call), ``beta`` (s per byte rank 0 sends) and, with ``compute``,
    the GEMM rate, its half-rate extents and the memory bandwidth (collective over ``comm``).

    Returns the dict rank 0 writes to ``path`` (default ``$DISTSDFG_CALIBRATION`` or
    ``~/.cache/distsdfg/calibration.json``)."""
    from mpi4py import MPI
    comm = comm or MPI.COMM_WORLD
    P = comm.size
    small, large = sizes
    t_small = _scatter_seconds(comm, small, repeats) if P > 1 else 0.0
    t_large = _scatter_seconds(comm, large, max(5, repeats // 2)) if P > 1 else 0.0
    t_barrier = 0.0
    if P > 1:
        t_barrier = min(_time_barrier(comm) for _ in range(repeats))
    moved = (P - 1) * max(8, large // 8 * 8)
    if P > 1:
        beta = max((t_large - t_small) / max(moved - (P - 1) * 8, 1), 1e-13)
        alpha = max(t_small - t_barrier, t_small / 2, 1e-8)     # the trailing barrier's share out
    else:
        d = load_rates()
        alpha, beta = d.alpha, d.beta
    out: Dict = {"alpha": float(alpha), "beta": float(beta), "ranks": P}
    if compute:
        comm.Barrier()
        mine = measure_compute()
        every = comm.allgather(mine)
        out["gemm"] = min(m["gemm"] for m in every)
        out["memory"] = min(m["memory"] for m in every)
        out["gemm_half"] = [max(m["gemm_half"][i] for m in every) for i in range(3)]
    if comm.rank == 0:
        p = path or _calibration_path()
        os.makedirs(os.path.dirname(os.path.abspath(p)), exist_ok=True)
        with open(p, "w") as f:
            json.dump(out, f, indent=1)
    return out


def _time_barrier(comm) -> float:
    comm.Barrier()
    t0 = time.perf_counter()
    comm.Barrier()
    return time.perf_counter() - t0


def calibrate_main(path: Optional[str] = None) -> None:
    """What ``distsdfg calibrate`` runs on every rank under mpiexec."""
    result = calibrate(path=path or None)
    from mpi4py import MPI
    if MPI.COMM_WORLD.rank == 0:
        print(f"alpha = {result['alpha']:.3e} s per call, beta = {result['beta']:.3e} s per byte "
              f"({result['ranks']} ranks)")
        if "gemm" in result:
            h = ", ".join(f"{x:.1f}" for x in result["gemm_half"])
            print(f"GEMM {result['gemm'] / 1e9:.2f} GFLOP/s float64 (half rate at m, n, k = {h}), "
                  f"memory {result['memory'] / 1e9:.2f} GB/s")
        print(f"written to {path or _calibration_path()}")
