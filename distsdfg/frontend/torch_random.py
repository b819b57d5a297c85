"""Random numbers in training steps (dropout) from a counter-based generator: seeded, reproducible, and the
same on every rank that computes an element.

Each element of a random tensor is a hash of four numbers: the step's seed (the program argument
``rng_seed``, drawn from PyTorch's generator when the step is traced, so ``torch.manual_seed`` fixes it),
the step counter (``optim_step`` before the step's increment, so every step draws anew), the draw (the
n-th random operator of the program) and the element's position in the whole tensor (row-major). There is
no generator state: a kernel split over ranks computes each element from its global position, so a
data-parallel step draws the mask one process would, and every rank that holds a replicated tensor holds
the same one. The hash is two rounds of MurmurHash3's 32-bit finaliser (``fmix32``), whose top 24 bits
make a float in [0, 1); ``uniform`` computes the same numbers in NumPy.

Example: ``nn.Dropout(0.25)`` in a training step is traced as ``bernoulli(p=0.75)`` of the activation's
shape, scaled by ``1 / 0.75``: element ``(b, j)`` of a ``(4, 64)`` activation is kept where
``uniform(seed, step, draw, 4 * 64)[64 * b + j] < 0.75``, on one rank or split over four.
"""
from __future__ import annotations

from typing import List, Sequence

import numpy as np

from .torch_emit import UnsupportedOpError, broadcast_index, literal

__all__ = ["uniform", "RANDOM_EMITTERS"]

# MurmurHash3's fmix32 multipliers; the golden-ratio constants spread the seed, step, draw and position.
_M1, _M2 = 2246822507, 3266489909
_SEED, _STEP, _DRAW, _POS = 2654435761, 2246822519, 3266489917, 2654435769
_UNIT = 2.0 ** -24


def _fmix_lines(var: str) -> List[str]:
    u = lambda c: f"dace.uint32({c})"  # noqa: E731
    return [f"{var} = {var} ^ ({var} >> {u(16)})", f"{var} = {var} * {u(_M1)}",
            f"{var} = {var} ^ ({var} >> {u(13)})", f"{var} = {var} * {u(_M2)}",
            f"{var} = {var} ^ ({var} >> {u(16)})"]


def _uniform_code(seed: str, step: str, draw: int, position: str, out: str) -> str:
    """Tasklet lines that set ``out`` (float32) to the uniform number of ``position`` (see the module)."""
    u = lambda c: f"dace.uint32({c})"  # noqa: E731
    lines = [f"_h = dace.uint32({seed}) * {u(_SEED)} + dace.uint32({step}) * {u(_STEP)} + {u(draw)} * {u(_DRAW)}"]
    lines += _fmix_lines("_h")
    lines += [f"_h = _h ^ (dace.uint32({position}) * {u(_POS)})"]
    lines += _fmix_lines("_h")
    lines += [f"{out} = dace.float32(_h >> {u(8)}) * dace.float32({_UNIT!r})"]
    return "\n".join(lines)


def uniform(seed: int, step: int, draw: int, n: int) -> np.ndarray:
    """The ``n`` float32 numbers in [0, 1) that draw ``draw`` of a step makes at positions ``0 .. n - 1``."""
    u = np.uint32

    def fmix(h):
        h ^= h >> u(16)
        h *= u(_M1)
        h ^= h >> u(13)
        h *= u(_M2)
        h ^= h >> u(16)
        return h
    with np.errstate(over="ignore"):
        key = np.array([u(seed % 2 ** 32) * u(_SEED) + u(step % 2 ** 32) * u(_STEP) + u(draw) * u(_DRAW)], u)
        h = np.full(n, fmix(key)[0], u) ^ (np.arange(n, dtype=u) * u(_POS))
        h = fmix(h)
    return (h >> u(8)).astype(np.float32) * np.float32(_UNIT)


def _position(shape: Sequence[int]) -> str:
    """The row-major position of map point ``i0, i1, ...`` in a tensor of ``shape``."""
    strides = np.cumprod((1,) + tuple(shape[:0:-1]))[::-1]
    return " + ".join(f"i{d} * {int(s)}" if s != 1 else f"i{d}" for d, s in enumerate(strides)) or "0"


def _bernoulli(em, name, meta, args, kwargs):
    """``bernoulli(x, p)``: ones with probability ``p`` (dropout's keep mask), from the step's generator."""
    shape, dtype = meta[0]
    p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    rng = getattr(em, "random", None)
    if rng is None:
        raise UnsupportedOpError("random numbers outside a training step (e.g. nn.Dropout in training mode in a "
                                 "forward): call module.eval(), or trace the training step with "
                                 "from_torch_train_step, whose dropout draws from a seeded generator")
    if not isinstance(p, (int, float)):
        raise UnsupportedOpError("bernoulli with a tensor of probabilities: only one probability (dropout's) is "
                                 "supported")
    seed, step = rng
    draw = em.draws = getattr(em, "draws", 0) + 1
    out = em.empty(name, shape, dtype)
    code = _uniform_code("_seed", "_step", draw, _position(shape or (1,)), "_u")
    code += f"\n_o = ({literal(1, dtype)} if _u < dace.float32({float(p)!r}) else {literal(0, dtype)})"
    em.kernel(out.name[2:], shape, [("_seed", seed, "0"), ("_step", step, "0")],
              [("_o", out.name, broadcast_index(shape, shape))], code)
    return out


RANDOM_EMITTERS = {"aten.bernoulli.p": _bernoulli}
