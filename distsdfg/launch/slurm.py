"""``distsdfg slurm``: a Piz-Daint-style sbatch script, built by a pure function."""
from __future__ import annotations

import dataclasses
import shlex
from typing import Optional, Tuple

__all__ = ["SlurmJob", "sbatch_script"]


@dataclasses.dataclass(frozen=True)
class SlurmJob:
    """Everything the batch script needs; ``run_args`` are passed to ``distsdfg run``."""
    program: str
    nodes: int = 1
    ntasks_per_node: int = 1
    gpus_per_node: int = 0
    cpus_per_task: int = 1
    time: str = "00:30:00"
    partition: Optional[str] = None
    account: Optional[str] = None
    constraint: Optional[str] = None
    modules: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    target: str = "cpu"
    run_args: Tuple[str, ...] = ()
    job_name: Optional[str] = None
    python: str = "python"

    @property
    def ntasks(self) -> int:
        return self.nodes * self.ntasks_per_node


def sbatch_script(job: SlurmJob) -> str:
    """The script: resources, modules, environment, one compile before ``srun``, then the run."""
    name = job.job_name or "distsdfg-" + job.program.split("/")[-1].split(":")[0].removesuffix(".py")
    lines = ["#!/bin/bash -l", f"#SBATCH --job-name={name}", f"#SBATCH --nodes={job.nodes}",
             f"#SBATCH --ntasks-per-node={job.ntasks_per_node}", f"#SBATCH --cpus-per-task={job.cpus_per_task}"]
    if job.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={job.gpus_per_node}")
    lines.append(f"#SBATCH --time={job.time}")
    for flag, value in (("partition", job.partition), ("account", job.account), ("constraint", job.constraint)):
        if value:
            lines.append(f"#SBATCH --{flag}={value}")
    lines += [f"#SBATCH --output={name}-%j.out", "", "set -euo pipefail"]
    for m in job.modules:
        lines.append(f"module load {m}")
    lines.append(f"export OMP_NUM_THREADS={job.cpus_per_task}")
    lines.append(f"export DISTSDFG_THREADS_PER_RANK={job.cpus_per_task}   # OpenMP and MKL threads per rank")
    lines.append("export PYTHONHASHSEED=0                 # every rank builds the same SDFG")
    if job.target == "gpu":
        lines += ["export MPICH_RDMA_ENABLED_CUDA=1        # CUDA-aware Cray MPICH",
                  "export MPICH_GPU_SUPPORT_ENABLED=1", "export CRAY_CUDA_MPS=0"]
    for k, v in job.env:
        lines.append(f"export {k}={shlex.quote(v)}")
    args = " ".join(shlex.quote(a) for a in (job.program, "-n", str(job.ntasks), "--target", job.target)
                    + tuple(job.run_args))
    lines += ["",
              "# 1. lower and compile once, on this node; the build folder is shared by all ranks",
              f"{job.python} -m distsdfg run {args} --compile-only",
              "",
              "# 2. run on every rank; rank 0 finds the build and compiles nothing",
              f"srun --ntasks={job.ntasks} --ntasks-per-node={job.ntasks_per_node} "
              f"{job.python} -m mpi4py -m distsdfg run {args} --here",
              ""]
    return "\n".join(lines)
