"""The solver: symbolic constraints -> a concrete communication plan (steps with per-rank blocks)."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .exprs import evaluate

if TYPE_CHECKING:
    from .redistribute import CommPlan

__all__ = ["Layout", "StepSpec", "RankBlock", "ConcreteStep", "ConcreteRedist", "CommStep", "HomeSpec",
           "HomeSolution", "solve_homes", "solve_step", "encode_plan", "comm_steps", "DTYPE_CODES", "OP_CODES",
           "ROOT_HOME", "ALL_HOME"]

DTYPE_CODES = {"float32": 0, "float64": 1, "int32": 2, "int64": 3, "uint32": 4, "uint64": 5, "int8": 6, "uint8": 7,
               "int16": 8, "uint16": 9, "complex64": 10, "complex128": 11, "bool": 12}
OP_CODES = {None: 0, "sum": 1, "prod": 2, "max": 3, "min": 4}
KIND_CODES = {"scatter": 1, "gather": 2, "reduce": 3, "fill": 4, "redist": 5}
MODE_CODES = {"local": 0, "Allreduce": 1, "Reduce_scatter": 2, "Allgatherv": 3, "Alltoallw": 4, "Alltoallv": 5,
              "Reduce": 6, "Isend/Irecv": 7}
#: ``Layout.home`` of the program's own array: held whole by rank 0 only / by every rank.
ROOT_HOME, ALL_HOME = "^", "*"
F_ACC, F_MERGE, F_REPL, F_MASK = 1, 2, 4, 8


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a distributed copy of an array lives: the block each rank of ``grid`` holds (symbolic).

    ``boxes`` (start, end inclusive) bound the valid elements; ``origin`` is the global index of the
    local buffer's first element; ``op`` marks partial results still to be combined.
    """
    local: str
    kernel_label: str
    grid: Tuple[int, ...]
    rank_syms: Tuple[str, ...]
    boxes: Tuple[Tuple[Tuple[str, str], ...], ...]
    origin: Tuple[str, ...]
    local_shape: Tuple[str, ...]
    op: Optional[str] = None
    view_shape: Tuple[str, ...] = ()     # boxes are in this reshape of the array (a DaCe View)
    # The buffer is an array's home across states (``HomeSpec.name``): its origin and shape are
    # solved per rank, and empty ``boxes`` mean the owners' blocks. ROOT_HOME / ALL_HOME: the
    # program's array itself, whole on rank 0 / on every rank.
    home: str = ""
    clip: Tuple[Tuple[str, str], ...] = ()   # only this box (start, end inclusive) of the blocks counts


@dataclasses.dataclass(frozen=True)
class StepSpec:
    """One communication step as lowered: symbolic, for any sizes and rank coordinates.

    ``boxes`` are (start, end) inclusive per dimension, their union is what a rank moves;
    ``origin`` is the global index of the local buffer's first element.
    """
    index: int
    kind: str                      # scatter | gather | reduce | fill
    array: str
    local: str
    kernel: int
    kernel_label: str
    dtype: str                     # numpy dtype name
    itemsize: int
    grid: Tuple[int, ...]
    rank_syms: Tuple[str, ...]     # per grid axis; '' for an unsplit axis
    boxes: Tuple[Tuple[Tuple[str, str], ...], ...]
    origin: Tuple[str, ...]
    local_shape: Tuple[str, ...]
    global_shape: Tuple[str, ...]
    op: Optional[str] = None
    acc: bool = False              # reduce into the destination's current values
    exact: bool = True             # the written block is fully written
    source: Optional[Layout] = None  # redist: the distributed copy the blocks come from
    global_strides: Tuple[str, ...] = ()  # element strides of the global array (views may be strided)
    view_shape: Tuple[str, ...] = ()  # redist: boxes are in this reshape of the array
    home: str = ""                 # redist: the destination layout's ``Layout.home``
    inplace: bool = False          # redist: source and destination are one buffer (halo, write-back)
    clip: Tuple[Tuple[str, str], ...] = ()   # redist: the destination layout's ``Layout.clip``
    repeats: str = "1"             # how often the step runs per call (a loop's trip count)
    at_most: bool = False          # ``repeats`` bounds a loop that may exit early

    @property
    def layout(self) -> Layout:
        """The layout this step leaves behind (for a scatter or redist) or reads (gather, reduce)."""
        return Layout(self.local, self.kernel_label, self.grid, self.rank_syms, self.boxes, self.origin,
                      self.local_shape, self.op if self.kind == "reduce" else None, self.view_shape, self.home,
                      self.clip)

    def __str__(self):
        times = "" if self.repeats == "1" else f" x{'<=' if self.at_most else ''}{self.repeats}"
        if self.kind == "redist":
            src = self.source
            part = f" partial({src.op})" if src.op else ""
            how = " in place" if self.inplace else ""
            return (f"step {self.index}: redist  {self.array} ({src.kernel_label} grid {src.grid}{part} -> "
                    f"{self.kernel_label} grid {self.grid}{how}){times}")
        what = {"scatter": "root -> blocks", "gather": "blocks -> root", "reduce": f"partial({self.op}) -> root",
                "fill": f"identity({self.op}) -> block" + (" (but its first holder)" if self.acc else "")}[self.kind]
        return f"step {self.index}: {self.kind:7s} {self.array} ({what}) for {self.kernel_label} grid {self.grid}{times}"


@dataclasses.dataclass(frozen=True)
class RankBlock:
    origin: Tuple[int, ...]
    start: Tuple[int, ...]
    size: Tuple[int, ...]

    @property
    def count(self) -> int:
        return int(np.prod(self.size)) if self.size else 1


@dataclasses.dataclass(frozen=True)
class ConcreteStep:
    """A step solved for concrete sizes and a communicator of ``nranks`` ranks."""
    spec: StepSpec
    nranks: int
    global_shape: Tuple[int, ...]
    local_shape: Tuple[int, ...]
    blocks: Tuple[RankBlock, ...]
    pcolor: Tuple[int, ...]
    pkey: Tuple[int, ...]
    rcolor: Tuple[int, ...]
    rkey: Tuple[int, ...]
    flags: int
    global_strides: Tuple[int, ...] = ()

    @property
    def uses_replicate(self) -> bool:
        return bool(self.flags & F_REPL)


@dataclasses.dataclass(frozen=True)
class CommStep:
    """One MPI call of a plan and its logical payload in bytes per rank (index = rank).

    ``repeats`` is how often the call runs per program call: 1 outside loops, a loop's trip count
    inside one (an int when the sizes given determine it, else the symbolic count as a string);
    ``at_most`` marks a count that bounds a loop that can exit early (``break``).
    """
    collective: str
    array: str
    sent: Tuple[int, ...]
    received: Tuple[int, ...]
    repeats: object = 1
    at_most: bool = False

    @property
    def total_sent(self) -> Tuple[int, ...]:
        """Bytes sent per rank over all repeats (needs a numeric ``repeats``)."""
        return tuple(b * int(self.repeats) for b in self.sent)

    @property
    def total_received(self) -> Tuple[int, ...]:
        return tuple(b * int(self.repeats) for b in self.received)

    def __str__(self):
        times = "" if self.repeats == 1 else f" x{'<=' if self.at_most else ''}{self.repeats}"
        return (f"{self.collective:14s} {self.array:16s} sent={list(self.sent)} received={list(self.received)}"
                + times)


def _coords(q: int, grid: Sequence[int]) -> Optional[Tuple[int, ...]]:
    """Rank ``q``'s row-major coordinates in ``grid`` (None: outside it)."""
    out = []
    for g in reversed(grid):
        q, c = divmod(q, g)
        out.append(c)
    return None if q else tuple(reversed(out))


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
    plan: "CommPlan"


def _box(b: RankBlock):
    return (b.start, b.size) if b.count and all(b.size) else None


@dataclasses.dataclass(frozen=True)
class HomeSpec:
    """An array's distributed copy between the states of a program with control flow.

    At every state boundary the array's value lives in ``buffer`` on its owners: rank blocks
    grown from ``anchor`` (a kernel's blocks) until they cover the array. Map kernels read and
    write the buffer in place with global indices (``accesses``), so each rank's buffer also
    spans the ghost cells those kernels touch; its origin and shape are solved per rank and
    passed as the symbols ``origin_syms`` / ``shape_syms``.
    """
    name: str
    array: str
    buffer: str
    global_shape: Tuple[str, ...]
    anchor: Layout
    accesses: Tuple[Layout, ...]
    origin_syms: Tuple[str, ...]
    shape_syms: Tuple[str, ...]
    # The buffer is a program argument in distributed placement: it spans its rank's owned
    # block exactly (empty on ranks that own nothing), and users pass it block by block.
    boundary: bool = False


@dataclasses.dataclass(frozen=True)
class HomeSolution:
    """A home for concrete sizes: per rank the owned block (``origin``: the buffer's first element)."""
    spec: HomeSpec
    owned: Tuple[RankBlock, ...]
    shapes: Tuple[Tuple[int, ...], ...]      # per rank: the buffer's extent

    def symbols(self, rank: int) -> Dict[str, int]:
        out = {s: int(n) for s, n in zip(self.spec.shape_syms, self.shapes[rank])}
        out.update({s: int(o) for s, o in zip(self.spec.origin_syms, self.owned[rank].origin)})
        return out


def _cover(boxes: Sequence, gshape: Tuple[int, ...]) -> bool:
    from .redistribute import subtract
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
    rows = -(-gshape[0] // nranks)
    out = []
    for q in range(nranks):
        a, e = min(q * rows, gshape[0]), min((q + 1) * rows, gshape[0])
        out.append(((a,) + (0,) * (nd - 1), (e - a,) + tuple(gshape[1:])) if e > a else None)
    return out


def solve_homes(homes: Sequence[HomeSpec], values: Dict[str, int], nranks: int) -> Dict[str, HomeSolution]:
    """Owner blocks and buffer extents of every home, for concrete sizes."""
    out = {}
    for h in homes:
        gshape = tuple(evaluate(s, values) for s in h.global_shape)
        nd = len(gshape)
        anchor = [_box(_block(h.anchor, _coords(q, h.anchor.grid), values, gshape)) for q in range(nranks)]
        owned = _grow(anchor, gshape, nranks)
        lo = [list(b[0]) if b is not None else None for b in owned]
        hi = [[s + n for s, n in zip(*b)] if b is not None else None for b in owned]
        for acc in h.accesses:
            for q in range(nranks):
                b = _box(_block(acc, _coords(q, acc.grid), values, gshape))
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
        out[h.name] = HomeSolution(h, tuple(blocks), shapes)
    return out


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
    for q in range(nranks):
        b = _block(lay, _coords(q, lay.grid), values, gshape)
        blocks.append(RankBlock(sol.owned[q].origin, b.start, b.size))
    return tuple(blocks), sol.shapes


def _layout_blocks(lay, array: str, values, nranks, gshape, homes=None):
    """Per-rank blocks of a layout in the array's coordinates, and per rank the local buffer's shape."""
    blocks, lshape = _unclipped_blocks(lay, array, values, nranks, gshape, homes)
    if not lay.clip:
        return blocks, lshape
    from .redistribute import intersect
    lo = tuple(evaluate(b, values) for b, _ in lay.clip)
    box = (lo, tuple(evaluate(e, values) + 1 - a for a, (_, e) in zip(lo, lay.clip)))
    out = []
    for b in blocks:
        cut = intersect(_box(b), box)
        out.append(RankBlock(b.origin, cut[0], cut[1]) if cut is not None
                   else RankBlock(b.origin, (0,) * len(gshape), (0,) * len(gshape)))
    return tuple(out), lshape


def _unclipped_blocks(lay, array, values, nranks, gshape, homes):
    from .errors import ScheduleError
    from .redistribute import reshape_box
    if lay.home:
        return _home_blocks(lay, values, nranks, gshape, homes or {})
    lshape = tuple(evaluate(s, values) for s in lay.local_shape)
    blocks = [_block(lay, _coords(q, lay.grid), values,
                     tuple(evaluate(s, values) for s in lay.view_shape) if lay.view_shape else gshape)
              for q in range(nranks)]
    if not lay.view_shape:
        return tuple(blocks), (lshape,) * nranks
    vshape = tuple(evaluate(s, values) for s in lay.view_shape)
    out, shapes = [], set()
    for q, b in enumerate(blocks):
        try:
            if _box(b) is None:
                out.append(RankBlock((0,) * len(gshape), (0,) * len(gshape), (0,) * len(gshape)))
                continue
            if any(o < 0 or o + n > v for o, n, v in zip(b.origin, lshape, vshape)):
                raise ValueError("the local buffer reaches past the array")
            alloc = reshape_box((b.origin, lshape), vshape, gshape)
            box = reshape_box(_box(b), vshape, gshape)
        except ValueError as exc:
            raise ScheduleError(
                f"`{array}` is used through the reshape {vshape} by `{lay.kernel_label}` (grid {lay.grid}), and the "
                f"block of rank {q} is not a block of the array's shape {gshape} ({exc}); split the merged "
                f"dimension evenly, or not at all") from None
        shapes.add(alloc[1])
        out.append(RankBlock(alloc[0], box[0], box[1]))
    if len(shapes) > 1:
        raise ScheduleError(f"`{array}` through the reshape {vshape} by `{lay.kernel_label}` gives ranks local blocks "
                            f"of different shapes {sorted(shapes)}; use a grid that divides the reshaped dimensions "
                            f"evenly")
    return tuple(out), (shapes.pop() if shapes else tuple(1 for _ in gshape),) * nranks


def solve_redist(spec: StepSpec, values: Dict[str, int], nranks: int, homes=None,
                 rank: Optional[int] = None) -> ConcreteRedist:
    from .redistribute import plan_redistribution
    src = spec.source
    gshape = tuple(evaluate(s, values) for s in spec.global_shape)
    sblocks, slshape = _layout_blocks(src, spec.array, values, nranks, gshape, homes)
    dblocks, dlshape = _layout_blocks(spec.layout, spec.array, values, nranks, gshape, homes)
    plan = plan_redistribution(spec.array, [_box(b) for b in sblocks], [_box(b) for b in dblocks], src.op,
                               spec.itemsize, inplace=spec.inplace, rank=rank)
    return ConcreteRedist(spec, nranks, gshape, slshape, dlshape, sblocks, dblocks, plan)


def solve_step(spec: StepSpec, values: Dict[str, int], nranks: int, homes=None, rank: Optional[int] = None):
    """Per-rank blocks, and the partition/replicate sub-grids that move them (thesis 5.1).

    ``homes``: the solved homes (``solve_homes``) the step's layouts may refer to. ``rank``: a
    grid-to-grid step keeps only the messages that rank sends or receives (``plan_redistribution``)."""
    if spec.kind == "redist":
        return solve_redist(spec, values, nranks, homes, rank)
    gshape = tuple(evaluate(s, values) for s in spec.global_shape)
    lshape = tuple(evaluate(s, values) for s in spec.local_shape)
    grid = spec.grid
    coords = [_coords(q, grid) for q in range(nranks)]
    blocks = [_block(spec, c, values, gshape) for c in coords]
    by_coord = {c: b for c, b in zip(coords, blocks) if c is not None}
    # Grid axes the block depends on (partitioned); the others replicate it.
    dep = []
    for a, g in enumerate(grid):
        if g > 1 and any(by_coord[c] != by_coord[c[:a] + (0,) + c[a + 1:]] for c in by_coord):
            dep.append(a)
    repl_axes = [a for a, g in enumerate(grid) if g > 1 and a not in dep]
    pcolor, pkey, rcolor, rkey = [], [], [], []
    nkey = 0
    for q, c in enumerate(coords):
        if c is None:
            pcolor.append(-1); pkey.append(0); rcolor.append(-1); rkey.append(0)
            continue
        in_part = all(c[a] == 0 for a in repl_axes)
        pcolor.append(0 if in_part else -1)
        pkey.append(nkey if in_part else 0)
        nkey += in_part
        if repl_axes:
            rcolor.append(int(np.ravel_multi_index([c[a] for a in dep], [grid[a] for a in dep])) if dep else 0)
            rkey.append(int(np.ravel_multi_index([c[a] for a in repl_axes], [grid[a] for a in repl_axes])))
        else:
            rcolor.append(-1); rkey.append(0)
    flags = F_REPL if repl_axes else 0
    if spec.acc:
        flags |= F_ACC
    part = [blocks[q] for q in range(nranks) if pcolor[q] == 0 and blocks[q].count and all(blocks[q].size)]
    overlap = _overlapping(part)
    if spec.kind == "gather" and not spec.exact and overlap:
        flags |= F_MERGE
    if spec.kind == "reduce" and not spec.acc and overlap:
        flags |= F_MASK
    strides = tuple(evaluate(x, values) for x in spec.global_strides) if spec.global_strides else ()
    return ConcreteStep(spec, nranks, gshape, lshape, tuple(blocks), tuple(pcolor), tuple(pkey), tuple(rcolor),
                        tuple(rkey), flags, strides)


def _overlapping(blocks: List[RankBlock]) -> bool:
    from .boxindex import any_overlap
    return any_overlap([(b.start, b.size) for b in blocks])


def _encode_redist(cs: ConcreteRedist, rank: int) -> List[int]:
    spec, plan, P = cs.spec, cs.plan, cs.nranks
    gshape, sl, dl = cs.global_shape, cs.src_lshapes[rank], cs.dst_lshapes[rank]
    nd = len(gshape)

    def box(b, n):
        return list(b[0]) + list(b[1]) if b is not None else [0] * n + [0] * n

    if nd == 0:   # scalars travel as one-element vectors
        gshape, sl, dl, nd = (1,), (1,), (1,), 1

        def box(b, n):  # noqa: F811
            return [0, 1] if b is not None else [0, 0]

    color, key = [-1] * P, [0] * P
    for i, g in enumerate(plan.groups):
        for j, q in enumerate(g):
            color[q], key[q] = i, j
    out = [KIND_CODES["redist"], DTYPE_CODES[spec.dtype], OP_CODES[plan.op], nd, P, MODE_CODES[plan.collective]]
    out += list(gshape) + list(sl) + list(dl)
    pieces = plan.pieces or (None,) * P
    for q in range(P):
        out += list(cs.src_blocks[q].origin or (0,) * nd) + list(cs.dst_blocks[q].origin or (0,) * nd)
        out += box(plan.src[q], nd) + box(plan.dst[q], nd) + box(pieces[q], nd) + [color[q], key[q]]
    out.append(len(plan.messages))
    for m in plan.messages:
        out += [m.src, m.dst] + box(m.box, nd)
    return out


def _strides(cs: ConcreteStep) -> Tuple[int, ...]:
    """The global array's element strides (row-major unless the lowering recorded others)."""
    if cs.global_strides:
        return cs.global_strides
    out, acc = [], 1
    for n in reversed(cs.global_shape):
        out.insert(0, acc)
        acc *= n
    return tuple(out)


def encode_step(cs, rank: int = 0) -> List[int]:
    if isinstance(cs, ConcreteRedist):
        return _encode_redist(cs, rank)
    spec = cs.spec
    nd = len(cs.global_shape)
    out = [KIND_CODES[spec.kind], DTYPE_CODES[spec.dtype], OP_CODES[spec.op], nd, cs.nranks, cs.flags]
    out += list(cs.global_shape) + list(cs.local_shape) + list(_strides(cs))
    for q, b in enumerate(cs.blocks):
        out += list(b.origin) + list(b.start) + list(b.size)
        out += [cs.pcolor[q], cs.pkey[q], cs.rcolor[q], cs.rkey[q]]
    return out


def encode_plan(steps: Sequence[ConcreteStep], rank: int = 0) -> np.ndarray:
    """The int64 table the generated code of ``rank`` reads: ``[n, offsets..., step tables...]``
    (tables differ between ranks only in the shapes of that rank's local buffers)."""
    tables = [encode_step(s, rank) for s in steps]
    header = 1 + len(tables)
    offsets, pos = [], header
    for t in tables:
        offsets.append(pos)
        pos += len(t)
    flat = [len(tables)] + offsets + [v for t in tables for v in t]
    return np.array(flat if flat else [0], dtype=np.int64)


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
    if spec.kind == "fill":
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

    if spec.kind == "scatter":
        out = [p2root("Scatterv", False)]
        if cs.uses_replicate:
            out.append(subgrid("Bcast", False))
        return out
    if spec.kind == "gather":
        return [p2root("Gatherv", True)]
    out = []
    if cs.uses_replicate:
        out.append(subgrid("Reduce", True))
    out.append(p2root("Gatherv", True))
    return out
