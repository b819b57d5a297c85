"""Programs planned at their first call: ``lower(sdfg, "auto", nprocs=P)`` before the sizes are known.

When the planner needs concrete sizes that the program leaves symbolic, ``lower`` attaches a
``Deferred`` record to the SDFG instead of a ``Lowered`` one and leaves the SDFG as it was.
``compile`` then returns a ``DeferredProgram``: at the first call with a new set of sizes (read
from the call's arrays and keywords on rank 0, like any call) rank 0 plans with
``auto_schedule``, broadcasts the schedule, every rank lowers a copy of the original SDFG with
it, and the copy is compiled (on rank 0, loaded everywhere). Later calls with those sizes go
straight to that program; sizes for which the planner picks a schedule already compiled reuse
its build (a lowered program runs for any sizes: the communication plan is solved per call).

``comm_report``, ``comm_plans`` and ``layout`` plan a copy for the sizes they are given and
explain what to pass when a size is missing.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from typing import Dict, Optional, Tuple

import numpy as np
from dace.sdfg import SDFG

from .. import dace_compat as dc
from .. import errors
from ..errors import DistributedLoweringError, InputError, SymbolicSizeError
from ..lowering.pipeline import lower_sdfg
from ..lowering.whole import prefuse_applies, runs_whole
from ..lowering.placement import boundary_pricing, placed_arrays
from ..planner.auto import auto_schedule
from .progress import phase
from .callsync import CallStart
from .program import DistributedProgram, compile_distributed, idle_bcast
from ..values.modes import Buffers, Target
from ..values.schedule import Schedule
from ..solver.solve import planned
from ..dace_compat.semantics import with_numpy_semantics

__all__ = ["Deferred", "DeferredProgram", "defer", "planned"]

SizeKey = Tuple[Tuple[str, int], ...]


@dataclasses.dataclass
class Deferred:
    """What ``lower(sdfg, "auto", nprocs=P)`` decided when the planner lacked concrete sizes:
    plan, lower a copy of ``source`` and compile at the first call with the call's sizes."""
    nprocs: int
    original_name: str
    source: str = dataclasses.field(repr=False)    # the SDFG as given (JSON), lowered anew per schedule
    sizes: Tuple[str, ...]              # the program's size symbols
    missing: str                        # the first one the planner asked for
    target: Target = Target.CPU
    comm: Buffers = Buffers.HOST        # Lowered.comm of the lowered copies
    placement: object = None
    plan_options: Dict = dataclasses.field(default_factory=dict)   # as given to lower (no sizes needed)
    boundary: Dict[str, str] = dataclasses.field(default_factory=dict)   # placed arguments (blocks)
    optimize: Optional[bool] = None     # as given to lower (None: the default, see distsdfg.lowering.optimize)
    _copies: Dict[SizeKey, SDFG] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    deferred = True     # told apart from a Lowered without importing this module

    def key(self, values: Dict[str, int]) -> SizeKey:
        return tuple((s, int(values[s])) for s in self.sizes if s in values)

    def needs_sizes(self, what: str = "") -> SymbolicSizeError:
        """The refusal of ``what`` (a function of a lowered program) without the sizes to plan for."""
        example = ", ".join(f"{s}=..." for s in self.sizes)
        head = (f"`{self.original_name}` is planned at its first call (lower(sdfg, 'auto', nprocs={self.nprocs}) had "
                f"no value for `{self.missing}`)")
        now = (f"or plan now: lower(prog.to_sdfg(), 'auto', nprocs={self.nprocs}, "
               f"plan_options=dict({example}))")
        if what:
            text = f"{head}, so {what} needs its sizes: pass {example} to {what}; {now}"
        else:
            text = (f"{head} and has no lowering yet: distsdfg.compile(sdfg) gives a program that plans at its first "
                    f"call, comm_report(sdfg, {example}) plans a copy for those sizes; {now}")
        return SymbolicSizeError(text, self.missing, what)

    def plan(self, sizes: Dict[str, int]) -> Schedule:
        """The planner's schedule for these sizes (what ``lower(sdfg, "auto")`` would have chosen)."""
        options = {"inputs": boundary_pricing(self.placement), **self.plan_options, **sizes}
        return auto_schedule(self.fresh(), self.nprocs, **options)

    def fresh(self) -> SDFG:
        """A fresh copy of the original SDFG, its maps fused where ``lower`` fuses them before planning
        (``lowering.whole.prefuse_applies``; the same fusions on every rank)."""
        sdfg = dc.from_json(self.source)
        if prefuse_applies(self.nprocs, self.target, self.optimize):
            dc.fused_in_place(sdfg)
        return sdfg

    def lower(self, schedule: Schedule) -> SDFG:
        """A fresh copy of the original SDFG lowered with ``schedule``."""
        return lower_sdfg(self.fresh(), schedule, target=self.target, placement=self.placement,
                          comm=self.comm, optimize=self.optimize, nprocs=self.nprocs,
                          whole=runs_whole(self.nprocs, schedule))

    def copy_for(self, values: Dict[str, int], what: str) -> SDFG:
        """A lowered copy planned for ``values`` (cached), for reports; refuses missing sizes."""
        key = self.key(values)
        if key not in self._copies:
            try:
                schedule = self.plan(dict(key))
            except SymbolicSizeError:
                raise self.needs_sizes(what) from None
            self._copies[key] = self.lower(schedule)
        return self._copies[key]


def defer(sdfg: SDFG, nprocs: int, missing: str, *, target: Target = Target.CPU, comm: Buffers = Buffers.HOST,
          placement=None, plan_options: Optional[dict] = None, optimize: Optional[bool] = None) -> SDFG:
    """Mark ``sdfg`` to be planned at its first call (``lower`` does this when sizes are missing).

    The source kept (JSON) is ``sdfg`` as it is now, so the failed planning attempt before must
    have left it as given (``eingraph.build_graph`` does): an SDFG that went through the planner's
    rewrites and then through JSON can lower to a wrong program (a `while` loop over a scalar ran
    once: DaCe 1.0.2's own result)."""
    if getattr(sdfg, "_distsdfg", None) is not None:
        raise DistributedLoweringError(f"SDFG `{sdfg.name}` is already lowered; lower a fresh copy "
                                       f"(prog.to_sdfg()) for another schedule")
    placed = placed_arrays(sdfg, placement)         # refuses bad placements now, not at the first call
    sizes = tuple(sorted(str(s) for s in sdfg.free_symbols if str(s) not in sdfg.constants))
    sdfg._distsdfg = Deferred(nprocs, sdfg.name, dc.to_json(sdfg), sizes, missing, target, comm, placement,
                              dict(plan_options or {}), {a: "" for a in sorted(placed)}, optimize)
    return sdfg


def _env_verbose() -> bool:
    import os
    return os.environ.get("DISTSDFG_VERBOSE", "0") not in ("", "0")


def _log(msg: str, verbose: bool):
    if verbose:
        print(f"[distsdfg] {msg}", file=sys.stderr, flush=True)


class DeferredProgram(DistributedProgram):
    """``compile`` of a program planned at its first call; every rank calls it like any program.

    The first call with a new set of sizes is collective work beyond the call itself: rank 0
    plans, every rank lowers, rank 0 compiles (unless a program with the same schedule is
    compiled already). ``programs`` maps the size sets seen so far to their compiled programs.
    """

    def __init__(self, sdfg: SDFG, comm, verbose: Optional[bool] = None, threads_per_rank: Optional[int] = None,
                 trace: Optional[str] = None):
        self.sdfg = sdfg
        self.threads_per_rank = threads_per_rank
        self.trace = trace          # the trace file of the programs it compiles (runtime.trace)
        self.lowered: Deferred = sdfg._distsdfg
        self._compiled = None
        self.comm = comm
        self.verbose = verbose
        self.progress = verbose         # first-call and phase reports (runtime.progress)
        self._plans = {}
        self._signatures = {}
        self._by_sizes: Dict[SizeKey, DistributedProgram] = {}
        self._by_schedule: Dict[str, DistributedProgram] = {}
        self._start = CallStart(comm, self.lowered.original_name)      # collective, as compile is

    @property
    def programs(self) -> Dict[SizeKey, DistributedProgram]:
        return dict(self._by_sizes)

    @with_numpy_semantics
    def program_for(self, **sizes) -> DistributedProgram:
        """Collective: the compiled program for these sizes (planned, lowered and compiled if new)."""
        key = self.lowered.key(sizes)
        prog = self._by_sizes.get(key)
        if prog is not None:
            return prog
        verbose = self.verbose if self.verbose is not None else _env_verbose()
        schedule, error = None, None
        if self.comm.rank == 0:
            t0 = time.time()
            try:
                with phase(f"{self.lowered.original_name}: plan for {self.comm.size} ranks", verbose=self.verbose,
                           comm=self.comm):
                    schedule = self.lowered.plan(dict(key))
                _log(f"{self.lowered.original_name}: planned {schedule} for {dict(key)} "
                     f"({time.time() - t0:.1f}s)", verbose)
            except SymbolicSizeError as exc:
                error = ("InputError", f"size symbol `{exc.symbol}` has no value: pass it as a keyword argument")
            except DistributedLoweringError as exc:
                error = (type(exc).__name__, str(exc))
            except Exception as exc:
                error = ("DistributedLoweringError", f"planning `{self.lowered.original_name}` for {dict(key)} "
                                                     f"failed: {type(exc).__name__}: {exc}")
        # Every rank lowers with rank 0's schedule (the binary is built from rank 0's lowering).
        schedule, error = idle_bcast(self.comm, (schedule, error))
        if error is not None:
            raise getattr(errors, error[0], DistributedLoweringError)(error[1])
        prog = self._by_schedule.get(schedule.to_json())
        if prog is None:
            with phase(f"{self.lowered.original_name}: lower", verbose=self.verbose, comm=self.comm):
                lowered = self.lowered.lower(schedule)
            prog = compile_distributed(lowered, comm=self.comm, verbose=self.verbose,
                                       threads_per_rank=self.threads_per_rank, trace=self.trace)
            self._by_schedule[schedule.to_json()] = prog
        self._by_sizes[key] = prog
        return prog

    def layout(self, array: str, **sizes):
        """Collective: ``distsdfg.layout`` of ``array`` in the program planned for ``sizes``."""
        return self.program_for(**sizes).layout(array, **sizes)

    def _call(self, kwargs, own_error: Optional[str] = None):
        comm = self.comm
        error, values = None, None
        self._start.arrive()
        given = {k: v for k, v in kwargs.items() if not isinstance(v, np.ndarray) and k in self.sdfg.symbols}
        if comm.rank == 0 and own_error is None:   # the same checks (and checked signatures) as a lowered program's
            arrays = {k: v for k, v in kwargs.items() if isinstance(v, np.ndarray) and k not in self.lowered.boundary}
            values, error, _ = self._checked(kwargs, arrays, given, comm.size)
        error, values = self._start.exchange((error, values), own_error, values if comm.rank == 0 and values else given)
        if error is not None:
            raise getattr(errors, error[0], InputError)(error[1])
        return self.program_for(**dict(self.lowered.key(values)))._call(kwargs)
