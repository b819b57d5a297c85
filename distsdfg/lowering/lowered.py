"""The lowered program's record: what ``lower`` decided (``Lowered``: steps, kernel grids, homes),
the runtime arguments it adds, and where an array's value lives between kernels during the
rewrite (``Holding``, ``ArrayState``; ``same_blocks``: whether a kernel can read a holder's
buffer as is)."""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

import numpy as np
import sympy
from dace.sdfg import SDFGState, nodes

from .. import dace_compat as dc
from ..analysis.constraints import ArrayConstraint, KernelPlan
from ..values.exprs import same_value, split_axis_pairs
from ..values.plan import Layout, StepSpec
from ..values.schedule import Schedule

__all__ = ["Lowered", "KernelGrid", "Holding", "ArrayState", "same_blocks", "PLAN_ARRAY", "PLAN_LEN", "COMM_ARG",
           "RUNTIME_ARGS"]

PLAN_ARRAY = "__dsdfg_plan"
PLAN_LEN = "__dsdfg_plan_len"
#: The caller's communicator as a Fortran handle (mpi4py's ``comm.py2f()``): a scalar argument
#: that every communication step reads, so that all of them talk on the communicator the program
#: was compiled for (``distsdfg.compile(sdfg, comm=...)``).
COMM_ARG = "__dsdfg_comm"
#: Arguments the runtime passes on every call, never the user.
RUNTIME_ARGS = frozenset({PLAN_ARRAY, COMM_ARG})


@dataclasses.dataclass
class KernelGrid:
    """What the runtime needs of one kernel: its grid and the symbols of its rank coordinates."""
    index: int
    label: str
    keys: Tuple[str, ...]
    grid: Tuple[int, ...]
    rank_syms: Tuple[str, ...]
    # 1 on the ranks of the grid, 0 on the others, which then run none of the map's iterations
    # (a map that reads through an index array would follow garbage indices there); '' when unused.
    member: str = ""
    source: str = ""        # the user's line that made the kernel (``dace_compat.source``); '' if unknown


@dataclasses.dataclass
class Lowered:
    """Everything ``lower`` decided, kept on the SDFG for ``compile`` and ``comm_report``."""
    schedule: Schedule
    original_name: str
    steps: List[StepSpec]
    kernels: List[KernelGrid]
    even_checks: List[Tuple[str, int, str, int]]   # (map key, axis, extent expr, parts)
    target: str = "cpu"
    homes: List = dataclasses.field(default_factory=list)   # HomeSpec per array kept across states
    # Distributed placement: argument -> the home (HomeSpec.name) whose owned blocks every
    # rank passes and receives; the other arguments are whole on rank 0.
    boundary: Dict[str, str] = dataclasses.field(default_factory=dict)
    source: str = ""        # the SDFG before lowering (JSON), to lower again for another placement
    # Where communication steps find their local buffers: "host" (the CPU target, or GPU buffers
    # with MPI on pinned host temporaries), "device" (GPU buffers to a CUDA-aware MPI), "emulated"
    # and "emulated-staged" (those two device code paths over host memory, for tests).
    comm: str = "host"
    # Lowered for one rank with whole arrays aliased (distsdfg.lowering.optimize.alias_whole_blocks): the
    # program runs on rank 0 alone over a one-rank communicator; other ranks return None.
    rank0_only: bool = False
    # Reads bounded by an input array's values, inspected at every call (distsdfg.solver.inspector.DataBounds).
    data_bounds: List = dataclasses.field(default_factory=list)
    # Distributed placement: one-element arguments every rank passes with the same value (not
    # broadcast from rank 0 on entry; a rank must not leave them out).
    replicas: Tuple[str, ...] = ()
    # dace_compat.structure_fingerprint of the SDFG when DaCe validated it (validate_lowered):
    # code generation validates again only if the SDFG changed since; '' when not validated.
    validated: str = ""
    # target="gpu": the program's arrays (arguments and results at rank 0) that this variant takes
    # in device memory, as the caller's CuPy arrays (distsdfg.lowering.device_args); () for host arrays.
    device_args: Tuple[str, ...] = ()
    # Complex scalar arguments the lowering made one-element arrays (dace_compat.scalars); the call
    # passes the caller's number as one.
    boxed: Tuple[str, ...] = ()

    @property
    def nprocs(self) -> int:
        return max([int(np.prod(k.grid)) for k in self.kernels] + [1])

    def kernel_source(self, step: StepSpec) -> str:
        """The user's source line of the kernel ``step`` serves (by index, else by label); '' if unknown."""
        for k in self.kernels:
            if k.index == step.kernel or (step.kernel < 0 and k.label == step.kernel_label):
                return k.source
        return ""


@dataclasses.dataclass
class Holding:
    """A distributed copy of an array's current value: a kernel's local buffer and its layout."""
    layout: Layout
    kind: str                       # kernel kind of the buffer: "map" (offset indices) or "library"
    grid: Tuple[int, ...]
    rank_syms: Tuple
    alloc_start: Tuple
    alloc_shape: Tuple
    boxes: Tuple
    state: SDFGState
    node: nodes.AccessNode
    const: Optional[float] = None   # the producer wrote this number everywhere
    whole: int = 0                  # a home buffer: ranks 0..whole-1 hold every element (ghost cells fetched)

    @property
    def partial(self) -> bool:
        return self.layout.op is not None


@dataclasses.dataclass
class ArrayState:
    """Where an array's current value lives between kernels."""
    holdings: List[Holding] = dataclasses.field(default_factory=list)
    root_valid: bool = True
    all_valid: bool = False          # every rank's own copy of the array holds the value


def same_blocks(h: Holding, kp: KernelPlan, c: ArrayConstraint) -> bool:
    """Whether kernel ``kp`` reads (constraint ``c``) exactly the block that holder ``h``'s buffer
    holds, indexed alike: the same split axes in order, equal allocation and equal read bounds."""
    # Grids equal up to axes of size one number ranks alike: match their split axes in order.
    pairs = split_axis_pairs(kp.grid, kp.rank_syms, h.grid, h.rank_syms)
    if pairs is None:
        return False
    sub = dict(pairs)
    neutral = [dc.sym(f"__dsdfg_axis{i}") for i in range(len(pairs))]
    mine_n = {s: n for (s, _), n in zip(pairs, neutral)}
    theirs_n = {t: n for (_, t), n in zip(pairs, neutral)}

    def same(a, b):
        # Both sides with neutral rank symbols, unevaluated: renaming rebuilds every Min, whose
        # evaluation costs ~0.1 s; equal bounds come out identical, others are compared in full.
        with sympy.evaluate(False):
            if sympy.sympify(a).xreplace(mine_n) == sympy.sympify(b).xreplace(theirs_n):
                return True
        return same_value(sympy.sympify(a).xreplace(sub), b)

    pairs = list(zip(c.alloc_start, h.alloc_start)) + list(zip(c.alloc_shape, h.alloc_shape))
    for (s0, e0), (s1, e1) in zip(c.reads[0], h.boxes[0]):
        pairs += [(s0, s1), (e0, e1)]
    return all(same(a, b) for a, b in pairs)
