"""Per-rank blocks of symbolic layouts, and the homes: owner blocks of the arrays that stay
distributed between states (or at the program's boundary in distributed placement).

``grid_coords``/``_block``/``_all_blocks`` evaluate a Layout's or StepSpec's blocks for concrete
sizes; ``solve_homes`` grows a home's anchor blocks (a kernel's, through a reshape view where
they are blocks of the array) until they cover the array, and splits the blocks that ranks share
as partial sums among them. ``solver`` solves the steps between these layouts.
"""
from __future__ import annotations

import math
from typing import Dict, List, Sequence, Tuple

import numpy as np

from ..errors import UnsupportedProgramError
from ..geometry.boxes import reshape_box, subtract
from ..values.exprs import evaluate_many, tiles_without_gaps
from ..values.notation import grid_coords
from ..values.plan import ALL_HOME, ROOT_HOME, HomeSolution, HomeSpec, RankBlock, evaluate
from ..analysis.tiling import block_span

__all__ = ["grid_coords", "rank_symbol_values", "solve_homes", "owns_anchor_blocks"]

def _block(spec, coords, values, gshape) -> RankBlock:
    """The block of a StepSpec or Layout on the rank at grid ``coords`` (None: outside the grid)."""
    nd = len(gshape)
    if coords is None:
        return RankBlock((0,) * nd, (0,) * nd, (0,) * nd)
    vals = dict(values)
    for s, c in zip(spec.rank_syms, coords):
        if s:
            vals[s] = c
    lo, hi = None, None
    for box in spec.boxes:
        st = [max(evaluate(b, vals), 0) for b, _ in box]
        en = [min(evaluate(e, vals), gshape[d] - 1) for d, (_, e) in enumerate(box)]
        if any(e < s for s, e in zip(st, en)):
            continue
        lo = st if lo is None else [min(a, b) for a, b in zip(lo, st)]
        hi = en if hi is None else [max(a, b) for a, b in zip(hi, en)]
    origin = tuple(evaluate(o, vals) for o in spec.origin)
    if lo is None:
        return RankBlock(origin, (0,) * nd, (0,) * nd)
    return RankBlock(origin, tuple(lo), tuple(h - l + 1 for l, h in zip(lo, hi)))


def rank_symbol_values(grid: Sequence[int], rank_syms: Sequence[str], values: Dict[str, object],
                       nranks: int) -> Tuple[Dict[str, object], np.ndarray]:
    """``values`` with every rank symbol an array over ranks ``0 .. nranks-1`` (their row-major
    coordinates in ``grid``; for ``exprs.evaluate_many``), and which of those ranks are in the grid."""
    rest = np.arange(nranks, dtype=np.int64)
    coords = []
    for g in reversed(grid):
        coords.append(rest % g)
        rest = rest // g
    coords.reverse()
    vals = dict(values)
    for s, c in zip(rank_syms, coords):
        if s:
            vals[s] = c
    return vals, rest == 0


def _all_blocks(spec, values, nranks, gshape) -> List[RankBlock]:
    """``_block`` of every rank ``0 .. nranks-1`` (row-major coordinates in ``spec.grid``), its bounds
    evaluated for all ranks at once (``exprs.evaluate_many``): one rank's call-time solve touches
    every rank's block of each step, which for thousands of ranks was most of its time."""
    nd = len(gshape)
    if nd == 0 or not spec.boxes:
        return [_block(spec, grid_coords(q, spec.grid), values, gshape) for q in range(nranks)]
    vals, inside = rank_symbol_values(spec.grid, spec.rank_syms, values, nranks)
    lo = hi = None
    for box in spec.boxes:
        limit = np.asarray([gshape[d] for d in range(len(box))], dtype=np.int64)[:, None] - 1
        st = np.maximum(np.stack([evaluate_many(b, vals, nranks) for b, _ in box]), 0)
        en = np.minimum(np.stack([evaluate_many(e, vals, nranks) for _, e in box]), limit)
        ok = np.all(en >= st, axis=0)
        if lo is None:
            lo, hi, found = np.where(ok, st, 0), np.where(ok, en, 0), ok
        else:
            lo = np.where(ok, np.where(found, np.minimum(lo, st), st), lo)
            hi = np.where(ok, np.where(found, np.maximum(hi, en), en), hi)
            found = found | ok
    origin = (np.stack([evaluate_many(o, vals, nranks) for o in spec.origin]) if len(spec.origin)
              else np.zeros((0, nranks), dtype=np.int64))
    zeros = (0,) * nd
    origins = zip(*origin.tolist()) if len(spec.origin) else [()] * nranks
    starts, sizes = zip(*lo.tolist()), zip(*(hi - lo + 1).tolist())      # per rank, as tuples of ints
    out = []
    for q, (o, st, sz, inq, fq) in enumerate(zip(origins, starts, sizes, inside.tolist(), found.tolist())):
        if not inq:
            out.append(RankBlock(zeros, zeros, zeros))
        elif not fq:
            out.append(RankBlock(o, zeros, zeros))
        else:
            out.append(RankBlock(o, st, sz))
    return out


def _box(b: RankBlock):
    for n in b.size:
        if n <= 0:
            return None
    return b.start, b.size


def _cover(boxes: Sequence, gshape: Tuple[int, ...]) -> bool:
    left = [(tuple(0 for _ in gshape), tuple(gshape))]
    for b in {b for b in boxes if b is not None}:
        left = [piece for u in left for piece in subtract(u, b)]
        if not left:
            return True
    return not left


def _grow(boxes: List, gshape: Tuple[int, ...], nranks: int) -> List:
    """Owner blocks: the anchor's blocks stretched to the array's edges, or rows split evenly."""
    have = [b for b in boxes if b is not None]
    nd = len(gshape)
    if have:
        lo = [min(b[0][d] for b in have) for d in range(nd)]
        hi = [max(b[0][d] + b[1][d] for b in have) for d in range(nd)]
        out = []
        for b in boxes:
            if b is None:
                out.append(None)
                continue
            st, en = list(b[0]), [s + n for s, n in zip(b[0], b[1])]
            for d in range(nd):
                if st[d] == lo[d]:
                    st[d] = 0
                if en[d] == hi[d]:
                    en[d] = gshape[d]
            out.append((tuple(st), tuple(e - s for s, e in zip(st, en))))
        if _cover(out, gshape):
            return out
    out = []
    for q in range(nranks):
        a, n = block_span(gshape[0], nranks, q)
        out.append(((a,) + (0,) * (nd - 1), (n,) + tuple(gshape[1:])) if n > 0 else None)
    return out


def owns_anchor_blocks(anchor, sizes) -> bool:
    """Whether every rank's owned block of a home anchored at ``anchor`` (``solve_homes``)
    provably contains the rank's anchor block, for every value of the size symbols ``sizes``:
    then a home whose kernels use only the anchor's blocks needs no buffer larger than the owned
    block, and a distributed argument can be that buffer (``lowering.boundary``).

    True for an anchor without blocks and for one block per rank whose blocks leave no gaps
    (``exprs.tiles_without_gaps``: ``_grow`` stretches them, never falls back to even rows). Not
    for partial sums (``_split_shared`` splits the anchor's blocks), blocks of a reshape
    (``view_shape``), or blocks united from several boxes.
    """
    if not anchor.boxes:
        return True
    if anchor.op is not None or anchor.view_shape or len(set(anchor.boxes)) > 1:
        return False
    return tiles_without_gaps(anchor.boxes[0], anchor.rank_syms, frozenset(sizes))


def _anchor_boxes(lay, values, nranks: int, gshape: Tuple[int, ...]) -> List:
    """Per rank the anchor kernel's box in the array's coordinates. An anchor that uses the array
    through a reshape (``view_shape``) counts only where every rank's block of the view is a block
    of the array (all None otherwise: the owners get even row blocks)."""
    if not lay.view_shape:
        return [_box(_block(lay, grid_coords(q, lay.grid), values, gshape)) for q in range(nranks)]
    vshape = tuple(evaluate(s, values) for s in lay.view_shape)
    if math.prod(vshape) != math.prod(gshape):
        return [None] * nranks
    out, seen = [], {}
    for q in range(nranks):
        b = _box(_block(lay, grid_coords(q, lay.grid), values, vshape))
        if b is not None and b not in seen:
            try:
                seen[b] = reshape_box(b, vshape, gshape)
            except ValueError:
                return [None] * nranks
        out.append(None if b is None else seen[b])
    return out


def _split_shared(owned: List) -> List:
    """Owner blocks of a home anchored at partial sums: the ranks that share a block (the writer's
    split reduction axis) each own an even piece of it, along its first dimension long enough
    (else its longest), so that one Reduce_scatter per group combines the sums into place."""
    groups: Dict = {}
    for q, b in enumerate(owned):
        if b is not None:
            groups.setdefault(b, []).append(q)
    out = list(owned)
    for (start, size), ranks in groups.items():
        k = len(ranks)
        if k < 2:
            continue
        d = next((i for i, n in enumerate(size) if n >= k), max(range(len(size)), key=lambda i: size[i]))
        for i, q in enumerate(ranks):
            a, n = block_span(size[d], k, i)
            out[q] = (tuple(s + a if j == d else s for j, s in enumerate(start)),
                      tuple(n if j == d else m for j, m in enumerate(size))) if n > 0 else None
    return out


def solve_homes(homes: Sequence[HomeSpec], values: Dict[str, int], nranks: int) -> Dict[str, HomeSolution]:
    """Owner blocks and buffer extents of every home, for concrete sizes."""
    out = {}
    for h in homes:
        gshape = tuple(evaluate(s, values) for s in h.global_shape)
        nd = len(gshape)
        owned = _grow(_anchor_boxes(h.anchor, values, nranks, gshape), gshape, nranks)
        if h.anchor.op is not None:
            owned = _split_shared(owned)
        lo = [list(b[0]) if b is not None else None for b in owned]
        hi = [[s + n for s, n in zip(*b)] if b is not None else None for b in owned]
        for acc in h.accesses:
            for q in range(nranks):
                b = _box(_block(acc, grid_coords(q, acc.grid), values, gshape))
                if b is None:
                    continue
                if lo[q] is None:
                    lo[q], hi[q] = list(b[0]), [s + n for s, n in zip(*b)]
                else:
                    lo[q] = [min(x, y) for x, y in zip(lo[q], b[0])]
                    hi[q] = [max(x, y + n) for x, y, n in zip(hi[q], b[0], b[1])]
        shapes = tuple(tuple(max(e - a, 1) for a, e in zip(lo[q], hi[q])) if lo[q] is not None
                       else ((0,) if h.boundary else (1,)) * nd for q in range(nranks))
        blocks = []
        for q in range(nranks):
            origin = tuple(lo[q]) if lo[q] is not None else (0,) * nd
            b = owned[q]
            blocks.append(RankBlock(origin, b[0], b[1]) if b is not None else RankBlock(origin, (0,) * nd, (0,) * nd))
            if h.boundary and b is not None and shapes[q] != tuple(b[1]):
                # The argument is the buffer, and users pass the owned block (``distsdfg.layout``).
                raise UnsupportedProgramError(
                    f"distributed argument `{h.array}`: rank {q}'s buffer spans {_span(lo[q], shapes[q])} but "
                    f"it owns {_span(b[0], b[1])}, so no block passed to it could be right; this is a "
                    f"distsdfg bug, please report it (root placement for `{h.array}` avoids it)")
        out[h.name] = HomeSolution(h, tuple(blocks), shapes)
    return out


def _span(start, size) -> str:
    return "[" + ", ".join(f"{a}:{a + n}" for a, n in zip(start, size)) + "]"


def _home_blocks(lay, values, nranks, gshape, homes):
    nd = len(gshape)
    zero = (0,) * nd
    if lay.home in (ROOT_HOME, ALL_HOME):
        full = RankBlock(zero, zero, tuple(gshape))
        empty = RankBlock(zero, zero, zero)
        return (tuple(full if (q == 0 or lay.home == ALL_HOME) else empty for q in range(nranks)),
                (tuple(gshape),) * nranks)
    sol = homes[lay.home]
    if not lay.boxes:
        return sol.owned, sol.shapes
    blocks = []
    for q, b in enumerate(_all_blocks(lay, values, nranks, gshape)):
        blocks.append(RankBlock(sol.owned[q].origin, b.start, b.size))
    return tuple(blocks), sol.shapes
