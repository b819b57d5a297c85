"""NPBench-style kernels that once failed or gave wrong results, each with a NumPy reference: a library node left on rank 0 that reads a map's result through a reshape view
(``weighted_product``: the view's reads did not count as a use of the array, so the map's blocks
were never gathered and the einsum read an unwritten transient: zeros); matrix-vector products whose
contraction is split so that each rank holds one index (``short_matvec``, ``short_vecmat``: DaCe's
MatMul expansion squeezed the vector block ``(1,)`` to a scalar and refused to compile, "Output of dot
product must be a single element", also under the planner's own schedule); a complex scalar argument
(``complex_scalar``: DaCe 1.0.2 passes it as a ``long double``, wrong results with DaCe alone too) was
refused by name at first; the lowering makes it a one-element array (``dace_compat.scalars``) and the
call passes the caller's number as one, so it runs like its array form (``complex_factor``).

``pair_differences`` (an n-body acceleration as NumPy users write it, ``x = pos[:, 0:1]``,
``x.T - x``): DaCe 1.0.2's parser squeezed the slice ``0:1`` like an index, so ``x.T - x`` was
``(N,) - (N,)``, all zeros, with DaCe alone too (``dace_compat.slices``).

``standard_scores`` (column z-scores clipped, scaled by a norm): ``np.std``, ``np.var``, ``np.clip``
and ``np.linalg.norm`` were Python callbacks in DaCe 1.0.2, refused by ``lower``; they are maps and
reductions since ``dace_compat.npfuncs``. ``array_functions``: ``np.cumsum``, ``np.diff``, ``np.tril``,
``np.outer``, ``np.trace``, ``np.argmax``, ``a.sum(axis=1)``, ``np.prod``, ``np.any``, ``np.count_nonzero``,
``np.ptp``, ``np.round`` were callbacks or refused (``dace_compat.nparrays``, ``dace_compat.npfuncs``).
"""
import dace
import numpy as np

from .program import Program

N = dace.symbol("N")

__all__ = ["SWEEP_NPBENCH"]


@dace.program
def weighted_product(G: dace.complex128[4, 6, 6], D: dace.complex128[4, 6, 6], w: dace.complex128[4]):
    return np.einsum('kij,k->ij', G * D, w)


@dace.program
def short_matvec(A: dace.float64[3, 2], p: dace.float64[2]):
    return A @ p


@dace.program
def short_vecmat(r: dace.float64[2], A: dace.float64[2, 3]):
    return r @ A


@dace.program
def pair_differences(pos: dace.float64[N, 3], mass: dace.float64[N]):
    x = pos[:, 0:1]
    y = pos[:, 1:2]
    dx = x.T - x
    dy = y.T - y
    inv = (dx ** 2 + dy ** 2 + 0.01) ** (-1.5)
    return (dx * inv) @ mass + (dy * inv) @ mass + np.sum(pos - pos[:, 2:3], axis=1)


def _pair_differences(pos, mass):
    x, y = pos[:, 0:1], pos[:, 1:2]
    dx, dy = x.T - x, y.T - y
    inv = (dx ** 2 + dy ** 2 + 0.01) ** (-1.5)
    return (dx * inv) @ mass + (dy * inv) @ mass + np.sum(pos - pos[:, 2:3], axis=1)


@dace.program
def complex_scalar(H: dace.complex128[5, 5], s: dace.complex128):
    return H * s


@dace.program
def complex_factor(H: dace.complex128[5, 5], s: dace.complex128[1]):
    return H * s[0]


@dace.program
def standard_scores(A: dace.float64[N, 5]):
    z = (A - np.mean(A, axis=0)) / np.std(A, axis=0)
    r = np.clip(z, -1.2, 1.2)
    return r / np.linalg.norm(r) + np.var(A, axis=1)[0] + np.linalg.norm(A[0], np.inf)


def _standard_scores(A):
    r = np.clip((A - np.mean(A, axis=0)) / np.std(A, axis=0), -1.2, 1.2)
    return r / np.linalg.norm(r) + np.var(A, axis=1)[0] + np.linalg.norm(A[0], np.inf)


@dace.program
def array_functions(A: dace.float64[N, 6], v: dace.float64[6]):
    c = np.cumsum(A, axis=1) + np.cumsum(A, axis=0) * 0.5 + np.tril(A) - np.triu(A, 2)
    d = np.diff(A, axis=1)[:, 0:1] + np.outer(A[:, 0], v) + np.trace(A[0:6, :]) + np.argmax(v) + np.argmin(A, axis=0)
    e = A.sum(axis=1)[0] + np.prod(A * 0.2 + 0.9, axis=0) + np.count_nonzero(A > 0.5, axis=0) + np.ptp(A, axis=0)
    return c + d + e + np.round(A * 100.0) + np.any(A > 0.99, axis=0)


def _array_functions(A, v):
    c = np.cumsum(A, axis=1) + np.cumsum(A, axis=0) * 0.5 + np.tril(A) - np.triu(A, 2)
    d = np.diff(A, axis=1)[:, 0:1] + np.outer(A[:, 0], v) + np.trace(A[0:6, :]) + np.argmax(v) + np.argmin(A, axis=0)
    e = A.sum(axis=1)[0] + np.prod(A * 0.2 + 0.9, axis=0) + np.count_nonzero(A > 0.5, axis=0) + np.ptp(A, axis=0)
    return c + d + e + np.round(A * 100.0) + np.any(A > 0.99, axis=0)


def _complex(g, *shape):
    return g.random(shape) + 1j * g.random(shape)


SWEEP_NPBENCH = {p.name: p for p in [
    Program("weighted_product", weighted_product,
            lambda g: {"G": _complex(g, 4, 6, 6), "D": _complex(g, 4, 6, 6), "w": _complex(g, 4)},
            lambda G, D, w: np.einsum('kij,k->ij', G * D, w)),
    Program("complex_factor", complex_factor, lambda g: {"H": _complex(g, 5, 5), "s": np.array([0.3 + 0.7j])},
            lambda H, s: H * s[0]),
    Program("complex_scalar", complex_scalar, lambda g: {"H": _complex(g, 5, 5), "s": 0.3 + 0.7j},
            lambda H, s: H * s),
    Program("pair_differences", pair_differences, lambda g: {"pos": g.random((13, 3)), "mass": g.random(13) + 0.5},
            _pair_differences, (("N", 13),)),
    Program("standard_scores", standard_scores, lambda g: {"A": g.standard_normal((11, 5))}, _standard_scores,
            (("N", 11),)),
    Program("array_functions", array_functions, lambda g: {"A": g.random((9, 6)), "v": g.random(6)},
            _array_functions, (("N", 9),)),
    Program("short_matvec", short_matvec, lambda g: {"A": g.random((3, 2)), "p": g.random(2)}, lambda A, p: A @ p),
    Program("short_vecmat", short_vecmat, lambda g: {"r": g.random(2), "A": g.random((2, 3))}, lambda r, A: r @ A),
]}
