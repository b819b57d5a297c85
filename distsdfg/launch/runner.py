"""``distsdfg run``: what every rank executes (lower, compile once, call, check).

The command line spawns ``mpiexec`` (or ``srun`` inside a Slurm allocation) running
``python -m mpi4py -m distsdfg run ... --here``; ``--here`` runs in the current MPI world.
A program module may define ``inputs(sizes) -> dict`` (the keyword arguments to call the
program with); otherwise every array argument gets random data of its shape and dtype.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import time
import traceback
from typing import Dict, List, Optional, Sequence

import numpy as np

__all__ = ["load_program", "parse_program", "parse_schedule", "random_inputs", "sizes_from_inputs", "run_program",
           "record_failure", "recorded_failures", "compare_outputs", "written_arguments", "relative_error", "tolerance"]


def load_program(spec: str):
    """``FILE.py[:FUNCTION]`` -> (the @dace.program, its module)."""
    import dace

    from ..errors import CommandLineError
    path, _, func = spec.partition(":")
    if not os.path.isfile(path):
        raise CommandLineError(f"no program file {path!r}: give FILE.py[:FUNCTION], a Python file that defines a "
                               f"@dace.program")
    modname = os.path.splitext(os.path.basename(path))[0]
    loader = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(loader)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        loader.loader.exec_module(mod)
    except Exception as exc:
        raise CommandLineError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    progs = {k: v for k, v in vars(mod).items() if isinstance(v, dace.frontend.python.parser.DaceProgram)}
    if func:
        if not hasattr(mod, func):
            raise CommandLineError(f"{path} has no function {func!r} (its dace programs: "
                                   f"{', '.join(sorted(progs)) or 'none'})")
        prog = getattr(mod, func)
        if not isinstance(prog, dace.frontend.python.parser.DaceProgram):
            raise CommandLineError(f"{path}:{func} is a {type(prog).__name__}, not a @dace.program; decorate it "
                                   f"with @dace.program")
        return prog, mod
    if len(progs) != 1:
        raise CommandLineError(f"{path} defines {len(progs)} dace programs"
                               f"{' (' + ', '.join(sorted(progs)) + ')' if progs else ''}; name one as "
                               f"{path}:FUNCTION")
    return next(iter(progs.values())), mod


def parse_program(prog):
    """``prog.to_sdfg()``; DaCe's parse failures become a ``ProgramParseError`` naming the line and a fix."""
    from ..dace_compat.frontend_errors import parse
    return parse(prog)


def parse_schedule(items: Optional[Sequence[str]], sdfg):
    """``KEY=2,2,1 ...`` (keys or labels), a ``FILE.json``, or None/empty (all ones)."""
    import distsdfg
    if not items:
        return {}
    from ..errors import CommandLineError
    if len(items) == 1 and items[0].endswith(".json"):
        if not os.path.isfile(items[0]):
            raise CommandLineError(f"no schedule file {items[0]!r}")
        with open(items[0]) as f:
            return distsdfg.Schedule.from_json(f.read())
    grids = {}
    for item in items:
        name, _, grid = item.partition("=")
        try:
            if not name or not grid:
                raise ValueError
            grids[name] = tuple(int(x) for x in grid.split(","))
        except ValueError:
            raise CommandLineError(f"schedule item {item!r} is not KEY=D1,D2,... (integers, e.g. gemm_map=2,2,1), "
                                   f"'auto' or a FILE.json") from None
    return distsdfg.schedule_by_label(sdfg, grids)


def random_inputs(sdfg, sizes: Dict[str, int], seed: int = 0) -> Dict[str, object]:
    """Random data for every array and scalar argument of ``sdfg`` (its shapes, its dtypes)."""
    from dace import data as dt

    from ..lowering.rewriter import RUNTIME_ARGS
    from ..values.plan import evaluate
    rng = np.random.default_rng(seed)
    out = {}
    args = sdfg.arglist()
    # In the program's own argument order, so that a lowered SDFG (a complex scalar boxed into a
    # one-element array, dace_compat.scalars, which moves it among DaCe's arrays) draws the same values.
    order = [n for n in sdfg.arg_names if n in args] + [n for n in args if n not in sdfg.arg_names]
    for name, desc in ((n, args[n]) for n in order):
        if name.startswith("__return") or name in RUNTIME_ARGS or name in sdfg.symbols:
            continue
        dtype = np.dtype(desc.dtype.as_numpy_dtype())
        shape = () if isinstance(desc, dt.Scalar) else tuple(evaluate(str(s), sizes) for s in desc.shape)
        if np.issubdtype(dtype, np.complexfloating):
            v = rng.random(shape) + 1j * rng.random(shape)
        elif np.issubdtype(dtype, np.floating):
            v = rng.random(shape)
        elif dtype == np.bool_:
            v = rng.random(shape) < 0.5
        else:
            v = rng.integers(0, 10, shape)
        v = np.asarray(v, dtype=dtype)
        out[name] = v if shape else dtype.type(v)
    return out


def sizes_from_inputs(mod, sdfg, sizes: Optional[Dict[str, int]] = None) -> Dict[str, int]:
    """``sizes`` completed with the size symbols that the module's ``inputs(sizes)`` hook fixes: the
    shapes of the arrays it returns, matched against the program's argument shapes (``A: float64[M, K]``
    and an A of shape (256, 192) give M=256, K=192), and the integer scalars it passes for symbols.
    Sizes given win; without the hook, ``sizes`` as they are."""
    sizes = dict(sizes or {})
    if not hasattr(mod, "inputs"):
        return sizes
    symbols = {str(s) for s in sdfg.free_symbols} | set(sdfg.symbols)
    found: Dict[str, int] = {}
    for name, value in mod.inputs(dict(sizes)).items():
        if name in symbols and isinstance(value, (int, np.integer)):
            found[name] = int(value)
            continue
        desc = sdfg.arrays.get(name)
        shape = getattr(value, "shape", None)
        if desc is None or shape is None or len(shape) != len(desc.shape):
            continue
        for dim, extent in zip(desc.shape, shape):
            if str(dim) in symbols:
                found.setdefault(str(dim), int(extent))
    return {**found, **sizes}


def _outputs(result) -> List[np.ndarray]:
    if result is None:
        return []
    if isinstance(result, tuple):
        return [np.asarray(r) for r in result]
    return [np.asarray(result)]


def _named(result, args: Dict[str, object], written: Sequence[str]) -> Dict[str, np.ndarray]:
    """The returned values (``return``, or ``return[0]``, ...) and the arguments the program writes."""
    outs = _outputs(result)
    named = {("return" if len(outs) == 1 else f"return[{i}]"): o for i, o in enumerate(outs)}
    named.update((a, np.asarray(args[a])) for a in written if a in args and args[a] is not None)
    return named


def written_arguments(sdfg, args: Dict[str, object]) -> List[str]:
    """The array arguments ``sdfg`` writes (updated in place), in argument order."""
    written = {n.data for state in sdfg.all_states() for n in state.data_nodes()
               if state.in_degree(n) > 0 and not sdfg.arrays[n.data].transient}
    return [a for a in args if a in written and hasattr(args[a], "shape")]


def tolerance(dtype) -> float:
    """The largest relative error a check accepts: 1e-5 for float32/complex64, 1e-10 for other
    floats; integers and booleans must be equal."""
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.inexact):
        return 0.0
    return 1e-5 if dtype in (np.float32, np.complex64) else 1e-10


def relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / max |ref| (the absolute error where ``ref`` is all zeros); inf on NaN."""
    if not ref.size:
        return 0.0
    if not np.issubdtype(ref.dtype, np.inexact):
        return 0.0 if np.array_equal(got, ref) else float("inf")
    got_nan, ref_nan = np.isnan(got), np.isnan(ref)
    if not np.array_equal(got_nan, ref_nan):
        return float("inf")
    keep = ~ref_nan                  # NaN where both are NaN agrees
    if not keep.any():
        return 0.0
    diff = np.abs(got[keep].astype(ref.dtype) - ref[keep])
    scale = float(np.abs(ref[keep]).max())
    return float(diff.max()) / (scale if scale > 0 else 1.0)


def compare_outputs(got: Dict[str, np.ndarray], ref: Dict[str, np.ndarray]):
    """Per output of ``ref`` one report line (its max relative error against its tolerance), and the
    problems (empty when every output is within its tolerance)."""
    lines, problems = [], []
    for name, b in ref.items():
        b = np.asarray(b)
        a = got.get(name)
        if a is None:
            problems.append(f"{name}: missing from the distributed run")
            continue
        a = np.asarray(a)
        if a.shape != b.shape:
            problems.append(f"{name}: shape {a.shape} != {b.shape}")
            continue
        err, tol = relative_error(a, b), tolerance(b.dtype)
        lines.append(f"{name} ({b.dtype}{list(b.shape)}): max relative error {err:.2e} (tolerance {tol:g})")
        if not err <= tol:
            what = "values differ" if tol == 0 else f"max relative error {err:.2e} > {tol:g}"
            problems.append(f"{name}: {what}")
    return lines, problems


def _reference(prog, ref_args: Dict[str, object], sizes: Dict[str, int], written: Sequence[str]):
    """The same program run by DaCe alone in this process, on copies of the inputs: its outputs by name."""
    from ..dace_compat.scalars import box_arguments, box_complex_scalars
    from ..runtime.builds import build
    from ..values.plan import symbol_values
    ref_sdfg = parse_program(prog)
    ref_sdfg.name = f"{ref_sdfg.name}_reference"
    box_arguments(ref_args, box_complex_scalars(ref_sdfg), ref_sdfg)     # as DaCe passes them wrong
    known = set(ref_sdfg.arglist()) | {str(s) for s in ref_sdfg.free_symbols}
    syms = {k: v for k, v in symbol_values(ref_sdfg, ref_args, sizes).items()
            if k in known and k not in ref_args}
    ref_fn, _ = build(ref_sdfg, verbose=True)
    return _named(ref_fn(**ref_args, **syms), ref_args, written)


def _copies(args: Dict[str, object]) -> Dict[str, object]:
    return {k: (np.copy(v) if isinstance(v, np.ndarray) else v) for k, v in args.items()}


def _blocks(fn, mod, sizes, seed, rank):
    """Distributed placement: the global inputs (same seed on every rank) with this rank's blocks of
    the placed ones, the size symbols (read off the global shapes), the placed return values and the
    global inputs themselves."""
    from .. import dace_compat as dc
    from ..lowering.placement import global_sizes
    whole = _arguments(mod, dc.from_json(fn.lowered.source), sizes, seed)
    sizes = global_sizes(fn, whole, sizes)
    args = _copies(whole)
    for a in fn.lowered.boundary:
        if a in args:
            args[a] = fn.layout(a, **sizes).block(args[a], rank)
    returns = sorted(a for a in fn.lowered.boundary if a.startswith("__return"))
    return args, sizes, returns, whole


def _assemble(fn, out, returns, sizes, comm):
    """Gather placed return values' blocks and assemble them on rank 0 (None elsewhere)."""
    many = isinstance(out, tuple)
    outs = list(out) if many else [out]
    names = returns if len(returns) == len(outs) else [None] * len(outs)
    done = []
    for name, o in zip(names, outs):
        if name is None:
            done.append(o)
            continue
        blocks = comm.gather(o, root=0)
        done.append(fn.layout(name, **sizes).assemble(blocks) if comm.rank == 0 else None)
    return tuple(done) if many else done[0]


def run_program(spec: str, *, schedule: Optional[Sequence[str]] = None, sizes: Optional[Dict[str, int]] = None,
                nprocs: Optional[int] = None, target: str = "cpu", check: bool = False, seed: int = 0,
                compile_only: bool = False, verbose: bool = False, rebuild: bool = False, save: Optional[str] = None,
                comm=None, placement=None, cuda_aware_mpi: bool = False, threads_per_rank: Optional[int] = None,
                trace: Optional[str] = None) -> int:
    """Lower, compile once, run on the ranks of ``comm``; rank 0 reports. Returns an exit code.
    ``trace``: a Chrome trace file of the call (every rank's kernels and MPI steps, ``runtime.trace``).

    An exception on any rank prints ``distsdfg: rank R failed: ...`` and aborts the whole job.
    """
    from mpi4py import MPI

    import distsdfg
    from ..runtime.program import build, idle_bcast
    comm = comm or MPI.COMM_WORLD
    rank = comm.rank
    say = (lambda msg: print(f"[distsdfg] {msg}", file=sys.stderr, flush=True)) if rank == 0 else (lambda msg: None)
    try:
        t0 = time.time()
        prog, mod = load_program(spec)
        sdfg = parse_program(prog)
        sizes = sizes_from_inputs(mod, sdfg, sizes)      # the inputs() hook's shapes, unless --sizes
        P = nprocs or comm.size
        if schedule and list(schedule) == ["auto"]:
            from ..lowering.placement import boundary_pricing
            sched = (distsdfg.auto_schedule(sdfg, P, inputs=boundary_pricing(placement),
                                            **sizes) if rank == 0 else None)
            sched = idle_bcast(comm, sched) if not compile_only else sched
        else:
            sched = parse_schedule(schedule, sdfg)
        distsdfg.lower(sdfg, sched, target=target, placement=placement, cuda_aware_mpi=cuda_aware_mpi)
        say(f"{sdfg.name}: lowered with {sdfg._distsdfg.schedule} for {P} ranks ({time.time() - t0:.1f}s)")
        if sdfg._distsdfg.nprocs > P and (nprocs is not None or not compile_only):    # before compiling
            from ..errors import CommunicatorSizeError
            raise CommunicatorSizeError(
                f"the schedule {sdfg._distsdfg.schedule} needs {sdfg._distsdfg.nprocs} ranks but the run has {P}: "
                f"run with -n {sdfg._distsdfg.nprocs} or give a smaller grid")
        if compile_only:
            build(sdfg, verbose=True, rebuild=rebuild)
            return 0
        fn = distsdfg.compile(sdfg, comm=comm, verbose=(rank == 0) or verbose, threads_per_rank=threads_per_rank,
                              trace=trace)
        placed = fn.lowered.boundary
        if placed:        # every rank makes the same global inputs and passes its blocks
            args, sizes, returns, inputs = _blocks(fn, mod, sizes, seed, rank)
        else:
            args = _arguments(mod, sdfg, sizes, seed)
            inputs = _copies(args) if check and rank == 0 else None
        written = written_arguments(parse_program(prog), args) if check else []
        t1 = time.time()
        out = fn(**args, **sizes)
        elapsed = comm.allreduce(time.time() - t1, op=MPI.MAX)
        code = 0
        if placed and returns:
            out = _assemble(fn, out, returns, sizes, comm)
        if placed and check:      # arguments updated in place, block by block
            for a in [a for a in written if a in placed]:
                blocks = comm.gather(args[a], root=0)
                args[a] = fn.layout(a, **sizes).assemble(blocks) if rank == 0 else None
        if rank == 0:
            outs = _outputs(out)
            say(f"ran on {comm.size} ranks in {elapsed:.3f}s; outputs: "
                + (", ".join(f"{o.dtype}{list(o.shape)}" for o in outs) or "none")
                + (f"; updated in place: {', '.join(written)}" if written else ""))
            if save:
                np.savez(save, *outs)
            if trace:
                say(f"trace of every rank's kernels and MPI steps: {trace} (open it in https://ui.perfetto.dev)")
            if check:
                lines, problems = compare_outputs(_named(out, args, written),
                                                  _reference(prog, inputs, sizes, written))
                for line in lines:
                    say("  " + line)
                if problems:
                    say("check against a single-process run FAILED: " + "; ".join(problems))
                    code = 3
                elif not lines:
                    say("check against a single-process run: nothing to compare (no output, no argument "
                        "written)")
                else:
                    say(f"check against a single-process run: OK ({len(lines)} output{'s' * (len(lines) > 1)})")
        return idle_bcast(comm, code)     # rank 0 may still be checking against a single-process run
    except SystemExit:
        raise
    except Exception as exc:
        message = f"rank {rank} failed: {type(exc).__name__}: {exc}"
        print(f"distsdfg: {message}", file=sys.stderr, flush=True)
        record_failure(rank, message)
        if verbose:
            traceback.print_exc()
        if comm.size > 1:
            comm.Abort(2)
        return 2


FAILURE_DIR = "DISTSDFG_FAILURE_DIR"


def record_failure(rank: int, message: str) -> None:
    """Write a failing rank's message where the launching ``distsdfg`` command reads it back.

    ``MPI_Abort`` may end the launcher before it forwards the rank's last stderr lines, so the
    message printed just before could be lost; the file survives. No-op outside ``distsdfg run``.
    """
    folder = os.environ.get(FAILURE_DIR)
    if not folder:
        return
    try:
        with open(os.path.join(folder, f"rank{rank}.txt"), "w") as f:
            f.write(message)
    except OSError:
        pass


def recorded_failures(folder: str) -> List[str]:
    """The messages failing ranks wrote under ``folder``, by rank."""
    names = sorted((n for n in os.listdir(folder) if n.startswith("rank") and n.endswith(".txt")),
                   key=lambda n: int(n[4:-4]))
    out = []
    for n in names:
        with open(os.path.join(folder, n)) as f:
            out.append(f.read().strip())
    return out


def _arguments(mod, sdfg, sizes: Dict[str, int], seed: int) -> Dict[str, object]:
    """The module's ``inputs(sizes)`` hook when it has one, else random data for ``sdfg``."""
    if hasattr(mod, "inputs"):
        return mod.inputs(dict(sizes))
    from ..runtime.program import symbol_values
    return random_inputs(sdfg, symbol_values(sdfg, {}, sizes), seed)
