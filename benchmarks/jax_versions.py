"""JAX versions of the workloads, run in JAX's own environment (JAX needs NumPy 2; distsdfg pins NumPy 1).

    JAX_PYTHON benchmarks/jax_versions.py CASES.npz P REPEATS OUT.json

Not imported by the rest of the benchmarks: the driver (``benchmarks.__main__``, contender
``jax``) writes every workload's inputs and NumPy reference to ``CASES.npz`` (keys
``<workload>/<input>`` and ``<workload>/__ref__``) and starts this script with the JAX
environment's interpreter, once per P (``--xla_force_host_platform_device_count=P``: P CPU devices
in one process, one XLA thread each; XLA's matrix products still use every core, so the driver
pins the process to P cores with ``taskset``). Each version is ``jax.jit``-compiled with the same
row-parallel algorithm as the hand-written and Dask versions: the leading axis of the row operand
split over a one-dimensional mesh of the P devices, the other operands replicated (the chain also
splits ``E``'s columns, as in the hand-written version; SpMV keeps the CSR arrays whole: JAX has no
row-split CSR). The contract is distsdfg's root placement: NumPy arrays in (``jax.device_put``
with the sharding, in the timed call), a NumPy array out (``np.asarray`` of the result). The first
call compiles and is checked against the reference; the timed repeats follow.

Create the environment once (the driver's ``--jax-python`` or ``DISTSDFG_JAX_PYTHON`` names it):

    python -m venv jaxenv && jaxenv/bin/pip install jax
"""
import json
import os
import sys
import time


def main(argv):
    cases_path, nprocs, repeats, out_path = argv[0], int(argv[1]), int(argv[2]), argv[3]
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={nprocs}"
                               " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    import jax
    import numpy as np
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as Spec

    mesh = Mesh(np.array(jax.devices()[:nprocs]), ("p",))
    rows_ = NamedSharding(mesh, Spec("p"))
    whole = NamedSharding(mesh, Spec())
    cols = NamedSharding(mesh, Spec(None, "p"))

    def softmax(x):
        e = jnp.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def megatron(x, WQ, WK, WV, WO, W1):
        Q = jnp.einsum('bik,khj->bhij', x, WQ)
        KT = jnp.einsum('bik,khj->bhji', x, WK)
        V = jnp.einsum('bik,khj->bhij', x, WV)
        P = softmax(jnp.einsum('bhik,bhkj->bhij', Q, KT) / jnp.float32(4.0))
        out = jnp.einsum('bhse,hej->bsj', jnp.einsum('bhik,bhkj->bhij', P, V), WO)
        return jnp.einsum('bsj,jf->bsf', out, W1)

    def spmv(A_row, A_col, A_val, x):
        n = A_row.shape[0] - 1
        starts = A_row.astype(jnp.int64)
        row_of = jnp.searchsorted(starts[1:], jnp.arange(A_val.shape[0]), side="right")
        return jax.ops.segment_sum(A_val * x[A_col.astype(jnp.int64)], row_of, num_segments=n)

    # name -> (function, sharding per input in the workload's input order)
    versions = {
        "matmul_square": (lambda A, B: A @ B, {"A": rows_, "B": whole}),
        "matmul_skewed": (lambda A, B: A @ B, {"A": rows_, "B": whole}),
        "matrix_chain": (lambda A, B, C, D, E: A @ B + C @ (D @ E),
                         {"A": rows_, "B": whole, "C": rows_, "D": whole, "E": cols}),
        "softmax": (softmax, {"inp": rows_}),
        "mlp": (lambda x, W1, b1, W2, b2: jnp.maximum(x @ W1 + b1, 0.0) @ W2 + b2,
                {"x": rows_, "W1": whole, "b1": whole, "W2": whole, "b2": whole}),
        "megatron": (megatron, {"x": rows_, "WQ": whole, "WK": whole, "WV": whole, "WO": whole, "W1": whole}),
        "elementwise": (lambda x, y: jnp.exp((x * y + 2.0) * -0.5) * x - y, {"x": rows_, "y": rows_}),
        "spmv": (spmv, {"A_row": whole, "A_col": whole, "A_val": whole, "x": whole}),
    }
    data = np.load(cases_path)
    names = sorted({k.split("/")[0] for k in data.files})
    rows = []
    for w in names:
        order = json.loads(str(data[f"{w}/__order__"]))
        inputs = [data[f"{w}/{k}"] for k in order]
        ref, rtol = data[f"{w}/__ref__"], float(data[f"{w}/__rtol__"])
        row = {"workload": w, "nprocs": nprocs, "contender": "jax"}
        try:
            fn, shard = versions[w]
            if w != "spmv" and any(a.shape[0] % nprocs for k, a in zip(order, inputs) if shard[k] is rows_):
                shard = {k: whole for k in shard}          # rows that do not split evenly: replicated
                row["note"] = "inputs replicated (rows not divisible by P)"
            jitted = jax.jit(fn, in_shardings=tuple(shard[k] for k in order))

            def call():
                args = [jax.device_put(a, shard[k]) for k, a in zip(order, inputs)]
                return np.asarray(jitted(*args))
            out = call()
            err = float(np.abs(out - ref).max() / max(float(np.abs(ref).max()), 1e-300)) if ref.size else 0.0
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            row.update(status="ok", correct=bool(out.shape == ref.shape and err <= rtol), rel_err=err, times=times,
                       median=float(np.median(times)), min=float(min(times)), max=float(max(times)))
        except Exception as exc:       # reported in the row, like every other contender's failure
            row.update(status="failed", reason=f"{type(exc).__name__}: {exc}"[:500])
        rows.append(row)
    with open(out_path, "w") as f:
        json.dump({"jax": jax.__version__, "numpy": np.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
