/*
 * scan_loop.c — a scan's whole loop as one generated function.
 *
 * The interpreted loop (scan.c, run_steps) costs per step: pointing the
 * taps' view descriptors, the body's bound step (engine/step.c) op by op,
 * copying each output into its entry, the until test through an array.
 * For a one-op body that is ~86 ns a step, far more than the op.  Here the
 * loop is planned once per run, after the first steps ran interpreted
 * (the body's frame is then bound: every intermediate has its fixed
 * buffer, every fused kernel its launch cache), and handed to the
 * backend's loop_prepare (backend.h): the CPU backend renders one C
 * function (src/cgen render.c, tgl_cgen_render_loop) with the loop
 * counter, each tap's pointer arithmetic (sequences' slices, recurrent
 * outputs' K + T buffers or rings of K + 1), the body's fused kernels
 * inline as a whole step's are, a callback into here for every other op
 * (the products: the same kernel the step runs, on the same arrays), the
 * stores (memmove of each step's output into its entry) and the until
 * test on the condition's scalar.
 *
 * Which bodies: straight-line ops (no lazy branch, no nested scan), each
 * a fused kernel (inline when its launch plan is one task, else called
 * back), a view of one operand that shares its storage (a pointer offset,
 * moving with a moving operand), or an op with a kernel (called back); no
 * op whose output shapes follow from values.  Every output buffer of the
 * body must be its own (no two ops write one storage, none writes an
 * input's), contiguous, as the bound step leaves them.  Anything else,
 * profile or debug mode, `whole_step` other than 'on', or a backend
 * without loop_prepare: the interpreted loop runs every step.
 *
 * The kernels are the step's (same source, same compiler, libm kernels
 * kept out of line), their inputs and order the same, so results are bit
 * for bit the interpreted loop's (spec/scan_loop_spec.lua compares them
 * under whole_step = 'bound').  The loop's code compiles as a whole step's
 * (kernel cache; in the background under compile = 'tiered', the steps
 * running interpreted meanwhile: asked again every RETRY steps).
 */
#include "scan/scan.h"
#include "engine/backend.h"
#include "engine/fused_prog.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Steps run interpreted before the plan: the first on the CVM, the
 * second binds the body's step (engine/step.c). */
#define FIRST 2
/* While the loop's code compiles (or the body's kernels are not final),
 * asked again every RETRY steps. */
#define RETRY 256

struct tgl_scan_loop {
    const tgl_backend *be;
    tgl_kernel_ref *code;    /* the backend's (never freed here)          */
    void **D;
    int32_t nD;
    int32_t *slot_d;         /* per body slot: its D index, or -1          */
    int32_t *moving;         /* slots whose array's data the loop moves    */
    int32_t nmoving;
    int32_t *item_pc;        /* per item: its instruction                  */
    tgl_array **scratch;     /* reductions' double accumulators            */
    int32_t nscratch;
};

void tgl_scan_loop_free(struct tgl_scan_loop *l)
{
    if (!l)
        return;
    for (int32_t i = 0; i < l->nscratch; i++)
        tgl_array_release(l->scratch[i]);
    free(l->scratch);
    free(l->D);
    free(l->slot_d);
    free(l->moving);
    free(l->item_pc);
    free(l);
}

/* What the plan is made of while it is made. */
typedef struct planning {
    struct tgl_scan_loop *l;
    tgl_frame *sub;
    tgl_step_item *items;
    int nitems;
    tgl_loop_ptr *ptr;
    int nptr;
    tgl_loop_store *store;
    int nstore;
    uint8_t *moves;          /* per slot */
    const tgl_storage **written;
    int nwritten;
} planning;

static int32_t d_new(struct tgl_scan_loop *l, void *data)
{
    l->D[l->nD] = data;
    return l->nD++;
}

/* The D index of slot sl (its array's data now), made on first use. */
static int32_t d_slot(planning *p, int32_t sl)
{
    struct tgl_scan_loop *l = p->l;
    if (l->slot_d[sl] < 0)
        l->slot_d[sl] = d_new(l, p->sub->slot[sl]->data);
    return l->slot_d[sl];
}

/* A moving inner input (a tap): its slot's D entry set by the loop from
 * base (D index) at entry (t + add) [mod] of bytes each. */
static void tap(planning *p, int32_t sl, int32_t base, int64_t add, int64_t mod, int64_t bytes)
{
    int32_t d = d_slot(p, sl);
    p->ptr[p->nptr++] = (tgl_loop_ptr){.d = d, .base = base, .moves = 1, .add = add, .mod = mod,
                                       .bytes = bytes};
    if (!p->moves[sl]) {
        p->moves[sl] = 1;
        p->l->moving[p->l->nmoving++] = sl;
    }
}

static bool is_written(const planning *p, const tgl_storage *st)
{
    for (int i = 0; i < p->nwritten; i++)
        if (p->written[i] == st)
            return true;
    return false;
}

/* The body's instructions as items; false when the body cannot run as a
 * generated loop. */
static bool plan_body(planning *p, const tgl_program *ip)
{
    tgl_frame *sub = p->sub;
    const tgl_backend *be = p->l->be;
    for (int32_t pc = 0; pc < ip->ncode; pc++) {
        const tgl_instr *ins = &ip->code[pc];
        if (ins->once)
            continue; /* ran at the first step; its results stay */
        if (ins->kind != TGL_I_OP || ins->region || ins->sub || ins->update >= 0)
            return false;
        if (!ins->shape_stable && !tgl_plan_shape_from_shapes(ins))
            return false;
        for (int k = 0; k < ins->nin; k++)
            if (!sub->slot[ins->in[k]])
                return false;
        if (ins->impl->view) {
            /* a view sharing its operand's storage: a pointer offset */
            const tgl_array *a = sub->slot[ins->in[0]], *o = sub->slot[ins->out];
            if (ins->nin != 1 || !o || o->storage != a->storage || o->device != a->device)
                return false;
            int32_t src = d_slot(p, ins->in[0]);
            int32_t d = d_slot(p, ins->out);
            if (p->moves[ins->in[0]]) {
                p->ptr[p->nptr++] = (tgl_loop_ptr){
                    .d = d, .base = src, .off = (int64_t)((const char *)o->data - (const char *)a->data)};
                p->moves[ins->out] = 1;
                p->l->moving[p->l->nmoving++] = ins->out;
            }
            continue;
        }
        bool fused = ins->node->op == TGL_OP_FUSED;
        if (!fused && !ins->kern)
            return false;
        for (int k = 0; k < ins->nouts; k++) {
            int32_t sl = ins->outs[k];
            if (sl < 0)
                continue;
            const tgl_array *o = sub->slot[sl];
            /* its own buffer (views of it inside the body may hold it too) */
            if (!o || !o->storage || !(o->flags & TGL_ARRAY_CONTIGUOUS) || p->moves[sl] ||
                is_written(p, o->storage))
                return false;
            p->written[p->nwritten++] = o->storage;
            d_slot(p, sl);
        }
        tgl_step_item *it = &p->items[p->nitems];
        *it = (tgl_step_item){.scratch = -1, .pc = pc, .fixed = 1};
        p->l->item_pc[p->nitems] = pc;
        p->nitems++;
        size_t scratch = 0;
        bool all_outs = true;
        for (int k = 0; k < ins->nouts; k++)
            all_outs &= ins->outs[k] >= 0;
        if (!fused || !all_outs || !be->step_inlinable ||
            !be->step_inlinable(tgl_fused_prog_of(ins->node), sub->launch_cache[pc], &scratch))
            continue; /* called back */
        const tgl_fused_prog *fp = tgl_fused_prog_of(ins->node);
        int nop = fp->nin + fp->nout;
        int32_t *idx = malloc(sizeof *idx * (size_t)nop);
        if (!idx)
            return false;
        for (int j = 0; j < nop; j++)
            idx[j] = d_slot(p, j < fp->nin ? ins->in[j] : ins->outs[j - fp->nin]);
        if (scratch) {
            tgl_array *o0 = sub->slot[ins->outs[0]], *acc = NULL;
            int64_t shape[1] = {o0->size};
            if (tgl_array_alloc_on(ip->ctx, "scan loop", ip->device, TGL_FLOAT64, 1, shape, false,
                                   &acc)) {
                tgl_ctx_clear_error(ip->ctx);
                free(idx);
                return false;
            }
            p->l->scratch[p->l->nscratch++] = acc;
            it->scratch = d_new(p->l, acc->data);
        }
        it->prog = fp;
        it->launch_cache = sub->launch_cache[pc];
        it->acc_size = fp->reduce_op >= 0 ? sub->slot[ins->outs[0]]->size : 0;
        it->data = idx;
    }
    return true;
}

/* A step's output o (a body slot) stored into the entry at D index dst. */
static bool store(planning *p, int32_t sl, int32_t dst, const tgl_array *d)
{
    const tgl_array *o = p->sub->slot[sl];
    if (!o || !(o->flags & TGL_ARRAY_CONTIGUOUS) || !(d->flags & TGL_ARRAY_CONTIGUOUS) ||
        o->dtype_id != d->dtype_id || o->device != d->device ||
        !tgl_array_has_shape(o, d->ndim, d->shape))
        return false;
    p->store[p->nstore++] = (tgl_loop_store){
        .dst = dst, .src = d_slot(p, sl), .bytes = (int64_t)o->size * (int64_t)tgl_dtype_size(o->dtype_id)};
    return true;
}

/* Makes the plan and asks the backend for its code; NULL when the body
 * or the run cannot be generated. */
static struct tgl_scan_loop *plan(tgl_ctx *ctx, tgl_frame *sub, tgl_array *const *in,
                                  run_state *rs)
{
    const tgl_scan_layout *s = rs->s;
    const tgl_program *ip = sub->prog;
    const tgl_backend *be = tgl_backend_get(ip->device);
    if (!be || !be->loop_prepare || !be->loop_run || ctx->config.whole_step != 1 ||
        ip->profile || ip->mode == TGL_MODE_DEBUG || ip->linker == TGL_LINKER_VM || !sub->step ||
        !strcmp(ctx->config.compile, "tcc"))
        return NULL;
    size_t ns = (size_t)ip->nslots + 1, nc = (size_t)ip->ncode + 1;
    size_t nd = ns + 2 * (size_t)(s->nseq + 2 * s->nrec + 2 * s->nnofb) + nc + 4;
    size_t nptr = ns + (size_t)s->ninner_in + (size_t)(s->nrec + s->nnofb) + 1;
    planning p = {0};
    struct tgl_scan_loop *l = calloc(1, sizeof *l);
    p.l = l;
    p.sub = sub;
    p.items = calloc(nc, sizeof *p.items);
    p.ptr = calloc(nptr, sizeof *p.ptr);
    p.store = calloc((size_t)(s->nrec + s->nnofb) + 1, sizeof *p.store);
    p.moves = calloc(ns, 1);
    p.written = calloc(ns + nc, sizeof *p.written);
    bool ok = l && p.items && p.ptr && p.store && p.moves && p.written;
    if (ok) {
        l->be = be;
        l->D = calloc(nd, sizeof *l->D);
        l->slot_d = malloc(sizeof *l->slot_d * ns);
        l->moving = malloc(sizeof *l->moving * ns);
        l->item_pc = malloc(sizeof *l->item_pc * nc);
        l->scratch = calloc(nc, sizeof *l->scratch);
        ok = l->D && l->slot_d && l->moving && l->item_pc && l->scratch;
    }
    for (size_t k = 0; ok && k < ns; k++)
        l->slot_d[k] = -1;
    /* The taps: sequences' slices, recurrent outputs' earlier entries. */
    for (int i = 0, v = 0; ok && i < s->nseq; i++) {
        const tgl_array *x = in[tgl_scan_in_seq(s, i)];
        int32_t base = d_new(l, x->data);
        int64_t bytes = x->strides[0] * (int64_t)tgl_dtype_size(x->dtype_id);
        for (int a = 0; ok && a < s->seq[i].ntaps; a++, v++) {
            int32_t sl = ip->in_slot[tgl_scan_inner_seq(s, i, a)];
            /* the slot must hold the loop's own view (nothing else took it) */
            ok = sub->slot[sl] == rs->seq_view[v] && !p.moves[sl];
            if (ok)
                tap(&p, sl, base, s->seq[i].taps[a] - s->seq[i].taps[0], 0, bytes);
        }
    }
    for (int r = 0, v = 0; ok && r < s->nrec; r++) {
        const tgl_array *B = rs->rec_buf[r];
        int64_t K = s->rec[r].K;
        bool ring = tgl_scan_keeps_last(s, r);
        int32_t base = d_new(l, B->data);
        int64_t bytes = B->strides[0] * (int64_t)tgl_dtype_size(B->dtype_id);
        for (int a = 0; ok && a < s->rec[r].ntaps; a++, v++) {
            int32_t sl = ip->in_slot[tgl_scan_inner_rec(s, r, a)];
            int64_t k = -s->rec[r].taps[a];
            ok = sub->slot[sl] == rs->rec_view[v] && !p.moves[sl];
            if (ok)
                tap(&p, sl, base, s->reverse ? k : K - k, ring ? K + 1 : 0, bytes);
        }
        if (ok) {
            int32_t d = d_new(l, NULL);
            p.ptr[p.nptr++] = (tgl_loop_ptr){.d = d, .base = base, .moves = 1,
                                             .add = s->reverse ? 0 : K,
                                             .mod = ring ? K + 1 : 0, .bytes = bytes};
            ok = store(&p, ip->out_slot[r], d, rs->rec_dst[r]);
        }
    }
    ok = ok && plan_body(&p, ip);
    for (int k = 0; ok && k < s->nnofb; k++) {
        const tgl_array *Y = rs->out_buf[k];
        ok = Y != NULL;
        if (!ok)
            break;
        int32_t d;
        if (rs->out_dst[k] == Y) {
            d = d_new(l, Y->data); /* kept last: the same place every step */
        } else {
            d = d_new(l, NULL);
            p.ptr[p.nptr++] = (tgl_loop_ptr){
                .d = d, .base = d_new(l, Y->data), .moves = 1,
                .bytes = Y->strides[0] * (int64_t)tgl_dtype_size(Y->dtype_id)};
        }
        ok = store(&p, ip->out_slot[s->nrec + k], d, rs->out_dst[k]);
    }
    /* Every slot the loop writes is an op's own output: no store's entry
     * and no input of the scan may share its storage. */
    for (int i = 0; ok && i < s->nrec; i++)
        ok = !is_written(&p, rs->rec_buf[i]->storage);
    for (int k = 0; ok && k < s->nnofb; k++)
        ok = !is_written(&p, rs->out_buf[k]->storage);
    for (int i = 0; ok && i < s->ninner_in; i++) {
        const tgl_array *a = sub->slot[ip->in_slot[i]];
        ok = !a || !is_written(&p, a->storage);
    }
    /* nor what no op of the loop makes (the loop-invariant results,
     * constants): only what the loop's ops make and views of it */
    uint8_t *made = ok ? calloc(ns, 1) : NULL;
    ok = ok && made;
    for (int32_t pc = 0; ok && pc < ip->ncode; pc++) {
        const tgl_instr *c = &ip->code[pc];
        for (int k = 0; !c->once && k < c->nouts; k++)
            if (c->outs[k] >= 0)
                made[c->outs[k]] = 1;
    }
    for (int32_t k = 0; ok && k < ip->nslots; k++)
        ok = made[k] || !sub->slot[k] || !is_written(&p, sub->slot[k]->storage);
    free(made);
    int32_t until_d = -1;
    int until_dtype = 0;
    if (ok && s->has_until) {
        int32_t sl = ip->out_slot[tgl_scan_nout(s)];
        const tgl_array *c = sub->slot[sl];
        ok = c && c->size == 1 && c->device == ip->device;
        if (ok) {
            until_d = d_slot(&p, sl);
            until_dtype = c->dtype_id;
        }
    }
    if (ok) {
        tgl_loop_plan pl = {.items = p.items, .nitems = p.nitems, .ptr = p.ptr, .nptr = p.nptr,
                            .store = p.store, .nstore = p.nstore, .until_d = until_d,
                            .until_dtype = until_dtype, .reverse = s->reverse};
        tgl_errbuf e;
        ok = be->loop_prepare(&ctx->backend_opts, &pl, &l->code, &e) == TGL_OK;
    }
    for (int i = 0; i < p.nitems; i++)
        free((void *)p.items[i].data);
    free(p.items);
    free(p.ptr);
    free(p.store);
    free(p.moves);
    free(p.written);
    if (!ok) {
        tgl_scan_loop_free(l);
        return NULL;
    }
    return l;
}

/* Whether every fused kernel of the body runs its final code (as
 * engine/step.c's kernels_final): the generated loop's kernels must be
 * what the interpreted steps ran. */
static bool kernels_final(const tgl_program *ip)
{
    const tgl_backend *be = tgl_backend_get(ip->device);
    if (be && !be->wait_compiles)
        return true;
    for (int32_t pc = 0; pc < ip->ncode; pc++) {
        const tgl_instr *ins = &ip->code[pc];
        if (!ins->once && ins->kind == TGL_I_OP && ins->node->op == TGL_OP_FUSED &&
            tgl_backend_tier(tgl_fused_prog_of(ins->node), ip->device) != 2)
            return false;
    }
    return true;
}

typedef struct loop_env {
    tgl_ctx *ctx;
    tgl_frame *sub;
    struct tgl_scan_loop *l;
} loop_env;

/* The loop's callback: item i's op (its arrays pointed at this step's
 * data first); -1: an interrupt check. */
static int loop_cb(void *envp, int i)
{
    loop_env *e = envp;
    tgl_ctx *ctx = e->ctx;
    tgl_frame *sub = e->sub;
    const struct tgl_scan_loop *l = e->l;
    if (i < 0)
        return tgl_ctx_interrupted(ctx)
                   ? (int)tgl_ctx_set_error(ctx, TGL_EINTERRUPT, "%s: interrupted", sub->prog->name)
                   : 0;
    for (int32_t m = 0; m < l->nmoving; m++)
        sub->slot[l->moving[m]]->data = l->D[l->slot_d[l->moving[m]]];
    int32_t pc = l->item_pc[i];
    const tgl_instr *ins = &sub->prog->code[pc];
    tgl_array *args[16], *outs[8];
    tgl_array **inp = ins->nin <= 16 ? args : malloc(sizeof *inp * (size_t)ins->nin);
    tgl_array **o = ins->nouts <= 8 ? outs : malloc(sizeof *o * (size_t)ins->nouts);
    tgl_status st;
    if (!inp || !o) {
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", sub->prog->name);
    } else {
        for (int k = 0; k < ins->nin; k++)
            inp[k] = sub->slot[ins->in[k]];
        if (ins->impl->shape_k) {
            for (int k = 0; k < ins->nouts; k++)
                o[k] = ins->outs[k] >= 0 ? sub->slot[ins->outs[k]] : NULL;
            st = ins->node->op == TGL_OP_FUSED
                     ? tgl_fused_kernel_cached(ctx, ins->node, inp, o, false, &sub->launch_cache[pc])
                     : ins->kern->run_n(ctx, ins->node, inp, o, false);
        } else {
            st = ins->kern->run(ctx, ins->node, inp, sub->slot[ins->out]);
        }
    }
    if (inp != args)
        free(inp);
    if (o != outs)
        free(o);
    return (int)st;
}

/* Steps the generated loops ran, process-wide (tgl_scan_loop_steps). */
static int64_t loop_steps;

__attribute__((visibility("default"))) int64_t tgl_scan_loop_steps(void)
{
    return __atomic_load_n(&loop_steps, __ATOMIC_RELAXED);
}

tgl_status tgl_scan_loop_try(tgl_ctx *ctx, tgl_frame *fr, const tgl_instr *ins, tgl_frame *sub,
                             tgl_array *const *in, run_state *rs, int64_t step, bool *ran)
{
    (void)fr;
    (void)ins;
    *ran = false;
    if (rs->loop_state == 2 || step < FIRST || (step - FIRST) % RETRY != 0)
        return TGL_OK;
    if (rs->loop_state == 0) {
        if (!kernels_final(sub->prog))
            return TGL_OK; /* asked again RETRY steps later */
        rs->loop = plan(ctx, sub, in, rs);
        rs->loop_state = rs->loop ? 1 : 2;
        if (!rs->loop)
            return TGL_OK;
    }
    struct tgl_scan_loop *l = rs->loop;
    int64_t L[4] = {rs->T, step, rs->last_t, 0};
    loop_env env = {ctx, sub, l};
    int rc = l->be->loop_run(l->code, l->D, L, &env, loop_cb);
    if (rc == TGL_STEP_NOT_READY)
        return TGL_OK; /* compiling: interpreted meanwhile */
    *ran = true;
    int64_t done = L[3] > step ? L[3] - step : 0;
    rs->done += done;
    sub->ncalls += (uint64_t)done;
    __atomic_fetch_add(&loop_steps, done, __ATOMIC_RELAXED);
    if (done)
        rs->last_t = rs->s->reverse ? rs->T - L[3] : L[3] - 1;
    if (rc) {
        char msg[TGL_ERRMSG_SIZE];
        snprintf(msg, sizeof msg, "%s", ctx->errmsg);
        return tgl_ctx_set_error(ctx, (tgl_status)rc, "scan '%s', step %" PRId64 ": %s",
                                 rs->s->name, L[2] + 1, msg);
    }
    return TGL_OK;
}
