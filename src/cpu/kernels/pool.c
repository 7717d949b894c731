/*
 * pool.c — the CPU kernels of the pooling ops (engine/ops/pool.c, which
 * states what each computes): max_pool2d and avg_pool2d, and their
 * pullbacks' max_pool2d_grad, avg_pool2d_grad and max_pool2d_gather.
 * One (N, C) plane at a time, over strided inputs (a transposed or sliced
 * x needs no copy); float32 and float64, sums in the array's precision as
 * Torch7's. The argmax is searched again by each op that needs it rather
 * than stored: max pool's backward is then one pass over the windows, and
 * no op carries a hidden index output.
 */
#include "cpu/kernels/kernels.h"

#include <math.h>
#include <string.h>

/* One pooling problem: the planes and their layout, the window geometry. */
typedef struct pool_geom {
    int64_t planes, C;          /* N * C (C for a 3-d input), and C        */
    int64_t H, W, Ho, Wo;
    int64_t kH, kW, dH, dW, pH, pW;
    bool exclude_pad;
} pool_geom;

/* Strides of one array as (n, c, h, w); n's is 0 for a 3-d array. */
typedef struct pool_strides {
    int64_t n, c, h, w;
} pool_strides;

static pool_strides strides_of(const tgl_array *a)
{
    int nd = a->ndim;
    pool_strides s = {nd == 4 ? a->strides[0] : 0, a->strides[nd - 3], a->strides[nd - 2],
                      a->strides[nd - 1]};
    return s;
}

static int64_t plane_off(const pool_geom *g, const pool_strides *s, int64_t q)
{
    return (q / g->C) * s->n + (q % g->C) * s->c;
}

static pool_geom geom_of(const tgl_node *n, const tgl_array *x, const tgl_array *pooled)
{
    int nd = x->ndim;
    pool_geom g;
    g.C = x->shape[nd - 3];
    g.planes = g.C * (nd == 4 ? x->shape[0] : 1);
    g.H = x->shape[nd - 2];
    g.W = x->shape[nd - 1];
    g.Ho = pooled->shape[nd - 2];
    g.Wo = pooled->shape[nd - 1];
    g.kH = n->p.i[0], g.kW = n->p.i[1], g.dH = n->p.i[2], g.dW = n->p.i[3];
    g.pH = n->p.i[4], g.pW = n->p.i[5];
    g.exclude_pad = (n->p.flags & TGL_POOL_EXCLUDE_PAD) != 0;
    return g;
}

/* Window (i, j)'s rows [*h0, *h1) and columns [*w0, *w1) inside the input,
 * and its divisor for avg pool: the window clipped to the padded input
 * (Torch7's count_include_pad) or to the input. */
static int64_t window(const pool_geom *g, int64_t i, int64_t j, int64_t *h0, int64_t *h1,
                      int64_t *w0, int64_t *w1)
{
    int64_t hs = i * g->dH - g->pH, ws = j * g->dW - g->pW;
    int64_t he = hs + g->kH, we = ws + g->kW;
    if (he > g->H + g->pH)
        he = g->H + g->pH;
    if (we > g->W + g->pW)
        we = g->W + g->pW;
    int64_t count = (he - hs) * (we - ws);
    *h0 = hs < 0 ? 0 : hs;
    *w0 = ws < 0 ? 0 : ws;
    *h1 = he > g->H ? g->H : he;
    *w1 = we > g->W ? g->W : we;
    if (g->exclude_pad)
        count = (*h1 - *h0) * (*w1 - *w0);
    return count;
}

/* Window (i, j)'s maximum: its value, and its row and column in x's
 * plane (*bh, *bw: a position, not an offset, as x's strides may be 0 or
 * negative); the first in row-major order among equals (Torch7's tie
 * rule); a NaN wins (the last NaN, as Torch7's `v > max || isnan(v)`).
 * The loop has no branch: maxss for the value, masks for the position
 * (on random data `v > m` is a coin toss a branch predictor loses, and
 * gcc turns plain selects of three values into a branch: 3x slower); a
 * NaN, rare, is found by a second pass. */
#define ARGMAX(T)                                                                        \
    static inline T argmax_##T(const pool_geom *g, const T *xp, const pool_strides *xs,  \
                               int64_t i, int64_t j, int64_t *bh, int64_t *bw)           \
    {                                                                                    \
        int64_t h0, h1, w0, w1;                                                          \
        window(g, i, j, &h0, &h1, &w0, &w1);                                             \
        int64_t besth = h0, bestw = w0;                                                  \
        T m = xp[h0 * xs->h + w0 * xs->w];                                               \
        int nan = 0;                                                                     \
        for (int64_t h = h0; h < h1; h++)                                                \
            for (int64_t w = w0; w < w1; w++) {                                          \
                T v = xp[h * xs->h + w * xs->w];                                         \
                int64_t take = -(int64_t)(v > m); /* all ones or 0 */                   \
                nan |= v != v;                                                           \
                besth ^= (besth ^ h) & take;                                             \
                bestw ^= (bestw ^ w) & take;                                             \
                m = v > m ? v : m;                                                       \
            }                                                                            \
        if (nan)                                                                         \
            for (int64_t h = h0; h < h1; h++)                                            \
                for (int64_t w = w0; w < w1; w++) {                                      \
                    T v = xp[h * xs->h + w * xs->w];                                     \
                    if (v != v)                                                          \
                        m = v, besth = h, bestw = w;                                     \
                }                                                                        \
        *bh = besth, *bw = bestw;                                                        \
        return m;                                                                        \
    }

ARGMAX(float)
ARGMAX(double)

/* max_pool2d / avg_pool2d on output rows [i0, i1) of one plane. */
#define POOL_PLANE(T)                                                                    \
    static void pool_plane_##T(const pool_geom *g, bool max, const T *xp,                \
                               const pool_strides *xs, T *yp, const pool_strides *ys,    \
                               int64_t i0, int64_t i1)                                   \
    {                                                                                    \
        for (int64_t i = i0; i < i1; i++)                                                \
            for (int64_t j = 0; j < g->Wo; j++) {                                        \
                T *y = yp + i * ys->h + j * ys->w;                                       \
                int64_t h0, h1, w0, w1;                                                  \
                if (max) {                                                               \
                    *y = argmax_##T(g, xp, xs, i, j, &h0, &w0);                          \
                    continue;                                                            \
                }                                                                        \
                int64_t count = window(g, i, j, &h0, &h1, &w0, &w1);                     \
                T s = 0;                                                                 \
                for (int64_t h = h0; h < h1; h++)                                        \
                    for (int64_t w = w0; w < w1; w++)                                    \
                        s += xp[h * xs->h + w * xs->w];                                  \
                *y = s / (T)count;                                                       \
            }                                                                            \
    }

POOL_PLANE(float)
POOL_PLANE(double)

/* The pullbacks on the windows of output rows [i0, i1) of one plane.
 * max_pool2d_grad and avg_pool2d_grad: out (x's plane, zeroed with the
 * first block) gets g (pooled) routed to each argmax, or spread as
 * g / count over each window, summed where windows overlap.
 * max_pool2d_gather: out (pooled) reads g (x's plane) at each argmax. */
#define GRAD_PLANE(T)                                                                    \
    static void grad_plane_##T(const pool_geom *g, int op, const T *xp,                  \
                               const pool_strides *xs, const T *gp,                      \
                               const pool_strides *gs, T *out, const pool_strides *os,   \
                               int64_t i0, int64_t i1)                                   \
    {                                                                                    \
        bool zero = i0 == 0 && op != TGL_OP_MAX_POOL2D_GATHER;                           \
        if (zero && os->w == 1 && os->h == g->W)                                         \
            memset(out, 0, sizeof(T) * (size_t)(g->H * g->W));                           \
        else if (zero)                                                                   \
            for (int64_t h = 0; h < g->H; h++)                                           \
                for (int64_t w = 0; w < g->W; w++)                                       \
                    out[h * os->h + w * os->w] = 0;                                      \
        for (int64_t i = i0; i < i1; i++)                                                \
            for (int64_t j = 0; j < g->Wo; j++) {                                        \
                int64_t h0, h1, w0, w1;                                                  \
                if (op == TGL_OP_MAX_POOL2D_GATHER) {                                    \
                    argmax_##T(g, xp, xs, i, j, &h0, &w0);                               \
                    out[i * os->h + j * os->w] = gp[h0 * gs->h + w0 * gs->w];            \
                    continue;                                                            \
                }                                                                        \
                T gv = gp[i * gs->h + j * gs->w];                                        \
                if (op == TGL_OP_MAX_POOL2D_GRAD) {                                      \
                    argmax_##T(g, xp, xs, i, j, &h0, &w0);                               \
                    out[h0 * os->h + w0 * os->w] += gv;                                  \
                    continue;                                                            \
                }                                                                        \
                T v = gv / (T)window(g, i, j, &h0, &h1, &w0, &w1);                       \
                for (int64_t h = h0; h < h1; h++)                                        \
                    for (int64_t w = w0; w < w1; w++)                                    \
                        out[h * os->h + w * os->w] += v;                                 \
            }                                                                            \
    }

GRAD_PLANE(float)
GRAD_PLANE(double)

/* The common max pool, 2x2 windows at stride 2 that all lie inside the
 * input (no padding, no clipped last window) over rows of unit stride:
 * each window's four values compared straight, no window arithmetic (the
 * LeNet layers' pooling took 3x longer through the general loops).  The
 * values and the argmax follow argmax_T's rules (the first maximum in
 * row-major order); a window holding a NaN is handed to argmax_T. */
static bool fast22(const pool_geom *g, const pool_strides *xs, const pool_strides *os)
{
    return g->kH == 2 && g->kW == 2 && g->dH == 2 && g->dW == 2 && g->pH == 0 && g->pW == 0 &&
           2 * g->Ho <= g->H && 2 * g->Wo <= g->W && xs->w == 1 && os->w == 1;
}

#define FAST22(T)                                                                        \
    /* The window at p (its top left; rows ld apart): 0..3 for its argmax in             \
     * row-major order, -1 when it holds a NaN; *m its maximum.  Without                 \
     * branches (as argmax_T, for the same reason; gcc turns a select of both            \
     * value and index into a jump): the maximum by max instructions, then the           \
     * first of the four equal to it, the lowest set bit of their mask. */               \
    static inline int max22_##T(const T *p, int64_t ld, T *m)                            \
    {                                                                                    \
        T a = p[0], b = p[1], c = p[ld], d = p[ld + 1];                                  \
        if ((a != a) | (b != b) | (c != c) | (d != d))                                   \
            return -1;                                                                   \
        T m1 = b > a ? b : a, m2 = d > c ? d : c, v = m2 > m1 ? m2 : m1;                 \
        unsigned e = (unsigned)(a == v) | (unsigned)(b == v) << 1 |                      \
                     (unsigned)(c == v) << 2 | 8u;                                       \
        *m = v;                                                                          \
        return __builtin_ctz(e);                                                         \
    }                                                                                    \
    /* max_pool2d on one plane. */                                                       \
    static void max22_plane_##T(const pool_geom *g, const T *xp, const pool_strides *xs, \
                                T *yp, const pool_strides *ys)                           \
    {                                                                                    \
        for (int64_t i = 0; i < g->Ho; i++) {                                            \
            const T *xr = xp + 2 * i * xs->h;                                            \
            T *yr = yp + i * ys->h;                                                      \
            int nan = 0;                                                                 \
            for (int64_t j = 0; j < g->Wo; j++) {                                        \
                const T *p = xr + 2 * j;                                                 \
                T a = p[0], b = p[1], c = p[xs->h], d = p[xs->h + 1];                    \
                nan |= (a != a) | (b != b) | (c != c) | (d != d);                        \
                T m1 = b > a ? b : a, m2 = d > c ? d : c;                                \
                yr[j] = m2 > m1 ? m2 : m1;                                               \
            }                                                                            \
            for (int64_t j = 0; nan && j < g->Wo; j++) {                                 \
                int64_t bh, bw;                                                          \
                yr[j] = argmax_##T(g, xp, xs, i, j, &bh, &bw);                           \
            }                                                                            \
        }                                                                                \
    }                                                                                    \
    /* max_pool2d_grad on one plane: each window's four entries written (g at           \
     * the argmax, 0 elsewhere), the rows and columns no window covers zeroed. */       \
    static void max22_grad_plane_##T(const pool_geom *g, const T *xp,                    \
                                     const pool_strides *xs, const T *gp,                \
                                     const pool_strides *gs, T *out,                     \
                                     const pool_strides *os)                             \
    {                                                                                    \
        for (int64_t i = 0; i < g->Ho; i++) {                                            \
            const T *xr = xp + 2 * i * xs->h;                                            \
            T *o0 = out + 2 * i * os->h, *o1 = o0 + os->h;                               \
            for (int64_t j = 0; j < g->Wo; j++) {                                        \
                T gv = gp[i * gs->h + j * gs->w], m;                                     \
                int k = max22_##T(xr + 2 * j, xs->h, &m);                                \
                if (k < 0) {                                                             \
                    int64_t bh, bw;                                                      \
                    argmax_##T(g, xp, xs, i, j, &bh, &bw);                               \
                    k = (int)((bh - 2 * i) * 2 + (bw - 2 * j));                          \
                }                                                                        \
                o0[2 * j] = o0[2 * j + 1] = o1[2 * j] = o1[2 * j + 1] = 0;               \
                o0[(k >> 1) * os->h + 2 * j + (k & 1)] = gv; /* no branch on k */         \
            }                                                                            \
            for (int64_t w = 2 * g->Wo; w < g->W; w++)                                   \
                o0[w] = o1[w] = 0;                                                       \
        }                                                                                \
        for (int64_t h = 2 * g->Ho; h < g->H; h++)                                       \
            for (int64_t w = 0; w < g->W; w++)                                           \
                out[h * os->h + w] = 0;                                                  \
    }

FAST22(float)
FAST22(double)

/* The kernels walk (plane, block of output rows) and look at the
 * interrupt flag every 2^16 input elements read or so: a large single
 * plane is interruptible too, many small ones cost one look per batch. */
#define POOL_ROWS 16
static int64_t block_work(const pool_geom *g, int64_t i0, int64_t i1)
{
    return (i1 - i0) * g->Wo * g->kH * g->kW + 1;
}

static tgl_status pool_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              tgl_array *out)
{
    const tgl_array *x = in[0];
    pool_geom g = geom_of(n, x, out);
    pool_strides xs = strides_of(x), ys = strides_of(out);
    bool max = n->op == TGL_OP_MAX_POOL2D;
    int64_t work = 0;
    if (max && fast22(&g, &xs, &ys)) {
        for (int64_t q = 0; q < g.planes; q++) {
            if ((work += g.H * g.W) >= 1 << 16) {
                work = 0;
                if (tgl_ctx_interrupted(ctx))
                    return tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
            }
            int64_t xo = plane_off(&g, &xs, q), yo = plane_off(&g, &ys, q);
            if (x->dtype_id == TGL_FLOAT32)
                max22_plane_float(&g, (const float *)x->data + xo, &xs, (float *)out->data + yo,
                                  &ys);
            else
                max22_plane_double(&g, (const double *)x->data + xo, &xs,
                                   (double *)out->data + yo, &ys);
        }
        return TGL_OK;
    }
    for (int64_t q = 0; q < g.planes; q++) {
        int64_t xo = plane_off(&g, &xs, q), yo = plane_off(&g, &ys, q);
        for (int64_t i0 = 0; i0 < g.Ho; i0 += POOL_ROWS) {
            int64_t i1 = i0 + POOL_ROWS < g.Ho ? i0 + POOL_ROWS : g.Ho;
            if ((work += block_work(&g, i0, i1)) >= 1 << 16) {
                work = 0;
                if (tgl_ctx_interrupted(ctx))
                    return tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
            }
            if (x->dtype_id == TGL_FLOAT32)
                pool_plane_float(&g, max, (const float *)x->data + xo, &xs,
                                 (float *)out->data + yo, &ys, i0, i1);
            else
                pool_plane_double(&g, max, (const double *)x->data + xo, &xs,
                                  (double *)out->data + yo, &ys, i0, i1);
        }
    }
    return TGL_OK;
}

/* in[0] = x, in[1] = g (pooled) or, for the gather, h (x's shape). */
static tgl_status pool_grad_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                   tgl_array *out)
{
    const tgl_array *x = in[0], *gr = in[1];
    bool gather = n->op == TGL_OP_MAX_POOL2D_GATHER;
    pool_geom g = geom_of(n, x, gather ? out : gr);
    pool_strides xs = strides_of(x), gs = strides_of(gr), os = strides_of(out);
    int64_t work = 0;
    if (n->op == TGL_OP_MAX_POOL2D_GRAD && fast22(&g, &xs, &os)) {
        for (int64_t q = 0; q < g.planes; q++) {
            if ((work += g.H * g.W) >= 1 << 16) {
                work = 0;
                if (tgl_ctx_interrupted(ctx))
                    return tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
            }
            int64_t xo = plane_off(&g, &xs, q), go = plane_off(&g, &gs, q),
                    oo = plane_off(&g, &os, q);
            if (x->dtype_id == TGL_FLOAT32)
                max22_grad_plane_float(&g, (const float *)x->data + xo, &xs,
                                       (const float *)gr->data + go, &gs,
                                       (float *)out->data + oo, &os);
            else
                max22_grad_plane_double(&g, (const double *)x->data + xo, &xs,
                                        (const double *)gr->data + go, &gs,
                                        (double *)out->data + oo, &os);
        }
        return TGL_OK;
    }
    for (int64_t q = 0; q < g.planes; q++) {
        int64_t xo = plane_off(&g, &xs, q), go = plane_off(&g, &gs, q),
                oo = plane_off(&g, &os, q);
        /* a plane is zeroed with its first block of rows (Ho >= 1) */
        for (int64_t i0 = 0; i0 < g.Ho; i0 += POOL_ROWS) {
            int64_t i1 = i0 + POOL_ROWS < g.Ho ? i0 + POOL_ROWS : g.Ho;
            if ((work += block_work(&g, i0, i1)) >= 1 << 16) {
                work = 0;
                if (tgl_ctx_interrupted(ctx))
                    return tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
            }
            if (x->dtype_id == TGL_FLOAT32)
                grad_plane_float(&g, n->op, (const float *)x->data + xo, &xs,
                                 (const float *)gr->data + go, &gs, (float *)out->data + oo,
                                 &os, i0, i1);
            else
                grad_plane_double(&g, n->op, (const double *)x->data + xo, &xs,
                                  (const double *)gr->data + go, &gs,
                                  (double *)out->data + oo, &os, i0, i1);
        }
    }
    return TGL_OK;
}

const tgl_op_kernel tgl_cpu_kernel_pool2d = {.run = pool_kernel};
const tgl_op_kernel tgl_cpu_kernel_pool2d_grad = {.run = pool_grad_kernel};
