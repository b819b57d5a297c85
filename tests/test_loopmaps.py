"""Independent for-loops become maps (issue 23): triangular loops and loops of library calls split
over ranks. Unit tier only (no compile); their runs against NumPy are cases of tests/test_loops.py."""
import warnings

import numpy as np
import pytest

import distsdfg
from distsdfg import dace_compat as dc
from distsdfg.kernels import find_kernels
from distsdfg.loopmaps import independent_loops_to_maps, loop_is_independent
from distsdfg.testing.programs import get

SIZES = {"tri_syrk": dict(TN=20, TM=12), "tri_scale": dict(TN=16, TM=20), "loop_matmul": dict(NR=6, NQ=10, NP=8),
         "tri_cov": dict(TN=14, TM=12), "tri_cholesky": dict(TN=12), "tri_carried": dict(TN=12, TM=16)}


def _sdfg(name):
    warnings.simplefilter("ignore")
    sd = get(name).sdfg()
    dc.simplify(sd)
    return sd


@pytest.mark.parametrize("name,var", [("tri_syrk", "i"), ("tri_scale", "i"), ("loop_matmul", "r"), ("trimul", "i")])
def test_independent_loop_becomes_a_splittable_map(name, var):
    sd = _sdfg(name)
    assert independent_loops_to_maps(sd) == 1
    loop_maps = [m for m in distsdfg.maps(sd) if m.params == (var,)]
    assert len(loop_maps) == 1 and var not in {str(s) for s in loop_maps[0].ranges.free_symbols}
    assert all(not k.runtime_symbols for k in find_kernels(sd))
    # The map's nested body writes exactly row `var` of each array it updates (no overlap between ranks).
    for st in sd.states():
        for n in st.nodes():
            if hasattr(n, "sdfg") and st.entry_node(n) is not None:
                for e in st.out_edges(n):
                    assert str(e.data.subset.ranges[0][0]) == var == str(e.data.subset.ranges[0][1]), e.data
    sched = distsdfg.auto_schedule(sd, 4, verify=False, **SIZES.get(name, {}))
    assert sched[loop_maps[0].key] == (4,)


@pytest.mark.parametrize("name,array", [("tri_cholesky", "A"), ("tri_carried", "B"), ("tri_cov", "cov")])
def test_dependent_loops_stay_loops(name, array):
    sd = _sdfg(name)
    assert independent_loops_to_maps(sd) == 0
    assert any(k.runtime_symbols for k in find_kernels(sd))       # their dependent maps run whole on rank 0


def test_reasons_name_the_array():
    from dace.transformation.interstate.loop_detection import find_for_loop
    sd = _sdfg("tri_carried")
    reasons = []
    for st in sd.nodes():
        for e in sd.out_edges(st):
            found = find_for_loop(sd, st, e.dst)
            if found:
                var = found[0]
                body = [s for s in sd.nodes() if var in {str(x) for x in s.free_symbols}]
                reasons.append(loop_is_independent(sd, body, var))
    assert any(r and "`B`" in r for r in reasons), reasons


def test_loop_of_matmuls_moves_only_its_rows():
    sd = _sdfg("loop_matmul")
    sched = distsdfg.auto_schedule(sd, 4, verify=False, **SIZES["loop_matmul"])
    distsdfg.lower(sd, sched)
    steps = distsdfg.comm_report(sd, nprocs=4, **SIZES["loop_matmul"])
    a = [s for s in steps if s.array == "A"]
    # NR = 6 rows of 10 x 8 in blocks of 2 (ranks 0-2; rank 3 has none): rank 0 sends 4 out and takes 4 back.
    assert sum(sum(s.sent) for s in a) == 2 * 4 * 80 * 8
    assert np.array_equal(np.sum([s.received for s in a if s.collective != "Bcast"], axis=0)[1:],
                          [2 * 80 * 8, 2 * 80 * 8, 0])


def test_generality_report_classifies_without_compiling():
    from distsdfg.testing.generality import classify
    assert classify("tri_syrk")["class"] == "distributed"
    r = classify("tri_carried")
    assert r["class"] == "rank-0 fallback" and "whole on rank 0" in r["detail"]
