/* Matrix-vector products (cblas_?gemv) for programs built with OpenBLAS.
 *
 * A GEMV reads its matrix once and does two flops per element: its time is the time to stream the
 * matrix from memory. OpenBLAS's single-threaded kernels reach about 80% of that on the machines
 * we measure; these loops (four rows or columns per pass, SIMD over the other index) reach what a
 * plain read of the matrix takes. They serve the unit-stride, one-thread case; every other call
 * (strided vectors, several OpenBLAS threads, empty sizes) goes to OpenBLAS unchanged.
 *
 * Included by the cblas.h shim that lowering/blas_openblas.py writes, after OpenBLAS's cblas.h. */
#ifndef DISTSDFG_GEMV_H
#define DISTSDFG_GEMV_H

#ifdef __cplusplus
#include <cstddef>

namespace distsdfg_blas {

/* Rows first .. first+3 of a row-major matrix with leading dimension lda. */
template <typename T>
struct Rows4 {
    const T* r[4];
};
template <typename T>
static inline Rows4<T> rows4(const T* A, int first, int lda) {
    const T* a0 = A + (std::size_t)first * lda;
    return {{a0, a0 + lda, a0 + 2 * (std::size_t)lda, a0 + 3 * (std::size_t)lda}};
}

/* y[i] = alpha * sum_k A[i*lda + k] * x[k] + beta * y[i], for i < n, k < len (rows of A, dot products). */
template <typename T>
static inline void gemv_rows(int n, int len, T alpha, const T* __restrict A, int lda, const T* __restrict x, T beta,
                             T* __restrict y) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const Rows4<T> a = rows4(A, i, lda);
        const T *a0 = a.r[0], *a1 = a.r[1], *a2 = a.r[2], *a3 = a.r[3];
        T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
        for (int k = 0; k < len; ++k) {
            const T xk = x[k];
            s0 += a0[k] * xk;
            s1 += a1[k] * xk;
            s2 += a2[k] * xk;
            s3 += a3[k] * xk;
        }
        const T s[4] = {s0, s1, s2, s3};
        for (int r = 0; r < 4; ++r) y[i + r] = (beta == T(0) ? T(0) : beta * y[i + r]) + alpha * s[r];
    }
    for (; i < n; ++i) {
        const T* a = A + (std::size_t)i * lda;
        T s = 0;
#pragma omp simd reduction(+ : s)
        for (int k = 0; k < len; ++k) s += a[k] * x[k];
        y[i] = (beta == T(0) ? T(0) : beta * y[i]) + alpha * s;
    }
}

/* y[j] = alpha * sum_k x[k] * A[k*lda + j] + beta * y[j], for j < n, k < len (columns of A, row updates). */
template <typename T>
static inline void gemv_cols(int n, int len, T alpha, const T* __restrict A, int lda, const T* __restrict x, T beta,
                             T* __restrict y) {
    if (beta == T(0)) {
        for (int j = 0; j < n; ++j) y[j] = T(0);
    } else if (beta != T(1)) {
        for (int j = 0; j < n; ++j) y[j] *= beta;
    }
    int k = 0;
    for (; k + 4 <= len; k += 4) {
        const Rows4<T> a = rows4(A, k, lda);
        const T *a0 = a.r[0], *a1 = a.r[1], *a2 = a.r[2], *a3 = a.r[3];
        const T x0 = alpha * x[k], x1 = alpha * x[k + 1], x2 = alpha * x[k + 2], x3 = alpha * x[k + 3];
#pragma omp simd
        for (int j = 0; j < n; ++j) y[j] += a0[j] * x0 + a1[j] * x1 + a2[j] * x2 + a3[j] * x3;
    }
    for (; k < len; ++k) {
        const T* a = A + (std::size_t)k * lda;
        const T xk = alpha * x[k];
#pragma omp simd
        for (int j = 0; j < n; ++j) y[j] += a[j] * xk;
    }
}

/* cblas_?gemv's contract: op(A) is m x n (A stored in ``order`` with leading dimension lda). */
template <typename T, typename F>
static inline void gemv(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE trans, blasint m, blasint n, T alpha,
                        const T* A, blasint lda, const T* x, blasint incx, T beta, T* y, blasint incy, F openblas) {
    if (incx != 1 || incy != 1 || m <= 0 || n <= 0 || trans == CblasConjTrans || trans == CblasConjNoTrans ||
        scipy_openblas_get_num_threads() > 1) {
        openblas(order, trans, m, n, alpha, A, lda, x, incx, beta, y, incy);
        return;
    }
    const bool rows = (order == CblasRowMajor) == (trans == CblasNoTrans);
    const int outs = trans == CblasNoTrans ? m : n;   /* y's length */
    const int len = trans == CblasNoTrans ? n : m;    /* x's length */
    if (rows)
        gemv_rows<T>(outs, len, alpha, A, lda, x, beta, y);
    else
        gemv_cols<T>(outs, len, alpha, A, lda, x, beta, y);
}

static inline void dgemv(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE trans, blasint m, blasint n, double alpha,
                         const double* A, blasint lda, const double* x, blasint incx, double beta, double* y,
                         blasint incy) {
    gemv<double>(order, trans, m, n, alpha, A, lda, x, incx, beta, y, incy, scipy_cblas_dgemv);
}

static inline void sgemv(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE trans, blasint m, blasint n, float alpha,
                         const float* A, blasint lda, const float* x, blasint incx, float beta, float* y,
                         blasint incy) {
    gemv<float>(order, trans, m, n, alpha, A, lda, x, incx, beta, y, incy, scipy_cblas_sgemv);
}

}  // namespace distsdfg_blas

#endif  /* __cplusplus */
#endif  /* DISTSDFG_GEMV_H */
