"""A two-layer MLP split Megatron-style: `distsdfg launch -n 4 examples/mlp.py` (any -n).

The first layer is split by columns (each rank computes its slice of the hidden layer, bias
and ReLU included), the second by rows of W2 (each rank contracts its slice of the hidden
layer): the hidden activations never leave their rank, and the only communication after the
inputs are scattered is one MPI_Reduce of the second layer's partial sums to rank 0, where
the output bias is added.
"""
import os
import sys

import dace
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run_schedule  # noqa: E402
from mpi4py import MPI  # noqa: E402


@dace.program
def mlp(x: dace.float64[64, 256], W1: dace.float64[256, 512], b1: dace.float64[512], W2: dace.float64[512, 128],
        b2: dace.float64[128]):
    h = np.maximum(x @ W1 + b1, 0.0)
    return h @ W2 + b2


def reference(x, W1, b1, W2, b2):
    return np.maximum(x @ W1 + b1, 0.0) @ W2 + b2


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    inputs = {"x": rng.random((64, 256)) - 0.5, "W1": rng.random((256, 512)) - 0.5, "b1": rng.random(512) - 0.5,
              "W2": rng.random((512, 128)) - 0.5, "b2": rng.random(128)}
    P = MPI.COMM_WORLD.size
    megatron = {"_MatMult_.gemm_map": (1, P, 1), "_Add__map": (1, P), "_numpy_maximum__map": (1, P),
                "_MatMult__2.gemm_map": (1, 1, P)}
    run_schedule(mlp, megatron, inputs, reference)
