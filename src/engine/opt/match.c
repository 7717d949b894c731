/*
 * match.c — small helpers the rewrite rules share: looking through the
 * broadcast padding that elementwise ops add, recognizing constants,
 * checking that a replacement keeps a node's type, and proving that two
 * nodes have the same shape.
 */
#include "engine/opt/opt.h"

#include <string.h>

tgl_node *tgl_strip_pad(tgl_node *n)
{
    while (n && n->kind == TGL_NODE_APPLY && n->op == TGL_OP_DIMSHUFFLE) {
        /* Only dimshuffles that keep the input's axes in order and add
         * broadcastable ones are padding. */
        int next = 0;
        for (int k = 0; k < n->p.n; k++) {
            if (n->p.i[k] == -1)
                continue;
            if (n->p.i[k] != next)
                return n;
            next++;
        }
        if (next != n->in[0]->type.ndim)
            return n;
        n = n->in[0];
    }
    return n;
}

bool tgl_const_value(tgl_node *n, double *v)
{
    n = tgl_strip_pad(n);
    if (!n || n->kind != TGL_NODE_CONSTANT || n->value->size < 1)
        return false;
    const tgl_array *a = n->value; /* constants are contiguous copies */
    size_t es = tgl_dtype_size(a->dtype_id);
    for (int64_t i = 1; i < a->size; i++)
        if (memcmp((const char *)a->data + (size_t)i * es, a->data, es) != 0)
            return false;
    *v = tgl_load_as_double(a->dtype_id, a->data, 0);
    return true;
}

bool tgl_is_const(tgl_node *n, double v)
{
    double c;
    return tgl_const_value(n, &c) && c == v;
}

bool tgl_same_type(const tgl_node *a, const tgl_node *b)
{
    return tgl_type_eq(a->type, b->type);
}

tgl_node *tgl_if_same_type(tgl_node *n, tgl_node *x)
{
    return x && tgl_same_type(n, x) ? x : NULL;
}

tgl_node *tgl_mk_params(tgl_ctx *ctx, int op, int nin, tgl_node *const *in, int np,
                        const int64_t *ints, int flags)
{
    tgl_params p = {0};
    p.n = np;
    p.flags = flags;
    for (int i = 0; i < np; i++)
        p.i[i] = ints[i];
    return tgl_mk(ctx, op, nin, in, &p);
}

bool tgl_scalar_const(tgl_node *n, double *v)
{
    tgl_node *c = tgl_strip_pad(n);
    uint32_t all = c->type.ndim >= 32 ? ~0u : (1u << c->type.ndim) - 1;
    return tgl_const_value(n, v) && (c->type.bcast & all) == all;
}

/* ---- shapes known equal ------------------------------------------------

   Types are static (dtype, rank, broadcast pattern), so an elementwise
   op's result has exactly the shape of each input whose rank and
   broadcast pattern are the result's: on an axis the result does not
   broadcast, every input that does not broadcast has the result's size
   (or the op fails), and on the others every input has size 1.  A
   fill_like has its source's shape.  Following those steps from a node
   reaches nodes of the same shape; two nodes that reach a common one have
   equal shapes whenever both are computed without error. */

bool tgl_shape_step(const tgl_node *n, int i)
{
    if (n->kind != TGL_NODE_APPLY || i < 0 || i >= n->nin)
        return false;
    const tgl_node *x = n->in[i];
    if (n->op == TGL_OP_FILL_LIKE)
        return true; /* its type's rank and pattern are x's */
    return tgl_op_impl(n->op)->family == TGL_FAM_ELEMWISE && x->type.ndim == n->type.ndim &&
           x->type.bcast == n->type.bcast;
}

int tgl_shape_class(tgl_node *n, tgl_node **out, int cap)
{
    int count = 0;
    out[count++] = n;
    for (int k = 0; k < count; k++) {
        tgl_node *m = out[k];
        for (int i = 0; i < m->nin && count < cap; i++) {
            if (!tgl_shape_step(m, i))
                continue;
            bool seen = false;
            for (int j = 0; j < count && !seen; j++)
                seen = out[j] == m->in[i];
            if (!seen)
                out[count++] = m->in[i];
        }
    }
    return count;
}

bool tgl_same_shape(tgl_node *a, tgl_node *b)
{
    if (!a || !b || a->type.ndim != b->type.ndim || a->type.bcast != b->type.bcast)
        return false;
    if (a == b)
        return true;
    tgl_node *ca[TGL_SHAPE_CLASS_MAX], *cb[TGL_SHAPE_CLASS_MAX];
    int na = tgl_shape_class(a, ca, TGL_SHAPE_CLASS_MAX),
        nb = tgl_shape_class(b, cb, TGL_SHAPE_CLASS_MAX);
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            if (ca[i] == cb[j])
                return true;
    return false;
}
