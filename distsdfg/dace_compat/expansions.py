"""``standalone_expansion``: one library node expanded alone, remembered by what it depends on.

``find_kernels`` expands every library node on its own (``standalone_expansion``: pure
expansion, simplify, inlining), and it runs once for each of ``zero_shardings``,
``schedule_from_shardings`` and ``lower`` on the same program; the expansions were most of its
time. The key is what the expansion reads (the node's type, label and properties, its memlets
and connectors, the descriptors they name, the program's symbols), without element ids, so an
unchanged node hits and a changed one misses. ``force_pure_expansion`` and
``repair_init_accumulate_races``, which the expansion uses, live here too.
"""
from __future__ import annotations

import collections
import copy
import json

import dace
from dace import data as dt
from dace import serialize
from dace.sdfg import SDFG, SDFGState, nodes

__all__ = ["standalone_expansion", "without_ids", "force_pure_expansion", "repair_init_accumulate_races"]

_KEPT = 2048
_cache: "collections.OrderedDict[str, SDFG]" = collections.OrderedDict()


def without_ids(obj):
    """A JSON value of DaCe elements without their ``guid``s (which differ between equal copies)."""
    if isinstance(obj, dict):
        return {k: without_ids(v) for k, v in obj.items() if k != "guid"}
    if isinstance(obj, list):
        return [without_ids(v) for v in obj]
    return obj


def expansion_key(sdfg: SDFG, state: SDFGState, node: nodes.LibraryNode) -> str:
    """Everything the standalone expansion of ``node`` reads, as one string."""
    edges, names = [], []
    for e in state.in_edges(node):
        if not e.data.is_empty():
            edges.append(("in", e.dst_conn, e.data.to_json()))
            names.append(e.data.data)
    for e in state.out_edges(node):
        if not e.data.is_empty():
            edges.append(("out", e.src_conn, e.data.to_json()))
            names.append(e.data.data)
    descs = {n: (type(sdfg.arrays[n]).__name__, sdfg.arrays[n].to_json()) for n in names}
    return json.dumps(without_ids([type(node).__module__, type(node).__name__, node.label,
                                    serialize.all_properties_to_json(node), edges, descs,
                                    {k: str(v) for k, v in sdfg.symbols.items()}]), sort_keys=True, default=str)


def standalone_expansion(sdfg: SDFG, state: SDFGState, node: nodes.LibraryNode) -> SDFG:
    """A fresh SDFG holding only ``node`` and its arrays, expanded to pure maps and simplified.

    The arrays keep the names they have in ``sdfg``, so the maps of the expansion read
    and write the same names as the library node's memlets. A copy of the expansion computed
    once per ``expansion_key`` (the most recent kept).
    """
    key = expansion_key(sdfg, state, node)
    hit = _cache.get(key)
    if hit is None:
        hit = _cache[key] = _expand_alone(sdfg, state, node)
        while len(_cache) > _KEPT:
            _cache.popitem(last=False)
    else:
        _cache.move_to_end(key)
    return copy.deepcopy(hit)


def _expand_alone(sdfg: SDFG, state: SDFGState, node: nodes.LibraryNode) -> SDFG:
    sub = SDFG(f"analysis_{node.label}")
    for name, stype in sdfg.symbols.items():
        sub.add_symbol(name, stype)
    st = sub.add_state("analysis")
    new = copy.deepcopy(node)
    st.add_node(new)

    def add(name):
        if name not in sub.arrays:
            desc = sdfg.arrays[name]
            if isinstance(desc, (dt.View, dt.Scalar)) or type(desc) is not dt.Array:
                # A view without its viewed array is invalid on its own: analyse it as a plain array.
                sub.add_array(name, desc.shape, desc.dtype, strides=getattr(desc, "strides", None))
            else:
                desc = copy.deepcopy(desc)
                desc.transient = False
                sub.add_datadesc(name, desc)

    for e in state.in_edges(node):
        if e.data.is_empty():
            continue
        add(e.data.data)
        st.add_edge(st.add_read(e.data.data), None, new, e.dst_conn, copy.deepcopy(e.data))
    for e in state.out_edges(node):
        if e.data.is_empty():
            continue
        add(e.data.data)
        st.add_edge(new, e.src_conn, st.add_write(e.data.data), None, copy.deepcopy(e.data))
    force_pure_expansion(sub)
    from dace.transformation.interstate import InlineSDFG
    sub.simplify()
    sub.apply_transformations_repeated(InlineSDFG, validate=False)
    repair_init_accumulate_races(sub)
    return sub


def force_pure_expansion(sdfg: SDFG, max_rounds: int = 16) -> None:
    """Expand every library node to its pure (map-based) implementation, recursively."""
    for _ in range(max_rounds):
        libs = [(n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, nodes.LibraryNode)]
        if not libs:
            return
        for node, state in libs:
            impls = getattr(node, "implementations", {})
            for name in ("pure", "specialize"):
                if name in impls:
                    node.implementation = name
                    break
            node.expand(state.parent, state)
    raise RuntimeError("library nodes keep expanding into library nodes")


def repair_init_accumulate_races(sdfg: SDFG) -> int:
    """Order a constant initialisation before other writes of the same data inside one scope.

    DaCe 1.0.2's ``simplify()`` fuses ``b[i] = 0`` and a nested accumulation map
    ``b[i] += ...`` (the CSR SpMV) into one scope with no edge between them, so the
    generated code may accumulate before initialising. The program initialises first, so
    we add an empty-memlet edge from the initialising tasklet (one with no data inputs) to
    every other writer of that data in the scope. Returns the number of edges added.
    """
    added = 0
    for state in sdfg.all_states():
        sd = state.scope_dict()
        for ex in [n for n in state.nodes() if isinstance(n, nodes.ExitNode)]:
            writers = {}
            for e in state.in_edges(ex):
                if not e.data.is_empty():
                    writers.setdefault(e.data.data, []).append(e.src)
            for data, ws in writers.items():
                inits = [w for w in ws if isinstance(w, nodes.Tasklet)
                         and all(ie.data.is_empty() for ie in state.in_edges(w))]
                for w in inits:
                    for other in ws:
                        target = state.entry_node(other) if isinstance(other, nodes.ExitNode) else other
                        if other is w or target is None or sd.get(target) is not sd.get(w):
                            continue
                        if _has_path(state, w, target) or _has_path(state, target, w):
                            continue
                        state.add_nedge(w, target, dace.Memlet())
                        added += 1
    return added


def _has_path(state: SDFGState, a, b) -> bool:
    import networkx as nx
    return nx.has_path(state.nx, a, b)
