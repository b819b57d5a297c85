"""Lowering composes with DaCe's own transformations: a program after ``auto_optimize``,
``MapFusion`` or ``MapTiling`` plans, lowers and runs correctly.

Unit tier: the exact bounds of tiled maps reach the planner (DaCe writes them as ``SymExpr``, which
sympy cannot take). mpiexec tier: four transformed programs with the auto schedule on 3 ranks
against NumPy, measured bytes equal to ``comm_report``.
"""
import warnings

import pytest
from dace import symbolic
from dace.sdfg import nodes

import distsdfg
from distsdfg import dace_compat as dc
from distsdfg.testing.mpirun import bytes_mismatch, launch_cases
from distsdfg.testing.programs import get

CASES = ["matmul@MapTiling:auto", "jacobi1d@MapTiling:auto", "mlp@auto_optimize:auto", "softmax@auto_optimize:auto"]


def _symexprs(sdfg) -> int:
    n = 0
    for st in sdfg.states():
        for node in st.nodes():
            if isinstance(node, nodes.MapEntry):
                n += sum(isinstance(x, symbolic.SymExpr) for t in node.map.range.ranges for x in t)
    return n


def test_tiled_map_bounds_become_exact_and_plan():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sdfg = get("add_odd@MapTiling").sdfg()
    assert _symexprs(sdfg) > 0            # MapTiling's inner maps end at min(N - 1, t + 3): a SymExpr
    assert dc.exact_ranges(sdfg) > 0 and _symexprs(sdfg) == 0
    tiled = [m for m in distsdfg.maps(sdfg) if m.params[0].startswith("tile_")]
    assert tiled and all(str(m.ranges.ranges[0][2]) == "4" for m in tiled)    # the tile maps step by 4
    sched = distsdfg.auto_schedule(sdfg, 3)
    assert any(max(g) > 1 for g in sched.as_dict().values())


def test_unknown_transformation_is_named():
    with pytest.raises(KeyError, match="MapTilling"):
        get("matmul@MapTilling")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return launch_cases(3, CASES, tmp_path_factory.mktemp("transformed"), timeout=1200)


@pytest.mark.parametrize("case", CASES)
def test_transformed_program_matches_numpy(results, case):
    r = results[case]
    assert "error" not in r, r.get("trace", r.get("error"))
    assert r["shape_ok"]
    assert r["rel_err"] <= (1e-5 if r["dtype"] == "float32" else 1e-10), r["rel_err"]
    assert any(max(g) > 1 for g in r["schedule"].values()), r["schedule"]      # distributed, not rank 0 alone
    assert bytes_mismatch(r) is None, bytes_mismatch(r)
