"""OpenBLAS from the ``scipy-openblas32`` wheel as the BLAS of DaCe's BLAS and LAPACK nodes.

The wheel ships ``libscipy_openblas.so`` (32-bit integers, pthreads) and ``include/cblas.h`` and
``lapacke.h``, whose functions all carry a ``scipy_`` prefix (``scipy_cblas_dgemm``,
``scipy_LAPACKE_dpotrf``). DaCe's OpenBLAS expansions call the plain names (``cblas_dgemm``) and
include ``cblas.h`` and ``lapacke.h``; ``shim_folder`` writes, in the cache folder, a ``cblas.h`` and
a ``lapacke.h`` that include the wheel's headers and ``#define`` every plain name the wheel declares
to its prefixed name (the list is read off the wheel's headers). The program's include path names
that folder and it links the library by its full path, so its RPATH finds it on every rank.

NumPy's own OpenBLAS cannot serve: its symbols are ILP64 and suffixed ``64_``.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
from pathlib import Path
from typing import Optional, Tuple

PACKAGE = "scipy_openblas32"
PREFIX = "scipy_"
#: the headers DaCe's OpenBLAS environment includes, with the prefixed names each one declares
HEADERS = ("cblas.h", "lapacke.h")
_DECLARED = re.compile(r"\bscipy_((?:cblas|LAPACKE|openblas)_\w+)\s*\(")


def find() -> Tuple[Optional[Tuple[Path, Path]], str]:
    """((the wheel's include folder, libscipy_openblas path), "") if scipy-openblas32 is installed,
    else (None, what is missing). Does not import the package: importing it loads the library,
    which then fixes its thread count before ``threads_per_rank`` could be applied."""
    import importlib.util
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None, "scipy-openblas32 is not installed (pip install scipy-openblas32)"
    root = Path(list(spec.submodule_search_locations)[0])
    inc = root / "include"
    libs = sorted((root / "lib").glob("libscipy_openblas*.so*"))
    missing = [str(inc / h) for h in HEADERS if not (inc / h).exists()]
    if not libs:
        missing.append(str(root / "lib" / "libscipy_openblas.so"))
    if missing:
        return None, f"scipy-openblas32 lacks {', '.join(missing)}"
    return (inc, libs[0]), ""


def version() -> str:
    from importlib import metadata
    try:
        return metadata.version("scipy-openblas32")
    except metadata.PackageNotFoundError:
        return ""


#: distsdfg's matrix-vector products, which the ``cblas.h`` shim puts in place of OpenBLAS's
#: ``cblas_dgemv`` / ``cblas_sgemv`` (``config.OWN_GEMV``)
GEMV_HEADER = Path(__file__).parent / "include" / "distsdfg_gemv.h"


def shim_text(header: Path, own_gemv: bool = False) -> str:
    """A header that includes ``header`` (by its full path) and maps every plain name it declares
    with the ``scipy_`` prefix to the prefixed one; with ``own_gemv`` (``cblas.h`` only), the GEMV
    names to ``distsdfg_gemv.h``'s functions in C++ code."""
    names = sorted(set(_DECLARED.findall(header.read_text(errors="replace"))))
    guard = "DISTSDFG_SHIM_" + re.sub(r"\W", "_", header.name).upper()
    lines = [f"/* written by distsdfg (lowering/blas_openblas.py): plain names of {header} -> scipy_ names */",
             f"#ifndef {guard}", f"#define {guard}", f'#include "{header}"']
    lines += [f"#define {n} {PREFIX}{n}" for n in names]
    if own_gemv and header.name == "cblas.h":
        lines += ["#ifdef __cplusplus", f'#include "{GEMV_HEADER}"']
        for t in "ds":
            lines += [f"#undef cblas_{t}gemv", f"#define cblas_{t}gemv distsdfg_blas::{t}gemv"]
        lines += ["#endif"]
    lines += [f"#endif  /* {guard} */", ""]
    return "\n".join(lines)


#: changes when ``shim_text`` writes something else (part of the shim folder's name)
SHIM_FORMAT = "2"


def shim_folder(include: Path, cache: Path, own_gemv: bool = False) -> Path:
    """The folder of ``cblas.h`` and ``lapacke.h`` shims for the wheel's headers in ``include``: one
    per wheel location, header version and GEMV choice, written once (atomically: ranks may write it
    at the same time) and reused by later imports without reading the headers again."""
    gemv = hashlib.sha1(GEMV_HEADER.read_bytes()).hexdigest()[:10] if own_gemv else "openblas"
    stamp = "|".join([SHIM_FORMAT, str(include), gemv] +
                     [f"{(include / h).stat().st_size}:{(include / h).stat().st_mtime_ns}" for h in HEADERS])
    folder = cache / f"openblas-{hashlib.sha1(stamp.encode()).hexdigest()[:10]}" / "include"
    if all((folder / h).is_file() for h in HEADERS):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for name in HEADERS:
        path = folder / name
        tmp = path.with_name(f".{name}.{os.getpid()}")
        tmp.write_text(shim_text(include / name, own_gemv))
        os.replace(tmp, path)
    return folder


def already_loaded(soname: str):
    """The library ``soname`` if this process has loaded it, else None (never loads it)."""
    try:
        return ctypes.CDLL(soname, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except (OSError, AttributeError):
        return None


def loaded():
    """The already loaded libscipy_openblas, else None (never loads it)."""
    return already_loaded("libscipy_openblas.so")


def set_threads(k: int) -> None:
    """OpenBLAS reads ``OPENBLAS_NUM_THREADS`` when it is loaded; once loaded, set its count."""
    os.environ["OPENBLAS_NUM_THREADS"] = str(k)
    lib = loaded()
    if lib is not None:
        getattr(lib, f"{PREFIX}openblas_set_num_threads")(ctypes.c_int(k))


def threads() -> Optional[int]:
    """OpenBLAS's thread count in this process, None if it is not loaded."""
    lib = loaded()
    return None if lib is None else int(getattr(lib, f"{PREFIX}openblas_get_num_threads")())
