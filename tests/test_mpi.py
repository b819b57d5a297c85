"""Real mpiexec runs: every case compiled once on rank 0, checked against NumPy on rank 0."""

import numpy as np
import pytest

from distsdfg.testing.mpirun import bytes_mismatch, launch_cases
from distsdfg.testing.programs import MEGATRON_SCHEDULE


CASES = {
    4: [
        "add3d:_Add__map=2,2,1", "add3d:_Add__map=1,2,1",
        "add_scalar:_Add__map=2", "add_scalar:_Add__map=4",
        "reduce_sum:reduce_output=1,1", "reduce_sum:reduce_output=2,1", "reduce_sum:reduce_output=2,2",
        "reduce_max:reduce_output=2,2",
        "matmul:gemm_map=4,1,1", "matmul:gemm_map=1,4,1", "matmul:gemm_map=1,1,4",
        "matmul:gemm_map=2,2,1", "matmul:gemm_map=2,1,2", "matmul:gemm_map=1,2,2",
        "softmax:reduce_output=2,2,1,1;_Sub__map=2,2,1,1;_numpy_exp__map=2,2,1,1;_Div__map=2,2,1,1",
        "projection:einsum_map=1,1,1,4,1",
        "spmv:spmv=4",
        "add_odd:_Mult__map=3,1;_Add__map=4,1",
        "masked:*=2,2",                             # boolean arrays in and out
    ],
    8: ["add3d:_Add__map=2,2,2", "reduce_sum:reduce_output=2,4", "matmul:gemm_map=2,2,2",
        "repartition:_Mult__map=4,2;_Add__map=2,4"],
    2: ["spmv:spmv=2", "matmul:gemm_map=1,1,2",
        "matmul:gemm_map=1,2,1"],      # B's column blocks packed on rank 0, its own copied while rank 1's travels
}

# Multi-kernel programs whose intermediates stay distributed.
MULTI = {
    "chain": "chain:gemm_map=4,1,1",
    "atax": "atax:_MatMult_._GEMV__map=4,1;_MatMult__2._GEMV__map=1,4",
    "greatcircle": "greatcircle:*=4",
    "megatron": "megatron:" + ";".join(f"{k}={','.join(map(str, v))}" for k, v in MEGATRON_SCHEDULE.items()),
    "softmax_rows": "softmax:*=1,1,1,4",
    "repartition": "repartition:_Mult__map=4,1;_Add__map=1,4",
    "tiles_to_rows": "repartition:_Mult__map=2,2;_Add__map=4,1",
    "mlp": "mlp:_MatMult_.gemm_map=1,4,1;_Add__map=1,4;_numpy_maximum__map=1,4;_MatMult__2.gemm_map=1,1,4",
    # Megatron with row blocks out: partial sums reduce-scattered straight between the buffers
    "mlp_rows_out": "mlp:_MatMult_.gemm_map=1,4,1;_Add__map=1,4;_numpy_maximum__map=1,4;_MatMult__2.gemm_map=1,1,4;"
                    "_Add__map_2=4,1",
    # hidden 128 split 3 ways: the padded blocks of h and W2 are filled on the rank whose block is
    # smaller than its buffer and not on the two whose blocks cover theirs (F_PAD); rank 3 idle
    "mlp_uneven": "mlp:_MatMult_.gemm_map=1,3,1;_Add__map=1,3;_numpy_maximum__map=1,3;_MatMult__2.gemm_map=1,1,3",
}
CASES[4] += list(MULTI.values())

# Two contractions added: the difference of the partial products is reduced once.
SUM_OF_PRODUCTS = ("sum_of_products:_MatMult_.gemm_map=1,1,2;_MatMult__2.gemm_map=1,1,2;_Mult__map=2,1;"
                   "_Sub__map=2,1;_Add__map=2,1")
CASES[2].append(SUM_OF_PRODUCTS)

# The planner's schedules for every "Core lowering" program.
CORE = ["add3d", "add_scalar", "reduce_sum", "reduce_max", "matmul", "softmax", "projection", "spmv", "add_odd"]
CASES[4] += [f"{p}:auto" for p in CORE]

# SpMV's A_col/A_val blocks from A_row's values at call time: rows of very different
# lengths, a rank without nonzeros, a grid smaller than the communicator.
SPMV = {4: ["spmv:spmv=4", "spmv_skewed:spmv=4", "spmv_skewed:spmv=3"], 2: ["spmv:spmv=2", "spmv_skewed:spmv=2"]}
CASES[4] += ["spmv_skewed:spmv=4", "spmv_skewed:spmv=3"]

# A[i, j] and A[j, i] in one map, j split: each rank reads rows of A outside its column block
# (DaCe's union of the two images took 8*r + 7 for the larger bound than 29: a wrong answer).
CASES[4] += ["sym_lower:*=1,4"]
CASES[2] += ["spmv_skewed:spmv=2"]
# Kernels left on one rank (a grid of ones): DaCe's image of A[2 * i] over i in [0, 49] lost its
# step (A[0:50]: half of what the rank reads, a wrong answer), and a scatter whose group is rank 0
# alone gave MPI a null send buffer (MPICH: "Invalid buffer pointer").
CASES[2] += ["strided_pick:*=1", "strided_pick:*=2", "shifted_stencil:*=1,1"]
# The same in distributed placement: A[2 * i]'s blocks leave gaps, so A's owners get even rows and
# the argument is the owned block, copied into a buffer that reaches one element into the next
# rank's block (the call refused the block distsdfg.layout gave: "has shape (50,), but this
# rank's block is (51,)"); the stencil's ghost rows come from the neighbour.
CASES[2] += ["strided_pick@distributed:*=2", "shifted_stencil@distributed:*=2,1"]
# A library node left on rank 0 (a complex einsum) reading a map's result through a reshape view:
# the view's read did not count as a use of the array, so its blocks never came back (zeros).
CASES[2] += ["weighted_product:*=2,1,1"]
# A GEMV whose contraction is split so that each rank holds one index: DaCe's expansion refused
# the local (3, 1) @ (1,) ("Output of dot product must be a single element").
CASES[2] += ["short_matvec:*=1,2", "short_vecmat:*=1,2"]
# A complex scalar argument (DaCe 1.0.2 passes it as a long double: garbage) runs as a one-element
# array that the lowering makes of it (dace_compat.scalars); the caller passes a Python complex.
CASES[2] += ["complex_scalar:*=2,1"]
CASES[4] += ["weighted_product:*=1,3,1", "weighted_product@distributed:*=2,1,1"]
# x = pos[:, 0:1]; x.T - x: DaCe 1.0.2's parser squeezed the slice of extent one like an index, so
# the pairwise differences were (N,) - (N,), zeros (dace_compat.slices keeps NumPy's shape).
CASES[2] += ["pair_differences:*=2,1"]
# Fresh NumPy programs that once failed: a nested call given a column of width one read it with contiguous strides;
# // and % of negative int64 were C's, sums of booleans booleans, means of int64 int64 (all
# silent, with DaCe alone too); MPI refused MPI_MAX on bool partial results; a (1, 3) block of
# A.T made DaCe's Transpose node invalid.
CASES[2] += ["nested_column:*=2,1", "floor_mod:*=2,1", "any_column:*=1,2", "small_transpose:*=2,1"]
# np.std / np.var / np.clip / np.linalg.norm (Python callbacks in DaCe 1.0.2, refused) as maps and
# reductions (dace_compat.npfuncs): column statistics over rows split two ways combine partial sums.
CASES[2] += ["standard_scores:*=2,1"]


def _run(nprocs, cases, tmp_path):
    return launch_cases(nprocs, cases, tmp_path, out_name=f"results_{nprocs}.json")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """One job per rank count, run side by side (each in a folder of its own): a job compiles on
    rank 0 while its other ranks sleep, so one job alone leaves a core of a small machine idle."""
    from concurrent.futures import ThreadPoolExecutor
    folders = {n: tmp_path_factory.mktemp(f"mpi{n}") for n in CASES}
    with ThreadPoolExecutor(len(CASES)) as pool:
        jobs = {n: pool.submit(_run, n, cases, folders[n]) for n, cases in CASES.items()}
        return {n: job.result() for n, job in jobs.items()}


@pytest.mark.parametrize("nprocs,case", [(n, c) for n, cs in CASES.items() for c in cs])
def test_case_matches_numpy(results, nprocs, case):
    r = results[nprocs][case]
    assert "error" not in r, r.get("trace", r.get("error"))
    assert r["shape_ok"]
    assert bytes_mismatch(r) is None, bytes_mismatch(r)     # PMPI-measured bytes == comm_report
    tol = 1e-5 if r["dtype"] == "float32" else 1e-10
    if r["dtype"].startswith("int"):
        assert r["rel_err"] == 0
    else:
        assert r["rel_err"] <= tol, r["rel_err"]


def test_matmul_bytes_measured_in_run(results):
    r = results[4]["matmul:gemm_map=2,2,1"]
    recv_a = [sum(s["received"][q] for s in r["report"] if s["array"] == "A") for q in range(4)]
    assert recv_a == [0, 196_608, 196_608, 196_608]


def test_projection_head_split_moves_no_weights_twice(results):
    r = results[4]["projection:einsum_map=1,1,1,4,1"]
    w = [sum(s["received"][q] for s in r["report"] if s["array"] == "W") for q in range(4)]
    assert w == [0] + [32 * 1 * 8 * 4] * 3   # one head's [E, 1, E_H] block each


@pytest.mark.parametrize("nprocs,case", [(n, c) for n, cs in SPMV.items() for c in cs])
def test_spmv_moves_the_hand_written_row_splits_bytes(results, nprocs, case):
    # benchmarks/handwritten.py: each rank receives its rows' A_row slice (one entry more), the
    # A_col/A_val ranges A_row[r0]:A_row[r1] and x, and sends its rows of the result.
    from distsdfg.testing.programs import get
    r = results[nprocs][case]
    inputs = get(case.split(":")[0]).inputs(np.random.default_rng(1234))
    ptr = inputs["A_row"].astype(np.int64)
    m, n, parts = len(ptr) - 1, len(inputs["x"]), int(case.rsplit("=", 1)[1])
    rows = -(-m // parts)
    want_in, want_out = [0] * nprocs, [0] * nprocs
    for q in range(1, parts):
        lo, hi = q * rows, min(m, (q + 1) * rows)
        want_in[q] = (hi - lo + 1) * 4 + int(ptr[hi] - ptr[lo]) * (4 + 8) + n * 8
        want_out[q] = (hi - lo) * 8
    want_in[0], want_out[0] = sum(want_out), sum(want_in)       # rank 0 sends the inputs, gathers y
    got_in = [sum(s["received"][q] for s in r["report"]) for q in range(nprocs)]
    got_out = [sum(s["sent"][q] for s in r["report"]) for q in range(nprocs)]
    assert (got_in, got_out) == (want_in, want_out)
    assert bytes_mismatch(r) is None, bytes_mismatch(r)       # and the run moved exactly these
    # A second call with the rows reversed (same sizes): new ranges, right answer, exact bytes.
    again = r["recall"]
    assert again["rel_err"] <= 1e-10 and bytes_mismatch(again) is None, (again["rel_err"], bytes_mismatch(again))
    recv = [sum(s["received"][q] for s in again["report"]) for q in range(nprocs)]
    assert recv != got_in


def test_softmax_data_parallel_has_no_reductions(results):
    r = results[4][CASES[4][14]]
    assert not any(s["collective"] in ("Reduce", "Allreduce") for s in r["report"])


# -- data stays distributed between kernels ----------------------------------------------
def _calls(r, arrays=None):
    return [(s["collective"], s["array"]) for s in r["report"] if arrays is None or s["array"] in arrays]


def _bytes(r, arrays=None):
    return sum(sum(s["sent"]) for s in r["report"] if arrays is None or s["array"] in arrays)


def test_chain_intermediate_never_moves(results):
    r = results[4][MULTI["chain"]]
    assert {a for _, a in _calls(r)} == {"A", "B", "C", "__return"}
    # A row blocks scattered, B and C broadcast, the result gathered: nothing for A @ B.
    assert _bytes(r) == 3 * (32 * 112 + 112 * 96 + 96 * 80 + 32 * 80) * 8


def test_atax_scatters_A_once_and_reduces_partial_sums(results):
    r = results[4][MULTI["atax"]]
    assert _calls(r, {"A"}) == [("Scatterv", "A")]
    assert {a for _, a in _calls(r)} == {"A", "x", "__return"}
    assert _calls(r, {"__return"}) == [("Reduce", "__return")]


def test_elementwise_chain_moves_inputs_and_output_once(results):
    r = results[4][MULTI["greatcircle"]]
    assert sorted(_calls(r)) == sorted([("Scatterv", a) for a in ("lat1", "lon1", "lat2", "lon2")]
                                       + [("Gatherv", "__return")])
    assert _bytes(r) == 5 * 3 * 25_000 * 8


def test_sum_of_partial_products_reduced_once(results):
    """``(A1 @ B1 - 0.5 * (A2 @ B2)) + D`` with both contractions split: every rank scales and
    subtracts its own partial products, one Reduce_scatter of the difference (lowering/partial_sums.py)."""
    r = results[2][SUM_OF_PRODUCTS]
    assert [c for c, _ in _calls(r) if c.startswith(("Reduce", "Allreduce"))] == ["Reduce_scatter"]
    # inputs' blocks to rank 1 (A1, A2 columns, B1, B2 rows, D rows), the difference's halves, the result back
    assert _bytes(r) == (48 * 32 + 32 * 40 + 48 * 16 + 16 * 40 + 24 * 40 + 48 * 40 + 24 * 40) * 8


def test_megatron_one_allreduce_between_kernels(results):
    r = results[4][MULTI["megatron"]]
    inputs = {"x", "WQ", "WK", "WV", "WO", "W1"}
    between = [c for c in _calls(r) if c[1] not in inputs and c[0] != "Gatherv"]
    assert between == [("Allreduce", "out")]
    assert all(c in ("Scatterv", "Bcast") for c, _ in _calls(r, inputs))
    assert [c for c, _ in _calls(r) if c == "Gatherv"] == ["Gatherv"]     # the result, once


def test_softmax_split_rows_allreduces_max_and_sum(results):
    r = results[4][MULTI["softmax_rows"]]
    calls = _calls(r)
    assert [c for c, _ in calls] == ["Scatterv", "Allreduce", "Allreduce", "Gatherv"]
    # One row statistic per (b, h, i): 8 * 16 * 32 float32 values, reduced across the 4 ranks.
    assert all(sum(s["sent"]) == 4 * 2 * (4096 - 1024) * 4 for s in r["report"] if s["collective"] == "Allreduce")


def test_row_to_column_repartition_receives_only_missing_blocks(results):
    r = results[4][MULTI["repartition"]]
    y = [s for s in r["report"] if s["array"] == "y"]
    assert [s["collective"] for s in y] == ["Alltoallw"]
    # Each rank needs a 64 x 12 column block and already has 16 x 12 of it.
    assert y[0]["received"] == [48 * 12 * 8] * 4


def test_tiles_to_rows_on_another_grid_shape(results):
    r = results[4][MULTI["tiles_to_rows"]]
    assert [s["collective"] for s in r["report"] if s["array"] == "y"] == ["Alltoallw"]


def test_megatron_mlp_only_reduce_after_inputs(results):
    r = results[4][MULTI["mlp"]]
    inputs = {"x", "W1", "b1", "W2", "b2"}
    assert [c for c, a in _calls(r) if a not in inputs] == ["Reduce"]


def test_megatron_mlp_with_row_blocks_out_reduce_scatters(results):
    """The partial sums go to their row owners by one Reduce_scatter (sent from and received into
    the kernels' buffers), then the rows are gathered."""
    r = results[4][MULTI["mlp_rows_out"]]
    inputs = {"x", "W1", "b1", "W2", "b2"}
    assert [c for c, a in _calls(r) if a not in inputs] == ["Reduce_scatter", "Gatherv"]


# -- planned schedules run correctly and use every rank -----------------------------------
@pytest.mark.parametrize("prog", CORE)
def test_auto_schedule_uses_all_ranks(results, prog):
    r = results[4][f"{prog}:auto"]
    assert "error" not in r, r.get("trace")
    import math
    for key, grid in r["schedule"].items():
        assert math.prod(grid) == 4, (key, grid)


def test_host_buffers_are_remade_when_sizes_change(tmp_path):
    """target="cpu" programs keep their ranks' buffers from call to call (persistent); a call with
    other sizes re-initialises the program (distsdfg.testing.gpu_args on the host, 2 ranks)."""
    from distsdfg.testing import gpu_args
    records = gpu_args.launch(tmp_path, 2, "cpu")
    assert [r["check"] for r in records] == ["matmul 256x192x128", "matmul 64x48x40", "matmul 256x192x128",
                                             "affine in place"]
    for r in records:
        assert r["kind"] == "numpy" and r["rel_err"] <= 1e-12, r
