"""NumPy's semantics for the programs distsdfg parses, lowers and builds, and for those only.

DaCe's Python frontend and C++ code generator differ from NumPy in a few places where the result is
silently wrong (``-7 // 2``, ``pos[:, 0:1]``'s shape, ``np.sum`` of a boolean array, ``np.isnan``
under ``-ffast-math``) or does not parse (``np.clip``, ``np.var``, ...). The modules of this adapter
hold one fix each; ``numpy_semantics()`` applies all of them while its block runs and gives DaCe
back exactly as it was when the outermost block ends. distsdfg's own entry points (``lower``,
``compile``, the planner's ``auto_schedule``, ``explain`` and ``schedule_cost``, the torch frontend,
the command line, the build at a program's first call) run inside it; importing distsdfg changes nothing in DaCe, so a program DaCe
alone parses and compiles behaves the same with distsdfg imported.

A program parsed by the user (``prog.to_sdfg()``) gets NumPy's slice shapes and NumPy functions
when parsed inside the block::

    with distsdfg.numpy_semantics():
        sdfg = prog.to_sdfg()

Each fix has a switch in ``distsdfg.config`` (``DISTSDFG_NUMPY_SLICES=0``, ...). Blocks nest and
may be entered from several threads; while any block runs, the fixes apply to every parse and build
in the process.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Callable, List, Tuple

__all__ = ["Patches", "numpy_semantics", "with_numpy_semantics", "parse", "register", "refresh", "active"]

_MISSING = object()


class Patches:
    """The changes one ``numpy_semantics()`` block made to DaCe, undone in reverse order.

    ``set(owner, name, value)`` replaces an attribute of a class or module (the raw entry of its
    ``__dict__`` is kept, so a ``staticmethod`` comes back as one); ``put(mapping, key, value)``
    an entry of a registry dictionary."""

    def __init__(self) -> None:
        self._undo: List[Callable[[], None]] = []

    def set(self, owner, name: str, value) -> None:
        old = vars(owner).get(name, _MISSING)
        setattr(owner, name, value)
        self._undo.append(lambda: delattr(owner, name) if old is _MISSING else setattr(owner, name, old))

    def put(self, mapping, key, value) -> None:
        old = mapping.get(key, _MISSING)
        mapping[key] = value
        self._undo.append(lambda: mapping.pop(key, None) if old is _MISSING else mapping.__setitem__(key, old))

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


#: (name, installer) registered from later stages (the BLAS choice), applied after the adapter's own fixes.
_FIXES: List[Tuple[str, Callable[[Patches], None]]] = []
_lock = threading.RLock()
_depth = 0
_current: Patches = Patches()


def register(name: str, install: Callable[[Patches], None]) -> None:
    """Add a fix (``install(patches)``) that ``numpy_semantics()`` applies after the adapter's own; a
    name registered again replaces the earlier installer."""
    with _lock:
        _FIXES[:] = [(n, f) for n, f in _FIXES if n != name] + [(name, install)]


def refresh(name: str) -> None:
    """Apply the registered fix ``name`` again inside a running block (its setting changed, e.g. the
    BLAS switched by ``configure(force=True)``); undone with the block."""
    with _lock:
        if _depth:
            for n, install in _FIXES:
                if n == name:
                    install(_current)


def active() -> bool:
    """Whether a ``numpy_semantics()`` block is running."""
    return _depth > 0


@contextlib.contextmanager
def numpy_semantics():
    """Apply the registered fixes to DaCe for the duration of the block (see the module's docstring)."""
    global _depth, _current
    with _lock:
        if _depth == 0:
            patches = Patches()
            try:
                for _, install in _builtin_fixes() + _FIXES:
                    install(patches)
            except BaseException:
                patches.undo()
                raise
            _current = patches
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _current.undo()


def with_numpy_semantics(func):
    """Decorator: ``func`` runs inside ``numpy_semantics()``."""
    @functools.wraps(func)
    def inside(*args, **kwargs):
        with numpy_semantics():
            return func(*args, **kwargs)
    return inside


def _builtin_fixes() -> List[Tuple[str, Callable[[Patches], None]]]:
    """The adapter's own fixes, in the order they apply."""
    from . import build, debuginfo, npfuncs, nparrays, ordered, pyops, slices, tasklet_index, whiles
    return [("debuginfo", debuginfo.install), ("ordered_elimination", ordered.install),
            ("slices", slices.install), ("numpy_functions", npfuncs.install),
            ("numpy_array_functions", nparrays.install), ("python_division", pyops.install_division),
            ("boolean_sums", pyops.install_sums), ("tasklet_index", tasklet_index.install),
            ("while_flags", whiles.install),
            ("special_values", build.install_special_values)]


def parse(prog, *args, **kwargs):
    """``prog.to_sdfg(*args, **kwargs)`` inside ``numpy_semantics()``."""
    with numpy_semantics():
        return prog.to_sdfg(*args, **kwargs)
