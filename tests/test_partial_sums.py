"""A linear kernel of partial sums runs on them: one reduction for the sum.

``analysis.linearity`` (which kernels are linear in which inputs) and ``lowering.replicate``
(when the lowering runs such a kernel, split or not, on the ranks' own partial sums), checked
through ``comm_report``: no compile, no MPI (docs/torch.md, "Kernels on every rank: replicated
kernels and partial sums"). The values of ``sum_of_products`` are checked
under ``mpiexec`` by tests/test_mpi.py.
"""
import dace
import numpy as np
import pytest

import distsdfg
from distsdfg.analysis.kernels import find_kernels
from distsdfg.analysis.linearity import kernel_linear, tasklet_linear

# Both contractions split two ways, the element-wise kernels by rows.
SPLIT_K = {"_MatMult_.gemm_map": (1, 1, 2), "_MatMult__2.gemm_map": (1, 1, 2), "_Mult__map": (2, 1),
           "_Sub__map": (2, 1), "_Add__map": (2, 1)}
ROWS, COLS = 48, 40


@pytest.mark.parametrize("code,linear,expected", [
    ("a + b", "ab", True), ("a - 0.5 * b", "ab", True), ("-(a / 4.0) + b * s", "ab", True),
    ("s * (a + b)", "ab", True), ("a", "a", True), ("2 * a", "a", True),
    ("a if s > 0 else b", "ab", True),       # a choice between linear terms by a fixed condition
    ("a + c", "a", False),                   # affine: c would be added once per rank
    ("a + 1.0", "a", False), ("a * b", "ab", False), ("a / b", "ab", False), ("exp(a)", "a", False),
    ("a ** 2", "a", False), ("a + True", "a", False), ("a if a > 0 else b", "ab", False),
    ("s * exp(t)", "a", False), ("1.0", "a", False),   # no linear term: a constant is added per rank
])
def test_linearity_of_an_expression(code, linear, expected):
    assert tasklet_linear(f"_o = {code}", set(linear), {"_o"}) is expected


def _kernels(sdfg):
    return {k.label: k for k in find_kernels(sdfg) if k.kind == "map"}


def test_linearity_of_the_element_wise_kernels(programs):
    ks = _kernels(programs.get("sum_of_products").sdfg())
    reads = {label: sorted(a for a, acc in k.maps[0].accesses.items() if acc.reads) for label, k in ks.items()}
    assert kernel_linear(ks["_Sub__map"], set(reads["_Sub__map"]))             # x - y, two partial inputs
    assert kernel_linear(ks["_Mult__map"], set(reads["_Mult__map"]))           # 0.5 * x
    summed, d = sorted(reads["_Add__map"], key=lambda a: a == "D")
    assert not kernel_linear(ks["_Add__map"], {summed})                        # x + D: affine in x
    assert kernel_linear(ks["_Add__map"], {summed, d})


def _report(sdfg, nprocs, **kw):
    return [(s.collective, s.array, sum(s.sent)) for s in distsdfg.comm_report(sdfg, nprocs=nprocs, **kw)]


@pytest.mark.parametrize("placement", [None, "distributed"])
def test_two_products_added_are_reduced_once(programs, placement):
    """``(A1 @ B1 - 0.5 * (A2 @ B2)) + D``: the scaling and the difference run on every rank's own
    partial products, and their result is reduce-scattered once for ``+ D`` (affine: ``D`` is not
    a partial sum, so the reduction happens before it), not each product on its own."""
    sdfg = programs.get("sum_of_products").sdfg()
    distsdfg.lower(sdfg, SPLIT_K, placement=placement)
    steps = _report(sdfg, 2)
    reductions = [s for s in steps if s[0] in ("Reduce_scatter", "Reduce", "Allreduce")]
    assert len(reductions) == 1 and reductions[0][0] == "Reduce_scatter", steps
    assert reductions[0][2] == ROWS * COLS * 8          # each rank sends the other's half
    if placement is None:
        # A1's and A2's column blocks, B1's and B2's row blocks and D's rows to rank 1, the result back
        inputs = (48 * 32 + 32 * 40 + 48 * 16 + 16 * 40 + 24 * 40) * 8
        assert sum(s[2] for s in steps) == inputs + ROWS * COLS * 8 + 24 * 40 * 8, steps


def test_four_ranks_one_reduction(programs):
    sdfg = programs.get("sum_of_products").sdfg()
    distsdfg.lower(sdfg, {k: tuple(4 if g == 2 else g for g in v) for k, v in SPLIT_K.items()})
    steps = _report(sdfg, 4)
    scattered = [s for s in steps if s[0] == "Reduce_scatter"]
    assert len(scattered) == 1 and scattered[0][2] == 3 * ROWS * COLS * 8, steps
    assert scattered[0][1] not in ("A1", "A2", "B1", "B2", "D"), steps      # the partial sums' temporary
    assert not any(s[0] in ("Reduce", "Allreduce") for s in steps), steps


def test_unsplit_consumer_reduces_the_sum_once_to_rank_0(programs):
    sdfg = programs.get("sum_of_products").sdfg()
    distsdfg.lower(sdfg, {k: v for k, v in SPLIT_K.items() if "MatMult" in k})
    steps = _report(sdfg, 2)
    assert [s[0] for s in steps if s[0] in ("Reduce_scatter", "Reduce", "Allreduce")] == ["Reduce"], steps


@dace.program
def scaled_then_exp(A: dace.float64[32, 48], B: dace.float64[48, 24]):
    h = A @ B
    s = h * 2.0
    return s + np.exp(h)


def test_partial_sum_read_by_a_non_linear_kernel_is_reduced_first():
    """``h`` is scaled (linear) and then exponentiated: ``exp`` needs ``h`` reduced anyway, so the
    scaling reads the reduced ``h`` too (one reduction in all, not one of ``h`` and one of ``s``)."""
    sdfg = scaled_then_exp.to_sdfg()
    keys = [m.key for m in distsdfg.maps(sdfg)]
    sched = {k: ((1, 1, 2) if k.endswith("gemm_map") else (2, 1)) for k in keys if "init" not in k}
    distsdfg.lower(sdfg, sched)
    steps = _report(sdfg, 2)
    assert [(s[0], s[1]) for s in steps if s[0] in ("Reduce_scatter", "Reduce", "Allreduce")] == [
        ("Reduce_scatter", "h")], steps
