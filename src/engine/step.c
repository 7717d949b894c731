/*
 * step.c — the whole-step plan: a straight-line program bound once to
 * fixed buffers for one set of input and shared shapes, then run call
 * after call as a flat list of kernel calls.
 *
 * The CVM (cvm.c) decides everything per instruction per call: the output
 * shape (or the shape cache), a buffer (pool, in place, new), a view
 * descriptor for every dimshuffle, releases after the last reader.  On
 * the same input and shared shapes (the shape epoch of cvm.c did not move)
 * little of that can change, so the epoch's second call binds a step
 * (struct tgl_step) while it runs ("Binding" below):
 *
 *   fixed   every intermediate gets a buffer of its own for the life of
 *           the step, held in its slot between calls; a view of a fixed
 *           buffer is made once and stays in its slot.  A fixed
 *           instruction runs as `kernel(in, out)` on what its slots hold.
 *           Buffers whose lifetimes are disjoint share bytes of one arena
 *           ("Memory" below), so the step holds the peak of its
 *           intermediates, not their sum.
 *   dynamic what must be fresh or follows the caller's arrays runs as the
 *           CVM runs it (cvm.c's tgl_cvm_run_op): outputs of the call and
 *           new values of updates (the caller may keep them), views of
 *           inputs and shared variables, views with index inputs, the
 *           deferred in-place updates, the instructions whose results a
 *           dynamic view hands out, and those whose shapes follow from
 *           values (checked on every run).
 *   view    a view of a caller's array that only the step reads keeps the
 *           last view it made, reused while its base is the same array with
 *           the same data and layout (a shared variable's value).
 *
 * The kernels, their inputs and their order are the CVM's, so results are
 * bit-identical (spec/whole_step_spec.lua).  A new shape epoch drops the
 * step (the CVM runs, and binds again on the next call).  Programs with
 * lazy branches or loops (scan) never bind; nor does the vm linker (cvm
 * and cvm_nogc do: a bound step keeps its intermediates, as cvm_nogc
 * does), or a step whose planned arena would pass step_max_bytes().
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
#include "engine/fused_prog.h"
#include "engine/step_mem.h"
#include "engine/tune.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The most the arena of one step may hold: this core's L2 cache (the
 * tunable step.max_bytes, which tune.c derives from sysconf's L2: at
 * least 256 KiB, 1 MiB where the system does not say).  A bound step
 * keeps its intermediates in buffers of its own between calls, where the CVM's pool hands the same few buffers round;
 * past the cache that costs more in misses (measured when each
 * intermediate had its own buffer: -7% on a 784-500-10 MLP at batch 256,
 * 4 MiB) than the per-instruction work it saves, which only matters for
 * small steps.  What is budgeted is the arena (the planned peak), the
 * bytes the step's kernels actually touch.  The rule may be conservative:
 * with the arena, that MLP at batch 256 (arena 1.5 MB, 2.1 MB as separate
 * buffers) ran 10% faster bound than on the CVM when forced to bind (three
 * interleaved rounds on a 2-core AMD EPYC with a 512 KiB L2, under heavy
 * load: 4855/5398/4730 vs 4392/4328/4452 examples/s); one machine is no
 * ground for another constant, so the budget is for tune.c to measure. */
static int64_t step_max_bytes(int device)
{
    /* A device with memory of its own (a GPU) has no such cache to fit
     * in: what binding saves there is the host's work per instruction and,
     * on CUDA, the launches a captured graph replays.  Its budget is a
     * bound on the memory a step may keep between calls. */
    if (device != TGL_DEVICE_CPU)
        return (int64_t)1 << 30;
    return tgl_tune_get(TGL_TUNE_STEP_MAX_BYTES);
}

enum { STEP_FIXED, STEP_DYNAMIC, STEP_VIEW };

/* An operand's address and layout as a backend's replay recorded it
 * (TGL_STEP_CB_PIN). */
typedef struct step_pin {
    int32_t slot, ndim;
    const void *data;
    int64_t shape[TGL_MAX_DIMS], strides[TGL_MAX_DIMS];
} step_pin;

/* A view of a caller's array (STEP_VIEW): the last base it was made from
 * (held, so its address cannot come back as another array) and the view;
 * reused while the base is the same array with the same data and layout,
 * as a shared variable's value is from call to call. */
typedef struct tgl_step_op {
    int32_t pc;
    int32_t mode;            /* STEP_FIXED, STEP_DYNAMIC or STEP_VIEW        */
    struct step_pin *pin;    /* TGL_STEP_CB_PIN: its operands that are not
                                fixed buffers, as last pinned (NULL: none) */
    int32_t npin;
    int64_t *check;          /* an op whose shapes follow from values (a
                                slice with computed bounds): per output its
                                ndim and sizes when bound (NULL: none)      */
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
    int32_t *early_slot;     /* dynamic temporaries the deferred updates do
                                not read: released before those run, so no
                                view pins a variable updated in place      */
    int32_t nearly;
    int64_t bytes;           /* the arena the fixed buffers share (its
                                planned peak, "Memory" below)              */
    int64_t sum;             /* what they would hold with a buffer each
                                (their sizes rounded up to TGL_ALIGN)      */
    int32_t nfirst;          /* ops before the deferred updates             */
    int32_t stopped;         /* the op whose shapes changed (STEP_RESHAPED) */
    /* The generated whole-step function (see "Generated code" below). */
    int gen;                 /* GEN_WAIT, GEN_RECORD, GEN_MADE, GEN_NEVER   */
    int64_t runs;            /* full runs of the first part so far          */
    const tgl_backend *be;
    tgl_step_item *item;     /* per op of the first part                    */
    /* The operands of inlined kernels whose arrays are the caller's (an
     * input, a shared value, a dynamic view): their data pointers are read
     * into D before each run (the prep callback), while their layout is the
     * recorded one. */
    int32_t *caller_begin;   /* per op + 1: its range of caller             */
    struct caller_operand { int32_t d, slot, ndim; int64_t strides[TGL_MAX_DIMS]; } *caller;
    int32_t ncaller;
    int32_t *slot_d;         /* per slot: its D index, or -1                */
    void **D;                /* data pointers of the inlined kernels' operands */
    int32_t nD;
    tgl_array **scratch;     /* reductions' double accumulators             */
    int32_t nscratch;
    uint8_t *slot_fixed;     /* per slot: holds a fixed array               */
    tgl_kernel_ref *code;    /* the compiled function (tier 2 when ready)   */
    uint64_t *prof_t0;       /* profile: per op, when its inline kernel began */
};

enum { GEN_WAIT, GEN_RECORD, GEN_MADE, GEN_NEVER };
/* What the bound step returns when a checked op's shapes changed: not an
 * error (tgl_step_exec goes on on the CVM). */
#define STEP_RESHAPED ((tgl_status)0x7fff0001)
/* The step makes its function after this many full runs (every fused
 * kernel must also have its optimized code by then). */
#define GEN_AFTER 2

static void gen_free(tgl_step *s)
{
    if (s->code)
        s->be->step_free(s->code);
    s->code = NULL;
    for (int32_t i = 0; i < s->nscratch; i++)
        tgl_array_release(s->scratch[i]);
    free(s->scratch);
    free(s->item);
    free(s->caller_begin);
    free(s->caller);
    free(s->slot_d);
    free(s->D);
    free(s->prof_t0);
    s->scratch = NULL;
    s->item = NULL;
    s->caller_begin = NULL;
    s->caller = NULL;
    s->slot_d = NULL;
    s->D = NULL;
    s->prof_t0 = NULL;
    s->nscratch = s->ncaller = s->nD = 0;
}

/* Drops the binding; keep: the fixed arrays stay in their slots as the
 * CVM's own (one reference each: the call goes on on the CVM), else they
 * are released. */
static void step_drop(tgl_frame *fr, bool keep)
{
    tgl_step *s = fr->step;
    if (!s)
        return;
    for (int32_t i = 0; i < s->nfixed; i++) {
        /* two references each: the slot's and the step's (so the CVM's
         * in-place rule never takes a fixed buffer away from its slot) */
        tgl_array_release(fr->slot[s->fixed_slot[i]]);
        if (!keep) {
            tgl_array_release(fr->slot[s->fixed_slot[i]]);
            fr->slot[s->fixed_slot[i]] = NULL;
        }
    }
    for (int32_t i = 0; i < s->nop; i++) {
        tgl_array_release(s->op[i].base);
        tgl_array_release(s->op[i].view);
        free(s->op[i].check);
        free(s->op[i].pin);
    }
    gen_free(s);
    free(s->slot_fixed);
    free(s->op);
    free(s->fixed_slot);
    free(s->dyn_slot);
    free(s->early_slot);
    free(s);
    fr->step = NULL;
}

void tgl_step_free(tgl_frame *fr)
{
    step_drop(fr, false);
}

/* Whether prog can run as a step at all: straight-line instructions with
 * no body and no lazy branch. */
static bool eligible(const tgl_program *prog, bool inner)
{
    if (prog->linker == TGL_LINKER_VM || prog->ncode == 0 || prog->nsub)
        return false;
    for (int32_t pc = 0; pc < prog->ncode; pc++) {
        const tgl_instr *ins = &prog->code[pc];
        if (ins->kind != TGL_I_OP || ins->region || (ins->once && !inner) || ins->sub)
            return false;
        if (!ins->impl->view && !ins->kern && ins->node->op != TGL_OP_FUSED)
            return false;
    }
    return true;
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

/* Whether ins's outputs have the shapes recorded in c (per output: ndim,
 * then TGL_MAX_DIMS sizes); or records them, when record is set. */
static bool shapes_io(tgl_frame *fr, const tgl_instr *ins, int64_t *c, bool record)
{
    for (int k = 0; k < ins->nouts; k++, c += 1 + TGL_MAX_DIMS) {
        const tgl_array *a = ins->outs[k] >= 0 ? fr->slot[ins->outs[k]] : NULL;
        int nd = a ? a->ndim : -1;
        if (record) {
            c[0] = nd;
            if (a)
                memcpy(c + 1, a->shape, sizeof *c * (size_t)nd);
            continue;
        }
        if (c[0] != nd || (a && memcmp(c + 1, a->shape, sizeof *c * (size_t)nd) != 0))
            return false;
    }
    return true;
}

static bool same_shapes(tgl_frame *fr, const tgl_instr *ins, int64_t *c)
{
    return shapes_io(fr, ins, c, false);
}

/* Runs op i of the bound step. */
static tgl_status run_entry(tgl_ctx *ctx, tgl_frame *fr, tgl_step *s, int32_t i)
{
    const tgl_program *prog = fr->prog;
    int32_t pc = s->op[i].pc;
    const tgl_instr *ins = &prog->code[pc];
    tgl_array **slot = fr->slot;
    const bool profile = prog->profile;
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
        if (ins->impl->shape_k) {
            tgl_array *outs[8];
            tgl_array **o = ins->nouts <= 8 ? outs : malloc(sizeof *o * (size_t)ins->nouts);
            if (!o) {
                st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", prog->name);
            } else {
                for (int k = 0; k < ins->nouts; k++)
                    o[k] = ins->outs[k] >= 0 ? slot[ins->outs[k]] : NULL;
                bool debug = prog->mode == TGL_MODE_DEBUG;
                st = ins->node->op == TGL_OP_FUSED
                         ? tgl_fused_kernel_cached(ctx, ins->node, in, o, debug,
                                                   &fr->launch_cache[pc])
                         : ins->kern->run_n(ctx, ins->node, in, o, debug);
                if (o != outs)
                    free(o);
            }
        } else {
            st = ins->kern->run(ctx, ins->node, in, slot[ins->out]);
        }
        if (in != args)
            free(in);
    }
    if (!st && profile) {
        fr->ins_ns[pc] += tgl_now_ns() - t0;
        fr->ins_calls[pc]++;
    }
    if (!st && s->op[i].check && !same_shapes(fr, ins, s->op[i].check)) {
        s->stopped = i;
        return STEP_RESHAPED;
    }
    return st;
}

/* ---- Binding -----------------------------------------------------------------
 *
 * The epoch's second call binds while it runs (bind_run): each instruction
 * runs as the CVM runs it (no releases), then its results are frozen when
 * they can be fixed: a plain buffer only the slot holds becomes the slot's
 * fixed array, a view of a fixed array made from it alone stays.  What
 * must stay dynamic is decided first (outputs, update values, deferred
 * updates, the bases of views that become those).  An instruction whose
 * output shapes follow from its inputs' values rather than their shapes
 * (a slice with computed bounds: the minibatch `x[i*n:(i+1)*n]` of a
 * givens) stays dynamic, and its shapes are checked on every bound run: a
 * change (the last, shorter minibatch) drops the binding and the call goes
 * on on the CVM from the next instruction (the fixed arrays computed so
 * far stay valid for it). */

static tgl_status step_run(tgl_ctx *ctx, tgl_frame *fr, int32_t from, int32_t to);

/* Releases the dynamic temporaries the rest of the call does not need. */
static void release_early(tgl_frame *fr, const tgl_step *s)
{
    for (int32_t i = 0; i < s->nearly; i++) {
        tgl_frame_recycle(fr, fr->slot[s->early_slot[i]]);
        fr->slot[s->early_slot[i]] = NULL;
    }
}

/* ---- Memory ----------------------------------------------------------------
 *
 * Once the binding run has made every fixed buffer (each in a storage of
 * its own, as the CVM allocated it), their lifetimes are read off the
 * program and step_mem.c places them in one arena, sharing bytes where the
 * lifetimes are disjoint; the budget (step_max_bytes) is checked against
 * that arena, and each fixed array is then remade over its place in it.
 *
 * A buffer lives from the instruction that writes it to the last one that
 * may read it, in program order (the order every path runs: the bound ops,
 * the generated function, the CVM going on after a reshape): reading
 * through a view counts as reading the base (a view instruction's output
 * shares its first input's bytes, made once or each call, copied or not:
 * the plan takes the view), so a view keeps its base alive until the
 * view's last reader.  The deferred updates come last in that order, so a
 * buffer they read lives until they have run.  What leaves the step lives
 * to its end: a scan body's outputs (the loop copies them out after the
 * step), and any output or update value that would be a view of a fixed
 * buffer.  An instruction's outputs never share bytes with its inputs
 * (the intervals meet at it).
 *
 * Sharing is per dtype: buffers of one dtype share bytes, two of different
 * dtypes never do (one arena, each region aligned and padded to TGL_ALIGN,
 * 64 bytes: the alignment and the whole lines a buffer of its own would
 * have).  A region is only written by its buffer's writer after the last
 * read of whatever held those bytes before, in an earlier instruction; as
 * separate kernel calls that would be safe across dtypes too (the CVM's
 * pool hands a float buffer to an int64 result from call to call), but the
 * generated function inlines small kernels with constant geometry into one
 * C function compiled with strict aliasing: a store of a double there may
 * be moved above a load of a float from an earlier kernel, since the
 * compiler assumes the two types never alias.  Within one dtype it must
 * keep their order.  A training step's large buffers share one dtype, so
 * little is lost (the int64 labels and double accumulators are small).
 *
 * Nothing else writes the arena: a dynamic instruction takes its buffer
 * through the CVM, which never takes a fixed array (two references) in
 * place; after a drop (keep), the CVM's in-place rule and pool only take an
 * array whose storage has no other owner, which an arena shared by two
 * arrays never is. */

typedef struct mem_plan {
    int32_t n;               /* buffers (fixed, plain, not empty)           */
    tgl_step_buf *buf;
    int32_t *root;           /* per slot: the buffer its array may share
                                bytes with, or -1                          */
    int64_t peak;
} mem_plan;

static void mem_plan_free(mem_plan *m)
{
    free(m->buf);
    free(m->root);
}

/* A fixed buffer's storage and its index in the plan, sorted by storage. */
typedef struct stor_ref {
    const tgl_storage *storage;
    int32_t r;
} stor_ref;

static int by_storage(const void *pa, const void *pb)
{
    uintptr_t a = (uintptr_t)((const stor_ref *)pa)->storage, b = (uintptr_t)((const stor_ref *)pb)->storage;
    return a < b ? -1 : a > b;
}

/* The first of the n sorted entries whose storage is st, or n. */
static int32_t stor_first(const stor_ref *v, int32_t n, const tgl_storage *st)
{
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)v[mid].storage < (uintptr_t)st)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Plans the arena of the fixed buffers: def[slot] is the instruction that
 * wrote a plain fixed buffer, -1 elsewhere.  False: out of memory, or a
 * program the analysis does not cover (a slot written twice); the buffers
 * then keep a storage each. */
static bool mem_plan_make(const tgl_frame *fr, const tgl_step *s, const int32_t *def, mem_plan *m)
{
    const tgl_program *prog = fr->prog;
    int32_t ns = prog->nslots;
    *m = (mem_plan){0};
    m->buf = malloc(sizeof *m->buf * ((size_t)s->nfixed + 1));
    m->root = malloc(sizeof *m->root * ((size_t)ns + 1));
    uint8_t *seen = calloc((size_t)ns + 1, 1);
    const tgl_storage **stor = malloc(sizeof *stor * ((size_t)s->nfixed + 1));
    bool ok = m->buf && m->root && seen && stor;
    for (int32_t k = 0; ok && k < ns; k++)
        m->root[k] = -1;
    for (int32_t i = 0; ok && i < s->nfixed; i++) {
        int32_t sl = s->fixed_slot[i];
        const tgl_array *a = fr->slot[sl];
        if (def[sl] < 0 || a->storage->nbytes == 0)
            continue;
        m->root[sl] = m->n;
        stor[m->n] = a->storage;
        m->buf[m->n++] = (tgl_step_buf){.size = (int64_t)a->storage->nbytes,
                                        .first = def[sl], .last = def[sl], .kind = a->dtype_id};
    }
    if (m->n > TGL_STEP_MEM_PLAN_MAX)
        ok = false; /* not planned (step_mem.h): spare the analysis below */
    for (int32_t pc = 0; ok && pc < prog->ncode; pc++) {
        const tgl_instr *ins = &prog->code[pc];
        for (int k = 0; k < ins->nin; k++) {
            int32_t r = m->root[ins->in[k]];
            if (r >= 0 && m->buf[r].last < pc)
                m->buf[r].last = pc;
        }
        for (int k = 0; k < ins->nouts; k++) {
            int32_t o = ins->outs[k];
            if (o < 0)
                continue;
            if (seen[o])
                ok = false; /* a slot with two writers: its root would be ambiguous */
            seen[o] = 1;
            if (ins->impl->view && ins->nin > 0 && m->root[o] < 0)
                m->root[o] = m->root[ins->in[0]];
        }
    }
    /* An array sharing a buffer's storage that no view instruction
     * explains (none is known): that buffer is never shared.  The buffers'
     * storages sorted, each slot looks its storage up (checking every slot
     * against every buffer kept deep_spec's 10^5-link chain running for
     * more than 14 minutes under ASan, until CI's run was stopped). */
    stor_ref *byst = ok ? malloc(sizeof *byst * ((size_t)m->n + 1)) : NULL;
    ok = ok && byst;
    for (int32_t r = 0; ok && r < m->n; r++)
        byst[r] = (stor_ref){.storage = stor[r], .r = r};
    if (ok)
        qsort(byst, (size_t)m->n, sizeof *byst, by_storage);
    for (int32_t k = 0; ok && k < ns; k++) {
        const tgl_array *a = fr->slot[k];
        if (!a)
            continue;
        for (int32_t r = stor_first(byst, m->n, a->storage); r < m->n && byst[r].storage == a->storage; r++)
            if (m->root[k] != byst[r].r)
                m->buf[byst[r].r].first = 0, m->buf[byst[r].r].last = prog->ncode;
    }
    free(byst);
    for (int i = 0; ok && i < prog->nout; i++)
        if (m->root[prog->out_slot[i]] >= 0)
            m->buf[m->root[prog->out_slot[i]]].last = prog->ncode;
    for (int k = 0; ok && k < prog->nupd; k++)
        if (m->root[prog->upd_slot[k]] >= 0)
            m->buf[m->root[prog->upd_slot[k]]].last = prog->ncode;
    free(seen);
    free(stor);
    if (ok)
        m->peak = tgl_step_mem_plan(m->buf, m->n, TGL_ALIGN);

    if (!ok || m->peak < 0) {
        mem_plan_free(m);
        return false;
    }
    return true;
}

/* A new descriptor like `like` (a fixed buffer, or a view of one) over the
 * arena, its buffer placed at off. */
static tgl_status arena_array(tgl_ctx *ctx, tgl_array *arena, int64_t off, const tgl_array *like,
                              tgl_array **out)
{
    int64_t n = (int64_t)like->storage->nbytes, one = 1;
    tgl_status st = tgl_array_view(ctx, arena, 1, &n, &one, off, out);
    if (st)
        return st;
    tgl_array *v = *out;
    tgl_storage *storage = v->storage;
    char *data = (char *)v->data + ((const char *)like->data - (const char *)like->storage->base);
    *v = *like;
    v->refcount = 1;
    v->storage = storage;
    v->data = data;
    return TGL_OK;
}

/* Moves the fixed arrays into the planned arena.  What the rest of this
 * call still reads (the deferred updates' inputs, a scan body's outputs:
 * the buffers living at `to`) is copied over; the others are written again
 * before any read.  On failure (out of memory) nothing changes. */
static tgl_status mem_move(tgl_ctx *ctx, tgl_frame *fr, tgl_step *s, const mem_plan *m, int32_t to)
{
    const tgl_program *prog = fr->prog;
    tgl_array *arena = NULL;
    tgl_array **fresh = calloc((size_t)s->nfixed + 1, sizeof *fresh);
    int64_t shape[1] = {m->peak};
    tgl_status st = fresh ? tgl_array_alloc_on(ctx, "whole step", prog->device, TGL_UINT8, 1,
                                               shape, false, &arena)
                          : tgl_ctx_set_error(ctx, TGL_ENOMEM, "whole step: out of memory");
    for (int32_t i = 0; !st && i < s->nfixed; i++) {
        int32_t sl = s->fixed_slot[i], r = m->root[sl];
        if (r < 0)
            continue; /* an empty buffer, or a view of one: no bytes */
        st = arena_array(ctx, arena, m->buf[r].offset, fr->slot[sl], &fresh[i]);
        if (!st && m->buf[r].last >= to)
            st = tgl_array_assign(ctx, fresh[i], fr->slot[sl]);
    }
    tgl_array_release(arena);
    if (st) {
        for (int32_t i = 0; fresh && i < s->nfixed; i++)
            tgl_array_release(fresh[i]);
        free(fresh);
        return st;
    }
    for (int32_t i = 0; i < s->nfixed; i++) {
        int32_t sl = s->fixed_slot[i];
        if (!fresh[i])
            continue;
        tgl_array_release(fr->slot[sl]);
        tgl_array_release(fr->slot[sl]);
        tgl_array_retain(fresh[i]);
        fr->slot[sl] = fresh[i];
    }
    free(fresh);
    return TGL_OK;
}

static tgl_status bind_run(tgl_ctx *ctx, tgl_frame *fr, bool inner, int32_t to)
{
    const tgl_program *prog = fr->prog;
    int32_t ns = prog->nslots;
    uint8_t *dyn = calloc((size_t)ns + 1, 1);      /* must be dynamic      */
    uint8_t *isfix = calloc((size_t)ns + 1, 1);    /* holds a fixed array  */
    tgl_step *s = calloc(1, sizeof *s);
    uint8_t *late = calloc((size_t)ns + 1, 1);     /* read by a deferred update,
                                                      or its variable's value */
    int32_t *def = malloc(sizeof *def * ((size_t)ns + 1)); /* a plain fixed
                                                      buffer's writer, or -1 */
    if (s) {
        s->op = calloc((size_t)prog->ncode + 1, sizeof *s->op);
        s->fixed_slot = malloc(sizeof *s->fixed_slot * ((size_t)ns + 1));
        s->dyn_slot = malloc(sizeof *s->dyn_slot * ((size_t)ns + 1));
        s->early_slot = malloc(sizeof *s->early_slot * ((size_t)ns + 1));
    }
    fr->step = s;
    if (!dyn || !isfix || !late || !def || !s || !s->op || !s->fixed_slot || !s->dyn_slot ||
        !s->early_slot) {
        free(def);
        free(late);
        free(dyn);
        free(isfix);
        tgl_step_free(fr);
        return tgl_cvm_run(ctx, fr, 0, to); /* out of memory: no binding */
    }
    s->epoch = fr->shape_epoch;
    for (int32_t k = 0; k < ns; k++)
        def[k] = -1;
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
    for (int32_t pc = prog->defer_start; pc < prog->ncode; pc++)
        for (int k = 0; k < prog->code[pc].nin; k++)
            late[prog->code[pc].in[k]] = 1;
    if (tgl_ctx_interrupted(ctx)) {
        free(def);
        free(late);
        free(dyn);
        free(isfix);
        tgl_step_free(fr);
        return tgl_ctx_set_error(ctx, TGL_EINTERRUPT, "%s: interrupted", prog->name);
    }
    tgl_status st = TGL_OK;
    for (int32_t pc = 0; pc < prog->ncode && !st; pc++) {
        const tgl_instr *ins = &prog->code[pc];
        if (ins->once) {
            /* a scan body's loop-invariant work: kept from the loop's first step */
            if (pc < to && !fr->once_done)
                st = tgl_cvm_run_op(ctx, fr, ins);
            continue;
        }
        int32_t i = s->nop++;
        tgl_step_op *op = &s->op[i];
        op->pc = pc;
        bool check = !ins->shape_stable && !tgl_plan_shape_from_shapes(ins);
        bool wanted_dyn = false;
        for (int k = 0; k < ins->nouts; k++)
            if (ins->outs[k] >= 0 && dyn[ins->outs[k]])
                wanted_dyn = true;
        if (ins->impl->view) {
            bool fix = !wanted_dyn && !check && ins->nin == 1 && isfix[ins->in[0]];
            /* a cached view of a variable a deferred update writes in place
             * would keep its storage shared, and the update out of place */
            bool pins = ins->nin >= 1 && late[ins->in[0]] &&
                        prog->slot_kind[ins->in[0]] == TGL_SLOT_SHARED;
            op->mode = !wanted_dyn && ins->nin == 1 && !check && !pins ? STEP_VIEW
                                                                       : STEP_DYNAMIC;
            if (fix && pc < to) {
                /* a view of a fixed buffer, made once */
                tgl_array *base = fr->slot[ins->in[0]], *v = NULL;
                st = ins->impl->view(ctx, ins->node, &base, &v);
                if (st)
                    break;
                if (v->storage == base->storage) {
                    tgl_array_retain(v);
                    tgl_frame_recycle(fr, fr->slot[ins->out]); /* cvm_nogc, a scan body */
                    fr->slot[ins->out] = v;
                    isfix[ins->out] = 1;
                    s->fixed_slot[s->nfixed++] = ins->out;
                    s->nop--; /* nothing to run */
                    continue;
                }
                tgl_array_release(v); /* it copied: runs every call */
                op->mode = STEP_DYNAMIC;
            }
        } else {
            op->mode = wanted_dyn || check ? STEP_DYNAMIC : STEP_FIXED;
        }
        if (check) {
            op->check = malloc(sizeof *op->check * (size_t)ins->nouts * (1 + TGL_MAX_DIMS));
            if (!op->check) {
                st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", prog->name);
                break;
            }
        }
        if (pc >= to)
            continue; /* the deferred updates: all dynamic, run later */
        uint64_t t0 = prog->profile ? tgl_now_ns() : 0;
        if (op->mode == STEP_VIEW)
            st = cached_view(ctx, fr, op, ins);
        else
            st = tgl_cvm_run_op(ctx, fr, ins);
        if (st)
            break;
        if (prog->profile) {
            fr->ins_ns[pc] += tgl_now_ns() - t0;
            fr->ins_calls[pc]++;
        }
        if (check)
            shapes_io(fr, ins, op->check, true);
        if (op->mode != STEP_FIXED)
            continue;
        /* Freeze the results: plain buffers only their slot holds. */
        bool plain = true;
        for (int k = 0; k < ins->nouts; k++) {
            const tgl_array *a = ins->outs[k] >= 0 ? fr->slot[ins->outs[k]] : NULL;
            if (ins->outs[k] >= 0 &&
                (!a || TGL_REFS(a) != 1 || TGL_REFS(a->storage) != 1 ||
                 a->data != a->storage->base || !(a->flags & TGL_ARRAY_CONTIGUOUS)))
                plain = false;
        }
        if (!plain) {
            op->mode = STEP_DYNAMIC;
            continue;
        }
        for (int k = 0; k < ins->nouts; k++) {
            int32_t o = ins->outs[k];
            if (o < 0)
                continue;
            tgl_array *a = fr->slot[o];
            tgl_array_retain(a);
            isfix[o] = 1;
            def[o] = pc;
            s->fixed_slot[s->nfixed++] = o;
            s->sum += ((int64_t)a->storage->nbytes + TGL_ALIGN - 1) / TGL_ALIGN * TGL_ALIGN;
        }
    }
    free(dyn);
    /* The arena ("Memory" above): its planned peak is what is budgeted.
     * A scan body keeps a storage per buffer: its generated loop
     * (src/scan) proves that no two ops write one storage by storage
     * identity, and a body's buffers are few and small. */
    mem_plan mp;
    bool shared = !st && !inner && mem_plan_make(fr, s, def, &mp);
    free(def);
    if (shared && mp.peak >= s->sum) {
        mem_plan_free(&mp); /* nothing to share: a storage each, as made */
        shared = false;
    }
    s->bytes = shared ? mp.peak : s->sum;
    int64_t max = step_max_bytes(fr->prog->device);
    if (shared && s->bytes <= max && mem_move(ctx, fr, s, &mp, to)) {
        /* no room for the arena: the buffers stay as they are */
        tgl_ctx_clear_error(ctx);
        s->bytes = s->sum;
    }
    if (shared)
        mem_plan_free(&mp);
    if (st || s->bytes > max) {
        free(late);
        /* an error (the call fails as on the CVM), or too large to keep:
         * what ran stays in the slots as the CVM's */
        free(isfix);
        step_drop(fr, true);
        if (!st)
            fr->step_big = fr->shape_epoch; /* not in this epoch */
        return st;
    }
    for (int32_t i = 0; i < prog->ntemp; i++)
        if (!isfix[prog->temp_slot[i]])
            s->dyn_slot[s->ndyn++] = prog->temp_slot[i];
    /* what the call hands out or updates must stay until the end */
    for (int i = 0; i < prog->nout; i++)
        late[prog->out_slot[i]] = 1;
    for (int k = 0; k < prog->nupd; k++)
        late[prog->upd_slot[k]] = 1;
    for (int32_t i = 0; i < s->ndyn && !inner; i++)
        if (!late[s->dyn_slot[i]])
            s->early_slot[s->nearly++] = s->dyn_slot[i];
    free(late);
    if (!inner && !st)
        release_early(fr, s);
    while (s->nfirst < s->nop && s->op[s->nfirst].pc < prog->defer_start)
        s->nfirst++;
    s->slot_fixed = isfix;
    s->be = prog->backend;
    /* A scan body binds anew at every run of its loop (a new epoch): making
     * its function each time would cost more than the steps it saves.
     * Under compile = 'tcc' the kernels never get the optimizing
     * compiler's code the function must match. */
    s->gen = s->be && s->be->step_prepare && s->be->step_run && ctx->config.whole_step == 1 && !inner &&
                     strcmp(ctx->config.compile, "tcc") != 0
                 ? GEN_WAIT
                 : GEN_NEVER;
    return TGL_OK;
}

tgl_status tgl_step_exec(tgl_ctx *ctx, tgl_frame *fr, int32_t from, int32_t to, bool inner)
{
    if (from == 0) {
        if (fr->step && fr->step->epoch != fr->shape_epoch)
            tgl_step_free(fr);
        if (!fr->step) {
            bool bind = ctx->config.whole_step && !fr->step_never &&
                        fr->step_try == fr->shape_epoch && fr->step_big != fr->shape_epoch;
            if (!bind) {
                /* the epoch's first call runs on the CVM; the next binds */
                fr->step_try = fr->shape_epoch;
                return tgl_cvm_run(ctx, fr, from, to);
            }
            if (!eligible(fr->prog, inner)) {
                fr->step_never = true;
                return tgl_cvm_run(ctx, fr, from, to);
            }
            return bind_run(ctx, fr, inner, to);
        }
    }
    if (!fr->step)
        return tgl_cvm_run(ctx, fr, from, to);
    tgl_status st = step_run(ctx, fr, from, to);
    if (!st && from == 0 && fr->step)
        release_early(fr, fr->step);
    if (st == STEP_RESHAPED) {
        /* a value-dependent shape changed: the rest of this call on the
         * CVM, and no binding before two calls have run */
        int32_t next = fr->step->op[fr->step->stopped].pc + 1;
        step_drop(fr, true);
        fr->step_try = 0;
        st = tgl_cvm_run(ctx, fr, next, to);
    }
    return st;
}

/* ---- Generated code ------------------------------------------------------
 *
 * After GEN_AFTER full runs, once every fused kernel of the step runs its
 * optimizing compiler's code, one run records what the backend needs to
 * make the whole step (backend.step_prepare: the CPU backend generates one
 * C function, backend.step_run runs it): for
 * each op of the first part (before the deferred updates), either a fused
 * kernel to inline, with the geometry its launch cache holds now and the
 * D index of each operand, or a call back into the engine (everything
 * else: BLAS and the other ops, views, outputs).  A fixed operand's data
 * pointer goes into D once; a caller's array (an input, a shared value, a
 * dynamic view) is read into D by the `prep` callback before the kernel,
 * which first checks that its layout is still the recorded one (else the
 * engine runs that op itself, so any layout stays right).  The function
 * compiles in the background (the step runs op by op meanwhile) and
 * replaces the loop over the first part once ready.  The kernels are the
 * same source compiled by the same compiler as the CVM's kernels (those
 * calling libm not inlined, so they vectorize alike), so results stay
 * bit-identical (spec/whole_step_spec.lua). */

typedef struct step_env {
    tgl_ctx *ctx;
    tgl_frame *fr;
    tgl_step *s;
} step_env;

/* cb(env, i): i >= 0 runs op i; i in [-nfirst, -1] prepares op -1 - i;
 * TGL_STEP_CB_START + i and TGL_STEP_CB_END + i time op i's inline kernel
 * (profile). */
#define PROF_START TGL_STEP_CB_START
#define PROF_END TGL_STEP_CB_END

/* TGL_STEP_CB_PIN / TGL_STEP_CB_SAME for op k: the operands of a fixed
 * op that are not fixed buffers. */
static int pin_op(tgl_frame *fr, tgl_step *s, int32_t k, bool check)
{
    tgl_step_op *op = &s->op[k];
    const tgl_instr *ins = &fr->prog->code[op->pc];
    int n = ins->nin + ins->nouts;
    if (!check && !op->pin) {
        op->pin = calloc((size_t)n + 1, sizeof *op->pin);
        if (!op->pin)
            return 1;
    }
    if (check && !op->pin)
        return 1;
    int32_t np = 0;
    for (int j = 0; j < n; j++) {
        int32_t sl = j < ins->nin ? ins->in[j] : ins->outs[j - ins->nin];
        if (sl < 0 || s->slot_fixed[sl])
            continue;
        const tgl_array *a = fr->slot[sl];
        if (!a)
            return 1;
        step_pin *p = &op->pin[np++];
        size_t nd = sizeof(int64_t) * (size_t)a->ndim;
        if (check) {
            if (np > op->npin || p->slot != sl || p->data != a->data || p->ndim != a->ndim ||
                memcmp(p->shape, a->shape, nd) != 0 || memcmp(p->strides, a->strides, nd) != 0)
                return 1;
        } else {
            p->slot = sl;
            p->ndim = a->ndim;
            p->data = a->data;
            memcpy(p->shape, a->shape, nd);
            memcpy(p->strides, a->strides, nd);
        }
    }
    if (check)
        return np == op->npin ? 0 : 1;
    op->npin = np;
    return 0;
}

static int step_cb(void *envp, int i)
{
    step_env *e = envp;
    tgl_step *s = e->s;
    if (i >= TGL_STEP_CB_SAME)
        return pin_op(e->fr, s, i - TGL_STEP_CB_SAME, true);
    if (i >= TGL_STEP_CB_PIN)
        return pin_op(e->fr, s, i - TGL_STEP_CB_PIN, false);
    if (i >= PROF_END) {
        int32_t k = i - PROF_END, pc = s->op[k].pc;
        e->fr->ins_ns[pc] += tgl_now_ns() - s->prof_t0[k];
        e->fr->ins_calls[pc]++;
        return 0;
    }
    if (i >= PROF_START) {
        s->prof_t0[i - PROF_START] = tgl_now_ns();
        return 0;
    }
    if (i >= 0)
        return (int)run_entry(e->ctx, e->fr, s, i);
    int32_t k = -1 - i;
    for (int32_t r = s->caller_begin[k]; r < s->caller_begin[k + 1]; r++) {
        const struct caller_operand *d = &s->caller[r];
        const tgl_array *a = e->fr->slot[d->slot];
        if (!a || a->ndim != d->ndim ||
            memcmp(a->strides, d->strides, sizeof(int64_t) * (size_t)d->ndim) != 0) {
            tgl_status st = run_entry(e->ctx, e->fr, s, k);
            return st ? (int)st : -1;
        }
        s->D[d->d] = a->data;
    }
    return 0;
}

/* The D index of slot sl's array (a new entry on first use). */
static int32_t d_index(tgl_step *s, int32_t sl, void *data)
{
    if (s->slot_d[sl] < 0) {
        s->slot_d[sl] = s->nD;
        s->D[s->nD++] = data;
    }
    return s->slot_d[sl];
}

/* Records op i (it just ran) for the generated function. */
static bool record(tgl_frame *fr, tgl_step *s, int32_t i)
{
    const tgl_program *prog = fr->prog;
    int32_t pc = s->op[i].pc;
    const tgl_instr *ins = &prog->code[pc];
    tgl_step_item *it = &s->item[i];
    *it = (tgl_step_item){.scratch = -1, .pc = pc, .fixed = s->op[i].mode == STEP_FIXED};
    s->caller_begin[i + 1] = s->ncaller;
    size_t scratch_elem = 0;
    if (s->op[i].mode != STEP_FIXED || ins->node->op != TGL_OP_FUSED ||
        !s->be->step_inlinable(tgl_fused_prog_of(ins->node), fr->launch_cache[pc], &scratch_elem))
        return true;
    for (int k = 0; k < ins->nouts; k++)
        if (ins->outs[k] < 0)
            return true; /* an output nobody reads: the launcher's scratch */
    const tgl_fused_prog *fp = tgl_fused_prog_of(ins->node);
    int nop = fp->nin + fp->nout;
    int32_t *idx = malloc(sizeof *idx * (size_t)nop);
    if (!idx)
        return false;
    for (int j = 0; j < nop; j++) {
        int32_t sl = j < fp->nin ? ins->in[j] : ins->outs[j - fp->nin];
        tgl_array *a = fr->slot[sl];
        if (s->slot_fixed[sl]) {
            idx[j] = d_index(s, sl, a->data);
        } else {
            idx[j] = d_index(s, sl, NULL);
            struct caller_operand *d = &s->caller[s->ncaller++];
            d->d = idx[j];
            d->slot = sl;
            d->ndim = a->ndim;
            memcpy(d->strides, a->strides, sizeof(int64_t) * (size_t)a->ndim);
            it->prep = 1;
        }
    }
    if (scratch_elem) {
        tgl_array *o0 = fr->slot[ins->outs[0]];
        int64_t shape[1] = {o0->size};
        tgl_array *acc = NULL;
        if (tgl_array_alloc_on(prog->ctx, "whole step", prog->device, TGL_FLOAT64, 1, shape,
                               false, &acc)) {
            tgl_ctx_clear_error(prog->ctx);
            free(idx);
            return false;
        }
        s->scratch[s->nscratch++] = acc;
        it->scratch = s->nD;
        s->D[s->nD++] = acc->data;
    }
    it->prog = fp;
    it->timed = prog->profile;
    it->launch_cache = fr->launch_cache[pc];
    it->acc_size = fp->reduce_op >= 0 ? fr->slot[ins->outs[0]]->size : 0;
    it->data = idx;
    s->caller_begin[i + 1] = s->ncaller;
    return true;
}

/* Sets up recording: the tables, sized for the worst case. */
static bool record_start(tgl_frame *fr, tgl_step *s)
{
    const tgl_program *prog = fr->prog;
    size_t nops = 0;
    for (int32_t i = 0; i < s->nfirst; i++)
        nops += (size_t)prog->code[s->op[i].pc].nin + (size_t)prog->code[s->op[i].pc].nouts;
    s->item = calloc((size_t)s->nfirst + 1, sizeof *s->item);
    s->caller_begin = calloc((size_t)s->nfirst + 2, sizeof *s->caller_begin);
    s->caller = malloc(sizeof *s->caller * (nops + 1));
    s->slot_d = malloc(sizeof *s->slot_d * ((size_t)prog->nslots + 1));
    s->D = calloc(nops + (size_t)s->nfirst + 1, sizeof *s->D);
    s->scratch = calloc((size_t)s->nfirst + 1, sizeof *s->scratch);
    s->prof_t0 = calloc((size_t)s->nfirst + 1, sizeof *s->prof_t0);
    if (!s->item || !s->caller_begin || !s->caller || !s->slot_d || !s->D || !s->scratch ||
        !s->prof_t0)
        return false;
    for (int32_t k = 0; k < prog->nslots; k++)
        s->slot_d[k] = -1;
    return true;
}

/* The recording run ended: hand the items to the backend. */
static void record_end(tgl_ctx *ctx, tgl_step *s)
{
    int ninline = 0;
    for (int32_t i = 0; i < s->nfirst; i++)
        ninline += s->item[i].prog != NULL;
    tgl_errbuf e;
    s->gen = GEN_NEVER;
    if ((ninline == 0 && !s->be->step_all_callbacks) ||
        s->be->step_prepare(&ctx->backend_opts, s->item, s->nfirst, &s->code, &e)) {
        for (int32_t i = 0; i < s->nfirst; i++)
            free((void *)s->item[i].data);
        gen_free(s);
        return;
    }
    /* the items' data arrays are rendered: free them, the D table stays */
    for (int32_t i = 0; i < s->nfirst; i++) {
        free((void *)s->item[i].data);
        s->item[i].data = NULL;
        s->item[i].launch_cache = NULL;
    }
    s->gen = GEN_MADE;
}

/* Whether every fused kernel of the first part runs its final code: its
 * optimized code, or, on a backend that compiles nothing in the
 * background (no wait_compiles), whatever it has now (a program it does
 * not compile stays at tier 0 and runs its nodes' kernels). */
static bool kernels_final(const tgl_frame *fr, const tgl_step *s)
{
    const tgl_backend *be = tgl_backend_get(fr->prog->device);
    if (be && !be->wait_compiles)
        return true;
    for (int32_t i = 0; i < s->nfirst; i++) {
        const tgl_instr *ins = &fr->prog->code[s->op[i].pc];
        if (ins->node->op == TGL_OP_FUSED && tgl_backend_tier(tgl_fused_prog_of(ins->node), fr->prog->device) != 2)
            return false;
    }
    return true;
}

static tgl_status step_run(tgl_ctx *ctx, tgl_frame *fr, int32_t from, int32_t to)
{
    const tgl_program *prog = fr->prog;
    tgl_step *s = fr->step;
    if (tgl_ctx_interrupted(ctx))
        return tgl_ctx_set_error(ctx, TGL_EINTERRUPT, "%s: interrupted", prog->name);
    bool first = from == 0 && to == prog->defer_start;
    if (first && s->gen == GEN_MADE) {
        step_env env = {ctx, fr, s};
        int st = s->be->step_run(s->code, s->D, &env, step_cb);
        if (st != TGL_STEP_NOT_READY)
            return st > 0 ? (tgl_status)st : TGL_OK;
    }
    bool rec = false;
    if (first && s->gen == GEN_WAIT && ++s->runs > GEN_AFTER && kernels_final(fr, s)) {
        if (record_start(fr, s)) {
            rec = true;
        } else {
            gen_free(s);
            s->gen = GEN_NEVER;
        }
    }
    for (int32_t i = 0; i < s->nop; i++) {
        int32_t pc = s->op[i].pc;
        if (pc < from)
            continue;
        if (pc >= to)
            break;
        tgl_status st = run_entry(ctx, fr, s, i);
        if (st) {
            if (rec) {
                for (int32_t k = 0; k < i; k++)
                    free((void *)s->item[k].data);
                gen_free(s);
                s->gen = GEN_WAIT;
            }
            return st;
        }
        if (rec && !record(fr, s, i)) {
            for (int32_t k = 0; k < i; k++)
                free((void *)s->item[k].data);
            gen_free(s);
            s->gen = GEN_NEVER;
            rec = false;
        }
    }
    if (rec)
        record_end(ctx, s);
    return TGL_OK;
}

void tgl_step_wait(tgl_frame *fr)
{
    const tgl_step *s = fr->step;
    if (s && s->code)
        s->code->backend->wait(s->code);
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
                            int *dynamic, int *generated)
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
    if (generated)
        *generated = s->gen == GEN_MADE && s->code &&
                     __atomic_load_n(&s->code->tier, __ATOMIC_ACQUIRE) > 0;
    return 1;
}

/* Adds fr's bound step and its bodies' to *sum and *peak. */
static int step_memory(const tgl_frame *fr, int64_t *sum, int64_t *peak)
{
    int n = 0;
    const tgl_step *s = fr->step;
    if (s && s->epoch == fr->shape_epoch) {
        *sum += s->sum;
        *peak += s->bytes;
        n++;
    }
    for (int32_t pc = 0; fr->sub && pc < fr->prog->ncode; pc++)
        if (fr->sub[pc])
            n += step_memory(fr->sub[pc], sum, peak);
    return n;
}

int tgl_function_step_memory(const tgl_function *fn, int64_t *sum, int64_t *peak)
{
    int64_t s = 0, p = 0;
    int n = fn && fn->frame ? step_memory(fn->frame, &s, &p) : 0;
    if (sum)
        *sum = s;
    if (peak)
        *peak = p;
    return n;
}
