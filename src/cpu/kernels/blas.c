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

#include <limits.h>
#include <string.h>

/* ---- matrix descriptors ------------------------------------------- */

/* A matrix view: element (i, j) at p + (i * rs + j * cs) elements.  Vectors
 * are 1 x k (a row) or k x 1 (a column). */
typedef struct mat {
    char *p;
    int64_t rows, cols, rs, cs;
} mat;

/* How BLAS (row-major) reads m in place: trans 0 with ld = rs when cs is
 * 1, trans 1 with ld = cs when rs is 1 (the storage of m's transpose).  A
 * stride along an axis of size 1 never matters.  False when neither fits
 * (a copy must be made). */
static bool blas_layout(const mat *m, bool *trans, int64_t *ld)
{
    if (m->rows > INT_MAX || m->cols > INT_MAX)
        return false;
    int64_t rows1 = m->rows > 1 ? m->rows : 1, cols1 = m->cols > 1 ? m->cols : 1;
    int64_t rs = m->rows <= 1 ? cols1 : m->rs, cs = m->cols <= 1 ? 1 : m->cs;
    if (cs == 1 && rs >= cols1 && rs <= INT_MAX) {
        *trans = false;
        *ld = rs;
        return true;
    }
    rs = m->rows <= 1 ? 1 : m->rs;
    cs = m->cols <= 1 ? rows1 : m->cs;
    if (rs == 1 && cs >= rows1 && cs <= INT_MAX) {
        *trans = true;
        *ld = cs;
        return true;
    }
    return false;
}

/* The BLAS increment of a vector of len elements at stride s; false when
 * BLAS cannot take it (zero or negative strides mean other things there). */
static bool blas_inc(int64_t len, int64_t s, int64_t *inc)
{
    *inc = len <= 1 ? 1 : s;
    return len <= INT_MAX && *inc > 0 && *inc <= INT_MAX;
}

/* The matrix formed by the last two axes of a (a->ndim >= 2), or a vector
 * as a row (as_row) or column. */
static mat mat_of(const tgl_array *a, bool as_row)
{
    mat m = {a->data, 1, 1, 0, 0};
    int nd = a->ndim;
    if (nd >= 2) {
        m.rows = a->shape[nd - 2], m.cols = a->shape[nd - 1];
        m.rs = a->strides[nd - 2], m.cs = a->strides[nd - 1];
    } else if (nd == 1 && as_row) {
        m.cols = a->shape[0], m.cs = a->strides[0];
    } else if (nd == 1) {
        m.rows = a->shape[0], m.rs = a->strides[0];
    }
    return m;
}

/* True when BLAS can read (or write) a's last two axes, or a as a vector,
 * in place. */
static bool blas_ready(const tgl_array *a)
{
    bool t;
    int64_t ld, inc;
    if (a->ndim == 0)
        return true;
    if (a->ndim == 1)
        return blas_inc(a->shape[0], a->strides[0], &inc);
    mat m = mat_of(a, false);
    return blas_layout(&m, &t, &ld);
}

/* ---- products on descriptors ------------------------------------------ */

enum { PROD_MM, PROD_MV, PROD_VM, PROD_VV };

/* C = A . B with the backend's BLAS (dt float32 or float64; layouts
 * checked by blas_ready; k >= 1, C non-empty).  Vectors are the 1 x k /
 * k x 1 descriptors of mat_of; the kind picks the BLAS level. */
static tgl_status blas_product(const tgl_backend *be, int dt, int kind, const mat *A, const mat *B,
                               const mat *C, int64_t k, tgl_errbuf *e)
{
    bool ta = false, tb = false;
    int64_t lda = 0, ldb = 0, inc_a = 0, inc_b = 0, inc_c = 0, inc;
    /* A matrix product with one row or one column is a matrix-vector
     * product: gemv streams the matrix once, where gemm (tuned for
     * blocks) runs several times slower on it (batch-1 training). */
    if (kind == PROD_MM && A->rows == 1 && B->cols > 1 && blas_inc(k, A->cs, &inc))
        kind = PROD_VM;
    else if (kind == PROD_MM && B->cols == 1 && A->rows > 1 && blas_inc(k, B->rs, &inc))
        kind = PROD_MV;
    if (kind == PROD_MM || kind == PROD_MV)
        blas_layout(A, &ta, &lda);
    if (kind == PROD_MM || kind == PROD_VM)
        blas_layout(B, &tb, &ldb);
    if (kind == PROD_VM || kind == PROD_VV)
        blas_inc(k, A->cs, &inc_a);
    if (kind == PROD_MV || kind == PROD_VV)
        blas_inc(k, B->rs, &inc_b);
    int m = (int)A->rows, n = (int)B->cols, kk = (int)k;
    switch (kind) {
    case PROD_MM: {
        int ldc = (int)(C->rows <= 1 ? (C->cols > 1 ? C->cols : 1) : C->rs);
        return be->gemm(dt, ta, tb, m, n, kk, 1.0, A->p, (int)lda, B->p, (int)ldb, 0.0, C->p, ldc,
                        e);
    }
    case PROD_MV: {
        /* A stored as itself (m x k) or as its transpose (k x m). */
        blas_inc(m, C->rs, &inc_c);
        int r = ta ? kk : m, c = ta ? m : kk;
        return be->gemv(dt, ta, r, c, 1.0, A->p, (int)lda, B->p, (int)inc_b, 0.0, C->p,
                        (int)inc_c, e);
    }
    case PROD_VM: {
        /* x.B = B^T x: B stored as itself (k x n) needs the transpose,
         * stored as its transpose (n x k) does not. */
        blas_inc(n, C->cs, &inc_c);
        int r = tb ? n : kk, c = tb ? kk : n;
        return be->gemv(dt, !tb, r, c, 1.0, B->p, (int)ldb, A->p, (int)inc_a, 0.0, C->p,
                        (int)inc_c, e);
    }
    default:
        /* float32 accumulates in double (the backend's dot says so). */
        return be->dot(dt, kk, A->p, (int)inc_a, B->p, (int)inc_b, C->p, e);
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
    if (a->dtype_id == dt && (!tgl_dtype_is_float(dt) || blas_ready(a)))
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
        int kind = a->ndim == 2 ? (b->ndim == 2 ? PROD_MM : PROD_MV)
                                : (b->ndim == 2 ? PROD_VM : PROD_VV);
        /* A vector a is a row, a vector b a column; the output of m.v is
         * a column, of v.m a row, of v.v 1 x 1. */
        mat A = mat_of(a, true), B = mat_of(b, false), C = mat_of(c, kind == PROD_VM);
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
        product(NULL, dt, PROD_VV, &A, &B, &C, k, NULL); /* integers: never fails */
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
    mat A = mat_of(a, false), B = mat_of(b, false), C = mat_of(c, false);
    for (int64_t i = 0; i < c->shape[0]; i++) {
        if (tgl_ctx_interrupted(ctx))
            return tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
        mat Ai = A, Bi = B, Ci = C;
        Ai.p += i * a->strides[0] * es;
        Bi.p += i * b->strides[0] * es;
        Ci.p += i * c->strides[0] * es;
        tgl_errbuf e;
        if ((st = product(be, dt, PROD_MM, &Ai, &Bi, &Ci, a->shape[2], &e)))
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
