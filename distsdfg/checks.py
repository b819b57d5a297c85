"""Checks of what users pass to the public API, each refusal naming the item and a fix."""
from __future__ import annotations

import numbers
from typing import Dict, Mapping

from dace.sdfg import SDFG

from .errors import NotAnSDFGError, SizeError, TorchFrontendError

__all__ = ["require_sdfg", "positive_int", "check_sizes", "require_module", "example_tensors"]


def require_sdfg(obj, what: str) -> None:
    """Refuse anything but an SDFG, saying how to get one from what was given."""
    if isinstance(obj, SDFG):
        return
    hint = ""
    if hasattr(obj, "to_sdfg"):
        hint = "; call .to_sdfg() on the program first (sdfg = prog.to_sdfg())"
    elif isinstance(getattr(obj, "sdfg", None), SDFG):
        hint = "; pass its .sdfg"
    raise NotAnSDFGError(f"{what} takes a dace SDFG, got {type(obj).__name__}{hint}")


def _integral(v) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, numbers.Integral):
        return True
    return isinstance(v, numbers.Real) and float(v).is_integer()


def positive_int(value, what: str) -> int:
    """``value`` as an int if it is a positive integer (a rank count), else a SizeError."""
    if not _integral(value) or int(value) < 1:
        raise SizeError(f"{what} must be a positive integer (a number of ranks), got {value!r} "
                        f"({type(value).__name__})")
    return int(value)


def check_sizes(sdfg: SDFG, sizes: Mapping[str, object], what: str) -> Dict[str, int]:
    """Size-symbol values given as keywords: every name a symbol or scalar argument of ``sdfg``,
    every symbol's value a non-negative integer. Returns them as ints (scalars left as given)."""
    out = {}
    for name, v in sizes.items():
        if name in sdfg.symbols:
            if not _integral(v) or int(v) < 0:
                raise SizeError(f"{what}: size `{name}` must be a non-negative integer, got {v!r}")
            out[name] = int(v)
        elif name in sdfg.arrays and not sdfg.arrays[name].transient:
            out[name] = v          # a scalar argument (e.g. a loop count)
        else:
            known = sorted(s for s in sdfg.free_symbols if not str(s).startswith("__dsdfg"))
            raise SizeError(f"{what}: `{name}` is not a size symbol of `{sdfg.name}` "
                            f"(its symbols: {', '.join(map(str, known)) or 'none'}); check the spelling")
    return out


def require_module(module, what: str) -> None:
    """Refuse anything but a ``torch.nn.Module``."""
    import torch
    if not isinstance(module, torch.nn.Module):
        raise TorchFrontendError(f"{what} takes a torch.nn.Module, got {type(module).__name__}; wrap a function "
                                 f"in a Module whose forward calls it")


def example_tensors(value, what: str) -> tuple:
    """A tensor, an array or a sequence of them as a tuple of tensors (arrays converted)."""
    import numpy as np
    import torch
    items = (value,) if isinstance(value, (torch.Tensor, np.ndarray)) else value
    if not isinstance(items, (tuple, list)):
        raise TorchFrontendError(f"{what} must be a tensor or a tuple of tensors, got {type(value).__name__}")
    out = []
    for k, v in enumerate(items):
        if isinstance(v, np.ndarray):
            v = torch.from_numpy(np.ascontiguousarray(v))
        if not isinstance(v, torch.Tensor):
            raise TorchFrontendError(f"{what}[{k}] is a {type(v).__name__}; only tensors (or NumPy arrays) are "
                                     f"supported as inputs")
        out.append(v)
    return tuple(out)
