/*
 * test_subtensor.c — the indexing ops through the public C API: basic
 * indexing (subtensor: integers and Python slices, a view of x), its update
 * (inc_subtensor: add or set, v broadcast), advanced indexing by integer
 * arrays (adv_subtensor, 1-based indices) and its scatter
 * (adv_inc_subtensor, repeated positions accumulate).
 *
 * Kernels run through tgl_eval on hand-made arrays, bounds included (0-d
 * int arrays); types and hash-consing through tgl_apply; pullbacks through
 * tgl_grad with a known output gradient, then evaluated node by node with
 * tgl_eval so their values are checked, not just their shape.
 *
 * Every test runs with a fresh context; the teardown checks that the test
 * released every array it made.
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

/* The parameter encoding of the indexing ops (src/engine/ops/ops.h).  It
 * is part of the contract with the Lua layer, which spells it out too. */
#define IDX_INDEX 0
#define IDX_SLICE 1
#define IDX_START_INPUT 4
#define IDX_STOP_INPUT 8
#define IDX_STEP_INPUT 16
#define IDX_NO_START 32
#define IDX_NO_STOP 64
#define INC_SET 1

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */
/* ------------------------------------------------------------------------ */

#include "tgl_fixture.h"

#define CTX (((fixture *)*state)->ctx)

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

static int op(const char *name)
{
    int id = tgl_op_lookup(name);
    assert_true(id >= 0);
    return id;
}

/* An array of dtype and shape holding vals (C order, converted). */
static tgl_array *arr(tgl_ctx *ctx, int dtype, int ndim, const int64_t *shape,
                      const double *vals)
{
    tgl_array *a = NULL;
    assert_ok(ctx, tgl_array_empty(ctx, dtype, ndim, shape, &a));
    for (int64_t i = 0; i < a->size; i++) {
        int64_t idx[TGL_MAX_DIMS], r = i;
        for (int d = ndim - 1; d >= 0; d--) {
            idx[d] = r % shape[d];
            r /= shape[d];
        }
        assert_ok(ctx, tgl_array_set(ctx, a, idx, vals[i]));
    }
    return a;
}

/* 0, 1, 2, ... of the given shape, float64. */
static tgl_array *iota(tgl_ctx *ctx, int ndim, const int64_t *shape)
{
    tgl_array *a = NULL;
    assert_ok(ctx, tgl_array_empty(ctx, TGL_FLOAT64, ndim, shape, &a));
    for (int64_t i = 0; i < a->size; i++)
        ((double *)a->data)[i] = (double)i;
    return a;
}

/* A 0-d integer array (a bound given at run time). */
static tgl_array *scalar_int(tgl_ctx *ctx, int dtype, int64_t v)
{
    tgl_array *a = NULL;
    assert_ok(ctx, tgl_array_full(ctx, dtype, 0, NULL, (double)v, &a));
    return a;
}

/* A 1-d int64 index array. */
static tgl_array *ints(tgl_ctx *ctx, int64_t n, const int64_t *vals)
{
    tgl_array *a = NULL;
    assert_ok(ctx, tgl_array_empty(ctx, TGL_INT64, 1, &n, &a));
    if (n)
        memcpy(a->data, vals, sizeof *vals * (size_t)n);
    return a;
}

static void assert_elements(tgl_ctx *ctx, const tgl_array *a, const double *want, int64_t n)
{
    assert_int_equal(a->size, n);
    for (int64_t i = 0; i < n; i++) {
        double g = elem(ctx, a, i);
        if (g != want[i])
            fail_msg("element %lld is %.17g, expected %.17g", (long long)i, g, want[i]);
    }
}

/* Sets the four parameters of indexed axis `axis`. */
static void idx(tgl_params *p, int axis, int64_t kind, int64_t start, int64_t stop, int64_t step)
{
    p->i[4 * axis] = kind;
    p->i[4 * axis + 1] = start;
    p->i[4 * axis + 2] = stop;
    p->i[4 * axis + 3] = step;
    if (p->n < 4 * (axis + 1))
        p->n = 4 * (axis + 1);
}

/* Advanced-indexing parameters: axes[d] nonzero when axis d is indexed. */
static tgl_params adv(int ndim, const int *axes)
{
    tgl_params p = {0};
    p.n = ndim;
    for (int d = 0; d < ndim; d++)
        p.i[d] = axes[d];
    return p;
}

/* Evaluates op on nin arrays; the result is checked and returned. */
static tgl_array *run(tgl_ctx *ctx, const char *name, int nin, tgl_array *const *in,
                      const tgl_params *p)
{
    tgl_array *out = NULL;
    assert_ok(ctx, tgl_eval(ctx, op(name), nin, in, p, &out));
    return out;
}

static void release_all(int n, tgl_array **a)
{
    for (int i = 0; i < n; i++)
        tgl_array_release(a[i]);
}

static tgl_node *input(tgl_ctx *ctx, int dtype, int ndim, uint32_t bcast)
{
    tgl_node *n = NULL;
    tgl_type t = {dtype, ndim, bcast};
    assert_ok(ctx, tgl_node_input(ctx, t, NULL, &n));
    return n;
}

static tgl_node *apply(tgl_ctx *ctx, const char *name, int nin, tgl_node *const *in,
                       const tgl_params *p)
{
    tgl_node *n = NULL;
    assert_ok(ctx, tgl_apply(ctx, op(name), nin, in, p, "test.lua:1", &n));
    return n;
}

/* The value of node under the bindings vars[k] = vals[k], computed by
 * evaluating every apply node with tgl_eval (a new reference). */
static tgl_array *value_of(tgl_ctx *ctx, tgl_node *node, int nvars, tgl_node *const *vars,
                           tgl_array *const *vals)
{
    for (int k = 0; k < nvars; k++)
        if (vars[k] == node) {
            tgl_array_retain(vals[k]);
            return vals[k];
        }
    if (tgl_node_kind_of(node) == TGL_NODE_CONSTANT) {
        tgl_array_retain(tgl_node_value(node));
        return tgl_node_value(node);
    }
    assert_int_equal(tgl_node_kind_of(node), TGL_NODE_APPLY);
    int nin = tgl_node_ninputs(node);
    tgl_array *args[16];
    assert_true(nin <= 16);
    for (int i = 0; i < nin; i++)
        args[i] = value_of(ctx, tgl_node_input_at(node, i), nvars, vars, vals);
    tgl_array *out = NULL;
    tgl_status st = tgl_eval(ctx, tgl_node_op(node), nin, args, tgl_node_params(node), &out);
    release_all(nin, args);
    if (st)
        fail_msg("evaluating %s: %s", tgl_op_name(tgl_node_op(node)), tgl_ctx_error(ctx));
    return out;
}

/* ------------------------------------------------------------------------ */
/* subtensor: basic indexing                                                */
/* ------------------------------------------------------------------------ */

static void subtensor_index_takes_a_row_and_drops_the_axis(void **state)
{
    int64_t s[2] = {3, 4};
    tgl_array *x = iota(CTX, 2, s);
    tgl_params p = {0};
    idx(&p, 0, IDX_INDEX, 1, 0, 0);
    tgl_array *y = run(CTX, "subtensor", 1, &x, &p);
    assert_shape(y, 1, (int64_t[]){4});
    assert_elements(CTX, y, (double[]){4, 5, 6, 7}, 4);
    tgl_array_release(y);
    /* Both axes indexed, from the end: a 0-d result. */
    tgl_params q = {0};
    idx(&q, 0, IDX_INDEX, -1, 0, 0);
    idx(&q, 1, IDX_INDEX, -2, 0, 0);
    y = run(CTX, "subtensor", 1, &x, &q);
    assert_int_equal(y->ndim, 0);
    assert_elements(CTX, y, (double[]){10}, 1);
    tgl_array_release(y);
    tgl_array_release(x);
}

static void subtensor_slices_follow_python_with_steps_and_negative_steps(void **state)
{
    tgl_array *x = iota(CTX, 1, (int64_t[]){10});
    struct { int64_t kind, start, stop, step; int64_t n; double want[10]; } cases[] = {
        {IDX_SLICE, 2, 7, 2, 3, {2, 4, 6}},
        {IDX_SLICE | IDX_NO_START | IDX_NO_STOP, 0, 0, -1, 10, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
        {IDX_SLICE, 8, 2, -3, 2, {8, 5}},
        {IDX_SLICE | IDX_NO_STOP, -3, 0, 1, 3, {7, 8, 9}},
        {IDX_SLICE | IDX_NO_STOP, 7, 0, -3, 3, {7, 4, 1}},
        {IDX_SLICE | IDX_NO_START, 0, -8, -2, 4, {9, 7, 5, 3}},
        {IDX_SLICE, -1, -4, -1, 3, {9, 8, 7}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tgl_params p = {0};
        idx(&p, 0, cases[c].kind, cases[c].start, cases[c].stop, cases[c].step);
        tgl_array *y = run(CTX, "subtensor", 1, &x, &p);
        assert_shape(y, 1, &cases[c].n);
        assert_elements(CTX, y, cases[c].want, cases[c].n);
        tgl_array_release(y);
    }
    tgl_array_release(x);
}

static void subtensor_clips_slice_bounds_and_gives_empty_slices(void **state)
{
    tgl_array *x = iota(CTX, 1, (int64_t[]){10});
    struct { int64_t start, stop, step; int64_t n; double want[10]; } cases[] = {
        {-100, 100, 1, 10, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
        {5, 100, 2, 3, {5, 7, 9}},
        {100, -100, -4, 3, {9, 5, 1}},
        {5, -100, -1, 6, {5, 4, 3, 2, 1, 0}},
        {100, 200, 1, 0, {0}},
        {-100, -50, 1, 0, {0}},
        {3, 3, 1, 0, {0}},
        {5, 2, 1, 0, {0}},
        {2, 5, -1, 0, {0}},
        {0, 10, INT64_MAX, 1, {0}},
        {9, -100, INT64_MIN, 1, {9}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tgl_params p = {0};
        idx(&p, 0, IDX_SLICE, cases[c].start, cases[c].stop, cases[c].step);
        tgl_array *y = run(CTX, "subtensor", 1, &x, &p);
        assert_shape(y, 1, &cases[c].n);
        assert_elements(CTX, y, cases[c].want, cases[c].n);
        tgl_array_release(y);
    }
    tgl_array_release(x);
    /* An empty slice of a matrix keeps the other axis. */
    int64_t s[2] = {3, 4};
    tgl_array *m = iota(CTX, 2, s);
    tgl_params p = {0};
    idx(&p, 0, IDX_SLICE, 1, 1, 1);
    tgl_array *y = run(CTX, "subtensor", 1, &m, &p);
    assert_shape(y, 2, (int64_t[]){0, 4});
    tgl_array_release(y);
    /* An empty view is anchored at x's first element, inside the storage,
     * whatever its bounds were. */
    tgl_params q = {0};
    idx(&q, 0, IDX_INDEX, 2, 0, 0);
    idx(&q, 1, IDX_SLICE, 5, 9, 1);
    y = run(CTX, "subtensor", 1, &m, &q);
    assert_shape(y, 1, (int64_t[]){0});
    assert_ptr_equal(y->data, m->data);
    tgl_array_release(y);
    tgl_array_release(m);
}

static void subtensor_mixes_indices_slices_and_whole_axes_in_3d(void **state)
{
    int64_t s[3] = {2, 3, 4};
    tgl_array *x = iota(CTX, 3, s);
    tgl_params p = {0};
    idx(&p, 0, IDX_SLICE | IDX_NO_START | IDX_NO_STOP, 0, 0, 1);
    idx(&p, 1, IDX_INDEX, 1, 0, 0);
    idx(&p, 2, IDX_SLICE | IDX_NO_START | IDX_NO_STOP, 0, 0, -2);
    tgl_array *y = run(CTX, "subtensor", 1, &x, &p);
    assert_shape(y, 2, (int64_t[]){2, 2});
    assert_elements(CTX, y, (double[]){7, 5, 19, 17}, 4);
    tgl_array_release(y);
    /* No indexed axes: the whole array. */
    tgl_params none = {0};
    y = run(CTX, "subtensor", 1, &x, &none);
    assert_shape(y, 3, s);
    assert_true(y->data == x->data);
    tgl_array_release(y);
    /* Only the first axis indexed: the rest are taken whole. */
    tgl_params q = {0};
    idx(&q, 0, IDX_INDEX, 1, 0, 0);
    y = run(CTX, "subtensor", 1, &x, &q);
    assert_shape(y, 2, (int64_t[]){3, 4});
    assert_true(elem(CTX, y, 0) == 12 && elem(CTX, y, 11) == 23);
    tgl_array_release(y);
    tgl_array_release(x);
}

static void subtensor_is_a_view_that_shares_storage(void **state)
{
    int64_t s[2] = {3, 4};
    tgl_array *x = iota(CTX, 2, s);
    tgl_params p = {0};
    idx(&p, 0, IDX_INDEX, 1, 0, 0);
    idx(&p, 1, IDX_SLICE | IDX_NO_START | IDX_NO_STOP, 0, 0, -2);
    tgl_array *y = run(CTX, "subtensor", 1, &x, &p);
    assert_ptr_equal(y->storage, x->storage);
    assert_int_equal(y->strides[0], -2);
    assert_elements(CTX, y, (double[]){7, 5}, 2);
    /* A write through x shows through the view: no copy was made. */
    assert_ok(CTX, tgl_array_set(CTX, x, (int64_t[]){1, 1}, 99));
    assert_elements(CTX, y, (double[]){7, 99}, 2);
    tgl_array_release(x); /* the view keeps the storage alive */
    assert_elements(CTX, y, (double[]){7, 99}, 2);
    tgl_array_release(y);
}

static void subtensor_takes_bounds_from_inputs(void **state)
{
    tgl_array *x = iota(CTX, 1, (int64_t[]){10});
    tgl_params p = {0};
    idx(&p, 0, IDX_SLICE | IDX_START_INPUT | IDX_STOP_INPUT | IDX_STEP_INPUT, 0, 0, 0);
    tgl_array *in[4] = {x, scalar_int(CTX, TGL_INT64, 8), scalar_int(CTX, TGL_INT32, 1),
                        scalar_int(CTX, TGL_INT64, -2)};
    tgl_array *y = run(CTX, "subtensor", 4, in, &p);
    assert_elements(CTX, y, (double[]){8, 6, 4, 2}, 4);
    tgl_array_release(y);
    /* Only the stop from an input; start and step constant. */
    tgl_params q = {0};
    idx(&q, 0, IDX_SLICE | IDX_STOP_INPUT, 1, 0, 3);
    tgl_array *in2[2] = {x, in[1]};
    y = run(CTX, "subtensor", 2, in2, &q);
    assert_elements(CTX, y, (double[]){1, 4, 7}, 3);
    tgl_array_release(y);
    release_all(4, in);
    /* An index from an input, then a slice from inputs, in axis order. */
    int64_t s[2] = {3, 4};
    tgl_array *m = iota(CTX, 2, s);
    tgl_params r = {0};
    idx(&r, 0, IDX_INDEX | IDX_START_INPUT, 0, 0, 0);
    idx(&r, 1, IDX_SLICE | IDX_START_INPUT | IDX_NO_STOP, 0, 0, 1);
    tgl_array *in3[3] = {m, scalar_int(CTX, TGL_INT64, -1), scalar_int(CTX, TGL_INT32, 2)};
    y = run(CTX, "subtensor", 3, in3, &r);
    assert_elements(CTX, y, (double[]){10, 11}, 2);
    tgl_array_release(y);
    release_all(3, in3);
}

static void subtensor_index_out_of_range_fails_at_run_time_naming_the_axis(void **state)
{
    int64_t s[2] = {4, 3};
    tgl_array *x = iota(CTX, 2, s), *y = NULL;
    tgl_params p = {0};
    idx(&p, 1, IDX_INDEX, 4, 0, 0);
    idx(&p, 0, IDX_SLICE | IDX_NO_START | IDX_NO_STOP, 0, 0, 1);
    /* C index 4 is the user's 5; axes count from 1 in messages. */
    assert_fails(CTX, tgl_eval(CTX, op("subtensor"), 1, &x, &p, &y), TGL_ESHAPE, "subtensor: ",
                 "index 5 is out of range for axis 2 of size 3");
    assert_null(y);
    idx(&p, 1, IDX_INDEX, -4, 0, 0);
    assert_fails(CTX, tgl_eval(CTX, op("subtensor"), 1, &x, &p, &y), TGL_ESHAPE, "subtensor: ",
                 "index -4 is out of range for axis 2 of size 3");
    /* The same from an input. */
    tgl_params q = {0};
    idx(&q, 0, IDX_INDEX | IDX_START_INPUT, 0, 0, 0);
    tgl_array *in[2] = {x, scalar_int(CTX, TGL_INT64, 4)};
    assert_fails(CTX, tgl_eval(CTX, op("subtensor"), 2, in, &q, &y), TGL_ESHAPE, "subtensor: ",
                 "index 5 is out of range for axis 1 of size 4");
    assert_null(y);
    release_all(2, in);
}

static void subtensor_rejects_a_zero_step(void **state)
{
    tgl_array *x = iota(CTX, 1, (int64_t[]){5}), *y = NULL;
    tgl_params p = {0};
    idx(&p, 0, IDX_SLICE, 0, 5, 0);
    assert_fails(CTX, tgl_eval(CTX, op("subtensor"), 1, &x, &p, &y), TGL_EINVAL,
                 "tgl_eval: subtensor: ", "slice step cannot be zero (axis 1)");
    /* From an input, the step is only known at run time. */
    tgl_params q = {0};
    idx(&q, 0, IDX_SLICE | IDX_STEP_INPUT, 0, 5, 0);
    tgl_array *in[2] = {x, scalar_int(CTX, TGL_INT64, 0)};
    assert_fails(CTX, tgl_eval(CTX, op("subtensor"), 2, in, &q, &y), TGL_EINVAL, "subtensor: ",
                 "slice step is 0 on axis 1");
    assert_null(y);
    release_all(2, in);
}

static void subtensor_rejects_bad_bound_inputs_and_parameters(void **state)
{
    int64_t s[2] = {3, 4};
    tgl_array *x = iota(CTX, 2, s), *y = NULL;
    tgl_params p = {0};
    idx(&p, 0, IDX_INDEX | IDX_START_INPUT, 0, 0, 0);
    tgl_array *f = NULL;
    assert_ok(CTX, tgl_array_full(CTX, TGL_FLOAT64, 0, NULL, 1.0, &f));
    tgl_array *in[2] = {x, f};
    assert_fails(CTX, tgl_eval(CTX, op("subtensor"), 2, in, &p, &y), TGL_EDTYPE,
                 "tgl_eval: subtensor: ", "must be int32 or int64 scalars; input 2 is a float64");
    /* A bound the parameters name but no input gives. */
    assert_fails(CTX, tgl_eval(CTX, op("subtensor"), 1, &x, &p, &y), TGL_EINVAL,
                 "tgl_eval: subtensor: ", "name 1 bound inputs, got 0");
    /* More indexed axes than x has. */
    tgl_params q = {0};
    idx(&q, 2, IDX_INDEX, 0, 0, 0);
    assert_fails(CTX, tgl_eval(CTX, op("subtensor"), 1, &x, &q, &y), TGL_ESHAPE,
                 "tgl_eval: subtensor: ", "too many indices: 3 for x with 2 dimensions");
    tgl_params r = {0};
    r.n = 3;
    assert_fails(CTX, tgl_eval(CTX, op("subtensor"), 1, &x, &r, &y), TGL_EINVAL,
                 "tgl_eval: subtensor: ", "four parameters per indexed axis");
    tgl_params k = {0};
    idx(&k, 0, 2, 0, 0, 1);
    assert_fails(CTX, tgl_eval(CTX, op("subtensor"), 1, &x, &k, &y), TGL_EINVAL,
                 "tgl_eval: subtensor: ", "bad index kind 2 for axis 1");
    assert_null(y);
    release_all(2, in);
}

/* ------------------------------------------------------------------------ */
/* inc_subtensor                                                            */
/* ------------------------------------------------------------------------ */

static void inc_subtensor_adds_v_into_the_region_of_a_copy(void **state)
{
    int64_t s[2] = {3, 4};
    tgl_array *x = iota(CTX, 2, s);
    tgl_array *v = arr(CTX, TGL_FLOAT64, 2, (int64_t[]){2, 2}, (double[]){10, 20, 30, 40});
    tgl_params p = {0};
    idx(&p, 0, IDX_SLICE, 1, 3, 1);
    idx(&p, 1, IDX_SLICE | IDX_NO_START | IDX_NO_STOP, 0, 0, 2);
    tgl_array *in[2] = {x, v};
    tgl_array *y = run(CTX, "inc_subtensor", 2, in, &p);
    assert_shape(y, 2, s);
    assert_elements(CTX, y, (double[]){0, 1, 2, 3, 14, 5, 26, 7, 38, 9, 50, 11}, 12);
    assert_ptr_not_equal(y->storage, x->storage);
    assert_true(elem(CTX, x, 4) == 4); /* x itself is untouched */
    tgl_array_release(y);
    release_all(2, in);
}

static void inc_subtensor_set_assigns_and_broadcasts_v(void **state)
{
    int64_t s[2] = {3, 4};
    tgl_array *x = iota(CTX, 2, s);
    /* A scalar v fills a column. */
    tgl_params p = {0};
    p.flags = INC_SET;
    idx(&p, 0, IDX_SLICE | IDX_NO_START | IDX_NO_STOP, 0, 0, 1);
    idx(&p, 1, IDX_INDEX, 1, 0, 0);
    tgl_array *in[2] = {x, scalar_int(CTX, TGL_INT64, 7)};
    tgl_array *y = run(CTX, "inc_subtensor", 2, in, &p);
    assert_int_equal(y->dtype_id, TGL_FLOAT64);
    assert_elements(CTX, y, (double[]){0, 7, 2, 3, 4, 7, 6, 7, 8, 7, 10, 11}, 12);
    tgl_array_release(y);
    tgl_array_release(in[1]);
    /* A vector v (a missing leading axis) and a (1,4) v (a size-1 axis)
     * both broadcast over the rows of x[0:2]. */
    tgl_params q = {0};
    q.flags = INC_SET;
    idx(&q, 0, IDX_SLICE, 0, 2, 1);
    double row[4] = {-1, -2, -3, -4};
    tgl_array *vs[2] = {arr(CTX, TGL_FLOAT64, 1, (int64_t[]){4}, row),
                        arr(CTX, TGL_FLOAT64, 2, (int64_t[]){1, 4}, row)};
    for (int k = 0; k < 2; k++) {
        in[1] = vs[k];
        y = run(CTX, "inc_subtensor", 2, in, &q);
        assert_elements(CTX, y, (double[]){-1, -2, -3, -4, -1, -2, -3, -4, 8, 9, 10, 11}, 12);
        tgl_array_release(y);
    }
    release_all(2, vs);
    tgl_array_release(x);
}

static void inc_subtensor_works_for_every_dtype(void **state)
{
    for (int dt = 0; dt < TGL_NDTYPES; dt++) {
        double xv[4] = {0, 1, 250, 0}, vv[2] = {1, 10};
        double want[TGL_NDTYPES][4] = {
            [TGL_FLOAT32] = {0, 2, 260, 0}, [TGL_FLOAT64] = {0, 2, 260, 0},
            [TGL_INT32] = {0, 2, 260, 0},   [TGL_INT64] = {0, 2, 260, 0},
            [TGL_UINT8] = {0, 2, 4, 0},     /* wraps, as uint8 arithmetic does */
            [TGL_BOOL] = {0, 1, 1, 0},      /* a logical or */
        };
        tgl_array *in[2] = {arr(CTX, dt, 1, (int64_t[]){4}, xv),
                            arr(CTX, dt, 1, (int64_t[]){2}, vv)};
        tgl_params p = {0};
        idx(&p, 0, IDX_SLICE, 1, 3, 1);
        tgl_array *y = run(CTX, "inc_subtensor", 2, in, &p);
        assert_int_equal(y->dtype_id, dt);
        assert_elements(CTX, y, want[dt], 4);
        if (dt == TGL_BOOL) /* true + true stays a valid bool byte */
            assert_int_equal(((const uint8_t *)y->data)[1], 1);
        tgl_array_release(y);
        p.flags = INC_SET;
        y = run(CTX, "inc_subtensor", 2, in, &p);
        double set[4] = {0, 1, dt == TGL_BOOL ? 1 : 10, 0};
        assert_elements(CTX, y, set, 4);
        tgl_array_release(y);
        release_all(2, in);
    }
}

static void inc_subtensor_converts_v_and_follows_negative_steps(void **state)
{
    tgl_array *x = arr(CTX, TGL_INT32, 1, (int64_t[]){5}, (double[]){0, 0, 0, 0, 0});
    tgl_array *v = arr(CTX, TGL_FLOAT64, 1, (int64_t[]){3}, (double[]){1, 2, 3});
    tgl_params p = {0};
    idx(&p, 0, IDX_SLICE | IDX_NO_START | IDX_NO_STOP, 0, 0, -2);
    tgl_array *in[2] = {x, v};
    tgl_array *y = run(CTX, "inc_subtensor", 2, in, &p);
    assert_int_equal(y->dtype_id, TGL_INT32);
    assert_elements(CTX, y, (double[]){3, 0, 2, 0, 1}, 5);
    tgl_array_release(y);
    /* Bounds from inputs come after v. */
    tgl_params q = {0};
    idx(&q, 0, IDX_INDEX | IDX_START_INPUT, 0, 0, 0);
    tgl_array *in3[3] = {x, scalar_int(CTX, TGL_INT64, 5), scalar_int(CTX, TGL_INT32, -2)};
    y = run(CTX, "inc_subtensor", 3, in3, &q);
    assert_elements(CTX, y, (double[]){0, 0, 0, 5, 0}, 5);
    tgl_array_release(y);
    /* An empty region changes nothing. */
    tgl_params r = {0};
    idx(&r, 0, IDX_SLICE, 3, 1, 1);
    tgl_array *e = NULL;
    assert_ok(CTX, tgl_array_empty(CTX, TGL_FLOAT64, 1, (int64_t[]){0}, &e));
    tgl_array *in4[2] = {x, e};
    y = run(CTX, "inc_subtensor", 2, in4, &r);
    assert_elements(CTX, y, (double[]){0, 0, 0, 0, 0}, 5);
    tgl_array_release(y);
    tgl_array_release(e);
    tgl_array_release(in3[1]);
    tgl_array_release(in3[2]);
    release_all(2, in);
}

static void inc_subtensor_rejects_a_v_that_does_not_fit(void **state)
{
    int64_t s[2] = {3, 4};
    tgl_array *x = iota(CTX, 2, s), *y = NULL;
    tgl_params p = {0};
    idx(&p, 0, IDX_SLICE, 0, 2, 1);
    tgl_array *in[2] = {x, iota(CTX, 1, (int64_t[]){3})};
    assert_fails(CTX, tgl_eval(CTX, op("inc_subtensor"), 2, in, &p, &y), TGL_ESHAPE,
                 "inc_subtensor: ", "v has size 3 on its axis 1 where x[idx] has size 4");
    tgl_array_release(in[1]);
    in[1] = iota(CTX, 3, (int64_t[]){2, 2, 4});
    assert_fails(CTX, tgl_eval(CTX, op("inc_subtensor"), 2, in, &p, &y), TGL_ESHAPE,
                 "tgl_eval: inc_subtensor: ", "v has 3 dimensions, more than the 2 of the region");
    assert_null(y);
    release_all(2, in);
}

/* ------------------------------------------------------------------------ */
/* adv_subtensor                                                            */
/* ------------------------------------------------------------------------ */

static void adv_subtensor_gathers_rows_with_1_based_indices(void **state)
{
    int64_t s[2] = {5, 2};
    tgl_array *x = iota(CTX, 2, s);
    tgl_array *in[2] = {x, ints(CTX, 4, (int64_t[]){3, 1, 3, -1})};
    tgl_params p = adv(2, (int[]){1, 0});
    tgl_array *y = run(CTX, "adv_subtensor", 2, in, &p);
    assert_shape(y, 2, (int64_t[]){4, 2});
    assert_elements(CTX, y, (double[]){4, 5, 0, 1, 4, 5, 8, 9}, 8);
    assert_ptr_not_equal(y->storage, x->storage);
    tgl_array_release(y);
    release_all(2, in);
}

static void adv_subtensor_picks_one_element_per_row_with_two_arrays(void **state)
{
    /* p[arange, y]: x 3x4, rows {1,2,3}, cols {2,4,1}. */
    int64_t s[2] = {3, 4};
    tgl_array *x = iota(CTX, 2, s);
    tgl_array *rows = arr(CTX, TGL_INT32, 1, (int64_t[]){3}, (double[]){1, 2, 3});
    tgl_array *in[3] = {x, rows, ints(CTX, 3, (int64_t[]){2, 4, 1})};
    tgl_params p = adv(2, (int[]){1, 1});
    tgl_array *y = run(CTX, "adv_subtensor", 3, in, &p);
    assert_shape(y, 1, (int64_t[]){3});
    assert_elements(CTX, y, (double[]){1, 7, 8}, 3);
    tgl_array_release(y);
    /* Negative indices count from the end. */
    tgl_array_release(in[2]);
    in[2] = ints(CTX, 3, (int64_t[]){-1, -4, -2});
    y = run(CTX, "adv_subtensor", 3, in, &p);
    assert_elements(CTX, y, (double[]){3, 4, 10}, 3);
    tgl_array_release(y);
    release_all(3, in);
}

static void adv_subtensor_broadcasts_index_arrays_and_keeps_other_axes(void **state)
{
    /* Rows (3,1) against columns (2,): a 3x2 grid of x[r, c]. */
    int64_t s[2] = {3, 4};
    tgl_array *x = iota(CTX, 2, s);
    tgl_array *in[3] = {x, arr(CTX, TGL_INT64, 2, (int64_t[]){3, 1}, (double[]){3, 1, 2}),
                        ints(CTX, 2, (int64_t[]){1, 4})};
    tgl_params p = adv(2, (int[]){1, 1});
    tgl_array *y = run(CTX, "adv_subtensor", 3, in, &p);
    assert_shape(y, 2, (int64_t[]){3, 2});
    assert_elements(CTX, y, (double[]){8, 11, 0, 3, 4, 7}, 6);
    tgl_array_release(y);
    release_all(3, in);
    /* A middle axis indexed by a 2x2 array: pre axis, 2x2, post axis. */
    int64_t s3[3] = {2, 3, 4};
    tgl_array *x3 = iota(CTX, 3, s3);
    tgl_array *in3[2] = {x3, arr(CTX, TGL_INT64, 2, (int64_t[]){2, 2}, (double[]){3, 1, 2, 2})};
    tgl_params q = adv(3, (int[]){0, 1, 0});
    y = run(CTX, "adv_subtensor", 2, in3, &q);
    assert_shape(y, 4, (int64_t[]){2, 2, 2, 4});
    /* y[i, a, b, k] = x[i, idx[a, b] - 1, k] */
    for (int64_t i = 0; i < 2; i++)
        for (int64_t ab = 0; ab < 4; ab++)
            for (int64_t k = 0; k < 4; k++) {
                double r = elem(CTX, in3[1], ab) - 1;
                double want = (double)(i * 12) + r * 4 + (double)k;
                assert_true(elem(CTX, y, i * 16 + ab * 4 + k) == want);
            }
    tgl_array_release(y);
    /* A 0-d index array drops its axis, as an integer would. */
    tgl_array_release(in3[1]);
    in3[1] = scalar_int(CTX, TGL_INT32, 2);
    y = run(CTX, "adv_subtensor", 2, in3, &q);
    assert_shape(y, 2, (int64_t[]){2, 4});
    assert_elements(CTX, y, (double[]){4, 5, 6, 7, 16, 17, 18, 19}, 8);
    tgl_array_release(y);
    release_all(2, in3);
}

static void adv_subtensor_handles_empty_indices_and_every_dtype(void **state)
{
    int64_t s[2] = {3, 2};
    tgl_array *x = iota(CTX, 2, s);
    tgl_array *in[2] = {x, ints(CTX, 0, (int64_t[]){0})};
    tgl_params p = adv(2, (int[]){1, 0});
    tgl_array *y = run(CTX, "adv_subtensor", 2, in, &p);
    assert_shape(y, 2, (int64_t[]){0, 2});
    tgl_array_release(y);
    release_all(2, in);
    for (int dt = 0; dt < TGL_NDTYPES; dt++) {
        tgl_array *a[2] = {arr(CTX, dt, 1, (int64_t[]){4}, (double[]){0, 1, 0, 1}),
                           ints(CTX, 3, (int64_t[]){4, 1, 2})};
        tgl_params q = adv(1, (int[]){1});
        y = run(CTX, "adv_subtensor", 2, a, &q);
        assert_int_equal(y->dtype_id, dt);
        assert_elements(CTX, y, (double[]){1, 0, 1}, 3);
        tgl_array_release(y);
        release_all(2, a);
    }
}

static void adv_subtensor_rejects_bad_indices_at_run_time(void **state)
{
    int64_t s[2] = {3, 4};
    tgl_array *x = iota(CTX, 2, s), *y = NULL;
    tgl_params p = adv(2, (int[]){1, 0});
    tgl_array *in[2] = {x, ints(CTX, 3, (int64_t[]){1, 0, 2})};
    assert_fails(CTX, tgl_eval(CTX, op("adv_subtensor"), 2, in, &p, &y), TGL_ESHAPE,
                 "adv_subtensor: ", "index 0 on axis 1: indices count from 1");
    tgl_array_release(in[1]);
    in[1] = ints(CTX, 2, (int64_t[]){1, 4});
    assert_fails(CTX, tgl_eval(CTX, op("adv_subtensor"), 2, in, &p, &y), TGL_ESHAPE,
                 "adv_subtensor: ", "index 4 is out of range for axis 1 of size 3");
    tgl_array_release(in[1]);
    in[1] = ints(CTX, 1, (int64_t[]){-4});
    assert_fails(CTX, tgl_eval(CTX, op("adv_subtensor"), 2, in, &p, &y), TGL_ESHAPE,
                 "adv_subtensor: ", "index -4 is out of range for axis 1 of size 3");
    /* The message names the node's inputs and where it was built. */
    assert_non_null(strstr(tgl_ctx_error(CTX), "(inputs: float64 (3,4), int64 (1,))"));
    /* Index arrays that do not broadcast together. */
    tgl_params q = adv(2, (int[]){1, 1});
    tgl_array *in2[3] = {x, ints(CTX, 2, (int64_t[]){1, 2}), ints(CTX, 3, (int64_t[]){1, 2, 3})};
    assert_fails(CTX, tgl_eval(CTX, op("adv_subtensor"), 3, in2, &q, &y), TGL_ESHAPE,
                 "adv_subtensor: ", "do not broadcast together: sizes 2 and 3");
    assert_null(y);
    tgl_array_release(in2[1]);
    tgl_array_release(in2[2]);
    release_all(2, in);
}

static void adv_subtensor_rejects_bad_index_types_and_layouts(void **state)
{
    int64_t s[3] = {3, 4, 5};
    tgl_array *x = iota(CTX, 3, s), *y = NULL;
    tgl_array *fi = arr(CTX, TGL_FLOAT64, 1, (int64_t[]){2}, (double[]){1, 2});
    tgl_array *bi = arr(CTX, TGL_BOOL, 1, (int64_t[]){3}, (double[]){1, 0, 1});
    tgl_array *ii = ints(CTX, 2, (int64_t[]){1, 2});
    tgl_params p = adv(3, (int[]){1, 0, 0});
    tgl_array *in[3] = {x, fi, ii};
    assert_fails(CTX, tgl_eval(CTX, op("adv_subtensor"), 2, in, &p, &y), TGL_EDTYPE,
                 "tgl_eval: adv_subtensor: ", "index arrays must be int32 or int64; index 1");
    in[1] = bi;
    assert_fails(CTX, tgl_eval(CTX, op("adv_subtensor"), 2, in, &p, &y), TGL_EDTYPE,
                 "tgl_eval: adv_subtensor: ", "boolean masks are not supported");
    in[1] = ii;
    tgl_params gap = adv(3, (int[]){1, 0, 1});
    assert_fails(CTX, tgl_eval(CTX, op("adv_subtensor"), 3, in, &gap, &y), TGL_EINVAL,
                 "tgl_eval: adv_subtensor: ", "indexed axes must be consecutive");
    tgl_params many = adv(4, (int[]){1, 0, 0, 0});
    assert_fails(CTX, tgl_eval(CTX, op("adv_subtensor"), 2, in, &many, &y), TGL_EINVAL,
                 "tgl_eval: adv_subtensor: ", "too many indices");
    tgl_params two = adv(3, (int[]){1, 1, 0});
    assert_fails(CTX, tgl_eval(CTX, op("adv_subtensor"), 2, in, &two, &y), TGL_EINVAL,
                 "tgl_eval: adv_subtensor: ", "2 axes are marked indexed but 1 index arrays");
    assert_null(y);
    tgl_array_release(x);
    tgl_array_release(fi);
    tgl_array_release(bi);
    tgl_array_release(ii);
}

/* ------------------------------------------------------------------------ */
/* adv_inc_subtensor                                                        */
/* ------------------------------------------------------------------------ */

static void adv_inc_subtensor_accumulates_repeated_indices(void **state)
{
    tgl_array *x = arr(CTX, TGL_FLOAT64, 1, (int64_t[]){5}, (double[]){0, 0, 0, 0, 100});
    tgl_array *in[3] = {x, arr(CTX, TGL_FLOAT64, 1, (int64_t[]){4}, (double[]){1, 2, 3, 4}),
                        ints(CTX, 4, (int64_t[]){2, 2, 5, -4})};
    tgl_params p = adv(1, (int[]){1});
    tgl_array *y = run(CTX, "adv_inc_subtensor", 3, in, &p);
    assert_elements(CTX, y, (double[]){0, 7, 0, 0, 103}, 5);
    tgl_array_release(y);
    /* Set: the last write to a position wins. */
    p.flags = INC_SET;
    y = run(CTX, "adv_inc_subtensor", 3, in, &p);
    assert_elements(CTX, y, (double[]){0, 4, 0, 0, 3}, 5);
    tgl_array_release(y);
    release_all(3, in);
}

static void adv_inc_subtensor_scatters_embedding_rows(void **state)
{
    /* The gradient of an embedding lookup: rows of v added at word ids. */
    int64_t s[2] = {4, 3};
    tgl_array *x = NULL;
    assert_ok(CTX, tgl_array_zeros(CTX, TGL_FLOAT32, 2, s, &x));
    tgl_array *v = arr(CTX, TGL_FLOAT32, 2, (int64_t[]){3, 3},
                       (double[]){1, 2, 3, 10, 20, 30, 100, 200, 300});
    tgl_array *in[3] = {x, v, ints(CTX, 3, (int64_t[]){1, 3, 1})};
    tgl_params p = adv(2, (int[]){1, 0});
    tgl_array *y = run(CTX, "adv_inc_subtensor", 3, in, &p);
    assert_int_equal(y->dtype_id, TGL_FLOAT32);
    assert_elements(CTX, y, (double[]){101, 202, 303, 0, 0, 0, 10, 20, 30, 0, 0, 0}, 12);
    tgl_array_release(y);
    /* A scalar v broadcasts over the whole gathered shape. */
    tgl_array_release(in[1]);
    in[1] = scalar_int(CTX, TGL_INT64, 1);
    y = run(CTX, "adv_inc_subtensor", 3, in, &p);
    assert_elements(CTX, y, (double[]){2, 2, 2, 0, 0, 0, 1, 1, 1, 0, 0, 0}, 12);
    tgl_array_release(y);
    release_all(3, in);
}

static void adv_inc_subtensor_with_two_arrays_and_integer_dtypes(void **state)
{
    int64_t s[2] = {3, 4};
    tgl_array *x = NULL;
    assert_ok(CTX, tgl_array_zeros(CTX, TGL_INT32, 2, s, &x));
    tgl_array *in[4] = {x, ints(CTX, 3, (int64_t[]){5, 6, 7}), ints(CTX, 3, (int64_t[]){1, 2, 3}),
                        ints(CTX, 3, (int64_t[]){2, 4, 1})};
    tgl_params p = adv(2, (int[]){1, 1});
    tgl_array *y = run(CTX, "adv_inc_subtensor", 4, in, &p);
    assert_int_equal(y->dtype_id, TGL_INT32);
    assert_elements(CTX, y, (double[]){0, 5, 0, 0, 0, 0, 0, 6, 7, 0, 0, 0}, 12);
    tgl_array_release(y);
    release_all(4, in);
}

static void adv_inc_subtensor_rejects_bad_v_and_indices(void **state)
{
    int64_t s[2] = {3, 4};
    tgl_array *x = iota(CTX, 2, s), *y = NULL;
    tgl_params p = adv(2, (int[]){1, 0});
    tgl_array *in[3] = {x, iota(CTX, 2, (int64_t[]){2, 3}), ints(CTX, 2, (int64_t[]){1, 2})};
    assert_fails(CTX, tgl_eval(CTX, op("adv_inc_subtensor"), 3, in, &p, &y), TGL_ESHAPE,
                 "adv_inc_subtensor: ", "v has size 3 on its axis 2 where x[indices] has size 4");
    tgl_array_release(in[1]);
    in[1] = scalar_int(CTX, TGL_INT64, 1);
    tgl_array_release(in[2]);
    in[2] = ints(CTX, 2, (int64_t[]){1, 9});
    assert_fails(CTX, tgl_eval(CTX, op("adv_inc_subtensor"), 3, in, &p, &y), TGL_ESHAPE,
                 "adv_inc_subtensor: ", "index 9 is out of range for axis 1 of size 3");
    tgl_array_release(in[1]);
    in[1] = iota(CTX, 3, (int64_t[]){1, 2, 4});
    assert_fails(CTX, tgl_eval(CTX, op("adv_inc_subtensor"), 3, in, &p, &y), TGL_ESHAPE,
                 "tgl_eval: adv_inc_subtensor: ", "v has 3 dimensions, more than the 2");
    assert_null(y);
    release_all(3, in);
}

/* ------------------------------------------------------------------------ */
/* types and hash-consing (tgl_apply)                                       */
/* ------------------------------------------------------------------------ */

static void subtensor_types_drop_indexed_axes_and_keep_broadcast_flags(void **state)
{
    /* x: float32, 3-d, axes 1 and 3 (C: 0 and 2) broadcastable. */
    tgl_node *x = input(CTX, TGL_FLOAT32, 3, 0x5);
    tgl_params p = {0};
    idx(&p, 0, IDX_INDEX, 0, 0, 0);
    idx(&p, 1, IDX_SLICE, 2, 5, 1);
    tgl_node *y = apply(CTX, "subtensor", 1, &x, &p);
    tgl_type t = tgl_node_type(y);
    assert_int_equal(t.dtype, TGL_FLOAT32);
    assert_int_equal(t.ndim, 2);
    assert_int_equal(t.bcast, 0x2); /* the whole last axis keeps its flag */
    /* A constant slice that takes the one element of a broadcastable axis
     * stays broadcastable; one that may take none, or is symbolic, not. */
    struct { int64_t kind, start, stop; uint32_t want; int nb; } cases[] = {
        {IDX_SLICE, 0, 1, 0x1, 0},
        {IDX_SLICE | IDX_NO_START | IDX_NO_STOP, 0, 0, 0x1, 0},
        {IDX_SLICE, -1, 5, 0x1, 0},
        {IDX_SLICE, 1, 2, 0x0, 0},
        {IDX_SLICE | IDX_STOP_INPUT, 0, 0, 0x0, 1},
    };
    tgl_node *b = input(CTX, TGL_INT64, 0, 0);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tgl_params q = {0};
        idx(&q, 0, cases[c].kind, cases[c].start, cases[c].stop, 1);
        idx(&q, 1, IDX_INDEX, 0, 0, 0);
        tgl_node *in[2] = {x, b};
        tgl_type u = tgl_node_type(apply(CTX, "subtensor", 1 + cases[c].nb, in, &q));
        assert_int_equal(u.ndim, 2);
        assert_int_equal(u.bcast, cases[c].want | 0x2);
    }
    /* A constant index on a broadcastable axis is checked when built. */
    tgl_params bad = {0};
    idx(&bad, 0, IDX_INDEX, 1, 0, 0);
    tgl_node *out = NULL;
    assert_fails(CTX, tgl_apply(CTX, op("subtensor"), 1, &x, &bad, NULL, &out), TGL_ESHAPE,
                 "tgl_apply: subtensor: ", "index 2 is out of range for axis 1 of size 1");
    assert_null(out);
}

static void indexing_nodes_are_hash_consed(void **state)
{
    tgl_node *x = input(CTX, TGL_FLOAT64, 2, 0);
    tgl_params p = {0};
    idx(&p, 0, IDX_SLICE, 0, 2, 1);
    tgl_node *a = apply(CTX, "subtensor", 1, &x, &p);
    assert_ptr_equal(apply(CTX, "subtensor", 1, &x, &p), a);
    idx(&p, 0, IDX_SLICE, 0, 3, 1);
    assert_ptr_not_equal(apply(CTX, "subtensor", 1, &x, &p), a);
    tgl_node *i = input(CTX, TGL_INT64, 1, 0);
    tgl_node *in[2] = {x, i};
    tgl_params q = adv(2, (int[]){1, 0});
    tgl_node *g = apply(CTX, "adv_subtensor", 2, in, &q);
    assert_ptr_equal(apply(CTX, "adv_subtensor", 2, in, &q), g);
    assert_int_equal(tgl_node_op(g), op("adv_subtensor"));
    assert_int_equal(tgl_node_ninputs(g), 2);
}

static void adv_types_place_the_broadcast_index_shape(void **state)
{
    /* x (float64, 4-d, last axis broadcastable), axes 2-3 indexed by a
     * matrix and a vector: pre axis, two broadcast index axes, post axis. */
    tgl_node *x = input(CTX, TGL_FLOAT64, 4, 0x8);
    tgl_node *in[3] = {x, input(CTX, TGL_INT64, 2, 0), input(CTX, TGL_INT32, 1, 0)};
    tgl_params p = adv(4, (int[]){0, 1, 1, 0});
    tgl_type t = tgl_node_type(apply(CTX, "adv_subtensor", 3, in, &p));
    assert_int_equal(t.dtype, TGL_FLOAT64);
    assert_int_equal(t.ndim, 4);
    assert_int_equal(t.bcast, 0x8);
    /* An index axis is broadcastable when every array that has it
     * declares it so: the vector lacks the first, the matrix's is. */
    tgl_node *in1[3] = {x, input(CTX, TGL_INT64, 2, 0x1), in[2]};
    t = tgl_node_type(apply(CTX, "adv_subtensor", 3, in1, &p));
    assert_int_equal(t.bcast, 0x8 | 0x2);
    /* The second axis: both arrays declare it. */
    in[2] = input(CTX, TGL_INT32, 1, 0x1);
    tgl_node *in2[3] = {x, input(CTX, TGL_INT64, 2, 0x2), in[2]};
    t = tgl_node_type(apply(CTX, "adv_subtensor", 3, in2, &p));
    assert_int_equal(t.bcast, 0x8 | 0x4);
    /* Only one of them declaring it is not enough. */
    tgl_node *in3[3] = {x, input(CTX, TGL_INT64, 2, 0), in[2]};
    t = tgl_node_type(apply(CTX, "adv_subtensor", 3, in3, &p));
    assert_int_equal(t.bcast, 0x8);
    /* Updates have x's type. */
    tgl_node *u[4] = {x, input(CTX, TGL_FLOAT32, 0, 0), in[1], in[2]};
    assert_true(tgl_node_type(apply(CTX, "adv_inc_subtensor", 4, u, &p)).bcast == 0x8);
    assert_int_equal(tgl_node_type(apply(CTX, "adv_inc_subtensor", 4, u, &p)).ndim, 4);
    tgl_params s = {0};
    idx(&s, 0, IDX_INDEX, 2, 0, 0);
    tgl_node *w[2] = {x, input(CTX, TGL_FLOAT64, 3, 0)};
    tgl_type it = tgl_node_type(apply(CTX, "inc_subtensor", 2, w, &s));
    assert_true(it.dtype == TGL_FLOAT64 && it.ndim == 4 && it.bcast == 0x8);
    /* More than eight result dimensions. */
    tgl_node *x8 = input(CTX, TGL_FLOAT64, 8, 0);
    tgl_node *in8[2] = {x8, input(CTX, TGL_INT64, 2, 0)};
    tgl_params p8 = adv(8, (int[]){1, 0, 0, 0, 0, 0, 0, 0});
    tgl_node *out = NULL;
    assert_fails(CTX, tgl_apply(CTX, op("adv_subtensor"), 2, in8, &p8, NULL, &out), TGL_ESHAPE,
                 "tgl_apply: adv_subtensor: ", "the result would have 9 dimensions");
    assert_null(out);
}

/* ------------------------------------------------------------------------ */
/* pullbacks (tgl_grad)                                                     */
/* ------------------------------------------------------------------------ */

/* d/dx given the gradient g of y (tgl_grad with a known gradient). */
static tgl_node *grad_of(tgl_ctx *ctx, tgl_node *y, tgl_node *g, tgl_node *x)
{
    tgl_node *gx = NULL;
    assert_ok(ctx, tgl_grad(ctx, NULL, 1, &x, 1, &y, &g, TGL_DISCONNECTED_RAISE, &gx));
    return gx;
}

static void subtensor_grad_adds_g_into_zeros(void **state)
{
    tgl_node *x = input(CTX, TGL_FLOAT64, 2, 0), *b = input(CTX, TGL_INT64, 0, 0);
    tgl_params p = {0};
    idx(&p, 0, IDX_INDEX | IDX_START_INPUT, 0, 0, 0);
    idx(&p, 1, IDX_SLICE | IDX_NO_START | IDX_NO_STOP, 0, 0, -2);
    tgl_node *xb[2] = {x, b};
    tgl_node *y = apply(CTX, "subtensor", 2, xb, &p);
    tgl_node *g = input(CTX, TGL_FLOAT64, 1, 0);
    tgl_node *gx = grad_of(CTX, y, g, x);
    assert_int_equal(tgl_node_op(gx), op("inc_subtensor"));
    assert_int_equal(tgl_node_ninputs(gx), 3);
    assert_int_equal(tgl_node_op(tgl_node_input_at(gx, 0)), op("fill_like"));
    assert_ptr_equal(tgl_node_input_at(gx, 1), g);
    assert_ptr_equal(tgl_node_input_at(gx, 2), b);
    assert_int_equal(tgl_node_params(gx)->flags, 0);
    /* Values: row -1 of a 3x4 x, every other column from the end. */
    int64_t s[2] = {3, 4};
    tgl_node *vars[3] = {x, b, g};
    tgl_array *vals[3] = {iota(CTX, 2, s), scalar_int(CTX, TGL_INT64, -1),
                          arr(CTX, TGL_FLOAT64, 1, (int64_t[]){2}, (double[]){1, 2})};
    tgl_array *r = value_of(CTX, gx, 3, vars, vals);
    assert_elements(CTX, r, (double[]){0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1}, 12);
    tgl_array_release(r);
    release_all(3, vals);
}

static void inc_subtensor_grads_pass_g_through_and_take_v_s_region(void **state)
{
    tgl_node *x = input(CTX, TGL_FLOAT64, 2, 0), *v = input(CTX, TGL_FLOAT64, 1, 0);
    tgl_node *g = input(CTX, TGL_FLOAT64, 2, 0);
    tgl_params p = {0};
    idx(&p, 0, IDX_SLICE, 0, 2, 1);
    tgl_node *xv[2] = {x, v};
    int64_t s[2] = {3, 4};
    for (int set = 0; set < 2; set++) {
        p.flags = set ? INC_SET : 0;
        tgl_node *y = apply(CTX, "inc_subtensor", 2, xv, &p);
        tgl_node *gx = grad_of(CTX, y, g, x), *gv = grad_of(CTX, y, g, v);
        if (!set)
            assert_ptr_equal(gx, g);
        assert_int_equal(tgl_node_type(gv).ndim, 1);
        tgl_node *vars[3] = {x, v, g};
        tgl_array *vals[3] = {iota(CTX, 2, s), iota(CTX, 1, (int64_t[]){4}), iota(CTX, 2, s)};
        tgl_array *rx = value_of(CTX, gx, 3, vars, vals), *rv = value_of(CTX, gv, 3, vars, vals);
        /* v was broadcast over rows 0 and 1: its gradient sums them. */
        assert_elements(CTX, rv, (double[]){4, 6, 8, 10}, 4);
        if (set) /* x's values in the region were overwritten */
            assert_elements(CTX, rx, (double[]){0, 0, 0, 0, 0, 0, 0, 0, 8, 9, 10, 11}, 12);
        else
            assert_elements(CTX, rx, (double[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 12);
        tgl_array_release(rx);
        tgl_array_release(rv);
        release_all(3, vals);
    }
}

static void adv_subtensor_grad_accumulates_repeated_positions(void **state)
{
    tgl_node *x = input(CTX, TGL_FLOAT64, 2, 0), *i = input(CTX, TGL_INT64, 1, 0);
    tgl_node *xi[2] = {x, i};
    tgl_params p = adv(2, (int[]){1, 0});
    tgl_node *y = apply(CTX, "adv_subtensor", 2, xi, &p);
    tgl_node *g = input(CTX, TGL_FLOAT64, 2, 0);
    tgl_node *gx = grad_of(CTX, y, g, x);
    assert_int_equal(tgl_node_op(gx), op("adv_inc_subtensor"));
    assert_ptr_equal(tgl_node_input_at(gx, 1), g);
    assert_ptr_equal(tgl_node_input_at(gx, 2), i);
    assert_int_equal(tgl_node_params(gx)->flags, 0);
    tgl_node *vars[3] = {x, i, g};
    tgl_array *vals[3] = {iota(CTX, 2, (int64_t[]){3, 2}), ints(CTX, 3, (int64_t[]){2, 2, -3}),
                          arr(CTX, TGL_FLOAT64, 2, (int64_t[]){3, 2},
                              (double[]){1, 2, 10, 20, 100, 200})};
    tgl_array *r = value_of(CTX, gx, 3, vars, vals);
    assert_elements(CTX, r, (double[]){100, 200, 11, 22, 0, 0}, 6);
    tgl_array_release(r);
    release_all(3, vals);
}

static void adv_inc_subtensor_grads_sum_v_over_its_broadcast(void **state)
{
    tgl_node *x = input(CTX, TGL_FLOAT64, 1, 0), *v = input(CTX, TGL_FLOAT64, 0, 0);
    tgl_node *i = input(CTX, TGL_INT64, 1, 0), *g = input(CTX, TGL_FLOAT64, 1, 0);
    tgl_node *in[3] = {x, v, i};
    tgl_params p = adv(1, (int[]){1});
    for (int set = 0; set < 2; set++) {
        p.flags = set ? INC_SET : 0;
        tgl_node *y = apply(CTX, "adv_inc_subtensor", 3, in, &p);
        tgl_node *gx = grad_of(CTX, y, g, x), *gv = grad_of(CTX, y, g, v);
        assert_int_equal(tgl_node_type(gv).ndim, 0);
        tgl_node *vars[4] = {x, v, i, g};
        tgl_array *vals[4] = {iota(CTX, 1, (int64_t[]){5}), iota(CTX, 0, NULL),
                              ints(CTX, 3, (int64_t[]){2, 2, 5}),
                              arr(CTX, TGL_FLOAT64, 1, (int64_t[]){5}, (double[]){1, 2, 3, 4, 5})};
        tgl_array *rx = value_of(CTX, gx, 4, vars, vals), *rv = value_of(CTX, gv, 4, vars, vals);
        assert_elements(CTX, rv, (double[]){2 + 2 + 5}, 1);
        if (set)
            assert_elements(CTX, rx, (double[]){1, 0, 3, 4, 0}, 5);
        else
            assert_ptr_equal(gx, g);
        tgl_array_release(rx);
        tgl_array_release(rv);
        release_all(4, vals);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        T(subtensor_index_takes_a_row_and_drops_the_axis),
        T(subtensor_slices_follow_python_with_steps_and_negative_steps),
        T(subtensor_clips_slice_bounds_and_gives_empty_slices),
        T(subtensor_mixes_indices_slices_and_whole_axes_in_3d),
        T(subtensor_is_a_view_that_shares_storage),
        T(subtensor_takes_bounds_from_inputs),
        T(subtensor_index_out_of_range_fails_at_run_time_naming_the_axis),
        T(subtensor_rejects_a_zero_step),
        T(subtensor_rejects_bad_bound_inputs_and_parameters),
        T(inc_subtensor_adds_v_into_the_region_of_a_copy),
        T(inc_subtensor_set_assigns_and_broadcasts_v),
        T(inc_subtensor_works_for_every_dtype),
        T(inc_subtensor_converts_v_and_follows_negative_steps),
        T(inc_subtensor_rejects_a_v_that_does_not_fit),
        T(adv_subtensor_gathers_rows_with_1_based_indices),
        T(adv_subtensor_picks_one_element_per_row_with_two_arrays),
        T(adv_subtensor_broadcasts_index_arrays_and_keeps_other_axes),
        T(adv_subtensor_handles_empty_indices_and_every_dtype),
        T(adv_subtensor_rejects_bad_indices_at_run_time),
        T(adv_subtensor_rejects_bad_index_types_and_layouts),
        T(adv_inc_subtensor_accumulates_repeated_indices),
        T(adv_inc_subtensor_scatters_embedding_rows),
        T(adv_inc_subtensor_with_two_arrays_and_integer_dtypes),
        T(adv_inc_subtensor_rejects_bad_v_and_indices),
        T(subtensor_types_drop_indexed_axes_and_keep_broadcast_flags),
        T(indexing_nodes_are_hash_consed),
        T(adv_types_place_the_broadcast_index_shape),
        T(subtensor_grad_adds_g_into_zeros),
        T(inc_subtensor_grads_pass_g_through_and_take_v_s_region),
        T(adv_subtensor_grad_accumulates_repeated_positions),
        T(adv_inc_subtensor_grads_sum_v_over_its_broadcast),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
