"""The PMPI byte counter: build ``bytecount.c`` with the bundled ``mpicc`` and read it via ctypes.

``build()`` compiles the library once per source version into a cache folder and returns its
path; ranks started with ``LD_PRELOAD=<path>`` (``mpiexec_env()``) count every wrapped MPI call.
In such a rank, ``Counters()`` resets (``reset``) and reads (``snapshot``) the counts of this
rank, and ``byte_fields`` compares every rank's counts with ``distsdfg.comm_report``, MPI call by
MPI call and rank by rank. The test harness (``distsdfg.testing.mpirun``) and the benchmarks
use it.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..values.modes import Collective

SOURCE = Path(__file__).with_name("bytecount.c")
ENV = "LD_PRELOAD"


def mpicc() -> str:
    """The ``mpicc`` of the ``mpich`` wheel next to this Python, else the first on PATH."""
    here = Path(sys.executable).parent / "mpicc"
    found = str(here) if here.exists() else shutil.which("mpicc")
    if not found:
        raise RuntimeError("no mpicc found: install the mpich wheel (pip install mpich) or put mpicc on PATH")
    return found


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "distsdfg" / "bench"


def build(folder: Optional[Path] = None) -> Path:
    """Compile the counter (once per source text) and return the shared library's path."""
    text = SOURCE.read_bytes()
    tag = hashlib.sha256(text + mpicc().encode()).hexdigest()[:12]
    out = Path(folder or cache_dir()) / f"libbytecount-{tag}.so"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")    # jobs launched from threads
        subprocess.run([mpicc(), "-shared", "-fPIC", "-O2", "-o", str(tmp), str(SOURCE)], check=True)
        tmp.replace(out)
    return out


def preloaded() -> Optional[str]:
    """The counter library this process was started with, if any."""
    for p in os.environ.get(ENV, "").split(":"):
        if "libbytecount" in p:
            return p
    return None


class Counters:
    """This rank's counters: ``reset()``, then ``snapshot()`` -> {"data": {call: (calls, sent, received)},
    "control": {...}}; "control" holds the calls on the communicator given to ``set_control``."""

    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)       # the preloaded copy: dlopen returns the same handle
        self.lib.bytecount_name.restype = ctypes.c_char_p
        self.n = self.lib.bytecount_n()
        self.names = [self.lib.bytecount_name(i).decode() for i in range(self.n)]

    def set_control(self, comm) -> None:
        """Count the calls on ``comm`` (an mpi4py communicator) as control traffic."""
        self.lib.bytecount_set_control(ctypes.c_int(comm.py2f()))

    def reset(self) -> None:
        self.lib.bytecount_reset()

    def snapshot(self) -> Dict[str, Dict[str, Tuple[int, int, int]]]:
        arrays = [(ctypes.c_uint64 * (2 * self.n))() for _ in range(3)]
        self.lib.bytecount_read(*arrays)
        c, s, r = (list(a) for a in arrays)
        return {kind: {name: (c[o + i], s[o + i], r[o + i]) for i, name in enumerate(self.names) if c[o + i]}
                for kind, o in (("data", 0), ("control", self.n))}


def mpiexec_env(folder: Optional[Path] = None) -> Dict[str, str]:
    """``{"LD_PRELOAD": <counter>}``, to pass to every rank (``mpiexec -genv``)."""
    return {ENV: str(build(folder))}


def counters() -> Optional[Counters]:
    """This rank's counters when the library is preloaded, else None."""
    path = preloaded()
    return Counters(path) if path else None


# -- comparing measured bytes with comm_report ---------------------------------------------------------
Table = Dict[str, Dict[str, List[int]]]


def per_rank(snapshots, kind: str) -> Table:
    """{call: {"sent": [per rank], "received": [...]}} from every rank's snapshot."""
    names = sorted({n for s in snapshots for n in s[kind]})
    return {n: {"sent": [s[kind].get(n, (0, 0, 0))[1] for s in snapshots],
                "received": [s[kind].get(n, (0, 0, 0))[2] for s in snapshots]} for n in names}


def report_per_call(report, nprocs: int, trips: Optional[int] = None) -> Table:
    """comm_report's steps summed per MPI call, with its ``Isend/Irecv`` split into the two calls;
    steps of a loop that can exit early (``at_most``) repeat ``trips`` times when given."""
    out: Table = {}

    def add(name, sent, received):
        d = out.setdefault(name, {"sent": [0] * nprocs, "received": [0] * nprocs})
        d["sent"] = [a + b for a, b in zip(d["sent"], sent)]
        d["received"] = [a + b for a, b in zip(d["received"], received)]
    for s in report:
        n = trips if (s.at_most and trips is not None) else s.repeats
        if not str(n).isdigit():
            raise ValueError(f"comm_report's step {s.collective} of `{s.array}` repeats {n!r} times: pass the "
                             f"loop bounds (scalar arguments) to comm_report as well")
        n = int(n)
        sent, recv = [b * n for b in s.sent], [b * n for b in s.received]
        if s.collective == Collective.P2P:
            add("Isend", sent, [0] * nprocs)
            add("Irecv", [0] * nprocs, recv)
        else:
            add(s.collective, sent, recv)
    return out


def totals(per_call: Table, nprocs: int) -> Dict[str, List[int]]:
    return {k: [sum(d[k][q] for d in per_call.values()) for q in range(nprocs)] for k in ("sent", "received")}


def _nonzero(table: Table) -> Table:
    return {k: v for k, v in table.items() if any(v["sent"]) or any(v["received"])}


def byte_fields(snapshots, report, nprocs: int) -> Dict[str, object]:
    """Measured bytes per rank, comm_report's (when given) and whether they agree call by call."""
    measured = per_rank(snapshots, "data")
    control = totals(per_rank(snapshots, "control"), nprocs)
    out = {"pmpi": measured, "pmpi_total": totals(measured, nprocs),
           "control_bytes": sum(control["sent"])}
    if report is not None:
        trips = early_exit_trips(report, sum(totals(measured, nprocs)["sent"]))
        expected = _nonzero(report_per_call(report, nprocs, trips))
        out.update(report=expected, report_total=totals(expected, nprocs), trips=trips,
                   pmpi_equals_report=_nonzero(measured) == expected)
    return out


def early_exit_trips(report, measured_sent: int) -> Optional[int]:
    """The trip count of the loop that can exit early (``at_most`` steps, one loop) that makes
    comm_report's total equal the measured one, if a whole count within the bound does; None when
    the report has no such steps. The per-call, per-rank comparison then uses that count."""
    bounded = [s for s in report if s.at_most]
    if not bounded:
        return None
    fixed = sum(sum(s.total_sent) for s in report if not s.at_most)
    per_trip = sum(sum(s.sent) for s in bounded)
    bound = min(int(s.repeats) for s in bounded)
    if per_trip == 0:
        return bound
    trips, rest = divmod(measured_sent - fixed, per_trip)
    return trips if rest == 0 and 0 <= trips <= bound else None
