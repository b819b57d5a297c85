"""The step-table encoder: solved steps -> the int64 table the generated code of a rank reads.

The codes are ``distsdfg.values.codes``, from which the runtime's ``distsdfg_codes.h`` is generated;
a table is ``[n, offsets..., step tables...]``, one step table per ``ConcreteStep`` or
``ConcreteRedist``, laid out as ``distsdfg_runtime.h`` reads it (``Step`` and ``Redist``).
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..geometry.boxes import row_major_strides
from ..values.codes import Dtype, Op
from ..values.modes import Collective, StepKind
from ..values.plan import ConcreteStep
from ..solver.solve import ConcreteRedist

__all__ = ["encode_plan", "encode_step", "op_code"]


def op_code(op: Optional[str]) -> Op:
    """The code of a reduction operator (``None``: no reduction)."""
    return Op.NONE if op is None else Op[op.upper()]


def _encode_redist(cs: ConcreteRedist, rank: int) -> List[int]:
    spec, plan, P = cs.spec, cs.plan, cs.nranks
    gshape, sl, dl = cs.global_shape, cs.src_lshapes[rank], cs.dst_lshapes[rank]
    nd = len(gshape)

    scalar = nd == 0
    if scalar:    # scalars travel as one-element vectors
        gshape, sl, dl, nd = (1,), (1,), (1,), 1

    def box(b, n):
        if scalar:
            return [0, 1] if b is not None else [0, 0]
        return list(b[0]) + list(b[1]) if b is not None else [0] * n + [0] * n

    color, key = [-1] * P, [0] * P
    for i, g in enumerate(plan.groups):
        for j, q in enumerate(g):
            color[q], key[q] = i, j
    out = [int(StepKind.REDIST.code), int(Dtype.of(spec.dtype)), int(op_code(plan.op)), nd, P,
           int(Collective(plan.collective).code)]
    out += list(gshape) + list(sl) + list(dl)
    pieces = plan.pieces or (None,) * P
    for q in range(P):
        out += list(cs.src_blocks[q].origin or (0,) * nd) + list(cs.dst_blocks[q].origin or (0,) * nd)
        out += box(plan.src[q], nd) + box(plan.dst[q], nd) + box(pieces[q], nd) + [color[q], key[q]]
    out.append(len(plan.messages))
    for m in plan.messages:
        out += [m.src, m.dst] + box(m.box, nd)
    return out


def _strides(cs: ConcreteStep) -> Tuple[int, ...]:
    """The global array's element strides (row-major unless the lowering recorded others)."""
    return cs.global_strides or row_major_strides(cs.global_shape)


def encode_step(cs, rank: int = 0) -> List[int]:
    if isinstance(cs, ConcreteRedist):
        return _encode_redist(cs, rank)
    spec = cs.spec
    nd = len(cs.global_shape)
    out = [int(StepKind(spec.kind).code), int(Dtype.of(spec.dtype)), int(op_code(spec.op)), nd, cs.nranks,
           int(cs.flags)]
    out += list(cs.global_shape) + list(cs.local_shape) + list(_strides(cs))
    for q, b in enumerate(cs.blocks):
        out += list(b.origin) + list(b.start) + list(b.size)
        out += [cs.pcolor[q], cs.pkey[q], cs.rcolor[q], cs.rkey[q]]
    return out


def encode_plan(steps: Sequence[ConcreteStep], rank: int = 0) -> np.ndarray:
    """The int64 table the generated code of ``rank`` reads: ``[n, offsets..., step tables...]``
    (tables differ between ranks only in the shapes of that rank's local buffers)."""
    tables = [encode_step(s, rank) for s in steps]
    header = 1 + len(tables)
    offsets, pos = [], header
    for t in tables:
        offsets.append(pos)
        pos += len(t)
    flat = [len(tables)] + offsets + [v for t in tables for v in t]
    return np.array(flat if flat else [0], dtype=np.int64)
