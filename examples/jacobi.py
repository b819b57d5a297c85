"""A 2-D Jacobi stencil in a time loop: `distsdfg launch -n 4 examples/jacobi.py` (any -n).

On P ranks the loop body's maps are split on the 2-D grid closest to square ((2, 2) for 4 ranks),
then by rows (P, 1). A and B are scattered once, updated in
place on their owners for every sweep, and gathered once; inside the loop only halos move:
each rank receives the rows and columns it lacks from its grid neighbours (Isend/Irecv).
"""
import warnings

import dace
import numpy as np
from mpi4py import MPI

warnings.filterwarnings("ignore", category=UserWarning)

import distsdfg  # noqa: E402
from distsdfg.solver.report import format_report  # noqa: E402

N = dace.symbol("N")


@dace.program
def jacobi2d(A: dace.float64[N, N], B: dace.float64[N, N], TSTEPS: dace.int64):
    for t in range(1, TSTEPS):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])


def reference(A, B, TSTEPS):
    A, B = A.copy(), B.copy()
    for _ in range(1, TSTEPS):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
    return A, B


def run(grid, n=130, steps=11):
    comm = MPI.COMM_WORLD
    sdfg = jacobi2d.to_sdfg()
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"*": grid}))    # every 2-D map of the loop body
    if comm.rank == 0:
        print(f"\n== every map of the loop body split {grid} on {comm.size} ranks, N={n}, {steps - 1} sweeps")
        print(format_report(distsdfg.comm_report(sdfg, nprocs=comm.size, N=n, TSTEPS=steps)))
    fn = distsdfg.compile(sdfg)
    rng = np.random.default_rng(0)
    A0, B0 = rng.random((n, n)), rng.random((n, n))
    A, B = (A0.copy(), B0.copy()) if comm.rank == 0 else (np.zeros((n, n)), np.zeros((n, n)))
    fn(A=A, B=B, TSTEPS=steps)
    ok = True
    if comm.rank == 0:
        rA, rB = reference(A0, B0, steps)
        err = max(np.abs(A - rA).max() / np.abs(rA).max(), np.abs(B - rB).max() / np.abs(rB).max())
        ok = err <= 1e-10
        print(f"check against NumPy: max relative error {err:.2e} -> {'OK' if ok else 'WRONG'}")
    if not comm.bcast(ok, root=0):
        raise SystemExit(1)


if __name__ == "__main__":
    P = MPI.COMM_WORLD.size
    q = max(d for d in range(1, int(P ** 0.5) + 1) if P % d == 0)
    for grid in dict.fromkeys([(P // q, q), (P, 1)]):
        run(grid)
