/*
 * conv.c — the CPU kernels of conv2d, conv2d_grad_input and
 * conv2d_grad_weight (engine/ops/conv.c has their meaning).
 *
 * Each op has two paths, giving the same values to rounding:
 *   direct  — plain loops, one output element at a time, summed in double:
 *             the reference, and the faster one on small problems;
 *   im2col  — per image and group, the patches of x are unrolled into a
 *             (Cg kH kW) x (Ho Wo) matrix (im2col) and the op becomes one
 *             matrix product through the output backend's gemm
 *             (engine/backend.h; OpenBLAS on the CPU); grad_input multiplies
 *             into that matrix and folds it back, adding overlapping
 *             patches (col2im).  A 1x1 kernel with stride 1 and no padding
 *             needs no unrolling: the image is the matrix.  On the CPU a
 *             large batch is shared out over the context's threads
 *             (engine/pool.h), each with its own scratch matrix.
 * use_gemm picks the path by the size of the per-group product (measured:
 * doc/symbolic.md, tgl.conv2d).
 *
 * Operands are read as C-order arrays of the output's dtype: inputs of
 * another layout (strided views) are copied first (tgl_array_copy, on
 * their device).  The unrolled matrix is a scratch array allocated through
 * the backend on the output's device (tgl_array_alloc_on; tgl_array_empty
 * would give host memory), because the backend's gemm takes only its own
 * memory: on sim a host buffer is refused ("not sim memory"), as a GPU's
 * BLAS would (and sim runs one task: only the CPU backend shares out).  A block allocated inside the backend's call (kernels run
 * inside it) is open to these loops for that call, so they fill and read
 * it directly.  Long loops check the interrupt flag once per image and
 * output channel (direct) or image and group (im2col).
 */
#include "cpu/kernels/kernels.h"
#include "engine/pool.h"

#include <limits.h>
#include <string.h>

/* The problem's sizes; every array C order. */
typedef struct geom {
    int64_t N, C, H, W;   /* x                          */
    int64_t O, Cg, kH, kW; /* w: (O, Cg, kH, kW)         */
    int64_t Ho, Wo;       /* the convolution's output   */
    int64_t sh, sw, ph, pw, dh, dw, G, Og;
} geom;

static geom geom_of(const tgl_node *n, const int64_t *xs, const int64_t *ws, const int64_t *ys)
{
    const int64_t *p = n->p.i;
    geom g = {xs[0], xs[1], xs[2], xs[3], ws[0], ws[1], ws[2], ws[3], ys[2], ys[3],
              p[0],  p[1],  p[2],  p[3],  p[4],  p[5],  p[6], ws[0] / p[6]};
    return g;
}

/* The im2col path once the per-group product Og x K x L has 256 or more
 * multiply-adds (and its sizes fit BLAS's int).  Measured (float32, one
 * thread, one image, per call including the call's overhead): direct is
 * faster only below that (36 multiply-adds: 1.3 us direct, 1.7 us im2col;
 * 288: 2.0 and 1.9; 1600: 6.1 and 2.0; 4096 with a 1x1 kernel: 22 and 2.4);
 * on LeNet's layers (batch 60) im2col is 7 to 10 times faster (the figures
 * are in doc/performance.md). */
static bool use_gemm(const geom *g)
{
    int64_t K = g->Cg * g->kH * g->kW, L = g->Ho * g->Wo;
    if (K > INT_MAX || L > INT_MAX || g->Og > INT_MAX || K * L > INT_MAX)
        return false;
    return g->Og * K * L >= 256;
}

/* 1x1 kernels with stride 1 and no padding read x itself as the matrix. */
static bool unrolled_is_x(const geom *g)
{
    return g->kH == 1 && g->kW == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

/* The outputs t in [*t0, *t1) of a row (or column) of Ho outputs whose
 * input index t s + off lies inside [0, n): stride s, off the tap's offset
 * (dilation times tap minus padding).  Empty when *t0 == *t1. */
static void span(int64_t off, int64_t s, int64_t n, int64_t Ho, int64_t *t0, int64_t *t1)
{
    int64_t lo, hi;
    if (s == 1) { /* no divisions: called per tap and row of the unrolled matrix */
        lo = off >= 0 ? 0 : -off;
        hi = n - off > 0 ? n - off : 0;
    } else {
        lo = off >= 0 ? 0 : (-off + s - 1) / s;
        hi = n - off > 0 ? (n - off - 1) / s + 1 : 0;
    }
    if (hi > Ho)
        hi = Ho;
    if (lo > hi)
        lo = hi;
    *t0 = lo;
    *t1 = hi;
}

/* im2col's rows are short (8 elements on LeNet's second layer): gcc
 * would turn their copy loops into memmove calls, whose calls cost more
 * than the copies (measured: 10% of a LeNet training step in
 * memmove).  Clang does not rewrite them. */
#if defined(__GNUC__) && !defined(__clang__)
#define SHORT_ROWS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define SHORT_ROWS
#endif

/* ---- the loops, per dtype ---------------------------------------------- */

#define CONV_LOOPS(T, S)                                                                       \
    /* y = conv2d(x, w), direct. */                                                            \
    static void fwd_direct_##S(const geom *g, const T *x, const T *w, T *y, int64_t n, int64_t o) \
    {                                                                                          \
        int64_t gi = o / g->Og;                                                                \
        T *yo = y + (n * g->O + o) * g->Ho * g->Wo;                                            \
        for (int64_t i = 0; i < g->Ho; i++)                                                    \
            for (int64_t j = 0; j < g->Wo; j++) {                                              \
                double s = 0;                                                                  \
                for (int64_t c = 0; c < g->Cg; c++) {                                          \
                    const T *xc = x + ((n * g->C + gi * g->Cg + c) * g->H) * g->W;             \
                    const T *wc = w + (o * g->Cg + c) * g->kH * g->kW;                         \
                    for (int64_t a = 0; a < g->kH; a++) {                                      \
                        int64_t ih = i * g->sh - g->ph + a * g->dh;                            \
                        if (ih < 0 || ih >= g->H)                                              \
                            continue;                                                          \
                        for (int64_t b = 0; b < g->kW; b++) {                                  \
                            int64_t iw = j * g->sw - g->pw + b * g->dw;                        \
                            if (iw >= 0 && iw < g->W)                                          \
                                s += (double)xc[ih * g->W + iw] * (double)wc[a * g->kW + b];   \
                        }                                                                      \
                    }                                                                          \
                }                                                                              \
                yo[i * g->Wo + j] = (T)s;                                                      \
            }                                                                                  \
    }                                                                                          \
    /* gx = conv2d_grad_input(gy, w), direct: each input element gathers the                  \
     * output elements whose patches cover it. */                                              \
    static void gin_direct_##S(const geom *g, const T *gy, const T *w, T *gx, int64_t n,      \
                               int64_t ci)                                                     \
    {                                                                                          \
        int64_t gi = ci / g->Cg, c = ci % g->Cg;                                               \
        T *gxc = gx + (n * g->C + ci) * g->H * g->W;                                           \
        for (int64_t ih = 0; ih < g->H; ih++)                                                  \
            for (int64_t iw = 0; iw < g->W; iw++) {                                            \
                double s = 0;                                                                  \
                for (int64_t a = 0; a < g->kH; a++) {                                          \
                    int64_t th = ih + g->ph - a * g->dh;                                       \
                    if (th < 0 || th % g->sh != 0 || th / g->sh >= g->Ho)                      \
                        continue;                                                              \
                    for (int64_t b = 0; b < g->kW; b++) {                                      \
                        int64_t tw = iw + g->pw - b * g->dw;                                   \
                        if (tw < 0 || tw % g->sw != 0 || tw / g->sw >= g->Wo)                  \
                            continue;                                                          \
                        int64_t oh = th / g->sh, ow = tw / g->sw;                              \
                        for (int64_t o = gi * g->Og; o < (gi + 1) * g->Og; o++)                \
                            s += (double)gy[((n * g->O + o) * g->Ho + oh) * g->Wo + ow] *      \
                                 (double)w[((o * g->Cg + c) * g->kH + a) * g->kW + b];         \
                    }                                                                          \
                }                                                                              \
                gxc[ih * g->W + iw] = (T)s;                                                    \
            }                                                                                  \
    }                                                                                          \
    /* gw = conv2d_grad_weight(x, gy), direct, for output channel o. */                        \
    static void gw_direct_##S(const geom *g, const T *x, const T *gy, T *gw, int64_t o)       \
    {                                                                                          \
        int64_t gi = o / g->Og;                                                                \
        for (int64_t c = 0; c < g->Cg; c++)                                                    \
            for (int64_t a = 0; a < g->kH; a++)                                                \
                for (int64_t b = 0; b < g->kW; b++) {                                          \
                    double s = 0;                                                              \
                    for (int64_t n = 0; n < g->N; n++) {                                       \
                        const T *xc = x + (n * g->C + gi * g->Cg + c) * g->H * g->W;           \
                        const T *go = gy + (n * g->O + o) * g->Ho * g->Wo;                     \
                        for (int64_t i = 0; i < g->Ho; i++) {                                  \
                            int64_t ih = i * g->sh - g->ph + a * g->dh;                        \
                            if (ih < 0 || ih >= g->H)                                          \
                                continue;                                                      \
                            for (int64_t j = 0; j < g->Wo; j++) {                              \
                                int64_t iw = j * g->sw - g->pw + b * g->dw;                    \
                                if (iw >= 0 && iw < g->W)                                      \
                                    s += (double)xc[ih * g->W + iw] * (double)go[i * g->Wo + j]; \
                            }                                                                  \
                        }                                                                      \
                    }                                                                          \
                    gw[((o * g->Cg + c) * g->kH + a) * g->kW + b] = (T)s;                      \
                }                                                                              \
    }                                                                                          \
    /* col[(c kH + a) kW + b, i Wo + j] = the group's channel c at patch (i, j)'s              \
     * tap (a, b), 0 outside the image; xg is the group's first channel.  The                  \
     * patches inside the image are found per tap (span), so the rows are                      \
     * plain copies with zero-filled ends. */                                                  \
    SHORT_ROWS static void im2col_##S(const geom *g, const T *restrict xg,                     \
                                      T *restrict col)                                         \
    {                                                                                          \
        int64_t L = g->Ho * g->Wo;                                                             \
        for (int64_t c = 0; c < g->Cg; c++)                                                    \
            for (int64_t a = 0; a < g->kH; a++) {                                              \
                int64_t i0, i1;                                                                \
                span(a * g->dh - g->ph, g->sh, g->H, g->Ho, &i0, &i1);                         \
                for (int64_t b = 0; b < g->kW; b++) {                                          \
                    T *row = col + ((c * g->kH + a) * g->kW + b) * L;                          \
                    int64_t off = b * g->dw - g->pw, j0, j1;                                   \
                    span(off, g->sw, g->W, g->Wo, &j0, &j1);                                   \
                    if (i0 > 0)                                                                \
                        memset(row, 0, (size_t)(i0 * g->Wo) * sizeof(T));                      \
                    if (i1 < g->Ho)                                                            \
                        memset(row + i1 * g->Wo, 0, (size_t)((g->Ho - i1) * g->Wo) * sizeof(T)); \
                    for (int64_t i = i0; i < i1; i++) {                                        \
                        T *r = row + i * g->Wo;                                                \
                        const T *xr = xg + (c * g->H + i * g->sh + a * g->dh - g->ph) * g->W;  \
                        if (j0 > 0)                                                            \
                            memset(r, 0, (size_t)j0 * sizeof(T));                              \
                        if (g->sw == 1) /* short rows: a loop beats memcpy's call */           \
                            for (int64_t j = j0; j < j1; j++)                                  \
                                r[j] = xr[j + off];                                            \
                        else                                                                   \
                            for (int64_t j = j0; j < j1; j++)                                  \
                                r[j] = xr[j * g->sw + off];                                    \
                        if (j1 < g->Wo)                                                        \
                            memset(r + j1, 0, (size_t)(g->Wo - j1) * sizeof(T));               \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
    }                                                                                          \
    /* The adjoint of im2col: each entry of col added to its image element. */                \
    static void col2im_##S(const geom *g, const T *restrict col, T *restrict xg)               \
    {                                                                                          \
        int64_t L = g->Ho * g->Wo;                                                             \
        for (int64_t c = 0; c < g->Cg; c++)                                                    \
            for (int64_t a = 0; a < g->kH; a++) {                                              \
                int64_t i0, i1;                                                                \
                span(a * g->dh - g->ph, g->sh, g->H, g->Ho, &i0, &i1);                         \
                for (int64_t b = 0; b < g->kW; b++) {                                          \
                    const T *row = col + ((c * g->kH + a) * g->kW + b) * L;                    \
                    int64_t off = b * g->dw - g->pw, j0, j1;                                   \
                    span(off, g->sw, g->W, g->Wo, &j0, &j1);                                   \
                    for (int64_t i = i0; i < i1; i++) {                                        \
                        const T *r = row + i * g->Wo;                                          \
                        T *xr = xg + (c * g->H + i * g->sh + a * g->dh - g->ph) * g->W;        \
                        if (g->sw == 1)                                                        \
                            for (int64_t j = j0; j < j1; j++)                                  \
                                xr[j + off] += r[j];                                           \
                        else                                                                   \
                            for (int64_t j = j0; j < j1; j++)                                  \
                                xr[j * g->sw + off] += r[j];                                   \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
    }

CONV_LOOPS(float, f32)
CONV_LOOPS(double, f64)

/* ---- dispatch ------------------------------------------------------------ */

enum { K_FWD, K_GIN, K_GW };

/* The operands, C order in the output's dtype: a itself, or a copy in *tmp
 * for the caller to release. */
static tgl_status dense(tgl_ctx *ctx, tgl_array *a, int dt, tgl_array **use, tgl_array **tmp)
{
    *tmp = NULL;
    *use = a;
    if (a->dtype_id == dt && tgl_array_is_contiguous(a))
        return TGL_OK;
    tgl_status st = tgl_array_copy(ctx, a, dt, tmp);
    *use = *tmp;
    return st;
}

/* ---- the im2col path -----------------------------------------------------
 * One product per image and group.  The batch is shared out over the
 * context's threads (the CPU backend only; its BLAS runs one thread per
 * call), each task a contiguous range of images with its own scratch
 * matrix; gw is summed per task and the partial sums added at the end.
 * (Unrolling several images side by side into one wider product was
 * measured too, on LeNet's layers and two small ones: never faster with
 * OpenBLAS here, up to twice slower on the first layer — the wider matrix
 * leaves the L1/L2 cache between im2col and the product — so each image's
 * matrix is made just before its product reads it.) */
#define MAX_TASKS 64
/* When tasks run in parallel, the per-image products are below this many
 * multiply-adds: under the CPU backend's own split (2^22), so that a
 * task's product runs on the task's thread instead of waking more. */
#define TASK_MACS (1 << 22)
/* Threads are woken for a batch of at least this many multiply-adds (tens
 * of microseconds of work; waking them costs about 10 us). */
#define TASK_MIN (1 << 20)

typedef struct conv_task_out {
    tgl_status st;
    tgl_errbuf e;
} conv_task_out;

typedef struct conv_job {
    tgl_ctx *ctx;
    const tgl_backend *be;
    const geom *g;
    int kind, dt;
    size_t es;
    bool direct_x;          /* a 1x1 forward or gw: x is the matrix                  */
    const char *A, *B;      /* the dense operands                                    */
    char *Y;                /* the output                                            */
    int64_t K, L;           /* the unrolled matrix: K x L per image and group        */
    int ntasks;
    int64_t per_task;       /* scratch elements per task: col, then gw's partial     */
    int64_t gw_at;          /* offset of the gw partial in a task's part             */
    char *scratch;
    conv_task_out *res;
} conv_job;

/* Tasks and scratch layout for `threads` threads. */
static void plan(conv_job *j, int threads)
{
    const geom *g = j->g;
    int64_t T = threads < 1 ? 1 : threads > MAX_TASKS ? MAX_TASKS : threads;
    if (T > g->N)
        T = g->N;
    int64_t per_image = g->G * g->Og * j->K * j->L;
    if (g->Og * j->K * j->L >= TASK_MACS || per_image * g->N < TASK_MIN)
        T = 1; /* products the backend splits itself; work too small to wake threads for */
    j->ntasks = (int)T;
    j->gw_at = j->direct_x ? 0 : j->K * j->L;
    j->per_task = j->gw_at + (j->kind == K_GW && T > 1 ? g->O * j->K : 0);
}

static void add_f32(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

static void add_f64(double *y, const double *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

/* Task t: images [N t / T, N (t + 1) / T). */
static void conv_task(void *arg, int t)
{
    conv_job *j = arg;
    const geom *g = j->g;
    conv_task_out *res = &j->res[t];
    size_t es = j->es;
    bool f32 = j->dt == TGL_FLOAT32;
    int64_t K = j->K, L = j->L;
    int64_t i_lo = g->N * t / j->ntasks, i_hi = g->N * (t + 1) / j->ntasks;
    char *part = j->scratch ? j->scratch + (size_t)(t * j->per_task) * es : NULL;
    char *col = part;
    /* gw: task 0 sums into the output, the others into their partials. */
    char *gw = j->kind == K_GW && t > 0 ? part + (size_t)j->gw_at * es : j->Y;
    for (int64_t i = i_lo; i < i_hi; i++)
        for (int64_t gi = 0; gi < g->G; gi++) {
            if (tgl_ctx_interrupted(j->ctx)) {
                res->st = TGL_EINTERRUPT;
                return;
            }
            /* Element offsets of image i's group gi in x (or gx), in gy,
             * and of group gi's rows in w (or gw). */
            int64_t ox = (i * g->C + gi * g->Cg) * g->H * g->W, oy = (i * g->O + gi * g->Og) * L,
                    ow = gi * g->Og * K;
            const char *m = col;
            if (j->kind != K_GIN && j->direct_x)
                m = j->A + ox * (int64_t)es;
            else if (j->kind != K_GIN && f32)
                im2col_f32(g, (const float *)j->A + ox, (float *)col);
            else if (j->kind != K_GIN)
                im2col_f64(g, (const double *)j->A + ox, (double *)col);
            tgl_status st;
            switch (j->kind) {
            case K_FWD: /* y_ig (Og x L) = w_g (Og x K) . col (K x L) */
                st = j->be->gemm(j->dt, false, false, (int)g->Og, (int)L, (int)K, 1.0,
                                 j->B + ow * (int64_t)es, (int)K, m, (int)L, 0.0,
                                 j->Y + oy * (int64_t)es, (int)L, &res->e);
                break;
            case K_GW: /* gw_g (Og x K) (+)= gy_ig (Og x L) . col^T (L x K) */
                st = j->be->gemm(j->dt, false, true, (int)g->Og, (int)K, (int)L, 1.0,
                                 j->B + oy * (int64_t)es, (int)L, m, (int)L,
                                 i == i_lo ? 0.0 : 1.0, gw + ow * (int64_t)es, (int)K, &res->e);
                break;
            default: { /* col (K x L) = w_g^T (K x Og) . gy_ig (Og x L), folded into gx */
                char *gx = j->Y + ox * (int64_t)es;
                st = j->be->gemm(j->dt, true, false, (int)K, (int)L, (int)g->Og, 1.0,
                                 j->B + ow * (int64_t)es, (int)K, j->A + oy * (int64_t)es, (int)L,
                                 0.0, col, (int)L, &res->e);
                if (!st)
                    memset(gx, 0, (size_t)(g->Cg * g->H * g->W) * es);
                if (!st && f32)
                    col2im_f32(g, (const float *)col, (float *)gx);
                else if (!st)
                    col2im_f64(g, (const double *)col, (double *)gx);
                break;
            }
            }
            if (st) {
                res->st = st;
                return;
            }
        }
}

#define INTERRUPTED() tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted")

static tgl_status conv_run(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, tgl_array *out,
                           int kind)
{
    int dt = out->dtype_id;
    if (out->size == 0)
        return TGL_OK;
    /* The geometry from x's, w's and the convolution output's shapes. */
    const tgl_array *xa = kind == K_FWD ? in[0] : kind == K_GIN ? in[2] : in[0];
    const tgl_array *wa = kind == K_FWD ? in[1] : kind == K_GIN ? in[1] : in[2];
    const tgl_array *ya = kind == K_FWD ? out : kind == K_GIN ? in[0] : in[1];
    geom g = geom_of(n, xa->shape, wa->shape, ya->shape);
    /* The two data operands, dense: (x, w), (gy, w) or (x, gy). */
    /* The copies and the scratch matrix, released at the end. */
    tgl_array *a, *b, *tmp[3] = {NULL, NULL, NULL}, *col = NULL;
    tgl_status st;
    if ((st = dense(ctx, in[0], dt, &a, &tmp[0])) || (st = dense(ctx, in[1], dt, &b, &tmp[1])))
        goto done;
    bool f32 = dt == TGL_FLOAT32;
    size_t es = tgl_dtype_size(dt);
    if (!use_gemm(&g)) {
        int64_t outer = kind == K_FWD ? g.N * g.O : kind == K_GIN ? g.N * g.C : g.O;
        for (int64_t r = 0; r < outer; r++) {
            if (tgl_ctx_interrupted(ctx)) {
                st = INTERRUPTED();
                goto done;
            }
            int64_t n0 = kind == K_GW ? 0 : r / (kind == K_FWD ? g.O : g.C);
            int64_t c0 = kind == K_GW ? r : r % (kind == K_FWD ? g.O : g.C);
            switch (kind * 2 + !f32) {
            case K_FWD * 2: fwd_direct_f32(&g, a->data, b->data, out->data, n0, c0); break;
            case K_FWD * 2 + 1: fwd_direct_f64(&g, a->data, b->data, out->data, n0, c0); break;
            case K_GIN * 2: gin_direct_f32(&g, a->data, b->data, out->data, n0, c0); break;
            case K_GIN * 2 + 1: gin_direct_f64(&g, a->data, b->data, out->data, n0, c0); break;
            case K_GW * 2: gw_direct_f32(&g, a->data, b->data, out->data, c0); break;
            default: gw_direct_f64(&g, a->data, b->data, out->data, c0); break;
            }
        }
        goto done;
    }
    const tgl_backend *be;
    if ((st = tgl_backend_check(ctx, tgl_op_name(n->op), out, &be)))
        goto done;
    if (g.N == 0) { /* an empty batch: gw's sum is empty */
        memset(out->data, 0, (size_t)out->size * es);
        goto done;
    }
    conv_job j = {.ctx = ctx, .be = be, .g = &g, .kind = kind, .dt = dt, .es = es,
                  .direct_x = unrolled_is_x(&g) && kind != K_GIN, .A = a->data, .B = b->data,
                  .Y = out->data, .K = g.Cg * g.kH * g.kW, .L = g.Ho * g.Wo};
    plan(&j, strcmp(be->name, "cpu") == 0 ? tgl_pool_threads(ctx) : 1);
    if (j.per_task > 0) {
        int64_t cs[1] = {j.per_task * j.ntasks};
        if ((st = tgl_array_alloc_on(ctx, tgl_op_name(n->op), out->device, dt, 1, cs, false,
                                     &col)))
            goto done;
        tmp[2] = col;
        j.scratch = col->data;
    }
    conv_task_out res[MAX_TASKS]; /* only the tasks' entries set: 1 KiB each */
    for (int t = 0; t < j.ntasks; t++)
        res[t].st = TGL_OK, res[t].e.msg[0] = '\0';
    j.res = res;
    if (j.ntasks == 1)
        conv_task(&j, 0);
    else
        tgl_pool_run(ctx, j.ntasks, conv_task, &j);
    for (int t = 0; t < j.ntasks && !st; t++) {
        if (res[t].st == TGL_EINTERRUPT)
            st = INTERRUPTED();
        else if (res[t].st)
            st = tgl_op_error(ctx, n, in, res[t].st, "%s", res[t].e.msg);
    }
    /* gw: the other tasks' partial sums added into task 0's. */
    if (!st && kind == K_GW)
        for (int t = 1; t < j.ntasks; t++) {
            const char *p = j.scratch + (size_t)(t * j.per_task + j.gw_at) * es;
            if (f32)
                add_f32((float *)out->data, (const float *)p, out->size);
            else
                add_f64((double *)out->data, (const double *)p, out->size);
        }
done:
    for (int i = 0; i < 3; i++)
        tgl_array_release(tmp[i]);
    return st;
}

static tgl_status conv2d_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                tgl_array *out)
{
    return conv_run(ctx, n, in, out, K_FWD);
}

static tgl_status grad_input_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                    tgl_array *out)
{
    return conv_run(ctx, n, in, out, K_GIN);
}

static tgl_status grad_weight_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                     tgl_array *out)
{
    return conv_run(ctx, n, in, out, K_GW);
}

const tgl_op_kernel tgl_cpu_kernel_conv2d = {.run = conv2d_kernel};
const tgl_op_kernel tgl_cpu_kernel_conv2d_grad_input = {.run = grad_input_kernel};
const tgl_op_kernel tgl_cpu_kernel_conv2d_grad_weight = {.run = grad_weight_kernel};
