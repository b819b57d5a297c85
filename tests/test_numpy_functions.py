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



def test_no_callbacks_left():
    assert _callbacks(statistics.to_sdfg()) == []


def test_values_match_numpy():
    g = np.random.default_rng(3)
    a, lo, b, v = g.standard_normal((7, 5)) + 3.0, g.random(5) * 0.3, g.integers(-9, 9, 7), g.standard_normal(7)
    sdfg = statistics.to_sdfg()
    sdfg.name = "npfuncs_statistics"
    out = sdfg(a=a, lo=lo, b=b, v=v, N=7, M=5)
    ref = statistics.f(a, lo, b, v)          # the program's own Python, run by NumPy
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


@dace.program
def array_forms(A: dace.float64[N, N], B: dace.float64[N, N], a: dace.float64[N], b: dace.float64[4],
                I: dace.int64[N]):
    m = np.matmul(A, B) + np.outer(a, a) + np.diag(a) + np.tril(A) + np.triu(A, 1) * 2.0 + np.tril(A, -1)
    s = np.inner(a, a) + np.vdot(a, a) + np.trace(A @ B) + np.trace(B, 1) + np.diag(B, 1)[0] + np.diag(B, -2)[1]
    c = np.cumsum(A, axis=1) + np.cumsum(A, axis=0) + np.cumprod(A * 0.5 + 0.8, axis=0) + np.diag(B)
    f = np.cumsum(A)[3] + np.cumsum(I)[4] + np.diff(a)[1] + np.diff(A, n=2, axis=0)[0, 2] + np.diff(A)[1, 1]
    g = np.argmax(a) + np.argmin(A) + a.argmax() + A.argmin(axis=1) + np.argmax(A, axis=0) + A.max(axis=0)
    h = A.min(axis=1) + A.sum(axis=1) + A.mean(axis=0) + A.prod(axis=1) + np.prod(I) + np.ptp(A, axis=1)
    k = np.count_nonzero(a > 0.5) + np.count_nonzero(A > 0.2, axis=0) + np.any(A > 0.9, axis=1) + np.all(A > 0.05, axis=0)
    return m + s + c + f + g + h + k + np.round(A * 10.0, 1) + np.around(a) + np.average(A, axis=0) + np.outer(a, b)[:, 0]



def test_array_functions_have_no_callbacks_and_match_numpy():
    g = np.random.default_rng(5)
    A, B, a, b = g.random((7, 7)), g.random((7, 7)), g.random(7), g.random(4)
    I = g.integers(-3, 4, 7)
    A[2, 3], a[4] = 0.45, 2.5                      # halves: NumPy rounds them to even
    sdfg = array_forms.to_sdfg()
    assert _callbacks(sdfg) == []
    sdfg.name = "npfuncs_array_forms"
    out = sdfg(A=A, B=B, a=a, b=b, I=I, N=7)
    ref = array_forms.f(A, B, a, b, I)       # the program's own Python, run by NumPy
    assert np.max(np.abs(out - ref)) <= 1e-10 * np.max(np.abs(ref))


@dace.program
def vector_diag_offset(a: dace.float64[N]):
    return np.diag(a, 1)


@dace.program
def boolean_diff(a: dace.bool[N]):
    return np.diff(a)


@pytest.mark.parametrize("prog, words", [(vector_diag_offset, "offset 0"), (boolean_diff, "xor")])
def test_untranslated_array_forms_are_refused_by_name(prog, words):
    with pytest.raises(DaceSyntaxError, match=words):
        prog.to_sdfg()


@dace.program
def nan_to_zero(a: dace.float64[N]):
    return np.where(np.isnan(a), 0.0, a) + np.isinf(a) * 1.0 + np.isfinite(a) * 2.0


def test_special_value_tests_detected():
    from distsdfg.dace_compat.build import tests_special_values
    assert tests_special_values(nan_to_zero.to_sdfg())
    assert not tests_special_values(statistics.to_sdfg())


def test_isnan_is_not_folded_away_by_fast_math():
    """-ffast-math (DaCe's default) lets GCC fold isnan/isinf to False: NaNs stayed, silently."""
    sdfg = nan_to_zero.to_sdfg()
    distsdfg.lower(sdfg, distsdfg.auto_schedule(sdfg, 1, N=5))
    program = distsdfg.compile(sdfg)
    a = np.array([1.0, np.nan, 3.0, -np.inf, np.inf])
    out = program(a=a, N=5)
    np.testing.assert_array_equal(out, np.where(np.isnan(a), 0.0, a) + np.isinf(a) * 1.0 + np.isfinite(a) * 2.0)
    assert "-fno-finite-math-only" not in dace.Config.get("compiler", "cpu", "args")   # only for that build



def test_isnan_with_dace_alone_after_importing_distsdfg():
    sdfg = nan_to_zero.to_sdfg()
    sdfg.name = "npfuncs_nan_to_zero_dace"
    a = np.array([np.nan, 2.0, np.inf])
    np.testing.assert_array_equal(sdfg(a=a, N=3), np.array([0.0, 4.0, np.inf]))
