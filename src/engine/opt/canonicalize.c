/*
 * canonicalize.c — the first rewrite stage: put expressions in one normal
 * form so later stages match fewer shapes, and do at compile time what
 * need not be done at run time.
 *
 *   constant_fold       op(constants...) -> constant
 *   add_zero            x + 0, 0 + x -> x
 *   sub_zero            x - 0 -> x
 *   mul_one             x * 1, 1 * x -> x ; x * -1 -> -x
 *   div_one             x / 1 -> x
 *   neg_neg             -(-x) -> x
 *   sub_zero_left       0 - x -> -x
 *   mul_self            x * x -> sqr(x)
 *   pow_special         x^1 -> x, x^2 -> sqr, x^0.5 -> sqrt, x^-1 -> recip, x^0 -> 1
 *   mul_consts          c1 * (c2 * x) -> (c1 c2) * x
 *   sum_scalar          sum(c * x) -> c * sum(x) ; sum(-x) -> -sum(x)
 *   dimshuffle_chain    dimshuffle(dimshuffle(x)) -> one dimshuffle ; identity -> x
 *   reshape_chain       reshape(reshape(x)) -> reshape(x)
 *   cast_chain          cast(cast(x, wider), x's dtype) -> x
 *   subtensor_whole     x[{}, {}, ...] (every axis whole) -> x
 *   fill_source         fill_like(f(x, ...), c) -> fill_like(x, c) when f is
 *                       elementwise and its result has x's shape
 *   fill_elemwise       f(fill_like(x, c), a) -> f(c, a) when a's shape is
 *                       provably x's (then x * 1, x + 0 ... simplify)
 *
 * Each rule keeps the node's exact type (dtype, rank and broadcast
 * pattern); where the simpler form would change it, the rule does not
 * fire.
 *
 * The two fill rules are for gradients: the pullback of sum(e) is
 * fill_like(e, 1) times the output gradient, so every gradient through a
 * sum of an elementwise expression starts from an array of ones shaped
 * like e.  When a factor it meets has that shape anyway (2 h for
 * sum(h^2)), the ones only carry the shape, and the product of the
 * factors is the gradient: no array of ones, and e need not be computed
 * for its shape (Theano: local_fill_to_alloc, local_mul_canonizer).
 * Types are static, so two leaves of one elementwise expression with the
 * same rank and broadcast pattern have the same shape whenever the
 * expression runs without error, and the rule's type check alone keeps
 * every result's shape.  It fires only where the shapes are also proved
 * equal from the graph (match.c, tgl_same_shape: the same node, or
 * elementwise functions of one node), so that x^0 * y still fails when
 * y's shape is not x's: a shape error stays an error.  (One the fill's
 * source alone would raise, when nothing else computes it, is not.)
 */
#include "engine/opt/opt.h"
#include "engine/backend.h"

#include <math.h>
#include <string.h>

/* Outputs larger than this are not folded (they would bloat the graph). */
#define FOLD_MAX_ELEMENTS (1 << 20)

static tgl_node *constant_fold(tgl_rewriter *rw, tgl_node *n)
{
    const tgl_opimpl *impl = tgl_op_impl(n->op);
    if (impl->flags & (TGL_OPF_LAZY | TGL_OPF_EFFECT) || n->nin == 0 ||
        (!impl->view && !impl->shape))
        return NULL; /* lazy, a collective, a leaf, or multi-output (fused, scan) */
    tgl_array *in[16];
    if (n->nin > 16)
        return NULL;
    for (int i = 0; i < n->nin; i++) {
        if (n->in[i]->kind != TGL_NODE_CONSTANT)
            return NULL;
        in[i] = n->in[i]->value;
    }
    tgl_array *out = NULL;
    tgl_status st;
    if (impl->view) {
        st = impl->view(rw->ctx, n, in, &out);
    } else {
        int64_t shape[TGL_MAX_DIMS], size = 1;
        st = impl->shape(rw->ctx, n, in, shape);
        for (int d = 0; !st && d < n->type.ndim; d++)
            size *= shape[d];
        if (!st && size > FOLD_MAX_ELEMENTS)
            return NULL;
        /* The constants' own device runs the op (cpu: constants are host
         * arrays). */
        const tgl_backend *be = tgl_backend_get(in[0]->device);
        const tgl_op_kernel *kern = NULL;
        if (!st)
            st = tgl_backend_op_kernel(rw->ctx, be, n, &kern);
        if (!st)
            st = tgl_array_alloc_on(rw->ctx, "constant_fold", be->device, n->type.dtype,
                                    n->type.ndim, shape, false, &out);
        if (!st && (st = kern->run(rw->ctx, n, in, out))) {
            tgl_array_release(out);
            out = NULL;
        }
    }
    if (st || !out) /* e.g. a shape error: leave it to fail at run time */
        return NULL;
    tgl_node *c = NULL;
    st = tgl_node_constant(rw->ctx, out, &c);
    tgl_array_release(out);
    if (st)
        return NULL;
    /* The folded constant's broadcast pattern comes from its shape; pad
     * or keep only when it matches the node's type. */
    if (c->type.ndim != n->type.ndim || (c->type.bcast & n->type.bcast) != n->type.bcast)
        return NULL;
    return c;
}

static tgl_node *add_zero(tgl_rewriter *rw, tgl_node *n)
{
    (void)rw;
    if (tgl_is_const(n->in[1], 0))
        return tgl_if_same_type(n, n->in[0]);
    if (n->op == TGL_OP_ADD && tgl_is_const(n->in[0], 0))
        return tgl_if_same_type(n, n->in[1]);
    return NULL;
}

static tgl_node *sub_zero_left(tgl_rewriter *rw, tgl_node *n)
{
    if (!tgl_is_const(n->in[0], 0) || !tgl_dtype_is_float(n->type.dtype))
        return NULL;
    return tgl_if_same_type(n, tgl_mk1(rw->ctx, TGL_OP_NEG, n->in[1]));
}

static tgl_node *mul_one(tgl_rewriter *rw, tgl_node *n)
{
    double v;
    if (n->op == TGL_OP_DIV)
        return tgl_is_const(n->in[1], 1) ? tgl_if_same_type(n, n->in[0]) : NULL;
    for (int side = 0; side < 2; side++) {
        tgl_node *c = n->in[side], *x = n->in[1 - side];
        if (!tgl_const_value(c, &v))
            continue;
        if (v == 1)
            return tgl_if_same_type(n, x);
        if (v == -1 && x->type.dtype != TGL_BOOL)
            return tgl_if_same_type(n, tgl_mk1(rw->ctx, TGL_OP_NEG, x));
    }
    return NULL;
}

static tgl_node *neg_neg(tgl_rewriter *rw, tgl_node *n)
{
    (void)rw;
    tgl_node *x = n->in[0];
    if (x->kind == TGL_NODE_APPLY && x->op == TGL_OP_NEG)
        return tgl_if_same_type(n, x->in[0]);
    return NULL;
}

static tgl_node *mul_self(tgl_rewriter *rw, tgl_node *n)
{
    if (n->in[0] != n->in[1])
        return NULL;
    return tgl_if_same_type(n, tgl_mk1(rw->ctx, TGL_OP_SQR, n->in[0]));
}

static tgl_node *pow_special(tgl_rewriter *rw, tgl_node *n)
{
    double e;
    tgl_node *x = n->in[0];
    if (!tgl_const_value(n->in[1], &e) || !tgl_dtype_is_float(n->type.dtype))
        return NULL;
    tgl_ctx *ctx = rw->ctx;
    tgl_node *r = NULL;
    if (e == 1)
        r = x;
    else if (e == 2)
        r = tgl_mk1(ctx, TGL_OP_SQR, x);
    else if (e == 0.5)
        r = tgl_mk1(ctx, TGL_OP_SQRT, x);
    else if (e == -1)
        r = tgl_mk1(ctx, TGL_OP_RECIP, x);
    else if (e == 3)
        r = tgl_mk2(ctx, TGL_OP_MUL, tgl_mk1(ctx, TGL_OP_SQR, x), x);
    else if (e == 0)
        r = tgl_mk_fill_like(ctx, x, n->type.dtype, 1.0);
    r = tgl_mk_cast(ctx, r, n->type.dtype);
    return r ? tgl_if_same_type(n, r) : NULL;
}

/* c1 * (c2 * x) -> (c1 c2) * x, for scalar constants. */
static tgl_node *mul_consts(tgl_rewriter *rw, tgl_node *n)
{
    double c1, c2;
    for (int side = 0; side < 2; side++) {
        tgl_node *inner = n->in[1 - side];
        if (!tgl_const_value(n->in[side], &c1) || inner->kind != TGL_NODE_APPLY ||
            inner->op != TGL_OP_MUL || !tgl_dtype_is_float(n->type.dtype))
            continue;
        if (!tgl_scalar_const(n->in[side], &c1))
            continue;
        for (int k = 0; k < 2; k++) {
            if (!tgl_scalar_const(inner->in[k], &c2))
                continue;
            tgl_node *c = tgl_mk_scalar(rw->ctx, n->type.dtype, c1 * c2);
            return tgl_if_same_type(n, tgl_mk2(rw->ctx, TGL_OP_MUL, c, inner->in[1 - k]));
        }
    }
    return NULL;
}

/* sum(c * x) -> c * sum(x), sum(x / c) -> sum(x) / c, sum(-x) -> -sum(x):
 * the scalar work moves from every element to the result. */
static tgl_node *sum_scalar(tgl_rewriter *rw, tgl_node *n)
{
    tgl_node *e = n->in[0];
    if (e->kind != TGL_NODE_APPLY || !tgl_dtype_is_float(n->type.dtype))
        return NULL;
    tgl_ctx *ctx = rw->ctx;
    tgl_node *sum_of = NULL, *c = NULL;
    int op = TGL_OP_MUL;
    double v;
    if (e->op == TGL_OP_NEG) {
        sum_of = e->in[0];
    } else if (e->op == TGL_OP_MUL || e->op == TGL_OP_DIV) {
        for (int k = (e->op == TGL_OP_DIV ? 1 : 0); k < 2; k++)
            if (tgl_scalar_const(e->in[k], &v)) {
                c = tgl_mk_scalar(ctx, e->in[k]->type.dtype, v);
                sum_of = e->in[1 - k];
                op = e->op;
                break;
            }
    }
    if (!sum_of || !tgl_same_type(sum_of, e))
        return NULL;
    tgl_node *s = tgl_mk(ctx, TGL_OP_SUM, 1, &sum_of, &n->p);
    tgl_node *r = c ? (op == TGL_OP_DIV ? tgl_mk2(ctx, TGL_OP_DIV, s, c) : tgl_mk2(ctx, TGL_OP_MUL, c, s))
                    : tgl_mk1(ctx, TGL_OP_NEG, s);
    return tgl_if_same_type(n, r);
}

static tgl_node *dimshuffle_chain(tgl_rewriter *rw, tgl_node *n)
{
    tgl_node *x = n->in[0];
    bool identity = n->p.n == x->type.ndim;
    for (int k = 0; identity && k < n->p.n; k++)
        identity = n->p.i[k] == k;
    if (identity)
        return tgl_if_same_type(n, x);
    if (x->kind != TGL_NODE_APPLY || x->op != TGL_OP_DIMSHUFFLE)
        return NULL;
    int64_t order[TGL_MAX_DIMS];
    for (int k = 0; k < n->p.n; k++)
        order[k] = n->p.i[k] < 0 ? -1 : x->p.i[n->p.i[k]];
    return tgl_if_same_type(n, tgl_mk_dimshuffle(rw->ctx, x->in[0], n->p.n, order));
}

static tgl_node *reshape_chain(tgl_rewriter *rw, tgl_node *n)
{
    tgl_node *x = n->in[0];
    if (x->kind != TGL_NODE_APPLY || x->op != TGL_OP_RESHAPE)
        return NULL;
    if (n->nin == 1)
        for (int k = 0; k < n->p.n; k++)
            if (n->p.i[k] <= -2)
                return NULL; /* copies an axis of the intermediate shape */
    tgl_node *in[2] = {x->in[0], n->nin == 2 ? n->in[1] : NULL};
    return tgl_if_same_type(n, tgl_mk(rw->ctx, TGL_OP_RESHAPE, n->nin, in, &n->p));
}

static tgl_node *cast_chain(tgl_rewriter *rw, tgl_node *n)
{
    (void)rw;
    tgl_node *mid = n->in[0];
    if (mid->kind != TGL_NODE_APPLY || mid->op != TGL_OP_CAST)
        return NULL;
    tgl_node *x = mid->in[0];
    /* Widening then narrowing back is exact only float->float or
     * int->wider int->same int. */
    bool exact = x->type.dtype == n->type.dtype &&
                 tgl_dtype_promote(mid->type.dtype, x->type.dtype) == mid->type.dtype &&
                 (tgl_dtype_is_float(x->type.dtype) == tgl_dtype_is_float(mid->type.dtype) ||
                  (!tgl_dtype_is_float(x->type.dtype) && mid->type.dtype == TGL_FLOAT64 &&
                   x->type.dtype != TGL_INT64));
    return exact ? tgl_if_same_type(n, x) : NULL;
}

static tgl_node *subtensor_whole(tgl_rewriter *rw, tgl_node *n)
{
    (void)rw;
    if (n->nin != 1)
        return NULL;
    for (int k = 0; k < n->p.n / 4; k++) {
        int64_t kind = n->p.i[4 * k];
        if (kind != (TGL_IDX_SLICE | TGL_IDX_NO_START | TGL_IDX_NO_STOP) || n->p.i[4 * k + 3] != 1)
            return NULL;
    }
    return tgl_if_same_type(n, n->in[0]);
}

/* fill_like(e, c) -> fill_like(x, c), where x has e's shape by shape
 * steps (match.c): e = f(..., x, ...) elementwise with x of e's rank and
 * broadcast pattern (the other inputs broadcast to it), or a chain of
 * them, or e = fill_like(x, c').  The fill then no longer needs e
 * computed for its shape.  But the fill reads x's buffer when it runs, so
 * x must be held until then: x is a leaf (held for the whole call), or
 * else a node with other readers (the first found, breadth first).  A
 * node read only by the next step of the chain (the product in
 * tanh(a . b)) is never taken: it could stay alive until the fill runs
 * where it was freed, or computed over in place, right after its reader. */
static tgl_node *fill_source(tgl_rewriter *rw, tgl_node *n)
{
    tgl_node *e = n->in[0], *x = NULL;
    if (e->kind == TGL_NODE_APPLY && e->op == TGL_OP_FILL_LIKE) {
        x = e->in[0];
    } else {
        tgl_node *cls[TGL_SHAPE_CLASS_MAX];
        int nc = tgl_shape_class(e, cls, TGL_SHAPE_CLASS_MAX);
        for (int k = 1; k < nc && !x; k++)
            if (cls[k]->kind != TGL_NODE_APPLY)
                x = cls[k];
        for (int k = 1; k < nc && !x; k++)
            if (tgl_rw_clients(rw, cls[k]) >= 2)
                x = cls[k];
    }
    return x ? tgl_if_same_type(n, tgl_mk(rw->ctx, TGL_OP_FILL_LIKE, 1, &x, &n->p)) : NULL;
}

/* Elementwise levels fill_elemwise looks through under an input: the
 * rule is tried on every elementwise node, and a pullback nests the sum's
 * fill one level (g * f'(x)) or two (-(g * ...) for a subtraction); on
 * random gradient graphs 4 levels removed 1% more fills than 2 and made
 * the whole rewrite of a 2000-level chain's gradient 6% slower. */
#define FILL_DEPTH 2

/* True when an input of n other than input skip provably has x's shape:
 * n's result is then as large without the fill of x's shape. */
static bool shape_given(tgl_node *n, int skip, tgl_node *x)
{
    for (int j = 0; j < n->nin; j++)
        if (j != skip && tgl_same_shape(n->in[j], x))
            return true;
    return false;
}

/* m, an input subtree of n (input skip), with one fill_like(x, c) in it
 * replaced by the scalar c: m itself, or within depth elementwise levels
 * under m, where x's shape is given by another input of n.  Every level
 * is elementwise, so n's shape is the broadcast of the leaves' shapes,
 * x's among them, and that other input still provides it; each element
 * of the fill is c, so every value is unchanged.  The levels rebuilt keep
 * their dtype (elementwise dtypes follow the inputs' dtypes only). NULL
 * when there is no such fill. */
static tgl_node *without_fill(tgl_ctx *ctx, tgl_node *n, int skip, tgl_node *m, int depth)
{
    if (m->kind != TGL_NODE_APPLY)
        return NULL;
    if (m->op == TGL_OP_FILL_LIKE)
        return shape_given(n, skip, m->in[0]) ? tgl_mk_scalar(ctx, m->type.dtype, m->p.f[0])
                                              : NULL;
    if (depth == 0 || tgl_op_impl(m->op)->family != TGL_FAM_ELEMWISE || m->nin > 3)
        return NULL;
    for (int k = 0; k < m->nin; k++) {
        tgl_node *r = without_fill(ctx, n, skip, m->in[k], depth - 1);
        if (!r)
            continue;
        tgl_node *ins[3];
        for (int i = 0; i < m->nin; i++)
            ins[i] = i == k ? r : m->in[i];
        tgl_node *m2 = tgl_mk(ctx, m->op, m->nin, ins, &m->p);
        if (!m2 || m2->type.dtype != m->type.dtype || m2->type.ndim != m->type.ndim)
            return NULL;
        return m2;
    }
    return NULL;
}

/* f(..., fill_like(x, c), ..., a, ...) -> f(..., c, ..., a, ...) when a
 * provably has x's shape (tgl_same_shape), also for a fill a few
 * elementwise levels down: (fill_like(x, 1) * g) * a -> (1 * g) * a.
 * mul_one, add_zero and the others then finish: a gradient
 * fill_like(h^2, 1) * (2 h) becomes 2 h.  One fill per firing; the
 * driver rewrites the result again. */
static tgl_node *fill_elemwise(tgl_rewriter *rw, tgl_node *n)
{
    if (tgl_op_impl(n->op)->family != TGL_FAM_ELEMWISE || n->nin < 2 || n->nin > 3)
        return NULL;
    for (int i = 0; i < n->nin; i++) {
        tgl_node *r = without_fill(rw->ctx, n, i, n->in[i], FILL_DEPTH);
        if (!r)
            continue;
        tgl_node *ins[3];
        for (int k = 0; k < n->nin; k++)
            ins[k] = k == i ? r : n->in[k];
        return tgl_if_same_type(n, tgl_mk(rw->ctx, n->op, n->nin, ins, &n->p));
    }
    return NULL;
}

const tgl_rule tgl_rules_canonicalize[] = {
    {"constant_fold", -1, constant_fold, "op(constants...) -> constant"},
    {"add_zero", TGL_OP_ADD, add_zero, "x + 0, 0 + x -> x"},
    {"sub_zero", TGL_OP_SUB, add_zero, "x - 0 -> x"},
    {"sub_zero_left", TGL_OP_SUB, sub_zero_left, "0 - x -> -x"},
    {"mul_one", TGL_OP_MUL, mul_one, "x * 1 -> x ; x * -1 -> -x"},
    {"div_one", TGL_OP_DIV, mul_one, "x / 1 -> x"},
    {"neg_neg", TGL_OP_NEG, neg_neg, "-(-x) -> x"},
    {"mul_self", TGL_OP_MUL, mul_self, "x * x -> sqr(x)"},
    {"pow_special", TGL_OP_POW, pow_special, "x^1, x^2, x^3, x^0.5, x^-1, x^0 specialized"},
    {"mul_consts", TGL_OP_MUL, mul_consts, "c1 * (c2 * x) -> (c1 c2) * x"},
    {"sum_scalar", TGL_OP_SUM, sum_scalar, "sum(c * x) -> c * sum(x) ; sum(-x) -> -sum(x)"},
    {"dimshuffle_chain", TGL_OP_DIMSHUFFLE, dimshuffle_chain,
     "dimshuffle(dimshuffle(x)) -> dimshuffle(x) ; identity dimshuffle -> x"},
    {"reshape_chain", TGL_OP_RESHAPE, reshape_chain, "reshape(reshape(x)) -> reshape(x)"},
    {"cast_chain", TGL_OP_CAST, cast_chain, "cast(cast(x, wider), dtype of x) -> x"},
    {"subtensor_whole", TGL_OP_SUBTENSOR, subtensor_whole, "x[whole axes] -> x"},
    {"fill_source", TGL_OP_FILL_LIKE, fill_source,
     "fill_like(f(x, ...), c) -> fill_like(x, c) (f elementwise, of x's shape)"},
    {"fill_elemwise", -1, fill_elemwise,
     "f(fill_like(x, c), a) -> f(c, a) when a's shape is provably x's (elementwise f)"},
};
const int tgl_nrules_canonicalize = sizeof tgl_rules_canonicalize / sizeof tgl_rules_canonicalize[0];
