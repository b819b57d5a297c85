"""Placements per grid axis (Shard / Replicate / Partial, seed 003's compact strings) read off the
blocks ranks hold, and the placement change each CommPlan makes (no compile, no MPI)."""
import numpy as np
import pytest

import distsdfg
from distsdfg.values.notation import (Irregular, Partial, Replicate, Shard, format_placements, parse_placements,
                                      placements_of_blocks)
from distsdfg.solver.redistribute import plan_redistribution
from distsdfg.testing.simulate import grid_blocks

SHAPE = (12, 8)


@pytest.mark.parametrize("text,value", [
    ("S0R", (Shard(0), Replicate())),
    ("RS1", (Replicate(), Shard(1))),
    ("P+S0", (Partial("sum"), Shard(0))),
    ("PmaxR", (Partial("max"), Replicate())),
    ("P*", (Partial("prod"),)),
    ("Pmin", (Partial("min"),)),
    ("S{0,1}RR", (Shard((0, 1)), Replicate(), Replicate())),
    ("X", (Irregular(),)),
    ("-", ()),
])
def test_strings_round_trip(text, value):
    assert parse_placements(text) == value
    assert format_placements(value) == text


def test_bad_string_names_what_to_write():
    with pytest.raises(ValueError, match="S<dim>, R, P\\+"):
        parse_placements("S0Q")


@pytest.mark.parametrize("grid,dims,op,want", [
    ((4, 1), [0, None], None, "S0R"),           # row blocks over the first axis
    ((1, 4), [None, 1], None, "RS1"),           # column blocks over the second axis
    ((2, 2), [0, 1], None, "S0S1"),             # tiles
    ((2, 2), [1, 0], None, "S1S0"),             # tiles, axes swapped
    ((2, 2), [0, None], None, "S0R"),           # row halves, each held by two ranks
    ((2, 2), [0, None], "sum", "S0P+"),         # ... as partial sums over the second axis
    ((4,), [None, None], "max", "Pmax"),
])
def test_placements_of_grid_blocks(grid, dims, op, want):
    blocks = grid_blocks(SHAPE, grid, dims=dims)
    assert format_placements(placements_of_blocks(grid, blocks, op)) == want


def test_merged_and_irregular_blocks():
    # One axis of 4 splits a (2, 2, 5) array over its first two dimensions (batch x heads).
    merged = [((b, h, 0), (1, 1, 5)) for b in range(2) for h in range(2)]
    assert format_placements(placements_of_blocks((4,), merged)) == "S{0,1}"
    # Blocks out of order (a permutation of the row blocks) or overlapping are no split.
    rows = grid_blocks(SHAPE, (4, 1))
    assert format_placements(placements_of_blocks((4,), rows[::-1])) == "X"
    assert format_placements(placements_of_blocks((2,), [((0, 0), (8, 8)), ((4, 0), (8, 8))])) == "X"
    # Ranks past the grid (idle) do not count.
    assert format_placements(placements_of_blocks((2,), rows[:2] + [None, None])) == "S0"


def test_plan_without_grids_has_no_placements():
    rows, cols = grid_blocks(SHAPE, (4, 1)), grid_blocks(SHAPE, (1, 4))
    plan = plan_redistribution("X", rows, cols)
    assert plan.placements is None and plan.change == ""
    assert str(plan).startswith("X: Alltoallw")


@pytest.fixture(scope="module")
def mlp_plans():
    import dace
    NB, NI, NH, NO = (dace.symbol(s) for s in ("NB", "NI", "NH", "NO"))

    @dace.program
    def notation_mlp(x: dace.float64[NB, NI], w1: dace.float64[NI, NH], w2: dace.float64[NH, NO]):
        h = np.maximum(x @ w1, 0.0)
        return h @ w2

    sdfg = notation_mlp.to_sdfg()
    keys = [m.key for m in distsdfg.maps(sdfg)]
    products = [k for k in keys if k.endswith("gemm_map")]
    # First product by row and column tiles; the second splits rows and its reduction dimension.
    grids = {products[0]: (2, 2, 1), products[1]: (2, 1, 2)}
    grids.update({k: (2, 2) for k in keys if "gemm" not in k})
    distsdfg.lower(sdfg, grids)
    sizes = dict(NB=16, NI=8, NH=12, NO=8)
    return keys, grids, distsdfg.comm_plans(sdfg, nprocs=4, **sizes)


def test_comm_plans_say_which_placement_change_they_make(mlp_plans):
    keys, grids, plans = mlp_plans
    assert plans, (keys, grids)
    for p in plans:
        src, dst = p.placements
        assert len(src) == len(p.src_grid) and len(dst) == len(p.dst_grid)
        assert p.change == f"{format_placements(src)} -> {format_placements(dst)}"
        assert f"({p.change})" in str(p)
        assert distsdfg.CommPlan.from_json(p.to_json()) == p
    # The second product splits its reduction dimension over the last grid axis: its operand h is
    # sharded by rows over the first axis and by columns over the last.
    assert any(p.change.endswith("-> S0RS1") for p in plans), [str(p) for p in plans]
