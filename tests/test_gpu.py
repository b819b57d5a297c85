"""target="gpu" (issue 8, the part that needs no GPU): the generated CUDA of distributed programs
is really built with nvcc (skipped where nvcc is absent), kernels run on the device, MPI on host
buffers, and a GPU program refuses to run on a machine without a GPU instead of dying.
"""
import glob
import os
import warnings

import pytest
from dace import dtypes
from dace.sdfg import nodes

import distsdfg
from distsdfg import dace_compat as dc
from distsdfg.errors import DistributedLoweringError, UnsupportedProgramError
from distsdfg.gpu import gpu_available, nvcc_path
from distsdfg.mpi import DistributedMemlet
from distsdfg.testing.programs import get

NVCC = nvcc_path()
CASES = {
    "matmul": {"gemm_map": (2, 2, 1)},
    "softmax": {"*": (2, 2, 1, 1)},
    "projection": {"*": (1, 4, 1, 1, 1)},         # Megatron-style: heads split 4 ways
}


def _lowered(name, grids, tag="gpu"):
    warnings.simplefilter("ignore")
    sdfg = get(name).sdfg()
    dc.simplify(sdfg)
    sdfg.name = f"{sdfg.name}_{tag}"
    return distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, grids), target="gpu")


@pytest.mark.parametrize("name", list(CASES))
def test_kernels_on_device_and_mpi_on_host(name):
    sdfg = _lowered(name, CASES[name], "gpu_unit")
    kernels = 0
    for state in sdfg.states():
        scopes = state.scope_dict()
        for n in state.nodes():
            if scopes[n] is None and isinstance(n, nodes.MapEntry):
                assert n.map.schedule == dtypes.ScheduleType.GPU_Device
                kernels += 1
            if scopes[n] is None and isinstance(n, nodes.LibraryNode) and not isinstance(n, DistributedMemlet):
                assert n.schedule == dtypes.ScheduleType.GPU_Default
                kernels += 1
            if isinstance(n, DistributedMemlet):
                for e in state.in_edges(n) + state.out_edges(n):
                    if not e.data.is_empty():
                        assert sdfg.arrays[e.data.data].storage != dtypes.StorageType.GPU_Global, (n, e.data)
    assert kernels >= 1
    local = [a for a, d in sdfg.arrays.items() if a.startswith("__dsdfg_") and "_k" in a and "_host" not in a]
    assert local and all(sdfg.arrays[a].storage == dtypes.StorageType.GPU_Global for a in local)


def test_programs_with_homes_are_refused_for_now():
    sdfg = get("jacobi1d").sdfg()
    dc.simplify(sdfg)
    with pytest.raises(UnsupportedProgramError, match="target='gpu'.*home buffers"):
        distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"*": (4,)}), target="gpu")


@pytest.mark.skipif(NVCC is None, reason="nvcc not found (set CUDACXX or put nvcc on PATH): GPU builds not tested")
@pytest.mark.parametrize("name", list(CASES))
def test_generated_cuda_builds_with_nvcc(name, tmp_path, monkeypatch):
    from distsdfg.runtime import DistributedProgram, build
    monkeypatch.chdir(tmp_path)
    dc.ensure_mpi_on_path()
    sdfg = _lowered(name, CASES[name])
    compiled, folder = build(sdfg, rebuild=True)
    assert glob.glob(os.path.join(folder, "build", f"lib{sdfg.name}.so"))
    cu = open(glob.glob(os.path.join(folder, "src", "cuda", "*.cu"))[0]).read()
    cpp = open(glob.glob(os.path.join(folder, "src", "cpu", "*.cpp"))[0]).read()
    assert "__global__" in cu or "cublas" in cpp.lower()       # kernels on the device
    assert "cudaMemcpy" in cpp and "run_step" in cpp              # MPI steps on host copies
    if name == "matmul" and not gpu_available():
        from mpi4py import MPI
        prog = DistributedProgram(sdfg, compiled, MPI.COMM_WORLD)
        with pytest.raises(DistributedLoweringError, match="sees no CUDA GPU"):
            prog(A=None, B=None)
