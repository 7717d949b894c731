/*
 * fused.c — the fused op: a multi-output node whose payload is a fused
 * program (engine/fused_prog.h), applied to the node's inputs.  The fuse stage
 * builds these; the CVM runs one as one instruction that fills every
 * output in one pass (other nodes read its outputs through OUTPUT nodes).
 *
 * Two ways to run: the generated kernel (src/cgen), when one is loaded;
 * otherwise the reference path, which runs the group's original nodes with
 * their reference kernels — the oracle DEBUG mode compares against.
 */
#include "engine/ops/ops.h"
#include "engine/fused_prog.h"
#include "engine/backend.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static tgl_status tgl_fused_run(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                tgl_array *const *out, bool debug, void **cache);
static tgl_status tgl_fused_output_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                         int k, int64_t *shape);

#define prog_of(ctx, n) ((void)(ctx), (const tgl_fused_prog *)tgl_fused_prog_of(n))
#define output_type tgl_fused_prog_out_type

static tgl_status fused_infer(tgl_ctx *ctx, tgl_node *n)
{
    TGL_CHECK(n->p.n == 0, TGL_EINVAL, "takes no parameters");
    TGL_CHECK(n->payload && n->payload->vt->kind && strcmp(n->payload->vt->kind, "fused") == 0,
              TGL_EINVAL, "needs a fused program as its payload");
    const tgl_fused_prog *p = tgl_fused_prog_of(n);
    TGL_CHECK(n->nin == p->nin, TGL_EINVAL, "program %d takes %d inputs, got %d", p->id, p->nin,
              n->nin);
    TGL_CHECK(p->nout >= 1 && p->nout < INT16_MAX, TGL_EINVAL, "program %d has %d outputs",
              p->id, p->nout);
    for (int i = 0; i < n->nin; i++) {
        tgl_type t = n->in[i]->type, want = p->in_type[i];
        TGL_CHECK(t.dtype == want.dtype && t.ndim == want.ndim && (t.bcast & want.bcast) == want.bcast,
                  TGL_EDTYPE, "input %d does not have the program's type", i + 1);
    }
    n->type = output_type(p, 0);
    n->nout = (int16_t)p->nout;
    return TGL_OK;
}

static tgl_type fused_out_type(const tgl_node *n, int k)
{
    return output_type(tgl_fused_prog_of(n), k);
}

/* The shape of the elementwise space: non-broadcast axes agree. */
static tgl_status space_shape(tgl_ctx *ctx, const tgl_node *n, const tgl_fused_prog *p,
                              tgl_array *const *in, int64_t *shape)
{
    for (int d = 0; d < p->ndim; d++) {
        shape[d] = 1;
        bool fixed = false;
        for (int i = 0; i < p->nin; i++) {
            if (tgl_type_bcast(p->in_type[i], d)) {
                if (in[i]->shape[d] != 1)
                    return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                                        "input %d has size %" PRId64 " on broadcast axis %d", i + 1,
                                        in[i]->shape[d], d + 1);
                continue;
            }
            if (!fixed) {
                shape[d] = in[i]->shape[d];
                fixed = true;
            } else if (in[i]->shape[d] != shape[d]) {
                return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                                    "sizes %" PRId64 " and %" PRId64 " differ on axis %d", shape[d],
                                    in[i]->shape[d], d + 1);
            }
        }
    }
    return TGL_OK;
}

static tgl_status tgl_fused_reference(tgl_ctx *ctx, const tgl_fused_prog *p, tgl_array *const *in,
                                      tgl_array *const *out);

static tgl_status tgl_fused_output_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                         int k, int64_t *shape)
{
    const tgl_fused_prog *p = prog_of(ctx, n);
    int64_t space[TGL_MAX_DIMS];
    tgl_status st = space_shape(ctx, n, p, in, space);
    if (st) {
        /* The user wrote the original ops: let the one that fails say so,
         * with its name and line (the reference path stops at it). */
        tgl_array **none = calloc((size_t)p->nout, sizeof *none);
        tgl_status rst = none ? tgl_fused_reference(ctx, p, in, none)
                              : tgl_ctx_set_error(ctx, TGL_ENOMEM, "fused: out of memory");
        free(none);
        return rst ? rst : space_shape(ctx, n, p, in, space);
    }
    if (k != 0 || p->reduce_op < 0) {
        memcpy(shape, space, sizeof space[0] * (size_t)p->ndim);
        return TGL_OK;
    }
    int nd = 0;
    for (int d = 0; d < p->ndim; d++) {
        bool red = (p->reduce_mask >> d) & 1u;
        if (!red)
            shape[nd++] = space[d];
        else if (p->reduce_keepdims)
            shape[nd++] = 1;
    }
    return TGL_OK;
}


/* The value (a new reference) of an operand of a member that is neither
 * an input of the program nor a member: the fuse stage makes such an
 * operand an immediate of the program (opt/fuse.c, is_immediate): a scalar
 * constant, often padded with broadcast axes by dimshuffles (the 0.5 of
 * x * 0.5 for a vector x is dimshuffle{x}(0.5)).  It is a constant
 * expression, evaluated here with its nodes' own reference
 * implementations, so the reference computes what the program computes. */
static tgl_status constant_operand(tgl_ctx *ctx, const tgl_backend *be, const tgl_node *user,
                                   tgl_node *x, int depth, tgl_array **out)
{
    *out = NULL;
    if (x->kind == TGL_NODE_CONSTANT) /* a host array: a copy on be's device */
        return tgl_array_on_device(ctx, tgl_op_name(user->op), x->value, be->device, out);
    const tgl_opimpl *impl = x->kind == TGL_NODE_APPLY ? tgl_op_impl(x->op) : NULL;
    /* Padding chains are a few nodes long; the bound only stops a graph
     * that is not what the fuse stage makes. */
    if (!impl || depth > 32 || x->nin > 3 || impl->shape_k || !(impl->view || impl->shape))
        return tgl_ctx_set_error(ctx, TGL_EINTERNAL, "fused: operand of %s not found",
                                 tgl_op_name(user->op));
    tgl_array *args[3] = {NULL, NULL, NULL};
    tgl_status st = TGL_OK;
    for (int k = 0; k < x->nin && !st; k++)
        st = constant_operand(ctx, be, user, x->in[k], depth + 1, &args[k]);
    if (!st && impl->view) {
        st = impl->view(ctx, x, args, out);
    } else if (!st) {
        int64_t shape[TGL_MAX_DIMS];
        const tgl_op_kernel *kern;
        if (!(st = tgl_backend_op_kernel(ctx, be, x, &kern)) &&
            !(st = impl->shape(ctx, x, args, shape)) &&
            !(st = tgl_array_alloc_on(ctx, tgl_op_name(x->op), be->device, x->type.dtype,
                                      x->type.ndim, shape, false, out)))
            st = kern->run(ctx, x, args, *out);
    }
    if (st) {
        tgl_array_release(*out);
        *out = NULL;
    }
    for (int k = 0; k < x->nin; k++)
        tgl_array_release(args[k]);
    return st;
}

/* The reference path: the group's original nodes, one op kernel at a
 * time, on the inputs; out[k] (non-NULL ones) receive the outputs.  The
 * kernels are those of the backend of the arrays' device (the outputs',
 * else the inputs'), which the compiler checked has them all. */
static tgl_status tgl_fused_reference(tgl_ctx *ctx, const tgl_fused_prog *p, tgl_array *const *in,
                               tgl_array *const *out)
{
    int device = p->nin > 0 ? in[0]->device : TGL_DEVICE_CPU;
    for (int k = p->nout - 1; k >= 0; k--)
        if (out[k])
            device = out[k]->device;
    const tgl_backend *be = tgl_backend_get(device);
    tgl_array **val = calloc((size_t)p->norig + 1, sizeof *val);
    if (!val)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "fused: out of memory");
    tgl_status st = TGL_OK;
    for (int j = 0; j < p->norig && !st; j++) {
        const tgl_node *node = p->orig[j];
        tgl_array *args[3] = {NULL, NULL, NULL};
        tgl_array *owned[3] = {NULL, NULL, NULL}; /* immediates' values */
        if (node->nin > 3)
            st = tgl_ctx_set_error(ctx, TGL_EINTERNAL, "fused: %s has %d inputs",
                                   tgl_op_name(node->op), node->nin);
        for (int k = 0; k < node->nin && !st; k++) {
            tgl_node *x = node->in[k];
            for (int i = 0; i < p->nin && !args[k]; i++)
                if (p->orig_in[i] == x)
                    args[k] = in[i];
            for (int m = 0; m < j && !args[k]; m++)
                if (p->orig[m] == x)
                    args[k] = val[m];
            if (!args[k]) {
                st = constant_operand(ctx, be, node, x, 0, &owned[k]);
                args[k] = owned[k];
            }
        }
        if (!st) {
            const tgl_opimpl *impl = tgl_op_impl(node->op);
            const tgl_op_kernel *kern;
            int64_t shape[TGL_MAX_DIMS];
            if (!(st = tgl_backend_op_kernel(ctx, be, node, &kern)) &&
                !(st = impl->shape(ctx, node, args, shape)) &&
                !(st = tgl_array_alloc_on(ctx, tgl_op_name(node->op), be->device,
                                          node->type.dtype, node->type.ndim, shape, false,
                                          &val[j])))
                st = kern->run(ctx, node, args, val[j]);
        }
        for (int k = 0; k < 3; k++)
            tgl_array_release(owned[k]);
    }
    for (int k = 0; k < p->nout && !st; k++) {
        if (!out[k])
            continue;
        for (int j = 0; j < p->norig; j++)
            if (p->orig[j] == p->orig_out[k]) {
                st = tgl_array_assign(ctx, out[k], val[j]);
                break;
            }
    }
    for (int j = 0; j < p->norig; j++)
        tgl_array_release(val[j]);
    free(val);
    return st;
}

/* The worst mismatch between a generated result and the reference. */
static tgl_status compare(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, int k,
                          const tgl_array *got, const tgl_array *want)
{
    bool fl = tgl_dtype_is_float(got->dtype_id);
    /* The tolerance of the least precise float the program computes in: a
     * float64 output computed through a float32 sin differs from the
     * reference by float32 rounding (libm vs vectorized libm). */
    const tgl_fused_prog *p = tgl_fused_prog_of(n);
    bool single = got->dtype_id == TGL_FLOAT32;
    for (int i = 0; i < p->ninstr && !single; i++)
        single = p->code[i].dtype == TGL_FLOAT32;
    double tol_rel = single ? 1e-4 : 1e-9;
    double tol_abs = single ? 1e-5 : 1e-12;
    double worst = 0, wg = 0, ww = 0;
    int64_t at = -1;
    for (int64_t i = 0; i < got->size; i++) {
        double a = tgl_load_as_double(got->dtype_id, got->data, i);
        double b = tgl_load_as_double(want->dtype_id, want->data, i);
        if (a == b || (a != a && b != b))
            continue;
        double err = fl ? fabs(a - b) / (tol_abs + tol_rel * fabs(b)) : INFINITY;
        if (err != err)
            err = INFINITY;
        if (err > worst) {
            worst = err;
            at = i;
            wg = a;
            ww = b;
        }
    }
    if (worst > 1)
        return tgl_op_error(ctx, n, in, TGL_EINTERNAL,
                            "DEBUG: generated kernel output %d differs from the reference at "
                            "flat element %" PRId64 ": %.9g vs %.9g", k + 1, at + 1, wg, ww);
    return TGL_OK;
}

static tgl_status tgl_fused_run(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                tgl_array *const *out, bool debug, void **cache)
{
    const tgl_fused_prog *p = prog_of(ctx, n);
    /* the device of the arrays (all on one: the program's): its kernel
     * runs, scratch outputs go there */
    int device = p->nin > 0 ? in[0]->device : TGL_DEVICE_CPU;
    for (int k = 0; k < p->nout && p->nin == 0; k++)
        if (out[k])
            device = out[k]->device;
    bool gen = tgl_backend_tier(p, device) > 0; /* the backend has kernel code */
    /* Outputs nobody asked for still need a buffer for the kernel.  The
     * usual few outputs' lists live on the stack: no allocation per run. */
    tgl_array *stack_all[3 * 4] = {NULL};
    tgl_array **all = p->nout <= 4 ? stack_all : calloc((size_t)p->nout * 3, sizeof *all);
    if (!all)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "fused: out of memory");
    tgl_array **tmp = all + p->nout, **ref = all + 2 * p->nout;
    tgl_status st = TGL_OK;
    for (int k = 0; k < p->nout && !st; k++) {
        all[k] = out[k];
        if (!all[k] && gen) {
            int64_t shape[TGL_MAX_DIMS];
            tgl_type t = output_type(p, k);
            if (!(st = tgl_fused_output_shape(ctx, n, in, k, shape)))
                st = tgl_array_alloc_on(ctx, "fused", device, t.dtype, t.ndim, shape, false,
                                        &tmp[k]);
            all[k] = tmp[k];
        }
    }
    if (!st) {
        if (!gen) {
            st = tgl_fused_reference(ctx, p, in, all);
        } else {
            st = tgl_backend_launch(ctx, p, device, in, all, cache);
            if (!st && debug) {
                for (int k = 0; k < p->nout && !st; k++)
                    st = tgl_array_copy(ctx, all[k], all[k]->dtype_id, &ref[k]);
                if (!st)
                    st = tgl_fused_reference(ctx, p, in, ref);
                for (int k = 0; k < p->nout && !st; k++) {
                    /* compared on the host: device arrays are copied there */
                    tgl_array *hg = NULL, *hr = NULL;
                    st = tgl_array_on_device(ctx, "fused", all[k], TGL_DEVICE_CPU, &hg);
                    if (!st)
                        st = tgl_array_on_device(ctx, "fused", ref[k], TGL_DEVICE_CPU, &hr);
                    if (!st)
                        st = compare(ctx, n, in, k, hg, hr);
                    tgl_array_release(hg);
                    tgl_array_release(hr);
                }
                for (int k = 0; k < p->nout; k++)
                    tgl_array_release(ref[k]);
            }
        }
    }
    for (int k = 0; k < p->nout; k++)
        tgl_array_release(tmp[k]);
    if (all != stack_all)
        free(all);
    return st;
}

tgl_status tgl_fused_kernel_cached(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                   tgl_array *const *out, bool debug, void **cache)
{
    return tgl_fused_run(ctx, n, in, out, debug, cache);
}

/* Fused nodes appear in optimized graphs; their pullback is that of the
 * nodes the program was built from, with the program's inputs standing
 * for the fused node's (so an optimized graph can be differentiated). */
static tgl_status fused_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *const *gout, tgl_node **gin)
{
    const tgl_fused_prog *p = tgl_fused_prog_of(n);
    int nk = 0, nw = 0;
    tgl_node **buf = calloc((size_t)(2 * p->nout + 3 * p->nin + 1), sizeof *buf);
    if (!buf)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "fused: out of memory");
    tgl_node **kv = buf, **kg = buf + p->nout, **wrt = buf + 2 * p->nout,
             **g = wrt + p->nin, **to = g + p->nin;
    for (int k = 0; k < p->nout; k++)
        if (gout[k]) {
            kv[nk] = p->orig_out[k];
            kg[nk++] = gout[k];
        }
    int *which = calloc((size_t)p->nin + 1, sizeof *which);
    tgl_status st = which ? TGL_OK : tgl_ctx_set_error(ctx, TGL_ENOMEM, "fused: out of memory");
    for (int i = 0; i < p->nin && !st; i++) {
        gin[i] = NULL;
        if (tgl_dtype_is_float(p->orig_in[i]->type.dtype)) {
            which[nw] = i;
            wrt[nw++] = p->orig_in[i];
        }
    }
    if (!st && nk && nw)
        st = tgl_grad(ctx, NULL, nw, wrt, nk, kv, kg, TGL_DISCONNECTED_ZERO, g);
    /* The gradients are in terms of the program's original inputs. */
    for (int i = 0; i < p->nin; i++)
        to[i] = n->in[i];
    tgl_node **orig_in = p->orig_in;
    if (!st && nk && nw)
        st = tgl_clone_replace(ctx, nw, g, p->nin, orig_in, to, g);
    for (int j = 0; j < nw && !st && nk; j++)
        gin[which[j]] = g[j];
    free(which);
    free(buf);
    return st;
}

/* Output 0 of an elementwise program may overwrite an input of its type
 * (element i of the output depends only on element i of the inputs). */
static int fused_inplace(const tgl_node *n)
{
    /* A reduction's output is smaller than its inputs: never. */
    for (int i = 0; i < n->nin; i++)
        if (tgl_fused_may_overwrite(n, i))
            return i;
    return -1;
}

const tgl_opimpl tgl_impl_fused = {
    .family = TGL_FAM_FUSED, .nin_min = 0, .nin_max = -1, .inplace = fused_inplace,
    .infer = fused_infer, .out_type = fused_out_type, .shape_k = tgl_fused_output_shape,
    .grad_n = fused_grad,
};
