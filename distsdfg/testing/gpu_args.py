"""Arguments of target="gpu" programs on a GPU machine: CuPy arrays in and out, and calls whose
sizes change (the program's device and pinned buffers are sized at initialisation).

    mpiexec -n P python -m mpi4py -m distsdfg.testing.gpu_args OUT.json [cpu]

With ``cpu`` the same calls run on a target="cpu" lowering (NumPy arrays): its ranks' host
buffers are persistent too (``distsdfg.lowering.buffers``) and must be re-made when sizes change.

Uses CuPy arrays on rank 0 when CuPy imports, NumPy arrays otherwise; rank 0 writes one JSON
record per check (``kind`` is the array module of what came back; ``host_copies``: how many CuPy
arguments the call copied to the host, ``distsdfg.runtime.program.to_host``, the only place
distsdfg does; ``variant``: whether the call ran the device-argument variant,
``distsdfg.lowering.device_args``). CuPy calls run the variant and copy no argument to the host, on
any number of ranks.
"""
import json
import sys

import numpy as np


def _module():
    try:
        import cupy
        return cupy
    except Exception:       # not installed, or no usable CUDA runtime for it
        return np


def _rel_err(xp, out, ref) -> float:
    out, ref = xp.asarray(out), xp.asarray(ref)
    if out.shape != ref.shape:
        return float("inf")
    return float(xp.abs(out - ref).max() / max(float(xp.abs(ref).max()), 1e-300))


def main(path: str, target: str = "gpu") -> None:
    from mpi4py import MPI

    import distsdfg
    from distsdfg.testing.programs import get
    from distsdfg.runtime import program as program_module
    comm = MPI.COMM_WORLD
    P = comm.size
    xp = _module() if target == "gpu" else np
    rng = np.random.default_rng(7)
    records = []
    copied = []
    to_host = program_module.to_host

    def counted(kwargs, keep=()):
        moved = to_host(kwargs, keep)
        copied.extend(moved)
        return moved
    program_module.to_host = counted

    def ran_variant(prog):
        return any(v is not None for v in getattr(prog, "_variants", {}).values())

    # matmul, rows split: CuPy A and B on rank 0, the product comes back as a CuPy array;
    # then two more calls with other sizes (the persistent buffers are re-made).
    sdfg = get("matmul").sdfg()
    sdfg.name = f"{target}_args_matmul"
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"gemm_map": (P, 1, 1)}), target=target)
    matmul = distsdfg.compile(sdfg, comm=comm)
    for m, k, n in ((256, 192, 128), (64, 48, 40), (256, 192, 128)):
        A, B = xp.asarray(rng.random((m, k))), xp.asarray(rng.random((k, n)))
        copied.clear()
        C = matmul(A=A, B=B)
        if comm.rank == 0:
            records.append({"check": f"matmul {m}x{k}x{n}", "kind": type(C).__module__.split(".")[0],
                            "rel_err": _rel_err(xp, C, A @ B), "host_copies": len(copied),
                            "variant": ran_variant(matmul)})

    # an argument written in place (B = 2 A + 1, rows split): the CuPy array itself is updated.
    p = get("affine")
    sdfg = p.sdfg()
    sdfg.name = f"{target}_args_affine"
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"*": (P, 1)}, fuzzy=True), target=target)
    affine = distsdfg.compile(sdfg, comm=comm)
    A = xp.asarray(rng.random((64, 64)))
    B = xp.zeros((64, 64))
    copied.clear()
    affine(A=A, B=B)
    if comm.rank == 0:
        records.append({"check": "affine in place", "kind": type(B).__module__.split(".")[0],
                        "rel_err": _rel_err(xp, B, 2.0 * A + 1.0), "host_copies": len(copied),
                        "variant": ran_variant(affine)})
    program_module.to_host = to_host
    if comm.rank == 0:
        with open(path, "w") as f:
            json.dump(records, f, indent=1)
        for r in records:
            print(json.dumps(r), flush=True)


def launch(folder, nprocs: int, target: str = "gpu") -> list:
    """Runs this module on ``nprocs`` local ranks in ``folder`` (its builds land there), importing
    this checkout of distsdfg, and returns rank 0's records. Raises RuntimeError with the end of
    the job's output if the job fails."""
    import os
    import subprocess

    from ..launch.mpiexec import mpiexec_argv
    from .mpirun import checkout_env
    env = checkout_env()
    out = os.path.join(str(folder), "args.json")
    argv = mpiexec_argv(nprocs, ["-m", "distsdfg.testing.gpu_args", out] + ([target] if target != "gpu" else []),
                        timeout=900)
    proc = subprocess.run(argv, env=env, cwd=str(folder), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"mpiexec -n {nprocs} distsdfg.testing.gpu_args failed ({proc.returncode}):\n"
                           + proc.stdout[-3000:] + proc.stderr[-3000:])
    with open(out) as f:
        return json.load(f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
