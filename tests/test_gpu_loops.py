"""target="gpu" for programs with loops (home buffers kept across iterations) and with
distributed placement.

Without a GPU: the lowered SDFG keeps home buffers in GPU memory and stages every step (unit
tier); the generated code of one loop program and one placement program builds with nvcc; and the
GPU lowering of loop and placement cases runs on the host (``distsdfg.lowering.gpu.emulate_on_host``: the
same buffers, staging copies and steps, device memory replaced by host memory; steps on device
buffers through ``EmulatedDeviceMem``) in one mpiexec job on 2 ranks, checked against NumPy.

With a GPU (skipped elsewhere): the same cases lowered for the GPU run on it.
"""
import glob
import os
import subprocess
import sys
import warnings

import pytest
from dace import data as dt
from dace import dtypes
from dace.sdfg import nodes

import distsdfg
from distsdfg import dace_compat as dc
from distsdfg.errors import UnsupportedProgramError
from distsdfg.lowering.gpu import gpu_available, nvcc_path
from distsdfg.mpi import DistributedMemlet
from distsdfg.testing.mpirun import bytes_mismatch, launch_cases
from distsdfg.testing.programs import get

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NVCC = nvcc_path()

#: Programs with loops (home buffers kept across iterations) and with distributed placement.
LOOP_CASES = {
    "jacobi2d": ({"*": (2, 2)}, None),                       # halo exchanges in a time loop
    "jacobi_conv": ({"*": (4,)}, None),                      # a reduction to a scalar that ends the loop
    "flagged": ({"*": (4,)}, "distributed"),                 # placement: each rank passes its block
}


def _lowered_homes(name, tag, **options):
    warnings.simplefilter("ignore")
    grids, placement = LOOP_CASES[name]
    sdfg = get(name).sdfg()
    dc.simplify(sdfg)
    sdfg.name = f"{sdfg.name}_{tag}"
    return distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, grids), target="gpu", placement=placement, **options)


def _kernel_arrays(sdfg):
    """Arrays that top-level kernels (maps, library nodes other than steps) read or write."""
    used = set()
    for state in sdfg.states():
        scopes = state.scope_dict()
        for n in state.nodes():
            if scopes[n] is None and isinstance(n, nodes.MapEntry):
                assert n.map.schedule == dtypes.ScheduleType.GPU_Device, n
                edges = state.in_edges(n) + state.out_edges(state.exit_node(n))
            elif scopes[n] is None and isinstance(n, nodes.LibraryNode) and not isinstance(n, DistributedMemlet):
                assert n.schedule == dtypes.ScheduleType.GPU_Default, n
                edges = state.in_edges(n) + state.out_edges(n)
            else:
                continue
            used |= {e.data.data for e in edges if not e.data.is_empty()}
    return {a for a in used if not isinstance(sdfg.arrays[a], dt.Scalar)}


@pytest.mark.parametrize("name,aware", [("jacobi2d", False), ("jacobi_conv", True), ("flagged", False),
                                        ("flagged", True)])
def test_loops_and_placement_keep_homes_on_the_device(name, aware):
    """Kernels on the device; home buffers in GPU memory, allocated once; every step on the device
    buffers (MPI on host temporaries of the boxes it moves, or, with cuda_aware_mpi, on the device
    buffers too); no whole-buffer host copies."""
    sdfg = _lowered_homes(name, f"homes_unit_{int(aware)}", cuda_aware_mpi=aware)
    low = sdfg._distsdfg
    assert low.homes and (LOOP_CASES[name][1] is None or low.boundary)
    on_gpu = _kernel_arrays(sdfg)
    assert on_gpu and all(sdfg.arrays[a].storage == dtypes.StorageType.GPU_Global for a in on_gpu)
    homes = {h.buffer for h in low.homes}
    assert homes & on_gpu, (homes, on_gpu)
    for h in homes & on_gpu:
        assert sdfg.arrays[h].lifetime == dtypes.AllocationLifetime.Persistent, h
    steps, touched = 0, set()
    for state in sdfg.states():
        for n in state.nodes():
            if not isinstance(n, DistributedMemlet):
                continue
            steps += 1
            assert n.implementation == "MPI_CUDA" and n.buffers == ("device" if aware else "staged"), n
            touched |= {e.data.data for e in state.in_edges(n) + state.out_edges(n) if not e.data.is_empty()}
    assert steps >= 3
    assert homes & on_gpu & touched, (homes, touched)       # steps exchange halos on the home buffers themselves
    assert not [a for a, d in sdfg.arrays.items() if d.storage == dtypes.StorageType.CPU_Pinned]


def test_a_loop_condition_on_a_device_array_is_refused():
    """Loop conditions run on the host: one that would read a GPU buffer is refused, not read wrong."""
    from distsdfg.lowering.gpu import OffloadKernels
    sdfg = _lowered_homes("jacobi_conv", "cond_unit")
    edge = next(e for e in sdfg.edges() if e.data.assignments or not e.data.is_unconditional())
    home = next(h.buffer for h in sdfg._distsdfg.homes if sdfg.arrays[h.buffer].storage ==
                dtypes.StorageType.GPU_Global)
    edge.data.assignments["__probe"] = f"{home}[1]"
    with pytest.raises(UnsupportedProgramError, match=f"target='gpu'.*reads `{home}`, which lives on the GPU"):
        OffloadKernels._check_host_code(sdfg)


needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (set CUDACXX or put nvcc on PATH): "
                                                     "GPU builds not tested")


def _built(sdfg, tmp_path, monkeypatch):
    from distsdfg.runtime.program import build
    monkeypatch.chdir(tmp_path)
    dc.ensure_mpi_on_path()
    compiled, folder = build(sdfg, rebuild=True)
    assert glob.glob(os.path.join(folder, "build", f"lib{sdfg.name}.so"))
    cpp = open(glob.glob(os.path.join(folder, "src", "cpu", "*.cpp"))[0]).read()
    cu = open(glob.glob(os.path.join(folder, "src", "cuda", "*.cu"))[0]).read()
    return cpp, cu


@needs_nvcc
def test_loop_program_builds_with_nvcc(tmp_path, monkeypatch):
    """Jacobi sweeps until converged (a reduction to a scalar and a break in the loop), staged."""
    sdfg = _lowered_homes("jacobi_conv", "gpu_loop_build")
    cpp, cu = _built(sdfg, tmp_path, monkeypatch)
    assert "__global__" in cu
    assert "distsdfg::StagedDeviceMem>" in cpp and "distsdfg::HostMem>" not in cpp
    assert "cudaMallocHost" not in cpp        # no persistent whole-buffer pinned copies: the runtime's pool


@needs_nvcc
def test_placement_program_builds_with_nvcc(tmp_path, monkeypatch):
    """Jacobi 2-D with every rank passing its own blocks, MPI on the device buffers (cuda_aware_mpi)."""
    warnings.simplefilter("ignore")
    sdfg = get("jacobi2d").sdfg()
    dc.simplify(sdfg)
    sdfg.name += "_gpu_placement_build"
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"*": (2, 2)}), target="gpu", placement="distributed",
                   cuda_aware_mpi=True)
    assert sdfg._distsdfg.boundary
    cpp, cu = _built(sdfg, tmp_path, monkeypatch)
    assert "__global__" in cu
    assert "distsdfg::DeviceMem>" in cpp and "distsdfg::HostMem>" not in cpp and "cudaMallocHost" not in cpp


# -- the GPU lowering run on the host: one mpiexec job, 2 ranks ------------------------------------
EMULATED = [
    "staged|loop|cg:auto",                      # matvecs, replicated scalars (Allreduce), a break
    "device|loop|jacobi_conv:*=2",              # a reduction that ends the loop, on device buffers
    "staged|placement|jacobi2d:2,1 x2",         # halos in a time loop; blocks stay on their owners between calls
    "device|placement|flagged:2",               # placement and a branch on rank 0's data
]


def _run_cases(tmp, nprocs, cases, extra=()):
    return launch_cases(nprocs, cases, tmp, module="distsdfg.testing.gpu_emulated", options=extra)


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_emulated")
    results = _run_cases(tmp, 2, EMULATED)
    built = {p: open(p).read() for p in glob.glob(str(tmp / ".dacecache" / "*" / "src" / "cpu" / "*.cpp"))}
    return results, built


def _check(r):
    assert "error" not in r, r.get("trace", r.get("error"))
    assert r["shape_ok"]
    assert bytes_mismatch(r) is None, bytes_mismatch(r)     # PMPI-measured bytes == comm_report
    errs = r["rel_err"] if isinstance(r["rel_err"], dict) else {"": r["rel_err"]}
    if "assembled_err" in r:
        errs.update({f"{k} assembled": v for k, v in r["assembled_err"].items()})
    assert errs and max(errs.values()) <= 1e-10, errs


@pytest.mark.parametrize("case", EMULATED)
def test_gpu_lowering_runs_on_the_emulated_device(emulated, case):
    _check(emulated[0][case])


def test_emulation_runs_both_step_policies(emulated):
    """Staged cases run the staged device code path (MPI on host temporaries), device cases the
    CUDA-aware one, both over host memory."""
    texts = list(emulated[1].values())
    assert len(texts) >= len(EMULATED)
    assert any("distsdfg::EmulatedDeviceMem>" in t for t in texts)
    assert any("distsdfg::EmulatedStagedMem>" in t for t in texts)
    assert not any("distsdfg::HostMem>" in t or "distsdfg::DeviceMem>" in t or "distsdfg::StagedDeviceMem>" in t
                   for t in texts)


# -- on a GPU (skipped elsewhere) --------------------------------------------------------------------
def _mpi_is_cuda_aware() -> bool:
    code = "from mpi4py import MPI; from distsdfg.lowering.gpu import mpi_cuda_support; print(mpi_cuda_support())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    return out.stdout.strip() == "True"


@pytest.mark.skipif(not gpu_available() or NVCC is None,
                    reason="no CUDA GPU here (or no nvcc): the loop and placement cases run on GPU machines")
def test_loop_and_placement_cases_on_the_gpu(tmp_path):
    """The emulated cases lowered for the GPU and run on it, 2 ranks sharing it (device cases only
    where MPI reports CUDA support)."""
    cases = [c for c in EMULATED if c.startswith("staged|") or _mpi_is_cuda_aware()]
    results = _run_cases(tmp_path, 2, cases, ["--on-gpu"])
    for case in cases:
        _check(results[case])
