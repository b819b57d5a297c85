"""The benchmark workloads: a DaCe program per size, its inputs, and a NumPy reference.

Sizes are symbols, so one binary per schedule serves every size. The presets: ``tiny`` (the CI smoke test), ``small`` (development)
and ``documented`` (the table in docs/benchmarks.md).
"""

import dataclasses
from typing import Callable, Dict, Tuple

import dace
import numpy as np

from distsdfg.testing.programs import megatron_program, spmv as spmv_program

__all__ = ["Workload", "WORKLOADS", "PRESETS", "get", "sizes_of"]

PRESETS = ("tiny", "small", "documented")


@dataclasses.dataclass(frozen=True)
class Workload:
    """One benchmark: ``program`` is the @dace.program (sizes are symbols), ``inputs(sizes, rng)`` its arguments
    (NumPy arrays), ``reference(**inputs)`` the expected result, ``symbols(sizes, inputs)`` the
    values of the program's free symbols (for ``comm_report``)."""
    name: str
    program: object
    inputs: Callable[[dict, np.random.Generator], Dict[str, np.ndarray]]
    reference: Callable[..., np.ndarray]
    presets: Dict[str, dict]
    symbols: Callable[[dict, dict], Dict[str, int]]
    #: largest relative error accepted (float32 programs sum in another order than NumPy)
    rtol: float = 1e-9
    describe: Callable[[dict], str] = str
    #: simplify the single-process SDFG (DaCe 1.0.2's simplify turns the one-process SpMV into zeros)
    simplify_single: bool = True


def _rand(rng, *shape, dtype=np.float64):
    return (rng.random(shape) - 0.5).astype(dtype)


# -- matmul -------------------------------------------------------------------------------------------
M, N, K, S, T, H, B = (dace.symbol(x) for x in ("M", "N", "K", "S", "T", "H", "B"))
NB, NI, NH, NO = (dace.symbol(x) for x in ("NB", "NI", "NH", "NO"))


@dace.program
def matmul(A: dace.float64[M, K], B: dace.float64[K, N]):
    return A @ B


def _matmul_inputs(s, rng):
    return {"A": _rand(rng, s["M"], s["K"]), "B": _rand(rng, s["K"], s["N"])}


# -- the EinDecomp paper's chain (A x B) + (C x (D x E)) ------------------------------------------------
@dace.program
def matrix_chain(A: dace.float64[S, T], B: dace.float64[T, S], C: dace.float64[S, T], D: dace.float64[T, H],
                 E: dace.float64[H, S]):
    return (A @ B) + (C @ (D @ E))


def _chain_symbols(s, inputs):
    return {"S": s["S"], "T": s["S"] // 10, "H": s["S"] * 10}


def _chain_inputs(s, rng):
    S, T, H = s["S"], s["S"] // 10, s["S"] * 10
    return {"A": _rand(rng, S, T), "B": _rand(rng, T, S), "C": _rand(rng, S, T), "D": _rand(rng, T, H),
            "E": _rand(rng, H, S)}


# -- softmax over the last axis ------------------------------------------------------------------------
@dace.program
def softmax(inp: dace.float32[B, H, S, S]):
    rowmax = np.maximum.reduce(inp, axis=-1, keepdims=True)
    exp_arr = np.exp(inp - rowmax)
    rowsum = np.add.reduce(exp_arr, axis=-1, keepdims=True)
    return exp_arr / rowsum


def softmax_ref(inp):
    e = np.exp(inp - inp.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# -- two-layer MLP forward -------------------------------------------------------------------------------
@dace.program
def mlp(x: dace.float64[NB, NI], W1: dace.float64[NI, NH], b1: dace.float64[NH], W2: dace.float64[NH, NO],
        b2: dace.float64[NO]):
    h = np.maximum(x @ W1 + b1, 0.0)
    return h @ W2 + b2


def _mlp_inputs(s, rng):
    return {"x": _rand(rng, s["NB"], s["NI"]), "W1": _rand(rng, s["NI"], s["NH"]), "b1": _rand(rng, s["NH"]),
            "W2": _rand(rng, s["NH"], s["NO"]), "b2": _rand(rng, s["NO"])}


def mlp_ref(x, W1, b1, W2, b2):
    return np.maximum(x @ W1 + b1, 0.0) @ W2 + b2


# -- Megatron attention: QKV projections, softmax, values, output projection, first MLP layer ---------
# The test suite's program, with sizes as symbols. Not named B, S, ...: DaCe 1.0.2's MKL batched
# GEMM declares C++ locals `A`, `B` and `C`, which would shadow a size symbol `B`.
MB, MS, ME, MH, MEH, MF = (dace.symbol(x) for x in ("MB", "MS", "ME", "MH", "MEH", "MF"))
megatron = megatron_program(MB, MS, ME, MH, MEH, MF)


def _megatron_inputs(s, rng):
    B, S, E, H, F = s["B"], s["S"], s["E"], s["H"], s["F"]
    f32 = np.float32
    return {"x": _rand(rng, B, S, E, dtype=f32), "WQ": _rand(rng, E, H, E // H, dtype=f32),
            "WK": _rand(rng, E, H, E // H, dtype=f32), "WV": _rand(rng, E, H, E // H, dtype=f32),
            "WO": _rand(rng, H, E // H, E, dtype=f32), "W1": _rand(rng, E, F, dtype=f32)}


def attention_heads(x, WQ, WK, WV, WO):
    """The attention block's output before the MLP layer, over the heads in the weights given
    (a rank's heads in the hand-written version: the result is then a partial sum)."""
    Q = np.einsum('bik,khj->bhij', x, WQ)
    KT = np.einsum('bik,khj->bhji', x, WK)
    V = np.einsum('bik,khj->bhij', x, WV)
    P = softmax_ref(np.einsum('bhik,bhkj->bhij', Q, KT) / np.float32(4.0))
    return np.einsum('bhse,hej->bsj', np.einsum('bhik,bhkj->bhij', P, V), WO)


def megatron_ref(x, WQ, WK, WV, WO, W1):
    return np.einsum('bsj,jf->bsf', attention_heads(x, WQ, WK, WV, WO), W1)


# -- an element-wise chain ---------------------------------------------------------------------------
@dace.program
def elementwise(x: dace.float64[N], y: dace.float64[N]):
    a = x * y + 2.0
    b = np.exp(a * -0.5)
    return b * x - y


def elementwise_ref(x, y):
    return np.exp((x * y + 2.0) * -0.5) * x - y


# -- SpMV (CSR) ------------------------------------------------------------------------------------------
def _csr_inputs(s, rng):
    """A random CSR matrix with ``s['nnz_row']`` entries per row on average, and a vector."""
    m, n = s["M"], s["N"]
    per_row = rng.poisson(s["nnz_row"], m).clip(0, n)
    indptr = np.concatenate([[0], np.cumsum(per_row)]).astype(np.uint32)
    cols = np.concatenate([np.sort(rng.choice(n, k, replace=False)) for k in per_row]) if m else np.zeros(0)
    return {"A_row": indptr, "A_col": cols.astype(np.uint32), "A_val": rng.random(int(indptr[-1])),
            "x": rng.random(n)}


def spmv_ref(A_row, A_col, A_val, x):
    """Row sums of ``A_val * x[A_col]`` (a zero is appended so that every row start is a valid index)."""
    prod = np.append(A_val * x[A_col], 0.0)
    sums = np.add.reduceat(prod, A_row[:-1].astype(np.int64))
    return np.where(np.diff(A_row.astype(np.int64)) > 0, sums, 0.0)


def _spmv_symbols(s, inputs):
    return {"SM": s["M"], "SN": s["N"], "NNZ": int(inputs["A_row"][-1])}


def _named(*names):
    """Symbol values equal to the size entries of the same names."""
    return lambda s, inputs: {k: s[k] for k in names}


WORKLOADS: Dict[str, Workload] = {w.name: w for w in [
    Workload("matmul_square", matmul, _matmul_inputs, lambda A, B: A @ B,
             {"tiny": dict(M=64, N=64, K=64), "small": dict(M=256, N=256, K=256),
              "documented": dict(M=1024, N=1024, K=1024)},
             _named("M", "N", "K"), describe=lambda s: f"{s['M']}x{s['K']} @ {s['K']}x{s['N']}"),
    Workload("matmul_skewed", matmul, _matmul_inputs, lambda A, B: A @ B,
             {"tiny": dict(M=256, N=16, K=32), "small": dict(M=2048, N=64, K=128),
              "documented": dict(M=8192, N=256, K=512)},
             _named("M", "N", "K"), describe=lambda s: f"{s['M']}x{s['K']} @ {s['K']}x{s['N']}"),
    Workload("matrix_chain", matrix_chain, _chain_inputs, lambda A, B, C, D, E: (A @ B) + (C @ (D @ E)),
             {"tiny": dict(S=40), "small": dict(S=200), "documented": dict(S=500)},
             _chain_symbols, describe=lambda s: f"s={s['S']} (A: s x s/10, D: s/10 x 10s, E: 10s x s)"),
    Workload("softmax", softmax, lambda s, r: {"inp": _rand(r, s["B"], s["H"], s["S"], s["S"], dtype=np.float32)},
             softmax_ref, {"tiny": dict(B=2, H=2, S=16), "small": dict(B=4, H=8, S=64),
                           "documented": dict(B=8, H=16, S=128)},
             _named("B", "H", "S"), rtol=1e-5, describe=lambda s: f"{s['B']}x{s['H']}x{s['S']}x{s['S']} float32"),
    Workload("mlp", mlp, _mlp_inputs, mlp_ref,
             {"tiny": dict(NB=16, NI=32, NH=64, NO=16), "small": dict(NB=256, NI=256, NH=512, NO=128),
              "documented": dict(NB=1024, NI=1024, NH=2048, NO=512)},
             _named("NB", "NI", "NH", "NO"), describe=lambda s: f"x {s['NB']}x{s['NI']}, hidden {s['NH']}, out {s['NO']}"),
    Workload("megatron", megatron, _megatron_inputs, megatron_ref,
             {"tiny": dict(B=2, S=8, E=16, H=4, F=16), "small": dict(B=2, S=64, E=128, H=4, F=256),
              "documented": dict(B=4, S=128, E=256, H=8, F=1024)},
             lambda s, inputs: {"MB": s["B"], "MS": s["S"], "ME": s["E"], "MH": s["H"], "MEH": s["E"] // s["H"],
                                "MF": s["F"]},
             rtol=1e-4, describe=lambda s: f"B={s['B']} S={s['S']} E={s['E']} H={s['H']} F={s['F']} float32"),
    Workload("elementwise", elementwise, lambda s, r: {"x": _rand(r, s["N"]), "y": _rand(r, s["N"])},
             elementwise_ref, {"tiny": dict(N=1000), "small": dict(N=200_000), "documented": dict(N=4_000_000)},
             _named("N"), describe=lambda s: f"n={s['N']}"),
    Workload("spmv", spmv_program, _csr_inputs, spmv_ref,
             {"tiny": dict(M=64, N=48, nnz_row=6), "small": dict(M=20_000, N=20_000, nnz_row=16),
              "documented": dict(M=200_000, N=200_000, nnz_row=16)},
             _spmv_symbols, describe=lambda s: f"{s['M']}x{s['N']}, {s['nnz_row']} nnz/row", simplify_single=False),
]}


def get(name: str) -> Workload:
    return WORKLOADS[name]


def sizes_of(w: Workload, preset: str) -> dict:
    if preset not in w.presets:
        raise KeyError(f"unknown size preset {preset!r}: use one of {PRESETS}")
    return dict(w.presets[preset])


def shapes(inputs: Dict[str, np.ndarray]) -> Dict[str, Tuple[Tuple[int, ...], str]]:
    """Shape and dtype of every input: what ranks other than 0 need to allocate their copies."""
    return {k: (tuple(v.shape), v.dtype.str) for k, v in inputs.items()}
