"""Placements: how an array's distributed copy lies on each axis of a process grid.

The vocabulary of PyTorch's DTensor and of seed 003 (the sharding notation): per grid axis,

- ``Shard(d)`` (``S<d>``): ranks along the axis hold different blocks of the array's dimension ``d``;
- ``Replicate()`` (``R``): ranks along the axis hold the same block;
- ``Partial(op)`` (``P+``, ``P*``, ``Pmax``, ``Pmin``): ranks along the axis hold the same block of
  partial results still to be combined with ``op``;
- ``Shard((d1, d2))`` (``S{d1,d2}``): blocks of a merged dimension (e.g. batch x heads), in
  row-major order along the axis;
- ``Irregular()`` (``X``): none of these (e.g. blocks that overlap or do not follow each other).

A grid's placements read as one string, axis by axis: a matrix split by rows over the first axis
of a 2 x 2 grid and replicated over the second is ``S0R``; ``S0R -> RR`` is an all-gather over the
first axis. Placements are computed from the blocks ranks hold (:func:`placements_of_blocks`),
never stored: the blocks are the plan, the placement is how it reads.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Optional, Sequence, Tuple, Union

_OPS = {"sum": "+", "prod": "*", "max": "max", "min": "min"}


@dataclasses.dataclass(frozen=True)
class Shard:
    """Blocks of dimension ``dim``; ``Shard((0, 1))``: blocks of dimensions 0 and 1 together, one
    rank after the other in row-major order (a split of the merged dimension, e.g. batch x heads)."""
    dims: Union[int, Tuple[int, ...]]

    def __post_init__(self):
        if isinstance(self.dims, int):
            object.__setattr__(self, "dims", (self.dims,))

    @property
    def dim(self) -> int:
        return self.dims[0]

    def __str__(self):
        return f"S{self.dims[0]}" if len(self.dims) == 1 else "S{" + ",".join(map(str, self.dims)) + "}"


@dataclasses.dataclass(frozen=True)
class Replicate:
    def __str__(self):
        return "R"


@dataclasses.dataclass(frozen=True)
class Partial:
    op: str = "sum"

    def __str__(self):
        return "P" + _OPS.get(self.op, self.op)


@dataclasses.dataclass(frozen=True)
class Irregular:
    def __str__(self):
        return "X"


Placement = Union[Shard, Replicate, Partial, Irregular]

_TOKEN = re.compile(r"S(\d+)|S\{(\d+(?:,\d+)*)\}|R|P(\+|\*|max|min)|X")


def format_placements(placements: Sequence[Placement]) -> str:
    """``(Shard(0), Replicate())`` -> ``'S0R'``; no grid axes -> ``'-'``."""
    return "".join(str(p) for p in placements) or "-"


def parse_placements(text: str) -> Tuple[Placement, ...]:
    """The inverse of :func:`format_placements` (``'S0R'``, ``'P+S1'``, ``'-'``)."""
    if text == "-":
        return ()
    out, pos = [], 0
    ops = {v: k for k, v in _OPS.items()}
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"not a placement string: {text!r} (at {text[pos:]!r}); use S<dim>, R, P+, P*, Pmax, "
                             f"Pmin or X per grid axis")
        if m.group(1) is not None:
            out.append(Shard(int(m.group(1))))
        elif m.group(2) is not None:
            out.append(Shard(tuple(int(d) for d in m.group(2).split(","))))
        elif m.group(3) is not None:
            out.append(Partial(ops[m.group(3)]))
        elif m.group(0) == "R":
            out.append(Replicate())
        else:
            out.append(Irregular())
        pos = m.end()
    return tuple(out)


def grid_coords(q: int, grid: Sequence[int]) -> Optional[Tuple[int, ...]]:
    """Rank ``q``'s row-major coordinates in ``grid`` (None: outside it)."""
    out = []
    for g in reversed(grid):
        q, c = divmod(q, g)
        out.append(c)
    return None if q else tuple(reversed(out))


def placements_of_blocks(grid: Sequence[int], blocks: Sequence, op: Optional[str] = None) -> Tuple[Placement, ...]:
    """The placement on every axis of ``grid`` of the per-rank ``blocks`` (rank ``q`` at its
    row-major grid coordinates; a block is any value compared for equality per dimension, e.g. a
    box ``(starts, sizes)``; ranks past the grid are ignored). ``op``: the blocks hold partial
    results of that operator, so an axis along which they do not change is ``Partial(op)``."""
    grid = tuple(int(g) for g in grid)
    at = {}
    for q, b in enumerate(blocks):
        c = grid_coords(q, grid)
        if c is not None:
            at[c] = b
    out = []
    for a, g in enumerate(grid):
        if g <= 1:
            out.append(Replicate())
            continue
        lines = {}          # the other axes' coordinates -> the blocks along axis a
        for c, b in at.items():
            lines.setdefault(c[:a] + c[a + 1:], [None] * g)[c[a]] = b
        dims, same = set(), True
        for blks in lines.values():
            if any(b is None for b in blks):
                continue
            if all(b == blks[0] for b in blks):
                continue
            same = False
            dims |= _differing_dims(blks)
        if same:
            out.append(Partial(op) if op else Replicate())
        elif dims and all(_ordered(blks) for blks in lines.values()):
            out.append(Shard(tuple(sorted(dims))))
        else:
            out.append(Irregular())
    return tuple(out)


def _differing_dims(blks) -> set:
    """The dimensions in which the boxes ``(starts, sizes)`` along one grid axis differ."""
    out = set()
    first = blks[0]
    for b in blks[1:]:
        if b is None or first is None:
            continue
        for d, (s0, n0, s1, n1) in enumerate(zip(first[0], first[1], b[0], b[1])):
            if (s0, n0) != (s1, n1):
                out.add(d)
    return out


def _ordered(blks) -> bool:
    """The boxes along one grid axis are disjoint and follow each other in row-major order of
    their starts (the blocks of a split, not an arbitrary scatter)."""
    boxes = [b for b in blks if b is not None]
    starts = [tuple(b[0]) for b in boxes]
    if len(boxes) < 2:
        return True
    if any(a > b for a, b in zip(starts, starts[1:])):
        return False
    for b, c in zip(boxes, boxes[1:]):
        if b == c:
            continue
        if all(s0 < s1 + n1 and s1 < s0 + n0 for s0, n0, s1, n1 in zip(b[0], b[1], c[0], c[1])):
            return False          # overlapping
    return True
