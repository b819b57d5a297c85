"""Index-valued and scatter operators of the PyTorch frontend.

``embedding``, ``gather``, ``scatter`` of a value (one index per row), ``arange``, advanced
indexing with integer index tensors (``x[:, [-1], :]``, ``mask[b, None, q, kv]``), ``index_put`` with accumulation (the
embedding backward), ``slice_scatter`` / ``select_scatter`` (backward of
slices), ``clamp`` and ``any``. Same contract as ``torch_ops``: each emitter writes lines of
the generated ``@dace.program`` and returns a ``Val``.

``index_put(accumulate=True)`` is a scatter-add; it is emitted as a one-hot matrix times the
values (``onehot(idx)^T @ values``, DaCe's MatMul), so a data-parallel schedule that splits
the indices sums the partial gradients with the same reduction as any other contraction,
and no kernel writes through a computed address.
"""
from __future__ import annotations

from typing import Callable, Dict

import numpy as np

from .torch_emit import UnsupportedOpError, Val, broadcast_index, literal, matmul_line, reduce, reshape_line

__all__ = ["INDEXING_EMITTERS"]


def _clamped(index: str, n: int, dtype) -> str:
    """An index kept inside ``[0, n)`` (bounds typed like the index, so nothing truncates).
    Ranks outside a kernel's grid run it on stale buffers and discard the results; a clamped
    index keeps their reads in bounds."""
    return f"min(max({index}, {literal(0, dtype)}), {literal(n - 1, dtype)})"


def _embedding(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    weight, idx = em.materialize(args[0], name + "_w"), em.materialize(args[1], name + "_idx")
    out = em.empty(name, shape, dtype)
    nd = len(shape)
    rows = weight.shape[0]
    iidx = ", ".join(f"i{d}" for d in range(nd - 1)) if nd > 1 else "0"
    em.kernel(out.name[2:], shape, [("_t", idx.name, iidx), ("_w", weight.name, f"0:{rows}, i{nd - 1}")],
              [("_o", out.name, ", ".join(f"i{d}" for d in range(nd)))], f"_o = _w[{_clamped('_t', rows, idx.dtype)}]")
    return out


def _gather(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    src, dim, index = em.materialize(args[0], name + "_src"), args[1], em.materialize(args[2], name + "_idx")
    nd = len(src.shape)
    dim %= nd
    out = em.empty(name, shape, dtype)
    sub = ", ".join(f"0:{src.shape[d]}" if d == dim else f"i{d}" for d in range(nd))
    em.kernel(out.name[2:], shape, [("_t", index.name, broadcast_index(shape, shape)), ("_w", src.name, sub)],
              [("_o", out.name, broadcast_index(shape, shape))], f"_o = _w[{_clamped('_t', src.shape[dim], index.dtype)}]")
    return out


def _scatter_value(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    src, dim, index, value = args[0], args[1] % len(shape), em.materialize(args[2], name + "_idx"), args[3]
    if index.shape[dim] != 1 or any(index.shape[d] != shape[d] for d in range(len(shape)) if d != dim):
        raise UnsupportedOpError(
            f"scatter(value) with an index of shape {index.shape} into {tuple(shape)} along dim {dim}: only "
            f"one index per row (the shape of one-hot targets) is supported")
    out = em.empty(name, shape, dtype)
    reads = [("_t", index.name, ", ".join("0" if d == dim else f"i{d}" for d in range(len(shape))))]
    keep = "_a"
    if src.is_const:
        keep = literal(src.const, dtype)
    else:
        reads.append(("_a", src.name, broadcast_index(src.shape, shape)))
    em.kernel(out.name[2:], shape, reads, [("_o", out.name, broadcast_index(shape, shape))],
              f"_o = ({literal(value, dtype)} if i{dim} == _t else {keep})")
    return out


def _wrapped(index: str, n: int, dtype) -> str:
    """``index`` with PyTorch's negative wrap-around, clamped into ``[0, n)`` (indices computed
    in the program are not checked; the clamp keeps every read in bounds)."""
    lo, hi = literal(0, dtype), literal(n - 1, dtype)
    return f"min(max(({index} + {literal(n, dtype)} if {index} < {lo} else {index}), {lo}), {hi})"


def _arange(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    if len(args) == 1:
        start, step = 0, 1
    else:
        start = args[0]
        step = args[2] if len(args) > 2 else kwargs.get("step", 1)
    out = em.empty(name, shape, dtype)
    em.kernel(out.name[2:], shape, [], [("_o", out.name, "i0")],
              f"_o = {literal(start, dtype)} + {literal(step, dtype)} * i0")
    return out


def _single_index(args, what):
    src, indices = args[0], list(args[1])
    used = [d for d, t in enumerate(indices) if t is not None]
    if len(used) != 1:
        raise UnsupportedOpError(f"{what} with {len(used)} index tensors: only one index tensor (the others `:`) "
                                 f"is supported")
    dim, idx = used[0], indices[used[0]]
    if not isinstance(idx, Val) or np.dtype(idx.dtype).kind not in "iu":
        raise UnsupportedOpError(f"{what} with a {getattr(idx, 'dtype', type(idx).__name__)} index: only integer "
                                 f"index tensors are supported (boolean masks are not)")
    return src, dim, idx


def _index_dims(src_nd: int, indices) -> tuple:
    """Where advanced indexing puts its dims (PyTorch's, NumPy's rule): ``(used, bshape, first)`` with
    ``used`` the indexed dims of the source, ``bshape`` the index tensors' broadcast shape and
    ``first`` the output position of its first dim: where the indexed dims were when they are
    adjacent (``x[:, i, j]``), else 0 (``x[i, :, j]``: the broadcast dims lead)."""
    used = [d for d, t in enumerate(indices) if t is not None]
    bshape = tuple(np.broadcast_shapes(*(tuple(indices[d].shape) for d in used)))
    adjacent = used == list(range(used[0], used[-1] + 1))
    return used, bshape, (used[0] if adjacent else 0)


def _index(em, name, meta, args, kwargs):
    """``x[idx0, :, idx2, ...]`` with integer index tensors (``None`` for ``:``), broadcast together:
    one kernel over the output whose tasklet reads the source at the indexed position (negative
    indices wrap, out-of-range ones are clamped)."""
    shape, dtype = meta[0]
    src = args[0]
    indices = list(args[1]) + [None] * (len(src.shape) - len(args[1]))
    for t in indices:
        if t is not None and (not isinstance(t, Val) or np.dtype(t.dtype).kind not in "iu"):
            raise UnsupportedOpError(f"indexing with a {getattr(t, 'dtype', type(t).__name__)} index: only integer "
                                     f"index tensors are supported (a boolean mask selects a data-dependent number "
                                     f"of elements; write torch.where(mask, x, 0) instead)")
    used, bshape, first = _index_dims(len(src.shape), indices)
    src = em.materialize(src, name + "_src")
    out = em.empty(name, shape, dtype)
    k = len(bshape)
    # output position of each source dim that is not indexed
    rest = [d for d in range(len(src.shape)) if d not in used]
    at = {d: (j if j < first else j + k) for j, d in enumerate(rest)}
    reads, picks = [], []
    for n, d in enumerate(used):
        t = em.materialize(indices[d], f"{name}_idx{n}")
        off = k - len(t.shape)
        sub = ", ".join("0" if (s == 1 and bshape[off + e] != 1) else f"i{first + off + e}"
                        for e, s in enumerate(t.shape)) or "0"
        reads.append((f"_t{n}", t.name, sub))
        picks.append(_wrapped(f"_t{n}", src.shape[d], t.dtype))
    wsub = ", ".join(f"0:{src.shape[d]}" if d in used else f"i{at[d]}" for d in range(len(src.shape)))
    reads.append(("_w", src.name, wsub))
    em.kernel(out.name[2:], shape, reads, [("_o", out.name, broadcast_index(shape, shape))],
              f"_o = _w[{', '.join(picks)}]")
    return out


def _index_put(em, name, meta, args, kwargs):
    """``base.index_put_([idx], values, accumulate=True)`` along dim 0 as ``base + onehot(idx)^T @ values``."""
    shape, dtype = meta[0]
    base, values = args[0], args[2]
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    _, dim, idx = _single_index(args, "index_put")
    if not accumulate or dim != 0:
        raise UnsupportedOpError(f"index_put with accumulate={accumulate} along dim {dim}: only accumulation along "
                                 f"dim 0 (a scatter-add, e.g. the embedding backward) is supported")
    rows, rest = shape[0], tuple(shape[1:])
    n = int(np.prod(idx.shape)) if idx.shape else 1
    width = int(np.prod(rest)) if rest else 1
    idx = em.materialize(idx, name + "_idx")
    flat_idx = reshape_line(em, name + "_idx_flat", idx, (n,))
    full = tuple(idx.shape) + rest
    if values.is_const or tuple(values.shape) != full:
        values = em.elementwise(name + "_values", full, dtype, [values], "a0")
    vals = reshape_line(em, name + "_values_flat", em.materialize(values, name + "_values"), (n, width))
    onehot = em.empty(name + "_onehot", (rows, n), dtype)
    em.kernel(onehot.name[2:], (rows, n), [("_t", flat_idx.name, "i1")], [("_o", onehot.name, "i0, i1")],
              f"_o = ({literal(1, dtype)} if {_wrapped('_t', rows, idx.dtype)} == i0 else {literal(0, dtype)})")
    summed = matmul_line(em, name + "_sum", onehot, vals, (rows, width))
    summed = reshape_line(em, name + "_rows", summed, shape)
    if base.is_const and base.const == 0:
        return summed
    return em.elementwise(name, shape, dtype, [base, summed], "a0 + a1")


def _scatter_into(em, name, shape, dtype, base: Val, src: Val, index_of) -> Val:
    """A copy of ``base`` with ``src`` written at the positions ``index_of(d) -> str`` gives."""
    out = em.elementwise(name, shape, dtype, [base], "a0")
    src = em.materialize(src, name + "_src")
    em.kernel(f"{out.name[2:]}_write", src.shape, [("_a", src.name, broadcast_index(src.shape, src.shape))],
              [("_o", out.name, index_of())], "_o = _a")
    return out


def _slice_scatter(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    base, src = args[0], args[1]
    nd = len(shape)
    dim = (args[2] if len(args) > 2 else kwargs.get("dim", 0)) % nd
    start = args[3] if len(args) > 3 else kwargs.get("start")
    step = args[5] if len(args) > 5 else kwargs.get("step", 1)
    start = 0 if start is None else (start + shape[dim] if start < 0 else start)
    step = 1 if step is None else step

    def index_of():
        return ", ".join((f"{start} + {step} * i{d}" if (start, step) != (0, 1) else f"i{d}") if d == dim
                         else f"i{d}" for d in range(nd))
    return _scatter_into(em, name, shape, dtype, base, src, index_of)


def _select_scatter(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    base, src = args[0], args[1]
    nd = len(shape)
    dim = args[2] % nd
    index = args[3] % shape[dim]

    def index_of():
        parts, k = [], 0
        for d in range(nd):
            if d == dim:
                parts.append(str(index))
            else:
                parts.append(f"i{k}")
                k += 1
        return ", ".join(parts)
    return _scatter_into(em, name, shape, dtype, base, src, index_of)


def _pad(em, name, meta, args, kwargs):
    """``F.pad(x, (lo_last, hi_last, lo_prev, hi_prev, ...), value=v)`` (``constant_pad_nd``; negative
    pads crop): each output element reads its source element where there is one, else ``v``."""
    shape, dtype = meta[0]
    src = em.materialize(args[0], name + "_src")
    pads = list(args[1])
    value = args[2] if len(args) > 2 else kwargs.get("value", 0)
    nd = len(shape)
    lo = {nd - 1 - k: pads[2 * k] for k in range(len(pads) // 2)}
    padded = [d for d in range(nd) if d in lo]
    out = em.empty(name, shape, dtype)
    wsub = ", ".join(f"0:{src.shape[d]}" if d in lo else f"i{d}" for d in range(nd))
    at = [f"i{d} - {lo[d]}" if lo[d] else f"i{d}" for d in padded]
    inside = " and ".join(f"{a} >= 0 and {a} < {src.shape[d]}" for a, d in zip(at, padded))
    clamped = ", ".join(f"min(max({a}, 0), {src.shape[d] - 1})" for a, d in zip(at, padded))
    em.kernel(out.name[2:], shape, [("_w", src.name, wsub)], [("_o", out.name, broadcast_index(shape, shape))],
              f"_o = (_w[{clamped}] if {inside} else {literal(value, dtype)})")
    return out


def _clamp(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    lo = args[1] if len(args) > 1 else kwargs.get("min")
    hi = args[2] if len(args) > 2 else kwargs.get("max")
    expr = "a0"
    if lo is not None:
        expr = f"max({expr}, {literal(lo, dtype)})"
    if hi is not None:
        expr = f"min({expr}, {literal(hi, dtype)})"
    return em.elementwise(name, shape, dtype, [args[0]], expr)


def _any(em, name, meta, args, kwargs):
    shape, dtype = meta[0]
    src = args[0]
    nd = len(src.shape)
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    dims = tuple(range(nd)) if dims is None else tuple(sorted(d % nd for d in ([dims] if isinstance(dims, int)
                                                                                  else dims)))
    keep = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    if src.is_const:
        return Val(None, tuple(shape), np.dtype(dtype), bool(src.const))
    i32 = np.dtype(np.int32)
    ints = em.elementwise(name + "_int", src.shape, i32, [src], f"({literal(1, i32)} if a0 else {literal(0, i32)})")
    top = reduce(em, name + "_max", ints, dims, keep, "max", i32)
    return em.elementwise(name, shape, dtype, [top], f"a0 != {literal(0, i32)}")


def _no_op(em, name, meta, args, kwargs):
    return None


INDEXING_EMITTERS: Dict[str, Callable] = {
    "aten.embedding.default": _embedding, "aten.gather.default": _gather, "aten.scatter.value": _scatter_value,
    "aten.arange.start_step": _arange, "aten.arange.start": _arange, "aten.arange.default": _arange,
    "aten.index.Tensor": _index, "aten.index_put.default": _index_put, "aten._unsafe_index_put.default": _index_put,
    "aten.slice_scatter.default": _slice_scatter, "aten.select_scatter.default": _select_scatter,
    "aten.constant_pad_nd.default": _pad, "aten.clamp.default": _clamp, "aten.any.dim": _any, "aten.any.dims": _any, "aten.any.default": _any,
    "aten._assert_tensor_metadata.default": _no_op,
}
