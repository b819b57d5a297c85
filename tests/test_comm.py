"""Programs compiled for sub-communicators (``distsdfg.compile(sdfg, comm=...)``).

One mpiexec of 4 ranks (``distsdfg/testing/comm_run.py``): two splits of the world run different
programs on their halves at the same time, each checked against NumPy on its own root; the
bytes every rank sends and receives (PMPI counter) match comm_report's for the communicator's
size; a communicator smaller than the schedule is refused. The unit tests below need no MPI run.
"""
import json
import os
import subprocess
import sys

import pytest

import distsdfg
from distsdfg.testing.mpirun import counted_argv
from distsdfg.lowering.rewriter import COMM_ARG
from distsdfg.mpi import DistributedMemlet
from distsdfg.testing.programs import get

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_step_reads_the_communicator_argument():
    sdfg = get("matmul").sdfg()
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"gemm_map": (2, 1, 1)}))
    assert COMM_ARG in sdfg.arglist() and not sdfg.arrays[COMM_ARG].transient
    steps = [(n, s) for s in sdfg.states() for n in s.nodes() if isinstance(n, DistributedMemlet)]
    assert steps
    for n, state in steps:
        (edge,) = [e for e in state.in_edges(n) if e.dst_conn == "_comm"]
        assert edge.data.data == COMM_ARG
    code = "\n".join(obj.clean_code for obj in dc_code(sdfg))
    assert "MPI_COMM_WORLD" not in code and code.count("MPI_Comm_f2c(_comm)") == len(steps)


def test_local_blocks_are_allocated_once_per_program():
    """Every local block of a CPU lowering is persistent (distsdfg.lowering.buffers): allocated when
    the program is initialised, not with fresh pages on every call; the program's own arrays are not."""
    from dace import dtypes
    sdfg = get("mlp").sdfg()
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"*": (2, 1)}, fuzzy=True))
    local = {n: d for n, d in sdfg.arrays.items() if n.startswith("__dsdfg_") and d.transient and d.shape != (1,)}
    assert len(local) >= 5
    assert all(d.lifetime == dtypes.AllocationLifetime.Persistent for d in local.values()), local
    assert all(d.lifetime != dtypes.AllocationLifetime.Persistent for n, d in sdfg.arrays.items() if not d.transient)


def dc_code(sdfg):
    import copy

    from dace.codegen import codegen
    return codegen.generate_code(copy.deepcopy(sdfg))


def test_the_runtime_header_never_names_the_world():
    from distsdfg.mpi.environment import INCLUDE_DIR
    for name in os.listdir(INCLUDE_DIR):
        with open(os.path.join(INCLUDE_DIR, name)) as f:
            assert "MPI_COMM_WORLD" not in f.read(), name


def test_saving_blocks_needs_the_programs_communicator(tmp_path):
    from mpi4py import MPI

    from distsdfg.errors import PlacementError
    sdfg = get("affine").sdfg()
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"*": (2, 1)}), placement="distributed")
    lay = distsdfg.layout(sdfg, "A", nprocs=2, N=8)
    with pytest.raises(PlacementError, match="layout is for 2 ranks but the communicator has 1"):
        lay.save(str(tmp_path / "A.npy"), lay.empty(0), 0, comm=MPI.COMM_SELF)


def test_builders_of_one_folder_take_turns(tmp_path):
    """Two communicators may compile the same program at once: the build folder's lock is exclusive
    for builders (flock: two opens conflict even in one process) and shared among loaders."""
    import threading

    from distsdfg.runtime.builds import build_lock
    folder = str(tmp_path / ".dacecache" / "prog")
    for held, wanted, waits in ((True, True, True), (False, False, False), (False, True, True)):
        acquired = threading.Event()

        def second():
            with build_lock(folder, exclusive=wanted):
                acquired.set()
        t = threading.Thread(target=second)
        with build_lock(folder, exclusive=held):
            t.start()
            while_held = acquired.wait(0.5 if waits else 60)
        t.join(60)
        assert acquired.is_set() and while_held == (not waits), (held, wanted)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("comm")
    out = tmp / "comm.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    argv = counted_argv(4, ["-m", "distsdfg.testing.comm_run", str(out)], timeout=1200)   # PMPI counter preloaded
    proc = subprocess.run(argv, env=env, cwd=str(tmp), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"all": json.loads(out.read_text())}


def _of(records, phase):
    return [r for r in records["all"] if r["phase"] == phase]


def test_no_step_failed(records):
    failed = [r for r in records["all"] if "error" in r]
    assert not failed, failed[0].get("trace", failed[0]["error"])


@pytest.mark.parametrize("phase,runs", [
    ("split A", {"matmul": [0, 1], "mlp": [2, 3]}),
    ("split B", {"matmul": [2, 0], "mlp": [3, 1]}),
    ("split A again", {"matmul": [0, 1], "mlp": [2, 3]}),
])
def test_each_communicator_computes_its_program(records, phase, runs):
    got = sorted((r["program"], r["members"]) for r in _of(records, phase))
    assert got == sorted(runs.items())
    for r in _of(records, phase):
        assert r["dtype"] == "float64" and r["rel_err"] <= 1e-10, r


def test_bytes_per_rank_match_comm_report(records):
    measured = [r for r in records["all"] if "measured" in r]
    assert len(measured) >= 6, "the PMPI byte counter measured no call"
    for r in records["all"]:
        if "measured" in r:
            assert r["measured"] == r["expected"], r
            assert sum(r["measured"]["sent"]) > 0 and r["control_calls"] > 0


def test_a_smaller_communicator_is_refused(records):
    (r,) = _of(records, "size")
    assert r["refused"] and "needs 2 ranks but the communicator has 1" in r["refused"]


def test_persistent_buffers_keep_the_call_within_ctypes_arguments(monkeypatch):
    """A persistent buffer's per-rank shape symbols are arguments of the program's initialisation
    and cannot be packed (dace_compat.pack): the buffers persisted use at most the packing
    threshold's worth of them, fewest first; the rest are allocated per call (a GPT training step
    in distributed placement had 1,099 initialisation arguments, over ctypes' 1,024)."""
    import dace
    from dace import dtypes

    from distsdfg.dace_compat.pack import symbols_to_pack
    from distsdfg.lowering.buffers import persist_step_buffers
    monkeypatch.setenv("DISTSDFG_PACK_SYMBOLS_ABOVE", "4")
    sdfg = dace.SDFG("many_blocks")
    state = sdfg.add_state()
    shapes = {"__dsdfg_fixed": (8,), "__dsdfg_one": ("__dsdfg_h0_s0",),
              "__dsdfg_two": ("__dsdfg_h1_s0", "__dsdfg_h1_s1"),
              "__dsdfg_three": ("__dsdfg_h2_s0", "__dsdfg_h2_s1", "__dsdfg_h2_s2")}
    for name, shape in shapes.items():
        for s in shape:
            if isinstance(s, str):
                sdfg.add_symbol(s, dace.int64)
        sdfg.add_transient(name, shape, dace.float64)
        sdfg.add_array(name[len("__dsdfg_"):], shape, dace.float64)
        state.add_nedge(state.add_read(name), state.add_write(name[len("__dsdfg_"):]),
                        dace.Memlet.from_array(name, sdfg.arrays[name]))
    assert persist_step_buffers(sdfg) == 3
    lifetime = {n: sdfg.arrays[n].lifetime == dtypes.AllocationLifetime.Persistent for n in shapes}
    assert lifetime == {"__dsdfg_fixed": True, "__dsdfg_one": True, "__dsdfg_two": True, "__dsdfg_three": False}
    assert symbols_to_pack(sdfg) == ["__dsdfg_h2_s0", "__dsdfg_h2_s1", "__dsdfg_h2_s2"]


def test_a_call_over_ctypes_arguments_is_refused_before_compiling():
    """More than 1,024 arguments even after packing: a named refusal, not ctypes' ArgumentError
    after the C++ compile."""
    import dace

    from distsdfg.dace_compat.pack import pack_symbols
    from distsdfg.errors import UnsupportedProgramError
    sdfg = dace.SDFG("wide_call")
    state = sdfg.add_state()
    for i in range(1030):
        sdfg.add_array(f"w{i}", (4,), dace.float64)
        state.add_nedge(state.add_read(f"w{i}"), state.add_write(f"w{i}"), dace.Memlet(f"w{i}[0:4]"))
    with pytest.raises(UnsupportedProgramError, match="1030 arguments .*1030 arrays"):
        pack_symbols(sdfg)
