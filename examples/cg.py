"""Conjugate gradients, rows split over the ranks: `distsdfg launch -n 4 examples/cg.py`.

A, b and x are scattered once. Per iteration: p is gathered on every rank for A @ p
(Allgatherv), the two dot products are combined by 8-byte Allreduces so that every rank
computes the same step size and takes the same exit from the loop; x is gathered at the end.
"""
import warnings

import dace
import numpy as np
from mpi4py import MPI

warnings.filterwarnings("ignore", category=UserWarning)

import distsdfg  # noqa: E402
from distsdfg.solver.report import format_report  # noqa: E402

N = dace.symbol("N")


@dace.program
def cg(A: dace.float64[N, N], b: dace.float64[N], x: dace.float64[N], iters: dace.int64[1], tol: dace.float64,
       maxit: dace.int64):
    r = b - A @ x
    p = np.copy(r)
    rs_old = r @ r
    iters[0] = 0
    for i in range(maxit):
        Ap = A @ p
        alpha = rs_old / (p @ Ap)
        x[:] = x + alpha * p
        r[:] = r - alpha * Ap
        rs_new = r @ r
        iters[0] = i + 1
        if np.sqrt(rs_new) < tol:
            break
        p[:] = r + (rs_new / rs_old) * p
        rs_old = rs_new


def reference(A, b, tol, maxit):
    x = np.zeros_like(b)
    r = b - A @ x
    p, rs_old = r.copy(), r @ r
    for i in range(maxit):
        Ap = A @ p
        alpha = rs_old / (p @ Ap)
        x, r = x + alpha * p, r - alpha * Ap
        rs_new = r @ r
        if np.sqrt(rs_new) < tol:
            return x, i + 1
        p, rs_old = r + (rs_new / rs_old) * p, rs_new
    return x, maxit


if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    n, P = 256, comm.size
    sdfg = cg.to_sdfg()
    # Matrix-vector products split by rows; "*": every other 1-D kernel (dot products, vector updates).
    grids = {"GEMV__map": (P, 1), "*": (P,)}
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, grids, fuzzy=True))
    if comm.rank == 0:
        print(f"== conjugate gradients, N={n}, rows split over {P} ranks")
        print(format_report(distsdfg.comm_report(sdfg, N=n, maxit=100)))
    fn = distsdfg.compile(sdfg)
    rng = np.random.default_rng(0)
    M = rng.random((n, n))
    A, b = M @ M.T / n + np.eye(n), rng.random(n)
    x, iters = np.zeros(n), np.zeros(1, dtype=np.int64)
    if comm.rank != 0:
        A, b = np.zeros_like(A), np.zeros_like(b)
    fn(A=A, b=b, x=x, iters=iters, tol=1e-10, maxit=100)
    ok = True
    if comm.rank == 0:
        xr, nr = reference(A, b, 1e-10, 100)
        err = np.abs(x - xr).max() / np.abs(xr).max()
        ok = err <= 1e-10 and int(iters[0]) == nr
        print(f"{int(iters[0])} iterations (NumPy: {nr}), |Ax - b| = {np.linalg.norm(A @ x - b):.1e}, "
              f"max relative error vs NumPy {err:.2e} -> {'OK' if ok else 'WRONG'}")
    if not comm.bcast(ok, root=0):
        raise SystemExit(1)
