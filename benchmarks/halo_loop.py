"""Per-iteration cost of a time loop: one rank against two ranks that exchange halos.

    mpiexec -n 2 python -m mpi4py -m benchmarks.halo_loop [--npbench DIR] [--kernel jacobi_2d] [--n 500]

Times NPBench's ``jacobi_2d`` (or ``heat_3d``) at two step counts and divides the difference by the
difference in steps: what one more iteration costs, without the scatter and gather around the loop.
On one rank the whole program (``lower(sdfg, "auto", nprocs=1)``); on two ranks the planner's split
schedule, forced (``plan_options={"whole": False}``, even where the planner would keep the program
whole), with ``comm_report``'s bytes per iteration. Medians of ``--reps`` interleaved calls.
"""
from distsdfg.dace_compat.semantics import parse as semantic_parse
import argparse
import copy
import os
import sys
import time

import numpy as np


def main(argv=None) -> int:
    from mpi4py import MPI

    import distsdfg
    from distsdfg.solver.report import sent_once
    from distsdfg.testing.npbench import discover
    ap = argparse.ArgumentParser()
    ap.add_argument("--npbench", default=os.environ.get("NPBENCH", "npbench"))
    ap.add_argument("--kernel", default="jacobi_2d")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--steps", type=int, nargs=2, default=(20, 120))
    ap.add_argument("--reps", type=int, default=5)
    opts = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    bench = {b.name: b for b in discover(opts.npbench)}[opts.kernel]
    steps_name = "TSTEPS"
    rows = {}
    for steps in opts.steps:
        bench.sizes = (lambda s: (lambda: {**bench.info["parameters"]["M"], "N": opts.n, steps_name: s}))(steps)
        args = bench.arguments()
        sizes = {k: v for k, v in args.items() if isinstance(v, int)}
        sizes["N"] = opts.n
        one = None
        if comm.rank == 0:
            sd = semantic_parse(bench.program())
            sd.name = f"halo1_{opts.kernel}"
            distsdfg.lower(sd, "auto", nprocs=1, plan_options=sizes)
            one = distsdfg.compile(sd, comm=MPI.COMM_SELF)
        sd2 = semantic_parse(bench.program())
        sd2.name = f"halo2_{opts.kernel}"
        distsdfg.lower(sd2, "auto", nprocs=comm.size, plan_options={**sizes, "whole": False})
        split = sd2._distsdfg.schedule
        two = distsdfg.compile(sd2)
        report = distsdfg.comm_report(sd2, nprocs=comm.size, summary=True, **sizes)
        ts1, ts2 = [], []
        for _ in range(opts.reps + 1):
            if comm.rank == 0:
                mine = copy.deepcopy(args)
                t = time.perf_counter()
                one(**mine)
                ts1.append(time.perf_counter() - t)
            comm.Barrier()
            mine = copy.deepcopy(args) if comm.rank == 0 else dict(sizes)
            t = time.perf_counter()
            two(**mine)
            comm.Barrier()
            ts2.append(time.perf_counter() - t)
        total = sum(sent_once(r) * r.repeats for r in report)
        rows[steps] = (np.median(ts1[1:]) if ts1 else None, np.median(ts2[1:]), total, split)
    if comm.rank == 0:
        (a, b) = opts.steps
        d = b - a
        p1 = (rows[b][0] - rows[a][0]) / d * 1e3
        p2 = (rows[b][1] - rows[a][1]) / d * 1e3
        per_iter_bytes = (rows[b][2] - rows[a][2]) / d
        print(f"{opts.kernel} N={opts.n}: per iteration P=1 {p1:.3f} ms, P=2 {p2:.3f} ms ({p2 / p1:.2f}x), "
              f"{per_iter_bytes:.0f} B sent per iteration at P=2; schedule {rows[b][3]}")
        for s in opts.steps:
            print(f"  TSTEPS={s}: P=1 {rows[s][0] * 1e3:.1f} ms, P=2 {rows[s][1] * 1e3:.1f} ms, {rows[s][2]} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
