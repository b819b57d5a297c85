"""Accesses through an index array (``onehot[i, a[i]] = 1``) narrowed to the dimensions they index by value.

DaCe 1.0.2's frontend writes such an access as a nested SDFG in the map's body that reads the index
into a symbol (an interstate assignment) and indexes the connector with it: ``[i, __sym]``. The
memlet outside the nested SDFG then spans the whole array (``onehot(1) [0:N, 0:K]``), as if every
iteration could touch every row, although only the dimension indexed by the symbol is unknown.
``narrow_indirect_accesses`` gives that memlet the box the known indices imply (``onehot(1) [i,
0:K]``) and shifts the nested SDFG's own indices by the same offset, so that the program is the
same and the map's image over a rank's block of ``i`` is that block's rows.

Example: ``for i in dace.map[0:N]: onehot[i, a[i]] = 1.0`` split 2 ways over ``i`` writes rows
``[0, N/2)`` on rank 0 and ``[N/2, N)`` on rank 1, each over the whole of ``K``; before, both ranks
wrote "all of ``onehot``", which cannot be combined.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import sympy
from dace import data as dt
from dace import subsets, symbolic
from dace.sdfg import SDFG, nodes
from dace.sdfg import propagation as _propagation

__all__ = ["narrow_indirect_accesses"]


def _assigned_symbols(inner: SDFG) -> set:
    return {k for e in inner.all_interstate_edges(recursive=True) for k in e.data.assignments}


def _read_in_conditions(inner: SDFG, name: str) -> bool:
    for e in inner.all_interstate_edges(recursive=True):
        if name in e.data.free_symbols or any(name in str(v) for v in e.data.assignments.values()):
            return True
    return False


def _border_memlets(inner: SDFG, name: str) -> Optional[List]:
    """Every memlet of the nested SDFG on ``name`` between its access nodes and tasklets or scopes, or
    None where ``name`` is also used in a way that has no subset of its own to shift (a copy to
    another array, a nested SDFG, a library node)."""
    found = []
    for state in inner.all_states():
        for e in state.edges():
            m = e.data
            if m.is_empty():
                continue
            if m.data != name:
                if isinstance(e.src, nodes.AccessNode) and e.src.data == name or \
                        isinstance(e.dst, nodes.AccessNode) and e.dst.data == name:
                    return None         # a copy whose other subset is ``name``'s
                continue
            if isinstance(e.src, (nodes.NestedSDFG, nodes.LibraryNode)) or \
                    isinstance(e.dst, (nodes.NestedSDFG, nodes.LibraryNode)):
                return None
            if not isinstance(m.subset, (subsets.Range, subsets.Indices)) or m.other_subset is not None:
                return None
            found.append(e)
    return found


def _narrowed_dims(edges, mapped: Dict[str, object], assigned: set, ndim: int):
    """Per dimension the inner (lo, hi) every memlet shares, written only in mapped symbols, or None
    (unknown: kept whole). Returns None when no memlet indexes by a value read at run time."""
    by_value, dims = False, []
    ranges = [subsets.Range.from_indices(e.data.subset) if isinstance(e.data.subset, subsets.Indices)
              else e.data.subset for e in edges]
    for d in range(ndim):
        common: Optional[Tuple] = None
        for r in ranges:
            lo, hi, st = r.ranges[d]
            fs = {str(s) for s in sympy.sympify(lo).free_symbols | sympy.sympify(hi).free_symbols}
            if fs & assigned:
                by_value = True
            if common is False:
                continue            # unknown already: kept whole
            if st != 1 or not fs <= set(mapped) or (common is not None and (
                    sympy.simplify(sympy.sympify(lo) - common[0]) != 0
                    or sympy.simplify(sympy.sympify(hi) - common[1]) != 0)):
                common = False
            elif common is None:
                common = (sympy.sympify(lo), sympy.sympify(hi))
        dims.append(common or None)
    if not by_value or not any(dims):
        return None
    return dims


def _narrow_connector(state, nsdfg: nodes.NestedSDFG, name: str, assigned: set, dry_run: bool) -> bool:
    inner = nsdfg.sdfg
    desc = inner.arrays.get(name)
    if not isinstance(desc, dt.Array) or _read_in_conditions(inner, name):
        return False
    outer = [e for e in state.in_edges(nsdfg) if e.dst_conn == name] + \
            [e for e in state.out_edges(nsdfg) if e.src_conn == name]
    if not outer or any(e.data.subset is None or e.data.subset.dims() != len(desc.shape)
                        or any(s != 1 for _, _, s in e.data.subset.ranges) for e in outer):
        return False
    if any(str(e.data.subset) != str(outer[0].data.subset) for e in outer[1:]):
        return False
    edges = _border_memlets(inner, name)
    if not edges:
        return False
    mapped = {k: v for k, v in nsdfg.symbol_mapping.items() if k not in assigned}
    dims = _narrowed_dims(edges, mapped, assigned, len(desc.shape))
    if dims is None:
        return False
    repl = {symbolic.pystr_to_symbolic(k): symbolic.pystr_to_symbolic(str(v)) for k, v in mapped.items()}
    old_outer = outer[0].data.subset.ranges
    new_outer = [(olo + dims[d][0].subs(repl), olo + dims[d][1].subs(repl), 1) if dims[d] is not None
                 else (olo, ohi, ost) for d, (olo, ohi, ost) in enumerate(old_outer)]
    if all(dims[d] is None or (dims[d][0] == 0 and all(sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0
                                                       for a, b in zip(new_outer[d], old_outer[d])))
           for d in range(len(dims))):
        return False        # narrowed already
    if dry_run:
        return True
    for e in edges:
        r = e.data.subset
        if isinstance(r, subsets.Indices):
            r = e.data.subset = subsets.Range.from_indices(r)
        r.ranges = [(b - dims[d][0], x - dims[d][0], s) if dims[d] is not None else (b, x, s)
                    for d, (b, x, s) in enumerate(r.ranges)]
    shape = list(desc.shape)
    for d, dim in enumerate(dims):
        if dim is not None:
            extent = sympy.simplify(dim[1] - dim[0] + 1)
            if extent.is_Integer:
                shape[d] = int(extent)
    desc.shape = tuple(shape)
    for e in outer:
        e.data.subset = subsets.Range(list(new_outer))
    return True


def narrow_indirect_accesses(sdfg: SDFG, *, dry_run: bool = False) -> int:
    """Narrow the memlets of nested SDFGs in maps that index an array by a value read at run time to
    the dimensions known outside (see the module docstring); returns how many connectors it narrowed
    (``dry_run``: 1 if it would narrow one, ``sdfg`` left as it is)."""
    total = 0
    for sd in sdfg.all_sdfgs_recursive():
        for state in sd.all_states():
            for node in state.nodes():
                if not isinstance(node, nodes.NestedSDFG) or not isinstance(state.entry_node(node), nodes.MapEntry):
                    continue
                assigned = _assigned_symbols(node.sdfg)
                if not assigned:
                    continue
                done = 0
                for name in sorted(set(node.in_connectors) | set(node.out_connectors)):
                    if _narrow_connector(state, node, name, assigned, dry_run):
                        if dry_run:
                            return 1
                        done += 1
                if done:
                    entry = state.entry_node(node)
                    _propagation.propagate_memlets_scope(sd, state, state.scope_tree()[entry])
                    total += done
    return total
