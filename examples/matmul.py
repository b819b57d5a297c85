"""Distributed matmul with several schedules: run with `distsdfg launch -n 4 examples/matmul.py` (any -n).

On P ranks the map (i, j, k) of `A @ B` is split by rows (P, 1, 1), by the contraction (1, 1, P: the
result is a sum of partial products, one Reduce), and on the 2-D grids (p, q, 1) and (p, 1, q).
"""
import os
import sys

import dace
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import distinct, grid_2d, run_schedule  # noqa: E402
from mpi4py import MPI  # noqa: E402

M, N, K = (dace.symbol(s) for s in "MNK")


@dace.program
def matmul(A: dace.float64[M, K], B: dace.float64[K, N]):
    return A @ B


def inputs(sizes=None):
    """The arguments for given sizes (the hook `distsdfg run` calls); default 256 x 192 x 128."""
    s = {"M": 256, "N": 128, "K": 192, **(sizes or {})}
    rng = np.random.default_rng(0)
    return {"A": rng.random((s["M"], s["K"])), "B": rng.random((s["K"], s["N"]))}


if __name__ == "__main__":
    data = inputs()
    sizes = {"M": 256, "N": 128, "K": 192}
    # gemm_map iterates (i, j, k): data-parallel, reduction-parallel, and 2-D block schedules.
    P = MPI.COMM_WORLD.size
    p, q = grid_2d(P)
    for grid in distinct([(P, 1, 1), (1, 1, P), (p, q, 1), (p, 1, q)]):
        run_schedule(matmul, {"gemm_map": grid}, data, lambda A, B: A @ B, sizes)
