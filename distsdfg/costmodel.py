"""Communication cost models for the planner: EinDecomp's formulas, our runtime's bytes, alpha-beta.

All models price a vertex of the EinGraph under a partitioning vector ``d`` (a split per
label) and an edge under the producer's and the consumer's vectors. Element counts follow
seed 000 section 7; every model returns bytes (elements x itemsize), or seconds for
:class:`AlphaBetaModel`.

- :class:`PaperModel` is EinDecomp as published: ``cost_join + cost_agg`` per vertex,
  ``cost_repart`` per edge, program inputs pre-partitioned and free.
- :class:`BytesModel` (the default) prices what this runtime does: inputs are scattered from
  rank 0 (unless ``inputs="distributed"``), an edge moves only what the consumer's blocks
  lack (nothing when the layouts agree), partial sums are combined where they are consumed
  (Allreduce, Reduce_scatter, Reduce), outputs are gathered to rank 0 once.
- :class:`AlphaBetaModel` turns any of them into time: ``alpha`` per collective call plus
  ``beta`` per byte a rank moves; :func:`calibrate` measures both on the machine.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from typing import Dict, List, Optional, Sequence, Tuple

from .boxes import dim_groups, reshape_box
from .eingraph import Edge, EinGraph, Operand, Vertex

__all__ = ["cost_join", "cost_agg", "cost_repart", "CostModel", "PaperModel", "BytesModel", "AlphaBetaModel",
           "calibrate", "get_model", "Split"]

#: A partitioning vector as a mapping label -> parts.
Split = Dict[str, int]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def sub_bounds(bounds: Sequence[int], d: Sequence[int]) -> List[int]:
    return [_ceil(b, x) for b, x in zip(bounds, d)]


# -- the paper's formulas (seed 000, section 7), in elements -----------------------------------------
def cost_join(bx: Sequence[int], dx: Sequence[int], by: Sequence[int], dy: Sequence[int], p: int) -> int:
    """``p * (nX + nY)``: every kernel call receives one sub-tensor of each input.

    ``bx``/``by`` are the inputs' bounds, ``dx``/``dy`` the parts of the partitioning vector on
    their labels (``by=()`` for a unary EinSum).
    """
    nx = math.prod(sub_bounds(bx, dx))
    ny = math.prod(sub_bounds(by, dy)) if by else 0
    return p * (nx + ny)


def cost_agg(n_agg: int, bz: Sequence[int], dz: Sequence[int], p: int) -> int:
    """``p / n_agg * (n_agg - 1) * nZ``: partial results of one output block meet at one rank."""
    if n_agg <= 1:
        return 0
    nz = math.prod(sub_bounds(bz, dz))
    return (p // n_agg) * (n_agg - 1) * nz


def cost_repart(dx: Sequence[int], dz: Sequence[int], bz: Sequence[int]) -> int:
    """Moving a tensor of bounds ``bz`` from producer parts ``dz`` to consumer parts ``dx``."""
    if tuple(dx) == tuple(dz):
        return 0
    sp = sub_bounds(bz, dz)
    sc = sub_bounds(bz, dx)
    n_p, n_c = math.prod(sp), math.prod(sc)
    n_int = math.prod(min(a, b) for a, b in zip(sp, sc))
    n = math.prod(bz)
    cost = (n_c // n_int - 1) * (n // n_c) * (n_c + n_p) if n_int else 0
    if n_p != n_int:
        cost += n_p * (n // n_c)
    return cost


# -- operand splits ---------------------------------------------------------------------------------
def operand_parts(o: Operand, split: Split) -> Tuple[int, ...]:
    """Parts per dimension of ``o`` under a vertex split (irregular dimensions are whole)."""
    return tuple(min(split.get(l, 1), n) if l is not None else 1 for l, n in zip(o.labels, o.shape))


def block_size(o: Operand, split: Split) -> int:
    return math.prod(sub_bounds(o.shape, operand_parts(o, split)))


def _flat_parts(o: Operand, parts: Tuple[int, ...], target: Sequence[int]) -> Tuple[int, ...]:
    """Parts of an operand seen through a reshape onto ``target`` (leading dimensions first)."""
    if tuple(o.shape) == tuple(target):
        return parts
    groups = dim_groups(list(o.shape), list(target))
    if groups is None:
        return tuple(1 for _ in target)
    out = [1] * len(target)
    for gv, gt in groups:
        total = math.prod(parts[d] for d in gv)
        for d in gt:
            take = math.gcd(total, target[d])
            out[d] = take
            total //= take
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class Cost:
    """Bytes moved and collective calls made."""
    bytes: float = 0.0
    calls: int = 0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.bytes + other.bytes, self.calls + other.calls)


ZERO = Cost()


class CostModel:
    """Prices a vertex and an edge; ``value`` turns a Cost into the number the search minimises."""
    name = "model"

    def __init__(self, *, inputs: str = "root", memory_limit: Optional[int] = None):
        if inputs not in ("root", "distributed"):
            raise ValueError("inputs is 'root' (scattered from rank 0) or 'distributed' (already in place)")
        self.inputs = inputs
        self.memory_limit = memory_limit

    def value(self, c: Cost) -> float:
        return c.bytes

    def fits(self, v: Vertex, split: Split) -> bool:
        if self.memory_limit is None:
            return True
        return sum(block_size(o, split) * o.itemsize for o in v.inputs + v.outputs) <= self.memory_limit

    def vertex(self, g: EinGraph, v: Vertex, split: Split) -> Cost:
        raise NotImplementedError

    def edge(self, g: EinGraph, e: Edge, su: Split, sv: Split) -> Cost:
        raise NotImplementedError

    def edge_costs(self, g: EinGraph, e: Edge, sus: Sequence[Split], svs: Sequence[Split]):
        """``value`` of the edge for every pair of producer and consumer splits, as a matrix."""
        import numpy as np
        return np.array([[self.value(self.edge(g, e, su, sv)) for sv in svs] for su in sus], dtype=float)


def _ranks(v: Vertex, split: Split) -> int:
    return math.prod(split.get(l, 1) for l in v.labels)


class PaperModel(CostModel):
    """EinDecomp's upper bound: join + aggregation per vertex, repartition per edge (inputs free)."""
    name = "paper"

    def vertex(self, g, v, split):
        p = _ranks(v, split)
        item = max([o.itemsize for o in v.inputs + v.outputs] + [1])
        join = sum(p * block_size(o, split) for o in v.inputs)
        n_agg = math.prod(split.get(l, 1) for l in v.agg)
        agg = sum(cost_agg(n_agg, o.shape, operand_parts(o, split), p) for o in v.outputs)
        return Cost((join + agg) * item, int(join > 0) + int(agg > 0))

    def edge(self, g, e, su, sv):
        prod, cons = e.producer(g), e.consumer(g)
        dz = operand_parts(prod, su)
        dx = _flat_parts(cons, operand_parts(cons, sv), prod.shape)
        n = cost_repart(dx, dz, prod.shape)
        return Cost(n * prod.itemsize, int(n > 0))

    def edge_costs(self, g, e, sus, svs):
        """``cost_repart`` for all pairs at once (the same formula, vectorised)."""
        import numpy as np
        prod, cons = e.producer(g), e.consumer(g)
        dzs, uidx = _unique([operand_parts(prod, su) for su in sus])
        dxs, vidx = _unique([_flat_parts(cons, operand_parts(cons, sv), prod.shape) for sv in svs])
        b = np.array(prod.shape, dtype=np.int64)
        sp = -(-b[None, :] // np.array(dzs, dtype=np.int64))            # (Ku, nd)
        sc = -(-b[None, :] // np.array(dxs, dtype=np.int64))            # (Kv, nd)
        n_p = sp.prod(axis=1)[:, None]
        n_c = sc.prod(axis=1)[None, :]
        n_int = np.minimum(sp[:, None, :], sc[None, :, :]).prod(axis=2)
        n = int(b.prod())
        cost = (n_c // n_int - 1) * (n // n_c) * (n_c + n_p) + np.where(n_p != n_int, n_p * (n // n_c), 0)
        same = (np.array(dzs)[:, None, :] == np.array(dxs)[None, :, :]).all(axis=2)
        cost = np.where(same, 0, cost).astype(float)
        return cost[np.ix_(uidx, vidx)] * prod.itemsize


class BytesModel(CostModel):
    """What this runtime moves, per rank block (see docs/planner.md).

    Inputs are scattered from rank 0 (``(p - 1)`` blocks) unless ``inputs="distributed"``;
    outputs are reduced (partial sums) and gathered once. An edge is priced exactly as the
    redistribution planner would execute it, from the two layouts' per-rank blocks: which
    grid axis splits which dimension, in the order ranks are numbered. Layouts are reduced
    to a signature (the split axes, their sizes and roles) and priced once per pair.
    """
    name = "bytes"

    def __init__(self, **kw):
        super().__init__(**kw)
        self._pairs: Dict[Tuple, int] = {}

    def vertex(self, g, v, split):
        p = _ranks(v, split)
        c = ZERO
        if self.inputs == "root":
            for arr in g.program_inputs.get(v.index, []):
                o = g.operand(v.index, arr, output=False)
                n = root_bytes(signature(v, split, o, partial=False), o.shape, p, "scatter")
                c += Cost(n * o.itemsize, int(n > 0))
        for arr in g.program_outputs.get(v.index, []):
            o = g.operand(v.index, arr, output=True)
            sig = signature(v, split, o, partial=v.partial)
            reduce = root_bytes(sig, o.shape, p, "reduce")
            gather = root_bytes(sig, o.shape, p, "gather") if self.inputs == "root" else 0
            c += Cost((reduce + gather) * o.itemsize, int(reduce > 0) + int(gather > 0))
        return c

    def edge(self, g, e, su, sv):
        n = self.edge_costs(g, e, [su], [sv])[0, 0]
        return Cost(float(n), int(n > 0))

    def edge_costs(self, g, e, sus, svs):
        import numpy as np
        u, v = g.vertices[e.src], g.vertices[e.dst]
        prod, cons = e.producer(g), e.consumer(g)
        if e.acc and u.constant:             # reset to the identity: every rank fills its block
            return np.zeros((len(sus), len(svs)))
        part = u.partial and not e.via_input
        src = [signature(u, su, prod, partial=part) for su in sus]
        dst = [signature(v, sv, cons, partial=False) for sv in svs]
        P = max([_ranks(u, su) for su in sus] + [_ranks(v, sv) for sv in svs])
        usrc, uidx = _unique(src)
        udst, vidx = _unique(dst)
        if tuple(prod.shape) == tuple(cons.shape):
            key = (tuple(usrc), tuple(udst), tuple(prod.shape), P)
            m = self._pairs.get(key)
            if m is None:        # layers of a model repeat their layouts: price each set once
                m = self._pairs[key] = layout_matrix(usrc, udst, prod.shape, P)
        else:                                # through a reshape view: pair by pair
            m = np.empty((len(usrc), len(udst)))
            for a, sa in enumerate(usrc):
                for b, sb in enumerate(udst):
                    key = (sa, sb, prod.shape, cons.shape, P)
                    if key not in self._pairs:
                        self._pairs[key] = layout_bytes(sa, prod.shape, sb, cons.shape, P)
                    m[a, b] = self._pairs[key]
        return m[np.ix_(uidx, vidx)] * prod.itemsize


def _unique(keys):
    seen: Dict[Tuple, int] = {}
    idx = [seen.setdefault(k, len(seen)) for k in keys]
    return list(seen), idx


def layout_matrix(srcs: Sequence[Tuple], dsts: Sequence[Tuple], shape, P: int):
    """Elements moved from each source layout to each destination layout of one array.

    Exact where the runtime's redistribution is: every rank receives what its block lacks
    (Alltoallw, Allgatherv, local), and partial sums whose groups hold equal blocks are
    reduced (Allreduce, Reduce_scatter: ``(k-1)/k`` of a block per rank). Other partial
    layouts are priced as a reduce-scatter within the groups followed by that exchange, an
    upper bound of the runtime's Alltoallv.
    """
    import numpy as np
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
    import numpy as np
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
            b = -(-shape[role] // k)
            start[:used, role] = coords[a] * b
            size[:used, role] = np.clip(shape[role] - coords[a] * b, 0, b)
    return start, size


def root_bytes(sig: Tuple, shape, P: int, what: str) -> int:
    """Elements a scatter from rank 0, the reduction of partial blocks, or the gather to rank 0 of
    a layout moves (solver.comm_steps' rules: one copy per distinct block, rank 0's own stays)."""
    import numpy as np
    start, size = _boxes(sig, shape, P)
    vol = np.prod(np.maximum(size, 0), axis=-1)
    if what == "scatter":
        return int(vol[1:].sum())
    first: Dict[Tuple, int] = {}
    members = 0
    for q in range(P):
        if vol[q] == 0:
            continue
        k = tuple(start[q]) + tuple(size[q])
        if k in first:
            members += int(vol[q])
        else:
            first[k] = q
    if what == "reduce":
        return members if any(r == "A" for _, r in sig) else 0
    return int(sum(vol[q] for q in first.values() if q != 0))


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
    import numpy as np
    d0, d1 = _boxes(dst, dshape, P)
    boxes, which = np.unique(np.concatenate([d0, d1], axis=1), axis=0, return_inverse=True)
    nd = d0.shape[1]
    conv = np.zeros((len(boxes), 2 * len(sshape)), np.int64)
    for i, box in enumerate(boxes):
        if np.all(box[nd:] > 0):
            b = _reshaped(tuple(map(int, box[:nd])), tuple(map(int, box[nd:])), tuple(dshape), tuple(sshape))
            if b is None:
                return None
            conv[i] = b[0] + b[1]
    conv = conv[np.asarray(which).reshape(-1)]
    return conv[:, :len(sshape)], conv[:, len(sshape):]


def _vol(sz):
    import numpy as np
    return np.prod(np.maximum(sz, 0), axis=-1)


def _inter(a0, a1, b0, b1):
    import numpy as np
    lo = np.maximum(a0, b0)
    hi = np.minimum(a0 + a1, b0 + b1)
    return _vol(hi - lo)


@functools.lru_cache(maxsize=1 << 14)
def _partial_groups(src: Tuple, sshape: Tuple[int, ...], P: int):
    """Of a partial layout: which ranks hold a block, the groups of ranks with equal blocks, and
    whether distinct blocks are disjoint (remembered per layout, like ``_boxes``)."""
    import numpy as np
    s0, s1 = _boxes(src, sshape, P)
    have = _vol(s1) > 0
    groups: Dict[Tuple, List[int]] = {}
    for q in np.flatnonzero(have):
        groups.setdefault(tuple(s0[q]) + tuple(s1[q]), []).append(int(q))
    reps = np.array([g[0] for g in groups.values()], dtype=np.int64)
    return have, list(groups.values()), _disjoint(s0[reps], s1[reps], _inter)


def layout_bytes(src: Tuple, sshape, dst: Tuple, dshape, P: int) -> int:
    """Elements the redistribution from layout ``src`` to ``dst`` moves (redistribute.py's rules)."""
    import numpy as np
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


def _cross_elements(s0, s1, d0, d1) -> int:
    """Elements of source box i inside destination box j, summed over all rank pairs i != j: every
    pair of distinct boxes priced once and weighted by how many ranks hold each (replicated partial
    blocks make far fewer distinct boxes than ranks), minus each rank's own pair."""
    import numpy as np
    nd = s0.shape[1]
    sb, sc = np.unique(np.concatenate([s0, s1], axis=1), axis=0, return_counts=True)
    db, dc = np.unique(np.concatenate([d0, d1], axis=1), axis=0, return_counts=True)
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
    import numpy as np
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
    import numpy as np
    n = len(start)
    if n < 2:
        return True

    def equal_or_disjoint(d):
        iv = np.unique(np.stack([start[:, d], size[:, d]], axis=1), axis=0)    # sorted by start
        return not np.any(iv[:-1, 0] + iv[:-1, 1] > iv[1:, 0])

    if all(equal_or_disjoint(d) for d in range(start.shape[1])):
        return True
    return not any(cross.any() for cross in _pairs(start, size, start, size, inter))


@dataclasses.dataclass
class AlphaBetaModel(CostModel):
    """Time: ``alpha`` seconds per collective call plus ``beta`` seconds per byte per rank."""
    alpha: float = 5e-6
    beta: float = 1e-9
    base: Optional[CostModel] = None
    name = "alpha-beta"

    def __post_init__(self):
        base = self.base or BytesModel()
        CostModel.__init__(self, inputs=base.inputs, memory_limit=base.memory_limit)
        self.base = base

    def value(self, c: Cost) -> float:
        return self.alpha * c.calls + self.beta * c.bytes

    def vertex(self, g, v, split):
        c = self.base.vertex(g, v, split)
        return Cost(c.bytes / max(_ranks(v, split), 1), c.calls)

    def edge(self, g, e, su, sv):
        c = self.base.edge(g, e, su, sv)
        return Cost(c.bytes / max(_ranks(g.vertices[e.dst], sv), 1), c.calls)

    def edge_costs(self, g, e, sus, svs):
        import numpy as np
        b = self.base.edge_costs(g, e, sus, svs)           # bytes (the base's value)
        p = np.array([max(_ranks(g.vertices[e.dst], sv), 1) for sv in svs], dtype=float)[None, :]
        return self.alpha * (b > 0) + self.beta * b / p

    def fits(self, v, split):
        return self.base.fits(v, split)

    @classmethod
    def from_file(cls, path: Optional[str] = None, **kw) -> "AlphaBetaModel":
        with open(path or _calibration_path()) as f:
            d = json.load(f)
        return cls(alpha=d["alpha"], beta=d["beta"], **kw)


def _calibration_path() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "distsdfg", "calibration.json")


def calibrate(comm=None, *, sizes=(8, 1 << 20), repeats: int = 20, path: Optional[str] = None) -> Dict[str, float]:
    """Fit ``alpha`` and ``beta`` from timed Allreduce and Alltoall calls (collective over ``comm``).

    Returns ``{"alpha": s, "beta": s/byte, "ranks": P}``; rank 0 also writes it to ``path``
    (default ``~/.cache/distsdfg/calibration.json``), which ``AlphaBetaModel.from_file`` reads.
    """
    import time

    import numpy as np
    from mpi4py import MPI
    comm = comm or MPI.COMM_WORLD
    times = []
    for nbytes in sizes:
        n = max(1, nbytes // 8)
        a, b = np.ones(n), np.empty(n)
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(repeats):
            comm.Allreduce(a, b)
        times.append((time.perf_counter() - t0) / repeats)
    times = [comm.allreduce(t, op=MPI.MAX) for t in times]
    (s0, s1), (t0, t1) = sizes, times
    P = comm.size
    moved0, moved1 = [2 * (P - 1) / max(P, 1) * s for s in (s0, s1)]
    beta = max((t1 - t0) / max(moved1 - moved0, 1), 1e-13)
    alpha = max(t0 - beta * moved0, 1e-8)
    out = {"alpha": float(alpha), "beta": float(beta), "ranks": P}
    if comm.rank == 0:
        p = path or _calibration_path()
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            json.dump(out, f)
    return out


def get_model(model, *, inputs: str = "root", memory_limit: Optional[int] = None) -> CostModel:
    """A CostModel from a name ('bytes', 'paper', 'alpha-beta') or an instance."""
    if isinstance(model, CostModel):
        return model
    if model in (None, "bytes"):
        return BytesModel(inputs=inputs, memory_limit=memory_limit)
    if model == "paper":
        return PaperModel(inputs="distributed", memory_limit=memory_limit)
    if model == "alpha-beta":
        base = BytesModel(inputs=inputs, memory_limit=memory_limit)
        try:
            return AlphaBetaModel.from_file(base=base)
        except OSError:
            return AlphaBetaModel(base=base)
    from .errors import OptionError
    raise OptionError(f"unknown cost model {model!r}: use 'bytes', 'paper', 'alpha-beta' or a CostModel")


def calibrate_main(path: Optional[str] = None) -> None:
    """What ``distsdfg calibrate`` runs on every rank under mpiexec."""
    result = calibrate(path=path or None)
    from mpi4py import MPI
    if MPI.COMM_WORLD.rank == 0:
        print(f"alpha = {result['alpha']:.3e} s per call, beta = {result['beta']:.3e} s per byte "
              f"({result['ranks']} ranks)")
