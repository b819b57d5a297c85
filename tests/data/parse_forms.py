"""Programs as users write them that DaCe 1.0.2's frontend cannot parse, and the forms it parses."""
import dace
import numpy as np

N = dace.symbol("N")


@dace.program
def converge_diff(A: dace.float64[N], tol: dace.float64, max_steps: dace.int64):
    diff = 1.0
    steps = 0
    while diff > tol and steps < max_steps:
        B = 0.5 * (A[:-2] + A[2:])
        diff = np.max(np.abs(B - A[1:-1]))
        A[1:-1] = B
        steps += 1
    return steps


@dace.program
def converge_tol(A: dace.float64[N], tol: dace.float64, max_steps: dace.int64):
    delta = 1.0
    steps = 0
    while delta > tol and steps < max_steps:
        B = 0.5 * (A[:-2] + A[2:])
        delta = np.max(np.abs(B - A[1:-1]))
        A[1:-1] = B
        steps += 1
    return steps


@dace.program
def converge_break(A: dace.float64[N], tol: dace.float64, max_steps: dace.int64):
    steps = 0
    for t in range(max_steps):
        B = 0.5 * (A[:-2] + A[2:])
        delta = np.max(np.abs(B - A[1:-1]))
        A[1:-1] = B
        steps += 1
        if delta <= tol:
            break
    return steps


@dace.program
def sorted_twice(X: dace.float64[N]):
    return np.sort(X) * 2.0


@dace.program
def converge_break_in_while(A: dace.float64[N], tol: dace.float64, max_steps: dace.int64):
    steps = 0
    while steps < max_steps:
        B = 0.5 * (A[:-2] + A[2:])
        diff = np.max(np.abs(B - A[1:-1]))
        A[1:-1] = B
        steps += 1
        if diff <= tol:
            break
    return steps


@dace.program
def converge_until(A: dace.float64[N], tol: dace.float64, max_steps: dace.int64):
    steps = 0
    while True:
        B = 0.5 * (A[:-2] + A[2:])
        diff = np.max(np.abs(B - A[1:-1]))
        A[1:-1] = B
        steps += 1
        if diff <= tol or steps >= max_steps:
            break
    return steps


def converge_numpy(A, tol, max_steps, early_break=False):
    """What the convergence loops above compute, in NumPy (``A`` updated in place; the step count)."""
    diff = 1.0
    steps = 0
    while (steps < max_steps) if early_break else (diff > tol and steps < max_steps):
        B = 0.5 * (A[:-2] + A[2:])
        diff = np.max(np.abs(B - A[1:-1]))
        A[1:-1] = B
        steps += 1
        if early_break and diff <= tol:
            break
    return steps
