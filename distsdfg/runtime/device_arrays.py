"""CuPy arguments of a compiled program: which arguments are device arrays, their copies to the
host and back where a call cannot take them on the device, and the wait for the caller's stream
where it can (``distsdfg.lowering.device_args``). CuPy is imported only when a call holds its arrays."""
from __future__ import annotations

from typing import Any, Dict

import numpy as np


def is_cupy(value) -> bool:
    """A CuPy array (checked without importing CuPy)."""
    return type(value).__module__.split(".")[0] == "cupy" and hasattr(value, "get")


def on_device(value) -> bool:
    """A CuPy array whose device pointer a compiled program can take (``__cuda_array_interface__``)."""
    return is_cupy(value) and hasattr(value, "__cuda_array_interface__")


def is_array(value) -> bool:
    return isinstance(value, np.ndarray) or on_device(value)


def to_host(kwargs: Dict[str, Any], keep=()) -> Dict[str, Any]:
    """Replace this rank's CuPy arguments in ``kwargs`` (but those named in ``keep``) by host copies
    (``.get()``); returns the CuPy ones replaced."""
    devices = {k: v for k, v in kwargs.items() if is_cupy(v) and k not in keep}
    kwargs.update({k: v.get() for k, v in devices.items()})
    return devices


def wait_for_callers_stream() -> None:
    """The caller's CuPy work that fills the device arguments may still be queued on CuPy's current
    stream, and the compiled program runs on DaCe's own streams, created non-blocking (they do not
    wait for other streams): finish that work first. (The program waits for its own streams before
    it returns, so its results are complete when the caller gets them.)"""
    import cupy
    cuda = getattr(cupy, "cuda", None)
    if cuda is not None:
        cuda.get_current_stream().synchronize()


def back_to_device(devices: Dict[str, Any], kwargs: Dict[str, Any], written, out):
    """After a call on host copies: the arrays the program wrote copied into the caller's CuPy
    arrays, its results as CuPy arrays."""
    import cupy
    for k, v in devices.items():
        if k in written:
            host, shape = kwargs[k], getattr(v, "shape", None)
            if shape is not None and getattr(host, "shape", shape) != shape:    # passed with size-1 dimensions
                host = host.reshape(shape)
            if hasattr(v, "set"):       # CuPy: one host-to-device copy into the caller's array
                v.set(np.ascontiguousarray(host))
            else:
                v[...] = cupy.asarray(host)
    if isinstance(out, tuple):
        return tuple(cupy.asarray(o) if isinstance(o, np.ndarray) else o for o in out)
    return cupy.asarray(out) if isinstance(out, np.ndarray) else out
