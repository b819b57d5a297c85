"""comm_report: the bytes every MPI call of a lowered program moves, per rank."""
from __future__ import annotations

from typing import List, Optional

from dace.sdfg import SDFG

from .plan import CommStep, comm_steps
from .runtime import lowered_of, solve_plan

__all__ = ["comm_report", "comm_plans", "format_report"]


def comm_report(sdfg: SDFG, *, nprocs: Optional[int] = None, **symbols) -> List[CommStep]:
    """CommSteps of one run of ``sdfg`` for concrete sizes, on ``nprocs`` ranks (default: the schedule's)."""
    low = lowered_of(sdfg)
    values = {k: int(v) for k, v in sdfg.constants.items() if isinstance(v, (int,)) or hasattr(v, "__int__")}
    values.update({k: int(v) for k, v in symbols.items()})
    P = nprocs or low.nprocs
    out: List[CommStep] = []
    for cs in solve_plan(low, values, P):
        out.extend(comm_steps(cs))
    return out


def comm_plans(sdfg: SDFG, *, nprocs: Optional[int] = None, **symbols) -> List["CommPlan"]:
    """The CommPlan of every kernel boundary where data moves from one distributed layout to
    another (grid-to-grid), in program order, for concrete sizes."""
    from .plan import ConcreteRedist
    low = lowered_of(sdfg)
    values = {k: int(v) for k, v in sdfg.constants.items() if isinstance(v, (int,)) or hasattr(v, "__int__")}
    values.update({k: int(v) for k, v in symbols.items()})
    return [cs.plan for cs in solve_plan(low, values, nprocs or low.nprocs) if isinstance(cs, ConcreteRedist)]


def format_report(steps: List[CommStep]) -> str:
    lines = [str(s) for s in steps]
    total = sum(sum(s.sent) for s in steps)
    lines.append(f"total bytes sent: {total:,}")
    return "\n".join(lines)
