"""The whole program on rank 0: what DaCe alone builds, with nothing added.

A program lowered for one rank (``lower(sdfg, "auto", nprocs=1)``), or one whose plan gains
nothing from splitting (``lower(sdfg, "auto", nprocs=P)`` when the time model prices every split
schedule above running whole on one rank), needs no tiling, no local buffers and no
communication steps: rank 0 runs the program on the caller's arrays and the other ranks of the
communicator return None (``Lowered.rank0_only``).

``lower_whole`` builds that program with DaCe's own CPU optimisation
(``dace_compat.auto_opt.auto_optimize_cpu``: loops to maps, greedy map fusion, stencil fusion,
tiled write-conflict resolution, transients allocated once), the BLAS distsdfg configured, the
sequential reductions, and the rank-local rewrites that need no tiling
(``optimize.contractions_to_products``, ``optimize.nonatomic_accumulations``). A program that
DaCe's optimisation cannot transform is refused here (``WholeProgramError``) and lowered the
general way instead.
"""
from __future__ import annotations

import copy
from typing import Optional

import dace
from dace.sdfg import SDFG

from .. import dace_compat as dc
from ..errors import DistributedLoweringError
from ..values.schedule import Schedule
from .lowered import COMM_ARG, PLAN_ARRAY, PLAN_LEN, Lowered
from ..dace_compat.semantics import with_numpy_semantics

__all__ = ["lower_whole", "WholeProgramError", "whole_applies", "prefuse_applies", "runs_whole"]


class WholeProgramError(DistributedLoweringError):
    """DaCe's CPU optimisation could not transform the program (the general lowering runs it instead)."""


def whole_applies(*, target: str, comm: str, placed, device_args, optimize: bool) -> bool:
    """Whether a program may run whole on rank 0 with DaCe's optimisation: CPU, root placement,
    host arguments, optimisation on."""
    return target == "cpu" and comm == "host" and not placed and not device_args and optimize


def runs_whole(nprocs: Optional[int], schedule: Schedule) -> bool:
    """Whether a program planned for ``nprocs`` ranks with ``schedule`` runs whole on rank 0: a schedule
    that splits no map, for one rank or chosen by the planner for more (``config.WHOLE_WHEN_CHEAPER``,
    on by default)."""
    from ..config import WHOLE_WHEN_CHEAPER
    return WHOLE_WHEN_CHEAPER.get() and nprocs is not None and schedule.nprocs == 1


def prefuse_applies(nprocs: int, target: str, optimize) -> bool:
    """Whether ``lower(sdfg, "auto", nprocs=...)`` fuses the program's maps as DaCe's ``auto_optimize``
    does before planning (``dace_compat.fused_in_place``; ``config.PREFUSE``): CPU programs planned
    for several ranks with the rank-local optimisation on (one rank runs ``lower_whole``)."""
    from ..config import PREFUSE
    from .optimize import enabled
    return nprocs > 1 and target == "cpu" and enabled(optimize) and PREFUSE.get()


def _optimize(sdfg: SDFG) -> None:
    from . import blas
    from .optimize import fast_reductions
    from ..analysis.loopmaps import independent_loops_to_maps
    info = blas.info()
    dc.repair_init_accumulate_races(sdfg)
    independent_loops_to_maps(sdfg)      # triangular loops DaCe's own LoopToMap refuses
    dc.auto_optimize_cpu(sdfg, blas=info.implementation if info.optimized else None,
                         before_expansion=fast_reductions)
    from .optimize import contractions_to_products, nonatomic_accumulations
    contractions_to_products(sdfg)
    nonatomic_accumulations(sdfg)


@with_numpy_semantics
def lower_whole(sdfg: SDFG, schedule: Schedule, *, original: str, source: str, boxed=(),
                name_hash: str = "") -> SDFG:
    """Make ``sdfg`` (already checked: no callbacks, complex scalars boxed) the whole program on
    rank 0, optimised as DaCe alone optimises it; returns it with its ``Lowered`` record.

    The optimisation runs on a copy first: where DaCe raises, ``sdfg`` is left unchanged and
    ``WholeProgramError`` says why."""
    trial = copy.deepcopy(sdfg)
    try:
        _optimize(trial)
    except Exception as exc:       # DaCe's transformations: any failure leaves the general lowering
        raise WholeProgramError(f"DaCe's CPU optimisation of `{original}` failed "
                                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from exc
    from ..dace_compat.fusion import copy_into
    copy_into(sdfg, trial)
    sdfg.add_symbol(PLAN_LEN, dace.int64)
    sdfg.add_array(PLAN_ARRAY, [dc.sym(PLAN_LEN)], dace.int64)
    sdfg.add_scalar(COMM_ARG, dace.int32)
    if name_hash:
        sdfg.name = f"{original}_d{name_hash}"
    sdfg._distsdfg = Lowered(schedule.with_sdfg(original) if schedule.sdfg is None else schedule, original,
                             [], [], [], "cpu", [], {}, source, comm="host", rank0_only=True, boxed=tuple(boxed))
    return sdfg
