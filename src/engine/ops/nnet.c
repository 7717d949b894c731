/*
 * nnet.c — the neural-network family: softmax and log_softmax along one
 * axis, and one_hot (integer labels to indicator vectors).
 *
 * softmax(x) and log_softmax(x): p.i[0] is the axis (0-based); float
 * inputs only (the Lua layer casts integers to floatX), output of x's type.
 * Both subtract the maximum along the axis first, so logits of +-1000 give
 * finite, exact results, and log_softmax is computed as
 * (x - max) - log(sum(exp(x - max))) rather than as the log of a softmax
 * that may underflow to 0.  The reference kernel works in double.  Entries
 * equal to the maximum count as shift 0 even when the maximum is infinite,
 * which is the limit the expression tends to: a row with +inf entries
 * splits the mass among them, -inf entries get 0 (log: -inf), and a row of
 * nothing but -inf gives the uniform distribution instead of 0/0.  A NaN
 * in a row makes the whole row NaN.
 *
 * one_hot(labels): p.i[0] = n classes (> 0), p.i[1] = the output dtype.
 * Labels are 1-based integers (int32, int64, uint8) of any ndim up to 7;
 * the output has shape labels.shape + (n) with out[..., k-1] = 1 where the
 * label is k.  A label outside 1..n fails, naming it and its position
 * (1-based, as the user indexes).
 */
#include "engine/ops/ops.h"

#include <inttypes.h>
#include <math.h>
#include "engine/ops/vexp.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- softmax, log_softmax -------------------------------------------- */

static tgl_status softmax_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type x = n->in[0]->type;
    TGL_CHECK(n->p.n == 1 && n->p.flags == 0, TGL_EINVAL,
              "takes exactly one axis (p.n == 1), got %d parameters", (int)n->p.n);
    TGL_CHECK(n->p.i[0] >= 0 && n->p.i[0] < x.ndim, TGL_EINVAL,
              "axis %" PRId64 " is out of range for a %d-d input", n->p.i[0] + 1, x.ndim);
    TGL_CHECK(tgl_dtype_is_float(x.dtype), TGL_EDTYPE,
              "needs a float32 or float64 input, got %s (cast it first)",
              tgl_dtype_name(x.dtype));
    n->type = x;
    return TGL_OK;
}

/* An odometer over every axis but one, tracking offsets in x and out. */
typedef struct rows_iter {
    int n;
    int64_t shape[TGL_MAX_DIMS], s0[TGL_MAX_DIMS], s1[TGL_MAX_DIMS], idx[TGL_MAX_DIMS];
    int64_t off0, off1;
} rows_iter;

static void rows_init(rows_iter *it, const tgl_array *x, const tgl_array *out, int skip)
{
    memset(it, 0, sizeof *it);
    for (int d = 0; d < x->ndim; d++) {
        if (d == skip)
            continue;
        it->shape[it->n] = x->shape[d];
        it->s0[it->n] = x->strides[d];
        it->s1[it->n] = out->strides[d];
        it->n++;
    }
}

static void rows_next(rows_iter *it)
{
    for (int d = it->n - 1; d >= 0; d--) {
        it->off0 += it->s0[d];
        it->off1 += it->s1[d];
        if (++it->idx[d] < it->shape[d])
            return;
        it->off0 -= it->s0[d] * it->shape[d];
        it->off1 -= it->s1[d] * it->shape[d];
        it->idx[d] = 0;
    }
}


/* One row of len elements (x at stride xs, out at stride os; out may be
 * x).  Exponentials in the row's own precision (expf for float32: within
 * an ulp, and several times faster than exp in double), their sum in
 * double; out holds exp(x - m) (softmax) or x - m (log_softmax) until the
 * last pass normalises it, so each exponential is computed once. */
#define SOFTMAX_ROW(T, EXP, LOG)                                                       \
    static void softmax_row_##T(bool logsm, int64_t len, const T *x, int64_t xs, T *out, \
                                int64_t os)                                            \
    {                                                                                  \
        T m = -INFINITY;                                                               \
        for (int64_t k = 0; k < len; k++) {                                            \
            T v = x[k * xs];                                                           \
            if (v > m || v != v)                                                       \
                m = v;                                                                 \
            if (m != m)                                                                \
                break;                                                                 \
        }                                                                              \
        double sum = 0;                                                                \
        for (int64_t k = 0; k < len; k++) {                                            \
            T v = x[k * xs], d = v == m ? (T)0 : v - m, ed = EXP(d);                   \
            out[k * os] = logsm ? d : ed;                                              \
            sum += ed;                                                                 \
        }                                                                              \
        if (logsm) {                                                                   \
            T ls = (T)LOG(sum);                                                        \
            for (int64_t k = 0; k < len; k++)                                          \
                out[k * os] -= ls;                                                     \
        } else {                                                                       \
            T inv = (T)(1.0 / sum);                                                    \
            for (int64_t k = 0; k < len; k++)                                          \
                out[k * os] *= inv;                                                    \
        }                                                                              \
    }

SOFTMAX_ROW(float, expf, log)
SOFTMAX_ROW(double, exp, log)

/* A contiguous float32 row: vectorised exponentials (vexp.c). */
static void softmax_row_float_contig(bool logsm, int64_t len, const float *x, float *out)
{
    float m = tgl_vmax_f32(x, len);
    if (m != m) {
        for (int64_t k = 0; k < len; k++)
            out[k] = m;
        return;
    }
    if (logsm) {
        float ls = (float)log(tgl_vexp_sum_f32(x, m, len));
        for (int64_t k = 0; k < len; k++)
            out[k] = (x[k] == m ? 0.0f : x[k] - m) - ls;
    } else {
        float inv = (float)(1.0 / tgl_vexp_shifted_f32(x, m, out, len));
        for (int64_t k = 0; k < len; k++)
            out[k] *= inv;
    }
}

static tgl_status softmax_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                 tgl_array *out)
{
    const tgl_array *x = in[0];
    int axis = (int)n->p.i[0];
    int64_t len = x->shape[axis];
    if (out->size == 0)
        return TGL_OK;
    bool logsm = n->op == TGL_OP_LOG_SOFTMAX;
    rows_iter it;
    rows_init(&it, x, out, axis);
    int64_t rows = out->size / len, xs = x->strides[axis], os = out->strides[axis];
    tgl_status st = TGL_OK;
    for (int64_t r = 0; r < rows; r++, rows_next(&it)) {
        if ((r & 1023) == 0 && tgl_ctx_interrupted(ctx)) {
            st = tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
            break;
        }
        if (x->dtype_id == TGL_FLOAT32 && xs == 1 && os == 1)
            softmax_row_float_contig(logsm, len, (const float *)x->data + it.off0,
                                     (float *)out->data + it.off1);
        else if (x->dtype_id == TGL_FLOAT32)
            softmax_row_float(logsm, len, (const float *)x->data + it.off0, xs,
                              (float *)out->data + it.off1, os);
        else
            softmax_row_double(logsm, len, (const double *)x->data + it.off0, xs,
                               (double *)out->data + it.off1, os);
    }
    return st;
}

/*   softmax:     gx = y * (g - sum(g * y, axis, keepdims))
 *   log_softmax: gx = g - exp(y) * sum(g, axis, keepdims) */
static tgl_status softmax_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    const int64_t *axis = &n->p.i[0];
    if (n->op == TGL_OP_SOFTMAX) {
        tgl_node *s = tgl_mk_sum(ctx, tgl_mk2(ctx, TGL_OP_MUL, g, n), 1, axis, true);
        gin[0] = tgl_mk2(ctx, TGL_OP_MUL, n, tgl_mk2(ctx, TGL_OP_SUB, g, s));
    } else {
        tgl_node *s = tgl_mk_sum(ctx, g, 1, axis, true);
        gin[0] = tgl_mk2(ctx, TGL_OP_SUB, g,
                         tgl_mk2(ctx, TGL_OP_MUL, tgl_mk1(ctx, TGL_OP_EXP, n), s));
    }
    /* A node that failed to build leaves NULL and its message in the
     * context, which the driver reports. */
    return TGL_OK;
}

/* ---- one_hot --------------------------------------------------------- */

static tgl_status one_hot_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type y = n->in[0]->type;
    TGL_CHECK(n->p.n == 2 && n->p.flags == 0, TGL_EINVAL,
              "takes two parameters (classes, dtype), got %d", (int)n->p.n);
    TGL_CHECK(n->p.i[0] > 0, TGL_EINVAL, "needs at least one class, got %" PRId64, n->p.i[0]);
    TGL_CHECK(n->p.i[1] >= 0 && n->p.i[1] < TGL_NDTYPES, TGL_EDTYPE, "unknown dtype %" PRId64,
              n->p.i[1]);
    TGL_CHECK(y.dtype == TGL_INT32 || y.dtype == TGL_INT64 || y.dtype == TGL_UINT8, TGL_EDTYPE,
              "labels must be integers (int32, int64 or uint8), got %s", tgl_dtype_name(y.dtype));
    TGL_CHECK(y.ndim < TGL_MAX_DIMS, TGL_ESHAPE,
              "labels have %d dimensions; at most %d leave room for the class axis", y.ndim,
              TGL_MAX_DIMS - 1);
    uint32_t bc = y.bcast | (n->p.i[0] == 1 ? 1u << y.ndim : 0u);
    n->type = tgl_type_make((int)n->p.i[1], y.ndim + 1, bc);
    return TGL_OK;
}

static tgl_status one_hot_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                int64_t *shape)
{
    (void)ctx;
    for (int d = 0; d < in[0]->ndim; d++)
        shape[d] = in[0]->shape[d];
    shape[in[0]->ndim] = n->p.i[0];
    return TGL_OK;
}

static int64_t load_label(int dt, const void *p, int64_t off)
{
    switch (dt) {
    case TGL_INT32: return ((const int32_t *)p)[off];
    case TGL_INT64: return ((const int64_t *)p)[off];
    default: return ((const uint8_t *)p)[off];
    }
}

static tgl_status one_hot_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                 tgl_array *out)
{
    const tgl_array *y = in[0];
    int64_t ncls = n->p.i[0];
    if (out->size == 0)
        return TGL_OK;
    tgl_status st;
    if (tgl_array_is_contiguous(out)) {
        memset(out->data, 0, (size_t)out->size * tgl_dtype_size(out->dtype_id));
    } else {
        tgl_array *z;
        if ((st = tgl_array_zeros(ctx, out->dtype_id, out->ndim, out->shape, &z)))
            return st;
        st = tgl_array_assign(ctx, out, z);
        tgl_array_release(z);
        if (st)
            return st;
    }
    /* The odometer walks the label axes of y and of out (out's last axis,
     * the classes, is skipped). */
    rows_iter it;
    rows_init(&it, y, out, -1);
    int64_t cs = out->strides[y->ndim];
    for (int64_t i = 0; i < y->size; i++, rows_next(&it)) {
        if ((i & 65535) == 0 && tgl_ctx_interrupted(ctx))
            return tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
        int64_t v = load_label(y->dtype_id, y->data, it.off0);
        if (v < 1 || v > ncls) {
            char pos[TGL_MAX_DIMS * 21 + 3] = "(";
            size_t k = 1;
            for (int d = 0; d < it.n; d++)
                k += (size_t)snprintf(pos + k, sizeof pos - k, "%s%" PRId64, d ? "," : "",
                                      it.idx[d] + 1);
            snprintf(pos + k, sizeof pos - k, ")");
            return tgl_op_error(ctx, n, in, TGL_EINVAL,
                                "label %" PRId64 " at position %s is outside 1..%" PRId64
                                " (labels count from 1)", v, pos, ncls);
        }
        tgl_store_from_double(out->dtype_id, out->data, it.off1 + (v - 1) * cs, 1.0);
    }
    return TGL_OK;
}

/* Labels are integers: no gradient. */
static tgl_status one_hot_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    (void)ctx, (void)n, (void)g;
    gin[0] = NULL;
    return TGL_OK;
}

/* ---- softmax_crossentropy ------------------------------------------ */

/* x: (rows, classes) logits; labels: int vector of 1-based classes.
 * loss[i] = logsumexp(x[i]) - x[i, label_i], computed with the row max
 * subtracted, so logits of +-1000 give finite, exact losses.  The
 * specialize stage rewrites -log_softmax(x)[rows, labels] into this. */
static tgl_status xent_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type x = n->in[0]->type, y = n->in[1]->type;
    TGL_CHECK(x.ndim == 2 && tgl_dtype_is_float(x.dtype), TGL_EDTYPE,
              "needs a float matrix of logits");
    TGL_CHECK(y.ndim == 1 && (y.dtype == TGL_INT32 || y.dtype == TGL_INT64), TGL_EDTYPE,
              "needs an int32 or int64 vector of labels");
    TGL_CHECK(n->p.n == 0, TGL_EINVAL, "takes no parameters");
    n->type = tgl_type_make(x.dtype, 1, x.bcast & y.bcast & 1u);
    return TGL_OK;
}

static tgl_status xent_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                             int64_t *shape)
{
    if (in[1]->shape[0] != in[0]->shape[0])
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "%" PRId64 " labels for %" PRId64 " rows",
                            in[1]->shape[0], in[0]->shape[0]);
    shape[0] = in[0]->shape[0];
    return TGL_OK;
}

/* One row's loss: max + log(sum(exp(x - max))) - x[label]; exponentials
 * in the row's precision, sums in double. */
/* The largest of n elements at stride s (NaN wins). */
#define ROW_MAX(T)                                                                           \
    static T row_max_##T(const T *x, int64_t s, int64_t n)                                   \
    {                                                                                        \
        T m = -INFINITY;                                                                     \
        for (int64_t j = 0; j < n; j++) {                                                    \
            T v = x[j * s];                                                                  \
            if (v > m || v != v)                                                             \
                m = v;                                                                       \
        }                                                                                    \
        return m;                                                                            \
    }
ROW_MAX(float)
ROW_MAX(double)

#define XENT_ROW(T, EXP)                                                                     \
    static double xent_row_##T(const T *x, int64_t cs, int64_t cols, int64_t label)          \
    {                                                                                        \
        T m = row_max_##T(x, cs, cols);                                                      \
        double sum = 0;                                                                      \
        for (int64_t j = 0; j < cols; j++) {                                                 \
            T v = x[j * cs];                                                                 \
            sum += v == m ? 1.0 : (double)EXP(v - m);                                        \
        }                                                                                    \
        return (double)m + log(sum) - (double)x[(label - 1) * cs];                           \
    }
XENT_ROW(float, expf)
XENT_ROW(double, exp)

static tgl_status xent_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              tgl_array *out)
{
    const tgl_array *x = in[0], *y = in[1];
    int64_t rows = x->shape[0], cols = x->shape[1];
    for (int64_t i = 0; i < rows; i++) {
        int64_t label = (int64_t)tgl_load_as_double(y->dtype_id, y->data, i * y->strides[0]);
        if (label < 1 || label > cols)
            return tgl_op_error(ctx, n, in, TGL_EINVAL,
                                "label %" PRId64 " at position %" PRId64 " is not in 1..%" PRId64,
                                label, i + 1, cols);
        int64_t base = i * x->strides[0], cs = x->strides[1];
        double loss;
        if (x->dtype_id == TGL_FLOAT32 && cs == 1) {
            const float *r = (const float *)x->data + base;
            float m = tgl_vmax_f32(r, cols);
            loss = m != m ? m : (double)m + log(tgl_vexp_sum_f32(r, m, cols)) - r[label - 1];
        } else if (x->dtype_id == TGL_FLOAT32) {
            loss = xent_row_float((const float *)x->data + base, cs, cols, label);
        } else {
            loss = xent_row_double((const double *)x->data + base, cs, cols, label);
        }
        tgl_store_from_double(out->dtype_id, out->data, i, loss);
    }
    return TGL_OK;
}

/* d loss[i] / d x[i] = softmax(x[i]) - onehot(label_i): finite for any
 * logits; scaled by the loss's gradient, one op (softmax_crossentropy_dx). */
static tgl_status xent_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    tgl_node *din[3] = {g, n->in[0], n->in[1]};
    gin[0] = tgl_mk(ctx, TGL_OP_SOFTMAX_XENT_DX, 3, din, NULL);
    gin[1] = NULL;
    return TGL_OK;
}

/* ---- softmax_crossentropy_dx --------------------------------------- */

/* dx[i] = dy[i] (softmax(x[i]) - onehot(labels[i])): softmax_crossentropy's
 * gradient times the loss's, in one pass per row (max, exp, scale, minus
 * dy at the label), where it used to be softmax, arange, adv_inc_subtensor,
 * a dimshuffle and a product.  Inputs: dy (rows), x (rows, classes),
 * labels (rows, 1-based). */
static tgl_status xent_dx_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type dy = n->in[0]->type, x = n->in[1]->type, y = n->in[2]->type;
    TGL_CHECK(x.ndim == 2 && tgl_dtype_is_float(x.dtype), TGL_EDTYPE,
              "needs a float matrix of logits");
    TGL_CHECK(dy.ndim == 1 && dy.dtype == x.dtype, TGL_EDTYPE,
              "needs a vector dy of the logits' dtype (%s), got %s %d-d",
              tgl_dtype_name(x.dtype), tgl_dtype_name(dy.dtype), dy.ndim);
    TGL_CHECK(y.ndim == 1 && (y.dtype == TGL_INT32 || y.dtype == TGL_INT64), TGL_EDTYPE,
              "needs an int32 or int64 vector of labels");
    TGL_CHECK(n->p.n == 0, TGL_EINVAL, "takes no parameters");
    /* a row axis broadcasts only when every input's does */
    uint32_t rows = x.bcast & dy.bcast & y.bcast & 1u;
    n->type = tgl_type_make(x.dtype, 2, rows | (x.bcast & 2u));
    return TGL_OK;
}

static tgl_status xent_dx_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                int64_t *shape)
{
    int64_t r = in[1]->shape[0];
    if (in[0]->shape[0] != r || in[2]->shape[0] != r)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "%" PRId64 " values of dy and %" PRId64 " labels for %" PRId64
                            " rows", in[0]->shape[0], in[2]->shape[0], r);
    shape[0] = r;
    shape[1] = in[1]->shape[1];
    return TGL_OK;
}

/* One row: o[j] = dy (e^(x[j] - max) / sum) - dy [j == label]; o may be x
 * (in place: each element is read before it is written). */
#define XENT_DX_ROW(T, EXP)                                                                  \
    static void xent_dx_row_##T(const T *x, int64_t xs, T *o, int64_t os, int64_t cols,     \
                                double dy, int64_t label)                                   \
    {                                                                                        \
        T m = row_max_##T(x, xs, cols);                                                      \
        double sum = 0;                                                                      \
        for (int64_t j = 0; j < cols; j++) {                                                 \
            T v = x[j * xs], e = v == m ? (T)1 : EXP(v - m);                                 \
            o[j * os] = e;                                                                   \
            sum += e;                                                                        \
        }                                                                                    \
        T scale = (T)(dy / sum);                                                             \
        for (int64_t j = 0; j < cols; j++)                                                   \
            o[j * os] *= scale;                                                              \
        o[(label - 1) * os] -= (T)dy;                                                        \
    }
XENT_DX_ROW(float, expf)
XENT_DX_ROW(double, exp)

static tgl_status xent_dx_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                 tgl_array *out)
{
    const tgl_array *dy = in[0], *x = in[1], *y = in[2];
    int64_t rows = x->shape[0], cols = x->shape[1];
    for (int64_t i = 0; i < rows; i++) {
        int64_t label = (int64_t)tgl_load_as_double(y->dtype_id, y->data, i * y->strides[0]);
        if (label < 1 || label > cols)
            return tgl_op_error(ctx, n, in, TGL_EINVAL,
                                "label %" PRId64 " at position %" PRId64 " is not in 1..%" PRId64,
                                label, i + 1, cols);
        double d = tgl_load_as_double(dy->dtype_id, dy->data, i * dy->strides[0]);
        if (x->dtype_id == TGL_FLOAT32 && x->strides[1] == 1 && out->strides[1] == 1) {
            const float *r = (const float *)x->data + i * x->strides[0];
            float *o = (float *)out->data + i * out->strides[0];
            float m = tgl_vmax_f32(r, cols);
            if (m != m) {
                for (int64_t j = 0; j < cols; j++)
                    o[j] = m;
                continue;
            }
            float scale = (float)(d / tgl_vexp_shifted_f32(r, m, o, cols));
            for (int64_t j = 0; j < cols; j++)
                o[j] *= scale;
            o[label - 1] -= (float)d;
        } else if (x->dtype_id == TGL_FLOAT32)
            xent_dx_row_float((const float *)x->data + i * x->strides[0], x->strides[1],
                              (float *)out->data + i * out->strides[0], out->strides[1], cols, d,
                              label);
        else
            xent_dx_row_double((const double *)x->data + i * x->strides[0], x->strides[1],
                               (double *)out->data + i * out->strides[0], out->strides[1], cols,
                               d, label);
    }
    return TGL_OK;
}

/* Second derivatives.  With s = softmax(x[i]) and D = s - onehot(label):
 * d<g, dx>/d dy[i] = <g[i], D[i]>, and d<g, dx>/dx[i] is softmax's
 * pullback of dy[i] g[i]: s (dy g - <s, dy g>). */
static tgl_status xent_dx_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    tgl_node *dy = n->in[0], *x = n->in[1], *y = n->in[2];
    int64_t axis = 1, col[2] = {0, -1};
    tgl_node *ones = tgl_mk_fill_like(ctx, dy, dy->type.dtype, 1.0);
    tgl_node *din[3] = {ones, x, y};
    tgl_node *D = tgl_mk(ctx, TGL_OP_SOFTMAX_XENT_DX, 3, din, NULL);
    gin[0] = tgl_mk_sum(ctx, tgl_mk2(ctx, TGL_OP_MUL, g, D), 1, &axis, false);
    tgl_params ap = {0};
    ap.n = 1;
    ap.i[0] = 1;
    tgl_node *s = tgl_mk(ctx, TGL_OP_SOFTMAX, 1, &x, &ap);
    tgl_node *h = tgl_mk2(ctx, TGL_OP_MUL, g, tgl_mk_dimshuffle(ctx, dy, 2, col));
    tgl_node *sh = tgl_mk_sum(ctx, tgl_mk2(ctx, TGL_OP_MUL, s, h), 1, &axis, true);
    gin[1] = tgl_mk2(ctx, TGL_OP_MUL, s, tgl_mk2(ctx, TGL_OP_SUB, h, sh));
    gin[2] = NULL;
    return TGL_OK;
}

const tgl_opimpl tgl_impl_softmax_xent_dx = {
    .family = TGL_FAM_NNET,
    .nin_min = 3,
    .nin_max = 3,
    .infer = xent_dx_infer,
    .shape = xent_dx_shape,
    .kernel = xent_dx_kernel,
    .grad = xent_dx_grad,
    .inplace = tgl_inplace_same_type,
};

const tgl_opimpl tgl_impl_softmax_xent = {
    .family = TGL_FAM_NNET,
    .nin_min = 2,
    .nin_max = 2,
    .infer = xent_infer,
    .shape = xent_shape,
    .kernel = xent_kernel,
    .grad = xent_grad,
};

/* ---- the implementations ------------------------------------------- */

const tgl_opimpl tgl_impl_softmax = {
    .family = TGL_FAM_NNET,
    .nin_min = 1,
    .nin_max = 1,
    .infer = softmax_infer,
    .shape = tgl_shape_of_first,
    .kernel = softmax_kernel,
    .grad = softmax_grad,
};

const tgl_opimpl tgl_impl_log_softmax = {
    .family = TGL_FAM_NNET,
    .nin_min = 1,
    .nin_max = 1,
    .infer = softmax_infer,
    .shape = tgl_shape_of_first,
    .kernel = softmax_kernel,
    .grad = softmax_grad,
};

const tgl_opimpl tgl_impl_one_hot = {
    .family = TGL_FAM_NNET,
    .nin_min = 1,
    .nin_max = 1,
    .infer = one_hot_infer,
    .shape = one_hot_shape,
    .kernel = one_hot_kernel,
    .grad = one_hot_grad,
};
