"""Box algebra on concrete index ranges: intersection, difference, containment, and boxes under a reshape.

A box is ``(start, size)`` per dimension in global coordinates, ``None`` for nothing. Pure
integer arithmetic (NumPy only); the redistribution planner, the solver, the cost model and the
simulator all use these.
"""
from __future__ import annotations

import functools
import math
from typing import List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["Box", "row_major_strides", "volume", "normalize", "intersect", "contains", "subtract", "dim_groups", "reshape_box", "reshape_alloc",
           "common_refinement"]


#: ``(start, size)`` per dimension, in global coordinates.
Box = Tuple[Tuple[int, ...], Tuple[int, ...]]


def row_major_strides(shape: Sequence) -> Tuple:
    """Element strides of a C-ordered (row-major) array of ``shape`` (ints or symbolic sizes)."""
    out, acc = [], 1
    for n in reversed(tuple(shape)):
        out.insert(0, acc)
        acc = acc * n
    return tuple(out)


def volume(b: Optional[Box]) -> int:
    if b is None:
        return 0
    n = 1
    for s in b[1]:
        n *= max(s, 0)
    return n


def normalize(b: Optional[Box]) -> Optional[Box]:
    """``b`` with plain ``int`` bounds, or None where it holds no element."""
    if b is None:
        return None
    for n in b[1]:
        if n <= 0:
            return None
    return tuple(map(int, b[0])), tuple(map(int, b[1]))


def intersect(a: Optional[Box], b: Optional[Box]) -> Optional[Box]:
    if a is None or b is None:
        return None
    st, sz = [], []
    for x, n, y, m in zip(a[0], a[1], b[0], b[1]):
        lo, hi = (x if x > y else y), (x + n if x + n < y + m else y + m)
        if hi <= lo:
            return None
        st.append(int(lo))
        sz.append(int(hi - lo))
    return tuple(st), tuple(sz)


def contains(outer: Optional[Box], inner: Optional[Box]) -> bool:
    if inner is None:
        return True
    if outer is None:
        return False
    return all(o <= i and i + m <= o + n for o, n, i, m in zip(outer[0], outer[1], inner[0], inner[1]))


def subtract(a: Optional[Box], b: Optional[Box]) -> List[Box]:
    """``a`` minus ``b`` as disjoint boxes (at most two per dimension)."""
    if a is None:
        return []
    cut = intersect(a, b)
    if cut is None:
        return [a]
    out: List[Box] = []
    start, size = list(a[0]), list(a[1])
    for d in range(len(start)):
        lo, hi = start[d], start[d] + size[d]
        clo, chi = cut[0][d], cut[0][d] + cut[1][d]
        if clo > lo:
            out.append((tuple(start[:d] + [lo] + start[d + 1:]), tuple(size[:d] + [clo - lo] + size[d + 1:])))
        if chi < hi:
            out.append((tuple(start[:d] + [chi] + start[d + 1:]), tuple(size[:d] + [hi - chi] + size[d + 1:])))
        start[d], size[d] = clo, chi - clo
    return out


def dim_groups(vshape: Sequence[int], tshape: Sequence[int]) -> Optional[List[Tuple[List[int], List[int]]]]:
    """Consecutive dimensions of two shapes with equal products (row-major reshape groups)."""
    groups, i, j = [], 0, 0
    while i < len(vshape) or j < len(tshape):
        gv, gt, pv, pt = [], [], 1, 1
        while True:
            if pv <= pt and i < len(vshape) and (pv < pt or not gv or vshape[i] == 1):
                gv.append(i); pv *= vshape[i]; i += 1
            elif j < len(tshape) and (pt < pv or not gt or tshape[j] == 1):
                gt.append(j); pt *= tshape[j]; j += 1
            else:
                break
            if pv == pt and (i == len(vshape) or vshape[i] != 1) and (j == len(tshape) or tshape[j] != 1):
                break
        if pv != pt:
            return None
        groups.append((gv, gt))
    return groups


def reshape_box(box: Optional[Box], vshape: Sequence[int], tshape: Sequence[int]) -> Optional[Box]:
    """A box of a row-major array of shape ``vshape`` seen as one of shape ``tshape`` (a reshape).

    Raises ValueError when the elements do not form a box in the new shape (a block that
    crosses a boundary of a merged dimension). Remembered: a solve asks for the same blocks of a
    view in every step that uses its layout.
    """
    if box is None:
        return None
    return _reshape_box(tuple(tuple(int(x) for x in part) for part in box), tuple(int(n) for n in vshape),
                        tuple(int(n) for n in tshape))


def reshape_alloc(box: Box, vshape: Sequence[int], tshape: Sequence[int]) -> Box:
    """A rank's local buffer ``box`` of an array of shape ``vshape`` seen through a reshape to ``tshape``.

    Unlike a block, a buffer may reach past the end of the array: the last rank of an uneven split
    (7 rows split 4 ways: buffers of 2 rows, the last holding 1) keeps the other ranks' buffer
    shape. That is fine along a dimension the reshape keeps as it is ((7, 15) -> (7, 5, 3): the
    buffer (6, 0) + (2, 15) is (6, 0, 0) + (2, 5, 3)); along a merged or split dimension the
    elements past the end would belong to no box, and ValueError says so.
    """
    vshape, tshape = [int(n) for n in vshape], [int(n) for n in tshape]
    groups = dim_groups(vshape, tshape)
    if groups is None:
        raise ValueError(f"shapes {tuple(vshape)} and {tuple(tshape)} are not reshapes of each other")
    if any(int(a) < 0 for a in box[0]):
        raise ValueError("the local buffer starts before the array")
    for gv, gt in groups:
        for d in gv:
            over = int(box[0][d]) + int(box[1][d]) - vshape[d]
            if over <= 0:
                continue
            same = [e for e in gt if tshape[e] != 1]         # unit dimensions (keepdims) aside
            if [c for c in gv if vshape[c] != 1] != [d] or len(same) != 1 or tshape[same[0]] != vshape[d]:
                raise ValueError("the local buffer reaches past the array along a dimension the reshape merges "
                                 "or splits")
            vshape[d] += over                   # the same dimension on both sides: extend both alike
            tshape[same[0]] += over
    return reshape_box(box, vshape, tshape)


@functools.lru_cache(maxsize=1 << 16)
def _reshape_box(box: Box, vshape: Tuple[int, ...], tshape: Tuple[int, ...]) -> Box:
    groups = dim_groups(list(vshape), list(tshape))
    if groups is None:
        raise ValueError(f"shapes {tuple(vshape)} and {tuple(tshape)} are not reshapes of each other")
    if any(a < 0 or n < 1 or a + n > v for a, n, v in zip(box[0], box[1], vshape)):
        raise ValueError(f"block {box} is not inside the shape {tuple(vshape)}")
    start, size = [0] * len(tshape), [1] * len(tshape)
    for gv, gt in groups:
        if not gt:
            continue
        vs = [vshape[d] for d in gv]
        ts = [tshape[d] for d in gt]
        if not gv:
            continue
        if len(gv) == 1 and len(gt) == 1:              # the same dimension: the same interval
            start[gt[0]], size[gt[0]] = box[0][gv[0]], box[1][gv[0]]
            continue
        if all(box[0][d] == 0 and box[1][d] == vshape[d] for d in gv):     # the whole group
            for d in gt:
                start[d], size[d] = 0, tshape[d]
            continue
        got = _interval_box([box[0][d] for d in gv], [box[1][d] for d in gv], vs, ts)
        if got is not None:
            if got is False:
                raise ValueError(f"block {box} of shape {tuple(vshape)} is not a block of shape {tuple(tshape)}")
            for k, d in enumerate(gt):
                start[d], size[d] = got[0][k], got[1][k]
            continue
        axes = [np.arange(box[0][d], box[0][d] + box[1][d]) for d in gv]
        flat = np.ravel_multi_index(np.meshgrid(*axes, indexing="ij"), vs).ravel()
        coords = np.unravel_index(flat, ts)
        lo = [int(c.min()) for c in coords]
        hi = [int(c.max()) for c in coords]
        vol = 1
        for a, b in zip(lo, hi):
            vol *= b - a + 1
        if vol != flat.size:
            raise ValueError(f"block {box} of shape {tuple(vshape)} is not a block of shape {tuple(tshape)}")
        for k, d in enumerate(gt):
            start[d], size[d] = lo[k], hi[k] - lo[k] + 1
    return tuple(start), tuple(size)


def _interval_box(starts, sizes, vs, ts):
    """A box of shape ``vs`` whose elements are one run in row-major order (leading extents of 1,
    then one partial dimension, then whole ones), as a box of shape ``ts``: ``(start, size)``,
    False where that run is no box of ``ts``, None where the box is no single run (then the
    caller enumerates its elements). A run is a box exactly when the box between its first and
    last element's coordinates holds as many elements as the run."""
    nv = len(vs)
    p = next((i for i in range(nv) if sizes[i] != 1), nv - 1)
    if any(starts[i] != 0 or sizes[i] != vs[i] for i in range(p + 1, nv)):
        return None if len(ts) > 1 else False
    first, count = 0, 1
    for a, n, v in zip(starts, sizes, vs):
        first = first * v + a
        count *= n
    lo, hi = _unravel(first, ts), _unravel(first + count - 1, ts)
    vol = 1
    for a, b in zip(lo, hi):
        vol *= max(b - a + 1, 0)
    if vol != count:
        return False
    return lo, [b - a + 1 for a, b in zip(lo, hi)]


def _unravel(flat: int, shape) -> List[int]:
    out = []
    for n in reversed(shape):
        flat, c = divmod(flat, n)
        out.append(c)
    return out[::-1]


def common_refinement(shapes: Sequence[Sequence[int]]) -> Optional[Tuple[int, ...]]:
    """The coarsest row-major shape that every shape of ``shapes`` (equal element counts) is a
    reshape of by merging dimensions: ``(2, 8, 48)`` and ``(2, 8, 4, 12)`` give ``(2, 8, 4, 12)``;
    None where there is none (``(6,)``, ``(2, 3)`` and ``(3, 2)``). Unit dimensions are left out.
    A block that cuts across a merged dimension of one shape may be a block of the refinement
    (a head-block of ``(B, S, H, 3 E_H)`` reading part of each head's ``3 E_H`` columns)."""
    totals = {math.prod(int(n) for n in s) for s in shapes}
    if len(totals) != 1 or 0 in totals:
        return None
    cuts = set()
    for s in shapes:
        acc = 1
        for n in reversed([int(n) for n in s]):
            acc *= n
            cuts.add(acc)
    dims, prev = [], 1
    for c in sorted(cuts):
        if c == 1:
            continue
        if c % prev:
            return None
        dims.insert(0, c // prev)
        prev = c
    return tuple(dims)
