"""The fuzzer's corpus: small NumPy kernels with odd sizes, several dtypes, and their references.

Each entry's ``reference(**inputs)`` returns ``(result, {array: value})``: the program's return
value and the final values of arrays it updates in place. (No ``from __future__`` here: DaCe
reads the annotations.)
"""
import dataclasses
from typing import Callable, Dict, Tuple

import dace
import numpy as np

__all__ = ["Case", "CORPUS", "BASE"]

FN = dace.symbol("FN")


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    prog: object
    inputs: Callable[[np.random.Generator], Dict[str, np.ndarray]]
    reference: Callable[..., Tuple[object, Dict[str, np.ndarray]]]
    symbols: Tuple[Tuple[str, int], ...] = ()


@dace.program
def ew_broadcast(x: dace.float64[10, 7], y: dace.float64[7]):
    return x * y + 1.0


@dace.program
def ew_chain_f32(x: dace.float32[33]):
    return np.sqrt(x * x + 1.0) - x


@dace.program
def sum_axis0(x: dace.float64[10, 7]):
    return np.add.reduce(x, axis=0)


@dace.program
def max_axis1(x: dace.float64[7, 10]):
    return np.maximum.reduce(x, axis=1)


@dace.program
def min_axis0_i32(x: dace.int32[9, 6]):
    return np.minimum.reduce(x, axis=0)


@dace.program
def prod_axis1(x: dace.float64[6, 5]):
    return np.multiply.reduce(x, axis=1)


@dace.program
def matmul_odd(A: dace.float64[10, 7], B: dace.float64[7, 33]):
    return A @ B


@dace.program
def matmul_f32(A: dace.float32[33, 10], B: dace.float32[10, 7]):
    return A @ B


@dace.program
def einsum_batched(A: dace.float64[3, 5, 7], B: dace.float64[3, 7, 4]):
    return np.einsum('bij,bjk->bik', A, B)


@dace.program
def einsum_transposed(A: dace.float64[7, 10], B: dace.float64[7, 6]):
    return np.einsum('ji,jk->ik', A, B)


@dace.program
def inplace_add(A: dace.float64[10, 7], B: dace.float64[10, 7]):
    A[:] += B


@dace.program
def slice_offsets(x: dace.float64[33]):
    return x[2:-1] * 2.0 + x[1:-2]


@dace.program
def stencil_1d(A: dace.float64[33], B: dace.float64[33]):
    B[1:-1] = (A[:-2] + A[1:-1] + A[2:]) / 3.0


@dace.program
def scalar_sum(x: dace.float64[10, 7]):
    return np.sum(x)


@dace.program
def int64_ew(x: dace.int64[33]):
    return x * 3 - 1


@dace.program
def symbolic_square(x: dace.float64[FN]):
    return x * x


@dace.program
def matvec_f32(A: dace.float32[10, 33], x: dace.float32[33]):
    return A @ x


@dace.program
def softmax_small(x: dace.float64[3, 5, 7]):
    m = np.maximum.reduce(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / np.add.reduce(e, axis=-1, keepdims=True)


@dace.program
def chain_reduce(x: dace.float64[10, 7], y: dace.float64[10, 7]):
    t = (x + 1.0) * y
    return np.add.reduce(t, axis=1)


@dace.program
def mlp_small(x: dace.float64[10, 6], W1: dace.float64[6, 9], W2: dace.float64[9, 4]):
    return np.maximum(x @ W1, 0.0) @ W2


def _f(*shape, dtype=np.float64):
    return lambda r: r.random(shape).astype(dtype)


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _stencil(A, B):
    B = B.copy()
    B[1:-1] = (A[:-2] + A[1:-1] + A[2:]) / 3.0
    return None, {"B": B}


CORPUS: Dict[str, Case] = {c.name: c for c in [
    Case("ew_broadcast", ew_broadcast, lambda r: {"x": r.random((10, 7)), "y": r.random(7)},
         lambda x, y: (x * y + 1.0, {})),
    Case("ew_chain_f32", ew_chain_f32, lambda r: {"x": r.random(33).astype(np.float32)},
         lambda x: (np.sqrt(x * x + np.float32(1.0)) - x, {})),
    Case("sum_axis0", sum_axis0, lambda r: {"x": r.random((10, 7))}, lambda x: (x.sum(axis=0), {})),
    Case("max_axis1", max_axis1, lambda r: {"x": r.random((7, 10)) - 0.5}, lambda x: (x.max(axis=1), {})),
    Case("min_axis0_i32", min_axis0_i32, lambda r: {"x": r.integers(-50, 50, (9, 6)).astype(np.int32)},
         lambda x: (x.min(axis=0), {})),
    Case("prod_axis1", prod_axis1, lambda r: {"x": 0.5 + r.random((6, 5))}, lambda x: (x.prod(axis=1), {})),
    Case("matmul_odd", matmul_odd, lambda r: {"A": r.random((10, 7)), "B": r.random((7, 33))},
         lambda A, B: (A @ B, {})),
    Case("matmul_f32", matmul_f32, lambda r: {"A": r.random((33, 10)).astype(np.float32),
                                               "B": r.random((10, 7)).astype(np.float32)},
         lambda A, B: (A @ B, {})),
    Case("einsum_batched", einsum_batched, lambda r: {"A": r.random((3, 5, 7)), "B": r.random((3, 7, 4))},
         lambda A, B: (np.einsum('bij,bjk->bik', A, B), {})),
    Case("einsum_transposed", einsum_transposed, lambda r: {"A": r.random((7, 10)), "B": r.random((7, 6))},
         lambda A, B: (A.T @ B, {})),
    Case("inplace_add", inplace_add, lambda r: {"A": r.random((10, 7)), "B": r.random((10, 7))},
         lambda A, B: (None, {"A": A + B})),
    Case("slice_offsets", slice_offsets, lambda r: {"x": r.random(33)}, lambda x: (x[2:-1] * 2.0 + x[1:-2], {})),
    Case("stencil_1d", stencil_1d, lambda r: {"A": r.random(33), "B": r.random(33)}, _stencil),
    Case("scalar_sum", scalar_sum, lambda r: {"x": r.random((10, 7))}, lambda x: (np.sum(x), {})),
    Case("int64_ew", int64_ew, lambda r: {"x": r.integers(-1000, 1000, 33).astype(np.int64)},
         lambda x: (x * 3 - 1, {})),
    Case("symbolic_square", symbolic_square, lambda r: {"x": r.random(33)}, lambda x: (x * x, {}), (("FN", 33),)),
    Case("matvec_f32", matvec_f32, lambda r: {"A": r.random((10, 33)).astype(np.float32),
                                               "x": r.random(33).astype(np.float32)},
         lambda A, x: (A @ x, {})),
    Case("softmax_small", softmax_small, lambda r: {"x": r.random((3, 5, 7))}, lambda x: (_softmax(x), {})),
    Case("chain_reduce", chain_reduce, lambda r: {"x": r.random((10, 7)), "y": r.random((10, 7))},
         lambda x, y: (((x + 1.0) * y).sum(axis=1), {})),
    Case("mlp_small", mlp_small, lambda r: {"x": r.random((10, 6)) - 0.5, "W1": r.random((6, 9)) - 0.5,
                                             "W2": r.random((9, 4)) - 0.5},
         lambda x, W1, W2: (np.maximum(x @ W1, 0.0) @ W2, {})),
]}

#: The first corpus: the fixed CI sample and the recorded regressions draw from it, so
#: that their seeds keep naming the same cases.
BASE = tuple(sorted(CORPUS))

# Hand-written ``dace.map`` kernels (read-modify-write, WCR, branches, nests, loops, gathers).
from .fuzz_maps import MAP_CASES  # noqa: E402

CORPUS.update({name: Case(name, prog, inputs, ref) for name, prog, inputs, ref in MAP_CASES})
