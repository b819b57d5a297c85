"""The BLAS set-up (distsdfg/blas.py): MKL selected on import, matrix products call it, a warning without it."""
import copy
import os
import subprocess
import sys
import warnings

import dace
import numpy as np
import pytest

import distsdfg
from distsdfg import blas

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
M, N, K = (dace.symbol(s) for s in "MNK")

needs_mkl = pytest.mark.skipif(not blas.info().optimized, reason="no MKL here: " + blas.info().missing)


@dace.program
def matmul(A: dace.float64[M, K], B: dace.float64[K, N]):
    return A @ B


@dace.program
def mlp(x: dace.float64[M, K], w1: dace.float64[K, N], w2: dace.float64[N, K]):
    return np.maximum(x @ w1, 0) @ w2


def _generated_code(sdfg) -> str:
    from dace.codegen import codegen
    return "".join(obj.clean_code for obj in codegen.generate_code(copy.deepcopy(sdfg)))


@needs_mkl
def test_import_selects_mkl_for_every_blas_node():
    import dace.libraries.blas as dblas
    info = blas.info()
    assert info.name == "Intel MKL" and info.implementation == "MKL"
    assert dblas.default_implementation == "MKL"
    for cls in (dblas.Gemm, dblas.Gemv, dblas.Dot, dblas.BatchedMatMul):     # what MatMul and einsum become
        assert "MKL" in cls.implementations
    root = os.environ["MKLROOT"]
    assert os.path.exists(os.path.join(root, "include", "mkl.h"))
    assert os.path.realpath(os.path.join(root, "lib", "libmkl_rt.so")) == os.path.realpath(info.source)
    assert dblas.IntelMKL.cmake_libraries() == [os.path.join(root, "lib", "libmkl_rt.so")]
    # np.linalg's LAPACK nodes too (their default, OpenBLAS, is often not installed: NPBench's cholesky2)
    import dace.libraries.lapack as lapack
    import dace.libraries.linalg as linalg
    assert lapack.default_implementation == "MKL" and linalg.default_implementation == "MKL"
    assert all("MKL" in cls.implementations for cls in (lapack.Potrf, lapack.Getrf, lapack.Getrs, linalg.Cholesky,
                                                        linalg.Solve, linalg.Inv))


@needs_mkl
def test_lowered_products_call_cblas():
    """A lowered MatMul (and the MLP's two) generate calls to MKL's cblas_dgemm, not loop nests."""
    sdfg = mlp.to_sdfg()
    distsdfg.lower(sdfg, "auto", nprocs=2, plan_options={"M": 8, "N": 6, "K": 4})
    code = _generated_code(sdfg)
    assert code.count("cblas_dgemm(") >= 2 and '#include "mkl.h"' in code
    sdfg = matmul.to_sdfg()
    distsdfg.lower(sdfg, {"_MatMult_.gemm_map": (2, 1, 1)})
    assert "cblas_dgemm(" in _generated_code(sdfg)


def test_einsum_and_vector_products_expand_to_blas(monkeypatch):
    """einsum contracts through MatMul, matrix-vector through Gemv, dot through Dot: all take the BLAS default."""
    @dace.program
    def products(A: dace.float64[8, 6], B: dace.float64[6, 5], x: dace.float64[6], y: dace.float64[6]):
        return np.einsum("ik,kj->ij", A, B), A @ x, x @ y
    from distsdfg import dace_compat as dc
    monkeypatch.setattr(dc.blas_library(), "default_implementation", "MKL")
    code = _generated_code(products.to_sdfg())
    assert "cblas_dgemm(" in code and "cblas_dgemv(" in code and "cblas_ddot(" in code


def test_missing_blas_warns_naming_the_fix(monkeypatch):
    from distsdfg import dace_compat as dc
    monkeypatch.setattr(dc.blas_library(), "default_implementation", None)
    monkeypatch.setattr(blas, "_INFO", blas.BlasInfo(name="none", implementation="pure", missing="no libmkl_rt"))
    sdfg = matmul.to_sdfg()
    with pytest.warns(blas.NoBlasWarning, match=r"MatMul.*reference loop nest.*no libmkl_rt.*pip install mkl mkl-include"):
        assert blas.warn_if_reference(sdfg)
    assert issubclass(blas.NoBlasWarning, RuntimeWarning)

    @dace.program
    def add(a: dace.float64[4], b: dace.float64[4]):
        return a + b
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not blas.warn_if_reference(add.to_sdfg())       # no matrix product: nothing to say


def test_find_mkl_says_what_is_missing(monkeypatch, tmp_path):
    from pathlib import Path
    monkeypatch.setattr(blas, "_prefixes", lambda: [Path(tmp_path)])
    found, missing = blas.find_mkl()
    assert found is None and "libmkl_rt" in missing and str(tmp_path) in missing
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libmkl_rt.so.3").write_bytes(b"")
    found, missing = blas.find_mkl()
    assert found is None and "mkl.h" in missing
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "mkl.h").write_text("")
    found, _ = blas.find_mkl()
    assert found == (tmp_path / "include", tmp_path / "lib" / "libmkl_rt.so.3")
    root = blas.mkl_root(*found)            # the layout DaCe's MKL environment expects
    assert os.readlink(root / "lib" / "libmkl_rt.so") == str(tmp_path / "lib" / "libmkl_rt.so.3")
    assert (root / "include" / "mkl.h").exists()


def test_threads_per_rank_settings():
    assert blas.threads_per_rank(None) >= 1
    assert blas.threads_per_rank(3) == 3
    with pytest.raises(distsdfg.DistributedLoweringError, match="at least 1"):
        blas.threads_per_rank(0)
    env = blas.thread_env(4)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == env["DISTSDFG_THREADS_PER_RANK"] == "4"
    assert env["MKL_THREADING_LAYER"] == "GNU" and blas.thread_env(1)["MKL_THREADING_LAYER"] == "SEQUENTIAL"


@needs_mkl
@pytest.mark.parametrize("k", [1, 2])
def test_threads_reach_mkl_and_openmp(k):
    """In a fresh process, DISTSDFG_THREADS_PER_RANK=k gives MKL k threads (its sequential or GNU OpenMP
    layer, loaded the way a built program loads it) and OpenMP k threads."""
    code = ("import ctypes, os, distsdfg\nfrom distsdfg import blas\nblas.use_threads(blas.threads_per_rank())\n"
            "mkl = ctypes.CDLL(blas.info().library)\ngomp = ctypes.CDLL('libgomp.so.1')\n"
            "print(os.environ['MKL_THREADING_LAYER'], mkl.MKL_Get_Max_Threads(), gomp.omp_get_max_threads())\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               DISTSDFG_THREADS_PER_RANK=str(k))
    env.pop("MKL_THREADING_LAYER", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    layer, mkl_threads, omp_threads = r.stdout.split()
    assert layer == ("SEQUENTIAL" if k == 1 else "GNU")
    assert int(mkl_threads) == k and int(omp_threads) == k


def test_batched_product_with_a_size_symbol_named_b_is_refused(monkeypatch):
    """DaCe's MKL batched GEMM declares C++ locals A, B, C: a size symbol B would not compile."""
    from distsdfg import dace_compat as dc
    monkeypatch.setattr(dc.blas_library(), "default_implementation", "MKL")
    B = dace.symbol("B")

    @dace.program
    def bmm(X: dace.float64[B, 4, 5], Y: dace.float64[B, 5, 6]):
        return X @ Y
    with pytest.raises(distsdfg.UnsupportedProgramError, match="size symbol named B.*Rename"):
        blas.check_program(bmm.to_sdfg())
    blas.check_program(matmul.to_sdfg())          # 2-D products with any symbols are fine
