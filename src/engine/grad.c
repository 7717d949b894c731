/*
 * grad.c — reverse-mode differentiation.  Walks the graph from the cost
 * back to the variables, calling each op's pullback (ops.h) and summing
 * the contributions a node receives from its users.  The result is more
 * graph: gradients are symbolic, so they are optimized and compiled like
 * any expression (Theano's approach).
 *
 * The driver owns the bookkeeping every pullback would otherwise repeat:
 * it sums each input gradient over the axes where the input broadcast
 * (so it has the input's broadcast pattern), casts it to the input's
 * dtype, and only visits nodes that lie between the cost and a wrt.
 */
#include "engine/ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Makes a contribution fit the node it flows into: reduce the broadcast
 * axes, then the dtype. */
static tgl_node *fit(tgl_ctx *ctx, tgl_node *g, const tgl_node *x)
{
    if (!g)
        return NULL;
    if (g->type.ndim != x->type.ndim) {
        tgl_ctx_set_error(ctx, TGL_EINTERNAL, "a gradient has %d dimensions for a %d-d input",
                          g->type.ndim, x->type.ndim);
        return NULL;
    }
    return tgl_mk_cast(ctx, tgl_mk_sum_to(ctx, g, x->type), x->type.dtype);
}

tgl_status tgl_grad(tgl_ctx *ctx, tgl_node *cost, int nwrt, tgl_node *const *wrt, int nknown,
                    tgl_node *const *known_vars, tgl_node *const *known_grads,
                    tgl_disconnected disconnected, tgl_node **grads)
{
    TGL_CHECK_CTX(ctx);
    const char *fn = "tgl_grad";
    TGL_CHECK(nwrt >= 0 && (nwrt == 0 || (wrt && grads)) && nknown >= 0 &&
                  (nknown == 0 || (known_vars && known_grads)),
              TGL_EINVAL, "%s: bad arguments", fn);
    TGL_CHECK(cost || nknown > 0, TGL_EINVAL, "%s: no cost and no known gradients", fn);
    char buf[256], tb[96];
    if (cost) {
        TGL_CHECK(cost->type.ndim == 0, TGL_ESHAPE,
                  "%s: the cost must be a scalar, got %s (sum it, or give known_grads)", fn,
                  tgl_type_str(cost->type, tb, sizeof tb));
        TGL_CHECK(tgl_dtype_is_float(cost->type.dtype), TGL_EDTYPE,
                  "%s: the cost must be a float, got %s", fn, tgl_dtype_name(cost->type.dtype));
    }
    for (int k = 0; k < nwrt; k++) {
        TGL_CHECK(wrt[k], TGL_EINVAL, "%s: wrt %d is NULL", fn, k + 1);
        TGL_CHECK(tgl_dtype_is_float(wrt[k]->type.dtype), TGL_EDTYPE,
                  "%s: cannot differentiate with respect to %s of dtype %s", fn,
                  tgl_node_describe(wrt[k], buf, sizeof buf), tgl_dtype_name(wrt[k]->type.dtype));
    }
    for (int k = 0; k < nknown; k++) {
        TGL_CHECK(known_vars[k] && known_grads[k], TGL_EINVAL, "%s: known gradient %d is NULL",
                  fn, k + 1);
        TGL_CHECK(known_grads[k]->type.ndim == known_vars[k]->type.ndim, TGL_ESHAPE,
                  "%s: the known gradient of %s has %d dimensions, the variable %d", fn,
                  tgl_node_describe(known_vars[k], buf, sizeof buf), known_grads[k]->type.ndim,
                  known_vars[k]->type.ndim);
    }

    /* Every node the cost and the known variables depend on, in order. */
    int nroots = nknown + 1;
    tgl_node **roots = malloc(sizeof *roots * (size_t)nroots);
    if (!roots)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn);
    int r = 0;
    if (cost)
        roots[r++] = cost;
    for (int k = 0; k < nknown; k++)
        roots[r++] = known_vars[k];
    tgl_node **order = NULL;
    size_t count = 0;
    tgl_status st = tgl_toposort(ctx, r, roots, &order, &count);
    free(roots);
    if (st)
        return st;

    /* Which nodes lie on a path to some wrt: only those get pullbacks. */
    tgl_node_map acc = {0}, reach = {0};
    if (tgl_node_map_init(ctx, &acc) || tgl_node_map_init(ctx, &reach)) {
        tgl_node_map_free(&acc);
        free(order);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn);
    }
#define REACHES(n) tgl_node_map_has(&reach, (n))
    for (int k = 0; k < nwrt && !st; k++)
        st = tgl_node_map_seti(ctx, &reach, wrt[k], 1);
    for (size_t i = 0; i < count && !st; i++) {
        tgl_node *n = order[i];
        for (int k = 0; k < n->nin && !st; k++)
            if (REACHES(n->in[k])) {
                st = tgl_node_map_seti(ctx, &reach, n, 1);
                break;
            }
    }

    /* Seeds: d cost / d cost = 1, and the known gradients.  A seed that
     * could not be built (out of memory) is that error, never a missing
     * gradient ("does not depend on"). */
    uint64_t seed_errors0 = ctx->nerrors;
    if (cost) {
        tgl_node *one = tgl_mk_scalar(ctx, cost->type.dtype, 1.0);
        st = one ? tgl_node_map_set(ctx, &acc, cost, one) : TGL_ENOMEM;
    }
    for (int k = 0; k < nknown && !st; k++) {
        tgl_node *g = fit(ctx, known_grads[k], known_vars[k]);
        tgl_node *prev = tgl_node_map_get(&acc, known_vars[k]);
        g = prev && g ? tgl_mk2(ctx, TGL_OP_ADD, prev, g) : g;
        st = g ? tgl_node_map_set(ctx, &acc, known_vars[k], g) : TGL_EINVAL;
    }
    if (st) {
        char msg[TGL_ERRMSG_SIZE];
        snprintf(msg, sizeof msg, "%s", ctx->nerrors != seed_errors0 ? ctx->errmsg : "out of memory");
        st = tgl_ctx_set_error(ctx, ctx->nerrors != seed_errors0 ? ctx->last_status : st,
                               "%s: seeding the gradients: %s", fn, msg);
    }

    /* Users come after their inputs in order: walk it backwards, so a
     * node's gradient is complete before its pullback runs. */
    for (size_t i = count; i-- > 0 && !st;) {
        tgl_node *n = order[i];
        if (n->kind != TGL_NODE_APPLY || n->op == TGL_OP_OUTPUT || !REACHES(n))
            continue; /* an OUTPUT's gradient goes to its node's pullback */
        tgl_node *g = tgl_node_map_get(&acc, n);
        tgl_node **gouts = NULL;
        if (n->nout > 1) {
            /* A multi-output node: the gradients of all its outputs. */
            gouts = calloc((size_t)n->nout, sizeof *gouts);
            if (!gouts) {
                st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn);
                break;
            }
            bool any = false;
            for (int k = 0; k < n->nout && !st; k++) {
                tgl_node *o;
                st = tgl_node_output(ctx, n, k, &o);
                if (!st && (gouts[k] = tgl_node_map_get(&acc, o)))
                    any = true;
            }
            if (st || !any) {
                free(gouts);
                continue;
            }
        } else if (!g) {
            continue;
        }
        tgl_node *stackgin[8];
        tgl_node **gin = n->nin <= 8 ? stackgin : calloc((size_t)n->nin, sizeof *gin);
        if (!gin) {
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn);
            break;
        }
        memset(gin, 0, sizeof *gin * (size_t)n->nin);
        uint64_t errors0 = ctx->nerrors;
        const tgl_opimpl *impl = tgl_op_impl(n->op);
        if (gouts ? !impl->grad_n : !impl->grad && !impl->grad_n) {
            st = tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: %s has no gradient (%s)", fn,
                                   tgl_op_name(n->op), tgl_node_describe(n, buf, sizeof buf));
        } else if (gouts) {
            st = impl->grad_n(ctx, n, gouts, gin);
        } else if (impl->grad) {
            st = impl->grad(ctx, n, g, gin);
        } else {
            st = impl->grad_n(ctx, n, &g, gin);
        }
        free(gouts);
        for (int k = 0; k < n->nin && !st; k++) {
            tgl_node *x = n->in[k];
            if (!gin[k] || !REACHES(x) || !tgl_dtype_is_float(x->type.dtype))
                continue;
            tgl_node *c = fit(ctx, gin[k], x);
            tgl_node *prev = tgl_node_map_get(&acc, x);
            c = prev && c ? tgl_mk2(ctx, TGL_OP_ADD, prev, c) : c;
            if (c)
                st = tgl_node_map_set(ctx, &acc, x, c);
        }
        /* A node the pullback (or the summing above) failed to build is
         * NULL; the failure was counted. */
        if (st || ctx->nerrors != errors0) {
            char msg[TGL_ERRMSG_SIZE];
            snprintf(msg, sizeof msg, "%s", ctx->errmsg);
            tgl_status why = st ? st : ctx->last_status;
            st = tgl_ctx_set_error(ctx, why, "%s: differentiating %s: %s", fn,
                                   tgl_node_describe(n, buf, sizeof buf), msg);
        }
        if (gin != stackgin)
            free(gin);
    }

    for (int k = 0; k < nwrt && !st; k++) {
        tgl_node *x = wrt[k];
        uint64_t errors0 = ctx->nerrors;
        tgl_node *g = tgl_node_map_get(&acc, x);
        if (!g) {
            if (disconnected == TGL_DISCONNECTED_RAISE) {
                st = tgl_ctx_set_error(ctx, TGL_EINVAL,
                                       "%s: the cost does not depend on %s (wrt %d); pass "
                                       "disconnected='ignore' to get zeros",
                                       fn, tgl_node_describe(x, buf, sizeof buf), k + 1);
                break;
            }
            g = tgl_mk_fill_like(ctx, x, x->type.dtype, 0.0);
        } else if ((g->type.bcast & ~x->type.bcast) != 0) {
            /* Broadcast a gradient that is constant along some axis back
             * to the variable's full shape. */
            g = tgl_mk2(ctx, TGL_OP_ADD, g, tgl_mk_fill_like(ctx, x, x->type.dtype, 0.0));
        }
        if (!g) {
            st = ctx->nerrors != errors0 ? ctx->last_status
                                         : tgl_ctx_set_error(ctx, TGL_EINTERNAL,
                                                             "%s: building a gradient failed", fn);
            break;
        }
        grads[k] = g;
    }
#undef REACHES
    tgl_node_map_free(&acc);
    tgl_node_map_free(&reach);
    free(order);
    return st;
}
