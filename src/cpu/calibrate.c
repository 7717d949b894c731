/*
 * calibrate.c — the CPU backend's measured thresholds (engine/tune.h):
 * where splitting a product over two threads starts to pay
 * (blas.split_gemm, blas.split_level2), the widest transposed gemv that
 * blas_thin.c does faster than OpenBLAS (blas.thin_gemv_cols), and the
 * backend's tune entry (backend.h), which registers these with the
 * measurements of the rooms the backend runs on (the kernels' parallel
 * cutoff in src/cgen/launch.c, the pool's spin in src/engine/pool.c) and
 * loads this machine's record from the kernel cache, measuring it first
 * when there is none.
 *
 * Every measurement compares the two ways side by side, interleaved, by
 * medians (tgl_tune_time2), on float32 (the default floatX), along a
 * ladder of sizes that stops as soon as the answer is clear.  The split
 * variants run exactly as backend_cpu.c splits: blocks of rows, each one
 * single-threaded BLAS call, on a pool of tgl's.
 */
#include "cpu/backend_cpu.h"
#include "cpu/blas_thin.h"
#include "cgen/cgen.h"
#include "cgen/cgint.h"
#include "engine/pool.h"
#include "engine/tune.h"

#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char *openblas_get_config(void);
extern char *openblas_get_corename(void);
extern void openblas_set_num_threads(int n);

/* The BLAS the measurements are for: library, build and the kernel it
 * picked for this CPU (the thread count is not part of it). */
static char blas_text[300];

static void blas_fill(void)
{
    const char *config = openblas_get_config();
    snprintf(blas_text, sizeof blas_text, "%s%s (core %s)",
             strncmp(config, "OpenBLAS ", 9) == 0 ? "" : "OpenBLAS ", config,
             openblas_get_corename());
}

static const char *blas_name(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, blas_fill);
    return blas_text;
}

/* ---- the products' split ---------------------------------------------- */

typedef struct bench bench;
struct bench {
    float *a, *b, *c;
    struct tgl_pool *pool;
    int64_t s;                                             /* the run's size */
    void (*rows)(const bench *w, int64_t lo, int64_t hi); /* the product    */
};

/* sgemm on rows [lo, hi) of an s x s x s product. */
static void gemm_rows(const bench *w, int64_t lo, int64_t hi)
{
    int s = (int)w->s;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(hi - lo), s, s, 1.0f,
                w->a + lo * s, s, w->b, s, 0.0f, w->c + lo * s, s);
}

/* sgemv (y = A x, A s x s) on rows [lo, hi). */
static void gemv_rows(const bench *w, int64_t lo, int64_t hi)
{
    int s = (int)w->s;
    cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)(hi - lo), s, 1.0f, w->a + lo * s, s, w->b, 1,
                0.0f, w->c + lo, 1);
}

/* Half the rows on pool thread t. */
static void rows_task(void *arg, int t)
{
    const bench *w = arg;
    w->rows(w, w->s * t / 2, w->s * (t + 1) / 2);
}

/* tgl_tune_crossover's run: variant 0 all rows on this thread, 1 in two
 * blocks of rows on two threads. */
static void rows_run(void *arg, int variant, int64_t s)
{
    bench *w = arg;
    w->s = s;
    if (variant == 0)
        w->rows(w, 0, s);
    else
        tgl_pool_run_in(&w->pool, 2, 2, rows_task, w);
}

/* Buffers of n floats each for a, b, c (filled), or false. */
static bool bench_alloc(bench *w, int64_t n)
{
    memset(w, 0, sizeof *w);
    w->a = malloc((size_t)n * sizeof(float));
    w->b = malloc((size_t)n * sizeof(float));
    w->c = malloc((size_t)n * sizeof(float));
    if (!w->a || !w->b || !w->c)
        return false;
    for (int64_t i = 0; i < n; i++) {
        w->a[i] = (float)(i % 13) * 0.125f;
        w->b[i] = (float)(i % 5) * 0.25f;
        w->c[i] = 0;
    }
    return true;
}

static void bench_free(bench *w)
{
    tgl_pool_release(&w->pool);
    free(w->a);
    free(w->b);
    free(w->c);
}

/* The work (sizes[i]^power) from which `rows` on s x s operands, in two
 * blocks of rows on two threads, beats one call on one; -1 on one CPU or
 * out of memory.  OpenBLAS runs one thread per call, as tgl runs it. */
static int64_t measure_split(const int64_t *sizes, int n, int power,
                             void (*rows)(const bench *, int64_t, int64_t))
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        return -1;
    int64_t *work = malloc(sizeof *work * (size_t)n);
    if (!work)
        return -1;
    for (int i = 0; i < n; i++) {
        work[i] = 1;
        for (int p = 0; p < power; p++)
            work[i] *= sizes[i];
    }
    openblas_set_num_threads(1);
    bench w;
    int64_t v = -1;
    if (bench_alloc(&w, sizes[n - 1] * sizes[n - 1])) {
        w.rows = rows;
        v = tgl_tune_crossover(rows_run, &w, sizes, work, n);
    }
    bench_free(&w);
    free(work);
    return v;
}

/* blas.split_gemm: multiply-adds from which an s x s x s sgemm split in
 * rows over two threads beats one call on one. */
static int64_t measure_split_gemm(void)
{
    static const int64_t sizes[] = {32, 48, 64, 96, 128, 160, 192, 256, 320};
    return measure_split(sizes, (int)(sizeof sizes / sizeof sizes[0]), 3, gemm_rows);
}

/* blas.split_level2: matrix elements from which an s x s sgemv split in
 * rows over two threads beats one call on one. */
static int64_t measure_split_level2(void)
{
    static const int64_t sizes[] = {64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048};
    return measure_split(sizes, (int)(sizeof sizes / sizeof sizes[0]), 2, gemv_rows);
}

/* ---- the thin transposed gemv ------------------------------------------- */

enum { THIN_ROWS = 512 };

/* y = A' x with A THIN_ROWS x cols: variant 0 OpenBLAS, 1 blas_thin. */
static void thin_run(void *arg, int variant, int64_t cols)
{
    bench *w = arg;
    int c = (int)cols;
    if (variant == 0)
        cblas_sgemv(CblasRowMajor, CblasTrans, THIN_ROWS, c, 1.0f, w->a, c, w->b, 1, 0.0f, w->c,
                    1);
    else
        tgl_thin_sgemv_t(THIN_ROWS, c, 1.0f, w->a, c, w->b, 1, 0.0f, w->c, 1);
}

/* blas.thin_gemv_cols: the widest transposed gemv (of 512 rows) up to
 * which blas_thin beats OpenBLAS: the ladder stops at the second loss in a
 * row; 0 when it loses from the start. */
static int64_t measure_thin_cols(void)
{
    static const int64_t cols[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, TGL_THIN_MAX_COLS};
    enum { N = sizeof cols / sizeof cols[0] };
    openblas_set_num_threads(1);
    bench w;
    int64_t best = 0;
    if (bench_alloc(&w, THIN_ROWS * TGL_THIN_MAX_COLS)) {
        int losses = 0;
        for (int i = 0; i < N && losses < 2; i++) {
            double ns[2];
            tgl_tune_time2(thin_run, &w, cols[i], 7, ns);
            if (ns[1] < ns[0]) {
                best = cols[i];
                losses = 0;
            } else {
                losses++;
            }
        }
    }
    bench_free(&w);
    return best;
}

/* ---- the backend's tune entry ------------------------------------------- */

static void register_all(void)
{
    tgl_tune_register_blas(blas_name);
    tgl_tune_register(TGL_TUNE_BLAS_SPLIT_GEMM, measure_split_gemm);
    tgl_tune_register(TGL_TUNE_BLAS_SPLIT_LEVEL2, measure_split_level2);
    tgl_tune_register(TGL_TUNE_BLAS_THIN_COLS, measure_thin_cols);
    tgl_cgen_tune_register();
    tgl_pool_tune_register();
}

void tgl_cpu_tune(const tgl_backend_opts *o, bool force)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_all);
    char dir[1024];
    bool ok = tgl_cache_dir(o ? o->cache_dir : NULL, dir, sizeof dir) == 0;
    tgl_tune_load(ok ? dir : NULL, force);
}
