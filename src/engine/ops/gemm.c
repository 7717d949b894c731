/*
 * gemm.c — the BLAS-specialized ops the specialize stage rewrites dot
 * products into, with scale factors and accumulations folded in:
 *
 *   gemm(a, b [, c])   y = alpha a.b + beta c     (matrices; c broadcasts)
 *   gemv(A, x [, c])   y = alpha A.x + beta c     (A may be a transposed view)
 *   ger(A, x, y)       Y = A + alpha x y'         (rank-1 update)
 *
 * alpha is p.f[0] and beta p.f[1].  Float dtypes only (the rewrite checks).
 * When the memory planner lets the op write into c's (or A's) buffer, the
 * kernel sees out and that input share storage and skips the copy: the
 * accumulation happens in place.  The products run on the BLAS of the
 * output's backend (engine/backend.h; OpenBLAS on the CPU).
 */
#include "engine/ops/ops.h"
#include "engine/backend.h"

#include <string.h>

/* ---- layout helpers --------------------------------------------------- */

/* How BLAS can read a strided matrix without a copy: row-major with a
 * leading dimension, possibly transposed.  False: a copy is needed. */
static bool blas_view(const tgl_array *a, bool *trans, int *ld)
{
    int64_t r = a->shape[0], c = a->shape[1];
    if (a->strides[1] == 1 || c <= 1) {
        *trans = false;
        *ld = (int)(a->strides[0] > c ? a->strides[0] : (c > 0 ? c : 1));
        return a->strides[0] >= c || r <= 1;
    }
    if (a->strides[0] == 1 || r <= 1) {
        *trans = true;
        *ld = (int)(a->strides[1] > r ? a->strides[1] : (r > 0 ? r : 1));
        return a->strides[1] >= r || c <= 1;
    }
    return false;
}

/* a itself when BLAS can read it, else a contiguous copy in *tmp. */
static tgl_status readable(tgl_ctx *ctx, tgl_array *a, tgl_array **use, tgl_array **tmp,
                           bool *trans, int *ld)
{
    *tmp = NULL;
    if (blas_view(a, trans, ld)) {
        *use = a;
        return TGL_OK;
    }
    tgl_status st = tgl_array_copy(ctx, a, a->dtype_id, tmp);
    if (st)
        return st;
    *use = *tmp;
    *trans = false;
    *ld = (int)(a->shape[1] > 0 ? a->shape[1] : 1);
    return TGL_OK;
}

/* out = c broadcast to out's shape (skipped when they share storage: the
 * in-place accumulation). */
static tgl_status load_c(tgl_ctx *ctx, tgl_array *out, tgl_array *c)
{
    if (c->storage == out->storage && c->data == out->data)
        return TGL_OK;
    /* c broadcast to out's shape, as a descriptor on the stack (no
     * allocation: this runs once per step in a scan's body). */
    tgl_array v = *c;
    bool same = c->ndim == out->ndim;
    for (int d = 0; d < out->ndim; d++) {
        same = same && c->shape[d] == out->shape[d];
        v.strides[d] = c->shape[d] == 1 ? 0 : c->strides[d];
        v.shape[d] = out->shape[d];
    }
    v.ndim = out->ndim;
    v.size = out->size;
    v.refcount = 1;
    v.flags = same ? c->flags : 0;
    return tgl_array_assign(ctx, out, &v);
}

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
    return TGL_OK;
}

static tgl_status gemm_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              tgl_array *out)
{
    double alpha = n->p.f[0], beta = n->nin == 3 ? n->p.f[1] : 0.0;
    tgl_status st = TGL_OK;
    if (n->nin == 3 && beta != 0 && (st = load_c(ctx, out, in[2])))
        return st;
    int m = (int)out->shape[0], nn = (int)out->shape[1], k = (int)in[0]->shape[1];
    if (m == 0 || nn == 0)
        return TGL_OK;
    const tgl_backend *be;
    if ((st = tgl_backend_check(ctx, tgl_op_name(n->op), out, &be)))
        return st;
    if (k == 0 || alpha == 0) {
        if (beta == 0)
            memset(out->data, 0, (size_t)out->size * tgl_dtype_size(out->dtype_id));
        else if (beta != 1)
            for (int64_t i = 0; i < out->size; i++)
                tgl_store_from_double(out->dtype_id, out->data, i,
                                      beta * tgl_load_as_double(out->dtype_id, out->data, i));
        return TGL_OK;
    }
    tgl_array *a, *b, *ta, *tb;
    bool transa, transb;
    int lda, ldb;
    if ((st = readable(ctx, in[0], &a, &ta, &transa, &lda)))
        return st;
    if ((st = readable(ctx, in[1], &b, &tb, &transb, &ldb))) {
        tgl_array_release(ta);
        return st;
    }
    /* One output row (batch 1): out = alpha a.B + beta out is a gemv on
     * B, which streams B once (gemm runs several times slower on it). */
    int64_t inc_a = a->strides[1];
    tgl_errbuf e;
    if (m == 1 && nn > 1 && (k == 1 || (inc_a > 0 && inc_a <= INT32_MAX))) {
        /* a's one row has k elements at stride inc_a; B is stored as
         * itself (k x nn: transposed) or as its transpose (nn x k: not). */
        int incx = k == 1 ? 1 : (int)inc_a;
        int r = transb ? nn : k, c = transb ? k : nn;
        st = be->gemv(out->dtype_id, !transb, r, c, alpha, b->data, ldb, a->data, incx, beta,
                      out->data, 1, &e);
    } else if (k == 1 && beta == 1 && in[0]->strides[0] > 0 && in[0]->strides[0] <= INT32_MAX &&
               in[1]->strides[1] > 0 && in[1]->strides[1] <= INT32_MAX) {
        /* One inner index (a batch-1 weight gradient, x' d, added to the
         * weights): a rank-1 update of out, which BLAS's ger does without
         * gemm's per-call packing. */
        st = be->ger(out->dtype_id, m, nn, alpha, in[0]->data, (int)in[0]->strides[0],
                     in[1]->data, (int)in[1]->strides[1], out->data, nn, &e);
    } else {
        st = be->gemm(out->dtype_id, transa, transb, m, nn, k, alpha, a->data, lda, b->data, ldb,
                      beta, out->data, nn, &e);
    }
    if (st)
        st = tgl_op_error(ctx, n, in, st, "%s", e.msg);
    tgl_array_release(ta);
    tgl_array_release(tb);
    return st;
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
    .infer = gemm_infer, .shape = gemm_shape, .kernel = gemm_kernel, .grad = gemm_grad,
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
    return TGL_OK;
}

static tgl_status gemv_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              tgl_array *out)
{
    double alpha = n->p.f[0], beta = n->nin == 3 ? n->p.f[1] : 0.0;
    tgl_status st = TGL_OK;
    if (n->nin == 3 && beta != 0 && (st = load_c(ctx, out, in[2])))
        return st;
    int m = (int)in[0]->shape[0], k = (int)in[0]->shape[1];
    if (m == 0)
        return TGL_OK;
    if (k == 0 && beta == 0) {
        memset(out->data, 0, (size_t)out->size * tgl_dtype_size(out->dtype_id));
        return TGL_OK;
    }
    tgl_array *a, *ta, *x = in[1], *tx = NULL;
    bool trans;
    int lda;
    const tgl_backend *be;
    if ((st = tgl_backend_check(ctx, tgl_op_name(n->op), out, &be)))
        return st;
    if ((st = readable(ctx, in[0], &a, &ta, &trans, &lda)))
        return st;
    /* BLAS gemv takes A's stored layout: a transposed view is row-major
     * k x m read transposed. */
    int rows = trans ? k : m, cols = trans ? m : k;
    int incx = (int)x->strides[0];
    if (incx <= 0 && k > 1) {
        if ((st = tgl_array_copy(ctx, x, x->dtype_id, &tx))) {
            tgl_array_release(ta);
            return st;
        }
        x = tx;
        incx = 1;
    }
    if (incx == 0)
        incx = 1;
    tgl_errbuf e;
    if ((st = be->gemv(out->dtype_id, trans, rows, cols, alpha, a->data, lda, x->data, incx, beta,
                       out->data, 1, &e)))
        st = tgl_op_error(ctx, n, in, st, "%s", e.msg);
    tgl_array_release(ta);
    tgl_array_release(tx);
    return st;
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
    .infer = gemv_infer, .shape = gemv_shape, .kernel = gemv_kernel, .grad = gemv_grad,
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
    return TGL_OK;
}

static tgl_status ger_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                             tgl_array *out)
{
    tgl_status st = load_c(ctx, out, in[0]);
    if (st || out->size == 0)
        return st;
    const tgl_backend *be;
    if ((st = tgl_backend_check(ctx, tgl_op_name(n->op), out, &be)))
        return st;
    tgl_array *x = in[1], *y = in[2], *tx = NULL, *ty = NULL;
    if (x->strides[0] <= 0 && (st = tgl_array_copy(ctx, x, x->dtype_id, &tx)))
        return st;
    if (y->strides[0] <= 0 && (st = tgl_array_copy(ctx, y, y->dtype_id, &ty))) {
        tgl_array_release(tx);
        return st;
    }
    if (tx)
        x = tx;
    if (ty)
        y = ty;
    int m = (int)out->shape[0], nn = (int)out->shape[1];
    int ix = (int)(x->strides[0] > 0 ? x->strides[0] : 1), iy = (int)(y->strides[0] > 0 ? y->strides[0] : 1);
    tgl_errbuf e;
    if ((st = be->ger(out->dtype_id, m, nn, n->p.f[0], x->data, ix, y->data, iy, out->data, nn,
                      &e)))
        st = tgl_op_error(ctx, n, in, st, "%s", e.msg);
    tgl_array_release(tx);
    tgl_array_release(ty);
    return st;
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
    .infer = ger_infer, .shape = ger_shape, .kernel = ger_kernel, .grad = ger_grad,
};
