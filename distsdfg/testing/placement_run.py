"""Distributed placement under mpiexec: every rank passes and receives only its own blocks.

    mpiexec -n 4 python -m mpi4py -m distsdfg.testing.placement_run OUT.json DIR [CASE ...]

Every rank makes the same global inputs (fixed seed), cuts its block out with
``distsdfg.layout(...).block``, calls the program (``calls`` times, in-place arrays carried
over), and compares its result blocks with the same blocks of the NumPy result; rank 0 also
assembles the blocks and compares the whole. The ``npy`` case reads a 4096 x 4096 float64
``.npy`` file block-wise (memory-mapped) and writes the result the same way, recording each
rank's largest Python allocation (tracemalloc) and resident-memory growth. ``DIR`` holds the
``.npy`` files. Rank 0 writes one JSON record per case.
"""
from __future__ import annotations

import functools
import json
import os
import resource
import sys
import traceback
import tracemalloc
import warnings
from unittest import mock

import numpy as np

#: case -> (program, schedule given to schedule_by_label or "auto", placement, calls)
CASES = {
    "matmul:2,2,1": ("matmul", {"gemm_map": (2, 2, 1)}, "distributed", 1),
    "matmul:1,1,4": ("matmul", {"gemm_map": (1, 1, 4)}, "distributed", 1),
    "matmul:2,2,1:C at root": ("matmul", {"gemm_map": (2, 2, 1)}, {"*": "distributed", "__return": "root"}, 1),
    "mlp:data-parallel": ("mlp", {"gemm_map": (4, 1, 1), "*": (4, 1)}, "distributed", 1),
    "mlp:megatron": ("mlp", {"_MatMult_.gemm_map": (1, 4, 1), "_Add__map": (1, 4), "_numpy_maximum__map": (1, 4),
                             "_MatMult__2.gemm_map": (1, 1, 4), "_Add__map_2": (4, 1)}, "distributed", 1),
    "mlp_sgd:auto x5": ("mlp_sgd", "auto", "distributed", 5),
    "jacobi2d:2,2 x2": ("jacobi2d", {"*": (2, 2)}, "distributed", 2),
    "flagged:4": ("flagged", {"*": (4,)}, "distributed", 1),
    "sgd_lr:4": ("sgd_lr", {"*": (4,)}, "distributed", 1),
    # Library nodes (two GEMVs, a max reduction) reading the uneven row blocks of A where they lie.
    "gemv_chain:rows": ("gemv_chain", {"Reduce.reduce_output": (1, 4), "_MatMult_._GEMV__map": (4, 1),
                                       "_MatMult__2._GEMV__map": (1, 4), "_Add__map": (4,)}, "distributed", 2),
    "gemv_chain:auto": ("gemv_chain", "auto", "distributed", 1),
    # The per-rank symbols passed packed in one array (distsdfg.dace_compat.pack), forced by a threshold of 0.
    "jacobi2d:2,2 x2:packed": ("jacobi2d", {"*": (2, 2)}, "distributed", 2),
    "mlp_sgd:auto x5:packed": ("mlp_sgd", "auto", "distributed", 5),
    "npy": ("affine", {"*": (4, 1)}, "distributed", 1),
}
NPY_N = 4096


def scheduled(name, sched, sizes, P, suffix):
    """(SDFG of program ``name`` simplified and renamed ``<name>_<suffix>``, its schedule): ``sched``
    by labels, or ``"auto"`` planned for ``P`` ranks with distributed boundaries."""
    import distsdfg
    from distsdfg import dace_compat as dc
    from distsdfg.testing.programs import get
    sdfg = get(name).sdfg()
    dc.simplify(sdfg)
    sdfg.name = f"{sdfg.name}_{suffix}"
    if sched == "auto":
        return sdfg, distsdfg.auto_schedule(sdfg, P, inputs="distributed", **sizes)
    return sdfg, distsdfg.schedule_by_label(sdfg, sched)


def _lower(name, sched, placement, sizes, P, tag):
    import distsdfg
    sdfg, schedule = scheduled(name, sched, sizes, P, f"pl_{tag}")
    return distsdfg.lower(sdfg, schedule, placement=placement)


def _report(sdfg, sizes, P):
    import distsdfg
    return [{"collective": s.collective, "array": s.array, "sent": list(s.sent), "received": list(s.received),
             "repeats": s.repeats} for s in distsdfg.comm_report(sdfg, nprocs=P, **sizes)]


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def run_case(case: str, comm, tag: int) -> dict:
    import distsdfg
    from distsdfg.testing.mpirun import counted_call
    from distsdfg.testing.programs import get
    from ..lowering.placement import global_sizes
    name, sched, placement, calls = CASES[case]
    p = get(name)
    rank, P = comm.rank, comm.size
    inputs = p.inputs(np.random.default_rng(1234))
    sizes = dict(p.symbols)
    sdfg = _lower(name, sched, placement, sizes, P, tag)
    with mock.patch.dict(os.environ, {"DISTSDFG_PACK_SYMBOLS_ABOVE": "0"} if case.endswith(":packed") else {}):
        prog = distsdfg.compile(sdfg, comm=comm)
    low = prog.lowered
    sizes = global_sizes(prog, inputs, sizes)
    lay = {a: prog.layout(a, **sizes) for a in inputs if isinstance(inputs[a], np.ndarray)}
    args = {a: (lay[a].block(v, rank) if lay[a].placement == "distributed" else v.copy())
            if isinstance(v, np.ndarray) else v for a, v in inputs.items()}
    state = dict(inputs)
    out = None
    # Loop bounds (integer scalar arguments, e.g. TSTEPS) make the report's repeat counts numbers.
    bounds = {k: int(v) for k, v in inputs.items() if isinstance(v, (int, np.integer)) and k not in sizes}
    report, measured = distsdfg.comm_report(prog.sdfg, nprocs=P, **sizes, **bounds), []
    for _ in range(calls):
        out, b = counted_call(comm, lambda: prog(**args, **sizes), report)
        measured.append(b)
        ref = p.reference(**{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()})
        if p.outputs:
            state.update(ref)
    rec = {"case": case, "boundary": sorted(low.boundary), "report": _report(prog.sdfg, {**sizes, **bounds}, P),
           "schedule": str(low.schedule), "bytes": measured, "packed": len(prog._packed or ())}
    errs = {}
    if p.outputs:
        for a in p.outputs:
            errs[a] = (lay[a], args[a], state[a])
    else:
        ret = prog.layout("__return", **sizes)
        errs["__return"] = (ret, out, ref)
    rec["rel_err"], rec["assembled_err"], rec["shape_ok"] = {}, {}, True
    for a, (lt, got, want) in errs.items():
        if lt.placement == "distributed":
            mine = _rel(got, lt.block(want, rank)) if got.shape == lt.block_shape(rank) else float("inf")
            everyone = comm.gather(mine)
            blocks = comm.gather(got)
            if rank == 0:
                rec["rel_err"][a] = max(everyone)
                rec["assembled_err"][a] = _rel(lt.assemble(blocks), want)
        elif rank == 0:
            rec["rel_err"][a] = rec["assembled_err"][a] = _rel(got, want)
    if case.startswith("matmul:2,2,1") and placement == "distributed":
        rec["bad_block"] = _refused(prog, args, sizes, rank, comm, 2, "A", np.ascontiguousarray(args["A"][:-1]))
    if name == "sgd_lr":
        rec["bad_replica"] = _refused(prog, args, sizes, rank, comm, 3, "lr", args["lr"] * 2.0)
    return rec


def _refused(prog, args, sizes, rank, comm, on: int, name: str, value) -> list:
    """Rank ``on`` passes ``value`` as argument ``name``: every rank's message (every rank must
    refuse the call with the same error). Rank 2's block of A one row short; rank 3's learning
    rate another value (each rank's kernels would read their own copy: diverging replicas)."""
    from distsdfg import InputError
    bad = dict(args)
    if rank == on:
        bad[name] = value
    try:
        prog(**bad, **sizes)
        msg = "no error"
    except InputError as exc:
        msg = str(exc)
    return comm.gather(msg)


def _write_input(path: str, n: int):
    """A deterministic n x n float64 .npy file, written in row chunks (never whole in memory)."""
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(n, n))
    rows = 256
    for r in range(0, n, rows):
        mm[r:r + rows] = np.sin(np.arange(r * n, (r + rows) * n, dtype=np.float64).reshape(rows, n) * 1e-3)
    mm.flush()
    del mm


def _peak_rss() -> int:
    """The process's peak resident memory in bytes (VmHWM, else the lifetime maximum)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_peak_rss() -> int:
    """Reset the peak to the current resident size where Linux allows it; returns the baseline."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _peak_rss()


def run_npy(comm, folder: str, tag: int) -> dict:
    import distsdfg
    from distsdfg.testing.mpirun import counted_call
    rank = comm.rank
    n = NPY_N
    src, dst = os.path.join(folder, "A.npy"), os.path.join(folder, "B.npy")
    if rank == 0:
        _write_input(src, n)
    sdfg = _lower("affine", {"*": (4, 1)}, "distributed", {"N": n}, comm.size, tag)
    prog = distsdfg.compile(sdfg, comm=comm)
    la, lb = prog.layout("A", N=n), prog.layout("B", N=n)
    report = distsdfg.comm_report(prog.sdfg, nprocs=comm.size, N=n)
    comm.Barrier()
    rss0 = _reset_peak_rss()
    tracemalloc.start()
    a = la.load(src, rank)
    b = lb.empty(rank)
    _, measured = counted_call(comm, functools.partial(prog, A=a, B=b, N=n), report)
    del a
    lb.save(dst, b, rank, comm)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = _peak_rss() - rss0
    block = int(np.prod(la.block_shape(rank))) * 8
    del b
    rec = {"case": "npy", "n": n, "report": _report(prog.sdfg, {"N": n}, comm.size),
           "peak": comm.gather(int(peak)), "block_bytes": comm.gather(block), "rss_growth": comm.gather(int(rss)),
           "array_bytes": n * n * 8, "bytes": [measured]}
    comm.Barrier()
    if rank == 0:      # check the written file against the input, chunk by chunk
        A, B = np.load(src, mmap_mode="r"), np.load(dst, mmap_mode="r")
        err = 0.0
        for r in range(0, n, 256):
            want = 2.0 * np.asarray(A[r:r + 256]) + 1.0
            err = max(err, _rel(np.asarray(B[r:r + 256]), want))
        rec["rel_err"] = {"B": err}
        del A, B
    return rec


def main(argv):
    from mpi4py import MPI

    from distsdfg.testing import pmpi
    warnings.simplefilter("ignore")
    comm = MPI.COMM_WORLD.Dup()      # the programs' and this script's own messages: counted apart
    counters = pmpi.counters()
    if counters is not None:
        counters.set_control(comm)
    out_path, folder = argv[0], argv[1]
    cases = argv[2:] or list(CASES)
    results = []
    for i, case in enumerate(cases):
        try:
            rec = run_npy(comm, folder, i) if case == "npy" else run_case(case, comm, i)
        except Exception as exc:     # recorded; the test reports it (every rank fails alike)
            rec = {"case": case, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        comm.Barrier()
        if comm.rank == 0:
            results.append(rec)
            print(f"[placement] {case}: {rec.get('rel_err', rec.get('error'))}", flush=True)
    if comm.rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main(sys.argv[1:])
