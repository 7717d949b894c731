/*
 * match.c — small helpers the rewrite rules share: looking through the
 * broadcast padding that elementwise ops add, recognizing constants, and
 * checking that a replacement keeps a node's type.
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
