/*
 * reduce.c — the CPU kernels of the reduction family (engine/ops/reduce.c:
 * sum, prod, max, min over axes; argmax, argmin; axes_size).
 *
 * One pass over the input in (roughly) memory order, accumulating into a
 * buffer laid out like the output: double for float inputs (so float32
 * sums are accurate), int64 for integer ones.  Sorting the axes by stride
 * and merging the ones that are contiguous together makes the inner loop
 * either a flat reduction into one accumulator (reduced axes innermost) or
 * a flat row added into a row of accumulators (kept axes innermost, e.g.
 * the column sums of a bias gradient); both read memory sequentially.
 */
#include "cpu/kernels/kernels.h"
#include "cpu/kernels/odometer.h"
#include "engine/ops/reduce.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Elements reduced between two looks at the interrupt flag. */
#define CHUNK ((int64_t)1 << 16)

/* ---- iteration helpers ---------------------------------------------- */

static int64_t abs64(int64_t v)
{
    return v < 0 ? -v : v;
}

/* Element offset of flat C-order position i of a (any strides). */
static int64_t offset_of(const tgl_array *a, int64_t i)
{
    int64_t off = 0;
    for (int d = a->ndim - 1; d >= 0; d--) {
        off += (i % a->shape[d]) * a->strides[d];
        i /= a->shape[d];
    }
    return off;
}

/* ---- row loops -------------------------------------------------------- */

/* max (want_max) or min of a and len elements at stride xs, in four
 * independent lanes so the compares pipeline; NaN wins in every lane and
 * when the lanes are merged. */
#define PICK(a, v, want_max) (((want_max) ? (v) > (a) : (v) < (a)) || (v) != (v) ? (v) : (a))
#define FOLD_LANES(T)                                                                  \
    static double fold_lanes_##T(double a, int64_t len, const T *x, int64_t xs,        \
                                 bool want_max)                                        \
    {                                                                                  \
        double l0 = a, l1 = a, l2 = a, l3 = a;                                         \
        int64_t k = 0;                                                                 \
        for (; k + 4 <= len; k += 4) {                                                 \
            double v0 = x[k * xs], v1 = x[(k + 1) * xs];                               \
            double v2 = x[(k + 2) * xs], v3 = x[(k + 3) * xs];                         \
            l0 = PICK(l0, v0, want_max);                                               \
            l1 = PICK(l1, v1, want_max);                                               \
            l2 = PICK(l2, v2, want_max);                                               \
            l3 = PICK(l3, v3, want_max);                                               \
        }                                                                              \
        for (; k < len; k++) {                                                         \
            double v = x[k * xs];                                                      \
            l0 = PICK(l0, v, want_max);                                                \
        }                                                                              \
        l0 = PICK(l0, l1, want_max);                                                   \
        l2 = PICK(l2, l3, want_max);                                                   \
        return PICK(l0, l2, want_max);                                                 \
    }

FOLD_LANES(float)
FOLD_LANES(double)
/* A row of len elements of x (stride xs) folded into the accumulators: into
 * one (as == 0, the reduced axes are innermost) or into a row of them
 * (stride as).  max/min keep a NaN once seen and take any NaN they meet. */
#define FLOAT_ROW(T)                                                                   \
    static void frow_##T(int op, int64_t len, const T *x, int64_t xs, double *acc,     \
                         int64_t as)                                                   \
    {                                                                                  \
        if (as == 0) {                                                                 \
            double a = *acc;                                                           \
            switch (op) {                                                              \
            case TGL_OP_SUM: {                                                         \
                /* four partial sums: independent adds pipeline */                     \
                double s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                 \
                int64_t k = 0;                                                         \
                for (; k + 4 <= len; k += 4) {                                         \
                    s0 += x[k * xs];                                                   \
                    s1 += x[(k + 1) * xs];                                             \
                    s2 += x[(k + 2) * xs];                                             \
                    s3 += x[(k + 3) * xs];                                             \
                }                                                                      \
                for (; k < len; k++)                                                   \
                    s0 += x[k * xs];                                                   \
                a += (s0 + s1) + (s2 + s3);                                            \
                break;                                                                 \
            }                                                                          \
            case TGL_OP_PROD:                                                          \
                for (int64_t k = 0; k < len; k++)                                      \
                    a *= x[k * xs];                                                    \
                break;                                                                 \
            case TGL_OP_MAX:                                                           \
                a = fold_lanes_##T(a, len, x, xs, true);                               \
                break;                                                                 \
            default:                                                                   \
                a = fold_lanes_##T(a, len, x, xs, false);                              \
                break;                                                                 \
            }                                                                          \
            *acc = a;                                                                  \
            return;                                                                    \
        }                                                                              \
        switch (op) {                                                                  \
        case TGL_OP_SUM:                                                               \
            for (int64_t k = 0; k < len; k++)                                          \
                acc[k * as] += x[k * xs];                                              \
            break;                                                                     \
        case TGL_OP_PROD:                                                              \
            for (int64_t k = 0; k < len; k++)                                          \
                acc[k * as] *= x[k * xs];                                              \
            break;                                                                     \
        default:                                                                       \
            for (int64_t k = 0; k < len; k++) {                                        \
                double v = x[k * xs];                                                  \
                acc[k * as] = PICK(acc[k * as], v, op == TGL_OP_MAX);                  \
            }                                                                          \
            break;                                                                     \
        }                                                                              \
    }

FLOAT_ROW(float)
FLOAT_ROW(double)

/* Integer rows accumulate in int64; sums and products wrap (computed in
 * uint64, so overflow is defined).  LOAD normalizes bool bytes to 0/1. */
#define INT_ROW(T, NAME, LOAD)                                                         \
    static void irow_##NAME(int op, int64_t len, const T *x, int64_t xs, int64_t *acc, \
                            int64_t as)                                                \
    {                                                                                  \
        for (int64_t k = 0; k < len; k++) {                                            \
            int64_t v = LOAD(x[k * xs]), *a = &acc[k * as];                            \
            switch (op) {                                                              \
            case TGL_OP_SUM: *a = (int64_t)((uint64_t)*a + (uint64_t)v); break;        \
            case TGL_OP_PROD: *a = (int64_t)((uint64_t)*a * (uint64_t)v); break;       \
            case TGL_OP_MAX: if (v > *a) *a = v; break;                                \
            default: if (v < *a) *a = v; break;                                        \
            }                                                                          \
        }                                                                              \
    }

#define AS_INT(v) ((int64_t)(v))
#define AS_BOOL(v) ((int64_t)((v) != 0))
INT_ROW(int32_t, i32, AS_INT)
INT_ROW(int64_t, i64, AS_INT)
INT_ROW(uint8_t, u8, AS_INT)
INT_ROW(uint8_t, b8, AS_BOOL)

/* One row of x's dtype; x and acc point at the row's first elements. */
static void fold_row(int dt, int op, int64_t len, const char *x, int64_t xs, void *acc, int64_t as)
{
    switch (dt) {
    case TGL_FLOAT32: frow_float(op, len, (const float *)x, xs, acc, as); break;
    case TGL_FLOAT64: frow_double(op, len, (const double *)x, xs, acc, as); break;
    case TGL_INT32: irow_i32(op, len, (const int32_t *)x, xs, acc, as); break;
    case TGL_INT64: irow_i64(op, len, (const int64_t *)x, xs, acc, as); break;
    case TGL_UINT8: irow_u8(op, len, (const uint8_t *)x, xs, acc, as); break;
    default: irow_b8(op, len, (const uint8_t *)x, xs, acc, as); break;
    }
}

/* ---- the reduction kernel ------------------------------------------- */

/* Writes accumulator i (the output's C order) into out at its strides. */
static void store_acc(tgl_array *out, bool isf, const void *acc)
{
    bool contig = tgl_array_is_contiguous(out);
    for (int64_t i = 0; i < out->size; i++) {
        int64_t off = contig ? i : offset_of(out, i);
        if (isf) {
            tgl_store_from_double(out->dtype_id, out->data, off, ((const double *)acc)[i]);
            continue;
        }
        int64_t v = ((const int64_t *)acc)[i];
        switch (out->dtype_id) {
        case TGL_INT64: ((int64_t *)out->data)[off] = v; break;
        case TGL_INT32: ((int32_t *)out->data)[off] = (int32_t)v; break;
        default: ((uint8_t *)out->data)[off] = (uint8_t)v; break; /* uint8, bool */
        }
    }
}

/* Folds every element of x into acc (laid out in C order over out's
 * shape, out->size entries). */
static tgl_status fold_all(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                          const tgl_array *out, void *acc)
{
    const tgl_array *x = in[0];
    uint32_t mask = tgl_reduce_axes_mask(n);
    /* The loop nest: x's axes of size > 1, each with its input stride and
     * its accumulator stride (0 on reduced axes). */
    int64_t ostr[TGL_MAX_DIMS];
    tgl_contiguous_strides(out->ndim, out->shape, ostr);
    int na = 0, od = 0;
    int64_t sh[TGL_MAX_DIMS], xs[TGL_MAX_DIMS], as[TGL_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        bool red = (mask >> d) & 1u;
        int64_t astride = red ? 0 : ostr[od];
        if (!red || tgl_reduce_keepdims(n))
            od++;
        if (x->shape[d] == 1)
            continue;
        sh[na] = x->shape[d];
        xs[na] = x->strides[d];
        as[na] = astride;
        na++;
    }
    /* Largest input stride outermost (stable insertion sort), so the inner
     * loop walks memory with the smallest step. */
    for (int i = 1; i < na; i++)
        for (int j = i; j > 0 && abs64(xs[j - 1]) < abs64(xs[j]); j--) {
            int64_t t;
            t = sh[j], sh[j] = sh[j - 1], sh[j - 1] = t;
            t = xs[j], xs[j] = xs[j - 1], xs[j - 1] = t;
            t = as[j], as[j] = as[j - 1], as[j - 1] = t;
        }
    /* Merge an axis into the one inside it when both arrays step over the
     * pair as over one longer axis. */
    for (int i = na - 2; i >= 0; i--) {
        if (xs[i] == xs[i + 1] * sh[i + 1] && as[i] == as[i + 1] * sh[i + 1]) {
            sh[i + 1] *= sh[i];
            for (int j = i; j < na - 1; j++)
                sh[j] = sh[j + 1], xs[j] = xs[j + 1], as[j] = as[j + 1];
            na--;
        }
    }
    int64_t len = na ? sh[na - 1] : 1;
    int64_t ixs = na ? xs[na - 1] : 0, ias = na ? as[na - 1] : 0;
    tgl_odometer o = {.n = na ? na - 1 : 0};
    int64_t rows = 1;
    for (int i = 0; i < o.n; i++) {
        o.shape[i] = sh[i];
        o.s0[i] = xs[i];
        o.s1[i] = as[i];
        rows *= sh[i];
    }
    int64_t es = (int64_t)tgl_dtype_size(x->dtype_id), work = 0;
    for (int64_t r = 0; r < rows; r++, tgl_odometer_next(&o)) {
        /* Long rows go in chunks so an interrupt is seen within ~CHUNK
         * elements. */
        for (int64_t k0 = 0; k0 < len; k0 += CHUNK) {
            int64_t m = len - k0 < CHUNK ? len - k0 : CHUNK;
            fold_row(x->dtype_id, n->op, m, (const char *)x->data + (o.off0 + k0 * ixs) * es,
                     ixs, (char *)acc + (o.off1 + k0 * ias) * 8, ias);
            work += m + 16;
            if (work >= CHUNK) {
                work = 0;
                if (tgl_ctx_interrupted(ctx))
                    return tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
            }
        }
    }
    return TGL_OK;
}

static tgl_status reduce_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                tgl_array *out)
{
    const tgl_array *x = in[0];
    int op = n->op;
    if (n->p.n == 0)
        return tgl_array_assign(ctx, out, x);
    if (out->size == 0)
        return TGL_OK;
    tgl_status st = tgl_reduce_check_empty(ctx, n, in);
    if (st)
        return st;
    bool isf = tgl_dtype_is_float(x->dtype_id);
    void *acc = malloc((size_t)out->size * 8);
    if (!acc)
        return tgl_op_error(ctx, n, in, TGL_ENOMEM, "out of memory");
    for (int64_t i = 0; i < out->size; i++) {
        if (isf)
            ((double *)acc)[i] = op == TGL_OP_SUM ? 0.0 : op == TGL_OP_PROD ? 1.0
                                 : op == TGL_OP_MAX ? -INFINITY : INFINITY;
        else
            ((int64_t *)acc)[i] = op == TGL_OP_SUM ? 0 : op == TGL_OP_PROD ? 1
                                  : op == TGL_OP_MAX ? INT64_MIN : INT64_MAX;
    }
    /* An empty x leaves the identities: sum 0, prod 1. */
    st = x->size ? fold_all(ctx, n, in, out, acc) : TGL_OK;
    if (!st)
        store_acc(out, isf, acc);
    free(acc);
    return st;
}

/* ---- argmax / argmin ------------------------------------------------ */

/* The 0-based position of the max (min) of len elements at stride s: the
 * first one wins ties; the first NaN wins outright (as NumPy). */
#define ARG_SCAN(T, NAME)                                                              \
    static int64_t scan_##NAME(bool want_max, int64_t len, const T *x, int64_t s)      \
    {                                                                                  \
        T best = x[0];                                                                 \
        int64_t pos = 0;                                                               \
        if (best != best)                                                              \
            return 0;                                                                  \
        for (int64_t k = 1; k < len; k++) {                                            \
            T v = x[k * s];                                                            \
            if (v != v)                                                                \
                return k;                                                              \
            if (want_max ? v > best : v < best)                                        \
                best = v, pos = k;                                                     \
        }                                                                              \
        return pos;                                                                    \
    }

ARG_SCAN(float, f32)
ARG_SCAN(double, f64)
ARG_SCAN(int32_t, i32)
ARG_SCAN(int64_t, i64)
ARG_SCAN(uint8_t, u8)

static int64_t arg_scan(int dt, bool want_max, int64_t len, const char *x, int64_t s)
{
    switch (dt) {
    case TGL_FLOAT32: return scan_f32(want_max, len, (const float *)x, s);
    case TGL_FLOAT64: return scan_f64(want_max, len, (const double *)x, s);
    case TGL_INT32: return scan_i32(want_max, len, (const int32_t *)x, s);
    case TGL_INT64: return scan_i64(want_max, len, (const int64_t *)x, s);
    default: return scan_u8(want_max, len, (const uint8_t *)x, s); /* uint8, bool (0/1) */
    }
}

static tgl_status argmax_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                tgl_array *out)
{
    const tgl_array *x = in[0];
    int axis = (int)n->p.i[0];
    int64_t len = x->shape[axis];
    if (out->size == 0)
        return TGL_OK;
    tgl_status st = tgl_argmax_check_empty(ctx, n, in);
    if (st)
        return st;
    /* One scan along the axis per output element; the odometer walks the
     * other axes of x and the matching axes of out. */
    tgl_odometer o = {0};
    for (int d = 0, od = 0; d < x->ndim; d++) {
        if (d == axis) {
            od += tgl_reduce_keepdims(n);
            continue;
        }
        o.shape[o.n] = x->shape[d];
        o.s0[o.n] = x->strides[d];
        o.s1[o.n] = out->strides[od++];
        o.n++;
    }
    size_t es = tgl_dtype_size(x->dtype_id);
    int64_t s = x->strides[axis];
    bool want_max = n->op == TGL_OP_ARGMAX;
    for (int64_t r = 0; r < out->size; r++, tgl_odometer_next(&o)) {
        if ((r & 1023) == 0 && tgl_ctx_interrupted(ctx))
            return tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
        int64_t pos = arg_scan(x->dtype_id, want_max, len,
                               (const char *)x->data + o.off0 * (int64_t)es, s);
        ((int64_t *)out->data)[o.off1] = pos + 1;
    }
    return TGL_OK;
}

/* ---- axes_size ------------------------------------------------------ */

static tgl_status axes_size_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                   tgl_array *out)
{
    (void)ctx;
    int64_t count = 1;
    for (int i = 0; i < n->p.n; i++)
        count *= in[0]->shape[n->p.i[i]]; /* at most x's size: cannot overflow */
    *(int64_t *)out->data = count;
    return TGL_OK;
}

const tgl_op_kernel tgl_cpu_kernel_reduce = {.run = reduce_kernel};
const tgl_op_kernel tgl_cpu_kernel_argmax = {.run = argmax_kernel};
const tgl_op_kernel tgl_cpu_kernel_axes_size = {.run = axes_size_kernel};
