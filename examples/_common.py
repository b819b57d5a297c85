"""Shared by the examples: lower one schedule, print the plan on rank 0, run and check against NumPy."""
import warnings

import numpy as np
from mpi4py import MPI

# DaCe 1.0.2 warns about memlet patterns it over-approximates and NumPy about subnormals;
# neither affects the results, and they drown the plan printed below.
warnings.filterwarnings("ignore", category=UserWarning)

import distsdfg
from distsdfg.solver.report import format_report


def grid_2d(P):
    """The two-dimensional process grid closest to square for ``P`` ranks, larger side first:
    1 -> (1, 1), 2 -> (2, 1), 3 -> (3, 1), 4 -> (2, 2), 6 -> (3, 2), 8 -> (4, 2)."""
    q = max(d for d in range(1, int(P ** 0.5) + 1) if P % d == 0)
    return P // q, q


def distinct(grids):
    """``grids`` without repeats, in order (on few ranks several schedules are the same grid)."""
    return list(dict.fromkeys(tuple(g) for g in grids))


def run_schedule(prog, grids_by_label, inputs, reference, symbols=None, tol=1e-10):
    comm = MPI.COMM_WORLD
    symbols = symbols or {}
    sdfg = prog.to_sdfg()
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, grids_by_label))
    if comm.rank == 0:
        print(f"\n== schedule {sdfg._distsdfg.schedule} on {comm.size} ranks")
        for plan in distsdfg.comm_plans(sdfg, nprocs=comm.size, **symbols):
            print(f"  between kernels: {plan}")
        print(format_report(distsdfg.comm_report(sdfg, nprocs=comm.size, **symbols)))
    fn = distsdfg.compile(sdfg)
    # Rank 0 passes the arrays; the others only the sizes (they take rank 0's, and get None back).
    out = fn(**inputs, **symbols) if comm.rank == 0 else fn(**symbols)
    ok = True
    if comm.rank == 0:
        ref = reference(**inputs)
        err = float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-300))
        ok = err <= tol
        print(f"check against NumPy: max relative error {err:.2e} -> {'OK' if ok else 'WRONG'}")
    ok = comm.bcast(ok, root=0)
    if not ok:
        raise SystemExit(1)
