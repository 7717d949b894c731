/*
 * subtensor.c — the indexing family: basic indexing (integers and slices,
 * SUBTENSOR), its update (INC_SUBTENSOR), advanced indexing by integer
 * arrays (ADV_SUBTENSOR, a gather) and its update (ADV_INC_SUBTENSOR, a
 * scatter that accumulates repeated positions).
 *
 * Basic indexing.  The parameters (ops.h) give, for each of the leading
 * p.n / 4 axes, (kind | flags, start, stop, step) with Python's semantics,
 * 0-based: the Lua layer has already turned the user's 1-based inclusive
 * ranges into these.  Bounds marked _INPUT come from extra 0-d integer
 * inputs, consumed in axis order and then start, stop, step.  SUBTENSOR is a
 * view: the result is a strided window on x's storage, never a copy.
 *
 * Advanced indexing.  Consecutive axes of x are indexed by integer arrays
 * that broadcast together; their values are 1-based as users write them
 * (negative counts from the end), because unlike slice bounds they are
 * data the Lua layer never sees.  The result's shape is
 * x.shape[:first] + broadcast(index shapes) + x.shape[last+1:].
 *
 * Broadcasting of v (the update) and of index arrays follows the static
 * types, as elementwise ops do: an axis broadcasts only when it is missing
 * or declared broadcastable.  A size-1 axis that the type does not declare
 * broadcastable is a shape error rather than a silent broadcast, so the
 * pullback (which sums over exactly the declared axes) stays right.
 *
 * Messages count axes and array positions from 1, as users do: a C index
 * i is shown as i + 1 (negative indices are shown as they are).
 *
 * Resolving an index against arrays (tgl_subtensor_resolve,
 * tgl_adv_subtensor_plan: subtensor.h) is shared by the view and shape
 * functions here and the backends' kernels (src/cpu/kernels/subtensor.c
 * on the CPU), which do the copying, gathering and scattering; so are the
 * kernels' checks of v's shape (tgl_subtensor_broadcast_v) and of index
 * values (tgl_adv_index_check), so that every backend gives the same
 * messages.
 */
#include "engine/ops/subtensor.h"
#include "engine/backend.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Most inputs an indexing node may have: x, v, and three bounds per axis. */
#define MAX_INPUTS (2 + 3 * (TGL_MAX_PARAMS / 4))

#define IDX_FLAGS_KNOWN                                                                 \
    (TGL_IDX_KIND_MASK | TGL_IDX_START_INPUT | TGL_IDX_STOP_INPUT | TGL_IDX_STEP_INPUT | \
     TGL_IDX_NO_START | TGL_IDX_NO_STOP | TGL_IDX_LUA)

static bool is_index_dtype(int dtype)
{
    return dtype == TGL_INT32 || dtype == TGL_INT64;
}

/* A 0-based index as the user wrote it (1-based; negative ones are the
 * same in both conventions), into buf of 24 bytes. */
static const char *user_index(int64_t i, char *buf)
{
    if (i >= 0)
        snprintf(buf, 24, "%" PRIu64, (uint64_t)i + 1); /* INT64_MAX + 1 fits */
    else
        snprintf(buf, 24, "%" PRId64, i);
    return buf;
}

/* Why an index input was rejected, for infer messages. */
static const char *index_dtype_hint(int dtype)
{
    if (dtype == TGL_BOOL)
        return "; boolean masks are not supported";
    if (tgl_dtype_is_float(dtype))
        return "; convert it with cast";
    return "";
}

/* ---- Python slices -------------------------------------------------- */

/* Clips a slice bound as Python's PySlice_AdjustIndices does. */
static int64_t clip_bound(int64_t b, int64_t len, int64_t step)
{
    if (b < 0) {
        b += len; /* b < 0 and len >= 0: cannot overflow */
        if (b < 0)
            b = step < 0 ? -1 : 0;
    } else if (b >= len) {
        b = step < 0 ? len - 1 : len;
    }
    return b;
}

/* Resolves start:stop:step on an axis of size len: sets *first to the
 * first position taken and returns how many are taken.  step != 0. */
static int64_t slice_resolve(int64_t len, int64_t start, int64_t stop, int64_t step,
                             bool no_start, bool no_stop, int64_t *first)
{
    start = no_start ? (step < 0 ? len - 1 : 0) : clip_bound(start, len, step);
    stop = no_stop ? (step < 0 ? -1 : len) : clip_bound(stop, len, step);
    *first = start;
    /* Unsigned division: -INT64_MIN does not fit an int64. */
    if (step < 0)
        return stop < start ? (int64_t)((uint64_t)(start - stop - 1) / (0 - (uint64_t)step)) + 1
                            : 0;
    return start < stop ? (int64_t)((uint64_t)(stop - start - 1) / (uint64_t)step) + 1 : 0;
}

/* ---- basic indexing: types ----------------------------------------- */

/* Checks a SUBTENSOR / INC_SUBTENSOR node whose bound inputs start at
 * in[nfixed], and returns the type of the indexed region x[idx]. */
static tgl_status basic_region_type(tgl_ctx *ctx, const tgl_node *n, int nfixed, tgl_type *out)
{
    tgl_type xt = n->in[0]->type;
    int naxes = n->p.n / 4;
    TGL_CHECK(n->p.n % 4 == 0, TGL_EINVAL,
              "needs four parameters per indexed axis (kind, start, stop, step), got %d",
              n->p.n);
    TGL_CHECK(naxes <= xt.ndim, TGL_ESHAPE, "too many indices: %d for x with %d dimensions",
              naxes, xt.ndim);
    int nbound = 0, nd = 0;
    uint32_t bcast = 0;
    for (int d = 0; d < xt.ndim; d++) {
        if (d >= naxes) { /* taken whole */
            bcast |= (uint32_t)tgl_type_bcast(xt, d) << nd++;
            continue;
        }
        const int64_t *q = &n->p.i[4 * d];
        int64_t f = q[0], kind = f & TGL_IDX_KIND_MASK;
        TGL_CHECK((f & ~(int64_t)IDX_FLAGS_KNOWN) == 0 &&
                      (kind == TGL_IDX_INDEX || kind == TGL_IDX_SLICE),
                  TGL_EINVAL, "bad index kind %" PRId64 " for axis %d", f, d + 1);
        if (kind == TGL_IDX_INDEX) {
            TGL_CHECK(!(f & ~(int64_t)(TGL_IDX_KIND_MASK | TGL_IDX_START_INPUT | TGL_IDX_LUA)), TGL_EINVAL,
                      "the index for axis %d has slice flags", d + 1);
            nbound += (f & TGL_IDX_START_INPUT) != 0;
            /* A broadcastable axis has size 1: a constant index can be
             * checked now rather than on every call. */
            char ub[24];
            TGL_CHECK((f & TGL_IDX_START_INPUT) || !tgl_type_bcast(xt, d) || q[1] == 0 ||
                          q[1] == -1,
                      TGL_ESHAPE, "index %s is out of range for axis %d of size 1",
                      user_index(q[1], ub), d + 1);
            continue;
        }
        int nsym = ((f & TGL_IDX_START_INPUT) != 0) + ((f & TGL_IDX_STOP_INPUT) != 0) +
                   ((f & TGL_IDX_STEP_INPUT) != 0);
        nbound += nsym;
        TGL_CHECK((f & TGL_IDX_STEP_INPUT) || q[3] != 0, TGL_EINVAL,
                  "slice step cannot be zero (axis %d)", d + 1);
        /* A slice of a size-1 axis stays broadcastable when its constant
         * bounds take exactly that element. */
        if (tgl_type_bcast(xt, d) && !nsym) {
            int64_t first;
            int64_t len = slice_resolve(1, q[1], q[2], q[3], f & TGL_IDX_NO_START,
                                        f & TGL_IDX_NO_STOP, &first);
            bcast |= (uint32_t)(len == 1) << nd;
        }
        nd++;
    }
    TGL_CHECK(n->nin - nfixed == nbound, TGL_EINVAL,
              "the parameters name %d bound inputs, got %d", nbound, n->nin - nfixed);
    for (int i = nfixed; i < n->nin; i++) {
        tgl_type t = n->in[i]->type;
        TGL_CHECK(is_index_dtype(t.dtype) && t.ndim == 0, TGL_EDTYPE,
                  "slice bounds and indices must be int32 or int64 scalars; input %d is a "
                  "%s of %d dimensions%s",
                  i + 1, tgl_dtype_name(t.dtype), t.ndim, index_dtype_hint(t.dtype));
    }
    *out = tgl_type_make(xt.dtype, nd, bcast);
    return TGL_OK;
}

/* SUBTENSOR gives the region's type; INC_SUBTENSOR (x, v, bounds...) x's,
 * with v no bigger than the region. */
static tgl_status basic_infer(tgl_ctx *ctx, tgl_node *n)
{
    bool inc = n->op == TGL_OP_INC_SUBTENSOR;
    TGL_CHECK((n->p.flags & ~(inc ? TGL_INC_SET : 0)) == 0, TGL_EINVAL, "unknown flags %d",
              n->p.flags);
    tgl_type rt;
    tgl_status st = basic_region_type(ctx, n, inc ? 2 : 1, &rt);
    if (st)
        return st;
    TGL_CHECK(!inc || n->in[1]->type.ndim <= rt.ndim, TGL_ESHAPE,
              "v has %d dimensions, more than the %d of the region x[idx]", n->in[1]->type.ndim,
              rt.ndim);
    n->type = inc ? n->in[0]->type : rt;
    return TGL_OK;
}

/* ---- runtime checks ------------------------------------------------- */

/* The arrays must have the dtypes and ndims the node was typed with: the
 * loops below index by them.  (Compiled functions check their inputs unless
 * told to trust them; this keeps a wrong array from reading out of bounds.) */
static tgl_status check_inputs(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in)
{
    for (int i = 0; i < n->nin; i++) {
        tgl_type t = n->in[i]->type;
        if (in[i]->dtype_id != t.dtype || in[i]->ndim != t.ndim) {
            char want[96];
            return tgl_op_error(ctx, n, in, TGL_EDTYPE, "input %d should be %s", i + 1,
                                tgl_type_str(t, want, sizeof want));
        }
    }
    return TGL_OK;
}

/* ---- basic indexing: runtime --------------------------------------- */

/* *v = the value of bound input in[*next] (advancing *next), read through
 * its backend (it may be on a device), or the constant. */
static tgl_status bound_value(tgl_ctx *ctx, tgl_array *const *in, bool sym, int64_t constant,
                              int *next, int64_t *v)
{
    if (!sym) {
        *v = constant;
        return TGL_OK;
    }
    const tgl_array *b = in[(*next)++]; /* an int32/int64 scalar: check_inputs */
    union { int32_t i32; int64_t i64; } e;
    tgl_status st = tgl_array_read_elem(ctx, b, 0, &e);
    *v = b->dtype_id == TGL_INT32 ? e.i32 : e.i64;
    return st;
}

/* Resolves the node's index against a (x, or the output holding a copy of
 * x: same shape, its own strides); bound inputs start at in[nfixed]. */
tgl_status tgl_subtensor_resolve(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                 int nfixed, const tgl_array *a, tgl_index_region *r)
{
    int naxes = n->p.n / 4, next = nfixed;
    tgl_status st = check_inputs(ctx, n, in);
    bool empty = false;
    if (st)
        return st;
    r->ndim = 0;
    r->offset = 0;
    for (int d = 0; d < a->ndim; d++) {
        int64_t len = a->shape[d], stride = a->strides[d];
        if (d >= naxes) {
            r->shape[r->ndim] = len;
            r->strides[r->ndim++] = stride;
            empty |= len == 0;
            continue;
        }
        const int64_t *q = &n->p.i[4 * d];
        int64_t f = q[0], start, stop, step;
        if ((st = bound_value(ctx, in, f & TGL_IDX_START_INPUT, q[1], &next, &start)))
            return st;
        bool lua = f & TGL_IDX_LUA;
        if (lua && (f & TGL_IDX_START_INPUT)) {
            /* 1-based: 1 is the first, -1 the last, 0 is no index. */
            if (start == 0)
                return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                                    "index 0 on axis %d (indices start at 1)", d + 1);
            if (start > 0)
                start -= 1;
        }
        if ((f & TGL_IDX_KIND_MASK) == TGL_IDX_INDEX) {
            int64_t i = start < 0 ? start + len : start;
            char ub[24];
            if (i < 0 || i >= len)
                return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                                    "index %s is out of range for axis %d of size %" PRId64,
                                    user_index(start, ub), d + 1, len);
            r->offset += i * stride;
            continue;
        }
        if ((st = bound_value(ctx, in, f & TGL_IDX_STOP_INPUT, q[2], &next, &stop)) ||
            (st = bound_value(ctx, in, f & TGL_IDX_STEP_INPUT, q[3], &next, &step)))
            return st;
        if (step == 0)
            return tgl_op_error(ctx, n, in, TGL_EINVAL, "slice step is 0 on axis %d", d + 1);
        if (lua && (f & TGL_IDX_STOP_INPUT)) {
            /* An inclusive 1-based stop made exclusive and 0-based; past
             * either end becomes "no stop". */
            int64_t e = step > 0 ? (stop < 0 ? stop + 1 : stop)
                                 : (stop > 0 ? stop - 2 : stop - 1);
            if ((step > 0 && stop < 0 && e == 0) || (step < 0 && (stop == 0 || (stop > 0 && e < 0))))
                f |= TGL_IDX_NO_STOP;
            else
                stop = e;
        }
        int64_t first;
        int64_t cnt = slice_resolve(len, start, stop, step, f & TGL_IDX_NO_START,
                                    f & TGL_IDX_NO_STOP, &first);
        r->shape[r->ndim] = cnt;
        /* With one element or none the stride is never used; step * stride
         * could overflow for huge steps, so it is only formed when |step| <
         * len bounds it. */
        r->strides[r->ndim++] = cnt > 1 ? step * stride : stride;
        if (cnt > 0)
            r->offset += first * stride;
        empty |= cnt == 0;
    }
    /* An empty view touches nothing; anchoring it at the first element
     * keeps its data pointer inside the storage. */
    if (empty)
        r->offset = 0;
    return TGL_OK;
}

static tgl_status subtensor_view(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                 tgl_array **out)
{
    tgl_index_region r;
    tgl_status st = tgl_subtensor_resolve(ctx, n, in, 1, in[0], &r);
    if (st)
        return st;
    return tgl_array_view(ctx, in[0], r.ndim, r.shape, r.strides, r.offset, out);
}

/* ---- INC_SUBTENSOR runtime ----------------------------------------- */

/* ---- advanced indexing: types -------------------------------------- */

/* Checks an advanced-indexing node whose index arrays start at in[nfixed]
 * and gives the layout and the type of x[indices], whose axes are x's
 * before first, then the index arrays' broadcast axes, then x's after the
 * indexed ones. */
static tgl_status adv_check(tgl_ctx *ctx, const tgl_node *n, int nfixed, tgl_adv_layout *lay,
                            tgl_type *rt)
{
    tgl_type xt = n->in[0]->type;
    int k = n->nin - nfixed;
    TGL_CHECK(n->p.n == xt.ndim, TGL_EINVAL,
              "needs one parameter per axis of x (%d), got %d%s", xt.ndim, n->p.n,
              n->p.n > xt.ndim ? " (too many indices)" : "");
    int first = -1, marked = 0;
    for (int d = 0; d < xt.ndim; d++) {
        TGL_CHECK(n->p.i[d] == 0 || n->p.i[d] == 1, TGL_EINVAL,
                  "parameter %d must be 0 (axis taken whole) or 1 (indexed), got %" PRId64, d + 1,
                  n->p.i[d]);
        if (!n->p.i[d])
            continue;
        TGL_CHECK(first < 0 || n->p.i[d - 1], TGL_EINVAL,
                  "the indexed axes must be consecutive (axes %d and %d are indexed, axis %d "
                  "is not)",
                  first + 1, d + 1, d);
        if (first < 0)
            first = d;
        marked++;
    }
    TGL_CHECK(marked == k, TGL_EINVAL, "%d axes are marked indexed but %d index arrays are given",
              marked, k);
    int bnd = 0;
    for (int j = 0; j < k; j++) {
        tgl_type t = n->in[nfixed + j]->type;
        TGL_CHECK(is_index_dtype(t.dtype), TGL_EDTYPE,
                  "index arrays must be int32 or int64; index %d (input %d) is %s%s", j + 1,
                  nfixed + j + 1, tgl_dtype_name(t.dtype), index_dtype_hint(t.dtype));
        if (t.ndim > bnd)
            bnd = t.ndim;
    }
    int rnd = xt.ndim - k + bnd;
    TGL_CHECK(rnd <= TGL_MAX_DIMS, TGL_ESHAPE,
              "the result would have %d dimensions (at most %d are supported)", rnd,
              TGL_MAX_DIMS);
    uint32_t bcast = 0;
    for (int d = 0; d < first; d++)
        bcast |= (uint32_t)tgl_type_bcast(xt, d) << d;
    for (int a = 0; a < bnd; a++) {
        bool b = true; /* a missing axis broadcasts */
        for (int j = 0; j < k; j++) {
            tgl_type t = n->in[nfixed + j]->type;
            int ja = a - (bnd - t.ndim);
            if (ja >= 0)
                b = b && tgl_type_bcast(t, ja);
        }
        bcast |= (uint32_t)b << (first + a);
    }
    for (int d = first + k; d < xt.ndim; d++)
        bcast |= (uint32_t)tgl_type_bcast(xt, d) << (d - k + bnd);
    lay->first = first;
    lay->k = k;
    lay->bnd = bnd;
    *rt = tgl_type_make(xt.dtype, rnd, bcast);
    return TGL_OK;
}

/* As basic_infer, for ADV_SUBTENSOR and ADV_INC_SUBTENSOR. */
static tgl_status adv_infer(tgl_ctx *ctx, tgl_node *n)
{
    bool inc = n->op == TGL_OP_ADV_INC_SUBTENSOR;
    TGL_CHECK((n->p.flags & ~(inc ? TGL_INC_SET : 0)) == 0, TGL_EINVAL, "unknown flags %d",
              n->p.flags);
    tgl_adv_layout lay;
    tgl_type rt;
    tgl_status st = adv_check(ctx, n, inc ? 2 : 1, &lay, &rt);
    if (st)
        return st;
    TGL_CHECK(!inc || n->in[1]->type.ndim <= rt.ndim, TGL_ESHAPE,
              "v has %d dimensions, more than the %d of x[indices]", n->in[1]->type.ndim,
              rt.ndim);
    n->type = inc ? n->in[0]->type : rt;
    return TGL_OK;
}

/* ---- advanced indexing: runtime ------------------------------------ */

/* The result shape: x's pre axes, the index arrays' broadcast shape (an
 * axis broadcasts when missing or declared broadcastable), x's post axes. */
tgl_status tgl_adv_subtensor_plan(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                  int nfixed, tgl_adv_plan *pl)
{
    tgl_type rt;
    pl->pos = NULL;
    tgl_status st = check_inputs(ctx, n, in);
    if (!st)
        st = adv_check(ctx, n, nfixed, &pl->lay, &rt);
    if (st)
        return st;
    const tgl_array *x = in[0];
    int first = pl->lay.first, k = pl->lay.k, bnd = pl->lay.bnd;
    pl->rnd = rt.ndim;
    pl->nb = 1;
    for (int d = 0; d < first; d++)
        pl->rshape[d] = x->shape[d];
    for (int a = 0; a < bnd; a++) {
        int64_t s = 1;
        bool fixed = false;
        for (int j = 0; j < k; j++) {
            const tgl_array *ix = in[nfixed + j];
            int ja = a - (bnd - ix->ndim);
            if (ja < 0)
                continue;
            if (tgl_type_bcast(n->in[nfixed + j]->type, ja)) {
                if (ix->shape[ja] != 1)
                    return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                                        "index %d has size %" PRId64
                                        " on axis %d, declared broadcastable",
                                        j + 1, ix->shape[ja], ja + 1);
                continue;
            }
            if (!fixed) {
                s = ix->shape[ja];
                fixed = true;
            } else if (ix->shape[ja] != s) {
                return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                                    "the index arrays do not broadcast together: sizes %" PRId64
                                    " and %" PRId64 " (index %d, its axis %d)",
                                    s, ix->shape[ja], j + 1, ja + 1);
            }
        }
        pl->rshape[first + a] = s;
        pl->nb *= s;
    }
    for (int d = first + k; d < x->ndim; d++)
        pl->rshape[d - k + bnd] = x->shape[d];
    return TGL_OK;
}

static tgl_status adv_subtensor_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                      int64_t *shape)
{
    tgl_adv_plan pl;
    tgl_status st = tgl_adv_subtensor_plan(ctx, n, in, 1, &pl);
    if (!st)
        memcpy(shape, pl.rshape, sizeof *shape * (size_t)pl.rnd);
    return st;
}

/* ---- pullbacks ------------------------------------------------------ */

/* As elemwise.c's: only float inputs get gradients; a node that fails to
 * build leaves NULL and a message in the context, which the driver
 * (grad.c) reports naming this node. */

/* op(lead[0..nlead-1], n->in[from..]) with n's parameters and the given
 * flags: n's index applied to other operands.  NULL operands (failed
 * builds) propagate through tgl_mk. */
static tgl_node *mk_like(tgl_ctx *ctx, const tgl_node *n, int op, int nlead,
                         tgl_node *const *lead, int from, int flags)
{
    tgl_node *ins[MAX_INPUTS];
    int k = 0;
    if (nlead + n->nin - from > MAX_INPUTS) {
        tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: too many inputs", tgl_op_name(op));
        return NULL;
    }
    for (int i = 0; i < nlead; i++)
        ins[k++] = lead[i];
    for (int i = from; i < n->nin; i++)
        ins[k++] = n->in[i];
    tgl_params p = n->p;
    p.flags = flags;
    return tgl_mk(ctx, op, k, ins, &p);
}

/* g summed over its leading axes so that it has v's ndim (the axes v lacked
 * and was broadcast over); the driver sums the declared-broadcastable rest. */
static tgl_node *sum_leading(tgl_ctx *ctx, tgl_node *g, int vnd)
{
    if (!g || g->type.ndim == vnd)
        return g;
    int64_t axes[TGL_MAX_DIMS];
    int k = g->type.ndim - vnd;
    for (int i = 0; i < k; i++)
        axes[i] = i;
    return tgl_mk_sum(ctx, g, k, axes, false);
}

static void clear_gin(const tgl_node *n, tgl_node **gin)
{
    for (int i = 0; i < n->nin; i++)
        gin[i] = NULL;
}

/* Pullback of x[idx] (SUBTENSOR, ADV_SUBTENSOR): zeros of x's shape with
 * g added at the indexed positions, so positions an advanced index
 * repeats get the sum of their gradients. */
static tgl_status index_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    int inc_op = n->op == TGL_OP_SUBTENSOR ? TGL_OP_INC_SUBTENSOR : TGL_OP_ADV_INC_SUBTENSOR;
    clear_gin(n, gin);
    tgl_node *x = n->in[0];
    if (!tgl_dtype_is_float(x->type.dtype))
        return TGL_OK;
    tgl_node *lead[2] = {tgl_mk_fill_like(ctx, x, x->type.dtype, 0.0), g};
    gin[0] = mk_like(ctx, n, inc_op, 2, lead, 1, 0);
    return TGL_OK;
}

/* Pullback of y = x with y[idx] += v (or = v), basic or advanced.
 * x's gradient is g, with the region zeroed for set (x's values there were
 * overwritten); v's is g[idx] summed over the leading axes v lacked (the
 * driver sums the declared-broadcastable ones).  For an advanced set with
 * repeated positions only the last write reaches y, yet every copy of v
 * gets g there, as in Theano. */
static tgl_status update_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    int sub_op = n->op == TGL_OP_INC_SUBTENSOR ? TGL_OP_SUBTENSOR : TGL_OP_ADV_SUBTENSOR;
    clear_gin(n, gin);
    tgl_node *x = n->in[0], *v = n->in[1];
    if (!tgl_dtype_is_float(x->type.dtype))
        return TGL_OK;
    if (n->p.flags & TGL_INC_SET) {
        tgl_node *lead[2] = {g, tgl_mk_scalar(ctx, x->type.dtype, 0.0)};
        gin[0] = mk_like(ctx, n, n->op, 2, lead, 2, TGL_INC_SET);
    } else {
        gin[0] = g;
    }
    if (tgl_dtype_is_float(v->type.dtype))
        gin[1] = sum_leading(ctx, mk_like(ctx, n, sub_op, 1, &g, 2, 0), v->type.ndim);
    return TGL_OK;
}

/* ---- the implementations ------------------------------------------- */

/* x[idx] += v may run in x's buffer (x of the output's type): a row update
 * of a large matrix then costs the rows, not a copy of the matrix. */
static int inc_inplace(const tgl_node *n)
{
    return tgl_type_eq(n->in[0]->type, n->type) ? 0 : -1;
}

/* nin_max -1: the bound inputs (basic) or index arrays (advanced) that
 * the parameters call for; each infer function checks their number. */
const tgl_opimpl tgl_impl_subtensor = {
    .family = TGL_FAM_SUBTENSOR, .nin_min = 1, .nin_max = -1,
    .infer = basic_infer, .view = subtensor_view, .grad = index_grad,
};

const tgl_opimpl tgl_impl_inc_subtensor = {
    .family = TGL_FAM_SUBTENSOR, .nin_min = 2, .nin_max = -1,
    .infer = basic_infer, .shape = tgl_shape_of_first,
    .grad = update_grad, .inplace = inc_inplace,
};

const tgl_opimpl tgl_impl_adv_subtensor = {
    .family = TGL_FAM_SUBTENSOR, .nin_min = 2, .nin_max = -1,
    .infer = adv_infer, .shape = adv_subtensor_shape,
    .grad = index_grad,
};

const tgl_opimpl tgl_impl_adv_inc_subtensor = {
    .family = TGL_FAM_SUBTENSOR, .nin_min = 3, .nin_max = -1,
    .infer = adv_infer, .shape = tgl_shape_of_first,
    .grad = update_grad, .inplace = inc_inplace,
};

tgl_status tgl_subtensor_broadcast_v(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                     const tgl_array *v, tgl_type vt, int nd,
                                     const int64_t *shape, const char *what, int64_t *vs)
{
    int pad = nd - v->ndim;
    if (pad < 0)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "v has more dimensions than %s", what);
    for (int d = 0; d < nd; d++) {
        int a = d - pad;
        if (a < 0) {
            vs[d] = 0;
        } else if (v->shape[a] == shape[d]) {
            vs[d] = v->strides[a];
        } else if (v->shape[a] == 1 && tgl_type_bcast(vt, a)) {
            vs[d] = 0;
        } else {
            return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                                "v has size %" PRId64 " on its axis %d where %s has size %" PRId64
                                "%s",
                                v->shape[a], a + 1, what, shape[d],
                                v->shape[a] == 1 ? " (the axis is not declared broadcastable)"
                                                 : "");
        }
    }
    return TGL_OK;
}

tgl_status tgl_adv_index_check(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, int axis,
                               int64_t v, int64_t len, int64_t *i)
{
    if (v == 0)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "index 0 on axis %d: indices count from 1 (-1 is the last)",
                            axis + 1);
    *i = v > 0 ? v - 1 : v + len;
    if (*i < 0 || *i >= len)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "index %" PRId64 " is out of range for axis %d of size %" PRId64, v,
                            axis + 1, len);
    return TGL_OK;
}
