"""Sample programs (the thesis' examples and more), each with a NumPy reference and input maker."""

from typing import Dict

import dace
import numpy as np

from .attention import (ATTENTION, MEGATRON_SCHEDULE, MHSA_FUSED_SCHEDULE, MHSA_FUSED_SIZES, MHSA_SIZES,
                        MHSA_THESIS_SCHEDULE, megatron_program)
from .program import Program

__all__ = ["Program", "PROGRAMS", "get", "MHSA_SIZES", "MHSA_FUSED_SIZES", "MHSA_THESIS_SCHEDULE",
           "MHSA_FUSED_SCHEDULE", "MEGATRON_SCHEDULE", "megatron_program"]

M, N, K = (dace.symbol(s) for s in ("M", "N", "K"))
SM, SN, NNZ = (dace.symbol(s) for s in ("SM", "SN", "NNZ"))


@dace.program
def add3d(x: dace.float64[4, 8, 16], y: dace.float64[8, 16]):
    return x + y


@dace.program
def add_scalar(x: dace.int64[64]):
    return x + 5


@dace.program
def reduce_sum(x: dace.float64[16, 16]):
    return np.add.reduce(x, axis=1)


@dace.program
def reduce_max(x: dace.float64[16, 16]):
    return np.maximum.reduce(x, axis=1)


@dace.program
def matmul(A: dace.float64[M, K], B: dace.float64[K, N]):
    return A @ B


@dace.program
def softmax(inp: dace.float32[8, 16, 32, 32]):
    rowmax = np.maximum.reduce(inp, axis=-1, keepdims=True)
    exp_arr = np.exp(inp - rowmax)
    rowsum = np.add.reduce(exp_arr, axis=-1, keepdims=True)
    return exp_arr / rowsum


@dace.program
def projection(x: dace.float32[4, 16, 32], W: dace.float32[32, 4, 8]):
    return np.einsum('bik,khj->bhij', x, W)


@dace.program
def spmv(A_row: dace.uint32[SM + 1], A_col: dace.uint32[NNZ], A_val: dace.float64[NNZ], x: dace.float64[SN]):
    b = np.empty([SM], dtype=np.float64)
    for i in dace.map[0:SM]:
        b[i] = 0
        for j in dace.map[A_row[i]:A_row[i + 1]]:
            b[i] += A_val[j] * x[A_col[j]]
    return b


@dace.program
def add_odd(x: dace.float64[10, 7], y: dace.float64[10, 7]):
    return x * y + 1.0


@dace.program
def masked(A: dace.float64[12, 10], M: dace.bool_[12, 10]):
    return np.logical_and(M, A > 0.5)       # boolean in, boolean out


@dace.program
def chain(A: dace.float64[128, 112], B: dace.float64[112, 96], C: dace.float64[96, 80]):
    return (A @ B) @ C


@dace.program
def atax(A: dace.float64[400, 320], x: dace.float64[320]):
    return (A @ x) @ A


@dace.program
def gemv_chain(A: dace.float64[M, N], x: dace.float64[N]):
    y = A @ x
    return y @ A + np.max(A, axis=0)


@dace.program
def greatcircle(lat1: dace.float64[100000], lon1: dace.float64[100000], lat2: dace.float64[100000],
                lon2: dace.float64[100000]):
    dlat = lat2 - lat1
    dlon = lon2 - lon1
    a = np.sin(dlat / 2) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin(dlon / 2) ** 2
    c = 2 * np.arctan2(np.sqrt(a), np.sqrt(1 - a))
    return 6371.0 * c


@dace.program
def repartition(x: dace.float64[64, 48]):
    y = x * 2.0
    return y + 1.0


@dace.program
def mlp(x: dace.float64[32, 64], W1: dace.float64[64, 128], b1: dace.float64[128], W2: dace.float64[128, 48],
        b2: dace.float64[48]):
    h = np.maximum(x @ W1 + b1, 0.0)
    return h @ W2 + b2


def _greatcircle_ref(lat1, lon1, lat2, lon2):
    a = np.sin((lat2 - lat1) / 2) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
    return 6371.0 * 2 * np.arctan2(np.sqrt(a), np.sqrt(1 - a))


def _points(rng, n=100000):
    return {"lat1": rng.uniform(-1.5, 1.5, n), "lon1": rng.uniform(-3.1, 3.1, n),
            "lat2": rng.uniform(-1.5, 1.5, n), "lon2": rng.uniform(-3.1, 3.1, n)}


def _csr(rng, m=64, n=48, density=0.15):
    dense = rng.random((m, n)) * (rng.random((m, n)) < density)
    rows, cols = np.nonzero(dense)
    vals = dense[rows, cols].astype(np.float64)
    indptr = np.zeros(m + 1, dtype=np.uint32)
    np.add.at(indptr, rows + 1, 1)
    indptr = np.cumsum(indptr).astype(np.uint32)
    return {"A_row": indptr, "A_col": cols.astype(np.uint32), "A_val": np.ascontiguousarray(vals),
            "x": rng.random(n)}


def _csr_skewed(rng, m=64, n=48):
    """Rows of very different lengths: rows 16-31 empty (a rank of four without nonzeros), the
    last quarter dense, the last row empty."""
    per_row = np.concatenate([rng.integers(0, 4, 16), np.zeros(16, int), rng.integers(1, 8, 16),
                              rng.integers(30, n, 15), [0]])[:m]
    indptr = np.concatenate([[0], np.cumsum(per_row)]).astype(np.uint32)
    cols = np.concatenate([np.sort(rng.choice(n, k, replace=False)) for k in per_row]).astype(np.uint32)
    return {"A_row": indptr, "A_col": cols, "A_val": rng.random(int(indptr[-1])), "x": rng.random(n)}


def _spmv_ref(A_row, A_col, A_val, x):
    out = np.zeros(len(A_row) - 1)
    for i in range(len(A_row) - 1):
        s, e = A_row[i], A_row[i + 1]
        out[i] = A_val[s:e] @ x[A_col[s:e]]
    return out


def _softmax_ref(inp):
    e = np.exp(inp - inp.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


NS, NT, NH = (dace.symbol(s) for s in ("NS", "NT", "NH"))


@dace.program
def diamond(x: dace.float64[64, 48], W: dace.float64[48, 32]):
    """A product consumed by two maps that meet again (a DAG that is not a tree)."""
    h = x @ W
    return np.exp(h) + h * 2.0


@dace.program
def matrix_chain(A: dace.float64[NS, NT], B: dace.float64[NT, NS], C: dace.float64[NS, NT], D: dace.float64[NT, NH],
                 E: dace.float64[NH, NS]):
    """The planner paper's chain ``(A x B) + (C x (D x E))`` (seed 000, section 9)."""
    return (A @ B) + (C @ (D @ E))


@dace.program
def sum_of_products(A1: dace.float64[48, 64], B1: dace.float64[64, 40], A2: dace.float64[48, 32],
                    B2: dace.float64[32, 40], D: dace.float64[48, 40]):
    """Two contractions added, one of them scaled (a tied weight's two gradient products), then a
    term that is no product: with both contractions split, one reduction for the two (partial_sums)."""
    return (A1 @ B1 - 0.5 * (A2 @ B2)) + D


# -- programs with loops: time-stepping stencils and an iterative solver ------------------
T = dace.symbol("T")


@dace.program
def jacobi1d(A: dace.float64[N], B: dace.float64[N], TSTEPS: dace.int64):
    for t in range(TSTEPS):
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])


def _jacobi1d_ref(A, B, TSTEPS):
    A, B = A.copy(), B.copy()
    for _ in range(TSTEPS):
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])
    return {"A": A, "B": B}


@dace.program
def jacobi2d(A: dace.float64[N, N], B: dace.float64[N, N], TSTEPS: dace.int64):
    for t in range(1, TSTEPS):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])


def _jacobi2d_ref(A, B, TSTEPS):
    A, B = A.copy(), B.copy()
    for _ in range(1, TSTEPS):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
    return {"A": A, "B": B}


def _heat_step(A, B):
    B[1:-1, 1:-1, 1:-1] = (0.125 * (A[2:, 1:-1, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[:-2, 1:-1, 1:-1]) +
                           0.125 * (A[1:-1, 2:, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, :-2, 1:-1]) +
                           0.125 * (A[1:-1, 1:-1, 2:] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, 1:-1, :-2]) +
                           A[1:-1, 1:-1, 1:-1])


@dace.program
def heat3d(A: dace.float64[N, N, N], B: dace.float64[N, N, N], TSTEPS: dace.int64):
    for t in range(1, TSTEPS):
        B[1:-1, 1:-1, 1:-1] = (0.125 * (A[2:, 1:-1, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[:-2, 1:-1, 1:-1]) +
                               0.125 * (A[1:-1, 2:, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, :-2, 1:-1]) +
                               0.125 * (A[1:-1, 1:-1, 2:] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, 1:-1, :-2]) +
                               A[1:-1, 1:-1, 1:-1])
        A[1:-1, 1:-1, 1:-1] = (0.125 * (B[2:, 1:-1, 1:-1] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[:-2, 1:-1, 1:-1]) +
                               0.125 * (B[1:-1, 2:, 1:-1] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[1:-1, :-2, 1:-1]) +
                               0.125 * (B[1:-1, 1:-1, 2:] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[1:-1, 1:-1, :-2]) +
                               B[1:-1, 1:-1, 1:-1])


def _heat3d_ref(A, B, TSTEPS):
    A, B = A.copy(), B.copy()
    for _ in range(1, TSTEPS):
        _heat_step(A, B)
        _heat_step(B, A)
    return {"A": A, "B": B}


@dace.program
def fdtd2d(ex: dace.float64[M, N], ey: dace.float64[M, N], hz: dace.float64[M, N], fict: dace.float64[T]):
    """A 2-D FDTD update; the boundary row ``ey[0, :]`` follows a time-dependent source."""
    for t in range(T):
        ey[0, :] = fict[t]
        ey[1:, :] -= 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] -= 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])


def _fdtd2d_ref(ex, ey, hz, fict):
    ex, ey, hz = ex.copy(), ey.copy(), hz.copy()
    for t in range(fict.shape[0]):
        ey[0, :] = fict[t]
        ey[1:, :] -= 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] -= 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])
    return {"ex": ex, "ey": ey, "hz": hz}


@dace.program
def cg(A: dace.float64[N, N], b: dace.float64[N], x: dace.float64[N], iters: dace.int64[1], tol: dace.float64,
       maxit: dace.int64):
    """Conjugate gradients for SPD ``A`` from the start ``x``, until ``|r| < tol`` or ``maxit`` steps."""
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


def _cg_ref(A, b, x, iters, tol, maxit):
    x = x.copy()
    r = b - A @ x
    p = r.copy()
    rs_old = r @ r
    n = 0
    for i in range(maxit):
        Ap = A @ p
        alpha = rs_old / (p @ Ap)
        x = x + alpha * p
        r = r - alpha * Ap
        rs_new = r @ r
        n = i + 1
        if np.sqrt(rs_new) < tol:
            break
        p = r + (rs_new / rs_old) * p
        rs_old = rs_new
    return {"x": x, "iters": np.array([n], dtype=np.int64)}


@dace.program
def jacobi_conv(A: dace.float64[N], B: dace.float64[N], res: dace.float64[1], iters: dace.int64[1], tol: dace.float64,
                maxit: dace.int64):
    """Jacobi sweeps until the summed change drops below ``tol`` (a reduction to a scalar in the loop)."""
    for t in range(maxit):
        B[1:-1] = 0.5 * (A[:-2] + A[2:])
        res[0] = np.sum(np.abs(B[1:-1] - A[1:-1]))
        A[1:-1] = B[1:-1]
        iters[0] = t + 1
        if res[0] < tol:
            break


def _jacobi_conv_ref(A, B, res, iters, tol, maxit):
    A, B, res, iters = A.copy(), B.copy(), res.copy(), iters.copy()
    for t in range(maxit):
        B[1:-1] = 0.5 * (A[:-2] + A[2:])
        res[0] = np.sum(np.abs(B[1:-1] - A[1:-1]))
        A[1:-1] = B[1:-1]
        iters[0] = t + 1
        if res[0] < tol:
            break
    return {"A": A, "B": B, "res": res, "iters": iters}


@dace.program
def flagged(A: dace.float64[N], flags: dace.int64[10]):
    """A branch on input data that only rank 0 holds: every rank must take rank 0's branch."""
    for t in range(10):
        if flags[t] > 0:
            A[:] = A * 0.5 + 1.0


def _flagged_ref(A, flags):
    A = A.copy()
    for t in range(10):
        if flags[t] > 0:
            A[:] = A * 0.5 + 1.0
    return {"A": A}


NB, NI, NHID, NO = (dace.symbol(s) for s in ("NB", "NI", "NHID", "NO"))


@dace.program
def mlp_sgd(x: dace.float64[NB, NI], y: dace.float64[NB, NO], W1: dace.float64[NI, NHID],
            W2: dace.float64[NHID, NO], lr: dace.float64):
    """One SGD step of a 2-layer ReLU MLP with mean squared error (weights updated in place)."""
    h = x @ W1
    a = np.maximum(h, 0.0)
    out = a @ W2
    d = (out - y) * (2.0 / (NB * NO))
    gW2 = np.transpose(a) @ d
    da = d @ np.transpose(W2)
    dh = da * (h > 0.0)
    gW1 = np.transpose(x) @ dh
    W1 -= lr * gW1
    W2 -= lr * gW2


def _mlp_sgd_ref(x, y, W1, W2, lr):
    W1, W2 = W1.copy(), W2.copy()
    h = x @ W1
    a = np.maximum(h, 0.0)
    d = (a @ W2 - y) * (2.0 / y.size)
    gW2 = a.T @ d
    gW1 = x.T @ ((d @ W2.T) * (h > 0.0))
    return {"W1": W1 - lr * gW1, "W2": W2 - lr * gW2}


@dace.program
def sgd_lr(w: dace.float64[N], g: dace.float64[N], lr: dace.float64[1]):
    """An update by a learning rate passed as a one-element array (replicated on every rank)."""
    for i in dace.map[0:N]:
        w[i] = w[i] - lr[0] * g[i]


@dace.program
def affine(A: dace.float64[N, N], B: dace.float64[N, N]):
    for i, j in dace.map[0:N, 0:N]:
        B[i, j] = 2.0 * A[i, j] + 1.0


@dace.program
def trimul(A: dace.float64[24, 20], B: dace.float64[20, 24]):
    C = A @ B
    for i in range(24):          # a map over 0:i: its blocks depend on i, so it runs whole on rank 0
        for j in dace.map[0:i]:
            C[i, j] = C[i, j] * 2.0
    return C


def _trimul_ref(A, B):
    C = A @ B
    return np.where(np.tril(np.ones_like(C), -1) > 0, 2.0 * C, C)


def _spd(r, n=256):
    m = r.random((n, n))
    return {"A": m @ m.T / n + np.eye(n), "b": r.random(n), "x": np.zeros(n), "iters": np.zeros(1, dtype=np.int64),
            "tol": 1e-10, "maxit": 100}


PROGRAMS: Dict[str, Program] = {p.name: p for p in [
    Program("add3d", add3d, lambda r: {"x": r.random((4, 8, 16)), "y": r.random((8, 16))}, lambda x, y: x + y),
    Program("add_scalar", add_scalar, lambda r: {"x": r.integers(-100, 100, 64).astype(np.int64)}, lambda x: x + 5),
    Program("reduce_sum", reduce_sum, lambda r: {"x": r.random((16, 16))}, lambda x: np.add.reduce(x, axis=1)),
    Program("reduce_max", reduce_max, lambda r: {"x": r.random((16, 16)) - 0.5},
            lambda x: np.maximum.reduce(x, axis=1)),
    Program("matmul", matmul, lambda r: {"A": r.random((256, 192)), "B": r.random((192, 128))},
            lambda A, B: A @ B, (("M", 256), ("N", 128), ("K", 192))),
    Program("softmax", softmax, lambda r: {"inp": r.random((8, 16, 32, 32)).astype(np.float32)}, _softmax_ref),
    Program("projection", projection,
            lambda r: {"x": r.random((4, 16, 32)).astype(np.float32), "W": r.random((32, 4, 8)).astype(np.float32)},
            lambda x, W: np.einsum('bik,khj->bhij', x, W)),
    Program("spmv", spmv, _csr, _spmv_ref),
    Program("spmv_skewed", spmv, _csr_skewed, _spmv_ref),
    Program("chain", chain, lambda r: {"A": r.random((128, 112)), "B": r.random((112, 96)), "C": r.random((96, 80))},
            lambda A, B, C: (A @ B) @ C),
    Program("atax", atax, lambda r: {"A": r.random((400, 320)), "x": r.random(320)}, lambda A, x: (A @ x) @ A),
    Program("gemv_chain", gemv_chain, lambda r: {"A": r.random((203, 157)) - 0.5, "x": r.random(157)},
            lambda A, x: (A @ x) @ A + np.max(A, axis=0), (("M", 203), ("N", 157))),
    Program("greatcircle", greatcircle, _points, _greatcircle_ref),
    Program("repartition", repartition, lambda r: {"x": r.random((64, 48))}, lambda x: x * 2.0 + 1.0),
    Program("mlp", mlp, lambda r: {"x": r.random((32, 64)) - 0.5, "W1": r.random((64, 128)) - 0.5,
                                   "b1": r.random(128) - 0.5, "W2": r.random((128, 48)) - 0.5, "b2": r.random(48)},
            lambda x, W1, b1, W2, b2: np.maximum(x @ W1 + b1, 0.0) @ W2 + b2),
    *ATTENTION,
    Program("diamond", diamond, lambda r: {"x": r.random((64, 48)) - 0.5, "W": r.random((48, 32)) - 0.5},
            lambda x, W: np.exp(x @ W) + (x @ W) * 2.0),
    Program("matrix_chain", matrix_chain,
            lambda r: {"A": r.random((64, 8)), "B": r.random((8, 64)), "C": r.random((64, 8)), "D": r.random((8, 512)),
                       "E": r.random((512, 64))},
            lambda A, B, C, D, E: (A @ B) + (C @ (D @ E)), (("NS", 64), ("NT", 8), ("NH", 512))),
    Program("sum_of_products", sum_of_products,
            lambda r: {"A1": r.random((48, 64)) - 0.5, "B1": r.random((64, 40)), "A2": r.random((48, 32)),
                       "B2": r.random((32, 40)) - 0.5, "D": r.random((48, 40))},
            lambda A1, B1, A2, B2, D: (A1 @ B1 - 0.5 * (A2 @ B2)) + D),
    Program("masked", masked, lambda r: {"A": r.random((12, 10)), "M": r.random((12, 10)) > 0.3},
            lambda A, M: np.logical_and(M, A > 0.5)),
    Program("add_odd", add_odd, lambda r: {"x": r.random((10, 7)), "y": r.random((10, 7))}, lambda x, y: x * y + 1.0),
    Program("jacobi1d", jacobi1d, lambda r: {"A": r.random(3202), "B": r.random(3202), "TSTEPS": 50}, _jacobi1d_ref,
            outputs=("A", "B")),
    Program("jacobi2d", jacobi2d, lambda r: {"A": r.random((130, 130)), "B": r.random((130, 130)), "TSTEPS": 11},
            _jacobi2d_ref, outputs=("A", "B")),
    Program("heat3d", heat3d, lambda r: {"A": r.random((34, 34, 34)), "B": r.random((34, 34, 34)), "TSTEPS": 6},
            _heat3d_ref, outputs=("A", "B")),
    Program("fdtd2d", fdtd2d, lambda r: {"ex": r.random((40, 48)), "ey": r.random((40, 48)), "hz": r.random((40, 48)),
                                         "fict": r.random(8)}, _fdtd2d_ref, outputs=("ex", "ey", "hz")),
    Program("cg", cg, _spd, _cg_ref, outputs=("x", "iters")),
    Program("flagged", flagged, lambda r: {"A": r.random(40), "flags": r.integers(0, 2, 10).astype(np.int64)},
            _flagged_ref, outputs=("A",)),
    Program("mlp_sgd", mlp_sgd, lambda r: {"x": r.random((64, 32)) - 0.5, "y": r.random((64, 16)),
                                           "W1": r.random((32, 48)) - 0.5, "W2": r.random((48, 16)) - 0.5, "lr": 0.1},
            _mlp_sgd_ref, (("NB", 64), ("NI", 32), ("NHID", 48), ("NO", 16)), outputs=("W1", "W2")),
    Program("trimul", trimul, lambda r: {"A": r.random((24, 20)), "B": r.random((20, 24))}, _trimul_ref),
    Program("sgd_lr", sgd_lr, lambda r: {"w": r.random(64), "g": r.random(64), "lr": np.full(1, 0.25)},
            lambda w, g, lr: {"w": w - lr[0] * g}, (("N", 64),), outputs=("w",)),
    Program("affine", affine, lambda r: {"A": r.random((64, 64)), "B": np.zeros((64, 64))},
            lambda A, B: {"B": 2.0 * A + 1.0}, (("N", 64),), outputs=("B",)),
    Program("jacobi_conv", jacobi_conv,
            lambda r: {"A": r.random(402), "B": r.random(402), "res": np.zeros(1), "iters": np.zeros(1, dtype=np.int64),
                       "tol": 30.36, "maxit": 1000}, _jacobi_conv_ref, outputs=("A", "B", "res", "iters")),
]}


def get(name: str) -> Program:
    """The sample program ``name``; ``"name@Transformation"``: it after one of DaCe's
    transformations (``distsdfg.testing.transformed``)."""
    if "@" in name:
        from .transformed import transformed
        base, _, how = name.partition("@")
        return transformed(get(base), how)
    if name not in PROGRAMS:
        from .accumulations import ACCUMULATIONS       # accumulations in maps
        from .offsets import OFFSETS                   # transposed, strided and shifted reads (hK's sweep)
        from .sweep_npbench import SWEEP_NPBENCH       # npbench-style kernels that once failed
        from .sweep_numpy import SWEEP_NUMPY           # fresh NumPy programs that once failed
        from .triangular import TRIANGULAR             # triangular loops, loops of library calls
        return {**ACCUMULATIONS, **TRIANGULAR, **OFFSETS, **SWEEP_NPBENCH, **SWEEP_NUMPY}[name]
    return PROGRAMS[name]

