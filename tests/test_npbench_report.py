"""The NPBench generality report's bookkeeping (distsdfg.testing.npbench) on a tiny NPBench-shaped
folder written here: discovery, initialisation, references, errors, classes and the table.
Unit tier: nothing is compiled or launched, and nothing of NPBench is used."""
import json
import textwrap

import numpy as np

from distsdfg.testing import npbench as nb


def _fake(tmp_path):
    """Two benchmarks with a DaCe kernel (one updates an argument, one returns) and one without."""
    def bench(name, rel, params, init_in, init_out, inputs, outputs, files):
        folder = tmp_path / "npbench" / "benchmarks" / rel
        folder.mkdir(parents=True)
        for suffix, text in files.items():
            (folder / f"{name}{suffix}.py").write_text(textwrap.dedent(text))
        info = {"benchmark": {"short_name": name[:4], "relative_path": rel, "module_name": name, "func_name": "kernel",
                              "parameters": {"S": params, "M": params},
                              "init": {"func_name": "initialize", "input_args": init_in, "output_args": init_out},
                              "input_args": inputs, "output_args": outputs}}
        (tmp_path / "bench_info").mkdir(exist_ok=True)
        (tmp_path / "bench_info" / f"{name}.json").write_text(json.dumps(info))

    bench("scale", "poly/scale", {"N": 5}, ["N"], ["A"], ["N", "A"], ["A"], {
        "": "import numpy as np\ndef initialize(N):\n    return np.arange(N * N, dtype=np.float64).reshape(N, N)\n",
        "_numpy": "def kernel(N, A):\n    A *= 2.0\n    return A\n",       # also returns what it updates
        "_dace": "raise ImportError('not imported by this test')\n"})
    bench("rowsum", "rowsum", {"M": 3, "N": 4}, ["M", "N"], ["A", "b"], ["A", "b"], [], {
        "": """
            import numpy as np
            def initialize(M, N):
                return np.ones((M, N)), np.float32(3)
            """,
        "_numpy": "def kernel(A, b):\n    return A.sum(axis=1) * b, A[0, 0]\n",
        "_dace": "raise ImportError('not imported by this test')\n"})
    bench("nodace", "nodace", {"N": 2}, ["N"], ["A"], ["A"], [], {"": "def initialize(N):\n    return N\n"})
    return str(tmp_path)


def test_discover_arguments_reference(tmp_path, monkeypatch):
    root = _fake(tmp_path)
    benches = {b.name: b for b in nb.discover(root)}
    assert sorted(benches) == ["rowsum", "scale"]          # nodace has no <name>_dace.py
    monkeypatch.setitem(nb.SIZES, "scale", {"N": 3})          # the report's own shrinking of "S"
    scale = benches["scale"]
    args = scale.arguments()
    assert args["N"] == 3 and args["A"].shape == (3, 3)
    ref = scale.reference(args)
    assert np.array_equal(ref["A"], 2 * args["A"]) and np.array_equal(args["A"], np.arange(9.0).reshape(3, 3))
    # a DaCe version that updates A in place and returns nothing is compared on A alone
    assert nb.rel_error({"A": 2 * args["A"]}, ref) == 0.0
    assert nb.rel_error({"A": 2 * args["A"] + 1e-3}, ref) > 1e-10
    assert nb.rel_error({}, {}) == float("inf")                # nothing to compare is never "correct"
    rowsum = benches["rowsum"]
    ref = rowsum.reference(rowsum.arguments())
    assert sorted(ref) == ["return0", "return1"] and nb.tolerance(ref) == 1e-10
    assert nb.rel_error({"return0": ref["return0"]}, ref) == float("inf")        # a missing result
    assert nb.rel_error({"return0": ref["return0"][:2], "return1": ref["return1"]}, ref) == float("inf")
    assert nb.rel_error({"return0": ref["return0"].astype(np.float32), "return1": ref["return1"]}, ref) == 0.0
    assert nb.rel_error({"return0": np.array([7])}, {"return0": np.asarray(7)}) == 0.0     # a scalar from DaCe
    assert nb.rel_error({"return0": np.array([8])}, {"return0": np.asarray(7)}) > 0.1
    nan = {"return0": np.array([np.nan, 1.0])}
    assert nb.rel_error({"return0": np.array([0.0, 1.0])}, nan) == float("inf")
    assert nb.rel_error({"return0": np.array([np.nan, 1.0])}, nan) == 0.0


def test_classes_and_table(tmp_path):
    root = _fake(tmp_path)
    benches = nb.discover(root)
    ok = {"tol": 1e-10, "rel_err": 1e-16, "kernels": 3}
    assert nb.classify_result({**ok, "split": True, "kernels_split": 2}) == "distributed"
    assert nb.classify_result({**ok, "split": False, "kernels_split": 0}) == "one rank"
    assert nb.classify_result({**ok, "rel_err": 1e-3, "split": True}) == "wrong"
    assert nb.classify_result({"error_class": "LoopDependentMapError", "refused": True}) == "refused"
    assert nb.classify_result({"error_class": "KeyError"}) == "crashed"
    dist = {"scale": {**ok, "split": True, "kernels_split": 2, "class": "distributed"},
            "rowsum": {"error_class": "launch timeout", "class": "crashed", "detail": "timed out | here"}}
    text = nb.table(benches, {"rowsum": {"ok": True}}, dist)
    assert "| scale | N=5 | distributed | 2 of 3 kernels split" in text
    assert "| rowsum | M=3, N=4 | crashed | launch timeout: timed out / here |" in text
    assert "correct and distributed: 1 of 2 that DaCe compiles (50%)" in text
    # a kernel DaCe itself cannot compile is skipped and left out of the percentage
    text = nb.table(benches, {"rowsum": {"ok": False, "detail": "CompilationError: x"}}, dist)
    assert "| rowsum | M=3, N=4 | skipped (DaCe) | CompilationError: x |" in text
    assert "correct and distributed: 1 of 1 that DaCe compiles (100%)" in text


def test_in_place_kernel_without_listed_outputs_is_compared_on_its_arrays(tmp_path, monkeypatch):
    """NPBench lists no ``output_args`` for some kernels that update an argument in place and
    return nothing (doitgen): every array argument is compared then, never nothing at all."""
    root = _fake(tmp_path)
    monkeypatch.setitem(nb.SIZES, "scale", {"N": 3})
    scale = {b.name: b for b in nb.discover(root)}["scale"]
    bench = nb.Bench(root, {**scale.info, "output_args": [], "array_args": ["A"]})
    assert bench.output_names() == ["A"] and scale.output_names() == ["A"]
    args = bench.arguments()
    ref = bench.reference(args)
    assert "A" in ref and np.array_equal(ref["A"], 2 * args["A"])
    assert nb.rel_error(nb.outputs(None, {"A": 2 * args["A"]}, bench.output_names()), ref) == 0.0
    assert nb.rel_error(nb.outputs(None, {"A": args["A"]}, bench.output_names()), ref) > 0.1


def test_dace_alone_is_tried_again_with_default_build_settings(tmp_path, monkeypatch):
    """A kernel DaCe alone fails to build with the report's quick settings counts when DaCe's own work."""
    bench = {b.name: b for b in nb.discover(_fake(tmp_path))}["scale"]
    for k, v in nb.FAST_BUILD.items():
        monkeypatch.setenv(k, v)
    seen = []

    def fake(b, suffix=""):
        seen.append((suffix, all(k in nb.os.environ for k in nb.FAST_BUILD)))
        ok = suffix != ""
        return {"kernel": b.name, "ok": ok, "detail": "" if ok else "CompilerConfigurationError: -O0"}

    monkeypatch.setattr(nb, "_baseline", fake)
    rec = nb.baseline(bench)
    assert rec["ok"] and "default build settings" in rec["detail"] and "-O0" in rec["detail"]
    assert seen == [("", True), ("_default_build", False)]
    assert all(nb.os.environ[k] == v for k, v in nb.FAST_BUILD.items())       # put back for the next kernel
    monkeypatch.delenv("DACE_compiler_build_type")
    monkeypatch.delenv("DACE_compiler_cpu_args")
    seen.clear()
    assert nb.baseline(bench)["ok"] is False and seen == [("", False)]      # no quick settings: one try


def test_speed_report_table_ratios_and_summary():
    """``benchmarks.npbench_speed.table`` on hand-made records: ratios, failures, the summary lines."""
    from benchmarks.npbench_speed import table
    recs = [
        {"kernel": "gemm", "ms": {"numpy": 100.0, "dace": 80.0, "p1": 80.0, "p2": 44.0}, "failed": {}},
        {"kernel": "jacobi_2d", "ms": {"numpy": 200.0, "dace": 40.0, "p1": 20.0, "p2": 20.0}, "failed": {},
         "p2_whole": True},
        {"kernel": "atax", "ms": {"numpy": 50.0, "dace": 40.0, "p1": 60.0}, "failed": {"p2": "wrong result (rel. err 1e-3)"}},
        {"kernel": "lu", "crashed": "launch exited 1"},
    ]
    text = table(recs)
    assert "| gemm | 100.0 | 80.0 | 80.0 | 44.0 | - | 1.00 | 0.80 | 0.55 | - |" in text
    assert "P=2 whole on rank 0" in text and "p2: wrong result" in text and "crashed: launch exited 1" in text
    assert "above 1.3: atax" in text                       # 60 / 40
    assert "above 1.0: 0 of 2" in text
    assert "compute-bound kernels (root placement): geomean 0.55" in text


def test_dace_alone_loads_the_corpus_without_the_package(tmp_path):
    """``benchmarks/dace_alone.py`` times DaCe alone in a process that never imports distsdfg: it loads
    ``distsdfg/testing/npbench.py`` as a plain file, so that module imports nothing of the package at its top."""
    import os
    import subprocess
    import sys
    root = _fake(tmp_path)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.join(repo, 'benchmarks')!r})
        import dace_alone
        bench = dace_alone.bench_of({{"kind": "npbench", "root": {root!r}, "name": "scale", "sizes": {{"N": 8}}}})
        assert "distsdfg" not in sys.modules, sorted(m for m in sys.modules if m.startswith("distsdfg"))
        print(bench.name, bench.sizes())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "scale"
