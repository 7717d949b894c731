/*
 * reduce.c — the reduction family: sum, prod, max and min over a set of
 * axes; argmax and argmin along one axis; axes_size, the element count over
 * a set of axes (mean = sum / axes_size).
 *
 * Parameters (C level, 0-based): p.i[0..p.n-1] are the axes, strictly
 * ascending (the Lua layer sorts the user's 1-based, possibly negative
 * axes); p.n == 0 reduces nothing.  p.flags & TGL_REDUCE_KEEPDIMS keeps
 * the reduced axes with size 1, broadcastable in the type.  Messages name
 * axes 1-based, as users wrote them.
 *
 * Types: sum and prod of bool, uint8, int32 and int64 give int64 (wrapping
 * on overflow); floats keep their dtype.  max and min keep the dtype.
 * argmax and argmin give int64 holding 1-based positions.
 *
 * The kernel: one pass over the input in (roughly) memory order, accumulating
 * into a buffer laid out like the output: double for float inputs (so
 * float32 sums are accurate), int64 for integer ones.  Sorting the axes by
 * stride and merging the ones that are contiguous together makes the inner
 * loop either a flat reduction into one accumulator (reduced axes
 * innermost) or a flat row added into a row of accumulators (kept axes
 * innermost, e.g. the column sums of a bias gradient); both read memory
 * sequentially.  max and min propagate NaN; over an empty set they fail.
 * The kernels are the backends' (src/cpu/kernels/reduce.c on the CPU).
 */
#include "engine/ops/reduce.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameters and types ------------------------------------------ */

/* Checks p.i[0..p.n-1] as the axes of an nd-dimensional input and returns
 * them as a bit mask in *mask. */
static tgl_status check_axes(tgl_ctx *ctx, const tgl_node *n, int nd, uint32_t *mask)
{
    TGL_CHECK((n->p.flags & ~TGL_REDUCE_KEEPDIMS) == 0, TGL_EINVAL, "unknown flags %d",
              (int)n->p.flags);
    TGL_CHECK(n->p.n <= nd, TGL_EINVAL, "%d axes given for a %d-d input", (int)n->p.n, nd);
    uint32_t m = 0;
    for (int i = 0; i < n->p.n; i++) {
        int64_t a = n->p.i[i];
        TGL_CHECK(a >= 0 && a < nd, TGL_EINVAL, "axis %" PRId64 " is out of range for a %d-d input",
                  a + 1, nd);
        TGL_CHECK(!((m >> a) & 1u), TGL_EINVAL, "axis %" PRId64 " is listed twice", a + 1);
        TGL_CHECK(i == 0 || a > n->p.i[i - 1], TGL_EINVAL,
                  "axes must be in ascending order (axis %" PRId64 " after %" PRId64 ")", a + 1,
                  n->p.i[i - 1] + 1);
        m |= 1u << a;
    }
    *mask = m;
    return TGL_OK;
}

/* The type of x reduced over mask: reduced axes dropped, or kept as
 * broadcastable size-1 axes. */
static tgl_type reduced_type(tgl_type x, uint32_t mask, bool keep, int dtype)
{
    if (keep)
        return tgl_type_make(dtype, x.ndim, x.bcast | mask);
    uint32_t bcast = 0;
    int nd = 0;
    for (int d = 0; d < x.ndim; d++) {
        if ((mask >> d) & 1u)
            continue;
        if (tgl_type_bcast(x, d))
            bcast |= 1u << nd;
        nd++;
    }
    return tgl_type_make(dtype, nd, bcast);
}

static int reduce_dtype(int op, int dt)
{
    return (op == TGL_OP_SUM || op == TGL_OP_PROD) && !tgl_dtype_is_float(dt) ? TGL_INT64 : dt;
}

static tgl_status reduce_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type x = n->in[0]->type;
    uint32_t mask;
    tgl_status st = check_axes(ctx, n, x.ndim, &mask);
    if (st)
        return st;
    n->type = reduced_type(x, mask, tgl_reduce_keepdims(n), reduce_dtype(n->op, x.dtype));
    return TGL_OK;
}

static tgl_status argmax_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type x = n->in[0]->type;
    TGL_CHECK(n->p.n == 1, TGL_EINVAL, "takes exactly one axis, got %d", (int)n->p.n);
    uint32_t mask;
    tgl_status st = check_axes(ctx, n, x.ndim, &mask);
    if (st)
        return st;
    n->type = reduced_type(x, mask, tgl_reduce_keepdims(n), TGL_INT64);
    return TGL_OK;
}

static tgl_status axes_size_infer(tgl_ctx *ctx, tgl_node *n)
{
    uint32_t mask;
    /* keepdims is accepted (so a mean can pass its sum's parameters) and
     * ignored: the count is a 0-d value that broadcasts against both forms. */
    tgl_status st = check_axes(ctx, n, n->in[0]->type.ndim, &mask);
    if (st)
        return st;
    n->type = tgl_type_make(TGL_INT64, 0, 0);
    return TGL_OK;
}

/* ---- shapes ---------------------------------------------------------- */

static tgl_status reduce_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                               int64_t *shape)
{
    (void)ctx;
    uint32_t mask = tgl_reduce_axes_mask(n);
    int k = 0;
    for (int d = 0; d < in[0]->ndim; d++) {
        if (!((mask >> d) & 1u))
            shape[k++] = in[0]->shape[d];
        else if (tgl_reduce_keepdims(n))
            shape[k++] = 1;
    }
    return TGL_OK;
}

static tgl_status axes_size_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                  int64_t *shape)
{
    (void)ctx, (void)n, (void)in, (void)shape;
    return TGL_OK;
}

/* ---- pullbacks ------------------------------------------------------- */

/* The driver sums each gin to its input's broadcast pattern and casts it
 * to the input's dtype.  Here g' is the output gradient with the reduced
 * axes back in place as broadcastable axes, so elementwise ops spread it
 * over them.  Integer inputs get no gradient.
 *   sum:     gx = g' * ones_like(x)      (the broadcast made explicit)
 *   prod:    gx = g' * y' / x            (zeros in x give NaN/inf, as
 *                                         Theano's default)
 *   max/min: gx = g' * (x == y')         (ties each get the full g) */
static tgl_status reduce_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    tgl_node *x = n->in[0];
    int dt = x->type.dtype;
    gin[0] = NULL;
    if (!tgl_dtype_is_float(dt))
        return TGL_OK;
    if (n->p.n == 0) {
        gin[0] = g;
        return TGL_OK;
    }
    tgl_node *gk = g, *yk = n;
    if (!tgl_reduce_keepdims(n)) {
        uint32_t mask = tgl_reduce_axes_mask(n);
        int64_t order[TGL_MAX_DIMS];
        int nd = x->type.ndim;
        for (int d = 0, j = 0; d < nd; d++)
            order[d] = (mask >> d) & 1u ? -1 : j++;
        gk = tgl_mk_dimshuffle(ctx, g, nd, order);
        if (n->op != TGL_OP_SUM)
            yk = tgl_mk_dimshuffle(ctx, n, nd, order);
    }
    switch (n->op) {
    case TGL_OP_SUM:
        gin[0] = tgl_mk2(ctx, TGL_OP_MUL, tgl_mk_fill_like(ctx, x, dt, 1.0), gk);
        break;
    case TGL_OP_PROD: {
        /* d prod / d x_k is the product of the other elements: y / x_k when
         * no element is zero; with exactly one zero, the product of the
         * nonzero ones at the zero and 0 elsewhere; with more, 0. */
        tgl_node *zero = tgl_mk_scalar(ctx, dt, 0.0), *one = tgl_mk_scalar(ctx, dt, 1.0);
        tgl_node *is0 = tgl_mk2(ctx, TGL_OP_EQ, x, zero);
        tgl_params kp = n->p; /* the same axes, kept */
        kp.flags = TGL_REDUCE_KEEPDIMS;
        tgl_node *count_in = tgl_mk_cast(ctx, is0, dt);
        tgl_node *nonzero = tgl_mk3(ctx, TGL_OP_SWITCH, is0, one, x);
        tgl_node *nzeros = tgl_mk(ctx, TGL_OP_SUM, 1, &count_in, &kp);
        tgl_node *pnz = tgl_mk(ctx, TGL_OP_PROD, 1, &nonzero, &kp);
        tgl_node *at_zero = tgl_mk3(ctx, TGL_OP_SWITCH, tgl_mk2(ctx, TGL_OP_EQ, nzeros, one), pnz,
                                    zero);
        tgl_node *others = tgl_mk3(ctx, TGL_OP_SWITCH, is0, at_zero,
                                   tgl_mk2(ctx, TGL_OP_DIV, yk, nonzero));
        gin[0] = tgl_mk2(ctx, TGL_OP_MUL, gk, others);
        break;
    }
    default:
        gin[0] = tgl_mk2(ctx, TGL_OP_MUL, gk, tgl_mk_cast(ctx, tgl_mk2(ctx, TGL_OP_EQ, x, yk), dt));
        break;
    }
    /* A node that failed to build leaves NULL and its message in the
     * context, which the driver reports. */
    return TGL_OK;
}

/* Positions and counts are piecewise constant: no gradient. */
static tgl_status no_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    (void)ctx, (void)n, (void)g;
    gin[0] = NULL;
    return TGL_OK;
}

/* ---- the implementations ------------------------------------------- */

const tgl_opimpl tgl_impl_reduce = {
    .family = TGL_FAM_REDUCE,
    .nin_min = 1,
    .nin_max = 1,
    .infer = reduce_infer,
    .shape = reduce_shape,
    .grad = reduce_grad,
};

const tgl_opimpl tgl_impl_argmax = {
    .family = TGL_FAM_REDUCE,
    .nin_min = 1,
    .nin_max = 1,
    .infer = argmax_infer,
    .shape = reduce_shape,
    .grad = no_grad,
};

const tgl_opimpl tgl_impl_axes_size = {
    .family = TGL_FAM_REDUCE,
    .nin_min = 1,
    .nin_max = 1,
    .infer = axes_size_infer,
    .shape = axes_size_shape,
    .grad = no_grad,
};

tgl_status tgl_reduce_check_empty(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in)
{
    int64_t rsize = 1;
    for (int i = 0; i < n->p.n; i++)
        rsize *= in[0]->shape[n->p.i[i]];
    if (rsize == 0 && (n->op == TGL_OP_MAX || n->op == TGL_OP_MIN))
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "zero-size reduction (%s of no elements is undefined)",
                            tgl_op_name(n->op));
    return TGL_OK;
}

tgl_status tgl_argmax_check_empty(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in)
{
    int axis = (int)n->p.i[0];
    if (in[0]->shape[axis] == 0)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "zero-size reduction (axis %d is empty: no position to return)",
                            axis + 1);
    return TGL_OK;
}
