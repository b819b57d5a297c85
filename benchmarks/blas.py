"""Which BLAS the compiled programs use: Intel MKL from the ``mkl-devel`` wheel where installed.

The wheel puts ``mkl.h`` in ``<prefix>/include`` and versioned libraries (``libmkl_rt.so.3``)
in ``<prefix>/lib``, but DaCe's MKL environment looks for ``$MKLROOT/lib/libmkl_rt.so``. So
``configure()`` lays out an ``MKLROOT`` in the cache folder (links to the wheel's files),
exports it, and makes MKL DaCe's default BLAS implementation. Without the wheel DaCe keeps
its reference expansion ("pure"), which is correct but far slower.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from distsdfg.testing.pmpi import cache_dir

NUMPY_BLAS = "NumPy's bundled OpenBLAS"


def mkl_prefix() -> Optional[Path]:
    """The environment prefix that holds the mkl-devel wheel's header and runtime library."""
    prefix = Path(sys.prefix)
    if (prefix / "include" / "mkl.h").exists() and list((prefix / "lib").glob("libmkl_rt.so*")):
        return prefix
    return None


def mkl_root(prefix: Path, folder: Optional[Path] = None) -> Path:
    """An MKLROOT layout in ``folder``: include/ and lib/ linking to the wheel's files."""
    root = Path(folder or cache_dir()) / "mklroot"
    (root / "lib").mkdir(parents=True, exist_ok=True)
    inc = root / "include"
    if not inc.exists():
        inc.symlink_to(prefix / "include", target_is_directory=True)
    libs = [p for pat in ("libmkl*.so*", "libiomp*.so*", "libtbb*.so*") for p in (prefix / "lib").glob(pat)]
    for lib in libs:
        _link(root / "lib" / lib.name, lib)
    rt = sorted((prefix / "lib").glob("libmkl_rt.so.*"))[0]
    _link(root / "lib" / "libmkl_rt.so", rt)
    return root


def _link(path: Path, target: Path) -> None:
    if not path.exists():
        try:
            path.symlink_to(target)
        except FileExistsError:      # another rank made it first
            pass


def configure() -> str:
    """Make DaCe's BLAS nodes use MKL where the wheel is installed; returns the BLAS's name."""
    import dace.libraries.blas as blas
    prefix = mkl_prefix()
    if prefix is None:
        return "DaCe pure (no mkl-devel wheel installed)"
    os.environ["MKLROOT"] = str(mkl_root(prefix))
    blas.default_implementation = "MKL"
    return f"Intel MKL {_mkl_version(prefix)} (mkl-devel wheel, sequential)"


def _mkl_version(prefix: Path) -> str:
    from importlib import metadata
    try:
        return metadata.version("mkl")
    except metadata.PackageNotFoundError:
        return "(version unknown)"


def single_thread_env() -> dict:
    """Environment for one thread per process (MPI ranks, Dask workers, the single-process run)."""
    return {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MKL_THREADING_LAYER": "SEQUENTIAL"}
