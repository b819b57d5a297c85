"""Programs found by hQ's sweep of npbench-style kernels (round 2, 2026-11-25), each with a NumPy
reference: a library node left on rank 0 that reads a map's result through a reshape view
(``weighted_product``: the view's reads did not count as a use of the array, so the map's blocks
were never gathered and the einsum read an unwritten transient: zeros); matrix-vector products whose
contraction is split so that each rank holds one index (``short_matvec``, ``short_vecmat``: DaCe's
MatMul expansion squeezed the vector block ``(1,)`` to a scalar and refused to compile, "Output of dot
product must be a single element", also under the planner's own schedule); a complex scalar argument
(``complex_scalar``: DaCe 1.0.2 passes it as a ``long double``, wrong results with DaCe alone too) is
refused by name, and its one-element-array form (``complex_factor``) runs.
"""
import dace
import numpy as np

from .program import Program

__all__ = ["ROUND2"]


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
def complex_scalar(H: dace.complex128[5, 5], s: dace.complex128):
    return H * s


@dace.program
def complex_factor(H: dace.complex128[5, 5], s: dace.complex128[1]):
    return H * s[0]


def _complex(g, *shape):
    return g.random(shape) + 1j * g.random(shape)


ROUND2 = {p.name: p for p in [
    Program("weighted_product", weighted_product,
            lambda g: {"G": _complex(g, 4, 6, 6), "D": _complex(g, 4, 6, 6), "w": _complex(g, 4)},
            lambda G, D, w: np.einsum('kij,k->ij', G * D, w)),
    Program("complex_factor", complex_factor, lambda g: {"H": _complex(g, 5, 5), "s": np.array([0.3 + 0.7j])},
            lambda H, s: H * s[0]),
    Program("short_matvec", short_matvec, lambda g: {"A": g.random((3, 2)), "p": g.random(2)}, lambda A, p: A @ p),
    Program("short_vecmat", short_vecmat, lambda g: {"r": g.random(2), "A": g.random((2, 3))}, lambda r, A: r @ A),
]}
