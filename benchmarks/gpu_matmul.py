"""One-rank matmul throughput on a GPU: distsdfg (target="gpu") next to CuPy's own matmul.

    python -m benchmarks.gpu_matmul all --n 8192 --out OUT.json       # everything below, one process
    mpiexec -n 1 python -m mpi4py -m benchmarks.gpu_matmul distsdfg --n 8192 --out OUT.json [--args host|device|both]
    python -m benchmarks.gpu_matmul cupy --n 8192 --out OUT.json      # any Python with CuPy

Two contracts, each measured for both. "host in/out": NumPy inputs on the host, the product
returned on the host (the time includes the host-device copies). "device": CuPy arrays already on
the GPU in, a CuPy array out (distsdfg runs its device-argument variant,
``distsdfg.lowering.device_args``: at one rank cuBLAS on the caller's buffers, nothing copied);
CuPy's figure is the upper bound of what any program could reach. With ``mpiexec -n P`` the
distsdfg rows split the product's rows P ways (device arguments: the steps scatter from and gather
into rank 0's CuPy arrays, through pinned host temporaries, or with ``--cuda-aware`` by MPI itself).
Each figure is the median of ``--repeats`` calls after one warm-up call (the
first distsdfg call with CuPy arrays compiles the variant), for float32 and float64; GFLOP/s counts
2 n^3 flops. The distsdfg results are checked against NumPy on 64 rows; ``vs_cupy`` is the
throughput relative to CuPy's figure for the same contract (``all`` only).
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


def run_distsdfg(n, repeats, args=("host", "device"), cuda_aware=False):
    import dace
    from mpi4py import MPI

    import distsdfg
    comm = MPI.COMM_WORLD
    M, N, K = (dace.symbol(s) for s in "MNK")
    rows = []
    for dtype in DTYPES:
        T = getattr(dace, dtype)

        @dace.program
        def gpu_matmul(A: T[M, K], B: T[K, N]):
            return A @ B

        sdfg = gpu_matmul.to_sdfg(simplify=True)
        sdfg.name = f"gpu_matmul_{dtype}"
        distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"gemm_map": (comm.size, 1, 1)}), target="gpu",
                       cuda_aware_mpi=cuda_aware)
        prog = distsdfg.compile(sdfg)
        A, B = _inputs(n, dtype)
        ref = A[:64].astype(np.float64) @ B.astype(np.float64)
        for kind in args:
            out = {}
            if kind == "device":
                import cupy as cp
                sync = cp.cuda.Device().synchronize
                ins = (cp.asarray(A), cp.asarray(B)) if comm.rank == 0 else (None, None)
            else:
                sync, ins = (lambda: None), ((A, B) if comm.rank == 0 else (None, None))

            def call():
                out["C"] = prog(A=ins[0], B=ins[1], M=n, N=n, K=n)

            t = _median_time(call, repeats, sync)
            comm.Barrier()
            if comm.rank == 0:
                C = out["C"][:64]
                C = C.get() if hasattr(C, "get") else C
                err = float(np.abs(C - ref).max() / np.abs(ref).max())
                label = "host in/out" if kind == "host" else "device"
                rows.append(dict(_row(f"distsdfg ({label})", dtype, n, t), rel_err=err, ranks=comm.size,
                                 returned=type(out["C"]).__module__.split(".")[0]))
            out.clear()
            ins = None
            if kind == "device":
                cp.get_default_memory_pool().free_all_blocks()
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
    ap.add_argument("contender", choices=["distsdfg", "cupy", "all"])
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--args", choices=["host", "device", "both"], default="both",
                    help="distsdfg: NumPy arrays (host in/out), CuPy arrays (device), or both")
    ap.add_argument("--cuda-aware", action="store_true", help="distsdfg: lower with cuda_aware_mpi=True")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    kinds = ("host", "device") if args.args == "both" else (args.args,)
    rows = []
    if args.contender in ("cupy", "all"):
        rows += run_cupy(args.n, args.repeats)
    if args.contender in ("distsdfg", "all"):
        rows += run_distsdfg(args.n, args.repeats, kinds, args.cuda_aware)
    if args.contender == "all":
        best = {(r["dtype"], r["contender"].split("(")[1]): r["median_s"]
                for r in rows if r["contender"].startswith("cupy")}
        for r in rows:
            if r["contender"].startswith("distsdfg"):
                r["vs_cupy"] = best[(r["dtype"], r["contender"].split("(")[1])] / r["median_s"]
    if rows:
        with open(args.out, "w") as f:
            json.dump({"gpu": gpu_name(), "rows": rows}, f, indent=1)
        for r in rows:
            print(f"{r['contender']:24s} {r['dtype']:8s} n={r['n']} {r['median_s'] * 1e3:9.1f} ms "
                  f"{r['gflops']:9.0f} GFLOP/s" + (f"  rel_err {r['rel_err']:.1e}" if "rel_err" in r else "")
                  + (f"  {r['vs_cupy']:.2f}x CuPy" if "vs_cupy" in r else ""))


if __name__ == "__main__":
    main()
