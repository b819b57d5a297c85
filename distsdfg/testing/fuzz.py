"""A seeded fuzzer: random (program, schedule, P) cases under mpiexec, each right or refused.

    python -m distsdfg.testing.fuzz --cases 500 --seed 1          # by hand
    python -m distsdfg.testing.fuzz --seed 1 --only 17            # replay one case
    python -m distsdfg.testing.fuzz --cases 40 --programs 'map_*'  # only some corpus programs

A case draws a program of the corpus (``fuzz_corpus.py``), a rank count P from
{1, 2, 3, 4, 6, 8}, and for each map a grid: a random factorisation of a divisor of P over
its parameters (so grids that do not divide extents, or exceed them, are common). The case
must either match NumPy on rank 0 (1e-10 relative for float64, 1e-5 for float32, exact for
integers) or raise a DistributedLoweringError before running. Cases with the same P run
in one mpiexec; if a batch dies (crash) or exceeds its timeout (hang), the case it was
running is recorded as such and the rest run in a new batch.
"""
from __future__ import annotations

from ..dace_compat.semantics import parse as semantic_parse
import argparse
import dataclasses
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["FuzzCase", "draw_cases", "run_cases", "summarise"]

PROCS = (1, 2, 3, 4, 6, 8)


@dataclasses.dataclass(frozen=True)
class FuzzCase:
    seed: int
    index: int
    program: str
    nprocs: int
    schedule: Tuple[Tuple[str, Tuple[int, ...]], ...]

    @property
    def ident(self) -> str:
        return f"{self.seed}:{self.index}"

    def reproducer(self) -> str:
        grids = ";".join(f"{k}={','.join(map(str, g))}" for k, g in self.schedule)
        return (f"seed={self.seed} case={self.index} P={self.nprocs} program={self.program} schedule={{{grids}}}  "
                f"(python -m distsdfg.testing.fuzz --seed {self.seed} --only {self.index})")


def _factorisations(n: int, k: int) -> List[Tuple[int, ...]]:
    if k == 1:
        return [(n,)]
    out = []
    for d in range(1, n + 1):
        if n % d == 0:
            out += [(d,) + rest for rest in _factorisations(n // d, k - 1)]
    return out


_MAPS: Dict[str, List[Tuple[str, int]]] = {}


def _maps_of(program: str) -> List[Tuple[str, int]]:
    if program not in _MAPS:
        import warnings

        import distsdfg
        from .fuzz_corpus import CORPUS
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _MAPS[program] = [(m.key, len(m.params)) for m in distsdfg.maps(semantic_parse(CORPUS[program].prog))]
    return _MAPS[program]


def draw_case(seed: int, index: int, procs: Sequence[int] = PROCS, programs: Optional[Sequence[str]] = None) -> FuzzCase:
    from .fuzz_corpus import CORPUS
    rng = random.Random(seed * 1_000_003 + index)
    program = rng.choice(sorted(programs or CORPUS))
    P = rng.choice(list(procs))
    grids = []
    maps = _maps_of(program)
    for key, nparams in maps:
        library = "." in key
        main = not library or nparams == max(n for k, n in maps if k.split(".")[0] == key.split(".")[0])
        if rng.random() < (0.15 if main else 0.9):
            continue          # left out: runs on rank 0, or (a library node's helper map) derived
        divisors = [d for d in range(1, P + 1) if P % d == 0]
        total = P if rng.random() < 0.7 else rng.choice(divisors)
        grids.append((key, rng.choice(_factorisations(total, nparams))))
    return FuzzCase(seed, index, program, P, tuple(grids))


def draw_cases(n: int, seed: int, procs: Sequence[int] = PROCS,
               programs: Optional[Sequence[str]] = None) -> List[FuzzCase]:
    return [draw_case(seed, i, procs, programs) for i in range(n)]


def select_programs(patterns: str) -> List[str]:
    """Corpus names matching comma-separated shell patterns (``map_*,sum_axis0``)."""
    import fnmatch
    from .fuzz_corpus import CORPUS
    names = sorted(n for n in CORPUS if any(fnmatch.fnmatch(n, p) for p in patterns.split(",")))
    if not names:
        raise SystemExit(f"no corpus program matches {patterns!r}; known: {', '.join(sorted(CORPUS))}")
    return names


# -- one case, on every rank of a batch ----------------------------------------------------------------
def _close(got, want) -> Optional[str]:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape and got.size == want.size == 1:
        got, want = got.reshape(()), want.reshape(())
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if np.issubdtype(want.dtype, np.integer):
        return None if np.array_equal(got.astype(np.int64), want.astype(np.int64)) else "integer results differ"
    tol = 1e-5 if want.dtype == np.float32 else 1e-10
    err = float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-300)) if want.size else 0.0
    return None if err <= tol else f"relative error {err:.2e} > {tol:g}"


def run_one(case: FuzzCase, comm) -> dict:
    import warnings

    import distsdfg
    from .fuzz_corpus import CORPUS
    c = CORPUS[case.program]
    out = {"case": case.ident, "program": case.program, "nprocs": case.nprocs,
           "schedule": {k: list(g) for k, g in case.schedule}}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sdfg = semantic_parse(c.prog)
            distsdfg.lower(sdfg, dict(case.schedule))
            fn = distsdfg.compile(sdfg, comm=comm)
        rng = np.random.default_rng(case.seed * 7919 + case.index)
        inputs = c.inputs(rng)
        ref_inputs = {k: np.copy(v) for k, v in inputs.items()}
        args = inputs if comm.rank == 0 else {k: np.zeros_like(v) for k, v in inputs.items()}
        result = fn(**args, **dict(c.symbols))
    except distsdfg.DistributedLoweringError as exc:
        out.update(outcome="refused", reason=type(exc).__name__, message=str(exc)[:300])
        return out
    except Exception as exc:  # anything else is a bug
        out.update(outcome="error", reason=type(exc).__name__, message=str(exc)[:300],
                   trace=traceback.format_exc()[-2000:])
        return out
    if comm.rank != 0:
        out["outcome"] = "ok"
        return out
    want, updated = c.reference(**ref_inputs)
    problems = []
    if want is not None:
        p = _close(result, want)
        if p:
            problems.append(f"result: {p}")
    for name, value in updated.items():
        p = _close(args[name], value)
        if p:
            problems.append(f"{name}: {p}")
    out.update(outcome="wrong" if problems else "ok", message="; ".join(problems))
    return out


def worker(case_file: str, out_file: str):
    """Runs the cases in ``case_file`` in this MPI world; rank 0 appends one JSON line per case."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    with open(case_file) as f:
        cases = [FuzzCase(d["seed"], d["index"], d["program"], d["nprocs"],
                          tuple((k, tuple(g)) for k, g in d["schedule"])) for d in json.load(f)]
    for case in cases:
        if comm.rank == 0:
            with open(out_file, "a") as f:
                f.write(json.dumps({"case": case.ident, "started": True}) + "\n")
        r = run_one(case, comm)
        errors = comm.gather(r if r["outcome"] == "error" else None, root=0)
        if comm.rank == 0:
            bad = next((e for e in errors if e is not None), None)
            if bad is not None and r["outcome"] != "error":
                r = bad
            with open(out_file, "a") as f:
                f.write(json.dumps(r) + "\n")


# -- the driver ---------------------------------------------------------------------------------------------
def _batch(cases: List[FuzzCase], timeout: float, workdir: str) -> List[dict]:
    from ..launch.mpiexec import mpiexec_argv
    P = cases[0].nprocs
    case_file = os.path.join(workdir, f"cases_{P}_{cases[0].index}.json")
    out_file = os.path.join(workdir, f"out_{P}_{cases[0].index}.jsonl")
    with open(case_file, "w") as f:
        json.dump([dict(seed=c.seed, index=c.index, program=c.program, nprocs=c.nprocs,
                        schedule=[[k, list(g)] for k, g in c.schedule]) for c in cases], f)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    code = f"from distsdfg.testing.fuzz import worker; worker({case_file!r}, {out_file!r})"
    argv = mpiexec_argv(P, ["-c", code], timeout=timeout)
    proc = subprocess.run(argv, env=env, cwd=workdir, capture_output=True, text=True)
    done: Dict[str, dict] = {}
    started = []
    if os.path.exists(out_file):
        with open(out_file) as f:
            for line in f:
                d = json.loads(line)
                if d.get("started"):
                    started.append(d["case"])
                else:
                    done[d["case"]] = d
    results = [done[c.ident] for c in cases if c.ident in done]
    if proc.returncode != 0:
        victim = next((c for c in cases if c.ident in started and c.ident not in done), None)
        if victim is not None:
            kind = "hang" if proc.returncode in (124, 137) else "crash"
            results.append({"case": victim.ident, "program": victim.program, "nprocs": P,
                            "schedule": {k: list(g) for k, g in victim.schedule}, "outcome": kind,
                            "message": (proc.stderr or proc.stdout)[-600:]})
        rest = [c for c in cases if c.ident not in started]
        if rest:
            results += _batch(rest, timeout, workdir)
    return results


def run_cases(cases: List[FuzzCase], *, timeout_per_case: float = 120.0, workdir: Optional[str] = None,
              progress: bool = False) -> List[dict]:
    """Runs the cases, one mpiexec per rank count; returns one result per case."""
    workdir = workdir or tempfile.mkdtemp(prefix="distsdfg-fuzz-")
    by_p: Dict[int, List[FuzzCase]] = {}
    for c in cases:
        by_p.setdefault(c.nprocs, []).append(c)
    results = []
    for P, group in sorted(by_p.items()):
        t0 = time.time()
        got = _batch(group, timeout_per_case * len(group), workdir)
        results += got
        if progress:
            print(f"P={P}: {len(group)} cases in {time.time() - t0:.0f}s: {summarise(got)['counts']}",
                  file=sys.stderr, flush=True)
    order = {c.ident: i for i, c in enumerate(cases)}
    return sorted(results, key=lambda r: order.get(r["case"], 0))


def summarise(results: List[dict]) -> dict:
    counts: Dict[str, int] = {}
    reasons: Dict[str, int] = {}
    for r in results:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        if r["outcome"] == "refused":
            reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    return {"counts": counts, "refused_by_reason": reasons,
            "failures": [r for r in results if r["outcome"] in ("wrong", "error", "crash", "hang")]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", type=int, default=None, help="run only case number ONLY of the seed")
    ap.add_argument("--procs", default=",".join(map(str, PROCS)))
    ap.add_argument("--programs", default=None, help="draw only corpus programs matching these comma-separated "
                                                     "patterns, e.g. 'map_*'")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    ap.add_argument("--out", default=None, help="write every result as JSON")
    args = ap.parse_args(argv)
    procs = [int(p) for p in args.procs.split(",")]
    programs = select_programs(args.programs) if args.programs else None
    cases = ([draw_case(args.seed, args.only, procs, programs)] if args.only is not None
             else draw_cases(args.cases, args.seed, procs, programs))
    t0 = time.time()
    results = run_cases(cases, timeout_per_case=args.timeout, progress=True)
    s = summarise(results)
    print(f"{len(results)} cases in {time.time() - t0:.0f}s: {s['counts']}; refused by reason: "
          f"{s['refused_by_reason']}")
    byid = {c.ident: c for c in cases}
    for r in s["failures"]:
        extra = f" --programs '{args.programs}'" if args.programs else ""
        print(f"FAIL {r['outcome']}: {byid[r['case']].reproducer()}{extra}: {r.get('message', '')[:300]}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": {k: v for k, v in s.items() if k != "failures"}, "results": results}, f, indent=1)
    sys.exit(1 if s["failures"] else 0)


if __name__ == "__main__":
    main()
