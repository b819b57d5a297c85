"""The PyTorch frontend's code-writing core: values, the emitter, and the helpers operators share.

``Val`` is a tensor of the generated ``@dace.program`` (a name, a shape, a dtype; a constant or a
reshape view); ``Emitter`` writes the program's lines (fresh names, element-wise maps, copies).
The operator table (``torch_ops.EMITTERS``) and the indexing operators (``torch_indexing``) are
built on these; neither imports the other's emitters.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import DistributedLoweringError

__all__ = ["UnsupportedOpError", "Val", "Emitter", "dace_type", "literal", "broadcast_index", "norm_dims", "map_params",
           "replace_token", "reshape_line", "matmul_line", "plane_read", "reduce"]


class UnsupportedOpError(DistributedLoweringError):
    """The PyTorch frontend has no translation for an ATen operator (or for this use of it)."""


_DACE_TYPES = {np.dtype(np.float32): "dace.float32", np.dtype(np.float64): "dace.float64",
               np.dtype(np.float16): "dace.float16", np.dtype(np.int64): "dace.int64",
               np.dtype(np.int32): "dace.int32", np.dtype(np.int16): "dace.int16",
               np.dtype(np.int8): "dace.int8", np.dtype(np.uint8): "dace.uint8",
               np.dtype(np.bool_): "dace.bool_"}


def dace_type(dtype) -> str:
    dt = np.dtype(dtype)
    if dt not in _DACE_TYPES:
        raise UnsupportedOpError(f"element type {dt} has no DaCe equivalent here (supported: "
                                 f"{', '.join(str(d) for d in _DACE_TYPES)})")
    return _DACE_TYPES[dt]


@dataclasses.dataclass(frozen=True)
class Val:
    """A tensor of the generated program: an array variable, or a constant broadcast to ``shape``.

    ``shape`` is PyTorch's (``()`` for 0-d tensors, stored as one element); ``view`` marks a
    ``np.reshape`` of another array (returned values are copied out of views)."""
    name: Optional[str]
    shape: Tuple[int, ...]
    dtype: np.dtype
    const: object = None
    view: bool = False

    @property
    def is_const(self) -> bool:
        return self.name is None

    @property
    def storage(self) -> Tuple[int, ...]:
        return tuple(self.shape) if self.shape else (1,)


def literal(value, dtype) -> str:
    """A constant in tasklet code, typed like PyTorch types it."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return "True" if bool(value) else "False"
    if dt.kind in "iu":
        return f"{dace_type(dt)}({int(value)})"
    v = float(value)
    if math.isnan(v):
        raise UnsupportedOpError(f"constant {v} in an element-wise expression is not supported")
    if math.isinf(v):               # DaCe writes the name `inf` as C's INFINITY
        return f"{dace_type(dt)}({'-' if v < 0 else ''}inf)"
    return f"{dace_type(dt)}({v!r})"


class Emitter:
    """Collects the body of the generated program and the kernel names of its maps."""

    def __init__(self):
        self.lines: List[str] = []
        # Training steps: ``x @ W.T`` as ``(W @ x.T).T`` (torch_ops._transposed_weight), and
        # one-element element-wise operations as plain tasklets (``elementwise``)
        self.training = False
        # Training steps: arguments no gradient flows to (the inputs, the targets, buffers)
        self.gradless: set = set()
        self.map_names: Dict[int, str] = {}       # body line of a `for ... in dace.map` -> kernel name
        self._taken: set = set()
        # array written by a permute kernel -> (its source, the permutation): a permute of it reads the
        # source directly (two transposes cancel). Sources are not written again while the traced graph
        # is emitted (temporaries are written by their own operator only; parameters and optimizer
        # state only by the update kernels emitted after the whole graph).
        self.permutes: Dict[str, Tuple["Val", Tuple[int, ...]]] = {}

    # -- names -------------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in base).strip("_") or "t"
        if base[0].isdigit():
            base = "t" + base
        name, k = f"v_{base}", 1
        while name in self._taken:
            name, k = f"v_{base}_{k}", k + 1
        self._taken.add(name)
        return name

    def reserve(self, name: str) -> None:
        """Keep a program argument's name out of the temporaries' names."""
        self._taken.add(name)

    def line(self, text: str) -> None:
        self.lines.append("    " + text)

    # -- arrays ------------------------------------------------------------------------------
    def empty(self, base: str, shape: Sequence[int], dtype) -> Val:
        name = self.fresh(base)
        v = Val(name, tuple(int(s) for s in shape), np.dtype(dtype))
        self.line(f"{name} = np.empty({v.storage!r}, dtype={dace_type(dtype)})")
        return v

    def materialize(self, v: Val, base: str) -> Val:
        """An array holding ``v`` (constants filled in, views copied)."""
        if not v.is_const and not v.view:
            return v
        return self.elementwise(base, v.shape, v.dtype, [v], "a0")

    # -- kernels -----------------------------------------------------------------------------
    def kernel(self, name: str, shape: Sequence[int], reads: List[Tuple[str, str, str]],
               writes: List[Tuple[str, str, str]], code: str) -> None:
        """One ``dace.map`` over ``shape`` (params ``i0, i1, ...``) with one tasklet.

        ``reads``/``writes`` are ``(connector, array, subset)`` with subsets in the params."""
        shape = tuple(shape) if shape else (1,)
        params = map_params(len(shape))
        ranges = ", ".join(f"0:{s}" for s in shape)
        self.map_names[len(self.lines)] = name
        self.line(f"for {', '.join(params)} in dace.map[{ranges}]:")
        self.line("    with dace.tasklet:")
        for conn, arr, sub in reads:
            self.line(f"        {conn} << {arr}[{sub}]")
        for conn, arr, sub in writes:
            self.line(f"        {conn} >> {arr}[{sub}]")
        for ln in code.splitlines():
            self.line(f"        {ln.strip()}")

    def elementwise(self, base: str, shape, dtype, ins: Sequence[Val], expr: str,
                    out: Optional[Val] = None) -> Val:
        """``out = expr(a0, a1, ...)`` element by element, inputs broadcast PyTorch's way."""
        shape = tuple(int(s) for s in shape)
        if out is None:
            out = self.empty(base, shape, dtype)
        reads = []
        like = next((v.dtype for v in ins if isinstance(v, Val)), np.dtype(dtype))
        ins = [v if isinstance(v, Val) else Val(None, (), like, v) for v in ins]
        expr = re.sub(r"\ba(\d+)\b", r"_a\1", expr)     # connectors start with "_": never an array name
        for k, v in enumerate(ins):
            token = f"_a{k}"
            if v.is_const:
                expr = replace_token(expr, token, literal(v.const, v.dtype))
            else:
                reads.append((token, v.name, broadcast_index(v.shape, shape)))
        if self.training and math.prod(shape) == 1 and all(math.prod(v.shape) == 1 for v in ins):
            # One element from one-element inputs (the loss's scalars): a plain tasklet, which the
            # lowering runs on every rank, so a value every rank holds stays there (no map on rank 0).
            self.line("with dace.tasklet:")
            for conn, arr, _ in reads:
                self.line(f"    {conn} << {arr}[{', '.join('0' for _ in self._dims(arr, ins))}]")
            self.line(f"    _o >> {out.name}[{', '.join('0' for _ in out.storage)}]")
            self.line(f"    _o = {expr}")
            return out
        # the kernel is named after its output (``v_<name>``), or after ``base`` when it writes an argument
        label = out.name[2:] if out.name.startswith("v_") else self.fresh(base)[2:]
        self.kernel(label, shape, reads, [("_o", out.name, broadcast_index(shape, shape))], f"_o = {expr}")
        return out

    @staticmethod
    def _dims(arr: str, ins: Sequence[Val]) -> Tuple[int, ...]:
        return next(v.storage for v in ins if v.name == arr)


def map_params(n: int, start: int = 0) -> List[str]:
    """The parameter names ``Emitter.kernel`` gives a map's dimensions ``start .. start + n - 1``."""
    return [f"i{d}" for d in range(start, start + n)]


def replace_token(expr: str, token: str, text: str) -> str:
    return re.sub(rf"\b{token}\b", text, expr)


def broadcast_index(shape: Sequence[int], out_shape: Sequence[int]) -> str:
    """The subset of an operand of ``shape`` read at map point ``i0, i1, ...`` of ``out_shape``."""
    if not shape:
        return "0"
    off = len(out_shape) - len(shape)
    return ", ".join("0" if (s == 1 and out_shape[off + d] != 1) else f"i{off + d}" for d, s in enumerate(shape))


def norm_dims(dims, ndim: int) -> Tuple[int, ...]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    return tuple(sorted(d % ndim if ndim else 0 for d in dims))


def plane_read(conn: str, arr: str, dims):
    """A read of ``arr`` with, per dim, a fixed index (a string) or an extent read whole (an int):
    ``((conn, arr, subset), at)`` where ``at(indexes)`` is the tasklet's access with one index per whole
    dim. DaCe drops the dims of extent one from the connector, so ``at`` leaves their index out."""
    subset = ", ".join(d if isinstance(d, str) else (f"0:{d}" if d > 1 else "0") for d in dims)
    extents = [d for d in dims if not isinstance(d, str)]

    def at(idx) -> str:
        kept = [str(i) for i, n in zip(idx, extents) if n > 1]
        return f"{conn}[{', '.join(kept)}]" if kept else conn
    return (conn, arr, subset), at


def reshape_line(em, name, src: Val, shape) -> Val:
    """A ``np.reshape`` view of the array ``src`` (``src`` itself when the shape is its own)."""
    if tuple(shape) == tuple(src.shape):
        return src
    out = em.fresh(name)
    em.line(f"{out} = np.reshape({src.name}, {Val(out, tuple(shape), src.dtype).storage!r})")
    return Val(out, tuple(shape), src.dtype, view=True)


def matmul_line(em, name, a: Val, b: Val, shape) -> Val:
    """``a @ b`` (a MatMul library node); a product of matrices over a contraction of length one is their
    outer product, an element-wise map (DaCe 1.0.2's MatMul takes ``(m, 1) @ (1, n)`` for a dot product
    and refuses it: a one-channel convolution's input gradient)."""
    if len(a.shape) == 2 and len(b.shape) == 2 and a.shape[1] == 1 and a.shape[0] > 1 and b.shape[1] > 1:
        return em.elementwise(name, shape, a.dtype, [a, b], "a0 * a1")
    a = em.materialize(a, name + "_a")
    b = em.materialize(b, name + "_b")
    out = em.fresh(name)
    em.line(f"{out} = {a.name} @ {b.name}")
    return Val(out, tuple(shape), a.dtype)


def reduce(em, name, src: Val, dims: Tuple[int, ...], keepdim: bool, fn: str, dtype) -> Val:
    """``np.<fn>`` over ``dims``; keeps PyTorch's output shape (a reshape view for keepdim)."""
    nd = len(src.shape)
    src = em.materialize(src, name + "_in")
    if np.dtype(dtype) != src.dtype:
        src = em.elementwise(name + "_cast", src.shape, dtype, [src], "a0")
    kept = tuple(s for d, s in enumerate(src.shape) if d not in dims)
    if not dims or nd == 0:
        return src
    # Kept dimensions of size 1 are dropped first (a view): the lowering splits a Reduce over
    # (H, S, S) but not over (1, H, S, S).
    keep = [d for d in range(nd) if d in dims or src.shape[d] != 1]
    arr, axes = src.name, tuple(dims)
    if len(keep) < nd:
        arr = em.fresh(name + "_squeezed")
        em.line(f"{arr} = np.reshape({src.name}, {tuple(src.shape[d] for d in keep)!r})")
        axes = tuple(keep.index(d) for d in dims)
    out = em.fresh(name)
    if len(axes) == len(keep):
        em.line(f"{out} = np.{fn}({arr})")
    else:
        em.line(f"{out} = np.{fn}({arr}, axis={axes!r})")
    shape = tuple(1 if d in dims else s for d, s in enumerate(src.shape)) if keepdim else kept
    if len(keep) == nd and not keepdim:
        return Val(out, kept, np.dtype(dtype))
    view = em.fresh(name + "_keep")
    em.line(f"{view} = np.reshape({out}, {Val(view, shape, np.dtype(dtype)).storage!r})")
    return Val(view, shape, np.dtype(dtype), view=True)
