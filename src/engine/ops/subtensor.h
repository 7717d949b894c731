/*
 * subtensor.h — index resolution, shared by the indexing ops' meaning
 * (subtensor.c: SUBTENSOR's view, ADV_SUBTENSOR's shape) and the
 * backends' kernels of INC_SUBTENSOR, ADV_SUBTENSOR and ADV_INC_SUBTENSOR:
 * both must read the same bounds and indices the same way, and report the
 * same errors.
 */
#ifndef TGL_OPS_SUBTENSOR_H
#define TGL_OPS_SUBTENSOR_H

#include "engine/ops/ops.h"

/* The indexed region of an array: a view's shape, strides and offset. */
typedef struct tgl_index_region {
    int ndim;
    int64_t shape[TGL_MAX_DIMS];
    int64_t strides[TGL_MAX_DIMS];
    int64_t offset;
} tgl_index_region;

/* Resolves basic indexing node n's index against a (x, or the output
 * holding a copy of x: same shape, its own strides); its bound inputs
 * start at in[nfixed] (1 for SUBTENSOR, 2 for INC_SUBTENSOR).  Checks
 * the inputs' dtypes and ndims against n's, and every bound. */
tgl_status tgl_subtensor_resolve(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                 int nfixed, const tgl_array *a, tgl_index_region *r);

/* Where the index arrays go: axes first..first+k-1 of x are indexed by the
 * k arrays in[nfixed..]; their broadcast shape has bnd axes. */
typedef struct tgl_adv_layout {
    int first, k, bnd;
} tgl_adv_layout;

/* Advanced indexing on arrays: the layout, the result's shape, and (left
 * for the kernel to fill) the element offset of each position of the
 * broadcast index shape. */
typedef struct tgl_adv_plan {
    tgl_adv_layout lay;
    int rnd;                       /* result ndim                          */
    int64_t rshape[TGL_MAX_DIMS];  /* result shape                         */
    int64_t nb;                    /* elements of the broadcast index shape */
    int64_t *pos;                  /* nb element offsets into the target
                                      (NULL here; the caller frees it)     */
} tgl_adv_plan;

/* The plan of advanced indexing node n, whose index arrays start at
 * in[nfixed]: the result shape is x's pre axes, the index arrays'
 * broadcast shape (an axis broadcasts when missing or declared
 * broadcastable), x's post axes. */
tgl_status tgl_adv_subtensor_plan(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                  int nfixed, tgl_adv_plan *pl);

/* Strides that broadcast v (right-aligned) over shape[0..nd-1] into vs: 0
 * on the missing and declared-broadcastable axes (vt is v's static type);
 * an error naming `what` (the indexed region: "x[idx]") otherwise.  The
 * value check of INC_SUBTENSOR and ADV_INC_SUBTENSOR. */
tgl_status tgl_subtensor_broadcast_v(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                     const tgl_array *v, tgl_type vt, int nd,
                                     const int64_t *shape, const char *what, int64_t *vs);

/* The element offset, in index array ix, of position bi (bnd axes) of the
 * broadcast index shape: ix is right-aligned and broadcasts on its size-1
 * axes. */
static inline int64_t tgl_adv_index_elem(const tgl_array *ix, const int64_t *bi, int bnd)
{
    int64_t e = 0;
    for (int ja = 0; ja < ix->ndim; ja++)
        if (ix->shape[ja] != 1)
            e += bi[ja + bnd - ix->ndim] * ix->strides[ja];
    return e;
}

/* The zero-based position of 1-based index value v (negative: from the
 * end) on axis `axis` (0-based) of extent len, in *i; an error when it is
 * 0 or out of range.  The index check of advanced indexing. */
tgl_status tgl_adv_index_check(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, int axis,
                               int64_t v, int64_t len, int64_t *i);

/* out is x itself (same data, same strides on every axis longer than 1):
 * the plan runs the update in place (x's buffer taken over, or a shared
 * variable's deferred update), so there is nothing to copy. */
static inline bool tgl_subtensor_same_buffer(const tgl_array *out, const tgl_array *x)
{
    if (out->data != x->data || out->ndim != x->ndim)
        return false;
    for (int d = 0; d < x->ndim; d++)
        if (out->shape[d] > 1 && out->strides[d] != x->strides[d])
            return false;
    return true;
}

#endif /* TGL_OPS_SUBTENSOR_H */
