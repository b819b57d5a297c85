"""Sample programs that accumulate inside maps (read-modify-write and ``op=`` in branches).

Two shapes, each with a sum, product, max and min form: a map ``i, j, k`` that accumulates
``Z[i, k]`` over ``j`` (split ``j`` and every rank holds a partial result), and an
azimuthal-integration loop whose map sums a conditional selection into scalars. Inputs keep
every bin non-empty and products near one.
"""
import dace
import numpy as np

from .programs import Program

__all__ = ["ACCUMULATIONS", "acc_max"]

N, M, K, R = (dace.symbol(s) for s in ("N", "M", "K", "R"))


@dace.program
def acc_max(X: dace.float64[N, M], Y: dace.float64[M, K], Z: dace.float64[N, K]):
    for i, j, k in dace.map[0:N, 0:M, 0:K]:
        Z[i, k] = max(Z[i, k], abs(X[i, j] - Y[j, k]))


@dace.program
def acc_min(X: dace.float64[N, M], Y: dace.float64[M, K], Z: dace.float64[N, K]):
    for i, j, k in dace.map[0:N, 0:M, 0:K]:
        Z[i, k] = min(abs(X[i, j] - Y[j, k]), Z[i, k])


@dace.program
def acc_sum(X: dace.float64[N, M], Y: dace.float64[M, K], Z: dace.float64[N, K]):
    for i, j, k in dace.map[0:N, 0:M, 0:K]:
        Z[i, k] = Z[i, k] + X[i, j] * Y[j, k]


@dace.program
def acc_sub(X: dace.float64[N, M], Y: dace.float64[M, K], Z: dace.float64[N, K]):
    for i, j, k in dace.map[0:N, 0:M, 0:K]:
        Z[i, k] = Z[i, k] - X[i, j] * Y[j, k]


@dace.program
def acc_prod(X: dace.float64[N, M], Y: dace.float64[M, K], Z: dace.float64[N, K]):
    for i, j, k in dace.map[0:N, 0:M, 0:K]:
        Z[i, k] = (1.0 + 0.1 * X[i, j] * Y[j, k]) * Z[i, k]


@dace.program
def acc_total(x: dace.float64[N], s: dace.float64[1]):
    for i in dace.map[0:N]:
        s[0] = s[0] + x[i]


def _xyz(r, n=6, m=10, k=5):
    return {"X": r.random((n, m)), "Y": r.random((m, k)), "Z": r.random((n, k))}


def _dist(X, Y):
    return np.abs(X[:, :, None] - Y[None, :, :])          # [i, j, k]


@dace.program
def azint_sum(data: dace.float64[N], radius: dace.float64[N], res: dace.float64[R]):
    rmax = np.max(radius)
    for i in range(R):
        r1 = rmax * i / R
        r2 = rmax * (i + 1) / R
        mask = (r1 <= radius) & (radius < r2)
        tmp = 0.0
        count = 0
        for j in dace.map[0:N]:
            if mask[j]:
                tmp += data[j]
                count += 1
        res[i] = tmp / count


@dace.program
def azint_inner(data: dace.float64[N], radius: dace.float64[N], res: dace.float64[R]):
    rmax = np.max(radius)
    for i in range(R):
        r1 = rmax * i / R
        r2 = rmax * (i + 1) / R
        tmp = 0.0
        count = 0
        for j in dace.map[0:N]:
            if r1 <= radius[j] and radius[j] < r2:
                tmp = tmp + data[j]
                count = count + 1
        res[i] = tmp / count


@dace.program
def azint_max(data: dace.float64[N], radius: dace.float64[N], res: dace.float64[R]):
    rmax = np.max(radius)
    for i in range(R):
        r1 = rmax * i / R
        r2 = rmax * (i + 1) / R
        mask = (r1 <= radius) & (radius < r2)
        tmp = -1.0e300
        for j in dace.map[0:N]:
            if mask[j]:
                tmp = max(tmp, data[j])
        res[i] = tmp


@dace.program
def azint_min(data: dace.float64[N], radius: dace.float64[N], res: dace.float64[R]):
    rmax = np.max(radius)
    for i in range(R):
        r1 = rmax * i / R
        r2 = rmax * (i + 1) / R
        tmp = 1.0e300
        for j in dace.map[0:N]:
            if r1 <= radius[j] and radius[j] < r2:
                tmp = min(data[j], tmp)
        res[i] = tmp


@dace.program
def azint_prod(data: dace.float64[N], radius: dace.float64[N], res: dace.float64[R]):
    rmax = np.max(radius)
    for i in range(R):
        r1 = rmax * i / R
        r2 = rmax * (i + 1) / R
        mask = (r1 <= radius) & (radius < r2)
        tmp = 1.0
        for j in dace.map[0:N]:
            if mask[j]:
                tmp *= data[j]
        res[i] = tmp


def _rings(r, n=40, bins=4):
    radius = (r.permutation(n) + 0.5) / n + 0.01 * r.random(n)     # every bin holds about n / bins points
    data = 0.5 + r.random(n)
    out = {"data": data, "radius": radius, "res": np.zeros(bins)}
    assert all(np.any(m) for m in _masks(radius, bins))
    return out


def _masks(radius, bins):
    rmax = radius.max()
    return [(rmax * i / bins <= radius) & (radius < rmax * (i + 1) / bins) for i in range(bins)]


def _rings_ref(fn):
    def ref(data, radius, res):
        return {"res": np.array([fn(data[m]) for m in _masks(radius, len(res))])}
    return ref


ACCUMULATIONS = {p.name: p for p in [
    Program("acc_max", acc_max, _xyz, lambda X, Y, Z: {"Z": np.maximum(Z, _dist(X, Y).max(axis=1))}, outputs=("Z",)),
    Program("acc_min", acc_min, _xyz, lambda X, Y, Z: {"Z": np.minimum(Z, _dist(X, Y).min(axis=1))}, outputs=("Z",)),
    Program("acc_sum", acc_sum, _xyz, lambda X, Y, Z: {"Z": Z + X @ Y}, outputs=("Z",)),
    Program("acc_sub", acc_sub, _xyz, lambda X, Y, Z: {"Z": Z - X @ Y}, outputs=("Z",)),
    Program("acc_prod", acc_prod, _xyz,
            lambda X, Y, Z: {"Z": Z * np.prod(1.0 + 0.1 * X[:, :, None] * Y[None, :, :], axis=1)}, outputs=("Z",)),
    Program("acc_total", acc_total, lambda r: {"x": r.random(23), "s": np.array([0.25])},
            lambda x, s: {"s": s + x.sum()}, outputs=("s",)),
    Program("azint_sum", azint_sum, _rings, _rings_ref(np.mean), outputs=("res",)),
    Program("azint_inner", azint_inner, _rings, _rings_ref(np.mean), outputs=("res",)),
    Program("azint_max", azint_max, _rings, _rings_ref(np.max), outputs=("res",)),
    Program("azint_min", azint_min, _rings, _rings_ref(np.min), outputs=("res",)),
    Program("azint_prod", azint_prod, _rings, _rings_ref(np.prod), outputs=("res",)),
]}
