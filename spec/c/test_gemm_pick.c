/*
 * test_gemm_pick.c — the CPU backend's products against a reference
 * triple loop in double, on every path a product can take
 * (src/cpu/gemm_pick.h): OpenBLAS forced, BLIS forced (when libblis.so.4
 * is installed), and the per-shape pick by measurement, both through
 * tgl_gemm_run directly and through the backend's gemm (which splits
 * large products over two threads).  Random shapes include thin, odd and
 * empty extents, all four transposes, padded leading dimensions, alpha
 * 0 / 1 / -0.75 and beta 0 over NaN / 1 / 0.5, float32 and float64.
 * Also: the pick's choices go to the cache file with one parsable line
 * per measured shape.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <cmocka.h>

#include "tgl.h"
#include "cpu/backend_cpu.h"
#include "cpu/gemm_pick.h"
#include "engine/tune.h"

static uint64_t rng = 88172645463325252ull;
static int rnd(int n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (int)(rng % (uint64_t)n);
}

/* extents: thin, odd, empty and the sizes around the kernels' blocking */
static int extent(void)
{
    static const int e[] = {0, 1, 2, 3, 5, 7, 8, 9, 10, 16, 17, 31, 33, 60, 64, 100};
    return e[rnd((int)(sizeof e / sizeof *e))];
}

/* One product on one path, checked against the reference.  path 0:
 * tgl_gemm_run on `lib`; path 1: the backend's gemm (pick + split). */
static void check_one(int dtype, int path, tgl_gemm_lib lib, bool ta, bool tb, int m, int n,
                      int k, double alpha, int beta_kind)
{
    static const double betas[] = {0.0, 1.0, 0.5};
    double beta = betas[beta_kind];
    int pad = rnd(3);
    int ra = ta ? k : m, ca = ta ? m : k, rb = tb ? n : k, cb = tb ? k : n;
    int lda = (ca > 0 ? ca : 1) + pad, ldb = (cb > 0 ? cb : 1) + pad, ldc = (n > 0 ? n : 1) + pad;
    size_t es = dtype == TGL_FLOAT32 ? 4 : 8;
    size_t na = (size_t)(ra > 0 ? ra : 1) * lda, nb = (size_t)(rb > 0 ? rb : 1) * ldb;
    size_t nc = (size_t)(m > 0 ? m : 1) * ldc;
    double *A = malloc(na * 8), *B = malloc(nb * 8), *C0 = malloc(nc * 8);
    char *a = malloc(na * es), *b = malloc(nb * es), *c = malloc(nc * es);
    assert_non_null(A), assert_non_null(B), assert_non_null(C0);
    assert_non_null(a), assert_non_null(b), assert_non_null(c);
    for (size_t i = 0; i < na; i++)
        A[i] = (double)(rnd(2001) - 1000) / 512.0;
    for (size_t i = 0; i < nb; i++)
        B[i] = (double)(rnd(2001) - 1000) / 512.0;
    for (size_t i = 0; i < nc; i++)
        C0[i] = beta_kind == 0 ? NAN : (double)(rnd(2001) - 1000) / 256.0;
    for (size_t i = 0; i < na; i++)
        dtype == TGL_FLOAT32 ? (void)(((float *)a)[i] = (float)A[i]) : (void)(((double *)a)[i] = A[i]);
    for (size_t i = 0; i < nb; i++)
        dtype == TGL_FLOAT32 ? (void)(((float *)b)[i] = (float)B[i]) : (void)(((double *)b)[i] = B[i]);
    for (size_t i = 0; i < nc; i++)
        dtype == TGL_FLOAT32 ? (void)(((float *)c)[i] = (float)C0[i]) : (void)(((double *)c)[i] = C0[i]);
    if (path == 0)
        tgl_gemm_run(lib, dtype, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else
        assert_int_equal(tgl_backend_cpu.gemm(dtype, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta,
                                              c, ldc, NULL),
                         TGL_OK);
    double eps = dtype == TGL_FLOAT32 ? 1.2e-7 : 2.3e-16;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < ldc; j++) {
            double got = dtype == TGL_FLOAT32 ? ((float *)c)[i * ldc + j] : ((double *)c)[i * ldc + j];
            if (j >= n) { /* the padding is never written */
                double was = C0[(size_t)i * ldc + j];
                if (isnan(was))
                    assert_true(isnan(got));
                else
                    assert_true(got == (dtype == TGL_FLOAT32 ? (double)(float)was : was));
                continue;
            }
            double s = 0, mag = 0;
            for (int p = 0; p < k; p++) {
                double x = ta ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p];
                double y = tb ? B[(size_t)j * ldb + p] : B[(size_t)p * ldb + j];
                s += x * y, mag += fabs(x * y);
            }
            double want = alpha * s, c0 = C0[(size_t)i * ldc + j];
            mag = fabs(alpha) * mag;
            if (beta != 0)
                want += beta * c0, mag += fabs(beta * c0);
            if (!(fabs(got - want) <= 4 * eps * (k + 2) * (mag + 1e-30))) {
                fprintf(stderr, "path %d lib %d dtype %d %c%c m %d n %d k %d alpha %g beta %g: "
                        "c[%d,%d] = %.17g, want %.17g\n", path, (int)lib, dtype, ta ? 'T' : 'N',
                        tb ? 'T' : 'N', m, n, k, alpha, beta, i, j, got, want);
                fail();
            }
        }
    free(A), free(B), free(C0), free(a), free(b), free(c);
}

static void random_products(int path, tgl_gemm_lib lib, int count)
{
    static const double alphas[] = {1.0, 0.0, -0.75};
    for (int t = 0; t < count; t++) {
        int dtype = rnd(2) ? TGL_FLOAT32 : TGL_FLOAT64;
        check_one(dtype, path, lib, rnd(2), rnd(2), extent(), extent(), extent(),
                  alphas[rnd(3)], rnd(3));
    }
}

static void test_openblas(void **state)
{
    (void)state;
    random_products(0, TGL_GEMM_OPENBLAS, 400);
}

static void test_blis(void **state)
{
    (void)state;
    if (!tgl_gemm_blis_loaded()) {
        fprintf(stderr, "test_gemm_pick: BLIS not loaded, its path not tested (%s)\n",
                tgl_gemm_pick_info());
        return;
    }
    random_products(0, TGL_GEMM_BLIS, 400);
}

/* Through the backend: the pick measures each new shape (forced off and
 * on too), large products split in two blocks (blas.split_gemm
 * overridden to 0: every product that can split does, unmeasured). */
static void test_backend(void **state)
{
    (void)state;
    tgl_backend_cpu.set_threads(2);
    char why[200];
    assert_int_equal(tgl_tune_override("blas.split_gemm=0", why, sizeof why), 0);
    for (int force = -1; force <= 1; force++) {
        tgl_gemm_pick_force(force);
        random_products(1, TGL_GEMM_OPENBLAS, 150);
        /* split products (past the split threshold on every machine's
         * fallback: 4M multiply-adds) */
        for (int t = 0; t < 4; t++)
            check_one(t & 1 ? TGL_FLOAT64 : TGL_FLOAT32, 1, TGL_GEMM_OPENBLAS, t & 1, t >> 1,
                      300 + rnd(3), 160 + rnd(5), 100, -0.75, t % 3);
    }
    tgl_gemm_pick_force(-1);
    assert_int_equal(tgl_tune_override("", why, sizeof why), 0);
    tgl_backend_cpu.set_threads(1);
}

/* The cache file's path, from tgl_gemm_pick_info ("... (/path)"); "" when
 * BLIS is not loaded (the info then names no file). */
static void cache_path(char *path, size_t size)
{
    const char *info = tgl_gemm_pick_info();
    const char *p = strstr(info, "(/");
    path[0] = 0;
    if (!p)
        return;
    snprintf(path, size, "%s", p + 1);
    char *end = strrchr(path, ')');
    assert_non_null(end);
    *end = 0;
}

/* How many lines of the cache file record this shape with `blocks`, each
 * one's choice checked against `want`. */
static int cached_lines(const char *path, int dtype, int ta, int tb, int acc, int m, int n, int k,
                        int blocks, const char *want1, const char *want2)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[256], name[16];
    int dt, a, b, c, mm, nn, kk, nb, found = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%d %d %d %d %d %d %d %d %15s", &dt, &a, &b, &c, &mm, &nn, &kk, &nb,
                   name) == 9 &&
            dt == dtype && a == ta && b == tb && c == acc && mm == m && nn == n && kk == k &&
            nb == blocks) {
            found++;
            assert_true(strcmp(name, want1) == 0 || strcmp(name, want2) == 0);
        }
    fclose(f);
    return found;
}

/* The split choice: a product between blas.split_gemm and 256 times it
 * is measured once per shape (whole against split, as in a step), the
 * choice is remembered (the same answer again, one line in the cache
 * file), and the result is right whichever way it runs, with beta 0 and
 * with beta 1 (a separate choice). */
static void test_split_choice(void **state)
{
    (void)state;
    tgl_backend_cpu.set_threads(2);
    tgl_tune_set(TGL_TUNE_BLAS_SPLIT_GEMM, 20000, "test");
    for (int acc = 0; acc <= 1; acc++) {
        /* 40 x 50 x 30 = 60000 multiply-adds: between the two bounds */
        for (int rep = 0; rep < 3; rep++)
            check_one(TGL_FLOAT32, 1, TGL_GEMM_OPENBLAS, rep & 1, false, 40, 50, 30, 1.0,
                      acc);
        bool first = tgl_gemm_split_pays(TGL_FLOAT32, false, false, acc, 40, 50, 30, 2, NULL,
                                         NULL);
        assert_int_equal(tgl_gemm_split_pays(TGL_FLOAT32, false, false, acc, 40, 50, 30, 2, NULL,
                                             NULL),
                         first);
        char path[1200];
        cache_path(path, sizeof path);
        if (path[0])
            assert_int_equal(cached_lines(path, TGL_FLOAT32, 0, 0, acc, 40, 50, 30, 2, "one",
                                          "split"),
                             1);
    }
    /* random shapes inside the band (threshold 2000 multiply-adds), all
     * four transposes, beta 0 / 1 / 0.5, both dtypes: each is measured
     * once, then runs whichever way it was chosen, against double sums */
    tgl_tune_set(TGL_TUNE_BLAS_SPLIT_GEMM, 2000, "test");
    for (int t = 0; t < 24; t++)
        check_one(t & 1 ? TGL_FLOAT64 : TGL_FLOAT32, 1, TGL_GEMM_OPENBLAS, rnd(2), rnd(2),
                  33 + rnd(60), 33 + rnd(60), 2 + rnd(40), t % 3 ? 1.0 : -0.75, rnd(3));
    tgl_tune_set(TGL_TUNE_BLAS_SPLIT_GEMM, tgl_tune_fallback(TGL_TUNE_BLAS_SPLIT_GEMM), "test");
    tgl_backend_cpu.set_threads(1);
}

/* The cache file: one parsable line per shape the pick measured. */
static void test_cache_file(void **state)
{
    (void)state;
    if (!tgl_gemm_blis_loaded())
        return;
    tgl_gemm_pick_force(-1);
    for (int acc = 0; acc <= 1; acc++) {
        tgl_gemm_lib lib = tgl_gemm_pick(TGL_FLOAT32, true, false, acc, 37, 29, 13);
        assert_true(lib == TGL_GEMM_OPENBLAS || lib == TGL_GEMM_BLIS);
        /* a second call does not measure again: same answer */
        assert_int_equal(tgl_gemm_pick(TGL_FLOAT32, true, false, acc, 37, 29, 13), lib);
        char path[1200];
        cache_path(path, sizeof path);
        assert_true(path[0] != 0);
        const char *name = lib == TGL_GEMM_BLIS ? "blis" : "openblas";
        assert_true(cached_lines(path, TGL_FLOAT32, 1, 0, acc, 37, 29, 13, 0, name, name) >= 1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_openblas),
        cmocka_unit_test(test_blis),
        cmocka_unit_test(test_backend),
        cmocka_unit_test(test_split_choice),
        cmocka_unit_test(test_cache_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
