/*
 * call.c — running compiled functions: frames, calls, outputs, updates.
 *
 * A call checks and binds the inputs, reads the shared variables, runs
 * the program on a frame (cvm.c), hands out the outputs, and only then
 * applies the updates, all together: every update sees the old values,
 * and a failed call changes nothing.  A shared variable keeps its storage
 * across updates: the new value is written into the variable's buffer
 * (in place by the program itself for the deferred updates of plan.c,
 * else copied in at the end), so arrays the user borrowed see it.  Only a
 * new shape replaces the storage.
 *
 * Outputs never share memory with inputs, constants, shared variables or
 * each other: whatever the caller does with an output cannot change the
 * function's state, and vice versa.
 *
 * A frame runs one call at a time.  Every entry that reads or writes a
 * frame's registers takes its `busy` flag with an atomic exchange; a
 * thread that finds it taken gets TGL_EBUSY before touching anything, so
 * two threads sharing a frame get an error, never a corrupted run.
 */
#include "engine/program.h"
#include "engine/fused_prog.h"
#include "engine/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- frames ---------------------------------------------------------- */

/* Takes fr for one call: false when another thread holds it.  Acquire
 * and release order the last holder's writes to the frame before ours. */
static bool frame_enter(tgl_frame *fr)
{
    return __atomic_exchange_n(&fr->busy, 1, __ATOMIC_ACQUIRE) == 0;
}

static void frame_leave(tgl_frame *fr)
{
    __atomic_store_n(&fr->busy, 0, __ATOMIC_RELEASE);
}

static tgl_status frame_busy(tgl_ctx *ctx, const tgl_program *prog, const char *what)
{
    return tgl_ctx_set_error(ctx, TGL_EBUSY,
                             "%s: %s: the frame is in use by another thread (a frame runs one "
                             "call at a time: give each thread its own, tgl_function_frame_new)",
                             what, prog->name);
}

tgl_status tgl_frame_new(tgl_ctx *ctx, const tgl_program *prog, tgl_frame **out)
{
    tgl_frame *fr = calloc(1, sizeof *fr);
    if (!fr)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", prog->name);
    fr->prog = prog;
    fr->slot = calloc((size_t)prog->nslots + 1, sizeof *fr->slot);
    fr->last_out = calloc((size_t)prog->nout + 1, sizeof *fr->last_out);
    fr->newval = calloc((size_t)prog->nupd + 1, sizeof *fr->newval);
    fr->seen = calloc((size_t)(prog->nupd + prog->nout) + 1, sizeof *fr->seen);
    if (prog->profile) {
        fr->ins_ns = calloc((size_t)prog->ncode + 1, sizeof *fr->ins_ns);
        fr->ins_calls = calloc((size_t)prog->ncode + 1, sizeof *fr->ins_calls);
    }
    if (prog->nsub)
        fr->sub = calloc((size_t)prog->ncode + 1, sizeof *fr->sub);
    /* The shape cache: TGL_MAX_DIMS sizes per output of each shape-stable
     * instruction. */
    fr->shape_off = malloc(sizeof *fr->shape_off * ((size_t)prog->ncode + 1));
    fr->shape_at = calloc((size_t)prog->ncode + 1, sizeof *fr->shape_at);
    fr->launch_cache = calloc((size_t)prog->ncode + 1, sizeof *fr->launch_cache);
    fr->guard = malloc(sizeof *fr->guard * ((size_t)(prog->nin + prog->nshared) *
                                                (TGL_MAX_DIMS + 1) + 1));
    size_t ncache = 0;
    for (int32_t pc = 0; fr->shape_off && pc < prog->ncode; pc++) {
        fr->shape_off[pc] = (int32_t)ncache;
        if (prog->code[pc].shape_stable)
            ncache += (size_t)prog->code[pc].nouts * TGL_MAX_DIMS;
    }
    fr->shape_cache = malloc(sizeof *fr->shape_cache * (ncache + 1));
    fr->shape_epoch = 1;
    if (!fr->slot || !fr->last_out || !fr->newval || !fr->seen || !fr->shape_off ||
        !fr->launch_cache ||
        !fr->shape_at || !fr->guard || !fr->shape_cache ||
        (prog->profile && (!fr->ins_ns || !fr->ins_calls)) || (prog->nsub && !fr->sub)) {
        tgl_frame_free(fr);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", prog->name);
    }
    for (int32_t s = 0; s < prog->nslots; s++)
        if (prog->slot_kind[s] == TGL_SLOT_CONSTANT) {
            /* constants are host arrays: a program on a device gets copies */
            tgl_status st = tgl_array_on_device(ctx, prog->name, prog->slot_node[s]->value,
                                                prog->device, &fr->slot[s]);
            if (st) {
                tgl_frame_free(fr);
                return st;
            }
        }
    *out = fr;
    return TGL_OK;
}

void tgl_frame_free(tgl_frame *fr)
{
    if (!fr)
        return;
    const tgl_program *prog = fr->prog;
    tgl_step_free(fr);
    if (fr->slot)
        for (int32_t s = 0; s < prog->nslots; s++)
            tgl_array_release(fr->slot[s]);
    if (fr->last_out)
        for (int i = 0; i < prog->nout; i++)
            tgl_array_release(fr->last_out[i]);
    for (int c = 0; c < TGL_POOL_CLASSES; c++) {
        for (int32_t i = 0; i < fr->pool[c].n; i++)
            tgl_array_release(fr->pool[c].a[i]);
        free(fr->pool[c].a);
    }
    if (fr->sub)
        for (int32_t pc = 0; pc < prog->ncode; pc++)
            tgl_frame_free(fr->sub[pc]);
    free(fr->sub);
    if (fr->launch_cache)
        for (int32_t pc = 0; pc < prog->ncode; pc++)
            if (fr->launch_cache[pc])
                tgl_backend_launch_cache_free(tgl_fused_prog_of(prog->code[pc].node), prog->device,
                                              fr->launch_cache[pc]);
    free(fr->launch_cache);
    free(fr->slot);
    free(fr->last_out);
    free(fr->newval);
    free(fr->seen);
    free(fr->ins_ns);
    free(fr->ins_calls);
    free(fr->shape_off);
    free(fr->shape_at);
    free(fr->guard);
    free(fr->shape_cache);
    free(fr);
}

/* ---- functions ------------------------------------------------------- */

tgl_status tgl_function_new(tgl_ctx *ctx, int nin, tgl_node *const *inputs, int nout,
                            tgl_node *const *outputs, int nupd, tgl_node *const *upd_vars,
                            tgl_node *const *upd_exprs, const tgl_compile_options *opt,
                            tgl_function **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(out, TGL_EINVAL, "tgl_function_new: out is NULL");
    tgl_function *fn = calloc(1, sizeof *fn);
    if (!fn)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
    tgl_status st = tgl_program_new(ctx, nin, inputs, nout, outputs, nupd, upd_vars, upd_exprs,
                                    opt, &fn->prog);
    if (!st)
        st = tgl_frame_new(ctx, fn->prog, &fn->frame);
    if (st) {
        tgl_function_free(fn);
        return st;
    }
    *out = fn;
    return TGL_OK;
}

void tgl_function_free(tgl_function *fn)
{
    if (!fn)
        return;
    tgl_frame_free(fn->frame);
    tgl_program_free(fn->prog);
    free(fn);
}

tgl_status tgl_function_frame_new(tgl_ctx *ctx, const tgl_function *fn, tgl_frame **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(fn && out, TGL_EINVAL, "tgl_function_frame_new: NULL argument");
    return tgl_frame_new(ctx, fn->prog, out);
}

int tgl_function_ninputs(const tgl_function *fn) { return fn->prog->nin; }
int tgl_function_noutputs(const tgl_function *fn) { return fn->prog->nout; }

tgl_node *tgl_function_root(const tgl_function *fn, int i)
{
    return i >= 0 && i < fn->prog->nout + fn->prog->nupd ? fn->prog->roots[i] : NULL;
}

int tgl_function_inplace(const tgl_function *fn, const tgl_node *n)
{
    const tgl_program *prog = fn->prog;
    int64_t pc = n ? tgl_node_map_geti(&prog->op_pc, n, -1) : -1;
    return pc >= 0 && prog->code[pc].inplace >= 0;
}

/* Waits for the background compiles of prog's fused kernels and of those
 * of its inner programs (a scan's body: its kernels are the function's
 * too, and its generated loop is made only from their final code). */
static void wait_kernels(const tgl_program *prog)
{
    for (int32_t pc = 0; pc < prog->ncode; pc++) {
        const tgl_instr *ins = &prog->code[pc];
        if (ins->kind == TGL_I_OP && ins->node->op == TGL_OP_FUSED)
            tgl_backend_wait(tgl_fused_prog_of(ins->node), prog->device);
        if (ins->sub)
            wait_kernels(ins->sub);
    }
}

tgl_status tgl_function_wait_compiled(tgl_ctx *ctx, tgl_function *fn)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(fn, TGL_EINVAL, "tgl_function_wait_compiled: NULL function");
    wait_kernels(fn->prog);
    /* The default frame's step, unless another thread is running a call
     * on it (then its step is that call's to change). */
    if (frame_enter(fn->frame)) {
        tgl_step_wait(fn->frame);
        frame_leave(fn->frame);
    }
    return TGL_OK;
}

/* ---- calling --------------------------------------------------------- */

static tgl_status check_input(tgl_ctx *ctx, const tgl_program *prog, int i, const tgl_array *a)
{
    const tgl_node *n = prog->slot_node[prog->in_slot[i]];
    char want[96], got[96], label[128];
    if (!a)
        return tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: input %d is missing", prog->name, i + 1);
    if (a->device != TGL_DEVICE_CPU && a->device != prog->device) {
        const char *dn = tgl_device_name(a->device);
        return tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: input %d is on device %s; the function "
                                 "runs on %s and takes cpu or %s arrays", prog->name, i + 1,
                                 dn ? dn : "(invalid)", prog->backend->name, prog->backend->name);
    }
    bool ok = a->dtype_id == n->type.dtype && a->ndim == n->type.ndim;
    for (int d = 0; ok && d < a->ndim; d++)
        ok = !tgl_type_bcast(n->type, d) || a->shape[d] == 1;
    if (!ok) {
        if (n->name)
            snprintf(label, sizeof label, "'%s'", n->name);
        else
            snprintf(label, sizeof label, "an unnamed input");
        return tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: input %d (%s) expects %s, got %s",
                                 prog->name, i + 1, label,
                                 tgl_type_str(n->type, want, sizeof want),
                                 tgl_array_str(a, got, sizeof got));
    }
    return TGL_OK;
}

/* Drops the slots that do not outlive a run: shared variables' values
 * always; intermediates under cvm (into the pool) but not cvm_nogc. */
static void release_temps(tgl_frame *fr, bool step)
{
    const tgl_program *prog = fr->prog;
    for (int32_t i = 0; i < prog->nshared; i++) {
        int32_t s = prog->shared_slot[i];
        tgl_array_release(fr->slot[s]);
        fr->slot[s] = NULL;
    }
    if (step) {
        tgl_step_release_temps(fr); /* the fixed buffers stay */
        return;
    }
    if (prog->linker == TGL_LINKER_CVM_NOGC)
        return;
    for (int32_t i = 0; i < prog->ntemp; i++) {
        int32_t s = prog->temp_slot[i];
        tgl_frame_recycle(fr, fr->slot[s]);
        fr->slot[s] = NULL;
    }
}

/* True when a shares storage with an array the function does not own (an
 * input, a constant, a shared variable's value) or with one of the first
 * `nother` arrays of other[]. */
static bool aliased(const tgl_frame *fr, const tgl_array *a, tgl_array *const *other, int nother)
{
    const tgl_program *prog = fr->prog;
    for (int32_t i = 0; i < prog->nforeign; i++) {
        const tgl_array *f = fr->slot[prog->foreign_slot[i]];
        if (f && f->storage == a->storage)
            return true;
    }
    for (int i = 0; i < nother; i++)
        if (other[i] && other[i]->storage == a->storage)
            return true;
    return false;
}

/* A new reference to a, or to a copy of it when it is aliased. */
static tgl_status own(tgl_ctx *ctx, const tgl_frame *fr, tgl_array *a, tgl_array *const *other,
                      int nother, tgl_array **out)
{
    if (!aliased(fr, a, other, nother)) {
        tgl_array_retain(a);
        *out = a;
        return TGL_OK;
    }
    return tgl_array_copy(ctx, a, a->dtype_id, out);
}

/* The new value of update k (not deferred) as the frame holds it: the
 * variable's own array (an identity update), or an array nobody else
 * shares. */
static tgl_status take_newval(tgl_ctx *ctx, tgl_frame *fr, int k)
{
    const tgl_program *prog = fr->prog;
    tgl_array *v = fr->slot[prog->upd_slot[k]];
    if (v == prog->upd_var[k]->value) {
        tgl_array_retain(v);
        fr->newval[k] = v;
        return TGL_OK;
    }
    return own(ctx, fr, v, fr->newval, k, &fr->newval[k]);
}

/* Writes update k's new value into the variable: into its storage when
 * the shape is unchanged (borrowed arrays stay live), else replacing it. */
static tgl_status commit_update(tgl_ctx *ctx, tgl_node *var, tgl_array *nv)
{
    tgl_array *old = var->value;
    if (nv == old)
        return TGL_OK;
    bool same = old && old->dtype_id == nv->dtype_id && old->ndim == nv->ndim &&
                memcmp(old->shape, nv->shape, sizeof *old->shape * (size_t)old->ndim) == 0;
    if (same)
        return tgl_array_assign(ctx, old, nv);
    tgl_array_retain(nv);
    tgl_array_release(old);
    var->value = nv;
    return TGL_OK;
}

/* One run on the bound inputs: program, outputs, then the updates. */
static tgl_status run_once(tgl_ctx *ctx, tgl_frame *fr)
{
    const tgl_program *prog = fr->prog;
    for (int32_t i = 0; i < prog->nshared; i++) {
        int32_t s = prog->shared_slot[i];
        tgl_array *v = prog->slot_node[s]->value;
        if (v->device == prog->device) {
            tgl_array_retain(v);
        } else {
            /* a variable made on another device: a copy for this run (its
             * update is written back into the variable's own storage) */
            tgl_status st = tgl_array_on_device(ctx, prog->name, v, prog->device, &v);
            if (st) {
                for (int32_t j = 0; j < i; j++) {
                    tgl_array_release(fr->slot[prog->shared_slot[j]]);
                    fr->slot[prog->shared_slot[j]] = NULL;
                }
                return st;
            }
        }
        tgl_array_release(fr->slot[s]);
        fr->slot[s] = v;
    }
    tgl_cvm_guard_shapes(fr, false);
    /* Last run's outputs go first, so their buffers can be reused (into
     * the pool, when the caller dropped them). */
    for (int i = 0; i < prog->nout; i++) {
        tgl_frame_recycle(fr, fr->last_out[i]);
        fr->last_out[i] = NULL;
    }
    for (int k = 0; k < prog->nupd; k++)
        fr->newval[k] = NULL;
    uint64_t t0 = prog->profile ? tgl_now_ns() : 0;
    /* The program but the deferred in-place updates (plan.c), which run
     * last: after the outputs and the other new values are taken (so none
     * of them sees a variable's new value), and after every shape they
     * need is known to fit (so a failure leaves the variables as they
     * were). */
    tgl_status st = tgl_step_exec(ctx, fr, 0, prog->defer_start, false);
    for (int k = 0; k < prog->nupd && !st; k++)
        if (!prog->upd_deferred[k])
            st = take_newval(ctx, fr, k);
    for (int i = 0; i < prog->nout && !st; i++) {
        int ns = 0;
        for (int k = 0; k < prog->nupd; k++)
            if (fr->newval[k])
                fr->seen[ns++] = fr->newval[k];
        for (int j = 0; j < i; j++)
            fr->seen[ns++] = fr->last_out[j];
        st = own(ctx, fr, fr->slot[prog->out_slot[i]], fr->seen, ns, &fr->last_out[i]);
    }
    if (!st && prog->defer_start < prog->ncode) {
        st = tgl_cvm_check_deferred(ctx, fr);
        /* The deferred updates write the variables in place: once the
         * first runs, a Ctrl-C waits for the last (else some variables
         * would be updated and others not). */
        if (!st) {
            tgl_ctx_hold_interrupts(ctx, 1);
            st = tgl_step_exec(ctx, fr, prog->defer_start, prog->ncode, false);
            tgl_ctx_hold_interrupts(ctx, -1);
        }
        for (int k = 0; k < prog->nupd && !st; k++)
            if (prog->upd_deferred[k])
                st = take_newval(ctx, fr, k);
    }
    if (st) {
        for (int k = 0; k < prog->nupd; k++) {
            tgl_array_release(fr->newval[k]);
            fr->newval[k] = NULL;
        }
        release_temps(fr, fr->step != NULL);
        return st;
    }
    /* Every update read the values of this run before any is written; a
     * new value never shares memory with a variable (own), so writing one
     * variable cannot change another's new value. */
    for (int k = 0; k < prog->nupd; k++) {
        tgl_status cst = commit_update(ctx, prog->upd_var[k], fr->newval[k]);
        if (cst && !st)
            st = cst; /* a copy between equal shapes cannot fail; kept honest */
        tgl_array_release(fr->newval[k]);
        fr->newval[k] = NULL;
    }
    /* A deferred update's slot holds the variable's own buffer: keeping it
     * (cvm_nogc) would make a third owner and stop the next in-place run. */
    for (int32_t pc = prog->defer_start; pc < prog->ncode; pc++) {
        tgl_array_release(fr->slot[prog->code[pc].out]);
        fr->slot[prog->code[pc].out] = NULL;
    }
    release_temps(fr, fr->step != NULL);
    if (prog->profile) {
        fr->total_ns += tgl_now_ns() - t0;
        fr->ncalls++;
    }
    return st;
}

static tgl_status call_locked(tgl_ctx *ctx, tgl_function *fn, tgl_frame *fr,
                              tgl_array *const *in, tgl_array **out)
{
    const tgl_program *prog = fn->prog;
    /* The type check costs a few ns per input and keeps kernels in
     * bounds, so trust_input (which skips the Lua-side conversions) does
     * not skip it. */
    for (int i = 0; i < prog->nin; i++) {
        tgl_status st = check_input(ctx, prog, i, in[i]);
        if (st)
            return st;
    }
    for (int i = 0; i < prog->nin; i++) {
        int32_t s = prog->in_slot[i];
        tgl_array *a = in[i];
        if (a->device == prog->device) {
            tgl_array_retain(a);
        } else {
            /* a host array, for a program on a device: copied there */
            tgl_status st = tgl_array_on_device(ctx, prog->name, in[i], prog->device, &a);
            if (st)
                return st;
        }
        tgl_array_release(fr->slot[s]);
        fr->slot[s] = a;
    }
    fr->have_inputs = true;
    tgl_status st = run_once(ctx, fr);
    if (st)
        return st;
    for (int i = 0; i < prog->nout; i++) {
        tgl_array_retain(fr->last_out[i]);
        out[i] = fr->last_out[i];
    }
    return TGL_OK;
}

static tgl_status call_on(tgl_ctx *ctx, tgl_function *fn, tgl_frame *fr, tgl_array *const *in,
                          tgl_array **out, const char *what)
{
    const tgl_program *prog = fn->prog;
    TGL_CHECK(fr->prog == prog, TGL_EINVAL, "%s: the frame belongs to another function",
              prog->name);
    if (!frame_enter(fr))
        return frame_busy(ctx, prog, what);
    tgl_status st = call_locked(ctx, fn, fr, in, out);
    frame_leave(fr);
    return st;
}

tgl_status tgl_function_call(tgl_ctx *ctx, tgl_function *fn, tgl_array *const *in,
                             tgl_array **out, int trust)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(fn && (fn->prog->nin == 0 || in) && (fn->prog->nout == 0 || out), TGL_EINVAL,
              "tgl_function_call: bad arguments");
    (void)trust;
    return call_on(ctx, fn, fn->frame, in, out, "tgl_function_call");
}

tgl_status tgl_function_call_frame(tgl_ctx *ctx, tgl_function *fn, tgl_frame *frame,
                                   tgl_array *const *in, tgl_array **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(fn && frame && (fn->prog->nin == 0 || in) && (fn->prog->nout == 0 || out),
              TGL_EINVAL, "tgl_function_call_frame: bad arguments");
    return call_on(ctx, fn, frame, in, out, "tgl_function_call_frame");
}

tgl_status tgl_function_run(tgl_ctx *ctx, tgl_function *fn, int64_t n_calls)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(fn, TGL_EINVAL, "tgl_function_run: NULL function");
    TGL_CHECK(n_calls >= 0, TGL_EINVAL, "tgl_function_run: n_calls is negative");
    if (!frame_enter(fn->frame))
        return frame_busy(ctx, fn->prog, "tgl_function_run");
    tgl_status st = TGL_OK;
    if (!fn->frame->have_inputs && fn->prog->nin != 0)
        st = tgl_ctx_set_error(ctx, TGL_EINVAL,
                               "%s: call it once with its inputs before running it n_calls times",
                               fn->prog->name);
    for (int64_t k = 0; k < n_calls && !st; k++)
        st = run_once(ctx, fn->frame);
    frame_leave(fn->frame);
    return st;
}

tgl_status tgl_function_output(tgl_ctx *ctx, tgl_function *fn, int i, tgl_array **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(fn && out && i >= 0 && i < fn->prog->nout, TGL_EINVAL,
              "tgl_function_output: no output %d", i + 1);
    if (!frame_enter(fn->frame))
        return frame_busy(ctx, fn->prog, "tgl_function_output");
    tgl_array *a = fn->frame->last_out[i];
    tgl_array_retain(a);
    frame_leave(fn->frame);
    TGL_CHECK(a, TGL_EINVAL, "tgl_function_output: the function has not run");
    *out = a;
    return TGL_OK;
}

void tgl_function_recycle(tgl_function *fn, tgl_array *a)
{
    if (!fn) {
        tgl_array_release(a);
        return;
    }
    /* tgl_frame_recycle keeps the buffer only when a and its storage have
     * this one owner, of the program's device, with the storage's own
     * layout; the pool's size stays bounded (cvm.c).  While another
     * thread runs a call on the default frame its pool is that call's:
     * the buffer is only released then. */
    if (!frame_enter(fn->frame)) {
        tgl_array_release(a);
        return;
    }
    tgl_frame_recycle(fn->frame, a);
    frame_leave(fn->frame);
}
