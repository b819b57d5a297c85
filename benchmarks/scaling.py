"""Planning and lowering time for many ranks, without running anything.

Per workload and rank count P it times three steps apart:

- ``plan``: ``auto_schedule(sdfg, P, verify=False)``, the EinDecomp search;
- ``lower``: ``distsdfg.lower`` with that schedule, which is symbolic in the rank: it should
  not grow with P;
- ``tables``: ``comm_report`` for concrete sizes, which solves the per-rank block and
  displacement tables the runtime uses (at least linear in P: every rank has its entries;
  redistributions between two grids price rank pairs). Above ``tables_max`` ranks it is
  skipped, to keep the run short.
"""
from __future__ import annotations

import time
from typing import Dict, List, Sequence

import numpy as np

from .workloads import get, sizes_of

PROCS = (4, 64, 1024, 4096)
WORKLOADS = ("matmul_square", "mlp")


def _timed(call):
    t0 = time.perf_counter()
    out = call()
    return out, time.perf_counter() - t0


def scaling_row(wname: str, preset: str, nprocs: int, tables: bool = True) -> Dict[str, object]:
    """Times of the steps for one workload on ``nprocs`` ranks (or the error that stopped them)."""
    import distsdfg
    from distsdfg.solver.report import sent_once
    w = get(wname)
    sizes = sizes_of(w, preset)
    symbols = w.symbols(sizes, w.inputs(sizes, np.random.default_rng(0)))
    sdfg = w.program.to_sdfg()
    out: Dict[str, object] = {"workload": wname, "sizes": sizes, "nprocs": nprocs}
    try:
        sched, out["plan_s"] = _timed(lambda: distsdfg.auto_schedule(sdfg, nprocs, verify=False, **symbols))
        _, out["lower_s"] = _timed(lambda: distsdfg.lower(sdfg, sched))
        if tables:
            report, out["tables_s"] = _timed(lambda: distsdfg.comm_report(sdfg, nprocs=nprocs, **symbols))
            out["bytes"] = int(sum(sent_once(s) for s in report))
    except Exception as exc:        # e.g. no partitioning of a small extent into P parts
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def scaling(workloads: Sequence[str] = WORKLOADS, preset: str = "documented", procs: Sequence[int] = PROCS,
            tables_max: int = 256) -> List[Dict[str, object]]:
    return [scaling_row(w, preset, p, tables=p <= tables_max) for w in workloads for p in procs]
