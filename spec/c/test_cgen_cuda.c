/*
 * test_cgen_cuda.c — the CUDA dialect of the code generator
 * (src/cgen/render_cuda.c): every elementwise op in every compute dtype
 * its kind allows, every cast, and constants of every kind (NaN, +-inf,
 * -0.0, integer extremes), rendered as CUDA kernels from the same
 * TGL_ELEMWISE_OPS entries the CPU kernels come from; and refusals
 * (reductions) as clear errors.
 *
 * Where nvcc is on PATH, the sources are compiled (nvcc --ptx, all of
 * them in one nvcc run: it takes seconds per file) with warnings as
 * errors; without it (the fresh-machine CI) that test skips, saying why.
 * No GPU is needed: nothing runs.
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cgen/render_cuda.h"
#include "engine/ops/elemwise_def.h"
#include "fprog_test.h"

/* ---- the sources ---------------------------------------------------------- */

#define MAXP 512
static prog progs[MAXP];

/* Renders progs[0..n) as one source; fails the test on an error. */
static char *render(int n)
{
    return prog_render(progs, 0, n);
}

/* Every op but cast in every compute dtype of the floats (floats != 0) or
 * of the others, on 2-d operands: a contiguous one, one broadcast along
 * axis 0 and one broadcast on both axes (both paths of the kernel), and
 * a bool condition for switch.  Then constants of the dtypes.  Returns
 * how many programs it made. */
static int ops_programs(bool floats)
{
    int n = 0;
    for (int dt = 0; dt < TGL_NDTYPES; dt++) {
        if (tgl_dtype_is_float(dt) != floats)
            continue;
        for (int op = 0; op < TGL_NOPS; op++) {
            if (prog_elemwise_computes(op, dt))
                prog_elemwise(&progs[n++], op, dt);
        }
        prog *b = &progs[n++];
        prog_init(b, 1, "k_consts_%s", tgl_dtype_name(dt));
        static const double vals[] = {0.0, -0.0, 1.0, -1.0, 0.1, 1e300, -1e300, 2147483648.0,
                                      -9223372036854775808.0, 255.0, 256.0};
        int s = in_(b, dt, 0);
        int add = tgl_dtype_is_float(dt) || dt != TGL_BOOL ? TGL_OP_ADD : TGL_OP_OR;
        for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++)
            s = op_(b, add, dt, s, const_(b, dt, vals[k]), -1);
        if (floats) {
            s = op_(b, TGL_OP_ADD, dt, s, const_(b, dt, NAN), -1);
            s = op_(b, TGL_OP_ADD, dt, s, const_(b, dt, INFINITY), -1);
        }
        out_(b, s);
    }
    return n;
}

/* A cast between every pair of dtypes, each its own kernel. */
static int cast_programs(int n)
{
    for (int from = 0; from < TGL_NDTYPES; from++)
        for (int to = 0; to < TGL_NDTYPES; to++) {
            prog_cast(&progs[n++], from, to);
        }
    return n;
}

/* The kernels call the precise math functions by their names in the
 * dtype, declare nothing, and keep no host-only constant. */
static void ops_render_in_the_cuda_dialect(void **state)
{
    (void)state;
    int n = ops_programs(true);
    char *src = render(n);
    assert_non_null(strstr(src, "extern \"C\" __global__ void k_exp_float32(const tgl_cuda_space S"));
    assert_non_null(strstr(src, "float v1 = expf(v0);"));
    assert_non_null(strstr(src, "double v1 = exp(v0);"));
    assert_non_null(strstr(src, "float v1 = log1pf(v0);"));
    /* sigmoid's temporary, through the same entry as the CPU kernels */
    assert_non_null(strstr(src, "const float e1 = expf(-fabsf(v0));"));
    /* constants as bits: 1.0f, NaN (float64), -inf (float32) */
    assert_non_null(strstr(src, "__int_as_float((int)0x3f800000U)"));
    assert_non_null(strstr(src, "__longlong_as_double((long long)0x7ff8000000000000ULL)"));
    assert_non_null(strstr(src, "__int_as_float((int)0xff800000U)"));
    /* loads on both paths; a broadcast-everywhere input stays at 0 */
    assert_non_null(strstr(src, "float v0 = i0[k];"));
    assert_non_null(strstr(src, "float v0 = i0[u0];"));
    assert_non_null(strstr(src, "float v2 = i2[0];"));
    assert_null(strstr(src, "__expf"));
    assert_null(strstr(src, "TGL_INF"));
    assert_null(strstr(src, "TGL_NAN"));
    assert_null(strstr(src, "#pragma"));
    free(src);

    n = cast_programs(ops_programs(false));
    src = render(n);
    /* the table's integer helpers and the saturating casts, as device code */
    assert_non_null(strstr(src, "static __device__ __forceinline__ int64_t tgl_mod_i("));
    assert_non_null(strstr(src, "static __device__ __forceinline__ int64_t tgl_pow_i("));
    assert_non_null(strstr(src, "static __device__ __forceinline__ int32_t tgl_f2i32(double v)"));
    assert_non_null(strstr(src, "int32_t v1 = tgl_f2i32((double)v0);"));
    assert_non_null(strstr(src, "((int32_t)(-2147483647 - 1))"));
    assert_null(strstr(src, "static inline"));
    free(src);
}

/* What the CUDA kernels do not take is a clear error naming the program. */
static void reductions_and_bad_programs_are_refused(void **state)
{
    (void)state;
    prog *b = &progs[0];
    prog_init(b, 2, "k_sum");
    out_(b, op_(b, TGL_OP_EXP, TGL_FLOAT32, in_(b, TGL_FLOAT32, 0), -1, -1));
    b->p.id = 7;
    b->p.reduce_op = TGL_OP_SUM;
    b->p.reduce_mask = 1;
    b->p.reduce_type = (tgl_type){TGL_FLOAT32, 1, 0};
    const tgl_fused_prog *ps[1] = {&b->p};
    const char *syms[1] = {b->symbol};
    tgl_errbuf err = {{0}};
    char *src = NULL;
    assert_int_equal(tgl_cgen_render_cuda(ps, syms, 1, &src, &err), TGL_EINVAL);
    assert_null(src);
    assert_non_null(strstr(err.msg, "program 7: the CUDA kernels have no fused reduction (sum"));

    b->p.reduce_op = -1;
    b->code[1].dtype = TGL_INT32; /* exp computes in float only */
    b->out_type[0].dtype = TGL_INT32;
    assert_int_equal(tgl_cgen_render_cuda(ps, syms, 1, &src, &err), TGL_EINTERNAL);
    assert_null(src);
    assert_non_null(strstr(err.msg, "exp does not take these operand dtypes"));
}

/* ---- nvcc ------------------------------------------------------------------ */

/* Whether nvcc is on PATH. */
static bool have_nvcc(void)
{
    const char *path = getenv("PATH");
    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        char exe[1200];
        snprintf(exe, sizeof exe, "%.*s/nvcc", (int)len, path);
        if (len && access(exe, X_OK) == 0)
            return true;
        path = end ? end + 1 : NULL;
    }
    return false;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        fail_msg("cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* Both sources compile with nvcc, warnings as errors but one: the table's
 * integer forms compare a uint8 with 0 (abs and sign of uint8, as the
 * reference computes them), which nvcc calls pointless (#186). */
static void nvcc_compiles_every_kernel(void **state)
{
    (void)state;
    if (!have_nvcc()) {
        print_message("skipped: nvcc is not on PATH (the CUDA sources are checked "
                      "without compiling them)\n");
        skip();
    }
    char dir[] = "/tmp/tgl-cuda-XXXXXX";
    if (!mkdtemp(dir))
        fail_msg("cannot make a temporary directory");
    char path[2][200];
    for (int s = 0; s < 2; s++) {
        int n = s == 0 ? ops_programs(true) : cast_programs(ops_programs(false));
        char *src = render(n);
        snprintf(path[s], sizeof path[s], "%s/%s.cu", dir, s == 0 ? "floats" : "others");
        write_file(path[s], src);
        free(src);
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "cd %s && nvcc --ptx -Werror all-warnings -diag-suppress 186 floats.cu others.cu "
             "> nvcc.log 2>&1", dir);
    int rc = system(cmd);
    if (rc != 0) {
        char log[600];
        snprintf(log, sizeof log, "%s/nvcc.log", dir);
        FILE *f = fopen(log, "r");
        char text[4096] = "";
        if (f) {
            text[fread(text, 1, sizeof text - 1, f)] = '\0';
            fclose(f);
        }
        fail_msg("nvcc rejects the CUDA sources (kept in %s): %s", dir, text);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ops_render_in_the_cuda_dialect),
        cmocka_unit_test(reductions_and_bad_programs_are_refused),
        cmocka_unit_test(nvcc_compiles_every_kernel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
