"""The convergence loops of parse_forms.py lowered and run on every rank of the job, against NumPy on
rank 0 (run under mpiexec -n P): prints one line per case, `case: steps S/S error E`.

    python while_forms_run.py
"""
import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import distsdfg  # noqa: E402
import parse_forms  # noqa: E402


def main():
    comm = MPI.COMM_WORLD
    P = comm.size
    for name, early in [("converge_diff", False), ("converge_tol", False), ("converge_break_in_while", True),
                        ("converge_until", True)]:
        with distsdfg.numpy_semantics():
            sdfg = getattr(parse_forms, name).to_sdfg()
        distsdfg.lower(sdfg, {"*": (P,)})
        fn = distsdfg.compile(sdfg)
        for tol, max_steps in [(0.05, 1000), (1e-12, 7), (10.0, 5), (1e-3, 0)]:
            if name == "converge_until" and max_steps == 0:
                continue        # `while True:` runs its body once
            A0 = np.random.default_rng(7).random(61)
            A = A0.copy()
            got = fn(A=A, tol=tol, max_steps=max_steps) if comm.rank == 0 else fn(N=61)
            if comm.rank == 0:
                want_A = A0.copy()
                want = parse_forms.converge_numpy(want_A, tol, max_steps, early)
                steps = int(np.asarray(got).reshape(-1)[0])
                err = float(np.max(np.abs(A - want_A)))
                print(f"{name} tol={tol} max_steps={max_steps}: steps {steps}/{want} error {err:.3g}", flush=True)


if __name__ == "__main__":
    main()
