"""Schedule value type: JSON round trip, readable str, validation with fixes in the message."""
import pytest

import distsdfg
from distsdfg import Schedule
from distsdfg.errors import GridShapeError, ScheduleError, UnknownMapError


def test_json_round_trip_and_str():
    s = Schedule.of({"_MatMult_.gemm_map": (2, 2, 1), "_Add__map": [4]})
    assert Schedule.from_json(s.to_json()) == s
    assert str(s) == "{_Add__map -> (4,), _MatMult_.gemm_map -> (2, 2, 1)}"
    assert s["_Add__map"] == (4,)
    assert s.nprocs == 4
    assert hash(s) == hash(Schedule.from_json(s.to_json()))


@pytest.mark.parametrize("grid", [(0, 1), (-2,), (2.5,), ()])
def test_non_positive_or_bad_dims(grid):
    with pytest.raises(GridShapeError):
        Schedule.of({"m": grid})


def test_unknown_key_suggests_closest():
    s = Schedule.of({"gemm_mpa": (2, 1, 1)})
    with pytest.raises(UnknownMapError, match="did you mean `_MatMult_.gemm_map`"):
        s.validate_for({"_MatMult_.gemm_map": 3, "_MatMult_.gemm_init_map": 2})


def test_wrong_length():
    with pytest.raises(GridShapeError, match="3 parameters but its grid"):
        Schedule.of({"g": (2, 2)}).validate_for({"g": 3})


def test_schedule_for_other_sdfg():
    s = Schedule.of({"g": (2,)}, sdfg="other")
    with pytest.raises(ScheduleError, match="made for SDFG `other`"):
        s.validate_for({"g": 1}, sdfg_name="mine")


def test_lower_rejects_bad_schedules(programs):
    sdfg = programs.get("matmul").sdfg()
    with pytest.raises(UnknownMapError, match="gemm_map"):
        distsdfg.lower(sdfg, {"gemm_mapp": (2, 2, 1)})
    sdfg = programs.get("matmul").sdfg()
    with pytest.raises(GridShapeError):
        distsdfg.lower(sdfg, {"_MatMult_.gemm_map": (2, 2)})
    assert issubclass(ScheduleError, distsdfg.DistributedLoweringError)


def test_a_library_nodes_helper_map_follows_its_main_map(programs):
    # gemm_init_map only zeroes the product's output: the one grid that fits is the one gemm_map
    # implies, whatever the schedule names (a per-map schedule that splits gemm_map's M but not the
    # init map's, or another split): it takes that one instead of refusing the schedule.
    derived = programs.get("matmul").sdfg()
    distsdfg.lower(derived, {"_MatMult_.gemm_map": (2, 2, 1)})
    for helper in [(4, 1), (1, 1), (1, 2)]:
        sdfg = programs.get("matmul").sdfg()
        distsdfg.lower(sdfg, {"_MatMult_.gemm_map": (2, 2, 1), "_MatMult_.gemm_init_map": helper})
        (kg,) = [k for k in sdfg._distsdfg.kernels if "_MatMult_.gemm_map" in k.keys]
        assert kg.grid == (2, 2, 1)
        assert [str(s) for s in sdfg._distsdfg.steps] == [str(s) for s in derived._distsdfg.steps]


def test_string_schedules(programs):
    sdfg = programs.get("add3d").sdfg()
    with pytest.raises(distsdfg.DistributedLoweringError, match="'auto'"):
        distsdfg.lower(sdfg, "fastest", nprocs=4)
    with pytest.raises(distsdfg.DistributedLoweringError, match="nprocs"):
        distsdfg.lower(sdfg, "auto")
    distsdfg.lower(sdfg, "auto", nprocs=4, plan_options={"cost_model": "bytes"})
    # (1, 4, 1), (1, 2, 2) and (1, 1, 4) move equal bytes; only (1, 4, 1) scatters y (8 x 16) in contiguous rows
    assert [g for _, g in sdfg._distsdfg.schedule.grids] == [(1, 4, 1)]
    # The time model (the default) may move more bytes in fewer, cheaper steps: never slower under it.
    sdfg = programs.get("add3d").sdfg()
    distsdfg.lower(sdfg, "auto", nprocs=4)
    (key, grid), = sdfg._distsdfg.schedule.grids
    assert (distsdfg.schedule_cost(programs.get("add3d").sdfg(), {key: grid}, "time")
            <= distsdfg.schedule_cost(programs.get("add3d").sdfg(), {key: (1, 4, 1)}, "time"))


def test_schedule_by_label(programs):
    sd = programs.get("softmax").sdfg()
    s = distsdfg.schedule_by_label(sd, {"reduce_output": (2, 1, 1, 1), "_Sub__map": (2, 1, 1, 1), "nope": (2,)})
    assert s == {"Reduce.reduce_output": (2, 1, 1, 1), "Reduce_2.reduce_output": (2, 1, 1, 1),
                 "_Sub__map": (2, 1, 1, 1), "nope": (2,)}
    mm = programs.get("matmul").sdfg()
    assert distsdfg.schedule_by_label(mm, {"gemm_map": (2, 2, 1)}) == {"_MatMult_.gemm_map": (2, 2, 1)}
    sp = programs.get("spmv").sdfg()
    assert list(distsdfg.schedule_by_label(sp, {"spmv": (4,)}, fuzzy=True).values()) == [(4,)]
