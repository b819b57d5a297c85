"""DaCe 1.0.2 ``MapFusion`` cost workaround (part of the ``dace_compat`` layer): counted candidates.

``SDFG.apply_transformations_repeated(MapFusion)`` restarts its pattern matching from the first
state after every fusion, and ``MapFusion.can_be_applied`` first counts, for each access node a
candidate's first map writes, how many access nodes of the whole SDFG show the same data (more
than one: no fusion). Each candidate thus costs a walk over every node of the SDFG, and a
lowered program with ``k`` fusions and ``n`` candidate pairs costs ``O(k n |SDFG|)``: on the
~400-kernel GPT training step that was most of ``optimize_lowered``.

``CountedMapFusion`` is ``MapFusion`` with that test answered first from per-data counts kept
for the SDFG until the next fusion changes it; a candidate rejected there would be rejected by
``MapFusion``'s own first checks. It also remembers the candidates ``MapFusion.can_be_applied``
rejected: after a fusion, the matching restarts and asks again about every candidate of every
state, but the answer depends only on the candidate's state (its nodes, edges and paths) and
on how many access nodes the SDFG has for the candidate's intermediate data. A rejection is
reused while neither changed (no fusion in that state since, same counts). The fusions found,
their order and the SDFG they leave are the same.
"""
from __future__ import annotations

from collections import Counter
from typing import Dict

from dace.sdfg import nodes
from dace.transformation.dataflow import MapFusion

__all__ = ["CountedMapFusion", "fuse_maps_repeated", "copy_into"]

_counts: Dict[int, Counter] = {}     # id(sdfg) -> data name -> access nodes; cleared on every change
_versions: Counter = Counter()       # id(state) -> fusions applied in it
_rejected: Dict[tuple, tuple] = {}   # candidate -> (its state's version, its intermediates' counts)


def _reset():
    _counts.clear()
    _versions.clear()
    _rejected.clear()


def _data_counts(sdfg) -> Counter:
    c = _counts.get(id(sdfg))
    if c is None:
        c = _counts[id(sdfg)] = Counter(n.data for n in sdfg.data_nodes())
    return c


class CountedMapFusion(MapFusion):
    """``MapFusion`` whose candidates with a shared intermediate are rejected from cached counts."""

    def can_be_applied(self, graph, expr_index, sdfg, permissive=False):
        counts = _data_counts(sdfg)
        outs = graph.out_edges(self.first_map_exit)
        for e in outs:
            # MapFusion returns False for this candidate too (a node that is not an access
            # node, or data with more than one access node in the SDFG).
            if not isinstance(e.dst, nodes.AccessNode) or counts[e.dst.data] > 1:
                return False
        key = (id(sdfg), id(graph), expr_index, bool(permissive), self.first_map_exit, self.array,
               self.second_map_entry)
        seen = (_versions[id(graph)], tuple(counts[e.dst.data] for e in outs))
        if _rejected.get(key) == seen:
            return False
        ok = super().can_be_applied(graph, expr_index, sdfg, permissive=permissive)
        if not ok:
            _rejected[key] = seen
        return ok

    def apply(self, graph, sdfg):
        _counts.clear()
        _versions[id(graph)] += 1
        try:
            return super().apply(graph, sdfg)
        finally:
            _counts.clear()


def fuse_maps_repeated(sdfg) -> int:
    """``sdfg.apply_transformations_repeated(MapFusion)`` (no validation, no report) with the counted
    candidate test; returns how many fusions were applied."""
    _reset()
    try:
        return sdfg.apply_transformations_repeated(CountedMapFusion, validate=False, print_report=False,
                                                   progress=False)
    finally:
        _reset()


def copy_into(sdfg, source, keep=("_distsdfg",)) -> None:
    """Make ``sdfg`` (a top-level SDFG) a deep copy of ``source`` (e.g. a transformed copy of it) in
    place, so that the callers' references stay valid: DaCe's ``SDFG.__deepcopy__`` with ``sdfg``
    as the result. Attributes named in ``keep`` stay ``sdfg``'s own."""
    import copy
    memo = {id(source): sdfg}
    derived = ('_cached_start_block', '_edges', '_nodes', '_parent', '_parent_sdfg', '_parent_nsdfg_node',
               '_cfg_list', '_transformation_hist', 'guid')
    for k, v in source.__dict__.items():
        if k in derived or k in keep:
            continue
        setattr(sdfg, k, copy.deepcopy(v, memo))
    sdfg._edges = copy.deepcopy(source._edges, memo)
    sdfg._nodes = copy.deepcopy(source._nodes, memo)
    sdfg._cached_start_block = copy.deepcopy(source._cached_start_block, memo)
    if hasattr(source, '_transformation_hist'):
        sdfg._transformation_hist = copy.deepcopy(source._transformation_hist, memo)
    sdfg._cfg_list = sdfg.reset_cfg_list()
