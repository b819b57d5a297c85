"""target="gpu".

Without a GPU: the generated CUDA of distributed programs is really built with nvcc (skipped
where nvcc is absent), kernels run on the device, MPI on host buffers, and a GPU program refuses
to run on a machine without a GPU instead of dying.

With a GPU (skipped elsewhere): the "Core lowering" mpiexec cases run with target="gpu" on 1 and
2 ranks sharing the GPU, checked against NumPy on rank 0 like tests/test_mpi.py.
"""
import glob
import json
import os
import subprocess
import sys
import warnings

import pytest
from dace import dtypes
from dace.sdfg import nodes

import distsdfg
from distsdfg import dace_compat as dc
from distsdfg.errors import DistributedLoweringError
from distsdfg.lowering.gpu import gpu_available, nvcc_path
from distsdfg.launch.mpiexec import mpiexec_argv
from distsdfg.mpi import DistributedMemlet
from distsdfg.testing.programs import get

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NVCC = nvcc_path()
CASES = {
    "matmul": {"gemm_map": (2, 2, 1)},
    "softmax": {"*": (2, 2, 1, 1)},
    "projection": {"*": (1, 4, 1, 1, 1)},         # Megatron-style: heads split 4 ways
}


def _lowered(name, grids, tag="gpu", **options):
    warnings.simplefilter("ignore")
    sdfg = get(name).sdfg()
    dc.simplify(sdfg)
    sdfg.name = f"{sdfg.name}_{tag}"
    return distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, grids), target="gpu", **options)


@pytest.mark.parametrize("name", list(CASES))
def test_kernels_on_device_and_mpi_on_host_temporaries(name):
    sdfg = _lowered(name, CASES[name], "gpu_unit")
    kernels, steps = 0, []
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
                # host code on the device buffers themselves (StagedDeviceMem: MPI on pinned temporaries
                # holding the boxes the step moves), never on whole-buffer host copies
                assert n.buffers == "staged" and n.implementation == "MPI_CUDA"
                assert n.schedule == dtypes.ScheduleType.CPU_Multicore
                steps += [(state, n)]
    assert kernels >= 1 and steps
    local = [a for a, d in sdfg.arrays.items() if a.startswith("__dsdfg_") and "_k" in a]
    assert local and all(sdfg.arrays[a].storage == dtypes.StorageType.GPU_Global for a in local)
    touched = {e.data.data for st, n in steps for e in st.in_edges(n) + st.out_edges(n) if not e.data.is_empty()}
    assert touched & set(local), touched
    assert not [a for a, d in sdfg.arrays.items() if d.storage == dtypes.StorageType.CPU_Pinned]


@pytest.mark.skipif(NVCC is None, reason="nvcc not found (set CUDACXX or put nvcc on PATH): GPU builds not tested")
@pytest.mark.parametrize("name", list(CASES))
def test_generated_cuda_builds_with_nvcc(name, tmp_path, monkeypatch):
    from distsdfg.runtime.program import DistributedProgram, build
    monkeypatch.chdir(tmp_path)
    dc.ensure_mpi_on_path()
    sdfg = _lowered(name, CASES[name])
    compiled, folder = build(sdfg, rebuild=True)
    assert glob.glob(os.path.join(folder, "build", f"lib{sdfg.name}.so"))
    cu = open(glob.glob(os.path.join(folder, "src", "cuda", "*.cu"))[0]).read()
    cpp = open(glob.glob(os.path.join(folder, "src", "cpu", "*.cpp"))[0]).read()
    assert "__global__" in cu or "cublas" in cpp.lower()       # kernels on the device
    assert "run_step" in cpp and "cudaMallocHost" not in cpp        # no whole-buffer pinned copies
    assert "distsdfg::StagedDeviceMem>" in cpp and "distsdfg::HostMem>" not in cpp
    # the runtime's kernels (partial sums combined on the device) are in the CUDA source and the library
    assert '#include "distsdfg_runtime_kernels.cuh"' in cu
    lib = glob.glob(os.path.join(folder, "build", f"lib{sdfg.name}.so"))[0]
    symbols = subprocess.run(["nm", "--defined-only", lib], capture_output=True, text=True).stdout
    assert " t distsdfg_device_combine" in symbols      # defined in the library, not exported
    if name == "matmul" and not gpu_available():
        from mpi4py import MPI
        prog = DistributedProgram(sdfg, compiled, MPI.COMM_WORLD)
        with pytest.raises(DistributedLoweringError, match="sees no CUDA GPU"):
            prog(A=None, B=None)


@pytest.mark.skipif(NVCC is None, reason="nvcc not found (set CUDACXX or put nvcc on PATH): GPU builds not tested")
def test_cuda_aware_program_builds_with_nvcc(tmp_path, monkeypatch):
    """cuda_aware_mpi=True: no staging copies; the steps run the runtime's CUDA memory policy."""
    from distsdfg.runtime.program import DistributedProgram, build
    monkeypatch.chdir(tmp_path)
    dc.ensure_mpi_on_path()
    sdfg = _lowered("matmul", CASES["matmul"], "gpu_aware", cuda_aware_mpi=True)
    compiled, folder = build(sdfg, rebuild=True)
    assert glob.glob(os.path.join(folder, "build", f"lib{sdfg.name}.so"))
    cpp = open(glob.glob(os.path.join(folder, "src", "cpu", "*.cpp"))[0]).read()
    assert cpp.count("distsdfg::DeviceMem>") == 3 and "distsdfg::HostMem>" not in cpp
    assert "distsdfg_runtime_cuda.h" in cpp and "cudaMallocHost" not in cpp     # no pinned staging buffers
    if not gpu_available():
        from mpi4py import MPI
        prog = DistributedProgram(sdfg, compiled, MPI.COMM_WORLD)
        with pytest.raises(DistributedLoweringError, match="sees no CUDA GPU"):
            prog(A=None, B=None)


# -- on a GPU: the Core lowering cases, 1 and 2 ranks sharing one GPU ------------------------------
CORE = ["add3d", "add_scalar", "reduce_sum", "reduce_max", "matmul", "softmax", "projection", "spmv", "add_odd"]
GPU_RUNS = {
    1: [f"{p}:auto" for p in CORE],         # one rank: every grid is all ones
    2: ["add3d:_Add__map=2,1,1", "add3d:_Add__map=1,1,2", "add_scalar:_Add__map=2",
        "reduce_sum:reduce_output=1,2", "reduce_max:reduce_output=2,1",
        "matmul:gemm_map=2,1,1", "matmul:gemm_map=1,2,1", "matmul:gemm_map=1,1,2",
        "softmax:*=2,1,1,1", "softmax:*=1,1,1,2", "projection:einsum_map=1,1,1,2,1", "spmv:spmv=2",
        "add_odd:_Mult__map=1,1;_Add__map=2,1"] + [f"{p}:auto" for p in CORE],
}
needs_gpu = pytest.mark.skipif(not gpu_available() or NVCC is None,
                               reason="no CUDA GPU here (or no nvcc): GPU runs are tested on GPU machines")


@pytest.fixture(scope="module")
def gpu_results(tmp_path_factory):
    """Concurrent mpiexec jobs of at most 8 cases (each job builds its cases with nvcc one after
    another, in a folder of its own), all sharing the one GPU."""
    tmp = tmp_path_factory.mktemp("gpu")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    jobs = []
    for n, cases in GPU_RUNS.items():
        for i in range(0, len(cases), 8):
            cwd = tmp / f"job_{n}_{i}"
            cwd.mkdir()
            argv = mpiexec_argv(n, ["-m", "distsdfg.testing.mpirun", "--target", "gpu", str(cwd / "out.json")]
                                + cases[i:i + 8], timeout=3000)
            jobs.append((n, cwd, subprocess.Popen(argv, env=env, cwd=str(cwd), stdout=subprocess.PIPE,
                                                  stderr=subprocess.STDOUT, text=True)))
    out = {n: {} for n in GPU_RUNS}
    for n, cwd, proc in jobs:
        log = proc.communicate()[0]
        assert proc.returncode == 0, log[-4000:]
        out[n].update({r["case"]: r for r in json.loads((cwd / "out.json").read_text())})
    return out


@needs_gpu
@pytest.mark.parametrize("nprocs,case", [(n, c) for n, cs in GPU_RUNS.items() for c in cs])
def test_core_case_on_gpu_matches_numpy(gpu_results, nprocs, case):
    r = gpu_results[nprocs][case]
    assert "error" not in r, r.get("trace", r.get("error"))
    assert r["shape_ok"]
    if r["dtype"].startswith("int"):
        assert r["rel_err"] == 0
    else:
        assert r["rel_err"] <= (1e-5 if r["dtype"] == "float32" else 1e-10), r["rel_err"]


@needs_gpu
@pytest.mark.parametrize("case", ["matmul:gemm_map=2,1,1", "softmax:*=1,1,1,2"])
def test_gpu_runs_move_the_same_bytes_as_the_cpu_lowering(gpu_results, case):
    """Host staging adds no MPI traffic: the GPU run's steps are the CPU lowering's, byte for byte."""
    from distsdfg.testing.mpirun import parse_case
    r = gpu_results[2][case]
    name, grids = parse_case(case)
    p = get(name)
    sdfg = p.sdfg()
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, grids, fuzzy=True))
    cpu = distsdfg.comm_report(sdfg, nprocs=2, **dict(p.symbols))
    assert [(s["collective"], s["array"], s["sent"]) for s in r["report"]] == \
        [(s.collective, s.array, list(s.sent)) for s in cpu]
    assert sum(sum(s["sent"]) for s in r["report"]) > 0


def _has_cupy() -> bool:
    try:
        import cupy  # noqa: F401
        return True
    except Exception:
        return False


@needs_gpu
@pytest.mark.parametrize("nprocs", [1, 2])
def test_cupy_arguments_and_calls_with_new_sizes(tmp_path, nprocs):
    """CuPy arrays in (rank 0) and out, an argument updated in place, and calls whose sizes change
    after the program's persistent device buffers were made (NumPy arrays where CuPy is absent)."""
    from distsdfg.testing import gpu_args
    records = gpu_args.launch(tmp_path, nprocs)
    assert [r["check"] for r in records] == ["matmul 256x192x128", "matmul 64x48x40", "matmul 256x192x128",
                                             "affine in place"]
    for r in records:
        assert r["kind"] == ("cupy" if _has_cupy() else "numpy"), r
        assert r["rel_err"] <= 1e-12, r


@needs_gpu
@pytest.mark.skipif(not _has_cupy(), reason="CuPy is not installed: device-resident arguments need it")
@pytest.mark.parametrize("nprocs", [1, 2])
def test_device_resident_cupy_arguments(tmp_path, nprocs):
    """CuPy arrays in and out (distsdfg.lowering.device_args): on one rank and on two (staged
    communication, the steps on rank 0's device arrays) the device-argument variant runs and no
    argument is copied to the host."""
    from distsdfg.testing import gpu_args
    records = gpu_args.launch(tmp_path, nprocs)
    for r in records:
        assert r["kind"] == "cupy" and r["rel_err"] <= 1e-12, r
        assert r["variant"] and r["host_copies"] == 0, r


def _mpi_is_cuda_aware() -> bool:
    if not gpu_available() or NVCC is None:
        return False
    code = "from mpi4py import MPI; from distsdfg.lowering.gpu import mpi_cuda_support; print(mpi_cuda_support())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    return out.stdout.strip() == "True"


@pytest.mark.skipif(not _mpi_is_cuda_aware(),
                    reason="needs a GPU and an MPI built with CUDA (MPIX_Query_cuda_support): the bundled mpich "
                           "wheel is not; the device code path is tested on host memory in test_device_comm.py")
def test_core_cases_with_cuda_aware_mpi(tmp_path):
    """cuda_aware_mpi=True on 2 ranks sharing the GPU: MPI on device buffers, checked against NumPy."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    cases = GPU_RUNS[2][:13]
    out = tmp_path / "out.json"
    argv = mpiexec_argv(2, ["-m", "distsdfg.testing.mpirun", "--target", "gpu", "--comm", "device", str(out)] + cases,
                        timeout=3000)
    proc = subprocess.run(argv, env=env, cwd=str(tmp_path), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for r in json.loads(out.read_text()):
        assert "error" not in r, r.get("trace", r.get("error"))
        tol = 0 if r["dtype"].startswith("int") else 1e-5 if r["dtype"] == "float32" else 1e-10
        assert r["shape_ok"] and r["rel_err"] <= tol, r
