"""Chrome traces of a program's calls (``distsdfg run --trace``, ``compile(trace=...)``): per rank,
its kernels and MPI steps with the bytes of ``comm_report``; the file is valid JSON after every call.
The first tests write traces from made-up events (nothing compiled); the last runs 2 ranks."""
import json
import os
import subprocess
import sys

import dace
import numpy as np

import distsdfg
from distsdfg.dace_compat.trace import KERNEL, NODE, Event
from distsdfg.runtime.trace import TraceFile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = dace.symbol("N")


@dace.program
def heat(T: dace.float64[N, N], S: dace.float64[N, N]):
    Tn = np.zeros_like(T)
    Tn[1:-1, 1:-1] = 0.25 * (T[:-2, 1:-1] + T[2:, 1:-1] + T[1:-1, :-2] + T[1:-1, 2:])
    S[:] = np.exp(Tn - T)
    return np.sum(S)


SIZES = dict(N=32)


class _Comm:
    """Rank 0 of two: ``gather`` hands over rank 1's part as given."""
    rank, size = 0, 2

    def __init__(self, other):
        self.other = other

    def Barrier(self):
        pass

    def gather(self, mine, root=0):
        if isinstance(mine, float):     # the clocks, read after a barrier: rank 1's is 500 us ahead
            return [mine, mine + 500.0]
        return [mine, self.other]


class _Program:
    def __init__(self, sdfg):
        self.lowered = sdfg._distsdfg


def _lowered():
    sdfg = heat.to_sdfg()
    distsdfg.lower(sdfg, {"*": (2, 1)})
    return sdfg


def _events(low, t):
    """Made-up events of one call: every step, one kernel."""
    out = [Event(KERNEL, t + 1, t + 2, "_Sub__map|heat.py:3 S[:] = np.exp(Tn - T)")]
    out += [Event(NODE, t + 3 + i, t + 3.5 + i, f"dm_{s.index}_{s.kind}_{s.array}") for i, s in enumerate(low.steps)]
    return out


def test_every_call_appends_and_the_file_stays_valid_json(tmp_path, monkeypatch):
    sdfg = _lowered()
    low = sdfg._distsdfg
    from distsdfg.runtime import trace as trace_module
    path = tmp_path / "run.json"
    comm = _Comm(None)
    tf = TraceFile(str(path), comm)
    for call in range(3):
        comm.other = (1000.0 * call + 700, 1000.0 * call + 790, _events(low, 1000.0 * call + 700))
        monkeypatch.setattr(trace_module, "take_events", lambda compiled, c=call: _events(low, 1000.0 * c))
        tf.add_call(_Program(sdfg), dict(SIZES), 1000.0 * call, 1000.0 * call + 100, None)
        events = json.loads(path.read_text())["traceEvents"]       # valid after every call
        calls = [e for e in events if e.get("cat") == "call"]
        assert len(calls) == 2 * (call + 1) and {e["pid"] for e in calls} == {0, 1}
    # rank 1's clock runs 500 us ahead: on rank 0's clock its calls start 200 us after rank 0's
    assert [e["ts"] for e in calls[:2]] == [0.0, 200.0]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {"rank 0", "rank 1"}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert kernels and all(e["name"] == "_Sub__map heat.py:3" for e in kernels)


def test_steps_carry_the_bytes_of_comm_report(tmp_path, monkeypatch):
    sdfg = _lowered()
    low = sdfg._distsdfg
    from distsdfg.runtime import trace as trace_module
    monkeypatch.setattr(trace_module, "take_events", lambda compiled: _events(low, 0.0))
    path = tmp_path / "run.json"
    TraceFile(str(path), _Comm((0.0, 50.0, _events(low, 0.0)))).add_call(_Program(sdfg), dict(SIZES), 0.0, 60.0, None)
    steps = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "mpi"]
    assert len(steps) == 2 * len(low.steps)
    for rank in (0, 1):
        sent = sum(e["args"]["bytes_sent"] for e in steps if e["pid"] == rank)
        received = sum(e["args"]["bytes_received"] for e in steps if e["pid"] == rank)
        report = distsdfg.comm_report(sdfg, nprocs=2, **SIZES)
        assert sent == sum(c.sent[rank] for c in report) > 0
        assert received == sum(c.received[rank] for c in report) > 0
    scatter = next(e for e in steps if e["args"]["kind"] == "scatter")
    assert scatter["name"].startswith("Scatterv ") and scatter["args"]["source"].startswith("test_trace.py:")


def test_a_two_rank_run_traces_every_rank(tmp_path):
    """``distsdfg run --trace``: the JSON is valid and holds every rank's kernels and steps, each
    step with the bytes that rank sends and receives (as comm_report counts them)."""
    path = tmp_path / "run.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    r = subprocess.run([sys.executable, "-m", "distsdfg", "run", os.path.join(ROOT, "tests", "test_trace.py:heat"),
                        "-n", "2", "--schedule", "*=2,1", "--sizes", "N=32", "--trace", str(path)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    events = json.loads(path.read_text())["traceEvents"]
    sdfg = _lowered()
    report = distsdfg.comm_report(sdfg, nprocs=2, **SIZES)
    for rank in (0, 1):
        mine = [e for e in events if e.get("pid") == rank and e["ph"] == "X"]
        steps = [e for e in mine if e["cat"] == "mpi"]
        assert sorted(e["args"]["step"] for e in steps) == sorted(s.index for s in sdfg._distsdfg.steps)
        assert sum(e["args"]["bytes_sent"] for e in steps) == sum(c.sent[rank] for c in report)
        assert sum(e["args"]["bytes_received"] for e in steps) == sum(c.received[rank] for c in report)
        kernels = [e for e in mine if e["cat"] == "kernel"]
        assert any(e["args"].get("source", "").startswith("test_trace.py:") for e in kernels)
        call = next(e for e in mine if e["cat"] == "call")
        for e in steps + kernels:      # inside the call, in order
            assert call["ts"] <= e["ts"] and e["ts"] + e["dur"] <= call["ts"] + call["dur"] + 1
