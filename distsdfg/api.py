"""The public API: maps(), lower(), compile(), comm_report()."""
from __future__ import annotations

import dataclasses
import os
from typing import Optional, Union

from dace.sdfg import SDFG

from . import dace_compat as dc
from .checks import require_sdfg
from .runtime.deferred import Deferred, DeferredProgram, defer
from .errors import InputError, OptionError, ScheduleError, SizeError, SymbolicSizeError
from .analysis.kernels import MapInfo, find_kernels, main_map_infos, maps
from .lowering.pipeline import lower_sdfg, refuse_stepped_slices
from .lowering.placement import boundary_pricing, placed_arrays
from .runtime.progress import phase
from .planner.auto import auto_schedule, schedule_cost
from .planner.explain import explain
from .lowering.whole import prefuse_applies, runs_whole
from .dace_compat.fusion import copy_into
from .errors import DistributedLoweringError, LoweredStateError
from .solver.report import comm_plans, comm_report
from .runtime.program import DistributedProgram, comm_of, compile_distributed
from .values.modes import Buffers, Target
from .values.schedule import Schedule, ScheduleLike, as_schedule, resolve_names
from .solver.solve import lowered_of
from .dace_compat.semantics import with_numpy_semantics

__all__ = ["maps", "lower", "compile", "comm_report", "comm_plans", "schedule_by_label", "auto_schedule",
           "schedule_cost", "explain", "MapInfo", "Schedule"]


def schedule_by_label(sdfg: SDFG, grids: dict, *, fuzzy: bool = False) -> dict:
    """``{map key: grid}`` from grids named by key or by map label.

    A name is a key, else a label (every map with that label, e.g. ``reduce_output`` in
    each reduction), else the end of a key after its library node (``gemm_map``), else, with
    ``fuzzy``, a part of a key. ``"*"`` names every kernel not named otherwise whose main map
    (a map kernel's map, a library node's largest map) has as many parameters as the grid has
    entries: ``{"*": (2, 2)}`` splits every 2-D map of a stencil's loop body. A name that
    matches nothing is kept as given, so that ``lower`` refuses it and suggests the closest key.
    """
    return resolve_names(grids, maps(sdfg), main_maps(sdfg), fuzzy=fuzzy)


def main_maps(sdfg: SDFG):
    """Per kernel its main map: a map kernel's map, a library node's map with the most iterations
    (kernels that depend on a loop variable, which cannot be split, left out)."""

    return main_map_infos(find_kernels(sdfg))


@with_numpy_semantics
def lower(sdfg: SDFG, schedule: Union[ScheduleLike, str], *, nprocs: Optional[int] = None,
          target: Union[Target, str] = Target.CPU, plan_options: Optional[dict] = None, placement=None,
          cuda_aware_mpi: bool = False, optimize: Optional[bool] = None, verbose: Optional[bool] = None) -> SDFG:
    """Lower ``sdfg`` in place to an SPMD program that follows ``schedule``; returns ``sdfg``.

    ``schedule="auto"`` plans one with ``auto_schedule(sdfg, nprocs, **plan_options)`` (with
    distributed placement, boundaries priced as free). When planning needs sizes that the
    program leaves symbolic and ``plan_options`` does not give, ``sdfg`` is left as it is and
    marked to be planned at its first call: ``compile(sdfg)`` returns a program that plans,
    lowers a copy and compiles it for the sizes of each new call (``distsdfg.runtime.deferred``).

    ``placement``: ``"root"`` (default: rank 0 passes and receives arrays whole; the other
    ranks may pass only the size symbols), ``"distributed"`` (every rank passes its own block,
    see ``distsdfg.layout``), or ``{array: "root" | "distributed", "*": default}``.

    ``target="gpu"`` runs the ranks' kernels on their GPUs; communication is staged through
    pinned host buffers, or, with ``cuda_aware_mpi=True``, MPI gets the device buffers directly
    (needs an MPI built with CUDA support; checked before every call).

    ``optimize=False`` (or ``DISTSDFG_OPTIMIZE=0``) leaves each rank's kernels as the program
    wrote them, one map per operation (``distsdfg.lowering.optimize``; for debugging).

    Planning and lowering that take more than a couple of seconds are reported on rank 0's stderr
    (``distsdfg.runtime.progress``); ``verbose=False`` or ``DISTSDFG_PROGRESS=0`` turns that off.
    """
    require_sdfg(sdfg, "distsdfg.lower")
    target = Target.parse(target, what="target")
    if cuda_aware_mpi and target != Target.GPU:
        raise OptionError("cuda_aware_mpi=True hands GPU buffers to MPI: it needs target='gpu'")
    comm = Buffers.DEVICE if cuda_aware_mpi else Buffers.HOST
    if isinstance(schedule, (str, os.PathLike)) and str(schedule).endswith(".json"):
        schedule = _schedule_file(schedule)
    if isinstance(schedule, str):
        placed_arrays(sdfg, placement)          # a wrong placement is refused before planning
        if schedule != "auto":
            raise ScheduleError(f"schedule must be a Schedule, a dict {{map key or label: grid}}, 'auto' or the "
                                f"path of a .json schedule, got {schedule!r}")
        if nprocs is None:
            raise SizeError("lower(sdfg, 'auto') needs nprocs=P, the number of ranks to plan for")
        if getattr(sdfg, "_distsdfg", None) is not None:
            raise LoweredStateError(f"SDFG `{sdfg.name}` is already lowered; lower a fresh copy "
                                    f"(prog.to_sdfg()) for another schedule")
        refuse_stepped_slices(sdfg)       # before a deferred plan: refused at lower(), not at the first call
        options = {"inputs": boundary_pricing(placement), "placement": placement, **(plan_options or {})}
        written = dc.fused_in_place(sdfg) if prefuse_applies(nprocs, target, optimize) else None

        def plan_and_lower():
            with phase(f"{sdfg.name}: plan for {nprocs} ranks", verbose=verbose):
                planned = auto_schedule(sdfg, nprocs, **options)
            with phase(f"{sdfg.name}: lower", verbose=verbose):
                return lower_sdfg(sdfg, planned, target=target, placement=placement, comm=comm, optimize=optimize,
                                  nprocs=nprocs, whole=runs_whole(nprocs, planned))
        try:        # planning leaves `sdfg` as it is (``eingraph.build_graph``): the deferred source
            return plan_and_lower()
        except SymbolicSizeError as exc:     # plan at the first call, when the sizes are known
            if written is not None:           # from the program as written (the copies fuse it)
                copy_into(sdfg, written)
            sdfg._distsdfg = None
            return defer(sdfg, nprocs, exc.symbol, target=target, comm=comm, placement=placement,
                         plan_options=plan_options, optimize=optimize)
        except DistributedLoweringError:
            if written is None:
                raise
            copy_into(sdfg, written)       # the fused program could not be planned or lowered: as written
            sdfg._distsdfg = None
            return plan_and_lower()
    with phase(f"{sdfg.name}: lower", verbose=verbose):
        return lower_sdfg(sdfg, as_schedule(schedule), target=target, placement=placement, comm=comm,
                          optimize=optimize, nprocs=nprocs)


def _schedule_file(path) -> Schedule:
    """A schedule saved as JSON (``Schedule.to_json``, or ``{map key or label: grid}``), as the CLI reads it."""
    try:
        with open(path) as f:
            return Schedule.from_json(f.read())
    except OSError as exc:
        raise ScheduleError(f"cannot read the schedule file {str(path)!r} ({exc.strerror})") from None


@with_numpy_semantics
def compile(sdfg: SDFG, *, comm=None, verbose: Optional[bool] = None, placement=None,  # noqa: A001
            threads_per_rank: Optional[int] = None, trace: Optional[str] = None) -> DistributedProgram:
    """Collective: build ``sdfg`` once on rank 0 and load it on every rank of ``comm``.

    ``threads_per_rank`` (default 1, or ``$DISTSDFG_THREADS_PER_RANK``): OpenMP threads for each
    rank's maps and MKL threads for its BLAS calls (hybrid MPI+OpenMP: P ranks x k threads <= cores).

    ``placement`` (see ``lower``) other than the one ``sdfg`` was lowered with lowers a copy of
    the original program with the same schedule first; the program's ``.sdfg`` is that copy.
    A program that ``lower(sdfg, "auto")`` left to plan at its first call compiles nothing
    here: its first call with new sizes plans, lowers and compiles (``DeferredProgram``).

    Rank 0 reports the compile and the first call when they take more than a couple of seconds;
    ``verbose=False`` (or ``DISTSDFG_PROGRESS=0``) is silent, ``verbose=True`` (or
    ``DISTSDFG_VERBOSE=1``) tells every step of the build.

    ``trace="run.json"`` (or ``$DISTSDFG_TRACE``): every call appends a timeline of each rank's
    kernels and MPI steps, with the bytes of each step, to that Chrome trace file (open it in
    https://ui.perfetto.dev or chrome://tracing); the program is built with the timers.
    """
    require_sdfg(sdfg, "distsdfg.compile")
    if comm is not None and not all(hasattr(comm, a) for a in ("rank", "size", "bcast")):
        raise InputError(f"compile(comm=...) takes an mpi4py communicator (e.g. MPI.COMM_WORLD), got "
                         f"{type(comm).__name__}")
    low = getattr(sdfg, "_distsdfg", None)
    if isinstance(low, Deferred):
        if placement is not None and placement != low.placement:
            sdfg = dc.from_json(low.source)      # the original, marked for another placement
            sdfg._distsdfg = dataclasses.replace(low, placement=placement, boundary={
                a: "" for a in sorted(placed_arrays(sdfg, placement))}, _copies={})
        return DeferredProgram(sdfg, comm_of(comm), verbose, threads_per_rank, trace)
    if placement is not None:
        low = lowered_of(sdfg)
        original = dc.from_json(low.source)
        if placed_arrays(original, placement) != set(low.boundary):
            sdfg = lower_sdfg(original, low.schedule, target=low.target, placement=placement, comm=low.comm,
                              nprocs=1 if low.rank0_only else None)
    return compile_distributed(sdfg, comm=comm, verbose=verbose, threads_per_rank=threads_per_rank, trace=trace)
