/*
 * eval.c — eager evaluation: one op applied to arrays at once (tgl_eval;
 * tgl.add(a, b) on arrays in Lua), with no graph kept and nothing
 * compiled.  The node is a probe on the stack, typed by the op's infer;
 * the op's view runs, or its shape function and its kernel on the backend
 * of the arrays' device.  It runs kernels, so it does not belong in the
 * graph file (graph.c), which only builds nodes.
 */
#include "engine/ops/ops.h"
#include "engine/backend.h"

#include <string.h>

/* Runs an apply node on arrays: view, or shape + the op's kernel on the
 * backend of the arrays' device (tgl_eval put them all on one; cpu for
 * none). */
static tgl_status run_node(tgl_ctx *ctx, const tgl_node *n, int nin, tgl_array *const *in,
                           tgl_array **out)
{
    const tgl_opimpl *d = tgl_op_impl(n->op);
    if (d->view)
        return d->view(ctx, n, in, out);
    const tgl_backend *be = tgl_backend_get(nin > 0 ? in[0]->device : TGL_DEVICE_CPU);
    const tgl_op_kernel *kern;
    tgl_status st = tgl_backend_op_kernel(ctx, be, n, &kern);
    int64_t shape[TGL_MAX_DIMS];
    if (!st)
        st = d->shape(ctx, n, in, shape);
    if (st)
        return st;
    tgl_array *o;
    if ((st = tgl_array_alloc_on(ctx, tgl_op_name(n->op), be->device, n->type.dtype, n->type.ndim,
                                 shape, false, &o)))
        return st;
    if ((st = kern->run(ctx, n, in, o))) {
        tgl_array_release(o);
        return st;
    }
    *out = o;
    return TGL_OK;
}

tgl_status tgl_eval(tgl_ctx *ctx, int op, int nin, tgl_array *const *in, const tgl_params *p,
                    tgl_array **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(out && nin >= 0 && nin <= 64 && (nin == 0 || in), TGL_EINVAL,
              "tgl_eval: bad arguments");
    TGL_CHECK(op >= 0 && op < TGL_NOPS, TGL_EINVAL, "tgl_eval: unknown op id %d", op);
    const tgl_opimpl *d = tgl_op_impl(op);
    TGL_CHECK(!(d->flags & TGL_OPF_LAZY), TGL_EINVAL,
              "tgl_eval: %s needs a graph (use tgl.switch on arrays)", tgl_op_name(op));
    /* Leaves on the stack stand for the arrays; elementwise inputs are
     * padded to a common ndim with views. */
    tgl_node leaves[64], *lp[64];
    tgl_array *args[64];
    int nd = 0;
    for (int i = 0; i < nin; i++) {
        TGL_CHECK(in[i], TGL_EINVAL, "tgl_eval: input %d is NULL", i);
        if (in[i]->ndim > nd)
            nd = in[i]->ndim;
    }
    /* The op runs on the device of its arrays: the first input not on the
     * cpu decides, and host inputs are copied there (1 + a for a device
     * array a: the kernel must not get host and device memory mixed). */
    int dev = TGL_DEVICE_CPU;
    for (int i = 0; i < nin && dev == TGL_DEVICE_CPU; i++)
        dev = in[i]->device;
    tgl_status st = TGL_OK;
    int made = 0;
    for (int i = 0; i < nin; i++) {
        tgl_array *src = in[i];
        if (src->device != dev &&
            (st = tgl_array_on_device(ctx, tgl_op_name(op), in[i], dev, &src)))
            break;
        args[i] = src;
        if (d->family == TGL_FAM_ELEMWISE && src->ndim < nd) {
            int64_t shape[TGL_MAX_DIMS], strides[TGL_MAX_DIMS];
            int pad = nd - src->ndim;
            for (int k = 0; k < nd; k++) {
                shape[k] = k < pad ? 1 : src->shape[k - pad];
                strides[k] = k < pad ? 0 : src->strides[k - pad];
            }
            st = tgl_array_view(ctx, src, nd, shape, strides, 0, &args[i]);
            if (src != in[i])
                tgl_array_release(src); /* the view holds its storage */
            if (st)
                break;
        }
        made = i + 1;
        memset(&leaves[i], 0, sizeof leaves[i]);
        leaves[i].kind = TGL_NODE_INPUT;
        leaves[i].op = -1;
        leaves[i].type = tgl_array_type(args[i]);
        lp[i] = &leaves[i];
    }
    tgl_node probe;
    if (!st && !(st = tgl_infer_probe(ctx, "tgl_eval", op, nin, lp, p, NULL, &probe))) {
        if (probe.nout > 1 || !(d->view || (d->shape && tgl_op_needs_kernel(&probe))))
            st = tgl_ctx_set_error(ctx, TGL_EINVAL, "tgl_eval: %s needs a graph (compile it)",
                                   tgl_op_name(op));
        else
            st = run_node(ctx, &probe, nin, args, out);
    }
    for (int i = 0; i < made; i++)
        if (args[i] != in[i])
            tgl_array_release(args[i]);
    return st;
}
