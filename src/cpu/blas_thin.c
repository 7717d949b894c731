/*
 * blas_thin.c — level-2 BLAS kernels for thin matrices (blas_thin.h).  Plain loops the
 * compiler vectorises along the short rows, built for AVX2 and the baseline
 * (target_clones, picked at load time), and on x86-64 AVX-512 versions
 * whose short rows are masked vectors (picked at run time by the
 * processor's features): the library never assumes the machine it runs on.
 *
 * Why not OpenBLAS: a row-major rank-1 update with 10 columns is, to
 * column-major OpenBLAS, 784 axpy calls of length 10; at batch 1 the
 * update of a 784x10 weight matrix took 3.8 us there and 1.5 us here (the
 * logistic regression's whole step was ~10 us).
 */
#include "cpu/blas_thin.h"

/* Not under ThreadSanitizer: the clones' resolvers (ifuncs) run while
 * the loader relocates the library, before TSan's runtime is set up,
 * and its instrumentation of them crashes the process at load. */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__has_attribute) && \
    !defined(__SANITIZE_THREAD__)
#if __has_attribute(target_clones)
#define THIN_CLONES __attribute__((target_clones("avx2", "default")))
#define THIN_AVX512 1
#include <immintrin.h>
#endif
#endif
#ifndef THIN_CLONES
#define THIN_CLONES
#endif

/* The portable kernels, one definition per element type (T the type, S
 * the BLAS-style prefix), vectorised by the compiler along the rows. */
#define THIN_KERNELS(T, S)                                                                   \
    THIN_CLONES static void S##ger_loop(int m, int n, T alpha, const T *x, int64_t incx,     \
                                       const T *y, int64_t incy, T *a, int64_t lda)        \
    {                                                                                        \
        T yy[TGL_THIN_MAX_COLS];                                                             \
        for (int j = 0; j < n; j++)                                                          \
            yy[j] = alpha * y[j * incy];                                                     \
        for (int i = 0; i < m; i++) {                                                        \
            T xi = x[i * incx];                                                              \
            T *restrict row = a + i * lda;                                                   \
            for (int j = 0; j < n; j++)                                                      \
                row[j] += xi * yy[j];                                                        \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    THIN_CLONES static void S##gemv_t_loop(int m, int n, T alpha, const T *a, int64_t lda,   \
                                          const T *x, int64_t incx, T beta, T *y,          \
                                          int64_t incy)                                     \
    {                                                                                        \
        T acc[TGL_THIN_MAX_COLS];                                                            \
        for (int j = 0; j < n; j++)                                                          \
            acc[j] = 0;                                                                      \
        int i = 0;                                                                           \
        /* four rows at a time: one pass over acc per four rows of a */                     \
        for (; i + 4 <= m; i += 4) {                                                         \
            T x0 = x[i * incx], x1 = x[(i + 1) * incx];                                      \
            T x2 = x[(i + 2) * incx], x3 = x[(i + 3) * incx];                                \
            const T *r0 = a + i * lda, *r1 = r0 + lda, *r2 = r1 + lda, *r3 = r2 + lda;       \
            for (int j = 0; j < n; j++)                                                      \
                acc[j] += x0 * r0[j] + x1 * r1[j] + x2 * r2[j] + x3 * r3[j];                 \
        }                                                                                    \
        for (; i < m; i++) {                                                                 \
            T xi = x[i * incx];                                                              \
            const T *r0 = a + i * lda;                                                       \
            for (int j = 0; j < n; j++)                                                      \
                acc[j] += xi * r0[j];                                                        \
        }                                                                                    \
        for (int j = 0; j < n; j++)                                                          \
            y[j * incy] = alpha * acc[j] + (beta == 0 ? (T)0 : beta * y[j * incy]);          \
    }

THIN_KERNELS(float, s)
THIN_KERNELS(double, d)

#ifdef THIN_AVX512
/* AVX-512: rows shorter than a vector are where the compiler's loops go
 * scalar (10 columns: no full 16-float vector), so each row is done in
 * vectors with a masked last one.  V lanes of type T; L/ST/FMA/SET1 the
 * masked load, masked store, fused multiply-add and broadcast. */
#define THIN_AVX512_KERNELS(T, S, VT, V, MT, IT, L, ST, FMA, SET1, ZERO, ADD, MUL, PERM)       \
    __attribute__((target("avx512f"))) static void S##ger_avx512(                            \
        int m, int n, T alpha, const T *x, int64_t incx, const T *y, int64_t incy, T *a,     \
        int64_t lda)                                                                         \
    {                                                                                        \
        T yy[TGL_THIN_MAX_COLS];                                                             \
        for (int j = 0; j < n; j++)                                                          \
            yy[j] = alpha * y[j * incy];                                                     \
        int i = 0;                                                                           \
        if (lda == n && n < V) {                                                             \
            /* Contiguous short rows: the matrix is one flat run, updated in              \
             * whole vectors.  R rows make nv vectors exactly (R n = nv V); per           \
             * vector, which row each lane is in (idx) and its y (ypat). */               \
            int g = V;                                                                       \
            while (n % g)                                                                    \
                g /= 2;                                                                      \
            int R = V / g, nv = n / g;                                                       \
            VT ypat[V];                                                                      \
            __m512i idx[V];                                                                  \
            for (int c = 0; c < nv; c++) {                                                   \
                IT ib[V];                                                                    \
                T yb[V];                                                                     \
                for (int l = 0; l < V; l++) {                                                \
                    ib[l] = (IT)((c * V + l) / n);                                           \
                    yb[l] = yy[(c * V + l) % n];                                             \
                }                                                                            \
                idx[c] = _mm512_loadu_si512(ib);                                             \
                ypat[c] = L(ZERO(), (MT)~0u, yb);                                            \
            }                                                                                \
            MT rk = (MT)((1u << R) - 1);                                                     \
            for (; i + R <= m; i += R) {                                                     \
                VT xv;                                                                       \
                if (incx == 1) {                                                             \
                    xv = L(ZERO(), rk, x + i);                                               \
                } else {                                                                     \
                    T xb[V] = {0};                                                           \
                    for (int r = 0; r < R; r++)                                              \
                        xb[r] = x[(i + r) * incx];                                           \
                    xv = L(ZERO(), (MT)~0u, xb);                                             \
                }                                                                            \
                T *p = a + (int64_t)i * n;                                                   \
                for (int c = 0; c < nv; c++, p += V)                                         \
                    ST(p, (MT)~0u, FMA(PERM(idx[c], xv), ypat[c], L(ZERO(), (MT)~0u, p)));   \
            }                                                                                \
        }                                                                                    \
        /* Row by row: whole vectors, then a scalar tail (a masked store                  \
         * followed by a load of the same cache line stalls the pipeline). */             \
        for (; i < m; i++) {                                                                 \
            T xi = x[i * incx];                                                              \
            VT xs = SET1(xi);                                                                \
            T *row = a + i * lda;                                                            \
            int j = 0;                                                                       \
            for (; j + V <= n; j += V)                                                       \
                ST(row + j, (MT)~0u,                                                         \
                   FMA(xs, L(ZERO(), (MT)~0u, yy + j), L(ZERO(), (MT)~0u, row + j)));         \
            for (; j < n; j++)                                                               \
                row[j] += xi * yy[j];                                                        \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    __attribute__((target("avx512f"))) static void S##gemv_t_avx512(                         \
        int m, int n, T alpha, const T *a, int64_t lda, const T *x, int64_t incx, T beta,    \
        T *y, int64_t incy)                                                                  \
    {                                                                                        \
        for (int j0 = 0; j0 < n; j0 += V) {                                                  \
            MT k = (MT)(n - j0 >= V ? (MT)~0u : (MT)((1u << (n - j0)) - 1));                 \
            /* eight independent sums: the FMAs' latency, not their                    \
             * count, bounds one long column */                                          \
            VT s0 = ZERO(), s1 = ZERO(), s2 = ZERO(), s3 = ZERO();                           \
            VT s4 = ZERO(), s5 = ZERO(), s6 = ZERO(), s7 = ZERO();                           \
            const T *p = a + j0;                                                             \
            int i = 0;                                                                       \
            for (; i + 8 <= m; i += 8, p += 8 * lda) {                                       \
                s0 = FMA(SET1(x[i * incx]), L(ZERO(), k, p), s0);                            \
                s1 = FMA(SET1(x[(i + 1) * incx]), L(ZERO(), k, p + lda), s1);                \
                s2 = FMA(SET1(x[(i + 2) * incx]), L(ZERO(), k, p + 2 * lda), s2);            \
                s3 = FMA(SET1(x[(i + 3) * incx]), L(ZERO(), k, p + 3 * lda), s3);            \
                s4 = FMA(SET1(x[(i + 4) * incx]), L(ZERO(), k, p + 4 * lda), s4);            \
                s5 = FMA(SET1(x[(i + 5) * incx]), L(ZERO(), k, p + 5 * lda), s5);            \
                s6 = FMA(SET1(x[(i + 6) * incx]), L(ZERO(), k, p + 6 * lda), s6);            \
                s7 = FMA(SET1(x[(i + 7) * incx]), L(ZERO(), k, p + 7 * lda), s7);            \
            }                                                                                \
            for (; i < m; i++, p += lda)                                                     \
                s0 = FMA(SET1(x[i * incx]), L(ZERO(), k, p), s0);                            \
            s0 = ADD(ADD(s0, s1), ADD(s2, s3));                                              \
            s4 = ADD(ADD(s4, s5), ADD(s6, s7));                                              \
            T out[V];                                                                        \
            ST(out, (MT)~0u, MUL(SET1(alpha), ADD(s0, s4)));                                 \
            for (int j = j0; j < n && j < j0 + V; j++)                                       \
                y[j * incy] = out[j - j0] + (beta == 0 ? (T)0 : beta * y[j * incy]);         \
        }                                                                                    \
    }

THIN_AVX512_KERNELS(float, s, __m512, 16, __mmask16, int32_t, _mm512_mask_loadu_ps,
                    _mm512_mask_storeu_ps, _mm512_fmadd_ps, _mm512_set1_ps, _mm512_setzero_ps,
                    _mm512_add_ps, _mm512_mul_ps, _mm512_permutexvar_ps)
THIN_AVX512_KERNELS(double, d, __m512d, 8, __mmask8, int64_t, _mm512_mask_loadu_pd,
                    _mm512_mask_storeu_pd, _mm512_fmadd_pd, _mm512_set1_pd, _mm512_setzero_pd,
                    _mm512_add_pd, _mm512_mul_pd, _mm512_permutexvar_pd)

static int have = -1; /* benign race: every thread computes the same */

static int have_avx512(void)
{
    if (have < 0)
        have = __builtin_cpu_supports("avx512f") ? 1 : 0;
    return have;
}

void tgl_thin_portable(int on)
{
    have = on ? 0 : -1;
}
#define PICK(avx512, loop) (have_avx512() ? (avx512) : (loop))
#else
#define PICK(avx512, loop) (loop)
void tgl_thin_portable(int on)
{
    (void)on;
}
#endif

void tgl_thin_sger(int m, int n, float alpha, const float *x, int64_t incx, const float *y,
                   int64_t incy, float *a, int64_t lda)
{
    PICK(sger_avx512, sger_loop)(m, n, alpha, x, incx, y, incy, a, lda);
}

void tgl_thin_dger(int m, int n, double alpha, const double *x, int64_t incx, const double *y,
                   int64_t incy, double *a, int64_t lda)
{
    PICK(dger_avx512, dger_loop)(m, n, alpha, x, incx, y, incy, a, lda);
}

void tgl_thin_sgemv_t(int m, int n, float alpha, const float *a, int64_t lda, const float *x,
                      int64_t incx, float beta, float *y, int64_t incy)
{
    PICK(sgemv_t_avx512, sgemv_t_loop)(m, n, alpha, a, lda, x, incx, beta, y, incy);
}

void tgl_thin_dgemv_t(int m, int n, double alpha, const double *a, int64_t lda,
                      const double *x, int64_t incx, double beta, double *y, int64_t incy)
{
    PICK(dgemv_t_avx512, dgemv_t_loop)(m, n, alpha, a, lda, x, incx, beta, y, incy);
}
