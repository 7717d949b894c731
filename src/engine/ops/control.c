/*
 * control.c — control flow and structure: ifelse, the lazy conditional
 * (the CVM evaluates only the branch the condition picks: it compiles
 * ifelse to jumps; the view here serves eager evaluation and the
 * debugging linker, where both branches are already computed), and
 * output, which reads one value of a multi-output node (the CVM's
 * instruction for the multi-output node writes it; output runs nothing).
 */
#include "engine/ops/ops.h"
#include "engine/backend.h"

static tgl_status ifelse_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type c = n->in[0]->type, a = n->in[1]->type, b = n->in[2]->type;
    TGL_CHECK(c.ndim == 0, TGL_ESHAPE, "the condition must be a scalar, got %d dimensions", c.ndim);
    TGL_CHECK(a.ndim == b.ndim, TGL_ESHAPE, "the branches have %d and %d dimensions", a.ndim,
              b.ndim);
    TGL_CHECK(a.dtype == b.dtype, TGL_EDTYPE, "the branches have dtypes %s and %s",
              tgl_dtype_name(a.dtype), tgl_dtype_name(b.dtype));
    TGL_CHECK(n->p.n == 0, TGL_EINVAL, "takes no parameters");
    n->type = tgl_type_make(a.dtype, a.ndim, a.bcast & b.bcast);
    return TGL_OK;
}


static tgl_status ifelse_view(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              tgl_array **out)
{
    (void)n;
    /* the branch the condition picks, read through its backend */
    double c;
    tgl_status st = tgl_array_scalar(ctx, in[0], &c);
    if (st)
        return st;
    tgl_array *pick = in[c != 0 ? 1 : 2];
    tgl_array_retain(pick);
    *out = pick;
    return TGL_OK;
}

/* The gradient flows to the branch taken; the other gets zeros.  When
 * the branches have one type they have one shape whenever both are valid,
 * so the zeros are shaped like the output gradient and the untaken
 * branch's forward value is never needed (its backward pass still runs,
 * on zeros).  Branches that broadcast differently ((1,n) and (m,n)) differ
 * in shape: each then gets zeros of its own shape (reading its value, in
 * the gradient only, when the other branch was taken). */
static tgl_status ifelse_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    tgl_node *c = n->in[0], *a = n->in[1], *b = n->in[2];
    gin[0] = NULL;
    gin[1] = gin[2] = NULL;
    if (!tgl_dtype_is_float(n->type.dtype))
        return TGL_OK;
    int dt = n->type.dtype;
    bool same = a->type.ndim == b->type.ndim && a->type.bcast == b->type.bcast;
    tgl_node *zero_a = tgl_mk_fill_like(ctx, same ? g : a, dt, 0.0);
    tgl_node *zero_b = same ? zero_a : tgl_mk_fill_like(ctx, b, dt, 0.0);
    gin[1] = tgl_mk3(ctx, TGL_OP_IFELSE, c, g, zero_a);
    gin[2] = tgl_mk3(ctx, TGL_OP_IFELSE, c, zero_b, g);
    return TGL_OK;
}

const tgl_opimpl tgl_impl_ifelse = {
    .family = TGL_FAM_CONTROL, .nin_min = 3, .nin_max = 3, .flags = TGL_OPF_LAZY,
    .infer = ifelse_infer, .view = ifelse_view, .grad = ifelse_grad,
};

/* ---- output: value k of a multi-output node --------------------------- */

static tgl_status output_infer(tgl_ctx *ctx, tgl_node *n)
{
    const tgl_node *m = n->in[0];
    TGL_CHECK(m->kind == TGL_NODE_APPLY && m->nout > 1, TGL_EINVAL,
              "its input is not a multi-output node");
    TGL_CHECK(n->p.n == 1 && n->p.i[0] >= 0 && n->p.i[0] < m->nout, TGL_EINVAL,
              "%s has %d outputs; there is no output %lld", tgl_op_name(m->op), m->nout,
              (long long)n->p.i[0] + 1);
    const tgl_opimpl *d = tgl_op_impl(m->op);
    TGL_CHECK(d->out_type, TGL_EINTERNAL, "%s gives no output types", tgl_op_name(m->op));
    n->type = d->out_type(m, (int)n->p.i[0]);
    return TGL_OK;
}

const tgl_opimpl tgl_impl_output = {
    .family = TGL_FAM_CONTROL, .nin_min = 1, .nin_max = 1,
    .infer = output_infer,
};
