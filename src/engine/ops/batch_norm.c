/*
 * batch_norm.c — batch normalisation (Torch7's nn.BatchNormalization and
 * nn.SpatialBatchNormalization), as ops: the batch statistics, one pass
 * over x; the normalise-scale-shift, one more; and the training form's
 * backward, two.
 * x is (N, C) or (N, C, d2 [, d3 [, d4]]); the channel axis is axis 1 and
 * the statistics run over every other axis (M = N * d2 * ... elements per
 * channel).
 *
 *   batch_norm_stats(x)                 two outputs, each (C) of x's dtype:
 *                                       the mean and the biased variance
 *                                       (sum (x - mean)^2 / M) per channel.
 *   batch_norm(x, mean, var [, w, b])   y = (x - mean) / sqrt(var + eps)
 *                                       * w + b, the (C) vectors along
 *                                       axis 1; p.f[0] = eps (>= 0).
 *                                       Without w and b: w = 1, b = 0.
 *
 * Keeping the statistics a separate op is what lets the training form
 * (stats of the batch) and the evaluation form (running statistics given
 * as mean and var) share one kernel, and gives nn's modules the batch mean
 * and variance their running averages need without a second pass.
 *
 *   batch_norm_grad(x, g, mean, var [, w])
 *                      three outputs: dx (x's shape), Sg = sum g and
 *                      Sgx = sum g (x - mean) (each (C)); dx is the
 *                      training form's whole gradient in x (through the
 *                      batch's mean and var too):
 *                      s (g - Sg / M - (x - mean) Sgx / (M (var + eps)))
 *                      with s = w / sqrt(var + eps); p.f[0] = eps.  Two
 *                      passes over x and g.
 *
 * The pullbacks, with s as above (w = 1 without it), xc = x - mean:
 *   batch_norm:        dx = g s, dmean = -Sg s,
 *                      dvar = -Sgx w / (2 (var + eps)^(3/2)),
 *                      dw = Sgx / sqrt(var + eps), db = Sg.
 *                      In the training form (mean and var the outputs of
 *                      batch_norm_stats(x)) dx through the statistics
 *                      comes at once from batch_norm_grad, whose Sg and
 *                      Sgx give dw and db, and mean and var get none from
 *                      here (their part is inside dx already; gradients
 *                      reaching them from other uses still go through
 *                      batch_norm_stats' pullback): the backward is two
 *                      passes instead of the five the chained ordinary
 *                      ops take.
 *   batch_norm_stats:  dx = gmean / M + gvar 2 (x - mean) / M.
 *   batch_norm_grad:   the pullback of its expansion in ordinary ops
 *                      (grad_expand), taken by tgl_grad on
 *                      placeholders standing for its inputs.
 * Everything but batch_norm_grad itself is ordinary graph ops
 * (elementwise, sums over the non-channel axes, dimshuffles), so
 * gradients of any order and the pushforward (Rop rule PULLBACK) follow.
 *
 * The kernels are the backends' (src/cpu/kernels/batch_norm.c on the CPU).
 */
#include "engine/ops/ops.h"

#include <inttypes.h>

static tgl_status check_x(tgl_ctx *ctx, tgl_type x)
{
    TGL_CHECK(x.ndim >= 2 && x.ndim <= 5, TGL_ESHAPE,
              "needs a 2-d (N, C) to 5-d (N, C, D, H, W) input, got %d-d", x.ndim);
    TGL_CHECK(tgl_dtype_is_float(x.dtype), TGL_EDTYPE,
              "needs a float32 or float64 input, got %s (cast it first)", tgl_dtype_name(x.dtype));
    return TGL_OK;
}

/* The (C) statistics' type: x's dtype, x's broadcast bit of the channel. */
static tgl_type stat_type(tgl_type x)
{
    return tgl_type_make(x.dtype, 1, (x.bcast >> 1) & 1u);
}

static tgl_type stats_out_type(const tgl_node *n, int k)
{
    (void)k;
    return stat_type(n->in[0]->type);
}

static tgl_status stats_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_status st = check_x(ctx, n->in[0]->type);
    if (st)
        return st;
    TGL_CHECK(n->p.n == 0 && n->p.flags == 0, TGL_EINVAL, "takes no parameters");
    n->nout = 2;
    n->type = stat_type(n->in[0]->type);
    return TGL_OK;
}

/* Elements per channel of x's shape. */
static int64_t per_channel(const tgl_array *x)
{
    int64_t m = x->shape[0];
    for (int d = 2; d < x->ndim; d++)
        m *= x->shape[d];
    return m;
}

static tgl_status stats_shape_k(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, int k,
                                int64_t *shape)
{
    (void)k;
    if (per_channel(in[0]) == 0)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "no elements per channel to take statistics over (the input has "
                            "no batch or an empty axis)");
    shape[0] = in[0]->shape[1];
    return TGL_OK;
}

static tgl_status bn_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type x = n->in[0]->type;
    tgl_status st = check_x(ctx, x);
    if (st)
        return st;
    TGL_CHECK(n->nin == 3 || n->nin == 5, TGL_EINVAL,
              "takes x, mean, var and optionally weight and bias (3 or 5 inputs), got %d",
              n->nin);
    static const char *const what[5] = {"x", "the mean", "the variance", "the weight", "the bias"};
    for (int i = 1; i < n->nin; i++) {
        tgl_type v = n->in[i]->type;
        TGL_CHECK(v.ndim == 1 && v.dtype == x.dtype, TGL_EDTYPE,
                  "needs %s as a 1-d %s vector (one per channel), got %s %d-d", what[i],
                  tgl_dtype_name(x.dtype), tgl_dtype_name(v.dtype), v.ndim);
    }
    TGL_CHECK(n->p.n == 0 && n->p.flags == 0, TGL_EINVAL, "takes only eps (p.f[0])");
    TGL_CHECK(n->p.f[0] >= 0, TGL_EINVAL, "eps must be >= 0, got %g", n->p.f[0]);
    n->type = x;
    return TGL_OK;
}

static tgl_status bn_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, int64_t *shape)
{
    static const char *const what[5] = {"x", "the mean", "the variance", "the weight", "the bias"};
    const tgl_array *x = in[0];
    for (int i = 1; i < n->nin; i++)
        if (in[i]->shape[0] != x->shape[1])
            return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                                "%s has %" PRId64 " entries for %" PRId64
                                " channels (axis 2 of x)",
                                what[i], in[i]->shape[0], x->shape[1]);
    for (int d = 0; d < x->ndim; d++)
        shape[d] = x->shape[d];
    return TGL_OK;
}

/* v (C) as x's rank, along axis 1. */
static tgl_node *along_channels(tgl_ctx *ctx, tgl_node *v, int ndim)
{
    int64_t order[TGL_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        order[d] = d == 1 ? 0 : -1;
    return tgl_mk_dimshuffle(ctx, v, ndim, order);
}

/* The sum of t over every axis but 1: a (C) vector. */
static tgl_node *sum_but_channels(tgl_ctx *ctx, tgl_node *t)
{
    int64_t axes[TGL_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < t->type.ndim; d++)
        if (d != 1)
            axes[k++] = d;
    return tgl_mk_sum(ctx, t, k, axes, false);
}

static tgl_node *scalar_like(tgl_ctx *ctx, const tgl_node *x, double v)
{
    return tgl_mk_scalar(ctx, x->type.dtype, v);
}

/* ---- batch_norm_grad ---------------------------------------------- */

static tgl_type grad_out_type(const tgl_node *n, int k)
{
    return k == 0 ? n->in[0]->type : stat_type(n->in[0]->type);
}

static tgl_status grad_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type x = n->in[0]->type;
    tgl_status st = check_x(ctx, x);
    if (st)
        return st;
    TGL_CHECK(n->nin == 4 || n->nin == 5, TGL_EINVAL,
              "takes x, g, mean, var and optionally weight (4 or 5 inputs), got %d", n->nin);
    tgl_type g = n->in[1]->type;
    TGL_CHECK(g.dtype == x.dtype && g.ndim == x.ndim, TGL_EDTYPE,
              "needs g of x's dtype and rank (%s %d-d), got %s %d-d", tgl_dtype_name(x.dtype),
              x.ndim, tgl_dtype_name(g.dtype), g.ndim);
    for (int i = 2; i < n->nin; i++) {
        tgl_type v = n->in[i]->type;
        TGL_CHECK(v.ndim == 1 && v.dtype == x.dtype, TGL_EDTYPE,
                  "needs input %d as a 1-d %s vector, got %s %d-d", i + 1,
                  tgl_dtype_name(x.dtype), tgl_dtype_name(v.dtype), v.ndim);
    }
    TGL_CHECK(n->p.n == 0 && n->p.flags == 0 && n->p.f[0] >= 0, TGL_EINVAL,
              "takes only eps >= 0 (p.f[0])");
    n->nout = 3;
    n->type = x;
    return TGL_OK;
}

static tgl_status grad_shape_k(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, int k,
                               int64_t *shape)
{
    const tgl_array *x = in[0], *g = in[1];
    for (int d = 0; d < x->ndim; d++)
        if (g->shape[d] != x->shape[d])
            return tgl_op_error(ctx, n, in, TGL_ESHAPE, "g's axis %d has %" PRId64
                                " entries, x's %" PRId64, d + 1, g->shape[d], x->shape[d]);
    for (int i = 2; i < n->nin; i++)
        if (in[i]->shape[0] != x->shape[1])
            return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                                "input %d has %" PRId64 " entries for %" PRId64 " channels", i + 1,
                                in[i]->shape[0], x->shape[1]);
    if (per_channel(x) == 0)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "no elements per channel");
    if (k == 0)
        for (int d = 0; d < x->ndim; d++)
            shape[d] = x->shape[d];
    else
        shape[0] = x->shape[1];
    return TGL_OK;
}

/* 1 / sqrt(var + eps), and s = w / sqrt(var + eps) (w may be NULL). */
static void inv_and_scale(tgl_ctx *ctx, tgl_node *var, tgl_node *w, double eps, tgl_node **ve,
                          tgl_node **invstd, tgl_node **s)
{
    *ve = tgl_mk2(ctx, TGL_OP_ADD, var, scalar_like(ctx, var, eps));
    *invstd = tgl_mk2(ctx, TGL_OP_DIV, scalar_like(ctx, var, 1.0), tgl_mk1(ctx, TGL_OP_SQRT, *ve));
    *s = w ? tgl_mk2(ctx, TGL_OP_MUL, w, *invstd) : *invstd;
}

/* batch_norm_grad's three outputs in ordinary ops (in: x, g, mean, var [, w]). */
static void grad_expand(tgl_ctx *ctx, tgl_node *const *in, int nin, double eps, tgl_node **out)
{
    tgl_node *x = in[0], *g = in[1], *mean = in[2], *var = in[3], *w = nin == 5 ? in[4] : NULL;
    int nd = x->type.ndim;
    tgl_node *ve, *invstd, *s;
    inv_and_scale(ctx, var, w, eps, &ve, &invstd, &s);
    tgl_params ap = {0};
    for (int d = 0; d < nd; d++)
        if (d != 1)
            ap.i[ap.n++] = d;
    tgl_node *m = tgl_mk_cast(ctx, tgl_mk(ctx, TGL_OP_AXES_SIZE, 1, &x, &ap), x->type.dtype);
    tgl_node *xc = tgl_mk2(ctx, TGL_OP_SUB, x, along_channels(ctx, mean, nd));
    tgl_node *sg = sum_but_channels(ctx, g);
    tgl_node *sgx = sum_but_channels(ctx, tgl_mk2(ctx, TGL_OP_MUL, g, xc));
    tgl_node *a = tgl_mk2(ctx, TGL_OP_DIV, sg, m);
    tgl_node *b = tgl_mk2(ctx, TGL_OP_DIV, sgx, tgl_mk2(ctx, TGL_OP_MUL, m, ve));
    tgl_node *inner = tgl_mk2(ctx, TGL_OP_SUB,
                              tgl_mk2(ctx, TGL_OP_SUB, g, along_channels(ctx, a, nd)),
                              tgl_mk2(ctx, TGL_OP_MUL, xc, along_channels(ctx, b, nd)));
    out[0] = tgl_mk2(ctx, TGL_OP_MUL, inner, along_channels(ctx, s, nd));
    out[1] = sg;
    out[2] = sgx;
}

/* The pullback of batch_norm_grad: that of its expansion, built on
 * placeholders for its inputs (so tgl_grad does not also walk into what
 * computes them: the caller's own walk does that) and then put on the
 * real inputs. */
static tgl_status grad_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *const *gout, tgl_node **gin)
{
    int nin = n->nin;
    tgl_node *ph[5] = {NULL}, *exp[3] = {NULL}, *kv[3], *kg[3], *res[5] = {NULL};
    tgl_status st = TGL_OK;
    for (int i = 0; i < nin && !st; i++)
        st = tgl_node_input(ctx, n->in[i]->type, "batch_norm_grad_in", &ph[i]);
    if (st)
        return st;
    uint64_t e0 = ctx->nerrors;
    grad_expand(ctx, ph, nin, n->p.f[0], exp);
    if (ctx->nerrors != e0)
        return ctx->last_status ? ctx->last_status : TGL_EINTERNAL;
    int nk = 0;
    for (int k = 0; k < 3; k++)
        if (gout[k]) {
            kv[nk] = exp[k];
            kg[nk++] = gout[k];
        }
    if (nk == 0)
        return TGL_OK;
    st = tgl_grad(ctx, NULL, nin, ph, nk, kv, kg, TGL_DISCONNECTED_ZERO, res);
    if (!st)
        st = tgl_clone_replace(ctx, nin, res, nin, ph, n->in, gin);
    return st;
}

/* Whether mean and var are batch_norm_stats(x)'s outputs 0 and 1. */
static bool stats_of(const tgl_node *x, const tgl_node *mean, const tgl_node *var)
{
    return mean->kind == TGL_NODE_APPLY && var->kind == TGL_NODE_APPLY &&
           mean->op == TGL_OP_OUTPUT && var->op == TGL_OP_OUTPUT && mean->in[0] == var->in[0] &&
           mean->p.i[0] == 0 && var->p.i[0] == 1 && mean->in[0]->op == TGL_OP_BATCH_NORM_STATS &&
           mean->in[0]->in[0] == x;
}

static tgl_status bn_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    tgl_node *x = n->in[0], *mean = n->in[1], *var = n->in[2];
    tgl_node *w = n->nin == 5 ? n->in[3] : NULL;
    int nd = x->type.ndim;
    tgl_node *ve, *invstd, *s;
    inv_and_scale(ctx, var, w, n->p.f[0], &ve, &invstd, &s);
    tgl_node *sg, *sgx;
    if (stats_of(x, mean, var)) {
        /* the training form: dx through the statistics at once */
        tgl_node *in[5] = {x, g, mean, var, w}, *gn, *o[3];
        tgl_params p = {0};
        p.f[0] = n->p.f[0];
        gn = tgl_mk(ctx, TGL_OP_BATCH_NORM_GRAD, w ? 5 : 4, in, &p);
        for (int k = 0; k < 3; k++) {
            tgl_status st = gn ? tgl_node_output(ctx, gn, k, &o[k]) : TGL_EINVAL;
            if (st)
                return st;
        }
        gin[0] = o[0];
        sg = o[1];
        sgx = o[2];
    } else {
        tgl_node *xc = tgl_mk2(ctx, TGL_OP_SUB, x, along_channels(ctx, mean, nd));
        sg = sum_but_channels(ctx, g);
        sgx = sum_but_channels(ctx, tgl_mk2(ctx, TGL_OP_MUL, g, xc));
        gin[0] = tgl_mk2(ctx, TGL_OP_MUL, g, along_channels(ctx, s, nd));
        gin[1] = tgl_mk1(ctx, TGL_OP_NEG, tgl_mk2(ctx, TGL_OP_MUL, sg, s));
        /* -Sgx s / (2 (var + eps)) = -Sgx w / (2 (var + eps)^(3/2)) */
        tgl_node *half_s = tgl_mk2(ctx, TGL_OP_DIV, s,
                                   tgl_mk2(ctx, TGL_OP_MUL, scalar_like(ctx, x, -2.0), ve));
        gin[2] = tgl_mk2(ctx, TGL_OP_MUL, sgx, half_s);
    }
    if (w) {
        gin[3] = tgl_mk2(ctx, TGL_OP_MUL, sgx, invstd);
        gin[4] = sg;
    }
    return TGL_OK;
}

static tgl_status stats_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *const *gout, tgl_node **gin)
{
    tgl_node *x = n->in[0];
    int nd = x->type.ndim;
    tgl_params ap = {0};
    for (int d = 0; d < nd; d++)
        if (d != 1)
            ap.i[ap.n++] = d;
    tgl_node *m = tgl_mk_cast(ctx, tgl_mk(ctx, TGL_OP_AXES_SIZE, 1, &x, &ap), x->type.dtype);
    tgl_node *gx = NULL;
    if (gout[1]) {
        tgl_node *mean;
        tgl_status st = tgl_node_output(ctx, n, 0, &mean);
        if (st)
            return st;
        tgl_node *xc = tgl_mk2(ctx, TGL_OP_SUB, x, along_channels(ctx, mean, nd));
        tgl_node *k = tgl_mk2(ctx, TGL_OP_DIV, tgl_mk2(ctx, TGL_OP_MUL, scalar_like(ctx, x, 2.0), gout[1]), m);
        gx = tgl_mk2(ctx, TGL_OP_MUL, xc, along_channels(ctx, k, nd));
    }
    if (gout[0]) {
        tgl_node *gm = along_channels(ctx, tgl_mk2(ctx, TGL_OP_DIV, gout[0], m), nd);
        gx = gx ? tgl_mk2(ctx, TGL_OP_ADD, gx, gm) : gm;
    }
    gin[0] = gx;
    return TGL_OK;
}

const tgl_opimpl tgl_impl_batch_norm = {
    .family = TGL_FAM_NNET,
    .nin_min = 3,
    .nin_max = 5,
    .infer = bn_infer,
    .shape = bn_shape,
    .grad = bn_grad,
    .inplace = tgl_inplace_same_type,
};

const tgl_opimpl tgl_impl_batch_norm_grad = {
    .family = TGL_FAM_NNET,
    .nin_min = 4,
    .nin_max = 5,
    .infer = grad_infer,
    .out_type = grad_out_type,
    .shape_k = grad_shape_k,
    .grad_n = grad_grad,
};

const tgl_opimpl tgl_impl_batch_norm_stats = {
    .family = TGL_FAM_NNET,
    .nin_min = 1,
    .nin_max = 1,
    .infer = stats_infer,
    .out_type = stats_out_type,
    .shape_k = stats_shape_k,
    .grad_n = stats_grad,
};
