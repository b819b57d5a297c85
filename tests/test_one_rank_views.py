"""One rank, issue 22 (sixth pass): copies between whole buffers become views, zero fills before a
single add become assignments, dead zeroing maps go, and SpMV's nested accumulation drops its
atomics. Two compiles (Megatron, SpMV), each called on two inputs; run in this process on
mpi4py's one-rank COMM_WORLD (no mpiexec)."""
import dace
import numpy as np

import distsdfg
from benchmarks.workloads import get, sizes_of
from distsdfg.mpi import DistributedMemlet


def _lowered(name, preset="tiny"):
    w = get(name)
    sizes = sizes_of(w, preset)
    inputs = w.inputs(sizes, np.random.default_rng(3))
    sdfg = w.program.to_sdfg()
    sdfg.name = f"test_one_rank_views_{name}"
    distsdfg.lower(sdfg, "auto", nprocs=1, plan_options=w.symbols(sizes, inputs))
    return w, sizes, sdfg


def _rel(out, ref):
    return float(np.abs(out - ref).max() / np.abs(ref).max())


def test_megatron_runs_without_copies_fills_or_dead_maps_and_matches_numpy():
    from mpi4py import MPI
    w, sizes, sdfg = _lowered("megatron")
    steps = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, DistributedMemlet)]
    assert steps == [], [n.label for n in steps]          # scatters, reshape redists and fills all gone
    assert sdfg._distsdfg.rank0_only and any(s.kind == "redist" for s in sdfg._distsdfg.steps)
    views = [k for k, d in sdfg.arrays.items() if isinstance(d, dace.data.View) and k.startswith("__dsdfg_")]
    assert any(not k.endswith(("_mat", "_mat_0", "_mat_1")) for k in views), views
    labels = {n.label for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.MapEntry)}
    assert not any(lb.startswith("einsum_reset") for lb in labels), labels
    adds = [e for e, _ in sdfg.all_edges_recursive() if getattr(e.data, "data", None) and e.data.wcr is not None]
    assert adds == []                    # every product is assigned, not added into zeros
    fn = distsdfg.compile(sdfg, comm=MPI.COMM_WORLD)
    for seed in (0, 1):
        inputs = w.inputs(sizes, np.random.default_rng(seed))
        keep = {k: v.copy() for k, v in inputs.items()}
        assert _rel(fn(**inputs), w.reference(**keep)) <= 1e-5
        for k in inputs:                  # inputs read in place, never written
            np.testing.assert_array_equal(inputs[k], keep[k])


def test_spmv_nested_accumulation_without_atomics_matches_numpy():
    from mpi4py import MPI
    w, sizes, sdfg = _lowered("spmv")
    wcr = [e for e, _ in sdfg.all_edges_recursive() if getattr(e.data, "wcr", None) is not None]
    assert wcr and all(e.data.wcr_nonatomic for e in wcr)
    fn = distsdfg.compile(sdfg, comm=MPI.COMM_WORLD)
    for seed in (0, 1):
        inputs = w.inputs(sizes, np.random.default_rng(seed))
        assert _rel(fn(**inputs), w.reference(**inputs)) <= 1e-10


def test_two_ranks_keep_their_steps_and_atomics():
    """The one-rank passes stay off at P = 2 (other ranks' blocks, other threads' rows)."""
    w = get("megatron")
    sizes = sizes_of(w, "tiny")
    inputs = w.inputs(sizes, np.random.default_rng(0))
    sdfg = w.program.to_sdfg()
    distsdfg.lower(sdfg, "auto", nprocs=2, plan_options=w.symbols(sizes, inputs))
    kinds = {n.kind for n, _ in sdfg.all_nodes_recursive() if isinstance(n, DistributedMemlet)}
    assert {"scatter", "fill"} <= kinds


def test_matrix_chain_adds_the_second_product_into_the_first():
    from dace.libraries.blas import MatMul
    from mpi4py import MPI
    w, sizes, sdfg = _lowered("matrix_chain")
    prods = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, MatMul)]
    assert sorted(float(p.beta) for p in prods) == [0.0, 0.0, 1.0]
    assert not [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.MapEntry)]
    fn = distsdfg.compile(sdfg, comm=MPI.COMM_WORLD)
    for seed in (0, 1):
        inputs = w.inputs(sizes, np.random.default_rng(seed))
        assert _rel(fn(**inputs), w.reference(**inputs)) <= 1e-10
