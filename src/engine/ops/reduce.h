/*
 * reduce.h — what the reductions' meaning (reduce.c) and their kernels
 * (each backend's) both read off a node: its axes and its keepdims flag.
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

#endif /* TGL_OPS_REDUCE_H */
