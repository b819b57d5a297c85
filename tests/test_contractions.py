"""Contractions left as accumulating maps become one BLAS matrix product (``optimize.contractions_to_products``,
``distsdfg/dace_compat/einsum.py``).

Unit tier (symbolic, nothing compiled): which maps are contractions and how their indices group, which
operands are copied, the communication steps and bytes unchanged. One single-process compile checks
five einsum forms against NumPy. The 4-rank runs of the rewritten attention programs (Megatron, the
thesis' MHSA, the projection) are test_mpi's and test_attention's cases.
"""
import warnings

import dace
import numpy as np
from dace.sdfg import nodes

import distsdfg
from distsdfg import dace_compat as dc
from distsdfg.lowering import optimize
from distsdfg.dace_compat.einsum import choose_layout, contraction_of
from distsdfg.mpi import DistributedMemlet
from distsdfg.testing.programs import MEGATRON_SCHEDULE, get


@dace.program
def _forms(x: dace.float64[2, 5, 6], W: dace.float64[6, 3, 4], v: dace.float64[2, 3, 5, 4],
           WO: dace.float64[3, 4, 6], q: dace.float64[2, 3, 5, 6], U: dace.float64[3, 6, 7]):
    proj = np.einsum('bik,khj->bhij', x, W)             # rows (b, i), columns (h, j): a transposing add
    projT = np.einsum('bik,khj->bhji', x, W)            # the same product, output transposed
    heads = np.einsum('bhse,hej->bsj', v, WO)           # two contraction indices; v copied as [b, s, h, e]
    mixed = np.einsum('bhik,hkj->bhij', q, U)           # batch h, rows (b, i): a batched product
    swap = np.einsum('bhik,hkj->jhbi', q, U)            # the same, columns first in the output
    return proj, projT, heads, mixed, swap


def _reference(x, W, v, WO, q, U):
    return (np.einsum('bik,khj->bhij', x, W), np.einsum('bik,khj->bhji', x, W), np.einsum('bhse,hej->bsj', v, WO),
            np.einsum('bhik,hkj->bhij', q, U), np.einsum('bhik,hkj->jhbi', q, U))


def _inputs(rng):
    f = lambda *shape: rng.random(shape) - 0.5      # noqa: E731
    return dict(x=f(2, 5, 6), W=f(6, 3, 4), v=f(2, 3, 5, 4), WO=f(3, 4, 6), q=f(2, 3, 5, 6), U=f(3, 6, 7))


@dace.program
def _not_products(a: dace.float64[7, 8], r: dace.float64[8], x: dace.float64[4, 5, 6], y: dace.float64[5, 3]):
    r[:] = 0.0
    for k, i in dace.map[0:7, 0:8]:                 # one operand: a reduction
        r[i] += a[k, i]
    return np.einsum('ijk,jl->il', x, y)            # k indexes x only: a sum over it, no product


def _top_accumulations(sdfg):
    return [(st, n) for st in dc.all_states(sdfg) for n in dc.top_level_nodes(st)
            if isinstance(n, nodes.MapEntry) and any(e.data.wcr is not None for e in st.in_edges(st.exit_node(n)))]


def _contractions(sdfg):
    """Output array -> contraction, for every accumulating map that is one."""
    return {st.memlet_path(st.in_edges(st.exit_node(n))[0])[-1].dst.data: c
            for st, n in _top_accumulations(sdfg) if (c := contraction_of(sdfg, st, n)) is not None}


def _simplified(prog):
    sdfg = prog.to_sdfg()
    dc.simplify(sdfg)
    return sdfg


def test_einsums_without_a_gemm_form_are_read_as_contractions():
    sdfg = _simplified(_forms)
    found = sorted(((c.batch, c.rows, c.cols, c.inner) for c in _contractions(sdfg).values()), key=str)
    assert found == sorted([([], ["b", "i"], ["h", "j"], ["k"]),         # proj and projT
                            ([], ["b", "i"], ["h", "j"], ["k"]),
                            ([], ["b", "s"], ["j"], ["h", "e"]),         # heads
                            (["h"], ["b", "i"], ["j"], ["k"]),           # mixed and swap
                            (["h"], ["b", "i"], ["j"], ["k"])], key=str)


def test_other_accumulations_are_not_contractions():
    sdfg = _simplified(_not_products)
    tops = _top_accumulations(sdfg)
    assert len(tops) == 2
    assert all(contraction_of(sdfg, st, n) is None for st, n in tops)
    assert optimize.contractions_to_products(sdfg) == 0


def test_layout_copies_only_operands_that_are_no_matrix_yet():
    sdfg = _simplified(_forms)
    layouts = {}
    for st, n in _top_accumulations(sdfg):
        c = contraction_of(sdfg, st, n)
        lay = choose_layout(sdfg, c)
        out = st.memlet_path(st.in_edges(st.exit_node(n))[0])[-1].dst.data
        layouts.setdefault((lay.left.data, lay.right.data, lay.copy_left, lay.copy_right), []).append(out)
    # x as (b*i, k) and W as (k, h*j) are used in place; v is copied to [b, s, h, e]; q to [h, b, i, k]
    assert sorted(layouts) == sorted([("x", "W", False, False), ("v", "WO", True, False), ("q", "U", True, False)])
    assert len(layouts["x", "W", False, False]) == 2 and len(layouts["q", "U", True, False]) == 2


def test_rewrite_leaves_no_contraction_map_and_adds_one_product_each():
    sdfg = _simplified(_forms)
    before = len([n for n, _ in sdfg.all_nodes_recursive() if type(n).__name__ == "MatMul"])
    assert optimize.contractions_to_products(sdfg) == 5
    assert not _contractions(sdfg)
    products = [n for n, _ in sdfg.all_nodes_recursive() if type(n).__name__ == "MatMul"]
    assert len(products) == before + 5
    # the adds into the outputs cover every index: no atomics, and the transposing ones are tiled
    adds = _top_accumulations(sdfg)
    assert len(adds) == 5
    assert all(e.data.wcr_nonatomic for st, n in adds for e in st.in_edges(st.exit_node(n)) if e.data.wcr)
    assert optimize.tile_transposes(sdfg) >= 1
    sdfg.validate()


def test_smaller_than_the_threshold_stays_a_map():
    sdfg = _simplified(_forms)
    assert optimize.contractions_to_products(sdfg, min_product=10**6) == 0
    assert len(_contractions(sdfg)) == 5


def _lowered(name, schedule, rewrite, monkeypatch):
    warnings.simplefilter("ignore")
    if not rewrite:
        monkeypatch.setattr(optimize, "contractions_to_products", lambda sdfg, min_product=None: 0)
    sdfg = get(name).sdfg()
    distsdfg.lower(sdfg, schedule)
    monkeypatch.undo()
    return sdfg


def _step_buffers(sdfg):
    """Each communication node's step and the buffers it reads and writes."""
    out = []
    for st in sdfg.states():
        for n in st.nodes():
            if isinstance(n, DistributedMemlet):
                out.append((n.step, sorted(str(e.data.data) for e in st.all_edges(n) if not e.data.is_empty())))
    return sorted(out)


def test_rewrite_keeps_every_step_and_byte(monkeypatch):
    """Megatron on 4 ranks (batch and heads split: blocks with offsets); the thesis' MHSA is checked
    by test_attention's byte counts, which the rewritten programs meet."""
    name, schedule = "megatron", MEGATRON_SCHEDULE
    plain = _lowered(name, schedule, False, monkeypatch)
    ours = _lowered(name, schedule, True, monkeypatch)
    assert _contractions(plain) and not _contractions(ours)
    assert [(s.kind, s.array, s.boxes, s.local_shape) for s in ours._distsdfg.steps] == \
        [(s.kind, s.array, s.boxes, s.local_shape) for s in plain._distsdfg.steps]
    assert _step_buffers(ours) == _step_buffers(plain)
    sizes = dict(get(name).symbols)
    assert distsdfg.comm_report(ours, **sizes) == distsdfg.comm_report(plain, **sizes)


def test_compiled_contractions_match_numpy_on_one_rank():
    """One compile in this process (one rank, no mpiexec): every form above, float64, 1e-10."""
    from mpi4py import MPI
    warnings.simplefilter("ignore")
    sdfg = _forms.to_sdfg()
    sdfg.name = "distsdfg_test_contractions"
    distsdfg.lower(sdfg, "auto", nprocs=1)
    assert not _contractions(sdfg)
    fn = distsdfg.compile(sdfg, comm=MPI.COMM_WORLD)
    args = _inputs(np.random.default_rng(3))
    for got, want in zip(fn(**args), _reference(**args)):
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-10 * np.abs(want).max()
