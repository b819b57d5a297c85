"""Value types of a communication plan: what the lowering records and the solver solves.

``Layout`` (where a distributed copy of an array lives), ``StepSpec`` (one communication step,
symbolic in the sizes and rank coordinates), ``HomeSpec`` (an array's distributed copy across
states), and their concrete forms (``RankBlock``, ``ConcreteStep``, ``HomeSolution``,
``CommStep``); ``evaluate`` computes a symbolic size for concrete symbol values, which
``symbol_values`` and ``given_values`` build. The solver
(``distsdfg.solver.solve``) turns specs into concrete steps; ``distsdfg.mpi.encode`` writes them as the
int64 table the generated code reads.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional, Tuple

import numpy as np
import sympy

from dace.sdfg import SDFG

from ..checks import check_sizes
from .codes import Flag
from .exprs import evaluate
from .modes import Collective, StepKind

__all__ = ["Layout", "StepSpec", "RankBlock", "ConcreteStep", "CommStep", "HomeSpec", "HomeSolution", "evaluate",
           "symbol_values", "given_values", "axis_symbols", "boxes_text", "ROOT_HOME", "ALL_HOME", "F_ACC", "F_MERGE",
           "F_REPL", "F_MASK", "F_PAD"]

#: ``Layout.home`` of the program's own array: held whole by rank 0 only / by every rank.
ROOT_HOME, ALL_HOME = "^", "*"
#: ``ConcreteStep.flags``: the bits of ``codes.Flag`` (accumulate into the destination, merge overlapping
#: gathered blocks, replicate over a sub-grid, mask overlapping partial blocks, fill only the padding).
F_ACC, F_MERGE, F_REPL, F_MASK, F_PAD = Flag.ACC, Flag.MERGE, Flag.REPL, Flag.MASK, Flag.PAD


def axis_symbols(rank_syms, grid) -> Tuple[str, ...]:
    """Per grid axis, the name of its rank symbol ('' for an axis of size 1: nothing split there)."""
    return tuple(str(s) if g > 1 else "" for s, g in zip(rank_syms, grid))


def boxes_text(boxes) -> Tuple[Tuple[Tuple[str, str], ...], ...]:
    """Symbolic boxes (a (start, end) pair per dimension) as the text a plan records."""
    return tuple(tuple((str(b), str(e)) for b, e in box) for box in boxes)


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
    kind: StepKind                 # a StepKind or its value (scatter | gather | reduce | fill | redist)
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
    pad: bool = False              # fill: of a padded input; the next step writes the block itself

    def __post_init__(self):
        object.__setattr__(self, "kind", StepKind(self.kind))

    @property
    def layout(self) -> Layout:
        """The layout this step leaves behind (for a scatter or redist) or reads (gather, reduce)."""
        return Layout(self.local, self.kernel_label, self.grid, self.rank_syms, self.boxes, self.origin,
                      self.local_shape, self.op if self.kind == StepKind.REDUCE else None, self.view_shape, self.home,
                      self.clip)

    def __str__(self):
        times = "" if self.repeats == "1" else f" x{'<=' if self.at_most else ''}{self.repeats}"
        if self.kind == StepKind.REDIST:
            src = self.source
            part = f" partial({src.op})" if src.op else ""
            how = " in place" if self.inplace else ""
            return (f"step {self.index}: redist  {self.array} ({src.kernel_label} grid {src.grid}{part} -> "
                    f"{self.kernel_label} grid {self.grid}{how}){times}")
        first = " (but its first holder)" if self.acc else ""
        what = {StepKind.SCATTER: "root -> blocks", StepKind.GATHER: "blocks -> root",
                StepKind.REDUCE: f"partial({self.op}) -> root", StepKind.FILL: f"identity({self.op}) -> block{first}"}
        what = what[self.kind]
        return f"step {self.index}: {self.kind:7s} {self.array} ({what}) for {self.kernel_label} grid {self.grid}{times}"


@dataclasses.dataclass(frozen=True)
class RankBlock:
    origin: Tuple[int, ...]
    start: Tuple[int, ...]
    size: Tuple[int, ...]

    @property
    def count(self) -> int:
        return math.prod(self.size)


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
    flags: int                     # the bits of ``codes.Flag``
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
    collective: Collective
    array: str
    sent: Tuple[int, ...]
    received: Tuple[int, ...]
    repeats: object = 1
    at_most: bool = False

    def __post_init__(self):
        object.__setattr__(self, "collective", Collective(self.collective))

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


@dataclasses.dataclass(frozen=True)
class HomeSpec:
    """An array's distributed copy between the states of a program with control flow.

    At every state boundary the array's value lives in ``buffer`` on its owners: rank blocks
    grown from ``anchor`` (a kernel's blocks) until they cover the array. Map kernels read and
    write the buffer in place with global indices (``accesses``; library kernels read it where
    their blocks are the home's own), so each rank's buffer also spans the ghost cells those
    kernels touch; its origin and shape are solved per rank and
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


def _constant(v):
    """A program constant as a symbol value: an int where it is integral, else as it is."""
    try:
        return int(v) if np.isscalar(v) and float(v) == int(v) else v
    except (TypeError, ValueError, OverflowError):
        return v


def symbol_values(sdfg: SDFG, arrays: Dict[str, Any], given: Dict[str, Any]) -> Dict[str, int]:
    """Concrete values of the program's size symbols: the ``given`` ones, then those read off the
    shapes of ``arrays`` (by name), then the program's constants. The one place symbol values are
    built (calls, reports, layouts, the planner's graph)."""
    values = {k: int(v) for k, v in given.items()}
    for name, arr in arrays.items():
        desc = sdfg.arrays.get(name)
        if desc is None or not hasattr(arr, "shape"):
            continue
        for dim, n in zip(desc.shape, arr.shape):
            e = sympy.sympify(dim)
            fs = [s for s in e.free_symbols if str(s) not in values]
            if len(fs) == 1:
                sol = sympy.solve(sympy.Eq(e.subs({s: values[str(s)] for s in e.free_symbols if str(s) in values}), n),
                                  fs[0])
                if len(sol) == 1 and sympy.sympify(sol[0]).is_Integer:
                    values[str(fs[0])] = int(sol[0])
    for k, v in sdfg.constants.items():
        values.setdefault(k, _constant(v))
    return values


def given_values(sdfg: SDFG, symbols, what: str = "comm_report") -> Dict[str, int]:
    """Symbol values for a report or layout: the sizes passed to ``what`` (checked: names the
    program has, positive integers), then the program's constants."""
    return symbol_values(sdfg, {}, check_sizes(sdfg, symbols, what))
