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
   symbols, this rank's scalar arguments); every rank raises the same ``InputError`` when any rank had
   an error or passed sizes that differ from rank 0's, and the same ``ScalarMismatchError`` when a rank
   passed a scalar argument (a learning rate, a tolerance) with another value than rank 0, naming the
   ranks and values. A rank that leaves a scalar out takes rank 0's.

Example on 2 ranks: rank 0 calls ``prog(A, B, C, D)`` for three arguments, rank 1 ``prog(A, B, C)``:
both raise ``InputError: rank 0: prog takes 3 positional arguments (A, B, C), got 4``. Rank 0 calls
``step(w, lr=0.1)``, rank 1 ``step(w, lr=0.2)``: both raise ``ScalarMismatchError: the ranks disagree on
the scalar argument `lr` of `step`: rank 0 passes lr=0.1, rank 1 passes lr=0.2; ...``.
"""
from __future__ import annotations

import numbers
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..errors import InputError, ScalarMismatchError

__all__ = ["CallStart", "call_timeout", "NOTICE_AFTER", "scalar_arguments", "scalar_mismatch"]

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


def scalar_arguments(kwargs: Mapping[str, Any], skip=()) -> Dict[str, Any]:
    """The numbers among a call's arguments (Python and NumPy scalars, 0-d arrays as their value),
    leaving out the names in ``skip`` (size symbols, which are checked as sizes)."""
    out = {}
    for k, v in kwargs.items():
        if k in skip or v is None or isinstance(v, (str, bytes)):
            continue
        if isinstance(v, np.ndarray):
            if v.ndim == 0:
                out[k] = v.item()
        elif isinstance(v, (numbers.Number, np.generic)):
            out[k] = v
    return out


def _same(a, b) -> bool:
    """Equal values, NaN equal to NaN (as when every rank computed the same NaN)."""
    try:
        if bool(a == b):
            return True
        return bool(np.isnan(a) and np.isnan(b))
    except (TypeError, ValueError):
        return False


def scalar_mismatch(name: str, by_rank: List[Mapping[str, Any]]) -> Optional[str]:
    """The message for the first scalar argument that a rank passes with another value than rank 0
    (``by_rank[r]``: rank r's scalar arguments), or None when they agree. A rank may leave a scalar
    out (it takes rank 0's). ``scalar_mismatch("step", [{"lr": 0.1}, {"lr": 0.1}, {}, {"lr": 0.2}])``
    begins "the ranks disagree on the scalar argument `lr` of `step`: rank 0 passes lr=0.1, rank 3
    passes lr=0.2"."""
    ref = by_rank[0]
    for k in sorted(ref):
        odd = [(r, theirs[k]) for r, theirs in enumerate(by_rank[1:], start=1)
               if k in theirs and not _same(ref[k], theirs[k])]
        if not odd:
            continue
        shown = ", ".join(f"rank {r} passes {k}={v!r}" for r, v in odd[:4])
        more = f" and {len(odd) - 4} more ranks" if len(odd) > 4 else ""
        return (f"the ranks disagree on the scalar argument `{k}` of `{name}`: rank 0 passes {k}={ref[k]!r}, "
                f"{shown}{more}; every rank runs the same loops and branches with one value, so pass the same "
                f"value on every rank (or leave it out on the ranks other than 0: they take rank 0's)")
    return None


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

    def exchange(self, decisions: Any, own_error: Optional[str], sizes: Dict[str, Any],
                 scalars: Optional[Dict[str, Any]] = None) -> Any:
        """Collective: rank 0's ``decisions`` on every rank, after every rank's ``own_error`` (an argument
        problem found before the call could be checked), size symbols and ``scalars`` (this rank's scalar
        arguments, ``scalar_arguments``) were compared."""
        comm = self.comm
        if comm is None or comm.size == 1:
            if own_error:
                raise InputError(own_error)
            return decisions
        from mpi4py import MPI
        mine = {k: int(v) for k, v in sizes.items() if isinstance(v, (int, np.integer))}
        got = comm.allgather((decisions if comm.rank == 0 else None, own_error, mine,
                              getattr(self, "noticed", False), scalars or None))
        if comm.rank == 0:          # the notices of ranks that waited long: received, so none is left over
            tag = self.calls % _TAGS
            for r, (_, _, _, noticed, _) in enumerate(got):
                if noticed:
                    self.ctl.Recv([np.empty(0, np.int8), MPI.BYTE], source=r, tag=tag)
        elif getattr(self, "_notice", None) is not None:
            self._notice.Wait()
        problems = [f"rank {r}: {e}" for r, (_, e, _, _, _) in enumerate(got) if e]
        if problems:
            raise InputError("; ".join(problems))
        ref = got[0][2]
        for r, (_, _, theirs, _, _) in enumerate(got[1:], start=1):
            for k in sorted(set(ref) & set(theirs)):
                if ref[k] != theirs[k]:
                    raise InputError(f"the ranks disagree on the size `{k}` of `{self.name}`: rank 0 has "
                                     f"{k}={ref[k]} (passed or read off its arrays), rank {r} passes {k}={theirs[k]}; "
                                     f"pass the same sizes on every rank (or leave them out on the ranks other than 0)")
        if got[0][4] and any(g[4] for g in got[1:]):
            msg = scalar_mismatch(self.name, [g[4] or {} for g in got])
            if msg:
                raise ScalarMismatchError(msg)
        return got[0][0]
