"""Fuzz corpus, part two: explicit ``dace.map`` kernels as users write them by hand.

Read-modify-write and WCR accumulations (sum, max, min, prod; scalar and array targets),
conditionals inside maps, nested maps, maps inside loops, triangular ranges, and index arrays:
gathers (``x[idx[i]]``, ``A[i, idx[i]]``), scatters (``A[i, idx[i]] = v``, ``y[perm[i]] = v``), a one-hot
matrix multiplied afterwards (a k-means step) and a histogram (``h[idx[i]] += 1``). Sizes are odd so
that grids split them unevenly. Each entry's reference returns ``(result, {array: final value})``
like ``fuzz_corpus``, which adds these entries to its ``CORPUS``. (No ``from __future__``: DaCe
reads the annotations.)
"""
import dace
import numpy as np

__all__ = ["MAP_CASES"]


def Case(name, prog, inputs, reference):
    """An entry, made a ``fuzz_corpus.Case`` there (this module is imported by it)."""
    return name, prog, inputs, reference


@dace.program
def map_rmw_max(X: dace.float64[7, 10], Y: dace.float64[10, 5], Z: dace.float64[7, 5]):
    for i, j, k in dace.map[0:7, 0:10, 0:5]:
        Z[i, k] = max(Z[i, k], abs(X[i, j] - Y[j, k]))


@dace.program
def map_rmw_sum(X: dace.float64[7, 10], Y: dace.float64[10, 5], Z: dace.float64[7, 5]):
    for i, j, k in dace.map[0:7, 0:10, 0:5]:
        Z[i, k] = Z[i, k] + X[i, j] * Y[j, k]


@dace.program
def map_aug_scalar(x: dace.float64[10, 7], s: dace.float64[1]):
    for i, j in dace.map[0:10, 0:7]:
        s[0] += x[i, j] * x[i, j]


@dace.program
def map_wcr_min_array(x: dace.float64[10, 7], m: dace.float64[7]):
    for i, j in dace.map[0:10, 0:7]:
        with dace.tasklet:
            a << x[i, j]
            o >> m(1, lambda u, v: min(u, v))[j]
            o = a


@dace.program
def map_wcr_prod_array(x: dace.float64[9, 5], p: dace.float64[9]):
    for i, j in dace.map[0:9, 0:5]:
        with dace.tasklet:
            a << x[i, j]
            o >> p(1, lambda u, v: u * v)[i]
            o = a


@dace.program
def map_wcr_max_i32(x: dace.int32[11, 6], m: dace.int32[1]):
    for i, j in dace.map[0:11, 0:6]:
        with dace.tasklet:
            a << x[i, j]
            o >> m(1, lambda u, v: max(u, v))[0]
            o = a


@dace.program
def map_cond(x: dace.float64[33], y: dace.float64[33]):
    for i in dace.map[0:33]:
        if x[i] > 0.5:
            y[i] = 2.0 * x[i]
        else:
            y[i] = -x[i]


@dace.program
def map_cond_acc(data: dace.float64[31], mask: dace.bool_[31], res: dace.float64[2]):
    tmp = 0.0
    count = 0
    for j in dace.map[0:31]:
        if mask[j]:
            tmp += data[j]
            count += 1
    res[0] = tmp
    res[1] = count


@dace.program
def map_nested(A: dace.float64[10, 7], B: dace.float64[10, 7]):
    for i in dace.map[0:10]:
        for j in dace.map[0:7]:
            B[i, j] = 2.0 * A[i, j] + A[i, 6 - j]


@dace.program
def map_nested_rowsum(A: dace.float64[10, 7], r: dace.float64[10]):
    for i in dace.map[0:10]:
        for j in dace.map[0:7]:
            r[i] += A[i, j]


@dace.program
def map_in_loop(A: dace.float64[33], B: dace.float64[33]):
    for t in range(3):
        for i in dace.map[1:32]:
            B[i] = (A[i - 1] + A[i] + A[i + 1]) / 3.0
        for i in dace.map[1:32]:
            A[i] = B[i]


@dace.program
def map_triangular(A: dace.float64[10, 10], L: dace.float64[10, 10]):
    for i in dace.map[0:10]:
        for j in dace.map[0:i + 1]:
            L[i, j] = 2.0 * A[i, j]


@dace.program
def map_gather(x: dace.float64[33], idx: dace.int64[20], y: dace.float64[20]):
    for i in dace.map[0:20]:
        y[i] = x[idx[i]]


@dace.program
def map_loop_acc(data: dace.float64[29], lo: dace.float64[3], hi: dace.float64[3]):
    for b in range(3):
        top = -1.0e300
        low = 1.0e300
        for j in dace.map[0:29]:
            if data[j] >= b / 3.0 and data[j] < (b + 1) / 3.0:
                top = max(top, data[j])
                low = min(low, data[j])
        lo[b] = low
        hi[b] = top


@dace.program
def map_onehot_sums(a: dace.int64[23], X: dace.float64[23, 3]):
    onehot = np.zeros((23, 5), dtype=np.float64)
    for i in dace.map[0:23]:
        onehot[i, a[i]] = 1.0
    return np.transpose(onehot) @ X


@dace.program
def map_conditional_onehot(labels: dace.int64[23], X: dace.float64[23, 3]):
    onehot = np.zeros((23, 5), dtype=np.float64)
    for i, k in dace.map[0:23, 0:5]:
        if labels[i] == k:
            onehot[i, k] = 1.0
    return np.transpose(onehot) @ X


@dace.program
def map_scatter_rows(idx: dace.int64[11], v: dace.float64[11], A: dace.float64[11, 6]):
    for i in dace.map[0:11]:
        A[i, idx[i]] = v[i]


@dace.program
def map_scatter_perm(x: dace.float64[17], perm: dace.int64[17], y: dace.float64[17]):
    for i in dace.map[0:17]:
        y[perm[i]] = 2.0 * x[i]


@dace.program
def map_gather_rows(A: dace.float64[13, 7], idx: dace.int64[13], y: dace.float64[13]):
    for i in dace.map[0:13]:
        y[i] = A[i, idx[i]] + 1.0


@dace.program
def map_histogram(idx: dace.int64[29], h: dace.int64[6]):
    for i in dace.map[0:29]:
        h[idx[i]] += 1


@dace.program
def _max_into(X: dace.float64[13, 5], r: dace.float64[1]):
    dace.reduce(lambda a, b: max(a, b), X, out_array=r)


@dace.program
def nested_reduce_max(X: dace.float64[13, 5], out: dace.float64[1]):
    _max_into(X, out)


def _dist(X, Y):
    return np.abs(X[:, :, None] - Y[None, :, :])


def _rows(data, b):
    return data[(data >= b / 3.0) & (data < (b + 1) / 3.0)]


def _tri(A, L):
    L = L.copy()
    t = np.tril(np.ones_like(A, dtype=bool))
    L[t] = 2.0 * A[t]
    return None, {"L": L}


def _loop(A, B):
    A, B = A.copy(), B.copy()
    for _ in range(3):
        B[1:-1] = (A[:-2] + A[1:-1] + A[2:]) / 3.0
        A[1:-1] = B[1:-1]
    return None, {"A": A, "B": B}


def _xyz(r):
    return {"X": r.random((7, 10)), "Y": r.random((10, 5)), "Z": r.random((7, 5))}


def _binned(r):
    d = r.random(29)
    d[:3] = [0.1, 0.5, 0.9]       # every bin has an element
    return {"data": d, "lo": np.zeros(3), "hi": np.zeros(3)}


def _onehot(a, X):
    o = np.zeros((len(a), 5))
    o[np.arange(len(a)), a] = 1.0
    return o.T @ X, {}


def _scatter_rows(idx, v, A):
    A = A.copy()
    A[np.arange(len(idx)), idx] = v
    return None, {"A": A}


def _put(y, perm, vals):
    y = y.copy()
    y[perm] = vals
    return y


def _histogram(idx, h):
    return None, {"h": h + np.bincount(idx, minlength=len(h))}


MAP_CASES = [
    Case("map_rmw_max", map_rmw_max, _xyz, lambda X, Y, Z: (None, {"Z": np.maximum(Z, _dist(X, Y).max(axis=1))})),
    Case("map_rmw_sum", map_rmw_sum, _xyz, lambda X, Y, Z: (None, {"Z": Z + X @ Y})),
    Case("map_aug_scalar", map_aug_scalar, lambda r: {"x": r.random((10, 7)), "s": np.array([0.5])},
         lambda x, s: (None, {"s": s + (x * x).sum()})),
    Case("map_wcr_min_array", map_wcr_min_array, lambda r: {"x": r.random((10, 7)), "m": r.random(7)},
         lambda x, m: (None, {"m": np.minimum(m, x.min(axis=0))})),
    Case("map_wcr_prod_array", map_wcr_prod_array, lambda r: {"x": 0.5 + r.random((9, 5)), "p": 0.5 + r.random(9)},
         lambda x, p: (None, {"p": p * x.prod(axis=1)})),
    Case("map_wcr_max_i32", map_wcr_max_i32,
         lambda r: {"x": r.integers(-500, 500, (11, 6)).astype(np.int32), "m": np.array([-7], np.int32)},
         lambda x, m: (None, {"m": np.maximum(m, x.max())})),
    Case("map_cond", map_cond, lambda r: {"x": r.random(33), "y": r.random(33)},
         lambda x, y: (None, {"y": np.where(x > 0.5, 2.0 * x, -x)})),
    Case("map_cond_acc", map_cond_acc, lambda r: {"data": r.random(31), "mask": r.random(31) > 0.4,
                                                  "res": np.zeros(2)},
         lambda data, mask, res: (None, {"res": np.array([data[mask].sum(), mask.sum()])})),
    Case("map_nested", map_nested, lambda r: {"A": r.random((10, 7)), "B": r.random((10, 7))},
         lambda A, B: (None, {"B": 2.0 * A + A[:, ::-1]})),
    Case("map_nested_rowsum", map_nested_rowsum, lambda r: {"A": r.random((10, 7)), "r": r.random(10)},
         lambda A, r: (None, {"r": r + A.sum(axis=1)})),
    Case("map_in_loop", map_in_loop, lambda r: {"A": r.random(33), "B": r.random(33)}, _loop),
    Case("map_triangular", map_triangular, lambda r: {"A": r.random((10, 10)), "L": r.random((10, 10))}, _tri),
    Case("map_gather", map_gather, lambda r: {"x": r.random(33), "idx": r.integers(0, 33, 20).astype(np.int64),
                                              "y": r.random(20)},
         lambda x, idx, y: (None, {"y": x[idx]})),
    Case("map_loop_acc", map_loop_acc, _binned,
         lambda data, lo, hi: (None, {"lo": np.array([_rows(data, b).min() for b in range(3)]),
                                      "hi": np.array([_rows(data, b).max() for b in range(3)])})),
    Case("map_onehot_sums", map_onehot_sums,
         lambda r: {"a": r.integers(0, 5, 23).astype(np.int64), "X": r.random((23, 3))}, _onehot),
    Case("map_conditional_onehot", map_conditional_onehot,
         lambda r: {"labels": r.integers(0, 5, 23).astype(np.int64), "X": r.random((23, 3))},
         lambda labels, X: _onehot(labels, X)),
    Case("map_scatter_rows", map_scatter_rows, lambda r: {"idx": r.integers(0, 6, 11).astype(np.int64),
                                                          "v": r.random(11), "A": r.random((11, 6))}, _scatter_rows),
    Case("map_scatter_perm", map_scatter_perm, lambda r: {"x": r.random(17), "perm": r.permutation(17).astype(np.int64),
                                                          "y": r.random(17)},
         lambda x, perm, y: (None, {"y": _put(y, perm, 2.0 * x)})),
    Case("map_gather_rows", map_gather_rows, lambda r: {"A": r.random((13, 7)), "idx": r.integers(0, 7, 13).astype(
        np.int64), "y": r.random(13)}, lambda A, idx, y: (None, {"y": A[np.arange(13), idx] + 1.0})),
    Case("map_histogram", map_histogram, lambda r: {"idx": r.integers(0, 6, 29).astype(np.int64),
                                                    "h": r.integers(0, 3, 6).astype(np.int64)}, _histogram),
    # A library Reduce without identity in a nested program (DaCe's own NumPy-frontend tests): it
    # reduces into the output's current value
    Case("nested_reduce_max", nested_reduce_max, lambda r: {"X": r.random((13, 5)) - 2.0,
                                                            "out": np.array([r.choice([-5.0, -1.5])])},
         lambda X, out: (None, {"out": np.maximum(out, X.max())})),
]
