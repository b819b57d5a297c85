"""Normalisations and statistics of the torch operator table (``torch_ops.EMITTERS``): layer norm,
batch norm with the running statistics (``module.eval()``), and the variance. Each is a few
element-wise kernels around sum reductions, written with the shared core of ``torch_emit``."""
from __future__ import annotations

import numpy as np

from .torch_emit import UnsupportedOpError, Val, literal, norm_dims, reduce, reshape_line

__all__ = ["layer_norm", "batch_norm_eval", "var"]


def layer_norm(em, name, meta, args, kwargs):
    (shape, dtype), (mshape, _), _ = meta
    x, normalized = em.materialize(args[0], name + "_in"), args[1]
    w = args[2] if len(args) > 2 else None
    b = args[3] if len(args) > 3 else None
    eps = args[4] if len(args) > 4 else 1e-5
    nd = len(shape)
    dims = tuple(range(nd - len(normalized), nd))
    count = int(np.prod([shape[d] for d in dims]))
    total = reduce(em, name + "_sum", x, dims, True, "sum", dtype)
    mean = em.elementwise(name + "_mean", total.shape, dtype, [total], f"a0 / {literal(count, dtype)}")
    xc = em.elementwise(name + "_centered", shape, dtype, [x, mean], "a0 - a1")
    sq = em.elementwise(name + "_square", shape, dtype, [xc], "a0 * a0")
    ss = reduce(em, name + "_sumsq", sq, dims, True, "sum", dtype)
    rstd = em.elementwise(name + "_rstd", ss.shape, dtype, [ss],
                          f"{literal(1, dtype)} / math.sqrt(a0 / {literal(count, dtype)} + {literal(eps, dtype)})")
    ins, expr = [xc, rstd], "a0 * a1"
    if w is not None:
        ins.append(w)
        expr = f"({expr}) * a{len(ins) - 1}"
    if b is not None:
        ins.append(b)
        expr = f"{expr} + a{len(ins) - 1}"
    out = em.elementwise(name, shape, dtype, ins, expr)
    return out, mean, rstd


def batch_norm_eval(em, name, meta, args, kwargs):
    """Batch norm with the running statistics (``module.eval()``): ``(x - mean) / sqrt(var + eps) * w + b``
    per channel (dim 1). ``_native_batch_norm_legit_no_training(x, w, b, mean, var, momentum, eps)``
    and ``native_batch_norm(x, w, b, mean, var, training, momentum, eps)``; both return the saved
    statistics as empty tensors besides the output."""
    (shape, dtype), *rest = meta
    x, w, b, mean, var = args[:5]
    if len(args) == 8:              # native_batch_norm: (..., training, momentum, eps)
        training, eps = args[5], args[7]
        if training or mean is None:
            raise UnsupportedOpError(
                "batch norm with batch statistics (training mode) is not supported: its running statistics are "
                "updated in place; call module.eval() (or the BatchNorm layers' .eval()) to normalise with the "
                "running statistics, or use LayerNorm")
    else:
        eps = args[6]
    x = em.materialize(x, name + "_in")
    channel = (shape[1],) + (1,) * (len(shape) - 2)         # broadcasts against (N, C, L...)
    ins, expr = [x], "(a0 - a1) / math.sqrt(a2 + EPS)"
    for v in (mean, var):
        ins.append(reshape_line(em, name + "_stat", em.materialize(v, name + "_stat"), channel))
    for v, op in ((w, "*"), (b, "+")):
        if v is not None:
            ins.append(v if v.is_const else reshape_line(em, name + "_affine", v, channel))
            expr = f"({expr}) {op} a{len(ins) - 1}"
    out = em.elementwise(name, shape, dtype, ins, expr.replace("EPS", literal(eps, dtype)))
    empties = tuple(Val(None, tuple(s), np.dtype(d) if d is not None else np.dtype(dtype), 0) for s, d in rest)
    return (out, *empties)


def var(em, name, meta, args, kwargs):
    """``var(x, dims, correction=c, keepdim=k)``: ``sum((x - mean)^2) / (n - c)`` over ``dims``."""
    shape, dtype = meta[0]
    src = em.materialize(args[0], name + "_in")
    dims = norm_dims(args[1] if len(args) > 1 else kwargs.get("dim"), len(src.shape))
    correction = kwargs.get("correction", 1)
    correction = 1 if correction is None else correction
    keep = kwargs.get("keepdim", False)
    count = int(np.prod([src.shape[d] for d in dims])) if src.shape else 1
    total = reduce(em, name + "_sum", src, dims, True, "sum", dtype)
    mean = em.elementwise(name + "_mean", total.shape, dtype, [total], f"a0 / {literal(count, dtype)}")
    sq = em.elementwise(name + "_square", src.shape, dtype, [src, mean], "(a0 - a1) * (a0 - a1)")
    ss = reduce(em, name + "_sumsq", sq, dims, keep, "sum", dtype)
    # n - c <= 0 gives PyTorch's inf / nan (a division by zero or a negative count)
    return em.elementwise(name, shape, dtype, [ss], f"a0 / {literal(count - correction, dtype)}")
