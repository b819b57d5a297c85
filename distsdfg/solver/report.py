"""comm_report: the bytes every MPI call of a lowered program moves, per rank (or, for many
ranks, summed over the ranks: ``CommSummary``)."""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
from dace.sdfg import SDFG

from ..checks import positive_int, require_sdfg
from ..analysis.eingraph import build_graph
from ..errors import CommunicatorSizeError, SizeError
from ..values.modes import Collective, KernelKind
from ..values.plan import CommStep
from .redistribute import CommPlan
from .solve import ConcreteRedist, comm_steps, given_values, lowered_of, planned, solve_plan

__all__ = ["comm_report", "comm_plans", "solved_steps", "format_report", "bytes_per_kernel", "matmul_io_lower_bounds", "CommSummary",
           "SUMMARY_ABOVE"]

#: ``comm_report`` summarises (one ``CommSummary`` per MPI call, no per-rank tuples) above this many ranks.
SUMMARY_ABOVE = 256


@dataclasses.dataclass(frozen=True)
class CommSummary:
    """One MPI call of a plan, summed over the ranks: what ``comm_report(summary=True)`` gives.

    Bytes follow ``CommStep``'s convention (logical payload, a rank's own block excluded), for
    one run of the call; ``pairs`` counts the (sender, receiver) rank pairs that exchange data:
    root or group head and member for Scatterv, Bcast, Gatherv and the replicate Reduce; every
    ordered pair of a group for Allreduce, Reduce_scatter and Allgatherv; distinct pairs of
    messages for Alltoallw, Alltoallv and Isend/Irecv; members and their root for a group Reduce.
    """
    collective: Collective
    array: str
    nranks: int
    bytes_sent: int
    bytes_received: int
    max_sent: int          # the busiest rank's
    max_received: int
    ranks: int             # ranks that send or receive anything
    pairs: int
    repeats: object = 1
    at_most: bool = False

    @property
    def total_bytes(self) -> int:
        """Bytes sent by all ranks over all repeats (needs a numeric ``repeats``)."""
        return self.bytes_sent * int(self.repeats)

    def __str__(self):
        times = "" if self.repeats == 1 else f" x{'<=' if self.at_most else ''}{self.repeats}"
        return (f"{self.collective:14s} {self.array:16s} sent={self.bytes_sent:,} (busiest rank {self.max_sent:,}, "
                f"receives at most {self.max_received:,}) ranks={self.ranks}/{self.nranks} pairs={self.pairs}" + times)


def _pairs(cs, step: CommStep) -> int:
    if isinstance(cs, ConcreteRedist):
        plan = cs.plan
        if plan.collective in (Collective.ALLTOALLW, Collective.ALLTOALLV, Collective.P2P):
            return len({(m.src, m.dst) for m in plan.messages if m.src != m.dst})
        if plan.collective == Collective.REDUCE:
            return sum(len(g) - 1 for g in plan.groups)
        return sum(len(g) * (len(g) - 1) for g in plan.groups if len(g) > 1)
    if step.collective in (Collective.SCATTERV, Collective.BCAST):
        return sum(1 for b in step.received if b)
    return sum(1 for b in step.sent if b)


def _summary(cs, step: CommStep) -> CommSummary:
    return CommSummary(step.collective, step.array, len(step.sent), sum(step.sent), sum(step.received),
                       max(step.sent, default=0), max(step.received, default=0),
                       sum(1 for a, b in zip(step.sent, step.received) if a or b), _pairs(cs, step),
                       step.repeats, step.at_most)


def _ranks(low, nprocs, what: str) -> int:
    """The rank count to report for: at least the schedule's (a run on fewer ranks is refused)."""
    if nprocs is None:
        return low.nprocs
    P = positive_int(nprocs, f"{what}(nprocs=...)")
    if P < low.nprocs:
        raise CommunicatorSizeError(f"{what}(nprocs={P}): the schedule of `{low.original_name}` needs "
                                    f"{low.nprocs} ranks; pass nprocs={low.nprocs} or more")
    return P


def _solved(sdfg: SDFG, nprocs, symbols, what: str):
    """(lowering, values, solved steps) with a missing size named instead of a KeyError; a program
    planned at its first call is planned for these sizes. A compiled program (``distsdfg.compile``'s
    result) stands for its SDFG, on its communicator's ranks unless ``nprocs`` says otherwise."""
    if not isinstance(sdfg, SDFG) and isinstance(getattr(sdfg, "sdfg", None), SDFG) and hasattr(sdfg, "comm"):
        nprocs = sdfg.comm.size if nprocs is None else nprocs
        sdfg = sdfg.sdfg
    require_sdfg(sdfg, f"distsdfg.{what}")
    data = {k: v for k, v in symbols.items() if isinstance(v, np.ndarray)}
    for k in data:
        if k not in sdfg.arrays or sdfg.arrays[k].transient:
            raise SizeError(f"{what}: `{k}` is not an array argument of `{sdfg.name}`; pass arrays by their "
                            f"argument names (e.g. a CSR row pointer, for exact data-dependent blocks)")
    values = given_values(sdfg, {k: v for k, v in symbols.items() if k not in data}, what)
    low = lowered_of(planned(sdfg, values, what))
    P = 1 if getattr(low, "rank0_only", False) else _ranks(low, nprocs, what)   # runs on rank 0 alone
    try:
        if data and getattr(low, "data_bounds", None):     # blocks bounded by these arrays' values
            from .inspector import inspect
            values = {**values, **inspect(low.data_bounds, data, values, P)}
        return low, values, solve_plan(low, values, P)
    except KeyError as exc:
        name = str(exc.args[0]).replace("symbol ", "").replace(" has no value", "")
        raise SizeError(f"{what} needs the value of size symbol `{name}` of `{low.original_name}`: pass it, "
                        f"e.g. {what}(sdfg, {name}=1024)") from None


def comm_report(sdfg: SDFG, *, nprocs: Optional[int] = None, summary: Optional[bool] = None,
                **symbols) -> Union[List[CommStep], List[CommSummary]]:
    """CommSteps of one run of ``sdfg`` for concrete sizes, on ``nprocs`` ranks (default: the schedule's).

    ``summary=True``: one ``CommSummary`` per MPI call instead (bytes and rank pairs summed over
    the ranks, no per-rank tuples); ``None`` (default): summaries above ``SUMMARY_ABOVE`` ranks.
    A program planned at its first call (``lower(sdfg, "auto")`` without sizes) is planned for
    the sizes given here. Reads bounded by an input array's values (a CSR row pointer,
    ``distsdfg.solver.inspector``) are exact when that array is passed too (``A_row=...``); without
    it they count the whole arrays on every rank of the grid (an upper bound)."""
    low, values, solved = _solved(sdfg, nprocs, symbols, "comm_report")
    if summary is None:
        summary = (solved[0].nranks if solved else 1) > SUMMARY_ABOVE
    out: list = []
    for cs in solved:
        steps = comm_steps(cs, values)
        if summary:
            out.extend(_summary(cs, s) for s in steps)
        else:
            out.extend(steps)
    return out


def solved_steps(sdfg: SDFG, *, nprocs: Optional[int] = None, **symbols):
    """(lowering, symbol values, solved steps) of ``sdfg`` for concrete sizes: what ``comm_report``
    reads its bytes from (``launch.plan_plot`` draws the blocks)."""
    return _solved(sdfg, nprocs, symbols, "plan")


def comm_plans(sdfg: SDFG, *, nprocs: Optional[int] = None, **symbols) -> List[CommPlan]:
    """The CommPlan of every kernel boundary where data moves from one distributed layout to
    another (grid-to-grid), in program order, for concrete sizes."""
    _, _, solved = _solved(sdfg, nprocs, symbols, "comm_plans")
    return [cs.plan for cs in solved if isinstance(cs, ConcreteRedist)]


def sent_once(step) -> int:
    """Bytes a CommStep or CommSummary sends over all ranks, one run of the call."""
    return step.bytes_sent if isinstance(step, CommSummary) else sum(step.sent)


def format_report(steps) -> str:
    """One line per MPI call (CommSteps or CommSummaries), then the bytes sent per program call
    (loop steps times their counts)."""
    lines = [str(s) for s in steps]
    once = sum(sent_once(s) for s in steps if s.repeats == 1)
    looped = [s for s in steps if s.repeats != 1]
    if not looped:
        lines.append(f"total bytes sent: {once:,}")
    elif all(isinstance(s.repeats, int) for s in looped):
        total = once + sum(sent_once(s) * s.repeats for s in looped)
        bound = " at most" if any(s.at_most for s in looped) else ""
        lines.append(f"total bytes sent:{bound} {total:,} ({once:,} outside loops, "
                     f"{sum(sent_once(s) for s in looped):,} per loop iteration)")
    else:
        lines.append(f"total bytes sent: {once:,} outside loops, plus per loop iteration "
                     f"{sum(sent_once(s) for s in looped):,} (give the loop bounds for a total)")
    return "\n".join(lines)


def bytes_per_kernel(sdfg: SDFG, *, nprocs: Optional[int] = None, **symbols) -> Dict[str, int]:
    """Bytes sent per kernel (label), the communication that kernel's inputs and outputs cause."""
    low, values, solved = _solved(sdfg, nprocs, symbols, "bytes_per_kernel")
    out: Dict[str, int] = {k.label: 0 for k in low.kernels}
    for cs in solved:
        out[cs.spec.kernel_label] = out.get(cs.spec.kernel_label, 0) + sum(
            sum(c.total_sent) if isinstance(c.repeats, int) else sum(c.sent) for c in comm_steps(cs, values))
    return out


def matmul_io_lower_bounds(sdfg: SDFG, nprocs: int, **sizes) -> List[Tuple[str, float]]:
    """Per matrix product (M x K times K x N, itemsize b): the memory-independent lower bound on
    the bytes one rank must move, ``b * (3 (MNK/P)^(2/3) - (MK + KN + MN) / P)`` (Ballard et al.)."""
    g = build_graph(sdfg, **sizes)
    out = []
    for v in g.vertices:
        if len(v.labels) == 3 and len(v.inputs) == 2 and len(v.agg) == 1 and v.kind == KernelKind.LIBRARY:
            m, n, k = v.bounds
            item = v.outputs[0].itemsize if v.outputs else 8
            bound = 3 * (m * n * k / nprocs) ** (2 / 3) - (m * k + k * n + m * n) / nprocs
            out.append((v.key, max(bound, 0.0) * item))
    return out
