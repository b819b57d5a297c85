"""One rank (``lower(sdfg, "auto", nprocs=1)``): whole arrays are used in place, no copy steps.

Unit tier (lowering only) plus one compile run in this process on mpi4py's one-rank COMM_WORLD
(no mpiexec). benchmarks/rank_local.py checks elementwise, softmax and rowmax against NumPy at P=1.
"""
import dace
import numpy as np
import pytest

import distsdfg
from distsdfg import dace_compat as dc
from distsdfg.mpi import DistributedMemlet

N = dace.symbol("N")
B, S = dace.symbol("B"), dace.symbol("S")


@dace.program
def chain(x: dace.float64[N], y: dace.float64[N]):
    return np.exp((x * y + 2) * -0.5) * x - y


@dace.program
def rowmax(x: dace.float32[B, S]):
    return np.maximum.reduce(x, axis=-1, keepdims=True)


@dace.program
def inplace(x: dace.float64[N]):
    x[:] = x * 2.0


def _steps(sdfg):
    return [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, DistributedMemlet)]


def _lower(prog, nprocs, **sizes):
    sdfg = prog.to_sdfg()
    distsdfg.lower(sdfg, "auto", nprocs=nprocs, plan_options=sizes)
    return sdfg


def test_one_rank_elementwise_reads_and_writes_the_arguments():
    sdfg = _lower(chain, 1, N=4096)
    low = sdfg._distsdfg
    assert low.rank0_only and len(low.steps) == 3     # the plan keeps its steps (comm_report)
    assert _steps(sdfg) == []
    used = {n.data for st in sdfg.all_states() for n in st.data_nodes()}
    assert {"x", "y", "__return"} <= used
    assert not any(name.startswith("__dsdfg_") and name not in ("__dsdfg_plan", "__dsdfg_comm")
                   for name in sdfg.arrays)
    assert all(s.bytes == 0 for s in distsdfg.comm_report(sdfg, nprocs=4, N=4096))


def test_one_rank_reduction_writes_the_result_view_and_vectorizes():
    sdfg = _lower(rowmax, 1, B=64, S=128)
    assert _steps(sdfg) == [] and sdfg._distsdfg.rank0_only
    from dace.libraries.standard import Reduce
    impls = [n.implementation for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Reduce)]
    assert impls == [dc.SEQ_REDUCE]


def test_written_argument_keeps_its_copies():
    sdfg = _lower(inplace, 1, N=4096)
    assert {n.kind for n in _steps(sdfg)} == {"scatter", "gather"}


def test_two_ranks_keep_every_step():
    sdfg = _lower(chain, 2, N=4096)
    assert not sdfg._distsdfg.rank0_only and len(_steps(sdfg)) == 3


def test_sequential_reduce_expansion_reads_the_accumulator_by_value():
    sdfg = rowmax.to_sdfg()
    red = next(n for n, _ in sdfg.all_nodes_recursive() if type(n).__name__ == "Reduce")
    red.implementation = dc.sequential_reduce()
    state = next(st for st in sdfg.states() if red in st.nodes())
    red.expand(sdfg, state)
    inner = next(n.sdfg for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.NestedSDFG)
                 and "acc" in n.sdfg.arrays)
    st = inner.states()[0]
    outs = [e for e in st.edges() if isinstance(e.dst, dace.nodes.MapExit) and e.data.wcr is None
            and e.data.data == "_out"]
    assert outs and all(isinstance(e.src, dace.nodes.Tasklet) for e in outs)
    sdfg.validate()


@pytest.mark.parametrize("prog,sizes", [(chain, dict(N=8)), (rowmax, dict(B=4, S=8))])
def test_optimize_off_keeps_the_copies(prog, sizes):
    sdfg = prog.to_sdfg()
    distsdfg.lower(sdfg, "auto", nprocs=1, plan_options=sizes, optimize=False)
    assert not sdfg._distsdfg.rank0_only and _steps(sdfg)


def test_one_rank_compiled_matches_numpy_and_results_are_not_reused():
    """One compile, in this process (a one-rank COMM_WORLD, no mpiexec)."""
    from mpi4py import MPI
    sdfg = _lower(rowmax, 1, B=16, S=64)
    fn = distsdfg.compile(sdfg, comm=MPI.COMM_WORLD)
    rng = np.random.default_rng(1)
    x1 = (rng.random((16, 64)) - 0.5).astype(np.float32)
    x2 = (rng.random((16, 64)) - 0.5).astype(np.float32)
    keep1, keep2 = x1.copy(), x2.copy()
    r1 = fn(x=x1)
    r2 = fn(x=x2)
    np.testing.assert_array_equal(r1, np.max(keep1, axis=-1, keepdims=True))
    np.testing.assert_array_equal(r2, np.max(keep2, axis=-1, keepdims=True))
    np.testing.assert_array_equal(x1, keep1)     # the argument used in place is only read
    assert r1 is not r2
