/*
 * blas_layout.h — which strided layouts a row-major BLAS reads in place,
 * and how the products of dot and batched_dot (engine/ops/blas.c) and of
 * gemm, gemv and ger (engine/ops/gemm.c) map onto BLAS calls: pure stride
 * logic, shared by each backend's kernels (src/cpu/kernels/blas.c and
 * gemm.c, src/cuda/blas.c) so that they pick the same calls for the same
 * views.  Backend-free: nothing here touches memory or calls a BLAS.
 */
#ifndef TGL_OPS_BLAS_LAYOUT_H
#define TGL_OPS_BLAS_LAYOUT_H

#include "engine/ops/ops.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

/* A matrix view: element (i, j) at p + (i * rs + j * cs) elements.  Vectors
 * are 1 x k (a row) or k x 1 (a column). */
typedef struct tgl_blas_mat {
    char *p;
    int64_t rows, cols, rs, cs;
} tgl_blas_mat;

/* How BLAS (row-major) reads m in place: trans 0 with ld = rs when cs is
 * 1, trans 1 with ld = cs when rs is 1 (the storage of m's transpose).  A
 * stride along an axis of size 1 never matters.  False when neither fits
 * (a copy must be made). */
static inline bool tgl_blas_layout(const tgl_blas_mat *m, bool *trans, int64_t *ld)
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
static inline bool tgl_blas_inc(int64_t len, int64_t s, int64_t *inc)
{
    *inc = len <= 1 ? 1 : s;
    return len <= INT_MAX && *inc > 0 && *inc <= INT_MAX;
}

/* The matrix formed by the last two axes of a (a->ndim >= 2), or a vector
 * as a row (as_row) or column. */
static inline tgl_blas_mat tgl_blas_mat_of(const tgl_array *a, bool as_row)
{
    tgl_blas_mat m = {a->data, 1, 1, 0, 0};
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
static inline bool tgl_blas_ready(const tgl_array *a)
{
    bool t;
    int64_t ld, inc;
    if (a->ndim == 0)
        return true;
    if (a->ndim == 1)
        return tgl_blas_inc(a->shape[0], a->strides[0], &inc);
    tgl_blas_mat m = tgl_blas_mat_of(a, false);
    return tgl_blas_layout(&m, &t, &ld);
}

/* BLAS (OpenBLAS's cblas, cuBLAS) takes its sizes as int: a float
 * product whose m, n or k is over INT_MAX would be truncated.  The shape
 * functions of dot, batched_dot, gemm, gemv and ger call this before the
 * output is allocated, so every backend reports it the same way. */
static inline tgl_status tgl_blas_check_sizes(tgl_ctx *ctx, const tgl_node *n,
                                              tgl_array *const *in, int64_t m, int64_t nn,
                                              int64_t k)
{
    if (!tgl_dtype_is_float(n->type.dtype) || (m <= INT_MAX && nn <= INT_MAX && k <= INT_MAX))
        return TGL_OK;
    return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                        "a product of sizes m=%lld, n=%lld, k=%lld: BLAS takes sizes of at most "
                        "2^31-1 (%d)", (long long)m, (long long)nn, (long long)k, INT_MAX);
}

/* ---- the BLAS call of a product C = A . B ----------------------------------- */

/* The kinds of product: matrix.matrix, matrix.vector, vector.matrix,
 * vector.vector (dot). */
enum { TGL_PROD_MM, TGL_PROD_MV, TGL_PROD_VM, TGL_PROD_VV };

/* dot's product kind for operands a and b (1-d or 2-d) and their
 * descriptors, with output c: a vector a is a row, a vector b a column;
 * the output of m.v is a column, of v.m a row, of v.v 1 x 1. */
static inline int tgl_blas_dot_mats(const tgl_array *a, const tgl_array *b, const tgl_array *c,
                                    tgl_blas_mat *A, tgl_blas_mat *B, tgl_blas_mat *C)
{
    int kind = a->ndim == 2 ? (b->ndim == 2 ? TGL_PROD_MM : TGL_PROD_MV)
                            : (b->ndim == 2 ? TGL_PROD_VM : TGL_PROD_VV);
    *A = tgl_blas_mat_of(a, true), *B = tgl_blas_mat_of(b, false);
    *C = tgl_blas_mat_of(c, kind == TGL_PROD_VM);
    return kind;
}

/* The arguments of the one BLAS call computing C = A . B. */
typedef struct tgl_blas_call {
    int kind;          /* TGL_PROD_*, after the demotion below              */
    int m, n, k;       /* A->rows, B->cols, the inner extent                 */
    /* TGL_PROD_MM: gemm(ta, tb, m, n, k, A, lda, B, ldb, C, ldc)          */
    bool ta, tb;
    int lda, ldb, ldc;
    /* TGL_PROD_MV and TGL_PROD_VM: gemv(trans, rows, cols, a, lda, x, incx,
     * y = C->p, incy), a the matrix as stored                             */
    bool gtrans;
    int rows, cols, glda, incx, incy;
    const char *ga, *gx;
    /* TGL_PROD_VV: dot(k, A->p, inc_a, B->p, inc_b)                       */
    int inc_a, inc_b;
} tgl_blas_call;

/* The BLAS call for C = A . B (layouts checked by tgl_blas_ready; k >= 1,
 * C non-empty; vectors are the 1 x k / k x 1 descriptors of
 * tgl_blas_mat_of).  A matrix product with one row or one column is a
 * matrix-vector product: gemv streams the matrix once, where gemm (tuned
 * for blocks) runs several times slower on it (batch-1 training). */
static inline tgl_blas_call tgl_blas_plan(int kind, const tgl_blas_mat *A, const tgl_blas_mat *B,
                                          const tgl_blas_mat *C, int64_t k)
{
    tgl_blas_call c = {0};
    bool ta = false, tb = false;
    int64_t lda = 0, ldb = 0, inc_a = 0, inc_b = 0, inc_c = 0, inc;
    if (kind == TGL_PROD_MM && A->rows == 1 && B->cols > 1 && tgl_blas_inc(k, A->cs, &inc))
        kind = TGL_PROD_VM;
    else if (kind == TGL_PROD_MM && B->cols == 1 && A->rows > 1 && tgl_blas_inc(k, B->rs, &inc))
        kind = TGL_PROD_MV;
    if (kind == TGL_PROD_MM || kind == TGL_PROD_MV)
        tgl_blas_layout(A, &ta, &lda);
    if (kind == TGL_PROD_MM || kind == TGL_PROD_VM)
        tgl_blas_layout(B, &tb, &ldb);
    if (kind == TGL_PROD_VM || kind == TGL_PROD_VV)
        tgl_blas_inc(k, A->cs, &inc_a);
    if (kind == TGL_PROD_MV || kind == TGL_PROD_VV)
        tgl_blas_inc(k, B->rs, &inc_b);
    int m = (int)A->rows, n = (int)B->cols, kk = (int)k;
    c.kind = kind, c.m = m, c.n = n, c.k = kk;
    c.ta = ta, c.tb = tb, c.lda = (int)lda, c.ldb = (int)ldb;
    c.inc_a = (int)inc_a, c.inc_b = (int)inc_b;
    switch (kind) {
    case TGL_PROD_MM:
        c.ldc = (int)(C->rows <= 1 ? (C->cols > 1 ? C->cols : 1) : C->rs);
        break;
    case TGL_PROD_MV:
        /* A stored as itself (m x k) or as its transpose (k x m). */
        tgl_blas_inc(m, C->rs, &inc_c);
        c.gtrans = ta, c.rows = ta ? kk : m, c.cols = ta ? m : kk;
        c.ga = A->p, c.glda = (int)lda, c.gx = B->p, c.incx = (int)inc_b;
        c.incy = (int)inc_c;
        break;
    case TGL_PROD_VM:
        /* x.B = B^T x: B stored as itself (k x n) needs the transpose,
         * stored as its transpose (n x k) does not. */
        tgl_blas_inc(n, C->cs, &inc_c);
        c.gtrans = !tb, c.rows = tb ? n : kk, c.cols = tb ? kk : n;
        c.ga = B->p, c.glda = (int)ldb, c.gx = A->p, c.incx = (int)inc_a;
        c.incy = (int)inc_c;
        break;
    default:
        break;
    }
    return c;
}

/* ---- gemm, gemv, ger: their 2-d operands --------------------------------------- */

/* How BLAS reads the strided matrix a (2-d) in place: row-major with a
 * leading dimension, possibly transposed.  False: a copy is needed (the
 * leading dimension would not fit an int, too). */
static inline bool tgl_blas_view(const tgl_array *a, bool *trans, int *ld)
{
    int64_t r = a->shape[0], c = a->shape[1], l;
    if (a->strides[1] == 1 || c <= 1) {
        *trans = false;
        l = a->strides[0] > c ? a->strides[0] : (c > 0 ? c : 1);
        *ld = (int)(l <= INT_MAX ? l : 1);
        return (a->strides[0] >= c || r <= 1) && l <= INT_MAX;
    }
    if (a->strides[0] == 1 || r <= 1) {
        *trans = true;
        l = a->strides[1] > r ? a->strides[1] : (r > 0 ? r : 1);
        *ld = (int)(l <= INT_MAX ? l : 1);
        return (a->strides[1] >= r || c <= 1) && l <= INT_MAX;
    }
    return false;
}

/* Which BLAS call computes gemm's out = alpha A.B + beta out (m x nn,
 * inner extent k >= 1, out contiguous): */
enum { TGL_GEMM_GEMM, TGL_GEMM_GEMV, TGL_GEMM_GER };

typedef struct tgl_gemm_call {
    int kind;
    /* TGL_GEMM_GEMV, for one output row (batch 1): gemv(!transb, rows,
     * cols, alpha, B, ldb, A, incx, beta, out, 1), which streams B once
     * (gemm runs several times slower on it) */
    int rows, cols, incx;
    /* TGL_GEMM_GER, for one inner index added to out (a batch-1 weight
     * gradient, x' d, added to the weights): ger(m, nn, alpha, A0, ger_incx,
     * B0, ger_incy, out, nn) on the operands as given, without gemm's
     * per-call packing */
    int ger_incx, ger_incy;
    /* TGL_GEMM_GEMM: gemm(transa, transb, ...) on A and B as BLAS reads them */
} tgl_gemm_call;

/* The call for gemm with operands a0, b0 (as given) and a, b (as BLAS
 * reads them: tgl_blas_view, or a copy), B read transposed when transb. */
static inline tgl_gemm_call tgl_gemm_plan(int m, int nn, int k, double beta, const tgl_array *a0,
                                          const tgl_array *b0, const tgl_array *a, bool transb)
{
    tgl_gemm_call c = {TGL_GEMM_GEMM, 0, 0, 0, 0, 0};
    /* a's one row has k elements at stride inc_a; B is stored as itself
     * (k x nn: transposed) or as its transpose (nn x k: not). */
    int64_t inc_a = a->strides[1];
    if (m == 1 && nn > 1 && (k == 1 || (inc_a > 0 && inc_a <= INT32_MAX))) {
        c.kind = TGL_GEMM_GEMV;
        c.incx = k == 1 ? 1 : (int)inc_a;
        c.rows = transb ? nn : k, c.cols = transb ? k : nn;
    } else if (k == 1 && beta == 1 && a0->strides[0] > 0 && a0->strides[0] <= INT32_MAX &&
               b0->strides[1] > 0 && b0->strides[1] <= INT32_MAX) {
        c.kind = TGL_GEMM_GER;
        c.ger_incx = (int)a0->strides[0], c.ger_incy = (int)b0->strides[1];
    }
    return c;
}

#endif /* TGL_OPS_BLAS_LAYOUT_H */
