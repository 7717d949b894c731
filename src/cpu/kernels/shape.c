/*
 * shape.c — the CPU kernels of the shape family (engine/ops/shape.c):
 * shape, concatenate, fill_like and arange.  Dimshuffle and reshape are
 * views and have none.
 */
#include "cpu/kernels/kernels.h"

#include <string.h>

static tgl_status shape_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                               tgl_array *out)
{
    (void)ctx;
    (void)n;
    for (int k = 0; k < in[0]->ndim; k++)
        ((int64_t *)out->data)[k * out->strides[0]] = in[0]->shape[k];
    return TGL_OK;
}

static tgl_status concatenate_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                     tgl_array *out)
{
    int64_t axis = n->p.i[0], off = 0;
    for (int i = 0; i < n->nin; i++) {
        int64_t shape[TGL_MAX_DIMS];
        memcpy(shape, out->shape, sizeof shape);
        shape[axis] = in[i]->shape[axis];
        tgl_array *part = NULL; /* left unset when the view fails */
        tgl_status st = tgl_array_view(ctx, out, out->ndim, shape, out->strides,
                                       off * out->strides[axis], &part);
        if (!st)
            st = tgl_array_assign(ctx, part, in[i]);
        tgl_array_release(part);
        if (st)
            return st;
        off += in[i]->shape[axis];
    }
    return TGL_OK;
}

static tgl_status fill_like_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                   tgl_array *out)
{
    (void)ctx;
    (void)in;
    size_t es = tgl_dtype_size(out->dtype_id);
    unsigned char elem[8];
    tgl_store_from_double(out->dtype_id, elem, 0, n->p.f[0]);
    unsigned char *p = out->data; /* freshly allocated: contiguous */
    /* Typed stores the compiler turns into vector ones (a gradient's
     * zeros are most of what this makes: one memset). */
    static const unsigned char zero[8];
    if (memcmp(elem, zero, es) == 0) {
        memset(p, 0, (size_t)out->size * es);
    } else if (es == 4) {
        uint32_t v;
        memcpy(&v, elem, 4);
        for (int64_t i = 0; i < out->size; i++)
            ((uint32_t *)p)[i] = v;
    } else if (es == 8) {
        uint64_t v;
        memcpy(&v, elem, 8);
        for (int64_t i = 0; i < out->size; i++)
            ((uint64_t *)p)[i] = v;
    } else {
        for (int64_t i = 0; i < out->size; i++)
            memcpy(p + (size_t)i * es, elem, es);
    }
    return TGL_OK;
}

static tgl_status arange_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                tgl_array *out)
{
    (void)ctx;
    (void)n;
    double start = tgl_load_as_double(in[0]->dtype_id, in[0]->data, 0);
    double step = tgl_load_as_double(in[2]->dtype_id, in[2]->data, 0);
    for (int64_t i = 0; i < out->size; i++)
        tgl_store_from_double(out->dtype_id, out->data, i, start + (double)i * step);
    return TGL_OK;
}

const tgl_op_kernel tgl_cpu_kernel_shape = {.run = shape_kernel};
const tgl_op_kernel tgl_cpu_kernel_concatenate = {.run = concatenate_kernel};
const tgl_op_kernel tgl_cpu_kernel_fill_like = {.run = fill_like_kernel};
const tgl_op_kernel tgl_cpu_kernel_arange = {.run = arange_kernel};
