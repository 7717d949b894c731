/*
 * direction.c — rop_direction(v, wrt): the direction of a forward-mode
 * derivative, checked against the variable it is for.
 *
 * tgl.Rop(f, W, V) needs V shaped like W.  The ranks are known when the
 * graph is built, and the Lua layer compares them then; the sizes of a
 * symbolic V or W are known only when the compiled function runs.  A
 * wrong V would then fail deep inside the tangent graph, in an op the
 * user never wrote (`dot: inner sizes 3 and 2 differ`), with no line of
 * theirs.  So each direction enters the tangent graph through this op: a
 * view of V once its shape is W's (an axis where V is broadcastable may
 * have size 1 and broadcasts), else an error that names the function the
 * user called, the direction, the variable, both shapes and the line of
 * the call (the node's source):
 *
 *   Rop direction 1 for 'W' has shape (2,3), W has (3,2); tgl.Rop was
 *   called at script.lua:5
 *
 * p.i[0] is the direction's position (1-based), p.i[1] the function the
 * user called (CALLER below), and p.i[2] (optional) a hash of the line
 * that called it: a node's source is an annotation, not part of its
 * identity, so without it the same direction checked at two lines would
 * be one node naming the first line.  The op computes nothing: its
 * pullback and pushforward pass the gradient and the tangent of v
 * through, and wrt is read only for its shape.
 */
#include "engine/ops/ops.h"

#include <inttypes.h>
#include <stdio.h>

/* p.i[1]: which public function built the check (the message names it). */
static const char *const CALLER[] = {"Rop", "hessian_vector_product", "gauss_newton_product"};
#define NCALLERS ((int)(sizeof CALLER / sizeof CALLER[0]))

static tgl_status direction_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type v = n->in[0]->type, w = n->in[1]->type;
    TGL_CHECK((n->p.n == 2 || n->p.n == 3) && n->p.i[0] >= 1 && n->p.i[1] >= 0 &&
                  n->p.i[1] < NCALLERS, TGL_EINVAL,
              "parameters: i[0] = the direction's position (from 1), i[1] = 0 (Rop), 1 "
              "(hessian_vector_product) or 2 (gauss_newton_product), i[2] (optional) = a hash "
              "of the calling line");
    TGL_CHECK(tgl_dtype_is_float(v.dtype), TGL_EDTYPE, "the direction is %s; directions are floats",
              tgl_dtype_name(v.dtype));
    TGL_CHECK(v.ndim == w.ndim, TGL_ESHAPE, "a %d-d direction for a %d-d variable", v.ndim,
              w.ndim);
    n->type = v;
    return TGL_OK;
}

/* "(2,3)" into buf. */
static const char *shape_str(const tgl_array *a, char *buf, size_t size)
{
    size_t k = 0;
    int w = snprintf(buf, size, "(");
    for (int d = 0; d < a->ndim && w >= 0 && (k += (size_t)w) < size; d++)
        w = snprintf(buf + k, size - k, "%s%" PRId64, d ? "," : "", a->shape[d]);
    if (w >= 0 && (k += (size_t)w) < size)
        snprintf(buf + k, size - k, a->ndim == 1 ? ",)" : ")");
    return buf;
}

static tgl_status direction_view(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                 tgl_array **out)
{
    tgl_array *v = in[0];
    const tgl_array *w = in[1];
    bool same = v->ndim == w->ndim;
    for (int d = 0; d < v->ndim && same; d++)
        same = v->shape[d] == w->shape[d] ||
               (tgl_type_bcast(n->type, d) && v->shape[d] == 1);
    if (!same) {
        const tgl_node *wrt = n->in[1];
        const char *fn = CALLER[n->p.i[1]];
        char vs[128], ws[128], who[256];
        tgl_node_describe(wrt, who, sizeof who);
        return tgl_ctx_set_error(ctx, TGL_ESHAPE, "%s direction %" PRId64 " for %s has shape %s, "
                                 "%s has %s%s%s%s%s",
                                 fn, n->p.i[0], who, shape_str(v, vs, sizeof vs),
                                 wrt->name ? wrt->name : "the variable", shape_str(w, ws, sizeof ws),
                                 n->source ? "; tgl." : "", n->source ? fn : "",
                                 n->source ? " was called at " : "", n->source ? n->source : "");
    }
    return tgl_array_view(ctx, v, v->ndim, v->shape, v->strides, 0, out);
}

static tgl_status direction_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    (void)ctx;
    (void)n;
    gin[0] = g;
    gin[1] = NULL; /* only wrt's shape is read */
    return TGL_OK;
}

static tgl_status direction_rop(tgl_ctx *ctx, tgl_node *n, tgl_node *const *tin, tgl_node **tout)
{
    (void)ctx;
    (void)n;
    tout[0] = tin[0]; /* the identity on v; no tangent when v has none */
    return TGL_OK;
}

const tgl_opimpl tgl_impl_rop_direction = {
    .family = TGL_FAM_SHAPE, .nin_min = 2, .nin_max = 2,
    .infer = direction_infer, .view = direction_view, .grad = direction_grad,
    .rop = direction_rop,
};
