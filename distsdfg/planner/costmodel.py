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
  ``beta`` per byte a rank moves; ``calibration.calibrate`` measures both on the machine.

The default model of ``auto_schedule``, :class:`~.timemodel.TimeModel`, adds each rank's compute
to the alpha-beta time of what BytesModel counts; ``timemodel.get_model`` picks one by name.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..geometry.boxes import dim_groups
from ..analysis.eingraph import Edge, EinGraph, Operand, Vertex
from ..values.modes import Placement, StepKind
from .layoutcost import Split, layout_bytes, layout_matrix, root_bytes, signature, strided_elements

__all__ = ["cost_join", "cost_agg", "cost_repart", "CostModel", "PaperModel", "BytesModel", "AlphaBetaModel",
           "Split"]


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
    """Bytes moved and collective calls made (and, for :class:`~.timemodel.TimeModel`, seconds)."""
    bytes: float = 0.0
    calls: int = 0
    seconds: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.bytes + other.bytes, self.calls + other.calls, self.seconds + other.seconds)


ZERO = Cost()


class CostModel:
    """Prices a vertex and an edge; ``value`` turns a Cost into the number the search minimises.

    ``tie`` (optional) prices a vertex's local work that moves no bytes; the searchers use it only
    to choose among schedules of equal ``value`` (``tie_scale``: the largest total it may add, below
    the smallest difference of two values; 0 turns it off)."""
    name = "model"
    tie_scale = 0.0

    def __init__(self, *, inputs: Union[Placement, str] = Placement.ROOT, memory_limit: Optional[int] = None):
        self.inputs = Placement.parse(inputs, what="inputs")     # scattered from rank 0, or already in place
        self.memory_limit = memory_limit

    def value(self, c: Cost) -> float:
        return c.bytes

    def fits(self, v: Vertex, split: Split) -> bool:
        if self.memory_limit is None:
            return True
        return sum(block_size(o, split) * o.itemsize for o in v.inputs + v.outputs) <= self.memory_limit

    def vertex(self, g: EinGraph, v: Vertex, split: Split) -> Cost:
        raise NotImplementedError

    def tie(self, g: EinGraph, v: Vertex, split: Split) -> float:
        return 0.0

    def edge(self, g: EinGraph, e: Edge, su: Split, sv: Split) -> Cost:
        raise NotImplementedError

    def edge_costs(self, g: EinGraph, e: Edge, sus: Sequence[Split], svs: Sequence[Split]):
        """``value`` of the edge for every pair of producer and consumer splits, as a matrix."""
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
    tie_scale = 0.5       # values are whole bytes: ties add less than one

    def __init__(self, **kw):
        super().__init__(**kw)
        self._pairs: Dict[Tuple, int] = {}

    def tie(self, g, v, split):
        """Bytes rank 0 packs or unpacks (scattered and gathered blocks that are not contiguous)
        plus the bytes partial sums add up: among schedules moving equal bytes, the one that
        splits the outermost dimension and adds no reduction is the faster (docs/planner.md)."""
        p = _ranks(v, split)
        n = 0
        if self.inputs == Placement.ROOT:
            for arr in g.program_inputs.get(v.index, []):
                o = g.operand(v.index, arr, output=False)
                n += strided_elements(signature(v, split, o, partial=False), tuple(o.shape), p) * o.itemsize
            for arr in g.program_outputs.get(v.index, []):
                o = g.operand(v.index, arr, output=True)
                n += strided_elements(signature(v, split, o, partial=v.partial), tuple(o.shape), p) * o.itemsize
        k = math.prod(split.get(l, 1) for l in v.agg)
        if v.partial and k > 1:
            n += sum(block_size(o, split) * o.itemsize for o in v.outputs) * (k - 1) * (p // k)
        return float(n)

    def vertex(self, g, v, split):
        p = _ranks(v, split)
        c = ZERO
        if self.inputs == Placement.ROOT:
            for arr in g.program_inputs.get(v.index, []):
                o = g.operand(v.index, arr, output=False)
                n = root_bytes(signature(v, split, o, partial=False), o.shape, p, StepKind.SCATTER)
                c += Cost(n * o.itemsize, int(n > 0))
        for arr in g.program_outputs.get(v.index, []):
            o = g.operand(v.index, arr, output=True)
            sig = signature(v, split, o, partial=v.partial)
            reduce = root_bytes(sig, o.shape, p, StepKind.REDUCE)
            gather = root_bytes(sig, o.shape, p, StepKind.GATHER) if self.inputs == Placement.ROOT else 0
            c += Cost((reduce + gather) * o.itemsize, int(reduce > 0) + int(gather > 0))
        return c

    def edge(self, g, e, su, sv):
        n = self.edge_costs(g, e, [su], [sv])[0, 0]
        return Cost(float(n), int(n > 0))

    def edge_costs(self, g, e, sus, svs):
        u, v = g.vertices[e.src], g.vertices[e.dst]
        prod, cons = e.producer(g), e.consumer(g)
        if e.acc and u.constant and self.inputs == Placement.ROOT:   # reset to the identity: every rank fills its block
            return np.zeros((len(sus), len(svs)))
        # Distributed placement keeps arrays that cross states in homes: a reset whose blocks are
        # not the accumulator's is sent to the owners like any other write, so it is priced.
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
    """``$DISTSDFG_CALIBRATION``, else ``~/.cache/distsdfg/calibration.json`` (``distsdfg calibrate`` writes it)."""
    return os.environ.get("DISTSDFG_CALIBRATION") or os.path.join(os.path.expanduser("~"), ".cache", "distsdfg",
                                                                  "calibration.json")
