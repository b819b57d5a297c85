"""A program that reads far outside its input on one rank (run under mpiexec -n 2): rank 1's block of
``idx`` holds an index 2**46 elements past ``x``, so rank 1 segfaults in the map kernel.

    python crashing.py OUT
"""
import os
import sys

import dace
import numpy as np
from mpi4py import MPI

import distsdfg

N = dace.symbol("N")


@dace.program
def far_gather(idx: dace.int64[N], x: dace.float64[N], out: dace.float64[N]):
    for i in dace.map[0:N]:
        out[i] = x[idx[i]] + 1.0


def main(out):
    comm = MPI.COMM_WORLD
    log = open(os.path.join(out, f"rank{comm.rank}.txt"), "w", buffering=1)
    sdfg = far_gather.to_sdfg()
    distsdfg.lower(sdfg, {distsdfg.maps(sdfg)[0].key: (2,)})
    fn = distsdfg.compile(sdfg)
    n = 64
    idx, x, res = np.arange(n, dtype=np.int64)[::-1].copy(), np.arange(n, dtype=np.float64), np.zeros(n)
    fn(idx=idx, x=x, out=res) if comm.rank == 0 else fn(N=n)
    log.write(f"good call: {res[:3].tolist() if comm.rank == 0 else 'ok'}\n")
    idx[-1] = 2 ** 46           # rank 1's block
    log.write("crashing call\n")
    fn(idx=idx, x=x, out=res) if comm.rank == 0 else fn(N=n)
    log.write("not crashed\n")


if __name__ == "__main__":
    main(sys.argv[1])
