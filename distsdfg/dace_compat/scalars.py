"""Adapter (DaCe 1.0.2): complex scalar arguments become one-element arrays.

DaCe 1.0.2 hands a scalar argument to the compiled program through the ctypes type of its
dtype table, which for ``complex128`` is ``c_longdouble`` and for ``complex64`` ``c_uint64``:
the C function reads garbage (``H * s`` with ``s: dace.complex128`` is wrong with DaCe alone).
Arrays travel as pointers, which DaCe gets right for every dtype. ``box_complex_scalars``
turns each complex scalar argument ``s`` of an SDFG into an array of shape ``(1,)``: every
memlet of a scalar reads its element 0, so the program's meaning is unchanged; the call path
(``box_arguments``) turns the caller's Python or NumPy complex into ``np.array([s])``.
Example: ``def f(H: dace.complex128[N, N], s: dace.complex128): return H * s`` is called as
``fn(H=H, s=0.3 + 0.7j)`` and runs as if ``s`` were ``dace.complex128[1]`` read as ``s[0]``.
"""
from __future__ import annotations

from typing import Dict, Tuple

import dace
import numpy as np
from dace import data as dt
from dace.sdfg import SDFG

__all__ = ["box_complex_scalars", "box_arguments", "COMPLEX_DTYPES"]

COMPLEX_DTYPES = (dace.complex64, dace.complex128)


def box_complex_scalars(sdfg: SDFG) -> Tuple[str, ...]:
    """Replace every complex scalar argument of ``sdfg`` (not its nested SDFGs', which get the value
    through a memlet) by a one-element array of the same dtype; returns the names, in order."""
    boxed = []
    for name, desc in list(sdfg.arrays.items()):
        if isinstance(desc, dt.Scalar) and not desc.transient and desc.dtype in COMPLEX_DTYPES:
            sdfg.arrays[name] = dt.Array(desc.dtype, [1], storage=desc.storage)
            boxed.append(name)
    return tuple(boxed)


def box_arguments(kwargs: Dict[str, object], boxed: Tuple[str, ...], sdfg: SDFG) -> None:
    """In place: the caller's values of the boxed arguments as one-element arrays of the program's
    dtype (a Python or NumPy number or a 0-d array; an array of one element is left as it is)."""
    for name in boxed:
        v = kwargs.get(name)
        if v is None or isinstance(v, np.ndarray) and v.ndim > 0:
            continue
        if isinstance(v, (bool, int, float, complex, np.number, np.ndarray)):      # a 0-d array too
            kwargs[name] = np.array([v], dtype=sdfg.arrays[name].dtype.as_numpy_dtype())     # owns its memory
