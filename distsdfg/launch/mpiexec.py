"""Launching: find the bundled mpiexec and build argv lists by pure functions."""
from __future__ import annotations

import os
import shutil
import sys
from typing import List, Optional, Sequence

__all__ = ["find_mpiexec", "mpiexec_argv", "srun_argv", "launcher_argv", "environment"]


def find_mpiexec() -> str:
    """The mpiexec of the MPI that mpi4py uses: the venv's (mpich wheel) first, then PATH."""
    cand = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.exists(cand):
        return cand
    exe = shutil.which("mpiexec")
    if exe is None:
        raise FileNotFoundError("no mpiexec found: install the package's dependencies (pip install -e .), which "
                                "bring the mpich wheel, or put an MPI's mpiexec on PATH")
    return exe


def environment(env: Optional[dict] = None) -> str:
    """'slurm' inside a Slurm allocation, 'mpiexec' under an MPI launcher, else 'plain'."""
    env = os.environ if env is None else env
    if "SLURM_JOB_ID" in env and ("SLURM_PROCID" in env or "SLURM_NTASKS" in env):
        return "slurm"
    if any(k in env for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "HYDRA_CONTROL_FD")):
        return "mpiexec"
    return "plain"


def mpiexec_argv(nprocs: int, script: Sequence[str], *, mpiexec: Optional[str] = None,
                 python: Optional[str] = None, timeout: Optional[float] = None,
                 genv: Optional[dict] = None, hostfile: Optional[str] = None) -> List[str]:
    """``[timeout T] mpiexec [-f HOSTFILE] -n P [-genv K V ...] python -m mpi4py SCRIPT...``: one failing
    rank aborts the whole job; ``genv`` sets variables in every rank only (not in mpiexec itself);
    ``hostfile``: the machines to start ranks on (MPICH's Hydra format, ``host[:ranks]`` per line)."""
    argv = []
    if timeout:
        argv += ["timeout", str(int(timeout))]
    argv += [mpiexec or find_mpiexec()]
    if hostfile:
        argv += ["-f", hostfile]
    argv += ["-n", str(int(nprocs))]
    for k, v in (genv or {}).items():
        argv += ["-genv", str(k), str(v)]
    argv += [python or sys.executable, "-m", "mpi4py"]
    return argv + list(script)


def srun_argv(nprocs: int, script: Sequence[str], *, python: Optional[str] = None,
              timeout: Optional[float] = None) -> List[str]:
    """``[timeout T] srun --ntasks=P python -m mpi4py SCRIPT...`` inside a Slurm allocation."""
    argv = ["timeout", str(int(timeout))] if timeout else []
    return argv + ["srun", f"--ntasks={int(nprocs)}", python or sys.executable, "-m", "mpi4py"] + list(script)


def launcher_argv(nprocs: int, script: Sequence[str], *, env: Optional[dict] = None,
                  timeout: Optional[float] = None, hostfile: Optional[str] = None) -> List[str]:
    """srun inside a Slurm allocation, else the bundled mpiexec (on the machines of ``hostfile``, if given)."""
    if not hostfile and environment(env) == "slurm" and shutil.which("srun", path=(env or os.environ).get("PATH")):
        return srun_argv(nprocs, script, timeout=timeout)
    return mpiexec_argv(nprocs, script, timeout=timeout, hostfile=hostfile)
