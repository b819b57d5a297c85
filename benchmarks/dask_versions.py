"""Dask versions of the workloads: NumPy inputs in, a NumPy result out, on the active client.

The arrays are chunked into ``P`` row blocks (the leading axes for softmax and attention),
the other operands kept whole, so Dask runs the same row-parallel algorithm as the
hand-written version; its scheduler moves the chunks between the worker processes.
"""
from __future__ import annotations

import math
from typing import Callable, Dict

import numpy as np

from .handwritten import blocks
from .workloads import spmv_ref

__all__ = ["VERSIONS"]


def _rows(a: np.ndarray, parts: int):
    import dask.array as da
    return da.from_array(a, chunks=(math.ceil(a.shape[0] / parts),) + a.shape[1:])


def _whole(a: np.ndarray):
    import dask.array as da
    return da.from_array(a, chunks=a.shape)


def matmul(P, A, B):
    return (_rows(A, P) @ _whole(B)).compute()


def matrix_chain(P, A, B, C, D, E):
    return ((_rows(A, P) @ _whole(B)) + (_rows(C, P) @ (_whole(D) @ _rows(E, P)))).compute()


def softmax(P, inp):
    import dask.array as da
    x = da.from_array(inp, chunks=(math.ceil(inp.shape[0] / P),) + inp.shape[1:])
    if inp.shape[0] < P:     # too few batches: split the heads as well
        x = x.rechunk((1, math.ceil(inp.shape[1] * inp.shape[0] / P)) + inp.shape[2:])
    e = da.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).compute()


def mlp(P, x, W1, b1, W2, b2):
    import dask.array as da
    h = da.maximum(_rows(x, P) @ _whole(W1) + b1, 0.0)
    return (h @ _whole(W2) + b2).compute()


def megatron(P, x, WQ, WK, WV, WO, W1):
    import dask.array as da
    X = _rows(x, P)
    Q = da.einsum('bik,khj->bhij', X, _whole(WQ))
    KT = da.einsum('bik,khj->bhji', X, _whole(WK))
    V = da.einsum('bik,khj->bhij', X, _whole(WV))
    s = da.einsum('bhik,bhkj->bhij', Q, KT) / np.float32(4.0)
    e = da.exp(s - s.max(axis=-1, keepdims=True))
    vals = da.einsum('bhik,bhkj->bhij', e / e.sum(axis=-1, keepdims=True), V)
    out = da.einsum('bhse,hej->bsj', vals, _whole(WO))
    return da.einsum('bsj,jf->bsf', out, _whole(W1)).compute()


def elementwise(P, x, y):
    import dask.array as da
    X, Y = _rows(x, P), _rows(y, P)
    return (da.exp((X * Y + 2.0) * -0.5) * X - Y).compute()


def spmv(P, A_row, A_col, A_val, x):
    """Dask has no sparse CSR array: one delayed task per block of rows."""
    import dask
    parts = blocks(len(A_row) - 1, P)
    xs = dask.delayed(x)
    tasks = []
    for lo, hi in parts:
        a, b = int(A_row[lo]), int(A_row[hi])
        tasks.append(dask.delayed(spmv_ref)(A_row[lo:hi + 1] - A_row[lo], A_col[a:b], A_val[a:b], xs))
    return np.concatenate(dask.compute(*tasks))


VERSIONS: Dict[str, Callable] = {
    "matmul_square": matmul, "matmul_skewed": matmul, "matrix_chain": matrix_chain, "softmax": softmax,
    "mlp": mlp, "megatron": megatron, "elementwise": elementwise, "spmv": spmv,
}
