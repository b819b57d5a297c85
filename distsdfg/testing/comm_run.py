"""Programs on sub-communicators of a 4-rank world, under one mpiexec (tests/test_comm.py).

    mpiexec -n 4 python -m mpi4py -m distsdfg.testing.comm_run OUT.json

* Split A (colour ``rank // 2``): world ranks {0, 1} compile and run matmul on a (2, 1, 1) grid
  while {2, 3} compile and run the MLP, at the same time.
* Split B (colour ``rank % 2``, keys reversed, so that world ranks 2 and 3 are the roots):
  {2, 0} runs matmul and {3, 1} the MLP (builds reused): programs on communicators whose rank 0
  is not world rank 0, in processes that may hold the same program on another communicator.
* The programs of split A run again after those of split B (one process, two communicators).
* A communicator of one rank refuses the two-rank matmul (``CommunicatorSizeError``).

Every result is checked against NumPy on the root of its own communicator. With the PMPI byte
counter preloaded (``distsdfg/testing/pmpi.py``), every call's bytes per rank are measured too (the
program's own pickled messages on its communicator counted apart) and set beside comm_report's.
World rank 0 gathers the records and writes them as JSON.
"""
from __future__ import annotations

import json
import sys
import traceback

import numpy as np

MLP2 = {"_MatMult_.gemm_map": (1, 2, 1), "_Add__map": (1, 2), "_numpy_maximum__map": (1, 2),
        "_MatMult__2.gemm_map": (1, 1, 2)}
SCHEDULES = {
    "matmul": {"gemm_map": (2, 1, 1)},
    "mlp": MLP2,
}


def _counters():
    """This rank's PMPI counters when the byte counter is preloaded, else None."""
    import os
    if "libbytecount" not in os.environ.get("LD_PRELOAD", ""):
        return None
    from distsdfg.testing.pmpi import Counters, preloaded
    return Counters(preloaded())


def compiled(name: str, comm):
    """``name`` lowered with its two-rank schedule and compiled on ``comm`` (collective)."""
    import distsdfg
    from distsdfg.testing.programs import get
    p = get(name)
    sdfg = p.sdfg()
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, SCHEDULES[name], fuzzy=True))
    return p, distsdfg.compile(sdfg, comm=comm)


def run(p, fn, comm, counters, phase: str) -> dict:
    """One call of ``fn`` on ``comm``, checked on its root; bytes per rank when counted."""
    from mpi4py import MPI

    import distsdfg
    from ..runtime.program import symbol_values
    from distsdfg.testing.mpirun import _rel_err
    inputs = p.inputs(np.random.default_rng(1234))
    values = symbol_values(fn.sdfg, inputs, dict(p.symbols))
    if comm.rank != 0:          # only the root's arrays count
        inputs = {k: np.zeros_like(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    if counters is not None:
        counters.set_control(comm)      # the program's own pickled messages: counted apart
        counters.reset()
    out = fn(**inputs, **dict(p.symbols))
    snap = counters.snapshot() if counters is not None else None
    world = MPI.COMM_WORLD.rank
    members = comm.gather(world, root=0)
    snaps = comm.gather(snap, root=0)
    if comm.rank != 0:
        return {}
    ref = p.reference(**p.inputs(np.random.default_rng(1234)))
    rec = {"phase": phase, "program": p.name, "members": members, "rel_err": _rel_err(out, ref),
           "dtype": str(np.asarray(out).dtype)}
    if counters is not None:
        sizes = {k: v for k, v in values.items() if k in fn.sdfg.symbols}
        report = distsdfg.comm_report(fn.sdfg, nprocs=comm.size, **sizes)
        rec["expected"] = {"sent": [sum(s.total_sent[q] for s in report) for q in range(comm.size)],
                           "received": [sum(s.total_received[q] for s in report) for q in range(comm.size)]}
        rec["measured"] = {k: [sum(c[i] for c in s["data"].values()) for s in snaps]
                           for k, i in (("sent", 1), ("received", 2))}
        rec["control_calls"] = sum(c[0] for s in snaps for c in s["control"].values())
    return rec


def main(out_path: str) -> int:
    from mpi4py import MPI

    from distsdfg.errors import CommunicatorSizeError
    world = MPI.COMM_WORLD
    assert world.size == 4, "run on 4 ranks"
    counters = _counters()
    records = []

    def step(what, fn):
        try:
            rec = fn()
        except Exception as exc:     # record, and let the other steps run
            rec = {"phase": what, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        records.append(rec)

    a = world.Split(color=world.rank // 2, key=world.rank)
    b = world.Split(color=world.rank % 2, key=-world.rank)
    mine_a = "matmul" if world.rank // 2 == 0 else "mlp"
    mine_b = "matmul" if world.rank % 2 == 0 else "mlp"
    progs = {}

    def phase_a():
        progs["a"] = compiled(mine_a, a)
        return run(*progs["a"], a, counters, "split A")
    step("split A", phase_a)

    step("split B", lambda: run(*compiled(mine_b, b), b, counters, "split B"))
    step("split A again", lambda: run(*progs["a"], a, counters, "split A again"))

    def too_small():
        alone = world.Split(color=world.rank, key=0)
        p, fn = compiled("matmul", alone)
        try:
            fn(**p.inputs(np.random.default_rng(0)))
        except CommunicatorSizeError as exc:
            return {"phase": "size", "refused": str(exc)} if world.rank == 0 else {}
        return {"phase": "size", "refused": None} if world.rank == 0 else {}
    step("size", too_small)

    everything = world.gather([r for r in records if r], root=0)
    if world.rank == 0:
        flat = [r for rs in everything for r in rs]
        with open(out_path, "w") as f:
            json.dump(flat, f, indent=1)
        for r in flat:
            print(json.dumps({k: v for k, v in r.items() if k != "trace"})[:400], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
