/*
 * test_cuda_compile.c — every CUDA kernel tgl can run, compiled with
 * NVRTC to an sm_90 cubin (so ptxas runs too): each hand-written family
 * (src/cuda/kernels: the prelude, the family's .cuh and .cu, as
 * modules.c pastes them) and a rendered fused kernel (cgen/render_cuda.c)
 * for every TGL_ELEMWISE_OPS entry in every compute dtype, every cast,
 * constants of every kind, 0 and 8 axes, and both broadcast kinds.  No
 * GPU is needed: this is how CI without one catches a syntax or type
 * error in device code.  A failure prints NVRTC's log.  Built only with
 * the CUDA backend (spec/CMakeLists.txt).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgen/render_cuda.h"
#include "cuda/cuda_int.h"
#include "engine/ops/elemwise_def.h"
#include "fprog_test.h"

#define ARCH 90

/* How many kernels were compiled, for the summary. */
static int n_kernels;

static int count(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

/* Compiles the prelude + source as modules.c does; fails with NVRTC's log. */
static void compile(const char *source, const char *name)
{
    const char *prelude = tgl_cuda_prelude_source();
    size_t size = strlen(prelude) + strlen(source) + strlen(name) + 100;
    char *full = malloc(size);
    assert_non_null(full);
    snprintf(full, size, "#line 1 \"src/cuda/kernels/prelude.cuh\"\n%s\n#line 1 \"%s\"\n%s",
             prelude, name, source);
    void *image = NULL;
    size_t len = 0;
    char *log = NULL;
    tgl_errbuf err = {{0}};
    tgl_status st = tgl_cuda_nvrtc_compile(full, name, ARCH, &image, &len, &log, &err);
    free(full);
    if (st) {
        print_error("NVRTC's log for %s:\n%s\n", name, log ? log : "(none)");
        free(log);
        fail_msg("%s", err.msg);
    }
    free(log);
    /* A cubin: an ELF image of machine code, not PTX text. */
    assert_true(len > 64);
    assert_memory_equal(image, "\177ELF", 4);
    free(image);
}

/* ---- the families ------------------------------------------------------------ */

static void every_family_compiles(void **state)
{
    (void)state;
    int families = 0;
    for (int i = 0; tgl_cuda_families[i]; i++) {
        const char *f = tgl_cuda_families[i];
        const char *src = tgl_cuda_family_source(f);
        assert_non_null(src);
        char name[200];
        snprintf(name, sizeof name, "src/cuda/kernels/%s.cu", f);
        compile(src, name);
        int k = count(src, "TGL_KERNEL(");
        print_message("family %s: %d kernels\n", f, k);
        n_kernels += k;
        families++;
    }
    assert_null(tgl_cuda_family_source("no such family"));
    /* The prelude alone, with a kernel using every helper, compiles. */
    compile("struct A { float *x; double *y; int64_t n; };\n"
            "TGL_KERNEL(tgl_test_prelude, A)\n"
            "{\n"
            "    __shared__ float s[32];\n"
            "    __shared__ double t[32];\n"
            "    TGL_DYN_SHARED(float, dyn);\n"
            "    float v = 0;\n"
            "    double w = 0;\n"
            "    TGL_GRID_LOOP(i, a.n) { v += a.x[i]; w += a.y[i]; }\n"
            "    dyn[threadIdx.x] = v;\n"
            "    v = tgl_block_sum(v, s);\n"
            "    w = tgl_block_sum(w, t) + tgl_warp_sum(w);\n"
            "    if (threadIdx.x == 0) { a.x[blockIdx.x] = v; a.y[blockIdx.x] = w; }\n"
            "}\n",
            "prelude_test.cu");
    n_kernels++;
    print_message("%d families compiled\n", families);
}

/* ---- the fused kernels ----------------------------------------------------------- */

#define MAXP 1024
static prog progs[MAXP];

/* progs[*n], the next program, initialised (prog_init). */
static prog *init(int *n, int ndim, const char *fmt, ...)
{
    assert_true(*n < MAXP);
    prog *b = &progs[(*n)++];
    va_list ap;
    va_start(ap, fmt);
    vprog_init(b, ndim, fmt, ap);
    va_end(ap);
    return b;
}

/* Every elementwise op but cast in every dtype it computes in, on 2-d
 * operands (one contiguous, one broadcast on axis 0, one on both axes),
 * plus a two-output program per dtype. */
static int ops_programs(int n)
{
    for (int dt = 0; dt < TGL_NDTYPES; dt++) {
        for (int op = 0; op < TGL_NOPS; op++) {
            if (!prog_elemwise_computes(op, dt))
                continue;
            assert_true(n < MAXP);
            prog_elemwise(&progs[n++], op, dt);
        }
        /* constants of every kind, two outputs */
        prog *b = init(&n, 1, "k_consts_%s", tgl_dtype_name(dt));
        static const double vals[] = {0.0, -0.0, 1.0, -1.0, 0.1, 1e300, -1e300, 2147483648.0,
                                      -9223372036854775808.0, 255.0, 256.0};
        int s = in_(b, dt, 0);
        int add = dt != TGL_BOOL ? TGL_OP_ADD : TGL_OP_OR;
        out_(b, s);
        for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++)
            s = op_(b, add, dt, s, const_(b, dt, vals[k]), -1);
        if (tgl_dtype_is_float(dt)) {
            s = op_(b, TGL_OP_ADD, dt, s, const_(b, dt, NAN), -1);
            s = op_(b, TGL_OP_ADD, dt, s, const_(b, dt, -INFINITY), -1);
        }
        out_(b, s);
    }
    /* a scalar program (0 axes) and one with the most axes */
    prog *b = init(&n, 0, "k_scalar");
    out_(b, op_(b, TGL_OP_MUL, TGL_FLOAT64, in_(b, TGL_FLOAT64, 0), in_(b, TGL_FLOAT64, 0), -1));
    b = init(&n, TGL_CUDA_MAX_DIMS, "k_8d");
    out_(b, op_(b, TGL_OP_ADD, TGL_FLOAT32, in_(b, TGL_FLOAT32, 0x55), in_(b, TGL_FLOAT32, 0xaa),
                -1));
    return n;
}

/* A cast between every pair of dtypes. */
static int cast_programs(int n)
{
    for (int from = 0; from < TGL_NDTYPES; from++)
        for (int to = 0; to < TGL_NDTYPES; to++) {
            assert_true(n < MAXP);
            prog_cast(&progs[n++], from, to);
        }
    return n;
}

/* progs[lo..hi) rendered as one source and compiled. */
static void render_and_compile(int lo, int hi, const char *name)
{
    char *src = prog_render(progs, lo, hi);
    assert_int_equal(count(src, "__global__ void "), hi - lo);
    compile(src, name);
    free(src);
    n_kernels += hi - lo;
}

static void every_fused_kernel_compiles(void **state)
{
    (void)state;
    int n_ops = ops_programs(0);
    int n_all = cast_programs(n_ops);
    /* Two sources: NVRTC's time grows with the source, and the two halves
     * name a failing kernel's neighbourhood. */
    render_and_compile(0, n_ops, "fused_ops.cu");
    render_and_compile(n_ops, n_all, "fused_casts.cu");
    print_message("%d fused kernels compiled\n", n_all);
}

/* A rejected source is an error carrying NVRTC's log. */
static void a_bad_source_fails_with_the_log(void **state)
{
    (void)state;
    void *image = (void *)1;
    size_t len = 1;
    char *log = NULL;
    tgl_errbuf err = {{0}};
    tgl_status st = tgl_cuda_nvrtc_compile("__global__ void f() { int x = ; }\n", "bad.cu", ARCH,
                                           &image, &len, &log, &err);
    assert_int_equal(st, TGL_EINTERNAL);
    assert_null(image);
    assert_int_equal(len, 0);
    assert_non_null(log);
    assert_non_null(strstr(log, "bad.cu(1)"));
    assert_non_null(strstr(err.msg, "nvrtc could not compile bad.cu for sm_90"));
    assert_non_null(strstr(err.msg, "expected an expression"));
    free(log);
    assert_int_equal(strncmp(tgl_cuda_nvrtc_version(), "nvrtc ", 6), 0);
}

static int summary(void **state)
{
    (void)state;
    print_message("%d CUDA kernels compiled with NVRTC (%s) to sm_%d cubins\n", n_kernels,
                  tgl_cuda_nvrtc_version(), ARCH);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_family_compiles),
        cmocka_unit_test(every_fused_kernel_compiles),
        cmocka_unit_test(a_bad_source_fails_with_the_log),
    };
    return cmocka_run_group_tests(tests, NULL, summary);
}
