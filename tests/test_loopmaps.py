"""Independent for-loops become maps: triangular loops and loops of library calls split
over ranks. Unit tier only (no compile); their runs against NumPy are cases of tests/test_loops.py."""
import warnings

import numpy as np
import pytest

import distsdfg
from distsdfg import dace_compat as dc
from distsdfg.analysis.kernels import find_kernels
from distsdfg.analysis.loopmaps import independent_loops_to_maps, loop_is_independent
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


# -- NPBench shapes the lowering once got wrong (distsdfg.testing.triangular) -------------------------
def _nested_buffers(sdfg):
    """(outer descriptor, inner descriptor, views of it inside) for each array a map's nested body
    reaches through a rank's local buffer."""
    from dace import data as dt
    from dace.sdfg import nodes
    out = []
    for st in sdfg.states():
        for n in st.nodes():
            if not isinstance(n, nodes.NestedSDFG):
                continue
            for e in list(st.in_edges(n)) + list(st.out_edges(n)):
                conn = e.dst_conn if e.dst is n else e.src_conn
                if e.data.data and e.data.data.startswith("__dsdfg_") and conn in n.sdfg.arrays:
                    views = [n.sdfg.arrays[x.data] for ist in n.sdfg.states() for a in ist.data_nodes()
                             if a.data == conn for ie in ist.all_edges(a) for x in (ie.src, ie.dst)
                             if isinstance(x, nodes.AccessNode) and isinstance(n.sdfg.arrays[x.data], dt.View)]
                    out.append((sdfg.arrays[e.data.data], n.sdfg.arrays[conn], views))
    return out


def test_nested_body_takes_the_local_buffers_strides():
    """conv2d's loop body, nested by LoopToMap, kept the global output's strides while the lowering
    passed it a rank's smaller block: it wrote past the block (segmentation fault)."""
    from distsdfg.values.exprs import same_value
    sd = get("conv_bias").sdfg()
    body = [m for m in distsdfg.maps(sd) if m.params == ("j",)]      # the loop over j, turned into a map
    distsdfg.lower(sd, {body[0].key: (4,)})
    found = _nested_buffers(sd)
    # a rank's block (its local buffer, or the array's home buffer written in place), not the array
    assert any("int_ceil" in str(outer.shape) or "__dsdfg_h" in str(outer.shape) for outer, _, _ in found)
    assert any(views for _, _, views in found)
    for outer, inner, views in found:
        assert all(same_value(a, b) for a, b in zip(inner.strides, outer.strides)), (inner.strides, outer.strides)
        for v in views:         # the body's view of the output row: strides of the buffer too
            assert all(any(same_value(s, o) for o in outer.strides) for s in v.strides), (v.strides, outer.strides)


def test_body_writing_an_outer_loops_row_is_not_an_exact_write():
    """lenet's max-pool body writes row i of an outer loop; its memlet spans every row (volume
    CN*CO): taking that as written gathered the block's unwritten rows over the result."""
    from distsdfg.analysis.constraints import kernel_constraints
    sd = _sdfg("conv_pool")
    kernels = [k for k in find_kernels(sd) if k.kind == "map" and not k.runtime_symbols]
    writes = {arr: c for k in kernels for arr, c in kernel_constraints(k, {}).arrays.items() if c.write is not None
              and any(n.sdfg for n in k.state.scope_children()[k.node] if hasattr(n, "sdfg"))}
    assert writes and not any(c.write_exact for c in writes.values()), writes


def test_correlation_triangle_lowers_for_its_planned_schedule():
    """correlation's ``corr[i, i + 1:M] = d[:, i] @ d[:, i + 1:M]`` after split maps: the gather before
    the product put an ordering edge into the view of d, which DaCe rejected (RewriteLimitError)."""
    sd = get("corr_rows").sdfg()
    distsdfg.lower(sd, "auto", nprocs=4, plan_options=dict(TN=12, TM=10))     # DaCe validates the result
    from distsdfg.solver.solve import lowered_of
    assert any(any(g > 1 for g in grid) for grid in lowered_of(sd).schedule.as_dict().values())


def _loop_map(sd, var):
    import dace
    for st in sd.states():
        for n in st.nodes():
            if isinstance(n, dace.nodes.MapEntry) and tuple(n.map.params) == (var,) and st.entry_node(n) is None:
                return st, n
    raise AssertionError(f"no map over {var}")


def test_body_work_counts_a_triangular_body_by_its_heavy_end():
    from distsdfg.analysis.work import body_work
    sd = _sdfg("tri_syrk")
    independent_loops_to_maps(sd)
    st, entry = _loop_map(sd, "i")
    work = body_work(st, entry, dict(TN=20, TM=12))
    assert work.labels == ("i",)
    # row i: i + 1 scalings, then TM times i + 1 products and sums (several tasklets each)
    whole, halves = work.block({"i": 20}, {"i": 1}), work.block({"i": 20}, {"i": 2})
    assert whole >= 20 * 12 * 10
    assert 0.5 * whole < halves < whole         # the later rows are the longer ones
    assert float(work.expr.subs("i", 19)) > float(work.expr.subs("i", 0))


def test_time_model_prices_a_loop_body_beyond_its_bytes():
    from distsdfg.analysis.eingraph import build_graph
    from distsdfg.planner.timemodel import TimeModel
    sd = _sdfg("tri_syrk")
    g = build_graph(sd, TN=400, TM=300)
    v = next(v for v in g.vertices if v.labels == ("i",))
    assert v.work is not None
    model = TimeModel()
    bytes_only = model.rates.stream_seconds(sum(o.size * o.itemsize for o in v.inputs + v.outputs))
    whole, split = model.compute(v, {"i": 1}), model.compute(v, {"i": 2})
    assert whole > 10 * bytes_only
    assert 0.5 * whole < split < whole


def test_kernels_of_loops_turned_into_maps_repeat_with_the_enclosing_loop():
    import dace
    from distsdfg.analysis.eingraph import build_graph
    RN, RT = dace.symbol("RN"), dace.symbol("RT")

    @dace.program
    def steps_of_rows(A: dace.float64[RN, RN], B: dace.float64[RN, RN]):
        for t in range(RT):
            for i in range(RN):
                B[i, :i + 1] += 0.5 * A[i, :i + 1]
            for i in range(RN):
                A[i, :i + 1] += 0.5 * B[i, :i + 1]

    warnings.simplefilter("ignore")
    with distsdfg.numpy_semantics():
        sd = steps_of_rows.to_sdfg()
    g = build_graph(sd, RN=16, RT=7)
    rows = [v for v in g.vertices if v.labels == ("i",) and v.label.startswith("single_state")]
    # the second loop reuses `i`, assigned again before anything reads it: it is independent too
    assert rows and all(v.repeats == 7 for v in rows)


def test_one_thread_builds_enter_no_parallel_region():
    import dace
    sd = _sdfg("tri_syrk")
    independent_loops_to_maps(sd)
    maps = [n for n, _ in sd.all_nodes_recursive() if isinstance(n, dace.nodes.MapEntry)]
    assert dc.sequential_maps(sd) >= 1      # the outer map (the inner ones are sequential inside it)
    assert len(maps) > 1 and all(m.map.schedule == dace.ScheduleType.Sequential for m in maps)
    # transients inside the maps keep the storage DaCe gives them in parallel maps (not the heap)
    inner = [d for s in sd.all_sdfgs_recursive() if s is not sd for d in s.arrays.values() if d.transient]
    assert inner and not any(d.storage == dace.StorageType.CPU_Heap for d in inner)
    maps[0].map.schedule = dace.ScheduleType.GPU_Device      # a GPU program is left as it is
    maps[1].map.schedule = dace.ScheduleType.CPU_Multicore
    assert dc.sequential_maps(sd) == 0 and maps[1].map.schedule == dace.ScheduleType.CPU_Multicore
