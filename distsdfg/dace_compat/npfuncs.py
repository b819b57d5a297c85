"""DaCe 1.0.2 fixes (part of the ``dace_compat`` layer): ``np.clip``, ``np.var``, ``np.std`` and
``np.linalg.norm`` are translated instead of left as Python callbacks.

DaCe 1.0.2 has no replacement for these four functions (``np.clip`` has a ufunc implementation,
but NumPy 1.x's ``np.clip`` is a Python function, not a ufunc, so the parser never finds it): each
call becomes a callback into the Python interpreter, which a compiled distributed program cannot
make (``lower`` refuses it by name) and whose result type DaCe cannot infer (``np.var(a) + 1``
does not even parse). Inside ``distsdfg.numpy_semantics()`` (``semantics.py``) ``install`` registers
replacements built from DaCe's own operations, so the maps they make are partitioned like any
other:

- ``np.clip(a, lo, hi)`` and ``a.clip(lo, hi)``: DaCe's ``clip`` ufunc (``min(max(a, lo), hi)``,
  scalars or broadcast arrays as bounds); with one bound ``None``, ``np.maximum`` / ``np.minimum``.
- ``np.var(a, axis=None, ddof=0)`` and ``np.std`` (and the methods): the mean, then one map of
  squared deviations ``(a - mean) ** 2`` (the mean indexed by the kept axes), their sum divided by
  ``n - ddof``, and its square root for ``std``. The two-pass formula NumPy uses, not
  ``E[a²] - E[a]²``, so the result agrees to rounding with NumPy's. Integer and boolean arrays give
  ``float64``, as in NumPy.
- ``np.linalg.norm(x, ord=None, axis=None)``: ``sqrt(sum(x * x))`` (the 2-norm of a vector, the
  Frobenius norm of a matrix, ``ord='fro'``), and for a vector or a given axis ``ord=1``
  (``sum(abs(x))``) and ``ord=np.inf`` (``max(abs(x))``).

Complex operands, ``keepdims=True``, ``out=``/``dtype=`` and other norms (a matrix's 2-norm, nuclear
norm) raise DaCe's syntax error with the reason, which ``lower`` reports; nothing is approximated.
``DISTSDFG_NUMPY_FUNCTIONS=0`` leaves DaCe as it is.
"""
from __future__ import annotations

import ast
import math
import operator
from functools import reduce as _fold

from .replacements import convert

__all__ = ["install", "FUNCTIONS"]

def _refuse(pv, why: str):
    from dace.frontend.python.memlet_parser import DaceSyntaxError
    node = ast.Call(func=ast.Name(id="call", ctx=ast.Load()), args=[], keywords=[])
    info = getattr(pv, "current_lineinfo", None)
    node.lineno = getattr(info, "start_line", 0) or 0
    node.col_offset = getattr(info, "start_column", 0) or 0
    return DaceSyntaxError(pv, node, why)


def _kind(sdfg, a) -> str:
    import numpy as np
    if not isinstance(a, str) or a not in sdfg.arrays:
        return "scalar"
    return np.dtype(sdfg.arrays[a].dtype.type).kind


def _as_float(pv, sdfg, state, a: str, what: str) -> str:
    """``a`` itself for a real floating array; a ``float64`` copy of an integer or boolean one."""
    from dace import dtypes
    kind = _kind(sdfg, a)
    if kind == "f":
        return a
    if kind in "iub":
        return convert(sdfg, state, a, dtypes.float64)
    raise _refuse(pv, f"distsdfg translates {what} of real arrays only (got dtype {sdfg.arrays[a].dtype}); "
                      f"for complex data write it with np.abs")


def _axes(pv, ndim: int, axis, what: str):
    """The reduced axes as a sorted tuple (all of them for ``None``)."""
    if axis is None:
        return tuple(range(ndim))
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    try:
        axes = tuple(operator.index(x) if not hasattr(x, "is_Integer") else int(x) for x in axes)
    except TypeError:
        raise _refuse(pv, f"{what}: axis must be an integer or a tuple of integers (got {axis!r})") from None
    out = tuple(sorted({x + ndim if x < 0 else x for x in axes}))
    if any(x < 0 or x >= ndim for x in out):
        raise _refuse(pv, f"{what}: axis {axis!r} is out of bounds for an array of {ndim} dimensions")
    return out


def _no_extras(pv, what: str, **given):
    bad = [k for k, v in given.items() if v not in (None, False)]
    if bad:
        raise _refuse(pv, f"{what}: distsdfg does not translate the argument(s) {', '.join(bad)}; "
                          f"compute without them and reshape or convert the result")


def _clip(pv, sdfg, state, a, a_min=None, a_max=None, out=None, **kwargs):
    from .replacements import ops as replacements
    _no_extras(pv, "np.clip", out=out, **kwargs)
    if a_min is None and a_max is None:
        raise _refuse(pv, "np.clip: one of a_min and a_max must be given (NumPy refuses both None too)")
    node = ast.Call(func=ast.Name(id="clip", ctx=ast.Load()), args=[], keywords=[])
    node.lineno, node.col_offset = 0, 0
    if a_min is None:
        name, args = "minimum", [a, a_max]
    elif a_max is None:
        name, args = "maximum", [a, a_min]
    else:
        name, args = "clip", [a, a_min, a_max]
    return replacements.implement_ufunc(pv, node, sdfg, state, name, args, {})


def _variance(pv, sdfg, state, a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, what="np.var",
              root=False):
    import dace
    from .replacements import ops as replacements
    from dace.frontend.python.nested_call import NestedCall
    _no_extras(pv, what, dtype=dtype, out=out, keepdims=keepdims)
    if not isinstance(a, str) or a not in sdfg.arrays:
        raise _refuse(pv, f"{what} of a non-array operand {a!r}")
    nest = NestedCall(pv, sdfg, state)
    x = _as_float(pv, sdfg, nest.add_state(), a, what)
    desc = sdfg.arrays[x]
    axes = _axes(pv, len(desc.shape), axis, what)
    mean = nest(replacements._mean)(x, axis=None if len(axes) == len(desc.shape) else axes)

    params = [f"__v{d}" for d in range(len(desc.shape))]
    kept = [p for d, p in enumerate(params) if d not in axes]
    dev, _ = sdfg.add_temp_transient(desc.shape, desc.dtype, desc.storage)
    st = nest.add_state()
    st.add_mapped_tasklet(
        "deviation_squared", {p: f"0:{n}" for p, n in zip(params, desc.shape)},
        {"__a": dace.Memlet(data=x, subset=", ".join(params)),
         "__m": dace.Memlet(data=mean, subset=", ".join(kept) if kept else "0")},
        "__out = (__a - __m) * (__a - __m)",
        {"__out": dace.Memlet(data=dev, subset=", ".join(params))}, external_edges=True)
    total = nest(replacements._sum)(dev, axis=None if len(axes) == len(desc.shape) else axes)
    count = _fold(lambda p, q: p * q, (desc.shape[d] for d in axes), 1)
    scale = f"lambda x: sqrt(x / ({count} - {ddof}))" if root else f"lambda x: x / ({count} - {ddof})"
    return nest, nest(replacements._elementwise)(scale, total)


def _var(pv, sdfg, state, a, *args, **kwargs):
    return _variance(pv, sdfg, state, a, *args, what="np.var", **kwargs)


def _std(pv, sdfg, state, a, *args, **kwargs):
    return _variance(pv, sdfg, state, a, *args, what="np.std", root=True, **kwargs)


def _norm(pv, sdfg, state, x, ord=None, axis=None, keepdims=False):
    from .replacements import ops as replacements
    from dace.frontend.python.nested_call import NestedCall
    _no_extras(pv, "np.linalg.norm", keepdims=keepdims)
    if not isinstance(x, str) or x not in sdfg.arrays:
        raise _refuse(pv, f"np.linalg.norm of a non-array operand {x!r}")
    nest = NestedCall(pv, sdfg, state)
    y = _as_float(pv, sdfg, nest.add_state(), x, "np.linalg.norm")
    ndim = len(sdfg.arrays[y].shape)
    axes = _axes(pv, ndim, axis, "np.linalg.norm")
    everything = len(axes) == ndim
    vector = len(axes) == 1
    red_axis = None if everything else axes
    if ord is None or ord == "fro" and len(axes) == 2 or ord == 2 and vector:
        sq = nest(replacements._elementwise)("lambda v: v * v", y)
        total = nest(replacements._sum)(sq, axis=red_axis)
        return nest, nest(replacements._elementwise)("lambda v: sqrt(v)", total)
    if vector and ord == 1:
        mag = nest(replacements._elementwise)("lambda v: abs(v)", y)
        return nest, nest(replacements._sum)(mag, axis=red_axis)
    if vector and isinstance(ord, float) and math.isinf(ord) and ord > 0:
        mag = nest(replacements._elementwise)("lambda v: abs(v)", y)
        return nest, nest(replacements._max)(mag, axis=red_axis)
    raise _refuse(pv, f"np.linalg.norm with ord={ord!r} over {len(axes)} axis(es) is not translated by distsdfg "
                      f"(translated: ord=None/'fro', and for one axis ord=1, 2, np.inf)")


def _reduction(kind: str, what: str):
    """``np.prod``, ``np.any``, ``np.all``, ``np.count_nonzero`` and ``np.ptp`` over ``axis``."""
    def reduction(pv, sdfg, state, a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
        from dace import dtypes
        from dace.frontend.common.op_repository import Replacements
        from .replacements import ops as replacements
        from dace.frontend.python.nested_call import NestedCall
        _no_extras(pv, what, dtype=dtype, out=out, keepdims=keepdims, initial=initial, where=where)
        if not isinstance(a, str) or a not in sdfg.arrays:
            raise _refuse(pv, f"{what} of a non-array operand {a!r}")
        nest = NestedCall(pv, sdfg, state)
        ax = None if axis is None else _axes(pv, len(sdfg.arrays[a].shape), axis, what)
        k = _kind(sdfg, a)
        if kind in ("any", "all", "count") and k != "b":
            a = convert(sdfg, nest.add_state(), a, dtypes.bool)
        if kind == "count":
            a = convert(sdfg, nest.add_state(), a, dtypes.int64)
            return nest, nest(Replacements.get("numpy.sum"))(a, axis=ax)
        if kind == "prod":
            if k in "ub" or k == "i" and sdfg.arrays[a].dtype != dtypes.int64:
                a = convert(sdfg, nest.add_state(), a, dtypes.int64)
            return nest, nest(replacements._reduce)("lambda x, y: x * y", a, axis=ax, identity=1)
        if kind == "ptp":
            hi = nest(replacements._max)(a, axis=ax)
            lo = nest(replacements._min)(a, axis=ax)
            return nest, nest(replacements._array_array_binop)(hi, lo, "Sub", "-")
        # any / all: the logical or / and of booleans, as their max / min (MPI's LOR / LAND)
        red = "lambda x, y: max(x, y)" if kind == "any" else "lambda x, y: min(x, y)"
        return nest, nest(replacements._reduce)(red, a, axis=ax, identity=kind == "all")
    return reduction


def _round(pv, sdfg, state, a, decimals=0, out=None):
    from .replacements import ops as replacements
    _no_extras(pv, "np.round", out=out)
    k = _kind(sdfg, a)
    if k not in "f":
        raise _refuse(pv, f"np.round is translated for real floating arrays (got {k!r} data)")
    scale = 10.0 ** int(decimals)
    # nearbyint rounds halves to even, as NumPy does (C's round does not)
    return replacements._elementwise(pv, sdfg, state, f"lambda x: nearbyint(x * {scale!r}) / {scale!r}", a)


def _average(pv, sdfg, state, a, axis=None, weights=None, returned=False, keepdims=False):
    from dace.frontend.common.op_repository import Replacements
    _no_extras(pv, "np.average", weights=weights, returned=returned, keepdims=keepdims)
    return Replacements.get("numpy.mean")(pv, sdfg, state, a, axis=axis)


#: name -> replacement for the NumPy reductions and element-wise functions DaCe 1.0.2 lacks.
FUNCTIONS = {
    "numpy.clip": _clip, "numpy.var": _var, "numpy.std": _std, "numpy.linalg.norm": _norm,
    "numpy.prod": _reduction("prod", "np.prod"), "numpy.any": _reduction("any", "np.any"),
    "numpy.all": _reduction("all", "np.all"), "numpy.count_nonzero": _reduction("count", "np.count_nonzero"),
    "numpy.ptp": _reduction("ptp", "np.ptp"), "numpy.round": _round, "numpy.around": _round,
    "numpy.average": _average,
}


#: Functions whose translation here replaces DaCe's own where DaCe has one (DaCe 2.0): its `np.any`
#: and `np.all` reduce with a logical or/and, which has no MPI reduction; these reduce with max/min.
PREFERRED = frozenset({"numpy.any", "numpy.all"})


def install(patches) -> None:
    """Register the replacements for a ``numpy_semantics()`` block (``semantics.py``);
    ``DISTSDFG_NUMPY_FUNCTIONS=0`` leaves DaCe as it is. A replacement DaCe itself registers for one
    of these names (a later DaCe) is kept, except the ``PREFERRED`` ones."""
    from ..config import NUMPY_FUNCTIONS
    if not NUMPY_FUNCTIONS.get():
        return
    from dace.frontend.common.op_repository import Replacements
    for name, func in FUNCTIONS.items():
        if name not in Replacements._rep or name in PREFERRED:
            patches.put(Replacements._rep, name, func)
    for cls in ("Array", "View", "Scalar"):
        for meth in ("clip", "var", "std", "prod", "any", "all", "ptp", "round"):
            if (cls, meth) not in Replacements._method_rep or f"numpy.{meth}" in PREFERRED:
                patches.put(Replacements._method_rep, (cls, meth), FUNCTIONS["numpy." + meth])
