"""A program's calls as a Chrome trace (Perfetto, chrome://tracing): per rank, its kernels and
communication steps, each step with the bytes that rank sends and receives.

``compile(sdfg, trace="run.json")`` (or ``$DISTSDFG_TRACE``) builds the program with the
recorder of ``dace_compat.trace``; after every call, rank 0 gathers each rank's events and appends
them to the file, which stays valid JSON after every call. One process per rank (``pid`` = rank),
events in microseconds from the first call's start, every rank's clock set to rank 0's at the first
call (each rank reads its clock right after one barrier). A 2-rank call gives, per rank::

    call heat          [-----------------------------------------------]
    Scatterv T           [--]                       bytes_received 4096
    _Add__map heat.py:10     [-------]
    Gatherv T                          [--]         bytes_sent 4096
"""
from __future__ import annotations

import json
import os
import time
from typing import Dict, List, Optional, Tuple

from ..dace_compat.trace import Event, take_events
from ..mpi.distributed_memlet import DistributedMemlet, step_of_name
from ..solver.solve import comm_steps, solve_plan

__all__ = ["TraceFile", "is_step", "TAIL"]

#: How the file ends after every call: appending overwrites this tail.
TAIL = "\n]}\n"


def is_step(node) -> bool:
    """The nodes whose events are communication steps."""
    return isinstance(node, DistributedMemlet)


def _kernel_source(low, label: str) -> str:
    """The source line of the kernel an event of ``label`` belongs to, when its node kept none (a
    copy distsdfg made a map; a library node's expansion, ``_MatMult_gemm`` of kernel ``_MatMult_``):
    the kernels of that label, else of the longest label it starts with, if they share one line."""
    for match in (lambda k: k.label == label, lambda k: label.startswith(k.label)):
        kernels = [k for k in low.kernels if match(k) and k.source]
        if kernels:
            longest = max(len(k.label) for k in kernels)
            found = {k.source for k in kernels if len(k.label) == longest}
            return found.pop() if len(found) == 1 else ""
    return ""


class TraceFile:
    """A trace file written on one communicator; ``add_call`` is collective. The programs of a
    process that trace to one file share it (``TraceFile.open``): the file's first call in the
    process replaces what an earlier run left there, later calls of any of them append."""

    _shared: Dict[Tuple[str, int], "TraceFile"] = {}

    @classmethod
    def open(cls, path: str, comm) -> "TraceFile":
        key = (os.path.abspath(path), id(comm))
        if key not in cls._shared:
            cls._shared[key] = cls(path, comm)
        return cls._shared[key]

    def __init__(self, path: str, comm):
        self.path = os.path.abspath(path)
        self.comm = comm
        self.calls = 0
        self._origin: Optional[float] = None
        self._skew: Optional[List[float]] = None     # rank 0: per rank, its clock minus rank 0's
        self._bytes: Dict[Tuple, Dict[int, Tuple[str, List[int], List[int]]]] = {}

    def add_call(self, program, values: Dict, start: float, end: float, compiled) -> None:
        """Collective: this call's events of every rank, from ``start`` to ``end`` (microseconds of
        the system clock), appended to the file by rank 0."""
        if self._skew is None:      # each rank's clock against rank 0's, read right after one barrier
            self.comm.Barrier()
            times = self.comm.gather(time.time() * 1e6, root=0)
            self._skew = [t - times[0] for t in times] if self.comm.rank == 0 else []
        mine = (start, end, take_events(compiled))
        every = self.comm.gather(mine, root=0)
        if self.comm.rank != 0:
            return
        every = [(s - d, e - d, [ev._replace(t0=ev.t0 - d, t1=ev.t1 - d) for ev in evs])
                 for (s, e, evs), d in zip(every, self._skew)]
        steps = self._step_bytes(program, values, self.comm.size)
        if self._origin is None:
            self._origin = min(s for s, _, _ in every)
        out = [] if self.calls else self._metadata(program)
        for rank, (s, e, events) in enumerate(every):
            out.append(self._span(f"call {program.lowered.original_name}", "call", rank, s, e, {"call": self.calls}))
            out += [self._event(program.lowered, steps, rank, ev) for ev in events]
        self.calls += 1
        self._append(out)

    # -- events --------------------------------------------------------------------------------
    def _span(self, name: str, cat: str, rank: int, t0: float, t1: float, args: Dict) -> Dict:
        return {"name": name, "cat": cat, "ph": "X", "pid": rank, "tid": 0,
                "ts": round(t0 - self._origin, 3), "dur": round(max(t1 - t0, 0.0), 3), "args": args}

    def _event(self, low, steps, rank: int, ev: Event) -> Dict:
        label, _, source = ev.name.partition("|")
        index = step_of_name(label)
        if index is None:
            if not source:
                source = _kernel_source(low, label)
            where = source.split(" ", 1)[0]
            return self._span(f"{label} {where}".rstrip(), "kernel", rank, ev.t0, ev.t1,
                              {"source": source} if source else {})
        spec = next((s for s in low.steps if s.index == index), None)
        collectives, sent, received = steps.get(index, ("", [], []))
        array = spec.array if spec is not None else label
        args = {"step": index, "kind": spec.kind if spec is not None else "",
                "array": array, "collectives": collectives,
                "bytes_sent": sent[rank] if rank < len(sent) else 0,
                "bytes_received": received[rank] if rank < len(received) else 0}
        if spec is not None:
            args["kernel"] = spec.kernel_label
            source = low.kernel_source(spec)
            if source:
                args["source"] = source
        name = f"{collectives or (spec.kind if spec is not None else 'step')} {array}"
        return self._span(name, "mpi", rank, ev.t0, ev.t1, args)

    def _metadata(self, program) -> List[Dict]:
        out = []
        for rank in range(self.comm.size):
            out.append({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}"}})
            out.append({"name": "process_sort_index", "ph": "M", "pid": rank, "args": {"sort_index": rank}})
            out.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": 0,
                        "args": {"name": program.lowered.original_name}})
        return out

    def _step_bytes(self, program, values: Dict, P: int):
        """Per step index: its MPI calls ('Scatterv+Bcast', '' for a local copy) and the bytes
        every rank sends and receives in one run of it (``comm_report``'s figures)."""
        low = program.lowered
        key = (id(program),) + tuple(sorted((k, v) for k, v in values.items() if isinstance(v, int)))
        if key not in self._bytes:
            table: Dict[int, Tuple[str, List[int], List[int]]] = {}
            for cs in solve_plan(low, values, 1 if low.rank0_only else P):
                calls = comm_steps(cs, values)
                sent, received = [0] * P, [0] * P
                for c in calls:
                    for r, (s, q) in enumerate(zip(c.sent, c.received)):
                        sent[r] += int(s)
                        received[r] += int(q)
                names = "+".join(dict.fromkeys(c.collective for c in calls if sum(c.sent) or sum(c.received)))
                table[cs.spec.index] = (names, sent, received)
            self._bytes[key] = table
        return self._bytes[key]

    # -- the file ------------------------------------------------------------------------------
    def _append(self, events: List[Dict]) -> None:
        body = ",\n".join(json.dumps(e) for e in events)
        if not events:
            return
        if self.calls == 1 or not os.path.exists(self.path):
            with open(self.path, "w") as f:
                f.write('{"displayTimeUnit": "ms", "otherData": {"producer": "distsdfg"}, "traceEvents": [\n'
                        + body + TAIL)
            return
        with open(self.path, "r+b") as f:
            f.seek(-len(TAIL), os.SEEK_END)
            f.write((",\n" + body + TAIL).encode())
            f.truncate()
