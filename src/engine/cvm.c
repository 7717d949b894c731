/*
 * cvm.c — the C virtual machine: runs a compiled program (program.h) on a
 * frame, a flat array of instructions over storage slots, in one C loop
 * that never returns to Lua.  Each TGL_I_OP instruction asks its op for
 * the output shape, takes a buffer (the frame's pool, last call's buffer
 * under cvm_nogc, or the in-place input's), and runs the kernel; view ops
 * return a view instead; multi-output ops fill all their outputs at once.
 * Jumps implement the lazy ifelse.  After any instruction, the slots the
 * plan releases there go back to the frame's pool.
 *
 * Linkers: cvm releases each intermediate after its last reader (into the
 * pool: buffers are reused, not reallocated, call after call); cvm_nogc
 * keeps every intermediate in its slot for the next call; vm runs each op
 * as a checked thunk (the result's dtype, rank and broadcastable axes are
 * verified), for debugging.
 */
#include "engine/program.h"
#include "engine/backend.h"
#include "engine/fused_prog.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* The vm linker's check: the result matches the node's static type. */
static tgl_status check_result(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                               const tgl_array *r, tgl_type t)
{
    char want[96], got[96];
    bool ok = r->dtype_id == t.dtype && r->ndim == t.ndim;
    for (int i = 0; ok && i < r->ndim; i++)
        ok = !tgl_type_bcast(t, i) || r->shape[i] == 1;
    if (!ok)
        return tgl_op_error(ctx, n, in, TGL_EINTERNAL, "produced %s where %s was inferred",
                            tgl_array_str(r, got, sizeof got), tgl_type_str(t, want, sizeof want));
    return TGL_OK;
}

/* floor(log2(n)) for n >= 1. */
static int size_class(size_t n)
{
    return 63 - __builtin_clzll((unsigned long long)n);
}

/* A buffer from the frame's pool with room for the array, laid out as a
 * contiguous array of the given shape; or NULL.  It comes from the class
 * above the one nbytes falls in (every buffer there is large enough, and
 * at most four times as large); a buffer of exactly nbytes is also taken
 * from nbytes' own class when it is on top. */
tgl_array *tgl_frame_take_pooled(tgl_frame *fr, int dtype, int ndim, const int64_t *shape)
{
    int64_t size = 1;
    for (int i = 0; i < ndim; i++)
        size *= shape[i];
    size_t nbytes = (size_t)size * tgl_dtype_size(dtype);
    if (nbytes == 0)
        return NULL;
    int c = size_class(nbytes);
    tgl_pool_class *pc = &fr->pool[c];
    tgl_array *a = NULL;
    if (pc->n && pc->a[pc->n - 1]->storage->nbytes >= nbytes)
        a = pc->a[--pc->n];
    else if (c + 1 < TGL_POOL_CLASSES && fr->pool[c + 1].n)
        a = fr->pool[c + 1].a[--fr->pool[c + 1].n];
    if (!a)
        return NULL;
    a->data = a->storage->base;
    a->dtype_id = dtype;
    a->ndim = ndim;
    a->size = size;
    memcpy(a->shape, shape, sizeof *shape * (size_t)ndim);
    tgl_contiguous_strides(ndim, shape, a->strides);
    a->flags = TGL_ARRAY_CONTIGUOUS;
    return a;
}


void tgl_frame_recycle(tgl_frame *fr, tgl_array *a)
{
    if (!a)
        return;
    /* Only a buffer of the program's device nobody else sees: one owner
     * of the descriptor and of its storage, and the storage's own layout. */
    if (TGL_REFS(a) == 1 && a->storage && TGL_REFS(a->storage) == 1 &&
        a->device == fr->prog->device && a->data == a->storage->base && a->storage->nbytes > 0) {
        tgl_pool_class *pc = &fr->pool[size_class(a->storage->nbytes)];
        /* A class holds at most as many buffers as the program can use at
         * once (its intermediates and outputs): an op that allocates its own
         * buffers each call (a scan's outputs) would otherwise grow the pool
         * by one every call. */
        if (pc->n > fr->prog->ntemp + fr->prog->nout) {
            tgl_array_release(a);
            return;
        }
        if (pc->n == pc->cap) {
            int32_t nc = pc->cap ? pc->cap * 2 : 8;
            tgl_array **p = realloc(pc->a, sizeof *p * (size_t)nc);
            if (!p) {
                tgl_array_release(a);
                return;
            }
            pc->a = p;
            pc->cap = nc;
        }
        pc->a[pc->n++] = a;
        return;
    }
    tgl_array_release(a);
}

/* The bytes [lo, hi) an array's elements span (strides may be 0 or
 * negative). */
static void extent(const tgl_array *a, uintptr_t *lo, uintptr_t *hi)
{
    int64_t first = 0, last = 0;
    for (int d = 0; d < a->ndim; d++) {
        int64_t span = (a->shape[d] - 1) * a->strides[d];
        if (span < 0)
            first += span;
        else
            last += span;
    }
    size_t es = tgl_dtype_size(a->dtype_id);
    *lo = (uintptr_t)a->data + (uintptr_t)(first * (int64_t)es);
    *hi = (uintptr_t)a->data + (uintptr_t)((last + 1) * (int64_t)es);
}

/* Whether deferred update ins may write over a, its variable's value
 * held in slot src, although a has owners outside the run (the user's
 * box of a borrowed array, as nn's parameters are; views of it, as
 * getParameters' flat arrays).  Nobody outside reads it while the run
 * goes on, and commit_update would write the new value into this same
 * memory anyway; what must not happen is an array the run still reads
 * overlapping it, so every other slot is checked (another slot holding a
 * itself, a view of it, an input sharing its storage). */
static bool deferred_writable(const tgl_frame *fr, const tgl_instr *ins, int32_t src,
                              const tgl_array *a)
{
    const tgl_program *prog = fr->prog;
    if (ins->update < 0 || a != prog->upd_var[ins->update]->value || a->size == 0)
        return false;
    uintptr_t lo, hi;
    extent(a, &lo, &hi);
    for (int32_t s = 0; s < prog->nslots; s++) {
        const tgl_array *f = fr->slot[s];
        if (s == src || !f || f->storage != a->storage || f->size == 0)
            continue;
        if (f == a)
            return false;
        uintptr_t flo, fhi;
        extent(f, &flo, &fhi);
        if (flo < hi && lo < fhi)
            return false;
    }
    return true;
}

/* The buffer for output slot dst of the given shape: last call's buffer
 * when nobody else holds it (cvm_nogc), the in-place input's buffer when
 * the plan allows and nobody else holds it, a pooled one, else a new one. */
static tgl_status take_buffer(tgl_ctx *ctx, tgl_frame *fr, const tgl_instr *ins, int inplace,
                              tgl_array **dst, int dtype, int ndim, const int64_t *shape)
{
    tgl_array *o = *dst;
    if (o && TGL_REFS(o) == 1 && TGL_REFS(o->storage) == 1 && o->dtype_id == dtype &&
        tgl_array_has_shape(o, ndim, shape) && (o->flags & TGL_ARRAY_CONTIGUOUS))
        return TGL_OK;
    if (inplace >= 0) {
        tgl_array **src = &fr->slot[ins->in[inplace]];
        tgl_array *a = *src;
        /* A deferred update may write over its shared variable's value,
         * held by the variable and the slot, and by nobody else. */
        int owners = ins->update >= 0 ? 2 : 1;
        if (a && a->dtype_id == dtype && tgl_array_has_shape(a, ndim, shape) &&
            (a->flags & TGL_ARRAY_CONTIGUOUS) &&
            ((TGL_REFS(a) == owners && TGL_REFS(a->storage) == 1) ||
             deferred_writable(fr, ins, ins->in[inplace], a))) {
            /* Move: the input slot is not read again (plan.c). */
            tgl_frame_recycle(fr, o);
            *dst = a;
            tgl_array_retain(a);
            return TGL_OK;
        }
    }
    tgl_frame_recycle(fr, o);
    *dst = tgl_frame_take_pooled(fr, dtype, ndim, shape);
    if (*dst)
        return TGL_OK;
    return tgl_array_alloc_on(ctx, tgl_op_name(ins->node->op), fr->prog->device, dtype, ndim,
                              shape, false, dst);
}

/* ---- the shape-stable fast path ------------------------------------------- */

void tgl_cvm_guard_shapes(tgl_frame *fr, bool force)
{
    const tgl_program *prog = fr->prog;
    bool same = fr->guard_set && !force;
    int64_t *g = fr->guard;
    for (int i = 0; i < prog->nin + prog->nshared; i++) {
        int32_t s = i < prog->nin ? prog->in_slot[i] : prog->shared_slot[i - prog->nin];
        const tgl_array *a = fr->slot[s];
        int nd = a ? a->ndim : -1;
        if (same && g[0] != nd)
            same = false;
        g[0] = nd;
        for (int d = 0; d < nd; d++) {
            if (same && g[1 + d] != a->shape[d])
                same = false;
            g[1 + d] = a->shape[d];
        }
        g += 1 + TGL_MAX_DIMS;
    }
    fr->guard_set = true;
    if (!same)
        fr->shape_epoch++;
}

/* Output k's shape for instruction ins: from the cache when this epoch
 * computed it, else from the op (and into the cache, when the instruction
 * is shape-stable; shapes_done then marks the entry good once every
 * output of the instruction has its shape). */
static tgl_status out_shape(tgl_ctx *ctx, tgl_frame *fr, const tgl_instr *ins,
                            tgl_array *const *in, int k, int ndim, int64_t *shape)
{
    int32_t pc = (int32_t)(ins - fr->prog->code);
    int64_t *c = ins->shape_stable ? fr->shape_cache + fr->shape_off[pc] + k * TGL_MAX_DIMS
                                   : NULL;
    if (c && fr->shape_at[pc] == fr->shape_epoch) {
        memcpy(shape, c, sizeof *shape * (size_t)ndim);
        return TGL_OK;
    }
    const tgl_opimpl *impl = ins->impl;
    tgl_status st = impl->shape_k ? impl->shape_k(ctx, ins->node, in, k, shape)
                                   : impl->shape(ctx, ins->node, in, shape);
    if (!st && c)
        memcpy(c, shape, sizeof *shape * (size_t)ndim);
    return st;
}

static void shapes_done(tgl_frame *fr, const tgl_instr *ins)
{
    if (ins->shape_stable)
        fr->shape_at[ins - fr->prog->code] = fr->shape_epoch;
}

/* A multi-output instruction: every output gets a buffer (unwanted ones a
 * scratch buffer, when the kernel needs one: it decides, getting NULL),
 * then the kernel fills them in one pass. */
static tgl_status run_multi(tgl_ctx *ctx, tgl_frame *fr, const tgl_instr *ins, tgl_array **in)
{
    const tgl_node *n = ins->node;
    const tgl_opimpl *impl = ins->impl;
    tgl_array *stackout[8] = {NULL};
    tgl_array **outs = ins->nouts <= 8 ? stackout : calloc((size_t)ins->nouts, sizeof *outs);
    if (!outs)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", tgl_op_name(n->op));
    tgl_status st = TGL_OK;
    for (int k = 0; k < ins->nouts && !st; k++) {
        outs[k] = NULL;
        if (ins->outs[k] < 0)
            continue;
        int64_t shape[TGL_MAX_DIMS];
        tgl_type t = n->nout > 1 ? impl->out_type(n, k) : n->type;
        st = out_shape(ctx, fr, ins, in, k, t.ndim, shape);
        if (!st)
            st = take_buffer(ctx, fr, ins, k == 0 ? ins->inplace : -1, &fr->slot[ins->outs[k]],
                             t.dtype, t.ndim, shape);
        if (!st)
            outs[k] = fr->slot[ins->outs[k]];
    }
    if (!st) {
        shapes_done(fr, ins);
        bool debug = fr->prog->mode == TGL_MODE_DEBUG;
        st = n->op == TGL_OP_FUSED
                 ? tgl_fused_kernel_cached(ctx, n, in, outs, debug,
                                           &fr->launch_cache[ins - fr->prog->code])
                 : ins->kern->run_n(ctx, n, in, outs, debug);
    }
    for (int k = 0; k < ins->nouts && !st && fr->prog->linker == TGL_LINKER_VM; k++)
        if (outs[k])
            st = check_result(ctx, n, in, outs[k], n->nout > 1 ? impl->out_type(n, k) : n->type);
    if (outs != stackout)
        free(outs);
    return st;
}

tgl_status tgl_cvm_run_op(tgl_ctx *ctx, tgl_frame *fr, const tgl_instr *ins)
{
    const tgl_node *n = ins->node;
    const tgl_opimpl *impl = ins->impl;
    tgl_array *args[16];
    tgl_array **in = ins->nin <= 16 ? args : malloc(sizeof *in * (size_t)ins->nin);
    if (!in)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", tgl_op_name(n->op));
    for (int i = 0; i < ins->nin; i++)
        in[i] = fr->slot[ins->in[i]];
    tgl_status st;
    tgl_array **dst = &fr->slot[ins->out];
    if (ins->sub) {
        /* An op with a body (scan) writes its output slots itself. */
        st = impl->exec_inner(ctx, fr, ins, &fr->sub[ins - fr->prog->code], in);
    } else if (impl->shape_k) {
        st = run_multi(ctx, fr, ins, in);
    } else if (impl->view) {
        tgl_array *v = NULL;
        st = impl->view(ctx, n, in, &v);
        if (!st) {
            tgl_frame_recycle(fr, *dst);
            *dst = v;
        }
    } else {
        int64_t shape[TGL_MAX_DIMS];
        st = out_shape(ctx, fr, ins, in, 0, n->type.ndim, shape);
        if (!st) {
            shapes_done(fr, ins);
            st = take_buffer(ctx, fr, ins, ins->inplace, dst, n->type.dtype, n->type.ndim, shape);
        }
        if (!st)
            st = ins->kern->run(ctx, n, in, *dst);
    }
    if (!st && ins->inplace >= 0 && fr->slot[ins->in[ins->inplace]] == fr->slot[ins->out]) {
        /* The input's slot gave its buffer away: it is not read again. */
        tgl_array_release(fr->slot[ins->in[ins->inplace]]);
        fr->slot[ins->in[ins->inplace]] = NULL;
    }
    if (!st && fr->prog->linker == TGL_LINKER_VM && !impl->shape_k)
        st = check_result(ctx, n, in, *dst, n->type);
    if (in != args)
        free(in);
    return st;
}

tgl_status tgl_cvm_check_deferred(tgl_ctx *ctx, tgl_frame *fr)
{
    const tgl_program *prog = fr->prog;
    if (tgl_ctx_interrupted(ctx))
        return tgl_ctx_set_error(ctx, TGL_EINTERRUPT, "%s: interrupted", prog->name);
    for (int32_t pc = prog->defer_start; pc < prog->ncode; pc++) {
        const tgl_instr *ins = &prog->code[pc];
        tgl_array *args[16];
        /* Every deferred op is planned with one output (plan.c); a fused
         * kernel's shape comes from its shape_k, through the same cache. */
        if (ins->nin > 16 || ins->impl->view || (!ins->impl->shape && !ins->impl->shape_k))
            continue;
        for (int i = 0; i < ins->nin; i++)
            args[i] = fr->slot[ins->in[i]];
        int64_t shape[TGL_MAX_DIMS];
        tgl_status st = out_shape(ctx, fr, ins, args, 0, ins->node->type.ndim, shape);
        if (st)
            return st;
        shapes_done(fr, ins);
    }
    return TGL_OK;
}

tgl_status tgl_cvm_run(tgl_ctx *ctx, tgl_frame *fr, int32_t from, int32_t to)
{
    const tgl_program *prog = fr->prog;
    const tgl_instr *code = prog->code;
    int32_t pc = from, end = to;
    const bool profile = prog->profile;
    const bool gc = prog->linker != TGL_LINKER_VM;
    tgl_array **slot = fr->slot;
    while (pc < end) {
        const tgl_instr *ins = &code[pc];
        int32_t next = pc + 1;
        switch (ins->kind) {
        case TGL_I_OP: {
            if (ins->once && fr->once_done)
                break; /* loop-invariant: its result is still in its slot */
            if (tgl_ctx_interrupted(ctx))
                return tgl_ctx_set_error(ctx, TGL_EINTERRUPT, "%s: interrupted",
                                         tgl_op_name(ins->node->op));
            uint64_t t0 = profile ? tgl_now_ns() : 0;
            tgl_status st = tgl_cvm_run_op(ctx, fr, ins);
            if (st)
                return st;
            if (profile) {
                fr->ins_ns[pc] += tgl_now_ns() - t0;
                fr->ins_calls[pc]++;
            }
            break;
        }
        case TGL_I_JUMPZ: {
            const tgl_array *c = slot[ins->in[0]];
            double v;
            if (c->device == TGL_DEVICE_CPU) {
                v = tgl_load_as_double(c->dtype_id, c->data, 0);
            } else {
                tgl_status st = tgl_array_scalar(ctx, c, &v);
                if (st)
                    return st;
            }
            if (v == 0)
                next = ins->target;
            break;
        }
        case TGL_I_JUMP:
            next = ins->target;
            break;
        case TGL_I_MOVE: {
            tgl_array *v = slot[ins->in[0]];
            tgl_array_retain(v);
            tgl_array_release(slot[ins->out]);
            slot[ins->out] = v;
            break;
        }
        default:
            return tgl_ctx_set_error(ctx, TGL_EINTERNAL, "cvm: bad instruction %d at %d",
                                     ins->kind, pc);
        }
        if (gc)
            for (int k = 0; k < ins->nfree; k++) {
                tgl_frame_recycle(fr, slot[ins->free_slots[k]]);
                slot[ins->free_slots[k]] = NULL;
            }
        pc = next;
    }
    return TGL_OK;
}
