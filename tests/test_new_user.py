"""The public API tried as a new user would (no compile): the schedule forms the documentation
shows, an invalid SDFG from DaCe's own frontend named as such, an array passed for a scalar."""
import json

import dace
import numpy as np
import pytest

import distsdfg
from distsdfg import errors as E
from distsdfg.testing.programs import get

MM = "_MatMult_.gemm_map"
N = dace.symbol("N")


def fresh():
    return get("matmul").sdfg()


@pytest.mark.parametrize("schedule", [
    {"gemm_map": (2, 1, 1)},                                   # a label, as the CLI and troubleshooting.md use
    {"*": (2, 1, 1)},                                          # every kernel whose main map has 3 parameters
    distsdfg.Schedule({MM: (2, 1, 1)}),                        # the constructor with a dict (was a bare ValueError)
], ids=["label", "star", "Schedule(dict)"])
def test_lower_takes_labels_star_and_schedule_of_a_dict(schedule):
    sdfg = fresh()
    distsdfg.lower(sdfg, schedule)
    assert sdfg._distsdfg.schedule.as_dict() == {MM: (2, 1, 1)}


def test_the_maps_of_distsdfg_maps_are_schedule_keys():
    """``distsdfg.maps`` returns MapInfo objects: used as dict keys they name their map (was UnknownMapError
    quoting the whole ``key[params=ranges]`` string)."""
    sdfg = fresh()
    sched = {m: (2, 1, 1) for m in distsdfg.maps(sdfg) if m.key == MM}
    distsdfg.lower(sdfg, sched)
    assert sdfg._distsdfg.schedule.as_dict() == {MM: (2, 1, 1)}
    assert distsdfg.Schedule.of(sched).as_dict() == {MM: (2, 1, 1)}


def test_lower_reads_a_json_schedule_file_as_the_cli_does(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(distsdfg.Schedule.of({MM: (1, 2, 1)}).to_json())
    sdfg = fresh()
    distsdfg.lower(sdfg, str(path))
    assert sdfg._distsdfg.schedule.as_dict() == {MM: (1, 2, 1)}
    path.write_text(json.dumps({"gemm_map": [2, 1, 1]}))        # a plain {label: grid} file
    sdfg = fresh()
    distsdfg.lower(sdfg, path)
    assert sdfg._distsdfg.schedule.as_dict() == {MM: (2, 1, 1)}
    with pytest.raises(E.ScheduleError, match="cannot read the schedule file .*missing.json"):
        distsdfg.lower(fresh(), str(tmp_path / "missing.json"))


def test_a_label_that_names_nothing_is_still_refused_by_name():
    with pytest.raises(E.UnknownMapError, match="`gemm_mapp`.*did you mean `_MatMult_.gemm_map`"):
        distsdfg.lower(fresh(), {"gemm_mapp": (2, 1, 1)})
    with pytest.raises(E.GridShapeError, match="3 parameters but its grid \\(2, 1\\)"):
        distsdfg.lower(fresh(), {"gemm_map": (2, 1)})


@dace.program
def durbin_flip(r: dace.float64[N]):
    y = np.empty_like(r)
    alpha = -r[0]
    beta = 1.0
    y[0] = -r[0]
    for k in range(1, N):
        beta *= 1.0 - alpha * alpha
        alpha = -(r[k] + np.dot(np.flip(r[:k]), y[:k])) / beta
        y[:k] += alpha * np.flip(y[:k])
        y[k] = alpha
    return y


def test_an_sdfg_that_daces_frontend_made_invalid_is_named_as_the_frontends():
    """Durbin with ``np.flip`` of a slice: DaCe's own validation rejects the SDFG its frontend made; the
    refusal says so with DaCe's message (was RewriteLimitError: "lowering ... gives an SDFG that DaCe
    rejects", which blamed distsdfg's rewrite)."""
    sdfg = durbin_flip.to_sdfg()
    with pytest.raises(dace.sdfg.InvalidSDFGError):
        durbin_flip.to_sdfg().validate()
    with pytest.raises(E.FrontendInvalidError) as info:
        distsdfg.lower(sdfg, {})
    msg = str(info.value)
    assert "DaCe's frontend produced an invalid SDFG" in msg and "before distsdfg changed anything" in msg
    assert "Ambiguous or invalid edge to/from a View access node" in msg      # DaCe's own words
    assert isinstance(info.value, E.RewriteLimitError)     # code that caught the old error still does


@dace.program
def scaled(x: dace.float32[N], a: dace.float32):
    return a * x


def test_an_array_for_a_scalar_argument_is_an_input_error():
    """DaCe raised a bare TypeError ("Passing an array to a scalar") from inside the call."""
    from mpi4py import MPI
    from distsdfg.runtime.program import DistributedProgram
    sdfg = scaled.to_sdfg()
    distsdfg.lower(sdfg, {"*": (1,)})
    prog = DistributedProgram(sdfg, None, MPI.COMM_SELF)       # argument checks only: nothing compiled
    x = np.ones(5, np.float32)
    kwargs = {"x": x, "a": np.array([2.0], np.float32)}
    _, error, _ = prog._checked(kwargs, {"x": x, "a": kwargs["a"]}, {}, 1)
    assert error[0] == "InputError" and "`a` is a float32 scalar" in error[1] and "a=a_array.item()" in error[1]
    _, error, _ = prog._checked({"x": x, "a": 2.0}, {"x": x}, {}, 1)
    assert error is None
    zero_d = np.array(2.0, np.float32)                          # DaCe takes a 0-d array as a scalar
    _, error, _ = prog._checked({"x": x, "a": zero_d}, {"x": x, "a": zero_d}, {}, 1)
    assert error is None


def test_comm_report_of_a_compiled_program_reports_on_its_communicator():
    """``comm_report(fn)`` after ``fn = compile(sdfg)`` was an AttributeError ('symbols')."""
    from mpi4py import MPI
    from distsdfg.runtime.program import DistributedProgram
    sdfg = fresh()
    distsdfg.lower(sdfg, {MM: (2, 1, 1)})
    prog = DistributedProgram(sdfg, None, MPI.COMM_SELF)       # what compile returns, without the build
    sizes = dict(M=8, N=6, K=5)
    assert distsdfg.comm_report(prog, nprocs=2, **sizes) == distsdfg.comm_report(sdfg, nprocs=2, **sizes)
    with pytest.raises(E.CommunicatorSizeError, match="needs 2 ranks"):
        distsdfg.comm_report(prog, **sizes)                     # its communicator has one rank
    with pytest.raises(E.NotAnSDFGError, match="DaceProgram"):
        distsdfg.comm_report(get("matmul").prog, **sizes)


def test_run_refuses_a_grid_larger_than_the_ranks_before_compiling(tmp_path, capsys):
    from distsdfg.launch.cli import main
    (tmp_path / "one.py").write_text("import dace\n\n@dace.program\ndef f(A: dace.float64[8]):\n    A[:] = A + 1\n")
    with pytest.raises(SystemExit) as info:
        main(["run", f"{tmp_path}/one.py:f", "-n", "1", "--schedule", "*=2", "--compile-only"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "CommunicatorSizeError" in err and "needs 2 ranks but the run has 1" in err and "-n 2" in err
    assert "compiling" not in err and "reusing the build" not in err     # refused before any build


def test_cli_refusals_spell_the_fix_as_command_line_options(tmp_path, capsys):
    from distsdfg.launch.cli import main
    (tmp_path / "one.py").write_text("import dace\nN = dace.symbol('N')\n\n@dace.program\n"
                                     "def f(A: dace.float64[N]):\n    A[:] = A + 1\n")
    for argv, words in [(["--schedule", "*=2", "--sizes", "N=8", "-n", "1"], ["needs 2 ranks", "-n P"]),
                        (["--schedule", "*=2"], ["size symbol `N`", "--sizes NAME=VALUE"])]:
        with pytest.raises(SystemExit):
            main(["plan", f"{tmp_path}/one.py:f"] + argv)
        err = capsys.readouterr().err
        assert all(w in err for w in words), err


@dace.program
def scaled_loop(z: dace.complex64[N], w: dace.complex64, T: dace.int32):
    for t in range(T):
        z[:] = z * w


def test_run_draws_the_same_random_inputs_for_the_lowered_program_and_its_reference():
    """``distsdfg run --check`` draws the run's inputs from the lowered SDFG and the reference's from the
    original; a boxed complex scalar moved among DaCe's arrays and took another draw (T differed: the
    check failed on a correct run)."""
    from distsdfg.launch.runner import random_inputs
    original = scaled_loop.to_sdfg()
    lowered = scaled_loop.to_sdfg()
    distsdfg.lower(lowered, {"*": (2,)})
    assert lowered._distsdfg.boxed == ("w",)
    a, b = random_inputs(original, {"N": 5}, seed=3), random_inputs(lowered, {"N": 5}, seed=3)
    assert sorted(a) == sorted(b) == ["T", "w", "z"]
    assert a["T"] == b["T"] and np.array_equal(a["z"], b["z"]) and np.asarray(b["w"]).ravel()[0] == a["w"]



def test_schedule_cost_and_explain_take_labels_as_lower_does():
    sizes = dict(M=8, N=8, K=8)
    by_key = distsdfg.schedule_cost(fresh(), {MM: (2, 1, 1)}, **sizes)
    assert distsdfg.schedule_cost(fresh(), {"gemm_map": (2, 1, 1)}, **sizes) == by_key
    assert "(2, 1, 1)" in str(distsdfg.explain(fresh(), {"gemm_map": (2, 1, 1)}, **sizes))
    with pytest.raises(E.UnknownMapError, match="`nope`"):
        distsdfg.schedule_cost(fresh(), {"nope": (2,)}, **sizes)
