"""A 2-rank job for ``tests/test_whole.py``: programs the planner keeps whole on rank 0, called
three times; rank 0 checks each result against NumPy, the other rank gets None, and the only MPI
call is each call's control message from rank 0 (the PMPI counter, when preloaded, is read around
the calls).

    mpiexec -n 2 python -m mpi4py -m distsdfg.testing.whole_run OUT.json
"""
from ..dace_compat.semantics import parse as semantic_parse
import json
import os
import sys

import dace
import numpy as np

N = dace.symbol("N")


@dace.program
def smooth(a: dace.float64[N, N], steps: dace.int64):
    for t in range(steps):
        a[1:-1, 1:-1] = 0.25 * (a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])


@dace.program
def scale_sum(x: dace.float64[N], y: dace.float64[N]):
    return np.sum(2.0 * x + y)


def main(out: str) -> int:
    os.environ["DISTSDFG_WHOLE"] = "1"
    from mpi4py import MPI

    import distsdfg
    from distsdfg.testing import pmpi
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(3)
    records = []
    for name in ("smooth", "scale_sum"):
        prog = {"smooth": smooth, "scale_sum": scale_sum}[name]
        sdfg = semantic_parse(prog)
        sdfg.name = f"whole2_{name}"
        n = 40
        distsdfg.lower(sdfg, "auto", nprocs=comm.size, plan_options=dict(N=n))
        fn = distsdfg.compile(sdfg)
        rec = {"program": name, "rank0_only": bool(fn.lowered.rank0_only), "errors": [], "others": []}
        counters = pmpi.counters()
        if counters is not None:
            counters.reset()
        for call in range(3):
            if name == "smooth":
                a = rng.random((n, n))
                want = a.copy()
                for _ in range(4):
                    want[1:-1, 1:-1] = 0.25 * (want[:-2, 1:-1] + want[2:, 1:-1] + want[1:-1, :-2] + want[1:-1, 2:])
                args = dict(a=a, steps=4) if comm.rank == 0 else dict(N=n, steps=4)
                got = fn(**args)
                if comm.rank == 0:
                    rec["errors"].append(float(np.max(np.abs(a - want))))
            else:
                x, y = rng.random(n), rng.random(n)
                got = fn(x=x, y=y) if comm.rank == 0 else fn(N=n)
                if comm.rank == 0:
                    rec["errors"].append(abs(float(np.asarray(got).reshape(-1)[0]) - float(np.sum(2.0 * x + y))))
            if comm.rank != 0:
                rec["others"].append(got is None)
        if counters is not None:       # every MPI call of this rank on the program's communicator
            rec["calls"] = {name: [calls, sent] for name, (calls, sent, _) in counters.snapshot()["data"].items()}
        recs = comm.gather(rec, root=0)
        if comm.rank == 0:
            records.append({"program": name, "rank0_only": recs[0]["rank0_only"], "errors": recs[0]["errors"],
                            "others_none": all(all(r["others"]) for r in recs[1:]),
                            "calls": [r.get("calls") for r in recs]})
    if comm.rank == 0:
        with open(out, "w") as f:
            json.dump(records, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
