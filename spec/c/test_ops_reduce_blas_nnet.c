/*
 * test_ops_reduce_blas_nnet.c — the reduction, linear algebra and nnet op
 * families through the public C API: values from tgl_eval (the reference
 * kernels) against hand-computed numbers, result types and broadcast
 * patterns from tgl_apply, and every rejected input (status plus a message
 * that names the op and the problem).
 *
 * Axes and parameters are 0-based here (the C API); messages name axes
 * 1-based, as users of the Lua layer write them.  Every test runs with a
 * fresh context; the teardown checks that it released every array.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tgl.h>

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */
/* ------------------------------------------------------------------------ */

#include "tgl_fixture.h"

#define CTX (((fixture *)*state)->ctx)

/* Op ids come from the catalog, by name. */
static int op(const char *name)
{
    int id = tgl_op_lookup(name);
    if (id < 0)
        fail_msg("no op named %s", name);
    return id;
}

/* Parameters: n integers, then flags. */
static tgl_params prm(int flags, int n, ...)
{
    tgl_params p;
    memset(&p, 0, sizeof p);
    p.n = n;
    p.flags = flags;
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        p.i[i] = va_arg(ap, int64_t);
    va_end(ap);
    return p;
}
#define P0() prm(0, 0)
#define P1(a) prm(0, 1, (int64_t)(a))
#define P2(a, b) prm(0, 2, (int64_t)(a), (int64_t)(b))
#define P3(a, b, c) prm(0, 3, (int64_t)(a), (int64_t)(b), (int64_t)(c))
#define KEEP 1 /* TGL_REDUCE_KEEPDIMS */

/* A contiguous array of dtype dt holding vals (C order), or iota when
 * vals is NULL. */
static tgl_array *mk(tgl_ctx *ctx, int dt, int nd, const int64_t *shape, const double *vals)
{
    tgl_array *a = NULL;
    if (tgl_array_empty(ctx, dt, nd, shape, &a) != TGL_OK)
        fail_msg("tgl_array_empty: %s", tgl_ctx_error(ctx));
    int64_t idx[8] = {0};
    for (int64_t i = 0; i < a->size; i++) {
        int64_t r = i;
        for (int d = nd - 1; d >= 0; d--)
            idx[d] = r % shape[d], r /= shape[d];
        assert_int_equal(tgl_array_set(ctx, a, idx, vals ? vals[i] : (double)i), TGL_OK);
    }
    return a;
}
#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define VALS(...) ((const double[]){__VA_ARGS__})

/* Element i (C order) of a, any strides. */
static double at(tgl_ctx *ctx, const tgl_array *a, int64_t i)
{
    int64_t idx[8] = {0};
    for (int d = a->ndim - 1; d >= 0; d--)
        idx[d] = i % a->shape[d], i /= a->shape[d];
    double v = NAN;
    assert_int_equal(tgl_array_get(ctx, a, idx, &v), TGL_OK);
    return v;
}

/* a has dtype dt, shape (nd dims) and, within tol, the values want
 * (NaN matches NaN, infinities match exactly).  Releases a. */
static void expect(tgl_ctx *ctx, tgl_array *a, int dt, int nd, const int64_t *shape,
                   const double *want, double tol)
{
    assert_non_null(a);
    if (a->dtype_id != dt)
        fail_msg("dtype is %s, expected %s", tgl_dtype_name(a->dtype_id), tgl_dtype_name(dt));
    assert_int_equal(a->ndim, nd);
    int64_t size = 1;
    for (int d = 0; d < nd; d++) {
        if (a->shape[d] != shape[d])
            fail_msg("size %lld on axis %d, expected %lld", (long long)a->shape[d], d,
                     (long long)shape[d]);
        size *= shape[d];
    }
    for (int64_t i = 0; i < size; i++) {
        double g = at(ctx, a, i), w = want[i];
        bool ok = isnan(w) ? isnan(g) : isinf(w) ? g == w : fabs(g - w) <= tol;
        if (!ok)
            fail_msg("element %lld is %.17g, expected %.17g", (long long)i, g, w);
    }
    tgl_array_release(a);
}

/* tgl_eval of a one- or two-input op that must succeed. */
static tgl_array *ev(tgl_ctx *ctx, const char *name, tgl_array *a, tgl_array *b, tgl_params p)
{
    tgl_array *in[2] = {a, b}, *out = NULL;
    tgl_status st = tgl_eval(ctx, op(name), b ? 2 : 1, in, &p, &out);
    if (st != TGL_OK)
        fail_msg("%s failed: %s", name, tgl_ctx_error(ctx));
    return out;
}

/* tgl_eval must fail with status want and a message "<name>: ..." holding
 * needle; nothing is returned. */
static void ev_fails(tgl_ctx *ctx, const char *name, tgl_array *a, tgl_array *b, tgl_params p,
                     tgl_status want, const char *prefix, const char *needle)
{
    tgl_array *in[2] = {a, b}, *out = (tgl_array *)(uintptr_t)0x5e47;
    tgl_ctx_clear_error(ctx);
    tgl_status st = tgl_eval(ctx, op(name), b ? 2 : 1, in, &p, &out);
    const char *msg = tgl_ctx_error(ctx);
    if (st != want)
        fail_msg("%s returned %d, expected %d (%s)", name, (int)st, (int)want, msg);
    if (strncmp(msg, prefix, strlen(prefix)) != 0 || !strstr(msg, needle))
        fail_msg("message of %s is '%s', expected '%s...%s...'", name, msg, prefix, needle);
    assert_ptr_equal(out, (tgl_array *)(uintptr_t)0x5e47);
}

/* A symbolic input of the given type. */
static tgl_node *var(tgl_ctx *ctx, int dt, int nd, uint32_t bcast)
{
    tgl_type t = {dt, nd, bcast};
    tgl_node *n = NULL;
    assert_int_equal(tgl_node_input(ctx, t, "x", &n), TGL_OK);
    return n;
}

/* The type tgl_apply infers (which must succeed). */
static tgl_type ty(tgl_ctx *ctx, const char *name, tgl_node *a, tgl_node *b, tgl_params p)
{
    tgl_node *in[2] = {a, b}, *out = NULL;
    if (tgl_apply(ctx, op(name), b ? 2 : 1, in, &p, NULL, &out) != TGL_OK)
        fail_msg("tgl_apply %s failed: %s", name, tgl_ctx_error(ctx));
    return tgl_node_type(out);
}

static void expect_type(tgl_type t, int dt, int nd, uint32_t bcast)
{
    if (t.dtype != dt || t.ndim != nd || t.bcast != bcast)
        fail_msg("type is (%s, %d-d, bcast %#x), expected (%s, %d-d, bcast %#x)",
                 tgl_dtype_name(t.dtype), t.ndim, t.bcast, tgl_dtype_name(dt), nd, bcast);
}

/* tgl_apply must fail with status want and "tgl_apply: <name>: ...needle". */
static void apply_fails(tgl_ctx *ctx, const char *name, tgl_node *a, tgl_node *b, tgl_params p,
                        tgl_status want, const char *needle)
{
    tgl_node *in[2] = {a, b}, *out = NULL;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "tgl_apply: %s: ", name);
    tgl_ctx_clear_error(ctx);
    tgl_status st = tgl_apply(ctx, op(name), b ? 2 : 1, in, &p, NULL, &out);
    const char *msg = tgl_ctx_error(ctx);
    if (st != want)
        fail_msg("%s returned %d, expected %d (%s)", name, (int)st, (int)want, msg);
    if (strncmp(msg, prefix, strlen(prefix)) != 0 || !strstr(msg, needle))
        fail_msg("message of %s is '%s', expected '%s...%s...'", name, msg, prefix, needle);
    assert_null(out);
}

/* A view of a with axes permuted (a released: the view keeps the storage). */
static tgl_array *perm(tgl_ctx *ctx, tgl_array *a, const int *order)
{
    tgl_array *v = NULL;
    assert_int_equal(tgl_array_transpose(ctx, a, order, &v), TGL_OK);
    tgl_array_release(a);
    return v;
}

/* A view of a (released) with the given shape, strides and offset. */
static tgl_array *view(tgl_ctx *ctx, tgl_array *a, int nd, const int64_t *shape,
                       const int64_t *strides, int64_t offset)
{
    tgl_array *v = NULL;
    if (tgl_array_view(ctx, a, nd, shape, strides, offset, &v) != TGL_OK)
        fail_msg("view: %s", tgl_ctx_error(ctx));
    tgl_array_release(a);
    return v;
}

#define M23 VALS(1, 2, 3, 4, 5, 6) /* [[1,2,3],[4,5,6]] */

/* ------------------------------------------------------------------------ */
/* sum, prod, max, min                                                      */
/* ------------------------------------------------------------------------ */

static void sum_over_one_axis_drops_it(void **state)
{
    tgl_array *x = mk(CTX, TGL_FLOAT64, 2, SHAPE(2, 3), M23);
    expect(CTX, ev(CTX, "sum", x, NULL, P1(0)), TGL_FLOAT64, 1, SHAPE(3), VALS(5, 7, 9), 0);
    expect(CTX, ev(CTX, "sum", x, NULL, P1(1)), TGL_FLOAT64, 1, SHAPE(2), VALS(6, 15), 0);
    tgl_array_release(x);
}

static void sum_with_keepdims_keeps_size_one_broadcastable_axes(void **state)
{
    tgl_array *x = mk(CTX, TGL_FLOAT64, 2, SHAPE(2, 3), M23);
    expect(CTX, ev(CTX, "sum", x, NULL, prm(KEEP, 1, (int64_t)1)), TGL_FLOAT64, 2, SHAPE(2, 1),
           VALS(6, 15), 0);
    tgl_array_release(x);
    tgl_node *v = var(CTX, TGL_FLOAT32, 3, 0);
    expect_type(ty(CTX, "sum", v, NULL, prm(KEEP, 2, (int64_t)0, (int64_t)2)), TGL_FLOAT32, 3, 5u);
    expect_type(ty(CTX, "sum", v, NULL, P2(0, 2)), TGL_FLOAT32, 1, 0);
}

static void sum_over_several_all_and_no_axes_of_a_3d_array(void **state)
{
    tgl_array *x = mk(CTX, TGL_FLOAT64, 3, SHAPE(2, 3, 4), NULL); /* x[i,j,k] = 12i+4j+k */
    expect(CTX, ev(CTX, "sum", x, NULL, P2(0, 2)), TGL_FLOAT64, 1, SHAPE(3), VALS(60, 92, 124), 0);
    expect(CTX, ev(CTX, "sum", x, NULL, prm(KEEP, 2, (int64_t)0, (int64_t)2)), TGL_FLOAT64, 3,
           SHAPE(1, 3, 1), VALS(60, 92, 124), 0);
    expect(CTX, ev(CTX, "sum", x, NULL, P1(1)), TGL_FLOAT64, 2, SHAPE(2, 4),
           VALS(12, 15, 18, 21, 48, 51, 54, 57), 0);
    expect(CTX, ev(CTX, "sum", x, NULL, P3(0, 1, 2)), TGL_FLOAT64, 0, NULL, VALS(276), 0);
    expect(CTX, ev(CTX, "sum", x, NULL, prm(KEEP, 3, (int64_t)0, (int64_t)1, (int64_t)2)),
           TGL_FLOAT64, 3, SHAPE(1, 1, 1), VALS(276), 0);
    /* no axes: the values unchanged */
    tgl_array *y = ev(CTX, "sum", x, NULL, P0());
    assert_true(tgl_array_equal_bits(x, y));
    tgl_array_release(y);
    tgl_array_release(x);
}

static void sum_and_prod_of_integers_and_bools_give_int64(void **state)
{
    tgl_array *x = mk(CTX, TGL_INT32, 2, SHAPE(2, 3), VALS(1, -2, 3, 4, 5, -6));
    expect(CTX, ev(CTX, "sum", x, NULL, P1(1)), TGL_INT64, 1, SHAPE(2), VALS(2, 3), 0);
    expect(CTX, ev(CTX, "prod", x, NULL, P1(0)), TGL_INT64, 1, SHAPE(3), VALS(4, -10, -18), 0);
    expect(CTX, ev(CTX, "sum", x, NULL, P0()), TGL_INT64, 2, SHAPE(2, 3), VALS(1, -2, 3, 4, 5, -6), 0);
    tgl_array_release(x);
    tgl_array *b = mk(CTX, TGL_BOOL, 1, SHAPE(4), VALS(1, 0, 1, 1));
    expect(CTX, ev(CTX, "sum", b, NULL, P1(0)), TGL_INT64, 0, NULL, VALS(3), 0);
    tgl_array_release(b);
    tgl_array *u = mk(CTX, TGL_UINT8, 1, SHAPE(3), VALS(200, 100, 250));
    expect(CTX, ev(CTX, "sum", u, NULL, P1(0)), TGL_INT64, 0, NULL, VALS(550), 0);
    tgl_array_release(u);
    /* int64 sums wrap around instead of invoking undefined behaviour */
    tgl_array *w = NULL;
    assert_int_equal(tgl_array_empty(CTX, TGL_INT64, 1, SHAPE(2), &w), TGL_OK);
    ((int64_t *)w->data)[0] = INT64_MAX, ((int64_t *)w->data)[1] = 1;
    tgl_array *s = ev(CTX, "sum", w, NULL, P1(0));
    assert_true(*(int64_t *)s->data == INT64_MIN);
    tgl_array_release(s);
    tgl_array_release(w);
}

static void float32_sums_accumulate_in_double(void **state)
{
    /* In float32, 2^24 + 1 rounds back to 2^24: a float accumulator would
     * lose all four ones. */
    tgl_array *x = mk(CTX, TGL_FLOAT32, 1, SHAPE(5), VALS(16777216, 1, 1, 1, 1));
    expect(CTX, ev(CTX, "sum", x, NULL, P1(0)), TGL_FLOAT32, 0, NULL, VALS(16777220), 0);
    tgl_array_release(x);
}

static void prod_max_min_over_axes(void **state)
{
    tgl_array *x = mk(CTX, TGL_FLOAT64, 2, SHAPE(2, 3), VALS(1, -2, 3, 4, 5, -6));
    expect(CTX, ev(CTX, "prod", x, NULL, P1(0)), TGL_FLOAT64, 1, SHAPE(3), VALS(4, -10, -18), 0);
    expect(CTX, ev(CTX, "prod", x, NULL, P2(0, 1)), TGL_FLOAT64, 0, NULL, VALS(720), 0);
    expect(CTX, ev(CTX, "max", x, NULL, P1(0)), TGL_FLOAT64, 1, SHAPE(3), VALS(4, 5, 3), 0);
    expect(CTX, ev(CTX, "max", x, NULL, P1(1)), TGL_FLOAT64, 1, SHAPE(2), VALS(3, 5), 0);
    expect(CTX, ev(CTX, "min", x, NULL, P1(1)), TGL_FLOAT64, 1, SHAPE(2), VALS(-2, -6), 0);
    expect(CTX, ev(CTX, "min", x, NULL, prm(KEEP, 2, (int64_t)0, (int64_t)1)), TGL_FLOAT64, 2,
           SHAPE(1, 1), VALS(-6), 0);
    tgl_array_release(x);
    /* max and min keep integer and bool dtypes: bool max is any, min all */
    tgl_array *i = mk(CTX, TGL_INT32, 2, SHAPE(2, 2), VALS(-7, 3, 2, -9));
    expect(CTX, ev(CTX, "max", i, NULL, P1(1)), TGL_INT32, 1, SHAPE(2), VALS(3, 2), 0);
    expect(CTX, ev(CTX, "min", i, NULL, P1(0)), TGL_INT32, 1, SHAPE(2), VALS(-7, -9), 0);
    tgl_array_release(i);
    tgl_array *b = mk(CTX, TGL_BOOL, 2, SHAPE(2, 2), VALS(1, 0, 1, 1));
    expect(CTX, ev(CTX, "max", b, NULL, P1(1)), TGL_BOOL, 1, SHAPE(2), VALS(1, 1), 0);
    expect(CTX, ev(CTX, "min", b, NULL, P1(1)), TGL_BOOL, 1, SHAPE(2), VALS(0, 1), 0);
    tgl_array_release(b);
    tgl_array *f = mk(CTX, TGL_FLOAT32, 1, SHAPE(3), VALS(-INFINITY, -1e30, -INFINITY));
    expect(CTX, ev(CTX, "max", f, NULL, P1(0)), TGL_FLOAT32, 0, NULL, VALS((double)-1e30f), 0);
    tgl_array_release(f);
}

static void max_min_and_sum_propagate_nan(void **state)
{
    tgl_array *x = mk(CTX, TGL_FLOAT64, 2, SHAPE(2, 3), VALS(1, NAN, 3, NAN, 5, 6));
    expect(CTX, ev(CTX, "max", x, NULL, P1(1)), TGL_FLOAT64, 1, SHAPE(2), VALS(NAN, NAN), 0);
    expect(CTX, ev(CTX, "min", x, NULL, P1(1)), TGL_FLOAT64, 1, SHAPE(2), VALS(NAN, NAN), 0);
    expect(CTX, ev(CTX, "max", x, NULL, P1(0)), TGL_FLOAT64, 1, SHAPE(3), VALS(NAN, NAN, 6), 0);
    expect(CTX, ev(CTX, "sum", x, NULL, P1(0)), TGL_FLOAT64, 1, SHAPE(3), VALS(NAN, NAN, 9), 0);
    tgl_array_release(x);
}

static void empty_reductions_give_identities_or_fail_for_max(void **state)
{
    tgl_array *x = mk(CTX, TGL_FLOAT64, 2, SHAPE(0, 3), NULL);
    expect(CTX, ev(CTX, "sum", x, NULL, P1(0)), TGL_FLOAT64, 1, SHAPE(3), VALS(0, 0, 0), 0);
    expect(CTX, ev(CTX, "prod", x, NULL, P1(0)), TGL_FLOAT64, 1, SHAPE(3), VALS(1, 1, 1), 0);
    expect(CTX, ev(CTX, "sum", x, NULL, P2(0, 1)), TGL_FLOAT64, 0, NULL, VALS(0), 0);
    /* reducing the non-empty axis leaves an empty result, no error */
    expect(CTX, ev(CTX, "max", x, NULL, P1(1)), TGL_FLOAT64, 1, SHAPE(0), NULL, 0);
    ev_fails(CTX, "max", x, NULL, P1(0), TGL_ESHAPE, "max: ", "zero-size reduction");
    ev_fails(CTX, "min", x, NULL, P2(0, 1), TGL_ESHAPE, "min: ", "zero-size reduction");
    tgl_array_release(x);
    tgl_array *i = mk(CTX, TGL_INT32, 1, SHAPE(0), NULL);
    expect(CTX, ev(CTX, "prod", i, NULL, P1(0)), TGL_INT64, 0, NULL, VALS(1), 0);
    tgl_array_release(i);
}

static void size_one_axes_reduce_to_themselves(void **state)
{
    tgl_array *x = mk(CTX, TGL_FLOAT64, 2, SHAPE(1, 3), VALS(4, -1, 2));
    expect(CTX, ev(CTX, "sum", x, NULL, P1(0)), TGL_FLOAT64, 1, SHAPE(3), VALS(4, -1, 2), 0);
    expect(CTX, ev(CTX, "max", x, NULL, prm(KEEP, 1, (int64_t)0)), TGL_FLOAT64, 2, SHAPE(1, 3),
           VALS(4, -1, 2), 0);
    expect(CTX, ev(CTX, "min", x, NULL, P1(1)), TGL_FLOAT64, 1, SHAPE(1), VALS(-1), 0);
    tgl_array_release(x);
}

/* x[i,j,k] of a naive oracle: the reduction of x over mask at output
 * position (i,j,k) with reduced coordinates free. */
static double naive(tgl_ctx *ctx, const tgl_array *x, const char *name, unsigned mask,
                    const int64_t *pos)
{
    double acc = !strcmp(name, "sum") ? 0 : !strcmp(name, "max") ? -INFINITY : INFINITY;
    int64_t idx[3];
    for (idx[0] = 0; idx[0] < x->shape[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < x->shape[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < x->shape[2]; idx[2]++) {
                bool hit = true;
                for (int d = 0; d < 3; d++)
                    hit &= ((mask >> d) & 1u) || idx[d] == pos[d];
                if (!hit)
                    continue;
                double v;
                assert_int_equal(tgl_array_get(ctx, x, idx, &v), TGL_OK);
                acc = !strcmp(name, "sum") ? acc + v : !strcmp(name, "max") ? fmax(acc, v)
                                                                            : fmin(acc, v);
            }
    return acc;
}

static void reductions_of_permuted_and_reversed_views_match_a_naive_loop(void **state)
{
    /* A 4x5x6 view of a 5x6x4 array (axes permuted), then with axis 1
     * reversed (negative stride): every subset of axes, keepdims. */
    tgl_array *base = mk(CTX, TGL_FLOAT64, 3, SHAPE(5, 6, 4), NULL);
    for (int64_t i = 0; i < base->size; i++)
        ((double *)base->data)[i] = (double)((i * 37) % 101) - 50;
    tgl_array *x = perm(CTX, base, (const int[]){2, 0, 1});
    int64_t shape[3] = {4, 5, 6}, strides[3] = {x->strides[0], -x->strides[1], x->strides[2]};
    tgl_array_retain(x);
    tgl_array *r = view(CTX, x, 3, shape, strides, 4 * x->strides[1]);
    tgl_array *views[2] = {x, r};
    const char *names[3] = {"sum", "max", "min"};
    for (int v = 0; v < 2; v++)
        for (int o = 0; o < 3; o++)
            for (unsigned mask = 1; mask < 8; mask++) {
                tgl_params p = prm(KEEP, 0);
                for (int d = 0; d < 3; d++)
                    if ((mask >> d) & 1u)
                        p.i[p.n++] = d;
                tgl_array *y = ev(CTX, names[o], views[v], NULL, p);
                for (int64_t i = 0; i < y->size; i++) {
                    int64_t pos[3], rem = i;
                    for (int d = 2; d >= 0; d--)
                        pos[d] = rem % y->shape[d], rem /= y->shape[d];
                    double want = naive(CTX, views[v], names[o], mask, pos);
                    if (at(CTX, y, i) != want)
                        fail_msg("%s over mask %u of view %d: element %lld is %g, expected %g",
                                 names[o], mask, v, (long long)i, at(CTX, y, i), want);
                }
                tgl_array_release(y);
            }
    tgl_array_release(x);
    tgl_array_release(r);
}

static void reductions_reject_bad_axes_and_flags(void **state)
{
    tgl_node *x = var(CTX, TGL_FLOAT32, 2, 0);
    apply_fails(CTX, "sum", x, NULL, P1(2), TGL_EINVAL, "axis 3 is out of range");
    apply_fails(CTX, "max", x, NULL, P1(-1), TGL_EINVAL, "out of range");
    apply_fails(CTX, "sum", x, NULL, P2(1, 1), TGL_EINVAL, "listed twice");
    apply_fails(CTX, "prod", x, NULL, P2(1, 0), TGL_EINVAL, "ascending order");
    apply_fails(CTX, "min", x, NULL, P3(0, 1, 1), TGL_EINVAL, "3 axes given for a 2-d input");
    apply_fails(CTX, "sum", x, NULL, prm(2, 1, (int64_t)0), TGL_EINVAL, "unknown flags");
    /* argmax takes exactly one axis */
    apply_fails(CTX, "argmax", x, NULL, P2(0, 1), TGL_EINVAL, "exactly one axis");
    apply_fails(CTX, "argmin", x, NULL, P0(), TGL_EINVAL, "exactly one axis");
    apply_fails(CTX, "argmax", x, NULL, P1(5), TGL_EINVAL, "out of range");
    apply_fails(CTX, "axes_size", x, NULL, P2(1, 0), TGL_EINVAL, "ascending order");
}

static void reduction_types_follow_the_input(void **state)
{
    tgl_node *x = var(CTX, TGL_INT32, 3, 2u); /* (?, 1, ?) */
    expect_type(ty(CTX, "sum", x, NULL, P1(0)), TGL_INT64, 2, 1u);
    expect_type(ty(CTX, "max", x, NULL, P1(2)), TGL_INT32, 2, 2u);
    expect_type(ty(CTX, "prod", x, NULL, prm(KEEP, 1, (int64_t)2)), TGL_INT64, 3, 6u);
    expect_type(ty(CTX, "argmax", x, NULL, P1(0)), TGL_INT64, 2, 1u);
    expect_type(ty(CTX, "argmin", x, NULL, prm(KEEP, 1, (int64_t)0)), TGL_INT64, 3, 3u);
    expect_type(ty(CTX, "axes_size", x, NULL, P2(0, 2)), TGL_INT64, 0, 0);
    tgl_node *f = var(CTX, TGL_FLOAT64, 1, 0);
    expect_type(ty(CTX, "prod", f, NULL, P1(0)), TGL_FLOAT64, 0, 0);
}

/* ------------------------------------------------------------------------ */
/* argmax, argmin, axes_size                                                */
/* ------------------------------------------------------------------------ */

static void argmax_gives_1_based_positions_and_the_first_of_ties(void **state)
{
    tgl_array *x = mk(CTX, TGL_FLOAT64, 2, SHAPE(2, 3), VALS(1, 5, 3, 7, 2, 7));
    expect(CTX, ev(CTX, "argmax", x, NULL, P1(1)), TGL_INT64, 1, SHAPE(2), VALS(2, 1), 0);
    expect(CTX, ev(CTX, "argmax", x, NULL, P1(0)), TGL_INT64, 1, SHAPE(3), VALS(2, 1, 2), 0);
    expect(CTX, ev(CTX, "argmin", x, NULL, P1(1)), TGL_INT64, 1, SHAPE(2), VALS(1, 2), 0);
    expect(CTX, ev(CTX, "argmin", x, NULL, prm(KEEP, 1, (int64_t)0)), TGL_INT64, 2, SHAPE(1, 3),
           VALS(1, 2, 1), 0);
    tgl_array_release(x);
    tgl_array *t = mk(CTX, TGL_FLOAT32, 1, SHAPE(4), VALS(3, 3, 1, 1));
    expect(CTX, ev(CTX, "argmax", t, NULL, P1(0)), TGL_INT64, 0, NULL, VALS(1), 0);
    expect(CTX, ev(CTX, "argmin", t, NULL, P1(0)), TGL_INT64, 0, NULL, VALS(3), 0);
    tgl_array_release(t);
}

static void argmax_counts_nan_as_the_extreme(void **state)
{
    tgl_array *x = mk(CTX, TGL_FLOAT64, 1, SHAPE(4), VALS(1, NAN, 5, NAN));
    expect(CTX, ev(CTX, "argmax", x, NULL, P1(0)), TGL_INT64, 0, NULL, VALS(2), 0);
    expect(CTX, ev(CTX, "argmin", x, NULL, P1(0)), TGL_INT64, 0, NULL, VALS(2), 0);
    tgl_array_release(x);
    tgl_array *y = mk(CTX, TGL_FLOAT32, 1, SHAPE(2), VALS(NAN, 9));
    expect(CTX, ev(CTX, "argmax", y, NULL, P1(0)), TGL_INT64, 0, NULL, VALS(1), 0);
    tgl_array_release(y);
}

static void argmax_of_integers_bools_and_transposed_views(void **state)
{
    tgl_array *i = mk(CTX, TGL_INT64, 2, SHAPE(2, 2), VALS(-5, -2, 8, 8));
    expect(CTX, ev(CTX, "argmax", i, NULL, P1(1)), TGL_INT64, 1, SHAPE(2), VALS(2, 1), 0);
    tgl_array *it = perm(CTX, i, NULL); /* [[-5,8],[-2,8]] */
    expect(CTX, ev(CTX, "argmax", it, NULL, P1(1)), TGL_INT64, 1, SHAPE(2), VALS(2, 2), 0);
    expect(CTX, ev(CTX, "argmin", it, NULL, P1(0)), TGL_INT64, 1, SHAPE(2), VALS(1, 1), 0);
    tgl_array_release(it);
    tgl_array *b = mk(CTX, TGL_BOOL, 1, SHAPE(3), VALS(0, 1, 1));
    expect(CTX, ev(CTX, "argmax", b, NULL, P1(0)), TGL_INT64, 0, NULL, VALS(2), 0);
    tgl_array_release(b);
    tgl_array *u = mk(CTX, TGL_UINT8, 1, SHAPE(3), VALS(9, 255, 0));
    expect(CTX, ev(CTX, "argmin", u, NULL, P1(0)), TGL_INT64, 0, NULL, VALS(3), 0);
    tgl_array_release(u);
}

static void argmax_over_an_empty_axis_fails(void **state)
{
    tgl_array *x = mk(CTX, TGL_FLOAT32, 2, SHAPE(2, 0), NULL);
    ev_fails(CTX, "argmax", x, NULL, P1(1), TGL_ESHAPE, "argmax: ", "zero-size reduction");
    expect(CTX, ev(CTX, "argmin", x, NULL, P1(0)), TGL_INT64, 1, SHAPE(0), NULL, 0);
    tgl_array_release(x);
}

static void axes_size_counts_elements_over_axes(void **state)
{
    tgl_array *x = mk(CTX, TGL_FLOAT32, 3, SHAPE(2, 3, 4), NULL);
    expect(CTX, ev(CTX, "axes_size", x, NULL, P2(0, 2)), TGL_INT64, 0, NULL, VALS(8), 0);
    expect(CTX, ev(CTX, "axes_size", x, NULL, P3(0, 1, 2)), TGL_INT64, 0, NULL, VALS(24), 0);
    expect(CTX, ev(CTX, "axes_size", x, NULL, P0()), TGL_INT64, 0, NULL, VALS(1), 0);
    expect(CTX, ev(CTX, "axes_size", x, NULL, prm(KEEP, 1, (int64_t)1)), TGL_INT64, 0, NULL,
           VALS(3), 0);
    tgl_array_release(x);
    tgl_array *e = mk(CTX, TGL_INT32, 2, SHAPE(0, 5), NULL);
    expect(CTX, ev(CTX, "axes_size", e, NULL, P1(1)), TGL_INT64, 0, NULL, VALS(5), 0);
    expect(CTX, ev(CTX, "axes_size", e, NULL, P1(0)), TGL_INT64, 0, NULL, VALS(0), 0);
    tgl_array_release(e);
}

/* ------------------------------------------------------------------------ */
/* dot, batched_dot                                                         */
/* ------------------------------------------------------------------------ */

static void dot_of_vectors_and_matrices(void **state)
{
    tgl_array *u = mk(CTX, TGL_FLOAT64, 1, SHAPE(3), VALS(1, 2, 3));
    tgl_array *v = mk(CTX, TGL_FLOAT64, 1, SHAPE(3), VALS(4, 5, 6));
    tgl_array *A = mk(CTX, TGL_FLOAT64, 2, SHAPE(2, 3), M23);
    tgl_array *B = mk(CTX, TGL_FLOAT64, 2, SHAPE(3, 2), VALS(7, 8, 9, 10, 11, 12));
    tgl_array *w = mk(CTX, TGL_FLOAT64, 1, SHAPE(2), VALS(1, 2));
    expect(CTX, ev(CTX, "dot", u, v, P0()), TGL_FLOAT64, 0, NULL, VALS(32), 0);
    expect(CTX, ev(CTX, "dot", A, u, P0()), TGL_FLOAT64, 1, SHAPE(2), VALS(14, 32), 0);
    expect(CTX, ev(CTX, "dot", w, A, P0()), TGL_FLOAT64, 1, SHAPE(3), VALS(9, 12, 15), 0);
    expect(CTX, ev(CTX, "dot", A, B, P0()), TGL_FLOAT64, 2, SHAPE(2, 2), VALS(58, 64, 139, 154), 0);
    expect(CTX, ev(CTX, "dot", B, A, P0()), TGL_FLOAT64, 2, SHAPE(3, 3),
           VALS(39, 54, 69, 49, 68, 87, 59, 82, 105), 0);
    tgl_array *fs[5] = {u, v, A, B, w};
    for (int i = 0; i < 5; i++)
        tgl_array_release(fs[i]);
}

static void dot_in_float32_and_mixed_dtypes_promotes(void **state)
{
    tgl_array *A = mk(CTX, TGL_FLOAT32, 2, SHAPE(2, 3), M23);
    tgl_array *Ai = mk(CTX, TGL_INT32, 2, SHAPE(2, 3), M23);
    tgl_array *B = mk(CTX, TGL_FLOAT32, 2, SHAPE(3, 2), VALS(7, 8, 9, 10, 11, 12));
    tgl_array *Bd = mk(CTX, TGL_FLOAT64, 2, SHAPE(3, 2), VALS(7, 8, 9, 10, 11, 12));
    tgl_array *u = mk(CTX, TGL_FLOAT32, 1, SHAPE(3), VALS(0.5, 0.25, 2));
    expect(CTX, ev(CTX, "dot", A, B, P0()), TGL_FLOAT32, 2, SHAPE(2, 2), VALS(58, 64, 139, 154), 0);
    expect(CTX, ev(CTX, "dot", A, u, P0()), TGL_FLOAT32, 1, SHAPE(2), VALS(7, 15.25), 0);
    expect(CTX, ev(CTX, "dot", u, u, P0()), TGL_FLOAT32, 0, NULL, VALS(4.3125), 0);
    expect(CTX, ev(CTX, "dot", Ai, B, P0()), TGL_FLOAT32, 2, SHAPE(2, 2), VALS(58, 64, 139, 154), 0);
    expect(CTX, ev(CTX, "dot", A, Bd, P0()), TGL_FLOAT64, 2, SHAPE(2, 2), VALS(58, 64, 139, 154), 0);
    tgl_array *fs[5] = {A, Ai, B, Bd, u};
    for (int i = 0; i < 5; i++)
        tgl_array_release(fs[i]);
}

static void dot_of_integers_and_bools_loops_exactly(void **state)
{
    tgl_array *A = mk(CTX, TGL_INT32, 2, SHAPE(2, 3), VALS(1, -2, 3, 4, 5, -6));
    tgl_array *B = mk(CTX, TGL_INT32, 2, SHAPE(3, 2), VALS(7, 8, 9, 10, 11, 12));
    expect(CTX, ev(CTX, "dot", A, B, P0()), TGL_INT32, 2, SHAPE(2, 2), VALS(22, 24, 7, 10), 0);
    tgl_array *At = perm(CTX, A, NULL); /* 3x2, strided */
    tgl_array *w = mk(CTX, TGL_INT64, 1, SHAPE(2), VALS(1, -1));
    expect(CTX, ev(CTX, "dot", At, w, P0()), TGL_INT64, 1, SHAPE(3), VALS(-3, -7, 9), 0);
    tgl_array *b = mk(CTX, TGL_BOOL, 1, SHAPE(4), VALS(1, 1, 0, 1));
    expect(CTX, ev(CTX, "dot", b, b, P0()), TGL_INT64, 0, NULL, VALS(3), 0);
    tgl_array *fs[4] = {At, B, w, b};
    for (int i = 0; i < 4; i++)
        tgl_array_release(fs[i]);
}

static void dot_reads_transposed_and_strided_inputs(void **state)
{
    /* At = A^T stored column-major (BLAS reads it with the transpose
     * flag); Ae = every other column of a 2x6 (needs a copy); r = a
     * reversed vector (negative stride, copied). */
    tgl_array *At = perm(CTX, mk(CTX, TGL_FLOAT64, 2, SHAPE(3, 2), VALS(1, 4, 2, 5, 3, 6)), NULL);
    tgl_array *Bt = perm(CTX, mk(CTX, TGL_FLOAT32, 2, SHAPE(2, 3), VALS(7, 9, 11, 8, 10, 12)), NULL);
    tgl_array *Ae = view(CTX, mk(CTX, TGL_FLOAT64, 2, SHAPE(2, 6), VALS(1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0)),
                         2, SHAPE(2, 3), SHAPE(6, 2), 0);
    tgl_array *r = view(CTX, mk(CTX, TGL_FLOAT64, 1, SHAPE(3), VALS(3, 2, 1)), 1, SHAPE(3),
                        SHAPE(-1), 2);
    tgl_array *s = view(CTX, mk(CTX, TGL_FLOAT32, 1, SHAPE(4), VALS(1, 9, 2, 9)), 1, SHAPE(2),
                        SHAPE(2), 0); /* [1, 2] at stride 2 */
    tgl_array *mats[2] = {At, Ae}; /* both are [[1,2,3],[4,5,6]] */
    for (int i = 0; i < 2; i++) {
        expect(CTX, ev(CTX, "dot", mats[i], Bt, P0()), TGL_FLOAT64, 2, SHAPE(2, 2),
               VALS(58, 64, 139, 154), 0);
        expect(CTX, ev(CTX, "dot", mats[i], r, P0()), TGL_FLOAT64, 1, SHAPE(2), VALS(14, 32), 0);
        expect(CTX, ev(CTX, "dot", s, mats[i], P0()), TGL_FLOAT64, 1, SHAPE(3), VALS(9, 12, 15), 0);
    }
    expect(CTX, ev(CTX, "dot", Bt, s, P0()), TGL_FLOAT32, 1, SHAPE(3), VALS(23, 29, 35), 0);
    expect(CTX, ev(CTX, "dot", r, r, P0()), TGL_FLOAT64, 0, NULL, VALS(14), 0);
    /* same-dtype operands, so BLAS reads the transposed views in place:
     * A^T A, A B with B transposed, and both transposed */
    tgl_array *A = mk(CTX, TGL_FLOAT64, 2, SHAPE(2, 3), M23);
    tgl_array *AT = perm(CTX, mk(CTX, TGL_FLOAT64, 2, SHAPE(2, 3), M23), NULL);
    tgl_array *Btd = perm(CTX, mk(CTX, TGL_FLOAT64, 2, SHAPE(2, 3), VALS(7, 9, 11, 8, 10, 12)), NULL);
    expect(CTX, ev(CTX, "dot", AT, A, P0()), TGL_FLOAT64, 2, SHAPE(3, 3),
           VALS(17, 22, 27, 22, 29, 36, 27, 36, 45), 0);
    expect(CTX, ev(CTX, "dot", A, Btd, P0()), TGL_FLOAT64, 2, SHAPE(2, 2), VALS(58, 64, 139, 154), 0);
    expect(CTX, ev(CTX, "dot", At, Btd, P0()), TGL_FLOAT64, 2, SHAPE(2, 2), VALS(58, 64, 139, 154), 0);
    tgl_array *fs[8] = {At, Bt, Ae, r, s, A, AT, Btd};
    for (int i = 0; i < 8; i++)
        tgl_array_release(fs[i]);
}

static void dot_with_a_zero_size_gives_zeros_or_empty(void **state)
{
    tgl_array *A = mk(CTX, TGL_FLOAT32, 2, SHAPE(2, 0), NULL);
    tgl_array *B = mk(CTX, TGL_FLOAT32, 2, SHAPE(0, 3), NULL);
    tgl_array *e = mk(CTX, TGL_FLOAT64, 1, SHAPE(0), NULL);
    tgl_array *Ei = mk(CTX, TGL_INT32, 2, SHAPE(0, 2), NULL);
    tgl_array *Ci = mk(CTX, TGL_INT32, 2, SHAPE(2, 4), NULL);
    tgl_array *Z = mk(CTX, TGL_FLOAT32, 2, SHAPE(0, 2), NULL);
    expect(CTX, ev(CTX, "dot", A, B, P0()), TGL_FLOAT32, 2, SHAPE(2, 3), VALS(0, 0, 0, 0, 0, 0), 0);
    expect(CTX, ev(CTX, "dot", e, e, P0()), TGL_FLOAT64, 0, NULL, VALS(0), 0);
    expect(CTX, ev(CTX, "dot", A, e, P0()), TGL_FLOAT64, 1, SHAPE(2), VALS(0, 0), 0);
    expect(CTX, ev(CTX, "dot", Z, A, P0()), TGL_FLOAT32, 2, SHAPE(0, 0), NULL, 0);
    expect(CTX, ev(CTX, "dot", Ei, Ci, P0()), TGL_INT32, 2, SHAPE(0, 4), NULL, 0);
    tgl_array *fs[6] = {A, B, e, Ei, Ci, Z};
    for (int i = 0; i < 6; i++)
        tgl_array_release(fs[i]);
}

static void dot_checks_inner_sizes_when_it_runs(void **state)
{
    tgl_array *A = mk(CTX, TGL_FLOAT64, 2, SHAPE(2, 3), NULL);
    tgl_array *B = mk(CTX, TGL_FLOAT64, 2, SHAPE(4, 2), NULL);
    tgl_array *v = mk(CTX, TGL_FLOAT64, 1, SHAPE(4), NULL);
    ev_fails(CTX, "dot", A, B, P0(), TGL_ESHAPE, "dot: ", "inner sizes 3 and 4 differ");
    ev_fails(CTX, "dot", A, v, P0(), TGL_ESHAPE, "dot: ", "inner sizes 3 and 4 differ");
    ev_fails(CTX, "dot", v, A, P0(), TGL_ESHAPE, "dot: ", "inner sizes 4 and 2 differ");
    tgl_array_release(A);
    tgl_array_release(B);
    tgl_array_release(v);
}

static void dot_types_and_rejected_inputs(void **state)
{
    tgl_node *m = var(CTX, TGL_FLOAT32, 2, 1u), *n = var(CTX, TGL_FLOAT64, 2, 0);
    tgl_node *v = var(CTX, TGL_INT32, 1, 0), *c = var(CTX, TGL_FLOAT32, 2, 2u);
    expect_type(ty(CTX, "dot", m, n, P0()), TGL_FLOAT64, 2, 1u);
    expect_type(ty(CTX, "dot", n, c, P0()), TGL_FLOAT64, 2, 2u);
    expect_type(ty(CTX, "dot", m, v, P0()), TGL_FLOAT32, 1, 1u);
    expect_type(ty(CTX, "dot", v, c, P0()), TGL_FLOAT32, 1, 1u);
    expect_type(ty(CTX, "dot", v, v, P0()), TGL_INT32, 0, 0);
    tgl_node *t = var(CTX, TGL_FLOAT32, 3, 0), *s = var(CTX, TGL_FLOAT32, 0, 0);
    apply_fails(CTX, "dot", t, m, P0(), TGL_ESHAPE, "got 3-d and 2-d");
    apply_fails(CTX, "dot", v, s, P0(), TGL_ESHAPE, "vectors and matrices");
    apply_fails(CTX, "dot", m, n, P1(0), TGL_EINVAL, "no parameters");
}

static void batched_dot_multiplies_each_pair_of_matrices(void **state)
{
    /* a[0] = [[1,2,3],[4,5,6]], a[1] = [[7,8,9],[10,11,12]];
     * b[0] = [[1,0],[0,1],[1,1]], b[1] = [[2,0],[0,0],[0,-1]] */
    tgl_array *a = mk(CTX, TGL_FLOAT64, 3, SHAPE(2, 2, 3), VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12));
    tgl_array *b = mk(CTX, TGL_FLOAT32, 3, SHAPE(2, 3, 2), VALS(1, 0, 0, 1, 1, 1, 2, 0, 0, 0, 0, -1));
    const double *want = VALS(4, 5, 10, 11, 14, -9, 20, -12);
    expect(CTX, ev(CTX, "batched_dot", a, b, P0()), TGL_FLOAT64, 3, SHAPE(2, 2, 2), want, 0);
    /* the same b stored as b^T per batch (a permuted view) */
    tgl_array *bt = perm(CTX, mk(CTX, TGL_FLOAT64, 3, SHAPE(2, 2, 3), VALS(1, 0, 1, 0, 1, 1, 2, 0, 0, 0, 0, -1)),
                         (const int[]){0, 2, 1});
    expect(CTX, ev(CTX, "batched_dot", a, bt, P0()), TGL_FLOAT64, 3, SHAPE(2, 2, 2), want, 0);
    tgl_array *ai = mk(CTX, TGL_INT64, 3, SHAPE(2, 2, 3), VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12));
    tgl_array *bi = mk(CTX, TGL_INT32, 3, SHAPE(2, 3, 2), VALS(1, 0, 0, 1, 1, 1, 2, 0, 0, 0, 0, -1));
    expect(CTX, ev(CTX, "batched_dot", ai, bi, P0()), TGL_INT64, 3, SHAPE(2, 2, 2), want, 0);
    tgl_array *z = mk(CTX, TGL_FLOAT32, 3, SHAPE(2, 2, 0), NULL), *z2 = mk(CTX, TGL_FLOAT32, 3, SHAPE(2, 0, 1), NULL);
    expect(CTX, ev(CTX, "batched_dot", z, z2, P0()), TGL_FLOAT32, 3, SHAPE(2, 2, 1), VALS(0, 0, 0, 0), 0);
    tgl_array *fs[7] = {a, b, bt, ai, bi, z, z2};
    for (int i = 0; i < 7; i++)
        tgl_array_release(fs[i]);
}

static void batched_dot_of_2d_inputs_dots_each_row(void **state)
{
    tgl_array *a = mk(CTX, TGL_FLOAT32, 2, SHAPE(2, 2), VALS(1, 2, 3, 4));
    tgl_array *b = mk(CTX, TGL_FLOAT32, 2, SHAPE(2, 2), VALS(5, 6, 7, 8));
    expect(CTX, ev(CTX, "batched_dot", a, b, P0()), TGL_FLOAT32, 1, SHAPE(2), VALS(17, 53), 0);
    tgl_array *bt = perm(CTX, mk(CTX, TGL_INT32, 2, SHAPE(2, 2), VALS(5, 7, 6, 8)), NULL);
    expect(CTX, ev(CTX, "batched_dot", a, bt, P0()), TGL_FLOAT32, 1, SHAPE(2), VALS(17, 53), 0);
    expect(CTX, ev(CTX, "batched_dot", bt, bt, P0()), TGL_INT32, 1, SHAPE(2), VALS(61, 113), 0);
    tgl_array_release(a);
    tgl_array_release(b);
    tgl_array_release(bt);
}

static void batched_dot_checks_sizes_and_ndims(void **state)
{
    tgl_array *a = mk(CTX, TGL_FLOAT64, 3, SHAPE(2, 2, 3), NULL);
    tgl_array *b = mk(CTX, TGL_FLOAT64, 3, SHAPE(3, 3, 2), NULL);
    tgl_array *c = mk(CTX, TGL_FLOAT64, 3, SHAPE(2, 4, 2), NULL);
    tgl_array *r = mk(CTX, TGL_FLOAT64, 2, SHAPE(2, 3), NULL), *q = mk(CTX, TGL_FLOAT64, 2, SHAPE(2, 4), NULL);
    ev_fails(CTX, "batched_dot", a, b, P0(), TGL_ESHAPE, "batched_dot: ", "batch sizes 2 and 3 differ");
    ev_fails(CTX, "batched_dot", a, c, P0(), TGL_ESHAPE, "batched_dot: ", "inner sizes 3 and 4 differ");
    ev_fails(CTX, "batched_dot", r, q, P0(), TGL_ESHAPE, "batched_dot: ", "inner sizes 3 and 4 differ");
    tgl_array *fs[5] = {a, b, c, r, q};
    for (int i = 0; i < 5; i++)
        tgl_array_release(fs[i]);
    tgl_node *t = var(CTX, TGL_FLOAT32, 3, 1u), *u = var(CTX, TGL_FLOAT32, 3, 4u);
    tgl_node *m = var(CTX, TGL_FLOAT32, 2, 0);
    expect_type(ty(CTX, "batched_dot", t, u, P0()), TGL_FLOAT32, 3, 5u);
    expect_type(ty(CTX, "batched_dot", m, m, P0()), TGL_FLOAT32, 1, 0);
    apply_fails(CTX, "batched_dot", t, m, P0(), TGL_ESHAPE, "got 3-d and 2-d");
}

/* ------------------------------------------------------------------------ */
/* softmax, log_softmax, one_hot                                            */
/* ------------------------------------------------------------------------ */

static void softmax_and_log_softmax_of_a_row(void **state)
{
    /* exp(x - logsumexp), logsumexp([1,2,3]) = 3.4076059644443806 */
    tgl_array *x = mk(CTX, TGL_FLOAT64, 2, SHAPE(2, 3), VALS(1, 2, 3, 0, 0, 0));
    expect(CTX, ev(CTX, "softmax", x, NULL, P1(1)), TGL_FLOAT64, 2, SHAPE(2, 3),
           VALS(0.09003057317038046, 0.24472847105479764, 0.6652409557748218, 1 / 3.0, 1 / 3.0,
                1 / 3.0), 1e-15);
    const double l3 = 3.4076059644443806, lg3 = log(3.0);
    expect(CTX, ev(CTX, "log_softmax", x, NULL, P1(1)), TGL_FLOAT64, 2, SHAPE(2, 3),
           VALS(1 - l3, 2 - l3, 3 - l3, -lg3, -lg3, -lg3), 1e-15);
    tgl_array_release(x);
    tgl_array *f = mk(CTX, TGL_FLOAT32, 1, SHAPE(3), VALS(1, 2, 3));
    expect(CTX, ev(CTX, "softmax", f, NULL, P1(0)), TGL_FLOAT32, 1, SHAPE(3),
           VALS(0.09003057317038046, 0.24472847105479764, 0.6652409557748218), 1e-7);
    tgl_array_release(f);
}

static void softmax_rows_sum_to_one_and_log_softmax_exp_sums_to_one(void **state)
{
    tgl_array *x = mk(CTX, TGL_FLOAT32, 2, SHAPE(3, 7), NULL);
    for (int64_t i = 0; i < 21; i++)
        ((float *)x->data)[i] = (float)sin((double)i * 1.7) * 20.0f;
    tgl_array *y = ev(CTX, "softmax", x, NULL, P1(1)), *l = ev(CTX, "log_softmax", x, NULL, P1(1));
    for (int r = 0; r < 3; r++) {
        double s = 0, t = 0;
        for (int k = 0; k < 7; k++) {
            s += at(CTX, y, r * 7 + k);
            t += exp(at(CTX, l, r * 7 + k));
            assert_true(at(CTX, y, r * 7 + k) >= 0);
        }
        assert_true(fabs(s - 1) < 1e-6 && fabs(t - 1) < 1e-6);
    }
    tgl_array_release(y);
    tgl_array_release(l);
    tgl_array_release(x);
}

static void softmax_is_stable_for_huge_logits(void **state)
{
    tgl_array *x = mk(CTX, TGL_FLOAT64, 2, SHAPE(3, 2), VALS(1000, 1000, -1000, 0, 1000, -1000));
    expect(CTX, ev(CTX, "softmax", x, NULL, P1(1)), TGL_FLOAT64, 2, SHAPE(3, 2),
           VALS(0.5, 0.5, 0, 1, 1, 0), 0);
    expect(CTX, ev(CTX, "log_softmax", x, NULL, P1(1)), TGL_FLOAT64, 2, SHAPE(3, 2),
           VALS(-log(2.0), -log(2.0), -1000, 0, 0, -2000), 1e-12);
    tgl_array_release(x);
    tgl_array *f = mk(CTX, TGL_FLOAT32, 1, SHAPE(2), VALS(-1000, 1000));
    expect(CTX, ev(CTX, "log_softmax", f, NULL, P1(0)), TGL_FLOAT32, 1, SHAPE(2), VALS(-2000, 0), 0);
    tgl_array_release(f);
}

static void softmax_along_a_leading_axis(void **state)
{
    /* axis 0 of [[0,1],[0,1],[0,1]]^T-like columns: column j is (j, 0, 0) */
    tgl_array *x = mk(CTX, TGL_FLOAT64, 2, SHAPE(3, 2), VALS(0, 1, 0, 0, 0, 0));
    double e = exp(1.0), p = e / (e + 2), q = 1 / (e + 2);
    expect(CTX, ev(CTX, "softmax", x, NULL, P1(0)), TGL_FLOAT64, 2, SHAPE(3, 2),
           VALS(1 / 3.0, p, 1 / 3.0, q, 1 / 3.0, q), 1e-15);
    expect(CTX, ev(CTX, "log_softmax", x, NULL, P1(0)), TGL_FLOAT64, 2, SHAPE(3, 2),
           VALS(-log(3.0), log(p), -log(3.0), log(q), -log(3.0), log(q)), 1e-15);
    /* the same through a transposed view, along axis 1 */
    tgl_array *t = perm(CTX, x, NULL);
    expect(CTX, ev(CTX, "softmax", t, NULL, P1(1)), TGL_FLOAT64, 2, SHAPE(2, 3),
           VALS(1 / 3.0, 1 / 3.0, 1 / 3.0, p, q, q), 1e-15);
    tgl_array_release(t);
}

static void softmax_handles_infinite_logits_as_limits(void **state)
{
    tgl_array *x = mk(CTX, TGL_FLOAT64, 2, SHAPE(4, 3),
                      VALS(-INFINITY, 0, 0, INFINITY, 1, INFINITY, -INFINITY, -INFINITY, -INFINITY,
                           1, NAN, 2));
    expect(CTX, ev(CTX, "softmax", x, NULL, P1(1)), TGL_FLOAT64, 2, SHAPE(4, 3),
           VALS(0, 0.5, 0.5, 0.5, 0, 0.5, 1 / 3.0, 1 / 3.0, 1 / 3.0, NAN, NAN, NAN), 1e-15);
    expect(CTX, ev(CTX, "log_softmax", x, NULL, P1(1)), TGL_FLOAT64, 2, SHAPE(4, 3),
           VALS(-INFINITY, -log(2.0), -log(2.0), -log(2.0), -INFINITY, -log(2.0), -log(3.0),
                -log(3.0), -log(3.0), NAN, NAN, NAN), 1e-15);
    tgl_array_release(x);
}

static void softmax_types_and_rejected_inputs(void **state)
{
    tgl_node *x = var(CTX, TGL_FLOAT32, 2, 1u), *i = var(CTX, TGL_INT32, 2, 0);
    expect_type(ty(CTX, "softmax", x, NULL, P1(1)), TGL_FLOAT32, 2, 1u);
    expect_type(ty(CTX, "log_softmax", x, NULL, P1(0)), TGL_FLOAT32, 2, 1u);
    apply_fails(CTX, "softmax", i, NULL, P1(1), TGL_EDTYPE, "float32 or float64 input, got int32");
    apply_fails(CTX, "log_softmax", x, NULL, P1(2), TGL_EINVAL, "axis 3 is out of range");
    apply_fails(CTX, "softmax", x, NULL, P0(), TGL_EINVAL, "exactly one axis");
    apply_fails(CTX, "softmax", x, NULL, P2(0, 1), TGL_EINVAL, "exactly one axis");
    tgl_array *e = mk(CTX, TGL_FLOAT32, 2, SHAPE(0, 3), NULL);
    expect(CTX, ev(CTX, "softmax", e, NULL, P1(1)), TGL_FLOAT32, 2, SHAPE(0, 3), NULL, 0);
    tgl_array_release(e);
}

static void one_hot_sets_the_1_based_class_of_each_label(void **state)
{
    tgl_array *y = mk(CTX, TGL_INT32, 1, SHAPE(3), VALS(1, 3, 2));
    expect(CTX, ev(CTX, "one_hot", y, NULL, P2(3, TGL_FLOAT32)), TGL_FLOAT32, 2, SHAPE(3, 3),
           VALS(1, 0, 0, 0, 0, 1, 0, 1, 0), 0);
    tgl_array_release(y);
    tgl_array *y2 = mk(CTX, TGL_INT64, 2, SHAPE(2, 2), VALS(2, 2, 1, 4));
    expect(CTX, ev(CTX, "one_hot", y2, NULL, P2(4, TGL_INT64)), TGL_INT64, 3, SHAPE(2, 2, 4),
           VALS(0, 1, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1), 0);
    tgl_array *y2t = perm(CTX, y2, NULL); /* [[2,1],[2,4]] */
    expect(CTX, ev(CTX, "one_hot", y2t, NULL, P2(4, TGL_UINT8)), TGL_UINT8, 3, SHAPE(2, 2, 4),
           VALS(0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1), 0);
    tgl_array_release(y2t);
    tgl_array *u = mk(CTX, TGL_UINT8, 0, NULL, VALS(2));
    expect(CTX, ev(CTX, "one_hot", u, NULL, P2(2, TGL_BOOL)), TGL_BOOL, 1, SHAPE(2), VALS(0, 1), 0);
    tgl_array_release(u);
    tgl_array *e = mk(CTX, TGL_INT32, 1, SHAPE(0), NULL);
    expect(CTX, ev(CTX, "one_hot", e, NULL, P2(5, TGL_FLOAT64)), TGL_FLOAT64, 2, SHAPE(0, 5), NULL, 0);
    tgl_array_release(e);
}

static void one_hot_rejects_labels_outside_the_classes(void **state)
{
    tgl_array *y = mk(CTX, TGL_INT32, 2, SHAPE(2, 2), VALS(1, 2, 0, 1));
    ev_fails(CTX, "one_hot", y, NULL, P2(3, TGL_FLOAT32), TGL_EINVAL, "one_hot: ",
             "label 0 at position (2,1) is outside 1..3");
    tgl_array_release(y);
    tgl_array *z = mk(CTX, TGL_INT64, 1, SHAPE(3), VALS(1, 4, -1));
    ev_fails(CTX, "one_hot", z, NULL, P2(3, TGL_FLOAT32), TGL_EINVAL, "one_hot: ",
             "label 4 at position (2) is outside 1..3");
    tgl_array_release(z);
}

static void one_hot_types_and_rejected_parameters(void **state)
{
    tgl_node *y = var(CTX, TGL_INT32, 2, 2u);
    expect_type(ty(CTX, "one_hot", y, NULL, P2(10, TGL_FLOAT32)), TGL_FLOAT32, 3, 2u);
    expect_type(ty(CTX, "one_hot", y, NULL, P2(1, TGL_INT64)), TGL_INT64, 3, 6u);
    apply_fails(CTX, "one_hot", y, NULL, P2(0, TGL_FLOAT32), TGL_EINVAL, "at least one class");
    apply_fails(CTX, "one_hot", y, NULL, P2(3, 99), TGL_EDTYPE, "unknown dtype");
    apply_fails(CTX, "one_hot", y, NULL, P1(3), TGL_EINVAL, "two parameters");
    apply_fails(CTX, "one_hot", var(CTX, TGL_FLOAT32, 1, 0), NULL, P2(3, TGL_FLOAT32), TGL_EDTYPE,
                "labels must be integers");
    apply_fails(CTX, "one_hot", var(CTX, TGL_BOOL, 1, 0), NULL, P2(3, TGL_FLOAT32), TGL_EDTYPE,
                "got bool");
    apply_fails(CTX, "one_hot", var(CTX, TGL_INT32, 8, 0), NULL, P2(3, TGL_FLOAT32), TGL_ESHAPE,
                "at most 7");
}

/* ------------------------------------------------------------------------ */

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

/* ------------------------------------------------------------------------ */
/* ifelse (control) is lazy: only a compiled function runs it (the CVM     */
/* jumps over the branch not taken); tgl_eval refuses it by name and says  */
/* what to use on arrays, returning nothing.                                */
/* ------------------------------------------------------------------------ */

static void ifelse_is_refused_by_eager_evaluation(void **state)
{
    tgl_ctx *ctx = CTX;
    const double one = 1;
    tgl_array *c = mk(ctx, TGL_FLOAT64, 0, NULL, &one);
    tgl_array *a = mk(ctx, TGL_FLOAT64, 1, SHAPE(2), VALS(1, 2));
    tgl_array *b = mk(ctx, TGL_FLOAT64, 1, SHAPE(2), VALS(3, 4));
    tgl_array *in[3] = {c, a, b}, *out = NULL;
    tgl_params p = P0();
    assert_int_not_equal(tgl_eval(ctx, op("ifelse"), 3, in, &p, &out), TGL_OK);
    assert_non_null(strstr(tgl_ctx_error(ctx), "ifelse needs a graph (use tgl.switch on arrays)"));
    assert_null(out);
    tgl_array_release(c);
    tgl_array_release(a);
    tgl_array_release(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* sum, prod, max, min */
        T(sum_over_one_axis_drops_it),
        T(sum_with_keepdims_keeps_size_one_broadcastable_axes),
        T(sum_over_several_all_and_no_axes_of_a_3d_array),
        T(sum_and_prod_of_integers_and_bools_give_int64),
        T(float32_sums_accumulate_in_double),
        T(prod_max_min_over_axes),
        T(max_min_and_sum_propagate_nan),
        T(empty_reductions_give_identities_or_fail_for_max),
        T(size_one_axes_reduce_to_themselves),
        T(reductions_of_permuted_and_reversed_views_match_a_naive_loop),
        T(reductions_reject_bad_axes_and_flags),
        T(reduction_types_follow_the_input),
        /* argmax, argmin, axes_size */
        T(argmax_gives_1_based_positions_and_the_first_of_ties),
        T(argmax_counts_nan_as_the_extreme),
        T(argmax_of_integers_bools_and_transposed_views),
        T(argmax_over_an_empty_axis_fails),
        T(axes_size_counts_elements_over_axes),
        /* dot, batched_dot */
        T(dot_of_vectors_and_matrices),
        T(dot_in_float32_and_mixed_dtypes_promotes),
        T(dot_of_integers_and_bools_loops_exactly),
        T(dot_reads_transposed_and_strided_inputs),
        T(dot_with_a_zero_size_gives_zeros_or_empty),
        T(dot_checks_inner_sizes_when_it_runs),
        T(dot_types_and_rejected_inputs),
        T(batched_dot_multiplies_each_pair_of_matrices),
        T(batched_dot_of_2d_inputs_dots_each_row),
        T(batched_dot_checks_sizes_and_ndims),
        /* softmax, log_softmax, one_hot */
        T(softmax_and_log_softmax_of_a_row),
        T(softmax_rows_sum_to_one_and_log_softmax_exp_sums_to_one),
        T(softmax_is_stable_for_huge_logits),
        T(softmax_along_a_leading_axis),
        T(softmax_handles_infinite_logits_as_limits),
        T(softmax_types_and_rejected_inputs),
        T(one_hot_sets_the_1_based_class_of_each_label),
        T(one_hot_rejects_labels_outside_the_classes),
        T(one_hot_types_and_rejected_parameters),
        /* ifelse */
        T(ifelse_is_refused_by_eager_evaluation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
