/*
 * test_function.c — graphs and compiled functions through the public C API
 * (include/tgl.h): building nodes with tgl_node_input/constant/shared and
 * tgl_apply (inferred types, broadcasting by padding, source lines),
 * hash-consing, tgl_grad against analytic derivatives, and compiled
 * functions: tgl_function_new/call/run/output/program/profile, updates
 * (applied together, after the outputs), the three linkers, the lazy
 * ifelse, and every error status with its message — a failed call leaves
 * the shared variables and the out-parameters as they were.
 *
 * Every test runs with a fresh context; the teardown frees it and checks
 * that every array the test made is released (nodes and functions own
 * theirs until the context and the functions go).
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

#include <tgl.h>

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */
/* ------------------------------------------------------------------------ */

#include "tgl_fixture.h"

#define CTX (((fixture *)*state)->ctx)

/* A pointer value no allocation returns: out-params must keep it on failure. */
#define SENTINEL ((tgl_array *)(uintptr_t)0x5e47)
#define NODE_SENTINEL ((tgl_node *)(uintptr_t)0x5e48)

/* A failed call: the status, and a message that starts with prefix and
 * contains needle. */
#define assert_fails(ctx, call, want_status, prefix, needle)                          \
    do {                                                                              \
        tgl_ctx_clear_error(ctx);                                                     \
        tgl_status st_ = (call);                                                      \
        const char *msg_ = tgl_ctx_error(ctx);                                        \
        if (st_ != (want_status))                                                     \
            fail_msg("%s returned status %d, expected %d (message: %s)", #call,       \
                     (int)st_, (int)(want_status), msg_);                             \
        if (strncmp(msg_, prefix, strlen(prefix)) != 0)                               \
            fail_msg("message of %s does not start with '%s': %s", #call, prefix, msg_); \
        if (!strstr(msg_, needle))                                                    \
            fail_msg("message of %s does not mention '%s': %s", #call, needle, msg_); \
    } while (0)

#define assert_near(got, want, tol)                                                   \
    do {                                                                              \
        double g_ = (got), w_ = (want);                                               \
        if (!(fabs(g_ - w_) <= (tol) * (1 + fabs(w_))))                               \
            fail_msg("%s is %.17g, expected %.17g", #got, g_, w_);                    \
    } while (0)

static int op(const char *name)
{
    int id = tgl_op_lookup(name);
    if (id < 0)
        fail_msg("no op named %s", name);
    return id;
}

/* A float64 array of the given shape holding vals (C order). */
static tgl_array *f64(tgl_ctx *ctx, int ndim, const int64_t *shape, const double *vals)
{
    tgl_array *a = NULL;
    assert_ok(ctx, tgl_array_empty(ctx, TGL_FLOAT64, ndim, shape, &a));
    for (int64_t i = 0; i < a->size; i++)
        ((double *)a->data)[i] = vals[i];
    return a;
}

static tgl_array *f64_scalar(tgl_ctx *ctx, double v)
{
    tgl_array *a = NULL;
    assert_ok(ctx, tgl_array_full(ctx, TGL_FLOAT64, 0, NULL, v, &a));
    return a;
}

static void assert_values(tgl_ctx *ctx, const tgl_array *a, const double *want, int64_t n,
                          double tol)
{
    assert_int_equal(a->size, n);
    for (int64_t i = 0; i < n; i++) {
        double g = elem(ctx, a, i);
        if (!(fabs(g - want[i]) <= tol * (1 + fabs(want[i]))))
            fail_msg("element %lld is %.17g, expected %.17g", (long long)i, g, want[i]);
    }
}

static tgl_node *input(tgl_ctx *ctx, int dtype, int ndim, uint32_t bcast, const char *name)
{
    tgl_node *n = NULL;
    tgl_type t = {dtype, ndim, bcast};
    assert_ok(ctx, tgl_node_input(ctx, t, name, &n));
    return n;
}

/* A constant holding a (released here: the node keeps its own copy). */
static tgl_node *constant(tgl_ctx *ctx, tgl_array *a)
{
    tgl_node *n = NULL;
    assert_ok(ctx, tgl_node_constant(ctx, a, &n));
    tgl_array_release(a);
    return n;
}

/* A shared variable starting at a (the reference is handed to the node). */
static tgl_node *shared(tgl_ctx *ctx, tgl_array *a, const char *name)
{
    tgl_node *n = NULL;
    assert_ok(ctx, tgl_node_shared(ctx, a, 0, name, &n));
    tgl_array_release(a);
    return n;
}

static tgl_node *apply(tgl_ctx *ctx, const char *name, int nin, tgl_node *const *in,
                       const tgl_params *p, const char *source)
{
    tgl_node *n = NULL;
    assert_ok(ctx, tgl_apply(ctx, op(name), nin, in, p, source, &n));
    return n;
}

static tgl_node *ap1(tgl_ctx *ctx, const char *name, tgl_node *a)
{
    return apply(ctx, name, 1, &a, NULL, NULL);
}

static tgl_node *ap2(tgl_ctx *ctx, const char *name, tgl_node *a, tgl_node *b)
{
    tgl_node *in[2] = {a, b};
    return apply(ctx, name, 2, in, NULL, NULL);
}

/* The sum over every axis of x (a scalar). */
static tgl_node *sum_all(tgl_ctx *ctx, tgl_node *x)
{
    tgl_params p = {0};
    p.n = tgl_node_type(x).ndim;
    for (int d = 0; d < p.n; d++)
        p.i[d] = d;
    return apply(ctx, "sum", 1, &x, &p, NULL);
}

/* Fields set by name: the struct may grow (a later field defaults to 0). */
static tgl_compile_options options(int linker, int profile, const char *name)
{
    tgl_compile_options o;
    memset(&o, 0, sizeof o);
    o.linker = linker;
    o.profile = profile;
    o.name = name;
    return o;
}

/* A function of nin inputs and nout outputs, no updates. */
static tgl_function *compile(tgl_ctx *ctx, int nin, tgl_node *const *in, int nout,
                             tgl_node *const *out, const char *name)
{
    tgl_function *fn = NULL;
    tgl_compile_options o = options(TGL_LINKER_CVM, 0, name);
    assert_ok(ctx, tgl_function_new(ctx, nin, in, nout, out, 0, NULL, NULL, &o, &fn));
    return fn;
}

/* The current value of a shared variable (a new reference). */
static tgl_array *value(tgl_ctx *ctx, tgl_node *s)
{
    tgl_array *v = NULL;
    assert_ok(ctx, tgl_shared_get(ctx, s, &v));
    return v;
}

static double scalar_value(tgl_ctx *ctx, tgl_node *s)
{
    tgl_array *v = value(ctx, s);
    double d = elem(ctx, v, 0);
    tgl_array_release(v);
    return d;
}

/* ------------------------------------------------------------------------ */
/* graphs                                                                   */
/* ------------------------------------------------------------------------ */

static void apply_infers_types_and_keeps_names_and_sources(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *x = input(ctx, TGL_FLOAT64, 2, 0, "x");
    tgl_node *W = shared(ctx, f64(ctx, 2, (int64_t[]){3, 2}, (double[]){1, 2, 3, 4, 5, 6}), "W");
    tgl_node *xw[2] = {x, W};
    tgl_node *d = apply(ctx, "dot", 2, xw, NULL, "model.lua:3");
    tgl_node *y = apply(ctx, "tanh", 1, &d, NULL, "model.lua:4");

    tgl_type t = tgl_node_type(y);
    assert_int_equal(t.dtype, TGL_FLOAT64);
    assert_int_equal(t.ndim, 2);
    assert_int_equal(t.bcast, 0);
    assert_int_equal(tgl_node_kind_of(y), TGL_NODE_APPLY);
    assert_int_equal(tgl_node_op(y), op("tanh"));
    assert_int_equal(tgl_node_ninputs(y), 1);
    assert_ptr_equal(tgl_node_input_at(y, 0), d);
    assert_null(tgl_node_input_at(y, 1));
    assert_ptr_equal(tgl_node_input_at(d, 0), x);
    assert_ptr_equal(tgl_node_input_at(d, 1), W);
    assert_string_equal(tgl_node_source(d), "model.lua:3");
    assert_string_equal(tgl_node_source(y), "model.lua:4");
    assert_string_equal(tgl_node_name(x), "x");
    assert_string_equal(tgl_node_name(W), "W");
    assert_string_equal(tgl_node_name(y), "");
    assert_int_equal(tgl_node_kind_of(x), TGL_NODE_INPUT);
    assert_int_equal(tgl_node_kind_of(W), TGL_NODE_SHARED);
    assert_null(tgl_node_value(W));
    assert_ok(ctx, tgl_node_set_name(ctx, y, "hidden"));
    assert_string_equal(tgl_node_name(y), "hidden");

    /* A vector added to a matrix is padded with a broadcastable axis. */
    tgl_node *b = input(ctx, TGL_FLOAT64, 1, 0, "b");
    tgl_node *h = ap2(ctx, "add", y, b);
    tgl_node *pb = tgl_node_input_at(h, 1);
    assert_int_equal(tgl_node_op(pb), op("dimshuffle"));
    assert_ptr_equal(tgl_node_input_at(pb, 0), b);
    assert_int_equal(tgl_node_type(pb).ndim, 2);
    assert_int_equal(tgl_node_type(pb).bcast, 1u);
    assert_int_equal(tgl_node_type(h).bcast, 0);

    /* Comparisons give bool; sum of all axes gives a scalar. */
    assert_int_equal(tgl_node_type(ap2(ctx, "lt", x, x)).dtype, TGL_BOOL);
    assert_int_equal(tgl_node_type(sum_all(ctx, y)).ndim, 0);
}

static void apply_rejects_inputs_that_do_not_fit(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *m = input(ctx, TGL_FLOAT64, 2, 0, "m");
    tgl_node *t3 = input(ctx, TGL_FLOAT64, 3, 0, "t");
    tgl_node *out = NODE_SENTINEL;
    tgl_node *in[2] = {m, t3};
    assert_fails(ctx, tgl_apply(ctx, op("dot"), 2, in, NULL, NULL, &out), TGL_ESHAPE,
                 "tgl_apply: dot:", "");
    assert_ptr_equal(out, NODE_SENTINEL);
    assert_fails(ctx, tgl_apply(ctx, op("tanh"), 2, in, NULL, NULL, &out), TGL_EINVAL,
                 "tgl_apply: tanh: takes 1 inputs, got 2", "");
    assert_fails(ctx, tgl_apply(ctx, -1, 1, in, NULL, NULL, &out), TGL_EINVAL, "tgl_apply:",
                 "unknown op");
    tgl_node *null_in[1] = {NULL};
    assert_fails(ctx, tgl_apply(ctx, op("tanh"), 1, null_in, NULL, NULL, &out), TGL_EINVAL,
                 "tgl_apply:", "NULL");
    assert_ptr_equal(out, NODE_SENTINEL);
}

static void hash_consing_returns_the_same_node_for_the_same_apply(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *x = input(ctx, TGL_FLOAT64, 2, 0, "x");
    tgl_node *W = shared(ctx, f64(ctx, 2, (int64_t[]){2, 2}, (double[]){1, 0, 0, 1}), "W");

    tgl_node *a = ap2(ctx, "dot", x, W);
    tgl_node *b = ap2(ctx, "dot", x, W);
    assert_ptr_equal(a, b);
    assert_int_equal(tgl_node_id(a), tgl_node_id(b));
    assert_ptr_equal(ap1(ctx, "tanh", a), ap1(ctx, "tanh", b));
    /* The source line is not part of the identity: the first one stays. */
    tgl_node *s1 = apply(ctx, "exp", 1, &a, NULL, "a.lua:1");
    tgl_node *s2 = apply(ctx, "exp", 1, &a, NULL, "b.lua:2");
    assert_ptr_equal(s1, s2);
    assert_string_equal(tgl_node_source(s2), "a.lua:1");

    /* Different op, argument order, inputs or parameters: different nodes. */
    assert_ptr_not_equal(ap2(ctx, "dot", W, x), a);
    assert_ptr_not_equal(ap1(ctx, "sin", a), ap1(ctx, "cos", a));
    tgl_params p0 = {0}, p1 = {0};
    p0.n = p1.n = 1;
    p0.i[0] = 0;
    p1.i[0] = 1;
    tgl_node *sum0 = apply(ctx, "sum", 1, &a, &p0, NULL);
    tgl_node *sum1 = apply(ctx, "sum", 1, &a, &p1, NULL);
    assert_ptr_not_equal(sum0, sum1);
    assert_ptr_equal(sum0, apply(ctx, "sum", 1, &a, &p0, NULL));
    tgl_params pk = p0;
    pk.flags = 1; /* keepdims */
    assert_ptr_not_equal(apply(ctx, "sum", 1, &a, &pk, NULL), sum0);

    /* Inputs and shared variables are never merged, even with equal types. */
    tgl_node *x2 = input(ctx, TGL_FLOAT64, 2, 0, "x");
    assert_ptr_not_equal(x, x2);
    assert_ptr_not_equal(ap2(ctx, "dot", x2, W), a);

    /* Equal small constants are one node; another dtype or value is not. */
    tgl_node *k1 = constant(ctx, f64_scalar(ctx, 2.5));
    tgl_node *k2 = constant(ctx, f64_scalar(ctx, 2.5));
    tgl_node *k3 = constant(ctx, f64_scalar(ctx, 3.5));
    tgl_array *f32 = NULL;
    assert_ok(ctx, tgl_array_full(ctx, TGL_FLOAT32, 0, NULL, 2.5, &f32));
    tgl_node *k4 = constant(ctx, f32);
    assert_ptr_equal(k1, k2);
    assert_ptr_not_equal(k1, k3);
    assert_ptr_not_equal(k1, k4);
    assert_ptr_equal(ap2(ctx, "mul", a, k1), ap2(ctx, "mul", a, k2));
}

static void a_constant_keeps_its_own_copy(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_array *a = f64(ctx, 1, (int64_t[]){2}, (double[]){1, 2});
    tgl_node *k = NULL;
    assert_ok(ctx, tgl_node_constant(ctx, a, &k));
    ((double *)a->data)[0] = 50;
    assert_values(ctx, tgl_node_value(k), (double[]){1, 2}, 2, 0);
    tgl_array_release(a);
}

static void clone_replace_substitutes_inputs(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *x = input(ctx, TGL_FLOAT64, 1, 0, "x");
    tgl_node *z = input(ctx, TGL_FLOAT64, 1, 0, "z");
    tgl_node *y = ap1(ctx, "exp", ap2(ctx, "mul", x, x));
    tgl_node *r = NULL;
    assert_ok(ctx, tgl_clone_replace(ctx, 1, &y, 1, &x, &z, &r));
    assert_ptr_not_equal(r, y);
    assert_ptr_equal(r, ap1(ctx, "exp", ap2(ctx, "mul", z, z)));
    tgl_node *m = input(ctx, TGL_FLOAT64, 2, 0, "m");
    r = NODE_SENTINEL;
    assert_fails(ctx, tgl_clone_replace(ctx, 1, &y, 1, &x, &m, &r), TGL_EDTYPE,
                 "tgl_clone_replace:", "cannot replace float64 (?,) by float64 (?,?)");
    assert_ptr_equal(r, NODE_SENTINEL);
}

/* ------------------------------------------------------------------------ */
/* functions                                                                */
/* ------------------------------------------------------------------------ */

static void a_function_computes_tanh_of_x_w_plus_b(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *x = input(ctx, TGL_FLOAT64, 2, 0, "x");
    tgl_node *W = shared(ctx, f64(ctx, 2, (int64_t[]){2, 3}, (double[]){0.1, 0.2, 0.3, -0.4, 0.5, -0.6}), "W");
    tgl_node *b = shared(ctx, f64(ctx, 1, (int64_t[]){3}, (double[]){0.01, 0.02, 0.03}), "b");
    tgl_node *y = ap1(ctx, "tanh", ap2(ctx, "add", ap2(ctx, "dot", x, W), b));
    tgl_node *outs[2] = {y, sum_all(ctx, y)};
    tgl_function *fn = compile(ctx, 1, &x, 2, outs, "layer");
    assert_int_equal(tgl_function_ninputs(fn), 1);
    assert_int_equal(tgl_function_noutputs(fn), 2);

    tgl_array *xa = f64(ctx, 2, (int64_t[]){2, 2}, (double[]){1, 2, -1, 0.5});
    tgl_array *out[2] = {NULL, NULL};
    assert_ok(ctx, tgl_function_call(ctx, fn, &xa, out, 0));
    double want[6], total = 0;
    const double *X = xa->data, Wv[6] = {0.1, 0.2, 0.3, -0.4, 0.5, -0.6}, bv[3] = {0.01, 0.02, 0.03};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            want[i * 3 + j] = tanh(X[i * 2] * Wv[j] + X[i * 2 + 1] * Wv[3 + j] + bv[j]);
            total += want[i * 3 + j];
        }
    assert_shape(out[0], 2, (int64_t[]){2, 3});
    assert_int_equal(out[0]->dtype_id, TGL_FLOAT64);
    assert_values(ctx, out[0], want, 6, 1e-15);
    assert_int_equal(out[1]->ndim, 0);
    assert_near(elem(ctx, out[1], 0), total, 1e-14);

    /* tgl_function_output gives the same arrays. */
    tgl_array *o = NULL;
    assert_ok(ctx, tgl_function_output(ctx, fn, 0, &o));
    assert_ptr_equal(o, out[0]);
    tgl_array_release(o);
    o = SENTINEL;
    assert_fails(ctx, tgl_function_output(ctx, fn, 2, &o), TGL_EINVAL, "tgl_function_output:",
                 "no output 3");
    assert_ptr_equal(o, SENTINEL);

    tgl_array_release(out[0]);
    tgl_array_release(out[1]);
    tgl_array_release(xa);
    tgl_function_free(fn);
}

static void outputs_are_new_references_that_outlive_the_function(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *x = input(ctx, TGL_FLOAT64, 1, 0, "x");
    tgl_node *y = ap1(ctx, "exp", x);
    tgl_function *fn = compile(ctx, 1, &x, 1, &y, "f");
    tgl_array *xa = f64(ctx, 1, (int64_t[]){2}, (double[]){0, 1});
    tgl_array *out = NULL;
    assert_ok(ctx, tgl_function_call(ctx, fn, &xa, &out, 0));
    tgl_function_free(fn);
    tgl_array_release(xa);
    assert_values(ctx, out, (double[]){1, exp(1.0)}, 2, 1e-15);
    tgl_array_release(out);
}

static void grad_of_a_simple_expression_matches_the_derivative(void **state)
{
    tgl_ctx *ctx = CTX;
    /* cost = sum(tanh(x) * x + x^3 / 3); d/dx = tanh x + x (1 - tanh^2 x) + x^2 */
    tgl_node *x = input(ctx, TGL_FLOAT64, 1, 0, "x");
    tgl_node *three = constant(ctx, f64_scalar(ctx, 3.0));
    tgl_node *cube = ap2(ctx, "div", ap2(ctx, "mul", ap2(ctx, "mul", x, x), x), three);
    tgl_node *cost = sum_all(ctx, ap2(ctx, "add", ap2(ctx, "mul", ap1(ctx, "tanh", x), x), cube));
    tgl_node *g = NULL;
    assert_ok(ctx, tgl_grad(ctx, cost, 1, &x, 0, NULL, NULL, TGL_DISCONNECTED_RAISE, &g));
    tgl_type t = tgl_node_type(g);
    assert_int_equal(t.dtype, TGL_FLOAT64);
    assert_int_equal(t.ndim, 1);

    tgl_node *outs[2] = {cost, g};
    tgl_function *fn = compile(ctx, 1, &x, 2, outs, "grad");
    const double xv[4] = {-1.5, -0.2, 0.0, 0.7};
    tgl_array *xa = f64(ctx, 1, (int64_t[]){4}, xv);
    tgl_array *out[2] = {NULL, NULL};
    assert_ok(ctx, tgl_function_call(ctx, fn, &xa, out, 0));
    double want[4], c = 0;
    for (int i = 0; i < 4; i++) {
        double th = tanh(xv[i]);
        want[i] = th + xv[i] * (1 - th * th) + xv[i] * xv[i];
        c += th * xv[i] + xv[i] * xv[i] * xv[i] / 3;
    }
    assert_near(elem(ctx, out[0], 0), c, 1e-14);
    assert_values(ctx, out[1], want, 4, 1e-14);
    for (int i = 0; i < 2; i++)
        tgl_array_release(out[i]);
    tgl_array_release(xa);
    tgl_function_free(fn);
}

static void grad_through_dot_and_a_broadcast_bias(void **state)
{
    tgl_ctx *ctx = CTX;
    /* cost = sum(x W + b): dW[i][j] = sum_r x[r][i], db[j] = rows */
    tgl_node *x = input(ctx, TGL_FLOAT64, 2, 0, "x");
    tgl_node *W = shared(ctx, f64(ctx, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6}), "W");
    tgl_node *b = shared(ctx, f64(ctx, 1, (int64_t[]){3}, (double[]){0, 0, 0}), "b");
    tgl_node *cost = sum_all(ctx, ap2(ctx, "add", ap2(ctx, "dot", x, W), b));
    tgl_node *wrt[2] = {W, b}, *g[2] = {NULL, NULL};
    assert_ok(ctx, tgl_grad(ctx, cost, 2, wrt, 0, NULL, NULL, TGL_DISCONNECTED_RAISE, g));
    assert_int_equal(tgl_node_type(g[0]).ndim, 2);
    assert_int_equal(tgl_node_type(g[1]).ndim, 1);
    tgl_function *fn = compile(ctx, 1, &x, 2, g, "grads");
    tgl_array *xa = f64(ctx, 2, (int64_t[]){4, 2}, (double[]){1, 2, 3, 4, 5, 6, 7, 8});
    tgl_array *out[2] = {NULL, NULL};
    assert_ok(ctx, tgl_function_call(ctx, fn, &xa, out, 0));
    assert_shape(out[0], 2, (int64_t[]){2, 3});
    assert_values(ctx, out[0], (double[]){16, 16, 16, 20, 20, 20}, 6, 0);
    assert_shape(out[1], 1, (int64_t[]){3});
    assert_values(ctx, out[1], (double[]){4, 4, 4}, 3, 0);
    for (int i = 0; i < 2; i++)
        tgl_array_release(out[i]);
    tgl_array_release(xa);
    tgl_function_free(fn);
}

static void grad_with_known_gradients_is_a_vector_jacobian_product(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *x = input(ctx, TGL_FLOAT64, 1, 0, "x");
    tgl_node *u = input(ctx, TGL_FLOAT64, 1, 0, "u");
    tgl_node *y = ap1(ctx, "sin", x);
    tgl_node *g = NULL;
    assert_ok(ctx, tgl_grad(ctx, NULL, 1, &x, 1, &y, &u, TGL_DISCONNECTED_RAISE, &g));
    tgl_node *in[2] = {x, u};
    tgl_function *fn = compile(ctx, 2, in, 1, &g, "vjp");
    tgl_array *args[2] = {f64(ctx, 1, (int64_t[]){2}, (double[]){0.3, 2.0}),
                          f64(ctx, 1, (int64_t[]){2}, (double[]){10, -1})};
    tgl_array *out = NULL;
    assert_ok(ctx, tgl_function_call(ctx, fn, args, &out, 0));
    assert_values(ctx, out, (double[]){10 * cos(0.3), -cos(2.0)}, 2, 1e-15);
    tgl_array_release(out);
    tgl_array_release(args[0]);
    tgl_array_release(args[1]);
    tgl_function_free(fn);
}

static void grad_errors_name_the_problem(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *x = input(ctx, TGL_FLOAT64, 1, 0, "x");
    tgl_node *z = input(ctx, TGL_FLOAT64, 2, 0, "z");
    tgl_node *i = input(ctx, TGL_INT32, 1, 0, "i");
    tgl_node *sq = ap2(ctx, "mul", x, x);
    tgl_node *g = NODE_SENTINEL;

    assert_fails(ctx, tgl_grad(ctx, sq, 1, &x, 0, NULL, NULL, TGL_DISCONNECTED_RAISE, &g),
                 TGL_ESHAPE, "tgl_grad: the cost must be a scalar", "float64 (?,)");
    assert_ptr_equal(g, NODE_SENTINEL);
    tgl_node *cost = sum_all(ctx, sq);
    assert_fails(ctx, tgl_grad(ctx, cost, 1, &i, 0, NULL, NULL, TGL_DISCONNECTED_RAISE, &g),
                 TGL_EDTYPE, "tgl_grad:", "cannot differentiate with respect to 'i' of dtype int32");
    assert_fails(ctx, tgl_grad(ctx, cost, 1, &z, 0, NULL, NULL, TGL_DISCONNECTED_RAISE, &g),
                 TGL_EINVAL, "tgl_grad:", "the cost does not depend on 'z' (wrt 1)");
    assert_fails(ctx, tgl_grad(ctx, sum_all(ctx, i), 1, &x, 0, NULL, NULL, TGL_DISCONNECTED_RAISE, &g),
                 TGL_EDTYPE, "tgl_grad:", "the cost must be a float");
    assert_fails(ctx, tgl_grad(ctx, NULL, 1, &x, 0, NULL, NULL, TGL_DISCONNECTED_RAISE, &g),
                 TGL_EINVAL, "tgl_grad:", "no cost and no known gradients");
    assert_fails(ctx, tgl_grad(ctx, NULL, 1, &x, 1, &sq, &z, TGL_DISCONNECTED_RAISE, &g),
                 TGL_ESHAPE, "tgl_grad:", "has 2 dimensions, the variable 1");
    assert_ptr_equal(g, NODE_SENTINEL);

    /* disconnected = zero: zeros of the variable's shape. */
    assert_ok(ctx, tgl_grad(ctx, cost, 1, &z, 0, NULL, NULL, TGL_DISCONNECTED_ZERO, &g));
    tgl_node *in[2] = {x, z};
    tgl_function *fn = compile(ctx, 2, in, 1, &g, "zeros");
    tgl_array *args[2] = {f64(ctx, 1, (int64_t[]){1}, (double[]){1}),
                          f64(ctx, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6})};
    tgl_array *out = NULL;
    assert_ok(ctx, tgl_function_call(ctx, fn, args, &out, 0));
    assert_shape(out, 2, (int64_t[]){2, 3});
    assert_values(ctx, out, (double[]){0, 0, 0, 0, 0, 0}, 6, 0);
    tgl_array_release(out);
    tgl_array_release(args[0]);
    tgl_array_release(args[1]);
    tgl_function_free(fn);
}

static void run_n_calls_applies_the_update_each_time(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *c = shared(ctx, f64_scalar(ctx, 0), "c");
    tgl_node *one = constant(ctx, f64_scalar(ctx, 1));
    tgl_node *next = ap2(ctx, "add", c, one);
    tgl_node *twice = ap2(ctx, "mul", c, constant(ctx, f64_scalar(ctx, 2)));
    tgl_function *fn = NULL;
    tgl_compile_options o = options(TGL_LINKER_CVM, 0, "counter");
    assert_ok(ctx, tgl_function_new(ctx, 0, NULL, 1, &twice, 1, &c, &next, &o, &fn));

    /* No inputs: it may run before any call. */
    assert_ok(ctx, tgl_function_run(ctx, fn, 3));
    assert_near(scalar_value(ctx, c), 3, 0);
    tgl_array *out = NULL;
    assert_ok(ctx, tgl_function_call(ctx, fn, NULL, &out, 0));
    assert_near(elem(ctx, out, 0), 6, 0); /* the output sees c before its update */
    assert_near(scalar_value(ctx, c), 4, 0);
    assert_ok(ctx, tgl_function_run(ctx, fn, 1000));
    assert_near(scalar_value(ctx, c), 1004, 0);
    tgl_array *last = NULL;
    assert_ok(ctx, tgl_function_output(ctx, fn, 0, &last));
    assert_near(elem(ctx, last, 0), 2 * 1003, 0);
    assert_near(elem(ctx, out, 0), 6, 0); /* the earlier output did not change */
    assert_ok(ctx, tgl_function_run(ctx, fn, 0));
    assert_near(scalar_value(ctx, c), 1004, 0);
    assert_fails(ctx, tgl_function_run(ctx, fn, -1), TGL_EINVAL, "tgl_function_run:",
                 "n_calls is negative");
    tgl_array_release(out);
    tgl_array_release(last);
    tgl_function_free(fn);
}

static void run_reuses_the_inputs_of_the_last_call(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *x = input(ctx, TGL_FLOAT64, 1, 0, "x");
    tgl_node *acc = shared(ctx, f64(ctx, 1, (int64_t[]){2}, (double[]){0, 0}), "acc");
    tgl_node *next = ap2(ctx, "add", acc, x);
    tgl_function *fn = NULL;
    tgl_compile_options o = options(TGL_LINKER_CVM, 0, "accumulate");
    assert_ok(ctx, tgl_function_new(ctx, 1, &x, 0, NULL, 1, &acc, &next, &o, &fn));
    tgl_array *out = SENTINEL;
    assert_fails(ctx, tgl_function_output(ctx, fn, 0, &out), TGL_EINVAL, "tgl_function_output:",
                 "no output 1");
    assert_ptr_equal(out, SENTINEL);
    assert_fails(ctx, tgl_function_run(ctx, fn, 2), TGL_EINVAL, "accumulate:",
                 "call it once with its inputs");
    tgl_array *xa = f64(ctx, 1, (int64_t[]){2}, (double[]){1, 10});
    assert_ok(ctx, tgl_function_call(ctx, fn, &xa, NULL, 0));
    tgl_array_release(xa); /* the function keeps its own reference */
    assert_ok(ctx, tgl_function_run(ctx, fn, 4));
    tgl_array *v = value(ctx, acc);
    assert_values(ctx, v, (double[]){5, 50}, 2, 0);
    tgl_array_release(v);
    tgl_function_free(fn);
}

static void updates_all_read_the_old_values(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *a = shared(ctx, f64_scalar(ctx, 1), "a");
    tgl_node *b = shared(ctx, f64_scalar(ctx, 10), "b");
    tgl_node *one = constant(ctx, f64_scalar(ctx, 1));
    /* a <- b, b <- a + 1 */
    tgl_node *vars[2] = {a, b}, *exprs[2] = {b, ap2(ctx, "add", a, one)};
    tgl_function *fn = NULL;
    tgl_compile_options o = options(TGL_LINKER_CVM, 0, "swap");
    assert_ok(ctx, tgl_function_new(ctx, 0, NULL, 0, NULL, 2, vars, exprs, &o, &fn));
    assert_ok(ctx, tgl_function_call(ctx, fn, NULL, NULL, 0));
    assert_near(scalar_value(ctx, a), 10, 0);
    assert_near(scalar_value(ctx, b), 2, 0);
    assert_ok(ctx, tgl_function_call(ctx, fn, NULL, NULL, 0));
    assert_near(scalar_value(ctx, a), 2, 0);
    assert_near(scalar_value(ctx, b), 11, 0);
    tgl_function_free(fn);
}

static void the_three_linkers_give_identical_bits(void **state)
{
    tgl_ctx *ctx = CTX;
    static const int linkers[3] = {TGL_LINKER_CVM, TGL_LINKER_CVM_NOGC, TGL_LINKER_VM};
    tgl_array *results[3][3] = {{NULL}};
    for (int l = 0; l < 3; l++) {
        tgl_node *x = input(ctx, TGL_FLOAT64, 2, 0, "x");
        tgl_node *W = shared(ctx, f64(ctx, 2, (int64_t[]){3, 2}, (double[]){0.5, -1, 0.25, 2, -0.75, 1.5}), "W");
        tgl_node *h = ap1(ctx, "tanh", ap2(ctx, "dot", x, W));
        tgl_node *cost = sum_all(ctx, ap2(ctx, "mul", h, h));
        tgl_node *gW = NULL;
        assert_ok(ctx, tgl_grad(ctx, cost, 1, &W, 0, NULL, NULL, TGL_DISCONNECTED_RAISE, &gW));
        tgl_node *step = ap2(ctx, "sub", W, ap2(ctx, "mul", gW, constant(ctx, f64_scalar(ctx, 0.1))));
        tgl_node *outs[2] = {cost, h};
        tgl_function *fn = NULL;
        tgl_compile_options o = options(linkers[l], 0, "mlp");
        assert_ok(ctx, tgl_function_new(ctx, 1, &x, 2, outs, 1, &W, &step, &o, &fn));
        tgl_array *xa = f64(ctx, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, -1, 0.5, 0.25});
        tgl_array *out[2] = {NULL, NULL};
        for (int k = 0; k < 3; k++) {
            for (int i = 0; i < 2; i++)
                tgl_array_release(out[i]);
            assert_ok(ctx, tgl_function_call(ctx, fn, &xa, out, 0));
        }
        results[l][0] = out[0];
        results[l][1] = out[1];
        results[l][2] = value(ctx, W);
        tgl_array_release(xa);
        tgl_function_free(fn);
    }
    for (int l = 1; l < 3; l++)
        for (int r = 0; r < 3; r++)
            if (!tgl_array_equal_bits(results[0][r], results[l][r]))
                fail_msg("linker %d differs from cvm in result %d", linkers[l], r);
    for (int l = 0; l < 3; l++)
        for (int r = 0; r < 3; r++)
            tgl_array_release(results[l][r]);
}

static void ifelse_runs_only_the_branch_taken(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *c = input(ctx, TGL_BOOL, 0, 0, "c");
    tgl_node *M = input(ctx, TGL_FLOAT64, 2, 0, "M");
    tgl_node *v = input(ctx, TGL_FLOAT64, 1, 0, "v");
    tgl_node *bad = apply(ctx, "dot", 2, (tgl_node *[]){M, v}, NULL, "branch.lua:7");
    tgl_node *good = ap1(ctx, "neg", v);
    tgl_node *ie = apply(ctx, "ifelse", 3, (tgl_node *[]){c, good, bad}, NULL, NULL);
    tgl_node *in[3] = {c, M, v};
    tgl_function *fn = compile(ctx, 3, in, 1, &ie, "choose");
    tgl_array *cond = NULL;
    assert_ok(ctx, tgl_array_full(ctx, TGL_BOOL, 0, NULL, 1, &cond));
    tgl_array *args[3] = {cond, f64(ctx, 2, (int64_t[]){2, 3}, (double[]){0, 0, 0, 0, 0, 0}),
                          f64(ctx, 1, (int64_t[]){2}, (double[]){1, 2})};
    tgl_array *out = NULL;
    assert_ok(ctx, tgl_function_call(ctx, fn, args, &out, 0));
    assert_values(ctx, out, (double[]){-1, -2}, 2, 0);
    *(unsigned char *)cond->data = 0;
    tgl_array *out2 = SENTINEL;
    assert_fails(ctx, tgl_function_call(ctx, fn, args, &out2, 0), TGL_ESHAPE, "dot:",
                 "built at branch.lua:7");
    assert_ptr_equal(out2, SENTINEL);

    char *text = NULL;
    assert_ok(ctx, tgl_function_program(ctx, fn, &text));
    assert_non_null(strstr(text, "if not c goto"));
    assert_non_null(strstr(text, "goto "));
    tgl_free(text);
    tgl_array_release(out);
    for (int i = 0; i < 3; i++)
        tgl_array_release(args[i]);
    tgl_function_free(fn);
}

static void program_and_profile_describe_the_function(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *x = input(ctx, TGL_FLOAT64, 2, 0, "x");
    tgl_node *d = apply(ctx, "dot", 2, (tgl_node *[]){x, x}, NULL, "prog.lua:1");
    tgl_node *y = apply(ctx, "tanh", 1, &d, NULL, "prog.lua:2");
    tgl_function *fn = NULL;
    tgl_compile_options o = options(TGL_LINKER_CVM, 1, "prof");
    assert_ok(ctx, tgl_function_new(ctx, 1, &x, 1, &y, 0, NULL, NULL, &o, &fn));

    char *text = NULL;
    assert_ok(ctx, tgl_function_program(ctx, fn, &text));
    assert_non_null(strstr(text, "function prof: 1 inputs, 1 outputs, 0 updates, "));
    assert_non_null(strstr(text, "instructions (cvm)\n"));
    assert_non_null(strstr(text, "prog.lua:"));
    assert_non_null(strstr(text, "(x, x)"));
    assert_non_null(strstr(text, "output 1: "));
    tgl_free(text);

    tgl_array *xa = f64(ctx, 2, (int64_t[]){2, 2}, (double[]){1, 2, 3, 4});
    tgl_array *out = NULL;
    for (int k = 0; k < 4; k++) {
        tgl_array_release(out);
        assert_ok(ctx, tgl_function_call(ctx, fn, &xa, &out, 0));
    }
    assert_ok(ctx, tgl_function_run(ctx, fn, 6));
    /* tanh(x x) = tanh([[7, 10], [15, 22]]) */
    assert_values(ctx, out, (double[]){tanh(7), tanh(10), tanh(15), tanh(22)}, 4, 1e-15);
    text = NULL;
    assert_ok(ctx, tgl_function_profile(ctx, fn, &text));
    assert_non_null(strstr(text, "Function profile: prof"));
    assert_non_null(strstr(text, "calls: 10,"));
    /* One row per op after the header: name, nodes, calls (10 per node). */
    const char *row = strstr(text, "us/call\n");
    assert_non_null(row);
    row += strlen("us/call\n");
    int rows = 0;
    char name[64];
    unsigned long nodes = 0, calls = 0;
    while (sscanf(row, " %63s %lu %lu", name, &nodes, &calls) == 3) {
        assert_int_equal(tgl_op_lookup(name) >= 0, 1);
        assert_true(nodes >= 1);
        assert_int_equal(calls, 10 * nodes);
        rows++;
        row = strchr(row, '\n');
        if (!row)
            break;
        row++;
    }
    assert_true(rows >= 1);
    tgl_free(text);
    tgl_array_release(out);
    tgl_array_release(xa);
    tgl_function_free(fn);

    /* Without profile: an error that says so. */
    fn = compile(ctx, 1, &x, 1, &y, "plain");
    text = NULL;
    assert_fails(ctx, tgl_function_profile(ctx, fn, &text), TGL_EINVAL, "tgl_function_profile:",
                 "plain was not compiled with profile");
    assert_null(text);
    tgl_function_free(fn);
}

/* ------------------------------------------------------------------------ */
/* errors                                                                   */
/* ------------------------------------------------------------------------ */

static void compile_errors_name_the_problem(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *x = input(ctx, TGL_FLOAT64, 1, 0, "x");
    tgl_node *y = input(ctx, TGL_FLOAT64, 1, 0, "y");
    tgl_node *s = shared(ctx, f64(ctx, 1, (int64_t[]){2}, (double[]){1, 2}), "s");
    tgl_node *xy = ap2(ctx, "add", x, y);
    tgl_compile_options o = options(TGL_LINKER_CVM, 0, "bad");
    tgl_function *fn = (tgl_function *)(uintptr_t)0x5e49;

    assert_fails(ctx, tgl_function_new(ctx, 1, &x, 1, &xy, 0, NULL, NULL, &o, &fn), TGL_EINVAL,
                 "tgl_function_new:", "the outputs need the input 'y' (float64 (?,)), which is not in the inputs list");
    tgl_node *two[2] = {x, x};
    assert_fails(ctx, tgl_function_new(ctx, 2, two, 1, &x, 0, NULL, NULL, &o, &fn), TGL_EINVAL,
                 "tgl_function_new:", "input 2 repeats input 1");
    assert_fails(ctx, tgl_function_new(ctx, 1, &s, 1, &x, 0, NULL, NULL, &o, &fn), TGL_EINVAL,
                 "tgl_function_new:", "input 1 is not a symbolic input");
    assert_fails(ctx, tgl_function_new(ctx, 1, &x, 0, NULL, 1, &y, &x, &o, &fn), TGL_EINVAL,
                 "tgl_function_new:", "update 1 targets 'y', which is not a shared variable");
    tgl_node *total = sum_all(ctx, x);
    assert_fails(ctx, tgl_function_new(ctx, 1, &x, 0, NULL, 1, &s, &total, &o, &fn), TGL_EDTYPE,
                 "tgl_function_new:", "update 1 of 's' gives float64 (), the variable is float64 (?,)");
    tgl_node *xi = NULL;
    tgl_params cast = {0};
    cast.n = 1;
    cast.i[0] = TGL_INT32;
    xi = apply(ctx, "cast", 1, &x, &cast, NULL);
    assert_fails(ctx, tgl_function_new(ctx, 1, &x, 0, NULL, 1, &s, &xi, &o, &fn), TGL_EDTYPE,
                 "tgl_function_new:", "gives int32 (?,)");
    tgl_node *vars[2] = {s, s}, *exprs[2] = {x, x};
    assert_fails(ctx, tgl_function_new(ctx, 1, &x, 0, NULL, 2, vars, exprs, &o, &fn), TGL_EINVAL,
                 "tgl_function_new:", "'s' is updated twice (updates 1 and 2)");
    assert_fails(ctx, tgl_function_new(ctx, 1, &x, 0, NULL, 1, &s, &xy, &o, &fn), TGL_EINVAL,
                 "tgl_function_new:", "input 'y'");
    assert_ptr_equal(fn, (tgl_function *)(uintptr_t)0x5e49);
}

static void call_errors_name_the_input_and_change_nothing(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *x = input(ctx, TGL_FLOAT64, 2, 0, "x");
    tgl_node *W = shared(ctx, f64(ctx, 2, (int64_t[]){2, 2}, (double[]){1, 2, 3, 4}), "W");
    tgl_node *y = apply(ctx, "dot", 2, (tgl_node *[]){x, W}, NULL, "train.lua:12");
    tgl_node *cost = sum_all(ctx, y);
    tgl_node *gW = NULL;
    assert_ok(ctx, tgl_grad(ctx, cost, 1, &W, 0, NULL, NULL, TGL_DISCONNECTED_RAISE, &gW));
    tgl_node *next = ap2(ctx, "sub", W, gW);
    tgl_function *fn = NULL;
    tgl_compile_options o = options(TGL_LINKER_CVM, 0, "train");
    assert_ok(ctx, tgl_function_new(ctx, 1, &x, 1, &cost, 1, &W, &next, &o, &fn));

    tgl_array *before = value(ctx, W);
    tgl_array *out = SENTINEL;

    /* wrong rank, wrong dtype, missing */
    tgl_array *v = f64(ctx, 1, (int64_t[]){2}, (double[]){1, 2});
    assert_fails(ctx, tgl_function_call(ctx, fn, &v, &out, 0), TGL_EINVAL,
                 "train: input 1 ('x') expects float64 (?,?), got float64 (2,)", "");
    tgl_array *f32 = NULL;
    assert_ok(ctx, tgl_array_zeros(ctx, TGL_FLOAT32, 2, (int64_t[]){1, 2}, &f32));
    assert_fails(ctx, tgl_function_call(ctx, fn, &f32, &out, 0), TGL_EINVAL,
                 "train: input 1 ('x') expects float64 (?,?), got float32 (1,2)", "");
    tgl_array *none = NULL;
    assert_fails(ctx, tgl_function_call(ctx, fn, &none, &out, 0), TGL_EINVAL,
                 "train: input 1 is missing", "");

    /* a shape mismatch inside the graph: the op, the shapes, the source */
    tgl_array *x3 = f64(ctx, 2, (int64_t[]){1, 3}, (double[]){1, 1, 1});
    assert_fails(ctx, tgl_function_call(ctx, fn, &x3, &out, 0), TGL_ESHAPE,
                 "dot: inner sizes 3 and 2 differ", "(inputs: float64 (1,3), float64 (2,2)); built at train.lua:12");
    assert_ptr_equal(out, SENTINEL);

    /* Nothing changed: the variable holds the very same array. */
    tgl_array *after = value(ctx, W);
    assert_ptr_equal(after, before);
    assert_values(ctx, after, (double[]){1, 2, 3, 4}, 4, 0);
    tgl_array_release(after);

    /* and the function still works */
    tgl_array *x2 = f64(ctx, 2, (int64_t[]){1, 2}, (double[]){1, 1});
    assert_ok(ctx, tgl_function_call(ctx, fn, &x2, &out, 0));
    assert_near(elem(ctx, out, 0), 10, 0);
    after = value(ctx, W);
    assert_values(ctx, after, (double[]){0, 1, 2, 3}, 4, 0);
    tgl_array_release(after);

    tgl_array_release(out);
    tgl_array_release(before);
    tgl_array_release(v);
    tgl_array_release(f32);
    tgl_array_release(x3);
    tgl_array_release(x2);
    tgl_function_free(fn);
}

static void shared_values_check_their_type(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *r = NULL;
    tgl_array *row = f64(ctx, 2, (int64_t[]){1, 3}, (double[]){1, 2, 3});
    assert_ok(ctx, tgl_node_shared(ctx, row, 1u, "r", &r));
    tgl_array_release(row);
    assert_int_equal(tgl_node_type(r).bcast, 1u);
    tgl_array *wide = f64(ctx, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6});
    assert_fails(ctx, tgl_shared_set(ctx, r, wide), TGL_ESHAPE, "tgl_shared_set: 'r'",
                 "expects float64 (1,?), got float64 (2,3)");
    tgl_node *bad = NODE_SENTINEL;
    assert_fails(ctx, tgl_node_shared(ctx, wide, 1u, "b", &bad), TGL_ESHAPE, "tgl_node_shared:",
                 "axis 1 is broadcastable but has size 2");
    assert_ptr_equal(bad, NODE_SENTINEL);
    tgl_array *vec = f64(ctx, 1, (int64_t[]){3}, (double[]){1, 2, 3});
    assert_fails(ctx, tgl_shared_set(ctx, r, vec), TGL_ESHAPE, "tgl_shared_set:", "got float64 (3,)");
    tgl_array *ok = f64(ctx, 2, (int64_t[]){1, 5}, (double[]){1, 2, 3, 4, 5});
    assert_ok(ctx, tgl_shared_set(ctx, r, ok));
    tgl_array *v = value(ctx, r);
    assert_ptr_equal(v, ok); /* retained, not copied */
    tgl_array_release(v);
    tgl_array_release(ok);
    tgl_array_release(vec);
    tgl_array_release(wide);
    tgl_node *x = input(ctx, TGL_FLOAT64, 1, 0, "x");
    v = SENTINEL;
    assert_fails(ctx, tgl_shared_get(ctx, x, &v), TGL_EINVAL, "tgl_shared_get:", "not a shared variable");
    assert_ptr_equal(v, SENTINEL);
}

/* ------------------------------------------------------------------------ */
/* engine core: frames, multi-output nodes with a payload, the collector    */
/* ------------------------------------------------------------------------ */

/* y = tanh(x * w) + b over a matrix, run on two frames of one function:
 * the same bits, and neither frame disturbs the other's outputs. */
static void two_frames_of_one_program_give_identical_results(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *x = input(ctx, TGL_FLOAT64, 2, 0, "x");
    int64_t s2[2] = {2, 3};
    double wv[6] = {0.5, -1, 2, 0.25, 3, -0.5};
    tgl_node *w = constant(ctx, f64(ctx, 2, s2, wv));
    tgl_node *y = ap1(ctx, "tanh", ap2(ctx, "mul", x, w));
    tgl_node *s = ap1(ctx, "exp", y);
    tgl_node *outs[2] = {y, s};
    tgl_function *fn = NULL;
    tgl_compile_options opt = {TGL_LINKER_CVM, 0, "frames", TGL_MODE_FAST_RUN};
    assert_ok(ctx, tgl_function_new(ctx, 1, &x, 2, outs, 0, NULL, NULL, &opt, &fn));
    tgl_frame *f2 = NULL;
    assert_ok(ctx, tgl_function_frame_new(ctx, fn, &f2));
    double av[6] = {1, 2, 3, 4, 5, 6}, bv[6] = {-1, 0.5, 0, 2, -3, 1};
    tgl_array *a = f64(ctx, 2, s2, av), *b = f64(ctx, 2, s2, bv);
    tgl_array *r1[2] = {NULL}, *r2[2] = {NULL}, *r3[2] = {NULL};
    assert_ok(ctx, tgl_function_call(ctx, fn, &a, r1, 0));
    assert_ok(ctx, tgl_function_call_frame(ctx, fn, f2, &b, r2));
    assert_ok(ctx, tgl_function_call_frame(ctx, fn, f2, &a, r3));
    for (int k = 0; k < 2; k++) {
        assert_true(tgl_array_equal_bits(r1[k], r3[k]));
        assert_false(r1[k]->storage == r3[k]->storage);
    }
    for (int i = 0; i < 6; i++) {
        assert_near(elem(ctx, r1[0], i), tanh(av[i] * wv[i]), 1e-12);
        assert_near(elem(ctx, r2[0], i), tanh(bv[i] * wv[i]), 1e-12);
        assert_near(elem(ctx, r2[1], i), exp(tanh(bv[i] * wv[i])), 1e-12);
    }
    /* A frame of another function is refused. */
    tgl_function *other = NULL;
    assert_ok(ctx, tgl_function_new(ctx, 1, &x, 1, &y, 0, NULL, NULL, &opt, &other));
    tgl_array *r4 = SENTINEL;
    assert_fails(ctx, tgl_function_call_frame(ctx, other, f2, &a, &r4), TGL_EINVAL, "frames",
                 "another function");
    assert_ptr_equal(r4, SENTINEL);
    for (int k = 0; k < 2; k++) {
        tgl_array_release(r1[k]);
        tgl_array_release(r2[k]);
        tgl_array_release(r3[k]);
    }
    tgl_array_release(a);
    tgl_array_release(b);
    tgl_frame_free(f2);
    tgl_function_free(fn);
    tgl_function_free(other);
}

/* A fused group with two outputs is one node (its program is the payload)
 * read through OUTPUT nodes: it prints its payload, compiles to one
 * instruction, and differentiates (the pullback gets both outputs'
 * gradients at once). */
static void a_multi_output_node_with_a_payload_compiles_and_differentiates(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *x = input(ctx, TGL_FLOAT64, 1, 0, "x");
    tgl_node *two = constant(ctx, f64_scalar(ctx, 2));
    tgl_node *y = ap2(ctx, "mul", ap1(ctx, "exp", x), two); /* 2 e^x        */
    tgl_node *z = ap1(ctx, "tanh", y);                      /* tanh(2 e^x)  */
    tgl_node *roots[2] = {y, z}, *opt[2] = {NULL, NULL};
    assert_ok(ctx, tgl_optimize(ctx, TGL_OPT_FAST_RUN, 2, roots, opt));
    tgl_node *m = tgl_node_input_at(opt[0], 0);
    assert_int_equal(tgl_node_op(opt[0]), op("output"));
    assert_ptr_equal(tgl_node_input_at(opt[1], 0), m);
    assert_int_equal(tgl_node_op(m), op("fused"));
    assert_int_equal(tgl_node_noutputs(m), 2);
    char label[256];
    assert_int_equal(tgl_node_payload_label(m, label, sizeof label), 1);
    assert_non_null(strstr(label, "exp mul tanh"));
    tgl_node *again = NULL;
    int k1 = (int)tgl_node_params(opt[1])->i[0];
    assert_ok(ctx, tgl_node_output(ctx, m, k1, &again));
    assert_ptr_equal(again, opt[1]);
    assert_fails(ctx, tgl_node_output(ctx, m, 2, &again), TGL_EINVAL, "tgl_node_output", "2 outputs");
    /* A multi-output node is not a value: using it directly is refused. */
    tgl_node *bad = NODE_SENTINEL;
    tgl_node *in1[1] = {m};
    assert_fails(ctx, tgl_apply(ctx, op("exp"), 1, in1, NULL, NULL, &bad), TGL_EINVAL, "tgl_apply",
                 "has 2 outputs");
    /* cost = sum(y * z); d cost/dx = sum over the chain rule. */
    tgl_node *prod = ap2(ctx, "mul", opt[0], opt[1]);
    int64_t ax = 0;
    tgl_params ps = {0};
    ps.n = 1;
    ps.i[0] = ax;
    tgl_node *cost = apply(ctx, "sum", 1, &prod, &ps, NULL);
    tgl_node *g = NULL;
    assert_ok(ctx, tgl_grad(ctx, cost, 1, &x, 0, NULL, NULL, TGL_DISCONNECTED_RAISE, &g));
    tgl_node *outs[2] = {cost, g};
    tgl_function *fn = NULL;
    assert_ok(ctx, tgl_function_new(ctx, 1, &x, 2, outs, 0, NULL, NULL, NULL, &fn));
    int64_t s1[1] = {3};
    double xv[3] = {0.1, -0.4, 0.7};
    tgl_array *a = f64(ctx, 1, s1, xv), *r[2] = {NULL, NULL};
    assert_ok(ctx, tgl_function_call(ctx, fn, &a, r, 0));
    double want = 0;
    for (int i = 0; i < 3; i++) {
        double yy = 2 * exp(xv[i]), zz = tanh(yy);
        want += yy * zz;
        /* d(y z)/dx = y' z + y z' with y' = y, z' = (1 - z^2) y */
        double d = yy * zz + yy * (1 - zz * zz) * yy;
        assert_near(elem(ctx, r[1], i), d, 1e-10);
    }
    assert_near(elem(ctx, r[0], 0), want, 1e-12);
    char *text = NULL;
    assert_ok(ctx, tgl_function_program(ctx, fn, &text));
    assert_non_null(strstr(text, "fused#"));
    tgl_free(text);
    tgl_array_release(a);
    tgl_array_release(r[0]);
    tgl_array_release(r[1]);
    tgl_function_free(fn);
}

/* The collector frees what nothing retained depends on, keeps what a
 * retained node or a compiled function needs, and the kept graph still
 * computes. */
static void the_collector_keeps_what_is_retained_and_frees_the_rest(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *x = input(ctx, TGL_FLOAT64, 1, 0, "x");
    tgl_node_retain(ctx, x);
    tgl_node *keep = ap1(ctx, "exp", x);
    tgl_node_retain(ctx, keep);
    tgl_node *fnout = ap1(ctx, "tanh", ap1(ctx, "sin", x));
    tgl_function *fn = NULL;
    assert_ok(ctx, tgl_function_new(ctx, 1, &x, 1, &fnout, 0, NULL, NULL, NULL, &fn));
    size_t before = tgl_graph_live_nodes(ctx);
    for (int i = 0; i < 1000; i++)
        (void)ap1(ctx, "cos", ap1(ctx, "log1p", x)); /* garbage: nothing keeps it */
    assert_true(tgl_graph_live_nodes(ctx) >= before + 2);
    assert_ok(ctx, tgl_graph_collect(ctx));
    assert_true(tgl_graph_live_nodes(ctx) <= before);
    assert_true(tgl_graph_live_nodes(ctx) >= 4); /* x, exp, and the function's sin, tanh */
    /* Building the same expression again gives a node that works. */
    tgl_node *again = ap1(ctx, "exp", x);
    assert_ptr_equal(again, keep);
    int64_t s1[1] = {2};
    double xv[2] = {0.5, -1};
    tgl_array *a = f64(ctx, 1, s1, xv), *r = NULL;
    assert_ok(ctx, tgl_function_call(ctx, fn, &a, &r, 0));
    assert_near(elem(ctx, r, 1), tanh(sin(-1.0)), 1e-12);
    tgl_array_release(a);
    tgl_array_release(r);
    tgl_function_free(fn);
    tgl_node_release(ctx, keep);
    tgl_node_release(ctx, x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        T(apply_infers_types_and_keeps_names_and_sources),
        T(apply_rejects_inputs_that_do_not_fit),
        T(hash_consing_returns_the_same_node_for_the_same_apply),
        T(a_constant_keeps_its_own_copy),
        T(clone_replace_substitutes_inputs),
        T(a_function_computes_tanh_of_x_w_plus_b),
        T(outputs_are_new_references_that_outlive_the_function),
        T(grad_of_a_simple_expression_matches_the_derivative),
        T(grad_through_dot_and_a_broadcast_bias),
        T(grad_with_known_gradients_is_a_vector_jacobian_product),
        T(grad_errors_name_the_problem),
        T(run_n_calls_applies_the_update_each_time),
        T(run_reuses_the_inputs_of_the_last_call),
        T(updates_all_read_the_old_values),
        T(the_three_linkers_give_identical_bits),
        T(ifelse_runs_only_the_branch_taken),
        T(program_and_profile_describe_the_function),
        T(compile_errors_name_the_problem),
        T(call_errors_name_the_input_and_change_nothing),
        T(shared_values_check_their_type),
        T(two_frames_of_one_program_give_identical_results),
        T(a_multi_output_node_with_a_payload_compiles_and_differentiates),
        T(the_collector_keeps_what_is_retained_and_frees_the_rest),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
