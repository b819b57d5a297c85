"""The ``distsdfg`` command: run programs on local ranks or Slurm, list maps, plan and explain schedules, info."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys

__all__ = ["main"]


def _sizes(items):
    from distsdfg.errors import CommandLineError
    out = {}
    for item in items or []:
        k, _, v = item.partition("=")
        try:
            out[k] = int(v)
        except ValueError:
            raise CommandLineError(f"--sizes item {item!r} is not NAME=INTEGER (e.g. N=1024)") from None
    return out


def _lowered(args, nprocs_required=False):
    import distsdfg
    from .runner import load_program, parse_program, parse_schedule, sizes_from_inputs
    prog, mod = load_program(args.program)
    sdfg = parse_program(prog)
    sizes = _sizes(args.sizes)
    if getattr(args, "auto", False) or (args.schedule and list(args.schedule) == ["auto"]):
        sizes = sizes_from_inputs(mod, sdfg, sizes)         # the module's inputs() hook fixes them
        if args.n is None:
            from distsdfg.errors import CommandLineError
            raise CommandLineError("planning a schedule needs -n P (the number of ranks to plan for)")
        from ..lowering.placement import boundary_pricing
        sched = distsdfg.auto_schedule(sdfg, args.n, cost_model=getattr(args, "model", "time"),
                                       searcher=getattr(args, "searcher", "dp"),
                                       inputs=boundary_pricing(getattr(args, "placement", None)), **sizes)
    else:
        sched = parse_schedule(args.schedule, sdfg)
    distsdfg.lower(sdfg, sched, placement=getattr(args, "placement", None))
    return sdfg, sizes


def cmd_maps(args):
    import distsdfg
    from .runner import load_program, parse_program
    prog, _ = load_program(args.program)
    for m in distsdfg.maps(parse_program(prog)):
        print(f"{m}  # {m.source}" if m.source else m)


def cmd_plan(args):
    import distsdfg
    from ..solver.report import SUMMARY_ABOVE, bytes_per_kernel, format_report, matmul_io_lower_bounds
    sdfg, sizes = _lowered(args)
    P = args.n or sdfg._distsdfg.nprocs
    summary = P > SUMMARY_ABOVE         # per-rank lists of thousands of entries say little: sums per call
    steps = distsdfg.comm_report(sdfg, nprocs=P, summary=summary, **sizes)
    per_kernel = bytes_per_kernel(sdfg, nprocs=P, **sizes)
    try:
        # The bound counts each element as starting on one rank: not so when inputs arrive replicated.
        bounds = [] if sdfg._distsdfg.boundary else matmul_io_lower_bounds(sdfg, P, **sizes)
    except distsdfg.DistributedLoweringError:      # sizes that the tiled maps leave symbolic
        bounds = []
    total = sum(_sent(s) * (s.repeats if isinstance(s.repeats, int) else 1) for s in steps)
    if args.json:
        print(json.dumps({
            "schedule": {k: list(g) for k, g in sdfg._distsdfg.schedule.grids},
            "nprocs": P,
            "steps": [dataclasses.asdict(s) if summary else
                      {"collective": s.collective, "array": s.array, "sent": list(s.sent), "received": list(s.received),
                       "repeats": s.repeats, "at_most": s.at_most} for s in steps],
            "bytes_per_kernel": per_kernel,
            "total_bytes": total,
            "io_lower_bound_per_rank": {k: b for k, b in bounds},
        }, indent=1))
    else:
        print(f"schedule on {P} ranks:")
        source = {key: k.source for k in sdfg._distsdfg.kernels for key in k.keys}
        for key, grid in sdfg._distsdfg.schedule.grids:
            print(f"  {key:48s} {str(grid):14s} {source.get(key, '')}".rstrip())
        plans = distsdfg.comm_plans(sdfg, nprocs=P, **sizes)
        if plans:
            print("between kernels:")
            for p in plans:
                print(f"  {p}")
        print(format_report(steps))
        for key, b in bounds:
            busiest = f"at most {sum(s.max_received for s in steps):,}" if summary else f"{_busiest(steps):,}"
            print(f"I/O lower bound for {key}: {b:,.0f} bytes per rank (the busiest rank here receives {busiest})")
    if args.plot:
        _plot(sdfg, args.plot, P, sizes, per_kernel)


def _plot(sdfg, path: str, P: int, sizes, per_kernel) -> None:
    """The plan's picture (``plan_plot``); without matplotlib, a bar chart of bytes per kernel (PNG)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        from .plot import bar_chart_png
        bar_chart_png(list(per_kernel), list(per_kernel.values()), path, title=f"bytes per kernel, P={P}")
        print(f"distsdfg: {path}: bytes per kernel only; install matplotlib (pip install matplotlib) for the "
              f"picture of every kernel's grid and blocks", file=sys.stderr)
        return
    from .plan_plot import draw_plan, plan_rows
    draw_plan(plan_rows(sdfg, nprocs=P, **sizes), path, nprocs=P, title=sdfg._distsdfg.original_name)


def _sent(step) -> int:
    from ..solver.report import sent_once
    return sent_once(step)


def _busiest(steps) -> int:
    n = len(steps[0].received) if steps else 0
    return max([sum(s.received[q] for s in steps) for q in range(n)] + [0])


def cmd_explain(args):
    import distsdfg
    from .runner import load_program, parse_program, parse_schedule, sizes_from_inputs
    prog, mod = load_program(args.program)
    sdfg = parse_program(prog)
    sched = parse_schedule(args.schedule, sdfg) if args.schedule else None
    if sched is None and args.n is None:
        from distsdfg.errors import CommandLineError
        raise CommandLineError("distsdfg explain needs --schedule or -n P (to plan one)")
    from ..lowering.placement import boundary_pricing
    print(distsdfg.explain(sdfg, sched, nprocs=args.n, cost_model=args.model, alternatives=args.alternatives,
                           inputs=boundary_pricing(args.placement), **sizes_from_inputs(mod, sdfg, _sizes(args.sizes))))


def _env(threads_per_rank=None):
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    if threads_per_rank is not None:      # OpenMP and MKL threads inside every rank
        from ..lowering.blas import thread_env, threads_per_rank as check
        env.update(thread_env(check(threads_per_rank)))
    # DaCe's simplify() iterates over sets of names: a fixed hash seed makes every rank, and
    # every run, build the same SDFG (and so find the same build in the cache).
    env.setdefault("PYTHONHASHSEED", "0")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def _launch(argv, timeout, threads_per_rank=None):
    """Run the job; on failure, repeat what the failing ranks recorded (their own stderr lines can
    be lost when one rank's ``MPI_Abort`` ends the launcher)."""
    import tempfile

    from .runner import FAILURE_DIR, recorded_failures
    with tempfile.TemporaryDirectory(prefix="distsdfg-job-") as folder:
        env = _env(threads_per_rank)
        env[FAILURE_DIR] = folder
        rc = subprocess.call(argv, env=env)
        if rc == 124:
            print(f"distsdfg: the job exceeded --timeout {timeout}s and was stopped", file=sys.stderr)
        if rc != 0:
            for message in recorded_failures(folder):
                print(f"distsdfg: the job stopped. {message}", file=sys.stderr)
    return rc


def cmd_run(args):
    from .runner import run_program
    if args.here or args.compile_only:
        sys.exit(run_program(args.program, schedule=args.schedule, sizes=_sizes(args.sizes), nprocs=args.n,
                             target=args.target, check=args.check, seed=args.seed, compile_only=args.compile_only,
                             verbose=args.verbose, rebuild=args.rebuild, save=args.save, placement=args.placement,
                             cuda_aware_mpi=args.cuda_aware_mpi, threads_per_rank=args.threads_per_rank,
                             trace=args.trace))
    from .mpiexec import launcher_argv
    n = args.n or 1
    inner = ["-m", "distsdfg", "run", args.program, "-n", str(n), "--target", args.target, "--seed", str(args.seed),
             "--placement", args.placement, "--here"]
    if args.schedule:
        inner += ["--schedule"] + list(args.schedule)
    if args.sizes:
        inner += ["--sizes"] + list(args.sizes)
    for flag in ("check", "verbose", "rebuild", "cuda_aware_mpi"):
        if getattr(args, flag):
            inner.append("--" + flag.replace("_", "-"))
    if args.save:
        inner += ["--save", os.path.abspath(args.save)]
    if args.trace:
        inner += ["--trace", os.path.abspath(args.trace)]
    if args.threads_per_rank is not None:
        inner += ["--threads-per-rank", str(args.threads_per_rank)]
    sys.exit(_launch(launcher_argv(n, inner, timeout=args.timeout), args.timeout, args.threads_per_rank))


def cmd_slurm(args):
    from .slurm import SlurmJob, sbatch_script
    run_args = []
    if args.schedule:
        run_args += ["--schedule"] + list(args.schedule)
    if args.sizes:
        run_args += ["--sizes"] + list(args.sizes)
    if args.check:
        run_args.append("--check")
    if args.placement != "root":
        run_args += ["--placement", args.placement]
    if args.cuda_aware_mpi:
        run_args.append("--cuda-aware-mpi")
    from distsdfg.errors import CommandLineError
    command = tuple(getattr(args, "command", None) or ())
    if bool(args.program) == bool(command):
        raise CommandLineError("distsdfg slurm runs FILE.py:FUNC (distsdfg run) or a driver script after `--`, e.g. "
                               "distsdfg slurm --nodes 4 -- python train.py --epochs 3"
                               + (" (not both)" if command else ""))
    job = SlurmJob(args.program or "", command=command, nodes=args.nodes, ntasks_per_node=args.ntasks_per_node,
                   gpus_per_node=args.gpus_per_node, cpus_per_task=args.cpus_per_task, time=args.time,
                   partition=args.partition, account=args.account, constraint=args.constraint,
                   modules=tuple(args.module or ()), env=tuple(tuple(e.split("=", 1)) for e in args.env or ()),
                   target=args.target, run_args=tuple(run_args), job_name=args.job_name)
    script = sbatch_script(job)
    out = args.output or f"{job.name}.sbatch"
    with open(out, "w") as f:
        f.write(script)
    print(f"wrote {out}")
    if args.submit:
        import shutil
        if shutil.which("sbatch") is None:
            raise SystemExit("sbatch is not on PATH: run the script on a Slurm login node")
        sys.exit(subprocess.call(["sbatch", out]))


def cmd_calibrate(args):
    from .mpiexec import mpiexec_argv
    code = f"from distsdfg.planner.calibration import calibrate_main; calibrate_main({args.out!r})"
    sys.exit(_launch(mpiexec_argv(args.n, ["-c", code], timeout=300), 300, 1))     # one BLAS thread per rank


def cmd_launch(args):
    from distsdfg.errors import CommandLineError
    from .mpiexec import launcher_argv
    if not os.path.isfile(args.script):       # was a traceback from mpi4py on every rank
        raise CommandLineError(f"no script file {args.script!r}: distsdfg launch -n P SCRIPT.py [ARGS ...]")
    if args.n < 1:
        raise CommandLineError(f"-n {args.n} is not a number of ranks (1 or more)")
    if args.hostfile and not os.path.isfile(args.hostfile):
        raise CommandLineError(f"no hostfile {args.hostfile!r}: one machine per line, `host` or `host:ranks`")
    sys.exit(_launch(launcher_argv(args.n, [args.script] + args.args, timeout=args.timeout, hostfile=args.hostfile),
                     args.timeout, args.threads_per_rank))


def cmd_predict(args):
    from distsdfg.errors import CommandLineError
    from ..planner.predict import format_curve, machine, predict_curve
    from .runner import load_program, parse_schedule
    prog, _ = load_program(args.program)
    try:
        procs = [int(x) for x in args.n.split(",")]
    except ValueError:
        raise CommandLineError(f"-n {args.n!r} is not a comma-separated list of rank counts (e.g. 1,2,4,8)") from None
    m = machine(args.machine)
    schedule = "auto" if not args.schedule or list(args.schedule) == ["auto"] else (
        lambda sdfg, P: parse_schedule(args.schedule, sdfg))
    curve = predict_curve(prog.to_sdfg, procs, m, schedule=schedule, placement=args.placement, **_sizes(args.sizes))
    print(m)
    print(format_curve(curve))
    if args.json:
        import json
        with open(args.json, "w") as f:
            json.dump({"machine": json.loads(m.to_json()), "placement": args.placement,
                       "points": [{"nprocs": p.nprocs, "seconds": p.seconds, "comm_seconds": p.comm_seconds,
                                   "compute_seconds": p.compute_seconds} for p in curve]}, f, indent=1)


def cmd_cache(args):
    from distsdfg.errors import CommandLineError
    from ..runtime import cache
    if args.action == "list":
        print(cache.report())
        return
    try:
        older = cache.parse_age(args.older_than) if args.older_than else None
    except ValueError as exc:
        raise CommandLineError(f"--older-than: {exc}") from None
    removed = cache.clean(older_than=older)
    freed = sum(e.size for e in removed)
    print(f"removed {len(removed)} entries ({cache.format_size(freed)}) from {cache.cache_dir()}")
    print(f"left: {cache.format_size(cache.total_size())}")


def cmd_info(args):
    from .info import report
    print(report())


def _schedule_args(p):
    p.add_argument("--schedule", nargs="*", help="auto | KEY=2,2,1 ... (keys or labels) | FILE.json")
    p.add_argument("--sizes", nargs="*", help="N=1024 ...")
    p.add_argument("--placement", default="root", choices=["root", "distributed"],
                   help="arguments whole on rank 0 (root) or block by block on every rank (distributed)")


def _threads_arg(p):
    p.add_argument("--threads-per-rank", type=int, default=None, metavar="K",
                   help="OpenMP and BLAS threads inside each rank (default 1: one thread per rank)")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="distsdfg", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("run", help="lower, compile once, run on -n ranks (mpiexec, or srun under Slurm)")
    p.add_argument("program", help="FILE.py[:FUNCTION]")
    p.add_argument("-n", type=int, default=None, help="number of ranks")
    _schedule_args(p)
    p.add_argument("--target", default="cpu", choices=["cpu", "gpu"])
    p.add_argument("--cuda-aware-mpi", action="store_true",
                   help="with --target gpu: MPI gets the GPU buffers directly (needs an MPI built with CUDA)")
    p.add_argument("--check", action="store_true", help="compare with a single-process run on rank 0")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--verbose", action="store_true", help="progress and tracebacks from every rank")
    p.add_argument("--rebuild", action="store_true", help="compile even if an identical build exists")
    p.add_argument("--save", default=None, help="FILE.npz: rank 0 saves the outputs")
    p.add_argument("--trace", default=None, metavar="FILE.json",
                   help="write every rank's kernels and MPI steps (with bytes) as a Chrome trace (Perfetto)")
    p.add_argument("--here", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--compile-only", action="store_true", help="lower and compile in this process, then stop")
    _threads_arg(p)
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("maps", help="list the schedulable maps of a program")
    p.add_argument("program", help="FILE.py[:FUNCTION]")
    p.set_defaults(fn=cmd_maps)

    p = sub.add_parser("plan", help="the grid per map, every collective with its bytes, the total")
    p.add_argument("program")
    p.add_argument("-n", type=int, default=None, help="number of ranks (default: the schedule's)")
    _schedule_args(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--plot", default=None, metavar="FILE.png|FILE.svg",
                   help="a picture per kernel of its process grid, each rank's block of every array it moves, and the "
                        "bytes (needs matplotlib; without it a bar chart of bytes per kernel)")
    p.add_argument("--auto", action="store_true", help="plan the schedule (EinDecomp) for -n ranks")
    p.add_argument("--model", default="time", help="cost model for --auto: time (default), bytes, paper, alpha-beta")
    p.add_argument("--searcher", default="dp", help="dp, greedy or exhaustive")
    p.set_defaults(fn=cmd_plan)

    p = sub.add_parser("explain", help="per map: grid, predicted bytes, runner-up grids")
    p.add_argument("program")
    p.add_argument("-n", type=int, default=None, help="ranks (plans a schedule when none is given)")
    _schedule_args(p)
    p.add_argument("--model", default="time", help="time (default), bytes, paper, alpha-beta")
    p.add_argument("--alternatives", type=int, default=2)
    p.set_defaults(fn=cmd_explain)

    p = sub.add_parser("predict", help="predicted time per call for many rank counts on a machine model")
    p.add_argument("program")
    p.add_argument("-n", default="1,2,4,8,16,32,64,128", help="rank counts, comma-separated")
    p.add_argument("--schedule", nargs="*", help="auto (default: planned per rank count) | KEY=2,2,1 ... | FILE.json")
    p.add_argument("--sizes", nargs="*", help="N=8192 ...")
    p.add_argument("--placement", default="root", choices=["root", "distributed"])
    p.add_argument("--machine", default="this-machine",
                   help="this-machine, daint-xc50, or a JSON file (a Machine, or distsdfg calibrate's output)")
    p.add_argument("--json", default=None, help="write the curve to this JSON file")
    p.set_defaults(fn=cmd_predict)

    p = sub.add_parser("slurm", help="write (and with --submit, submit) an sbatch script",
                       usage="distsdfg slurm [FILE.py:FUNC] [options] [-- python SCRIPT.py ARGS ...]",
                       description="A batch script that runs FILE.py:FUNC with distsdfg run (compiled once before "
                                   "srun), or, after --, any driver script on every rank (python is this "
                                   "interpreter, with -m mpi4py).")
    p.add_argument("program", nargs="?", default=None, help="FILE.py:FUNC (or a command after --)")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--ntasks-per-node", type=int, default=1)
    p.add_argument("--gpus-per-node", type=int, default=0)
    p.add_argument("--cpus-per-task", type=int, default=1)
    p.add_argument("--time", default="00:30:00")
    p.add_argument("--partition")
    p.add_argument("--account")
    p.add_argument("--constraint")
    p.add_argument("--module", action="append", help="a module to load (repeatable)")
    p.add_argument("--env", action="append", help="K=V to export (repeatable)")
    p.add_argument("--target", default="cpu", choices=["cpu", "gpu"])
    p.add_argument("--cuda-aware-mpi", action="store_true", help="with --target gpu: MPI on the GPU buffers")
    _schedule_args(p)
    p.add_argument("--check", action="store_true")
    p.add_argument("--job-name")
    p.add_argument("-o", "--output", help="script file (default JOBNAME.sbatch)")
    p.add_argument("--submit", action="store_true", help="call sbatch on the script")
    p.set_defaults(fn=cmd_slurm)

    p = sub.add_parser("calibrate", help="measure the planner's rates (GEMM, memory, alpha, beta) for the time model")
    p.add_argument("-n", type=int, default=2)
    p.add_argument("--out", default=None, help="JSON file (default $DISTSDFG_CALIBRATION or ~/.cache/distsdfg/calibration.json)")
    p.set_defaults(fn=cmd_calibrate)

    p = sub.add_parser("launch", help="run any script on local ranks with the bundled mpiexec (or srun)")
    p.add_argument("-n", type=int, default=4)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--hostfile", "-f", default=None, metavar="FILE",
                   help="start the ranks on these machines (MPICH's format: `host` or `host:ranks` per line)")
    _threads_arg(p)
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(fn=cmd_launch)

    p = sub.add_parser("cache", help="list the build cache (entries, sizes, last use) or clean it",
                       description="The build cache: every program build and the compile's shared parts, in "
                                   "$DISTSDFG_CACHE (default ~/.cache/distsdfg), kept under $DISTSDFG_CACHE_MAX "
                                   "(default 5G; 0: no cap) by removing the least recently used builds.")
    p.add_argument("action", nargs="?", default="list", choices=["list", "clean"],
                   help="list (default), or clean: remove builds, headers and steps (the BLAS set-up and "
                        "the planner's calibration stay)")
    p.add_argument("--older-than", default=None, metavar="AGE",
                   help="with clean: only builds and headers not used for AGE (e.g. 7d, 12h, 30m)")
    p.set_defaults(fn=cmd_cache)

    p = sub.add_parser("info", help="versions of distsdfg, DaCe, NumPy, MPI; the BLAS in use; the compilers")
    p.set_defaults(fn=cmd_info)

    argv = list(sys.argv[1:] if argv is None else argv)
    command = None
    if argv[:1] == ["slurm"] and "--" in argv:      # distsdfg slurm [options] -- python train.py ...
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    args = ap.parse_args(argv)
    if command is not None:
        args.command = command
    from distsdfg.errors import DistributedLoweringError
    try:
        args.fn(args)
    except DistributedLoweringError as exc:     # bad input: the message says what to change
        if os.environ.get("DISTSDFG_VERBOSE"):
            raise
        print(f"distsdfg {args.cmd}: {type(exc).__name__}: {exc}{_cli_hint(exc)}", file=sys.stderr)
        sys.exit(2)


def _cli_hint(exc) -> str:
    """The command-line spelling of a fix that the message gives in Python (``N=1024``, ``nprocs=P``)."""
    from distsdfg import errors as E
    if isinstance(exc, E.SymbolicSizeError) and exc.symbol:
        return f" (on the command line: --sizes {exc.symbol}=...)"
    if isinstance(exc, E.SizeError) and "size symbol" in str(exc):
        return " (on the command line: --sizes NAME=VALUE ...)"
    if isinstance(exc, E.CommunicatorSizeError):
        return " (on the command line: -n P, at least the grid's size)"
    return ""


if __name__ == "__main__":
    main()
