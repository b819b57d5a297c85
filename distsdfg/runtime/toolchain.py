"""Compiling a generated CPU program: one compiler call, a cached loader stub and a precompiled header.

DaCe builds every program as a CMake project: a fresh build folder costs a CMake configure
(compiler checks, ``find_package(MPI)``: ~2 s), a ``make`` and a compile of the loader stub, and the
program's translation unit parses DaCe's runtime, MPI, MKL and our runtime headers again (~2.5 s of
the ~5 s compile). For a CPU program whose environments this module understands (MPI, our runtime,
MKL/OpenBLAS and other header-and-library environments), ``build_program`` instead

* compiles the program's sources and links them into ``build/lib<name>.so`` with one compiler call,
  with the flags DaCe's CMake project would use (``compiler.cpu.args``, the build type's optimisation
  level, ``-fopenmp``) except debug information;
* copies the loader stub (program independent) from a per-user cache;
* force-includes a precompiled header of the runtime headers (GCC only; built once per compiler,
  flags and header contents, under ``~/.cache/distsdfg/pch-*``). GCC ignores a precompiled header that
  does not fit and reads the headers themselves, so it never changes what is compiled.

On a machine that lacks the precompiled header or the host-step libraries (a first build), the
build guesses them from the lowered SDFG (``shared_parts``) and has the compiler make them
(``prepare``) while Python generates the program's code.

Anything else (GPU code, CMake packages other than MPI, CMake files, an MPI without ``mpicxx``),
``DISTSDFG_CMAKE=1``, or a failed direct compile goes through DaCe's CMake build unchanged.
This is DaCe-version-sensitive code (program folder layout, environment fields) like ``dace_compat``.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from .. import dace_compat as dc
from .locks import file_lock
from .cache import cache_dir as _cache_dir, touch

#: Optimisation flags per CMake build type, as DaCe's CMake project appends them (debug info left out
#: for RelWithDebInfo, DaCe's default: it makes the compile a quarter slower and nobody reads it).
BUILD_TYPE_FLAGS = {"Release": ["-O3", "-DNDEBUG"], "RelWithDebInfo": ["-O2", "-DNDEBUG"],
                    "MinSizeRel": ["-Os", "-DNDEBUG"], "Debug": ["-g"]}

_EXPAND = re.compile(r"(_DACE_CMAKE_EXPAND|\$)\{(\w+)\}")


class NotDirect(Exception):
    """This program needs DaCe's CMake build (the message says why)."""


@dataclass
class Recipe:
    """What one compiler call needs: include folders, compile flags, libraries, link flags, headers."""
    includes: List[str] = field(default_factory=list)
    cflags: List[str] = field(default_factory=list)
    libs: List[str] = field(default_factory=list)
    ldflags: List[str] = field(default_factory=list)
    headers: List[str] = field(default_factory=list)     # force-includable, in the environments' order


def cache_dir() -> str:
    return _cache_dir()


def enabled() -> bool:
    from ..config import CMAKE_BUILD
    return not CMAKE_BUILD.get()


# -- MPI --------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def mpi_flags() -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """(compile flags, link flags) of the MPI that ``mpicxx`` wraps (MPICH's ``-show``, Open MPI's
    ``--showme``); NotDirect without one."""
    b = dc.mpi_bin_dir()
    for wrapper in ("mpicxx", "mpic++", "mpiCC"):
        exe = os.path.join(b, wrapper) if b else None
        exe = exe if exe and os.path.exists(exe) else shutil.which(wrapper)
        if not exe:
            continue
        for opt in ("-show", "--showme"):
            try:
                out = subprocess.run([exe, opt], capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.SubprocessError):
                continue
            if out.returncode == 0 and out.stdout.strip():
                words = shlex.split(out.stdout.strip())[1:]           # drop the compiler itself
                cflags = [w for w in words if w.startswith(("-I", "-D", "-pthread"))]
                lflags = [w for w in words if w.startswith(("-L", "-l", "-Wl", "-pthread")) and w != "-Wl,--enable-new-dtags"]
                # "-Wl,-rpath -Wl,dir" comes as two words: keep them together
                return tuple(cflags), tuple(lflags)
    raise NotDirect("no mpicxx/mpic++ wrapper found to read MPI's flags from")


def _expand(text: str) -> List[str]:
    """An environment flag with CMake variables replaced by what they mean for MPI."""
    def sub(m):
        var = m.group(2)
        cflags, lflags = mpi_flags()
        if var == "MPI_CXX_HEADER_DIR":
            dirs = [f[2:] for f in cflags if f.startswith("-I")]
            return " ".join(dirs[:1])
        if var == "MPI_CXX_LIBRARIES":
            return " ".join(lflags)
        if var == "MPI_LINKER_FLAGS":
            return ""
        raise NotDirect(f"environment flag {text!r} needs CMake variable {var}")
    return shlex.split(_EXPAND.sub(sub, text))


# -- the recipe -------------------------------------------------------------------------------------
def recipe(environment_names: Iterable[str]) -> Recipe:
    """Compile and link flags for the program's environments (DaCe's ``dace_environments.csv``)."""
    import dace.library
    envs = dace.library.get_environments_and_dependencies(set(environment_names))
    r = Recipe()
    packages = set()
    for env in envs:
        ev = _eval      # an environment field may be a value or a function giving it
        packages |= set(ev(env.cmake_packages))
        if ev(env.cmake_files):
            raise NotDirect(f"environment {env.__name__} brings CMake files")
        for inc in ev(env.cmake_includes):
            r.includes += _expand(inc)
        for flag in ev(env.cmake_compile_flags):
            r.cflags += _expand(flag)
        for lib in ev(env.cmake_libraries):
            for w in _expand(lib):
                r.libs.append(w if w.startswith("-") or os.path.isabs(w) else "-l" + w)
        for flag in ev(env.cmake_link_flags):
            r.ldflags += _expand(flag)
        headers = ev(env.headers)
        for group in (headers.values() if isinstance(headers, dict) else [headers]):
            env_dir = os.path.dirname(env._dace_file_path)
            for h in group:
                if os.path.isabs(h):
                    r.includes.append(os.path.dirname(h))
                elif os.path.isfile(os.path.join(env_dir, h)):
                    r.includes.append(env_dir)
                if "/" not in h and h not in r.headers:
                    r.headers.append(h)
    unknown = packages - {"MPI"}
    if unknown:
        raise NotDirect(f"CMake packages {sorted(unknown)}")
    if "MPI" in packages:
        cflags, lflags = mpi_flags()
        r.cflags += list(cflags)
        r.libs += list(lflags)
    r.includes = list(dict.fromkeys(r.includes))
    return r


def _eval(v):
    return v() if callable(v) else v


def base_flags() -> List[str]:
    """The compile flags of every CPU program (DaCe's configuration plus the build type's)."""
    from dace.config import Config
    flags = shlex.split(Config.get("compiler", "cpu", "args") or "")
    flags += BUILD_TYPE_FLAGS.get(str(Config.get("compiler", "build_type")), ["-O2", "-DNDEBUG"])
    return flags + ["-fopenmp", "-fPIC"]


def dace_include() -> str:
    import dace
    return os.path.join(os.path.dirname(os.path.abspath(dace.__file__)), "runtime", "include")


@functools.lru_cache(maxsize=None)
def compiler_id(cxx: str) -> str:
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise NotDirect(f"cannot run the C++ compiler {cxx}: {exc}")


def _is_gcc(cxx: str) -> bool:
    v = compiler_id(cxx)
    return "Free Software Foundation" in v and "clang" not in v.lower()


def _run(argv: List[str], cwd: Optional[str] = None) -> None:
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        raise subprocess.CalledProcessError(out.returncode, argv, out.stdout, out.stderr)


# -- cached pieces ----------------------------------------------------------------------------------
def loader_stub(cxx: str) -> str:
    """DaCe's loader stub, compiled once per compiler and DaCe version."""
    src = os.path.join(os.path.dirname(dace_include()), "..", "codegen", "tools", "dacestub.cpp")
    src = os.path.normpath(src)
    with open(src, "rb") as f:
        h = hashlib.sha1(f.read() + compiler_id(cxx).encode() + cxx.encode()).hexdigest()[:12]
    folder = os.path.join(cache_dir(), f"stub-{h}")
    lib = os.path.join(folder, "libdacestub.so")
    if os.path.exists(lib):
        touch(lib)
        return lib
    os.makedirs(folder, exist_ok=True)
    with file_lock(lib):
        if not os.path.exists(lib):
            tmp = lib + f".{os.getpid()}.tmp"
            _run([cxx, "-O2", "-fPIC", "-shared", "-fopenmp", src, "-o", tmp, "-ldl", "-lpthread"])
            os.replace(tmp, lib)
    return lib


def _hash_runtime_headers(h) -> None:
    """Add the contents of every header of distsdfg's runtime (``mpi/include``) to the hash ``h``."""
    from ..mpi.environment import INCLUDE_DIR
    for name in sorted(os.listdir(INCLUDE_DIR)):
        with open(os.path.join(INCLUDE_DIR, name), "rb") as f:
            h.update(f.read())


def precompiled_header(cxx: str, flags: List[str], headers: List[str]) -> Optional[str]:
    """A header that includes DaCe's runtime and ``headers``, with its GCC precompiled form beside it
    (built once per compiler, flags and header contents); None where GCC is not the compiler."""
    from ..config import PCH
    if not _is_gcc(cxx) or not PCH.get():
        return None
    text = "".join(f"#include <{h}>\n" for h in ["dace/dace.h"] + headers)
    h = hashlib.sha1((cxx + compiler_id(cxx) + "\0".join(flags) + text).encode())
    for inc in [f[2:] for f in flags if f.startswith("-I")]:     # the headers' contents: our runtime changes
        for name in headers:
            p = os.path.join(inc, name)
            if os.path.isfile(p):
                with open(p, "rb") as f:
                    h.update(f.read())
    _hash_runtime_headers(h)        # and the headers ours include
    import dace
    h.update(dace.__version__.encode())
    folder = os.path.join(cache_dir(), f"pch-{h.hexdigest()[:16]}")
    header = os.path.join(folder, "distsdfg_pch.h")
    if os.path.exists(header + ".gch"):
        touch(header + ".gch")            # its last use, for the cache's eviction (runtime/cache.py)
        return header
    os.makedirs(folder, exist_ok=True)
    with file_lock(header):
        if not os.path.exists(header + ".gch"):
            with open(header, "w") as f:
                f.write(text)
            tmp = header + f".{os.getpid()}.tmp"
            try:
                _run([cxx] + flags + ["-x", "c++-header", header, "-o", tmp])
                os.replace(tmp, header + ".gch")
            except subprocess.CalledProcessError:
                return None          # compile without: the headers are read as usual
    return header


_HOST_STEP = re.compile(r"distsdfg::run_step<([^<>]+?), distsdfg::HostMem>")


def host_step_types(srcs: List[str]) -> List[str]:
    """The element types (C++ names) of the host-memory steps the program's sources run."""
    found = []
    for path in srcs:
        with open(path) as f:
            for t in _HOST_STEP.findall(f.read()):
                if t not in found:
                    found.append(t)
    return found


def host_step_name(ctype: str) -> str:
    return "distsdfg_host_step_" + re.sub(r"\W+", "_", ctype).strip("_")


def host_steps_library(cxx: str, flags: List[str], pch: Optional[str], ctype: str,
                       mpi_libs: List[str]) -> str:
    """A shared library that runs the host steps of element type ``ctype`` (distsdfg_host_steps.h),
    compiled once per compiler, flags and runtime header, and never unloaded (-z nodelete)."""
    from ..mpi.environment import INCLUDE_DIR
    text = (f"#include <dace/dace.h>\n#include <distsdfg_runtime.h>\n#include <distsdfg_host_steps.h>\n"
            f"DISTSDFG_DEFINE_HOST_STEP({ctype}, {host_step_name(ctype)})\n")
    h = hashlib.sha1((cxx + compiler_id(cxx) + "\0".join(flags + mpi_libs) + text).encode())
    _hash_runtime_headers(h)
    folder = os.path.join(cache_dir(), f"steps-{h.hexdigest()[:16]}")
    lib = os.path.join(folder, f"lib{host_step_name(ctype)}.so")
    if os.path.exists(lib):
        touch(lib)
        return lib
    os.makedirs(folder, exist_ok=True)
    with file_lock(lib):
        if not os.path.exists(lib):
            src = os.path.join(folder, host_step_name(ctype) + ".cpp")
            with open(src, "w") as f:
                f.write(text)
            tmp = lib + f".{os.getpid()}.tmp"
            pre = ["-include", pch] if pch else []
            _run([cxx] + flags + [f"-I{INCLUDE_DIR}"] + pre + [src, "-shared", "-o", tmp] + mpi_libs
                 + ["-Wl,-z,nodelete"])
            os.replace(tmp, lib)
    return lib


# -- the build --------------------------------------------------------------------------------------
def sources(folder: str) -> List[str]:
    """The program's source files; NotDirect if any is not plain CPU code."""
    out = []
    with open(os.path.join(folder, "dace_files.csv")) as f:
        for line in filter(None, (ln.strip() for ln in f)):
            target, kind, name = line.split(",")
            if target != "cpu":
                raise NotDirect(f"a {target} source ({name})")
            out.append(os.path.join(folder, "src", target, kind, name) if kind
                       else os.path.join(folder, "src", target, name))
    return out


def compile_direct(folder: str, name: str) -> Dict[str, object]:
    """Compile the program folder ``folder`` (written by DaCe's ``generate_program_folder``) into
    ``build/lib<name>.so`` and put the loader stub beside it. NotDirect if it needs CMake."""
    from dace.config import Config
    folder = os.path.abspath(folder)
    srcs = sources(folder)
    with open(os.path.join(folder, "dace_environments.csv")) as f:
        envs = [ln.strip() for ln in f if ln.strip()]
    r = recipe(envs)
    cxx, flags = _compiler_and_flags(r)
    libs = r.libs + shlex.split(Config.get("compiler", "cpu", "libs") or "")
    ld = r.ldflags + shlex.split(Config.get("compiler", "linker", "args") or "")
    rpath = list(dict.fromkeys([w[2:] for w in libs if w.startswith("-L")]
                               + [os.path.dirname(w) for w in libs if os.path.isabs(w)]))
    build = os.path.join(folder, "build")
    os.makedirs(build, exist_ok=True)
    ext = Config.get("compiler", "library_extension")
    lib = os.path.join(build, f"lib{name}.{ext}")
    pch = precompiled_header(cxx, flags, r.headers)
    steps = _host_steps(cxx, flags, pch, r, host_step_types(srcs))
    if steps:
        decl = os.path.join(folder, "include", "distsdfg_host_steps_decl.h")
        os.makedirs(os.path.dirname(decl), exist_ok=True)
        with open(decl, "w") as f:
            f.write("#include <distsdfg_runtime.h>\n#include <distsdfg_host_steps.h>\n" + "".join(
                f"DISTSDFG_DECLARE_HOST_STEP({t}, {host_step_name(t)})\n" for t, _ in steps))
        flags = flags + ["-include", decl]
        libs = libs + [path for _, path in steps]
        rpath = list(dict.fromkeys(rpath + [os.path.dirname(path) for _, path in steps]))
    link = ["-shared", "-o", lib + ".tmp"] + libs + ld + [f"-Wl,-rpath,{d}" for d in rpath]
    argv = [cxx] + flags + srcs + link
    used_pch = False
    if pch is not None:
        try:
            _run([cxx, "-include", pch] + argv[1:], cwd=build)
            argv, used_pch = [cxx, "-include", pch] + argv[1:], True
        except subprocess.CalledProcessError:
            pass                                    # compiled again below, reading the headers
    if not used_pch:
        _run(argv, cwd=build)
    os.replace(lib + ".tmp", lib)
    stub = os.path.join(build, f"libdacestub_{name}.{ext}")
    shutil.copyfile(loader_stub(cxx), stub + ".tmp")       # a loaded stub is replaced, never overwritten
    os.replace(stub + ".tmp", stub)
    with open(os.path.join(build, "distsdfg_compile.sh"), "w") as f:     # the command that built it
        f.write(" ".join(shlex.quote(a) for a in argv) + "\n")
    return {"pch": used_pch, "library": lib, "host_steps": [t for t, _ in steps]}


def _compiler_and_flags(r: Recipe) -> Tuple[str, List[str]]:
    cxx = dc.cxx_compiler()
    compiler_id(cxx)
    return cxx, base_flags() + [f"-I{dace_include()}"] + [f"-I{d}" for d in r.includes] + r.cflags


def _host_steps(cxx: str, flags: List[str], pch: Optional[str], r: Recipe, ctypes: Iterable[str]):
    """(element type, library) of the prebuilt host steps a program of recipe ``r`` links."""
    if "distsdfg_runtime.h" not in r.headers or os.environ.get("DISTSDFG_HOST_STEPS", "1") in ("", "0"):
        return []
    mpi_libs = list(mpi_flags()[1])
    return [(ctype, host_steps_library(cxx, flags, pch, ctype, mpi_libs)) for ctype in ctypes]


def shared_parts(sdfg) -> Tuple[List[str], List[str]]:
    """(environments, host-step element types) a lowered CPU program's direct compile will most likely
    use, read before its code is generated: our runtime where it has communication steps, the BLAS
    of the chosen implementation where it has BLAS nodes, and the steps' element types."""
    from ..mpi.distributed_memlet import DistributedMemlet
    envs, ctypes = [], []
    for node, state in sdfg.all_nodes_recursive():
        if isinstance(node, DistributedMemlet) and node.buffers == "host":
            out = next((e for e in state.out_edges(node) if e.src_conn == "_out"), None)
            if out is not None:
                ctype = state.sdfg.arrays[out.data.data].dtype.ctype
                if ctype not in ctypes:
                    ctypes.append(ctype)
    if ctypes:
        from ..mpi.environment import DistSDFGRuntime
        envs.append(f"{DistSDFGRuntime.__module__}.{DistSDFGRuntime.__name__}")
    if dc.blas_nodes(sdfg):
        gemm = dc.blas_library().Gemm.implementations.get(dc.blas_implementation())
        envs += [f"{e.__module__}.{e.__name__}" for e in getattr(gemm, "environments", [])]
    return envs, ctypes


def prepare(environment_names: Iterable[str], ctypes: Iterable[str]) -> None:
    """Build what a direct compile with these environments and host-step element types reuses
    (the precompiled header and the host-step libraries: ~15 s on a machine that has none yet), so
    that a program's first build makes them while Python generates its code. Does nothing where
    the compile is not direct; a failure here is left to the build itself, which tries again."""
    if not enabled():
        return
    try:
        r = recipe(environment_names)
        cxx, flags = _compiler_and_flags(r)
        _host_steps(cxx, flags, precompiled_header(cxx, flags, r.headers), r, ctypes)
    except (NotDirect, subprocess.CalledProcessError, OSError, KeyError, ValueError):
        pass


def build_program(sdfg, code_objects, folder: str) -> str:
    """Write the program folder for ``sdfg`` and its generated ``code_objects`` into ``folder`` and
    compile it, directly where possible, else through DaCe's CMake project. Returns how it was built."""
    dc.write_program_folder(sdfg, code_objects, folder)
    # program.sdfg is for loading, not compiling: its JSON (seconds to tens of seconds for a
    # training step) is written while the compiler runs, and is complete when this returns.
    written = in_background(dc.write_program_json, sdfg, folder)
    try:
        return _compile(sdfg.name, folder)
    finally:
        written()


def _compile(name: str, folder: str) -> str:
    from dace.codegen import compiler
    if enabled():
        try:
            info = compile_direct(folder, name)
            return "direct" + (", precompiled header" if info["pch"] else "") + (
                f", prebuilt host steps {info['host_steps']}" if info["host_steps"] else "")
        except (NotDirect, subprocess.CalledProcessError, OSError):
            pass
    dc.ensure_mpi_on_path()
    compiler.configure_and_compile(folder, name)
    return "cmake"


def in_background(fn, *args):
    """Run ``fn(*args)`` in a thread; returns a function that waits for it and raises what it raised."""
    import threading
    failed = []

    def run():
        try:
            fn(*args)
        except BaseException as e:      # re-raised in the caller's thread
            failed.append(e)
    thread = threading.Thread(target=run, name=f"distsdfg-{fn.__name__}", daemon=True)
    thread.start()

    def wait():
        thread.join()
        if failed:
            raise failed[0]
    return wait
