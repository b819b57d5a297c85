"""Decompositions the PyTorch frontend adds to ``torch.export.default_decompositions()``.

``xlogy`` (``F.kl_div``) without its NaN test: see ``_xlogy``. ``view`` of a tensor whose strides
allow no view (after a decomposed ``scaled_dot_product_attention``): of a copy, see ``_view``.

PyTorch's CPU ``F.scaled_dot_product_attention`` runs a fused kernel whose backward
(``aten._scaled_dot_product_flash_attention_for_cpu_backward``) has no decomposition of its
own. Here it is written in core operators: the attention probabilities are recomputed from
the queries and keys (with the causal or given mask), then the textbook gradients
``dV = P^T dO``, ``dS = P * (dO V^T - rowsum(dO * O))``, ``dQ = scale * dS K``,
``dK = scale * dS^T Q``. Tracing with this table turns the backward into batched products,
a softmax and element-wise kernels that ``torch_ops`` translates.
"""
from __future__ import annotations

import math

from ..errors import TorchFrontendError

__all__ = ["train_decompositions", "export_decompositions"]

#: Operators kept whole although PyTorch's default table decomposes them: the frontend translates them
#: directly (``roll`` would become ``fmod`` and ``index_select`` of an ``arange``).
KEPT = ("roll",)


def export_decompositions() -> dict:
    """``torch.export.default_decompositions()`` less the operators in ``KEPT``."""
    import torch
    table = dict(torch.export.default_decompositions())
    for name in KEPT:
        for overload in getattr(torch.ops.aten, name).overloads():
            table.pop(getattr(getattr(torch.ops.aten, name), overload), None)
    return _with_own(table)


def _sdpa_cpu_backward(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None,
                       scale=None):
    import torch
    if dropout_p:
        raise TorchFrontendError(
            f"scaled_dot_product_attention with dropout_p={dropout_p} in a training step: random dropout is not "
            f"supported; use dropout 0 (or model.eval())")
    L, S = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    if is_causal:
        rows = torch.arange(L, device=query.device).unsqueeze(1)
        cols = torch.arange(S, device=query.device).unsqueeze(0)
        scores = scores.masked_fill(cols > rows, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            scores = scores + attn_mask
    probs = torch.softmax(scores, dim=-1)
    grad_value = torch.matmul(probs.transpose(-2, -1), grad_out)
    grad_probs = torch.matmul(grad_out, value.transpose(-2, -1))
    delta = (grad_out * out).sum(dim=-1, keepdim=True)
    grad_scores = probs * (grad_probs - delta)
    grad_query = torch.matmul(grad_scores, key) * scale
    grad_key = torch.matmul(grad_scores.transpose(-2, -1), query) * scale
    return grad_query, grad_key, grad_value


def _xlogy(x, y):
    """``x * log(y)``, zero where ``x`` is zero, NaN where ``y`` is (``F.kl_div``, ``nn.KLDivLoss``), as
    PyTorch's ``xlogy``. The program then tests for NaN, so it is built without ``-ffast-math``'s
    finite-math assumption (``dace_compat.build.special_value_flags``)."""
    import torch
    return torch.where(torch.isnan(y), y, torch.where(x == 0, torch.zeros_like(x * y), x * torch.log(y)))


def _view(x, size):
    """``x.view(size)`` of a tensor whose strides need no view (a contiguous one) as PyTorch does it, else
    of a contiguous copy. The frontend computes values, not aliases, so the two are the same program;
    but PyTorch's decomposition of ``F.scaled_dot_product_attention`` leaves its output with other
    strides than the fused kernel's, and a model's ``out.transpose(1, 2).reshape(...).view(-1, E)``
    (GPT-2's attention) would fail there ("Cannot view a tensor with shape ... and strides ...")."""
    import torch
    if x.is_contiguous():
        return NotImplemented       # PyTorch's own view
    return torch.ops.aten.clone.default(x, memory_format=torch.contiguous_format).view(size)


def _with_own(table: dict) -> dict:
    """``table`` with ``_xlogy`` for ``aten.xlogy.Tensor`` (its scalar overloads decompose into it) and
    ``_view`` for ``aten.view.default``."""
    import torch
    table[torch.ops.aten.xlogy.Tensor] = _xlogy
    table[torch.ops.aten.view.default] = _view
    return table


def train_decompositions() -> dict:
    """``torch.export.default_decompositions()`` plus the frontend's own decompositions."""
    import torch
    table = export_decompositions()
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    if op is not None:
        table[op.default] = _sdpa_cpu_backward
    return table
