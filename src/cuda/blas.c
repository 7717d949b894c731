/*
 * blas.c — the CUDA backend's BLAS entries (engine/backend.h: gemm, gemv,
 * ger, dot) and the op kernels of the products: dot, batched_dot
 * (engine/ops/blas.c), gemm, gemv, ger (engine/ops/gemm.c).
 *
 * The kernels compute what the CPU's do (src/cpu/kernels/blas.c, gemm.c),
 * with the same dispatch:
 *   - float32/float64 products go to the driver's BLAS (cuBLAS on a GPU,
 *     the CPU's BLAS under the emulator).  An operand is read in place
 *     when its layout is one BLAS reads: unit stride along one axis and a
 *     leading dimension at least the other extent (a transposed view is
 *     the transpose flag); vectors with a positive increment.  Other
 *     layouts, and operands of another dtype than the output's, are copied
 *     first (blas_copy: strided, converting, on the device);
 *   - integer products (dot, batched_dot of int32, int64, uint8; bool
 *     operands are promoted) run this family's kernels (cuBLAS has no
 *     integer gemm), wrapping as the CPU's loops do;
 *   - float32 dot products accumulate in double (engine/backend.h's dot;
 *     cuBLAS's sdot would sum in float32), as do batched_dot's row-wise
 *     dots in both float dtypes: this family's kernels again;
 *   - an empty inner extent gives zeros (dot, batched_dot) or beta c
 *     (gemm, gemv) without calling BLAS; alpha 0 skips gemm's product.
 * The kernels' sources are src/cuda/kernels/blas.cu(h).
 */
#include "cuda/cuda_int.h"
#include "cuda/kernels/blas.cuh"
#include "engine/ops/blas_layout.h"
#include "engine/ops/ops.h"

#include <limits.h>
#include <string.h>

_Static_assert(TGL_BLAS_F32 == TGL_FLOAT32 && TGL_BLAS_F64 == TGL_FLOAT64 &&
                   TGL_BLAS_I32 == TGL_INT32 && TGL_BLAS_I64 == TGL_INT64 &&
                   TGL_BLAS_U8 == TGL_UINT8 && TGL_BLAS_BOOL == TGL_BOOL,
               "blas.cuh's dtype ids are tgl_dtype's");
_Static_assert(TGL_BLAS_MAX_DIMS == TGL_MAX_DIMS, "blas.cuh's TGL_BLAS_MAX_DIMS");

/* ---- a kernel's run ------------------------------------------------------ */

/* What every helper below needs: the call's context, node and inputs (for
 * tgl_op_error), the options the launches read, and the TF32 setting. */
typedef struct run {
    tgl_ctx *ctx;
    const tgl_node *n;
    tgl_array *const *in;
    const tgl_backend_opts *o;
    const tgl_cuda_driver *drv;
    bool tf32;
} run;

/* Starts a kernel's run: the device up, the options read. */
static tgl_status run_begin(run *r, tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in)
{
    tgl_errbuf e;
    r->ctx = ctx, r->n = n, r->in = in;
    r->o = tgl_cuda_opts(ctx);
    tgl_status st = tgl_cuda_ready(&e);
    if (st)
        return tgl_op_error(ctx, n, in, st, "%s", e.msg);
    r->drv = tgl_cuda_drv();
    r->tf32 = tgl_cuda_allow_tf32();
    return TGL_OK;
}

/* A driver or launch failure, named as the op's. */
static tgl_status fail(const run *r, tgl_status st, const tgl_errbuf *e)
{
    return tgl_op_error(r->ctx, r->n, r->in, st, "%s", e->msg);
}

static tgl_status launch(const run *r, const char *sym, unsigned grid, unsigned block,
                         const void *args)
{
    tgl_errbuf e;
    tgl_status st = tgl_cuda_lib_launch(r->o, "blas", sym, grid, block, 0, args, &e);
    return st ? fail(r, st, &e) : TGL_OK;
}

/* ---- device helpers -------------------------------------------------------- */

/* dst = src elementwise (same shape, any strides of either), converting
 * src's dtype to dst's on the device. */
static tgl_status dev_copy(const run *r, const tgl_array *src, tgl_array *dst)
{
    if (src->size == 0)
        return TGL_OK;
    if (src->dtype_id == dst->dtype_id && tgl_array_is_contiguous(src) &&
        tgl_array_is_contiguous(dst)) {
        tgl_errbuf e;
        tgl_status st = r->drv->memcpy(dst->data, src->data,
                                       (size_t)src->size * tgl_dtype_size(src->dtype_id),
                                       TGL_CUDA_D2D, &e);
        return st ? fail(r, st, &e) : TGL_OK;
    }
    tgl_blas_copy_args a;
    memset(&a, 0, sizeof a);
    a.src = src->data, a.dst = dst->data, a.n = src->size;
    a.ndim = src->ndim, a.sdt = src->dtype_id, a.ddt = dst->dtype_id;
    for (int d = 0; d < src->ndim; d++) {
        a.shape[d] = src->shape[d];
        a.sstride[d] = src->strides[d];
        a.dstride[d] = dst->strides[d];
    }
    unsigned grid, block;
    tgl_cuda_geometry(a.n, &grid, &block);
    return launch(r, "blas_copy", grid, block, &a);
}

/* *out = a new contiguous device array of a's shape in dtype dt, holding
 * a's elements. */
static tgl_status dev_copy_new(const run *r, const tgl_array *a, int dt, tgl_array **out)
{
    tgl_status st = tgl_array_alloc_on(r->ctx, tgl_op_name(r->n->op), TGL_DEVICE_CUDA, dt, a->ndim,
                                       a->shape, false, out);
    if (st)
        return st;
    if ((st = dev_copy(r, a, *out))) {
        tgl_array_release(*out);
        *out = NULL;
    }
    return st;
}

/* Zeros the whole of a (contiguous). */
static tgl_status dev_zero(const run *r, tgl_array *a)
{
    tgl_errbuf e;
    tgl_status st = r->drv->memset(a->data, 0, (size_t)a->size * tgl_dtype_size(a->dtype_id), &e);
    return st ? fail(r, st, &e) : TGL_OK;
}

/* a = beta a (contiguous, float), as the CPU does it: beta 0 zeros (NaN
 * and all), beta 1 leaves a, else each element times beta in double. */
static tgl_status dev_scale(const run *r, tgl_array *a, double beta)
{
    if (beta == 0)
        return dev_zero(r, a);
    if (beta == 1 || a->size == 0)
        return TGL_OK;
    tgl_blas_scale_args s = {a->data, a->size, beta, a->dtype_id, 0};
    unsigned grid, block;
    tgl_cuda_geometry(s.n, &grid, &block);
    return launch(r, "blas_scale", grid, block, &s);
}

/* ---- matrix descriptors (engine/ops/blas_layout.h) ------------------------------- */

typedef tgl_blas_mat mat;

/* Whether BLAS reads a's last two axes (or a as a vector) in place; with
 * batch, also a's first axis as a batch stride cuBLAS takes (not negative). */
static bool blas_ready(const tgl_array *a, bool batch)
{
    if (batch && a->ndim >= 2 && a->shape[0] > 1 && a->strides[0] < 0)
        return false;
    return tgl_blas_ready(a);
}

/* ---- products on descriptors --------------------------------------------- */

/* Launches this family's product kernels for a (pointers, extents,
 * strides, dtype; partial and nsplit are set here): one thread per output
 * element for short sums; one block per output for long ones (dot
 * products, few outputs); for very long sums into few outputs, nsplit
 * blocks per output and a second pass adding their partial sums, so that
 * a long dot product fills the device.  o: the launch options (NULL: the
 * module cache's defaults). */
static tgl_status prod_launch(const tgl_backend_opts *o, tgl_blas_prod_args *a, tgl_errbuf *e)
{
    int64_t total = a->batch * a->m * a->n, k = a->k;
    a->partial = NULL;
    a->nsplit = 1;
    if (total == 0)
        return TGL_OK;
    const tgl_cuda_devinfo *info = tgl_cuda_info();
    int64_t fill = 4 * (int64_t)(info && info->sm_count > 0 ? info->sm_count : 1);
    if (k >= 65536 && total < fill) {
        /* enough blocks to fill the device, each thread at least 16 products */
        int64_t nsplit = (fill + total - 1) / total, most = (k + 4095) / 4096;
        nsplit = nsplit < most ? nsplit : most;
        if (nsplit >= 2) {
            size_t bytes = (size_t)(total * nsplit) * 8;
            void *partial = tgl_cuda_alloc(bytes);
            if (!partial)
                return tgl_errbuf_set(e, TGL_ENOMEM,
                                      "cuda: out of device memory (%zu bytes of partial sums)",
                                      bytes);
            a->partial = partial;
            a->nsplit = nsplit;
            int64_t blocks = total * nsplit;
            tgl_status st = tgl_cuda_lib_launch(o, "blas", "blas_prod_partial",
                                                blocks < 65535 ? (unsigned)blocks : 65535, 256,
                                                0, a, e);
            if (!st)
                st = tgl_cuda_lib_launch(o, "blas", "blas_prod_finish",
                                         total < 65535 ? (unsigned)total : 65535, 128, 0, a, e);
            tgl_cuda_free(partial); /* stream-ordered: after the kernels that read it */
            return st;
        }
    }
    if (k >= 256 || (k >= 32 && total < 2048)) {
        unsigned block = k >= 256 ? 256 : 64;
        unsigned grid = total < 65535 ? (unsigned)total : 65535;
        return tgl_cuda_lib_launch(o, "blas", "blas_prod_block", grid, block, 0, a, e);
    }
    unsigned grid, block;
    tgl_cuda_geometry(total, &grid, &block);
    return tgl_cuda_lib_launch(o, "blas", "blas_prod_thread", grid, block, 0, a, e);
}

/* The integer (or double-accumulated float) products C_b = A_b B_b
 * (m x k by k x n, C's extents) over batch, any strides: prod_launch. */
static tgl_status prod_kernel(const run *r, int dt, int64_t batch, const mat *A, int64_t as_b,
                              const mat *B, int64_t bs_b, const mat *C, int64_t cs_b, int64_t k)
{
    tgl_blas_prod_args a = {A->p, B->p, C->p, NULL, batch, C->rows, C->cols, k,
                            as_b, A->rs, A->cs, bs_b, B->rs, B->cs, cs_b, C->rs, C->cs, 1, dt, 0};
    tgl_errbuf e;
    tgl_status st = prod_launch(r->o, &a, &e);
    return st ? fail(r, st, &e) : TGL_OK;
}

/* C = A . B with the driver's BLAS (dt float32 or float64; layouts checked
 * by blas_ready; k >= 1, C non-empty): the call tgl_blas_plan picks, as
 * for the CPU's kernel. */
static tgl_status blas_product(const run *r, int dt, int kind, const mat *A, const mat *B,
                               const mat *C, int64_t k)
{
    tgl_blas_call c = tgl_blas_plan(kind, A, B, C, k);
    tgl_errbuf e;
    tgl_status st;
    switch (c.kind) {
    case TGL_PROD_MM:
        st = r->drv->gemm(dt, c.ta, c.tb, c.m, c.n, c.k, 1.0, A->p, c.lda, B->p, c.ldb, 0.0, C->p,
                          c.ldc, r->tf32, &e);
        break;
    case TGL_PROD_MV:
    case TGL_PROD_VM:
        st = r->drv->gemv(dt, c.gtrans, c.rows, c.cols, 1.0, c.ga, c.glda, c.gx, c.incx, 0.0, C->p,
                          c.incy, &e);
        break;
    default:
        /* float32 accumulates in double: this family's kernel, not
         * cuBLAS's sdot; float64 is cuBLAS's ddot. */
        if (dt == TGL_FLOAT32)
            return prod_kernel(r, dt, 1, A, 0, B, 0, C, 0, k);
        st = r->drv->dot(dt, c.k, A->p, c.inc_a, B->p, c.inc_b, C->p, &e);
        break;
    }
    return st ? fail(r, st, &e) : TGL_OK;
}

/* ---- operand preparation ----------------------------------------------------- */

/* The array the kernel reads for a: a itself when it has dtype dt and (for
 * float dtypes) a layout BLAS reads in place, else a contiguous device
 * copy converted to dt, in *tmp for the caller to release. */
static tgl_status prepare(const run *r, tgl_array *a, int dt, bool batch, tgl_array **use,
                          tgl_array **tmp)
{
    *tmp = NULL;
    *use = a;
    if (a->dtype_id == dt && (!tgl_dtype_is_float(dt) || blas_ready(a, batch)))
        return TGL_OK;
    tgl_status st = dev_copy_new(r, a, dt, tmp);
    *use = *tmp;
    return st;
}

/* The array the kernel writes: out, or a contiguous scratch array when
 * out is not contiguous (copied into out by finish_output). */
static tgl_status prepare_output(const run *r, tgl_array *out, tgl_array **dst)
{
    if (tgl_array_is_contiguous(out)) {
        *dst = out;
        return TGL_OK;
    }
    return tgl_array_alloc_on(r->ctx, tgl_op_name(r->n->op), TGL_DEVICE_CUDA, out->dtype_id,
                              out->ndim, out->shape, false, dst);
}

static tgl_status finish_output(const run *r, tgl_array *out, tgl_array *dst, tgl_status st)
{
    if (dst != out) {
        if (!st)
            st = dev_copy(r, dst, out);
        tgl_array_release(dst);
    }
    return st;
}

/* ---- dot and batched_dot ------------------------------------------------------- */

static tgl_status dot_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                             tgl_array *out)
{
    int dt = out->dtype_id;
    if (out->size == 0)
        return TGL_OK;
    if (tgl_ctx_interrupted(ctx))
        return tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
    run r;
    tgl_status st = run_begin(&r, ctx, n, in);
    if (st)
        return st;
    tgl_array *a, *b, *ta = NULL, *tb = NULL, *c;
    if (!(st = prepare(&r, in[0], dt, false, &a, &ta)) &&
        !(st = prepare(&r, in[1], dt, false, &b, &tb)) && !(st = prepare_output(&r, out, &c))) {
        mat A, B, C;
        int kind = tgl_blas_dot_mats(a, b, c, &A, &B, &C);
        int64_t k = a->shape[a->ndim - 1];
        if (k == 0)
            st = dev_zero(&r, c); /* BLAS with k 0 is not reliably a zero fill */
        else if (tgl_dtype_is_float(dt))
            st = blas_product(&r, dt, kind, &A, &B, &C, k);
        else
            st = prod_kernel(&r, dt, 1, &A, 0, &B, 0, &C, 0, k);
        st = finish_output(&r, out, c, st);
    }
    tgl_array_release(ta);
    tgl_array_release(tb);
    return st;
}

/* (B,m,k).(B,k,n): every batch product at once (a, b, c prepared: each
 * slice in a BLAS layout, batch strides not negative). */
static tgl_status batched_products(const run *r, const tgl_array *a, const tgl_array *b,
                                   tgl_array *c)
{
    int dt = c->dtype_id;
    int64_t k = a->shape[2];
    mat A = tgl_blas_mat_of(a, false), B = tgl_blas_mat_of(b, false), C = tgl_blas_mat_of(c, false);
    if (k == 0)
        return dev_zero(r, c);
    if (!tgl_dtype_is_float(dt))
        return prod_kernel(r, dt, c->shape[0], &A, a->strides[0], &B, b->strides[0], &C,
                           c->strides[0], k);
    bool ta = false, tb = false;
    int64_t lda = 1, ldb = 1;
    tgl_blas_layout(&A, &ta, &lda);
    tgl_blas_layout(&B, &tb, &ldb);
    int m = (int)C.rows, nn = (int)C.cols;
    int ldc = (int)(C.rows <= 1 ? (C.cols > 1 ? C.cols : 1) : C.rs);
    /* A batch axis of extent 1 has no stride that matters. */
    int64_t count = c->shape[0];
    int64_t sa = count > 1 ? a->strides[0] : 0, sb = count > 1 ? b->strides[0] : 0;
    int64_t sc = count > 1 ? c->strides[0] : 0;
    tgl_errbuf e;
    for (int64_t done = 0; done < count;) {
        /* cuBLAS counts batches in an int */
        int part = count - done > INT_MAX ? INT_MAX : (int)(count - done);
        int64_t es = (int64_t)tgl_dtype_size(dt);
        tgl_status st = r->drv->gemm_batched(
            dt, ta, tb, m, nn, (int)k, 1.0, A.p + done * sa * es, (int)lda, sa,
            B.p + done * sb * es, (int)ldb, sb, 0.0, C.p + done * sc * es, ldc, sc, part, r->tf32,
            &e);
        if (st)
            return fail(r, st, &e);
        done += part;
    }
    return TGL_OK;
}

static tgl_status batched_dot_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                     tgl_array *out)
{
    int dt = out->dtype_id;
    if (out->size == 0)
        return TGL_OK;
    if (tgl_ctx_interrupted(ctx))
        return tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
    run r;
    tgl_status st = run_begin(&r, ctx, n, in);
    if (st)
        return st;
    tgl_array *a = in[0], *b = in[1], *ta = NULL, *tb = NULL, *c;
    if (out->ndim == 1) {
        /* Row-wise dots: the kernel takes any strides; only dtypes need
         * converting.  Floats accumulate in double, integers wrap. */
        if (a->dtype_id != dt && !(st = dev_copy_new(&r, in[0], dt, &ta)))
            a = ta;
        if (!st && b->dtype_id != dt && !(st = dev_copy_new(&r, in[1], dt, &tb)))
            b = tb;
        if (!st) {
            int64_t k = a->shape[1];
            mat A = {a->data, 1, k, 0, a->strides[1]}, B = {b->data, k, 1, b->strides[1], 0};
            mat C = {out->data, 1, 1, 0, 0};
            if (k == 0)
                st = dev_zero(&r, out);
            else
                st = prod_kernel(&r, dt, out->shape[0], &A, a->strides[0], &B, b->strides[0], &C,
                                 out->strides[0], k);
        }
    } else if (!(st = prepare(&r, in[0], dt, true, &a, &ta)) &&
               !(st = prepare(&r, in[1], dt, true, &b, &tb)) &&
               !(st = prepare_output(&r, out, &c))) {
        st = batched_products(&r, a, b, c);
        st = finish_output(&r, out, c, st);
    }
    tgl_array_release(ta);
    tgl_array_release(tb);
    return st;
}

/* ---- gemm, gemv, ger (as the CPU's gemm.c) ------------------------------------- */

/* a itself when BLAS reads it in place, else a contiguous copy in *tmp. */
static tgl_status readable(const run *r, tgl_array *a, tgl_array **use, tgl_array **tmp,
                           bool *trans, int *ld)
{
    *tmp = NULL;
    if (tgl_blas_view(a, trans, ld)) {
        *use = a;
        return TGL_OK;
    }
    tgl_status st = dev_copy_new(r, a, a->dtype_id, tmp);
    if (st)
        return st;
    *use = *tmp;
    *trans = false;
    *ld = (int)(a->shape[1] > 0 ? a->shape[1] : 1);
    return TGL_OK;
}

/* A contiguous copy of vector x when BLAS cannot take its stride (zero or
 * negative, or too large); *inc its increment. */
static tgl_status vector_inc(const run *r, tgl_array *x, tgl_array **use, tgl_array **tmp,
                             int *inc)
{
    *tmp = NULL;
    *use = x;
    int64_t s = x->shape[0] <= 1 ? 1 : x->strides[0];
    if (s > 0 && s <= INT_MAX) {
        *inc = (int)s;
        return TGL_OK;
    }
    tgl_status st = dev_copy_new(r, x, x->dtype_id, tmp);
    *use = *tmp;
    *inc = 1;
    return st;
}

/* out = c broadcast to out's shape; skipped when they are the same memory
 * (the in-place accumulation the memory planner allows). */
static tgl_status load_c(const run *r, tgl_array *out, tgl_array *c)
{
    if (c->storage == out->storage && c->data == out->data)
        return TGL_OK;
    tgl_array *src = c, *tmp = NULL;
    tgl_status st;
    if (c->storage == out->storage) {
        /* Overlapping views: through a copy, so no element is read after
         * it was overwritten. */
        if ((st = dev_copy_new(r, c, c->dtype_id, &tmp)))
            return st;
        src = tmp;
    }
    /* src broadcast to out's shape, as a descriptor on the stack */
    tgl_array v = *src;
    for (int d = 0; d < out->ndim; d++) {
        v.strides[d] = src->shape[d] == 1 ? 0 : src->strides[d];
        v.shape[d] = out->shape[d];
    }
    v.ndim = out->ndim;
    v.size = out->size;
    v.flags = 0;
    st = dev_copy(r, &v, out);
    tgl_array_release(tmp);
    return st;
}

static tgl_status gemm_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              tgl_array *out)
{
    double alpha = n->p.f[0], beta = n->nin == 3 ? n->p.f[1] : 0.0;
    run r;
    tgl_status st = run_begin(&r, ctx, n, in);
    if (st)
        return st;
    if (n->nin == 3 && beta != 0 && (st = load_c(&r, out, in[2])))
        return st;
    int m = (int)out->shape[0], nn = (int)out->shape[1], k = (int)in[0]->shape[1];
    if (m == 0 || nn == 0)
        return TGL_OK;
    if (k == 0 || alpha == 0)
        return dev_scale(&r, out, beta); /* beta 0: zeros; c was not loaded */
    tgl_array *a, *b, *ta, *tb;
    bool transa, transb;
    int lda, ldb;
    if ((st = readable(&r, in[0], &a, &ta, &transa, &lda)))
        return st;
    if ((st = readable(&r, in[1], &b, &tb, &transb, &ldb))) {
        tgl_array_release(ta);
        return st;
    }
    /* gemv for one output row, ger for one inner index added to out
     * (tgl_gemm_plan), else gemm. */
    tgl_gemm_call c = tgl_gemm_plan(m, nn, k, beta, in[0], in[1], a, transb);
    tgl_errbuf e;
    if (c.kind == TGL_GEMM_GEMV)
        st = r.drv->gemv(out->dtype_id, !transb, c.rows, c.cols, alpha, b->data, ldb, a->data,
                         c.incx, beta, out->data, 1, &e);
    else if (c.kind == TGL_GEMM_GER)
        st = r.drv->ger(out->dtype_id, m, nn, alpha, in[0]->data, c.ger_incx, in[1]->data,
                        c.ger_incy, out->data, nn, &e);
    else
        st = r.drv->gemm(out->dtype_id, transa, transb, m, nn, k, alpha, a->data, lda, b->data,
                         ldb, beta, out->data, nn, r.tf32, &e);
    if (st)
        st = fail(&r, st, &e);
    tgl_array_release(ta);
    tgl_array_release(tb);
    return st;
}

static tgl_status gemv_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              tgl_array *out)
{
    double alpha = n->p.f[0], beta = n->nin == 3 ? n->p.f[1] : 0.0;
    run r;
    tgl_status st = run_begin(&r, ctx, n, in);
    if (st)
        return st;
    if (n->nin == 3 && beta != 0 && (st = load_c(&r, out, in[2])))
        return st;
    int m = (int)in[0]->shape[0], k = (int)in[0]->shape[1];
    if (m == 0)
        return TGL_OK;
    if (k == 0)
        return dev_scale(&r, out, beta); /* nothing to multiply: beta c */
    tgl_array *a, *ta, *x, *tx;
    bool trans;
    int lda, incx;
    if ((st = readable(&r, in[0], &a, &ta, &trans, &lda)))
        return st;
    if ((st = vector_inc(&r, in[1], &x, &tx, &incx))) {
        tgl_array_release(ta);
        return st;
    }
    /* BLAS gemv takes A's stored layout: a transposed view is k x m read
     * transposed. */
    int rows = trans ? k : m, cols = trans ? m : k;
    tgl_errbuf e;
    if ((st = r.drv->gemv(out->dtype_id, trans, rows, cols, alpha, a->data, lda, x->data, incx,
                          beta, out->data, 1, &e)))
        st = fail(&r, st, &e);
    tgl_array_release(ta);
    tgl_array_release(tx);
    return st;
}

static tgl_status ger_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                             tgl_array *out)
{
    run r;
    tgl_status st = run_begin(&r, ctx, n, in);
    if (st || (st = load_c(&r, out, in[0])) || out->size == 0)
        return st;
    tgl_array *x, *y, *tx, *ty;
    int ix, iy;
    if ((st = vector_inc(&r, in[1], &x, &tx, &ix)))
        return st;
    if ((st = vector_inc(&r, in[2], &y, &ty, &iy))) {
        tgl_array_release(tx);
        return st;
    }
    int m = (int)out->shape[0], nn = (int)out->shape[1];
    tgl_errbuf e;
    if ((st = r.drv->ger(out->dtype_id, m, nn, n->p.f[0], x->data, ix, y->data, iy, out->data, nn,
                         &e)))
        st = fail(&r, st, &e);
    tgl_array_release(tx);
    tgl_array_release(ty);
    return st;
}

const tgl_op_kernel tgl_cuda_kernel_dot = {.run = dot_kernel};
const tgl_op_kernel tgl_cuda_kernel_batched_dot = {.run = batched_dot_kernel};
const tgl_op_kernel tgl_cuda_kernel_gemm = {.run = gemm_kernel};
const tgl_op_kernel tgl_cuda_kernel_gemv = {.run = gemv_kernel};
const tgl_op_kernel tgl_cuda_kernel_ger = {.run = ger_kernel};

/* ---- the backend's BLAS entries ------------------------------------------------ */

tgl_status tgl_cuda_be_gemm(int dtype, bool trans_a, bool trans_b, int m, int n, int k,
                            double alpha, const void *a, int lda, const void *b, int ldb,
                            double beta, void *c, int ldc, tgl_errbuf *err)
{
    tgl_status st = tgl_cuda_ready(err);
    if (st)
        return st;
    return tgl_cuda_drv()->gemm(dtype, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                                ldc, tgl_cuda_allow_tf32(), err);
}

tgl_status tgl_cuda_be_gemv(int dtype, bool trans, int rows, int cols, double alpha,
                            const void *a, int lda, const void *x, int incx, double beta,
                            void *y, int incy, tgl_errbuf *err)
{
    tgl_status st = tgl_cuda_ready(err);
    if (st)
        return st;
    return tgl_cuda_drv()->gemv(dtype, trans, rows, cols, alpha, a, lda, x, incx, beta, y, incy,
                                err);
}

tgl_status tgl_cuda_be_ger(int dtype, int m, int n, double alpha, const void *x, int incx,
                           const void *y, int incy, void *a, int lda, tgl_errbuf *err)
{
    tgl_status st = tgl_cuda_ready(err);
    if (st)
        return st;
    return tgl_cuda_drv()->ger(dtype, m, n, alpha, x, incx, y, incy, a, lda, err);
}

/* float32 sums in double (engine/backend.h): this family's product
 * kernels on the two strided vectors; float64 is cuBLAS's ddot. */
tgl_status tgl_cuda_be_dot(int dtype, int n, const void *x, int incx, const void *y, int incy,
                           void *out, tgl_errbuf *err)
{
    tgl_status st = tgl_cuda_ready(err);
    if (st)
        return st;
    if (dtype != TGL_FLOAT32 || n <= 0)
        return tgl_cuda_drv()->dot(dtype, n, x, incx, y, incy, out, err);
    /* BLAS's negative increment walks the vector from its far end. */
    const float *xs = (const float *)x + (incx < 0 ? (int64_t)(n - 1) * -incx : 0);
    const float *ys = (const float *)y + (incy < 0 ? (int64_t)(n - 1) * -incy : 0);
    tgl_blas_prod_args a = {xs, ys, out, NULL, 1, 1, 1, n, 0, 0, incx, 0, incy, 0, 0, 0, 0, 1,
                            dtype, 0};
    /* No context here: the module cache's defaults (NULL options). */
    return prod_launch(NULL, &a, err);
}
