/*
 * k_conv.c — the CUDA op kernels of the conv family: conv2d,
 * conv2d_grad_input, conv2d_grad_weight (im2col / col2im + cuBLAS) and
 * pool2d, pool2d_grad (max, avg, and max pool's gather).  Meanings:
 * engine/ops/conv.c and engine/ops/pool.c; the CPU reference:
 * src/cpu/kernels/conv.c and pool.c; the device code: kernels/conv.cu.
 *
 * Convolution, per chunk of nb images (nb chosen so the unrolled matrix
 * stays under SCRATCH_BUDGET, at least one image):
 *   conv2d       im2col into col (nb, G, K, L), then y[n, g] (Og x L) =
 *                w_g (Og x K) . col[n, g] (K x L) for every image and group,
 *                batched over the images (w shared: stride 0) per group, or
 *                over the groups per image when there are more groups than
 *                images (depthwise).  A 1x1 kernel with stride 1 and no
 *                padding reads x itself as col.
 *   grad_input   col[n, g] (K x L) = w_g^T . dy[n, g], batched the same way,
 *                then col2im as a gather into gx (each element sums its own
 *                entries: deterministic, no atomics).  1x1/stride 1/no
 *                padding: the products write gx directly.
 *   grad_weight  im2col into col (G, K, nb, L) and dy copied to (O, nb, L),
 *                so each group is ONE product over the whole chunk, every
 *                group in one batched call: gw_g (Og x K) (+)= dy_g (Og x
 *                nb L) . col_g^T, the chunks summed by beta = 1.
 * Products through the driver's gemm (cuBLAS on the device; TF32 for
 * float32 when tgl_cuda_allow_tf32()).  x may have any strides (im2col
 * reads them); w and dy, the products' operands, are copied contiguous
 * when they are not (conv.cu's copy4).  Scratch blocks are freed right
 * after the launches that read them (stream-ordered reuse: cuda_int.h).
 *
 * Pooling reads strided inputs directly, one thread per output element;
 * the pullbacks gather per input element over the windows covering it in
 * the CPU's window order, so sums round as the CPU's do.  max_pool2d_grad
 * first stores each window's argmax (the CPU's tie and NaN rules), then
 * gathers.
 */
#include "cuda/cuda_int.h"
#include "engine/ops/ops.h"

#include <stdint.h>

#include "cuda/kernels/conv.cuh"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>

/* The most bytes of im2col scratch one call holds at a time (a build
 * option only so tests can force small chunks). */
#ifdef TGL_CUDA_CONV_SCRATCH_BUDGET
#define SCRATCH_BUDGET ((int64_t)(TGL_CUDA_CONV_SCRATCH_BUDGET))
#else
#define SCRATCH_BUDGET ((int64_t)256 << 20)
#endif

typedef struct kctx {
    tgl_ctx *ctx;
    const tgl_node *n;
    tgl_array *const *in;
    const tgl_backend_opts *o;
    bool f64;
    size_t es;
} kctx;

static tgl_status fail(const kctx *k, tgl_status st, const tgl_errbuf *e)
{
    return tgl_op_error(k->ctx, k->n, k->in, st, "%s", e->msg);
}

/* Launches conv.cu's `base`_f32 / _f64 over `items` independent items. */
static tgl_status launch(const kctx *k, const char *base, int64_t items, const void *args)
{
    if (items <= 0)
        return TGL_OK;
    char sym[64];
    snprintf(sym, sizeof sym, "%s_%s", base, k->f64 ? "f64" : "f32");
    unsigned grid, block;
    tgl_cuda_geometry(items, &grid, &block);
    tgl_errbuf e;
    tgl_status st = tgl_cuda_lib_launch(k->o, "conv", sym, grid, block, 0, args, &e);
    return st ? fail(k, st, &e) : TGL_OK;
}

static tgl_status scratch(const kctx *k, int64_t elems, void **p, const char *what)
{
    *p = tgl_cuda_alloc((size_t)(elems > 0 ? elems : 1) * k->es);
    if (!*p)
        return tgl_op_error(k->ctx, k->n, k->in, TGL_ENOMEM,
                            "cuda: out of device memory for the %s (%" PRId64 " bytes)", what,
                            elems * (int64_t)k->es);
    return TGL_OK;
}

static tgl_status zero(const kctx *k, tgl_array *out)
{
    if (out->size == 0)
        return TGL_OK;
    tgl_errbuf e;
    tgl_status st = tgl_cuda_drv()->memset(out->data, 0, (size_t)out->size * k->es, &e);
    return st ? fail(k, st, &e) : TGL_OK;
}

/* a's elements (a 4-d device array) in C order: a->data itself when a is
 * contiguous, else a copy in *owned (the caller frees it). */
static tgl_status dense(const kctx *k, const tgl_array *a, const char **p, void **owned)
{
    *owned = NULL;
    *p = a->data;
    if (tgl_array_is_contiguous(a) || a->size == 0)
        return TGL_OK;
    tgl_status st = scratch(k, a->size, owned, "contiguous copy of an input");
    if (st)
        return st;
    tgl_conv_copy4_args c = {.src = a->data, .dst = *owned, .d0 = a->shape[0],
                             .d1 = a->shape[1], .d2 = a->shape[2], .d3 = a->shape[3],
                             .s0 = a->strides[0], .s1 = a->strides[1], .s2 = a->strides[2],
                             .s3 = a->strides[3], .idx32 = a->size <= INT32_MAX};
    *p = *owned;
    return launch(k, "conv_copy4", a->size, &c);
}

static tgl_status gemm(const kctx *k, bool ta, bool tb, int64_t m, int64_t nn, int64_t kk,
                       const char *a, int64_t lda, int64_t sa, const char *b, int64_t ldb,
                       int64_t sb, double beta, char *c, int64_t ldc, int64_t sc, int64_t count)
{
    const tgl_cuda_driver *d = tgl_cuda_drv();
    int dt = k->f64 ? TGL_FLOAT64 : TGL_FLOAT32;
    bool tf32 = !k->f64 && tgl_cuda_allow_tf32();
    tgl_errbuf e;
    tgl_status st;
    if (count == 1)
        st = d->gemm(dt, ta, tb, (int)m, (int)nn, (int)kk, 1.0, a, (int)lda, b, (int)ldb, beta, c,
                     (int)ldc, tf32, &e);
    else
        st = d->gemm_batched(dt, ta, tb, (int)m, (int)nn, (int)kk, 1.0, a, (int)lda, sa, b,
                             (int)ldb, sb, beta, c, (int)ldc, sc, (int)count, tf32, &e);
    return st ? fail(k, st, &e) : TGL_OK;
}

/* One product per (group, image) of a G x nimg grid, operand X of
 * (group gi, image n) at X + gi * xg + n * xn elements: batched over the
 * longer side of the grid, looped over the shorter (per group over the
 * images for ordinary convolutions, per image over the groups for
 * depthwise ones), so the launches stay few either way. */
typedef struct operand {
    const char *p;
    int64_t ld, g, n; /* leading dimension; element strides per group, per image */
} operand;

static tgl_status grid_gemm(const kctx *k, bool ta, bool tb, int64_t m, int64_t nn, int64_t kk,
                            operand a, operand b, char *c, int64_t ldc, int64_t cg, int64_t cn,
                            int64_t G, int64_t nimg)
{
    size_t es = k->es;
    tgl_status st = TGL_OK;
    bool by_group = G <= nimg; /* loop over groups, batch the images */
    int64_t outer = by_group ? G : nimg, count = by_group ? nimg : G;
    for (int64_t i = 0; i < outer && !st; i++) {
        int64_t oa = by_group ? a.g : a.n, ob = by_group ? b.g : b.n, oc = by_group ? cg : cn;
        int64_t sa = by_group ? a.n : a.g, sb = by_group ? b.n : b.g, sc = by_group ? cn : cg;
        st = gemm(k, ta, tb, m, nn, kk, a.p + i * oa * (int64_t)es, a.ld, sa,
                  b.p + i * ob * (int64_t)es, b.ld, sb, 0.0, c + i * oc * (int64_t)es, ldc, sc,
                  count);
    }
    return st;
}

enum { K_FWD, K_GIN, K_GW };

static tgl_status conv_run(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, tgl_array *out,
                           int kind)
{
    int dt = out->dtype_id;
    kctx k = {ctx, n, in, tgl_cuda_opts(ctx), dt == TGL_FLOAT64, tgl_dtype_size(dt)};
    if (out->size == 0)
        return TGL_OK;
    if (!tgl_array_is_contiguous(out))
        return tgl_op_error(ctx, n, in, TGL_EINTERNAL, "cuda: the output is not contiguous");
    /* x, w and the convolution's output, by role. */
    const tgl_array *xa = kind == K_FWD ? in[0] : kind == K_GIN ? in[2] : in[0];
    const tgl_array *wa = kind == K_FWD ? in[1] : kind == K_GIN ? in[1] : in[2];
    const tgl_array *ya = kind == K_FWD ? out : kind == K_GIN ? in[0] : in[1];
    const int64_t *p = n->p.i;
    int64_t G = p[6];
    tgl_conv_geom g = {.C = xa->shape[1], .H = xa->shape[2], .W = xa->shape[3],
                       .O = wa->shape[0], .Cg = wa->shape[1], .Og = wa->shape[0] / G,
                       .kH = wa->shape[2], .kW = wa->shape[3], .Ho = ya->shape[2],
                       .Wo = ya->shape[3], .sh = p[0], .sw = p[1], .ph = p[2], .pw = p[3],
                       .dh = p[4], .dw = p[5]};
    int64_t N = xa->shape[0], K = g.Cg * g.kH * g.kW, L = g.Ho * g.Wo;
    if (N == 0 || K == 0 || g.Og == 0) /* empty sums */
        return zero(&k, out);
    if (K > INT_MAX || L > INT_MAX || g.Og > INT_MAX || K * L > INT_MAX)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "cuda: the unrolled matrix (%" PRId64 " x %" PRId64
                            ") is too large for cuBLAS's int sizes", K, L);
    bool one = g.kH == 1 && g.kW == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
    const char *x = xa->data, *A = NULL, *B = NULL;
    void *ownA = NULL, *ownB = NULL, *col = NULL, *gyt = NULL;
    char *y = out->data;
    size_t es = k.es;
    tgl_status st = TGL_OK;
    /* The operands the products read contiguous: w (fwd, gin) and dy (gin). */
    if (kind == K_FWD)
        st = dense(&k, in[1], &B, &ownB);
    else if (kind == K_GIN && !(st = dense(&k, in[0], &A, &ownA)))
        st = dense(&k, in[1], &B, &ownB);
    if (st)
        goto done;
    if (kind == K_FWD && one && tgl_array_is_contiguous(xa)) {
        /* x[n, g] is the (Cg x L) matrix: no unrolling. */
        st = grid_gemm(&k, false, false, g.Og, L, K, (operand){B, K, g.Og * K, 0},
                       (operand){x, L, g.Cg * L, g.C * L}, y, L, g.Og * L, g.O * L, G, N);
        goto done;
    }
    if (kind == K_GIN && one) { /* the product writes gx[n, g] (Cg x L) itself */
        st = grid_gemm(&k, true, false, K, L, g.Og, (operand){B, K, g.Og * K, 0},
                       (operand){A, L, g.Og * L, g.O * L}, y, L, g.Cg * L, g.C * L, G, N);
        goto done;
    }
    int64_t per_image = G * K * L + (kind == K_GW ? g.O * L : 0);
    int64_t nb = SCRATCH_BUDGET / (per_image * (int64_t)es);
    nb = nb < 1 ? 1 : nb > N ? N : nb;
    if (kind == K_GW && nb * L > INT_MAX)
        nb = INT_MAX / L;
    if ((st = scratch(&k, G * K * L * nb, &col, "im2col matrix")))
        goto done;
    if (kind == K_GW && (st = scratch(&k, g.O * L * nb, &gyt, "output gradient's (O, N, L) copy")))
        goto done;
    for (int64_t n0 = 0; n0 < N && !st; n0 += nb) {
        int64_t c = N - n0 < nb ? N - n0 : nb; /* images in this chunk */
        if (kind != K_GIN) {
            tgl_conv_im2col_args ia = {.g = g, .x = x, .xsn = xa->strides[0],
                                       .xsc = xa->strides[1], .xsh = xa->strides[2],
                                       .xsw = xa->strides[3], .col = col, .n0 = n0, .nb = c,
                                       .G = G, .idx32 = c * G * K * L <= INT32_MAX};
            if (kind == K_FWD)
                ia.sG = K * L, ia.sK = L, ia.sN = G * K * L;
            else
                ia.sG = K * c * L, ia.sK = c * L, ia.sN = L;
            if ((st = launch(&k, "conv_im2col", c * G * K * L, &ia)))
                break;
        }
        switch (kind) {
        case K_FWD:
            st = grid_gemm(&k, false, false, g.Og, L, K, (operand){B, K, g.Og * K, 0},
                           (operand){col, L, K * L, G * K * L}, y + n0 * g.O * L * es, L,
                           g.Og * L, g.O * L, G, c);
            break;
        case K_GIN: {
            st = grid_gemm(&k, true, false, K, L, g.Og, (operand){B, K, g.Og * K, 0},
                           (operand){A + n0 * g.O * L * es, L, g.Og * L, g.O * L}, col, L,
                           K * L, G * K * L, G, c);
            tgl_conv_col2im_args ca = {.g = g, .col = col, .gx = y, .n0 = n0, .nb = c, .G = G,
                                       .idx32 = c * g.C * g.H * g.W <= INT32_MAX};
            if (!st)
                st = launch(&k, "conv_col2im", c * g.C * g.H * g.W, &ca);
            break;
        }
        default: {
            /* dy's chunk as (O, c L): the product's left operand per group. */
            const tgl_array *gy = in[1];
            tgl_conv_copy4_args cp = {.src = (const char *)gy->data + n0 * gy->strides[0] * (int64_t)es,
                                      .dst = gyt, .d0 = c, .d1 = g.O, .d2 = g.Ho, .d3 = g.Wo,
                                      .s0 = gy->strides[0], .s1 = gy->strides[1],
                                      .s2 = gy->strides[2], .s3 = gy->strides[3], .swap01 = 1,
                                      .idx32 = c * g.O * L <= INT32_MAX};
            if ((st = launch(&k, "conv_copy4", c * g.O * L, &cp)))
                break;
            /* every group in one batch: gw_g (+)= dy_g . col_g^T */
            st = gemm(&k, false, true, g.Og, K, c * L, gyt, c * L, g.Og * c * L, col, c * L,
                      K * c * L, n0 == 0 ? 0.0 : 1.0, y, K, g.Og * K, G);
            break;
        }
        }
    }
done:
    /* Stream order: the launches above are issued before any reuse. */
    void *blocks[4] = {col, gyt, ownA, ownB};
    for (int i = 0; i < 4; i++)
        if (blocks[i])
            tgl_cuda_free(blocks[i]);
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

/* ---- pooling ----------------------------------------------------------------- */

static void pool_strides(const tgl_array *a, int64_t *sn, int64_t *sc, int64_t *sh, int64_t *sw)
{
    int nd = a->ndim;
    *sn = nd == 4 ? a->strides[0] : 0;
    *sc = a->strides[nd - 3];
    *sh = a->strides[nd - 2];
    *sw = a->strides[nd - 1];
}

/* The geometry of x pooled to `pooled`'s last two sizes, and x's (in[0])
 * and in[1]'s strides in args. */
static void pool_setup(const tgl_node *n, tgl_array *const *in, const tgl_array *pooled,
                       tgl_pool_args *a)
{
    const tgl_array *x = in[0];
    int nd = x->ndim;
    tgl_pool_geom *g = &a->g;
    g->C = x->shape[nd - 3];
    g->planes = g->C * (nd == 4 ? x->shape[0] : 1);
    g->H = x->shape[nd - 2], g->W = x->shape[nd - 1];
    g->Ho = pooled->shape[nd - 2], g->Wo = pooled->shape[nd - 1];
    g->kH = n->p.i[0], g->kW = n->p.i[1], g->dH = n->p.i[2], g->dW = n->p.i[3];
    g->pH = n->p.i[4], g->pW = n->p.i[5];
    g->exclude_pad = (n->p.flags & TGL_POOL_EXCLUDE_PAD) != 0;
    int64_t most = g->planes * (g->H * g->W > g->Ho * g->Wo ? g->H * g->W : g->Ho * g->Wo);
    a->idx32 = most <= INT32_MAX;
    a->x = x->data;
    pool_strides(x, &a->xsn, &a->xsc, &a->xsh, &a->xsw);
    if (n->op != TGL_OP_MAX_POOL2D && n->op != TGL_OP_AVG_POOL2D) {
        a->h = in[1]->data;
        pool_strides(in[1], &a->hsn, &a->hsc, &a->hsh, &a->hsw);
    }
}

static tgl_status pool_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              tgl_array *out)
{
    kctx k = {ctx, n, in, tgl_cuda_opts(ctx), out->dtype_id == TGL_FLOAT64,
              tgl_dtype_size(out->dtype_id)};
    if (out->size == 0)
        return TGL_OK;
    if (!tgl_array_is_contiguous(out))
        return tgl_op_error(ctx, n, in, TGL_EINTERNAL, "cuda: the output is not contiguous");
    tgl_pool_args a = {.out = out->data, .is_max = n->op == TGL_OP_MAX_POOL2D};
    pool_setup(n, in, out, &a);
    return launch(&k, "pool_fwd", a.g.planes * a.g.Ho * a.g.Wo, &a);
}

static tgl_status pool_grad_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                   tgl_array *out)
{
    kctx k = {ctx, n, in, tgl_cuda_opts(ctx), out->dtype_id == TGL_FLOAT64,
              tgl_dtype_size(out->dtype_id)};
    if (out->size == 0)
        return TGL_OK;
    if (!tgl_array_is_contiguous(out))
        return tgl_op_error(ctx, n, in, TGL_EINTERNAL, "cuda: the output is not contiguous");
    bool gather = n->op == TGL_OP_MAX_POOL2D_GATHER;
    tgl_pool_args a = {.out = out->data, .is_max = n->op == TGL_OP_MAX_POOL2D_GRAD};
    pool_setup(n, in, gather ? out : in[1], &a);
    int64_t pooled = a.g.planes * a.g.Ho * a.g.Wo, full = a.g.planes * a.g.H * a.g.W;
    if (gather)
        return launch(&k, "pool_argmax", pooled, &a);
    if (!a.is_max)
        return launch(&k, "pool_grad", full, &a);
    void *idx = tgl_cuda_alloc((size_t)(pooled > 0 ? pooled : 1) * sizeof(int64_t));
    if (!idx)
        return tgl_op_error(ctx, n, in, TGL_ENOMEM,
                            "cuda: out of device memory for the windows' argmax (%" PRId64
                            " bytes)", pooled * (int64_t)sizeof(int64_t));
    a.idx_out = idx;
    tgl_status st = launch(&k, "pool_argmax", pooled, &a);
    a.idx_out = NULL;
    a.idx = idx;
    if (!st)
        st = launch(&k, "pool_grad", full, &a);
    tgl_cuda_free(idx); /* stream order: freed after the launch that reads it */
    return st;
}

const tgl_op_kernel tgl_cuda_kernel_conv2d = {.run = conv2d_kernel};
const tgl_op_kernel tgl_cuda_kernel_conv2d_grad_input = {.run = grad_input_kernel};
const tgl_op_kernel tgl_cuda_kernel_conv2d_grad_weight = {.run = grad_weight_kernel};
const tgl_op_kernel tgl_cuda_kernel_pool2d = {.run = pool_kernel};
const tgl_op_kernel tgl_cuda_kernel_pool2d_grad = {.run = pool_grad_kernel};
