"""Hand-written mpi4py versions of the workloads, as one would write them without distsdfg.

Same contract as a distsdfg program with root placement: rank 0 holds the inputs (other
ranks pass arrays of the right shape with any content) and gets the result; the others
return None. Only buffer-based calls (Scatterv, Bcast, Gatherv, Reduce, Allreduce) are used,
so the PMPI counter sees every byte. The algorithms: row blocks of the output (matmul, the
MLP, softmax, the element-wise chain, SpMV) with the other operands broadcast; the chain
computes ``D x E`` split over its reduction (partial sums combined with Allreduce) before
row blocks of the sum; Megatron attention splits the heads, applies the MLP layer to each
rank's partial output and reduces once.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from mpi4py import MPI

from .workloads import attention_heads, elementwise_ref, mlp_ref, softmax_ref, spmv_ref

__all__ = ["VERSIONS", "blocks"]


def blocks(n: int, parts: int) -> List[Tuple[int, int]]:
    """``parts`` nearly even ranges covering ``range(n)``."""
    return [(i * n // parts, (i + 1) * n // parts) for i in range(parts)]


def _mpi_type(dtype) -> MPI.Datatype:
    return MPI._typedict[np.dtype(dtype).char]


def scatter_pieces(comm, pieces: Optional[Sequence[np.ndarray]], shape, dtype) -> np.ndarray:
    """Rank ``q`` receives ``pieces[q]`` (given on rank 0) as an array of ``shape``."""
    out = np.empty(shape, dtype)
    send = None
    if comm.rank == 0:
        counts = [p.size for p in pieces]
        displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int).tolist()
        send = [np.concatenate([np.ravel(p) for p in pieces]).astype(dtype, copy=False), counts, displs,
                _mpi_type(dtype)]
    comm.Scatterv(send, out, root=0)
    return out


def scatter_rows(comm, a: np.ndarray) -> np.ndarray:
    """Rank ``q`` gets the ``q``-th block of rows of ``a`` (``a`` valid on rank 0, shaped alike elsewhere)."""
    parts = blocks(a.shape[0], comm.size)
    lo, hi = parts[comm.rank]
    pieces = [a[l:h] for l, h in parts] if comm.rank == 0 else None
    return scatter_pieces(comm, pieces, (hi - lo,) + a.shape[1:], a.dtype)


def gather_rows(comm, local: np.ndarray, nrows: int) -> Optional[np.ndarray]:
    """The row blocks of every rank stacked on rank 0 (None elsewhere)."""
    rest = local.shape[1:]
    per = int(np.prod(rest, dtype=np.int64))
    counts = [(h - l) * per for l, h in blocks(nrows, comm.size)]
    out = np.empty((nrows,) + rest, local.dtype) if comm.rank == 0 else None
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int).tolist()
    comm.Gatherv(np.ascontiguousarray(local), [out, counts, displs, _mpi_type(local.dtype)] if out is not None
                 else None, root=0)
    return out


def bcast(comm, a: np.ndarray) -> np.ndarray:
    """``a`` of rank 0 on every rank (received into the caller's array elsewhere)."""
    comm.Bcast(a, root=0)
    return a


def matmul(comm, A, B):
    return gather_rows(comm, scatter_rows(comm, A) @ bcast(comm, B), A.shape[0])


def matrix_chain(comm, A, B, C, D, E):
    T, H = D.shape
    parts = blocks(H, comm.size)
    lo, hi = parts[comm.rank]
    Dk = scatter_pieces(comm, [D[:, l:h] for l, h in parts] if comm.rank == 0 else None, (T, hi - lo), D.dtype)
    DE = Dk @ scatter_rows(comm, E)
    comm.Allreduce(MPI.IN_PLACE, DE, op=MPI.SUM)
    out = scatter_rows(comm, A) @ bcast(comm, B) + scatter_rows(comm, C) @ DE
    return gather_rows(comm, out, A.shape[0])


def softmax(comm, inp):
    rows = inp.reshape(-1, inp.shape[-1])
    out = gather_rows(comm, softmax_ref(scatter_rows(comm, rows)), rows.shape[0])
    return out.reshape(inp.shape) if out is not None else None


def mlp(comm, x, W1, b1, W2, b2):
    weights = [bcast(comm, w) for w in (W1, b1, W2, b2)]
    return gather_rows(comm, mlp_ref(scatter_rows(comm, x), *weights), x.shape[0])


def megatron(comm, x, WQ, WK, WV, WO, W1):
    E, H, EH = WQ.shape
    parts = blocks(H, comm.size)
    lo, hi = parts[comm.rank]

    def heads(W):
        pieces = [W[:, l:h] for l, h in parts] if comm.rank == 0 else None
        return scatter_pieces(comm, pieces, (E, hi - lo, EH), W.dtype)
    x, W1 = bcast(comm, x), bcast(comm, W1)
    Q, K, V = heads(WQ), heads(WK), heads(WV)
    part = np.einsum('bsj,jf->bsf', attention_heads(x, Q, K, V, scatter_rows(comm, WO)), W1)
    out = np.empty_like(part) if comm.rank == 0 else None
    comm.Reduce(part, out, op=MPI.SUM, root=0)
    return out


def elementwise(comm, x, y):
    return gather_rows(comm, elementwise_ref(scatter_rows(comm, x), scatter_rows(comm, y)), x.shape[0])


def spmv(comm, A_row, A_col, A_val, x):
    m = A_row.shape[0] - 1
    parts = blocks(m, comm.size)
    lo, hi = parts[comm.rank]
    root = comm.rank == 0
    ptr = scatter_pieces(comm, [A_row[l:h + 1] for l, h in parts] if root else None, (hi - lo + 1,), A_row.dtype)
    nnz = int(ptr[-1]) - int(ptr[0])
    spans = [(int(A_row[l]), int(A_row[h])) for l, h in parts] if root else None
    cols = scatter_pieces(comm, [A_col[a:b] for a, b in spans] if root else None, (nnz,), A_col.dtype)
    vals = scatter_pieces(comm, [A_val[a:b] for a, b in spans] if root else None, (nnz,), A_val.dtype)
    local = spmv_ref(ptr - ptr[0], cols, vals, bcast(comm, x))
    return gather_rows(comm, np.asarray(local, dtype=np.float64), m)


VERSIONS: Dict[str, Callable] = {
    "matmul_square": matmul, "matmul_skewed": matmul, "matrix_chain": matrix_chain, "softmax": softmax,
    "mlp": mlp, "megatron": megatron, "elementwise": elementwise, "spmv": spmv,
}
