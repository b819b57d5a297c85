"""Normalisations and statistics of the torch operator table (``torch_ops.EMITTERS``): layer norm,
group norm, batch norm (running statistics in ``module.eval()``, batch statistics in training),
vector norms (``F.normalize``) and the variance. Each is a few
element-wise kernels around sum reductions, written with the shared core of ``torch_emit``."""
from __future__ import annotations

import numpy as np

from .torch_emit import Val, literal, norm_dims, reduce, reshape_line

__all__ = ["layer_norm", "group_norm", "batch_norm_eval", "batch_norm_train", "vector_norm", "var"]


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


def _stats(em, name, x: Val, dims, eps, dtype):
    """Mean and ``1 / sqrt(biased variance + eps)`` over ``dims`` (kept as 1s), and the count."""
    count = int(np.prod([x.shape[d] for d in dims]))
    total = reduce(em, name + "_sum", x, dims, True, "sum", dtype)
    mean = em.elementwise(name + "_mean", total.shape, dtype, [total], f"a0 / {literal(count, dtype)}")
    sq = em.elementwise(name + "_square", x.shape, dtype, [x, mean], "(a0 - a1) * (a0 - a1)")
    ss = reduce(em, name + "_sumsq", sq, dims, True, "sum", dtype)
    rstd = em.elementwise(name + "_rstd", ss.shape, dtype, [ss],
                          f"{literal(1, dtype)} / math.sqrt(a0 / {literal(count, dtype)} + {literal(eps, dtype)})")
    return mean, rstd, ss, count


def _affine(em, name, shape, dtype, ins, expr, w, b):
    """``expr`` (of ``ins``) times the per-channel (dim 1) weight ``w`` plus the bias ``b``."""
    channel = (shape[1],) + (1,) * (len(shape) - 2)
    for v, op in ((w, "*"), (b, "+")):
        if v is not None:
            ins.append(v if v.is_const else reshape_line(em, name + "_affine", em.materialize(v, name + "_p"), channel))
            expr = f"({expr}) {op} a{len(ins) - 1}"
    return em.elementwise(name, shape, dtype, ins, expr)


def group_norm(em, name, meta, args, kwargs):
    """``native_group_norm(x, w, b, N, C, HxW, groups, eps)`` -> (out, mean, rstd), the statistics (N, groups)."""
    (shape, dtype), (sshape, _), _ = meta
    x, w, b, N, C, HW, G, eps = args
    x = em.materialize(x, name + "_in")
    xg = reshape_line(em, name + "_groups", x, (N, G, (C // G) * HW))
    mean, rstd, _, _ = _stats(em, name, xg, (2,), eps, dtype)
    norm = em.elementwise(name + "_norm", xg.shape, dtype, [xg, mean, rstd], "(a0 - a1) * a2")
    out = _affine(em, name, shape, dtype, [reshape_line(em, name + "_norm_v", norm, tuple(shape))], "a0", w, b)
    return out, reshape_line(em, name + "_mean_v", mean, tuple(sshape)), reshape_line(em, name + "_rstd_v", rstd,
                                                                                         tuple(sshape))


def batch_norm_train(em, name, meta, args, kwargs):
    """Batch norm with the batch's statistics over every dim but 1: ``_native_batch_norm_legit_functional``
    (x, w, b, running_mean, running_var, training, momentum, eps) -> (out, mean, invstd, new running mean,
    new running var), ``_native_batch_norm_legit.no_stats`` (x, w, b, training, momentum, eps) -> (out,
    mean, invstd), and ``native_batch_norm`` with ``training=True``. The running variance is updated with
    the unbiased variance, as PyTorch does. The statistics are the whole batch's: under a data-parallel
    schedule every rank normalises with the global ones (``SyncBatchNorm``'s semantics)."""
    (shape, dtype), *rest = meta
    x, w, b = args[:3]
    if len(args) == 6:
        running, (momentum, eps) = None, args[4:6]
    else:
        running, (momentum, eps) = (args[3], args[4]), args[6:8]
    x = em.materialize(x, name + "_in")
    dims = (0, *range(2, len(shape)))
    mean, rstd, ss, count = _stats(em, name, x, dims, eps, dtype)
    out = _affine(em, name, shape, dtype, [x, mean, rstd], "(a0 - a1) * a2", w, b)
    C = shape[1]
    outs = [out, reshape_line(em, name + "_mean_v", mean, (C,)), reshape_line(em, name + "_rstd_v", rstd, (C,))]
    if running is not None and running[0] is not None:
        # the functional form returns the new running statistics; ``native_batch_norm`` updates its
        # arguments in place (in a training step: the step's own copies of the buffers, its outputs)
        m, L = momentum, lambda v: literal(v, dtype)  # noqa: E731
        for k, (r, stat, scale) in enumerate(((running[0], mean, 1), (running[1], ss, 1 / max(count - 1, 1)))):
            flat = reshape_line(em, f"{name}_stat{k}", stat, (C,))
            new = em.elementwise(f"{name}_running{k}", (C,), dtype, [r, flat], f"{L(1 - m)} * a0 + {L(m * scale)} * a1",
                                 out=None if len(rest) == 4 or r.is_const or r.view else r)
            if len(rest) == 4:
                outs.append(new)
    elif len(rest) == 4:
        outs += [Val(None, tuple(s), np.dtype(d or dtype), 0) for s, d in rest[2:]]
    return tuple(outs)


def vector_norm(em, name, meta, args, kwargs):
    """``linalg_vector_norm(x, ord, dim, keepdim)``: ord 2 and p (``sum(|x|^p)^(1/p)``), 1, inf, -inf, 0."""
    shape, dtype = meta[0]
    src = em.materialize(args[0], name + "_in")
    order = args[1] if len(args) > 1 else kwargs.get("ord", 2)
    dims = norm_dims(args[2] if len(args) > 2 else kwargs.get("dim"), len(src.shape))
    keep = args[3] if len(args) > 3 else kwargs.get("keepdim", False)
    if src.dtype != np.dtype(dtype):
        src = em.elementwise(name + "_cast", src.shape, dtype, [src], "a0")
    if order in (float("inf"), float("-inf")):
        mag = em.elementwise(name + "_abs", src.shape, dtype, [src], "abs(a0)")
        return reduce(em, name, mag, dims, keep, "max" if order > 0 else "min", dtype)
    if order == 0:
        nz = em.elementwise(name + "_nonzero", src.shape, dtype, [src],
                            f"({literal(1, dtype)} if a0 != {literal(0, dtype)} else {literal(0, dtype)})")
        return reduce(em, name, nz, dims, keep, "sum", dtype)
    powered = {1: "abs(a0)", 2: "a0 * a0"}.get(order, f"abs(a0) ** {literal(order, dtype)}")
    total = reduce(em, name + "_sum", em.elementwise(name + "_pow", src.shape, dtype, [src], powered), dims, keep,
                   "sum", dtype)
    root = {1: "a0", 2: "math.sqrt(a0)"}.get(order, f"a0 ** {literal(1 / order, dtype)}")
    return em.elementwise(name, total.shape, dtype, [total], root)


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
            return batch_norm_train(em, name, meta, [x, w, b, mean, var, True, args[6], eps], kwargs)
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
