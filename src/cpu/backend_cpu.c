/*
 * backend_cpu.c — the CPU backend (engine/backend.h): host memory from
 * posix_memalign, products from OpenBLAS's CBLAS, fused kernels from the
 * code generator (src/cgen: C rendered, compiled by libtcc and the system
 * compiler, cached on disk under a key that names this backend, "cpu",
 * and this CPU's features).
 *
 * It is the only place that names OpenBLAS and the only caller of cgen's
 * kernel functions; the engine sees both through tgl_backend_cpu.  The
 * kernel entries are cgen's own (src/cgen/compile.c), called directly.
 */
#include "engine/backend.h"
#include "cgen/cgen.h"

#include <cblas.h>
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

static CBLAS_TRANSPOSE op(bool trans)
{
    return trans ? CblasTrans : CblasNoTrans;
}

static tgl_status cpu_gemm(int dtype, bool trans_a, bool trans_b, int m, int n, int k,
                           double alpha, const void *a, int lda, const void *b, int ldb,
                           double beta, void *c, int ldc, tgl_errbuf *err)
{
    (void)err;
    if (dtype == TGL_FLOAT32)
        cblas_sgemm(CblasRowMajor, op(trans_a), op(trans_b), m, n, k, (float)alpha, a, lda, b,
                    ldb, (float)beta, c, ldc);
    else
        cblas_dgemm(CblasRowMajor, op(trans_a), op(trans_b), m, n, k, alpha, a, lda, b, ldb, beta,
                    c, ldc);
    return TGL_OK;
}

/* OpenBLAS splits a matrix-vector product over its threads from about
 * 9,000 elements on, where waking the threads costs more than the product
 * (a 100x100 gemv: 0.6 us on one thread, 2 us on two).  Products below
 * SMALL_THREADED run on one thread: the count is lowered around the call
 * (OpenBLAS reads it when a call starts; lowering it creates nothing). */
#define SMALL_THREADED (256 * 256)

static int single_threaded_begin(int64_t elements)
{
    if (elements >= SMALL_THREADED)
        return 0;
    int n = openblas_get_num_threads();
    if (n > 1)
        openblas_set_num_threads(1);
    return n > 1 ? n : 0;
}

static void single_threaded_end(int saved)
{
    if (saved)
        openblas_set_num_threads(saved);
}

static tgl_status cpu_gemv(int dtype, bool trans, int rows, int cols, double alpha,
                           const void *a, int lda, const void *x, int incx, double beta, void *y,
                           int incy, tgl_errbuf *err)
{
    (void)err;
    int saved = single_threaded_begin((int64_t)rows * cols);
    if (dtype == TGL_FLOAT32)
        cblas_sgemv(CblasRowMajor, op(trans), rows, cols, (float)alpha, a, lda, x, incx,
                    (float)beta, y, incy);
    else
        cblas_dgemv(CblasRowMajor, op(trans), rows, cols, alpha, a, lda, x, incx, beta, y, incy);
    single_threaded_end(saved);
    return TGL_OK;
}

static tgl_status cpu_ger(int dtype, int m, int n, double alpha, const void *x, int incx,
                          const void *y, int incy, void *a, int lda, tgl_errbuf *err)
{
    (void)err;
    int saved = single_threaded_begin((int64_t)m * n);
    if (dtype == TGL_FLOAT32)
        cblas_sger(CblasRowMajor, m, n, (float)alpha, x, incx, y, incy, a, lda);
    else
        cblas_dger(CblasRowMajor, m, n, alpha, x, incx, y, incy, a, lda);
    single_threaded_end(saved);
    return TGL_OK;
}

/* dsdot accumulates float32 products in double. */
static tgl_status cpu_dot(int dtype, int n, const void *x, int incx, const void *y, int incy,
                          void *out, tgl_errbuf *err)
{
    (void)err;
    if (dtype == TGL_FLOAT32)
        *(float *)out = (float)cblas_dsdot(n, x, incx, y, incy);
    else
        *(double *)out = cblas_ddot(n, x, incx, y, incy);
    return TGL_OK;
}

static void cpu_set_threads(int n)
{
    openblas_set_num_threads(n);
}

static const char *cpu_info(void)
{
    /* Built once; the strings OpenBLAS returns are static.  A benign race:
     * concurrent first calls write the same bytes. */
    static char info[256];
    if (!info[0]) {
        /* The config string already starts "OpenBLAS 0.3.21 ..." */
        const char *config = openblas_get_config();
        const char *prefix = strncmp(config, "OpenBLAS ", 9) == 0 ? "" : "OpenBLAS ";
        snprintf(info, sizeof info, "%s%s (core %s, %d threads)", prefix, config,
                 openblas_get_corename(), openblas_get_num_threads());
    }
    return info;
}

/* ---- fused kernels ------------------------------------------------------------- */

static tgl_status cpu_prepare(const tgl_backend_opts *o, const tgl_fprog *prog,
                              tgl_kernel_ref **out, tgl_errbuf *err)
{
    return tgl_cgen_compile(o, &tgl_backend_cpu, prog, out, err);
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
    .prepare = cpu_prepare,
    .wait = tgl_cgen_kernel_wait,
    .release = tgl_cgen_kernel_release,
    .launch = tgl_cgen_kernel_launch,
    .cache_clear = tgl_cgen_cache_clear,
    .cache_info = tgl_cgen_cache_info,
};
