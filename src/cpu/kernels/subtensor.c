/*
 * subtensor.c — the CPU kernels of the indexing family
 * (engine/ops/subtensor.c): INC_SUBTENSOR (copy x, then add v into or set
 * the region), ADV_SUBTENSOR (a gather) and ADV_INC_SUBTENSOR (a scatter
 * that accumulates repeated positions).  SUBTENSOR is a view and has
 * none.  Index resolution is the engine's (engine/ops/subtensor.h); the
 * loops here walk the resolved regions.
 */
#include "cpu/kernels/kernels.h"
#include "engine/ops/subtensor.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Element offset -> byte pointer; offsets may be negative (reversed views). */
static inline char *at(void *base, int64_t off, size_t es)
{
    return (char *)base + (ptrdiff_t)(off * (int64_t)es);
}

/* ---- strided loops -------------------------------------------------- */

/* dst[k * ds] = src[k * ss] (add: +=) for k < len, both of dtype dt.
 * Integer sums wrap (computed unsigned); bool sums are logical or. */
static void row_apply(int dt, bool add, int64_t len, char *dst, int64_t ds, const char *src,
                      int64_t ss)
{
#define LOOP(T, EXPR)                                                         \
    do {                                                                      \
        T *d_ = (T *)(void *)dst;                                             \
        const T *s_ = (const T *)(const void *)src;                           \
        for (int64_t k = 0; k < len; k++) {                                   \
            T a = d_[k * ds], b = s_[k * ss];                                 \
            (void)a;                                                          \
            d_[k * ds] = (EXPR);                                              \
        }                                                                     \
    } while (0)
    if (!add) {
        switch (tgl_dtype_size(dt)) {
        case 8: LOOP(uint64_t, b); break;
        case 4: LOOP(uint32_t, b); break;
        default: LOOP(uint8_t, b); break;
        }
        return;
    }
    switch (dt) {
    case TGL_FLOAT32: LOOP(float, a + b); break;
    case TGL_FLOAT64: LOOP(double, a + b); break;
    case TGL_INT32: LOOP(int32_t, (int32_t)((uint32_t)a + (uint32_t)b)); break;
    case TGL_INT64: LOOP(int64_t, (int64_t)((uint64_t)a + (uint64_t)b)); break;
    case TGL_UINT8: LOOP(uint8_t, (uint8_t)(a + b)); break;
    default: LOOP(uint8_t, (uint8_t)(a || b)); break;
    }
#undef LOOP
}

/* row_apply over an nd-dimensional block (nd may be 0: one element).
 * *rows counts rows across calls; returns false when interrupted. */
static bool block_apply(const tgl_ctx *ctx, int dt, bool add, int nd, const int64_t *shape,
                        char *dst, const int64_t *ds, const char *src, const int64_t *ss,
                        int64_t *rows)
{
    size_t es = tgl_dtype_size(dt);
    if (nd == 0) {
        if ((++*rows & 1023) == 0 && tgl_ctx_interrupted(ctx))
            return false;
        row_apply(dt, add, 1, dst, 0, src, 0);
        return true;
    }
    for (int d = 0; d < nd; d++)
        if (shape[d] == 0)
            return true;
    int64_t idx[TGL_MAX_DIMS] = {0};
    for (;;) {
        if ((++*rows & 1023) == 0 && tgl_ctx_interrupted(ctx))
            return false;
        int64_t doff = 0, soff = 0;
        for (int d = 0; d < nd - 1; d++) {
            doff += idx[d] * ds[d];
            soff += idx[d] * ss[d];
        }
        row_apply(dt, add, shape[nd - 1], at(dst, doff, es), ds[nd - 1],
                  at((char *)src, soff, es), ss[nd - 1]);
        int d = nd - 2;
        for (; d >= 0; d--) {
            if (++idx[d] < shape[d])
                break;
            idx[d] = 0;
        }
        if (d < 0)
            return true;
    }
}

/* v converted to dtype (a new reference: v itself when it has it). */
static tgl_status as_dtype(tgl_ctx *ctx, tgl_array *v, int dtype, tgl_array **out)
{
    if (v->dtype_id == dtype) {
        tgl_array_retain(v);
        *out = v;
        return TGL_OK;
    }
    return tgl_array_copy(ctx, v, dtype, out);
}

static tgl_status inc_subtensor_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                       tgl_array *out)
{
    tgl_index_region r;
    int64_t vs[TGL_MAX_DIMS], rows = 0;
    tgl_array *v = NULL;
    size_t es = tgl_dtype_size(out->dtype_id);
    tgl_status st = tgl_subtensor_resolve(ctx, n, in, 2, out, &r);
    if (!st)
        st = as_dtype(ctx, in[1], out->dtype_id, &v);
    if (!st)
        st =
            tgl_subtensor_broadcast_v(ctx, n, in, v, n->in[1]->type, r.ndim, r.shape, "x[idx]", vs);
    if (!st && !tgl_subtensor_same_buffer(out, in[0]))
        st = tgl_array_assign(ctx, out, in[0]);
    if (!st && !block_apply(ctx, out->dtype_id, !(n->p.flags & TGL_INC_SET), r.ndim, r.shape,
                            at(out->data, r.offset, es), r.strides, v->data, vs, &rows))
        st = tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
    tgl_array_release(v);
    return st;
}

/* Fills pl->pos: for each position of the broadcast index shape (C order),
 * the element offset sum_j (index_j - 1) * strides[first + j] in an array
 * of x's shape with the given strides, checking every index. */
static tgl_status adv_positions(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                int nfixed, tgl_adv_plan *pl, const int64_t *strides)
{
    const tgl_array *x = in[0];
    int first = pl->lay.first, k = pl->lay.k, bnd = pl->lay.bnd;
    const int64_t *bshape = &pl->rshape[first];
    if (pl->nb == 0)
        return TGL_OK;
    pl->pos = malloc(sizeof *pl->pos * (size_t)pl->nb);
    if (!pl->pos)
        return tgl_op_error(ctx, n, in, TGL_ENOMEM, "out of memory for %" PRId64 " positions",
                            pl->nb);
    int64_t bi[TGL_MAX_DIMS] = {0};
    for (int64_t b = 0; b < pl->nb; b++) {
        if ((b & 1023) == 1023 && tgl_ctx_interrupted(ctx))
            return tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
        int64_t off = 0;
        for (int j = 0; j < k; j++) {
            const tgl_array *ix = in[nfixed + j];
            int64_t e = tgl_adv_index_elem(ix, bi, bnd);
            int64_t v = ix->dtype_id == TGL_INT32 ? ((const int32_t *)ix->data)[e]
                                                  : ((const int64_t *)ix->data)[e];
            int axis = first + j;
            int64_t i;
            tgl_status st = tgl_adv_index_check(ctx, n, in, axis, v, x->shape[axis], &i);
            if (st)
                return st;
            off += i * strides[axis];
        }
        pl->pos[b] = off;
        for (int a = bnd - 1; a >= 0; a--) {
            if (++bi[a] < bshape[a])
                break;
            bi[a] = 0;
        }
    }
    return TGL_OK;
}

/* Walks every (pre, broadcast) position of the result and applies the post
 * block between the indexed array t (x, or the output holding a copy of x)
 * and the result-shaped array r (the gather's output, or broadcast v):
 * gather copies t -> r; scatter applies r -> t (add or set). */
static tgl_status adv_walk(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                           const tgl_adv_plan *pl, int dt, bool gather, bool add, tgl_array *t,
                           char *rdata, const int64_t *rstrides)
{
    int first = pl->lay.first, k = pl->lay.k, bnd = pl->lay.bnd;
    int outer = first + bnd, post = pl->rnd - outer;
    size_t es = tgl_dtype_size(dt);
    int64_t count = 1;
    for (int d = 0; d < pl->rnd; d++)
        count *= pl->rshape[d];
    if (count == 0)
        return TGL_OK;
    int64_t idx[TGL_MAX_DIMS] = {0}, rows = 0, b = 0;
    for (;;) {
        int64_t toff = pl->pos[b], roff = 0;
        for (int d = 0; d < first; d++)
            toff += idx[d] * t->strides[d];
        for (int d = 0; d < outer; d++)
            roff += idx[d] * rstrides[d];
        char *tp = at(t->data, toff, es), *rp = at(rdata, roff, es);
        bool ok = gather ? block_apply(ctx, dt, false, post, &pl->rshape[outer], rp,
                                       &rstrides[outer], tp, &t->strides[first + k], &rows)
                         : block_apply(ctx, dt, add, post, &pl->rshape[outer], tp,
                                       &t->strides[first + k], rp, &rstrides[outer], &rows);
        if (!ok)
            return tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
        /* The broadcast axes are innermost of the outer ones, so their flat
         * position advances with every step and wraps with them. */
        if (++b == pl->nb)
            b = 0;
        int d = outer - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < pl->rshape[d])
                break;
            idx[d] = 0;
        }
        if (d < 0)
            return TGL_OK;
    }
}

static tgl_status adv_subtensor_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                       tgl_array *out)
{
    tgl_adv_plan pl;
    tgl_status st = tgl_adv_subtensor_plan(ctx, n, in, 1, &pl);
    if (!st)
        st = adv_positions(ctx, n, in, 1, &pl, in[0]->strides);
    if (!st)
        st = adv_walk(ctx, n, in, &pl, out->dtype_id, true, false, in[0], out->data,
                      out->strides);
    free(pl.pos);
    return st;
}

static tgl_status adv_inc_subtensor_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                           tgl_array *out)
{
    tgl_adv_plan pl;
    tgl_array *v = NULL;
    int64_t vs[TGL_MAX_DIMS];
    tgl_status st = tgl_adv_subtensor_plan(ctx, n, in, 2, &pl);
    if (!st)
        st = as_dtype(ctx, in[1], out->dtype_id, &v);
    if (!st)
        st = tgl_subtensor_broadcast_v(ctx, n, in, v, n->in[1]->type, pl.rnd, pl.rshape,
                                       "x[indices]", vs);
    if (!st)
        st = adv_positions(ctx, n, in, 2, &pl, out->strides);
    if (!st && !tgl_subtensor_same_buffer(out, in[0]))
        st = tgl_array_assign(ctx, out, in[0]);
    if (!st)
        st = adv_walk(ctx, n, in, &pl, out->dtype_id, false, !(n->p.flags & TGL_INC_SET), out,
                      v->data, vs);
    tgl_array_release(v);
    free(pl.pos);
    return st;
}

const tgl_op_kernel tgl_cpu_kernel_inc_subtensor = {.run = inc_subtensor_kernel};
const tgl_op_kernel tgl_cpu_kernel_adv_subtensor = {.run = adv_subtensor_kernel};
const tgl_op_kernel tgl_cpu_kernel_adv_inc_subtensor = {.run = adv_inc_subtensor_kernel};
