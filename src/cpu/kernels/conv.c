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
 *             needs no unrolling: the image is the matrix.
 * use_gemm picks the path by the size of the per-group product (measured:
 * doc/symbolic.md, tgl.conv2d).
 *
 * Operands are read as C-order arrays of the output's dtype: inputs of
 * another layout (strided views) are copied first (tgl_array_copy, on
 * their device).  The unrolled matrix is a scratch array allocated through
 * the backend on the output's device (tgl_array_alloc_on; tgl_array_empty
 * would give host memory), because the backend's gemm takes only its own
 * memory: on sim a host buffer is refused ("not sim memory"), as a GPU's
 * BLAS would.  A block allocated inside the backend's call (kernels run
 * inside it) is open to these loops for that call, so they fill and read
 * it directly.  Long loops check the interrupt flag once per image and
 * output channel (direct) or image and group (im2col).
 */
#include "cpu/kernels/kernels.h"

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
     * tap (a, b), 0 outside the image; xg is the group's first channel. */                   \
    static void im2col_##S(const geom *g, const T *xg, T *col)                                 \
    {                                                                                          \
        int64_t L = g->Ho * g->Wo;                                                             \
        for (int64_t c = 0; c < g->Cg; c++)                                                    \
            for (int64_t a = 0; a < g->kH; a++)                                                \
                for (int64_t b = 0; b < g->kW; b++) {                                          \
                    T *row = col + ((c * g->kH + a) * g->kW + b) * L;                          \
                    const T *xc = xg + c * g->H * g->W;                                        \
                    for (int64_t i = 0; i < g->Ho; i++) {                                      \
                        int64_t ih = i * g->sh - g->ph + a * g->dh;                            \
                        T *r = row + i * g->Wo;                                                \
                        if (ih < 0 || ih >= g->H) {                                            \
                            memset(r, 0, (size_t)g->Wo * sizeof(T));                           \
                            continue;                                                          \
                        }                                                                      \
                        for (int64_t j = 0; j < g->Wo; j++) {                                  \
                            int64_t iw = j * g->sw - g->pw + b * g->dw;                        \
                            r[j] = iw >= 0 && iw < g->W ? xc[ih * g->W + iw] : (T)0;           \
                        }                                                                      \
                    }                                                                          \
                }                                                                              \
    }                                                                                          \
    /* The adjoint of im2col: each entry of col added to its image element. */                \
    static void col2im_##S(const geom *g, const T *col, T *xg)                                 \
    {                                                                                          \
        int64_t L = g->Ho * g->Wo;                                                             \
        for (int64_t c = 0; c < g->Cg; c++)                                                    \
            for (int64_t a = 0; a < g->kH; a++)                                                \
                for (int64_t b = 0; b < g->kW; b++) {                                          \
                    const T *row = col + ((c * g->kH + a) * g->kW + b) * L;                    \
                    T *xc = xg + c * g->H * g->W;                                              \
                    for (int64_t i = 0; i < g->Ho; i++) {                                      \
                        int64_t ih = i * g->sh - g->ph + a * g->dh;                            \
                        if (ih < 0 || ih >= g->H)                                              \
                            continue;                                                          \
                        for (int64_t j = 0; j < g->Wo; j++) {                                  \
                            int64_t iw = j * g->sw - g->pw + b * g->dw;                        \
                            if (iw >= 0 && iw < g->W)                                          \
                                xc[ih * g->W + iw] += row[i * g->Wo + j];                      \
                        }                                                                      \
                    }                                                                          \
                }                                                                              \
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
    int64_t K = g.Cg * g.kH * g.kW, L = g.Ho * g.Wo;
    bool direct_x = unrolled_is_x(&g) && kind != K_GIN;
    if (!direct_x) {
        int64_t cs[2] = {K, L};
        if ((st = tgl_array_alloc_on(ctx, tgl_op_name(n->op), out->device, dt, 2, cs, false,
                                     &col)))
            goto done;
        tmp[2] = col;
    }
    /* col2im adds into gx; an empty batch leaves gw's sum empty. */
    if (kind == K_GIN || g.N == 0)
        memset(out->data, 0, (size_t)out->size * es);
    char *A = a->data, *B = b->data, *Y = out->data, *Cl = col ? col->data : NULL;
    for (int64_t i = 0; i < g.N; i++)
        for (int64_t gi = 0; gi < g.G; gi++) {
            if (tgl_ctx_interrupted(ctx)) {
                st = INTERRUPTED();
                goto done;
            }
            /* Element offsets of image i's group gi in x (or gx), in gy,
             * and of group gi's rows in w (or gw). */
            int64_t ox = (i * g.C + gi * g.Cg) * g.H * g.W, oy = (i * g.O + gi * g.Og) * L,
                    ow = gi * g.Og * K;
            tgl_errbuf e;
            const void *m = Cl;
            if (kind != K_GIN && direct_x)
                m = A + ox * (int64_t)es;
            else if (kind != K_GIN && f32)
                im2col_f32(&g, (const float *)A + ox, (float *)Cl);
            else if (kind != K_GIN)
                im2col_f64(&g, (const double *)A + ox, (double *)Cl);
            switch (kind) {
            case K_FWD: /* y_ig (Og x L) = w_g (Og x K) . col (K x L) */
                st = be->gemm(dt, false, false, (int)g.Og, (int)L, (int)K, 1.0, B + ow * (int64_t)es,
                              (int)K, m, (int)L, 0.0, Y + oy * (int64_t)es, (int)L, &e);
                break;
            case K_GW: /* gw_g (Og x K) (+)= gy_ig (Og x L) . col^T (L x K) */
                st = be->gemm(dt, false, true, (int)g.Og, (int)K, (int)L, 1.0, B + oy * (int64_t)es,
                              (int)L, m, (int)L, i == 0 ? 0.0 : 1.0, Y + ow * (int64_t)es, (int)K,
                              &e);
                break;
            default: /* col (K x L) = w_g^T (K x Og) . gy_ig (Og x L), folded into gx */
                st = be->gemm(dt, true, false, (int)K, (int)L, (int)g.Og, 1.0, B + ow * (int64_t)es,
                              (int)K, A + oy * (int64_t)es, (int)L, 0.0, Cl, (int)L, &e);
                if (!st && f32)
                    col2im_f32(&g, (const float *)Cl, (float *)Y + ox);
                else if (!st)
                    col2im_f64(&g, (const double *)Cl, (double *)Y + ox);
                break;
            }
            if (st) {
                st = tgl_op_error(ctx, n, in, st, "%s", e.msg);
                goto done;
            }
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
