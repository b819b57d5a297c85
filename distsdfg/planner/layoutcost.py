"""What moving an operand from one layout to another costs, in elements: ``BytesModel``'s edge
and boundary prices.

A layout is reduced to a *signature* (``signature``: per split grid axis, in rank order, its size
and role: the dimension it splits, 'A' for partial results, 'R' for replicas); ``layout_bytes``
and ``layout_matrix`` count what the redistribution planner (``distsdfg.solver.redistribute``) would
move between two signatures, ``root_bytes`` what a scatter, gather or reduce at rank 0 moves.
"""
from __future__ import annotations

import functools
import math
from typing import Dict, List, Sequence, Tuple

import numpy as np

from ..geometry.boxes import reshape_box
from ..analysis.eingraph import Operand, Vertex
from ..analysis.tiling import block_span
from ..values.modes import StepKind

__all__ = ["Split", "signature", "layout_bytes", "layout_matrix", "root_bytes", "strided_elements"]

#: A partitioning vector as a mapping label -> parts.
Split = Dict[str, int]


def layout_matrix(srcs: Sequence[Tuple], dsts: Sequence[Tuple], shape, P: int):
    """Elements moved from each source layout to each destination layout of one array.

    Exact where the runtime's redistribution is: every rank receives what its block lacks
    (Alltoallw, Allgatherv, local), and partial sums whose groups hold equal blocks are
    reduced (Allreduce, Reduce_scatter: ``(k-1)/k`` of a block per rank). Other partial
    layouts are priced as a reduce-scatter within the groups followed by that exchange, an
    upper bound of the runtime's Alltoallv.
    """
    S = [_boxes(sig, shape, P) for sig in srcs]
    D = [_boxes(sig, shape, P) for sig in dsts]
    f = np.float32
    s0 = np.stack([a for a, _ in S]).astype(f)         # (Ku, P, nd)
    s1 = np.stack([b for _, b in S]).astype(f)
    d0 = np.stack([a for a, _ in D]).astype(f)         # (Kv, P, nd)
    d1 = np.stack([b for _, b in D]).astype(f)
    Ku, Kv = len(srcs), len(dsts)
    inter = np.ones((Ku, Kv, P), dtype=f)
    lo = np.empty((Ku, Kv, P), dtype=f)
    hi = np.empty((Ku, Kv, P), dtype=f)
    for d in range(len(shape)):
        a0, a1 = s0[:, None, :, d], s0[:, None, :, d] + s1[:, None, :, d]
        b0, b1 = d0[None, :, :, d], d0[None, :, :, d] + d1[None, :, :, d]
        if not (np.any(a0 != 0) or np.any(b0 != 0)) and np.all(a1 == shape[d]) and np.all(b1 == shape[d]):
            inter *= f(shape[d])                       # no layout splits this dimension
            continue
        np.maximum(a0, b0, out=lo)
        np.minimum(a1, b1, out=hi)
        np.subtract(hi, lo, out=hi)
        np.maximum(hi, 0, out=hi)
        inter *= hi
    vol_s = np.prod(np.maximum(s1, 0), axis=-1)[:, None, :]     # (Ku, 1, P)
    vol_d = np.prod(np.maximum(d1, 0), axis=-1)[None, :, :]     # (1, Kv, P)
    k = np.array([math.prod([n for n, r in sig if r == "A"]) for sig in srcs], dtype=f)
    cost = vol_d.sum(axis=-1) - inter.sum(axis=-1, dtype=np.float64)
    if np.any(k > 1):
        kk = k[:, None, None]
        cost = cost + (vol_s * (kk - 1) / kk).sum(axis=-1, dtype=np.float64)
        cost = cost + np.maximum(inter - vol_s / kk, 0).sum(axis=-1, dtype=np.float64)
    return np.rint(cost)


def signature(v: Vertex, split: Split, o: Operand, *, partial: bool) -> Tuple:
    """The layout of operand ``o`` under a vertex split: per split grid axis (in rank order) its
    size and role: the dimension it splits, 'A' (partial results) or 'R' (replicas)."""
    axes = []
    for l in v.labels:
        k = split.get(l, 1)
        if k <= 1:
            continue
        role = o.labels.index(l) if l in o.labels else ("A" if partial and l in v.agg else "R")
        axes.append((k, role))
    return tuple(axes)


@functools.lru_cache(maxsize=65536)
def _boxes(sig: Tuple, shape: Tuple[int, ...], P: int):
    nd = len(shape)
    parts = [k for k, _ in sig]
    used = math.prod(parts) if parts else 1
    start = np.zeros((P, nd), dtype=np.int64)
    size = np.zeros((P, nd), dtype=np.int64)
    q = np.arange(min(P, used))
    coords = np.unravel_index(q, parts) if parts else ()
    size[:used] = np.array(shape, dtype=np.int64)
    for a, (k, role) in enumerate(sig):
        if isinstance(role, int):
            start[:used, role], size[:used, role] = block_span(shape[role], k, coords[a])
    return start, size


def root_bytes(sig: Tuple, shape, P: int, what: StepKind) -> int:
    """Elements a scatter from rank 0, the reduction of partial blocks, or the gather to rank 0 of
    a layout moves (solver.comm_steps' rules: one copy per distinct block, rank 0's own stays)."""
    return _root_elements(tuple(sig), tuple(shape), P, what)


@functools.lru_cache(maxsize=1 << 16)
def _root_elements(sig: Tuple, shape: Tuple[int, ...], P: int, what: StepKind) -> int:
    """``root_bytes``, remembered (the planner asks for the same layouts of every candidate)."""
    start, size = _boxes(sig, shape, P)
    vol = np.prod(np.maximum(size, 0), axis=-1)
    if what == StepKind.SCATTER:
        return int(vol[1:].sum())
    if what == StepKind.REDUCE and not any(r == "A" for _, r in sig):
        return 0
    first: Dict[Tuple, int] = {}
    members = 0
    for q, row in enumerate(np.concatenate([start, size], axis=1).tolist()):
        if vol[q] == 0:
            continue
        k = tuple(row)
        if k in first:
            members += int(vol[q])
        else:
            first[k] = q
    if what == StepKind.REDUCE:
        return members
    return int(sum(vol[q] for q in first.values() if q != 0))


@functools.lru_cache(maxsize=65536)
def strided_elements(sig: Tuple, shape, P: int) -> int:
    """Elements of the rank blocks of a layout that are not one contiguous run of the row-major
    array: a scatter from rank 0 packs them, a gather unpacks them (splitting the outermost split
    dimension keeps every block contiguous)."""
    _, size = _boxes(sig, tuple(shape), P)
    nd = len(shape)
    if nd == 0:
        return 0
    vol = np.prod(np.maximum(size, 0), axis=1)
    dims = np.arange(nd)
    cut = np.where(size != np.array(shape, dtype=np.int64)[None, :], dims[None, :], -1).max(axis=1)  # last partial dim
    # one run: ones before the last partial dimension, whole after it
    strided = ((size != 1) & (dims[None, :] < cut[:, None])).any(axis=1) & (vol > 0)
    return int(vol[strided].sum())


@functools.lru_cache(maxsize=1 << 16)
def _reshaped(start: Tuple[int, ...], size: Tuple[int, ...], vshape: Tuple[int, ...], tshape: Tuple[int, ...]):
    """``boxes.reshape_box``, remembered (the planner asks for the same blocks of the
    same views again and again); None where the block is not a block of the other shape."""
    try:
        return reshape_box((start, size), vshape, tshape)
    except ValueError:
        return None


@functools.lru_cache(maxsize=1 << 14)
def _dst_in_src(dst: Tuple, dshape: Tuple[int, ...], sshape: Tuple[int, ...], P: int):
    """The blocks of layout ``dst`` of the view of shape ``dshape`` as blocks of shape ``sshape``
    (each distinct block converted once); None where one is not a block there. Remembered: the
    planner prices every source layout against the same destination layouts."""
    d0, d1 = _boxes(dst, dshape, P)
    nd = d0.shape[1]
    index: Dict[Tuple[int, ...], int] = {}
    which = np.fromiter((index.setdefault(row, len(index)) for row in map(tuple, np.concatenate([d0, d1], axis=1).tolist())),
                        dtype=np.int64, count=len(d0))
    conv = np.zeros((len(index), 2 * len(sshape)), np.int64)
    for i, box in enumerate(index):
        if all(n > 0 for n in box[nd:]):
            b = _reshaped(box[:nd], box[nd:], tuple(dshape), tuple(sshape))
            if b is None:
                return None
            conv[i] = b[0] + b[1]
    conv = conv[which]
    return conv[:, :len(sshape)], conv[:, len(sshape):]


def _vol(sz):
    return np.prod(np.maximum(sz, 0), axis=-1)


def _inter(a0, a1, b0, b1):
    lo = np.maximum(a0, b0)
    hi = np.minimum(a0 + a1, b0 + b1)
    return _vol(hi - lo)


@functools.lru_cache(maxsize=1 << 14)
def _partial_groups(src: Tuple, sshape: Tuple[int, ...], P: int):
    """Of a partial layout: which ranks hold a block, the groups of ranks with equal blocks, and
    whether distinct blocks are disjoint (remembered per layout, like ``_boxes``)."""
    s0, s1 = _boxes(src, sshape, P)
    have = _vol(s1) > 0
    groups: Dict[Tuple, List[int]] = {}
    for q in np.flatnonzero(have):
        groups.setdefault(tuple(s0[q]) + tuple(s1[q]), []).append(int(q))
    reps = np.array([g[0] for g in groups.values()], dtype=np.int64)
    return have, list(groups.values()), _disjoint(s0[reps], s1[reps], _inter)


def layout_bytes(src: Tuple, sshape, dst: Tuple, dshape, P: int) -> int:
    """Elements the redistribution from layout ``src`` to ``dst`` moves (solver/redistribute.py's rules)."""
    sshape, dshape = tuple(sshape), tuple(dshape)
    s0, s1 = _boxes(src, sshape, P)
    if sshape != dshape:
        conv = _dst_in_src(dst, dshape, sshape, P)
        if conv is None:
            return int(P * math.prod(sshape))       # not expressible: a full exchange
        d0, d1 = conv
    else:
        d0, d1 = _boxes(dst, dshape, P)
    vol, inter = _vol, _inter
    partial = any(r == "A" for _, r in src)
    if not partial:
        return int((vol(d1) - inter(s0, s1, d0, d1)).sum())
    # Partial sums: ranks with the same block form groups.
    have, groups, clean = _partial_groups(src, sshape, P)
    need = vol(d1) > 0
    inside = bool(np.all(~need | (have & (inter(s0, s1, d0, d1) == vol(d1)))))
    if clean and inside:
        total = 0
        for g in groups:
            k, n = len(g), int(vol(s1[g[0]]))
            if k < 2:
                continue
            if all(np.array_equal(d0[q], s0[q]) and np.array_equal(d1[q], s1[q]) for q in g):
                total += 2 * (k - 1) * n                                   # Allreduce
            elif sum(bool(need[q]) for q in g) <= 1:
                total += (k - 1) * int(max((vol(d1[q]) for q in g), default=0))   # Reduce
            else:
                total += (k - 1) * int(sum(vol(d1[q]) for q in g))        # Reduce_scatter
        return total
    return _cross_elements(s0, s1, d0, d1)      # Alltoallv


def _distinct_rows(a: np.ndarray):
    """The distinct rows of an integer matrix and how often each occurs (``np.unique(axis=0)``
    without its structured-array detour, which cost most of the planner's time for many ranks)."""
    counts: Dict[Tuple[int, ...], int] = {}
    for row in map(tuple, a.tolist()):
        counts[row] = counts.get(row, 0) + 1
    rows = np.array(list(counts), dtype=np.int64).reshape(len(counts), a.shape[1])
    return rows, np.fromiter(counts.values(), dtype=np.int64, count=len(counts))


def _cross_elements(s0, s1, d0, d1) -> int:
    """Elements of source box i inside destination box j, summed over all rank pairs i != j: every
    pair of distinct boxes priced once and weighted by how many ranks hold each (replicated partial
    blocks make far fewer distinct boxes than ranks), minus each rank's own pair."""
    nd = s0.shape[1]
    sb, sc = _distinct_rows(np.concatenate([s0, s1], axis=1))
    db, dc = _distinct_rows(np.concatenate([d0, d1], axis=1))
    total = 0
    for lo in range(0, len(sb), _CHUNK):
        blk = sb[lo:lo + _CHUNK]
        cross = _inter(blk[:, None, :nd], blk[:, None, nd:], db[None, :, :nd], db[None, :, nd:])
        total += int((cross * sc[lo:lo + _CHUNK, None] * dc[None, :]).sum())
    return total - int(_inter(s0, s1, d0, d1).sum())


#: Source ranks per slice when pricing all rank pairs.
_CHUNK = 256


def _pairs(a0, a1, b0, b1, inter):
    """``inter`` of box a[i] with box b[j] for every pair i != j, in slices of rows (P x P boxes do
    not fit memory at P = 4096)."""
    n = len(a0)
    for lo in range(0, n, _CHUNK):
        hi = min(lo + _CHUNK, n)
        cross = inter(a0[lo:hi, None, :], a1[lo:hi, None, :], b0[None, :, :], b1[None, :, :])
        cross[np.arange(hi - lo), np.arange(lo, hi)] = 0
        yield cross


def _disjoint(start, size, inter) -> bool:
    """Whether the boxes (one per row; all distinct and non-empty) are pairwise disjoint.

    Boxes cut from grids have, per dimension, intervals that are equal or disjoint; then two
    distinct boxes differ in some dimension's interval and cannot meet (checked in O(n log n)).
    Other boxes are compared pair by pair, in slices."""
    n = len(start)
    if n < 2:
        return True

    def equal_or_disjoint(d):
        iv = np.unique(np.stack([start[:, d], size[:, d]], axis=1), axis=0)    # sorted by start
        return not np.any(iv[:-1, 0] + iv[:-1, 1] > iv[1:, 0])

    if all(equal_or_disjoint(d) for d in range(start.shape[1])):
        return True
    return not any(cross.any() for cross in _pairs(start, size, start, size, inter))
