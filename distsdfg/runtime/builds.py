"""Rank 0's build of a lowered program: generated once, keyed by what it compiles (DaCe's version,
the generated code, the headers), reused from its folder when the key matches, under a file lock
so that concurrent jobs on one machine build a folder once; loaded on every rank. The folder is in
the build cache (``runtime/cache.py``), not in the folder the program runs from."""
from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Optional

from dace.sdfg import SDFG

from .. import dace_compat as dc
from ..dace_compat.pack import packing
from ..dace_compat.trace import expand_marked, remove_report_folder, traced
from ..lowering import blas
from ..lowering.gpu import build_settings
from ..lowering.rewriter import PLAN_LEN
from ..mpi.environment import headers_digest
from ..values.modes import Target
from . import cache, toolchain
from .trace import is_step
from .locks import file_lock
from ..dace_compat.semantics import with_numpy_semantics

STAMP = "distsdfg.stamp"


def _log(msg: str, verbose: bool):
    if verbose:
        print(f"[distsdfg] {msg}", file=sys.stderr, flush=True)



def build_key(sdfg: SDFG, code_objects=None) -> str:
    """What a build depends on: the generated code, our runtime header, DaCe's version, the BLAS, the
    compiler flags."""
    import hashlib

    import dace

    if code_objects is None:
        code_objects = dc.generate_code(sdfg)[1]
    h = hashlib.sha1(dace.__version__.encode())
    h.update(blas.configure().key().encode())
    h.update(" ".join(toolchain.base_flags()).encode())
    for obj in code_objects:
        h.update(obj.name.encode())
        h.update(_include_order_free(obj.clean_code).encode())
    h.update(headers_digest())
    return h.hexdigest()


def _include_order_free(code: str) -> str:
    """``code`` with its ``#include`` lines sorted first: DaCe 1.0.2 emits the headers of a program's
    library environments (MPI, MKL) in an order that differs between a fresh and an existing build
    folder, which must not make an identical program rebuild."""
    lines = code.splitlines()
    includes = sorted(ln for ln in lines if ln.lstrip().startswith("#include"))
    return "\n".join(includes + [ln for ln in lines if not ln.lstrip().startswith("#include")])


def _cached(folder: str, key: str, name: str) -> bool:
    from dace.config import Config
    lib = os.path.join(folder, "build", f"lib{name}.{Config.get('compiler', 'library_extension')}")
    try:
        with open(os.path.join(folder, STAMP)) as f:
            return f.read().strip() == key and os.path.exists(lib) and os.path.exists(
                os.path.join(folder, "program.sdfg"))
    except OSError:
        return False


def build_lock(folder: str, exclusive: bool = True):
    """Hold a lock on the build folder ``folder``: exclusive while building, shared while loading.

    Programs compiled at the same time on different communicators (each builds on its own rank 0)
    may share a build folder: the same program, or programs of one name. The lock file lies beside
    the folder, which a build rewrites.
    """
    return file_lock(folder, exclusive)


def load_build(folder: str):
    """Load the program built in ``folder`` (a rank other than the builder)."""
    with build_lock(folder, exclusive=False):
        return dc.load_compiled(folder)


def place_build(sdfg: SDFG) -> str:
    """Where ``sdfg`` is built: in the build cache (``builds/<name>-<key>``, one folder per build;
    returns ``builds/<name>``, the lock of its builders), unless the caller set the SDFG's
    ``build_folder`` or changed DaCe's ``default_build_folder`` from its default (then there)."""
    if not dc.build_folder_chosen(sdfg):
        sdfg.build_folder = os.path.join(cache.builds_dir(), sdfg.name)
    if _in_cache(sdfg.build_folder):
        return os.path.join(cache.builds_dir(), sdfg.name)
    return sdfg.build_folder


def _in_cache(folder: str) -> bool:
    return os.path.dirname(os.path.abspath(folder)) == os.path.abspath(cache.builds_dir())


@with_numpy_semantics
def build(sdfg: SDFG, *, verbose: bool = False, rebuild: bool = False, trace: bool = False,
          threads: Optional[int] = None):
    """Compile ``sdfg`` unless its build folder already holds this exact build; returns (compiled, folder)
    and sets ``sdfg.build_folder`` to the folder.

    The stamp is written only after a complete build, so an interrupted compile is rebuilt
    on the next run rather than loaded half-made; builders of one folder take turns (``build_lock``).
    After a compile, the least recently used builds are evicted down to the cache's cap (``cache.evict``).
    ``trace``: built with the trace recorder around every kernel and step (``dace_compat.trace``).
    ``threads``: the OpenMP threads each rank runs; with 1, the CPU maps are plain loops
    (``dace_compat.sequential_maps``: no parallel region to enter, in loops or out of them).
    """
    t0 = time.time()
    base = place_build(sdfg)
    with build_lock(base), dc.release_build(sdfg), (traced(sdfg, is_step) if trace else contextlib.nullcontext()):
        if getattr(getattr(sdfg, "_distsdfg", None), "target", Target.CPU) == Target.GPU:
            with build_settings(base):
                compiled, folder = _build(sdfg, base, verbose, rebuild, t0, trace)
        else:
            compiled, folder = _build(sdfg, base, verbose, rebuild, t0, trace, one_thread=threads == 1)
    if trace:
        remove_report_folder(folder)
    sdfg.build_folder = folder
    return compiled, folder


def _build(sdfg: SDFG, folder: str, verbose: bool, rebuild: bool, t0: float, trace: bool = False,
           one_thread: bool = False):
    blas.check_program(sdfg)
    wrap = packing(sdfg, keep=(PLAN_LEN,))      # per-rank symbols in one array, above a threshold
    if one_thread:
        packed = wrap

        def wrap(program):
            program = packed(program) if packed else program
            dc.sequential_maps(program)
            return program
    if trace:       # library kernels expanded first, so that what replaces them records the events
        pack = wrap
        wrap = lambda program: expand_marked(pack(program) if pack else program, is_step)  # noqa: E731
    low = getattr(sdfg, "_distsdfg", None)           # validated by the lowering, unless changed since
    validate = not (low is not None and getattr(low, "validated", "") == dc.structure_fingerprint(sdfg))
    # The compile's shared parts (precompiled header, host steps), if this machine lacks them, are
    # built by the compiler while Python generates the code.
    prepared = (toolchain.in_background(toolchain.prepare, *toolchain.shared_parts(sdfg))
                if getattr(low, "target", Target.CPU) == Target.CPU else (lambda: None))
    try:
        program, objects = dc.generate_code(sdfg, wrap=wrap, validate=validate)   # once: key and build
    finally:
        prepared()
    key = build_key(sdfg, objects)
    if not _in_cache(folder):
        return _compile(sdfg, folder, key, program, objects, wrap, verbose, rebuild, t0)
    # A folder per build: jobs that build one program differently at the same time (another BLAS,
    # another version of distsdfg) never replace a library that another job's ranks load. Its lock
    # keeps the cache's eviction away while it is built.
    folder = f"{folder}-{key[:12]}"
    program.build_folder = folder
    with build_lock(folder):
        return _compile(sdfg, folder, key, program, objects, wrap, verbose, rebuild, t0)


def _compile(sdfg: SDFG, folder: str, key: str, program, objects, wrap, verbose: bool, rebuild: bool, t0: float):
    """Load the build in ``folder`` if its stamp is ``key``, else compile ``program`` there."""
    from ..config import REBUILD
    rebuild = rebuild or REBUILD.get()
    if not rebuild and _cached(folder, key, sdfg.name):
        _log(f"{sdfg.name}: reusing the build in {folder} ({time.time() - t0:.1f}s)", verbose)
        cache.touch(os.path.join(folder, STAMP))          # its last use, for the cache's eviction
        return dc.load_compiled(folder), folder
    try:
        os.remove(os.path.join(folder, STAMP))
    except OSError:
        pass
    if program.is_loaded():       # a library of this name is loaded here: build under another name
        program, objects = dc.generate_code(sdfg, rename_if_loaded=True, wrap=wrap, validate=False)
        program.build_folder = folder
    _log(f"{sdfg.name}: generating and compiling C++ ...", verbose)
    how = toolchain.build_program(program, objects, folder)
    with open(os.path.join(folder, STAMP), "w") as f:
        f.write(key)
    _log(f"{sdfg.name}: compiled in {time.time() - t0:.1f}s ({how})", verbose)
    if _in_cache(folder):
        for gone in cache.evict(keep=[folder]):
            _log(f"build cache over {cache.CAP_ENV}: removed {gone.name} ({cache.format_size(gone.size)})", verbose)
    return dc.load_compiled(folder, program), folder
