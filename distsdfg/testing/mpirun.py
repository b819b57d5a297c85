"""Run sample-program cases under mpiexec; rank 0 checks against NumPy and writes JSON.

    mpiexec -n 4 python -m mpi4py -m distsdfg.testing.mpirun [--target gpu] [--comm C] OUT.json 'matmul:gemm_map=2,2,1' ...

Ranks started with the PMPI byte counter preloaded (``distsdfg.testing.pmpi.mpiexec_env()``)
count the bytes of every MPI call the program makes; each result then holds them next to
``comm_report``'s, call by call and rank by rank (``bytes``). The program's own Python-level
messages go over a duplicate of ``MPI_COMM_WORLD`` and are counted apart.

A case is ``program:label=grid;label=grid`` (a label matches MapInfo.label or key; ``*``
names every map with as many parameters as the grid has entries). Each case is compiled once on rank 0.
``program@distributed:...`` lowers in distributed placement: every rank passes its blocks of the
inputs and gets its block of the result, which rank 0 assembles for the comparison.
``--comm device`` lowers with ``cuda_aware_mpi=True`` (target gpu); ``--comm emulated`` runs every
communication step through the runtime's device code path on host memory (target cpu).
"""
from __future__ import annotations

import functools
import json
import sys
import traceback
from typing import Dict, Optional

import numpy as np


def parse_case(text: str):
    prog, _, rest = text.partition(":")
    grids = {}
    for part in filter(None, rest.split(";")):
        label, _, g = part.partition("=")
        grids[label] = tuple(int(x) for x in g.split(","))
    return prog, grids


def _lower(sdfg, sched, target: str, buffers: str):
    from ..lowering.pipeline import lower_sdfg
    from ..values.schedule import as_schedule
    lower_sdfg(sdfg, as_schedule(sched), target=target, comm=buffers)


def run_case(text: str, comm, target: str = "cpu", buffers: str = "host"):
    import distsdfg
    from distsdfg.testing.programs import get
    if text.endswith(":auto"):
        return run_auto(text, comm, target, buffers)
    name, grids = parse_case(text)
    name, _, placement = name.partition("@")
    p = get(name)
    sdfg = p.sdfg()
    sched = distsdfg.schedule_by_label(sdfg, grids, fuzzy=True)   # "*": every kernel with that many parameters
    if placement:
        distsdfg.lower(sdfg, sched, target=target, placement=placement)
        return _run_placed(text, p, sdfg, sched, comm)
    _lower(sdfg, sched, target, buffers)
    return _run_lowered(text, p, sdfg, sched, comm)


def _run_placed(text, p, sdfg, sched, comm):
    """Every rank passes its blocks of the arrays (scalars whole) and returns its block of the
    result; rank 0 assembles the blocks and compares with NumPy (programs with a return value)."""
    import distsdfg
    from ..runtime.program import symbol_values
    symbols = dict(p.symbols)
    inputs = p.inputs(np.random.default_rng(1234))
    values = symbol_values(sdfg, inputs, symbols)
    sizes = {k: v for k, v in values.items() if k in sdfg.symbols}
    report = distsdfg.comm_report(sdfg, nprocs=comm.size, **sizes) if comm.rank == 0 else None
    fn = distsdfg.compile(sdfg, comm=comm)
    lays = {k: distsdfg.layout(sdfg, k, nprocs=comm.size, **sizes) for k in sdfg._distsdfg.boundary}
    args = {k: lays[k].block(v, comm.rank) if k in lays else v for k, v in inputs.items()}
    out, measured = counted_call(comm, lambda: fn(**args, **{**symbols, **sizes}), report)
    blocks = comm.gather(np.asarray(out), root=0)
    if comm.rank != 0:
        return None
    out = lays["__return"].assemble(blocks)
    ref = p.reference(**p.inputs(np.random.default_rng(1234)))
    return {"case": text, "schedule": {k: list(v) for k, v in dict(sched).items()},
            "shape_ok": out.shape == np.asarray(ref).shape, "rel_err": _rel_err(out, ref), "dtype": str(out.dtype),
            "bytes": measured, "boundary": sorted(sdfg._distsdfg.boundary),
            "report": [{"collective": s.collective, "array": s.array, "sent": list(s.sent),
                        "received": list(s.received), "repeats": s.repeats, "at_most": s.at_most} for s in report]}


def run_auto(text: str, comm, target: str = "cpu", buffers: str = "host"):
    """``program:auto``: the planner chooses the schedule for the communicator's size."""
    import distsdfg
    from ..runtime.program import idle_bcast, symbol_values
    from distsdfg.testing.programs import get
    p = get(text.split(":")[0])
    sdfg = p.sdfg()
    values = symbol_values(sdfg, p.inputs(np.random.default_rng(1234)), dict(p.symbols))
    sizes = {k: v for k, v in values.items() if k in sdfg.symbols}
    sched = distsdfg.auto_schedule(sdfg, comm.size, **sizes) if comm.rank == 0 else None
    sched = idle_bcast(comm, sched)              # plan on rank 0, like the lowering
    _lower(sdfg, sched, target, buffers)
    return _run_lowered(text, p, sdfg, sched.as_dict(), comm)


def _run_lowered(text, p, sdfg, sched, comm):
    import distsdfg
    from ..runtime.program import symbol_values
    symbols = dict(p.symbols)
    rng = np.random.default_rng(1234)
    inputs = p.inputs(rng)
    values = symbol_values(sdfg, inputs, symbols)
    counts = {k: v for k, v in inputs.items() if isinstance(v, (int, np.integer))}   # loop bounds
    counts.update({k: v for k, v in values.items() if k in sdfg.symbols})
    from ..solver.inspector import inputs_of      # arrays whose values bound blocks (a CSR row pointer)
    counts.update({k: inputs[k] for k in inputs_of(sdfg)})
    report = distsdfg.comm_report(sdfg, nprocs=comm.size, **counts) if comm.rank == 0 else None   # rank 0 compares
    fn = distsdfg.compile(sdfg, comm=comm)
    if comm.rank != 0:     # only rank 0's arrays count; scalars are taken from rank 0
        inputs = {k: np.zeros_like(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    out, measured = counted_call(comm, lambda: fn(**inputs, **symbols), report)
    again = _recall(sdfg, p, comm, fn, inputs, counts, symbols)
    if comm.rank != 0:
        return None
    ref = p.reference(**p.inputs(np.random.default_rng(1234)))
    if p.outputs:      # in-place results: compare every updated argument
        errs = {k: _rel_err(inputs[k], ref[k]) for k in p.outputs}
        err = max(errs.values())
        shape_ok = all(inputs[k].shape == np.asarray(ref[k]).shape for k in p.outputs)
        dtype = str(inputs[p.outputs[0]].dtype)
    else:
        err, shape_ok, dtype = _rel_err(out, ref), np.asarray(out).shape == np.asarray(ref).shape, str(np.asarray(out).dtype)
    return {"case": text, "schedule": {k: list(v) for k, v in dict(sched).items()},
            "shape_ok": shape_ok, "rel_err": err, "dtype": dtype,
            "outputs": {k: np.asarray(inputs[k]).tolist() for k in p.outputs if np.asarray(inputs[k]).size <= 8},
            "bytes": measured, **again,
            "report": [{"collective": s.collective, "array": s.array, "sent": list(s.sent),
                        "received": list(s.received), "repeats": s.repeats, "at_most": s.at_most} for s in report]}


def _reversed_rows(inputs, db):
    """``inputs`` with the rows of the CSR matrix of ``db`` (``distsdfg.solver.inspector.DataBounds``) in
    reverse order: the same sizes, other per-rank ranges."""
    ptr = inputs[db.pointer].astype(np.int64)
    rows = [slice(ptr[i], ptr[i + 1]) for i in range(len(ptr) - 1)][::-1]
    out = dict(inputs)
    out[db.pointer] = np.concatenate([[0], np.cumsum([r.stop - r.start for r in rows])]).astype(inputs[db.pointer].dtype)
    for a in db.arrays:
        out[a] = np.concatenate([inputs[a][r] for r in rows] + [inputs[a][ptr[-1]:]]).astype(inputs[a].dtype)
    return out


def _recall(sdfg, p, comm, fn, inputs, counts, symbols) -> dict:
    """A program whose blocks are read off its data (a CSR row pointer) is called a second time
    with its rows reversed: the warm program must not reuse the first call's ranges."""
    import distsdfg
    bounds = getattr(sdfg._distsdfg, "data_bounds", ())
    if not bounds or p.outputs:
        return {}
    again = _reversed_rows(p.inputs(np.random.default_rng(1234)), bounds[0])
    if comm.rank == 0:
        report = distsdfg.comm_report(sdfg, nprocs=comm.size, **{**counts, bounds[0].pointer: again[bounds[0].pointer]})
    else:
        report, again = None, {k: np.zeros_like(v) if isinstance(v, np.ndarray) else v for k, v in again.items()}
    out, measured = counted_call(comm, lambda: fn(**again, **symbols), report)
    if comm.rank != 0:
        return {}
    return {"recall": {"rel_err": _rel_err(out, p.reference(**again)), "bytes": measured,
                       "report": [{"array": s.array, "received": list(s.received)} for s in report]}}


def counted_call(comm, call, report):
    """``call()``'s result and, with the byte counter preloaded, on rank 0 every rank's measured
    bytes next to ``report``'s (``distsdfg.testing.pmpi.byte_fields``); else None.

    Only rank 0 compares, so a comparison that fails is recorded (``"error"``), never raised: an
    exception on rank 0 alone would leave the other ranks in the next collective (a hang)."""
    from distsdfg.testing import pmpi
    counters = pmpi.counters()
    if counters is None:
        return call(), None
    comm.Barrier()
    counters.reset()
    out = call()
    snaps = comm.gather(counters.snapshot(), root=0)
    if comm.rank != 0:
        return out, None
    try:
        return out, pmpi.byte_fields(snaps, report, comm.size)
    except Exception as exc:  # recorded for bytes_mismatch, see above
        return out, {"error": f"{type(exc).__name__}: {exc}", "pmpi": pmpi.per_rank(snaps, "data"),
                     "pmpi_equals_report": False}


def _rel_err(out, ref) -> float:
    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != ref.shape:
        return float("inf")
    if np.issubdtype(ref.dtype, np.integer) or ref.dtype == np.bool_:       # exact
        return float(np.abs(out.astype(np.int64) - ref.astype(np.int64)).max()) if out.size else 0.0
    return float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-300))


def run_cases(out_path: str, cases, run, quiet=("trace",)) -> None:
    """Run every case with ``run(case, comm)``; a failing case is recorded and the rest go on.
    Rank 0 prints a line per case (without the ``quiet`` keys) and writes all results as JSON.
    ``comm`` is a duplicate of ``MPI_COMM_WORLD``: the byte counter counts its calls apart."""
    from mpi4py import MPI

    from distsdfg.testing import pmpi
    comm = MPI.COMM_WORLD.Dup()
    counters = pmpi.counters()
    if counters is not None:
        counters.set_control(comm)
    results = []
    for c in cases:
        try:
            r = run(c, comm)
        except Exception as exc:  # report and continue with the other cases
            r = {"case": c, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
            if comm.rank != 0:
                print(f"rank {comm.rank}: case {c} failed: {exc}", file=sys.stderr)
        if comm.rank == 0:
            results.append(r)
            print(json.dumps({k: v for k, v in r.items() if k not in quiet and k != "bytes"})[:400], flush=True)
    if comm.rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)


def counted_argv(nprocs: int, script, timeout: float):
    """mpiexec argv whose ranks preload the PMPI byte counter (built once, with the bundled mpicc)."""
    from ..launch.mpiexec import mpiexec_argv
    from distsdfg.testing import pmpi
    return mpiexec_argv(nprocs, script, timeout=timeout, genv=pmpi.mpiexec_env())


def checkout_env(**extra) -> Dict[str, str]:
    """The environment of a local launch that imports this checkout of distsdfg and finds the
    interpreter's MPI (``mpiexec`` beside ``python``): one thread per rank, builds in the folder it
    runs in, plus ``extra``."""
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # Builds in the job's folder (.dacecache, as DaCe alone), where tests read the generated code.
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""),
               DISTSDFG_BUILDS=".dacecache", **extra)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def launch_cases(nprocs: int, cases, folder, *, module: str = "distsdfg.testing.mpirun", options=(),
                 timeout: float = 1500, out_name: str = "out.json", jobs: int = 1) -> Dict[str, dict]:
    """Runs ``python -m MODULE [OPTIONS] OUT.json CASES...`` on ``nprocs`` ranks with the byte counter
    preloaded, in ``folder`` (its builds land there), importing this checkout of distsdfg; returns
    the results by case. Raises RuntimeError with the end of the job's output if the job fails.

    ``jobs > 1`` deals the cases round-robin to that many jobs run side by side, each in a folder
    ``job<i>`` of its own: a job compiles on rank 0 while its other ranks sleep, so one job alone
    leaves cores idle."""
    import os
    import subprocess
    if jobs > 1:
        from concurrent.futures import ThreadPoolExecutor
        groups = [list(cases)[i::jobs] for i in range(jobs)]
        folders = [os.path.join(str(folder), f"job{i}") for i in range(jobs)]
        for f in folders:
            os.makedirs(f, exist_ok=True)
        with ThreadPoolExecutor(jobs) as pool:
            parts = [pool.submit(launch_cases, nprocs, g, f, module=module, options=options, timeout=timeout,
                                 out_name=out_name) for g, f in zip(groups, folders) if g]
            return {case: r for part in parts for case, r in part.result().items()}
    out = os.path.join(str(folder), out_name)
    env = checkout_env(PYTHONHASHSEED="0")
    argv = counted_argv(nprocs, ["-m", module, *options, out] + list(cases), timeout=timeout)
    proc = subprocess.run(argv, env=env, cwd=str(folder), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"mpiexec -n {nprocs} {module} failed ({proc.returncode}):\n"
                           + proc.stdout[-3000:] + proc.stderr[-3000:])
    with open(out) as f:
        return {r["case"]: r for r in json.load(f)}


def bytes_mismatch(result) -> Optional[str]:
    """None when the case's measured bytes equal comm_report's call by call and rank by rank, else why."""
    b = result.get("bytes")
    if b is None:
        return "no bytes were measured (the PMPI byte counter was not preloaded)"
    if isinstance(b, list):          # one record per call of the program
        return next((m for m in map(lambda x: bytes_mismatch({"bytes": x}), b) if m), None)
    if "error" in b:
        return f"the measured bytes could not be compared with comm_report: {b['error']}"
    if not b["pmpi_equals_report"]:
        return f"measured {b['pmpi']} but comm_report says {b['report']}"
    return None


def main(argv):
    opts = {"--target": "cpu", "--comm": "host"}
    while argv[:1] and argv[0] in opts:
        opts[argv[0]], argv = argv[1], argv[2:]
    run_cases(argv[0], argv[1:], functools.partial(run_case, target=opts["--target"], buffers=opts["--comm"]))


if __name__ == "__main__":
    main(sys.argv[1:])
