"""Many real ranks: one mpiexec job of 32 ranks on this 2-core machine (oversubscribed,
tiny sizes) runs a matrix product, a Jacobi stencil in a time loop and a two-layer MLP, each with
the schedule the planner chooses for 32 ranks. Each must match NumPy (1e-10, float64), move exactly
the bytes ``comm_report`` predicts on every rank (PMPI counter), and really use the 32 ranks."""
import math

import pytest

from distsdfg.testing.mpirun import bytes_mismatch, launch_cases

RANKS = 32
CASES = ["matmul:auto", "jacobi1d:auto", "mlp:auto"]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return launch_cases(RANKS, CASES, tmp_path_factory.mktemp("many"), timeout=1500)


@pytest.mark.parametrize("case", CASES)
def test_32_ranks_match_numpy_with_the_predicted_bytes(results, case):
    r = results[case]
    assert "error" not in r, r.get("trace", r.get("error"))
    assert r["shape_ok"]
    assert r["rel_err"] <= 1e-10, r["rel_err"]
    assert bytes_mismatch(r) is None, bytes_mismatch(r)
    # The planner's grids use all 32 ranks (no kernel is left on fewer than all of them).
    grids = r["schedule"].values()
    assert max(math.prod(g) for g in grids) == RANKS, r["schedule"]
