/*
 * stabilize.c — the second rewrite stage: replace forms that overflow,
 * underflow or cancel in floating point by equivalent stable ones.
 * tgl.grad runs this stage on the cost before differentiating, so the
 * gradients are built from the stable forms too (the gradient of
 * log_softmax is finite where the gradient of log(softmax) is not).
 *
 *   log_sigmoid      log(sigmoid(x))        -> -softplus(-x)
 *   log1m_sigmoid    log(1 - sigmoid(x))    -> -softplus(x)
 *   log1p_exp        log(1 + exp(x))        -> softplus(x)
 *   log1p            log(1 + x)             -> log1p(x)
 *   expm1            exp(x) - 1             -> expm1(x)
 *   log_softmax      log(softmax(x))        -> log_softmax(x)
 *   log_gather       log(softmax(x)[idx])   -> log_softmax(x)[idx]
 *   logsumexp        log(sum(exp(x)))       -> m + log(sum(exp(x - m))), m = max(x)
 *   softmax_xent     log_softmax(x)[rows, labels] -> -softmax_crossentropy(x, labels)
 *                    (rows: arange over x's rows, or the constants 1..k: x's first k)
 *                    (rows = 1..#rows: categorical_crossentropy on integer labels;
 *                    one fused op whose gradient, softmax - onehot, is finite)
 */
#include "engine/opt/opt.h"

static bool is_op(const tgl_node *n, int op)
{
    return n->kind == TGL_NODE_APPLY && n->op == op;
}

/* The operand of 1 + a (either order), or NULL. */
static tgl_node *one_plus(tgl_node *n)
{
    if (!is_op(n, TGL_OP_ADD))
        return NULL;
    if (tgl_is_const(n->in[0], 1))
        return n->in[1];
    if (tgl_is_const(n->in[1], 1))
        return n->in[0];
    return NULL;
}

static tgl_node *log_sigmoid(tgl_rewriter *rw, tgl_node *n)
{
    tgl_node *s = n->in[0];
    if (!is_op(s, TGL_OP_SIGMOID))
        return NULL;
    tgl_ctx *ctx = rw->ctx;
    return tgl_if_same_type(n, tgl_mk1(ctx, TGL_OP_NEG,
                                       tgl_mk1(ctx, TGL_OP_SOFTPLUS,
                                               tgl_mk1(ctx, TGL_OP_NEG, s->in[0]))));
}

static tgl_node *log1m_sigmoid(tgl_rewriter *rw, tgl_node *n)
{
    tgl_node *d = n->in[0];
    if (!is_op(d, TGL_OP_SUB) || !tgl_is_const(d->in[0], 1) || !is_op(d->in[1], TGL_OP_SIGMOID))
        return NULL;
    tgl_ctx *ctx = rw->ctx;
    return tgl_if_same_type(n, tgl_mk1(ctx, TGL_OP_NEG,
                                       tgl_mk1(ctx, TGL_OP_SOFTPLUS, d->in[1]->in[0])));
}

static tgl_node *log1p_exp(tgl_rewriter *rw, tgl_node *n)
{
    tgl_node *a = one_plus(n->in[0]);
    if (!a || !is_op(a, TGL_OP_EXP))
        return NULL;
    return tgl_if_same_type(n, tgl_mk1(rw->ctx, TGL_OP_SOFTPLUS, a->in[0]));
}

static tgl_node *log1p_rule(tgl_rewriter *rw, tgl_node *n)
{
    tgl_node *a = one_plus(n->in[0]);
    if (!a || is_op(a, TGL_OP_EXP))
        return NULL; /* log1p_exp does better */
    return tgl_if_same_type(n, tgl_mk1(rw->ctx, TGL_OP_LOG1P, a));
}

static tgl_node *expm1_rule(tgl_rewriter *rw, tgl_node *n)
{
    if (!is_op(n->in[0], TGL_OP_EXP) || !tgl_is_const(n->in[1], 1))
        return NULL;
    return tgl_if_same_type(n, tgl_mk1(rw->ctx, TGL_OP_EXPM1, n->in[0]->in[0]));
}

static tgl_node *log_softmax_rule(tgl_rewriter *rw, tgl_node *n)
{
    tgl_node *s = n->in[0];
    if (!is_op(s, TGL_OP_SOFTMAX))
        return NULL;
    return tgl_if_same_type(n, tgl_mk(rw->ctx, TGL_OP_LOG_SOFTMAX, 1, s->in, &s->p));
}

/* log of elements picked out of a softmax: pick them out of log_softmax
 * (crossentropy on integer labels is -log(softmax(x)[rows, labels])). */
static tgl_node *log_gather(tgl_rewriter *rw, tgl_node *n)
{
    tgl_node *g = n->in[0];
    if (!(is_op(g, TGL_OP_ADV_SUBTENSOR) || is_op(g, TGL_OP_SUBTENSOR)) ||
        !is_op(g->in[0], TGL_OP_SOFTMAX))
        return NULL;
    tgl_ctx *ctx = rw->ctx;
    tgl_node *s = g->in[0];
    tgl_node *ins[16];
    if (g->nin > 16)
        return NULL;
    ins[0] = tgl_mk(ctx, TGL_OP_LOG_SOFTMAX, 1, s->in, &s->p);
    for (int k = 1; k < g->nin; k++)
        ins[k] = g->in[k];
    return tgl_if_same_type(n, tgl_mk(ctx, g->op, g->nin, ins, &g->p));
}

/* log(sum(exp(x), axes)) = m + log(sum(exp(x - m), axes)) with m the max
 * over the same axes: finite however large x is.  An infinite max is
 * replaced by 0 (a row of -inf gives log 0 = -inf, a row with +inf gives
 * +inf, instead of inf - inf = NaN). */
static tgl_node *logsumexp(tgl_rewriter *rw, tgl_node *n)
{
    tgl_node *s = n->in[0];
    if (!is_op(s, TGL_OP_SUM) || !is_op(s->in[0], TGL_OP_EXP) || s->p.n == 0)
        return NULL;
    tgl_node *x = s->in[0]->in[0];
    /* Already shifted (this rule's own output): x - switch(.., max, 0). */
    if (is_op(x, TGL_OP_SUB) && is_op(x->in[1], TGL_OP_SWITCH) &&
        is_op(x->in[1]->in[1], TGL_OP_MAX) && x->in[1]->in[1]->in[0] == x->in[0])
        return NULL;
    tgl_ctx *ctx = rw->ctx;
    int dt = x->type.dtype;
    bool keep = s->p.flags & TGL_REDUCE_KEEPDIMS;
    tgl_node *zero = tgl_mk_scalar(ctx, dt, 0.0);
    tgl_node *mk = tgl_mk_params(ctx, TGL_OP_MAX, 1, &x, s->p.n, s->p.i, TGL_REDUCE_KEEPDIMS);
    /* m * 0 == 0 exactly when m is finite. */
    tgl_node *finite = tgl_mk2(ctx, TGL_OP_EQ, tgl_mk2(ctx, TGL_OP_MUL, mk, zero), zero);
    tgl_node *shift = tgl_mk3(ctx, TGL_OP_SWITCH, finite, mk, zero);
    tgl_node *shifted = tgl_mk1(ctx, TGL_OP_EXP, tgl_mk2(ctx, TGL_OP_SUB, x, shift));
    tgl_node *sum = tgl_mk(ctx, TGL_OP_SUM, 1, &shifted, &s->p);
    tgl_node *m = shift;
    if (!keep && shift) {
        int64_t order[TGL_MAX_DIMS];
        int nd = 0;
        uint32_t mask = 0;
        for (int k = 0; k < s->p.n; k++)
            mask |= 1u << s->p.i[k];
        for (int d = 0; d < x->type.ndim; d++)
            if (!((mask >> d) & 1u))
                order[nd++] = d;
        m = tgl_mk_dimshuffle(ctx, shift, nd, order);
    }
    return tgl_if_same_type(n, tgl_mk2(ctx, TGL_OP_ADD, m, tgl_mk1(ctx, TGL_OP_LOG, sum)));
}

/* rows is arange(1, number of rows of x, 1), with the count taken from x
 * or from its softmax / log_softmax (which have x's shape). */
static bool all_rows(const tgl_node *rows, const tgl_node *x)
{
    if (!is_op(rows, TGL_OP_ARANGE) || !tgl_is_const(rows->in[0], 1) ||
        !tgl_is_const(rows->in[2], 1))
        return false;
    const tgl_node *stop = rows->in[1];
    if (!is_op(stop, TGL_OP_AXES_SIZE) || stop->p.n != 1 || stop->p.i[0] != 0)
        return false;
    const tgl_node *z = stop->in[0];
    return z == x || ((is_op(z, TGL_OP_SOFTMAX) || is_op(z, TGL_OP_LOG_SOFTMAX)) && z->in[0] == x);
}

/* The length n of rows when it is a constant integer vector 1, 2, ..., n
 * (what tgl.arange(T) with a number T folds into), else -1. */
static int64_t first_rows(const tgl_node *rows)
{
    if (rows->kind != TGL_NODE_CONSTANT || rows->type.ndim != 1 ||
        (rows->value->dtype_id != TGL_INT32 && rows->value->dtype_id != TGL_INT64) ||
        rows->value->size < 1)
        return -1;
    const tgl_array *a = rows->value; /* constants are contiguous copies */
    for (int64_t i = 0; i < a->size; i++)
        if (tgl_load_as_double(a->dtype_id, a->data, i) != (double)(i + 1))
            return -1;
    return a->size;
}

static tgl_node *softmax_xent(tgl_rewriter *rw, tgl_node *n)
{
    tgl_node *ls = n->in[0];
    if (n->nin != 3 || n->p.n != 2 || n->p.i[0] != 1 || n->p.i[1] != 1 ||
        !is_op(ls, TGL_OP_LOG_SOFTMAX) || ls->p.i[0] != 1 || ls->type.ndim != 2)
        return NULL;
    tgl_node *x = ls->in[0], *labels = n->in[2];
    if (labels->type.ndim != 1)
        return NULL;
    tgl_ctx *ctx = rw->ctx;
    if (!all_rows(n->in[1], x)) {
        /* Rows 1..k given as constants: the first k rows of x, whose
         * count the op checks against the labels' (x with fewer rows
         * than k fails there instead of in the indexing). */
        int64_t k = first_rows(n->in[1]);
        if (k < 0)
            return NULL;
        tgl_params sp = {0};
        sp.n = 4;
        sp.i[0] = TGL_IDX_SLICE;
        sp.i[1] = 0;
        sp.i[2] = k;
        sp.i[3] = 1;
        x = tgl_mk(ctx, TGL_OP_SUBTENSOR, 1, &x, &sp);
    }
    return tgl_if_same_type(n, tgl_mk1(ctx, TGL_OP_NEG,
                                       tgl_mk2(ctx, TGL_OP_SOFTMAX_XENT, x, labels)));
}

const tgl_rule tgl_rules_stabilize[] = {
    {"softmax_xent", TGL_OP_ADV_SUBTENSOR, softmax_xent,
     "log_softmax(x)[rows, labels] -> -softmax_crossentropy(x, labels)"},
    {"log_sigmoid", TGL_OP_LOG, log_sigmoid, "log(sigmoid(x)) -> -softplus(-x)"},
    {"log1m_sigmoid", TGL_OP_LOG, log1m_sigmoid, "log(1 - sigmoid(x)) -> -softplus(x)"},
    {"log1p_exp", TGL_OP_LOG, log1p_exp, "log(1 + exp(x)) -> softplus(x)"},
    {"log1p", TGL_OP_LOG, log1p_rule, "log(1 + x) -> log1p(x)"},
    {"expm1", TGL_OP_SUB, expm1_rule, "exp(x) - 1 -> expm1(x)"},
    {"log_softmax", TGL_OP_LOG, log_softmax_rule, "log(softmax(x)) -> log_softmax(x)"},
    {"log_gather", TGL_OP_LOG, log_gather, "log(softmax(x)[idx]) -> log_softmax(x)[idx]"},
    {"logsumexp", TGL_OP_LOG, logsumexp, "log(sum(exp(x))) -> max + log(sum(exp(x - max)))"},
};
const int tgl_nrules_stabilize = sizeof tgl_rules_stabilize / sizeof tgl_rules_stabilize[0];
