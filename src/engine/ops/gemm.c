/*
 * gemm.c — the BLAS-specialized ops the specialize stage rewrites dot
 * products into, with scale factors and accumulations folded in:
 *
 *   gemm(a, b [, c])   y = alpha a.b + beta c     (matrices; c broadcasts)
 *   gemv(A, x [, c])   y = alpha A.x + beta c     (A may be a transposed view)
 *   ger(A, x, y)       Y = A + alpha x y'         (rank-1 update)
 *
 * alpha is p.f[0] and beta p.f[1].  Float dtypes only (the rewrite checks).
 * The kernels are the backends' (src/cpu/kernels/gemm.c on the CPU); out
 * may take c's (or A's) buffer (inplace below): the accumulation then
 * happens in place.
 */
#include "engine/ops/ops.h"
#include "engine/ops/blas_layout.h"

#include <string.h>

/* ---- shape helpers ---------------------------------------------------- */

static bool check_c(const tgl_node *n, tgl_array *const *in, int ci, const tgl_array *out_like,
                    int nd, const int64_t *shape)
{
    (void)n;
    if (ci < 0)
        return true;
    for (int d = 0; d < nd; d++)
        if (in[ci]->shape[d] != 1 && in[ci]->shape[d] != shape[d])
            return false;
    (void)out_like;
    return true;
}

/* ---- gemm -------------------------------------------------------------- */

static tgl_status gemm_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type a = n->in[0]->type, b = n->in[1]->type;
    TGL_CHECK(a.ndim == 2 && b.ndim == 2, TGL_ESHAPE, "needs two matrices");
    TGL_CHECK(tgl_dtype_is_float(a.dtype) && a.dtype == b.dtype, TGL_EDTYPE,
              "needs float inputs of one dtype");
    uint32_t bcast = (a.bcast & 1u) | (b.bcast & 2u);
    if (n->nin == 3) {
        tgl_type c = n->in[2]->type;
        TGL_CHECK(c.ndim == 2 && c.dtype == a.dtype, TGL_EDTYPE, "c must be a matrix of %s",
                  tgl_dtype_name(a.dtype));
        bcast &= c.bcast;
    }
    n->type = tgl_type_make(a.dtype, 2, bcast);
    return TGL_OK;
}

static tgl_status gemm_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, int64_t *shape)
{
    if (in[0]->shape[1] != in[1]->shape[0])
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "inner sizes %lld and %lld differ",
                            (long long)in[0]->shape[1], (long long)in[1]->shape[0]);
    shape[0] = in[0]->shape[0];
    shape[1] = in[1]->shape[1];
    if (!check_c(n, in, n->nin == 3 ? 2 : -1, NULL, 2, shape))
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "c does not broadcast to %lldx%lld",
                            (long long)shape[0], (long long)shape[1]);
    return tgl_blas_check_sizes(ctx, n, in, shape[0], shape[1], in[0]->shape[1]);
}

static tgl_node *scaled(tgl_ctx *ctx, tgl_node *x, double s)
{
    if (!x || s == 1)
        return x;
    return tgl_mk2(ctx, TGL_OP_MUL, tgl_mk_scalar(ctx, x->type.dtype, s), x);
}

static tgl_node *transposed(tgl_ctx *ctx, tgl_node *x)
{
    int64_t order[2] = {1, 0};
    return tgl_mk_dimshuffle(ctx, x, 2, order);
}

static tgl_status gemm_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    tgl_node *a = n->in[0], *b = n->in[1];
    gin[0] = scaled(ctx, tgl_mk2(ctx, TGL_OP_DOT, g, transposed(ctx, b)), n->p.f[0]);
    gin[1] = scaled(ctx, tgl_mk2(ctx, TGL_OP_DOT, transposed(ctx, a), g), n->p.f[0]);
    if (n->nin == 3)
        gin[2] = scaled(ctx, g, n->p.f[1]);
    return TGL_OK;
}

/* The accumulator c (or A for ger), when it has the output's full type. */
static int acc_inplace(const tgl_node *n)
{
    int i = n->op == TGL_OP_GER ? 0 : 2;
    return n->nin > i && tgl_type_eq(n->in[i]->type, n->type) ? i : -1;
}

const tgl_opimpl tgl_impl_gemm = {
    .family = TGL_FAM_BLAS, .nin_min = 2, .nin_max = 3, .inplace = acc_inplace,
    .infer = gemm_infer, .shape = gemm_shape, .grad = gemm_grad,
};

/* ---- gemv -------------------------------------------------------------- */

static tgl_status gemv_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type a = n->in[0]->type, x = n->in[1]->type;
    TGL_CHECK(a.ndim == 2 && x.ndim == 1, TGL_ESHAPE, "needs a matrix and a vector");
    TGL_CHECK(tgl_dtype_is_float(a.dtype) && a.dtype == x.dtype, TGL_EDTYPE,
              "needs float inputs of one dtype");
    uint32_t bcast = a.bcast & 1u;
    if (n->nin == 3) {
        tgl_type c = n->in[2]->type;
        TGL_CHECK(c.ndim == 1 && c.dtype == a.dtype, TGL_EDTYPE, "c must be a vector of %s",
                  tgl_dtype_name(a.dtype));
        bcast &= c.bcast;
    }
    n->type = tgl_type_make(a.dtype, 1, bcast);
    return TGL_OK;
}

static tgl_status gemv_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, int64_t *shape)
{
    if (in[0]->shape[1] != in[1]->shape[0])
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "inner sizes %lld and %lld differ",
                            (long long)in[0]->shape[1], (long long)in[1]->shape[0]);
    shape[0] = in[0]->shape[0];
    if (!check_c(n, in, n->nin == 3 ? 2 : -1, NULL, 1, shape))
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "c does not broadcast to %lld",
                            (long long)shape[0]);
    return tgl_blas_check_sizes(ctx, n, in, shape[0], 1, in[0]->shape[1]);
}

static tgl_status gemv_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    tgl_node *a = n->in[0], *x = n->in[1];
    int64_t col[2] = {0, -1}, row[2] = {-1, 0};
    gin[0] = scaled(ctx, tgl_mk2(ctx, TGL_OP_DOT, tgl_mk_dimshuffle(ctx, g, 2, col),
                                 tgl_mk_dimshuffle(ctx, x, 2, row)), n->p.f[0]);
    gin[1] = scaled(ctx, tgl_mk2(ctx, TGL_OP_DOT, transposed(ctx, a), g), n->p.f[0]);
    if (n->nin == 3)
        gin[2] = scaled(ctx, g, n->p.f[1]);
    return TGL_OK;
}

const tgl_opimpl tgl_impl_gemv = {
    .family = TGL_FAM_BLAS, .nin_min = 2, .nin_max = 3, .inplace = acc_inplace,
    .infer = gemv_infer, .shape = gemv_shape, .grad = gemv_grad,
};

/* ---- ger --------------------------------------------------------------- */

static tgl_status ger_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type a = n->in[0]->type, x = n->in[1]->type, y = n->in[2]->type;
    TGL_CHECK(a.ndim == 2 && x.ndim == 1 && y.ndim == 1, TGL_ESHAPE,
              "needs a matrix and two vectors");
    TGL_CHECK(tgl_dtype_is_float(a.dtype) && a.dtype == x.dtype && a.dtype == y.dtype,
              TGL_EDTYPE, "needs float inputs of one dtype");
    n->type = tgl_type_make(a.dtype, 2, a.bcast & ((x.bcast & 1u) | ((y.bcast & 1u) << 1)));
    return TGL_OK;
}

static tgl_status ger_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, int64_t *shape)
{
    shape[0] = in[1]->shape[0];
    shape[1] = in[2]->shape[0];
    if (!check_c(n, in, 0, NULL, 2, shape))
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "A does not broadcast to %lldx%lld",
                            (long long)shape[0], (long long)shape[1]);
    return tgl_blas_check_sizes(ctx, n, in, shape[0], shape[1], 1);
}

static tgl_status ger_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    tgl_node *x = n->in[1], *y = n->in[2];
    gin[0] = g;
    gin[1] = scaled(ctx, tgl_mk2(ctx, TGL_OP_DOT, g, y), n->p.f[0]);
    gin[2] = scaled(ctx, tgl_mk2(ctx, TGL_OP_DOT, x, g), n->p.f[0]);
    return TGL_OK;
}

const tgl_opimpl tgl_impl_ger = {
    .family = TGL_FAM_BLAS, .nin_min = 3, .nin_max = 3, .inplace = acc_inplace,
    .infer = ger_infer, .shape = ger_shape, .grad = ger_grad,
};
