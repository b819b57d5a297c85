"""target="gpu": rank-local kernels run as CUDA kernels; MPI on host copies or on device buffers.

After the distributed lowering, :class:`OffloadKernels` gives every top-level map a
``GPU_Device`` schedule and every library node (MatMul, Reduce, einsum, ...) a GPU schedule and
moves the kernels' local buffers (and home buffers) to ``GPU_Global`` memory. Every
``DistributedMemlet`` then works on those device buffers itself (:class:`DeviceBufferComm`). By
default MPI sees host pointers only: the runtime's ``StagedDeviceMem`` policy copies each box a
step sends from the device into a pinned host temporary and each box it receives back
(``cudaMemcpy2D``), so a halo exchange moves its halo rows between device and host, not the
whole block. With ``cuda_aware_mpi=True`` MPI is handed the GPU buffers directly (``DeviceMem``:
temporaries in device memory), which needs an MPI built with CUDA support
(:func:`require_cuda_aware_mpi` checks before a call). Device buffers are allocated once per
program (persistent), not on every call; the steps' temporaries come from the runtime's cache.
Programs with loops, branches or distributed placement keep their home buffers on the device for
the whole call; the steps inside loops work on them like the others; loop conditions read only host arrays, which the
steps fill. :func:`emulate_on_host` runs a GPU lowering on the host, for tests without a GPU.
``OffloadKernels(device_args=...)`` leaves the caller's CuPy arrays in the variant that takes them
(``distsdfg.lowering.device_args``) in ``GPU_Global`` memory, where kernels may use them directly.

:func:`build_settings` makes DaCe 1.0.2's generated CUDA build with CUDA 12 and 13 without
touching site-packages: an architecture nvcc accepts, C++17 for host and device code (CUDA 13's
CCCL requires it; DaCe's CMake pins CUDA to C++14, which a compiler launcher rewrites), and a
compatibility header, force-included into every ``.cu`` file, that restores the CUB names CUDA
13 removed. cuBLAS is used for matrix products when its header is installed, the pure GPU
expansion otherwise.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import stat
import subprocess
from typing import Optional

from dace import data as dt
from dace import dtypes
from dace.sdfg import SDFG, nodes
from dace.transformation import pass_pipeline as ppl

from .. import dace_compat as dc
from ..errors import DistributedLoweringError, UnsupportedProgramError
from ..mpi import DistributedMemlet
from ..mpi.distributed_memlet import BUFFERS
from ..mpi.environment import INCLUDE_DIR
from .buffers import persist, program_symbols
from .device_args import device_storage

__all__ = ["OffloadKernels", "DeviceBufferComm", "emulate_on_host", "build_settings", "gpu_available", "nvcc_path", "cuda_arch",
           "has_cublas", "mpi_cuda_support", "require_cuda_aware_mpi", "COMPAT_HEADER"]

#: Thread-block shape of a kernel by its map's dimensions (DaCe maps the last parameter to x).
BLOCK_SIZES = ((256, 1, 1), (32, 8, 1), (32, 4, 2))

COMPAT_HEADER = os.path.join(INCLUDE_DIR, "distsdfg_cuda_compat.h")
HOST_COMPAT_HEADER = os.path.join(INCLUDE_DIR, "distsdfg_cuda_host_compat.h")


def nvcc_path() -> Optional[str]:
    """The CUDA compiler: $CUDACXX, nvcc on PATH, or /usr/local/cuda/bin/nvcc."""
    for cand in (os.environ.get("CUDACXX"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and os.path.exists(cand):
            return cand
    return None


def _cuda_include_dirs():
    nvcc = nvcc_path()
    if nvcc is None:
        return []
    root = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    return [d for d in (os.path.join(root, "include"), os.path.join(root, "targets", "x86_64-linux", "include"),
                        "/usr/local/cuda/include", "/usr/include") if os.path.isdir(d)]


def has_cublas() -> bool:
    return any(os.path.exists(os.path.join(d, "cublas_v2.h")) for d in _cuda_include_dirs())


def gpu_available() -> bool:
    """Whether this process can use a CUDA GPU (asks the driver; never initialises DaCe's runtime)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    try:
        return lib.cuInit(0) == 0 and lib.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0
    except AttributeError:
        return False


#: Sonames of MPI libraries that may export ``MPIX_Query_cuda_support`` (MPICH and its derivatives, Open MPI).
_MPI_LIBS = ("libmpi.so.12", "libmpi.so.40", "libmpi_cray.so.12", "libmpi.so")


@functools.lru_cache(maxsize=None)
def mpi_cuda_support() -> Optional[bool]:
    """Whether the MPI library this process uses accepts device pointers: ``MPIX_Query_cuda_support()``
    of MPICH (4.0 on) or Open MPI; ``None`` when the library does not say. Call it after MPI is
    initialised (mpi4py's ``MPI`` imported); the answer is kept for the process."""
    for name in _MPI_LIBS:
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)    # only an MPI already loaded
        except OSError:
            continue
        query = getattr(lib, "MPIX_Query_cuda_support", None)
        if query is not None:
            query.restype = ctypes.c_int
            return bool(query())
        return None
    return None


def require_cuda_aware_mpi(program: str = "the program"):
    """Raise unless MPI reports CUDA support (a program lowered with ``cuda_aware_mpi=True`` hands
    device pointers to MPI, which an MPI without it would read as host memory and crash on)."""
    from mpi4py import MPI
    support = mpi_cuda_support()
    if support is False:
        version = " ".join(MPI.Get_library_version().split()[:3])
        raise DistributedLoweringError(
            f"`{program}` was lowered with cuda_aware_mpi=True, but this MPI ({version}) "
            f"reports no CUDA support (MPIX_Query_cuda_support() == 0): run with an MPI built with CUDA "
            f"(MPICH --with-cuda, Open MPI with UCX/CUDA, Cray MPICH with MPICH_GPU_SUPPORT_ENABLED=1), or lower "
            f"without cuda_aware_mpi to stage communication through host memory")
    if support is None:
        import warnings
        warnings.warn(f"`{program}` hands device pointers to MPI (cuda_aware_mpi=True) and this MPI does not say "
                      f"whether it supports them (no MPIX_Query_cuda_support); going ahead", RuntimeWarning)


def cuda_arch() -> str:
    """The architecture to build for: $DISTSDFG_CUDA_ARCH, the local GPU's, else 80 (nvcc 13 dropped < 75)."""
    from ..config import CUDA_ARCH
    env = CUDA_ARCH.get()
    if env:
        return env
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=20).stdout.split()
            if out:
                return out[0].replace(".", "")
        except (OSError, subprocess.SubprocessError):
            pass
    return "80"


_LAUNCHER = """#!/bin/sh
# distsdfg: CMake's CUDA compiler launcher. DaCe 1.0.2 pins CUDA to C++14, which CUDA 13 rejects:
# raise it to C++17 and force-include the compatibility header. "$1" is nvcc.
cc="$1"; shift
for a in "$@"; do
  shift
  case "$a" in -std=c++11|-std=c++14) a="-std=c++17" ;; esac
  set -- "$@" "$a"
done
exec "$cc" -include "{header}" "$@"
"""


def _launcher(folder: str) -> str:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(os.path.abspath(folder), "distsdfg_nvcc_launcher.sh")
    text = _LAUNCHER.format(header=COMPAT_HEADER)
    if not os.path.exists(path) or open(path).read() != text:
        with open(path, "w") as f:
            f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@contextlib.contextmanager
def build_settings(build_folder: str):
    """DaCe configuration for building a GPU program (restored afterwards)."""
    import dace.libraries.blas as blas
    from dace.config import Config
    nvcc = nvcc_path()
    if nvcc is None:
        raise DistributedLoweringError("target='gpu' needs the CUDA compiler: put nvcc on PATH or set CUDACXX")
    keys = [("compiler", "cuda", "cuda_arch"), ("compiler", "cpu", "args"), ("compiler", "extra_cmake_args"),
            ("compiler", "cuda", "args")]
    old = {k: Config.get(*k) for k in keys}
    old_blas = blas.default_implementation
    try:
        Config.set("compiler", "cuda", "cuda_arch", value=cuda_arch())
        cpu = old[("compiler", "cpu", "args")].replace("-std=c++14", "-std=c++17")
        cpu += "".join(f" -I{d}" for d in _cuda_include_dirs()[:2]) + f" -include {HOST_COMPAT_HEADER}"
        Config.set("compiler", "cpu", "args", value=cpu)
        extra = (f"{old[('compiler', 'extra_cmake_args')]} -DCMAKE_CUDA_COMPILER={nvcc} "
                 f"-DCMAKE_CUDA_COMPILER_LAUNCHER={_launcher(build_folder)}").strip()
        Config.set("compiler", "extra_cmake_args", value=extra)
        blas.default_implementation = "cuBLAS" if has_cublas() else None
        yield
    finally:
        for k, v in old.items():
            Config.set(*k, value=v)
        blas.default_implementation = old_blas


class DeviceBufferComm(ppl.Pass):
    """Let every communication step use its buffers where they are: ``buffers="device"`` (GPU
    buffers straight to a CUDA-aware MPI), ``"staged"`` (GPU buffers, MPI on pinned host
    temporaries that hold only the boxes the step moves), or ``"emulated"`` / ``"emulated-staged"``
    (those two device code paths on host memory, for testing them without a GPU). Every policy but
    the host's waits for the GPU before a step starts."""

    CATEGORY = "distsdfg"

    def __init__(self, buffers: str = "device"):
        super().__init__()
        if buffers not in BUFFERS:
            raise DistributedLoweringError(f"buffers must be one of {sorted(BUFFERS)}, got {buffers!r}")
        self.buffers = buffers

    def modifies(self) -> ppl.Modifies:
        return dc.MODIFIES_LIBRARY_NODES

    def should_reapply(self, modified: ppl.Modifies) -> bool:
        return False

    def apply_pass(self, sdfg: SDFG, _) -> int:
        count = 0
        for state in sdfg.states():
            for n in state.nodes():
                if isinstance(n, DistributedMemlet):
                    n.buffers = self.buffers
                    n.implementation = "MPI_CUDA" if self.buffers in ("device", "staged") else "MPI"
                    # The step is host code even where its buffers are on the GPU (DaCe would infer a
                    # schedule from their storage).
                    n.schedule = dtypes.ScheduleType.CPU_Multicore
                    count += 1
        return count


class OffloadKernels(ppl.Pass):
    """Run a lowered SDFG's kernels on the GPU, with MPI on host copies of their buffers or, with
    ``cuda_aware_mpi``, on the device buffers themselves (see the module doc)."""

    CATEGORY = "distsdfg"

    def __init__(self, cuda_aware_mpi: bool = False, device_args=()):
        super().__init__()
        self.cuda_aware_mpi = cuda_aware_mpi
        self.device_args = frozenset(device_args)     # the caller's CuPy arrays (lowering.device_args)

    def modifies(self) -> ppl.Modifies:
        return ppl.Modifies.Everything

    def should_reapply(self, modified: ppl.Modifies) -> bool:
        return False

    def apply_pass(self, sdfg: SDFG, _) -> int:
        on_gpu = {}
        count = 0
        for state in sdfg.states():
            scopes = state.scope_dict()
            for n in state.nodes():
                if scopes[n] is not None:
                    continue
                if isinstance(n, nodes.MapEntry):
                    n.map.schedule = dtypes.ScheduleType.GPU_Device
                    if not n.map.gpu_block_size:    # DaCe's default (32, 1, 1) leaves most of a block idle
                        n.map.gpu_block_size = list(BLOCK_SIZES[min(len(n.map.params), 3) - 1])
                    edges = state.in_edges(n) + state.out_edges(state.exit_node(n))
                elif isinstance(n, nodes.LibraryNode) and not isinstance(n, DistributedMemlet):
                    n.schedule = dtypes.ScheduleType.GPU_Default
                    if type(n).__name__ == "Reduce":
                        n.implementation = "CUDA (device)"
                    edges = state.in_edges(n) + state.out_edges(n)
                else:
                    continue
                count += 1
                for e in edges:
                    if not e.data.is_empty():
                        on_gpu.setdefault(e.data.data, n)
        known = program_symbols(sdfg)
        device_storage(sdfg, self.device_args)     # the caller's device arrays (not allocated here)
        for name, kernel in sorted(on_gpu.items(), key=lambda kv: kv[0]):
            desc = sdfg.arrays[name]
            if isinstance(desc, dt.Scalar) or name in self.device_args:
                continue            # passed to kernels by value; in the caller's device memory
            if isinstance(desc, dt.View) and self.device_args and desc.storage == dtypes.StorageType.GPU_Global:
                continue            # a view of one of the caller's device arrays
            if not desc.transient:
                raise UnsupportedProgramError(
                    f"target='gpu': kernel `{kernel.label}` reads or writes the program's array `{name}` directly "
                    f"(a replicated or distributed-placement argument); such arrays are not staged to the GPU yet: "
                    f"use target='cpu' for this program")
            desc.storage = dtypes.StorageType.GPU_Global
            persist(sdfg, desc, known)
        self._check_host_code(sdfg)
        self._mark_device_globals(sdfg)
        DeviceBufferComm("device" if self.cuda_aware_mpi else "staged").apply_pass(sdfg, {})
        return count

    @staticmethod
    def _check_host_code(sdfg: SDFG):
        for e in sdfg.edges():      # loop conditions and branches are evaluated on the host
            for name in sorted(e.data.read_symbols()):
                desc = sdfg.arrays.get(name)
                if desc is not None and desc.storage == dtypes.StorageType.GPU_Global:
                    raise UnsupportedProgramError(
                        f"target='gpu': the condition or assignment `{e.data.condition.as_string}` "
                        f"{e.data.assignments or ''} between states `{e.src.label}` and `{e.dst.label}` reads "
                        f"`{name}`, which lives on the GPU; use target='cpu' for this program")
        for state in sdfg.states():
            scopes = state.scope_dict()
            for n in state.nodes():
                if scopes[n] is None and isinstance(n, (nodes.Tasklet, nodes.NestedSDFG)):
                    for e in state.in_edges(n) + state.out_edges(n):
                        if not e.data.is_empty() and sdfg.arrays[e.data.data].storage == \
                                dtypes.StorageType.GPU_Global:
                            raise UnsupportedProgramError(
                                f"target='gpu': `{n.label}` runs on the host but uses `{e.data.data}`, which lives on "
                                f"the GPU; use target='cpu' for this program")

    @staticmethod
    def _mark_device_globals(sdfg: SDFG) -> int:
        """Mark the steps whose global array (a scatter's source, a gather's or reduce's target) is in
        device memory: the caller's CuPy arrays in a device-argument variant, and views of them. The
        runtime then touches that array only through the step's device copies (``GD`` in
        ``distsdfg_runtime.h``); returns how many steps."""
        count = 0
        for state in sdfg.states():
            for n in state.nodes():
                if not isinstance(n, DistributedMemlet) or n.kind not in ("scatter", "gather", "reduce"):
                    continue
                if n.kind == "scatter":
                    edges = [e for e in state.in_edges(n) if e.dst_conn == "_in"]
                else:
                    edges = [e for e in state.out_edges(n) if e.src_conn == "_out"]
                n.global_device = any(sdfg.arrays[e.data.data].storage == dtypes.StorageType.GPU_Global
                                      for e in edges if not e.data.is_empty())
                count += n.global_device
        return count


def emulate_on_host(sdfg: SDFG) -> SDFG:
    """Make a program lowered with ``target="gpu"`` run on the host with the GPU lowering's data flow
    unchanged, to test that data flow without a GPU (``distsdfg.testing.gpu_emulated``).

    Device buffers become host buffers, kernels host maps and host library nodes; staged steps run
    their code path on host memory (``EmulatedStagedMem``: every box packed into a temporary for
    MPI), steps on device buffers (``cuda_aware_mpi=True``) theirs (``EmulatedDeviceMem``). Returns
    ``sdfg``, renamed (``..._emu``) and marked for the CPU."""
    low = getattr(sdfg, "_distsdfg", None)
    if low is None or low.target != "gpu":
        raise DistributedLoweringError(f"emulate_on_host: `{sdfg.name}` is not lowered for target='gpu'")
    for desc in sdfg.arrays.values():
        if desc.storage in (dtypes.StorageType.GPU_Global, dtypes.StorageType.CPU_Pinned):
            desc.storage = dtypes.StorageType.CPU_Heap
    steps = set()
    for state in sdfg.states():
        scopes = state.scope_dict()
        for n in state.nodes():
            if isinstance(n, DistributedMemlet):
                steps.add(n.buffers)
            elif scopes[n] is None and isinstance(n, nodes.MapEntry) and \
                    n.map.schedule == dtypes.ScheduleType.GPU_Device:
                n.map.schedule = dtypes.ScheduleType.Default
                n.map.gpu_block_size = None
            elif scopes[n] is None and isinstance(n, nodes.LibraryNode) and \
                    n.schedule == dtypes.ScheduleType.GPU_Default:
                n.schedule = dtypes.ScheduleType.Default
                if type(n).__name__ == "Reduce":
                    n.implementation = None
    comm = "emulated" if low.comm == "device" else "emulated-staged"
    if steps - {"staged", "device"}:
        raise DistributedLoweringError(f"emulate_on_host: `{sdfg.name}` has steps on {sorted(steps)} buffers")
    DeviceBufferComm(comm).apply_pass(sdfg, {})
    low.target, low.comm = "cpu", comm
    sdfg.name = f"{sdfg.name}_emu"
    sdfg.validate()
    return sdfg
