/*
 * conv.c — 2-d convolution: conv2d and the two ops of its pullback,
 * conv2d_grad_input and conv2d_grad_weight (internal: only gradients build
 * them).
 *
 * conv2d(x, w): x (N, C, H, W), w (O, C/groups, kH, kW), both float32 or
 * both float64; output (N, O, Ho, Wo) with
 *   Ho = floor((H + 2 padH - dilH (kH - 1) - 1) / strideH) + 1
 * (Wo alike), and
 *   y[n, o, i, j] = sum_{c, a, b} x[n, g Cg + c, i sH - pH + a dH, j sW - pW + b dW]
 *                                 * w[o, c, a, b],   g = o / (O / groups),
 * entries of x outside the image counting as 0: a cross-correlation, as
 * Torch7's SpatialConvolution and PyTorch's conv2d compute (the kernel is
 * not flipped).  No bias: that is a broadcast add after it.
 *
 * The parameters (p.n == 7), the same for all three ops: p.i[0..1] stride
 * (h, w) >= 1, p.i[2..3] padding >= 0, p.i[4..5] dilation >= 1, p.i[6]
 * groups >= 1; groups must divide C (checked from the types when C is
 * known there, else when it runs) and O.
 *
 * conv2d is bilinear in (x, w), and so are the pullback ops in their two
 * data inputs, which is why all three take the BILINEAR Rop rule:
 *   conv2d_grad_input(g, w, x)  = the transposed convolution of g (shaped
 *       like conv2d's output) by w, shaped like x: d<conv2d(x, w), g>/dx.
 *       x is read for its shape only (a transposed convolution's output
 *       size is ambiguous when the stride is above 1).
 *   conv2d_grad_weight(x, g, w) = the correlation of x with g, shaped like
 *       w: d<conv2d(x, w), g>/dw; w is read for its shape only.
 * Their pullbacks close the set, so every order of derivative exists:
 *   conv2d:            gx = grad_input(u, w, x),  gw = grad_weight(x, u, w)
 *   grad_input(g, w):  gg = conv2d(u, w),         gw = grad_weight(u, g, w)
 *   grad_weight(x, g): gx = grad_input(g, u, x),  gg = conv2d(x, u)
 * (u the output gradient; each follows from <conv2d(x, w), g> being the
 * one trilinear form the three ops differentiate).  The shape-only inputs
 * get no gradient.
 *
 * The kernels are the backends' (src/cpu/kernels/conv.c on the CPU).
 */
#include "engine/ops/ops.h"

#include <inttypes.h>
#include <limits.h>

enum { P_SH, P_SW, P_PH, P_PW, P_DH, P_DW, P_GROUPS, P_N };

static tgl_status check_params(tgl_ctx *ctx, const tgl_node *n)
{
    const int64_t *p = n->p.i;
    TGL_CHECK(n->p.n == P_N && n->p.flags == 0, TGL_EINVAL,
              "takes 7 parameters (stride h, w, padding h, w, dilation h, w, groups), got %d",
              (int)n->p.n);
    TGL_CHECK(p[P_SH] >= 1 && p[P_SW] >= 1, TGL_EINVAL,
              "stride must be at least 1, got {%" PRId64 ", %" PRId64 "}", p[P_SH], p[P_SW]);
    TGL_CHECK(p[P_PH] >= 0 && p[P_PW] >= 0, TGL_EINVAL,
              "padding must be at least 0, got {%" PRId64 ", %" PRId64 "}", p[P_PH], p[P_PW]);
    TGL_CHECK(p[P_DH] >= 1 && p[P_DW] >= 1, TGL_EINVAL,
              "dilation must be at least 1, got {%" PRId64 ", %" PRId64 "}", p[P_DH], p[P_DW]);
    TGL_CHECK(p[P_GROUPS] >= 1, TGL_EINVAL, "groups must be at least 1, got %" PRId64,
              p[P_GROUPS]);
    return TGL_OK;
}

/* Checks that inputs a and b of n are 4-d and of one float dtype. */
static tgl_status check_inputs(tgl_ctx *ctx, const tgl_node *n, int a, int b, const char *na,
                               const char *nb)
{
    tgl_type ta = n->in[a]->type, tb = n->in[b]->type;
    TGL_CHECK(ta.ndim == 4 && tb.ndim == 4, TGL_ESHAPE,
              "takes a 4-d %s and a 4-d %s, got %d-d and %d-d", na, nb, ta.ndim, tb.ndim);
    TGL_CHECK(tgl_dtype_is_float(ta.dtype) && ta.dtype == tb.dtype, TGL_EDTYPE,
              "needs a %s and a %s of one float dtype (float32 or float64), got %s and %s", na, nb,
              tgl_dtype_name(ta.dtype), tgl_dtype_name(tb.dtype));
    return TGL_OK;
}

static tgl_status conv2d_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_status st;
    if ((st = check_params(ctx, n)) ||
        (st = check_inputs(ctx, n, 0, 1, "input (N, C, H, W)", "weight (O, C/groups, kH, kW)")))
        return st;
    tgl_type x = n->in[0]->type;
    /* A batch of one stays one; every other output size is computed. */
    n->type = tgl_type_make(x.dtype, 4, (uint32_t)tgl_type_bcast(x, 0));
    return TGL_OK;
}

static tgl_status grad_input_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_status st;
    if ((st = check_params(ctx, n)) ||
        (st = check_inputs(ctx, n, 0, 1, "output gradient", "weight")) ||
        (st = check_inputs(ctx, n, 0, 2, "output gradient", "input (for its shape)")))
        return st;
    n->type = n->in[2]->type;
    return TGL_OK;
}

static tgl_status grad_weight_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_status st;
    if ((st = check_params(ctx, n)) ||
        (st = check_inputs(ctx, n, 0, 1, "input", "output gradient")) ||
        (st = check_inputs(ctx, n, 0, 2, "input", "weight (for its shape)")))
        return st;
    n->type = n->in[2]->type;
    return TGL_OK;
}

/* ---- shapes ---------------------------------------------------------- */

/* conv2d's output shape for input shape xs and weight shape ws (checked). */
static tgl_status conv_out_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                 const int64_t *xs, const int64_t *ws, int64_t *out)
{
    const int64_t *p = n->p.i;
    int64_t G = p[P_GROUPS];
    if (xs[1] % G != 0 || ws[0] % G != 0)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "groups %" PRId64 " must divide the input's channels %" PRId64
                            " and the weight's output channels %" PRId64,
                            G, xs[1], ws[0]);
    if (ws[1] * G != xs[1])
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "the input has %" PRId64 " channels, the weight (O, C/groups, kH, kW) "
                            "takes %" PRId64 " x %" PRId64 " groups",
                            xs[1], ws[1], G);
    int64_t eh = p[P_DH] * (ws[2] - 1) + 1, ew = p[P_DW] * (ws[3] - 1) + 1;
    int64_t ph = xs[2] + 2 * p[P_PH], pw = xs[3] + 2 * p[P_PW];
    if (ws[2] < 1 || ws[3] < 1 || ph < eh || pw < ew)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "the output would be empty: a %" PRId64 "x%" PRId64
                            " image padded to %" PRId64 "x%" PRId64 " is smaller than the "
                            "%" PRId64 "x%" PRId64 " (dilated) kernel",
                            xs[2], xs[3], ph, pw, eh, ew);
    out[0] = xs[0];
    out[1] = ws[0];
    out[2] = (ph - eh) / p[P_SH] + 1;
    out[3] = (pw - ew) / p[P_SW] + 1;
    /* The kernels multiply per image and group through BLAS, which takes
     * int sizes: (O/groups x K) . (K x L), K = C/groups kH kW, L = Ho Wo. */
    int64_t L, K;
    if (__builtin_mul_overflow(out[2], out[3], &L) || L > INT_MAX ||
        __builtin_mul_overflow(ws[1] * ws[2], ws[3], &K) || K > INT_MAX || ws[0] / G > INT_MAX)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "a %" PRId64 "x%" PRId64 " output of %" PRId64 " channels from a %"
                            PRId64 "x%" PRId64 "x%" PRId64 " kernel: the per-image products "
                            "are over the 2^31-1 sizes BLAS takes",
                            out[2], out[3], ws[0], ws[1], ws[2], ws[3]);
    return TGL_OK;
}

static tgl_status conv2d_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                               int64_t *shape)
{
    return conv_out_shape(ctx, n, in, in[0]->shape, in[1]->shape, shape);
}

/* g must have the shape conv2d gives for x and w. */
static tgl_status check_gout(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                             const tgl_array *x, const tgl_array *w, const tgl_array *g)
{
    int64_t want[4];
    tgl_status st = conv_out_shape(ctx, n, in, x->shape, w->shape, want);
    if (st)
        return st;
    for (int d = 0; d < 4; d++)
        if (g->shape[d] != want[d])
            return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                                "the output gradient has shape (%" PRId64 ", %" PRId64 ", %" PRId64
                                ", %" PRId64 "), the convolution's output (%" PRId64 ", %" PRId64
                                ", %" PRId64 ", %" PRId64 ")",
                                g->shape[0], g->shape[1], g->shape[2], g->shape[3], want[0],
                                want[1], want[2], want[3]);
    return TGL_OK;
}

static tgl_status grad_input_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                   int64_t *shape)
{
    tgl_status st = check_gout(ctx, n, in, in[2], in[1], in[0]);
    for (int d = 0; d < 4 && !st; d++)
        shape[d] = in[2]->shape[d];
    return st;
}

static tgl_status grad_weight_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                    int64_t *shape)
{
    tgl_status st = check_gout(ctx, n, in, in[0], in[2], in[1]);
    for (int d = 0; d < 4 && !st; d++)
        shape[d] = in[2]->shape[d];
    return st;
}

/* ---- pullbacks ------------------------------------------------------- */

static tgl_node *mk3(tgl_ctx *ctx, const tgl_node *n, int op, tgl_node *a, tgl_node *b,
                     tgl_node *c)
{
    return tgl_mk(ctx, op, 3, (tgl_node *[]){a, b, c}, &n->p);
}

/* A node that failed to build leaves NULL and its message in the context,
 * which the driver reports. */
static tgl_status conv2d_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *u, tgl_node **gin)
{
    tgl_node *x = n->in[0], *w = n->in[1];
    gin[0] = mk3(ctx, n, TGL_OP_CONV2D_GRAD_INPUT, u, w, x);
    gin[1] = mk3(ctx, n, TGL_OP_CONV2D_GRAD_WEIGHT, x, u, w);
    return TGL_OK;
}

static tgl_status grad_input_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *u, tgl_node **gin)
{
    tgl_node *g = n->in[0], *w = n->in[1];
    gin[0] = tgl_mk(ctx, TGL_OP_CONV2D, 2, (tgl_node *[]){u, w}, &n->p);
    gin[1] = mk3(ctx, n, TGL_OP_CONV2D_GRAD_WEIGHT, u, g, w);
    gin[2] = NULL; /* read for its shape only */
    return TGL_OK;
}

static tgl_status grad_weight_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *u, tgl_node **gin)
{
    tgl_node *x = n->in[0], *g = n->in[1];
    gin[0] = mk3(ctx, n, TGL_OP_CONV2D_GRAD_INPUT, g, u, x);
    gin[1] = tgl_mk(ctx, TGL_OP_CONV2D, 2, (tgl_node *[]){x, u}, &n->p);
    gin[2] = NULL; /* read for its shape only */
    return TGL_OK;
}

/* ---- the implementations ------------------------------------------- */

const tgl_opimpl tgl_impl_conv2d = {
    .family = TGL_FAM_NNET,
    .nin_min = 2,
    .nin_max = 2,
    .infer = conv2d_infer,
    .shape = conv2d_shape,
    .grad = conv2d_grad,
};

const tgl_opimpl tgl_impl_conv2d_grad_input = {
    .family = TGL_FAM_NNET,
    .nin_min = 3,
    .nin_max = 3,
    .infer = grad_input_infer,
    .shape = grad_input_shape,
    .grad = grad_input_grad,
};

const tgl_opimpl tgl_impl_conv2d_grad_weight = {
    .family = TGL_FAM_NNET,
    .nin_min = 3,
    .nin_max = 3,
    .infer = grad_weight_infer,
    .shape = grad_weight_shape,
    .grad = grad_weight_grad,
};
