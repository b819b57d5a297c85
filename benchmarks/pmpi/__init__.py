"""The PMPI byte counter: build ``bytecount.c`` with the bundled ``mpicc`` and read it via ctypes.

``build()`` compiles the library once per source version into a cache folder and returns its
path; ranks started with ``LD_PRELOAD=<path>`` count every wrapped MPI call. In such a rank,
``Counters()`` resets (``reset``) and reads (``snapshot``) the counts of this rank.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Tuple

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
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
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
