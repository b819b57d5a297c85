"""Distributed placement: inputs, outputs and state that never pass through rank 0.

Unit tier (no compile): which arguments are placed, the layouts every rank passes, what
comm_report and the planner price at the boundary, the block helpers.
mpiexec tier: matmul, the MLP forward and five SGD steps on 4 ranks, block by block against
NumPy, and a 4096 x 4096 .npy input read block-wise with each rank's memory tracked.
"""
import json
import os
import subprocess
import sys
import warnings

import dace
import numpy as np
import pytest

import distsdfg
from distsdfg import dace_compat as dc
from distsdfg.errors import PlacementError
from distsdfg.lowering.placement import ArrayLayout, placed_arrays
from distsdfg.testing.mpirun import bytes_mismatch, counted_argv
from distsdfg.testing.programs import get

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MM = dict(M=256, N=128, K=192)


def _sdfg(name):
    warnings.simplefilter("ignore")
    sdfg = get(name).sdfg()
    dc.simplify(sdfg)
    return sdfg


def _lowered(name, grids, placement="distributed"):
    sdfg = _sdfg(name)
    return distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, grids), placement=placement)


# -- unit tier -------------------------------------------------------------------------------------
def test_placement_selects_argument_arrays_and_refuses_what_cannot_be_split():
    mlp = _sdfg("mlp")
    assert placed_arrays(mlp, "distributed") == {"x", "W1", "b1", "W2", "b2", "__return"}
    assert placed_arrays(mlp, None) == placed_arrays(mlp, "root") == set()
    assert placed_arrays(mlp, {"*": "distributed", "x": "root"}) == {"W1", "b1", "W2", "b2", "__return"}
    assert placed_arrays(mlp, {"W1": "distributed"}) == {"W1"}
    cg = _sdfg("cg")          # the scalar tolerance and one-element counters stay replicated
    assert placed_arrays(cg, "distributed") == {"A", "b", "x"}
    with pytest.raises(PlacementError, match="`tol` cannot be placed distributed: it is a scalar"):
        placed_arrays(cg, {"tol": "distributed"})
    with pytest.raises(PlacementError, match="`W3`, which is not an argument array.*W1"):
        placed_arrays(mlp, {"W3": "distributed"})
    with pytest.raises(PlacementError, match="'sharded'"):
        placed_arrays(mlp, "sharded")


NV, MV = dace.symbol("NV"), dace.symbol("MV")


@dace.program
def column_products(float_n: dace.float64, data: dace.float64[NV, MV]):
    mean = np.mean(data, axis=0)
    np.subtract(data, mean, out=data)
    cov = np.zeros((MV, MV), dtype=np.float64)
    for i in range(MV):
        cov[i, i:MV] = data[:, i] @ data[:, i:MV] / (float_n - 1.0)
        cov[i:MV, i] = cov[i, i:MV]
    return cov


TN = dace.symbol("TN")


@dace.program
def forward_substitution(L: dace.float64[TN, TN], x: dace.float64[TN], b: dace.float64[TN]):
    for i in range(TN):
        x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]


def test_scalars_of_a_program_split_nowhere_stay_on_rank_0():
    # Every kernel of a triangular solve depends on the loop variable and runs on rank 0; the dot
    # product's one-element result used to go to every rank each iteration (N messages a call).
    sdfg = forward_substitution.to_sdfg()
    distsdfg.lower(sdfg, "auto", nprocs=2, placement="distributed", plan_options=dict(TN=40))
    steps = distsdfg.comm_report(sdfg, nprocs=2, TN=40)
    assert all(str(s.repeats) == "1" for s in steps), steps


def test_arrays_a_loop_on_rank_0_uses_stay_at_root():
    # ``data[:, i]`` in a loop is a view the lowering keeps whole on rank 0, and the loop writes rows
    # and columns of the result there: "distributed" passes both whole at rank 0, and no step runs in
    # the loop (each iteration moved the whole result to rank 0 and back); naming one is refused.
    sizes = dict(NV=70, MV=50)
    sdfg = column_products.to_sdfg()
    distsdfg.lower(sdfg, "auto", nprocs=2, placement="distributed", plan_options=sizes)
    assert distsdfg.layout(sdfg, "data", **sizes).placement == "root"
    assert distsdfg.layout(sdfg, "__return", **sizes).placement == "root"
    steps = distsdfg.comm_report(sdfg, nprocs=2, **sizes)
    assert steps and all(str(s.repeats) == "1" for s in steps), steps
    with pytest.raises(PlacementError, match="`__return` of `.*column_products` cannot be placed distributed: a loop"):
        distsdfg.lower(column_products.to_sdfg(), "auto", nprocs=2, placement={"__return": "distributed"},
                       plan_options=sizes)
    with pytest.raises(PlacementError, match="`data` of `.*column_products` cannot be placed distributed: the program reads it through slices"):
        distsdfg.lower(column_products.to_sdfg(), "auto", nprocs=2, placement={"data": "distributed"},
                       plan_options=sizes)


def test_matmul_2_2_1_keeps_every_block_in_place():
    sdfg = _lowered("matmul", {"gemm_map": (2, 2, 1)})
    assert distsdfg.comm_report(sdfg, nprocs=4, **MM) == []           # no scatter, no gather, nothing
    A = distsdfg.layout(sdfg, "A", nprocs=4, **MM)
    assert A.blocks == (((0, 128), (0, 192)),) * 2 + (((128, 256), (0, 192)),) * 2
    assert A.replicas(1) == (0, 1) and A.primary(0) and not A.primary(1)
    B = distsdfg.layout(sdfg, "B", nprocs=4, **MM)
    assert B.blocks[0] == B.blocks[2] == ((0, 192), (0, 64)) and B.blocks[1] == ((0, 192), (64, 128))
    C = distsdfg.layout(sdfg, "__return", nprocs=4, **MM)
    assert [C.blocks[q] for q in range(4)] == [((0, 128), (0, 64)), ((0, 128), (64, 128)), ((128, 256), (0, 64)),
                                               ((128, 256), (64, 128))]
    # The planner prices the same boundary as free.
    assert distsdfg.schedule_cost(_sdfg("matmul"), {"_MatMult_.gemm_map": (2, 2, 1)}, inputs="distributed", **MM) == 0


def test_per_rank_symbols_pack_into_one_array_argument():
    # A program whose per-rank symbols exceed the threshold is compiled as a wrapper that takes them
    # in one int64 array (ctypes refuses calls of over 1,024 arguments): checked symbolically here,
    # compiled and run under mpiexec below (the ":packed" cases).
    import copy
    from distsdfg.dace_compat.pack import PACKED, pack_symbols, packed_names, symbols_to_pack
    from distsdfg.lowering.rewriter import PLAN_LEN
    sdfg = _lowered("mlp", {"gemm_map": (4, 1, 1), "*": (4, 1)})
    per_rank = symbols_to_pack(sdfg, keep=(PLAN_LEN,))
    assert per_rank and all(s.startswith("__dsdfg") for s in per_rank) and PLAN_LEN not in per_rank
    assert pack_symbols(copy.deepcopy(sdfg), keep=(PLAN_LEN,), limit=len(per_rank)).arrays.keys() == sdfg.arrays.keys()
    wrapper = pack_symbols(copy.deepcopy(sdfg), keep=(PLAN_LEN,), limit=0)
    wrapper.validate()
    args = wrapper.arglist()
    assert wrapper.name == sdfg.name and PACKED in args and not set(per_rank) & set(args)
    assert set(args) == (set(sdfg.arglist()) - set(per_rank)) | {PACKED}
    assert packed_names(wrapper) == per_rank and packed_names(sdfg) is None


def test_matmul_1_1_4_only_combines_partial_sums():
    sdfg = _lowered("matmul", {"gemm_map": (1, 1, 4)})
    steps = distsdfg.comm_report(sdfg, nprocs=4, **MM)
    assert [(s.collective, s.array) for s in steps] == [("Reduce_scatter", "__return")]
    assert steps[0].received == (256 * 128 * 8 * 3 // 4,) * 4          # 3/4 of C's partial sums per rank
    C = distsdfg.layout(sdfg, "__return", nprocs=4, **MM)                # partial sums land in row blocks
    assert [C.block_shape(q) for q in range(4)] == [(64, 128)] * 4
    A = distsdfg.layout(sdfg, "A", nprocs=4, **MM)
    assert [A.blocks[q][1] for q in range(4)] == [(0, 48), (48, 96), (96, 144), (144, 192)]


def test_root_override_gathers_only_that_array():
    sdfg = _lowered("matmul", {"gemm_map": (2, 2, 1)}, {"*": "distributed", "__return": "root"})
    steps = distsdfg.comm_report(sdfg, nprocs=4, **MM)
    assert {s.array for s in steps} == {"__return"}
    assert sum(s.received[0] for s in steps) == 3 * 128 * 64 * 8     # the three other blocks of C, once
    assert distsdfg.layout(sdfg, "__return", nprocs=4, **MM).placement == "root"


def test_uneven_blocks_have_their_own_shapes():
    sdfg = _lowered("add_odd", {"*": (4, 1)})
    x = distsdfg.layout(sdfg, "x", nprocs=4)
    assert [x.block_shape(q) for q in range(4)] == [(3, 7), (3, 7), (3, 7), (1, 7)]
    g = np.arange(70.0).reshape(10, 7)
    blocks = [x.block(g, q) for q in range(4)]
    assert all(b.base is None and b.flags.c_contiguous for b in blocks)
    assert np.array_equal(x.assemble(blocks), g)
    assert ArrayLayout.from_json(x.to_json()) == x
    assert "rank 3: [9:10, 0:7]" in str(x)
    with pytest.raises(PlacementError, match="rank 3's block has shape"):
        x.assemble(blocks[:3] + [np.zeros((2, 7))])


GEMV_ROWS = {"Reduce.reduce_output": (1, 4), "_MatMult_._GEMV__map": (4, 1), "_MatMult__2._GEMV__map": (1, 4),
             "_Add__map": (4,)}


def test_library_kernels_read_the_blocks_ranks_pass_in_place():
    # Both GEMVs and the column max read A's uneven row blocks (51, 51, 51, 50 rows): where every
    # rank passes them, with no copy into a padded buffer and no fill.
    sdfg = _lowered("gemv_chain", GEMV_ROWS)
    low = sdfg._distsdfg
    a_steps = [s for s in low.steps if s.array == "A"]
    assert len(a_steps) == 3 and all(s.inplace for s in a_steps), a_steps
    assert not [s for s in low.steps if s.kind == "fill"]
    assert {h.name for h in low.homes if h.array == "A"} == {low.boundary["A"]}     # A is the home buffer
    A = distsdfg.layout(sdfg, "A", nprocs=4, M=203, N=157)
    assert [A.block_shape(q) for q in range(4)] == [(51, 157)] * 3 + [(50, 157)]
    # A GEMV reading A by column blocks while A's home is in row blocks takes a redistributed copy:
    # reading in place would grow every rank's buffer towards the whole of A.
    cols = dict(GEMV_ROWS, **{"_MatMult__2._GEMV__map": (4, 1)})
    low = _lowered("gemv_chain", cols)._distsdfg
    assert [s.inplace for s in low.steps if s.array == "A"] == [True, True, False]


@dace.program
def _scaled_row_sums(A: dace.float64[NV, MV], b: dace.float64[NV]):
    return np.sum(A * 2.0, axis=1) + b


def test_library_and_map_kernels_share_their_blocks_buffers():
    # Map -> reduction -> map, all over the same row blocks: the reduction reads the map's buffer and
    # the next map reads the reduction's, both indexed globally, so nothing is copied between them.
    sdfg = _scaled_row_sums.to_sdfg()
    distsdfg.lower(sdfg, {m.key: (4,) + (1,) * (len(m.params) - 1) for m in distsdfg.maps(sdfg)},
                   placement="distributed")
    low = sdfg._distsdfg
    assert all(s.inplace for s in low.steps), [str(s) for s in low.steps]
    assert distsdfg.comm_report(sdfg, nprocs=4, NV=10, MV=7) == []


def test_same_rank_blocks_matches_grids_by_their_split_axes():
    from distsdfg.values.exprs import same_rank_blocks
    from distsdfg.values.plan import Layout
    rows = (("r*int_ceil(M, 4)", "Min(M - 1, r*int_ceil(M, 4) + int_ceil(M, 4) - 1)"), ("0", "N - 1"))

    def lay(grid, syms, box):
        return Layout("b", "k", grid, syms, (box,), (), ())
    a = lay((4, 1), ("r", ""), rows)
    b = lay((1, 4), ("", "q"), tuple((x.replace("r", "q"), y.replace("r", "q")) for x, y in rows))
    assert same_rank_blocks(a, b) and same_rank_blocks(b, a)
    assert not same_rank_blocks(a, lay((2, 2), ("r", "q"), rows))                 # other coordinates
    assert not same_rank_blocks(a, lay((4, 1), ("r", ""), (rows[0], ("0", "N - 2"))))
    assert not same_rank_blocks(a, lay((4, 1), ("r", ""), (("0", "M - 1"), rows[0])))


@dace.program
def _contract_two(A: dace.float64[7, 5, 3], B: dace.float64[5, 3, 11]):
    return np.einsum('ijk,jkl->il', A, B)


def test_uneven_row_blocks_through_a_reshape_stay_in_place():
    # The einsum reads A through the reshape (7, 15); 7 rows split 4 ways give buffers of 2 rows
    # and the last rank's buffer reaches past the array, along the dimension the reshape keeps.
    # That was refused ("the local buffer reaches past the array") although the blocks are A's own
    # row blocks (hK's sweep).
    warnings.simplefilter("ignore")
    sdfg = _contract_two.to_sdfg()
    distsdfg.lower(sdfg, {k.key: (4, 1, 1) for k in distsdfg.maps(sdfg) if k.key.endswith("gemm_map")},
                   placement="distributed")
    assert distsdfg.comm_report(sdfg, nprocs=4) == []        # A's blocks arrive where the product reads them
    A = distsdfg.layout(sdfg, "A", nprocs=4)
    assert [A.block_shape(q) for q in range(4)] == [(2, 5, 3), (2, 5, 3), (2, 5, 3), (1, 5, 3)]


def test_training_step_keeps_weights_on_their_owners():
    p = get("mlp_sgd")
    sdfg = _sdfg("mlp_sgd")
    sizes = dict(p.symbols)
    distsdfg.lower(sdfg, "auto", nprocs=4, placement="distributed", plan_options=sizes)
    steps = distsdfg.comm_report(sdfg, nprocs=4, **sizes)
    # Weights and data are never gathered or scattered: only collectives among all ranks move them.
    for s in steps:
        if s.array in ("x", "y", "W1", "W2"):
            assert s.collective in ("Allgatherv", "Reduce_scatter", "Isend/Irecv", "Allreduce"), s
    assert not any(s.collective in ("Scatterv", "Gatherv") for s in steps if s.array != "lr")


N = dace.symbol("N")


@dace.program
def counted_update(st: dace.float64[1], a: dace.float64[N], b: dace.float64[N]):
    for i in dace.map[0:1]:        # unsplit, in place: an optimizer's step counter
        st[i] = st[i] + 1
    for i in dace.map[0:N]:
        b[i] = a[i] * st[0] + b[i]


def test_in_place_update_of_a_replicated_counter_lowers():
    # Issue 24: the counter's kernel reads `st` and writes it in place; its input was taken from
    # its own output node, and DaCe rejected the lowered state as cyclic.
    sdfg = counted_update.to_sdfg()
    dc.simplify(sdfg)
    split = [m.label for m in distsdfg.maps(sdfg)][1]
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {split: (4,)}), placement="distributed")
    sdfg.validate()
    steps = distsdfg.comm_report(sdfg, nprocs=4, N=16)
    # a and b never move; the counter (8 bytes) goes from rank 0, where its update runs, to the others.
    assert {s.array for s in steps} == {"st"}, [str(s) for s in steps]
    assert all(s.sent == (24, 0, 0, 0) and s.received == (0, 8, 8, 8) for s in steps), [str(s) for s in steps]


def test_strided_reads_take_the_block_that_layout_gives():
    # C[i] = A[2 * i] + 3 * B[2 * i + 1], i split 2 ways: rank 1 reads A[50:99:2], so the blocks of
    # the kernel leave gaps and A's owners get even rows ([0:51], [51:101]); the argument was the
    # home buffer, which spans [50:101] on rank 1, and the call refused layout's block.
    from distsdfg.solver.homes import solve_homes
    from distsdfg.testing.offsets import OFFSETS
    sdfg = OFFSETS["strided_pick"].sdfg()
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"*": (2,)}), placement="distributed")
    low = sdfg._distsdfg
    homes = solve_homes(low.homes, {}, 2)
    for x in ("A", "B", "__return"):
        want = [distsdfg.layout(sdfg, x, nprocs=2).block_shape(q) for q in range(2)]
        assert [homes[low.boundary[x]].shapes[q] for q in range(2)] == want, x     # what the call checks
    assert [distsdfg.layout(sdfg, "A", nprocs=2).blocks[q] for q in range(2)] == [((0, 51),), ((51, 101),)]
    # A[50] travels to rank 1 (its buffer starts there); B's and C's buffers are the owned blocks.
    steps = distsdfg.comm_report(sdfg, nprocs=2)
    assert [(s.collective, s.array, s.sent, s.received) for s in steps] == [("Isend/Irecv", "A", (8, 0), (0, 8))]


def test_owned_blocks_contain_the_anchor_only_where_proved():
    from distsdfg.errors import UnsupportedProgramError
    from distsdfg.solver.homes import owns_anchor_blocks, solve_homes
    from distsdfg.values.plan import HomeSpec, Layout

    def anchor(*box, syms=("r",), grid=(2,), op=None, view=()):
        return Layout("buf", "k", grid, syms, (tuple(box),), (), (), op, view, "h0")
    sizes = {"N", "M"}
    even = ("r*int_ceil(N, 2)", "Min(N - 1, r*int_ceil(N, 2) + int_ceil(N, 2) - 1)")
    assert owns_anchor_blocks(anchor(even, ("0", "M - 1")), sizes)                  # row blocks
    assert owns_anchor_blocks(anchor(("Max(0, 3*r - 1)", "Min(N - 1, 3*r + 3)")), sizes)  # overlapping (halo)
    assert owns_anchor_blocks(anchor(("r + 1", "r + 1")), sizes)                    # shifted by one
    assert owns_anchor_blocks(Layout("buf", "k", (1,), ("",), (), (), (), None, (), "h0"), sizes)   # no blocks
    assert not owns_anchor_blocks(anchor(("50*r", "50*r + 48")), sizes)             # A[2 * i]: a gap
    assert not owns_anchor_blocks(anchor(("N - 25*r - 25", "N - 25*r - 1")), sizes)  # reversed
    assert not owns_anchor_blocks(anchor(("r", "r"), ("r", "r")), sizes)            # a diagonal
    assert not owns_anchor_blocks(anchor(("r*int_ceil(K, 2)", "r*int_ceil(K, 2) + int_ceil(K, 2) - 1")),
                                  sizes)                                             # K's sign unknown
    assert not owns_anchor_blocks(anchor(even, op="sum"), sizes)                     # partial sums: split
    assert not owns_anchor_blocks(anchor(even, view=("N",)), sizes)                  # through a reshape
    # A home whose argument is its buffer, although the buffer is larger than the owned block,
    # is refused by name rather than called with blocks that cannot fit.
    gap = anchor(("50*r", "50*r + 48"))
    spec = HomeSpec("h0", "A", "A", ("101",), gap, (gap,), ("o",), ("s",), boundary=True)
    with pytest.raises(UnsupportedProgramError, match=r"rank 1's buffer spans \[50:101\] but it owns \[51:101\]"):
        solve_homes([spec], {}, 2)


def test_compile_with_another_placement_lowers_a_copy(monkeypatch):
    import distsdfg.api as api
    sdfg = _lowered("matmul", {"gemm_map": (2, 2, 1)}, None)
    seen = {}
    monkeypatch.setattr(api, "compile_distributed", lambda s, **kw: seen.setdefault("sdfg", s))
    distsdfg.compile(sdfg, placement="distributed")
    other = seen["sdfg"]
    assert other is not sdfg and set(other._distsdfg.boundary) == {"A", "B", "__return"}
    assert sdfg._distsdfg.boundary == {}
    seen.clear()
    distsdfg.compile(other, placement="distributed")        # already so: compiled as is
    assert seen["sdfg"] is other


# -- mpiexec tier --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("placement")
    out = tmp / "out.json"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    # Under the PMPI byte counter: every call's measured bytes are compared with comm_report.
    argv = counted_argv(4, ["-m", "distsdfg.testing.placement_run", str(out), str(tmp)], timeout=1200)
    proc = subprocess.run(argv, env=env, cwd=str(tmp), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {r["case"]: r for r in json.loads(out.read_text())}


CASES = ["matmul:2,2,1", "matmul:1,1,4", "matmul:2,2,1:C at root", "mlp:data-parallel", "mlp:megatron",
         "mlp_sgd:auto x5", "jacobi2d:2,2 x2", "flagged:4", "sgd_lr:4", "jacobi2d:2,2 x2:packed", "mlp_sgd:auto x5:packed",
         "gemv_chain:rows", "gemv_chain:auto"]


@pytest.mark.parametrize("case", CASES)
def test_every_rank_block_equals_numpy(results, case):
    r = results[case]
    assert "error" not in r, r.get("trace", r.get("error"))
    assert r["rel_err"] and all(e <= 1e-10 for e in r["rel_err"].values()), r["rel_err"]
    assert all(e <= 1e-10 for e in r["assembled_err"].values()), r["assembled_err"]
    assert len(r["bytes"]) >= 1 and bytes_mismatch(r) is None, bytes_mismatch(r)   # every call, every rank
    placed = set(r["boundary"])
    for s in r["report"]:        # a placed array never goes through rank 0 alone
        if s["array"] in placed:
            assert s["collective"] not in ("Scatterv", "Gatherv", "Bcast"), s
            assert not (s["sent"][0] and not any(s["sent"][1:])), s
            assert not (s["received"][0] and not any(s["received"][1:])), s


def test_communication_is_what_the_schedule_needs(results):
    assert results["matmul:2,2,1"]["report"] == []
    assert results["mlp:data-parallel"]["report"] == []          # weights replicated, batch rows split
    assert [s["collective"] for s in results["matmul:1,1,4"]["report"]] == ["Reduce_scatter"]
    assert [s["collective"] for s in results["mlp:megatron"]["report"]] == ["Reduce_scatter"]   # row-parallel W2
    root = results["matmul:2,2,1:C at root"]
    assert {s["array"] for s in root["report"]} == {"__return"} and root["boundary"] == ["A", "B"]
    # The GEMVs and the reduction read A's row blocks where the ranks pass them: only the two
    # partial vectors (a sum, a max) are combined.
    assert [(s["collective"], s["array"]) for s in results["gemv_chain:rows"]["report"]] == [
        ("Reduce_scatter", "__tmp1"), ("Reduce_scatter", "__tmp2")]


def test_stencil_state_stays_on_its_owners_between_calls(results):
    # Ghost cells make the home larger than the block: the argument is copied in and out locally,
    # and across two calls of ten sweeps only halos move.
    r = results["jacobi2d:2,2 x2"]
    assert r["report"] and all(s["collective"] == "Isend/Irecv" and max(s["received"]) == 512 for s in r["report"])
    # A branch reading a distributed argument: every rank needs its value. The flags are read only,
    # by no split kernel, so every rank owns them whole (passes them whole): nothing moves (before:
    # an Allgatherv from their owners' row blocks; never via rank 0).
    assert results["flagged:4"]["report"] == []


def test_per_rank_symbols_packed_in_one_array(results):
    # Forced (threshold 0): the homes' block symbols and rank coordinates reach the program in one
    # int64 array, assigned on the wrapper's first edge; results and bytes as unpacked (asserted above).
    for case in ("jacobi2d:2,2 x2", "mlp_sgd:auto x5"):
        assert results[case]["packed"] == 0
        packed = results[f"{case}:packed"]
        assert packed["packed"] > 10, packed["packed"]
        assert packed["report"] == results[case]["report"]


def test_a_wrong_block_fails_on_every_rank_alike(results):
    msgs = results["matmul:2,2,1"]["bad_block"]
    assert len(set(msgs)) == 1 and "`A` on rank 2 has shape (127, 192)" in msgs[0] and "(128, 192)" in msgs[0]


def test_unequal_one_element_arguments_fail_on_every_rank_alike(results):
    # the learning rate is not broadcast in distributed placement: rank 3's other value is refused
    # everywhere instead of making rank 3's blocks of w follow another update than the rest
    r = results["sgd_lr:4"]
    assert r["report"] == []            # lr passed by every rank, w's blocks stay in place
    msgs = r["bad_replica"]
    assert len(set(msgs)) == 1 and "`lr` differs between ranks" in msgs[0] and "rank 3 passes [0.5]" in msgs[0], msgs


def test_npy_blocks_never_hold_the_whole_array(results):
    r = results["npy"]
    assert "error" not in r, r.get("trace", r.get("error"))
    assert r["rel_err"]["B"] == 0.0 and r["report"] == []
    for peak, block, rss in zip(r["peak"], r["block_bytes"], r["rss_growth"]):
        assert block == r["array_bytes"] // 4
        # Its input block and its output block, and nothing of the size of the array.
        assert peak <= 2 * block + (1 << 20), (peak, block)
        assert rss <= 2 * block + (16 << 20), (rss, block)
