/*
 * rop.c — forward mode: the R-operator (Pearlmutter 1994; Theano's Rop).
 *
 * tgl_rop(f, wrt, v) builds J·v, the directional derivative of f along v,
 * as more graph, in one forward walk: each node's tangent is its
 * pushforward applied to its inputs' tangents.  How an op pushes forward
 * is a property of the op, its Rop rule in the catalog (the rop column of
 * TGL_OPS, engine/ops/ops.h):
 *
 *   OWN           its own rule, opimpl.rop (scan: a loop over a body;
 *                 rop_direction);
 *   DIAGONAL      elementwise ops (and softmax, whose Jacobian is
 *                 symmetric): the pullback applied to the input's tangent
 *                 in place of the output gradient, summed over inputs;
 *   LINEAR(in)    shape and indexing ops, sum, concatenate, ifelse: the op
 *                 itself applied to the tangents of the inputs `in` names
 *                 (zeros where such an input has none), its other inputs
 *                 (indices, shapes, a condition) unchanged;
 *   BILINEAR      dot, batched_dot, conv2d and its pullback ops: the product
 *                 rule f(ta, b) + f(a, tb), inputs 2.. (shapes) unchanged;
 *   FORMULA       a closed form kept here: gemm, gemv, ger (the product
 *                 rule with their scalars and accumulator), log_softmax
 *                 (t - sum(softmax(x) t) along the axis);
 *   PULLBACK      the transposed pullback: with u standing for the output
 *                 gradient, the pullback L(u) is linear in u, so
 *                 d/du <L(u), t> = J t; u is then replaced by zeros (the
 *                 result does not depend on it).  Every op with a pullback
 *                 has a pushforward this way.
 *
 * Integer and boolean values carry no tangent.  Every tangent is fitted to
 * its node's type (rank, broadcast pattern, dtype) so the next op sees
 * what it expects.
 */
#include "engine/ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tgl_node *zeros_like(tgl_ctx *ctx, tgl_node *x)
{
    return tgl_mk_fill_like(ctx, x, x->type.dtype, 0.0);
}

/* t made to n's type: left-padded to its rank, broadcast where n is not
 * broadcastable, cast to its dtype. */
static tgl_node *fit(tgl_ctx *ctx, tgl_node *t, tgl_node *n)
{
    if (!t)
        return NULL;
    tgl_type want = n->type;
    if (t->type.ndim < want.ndim) {
        int64_t order[TGL_MAX_DIMS];
        int pad = want.ndim - t->type.ndim;
        for (int d = 0; d < want.ndim; d++)
            order[d] = d < pad ? -1 : d - pad;
        t = tgl_mk_dimshuffle(ctx, t, want.ndim, order);
        if (!t)
            return NULL;
    }
    if (t->type.ndim != want.ndim) {
        tgl_ctx_set_error(ctx, TGL_EINTERNAL, "Rop: a %d-d tangent for a %d-d value",
                          t->type.ndim, want.ndim);
        return NULL;
    }
    if (t->type.bcast & ~want.bcast)
        t = tgl_mk2(ctx, TGL_OP_ADD, t, zeros_like(ctx, n));
    if (t && t->type.dtype != want.dtype)
        t = tgl_mk_cast(ctx, t, want.dtype);
    return t;
}

static bool carries_tangent(const tgl_node *n)
{
    return tgl_dtype_is_float(n->type.dtype);
}

/* ---- the strategies --------------------------------------------------- */

/* Elementwise (and symmetric-Jacobian) ops: sum over inputs of the
 * pullback with the input's tangent as the output gradient. */
static tgl_node *push_diagonal(tgl_ctx *ctx, tgl_node *n, tgl_node *const *tin)
{
    const tgl_opimpl *impl = tgl_op_impl(n->op);
    tgl_node *sum = NULL;
    tgl_node *gin[8];
    if (n->nin > 8 || !impl->grad)
        return NULL;
    for (int i = 0; i < n->nin; i++) {
        if (!tin[i])
            continue;
        memset(gin, 0, sizeof gin);
        uint64_t e0 = ctx->nerrors;
        /* the pullback expects a gradient of n's type */
        tgl_node *g = fit(ctx, tin[i], n);
        if (!g || impl->grad(ctx, n, g, gin) || ctx->nerrors != e0)
            return NULL;
        if (!gin[i])
            continue;
        sum = sum ? tgl_mk2(ctx, TGL_OP_ADD, sum, gin[i]) : gin[i];
    }
    return sum ? sum : zeros_like(ctx, n);
}

static tgl_node *push_linear(tgl_ctx *ctx, tgl_node *n, tgl_node *const *tin)
{
    tgl_node *stackin[16];
    tgl_node **in = n->nin <= 16 ? stackin : calloc((size_t)n->nin, sizeof *in);
    if (!in)
        return NULL;
    for (int i = 0; i < n->nin; i++) {
        if (!tgl_op_rop_input(n->op, i))
            in[i] = n->in[i];
        else if (tin[i])
            in[i] = fit(ctx, tin[i], n->in[i]);
        else
            in[i] = zeros_like(ctx, n->in[i]);
    }
    tgl_node *r = tgl_mk(ctx, n->op, n->nin, in, &n->p);
    if (in != stackin)
        free(in);
    return r;
}

static tgl_node *scale(tgl_ctx *ctx, tgl_node *x, double s, int dtype)
{
    if (!x || s == 1.0)
        return x;
    return tgl_mk2(ctx, TGL_OP_MUL, x, tgl_mk_scalar(ctx, dtype, s));
}

static tgl_node *add_opt(tgl_ctx *ctx, tgl_node *a, tgl_node *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    return tgl_mk2(ctx, TGL_OP_ADD, a, b);
}

/* The product rule of an op bilinear in its two inputs. */
static tgl_node *push_bilinear(tgl_ctx *ctx, tgl_node *n, tgl_node *const *tin)
{
    tgl_node *a = n->in[0], *b = n->in[1];
    tgl_node *ta = tin[0] ? fit(ctx, tin[0], a) : NULL, *tb = tin[1] ? fit(ctx, tin[1], b) : NULL;
    /* Inputs past the two factors (the shape operand of conv2d's pullback
     * ops) are passed unchanged; a bilinear op has few of them. */
    tgl_node *ia[4], *ib[4];
    if (n->nin > 4) {
        tgl_ctx_set_error(ctx, TGL_EINTERNAL, "Rop: bilinear %s has %d inputs (at most 4)",
                          tgl_op_name(n->op), n->nin);
        return NULL;
    }
    for (int i = 0; i < n->nin; i++)
        ia[i] = ib[i] = n->in[i];
    ia[0] = ta;
    ib[1] = tb;
    return add_opt(ctx, ta ? tgl_mk(ctx, n->op, n->nin, ia, &n->p) : NULL,
                   tb ? tgl_mk(ctx, n->op, n->nin, ib, &n->p) : NULL);
}

/* log_softmax: t - sum(softmax(x) t) along the axis. */
static tgl_node *push_log_softmax(tgl_ctx *ctx, tgl_node *n, tgl_node *const *tin)
{
    tgl_node *t = fit(ctx, tin[0], n->in[0]);
    tgl_node *p = tgl_mk1(ctx, TGL_OP_EXP, n);
    tgl_node *s = tgl_mk_sum(ctx, tgl_mk2(ctx, TGL_OP_MUL, p, t), 1, &n->p.i[0], true);
    return tgl_mk2(ctx, TGL_OP_SUB, t, s);
}

/* The closed forms (Rop rule FORMULA): the product rule of the BLAS ops,
 * with their scalars and accumulator, and log_softmax's. */
static tgl_node *push_formula(tgl_ctx *ctx, tgl_node *n, tgl_node *const *tin)
{
    if (n->op == TGL_OP_LOG_SOFTMAX)
        return push_log_softmax(ctx, n, tin);
    int dt = n->type.dtype;
    tgl_node *a = n->in[0], *b = n->nin > 1 ? n->in[1] : NULL;
    tgl_node *ta = tin[0] ? fit(ctx, tin[0], a) : NULL;
    tgl_node *tb = b && tin[1] ? fit(ctx, tin[1], b) : NULL;
    switch (n->op) {
    case TGL_OP_GEMM:
    case TGL_OP_GEMV: {
        /* alpha a.b + beta c (c absent: 0) */
        tgl_node *prod = add_opt(ctx, ta ? tgl_mk2(ctx, TGL_OP_DOT, ta, b) : NULL,
                                 tb ? tgl_mk2(ctx, TGL_OP_DOT, a, tb) : NULL);
        prod = scale(ctx, prod, n->p.f[0], dt);
        tgl_node *tc = n->nin > 2 && tin[2] ? fit(ctx, tin[2], n->in[2]) : NULL;
        return add_opt(ctx, prod, scale(ctx, tc, n->p.f[1], dt));
    }
    case TGL_OP_GER: {
        /* A + alpha x y' */
        tgl_node *x = n->in[1], *y = n->in[2];
        tgl_node *tx = tin[1] ? fit(ctx, tin[1], x) : NULL, *ty = tin[2] ? fit(ctx, tin[2], y) : NULL;
        int64_t col[2] = {0, -1}, row[2] = {-1, 0};
        tgl_node *outer = add_opt(
            ctx,
            tx ? tgl_mk2(ctx, TGL_OP_MUL, tgl_mk_dimshuffle(ctx, tx, 2, col),
                         tgl_mk_dimshuffle(ctx, y, 2, row))
               : NULL,
            ty ? tgl_mk2(ctx, TGL_OP_MUL, tgl_mk_dimshuffle(ctx, x, 2, col),
                         tgl_mk_dimshuffle(ctx, ty, 2, row))
               : NULL);
        return add_opt(ctx, ta, scale(ctx, outer, n->p.f[0], dt));
    }
    default:
        tgl_ctx_set_error(ctx, TGL_EINTERNAL, "Rop: the catalog gives %s the rule FORMULA, "
                          "but rop.c keeps no formula for it", tgl_op_name(n->op));
        return NULL;
    }
}

/* Any op with a pullback: u stands for the output gradient(s); the
 * pullback L(u) is linear in u, so the gradient of <L(u), t> with respect
 * to u is J t.  u is then replaced by zeros. */
static tgl_status push_transposed(tgl_ctx *ctx, tgl_node *n, tgl_node *const *tin,
                                  tgl_node **tout)
{
    const tgl_opimpl *impl = tgl_op_impl(n->op);
    int nout = n->nout;
    tgl_node **u = calloc((size_t)nout, sizeof *u);
    tgl_node **zero = calloc((size_t)nout, sizeof *zero);
    tgl_node **gin = calloc((size_t)n->nin + 1, sizeof *gin);
    tgl_node **outk = calloc((size_t)nout, sizeof *outk);
    tgl_status st = u && zero && gin && outk ? TGL_OK
                                             : tgl_ctx_set_error(ctx, TGL_ENOMEM, "Rop: out of memory");
    for (int k = 0; k < nout && !st; k++) {
        st = tgl_node_output(ctx, n, k, &outk[k]);
        if (!st && carries_tangent(outk[k]))
            st = tgl_node_input(ctx, outk[k]->type, "u", &u[k]);
    }
    uint64_t e0 = ctx->nerrors;
    if (!st) {
        if (nout > 1 && impl->grad_n)
            st = impl->grad_n(ctx, n, u, gin);
        else if (impl->grad)
            st = impl->grad(ctx, n, u[0], gin);
        else if (impl->grad_n)
            st = impl->grad_n(ctx, n, u, gin);
        else
            st = tgl_ctx_set_error(ctx, TGL_EINVAL, "Rop: %s has no pullback and no pushforward",
                                   tgl_op_name(n->op));
    }
    if (!st && ctx->nerrors != e0)
        st = ctx->last_status ? ctx->last_status : TGL_EINTERNAL;
    /* s = sum_i <L_i(u), t_i> */
    tgl_node *s = NULL;
    for (int i = 0; i < n->nin && !st; i++) {
        if (!gin[i] || !tin[i])
            continue;
        tgl_node *prod = tgl_mk_cast(ctx, tgl_mk2(ctx, TGL_OP_MUL, gin[i], tin[i]), TGL_FLOAT64);
        int64_t axes[TGL_MAX_DIMS];
        int nd = prod ? prod->type.ndim : 0;
        for (int d = 0; d < nd; d++)
            axes[d] = d;
        tgl_node *term = nd ? tgl_mk_sum(ctx, prod, nd, axes, false) : prod;
        s = add_opt(ctx, s, term);
    }
    for (int k = 0; k < nout && !st; k++) {
        tout[k] = NULL;
        if (!u[k])
            continue;
        if (!s) {
            tout[k] = zeros_like(ctx, outk[k]);
            continue;
        }
        tgl_node *g = NULL;
        st = tgl_grad(ctx, s, 1, &u[k], 0, NULL, NULL, TGL_DISCONNECTED_ZERO, &g);
        if (!st) {
            zero[k] = zeros_like(ctx, outk[k]);
            tgl_node *fromv[1] = {u[k]}, *tov[1] = {zero[k]};
            st = tgl_clone_replace(ctx, 1, &g, 1, fromv, tov, &tout[k]);
        }
    }
    /* other u's still in a result: replace every one */
    for (int k = 0; k < nout && !st; k++) {
        if (!tout[k])
            continue;
        int m = 0;
        tgl_node *fromv[64], *tov[64];
        for (int j = 0; j < nout && m < 64; j++)
            if (u[j] && j != k) {
                if (!zero[j])
                    zero[j] = zeros_like(ctx, outk[j]);
                fromv[m] = u[j];
                tov[m++] = zero[j];
            }
        if (m)
            st = tgl_clone_replace(ctx, 1, &tout[k], m, fromv, tov, &tout[k]);
    }
    if (!st && ctx->nerrors != e0)
        st = ctx->last_status ? ctx->last_status : TGL_EINTERNAL;
    free(u);
    free(zero);
    free(gin);
    free(outk);
    return st;
}

/* ---- the walk ---------------------------------------------------------- */

/* The tangents of every output of n, given its inputs' (tin[i] NULL: none). */
static tgl_status push(tgl_ctx *ctx, tgl_node *n, tgl_node *const *tin, tgl_node **tout)
{
    const tgl_opimpl *impl = tgl_op_impl(n->op);
    uint64_t e0 = ctx->nerrors;
    tgl_status st = TGL_OK;
    switch (tgl_opdef_get(n->op)->rop) {
    case TGL_ROP_KIND_OWN:
        st = impl->rop ? impl->rop(ctx, n, tin, tout)
                       : tgl_ctx_set_error(ctx, TGL_EINTERNAL, "Rop: %s has the rule OWN but no rop hook",
                                           tgl_op_name(n->op));
        break;
    case TGL_ROP_KIND_DIAGONAL:
        tout[0] = push_diagonal(ctx, n, tin);
        if (!tout[0] && ctx->nerrors == e0)
            st = push_transposed(ctx, n, tin, tout);
        break;
    case TGL_ROP_KIND_LINEAR:
        tout[0] = push_linear(ctx, n, tin);
        break;
    case TGL_ROP_KIND_BILINEAR:
        tout[0] = push_bilinear(ctx, n, tin);
        break;
    case TGL_ROP_KIND_FORMULA:
        tout[0] = push_formula(ctx, n, tin);
        break;
    case TGL_ROP_KIND_PULLBACK:
        st = push_transposed(ctx, n, tin, tout);
        break;
    case TGL_ROP_KIND_NONE:
        st = tgl_ctx_set_error(ctx, TGL_EINTERNAL, "Rop: %s is not pushed on its own",
                               tgl_op_name(n->op));
        break;
    }
    if (!st && ctx->nerrors != e0)
        st = ctx->last_status ? ctx->last_status : TGL_EINTERNAL;
    for (int k = 0; k < n->nout && !st; k++) {
        if (!tout[k])
            continue;
        tgl_node *o = NULL;
        st = tgl_node_output(ctx, n, k, &o);
        if (!st && !carries_tangent(o))
            tout[k] = NULL;
        else if (!st && !(tout[k] = fit(ctx, tout[k], o)))
            st = ctx->last_status ? ctx->last_status : TGL_EINTERNAL;
    }
    return st;
}

tgl_status tgl_rop(tgl_ctx *ctx, int nf, tgl_node *const *f, int nwrt, tgl_node *const *wrt,
                   tgl_node *const *v, tgl_disconnected disconnected, tgl_node **out)
{
    TGL_CHECK_CTX(ctx);
    const char *fn = "tgl_rop";
    char b1[256], t1[96], t2[96];
    TGL_CHECK(nf >= 1 && f && out && nwrt >= 1 && wrt && v, TGL_EINVAL, "%s: bad arguments", fn);
    for (int i = 0; i < nf; i++)
        TGL_CHECK(f[i] && f[i]->nout == 1, TGL_EINVAL, "%s: output %d is %s", fn, i + 1,
                  f[i] ? "a node with several values" : "NULL");
    for (int k = 0; k < nwrt; k++) {
        TGL_CHECK(wrt[k] && v[k], TGL_EINVAL, "%s: wrt %d or its direction is NULL", fn, k + 1);
        TGL_CHECK(tgl_dtype_is_float(wrt[k]->type.dtype), TGL_EDTYPE,
                  "%s: cannot differentiate with respect to %s of dtype %s (wrt %d)", fn,
                  tgl_node_describe(wrt[k], b1, sizeof b1), tgl_dtype_name(wrt[k]->type.dtype), k + 1);
        TGL_CHECK(v[k]->type.ndim == wrt[k]->type.ndim && tgl_dtype_is_float(v[k]->type.dtype),
                  TGL_ESHAPE, "%s: the direction for %s (wrt %d) is %s, the variable %s", fn,
                  tgl_node_describe(wrt[k], b1, sizeof b1), k + 1, tgl_type_str(v[k]->type, t1, sizeof t1),
                  tgl_type_str(wrt[k]->type, t2, sizeof t2));
    }
    /* Every node the outputs depend on, in order (tangents are pushed
     * along it) and as a set (the disconnected policy reads it). */
    tgl_node **order = NULL;
    size_t count = 0;
    tgl_node_map tan, reach;
    tgl_status st = tgl_reachable(ctx, nf, f, &reach, &order, &count);
    if (st)
        return st;
    if ((st = tgl_node_map_init(ctx, &tan))) {
        tgl_node_map_free(&reach);
        free(order);
        return st;
    }
    /* Which wrt each output reaches (for the disconnected policy). */
    for (int k = 0; k < nwrt && !st; k++) {
        tgl_node *t = tgl_mk_cast(ctx, v[k], wrt[k]->type.dtype);
        if (!t) {
            st = ctx->last_status;
            break;
        }
        /* A direction broadcast where the variable is not gets its full
         * shape; a fixed direction (an array) for a value whose shape is
         * known only when the function runs is checked against it then
         * (the addition fails on a size mismatch).  The Lua layer puts a
         * rop_direction node (direction.c) in front of every direction,
         * whose message names the direction and the user's line. */
        bool fixed = v[k]->kind == TGL_NODE_CONSTANT && wrt[k]->kind != TGL_NODE_SHARED &&
                     wrt[k]->kind != TGL_NODE_CONSTANT;
        if ((t->type.bcast & ~wrt[k]->type.bcast) || fixed)
            t = tgl_mk2(ctx, TGL_OP_ADD, t, zeros_like(ctx, wrt[k]));
        st = t ? tgl_node_map_set(ctx, &tan, wrt[k], t) : ctx->last_status;
    }
    tgl_node *stackin[16], *stackout[16];
    for (size_t i = 0; i < count && !st; i++) {
        tgl_node *n = order[i];
        if (n->kind != TGL_NODE_APPLY || tgl_node_map_has(&tan, n))
            continue;
        bool any = false;
        for (int j = 0; j < n->nin && !any; j++)
            any = tgl_node_map_has(&tan, n->in[j]);
        if (!any)
            continue;
        if (tgl_opdef_get(n->op)->rop == TGL_ROP_KIND_NONE)
            continue; /* an OUTPUT: set with its multi-output node */
        tgl_node **tin = n->nin <= 16 ? stackin : calloc((size_t)n->nin, sizeof *tin);
        tgl_node **tout = n->nout <= 16 ? stackout : calloc((size_t)n->nout, sizeof *tout);
        if (!tin || !tout) {
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn);
            break;
        }
        for (int j = 0; j < n->nin; j++)
            tin[j] = tgl_node_map_get(&tan, n->in[j]);
        memset(tout, 0, sizeof *tout * (size_t)n->nout);
        st = push(ctx, n, tin, tout);
        if (st) {
            char msg[TGL_ERRMSG_SIZE];
            snprintf(msg, sizeof msg, "%s", ctx->errmsg);
            st = tgl_ctx_set_error(ctx, st, "%s: the pushforward of %s: %s", fn,
                                   tgl_node_describe(n, b1, sizeof b1), msg);
        }
        for (int k = 0; k < n->nout && !st; k++) {
            if (!tout[k])
                continue;
            tgl_node *o = NULL;
            st = tgl_node_output(ctx, n, k, &o);
            if (!st)
                st = tgl_node_map_set(ctx, &tan, o, tout[k]);
        }
        if (tin != stackin)
            free(tin);
        if (tout != stackout)
            free(tout);
    }
    /* Disconnected wrt: none of the outputs depends on it. */
    for (int k = 0; k < nwrt && !st; k++)
        if (!tgl_node_map_has(&reach, wrt[k]) && disconnected == TGL_DISCONNECTED_RAISE)
            st = tgl_ctx_set_error(ctx, TGL_EINVAL,
                                   "%s: the output does not depend on %s (wrt %d); pass "
                                   "disconnected='ignore' to allow it",
                                   fn, tgl_node_describe(wrt[k], b1, sizeof b1), k + 1);
    for (int i = 0; i < nf && !st; i++) {
        tgl_node *t = tgl_node_map_get(&tan, f[i]);
        if (!carries_tangent(f[i]))
            t = NULL;
        out[i] = t ? t : zeros_like(ctx, f[i]);
        if (!out[i])
            st = ctx->last_status ? ctx->last_status : TGL_EINTERNAL;
    }
    tgl_node_map_free(&tan);
    tgl_node_map_free(&reach);
    free(order);
    return st;
}
