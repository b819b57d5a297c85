"""A heat solver that updates its field in place and writes a second argument, returning nothing
(``distsdfg run --check`` must compare both arguments)."""
import dace
import numpy as np

N = dace.symbol("N")


@dace.program
def heat(T: dace.float64[N], S: dace.float64[N], alpha: dace.float64):
    for t in range(3):
        T[1:-1] = T[1:-1] + alpha * (T[:-2] - 2.0 * T[1:-1] + T[2:])
    S[:] = T * 2.0


def inputs(sizes):
    rng = np.random.default_rng(1)
    return dict(T=rng.random(41), S=np.zeros(41), alpha=0.1)
