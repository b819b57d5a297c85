"""What a rank that crashes inside a compiled program says: its rank, the program, and the step.

A segfault (or abort, bus error, floating-point trap) inside compiled code kills the rank before
Python can say anything; MPI's launcher then reports only ``BAD TERMINATION ... signal 11``. With
``$DISTSDFG_CRASH_REPORT`` on (the default), every program library gets the address of one marker
per process (``mpi/include/distsdfg_crash.h``): its communication steps store their index in it (two
stores a step), and each call stores its program's legend (``step_legend``: the program's name, then
what each step moves, for which kernel and source line) and -1 before it starts (two stores a call).
A signal handler, installed once per process from a program library that is then never unloaded,
prints one line on stderr, e.g. on 2 ranks::

    distsdfg: rank 1 crashed (SIGSEGV, address 0x7f3c5a2f9000) in `scatter_add`, after step 0
    (scatter `idx` for `scatter_add_map` (prog.py:12)) and before step 1 (gather `out` for
    `scatter_add_map` (prog.py:12)): in the kernels between them

and passes the signal on to the handler installed before it: Python's ``faulthandler`` (enabled here
if it was not) then prints the Python stack of the call, and the process ends as it would have.
"""
from __future__ import annotations

import ctypes
import faulthandler
import os
from typing import Optional

from .. import dace_compat as dc
from ..config import CRASH_REPORT

__all__ = ["Marker", "CrashReport", "attach"]


class Marker(ctypes.Structure):
    """``distsdfg_crash_marker`` of the runtime header: the rank, the step (its index while it runs,
    ``-2 - index`` once it finished, -1 before the call's first), the current call's legend."""
    _fields_ = [("rank", ctypes.c_int64), ("step", ctypes.c_int64), ("legend", ctypes.c_void_p)]


#: The process's marker (every program library points at it) and whether its handler is installed.
_MARKER = Marker(-1, -1, None)
_installed = False


def legend_text(low) -> bytes:
    """The legend the handler quotes: the program's name, then one line per step in step order."""
    lines = {}
    for st in low.steps:
        source = low.kernel_source(st)
        lines[st.index] = f"{st.kind} `{st.array}` for `{st.kernel_label}`" + (f" ({source})" if source else "")
    n = max(lines, default=-1) + 1
    text = "\n".join([low.original_name] + [lines.get(i, "?") for i in range(n)]) + "\n"
    return text.encode("ascii", "replace")


class CrashReport:
    """One program's part: its legend, stored in the marker before each of its calls (``enter``)."""

    __slots__ = ("_legend", "_address")

    def __init__(self, legend: bytes):
        self._legend = ctypes.create_string_buffer(legend)
        self._address = ctypes.addressof(self._legend)

    def enter(self) -> None:
        """Before a call of the program."""
        _MARKER.legend = self._address
        _MARKER.step = -1

    def leave(self) -> None:
        """After it (a crash now is outside the programs' calls; the legend may be freed)."""
        _MARKER.legend = None

    def __del__(self):
        if _MARKER.legend == self._address:
            _MARKER.legend = None


def attach(compiled, low, rank: int) -> Optional[CrashReport]:
    """Point ``compiled``'s library at the process's marker, and install the handler from it if none
    is yet (enabling ``faulthandler`` first, so that it runs after ours); None when the report is off
    or the library has no marker (a build of an older runtime)."""
    global _installed
    if not CRASH_REPORT.get():
        return None
    found = dc.library_symbol(compiled, "__distsdfg_crash_marker")
    if found is None:
        return None
    ctypes.c_void_p.from_address(found[0]).value = ctypes.addressof(_MARKER)
    _MARKER.rank = rank
    if not _installed:
        install = dc.library_symbol(compiled, "__distsdfg_crash_install")
        if install is not None and _pin(found[1]):
            if not faulthandler.is_enabled():
                try:
                    faulthandler.enable()
                except (OSError, ValueError, RuntimeError):     # a stderr without a file descriptor
                    pass
            ok = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(install[0])(ctypes.addressof(_MARKER))
            _installed = ok == 0
    return CrashReport(legend_text(low))


def _pin(path: str) -> bool:
    """Keep the loaded library at ``path`` loaded for the life of the process (its handler stays
    installed): ``dlopen`` with ``RTLD_NOLOAD | RTLD_NODELETE``."""
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NODELETE | os.RTLD_LAZY)
        return True
    except (OSError, AttributeError):
        return False
