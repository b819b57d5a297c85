"""Symbolic tier: blocks bounded by an input array's values (distsdfg.solver.inspector), no compiler."""
import dace
import numpy as np
import pytest

import distsdfg
from distsdfg.analysis.constraints import kernel_constraints
from distsdfg.errors import InputError
from distsdfg.solver.inspector import complete, inspect, recognise
from distsdfg.analysis.kernels import find_kernels

SM, SN, NNZ = (dace.symbol(s) for s in ("SM", "SN", "NNZ"))


@dace.program
def spmv_plus_diag(A_row: dace.uint32[SM + 1], A_col: dace.uint32[NNZ], A_val: dace.float64[NNZ],
                   x: dace.float64[SN]):
    # A_val is also read at [i], outside the row's range: only A_col is bounded by the pointer.
    b = np.empty([SM], dtype=np.float64)
    for i in dace.map[0:SM]:
        b[i] = A_val[i]
        for j in dace.map[A_row[i]:A_row[i + 1]]:
            b[i] += A_val[j] * x[A_col[j]]
    return b


@dace.program
def spmv_shifted(A_row: dace.uint32[SM + 1], A_col: dace.uint32[NNZ], A_val: dace.float64[NNZ + 1],
                 x: dace.float64[SN]):
    # A_val is read at [j + 1]: not the pattern; it keeps the whole-array block.
    b = np.empty([SM], dtype=np.float64)
    for i in dace.map[0:SM]:
        b[i] = 0
        for j in dace.map[A_row[i]:A_row[i + 1]]:
            b[i] += A_val[j + 1] * x[A_col[j]]
    return b


def _lowered(programs, name, grid, **kw):
    sdfg = programs.get(name).sdfg()
    distsdfg.lower(sdfg, {distsdfg.maps(sdfg)[0].key: grid}, **kw)
    return sdfg


def _received(steps, array):
    return [sum(s.received[q] for s in steps if s.array == array) for q in range(len(steps[0].received))]


def test_csr_pattern_is_recognised(programs):
    sdfg = programs.get("spmv").sdfg()
    k = find_kernels(sdfg)[0]
    db = recognise(sdfg, kernel_constraints(k, {distsdfg.maps(sdfg)[0].key: (4,)}))
    assert db.pointer == "A_row" and sorted(db.arrays) == ["A_col", "A_val"]
    assert (db.c1, db.c2) == (0, 1)
    assert "x" not in db.arrays          # read through A_col's values, not bounded by A_row


def test_array_also_read_elsewhere_keeps_the_propagated_block():
    sdfg = spmv_plus_diag.to_sdfg()
    distsdfg.lower(sdfg, {distsdfg.maps(sdfg)[0].key: (4,)})
    (db,) = sdfg._distsdfg.data_bounds
    assert db.arrays == ("A_col",)
    ptr = np.array([0, 2, 2, 5, 9, 9, 10, 12, 16], dtype=np.uint32)
    steps = distsdfg.comm_report(sdfg, SM=8, SN=6, NNZ=16, A_row=ptr)
    assert _received(steps, "A_col") == [0, 7 * 4, 1 * 4, 6 * 4]      # rows 2-3: 2..9, 4-5: 9..10, 6-7: 10..16
    assert _received(steps, "A_val") == [0, 16 * 8, 16 * 8, 16 * 8]   # whole: also read at [i]


def test_shifted_read_keeps_the_propagated_block():
    sdfg = spmv_shifted.to_sdfg()
    distsdfg.lower(sdfg, {distsdfg.maps(sdfg)[0].key: (2,)})
    (db,) = sdfg._distsdfg.data_bounds
    assert db.arrays == ("A_col",)
    steps = distsdfg.comm_report(sdfg, SM=4, SN=3, NNZ=8, A_row=np.array([0, 1, 2, 3, 8], dtype=np.uint32))
    assert _received(steps, "A_col") == [0, 6 * 4]
    assert _received(steps, "A_val") == [0, 9 * 8]


def test_bounds_from_the_pointer_values(programs):
    sdfg = _lowered(programs, "spmv", (3,))
    (db,) = sdfg._distsdfg.data_bounds
    # 10 rows in blocks of 4, 4, 2 on three of four ranks; rows 4-7 empty; a decreasing "row"
    # (8: 9 -> 7) is empty too and must not shrink rank 2's range.
    ptr = np.array([0, 3, 3, 5, 6, 6, 6, 6, 6, 9, 7], dtype=np.uint32)
    values = {"SM": 10, "SN": 5, "NNZ": 9}
    got = inspect([db], {"A_row": ptr}, values, 4)
    assert got[db.lo].tolist() == [0, 0, 6, 0] and got[db.hi].tolist() == [6, 0, 9, 0]
    assert got[db.n] == 6


def test_pointer_outside_the_arrays_is_refused(programs):
    sdfg = _lowered(programs, "spmv", (2,))
    (db,) = sdfg._distsdfg.data_bounds
    with pytest.raises(InputError, match="A_row"):
        inspect([db], {"A_row": np.array([0, 2, 12], dtype=np.uint32)}, {"SM": 2, "SN": 4, "NNZ": 10}, 2)


def test_report_is_exact_with_the_pointer_and_a_bound_without(programs):
    sdfg = _lowered(programs, "spmv_skewed", (4,))
    inputs = programs.get("spmv_skewed").inputs(np.random.default_rng(3))
    ptr = inputs["A_row"].astype(np.int64)
    sizes = dict(SM=len(ptr) - 1, SN=len(inputs["x"]), NNZ=int(ptr[-1]))
    exact = distsdfg.comm_report(sdfg, **sizes, A_row=inputs["A_row"])
    nnz = [int(ptr[16 * (q + 1)] - ptr[16 * q]) for q in range(4)]
    assert nnz[1] == 0
    assert _received(exact, "A_col") == [0] + [4 * n for n in nnz[1:]]
    assert _received(exact, "A_val") == [0] + [8 * n for n in nnz[1:]]
    bound = distsdfg.comm_report(sdfg, **sizes)
    assert _received(bound, "A_val") == [0] + [8 * sizes["NNZ"]] * 3
    upper = complete(sdfg._distsdfg.data_bounds, sizes, 4)
    assert upper["__dsdfg_csr0_hi"].tolist() == [sizes["NNZ"]] * 4


def test_one_rank_lowering_keeps_whole_arrays(programs):
    sdfg = programs.get("spmv").sdfg()
    distsdfg.lower(sdfg, {distsdfg.maps(sdfg)[0].key: (1,)}, nprocs=1)
    assert sdfg._distsdfg.data_bounds == []


def test_plan_cache_keys_on_the_inspected_bounds(programs):
    # A warm call with another row pointer must not reuse the first call's counts.
    from distsdfg.solver.inspector import inspect_call
    from distsdfg.runtime.program import DistributedProgram

    class _Comm:
        rank, size = 1, 2

    sdfg = _lowered(programs, "spmv", (2,))
    prog = DistributedProgram.__new__(DistributedProgram)
    prog.lowered, prog._plans, prog.comm = sdfg._distsdfg, {}, _Comm()
    sizes = {"SM": 4, "SN": 3, "NNZ": 8}
    counts = []
    for ptr in ([0, 1, 2, 3, 8], [0, 4, 5, 6, 8], [0, 1, 2, 3, 8]):
        values, error = inspect_call(prog.lowered, {"A_row": np.array(ptr, dtype=np.uint32)}, sizes, 2)
        assert error is None
        steps = prog.plan(values)[1]
        counts.append([s.blocks[1].count for s in steps if s.spec.array == "A_val"])
    assert counts == [[6], [3], [6]]
    assert len(prog._plans) == 2
