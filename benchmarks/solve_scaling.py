"""One rank's call-time solve for many ranks, without running anything.

    python -m benchmarks.solve_scaling [--workloads ...] [--procs 4 64 1024 4096] [--sizes documented]
                                       [--schedule auto|data-parallel] [--report-max 4096] [--out FILE.json]

Per workload and rank count P: the schedule (``auto_schedule(..., verify=False)``, or the
data-parallel one), ``distsdfg.lower``, then what a rank does at its first call for concrete
sizes: ``solve_plan(low, values, P, rank=r)`` and ``encode_plan`` for rank 0 (the root, which
also needs every rank's counts) and rank P-1, timed apart; and ``comm_report`` (the whole
per-rank tables: every rank's blocks and messages), up to ``--report-max`` ranks. Prints one
Markdown row per case and writes the numbers as JSON.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Dict, List, Sequence

import numpy as np

from .workloads import WORKLOADS, get, sizes_of

PROCS = (4, 64, 1024, 4096)


def _timed(call):
    t0 = time.perf_counter()
    out = call()
    return out, time.perf_counter() - t0


def solve_row(wname: str, preset: str, nprocs: int, schedule: str = "auto", report: bool = True) -> Dict[str, object]:
    import distsdfg
    from distsdfg.mpi.encode import encode_plan
    from distsdfg.planner.auto import data_parallel_schedule
    from distsdfg.analysis.eingraph import build_graph
    from distsdfg.values.plan import given_values
    from distsdfg.solver.report import sent_once
    from distsdfg.solver.solve import lowered_of, solve_plan
    w = get(wname)
    sizes = sizes_of(w, preset)
    symbols = w.symbols(sizes, w.inputs(sizes, np.random.default_rng(0)))
    sdfg = w.program.to_sdfg()
    out: Dict[str, object] = {"workload": wname, "nprocs": nprocs, "schedule": schedule}
    try:
        if schedule == "auto":
            sched, out["plan_s"] = _timed(lambda: distsdfg.auto_schedule(sdfg, nprocs, verify=False, **symbols))
        else:
            sched, out["plan_s"] = _timed(lambda: data_parallel_schedule(build_graph(sdfg, **symbols), nprocs))
        _, out["lower_s"] = _timed(lambda: distsdfg.lower(sdfg, sched))
        low = lowered_of(sdfg)
        values = given_values(sdfg, symbols)
        P = 1 if low.rank0_only else nprocs
        for name, r in (("rank0", 0), ("last", P - 1)):
            steps, t_solve = _timed(lambda: solve_plan(low, values, P, rank=r))
            table, t_enc = _timed(lambda: encode_plan(steps, r))
            out[f"{name}_s"] = t_solve + t_enc
            out[f"{name}_table"] = int(table.shape[0])
        if report:
            rep, out["report_s"] = _timed(lambda: distsdfg.comm_report(sdfg, nprocs=nprocs, **symbols))
            out["bytes"] = int(sum(sent_once(s) for s in rep))
    except Exception as exc:        # e.g. no partitioning of a small extent into P parts
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def _fmt(row, key):
    v = row.get(key)
    return "" if v is None else f"{v:.2f}"


def markdown(rows: Sequence[Dict[str, object]]) -> str:
    lines = ["| workload | P | schedule | plan s | lower s | solve rank 0 s | solve rank P-1 s | table (int64) | "
             "comm_report s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['workload']} | {r['nprocs']} | {r['schedule']} | {_fmt(r, 'plan_s')} | "
                         f"{_fmt(r, 'lower_s')} | {r['error'][:80]} | | | |")
            continue
        lines.append(f"| {r['workload']} | {r['nprocs']} | {r['schedule']} | {_fmt(r, 'plan_s')} | "
                     f"{_fmt(r, 'lower_s')} | {_fmt(r, 'rank0_s')} | {_fmt(r, 'last_s')} | {r.get('rank0_table', '')} | "
                     f"{_fmt(r, 'report_s') or 'not run'} |")
    return "\n".join(lines)


def main(argv=None) -> List[Dict[str, object]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    ap.add_argument("--procs", nargs="+", type=int, default=list(PROCS))
    ap.add_argument("--sizes", default="documented")
    ap.add_argument("--schedule", default="auto", choices=("auto", "data-parallel"))
    ap.add_argument("--report-max", type=int, default=4096, help="comm_report up to this many ranks")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rows = []
    for w in args.workloads:
        for p in args.procs:
            row = solve_row(w, args.sizes, p, args.schedule, report=p <= args.report_max)
            rows.append(row)
            print(markdown([row]).splitlines()[-1], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
