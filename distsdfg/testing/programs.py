"""Sample programs (the thesis' examples and more), each with a NumPy reference and input maker."""

import dataclasses
from typing import Callable, Dict, Tuple

import dace
import numpy as np

__all__ = ["Program", "PROGRAMS", "get"]

M, N, K = (dace.symbol(s) for s in ("M", "N", "K"))
SM, SN, NNZ = (dace.symbol(s) for s in ("SM", "SN", "NNZ"))


@dataclasses.dataclass(frozen=True)
class Program:
    name: str
    prog: object                              # the @dace.program
    inputs: Callable[[np.random.Generator], Dict[str, np.ndarray]]
    reference: Callable[..., object]
    symbols: Tuple[Tuple[str, int], ...] = ()

    def sdfg(self):
        sd = self.prog.to_sdfg()
        return sd


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


def _csr(rng, m=64, n=48, density=0.15):
    dense = rng.random((m, n)) * (rng.random((m, n)) < density)
    rows, cols = np.nonzero(dense)
    vals = dense[rows, cols].astype(np.float64)
    indptr = np.zeros(m + 1, dtype=np.uint32)
    np.add.at(indptr, rows + 1, 1)
    indptr = np.cumsum(indptr).astype(np.uint32)
    return {"A_row": indptr, "A_col": cols.astype(np.uint32), "A_val": np.ascontiguousarray(vals),
            "x": rng.random(n)}


def _spmv_ref(A_row, A_col, A_val, x):
    out = np.zeros(len(A_row) - 1)
    for i in range(len(A_row) - 1):
        s, e = A_row[i], A_row[i + 1]
        out[i] = A_val[s:e] @ x[A_col[s:e]]
    return out


def _softmax_ref(inp):
    e = np.exp(inp - inp.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


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
    Program("add_odd", add_odd, lambda r: {"x": r.random((10, 7)), "y": r.random((10, 7))}, lambda x, y: x * y + 1.0),
]}


def get(name: str) -> Program:
    return PROGRAMS[name]
