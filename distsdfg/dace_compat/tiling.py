"""Rank-local map code (part of the ``dace_compat`` layer): cache tiling of transposing maps (DaCe
1.0.2's ``MapTiling``) and accumulations without atomics (``Memlet.wcr_nonatomic``).

A map that reads one array along one parameter's dimension and writes another along a
different parameter's (a transpose: ``t[i0, i1] = g[i1, i0]``, the permuting copies of the
PyTorch frontend and of ``dace_compat.views``) strides through one of the two arrays a whole
row at a time: every element read or written touches another cache line. Splitting the two
parameters into tiles of ``TILE`` (``MapTiling``: an outer map over tiles, an inner map inside
one) keeps both arrays' lines in cache while a tile is copied. On this machine a 1024 x 512
float32 transpose went from 6.1 ms to 0.9 ms (float64: 4.2 to 2.0 ms); NumPy's
``np.copyto(t, g.T)`` takes 1.9 ms (3.6 ms).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import sympy
from dace import symbolic
from dace.sdfg import SDFG, SDFGState, nodes
from dace.transformation.dataflow import MapTiling

__all__ = ["TILE", "transposed_params", "tile_map", "outer_param_separates_writes", "mark_nonatomic", "bound_expr",
           "bound_names"]

#: Tile edge in elements (best of 8, 16, 32, 64 measured on this machine for float32 and float64).
TILE = 16


def bound_expr(expr):
    """A subset bound as a sympy expression (``MapTiling``'s ``SymExpr`` bounds: their exact value)."""
    if isinstance(expr, symbolic.SymExpr):
        return expr.expr
    return expr if isinstance(expr, sympy.Basic) else symbolic.pystr_to_symbolic(str(expr))


def bound_names(expr) -> set:
    """Names of the symbols in a subset bound."""
    return {str(x) for x in bound_expr(expr).free_symbols}


def _last_index_param(subset, params: List[str]) -> Optional[str]:
    """The map parameter the subset's last dimension is indexed by (a single element), or None."""
    b, e, _ = subset.ranges[-1]
    if b != e:
        return None
    used = [p for p in params if p in bound_names(b)]
    return used[0] if len(used) == 1 else None


def transposed_params(state: SDFGState, entry: nodes.MapEntry) -> Optional[Tuple[str, str]]:
    """For a top-level map whose innermost parameter indexes a non-last dimension of some array
    of two or more dimensions (so the inner loop strides through it) whose last dimension another
    parameter indexes (one element): that parameter and the innermost one, in the map's order;
    else None. A broadcast read (``m[b, i]`` inside a loop over ``j``) does not count. Only maps
    whose body is tasklets and access nodes, with no accumulated (WCR) output that some parameter
    does not index (a contraction; adding a permuted block into an array is tiled), and one such
    other parameter."""
    params = list(entry.map.params)
    if len(params) < 2:
        return None
    inner = params[-1]
    for e in state.in_edges(state.exit_node(entry)):
        if e.data.wcr is not None and not set(params) <= {n for b, _, _ in e.data.subset.ranges for n in bound_names(b)}:
            return None     # an accumulation (a pure einsum): tiling reorders its contraction loops, 2x slower
    body = state.scope_subgraph(entry, include_entry=False, include_exit=False)
    if any(not isinstance(n, (nodes.Tasklet, nodes.AccessNode)) for n in body.nodes()):
        return None
    others = set()
    for e in state.out_edges(entry) + state.in_edges(state.exit_node(entry)):
        sub = e.data.subset if e.data.data is not None else None
        if sub is None or sub.dims() < 2:
            continue
        if any(inner in bound_names(b) for b, _, _ in sub.ranges[:-1]):
            q = _last_index_param(sub, params)
            if q is None or q == inner:
                return None
            others.add(q)
    if len(others) != 1:
        return None
    q = others.pop()
    if not all(_printable(b) for p, r in zip(params, entry.map.range) if p in (q, inner) for b in r[:2]):
        return None
    return (q, inner) if params.index(q) < params.index(inner) else (inner, q)


def _printable(bound) -> bool:
    """Whether a bound survives in a tiled map's ``SymExpr`` bounds: DaCe 1.0.2 infers the type of a
    map parameter by printing its bounds with sympy's strict Python printer, which knows no
    ``int_ceil`` (the blocks of an uneven split), so code generation of such a tiled map fails
    (``PrintMethodNotImplementedError``). Maps with such bounds stay untiled."""
    try:
        sympy.printing.pycode(bound_expr(bound))
    except Exception:        # sympy's PrintMethodNotImplementedError (its module moved between versions)
        return False
    return True


def tile_map(sdfg: SDFG, state: SDFGState, entry: nodes.MapEntry, tiled: Tuple[str, ...], size: int = TILE) -> None:
    """Tile the named parameters of ``entry``'s map by ``size`` (the others stay whole)."""
    sizes = tuple(size if p in tiled else 1 for p in entry.map.params)
    MapTiling.apply_to(sdfg, options={"tile_sizes": sizes}, map_entry=entry, verify=False)


def outer_param_separates_writes(state: SDFGState, entry: nodes.MapEntry) -> bool:
    """Whether the write-conflict-resolved (WCR) outputs of a top-level map can be written without
    atomics: DaCe's CPU code generator runs such a map as ``#pragma omp parallel for`` over its
    first parameter only (``collapse`` 1), and each WCR memlet inside indexes some dimension by
    exactly that parameter, so two threads never update one element. DaCe itself uses atomics
    whenever some parameter is missing from the output (a contraction index: ``out[b, i] += ...``
    over ``k``), which is several times slower and keeps the inner loop from vectorizing.
    A map whose additions are all inside its scope (SpMV: ``b[i] += ...`` in an inner map, the WCR
    within a nested SDFG) qualifies when every element it writes out is indexed so."""
    if entry.map.collapse != 1 or not entry.map.params:
        return False
    first = symbolic.pystr_to_symbolic(entry.map.params[0])
    outs = state.in_edges(state.exit_node(entry))
    wcr = [e for e in outs if e.data.wcr is not None]
    if not wcr:
        inner = _scope_edges(state, entry)
        if not inner or not any(getattr(e.data, "wcr", None) is not None for e in inner):
            return False
        wcr = [e for e in outs if e.data.data is not None]
    for e in wcr:
        sub = e.data.subset
        if sub is None or not any(bound_expr(b) == first and bound_expr(en) == first for b, en, _ in sub.ranges):
            return False
    return bool(wcr)


def mark_nonatomic(state: SDFGState, entry: nodes.MapEntry) -> int:
    """Set ``wcr_nonatomic`` on every WCR memlet into and out of ``entry``'s exit, and on those inside
    the map's scope and its nested SDFGs (SpMV's ``b[i] += A_val[j] * x[A_col[j]]`` in an inner map over
    ``j``, whose addition DaCe emits as an atomic in the nested SDFG), unless some map inside runs in
    parallel itself; returns how many. Called where ``outer_param_separates_writes`` holds: everything
    inside one iteration of the outer parameter runs on one thread, in order."""
    exit_ = state.exit_node(entry)
    edges = list(state.in_edges(exit_) + state.out_edges(exit_))
    inner = _scope_edges(state, entry)
    if inner is not None:
        edges += inner
    n = 0
    for e in edges:
        if e.data.wcr is not None and not e.data.wcr_nonatomic:
            e.data.wcr_nonatomic = True
            n += 1
    return n


def _scope_edges(state: SDFGState, entry: nodes.MapEntry) -> Optional[List]:
    """Every edge inside ``entry``'s scope, nested SDFGs included; None when a map inside is
    scheduled in parallel (its iterations would share the outer iteration's elements)."""
    from dace import dtypes
    parallel = (dtypes.ScheduleType.CPU_Multicore, dtypes.ScheduleType.CPU_Persistent)
    edges = []
    sub = state.scope_subgraph(entry, include_entry=False, include_exit=False)
    edges += list(sub.edges())
    for node in sub.nodes():
        if isinstance(node, nodes.MapEntry) and node.map.schedule in parallel:
            return None
        if isinstance(node, nodes.NestedSDFG):
            for inner, parent in node.sdfg.all_nodes_recursive():
                if isinstance(inner, nodes.MapEntry) and inner.map.schedule in parallel:
                    return None
            edges += [e for e, _ in node.sdfg.all_edges_recursive() if hasattr(e.data, "wcr")]
    return edges
