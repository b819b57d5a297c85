"""The DaCe environments that add MPI and our runtime header to generated code."""
import hashlib
import os

import dace.library
from dace.libraries.mpi.environments.mpi import MPI

INCLUDE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


def headers_digest() -> bytes:
    """A digest of every header of ``INCLUDE_DIR`` (the runtime's headers include one another): what a
    build, a precompiled header or a host-step library compiled from them is keyed by."""
    h = hashlib.sha1()
    for name in sorted(os.listdir(INCLUDE_DIR)):
        h.update(name.encode() + b"\0")
        with open(os.path.join(INCLUDE_DIR, name), "rb") as f:
            h.update(f.read())
    return h.digest()


@dace.library.environment
class DistSDFGRuntime:
    cmake_minimum_version = None
    cmake_packages = []
    cmake_variables = {}
    cmake_includes = [INCLUDE_DIR]
    cmake_libraries = []
    cmake_compile_flags = []
    cmake_link_flags = []
    cmake_files = []
    headers = ["distsdfg_runtime.h"]
    state_fields = []
    init_code = ""
    finalize_code = ""
    dependencies = [MPI]


@dace.library.environment
class DistSDFGRuntimeCUDA(DistSDFGRuntime):
    """The runtime for steps on a GPU program's device buffers; the program links CUDA already. Its
    CUDA source gets the runtime's kernels (partial sums combined on the device)."""
    headers = {"frame": ["distsdfg_runtime.h", "distsdfg_runtime_cuda.h"], "cuda": ["distsdfg_runtime_kernels.cuh"]}
