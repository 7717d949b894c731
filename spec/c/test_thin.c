/*
 * test_thin.c — the thin-matrix level-2 kernels (src/cpu/blas_thin.h) against
 * plain reference loops: rank-1 updates and transposed products for every
 * column count 1..TGL_THIN_MAX_COLS and row counts around the kernels'
 * blocking (the AVX-512 ger works on blocks of up to 16 rows), with padded
 * rows (lda > n), strided x and y, beta 0 over NaN, float32 and float64,
 * through both the processor's path and the portable one.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <cmocka.h>

#include "cpu/blas_thin.h"

static const int rows[] = {0, 1, 3, 4, 5, 15, 16, 17, 33, 100};

static double val(int i) { return (double)((i * 37 + 11) % 23) / 8.0 - 1.25; }

#define CHECK_TYPE(T, S, TOL)                                                                \
    static void check_##S(void)                                                              \
    {                                                                                        \
        for (int n = 1; n <= TGL_THIN_MAX_COLS; n++)                                         \
            for (size_t r = 0; r < sizeof rows / sizeof *rows; r++)                          \
                for (int layout = 0; layout < 2; layout++) {                                 \
                    int m = rows[r];                                                         \
                    int64_t lda = layout ? n + 3 : n, inc = layout ? 2 : 1;                  \
                    T *a = malloc(sizeof *a * (size_t)(m * lda + 1));                        \
                    T *ref = malloc(sizeof *a * (size_t)(m * lda + 1));                      \
                    T *x = malloc(sizeof *x * (size_t)(m * inc + 1));                        \
                    T *y = malloc(sizeof *y * (size_t)(n * inc + 1));                        \
                    T *out = malloc(sizeof *out * (size_t)(n * inc + 1));                    \
                    for (int i = 0; i < m * lda; i++)                                        \
                        a[i] = ref[i] = (T)val(i);                                           \
                    for (int i = 0; i < m * inc; i++)                                        \
                        x[i] = (T)val(i + 5);                                                \
                    for (int i = 0; i < n * inc; i++)                                        \
                        y[i] = (T)val(i + 9);                                                \
                    tgl_thin_##S##ger(m, n, (T)0.5, x, inc, y, inc, a, lda);                 \
                    for (int i = 0; i < m; i++)                                              \
                        for (int j = 0; j < (int)lda; j++) {                                 \
                            T want = ref[i * lda + j];                                       \
                            if (j < n)                                                       \
                                want += (T)0.5 * x[i * inc] * y[j * inc];                    \
                            assert_true(fabs((double)(a[i * lda + j] - want)) <= TOL);       \
                        }                                                                    \
                    for (int beta = 0; beta < 2; beta++) {                                   \
                        for (int j = 0; j < n * inc; j++)                                    \
                            out[j] = beta ? (T)val(j) : (T)NAN;                              \
                        tgl_thin_##S##gemv_t(m, n, (T)2, a, lda, x, inc, (T)beta, out, inc); \
                        for (int j = 0; j < n; j++) {                                        \
                            double want = beta ? val(j * inc) : 0;                           \
                            for (int i = 0; i < m; i++)                                      \
                                want += 2.0 * (double)a[i * lda + j] * (double)x[i * inc];   \
                            assert_true(fabs((double)out[j * inc] - want) <=                 \
                                        TOL * (1 + fabs(want)) * (m + 1));                   \
                        }                                                                    \
                    }                                                                        \
                    free(a), free(ref), free(x), free(y), free(out);                         \
                }                                                                            \
    }

CHECK_TYPE(float, s, 1e-5)
CHECK_TYPE(double, d, 1e-12)

static void kernels_match_reference_loops(void **state)
{
    (void)state;
    check_s();
    check_d();
}

static void portable_kernels_match_reference_loops(void **state)
{
    (void)state;
    tgl_thin_portable(1);
    check_s();
    check_d();
    tgl_thin_portable(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kernels_match_reference_loops),
        cmocka_unit_test(portable_kernels_match_reference_loops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
