"""DaCe 1.0.2 fixes (part of the ``dace_compat`` layer): NumPy's array functions that DaCe 1.0.2
leaves as Python callbacks or refuses, written as DaCe maps and its own operations.

Translated (inside ``distsdfg.numpy_semantics()``, ``semantics.py``): ``np.matmul``;
``np.outer``, ``np.inner`` and ``np.vdot`` of vectors; ``np.diag`` (a matrix's diagonal, with an
offset, or a vector's diagonal matrix), ``np.trace``, ``np.tril`` and ``np.triu`` (the last two
axes, with an offset); ``np.cumsum`` and ``np.cumprod`` (an axis or the flattened array; a map over
the other axes whose body scans one contiguous line, the scanned axis moved last first where it is
not); ``np.diff`` (``n``, ``axis``); ``np.argmax``/``np.argmin`` without an axis (the flattened
array, as NumPy) and the ``a.argmax()``/``a.argmin()`` methods; ``a.max(axis=...)`` and
``a.min(axis=...)``. The maps they make are partitioned like any other map of the program.

Forms not written here (complex ``vdot``, ``np.diag`` of a vector with an offset, ``np.diff`` of
booleans, ...) raise DaCe's syntax error with the reason. ``DISTSDFG_NUMPY_FUNCTIONS=0`` leaves
DaCe as it is.
"""
from __future__ import annotations


import sympy

from .npfuncs import _axes, _kind, _refuse
from .replacements import convert

__all__ = ["install", "ARRAY_FUNCTIONS"]

def _new_map(nest, sdfg, label, shape, inputs, code, out_name, out_subset, params=None):
    """A state after ``nest``'s last with one mapped tasklet over ``shape``: ``inputs`` maps each
    connector to ``(array, subset)``, the output ``__out`` is ``out_name[out_subset]``."""
    import dace
    params = params or [f"__i{d}" for d in range(len(shape))]
    st = nest.add_state()
    st.add_mapped_tasklet(label, {p: f"0:{n}" for p, n in zip(params, shape)},
                          {c: dace.Memlet(data=a, subset=s) for c, (a, s) in inputs.items()}, code,
                          {"__out": dace.Memlet(data=out_name, subset=out_subset)}, external_edges=True)
    return out_name


def _nest(pv, sdfg, state):
    from dace.frontend.python.nested_call import NestedCall
    return NestedCall(pv, sdfg, state)


def _array(pv, sdfg, a, what: str):
    if not isinstance(a, str) or a not in sdfg.arrays:
        raise _refuse(pv, f"{what}: the operand {a!r} is not an array")
    return sdfg.arrays[a]


def _product_type(sdfg, a, b):
    from dace import dtypes
    return dtypes.result_type_of(sdfg.arrays[a].dtype, sdfg.arrays[b].dtype)


def _matmul(pv, sdfg, state, a, b, out=None):
    from .replacements import ops as replacements
    if out is not None:
        raise _refuse(pv, "np.matmul: out= is not translated; assign the result instead")
    return replacements._matmult(pv, sdfg, state, a, b)


def _outer(pv, sdfg, state, a, b, out=None):
    da, db = _array(pv, sdfg, a, "np.outer"), _array(pv, sdfg, b, "np.outer")
    if out is not None or len(da.shape) != 1 or len(db.shape) != 1:
        raise _refuse(pv, "np.outer is translated for two vectors (no out=); ravel the operands first")
    nest = _nest(pv, sdfg, state)
    name, _ = sdfg.add_temp_transient((da.shape[0], db.shape[0]), _product_type(sdfg, a, b), da.storage)
    return nest, _new_map(nest, sdfg, "outer", (da.shape[0], db.shape[0]),
                          {"__a": (a, "__i0"), "__b": (b, "__i1")}, "__out = __a * __b", name, "__i0, __i1")


def _inner(pv, sdfg, state, a, b):
    from .replacements import ops as replacements
    da, db = _array(pv, sdfg, a, "np.inner"), _array(pv, sdfg, b, "np.inner")
    if len(da.shape) != 1 or len(db.shape) != 1:
        raise _refuse(pv, "np.inner is translated for two vectors; use np.einsum or @ for arrays")
    return replacements.dot(pv, sdfg, state, a, b)


def _vdot(pv, sdfg, state, a, b):
    if "c" in (_kind(sdfg, a), _kind(sdfg, b)):
        raise _refuse(pv, "np.vdot of complex vectors is not translated; write np.dot(np.conj(a), b)")
    return _inner(pv, sdfg, state, a, b)


def _diagonal_length(n, m, k: int):
    if k == 0 and sympy.simplify(sympy.sympify(n) - sympy.sympify(m)) == 0:
        return n
    return sympy.Max(0, sympy.Min(sympy.sympify(n) + min(k, 0), sympy.sympify(m) - max(k, 0)))


def _diag(pv, sdfg, state, v, k=0):
    desc = _array(pv, sdfg, v, "np.diag")
    nest = _nest(pv, sdfg, state)
    if len(desc.shape) == 2:
        n = _diagonal_length(desc.shape[0], desc.shape[1], int(k))
        name, _ = sdfg.add_temp_transient((n,), desc.dtype, desc.storage)
        rows, cols = f"__i0 + {max(-int(k), 0)}", f"__i0 + {max(int(k), 0)}"
        return nest, _new_map(nest, sdfg, "diagonal", (n,), {"__a": (v, f"{rows}, {cols}")}, "__out = __a",
                              name, "__i0")
    if len(desc.shape) != 1 or int(k) != 0:
        raise _refuse(pv, "np.diag is translated for a matrix (any offset) and a vector (offset 0)")
    n = desc.shape[0]
    name, _ = sdfg.add_temp_transient((n, n), desc.dtype, desc.storage)
    return nest, _new_map(nest, sdfg, "diagonal_matrix", (n, n), {"__v": (v, "__i0")},
                          "__out = __v if __i0 == __i1 else 0", name, "__i0, __i1")


def _trace(pv, sdfg, state, a, offset=0):
    from dace.frontend.common.op_repository import Replacements
    desc = _array(pv, sdfg, a, "np.trace")
    if len(desc.shape) != 2:
        raise _refuse(pv, "np.trace is translated for matrices")
    nest = _nest(pv, sdfg, state)
    d = nest(_diag)(a, offset)
    return nest, nest(Replacements.get("numpy.sum"))(d)


def _triangle(lower: bool):
    def tri(pv, sdfg, state, m, k=0):
        desc = _array(pv, sdfg, m, "np.tril" if lower else "np.triu")
        if len(desc.shape) < 2:
            raise _refuse(pv, "np.tril/np.triu are translated for arrays of two or more dimensions")
        nest = _nest(pv, sdfg, state)
        nd = len(desc.shape)
        i, j = f"__i{nd - 2}", f"__i{nd - 1}"
        keep = f"{j} - {i} <= {int(k)}" if lower else f"{j} - {i} >= {int(k)}"
        name, _ = sdfg.add_temp_transient(desc.shape, desc.dtype, desc.storage)
        sub = ", ".join(f"__i{d}" for d in range(nd))
        return nest, _new_map(nest, sdfg, "tril" if lower else "triu", desc.shape, {"__a": (m, sub)},
                              f"__out = __a if {keep} else 0", name, sub)
    return tri


def _flattened(nest, sdfg, a):
    """``a`` as one dimension (DaCe's reshape, a view of a contiguous array) for ``axis=None``."""
    from .replacements import ops as replacements
    shape = sdfg.arrays[a].shape
    if len(shape) == 1:
        return a
    total = 1
    for n in shape:
        total = total * n
    return nest(replacements.reshape)(a, (total,))


def _moved_last(pv, nest, sdfg, a, axis: int):
    """``a`` with ``axis`` moved last (a copy by DaCe's transpose), and the permutation (None if none)."""
    from dace.frontend.common.op_repository import Replacements
    nd = len(sdfg.arrays[a].shape)
    if axis == nd - 1:
        return a, None
    perm = [d for d in range(nd) if d != axis] + [axis]
    return nest(Replacements.get("numpy.transpose"))(a, perm), perm


def _scan(op: str, what: str):
    def scan(pv, sdfg, state, a, axis=None, dtype=None, out=None):
        from dace import dtypes
        from dace.frontend.common.op_repository import Replacements
        desc = _array(pv, sdfg, a, what)
        if dtype is not None or out is not None:
            raise _refuse(pv, f"{what}: dtype= and out= are not translated; convert the operand first")
        nest = _nest(pv, sdfg, state)
        if _kind(sdfg, a) in "iub" and desc.dtype != dtypes.int64:
            a = convert(sdfg, nest.add_state(), a, dtypes.int64)
        if axis is None:
            a, axis = _flattened(nest, sdfg, a), 0
        ax = _axes(pv, len(sdfg.arrays[a].shape), axis, what)[0]
        x, perm = _moved_last(pv, nest, sdfg, a, ax)
        xd = sdfg.arrays[x]
        *outer, length = xd.shape
        name, _ = sdfg.add_temp_transient(xd.shape, xd.dtype, xd.storage)
        params = [f"__i{d}" for d in range(len(outer))] or ["__i0"]
        line = ", ".join(params[:len(outer)] + [f"0:{length}"])
        code = (f"__acc = __in[0]\n__out[0] = __acc\nfor __k in range(1, {length}):\n"
                f"    __acc = __acc {op} __in[__k]\n    __out[__k] = __acc")
        _new_map(nest, sdfg, what.replace("np.", ""), outer or (1,), {"__in": (x, line)}, code, name, line, params)
        if perm is None:
            return nest, name
        back = [perm.index(d) for d in range(len(perm))]
        return nest, nest(Replacements.get("numpy.transpose"))(name, back)
    return scan


def _diff(pv, sdfg, state, a, n=1, axis=-1):
    desc = _array(pv, sdfg, a, "np.diff")
    if _kind(sdfg, a) == "b" or int(n) < 1:
        raise _refuse(pv, "np.diff is translated for numbers with n >= 1 (NumPy's diff of booleans is xor)")
    nest = _nest(pv, sdfg, state)
    nd = len(desc.shape)
    ax = _axes(pv, nd, axis, "np.diff")[0]
    for _ in range(int(n)):
        shape = tuple(s - 1 if d == ax else s for d, s in enumerate(sdfg.arrays[a].shape))
        name, _ = sdfg.add_temp_transient(shape, sdfg.arrays[a].dtype, desc.storage)
        here = ", ".join(f"__i{d}" for d in range(nd))
        nxt = ", ".join(f"__i{d} + 1" if d == ax else f"__i{d}" for d in range(nd))
        a = _new_map(nest, sdfg, "diff", shape, {"__hi": (a, nxt), "__lo": (a, here)}, "__out = __hi - __lo",
                     name, here)
    return nest, a


def _arg(func: str):
    def arg(pv, sdfg, state, a, axis=None, out=None):
        from dace import dtypes
        from .replacements import ops as replacements
        desc = _array(pv, sdfg, a, f"np.arg{func}")
        if out is not None:
            raise _refuse(pv, f"np.arg{func}: out= is not translated")
        nest = _nest(pv, sdfg, state)
        if axis is None:
            a, axis = _flattened(nest, sdfg, a), 0
        desc = sdfg.arrays[a]
        nd = len(desc.shape)
        ax = _axes(pv, nd, axis, f"np.arg{func}")[0]
        # The extreme value along the axis, then the least index holding it (NumPy's first occurrence):
        # two plain reductions that split like any other (DaCe's own argmax reduces value-index pairs,
        # which cannot be sent between ranks, and cannot reduce a vector at all)
        kept = ", ".join(f"__i{d}" for d in range(nd) if d != ax) or "0"
        best = nest(replacements._max if func == "max" else replacements._min)(a, axis=None if nd == 1 else ax)
        name, _ = sdfg.add_temp_transient(desc.shape, dtypes.int64, desc.storage)
        here = ", ".join(f"__i{d}" for d in range(nd))
        _new_map(nest, sdfg, f"arg{func}_candidates", desc.shape, {"__a": (a, here), "__m": (best, kept)},
                 f"__out = __i{ax} if __a == __m else {desc.shape[ax]}", name, here)
        return nest, nest(replacements._min)(name, axis=None if nd == 1 else ax)
    return arg


def _extreme(ufunc: str):
    def method(pv, sdfg, state, arr, axis=None, out=None, keepdims=False, kwargs=None):
        from .replacements import ops as replacements
        if out is not None:
            raise _refuse(pv, f"a.{ufunc[:3]}(): out= is not translated")
        given = dict(kwargs or {})
        given.setdefault("axis", axis)
        if keepdims:
            given["keepdims"] = keepdims
        return replacements.implement_ufunc_reduce(pv, None, sdfg, state, ufunc, [arr], given)[0]
    return method


def _method_of(name: str):
    """``a.sum(axis=...)`` and the like as ``np.sum(a, axis=...)`` (DaCe 1.0.2's methods take no axis)."""
    def method(pv, sdfg, state, arr, *args, kwargs=None, **given):
        from dace.frontend.common.op_repository import Replacements
        given.update(kwargs or {})
        return Replacements.get(name)(pv, sdfg, state, arr, *args, **given)
    return method


#: name -> replacement, registered where DaCe 1.0.2 has none (or, for argmax/argmin, its own needs an axis).
ARRAY_FUNCTIONS = {
    "numpy.matmul": _matmul, "numpy.outer": _outer, "numpy.inner": _inner, "numpy.vdot": _vdot,
    "numpy.diag": _diag, "numpy.trace": _trace, "numpy.tril": _triangle(True), "numpy.triu": _triangle(False),
    "numpy.cumsum": _scan("+", "np.cumsum"), "numpy.cumprod": _scan("*", "np.cumprod"), "numpy.diff": _diff,
}


def install(patches) -> None:
    """Register the replacements for a ``numpy_semantics()`` block (``semantics.py``);
    ``DISTSDFG_NUMPY_FUNCTIONS=0`` leaves DaCe as it is."""
    from ..config import NUMPY_FUNCTIONS
    if not NUMPY_FUNCTIONS.get():
        return
    from dace.frontend.common.op_repository import Replacements
    from .replacements import ops as replacements
    rep, methods = Replacements._rep, Replacements._method_rep
    for name, func in ARRAY_FUNCTIONS.items():
        if name not in rep:
            patches.put(rep, name, func)
    for func, own in (("max", replacements._argmax), ("min", replacements._argmin)):
        if rep.get(f"numpy.arg{func}") is own:      # DaCe's own needs an axis
            patches.put(rep, f"numpy.arg{func}", _arg(func))
    for cls in ("Array", "View"):
        for func in ("max", "min"):
            if (cls, f"arg{func}") not in methods:
                patches.put(methods, (cls, f"arg{func}"), _arg(func))
        for func, own, ufunc in (("max", replacements._ndarray_max, "maximum"),
                                 ("min", replacements._ndarray_min, "minimum")):
            if methods.get((cls, func)) is own:     # DaCe's own takes no axis
                patches.put(methods, (cls, func), _extreme(ufunc))
        for func in ("sum", "mean", "prod", "any", "all"):
            own = getattr(replacements, f"_ndarray_{func}", None)
            if own is not None and methods.get((cls, func)) is own:   # takes no axis either
                patches.put(methods, (cls, func), _method_of(f"numpy.{func}"))
