"""The start of a call on every rank: all ranks arrive within a bound, and each rank's problems reach all.

A distributed program's call is collective. Before this module, rank 0 checked the arguments and
broadcast its answer: a rank that raised before the broadcast (four positional arguments for
three), or that never called, left the others blocked in MPI for as long as the job lived. Now
every call starts with ``CallStart.exchange``:

1. **Arrival** (``arrive``): a non-blocking barrier on a duplicate of the program's communicator,
   tested until every rank has arrived. A rank that has waited ``NOTICE_AFTER`` seconds tells rank 0
   so (a zero-byte message tagged with the call's number). After ``call_timeout()`` seconds (default
   30, ``$DISTSDFG_CALL_TIMEOUT``, 0 for no limit) rank 0 names the ranks that never arrived and
   aborts the job (``MPI_Abort``); the other ranks wait a little longer (rank 0 reports) and then
   report that rank 0 never arrived. Ranks waiting for rank 0 to compile sleep in ``idle_bcast``
   before the call starts, so a long first compile never counts.
2. **Exchange**: one ``allgather`` on the program's communicator of (rank 0's decisions, this rank's own error, this rank's size
   symbols); every rank raises the same ``InputError`` when any rank had an error or passed sizes
   that differ from rank 0's, naming the ranks and values.

Example on 2 ranks: rank 0 calls ``prog(A, B, C, D)`` for three arguments, rank 1 ``prog(A, B, C)``:
both raise ``InputError: rank 0: prog takes 3 positional arguments (A, B, C), got 4``.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..errors import InputError

__all__ = ["CallStart", "call_timeout", "NOTICE_AFTER"]

#: Seconds a rank waits at a call's start before it tells rank 0 it is there.
NOTICE_AFTER = 1.0
#: Extra seconds the other ranks wait beyond the bound, so that rank 0, which knows who is missing, reports.
_GRACE = 3.0
_TAGS = 30000


def call_timeout() -> float:
    """``$DISTSDFG_CALL_TIMEOUT``: seconds a rank waits at a call's start for the other ranks before the
    job is aborted (default 30; 0 or negative: no limit)."""
    try:
        from ..config import CALL_TIMEOUT
        return float(CALL_TIMEOUT.get())
    except ValueError:
        return 30.0


class CallStart:
    """The call-start protocol of one program over one communicator (see the module docstring)."""

    def __init__(self, comm, name: str):
        self.comm = comm
        # Arrival and notices on a duplicate (no tag of the program's can match them); the exchange
        # on ``comm`` itself, where the per-call message always went (a byte counter counts it apart).
        self.ctl = comm.Dup() if comm is not None and comm.size > 1 else comm
        self.name = name
        self.calls = 0

    def arrive(self) -> None:
        """Return once every rank has started this call; abort the job after the bound."""
        comm = self.ctl
        if comm is None or comm.size == 1:
            return
        from mpi4py import MPI
        self.calls += 1
        tag = self.calls % _TAGS
        req = comm.Ibarrier()
        t0 = time.perf_counter()
        limit = call_timeout()
        notice = None
        self.noticed = False
        while not req.Test():
            waited = time.perf_counter() - t0
            if waited < 0.01:
                continue            # a call whose ranks arrive together: spin, as a blocking call would
            if notice is None and comm.rank != 0 and waited > NOTICE_AFTER:
                notice = comm.Isend([np.empty(0, np.int8), MPI.BYTE], dest=0, tag=tag)
                self.noticed = True
            if limit > 0 and waited > limit + (0 if comm.rank == 0 else _GRACE):
                self._abort(waited, tag)
            time.sleep(0.0005 if waited < 1.0 else 0.005)
        self._notice = notice

    def _abort(self, waited: float, tag: int) -> None:
        from mpi4py import MPI
        comm = self.ctl
        if comm.rank == 0:
            here, st = {0}, MPI.Status()
            while comm.Iprobe(source=MPI.ANY_SOURCE, tag=tag, status=st):
                comm.Recv([np.empty(0, np.int8), MPI.BYTE], source=st.Get_source(), tag=tag)
                here.add(st.Get_source())
            missing = [r for r in range(comm.size) if r not in here]
            msg = (f"rank 0 waited {waited:.0f} s at the start of a call of `{self.name}` for ranks {missing}, which "
                   f"never called it (ranks {sorted(here)} did)")
        else:
            msg = (f"rank {comm.rank} waited {waited:.0f} s at the start of a call of `{self.name}`, and rank 0, "
                   f"which names the ranks that are missing, never called it")
        print(f"distsdfg: {msg}. Every rank of the communicator must call the program (a rank that raised, "
              f"returned early or called another program leaves the others waiting); raise "
              f"$DISTSDFG_CALL_TIMEOUT (seconds, now {call_timeout():g}; 0: no limit) where ranks legitimately "
              f"arrive further apart. Aborting the job.", file=sys.stderr, flush=True)
        time.sleep(1.0)         # MPI_Abort can end the launcher before it forwards that line
        MPI.COMM_WORLD.Abort(3)

    def exchange(self, decisions: Any, own_error: Optional[str], sizes: Dict[str, Any]) -> Any:
        """Collective: rank 0's ``decisions`` on every rank, after every rank's ``own_error`` (an argument
        problem found before the call could be checked) and size symbols were compared."""
        comm = self.comm
        if comm is None or comm.size == 1:
            if own_error:
                raise InputError(own_error)
            return decisions
        from mpi4py import MPI
        mine = {k: int(v) for k, v in sizes.items() if isinstance(v, (int, np.integer))}
        got = comm.allgather((decisions if comm.rank == 0 else None, own_error, mine,
                              getattr(self, "noticed", False)))
        if comm.rank == 0:          # the notices of ranks that waited long: received, so none is left over
            tag = self.calls % _TAGS
            for r, (_, _, _, noticed) in enumerate(got):
                if noticed:
                    self.ctl.Recv([np.empty(0, np.int8), MPI.BYTE], source=r, tag=tag)
        elif getattr(self, "_notice", None) is not None:
            self._notice.Wait()
        problems = [f"rank {r}: {e}" for r, (_, e, _, _) in enumerate(got) if e]
        if problems:
            raise InputError("; ".join(problems))
        ref = got[0][2]
        for r, (_, _, theirs, _) in enumerate(got[1:], start=1):
            for k in sorted(set(ref) & set(theirs)):
                if ref[k] != theirs[k]:
                    raise InputError(f"the ranks disagree on the size `{k}` of `{self.name}`: rank 0 has "
                                     f"{k}={ref[k]} (passed or read off its arrays), rank {r} passes {k}={theirs[k]}; "
                                     f"pass the same sizes on every rank (or leave them out on the ranks other than 0)")
        return got[0][0]
