"""Ranks that disagree at a call (run under mpiexec -n 2): each rank writes what it saw to OUT/rankR.txt.

    python call_disagreements.py OUT MODE      MODE: agree-then-rank1-alone | rank0-alone | different-plans | scalars
"""
import os
import sys
import time

import dace
import numpy as np
from mpi4py import MPI

import distsdfg

N = dace.symbol("N")


@dace.program
def add(A: dace.float64[N], B: dace.float64[N], C: dace.float64[N]):
    C[:] = A + B


@dace.program
def axpy(A: dace.float64[N], B: dace.float64[N], C: dace.float64[N], lr: dace.float64):
    C[:] = A + lr * B


def main(out, mode):
    comm = MPI.COMM_WORLD
    rank = comm.rank
    log = open(os.path.join(out, f"rank{rank}.txt"), "w", buffering=1)
    sdfg = add.to_sdfg()
    if mode == "different-plans":       # rank 1 splits the map in one part, rank 0 in two
        distsdfg.lower(sdfg, {distsdfg.maps(sdfg)[0].key: (2,) if rank == 0 else (1,)})
        try:
            distsdfg.compile(sdfg)
        except distsdfg.DistributedLoweringError as exc:
            log.write(f"compile: {type(exc).__name__}: {exc}\n")
        log.write("not aborted\n")
        return
    if mode == "scalars":
        sdfg = axpy.to_sdfg()
    distsdfg.lower(sdfg, {distsdfg.maps(sdfg)[0].key: (2,)})
    fn = distsdfg.compile(sdfg)
    A, B, C = np.arange(10.0), np.ones(10), np.zeros(10)
    if mode == "scalars":
        log.write(f"start {time.time()}\n")
        # rank 1 passes another learning rate than rank 0
        try:
            fn(A=A, B=B, C=C, lr=0.1) if rank == 0 else fn(lr=0.2)
        except distsdfg.DistributedLoweringError as exc:
            log.write(f"lr: {type(exc).__name__}: {exc}\n")
        # a 0-d array for a scalar, and NumPy scalars: compared by value
        try:
            fn(A=A, B=B, C=C, lr=np.float64(0.5)) if rank == 0 else fn(lr=np.array(0.25))
        except distsdfg.DistributedLoweringError as exc:
            log.write(f"lr0d: {type(exc).__name__}: {exc}\n")
        fn(A=A, B=B, C=C, lr=0.5) if rank == 0 else fn()        # rank 1 leaves it out: rank 0's
        log.write(f"left out: {C[:3].tolist() if rank == 0 else 'ok'}\n")
        fn(A=A, B=B, C=C, lr=2.0) if rank == 0 else fn(lr=np.float64(2.0))
        log.write(f"same: {C[:3].tolist() if rank == 0 else 'ok'}\n")
        log.write(f"end {time.time()}\n")
        return
    log.write(f"compiled {time.time()}\n")
    if mode == "agree-then-rank1-alone":
        # rank 0: four positional arguments for three; rank 1 calls correctly
        try:
            fn(A, B, C, C) if rank == 0 else fn(A, B, C)
        except distsdfg.DistributedLoweringError as exc:
            log.write(f"args: {type(exc).__name__}: {exc}\n")
        # rank 1 passes another size than rank 0's arrays imply
        try:
            fn(A=A, B=B, C=C) if rank == 0 else fn(N=12)
        except distsdfg.DistributedLoweringError as exc:
            log.write(f"sizes: {type(exc).__name__}: {exc}\n")
        fn(A=A, B=B, C=C) if rank == 0 else fn(N=10)
        log.write(f"good: {C[:3].tolist() if rank == 0 else 'ok'}\n")
        log.write(f"alone {time.time()}\n")
        if rank == 1:
            fn(N=10)                # rank 0 never calls
        else:
            time.sleep(60)
    else:
        log.write(f"alone {time.time()}\n")
        if rank == 0:
            fn(A=A, B=B, C=C)       # rank 1 never calls
        else:
            time.sleep(60)
    log.write("not aborted\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
