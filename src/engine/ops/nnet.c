/*
 * nnet.c — the neural-network family: softmax and log_softmax along one
 * axis, and one_hot (integer labels to indicator vectors).
 *
 * softmax(x) and log_softmax(x): p.i[0] is the axis (0-based); float
 * inputs only (the Lua layer casts integers to floatX), output of x's type.
 * Both subtract the maximum along the axis first, so logits of +-1000 give
 * finite, exact results, and log_softmax is computed as
 * (x - max) - log(sum(exp(x - max))) rather than as the log of a softmax
 * that may underflow to 0.  The CPU kernel works in double.  Entries
 * equal to the maximum count as shift 0 even when the maximum is infinite,
 * which is the limit the expression tends to: a row with +inf entries
 * splits the mass among them, -inf entries get 0 (log: -inf), and a row of
 * nothing but -inf gives the uniform distribution instead of 0/0.  A NaN
 * in a row makes the whole row NaN.
 *
 * one_hot(labels): p.i[0] = n classes (> 0), p.i[1] = the output dtype.
 * Labels are 1-based integers (int32, int64, uint8) of any ndim up to 7;
 * the output has shape labels.shape + (n) with out[..., k-1] = 1 where the
 * label is k.  A label outside 1..n fails, naming it and its position
 * (1-based, as the user indexes).
 *
 * The kernels are the backends' (src/cpu/kernels/nnet.c on the CPU).
 */
#include "engine/ops/ops.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- softmax, log_softmax -------------------------------------------- */

static tgl_status softmax_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type x = n->in[0]->type;
    TGL_CHECK(n->p.n == 1 && n->p.flags == 0, TGL_EINVAL,
              "takes exactly one axis (p.n == 1), got %d parameters", (int)n->p.n);
    TGL_CHECK(n->p.i[0] >= 0 && n->p.i[0] < x.ndim, TGL_EINVAL,
              "axis %" PRId64 " is out of range for a %d-d input", n->p.i[0] + 1, x.ndim);
    TGL_CHECK(tgl_dtype_is_float(x.dtype), TGL_EDTYPE,
              "needs a float32 or float64 input, got %s (cast it first)",
              tgl_dtype_name(x.dtype));
    n->type = x;
    return TGL_OK;
}

static tgl_status same_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                             int64_t *shape)
{
    (void)ctx, (void)n;
    for (int d = 0; d < in[0]->ndim; d++)
        shape[d] = in[0]->shape[d];
    return TGL_OK;
}

/*   softmax:     gx = y * (g - sum(g * y, axis, keepdims))
 *   log_softmax: gx = g - exp(y) * sum(g, axis, keepdims) */
static tgl_status softmax_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    const int64_t *axis = &n->p.i[0];
    if (n->op == TGL_OP_SOFTMAX) {
        tgl_node *s = tgl_mk_sum(ctx, tgl_mk2(ctx, TGL_OP_MUL, g, n), 1, axis, true);
        gin[0] = tgl_mk2(ctx, TGL_OP_MUL, n, tgl_mk2(ctx, TGL_OP_SUB, g, s));
    } else {
        tgl_node *s = tgl_mk_sum(ctx, g, 1, axis, true);
        gin[0] = tgl_mk2(ctx, TGL_OP_SUB, g,
                         tgl_mk2(ctx, TGL_OP_MUL, tgl_mk1(ctx, TGL_OP_EXP, n), s));
    }
    /* A node that failed to build leaves NULL and its message in the
     * context, which the driver reports. */
    return TGL_OK;
}

/* ---- one_hot --------------------------------------------------------- */

static tgl_status one_hot_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type y = n->in[0]->type;
    TGL_CHECK(n->p.n == 2 && n->p.flags == 0, TGL_EINVAL,
              "takes two parameters (classes, dtype), got %d", (int)n->p.n);
    TGL_CHECK(n->p.i[0] > 0, TGL_EINVAL, "needs at least one class, got %" PRId64, n->p.i[0]);
    TGL_CHECK(n->p.i[1] >= 0 && n->p.i[1] < TGL_NDTYPES, TGL_EDTYPE, "unknown dtype %" PRId64,
              n->p.i[1]);
    TGL_CHECK(y.dtype == TGL_INT32 || y.dtype == TGL_INT64 || y.dtype == TGL_UINT8, TGL_EDTYPE,
              "labels must be integers (int32, int64 or uint8), got %s", tgl_dtype_name(y.dtype));
    TGL_CHECK(y.ndim < TGL_MAX_DIMS, TGL_ESHAPE,
              "labels have %d dimensions; at most %d leave room for the class axis", y.ndim,
              TGL_MAX_DIMS - 1);
    uint32_t bc = y.bcast | (n->p.i[0] == 1 ? 1u << y.ndim : 0u);
    n->type = tgl_type_make((int)n->p.i[1], y.ndim + 1, bc);
    return TGL_OK;
}

static tgl_status one_hot_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                int64_t *shape)
{
    (void)ctx;
    for (int d = 0; d < in[0]->ndim; d++)
        shape[d] = in[0]->shape[d];
    shape[in[0]->ndim] = n->p.i[0];
    return TGL_OK;
}

/* Labels are integers: no gradient. */
static tgl_status one_hot_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    (void)ctx, (void)n, (void)g;
    gin[0] = NULL;
    return TGL_OK;
}

/* ---- softmax_crossentropy ------------------------------------------ */

/* x: (rows, classes) logits; labels: int vector of 1-based classes.
 * loss[i] = logsumexp(x[i]) - x[i, label_i], computed with the row max
 * subtracted, so logits of +-1000 give finite, exact losses.  The
 * specialize stage rewrites -log_softmax(x)[rows, labels] into this. */
static tgl_status xent_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type x = n->in[0]->type, y = n->in[1]->type;
    TGL_CHECK(x.ndim == 2 && tgl_dtype_is_float(x.dtype), TGL_EDTYPE,
              "needs a float matrix of logits");
    TGL_CHECK(y.ndim == 1 && (y.dtype == TGL_INT32 || y.dtype == TGL_INT64), TGL_EDTYPE,
              "needs an int32 or int64 vector of labels");
    TGL_CHECK(n->p.n == 0, TGL_EINVAL, "takes no parameters");
    n->type = tgl_type_make(x.dtype, 1, x.bcast & y.bcast & 1u);
    return TGL_OK;
}

static tgl_status xent_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                             int64_t *shape)
{
    if (in[1]->shape[0] != in[0]->shape[0])
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "%" PRId64 " labels for %" PRId64 " rows",
                            in[1]->shape[0], in[0]->shape[0]);
    shape[0] = in[0]->shape[0];
    return TGL_OK;
}

/* d loss[i] / d x[i] = softmax(x[i]) - onehot(label_i): finite for any
 * logits; scaled by the loss's gradient, one op (softmax_crossentropy_dx). */
static tgl_status xent_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    tgl_node *din[3] = {g, n->in[0], n->in[1]};
    gin[0] = tgl_mk(ctx, TGL_OP_SOFTMAX_XENT_DX, 3, din, NULL);
    gin[1] = NULL;
    return TGL_OK;
}

/* ---- softmax_crossentropy_dx --------------------------------------- */

/* dx[i] = dy[i] (softmax(x[i]) - onehot(labels[i])): softmax_crossentropy's
 * gradient times the loss's, in one pass per row (max, exp, scale, minus
 * dy at the label), where it used to be softmax, arange, adv_inc_subtensor,
 * a dimshuffle and a product.  Inputs: dy (rows), x (rows, classes),
 * labels (rows, 1-based). */
static tgl_status xent_dx_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type dy = n->in[0]->type, x = n->in[1]->type, y = n->in[2]->type;
    TGL_CHECK(x.ndim == 2 && tgl_dtype_is_float(x.dtype), TGL_EDTYPE,
              "needs a float matrix of logits");
    TGL_CHECK(dy.ndim == 1 && dy.dtype == x.dtype, TGL_EDTYPE,
              "needs a vector dy of the logits' dtype (%s), got %s %d-d",
              tgl_dtype_name(x.dtype), tgl_dtype_name(dy.dtype), dy.ndim);
    TGL_CHECK(y.ndim == 1 && (y.dtype == TGL_INT32 || y.dtype == TGL_INT64), TGL_EDTYPE,
              "needs an int32 or int64 vector of labels");
    TGL_CHECK(n->p.n == 0, TGL_EINVAL, "takes no parameters");
    /* a row axis broadcasts only when every input's does */
    uint32_t rows = x.bcast & dy.bcast & y.bcast & 1u;
    n->type = tgl_type_make(x.dtype, 2, rows | (x.bcast & 2u));
    return TGL_OK;
}

static tgl_status xent_dx_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                int64_t *shape)
{
    int64_t r = in[1]->shape[0];
    if (in[0]->shape[0] != r || in[2]->shape[0] != r)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "%" PRId64 " values of dy and %" PRId64 " labels for %" PRId64
                            " rows", in[0]->shape[0], in[2]->shape[0], r);
    shape[0] = r;
    shape[1] = in[1]->shape[1];
    return TGL_OK;
}

/* Second derivatives.  With s = softmax(x[i]) and D = s - onehot(label):
 * d<g, dx>/d dy[i] = <g[i], D[i]>, and d<g, dx>/dx[i] is softmax's
 * pullback of dy[i] g[i]: s (dy g - <s, dy g>). */
static tgl_status xent_dx_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    tgl_node *dy = n->in[0], *x = n->in[1], *y = n->in[2];
    int64_t axis = 1, col[2] = {0, -1};
    tgl_node *ones = tgl_mk_fill_like(ctx, dy, dy->type.dtype, 1.0);
    tgl_node *din[3] = {ones, x, y};
    tgl_node *D = tgl_mk(ctx, TGL_OP_SOFTMAX_XENT_DX, 3, din, NULL);
    gin[0] = tgl_mk_sum(ctx, tgl_mk2(ctx, TGL_OP_MUL, g, D), 1, &axis, false);
    tgl_params ap = {0};
    ap.n = 1;
    ap.i[0] = 1;
    tgl_node *s = tgl_mk(ctx, TGL_OP_SOFTMAX, 1, &x, &ap);
    tgl_node *h = tgl_mk2(ctx, TGL_OP_MUL, g, tgl_mk_dimshuffle(ctx, dy, 2, col));
    tgl_node *sh = tgl_mk_sum(ctx, tgl_mk2(ctx, TGL_OP_MUL, s, h), 1, &axis, true);
    gin[1] = tgl_mk2(ctx, TGL_OP_MUL, s, tgl_mk2(ctx, TGL_OP_SUB, h, sh));
    gin[2] = NULL;
    return TGL_OK;
}

const tgl_opimpl tgl_impl_softmax_xent_dx = {
    .family = TGL_FAM_NNET,
    .nin_min = 3,
    .nin_max = 3,
    .infer = xent_dx_infer,
    .shape = xent_dx_shape,
    .grad = xent_dx_grad,
    .inplace = tgl_inplace_same_type,
};

const tgl_opimpl tgl_impl_softmax_xent = {
    .family = TGL_FAM_NNET,
    .nin_min = 2,
    .nin_max = 2,
    .infer = xent_infer,
    .shape = xent_shape,
    .grad = xent_grad,
};

/* ---- the implementations ------------------------------------------- */

const tgl_opimpl tgl_impl_softmax = {
    .family = TGL_FAM_NNET,
    .nin_min = 1,
    .nin_max = 1,
    .infer = softmax_infer,
    .shape = same_shape,
    .grad = softmax_grad,
};

const tgl_opimpl tgl_impl_log_softmax = {
    .family = TGL_FAM_NNET,
    .nin_min = 1,
    .nin_max = 1,
    .infer = softmax_infer,
    .shape = same_shape,
    .grad = softmax_grad,
};

const tgl_opimpl tgl_impl_one_hot = {
    .family = TGL_FAM_NNET,
    .nin_min = 1,
    .nin_max = 1,
    .infer = one_hot_infer,
    .shape = one_hot_shape,
    .grad = one_hot_grad,
};
