"""DaCe 1.0.2's debug information of nodes added to a state, read from the caller's frame.

DaCe 1.0.2's ``sdfg.state._getdebuginfo`` (the file and line that called an ``add_*`` method) calls
``inspect.stack()``, which formats every frame of the stack with its source line: ~0.05 s per node
added under a lowering's deep call stack, seconds per program and minutes for a torch model's
hundreds of kernels. ``install`` gives the same ``DebugInfo`` from ``sys._getframe`` for a
``numpy_semantics()`` block (``semantics.py``); other DaCe versions are left as they are.
"""
from __future__ import annotations

import sys

import dace
from dace import dtypes

__all__ = ["install"]


def _caller_debuginfo(old_dinfo=None) -> dtypes.DebugInfo:
    if old_dinfo is not None:
        return old_dinfo
    frame = sys._getframe(2)
    return dtypes.DebugInfo(frame.f_lineno, 0, frame.f_lineno, 0, frame.f_code.co_filename)


def install(patches) -> None:
    from dace.sdfg import state as _state
    if getattr(_state, "_getdebuginfo", None) is not None and dace.__version__ == "1.0.2":
        patches.set(_state, "_getdebuginfo", _caller_debuginfo)
