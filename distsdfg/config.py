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
| ``DISTSDFG_CRASH_REPORT`` | ``1`` | a rank that crashes inside a compiled program (segfault, abort) prints its rank, the program and the communication step it was in or had last finished, with that step's kernel and source line, then Python's stack (``distsdfg.runtime.crash``; ``0``: no handler is installed) |
| ``DISTSDFG_NUMPY_SLICES`` | ``1`` | inside ``numpy_semantics()``: a slice of extent one keeps its dimension, as in NumPy (``distsdfg.dace_compat.slices``) |
| ``DISTSDFG_NUMPY_FUNCTIONS`` | ``1`` | inside ``numpy_semantics()``: ``np.clip``, ``np.var``, ``np.cumsum``, ``argmax``, ... parse as DaCe operations instead of callbacks (``dace_compat.npfuncs``, ``dace_compat.nparrays``) |
| ``DISTSDFG_PYTHON_DIVISION`` | ``1`` | inside ``numpy_semantics()``: ``//`` and ``%`` with Python's signs, ``np.sum`` of booleans counts (``dace_compat.pyops``) |
| ``DISTSDFG_WHILE_FLAGS`` | ``1`` | inside ``numpy_semantics()``: a program DaCe cannot parse is parsed once more with its ``while`` conditions kept in flags and its locals named like SymPy functions renamed (``while diff > tol and steps < max_steps:``; ``dace_compat.whiles``) |
| ``DISTSDFG_TASKLET_INDEX`` | ``1`` | inside ``numpy_semantics()``: a tasklet's ``_w[p, q]`` on a plane keeps both indices (``dace_compat.tasklet_index``) |
| ``DISTSDFG_OPTIMIZE`` | ``1`` | rank-local optimisation after tiling when ``lower(..., optimize=None)`` (``distsdfg.lowering.optimize``) |
| ``DISTSDFG_REBUILD`` | ``0`` | ``1``: build every program again instead of reusing an unchanged build |
| ``DISTSDFG_CMAKE`` | ``0`` | ``1``: build through DaCe's CMake instead of the direct compiler calls (``docs/building.md``) |
| ``DISTSDFG_PCH`` | ``1`` | precompiled headers for the direct GCC build |
| ``DISTSDFG_BUILD_TYPE`` | DaCe's, ``Release`` for its default | CMake build type of the programs distsdfg builds |
| ``DISTSDFG_CALL_TIMEOUT`` | ``30`` | seconds a rank waits at a call's start for the others (0 or negative: no limit) |
| ``DISTSDFG_PACK_SYMBOLS_ABOVE`` | ``256`` | a program with more per-rank symbols passes them packed in one array |
| ``DISTSDFG_CUDA_ARCH`` | the GPU's | CUDA architecture of ``target="gpu"`` builds |
| ``DISTSDFG_FINITE_MATH`` | ``0`` | ``1``: programs that test ``isnan``/``isinf`` are built with DaCe's ``-ffast-math`` unchanged (by default ``-fno-finite-math-only`` is added for them) |
"""
from __future__ import annotations

import dataclasses
import os

__all__ = ["Flag", "Text", "Setting", "WHOLE_WHEN_CHEAPER", "PREFUSE", "OWN_GEMV", "STEP_TIMES", "TRACE_FILE", "CRASH_REPORT",
           "NUMPY_SLICES", "NUMPY_FUNCTIONS", "PYTHON_DIVISION", "TASKLET_INDEX", "WHILE_FLAGS", "FINITE_MATH", "OPTIMIZE",
           "REBUILD", "CMAKE_BUILD", "PCH", "BUILD_TYPE", "CALL_TIMEOUT", "PACK_SYMBOLS_ABOVE", "CUDA_ARCH",
           "SPLIT_GAIN", "FLAGS", "SETTINGS"]


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
CRASH_REPORT = Flag("DISTSDFG_CRASH_REPORT", True, "a crashing rank names its rank, program and step on stderr")

#: A split schedule must be priced at least this many times faster than the whole program on one
#: rank to be chosen: the time model does not see every per-call and per-step cost of a split program.
SPLIT_GAIN = 1.5

NUMPY_SLICES = Flag("DISTSDFG_NUMPY_SLICES", True, "a slice of extent one keeps its dimension, as in NumPy")
NUMPY_FUNCTIONS = Flag("DISTSDFG_NUMPY_FUNCTIONS", True, "NumPy functions DaCe leaves as callbacks parse as DaCe operations")
PYTHON_DIVISION = Flag("DISTSDFG_PYTHON_DIVISION", True, "// and % with Python's signs; np.sum of booleans counts")
TASKLET_INDEX = Flag("DISTSDFG_TASKLET_INDEX", True, "a tasklet's multi-dimensional access keeps one index per connector dim")
WHILE_FLAGS = Flag("DISTSDFG_WHILE_FLAGS", True, "while conditions DaCe cannot parse are kept in flags (parsed again)")
FINITE_MATH = Flag("DISTSDFG_FINITE_MATH", False, "keep -ffast-math's finite-math assumption for programs testing isnan/isinf")

OPTIMIZE = Flag("DISTSDFG_OPTIMIZE", True, "rank-local optimisation after tiling")
REBUILD = Flag("DISTSDFG_REBUILD", False, "build every program again")
CMAKE_BUILD = Flag("DISTSDFG_CMAKE", False, "build through DaCe's CMake")
PCH = Flag("DISTSDFG_PCH", True, "precompiled headers for the direct GCC build")

FLAGS = (WHOLE_WHEN_CHEAPER, PREFUSE, OWN_GEMV, STEP_TIMES, TRACE_FILE, CRASH_REPORT, NUMPY_SLICES, NUMPY_FUNCTIONS,
         PYTHON_DIVISION, TASKLET_INDEX, WHILE_FLAGS, FINITE_MATH, OPTIMIZE, REBUILD, CMAKE_BUILD, PCH)


@dataclasses.dataclass(frozen=True)
class Setting:
    """A valued setting: ``get()`` is the variable's text, ``default`` where it is unset or empty."""
    env: str
    default: str
    doc: str

    def get(self) -> str:
        return os.environ.get(self.env, "").strip() or self.default


BUILD_TYPE = Setting("DISTSDFG_BUILD_TYPE", "", "CMake build type of distsdfg's builds (empty: DaCe's, Release for its default)")
CALL_TIMEOUT = Setting("DISTSDFG_CALL_TIMEOUT", "30", "seconds a rank waits at a call's start for the others")
PACK_SYMBOLS_ABOVE = Setting("DISTSDFG_PACK_SYMBOLS_ABOVE", "256", "per-rank symbols passed one by one at most")
CUDA_ARCH = Setting("DISTSDFG_CUDA_ARCH", "", "CUDA architecture of GPU builds (empty: the local GPU's)")

SETTINGS = (BUILD_TYPE, CALL_TIMEOUT, PACK_SYMBOLS_ABOVE, CUDA_ARCH)
