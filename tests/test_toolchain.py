"""The direct CPU build (distsdfg/runtime/toolchain.py): one compiler call, a precompiled header, prebuilt
host steps per element type, and DaCe's CMake build where the direct one does not apply."""
import os
import subprocess

import dace
import numpy as np
import pytest

import distsdfg
from distsdfg.runtime import toolchain
from distsdfg.mpi.environment import INCLUDE_DIR

N = dace.symbol("N")


@dace.program
def scale_add(x: dace.float64[N], y: dace.float32[N]):
    return x * 2.0 + y


def test_mpi_flags_come_from_the_wrapper():
    cflags, lflags = toolchain.mpi_flags()
    assert any(f.startswith("-I") for f in cflags)
    assert "-lmpi" in lflags or any("mpi" in f for f in lflags if f.startswith("-l"))


def test_recipe_of_our_runtime_brings_mpi_and_both_headers():
    r = toolchain.recipe(["distsdfg.mpi.environment.DistSDFGRuntime"])
    assert INCLUDE_DIR in r.includes
    assert r.headers.index("mpi.h") < r.headers.index("distsdfg_runtime.h")
    assert any("mpi" in w for w in r.libs)


def test_environments_that_need_cmake_are_not_built_directly():
    @dace.library.environment
    class NeedsCMakeFile:
        cmake_minimum_version = None
        cmake_packages = []
        cmake_variables = {}
        cmake_includes = []
        cmake_libraries = []
        cmake_compile_flags = []
        cmake_link_flags = []
        cmake_files = ["something.cmake"]
        headers = []
        state_fields = []
        init_code = ""
        finalize_code = ""
        dependencies = []

    @dace.library.environment
    class NeedsPackage(NeedsCMakeFile):
        cmake_files = []
        cmake_packages = ["CUDA"]

    with pytest.raises(toolchain.NotDirect, match="CMake files"):
        toolchain.recipe([NeedsCMakeFile.full_class_path()])
    with pytest.raises(toolchain.NotDirect, match="CUDA"):
        toolchain.recipe([NeedsPackage.full_class_path()])
    with pytest.raises(toolchain.NotDirect, match="CMake variable"):
        toolchain._expand("-I${SOME_OTHER_DIR}")


def test_host_step_types_are_read_from_the_generated_code(tmp_path):
    src = tmp_path / "p.cpp"
    src.write_text("distsdfg::run_step<double, distsdfg::HostMem>(a);\n"
                   "distsdfg::run_step<dace::complex64, distsdfg::HostMem>(b);\n"
                   "distsdfg::run_step<float, distsdfg::EmulatedDeviceMem>(c);\n"
                   "distsdfg::run_step<double, distsdfg::HostMem>(d);\n")
    assert toolchain.host_step_types([str(src)]) == ["double", "dace::complex64"]
    assert toolchain.host_step_name("dace::complex64") == "distsdfg_host_step_dace_complex64"
    assert toolchain.host_step_name("long long") == "distsdfg_host_step_long_long"


def test_a_program_is_built_directly_and_runs(tmp_path, monkeypatch):
    """One build through the direct path: no CMake project, the host steps of both element types
    from prebuilt libraries, the precompiled header used (GCC), and the result equals NumPy's."""
    from mpi4py import MPI
    monkeypatch.chdir(tmp_path)
    sdfg = scale_add.to_sdfg()
    distsdfg.lower(sdfg, {"_Mult__map": (1,), "_Add__map": (1,)})
    fn = distsdfg.compile(sdfg, comm=MPI.COMM_SELF)
    x, y = np.arange(7.0), np.linspace(0, 1, 7, dtype=np.float32)
    out = fn(x=x, y=y, N=7)
    assert np.allclose(out, x * 2.0 + y, rtol=1e-6)
    build = os.path.join(sdfg.build_folder, "build")
    assert not os.path.exists(os.path.join(build, "CMakeCache.txt"))
    script = open(os.path.join(build, "distsdfg_compile.sh")).read()
    assert "-O3 -DNDEBUG" in script and " -g " not in script      # Release (dace_compat.release_build)
    decl = open(os.path.join(sdfg.build_folder, "include", "distsdfg_host_steps_decl.h")).read()
    assert "DISTSDFG_DECLARE_HOST_STEP(double," in decl and "DISTSDFG_DECLARE_HOST_STEP(float," in decl
    lib = os.path.join(build, f"lib{sdfg.name}.so")
    needed = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True).stdout
    assert "distsdfg_host_step_double" in needed and "distsdfg_host_step_float" in needed
    # The same build loaded again in this process (a program compiled twice): each load runs from a
    # private copy, never from a file in the shared folder that other ranks may be executing
    # (DaCe rewrote `lib<name>.so_` there: fuzz seed 2024 case 45 crashed in `__dace_init`).
    before = sorted(os.listdir(build))
    again = [distsdfg.compile(sdfg, comm=MPI.COMM_SELF) for _ in range(2)]
    for f in again:
        assert np.allclose(f(x=x, y=y, N=7), x * 2.0 + y, rtol=1e-6)
    assert sorted(os.listdir(build)) == before


@dace.program
def matmul_scaled(a: dace.float64[N, N], b: dace.float64[N, N], c: dace.float32[N]):
    return (a @ b) * 2.0, c * 3.0


def test_shared_parts_are_prepared_as_the_compile_uses_them(tmp_path, monkeypatch):
    """The precompiled header and host steps that the build prepares while Python generates the
    code (``toolchain.prepare``, from ``shared_parts`` of the lowered SDFG) are the ones the compile
    then asks for: same compiler flags, headers and element types."""
    monkeypatch.chdir(tmp_path)
    calls = []
    for name in ("precompiled_header", "host_steps_library"):
        real = getattr(toolchain, name)
        monkeypatch.setattr(toolchain, name, lambda *a, _real=real, _name=name: calls.append((_name, repr(a)))
                            or _real(*a))
    sdfg = matmul_scaled.to_sdfg()
    distsdfg.lower(sdfg, {"_MatMult_.gemm_map": (2, 1, 1), "_Mult__map": (2, 1), "_Mult__map_2": (2,)})
    envs, ctypes = toolchain.shared_parts(sdfg)
    assert "distsdfg.mpi.environment.DistSDFGRuntime" in envs and any("blas" in e for e in envs), envs
    assert sorted(ctypes) == ["double", "float"]
    sdfg.build_folder = str(tmp_path / "build")
    from distsdfg.runtime.program import build
    build(sdfg, rebuild=True)
    half = len(calls) // 2
    assert half == 3 and calls[:half] == calls[half:], calls      # one header, two step libraries


def test_cmake_build_on_request(tmp_path, monkeypatch):
    from mpi4py import MPI
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DISTSDFG_CMAKE", "1")
    sdfg = scale_add.to_sdfg()
    distsdfg.lower(sdfg, {"_Mult__map": (1,), "_Add__map": (1,)})
    sdfg.build_folder = str(tmp_path / "build")      # not the direct build of the same program in the cache
    fn = distsdfg.compile(sdfg, comm=MPI.COMM_SELF)
    x, y = np.arange(5.0), np.ones(5, dtype=np.float32)
    assert np.allclose(fn(x=x, y=y, N=5), x * 2.0 + 1.0)
    assert os.path.exists(os.path.join(sdfg.build_folder, "build", "CMakeCache.txt"))
