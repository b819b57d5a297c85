"""The time model (``distsdfg.planner.predict``) against measured runs, and its curve past this machine.

    mpiexec -n P python -m mpi4py -m benchmarks.prediction measure [--repeats 5] [--out FILE.jsonl]
    python -m benchmarks.prediction curve [--n 8192] [--procs 1 2 4 ... 128] [--out PREFIX]
    python -m benchmarks.prediction table FILE.jsonl

``measure``: each case of ``CASES`` lowered with ``lower(sdfg, "auto", nprocs=P)`` (root
placement), compiled, checked against NumPy, then timed: a warm-up call, then ``--repeats`` calls
between barriers (the slowest rank's time, median). Rank 0 prices the same lowered program with
``predict(sdfg, "this-machine", nprocs=P)`` and appends one JSON line per case (measured and
predicted seconds, communication and computation parts, the schedule). Run it for P = 1, 2, 4
with one thread per process, then ``table`` prints the Markdown table.

``curve``: the thesis' figure 8.2 (seed 004: an ``n^3`` float64 matmul on 1 to 128 Piz Daint
nodes, operands scattered from and gathered to rank 0) predicted on the ``daint-xc50`` machine,
with root placement and with distributed placement; writes ``PREFIX.md`` (the table) and, when
matplotlib is installed, ``PREFIX.png`` (the two speedup curves).
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Dict, List

import numpy as np

#: label -> (workload in benchmarks/workloads.py, sizes)
CASES = {
    "matmul 1024^3": ("matmul_square", dict(M=1024, N=1024, K=1024)),
    "mlp 512x512x1024": ("mlp", dict(NB=512, NI=512, NH=1024, NO=512)),
    "elementwise 4M": ("elementwise", dict(N=4 * 1024 * 1024)),
}


def measure(args) -> None:
    from mpi4py import MPI

    import distsdfg
    from distsdfg.planner.predict import predict
    from .workloads import get
    comm = MPI.COMM_WORLD
    P, rank = comm.size, comm.rank
    for label in args.cases:
        wname, sizes = CASES[label]
        w = get(wname)
        inputs = w.inputs(sizes, np.random.default_rng(0))
        ref = w.reference(**inputs)
        sdfg = w.program.to_sdfg()
        sdfg.name = f"predict_{wname}_p{P}"
        distsdfg.lower(sdfg, "auto", nprocs=P, plan_options=sizes)
        fn = distsdfg.compile(sdfg)
        out = fn(**inputs, **sizes)                       # warm-up, checked
        if rank == 0:
            err = float(np.abs(out - ref).max() / np.abs(ref).max())
            assert err < 1e-10, f"{label}: relative error {err}"
        times = []
        for _ in range(args.repeats):
            comm.Barrier()
            t0 = time.perf_counter()
            fn(**inputs, **sizes)
            times.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
        if rank != 0:
            continue
        pred = predict(sdfg, "this-machine", nprocs=P, **sizes)
        row = {"case": label, "nprocs": P, "measured_s": float(np.median(times)), "times": times,
               "predicted_s": pred.seconds, "comm_s": pred.comm_seconds, "compute_s": pred.compute_seconds,
               "schedule": {k: list(g) for k, g in sdfg._distsdfg.schedule.grids},
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": _load()}
        print(f"P={P} {label}: measured {row['measured_s'] * 1e3:.1f} ms, predicted {pred.seconds * 1e3:.1f} ms "
              f"({pred.comm_seconds * 1e3:.1f} + {pred.compute_seconds * 1e3:.1f})", flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")


def _load() -> float:
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except OSError:
        return float("nan")


def table(rows: List[Dict]) -> str:
    lines = ["| case | P | schedule (largest grid) | measured ms | predicted ms (comm + compute) | "
             "predicted / measured | load |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["case"], r["nprocs"])):
        grid = max(r["schedule"].values(), key=lambda g: np.prod(g)) if r["schedule"] else []
        lines.append(f"| {r['case']} | {r['nprocs']} | {tuple(grid)} | {r['measured_s'] * 1e3:.1f} | "
                     f"{r['predicted_s'] * 1e3:.1f} ({r['comm_s'] * 1e3:.1f} + {r['compute_s'] * 1e3:.1f}) | "
                     f"{r['predicted_s'] / r['measured_s']:.2f} | {r['load']:.1f} |")
    return "\n".join(lines)


def curve(args) -> None:
    from distsdfg.planner.predict import predict_curve
    make = _square_matmul().to_sdfg
    root = predict_curve(make, args.procs, "daint-xc50", N=args.n)
    dist = predict_curve(make, args.procs, "daint-xc50", placement="distributed", N=args.n)
    lines = [f"{args.n}^3 float64 matmul, `daint-xc50`, auto schedule", "",
             "| P | root placement ms | speedup | distributed placement ms | speedup |", "|---|---|---|---|---|"]
    for r, d in zip(root, dist):
        lines.append(f"| {r.nprocs} | {r.seconds * 1e3:.1f} | {root[0].seconds / r.seconds:.2f} | "
                     f"{d.seconds * 1e3:.1f} | {dist[0].seconds / d.seconds:.3g} |")
    text = "\n".join(lines)
    print(text)
    with open(args.out + ".md", "w") as f:
        f.write(text + "\n")
    if _plot(args.out + ".png", [r.nprocs for r in root], [root[0].seconds / r.seconds for r in root],
             [dist[0].seconds / d.seconds for d in dist], args.n):
        print(f"wrote {args.out}.png")
    else:
        print("matplotlib is not installed: no plot")


def _square_matmul():
    """The thesis' figure 8.2 program: ``A @ B`` of two square float64 matrices."""
    import dace
    N = dace.symbol("N")

    def matmul_8_2(A, B):
        return A @ B
    matmul_8_2.__annotations__ = {"A": dace.float64[N, N], "B": dace.float64[N, N]}
    return dace.program(matmul_8_2)


def _plot(path, procs, root, dist, n) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.plot(procs, procs, ls=":", color="grey", label="ideal")
    ax.plot(procs, root, marker="o", label="root placement (Scatterv/Bcast/Gatherv)")
    ax.plot(procs, dist, marker="s", label="distributed placement")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("nodes (one P100 each)")
    ax.set_ylabel("predicted speedup over one node")
    ax.set_title(f"{n}^3 float64 matmul, Piz-Daint-like model")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--repeats", type=int, default=5)
    m.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    m.add_argument("--out", default=None, help="append one JSON line per case (rank 0)")
    c = sub.add_parser("curve")
    c.add_argument("--n", type=int, default=8192)
    c.add_argument("--procs", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64, 128])
    c.add_argument("--out", default="prediction-8.2")
    t = sub.add_parser("table")
    t.add_argument("file")
    args = ap.parse_args(argv)
    if args.what == "measure":
        measure(args)
    elif args.what == "curve":
        curve(args)
    else:
        with open(args.file) as f:
            print(table([json.loads(line) for line in f if line.strip()]))


if __name__ == "__main__":
    main()
