"""Accumulations in maps: reduced across ranks, provably replicated, or refused by name.

Unit tier (no compile): read-modify-write updates become WCR memlets (directly in the map and in
a branch's nested SDFG), a split accumulated axis gives an identity fill on all ranks but the
first holder and a reduction, and updates that are no reduction are refused with
``AccumulationError`` naming the map, the array and the parameter.
mpiexec tier: one launch per rank count (2, 3, 4), every operator of both shapes against NumPy,
and library reductions (sum, max, min; float64, int32; axis 0 and 1) over axes that 3 and 4
ranks split unevenly; measured bytes (PMPI counter) equal ``comm_report``'s.
"""
import json
import os
import subprocess
import sys
import warnings

import dace
import pytest

import distsdfg
from distsdfg.analysis.accumulate import match_update
from distsdfg.analysis.constraints import kernel_constraints
from distsdfg.errors import AccumulationError, DistributedLoweringError
from distsdfg.analysis.kernels import find_kernels
from distsdfg.testing.mpirun import bytes_mismatch, counted_argv
from distsdfg.testing.programs import get

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

N, M, K = (dace.symbol(s) for s in "NMK")


def _accumulating_map(sdfg):
    """The program's own map (not a NumPy operator's), its kernel, and the grid that splits the
    parameter its writes do not index two ways."""
    for k in find_kernels(sdfg):
        for m in k.maps:
            if k.kind == "map" and m.info.label.startswith(sdfg.name):
                indexed = {str(s) for a in m.accesses.values() for w in a.writes for s in w.subset.free_symbols}
                return k, m, tuple(1 if p in indexed else 2 for p in m.info.params)
    raise AssertionError("no accumulating map")


# -- unit tier -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,array,op", [
    ("acc_max", "Z", "max"), ("acc_min", "Z", "min"), ("acc_sum", "Z", "sum"), ("acc_sub", "Z", "sum"),
    ("acc_prod", "Z", "prod"), ("acc_total", "s", "sum"), ("azint_sum", "tmp", "sum"), ("azint_inner", "tmp", "sum"),
    ("azint_max", "tmp", "max"), ("azint_min", "tmp", "min"), ("azint_prod", "tmp", "prod")])
def test_update_becomes_a_split_reduction(name, array, op):
    k, m, grid = _accumulating_map(get(name).sdfg())
    assert [w.wcr is not None for w in m.accesses[array].writes] == [True]
    assert not m.accesses[array].reads           # the old value is no longer read by the map
    assert 2 in grid
    c = kernel_constraints(k, {m.info.key: grid}).arrays[array]
    assert (c.op, c.split_reduction, c.init_covered) == (op, True, False)


def test_update_tasklet_keeps_only_the_contribution():
    t = dace.sdfg.nodes.Tasklet("t", {"a", "b"}, {"o"}, "o = a - b * 2")
    assert match_update(t, "a") == ("sum", "o = -(b * 2)")
    assert match_update(t, "b") is None           # e - acc is no reduction of acc
    t = dace.sdfg.nodes.Tasklet("t", {"a", "b"}, {"o"}, "o = max(b, a)")
    assert match_update(t, "a") == ("max", "o = b")
    t = dace.sdfg.nodes.Tasklet("t", {"a", "b"}, {"o"}, "o = a * 0.5 + b")
    assert match_update(t, "a") is None


def test_initial_value_counts_once():
    # Z is an input: its block goes to every rank, all but the first holder refill it with the identity.
    warnings.simplefilter("ignore")
    sdfg = get("acc_max").sdfg()
    k, m, grid = _accumulating_map(sdfg)
    distsdfg.lower(sdfg, {m.info.key: grid})
    steps = [s for s in sdfg._distsdfg.steps if s.kernel == k.index]
    z = [(s.kind, s.op, s.acc) for s in steps if s.array == "Z"]
    assert z == [("scatter", None, False), ("fill", "max", True), ("reduce", "max", False)]
    # A scalar on rank 0 (the loop's running sum): identity everywhere, reduced onto rank 0's value.
    # In the loop it then moves to its home with a sum over the ranks' partial values.
    warnings.simplefilter("ignore")
    sdfg = get("azint_sum").sdfg()
    k, m, grid = _accumulating_map(sdfg)
    distsdfg.lower(sdfg, {m.info.key: grid})
    tmp = [s for s in sdfg._distsdfg.steps if s.array == "tmp"]
    assert [(s.kind, s.op, s.acc) for s in tmp if s.kernel == k.index] == [("fill", "sum", False)]
    assert [s.source.op for s in tmp if s.kind == "redist"] == ["sum"]


@dace.program
def scaled(X: dace.float64[N, M], Y: dace.float64[M, K], Z: dace.float64[N, K]):
    for i, j, k in dace.map[0:N, 0:M, 0:K]:
        Z[i, k] = 0.5 * Z[i, k] + X[i, j] * Y[j, k]


@dace.program
def last_wins(A: dace.float64[N, M], B: dace.float64[N]):
    for i, j in dace.map[0:N, 0:M]:
        B[i] = A[i, j]


@dace.program
def branch_max(X: dace.float64[N, M], Z: dace.float64[N]):
    for i, j in dace.map[0:N, 0:M]:
        if X[i, j] > Z[i]:
            Z[i] = X[i, j]


@dace.program
def leaky(data: dace.float64[N], res: dace.float64[1]):
    tmp = 0.0
    for j in dace.map[0:N]:
        if data[j] > 0.5:
            tmp = 0.5 * tmp + data[j]
    res[0] = tmp


@pytest.mark.parametrize("prog,array", [(scaled, "Z"), (last_wins, "B"), (branch_max, "Z"), (leaky, "tmp")])
def test_update_that_is_no_reduction_is_refused_by_name(prog, array):
    warnings.simplefilter("ignore")
    sdfg = prog.to_sdfg()
    m = next(m for m in distsdfg.maps(sdfg) if "j" in m.params)
    grid = tuple(2 if p == "j" else 1 for p in m.params)
    with pytest.raises(AccumulationError) as err:
        distsdfg.lower(sdfg, {m.key: grid})
    msg = str(err.value)
    assert isinstance(err.value, DistributedLoweringError)
    assert f"`{m.key}`" in msg and f"`{array}" in msg and "parameter `j`" in msg and "grid" in msg
    # Not splitting the accumulated parameter is fine.
    sdfg = prog.to_sdfg()
    distsdfg.lower(sdfg, {m.key: tuple(2 if p != "j" else 1 for p in m.params)})


def test_planner_does_not_split_what_would_be_refused():
    warnings.simplefilter("ignore")
    sdfg = scaled.to_sdfg()
    sched = distsdfg.auto_schedule(sdfg, 4, N=16, M=64, K=16)
    (key, grid), = sched.as_dict().items()
    assert grid[1] == 1 and max(grid) > 1
    distsdfg.lower(sdfg, sched)


def test_write_the_same_on_every_rank_is_not_refused():
    sdfg = get("acc_all").sdfg()
    keys = [m.key for m in distsdfg.maps(sdfg)]
    distsdfg.lower(sdfg, {k: (1, 2, 1) for k in keys})      # W[i, k] does not use j at all


@dace.program
def nested_rowsum(A: dace.float64[10, 7], r: dace.float64[10]):
    for i in dace.map[0:10]:
        for j in dace.map[0:7]:
            r[i] += A[i, j]


def test_accumulation_in_a_nested_map_keeps_the_initial_value():
    # Fuzz seed 11 (``map_nested_rowsum``): DaCe put the sum on the inner memlet only, so the outer
    # map looked like a plain write of r[i]: each rank's block started uninitialised (wrong on 2
    # and 3 ranks). The WCR now reaches the outer map: the block is read, accumulated, gathered.
    warnings.simplefilter("ignore")
    sdfg = nested_rowsum.to_sdfg()
    k = find_kernels(sdfg)[0]
    assert [w.wcr is not None for w in k.maps[0].accesses["r"].writes] == [True]
    distsdfg.lower(sdfg, {k.maps[0].info.key: (3,)})
    assert [(s.kind, s.array) for s in sdfg._distsdfg.steps if s.array == "r"] == [("scatter", "r"), ("gather", "r")]


def _steps_by_kernel(sdfg):
    out = {}
    for s in sdfg._distsdfg.steps:
        out.setdefault(s.kernel, []).append((s.kind, s.array, s.op))
    return out


def test_uneven_library_reduction_pads_its_input_with_the_identity():
    # 10 rows, 7 columns: a split reduced axis leaves padding in the last ranks' input buffers,
    # filled with the operator's identity before the block arrives; partial results reduce as usual.
    warnings.simplefilter("ignore")
    sdfg = get("reduce_uneven").sdfg()
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"*": (1, 3)}, fuzzy=True))
    assert sdfg._distsdfg.even_checks == []
    ops = []
    for steps in _steps_by_kernel(sdfg).values():
        (fill, arr, op), (move, arr2, _), (red, _, rop) = steps
        assert (fill, move in ("scatter", "redist"), arr2, red, rop) == ("fill", True, arr, "reduce", op)
        ops.append((arr, op))
    assert sorted(ops) == sorted([("A", "sum"), ("A", "max"), ("B", "min"), ("B", "sum"), ("B", "max"), ("A", "min")])
    # The fills are the padding's (F_PAD): the runtime skips them on ranks 0 and 1, whose 4 of the
    # 10 rows fill their 4-row buffers, and fills rank 2's (2 rows) whole.
    from distsdfg.solver.solve import solve_step
    from distsdfg.values.plan import F_PAD
    fills = [s for s in sdfg._distsdfg.steps if s.kind == "fill"]
    assert fills and all(s.pad for s in fills)
    cs = solve_step(fills[0], {}, 3)
    assert cs.flags & F_PAD and cs.local_shape == (4, 7)
    assert [b.size for b in cs.blocks] == [(4, 7), (4, 7), (2, 7)]


@pytest.mark.parametrize("grid", [(1, 2), (1, 4), (2, 1)])
def test_even_library_reduction_needs_no_padding(grid):
    warnings.simplefilter("ignore")
    sdfg = get("reduce_sum").sdfg()             # 16 x 16: every grid here divides the extents
    distsdfg.lower(sdfg, {"Reduce.reduce_output": grid})
    assert "fill" not in [s.kind for s in sdfg._distsdfg.steps]


# -- mpiexec tier ----------------------------------------------------------------------------------
CASES = {
    2: ["acc_all:*=1,2,1", "azint_all:*=2"],
    3: ["acc_all:*=1,3,1", "azint_all:*=3", "reduce_uneven:*=1,3"],
    4: ["acc_all:*=2,2,1", "azint_all:auto", "reduce_uneven:*=1,4"],
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reductions")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    out = {}
    for n, cases in CASES.items():
        path = tmp / f"results_{n}.json"
        argv = counted_argv(n, ["-m", "distsdfg.testing.mpirun", str(path)] + cases, timeout=1500)
        proc = subprocess.run(argv, env=env, cwd=str(tmp), capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        out[n] = {r["case"]: r for r in json.loads(path.read_text())}
    return out


@pytest.mark.parametrize("nprocs,case", [(n, c) for n, cs in CASES.items() for c in cs])
def test_accumulation_matches_numpy(results, nprocs, case):
    r = results[nprocs][case]
    assert "error" not in r, r.get("trace", r.get("error"))
    assert r["shape_ok"] and r["rel_err"] <= 1e-10, r["rel_err"]
    assert bytes_mismatch(r) is None, bytes_mismatch(r)     # PMPI-measured bytes == comm_report
    # The accumulated axis really is split (else this would test nothing).
    assert any(max(g) > 1 for g in r["schedule"].values()), r["schedule"]
