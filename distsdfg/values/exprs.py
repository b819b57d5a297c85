"""Symbolic bounds: their fast evaluation on integers and cheap equality tests.

Every block bound the lowering writes (``__dsdfg_k0_r1*int_ceil(N - 2, 32)``,
``Min(N - 3, ...)``) is evaluated here at call time for every rank, and compared while
planning. Both must stay cheap: sympy's ``simplify`` and its evaluation of ``Min``/``Max``
take 0.1-0.5 s per expression, which made planning a stencil for 32 ranks take minutes.
"""
from __future__ import annotations

import ast
import functools
from typing import Dict

import numpy as np
import sympy

from .. import dace_compat as dc

__all__ = ["compiled", "evaluate", "evaluate_many", "simplified", "same_value", "box_covers"]


#: The functions a bound's text may call, as Python evaluates them on integers.
_FUNCTIONS = {"int_ceil": lambda a, b: -(-a // b), "int_floor": lambda a, b: a // b, "Min": min, "Max": max,
              "min": min, "max": max, "floor": lambda x: int(np.floor(x)), "ceiling": lambda x: int(np.ceil(x)),
              "Mod": lambda a, b: a % b, "Abs": abs}
_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Call, ast.Name, ast.Constant, ast.Load, ast.Add, ast.Sub,
          ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd)


def _arithmetic_names(expr: str):
    """The symbols of ``expr`` when it is plain arithmetic on symbols, numbers and the
    ``_FUNCTIONS`` (nothing else can run when it is evaluated as Python); None otherwise."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return None
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, _NODES):
            return None
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
                                               and not node.keywords):
            return None
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
            return None
        if isinstance(node, ast.Name) and node.id not in _FUNCTIONS:
            names.add(node.id)
    return tuple(sorted(names))


def _python_compiled(expr: str, functions=None):
    """``(names, f)`` evaluating ``expr`` as Python (with ``functions``, default ``_FUNCTIONS``) when
    it is plain arithmetic; None otherwise. Parsing the text with sympy first (as ``compiled``
    otherwise does) evaluates every ``Min`` and ``Max`` symbolically: ~0.3 s per bound of an uneven block."""
    names = _arithmetic_names(expr)
    if names is None:
        return None
    return names, eval(f"lambda {', '.join(names)}: ({expr})", dict(functions or _FUNCTIONS))  # arithmetic only


def _reduce(op):
    return lambda *args: functools.reduce(op, args)


#: The same functions over NumPy integer arrays (element-wise; Python's semantics for //, % and /).
_ARRAY_FUNCTIONS = {"int_ceil": lambda a, b: -(-a // b), "int_floor": lambda a, b: a // b,
                    "Min": _reduce(np.minimum), "Max": _reduce(np.maximum), "min": _reduce(np.minimum),
                    "max": _reduce(np.maximum), "floor": lambda x: np.floor(x).astype(np.int64),
                    "ceiling": lambda x: np.ceil(x).astype(np.int64), "Mod": np.mod, "Abs": np.abs}


@functools.lru_cache(maxsize=8192)
def compiled_array(expr: str):
    """``(names, f)`` evaluating ``expr`` element-wise over NumPy arrays; None where it is not plain
    arithmetic (``evaluate`` then takes one point at a time)."""
    return _python_compiled(expr, _ARRAY_FUNCTIONS)


def evaluate_many(expr: str, values: Dict[str, object], n: int) -> np.ndarray:
    """``expr`` at ``n`` points at once: ``values`` maps names to numbers or to arrays of length
    ``n`` (e.g. every rank's grid coordinate); returns an int64 array of length ``n``."""
    got = compiled_array(expr)
    if got is not None:
        names, f = got
        try:
            args = [values[k] for k in names]
        except KeyError as exc:
            raise KeyError(f"symbol {exc.args[0]} has no value") from None
        with np.errstate(all="ignore"):
            out = np.asarray(f(*args))
        if out.dtype.kind == "f":
            out = np.trunc(out)
        return np.broadcast_to(out.astype(np.int64), (n,))
    return np.array([evaluate(expr, {k: (v[i] if isinstance(v, np.ndarray) else v) for k, v in values.items()})
                     for i in range(n)], dtype=np.int64)


@functools.lru_cache(maxsize=8192)
def compiled(expr: str):
    """``(names, f)``: ``f(*values of names)`` is the value of the bound ``expr`` (DaCe's text form)."""
    fast = _python_compiled(expr)
    if fast is not None:
        return fast
    e = dc.symbolic.pystr_to_symbolic(expr)
    syms = sorted(e.free_symbols, key=str)
    if not syms:
        v = int(e)
        return (), (lambda *a: v)
    f = sympy.lambdify(syms, e, modules=[_FUNCTIONS, "math"])
    return tuple(str(s) for s in syms), f


def evaluate(expr: str, values: Dict[str, int]) -> int:
    names, f = compiled(expr)
    try:
        return int(f(*[values[n] for n in names]))
    except KeyError as exc:
        raise KeyError(f"symbol {exc.args[0]} has no value") from None


def simplified(e):
    """``sympy.simplify(e)``, or ``expand`` for a polynomial (canonical there, and much cheaper)."""
    e = sympy.sympify(e)
    return sympy.expand(e) if e.is_polynomial() else sympy.simplify(e)


def _integer_function(e):
    text = str(e)
    return None if "/" in text.replace("//", "") else _python_compiled(text)    # no float arithmetic


def _differ_somewhere(a, b, trials: int = 4) -> bool:
    """Whether the integer-valued ``a`` and ``b`` differ at some sample point (a proof that
    ``a - b`` is not identically zero; False proves nothing)."""
    fa, fb = _integer_function(a), _integer_function(b)
    if fa is None or fb is None:
        return False
    names = sorted(set(fa[0]) | set(fb[0]))
    rng = np.random.default_rng(len(names))
    for _ in range(trials):
        vals = {n: int(rng.integers(0, 8)) if n.startswith("__dsdfg_k") else int(rng.integers(1, 200)) for n in names}
        try:
            if fa[1](*[vals[n] for n in fa[0]]) != fb[1](*[vals[n] for n in fb[0]]):
                return True
        except (ZeroDivisionError, OverflowError, ValueError, TypeError):
            return False
    return False


def same_value(a, b) -> bool:
    """Whether ``a - b`` is identically zero: identical, polynomial and visibly different
    expressions answer cheaply, the rest through ``sympy.simplify``."""
    a, b = sympy.sympify(a), sympy.sympify(b)
    if a == b:
        return True
    if a.is_polynomial() and b.is_polynomial():
        return sympy.expand(a - b) == 0
    if _differ_somewhere(a, b):
        return False
    d = sympy.expand(a - b)
    return d == 0 or (not d.is_number and simplified(d) == 0)


def box_covers(box, shape) -> bool:
    """Each dimension of ``box`` (inclusive ``(lo, hi)`` pairs of expressions; a size symbol may be
    called ``S``) provably runs from zero to its extent in ``shape``."""
    from dace import symbolic

    def sym(e):
        return symbolic.pystr_to_symbolic(str(e))
    return len(box) == len(shape) and all(same_value(sym(lo), 0) and same_value(sym(f"({hi}) + 1"), sym(n))
                                          for (lo, hi), n in zip(box, shape))
