/*
 * specialize.c — the third rewrite stage: replace general forms by the
 * specialized ops that run them fastest.  Dot products absorb the scale
 * factors and accumulations around them into one BLAS call:
 *
 *   gemm_add     c + s a.b                          -> gemm(a, b, c; s, 1)
 *   gemm_sub     c - s a.b, s a.b - c               -> gemm(a, b, c; -s, 1 / s, -1)
 *   gemm_scale   s * a.b                            -> gemm(a, b; s)
 *                (gemm_add/gemm_sub with s a runtime scalar, every axis
 *                broadcastable, and a matrix product: gemm(s a, b, c; ±1, 1),
 *                the scale on the left factor)
 *   dot_transposed (a.b)'                           -> b'.a'
 *                (each also makes gemv for matrix.vector and vector.matrix)
 *   ger_add      A + s x y'                         -> ger(A, x, y; s)
 *   ger_sub      A - s x y'                         -> ger(A, x, y; -s)
 *   sparse_add   c + s inc(zeros_like(c), v, idx)   -> inc(c, s v, idx)
 *   sparse_sub   c - s inc(zeros_like(c), v, idx)   -> inc(c, -s v, idx)
 *                (inc: inc_subtensor or adv_inc_subtensor; a row lookup's
 *                gradient in an SGD update touches only the rows used;
 *                zeros_like(x) will do for zeros_like(c) when x's shape
 *                is provably c's, see fill_source)
 *
 * A product used by more than one node is left alone (folding it into
 * each user would compute it twice).  The SGD update W - lr * (x'.d)
 * becomes one gemm (also with lr an input, and for a weight stored out x
 * in, after dot_transposed); the memory planner runs it in place: over an
 * intermediate accumulator, or over W itself as a deferred update
 * (plan.c).
 */
#include "engine/opt/opt.h"

#include <string.h>

static bool is_op(const tgl_node *n, int op)
{
    return n->kind == TGL_NODE_APPLY && n->op == op;
}

/* A product operand: dot(a, b), gemm(a, b; s) / gemv(A, x; s) without an
 * accumulator, or a scalar constant times one of those. */
typedef struct product {
    int op;           /* TGL_OP_GEMM (matrix.matrix) or TGL_OP_GEMV         */
    tgl_node *a, *b;  /* for gemv: the matrix and the vector                 */
    double alpha;
    tgl_node *dot;    /* the user's dot: errors name it and its line       */
} product;

static tgl_node *transposed(tgl_ctx *ctx, tgl_node *x)
{
    int64_t order[2] = {1, 0};
    return tgl_mk_dimshuffle(ctx, x, 2, order);
}

static bool single_use(const tgl_rewriter *rw, const tgl_node *n)
{
    return tgl_rw_clients(rw, n) == 1;
}

static bool as_product(tgl_rewriter *rw, tgl_node *n, product *p)
{
    double s = 1;
    if (is_op(n, TGL_OP_MUL) && single_use(rw, n)) {
        for (int k = 0; k < 2; k++)
            if (tgl_scalar_const(n->in[k], &s)) {
                n = n->in[1 - k];
                goto found;
            }
        /* A runtime scalar (a learning rate given as an input: every axis
         * broadcastable) times a matrix product scales the product's left
         * factor instead, so the product still folds into one gemm:
         * W - lr (g'.x) -> gemm(lr g', x, W; -1, 1).  The left factor of
         * a weight gradient is the small one (batch x out). */
        for (int k = 0; k < 2; k++) {
            tgl_node *sc = n->in[k], *d = n->in[1 - k];
            tgl_type st = sc->type;
            if (st.ndim != 2 || st.bcast != 3u || st.dtype != d->type.dtype || !is_op(d, TGL_OP_DOT) ||
                !single_use(rw, d) || !tgl_dtype_is_float(d->type.dtype) ||
                d->in[0]->type.ndim != 2 || d->in[1]->type.ndim != 2 ||
                d->in[0]->type.dtype != d->in[1]->type.dtype)
                continue;
            tgl_node *a = tgl_mk2(rw->ctx, TGL_OP_MUL, sc, d->in[0]);
            if (!a || !tgl_type_eq(a->type, d->in[0]->type))
                return false;
            *p = (product){TGL_OP_GEMM, a, d->in[1], 1, d};
            return true;
        }
        return false;
    }
found:
    if (!single_use(rw, n) || !tgl_dtype_is_float(n->type.dtype))
        return false;
    if (is_op(n, TGL_OP_DOT)) {
        int na = n->in[0]->type.ndim, nb = n->in[1]->type.ndim;
        if (na == 2 && nb == 2) {
            *p = (product){TGL_OP_GEMM, n->in[0], n->in[1], s, n};
            return n->in[0]->type.dtype == n->in[1]->type.dtype;
        }
        if (na == 2 && nb == 1) {
            *p = (product){TGL_OP_GEMV, n->in[0], n->in[1], s, n};
            return n->in[0]->type.dtype == n->in[1]->type.dtype;
        }
        if (na == 1 && nb == 2) {
            tgl_node *bt = transposed(rw->ctx, n->in[1]);
            *p = (product){TGL_OP_GEMV, bt, n->in[0], s, n};
            return bt && n->in[0]->type.dtype == n->in[1]->type.dtype;
        }
        return false;
    }
    if ((is_op(n, TGL_OP_GEMM) || is_op(n, TGL_OP_GEMV)) && n->nin == 2) {
        *p = (product){n->op, n->in[0], n->in[1], s * n->p.f[0], n};
        return true;
    }
    return false;
}

static tgl_node *mk_product(tgl_ctx *ctx, const product *p, tgl_node *c, double beta)
{
    tgl_params prm = {0};
    prm.f[0] = p->alpha;
    prm.f[1] = beta;
    tgl_node *in[3] = {p->a, p->b, c};
    tgl_node *r = tgl_mk(ctx, p->op, c ? 3 : 2, in, &prm);
    if (r && !r->origin1) {
        /* Run-time errors (inner sizes) are the dot's: name it and its line. */
        r->origin1 = p->dot->origin1 ? p->dot->origin1 : (int16_t)(TGL_OP_DOT + 1);
        if (!r->source && p->dot->source)
            r->source = strdup(p->dot->source);
    }
    return r;
}

/* c + s a.b and c - s a.b (either order): one BLAS call with c folded in. */
static tgl_node *gemm_acc(tgl_rewriter *rw, tgl_node *n)
{
    for (int k = 0; k < 2; k++) {
        product p;
        if (!as_product(rw, n->in[k], &p))
            continue;
        tgl_node *c = n->in[1 - k];
        if (c->type.dtype != n->type.dtype || c->type.ndim != n->type.ndim)
            continue;
        /* The product must have the result's shape: c may broadcast over
         * it, not the other way round (a 1xN product added to an MxN c). */
        if ((n->in[k]->type.bcast & ~c->type.bcast) != 0)
            continue;
        double beta = 1;
        if (n->op == TGL_OP_SUB) {
            if (k == 1)
                p.alpha = -p.alpha; /* c - s a.b */
            else
                beta = -1;          /* s a.b - c */
        }
        tgl_node *r = mk_product(rw->ctx, &p, c, beta);
        if (r && r->type.ndim == n->type.ndim && (r->type.bcast & ~n->type.bcast) == 0)
            return tgl_if_same_type(n, r) ? r : NULL;
    }
    return NULL;
}

/* x' without a chain of views: the input of a transpose, else x's
 * transpose. */
static tgl_node *flip(tgl_ctx *ctx, tgl_node *x)
{
    if (is_op(x, TGL_OP_DIMSHUFFLE) && x->p.n == 2 && x->p.i[0] == 1 && x->p.i[1] == 0 &&
        x->in[0]->type.ndim == 2)
        return x->in[0];
    return transposed(ctx, x);
}

/* (a.b)' -> b'.a': the product is computed in the layout its users read.
 * A linear layer's weight gradient is the transpose of x'.g (the weight
 * is out x in), and an elementwise pass reading a transposed matrix (the
 * update W - lr g) walks it across rows: the transposes of the operands
 * are BLAS flags, free.  Then W - s (g'.x) is one gemm when s is a
 * constant (gemm_sub). */
static tgl_node *dot_transposed(tgl_rewriter *rw, tgl_node *n)
{
    if (n->p.n != 2 || n->p.i[0] != 1 || n->p.i[1] != 0)
        return NULL;
    tgl_node *d = n->in[0];
    if (!is_op(d, TGL_OP_DOT) || !single_use(rw, d) || !tgl_dtype_is_float(d->type.dtype) ||
        d->in[0]->type.ndim != 2 || d->in[1]->type.ndim != 2)
        return NULL;
    tgl_node *bt = flip(rw->ctx, d->in[1]), *at = flip(rw->ctx, d->in[0]);
    tgl_node *r = bt && at ? tgl_mk2(rw->ctx, TGL_OP_DOT, bt, at) : NULL;
    if (r && !r->origin1) {
        /* run-time errors (inner sizes) are the user's dot's */
        r->origin1 = d->origin1 ? d->origin1 : (int16_t)(TGL_OP_DOT + 1);
        if (!r->source && d->source)
            r->source = strdup(d->source);
    }
    return r ? tgl_if_same_type(n, r) : NULL;
}

/* s * a.b: the scale goes into alpha. */
static tgl_node *gemm_scale(tgl_rewriter *rw, tgl_node *n)
{
    product p;
    if (!as_product(rw, n, &p) || p.alpha == 1)
        return NULL;
    return tgl_if_same_type(n, mk_product(rw->ctx, &p, NULL, 0));
}

/* The outer product x y' as built by tgl.outer and by gradients:
 * dimshuffle(x, {0,'x'}) * dimshuffle(y, {'x',0}), optionally scaled. */
static bool as_outer(tgl_rewriter *rw, tgl_node *n, tgl_node **x, tgl_node **y, double *alpha)
{
    *alpha = 1;
    if (!is_op(n, TGL_OP_MUL) || !single_use(rw, n))
        return false;
    for (int k = 0; k < 2; k++)
        if (tgl_scalar_const(n->in[k], alpha)) {
            n = n->in[1 - k];
            if (!is_op(n, TGL_OP_MUL))
                return false;
            break;
        }
    tgl_node *c = n->in[0], *r = n->in[1];
    if (!is_op(c, TGL_OP_DIMSHUFFLE) || !is_op(r, TGL_OP_DIMSHUFFLE) || c->p.n != 2 || r->p.n != 2)
        return false;
    if (c->p.i[0] != 0 || c->p.i[1] != -1 || r->p.i[0] != -1 || r->p.i[1] != 0)
        return false;
    *x = c->in[0];
    *y = r->in[0];
    return (*x)->type.ndim == 1 && (*y)->type.ndim == 1;
}

static tgl_node *ger_acc(tgl_rewriter *rw, tgl_node *n)
{
    tgl_node *x, *y;
    double alpha;
    for (int k = 0; k < 2; k++) {
        if (n->op == TGL_OP_SUB && k == 0)
            continue; /* only A - s x y' */
        if (!as_outer(rw, n->in[k], &x, &y, &alpha))
            continue;
        tgl_node *a = n->in[1 - k];
        if (a->type.ndim != 2 || a->type.dtype != n->type.dtype || x->type.dtype != a->type.dtype ||
            y->type.dtype != a->type.dtype || !tgl_dtype_is_float(a->type.dtype))
            continue;
        tgl_params prm = {0};
        prm.f[0] = n->op == TGL_OP_SUB ? -alpha : alpha;
        tgl_node *in[3] = {a, x, y};
        tgl_node *r = tgl_mk(rw->ctx, TGL_OP_GER, 3, in, &prm);
        if (r && tgl_same_type(n, r))
            return r;
    }
    return NULL;
}

/* c + s inc(zeros_like(c), v, idx) and c - s inc(...): the gradient of a
 * row lookup (an embedding, Wx[x]) added to c touches only the indexed
 * entries, so it becomes inc(c, s v, idx) (inc: inc_subtensor or
 * adv_inc_subtensor, adding, not setting; repeated indices still add up).
 * An SGD update of the lookup's matrix then runs in place on the shared
 * variable's buffer (plan.c's deferred update), where it was a zero-fill
 * of the whole matrix, a scatter into it and a pass over all of c. */
static tgl_node *sparse_acc(tgl_rewriter *rw, tgl_node *n)
{
    for (int k = 0; k < 2; k++) {
        tgl_node *t = n->in[k], *c = n->in[1 - k];
        double s = 1;
        if (is_op(t, TGL_OP_MUL) && single_use(rw, t)) {
            int j = tgl_scalar_const(t->in[0], &s) ? 0 : tgl_scalar_const(t->in[1], &s) ? 1 : -1;
            if (j < 0)
                continue;
            t = t->in[1 - j];
        }
        if ((!is_op(t, TGL_OP_ADV_INC_SUBTENSOR) && !is_op(t, TGL_OP_INC_SUBTENSOR)) ||
            (t->p.flags & TGL_INC_SET) || !single_use(rw, t) || t->nin > 16)
            continue;
        tgl_node *z = t->in[0];
        if (!is_op(z, TGL_OP_FILL_LIKE) || z->p.f[0] != 0 || !tgl_same_shape(z->in[0], c) ||
            !tgl_same_type(z, c) || !tgl_same_type(c, n) || !tgl_same_type(t, n))
            continue;
        if (n->op == TGL_OP_SUB) {
            if (k == 0)
                continue; /* s inc(...) - c: not an update of c */
            s = -s;
        }
        tgl_ctx *ctx = rw->ctx;
        tgl_node *v = t->in[1];
        if (s != 1)
            v = tgl_mk2(ctx, TGL_OP_MUL, tgl_mk_scalar(ctx, v->type.dtype, s), v);
        tgl_node *ins[16];
        ins[0] = c;
        ins[1] = v;
        for (int i = 2; i < t->nin; i++)
            ins[i] = t->in[i];
        return tgl_if_same_type(n, tgl_mk(ctx, t->op, t->nin, ins, &t->p));
    }
    return NULL;
}

const tgl_rule tgl_rules_specialize[] = {
    {"ger_add", TGL_OP_ADD, ger_acc, "A + s x y' -> ger(A, x, y; s)"},
    {"ger_sub", TGL_OP_SUB, ger_acc, "A - s x y' -> ger(A, x, y; -s)"},
    {"dot_transposed", TGL_OP_DIMSHUFFLE, dot_transposed,
     "(a.b)' -> b'.a' (the product in the layout its users read)"},
    {"gemm_add", TGL_OP_ADD, gemm_acc, "c + s a.b -> gemm(a, b, c; s, 1) (also gemv)"},
    {"gemm_sub", TGL_OP_SUB, gemm_acc, "c - s a.b -> gemm(a, b, c; -s, 1) (also gemv)"},
    {"gemm_scale", TGL_OP_MUL, gemm_scale, "s * a.b -> gemm(a, b; s) (also gemv)"},
    {"sparse_add", TGL_OP_ADD, sparse_acc,
     "c + s inc_subtensor(zeros_like(c), v, idx) -> inc_subtensor(c, s v, idx) (also adv_)"},
    {"sparse_sub", TGL_OP_SUB, sparse_acc,
     "c - s inc_subtensor(zeros_like(c), v, idx) -> inc_subtensor(c, -s v, idx) (also adv_)"},
};
const int tgl_nrules_specialize = sizeof tgl_rules_specialize / sizeof tgl_rules_specialize[0];
