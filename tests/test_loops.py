"""Programs with loops: arrays stay distributed across iterations, halos move point to point.

Unit tier (no compile): trip counts, which arrays get homes, the halo bytes comm_report predicts.
mpiexec tier: time-stepping stencils and conjugate gradients on 4 ranks against NumPy on rank 0.
"""
import warnings

import numpy as np
import pytest

import distsdfg
from distsdfg import dace_compat as dc
from distsdfg.testing.mpirun import bytes_mismatch, launch_cases
from distsdfg.solver.redistribute import plan_redistribution
from distsdfg.testing.programs import get


CG = "cg:GEMV__map=4,1;*=4"
CONV = "jacobi_conv:*=4"
CASES = ["jacobi1d:*=4", "jacobi2d:*=2,2", "jacobi2d:*=4,1", "heat3d:*=4,1,1", "heat3d:*=2,2,1", "fdtd2d:*=2,2", CG, CONV,
         "cg:auto", "flagged:*=4", "trimul:auto", "tri_syrk:auto", "loop_matmul:auto",
         "tri_carried:auto",
         "conv_bias:auto", "conv_pool:auto", "corr_rows:auto"]     # NPBench's conv2d, lenet, correlation


def _lowered(name, grids):
    warnings.simplefilter("ignore")
    sdfg = get(name).sdfg()
    dc.simplify(sdfg)
    return distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, grids, fuzzy=True))


def _per_rank(steps, pred=lambda s: True):
    out = np.zeros(4, dtype=np.int64)
    for s in steps:
        if pred(s):
            out += np.array(s.received)
    return out


# -- unit tier -------------------------------------------------------------------------------------
def test_trip_counts_of_for_loops_and_early_exit():
    from distsdfg.analysis.controlflow import loop_trips
    sd = get("jacobi2d").sdfg()
    dc.simplify(sd)
    trips = {st.label: t for st, t in loop_trips(sd).items()}
    body = [t for label, t in trips.items() if "guard" not in label]
    assert body and all(t == ("TSTEPS - 1", False) for t in body)
    sd = get("cg").sdfg()
    dc.simplify(sd)
    trips = loop_trips(sd)
    assert trips and all(t == ("maxit", True) for t in trips.values())     # `break`: at most maxit


def test_jacobi2d_halo_is_one_edge_per_neighbour_per_update():
    low = _lowered("jacobi2d", {"*": (2, 2)})
    steps = distsdfg.comm_report(low, N=130, TSTEPS=11)
    halo = [s for s in steps if s.collective == "Isend/Irecv"]
    # Per sweep and array update every rank receives one 64-value column and one 64-value row.
    for arr in ("A", "B"):
        got = _per_rank([s for s in halo if s.array == arr])
        assert got.tolist() == [2 * 64 * 8] * 4
    assert all(s.repeats == 10 for s in halo)
    # Besides the halos: one scatter and one gather per array for the whole run.
    rest = [s for s in steps if s.collective != "Isend/Irecv"]
    assert all(s.repeats == 1 for s in rest)
    assert sorted((s.array, int(np.count_nonzero(s.sent))) for s in rest) == [("A", 1), ("A", 3), ("B", 1), ("B", 3)]
    total_in = sum(sum(s.received) for s in rest)
    assert total_in == 2 * 2 * 3 * 65 * 65 * 8       # 3 of 4 blocks of 65 x 65, in and out, A and B
    per_run = sum(sum(s.total_sent) for s in steps)
    assert per_run == total_in + 10 * 2 * 4 * 1024


def test_jacobi1d_rows_exchange_single_values():
    low = _lowered("jacobi1d", {"*": (4,)})
    steps = distsdfg.comm_report(low, N=3202, TSTEPS=50)
    halo = [s for s in steps if s.collective == "Isend/Irecv"]
    assert _per_rank(halo).tolist() == [16, 32, 32, 16]      # per sweep: one value from each neighbour per array
    assert {s.repeats for s in halo} == {50}


def test_loop_steps_carry_symbolic_repeats_without_counts():
    low = _lowered("jacobi1d", {"*": (4,)})
    steps = distsdfg.comm_report(low, N=3202)       # TSTEPS not given: the count stays symbolic
    assert {s.repeats for s in steps if s.collective == "Isend/Irecv"} == {"TSTEPS"}


def test_homes_only_for_arrays_live_across_states():
    low = _lowered("cg", {"GEMV__map": (4, 1), "*": (4,)})
    homes = {h.array for h in low._distsdfg.homes}
    assert homes == {"A", "b", "x", "r", "p"}        # not the temporaries of one state, not the scalars
    steps = distsdfg.comm_report(low, N=256, maxit=100)
    per_iter = [s for s in steps if s.repeats == 100]
    assert all(s.at_most for s in per_iter)
    # Per iteration: p gathered for the matrix-vector product, two dot products reduced on every rank.
    assert sorted((s.collective, s.array) for s in per_iter) == [("Allgatherv", "p"), ("Allreduce", "__tmp5"),
                                                                 ("Allreduce", "rs_new")]


def test_planner_weighs_loop_bodies_by_their_trip_counts():
    sdfg = get("cg").sdfg()
    dc.simplify(sdfg)
    sched = distsdfg.auto_schedule(sdfg, 4, N=256, maxit=100).as_dict()
    # Row-split matrix-vector products and split dot products: per iteration only p and two scalars move.
    assert all(g == (4, 1) for k, g in sched.items() if "GEMV" in k)
    assert sum(k.endswith("dot_map") and g == (4,) for k, g in sched.items()) == 3
    from distsdfg.analysis.eingraph import build_graph
    assert {v.repeats for v in build_graph(sdfg, N=256, maxit=100).vertices} == {1, 100}


def test_star_names_each_kernels_main_map():
    sdfg = get("cg").sdfg()
    dc.simplify(sdfg)
    sched = distsdfg.schedule_by_label(sdfg, {"GEMV__map": (4, 1), "*": (4,)}, fuzzy=True)
    assert not any("nit_map" in k for k in sched)                  # library helper maps are derived
    assert sum(k.endswith("dot_map") for k in sched) == 3 and sum("GEMV" in k for k in sched) == 2
    assert all(g == (4, 1) for k, g in sched.items() if "GEMV" in k)


def test_inplace_redistribution_is_point_to_point():
    owned = [((0,), (5,)), ((5,), (5,)), ((10,), (5,))]
    reads = [((0,), (6,)), ((4,), (7,)), ((9,), (6,))]
    plan = plan_redistribution("A", owned, reads, inplace=True)
    assert plan.collective == "Isend/Irecv"
    assert sorted((m.src, m.dst, m.box) for m in plan.messages) == [
        (0, 1, ((4,), (1,))), (1, 0, ((5,), (1,))), (1, 2, ((9,), (1,))), (2, 1, ((10,), (1,)))]
    # Elements no other rank holds keep their values: nothing to fetch, no error.
    assert plan_redistribution("A", owned, owned, inplace=True).collective == "local"


def test_home_blocks_grow_to_the_array_edges():
    from distsdfg.solver.homes import _grow
    inner = [((1,), (4,)), ((5,), (4,)), ((9,), (3,))]
    assert _grow(inner, (13,), 3) == [((0,), (5,)), ((5,), (4,)), ((9,), (4,))]
    # Blocks that cannot be stretched into a cover fall back to an even split of the rows.
    assert _grow([((0,), (2,)), None, ((8,), (2,))], (12,), 3)[1] == ((4,), (4,))


# -- mpiexec tier ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return launch_cases(4, CASES, tmp_path_factory.mktemp("loops"), jobs=2)


@pytest.mark.parametrize("case", CASES)
def test_loop_program_matches_numpy(results, case):
    r = results[case]
    assert "error" not in r, r.get("trace", r.get("error"))
    assert r["shape_ok"]
    assert r["rel_err"] <= 1e-10, r["rel_err"]
    assert bytes_mismatch(r) is None, bytes_mismatch(r)     # PMPI-measured bytes == comm_report


def test_loops_never_gather_per_iteration(results):
    for case in CASES:
        if case.startswith(("flagged", "tri_carried", "conv_", "corr_rows")):
            # flagged: its condition reads an input only rank 0 holds; tri_carried: a map over 0:i in a
            # loop whose iterations depend on each other runs on rank 0 each iteration, by design.
            # conv_*: the loop over rows stays a loop around the split map over columns, whose body
            # writes one row of a box that spans them all (not exact): the output's blocks move each
            # iteration. corr_rows: the triangle's maps depend on i and run on rank 0.
            continue
        for s in results[case]["report"]:
            if s["repeats"] == 1:
                continue
            assert s["collective"] not in ("Gatherv", "Scatterv", "Reduce"), (case, s)
            to_root = s["received"][0] > 0 and not any(s["received"][1:]) and all(s["sent"][1:])
            from_root = s["sent"][0] > 0 and not any(s["sent"][1:]) and all(s["received"][1:])
            # Only one-element values (a step size, a boundary value) may go through rank 0.
            assert not (to_root or from_root) or max(s["received"]) <= 8, (case, s)


def test_cg_takes_numpys_iterations(results):
    r = results[CG]
    ref = get("cg").reference(**get("cg").inputs(np.random.default_rng(1234)))
    assert r["outputs"]["iters"] == ref["iters"].tolist()
    assert 1 < ref["iters"][0] < 100


def test_scalar_reduction_in_loop_is_one_allreduce(results):
    r = results[CONV]
    ref = get("jacobi_conv").reference(**get("jacobi_conv").inputs(np.random.default_rng(1234)))
    assert r["outputs"]["iters"] == ref["iters"].tolist() == [151]
    loop = [s for s in r["report"] if s["repeats"] != 1]
    assert all(s["repeats"] == 1000 and s["at_most"] for s in loop)
    # The residual: one Allreduce into every rank's scalar; A[1:-1] = B[1:-1] between distributed copies.
    assert sorted(s["collective"] for s in loop if s["array"] not in ("A", "B")) == ["Allreduce"]
    assert all(max(s["received"]) <= 24 for s in loop)          # a few values per iteration


def test_branch_on_rank0_data_follows_rank_0(results):
    calls = [s for s in results["flagged:*=4"]["report"] if s["array"] == "flags"]
    assert calls and all(s["collective"] == "Isend/Irecv" and s["received"][1:] == [80, 80, 80] for s in calls)


def test_fdtd_boundary_row_is_broadcast_each_step(results):
    calls = results["fdtd2d:*=2,2"]["report"]
    bcast = [s for s in calls if s["collective"] == "Bcast"]
    assert len(bcast) == 1 and bcast[0]["repeats"] == 8 and sum(bcast[0]["received"]) == 3 * 8
