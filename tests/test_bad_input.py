"""Bad input to the public API: each class is refused by a DistributedLoweringError subclass whose
message names the offending item and a fix (the catalogue in docs/troubleshooting.md).

Mostly lowering and planning only; the call-time checks share one tiny program compiled once
(a communicator of one rank), the command line runs in this process except for one subprocess.
"""
import os
import subprocess
import sys
import warnings

import dace
import numpy as np
import pytest

import distsdfg
from distsdfg import errors as E
from distsdfg.testing.programs import get

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MM = "_MatMult_.gemm_map"
SIZES = dict(M=16, N=8, K=12)
N = dace.symbol("N")


@dace.program
def tri(A: dace.float64[N, N], B: dace.float64[N, N]):
    for i in range(1, N):            # row i reads row i - 1: the loop cannot become a map
        for j in dace.map[0:i]:
            B[i, j] = B[i - 1, j] + A[i, j] * 2.0


def fresh(name="matmul"):
    warnings.simplefilter("ignore")
    return get(name).sdfg()


def lowered(name="matmul", schedule=None):
    sdfg = fresh(name)
    distsdfg.lower(sdfg, schedule or {})
    return sdfg


def tri_key(sdfg):
    return distsdfg.maps(sdfg)[0].key


# (input class, call, error class, words the message must contain)
CATALOGUE = [
    ("not_an_sdfg", lambda: distsdfg.maps(get("matmul").prog), E.NotAnSDFGError, ["DaceProgram", "to_sdfg()"]),
    ("unknown_map_key", lambda: distsdfg.lower(fresh(), {"_MatMult_.gemm_mapp": (2, 2, 1)}), E.UnknownMapError,
     ["gemm_mapp", "did you mean", MM]),
    ("grid_wrong_arity", lambda: distsdfg.lower(fresh(), {MM: (2, 2)}), E.GridShapeError,
     [MM, "3 parameters", "one grid dimension per map parameter"]),
    ("grid_not_positive_int", lambda: distsdfg.lower(fresh(), {MM: (2.5, 1, 1)}), E.GridShapeError,
     [MM, "2.5", "positive integer"]),
    ("grid_not_a_sequence", lambda: distsdfg.lower(fresh(), {MM: 4}), E.GridShapeError, [MM, "not a sequence"]),
    ("grid_by_label_not_a_sequence", lambda: distsdfg.schedule_by_label(fresh(), {"gemm_map": 2}), E.GridShapeError,
     ["gemm_map", "not a sequence"]),
    ("schedule_wrong_type", lambda: distsdfg.lower(fresh(), [(2, 2, 1)]), E.ScheduleError, ["dict", "list"]),
    ("schedule_unknown_string", lambda: distsdfg.lower(fresh(), "fast"), E.ScheduleError, ["'fast'", "'auto'"]),
    ("schedule_for_other_sdfg", lambda: distsdfg.lower(fresh("add3d"), distsdfg.Schedule.of({MM: (2, 2, 1)},
                                                                                              sdfg="other")),
     E.ScheduleError, ["made for SDFG `other`", "distsdfg.maps()"]),
    ("schedule_json_broken", lambda: distsdfg.Schedule.from_json("{grids: 2"), E.ScheduleError, ["not JSON"]),
    ("auto_without_nprocs", lambda: distsdfg.lower(fresh(), "auto"), E.SizeError, ["nprocs=P"]),
    ("nprocs_not_positive_int", lambda: distsdfg.auto_schedule(fresh(), "4", **SIZES), E.SizeError,
     ["nprocs", "'4'", "positive integer"]),
    ("size_missing", lambda: distsdfg.comm_report(lowered("matmul", {MM: (2, 1, 1)})), E.SizeError,
     ["`M`", "M=1024"]),
    ("size_misspelled", lambda: distsdfg.auto_schedule(fresh(), 2, m=16, N=8, K=12), E.SizeError,
     ["`m`", "not a size symbol", "K, M, N"]),
    ("size_not_integer", lambda: distsdfg.comm_report(lowered("matmul", {MM: (2, 1, 1)}), M=8.5, N=8, K=12),
     E.SizeError, ["`M`", "8.5", "integer"]),
    ("unknown_target", lambda: distsdfg.lower(fresh(), {}, target="tpu"), E.OptionError, ["'tpu'", "'cpu' or 'gpu'"]),
    ("cuda_aware_mpi_on_cpu", lambda: distsdfg.lower(fresh(), {}, cuda_aware_mpi=True), E.OptionError,
     ["cuda_aware_mpi", "target='gpu'"]),
    ("unknown_cost_model", lambda: distsdfg.auto_schedule(fresh(), 2, cost_model="fast", **SIZES), E.OptionError,
     ["'fast'", "'bytes'"]),
    ("unknown_searcher", lambda: distsdfg.auto_schedule(fresh(), 2, searcher="magic", **SIZES), E.OptionError,
     ["'magic'", "dp"]),
    ("placement_unknown_array", lambda: distsdfg.lower(fresh(), {}, placement={"Z": "distributed"}),
     E.PlacementError, ["`Z`", "not an argument", "A, B"]),
    ("placement_wrong_type", lambda: distsdfg.lower(fresh(), {}, placement=["A"]), E.PlacementError,
     ["['A']", "'distributed'"]),
    ("lowered_twice", lambda: distsdfg.lower(lowered(), {}), E.LoweredStateError,
     ["already lowered", "to_sdfg()"]),
    ("not_lowered", lambda: distsdfg.comm_report(fresh(), **SIZES), E.LoweredStateError,
     ["not been lowered", "distsdfg.lower"]),
    ("report_fewer_ranks_than_grid", lambda: distsdfg.comm_report(lowered("matmul", {MM: (2, 2, 1)}), nprocs=2,
                                                                   **SIZES),
     E.CommunicatorSizeError, ["nprocs=2", "needs 4 ranks"]),
    ("cost_of_unknown_map", lambda: distsdfg.schedule_cost(fresh(), {"nope": (2,)}, **SIZES), E.UnknownMapError,
     ["`nope`", MM]),
    ("explain_grid_wrong_arity", lambda: distsdfg.explain(fresh(), {MM: (2, 2)}, **SIZES), E.GridShapeError,
     [MM, "3 parameters"]),
    ("sharding_not_integers", lambda: distsdfg.schedule_from_shardings(fresh(), {"A": ("a", 1)}, **SIZES),
     E.ScheduleError, ["`A`", "tuple of integers"]),
    ("layout_unknown_array", lambda: distsdfg.layout(lowered(), "Z", **SIZES), E.PlacementError,
     ["`Z`", "not an argument"]),
    ("loop_dependent_map_split", lambda: distsdfg.lower(tri.to_sdfg(), {tri_key(tri.to_sdfg()): (2,)}),
     E.LoopDependentMapError, ["0:i", "`i`", "loop variable", "grid of ones", "rank 0",
                               "test_bad_input.py:29 for j in dace.map[0:i]"]),     # the user's line
]


@pytest.mark.parametrize("call,error,words", [c[1:] for c in CATALOGUE], ids=[c[0] for c in CATALOGUE])
def test_refused_with_named_error(call, error, words):
    with pytest.raises(error) as info:
        call()
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_loop_dependent_maps_stay_whole_and_others_are_planned():
    """A map over 0:i inside a loop over i whose iterations depend on each other is left out of a
    planned schedule (it runs whole on rank 0; under mpiexec: tri_carried:auto in test_loops.py); tri
    lowers with "auto" and has nothing to move. trimul's loop is independent: it became a map over i,
    split like the matmul before it (analysis/loopmaps.py)."""
    t = tri.to_sdfg()
    loop_key = [m.key for m in distsdfg.maps(t) if "i" in str(m.ranges)]
    assert loop_key and distsdfg.auto_schedule(t, 4, verify=False, N=8).as_dict() == {}
    assert distsdfg.schedule_by_label(t, {"*": (2,)}) == {}      # "*" skips it too
    sdfg = fresh("trimul")
    sched = distsdfg.auto_schedule(sdfg, 4, verify=False)
    row_map = [m.key for m in distsdfg.maps(sdfg) if m.params == ("i",)]
    assert row_map and np.prod(sched[row_map[0]]) > 1 and np.prod(sched[MM]) == 4
    t = tri.to_sdfg()
    distsdfg.lower(t, "auto", nprocs=4, plan_options={"verify": False})
    assert distsdfg.comm_report(t, nprocs=4, N=8) == []


# -- call time: one program compiled once, on a communicator of one rank --------------------------------
@pytest.fixture(scope="module")
def add_prog():
    sdfg = fresh("add3d")
    distsdfg.lower(sdfg, {distsdfg.maps(sdfg)[0].key: (1, 1, 1)})
    return distsdfg.compile(sdfg)


X, Y = np.ones((4, 8, 16)), np.ones((8, 16))
CALLS = [
    ("wrong_shape", lambda f: f(x=np.zeros((4, 8)), y=Y), ["`x`", "(4, 8)", "(4, 8, 16)"]),
    ("wrong_dtype", lambda f: f(x=X.astype(np.float32), y=Y), ["`x`", "float32", ".astype"]),
    ("missing_argument", lambda f: f(x=X), ["missing argument `y`"]),
    ("not_contiguous", lambda f: f(x=np.asfortranarray(X), y=Y), ["`x`", "C-contiguous", "np.ascontiguousarray"]),
    ("strided_view", lambda f: f(x=np.ones((4, 8, 32))[:, :, ::2], y=Y), ["`x`", "C-contiguous"]),
    ("not_an_array", lambda f: f(x=X.tolist(), y=Y), ["`x`", "NumPy array", "list"]),
    ("unknown_keyword", lambda f: f(x=X, y=Y, z=Y), ["no argument `z`", "x, y"]),
    ("too_many_positional", lambda f: f(X, Y, Y), ["2 positional", "got 3"]),
    ("given_twice", lambda f: f(X, x=X, y=Y), ["`x`", "both by position and by name"]),
    ("comm_not_a_communicator", lambda f: distsdfg.compile(f.sdfg, comm="world"), ["mpi4py communicator", "str"]),
]


@pytest.mark.parametrize("call,words", [c[1:] for c in CALLS], ids=[c[0] for c in CALLS])
def test_call_refused(add_prog, call, words):
    with pytest.raises(E.InputError) as info:
        call(add_prog)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_good_call_after_refusals(add_prog):
    x, y = np.random.rand(4, 8, 16), np.random.rand(8, 16)
    np.testing.assert_allclose(add_prog(x, y), x + y, rtol=1e-12, atol=1e-12)


# -- PyTorch ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mlp():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    return torch, m, torch.randn(6, 8), torch.randn(6, 2)


def test_train_step_takes_one_target_in_a_tuple(mlp):
    torch, m, x, y = mlp
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    step = distsdfg.from_torch_train_step(m, torch.nn.functional.mse_loss, opt, (x.numpy(),), (y,))
    args = step.arguments(x, y)
    assert [a.name for a in step.args if a.kind == "target"] == ["target"]
    np.testing.assert_array_equal(args["target"], y.numpy())


TORCH = [
    ("several_targets", lambda t, m, x, y: distsdfg.from_torch_train_step(
        m, t.nn.functional.mse_loss, t.optim.SGD(m.parameters(), lr=0.1), (x,), (y, y)), ["2 tensors", "one target"]),
    ("loss_not_callable", lambda t, m, x, y: distsdfg.from_torch_train_step(
        m, "mse", t.optim.SGD(m.parameters(), lr=0.1), (x,), y), ["loss_fn", "callable", "str"]),
    ("not_a_module", lambda t, m, x, y: distsdfg.from_torch(lambda a: a, (x,)), ["torch.nn.Module", "function"]),
    ("input_not_a_tensor", lambda t, m, x, y: distsdfg.from_torch(m, 3), ["example_inputs", "int"]),
    ("unsupported_optimizer", lambda t, m, x, y: distsdfg.from_torch_train_step(
        m, t.nn.functional.mse_loss, t.optim.Adadelta(m.parameters()), (x,), y), ["Adadelta", "SGD, Adam, AdamW, RMSprop, Adagrad"]),
]


@pytest.mark.parametrize("call,words", [c[1:] for c in TORCH], ids=[c[0] for c in TORCH])
def test_torch_refused(mlp, call, words):
    with pytest.raises(E.TorchFrontendError) as info:
        call(*mlp)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


# -- the command line ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def prog_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    (d / "two.py").write_text("import dace\n\n@dace.program\ndef f(A: dace.float64[8]):\n    A[:] = A + 1\n\n"
                              "@dace.program\ndef g(A: dace.float64[8]):\n    A[:] = A * 2\n\ndef plain():\n    pass\n")
    (d / "broken.py").write_text("import dace\nraise RuntimeError('oops')\n")
    return d


CLI = [
    ("no_file", ["maps", "{d}/nofile.py"], ["no program file"]),
    ("import_fails", ["maps", "{d}/broken.py"], ["importing", "RuntimeError: oops"]),
    ("several_programs", ["maps", "{d}/two.py"], ["2 dace programs (f, g)", ":FUNCTION"]),
    ("unknown_function", ["maps", "{d}/two.py:h"], ["no function 'h'", "f, g"]),
    ("not_a_program", ["maps", "{d}/two.py:plain"], ["not a @dace.program"]),
    ("bad_schedule_item", ["plan", "{d}/two.py:f", "--schedule", "f=2,x"], ["'f=2,x'", "KEY=D1,D2"]),
    ("bad_sizes_item", ["plan", "{d}/two.py:f", "--sizes", "N"], ["'N'", "NAME=INTEGER"]),
    ("missing_schedule_file", ["plan", "{d}/two.py:f", "--schedule", "{d}/none.json"], ["no schedule file"]),
    ("auto_without_n", ["plan", "{d}/two.py:f", "--auto"], ["needs -n P"]),
    ("launch_no_script", ["launch", "-n", "2", "{d}/nofile.py"], ["no script file", "nofile.py"]),   # was a traceback per rank
    ("launch_no_ranks", ["launch", "-n", "0", "{d}/two.py"], ["-n 0"]),
]


@pytest.mark.parametrize("argv,words", [c[1:] for c in CLI], ids=[c[0] for c in CLI])
def test_cli_refused(prog_files, capsys, argv, words):
    from distsdfg.launch.cli import main
    with pytest.raises(SystemExit) as info:
        main([a.format(d=prog_files) for a in argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "CommandLineError" in err
    for w in words:
        assert w in err, (w, err)


def test_cli_refusal_is_one_line_without_traceback(prog_files):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("DISTSDFG_VERBOSE", None)
    r = subprocess.run([sys.executable, "-m", "distsdfg", "plan", f"{prog_files}/two.py:f", "--schedule", "nope=2"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert "UnknownMapError: schedule names map `nope`" in r.stderr and "Traceback" not in r.stderr


SN, SM = dace.symbol("SN"), dace.symbol("SM")


@dace.program
def stepped_scale(x: dace.float64[SN]):
    return x[::2] * 2.0


@dace.program
def stepped_product(A: dace.float64[SN, SM], p: dace.float64[SM]):
    return A[::2, :] @ p


@dace.program
def strided_rows_in_a_map(A: dace.float64[SN, SM]):
    B = np.empty((5, SM), dtype=np.float64)
    for i in dace.map[0:5]:
        for j in dace.map[0:SM]:
            B[i, j] = A[2 * i, j] * 2.0
    return B


@pytest.mark.parametrize("prog,array", [(stepped_scale, "x"), (stepped_product, "A")])
def test_stepped_slices_that_dace_misreads_are_refused(prog, array):
    # DaCe 1.0.2 reads x[::2] as x[0:n/2] (element-wise) and A[::2, :] with A's own strides (through
    # a view, in a product): wrong results with DaCe alone; refused at lower(), with or without sizes.
    with pytest.raises(E.UnsupportedProgramError, match=f"stepped slice of `{array}`.*index it in a map"):
        distsdfg.lower(prog.to_sdfg(), "auto", nprocs=2)
    with pytest.raises(E.UnsupportedProgramError, match=f"stepped slice of `{array}`"):
        distsdfg.lower(prog.to_sdfg(), "auto", nprocs=1, plan_options=dict(SN=10, SM=4))


def test_strided_indices_in_a_map_and_shifted_slices_are_not_refused():
    distsdfg.lower(strided_rows_in_a_map.to_sdfg(), "auto", nprocs=2, plan_options=dict(SN=10, SM=4))
    sdfg = get("jacobi2d").sdfg()
    distsdfg.lower(sdfg, "auto", nprocs=2, plan_options=dict(N=40, TSTEPS=3))
