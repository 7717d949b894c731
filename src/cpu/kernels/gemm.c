/*
 * gemm.c — the CPU kernels of gemm, gemv and ger (engine/ops/gemm.c).
 * The products run on the BLAS of the output's backend (engine/backend.h;
 * OpenBLAS on the CPU).  When the memory planner lets the op write into
 * c's (or A's) buffer, the kernel sees out and that input share storage
 * and skips the copy: the accumulation happens in place.
 */
#include "cpu/kernels/kernels.h"
#include "engine/ops/blas_layout.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>

/* ---- layout helpers --------------------------------------------------- */

/* a itself when BLAS can read it, else a contiguous copy in *tmp. */
static tgl_status readable(tgl_ctx *ctx, tgl_array *a, tgl_array **use, tgl_array **tmp,
                           bool *trans, int *ld)
{
    *tmp = NULL;
    if (tgl_blas_view(a, trans, ld)) {
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

/* ---- kernels ---------------------------------------------------------- */

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
    /* gemv for one output row, ger for one inner index added to out
     * (tgl_gemm_plan says why), else gemm. */
    tgl_gemm_call c = tgl_gemm_plan(m, nn, k, beta, in[0], in[1], a, transb);
    tgl_errbuf e;
    if (c.kind == TGL_GEMM_GEMV)
        st = be->gemv(out->dtype_id, !transb, c.rows, c.cols, alpha, b->data, ldb, a->data,
                      c.incx, beta, out->data, 1, &e);
    else if (c.kind == TGL_GEMM_GER)
        st = be->ger(out->dtype_id, m, nn, alpha, in[0]->data, c.ger_incx, in[1]->data,
                     c.ger_incy, out->data, nn, &e);
    else
        st = be->gemm(out->dtype_id, transa, transb, m, nn, k, alpha, a->data, lda, b->data, ldb,
                      beta, out->data, nn, &e);
    if (st)
        st = tgl_op_error(ctx, n, in, st, "%s", e.msg);
    tgl_array_release(ta);
    tgl_array_release(tb);
    return st;
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
    /* BLAS increments are int: a stride past INT_MAX is copied too */
    int64_t sx = x->strides[0];
    int incx = sx > 0 && sx <= INT_MAX ? (int)sx : 0;
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
    if ((x->strides[0] <= 0 || x->strides[0] > INT_MAX) &&
        (st = tgl_array_copy(ctx, x, x->dtype_id, &tx)))
        return st;
    if ((y->strides[0] <= 0 || y->strides[0] > INT_MAX) &&
        (st = tgl_array_copy(ctx, y, y->dtype_id, &ty))) {
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

const tgl_op_kernel tgl_cpu_kernel_gemm = {.run = gemm_kernel};
const tgl_op_kernel tgl_cpu_kernel_gemv = {.run = gemv_kernel};
const tgl_op_kernel tgl_cpu_kernel_ger = {.run = ger_kernel};
