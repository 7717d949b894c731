/*
 * blas_thin.h — level-2 BLAS kernels for thin matrices (blas_thin.c), where
 * OpenBLAS's per-row or per-column calls cost more than the arithmetic:
 * the rank-1 update of a matrix with few columns (a weight gradient at
 * batch 1 feeding 10 classes) and the transposed product with few output
 * columns.  The CPU backend calls them instead of OpenBLAS for those
 * shapes only (backend_cpu.c decides).
 */
#ifndef TGL_CPU_BLAS_THIN_H
#define TGL_CPU_BLAS_THIN_H

#include <stdint.h>

/* Widest row the kernels take (they keep one row of y or of the result on
 * the stack). */
#define TGL_THIN_MAX_COLS 128

/* a[i, j] += alpha x[i] y[j] for i < m, j < n (row-major, row stride lda);
 * n <= TGL_THIN_MAX_COLS. */
void tgl_thin_sger(int m, int n, float alpha, const float *x, int64_t incx, const float *y,
                   int64_t incy, float *a, int64_t lda);
void tgl_thin_dger(int m, int n, double alpha, const double *x, int64_t incx, const double *y,
                   int64_t incy, double *a, int64_t lda);

/* y[j] = alpha sum_i a[i, j] x[i] + beta y[j] for j < n, i < m (a row-major
 * m x n, row stride lda); n <= TGL_THIN_MAX_COLS.  beta == 0 ignores y's
 * old contents (NaN included), as BLAS does. */
void tgl_thin_sgemv_t(int m, int n, float alpha, const float *a, int64_t lda, const float *x,
                      int64_t incx, float beta, float *y, int64_t incy);
void tgl_thin_dgemv_t(int m, int n, double alpha, const double *a, int64_t lda,
                      const double *x, int64_t incx, double beta, double *y, int64_t incy);

/* Tests: nonzero makes every call take the portable loops (never the
 * AVX-512 versions), 0 goes back to picking by the processor. */
void tgl_thin_portable(int on);

#endif /* TGL_CPU_BLAS_THIN_H */
