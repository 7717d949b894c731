/*
 * batch_norm.c — the CPU kernels of batch normalisation (engine/ops/
 * batch_norm.c states what each computes): batch_norm_stats, the mean and
 * biased variance of each channel in one pass over x, and batch_norm, the
 * normalise-scale-shift in one pass.  x is walked as (N, C, D2, D3, D4)
 * with the axes after C merged where they can be, over any strides (a
 * transposed or sliced x needs no copy), the longest run innermost; an
 * (N, C) x is walked by rows, every channel at once.  Large inputs are
 * split over the context's threads by ranges of channels.  float32 and
 * float64.
 *
 * The statistics sum in double, shifted by the channel's first element
 * (sum (x - K) and sum (x - K)^2, var = (S2 - S1^2 / M) / M): one pass,
 * and the shift keeps the subtraction from cancelling when the mean is
 * large against the spread (the textbook one-pass formula would lose every
 * digit for a channel of 1e4 + noise in float32 data).
 */
#include "cpu/kernels/kernels.h"
#include "engine/pool.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

/* x as (N, C, D2, D3, D4): sizes and element strides.  The axes after C
 * are merged where the strides of every array walked together allow (a
 * contiguous H x W is one run) and right-aligned, so the innermost loop is
 * the longest contiguous run; missing axes have size 1. */
typedef struct bn_geom {
    int64_t n[5], s[5];
} bn_geom;

/* The geometries of the na arrays a[] (x first; every one of x's shape)
 * walked together. */
static void geom_of(const tgl_array *const *a, int na, bn_geom *g)
{
    int64_t tn[3], ts[3][3];
    int k = 0;
    const tgl_array *x = a[0];
    for (int d = 2; d < x->ndim; d++) {
        if (x->shape[d] == 1)
            continue; /* a length-1 axis: its stride does not matter */
        bool merge = k > 0;
        for (int i = 0; i < na && merge; i++)
            merge = ts[i][k - 1] == a[i]->strides[d] * x->shape[d];
        if (merge)
            tn[k - 1] *= x->shape[d];
        else
            tn[k++] = x->shape[d];
        for (int i = 0; i < na; i++)
            ts[i][k - 1] = a[i]->strides[d];
    }
    for (int i = 0; i < na; i++)
        for (int d = 0; d < 5; d++) {
            int j = d - (5 - k);
            g[i].n[d] = d < 2 ? x->shape[d] : j >= 0 ? tn[j] : 1;
            g[i].s[d] = d < 2 ? a[i]->strides[d] : j >= 0 ? ts[i][j] : 0;
        }
}

/* The (N, C) layout: no axes after C (or only length-1 ones).  The
 * kernels then walk rows, every channel at once (a walk down each column
 * would touch one element per cache line). */
static bool rows_only(const bn_geom *g)
{
    return g->n[2] == 1 && g->n[3] == 1 && g->n[4] == 1;
}

/* Look at the interrupt flag about every 2^20 elements (per task). */
#define BN_CHECK_EVERY (1 << 20)

/* Elements per channel. */
static int64_t per_channel(const bn_geom *g)
{
    return g->n[0] * g->n[2] * g->n[3] * g->n[4];
}

/* A task's check before its next channel: *work counts the elements since
 * the last look (per each); true when the context or another task was
 * interrupted (the job's flag *interrupted is then set): stop. */
static bool stop_here(tgl_ctx *ctx, int *interrupted, int64_t *work, int64_t per)
{
    if ((*work += per) < BN_CHECK_EVERY)
        return false;
    *work = 0;
    if (tgl_ctx_interrupted(ctx) || __atomic_load_n(interrupted, __ATOMIC_RELAXED)) {
        __atomic_store_n(interrupted, 1, __ATOMIC_RELAXED);
        return true;
    }
    return false;
}

/* Runs task over a job of x's geometry g on the context's pool: one task
 * per thread (at most one per channel; *ntasks, which the tasks read, set
 * first), or on the caller alone below 2^16 elements (a thread's wake-up
 * costs more than the pass). */
static void run_split(tgl_ctx *ctx, const bn_geom *g, int *ntasks, tgl_task_fn task, void *job)
{
    int64_t C = g->n[1], total = C * per_channel(g);
    int threads = total >= (1 << 16) ? tgl_pool_threads(ctx) : 1;
    *ntasks = (int)(C < threads ? (C > 0 ? C : 1) : threads);
    if (*ntasks == 1)
        task(job, 0);
    else
        tgl_pool_run(ctx, *ntasks, task, job);
}

/* One channel's shifted sums: s1 = sum (x - K), s2 = sum (x - K)^2. */
#define STATS(T)                                                                          \
    static void stats_##T(const bn_geom *g, const T *x, int64_t c, double K, double *s1,  \
                          double *s2)                                                     \
    {                                                                                     \
        const T *xc = x + c * g->s[1];                                                    \
        double a1 = 0, a2 = 0;                                                            \
        for (int64_t a = 0; a < g->n[0]; a++)                                             \
            for (int64_t b = 0; b < g->n[2]; b++)                                         \
                for (int64_t d = 0; d < g->n[3]; d++) {                                   \
                    const T *p = xc + a * g->s[0] + b * g->s[2] + d * g->s[3];            \
                    double r1 = 0, r2 = 0;                                                \
                    if (g->s[4] == 1) {                                                   \
                        /* 8 independent sums: the adds pipeline (and      \
                         * vectorize) where one chain would wait on each   \
                         * add's latency */                                \
                        double q1[8] = {0}, q2[8] = {0};                                  \
                        int64_t e = 0, n4 = g->n[4];                                      \
                        for (; e + 8 <= n4; e += 8)                                       \
                            for (int l = 0; l < 8; l++) {                                 \
                                double v = (double)p[e + l] - K;                          \
                                q1[l] += v;                                               \
                                q2[l] += v * v;                                           \
                            }                                                             \
                        for (; e < n4; e++) {                                             \
                            double v = (double)p[e] - K;                                  \
                            r1 += v;                                                      \
                            r2 += v * v;                                                  \
                        }                                                                 \
                        for (int l = 0; l < 8; l++)                                       \
                            r1 += q1[l], r2 += q2[l];                                     \
                    } else {                                                              \
                        for (int64_t e = 0; e < g->n[4]; e++) {                           \
                            double v = (double)p[e * g->s[4]] - K;                        \
                            r1 += v;                                                      \
                            r2 += v * v;                                                  \
                        }                                                                 \
                    }                                                                     \
                    a1 += r1;                                                             \
                    a2 += r2;                                                             \
                }                                                                         \
        *s1 = a1;                                                                         \
        *s2 = a2;                                                                         \
    }                                                                                     \
    /* (N, C): the shifted sums of every channel, row by row. */                          \
    static void stats_rows_##T(const bn_geom *g, const T *x, const double *K, double *s1, \
                               double *s2)                                                \
    {                                                                                     \
        int64_t C = g->n[1], sc = g->s[1];                                                \
        for (int64_t a = 0; a < g->n[0]; a++) {                                           \
            const T *p = x + a * g->s[0];                                                 \
            if (sc == 1) {                                                                \
                for (int64_t c = 0; c < C; c++) {                                         \
                    double v = (double)p[c] - K[c];                                       \
                    s1[c] += v;                                                           \
                    s2[c] += v * v;                                                       \
                }                                                                         \
            } else {                                                                      \
                for (int64_t c = 0; c < C; c++) {                                         \
                    double v = (double)p[c * sc] - K[c];                                  \
                    s1[c] += v;                                                           \
                    s2[c] += v * v;                                                       \
                }                                                                         \
            }                                                                             \
        }                                                                                 \
    }

STATS(float)
STATS(double)

/* y = (x - mean) * scale + shift over one channel. */
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
    }                                                                                     \
    /* (N, C): every channel of each row at once; mean, scale, shift (C). */              \
    static void norm_rows_##T(const bn_geom *g, const bn_geom *gy, const T *x, T *y,      \
                              const T *mean, const T *scale, const T *shift)              \
    {                                                                                     \
        int64_t C = g->n[1];                                                              \
        for (int64_t a = 0; a < g->n[0]; a++) {                                           \
            const T *p = x + a * g->s[0];                                                 \
            T *q = y + a * gy->s[0];                                                      \
            if (g->s[1] == 1 && gy->s[1] == 1)                                            \
                for (int64_t c = 0; c < C; c++)                                           \
                    q[c] = (p[c] - mean[c]) * scale[c] + shift[c];                        \
            else                                                                          \
                for (int64_t c = 0; c < C; c++)                                           \
                    q[c * gy->s[1]] = (p[c * g->s[1]] - mean[c]) * scale[c] + shift[c];   \
        }                                                                                 \
    }

NORM(float)
NORM(double)

static double elem(const tgl_array *v, int64_t c)
{
    if (v->dtype_id == TGL_FLOAT32)
        return ((const float *)v->data)[c * v->strides[0]];
    return ((const double *)v->data)[c * v->strides[0]];
}

static void set_elem(tgl_array *v, int64_t c, double x)
{
    if (v->dtype_id == TGL_FLOAT32)
        ((float *)v->data)[c * v->strides[0]] = (float)x;
    else
        ((double *)v->data)[c * v->strides[0]] = x;
}

/* Element (0, c, 0, ...) of x: the channel's shift. */
static double first_of(const tgl_array *x, int64_t c)
{
    if (x->dtype_id == TGL_FLOAT32)
        return ((const float *)x->data)[c * x->strides[1]];
    return ((const double *)x->data)[c * x->strides[1]];
}

/* One kernel call, split over the context's threads by channel ranges:
 * task t takes channels [C t / ntasks, C (t + 1) / ntasks), every row of
 * them (in the (N, C) layout too: each row's slice of contiguous
 * channels), so the tasks write disjoint memory and need no merging. */
typedef struct bn_job {
    tgl_ctx *ctx;
    bool stats, f32, rows;
    const tgl_array *x;
    tgl_array *y;                 /* batch_norm's output                   */
    bn_geom g, gy;
    int ntasks;
    double *K, *s1, *s2;          /* batch_norm_stats: C each              */
    const void *mean, *scale, *shift; /* batch_norm: C each, x's dtype    */
    int interrupted;
} bn_job;

/* Sub-geometry of channels [c0, c1): the (N, C) kernels take it whole. */
static bn_geom channels(const bn_geom *g, int64_t c0, int64_t c1)
{
    bn_geom h = *g;
    h.n[1] = c1 - c0;
    return h;
}

static void bn_task(void *arg, int t)
{
    bn_job *j = arg;
    int64_t C = j->g.n[1];
    int64_t c0 = C * t / j->ntasks, c1 = C * (t + 1) / j->ntasks;
    if (c0 >= c1)
        return;
    if (j->rows) {
        bn_geom g = channels(&j->g, c0, c1), gy = channels(&j->gy, c0, c1);
        if (j->stats && j->f32)
            stats_rows_float(&g, (const float *)j->x->data + c0 * g.s[1], j->K + c0, j->s1 + c0,
                             j->s2 + c0);
        else if (j->stats)
            stats_rows_double(&g, (const double *)j->x->data + c0 * g.s[1], j->K + c0,
                              j->s1 + c0, j->s2 + c0);
        else if (j->f32)
            norm_rows_float(&g, &gy, (const float *)j->x->data + c0 * g.s[1],
                            (float *)j->y->data + c0 * gy.s[1], (const float *)j->mean + c0,
                            (const float *)j->scale + c0, (const float *)j->shift + c0);
        else
            norm_rows_double(&g, &gy, (const double *)j->x->data + c0 * g.s[1],
                             (double *)j->y->data + c0 * gy.s[1], (const double *)j->mean + c0,
                             (const double *)j->scale + c0, (const double *)j->shift + c0);
        return;
    }
    int64_t per = per_channel(&j->g), work = 0;
    for (int64_t c = c0; c < c1; c++) {
        if (stop_here(j->ctx, &j->interrupted, &work, per))
            return;
        if (j->stats && j->f32)
            stats_float(&j->g, (const float *)j->x->data, c, j->K[c], &j->s1[c], &j->s2[c]);
        else if (j->stats)
            stats_double(&j->g, (const double *)j->x->data, c, j->K[c], &j->s1[c], &j->s2[c]);
        else if (j->f32)
            norm_float(&j->g, &j->gy, (const float *)j->x->data, (float *)j->y->data, c,
                       ((const float *)j->mean)[c], ((const float *)j->scale)[c],
                       ((const float *)j->shift)[c]);
        else
            norm_double(&j->g, &j->gy, (const double *)j->x->data, (double *)j->y->data, c,
                        ((const double *)j->mean)[c], ((const double *)j->scale)[c],
                        ((const double *)j->shift)[c]);
    }
}

/* Runs the job on the pool (run_split). */
static tgl_status bn_run(const tgl_node *n, tgl_array *const *in, bn_job *j)
{
    run_split(j->ctx, &j->g, &j->ntasks, bn_task, j);
    if (j->interrupted)
        return tgl_op_error(j->ctx, n, in, TGL_EINTERRUPT, "interrupted");
    return TGL_OK;
}

/* in[0] = x; out[0] = mean, out[1] = var (either may be NULL: not wanted). */
static tgl_status stats_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                               tgl_array *const *out, bool debug)
{
    (void)debug;
    const tgl_array *x = in[0];
    bn_job j = {.ctx = ctx, .stats = true, .f32 = x->dtype_id == TGL_FLOAT32, .x = x};
    geom_of(&x, 1, &j.g);
    j.rows = rows_only(&j.g);
    int64_t C = j.g.n[1], per = per_channel(&j.g);
    double *buf = malloc(sizeof(double) * 3 * (size_t)(C > 0 ? C : 1));
    if (!buf)
        return tgl_op_error(ctx, n, in, TGL_ENOMEM, "out of memory (%" PRId64 " channels)", C);
    j.K = buf, j.s1 = buf + C, j.s2 = buf + 2 * C;
    for (int64_t c = 0; c < C; c++) {
        j.K[c] = first_of(x, c);
        j.s1[c] = j.s2[c] = 0;
    }
    tgl_status st = bn_run(n, in, &j);
    for (int64_t c = 0; c < C && !st; c++) {
        double m = (double)per, v = (j.s2[c] - j.s1[c] * j.s1[c] / m) / m;
        if (out[0])
            set_elem(out[0], c, j.K[c] + j.s1[c] / m);
        if (out[1])
            set_elem(out[1], c, v > 0 ? v : 0);
    }
    free(buf);
    return st;
}

/* in = x, mean, var [, w, b]; p.f[0] = eps.  The per-channel scale
 * w / sqrt(var + eps) is computed in double, then the pass runs in x's
 * precision. */
static tgl_status bn_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                            tgl_array *out)
{
    const tgl_array *x = in[0];
    bn_job j = {.ctx = ctx, .f32 = x->dtype_id == TGL_FLOAT32, .x = x, .y = out};
    const tgl_array *xy[2] = {x, out};
    bn_geom gs[2];
    geom_of(xy, 2, gs);
    j.g = gs[0], j.gy = gs[1];
    j.rows = rows_only(&j.g);
    bool affine = n->nin == 5;
    int64_t C = j.g.n[1];
    size_t esize = j.f32 ? sizeof(float) : sizeof(double);
    char *buf = malloc(esize * 3 * (size_t)(C > 0 ? C : 1));
    if (!buf)
        return tgl_op_error(ctx, n, in, TGL_ENOMEM, "out of memory (%" PRId64 " channels)", C);
    for (int64_t c = 0; c < C; c++) {
        double mean = elem(in[1], c);
        double scale = 1.0 / sqrt(elem(in[2], c) + n->p.f[0]);
        double shift = 0;
        if (affine) {
            scale *= elem(in[3], c);
            shift = elem(in[4], c);
        }
        if (j.f32) {
            float *f = (float *)buf;
            f[c] = (float)mean, f[C + c] = (float)scale, f[2 * C + c] = (float)shift;
        } else {
            double *d = (double *)buf;
            d[c] = mean, d[C + c] = scale, d[2 * C + c] = shift;
        }
    }
    j.mean = buf, j.scale = buf + esize * (size_t)C, j.shift = buf + 2 * esize * (size_t)C;
    tgl_status st = bn_run(n, in, &j);
    free(buf);
    return st;
}

/* ---- batch_norm_grad ---------------------------------------------- */

/* Pass 1 over one channel: sg = sum g, sgx = sum g (x - mean), in double. */
#define GRAD_SUMS(T)                                                                      \
    static void grad_sums_##T(const bn_geom *gx_, const bn_geom *gg, const T *x,          \
                              const T *g, int64_t c, double mean, double *sg, double *sgx) \
    {                                                                                     \
        const T *xc = x + c * gx_->s[1], *gc = g + c * gg->s[1];                          \
        double a1 = 0, a2 = 0;                                                            \
        for (int64_t a = 0; a < gx_->n[0]; a++)                                           \
            for (int64_t b = 0; b < gx_->n[2]; b++)                                       \
                for (int64_t d = 0; d < gx_->n[3]; d++) {                                 \
                    const T *p = xc + a * gx_->s[0] + b * gx_->s[2] + d * gx_->s[3];      \
                    const T *q = gc + a * gg->s[0] + b * gg->s[2] + d * gg->s[3];         \
                    double r1 = 0, r2 = 0;                                                \
                    if (gx_->s[4] == 1 && gg->s[4] == 1) {                                \
                        double q1[8] = {0}, q2[8] = {0};                                  \
                        int64_t e = 0, n4 = gx_->n[4];                                    \
                        for (; e + 8 <= n4; e += 8)                                       \
                            for (int l = 0; l < 8; l++) {                                 \
                                double gv = (double)q[e + l];                             \
                                q1[l] += gv;                                              \
                                q2[l] += gv * ((double)p[e + l] - mean);                  \
                            }                                                             \
                        for (; e < n4; e++) {                                             \
                            double gv = (double)q[e];                                     \
                            r1 += gv;                                                     \
                            r2 += gv * ((double)p[e] - mean);                             \
                        }                                                                 \
                        for (int l = 0; l < 8; l++)                                       \
                            r1 += q1[l], r2 += q2[l];                                     \
                    } else {                                                              \
                        for (int64_t e = 0; e < gx_->n[4]; e++) {                         \
                            double gv = (double)q[e * gg->s[4]];                          \
                            r1 += gv;                                                     \
                            r2 += gv * ((double)p[e * gx_->s[4]] - mean);                 \
                        }                                                                 \
                    }                                                                     \
                    a1 += r1;                                                             \
                    a2 += r2;                                                             \
                }                                                                         \
        *sg = a1;                                                                         \
        *sgx = a2;                                                                        \
    }                                                                                     \
    /* (N, C): every channel's sums, row by row (channels [0, g->n[1])). */               \
    static void grad_sums_rows_##T(const bn_geom *gx_, const bn_geom *gg, const T *x,     \
                                   const T *g, const double *mean, double *sg,            \
                                   double *sgx)                                           \
    {                                                                                     \
        int64_t C = gx_->n[1];                                                            \
        for (int64_t a = 0; a < gx_->n[0]; a++) {                                         \
            const T *p = x + a * gx_->s[0], *q = g + a * gg->s[0];                        \
            for (int64_t c = 0; c < C; c++) {                                             \
                double gv = (double)q[c * gg->s[1]];                                      \
                sg[c] += gv;                                                              \
                sgx[c] += gv * ((double)p[c * gx_->s[1]] - mean[c]);                      \
            }                                                                             \
        }                                                                                 \
    }

GRAD_SUMS(float)
GRAD_SUMS(double)

/* Pass 2 over one channel: dx = A (g - B - (x - mean) D). */
#define GRAD_DX(T)                                                                        \
    static void grad_dx_##T(const bn_geom *gx_, const bn_geom *gg, const bn_geom *go,     \
                            const T *x, const T *g, T *o, int64_t c, T mean, T A, T B,    \
                            T D)                                                          \
    {                                                                                     \
        const T *xc = x + c * gx_->s[1], *gc = g + c * gg->s[1];                          \
        T *oc = o + c * go->s[1];                                                         \
        for (int64_t a = 0; a < gx_->n[0]; a++)                                           \
            for (int64_t b = 0; b < gx_->n[2]; b++)                                       \
                for (int64_t d = 0; d < gx_->n[3]; d++) {                                 \
                    const T *p = xc + a * gx_->s[0] + b * gx_->s[2] + d * gx_->s[3];      \
                    const T *q = gc + a * gg->s[0] + b * gg->s[2] + d * gg->s[3];         \
                    T *r = oc + a * go->s[0] + b * go->s[2] + d * go->s[3];               \
                    if (gx_->s[4] == 1 && gg->s[4] == 1 && go->s[4] == 1)                 \
                        for (int64_t e = 0; e < gx_->n[4]; e++)                           \
                            r[e] = A * (q[e] - B - (p[e] - mean) * D);                    \
                    else                                                                  \
                        for (int64_t e = 0; e < gx_->n[4]; e++)                           \
                            r[e * go->s[4]] =                                             \
                                A * (q[e * gg->s[4]] - B - (p[e * gx_->s[4]] - mean) * D); \
                }                                                                         \
    }                                                                                     \
    /* (N, C): per-channel mean, A, B, D arrays. */                                       \
    static void grad_dx_rows_##T(const bn_geom *gx_, const bn_geom *gg, const bn_geom *go, \
                                 const T *x, const T *g, T *o, const T *mean, const T *A, \
                                 const T *B, const T *D)                                  \
    {                                                                                     \
        int64_t C = gx_->n[1];                                                            \
        for (int64_t a = 0; a < gx_->n[0]; a++) {                                         \
            const T *p = x + a * gx_->s[0], *q = g + a * gg->s[0];                        \
            T *r = o + a * go->s[0];                                                      \
            if (gx_->s[1] == 1 && gg->s[1] == 1 && go->s[1] == 1)                         \
                for (int64_t c = 0; c < C; c++)                                           \
                    r[c] = A[c] * (q[c] - B[c] - (p[c] - mean[c]) * D[c]);                \
            else                                                                          \
                for (int64_t c = 0; c < C; c++)                                           \
                    r[c * go->s[1]] = A[c] * (q[c * gg->s[1]] - B[c] -                    \
                                              (p[c * gx_->s[1]] - mean[c]) * D[c]);       \
        }                                                                                 \
    }

GRAD_DX(float)
GRAD_DX(double)

typedef struct grad_job {
    tgl_ctx *ctx;
    bool f32, rows, pass2;
    const tgl_array *x, *g;
    tgl_array *dx;
    bn_geom gx, gg, go;
    int ntasks;
    double *mean, *sg, *sgx;      /* pass 1, C each (mean: the input's)   */
    const void *cm, *A, *B, *D;   /* pass 2, C each, in x's dtype         */
    int interrupted;
} grad_job;

static void grad_task(void *arg, int t)
{
    grad_job *j = arg;
    int64_t C = j->gx.n[1];
    int64_t c0 = C * t / j->ntasks, c1 = C * (t + 1) / j->ntasks;
    if (c0 >= c1)
        return;
    const char *xb = j->x->data, *gb = j->g->data;
    char *ob = j->dx ? j->dx->data : NULL;
    size_t es = j->f32 ? sizeof(float) : sizeof(double);
    if (j->rows) {
        bn_geom gx = channels(&j->gx, c0, c1), gg = channels(&j->gg, c0, c1),
                go = channels(&j->go, c0, c1);
        const char *xp = xb + (size_t)(c0 * gx.s[1]) * es, *gp = gb + (size_t)(c0 * gg.s[1]) * es;
        if (!j->pass2) {
            if (j->f32)
                grad_sums_rows_float(&gx, &gg, (const float *)xp, (const float *)gp, j->mean + c0,
                                     j->sg + c0, j->sgx + c0);
            else
                grad_sums_rows_double(&gx, &gg, (const double *)xp, (const double *)gp,
                                      j->mean + c0, j->sg + c0, j->sgx + c0);
            return;
        }
        char *op = ob + (size_t)(c0 * go.s[1]) * es;
        if (j->f32)
            grad_dx_rows_float(&gx, &gg, &go, (const float *)xp, (const float *)gp, (float *)op,
                               (const float *)j->cm + c0, (const float *)j->A + c0,
                               (const float *)j->B + c0, (const float *)j->D + c0);
        else
            grad_dx_rows_double(&gx, &gg, &go, (const double *)xp, (const double *)gp,
                                (double *)op, (const double *)j->cm + c0,
                                (const double *)j->A + c0, (const double *)j->B + c0,
                                (const double *)j->D + c0);
        return;
    }
    int64_t per = per_channel(&j->gx), work = 0;
    for (int64_t c = c0; c < c1; c++) {
        if (stop_here(j->ctx, &j->interrupted, &work, per))
            return;
        if (!j->pass2 && j->f32)
            grad_sums_float(&j->gx, &j->gg, (const float *)xb, (const float *)gb, c, j->mean[c],
                            &j->sg[c], &j->sgx[c]);
        else if (!j->pass2)
            grad_sums_double(&j->gx, &j->gg, (const double *)xb, (const double *)gb, c,
                             j->mean[c], &j->sg[c], &j->sgx[c]);
        else if (j->f32)
            grad_dx_float(&j->gx, &j->gg, &j->go, (const float *)xb, (const float *)gb,
                          (float *)ob, c, ((const float *)j->cm)[c], ((const float *)j->A)[c],
                          ((const float *)j->B)[c], ((const float *)j->D)[c]);
        else
            grad_dx_double(&j->gx, &j->gg, &j->go, (const double *)xb, (const double *)gb,
                           (double *)ob, c, ((const double *)j->cm)[c], ((const double *)j->A)[c],
                           ((const double *)j->B)[c], ((const double *)j->D)[c]);
    }
}

static void grad_run(grad_job *j)
{
    run_split(j->ctx, &j->gx, &j->ntasks, grad_task, j);
}

/* in = x, g, mean, var [, w]; out = dx (x's shape), sg, sgx (C); p.f[0] =
 * eps.  Pass 1 sums; pass 2, when dx is wanted, writes it. */
static tgl_status grad_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              tgl_array *const *out, bool debug)
{
    (void)debug;
    const tgl_array *x = in[0], *g = in[1];
    grad_job j = {.ctx = ctx, .f32 = x->dtype_id == TGL_FLOAT32, .x = x, .g = g, .dx = out[0]};
    const tgl_array *arr[3] = {x, g, out[0]};
    bn_geom gs[3];
    geom_of(arr, out[0] ? 3 : 2, gs);
    j.gx = gs[0], j.gg = gs[1], j.go = out[0] ? gs[2] : gs[1];
    j.rows = rows_only(&j.gx);
    int64_t C = j.gx.n[1], per = per_channel(&j.gx);
    size_t es = j.f32 ? sizeof(float) : sizeof(double), cc = (size_t)(C > 0 ? C : 1);
    char *buf = malloc(sizeof(double) * 3 * cc + es * 4 * cc);
    if (!buf)
        return tgl_op_error(ctx, n, in, TGL_ENOMEM, "out of memory (%" PRId64 " channels)", C);
    j.mean = (double *)buf, j.sg = j.mean + cc, j.sgx = j.sg + cc;
    char *cb = buf + sizeof(double) * 3 * cc;
    for (int64_t c = 0; c < C; c++) {
        j.mean[c] = elem(in[2], c);
        j.sg[c] = j.sgx[c] = 0;
    }
    grad_run(&j);
    tgl_status st = j.interrupted ? tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted") : TGL_OK;
    for (int64_t c = 0; c < C && !st; c++) {
        if (out[1])
            set_elem(out[1], c, j.sg[c]);
        if (out[2])
            set_elem(out[2], c, j.sgx[c]);
        double ve = elem(in[3], c) + n->p.f[0], m = (double)per;
        double A = (n->nin == 5 ? elem(in[4], c) : 1.0) / sqrt(ve);
        double B = j.sg[c] / m, D = j.sgx[c] / (m * ve);
        if (j.f32) {
            float *f = (float *)cb;
            f[c] = (float)j.mean[c], f[cc + c] = (float)A, f[2 * cc + c] = (float)B,
            f[3 * cc + c] = (float)D;
        } else {
            double *d = (double *)cb;
            d[c] = j.mean[c], d[cc + c] = A, d[2 * cc + c] = B, d[3 * cc + c] = D;
        }
    }
    if (!st && out[0]) {
        j.pass2 = true;
        j.cm = cb, j.A = cb + es * cc, j.B = cb + 2 * es * cc, j.D = cb + 3 * es * cc;
        grad_run(&j);
        if (j.interrupted)
            st = tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
    }
    free(buf);
    return st;
}

const tgl_op_kernel tgl_cpu_kernel_batch_norm = {.run = bn_kernel};
const tgl_op_kernel tgl_cpu_kernel_batch_norm_stats = {.run_n = stats_kernel};
const tgl_op_kernel tgl_cpu_kernel_batch_norm_grad = {.run_n = grad_kernel};
