"""The BLAS set-up (distsdfg/lowering/blas.py, lowering/blas_openblas.py): OpenBLAS (scipy-openblas32) or MKL selected on import,
DISTSDFG_BLAS choosing, matrix products calling it, a warning without any."""
import copy
import os
import subprocess
import sys
import warnings

import dace
import numpy as np
import pytest

import distsdfg
from distsdfg.lowering import blas

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
M, N, K = (dace.symbol(s) for s in "MNK")

needs_mkl = pytest.mark.skipif(blas.find_mkl()[0] is None, reason="no MKL here: " + blas.find_mkl()[1])
needs_openblas = pytest.mark.skipif(blas.blas_openblas.find()[0] is None, reason=blas.blas_openblas.find()[1])
BACKENDS = [pytest.param("openblas", marks=needs_openblas), pytest.param("mkl", marks=needs_mkl)]


@pytest.fixture
def backend(request, monkeypatch):
    """Set up the backend ``request.param`` for this test; the import-time choice is restored afterwards."""
    monkeypatch.delenv(blas.BACKEND_ENV, raising=False)
    before = blas.info()
    yield blas.configure(request.param, force=True)
    blas.configure({"OpenBLAS": "openblas", "MKL": "mkl"}.get(before.implementation), force=True)


@dace.program
def matmul(A: dace.float64[M, K], B: dace.float64[K, N]):
    return A @ B


@dace.program
def mlp(x: dace.float64[M, K], w1: dace.float64[K, N], w2: dace.float64[N, K]):
    return np.maximum(x @ w1, 0) @ w2


def _generated_code(sdfg) -> str:
    from dace.codegen import codegen
    return "".join(obj.clean_code for obj in codegen.generate_code(copy.deepcopy(sdfg)))


def test_import_selects_openblas_where_installed_else_mkl():
    info = blas.info()
    if os.environ.get(blas.BACKEND_ENV):
        pytest.skip(f"{blas.BACKEND_ENV} is set")
    if blas.blas_openblas.find()[0] is not None:
        assert info.name == "OpenBLAS" and info.implementation == "OpenBLAS" and info.chosen_by == "default"
    elif blas.find_mkl()[0] is not None:
        assert info.implementation == "MKL"


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_backend_is_the_expansion_of_every_blas_and_lapack_node(backend):
    import dace.libraries.blas as dblas
    import dace.libraries.lapack as lapack
    import dace.libraries.linalg as linalg
    impl = backend.implementation
    assert impl in ("OpenBLAS", "MKL") and dblas.default_implementation == impl
    for cls in (dblas.Gemm, dblas.Gemv, dblas.Dot, dblas.BatchedMatMul):     # what MatMul and einsum become
        assert impl in cls.implementations
    # np.linalg's LAPACK nodes too: one vendor's headers per program (mkl.h and cblas.h clash)
    assert lapack.default_implementation == impl and linalg.default_implementation == impl
    assert all(impl in cls.implementations for cls in (lapack.Potrf, lapack.Getrf, lapack.Getrs, linalg.Cholesky,
                                                       linalg.Solve, linalg.Inv))
    if impl == "MKL":
        root = os.environ["MKLROOT"]
        assert os.path.exists(os.path.join(root, "include", "mkl.h"))
        assert os.path.realpath(os.path.join(root, "lib", "libmkl_rt.so")) == os.path.realpath(backend.source)
        assert dblas.IntelMKL.cmake_libraries() == [os.path.join(root, "lib", "libmkl_rt.so")]
    else:
        from distsdfg import dace_compat as dc
        assert dc.openblas_environment() == ([backend.include], [backend.library])


def test_blas_override_by_environment(monkeypatch):
    monkeypatch.setenv(blas.BACKEND_ENV, "Fortran")
    with pytest.raises(distsdfg.DistributedLoweringError, match="DISTSDFG_BLAS='fortran'.*openblas, mkl"):
        blas.backend_choice()
    before = blas.info()
    try:
        for name, impl, found in (("mkl", "MKL", blas.find_mkl()[0]),
                                  ("openblas", "OpenBLAS", blas.blas_openblas.find()[0])):
            if found is None:
                continue
            monkeypatch.setenv(blas.BACKEND_ENV, name)
            info = blas.configure(force=True)
            assert info.implementation == impl and info.chosen_by == f"DISTSDFG_BLAS={name}"
            assert info is blas.info()
        from distsdfg.launch import info as report         # what `distsdfg info` prints
        assert ("BLAS chosen by", f"{blas.info().chosen_by} (DISTSDFG_BLAS=openblas|mkl overrides)") in report.rows()
        # the one asked for missing: the other, with a warning saying why
        monkeypatch.setenv(blas.BACKEND_ENV, "openblas")
        monkeypatch.setattr(blas.blas_openblas, "find", lambda: (None, "scipy-openblas32 is not installed"))
        if blas.find_mkl()[0] is not None:
            with pytest.warns(RuntimeWarning, match="openblas asked for but not usable.*not installed.*Intel MKL"):
                assert blas.configure(force=True).implementation == "MKL"
    finally:
        monkeypatch.undo()
        blas.configure({"OpenBLAS": "openblas", "MKL": "mkl"}.get(before.implementation), force=True)


def test_openblas_shim_maps_plain_names_to_the_prefixed_ones(tmp_path):
    """The shims define every plain CBLAS/LAPACKE name the wheel declares as its scipy_ name, and the
    library exports those DaCe's OpenBLAS expansions call."""
    (tmp_path / "cblas.h").write_text("void scipy_cblas_dgemm(int m);\nint scipy_openblas_get_num_threads(void);\n")
    (tmp_path / "lapacke.h").write_text("int scipy_LAPACKE_dpotrf (int layout, char uplo);\n")
    folder = blas.blas_openblas.shim_folder(tmp_path, tmp_path / "cache")
    cblas = (folder / "cblas.h").read_text()
    assert f'#include "{tmp_path / "cblas.h"}"' in cblas and "#define cblas_dgemm scipy_cblas_dgemm" in cblas
    assert "#define openblas_get_num_threads scipy_openblas_get_num_threads" in cblas
    assert "#define LAPACKE_dpotrf scipy_LAPACKE_dpotrf" in (folder / "lapacke.h").read_text()
    found, _ = blas.blas_openblas.find()
    if found is None:
        return
    import ctypes
    import re
    lib = ctypes.CDLL(str(found[1]))
    folder = blas.blas_openblas.shim_folder(found[0], tmp_path / "cache")
    defined = dict(re.findall(r"#define (\w+) (scipy_\w+)", (folder / "cblas.h").read_text()
                              + (folder / "lapacke.h").read_text()))
    used = ["cblas_dgemm", "cblas_sgemm", "cblas_zgemm", "cblas_dgemv", "cblas_sgemv", "cblas_ddot", "cblas_sdot",
            "LAPACKE_dpotrf", "LAPACKE_dgetrf", "LAPACKE_dgetrs", "LAPACKE_dgetri", "openblas_set_num_threads"]
    assert set(used) <= set(defined)
    assert all(hasattr(lib, defined[n]) for n in used)      # (a few bf16 ones are declared but not built)


GEMV_CASES = r"""
#include <cblas.h>
extern "C" void call_gemv(int dbl, int order, int trans, int m, int n, double alpha, const void* A, int lda,
                          const void* x, int incx, double beta, void* y, int incy) {
    if (dbl)
        cblas_dgemv((CBLAS_ORDER)order, (CBLAS_TRANSPOSE)trans, m, n, alpha, (const double*)A, lda,
                    (const double*)x, incx, beta, (double*)y, incy);
    else
        cblas_sgemv((CBLAS_ORDER)order, (CBLAS_TRANSPOSE)trans, m, n, (float)alpha, (const float*)A, lda,
                    (const float*)x, incx, (float)beta, (float*)y, incy);
}
"""


@needs_openblas
def test_own_gemv_matches_numpy_in_every_order_transpose_and_stride(tmp_path):
    """The cblas.h shim's matrix-vector products (distsdfg_gemv.h): row- and column-major, plain and
    transposed, alpha and beta (beta 0 never reads y), a leading dimension past the matrix, sizes
    that are not multiples of the unrolling, float and double; strided vectors go to OpenBLAS."""
    import ctypes
    include, library = blas.blas_openblas.find()[0]
    folder = blas.blas_openblas.shim_folder(include, tmp_path / "cache", own_gemv=True)
    assert "#define cblas_dgemv distsdfg_blas::dgemv" in (folder / "cblas.h").read_text()
    (tmp_path / "t.cpp").write_text(GEMV_CASES)
    so = tmp_path / "libt.so"
    subprocess.run(["g++", "-O3", "-march=native", "-ffast-math", "-fopenmp", "-shared", "-fPIC", f"-I{folder}",
                    str(tmp_path / "t.cpp"), str(library), f"-Wl,-rpath,{library.parent}", "-o", str(so)], check=True)
    lib = ctypes.CDLL(str(so))
    lib.call_gemv.argtypes = [ctypes.c_int] * 5 + [ctypes.c_double, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                                   ctypes.c_int, ctypes.c_double, ctypes.c_void_p, ctypes.c_int]
    rng = np.random.default_rng(1)
    row, col, plain, trans = 101, 102, 111, 112
    checked = 0
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        for m, n in ((13, 7), (1, 9), (64, 5), (5, 1), (203, 118)):
            for order in (row, col):
                for tr in (plain, trans):
                    for alpha, beta in ((1.0, 0.0), (2.5, 1.0), (-1.0, 0.5)):
                        for incx, incy in ((1, 1), (2, 3)):
                            ld = (n if order == row else m) + 3
                            store = rng.random((m, ld) if order == row else (n, ld)).astype(dtype)
                            a = store[:, :n] if order == row else store[:, :m].T          # op-free A, m x n
                            op = a if tr == plain else a.T
                            x = rng.random(op.shape[1] * incx).astype(dtype)
                            y0 = rng.random(op.shape[0] * incy).astype(dtype)
                            if beta == 0.0:
                                y0[::incy] = np.nan                                      # must not be read
                            y = y0.copy()
                            lib.call_gemv(int(dtype == np.float64), order, tr, m, n, alpha, store.ctypes.data, ld,
                                          x.ctypes.data, incx, beta, y.ctypes.data, incy)
                            want = alpha * (op.astype(np.float64) @ x[::incx].astype(np.float64))
                            if beta:
                                want = want + beta * y0[::incy]
                            err = np.abs(y[::incy] - want).max() / max(1.0, np.abs(want).max())
                            assert err < tol, (dtype, m, n, order, tr, alpha, beta, incx, incy, err)
                            if incy > 1:
                                keep = np.ones(len(y), bool)
                                keep[::incy] = False
                                assert np.array_equal(y[keep], y0[keep])                # between strides: untouched
                            checked += 1
    assert checked == 2 * 5 * 2 * 2 * 3 * 2


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_lowered_products_call_cblas(backend):
    """A lowered MatMul (and the MLP's two) generate calls to cblas_dgemm of the backend's header, not loop nests."""
    sdfg = mlp.to_sdfg()
    distsdfg.lower(sdfg, "auto", nprocs=2, plan_options={"M": 8, "N": 6, "K": 4})
    code = _generated_code(sdfg)
    header = "mkl.h" if backend.implementation == "MKL" else "cblas.h"
    assert code.count("cblas_dgemm(") >= 2 and f'#include "{header}"' in code
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
    with pytest.warns(blas.NoBlasWarning, match=r"MatMul.*reference loop nest.*no libmkl_rt.*scipy-openblas32.*"
                                                r"pip install 'distsdfg\[mkl\]'"):
        assert blas.warn_if_reference(sdfg)
    assert issubclass(blas.NoBlasWarning, RuntimeWarning)

    @dace.program
    def add(a: dace.float64[4], b: dace.float64[4]):
        return a + b
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not blas.warn_if_reference(add.to_sdfg())       # no matrix product: nothing to say


def test_without_mkl_openblas_is_used_and_asking_for_mkl_says_how_to_install_it(monkeypatch):
    """MKL is the optional extra distsdfg[mkl]: without it the default is OpenBLAS, and DISTSDFG_BLAS=mkl
    falls back to OpenBLAS with a warning naming the install command; `distsdfg info` says the same."""
    if blas.blas_openblas.find()[0] is None:
        pytest.skip("no OpenBLAS here")
    from distsdfg.launch import info as report
    before = blas.info()
    monkeypatch.setattr(blas, "find_mkl", lambda: (None, f"no libmkl_rt (the mkl wheel) under /x: {blas.MKL_FIX}"))
    try:
        monkeypatch.delenv(blas.BACKEND_ENV, raising=False)
        assert blas.configure(force=True).implementation == "OpenBLAS"
        assert dict(report.rows())["Intel MKL"] == f"not installed (optional: {blas.MKL_FIX})"
        monkeypatch.setenv(blas.BACKEND_ENV, "mkl")
        with pytest.warns(RuntimeWarning, match=r"mkl asked for but not usable.*pip install 'distsdfg\[mkl\]'"):
            assert blas.configure(force=True).implementation == "OpenBLAS"
    finally:
        monkeypatch.undo()
        blas.configure({"OpenBLAS": "openblas", "MKL": "mkl"}.get(before.implementation), force=True)


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


@pytest.mark.parametrize("name", ["openblas", "mkl"])
@pytest.mark.parametrize("k", [1, 2])
def test_threads_reach_the_blas_and_openmp(name, k):
    """In a fresh process, DISTSDFG_THREADS_PER_RANK=k gives the BLAS k threads (OpenBLAS: read at its
    load; MKL: its sequential or GNU OpenMP layer), loaded the way a built program loads it, and OpenMP k."""
    if (blas.blas_openblas.find() if name == "openblas" else blas.find_mkl())[0] is None:
        pytest.skip(f"no {name} here")
    if name == "openblas" and (os.cpu_count() or 1) < k:
        pytest.skip("OpenBLAS caps its threads at the number of cores")
    code = ("import ctypes, os, distsdfg\nfrom distsdfg.lowering import blas\nblas.use_threads(blas.threads_per_rank())\n"
            "lib = ctypes.CDLL(blas.info().library)\ngomp = ctypes.CDLL('libgomp.so.1')\n"
            "n = lib.MKL_Get_Max_Threads() if blas.info().implementation == 'MKL' else "
            "lib.scipy_openblas_get_num_threads()\n"
            "print(blas.info().implementation, os.environ['MKL_THREADING_LAYER'] if blas.info().implementation == 'MKL' "
            "else '-', n, gomp.omp_get_max_threads())\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               DISTSDFG_THREADS_PER_RANK=str(k), DISTSDFG_BLAS=name)
    for var in ("MKL_THREADING_LAYER", "OPENBLAS_NUM_THREADS"):
        env.pop(var, None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    impl, layer, blas_threads, omp_threads = r.stdout.split()
    assert impl == {"openblas": "OpenBLAS", "mkl": "MKL"}[name]
    assert layer == ("-" if name == "openblas" else "SEQUENTIAL" if k == 1 else "GNU")
    assert int(blas_threads) == k and int(omp_threads) == k


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_compiled_products_match_numpy(backend):
    """Built on one rank with each backend: GEMM (MatMul, einsum), GEMV, dot, a batched product and a
    Cholesky factorization (LAPACK) call the backend's library and agree with NumPy to 1e-10."""
    @dace.program
    def products(A: dace.float64[M, K], B: dace.float64[K, N], x: dace.float64[K], X: dace.float64[3, M, K],
                 Y: dace.float64[3, K, N], S: dace.float64[N, N]):
        return np.einsum("ik,kj->ij", A, B) + A @ B, A @ x, x @ x, X @ Y, np.linalg.cholesky(S)
    sizes = dict(M=7, N=5, K=6)
    rng = np.random.default_rng(1)
    A, B, x = rng.random((7, 6)), rng.random((6, 5)), rng.random(6)
    X, Y, S = rng.random((3, 7, 6)), rng.random((3, 6, 5)), rng.random((5, 5))
    S = S @ S.T + 5 * np.eye(5)
    sdfg = products.to_sdfg()
    sdfg.name = f"blas_products_{backend.implementation.lower()}"
    code = _generated_code(sdfg)
    assert "cblas_dgemm(" in code and "cblas_dgemv(" in code and "cblas_ddot(" in code
    fn = sdfg.compile()
    got = fn(A=A, B=B, x=x, X=X, Y=Y, S=S.copy(), **sizes)
    want = (2 * (A @ B), A @ x, x @ x, X @ Y, np.linalg.cholesky(S))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g).reshape(np.shape(w)), w, rtol=1e-10, atol=1e-12)
    with open(os.path.join(sdfg.build_folder, "build", "CMakeCache.txt")) as f:
        cmake = f.read()
    linked = os.path.basename(backend.library if backend.implementation == "OpenBLAS" else backend.source)
    assert linked.split(".so")[0] in cmake


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
