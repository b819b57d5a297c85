"""``distsdfg slurm``: a Piz-Daint-style sbatch script, built by a pure function."""
from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from typing import List, Optional, Tuple

__all__ = ["SlurmJob", "sbatch_script"]


@dataclasses.dataclass(frozen=True)
class SlurmJob:
    """Everything the batch script needs: a ``program`` (``FILE.py:FUNC`` for ``distsdfg run``, with
    ``run_args``) or a ``command`` every rank runs (``("python", "train.py", "--epochs", "3")``, a
    driver script that calls ``distsdfg.compile`` itself). ``python``: the interpreter of the ranks
    (default: the one running this, so the job finds this environment's distsdfg)."""
    program: str = ""
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
    python: str = dataclasses.field(default_factory=lambda: sys.executable)
    command: Tuple[str, ...] = ()

    def __post_init__(self):
        if bool(self.program) == bool(self.command):
            raise ValueError("a Slurm job runs either a program (FILE.py:FUNC) or a command (-- python train.py ...), "
                             f"got {'both' if self.program else 'neither'}")

    @property
    def ntasks(self) -> int:
        return self.nodes * self.ntasks_per_node

    @property
    def name(self) -> str:
        """The job's name: ``job_name``, else ``distsdfg-`` and the program's or the script's file name."""
        if self.job_name:
            return self.job_name
        target = self.program.split(":")[0] if self.program else next(
            (a for a in self.command if a.endswith(".py")), self.command[0])
        return "distsdfg-" + os.path.basename(target).removesuffix(".py")

    def rank_command(self) -> List[str]:
        """What every rank runs for ``command``: a Python script under this job's interpreter with
        ``-m mpi4py`` (an exception on one rank aborts the job instead of hanging it); anything else as given."""
        cmd = list(self.command)
        if os.path.basename(cmd[0]).startswith("python"):
            rest = cmd[1:]
            if rest[:2] == ["-m", "mpi4py"]:
                rest = rest[2:]
            return [self.python, "-m", "mpi4py"] + rest
        return cmd


def sbatch_script(job: SlurmJob) -> str:
    """The script: resources, modules, environment, one compile before ``srun``, then the run."""
    name = job.name
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
    srun = f"srun --ntasks={job.ntasks} --ntasks-per-node={job.ntasks_per_node}"
    python = shlex.quote(job.python)
    if job.command:
        lines += ["", "# every rank runs the driver script; its distsdfg.compile builds on rank 0 (the build cache is",
                  "# shared through the file system: $DISTSDFG_CACHE, default ~/.cache/distsdfg)",
                  f"{srun} {' '.join(shlex.quote(a) for a in job.rank_command())}", ""]
        return "\n".join(lines)
    args = " ".join(shlex.quote(a) for a in (job.program, "-n", str(job.ntasks), "--target", job.target)
                    + tuple(job.run_args))
    lines += ["",
              "# 1. lower and compile once, on this node; the build folder is shared by all ranks",
              f"{python} -m distsdfg run {args} --compile-only",
              "",
              "# 2. run on every rank; rank 0 finds the build and compiles nothing",
              f"{srun} {python} -m mpi4py -m distsdfg run {args} --here",
              ""]
    return "\n".join(lines)
