"""Attention test programs with NumPy references, inputs and hand schedules, registered in
``programs.PROGRAMS``: a Megatron-style block (attention, output projection over heads, the first
MLP layer), the thesis' multi-head self-attention (seed 004, 8.1.4) and its fused-QKV form."""
import dace
import numpy as np

from .program import Program

__all__ = ["ATTENTION", "MEGATRON_SCHEDULE", "megatron_program", "MHSA_SIZES", "MHSA_FUSED_SIZES",
           "MHSA_THESIS_SCHEDULE", "MHSA_FUSED_SCHEDULE", "mhsa_thesis", "mhsa_fused"]


MB, MS, ME, MH, MEH, MF = 2, 16, 32, 4, 8, 24


def megatron_program(B, S, E, H, EH, F):
    """Multi-head self-attention (keys projected transposed), output projection over heads, then
    the first (column-parallel) layer of the MLP that follows in a transformer block; sizes are
    numbers or DaCe symbols (the benchmarks use symbols)."""

    @dace.program
    def megatron(x: dace.float32[B, S, E], WQ: dace.float32[E, H, EH], WK: dace.float32[E, H, EH],
                 WV: dace.float32[E, H, EH], WO: dace.float32[H, EH, E], W1: dace.float32[E, F]):
        Q = np.einsum('bik,khj->bhij', x, WQ)
        KT = np.einsum('bik,khj->bhji', x, WK)
        V = np.einsum('bik,khj->bhij', x, WV)
        scores = np.einsum('bhik,bhkj->bhij', Q, KT) / 4.0
        rowmax = np.maximum.reduce(scores, axis=-1, keepdims=True)
        ex = np.exp(scores - rowmax)
        rowsum = np.add.reduce(ex, axis=-1, keepdims=True)
        P = ex / rowsum
        vals = np.einsum('bhik,bhkj->bhij', P, V)
        out = np.einsum('bhse,hej->bsj', vals, WO)
        return np.einsum('bsj,jf->bsf', out, W1)

    return megatron


megatron = megatron_program(MB, MS, ME, MH, MEH, MF)


def _megatron_ref(x, WQ, WK, WV, WO, W1):
    Q = np.einsum('bik,khj->bhij', x, WQ)
    KT = np.einsum('bik,khj->bhji', x, WK)
    V = np.einsum('bik,khj->bhij', x, WV)
    scores = np.einsum('bhik,bhkj->bhij', Q, KT) / np.float32(4.0)
    P = _softmax_ref(scores)
    vals = np.einsum('bhik,bhkj->bhij', P, V)
    return np.einsum('bsj,jf->bsf', np.einsum('bhse,hej->bsj', vals, WO), W1)


def _megatron_inputs(r):
    f = lambda *shape: (r.random(shape) - 0.5).astype(np.float32)  # noqa: E731
    return {"x": f(MB, MS, ME), "WQ": f(ME, MH, MEH), "WK": f(ME, MH, MEH), "WV": f(ME, MH, MEH),
            "WO": f(MH, MEH, ME), "W1": f(ME, MF)}


#: Megatron-style head parallelism on 4 ranks: batch x head-pairs for the attention, partial
#: sums over heads in the output projection, then rows (batch) x columns for the MLP layer.
MEGATRON_SCHEDULE = {
    "einsum_map": (2, 1, 1, 2, 1), "einsum_map_2": (2, 1, 1, 2, 1), "einsum_map_3": (2, 1, 1, 2, 1),
    "einsum_reset_map": (2, 2, 1, 1), "einsum_reset_map_2": (2, 2, 1, 1), "einsum_reset_map_3": (2, 2, 1, 1),
    "einsum_gemm._BatchedBatchedMatMult__map": (4, 1, 1, 1),
    "einsum_gemm_2._BatchedBatchedMatMult__map": (4, 1, 1, 1),
    "_Div__map": (2, 2, 1, 1), "_Sub__map": (2, 2, 1, 1), "_numpy_exp__map": (2, 2, 1, 1), "_Div__map_2": (2, 2, 1, 1),
    "Reduce.reduce_output": (2, 2, 1, 1), "Reduce_2.reduce_output": (2, 2, 1, 1),
    "einsum_reset_map_4": (2, 1, 1), "einsum_map_4": (2, 2, 1, 1, 1), "einsum_gemm_3.gemm_map": (2, 2, 1),
}


# Sizes are symbols, as in the thesis (B, S, E, H, E_H there; names that are no sympy constants here).
BATCH, SEQ, EMB, HEADS, HDIM = (dace.symbol(s) for s in ("BATCH", "SEQ", "EMB", "HEADS", "HDIM"))
SQRT_H = 2.0                                     # sqrt(HDIM) at the test sizes
MHSA_SIZES = (("BATCH", 2), ("SEQ", 8), ("EMB", 16), ("HEADS", 4), ("HDIM", 4))
#: The fused form with 2 heads per rank on 4 ranks: a rank's q and k columns are no block of the
#: product's (B, S, 3E) result, only of its (B, S, H, 3 E_H) view (``solve._refined_layouts``).
MHSA_FUSED_SIZES = (("BATCH", 2), ("SEQ", 8), ("EMB", 16), ("HEADS", 8), ("HDIM", 2))


@dace.program
def mhsa_projection(x: dace.float64[BATCH, SEQ, EMB], W_Q: dace.float64[EMB, HEADS, HDIM],
                    W_K: dace.float64[EMB, HEADS, HDIM], W_V: dace.float64[EMB, HEADS, HDIM]):
    Q = np.einsum('bik,khj->bhij', x, W_Q)
    K = np.einsum('bik,khj->bhij', x, W_K)
    V = np.einsum('bik,khj->bhij', x, W_V)
    return Q, K, V


@dace.program
def mhsa_scaled_softmax(x: dace.float64[BATCH, HEADS, SEQ, SEQ]):
    scaled_x = x / SQRT_H
    rowmax = np.maximum.reduce(scaled_x, axis=-1, keepdims=True)
    exponent = np.exp(scaled_x - rowmax)
    rowsum = np.add.reduce(exponent, axis=-1, keepdims=True)
    return exponent / rowsum


@dace.program
def mhsa_self_attn(Q: dace.float64[BATCH, HEADS, SEQ, HDIM], K: dace.float64[BATCH, HEADS, SEQ, HDIM],
                   V: dace.float64[BATCH, HEADS, SEQ, HDIM]):
    scores = np.einsum('bhik,bhjk->bhij', Q, K)
    norm_scores = mhsa_scaled_softmax(scores)
    return np.einsum("bhik,bhkj->bhij", norm_scores, V)


@dace.program
def mhsa_thesis(x: dace.float64[BATCH, SEQ, EMB], W_Q: dace.float64[EMB, HEADS, HDIM],
                W_K: dace.float64[EMB, HEADS, HDIM], W_V: dace.float64[EMB, HEADS, HDIM],
                W_O: dace.float64[EMB, EMB]):
    """The thesis' ``mhsa`` as printed (its ``W_O`` of shape ``[E, H, E_H]`` cannot be the ``kj``
    operand of its own einsum: ``[E, E]`` here)."""
    Q, K, V = mhsa_projection(x, W_Q, W_K, W_V)
    values = mhsa_self_attn(Q, K, V)
    # unpermute
    values_permute = np.einsum('bhse->bshe', values)
    values_reshaped = values_permute.reshape([BATCH, SEQ, EMB])
    return np.einsum('bik,kj->bij', values_reshaped, W_O)


@dace.program
def mhsa_fused(x: dace.float64[BATCH, SEQ, EMB], W_QKV: dace.float64[EMB, 3 * EMB], W_O: dace.float64[EMB, EMB]):
    """Self-attention with one fused QKV projection (the form the thesis says it cannot partition):
    the columns of ``W_QKV`` are per head its q, k and v columns (Megatron-LM's layout), split
    into heads by a reshape and into Q, K, V by slicing."""
    qkv = np.reshape(np.einsum('bik,kj->bij', x, W_QKV), (BATCH, SEQ, HEADS, 3 * HDIM))
    Q = qkv[:, :, :, 0:HDIM]
    K = qkv[:, :, :, HDIM:2 * HDIM]
    V = qkv[:, :, :, 2 * HDIM:3 * HDIM]
    scores = np.einsum('bihk,bjhk->bhij', Q, K) / SQRT_H
    rowmax = np.maximum.reduce(scores, axis=-1, keepdims=True)
    ex = np.exp(scores - rowmax)
    P = ex / np.add.reduce(ex, axis=-1, keepdims=True)
    values = np.einsum('bhij,bjhk->bihk', P, V)
    return np.einsum('bik,kj->bij', np.reshape(values, (BATCH, SEQ, EMB)), W_O)


def _softmax_ref(inp):
    e = np.exp(inp - inp.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _mhsa_heads(Q, K, V):
    s = np.einsum('bhik,bhjk->bhij', Q, K) / SQRT_H
    return np.einsum('bhik,bhkj->bhij', _softmax_ref(s), V)


def _mhsa_thesis_ref(x, W_Q, W_K, W_V, W_O):
    Q, K, V = (np.einsum('bik,khj->bhij', x, W) for W in (W_Q, W_K, W_V))
    return np.einsum('bhse->bshe', _mhsa_heads(Q, K, V)).reshape(x.shape) @ W_O


def _mhsa_fused_ref(x, W_QKV, W_O):
    b, s, e = x.shape
    qkv = (x @ W_QKV).reshape(b, s, dict(MHSA_FUSED_SIZES)["HEADS"], -1).transpose(0, 2, 1, 3)
    Q, K, V = np.split(qkv, 3, axis=-1)
    return np.einsum('bhse->bshe', _mhsa_heads(Q, K, V)).reshape(x.shape) @ W_O


def _mhsa_inputs(r, fused=False):
    b, s, e, h, d = (v for _, v in (MHSA_FUSED_SIZES if fused else MHSA_SIZES))
    f = lambda *shape: r.random(shape) - 0.5  # noqa: E731
    if fused:
        return {"x": f(b, s, e), "W_QKV": f(e, 3 * e), "W_O": f(e, e)}
    return {"x": f(b, s, e), "W_Q": f(e, h, d), "W_K": f(e, h, d), "W_V": f(e, h, d), "W_O": f(e, e)}


#: The thesis' MHSA on 4 ranks, head-parallel inside each half of the batch (the batched products
#: merge batch and head, so heads alone cannot be split while BATCH > 1): every attention kernel
#: on (batch halves) x (head pairs), the output projection's rows by batch half and its reduction
#: dimension E = H * E_H by head pair: partial sums combined once, at the end.
MHSA_THESIS_SCHEDULE = {
    "einsum_map_2": (2, 1, 1, 2, 1), "einsum_map_3": (2, 1, 1, 2, 1), "einsum_map_4": (2, 1, 1, 2, 1),
    "einsum_reset_map": (2, 2, 1, 1), "einsum_reset_map_2": (2, 2, 1, 1), "einsum_reset_map_3": (2, 2, 1, 1),
    "permute_K_map": (2, 2, 1, 1),
    "einsum_gemm_2._BatchedBatchedMatMult__map": (4, 1, 1, 1), "einsum_gemm_3._BatchedBatchedMatMult__map": (4, 1, 1, 1),
    "_Div__map": (2, 2, 1, 1), "_Sub__map": (2, 2, 1, 1), "_numpy_exp__map": (2, 2, 1, 1), "_Div__map_2": (2, 2, 1, 1),
    "Reduce.reduce_output": (2, 2, 1, 1), "Reduce_2.reduce_output": (2, 2, 1, 1),
    "einsum_map": (2, 2, 1, 1), "einsum_reset_map_4": (2, 1, 2, 1), "einsum_gemm.gemm_map": (2, 1, 2),
}

#: The fused form on 4 ranks, head-parallel: the QKV product's columns (each rank its heads' q, k,
#: v columns), every attention kernel by head, the output projection's reduction dimension.
MHSA_FUSED_SCHEDULE = {
    "einsum_gemm.gemm_map": (1, 4, 1), "einsum_map": (1, 1, 4, 1, 1), "einsum_reset_map": (1, 4, 1, 1),
    "_Div__map": (1, 4, 1, 1), "_Sub__map": (1, 4, 1, 1), "_numpy_exp__map": (1, 4, 1, 1), "_Div__map_2": (1, 4, 1, 1),
    "Reduce.reduce_output": (1, 4, 1, 1), "Reduce_2.reduce_output": (1, 4, 1, 1),
    "einsum_reset_map_2": (1, 1, 4, 1), "einsum_map_2": (1, 4, 1, 1, 1), "einsum_gemm_2.gemm_map": (1, 1, 4),
}


ATTENTION = [
    Program("megatron", megatron, _megatron_inputs, _megatron_ref),
    Program("mhsa_thesis", mhsa_thesis, _mhsa_inputs, _mhsa_thesis_ref, MHSA_SIZES),
    Program("mhsa_fused", mhsa_fused, lambda r: _mhsa_inputs(r, fused=True), _mhsa_fused_ref, MHSA_FUSED_SIZES),
]
