"""Progress on stderr: rank 0 names each phase (plan, lower, compile, first run) that is still
running after a couple of seconds, and its time when it ends.

    [distsdfg] matmul: compile (2 kernels) ...
    [distsdfg] matmul: compile (2 kernels) done in 12.3 s

Phases shorter than ``AFTER`` seconds print nothing. Off with ``verbose=False`` (``distsdfg.lower``,
``distsdfg.compile``) or ``DISTSDFG_PROGRESS=0``.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Optional

__all__ = ["ENV", "AFTER", "enabled", "phase"]

ENV = "DISTSDFG_PROGRESS"
AFTER = 2.0         # seconds a phase runs before it is named


def enabled(verbose: Optional[bool] = None) -> bool:
    """``verbose`` if given, else ``$DISTSDFG_PROGRESS`` (on unless ``0``)."""
    if verbose is not None:
        return bool(verbose)
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _is_root(comm) -> bool:
    """Rank 0 of ``comm``; without one, of ``MPI.COMM_WORLD`` if this process runs MPI (a process that
    never imported mpi4py is a rank of its own)."""
    if comm is not None:
        return comm.rank == 0
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return True
    return mpi.COMM_WORLD.rank == 0


def _say(msg: str) -> None:
    print(f"[distsdfg] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def phase(label: str, *, verbose: Optional[bool] = None, comm=None, after: Optional[float] = None):
    """Name ``label`` on rank 0 if the block runs longer than ``after`` seconds (default ``AFTER``), then
    its time when it ends; nothing on other ranks, for short blocks, or when not ``enabled(verbose)``."""
    if not (enabled(verbose) and _is_root(comm)):
        yield
        return
    after = AFTER if after is None else after
    t0 = time.perf_counter()
    timer = threading.Timer(after, _say, (f"{label} ...",))
    timer.daemon = True
    timer.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        timer.cancel()
        dt = time.perf_counter() - t0
        if dt >= after:
            _say(f"{label} {'done' if ok else 'failed'} in {dt:.1f} s")
