"""Triangular and loop-of-library-call programs (issue 23), each with a NumPy reference.

Written for this project in NumPy style: loops whose inner ranges depend on the loop variable
(``C[i, :i + 1]``), as in SYRK, covariance and Cholesky, and a loop of matrix products over the
leading axis of a 3-D array (a doitgen-like shape).
"""
import dace
import numpy as np

from .program import Program

__all__ = ["TRIANGULAR"]

TN, TM, NR, NQ, NP = (dace.symbol(s) for s in ("TN", "TM", "NR", "NQ", "NP"))


@dace.program
def tri_syrk(alpha: dace.float64, beta: dace.float64, C: dace.float64[TN, TN], A: dace.float64[TN, TM]):
    for i in range(TN):
        C[i, :i + 1] *= beta
        for k in range(TM):
            C[i, :i + 1] += alpha * A[i, k] * A[:i + 1, k]


def _syrk_ref(alpha, beta, C, A):
    full = beta * C + alpha * (A @ A.T)
    return {"C": np.where(np.tril(np.ones_like(C)) > 0, full, C)}


@dace.program
def tri_scale(A: dace.float64[TN, TM], B: dace.float64[TN, TM]):
    for i in range(TN):
        B[i, :i] = 2.0 * A[i, :i] + B[i, :i]


def _scale_ref(A, B):
    low = np.tril(np.ones_like(A), -1) > 0
    return {"B": np.where(low, 2.0 * A + B, B)}


@dace.program
def tri_cov(data: dace.float64[TN, TM], cov: dace.float64[TM, TM]):
    for i in range(TM):
        for j in range(i, TM):
            cov[i, j] = np.sum(data[:, i] * data[:, j])
            cov[j, i] = cov[i, j]


def _cov_ref(data, cov):
    return {"cov": data.T @ data}


@dace.program
def tri_cholesky(A: dace.float64[TN, TN]):
    A[0, 0] = np.sqrt(A[0, 0])
    for i in range(1, TN):
        for j in range(i):
            A[i, j] -= np.dot(A[i, :j], A[j, :j])
            A[i, j] /= A[j, j]
        A[i, i] -= np.dot(A[i, :i], A[i, :i])
        A[i, i] = np.sqrt(A[i, i])


def _cholesky_ref(A):
    L = np.linalg.cholesky(A)
    return {"A": np.where(np.tril(np.ones_like(A)) > 0, L, A)}


@dace.program
def loop_matmul(A: dace.float64[NR, NQ, NP], C4: dace.float64[NP, NP]):
    for r in range(NR):
        A[r, :, :] = A[r] @ C4


def _loop_matmul_ref(A, C4):
    return {"A": np.einsum("rqp,ps->rqs", A, C4)}


@dace.program
def tri_carried(A: dace.float64[TN, TM], B: dace.float64[TN, TM]):
    for i in range(1, TN):          # row i reads row i - 1: the iterations depend on each other
        B[i, :i] = B[i - 1, :i] + A[i, :i]


def _carried_ref(A, B):
    B = B.copy()
    for i in range(1, A.shape[0]):
        B[i, :i] = B[i - 1, :i] + A[i, :i]
    return {"B": B}


def _spd(r, n):
    m = r.random((n, n))
    return m @ m.T / n + np.eye(n)


TRIANGULAR = {p.name: p for p in [
    Program("tri_syrk", tri_syrk, lambda r: {"alpha": 1.5, "beta": 1.2, "C": r.random((20, 20)),
                                             "A": r.random((20, 12))}, _syrk_ref, outputs=("C",)),
    Program("tri_scale", tri_scale, lambda r: {"A": r.random((16, 20)), "B": r.random((16, 20))}, _scale_ref,
            outputs=("B",)),
    Program("tri_cov", tri_cov, lambda r: {"data": r.random((14, 12)), "cov": np.zeros((12, 12))}, _cov_ref,
            outputs=("cov",)),
    Program("tri_cholesky", tri_cholesky, lambda r: {"A": _spd(r, 12)}, _cholesky_ref, outputs=("A",)),
    Program("tri_carried", tri_carried, lambda r: {"A": r.random((12, 16)), "B": r.random((12, 16))}, _carried_ref,
            outputs=("B",)),
    Program("loop_matmul", loop_matmul, lambda r: {"A": r.random((6, 10, 8)), "C4": r.random((8, 8))},
            _loop_matmul_ref, outputs=("A",)),
]}
