/*
 * cgen_test.h — what spec/c/test_cgen.c and test_cgen_cache.c share: a
 * fixture whose context caches kernels in a fresh directory (with a cc
 * wrapper that counts compiles), a builder for fused programs by hand
 * (pb, on fprog_test.h's), running them over arrays, edge-value inputs,
 * and comparing with the reference bit for bit (or within a few ulps for
 * libm functions).
 *
 * These tests use the engine's internal headers, so they link the
 * engine's object files rather than the shared library (whose internals
 * are hidden).
 */
#ifndef TGL_CGEN_TEST_H
#define TGL_CGEN_TEST_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgen/cgint.h"
#include "engine/ops/ops.h"
#include "engine/pool.h"
#include "fprog_test.h"

/* ------------------------------------------------------------------------ */
/* fixture: a context whose cache is a fresh directory                       */
/* ------------------------------------------------------------------------ */

typedef struct {
    tgl_ctx *ctx;
    char dir[256];   /* cache directory */
    char cc[300];    /* a cc wrapper that counts compiles */
    int64_t live_at_start;
} fixture;

static inline void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char path[600];
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static inline int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    const char *t = getenv("TMPDIR");
    snprintf(f->dir, sizeof f->dir, "%s/tgl-cgen-XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(f->dir))
        return -1;
    /* The wrapper logs each compile (the --version probe is not one). */
    snprintf(f->cc, sizeof f->cc, "%s/cc.sh", f->dir);
    FILE *w = fopen(f->cc, "w");
    if (!w)
        return -1;
    fprintf(w, "#!/bin/sh\ncase \" $* \" in *\" -shared \"*) echo x >> \"%s/count\";; esac\n"
               "exec cc \"$@\"\n", f->dir);
    fclose(w);
    chmod(f->cc, 0755);
    f->ctx = tgl_ctx_new();
    tgl_config_set(f->ctx, "cache_dir", f->dir);
    f->live_at_start = tgl_memory_live_bytes();
    *state = f;
    return 0;
}

static inline int teardown(void **state)
{
    fixture *f = *state;
    tgl_ctx_free(f->ctx);
    int64_t live = tgl_memory_live_bytes(), start = f->live_at_start;
    remove_tree(f->dir);
    free(f);
    if (live != start) {
        print_error("live bytes %lld after the test, %lld before\n", (long long)live,
                    (long long)start);
        return -1;
    }
    return 0;
}

#define F ((fixture *)*state)
#define CTX (F->ctx)

#define assert_ok(ctx, call)                                                               \
    do {                                                                                   \
        tgl_status st_ = (call);                                                           \
        if (st_ != TGL_OK)                                                                 \
            fail_msg("%s failed with status %d: %s", #call, (int)st_, tgl_ctx_error(ctx)); \
    } while (0)

static inline void set(tgl_ctx *ctx, const char *key, const char *value)
{
    assert_ok(ctx, tgl_config_set(ctx, key, value));
}

/* Compiles run through the counting wrapper so far. */
static inline int compiles(void **state)
{
    char path[300];
    snprintf(path, sizeof path, "%s/count", F->dir);
    FILE *c = fopen(path, "r");
    int n = 0;
    if (c) {
        for (int ch; (ch = fgetc(c)) != EOF;)
            n += ch == '\n';
        fclose(c);
    }
    return n;
}

/* The cache's entries: count, and total bytes in *bytes. */
static inline int entries(const char *dir, int64_t *bytes)
{
    DIR *d = opendir(dir);
    int n = 0;
    int64_t b = 0;
    char path[600];
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l != TGL_CACHE_KEY_HEX + 3 || strcmp(e->d_name + l - 3, ".so") != 0)
            continue;
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) == 0) {
            n++;
            b += st.st_size;
        }
    }
    if (d)
        closedir(d);
    if (bytes)
        *bytes = b;
    return n;
}

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ------------------------------------------------------------------------ */
/* building programs by hand                                                 */
/* ------------------------------------------------------------------------ */

typedef struct pb {
    tgl_fused_prog p;
    tgl_type in_type[8];
    tgl_finstr code[512];
    int32_t out_instr[64];
    tgl_type out_type[64];
} pb;

static inline void pb_init(pb *b, int ndim)
{
    memset(b, 0, sizeof *b);
    fp_bind(&b->p, ndim, b->in_type, b->code, b->out_instr, b->out_type);
}

static inline int pb_op(pb *b, int op, int dtype, int x, int y, int z)
{
    return fp_op(&b->p, op, dtype, x, y, z);
}

static inline int pb_in(pb *b, int dtype, uint32_t bcast)
{
    return fp_in(&b->p, dtype, bcast);
}

static inline int pb_const(pb *b, int dtype, double v)
{
    return fp_const(&b->p, dtype, v);
}

static inline int pb_out(pb *b, int instr)
{
    return fp_out(&b->p, instr);
}

/* Output 0 reduced by op over mask. */
static inline void pb_reduce(pb *b, int op, uint32_t mask, int keepdims)
{
    int vdt = b->out_type[0].dtype;
    bool sp = op == TGL_OP_SUM || op == TGL_OP_PROD;
    int nd = keepdims ? b->p.ndim : b->p.ndim - __builtin_popcount(mask);
    b->p.reduce_op = op;
    b->p.reduce_mask = mask;
    b->p.reduce_keepdims = keepdims;
    b->p.reduce_type = (tgl_type){sp && vdt != TGL_FLOAT32 && vdt != TGL_FLOAT64 ? TGL_INT64 : vdt,
                                  nd, 0};
}

/* Prepares p (compile mode mode), allocates its outputs for inputs in and
 * runs it. */
static inline void run_prog(tgl_ctx *ctx, tgl_fused_prog *p, const char *mode, tgl_array **in,
                     tgl_array **out)
{
    set(ctx, "compile", mode);
    assert_ok(ctx, tgl_backend_prepare(ctx, TGL_DEVICE_CPU, p));
    tgl_kernel_fn fn = tgl_cgen_kernel_fn(p->kernel[TGL_DEVICE_CPU]);
    if (!fn)
        fail_msg("no kernel after prepare (%s)", mode);
    int64_t space[TGL_MAX_DIMS];
    for (int d = 0; d < p->ndim; d++) {
        space[d] = 1;
        for (int j = 0; j < p->nin; j++)
            if (in[j]->shape[d] != 1)
                space[d] = in[j]->shape[d];
    }
    for (int k = 0; k < p->nout; k++) {
        if (k == 0 && p->reduce_op >= 0) {
            int64_t shape[TGL_MAX_DIMS];
            int nd = 0;
            for (int d = 0; d < p->ndim; d++)
                if (!((p->reduce_mask >> d) & 1u))
                    shape[nd++] = space[d];
                else if (p->reduce_keepdims)
                    shape[nd++] = 1;
            assert_ok(ctx, tgl_array_empty(ctx, p->reduce_type.dtype, nd, shape, &out[0]));
        } else {
            assert_ok(ctx, tgl_array_empty(ctx, p->out_type[k].dtype, p->ndim, space, &out[k]));
        }
    }
    assert_ok(ctx, tgl_backend_launch(ctx, p, TGL_DEVICE_CPU, in, out, NULL));
}

static inline void release_all(tgl_array **a, int n)
{
    for (int i = 0; i < n; i++) {
        tgl_array_release(a[i]);
        a[i] = NULL;
    }
}

/* ------------------------------------------------------------------------ */
/* comparing with the reference                                              */
/* ------------------------------------------------------------------------ */

/* Ops whose float results come from libm's transcendental functions. */
static inline bool libm_op(int op)
{
    switch (op) {
    case TGL_OP_EXP: case TGL_OP_LOG: case TGL_OP_LOG1P: case TGL_OP_EXPM1: case TGL_OP_TANH:
    case TGL_OP_SIGMOID: case TGL_OP_SOFTPLUS: case TGL_OP_SIN: case TGL_OP_COS: case TGL_OP_POW:
        return true;
    default:
        return false;
    }
}

/* Element i (C order) of contiguous a: the raw integer, or the float. */
static inline int64_t ival(const tgl_array *a, int64_t i)
{
    switch (a->dtype_id) {
    case TGL_INT32: return ((const int32_t *)a->data)[i];
    case TGL_INT64: return ((const int64_t *)a->data)[i];
    default: return ((const uint8_t *)a->data)[i];
    }
}

/* got == want elementwise: bit for bit (NaN matching any NaN, -0.0 only
 * -0.0), or within ulps relative tolerance when ulps > 0. */
static inline void expect_match(const tgl_array *got, const tgl_array *want, double ulps,
                         const char *what)
{
    if (got->dtype_id != want->dtype_id || got->size != want->size)
        fail_msg("%s: got %s[%lld], want %s[%lld]", what, tgl_dtype_name(got->dtype_id),
                 (long long)got->size, tgl_dtype_name(want->dtype_id), (long long)want->size);
    bool fl = got->dtype_id == TGL_FLOAT32 || got->dtype_id == TGL_FLOAT64;
    double eps = got->dtype_id == TGL_FLOAT32 ? 0x1p-23 : 0x1p-52;
    double tiny = got->dtype_id == TGL_FLOAT32 ? 0x1p-126 : 0x1p-1022;
    for (int64_t i = 0; i < got->size; i++) {
        if (!fl) {
            if (ival(got, i) != ival(want, i))
                fail_msg("%s: element %lld is %lld, want %lld", what, (long long)i,
                         (long long)ival(got, i), (long long)ival(want, i));
            continue;
        }
        double g = tgl_load_as_double(got->dtype_id, got->data, i);
        double w = tgl_load_as_double(want->dtype_id, want->data, i);
        if (isnan(g) && isnan(w))
            continue;
        bool same = g == w && signbit(g) == signbit(w);
        if (!same && ulps > 0 && isfinite(w) && isfinite(g))
            same = fabs(g - w) <= ulps * eps * fabs(w) + ulps * tiny;
        if (!same)
            fail_msg("%s: element %lld is %.9g (%a), want %.9g (%a)", what, (long long)i, g, g, w,
                     w);
    }
}

/* ---- edge values -------------------------------------------------------- */

static const double fvals[] = {
    NAN, INFINITY, -INFINITY, 0.0, -0.0, 1, -1, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3, -7, 1e-30,
    -1e-30, 1e30, -1e30, 100, -100, 20, -20, 0.1, 7.25, 300, 255.5, 2.5e9, -2.5e9, 9.3e18,
    -9.3e18, 2147483647.5, -88.5, 1e-3};
static const int64_t i32vals[] = {0, 1, -1, 2, -2, 3, -3, 7, -7, 100, -100, 255, 256,
                                  INT32_MAX, INT32_MIN, INT32_MAX - 1, 12345, -12345, 31, 63};
static const int64_t i64vals[] = {0, 1, -1, 2, -2, 3, -7, 7, 100, -100, INT64_MAX, INT64_MIN,
                                  (int64_t)1 << 62, -((int64_t)1 << 62), ((int64_t)1 << 53) + 1,
                                  4294967296, 63, 64, INT32_MAX, INT32_MIN, 300, -300};
static const int64_t u8vals[] = {0, 1, 2, 3, 7, 100, 127, 128, 200, 254, 255, 16};
static const int64_t bvals[] = {0, 1, 1, 0, 1};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static inline int nvals(int dt)
{
    switch (dt) {
    case TGL_FLOAT32: case TGL_FLOAT64: return COUNT(fvals);
    case TGL_INT32: return COUNT(i32vals);
    case TGL_INT64: return COUNT(i64vals);
    case TGL_UINT8: return COUNT(u8vals);
    default: return COUNT(bvals);
    }
}

/* Value number v of dtype dt's edge table stored at element i of a. */
static inline void put(tgl_array *a, int64_t i, int v)
{
    int dt = a->dtype_id;
    void *p = a->data;
    int64_t at = i * a->strides[0];
    switch (dt) {
    case TGL_FLOAT32: ((float *)p)[at] = (float)fvals[v]; break;
    case TGL_FLOAT64: ((double *)p)[at] = fvals[v]; break;
    case TGL_INT32: ((int32_t *)p)[at] = (int32_t)i32vals[v]; break;
    case TGL_INT64: ((int64_t *)p)[at] = i64vals[v]; break;
    case TGL_UINT8: ((uint8_t *)p)[at] = (uint8_t)u8vals[v]; break;
    default: ((uint8_t *)p)[at] = (uint8_t)bvals[v]; break;
    }
}

/* A 1-d array of n elements of dtype dt; strided: every other element of
 * a buffer twice as long.  pattern 0: x cycles the table, 1: y steps
 * through it every nvals elements (so x, y meet every pair), 2: a third
 * mix, 3: a bool condition. */
static inline tgl_array *edge_array(tgl_ctx *ctx, int dt, int64_t n, int pattern, bool strided)
{
    tgl_array *base = NULL, *a = NULL;
    int64_t len = strided ? 2 * n : n;
    assert_ok(ctx, tgl_array_zeros(ctx, dt, 1, &len, &base));
    if (strided) {
        int64_t stride = 2;
        assert_ok(ctx, tgl_array_view(ctx, base, 1, &n, &stride, 1, &a));
        tgl_array_release(base);
    } else {
        a = base;
    }
    int nv = nvals(dt);
    for (int64_t i = 0; i < n; i++) {
        int v = pattern == 0 ? (int)(i % nv) : pattern == 1 ? (int)(i / nv % nv)
                                                            : (int)((i * 7 + 3) % nv);
        if (pattern == 3)
            ((uint8_t *)a->data)[i * a->strides[0]] = i % 3 == 0;
        else
            put(a, i, v);
    }
    return a;
}

#endif /* TGL_CGEN_TEST_H */
