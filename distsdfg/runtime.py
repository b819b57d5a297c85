"""Compile once on rank 0, load everywhere, and run: the wrapper every rank calls."""
from __future__ import annotations

import functools
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from dace.sdfg import SDFG

from . import blas
from . import dace_compat as dc
from . import errors
from .errors import CommunicatorSizeError, DistributedLoweringError, InputError
from .lowering import PLAN_ARRAY, PLAN_LEN, Lowered
from .plan import ConcreteStep, encode_plan, evaluate, solve_homes, solve_step

__all__ = ["DistributedProgram", "compile_distributed", "solve_plan", "symbol_values"]


def _comm(comm=None):
    from mpi4py import MPI
    return comm if comm is not None else MPI.COMM_WORLD


def lowered_of(sdfg: SDFG) -> Lowered:
    low = getattr(sdfg, "_distsdfg", None)
    if low is None:
        raise DistributedLoweringError(f"SDFG `{sdfg.name}` has not been lowered; call distsdfg.lower(sdfg, schedule) "
                                       f"first")
    return low


def solve_plan(low: Lowered, values: Dict[str, int], nranks: int) -> List[ConcreteStep]:
    for key, axis, extent, parts in low.even_checks:
        n = evaluate(extent, values)
        if n % parts:
            raise DistributedLoweringError(
                f"map `{key}` axis {axis} (extent {n}) is split {parts} ways, which does not divide {n}; this "
                f"library node reduces over the axis and needs even blocks: use sizes or a grid that divide evenly")
    homes = solve_homes(low.homes, values, nranks)
    return [solve_step(s, values, nranks, homes) for s in low.steps]


def symbol_values(sdfg: SDFG, arrays: Dict[str, Any], given: Dict[str, Any]) -> Dict[str, int]:
    """Concrete values of the program's size symbols: given ones, then those read off array shapes."""
    import sympy
    values = {k: int(v) for k, v in given.items()}
    for name, arr in arrays.items():
        desc = sdfg.arrays.get(name)
        if desc is None or not hasattr(arr, "shape"):
            continue
        for dim, n in zip(desc.shape, arr.shape):
            e = sympy.sympify(dim)
            fs = [s for s in e.free_symbols if str(s) not in values]
            if len(fs) == 1:
                sol = sympy.solve(sympy.Eq(e.subs({s: values[str(s)] for s in e.free_symbols if str(s) in values}), n),
                                  fs[0])
                if len(sol) == 1 and sympy.sympify(sol[0]).is_Integer:
                    values[str(fs[0])] = int(sol[0])
    for k, v in sdfg.constants.items():
        values.setdefault(k, int(v) if np.isscalar(v) and float(v) == int(v) else v)
    return values


def _is_cupy(value) -> bool:
    """A CuPy array (checked without importing CuPy)."""
    return type(value).__module__.split(".")[0] == "cupy" and hasattr(value, "get")


class DistributedProgram:
    """A lowered SDFG compiled once; call it on every rank with the same arguments.

    Arguments are NumPy arrays or, on GPU machines, CuPy arrays: those are copied to the host for
    the call (communication is staged through host memory), arrays the program writes are copied
    back into them, and the results come back as CuPy arrays.
    """

    def __init__(self, sdfg: SDFG, compiled, comm, threads_per_rank: int = 1):
        self.sdfg = sdfg
        self.threads_per_rank = threads_per_rank
        self.lowered = lowered_of(sdfg)
        self._compiled = compiled
        self.comm = comm
        self._plans: Dict[Tuple, Tuple[np.ndarray, List[ConcreteStep]]] = {}

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
        for name, desc in self._arglist.items():
            if name == PLAN_ARRAY or isinstance(desc, dt.Scalar) and name not in kwargs and name in sdfg.symbols:
                continue
            if name not in kwargs:
                if name.startswith("__return"):
                    continue
                return f"missing argument `{name}` of {self.lowered.original_name}"
        return None

    def _validate_arrays(self, arrays, values) -> Optional[str]:
        from dace import data as dt
        for name, arr in arrays.items():
            desc = self.sdfg.arrays.get(name)
            if desc is None or isinstance(desc, dt.Scalar) or name in self.lowered.boundary:
                continue
            if not isinstance(arr, np.ndarray):
                return f"argument `{name}` must be a NumPy array, got {type(arr).__name__}"
            try:
                want = tuple(evaluate(str(s), values) for s in desc.shape)
            except KeyError as exc:
                return f"size symbol {exc} is missing: pass it as a keyword argument (e.g. {exc.args[0].split()[1]}=...)"
            if tuple(arr.shape) != want:
                return f"argument `{name}` has shape {tuple(arr.shape)} but the program expects {want}"
            want_dt = np.dtype(desc.dtype.as_numpy_dtype())
            if arr.dtype != want_dt:
                return f"argument `{name}` has dtype {arr.dtype} but the program expects {want_dt}; convert it with .astype"
        missing = [s for s in self._free_symbols if s not in values and not s.startswith("__dsdfg")]
        if missing:
            return f"size symbol(s) {', '.join(missing)} have no value: pass them as keyword arguments"
        return None

    def plan(self, values: Dict[str, int]):
        """(plan table, solved steps, symbols of this rank's home buffers) for concrete sizes."""
        key = tuple(sorted((k, v) for k, v in values.items() if isinstance(v, (int, np.integer))))
        if key not in self._plans:
            steps = solve_plan(self.lowered, values, self.comm.size)
            homes = solve_homes(self.lowered.homes, values, self.comm.size)
            syms: Dict[str, int] = {}
            for h in homes.values():
                syms.update(h.symbols(self.comm.rank))
            blocks = {x: homes[h].shapes[self.comm.rank] for x, h in self.lowered.boundary.items()}
            self._plans[key] = (encode_plan(steps, self.comm.rank), steps, syms, blocks)
        return self._plans[key]

    def layout(self, array: str, **sizes):
        """``distsdfg.layout`` of ``array`` on this program's communicator."""
        from .placement import layout
        return layout(self, array, **sizes)

    def _check_blocks(self, kwargs, blocks) -> Optional[str]:
        """This rank's distributed-placement arguments: present, of its block's shape and the dtype."""
        for x, shape in blocks.items():
            arr = kwargs.get(x)
            if arr is None:
                if x.startswith("__return"):
                    continue
                return f"missing argument `{x}` (rank {self.comm.rank} passes its block of shape {shape})"
            if not isinstance(arr, np.ndarray):
                return f"argument `{x}` must be a NumPy array (this rank's block), got {type(arr).__name__}"
            if tuple(arr.shape) != tuple(shape):
                return (f"argument `{x}` on rank {self.comm.rank} has shape {tuple(arr.shape)}, but this rank's block "
                        f"is {tuple(shape)} (distributed placement: pass distsdfg.layout(sdfg, {x!r}, ...).block(...) "
                        f"or load it with .load(path, rank))")
            want = np.dtype(self.sdfg.arrays[x].dtype.as_numpy_dtype())
            if arr.dtype != want:
                return f"argument `{x}` has dtype {arr.dtype} but the program expects {want}; convert it with .astype"
            if not arr.flags.c_contiguous:
                return f"argument `{x}` on rank {self.comm.rank} is not contiguous; pass np.ascontiguousarray(...)"
        return None

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

    def __call__(self, *args, **kwargs):
        if args:
            kwargs.update(dict(zip(self.sdfg.arg_names, args)))
        devices = {k: v for k, v in kwargs.items() if _is_cupy(v)}
        if not devices:
            return self._call(kwargs)
        import cupy
        kwargs.update({k: v.get() for k, v in devices.items()})
        out = self._call(kwargs)
        for k, v in devices.items():
            if k in self._written:
                v[...] = cupy.asarray(kwargs[k])
        if isinstance(out, tuple):
            return tuple(cupy.asarray(o) if isinstance(o, np.ndarray) else o for o in out)
        return cupy.asarray(out) if isinstance(out, np.ndarray) else out

    def _call(self, kwargs):
        if self.lowered.target == "gpu":
            from .gpu import gpu_available
            if not gpu_available():     # DaCe's CUDA runtime would kill the process
                raise DistributedLoweringError(
                    f"`{self.lowered.original_name}` was lowered for target='gpu' but rank {self.comm.rank} sees no "
                    f"CUDA GPU (no driver or no device); run it on GPU nodes or lower with target='cpu'")
            if self.lowered.comm == "device":
                from .gpu import require_cuda_aware_mpi
                require_cuda_aware_mpi(self.lowered.original_name)
        comm, rank, P = self.comm, self.comm.rank, self.comm.size
        arrays = {k: v for k, v in kwargs.items() if isinstance(v, np.ndarray) and k not in self.lowered.boundary}
        given = {k: v for k, v in kwargs.items() if not isinstance(v, np.ndarray) and k in self.sdfg.symbols}
        error, values = None, None
        if rank == 0:
            try:
                if self.lowered.nprocs > P:
                    raise CommunicatorSizeError(
                        f"the schedule needs {self.lowered.nprocs} ranks but the communicator has {P}: run with "
                        f"`mpiexec -n {self.lowered.nprocs}` or lower with a smaller grid")
                values = symbol_values(self.sdfg, arrays, given)
                msg = self._check_inputs(kwargs) or self._validate_arrays(arrays, values)
                error = ("InputError", msg) if msg else None
            except DistributedLoweringError as exc:
                error = (type(exc).__name__, str(exc))
            except Exception as exc:
                error = ("InputError", f"{type(exc).__name__}: {exc}")
        # Scalar arguments steer loops and branches: every rank takes rank 0's.
        scalars = {k: v for k, v in kwargs.items() if not isinstance(v, np.ndarray) and k not in self.sdfg.symbols}
        error, values, scalars = comm.bcast((error, values, scalars if rank == 0 else None), root=0)
        if error is not None:
            raise getattr(errors, error[0], InputError)(error[1])
        kwargs.update(scalars)
        table, _, home_syms, blocks = self.plan(values)
        if blocks:      # distributed placement: every rank checks its own blocks, all agree
            msgs = [m for m in comm.allgather(self._check_blocks(kwargs, blocks)) if m]
            if msgs:
                raise InputError(msgs[0])
        call = dict(kwargs)
        for k in self.sdfg.symbols:
            if k in values and k not in call:
                call[k] = values[k]
        for kg in self.lowered.kernels:
            coords = (np.unravel_index(rank, kg.grid) if rank < int(np.prod(kg.grid)) else kg.grid)
            for s, c in zip(kg.rank_syms, coords):
                if s:
                    call[s] = int(c)
        call.update(home_syms)
        call[PLAN_ARRAY] = table
        call[PLAN_LEN] = int(table.shape[0])
        self._reinitialise_if_sizes_changed(call)
        blas.use_threads(self.threads_per_rank)
        if blocks:      # a rank's block is often a view (a slice of a memory map); checked contiguous above
            with dc.allow_view_arguments():
                out = self._compiled(**call)
        else:
            out = self._compiled(**call)
        if isinstance(out, tuple):
            return tuple(np.copy(o) if isinstance(o, np.ndarray) else o for o in out)
        return np.copy(out) if isinstance(out, np.ndarray) else out


def _log(msg: str, verbose: bool):
    if verbose:
        print(f"[distsdfg] {msg}", file=sys.stderr, flush=True)


STAMP = "distsdfg.stamp"


def build_key(sdfg: SDFG) -> str:
    """What a build depends on: the generated code, our runtime header, DaCe's version, the BLAS."""
    import copy
    import hashlib

    import dace
    from dace.codegen import codegen

    from .mpi.environment import INCLUDE_DIR
    h = hashlib.sha1(dace.__version__.encode())
    h.update(blas.configure().key().encode())
    for obj in codegen.generate_code(copy.deepcopy(sdfg)):
        h.update(obj.name.encode())
        h.update(obj.clean_code.encode())
    for name in sorted(os.listdir(INCLUDE_DIR)):
        with open(os.path.join(INCLUDE_DIR, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def _cached(folder: str, key: str, name: str) -> bool:
    from dace.config import Config
    lib = os.path.join(folder, "build", f"lib{name}.{Config.get('compiler', 'library_extension')}")
    try:
        with open(os.path.join(folder, STAMP)) as f:
            return f.read().strip() == key and os.path.exists(lib) and os.path.exists(
                os.path.join(folder, "program.sdfg"))
    except OSError:
        return False


def build(sdfg: SDFG, *, verbose: bool = False, rebuild: bool = False):
    """Compile ``sdfg`` unless its build folder already holds this exact build; returns (compiled, folder).

    The stamp is written only after a complete build, so an interrupted compile is rebuilt
    on the next run rather than loaded half-made.
    """
    t0 = time.time()
    if getattr(getattr(sdfg, "_distsdfg", None), "target", "cpu") == "gpu":
        from .gpu import build_settings
        with build_settings(sdfg.build_folder):
            return _build(sdfg, verbose, rebuild, t0)
    return _build(sdfg, verbose, rebuild, t0)


def _build(sdfg: SDFG, verbose: bool, rebuild: bool, t0: float):
    from dace.sdfg.utils import load_precompiled_sdfg
    blas.check_program(sdfg)
    folder = sdfg.build_folder
    key = build_key(sdfg)
    rebuild = rebuild or os.environ.get("DISTSDFG_REBUILD", "0") not in ("", "0")
    if not rebuild and _cached(folder, key, sdfg.name):
        _log(f"{sdfg.name}: reusing the build in {folder} ({time.time() - t0:.1f}s)", verbose)
        return load_precompiled_sdfg(folder), folder
    try:
        os.remove(os.path.join(folder, STAMP))
    except OSError:
        pass
    _log(f"{sdfg.name}: generating and compiling C++ ...", verbose)
    compiled = sdfg.compile(validate=True)
    with open(os.path.join(folder, STAMP), "w") as f:
        f.write(key)
    _log(f"{sdfg.name}: compiled in {time.time() - t0:.1f}s", verbose)
    return compiled, folder


def compile_distributed(sdfg: SDFG, *, comm=None, verbose: Optional[bool] = None,
                        rebuild: bool = False, threads_per_rank: Optional[int] = None) -> DistributedProgram:
    """Build on rank 0 (or reuse an identical build), load on every rank (collective over ``comm``).

    Every rank runs with ``threads_per_rank`` OpenMP and MKL threads (default 1, or
    ``$DISTSDFG_THREADS_PER_RANK``)."""
    comm = _comm(comm)
    lowered_of(sdfg)
    threads = blas.threads_per_rank(threads_per_rank)
    blas.configure()
    blas.use_threads(threads)      # before MKL is loaded: it picks its threading layer then
    dc.ensure_mpi_on_path()
    if verbose is None:
        verbose = os.environ.get("DISTSDFG_VERBOSE", "0") not in ("", "0")
    folder, error = None, None
    compiled = None
    if comm.rank == 0:
        try:
            compiled, folder = build(sdfg, verbose=verbose, rebuild=rebuild)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    # Every rank plans from rank 0's lowering: the binary was built from it.
    folder, error, low = comm.bcast((folder, error, lowered_of(sdfg) if comm.rank == 0 else None), root=0)
    sdfg._distsdfg = low
    if error is not None:
        raise DistributedLoweringError(f"compiling `{sdfg.name}` failed on rank 0: {error}")
    if comm.rank != 0:
        from dace.sdfg.utils import load_precompiled_sdfg
        compiled = load_precompiled_sdfg(folder)
    comm.Barrier()
    return DistributedProgram(sdfg, compiled, comm, threads)
