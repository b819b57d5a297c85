"""``lower_sdfg``: the lowering pipeline of one SDFG for one schedule, step by step.

Kernels (``kernels.find_kernels``) → per-kernel constraints of the tiled maps
(``constraints``) → the rewrite into rank-local kernels and communication steps
(``rewriter.Rewriter`` for straight-line programs, ``loops.MachineRewriter`` for programs with
loops, branches or placed arguments) → matrix products DaCe would misread as maps
(``dace_compat.matmul``) → the ranks' kernels optimised (``optimize``) → GPU offload
(``gpu``) → DaCe's validation. The result carries its plan as ``sdfg._distsdfg``
(``lowered.Lowered``).
"""
from __future__ import annotations

import hashlib
from typing import List, Optional, Tuple

import dace
from dace.sdfg import SDFG

from .. import dace_compat as dc
from ..checks import require_sdfg
from ..dace_compat.scalars import box_complex_scalars
from ..dace_compat.views import stepped_views
from ..analysis.constraints import KernelPlan, kernel_constraints, padded_axes
from ..errors import DistributedLoweringError, LoweredStateError, UnsupportedProgramError
from ..analysis.kernels import find_kernels, main_map_infos
from .loops import MachineRewriter
from .whole import WholeProgramError, lower_whole, runs_whole, whole_applies
from .partial_sums import PartialKernels
from .rewriter import COMM_ARG, PLAN_ARRAY, PLAN_LEN, KernelGrid, Lowered, Rewriter
from ..values.plan import axis_symbols
from ..values.schedule import Schedule, resolve_names
from ..dace_compat.semantics import with_numpy_semantics

__all__ = ["lower_sdfg", "validate_lowered", "validate_frontend"]


class PartialRewriter(PartialKernels, Rewriter):
    """``Rewriter`` of a straight-line program whose kernels linear in partial sums run on them."""


def _schedule_hash(sdfg_name: str, schedule: Schedule, target: str, placed=()) -> str:
    extra = f"|{','.join(placed)}" if placed else ""
    h = hashlib.sha1(f"{sdfg_name}|{schedule.to_json()}|{target}{extra}".encode()).hexdigest()
    return h[:10]


def _refuse_split(k, grids) -> None:
    """A kernel whose blocks depend on a loop variable cannot be split: say which map and why."""
    from ..errors import LoopDependentMapError
    from ..dace_compat.source import named
    for m in k.maps:
        grid = grids.get(m.info.key)
        if grid is not None and any(g > 1 for g in grid):
            syms = ", ".join(f"`{s}`" for s in k.runtime_symbols)
            raise LoopDependentMapError(
                f"{named(m.info.key, m.info.source)} (range {m.info.ranges}) depends on {syms}, which the program sets while it "
                f"runs (a loop variable or an interstate assignment), so its blocks cannot be planned before the "
                f"call; leave `{m.info.key}` out of the schedule (or give it a grid of ones) and it runs whole on "
                f"rank 0; or, if the iterations of the loop over `{k.runtime_symbols[0]}` are independent, write that loop as "
                f"a dace.map so that it can be split")


def validate_frontend(source: str, original: str) -> None:
    """DaCe's validation of the program as DaCe's frontend gave it (``source``: its JSON, taken before
    distsdfg changed anything); an SDFG that was invalid already (``np.flip`` of a slice in a loop)
    is the frontend's, refused by name with DaCe's message. Run only when the lowered SDFG fails
    validation, so valid programs pay nothing."""
    try:
        dc.from_json(source).validate()
    except dace.sdfg.InvalidSDFGError as exc:
        from ..errors import FrontendInvalidError
        raise FrontendInvalidError(
            f"DaCe's frontend produced an invalid SDFG for `{original}`, before distsdfg changed anything: "
            f"{' '.join(str(exc).split())}. DaCe alone cannot compile this program either; rewrite the "
            f"statement DaCe names (e.g. an explicit loop instead of np.flip of a slice) and check it with "
            f"`prog.to_sdfg().validate()`") from None


def _refuse_callbacks(sdfg: SDFG) -> None:
    """A call neither DaCe 1.0.2 nor ``dace_compat.npfuncs``/``nparrays`` translates (``np.sort``,
    ``np.median``) becomes a Python callback, an argument of the SDFG that the compiled program cannot
    be given: refused by name (it used to surface as a missing "size symbol" at the first call)."""
    from ..errors import UnsupportedProgramError
    calls = sorted(name for name, t in sdfg.symbols.items() if isinstance(t, dace.dtypes.callback))
    if calls:
        names = ", ".join(f"`{c}`" for c in calls)
        raise UnsupportedProgramError(
            f"`{sdfg.name}` calls {names}, which DaCe 1.0.2 does not translate: it leaves each a Python callback, "
            f"which a distributed program cannot call; write it with the NumPy DaCe translates (element-wise "
            f"operations, reductions, @, np.einsum, and the functions listed in docs/writing-programs.md), "
            f"or compute it before or after the call")


def validate_lowered(sdfg: SDFG, original: str, schedule: Schedule) -> None:
    """DaCe's validation of a lowered SDFG; a failure is the rewrite's limit, refused by name."""
    try:
        sdfg.validate()
        if getattr(sdfg, "_distsdfg", None) is not None:
            sdfg._distsdfg.validated = dc.structure_fingerprint(sdfg)
    except dace.sdfg.InvalidSDFGError as exc:
        from ..errors import RewriteLimitError
        low = getattr(sdfg, "_distsdfg", None)
        if low is not None and low.source:
            validate_frontend(low.source, original)
        raise RewriteLimitError(f"lowering `{original}` with {schedule.as_dict()} gives an SDFG that DaCe rejects "
                                f"({str(exc).splitlines()[0]}): distsdfg cannot rewrite this program for this "
                                f"schedule yet; try another schedule, or run it on one rank") from None


def refuse_stepped_slices(sdfg: SDFG) -> None:
    """Raise ``UnsupportedProgramError`` for a stepped slice DaCe 1.0.2 parses wrongly (``views.stepped_views``)."""
    for array, where, sub in stepped_views(sdfg)[:1]:
        raise UnsupportedProgramError(
            f"`{sdfg.name}` uses a stepped slice of `{array}` (`{array}[::k]`; {where} reads `{array}[{sub}]`), "
            f"which DaCe 1.0.2 reads without its step (wrong results with DaCe alone too); index it in a map "
            f"instead (`for i in dace.map[0:n]: y[i] = {array}[k * i]`)")


@with_numpy_semantics
def lower_sdfg(sdfg: SDFG, schedule: Schedule, *, target: str = "cpu", placement=None, comm: str = "host",
               optimize: Optional[bool] = None, nprocs: Optional[int] = None, validate: bool = True,
               device_args: Tuple[str, ...] = (), whole: Optional[bool] = None) -> SDFG:
    """``comm``: where communication steps find their local buffers (``Lowered.comm``): "host"
    (target cpu: host memory; target gpu: GPU buffers with MPI on pinned host temporaries),
    "device" (target gpu: GPU buffers to a CUDA-aware MPI), or "emulated" / "emulated-staged"
    (target cpu: the device code path of "device" / of the GPU's "host" over host memory, for tests). ``optimize``: optimise the ranks' kernels after
    tiling (``distsdfg.lowering.optimize``; None: on unless ``DISTSDFG_OPTIMIZE=0``). ``nprocs``: the
    number of ranks the caller planned for (``lower(sdfg, "auto", nprocs=P)``); with 1, whole
    arrays are not copied into local buffers and the program runs on rank 0 alone. ``validate=False``
    skips DaCe's validation of the result (for copies that are only priced, never compiled).
    ``device_args`` (target gpu): the arrays rank 0 passes whole (and results) that the program
    takes in device memory, the caller's CuPy arrays (``distsdfg.lowering.device_args``).
    ``whole`` (default: when ``nprocs`` is 1, ``whole.runs_whole``): run the whole program on rank 0 as DaCe alone builds
    it (``distsdfg.lowering.whole``), where the target, placement and arguments allow."""
    if whole is None:
        whole = nprocs == 1 and runs_whole(nprocs, schedule)
    from .placement import kept_at_root, placed_arrays, rank0_reasons
    if (comm, target) not in (("host", "cpu"), ("host", "gpu"), ("device", "gpu"), ("emulated", "cpu"),
                              ("emulated-staged", "cpu")):
        raise DistributedLoweringError(f"comm={comm!r} does not go with target={target!r}: device buffers need "
                                       f"target='gpu', the emulated device path target='cpu'")
    require_sdfg(sdfg, "distsdfg.lower")
    _refuse_callbacks(sdfg)
    if getattr(sdfg, "_distsdfg", None) is not None:
        raise LoweredStateError(f"SDFG `{sdfg.name}` is already lowered; lower a fresh copy "
                                       f"(prog.to_sdfg()) for another schedule")
    refuse_stepped_slices(sdfg)
    source = dc.to_json(sdfg)
    original_name = sdfg.name
    boxed = box_complex_scalars(sdfg)      # DaCe 1.0.2 passes complex scalars as garbage: one-element arrays
    placed = placed_arrays(sdfg, placement)
    from .optimize import enabled
    if whole and whole_applies(target=target, comm=comm, placed=placed, device_args=device_args,
                               optimize=enabled(optimize)):
        # One rank, or a plan that gains nothing from splitting: the program as DaCe alone builds it.
        try:
            lower_whole(sdfg, schedule, original=sdfg.name, source=source, boxed=boxed,
                        name_hash=_schedule_hash(sdfg.name, schedule, "cpu+whole"))
        except WholeProgramError:
            pass                # DaCe's optimisation refused it: the general lowering below
        else:
            if validate:
                validate_lowered(sdfg, sdfg._distsdfg.original_name, schedule)
            return sdfg
    dc.repair_init_accumulate_races(sdfg)
    kernels = find_kernels(sdfg)
    known = {m.info.key: len(m.info.params) for k in kernels for m in k.maps}
    if any(key not in known for key in schedule.keys()):     # labels (gemm_map) and "*", as schedule_by_label
        schedule = Schedule(tuple(sorted(resolve_names(schedule.as_dict(), [m.info for k in kernels for m in k.maps],
                                                       main_map_infos(kernels)).items())), schedule.sdfg)
    schedule.validate_for(known, sdfg_name=sdfg.name, sources={m.info.key: m.info.source for k in kernels for m in k.maps})
    grids = schedule.as_dict()
    plans: List[KernelPlan] = []
    for k in kernels:
        if k.kind == "opaque":
            continue
        if k.runtime_symbols:       # runs whole on rank 0, like a node we do not distribute
            _refuse_split(k, grids)
            continue
        plans.append(kernel_constraints(k, grids))

    even_checks = []
    for kp in plans:
        kp.padded = padded_axes(kp, even_checks)

    segments, linear = dc.program_segments(sdfg)
    # Reads bounded by an input array's values (the CSR row pointer): exact blocks from the data at
    # call time (distsdfg.solver.inspector); straight-line programs with root placement on the CPU only.
    data_bounds = []
    if linear and not placed and target == "cpu" and comm == "host" and nprocs != 1:
        from ..solver import inspector
        for kp in plans:
            db = inspector.recognise(sdfg, kp)
            if db is not None:
                inspector.apply(sdfg, kp, db)
                data_bounds.append(db)

    sdfg.add_symbol(PLAN_LEN, dace.int64)
    sdfg.add_array(PLAN_ARRAY, [dc.sym(PLAN_LEN)], dace.int64)
    sdfg.add_scalar(COMM_ARG, dace.int32)
    views = dc.reshape_views(sdfg)
    viewed = dc.viewed_arrays(sdfg, exclude=views)
    placed = kept_at_root(placed, rank0_reasons(sdfg, viewed, {kp.kernel.node for kp in plans}), placement,
                          original_name)
    if linear and not placed:
        rw = PartialRewriter(sdfg, linear=True, viewed=viewed, views=views)
    else:       # homes at state boundaries; placed arguments are homes the user passes
        rw = MachineRewriter(sdfg, viewed=viewed, views=views, placed=placed,
                             device=(target, comm) != ("cpu", "host"))
    rw.run(segments, {kp.kernel.node: kp for kp in plans})
    dc.remove_unused_transients(sdfg, rw.touched)
    kgrids = []
    for kp in plans:
        kgrids.append(KernelGrid(kp.kernel.index, kp.kernel.label, tuple(m.info.key for m in kp.kernel.maps),
                                 kp.grid, axis_symbols(kp.rank_syms, kp.grid),
                                 rw.members.get(kp.kernel.index, ""),
                                 next((m.info.source for m in kp.kernel.maps if m.info.source), "")))
    original = sdfg.name
    tag = target if comm == "host" else f"{target}+{comm}"
    one_rank = nprocs == 1 and target == "cpu" and comm == "host" and enabled(optimize)
    if one_rank:
        tag += "+one-rank"
    if device_args:
        tag += f"+device({','.join(sorted(device_args))})"
    sdfg.name = f"{original}_d{_schedule_hash(original, schedule, tag, sorted(placed))}"
    sdfg._distsdfg = Lowered(schedule.with_sdfg(original) if schedule.sdfg is None else schedule, original,
                             rw.steps, kgrids, even_checks, target, getattr(rw, "home_specs", list)(),
                             dict(getattr(rw, "boundary", {})), source, comm=comm, data_bounds=data_bounds,
                             replicas=tuple(getattr(rw, "replicas", ())), boxed=boxed)
    from ..dace_compat.matmul import degenerate_matmuls_to_maps, degenerate_transposes_to_maps
    degenerate_matmuls_to_maps(sdfg)          # blocks that DaCe's MatMul expansion would read as vectors
    degenerate_transposes_to_maps(sdfg)       # and blocks of one row or column DaCe's Transpose refuses
    if target == "cpu":
        from .optimize import optimize_lowered
        if enabled(optimize):
            optimize_lowered(sdfg, sdfg._distsdfg, straight=linear and not placed, one_rank=one_rank)
        from .buffers import persist_step_buffers
        persist_step_buffers(sdfg)              # the steps' host buffers: allocated once, not per call
    if device_args:       # the caller's CuPy arrays: kernels use them in place on one rank
        from .device_args import ArgumentsOnDevice
        ArgumentsOnDevice(device_args, straight=linear and not placed, optimize=enabled(optimize)).apply_pass(sdfg, {})
    if target == "gpu":
        from .gpu import OffloadKernels      # home buffers stay on the GPU; steps in loops are staged too
        OffloadKernels(cuda_aware_mpi=comm == "device", device_args=device_args).apply_pass(sdfg, {})
    elif comm != "host":
        from .gpu import DeviceBufferComm
        DeviceBufferComm(comm).apply_pass(sdfg, {})
    if validate:
        validate_lowered(sdfg, original, schedule)
    return sdfg
