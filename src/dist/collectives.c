/*
 * collectives.c — tgl.dist's collectives on arrays (the C API of tgl.h:
 * tgl_dist_allreduce, _broadcast, _allgather, _barrier).
 *
 * The transport (comm.c) works on contiguous host memory.  An array that
 * is contiguous and on the CPU is sent as it is (in place); any other (a
 * strided view, an array on another device) goes through a contiguous
 * host copy, which is written back into the array's own elements, so
 * views and shared variables see the result.
 */
#include "dist/dist.h"

#include <stdio.h>
#include <string.h>

static bool direct(const tgl_array *a)
{
    return a->device == TGL_DEVICE_CPU && (a->flags & TGL_ARRAY_CONTIGUOUS);
}

/* A contiguous host array with a's elements (a itself when it is one). */
static tgl_status host_copy(tgl_ctx *ctx, const char *fn, tgl_array *a, tgl_array **out)
{
    if (direct(a)) {
        tgl_array_retain(a);
        *out = a;
        return TGL_OK;
    }
    tgl_array *c = NULL;
    tgl_status st =
        tgl_array_alloc_on(ctx, fn, TGL_DEVICE_CPU, a->dtype_id, a->ndim, a->shape, false, &c);
    if (!st && (st = tgl_array_assign(ctx, c, a)))
        tgl_array_release(c);
    if (!st)
        *out = c;
    return st;
}

/* Writes h back into a (when h is a copy). */
static tgl_status write_back(tgl_ctx *ctx, tgl_array *a, tgl_array *h)
{
    return h == a ? TGL_OK : tgl_array_assign(ctx, a, h);
}

TGL_API tgl_status tgl_dist_allreduce(tgl_ctx *ctx, tgl_array *a, int op)
{
    const char *fn = "tgl.dist.allreduce";
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(a, TGL_EINVAL, "%s: the array is missing", fn);
    tgl_status st = tgl_dist_check_reduce(ctx, fn, op, a->dtype_id);
    if (st)
        return st;
    char what[64];
    snprintf(what, sizeof what, "allreduce(%s)", tgl_dist_op_name(op));
    tgl_dist_desc d;
    tgl_dist_describe(&d, what, a->dtype_id, a->ndim, a->shape);
    tgl_array *h = NULL;
    if ((st = host_copy(ctx, fn, a, &h)))
        return st;
    st = tgl_dist_comm_allreduce(ctx, &d, h->data, a->size, a->dtype_id, op);
    if (!st)
        st = write_back(ctx, a, h);
    tgl_array_release(h);
    return st;
}

TGL_API tgl_status tgl_dist_broadcast(tgl_ctx *ctx, tgl_array *a, int root)
{
    const char *fn = "tgl.dist.broadcast";
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(a, TGL_EINVAL, "%s: the array is missing", fn);
    tgl_dist_desc d;
    tgl_dist_describe(&d, "broadcast", a->dtype_id, a->ndim, a->shape);
    tgl_array *h = NULL;
    tgl_status st = host_copy(ctx, fn, a, &h);
    if (st)
        return st;
    st = tgl_dist_comm_broadcast(ctx, &d, h->data, a->size * (int64_t)tgl_dtype_size(a->dtype_id),
                                 root);
    if (!st)
        st = write_back(ctx, a, h);
    tgl_array_release(h);
    return st;
}

TGL_API tgl_status tgl_dist_allgather(tgl_ctx *ctx, const tgl_array *a, tgl_array **out)
{
    const char *fn = "tgl.dist.allgather";
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(a && out, TGL_EINVAL, "%s: the array is missing", fn);
    TGL_CHECK(a->ndim < TGL_MAX_DIMS, TGL_ESHAPE,
              "%s: the result has one more axis than the array, which has %d already (the "
              "most is %d)",
              fn, a->ndim, TGL_MAX_DIMS);
    tgl_dist_desc d;
    tgl_dist_describe(&d, "allgather", a->dtype_id, a->ndim, a->shape);
    tgl_array *h = NULL;
    tgl_status st = host_copy(ctx, fn, (tgl_array *)a, &h);
    if (st)
        return st;
    int64_t shape[TGL_MAX_DIMS];
    shape[0] = tgl_dist_size();
    memcpy(shape + 1, a->shape, sizeof *shape * (size_t)a->ndim);
    tgl_array *g = NULL;
    st = tgl_array_alloc_on(ctx, fn, TGL_DEVICE_CPU, a->dtype_id, a->ndim + 1, shape, false, &g);
    if (!st)
        st = tgl_dist_comm_allgather(ctx, &d, h->data, g->data,
                                     a->size * (int64_t)tgl_dtype_size(a->dtype_id));
    tgl_array_release(h);
    if (!st && a->device != TGL_DEVICE_CPU) {
        tgl_array *m = NULL;
        st = tgl_array_on_device(ctx, fn, g, a->device, &m);
        tgl_array_release(g);
        g = st ? NULL : m;
    }
    if (st) {
        tgl_array_release(g);
        return st;
    }
    *out = g;
    return TGL_OK;
}

TGL_API tgl_status tgl_dist_barrier(tgl_ctx *ctx)
{
    TGL_CHECK_CTX(ctx);
    return tgl_dist_comm_barrier(ctx);
}
