"""DaCe's NumPy replacement functions by name, wherever the installed DaCe defines them: one module
``dace.frontend.python.replacements`` in DaCe 1.0.2, a package of modules by topic in DaCe 2.0
(``replacements.array_manipulation._transpose``, ``replacements.reduction._sum``, ...)."""
from __future__ import annotations

import functools
import importlib
import pkgutil
from types import ModuleType

__all__ = ["ops", "defining_module", "convert"]


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


#: DaCe 1.0.2's names of replacements that DaCe 2.0 renamed, and their DaCe 2.0 names (same signatures).
RENAMED = {"_elementwise": "elementwise", "_reduce": "reduce"}


def _name_in(mod: ModuleType, name: str):
    """``name``, or its DaCe 2.0 name, where ``mod`` defines it; None where it does not."""
    for n in (name, RENAMED.get(name)):
        if n and n in vars(mod):
            return n
    return None


def defining_module(name: str) -> ModuleType:
    """The module that defines the replacement ``name`` (e.g. ``"_transpose"``)."""
    for mod in _modules():
        if _name_in(mod, name):
            return mod
    raise AttributeError(f"DaCe has no NumPy replacement {name!r} in dace.frontend.python.replacements")


class _Ops:
    """``ops._sum`` reads, and ``ops._sum = f`` replaces, the function in the module that defines it."""

    def __getattr__(self, name: str):
        mod = defining_module(name)
        return getattr(mod, _name_in(mod, name))

    def __setattr__(self, name: str, value) -> None:
        mod = defining_module(name)
        setattr(mod, _name_in(mod, name), value)


ops = _Ops()


def convert(sdfg, state, a: str, dtype) -> str:
    """DaCe's out-of-place conversion of array ``a`` to ``dtype`` (``_datatype_converter``; DaCe 2.0
    also takes a name for the new array): the converted array's name."""
    import inspect
    func = ops._datatype_converter
    if "name_hint" in inspect.signature(func).parameters:
        return func(sdfg, state, a, dtype, name_hint=f"{a}_as_{dtype.to_string()}")[0]
    return func(sdfg, state, a, dtype)[0]
