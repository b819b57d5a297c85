"""Adapter (DaCe 1.0.2), building: BLAS expansions, code generation and loading, compiler flags,
the MPI toolchain on PATH, and the by-value sequential Reduce expansion.

Part of the ``dace_compat`` layer (which re-exports these names); nothing here imports the rest of
the package's DaCe adapter.
"""
from __future__ import annotations

import contextlib
import re
import os
from typing import List, Optional

import dace
import dace.library
from dace import data as dt
from dace import dtypes
from dace.sdfg import SDFG, nodes
from .returns import reuse_released
from dace.transformation.transformation import ExpandTransformation


def mpi_bin_dir() -> Optional[str]:
    """Folder of the bundled MPI's executables (the venv's bin), if present."""
    import sys
    cand = os.path.join(sys.prefix, "bin")
    if os.path.exists(os.path.join(cand, "mpiexec")):
        return cand
    import shutil
    exe = shutil.which("mpiexec")
    return os.path.dirname(exe) if exe else None


def ensure_mpi_on_path() -> None:
    """CMake finds the PyPI MPI only with the venv's bin on PATH."""
    b = mpi_bin_dir()
    if b and b not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = b + os.pathsep + os.environ.get("PATH", "")


# -- BLAS: which expansion DaCe's BLAS library nodes take ------------------------------------------------
# MatMul and Einsum expand ("specialize") into Gemm, Gemv, Dot or BatchedMatMul (einsum: through MatMul);
# those four have no node default and take the BLAS library's default_implementation, then the
# configuration's library.blas.default_implementation ("pure": DaCe's reference loop nests).

def blas_library():
    import dace.libraries.blas as blas
    return blas


def blas_implementation() -> str:
    """The expansion a Gemm/Gemv/Dot/BatchedMatMul without its own ``implementation`` takes now."""
    from dace.config import Config
    lib = blas_library().default_implementation
    return lib if lib is not None else str(Config.get("library", "blas", "default_implementation"))


def blas_chosen_by_user() -> bool:
    """Whether someone already set a BLAS other than DaCe's reference expansion."""
    from dace.config import Config
    return (blas_library().default_implementation is not None
            or Config.get("library", "blas", "default_implementation") != "pure")


def use_blas_implementation(name: str, patches) -> None:
    """Make ``name`` ("MKL" or "OpenBLAS") the default expansion of the BLAS library nodes and of the
    LAPACK and linalg nodes (``np.linalg``: cholesky, solve, inv), so that one program includes one
    vendor's headers (``mkl.h`` and OpenBLAS's ``cblas.h`` declare the same CBLAS enums), for the
    ``numpy_semantics()`` block that ``patches`` belongs to. Nodes that have no such implementation
    (Ger, Axpy: never made by the NumPy frontend) keep their reference one."""
    blas = blas_library()
    patches.set(blas, "default_implementation", name)
    for cls in (blas.Gemm, blas.Gemv, blas.Dot, blas.BatchedMatMul, blas.Ger, blas.Axpy):
        if name not in cls.implementations and cls.default_implementation is None:
            patches.set(cls, "default_implementation", "pure")
    import dace.libraries.lapack as lapack
    import dace.libraries.linalg as linalg
    for lib in (lapack, linalg):
        if lib.default_implementation in (None, "MKL", "OpenBLAS"):
            patches.set(lib, "default_implementation", name)


def use_openblas_environment(include: str, library: str, patches) -> None:
    """Point DaCe's OpenBLAS environment (which otherwise asks CMake's FindBLAS/FindLAPACK for a
    system OpenBLAS) at the folder of its headers and at the library file, linked by full path, for
    the ``numpy_semantics()`` block that ``patches`` belongs to."""
    from dace.libraries.blas.environments.openblas import OpenBLAS
    for name, value in (("cmake_packages", []), ("cmake_variables", {}), ("cmake_link_flags", []),
                        ("cmake_includes", [str(include)]),
                        ("cmake_libraries", staticmethod(lambda: [str(library)])),
                        ("is_installed", staticmethod(lambda: True))):
        patches.set(OpenBLAS, name, value)


def openblas_environment() -> tuple:
    """(include folders, libraries) of DaCe's OpenBLAS environment now."""
    from dace.libraries.blas.environments.openblas import OpenBLAS
    inc = OpenBLAS.cmake_includes
    return list(inc() if callable(inc) else inc), list(OpenBLAS.cmake_libraries())


def blas_nodes(sdfg: SDFG) -> List[nodes.LibraryNode]:
    """The library nodes of DaCe's BLAS library (MatMul, Gemm, Gemv, Dot, BatchedMatMul, Einsum, ...)."""
    return [n for n, _ in sdfg.all_nodes_recursive()
            if isinstance(n, nodes.LibraryNode) and getattr(type(n), "_dace_library_name", "") == "blas"]


def batched_products(sdfg: SDFG) -> List[nodes.LibraryNode]:
    """BatchedMatMul nodes, and MatMul nodes that will specialize into one (an operand of three dimensions)."""
    blas = blas_library()
    out = []
    for node, state in sdfg.all_nodes_recursive():
        if isinstance(node, blas.BatchedMatMul):
            out.append(node)
        elif isinstance(node, blas.MatMul) and any(
                not e.data.is_empty() and len([s for s in e.data.subset.size() if s != 1]) >= 3
                for e in state.in_edges(node)):
            out.append(node)
    return out


def mkl_link_library() -> List[str]:
    """What DaCe's MKL environment links (it reads $MKLROOT)."""
    return list(blas_library().IntelMKL.cmake_libraries())


def structure_fingerprint(sdfg: SDFG) -> str:
    """A cheap digest of an SDFG's structure (per SDFG in its hierarchy: name, descriptors, symbols,
    states, nodes and edges), taken when it was validated: code generation validates again only if
    the SDFG changed since (``generate_code``'s ``validate``). Milliseconds on a GPT training step,
    whose DaCe validation takes seconds."""
    import hashlib
    parts = []
    for sd in sdfg.all_sdfgs_recursive():
        states = list(sd.all_states())
        parts.append(f"{sd.name}:{len(sd.arrays)}:{len(sd.symbols)}:{len(states)}:{sd.number_of_edges()}:"
                     f"{sum(st.number_of_nodes() for st in states)}:{sum(st.number_of_edges() for st in states)}")
    return hashlib.sha1("|".join(parts).encode()).hexdigest()


def generate_code(sdfg: SDFG, validate: bool = True, rename_if_loaded: bool = False, wrap=None):
    """(program, code objects): a copy of ``sdfg`` prepared as ``SDFG.compile`` prepares it (its build
    folder fixed, scope connectors filled; renamed ``name_0``, ... if ``rename_if_loaded`` and a library of
    its name is loaded in this process) and the code DaCe generates for it (in ``codegen.fast_codegen``,
    which makes it no different and faster). ``wrap``: a function that takes the copy over and
    returns the SDFG to compile (``dace_compat.pack.pack_symbols``). ``validate=False``: DaCe does not
    validate the program again (the caller did, ``structure_fingerprint``).

    The library-node expansions of code generation are not recorded in the SDFG's transformation
    history (DaCe's ``store_history``): the first recorded one deep-copies the whole SDFG as its
    ``orig_sdfg``, which ``program.sdfg`` would then also serialise (a fifth of a GPT training step's
    code generation)."""
    import copy
    from dace.codegen import codegen
    from .codegen import fast_codegen
    program = copy.deepcopy(sdfg)
    program.build_folder = sdfg.build_folder
    index = 0
    while rename_if_loaded and program.is_loaded():
        program.name = f"{sdfg.name}_{index}"
        index += 1
    if wrap is not None:
        program = wrap(program)
    program.fill_scope_connectors()
    with fast_codegen(), dace.config.set_temporary("store_history", value=False):
        return program, codegen.generate_code(program, validate=validate)


def sequential_maps(sdfg: SDFG) -> int:
    """Every CPU map of ``sdfg`` (its nested SDFGs too) runs as a plain loop, without an OpenMP
    parallel region; returns how many maps changed. For a build whose ranks each run one thread: a
    parallel region costs about 0.4 us to enter even with one thread, which a map inside a loop of
    many iterations pays on every iteration (a triangular solve's inner maps: 100 ms in 300,000
    entries), and a plain loop is not outlined into a function the compiler optimises apart.
    GPU programs are left as they are. Storage is settled first, as for the parallel maps: DaCe
    puts a transient inside a parallel map in registers but inside a sequential one on the heap
    (a ``new`` and ``delete`` per iteration: hdiff's stencil ran 7x slower)."""
    from dace.sdfg import infer_types
    cpu = (dace.dtypes.ScheduleType.Default, dace.dtypes.ScheduleType.CPU_Multicore)
    n = 0
    for node, _ in sdfg.all_nodes_recursive():
        if isinstance(node, dace.nodes.MapEntry) and node.map.schedule in dace.dtypes.GPU_SCHEDULES:
            return 0
    infer_types.infer_connector_types(sdfg)
    infer_types.set_default_schedule_and_storage_types(sdfg, None)
    for node, _ in sdfg.all_nodes_recursive():
        if isinstance(node, dace.nodes.MapEntry) and node.map.schedule in cpu:
            node.map.schedule = dace.dtypes.ScheduleType.Sequential
            n += 1
    return n


def write_program_folder(sdfg: SDFG, code_objects, folder: str) -> None:
    """DaCe's ``generate_program_folder`` (the sources, file lists, configuration) without
    ``program.sdfg`` and its hash of the SDFG: DaCe hashes ``program.sdfg`` by deep-copying its
    JSON and serialising it again (a tenth of a large program's build); ``include/hash.h`` (read only by
    instrumentation reports) gets a hash of the generated code instead, which changes exactly when
    the program does. ``program.sdfg`` is ``write_program_json``'s: the C++ compile does not read
    it, so the caller writes it while the compiler runs (``runtime.toolchain.build_program``)."""
    import hashlib
    from dace.codegen import compiler
    compiler.generate_program_folder(None, code_objects, folder)
    h = hashlib.sha256()
    for obj in code_objects:
        h.update(obj.name.encode())
        h.update(obj.clean_code.encode())
    path = os.path.join(folder, "include", "hash.h")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    contents = f'#define __HASH_{sdfg.name} "{h.hexdigest()}"\n'
    if not compiler.identical_file_exists(path, contents):
        with open(path, "w") as f:
            f.write(contents)


def write_program_json(sdfg: SDFG, folder: str) -> None:
    """``program.sdfg``: DaCe's JSON of the SDFG written without indentation (``SDFG.save`` indents
    it, which makes Python's ``json`` encode it in Python rather than in C: a few seconds for a
    large program), in ``codegen.fast_codegen``. Loading the program reads it
    (``load_compiled``), so do the other ranks."""
    import json
    from dace import serialize
    from .codegen import fast_codegen
    with fast_codegen():
        text = json.dumps(sdfg.to_json(hash=False), default=serialize.to_json)
    with open(os.path.join(folder, "program.sdfg"), "w") as f:
        f.write(text)


_private_copies = 0


def load_compiled(folder: str, program: Optional[SDFG] = None):
    """Load the program built in ``folder`` (DaCe's ``load_precompiled_sdfg``, made safe for many
    processes sharing the folder). ``program``: the SDFG the build was generated from, when the
    caller holds it (the builder: as DaCe's ``SDFG.compile`` does, instead of reading back the
    ``program.sdfg`` it has just written, seconds for a large program).

    When this process already has the library loaded (the same program compiled twice), DaCe copies
    it to ``lib<name>.so_`` in the shared build folder and loads the copy, so every rank of a job
    rewrites that one file while other ranks execute from it (a segfault in ``__dace_init``). Here
    the copy is private to the process, written under a temporary name and moved into place, and
    unlinked once loaded: no file that any process has mapped is ever rewritten.
    """
    global _private_copies
    import shutil
    from dace.codegen import compiled_sdfg as csdfg
    from dace.config import Config
    if program is None:
        program = SDFG.from_file(os.path.join(folder, "program.sdfg"))
    ext = Config.get("compiler", "library_extension")
    lib = os.path.join(folder, "build", f"lib{program.name}.{ext}")
    if not _dll(lib, program.name).is_loaded():
        return csdfg.CompiledSDFG(program, _dll(lib, program.name))
    _private_copies += 1
    copy_path = f"{lib}.{os.getpid()}.{_private_copies}"
    shutil.copyfile(lib, copy_path + ".tmp")
    os.replace(copy_path + ".tmp", copy_path)
    try:
        return csdfg.CompiledSDFG(program, _dll(copy_path, program.name))
    finally:
        os.remove(copy_path)             # mapped pages stay valid; the folder stays clean


def build_folder_chosen(sdfg: SDFG) -> bool:
    """Whether ``sdfg``'s build folder was chosen: set on the SDFG (DaCe 1.x adds the attribute when it
    is set, 2.0 holds None until then), or DaCe's ``default_build_folder`` changed from its default."""
    from dace.config import Config
    return (vars(sdfg).get("_build_folder") is not None
            or Config.get("default_build_folder") != Config.get_default("default_build_folder"))


def _dll(path: str, name: str):
    """DaCe's handle of the library ``path`` of program ``name``, loaded through the stub
    ``libdacestub_<name>`` beside it (DaCe 1.x takes the name; 2.0 the stub's path)."""
    from dace.codegen import compiled_sdfg as csdfg
    from dace.config import Config
    from .dace2 import DACE_MAJOR
    if DACE_MAJOR < 2:
        return csdfg.ReloadableDLL(path, name)
    stub = os.path.join(os.path.dirname(os.path.realpath(path)), f"libdacestub_{name}.{Config.get('compiler', 'library_extension')}")
    return csdfg.ReloadableDLL(path, libstub_path=stub)


def cxx_compiler() -> str:
    """The C++ compiler DaCe's CMake build uses: the configured one, else $CXX, else c++."""
    from dace.config import Config
    import shutil
    exe = Config.get("compiler", "cpu", "executable") or os.environ.get("CXX") or "c++"
    return shutil.which(exe) or exe


def fresh_return_arrays(compiled) -> None:
    """Make the next call of a DaCe ``CompiledSDFG`` allocate new return arrays (DaCe 1.0.2 reuses
    them between calls of equal sizes), so that the caller may keep them without a copy."""
    clear = getattr(compiled, "clear_return_values", None)
    if clear is not None:
        clear()


#: CMake build type of the ranks' code when the user kept DaCe's default (``RelWithDebInfo``, whose
#: ``-O2`` comes after DaCe's ``-O3`` on the compiler line and wins: GCC 12 then vectorizes only
#: loops of known trip counts without epilogues, not reductions or ``exp`` chains).
BUILD_TYPE = "Release"


#: Tasklet calls that test for NaN or infinity, which ``-ffast-math``'s finite-math assumption folds to False.
SPECIAL_VALUE_TESTS = re.compile(r"\b(isnan|isinf|isfinite)\b")


def tests_special_values(sdfg: SDFG) -> bool:
    """Whether a tasklet of ``sdfg`` (nested ones included) calls ``isnan``, ``isinf`` or ``isfinite``."""
    for node, _ in sdfg.all_nodes_recursive():
        if isinstance(node, nodes.Tasklet) and SPECIAL_VALUE_TESTS.search(node.code.as_string or ""):
            return True
    return False


@contextlib.contextmanager
def special_value_flags(sdfg: Optional[SDFG]):
    """DaCe 1.0.2 compiles with ``-ffast-math``, which lets the compiler assume there is no NaN or
    infinity: ``np.isnan(x)`` and ``np.isinf(x)`` fold to False, so ``np.where(np.isnan(a), 0.0, a)``
    leaves every NaN in place, silently (with DaCe alone too). While ``sdfg`` is built, if its tasklets
    test for them (``tests_special_values``), ``-fno-finite-math-only`` is added to
    ``compiler.cpu.args``; the rest of ``-ffast-math`` stays. Only those programs: the finite-math
    assumption is what lets GCC call glibc's vector ``exp``, 2-3x faster element-wise chains.
    ``DISTSDFG_FINITE_MATH=1`` leaves DaCe's flags as they are."""
    from dace.config import Config
    args = Config.get("compiler", "cpu", "args") or ""
    from ..config import FINITE_MATH
    special = (sdfg is not None and not FINITE_MATH.get()
               and "-ffast-math" in args.split() and "-fno-finite-math-only" not in args.split()
               and tests_special_values(sdfg))
    if special:
        Config.set("compiler", "cpu", "args", value=f"{args} -fno-finite-math-only")
    try:
        yield special
    finally:
        if special:
            Config.set("compiler", "cpu", "args", value=args)


def install_special_values(patches) -> None:
    """Wrap DaCe's own ``SDFG.compile`` in ``special_value_flags`` for a ``numpy_semantics()`` block
    (``semantics.py``): a program compiled there with ``sdfg.compile()`` or ``sdfg(...)`` keeps its
    NaN and infinity tests too."""
    from dace.sdfg import sdfg as sdfg_module
    original = sdfg_module.SDFG.compile

    def compile(self, *args, **kwargs):
        with special_value_flags(self):
            return original(self, *args, **kwargs)

    compile.__doc__ = original.__doc__
    patches.set(sdfg_module.SDFG, "compile", compile)


@contextlib.contextmanager
def release_build(sdfg: Optional[SDFG] = None):
    """Build with ``-O3`` (``compiler.build_type = Release``) unless the user chose a build type
    other than DaCe's default (``DISTSDFG_BUILD_TYPE`` overrides); restored afterwards. With
    ``sdfg``, NaN and infinity tests in it survive ``-ffast-math`` (``special_value_flags``)."""
    from dace.config import Config
    old = Config.get("compiler", "build_type")
    from ..config import BUILD_TYPE as CHOSEN_BUILD_TYPE
    want = CHOSEN_BUILD_TYPE.get() or (BUILD_TYPE if old == "RelWithDebInfo" else old)
    Config.set("compiler", "build_type", value=want)
    try:
        with special_value_flags(sdfg):
            yield want
    finally:
        Config.set("compiler", "build_type", value=old)


#: The Reduce implementation ``distsdfg.lowering.optimize`` gives plain reductions (``sequential_reduce``).
SEQ_REDUCE = "distsdfg-seq"


@dace.library.expansion
class ExpandReduceSequentialByValue(ExpandTransformation):
    """DaCe's ``pure-seq`` Reduce expansion (a map over the kept axes around a sequential loop over
    the reduced ones, accumulating in a one-element register array) whose accumulator a tasklet
    reads out by value. DaCe 1.0.2 copies it out with ``CopyND``, which takes its address, and
    GCC then keeps it in memory and does not vectorize the loop. At module level so that an SDFG's
    transformation history naming it deserializes (``pydoc.locate``)."""
    environments = []

    @staticmethod
    def expansion(node, state, sdfg):
        from dace.libraries.standard.nodes.reduce import ExpandReducePureSequentialDim
        nsdfg = ExpandReducePureSequentialDim.expansion(node, state, sdfg)
        for st in nsdfg.states():
            for e in list(st.edges()):
                if (isinstance(e.src, nodes.AccessNode) and e.src.data == "acc"
                        and isinstance(e.dst, nodes.MapExit) and e.data.wcr is None):
                    t = st.add_tasklet("read_acc", {"_a"}, {"_o"}, "_o = _a")
                    st.add_edge(e.src, None, t, "_a", dace.Memlet("acc[0]"))
                    st.add_edge(t, "_o", e.dst, e.dst_conn, e.data)
                    st.remove_edge(e)
        return nsdfg


def sequential_reduce() -> str:
    """Register (once) and name the Reduce implementation ``ExpandReduceSequentialByValue``."""
    from dace.libraries.standard.nodes.reduce import Reduce
    if SEQ_REDUCE not in Reduce.implementations:
        Reduce.register_implementation(SEQ_REDUCE, ExpandReduceSequentialByValue)
    return SEQ_REDUCE


def to_json(sdfg: SDFG) -> str:
    import json
    return json.dumps(sdfg.to_json())


def from_json(text: str) -> SDFG:
    import json
    return SDFG.from_json(json.loads(text))


def reinitialise(compiled) -> None:
    """Make a CompiledSDFG initialise itself again on its next call (DaCe sizes persistent
    buffers at initialisation and never again)."""
    if getattr(compiled, "_initialized", False):
        compiled.finalize()


class allow_view_arguments:
    """Context: let a compiled SDFG take NumPy views as array arguments (we check contiguity)."""

    def __enter__(self):
        from dace.config import Config
        self.old = Config.get_bool("compiler", "allow_view_arguments")
        Config.set("compiler", "allow_view_arguments", value=True)

    def __exit__(self, *exc):
        from dace.config import Config
        Config.set("compiler", "allow_view_arguments", value=self.old)


def order_return_arrays(sdfg: SDFG) -> None:
    """Zero-pad ``__return_<k>`` names so that DaCe 1.0.2, which returns a tuple in the sorted
    order of those names, returns ``__return_10`` after ``__return_9`` (not after ``__return_1``)."""
    import re
    found = {int(m.group(1)): name for name in list(sdfg.arrays)
             if (m := re.fullmatch(r"__return_(\d+)", name))}
    if len(found) <= 10:
        return
    from .rename import rename_data
    width = len(str(max(found)))
    rename_data(sdfg, {name: new for k, name in sorted(found.items()) if (new := f"__return_{k:0{width}d}") != name})



def call_compiled(compiled, call: dict):
    """``compiled(**call)``, after its first call without DaCe's per-argument checks and conversions.

    DaCe 1.0.2's ``CompiledSDFG.__call__`` orders, type-checks and converts every argument on every
    call (``_construct_args``: property reads, ``is_array``, a ctypes object per argument), ~5-10 us
    an argument: 5-10 ms per call of a distributed training step with a thousand arguments (the
    homes' per-rank shapes that persistent buffers use are not packed, ``dace_compat.pack``). The
    first call of an initialised program goes through DaCe and records, per position of its C
    signature, whether it takes an array (a pointer) or a scalar (its ctypes type); later calls
    build the same argument tuple from that record and call ``fast_call``. A call whose arguments
    do not fit the record (an array where a scalar was, a view DaCe would refuse, a program
    finalised to be initialised again) goes through DaCe. The caller checks shapes and dtypes
    (``runtime.program``).
    """
    import ctypes

    import numpy as np
    from dace.config import Config
    record = getattr(compiled, "_distsdfg_args", None)
    if record is None or not compiled._initialized:
        out = compiled(**call)
        compiled._distsdfg_args = _argument_record(compiled)
        return out
    names, kinds = record
    compiled._initialize_return_values(call)       # new return arrays when asked (fresh_return_arrays)
    compiled._return_arrays = reuse_released(compiled)
    for desc, arr in zip(compiled._retarray_shapes, compiled._return_arrays):
        call[desc[0]] = arr
    views = Config.get_bool("compiler", "allow_view_arguments")
    args = []
    for name, kind in zip(names, kinds):
        value = call.get(name, _MISSING)
        if kind is None:            # an array: its data pointer
            if isinstance(value, np.ndarray) and (views or value.base is None or name.startswith("__return")):
                args.append(ctypes.c_void_p(value.__array_interface__["data"][0]))
            elif value is None:
                args.append(ctypes.c_void_p(0))
            else:
                return compiled(**call)
        elif kind is _DEVICE:       # a GPU_Global array: the device pointer of a CuPy (or like) array
            cai = getattr(value, "__cuda_array_interface__", None)
            if cai is None:
                return compiled(**call)
            args.append(ctypes.c_void_p(cai["data"][0]))
        elif value is _MISSING or isinstance(value, np.ndarray):
            return compiled(**call)
        else:
            args.append(kind(value))
    return compiled.fast_call(tuple(args), compiled._lastargs[1], do_gpu_check=True)


_MISSING = object()
_DEVICE = "device"      # the kind of a GPU_Global array in an argument record

def _argument_record(compiled):
    """(names, kinds) of a CompiledSDFG's C signature as its last ``_construct_args`` built it:
    kind None for an array, else the scalar's ctypes type; None when it cannot be read."""
    sig, typedict = getattr(compiled, "_sig", None), getattr(compiled, "_typedict", None)
    last = getattr(compiled, "_lastargs", None)
    if sig is None or typedict is None or last is None or len(last[0]) != len(sig):
        return None         # e.g. constants left out of the call: always through DaCe
    def kind(desc):
        if isinstance(desc, dt.Array) and desc.storage == dtypes.StorageType.GPU_Global:
            return _DEVICE
        return None if isinstance(desc, (dt.Array, dt.Structure)) else desc.dtype.as_ctypes()
    kinds = tuple(kind(typedict[a]) for a in sig)
    return tuple(sig), kinds
