"""Reads and writes through an index array in maps: gathers ``A[i, idx[i]]``, scatters ``A[i, idx[i]] = v``,
a one-hot matrix multiplied afterwards, and histograms ``h[idx[i]] += 1``, on split and unsplit grids."""
import json
import warnings

import pytest
import sympy

import distsdfg
from distsdfg import dace_compat as dc
from distsdfg.analysis.constraints import kernel_constraints
from distsdfg.analysis.kernels import find_kernels
from distsdfg.errors import IndirectWriteError
from distsdfg.testing.fuzz import FuzzCase, run_cases, summarise
from distsdfg.testing.fuzz_corpus import CORPUS

warnings.simplefilter("ignore")


def _sdfg(name):
    return CORPUS[name].prog.to_sdfg()


def _key(sdfg, name):
    (key,) = [m.key for m in distsdfg.maps(sdfg) if name in m.key]
    return key


def _nested_memlets(sdfg):
    import dace
    return {str(e.data) for n, st in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.NestedSDFG)
            for e in st.all_edges(n)}


def test_an_indirect_write_is_narrowed_to_the_row_its_map_parameter_indexes():
    sdfg = _sdfg("map_onehot_sums")
    assert "onehot(1) [0:23, 0:5]" in _nested_memlets(sdfg)
    assert dc.narrow_indirect_accesses(sdfg, dry_run=True) == 1
    assert dc.narrow_indirect_accesses(sdfg) == 1
    assert "onehot(1) [i, 0:5]" in _nested_memlets(sdfg)
    assert dc.narrow_indirect_accesses(sdfg) == 0      # nothing left to narrow
    sdfg.validate()


def test_a_gather_reads_only_its_rows_and_whole_dimensions_stay_whole():
    sdfg = _sdfg("map_gather_rows")
    dc.narrow_indirect_accesses(sdfg)
    assert "A(1) [i, 0:7]" in _nested_memlets(sdfg)
    sdfg = _sdfg("map_gather")        # x[idx[i]]: the only dimension is indexed by value
    assert dc.narrow_indirect_accesses(sdfg) == 0


def test_split_scatter_writes_the_ranks_rows_and_keeps_the_rest_of_the_array():
    sdfg = _sdfg("map_scatter_rows")
    key = _key(sdfg, "map_scatter_rows")
    (k,) = find_kernels(sdfg)
    kp = kernel_constraints(k, {key: (2,)})
    c = kp.arrays["A"]
    r = kp.rank_syms[0]
    lo, hi = c.write[0]
    assert sympy.simplify(lo.subs(r, 1) - 6) == 0 and sympy.simplify(hi.subs(r, 0) - 5) == 0
    # The other columns of the block arrive before the map runs: the kernel reads its block first,
    # then holds it as an exact write (the ranks' rows are disjoint).
    assert c.write_exact and any(all(sympy.simplify(a - b) == 0 for a, b in zip(sum(box, ()), sum(c.write, ())))
                                 for box in c.reads)


def test_ranks_outside_the_grid_skip_a_map_that_writes_through_an_index_array():
    for name in ("map_onehot_sums", "map_histogram", "map_scatter_perm"):
        sdfg = _sdfg(name)
        distsdfg.lower(sdfg, {_key(sdfg, name): (1,)})
        kg = next(k for k in sdfg._distsdfg.kernels if name in k.label)
        assert kg.member and kg.member in sdfg.symbols, name


def test_a_split_overwrite_at_data_dependent_positions_is_refused_by_name():
    sdfg = _sdfg("map_scatter_perm")
    key = _key(sdfg, "map_scatter_perm")
    with pytest.raises(IndirectWriteError, match=r"writes `y` at indices it reads from data.*splits `i` 2 ways.*"
                                                 r"grid \(1,\).*\+="):
        distsdfg.lower(sdfg, {key: (2,)})


def test_split_histogram_combines_partial_counts():
    sdfg = _sdfg("map_histogram")
    distsdfg.lower(sdfg, {_key(sdfg, "map_histogram"): (2,)})
    kinds = [s.kind for s in sdfg._distsdfg.steps]
    assert "reduce" in kinds


def test_indirect_reads_and_writes_on_three_ranks(tmp_path):
    """One 3-rank job: each shape on an uneven split, on a grid of one (ranks outside it), and the
    k-means step (a one-hot matrix built by an indirect write, then multiplied) both ways. The job
    also runs a library max-Reduce without identity in a nested program (its output's fill is
    ordered through the Reduce's input: DaCe rejects a second edge into a Reduce)."""
    def case(i, name, grid):
        sdfg = _sdfg(name)
        key = _key(sdfg, name) if name.startswith("map_") else distsdfg.maps(sdfg)[0].key
        return FuzzCase(0, i, name, 3, ((key, grid),))
    sd = _sdfg("map_conditional_onehot")
    cond, fill = _key(sd, "map_conditional_onehot"), _key(sd, "full")
    cases = [case(0, "map_onehot_sums", (1,)), case(1, "map_onehot_sums", (3,)), case(2, "map_scatter_rows", (3,)),
             case(3, "map_scatter_rows", (1,)), case(4, "map_gather_rows", (3,)), case(5, "map_histogram", (3,)),
             case(6, "map_histogram", (1,)), case(7, "map_scatter_perm", (1,)), case(8, "nested_reduce_max", (3, 1)),
             case(9, "nested_reduce_max", (1, 3)), case(10, "map_scatter_perm", (3,)),
             # a write under a condition, on row blocks: over a zero fill on rank 0, and over a fill on
             # column blocks (the k-means step's one-hot matrix: its blocks move to rows first)
             FuzzCase(0, 11, "map_conditional_onehot", 3, ((cond, (3, 1)),)),
             FuzzCase(0, 12, "map_conditional_onehot", 3, ((cond, (3, 1)), (fill, (1, 3))))]
    results = run_cases(cases, timeout_per_case=60, workdir=str(tmp_path))
    s = summarise(results)
    assert not s["failures"], json.dumps(s["failures"])[:4000]
    outcomes = {r["case"]: r["outcome"] for r in results}
    assert outcomes == {f"0:{i}": "ok" for i in range(13) if i != 10} | {"0:10": "refused"}, results


def test_a_write_under_a_condition_reads_its_block_first_and_holds_it():
    # ``if labels[i] == k: onehot[i, k] = 1.0`` writes some elements of the rank's block: the kernel
    # reads the block's current value first, and then holds the whole block (no round trip to rank 0)
    sdfg = _sdfg("map_conditional_onehot")
    dc.simplify(sdfg)
    (k,) = [k for k in find_kernels(sdfg) if "conditional" in k.label]
    c = kernel_constraints(k, {m.info.key: (3, 1) for m in k.maps}).arrays["onehot"]
    assert c.write is not None and c.reads == [c.write] and c.write_exact and c.write_covers


def test_a_nested_reduce_without_identity_lowers():
    sdfg = _sdfg("nested_reduce_max")
    distsdfg.lower(sdfg, {distsdfg.maps(sdfg)[0].key: (2, 1)})
    kinds = [(s.kind, s.array) for s in sdfg._distsdfg.steps]
    assert ("fill", "out") in kinds and ("reduce", "out") in kinds     # DaCe refused a second edge into the Reduce


def test_a_dimension_indexed_two_ways_stays_whole():
    # NPBench's syrk shape (a nested SDFG whose memlets index one dimension by different
    # expressions, one of them read at run time): that dimension is kept whole, the rest narrowed,
    # and nothing raises (a dimension found unknown was compared again with the next memlet).
    from distsdfg.testing.programs import get
    sdfg = get("tri_syrk").sdfg()
    dc.narrow_indirect_accesses(sdfg)
    find_kernels(sdfg)
    sdfg.validate()
