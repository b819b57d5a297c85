"""Planning time and predicted bytes with and without the pruned search (``distsdfg.planner.prune``).

    python -m benchmarks.plan_pruning [--workloads megatron softmax] [--procs 16 64 256 1024] [--unpruned-max 64]

Per workload and P: ``auto_schedule(..., verify=False)`` as shipped (pruned where some kernel has
more than ``auto.CANDIDATE_LIMIT`` candidate vectors), the same with pruning turned off (up to
``--unpruned-max`` ranks: beyond, it does not finish in minutes), and the bytes model's value
(``schedule_cost``) of each result and of the data-parallel and SQRT baselines.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from .workloads import get, sizes_of


def _plan(sdfg, P, symbols, limit=None):
    import distsdfg
    from distsdfg.planner import auto as planner
    old = planner.CANDIDATE_LIMIT
    if limit is not None:
        planner.CANDIDATE_LIMIT = limit
    try:
        t0 = time.perf_counter()
        s = distsdfg.auto_schedule(sdfg, P, verify=False, **symbols)
        return s, time.perf_counter() - t0
    finally:
        planner.CANDIDATE_LIMIT = old


def row(wname: str, P: int, unpruned: bool, preset: str = "documented") -> str:
    import distsdfg
    from distsdfg.analysis.eingraph import build_graph
    from distsdfg.planner.auto import data_parallel_schedule, sqrt_schedule
    w = get(wname)
    sizes = sizes_of(w, preset)
    symbols = w.symbols(sizes, w.inputs(sizes, np.random.default_rng(0)))
    sdfg = w.program.to_sdfg()
    g = build_graph(sdfg, **symbols)

    def cost(s):
        return distsdfg.schedule_cost(sdfg, s, **symbols)

    s, t = _plan(sdfg, P, symbols)
    cells = [wname, str(P), f"{t:.1f}", f"{cost(s):,.0f}"]
    if unpruned:
        s0, t0 = _plan(sdfg, P, symbols, limit=10 ** 9)
        cells += [f"{t0:.1f}", f"{cost(s0):,.0f}"]
    else:
        cells += ["not run", ""]
    cells += [f"{cost(data_parallel_schedule(g, P)):,.0f}", f"{cost(sqrt_schedule(g, P)):,.0f}"]
    return "| " + " | ".join(cells) + " |"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", nargs="+", default=["megatron", "softmax"])
    ap.add_argument("--procs", nargs="+", type=int, default=[16, 64, 256, 1024])
    ap.add_argument("--unpruned-max", type=int, default=64)
    args = ap.parse_args(argv)
    print("| workload | P | plan s | bytes (model) | unpruned plan s | unpruned bytes | data-parallel bytes | "
          "SQRT bytes |\n|---|---|---|---|---|---|---|---|", flush=True)
    for w in args.workloads:
        for p in args.procs:
            print(row(w, p, p <= args.unpruned_max), flush=True)


if __name__ == "__main__":
    main()
