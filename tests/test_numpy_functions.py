"""np.clip, np.var, np.std and np.linalg.norm are translated (``dace_compat.npfuncs``): DaCe 1.0.2
left each a Python callback, which ``lower`` refuses and whose type DaCe cannot infer."""
import numpy as np
import pytest

import dace
import distsdfg
from dace.frontend.python.common import DaceSyntaxError

N, M = dace.symbol("N"), dace.symbol("M")


def _callbacks(sdfg):
    return [k for k, t in sdfg.symbols.items() if isinstance(t, dace.dtypes.callback)]


@dace.program
def statistics(a: dace.float64[N, M], lo: dace.float64[M], b: dace.int64[N], v: dace.float64[N]):
    c = np.clip(a, lo, 0.7) + np.clip(a, 0.2, None) + np.clip(a, None, 0.4) + a.clip(0.1, 0.3)
    s = np.var(a, axis=0) + np.std(a, axis=1)[0] + np.var(a) + a.std(ddof=1) + np.var(a, axis=(0, 1), ddof=2)
    n = np.linalg.norm(a) + np.linalg.norm(v) + np.linalg.norm(v, 1) + np.linalg.norm(v, np.inf)
    return c + s + n + np.linalg.norm(a, axis=1)[1] + np.linalg.norm(a, 'fro') + np.var(b) + a.var()


def _statistics(a, lo, b, v):
    c = np.clip(a, lo, 0.7) + np.clip(a, 0.2, None) + np.clip(a, None, 0.4) + a.clip(0.1, 0.3)
    s = np.var(a, axis=0) + np.std(a, axis=1)[0] + np.var(a) + a.std(ddof=1) + np.var(a, axis=(0, 1), ddof=2)
    n = np.linalg.norm(a) + np.linalg.norm(v) + np.linalg.norm(v, 1) + np.linalg.norm(v, np.inf)
    return c + s + n + np.linalg.norm(a, axis=1)[1] + np.linalg.norm(a, 'fro') + np.var(b) + a.var()


def test_no_callbacks_left():
    assert _callbacks(statistics.to_sdfg()) == []


def test_values_match_numpy():
    g = np.random.default_rng(3)
    a, lo, b, v = g.standard_normal((7, 5)) + 3.0, g.random(5) * 0.3, g.integers(-9, 9, 7), g.standard_normal(7)
    sdfg = statistics.to_sdfg()
    sdfg.name = "npfuncs_statistics"
    out = sdfg(a=a, lo=lo, b=b, v=v, N=7, M=5)
    ref = _statistics(a, lo, b, v)
    assert np.max(np.abs(out - ref)) <= 1e-10 * np.max(np.abs(ref))


@dace.program
def complex_var(z: dace.complex128[N]):
    return np.var(z)


@dace.program
def matrix_two_norm(a: dace.float64[N, M]):
    return np.linalg.norm(a, 2)


@dace.program
def kept_dims(a: dace.float64[N, M]):
    return np.std(a, axis=0, keepdims=True)


@pytest.mark.parametrize("prog, words", [(complex_var, "real arrays only"), (matrix_two_norm, "ord=2"),
                                         (kept_dims, "keepdims")])
def test_untranslated_forms_are_refused_by_name(prog, words):
    with pytest.raises(DaceSyntaxError, match=words):
        prog.to_sdfg()


def test_the_planner_splits_their_maps_and_lower_takes_them():
    sdfg = statistics.to_sdfg()
    schedule = distsdfg.auto_schedule(sdfg, 2, N=400, M=5)
    split = [key for key, grid in schedule.grids if np.prod(grid) == 2]
    assert any("deviation_squared" in key for key in split), schedule
    distsdfg.lower(sdfg, schedule)
    assert _callbacks(sdfg) == []
