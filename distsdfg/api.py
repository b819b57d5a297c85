"""The public API: maps(), lower(), compile(), comm_report()."""
from __future__ import annotations

from typing import Optional, Union

from dace.sdfg import SDFG

from .errors import DistributedLoweringError
from .kernels import MapInfo, maps
from .lowering import lower_sdfg
from .report import comm_report
from .runtime import DistributedProgram, compile_distributed
from .schedule import Schedule, ScheduleLike, as_schedule

__all__ = ["maps", "lower", "compile", "comm_report", "MapInfo", "Schedule"]


def lower(sdfg: SDFG, schedule: Union[ScheduleLike, str], *, nprocs: Optional[int] = None,
          target: str = "cpu") -> SDFG:
    """Lower ``sdfg`` in place to an SPMD program that follows ``schedule``; returns ``sdfg``."""
    if isinstance(schedule, str):
        if schedule != "auto":
            raise DistributedLoweringError(f"schedule must be a Schedule, a dict or 'auto', got {schedule!r}")
        raise DistributedLoweringError("schedule='auto' needs the EinDecomp planner, which this version does not "
                                       "have yet; give a schedule {map key: grid} (see distsdfg.maps(sdfg))")
    if target not in ("cpu",):
        raise DistributedLoweringError(f"target {target!r} is not supported; use 'cpu'")
    return lower_sdfg(sdfg, as_schedule(schedule), target=target)


def compile(sdfg: SDFG, *, comm=None, verbose: Optional[bool] = None) -> DistributedProgram:  # noqa: A001
    """Collective: build ``sdfg`` once on rank 0 and load it on every rank of ``comm``."""
    return compile_distributed(sdfg, comm=comm, verbose=verbose)
