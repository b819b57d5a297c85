"""The planner's view of a program: an EinGraph of kernels (EinSum-like vertices) joined by arrays.

Every schedulable kernel is a vertex whose labels are its driver map's parameters and whose
bounds are their extents. Each array access gives a label list (the parameter indexing each
dimension, or ``None`` where the index is irregular or constant); an array written by one
kernel and read by a later one is an edge. Built from the same kernel discovery and memlets
as the lowering (``kernels.find_kernels``), so a schedule of the graph is a schedule of the SDFG.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Dict, List, Optional, Tuple

import numpy as np
from dace.sdfg import SDFG

from .. import dace_compat as dc
from .constraints import partial_plain_write, unreduced_params
from ..errors import SymbolicSizeError
from .kernels import find_kernels, normalise
from .memlets import dim_params
from .controlflow import loop_trips
from ..values.plan import evaluate, given_values
from ..values.modes import KernelKind
from .tiling import iterations, rough_work
from .work import BodyWork, body_work

__all__ = ["Operand", "Vertex", "Edge", "EinGraph", "build_graph"]


@dataclasses.dataclass(frozen=True)
class Operand:
    """One array as a vertex touches it: which label indexes each dimension."""
    array: str
    labels: Tuple[Optional[str], ...]
    shape: Tuple[int, ...]
    itemsize: int

    @property
    def size(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1


@dataclasses.dataclass
class Vertex:
    index: int
    key: str                              # the schedule key of the driver map
    label: str                            # the kernel's label
    kind: KernelKind                      # a map or a library node
    labels: Tuple[str, ...]
    bounds: Tuple[int, ...]
    inputs: List[Operand]
    outputs: List[Operand]
    partial: bool = False                 # outputs written with a reduction (WCR)
    accumulates: bool = False             # adds into data a previous kernel wrote
    even: Tuple[str, ...] = ()            # labels a library node needs split evenly
    constant: bool = False                # writes one number everywhere (a reset map)
    repeats: int = 1                      # runs per program call (inside a loop: its trip count)
    unsplit: Tuple[str, ...] = ()         # labels a plain write does not index (splitting them is refused)
    source: str = ""                      # the user's line that made the kernel (``dace_compat.source``)
    work: Optional[BodyWork] = None       # a map body's loops and inner maps (``work.body_work``)

    @property
    def agg(self) -> Tuple[str, ...]:
        """Labels that index no output: splitting them leaves partial results."""
        used = {l for o in self.outputs for l in o.labels if l is not None}
        return tuple(l for l in self.labels if l not in used)

    def bound(self, label: str) -> int:
        return self.bounds[self.labels.index(label)]


@dataclasses.dataclass(frozen=True)
class Edge:
    """``array`` as ``dst`` uses it comes from ``src``'s copy ``src_array`` (another name through a
    reshape view): an output of ``src``, or with ``via_input`` the blocks ``src`` read of it.
    ``acc``: ``dst`` accumulates into the array (its output) rather than reading it."""
    src: int
    dst: int
    array: str
    src_array: str = ""
    via_input: bool = False
    acc: bool = False

    def producer(self, g: "EinGraph") -> Operand:
        return g.operand(self.src, self.src_array or self.array, output=not self.via_input)

    def consumer(self, g: "EinGraph") -> Operand:
        return g.operand(self.dst, self.array, output=self.acc)


@dataclasses.dataclass
class EinGraph:
    vertices: List[Vertex]
    edges: List[Edge]
    program_inputs: Dict[int, List[str]]   # vertex -> arrays it reads from rank 0 (never written before)
    program_outputs: Dict[int, List[str]]  # vertex -> non-transient arrays it writes last

    def producers(self, v: int) -> List[Edge]:
        return [e for e in self.edges if e.dst == v]

    def consumers(self, v: int) -> List[Edge]:
        return [e for e in self.edges if e.src == v]

    def operand(self, v: int, array: str, *, output: bool) -> Operand:
        vert = self.vertices[v]
        for o in (vert.outputs if output else vert.inputs):
            if o.array == array:
                return o
        raise KeyError(array)

    def is_tree(self) -> bool:
        """Every vertex's output feeds at most one consumer vertex."""
        return all(len({e.dst for e in self.consumers(v.index)}) <= 1 for v in self.vertices)


def _concrete(expr, values, what: str) -> int:
    try:
        return int(evaluate(str(expr), values))
    except KeyError as exc:
        import re
        m = re.search(r"symbol (\w+)", str(exc.args[0]))
        name = m.group(1) if m else str(exc.args[0])
        raise SymbolicSizeError(f"planning needs concrete sizes: {what} depends on `{name}`; pass the sizes as "
                                f"keywords, e.g. {name}=1024", name, what) from None


#: Trip count assumed for a loop whose count the sizes given do not determine.
LOOP_GUESS = 10


def _trips(sdfg: SDFG, values: Dict[str, int]) -> Dict[object, int]:
    """Per state of a program with loops, how often it runs (``LOOP_GUESS`` where unknown)."""
    _, linear = dc.program_segments(sdfg)
    if linear:
        return {}
    out = {}
    for st, (expr, _) in loop_trips(sdfg).items():
        try:
            out[st] = max(int(evaluate(expr, values)), 1)
        except (KeyError, TypeError, ValueError, SyntaxError):
            out[st] = LOOP_GUESS
    return out


def build_graph(sdfg: SDFG, **sizes) -> EinGraph:
    """The EinGraph of ``sdfg`` for concrete sizes (symbols from ``sizes`` or the SDFG's constants).

    Kernels inside loops carry their trip count (``Vertex.repeats``; a loop bound passed in
    ``sizes`` counts, else ``LOOP_GUESS``), so that the planner weighs their communication by it.

    ``sdfg`` is left as it is: where ``find_kernels`` would rewrite it (``kernels.normalise``), the
    graph is read off a copy. (A planning attempt that changed the program once made a deferred
    program lower a wrong one: ``tests/test_deferred.py``.)"""
    if normalise(sdfg, dry_run=True):
        sdfg = copy.deepcopy(sdfg)
    values = given_values(sdfg, sizes, "planning")
    # Kernels that depend on loop variables run whole on rank 0: nothing to choose for them.
    kernels = [k for k in find_kernels(sdfg) if k.kind != KernelKind.OPAQUE and not k.runtime_symbols]
    trips = _trips(sdfg, values)          # after find_kernels: the loops it turns into maps make new states
    views = dc.reshape_views(sdfg)        # after find_kernels: its rewrites add reshape views
    root = lambda a: views.get(a, a)  # noqa: E731
    order = {}
    segments, _ = dc.program_segments(sdfg)
    pos = 0
    for states in segments:
        for st in states:
            for n in dc.top_level_nodes(st):
                order[id(n)] = pos
                pos += 1
    kernels.sort(key=lambda k: order.get(id(k.node), 0))

    vertices: List[Vertex] = []
    for k in kernels:
        # The main map: most parameters, then most iterations (a dot product's map, not its init map).
        driver = max(k.maps, key=lambda m: (len(m.info.params), rough_work(m.info.ranges)))
        params = tuple(driver.info.params)
        bounds = tuple(_concrete(iterations(r), values, f"map `{driver.info.key}`") for r in driver.info.ranges.ranges)
        ins, outs, partial, acc = [], [], False, False
        plain_written = set()
        for m in k.maps:
            for arr, a in m.accesses.items():
                if any(w.wcr is None for w in a.writes):
                    plain_written.add(arr)
        for arr, a in driver.accesses.items():
            desc = driver.arrays[arr]
            shape = tuple(_concrete(s, values, f"array `{arr}`") for s in desc.shape)
            item = int(np.dtype(desc.dtype.as_numpy_dtype()).itemsize)
            for memlets, sink in ((a.reads, ins), (a.writes, outs)):
                if memlets:
                    labels = tuple(dim_params(memlets[0], params))
                    sink.append(Operand(arr, labels, shape, item))
            if not a.reads and a.writes and all(partial_plain_write(w, params) for w in a.writes):
                # a write that may leave elements of its block unwritten reads the block first (constraints)
                ins.append(Operand(arr, tuple(dim_params(a.writes[0], params)), shape, item))
            if any(w.wcr is not None for w in a.writes):
                partial = True
                if arr not in plain_written:
                    acc = True
        even = ()
        if k.kind == KernelKind.LIBRARY:
            used = {l for o in outs for l in o.labels if l is not None}
            even = tuple(p for p in params if p not in used)
        constant = k.kind == KernelKind.MAP and not ins and dc.constant_map_value(k.state, k.node) is not None
        unsplit = tuple(p for p in params if p in unreduced_params(driver))
        work = None
        if k.kind == KernelKind.MAP and len(k.maps) == 1:
            work = body_work(k.state, k.node, values)
            work = None if work.expr == 1 else work
        vertices.append(Vertex(len(vertices), driver.info.key, k.label, k.kind, params, bounds, ins, outs, partial,
                               acc, even, constant, trips.get(k.state, 1), unsplit, driver.info.source, work))

    edges: List[Edge] = []
    holder: Dict[str, Tuple[int, str, bool]] = {}    # root array -> (vertex, its name there, via input)
    written: Dict[str, int] = {}
    pin: Dict[int, List[str]] = {}
    for v in vertices:
        outs = {o.array for o in v.outputs}
        reads = [(o.array, False) for o in v.inputs]
        if v.accumulates:
            reads += [(o.array, True) for o in v.outputs if not any(i.array == o.array for i in v.inputs)]
        for arr, acc in reads:
            r = root(arr)
            if r in holder:
                src, name, via = holder[r]
                edges.append(Edge(src, v.index, arr, name, via, acc))
            elif not acc:
                pin.setdefault(v.index, []).append(arr)
            if not acc and arr not in outs:
                holder[r] = (v.index, arr, True)       # later readers take the blocks this one read
        for o in v.outputs:
            holder[root(o.array)] = (v.index, o.array, False)
            written[root(o.array)] = v.index
    pout: Dict[int, List[str]] = {}
    for arr, v in written.items():
        desc = sdfg.arrays.get(arr)
        if desc is not None and not desc.transient:
            name = next((o.array for o in vertices[v].outputs if root(o.array) == arr), arr)
            pout.setdefault(v, []).append(name)
    return EinGraph(vertices, edges, pin, pout)
