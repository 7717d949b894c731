/*
 * backend_cpu.c — the CPU backend (engine/backend.h): host memory from
 * posix_memalign, products from OpenBLAS's CBLAS (or BLIS, per shape where
 * it measures faster: gemm_pick.c), fused kernels from the
 * code generator (src/cgen: C rendered, compiled by libtcc and the system
 * compiler, cached on disk under a key that names this backend, "cpu",
 * and this CPU's features).
 *
 * It and gemm_pick.c are the only places that name OpenBLAS; it is the only caller of cgen's
 * kernel functions; the engine sees both through tgl_backend_cpu.  The
 * ops' kernels are those of src/cpu/kernels/ (kernels.h).  The
 * kernel entries are cgen's own (src/cgen/compile.c), called directly.
 */
#include "engine/backend.h"
#include "cgen/cgen.h"

#include "engine/pool.h"
#include "engine/tune.h"
#include "cpu/blas_thin.h"
#include "cpu/gemm_pick.h"
#include "cpu/backend_cpu.h"
#include "cpu/kernels/kernels.h"

#include <cblas.h>
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenBLAS reports its build and the kernel it picked for this CPU, and
 * keeps one process-wide thread count. */
extern char *openblas_get_config(void);
extern char *openblas_get_corename(void);
extern int openblas_get_num_threads(void);
extern void openblas_set_num_threads(int n);

/* ---- memory --------------------------------------------------------------- */

static void *cpu_alloc(size_t nbytes)
{
    void *p = NULL;
    return posix_memalign(&p, TGL_ALIGN, nbytes) == 0 ? p : NULL;
}

static void cpu_free(void *p)
{
    free(p);
}

static tgl_status cpu_memset(void *p, int byte, size_t n, tgl_errbuf *err)
{
    (void)err;
    memset(p, byte, n);
    return TGL_OK;
}

/* Host to host: every copy is memmove (which also forgives overlap). */
static tgl_status cpu_copy(void *dst, const void *src, size_t n, tgl_errbuf *err)
{
    (void)err;
    memmove(dst, src, n);
    return TGL_OK;
}

/* ---- BLAS ------------------------------------------------------------------- */

/* Threads.  OpenBLAS runs on one thread, always: its own threading wakes
 * and joins its workers on every call, which costs more than it saves on
 * the thin products of small-batch training (a 1x784x500 product: 18 us on
 * one thread, 63 us on two), and its idle workers spin against ours.
 * Large products are split instead over tgl's worker pool (engine/pool.h:
 * one per process, the same threads as the generated kernels'),
 * into blocks of rows or columns, each one single-threaded BLAS call; the
 * pool's threads sleep between runs.  `split` is tgl.config.threads (all
 * online CPUs by default). */
/* From how much work a product splits: tgl_tune_get(TGL_TUNE_BLAS_SPLIT_GEMM)
 * (multiply-adds) and TGL_TUNE_BLAS_SPLIT_LEVEL2 (matrix elements, gemv
 * and ger), measured on the machine that runs (engine/tune.h). */
#define SPLIT_GEMM tgl_tune_get(TGL_TUNE_BLAS_SPLIT_GEMM)
#define SPLIT_LEVEL2 tgl_tune_get(TGL_TUNE_BLAS_SPLIT_LEVEL2)
#define MIN_BLOCK 16           /* rows or columns per block, at least         */
/* Thin shapes go to src/cpu/blas_thin.c instead of OpenBLAS (measured, one
 * thread: a 784x10 rank-1 update 3.8 -> 1.5 us, 784x64 5.3 -> 3.6 us; a
 * transposed 784x10 product 1.18 -> 0.97 us, at 64 columns no gain). */
#define THIN_GEMV_COLS tgl_tune_get(TGL_TUNE_BLAS_THIN_COLS)

static int split = 0;                /* 0: not yet set (first BLAS call)   */
static struct tgl_pool *blas_pool;   /* a slot naming the process's pool:
                                        the generated kernels' workers      */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_init(void)
{
    openblas_set_num_threads(1);
    if (!split) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        split = cpus > 0 ? (int)cpus : 1;
    }
}

/* How many blocks a product of `work` with `extent` rows (or columns) to
 * share out gets: 1 below the thresholds. */
static int blocks(int64_t work, int64_t threshold, int64_t extent)
{
    pthread_once(&blas_once, blas_init);
    int n = split;
    if (n <= 1 || work < threshold)
        return 1;
    if (extent / MIN_BLOCK < n)
        n = (int)(extent / MIN_BLOCK);
    return n > 1 ? n : 1;
}

static CBLAS_TRANSPOSE op(bool trans)
{
    return trans ? CblasTrans : CblasNoTrans;
}

typedef struct gemm_job {
    int dtype, m, n, k, lda, ldb, ldc, nblocks;
    tgl_gemm_lib lib; /* OpenBLAS or BLIS, per shape (gemm_pick.h) */
    bool ta, tb, by_rows;
    double alpha, beta;
    const char *a, *b;
    char *c;
    size_t es;
} gemm_job;

static void gemm_block(const gemm_job *j, int m, int n, const char *a, const char *b, char *c)
{
    tgl_gemm_run(j->lib, j->dtype, j->ta, j->tb, m, n, j->k, j->alpha, a, j->lda, b, j->ldb,
                 j->beta, c, j->ldc);
}

/* Block t of a split product: rows (of op(a) and c) or columns (of op(b)
 * and c) [lo, hi). */
static void gemm_task(void *arg, int t)
{
    const gemm_job *j = arg;
    int extent = j->by_rows ? j->m : j->n;
    int lo = (int)((int64_t)extent * t / j->nblocks), hi = (int)((int64_t)extent * (t + 1) / j->nblocks);
    if (hi <= lo)
        return;
    if (j->by_rows) {
        size_t a_off = (size_t)(j->ta ? lo : (int64_t)lo * j->lda);
        gemm_block(j, hi - lo, j->n, j->a + a_off * j->es, j->b,
                   j->c + (size_t)lo * (size_t)j->ldc * j->es);
    } else {
        size_t b_off = (size_t)(j->tb ? (int64_t)lo * j->ldb : lo);
        gemm_block(j, j->m, hi - lo, j->a, j->b + b_off * j->es, j->c + (size_t)lo * j->es);
    }
}

/* Runs j: picks the library for the shape each BLAS call sees (the first
 * block's when the product is split) and splits it over the pool when
 * j->nblocks > 1. */
static void gemm_exec(gemm_job *j)
{
    j->lib = tgl_gemm_pick(j->dtype, j->ta, j->tb, j->beta != 0.0,
                           j->by_rows ? j->m / j->nblocks : j->m,
                           j->by_rows ? j->n : j->n / j->nblocks, j->k);
    if (j->nblocks == 1)
        gemm_block(j, j->m, j->n, j->a, j->b, j->c);
    else
        tgl_pool_run_in(&blas_pool, split, j->nblocks, gemm_task, j);
}

/* tgl_gemm_split_fn: the product of the job's shape on gemm_pick's
 * scratch operands (contiguous), whole or in the job's blocks; beta 1
 * when the job accumulates. */
static void gemm_probe(void *arg, bool split_it, const void *a, const void *b, void *c)
{
    gemm_job j = *(const gemm_job *)arg;
    j.a = a, j.b = b, j.c = c;
    j.lda = j.ta ? j.m : j.k, j.ldb = j.tb ? j.k : j.n, j.ldc = j.n;
    j.alpha = 1.0, j.beta = j.beta != 0.0 ? 1.0 : 0.0;
    if (!split_it)
        j.nblocks = 1;
    gemm_exec(&j);
}

/* Products from SPLIT_SURE times blas.split_gemm split without asking:
 * a pool wake-up is a few microseconds, under a few percent of them. */
#define SPLIT_SURE 256

/* Whether a product that blocks() would split should: blas.split_gemm is
 * measured on cubes in a tight loop, where the pool's workers are awake
 * and hold their operands; inside a step a product between it and
 * SPLIT_SURE times it may run faster whole, which gemm_pick.c measures
 * per shape.  An override of blas.split_gemm (TGL_TUNE, tests) decides
 * alone. */
static bool split_worth(gemm_job *j, int64_t work)
{
    int64_t at = SPLIT_GEMM;
    if (at > INT64_MAX / SPLIT_SURE || work >= at * SPLIT_SURE ||
        strcmp(tgl_tune_source(TGL_TUNE_BLAS_SPLIT_GEMM), "override") == 0)
        return true;
    return tgl_gemm_split_pays(j->dtype, j->ta, j->tb, j->beta != 0.0, j->m, j->n, j->k,
                               j->nblocks, gemm_probe, j);
}

static tgl_status cpu_gemm(int dtype, bool trans_a, bool trans_b, int m, int n, int k,
                           double alpha, const void *a, int lda, const void *b, int ldb,
                           double beta, void *c, int ldc, tgl_errbuf *err)
{
    (void)err;
    gemm_job j = {dtype, m, n, k, lda, ldb, ldc, 1, TGL_GEMM_OPENBLAS, trans_a, trans_b,
                  m >= n, alpha, beta, a, b, c, tgl_dtype_size(dtype)};
    int64_t work = (int64_t)m * n * k;
    j.nblocks = blocks(work, SPLIT_GEMM, j.by_rows ? m : n);
    if (j.nblocks > 1 && !split_worth(&j, work))
        j.nblocks = 1;
    gemm_exec(&j);
    return TGL_OK;
}

typedef struct level2_job {
    int dtype, rows, cols, lda, incx, incy, nblocks;
    bool trans;
    double alpha, beta;
    const char *a, *x, *y_in;
    char *y;
    size_t es;
} level2_job;

/* y = alpha op(a) x + beta y on output elements [lo, hi): rows of a, or
 * (transposed) columns. */
static void gemv_task(void *arg, int t)
{
    const level2_job *j = arg;
    int out = j->trans ? j->cols : j->rows;
    int lo = (int)((int64_t)out * t / j->nblocks), hi = (int)((int64_t)out * (t + 1) / j->nblocks);
    if (hi <= lo)
        return;
    const char *a = j->a + (size_t)(j->trans ? lo : (int64_t)lo * j->lda) * j->es;
    char *y = j->y + (size_t)((int64_t)lo * j->incy) * j->es;
    int r = j->trans ? j->rows : hi - lo, c = j->trans ? hi - lo : j->cols;
    if (j->trans && c <= THIN_GEMV_COLS && c <= TGL_THIN_MAX_COLS && j->incx > 0 && j->incy > 0) {
        if (j->dtype == TGL_FLOAT32)
            tgl_thin_sgemv_t(r, c, (float)j->alpha, (const float *)a, j->lda,
                             (const float *)j->x, j->incx, (float)j->beta, (float *)y, j->incy);
        else
            tgl_thin_dgemv_t(r, c, j->alpha, (const double *)a, j->lda, (const double *)j->x,
                             j->incx, j->beta, (double *)y, j->incy);
        return;
    }
    if (j->dtype == TGL_FLOAT32)
        cblas_sgemv(CblasRowMajor, op(j->trans), r, c, (float)j->alpha, (const float *)a, j->lda,
                    (const float *)j->x, j->incx, (float)j->beta, (float *)y, j->incy);
    else
        cblas_dgemv(CblasRowMajor, op(j->trans), r, c, j->alpha, (const double *)a, j->lda,
                    (const double *)j->x, j->incx, j->beta, (double *)y, j->incy);
}

static tgl_status cpu_gemv(int dtype, bool trans, int rows, int cols, double alpha,
                           const void *a, int lda, const void *x, int incx, double beta, void *y,
                           int incy, tgl_errbuf *err)
{
    (void)err;
    int inner = trans ? rows : cols, outn = trans ? cols : rows;
    if (inner == 0) {
        /* y = beta y: BLAS gemv returns at once on an empty inner extent
         * (OpenBLAS does), leaving y unscaled */
        int64_t step = incy < 0 ? -(int64_t)incy : incy;
        for (int64_t k = 0; k < outn; k++) {
            if (dtype == TGL_FLOAT32) {
                float *p = (float *)y + k * step;
                *p = beta == 0.0 ? 0.0f : (float)beta * *p;
            } else {
                double *p = (double *)y + k * step;
                *p = beta == 0.0 ? 0.0 : beta * *p;
            }
        }
        return TGL_OK;
    }
    level2_job j = {dtype, rows, cols, lda, incx, incy, 1, trans, alpha, beta, a, x, NULL, y,
                    tgl_dtype_size(dtype)};
    /* blocks of the output; a negative increment keeps it whole */
    j.nblocks = incy > 0 ? blocks((int64_t)rows * cols, SPLIT_LEVEL2, trans ? cols : rows) : 1;
    if (j.nblocks == 1)
        gemv_task(&j, 0);
    else
        tgl_pool_run_in(&blas_pool, split, j.nblocks, gemv_task, &j);
    return TGL_OK;
}

/* a = a + alpha x y' on rows [lo, hi) of a. */
static void ger_task(void *arg, int t)
{
    const level2_job *j = arg;
    int lo = (int)((int64_t)j->rows * t / j->nblocks);
    int hi = (int)((int64_t)j->rows * (t + 1) / j->nblocks);
    if (hi <= lo)
        return;
    const char *x = j->x + (size_t)((int64_t)lo * j->incx) * j->es;
    char *a = (char *)j->a + (size_t)((int64_t)lo * j->lda) * j->es;
    if (j->cols <= TGL_THIN_MAX_COLS && j->incx > 0 && j->incy > 0) {
        if (j->dtype == TGL_FLOAT32)
            tgl_thin_sger(hi - lo, j->cols, (float)j->alpha, (const float *)x, j->incx,
                          (const float *)j->y_in, j->incy, (float *)a, j->lda);
        else
            tgl_thin_dger(hi - lo, j->cols, j->alpha, (const double *)x, j->incx,
                          (const double *)j->y_in, j->incy, (double *)a, j->lda);
        return;
    }
    if (j->dtype == TGL_FLOAT32)
        cblas_sger(CblasRowMajor, hi - lo, j->cols, (float)j->alpha, (const float *)x, j->incx,
                   (const float *)j->y_in, j->incy, (float *)a, j->lda);
    else
        cblas_dger(CblasRowMajor, hi - lo, j->cols, j->alpha, (const double *)x, j->incx,
                   (const double *)j->y_in, j->incy, (double *)a, j->lda);
}

static tgl_status cpu_ger(int dtype, int m, int n, double alpha, const void *x, int incx,
                          const void *y, int incy, void *a, int lda, tgl_errbuf *err)
{
    (void)err;
    level2_job j = {dtype, m, n, lda, incx, incy, 1, false, alpha, 0, a, x, y, NULL,
                    tgl_dtype_size(dtype)};
    j.nblocks = incx > 0 ? blocks((int64_t)m * n, SPLIT_LEVEL2, m) : 1;
    if (j.nblocks == 1)
        ger_task(&j, 0);
    else
        tgl_pool_run_in(&blas_pool, split, j.nblocks, ger_task, &j);
    return TGL_OK;
}

/* float32 products are summed in double here, as the backend contract
 * says: BLAS's dsdot should, but OpenBLAS's sums in float on some builds
 * (a length-1000 dot measured 5e-7 off the correctly rounded sum).
 * Negative increments walk the vector from its far end, as BLAS does. */
static tgl_status cpu_dot(int dtype, int n, const void *x, int incx, const void *y, int incy,
                          void *out, tgl_errbuf *err)
{
    (void)err;
    if (dtype == TGL_FLOAT32) {
        const float *xf = x, *yf = y;
        int64_t ix = incx < 0 ? (int64_t)(n - 1) * -incx : 0;
        int64_t iy = incy < 0 ? (int64_t)(n - 1) * -incy : 0;
        double s = 0.0;
        for (int i = 0; i < n; i++, ix += incx, iy += incy)
            s += (double)xf[ix] * (double)yf[iy];
        *(float *)out = (float)s;
    } else
        *(double *)out = cblas_ddot(n, x, incx, y, incy);
    return TGL_OK;
}

/* tgl.config.threads: the blocks large products split into (OpenBLAS
 * itself stays on one thread). */
static void cpu_set_threads(int n)
{
    split = n > 0 ? n : 1;
    pthread_once(&blas_once, blas_init);
}

static const char *cpu_info(void)
{
    /* Rebuilt on each call (the thread count may change); the strings
     * OpenBLAS returns are static.  A benign race: concurrent calls write
     * the same bytes unless the thread count changes meanwhile. */
    static char info[2048];
    pthread_once(&blas_once, blas_init);
    /* The config string already starts "OpenBLAS 0.3.21 ..." */
    const char *config = openblas_get_config();
    const char *prefix = strncmp(config, "OpenBLAS ", 9) == 0 ? "" : "OpenBLAS ";
    snprintf(info, sizeof info, "%s%s (core %s, %d threads: one per call, large products "
             "split by tgl); %s", prefix, config, openblas_get_corename(), split,
             tgl_gemm_pick_info());
    return info;
}

/* ---- op kernels --------------------------------------------------------------- */

/* The kernels of src/cpu/kernels/ (table.c: by op id) take every dtype
 * their op's infer accepts. */
static bool cpu_supports_op(const tgl_node *n)
{
    (void)n;
    return true;
}

/* ---- fused kernels ------------------------------------------------------------- */

static tgl_status cpu_prepare(const tgl_backend_opts *o, const tgl_fused_prog *prog,
                              tgl_kernel_ref **out, tgl_errbuf *err)
{
    return tgl_cgen_compile(o, &tgl_backend_cpu, prog, out, err);
}

static tgl_status cpu_upgrade(const tgl_backend_opts *o, const tgl_fused_prog *prog, tgl_kernel_ref *k,
                              tgl_errbuf *err)
{
    return tgl_cgen_upgrade(o, &tgl_backend_cpu, prog, k, err);
}

/* ---- whole steps ----------------------------------------------------------------- */

/* The step's generated C function, kept in the handle by src/cgen. */
static int cpu_step_run(tgl_kernel_ref *k, void *const *D, void *env, tgl_step_cb cb)
{
    tgl_step_fn fn = tgl_cgen_step_code(k);
    return fn ? fn(D, env, cb) : TGL_STEP_NOT_READY;
}

/* The scan loop's generated C function (src/cgen, loop_prepare). */
static int cpu_loop_run(tgl_kernel_ref *k, void **D, int64_t *L, void *env, tgl_step_cb cb)
{
    tgl_loop_fn fn = tgl_cgen_loop_code(k);
    return fn ? fn(D, L, env, cb) : TGL_STEP_NOT_READY;
}

const tgl_backend tgl_backend_cpu = {
    .name = "cpu",
    .device = TGL_DEVICE_CPU,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset = cpu_memset,
    .copy_to_host = cpu_copy,
    .copy_from_host = cpu_copy,
    .copy = cpu_copy,
    .gemm = cpu_gemm,
    .gemv = cpu_gemv,
    .ger = cpu_ger,
    .dot = cpu_dot,
    .set_threads = cpu_set_threads,
    .info = cpu_info,
    .op_kernel = tgl_cpu_op_kernel,
    .supports_op = cpu_supports_op,
    .prepare = cpu_prepare,
    .upgrade = cpu_upgrade,
    .wait = tgl_cgen_kernel_wait,
    .release = tgl_cgen_kernel_release,
    .launch = tgl_cgen_kernel_launch,
    .launch_cache_free = tgl_cgen_launch_cache_free,
    .step_inlinable = tgl_cgen_step_inlinable,
    .step_prepare = tgl_cgen_step_prepare,
    .step_run = cpu_step_run,
    .step_free = tgl_cgen_kernel_release,
    .loop_prepare = tgl_cgen_loop_prepare,
    .loop_run = cpu_loop_run,
    .cache_clear = tgl_cgen_cache_clear,
    .cache_info = tgl_cgen_cache_info,
    .wait_compiles = tgl_cgen_wait_all,
    .tune = tgl_cpu_tune,
};
