"""ATen operators as NumPy-level DaCe code: the op table of the PyTorch frontend.

Each supported core-ATen operator has an emitter that writes lines of a ``@dace.program``
body. Element-wise operators (with broadcasting), indexing operators (embedding, gather,
scatter of a value), permutes, slices and concatenations become explicit ``dace.map``
kernels with one tasklet each, so their element types and broadcasting are exactly
PyTorch's; matrix products stay ``@`` (DaCe's MatMul / BatchedMatMul library nodes, so a
BLAS runs them) and reductions stay ``np.sum`` / ``np.max`` / ``np.min`` (DaCe's Reduce).
Composite operators (softmax, log-softmax, layer norm) are emitted as the kernels a NumPy
programmer would write: a reduction, an element-wise map, a reduction, a map.

Every tensor in the generated code is a fresh C-contiguous array or a ``np.reshape`` view of
one; PyTorch 0-d tensors are one-element arrays. Nothing here imports torch: operators are
looked up by their ATen name (``aten.addmm.default``), so the table is plain data.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, Optional

import numpy as np

from .torch_emit import (Emitter, UnsupportedOpError, Val, broadcast_index, dace_type, literal, matmul_line,
                         norm_dims, reduce, reshape_line)
from .torch_norms import batch_norm_eval, batch_norm_train, group_norm, layer_norm, var, vector_norm

__all__ = ["Val", "Emitter", "UnsupportedOpError", "EMITTERS", "dace_type"]


# ------------------------------------------------------------------------------------------------
# Emitters. Signature: (em, node_name, out_meta, args, kwargs) -> Val or tuple of Val.
# ``out_meta`` is a list of (shape, dtype) per output.
# ------------------------------------------------------------------------------------------------

def _unary(expr: str):
    def emit(em, name, meta, args, kwargs):
        shape, dtype = meta[0]
        return em.elementwise(name, shape, dtype, [args[0]], expr.replace("ONE", literal(1, dtype))
                              .replace("ZERO", literal(0, dtype)).replace("HALF", literal(0.5, dtype)))
    return emit


def _gelu(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    approx = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
    if approx == "tanh":
        c = literal(math.sqrt(2 / math.pi), dtype)
        expr = (f"{literal(0.5, dtype)} * a0 * ({literal(1, dtype)} + math.tanh({c} * (a0 + "
                f"{literal(0.044715, dtype)} * a0 * a0 * a0)))")
    else:
        expr = f"{literal(0.5, dtype)} * a0 * ({literal(1, dtype)} + erf(a0 * {literal(1 / math.sqrt(2), dtype)}))"
    return em.elementwise(name, shape, dtype, [args[0]], expr)


def _binary(expr: str, scaled: bool = False):
    def emit(em, name, meta, args, kwargs):
        shape, dtype = meta[0]
        a, b = args[0], args[1]
        e = expr
        alpha = kwargs.get("alpha", 1)
        if scaled and alpha != 1:
            e = e.replace("a1", f"({literal(alpha, dtype)} * a1)")
        return em.elementwise(name, shape, dtype, [a, b], e)
    return emit


def _div(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    mode = kwargs.get("rounding_mode")
    if mode is None:
        return em.elementwise(name, shape, dtype, args[:2], "a0 / a1")
    if mode == "floor" and np.dtype(dtype).kind in "iu":
        return em.elementwise(name, shape, dtype, args[:2], "a0 // a1")
    raise UnsupportedOpError(f"div with rounding_mode={mode!r} on {np.dtype(dtype)}")


def _pow_scalar(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    e = args[1].const if isinstance(args[1], Val) else args[1]
    if e == 2:
        expr = "a0 * a0"
    elif e == 0.5:
        expr = "math.sqrt(a0)"
    elif e == -0.5:
        expr = f"{literal(1, dtype)} / math.sqrt(a0)"
    else:
        expr = f"a0 ** {literal(e, dtype)}"
    return em.elementwise(name, shape, dtype, [args[0]], expr)


def _where(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    return em.elementwise(name, shape, dtype, args[:3], "(a1 if a0 else a2)")


def _copy(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    src = args[0]
    if np.dtype(dtype) == src.dtype and tuple(shape) == tuple(src.shape):
        return src
    if src.is_const:
        return Val(None, tuple(shape), np.dtype(dtype), np.dtype(dtype).type(src.const))
    return em.elementwise(name, shape, dtype, [src], "a0")


def _alias(em, name, meta, args, kwargs):
    return args[0]


def _full(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    value = args[1] if len(args) > 1 else kwargs.get("fill_value")
    return Val(None, tuple(shape), np.dtype(dtype), value)


def _const_of(value):
    def emit(em, name, meta, args, kwargs):
        shape, dtype = meta[0]
        return Val(None, tuple(shape), np.dtype(dtype), value)
    return emit


def _scalar_tensor(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    return Val(None, tuple(shape), np.dtype(dtype), args[0])


def _reshape(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    src = args[0]
    if src.is_const:
        return Val(None, tuple(shape), src.dtype, src.const)
    return reshape_line(em, name, src, shape)


def _expand(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    if args[0].is_const:
        return Val(None, tuple(shape), args[0].dtype, args[0].const)
    if tuple(shape) == tuple(args[0].shape):
        return args[0]
    return em.elementwise(name, shape, dtype, [args[0]], "a0")


def _permute(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    src, perm = args[0], [p % max(len(args[0].shape), 1) for p in args[1]]
    if perm == sorted(perm):
        return src
    if src.is_const:
        return Val(None, tuple(shape), src.dtype, src.const)
    if src.name in em.permutes:       # a permute of a permute: one permute of the first one's source
        src, first = em.permutes[src.name]
        perm = [first[p] for p in perm]
        if perm == sorted(perm):
            return src
    out = em.empty(name, shape, dtype)
    em.permutes[out.name] = (src, tuple(perm))
    idx = [""] * len(perm)
    for d, p in enumerate(perm):
        idx[p] = f"i{d}"
    em.kernel(out.name[2:], shape, [("_a", src.name, ", ".join(idx))],
              [("_o", out.name, ", ".join(f"i{d}" for d in range(len(shape))))], "_o = _a")
    return out


def _transpose(em, name, meta, args, kwargs):
    nd = len(args[0].shape)
    d0, d1 = args[1] % nd, args[2] % nd
    perm = list(range(nd))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _permute(em, name, meta, [args[0], perm], kwargs)


def _t(em, name, meta, args, kwargs):
    if len(args[0].shape) < 2:
        return args[0]
    return _permute(em, name, meta, [args[0], [1, 0]], kwargs)


def _slice_kernel(em, name, shape, dtype, src: Val, starts, steps) -> Val:
    out = em.empty(name, shape, dtype)
    idx = ", ".join(f"{st} + {sp} * i{d}" if (st, sp) != (0, 1) else f"i{d}"
                    for d, (st, sp) in enumerate(zip(starts, steps)))
    em.kernel(out.name[2:], shape, [("_a", em.materialize(src, name + "_src").name, idx)],
              [("_o", out.name, ", ".join(f"i{d}" for d in range(len(shape))))], "_o = _a")
    return out


def _slice(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    src = args[0]
    nd = len(src.shape)
    dim = (args[1] if len(args) > 1 else kwargs.get("dim", 0)) % nd
    start = args[2] if len(args) > 2 else kwargs.get("start", 0)
    step = args[4] if len(args) > 4 else kwargs.get("step", 1)
    start = 0 if start is None else start
    if start < 0:
        start += src.shape[dim]
    start = max(0, min(start, src.shape[dim]))
    if tuple(shape) == tuple(src.shape):
        return src
    if src.is_const:
        return Val(None, tuple(shape), src.dtype, src.const)
    starts = [0] * nd
    steps = [1] * nd
    starts[dim], steps[dim] = start, step
    return _slice_kernel(em, name, shape, dtype, src, starts, steps)


def _select(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    src = args[0]
    nd = len(src.shape)
    dim, index = args[1] % nd, args[2] % src.shape[args[1] % nd]
    out = em.empty(name, shape, dtype)
    idx, k = [], 0
    for d in range(nd):
        if d == dim:
            idx.append(str(index))
        else:
            idx.append(f"i{k}")
            k += 1
    em.kernel(out.name[2:], shape, [("_a", em.materialize(src, name + "_src").name, ", ".join(idx))],
              [("_o", out.name, broadcast_index(shape, shape))], "_o = _a")
    return out


def _split(em, name, meta, args, kwargs):
    src = args[0]
    nd = len(src.shape)
    dim = (args[2] if len(args) > 2 else kwargs.get("dim", 0)) % nd
    outs, start = [], 0
    for k, (shape, dtype) in enumerate(meta):
        starts = [0] * nd
        starts[dim] = start
        outs.append(_slice_kernel(em, f"{name}_{k}", shape, dtype, src, starts, [1] * nd))
        start += shape[dim]
    return tuple(outs)


def _cat(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    parts = [p for p in args[0] if int(np.prod(p.shape)) > 0]
    dim = (args[1] if len(args) > 1 else kwargs.get("dim", 0)) % len(shape)
    out = em.empty(name, shape, dtype)
    off = 0
    for k, p in enumerate(parts):
        src = em.materialize(p, f"{name}_in{k}")
        oidx = ", ".join(f"{off} + i{d}" if d == dim and off else f"i{d}" for d in range(len(shape)))
        em.kernel(f"{out.name[2:]}_part{k}", p.shape, [("_a", src.name, ", ".join(f"i{d}" for d in range(len(shape))))],
                  [("_o", out.name, oidx)], "_o = _a")
        off += p.shape[dim]
    return out


# -- matrix products ----------------------------------------------------------------------------

def _transposed_weight(em, a: Val, b: Val) -> Optional[Val]:
    """The array ``w`` when ``b`` is the transpose ``w.T`` of a 2-D array (``F.linear``'s ``x @ W.T``)
    and ``a`` is 2-D: such products are emitted as ``(w @ a.T).T``, so that the program reads the
    weight itself, as the backward's ``dY @ W`` does, and no kernel copies the weight into its
    transpose. Under a data-parallel schedule with the weight's update split (ZeRO-style), the weight
    is then gathered to every rank once per step, and only activations, which each rank holds its
    rows of, are transposed. Training steps only (``Emitter.training``). Not when ``a`` is an argument
    no gradient flows to (the network's input): the backward then has no ``dY @ W``, the weight is
    read once in either form, and ``a`` is read as it is (under a Megatron split every rank passes
    the input whole; its transpose would be a kernel on rank 0 whose result goes to every rank)."""
    if not em.training or len(a.shape) != 2 or len(b.shape) != 2 or a.is_const or b.is_const:
        return None
    if a.name in em.gradless:
        return None
    t = em.permutes.get(b.name)
    if t is None or tuple(t[1]) != (1, 0) or t[0].is_const or t[0].view or len(t[0].shape) != 2:
        return None
    return t[0]


def _product_transposed(em, name, a: Val, w: Val, shape) -> Val:
    """``(w @ a.T)``, of shape ``shape[::-1]``: ``a @ w.T`` transposed."""
    at = _permute(em, name + "_xt", [((a.shape[1], a.shape[0]), a.dtype)], [a, [1, 0]], {})
    return matmul_line(em, name, w, at, (shape[1], shape[0]))


def _mm(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    w = _transposed_weight(em, args[0], args[1])
    if w is not None:
        prod_t = _product_transposed(em, name + "_t", args[0], w, shape)
        return _permute(em, name, meta, [prod_t, [1, 0]], {})
    return matmul_line(em, name, args[0], args[1], shape)


def _addmm(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    bias, a, b = args[:3]
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    w = _transposed_weight(em, a, b)
    if w is not None and not bias.is_const and beta == 1 and alpha == 1:
        # bias + (w @ a.T).T in one kernel that reads the product transposed
        prod_t = _product_transposed(em, name + "_mm", a, w, shape)
        out = em.empty(name, shape, dtype)
        em.kernel(out.name[2:], shape, [("_a0", bias.name, broadcast_index(bias.shape, shape)),
                                        ("_a1", prod_t.name, "i1, i0")],
                  [("_o", out.name, "i0, i1")], "_o = _a0 + _a1")
        return out
    prod = matmul_line(em, name + "_mm", a, b, shape)
    expr = "a0 + a1"
    if alpha != 1:
        expr = expr.replace("a1", f"{literal(alpha, dtype)} * a1")
    if beta != 1:
        expr = expr.replace("a0", f"{literal(beta, dtype)} * a0")
    return em.elementwise(name, shape, dtype, [bias, prod], expr)


# -- reductions ---------------------------------------------------------------------------------

def _reduce_args(args, kwargs):
    """``(input, dims, keepdim)`` of a reduction operator (``sum``, ``mean``, ``amax``, ...)."""
    src = args[0]
    dims = norm_dims(args[1] if len(args) > 1 else kwargs.get("dim"), len(src.shape))
    return src, dims, args[2] if len(args) > 2 else kwargs.get("keepdim", False)


def _sum(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    src, dims, keep = _reduce_args(args, kwargs)
    return reduce(em, name, src, dims, keep, "sum", dtype)


def _mean(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    src, dims, keep = _reduce_args(args, kwargs)
    total = reduce(em, name + "_sum", src, dims, keep, "sum", dtype)
    count = int(np.prod([src.shape[d] for d in dims])) if src.shape else 1
    return em.elementwise(name, total.shape, dtype, [total], f"a0 / {literal(count, dtype)}")


def _extreme(fn: str):
    def emit(em, name, meta, args, kwargs):
        shape, dtype = meta[0]
        src, dims, keep = _reduce_args(args, kwargs)
        return reduce(em, name, src, dims, keep, fn, dtype)
    return emit


# -- composites ---------------------------------------------------------------------------------

def _softmax_parts(em, name, x: Val, dim: int, dtype):
    x = em.materialize(x, name + "_in")
    m = reduce(em, name + "_max", x, (dim,), True, "max", dtype)
    t = em.elementwise(name + "_shift", x.shape, dtype, [x, m], "a0 - a1")
    e = em.elementwise(name + "_exp", x.shape, dtype, [t], "math.exp(a0)")
    s = reduce(em, name + "_sum", e, (dim,), True, "sum", dtype)
    return t, e, s


def _softmax(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    dim = args[1] % len(shape)
    _, e, s = _softmax_parts(em, name, args[0], dim, dtype)
    return em.elementwise(name, shape, dtype, [e, s], "a0 / a1")


def _log_softmax(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    dim = args[1] % len(shape)
    t, _, s = _softmax_parts(em, name, args[0], dim, dtype)
    return em.elementwise(name, shape, dtype, [t, s], "a0 - math.log(a1)")


def _uninitialised(em, name, meta, args, kwargs):
    """``empty`` / ``empty_permuted``: a tensor whose values are never read (functionalised graphs use it
    only for its shape, as ``full_like``'s template); a constant of zeros."""
    shape, dtype = meta[0]
    return Val(None, tuple(shape), np.dtype(dtype), 0)


def _leaky_relu(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    slope = args[1] if len(args) > 1 else kwargs.get("negative_slope", 0.01)
    return em.elementwise(name, shape, dtype, [args[0]],
                          f"(a0 if a0 > {literal(0, dtype)} else a0 * {literal(slope, dtype)})")


def _elu(em, name, meta, args, kwargs):
    """``elu(x, alpha, scale, input_scale)``: ``scale * x`` above 0, ``scale * alpha * (exp(input_scale * x) - 1)``
    below (SELU and CELU are ELUs with other constants)."""
    shape, dtype = meta[0]
    alpha, scale, in_scale = (list(args[1:4]) + [1, 1, 1][len(args) - 1:])[:3]
    L = lambda v: literal(v, dtype)  # noqa: E731
    return em.elementwise(name, shape, dtype, [args[0]], f"({L(scale)} * a0 if a0 > {L(0)} else "
                          f"{L(scale * alpha)} * expm1({L(in_scale)} * a0))")


def _hardtanh(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    lo = args[1] if len(args) > 1 else kwargs.get("min_val", -1.0)
    hi = args[2] if len(args) > 2 else kwargs.get("max_val", 1.0)
    return em.elementwise(name, shape, dtype, [args[0]], f"min(max(a0, {literal(lo, dtype)}), {literal(hi, dtype)})")


def _getitem(em, name, meta, args, kwargs):
    return args[0][args[1]]


_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}

EMITTERS: Dict[str, Callable] = {
    # element-wise
    "aten.add.Tensor": _binary("a0 + a1", scaled=True), "aten.add.Scalar": _binary("a0 + a1", scaled=True),
    "aten.sub.Tensor": _binary("a0 - a1", scaled=True), "aten.sub.Scalar": _binary("a0 - a1", scaled=True),
    "aten.rsub.Scalar": _binary("a1 - a0"), "aten.rsub.Tensor": _binary("a1 - a0"),
    "aten.mul.Tensor": _binary("a0 * a1"), "aten.mul.Scalar": _binary("a0 * a1"),
    "aten.div.Tensor": _div, "aten.div.Scalar": _div, "aten.div.Tensor_mode": _div,
    "aten.maximum.default": _binary("max(a0, a1)"), "aten.minimum.default": _binary("min(a0, a1)"),
    "aten.pow.Tensor_Scalar": _pow_scalar, "aten.pow.Tensor_Tensor": _binary("a0 ** a1"),
    "aten.where.self": _where,
    "aten.relu.default": _unary("max(a0, ZERO)"), "aten.neg.default": _unary("-a0"),
    "aten.exp.default": _unary("math.exp(a0)"), "aten.log.default": _unary("math.log(a0)"),
    "aten.tanh.default": _unary("math.tanh(a0)"), "aten.sigmoid.default": _unary("ONE / (ONE + math.exp(-a0))"),
    "aten.sqrt.default": _unary("math.sqrt(a0)"), "aten.rsqrt.default": _unary("ONE / math.sqrt(a0)"),
    "aten.reciprocal.default": _unary("ONE / a0"), "aten.abs.default": _unary("abs(a0)"),
    "aten.sin.default": _unary("math.sin(a0)"), "aten.cos.default": _unary("math.cos(a0)"),
    "aten.erf.default": _unary("erf(a0)"), "aten.gelu.default": _gelu, "aten.leaky_relu.default": _leaky_relu,
    # sign(0) = 0 and sign(nan) = nan: the input itself when it is neither positive nor negative
    "aten.sign.default": _unary("(ONE if a0 > ZERO else (-ONE if a0 < ZERO else a0))"),
    "aten.log1p.default": _unary("log1p(a0)"), "aten.expm1.default": _unary("expm1(a0)"),
    # tests for NaN / infinity: a program using them is built without -ffast-math's finite-math
    # assumption (dace_compat.build.release_build), which would fold them to False
    "aten.isnan.default": _unary("isnan(a0)"), "aten.isinf.default": _unary("isinf(a0)"),
    "aten.isfinite.default": _unary("isfinite(a0)"),
    "aten.elu.default": _elu, "aten.hardtanh.default": _hardtanh,
    "aten.logical_not.default": _unary("not a0"), "aten.bitwise_not.default": _unary("not a0"),
    "aten.logical_and.default": _binary("a0 and a1"), "aten.logical_or.default": _binary("a0 or a1"),
    "aten.bitwise_and.Tensor": _binary("a0 and a1"), "aten.bitwise_or.Tensor": _binary("a0 or a1"),
    "aten.clamp_min.default": _binary("max(a0, a1)"), "aten.clamp_max.default": _binary("min(a0, a1)"),
    **{f"aten.{k}.{v}": _binary(f"a0 {op} a1") for k, op in _CMP.items() for v in ("Scalar", "Tensor")},
    # copies, casts, constants
    "aten._to_copy.default": _copy, "aten.clone.default": _alias, "aten.alias.default": _alias,
    "aten.detach.default": _alias, "aten.lift_fresh_copy.default": _alias, "aten.contiguous.default": _alias,
    "aten.full.default": lambda em, n, m, a, k: Val(None, tuple(m[0][0]), np.dtype(m[0][1]), a[1]),
    "aten.full_like.default": _full, "aten.scalar_tensor.default": _scalar_tensor,
    "aten.zeros_like.default": _const_of(0), "aten.ones_like.default": _const_of(1),
    "aten.zeros.default": _const_of(0), "aten.ones.default": _const_of(1),
    "aten.empty.memory_format": _uninitialised, "aten.empty_permuted.default": _uninitialised,
    # shapes
    "aten.view.default": _reshape, "aten._unsafe_view.default": _reshape, "aten.reshape.default": _reshape,
    "aten.unsqueeze.default": _reshape, "aten.squeeze.dim": _reshape, "aten.squeeze.dims": _reshape,
    "aten.squeeze.default": _reshape, "aten.flatten.using_ints": _reshape,
    "aten.expand.default": _expand, "aten.permute.default": _permute, "aten.transpose.int": _transpose,
    "aten.t.default": _t, "aten.slice.Tensor": _slice, "aten.select.int": _select,
    "aten.split_with_sizes.default": _split, "aten.split.Tensor": _split, "aten.cat.default": _cat,
    # products and reductions
    "aten.mm.default": _mm, "aten.bmm.default": _mm, "aten.addmm.default": _addmm,
    "aten.sum.dim_IntList": _sum, "aten.sum.default": _sum, "aten.mean.dim": _mean, "aten.mean.default": _mean,
    "aten.amax.default": _extreme("max"), "aten.amin.default": _extreme("min"), "aten.var.correction": var,
    # composites and indexing
    "aten._softmax.default": _softmax, "aten._log_softmax.default": _log_softmax,
    "aten.native_layer_norm.default": layer_norm, "aten.native_batch_norm.default": batch_norm_eval,
    "aten._native_batch_norm_legit_no_training.default": batch_norm_eval,
    "aten._native_batch_norm_legit_functional.default": batch_norm_train,
    "aten._native_batch_norm_legit.no_stats": batch_norm_train, "aten.native_group_norm.default": group_norm,
    "aten.linalg_vector_norm.default": vector_norm,
    "getitem": _getitem,
}

# indexing (embedding, gather, scatter, index, index_put, arange, ...): frontend/torch_indexing.py
from .torch_indexing import INDEXING_EMITTERS  # noqa: E402  (uses the helpers above)

EMITTERS.update(INDEXING_EMITTERS)

# convolution and pooling, forward and backward: frontend/torch_conv.py
from .torch_conv import CONV_EMITTERS  # noqa: E402
# index reductions, cumsum, prod, flip, roll: frontend/torch_scans.py
from .torch_scans import SCAN_EMITTERS  # noqa: E402

EMITTERS.update(CONV_EMITTERS)
EMITTERS.update(SCAN_EMITTERS)
from .torch_random import RANDOM_EMITTERS  # noqa: E402
EMITTERS.update(RANDOM_EMITTERS)
