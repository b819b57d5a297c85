"""Schedules from array shardings: say how some arrays are split, get a grid for every kernel.

``schedule_from_shardings(sdfg, {"x": (4, 1)})`` is the data-parallel schedule of a network
whose input ``x`` has the batch first; ``{"fc1_weight": (4, 1), "fc2_weight": (1, 4)}`` is
Megatron's column- then row-parallel MLP. A key that names a kernel (map key or label)
instead of an array fixes that kernel's grid, e.g. ``"sgd_fc1_weight": (4, 1)`` to split an
optimizer update under a batch sharding. The shardings are propagated along the program's
EinGraph (``eingraph.build_graph``) in program order: a kernel splits each of its map
parameters as the first operand that has a split dimension indexed by that parameter says
(annotated arrays first, then the kernel's other inputs in order, then its outputs), as long
as the kernel's grid stays within ``nprocs`` ranks and a library node's reduction axes split
evenly; its outputs then carry the kernel's split to later kernels (through reshape views
too). A backward pass then lets a kernel that touches no split array compute its output the
way its next reader reads it (unless every rank would then read whole an input computed on rank
0). Kernels reached by neither keep a grid of ones (rank 0). This is sharding
propagation as GSPMD does it, but it yields a *work* schedule: the lowering still derives and
solves every array's communication from it.
"""
from __future__ import annotations

import itertools
import math
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from dace.sdfg import SDFG

from .. import dace_compat as dc
from ..checks import positive_int, require_sdfg
from ..analysis.eingraph import Operand, build_graph
from ..analysis.tiling import block_span
from ..geometry.boxes import reshape_box
from ..errors import ScheduleError
from ..values.schedule import Schedule

__all__ = ["schedule_from_shardings", "reshape_split", "blocks_through_view"]

Split = Tuple[int, ...]


def _groups(a: Sequence[int], b: Sequence[int]) -> List[Tuple[List[int], List[int]]]:
    """Pair up dimensions of two shapes of equal size that a row-major reshape maps onto each other."""
    out, i, j = [], 0, 0
    while i < len(a) or j < len(b):
        ga, gb = [], []
        pa = pb = 1
        if i < len(a):
            ga.append(i); pa *= a[i]; i += 1          # noqa: E702
        if j < len(b):
            gb.append(j); pb *= b[j]; j += 1          # noqa: E702
        while pa != pb and (i < len(a) or j < len(b)):
            if pa < pb and i < len(a):
                ga.append(i); pa *= a[i]; i += 1      # noqa: E702
            elif j < len(b):
                gb.append(j); pb *= b[j]; j += 1      # noqa: E702
            else:
                ga.append(i); pa *= a[i]; i += 1      # noqa: E702
        out.append((ga, gb))
    return out


def blocks_through_view(view_shape: Sequence[int], split: Split, shape: Sequence[int]) -> bool:
    """Whether every rank's block of an array of ``shape`` read through the reshape ``view_shape`` split
    ``split`` ways is a block of ``shape``: its elements (``block_span``'s blocks, and the local buffer of
    the full block size) form a box there, as the lowering requires (``solver.solve``). A split that
    cuts a merged dimension across its boundaries (12 columns 4 ways seen as ``(3, 4)``), or whose last
    block overhangs a merged dimension (5 rows 2 ways: blocks of 3), is not."""
    view_shape, shape = tuple(int(n) for n in view_shape), tuple(int(n) for n in shape)
    if view_shape == shape or all(w == 1 for w in split):
        return True
    if math.prod(view_shape) != math.prod(shape):
        return False
    spans = [[block_span(n, w, r) for r in range(w)] for n, w in zip(view_shape, split)]
    for coords in itertools.product(*(range(w) for w in split)):
        parts = [spans[d][r] for d, r in enumerate(coords)]
        if any(size == 0 for _, size in parts):
            continue
        full = tuple(-(-n // w) for n, w in zip(view_shape, split))
        origin = tuple(start for start, _ in parts)
        try:
            if any(o + b > n for o, b, n in zip(origin, full, view_shape)):
                return False
            reshape_box((origin, full), view_shape, shape)
            reshape_box((origin, tuple(size for _, size in parts)), view_shape, shape)
        except ValueError:
            return False
    return True


def reshape_split(shape: Sequence[int], split: Split, new_shape: Sequence[int]) -> Split:
    """The split of a reshaped array: a split dimension's ways go to the outermost dimension of
    its group in the new shape when that divides; splits the reshape would cut are dropped."""
    if math.prod(shape) != math.prod(new_shape):
        return tuple(1 for _ in new_shape)
    out = [1] * len(new_shape)
    for ga, gb in _groups(list(shape), list(new_shape)):
        ga = [d for d in ga if shape[d] != 1] or ga          # size-1 dimensions do not change the order
        gb = [d for d in gb if new_shape[d] != 1] or gb
        ways = [split[d] for d in ga if d < len(split)]
        if not gb or not ways or all(w == 1 for w in ways):
            continue
        if (ways[0] > 1 and all(w == 1 for w in ways[1:]) and shape[ga[0]] % ways[0] == 0
                and new_shape[gb[0]] % ways[0] == 0):     # equal contiguous chunks on both sides
            out[gb[0]] = ways[0]
    return tuple(out)


def schedule_from_shardings(sdfg: SDFG, shardings: Mapping[str, Sequence[int]], nprocs: Optional[int] = None,
                            **sizes) -> Schedule:
    """A schedule for ``sdfg`` that follows ``shardings`` (``{array: ways per dimension}``).

    ``nprocs`` bounds every kernel's grid (default: the largest sharding's product). Sizes of
    symbolic programs are passed as keywords, as for ``auto_schedule``."""
    require_sdfg(sdfg, "distsdfg.schedule_from_shardings")
    if nprocs is not None:
        nprocs = positive_int(nprocs, "schedule_from_shardings' nprocs")
    g = build_graph(sdfg, **sizes)
    views = dc.reshape_views(sdfg)
    root = lambda a: views.get(a, a)  # noqa: E731
    shapes: Dict[str, Tuple[int, ...]] = {}
    for v in g.vertices:
        for o in v.inputs + v.outputs:
            shapes.setdefault(o.array, o.shape)
    splits: Dict[str, Split] = {}
    fixed = {}
    kernel_names = {n for v in g.vertices for n in (v.key, v.label)}
    for arr, ways in shardings.items():
        try:
            ways = tuple(int(w) for w in ways)
        except (TypeError, ValueError):
            raise ScheduleError(f"sharding of `{arr}` is {ways!r}: give a tuple of integers, the ways each "
                                f"dimension is split, e.g. (4, 1)") from None
        if arr not in sdfg.arrays and arr in kernel_names:
            fixed[arr] = ways
            continue
        if arr not in sdfg.arrays:
            raise ScheduleError(f"sharding names `{arr}`, which is neither an array nor a kernel of the SDFG "
                                f"(arrays: {', '.join(sorted(a for a in sdfg.arrays if not sdfg.arrays[a].transient))})")
        ndim = len(sdfg.arrays[arr].shape)
        if len(ways) != ndim or any(w < 1 for w in ways):
            raise ScheduleError(f"sharding of `{arr}` is {ways}: give one positive number of ways per dimension "
                                f"({ndim} for shape {tuple(sdfg.arrays[arr].shape)})")
        splits[root(arr)] = ways if root(arr) == arr else reshape_split(shapes.get(arr, ()), ways,
                                                                          shapes.get(root(arr), ()))
    limit = nprocs or max((math.prod(w) for w in [*splits.values(), *fixed.values()]), default=1)
    annotated = {root(a) for a in shardings}

    def array_shape(r: str, fallback) -> Tuple[int, ...]:
        """The shape of the array ``r`` (a view's root, which no kernel may read as it is)."""
        if r in shapes:
            return shapes[r]
        try:
            return tuple(int(dc.evaluate(n, sizes)) for n in sdfg.arrays[r].shape)
        except (TypeError, ValueError, KeyError):       # symbolic and not given: as the view reads it
            return tuple(fallback)

    def split_of(o: Operand) -> Split:
        r = root(o.array)
        s = splits.get(r)
        if s is None:
            return tuple(1 for _ in o.shape)
        return s if r == o.array else reshape_split(shapes.get(r, o.shape), s, o.shape)

    def adopt(v, grid: Dict[str, int], o: Operand, split: Split) -> None:
        """Split ``v``'s parameters the way ``split`` splits operand ``o``, where it fits."""
        for label, ways in zip(o.labels, split):
            if ways == 1 or label is None or grid[label] != 1:
                continue
            bound = v.bound(label)
            if bound < ways or math.prod(grid.values()) * ways > limit:
                continue
            if label in v.even and bound % ways:
                continue
            grid[label] = ways
            if not all(blocks_through_view(u.shape, seen_by(v, grid, u), array_shape(root(u.array), u.shape))
                       for u in [*v.inputs, *v.outputs] if root(u.array) != u.array):
                grid[label] = 1         # a block of a view that is no block of the array: the lowering refuses it

    def seen_by(v, grid, o: Operand) -> Split:
        return tuple(grid.get(l, 1) if l is not None else 1 for l in o.labels)

    # Forward: kernels take their operands' splits; outputs carry the kernel's split on.
    chosen: Dict[int, Dict[str, int]] = {}
    for v in g.vertices:
        grid = {l: 1 for l in v.labels}
        given = fixed.get(v.key, fixed.get(v.label))
        if given is not None:
            if len(given) != len(v.labels):
                raise ScheduleError(f"kernel `{v.key}` has {len(v.labels)} parameters {v.labels}; its grid "
                                    f"{given} has {len(given)} entries")
            grid = dict(zip(v.labels, given))
        else:
            for o in sorted(v.inputs, key=lambda o: root(o.array) not in annotated) + list(v.outputs):
                adopt(v, grid, o, split_of(o))
        for o in v.outputs:
            s = seen_by(v, grid, o)
            r = root(o.array)
            splits[r] = s if r == o.array else reshape_split(o.shape, s, shapes.get(r, o.shape))
        chosen[v.index] = grid

    # Backward: a kernel still on rank 0 whose output the next reader reads split (an optimizer
    # update splitting a transposed gradient) computes that split itself instead, unless every
    # rank would then read whole an input that a kernel on rank 0 computes (a product contracting
    # over it): that input would travel to every rank, where on one rank (or on every rank, where
    # the lowering replicates the kernel: lowering/replicate.py) it is read in place.
    producer = {root(o.array): u.index for u in g.vertices for o in u.outputs}
    demand: Dict[str, Tuple[Operand, Split]] = {}
    for v in reversed(g.vertices):
        grid = chosen[v.index]
        if all(w == 1 for w in grid.values()) and v.key not in fixed and v.label not in fixed:
            trial = dict(grid)
            for o in v.outputs:
                want = demand.get(root(o.array))
                if want is not None and want[0].shape == o.shape:
                    adopt(v, trial, o, want[1])
            whole_from_root = any(all(w == 1 for w in seen_by(v, trial, o)) and root(o.array) in producer
                                  and all(w == 1 for w in chosen[producer[root(o.array)]].values())
                                  and producer[root(o.array)] < v.index for o in v.inputs)
            if not whole_from_root:
                grid.update(trial)
        for o in v.outputs:
            demand.pop(root(o.array), None)
        for o in v.inputs:
            s = seen_by(v, grid, o)
            if any(w > 1 for w in s):
                demand[root(o.array)] = (o, s)

    # Where the data lives: a kernel still on rank 0 that reads a program argument some split kernel
    # writes (a weight's transpose, when the update is split ZeRO-style) computes that split of it,
    # on the owners of the blocks, instead of fetching the blocks to rank 0; in program order, so
    # a chain of such kernels follows.
    homed = {r: s for r, s in splits.items() if any(w > 1 for w in s)
             and r in sdfg.arrays and not sdfg.arrays[r].transient}
    for v in g.vertices:
        grid = chosen[v.index]
        if any(w > 1 for w in grid.values()) or v.key in fixed or v.label in fixed:
            continue
        for o in v.inputs:
            r = root(o.array)
            if r in homed:
                adopt(v, grid, o, homed[r] if r == o.array else reshape_split(shapes.get(r, o.shape), homed[r],
                                                                              o.shape))
        if any(w > 1 for w in grid.values()):
            for o in v.outputs:
                homed[root(o.array)] = seen_by(v, grid, o)

    grids = {v.key: tuple(chosen[v.index][l] for l in v.labels) for v in g.vertices
             if any(w > 1 for w in chosen[v.index].values())}
    return Schedule.of(grids, sdfg=sdfg.name)
