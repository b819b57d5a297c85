"""DaCe 1.0.2 Python-frontend fix (part of the ``dace_compat`` layer): a slice of extent one keeps
its dimension, as in NumPy.

DaCe 1.0.2's parser reads ``A[s]`` in an expression through ``ProgramVisitor._add_read_slice``,
which squeezes out *every* dimension of size one of the subset, whether it was indexed
(``pos[:, 0]``: NumPy drops the dimension) or sliced (``pos[:, 0:1]``: NumPy keeps it). The parsed
subset no longer tells the two apart, so the SDFG does not either, and no later pass can repair it:
``x = pos[:, 0:1]; dx = x.T - x`` (the pairwise differences of an n-body code, ``(N, N)`` in
NumPy) becomes ``(N,) - (N,)``, all zeros, and ``return pos[:, 0:1]`` comes back as ``(N,)``.
Both are silent: DaCe alone gives the same wrong result.

Inside ``distsdfg.numpy_semantics()`` (distsdfg's entry points, and a user's ``prog.to_sdfg()``
in such a block; ``semantics.py``) ``_add_read_slice`` is wrapped: where the subscript's own syntax
shows a slice (``a:b``, ``...``, or a dimension left out at the end) of extent one, the view it
makes keeps that dimension. Everything else (integer indices, ``None``, index arrays, a
subscript whose syntax does not map one-to-one onto the array's dimensions, e.g. a name bound to
a tuple) goes to DaCe's own method unchanged, so the fix can only turn a squeezed slice back into
NumPy's shape. Writes (``A[:, 0:1] = ...``) are DaCe's own: their squeezing does not change
values. ``DISTSDFG_NUMPY_SLICES=0`` turns the fix off.
"""
from __future__ import annotations

import ast
from typing import List, Optional

__all__ = ["install", "sliced_dimensions", "argument_strides"]

_TRANSPOSE_NAMES = ("transpose", "dace.transpose", "numpy.transpose")

def _is_none(e: ast.AST) -> bool:
    return isinstance(e, ast.Constant) and e.value is None


def _is_ellipsis(e: ast.AST) -> bool:
    return isinstance(e, ast.Constant) and e.value is Ellipsis


def _entries(index: ast.AST) -> List[ast.AST]:
    """The comma-separated entries of a subscript (``A[i, 0:1]``: ``i`` and ``0:1``)."""
    return list(index.elts) if isinstance(index, ast.Tuple) else [index]


def sliced_dimensions(index: ast.AST, ndim: int) -> Optional[List[bool]]:
    """For each of an ``ndim``-dimensional array's dimensions, whether the subscript ``index``
    (the ``slice`` of an ``ast.Subscript``) slices it (True) or indexes it (False); None where the
    syntax alone cannot tell (a name that may hold a tuple or a slice object, too many entries)."""
    elts = _entries(index)
    for e in elts:
        integer = isinstance(e, ast.Constant) and isinstance(e.value, int) and not isinstance(e.value, bool)
        if not (isinstance(e, (ast.Slice, ast.Name, ast.BinOp, ast.UnaryOp)) or integer
                or _is_none(e) or _is_ellipsis(e)):
            return None             # a call, an attribute, a list, a slice object: DaCe decides
    if sum(1 for e in elts if _is_ellipsis(e)) > 1:
        return None
    used = sum(1 for e in elts if not _is_none(e) and not _is_ellipsis(e))
    if used > ndim:
        return None
    out: List[bool] = []
    for e in elts:
        if _is_none(e):
            continue
        if _is_ellipsis(e):
            out += [True] * (ndim - used)
        else:
            out.append(isinstance(e, ast.Slice))
    out += [True] * (ndim - len(out))
    return out


def _names_a_scalar(visitor, e: ast.AST) -> bool:
    """Whether the subscript entry ``e`` (an ``ast.Name``) is an integer index the visitor knows:
    a symbol, a scalar, or a Python integer of the program's closure."""
    import numbers
    from dace import data, symbolic
    name = e.id
    target = visitor.variables.get(name, name)
    desc = visitor.sdfg.arrays.get(target)
    if desc is not None:
        return isinstance(desc, data.Scalar)
    if name in visitor.sdfg.symbols:
        return True
    value = getattr(visitor, "globals", {}).get(name)
    return isinstance(value, (numbers.Integral, symbolic.symbol))


def _keeping_view(visitor, array: str, node: ast.Subscript, expr):
    """The view of ``array`` that DaCe's ``_add_read_slice`` makes, with the dimensions sliced to
    extent one kept; None where DaCe's own method is right (nothing to keep) or must decide."""
    from dace import Memlet, subsets
    if expr.arrdims or not isinstance(expr.subset, subsets.Range):
        return None
    arrobj = visitor.sdfg.arrays[array]
    sliced = sliced_dimensions(node.slice, len(arrobj.shape))
    if sliced is None or len(sliced) != len(expr.subset):
        return None
    if any(isinstance(e, ast.Name) and not _names_a_scalar(visitor, e) for e in _entries(node.slice)):
        return None
    sizes = expr.subset.size()
    if not any(s and size == 1 for s, size in zip(sliced, sizes)):
        return None                                     # nothing to keep: DaCe's own view is right
    dims = [d for d, s in enumerate(sliced) if s]
    shape = [sizes[d] for d in dims]
    strides = [arrobj.strides[d] for d in dims]
    for axis in sorted(expr.new_axes):                      # np.newaxis: a dimension of size one
        shape.insert(axis, 1)
        strides.insert(axis, 1)
    visitor._add_state('slice_%s_%d' % (array.replace('.', '_'), node.lineno))
    view, desc = visitor.sdfg.add_view(array, shape, arrobj.dtype, storage=arrobj.storage, strides=strides,
                                       find_new_name=True)
    whole = subsets.Range.from_array(desc)
    visitor.views[view] = (array, Memlet(data=array, subset=str(expr.subset), other_subset=str(whole),
                                         volume=expr.accesses, wcr=expr.wcr))
    visitor.variables[view] = view
    return view


def _transpose_with_unit_dimension(original):
    """DaCe's ``np.transpose`` / ``.T`` / ``.transpose()``, except for a matrix with a dimension of
    size one (``pos[:, 0:1].T``, now that such slices keep their dimension): DaCe's ``Transpose``
    library node squeezes its memlets and refuses it ("only supported on matrices"). That one is a
    copy map ``out[j, i] = inp[i, j]``, which reads a strided view correctly as well."""
    from dace import Memlet

    def transpose(pv, sdfg, state, inpname, axes=None):
        desc = sdfg.arrays[inpname]
        if (len(desc.shape) == 2 and (axes is None or tuple(axes) == (1, 0))
                and any(s == 1 for s in desc.shape)):
            rows, cols = desc.shape
            out, _ = sdfg.add_temp_transient([cols, rows], desc.dtype, desc.storage)
            state.add_mapped_tasklet("transpose_unit", {"__i0": f"0:{rows}", "__i1": f"0:{cols}"},
                                     {"__in": Memlet(f"{inpname}[__i0, __i1]")}, "__out = __in",
                                     {"__out": Memlet(f"{out}[__i1, __i0]")}, external_edges=True)
            return out
        return original(pv, sdfg, state, inpname, axes)

    transpose.__doc__ = original.__doc__
    return transpose


def argument_strides(outer_desc, subset, inner_desc, mapping):
    """The strides, in the callee's symbols, that a nested SDFG's parameter ``inner_desc`` must have
    to address the argument ``subset`` of ``outer_desc``; None where DaCe's own are right or where the
    subset does not have the parameter's shape dimension by dimension (a reshaping call: DaCe's)."""
    from dace import symbolic
    sizes = subset.size()
    if len(sizes) != len(inner_desc.shape) or not any(sz == 1 for sz in sizes) or len(sizes) < 2:
        return None
    if any(step != 1 for _, _, step in subset.ndrange()):
        return None                                     # a strided argument: DaCe's
    to_outer = {symbolic.pystr_to_symbolic(k): symbolic.pystr_to_symbolic(str(v)) for k, v in mapping.items()}
    for inner, size in zip(inner_desc.shape, sizes):
        if symbolic.simplify(symbolic.pystr_to_symbolic(str(inner)).subs(to_outer) - size) != 0:
            return None
    to_inner = {v: symbolic.pystr_to_symbolic(k) for k, v in to_outer.items() if symbolic.issymbolic(v)}
    strides = tuple(symbolic.pystr_to_symbolic(str(s)).subs(to_inner) if symbolic.issymbolic(s) else s
                    for s in outer_desc.strides)
    inner_names = {str(k) for k in to_outer}
    if any(str(f) in inner_names and str(f) not in map(str, to_inner.values())
           for s in outer_desc.strides if symbolic.issymbolic(s) for f in s.free_symbols):
        return None                                     # a caller's symbol the callee uses otherwise
    wide = [d for d, sz in enumerate(sizes) if sz != 1]
    if all(symbolic.simplify(symbolic.pystr_to_symbolic(str(inner_desc.strides[d])) - strides[d]) == 0 for d in wide):
        return None                                     # DaCe's strides already address it
    return strides


def _fix_nested_strides(visitor, before) -> None:
    """Gives the parameters of the nested SDFGs that ``_parse_sdfg_call`` added (those not in
    ``before``) the strides ``argument_strides`` finds."""
    from dace import nodes
    for state in visitor.sdfg.all_states():
        for node in state.nodes():
            if not isinstance(node, nodes.NestedSDFG) or id(node) in before:
                continue
            edges = [(e.dst_conn, e.data) for e in state.in_edges(node)] + \
                    [(e.src_conn, e.data) for e in state.out_edges(node)]
            for conn, memlet in edges:
                if conn is None or memlet.data is None or conn not in node.sdfg.arrays:
                    continue
                inner = node.sdfg.arrays[conn]
                strides = argument_strides(visitor.sdfg.arrays[memlet.data], memlet.subset, inner,
                                           node.symbol_mapping)
                if strides is not None:
                    inner.strides = strides
                    _pass_symbols(visitor.sdfg, node, strides)
                _restride_whole_views(node.sdfg, conn)


def _restride_whole_views(sdfg, name: str) -> None:
    """DaCe 2.0 passes the argument as the connector ``name`` with its strides, and reads the parameter
    through a view of all of it made with contiguous strides (``(1, 1)`` for ``[L, 1]``): where
    the connector has a dimension of one, such a view takes the connector's strides."""
    from dace import data, nodes
    from ..geometry.boxes import row_major_strides
    desc = sdfg.arrays[name]
    if not any(str(s) == "1" for s in desc.shape) or len(desc.shape) < 2:
        return
    shape = [str(s) for s in desc.shape]
    contiguous = [str(s) for s in row_major_strides(list(desc.shape))]
    for state in sdfg.all_states():
        for an in state.data_nodes():
            if an.data != name:
                continue
            for e in state.all_edges(an):
                other = e.dst if e.src is an else e.src
                view = sdfg.arrays.get(other.data) if isinstance(other, nodes.AccessNode) else None
                if (isinstance(view, data.View) and [str(s) for s in view.shape] == shape
                        and [str(s) for s in view.strides] == contiguous):
                    view.strides = tuple(desc.strides)


def _pass_symbols(outer, node, strides) -> None:
    """Maps the caller's symbols that ``strides`` name and the callee lacks to themselves."""
    from dace import symbolic
    for f in {f for s in strides if symbolic.issymbolic(s) for f in s.free_symbols}:
        if f.name not in node.symbol_mapping and f.name in outer.symbols:
            node.sdfg.add_symbol(f.name, outer.symbols[f.name])
            node.symbol_mapping[f.name] = f


def _nested_ids(visitor):
    from dace import nodes
    return {id(n) for st in visitor.sdfg.all_states() for n in st.nodes() if isinstance(n, nodes.NestedSDFG)}


def install(patches) -> None:
    """Apply the fix to DaCe's parser for a ``numpy_semantics()`` block (``semantics.py``);
    ``DISTSDFG_NUMPY_SLICES=0`` leaves DaCe as it is."""
    from ..config import NUMPY_SLICES
    if not NUMPY_SLICES.get():
        return
    from dace.frontend.python import newast
    visitor = newast.ProgramVisitor
    original = visitor._add_read_slice

    def _add_read_slice(self, array, node, expr):
        view = _keeping_view(self, array, node, expr)
        return view if view is not None else original(self, array, node, expr)

    _add_read_slice.__doc__ = original.__doc__
    patches.set(visitor, "_add_read_slice", _add_read_slice)

    original_call = visitor._parse_sdfg_call

    def _parse_sdfg_call(self, funcname, func, node):
        before = _nested_ids(self)
        result = original_call(self, funcname, func, node)
        _fix_nested_strides(self, before)
        return result

    _parse_sdfg_call.__doc__ = original_call.__doc__
    patches.set(visitor, "_parse_sdfg_call", _parse_sdfg_call)

    # ``.T`` and ``.transpose()`` call the module's ``_transpose``; ``np.transpose`` is registered.
    from dace.frontend.common.op_repository import Replacements
    from .replacements import defining_module
    owner = defining_module("_transpose")
    original_transpose = owner._transpose
    transpose = _transpose_with_unit_dimension(original_transpose)
    patches.set(owner, "_transpose", transpose)
    for name in _TRANSPOSE_NAMES:
        if Replacements._rep.get(name) is original_transpose:
            patches.put(Replacements._rep, name, transpose)
