"""Communication on device buffers (``lower(..., target="gpu")``, issues 8 and 27).

A GPU program's steps never touch a rank's local buffers from the host: the runtime copies
boxes as 2-D planes (``cudaMemcpy2D``) and combines partial values on the host (``PlaneMem`` in
``distsdfg_runtime.h``). With CUDA-aware MPI (``DeviceMem``) its temporaries are device memory and
MPI is handed the local buffers too; by default (``StagedDeviceMem``) its temporaries are pinned
host memory and MPI sees only them, every box a step moves packed into one. Without a GPU both
code paths run over host memory (``EmulatedDeviceMem``, ``EmulatedStagedMem``): real mpiexec runs
on 4 ranks, every communication pattern the solver emits, checked against NumPy on rank 0.
"""
import json
import os
import subprocess
import sys
import warnings

import pytest
from dace import dtypes

import distsdfg
from distsdfg import dace_compat as dc
from distsdfg.errors import DistributedLoweringError
from distsdfg.lowering.rewriter import RUNTIME_ARGS
from distsdfg.mpi import DistributedMemlet
from distsdfg.testing.mpirun import bytes_mismatch, counted_argv
from distsdfg.testing.programs import get

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Together these emit every collective of the solver (asserted below).
EMULATED = [
    "matmul:gemm_map=2,2,1",                                        # Scatterv + Bcast, Gatherv
    "reduce_max:reduce_output=2,2",                                 # Reduce (max)
    "add_odd:_Mult__map=3,1;_Add__map=4,1",                         # uneven blocks, Alltoallw
    "add_scalar:_Add__map=4",                                       # a scalar argument
    "spmv:spmv=4",                                                  # int32 index arrays
    "softmax:*=1,1,1,4",                                            # float32 Allreduce (max, sum)
    "chain:_MatMult_.gemm_map=1,1,4;_MatMult__2.gemm_map=1,1,4",    # Reduce_scatter, Reduce (sum)
    "chain:_MatMult_.gemm_map=2,1,2;_MatMult__2.gemm_map=1,1,4",    # Alltoallv of partial sums
    "chain:_MatMult_.gemm_map=4,1,1;_MatMult__2.gemm_map=2,2,1",    # Allgatherv
    "jacobi1d:*=4",                                                 # halos in place: Isend/Irecv
    "jacobi2d:*=2,2",                                               # strided 2-D halos
    "masked:_Gt__map=4,1;_numpy_logical_and__map=1,4",             # booleans, rows to columns
]
COLLECTIVES = {"Scatterv", "Bcast", "Gatherv", "Reduce", "Allreduce", "Reduce_scatter", "Allgatherv",
               "Alltoallw", "Alltoallv", "Isend/Irecv"}


#: The two device code paths over host memory: --comm of distsdfg.testing.mpirun -> runtime policy.
POLICIES = {"emulated": "EmulatedDeviceMem", "emulated-staged": "EmulatedStagedMem"}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """One mpiexec job per policy, started together: a job compiles on rank 0 while its other ranks
    sleep, so two side by side keep both cores of a small machine busy."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               DISTSDFG_BUILDS=".dacecache")          # builds in the job's folder, read below
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    started = {}
    for policy in POLICIES:
        tmp = tmp_path_factory.mktemp(policy)
        argv = counted_argv(4, ["-m", "distsdfg.testing.mpirun", "--comm", policy, str(tmp / "out.json")] + EMULATED,
                            timeout=1500)
        with open(tmp / "log.txt", "w") as log:     # a file, not a pipe: a full pipe would stall the job
            proc = subprocess.Popen(argv, env=env, cwd=str(tmp), stdout=log, stderr=subprocess.STDOUT)
        started[policy] = (tmp, proc)
    yield started
    for _, proc in started.values():
        if proc.poll() is None:
            proc.terminate()        # `timeout` passes it on to mpiexec
            proc.wait()


@pytest.fixture(scope="module", params=list(POLICIES))
def emulated(request, jobs):
    tmp, proc = jobs[request.param]
    proc.wait()
    assert proc.returncode == 0, (tmp / "log.txt").read_text()[-6000:]
    built = " ".join(open(p).read() for p in tmp.glob(".dacecache/*/src/cpu/*.cpp"))
    return {r["case"]: r for r in json.loads((tmp / "out.json").read_text())}, built, POLICIES[request.param]


@pytest.mark.parametrize("case", EMULATED)
def test_device_code_path_matches_numpy(emulated, case):
    r = emulated[0][case]
    assert "error" not in r, r.get("trace", r.get("error"))
    assert r["shape_ok"]
    assert bytes_mismatch(r) is None, bytes_mismatch(r)     # PMPI-measured bytes == comm_report
    tol = 0 if r["dtype"].startswith("int") else 1e-5 if r["dtype"] == "float32" else 1e-10
    assert r["rel_err"] <= tol, r["rel_err"]


def test_every_collective_ran_through_the_device_code_path(emulated):
    results, built, policy = emulated
    seen = {s["collective"] for r in results.values() for s in r.get("report", [])}
    assert COLLECTIVES <= seen, COLLECTIVES - seen
    others = set(POLICIES.values()) - {policy}
    assert f"distsdfg::{policy}>" in built and "distsdfg::HostMem>" not in built
    assert not any(f"distsdfg::{o}>" in built for o in others)


def test_cuda_aware_lowering_hands_device_buffers_to_mpi():
    warnings.simplefilter("ignore")
    sdfg = get("matmul").sdfg()
    dc.simplify(sdfg)
    sdfg.name += "_cuda_aware_unit"
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"gemm_map": (2, 2, 1)}), target="gpu", cuda_aware_mpi=True)
    assert sdfg._distsdfg.comm == "device"
    assert not [a for a, d in sdfg.arrays.items() if d.storage == dtypes.StorageType.CPU_Pinned]   # no staging
    steps = 0
    for state in sdfg.states():
        for n in state.nodes():
            if isinstance(n, DistributedMemlet):
                steps += 1
                assert n.buffers == "device" and n.implementation == "MPI_CUDA"
                local = [e.data.data for e in state.in_edges(n) + state.out_edges(n)
                         if not e.data.is_empty() and e.data.data.startswith("__dsdfg_")
                         and e.data.data not in RUNTIME_ARGS]
                assert local and all(sdfg.arrays[a].storage == dtypes.StorageType.GPU_Global for a in local)
    assert steps == 3


def test_cuda_aware_mpi_needs_the_gpu_target():
    sdfg = get("matmul").sdfg()
    with pytest.raises(DistributedLoweringError, match="needs target='gpu'"):
        distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"gemm_map": (2, 1, 1)}), cuda_aware_mpi=True)


def test_an_mpi_without_cuda_support_is_refused_before_the_call():
    from mpi4py import MPI
    from distsdfg.lowering.gpu import mpi_cuda_support, require_cuda_aware_mpi
    assert MPI.Is_initialized()       # the query asks the MPI library this process loaded
    if mpi_cuda_support() is not False:
        pytest.skip("this MPI supports CUDA (or does not say): nothing to refuse")
    with pytest.raises(DistributedLoweringError, match="reports no CUDA support.*without cuda_aware_mpi"):
        require_cuda_aware_mpi("matmul")


def test_cli_passes_cuda_aware_mpi_to_both_steps_of_a_slurm_job(tmp_path, capsys):
    from distsdfg.launch.cli import main
    out = tmp_path / "job.sbatch"
    main(["slurm", os.path.join(ROOT, "examples", "matmul.py:matmul"), "--target", "gpu", "--cuda-aware-mpi",
          "--gpus-per-node", "4", "--ntasks-per-node", "4", "-o", str(out)])
    lines = out.read_text().splitlines()
    compile_line = next(l for l in lines if "--compile-only" in l)
    srun_line = next(l for l in lines if l.startswith("srun "))
    assert "--cuda-aware-mpi" in compile_line and "--cuda-aware-mpi" in srun_line and "--target gpu" in srun_line
