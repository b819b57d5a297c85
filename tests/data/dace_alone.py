"""A sample of DaCe programs parsed, generated and run by DaCe alone, with distsdfg imported or not
(``python dace_alone.py with|without OUT.json [NPBENCH_DIR]``): tests/test_import_neutrality.py compares
what the two processes write."""
import glob
import importlib.util
import json
import os
import sys

import dace
import dace.libraries.blas  # noqa: F401  DaCe's library packages that distsdfg imports, imported on both
import dace.libraries.lapack  # noqa: F401  sides: importing one registers its functions in DaCe's own
import dace.libraries.linalg  # noqa: F401  replacement registry (DaCe 2.0), which DaCe does too when a
import dace.libraries.mpi  # noqa: F401  program uses them
import dace.libraries.standard  # noqa: F401
import numpy as np

if sys.argv[1] == "with":
    import distsdfg

N = dace.symbol("N")


@dace.program
def signs(a: dace.int64[N], b: dace.int64[N]):
    return a // 3 + a % 5 + a // b


@dace.program
def slices(x: dace.float64[N, 4]):
    col = x[:, 0:1]
    row = x[1:2, :]
    return col * 2.0, row + 1.0, np.sum(x[:, 2:3])


@dace.program
def counts(m: dace.bool_[N], x: dace.float64[N]):
    return np.sum(m), np.where(np.isnan(x), 0.0, x)


@dace.program
def product(A: dace.float64[N, N], B: dace.float64[N, N]):
    return A @ B + A.T


PROGRAMS = {"signs": signs, "slices": slices, "counts": counts, "product": product}


def npbench_programs(root):
    """The ``@dace.program``s of a few of NPBench's ``*_dace.py`` files under ``root``."""
    out = {}
    for name in ("polybench/gemm/gemm_dace.py", "polybench/atax/atax_dace.py", "polybench/jacobi_1d/jacobi_1d_dace.py",
                 "polybench/trisolv/trisolv_dace.py", "go_fast/go_fast_dace.py", "polybench/mvt/mvt_dace.py",
                 "polybench/heat_3d/heat_3d_dace.py"):
        path = os.path.join(root, "npbench", "benchmarks", name)
        for found in glob.glob(path) + glob.glob(os.path.join(root, "npbench", "benchmarks", "*", name)):
            spec = importlib.util.spec_from_file_location(os.path.basename(found)[:-3], found)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            for k, v in vars(mod).items():
                if isinstance(v, dace.frontend.python.parser.DaceProgram):
                    out[f"{name}:{k}"] = v
    return out


def code_of(prog, folder):
    sdfg = prog.to_sdfg(simplify=True)
    return [c.clean_code.replace(folder, "<build>") for c in sdfg.generate_code()]


def dace_state():
    """What distsdfg used to change at import: DaCe's settings and registries, by name."""
    from dace.codegen import cppunparse
    from dace.config import Config
    from dace.frontend.common.op_repository import Replacements
    from dace.frontend.python import newast
    import dace.libraries.blas as blas
    return {"cpu_args": Config.get("compiler", "cpu", "args"), "blas": str(blas.default_implementation),
            "replacements": sorted(f"{k}={getattr(v, '__module__', '')}.{getattr(v, '__qualname__', '')}"
                                   for k, v in Replacements._rep.items()),
            "methods": sorted(f"{k}={getattr(v, '__module__', '')}.{getattr(v, '__qualname__', '')}"
                              for k, v in Replacements._method_rep.items()),
            "binop": cppunparse.CPPUnparser._BinOp.__module__,
            "read_slice": newast.ProgramVisitor._add_read_slice.__module__,
            "compile": dace.SDFG.compile.__module__}


def main():
    out_path, npbench = sys.argv[2], (sys.argv[3] if len(sys.argv) > 3 else "")
    folder = os.path.dirname(os.path.abspath(out_path))
    dace.Config.set("default_build_folder", value=os.path.join(folder, "dacecache"))
    progs = dict(PROGRAMS)
    if npbench and os.path.isdir(npbench):
        progs.update(npbench_programs(npbench))
    result = {"state": dace_state(), "code": {}, "values": {}}
    for name, prog in progs.items():
        result["code"][name] = code_of(prog, folder)
    rng = np.random.default_rng(0)
    n = 7
    a, b = rng.integers(-20, 20, n), rng.integers(1, 4, n) * rng.choice([-1, 1], n)
    x = rng.random((n, 4))
    m = rng.random(n) > 0.5
    v = rng.random(n)
    v[2] = np.nan
    runs = {"signs": lambda: signs(a, b, N=n), "slices": lambda: slices(x, N=n), "counts": lambda: counts(m, v, N=n)}
    for name, run in runs.items():
        got = run()
        got = got if isinstance(got, tuple) else (got,)
        result["values"][name] = [np.asarray(g).tolist() for g in got]
    result["state_after"] = dace_state()
    if sys.argv[1] == "with":               # distsdfg's semantics apply inside its block, and only there
        with distsdfg.numpy_semantics():
            result["inside"] = {"code": {k: code_of(PROGRAMS[k], folder) for k in ("signs", "slices")},
                                "state": dace_state()}
        result["after_block"] = {"code": {k: code_of(PROGRAMS[k], folder) for k in ("signs", "slices")},
                                 "state": dace_state()}
    with open(out_path, "w") as f:
        json.dump(result, f, default=str)


if __name__ == "__main__":
    main()
