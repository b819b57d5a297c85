"""Fresh NumPy programs that once failed or gave wrong results, each with a NumPy reference. Three were silently wrong with DaCe 1.0.2 alone, and so under distsdfg:

* ``nested_column``: a nested ``@dace.program`` called with a column of width one
  (``inner(A[:, 1:2], ...)``, parameter ``[N, 1]``) got the parameter's contiguous strides
  ``(1, 1)`` instead of the column's ``(M, 1)``, so it read consecutive elements of the row
  (``dace_compat.slices``: the argument's strides).
* ``floor_mod``: ``a // 7`` and ``a % b`` of int64 arrays with negative entries used C's truncating
  division and remainder; ``np.sum(A > 0.5, axis=0)`` (counts) came out as booleans and
  ``np.mean`` of an int64 array as an integer (``dace_compat.pyops``).

and two failed: ``any_column`` (``np.max`` of a boolean array split along the reduced axis, so
ranks combine partial results: MPI refuses ``MPI_MAX`` on ``MPI_C_BOOL``, "Invalid MPI_Op"; the
runtime now uses the logical operators for booleans) and ``small_transpose`` (``A.T @ y`` with ``A``
of ``(2, 3)`` split by rows: the ranks' ``(1, 3)`` blocks made DaCe's ``Transpose`` node invalid,
"Transpose operation only supported on matrices"; it is now a copy map,
``dace_compat.matmul.degenerate_transposes_to_maps``).
"""
import dace
import numpy as np

from .program import Program

N = dace.symbol("N")
M = dace.symbol("M")

__all__ = ["SWEEP_NUMPY"]


@dace.program
def scaled_column(x: dace.float64[N, 1], y: dace.float64[N, 1]):
    y[:] = x * 2.0 + x[0:1, :]


@dace.program
def nested_column(A: dace.float64[N, M], out: dace.float64[N, M]):
    scaled_column(A[:, 1:2], out[:, 3:4])
    out[:, 0:3] = A[:, 0:3] * 0.5


def _nested_column(A, out):
    out = out.copy()
    out[:, 3:4] = A[:, 1:2] * 2.0 + A[0:1, 1:2]
    out[:, 0:3] = A[:, 0:3] * 0.5
    return {"out": out}


@dace.program
def floor_mod(a: dace.int64[13, 7], b: dace.int64[13, 7], x: dace.float64[13, 7]):
    return (a // 7 + a % b) * 1000.0 + np.sum(x > 0.5, axis=0) + np.mean(a, axis=1)[:, np.newaxis] + x % 0.3


def _floor_mod(a, b, x):
    return (a // 7 + a % b) * 1000.0 + np.sum(x > 0.5, axis=0) + np.mean(a, axis=1)[:, np.newaxis] + x % 0.3


@dace.program
def any_column(A: dace.float64[12, 5]):
    return np.max(A > 0.9, axis=0), np.min(A > 0.05, axis=0)


@dace.program
def small_transpose(A: dace.float64[2, 3], y: dace.float64[2]):
    return A.T @ y


SWEEP_NUMPY = {p.name: p for p in [
    Program("nested_column", nested_column, lambda g: {"A": g.random((13, 11)), "out": np.zeros((13, 11))},
            _nested_column, (("N", 13), ("M", 11)), outputs=("out",)),
    Program("floor_mod", floor_mod, lambda g: {"a": g.integers(-50, 50, (13, 7)),
                                               "b": g.choice([-7, -3, -1, 2, 5, 9], (13, 7)),
                                               "x": g.random((13, 7)) * 10 - 5}, _floor_mod),
    Program("any_column", any_column, lambda g: {"A": g.random((12, 5))},
            lambda A: (np.max(A > 0.9, axis=0), np.min(A > 0.05, axis=0))),
    Program("small_transpose", small_transpose, lambda g: {"A": g.random((2, 3)), "y": g.random(2)},
            lambda A, y: A.T @ y),
]}
