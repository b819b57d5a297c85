"""DaCe alone, as NPBench's ``dace_cpu`` runs a kernel: ``auto_optimize(sdfg, DeviceType.CPU)``,
``sdfg.compile()``, called with NumPy arrays. A server for the speed report
(``benchmarks.npbench_speed``), in a process that never imports distsdfg (importing distsdfg
configures DaCe's BLAS and build settings).

    python benchmarks/dace_alone.py '{"kind": "npbench", "root": DIR, "name": "gemm", "sizes": {...}}'
    python benchmarks/dace_alone.py '{"kind": "user", "name": "logreg"}'

Prints one JSON line when ready (``compile_s``, ``blas``) or failed (``error``), then answers
each ``run`` line on standard input with one timed call (``ms``) and its largest relative error
against NumPy (``err``); ``quit`` ends it.
"""
from __future__ import annotations

import copy
import importlib.util
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def bench_of(spec: dict):
    """The benchmark ``spec`` names, loaded without importing the distsdfg package."""
    if spec["kind"] == "user":
        return _load("user_programs", os.path.join(HERE, "user_programs.py")).PROGRAMS[spec["name"]]
    npb = _load("npbench_standalone", os.path.join(REPO, "distsdfg", "testing", "npbench.py"))
    bench = {b.name: b for b in npb.discover(spec["root"])}[spec["name"]]
    sizes = dict(spec["sizes"])
    bench.sizes = lambda: dict(sizes)
    return bench


def main(argv) -> int:
    spec = json.loads(argv[0])
    try:
        import numpy as np
        import dace
        from dace.frontend.python.parser import infer_symbols_from_datadescriptor
        from dace.transformation.auto.auto_optimize import auto_optimize
        npb = _load("npbench_standalone", os.path.join(REPO, "distsdfg", "testing", "npbench.py"))
        bench = bench_of(spec)
        args = bench.arguments()
        ref = bench.reference(args)
        t0 = time.perf_counter()
        sdfg = bench.program().to_sdfg()
        sdfg.name = f"alone_{spec['name']}"
        auto_optimize(sdfg, dace.DeviceType.CPU)
        compiled = sdfg.compile()
        blas = sorted({str(n.implementation) for n, _ in sdfg.all_nodes_recursive()
                       if type(n).__name__ in ("Gemm", "Gemv", "BatchedMatMul", "Dot")})
        names = set(sdfg.arglist()) | set(map(str, sdfg.free_symbols))
        call0 = {k: v for k, v in args.items() if k in names}
        arrays = {k: v for k, v in call0.items() if isinstance(v, np.ndarray)}
        syms = infer_symbols_from_datadescriptor(sdfg, arrays)
        syms = {k: v for k, v in syms.items() if k in names and k not in call0}
        compile_s = time.perf_counter() - t0
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300],
                          "trace": traceback.format_exc()[-800:]}), flush=True)
        return 0
    print(json.dumps({"ready": True, "compile_s": round(compile_s, 1), "blas": blas}), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        mine = copy.deepcopy(args)
        call = {k: v for k, v in mine.items() if k in names}
        t = time.perf_counter()
        ret = compiled(**call, **syms)
        ms = (time.perf_counter() - t) * 1e3
        err = npb.rel_error(npb.outputs(ret, mine, bench.output_names()), ref)
        print(json.dumps({"ms": ms, "err": err}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
