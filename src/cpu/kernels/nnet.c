/*
 * nnet.c — the CPU kernels of the neural-network family
 * (engine/ops/nnet.c, which states what each op computes): softmax and
 * log_softmax along one axis (a row at a time; contiguous float32 rows
 * use the vectorised exponentials of vexp.c), one_hot, and
 * softmax_crossentropy with its fused gradient.  Exponentials in the
 * row's precision, sums in double.
 */
#include "cpu/kernels/kernels.h"
#include "cpu/kernels/odometer.h"
#include "cpu/kernels/vexp.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- softmax, log_softmax -------------------------------------------- */

/* An odometer (odometer.h) over every axis of x but skip (-1: none), with
 * x's and out's offsets. */
static void rows_init(tgl_odometer *it, const tgl_array *x, const tgl_array *out, int skip)
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
    tgl_odometer it;
    rows_init(&it, x, out, axis);
    int64_t rows = out->size / len, xs = x->strides[axis], os = out->strides[axis];
    tgl_status st = TGL_OK;
    for (int64_t r = 0; r < rows; r++, tgl_odometer_next(&it)) {
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
    tgl_odometer it;
    rows_init(&it, y, out, -1);
    int64_t cs = out->strides[y->ndim];
    for (int64_t i = 0; i < y->size; i++, tgl_odometer_next(&it)) {
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

/* One row's loss: max + log(sum(exp(x - max))) - x[label]; exponentials
 * in the row's precision, sums in double. */
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

const tgl_op_kernel tgl_cpu_kernel_softmax = {.run = softmax_kernel};
const tgl_op_kernel tgl_cpu_kernel_log_softmax = {.run = softmax_kernel};
const tgl_op_kernel tgl_cpu_kernel_one_hot = {.run = one_hot_kernel};
const tgl_op_kernel tgl_cpu_kernel_softmax_xent = {.run = xent_kernel};
const tgl_op_kernel tgl_cpu_kernel_softmax_xent_dx = {.run = xent_dx_kernel};
