"""The picture of a plan (``distsdfg plan --plot``): its rows as data (symbolic, nothing compiled),
and the picture itself where matplotlib is installed."""
import pytest

import distsdfg
from distsdfg.launch.plan_plot import draw_plan, plan_rows
from distsdfg.testing.programs import get

SIZES = dict(M=256, N=128, K=192)


def _matmul(grid):
    sdfg = get("matmul").sdfg()
    distsdfg.lower(sdfg, {"_MatMult_.gemm_map": grid})
    return sdfg


def test_rows_hold_each_ranks_block_and_the_bytes_of_comm_report():
    sdfg = _matmul((2, 1, 2))
    rows = plan_rows(sdfg, nprocs=4, **SIZES)
    assert [(r.label, r.grid) for r in rows] == [("_MatMult_.gemm_map", (2, 1, 2))]
    arrays = {a.array: a for a in rows[0].arrays}
    A = arrays["A"]
    assert A.direction == "in" and A.shape == (256, 192) and not A.partial
    # rank (i, k) of the grid holds rows i and columns k of A
    assert A.blocks == (((0, 0), (128, 96)), ((0, 96), (128, 96)), ((128, 0), (128, 96)), ((128, 96), (128, 96)))
    out = [a for a in rows[0].arrays if a.direction == "out"]
    assert len(out) == 1 and out[0].partial and "Reduce" in out[0].how    # K split: partial sums combined
    report = distsdfg.comm_report(sdfg, nprocs=4, **SIZES)
    assert sum(a.nbytes for a in rows[0].arrays) == sum(sum(c.sent) for c in report)


def test_a_source_line_names_each_kernel():
    rows = plan_rows(_matmul((2, 2, 1)), nprocs=4, **SIZES)
    assert rows[0].source.endswith("return A @ B")


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_the_picture_is_written(tmp_path, suffix):
    pytest.importorskip("matplotlib")
    path = tmp_path / f"plan.{suffix}"
    draw_plan(plan_rows(_matmul((2, 2, 1)), nprocs=4, **SIZES), str(path), nprocs=4, title="matmul")
    head = path.read_bytes()[:200]
    assert head.startswith(b"\x89PNG") if suffix == "png" else b"<svg" in path.read_bytes()
