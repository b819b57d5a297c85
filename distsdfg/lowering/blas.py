"""The BLAS behind the matrix products of the programs distsdfg lowers and builds (inside
``numpy_semantics()``, ``dace_compat/semantics.py``; DaCe's own settings are left alone outside it): OpenBLAS from the
``scipy-openblas32`` wheel where it is installed (``distsdfg/lowering/blas_openblas.py``; on this AMD EPYC its
GEMM is as fast as NumPy's, MKL's 1.05x-1.2x slower), else Intel MKL from PyPI.
``DISTSDFG_BLAS=mkl`` or ``openblas`` chooses one (``BACKEND_ENV``).

MKL (optional): ``pip install 'distsdfg[mkl]'`` brings the ``mkl`` wheel (``libmkl_rt.so.N`` in
``<prefix>/lib``) and ``mkl-include`` (``mkl.h`` in ``<prefix>/include``). DaCe's MKL environment wants
``$MKLROOT/include/mkl.h`` and ``$MKLROOT/lib/libmkl_rt.so``, so ``configure()`` lays out an
MKLROOT of symbolic links to the wheels' files in the cache folder (one per environment),
exports it, and makes "MKL" the expansion of DaCe's BLAS library nodes (Gemm, Gemv, Dot,
BatchedMatMul, and MatMul and einsum, which expand into those) and of its LAPACK and linalg
nodes (``np.linalg``; DaCe's default there is OpenBLAS). The built program's RPATH
names that folder, so every rank that loads it finds libmkl_rt without LD_LIBRARY_PATH.

Threads: one per rank by default (``OPENBLAS_NUM_THREADS=1`` or MKL's sequential layer,
``OMP_NUM_THREADS=1``), so that P ranks on P cores do not oversubscribe them. ``threads_per_rank=k``
(``distsdfg.compile``, ``distsdfg run --threads-per-rank k``, or ``DISTSDFG_THREADS_PER_RANK=k``)
gives each rank k OpenMP threads for its maps and k threads for its BLAS calls (OpenBLAS's own
threads; MKL's GNU OpenMP layer). MKL fixes its threading layer when it is first loaded in a
process: ask for k > 1 before the first program is loaded (the command line and the environment
variable always do).

Without either (another platform, a trimmed install) DaCe's reference loop nests remain: correct but
some 100x slower; building a program with a matrix product then warns (``NoBlasWarning``).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import site
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

from . import blas_openblas
from .. import dace_compat as dc
from ..dace_compat import semantics
from ..errors import DistributedLoweringError, UnsupportedProgramError
from ..config import OWN_GEMV

__all__ = ["BlasInfo", "NoBlasWarning", "configure", "info", "find_mkl", "use_threads", "thread_env",
           "threads_per_rank", "check_program", "warn_if_reference"]

THREADS_ENV = "DISTSDFG_THREADS_PER_RANK"
BACKEND_ENV = "DISTSDFG_BLAS"
BACKENDS = ("openblas", "mkl")          # in the order tried when none is chosen
FIX = ("pip install scipy-openblas32 (a dependency of distsdfg; wheels for Linux, macOS and Windows), or "
       "pip install 'distsdfg[mkl]' (Intel MKL's mkl and mkl-include wheels, x86-64), or point MKLROOT at an "
       "Intel MKL installation")
MKL_FIX = "pip install 'distsdfg[mkl]'"


class NoBlasWarning(RuntimeWarning):
    """A program with a matrix product is built with DaCe's reference loops: no optimized BLAS found."""


@dataclass(frozen=True)
class BlasInfo:
    name: str                   # "OpenBLAS", "Intel MKL", "none" or what the user chose
    implementation: str         # the expansion of DaCe's BLAS nodes: "OpenBLAS", "MKL", "pure", ...
    version: str = ""
    library: str = ""           # what the programs link
    include: str = ""
    source: str = ""            # where it was found
    missing: str = ""           # what is missing, when no BLAS is found
    chosen_by: str = ""         # why this one: "default", "DISTSDFG_BLAS=mkl", a fallback's reason

    @property
    def optimized(self) -> bool:
        return self.implementation != "pure"

    def key(self) -> str:
        """What a build depends on (part of the build cache's key)."""
        return f"{self.implementation}|{self.library}|{self.version}|{self.include}"

    def __str__(self) -> str:
        if not self.optimized:
            return f"none: DaCe's reference loops ({self.missing})"
        return " ".join(filter(None, [self.name, self.version, f"({self.library})" if self.library else ""]))


# -- finding MKL --------------------------------------------------------------------------------------------
def _prefixes() -> List[Path]:
    out = []
    for p in (os.environ.get("MKLROOT"), sys.prefix, getattr(site, "USER_BASE", None), os.environ.get("CONDA_PREFIX"),
              sys.base_prefix):
        if p and Path(p) not in out:
            out.append(Path(p))
    return out


def _runtime_library(lib: Path) -> Optional[Path]:
    """``libmkl_rt.so`` or the newest ``libmkl_rt.so.N`` in ``lib``."""
    plain = lib / "libmkl_rt.so"
    if plain.exists():
        return plain
    versioned = sorted(lib.glob("libmkl_rt.so.*"), key=lambda p: [int(x) for x in p.name.split(".")[2:] if x.isdigit()])
    return versioned[-1] if versioned else None


def find_mkl() -> Tuple[Optional[Tuple[Path, Path]], str]:
    """((include folder, libmkl_rt path), "") of the first MKL found, else (None, what is missing)."""
    seen = []
    for prefix in _prefixes():
        inc = prefix / "include"
        for lib in (prefix / "lib", prefix / "lib" / "intel64"):
            rt = _runtime_library(lib) if lib.is_dir() else None
            if rt is not None and (inc / "mkl.h").exists():
                return (inc, rt), ""
            if rt is not None:
                seen.append(f"{rt} but no {inc / 'mkl.h'} (pip install mkl-include)")
    if seen:
        return None, "found " + "; ".join(seen)
    return None, (f"no libmkl_rt (the mkl wheel) under {', '.join(str(p) for p in _prefixes())}: MKL is optional, "
                  f"{MKL_FIX}")


def _cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "distsdfg"
    try:
        base.mkdir(parents=True, exist_ok=True)
        if os.access(base, os.W_OK):
            return base
    except OSError:
        pass
    return Path(tempfile.gettempdir()) / f"distsdfg-{os.getuid() if hasattr(os, 'getuid') else 'user'}"


def _link(path: Path, target: Path) -> None:
    """``path`` -> ``target``, made atomically (ranks may do it at the same time)."""
    try:
        if path.is_symlink() and os.readlink(path) == str(target):
            return
    except OSError:
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.unlink()
    except OSError:
        pass
    tmp.symlink_to(target)
    os.replace(tmp, path)


def mkl_root(include: Path, runtime: Path) -> Path:
    """An MKLROOT for DaCe: ``include`` and ``lib/libmkl*.so*`` linking to the wheels' files
    (a folder per environment, so that two virtual environments do not share one)."""
    if (runtime.parent / "libmkl_rt.so").exists() and runtime.parent.name == "lib" and \
            runtime.parent.parent / "include" == include:
        return runtime.parent.parent          # already laid out as DaCe wants it
    tag = hashlib.sha1(f"{include}|{runtime}".encode()).hexdigest()[:10]
    root = _cache_root() / f"mklroot-{tag}"
    (root / "lib").mkdir(parents=True, exist_ok=True)
    _link(root / "include", include)
    libdir = runtime.parent
    for pattern in ("libmkl*.so*", "libiomp*.so*", "libtbb*.so*"):
        for lib in libdir.glob(pattern):
            _link(root / "lib" / lib.name, lib)
    _link(root / "lib" / "libmkl_rt.so", runtime)
    return root


def _mkl_version(runtime: Path) -> str:
    from importlib import metadata
    try:
        return metadata.version("mkl")
    except metadata.PackageNotFoundError:
        pass
    try:                        # MKL_Get_Version_String(buf, len)
        lib = ctypes.CDLL(str(runtime))
        buf = ctypes.create_string_buffer(256)
        lib.MKL_Get_Version_String(buf, 256)
        return buf.value.decode(errors="replace").strip()
    except (OSError, AttributeError):
        return ""


# -- configuring DaCe ---------------------------------------------------------------------------------------
_INFO: Optional[BlasInfo] = None


def backend_choice() -> str:
    """``$DISTSDFG_BLAS`` ("openblas" or "mkl"), else "" (the first of ``BACKENDS`` installed)."""
    want = os.environ.get(BACKEND_ENV, "").strip().lower()
    if want and want not in BACKENDS:
        raise DistributedLoweringError(f"{BACKEND_ENV}={want!r}: expected one of {', '.join(BACKENDS)} (or unset: "
                                       f"the first installed of them)")
    return want


def configure(backend: Optional[str] = None, force: bool = False) -> BlasInfo:
    """Make DaCe's BLAS (and LAPACK) nodes use ``backend`` ("openblas" or "mkl"; default
    ``$DISTSDFG_BLAS``, else the first of them installed), once per process; returns what is used.
    ``force``: set it up again (switching the backend of later builds in this process).

    A BLAS chosen before in DaCe's own settings (``dace.libraries.blas.default_implementation`` or
    DaCe's configuration ``library.blas.default_implementation``) is kept.
    """
    info = _choose(backend, force)
    if force:
        semantics.refresh("blas")       # a running numpy_semantics() block switches too
    return info


def _choose(backend: Optional[str], force: bool) -> BlasInfo:
    global _INFO
    if _INFO is not None and not force:
        return _INFO
    if _INFO is None and dc.blas_chosen_by_user():
        impl = dc.blas_implementation()
        _INFO = BlasInfo(name="chosen in DaCe's settings", implementation=impl,
                         library=os.environ.get("MKLROOT", "") if impl == "MKL" else "",
                         missing="DaCe's BLAS default is set to 'pure'")
        return _INFO
    want = (backend or "").lower() or backend_choice()
    if want and want not in BACKENDS:
        raise DistributedLoweringError(f"BLAS backend {want!r}: expected one of {', '.join(BACKENDS)}")
    order = [want] + [b for b in BACKENDS if b != want] if want else list(BACKENDS)
    why = f"{BACKEND_ENV}={want}" if want and not backend else (f"asked for {want}" if want else "default")
    missing = []
    for name in order:
        made = _OPENBLAS(why) if name == "openblas" else _MKL(why)
        if isinstance(made, BlasInfo):
            if missing and want:
                warnings.warn(f"BLAS {want} asked for but not usable ({missing[0]}); using {made.name}",
                              RuntimeWarning, stacklevel=2)
                made = BlasInfo(**{**made.__dict__, "chosen_by": f"{why}, not usable: {missing[0]}"})
            _INFO = made
            return _INFO
        missing.append(made)
    _INFO = BlasInfo(name="none", implementation="pure", missing="; ".join(missing))
    return _INFO


def _install(patches) -> None:
    """Make DaCe's BLAS, LAPACK and linalg nodes expand to the configured BLAS for a
    ``numpy_semantics()`` block (``dace_compat/semantics.py``): distsdfg's lowering and builds."""
    info = configure()
    if info.implementation == "OpenBLAS" and info.source == "scipy-openblas32":
        dc.use_openblas_environment(info.include, info.library, patches)
        dc.use_blas_implementation("OpenBLAS", patches)
    elif info.implementation == "MKL" and info.name == "Intel MKL":
        dc.use_blas_implementation("MKL", patches)
    elif info.name == "none":
        patches.set(dc.blas_library(), "default_implementation", None)


semantics.register("blas", _install)


def _MKL(why: str):
    """Set up MKL: a BlasInfo, else why not (a string)."""
    found, missing = find_mkl()
    if found is None:
        return missing
    include, runtime = found
    try:
        root = mkl_root(include, runtime)
    except OSError as exc:
        return f"cannot lay out an MKLROOT: {exc}"
    os.environ["MKLROOT"] = str(root)
    _default_layer(threads_per_rank())
    return BlasInfo(name="Intel MKL", implementation="MKL", version=_mkl_version(runtime),
                    library=str(root / "lib" / "libmkl_rt.so"), include=str(include), source=str(runtime),
                    chosen_by=why)


def _OPENBLAS(why: str):
    """Set up scipy-openblas32's OpenBLAS: a BlasInfo, else why not (a string)."""
    found, missing = blas_openblas.find()
    if found is None:
        return missing
    include, library = found
    try:
        shims = blas_openblas.shim_folder(include, _cache_root(), own_gemv=OWN_GEMV.get())
    except OSError as exc:
        return f"cannot write the OpenBLAS header shims: {exc}"
    if blas_openblas.loaded() is None:             # OpenBLAS reads its thread count when it is loaded
        blas_openblas.set_threads(threads_per_rank())
    return BlasInfo(name="OpenBLAS", implementation="OpenBLAS", version=blas_openblas.version(),
                    library=str(library), include=str(shims), source="scipy-openblas32", chosen_by=why)


def info() -> BlasInfo:
    return configure()


def check_program(sdfg) -> None:
    """Before a build: refuse what DaCe's MKL expansion cannot compile, and warn (``NoBlasWarning``)
    when a matrix product would run DaCe's reference loops."""
    if dc.blas_implementation() == "MKL":
        _check_batched_names(sdfg)
    warn_if_reference(sdfg)


#: locals that DaCe 1.0.2's MKL batched GEMM declares in the generated C++: a size symbol of the same
#: name is shadowed by a pointer there and the program does not compile.
BATCHED_LOCALS = ("A", "B", "C")


def _check_batched_names(sdfg) -> None:
    batched = dc.batched_products(sdfg)
    if not batched:
        return
    names = {str(s) for s in sdfg.free_symbols} | set(sdfg.symbols)
    clash = sorted(names & set(BATCHED_LOCALS))
    if clash:
        raise UnsupportedProgramError(
            f"`{sdfg.name}`: a batched matrix product ({batched[0].label}) in a program with a size symbol named "
            f"{', '.join(clash)}: DaCe's MKL expansion declares C++ locals A, B and C, which would hide the symbol. "
            f"Rename the symbol (e.g. {clash[0]} -> N{clash[0]})")


def warn_if_reference(sdfg, what: str = "") -> bool:
    """Warn (``NoBlasWarning``) when ``sdfg`` has a BLAS node that would expand to DaCe's reference
    loops; True if it warned. Call where the program is built (inside any target's settings)."""
    libs = dc.blas_nodes(sdfg)
    if not libs or dc.blas_implementation() != "pure":
        return False
    if getattr(getattr(sdfg, "_distsdfg", None), "target", "cpu") == "gpu":
        reason = "no cuBLAS: cublas_v2.h is not in the CUDA toolkit's include folders"
    else:
        reason = configure().missing or "DaCe's BLAS default is 'pure'"
    kinds = sorted({type(n).__name__ for n in libs})
    warnings.warn(NoBlasWarning(
        f"`{sdfg.name}`{what}: {', '.join(kinds)} will run DaCe's reference loop nest (often 100x slower than a "
        f"BLAS): no optimized BLAS was found ({reason}). Fix: {FIX}"), stacklevel=3)
    return True


# -- threads ------------------------------------------------------------------------------------------------
def threads_per_rank(k: Optional[int] = None) -> int:
    """``k`` if given, else ``$DISTSDFG_THREADS_PER_RANK``, else 1."""
    if k is None:
        k = int(os.environ.get(THREADS_ENV, "1") or 1)
    if int(k) < 1:
        raise DistributedLoweringError(f"threads_per_rank must be at least 1, got {k}")
    return int(k)


def thread_env(k: int = 1) -> dict:
    """Environment for processes with ``k`` threads each (MPI ranks, benchmark workers)."""
    return {"OMP_NUM_THREADS": str(k), "MKL_NUM_THREADS": str(k), "OPENBLAS_NUM_THREADS": str(k),
            "MKL_THREADING_LAYER": "SEQUENTIAL" if k == 1 else "GNU", THREADS_ENV: str(k)}


_USER_LAYER = "MKL_THREADING_LAYER" in os.environ
_warned_layer = False


def _mkl_loaded():
    loaded = blas_openblas.already_loaded
    return loaded("libmkl_rt.so.2") or loaded("libmkl_rt.so.3") or loaded("libmkl_rt.so")


def _default_layer(k: int) -> None:
    """MKL's threading layer, read when MKL is first loaded: sequential for one thread, GNU OpenMP
    (the OpenMP runtime of DaCe's code) for more. A layer set by the user is kept."""
    if not _USER_LAYER and _mkl_loaded() is None:
        os.environ["MKL_THREADING_LAYER"] = "SEQUENTIAL" if k == 1 else "GNU"
    if os.environ.get("MKL_THREADING_LAYER", "").upper() == "GNU":   # MKL's GNU layer needs libgomp's symbols
        try:
            ctypes.CDLL("libgomp.so.1", mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass


_current: Optional[int] = None


def use_threads(k: int) -> None:
    """Give this process ``k`` threads for OpenMP, OpenBLAS and MKL (cheap when nothing changes)."""
    global _current, _warned_layer
    if k == _current:
        return
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(k)
    blas_openblas.set_threads(k)         # read when OpenBLAS is loaded; set directly once it is
    _default_layer(k)
    gomp = blas_openblas.already_loaded("libgomp.so.1")
    if gomp is not None:
        gomp.omp_set_num_threads(ctypes.c_int(k))
    mkl = _mkl_loaded()
    if mkl is not None:
        mkl.MKL_Set_Num_Threads(ctypes.c_int(k))
        if k > 1 and os.environ.get("MKL_THREADING_LAYER", "").upper() == "SEQUENTIAL" and not _warned_layer:
            _warned_layer = True
            warnings.warn(f"MKL was loaded sequential in this process, so its calls keep one thread (OpenMP maps get "
                          f"{k}); set {THREADS_ENV}={k} before starting Python, or use `distsdfg run "
                          f"--threads-per-rank {k}`", RuntimeWarning, stacklevel=3)
    _current = k
