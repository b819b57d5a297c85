"""Let the planner choose: `distsdfg launch -n 4 examples/planned.py`.

The paper's matrix chain (A x B) + (C x (D x E)) with skewed shapes; EinDecomp picks every
kernel's grid for the communicator's size, or keeps the whole program on rank 0 where no split
pays (this chain is a millisecond of work); `explain` shows the choice and its runner-ups, and the
result is checked against NumPy.
"""
import os
import sys
import warnings

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
warnings.filterwarnings("ignore", category=UserWarning)

import distsdfg  # noqa: E402
from distsdfg.solver.report import format_report  # noqa: E402
from distsdfg.testing.programs import matrix_chain  # noqa: E402

SIZES = dict(NS=200, NT=20, NH=2000)

if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(0)
    s, t, h = SIZES["NS"], SIZES["NT"], SIZES["NH"]
    inputs = {"A": rng.random((s, t)), "B": rng.random((t, s)), "C": rng.random((s, t)), "D": rng.random((t, h)),
              "E": rng.random((h, s))}
    sdfg = matrix_chain.to_sdfg()
    sched = distsdfg.auto_schedule(sdfg, comm.size, **SIZES) if comm.rank == 0 else None
    sched = comm.bcast(sched, root=0)
    if comm.rank == 0:
        print(distsdfg.explain(sdfg, nprocs=comm.size, **SIZES))    # the choice, split or whole, and why
    distsdfg.lower(sdfg, sched)
    if comm.rank == 0:
        print(format_report(distsdfg.comm_report(sdfg, nprocs=comm.size, **SIZES)))
    fn = distsdfg.compile(sdfg)
    out = fn(**inputs, **SIZES) if comm.rank == 0 else fn(**SIZES)     # the other ranks pass no data
    ok = True
    if comm.rank == 0:
        ref = (inputs["A"] @ inputs["B"]) + inputs["C"] @ (inputs["D"] @ inputs["E"])
        err = float(np.abs(out - ref).max() / np.abs(ref).max())
        ok = err <= 1e-10
        print(f"check against NumPy: max relative error {err:.2e} -> {'OK' if ok else 'WRONG'}")
    if not comm.bcast(ok, root=0):
        raise SystemExit(1)
