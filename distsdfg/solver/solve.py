"""The solver: a lowered program's symbolic steps -> concrete per-rank blocks and messages.

``solve_plan`` solves every step of a ``Lowered`` record for concrete sizes and a communicator
size: the homes first (``homes.solve_homes``: owner blocks grown to cover each array), then each step
(``solve_step``: per-rank blocks and the partition/replicate sub-grids of thesis 5.1; grid-to-grid
steps through ``redistribute.plan_redistribution``). ``comm_steps`` lists the MPI calls a solved
step makes and their bytes. ``plan.symbol_values`` / ``plan.given_values`` build the size symbols'
values a solve needs. Nothing here runs MPI or compiles: the report, the placement layouts, the
predictor and the runtime all solve through this module.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from dace.sdfg import SDFG

from .. import errors
from ..geometry.boxes import common_refinement, intersect, reshape_alloc, reshape_box
from ..geometry.boxindex import any_overlap
from ..checks import require_sdfg
from ..errors import DistributedLoweringError, ScheduleError, SizeError
from ..values.codes import Flag
from ..values.modes import Collective, StepKind
from ..values.plan import (F_ACC, F_MASK, F_MERGE, F_PAD, F_REPL, CommStep, ConcreteStep, RankBlock, StepSpec, evaluate,
                           given_values, symbol_values)
from .redistribute import CommPlan, plan_redistribution
from .homes import _all_blocks, _box, _home_blocks, grid_coords, solve_homes

__all__ = ["solve_plan", "solve_homes", "solve_step", "solve_redist", "ConcreteRedist", "comm_steps", "lowered_of",
           "planned", "symbol_values", "given_values", "grid_coords"]


@dataclasses.dataclass(frozen=True)
class ConcreteRedist:
    """A grid-to-grid step solved for concrete sizes: both layouts and the CommPlan between them."""
    spec: StepSpec
    nranks: int
    global_shape: Tuple[int, ...]
    src_lshapes: Tuple[Tuple[int, ...], ...]     # per rank: the local buffers' shapes
    dst_lshapes: Tuple[Tuple[int, ...], ...]
    src_blocks: Tuple[RankBlock, ...]
    dst_blocks: Tuple[RankBlock, ...]
    plan: CommPlan


def _layout_blocks(lay, array: str, values, nranks, gshape, homes=None):
    """Per-rank blocks of a layout in the array's coordinates, and per rank the local buffer's shape."""
    blocks, lshape = _unclipped_blocks(lay, array, values, nranks, gshape, homes)
    if not lay.clip:
        return blocks, lshape
    lo = tuple(evaluate(b, values) for b, _ in lay.clip)
    box = (lo, tuple(evaluate(e, values) + 1 - a for a, (_, e) in zip(lo, lay.clip)))
    out = []
    for b in blocks:
        cut = intersect(_box(b), box)
        out.append(RankBlock(b.origin, cut[0], cut[1]) if cut is not None
                   else RankBlock(b.origin, (0,) * len(gshape), (0,) * len(gshape)))
    return tuple(out), lshape


def _splits_that_work(vshape, gshape, lshape) -> str:
    """The remedy for a split of a reshaped view whose blocks are no boxes of the array: for the one
    view dimension split, the numbers of parts whose every block is one ((2, 3) merged to 6: 1, 2
    or 6 parts; 3 parts give the block 2:4, which crosses a row of 3); else the general rule."""
    split = [d for d, (n, v) in enumerate(zip(lshape, vshape)) if n < v]
    if len(split) != 1:
        return "split the merged dimensions in whole rows of their inner dimensions, or not at all"
    d, v = split[0], vshape[split[0]]
    good = []
    for parts in range(1, v + 1):
        step = -(-v // parts)
        try:
            for lo in range(0, v, step):
                origin = tuple(lo if k == d else 0 for k in range(len(vshape)))
                size = tuple(min(step, v - lo) if k == d else vshape[k] for k in range(len(vshape)))
                reshape_box((origin, size), vshape, gshape)
                reshape_alloc((origin, tuple(step if k == d else vshape[k] for k in range(len(vshape)))),
                              vshape, gshape)
        except ValueError:
            continue
        good.append(parts)
    return (f"split dimension {d} of the view (extent {v}) into one of {good} parts (blocks that are whole rows "
            f"of the merged inner dimensions, or lie within one), or not at all")


def _unclipped_blocks(lay, array, values, nranks, gshape, homes):
    if lay.home:
        return _home_blocks(lay, values, nranks, gshape, homes or {})
    lshape = tuple(evaluate(s, values) for s in lay.local_shape)
    blocks = _all_blocks(lay, values, nranks,
                         tuple(evaluate(s, values) for s in lay.view_shape) if lay.view_shape else gshape)
    if not lay.view_shape:
        return tuple(blocks), (lshape,) * nranks
    vshape = tuple(evaluate(s, values) for s in lay.view_shape)
    if vshape == tuple(gshape):          # a view of the array's own shape: its blocks are the array's
        return tuple(blocks), (lshape,) * nranks
    if math.prod(vshape) != math.prod(gshape):
        raise SizeError(f"`{array}` of shape {gshape} is read or written by `{lay.kernel_label}` through a reshape to "
                        f"{vshape} ({' x '.join(lay.view_shape)}), which has {math.prod(vshape)} elements, not "
                        f"{math.prod(gshape)}: the sizes given do not agree with the program's reshape; pass sizes "
                        f"for which it is one (e.g. E == H * EH)")
    out, shapes = [], set()
    seen: Dict[RankBlock, RankBlock] = {}         # replicated ranks share blocks: reshape each one once
    empty = RankBlock((0,) * len(gshape), (0,) * len(gshape), (0,) * len(gshape))
    for q, b in enumerate(blocks):
        if b in seen:
            out.append(seen[b])
            continue
        try:
            if _box(b) is None:
                out.append(empty)
                continue
            alloc = reshape_alloc((b.origin, lshape), vshape, gshape)
            box = reshape_box(_box(b), vshape, gshape)
        except ValueError as exc:
            raise ScheduleError(
                f"`{array}` is used through the reshape {vshape} by `{lay.kernel_label}` (grid {lay.grid}), and the "
                f"block of rank {q} is not a block of the array's shape {gshape} ({exc}); "
                f"{_splits_that_work(vshape, gshape, lshape)}") from None
        shapes.add(alloc[1])
        seen[b] = RankBlock(alloc[0], box[0], box[1])
        out.append(seen[b])
    if len(shapes) > 1:
        raise ScheduleError(f"`{array}` through the reshape {vshape} by `{lay.kernel_label}` gives ranks local blocks "
                            f"of different shapes {sorted(shapes)}; use a grid that divides the reshaped dimensions "
                            f"evenly")
    return tuple(out), (shapes.pop() if shapes else tuple(1 for _ in gshape),) * nranks


def solve_redist(spec: StepSpec, values: Dict[str, int], nranks: int, homes=None,
                 rank: Optional[int] = None) -> ConcreteRedist:
    src = spec.source
    gshape = tuple(evaluate(s, values) for s in spec.global_shape)
    try:
        sblocks, slshape = _layout_blocks(src, spec.array, values, nranks, gshape, homes)
        dblocks, dlshape = _layout_blocks(spec.layout, spec.array, values, nranks, gshape, homes)
        grids = {"src_grid": tuple(src.grid), "dst_grid": tuple(spec.grid)}
    except ScheduleError:
        refined = _refined_layouts(spec, values, nranks, gshape, homes)
        if refined is None:
            raise
        gshape, sblocks, slshape, dblocks, dlshape = refined
        grids = {}          # blocks of a refinement of the array's shape: no placement of the array
    plan = plan_redistribution(spec.array, [_box(b) for b in sblocks], [_box(b) for b in dblocks], src.op,
                               spec.itemsize, inplace=spec.inplace, rank=rank)
    if grids:
        plan = dataclasses.replace(plan, **grids)
    return ConcreteRedist(spec, nranks, gshape, slshape, dlshape, sblocks, dblocks, plan)


def _refined_layouts(spec: StepSpec, values, nranks, ashape, homes=None):
    """Both layouts of a grid-to-grid step in the common refinement of the array's shape and the
    views they use (``boxes.common_refinement``), where a block of one view is no block of the
    array: the fused QKV product's column blocks (or its home's) and the attention's (heads x
    q/k columns) blocks of its ``(B, S, H, 3 E_H)`` view are both blocks of that refinement.
    None where there is none (or a layout is clipped)."""
    lays = (spec.source, spec.layout)
    if any(lay.clip for lay in lays):
        return None
    own = [tuple(evaluate(n, values) for n in lay.view_shape) if lay.view_shape and not lay.home else ashape
           for lay in lays]
    fine = common_refinement([ashape] + own)
    if fine is None:
        return None
    zero = (0,) * len(fine)
    out = [fine]
    for lay, shape in zip(lays, own):
        if lay.home:         # per rank the home's block and buffer, in the array's coordinates
            hblocks, hshapes = _home_blocks(lay, values, nranks, ashape, homes or {})
            pairs = list(zip(hblocks, hshapes))
        else:
            lshape = tuple(evaluate(n, values) for n in lay.local_shape)
            pairs = [(b, lshape) for b in _all_blocks(lay, values, nranks, shape)]
        blocks, shapes = [], []
        for b, lshape in pairs:
            if _box(b) is None:
                blocks.append(RankBlock(zero, zero, zero))
                shapes.append(zero if lay.home and 0 in lshape else tuple(1 for _ in fine))
                continue
            try:
                alloc = reshape_alloc((b.origin, lshape), shape, fine)
                box = reshape_box(_box(b), shape, fine)
            except ValueError:
                return None
            blocks.append(RankBlock(alloc[0], box[0], box[1]))
            shapes.append(alloc[1])
        used = {sh for sh, b in zip(shapes, blocks) if b.count and all(b.size)}
        if len(used) == 1 and not lay.home:           # ranks without a block keep the common buffer shape
            shapes = [next(iter(used))] * len(shapes)
        out += [tuple(blocks), tuple(shapes)]
    return tuple(out)


def solve_step(spec: StepSpec, values: Dict[str, int], nranks: int, homes=None, rank: Optional[int] = None):
    """Per-rank blocks, and the partition/replicate sub-grids that move them (thesis 5.1).

    ``homes``: the solved homes (``solve_homes``) the step's layouts may refer to. ``rank``: a
    grid-to-grid step keeps only the messages that rank sends or receives (``plan_redistribution``)."""
    if spec.kind == StepKind.REDIST:
        return solve_redist(spec, values, nranks, homes, rank)
    gshape = tuple(evaluate(s, values) for s in spec.global_shape)
    lshape = tuple(evaluate(s, values) for s in spec.local_shape)
    grid = spec.grid
    blocks = _all_blocks(spec, values, nranks, gshape)
    pcolor, pkey, rcolor, rkey, repl_axes = _sub_grids(blocks, grid, nranks)
    flags = F_REPL if repl_axes else Flag(0)
    if spec.acc:
        flags |= F_ACC
    part = [blocks[q] for q in range(nranks) if pcolor[q] == 0 and blocks[q].count and all(blocks[q].size)]
    overlap = _overlapping(part)
    if spec.kind == StepKind.GATHER and not spec.exact and overlap:
        flags |= F_MERGE
    if spec.kind == StepKind.REDUCE and not spec.acc and overlap:
        flags |= F_MASK
    if spec.kind == StepKind.FILL and spec.pad:
        flags |= F_PAD
    strides = tuple(evaluate(x, values) for x in spec.global_strides) if spec.global_strides else ()
    return ConcreteStep(spec, nranks, gshape, lshape, tuple(blocks), tuple(pcolor), tuple(pkey), tuple(rcolor),
                        tuple(rkey), int(flags), strides)


def _sub_grids(blocks: Sequence[RankBlock], grid: Tuple[int, ...], nranks: int):
    """The partition and replicate sub-communicators of a step (thesis 5.1), for all ranks at once.

    A grid axis along which some rank's block changes partitions the array; the other axes of
    more than one rank replicate it. ``pcolor``/``pkey``: the partition group (the ranks at
    coordinate 0 of every replicate axis, in rank order); ``rcolor``/``rkey``: per partition
    cell, the ranks that share its block. Ranks outside the grid are in neither (-1)."""
    size = int(np.prod(grid, dtype=np.int64)) if grid else 1
    inside = min(size, nranks)
    if inside < size:
        raise ValueError(f"a step on grid {grid} needs {size} ranks, the communicator has {nranks}")
    width = len(blocks[0].origin + blocks[0].start + blocks[0].size) if size else 0
    table = np.array([b.origin + b.start + b.size for b in blocks[:size]], dtype=np.int64).reshape(size, width)
    cells = table.T.reshape((table.shape[1],) + tuple(grid))
    dep = [a for a, g in enumerate(grid)
           if g > 1 and cells.size and bool(np.any(cells != np.take(cells, [0], axis=1 + a)))]
    repl_axes = [a for a, g in enumerate(grid) if g > 1 and a not in dep]
    coords = np.unravel_index(np.arange(size), tuple(grid)) if grid else ()
    in_part = np.ones(size, dtype=bool)
    for a in repl_axes:
        in_part &= coords[a] == 0
    pcolor = np.where(in_part, 0, -1)
    pkey = np.where(in_part, np.cumsum(in_part) - 1, 0)
    if repl_axes:
        rcolor = (np.ravel_multi_index([coords[a] for a in dep], [grid[a] for a in dep]) if dep
                  else np.zeros(size, dtype=np.int64))
        rkey = np.ravel_multi_index([coords[a] for a in repl_axes], [grid[a] for a in repl_axes])
    else:
        rcolor, rkey = np.full(size, -1), np.zeros(size, dtype=np.int64)
    pad = nranks - size
    return (tuple(pcolor.tolist()) + (-1,) * pad, tuple(pkey.tolist()) + (0,) * pad,
            tuple(rcolor.tolist()) + (-1,) * pad, tuple(rkey.tolist()) + (0,) * pad, repl_axes)


def _overlapping(blocks: List[RankBlock]) -> bool:
    return any_overlap([(b.start, b.size) for b in blocks])


def comm_steps(cs, values: Optional[Dict[str, int]] = None) -> List[CommStep]:
    """The MPI calls a concrete step makes, with bytes sent and received per rank (self excluded).

    Calls that move nothing (a scatter to rank 0 alone, a local copy) are left out. Each call's
    ``repeats`` is the step's trip count, evaluated with ``values`` where they determine it.
    """
    out = [c for c in _comm_steps(cs) if any(c.sent) or any(c.received)]
    spec = cs.spec
    if spec.repeats == "1" and not spec.at_most:
        return out
    try:
        rep = max(evaluate(spec.repeats, values or {}), 0)
    except (KeyError, TypeError, ValueError):
        rep = spec.repeats
    return [dataclasses.replace(c, repeats=rep, at_most=spec.at_most) for c in out]


def _comm_steps(cs) -> List[CommStep]:
    if isinstance(cs, ConcreteRedist):
        return cs.plan.comm_steps()
    spec, P, item = cs.spec, cs.nranks, cs.spec.itemsize
    if spec.kind == StepKind.FILL:
        return []
    nbytes = [b.count * item if all(b.size) else 0 for b in cs.blocks]
    part = [q for q in range(P) if cs.pcolor[q] == 0]
    groups: Dict[int, List[int]] = {}
    for q in range(P):
        if cs.rcolor[q] >= 0:
            groups.setdefault(cs.rcolor[q], []).append(q)
    for g in groups.values():
        g.sort(key=lambda q: cs.rkey[q])

    def p2root(name, to_root):
        sent, recv = [0] * P, [0] * P
        for q in part:
            if q == 0:
                continue
            if to_root:
                sent[q] += nbytes[q]; recv[0] += nbytes[q]
            else:
                recv[q] += nbytes[q]; sent[0] += nbytes[q]
        return CommStep(name, spec.array, tuple(sent), tuple(recv))

    def subgrid(name, to_root):
        sent, recv = [0] * P, [0] * P
        for members in groups.values():
            head = members[0]
            for q in members[1:]:
                if to_root:
                    sent[q] += nbytes[q]; recv[head] += nbytes[q]
                else:
                    recv[q] += nbytes[q]; sent[head] += nbytes[q]
        return CommStep(name, spec.array, tuple(sent), tuple(recv))

    if spec.kind == StepKind.SCATTER:
        out = [p2root(Collective.SCATTERV, False)]
        if cs.uses_replicate:
            out.append(subgrid(Collective.BCAST, False))
        return out
    if spec.kind == StepKind.GATHER:
        return [p2root(Collective.GATHERV, True)]
    out = []
    if cs.uses_replicate:
        out.append(subgrid(Collective.REDUCE, True))
    out.append(p2root(Collective.GATHERV, True))
    return out


def lowered_of(sdfg: SDFG):
    """The ``Lowered`` record ``distsdfg.lower`` attached to ``sdfg``; refuses an SDFG not lowered
    and one planned at its first call (``distsdfg.runtime.deferred``), which needs sizes first."""
    require_sdfg(sdfg, "distsdfg")
    low = getattr(sdfg, "_distsdfg", None)
    if low is None:
        raise errors.LoweredStateError(f"SDFG `{sdfg.name}` has not been lowered; call distsdfg.lower(sdfg, schedule) "
                                       f"first")
    if getattr(low, "deferred", False):     # distsdfg.runtime.deferred: planned at the first call
        raise low.needs_sizes()
    return low


def planned(sdfg: SDFG, values: Dict[str, int], what: str) -> SDFG:
    """``sdfg`` when it is lowered; for a program planned at its first call (``deferred.Deferred``),
    a copy planned and lowered for ``values`` (``what`` names the caller in the refusal when a size
    is missing)."""
    low = getattr(sdfg, "_distsdfg", None)
    return low.copy_for(values, what) if getattr(low, "deferred", False) else sdfg


def solve_plan(low, values: Dict[str, int], nranks: int, rank: Optional[int] = None) -> List[ConcreteStep]:
    """Every step of the lowering ``low`` for concrete sizes on ``nranks`` ranks; ``rank``: as that
    rank needs them at call time (grid-to-grid steps keep only its own messages, found without
    visiting every pair of ranks)."""
    for key, axis, extent, parts in low.even_checks:
        n = evaluate(extent, values)
        if n % parts:
            raise DistributedLoweringError(
                f"map `{key}` axis {axis} (extent {n}) is split {parts} ways, which does not divide {n}; this "
                f"library node reduces over the axis and needs even blocks: use sizes or a grid that divide evenly")
    if getattr(low, "data_bounds", None):    # bounds no inspection gave: the whole arrays (an upper bound)
        from .inspector import complete
        values = complete(low.data_bounds, values, nranks)
    homes = solve_homes(low.homes, values, nranks)
    return [solve_step(s, values, nranks, homes, rank) for s in low.steps]
