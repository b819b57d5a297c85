"""Sample programs that accumulate inside maps (read-modify-write and ``op=`` in branches).

Two shapes, each with a sum, product, max and min form: a map ``i, j, k`` that accumulates
``Z[i, k]`` over ``j`` (split ``j`` and every rank holds a partial result), and an
azimuthal-integration loop whose map sums a conditional selection into scalars. Inputs keep
every bin non-empty and products near one; 48 points, so that ``np.max`` (a Reduce library
node, which needs even blocks) splits evenly on 2, 3 and 4 ranks.
"""
import dace
import numpy as np

from .program import Program

__all__ = ["ACCUMULATIONS"]

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


def _rings(r, n=48, bins=4):
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


@dace.program
def acc_all(X: dace.float64[N, M], Y: dace.float64[M, K], Zmax: dace.float64[N, K], Zmin: dace.float64[N, K],
            Zsum: dace.float64[N, K], Zsub: dace.float64[N, K], Zprod: dace.float64[N, K], W: dace.float64[N, K]):
    """Every form of the first shape in one program (one build per schedule); ``W`` does not
    depend on ``j`` at all (the same values on every rank)."""
    for i, j, k in dace.map[0:N, 0:M, 0:K]:
        Zmax[i, k] = max(Zmax[i, k], abs(X[i, j] - Y[j, k]))
    for i, j, k in dace.map[0:N, 0:M, 0:K]:
        Zmin[i, k] = min(abs(X[i, j] - Y[j, k]), Zmin[i, k])
    for i, j, k in dace.map[0:N, 0:M, 0:K]:
        Zsum[i, k] = Zsum[i, k] + X[i, j] * Y[j, k]
    for i, j, k in dace.map[0:N, 0:M, 0:K]:
        Zsub[i, k] = Zsub[i, k] - X[i, j] * Y[j, k]
    for i, j, k in dace.map[0:N, 0:M, 0:K]:
        Zprod[i, k] = (1.0 + 0.1 * X[i, j] * Y[j, k]) * Zprod[i, k]
    for i, j, k in dace.map[0:N, 0:M, 0:K]:
        W[i, k] = 2.0 * X[i, 0] + Y[0, k]


def _acc_all_inputs(r, n=6, m=10, k=5):
    out = {"X": r.random((n, m)), "Y": r.random((m, k))}
    out.update({z: r.random((n, k)) for z in ("Zmax", "Zmin", "Zsum", "Zsub", "Zprod", "W")})
    return out


def _acc_all_ref(X, Y, Zmax, Zmin, Zsum, Zsub, Zprod, W):
    d = _dist(X, Y)
    return {"Zmax": np.maximum(Zmax, d.max(axis=1)), "Zmin": np.minimum(Zmin, d.min(axis=1)), "Zsum": Zsum + X @ Y,
            "Zsub": Zsub - X @ Y, "Zprod": Zprod * np.prod(1.0 + 0.1 * X[:, :, None] * Y[None, :, :], axis=1),
            "W": 2.0 * X[:, :1] + Y[:1, :]}


@dace.program
def azint_all(data: dace.float64[N], radius: dace.float64[N], mean: dace.float64[R], hi: dace.float64[R],
              lo: dace.float64[R], prod: dace.float64[R]):
    """Every form of the second shape in one loop: ``+=``, ``x = x + e``, ``max``, ``min``, ``*``."""
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
                count = count + 1
        mean[i] = tmp / count
        top = -1.0e300
        for j in dace.map[0:N]:
            if r1 <= radius[j] and radius[j] < r2:
                top = max(top, data[j])
        hi[i] = top
        low = 1.0e300
        p = 1.0
        for j in dace.map[0:N]:
            if mask[j]:
                low = min(data[j], low)
                p = p * data[j]
        lo[i] = low
        prod[i] = p


def _azint_all_inputs(r):
    out = _rings(r)
    out.update({k: np.zeros(4) for k in ("mean", "hi", "lo", "prod")})
    del out["res"]
    return out


def _azint_all_ref(data, radius, mean, hi, lo, prod):
    ms = _masks(radius, len(mean))
    return {k: np.array([fn(data[m]) for m in ms])
            for k, fn in (("mean", np.mean), ("hi", np.max), ("lo", np.min), ("prod", np.prod))}


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
    Program("acc_all", acc_all, _acc_all_inputs, _acc_all_ref, outputs=("Zmax", "Zmin", "Zsum", "Zsub", "Zprod", "W")),
    Program("azint_all", azint_all, _azint_all_inputs, _azint_all_ref, outputs=("mean", "hi", "lo", "prod")),
]}


# -- library reductions over an unevenly split axis ---------------------------------------
@dace.program
def reduce_uneven(A: dace.float64[10, 7], B: dace.int32[10, 7], s0: dace.float64[7], x0: dace.float64[7],
                  n0: dace.int32[7], s1: dace.int32[10], x1: dace.int32[10], n1: dace.float64[10]):
    """``np.sum``/``max``/``min`` over axis 0 and 1 of a float64 and an int32 array: 10 rows and 7
    columns divide evenly on neither 3 nor 4 ranks."""
    s0[:] = np.sum(A, axis=0)
    x0[:] = np.max(A, axis=0)
    n0[:] = np.min(B, axis=0)
    s1[:] = np.sum(B, axis=1)
    x1[:] = np.max(B, axis=1)
    n1[:] = np.min(A, axis=1)


def _reduce_uneven_inputs(r):
    out = {"A": r.random((10, 7)) - 0.5, "B": r.integers(-1000, 1000, (10, 7)).astype(np.int32)}
    out.update({k: np.zeros(7) for k in ("s0", "x0")})
    out["n0"] = np.zeros(7, np.int32)
    out.update({k: np.zeros(10, np.int32) for k in ("s1", "x1")})
    out["n1"] = np.zeros(10)
    return out


def _reduce_uneven_ref(A, B, **_):
    return {"s0": A.sum(axis=0), "x0": A.max(axis=0), "n0": B.min(axis=0), "s1": B.sum(axis=1, dtype=np.int32),
            "x1": B.max(axis=1), "n1": A.min(axis=1)}


ACCUMULATIONS["reduce_uneven"] = Program("reduce_uneven", reduce_uneven, _reduce_uneven_inputs, _reduce_uneven_ref,
                                         outputs=("s0", "x0", "n0", "s1", "x1", "n1"))
