/*
 * blas.c — the CPU kernels of dot and batched_dot (engine/ops/blas.c).
 *
 * float32/float64 go to the BLAS of the output's backend
 * (engine/backend.h: gemm, gemv, dot; OpenBLAS on the CPU).  BLAS reads a
 * matrix in place when one of its two strides is 1 (a transposed view is
 * passed as the transpose flag with the other stride as leading
 * dimension); other layouts, and inputs of another dtype, are copied to C
 * order first.  A zero inner size gives zeros without calling BLAS.
 * Integer dtypes run plain loops that wrap on overflow (computed in
 * uint64, so it is defined behaviour).
 */
#include "cpu/kernels/kernels.h"
#include "engine/ops/blas_layout.h"

#include <string.h>

/* The matrix descriptor of engine/ops/blas_layout.h. */
typedef tgl_blas_mat mat;

/* C = A . B with the backend's BLAS (dt float32 or float64; layouts
 * checked by tgl_blas_ready; k >= 1, C non-empty), the call
 * tgl_blas_plan picks. */
static tgl_status blas_product(const tgl_backend *be, int dt, int kind, const mat *A, const mat *B,
                               const mat *C, int64_t k, tgl_errbuf *e)
{
    tgl_blas_call c = tgl_blas_plan(kind, A, B, C, k);
    switch (c.kind) {
    case TGL_PROD_MM:
        return be->gemm(dt, c.ta, c.tb, c.m, c.n, c.k, 1.0, A->p, c.lda, B->p, c.ldb, 0.0, C->p,
                        c.ldc, e);
    case TGL_PROD_MV:
    case TGL_PROD_VM:
        return be->gemv(dt, c.gtrans, c.rows, c.cols, 1.0, c.ga, c.glda, c.gx, c.incx, 0.0, C->p,
                        c.incy, e);
    default:
        /* float32 accumulates in double (the backend's dot says so). */
        return be->dot(dt, c.k, A->p, c.inc_a, B->p, c.inc_b, C->p, e);
    }
}

/* C = A . B for integer dtypes, any strides, wrapping arithmetic. */
#define INT_PRODUCT(T, NAME)                                                           \
    static void int_product_##NAME(const mat *A, const mat *B, const mat *C, int64_t k) \
    {                                                                                  \
        for (int64_t i = 0; i < C->rows; i++)                                          \
            for (int64_t j = 0; j < C->cols; j++) {                                    \
                uint64_t s = 0;                                                        \
                for (int64_t p = 0; p < k; p++)                                        \
                    s += (uint64_t)((const T *)A->p)[i * A->rs + p * A->cs] *          \
                         (uint64_t)((const T *)B->p)[p * B->rs + j * B->cs];           \
                ((T *)C->p)[i * C->rs + j * C->cs] = (T)s;                             \
            }                                                                          \
    }

INT_PRODUCT(int32_t, i32)
INT_PRODUCT(int64_t, i64)
INT_PRODUCT(uint8_t, u8)

/* C = A . B in dtype dt (operands already converted); k == 0 gives zeros.
 * Floats go to be's BLAS, integers to host loops. */
static tgl_status product(const tgl_backend *be, int dt, int kind, const mat *A, const mat *B,
                          const mat *C, int64_t k, tgl_errbuf *e)
{
    size_t es = tgl_dtype_size(dt);
    if (C->rows == 0 || C->cols == 0)
        return TGL_OK;
    if (k == 0) {
        /* BLAS with k = 0 is not reliably a zero fill; do it here. */
        for (int64_t i = 0; i < C->rows; i++)
            for (int64_t j = 0; j < C->cols; j++)
                memset(C->p + (i * C->rs + j * C->cs) * (int64_t)es, 0, es);
        return TGL_OK;
    }
    switch (dt) {
    case TGL_FLOAT32: case TGL_FLOAT64: return blas_product(be, dt, kind, A, B, C, k, e);
    case TGL_INT32: int_product_i32(A, B, C, k); break;
    case TGL_INT64: int_product_i64(A, B, C, k); break;
    default: int_product_u8(A, B, C, k); break;
    }
    return TGL_OK;
}

/* ---- operand preparation ------------------------------------------ */

/* The array the kernel reads for a: a itself when it already has dtype dt
 * and (for BLAS dtypes) a layout BLAS reads in place, else a C-order copy
 * converted to dt, returned in *tmp for the caller to release. */
static tgl_status prepare(tgl_ctx *ctx, tgl_array *a, int dt, tgl_array **use, tgl_array **tmp)
{
    *tmp = NULL;
    *use = a;
    if (a->dtype_id == dt && (!tgl_dtype_is_float(dt) || tgl_blas_ready(a)))
        return TGL_OK;
    tgl_status st = tgl_array_copy(ctx, a, dt, tmp);
    *use = *tmp;
    return st;
}

/* The array the kernel writes: out, or a contiguous scratch array when
 * BLAS cannot write out's layout (copied into out by finish_output). */
static tgl_status prepare_output(tgl_ctx *ctx, tgl_array *out, tgl_array **dst)
{
    if (!tgl_dtype_is_float(out->dtype_id) || tgl_array_is_contiguous(out)) {
        *dst = out;
        return TGL_OK;
    }
    return tgl_array_empty(ctx, out->dtype_id, out->ndim, out->shape, dst);
}

static tgl_status finish_output(tgl_ctx *ctx, tgl_array *out, tgl_array *dst, tgl_status st)
{
    if (dst != out) {
        if (!st)
            st = tgl_array_assign(ctx, out, dst);
        tgl_array_release(dst);
    }
    return st;
}

/* ---- kernels --------------------------------------------------------- */

static tgl_status dot_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                             tgl_array *out)
{
    int dt = out->dtype_id;
    if (out->size == 0)
        return TGL_OK;
    if (tgl_ctx_interrupted(ctx))
        return tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
    tgl_array *a, *b, *ta = NULL, *tb = NULL, *c;
    const tgl_backend *be;
    tgl_status st;
    if ((st = tgl_backend_check(ctx, tgl_op_name(n->op), out, &be)))
        return st;
    if (!(st = prepare(ctx, in[0], dt, &a, &ta)) && !(st = prepare(ctx, in[1], dt, &b, &tb)) &&
        !(st = prepare_output(ctx, out, &c))) {
        mat A, B, C;
        int kind = tgl_blas_dot_mats(a, b, c, &A, &B, &C);
        tgl_errbuf e;
        if ((st = product(be, dt, kind, &A, &B, &C, a->shape[a->ndim - 1], &e)))
            st = tgl_op_error(ctx, n, in, st, "%s", e.msg);
        st = finish_output(ctx, out, c, st);
    }
    tgl_array_release(ta);
    tgl_array_release(tb);
    return st;
}

/* Row-wise dot products of two (B,k) arrays of out's dtype: floats
 * accumulate in double, integers wrap (host loops, no BLAS). */
static void rowwise_dots(const tgl_array *a, const tgl_array *b, tgl_array *out)
{
    int dt = out->dtype_id;
    int64_t k = a->shape[1], es = (int64_t)tgl_dtype_size(dt);
    for (int64_t r = 0; r < out->size; r++) {
        int64_t oa = r * a->strides[0], ob = r * b->strides[0], oo = r * out->strides[0];
        if (tgl_dtype_is_float(dt)) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += tgl_load_as_double(dt, a->data, oa + p * a->strides[1]) *
                     tgl_load_as_double(dt, b->data, ob + p * b->strides[1]);
            tgl_store_from_double(dt, out->data, oo, s);
            continue;
        }
        mat A = {(char *)a->data + oa * es, 1, k, 0, a->strides[1]};
        mat B = {(char *)b->data + ob * es, k, 1, b->strides[1], 0};
        mat C = {(char *)out->data + oo * es, 1, 1, 0, 0};
        product(NULL, dt, TGL_PROD_VV, &A, &B, &C, k, NULL); /* integers: never fails */
    }
}

/* (B,m,k).(B,k,n): one product per batch index (a, b and c prepared). */
static tgl_status batched_products(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                   const tgl_array *a, const tgl_array *b, tgl_array *c)
{
    const tgl_backend *be;
    tgl_status st = tgl_backend_check(ctx, tgl_op_name(n->op), c, &be);
    if (st)
        return st;
    int dt = c->dtype_id;
    int64_t es = (int64_t)tgl_dtype_size(dt);
    /* Every batch slice has the same layout, so prepare's check on the
     * whole array covered all of them. */
    mat A = tgl_blas_mat_of(a, false), B = tgl_blas_mat_of(b, false);
    mat C = tgl_blas_mat_of(c, false);
    for (int64_t i = 0; i < c->shape[0]; i++) {
        if (tgl_ctx_interrupted(ctx))
            return tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
        mat Ai = A, Bi = B, Ci = C;
        Ai.p += i * a->strides[0] * es;
        Bi.p += i * b->strides[0] * es;
        Ci.p += i * c->strides[0] * es;
        tgl_errbuf e;
        if ((st = product(be, dt, TGL_PROD_MM, &Ai, &Bi, &Ci, a->shape[2], &e)))
            return tgl_op_error(ctx, n, in, st, "%s", e.msg);
    }
    return TGL_OK;
}

static tgl_status batched_dot_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                     tgl_array *out)
{
    int dt = out->dtype_id;
    if (out->size == 0)
        return TGL_OK;
    tgl_array *a = in[0], *b = in[1], *ta = NULL, *tb = NULL, *c;
    tgl_status st = TGL_OK;
    if (out->ndim == 1) {
        /* Only dtypes need converting: the loops take any strides. */
        if (a->dtype_id != dt && !(st = tgl_array_copy(ctx, in[0], dt, &ta)))
            a = ta;
        if (!st && b->dtype_id != dt && !(st = tgl_array_copy(ctx, in[1], dt, &tb)))
            b = tb;
        if (!st)
            rowwise_dots(a, b, out);
    } else if (!(st = prepare(ctx, in[0], dt, &a, &ta)) && !(st = prepare(ctx, in[1], dt, &b, &tb)) &&
               !(st = prepare_output(ctx, out, &c))) {
        st = batched_products(ctx, n, in, a, b, c);
        st = finish_output(ctx, out, c, st);
    }
    tgl_array_release(ta);
    tgl_array_release(tb);
    return st;
}

const tgl_op_kernel tgl_cpu_kernel_dot = {.run = dot_kernel};
const tgl_op_kernel tgl_cpu_kernel_batched_dot = {.run = batched_dot_kernel};
