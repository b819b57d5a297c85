"""Unit tier for fresh NumPy programs that once failed (``distsdfg.testing.sweep_numpy``): parsed SDFGs, generated
C++ text and lowered SDFGs, nothing compiled. The programs run under mpiexec in ``test_mpi.py``."""
import ast

import dace
import numpy as np
import pytest

import distsdfg
from distsdfg.testing.programs import get


def _cpp(expr):
    from dace.codegen import cppunparse
    return cppunparse.cppunparse(ast.parse(expr), expr_semicolon=False)


def test_floor_division_and_modulo_are_python_s_in_the_generated_code():
    # DaCe 1.0.2 wrote a // b as ifloor(a / b) and a % b as C's %: truncation, wrong for negative
    # int64 operands (-7 // 2 is -4 in NumPy, -3 in C), and % of doubles did not compile.
    assert _cpp("__out = __in1 // 7").replace(" ", "").endswith("__out=py_floor<decltype((__in1)/(7))>((__in1),(7));")
    assert "py_mod<decltype((__in1)/(__in2))>((__in1),(__in2))" in _cpp("__out = __in1 % __in2").replace(" ", "")
    assert _cpp("__out = __in1 - __in2").replace(" ", "").endswith("__out=(__in1-__in2);")


def test_sums_of_booleans_count_and_means_of_integers_are_floats():
    # np.sum(x > 0.5, axis=0) was a bool array (every count True) and np.mean of int64 an int64
    # (a truncated mean), with DaCe alone too; NumPy gives int64 counts and float64 means.
    @dace.program
    def counts(a: dace.int64[13, 7], x: dace.float64[13, 7]):
        return np.sum(x > 0.5, axis=0), np.sum(x > 0.5), np.mean(a, axis=1), np.mean(a)

    sdfg = counts.to_sdfg()
    dtypes = [sdfg.arrays[f"__return_{i}"].dtype for i in range(4)]
    assert dtypes == [dace.int64, dace.int64, dace.float64, dace.float64]


def test_a_call_dace_leaves_to_python_is_refused_by_name():
    # np.clip became a Python callback `numpy_clip`, which lower() took for a size symbol without a
    # value at the first call ("size symbol(s) numpy_clip have no value: pass them as keyword arguments").
    # np.clip is translated since (dace_compat.npfuncs); np.sort is still a callback.
    from distsdfg.errors import UnsupportedProgramError

    @dace.program
    def sorted_rows(A: dace.float64[9, 4]):
        return np.sort(A)

    sdfg = sorted_rows.to_sdfg()
    with pytest.raises(UnsupportedProgramError, match=r"calls `numpy_sort`.*DaCe 1.0.2 does not translate"):
        distsdfg.lower(sdfg, {"*": (2, 1)})


def test_a_transpose_of_a_block_of_one_row_becomes_a_copy_map():
    # A.T @ y with A (2, 3) and its rows split 2 ways: each rank's (1, 3) block made DaCe's Transpose
    # node invalid ("Transpose operation only supported on matrices"): RewriteLimitError.
    sdfg = get("small_transpose").sdfg()
    distsdfg.lower(sdfg, {"_Transpose_.transpose_map": (2, 1), "_MatMult_._GEMV__map": (2, 1)}, nprocs=2)
    kinds = {type(n).__name__ for n, _ in sdfg.all_nodes_recursive()}
    labels = {n.label for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.MapEntry)}
    assert "Transpose" not in kinds, kinds
    assert any(lb.endswith("_copy_map") for lb in labels), labels
