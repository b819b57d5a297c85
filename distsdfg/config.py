"""Settings read from the environment, declared in one place.

Each ``Flag`` names its environment variable, its default and what it does; read it with
``FLAG.get()`` (``WHOLE_WHEN_CHEAPER.get()``), which reads the environment at that moment, so
a test or a launcher may set the variable before any call.

| variable | default | what |
|---|---|---|
| ``DISTSDFG_WHOLE`` | ``1`` | a program lowered for one rank, and ``lower(sdfg, "auto", nprocs=P)`` when the planner's time model prices the best split schedule at more than ``1 / SPLIT_GAIN`` of the whole program on one rank, runs whole on rank 0 as DaCe alone builds it (``distsdfg.lowering.whole``; ``0``: the general lowering, and the planner always splits) |
| ``DISTSDFG_GEMV`` | ``1`` | matrix-vector products in programs built with OpenBLAS run distsdfg's streaming loops (``distsdfg/lowering/include/distsdfg_gemv.h``: one thread, unit strides; the other calls and ``0``: OpenBLAS's ``cblas_?gemv``) |
| ``DISTSDFG_PREFUSE`` | ``1`` | ``lower(sdfg, "auto", nprocs=P)`` fuses the program's maps as DaCe's ``auto_optimize`` does before planning (``0``: plan the maps as written) |
| ``DISTSDFG_STEP_TIMES`` | ``0`` | every call prints on stderr its time and the time in the compiled program, every communication step its own (the runtime header reads it too), after a legend on rank 0 of what each step moves, for which kernel and source line |
| ``DISTSDFG_TRACE`` | (unset) | ``FILE.json``: programs compiled while it is set record every rank's kernels and communication steps, with their bytes, and every call appends them to this Chrome trace (``distsdfg.runtime.trace``; ``compile(sdfg, trace=FILE)`` for one program) |
"""
from __future__ import annotations

import dataclasses
import os

__all__ = ["Flag", "Text", "WHOLE_WHEN_CHEAPER", "PREFUSE", "OWN_GEMV", "STEP_TIMES", "TRACE_FILE", "SPLIT_GAIN",
           "FLAGS"]


@dataclasses.dataclass(frozen=True)
class Flag:
    """A boolean setting: ``env`` unset or empty gives ``default``; ``0``, ``false``, ``no``, ``off`` turn it off."""
    env: str
    default: bool
    doc: str

    def get(self) -> bool:
        v = os.environ.get(self.env, "").strip().lower()
        if not v:
            return self.default
        return v not in ("0", "false", "no", "off")


@dataclasses.dataclass(frozen=True)
class Text:
    """A text setting (a file name): ``env`` unset or blank gives ''."""
    env: str
    doc: str

    def get(self) -> str:
        return os.environ.get(self.env, "").strip()


WHOLE_WHEN_CHEAPER = Flag("DISTSDFG_WHOLE", True,
                          "run the whole program on rank 0 when the time model says splitting does not pay")
PREFUSE = Flag("DISTSDFG_PREFUSE", True, "fuse maps as DaCe's auto_optimize does before planning an auto schedule")
OWN_GEMV = Flag("DISTSDFG_GEMV", True, "matrix-vector products of OpenBLAS builds run distsdfg's streaming loops")
STEP_TIMES = Flag("DISTSDFG_STEP_TIMES", False, "print every call's and every communication step's time on stderr")
TRACE_FILE = Text("DISTSDFG_TRACE", "the Chrome trace file that compiled programs append every call's kernels and steps to")

#: A split schedule must be priced at least this many times faster than the whole program on one
#: rank to be chosen: the time model does not see every per-call and per-step cost of a split program.
SPLIT_GAIN = 1.5

FLAGS = (WHOLE_WHEN_CHEAPER, PREFUSE, OWN_GEMV, STEP_TIMES, TRACE_FILE)
