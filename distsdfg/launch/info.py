"""``distsdfg info``: what this installation runs with (versions, the BLAS, the compilers)."""
from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from typing import List, Optional, Tuple

__all__ = ["report", "rows"]


def _first_line(argv: List[str], match: str = "") -> Optional[str]:
    """The first output line of ``argv`` (containing ``match``), None when it does not run."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln.strip() for ln in (out.stdout + out.stderr).splitlines() if ln.strip() and match in ln]
    return lines[0] if lines else None


def _version(module: str) -> str:
    try:
        mod = __import__(module)
    except Exception as exc:        # noqa: BLE001 - report whatever keeps it from importing
        return f"not importable ({type(exc).__name__}: {exc})"
    return str(getattr(mod, "__version__", "?"))


def _mpi() -> str:
    try:
        from mpi4py import MPI
        lib = " ".join(MPI.Get_library_version().strip().splitlines()[0].split())
        return f"{lib} (MPI {'.'.join(map(str, MPI.Get_version()))})"
    except Exception as exc:        # noqa: BLE001
        return f"unavailable ({type(exc).__name__}: {exc})"


def _numpy_blas() -> str:
    try:
        import numpy as np
        dep = np.__config__.CONFIG["Build Dependencies"]["blas"]
        return f"{dep.get('name', '?')} {dep.get('version', '')}".strip()
    except Exception:               # noqa: BLE001 - older NumPy has no CONFIG
        return "?"


def _mkl_row() -> str:
    """Whether the optional MKL backend could be chosen, and how to get it."""
    from ..lowering import blas
    found, _ = blas.find_mkl()
    if found is None:
        return f"not installed (optional: {blas.MKL_FIX})"
    return f"installed, {found[1]} ({blas.BACKEND_ENV}=mkl uses it)"


def rows() -> List[Tuple[str, str]]:
    """(label, value) pairs, in the order ``report`` prints them."""
    import os

    import distsdfg
    from ..lowering import blas
    from .. import dace_compat as dc
    from ..lowering.gpu import nvcc_path
    b = blas.info()
    out = [("distsdfg", f"{distsdfg.__version__} ({os.path.dirname(os.path.abspath(distsdfg.__file__))})"),
           ("DaCe", _version("dace")),
           ("NumPy", f"{_version('numpy')} (its BLAS: {_numpy_blas()})"),
           ("mpi4py", _version("mpi4py")),
           ("MPI library", _mpi())]
    if b.optimized:
        out += [("BLAS", " ".join(filter(None, [b.name, b.version]))),
                ("BLAS library", b.library + (f" -> {b.source}" if b.source else "")),
                ("BLAS header", b.include or "?"),
                ("DaCe BLAS expansion", b.implementation),
                ("BLAS chosen by", f"{b.chosen_by or 'default'} ({blas.BACKEND_ENV}=openblas|mkl overrides)")]
    else:
        out += [("BLAS", f"NONE: matrix products run DaCe's reference loops ({b.missing}); fix: {blas.FIX}")]
    if b.implementation != "MKL":
        out += [("Intel MKL", _mkl_row())]
    layer = (f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}" if b.implementation == "OpenBLAS"
             else f"MKL threading layer {os.environ.get('MKL_THREADING_LAYER', 'default')}")
    out += [("threads per rank", f"{blas.threads_per_rank()} ({layer})")]
    cxx = dc.cxx_compiler()
    out += [("C++ compiler", f"{cxx}: {_first_line([cxx, '--version']) or 'not found'}")]
    cmake = shutil.which("cmake")
    out += [("CMake", f"{cmake}: {_first_line([cmake, '--version'])}" if cmake else "not found (DaCe needs it)")]
    nvcc = nvcc_path()
    out += [("nvcc", f"{nvcc}: {_first_line([nvcc, '--version'], 'release')}" if nvcc else "not found")]
    from ..planner.timemodel import load_rates
    try:
        rates = load_rates().describe()
    except (OSError, ValueError, KeyError) as exc:          # an unreadable calibration file
        rates = f"calibration file unreadable ({exc}); fix: run `distsdfg calibrate`"
    out += [("planner rates", rates)]
    out += [("Python", f"{platform.python_version()} ({sys.executable})"),
            ("platform", f"{platform.system()} {platform.machine()}")]
    return out


def report() -> str:
    r = rows()
    width = max(len(k) for k, _ in r)
    return "\n".join(f"{k + ':':{width + 1}s} {v}" for k, v in r)
