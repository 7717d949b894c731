/*
 * pool.c — 2-d pooling over the last two axes of an NCHW (or CHW) float
 * array, with Torch7's semantics (nn.SpatialMaxPooling and
 * nn.SpatialAveragePooling, :ceil()), and the ops their pullbacks build.
 *
 * Parameters, the same for every op here: p.i = {kH, kW, dH, dW, padH,
 * padW} (p.n == 6); p.flags: TGL_POOL_CEIL (ceil_mode), TGL_POOL_EXCLUDE_PAD
 * (avg only: count_include_pad = false).  The output has
 *   Ho = floor_or_ceil((H + 2 padH - kH) / dH) + 1
 * rows (likewise Wo), and in ceil mode one fewer when the last window
 * would start at or past H + padH (in padded coordinates), so every window
 * starts inside the input or the left padding, as Torch7 and PyTorch clip
 * it.  Torch7 requires pad <= kernel / 2, which also keeps every window
 * overlapping the input.
 *
 *   max_pool2d(x)            y = the max over each window's input
 *                            elements (padding never wins); a NaN wins;
 *                            ties: the first in row-major order (Torch7).
 *   avg_pool2d(x)            y = the window's sum / count: count is the
 *                            window clipped to the padded input (Torch7's
 *                            count_include_pad) or, with EXCLUDE_PAD, to
 *                            the input.
 *   max_pool2d_grad(x, g)    x's shape: g routed to each window's argmax
 *                            (summed where windows share it).
 *   avg_pool2d_grad(x, g)    x's shape: g / count spread over each
 *                            window; x is read for its shape only.
 *   max_pool2d_gather(x, h)  y's shape: h at each window's argmax of x:
 *                            max_pool2d_grad's transpose in g, and so max
 *                            pool's tangent (Rop) and the pullback of its
 *                            gradient.
 * The argmax depends on x only through comparisons, so each of the last
 * three is linear in its second input with zero derivative in x (almost
 * everywhere): Rop LINEAR(ALL_BUT0), pullback wrt x none.
 *
 * The kernels are the backends' (src/cpu/kernels/pool.c on the CPU).
 */
#include "engine/ops/ops.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int64_t pool_out_size(int64_t in, int64_t k, int64_t d, int64_t pad, int ceil_mode)
{
    int64_t span = in + 2 * pad - k;
    if (span < 0)
        return 0;
    int64_t o = (ceil_mode ? (span + d - 1) / d : span / d) + 1;
    if (ceil_mode && (o - 1) * d >= in + pad)
        o--;
    return o;
}

static bool is_grad_op(int op)
{
    return op == TGL_OP_MAX_POOL2D_GRAD || op == TGL_OP_AVG_POOL2D_GRAD ||
           op == TGL_OP_MAX_POOL2D_GATHER;
}

static tgl_status pool_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type x = n->in[0]->type;
    const int64_t *p = n->p.i;
    TGL_CHECK(x.ndim == 3 || x.ndim == 4, TGL_ESHAPE,
              "needs a 4-d (N, C, H, W) or 3-d (C, H, W) input, got %d-d", x.ndim);
    TGL_CHECK(tgl_dtype_is_float(x.dtype), TGL_EDTYPE,
              "needs a float32 or float64 input, got %s (cast it first)",
              tgl_dtype_name(x.dtype));
    TGL_CHECK(n->p.n == 6, TGL_EINVAL,
              "takes six parameters (kH, kW, dH, dW, padH, padW), got %d", (int)n->p.n);
    unsigned known = TGL_POOL_CEIL | (n->op == TGL_OP_AVG_POOL2D || n->op == TGL_OP_AVG_POOL2D_GRAD
                                          ? TGL_POOL_EXCLUDE_PAD : 0u);
    TGL_CHECK(((unsigned)n->p.flags & ~known) == 0, TGL_EINVAL, "unknown flags %d",
              (int)n->p.flags);
    TGL_CHECK(p[0] > 0 && p[1] > 0, TGL_EINVAL,
              "kernel must be positive, got %" PRId64 "x%" PRId64, p[0], p[1]);
    TGL_CHECK(p[2] > 0 && p[3] > 0, TGL_EINVAL,
              "stride must be positive, got %" PRId64 "x%" PRId64, p[2], p[3]);
    TGL_CHECK(p[4] >= 0 && p[5] >= 0, TGL_EINVAL,
              "padding must be >= 0, got %" PRId64 "x%" PRId64, p[4], p[5]);
    TGL_CHECK(p[4] <= p[0] / 2 && p[5] <= p[1] / 2, TGL_EINVAL,
              "padding %" PRId64 "x%" PRId64 " must be at most half the kernel %" PRId64
              "x%" PRId64 " (Torch7's rule)", p[4], p[5], p[0], p[1]);
    if (is_grad_op(n->op)) {
        tgl_type g = n->in[1]->type;
        TGL_CHECK(g.dtype == x.dtype && g.ndim == x.ndim, TGL_EDTYPE,
                  "needs a second input of x's dtype and rank (%s %d-d), got %s %d-d",
                  tgl_dtype_name(x.dtype), x.ndim, tgl_dtype_name(g.dtype), g.ndim);
    }
    /* N and C keep their broadcast pattern; the pooled axes are sized at
     * run time. */
    uint32_t lead = (1u << (x.ndim - 2)) - 1u;
    if (n->op == TGL_OP_MAX_POOL2D_GRAD || n->op == TGL_OP_AVG_POOL2D_GRAD)
        n->type = tgl_type_make(x.dtype, x.ndim, x.bcast);
    else
        n->type = tgl_type_make(x.dtype, x.ndim, x.bcast & lead);
    return TGL_OK;
}

/* The pooled shape of x (in[0]), or an error when a window does not fit. */
static tgl_status pooled_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                               int64_t *shape)
{
    const tgl_array *x = in[0];
    const int64_t *p = n->p.i;
    int nd = x->ndim;
    int64_t H = x->shape[nd - 2], W = x->shape[nd - 1];
    if (H == 0 || W == 0)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "the input's planes are empty (%" PRId64 "x%" PRId64 ")", H, W);
    if (H + 2 * p[4] < p[0] || W + 2 * p[5] < p[1])
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "the %" PRId64 "x%" PRId64 " input (padded by %" PRId64 "x%" PRId64
                            ") is smaller than the %" PRId64 "x%" PRId64 " kernel",
                            H, W, p[4], p[5], p[0], p[1]);
    for (int d = 0; d < nd - 2; d++)
        shape[d] = x->shape[d];
    int ceil_mode = (n->p.flags & TGL_POOL_CEIL) != 0;
    shape[nd - 2] = pool_out_size(H, p[0], p[2], p[4], ceil_mode);
    shape[nd - 1] = pool_out_size(W, p[1], p[3], p[5], ceil_mode);
    return TGL_OK;
}

static tgl_status pool_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                             int64_t *shape)
{
    tgl_status st = pooled_shape(ctx, n, in, shape);
    if (st || n->op == TGL_OP_MAX_POOL2D || n->op == TGL_OP_AVG_POOL2D)
        return st;
    /* The grads and the gather: the second input is pooled-shaped (the
     * grads' g) or x-shaped (the gather's h). */
    const tgl_array *x = in[0], *g = in[1];
    bool want_x = n->op == TGL_OP_MAX_POOL2D_GATHER;
    const int64_t *want = want_x ? x->shape : shape;
    for (int d = 0; d < x->ndim; d++) {
        if (g->shape[d] != want[d]) {
            char a[96] = "", b[96] = "";
            for (int e = 0; e < x->ndim; e++) {
                size_t la = strlen(a), lb = strlen(b);
                snprintf(a + la, sizeof a - la, "%s%" PRId64, e ? "x" : "", g->shape[e]);
                snprintf(b + lb, sizeof b - lb, "%s%" PRId64, e ? "x" : "", want[e]);
            }
            return tgl_op_error(ctx, n, in, TGL_ESHAPE, "%s has shape %s, expected %s",
                                want_x ? "the gathered input" : "the output gradient", a, b);
        }
    }
    if (!want_x)
        memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    return TGL_OK;
}

static tgl_node *pool_mk(tgl_ctx *ctx, const tgl_node *n, int op, tgl_node *a, tgl_node *b)
{
    tgl_node *in[2] = {a, b};
    tgl_params p = n->p;
    if (op == TGL_OP_MAX_POOL2D_GRAD || op == TGL_OP_MAX_POOL2D_GATHER)
        p.flags &= TGL_POOL_CEIL;
    return tgl_mk(ctx, op, 2, in, &p);
}

/* The pullbacks: max pool routes g to the argmax, avg pool spreads it;
 * the grads and the gather are linear in their second input, and the
 * transpose of max_pool2d_grad in g is the gather (and back); their
 * derivative in x is zero where it exists (the argmax is locally
 * constant), so x gets none. */
static tgl_status pool_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    tgl_node *x = n->in[0];
    switch (n->op) {
    case TGL_OP_MAX_POOL2D:
        gin[0] = pool_mk(ctx, n, TGL_OP_MAX_POOL2D_GRAD, x, g);
        break;
    case TGL_OP_AVG_POOL2D:
        gin[0] = pool_mk(ctx, n, TGL_OP_AVG_POOL2D_GRAD, x, g);
        break;
    case TGL_OP_MAX_POOL2D_GRAD:
        gin[0] = NULL;
        gin[1] = pool_mk(ctx, n, TGL_OP_MAX_POOL2D_GATHER, x, g);
        break;
    case TGL_OP_MAX_POOL2D_GATHER:
        gin[0] = NULL;
        gin[1] = pool_mk(ctx, n, TGL_OP_MAX_POOL2D_GRAD, x, g);
        break;
    default: /* AVG_POOL2D_GRAD: avg pool is its transpose */
        gin[0] = NULL;
        gin[1] = tgl_mk(ctx, TGL_OP_AVG_POOL2D, 1, &g, &n->p);
        break;
    }
    return TGL_OK;
}

const tgl_opimpl tgl_impl_pool2d = {
    .family = TGL_FAM_NNET,
    .nin_min = 1,
    .nin_max = 1,
    .infer = pool_infer,
    .shape = pool_shape,
    .grad = pool_grad,
};

const tgl_opimpl tgl_impl_pool2d_grad = {
    .family = TGL_FAM_NNET,
    .nin_min = 2,
    .nin_max = 2,
    .infer = pool_infer,
    .shape = pool_shape,
    .grad = pool_grad,
};
