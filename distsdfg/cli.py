"""The ``distsdfg`` command: launch programs on local ranks, list maps, print communication plans."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys

__all__ = ["main"]


def _load_program(spec: str):
    path, _, func = spec.partition(":")
    modname = os.path.splitext(os.path.basename(path))[0]
    loader = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(loader)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    loader.loader.exec_module(mod)
    if func:
        return getattr(mod, func), mod
    import dace
    progs = [v for v in vars(mod).values() if isinstance(v, dace.frontend.python.parser.DaceProgram)]
    if len(progs) != 1:
        raise SystemExit(f"{path} defines {len(progs)} dace programs; name one as {path}:FUNCTION")
    return progs[0], mod


def _parse_schedule(items, sdfg):
    import distsdfg
    if not items:
        return {}
    if len(items) == 1 and items[0].endswith(".json"):
        with open(items[0]) as f:
            return distsdfg.Schedule.from_json(f.read())
    grids = {}
    for item in items:
        name, _, grid = item.partition("=")
        grids[name] = tuple(int(x) for x in grid.split(","))
    return distsdfg.schedule_by_label(sdfg, grids)


def _sizes(items):
    return {k: int(v) for k, _, v in (i.partition("=") for i in items or [])}


def cmd_maps(args):
    import distsdfg
    prog, _ = _load_program(args.program)
    for m in distsdfg.maps(prog.to_sdfg()):
        print(m)


def cmd_plan(args):
    import distsdfg
    from distsdfg.report import format_report
    prog, _ = _load_program(args.program)
    sdfg = prog.to_sdfg()
    if args.auto:
        if args.n is None:
            raise SystemExit("distsdfg plan --auto needs -n P (the number of ranks to plan for)")
        sched = distsdfg.auto_schedule(sdfg, args.n, cost_model=args.model, searcher=args.searcher,
                                       **_sizes(args.sizes))
    else:
        sched = _parse_schedule(args.schedule, sdfg)
    distsdfg.lower(sdfg, sched)
    steps = distsdfg.comm_report(sdfg, nprocs=args.n, **_sizes(args.sizes))
    if args.json:
        print(json.dumps([{"collective": s.collective, "array": s.array, "sent": list(s.sent),
                           "received": list(s.received)} for s in steps], indent=1))
    else:
        print(f"schedule: {sdfg._distsdfg.schedule}")
        plans = distsdfg.comm_plans(sdfg, nprocs=args.n, **_sizes(args.sizes))
        if plans:
            print("between kernels:")
            for p in plans:
                print(f"  {p}")
        print(format_report(steps))


def cmd_explain(args):
    import distsdfg
    prog, _ = _load_program(args.program)
    sdfg = prog.to_sdfg()
    sched = _parse_schedule(args.schedule, sdfg) if args.schedule else None
    if sched is None and args.n is None:
        raise SystemExit("distsdfg explain needs --schedule or -n P (to plan one)")
    print(distsdfg.explain(sdfg, sched, nprocs=args.n, cost_model=args.model, alternatives=args.alternatives,
                           **_sizes(args.sizes)))


def cmd_calibrate(args):
    from distsdfg.launch import mpiexec_argv
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    code = f"from distsdfg.costmodel import calibrate_main; calibrate_main({args.out!r})"
    argv = mpiexec_argv(args.n, ["-c", code], timeout=300)
    sys.exit(subprocess.call(argv, env=env))


def cmd_launch(args):
    from distsdfg.launch import mpiexec_argv
    argv = mpiexec_argv(args.n, [args.script] + args.args, timeout=args.timeout)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    rc = subprocess.call(argv, env=env)
    if rc == 124:
        print(f"distsdfg: the job exceeded --timeout {args.timeout}s and was stopped", file=sys.stderr)
    sys.exit(rc)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="distsdfg", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("maps", help="list the schedulable maps of a program")
    p.add_argument("program", help="FILE.py[:FUNCTION]")
    p.set_defaults(fn=cmd_maps)
    p = sub.add_parser("plan", help="print the communication plan of a schedule")
    p.add_argument("program")
    p.add_argument("-n", type=int, default=None, help="number of ranks (default: the schedule's)")
    p.add_argument("--schedule", nargs="*", help="KEY=2,2,1 ... or FILE.json")
    p.add_argument("--sizes", nargs="*", help="N=1024 ...")
    p.add_argument("--json", action="store_true")
    p.add_argument("--auto", action="store_true", help="plan the schedule (EinDecomp) for -n ranks")
    p.add_argument("--model", default="bytes", help="cost model for --auto: bytes, paper, alpha-beta")
    p.add_argument("--searcher", default="dp", help="dp, greedy or exhaustive")
    p.set_defaults(fn=cmd_plan)
    p = sub.add_parser("explain", help="per map: grid, predicted bytes, runner-up grids")
    p.add_argument("program")
    p.add_argument("-n", type=int, default=None, help="ranks (plans a schedule when none is given)")
    p.add_argument("--schedule", nargs="*", help="KEY=2,2,1 ... or FILE.json")
    p.add_argument("--sizes", nargs="*", help="N=1024 ...")
    p.add_argument("--model", default="bytes")
    p.add_argument("--alternatives", type=int, default=2)
    p.set_defaults(fn=cmd_explain)
    p = sub.add_parser("calibrate", help="measure alpha (latency) and beta (s/byte) for the alpha-beta model")
    p.add_argument("-n", type=int, default=2)
    p.add_argument("--out", default=None, help="JSON file (default ~/.cache/distsdfg/calibration.json)")
    p.set_defaults(fn=cmd_calibrate)
    p = sub.add_parser("launch", help="run a script on local ranks with the bundled mpiexec")
    p.add_argument("-n", type=int, default=4)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(fn=cmd_launch)
    args = ap.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
