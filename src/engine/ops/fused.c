/*
 * fused.c — the fused op: output p.i[1] of fused program p.i[0]
 * (engine/fprog.h) applied to the node's inputs.  The fuse stage builds
 * these; nodes of one program on the same inputs are one group with
 * several outputs, and the CVM runs them as one instruction
 * (tgl_fused_run fills every output in one pass).
 *
 * Two ways to run: the generated kernel (src/cgen), when one is loaded;
 * otherwise the reference path, which runs the group's original nodes with
 * their reference kernels — the oracle DEBUG mode compares against.
 */
#include "engine/ops/ops.h"
#include "engine/fprog.h"
#include "engine/backend.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const tgl_fprog *prog_of(const tgl_ctx *ctx, const tgl_node *n)
{
    return tgl_fprog_get(ctx, (int32_t)n->p.i[0]);
}

/* The type of output k of a program. */
static tgl_type output_type(const tgl_fprog *p, int k)
{
    return k == 0 && p->reduce_op >= 0 ? p->reduce_type : p->out_type[k];
}

static tgl_status fused_infer(tgl_ctx *ctx, tgl_node *n)
{
    TGL_CHECK(n->p.n == 2, TGL_EINVAL, "needs a program id and an output index");
    const tgl_fprog *p = prog_of(ctx, n);
    TGL_CHECK(p, TGL_EINVAL, "no fused program %" PRId64, n->p.i[0]);
    TGL_CHECK(n->nin == p->nin, TGL_EINVAL, "program %d takes %d inputs, got %d", p->id, p->nin,
              n->nin);
    TGL_CHECK(n->p.i[1] >= 0 && n->p.i[1] < p->nout, TGL_EINVAL, "no output %" PRId64,
              n->p.i[1] + 1);
    for (int i = 0; i < n->nin; i++) {
        tgl_type t = n->in[i]->type, want = p->in_type[i];
        TGL_CHECK(t.dtype == want.dtype && t.ndim == want.ndim && (t.bcast & want.bcast) == want.bcast,
                  TGL_EDTYPE, "input %d does not have the program's type", i + 1);
    }
    n->type = output_type(p, (int)n->p.i[1]);
    return TGL_OK;
}

/* The shape of the elementwise space: non-broadcast axes agree. */
static tgl_status space_shape(tgl_ctx *ctx, const tgl_node *n, const tgl_fprog *p,
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

static tgl_status tgl_fused_reference(tgl_ctx *ctx, const tgl_fprog *p, tgl_array *const *in,
                                      tgl_array *const *out);

tgl_status tgl_fused_output_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, int k,
                                  int64_t *shape)
{
    const tgl_fprog *p = prog_of(ctx, n);
    int64_t space[TGL_MAX_DIMS];
    tgl_status st = space_shape(ctx, n, p, in, space);
    if (st) {
        /* The user wrote the original ops: let the one that fails say so,
         * with its name and line (the reference path stops at it). */
        tgl_array *none[16] = {NULL};
        tgl_status rst = tgl_fused_reference(ctx, p, in, none);
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

static tgl_status fused_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              int64_t *shape)
{
    return tgl_fused_output_shape(ctx, n, in, (int)n->p.i[1], shape);
}

/* The reference path: the group's original nodes, one reference kernel at
 * a time, on the inputs; out[k] (non-NULL ones) receive the outputs. */
static tgl_status tgl_fused_reference(tgl_ctx *ctx, const tgl_fprog *p, tgl_array *const *in,
                               tgl_array *const *out)
{
    tgl_array **val = calloc((size_t)p->norig + 1, sizeof *val);
    if (!val)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "fused: out of memory");
    tgl_status st = TGL_OK;
    for (int j = 0; j < p->norig && !st; j++) {
        const tgl_node *node = p->orig[j];
        tgl_array *args[16];
        for (int k = 0; k < node->nin && k < 16; k++) {
            tgl_node *x = node->in[k];
            args[k] = NULL;
            for (int i = 0; i < p->nin && !args[k]; i++)
                if (p->orig_in[i] == x)
                    args[k] = in[i];
            for (int m = 0; m < j && !args[k]; m++)
                if (p->orig[m] == x)
                    args[k] = val[m];
            if (!args[k] && x->kind == TGL_NODE_CONSTANT)
                args[k] = x->value;
            if (!args[k])
                st = tgl_ctx_set_error(ctx, TGL_EINTERNAL, "fused: operand of %s not found",
                                       tgl_op_name(node->op));
        }
        if (st)
            break;
        const tgl_opimpl *impl = tgl_op_impl(node->op);
        int64_t shape[TGL_MAX_DIMS];
        if (!(st = impl->shape(ctx, node, args, shape)) &&
            !(st = tgl_array_alloc(ctx, tgl_op_name(node->op), node->type.dtype,
                                   node->type.ndim, shape, false, &val[j])))
            st = impl->kernel(ctx, node, args, val[j]);
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
    double tol_rel = got->dtype_id == TGL_FLOAT32 ? 1e-4 : 1e-9;
    double tol_abs = got->dtype_id == TGL_FLOAT32 ? 1e-5 : 1e-12;
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

tgl_status tgl_fused_run(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                         tgl_array *const *out, bool debug)
{
    const tgl_fprog *p = prog_of(ctx, n);
    bool gen = tgl_backend_tier(p) > 0; /* the backend has kernel code */
    /* Outputs nobody asked for still need a buffer for the kernel. */
    tgl_array *all[16], *tmp[16] = {NULL};
    if (p->nout > 16)
        return tgl_ctx_set_error(ctx, TGL_EINTERNAL, "fused: too many outputs");
    tgl_status st = TGL_OK;
    for (int k = 0; k < p->nout && !st; k++) {
        all[k] = out[k];
        if (!all[k] && gen) {
            int64_t shape[TGL_MAX_DIMS];
            tgl_type t = output_type(p, k);
            if (!(st = tgl_fused_output_shape(ctx, n, in, k, shape)))
                st = tgl_array_alloc(ctx, "fused", t.dtype, t.ndim, shape, false, &tmp[k]);
            all[k] = tmp[k];
        }
    }
    if (!st) {
        if (!gen) {
            st = tgl_fused_reference(ctx, p, in, all);
        } else {
            st = tgl_backend_launch(ctx, p, in, all);
            if (!st && debug) {
                tgl_array *ref[16] = {NULL};
                for (int k = 0; k < p->nout && !st; k++)
                    st = tgl_array_copy(ctx, all[k], all[k]->dtype_id, &ref[k]);
                if (!st)
                    st = tgl_fused_reference(ctx, p, in, ref);
                for (int k = 0; k < p->nout && !st; k++)
                    st = compare(ctx, n, in, k, all[k], ref[k]);
                for (int k = 0; k < p->nout; k++)
                    tgl_array_release(ref[k]);
            }
        }
    }
    for (int k = 0; k < p->nout; k++)
        tgl_array_release(tmp[k]);
    return st;
}

static tgl_status fused_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                               tgl_array *out)
{
    const tgl_fprog *p = prog_of(ctx, n);
    tgl_array *outs[16] = {NULL};
    outs[n->p.i[1]] = out;
    (void)p;
    return tgl_fused_run(ctx, n, in, outs, false);
}

/* Fused nodes appear only after differentiation; for completeness the
 * pullback is that of the original nodes, rebuilt on the inputs. */
static tgl_status fused_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    (void)g;
    for (int i = 0; i < n->nin; i++)
        gin[i] = NULL;
    return tgl_ctx_set_error(ctx, TGL_EINVAL,
                             "fused nodes come from compiled graphs; differentiate the graph "
                             "before compiling it");
}

/* Output 0 of an elementwise program may overwrite an input of its type
 * (element i of the output depends only on element i of the inputs). */
static int fused_inplace(const tgl_node *n)
{
    /* A reduction's output is smaller than its inputs: never. */
    if (n->p.i[1] != 0 || n->type.ndim == 0)
        return -1;
    for (int i = 0; i < n->nin; i++)
        if (tgl_type_eq(n->in[i]->type, n->type) && n->in[i]->type.ndim > 0)
            return i;
    return -1;
}

const tgl_opimpl tgl_impl_fused = {
    .family = TGL_FAM_FUSED, .nin_min = 0, .nin_max = -1, .inplace = fused_inplace,
    .infer = fused_infer, .shape = fused_shape, .kernel = fused_kernel, .grad = fused_grad,
};
