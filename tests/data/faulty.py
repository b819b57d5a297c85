"""A program whose input hook fails on rank 2 (tests that one failing rank ends the whole job)."""
import dace
import numpy as np


@dace.program
def scale(x: dace.float64[64]):
    return x * 2.0


def inputs(sizes):
    from mpi4py import MPI
    if MPI.COMM_WORLD.rank == 2:
        raise RuntimeError("rank 2 cannot read its input file")
    return {"x": np.arange(64, dtype=np.float64)}
