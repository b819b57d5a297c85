"""DaCe 1.0.2 fixes (part of the ``dace_compat`` layer): ``//``, ``%`` and the sum of a boolean
array mean what they mean in Python and NumPy.

DaCe 1.0.2 turns the Python operators of a tasklet into C++ with ``cppunparse.CPPUnparser``, which
writes ``a // b`` as ``dace::math::ifloor(a / b)`` and ``a % b`` as ``(a % b)``: C's truncating
division and remainder. For signed integers of different signs they differ from Python's floor
division and modulo (``-7 // 2`` is -4 in NumPy, -3 in the generated code; ``-7 % 2`` is 1, not -1),
so ``out = a // 7 + a % 5`` over an ``int64`` array with negative entries is silently wrong, with
DaCe alone as well; for ``float64`` operands ``%`` does not compile and ``//`` goes through ``int``.

Inside ``distsdfg.numpy_semantics()`` (``semantics.py``) ``install_division`` wraps the unparser's ``_BinOp``: both
operators become DaCe's own Python-semantics helpers from ``dace/math.h``, ``py_floor`` and
``py_mod``, instantiated at the type C++ gives the quotient (``py_floor<decltype((a) / (b))>(a, b)``,
so ``int64 // int`` and ``float64 % double`` pick one type). Everything else is unparsed by DaCe.

``np.sum(A > 0.5, axis=0)`` (a count) is a reduction whose result has the input's type in DaCe
1.0.2, ``bool``: every count comes out as ``True`` (1), silently; ``np.mean`` of an integer array
is an integer (the sum divided in integers: ``np.mean([1, 2])`` is 1). ``install_sums``
wraps DaCe's ``np.sum`` and ``.sum()``, whose boolean operand is first converted to ``int64``, and
``np.mean``, whose boolean or integer operand is first converted to ``float64``: NumPy's types.

``DISTSDFG_PYTHON_DIVISION=0`` turns both fixes off.
"""
from __future__ import annotations

import ast

from .replacements import convert

__all__ = ["install_division", "install_sums", "PYTHON_OPERATORS"]

#: The Python operators whose C++ spelling differs from Python's, and DaCe's helper for each.
PYTHON_OPERATORS = {"FloorDiv": "py_floor", "Mod": "py_mod"}

def install_division(patches) -> None:
    """Wrap the unparser's ``_BinOp`` for a ``numpy_semantics()`` block (``semantics.py``);
    ``DISTSDFG_PYTHON_DIVISION=0`` leaves DaCe as it is."""
    from ..config import PYTHON_DIVISION
    if not PYTHON_DIVISION.get():
        return
    from dace.codegen import cppunparse
    original = cppunparse.CPPUnparser._BinOp

    def _BinOp(self, t: ast.BinOp):
        helper = PYTHON_OPERATORS.get(type(t.op).__name__)
        if helper is None:
            return original(self, t)
        self.write(f"{helper}<decltype((")
        self.dispatch(t.left)
        self.write(") / (")
        self.dispatch(t.right)
        self.write("))>((")
        self.dispatch(t.left)
        self.write("), (")
        self.dispatch(t.right)
        self.write("))")

    _BinOp.__doc__ = original.__doc__
    patches.set(cppunparse.CPPUnparser, "_BinOp", _BinOp)


def _converting(original, *, to: str, integers: bool = False):
    """DaCe's replacement ``original(pv, sdfg, state, a, ...)`` with a boolean ``a`` (and an integer
    one where ``integers``) first converted to the type ``to`` (a ``dace.dtypes`` name)."""
    import numpy as np
    from dace import dtypes

    def replacement(pv, sdfg, state, a, *args, **kwargs):
        desc = sdfg.arrays.get(a) if isinstance(a, str) else None
        kind = np.dtype(desc.dtype.type).kind if desc is not None else None
        if kind != "b" and not (integers and kind in "iu"):
            return original(pv, sdfg, state, a, *args, **kwargs)
        a = convert(sdfg, state, a, getattr(dtypes, to))
        written = [n for n in state.data_nodes() if n.data == a]
        result = original(pv, sdfg, state, a, *args, **kwargs)
        _read_after_write(state, a, written)
        return result

    replacement.__doc__ = original.__doc__
    return replacement


def _read_after_write(state, name, written) -> None:
    """DaCe's reduction reads the converted array ``name`` through an access node of its own, with no
    path from the one the conversion writes (``written``): the reads move onto the written node."""
    from dace import nodes
    if len(written) != 1:
        return
    for node in [n for n in state.data_nodes() if n.data == name and n is not written[0]]:
        if state.in_degree(node) == 0 and isinstance(node, nodes.AccessNode):
            for e in state.out_edges(node):
                state.add_edge(written[0], e.src_conn, e.dst, e.dst_conn, e.data)
            state.remove_node(node)


def install_sums(patches) -> None:
    """Wrap DaCe's ``np.sum``, ``.sum()`` and ``np.mean`` for a ``numpy_semantics()`` block;
    ``DISTSDFG_PYTHON_DIVISION=0`` leaves DaCe as it is."""
    from ..config import PYTHON_DIVISION
    if not PYTHON_DIVISION.get():
        return
    from dace.frontend.common.op_repository import Replacements
    from .replacements import defining_module, ops as replacements
    original = replacements._sum
    patches.set(defining_module("_sum"), "_sum", _converting(original, to="int64"))
    for name in ("numpy.sum", "sum"):
        if Replacements._rep.get(name) in (original, replacements._sum_array):
            patches.put(Replacements._rep, name, _converting(Replacements._rep[name], to="int64"))
    for key in [k for k in Replacements._method_rep if k[1] == "sum"]:
        patches.put(Replacements._method_rep, key, _converting(Replacements._method_rep[key], to="int64"))
    if Replacements._rep.get("numpy.mean") is replacements._mean:
        patches.put(Replacements._rep, "numpy.mean", _converting(replacements._mean, to="float64", integers=True))
