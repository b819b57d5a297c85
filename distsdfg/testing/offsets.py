"""Programs whose kernels read at other indices than they write (found by hK's sweep of fresh
programs, 2026-11-25), each with a NumPy reference: a transposed read beside a direct one
(``sym_lower``: DaCe's union of the two images took a rank's symbolic bound for the larger one),
reads at a stride (``strided_pick``: DaCe's image of ``A[2 * i]`` lost its step) and shifted slices
(``shifted_stencil``: a kernel left on rank 0 alone scattered with a null send buffer).
"""
import dace
import numpy as np

from .program import Program

__all__ = ["OFFSETS"]


@dace.program
def sym_lower(A: dace.float64[30, 30]):
    C = np.zeros((30, 30))
    for i, j in dace.map[0:30, 0:30]:
        if j <= i:
            C[i, j] = A[i, j] + A[j, i]
    return C


@dace.program
def strided_pick(A: dace.float64[101], B: dace.float64[101]):
    C = np.empty([50], dtype=np.float64)
    for i in dace.map[0:50]:
        C[i] = A[2 * i] + 3.0 * B[2 * i + 1]
    return C


@dace.program
def shifted_stencil(A: dace.float64[29, 31]):
    out = np.zeros_like(A)
    out[2:-1, 1:-2] = 0.5 * A[0:-3, 1:-2] + A[3:, 2:-1] - A[2:-1, 0:-3]
    return out


def _shifted_stencil_ref(A):
    out = np.zeros_like(A)
    out[2:-1, 1:-2] = 0.5 * A[0:-3, 1:-2] + A[3:, 2:-1] - A[2:-1, 0:-3]
    return out


OFFSETS = {p.name: p for p in [
    Program("sym_lower", sym_lower, lambda r: {"A": r.random((30, 30))}, lambda A: np.tril(A + A.T)),
    Program("strided_pick", strided_pick, lambda r: {"A": r.random(101), "B": r.random(101)},
            lambda A, B: A[0:100:2] + 3.0 * B[1:101:2]),
    Program("shifted_stencil", shifted_stencil, lambda r: {"A": r.random((29, 31))}, _shifted_stencil_ref),
]}
