"""One-rank matmul throughput on a GPU: distsdfg (target="gpu") next to CuPy's own matmul.

    mpiexec -n 1 python -m mpi4py -m benchmarks.gpu_matmul distsdfg --n 8192 --out OUT.json
    python -m benchmarks.gpu_matmul cupy --n 8192 --out OUT.json      # any Python with CuPy

Both take NumPy inputs on the host and return the product on the host, so the two are compared
like for like ("host in/out": the time includes the host-device copies); the CuPy run also times
the product of arrays already on the device ("device"), the upper bound of what any program
could reach. Each figure is the median of ``--repeats`` calls after one warm-up call, for
float32 and float64; GFLOP/s counts 2 n^3 flops. The distsdfg result is checked against NumPy
on 64 rows.
"""
import argparse
import json
import statistics
import subprocess
import time

import numpy as np

DTYPES = ("float32", "float64")


def _inputs(n, dtype):
    rng = np.random.default_rng(0)
    return rng.random((n, n)).astype(dtype), rng.random((n, n)).astype(dtype)


def _median_time(call, repeats, sync=lambda: None):
    call()
    sync()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times), max(times)


def _row(contender, dtype, n, t):
    med, lo, hi = t
    return {"contender": contender, "dtype": dtype, "n": n, "median_s": med, "min_s": lo, "max_s": hi,
            "gflops": 2.0 * n ** 3 / med / 1e9}


def gpu_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_distsdfg(n, repeats):
    import dace
    from mpi4py import MPI

    import distsdfg
    M, N, K = (dace.symbol(s) for s in "MNK")
    rows = []
    for dtype in DTYPES:
        T = getattr(dace, dtype)

        @dace.program
        def gpu_matmul(A: T[M, K], B: T[K, N]):
            return A @ B

        sdfg = gpu_matmul.to_sdfg(simplify=True)
        sdfg.name = f"gpu_matmul_{dtype}"
        distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"gemm_map": (1, 1, 1)}), target="gpu")
        prog = distsdfg.compile(sdfg)
        A, B = _inputs(n, dtype)
        out = {}

        def call():
            out["C"] = prog(A=A, B=B)

        t = _median_time(call, repeats)
        MPI.COMM_WORLD.Barrier()
        if MPI.COMM_WORLD.rank == 0:
            ref = A[:64].astype(np.float64) @ B.astype(np.float64)
            err = float(np.abs(out["C"][:64] - ref).max() / np.abs(ref).max())
            rows.append(dict(_row("distsdfg (host in/out)", dtype, n, t), rel_err=err))
    return rows


def run_cupy(n, repeats):
    import cupy as cp
    rows = []
    sync = cp.cuda.Device().synchronize
    for dtype in DTYPES:
        A, B = _inputs(n, dtype)
        device = (cp.asarray(A), cp.asarray(B))
        rows.append(_row("cupy (device)", dtype, n, _median_time(lambda: cp.matmul(*device), repeats, sync)))
        rows.append(_row("cupy (host in/out)", dtype, n,
                         _median_time(lambda: cp.asnumpy(cp.matmul(cp.asarray(A), cp.asarray(B))), repeats, sync)))
        device = None
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("contender", choices=["distsdfg", "cupy"])
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    rows = run_distsdfg(args.n, args.repeats) if args.contender == "distsdfg" else run_cupy(args.n, args.repeats)
    if rows:
        with open(args.out, "w") as f:
            json.dump({"gpu": gpu_name(), "rows": rows}, f, indent=1)
        for r in rows:
            print(f"{r['contender']:24s} {r['dtype']:8s} n={r['n']} {r['median_s'] * 1e3:9.1f} ms "
                  f"{r['gflops']:9.0f} GFLOP/s" + (f"  rel_err {r['rel_err']:.1e}" if "rel_err" in r else ""))


if __name__ == "__main__":
    main()
