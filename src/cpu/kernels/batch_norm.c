/*
 * batch_norm.c — the CPU kernels of batch normalisation (engine/ops/
 * batch_norm.c states what each computes): batch_norm_stats, the mean and
 * biased variance of each channel in one pass over x, and batch_norm, the
 * normalise-scale-shift in one pass.  x is walked as (N, C, D2, D3, D4)
 * with missing axes of size 1, over any strides (a transposed or sliced x
 * needs no copy); the innermost axis is the contiguous one in the usual
 * layouts.  float32 and float64.
 *
 * The statistics sum in double, shifted by the channel's first element
 * (sum (x - K) and sum (x - K)^2, var = (S2 - S1^2 / M) / M): one pass,
 * and the shift keeps the subtraction from cancelling when the mean is
 * large against the spread (the textbook one-pass formula would lose every
 * digit for a channel of 1e4 + noise in float32 data).
 */
#include "cpu/kernels/kernels.h"

#include <math.h>

/* x as (N, C, D2, D3, D4): sizes and element strides. */
typedef struct bn_geom {
    int64_t n[5], s[5];
} bn_geom;

static bn_geom geom_of(const tgl_array *a)
{
    bn_geom g;
    for (int d = 0; d < 5; d++) {
        g.n[d] = d < a->ndim ? a->shape[d] : 1;
        g.s[d] = d < a->ndim ? a->strides[d] : 0;
    }
    return g;
}

/* Look at the interrupt flag about every 2^20 elements: per channel when
 * channels are that large, else every so many channels. */
#define BN_CHECK_EVERY (1 << 20)

#define STATS(T)                                                                          \
    static void stats_##T(const bn_geom *g, const T *x, int64_t c, double *mean,          \
                          double *var)                                                    \
    {                                                                                     \
        const T *xc = x + c * g->s[1];                                                    \
        const double K = (double)xc[0];                                                   \
        double s1 = 0, s2 = 0;                                                            \
        for (int64_t a = 0; a < g->n[0]; a++)                                             \
            for (int64_t b = 0; b < g->n[2]; b++)                                         \
                for (int64_t d = 0; d < g->n[3]; d++) {                                   \
                    const T *p = xc + a * g->s[0] + b * g->s[2] + d * g->s[3];            \
                    double r1 = 0, r2 = 0;                                                \
                    if (g->s[4] == 1) {                                                   \
                        for (int64_t e = 0; e < g->n[4]; e++) {                           \
                            double v = (double)p[e] - K;                                  \
                            r1 += v;                                                      \
                            r2 += v * v;                                                  \
                        }                                                                 \
                    } else {                                                              \
                        for (int64_t e = 0; e < g->n[4]; e++) {                           \
                            double v = (double)p[e * g->s[4]] - K;                        \
                            r1 += v;                                                      \
                            r2 += v * v;                                                  \
                        }                                                                 \
                    }                                                                     \
                    s1 += r1;                                                             \
                    s2 += r2;                                                             \
                }                                                                         \
        double m = (double)(g->n[0] * g->n[2] * g->n[3] * g->n[4]);                       \
        double v = (s2 - s1 * s1 / m) / m;                                                \
        *mean = K + s1 / m;                                                               \
        *var = v > 0 ? v : 0;                                                             \
    }

STATS(float)
STATS(double)

/* y = (x - mean) * scale + shift over one channel; y has x's shape. */
#define NORM(T)                                                                           \
    static void norm_##T(const bn_geom *g, const bn_geom *gy, const T *x, T *y, int64_t c, \
                         T mean, T scale, T shift)                                        \
    {                                                                                     \
        const T *xc = x + c * g->s[1];                                                    \
        T *yc = y + c * gy->s[1];                                                         \
        for (int64_t a = 0; a < g->n[0]; a++)                                             \
            for (int64_t b = 0; b < g->n[2]; b++)                                         \
                for (int64_t d = 0; d < g->n[3]; d++) {                                   \
                    const T *p = xc + a * g->s[0] + b * g->s[2] + d * g->s[3];            \
                    T *q = yc + a * gy->s[0] + b * gy->s[2] + d * gy->s[3];               \
                    if (g->s[4] == 1 && gy->s[4] == 1)                                    \
                        for (int64_t e = 0; e < g->n[4]; e++)                             \
                            q[e] = (p[e] - mean) * scale + shift;                         \
                    else                                                                  \
                        for (int64_t e = 0; e < g->n[4]; e++)                             \
                            q[e * gy->s[4]] = (p[e * g->s[4]] - mean) * scale + shift;    \
                }                                                                         \
    }

NORM(float)
NORM(double)

static double elem(const tgl_array *v, int64_t c)
{
    const char *p = (const char *)v->data;
    if (v->dtype_id == TGL_FLOAT32)
        return ((const float *)p)[c * v->strides[0]];
    return ((const double *)p)[c * v->strides[0]];
}

static void set_elem(tgl_array *v, int64_t c, double x)
{
    if (v->dtype_id == TGL_FLOAT32)
        ((float *)v->data)[c * v->strides[0]] = (float)x;
    else
        ((double *)v->data)[c * v->strides[0]] = x;
}

/* in[0] = x; out[0] = mean, out[1] = var (either may be NULL: not wanted). */
static tgl_status stats_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                               tgl_array *const *out, bool debug)
{
    (void)debug;
    const tgl_array *x = in[0];
    bn_geom g = geom_of(x);
    int64_t per = g.n[0] * g.n[2] * g.n[3] * g.n[4], work = 0;
    for (int64_t c = 0; c < g.n[1]; c++) {
        if ((work += per) >= BN_CHECK_EVERY) {
            work = 0;
            if (tgl_ctx_interrupted(ctx))
                return tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
        }
        double mean, var;
        if (x->dtype_id == TGL_FLOAT32)
            stats_float(&g, (const float *)x->data, c, &mean, &var);
        else
            stats_double(&g, (const double *)x->data, c, &mean, &var);
        if (out[0])
            set_elem(out[0], c, mean);
        if (out[1])
            set_elem(out[1], c, var);
    }
    return TGL_OK;
}

/* in = x, mean, var [, w, b]; p.f[0] = eps.  The per-channel scale
 * w / sqrt(var + eps) is computed in double, then the pass runs in x's
 * precision. */
static tgl_status bn_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                            tgl_array *out)
{
    const tgl_array *x = in[0];
    bn_geom g = geom_of(x), gy = geom_of(out);
    bool affine = n->nin == 5;
    int64_t per = g.n[0] * g.n[2] * g.n[3] * g.n[4], work = 0;
    for (int64_t c = 0; c < g.n[1]; c++) {
        if ((work += per) >= BN_CHECK_EVERY) {
            work = 0;
            if (tgl_ctx_interrupted(ctx))
                return tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
        }
        double mean = elem(in[1], c);
        double scale = 1.0 / sqrt(elem(in[2], c) + n->p.f[0]);
        double shift = 0;
        if (affine) {
            scale *= elem(in[3], c);
            shift = elem(in[4], c);
        }
        if (x->dtype_id == TGL_FLOAT32)
            norm_float(&g, &gy, (const float *)x->data, (float *)out->data, c, (float)mean,
                       (float)scale, (float)shift);
        else
            norm_double(&g, &gy, (const double *)x->data, (double *)out->data, c, mean, scale,
                        shift);
    }
    return TGL_OK;
}

const tgl_op_kernel tgl_cpu_kernel_batch_norm = {.run = bn_kernel};
const tgl_op_kernel tgl_cpu_kernel_batch_norm_stats = {.run_n = stats_kernel};
