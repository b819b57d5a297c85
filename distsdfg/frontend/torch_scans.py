"""Index reductions, scans and reorderings of the torch operator table (``torch_ops.EMITTERS``).

``argmax`` / ``max.dim`` (and their minimum twins; ``scatter(src)`` of one index per line, their backward): the extreme value (a Reduce), then the least index
holding it (a map writing the index where the value equals the extreme and the extent elsewhere, and a
``min`` Reduce), which is PyTorch's first occurrence. ``cumsum``: a product with an upper-triangular
matrix of ones (a MatMul: BLAS, rows split like any product's). ``prod``: one tasklet multiplying the
reduced line. ``flip`` and ``roll``: one map each, reading the line they reorder.
"""
from __future__ import annotations

import math

import numpy as np

from .torch_emit import (UnsupportedOpError, Val, literal, map_params as _params, matmul_line, norm_dims, plane_read,
                         reduce, reshape_line)

__all__ = ["SCAN_EMITTERS"]

#: ``prod`` multiplies the reduced line in one tasklet, term by term, up to this many terms
PROD_MAX_TERMS = 256


def _flat(em, name, src: Val) -> Val:
    return reshape_line(em, name, em.materialize(src, name + "_in"), (max(1, math.prod(src.shape)),))


def _index_of_extreme(em, name, src: Val, dim: int, keep: bool, fn: str, idt):
    """(extreme, least index holding it) of ``src`` along ``dim``."""
    src = em.materialize(src, name + "_in")
    value = reduce(em, name + "_value", src, (dim,), keep, fn, src.dtype)
    top = value if keep else reshape_line(em, name + "_value_keep", em.materialize(value, name + "_value_arr"),
                                          tuple(1 if d == dim else s for d, s in enumerate(src.shape)))
    n = src.shape[dim]
    cand = em.elementwise(name + "_where", src.shape, idt, [src, top],
                          f"({literal(0, idt)} + i{dim} if a0 == a1 else {literal(n, idt)})")
    return value, reduce(em, name, cand, (dim,), keep, "min", idt)


def _arg_extreme(fn):
    def emit(em, name, meta, args, kwargs):
        shape, idt = meta[0]
        src = args[0]
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        keep = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
        if dim is None:
            src, dim = _flat(em, name + "_flat", src), 0
            _, idx = _index_of_extreme(em, name, src, 0, False, fn, idt)
            return reshape_line(em, name + "_shape", idx, tuple(shape)) if shape else idx
        _, idx = _index_of_extreme(em, name, src, dim % max(1, len(src.shape)), keep, fn, idt)
        return idx
    return emit


def _extreme_dim(fn):
    def emit(em, name, meta, args, kwargs):
        (_, _), (_, idt) = meta
        src, dim = args[0], args[1] % max(1, len(args[0].shape))
        keep = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
        return _index_of_extreme(em, name, src, dim, keep, fn, idt)
    return emit


def _scatter_src(em, name, meta, args, kwargs):
    """``scatter(self, dim, index, src)`` with one index per line along ``dim`` (``max.dim``'s backward puts
    the gradient at the maximum's index): ``src`` where the position is the index, ``self`` elsewhere."""
    shape, dtype = meta[0]
    base, dim, index, src = args[0], args[1] % len(shape), args[2], args[3]
    if index.shape[dim] != 1 or any(index.shape[d] != shape[d] for d in range(len(shape)) if d != dim):
        raise UnsupportedOpError(f"scatter(src) with an index of shape {index.shape} into {tuple(shape)} along dim "
                                 f"{dim}: only one index per line is supported")
    index = em.materialize(index, name + "_idx")
    at = ", ".join("0" if d == dim else f"i{d}" for d in range(len(shape)))
    reads = [("_t", index.name, at)]
    new = literal(src.const, dtype) if src.is_const else "_s"
    if not src.is_const:
        reads.append(("_s", em.materialize(src, name + "_src").name, at))
    keep = literal(base.const, dtype) if base.is_const else "_b"
    if not base.is_const:
        reads.append(("_b", em.materialize(base, name + "_self").name, ", ".join(_params(len(shape)))))
    out = em.empty(name, shape, dtype)
    em.kernel(out.name[2:], shape, reads, [("_o", out.name, ", ".join(_params(len(shape))))],
              f"_o = ({new} if i{dim} == _t else {keep})")
    return out


def _scatter_add(em, name, meta, args, kwargs):
    """``scatter_add(self, dim, index, src)`` (``gather``'s backward) with ``index`` and ``src`` of one shape,
    ``self``'s but along ``dim``: every output position adds the terms of its line whose index is its own
    (a gather over the line in one tasklet; no accumulation through computed addresses)."""
    shape, dtype = meta[0]
    base, dim, index, src = args[0], args[1] % len(shape), args[2], args[3]
    m = index.shape[dim]
    if tuple(index.shape) != tuple(src.shape) or any(index.shape[d] != shape[d] for d in range(len(shape)) if d != dim):
        raise UnsupportedOpError(f"scatter_add with an index of shape {index.shape} and src {src.shape} into "
                                 f"{tuple(shape)} along dim {dim}: only an index of the output's shape but along dim")
    if m > PROD_MAX_TERMS:
        raise UnsupportedOpError(f"scatter_add of {m} terms per line: at most {PROD_MAX_TERMS} are supported")
    line = [m if d == dim else f"i{d}" for d in range(len(shape))]
    rt, at_t = plane_read("_t", em.materialize(index, name + "_idx").name, line)
    rs, at_s = plane_read("_s", em.materialize(src, name + "_src").name, line)
    reads, keep = [rt, rs], literal(base.const, dtype) if base.is_const else "_b"
    if not base.is_const:
        reads.append(("_b", em.materialize(base, name + "_self").name, ", ".join(_params(len(shape)))))
    terms = [f"({at_s([j])} if {at_t([j])} == i{dim} else {literal(0, dtype)})" for j in range(m)]
    out = em.empty(name, shape, dtype)
    em.kernel(out.name[2:], shape, reads, [("_o", out.name, ", ".join(_params(len(shape))))],
              "_o = " + " + ".join([keep, *terms]))
    return out


def _to_last(em, name, src: Val, dim: int) -> Val:
    """``src`` with ``dim`` moved last (a copy kernel; ``src`` itself when it is last already)."""
    nd = len(src.shape)
    if dim == nd - 1:
        return em.materialize(src, name)
    order = [d for d in range(nd) if d != dim] + [dim]
    shape = tuple(src.shape[d] for d in order)
    out = em.empty(name, shape, src.dtype)
    idx = [""] * nd
    for k, d in enumerate(order):
        idx[d] = f"i{k}"
    em.kernel(out.name[2:], shape, [("_a", src.name, ", ".join(idx))], [("_o", out.name, ", ".join(_params(nd)))],
              "_o = _a")
    return out


def _cumsum(em, name, meta, args, kwargs):
    """``cumsum(x, dim)`` = ``x @ U`` along ``dim`` with ``U[j, i] = (j <= i)``."""
    shape, dtype = meta[0]
    src = args[0]
    if not src.shape:
        return em.elementwise(name, shape, dtype, [src], "a0")
    nd, dim = len(src.shape), args[1] % len(src.shape)
    if src.dtype != np.dtype(dtype):
        src = em.elementwise(name + "_cast", src.shape, dtype, [src], "a0")
    last = _to_last(em, name + "_last", src, dim)
    n = src.shape[dim]
    upper = em.empty(name + "_upper", (n, n), dtype)
    em.kernel(upper.name[2:], (n, n), [], [("_o", upper.name, "i0, i1")],
              f"_o = ({literal(1, dtype)} if i0 <= i1 else {literal(0, dtype)})")
    rows = reshape_line(em, name + "_rows", last, (math.prod(last.shape) // n, n))
    prod = matmul_line(em, name + "_mm", rows, upper, rows.shape)
    prod = reshape_line(em, name + "_mm_v", prod, last.shape)
    if dim == nd - 1:
        return prod
    out = em.empty(name, shape, dtype)
    order = [d for d in range(nd) if d != dim] + [dim]
    em.kernel(out.name[2:], shape, [("_a", prod.name, ", ".join(f"i{d}" for d in order))],
              [("_o", out.name, ", ".join(_params(nd)))], "_o = _a")
    return out


def _prod(em, name, meta, args, kwargs):
    """``prod(x)`` / ``prod(x, dim, keepdim)``: the line's product, left to right, in one tasklet."""
    shape, dtype = meta[0]
    src = args[0]
    if len(args) > 1 and not isinstance(args[1], (int, list, tuple)):
        args = args[:1]                       # prod.default(x, dtype)
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    keep = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    if dim is None:
        src, dim = _flat(em, name + "_flat", src), 0
    src = em.materialize(src, name + "_in")
    if src.dtype != np.dtype(dtype):
        src = em.elementwise(name + "_cast", src.shape, dtype, [src], "a0")
    nd = len(src.shape)
    dim = norm_dims(dim, nd)[0]
    n = src.shape[dim]
    if n > PROD_MAX_TERMS:
        raise UnsupportedOpError(f"prod over {n} elements: at most {PROD_MAX_TERMS} per line are supported")
    kept = tuple(1 if d == dim else s for d, s in enumerate(src.shape))
    out = em.empty(name, kept, dtype)
    read, at = plane_read("_w", src.name, [n if d == dim else f"i{d}" for d in range(nd)])
    code = " * ".join(at([k]) for k in range(n)) if n else literal(1, dtype)
    em.kernel(out.name[2:], kept, [read], [("_o", out.name, ", ".join(_params(nd)))],
              f"_o = {code}")
    return reshape_line(em, name + "_shape", out, tuple(shape)) if not keep else out


def _cumprod(em, name, meta, args, kwargs):
    """``cumprod(x, dim)``: every output multiplies its line's terms up to its own position, left to right,
    in one tasklet (``_prod``'s way; a factor of one past the position)."""
    shape, dtype = meta[0]
    src = em.materialize(args[0], name + "_in")
    if not src.shape:
        return em.elementwise(name, shape, dtype, [src], "a0")
    nd, dim = len(src.shape), args[1] % len(src.shape)
    if src.dtype != np.dtype(dtype):
        src = em.elementwise(name + "_cast", src.shape, dtype, [src], "a0")
    n = src.shape[dim]
    if n > PROD_MAX_TERMS:
        raise UnsupportedOpError(f"cumprod over {n} elements: at most {PROD_MAX_TERMS} per line are supported")
    out = em.empty(name, shape, dtype)
    read, at = plane_read("_w", src.name, [n if d == dim else f"i{d}" for d in range(nd)])
    code = " * ".join(f"({at([k])} if {k} <= i{dim} else {literal(1, dtype)})" for k in range(n))
    em.kernel(out.name[2:], shape, [read], [("_o", out.name, ", ".join(_params(nd)))],
              f"_o = {code}")
    return out


def _flip(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    src = em.materialize(args[0], name + "_in")
    dims = norm_dims(list(args[1]), len(shape))
    out = em.empty(name, shape, dtype)
    idx = ", ".join(f"{shape[d] - 1} - i{d}" if d in dims else f"i{d}" for d in range(len(shape)))
    em.kernel(out.name[2:], shape, [("_a", src.name, idx)], [("_o", out.name, ", ".join(_params(len(shape))))],
              "_o = _a")
    return out


def _roll(em, name, meta, args, kwargs):
    """``roll(x, shifts, dims)``: ``out[i] = x[(i - shift) mod n]`` along every rolled dim (the flattened
    tensor when ``dims`` is empty)."""
    shape, dtype = meta[0]
    shifts = list(args[1]) if isinstance(args[1], (list, tuple)) else [args[1]]
    dims = args[2] if len(args) > 2 else kwargs.get("dims", [])
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    src = em.materialize(args[0], name + "_in")
    if not dims:
        flat = _flat(em, name + "_flat", src)
        rolled = _roll(em, name + "_1d", [(flat.shape, dtype)], [flat, shifts, [0]], {})
        return reshape_line(em, name + "_shape", rolled, tuple(shape))
    nd = len(shape)
    shift = {d % nd: s for d, s in zip(dims, shifts)}
    out = em.empty(name, shape, dtype)
    plane = ", ".join(f"0:{shape[d]}" if d in shift else f"i{d}" for d in range(nd))
    at = ", ".join(f"(i{d} + {(-shift[d]) % shape[d]}) % {shape[d]}" for d in range(nd) if d in shift)
    em.kernel(out.name[2:], shape, [("_w", src.name, plane)], [("_o", out.name, ", ".join(_params(nd)))],
              f"_o = _w[{at}]")
    return out


SCAN_EMITTERS = {
    "aten.argmax.default": _arg_extreme("max"), "aten.argmin.default": _arg_extreme("min"),
    "aten.max.dim": _extreme_dim("max"), "aten.min.dim": _extreme_dim("min"), "aten.scatter.src": _scatter_src,
    "aten.scatter_add.default": _scatter_add,
    "aten.cumsum.default": _cumsum, "aten.cumprod.default": _cumprod,
    "aten.prod.dim_int": _prod, "aten.prod.default": _prod,
    "aten.flip.default": _flip, "aten.roll.default": _roll,
}
