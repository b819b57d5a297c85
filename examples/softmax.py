"""A 4-D softmax over the last axis: `distsdfg launch -n 4 examples/softmax.py` (any -n).

First split over the leading dims (data parallel: no communication between the maps), then
over the row axis itself (the row maximum and the row sum are each combined by one Allreduce).
"""
import os
import sys

import dace
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import distinct, grid_2d, run_schedule  # noqa: E402
from mpi4py import MPI  # noqa: E402


@dace.program
def softmax(inp: dace.float32[8, 16, 32, 32]):
    rowmax = np.maximum.reduce(inp, axis=-1, keepdims=True)
    exp_arr = np.exp(inp - rowmax)
    rowsum = np.add.reduce(exp_arr, axis=-1, keepdims=True)
    return exp_arr / rowsum


def reference(inp):
    e = np.exp(inp - inp.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


if __name__ == "__main__":
    inp = np.random.default_rng(0).random((8, 16, 32, 32)).astype(np.float32)
    P = MPI.COMM_WORLD.size
    p, q = grid_2d(P)
    # the leading dims split p x q (no communication), then the row axis split P ways
    for grid in distinct([(p, q, 1, 1), (1, 1, 1, P)]):
        labels = {"reduce_output": grid, "_Sub__map": grid, "_numpy_exp__map": grid, "_Div__map": grid}
        run_schedule(softmax, labels, {"inp": inp}, reference, tol=1e-5)
