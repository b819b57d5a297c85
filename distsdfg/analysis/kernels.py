"""Discovery: the schedulable top-level maps of an SDFG (library nodes seen through their pure expansion)."""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Tuple

import dace
from dace import subsets
from dace.sdfg import SDFG, SDFGState, nodes

from .. import dace_compat as dc
from ..checks import require_sdfg
from ..dace_compat.source import source_of
from ..values.modes import KernelKind

__all__ = ["MapInfo", "AnalysedMap", "Kernel", "find_kernels", "main_map_infos", "normalise", "maps", "KEPT_LIBRARY_NODES"]

#: Library nodes that stay library nodes (their local semantics on blocks equal the tiled expansion).
KEPT_LIBRARY_NODES = {"MatMul", "Gemm", "Dot", "BatchedMatMul", "Reduce", "Einsum", "Gemv", "Transpose"}


@dataclasses.dataclass(frozen=True)
class MapInfo:
    """One schedulable map: ``key`` is what a schedule names; ``params``/``ranges`` its iteration space."""
    key: str
    label: str
    params: Tuple[str, ...]
    ranges: subsets.Range
    state: str
    source: str = ""        # the user's line (``dace_compat.source``): ``heat.py:17 Tn[1:-1, 1:-1] = ...``; '' if unknown

    def __str__(self):
        return f"{self.key}[{', '.join(f'{p}={r}' for p, r in zip(self.params, self.ranges))}]"


@dataclasses.dataclass
class Access:
    """Inner memlets of one map for one array, split by direction."""
    reads: List[dace.Memlet] = dataclasses.field(default_factory=list)
    writes: List[dace.Memlet] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class AnalysedMap:
    """A map with the memlets at its inner boundary, grouped by the array they touch."""
    info: MapInfo
    accesses: Dict[str, Access]
    arrays: Dict[str, dace.data.Data]
    body_symbols: frozenset = frozenset()   # symbols the map's body uses (its parameters included)


@dataclasses.dataclass
class Kernel:
    """A top-level unit of work: one map, or one library node analysed through its maps."""
    index: int
    kind: KernelKind
    state: SDFGState
    node: nodes.Node
    maps: List[AnalysedMap]
    reason: str = ""                # why an opaque kernel cannot be distributed
    # Symbols the program sets while it runs (loop variables, interstate assignments) that the
    # kernel's ranges or accesses depend on: its blocks are unknown before the call, so it runs
    # whole on rank 0 (lowering refuses a grid that splits it).
    runtime_symbols: Tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return self.node.label


def _analyse_map(state: SDFGState, entry: nodes.MapEntry, key: str, arrays, source: str = "") -> AnalysedMap:
    exit_ = state.exit_node(entry)
    acc: Dict[str, Access] = {}
    for e in state.out_edges(entry):
        if e.data.is_empty() or e.data.data is None:
            continue
        acc.setdefault(e.data.data, Access()).reads.append(e.data)
    for e in state.in_edges(exit_):
        if e.data.is_empty() or e.data.data is None:
            continue
        acc.setdefault(e.data.data, Access()).writes.append(e.data)
    # The arrays it reads, then those it only writes, each by name: the order of a map's edges follows
    # DaCe's rewrites, some of which iterate over sets, so it may differ from one process to the next,
    # and every rank must plan the same steps (numbered, as comm_report lists them, inputs first).
    acc = dict(sorted(acc.items(), key=lambda kv: (not kv[1].reads, kv[0])))
    info = MapInfo(key, entry.map.label, tuple(entry.map.params), subsets.Range(list(entry.map.range.ranges)),
                   state.label, source)
    return AnalysedMap(info, acc, arrays, frozenset(dc.scope_symbols(state, entry)))


def _maps_of_expansion(sub: SDFG) -> Tuple[List[Tuple[SDFGState, nodes.MapEntry]], str]:
    found, problem = [], ""
    for st in sub.all_states():
        for n in dc.top_level_nodes(st):
            if isinstance(n, nodes.MapEntry):
                found.append((st, n))
            elif isinstance(n, (nodes.NestedSDFG, nodes.LibraryNode)):
                problem = f"its expansion keeps `{n.label}` as a nested SDFG"
            elif isinstance(n, nodes.Tasklet):
                problem = f"its expansion computes in tasklet `{n.label}` outside any map"
    return found, problem


class _Keys:
    def __init__(self):
        self.used = set()

    def make(self, base: str) -> str:
        key, n = base, 1
        while key in self.used:
            n += 1
            key = f"{base}_{n}"
        self.used.add(key)
        return key


def normalise(sdfg: SDFG, *, dry_run: bool = False) -> int:
    """The rewrites ``find_kernels`` makes in ``sdfg`` before it looks for kernels (the same
    program, in the forms the analysis reads); returns how many it made. ``dry_run``: 1 if one
    of them would change ``sdfg`` (0: ``find_kernels`` leaves it as it is), ``sdfg`` untouched.

    A library node's transposed operand (a strided view of a whole array) becomes a map that
    copies the array in the permuted order plus a reshape view (``dace_compat.views``).
    For-loops whose iterations are independent become maps first (``loopmaps``: triangular
    loops, loops of library calls). Read-modify-write accumulations in maps become write-conflict resolution first
    (``accumulate.AccumulationToWCR``: the same program, with writes the lowering can reduce)."""
    from .accumulate import accumulations_to_wcr
    from .loopmaps import independent_loops_to_maps
    from ..dace_compat.views import transposed_views_to_copies
    steps = (dc.exact_ranges,                 # e.g. the bounds of MapTiling's inner maps
             transposed_views_to_copies,      # a transposed operand (strided view) is a permuting copy
             dc.copies_to_maps,               # array-to-array copies are kernels too (their blocks move)
             independent_loops_to_maps,       # loops of independent iterations become splittable maps
             accumulations_to_wcr,
             dc.narrow_indirect_accesses,     # `A[i, idx[i]]` is row i, not all of A
             dc.propagate_wcr_outward)        # an accumulation in a nested map reads as one outside it
    if dry_run:     # each step sees ``sdfg`` as the real run would: the steps before it changed nothing
        return int(any(step(sdfg, dry_run=True) for step in steps))
    return sum(step(sdfg) for step in steps)


def find_kernels(sdfg: SDFG) -> List[Kernel]:
    """All kernels of ``sdfg`` in a stable order (states in order, nodes topologically), after
    ``normalise`` has rewritten it in place."""
    normalise(sdfg)
    kernels: List[Kernel] = []
    keys = _Keys()
    defined = dc.runtime_defined_symbols(sdfg)
    for state in dc.all_states(sdfg):
        for node in dc.top_level_nodes(state):
            if isinstance(node, nodes.MapEntry):
                k = keys.make(node.map.label)
                kernels.append(Kernel(len(kernels), KernelKind.MAP, state, node,
                                      [_analyse_map(state, node, k, sdfg.arrays, source_of(state, node))]))
            elif isinstance(node, nodes.LibraryNode):
                kernels.append(_library_kernel(sdfg, state, node, len(kernels), keys))
            else:
                continue
            if defined:
                kernels[-1].runtime_symbols = _runtime_symbols(kernels[-1], defined)
    return kernels


def _runtime_symbols(k: Kernel, defined: set) -> Tuple[str, ...]:
    """The symbols of ``defined`` that ``k``'s iteration ranges or data accesses depend on."""
    used = set()
    memlets = [e.data for e in k.state.in_edges(k.node)]
    out_node = k.state.exit_node(k.node) if isinstance(k.node, nodes.MapEntry) else k.node
    memlets += [e.data for e in k.state.out_edges(out_node)]
    for x in memlets:
        if not x.is_empty() and x.subset is not None:
            used |= {str(s) for s in x.subset.free_symbols}
    for m in k.maps:     # inside a map its parameters are its own (a loop elsewhere may use the name)
        used |= {str(s) for s in m.info.ranges.free_symbols}
        for x in (x for a in m.accesses.values() for x in a.reads + a.writes):
            if not x.is_empty() and x.subset is not None:
                used |= {str(s) for s in x.subset.free_symbols} - set(m.info.params)
    return tuple(sorted(used & defined))


def _library_kernel(sdfg, state, node, index, keys) -> Kernel:
    name = type(node).__name__
    base = keys.make(node.label)
    if name not in KEPT_LIBRARY_NODES:
        return Kernel(index, KernelKind.OPAQUE, state, node, [], f"library node type {name} is not analysed")
    try:
        sub = dc.standalone_expansion(sdfg, state, node)
    except Exception as exc:  # DaCe raises many types here
        return Kernel(index, KernelKind.OPAQUE, state, node, [], f"its pure expansion failed ({type(exc).__name__}: {exc})")
    found, problem = _maps_of_expansion(sub)
    if problem or not found:
        return Kernel(index, KernelKind.OPAQUE, state, node, [], problem or "its expansion has no maps")
    amaps = []
    where = source_of(state, node)
    for st, entry in found:
        k = keys.make(f"{base}.{entry.map.label}")
        amaps.append(_analyse_map(st, entry, k, sub.arrays, where))
    return Kernel(index, KernelKind.LIBRARY, state, node, amaps)


def maps(sdfg: SDFG) -> List[MapInfo]:
    """Every schedulable map of ``sdfg``, as ``lower()`` sees them."""
    require_sdfg(sdfg, "distsdfg.maps")
    return [m.info for k in find_kernels(sdfg) for m in k.maps]


def main_map_infos(kernels) -> List[MapInfo]:
    """Per kernel its main map: a map kernel's map, a library node's map with the most iterations
    (kernels that depend on a loop variable, which cannot be split, left out)."""
    from .tiling import rough_work

    def work(m):
        return len(m.info.params), rough_work(m.info.ranges)
    return [max(k.maps, key=work).info for k in kernels if k.maps and not k.runtime_symbols]
