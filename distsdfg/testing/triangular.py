"""Triangular and loop-of-library-call programs, each with a NumPy reference.

Written for this project in NumPy style: loops whose inner ranges depend on the loop variable
(``C[i, :i + 1]``), as in SYRK, covariance and Cholesky, and a loop of matrix products over the
leading axis of a 3-D array (a doitgen-like shape). The last three have the shapes of NPBench
kernels that the lowering got wrong once: a convolution written as two loops (conv2d: the loop
body's nested SDFG kept the global strides, a segmentation fault), the same followed by a 2x2
max-pool (lenet: a body writing one row of an outer loop was taken to write every row), and
correlation's triangle (an ordering edge into a view: DaCe rejected the SDFG).
"""
import dace
import numpy as np

from .program import Program

__all__ = ["TRIANGULAR"]

TN, TM, NR, NQ, NP = (dace.symbol(s) for s in ("TN", "TM", "NR", "NQ", "NP"))
CN, CH, CW, CI, CO = (dace.symbol(s) for s in ("CN", "CH", "CW", "CI", "CO"))


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


@dace.program
def conv_rows(x: dace.float64[CN, CH, CW, CI], w: dace.float64[2, 2, CI, CO]):
    out = np.ndarray((CN, CH - 1, CW - 1, CO), dtype=np.float64)
    for i in range(CH - 1):
        for j in range(CW - 1):
            out[:, i, j, :] = np.sum(x[:, i:i + 2, j:j + 2, :, np.newaxis] * w[np.newaxis, :, :, :], axis=(1, 2, 3))
    return out


@dace.program
def conv_bias(x: dace.float64[CN, CH, CW, CI], w: dace.float64[2, 2, CI, CO], b: dace.float64[CO]):
    return conv_rows(x, w) + b


def _conv_ref(x, w):
    n, h, wd, _ = x.shape
    out = np.zeros((n, h - 1, wd - 1, w.shape[3]))
    for a in range(2):
        for b in range(2):
            out += np.einsum("nhwc,co->nhwo", x[:, a:a + h - 1, b:b + wd - 1, :], w[a, b])
    return out


@dace.program
def conv_pool(x: dace.float64[CN, CH, CW, CI], w: dace.float64[2, 2, CI, CO]):
    y = np.maximum(conv_rows(x, w), 0.0)
    out = np.ndarray((CN, (CH - 1) // 2, (CW - 1) // 2, CO), dtype=np.float64)
    for i in range((CH - 1) // 2):
        for j in range((CW - 1) // 2):
            out[:, i, j, :] = np.max(y[:, 2 * i:2 * i + 2, 2 * j:2 * j + 2, :], axis=(1, 2))
    return out


def _pool_ref(x, w):
    y = np.maximum(_conv_ref(x, w), 0.0)
    n, h, wd, c = y.shape
    return y[:, :h // 2 * 2, :wd // 2 * 2].reshape(n, h // 2, 2, wd // 2, 2, c).max(axis=(2, 4))


@dace.program
def corr_rows(data: dace.float64[TN, TM]):
    d = data - np.mean(data, axis=0)
    corr = np.eye(TM, dtype=data.dtype)
    for i in range(TM - 1):
        corr[i, i + 1:TM] = d[:, i] @ d[:, i + 1:TM]
        corr[i + 1:TM, i] = corr[i, i + 1:TM]
    return corr


def _corr_ref(data):
    d = data - data.mean(axis=0)
    c = d.T @ d
    np.fill_diagonal(c, 1.0)
    return c


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
    Program("conv_bias", conv_bias, lambda r: {"x": r.random((2, 7, 10, 3)), "w": r.random((2, 2, 3, 4)),
                                               "b": r.random(4)}, lambda x, w, b: _conv_ref(x, w) + b),
    Program("conv_pool", conv_pool, lambda r: {"x": r.random((2, 9, 10, 3)) - 0.3, "w": r.random((2, 2, 3, 4))},
            _pool_ref),
    Program("corr_rows", corr_rows, lambda r: {"data": r.random((12, 10))}, _corr_ref),
    Program("loop_matmul", loop_matmul, lambda r: {"A": r.random((6, 10, 8)), "C4": r.random((8, 8))},
            _loop_matmul_ref, outputs=("A",)),
]}
