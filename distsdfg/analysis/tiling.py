"""Block arithmetic for rank tiling: one place for even and uneven splits."""
from __future__ import annotations

from typing import Tuple

import numpy as np
import sympy
from dace import subsets, symbolic

from .. import dace_compat as dc

__all__ = ["iterations", "block", "block_span", "tile_range", "rank_symbol", "rough_work"]


def rank_symbol(kernel: int, axis: int):
    """The fresh symbol holding this rank's coordinate on grid axis ``axis`` of kernel ``kernel``."""
    return dc.sym(f"__dsdfg_k{kernel}_r{axis}")


def iterations(rng: Tuple) -> sympy.Expr:
    lo, hi, st = (symbolic.pystr_to_symbolic(x) if isinstance(x, str) else sympy.sympify(x) for x in rng)
    if st == 1:
        n = hi - lo + 1
        return sympy.expand(n) if n.is_polynomial() else sympy.simplify(n)
    return sympy.floor((hi - lo) / st) + 1


def rough_work(rng: subsets.Range, size: int = 1000) -> int:
    """Iterations of a map range with every size symbol at ``size`` (to compare maps, not to plan)."""
    n = sympy.Integer(1)
    for r in rng.ranges:
        n *= iterations(r)
    n = sympy.sympify(n)
    try:
        return int(n.subs({s: size for s in n.free_symbols}))
    except TypeError:
        return 0


def block(n, parts: int):
    """Iterations per block when ``n`` iterations are split ``parts`` ways (the last block may be short)."""
    n = sympy.sympify(n)
    if n.is_Number:
        return int(-(-int(n) // parts))
    return dc.int_ceil(n, parts)


def block_span(n: int, parts: int, r):
    """``(start, size)`` of block ``r`` when ``n`` elements are split ``parts`` ways, concretely:
    blocks of ``b = ceil(n / parts)``, block ``r`` is ``[r*b, min((r+1)*b, n))``, empty (size 0)
    past the end. ``r`` may be a NumPy array of coordinates. The split ``tile_range`` makes
    symbolically; the solver, the cost model and the simulator use this one."""
    b = -(-int(n) // int(parts))
    start = r * b
    if isinstance(start, np.ndarray):
        return start, np.clip(n - start, 0, b)
    return start, max(0, min(b, n - start))


def tile_range(rng: Tuple, parts: int, r, *, clamp: bool = True) -> Tuple:
    """The slice of inclusive range ``rng = (lo, hi, step)`` that grid coordinate ``r`` of ``parts`` executes.

    Block ``r`` runs iterations ``[r*b, min((r+1)*b, n))`` with ``b = ceil(n/parts)``; a
    coordinate past the last block gets an empty range. ``clamp=False`` gives the full
    block even where it overhangs the range (used to size local buffers).
    """
    if parts == 1:
        return rng
    lo, hi, st = (sympy.sympify(x) for x in rng)
    n = iterations(rng)
    b = block(n, parts)
    start = lo + r * b * st
    end = sympy.expand(lo + ((r + 1) * b - 1) * st)
    even = sympy.sympify(n).is_Number and int(n) % parts == 0
    if clamp and not even:
        over = sympy.expand(end - hi)
        if over.is_number:
            end = hi if over >= 0 else end
        else:        # sympy's evaluation of Min tries to order the bounds, in vain and slowly
            end = dc.Min(end, hi, evaluate=False)
    return (start, end, st)


def tile_subset(rng: subsets.Range, grid, rank_syms, *, clamp: bool = True) -> subsets.Range:
    return subsets.Range([tile_range(r, g, s, clamp=clamp) if g > 1 else r
                          for r, g, s in zip(rng.ranges, grid, rank_syms)])
