/*
 * step.c — the whole-step plan: a straight-line program bound once to
 * fixed buffers for one set of input and shared shapes, then run call
 * after call as a flat list of kernel calls.
 *
 * The CVM (cvm.c) decides everything per instruction per call: the output
 * shape (or the shape cache), a buffer (pool, in place, new), a view
 * descriptor for every dimshuffle, releases after the last reader.  Once
 * a frame has run its program twice on the same shapes (the shape epoch
 * of cvm.c did not move) none of that can change, so the frame binds a
 * step (struct tgl_step):
 *
 *   fixed   every intermediate gets its own buffer for the life of the
 *           step, held in its slot between calls; a view of a fixed
 *           buffer is made once and stays in its slot.  A fixed
 *           instruction runs as `kernel(in, out)` on what its slots hold.
 *   dynamic what must be fresh or follows the caller's arrays runs as the
 *           CVM runs it (cvm.c's tgl_cvm_run_op): outputs of the call and
 *           new values of updates (the caller may keep them), views of
 *           inputs and shared variables, views with index inputs, the
 *           deferred in-place updates, and the instructions whose results
 *           a dynamic view hands out.
 *   view    a view of a caller's array that only the step reads keeps the
 *           last view it made, reused while its base is the same array with
 *           the same data and layout (a shared variable's value).
 *
 * The kernels, their inputs and their order are the CVM's, so results are
 * bit-identical (spec/whole_step_spec.lua).  A new shape epoch drops the
 * step (the CVM runs, and binds again two calls later).  Programs with
 * lazy branches, loops (scan) or instructions whose shapes are not
 * shape-stable (plan.c) never bind; nor does the vm linker (cvm and
 * cvm_nogc do: a bound step keeps its intermediates, as cvm_nogc does), or a step
 * whose fixed buffers would pass TGL_STEP_MAX_BYTES (its memory is the sum
 * of the intermediates, not their peak).
 *
 * A scan body's frame (src/scan) binds too, for the steps of one run of
 * the loop (scan starts a shape epoch per run): its outputs are copied out
 * by the loop after every step, so they get fixed buffers as well, and its
 * loop-invariant (`once`) instructions are left out, their results kept
 * from step 1.  The `whole_step` setting turns it
 * off (config.c).
 */
#include "engine/program.h"
#include "engine/backend.h"
#include "engine/fprog.h"

#include <stdlib.h>
#include <string.h>

/* The most the fixed buffers of one step may hold. */
#define TGL_STEP_MAX_BYTES ((int64_t)64 << 20)

enum { STEP_FIXED, STEP_DYNAMIC, STEP_VIEW };

/* A view of a caller's array (STEP_VIEW): the last base it was made from
 * (held, so its address cannot come back as another array) and the view;
 * reused while the base is the same array with the same data and layout,
 * as a shared variable's value is from call to call. */
typedef struct tgl_step_op {
    int32_t pc;
    int32_t mode;            /* STEP_FIXED, STEP_DYNAMIC or STEP_VIEW        */
    tgl_array *base, *view;  /* STEP_VIEW: the cached pair, or NULL          */
    void *base_data;
    int64_t base_shape[TGL_MAX_DIMS], base_strides[TGL_MAX_DIMS];
} tgl_step_op;

struct tgl_step {
    uint64_t epoch;          /* the shape epoch it was bound for            */
    tgl_step_op *op;         /* instructions to run, in program order       */
    int32_t nop;
    int32_t *fixed_slot;     /* slots holding a fixed array (one reference) */
    int32_t nfixed;
    int32_t *dyn_slot;       /* temporaries released after each call        */
    int32_t ndyn;
    int64_t bytes;           /* of the fixed buffers                        */
};

void tgl_step_free(tgl_frame *fr)
{
    tgl_step *s = fr->step;
    if (!s)
        return;
    for (int32_t i = 0; i < s->nfixed; i++) {
        /* two references each: the slot's and the step's (so the CVM's
         * in-place rule never takes a fixed buffer away from its slot) */
        tgl_array_release(fr->slot[s->fixed_slot[i]]);
        tgl_array_release(fr->slot[s->fixed_slot[i]]);
        fr->slot[s->fixed_slot[i]] = NULL;
    }
    for (int32_t i = 0; i < s->nop; i++) {
        tgl_array_release(s->op[i].base);
        tgl_array_release(s->op[i].view);
    }
    free(s->op);
    free(s->fixed_slot);
    free(s->dyn_slot);
    free(s);
    fr->step = NULL;
}

/* Whether prog can run as a step at all: straight-line instructions with
 * no body, no lazy branch, every shape shape-stable. */
static bool eligible(const tgl_program *prog, bool inner)
{
    if (prog->linker == TGL_LINKER_VM || prog->ncode == 0 || prog->nsub)
        return false;
    for (int32_t pc = 0; pc < prog->ncode; pc++) {
        const tgl_instr *ins = &prog->code[pc];
        if (ins->kind != TGL_I_OP || ins->region || (ins->once && !inner) || !ins->shape_stable ||
            ins->sub)
            return false;
        if (!ins->impl->view && !ins->impl->kernel && !ins->impl->kernel_n)
            return false;
    }
    return true;
}

/* An array of the given type for a fixed slot: a pooled buffer, else a new one. */
static tgl_status fixed_buffer(tgl_ctx *ctx, tgl_frame *fr, const tgl_instr *ins, int dtype,
                               int ndim, const int64_t *shape, tgl_array **out)
{
    *out = tgl_frame_take_pooled(fr, dtype, ndim, shape);
    if (*out)
        return TGL_OK;
    return tgl_array_alloc(ctx, tgl_op_name(ins->node->op), dtype, ndim, shape, false, out);
}

static bool can_share(const tgl_array *a, int dtype, int ndim, const int64_t *shape)
{
    if (!a || a->dtype_id != dtype || a->ndim != ndim || !(a->flags & TGL_ARRAY_CONTIGUOUS) ||
        a->data != a->storage->base || a->storage->refcount != 1)
        return false;
    for (int d = 0; d < ndim; d++)
        if (a->shape[d] != shape[d])
            return false;
    return true;
}

/* Binds fr's program for the current shape epoch.  Called after a call in
 * this epoch ran completely on the CVM (so every shape is in the cache).
 * Leaves fr->step NULL when the program cannot bind; fails only when out
 * of memory. */
static tgl_status bind(tgl_ctx *ctx, tgl_frame *fr, bool inner)
{
    const tgl_program *prog = fr->prog;
    int32_t ns = prog->nslots;
    uint8_t *dyn = calloc((size_t)ns + 1, 1);      /* must be dynamic      */
    uint8_t *isfix = calloc((size_t)ns + 1, 1);    /* holds a fixed array  */
    tgl_step *s = calloc(1, sizeof *s);
    if (s) {
        s->op = malloc(sizeof *s->op * (size_t)prog->ncode);
        s->fixed_slot = malloc(sizeof *s->fixed_slot * ((size_t)ns + 1));
        s->dyn_slot = malloc(sizeof *s->dyn_slot * ((size_t)ns + 1));
    }
    fr->step = s;
    if (!dyn || !isfix || !s || !s->op || !s->fixed_slot || !s->dyn_slot) {
        free(dyn);
        free(isfix);
        tgl_step_free(fr);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", prog->name);
    }
    s->epoch = fr->shape_epoch;
    /* What the caller gets (outputs, new values) must be fresh each call,
     * and so must whatever a view of it hands out. */
    for (int i = 0; i < prog->nout && !inner; i++)
        dyn[prog->out_slot[i]] = 1;
    for (int k = 0; k < prog->nupd; k++)
        dyn[prog->upd_slot[k]] = 1;
    for (int32_t pc = prog->defer_start; pc < prog->ncode; pc++)
        dyn[prog->code[pc].out] = 1;
    for (int32_t pc = prog->ncode - 1; pc >= 0; pc--) {
        const tgl_instr *ins = &prog->code[pc];
        if (ins->impl->view && dyn[ins->out] && ins->nin > 0)
            dyn[ins->in[0]] = 1;
    }
    tgl_status st = TGL_OK;
    bool ok = true;
    for (int32_t pc = 0; pc < prog->ncode && ok && !st; pc++) {
        const tgl_instr *ins = &prog->code[pc];
        const tgl_node *n = ins->node;
        if (ins->once)
            continue; /* a scan body's loop-invariant work: ran at step 1, kept */
        bool fixed = true;
        for (int k = 0; k < ins->nouts; k++)
            if (ins->outs[k] >= 0 && dyn[ins->outs[k]])
                fixed = false;
        if (ins->impl->view) {
            /* A view of a fixed buffer, with no index inputs: made once. */
            fixed = fixed && ins->nin == 1 && isfix[ins->in[0]];
            if (fixed) {
                tgl_array *base = fr->slot[ins->in[0]], *v = NULL;
                st = ins->impl->view(ctx, n, &base, &v);
                if (st)
                    break;
                if (v->storage != base->storage) {
                    tgl_array_release(v); /* it copied: not a view */
                    fixed = false;
                } else {
                    tgl_array_retain(v);
                    tgl_array_release(fr->slot[ins->out]); /* cvm_nogc, a scan body */
                    fr->slot[ins->out] = v;
                    isfix[ins->out] = 1;
                    s->fixed_slot[s->nfixed++] = ins->out;
                    continue; /* nothing to run */
                }
            }
        } else if (fixed) {
            if (fr->shape_at[pc] != fr->shape_epoch) {
                ok = false; /* the last call did not get this far */
                break;
            }
            for (int k = 0; k < ins->nouts && !st; k++) {
                int32_t o = ins->outs[k];
                if (o < 0)
                    continue;
                tgl_type t = n->nout > 1 ? ins->impl->out_type(n, k) : n->type;
                const int64_t *shape = fr->shape_cache + fr->shape_off[pc] + k * TGL_MAX_DIMS;
                tgl_array *a = NULL;
                if (k == 0 && ins->inplace >= 0 && isfix[ins->in[ins->inplace]] &&
                    can_share(fr->slot[ins->in[ins->inplace]], t.dtype, t.ndim, shape)) {
                    /* In place, as the CVM would: the input is not read again. */
                    a = fr->slot[ins->in[ins->inplace]];
                    tgl_array_retain(a);
                    tgl_array_retain(a);
                } else {
                    st = fixed_buffer(ctx, fr, ins, t.dtype, t.ndim, shape, &a);
                    if (st)
                        break;
                    s->bytes += (int64_t)a->size * (int64_t)tgl_dtype_size(t.dtype);
                    tgl_array_retain(a);
                }
                tgl_array_release(fr->slot[o]);
                fr->slot[o] = a;
                isfix[o] = 1;
                s->fixed_slot[s->nfixed++] = o;
            }
        }
        if (st)
            break;
        /* A view of a caller's array that nobody outside sees: cached. */
        int mode = fixed                                              ? STEP_FIXED
                   : ins->impl->view && ins->nin == 1 && !dyn[ins->out] ? STEP_VIEW
                                                                      : STEP_DYNAMIC;
        s->op[s->nop++] = (tgl_step_op){.pc = pc, .mode = mode};
    }
    if (s->bytes > TGL_STEP_MAX_BYTES)
        ok = false;
    for (int32_t i = 0; i < prog->ntemp; i++)
        if (!isfix[prog->temp_slot[i]])
            s->dyn_slot[s->ndyn++] = prog->temp_slot[i];
    /* (a scan body's frame never calls tgl_step_release_temps: its
     * temporaries stay in their slots from step to step, as under the CVM's
     * plan the loop-invariant ones must) */
    free(dyn);
    free(isfix);
    if (st || !ok)
        tgl_step_free(fr);
    return st;
}

bool tgl_step_active(tgl_ctx *ctx, tgl_frame *fr, bool inner)
{
    if (fr->step && fr->step->epoch == fr->shape_epoch)
        return true;
    tgl_step_free(fr);
    if (!ctx->config.whole_step || fr->step_never)
        return false;
    if (fr->step_try != fr->shape_epoch) {
        /* The first call of an epoch runs on the CVM (filling the shape
         * cache); the next one binds. */
        fr->step_try = fr->shape_epoch;
        return false;
    }
    if (!eligible(fr->prog, inner)) {
        fr->step_never = true;
        return false;
    }
    if (bind(ctx, fr, inner)) {
        tgl_ctx_clear_error(ctx); /* out of memory: the CVM still runs */
        return false;
    }
    /* Not bound (too large): not again this epoch. */
    if (!fr->step)
        fr->step_try = 0;
    return fr->step != NULL;
}

/* A STEP_VIEW instruction: the cached view when its base is the same
 * array, with the same data and layout, else a new one (cached). */
static tgl_status cached_view(tgl_ctx *ctx, tgl_frame *fr, tgl_step_op *op, const tgl_instr *ins)
{
    tgl_array *base = fr->slot[ins->in[0]];
    tgl_array **dst = &fr->slot[ins->out];
    size_t nb = sizeof(int64_t) * (size_t)(base ? base->ndim : 0);
    if (!(op->view && base == op->base && base->data == op->base_data &&
          base->storage == op->view->storage &&
          !memcmp(base->shape, op->base_shape, nb) && !memcmp(base->strides, op->base_strides, nb))) {
        tgl_array *v = NULL;
        tgl_status st = ins->impl->view(ctx, ins->node, &base, &v);
        if (st)
            return st;
        tgl_array_release(op->view);
        tgl_array_release(op->base);
        tgl_array_retain(base);
        op->view = v;
        op->base = base;
        op->base_data = base->data;
        memcpy(op->base_shape, base->shape, nb);
        memcpy(op->base_strides, base->strides, nb);
    }
    tgl_array_retain(op->view);
    tgl_frame_recycle(fr, *dst);
    *dst = op->view;
    return TGL_OK;
}

tgl_status tgl_step_run(tgl_ctx *ctx, tgl_frame *fr, int32_t from, int32_t to)
{
    const tgl_program *prog = fr->prog;
    const tgl_step *s = fr->step;
    const tgl_instr *code = prog->code;
    tgl_array **slot = fr->slot;
    const bool profile = prog->profile;
    if (tgl_ctx_interrupted(ctx))
        return tgl_ctx_set_error(ctx, TGL_EINTERRUPT, "%s: interrupted", prog->name);
    for (int32_t i = 0; i < s->nop; i++) {
        int32_t pc = s->op[i].pc;
        if (pc < from)
            continue;
        if (pc >= to)
            break;
        const tgl_instr *ins = &code[pc];
        uint64_t t0 = profile ? tgl_now_ns() : 0;
        tgl_status st;
        if (s->op[i].mode == STEP_DYNAMIC) {
            st = tgl_cvm_run_op(ctx, fr, ins);
        } else if (s->op[i].mode == STEP_VIEW) {
            st = cached_view(ctx, fr, &s->op[i], ins);
        } else {
            tgl_array *args[16];
            tgl_array **in = ins->nin <= 16 ? args : malloc(sizeof *in * (size_t)ins->nin);
            if (!in)
                return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", prog->name);
            for (int k = 0; k < ins->nin; k++)
                in[k] = slot[ins->in[k]];
            if (ins->impl->kernel_n) {
                tgl_array *outs[8];
                tgl_array **o = ins->nouts <= 8 ? outs : malloc(sizeof *o * (size_t)ins->nouts);
                if (!o)
                    st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", prog->name);
                else {
                    for (int k = 0; k < ins->nouts; k++)
                        o[k] = ins->outs[k] >= 0 ? slot[ins->outs[k]] : NULL;
                    bool debug = prog->mode == TGL_MODE_DEBUG;
                    st = ins->node->op == TGL_OP_FUSED
                             ? tgl_fused_kernel_cached(ctx, ins->node, in, o, debug,
                                                       &fr->launch_cache[pc])
                             : ins->impl->kernel_n(ctx, ins->node, in, o, debug);
                    if (o != outs)
                        free(o);
                }
            } else {
                st = ins->impl->kernel(ctx, ins->node, in, slot[ins->out]);
            }
            if (in != args)
                free(in);
        }
        if (st)
            return st;
        if (profile) {
            fr->ins_ns[pc] += tgl_now_ns() - t0;
            fr->ins_calls[pc]++;
        }
    }
    return TGL_OK;
}

void tgl_step_release_temps(tgl_frame *fr)
{
    const tgl_step *s = fr->step;
    for (int32_t i = 0; i < s->ndyn; i++) {
        int32_t k = s->dyn_slot[i];
        tgl_frame_recycle(fr, fr->slot[k]);
        fr->slot[k] = NULL;
    }
}

int tgl_function_whole_step(const tgl_function *fn, int64_t *fixed_bytes, int *fixed,
                            int *dynamic)
{
    const tgl_step *s = fn && fn->frame ? fn->frame->step : NULL;
    if (!s || s->epoch != fn->frame->shape_epoch)
        return 0;
    int nf = 0, nd = 0;
    for (int32_t i = 0; i < s->nop; i++)
        if (s->op[i].mode == STEP_FIXED)
            nf++;
        else
            nd++;
    if (fixed_bytes)
        *fixed_bytes = s->bytes;
    if (fixed)
        *fixed = nf;
    if (dynamic)
        *dynamic = nd;
    return 1;
}
