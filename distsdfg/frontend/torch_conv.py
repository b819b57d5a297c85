"""Convolution and pooling of the torch operator table (``torch_ops.EMITTERS``), forward and backward.

A convolution is one matrix product on the unfolded input: ``col[(n, o), (c, k)] = x[n, c, s*o + d*k - p]``
(an element-wise map over ``(N, *out, C, *kernel)``; ``o`` the output position, ``k`` the kernel offset,
``s`` the stride, ``d`` the dilation, ``p`` the padding: zero outside the input, tested in the tasklet,
so there is no padded copy), then ``col @ W^T`` (a MatMul library node: BLAS) and a map that
puts the channels back in place and adds the bias. The backward is two more products on the same
unfolding, ``dW = dY^T @ col`` (a contraction over the batch: a data-parallel schedule reduces it like
any weight gradient) and ``dcol = dY @ W``, and a fold of ``dcol`` back onto the input: every input
position gathers the kernel offsets that read it (``fold``: one map over the input, no accumulation
through computed addresses). Each array is written by one kernel: the lowering gathers an array that
several kernels write to rank 0 between them. Pooling reads the same windows: max pooling keeps the
first maximum and its flat index (PyTorch's), average pooling their mean; their backward is the same
fold. Every kernel reads its batch row ``n`` at ``n``, so a split of the batch splits every kernel.

A transposed convolution (``ConvTranspose``) is the adjoint of the plain one in its input: its forward is
the plain one's input gradient (``_scatter``: ``G @ W`` and the fold), its input gradient a plain forward
(``_correlate``), its weight gradient the same contraction with the operands' roles swapped. A grouped
one (``groups > 1``, depthwise included) is the plain one with a block-diagonal weight (zero outside each
row's group: ``groups`` times the products' work, the same kernels), its weight gradient the blocks of
the plain one's.
"""
from __future__ import annotations

import itertools
import math
from typing import Callable, Tuple


from .torch_emit import (UnsupportedOpError, Val, literal, map_params as _params, matmul_line, plane_read, reduce,
                         reshape_line)

__all__ = ["CONV_EMITTERS"]


def _ints(v, nd: int, default) -> Tuple[int, ...]:
    v = default if v is None or (isinstance(v, (list, tuple)) and len(v) == 0) else v
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return tuple(int(a) for a in (v * nd if len(v) == 1 else v))


def _window(em, x: Val, o, k, stride, padding, dil, fill):
    """The read of ``x`` (N, C, *sp) at ``s*o + d*k - padding`` for batch row ``i0``, channel ``c``
    (``o`` and ``k`` index strings, ``c`` in ``o``'s caller): ``(reads, term(c))``. Without padding an
    affine read per term; with padding the tasklet reads the channel's plane and tests the bounds
    (positions outside read a clamped, in-bounds element and give ``fill``)."""
    sp = x.shape[2:]
    pos = [f"{s} * {oj} + {d} * {kj} - {p}" if p else f"{s} * {oj} + {d} * {kj}"
           for oj, kj, s, d, p in zip(o, k, stride, dil, padding)]
    if not any(padding):
        return pos, None
    inside = " and ".join(f"({q}) >= 0 and ({q}) < {n}" for q, n in zip(pos, sp))
    at = _plane(x, "i1")[1]([f"min(max({q}, 0), {n - 1})" for q, n in zip(pos, sp)])
    return pos, f"({at} if {inside} else {literal(fill, x.dtype)})"


def _plane(x: Val, c: str):
    """``plane_read`` of ``x``'s plane of batch row ``i0``, channel ``c``."""
    return plane_read("_w", x.name, ["i0", c, *x.shape[2:]])


def unfold(em, name, x: Val, out_sp, ksize, stride, padding, dil) -> Val:
    """``col`` of shape ``(N * prod(out_sp), C * prod(ksize))``: ``col[(n, o), (c, k)] = x[n, c, s*o + d*k - p]``
    (zero outside the input)."""
    nd = len(out_sp)
    N, C = x.shape[:2]
    shape = (N, *out_sp, C, *ksize)
    col = em.empty(name, shape, x.dtype)
    o, c, k = _params(nd, 1), f"i{nd + 1}", _params(nd, nd + 2)
    pos, term = _window(em, x, o, k, stride, padding, dil, 0)
    reads = [_plane(x, c)[0]] if term else [("_a", x.name, ", ".join(["i0", c, *pos]))]
    em.kernel(col.name[2:], shape, reads, [("_o", col.name, ", ".join(_params(len(shape))))], f"_o = {term or '_a'}")
    return reshape_line(em, name + "_rows", col, (N * math.prod(out_sp), C * math.prod(ksize)))


def fold(em, name, shape, dtype, src: Val, plane, inner: Callable, out_sp, ksize, stride, padding, dil,
         bias: Val = None) -> Val:
    """``dx[n, c, p] = sum of src at (n, c, o, k) over o, k with s*o + d*k = p + padding`` for the input
    positions ``p`` of ``shape`` (N, C, *sp): the adjoint of ``unfold``, one map over the input
    (plus ``bias[c]`` where given).

    The tasklet reads ``plane`` of ``src`` (``plane_read``'s dims: ``"i0"`` and ``"i1"`` for the batch row
    and channel, extents for the rest) and, for every kernel offset ``k``, the element ``inner(o, k)`` at
    ``o = (p + padding - d*k) / s`` where that is a whole number inside the output; no accumulation through
    computed addresses."""
    nd = len(out_sp)
    read, at = plane_read("_w", src.name, plane)
    terms = []
    for k in itertools.product(*(range(n) for n in ksize)):
        t = [f"(i{2 + j} + {padding[j] - dil[j] * k[j]})" for j in range(nd)]
        cond = " and ".join(
            (f"{tj} % {s} == 0 and " if s > 1 else "") + f"{tj} >= 0 and {tj} < {s * n}"
            for tj, s, n in zip(t, stride, out_sp))
        o = [f"min(max({tj} // {s}, 0), {n - 1})" if s > 1 else f"min(max({tj}, 0), {n - 1})"
             for tj, s, n in zip(t, stride, out_sp)]
        terms.append(f"({at(inner(o, k))} if {cond} else {literal(0, dtype)})")
    out = em.empty(name, shape, dtype)
    reads = [read] + ([("_b", bias.name, "i1")] if bias is not None else [])
    em.kernel(out.name[2:], shape, reads, [("_o", out.name, ", ".join(_params(len(shape))))],
              "_o = " + " + ".join(terms + (["_b"] if bias is not None else [])))
    return out


def _conv_args(args, nd):
    """``(stride, padding, dilation, transposed, groups)`` of ``convolution``'s arguments 3..8."""
    stride, padding, dil = (_ints(args[i], nd, 1) for i in (3, 4, 5))
    return stride, padding, dil, bool(args[6]), int(args[8])


def _weight_t(em, name, w: Val) -> Val:
    """``W^T`` as ``(C * prod(kernel), O)``."""
    nd = len(w.shape)
    shape = (*w.shape[1:], w.shape[0])
    wt = em.empty(name, shape, w.dtype)
    em.kernel(wt.name[2:], shape, [("_a", w.name, ", ".join([f"i{nd - 1}", *_params(nd - 1)]))],
              [("_o", wt.name, ", ".join(_params(nd)))], "_o = _a")
    return reshape_line(em, name + "_2d", wt, (math.prod(w.shape[1:]), w.shape[0]))


def _block_diagonal(em, name, w: Val, groups: int) -> Val:
    """A grouped weight ``(A, B/G, *kernel)`` (row ``a`` in group ``a // (A/G)``) as the ``groups=1``
    weight ``(A, B, *kernel)`` that is zero outside each row's group: a grouped convolution is the
    plain one with this weight (``groups`` times its products' work)."""
    A, Bg, ks = w.shape[0], w.shape[1], w.shape[2:]
    Ag = A // groups
    shape = (A, Bg * groups, *ks)
    out = em.empty(name, shape, w.dtype)
    k = _params(len(ks), 2)
    same = f"i1 // {Bg} == i0 // {Ag}"
    if Bg == 1:
        reads, term = [("_a", w.name, ", ".join(["i0", "0", *k]))], "_a"
    else:
        reads = [("_a", w.name, ", ".join(["i0", f"0:{Bg}", *k]))]
        term = f"_a[min(max(i1 - (i0 // {Ag}) * {Bg}, 0), {Bg - 1})]"
    em.kernel(out.name[2:], shape, reads, [("_o", out.name, ", ".join(_params(len(shape))))],
              f"_o = {term} if {same} else {literal(0, w.dtype)}")
    return out


def _group_blocks(em, name, full: Val, w_shape, groups: int) -> Val:
    """The gradient of a grouped weight ``w_shape`` from the gradient of ``_block_diagonal``'s weight:
    row ``a``'s block of its group's columns."""
    Ag, Bg, ks = w_shape[0] // groups, w_shape[1], w_shape[2:]
    out = em.empty(name, w_shape, full.dtype)
    k = _params(len(ks), 2)
    em.kernel(out.name[2:], w_shape, [("_a", full.name, ", ".join(["i0", f"0:{full.shape[1]}", *k]))],
              [("_o", out.name, ", ".join(_params(len(w_shape))))], f"_o = _a[(i0 // {Ag}) * {Bg} + i1]")
    return out


def _rows(em, name, t: Val, channels_first: bool) -> Val:
    """``t`` (N, C, *sp) as rows ``(N * prod(sp), C)``, or with ``channels_first`` as ``(C, N * prod(sp))``."""
    nd = len(t.shape) - 2
    N, C, sp = t.shape[0], t.shape[1], t.shape[2:]
    if channels_first:
        shape, idx, flat = (C, N, *sp), ["i1", "i0", *_params(nd, 2)], (C, N * math.prod(sp))
    else:
        shape, idx, flat = (N, *sp, C), ["i0", f"i{nd + 1}", *_params(nd, 1)], (N * math.prod(sp), C)
    out = em.empty(name, shape, t.dtype)
    em.kernel(out.name[2:], shape, [("_a", t.name, ", ".join(idx))], [("_o", out.name, ", ".join(_params(nd + 2)))],
              "_o = _a")
    return reshape_line(em, name + "_2d", out, flat)


def _correlate(em, name, x: Val, w: Val, b, shape, geom) -> Val:
    """``y[n, a, o] = sum over b, k of x[n, b, s*o + d*k - p] * w[a, b, k]`` (+ ``b[a]``) of ``shape``: the
    unfold, one product with ``W^T`` and the map that puts the channels back in place."""
    N, A, out_sp = shape[0], shape[1], tuple(shape[2:])
    nd = len(out_sp)
    col = unfold(em, name + "_col", x, out_sp, w.shape[2:], *geom)
    prod = matmul_line(em, name + "_mm", col, _weight_t(em, name + "_wt", w), (col.shape[0], A))
    prod = reshape_line(em, name + "_mm_v", prod, (N, *out_sp, A))
    out = em.empty(name, shape, x.dtype)
    reads = [("_a", prod.name, ", ".join(["i0", *_params(nd, 2), "i1"]))]
    if b is not None:
        reads.append(("_b", em.materialize(b, name + "_b").name, "i1"))
    em.kernel(out.name[2:], shape, reads, [("_o", out.name, ", ".join(_params(nd + 2)))],
              "_o = _a + _b" if b is not None else "_o = _a")
    return out


def _scatter(em, name, g: Val, w: Val, b, shape, geom) -> Val:
    """The adjoint of ``_correlate`` in its input: ``x[n, b, p] = sum of g[n, a, o] * w[a, b, k] over
    a, o, k with s*o + d*k = p + padding`` (+ ``b[b]``): one product ``G @ W`` and a fold."""
    N, out_sp, ksize = g.shape[0], tuple(g.shape[2:]), tuple(w.shape[2:])
    A, B = w.shape[0], w.shape[1]
    L, BK = N * math.prod(out_sp), math.prod(w.shape[1:])
    dcol = matmul_line(em, name + "_dcol", _rows(em, name + "_g", g, False), reshape_line(em, name + "_w2", w, (A, BK)),
                       (L, BK))
    dcol = reshape_line(em, name + "_dcol_v", dcol, (N, *out_sp, B, *ksize))
    bias = em.materialize(b, name + "_b") if b is not None else None
    return fold(em, name, shape, g.dtype, dcol, ["i0", *out_sp, "i1", *ksize], lambda o, k: [*o, *k], out_sp, ksize,
                *geom, bias=bias)


def _weight_grad(em, name, g: Val, x: Val, ksize, geom) -> Val:
    """``dw[a, b, k] = sum over n, o of g[n, a, o] * x[n, b, s*o + d*k - p]`` as ``(A, B * prod(k))``
    (``name + "_dw"``): a contraction over the batch (a data-parallel schedule reduces it like any weight
    gradient)."""
    col = unfold(em, name + "_col", x, tuple(g.shape[2:]), ksize, *geom)
    return matmul_line(em, name + "_dw", _rows(em, name + "_gt", g, True), col, (g.shape[1], col.shape[1]))


def convolution(em, name, meta, args, kwargs):
    """``convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups)``: a plain
    convolution is ``_correlate``, a transposed one (whose weight is ``(C_in, C_out / G, *kernel)``) its
    adjoint ``_scatter``; a grouped one either with ``_block_diagonal``'s weight."""
    shape, dtype = meta[0]
    x, w, b = em.materialize(args[0], name + "_x"), em.materialize(args[1], name + "_w"), args[2]
    *geom, transposed, groups = _conv_args(args, len(shape) - 2)
    if groups > 1:
        w = _block_diagonal(em, name + "_wfull", w, groups)
    return (_scatter if transposed else _correlate)(em, name, x, w, b, shape, geom)


def convolution_backward(em, name, meta, args, kwargs):
    """``convolution_backward(dy, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding,
    groups, output_mask)`` -> ``(dx, dw, db)`` (``None`` where the mask is false). A plain convolution's
    ``dx`` is ``_scatter`` of ``dy``, a transposed one's ``_correlate``; ``dw`` is ``_weight_grad`` of the
    pair with the weight's rows' channels first (``dy`` and ``x``, or ``x`` and ``dy``)."""
    dy, x, w = (em.materialize(a, f"{name}_{k}") for k, a in zip(("dy", "x", "w"), args[:3]))
    nd = len(x.shape) - 2
    *geom, transposed, groups = _conv_args([None, None, None, *args[4:10]], nd)
    mask = args[10]
    w_shape, ksize = tuple(w.shape), tuple(w.shape[2:])
    if groups > 1:
        w = _block_diagonal(em, name + "_wfull", w, groups)
    dx = dw = db = None
    if mask[0]:
        dx = (_correlate if transposed else _scatter)(em, name + "_dx", dy, w, None, x.shape, geom)
    if mask[1]:
        dw = _weight_grad(em, name, *((x, dy) if transposed else (dy, x)), ksize, geom)
        dw = reshape_line(em, name + "_dw_v", dw, tuple(w.shape))
        if groups > 1:
            dw = _group_blocks(em, name + "_dw_g", dw, w_shape, groups)
    if mask[2]:
        db = reduce(em, name + "_db", dy, (0, *range(2, 2 + nd)), False, "sum", dy.dtype)
    return dx, dw, db


# -- pooling --------------------------------------------------------------------------------------

def _pool_args(x: Val, out_shape, ksize, stride, padding, dil, ceil_mode):
    nd = len(out_shape) - 2
    ksize = _ints(ksize, nd, None)
    stride = _ints(stride, nd, ksize) if stride else ksize
    padding, dil = _ints(padding, nd, 0), _ints(dil, nd, 1)
    floor = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1
                  for n, p, d, k, s in zip(x.shape[2:], padding, dil, ksize, stride))
    if ceil_mode and floor != tuple(out_shape[2:]):
        raise UnsupportedOpError("pooling with ceil_mode=True where it adds a partial window is not supported")
    return ksize, stride, padding, dil


def _window_terms(em, x: Val, nd, ksize, stride, padding, dil, fill):
    """The window of output position ``(i2, i3, ...)``: ``(reads, [(term, k)])``, one term per kernel offset."""
    reads, terms = [], []
    for k in itertools.product(*(range(n) for n in ksize)):
        pos, term = _window(em, x, _params(nd, 2), [str(a) for a in k], stride, padding, dil, fill)
        if term is None:
            term = f"_a{len(reads)}"
            reads.append((term, x.name, ", ".join(["i0", "i1", *pos])))
        terms.append((term, k))
    if any(padding):
        reads.append(_plane(x, "i1")[0])
    return reads, terms


def _flat_index(x_sp, stride, padding, dil, k) -> str:
    """The flat index into the input's spatial dims of window offset ``k`` at output ``(i2, ...)``."""
    flat = ""
    for j, (n, s, p, d, kj) in enumerate(zip(x_sp, stride, padding, dil, k)):
        pos = f"({s} * i{2 + j} + {d * kj - p})"
        flat = pos if not flat else f"({flat}) * {n} + {pos}"
    return flat


def max_pool(em, name, meta, args, kwargs):
    """``max_pool{1,2,3}d_with_indices(x, kernel, stride, padding, dilation, ceil_mode)`` -> (values, indices):
    the first maximum of each window (PyTorch's) and its flat index into the input's spatial dims."""
    (shape, dtype), (_, idt) = meta
    x = em.materialize(args[0], name + "_x")
    ksize, stride, padding, dil = _pool_args(x, shape, *(list(args[1:6]) + [None, 0, 1, False][len(args) - 2:]))
    nd = len(shape) - 2
    reads, terms = _window_terms(em, x, nd, ksize, stride, padding, dil, float("-inf"))
    out, ind = em.empty(name, shape, dtype), em.empty(name + "_indices", shape, idt)
    lines = []
    for t, (term, k) in enumerate(terms):
        flat = f"{literal(0, idt)} + {_flat_index(x.shape[2:], stride, padding, dil, k)}"
        lines.append(f"_v{t} = {term}")
        if t == 0:
            lines += ["_m0 = _v0", f"_j0 = {flat}"]
        else:
            lines.append(f"_m{t} = _v{t} if _v{t} > _m{t - 1} else _m{t - 1}")
            lines.append(f"_j{t} = ({flat}) if _v{t} > _m{t - 1} else _j{t - 1}")
    lines += [f"_o = _m{len(terms) - 1}", f"_oi = _j{len(terms) - 1}"]
    full = ", ".join(_params(nd + 2))
    em.kernel(out.name[2:], shape, reads, [("_o", out.name, full), ("_oi", ind.name, full)], "\n".join(lines))
    return out, ind


def max_pool_backward(em, name, meta, args, kwargs):
    """``max_pool{1,2,3}d_with_indices_backward(dy, x, kernel, stride, padding, dilation, ceil_mode, indices)``:
    each window's gradient goes to its kernel offset whose flat index is the recorded one, then ``fold``."""
    shape, dtype = meta[0]
    dy, x, ind = (em.materialize(a, f"{name}_{k}") for k, a in zip(("dy", "x", "ind"), (args[0], args[1], args[7])))
    ksize, stride, padding, dil = _pool_args(x, dy.shape, *args[2:7])
    nd = len(shape) - 2
    col_shape = (*dy.shape, *ksize)
    col = em.empty(name + "_col", col_shape, dtype)
    ks = _params(nd, nd + 2)
    pos = ""
    for j, (n, s, p, d) in enumerate(zip(x.shape[2:], stride, padding, dil)):
        term = f"({s} * i{2 + j} + {d} * {ks[j]} - {p})"
        pos = term if not pos else f"({pos}) * {n} + {term}"
    head = ", ".join(_params(nd + 2))
    em.kernel(col.name[2:], col_shape, [("_g", dy.name, head), ("_t", ind.name, head)],
              [("_o", col.name, ", ".join(_params(len(col_shape))))],
              f"_o = _g if _t == {pos} else {literal(0, dtype)}")

    return fold(em, name, shape, dtype, col, ["i0", "i1", *col_shape[2:]], lambda o, k: [*o, *k], dy.shape[2:], ksize,
                stride, padding, dil)


def _avg_divisor(ksize, padding, count_include_pad, divisor_override) -> int:
    if divisor_override:
        return int(divisor_override)
    if any(padding) and not count_include_pad:
        raise UnsupportedOpError("average pooling with padding and count_include_pad=False is not supported")
    return math.prod(ksize)


def avg_pool(em, name, meta, args, kwargs):
    """``avg_pool{1,2,3}d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)``."""
    shape, dtype = meta[0]
    x = em.materialize(args[0], name + "_x")
    a = list(args) + [None, [], 0, False, True, None][len(args) - 1:]
    ksize, stride, padding, dil = _pool_args(x, shape, a[1], a[2], a[3], 1, a[4])
    div = _avg_divisor(ksize, padding, a[5], a[6])
    nd = len(shape) - 2
    reads, terms = _window_terms(em, x, nd, ksize, stride, padding, dil, 0)
    out = em.empty(name, shape, dtype)
    em.kernel(out.name[2:], shape, reads, [("_o", out.name, ", ".join(_params(nd + 2)))],
              f"_o = ({' + '.join(t for t, _ in terms)}) / {literal(div, dtype)}")
    return out


def avg_pool_backward(em, name, meta, args, kwargs):
    """``avg_pool{1,2,3}d_backward(dy, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor)``:
    ``dy / divisor`` folded back onto every position of its window."""
    shape, dtype = meta[0]
    dy, x = em.materialize(args[0], name + "_dy"), args[1]
    ksize, stride, padding, dil = _pool_args(x, dy.shape, args[2], args[3], args[4], 1, args[5])
    div = _avg_divisor(ksize, padding, args[6], args[7])
    scaled = em.elementwise(name + "_scaled", dy.shape, dtype, [dy], f"a0 / {literal(div, dtype)}")
    return fold(em, name, shape, dtype, scaled, ["i0", "i1", *dy.shape[2:]], lambda o, k: o, dy.shape[2:], ksize,
                stride, padding, dil)


CONV_EMITTERS = {
    "aten.convolution.default": convolution, "aten.convolution_backward.default": convolution_backward,
    **{f"aten.max_pool{d}d_with_indices.default": max_pool for d in (2, 3)},
    **{f"aten.max_pool{d}d_with_indices_backward.default": max_pool_backward for d in (2, 3)},
    **{f"aten.avg_pool{d}d.default": avg_pool for d in (1, 2, 3)},
    **{f"aten.avg_pool{d}d_backward.default": avg_pool_backward for d in (2, 3)},
}
