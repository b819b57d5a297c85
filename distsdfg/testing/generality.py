"""Generality report: how the auto schedule treats a set of NumPy-style kernels.

``python -m distsdfg.testing.generality [-n P] [--run OUT.json] [names...]`` plans every kernel for
``P`` ranks (default 4) with the sizes of its test inputs and prints one line per kernel:

* ``distributed`` -- the plan splits every kernel (``k`` of ``n`` kernels split over ranks);
* ``rank-0 fallback`` -- some maps depend on a loop variable the program sets while it runs and run
  whole on rank 0 (their names are listed); the rest is planned as usual;
* ``refused`` -- planning or lowering raised a ``DistributedLoweringError`` (its class and message).

``--run OUT.json`` also prints the mpiexec command that runs them against NumPy
(``distsdfg.testing.mpirun``, which writes each case's relative error to OUT.json): a case is
``wrong`` when its relative error exceeds 1e-10 (float64).

The corpus is the project's own kernels (``testing.programs``, ``testing.triangular``), written here
in the style of NPBench's NumPy kernels (triangular loops, loops of matrix products).
"""
from __future__ import annotations

import sys
import warnings
from typing import Dict, List

import numpy as np

from ..values.modes import KernelKind

__all__ = ["classify", "CORPUS"]

CORPUS = ["matmul", "atax", "mlp", "softmax", "jacobi2d", "cg", "trimul", "tri_syrk", "tri_scale", "loop_matmul",
          "tri_cov", "tri_cholesky", "tri_carried"]


def classify(name: str, nprocs: int = 4) -> Dict[str, object]:
    """Plan ``name`` for ``nprocs`` ranks; returns ``{"kernel", "class", "detail"}``."""
    import distsdfg
    from distsdfg import dace_compat as dc
    from distsdfg.errors import DistributedLoweringError
    from ..analysis.kernels import find_kernels
    from ..runtime.program import symbol_values
    from distsdfg.testing.programs import get
    warnings.simplefilter("ignore")
    p = get(name)
    sdfg = p.sdfg()
    dc.simplify(sdfg)
    inputs = p.inputs(np.random.default_rng(1234))
    values = symbol_values(sdfg, inputs, dict(p.symbols))
    sizes = {k: v for k, v in values.items() if k in sdfg.symbols}
    sizes.update({k: v for k, v in inputs.items() if isinstance(v, (int, np.integer))})
    try:
        sched = distsdfg.auto_schedule(sdfg, nprocs, verify=False, **sizes).as_dict()
    except DistributedLoweringError as exc:
        return {"kernel": name, "class": "refused", "detail": f"{type(exc).__name__}: {exc}"}
    kernels = [k for k in find_kernels(sdfg) if k.kind != KernelKind.OPAQUE]
    whole = [m.info.key for k in kernels if k.runtime_symbols for m in k.maps]
    split = [k for k in kernels if any(np.prod(sched.get(m.info.key, (1,))) > 1 for m in k.maps)]
    if whole:
        return {"kernel": name, "class": "rank-0 fallback",
                "detail": f"{len(split)} of {len(kernels)} kernels split; whole on rank 0: {', '.join(whole)}"}
    cls = "distributed" if split else "one rank"
    return {"kernel": name, "class": cls, "detail": f"{len(split)} of {len(kernels)} kernels split"}


def main(argv: List[str]) -> int:
    nprocs, run = 4, None
    while argv[:1] and argv[0] in ("-n", "--run"):
        if argv[0] == "-n":
            nprocs = int(argv[1])
        else:
            run = argv[1]
        argv = argv[2:]
    names = argv or CORPUS
    for name in names:
        r = classify(name, nprocs)
        print(f"{r['kernel']:<14} {r['class']:<16} {r['detail']}")
    if run:
        cases = " ".join(f"{n}:auto" for n in names)
        print(f"\ncorrectness: mpiexec -n {nprocs} python -m mpi4py -m distsdfg.testing.mpirun {run} {cases}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
