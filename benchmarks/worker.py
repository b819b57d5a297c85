"""One benchmark process (or SPMD job): runs contenders and writes their rows as JSON.

    mpiexec -n P python -m mpi4py -m benchmarks.worker CONFIG.json OUT.json    # mode "mpi"
    python -m benchmarks.worker CONFIG.json OUT.json                           # "single", "dask"

Mode ``mpi`` runs, per workload, distsdfg with every schedule and the hand-written mpi4py
version on the communicator; ``single`` the program compiled by DaCe for one process;
``dask`` the Dask versions on a local cluster of P single-threaded workers per P. Every
contender's first call is checked against NumPy and counted by the PMPI library (when
preloaded); in MPI mode the timed repeats of a workload's contenders then run interleaved, one
call of each per round, so that their ratios are measured under the same load. The driver (``benchmarks.__main__``) builds CONFIG.
"""
from __future__ import annotations

from distsdfg.dace_compat.semantics import parse as semantic_parse
import hashlib
import json
import sys
import time
import traceback
from typing import Callable, Dict, List, Optional

import numpy as np

from distsdfg.lowering import blas
from distsdfg.testing.pmpi import byte_fields

from .workloads import Workload, get, sizes_of

Row = Dict[str, object]


# -- shared helpers ---------------------------------------------------------------------------------------
def check(out, ref, rtol: float) -> Dict[str, object]:
    """Relative max error of ``out`` against ``ref`` and whether it is within ``rtol``."""
    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != ref.shape:
        return {"correct": False, "rel_err": None, "reason": f"shape {out.shape}, expected {ref.shape}"}
    err = float(np.abs(out - ref).max() / max(float(np.abs(ref).max()), 1e-300)) if ref.size else 0.0
    return {"correct": bool(err <= rtol), "rel_err": err}


def summary(times: List[float]) -> Dict[str, object]:
    return {"times": times, "median": float(np.median(times)), "min": float(min(times)), "max": float(max(times))}


def row(w: Workload, sizes: dict, nprocs: int, contender: str, **fields) -> Row:
    return {"workload": w.name, "sizes": sizes, "nprocs": nprocs, "contender": contender, **fields}


def failure(exc: BaseException) -> Dict[str, object]:
    return {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:500], "trace": traceback.format_exc()}


def make_inputs(w: Workload, sizes: dict, seed: int) -> Dict[str, np.ndarray]:
    return w.inputs(sizes, np.random.default_rng(seed))


# -- MPI mode ----------------------------------------------------------------------------------------------
def timed_spmd(control, call: Callable, repeats: int) -> List[float]:
    """Wall time of each repeat: from a barrier to the slowest rank's return."""
    from mpi4py import MPI
    out = []
    for _ in range(repeats):
        control.Barrier()
        t0 = time.perf_counter()
        call()
        out.append(control.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    return out


def counted(counters, call: Callable):
    """``call()``'s result and this rank's PMPI counts during it (None without the library)."""
    if counters is None:
        return call(), None
    counters.reset()
    out = call()
    return out, counters.snapshot()


def sdfg_name(w: Workload, grids: dict, nprocs: int) -> str:
    digest = hashlib.sha1(json.dumps(sorted((k, list(v)) for k, v in grids.items())).encode()).hexdigest()[:10]
    return f"bench_{w.program.name}_p{nprocs}_{digest}"


def run_schedule(w, sizes, name, grids, ctx):
    """distsdfg with ``grids``: lower, compile (collective), check and count one call. Returns the
    row (rank 0; its times filled in by ``interleave``) and the call to time."""
    import distsdfg
    from distsdfg.solver.report import matmul_io_lower_bounds
    comm, control, P = ctx["comm"], ctx["control"], ctx["comm"].size
    sdfg = semantic_parse(w.program)
    sdfg.name = sdfg_name(w, grids, P)
    # nprocs=P as after `lower(sdfg, "auto", nprocs=P)`: at P = 1 the kernels then read and write the
    # caller's arrays in place instead of copying them into local buffers (optimize.alias_whole_blocks)
    distsdfg.lower(sdfg, grids, nprocs=P)
    from distsdfg.solver.inspector import inputs_of     # arrays whose values bound blocks (SpMV's A_row)
    report = distsdfg.comm_report(sdfg, nprocs=P, **ctx["symbols"], **{k: ctx["inputs"][k] for k in inputs_of(sdfg)})
    fn = distsdfg.compile(sdfg, comm=control)
    out, snap = counted(ctx["counters"], lambda: fn(**ctx["inputs"]))
    snaps = control.gather(snap, root=0)
    call = lambda: fn(**ctx["inputs"])      # noqa: E731
    if comm.rank != 0:
        return {}, call
    fields = {"status": "ok", "schedule": {k: list(v) for k, v in grids.items()}, **check(out, ctx["ref"], w.rtol)}
    original = semantic_parse(w.program)
    fields["model_bytes"] = float(distsdfg.schedule_cost(original, grids, "bytes", **ctx["symbols"]))
    bounds = matmul_io_lower_bounds(original, P, **ctx["symbols"]) if w.name.startswith("matmul") else []
    fields["io_lower_bound"] = sum(b for _, b in bounds) if bounds else None
    if snap is not None:
        fields.update(byte_fields(snaps, report, P))
    return row(w, sizes, P, f"distsdfg {name}", **fields), call


def run_handwritten(w, sizes, ctx):
    from .handwritten import VERSIONS
    comm, control = ctx["comm"], ctx["control"]
    fn = VERSIONS[w.name]
    out, snap = counted(ctx["counters"], lambda: fn(comm, **ctx["inputs"]))
    snaps = control.gather(snap, root=0)
    call = lambda: fn(comm, **ctx["inputs"])      # noqa: E731
    if comm.rank != 0:
        return {}, call
    fields = {"status": "ok", **check(out, ctx["ref"], w.rtol)}
    if snap is not None:
        fields.update(byte_fields(snaps, None, comm.size))
    return row(w, sizes, comm.size, "mpi4py", **fields), call


def interleave(control, timed: List[tuple], repeats: int) -> None:
    """Times every (row, call) round-robin, one call of each per round, so that all contenders of
    a workload see the same machine load; fills each row's times (rank 0)."""
    samples: List[List[float]] = [[] for _ in timed]
    for _ in range(repeats):
        for i, (_, call) in enumerate(timed):
            samples[i] += timed_spmd(control, call, 1)
    for (r, _), times in zip(timed, samples):
        if r:
            r.update(summary(times))


def spmd_inputs(control, w: Workload, sizes: dict, seed: int):
    """Rank 0's inputs, NumPy reference and symbol values; zeros of the same shapes elsewhere."""
    if control.rank == 0:
        inputs = make_inputs(w, sizes, seed)
        ref = w.reference(**inputs)
        symbols = w.symbols(sizes, inputs)
        meta = ({k: (v.shape, v.dtype.str) for k, v in inputs.items()}, symbols)
    else:
        inputs, ref, meta = None, None, None
    shapes, symbols = control.bcast(meta, root=0)
    if control.rank != 0:
        inputs = {k: np.zeros(shape, dtype) for k, (shape, dtype) in shapes.items()}
    return inputs, ref, symbols


def run_mpi(config: dict) -> List[Row]:
    """Per workload: every schedule and the hand-written version are set up (lowered, compiled,
    checked and counted), then timed interleaved (``interleave``)."""
    from mpi4py import MPI

    from distsdfg.testing.pmpi import Counters, preloaded
    from .schedules import schedule_for
    comm = MPI.COMM_WORLD
    control = comm.Dup()      # the benchmark's and distsdfg's own pickled messages go here
    counters = Counters(preloaded()) if preloaded() else None
    if counters is not None:
        counters.set_control(control)
    rows = []
    for wname in config["workloads"]:
        w = get(wname)
        sizes = sizes_of(w, config["preset"])
        inputs, ref, symbols = spmd_inputs(control, w, sizes, config["seed"])
        ctx = dict(comm=comm, control=control, counters=counters, inputs=inputs, ref=ref, symbols=symbols,
                   repeats=config["repeats"])
        seen: Dict[str, str] = {}
        timed = []
        for name in config["schedules"]:
            r, call = _one_schedule(w, sizes, name, ctx, seen, schedule_for)
            rows.append(r)
            if call is not None:
                timed.append((r, call))
        if config.get("handwritten", True):
            r, call = _guarded(control, lambda: run_handwritten(w, sizes, ctx), w, sizes, "mpi4py")
            rows.append(r)
            if call is not None:
                timed.append((r, call))
        interleave(control, timed, config["repeats"])
    return [r for r in rows if r]


def _one_schedule(w, sizes, name, ctx, seen, schedule_for):
    """Plan ``name`` on rank 0; an identical earlier schedule is reported, not rerun. The row and
    the call to time (None: nothing to time)."""
    control, P = ctx["control"], ctx["control"].size
    grids, error = None, None
    if control.rank == 0:
        try:
            grids = schedule_for(name, semantic_parse(w.program), P, ctx["symbols"])
        except Exception as exc:
            error = failure(exc)
    grids = control.bcast(grids, root=0)
    if grids is None:
        return (row(w, sizes, P, f"distsdfg {name}", **error) if control.rank == 0 else {}), None
    key = json.dumps(sorted((k, list(v)) for k, v in grids.items()))
    if key in seen:
        return (row(w, sizes, P, f"distsdfg {name}", status="same", same_as=seen[key],
                    schedule={k: list(v) for k, v in grids.items()}) if control.rank == 0 else {}), None
    seen[key] = f"distsdfg {name}"
    return _guarded(control, lambda: run_schedule(w, sizes, name, grids, ctx), w, sizes, f"distsdfg {name}")


def _guarded(control, call, w, sizes, contender):
    """``call()``; an exception raised on every rank (lowering, compiling) becomes a failed row
    with nothing to time."""
    try:
        return call()
    except Exception as exc:
        return (row(w, sizes, control.size, contender, **failure(exc)) if control.rank == 0 else {}), None


# -- single process and Dask ----------------------------------------------------------------------------
def timed_local(call: Callable, repeats: int) -> List[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


def run_single(config: dict) -> List[Row]:
    """Each program compiled by DaCe for one process (no MPI), same inputs and checks."""
    from distsdfg.runtime.program import build
    rows = []
    for wname in config["workloads"]:
        w = get(wname)
        sizes = sizes_of(w, config["preset"])
        try:
            inputs = make_inputs(w, sizes, config["seed"])
            args = {**inputs, **w.symbols(sizes, inputs)}
            sdfg = w.program.to_sdfg(simplify=w.simplify_single)
            sdfg.name = f"bench_{w.program.name}_single"
            compiled, _ = build(sdfg)
            out = compiled(**args)
            fields = {"status": "ok", **check(out, w.reference(**inputs), w.rtol),
                      **summary(timed_local(lambda: compiled(**args), config["repeats"]))}
        except Exception as exc:
            fields = failure(exc)
        rows.append(row(w, sizes, 1, "dace (1 process)", **fields))
    return rows


def run_dask(config: dict) -> List[Row]:
    """The Dask versions on a local cluster of P one-thread worker processes, per P."""
    from dask.distributed import Client, LocalCluster

    from .dask_versions import VERSIONS
    rows = []
    for P in config["nprocs"]:
        with LocalCluster(n_workers=P, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                Client(cluster):
            for wname in config["workloads"]:
                w = get(wname)
                sizes = sizes_of(w, config["preset"])
                try:
                    inputs = make_inputs(w, sizes, config["seed"])
                    fn = VERSIONS[w.name]
                    fields = {"status": "ok", **check(fn(P, **inputs), w.reference(**inputs), w.rtol),
                              **summary(timed_local(lambda: fn(P, **inputs), config["repeats"]))}
                except Exception as exc:
                    fields = failure(exc)
                rows.append(row(w, sizes, P, "dask", **fields))
    return rows


MODES = {"mpi": run_mpi, "single": run_single, "dask": run_dask}


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as f:
        config = json.load(f)
    import dace
    dace.config.Config.set("default_build_folder", value=config["build_folder"])
    blas_name = str(blas.configure())
    rows = MODES[config["mode"]](config)
    if config["mode"] != "mpi" or _rank() == 0:
        with open(argv[1], "w") as f:
            json.dump({"blas": blas_name, "rows": rows}, f, indent=1)


def _rank() -> int:
    from mpi4py import MPI
    return MPI.COMM_WORLD.rank


if __name__ == "__main__":
    main()
