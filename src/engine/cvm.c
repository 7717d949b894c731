/*
 * cvm.c — the C virtual machine: runs a compiled function's program, a
 * flat array of instructions over storage slots, in one C loop that never
 * returns to Lua.  Each TGL_I_OP instruction asks its op for the output
 * shape, takes a buffer (reused from the last call under cvm_nogc when
 * nobody else holds it), and runs the reference kernel; view ops return a
 * view instead.  Jumps implement the lazy ifelse.
 *
 * Linkers: cvm releases each intermediate after its last reader; cvm_nogc
 * keeps them for the next call; vm runs each op as a checked thunk (the
 * result's dtype, rank and broadcastable axes are verified), for
 * debugging.
 */
#include "engine/cvm.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t tgl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool same_shape(const tgl_array *a, int ndim, const int64_t *shape)
{
    if (a->ndim != ndim)
        return false;
    for (int i = 0; i < ndim; i++)
        if (a->shape[i] != shape[i])
            return false;
    return true;
}

/* The vm linker's check: the result matches the node's static type. */
static tgl_status check_result(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                               const tgl_array *r)
{
    char want[96], got[96];
    bool ok = r->dtype_id == n->type.dtype && r->ndim == n->type.ndim;
    for (int i = 0; ok && i < r->ndim; i++)
        ok = !tgl_type_bcast(n->type, i) || r->shape[i] == 1;
    if (!ok)
        return tgl_op_error(ctx, n, in, TGL_EINTERNAL, "produced %s where %s was inferred",
                            tgl_array_str(r, got, sizeof got),
                            tgl_type_str(n->type, want, sizeof want));
    return TGL_OK;
}

/* The buffer for output slot dst of the given shape: last call's buffer
 * when nobody else holds it (cvm_nogc), the in-place input's buffer when
 * the plan allows and nobody else holds it, else a new one. */
static tgl_status take_buffer(tgl_ctx *ctx, tgl_function *fn, const tgl_instr *ins,
                              tgl_array **dst, int dtype, int ndim, const int64_t *shape)
{
    tgl_array *o = *dst;
    if (o && o->refcount == 1 && o->storage->refcount == 1 && o->dtype_id == dtype &&
        same_shape(o, ndim, shape) && (o->flags & TGL_ARRAY_CONTIGUOUS))
        return TGL_OK;
    if (ins->inplace >= 0) {
        tgl_array **src = &fn->slot[ins->in[ins->inplace]];
        tgl_array *a = *src;
        /* A deferred update may write over its shared variable's value,
         * held by the variable and the slot, and by nobody else. */
        int owners = ins->update >= 0 ? 2 : 1;
        if (a && a->refcount == owners && a->storage->refcount == 1 && a->dtype_id == dtype &&
            same_shape(a, ndim, shape) && (a->flags & TGL_ARRAY_CONTIGUOUS)) {
            /* Move: the input slot is not read again (plan.c). */
            tgl_array_release(o);
            *dst = a;
            tgl_array_retain(a);
            return TGL_OK;
        }
    }
    tgl_array_release(o);
    *dst = NULL;
    return tgl_array_alloc(ctx, tgl_op_name(ins->node->op), dtype, ndim, shape, false, dst);
}

/* A fused instruction: every program output wanted gets a buffer, then
 * one pass of the generated kernel (or the reference path) fills them. */
static tgl_status run_fused(tgl_ctx *ctx, tgl_function *fn, tgl_instr *ins, tgl_array **in)
{
    const tgl_node *n = ins->node;
    tgl_array *outs[16] = {NULL};
    if (ins->nouts > 16)
        return tgl_ctx_set_error(ctx, TGL_EINTERNAL, "fused: too many outputs");
    for (int k = 0; k < ins->nouts; k++) {
        if (ins->outs[k] < 0)
            continue;
        int64_t shape[TGL_MAX_DIMS];
        const tgl_node *on = fn->slot_node[ins->outs[k]];
        tgl_status st = tgl_fused_output_shape(ctx, n, in, k, shape);
        if (!st)
            st = take_buffer(ctx, fn, k == n->p.i[1] ? ins : &(tgl_instr){.inplace = -1, .node = n},
                             &fn->slot[ins->outs[k]], on->type.dtype, on->type.ndim, shape);
        if (st)
            return st;
        outs[k] = fn->slot[ins->outs[k]];
    }
    return tgl_fused_run(ctx, n, in, outs, fn->mode == TGL_MODE_DEBUG);
}

static tgl_status run_op(tgl_ctx *ctx, tgl_function *fn, tgl_instr *ins)
{
    const tgl_node *n = ins->node;
    const tgl_opimpl *impl = ins->impl;
    tgl_array *args[16];
    tgl_array **in = ins->nin <= 16 ? args : malloc(sizeof *in * (size_t)ins->nin);
    if (!in)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", tgl_op_name(n->op));
    for (int i = 0; i < ins->nin; i++)
        in[i] = fn->slot[ins->in[i]];
    tgl_status st;
    tgl_array **dst = &fn->slot[ins->out];
    if (ins->nouts > 0) {
        st = run_fused(ctx, fn, ins, in);
    } else if (impl->view) {
        tgl_array *v = NULL;
        st = impl->view(ctx, n, in, &v);
        if (!st) {
            tgl_array_release(*dst);
            *dst = v;
        }
    } else {
        int64_t shape[TGL_MAX_DIMS];
        st = impl->shape(ctx, n, in, shape);
        if (!st)
            st = take_buffer(ctx, fn, ins, dst, n->type.dtype, n->type.ndim, shape);
        if (!st)
            st = impl->kernel(ctx, n, in, *dst);
    }
    if (!st && ins->inplace >= 0 && fn->slot[ins->in[ins->inplace]] == *dst) {
        /* The input's slot gave its buffer away: it is not read again. */
        tgl_array_release(fn->slot[ins->in[ins->inplace]]);
        fn->slot[ins->in[ins->inplace]] = NULL;
    }
    if (!st && fn->linker == TGL_LINKER_VM)
        st = check_result(ctx, n, in, *dst);
    if (in != args)
        free(in);
    return st;
}

tgl_status tgl_cvm_check_deferred(tgl_ctx *ctx, tgl_function *fn)
{
    if (tgl_ctx_interrupted(ctx))
        return tgl_ctx_set_error(ctx, TGL_EINTERRUPT, "%s: interrupted", fn->name);
    for (int32_t pc = fn->defer_start; pc < fn->ncode; pc++) {
        tgl_instr *ins = &fn->code[pc];
        tgl_array *args[16];
        if (ins->nin > 16 || ins->impl->view || ins->nouts)
            continue;
        for (int i = 0; i < ins->nin; i++)
            args[i] = fn->slot[ins->in[i]];
        int64_t shape[TGL_MAX_DIMS];
        tgl_status st = ins->impl->shape(ctx, ins->node, args, shape);
        if (st)
            return st;
    }
    return TGL_OK;
}

tgl_status tgl_cvm_run(tgl_ctx *ctx, tgl_function *fn, int32_t from, int32_t to)
{
    tgl_instr *code = fn->code;
    int32_t pc = from, end = to;
    const bool gc = fn->linker != TGL_LINKER_VM && !fn->has_jumps;
    const bool profile = fn->profile;
    while (pc < end) {
        tgl_instr *ins = &code[pc];
        switch (ins->kind) {
        case TGL_I_OP: {
            if (tgl_ctx_interrupted(ctx))
                return tgl_ctx_set_error(ctx, TGL_EINTERRUPT, "%s: interrupted",
                                         tgl_op_name(ins->node->op));
            uint64_t t0 = profile ? tgl_now_ns() : 0;
            tgl_status st = run_op(ctx, fn, ins);
            if (st)
                return st;
            if (profile) {
                ins->ns += tgl_now_ns() - t0;
                ins->calls++;
            }
            if (gc)
                for (int k = 0; k < ins->nfree; k++) {
                    tgl_array_release(fn->slot[ins->free_slots[k]]);
                    fn->slot[ins->free_slots[k]] = NULL;
                }
            pc++;
            break;
        }
        case TGL_I_JUMPZ: {
            const tgl_array *c = fn->slot[ins->in[0]];
            pc = tgl_load_as_double(c->dtype_id, c->data, 0) != 0 ? pc + 1 : ins->target;
            break;
        }
        case TGL_I_JUMP:
            pc = ins->target;
            break;
        case TGL_I_MOVE: {
            tgl_array *v = fn->slot[ins->in[0]];
            tgl_array_retain(v);
            tgl_array_release(fn->slot[ins->out]);
            fn->slot[ins->out] = v;
            pc++;
            break;
        }
        default:
            return tgl_ctx_set_error(ctx, TGL_EINTERNAL, "cvm: bad instruction %d at %d",
                                     ins->kind, pc);
        }
    }
    return TGL_OK;
}
