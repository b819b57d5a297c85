"""Compile once on rank 0, load everywhere, and run: the wrapper every rank calls."""
from __future__ import annotations

import functools
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import dace
from dace.sdfg import SDFG

from ..lowering import blas
from .. import dace_compat as dc
from .. import errors
from ..dace_compat.pack import PACKED, packed_names
from ..dace_compat.scalars import box_arguments
from ..mpi.encode import encode_plan
from ..errors import CommunicatorSizeError, DistributedLoweringError, InputError
from ..solver.inspector import inspect_call
from ..lowering.gpu import gpu_available, require_cuda_aware_mpi
from ..lowering.rewriter import COMM_ARG, PLAN_ARRAY, PLAN_LEN, RUNTIME_ARGS
from ..lowering.placement import layout as _layout
from ..values.modes import Buffers, Target
from ..values.plan import ConcreteStep, evaluate
from . import progress
from ..config import STEP_TIMES, TRACE_FILE
from .trace import TraceFile
from .builds import build, load_build
from .callsync import CallStart, scalar_arguments
from .crash import attach as attach_crash_report
from .fingerprint import check_same_plan
from .device_arrays import back_to_device, is_array, is_cupy, on_device, to_host, wait_for_callers_stream
from .root_args import RootArguments, check_blocks, replica_values, unequal_replicas
from ..solver.solve import lowered_of, solve_homes, solve_plan, symbol_values
from ..dace_compat.semantics import with_numpy_semantics

__all__ = ["DistributedProgram", "compile_distributed", "idle_bcast", "comm_of", "step_legend",
           "lowered_of", "solve_plan", "symbol_values"]   # the last three: distsdfg.solver.solve


def comm_of(comm=None):
    """``comm``, or ``MPI.COMM_WORLD`` when None."""
    from mpi4py import MPI
    return comm if comm is not None else MPI.COMM_WORLD


def idle_bcast(comm, obj=None, root: int = 0, poll: float = 0.002):
    """``comm.bcast(obj, root)`` whose waiting ranks sleep instead of spinning in MPI.

    MPI's blocking calls busy-poll: while the root compiles or plans for seconds, every other
    rank would burn a core, which halves the root's speed when ranks share cores (a laptop, a
    CI machine, oversubscribed tests). The ranks first meet in a non-blocking barrier that the
    others test every ``poll`` seconds. For set-up steps only, never on a program call's path.
    """
    req = comm.Ibarrier()
    if comm.rank == root:
        req.Wait()
    else:
        while not req.Test():
            time.sleep(poll)
    return comm.bcast(obj, root=root)


class DistributedProgram:
    """A lowered SDFG compiled once; call it on every rank with the same arguments.

    Arguments are NumPy arrays or, on GPU machines, CuPy arrays. A program lowered for the GPU
    called with CuPy arrays on rank 0 runs a variant that takes them in device memory where it can
    (``distsdfg.lowering.device_args``: one rank, or ``cuda_aware_mpi=True``), compiled at the
    first such call; otherwise, and for CPU programs, CuPy arguments are copied to the host for the
    call, arrays the program writes are copied back into them, and the results come back as CuPy
    arrays.
    """

    def __init__(self, sdfg: SDFG, compiled, comm, threads_per_rank: int = 1, trace: Optional[str] = None):
        self.sdfg = sdfg
        self.threads_per_rank = threads_per_rank
        self.lowered = lowered_of(sdfg)
        self._compiled = compiled
        self.comm = comm
        # Every communication step talks on this communicator (its ranks are the plan's ranks).
        self._fcomm = int(comm.py2f())
        if self.lowered.rank0_only:     # runs on rank 0 alone (distsdfg.lowering.optimize.alias_whole_blocks)
            from mpi4py import MPI
            self._fcomm = int(MPI.COMM_SELF.py2f())
        self._plans: Dict[Tuple, Tuple[np.ndarray, List[ConcreteStep]]] = {}
        self._signatures: Dict[Tuple, Dict[str, Any]] = {}    # checked call signatures -> symbol values
        # Device-argument variants (distsdfg.lowering.device_args) by the arrays they take on the
        # device; None where the variant cannot run here (the call goes through the host).
        self._variants: Dict[Tuple[str, ...], Optional["DistributedProgram"]] = {}
        # The per-rank symbols the compiled program takes packed in one array, in order (or None).
        self._packed = packed_names(compiled.sdfg) if getattr(compiled, "sdfg", None) is not None else None
        self._start = CallStart(comm, self.lowered.original_name)      # collective, as the constructor is
        # Built with the trace recorder: every call appends every rank's events to this file.
        self.trace = TraceFile.open(trace, comm) if trace else None
        # What this rank prints if it crashes inside the compiled program (runtime.crash).
        self._crash = attach_crash_report(compiled, self.lowered, comm_of().rank)

    # -- argument checking (rank 0) ---------------------------------------------------------------
    @functools.cached_property
    def _arglist(self):
        """The SDFG's arguments, computed once: DaCe derives them from every state's symbols."""
        return self.sdfg.arglist()

    @functools.cached_property
    def _free_symbols(self) -> Tuple[str, ...]:
        return tuple(sorted(str(s) for s in self.sdfg.free_symbols))

    def _check_inputs(self, kwargs) -> Optional[str]:
        from dace import data as dt
        sdfg = self.sdfg
        unknown = sorted(k for k in kwargs if k not in self._arglist and k not in sdfg.symbols)
        if unknown:
            names = ", ".join(k for k in self._arglist if k != PLAN_ARRAY and not k.startswith("__"))
            return (f"{self.lowered.original_name} has no argument `{unknown[0]}` (its arguments: {names}; "
                    f"size symbols are passed by name too)")
        for name, desc in self._arglist.items():
            if name in kwargs and kwargs[name] is not None and not isinstance(desc, dt.Scalar) \
                    and name not in self.lowered.boundary and not is_array(kwargs[name]):
                return (f"argument `{name}` must be a NumPy array of shape {tuple(desc.shape)}, got "
                        f"{type(kwargs[name]).__name__}; convert it with np.asarray")
            if isinstance(desc, dt.Scalar) and name not in RUNTIME_ARGS and is_array(kwargs.get(name)) \
                    and np.ndim(kwargs[name]) > 0 and desc.storage != dace.dtypes.StorageType.GPU_Global:
                # DaCe would raise a bare TypeError (a 0-d array passes, as in DaCe)
                return (f"argument `{name}` is a {desc.dtype.to_string()} scalar, got an array of shape "
                        f"{tuple(kwargs[name].shape)}; pass a number ({name}={name}_array.item() for one element)")
            if name in RUNTIME_ARGS or isinstance(desc, dt.Scalar) and name not in kwargs and name in sdfg.symbols:
                continue
            if name not in kwargs:
                if name.startswith("__return"):
                    continue
                return f"missing argument `{name}` of {self.lowered.original_name}"
            if kwargs[name] is None and not isinstance(desc, dt.Scalar) and name not in self.lowered.boundary:
                return (f"argument `{name}` is None on rank 0, which passes the arrays whole (root placement); "
                        f"only the other ranks may pass None or leave arrays out")
        return None

    def _validate_arrays(self, arrays, values, reshapes: Optional[Dict[str, tuple]] = None) -> Optional[str]:
        """Shapes, dtypes and layouts of the array arguments; an array whose shape differs from the
        program's only by dimensions of size 1 (NPBench's nbody passes ``mass`` as (N, 1) for
        ``[N]``), C-contiguous, is accepted as DaCe accepts it: its name and the program's shape go
        into ``reshapes`` and the call passes a view of that shape (same memory)."""
        from dace import data as dt
        for name, arr in arrays.items():
            desc = self.sdfg.arrays.get(name)
            if desc is None or isinstance(desc, dt.Scalar) or name in self.lowered.boundary:
                continue
            if not is_array(arr):
                return f"argument `{name}` must be a NumPy array, got {type(arr).__name__}"
            try:
                want = tuple(evaluate(str(s), values) for s in desc.shape)
            except KeyError as exc:
                return f"size symbol {exc} is missing: pass it as a keyword argument (e.g. {exc.args[0].split()[1]}=...)"
            if tuple(arr.shape) != want:
                if not _same_but_unit_dims(arr.shape, want) or reshapes is None:
                    return f"argument `{name}` has shape {tuple(arr.shape)} but the program expects {want}"
                if not arr.flags.c_contiguous:
                    return (f"argument `{name}` has shape {tuple(arr.shape)} where the program expects {want}, which "
                            f"is the same but for dimensions of size 1, and it is not C-contiguous: pass "
                            f"np.ascontiguousarray({name}).reshape({want}) (and copy results back if the program "
                            f"writes it)")
                reshapes[name] = want
            want_dt = np.dtype(desc.dtype.as_numpy_dtype())
            if arr.dtype != want_dt:
                return f"argument `{name}` has dtype {arr.dtype} but the program expects {want_dt}; convert it with .astype"
            if not arr.flags.c_contiguous:
                return (f"argument `{name}` is not C-contiguous (a transposed, Fortran-ordered or strided view); "
                        f"pass np.ascontiguousarray({name}) and copy results back if the program writes it")
        missing = [s for s in self._free_symbols if s not in values and not s.startswith("__dsdfg")]
        if missing:
            return f"size symbol(s) {', '.join(missing)} have no value: pass them as keyword arguments"
        return None

    def plan(self, values: Dict[str, int]):
        """(plan table, solved steps, symbols of this rank's home buffers) for concrete sizes; per-rank
        values (data-bounded blocks, ``distsdfg.solver.inspector``) are part of the key."""
        key = tuple(sorted((k, v if isinstance(v, (int, np.integer)) else tuple(v.tolist()))
                           for k, v in values.items() if isinstance(v, (int, np.integer, np.ndarray))))
        if key not in self._plans:
            if len(self._plans) >= 64:      # data-bounded blocks change with the data
                self._plans.pop(next(iter(self._plans)))
            size = 1 if self.lowered.rank0_only else self.comm.size
            steps = solve_plan(self.lowered, values, size, rank=self.comm.rank)
            homes = solve_homes(self.lowered.homes, values, size)
            syms: Dict[str, int] = {}
            for h in homes.values():
                syms.update(h.symbols(self.comm.rank))
            blocks = {x: homes[h].shapes[self.comm.rank] for x, h in self.lowered.boundary.items()}
            self._plans[key] = (encode_plan(steps, self.comm.rank), steps, syms, blocks)
        return self._plans[key]

    def layout(self, array: str, **sizes):
        """``distsdfg.layout`` of ``array`` on this program's communicator."""
        return _layout(self, array, **sizes)

    @functools.cached_property
    def _persistent(self) -> bool:
        from dace import dtypes
        return any(d.lifetime == dtypes.AllocationLifetime.Persistent for d in self.sdfg.arrays.values())

    def _reinitialise_if_sizes_changed(self, call) -> None:
        """DaCe allocates persistent buffers once, sized by the first call's symbols, and never
        again: when they change, finalise the program so that the next call initialises it anew."""
        if not self._persistent:
            return
        key = tuple((s, call.get(s)) for s in self._free_symbols)
        if getattr(self, "_init_key", key) != key:
            dc.reinitialise(self._compiled)
        self._init_key = key

    @functools.cached_property
    def _written(self) -> frozenset:
        """The program's own (non-transient) arrays that some state writes."""
        return frozenset(n.data for state in self.sdfg.states() for n in state.data_nodes()
                         if not self.sdfg.arrays[n.data].transient and state.in_degree(n) > 0)

    #: report the first call if it is long (``runtime.progress``): None follows $DISTSDFG_PROGRESS
    progress: Optional[bool] = None

    def __call__(self, *args, **kwargs):
        if not getattr(self, "_called", False):     # the first call: plans the communication, touches the blocks
            self._called = True
            with progress.phase(f"{self.lowered.original_name}: first run", verbose=self.progress, comm=self.comm):
                return self._invoke(args, kwargs)
        return self._invoke(args, kwargs)

    def _invoke(self, args, kwargs):
        if args:
            names = [n for n in self.sdfg.arg_names if n != PLAN_ARRAY]
            problem = None
            if len(args) > len(names):
                problem = (f"{self.lowered.original_name} takes {len(names)} positional arguments "
                           f"({', '.join(names)}), got {len(args)}")
            elif sorted(set(names[:len(args)]) & set(kwargs)):
                problem = (f"argument `{sorted(set(names[:len(args)]) & set(kwargs))[0]}` is given both by "
                           f"position and by name")
            if problem is not None:         # every rank raises it (a rank raising alone would leave the others waiting)
                return self._call(kwargs, problem)
            kwargs.update(dict(zip(names, args)))
        if self.lowered.target == Target.GPU and not getattr(self.lowered, "deferred", False):
            return self._call(kwargs)      # CuPy arguments stay on the device where they can (_call)
        devices = to_host(kwargs)
        if not devices:
            return self._call(kwargs)
        return back_to_device(devices, kwargs, self._written, self._call(kwargs))

    def device_variant(self, names: Tuple[str, ...]) -> Optional["DistributedProgram"]:
        """Collective: the variant of this GPU program that takes the arrays ``names`` in device
        memory (``distsdfg.lowering.device_args``), lowered and compiled at its first use on every
        rank (its steps touch rank 0's device arrays only on rank 0; other ranks pass stand-ins); None
        where the lowering refuses it (the call then goes through the host)."""
        if names not in self._variants:
            from ..lowering.pipeline import lower_sdfg
            low = self.lowered
            try:
                sdfg = lower_sdfg(dc.from_json(low.source), low.schedule, target=Target.GPU, comm=low.comm,
                                  device_args=names)
            except errors.UnsupportedProgramError:
                sdfg = None
            self._variants[names] = compile_distributed(sdfg, comm=self.comm, threads_per_rank=self.threads_per_rank) \
                if sdfg is not None else None
        return self._variants[names]

    def _checked(self, kwargs, arrays, given, P):
        """Rank 0: (symbol values, error or None, arguments to reshape) of a call. A warm call with
        the same argument names, shapes, dtypes, contiguity and size symbols as an earlier good one
        reuses its answer, so it does no symbolic work (sympy) at all."""
        key = (P, tuple(sorted(kwargs)),
               tuple(sorted((k, a.shape, a.dtype.str, a.flags.c_contiguous) for k, a in arrays.items())),
               tuple(sorted((k, int(v) if isinstance(v, (int, np.integer)) else repr(v)) for k, v in given.items())))
        hit = self._signatures.get(key)
        if hit is not None:
            return dict(hit[0]), None, dict(hit[1])
        values, error, reshapes = None, None, {}
        try:
            if self.lowered.nprocs > P:
                raise CommunicatorSizeError(
                    f"the schedule needs {self.lowered.nprocs} ranks but the communicator has {P}: run with "
                    f"`mpiexec -n {self.lowered.nprocs}` or lower with a smaller grid")
            values = symbol_values(self.sdfg, arrays, given)
            msg = self._check_inputs(kwargs) or self._validate_arrays(arrays, values, reshapes)
            error = ("InputError", msg) if msg else None
        except DistributedLoweringError as exc:
            error = (type(exc).__name__, str(exc))
        except Exception as exc:
            error = ("InputError", f"{type(exc).__name__}: {exc}")
        if error is None and len(self._signatures) < 64:
            self._signatures[key] = (dict(values), dict(reshapes))
        return values, error, reshapes

    @functools.cached_property
    def _rank_symbols(self) -> Dict[str, int]:
        """This rank's coordinates in every kernel's grid, by rank symbol."""
        out: Dict[str, int] = {}
        rank = self.comm.rank
        for kg in self.lowered.kernels:
            inside = rank < int(np.prod(kg.grid))
            coords = np.unravel_index(rank, kg.grid) if inside else kg.grid
            for s, c in zip(kg.rank_syms, coords):
                if s:
                    out[s] = int(c)
            if getattr(kg, "member", ""):
                out[kg.member] = int(inside)
        return out

    def _call(self, kwargs, own_error: Optional[str] = None):
        t_call = time.perf_counter()
        self._start.arrive()        # every rank is here (or the job is aborted, naming the missing ranks)
        if self.lowered.target == Target.GPU and own_error is None:
            try:
                if not gpu_available():     # DaCe's CUDA runtime would kill the process
                    raise DistributedLoweringError(
                        f"`{self.lowered.original_name}` was lowered for target='gpu' but rank {self.comm.rank} sees "
                        f"no CUDA GPU (no driver or no device); run it on GPU nodes or lower with target='cpu'")
                if self.lowered.comm == Buffers.DEVICE:
                    require_cuda_aware_mpi(self.lowered.original_name)
            except DistributedLoweringError as exc:
                own_error = str(exc)
        comm, rank, P = self.comm, self.comm.rank, self.comm.size
        mine = scalar_arguments(kwargs, self.sdfg.symbols)      # checked against rank 0's in the exchange
        if self.lowered.boxed:      # complex scalars travel as one-element arrays (dace_compat.scalars)
            box_arguments(kwargs, self.lowered.boxed, self.sdfg)
        arrays = {k: v for k, v in kwargs.items() if is_array(v) and k not in self.lowered.boundary}
        given = {k: v for k, v in kwargs.items() if not is_array(v) and k in self.sdfg.symbols}
        error, values, reshapes, variant = None, None, None, ()
        if rank == 0 and own_error is None:
            values, error, reshapes = self._checked(kwargs, arrays, given, P)
            if error is None and getattr(self.lowered, "data_bounds", None):
                values, error = inspect_call(self.lowered, arrays, values, P)
            if any(on_device(a) for a in arrays.values()):
                variant = self._variant_arguments(arrays)
        # Scalar arguments steer loops and branches: every rank takes rank 0's (a rank passing another value
        # raises ScalarMismatchError on every rank, in the exchange).
        scalars = {k: v for k, v in kwargs.items() if not is_array(v) and k not in self.sdfg.symbols}
        error, values, scalars, reshapes, variant = self._start.exchange(
            (error, values, scalars if rank == 0 else None, reshapes, variant), own_error,
            values if rank == 0 and values else given, mine)      # rank 0's sizes, also those read off its arrays
        if error is not None:
            raise getattr(errors, error[0], InputError)(error[1])
        if variant and variant != self.lowered.device_args:    # rank 0 passed CuPy arrays
            program = self.device_variant(variant)
            if program is not None:
                return program._call(kwargs)
        if self.lowered.target == Target.GPU:    # what no variant takes on the device goes through the host
            devices = to_host(kwargs, self.lowered.device_args)
            if devices:
                out = self._run(kwargs, values, scalars, reshapes, t_call)
                return back_to_device(devices, kwargs, self._written, out)
        return self._run(kwargs, values, scalars, reshapes, t_call)

    def _variant_arguments(self, arrays) -> Tuple[str, ...]:
        from ..lowering.device_args import variant_arguments
        return variant_arguments(self.sdfg, self.lowered, [k for k, v in arrays.items() if on_device(v)])

    def _run(self, kwargs, values, scalars, reshapes, t_call):
        comm, rank = self.comm, self.comm.rank
        kwargs.update(scalars)
        for name, shape in reshapes.items():     # size-1 dimensions only: a view of the same memory
            a = kwargs.get(name)
            if is_array(a) and a.shape != shape and a.size == int(np.prod(shape)):
                kwargs[name] = a.reshape(shape)
        if self.lowered.rank0_only and rank != 0:
            if self.trace is not None:      # the trace's gather is collective: an empty part
                self.trace.add_call(self, values, time.time() * 1e6, time.time() * 1e6, None)
            return self._root_args.nothing()
        table, _, home_syms, blocks = self.plan(values)
        if STEP_TIMES.get() and rank == 0 and not getattr(self, "_legend_shown", False):
            self._legend_shown = True
            print(step_legend(self.lowered), file=sys.stderr, flush=True)
        if blocks:      # distributed placement: every rank checks its own blocks, all agree
            mine = (check_blocks(self.sdfg, self.lowered, kwargs, blocks, rank), replica_values(self.lowered, kwargs))
            gathered = comm.allgather(mine)
            msgs = [m for m, _ in gathered if m] or [unequal_replicas(self.lowered, [v for _, v in gathered])]
            if msgs[0]:
                raise InputError(msgs[0])
        call = dict(kwargs)
        call.update({k: values[k] for k in self.sdfg.symbols if k in values})    # rank 0's sizes
        if rank != 0:       # arrays at rank 0 this rank left out: stand-ins (distsdfg.runtime.root_args)
            self._root_args.fill(call, values)
        call.update(self._rank_symbols)
        for db in getattr(self.lowered, "data_bounds", ()):     # this rank's data-bounded block (distsdfg.solver.inspector)
            call[db.lo] = int(values[db.lo][rank])
        call.update(home_syms)
        call[PLAN_ARRAY] = table
        call[PLAN_LEN] = int(table.shape[0])
        call[COMM_ARG] = self._fcomm
        if self._packed is not None:      # the per-rank symbols in one array (dace_compat.pack)
            call[PACKED] = np.fromiter((call[s] for s in self._packed), np.int64, len(self._packed))
        self._reinitialise_if_sizes_changed(call)
        blas.use_threads(self.threads_per_rank)
        if self.lowered.device_args and any(is_cupy(call.get(a)) for a in self.lowered.device_args):
            wait_for_callers_stream()
        dc.fresh_return_arrays(self._compiled)     # results are handed over, not copied
        t_program = time.perf_counter()
        t_wall = time.time() * 1e6
        if self._crash is not None:
            self._crash.enter()
        try:
            if blocks or reshapes:      # a rank's block is often a view (a slice of a memory map); a reshaped
                # argument is one; both checked contiguous above
                with dc.allow_view_arguments():
                    out = dc.call_compiled(self._compiled, call)
            else:
                out = dc.call_compiled(self._compiled, call)
        finally:
            if self._crash is not None:
                self._crash.leave()
        if self.trace is not None:
            self.trace.add_call(self, values, t_wall, time.time() * 1e6, self._compiled)
        if STEP_TIMES.get():
            now = time.perf_counter()
            print(f"[distsdfg] rank {rank} call of {self.lowered.original_name}: {(now - t_call) * 1e3:.3f} ms, "
                  f"{(now - t_program) * 1e3:.3f} ms of it in the compiled program", file=sys.stderr, flush=True)
        return self._root_args.results(out, rank, copy=False)

    @functools.cached_property
    def _root_args(self):
        return RootArguments(self.sdfg, self.lowered)


def step_legend(low) -> str:
    """What each numbered step of the step timings moves, and for which kernel and source line."""
    lines = [f"[distsdfg] steps of {low.original_name}:"]
    for st in low.steps:
        source = low.kernel_source(st)
        where = f" ({source})" if source else ""
        lines.append(f"[distsdfg]   step {st.index}: {st.kind} `{st.array}` for `{st.kernel_label}`{where}")
    return "\n".join(lines)


def _same_but_unit_dims(got, want) -> bool:
    """Two shapes equal once their dimensions of size 1 are dropped (same elements, same order)."""
    return tuple(d for d in got if d != 1) == tuple(int(d) for d in want if d != 1)


@with_numpy_semantics
def compile_distributed(sdfg: SDFG, *, comm=None, verbose: Optional[bool] = None,
                        rebuild: bool = False, threads_per_rank: Optional[int] = None,
                        trace: Optional[str] = None) -> DistributedProgram:
    """Build on rank 0 of ``comm`` (or reuse an identical build), load on every rank (collective over
    ``comm``, default ``MPI.COMM_WORLD``). The program runs on ``comm``: its ranks are the ranks the
    plan speaks of, and every communication step uses it (see ``rewriter.COMM_ARG``).

    ``trace`` (default ``$DISTSDFG_TRACE``): a file that every call appends each rank's kernels and
    steps to, as a Chrome trace (``runtime.trace``); the program is built with their timers.

    Every rank runs with ``threads_per_rank`` OpenMP and MKL threads (default 1, or
    ``$DISTSDFG_THREADS_PER_RANK``)."""
    comm = comm_of(comm)
    lowered_of(sdfg)
    trace = idle_bcast(comm, trace if trace is not None else TRACE_FILE.get()) or None
    threads = blas.threads_per_rank(threads_per_rank)
    blas.configure()
    blas.use_threads(threads)      # before the BLAS is loaded: OpenBLAS's threads, MKL's layer are fixed then
    dc.ensure_mpi_on_path()
    shown = verbose          # progress (None: $DISTSDFG_PROGRESS); True also logs the build's steps
    if verbose is None:
        verbose = os.environ.get("DISTSDFG_VERBOSE", "0") not in ("", "0")
    check_same_plan(comm, sdfg, lowered_of(sdfg))      # every rank raises if any rank lowered it otherwise
    folder, error = None, None
    compiled = None
    if comm.rank == 0:
        kernels = len(lowered_of(sdfg).kernels)
        try:
            with progress.phase(f"{lowered_of(sdfg).original_name}: compile ({kernels} kernel"
                                f"{'s' if kernels != 1 else ''})", verbose=False if verbose else shown):
                compiled, folder = build(sdfg, verbose=verbose, rebuild=rebuild, trace=bool(trace),
                                         threads=threads)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    # Every rank plans from rank 0's lowering: the binary was built from it.
    folder, error, low = idle_bcast(comm, (folder, error, lowered_of(sdfg) if comm.rank == 0 else None))
    sdfg._distsdfg = low
    if error is not None:
        raise DistributedLoweringError(f"compiling `{sdfg.name}` failed on rank 0: {error}")
    if comm.rank != 0:
        compiled = load_build(folder)
    comm.Barrier()
    prog = DistributedProgram(sdfg, compiled, comm, threads, trace)
    prog.progress = shown
    return prog
