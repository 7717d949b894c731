/*
 * blas.c — the linear algebra family: dot (vector and matrix products) and
 * batched_dot (one product per leading index).
 *
 * dot(a, b) takes 1-d and 2-d inputs: vector.vector -> 0-d, matrix.vector
 * -> vector, vector.matrix -> vector, matrix.matrix -> matrix.
 * batched_dot takes (B,m,k).(B,k,n) -> (B,m,n), or (B,k).(B,k) -> (B,),
 * the row-wise dot products.  Dtypes promote as elementwise arithmetic
 * does (bool < uint8 < int32 < int64 < float32 < float64; bool.bool counts,
 * giving int64).  Inner (and batch) sizes are checked when the op runs.
 *
 * The kernels are the backends' (src/cpu/kernels/blas.c on the CPU).
 */
#include "engine/ops/ops.h"
#include "engine/ops/blas_layout.h"

#include <inttypes.h>
#include <string.h>

/* ---- types ----------------------------------------------------------- */

/* Promotion as in elemwise arithmetic (tgl_dtype_promote). */
static int product_dtype(int a, int b)
{
    int dt = tgl_dtype_promote(a, b);
    return dt == TGL_BOOL ? TGL_INT64 : dt; /* arithmetic on bools counts */
}

static tgl_status dot_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type a = n->in[0]->type, b = n->in[1]->type;
    TGL_CHECK(n->p.n == 0 && n->p.flags == 0, TGL_EINVAL, "takes no parameters");
    TGL_CHECK(a.ndim >= 1 && a.ndim <= 2 && b.ndim >= 1 && b.ndim <= 2, TGL_ESHAPE,
              "takes vectors and matrices, got %d-d and %d-d inputs (batched_dot multiplies "
              "stacks of matrices)", a.ndim, b.ndim);
    int dt = product_dtype(a.dtype, b.dtype);
    uint32_t bc;
    int nd;
    if (a.ndim == 1 && b.ndim == 1)
        nd = 0, bc = 0;
    else if (a.ndim == 2 && b.ndim == 1)
        nd = 1, bc = tgl_type_bcast(a, 0);
    else if (a.ndim == 1)
        nd = 1, bc = tgl_type_bcast(b, 1);
    else
        nd = 2, bc = tgl_type_bcast(a, 0) | (uint32_t)tgl_type_bcast(b, 1) << 1;
    n->type = tgl_type_make(dt, nd, bc);
    return TGL_OK;
}

static tgl_status batched_dot_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type a = n->in[0]->type, b = n->in[1]->type;
    TGL_CHECK(n->p.n == 0 && n->p.flags == 0, TGL_EINVAL, "takes no parameters");
    TGL_CHECK(a.ndim == b.ndim && (a.ndim == 2 || a.ndim == 3), TGL_ESHAPE,
              "takes two 3-d inputs (B,m,k).(B,k,n) or two 2-d inputs (B,k).(B,k), got %d-d "
              "and %d-d", a.ndim, b.ndim);
    /* Batch sizes must be equal when the op runs, so one broadcastable
     * batch axis makes the output's batch size 1 too. */
    uint32_t bc = tgl_type_bcast(a, 0) || tgl_type_bcast(b, 0);
    if (a.ndim == 3)
        bc |= (uint32_t)tgl_type_bcast(a, 1) << 1 | (uint32_t)tgl_type_bcast(b, 2) << 2;
    n->type = tgl_type_make(product_dtype(a.dtype, b.dtype), a.ndim == 3 ? 3 : 1, bc);
    return TGL_OK;
}

/* ---- shapes ---------------------------------------------------------- */

static tgl_status dot_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                            int64_t *shape)
{
    const tgl_array *a = in[0], *b = in[1];
    int64_t ka = a->shape[a->ndim - 1], kb = b->shape[0];
    if (ka != kb)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "inner sizes %" PRId64 " and %" PRId64 " differ",
                            ka, kb);
    int k = 0;
    if (a->ndim == 2)
        shape[k++] = a->shape[0];
    if (b->ndim == 2)
        shape[k++] = b->shape[1];
    return tgl_blas_check_sizes(ctx, n, in, a->ndim == 2 ? a->shape[0] : 1,
                                b->ndim == 2 ? b->shape[1] : 1, ka);
}

static tgl_status batched_dot_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                    int64_t *shape)
{
    const tgl_array *a = in[0], *b = in[1];
    if (a->shape[0] != b->shape[0])
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "batch sizes %" PRId64 " and %" PRId64 " differ",
                            a->shape[0], b->shape[0]);
    int64_t ka = a->shape[a->ndim - 1], kb = b->shape[1];
    if (ka != kb)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "inner sizes %" PRId64 " and %" PRId64 " differ",
                            ka, kb);
    shape[0] = a->shape[0];
    if (a->ndim == 3) {
        shape[1] = a->shape[1];
        shape[2] = b->shape[2];
        return tgl_blas_check_sizes(ctx, n, in, a->shape[1], b->shape[2], ka);
    }
    return TGL_OK;
}

/* ---- pullbacks ------------------------------------------------------- */

static tgl_node *transpose(tgl_ctx *ctx, tgl_node *x)
{
    static const int64_t order[2] = {1, 0};
    return tgl_mk_dimshuffle(ctx, x, 2, order);
}

/* x with new broadcastable axes: order as tgl_mk_dimshuffle's. */
static tgl_node *shuffle(tgl_ctx *ctx, tgl_node *x, int n, int64_t o0, int64_t o1, int64_t o2)
{
    int64_t order[3] = {o0, o1, o2};
    return tgl_mk_dimshuffle(ctx, x, n, order);
}

/* Integer inputs get no gradient.  A node that failed to build leaves
 * NULL and its message in the context, which the driver reports. */
static tgl_status finish_grad(const tgl_node *n, tgl_node **gin)
{
    for (int i = 0; i < 2; i++)
        if (!tgl_dtype_is_float(n->in[i]->type.dtype))
            gin[i] = NULL;
    return TGL_OK;
}

/*   mm: ga = g . b^T,            gb = a^T . g
 *   mv: gA = g[:,None] . x[None,:], gx = A^T . g
 *   vm: gx = B . g,              gB = x[:,None] . g[None,:]
 *   vv: ga = g * b,              gb = g * a        (g is 0-d) */
static tgl_status dot_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    tgl_node *a = n->in[0], *b = n->in[1];
    int na = a->type.ndim, nb = b->type.ndim;
    if (na == 2 && nb == 2) {
        gin[0] = tgl_mk2(ctx, TGL_OP_DOT, g, transpose(ctx, b));
        gin[1] = tgl_mk2(ctx, TGL_OP_DOT, transpose(ctx, a), g);
    } else if (na == 2) {
        gin[0] = tgl_mk2(ctx, TGL_OP_DOT, shuffle(ctx, g, 2, 0, -1, 0), shuffle(ctx, b, 2, -1, 0, 0));
        gin[1] = tgl_mk2(ctx, TGL_OP_DOT, transpose(ctx, a), g);
    } else if (nb == 2) {
        gin[0] = tgl_mk2(ctx, TGL_OP_DOT, b, g);
        gin[1] = tgl_mk2(ctx, TGL_OP_DOT, shuffle(ctx, a, 2, 0, -1, 0), shuffle(ctx, g, 2, -1, 0, 0));
    } else {
        gin[0] = tgl_mk2(ctx, TGL_OP_MUL, g, b);
        gin[1] = tgl_mk2(ctx, TGL_OP_MUL, g, a);
    }
    return finish_grad(n, gin);
}

/*   3-d: ga = batched_dot(g, b^T per batch), gb = batched_dot(a^T per batch, g)
 *   2-d: ga = g[:,None] * b,                gb = g[:,None] * a */
static tgl_status batched_dot_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    tgl_node *a = n->in[0], *b = n->in[1];
    if (a->type.ndim == 3) {
        gin[0] = tgl_mk2(ctx, TGL_OP_BATCHED_DOT, g, shuffle(ctx, b, 3, 0, 2, 1));
        gin[1] = tgl_mk2(ctx, TGL_OP_BATCHED_DOT, shuffle(ctx, a, 3, 0, 2, 1), g);
    } else {
        tgl_node *gc = shuffle(ctx, g, 2, 0, -1, 0);
        gin[0] = tgl_mk2(ctx, TGL_OP_MUL, gc, b);
        gin[1] = tgl_mk2(ctx, TGL_OP_MUL, gc, a);
    }
    return finish_grad(n, gin);
}

/* ---- the implementations ------------------------------------------- */

const tgl_opimpl tgl_impl_dot = {
    .family = TGL_FAM_BLAS,
    .nin_min = 2,
    .nin_max = 2,
    .infer = dot_infer,
    .shape = dot_shape,
    .grad = dot_grad,
};

const tgl_opimpl tgl_impl_batched_dot = {
    .family = TGL_FAM_BLAS,
    .nin_min = 2,
    .nin_max = 2,
    .infer = batched_dot_infer,
    .shape = batched_dot_shape,
    .grad = batched_dot_grad,
};
