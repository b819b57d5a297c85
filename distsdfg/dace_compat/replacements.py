"""DaCe's NumPy replacement functions by name, wherever the installed DaCe defines them: one module
``dace.frontend.python.replacements`` in DaCe 1.0.2, a package of modules by topic in DaCe 2.0
(``replacements.array_manipulation._transpose``, ``replacements.reduction._sum``, ...)."""
from __future__ import annotations

import functools
import importlib
import pkgutil
from types import ModuleType

__all__ = ["ops", "defining_module"]


@functools.lru_cache(maxsize=None)
def _modules() -> tuple:
    """DaCe's replacement modules: the module itself, then (DaCe 2.0) its submodules that import here
    (``ai`` needs ONNX, which only DaCe's ML extra brings)."""
    from dace.frontend.python import replacements
    found = [replacements]
    for info in pkgutil.iter_modules(getattr(replacements, "__path__", [])):
        try:
            found.append(importlib.import_module(f"{replacements.__name__}.{info.name}"))
        except ImportError:
            continue
    return tuple(found)


def defining_module(name: str) -> ModuleType:
    """The module that defines the replacement ``name`` (e.g. ``"_transpose"``)."""
    for mod in _modules():
        if name in vars(mod):
            return mod
    raise AttributeError(f"DaCe has no NumPy replacement {name!r} in dace.frontend.python.replacements")


class _Ops:
    """``ops._sum`` reads, and ``ops._sum = f`` replaces, the function in the module that defines it."""

    def __getattr__(self, name: str):
        return getattr(defining_module(name), name)

    def __setattr__(self, name: str, value) -> None:
        setattr(defining_module(name), name, value)


ops = _Ops()
