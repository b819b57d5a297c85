"""A fixed fuzz sample: every drawn (program, schedule, P) is right or refused up front."""
from distsdfg.testing.fuzz import draw_cases, run_cases, summarise
from distsdfg.testing.fuzz_corpus import BASE, CORPUS
from distsdfg.runtime.builds import _cached


def test_corpus_covers_what_the_issue_lists():
    assert len(CORPUS) >= 15
    names = set(CORPUS)
    for needed in ("ew_broadcast", "sum_axis0", "max_axis1", "min_axis0_i32", "prod_axis1", "matmul_odd",
                   "einsum_transposed", "inplace_add", "slice_offsets", "stencil_1d", "scalar_sum", "int64_ew",
                   "symbolic_square", "matmul_f32"):
        assert needed in names


def test_corpus_has_hand_written_map_kernels():
    from distsdfg.testing.fuzz import draw_cases, select_programs
    maps = select_programs("map_*")
    assert len(maps) >= 12 and not set(maps) & set(BASE)
    assert {c.program for c in draw_cases(200, seed=5, programs=maps)} == set(maps)


def test_draws_are_seeded_and_cover_all_rank_counts():
    a, b = draw_cases(40, seed=3), draw_cases(40, seed=3)
    assert a == b
    assert {c.nprocs for c in draw_cases(200, seed=3)} == {1, 2, 3, 4, 6, 8}
    assert "python -m distsdfg.testing.fuzz --seed 3 --only 0" in a[0].reproducer()


def test_fixed_sample_is_right_or_refused(tmp_path):
    cases = draw_cases(60, seed=2024, programs=BASE)
    results = run_cases(cases, timeout_per_case=240, workdir=str(tmp_path))
    s = summarise(results)
    byid = {c.ident: c for c in cases}
    assert not s["failures"], "\n".join(f"{r['outcome']}: {byid[r['case']].reproducer()}: {r.get('message', '')}"
                                        for r in s["failures"])
    assert len(results) == 60
    assert s["counts"].get("ok", 0) >= 30


def test_an_interrupted_build_is_not_reused(tmp_path):
    # A build folder without the stamp (or with another stamp) is rebuilt, never loaded.
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "libx.so").write_bytes(b"half written")
    (tmp_path / "program.sdfg").write_text("{}")
    assert not _cached(str(tmp_path), "key", "x")
    (tmp_path / "distsdfg.stamp").write_text("other")
    assert not _cached(str(tmp_path), "key", "x")
    (tmp_path / "distsdfg.stamp").write_text("key")
    assert _cached(str(tmp_path), "key", "x")


def test_regression_seed_7_case_205_transposed_einsum_operand(tmp_path):
    """The fuzzer's first find: ``einsum('ji,jk->ik')`` reads A through a transposed (strided) view,
    which the scatter packed as if it were row-major. Steps now carry the global strides."""
    from distsdfg.testing.fuzz import draw_case
    cases = [draw_case(7, 205, programs=BASE), draw_case(7, 60, programs=BASE), draw_case(7, 89, programs=BASE)]
    assert {c.program for c in cases} == {"einsum_transposed"}
    results = run_cases(cases, timeout_per_case=240, workdir=str(tmp_path))
    assert [r["outcome"] for r in results] == ["ok"] * 3, results


def test_ranks_outside_the_grid_skip_a_map_that_reads_through_an_index_array():
    # Fuzz seed 11 case 8 (``map_gather``, grid 1 on 2 ranks): rank 1 ran the map on an index
    # buffer it never received and followed garbage indices (a segfault). Its range is now
    # empty outside the grid (the membership symbol).
    import warnings

    import distsdfg
    warnings.simplefilter("ignore")
    sdfg = CORPUS["map_gather"].prog.to_sdfg()
    distsdfg.lower(sdfg, {distsdfg.maps(sdfg)[0].key: (1,)})
    (kg,) = sdfg._distsdfg.kernels
    assert kg.member and kg.member in sdfg.symbols


def test_one_rank_map_on_a_home_buffer_is_guarded_and_index_free_maps_are_not():
    # Fuzz seed 11 case 19 (``map_in_loop``): the unscheduled copy map ran on every rank over
    # the home buffer of A, which spans only the rank's own block (heap corruption on rank 1).
    import warnings

    import distsdfg
    warnings.simplefilter("ignore")
    sdfg = CORPUS["map_in_loop"].prog.to_sdfg()
    first, second = distsdfg.maps(sdfg)
    distsdfg.lower(sdfg, {first.key: (2,)})
    members = {kg.keys[0]: kg.member for kg in sdfg._distsdfg.kernels}
    assert members[first.key] == "" and members[second.key] != ""


def test_ranks_outside_the_grid_skip_a_map_whose_buffer_is_not_offset_to_the_block():
    # Fuzz seed 21 case 215 (``map_triangular``, grid (2) on 4 ranks): ranks 2 and 3 ran rows
    # 10..14 over a local L allocated whole (the triangular write L[i, 0:i+1]) and indexed
    # globally, past its end (heap corruption). Such maps get the membership guard too; a map
    # whose buffers all start at the rank's block (the element-wise kind) does not need it.
    import warnings

    import distsdfg
    warnings.simplefilter("ignore")
    sdfg = CORPUS["map_triangular"].prog.to_sdfg()
    distsdfg.lower(sdfg, {distsdfg.maps(sdfg)[0].key: (2,)})
    (kg,) = sdfg._distsdfg.kernels
    assert kg.member and kg.member in sdfg.symbols
    sdfg = CORPUS["ew_broadcast"].prog.to_sdfg()
    distsdfg.lower(sdfg, {m.key: (2,) + (1,) * (len(m.params) - 1) for m in distsdfg.maps(sdfg)})
    assert all(not kg.member for kg in sdfg._distsdfg.kernels)


def test_matmul_blocks_that_dace_reads_as_vectors_are_computed_by_maps(tmp_path):
    """Seed 41's compile-time refusals: the contraction axis split 8 ways gives local operands
    (M, 1) and (1, N), which DaCe's MatMul expansion squeezes into a dot product ("Output of dot
    product must be a single element"); a batch block of one gave ``[3, 3, 7] x [3, 7]``. Those
    products are now maps (``dace_compat.matmul``); the others stay BLAS calls."""
    import copy
    import warnings

    import distsdfg
    from distsdfg.dace_compat.matmul import misread_by_dace
    from distsdfg.testing import fuzz_corpus as fc
    from distsdfg.testing.fuzz import FuzzCase
    assert misread_by_dace([10, 1], [1, 6], [10, 6]) and misread_by_dace([1, 1], [1, 6], [1, 6])
    assert misread_by_dace([3, 3, 7], [3, 7, 1], [3, 3, 1])
    # A vector taken out of a matrix (``d[0:12, i] @ B``, NPBench's correlation): the size-1
    # dimension is an index, and DaCe's vector-times-matrix reading is the program's.
    assert not misread_by_dace([12, 1], [12, 9], [1, 9])
    assert not misread_by_dace([1, 7], [7, 6], [1, 6]) and not misread_by_dace([10, 7], [7, 1], [10, 1])
    assert not misread_by_dace([1, 7], [7, 1], [1, 1]) and not misread_by_dace([10, 7], [7, 6], [10, 6])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sdfg = fc.mlp_small.to_sdfg()
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"_MatMult_.gemm_map": (1, 1, 8)}))
    copy.deepcopy(sdfg).expand_library_nodes()          # DaCe's expansion raised ValueError here
    cases = [FuzzCase(41, 608, "mlp_small", 8, (("_MatMult_.gemm_map", (1, 1, 8)), ("_numpy_maximum__map", (1, 8)),
                                                 ("_MatMult__2.gemm_map", (2, 1, 4)))),
             FuzzCase(41, 299, "einsum_batched", 8, (("einsum_gemm._BatchedBatchedMatMult__map", (1, 2, 4, 1)),))]
    results = run_cases(cases, timeout_per_case=240, workdir=str(tmp_path))
    assert [r["outcome"] for r in results] == ["ok"] * 2, results
