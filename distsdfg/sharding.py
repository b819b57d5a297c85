"""Schedules from array shardings: say how some arrays are split, get a grid for every kernel.

``schedule_from_shardings(sdfg, {"x": (4, 1)})`` is the data-parallel schedule of a network
whose input ``x`` has the batch first; ``{"fc1_weight": (4, 1), "fc2_weight": (1, 4)}`` is
Megatron's column- then row-parallel MLP. The shardings are propagated along the program's
EinGraph (``eingraph.build_graph``) in program order: a kernel splits each of its map
parameters as the first operand that has a split dimension indexed by that parameter says
(annotated arrays first, then the kernel's other inputs in order, then its outputs), as long
as the kernel's grid stays within ``nprocs`` ranks and a library node's reduction axes split
evenly; its outputs then carry the kernel's split to later kernels (through reshape views
too). Kernels that touch no split array keep a grid of ones (rank 0). This is sharding
propagation as GSPMD does it, but it yields a *work* schedule: the lowering still derives and
solves every array's communication from it.
"""
from __future__ import annotations

import math
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from dace.sdfg import SDFG

from . import dace_compat as dc
from .eingraph import Operand, build_graph
from .errors import ScheduleError
from .schedule import Schedule

__all__ = ["schedule_from_shardings", "reshape_split"]

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


def reshape_split(shape: Sequence[int], split: Split, new_shape: Sequence[int]) -> Split:
    """The split of a reshaped array: a split dimension's ways go to the outermost dimension of
    its group in the new shape when that divides; splits the reshape would cut are dropped."""
    if math.prod(shape) != math.prod(new_shape):
        return tuple(1 for _ in new_shape)
    out = [1] * len(new_shape)
    for ga, gb in _groups(list(shape), list(new_shape)):
        ways = [split[d] for d in ga if d < len(split)]
        if not gb or not ways or all(w == 1 for w in ways):
            continue
        if ways[0] > 1 and all(w == 1 for w in ways[1:]) and new_shape[gb[0]] % ways[0] == 0:
            out[gb[0]] = ways[0]
    return tuple(out)


def schedule_from_shardings(sdfg: SDFG, shardings: Mapping[str, Sequence[int]], nprocs: Optional[int] = None,
                            **sizes) -> Schedule:
    """A schedule for ``sdfg`` that follows ``shardings`` (``{array: ways per dimension}``).

    ``nprocs`` bounds every kernel's grid (default: the largest sharding's product). Sizes of
    symbolic programs are passed as keywords, as for ``auto_schedule``."""
    g = build_graph(sdfg, **sizes)
    views = dc.reshape_views(sdfg)
    root = lambda a: views.get(a, a)  # noqa: E731
    shapes: Dict[str, Tuple[int, ...]] = {}
    for v in g.vertices:
        for o in v.inputs + v.outputs:
            shapes.setdefault(o.array, o.shape)
    splits: Dict[str, Split] = {}
    for arr, ways in shardings.items():
        ways = tuple(int(w) for w in ways)
        if arr not in sdfg.arrays:
            raise ScheduleError(f"sharding names array `{arr}`, which the SDFG does not have "
                                f"(arrays: {', '.join(sorted(a for a in sdfg.arrays if not sdfg.arrays[a].transient))})")
        ndim = len(sdfg.arrays[arr].shape)
        if len(ways) != ndim or any(w < 1 for w in ways):
            raise ScheduleError(f"sharding of `{arr}` is {ways}: give one positive number of ways per dimension "
                                f"({ndim} for shape {tuple(sdfg.arrays[arr].shape)})")
        splits[root(arr)] = ways if root(arr) == arr else reshape_split(shapes.get(arr, ()), ways,
                                                                          shapes.get(root(arr), ()))
    limit = nprocs or max((math.prod(w) for w in splits.values()), default=1)
    annotated = {root(a) for a in shardings}

    def split_of(o: Operand) -> Split:
        r = root(o.array)
        s = splits.get(r)
        if s is None:
            return tuple(1 for _ in o.shape)
        return s if r == o.array else reshape_split(shapes.get(r, o.shape), s, o.shape)

    grids: Dict[str, Tuple[int, ...]] = {}
    for v in g.vertices:
        grid = {l: 1 for l in v.labels}
        ordered = sorted(v.inputs, key=lambda o: root(o.array) not in annotated) + list(v.outputs)
        for o in ordered:
            for d, (label, ways) in enumerate(zip(o.labels, split_of(o))):
                if ways == 1 or label is None or grid[label] != 1:
                    continue
                bound = v.bound(label)
                if bound < ways or math.prod(grid.values()) * ways > limit:
                    continue
                if label in v.even and bound % ways:
                    continue
                grid[label] = ways
        for o in v.outputs:
            s = tuple(grid.get(l, 1) if l is not None else 1 for l in o.labels)
            r = root(o.array)
            splits[r] = s if r == o.array else reshape_split(o.shape, s, shapes.get(r, o.shape))
        if any(w > 1 for w in grid.values()):
            grids[v.key] = tuple(grid[l] for l in v.labels)
    return Schedule.of(grids, sdfg=sdfg.name)
