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

__all__ = ["compiled", "evaluate", "evaluate_many", "simplified", "same_value", "box_covers", "tiles_without_gaps",
           "split_axis_pairs", "same_rank_blocks"]


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


def split_axis_pairs(grid_a, syms_a, grid_b, syms_b):
    """The rank symbols of two grids' split axes (size > 1), paired in order, where the grids number
    ranks alike: the same split sizes in the same order, whatever axes of size one lie between
    (grids (2, 1) and (1, 2) both give rank q the coordinate q). None where they do not."""
    split_a = [(g, s) for g, s in zip(grid_a, syms_a) if g > 1]
    split_b = [(g, s) for g, s in zip(grid_b, syms_b) if g > 1]
    if [g for g, _ in split_a] != [g for g, _ in split_b]:
        return None
    return [(sa, sb) for (_, sa), (_, sb) in zip(split_a, split_b)]


def same_rank_blocks(a, b) -> bool:
    """Whether the layouts ``a`` and ``b`` (``plan.Layout``) provably give every rank the same boxes.

    Their grids must number ranks alike (``split_axis_pairs``), and ``b``'s boxes, its rank symbols
    renamed to ``a``'s axis by axis, must equal ``a``'s bound by bound."""
    if (a.op, a.view_shape, len(a.boxes)) != (b.op, b.view_shape, len(b.boxes)):
        return False
    pairs = split_axis_pairs(a.grid, a.rank_syms, b.grid, b.rank_syms)
    if pairs is None:
        return False
    rename = {str(sb): str(sa) for sa, sb in pairs if sa and sb}

    def sym(text, names=None):
        e = dc.symbolic.pystr_to_symbolic(str(text))
        return e.xreplace({x: sympy.Symbol((names or {}).get(x.name, x.name)) for x in e.free_symbols
                           if isinstance(x, sympy.Symbol)})
    for box_a, box_b in zip(a.boxes, b.boxes):
        if len(box_a) != len(box_b):
            return False
        for (sa, ea), (sb, eb) in zip(box_a, box_b):
            if not (same_value(sym(sa), sym(sb, rename)) and same_value(sym(ea), sym(eb, rename))):
                return False
    return True


def _nonnegative(e, nonneg) -> bool:
    """``e`` is provably >= 0: after ``expand`` a polynomial whose coefficients are >= 0 in
    symbols that are all in ``nonneg`` (False proves nothing)."""
    e = sympy.expand(e)
    if e.is_number:
        return bool(e >= 0)
    if not e.free_symbols <= nonneg:
        return False
    try:
        coeffs = sympy.Poly(e, *sorted(e.free_symbols, key=str)).coeffs()
    except sympy.PolynomialError:
        return False
    return all(c.is_number and c >= 0 for c in coeffs)


def _unclamped(e, r, clamp):
    """``e`` with its one rank-independent clamp ``clamp(C, f(r))`` (``Min`` on an end, ``Max`` on
    a start; a positive multiple of it as a term of a sum) replaced by ``f(r)``; None when ``r``
    appears anywhere else than in arithmetic. A clamp by the same ``C`` on every rank cuts every
    rank's interval with the same half-line, which keeps the union of the intervals one interval."""
    terms, clamped = [], False
    for t in sympy.Add.make_args(e):
        coef, rest = t.as_coeff_Mul()
        if r in t.free_symbols and isinstance(rest, clamp) and coef > 0 and not clamped:
            moving = [a for a in rest.args if r in a.free_symbols]
            if len(moving) != 1:
                return None
            t, clamped = coef * moving[0], True
        terms.append(t)
    out = sympy.Add(*terms)
    if any(r in f.free_symbols for f in out.atoms(sympy.Function, sympy.Min, sympy.Max)):
        return None
    return out


def tiles_without_gaps(box, rank_syms, sizes) -> bool:
    """Whether the blocks ``box`` gives the ranks of a grid (inclusive ``(start, end)`` texts per
    dimension, in the rank symbols ``rank_syms``) provably leave no gap between them, for every
    value of the size symbols ``sizes``: then the union of the ranks' blocks, cut to the array,
    is one box, and stretching the outermost blocks to the array's edges covers it.

    Proved per dimension: each depends on at most one rank symbol ``r`` and each ``r`` on at most
    one dimension (the blocks are a product over the grid's axes), its start never decreases
    with ``r`` and the next rank's block starts at most one past this rank's end
    (``start(r + 1) <= end(r) + 1``), both as polynomials with coefficients >= 0 in ``r``, the
    sizes and their ``int_ceil``/``int_floor`` quotients (block lengths) after rank-independent
    clamps (``Min(N - 1, ...)``) are taken off (a block length is negative only where the map's
    range is empty, and then no rank has a block). A stride (``A[2 * i]``: ``start(r + 1) = end(r) + 2``)
    or a reversed index fails the proof.
    """
    rs = {n for n in rank_syms if n}
    used = set()
    for lo, hi in box:
        s, e = (dc.symbolic.pystr_to_symbolic(str(lo)), dc.symbolic.pystr_to_symbolic(str(hi)))
        moving = {x for x in s.free_symbols | e.free_symbols if str(x) in rs}
        if not moving:
            continue
        if len(moving) > 1 or moving & used:
            return False
        r = moving.pop()
        used.add(r)
        s, e = _unclamped(s, r, sympy.Max), _unclamped(e, r, sympy.Min)
        if s is None or e is None:
            return False
        # Block lengths (int_ceil(N, 4)) as nonnegative symbols; other functions as unknown ones.
        quot, names = {}, {}
        for f in sorted((s + e).atoms(sympy.Function), key=str):
            if r in f.free_symbols:
                return False
            quot[f] = names[f] = sympy.Symbol(f"__q{len(quot)}")
        s, e = s.xreplace(quot), e.xreplace(quot)
        nonneg = {r} | {x for x in (s + e).free_symbols if str(x) in sizes}
        nonneg |= {q for f, q in names.items() if f.func.__name__ in ("int_ceil", "int_floor")
                   and all(str(x) in sizes for x in f.free_symbols)}
        nxt = {r: r + 1}
        if not (_nonnegative(s.xreplace(nxt) - s, nonneg) and _nonnegative(e + 1 - s.xreplace(nxt), nonneg)):
            return False
    return True
