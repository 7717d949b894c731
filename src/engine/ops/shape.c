/*
 * shape.c — the shape family: dimshuffle (transpose, add and drop
 * broadcastable axes), reshape, shape, concatenate, and fill_like (an
 * array shaped like another, used by gradients for zeros and ones).
 * Dimshuffle and reshape return views of their input where the layout
 * allows (no copy).
 */
#include "engine/ops/ops.h"
#include "engine/backend.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- dimshuffle ------------------------------------------------------ */

static tgl_status dimshuffle_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type x = n->in[0]->type;
    TGL_CHECK(n->p.n <= TGL_MAX_DIMS, TGL_ESHAPE, "%d dimensions (at most %d are supported)",
              n->p.n, TGL_MAX_DIMS);
    bool used[TGL_MAX_DIMS] = {false};
    uint32_t bcast = 0;
    for (int k = 0; k < n->p.n; k++) {
        int64_t a = n->p.i[k];
        TGL_CHECK(a >= -1 && a < x.ndim, TGL_EINVAL, "axis %" PRId64 " is out of range for %d-d input",
                  a + 1, x.ndim);
        if (a == -1) {
            bcast |= 1u << k;
            continue;
        }
        TGL_CHECK(!used[a], TGL_EINVAL, "axis %" PRId64 " appears twice", a + 1);
        used[a] = true;
        if (tgl_type_bcast(x, (int)a))
            bcast |= 1u << k;
    }
    for (int a = 0; a < x.ndim; a++)
        TGL_CHECK(used[a] || tgl_type_bcast(x, a), TGL_ESHAPE,
                  "axis %d is dropped but is not broadcastable", a + 1);
    n->type = tgl_type_make(x.dtype, n->p.n, bcast);
    return TGL_OK;
}

static tgl_status dimshuffle_view(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                  tgl_array **out)
{
    const tgl_array *x = in[0];
    int64_t shape[TGL_MAX_DIMS], strides[TGL_MAX_DIMS];
    for (int a = 0; a < x->ndim; a++) {
        bool kept = false;
        for (int k = 0; k < n->p.n; k++)
            kept |= n->p.i[k] == a;
        if (!kept && x->shape[a] != 1)
            return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                                "axis %d is dropped but has size %" PRId64, a + 1, x->shape[a]);
    }
    for (int k = 0; k < n->p.n; k++) {
        int64_t a = n->p.i[k];
        shape[k] = a < 0 ? 1 : x->shape[a];
        strides[k] = a < 0 ? 0 : x->strides[a];
    }
    return tgl_array_view(ctx, in[0], n->p.n, shape, strides, 0, out);
}

static tgl_status dimshuffle_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    int nd = n->in[0]->type.ndim;
    int64_t order[TGL_MAX_DIMS];
    for (int a = 0; a < nd; a++) {
        order[a] = -1; /* a dropped (broadcastable) axis comes back */
        for (int k = 0; k < n->p.n; k++)
            if (n->p.i[k] == a)
                order[a] = k;
    }
    gin[0] = tgl_dtype_is_float(n->type.dtype) ? tgl_mk_dimshuffle(ctx, g, nd, order) : NULL;
    return TGL_OK;
}

const tgl_opimpl tgl_impl_dimshuffle = {
    .family = TGL_FAM_SHAPE, .nin_min = 1, .nin_max = 1,
    .infer = dimshuffle_infer, .view = dimshuffle_view, .grad = dimshuffle_grad,
};

/* ---- reshape --------------------------------------------------------- */

/* One input: p.i[k] >= 0 a size, -1 inferred, <= -2 copies input axis
 * (-2 - p.i[k]).  Two inputs: the shape comes from the int vector input 2
 * at run time; p.i[k] == 1 marks an axis known to be 1 (broadcastable). */
static tgl_status reshape_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type x = n->in[0]->type;
    TGL_CHECK(n->p.n <= TGL_MAX_DIMS, TGL_ESHAPE, "%d dimensions (at most %d are supported)",
              n->p.n, TGL_MAX_DIMS);
    uint32_t bcast = 0;
    if (n->nin == 2) {
        tgl_type s = n->in[1]->type;
        TGL_CHECK(s.ndim == 1 && !tgl_dtype_is_float(s.dtype) && s.dtype != TGL_BOOL, TGL_EDTYPE,
                  "the shape must be an integer vector");
        for (int k = 0; k < n->p.n; k++)
            if (n->p.i[k] == 1)
                bcast |= 1u << k;
    } else {
        int inferred = 0;
        int64_t known = 1; /* the product of the sizes given, zeros left out */
        for (int k = 0; k < n->p.n; k++) {
            int64_t v = n->p.i[k];
            if (v > 0 && !tgl_size_mul(known, v, &known)) {
                char sh[TGL_MAX_DIMS * 22 + 4];
                return tgl_ctx_set_error(ctx, TGL_ESHAPE, "shape %s is too large (over 2^59 "
                                         "elements)", tgl_shape_str(sh, sizeof sh, n->p.n, n->p.i));
            }
            if (v == -1) {
                TGL_CHECK(++inferred <= 1, TGL_ESHAPE, "more than one size is -1");
            } else if (v <= -2) {
                TGL_CHECK(-2 - v < x.ndim, TGL_EINVAL, "copies axis %" PRId64 " of a %d-d input",
                          -1 - v, x.ndim);
                if (tgl_type_bcast(x, (int)(-2 - v)))
                    bcast |= 1u << k;
            } else if (v == 1) {
                bcast |= 1u << k;
            }
        }
    }
    n->type = tgl_type_make(x.dtype, n->p.n, bcast);
    return TGL_OK;
}

static tgl_status reshape_view(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                               tgl_array **out)
{
    const tgl_array *x = in[0];
    int64_t shape[TGL_MAX_DIMS];
    if (n->nin == 2) {
        const tgl_array *s = in[1];
        if (s->size != n->p.n)
            return tgl_op_error(ctx, n, in, TGL_ESHAPE, "the shape has %" PRId64
                                " entries for a %d-d result", s->size, n->p.n);
        for (int k = 0; k < n->p.n; k++) {
            double v; /* through the backend: the shape may be on a device */
            tgl_status st = tgl_array_load(ctx, s, k * s->strides[0], &v);
            if (st)
                return st;
            /* out of int64's range the conversion is undefined: such a
             * size is an error either way */
            if (!(v > -1e18 && v < 1e18))
                return tgl_op_error(ctx, n, in, TGL_ESHAPE, "size %g of dimension %d is out of "
                                    "range", v, k + 1);
            shape[k] = (int64_t)v;
            if (n->p.i[k] == 1 && shape[k] != 1)
                return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                                    "axis %d is broadcastable but the shape gives %" PRId64, k + 1,
                                    shape[k]);
        }
    } else {
        for (int k = 0; k < n->p.n; k++) {
            int64_t v = n->p.i[k];
            shape[k] = v <= -2 ? x->shape[-2 - v] : v;
        }
    }
    tgl_status st = tgl_array_reshape(ctx, in[0], n->p.n, shape, out);
    if (st) {
        char msg[TGL_ERRMSG_SIZE];
        snprintf(msg, sizeof msg, "%s", tgl_ctx_error(ctx));
        const char *colon = strstr(msg, ": ");
        return tgl_op_error(ctx, n, in, st, "%s", colon ? colon + 2 : msg);
    }
    return TGL_OK;
}

static tgl_status reshape_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    tgl_node *x = n->in[0];
    gin[0] = NULL;
    if (n->nin == 2)
        gin[1] = NULL;
    if (!tgl_dtype_is_float(x->type.dtype))
        return TGL_OK;
    tgl_params p = {0};
    p.n = x->type.ndim;
    for (int k = 0; k < p.n; k++)
        p.i[k] = tgl_type_bcast(x->type, k) ? 1 : -1;
    tgl_node *in[2] = {g, tgl_mk1(ctx, TGL_OP_SHAPE, x)};
    gin[0] = tgl_mk(ctx, TGL_OP_RESHAPE, 2, in, &p);
    return TGL_OK;
}

const tgl_opimpl tgl_impl_reshape = {
    .family = TGL_FAM_SHAPE, .nin_min = 1, .nin_max = 2,
    .infer = reshape_infer, .view = reshape_view, .grad = reshape_grad,
};

/* ---- shape ----------------------------------------------------------- */

static tgl_status shape_infer(tgl_ctx *ctx, tgl_node *n)
{
    TGL_CHECK(n->p.n == 0, TGL_EINVAL, "takes no parameters");
    n->type = tgl_type_make(TGL_INT64, 1, 0);
    return TGL_OK;
}

static tgl_status shape_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              int64_t *shape)
{
    (void)ctx;
    (void)n;
    shape[0] = in[0]->ndim;
    return TGL_OK;
}

static tgl_status no_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    (void)ctx;
    (void)g;
    for (int i = 0; i < n->nin; i++)
        gin[i] = NULL;
    return TGL_OK;
}

const tgl_opimpl tgl_impl_shape = {
    .family = TGL_FAM_SHAPE, .nin_min = 1, .nin_max = 1,
    .infer = shape_infer, .shape = shape_shape, .grad = no_grad,
};

/* ---- concatenate ----------------------------------------------------- */

static int promote_all(tgl_node *const *in, int n)
{
    int dt = in[0]->type.dtype;
    for (int i = 1; i < n; i++)
        dt = tgl_dtype_promote(dt, in[i]->type.dtype);
    return dt;
}

static tgl_status concatenate_infer(tgl_ctx *ctx, tgl_node *n)
{
    TGL_CHECK(n->p.n == 1, TGL_EINVAL, "needs an axis");
    int nd = n->in[0]->type.ndim;
    int64_t axis = n->p.i[0];
    TGL_CHECK(nd > 0 && axis >= 0 && axis < nd, TGL_EINVAL,
              "axis %" PRId64 " is out of range for %d-d inputs", axis + 1, nd);
    uint32_t bcast = ~0u;
    for (int i = 0; i < n->nin; i++) {
        TGL_CHECK(n->in[i]->type.ndim == nd, TGL_ESHAPE, "input %d has %d dimensions, input 1 has %d",
                  i + 1, n->in[i]->type.ndim, nd);
        bcast &= n->in[i]->type.bcast;
    }
    if (n->nin > 1)
        bcast &= ~(1u << axis);
    n->type = tgl_type_make(promote_all(n->in, n->nin), nd, bcast);
    return TGL_OK;
}

static tgl_status concatenate_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                    int64_t *shape)
{
    int nd = n->type.ndim;
    int64_t axis = n->p.i[0];
    for (int d = 0; d < nd; d++)
        shape[d] = in[0]->shape[d];
    shape[axis] = 0;
    for (int i = 0; i < n->nin; i++) {
        for (int d = 0; d < nd; d++)
            if (d != axis && in[i]->shape[d] != shape[d])
                return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                                    "input %d has size %" PRId64 " on axis %d, input 1 has %" PRId64,
                                    i + 1, in[i]->shape[d], d + 1, shape[d]);
        /* inputs may be zero-stride views of any size: the sum is checked */
        if (__builtin_add_overflow(shape[axis], in[i]->shape[axis], &shape[axis]) ||
            shape[axis] > TGL_MAX_ELEMENTS)
            return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                                "the sizes on axis %d add up to more than 2^59 elements",
                                (int)axis + 1);
    }
    return TGL_OK;
}

/* Each input's gradient is its slice of g along the axis; the bounds are
 * running sums of the inputs' sizes, known only at run time. */
static tgl_status concatenate_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    int64_t axis = n->p.i[0];
    tgl_node *start = tgl_mk_scalar(ctx, TGL_INT64, 0);
    tgl_params ap = {0};
    ap.n = 1;
    ap.i[0] = axis;
    for (int i = 0; i < n->nin; i++) {
        tgl_node *x = n->in[i];
        tgl_node *stop = tgl_mk2(ctx, TGL_OP_ADD, start, tgl_mk(ctx, TGL_OP_AXES_SIZE, 1, &x, &ap));
        gin[i] = NULL;
        if (tgl_dtype_is_float(x->type.dtype)) {
            tgl_params p = {0};
            p.n = 4 * (int)(axis + 1);
            for (int d = 0; d < axis; d++) {
                p.i[4 * d] = TGL_IDX_SLICE | TGL_IDX_NO_START | TGL_IDX_NO_STOP;
                p.i[4 * d + 3] = 1;
            }
            p.i[4 * axis] = TGL_IDX_SLICE | TGL_IDX_START_INPUT | TGL_IDX_STOP_INPUT;
            p.i[4 * axis + 3] = 1;
            tgl_node *sin[3] = {g, start, stop};
            gin[i] = tgl_mk(ctx, TGL_OP_SUBTENSOR, 3, sin, &p);
        }
        start = stop;
    }
    return TGL_OK;
}

const tgl_opimpl tgl_impl_concatenate = {
    .family = TGL_FAM_SHAPE, .nin_min = 1, .nin_max = -1,
    .infer = concatenate_infer, .shape = concatenate_shape,
    .grad = concatenate_grad,
};

/* ---- fill_like ------------------------------------------------------- */

static tgl_status fill_like_infer(tgl_ctx *ctx, tgl_node *n)
{
    TGL_CHECK(n->p.n == 1 && n->p.i[0] >= 0 && n->p.i[0] < TGL_NDTYPES, TGL_EDTYPE,
              "needs a dtype");
    tgl_type x = n->in[0]->type;
    n->type = tgl_type_make((int)n->p.i[0], x.ndim, x.bcast);
    return TGL_OK;
}

tgl_status tgl_shape_of_first(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              int64_t *shape)
{
    (void)ctx;
    (void)n;
    memcpy(shape, in[0]->shape, sizeof shape[0] * (size_t)in[0]->ndim);
    return TGL_OK;
}

const tgl_opimpl tgl_impl_fill_like = {
    .family = TGL_FAM_SHAPE, .nin_min = 1, .nin_max = 1,
    .infer = fill_like_infer, .shape = tgl_shape_of_first,
    .grad = no_grad,
};

/* ---- arange ---------------------------------------------------------- */

/* start, stop, step: 0-d numbers known only at run time (a batch index
 * range, the rows of a minibatch).  The values are those of Lua's
 * `for i = start, stop, step`. */
static tgl_status arange_infer(tgl_ctx *ctx, tgl_node *n)
{
    TGL_CHECK(n->p.n == 1 && n->p.i[0] >= 0 && n->p.i[0] < TGL_NDTYPES, TGL_EDTYPE,
              "needs a dtype");
    for (int i = 0; i < 3; i++)
        TGL_CHECK(n->in[i]->type.ndim == 0, TGL_ESHAPE, "start, stop and step must be scalars");
    n->type = tgl_type_make((int)n->p.i[0], 1, 0);
    return TGL_OK;
}

/* start, stop and step, read through their backend (they may be on a
 * device). */
static tgl_status arange_args(tgl_ctx *ctx, tgl_array *const *in, double *v)
{
    tgl_status st = TGL_OK;
    for (int k = 0; k < 3 && !st; k++)
        st = tgl_array_scalar(ctx, in[k], &v[k]);
    return st;
}

static tgl_status arange_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                               int64_t *shape)
{
    double v[3];
    tgl_status st = arange_args(ctx, in, v);
    if (st)
        return st;
    double start = v[0], stop = v[1], step = v[2];
    if (step == 0 || !isfinite(start) || !isfinite(stop) || !isfinite(step))
        return tgl_op_error(ctx, n, in, TGL_EINVAL, "start, stop and step must be finite and "
                            "step nonzero (got %g, %g, %g)", start, stop, step);
    double span = (stop - start) / step;
    if (span > 1e15)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "too many elements");
    shape[0] = span < 0 ? 0 : (int64_t)floor(span) + 1;
    return TGL_OK;
}

const tgl_opimpl tgl_impl_arange = {
    .family = TGL_FAM_SHAPE, .nin_min = 3, .nin_max = 3,
    .infer = arange_infer, .shape = arange_shape, .grad = no_grad,
};
