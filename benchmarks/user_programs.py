"""Programs in the shapes users bring, next to NPBench's kernels in the speed report
(``benchmarks.npbench_speed``): a convergence loop, a gradient-descent loop, a clustering step
and a time-stepped stencil, each with its NumPy version and inputs.

Importing this module must not import distsdfg: the report runs "DaCe alone" from it in a
process of its own (``benchmarks/dace_alone.py``).
"""

import copy
from typing import Callable, Dict, List

import dace
import numpy as np

__all__ = ["PROGRAMS", "UserBench"]

N, D, K, EPOCHS, TSTEPS = (dace.symbol(s) for s in ("N", "D", "K", "EPOCHS", "TSTEPS"))


# -- a 2-D heat solver: 5-point stencil in a while loop with a max-change test ------------------------
@dace.program
def heat_while(T: dace.float64[N, N], tol: dace.float64, max_steps: dace.int64):
    diff = np.zeros((1,), dtype=np.float64)
    diff[0] = tol + 1.0
    steps = np.zeros((1,), dtype=np.int64)
    while diff[0] > tol and steps[0] < max_steps:
        Tn = np.copy(T)
        Tn[1:-1, 1:-1] = 0.25 * (T[:-2, 1:-1] + T[2:, 1:-1] + T[1:-1, :-2] + T[1:-1, 2:])
        diff[0] = np.max(np.abs(Tn - T))
        T[:] = Tn
        steps[0] += 1
    return steps


def heat_while_np(T, tol, max_steps):
    diff, steps = tol + 1.0, 0
    while diff > tol and steps < max_steps:
        Tn = T.copy()
        Tn[1:-1, 1:-1] = 0.25 * (T[:-2, 1:-1] + T[2:, 1:-1] + T[1:-1, :-2] + T[1:-1, 2:])
        diff = np.max(np.abs(Tn - T))
        T[:] = Tn
        steps += 1
    return np.array([steps])


def heat_while_inputs(N=400, max_steps=400):
    T = np.zeros((N, N))
    T[0, :] = 1.0
    T[:, 0] = 0.5
    return dict(T=T, tol=1e-12, max_steps=max_steps)


# -- logistic regression: full-batch gradient descent ------------------------------------------------
@dace.program
def logreg(X: dace.float64[N, D], y: dace.float64[N], w: dace.float64[D], lr: dace.float64):
    for e in range(EPOCHS):
        z = X @ w
        p = 1.0 / (1.0 + np.exp(-z))
        g = (np.transpose(X) @ (p - y)) / N
        w -= lr * g


def logreg_np(X, y, w, lr, EPOCHS):
    for _ in range(EPOCHS):
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        w -= lr * (X.T @ (p - y)) / X.shape[0]


def logreg_inputs(N=200000, D=32, EPOCHS=20):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((N, D))
    y = (X @ rng.standard_normal(D) > 0).astype(np.float64)
    return dict(X=X, y=y, w=np.zeros(D), lr=0.5, EPOCHS=EPOCHS)


# -- one k-means step: distances by GEMM, argmin, one-hot sums ------------------------------------
@dace.program
def kmeans_step(X: dace.float64[N, D], C: dace.float64[K, D]):
    cn = np.sum(C * C, axis=1)
    dist = -2.0 * (X @ np.transpose(C))
    for i, k in dace.map[0:N, 0:K]:
        dist[i, k] += cn[k]
    labels = np.argmin(dist, axis=1)
    onehot = np.zeros((N, K), dtype=np.float64)
    for i, k in dace.map[0:N, 0:K]:
        if labels[i] == k:
            onehot[i, k] = 1.0
    sums = np.transpose(onehot) @ X
    counts = np.sum(onehot, axis=0)
    for k, d in dace.map[0:K, 0:D]:
        C[k, d] = sums[k, d] / max(counts[k], 1.0)


def kmeans_step_np(X, C):
    dist = -2.0 * (X @ C.T) + np.sum(C * C, axis=1)[None, :]
    labels = np.argmin(dist, axis=1)
    onehot = (labels[:, None] == np.arange(C.shape[0])[None, :]).astype(np.float64)
    C[:] = (onehot.T @ X) / np.maximum(onehot.sum(axis=0), 1.0)[:, None]


def kmeans_step_inputs(N=200000, D=16, K=8):
    rng = np.random.default_rng(2)
    centres = rng.standard_normal((K, D)) * 4.0
    X = centres[rng.integers(0, K, N)] + rng.standard_normal((N, D))
    return dict(X=X, C=X[rng.choice(N, K, replace=False)].copy())


# -- an explicit time-stepped 2-D diffusion with a source term (fixed step count) ---------------------
@dace.program
def diffusion(u: dace.float64[N, N], f: dace.float64[N, N], dt: dace.float64):
    for t in range(TSTEPS):
        u[1:-1, 1:-1] = u[1:-1, 1:-1] + dt * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
                                              - 4.0 * u[1:-1, 1:-1] + f[1:-1, 1:-1])


def diffusion_np(u, f, dt, TSTEPS):
    for _ in range(TSTEPS):
        u[1:-1, 1:-1] = u[1:-1, 1:-1] + dt * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
                                              - 4.0 * u[1:-1, 1:-1] + f[1:-1, 1:-1])


def diffusion_inputs(N=600, TSTEPS=100):
    rng = np.random.default_rng(3)
    return dict(u=np.zeros((N, N)), f=rng.random((N, N)), dt=0.2, TSTEPS=TSTEPS)


class UserBench:
    """One program of this module, in the shape of ``distsdfg.testing.npbench.Bench``."""

    def __init__(self, name: str, program, numpy_fn: Callable, inputs: Callable, outputs: List[str]):
        self.name, self._program, self._numpy, self._inputs, self._outputs = name, program, numpy_fn, inputs, outputs

    def arguments(self) -> Dict[str, object]:
        return self._inputs()

    def program(self):
        return self._program

    def numpy_call(self, args):
        import inspect
        names = list(inspect.signature(self._numpy).parameters)
        return self._numpy(*[args[n] for n in names])

    def reference(self, args):
        args = copy.deepcopy(args)
        ret = self.numpy_call(args)
        out = {} if ret is None else {"return0": np.asarray(ret)}
        out.update({n: np.asarray(args[n]) for n in self._outputs})
        return out

    def output_names(self) -> List[str]:
        return list(self._outputs)


PROGRAMS: Dict[str, UserBench] = {b.name: b for b in (
    UserBench("heat_while", heat_while, heat_while_np, heat_while_inputs, ["T"]),
    UserBench("logreg", logreg, logreg_np, logreg_inputs, ["w"]),
    UserBench("kmeans_step", kmeans_step, kmeans_step_np, kmeans_step_inputs, ["C"]),
    UserBench("diffusion", diffusion, diffusion_np, diffusion_inputs, ["u"]),
)}
