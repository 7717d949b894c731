/*
 * reduce.h — what the reductions' meaning (reduce.c) and their kernels
 * (each backend's) both read off a node: its axes and its keepdims flag;
 * and the kernels' checks of empty reductions, so that every backend
 * gives the same messages.
 */
#ifndef TGL_OPS_REDUCE_H
#define TGL_OPS_REDUCE_H

#include "engine/ops/ops.h"

/* The axes of a reduction node (checked by its infer), as a bit mask. */
static inline uint32_t tgl_reduce_axes_mask(const tgl_node *n)
{
    uint32_t m = 0;
    for (int i = 0; i < n->p.n; i++)
        m |= 1u << n->p.i[i];
    return m;
}

/* Whether the reduced axes stay, with size 1. */
static inline bool tgl_reduce_keepdims(const tgl_node *n)
{
    return n->p.flags & TGL_REDUCE_KEEPDIMS;
}

/* The kernels' check of reduction node n (its output not empty): max and
 * min over no elements are undefined, an error on ctx; TGL_OK otherwise. */
tgl_status tgl_reduce_check_empty(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in);

/* The kernels' check of argmax/argmin node n (its output not empty): an
 * empty axis has no position to return, an error on ctx. */
tgl_status tgl_argmax_check_empty(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in);

#endif /* TGL_OPS_REDUCE_H */
