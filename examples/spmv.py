"""The thesis' CSR SpMV, row-parallel: `distsdfg launch -n 4 examples/spmv.py`.

The row pointer block of each rank overlaps its neighbour's by one entry; the solver
handles that with per-rank displacements.
"""
import os
import sys

import dace
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run_schedule  # noqa: E402

M, N, nnz = (dace.symbol(s) for s in ["M", "N", "nnz"])


@dace.program
def spmv(A_row: dace.uint32[M + 1], A_col: dace.uint32[nnz], A_val: dace.float64[nnz], x: dace.float64[N]):
    b = np.empty([M], dtype=np.float64)
    for i in dace.map[0:M]:
        b[i] = 0
        for j in dace.map[A_row[i]:A_row[i + 1]]:
            b[i] += A_val[j] * x[A_col[j]]
    return b


def csr(m=200, n=150, density=0.1, seed=0):
    rng = np.random.default_rng(seed)
    dense = rng.random((m, n)) * (rng.random((m, n)) < density)
    rows, cols = np.nonzero(dense)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=m))]).astype(np.uint32)
    return {"A_row": indptr, "A_col": cols.astype(np.uint32), "A_val": dense[rows, cols].copy(),
            "x": rng.random(n)}, dense


if __name__ == "__main__":
    from mpi4py import MPI
    data, dense = csr()
    sizes = {"M": 200, "N": 150, "nnz": int(data["A_val"].shape[0])}
    sdfg_key = "spmv"
    label = [m.label for m in __import__("distsdfg").maps(spmv.to_sdfg())][0]
    run_schedule(spmv, {label: (MPI.COMM_WORLD.size,)}, data, lambda **kw: dense @ kw["x"], sizes)
