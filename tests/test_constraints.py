"""Symbolic tier: maps, rank tiling and communication constraints, no compiler."""
import re

import distsdfg
from distsdfg.analysis.constraints import box_str, kernel_constraints
from distsdfg.analysis.kernels import find_kernels


def _pretty(s: str) -> str:
    return re.sub(r"__dsdfg_k\d+_r(\d+)", r"r\1", s).replace(" ", "")


def _constraints(sdfg, grids):
    out = {}
    for k in find_kernels(sdfg):
        kp = kernel_constraints(k, grids)
        for arr, c in kp.arrays.items():
            out[arr] = ([_pretty(box_str(arr, b)) for b in c.reads],
                        _pretty(box_str(arr, c.write)) if c.write else None, c.op)
    return out


def test_maps_keys_are_unique_and_stable(programs):
    sd = programs.get("softmax").sdfg()
    keys = [m.key for m in distsdfg.maps(sd)]
    assert len(keys) == len(set(keys))
    assert keys == [m.key for m in distsdfg.maps(programs.get("softmax").sdfg())]
    mm = distsdfg.maps(programs.get("matmul").sdfg())
    gemm = [m for m in mm if m.label == "gemm_map"][0]
    assert gemm.params == ("__i0", "__i1", "__i2")
    assert str(gemm.ranges) == "0:M, 0:N, 0:K"


def test_thesis_elementwise_example(programs):
    sd = programs.get("add3d").sdfg()
    key = distsdfg.maps(sd)[0].key
    c = _constraints(sd, {key: (2, 2, 1)})
    assert c["x"][0] == ["x[2*r0:2*r0+2,4*r1:4*r1+4,0:16]"]
    assert c["y"][0] == ["y[4*r1:4*r1+4,0:16]"]
    assert c["__return"][1] == "__return[2*r0:2*r0+2,4*r1:4*r1+4,0:16]"


def test_thesis_reduction_example(programs):
    sd = programs.get("reduce_sum").sdfg()
    c = _constraints(sd, {"Reduce.reduce_output": (2, 4)})
    assert c["x"][0] == ["x[8*r0:8*r0+8,4*r1:4*r1+4]"]
    assert c["__return"][1:] == ("__return[8*r0:8*r0+8]", "sum")


def test_matmul_k_split_is_partial_sum(programs):
    sd = programs.get("matmul").sdfg()
    c = _constraints(sd, {"_MatMult_.gemm_map": (2, 1, 2)})
    a, b = c["A"][0][0], c["B"][0][0]
    assert "r0" in a and "r2" in a and "r1" not in a
    assert "r2" in b and "r0" not in b and "r1" not in b
    assert "r2" not in c["__return"][1] and c["__return"][2] == "sum"


def test_uneven_split_is_clamped(programs):
    sd = programs.get("add_odd").sdfg()
    key = [m.key for m in distsdfg.maps(sd)][0]
    c = _constraints(sd, {key: (4, 1)})
    assert "Min(9,3*r0+2)" in c["x"][0][0]


def test_spmv_overlapping_row_pointer(programs):
    sd = programs.get("spmv").sdfg()
    key = distsdfg.maps(sd)[0].key
    c = _constraints(sd, {key: (4,)})
    # A_row of rank r covers its rows plus one: the blocks of neighbours overlap by one entry.
    assert c["A_row"][0] == ["A_row[r0*int_ceil(SM,4):Min(SM-1,r0*int_ceil(SM,4)+int_ceil(SM,4)-1)+2]"]
    assert c["b" if "b" in c else "__return"][1].endswith("+1]")


def test_union_of_images_with_a_rank_bound_keeps_the_larger(programs):
    # `C[i, j] = A[i, j] + A[j, i]` with j split 4 ways: rank r reads A[:, 8r:8r+8] and
    # A[8r:8r+8, :]. DaCe's union (optimizer.symbolic_positive) took the rank's bound 8*r + 7 over
    # 29 and gave A[0:8r+8, 0:8r+8]: rows the rank reads never arrived (hK's sweep, rel. err 1e294).
    from distsdfg.solver.solve import solve_step
    sd = programs.get("sym_lower").sdfg()
    key = [m.key for m in distsdfg.maps(sd) if "sym_lower" in m.label][0]
    distsdfg.lower(sd, {key: (1, 4)})
    for s in sd._distsdfg.steps:
        if s.kind == "scatter" and s.array == "A":
            blocks = solve_step(s, {}, 4).blocks
            for r, b in enumerate(blocks):
                lo = 8 * r
                # the block must hold A[lo:30, lo:lo+8] and A[lo:lo+8, lo:30] (the lower triangle's reads)
                assert b.origin[0] <= lo and b.origin[1] <= lo, (r, b)
                assert b.origin[0] + b.size[0] >= 30 and b.origin[1] + b.size[1] >= 30, (r, b)
            break
    else:
        raise AssertionError("no scatter of A")


def test_strided_image_keeps_its_extent():
    # DaCe 1.0.2 propagates A[2 * i] over i in [0, 49] to A[0:50] (the step is lost when the index has
    # no constant term): a kernel left on one rank read half of A (hK's sweep, rel. err 1e133).
    import dace
    from dace import subsets
    from distsdfg import dace_compat as dc
    from distsdfg.analysis.constraints import propagate_box
    vec, mat = dace.data.Array(dace.float64, [1000]), dace.data.Array(dace.float64, [1000, 1000])

    def box(expr, desc, ranges):
        params = ["i", "j"][:len(ranges)]
        return [tuple(int(x) for x in d) for d in propagate_box([dace.Memlet(f"A[{expr}]")], desc, params,
                                                                subsets.Range(ranges))]
    assert box("2 * i", vec, [(0, 49, 1)]) == [(0, 98)]
    assert box("3 * i", vec, [(0, 49, 1)]) == [(0, 147)]
    assert box("2 * i, 2 * j", mat, [(0, 9, 1), (0, 9, 1)]) == [(0, 18), (0, 18)]
    assert box("99 - 2 * i", vec, [(0, 49, 1)]) == [(1, 99)]
    assert box("2 * i + 1", vec, [(0, 49, 1)]) == [(1, 99)]             # DaCe was right here
    assert box("2 * i + j", vec, [(0, 9, 1), (0, 9, 1)]) == [(0, 27)]
    # the whole program: the kernel on one rank (a grid of ones) reads A[0:99], not A[0:50]
    from distsdfg.testing import programs as progs
    sd = progs.get("strided_pick").sdfg()
    key = distsdfg.maps(sd)[0].key
    c = _constraints(sd, {key: (1,)})
    assert c["A"][0] == ["A[0:99]"] and c["B"][0] == ["B[1:100]"]
    assert dc.propagate([dace.Memlet("A[2 * i]")], vec, ["i"], subsets.Range([(0, 49, 1)])).subset.ranges[0][1] == 98
