/*
 * function.c — compiling graphs into CVM programs, and calling them.
 *
 * Compiling: sort the nodes the outputs and updates need, give each a
 * storage slot, and emit one instruction per op.  An ifelse becomes a
 * conditional jump around the instructions only one branch needs, so the
 * branch not taken is never computed.  In straight-line programs the cvm
 * linker releases each intermediate after its last reader.
 *
 * Calling: check and bind the inputs, read the shared variables, run the
 * program, hand out the outputs, and only then apply the updates, all
 * together (every update sees the old values; a failed call changes
 * nothing).
 *
 * Between the two, tgl_optimize rewrites the outputs and update values
 * (opt/), and the fused groups get their generated kernels (cgen/).
 */
#include "engine/cvm.h"
#include "engine/fprog.h"
#include "cgen/cgen.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- building the program -------------------------------------------- */

typedef struct builder {
    tgl_ctx *ctx;
    tgl_function *fn;
    tgl_node **order;        /* every node, inputs before users            */
    size_t count;
    int32_t *slot_of;        /* node id -> slot, or -1                      */
    int32_t *pos_of;         /* node id -> position in order                */
    unsigned char *avail;    /* node id -> computed on the current path     */
    unsigned char *mark;     /* scratch: node id -> in the current subset   */
    int32_t cap;
} builder;

static tgl_status emit(builder *b, tgl_instr ins)
{
    tgl_function *fn = b->fn;
    if (fn->ncode == b->cap) {
        int32_t nc = b->cap ? b->cap * 2 : 64;
        tgl_instr *c = realloc(fn->code, sizeof *c * (size_t)nc);
        if (!c)
            return tgl_ctx_set_error(b->ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
        fn->code = c;
        b->cap = nc;
    }
    fn->code[fn->ncode++] = ins;
    return TGL_OK;
}

/* A fused node and its siblings (other outputs of the same program on the
 * same inputs, still to be emitted) become one instruction writing every
 * output.  Siblings are marked available and unmarked. */
static tgl_status gather_fused(builder *b, tgl_node *n, size_t from, size_t hi, tgl_instr *ins)
{
    const tgl_fprog *p = tgl_fprog_get(b->ctx, (int32_t)n->p.i[0]);
    ins->nouts = p->nout;
    ins->outs = malloc(sizeof *ins->outs * (size_t)p->nout);
    if (!ins->outs)
        return tgl_ctx_set_error(b->ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
    for (int k = 0; k < p->nout; k++)
        ins->outs[k] = -1;
    ins->outs[n->p.i[1]] = b->slot_of[n->id];
    for (size_t q = from; q <= hi && q < b->count; q++) {
        tgl_node *m = b->order[q];
        if (m == n || !b->mark[m->id] || m->kind != TGL_NODE_APPLY || m->op != TGL_OP_FUSED ||
            m->p.i[0] != n->p.i[0] || m->nin != n->nin)
            continue;
        bool same = true;
        for (int k = 0; k < n->nin && same; k++)
            same = m->in[k] == n->in[k];
        if (!same || ins->outs[m->p.i[1]] >= 0)
            continue;
        ins->outs[m->p.i[1]] = b->slot_of[m->id];
        b->mark[m->id] = 0;
        b->avail[m->id] = 1;
    }
    return TGL_OK;
}

static tgl_status emit_op(builder *b, tgl_node *n, size_t pos, size_t hi)
{
    tgl_instr ins = {0};
    ins.kind = TGL_I_OP;
    ins.node = n;
    ins.impl = tgl_op_impl(n->op);
    ins.out = b->slot_of[n->id];
    ins.inplace = -1;
    ins.update = -1;
    if (n->op == TGL_OP_FUSED) {
        tgl_status st = gather_fused(b, n, pos + 1, hi, &ins);
        if (st)
            return st;
    }
    ins.nin = n->nin;
    ins.in = malloc(sizeof *ins.in * (size_t)(n->nin ? n->nin : 1));
    if (!ins.in) {
        free(ins.outs);
        return tgl_ctx_set_error(b->ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
    }
    for (int i = 0; i < n->nin; i++)
        ins.in[i] = b->slot_of[n->in[i]->id];
    tgl_status st = emit(b, ins);
    if (st) {
        free(ins.in);
        free(ins.outs);
    }
    return st;
}

static tgl_status emit_simple(builder *b, int kind, int32_t in0, int32_t out)
{
    tgl_instr ins = {0};
    ins.kind = kind;
    ins.out = out;
    ins.target = -1;
    ins.inplace = -1;
    ins.update = -1;
    if (in0 >= 0) {
        ins.in = malloc(sizeof *ins.in);
        if (!ins.in)
            return tgl_ctx_set_error(b->ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
        ins.in[0] = in0;
        ins.nin = 1;
    }
    tgl_status st = emit(b, ins);
    if (st)
        free(ins.in);
    return st;
}

/* Emits the nodes the roots need that are not yet available, in order.
 * An ifelse's branches are not among its needs: each branch is emitted
 * behind a jump, and what a branch computed is forgotten afterwards (the
 * other path, and the code after the ifelse, do not have it).  Nodes that
 * both a branch and later code need are ancestors of the ifelse, so they
 * come before it in the order and are computed unconditionally. */
static tgl_status emit_nodes(builder *b, int nroots, tgl_node *const *roots, bool scoped)
{
    tgl_node **stack = malloc(sizeof *stack * (b->count + 1));
    tgl_node **done = malloc(sizeof *done * (b->count + 1));
    if (!stack || !done) {
        free(stack);
        free(done);
        return tgl_ctx_set_error(b->ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
    }
    /* Mark the subset: reachable from the roots through unavailable
     * nodes, entering an ifelse only through its condition. */
    size_t sp = 0, ndone = 0, lo = b->count, hi = 0;
    for (int r = 0; r < nroots; r++)
        if (!b->avail[roots[r]->id] && !b->mark[roots[r]->id]) {
            b->mark[roots[r]->id] = 1;
            stack[sp++] = roots[r];
        }
    while (sp) {
        tgl_node *n = stack[--sp];
        size_t p = (size_t)b->pos_of[n->id];
        lo = p < lo ? p : lo;
        hi = p > hi ? p : hi;
        bool lazy = n->kind == TGL_NODE_APPLY && (tgl_op_impl(n->op)->flags & TGL_OPF_LAZY);
        for (int i = 0; i < (lazy ? 1 : n->nin); i++) {
            tgl_node *c = n->in[i];
            if (!b->avail[c->id] && !b->mark[c->id]) {
                b->mark[c->id] = 1;
                stack[sp++] = c;
            }
        }
    }
    tgl_status st = TGL_OK;
    for (size_t p = lo; p <= hi && hi >= lo && !st; p++) {
        tgl_node *n = b->order[p];
        if (!b->mark[n->id])
            continue;
        b->mark[n->id] = 0;
        if (n->kind == TGL_NODE_APPLY && (tgl_op_impl(n->op)->flags & TGL_OPF_LAZY)) {
            int32_t out = b->slot_of[n->id];
            int32_t jz = b->fn->ncode, j = -1;
            st = emit_simple(b, TGL_I_JUMPZ, b->slot_of[n->in[0]->id], -1);
            if (!st)
                st = emit_nodes(b, 1, &n->in[1], true);
            if (!st)
                st = emit_simple(b, TGL_I_MOVE, b->slot_of[n->in[1]->id], out);
            if (!st) {
                j = b->fn->ncode;
                st = emit_simple(b, TGL_I_JUMP, -1, -1);
            }
            if (!st) {
                b->fn->code[jz].target = b->fn->ncode;
                st = emit_nodes(b, 1, &n->in[2], true);
            }
            if (!st)
                st = emit_simple(b, TGL_I_MOVE, b->slot_of[n->in[2]->id], out);
            if (!st)
                b->fn->code[j].target = b->fn->ncode;
            b->fn->has_jumps = true;
        } else if (n->kind == TGL_NODE_APPLY) {
            st = emit_op(b, n, p, hi);
        }
        b->avail[n->id] = 1;
        done[ndone++] = n;
    }
    if (scoped)
        for (size_t k = 0; k < ndone; k++)
            b->avail[done[k]->id] = 0;
    free(stack);
    free(done);
    return st;
}

void tgl_function_free(tgl_function *fn)
{
    if (!fn)
        return;
    for (int32_t s = 0; s < fn->nslots; s++)
        tgl_array_release(fn->slot[s]);
    for (int32_t pc = 0; pc < fn->ncode; pc++) {
        free(fn->code[pc].in);
        free(fn->code[pc].free_slots);
        free(fn->code[pc].outs);
    }
    if (fn->last_out)
        for (int i = 0; i < fn->nout; i++)
            tgl_array_release(fn->last_out[i]);
    free(fn->last_out);
    free(fn->code);
    free(fn->slot);
    free(fn->slot_node);
    free(fn->slot_kind);
    free(fn->in_slot);
    free(fn->out_slot);
    free(fn->upd_var);
    free(fn->upd_slot);
    free(fn->roots);
    free(fn->name);
    tgl_ctx_release(fn->ctx);
    free(fn);
}

static const char *node_label(const tgl_node *n, char *buf, size_t size)
{
    if (n->name)
        snprintf(buf, size, "'%s'", n->name);
    else
        snprintf(buf, size, "an unnamed %s", n->kind == TGL_NODE_INPUT ? "input" : "variable");
    return buf;
}

tgl_status tgl_function_new(tgl_ctx *ctx, int nin, tgl_node *const *inputs, int nout,
                            tgl_node *const *outputs, int nupd, tgl_node *const *upd_vars,
                            tgl_node *const *upd_exprs, const tgl_compile_options *opt,
                            tgl_function **out)
{
    TGL_CHECK_CTX(ctx);
    const char *fn_ = "tgl_function_new";
    TGL_CHECK(out && nin >= 0 && nout >= 0 && nupd >= 0 && (nin == 0 || inputs) &&
                  (nout == 0 || outputs) && (nupd == 0 || (upd_vars && upd_exprs)),
              TGL_EINVAL, "%s: bad arguments", fn_);
    char buf[128], t1[96], t2[96];
    for (int i = 0; i < nin; i++) {
        TGL_CHECK(inputs[i], TGL_EINVAL, "%s: input %d is NULL", fn_, i + 1);
        TGL_CHECK(inputs[i]->kind == TGL_NODE_INPUT, TGL_EINVAL,
                  "%s: input %d is not a symbolic input (constants and shared variables are "
                  "not passed in)", fn_, i + 1);
        for (int j = 0; j < i; j++)
            TGL_CHECK(inputs[j] != inputs[i], TGL_EINVAL, "%s: input %d repeats input %d", fn_,
                      i + 1, j + 1);
    }
    for (int i = 0; i < nout; i++)
        TGL_CHECK(outputs[i], TGL_EINVAL, "%s: output %d is NULL", fn_, i + 1);
    for (int k = 0; k < nupd; k++) {
        TGL_CHECK(upd_vars[k] && upd_exprs[k], TGL_EINVAL, "%s: update %d is NULL", fn_, k + 1);
        TGL_CHECK(upd_vars[k]->kind == TGL_NODE_SHARED, TGL_EINVAL,
                  "%s: update %d targets %s, which is not a shared variable", fn_, k + 1,
                  node_label(upd_vars[k], buf, sizeof buf));
        tgl_type a = upd_vars[k]->type, e = upd_exprs[k]->type;
        TGL_CHECK(a.dtype == e.dtype && a.ndim == e.ndim && (e.bcast & a.bcast) == a.bcast,
                  TGL_EDTYPE, "%s: update %d of %s gives %s, the variable is %s", fn_, k + 1,
                  node_label(upd_vars[k], buf, sizeof buf), tgl_type_str(e, t1, sizeof t1),
                  tgl_type_str(a, t2, sizeof t2));
        for (int j = 0; j < k; j++)
            TGL_CHECK(upd_vars[j] != upd_vars[k], TGL_EINVAL,
                      "%s: %s is updated twice (updates %d and %d)", fn_,
                      node_label(upd_vars[k], buf, sizeof buf), j + 1, k + 1);
    }

    tgl_function *fn = calloc(1, sizeof *fn);
    if (!fn)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn_);
    tgl_ctx_retain(ctx);
    fn->ctx = ctx;
    fn->linker = opt ? opt->linker : TGL_LINKER_CVM;
    fn->profile = opt ? opt->profile : 0;
    fn->mode = opt ? opt->mode : TGL_MODE_FAST_RUN;
    fn->name = strdup(opt && opt->name ? opt->name : "function");
    fn->nin = nin;
    fn->nout = nout;
    fn->nupd = nupd;

    builder b = {0};
    b.ctx = ctx;
    b.fn = fn;
    int nroots = nout + nupd + nin;
    tgl_node **roots = malloc(sizeof *roots * (size_t)(nroots ? nroots : 1));
    tgl_status st = roots && fn->name ? TGL_OK : tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn_);
    if (!st) {
        /* The computed roots go through the rewrites; inputs stay. */
        int r = 0;
        for (int i = 0; i < nin; i++)
            roots[r++] = inputs[i];
        for (int i = 0; i < nout; i++)
            roots[r++] = outputs[i];
        for (int k = 0; k < nupd; k++)
            roots[r++] = upd_exprs[k];
        int level = fn->mode == TGL_MODE_FAST_COMPILE ? TGL_OPT_STABILIZE : TGL_OPT_FAST_RUN;
        st = tgl_optimize(ctx, level, nout + nupd, roots + nin, roots + nin);
        if (!st)
            st = tgl_toposort(ctx, nroots, roots, &b.order, &b.count);
    }
    uint32_t nids = ctx->graph.next_id;
    if (!st) {
        b.slot_of = malloc(sizeof *b.slot_of * (nids + 1));
        b.pos_of = malloc(sizeof *b.pos_of * (nids + 1));
        b.avail = calloc(nids + 1, 1);
        b.mark = calloc(nids + 1, 1);
        fn->nslots = (int32_t)b.count;
        fn->slot = calloc(b.count + 1, sizeof *fn->slot);
        fn->slot_node = calloc(b.count + 1, sizeof *fn->slot_node);
        fn->slot_kind = calloc(b.count + 1, 1);
        fn->in_slot = calloc((size_t)nin + 1, sizeof *fn->in_slot);
        fn->out_slot = calloc((size_t)nout + 1, sizeof *fn->out_slot);
        fn->upd_var = calloc((size_t)nupd + 1, sizeof *fn->upd_var);
        fn->upd_slot = calloc((size_t)nupd + 1, sizeof *fn->upd_slot);
        if (!b.slot_of || !b.pos_of || !b.avail || !b.mark || !fn->slot || !fn->slot_node ||
            !fn->slot_kind || !fn->in_slot || !fn->out_slot || !fn->upd_var || !fn->upd_slot)
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn_);
    }
    /* Slots: one per node; leaves are available from the start. */
    for (size_t i = 0; !st && i < b.count; i++) {
        tgl_node *n = b.order[i];
        b.slot_of[n->id] = (int32_t)i;
        b.pos_of[n->id] = (int32_t)i;
        fn->slot_node[i] = n;
        switch (n->kind) {
        case TGL_NODE_INPUT: {
            bool listed = false;
            for (int k = 0; k < nin; k++)
                listed |= inputs[k] == n;
            if (!listed)
                st = tgl_ctx_set_error(ctx, TGL_EINVAL,
                                       "%s: the outputs need the input %s (%s), which is not "
                                       "in the inputs list",
                                       fn_, node_label(n, buf, sizeof buf),
                                       tgl_type_str(n->type, t1, sizeof t1));
            fn->slot_kind[i] = TGL_SLOT_INPUT;
            b.avail[n->id] = 1;
            break;
        }
        case TGL_NODE_CONSTANT:
            fn->slot_kind[i] = TGL_SLOT_CONSTANT;
            tgl_array_retain(n->value);
            fn->slot[i] = n->value;
            b.avail[n->id] = 1;
            break;
        case TGL_NODE_SHARED:
            fn->slot_kind[i] = TGL_SLOT_SHARED;
            b.avail[n->id] = 1;
            break;
        default:
            fn->slot_kind[i] = TGL_SLOT_TEMP;
        }
    }
    for (int i = 0; !st && i < nin; i++)
        fn->in_slot[i] = b.slot_of[inputs[i]->id];
    for (int i = 0; !st && i < nout; i++)
        fn->out_slot[i] = b.slot_of[roots[nin + i]->id];
    for (int k = 0; !st && k < nupd; k++) {
        fn->upd_var[k] = upd_vars[k];
        fn->upd_slot[k] = b.slot_of[roots[nin + nout + k]->id];
    }
    if (!st && nroots)
        st = emit_nodes(&b, nroots, roots, false);
    fn->defer_start = fn->ncode;
    if (!st)
        st = tgl_plan_memory(ctx, fn, fn->mode != TGL_MODE_DEBUG);
    /* Generated kernels for the fused groups (not in FAST_COMPILE). */
    for (int32_t pc = 0; !st && pc < fn->ncode; pc++)
        if (fn->code[pc].kind == TGL_I_OP && fn->code[pc].node->op == TGL_OP_FUSED)
            st = tgl_cgen_prepare(ctx, tgl_fprog_get(ctx, (int32_t)fn->code[pc].node->p.i[0]));
    if (!st) {
        fn->roots = malloc(sizeof *fn->roots * (size_t)(nout + nupd + 1));
        if (fn->roots)
            memcpy(fn->roots, roots + nin, sizeof *fn->roots * (size_t)(nout + nupd));
    }
    free(roots);
    free(b.order);
    free(b.slot_of);
    free(b.pos_of);
    free(b.avail);
    free(b.mark);
    if (!st) {
        fn->last_out = calloc((size_t)nout + 1, sizeof *fn->last_out);
        if (!fn->last_out || !fn->roots)
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn_);
    }
    if (st) {
        tgl_function_free(fn);
        return st;
    }
    *out = fn;
    return TGL_OK;
}

/* ---- calling --------------------------------------------------------- */

int tgl_function_ninputs(const tgl_function *fn) { return fn->nin; }

tgl_node *tgl_function_root(const tgl_function *fn, int i)
{
    return i >= 0 && i < fn->nout + fn->nupd ? fn->roots[i] : NULL;
}

int tgl_function_inplace(const tgl_function *fn, const tgl_node *n)
{
    for (int32_t pc = 0; pc < fn->ncode; pc++)
        if (fn->code[pc].kind == TGL_I_OP && fn->code[pc].node == n)
            return fn->code[pc].inplace >= 0;
    return 0;
}
int tgl_function_noutputs(const tgl_function *fn) { return fn->nout; }

static tgl_status check_input(tgl_ctx *ctx, const tgl_function *fn, int i, const tgl_array *a)
{
    const tgl_node *n = fn->slot_node[fn->in_slot[i]];
    char want[96], got[96], label[128];
    if (!a)
        return tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: input %d is missing", fn->name, i + 1);
    bool ok = a->dtype_id == n->type.dtype && a->ndim == n->type.ndim;
    for (int d = 0; ok && d < a->ndim; d++)
        ok = !tgl_type_bcast(n->type, d) || a->shape[d] == 1;
    if (!ok)
        return tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: input %d (%s) expects %s, got %s",
                                 fn->name, i + 1, node_label(n, label, sizeof label),
                                 tgl_type_str(n->type, want, sizeof want),
                                 tgl_array_str(a, got, sizeof got));
    return TGL_OK;
}

/* Drops intermediates after a run (cvm) so they do not outlive the call. */
static void release_temps(tgl_function *fn)
{
    for (int32_t s = 0; s < fn->nslots; s++)
        if (fn->slot_kind[s] == TGL_SLOT_TEMP || fn->slot_kind[s] == TGL_SLOT_SHARED) {
            if (fn->slot_kind[s] == TGL_SLOT_TEMP && fn->linker == TGL_LINKER_CVM_NOGC)
                continue;
            tgl_array_release(fn->slot[s]);
            fn->slot[s] = NULL;
        }
}

/* True when a shares storage with an array the function does not own (an
 * input, a constant, a shared variable's value) or with one of the first
 * `nother` arrays of other[]. */
static bool aliased(const tgl_function *fn, const tgl_array *a, tgl_array *const *other,
                    int nother)
{
    for (int32_t s = 0; s < fn->nslots; s++)
        if (fn->slot_kind[s] != TGL_SLOT_TEMP && fn->slot[s] && fn->slot[s]->storage == a->storage)
            return true;
    for (int i = 0; i < nother; i++)
        if (other[i] && other[i]->storage == a->storage)
            return true;
    return false;
}

/* A new reference to a, or to a copy of it when it is aliased. */
static tgl_status own(tgl_ctx *ctx, const tgl_function *fn, tgl_array *a, tgl_array *const *other,
                      int nother, tgl_array **out)
{
    if (!aliased(fn, a, other, nother)) {
        tgl_array_retain(a);
        *out = a;
        return TGL_OK;
    }
    return tgl_array_copy(ctx, a, a->dtype_id, out);
}

/* One run on the bound inputs: program, outputs, then the updates.
 * Outputs and new values never share memory with inputs, constants,
 * shared variables or each other: whatever the caller does with an output
 * cannot change the function's state, and vice versa. */
static tgl_status run_once(tgl_ctx *ctx, tgl_function *fn)
{
    for (int32_t s = 0; s < fn->nslots; s++)
        if (fn->slot_kind[s] == TGL_SLOT_SHARED) {
            tgl_array_retain(fn->slot_node[s]->value);
            tgl_array_release(fn->slot[s]);
            fn->slot[s] = fn->slot_node[s]->value;
        }
    /* Last run's outputs go first, so their buffers can be reused. */
    for (int i = 0; i < fn->nout; i++) {
        tgl_array_release(fn->last_out[i]);
        fn->last_out[i] = NULL;
    }
    uint64_t t0 = fn->profile ? tgl_now_ns() : 0;
    /* The program but the deferred in-place updates (plan.c), which run
     * last: after the outputs and the other new values are taken (so
     * none of them sees a variable's new value), and after every shape
     * they need is known to fit (so a failure leaves the variables as
     * they were). */
    tgl_status st = tgl_cvm_run(ctx, fn, 0, fn->defer_start);
    tgl_array *newval[64], **nv = fn->nupd <= 64 ? newval : calloc((size_t)fn->nupd, sizeof *nv);
    if (!st && !nv)
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn->name);
    if (nv)
        for (int k = 0; k < fn->nupd; k++)
            nv[k] = NULL;
    bool *deferred = fn->nupd ? calloc((size_t)fn->nupd, sizeof *deferred) : NULL;
    for (int32_t pc = fn->defer_start; deferred && pc < fn->ncode; pc++)
        if (fn->code[pc].update >= 0)
            deferred[fn->code[pc].update] = true;
    /* New values of the updates computed so far: the variable's own value
     * may stay (an identity update); anything else aliased is copied. */
    for (int k = 0; k < fn->nupd && !st; k++) {
        if (deferred && deferred[k])
            continue;
        tgl_array *v = fn->slot[fn->upd_slot[k]];
        if (v == fn->upd_var[k]->value) {
            tgl_array_retain(v);
            nv[k] = v;
        } else {
            st = own(ctx, fn, v, nv, k, &nv[k]);
        }
    }
    for (int i = 0; i < fn->nout && !st; i++) {
        tgl_array *o = fn->slot[fn->out_slot[i]];
        tgl_array *seen[64];
        int ns = 0;
        for (int k = 0; k < fn->nupd && ns < 64; k++)
            if (nv[k])
                seen[ns++] = nv[k];
        for (int j = 0; j < i && ns < 64; j++)
            seen[ns++] = fn->last_out[j];
        st = own(ctx, fn, o, seen, ns, &fn->last_out[i]);
    }
    if (!st && fn->defer_start < fn->ncode) {
        st = tgl_cvm_check_deferred(ctx, fn);
        if (!st)
            st = tgl_cvm_run(ctx, fn, fn->defer_start, fn->ncode);
        for (int k = 0; k < fn->nupd && !st; k++) {
            if (!deferred[k])
                continue;
            tgl_array *v = fn->slot[fn->upd_slot[k]];
            if (v == fn->upd_var[k]->value) {
                tgl_array_retain(v); /* updated in place */
                nv[k] = v;
            } else {
                st = own(ctx, fn, v, nv, k, &nv[k]);
            }
        }
    }
    free(deferred);
    int made = fn->nupd;
    if (st) {
        for (int k = 0; nv && k < made; k++)
            tgl_array_release(nv[k]);
        if (nv != newval)
            free(nv);
        release_temps(fn);
        return st;
    }
    /* All updates read the values of this run before any is written. */
    for (int k = 0; k < fn->nupd; k++) {
        tgl_node *var = fn->upd_var[k];
        tgl_array_release(var->value);
        var->value = nv[k];
    }
    if (nv != newval)
        free(nv);
    /* A deferred update's slot holds the variable's own buffer: keeping it
     * (cvm_nogc) would make a third owner and stop the next in-place run. */
    for (int32_t pc = fn->defer_start; pc < fn->ncode; pc++) {
        tgl_array_release(fn->slot[fn->code[pc].out]);
        fn->slot[fn->code[pc].out] = NULL;
    }
    release_temps(fn);
    if (fn->profile) {
        fn->total_ns += tgl_now_ns() - t0;
        fn->ncalls++;
    }
    return TGL_OK;
}

tgl_status tgl_function_call(tgl_ctx *ctx, tgl_function *fn, tgl_array *const *in,
                             tgl_array **out, int trust)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(fn && (fn->nin == 0 || in) && (fn->nout == 0 || out), TGL_EINVAL,
              "tgl_function_call: bad arguments");
    /* The type check costs a few ns per input and keeps kernels in
     * bounds, so trust_input (which skips the Lua-side conversions) does
     * not skip it. */
    (void)trust;
    for (int i = 0; i < fn->nin; i++) {
        tgl_status st = check_input(ctx, fn, i, in[i]);
        if (st)
            return st;
    }
    for (int i = 0; i < fn->nin; i++) {
        int32_t s = fn->in_slot[i];
        tgl_array_retain(in[i]);
        tgl_array_release(fn->slot[s]);
        fn->slot[s] = in[i];
    }
    fn->have_inputs = true;
    tgl_status st = run_once(ctx, fn);
    if (st)
        return st;
    for (int i = 0; i < fn->nout; i++) {
        tgl_array_retain(fn->last_out[i]);
        out[i] = fn->last_out[i];
    }
    return TGL_OK;
}

tgl_status tgl_function_run(tgl_ctx *ctx, tgl_function *fn, int64_t n_calls)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(fn, TGL_EINVAL, "tgl_function_run: NULL function");
    TGL_CHECK(n_calls >= 0, TGL_EINVAL, "tgl_function_run: n_calls is negative");
    TGL_CHECK(fn->have_inputs || fn->nin == 0, TGL_EINVAL,
              "%s: call it once with its inputs before running it n_calls times", fn->name);
    for (int64_t k = 0; k < n_calls; k++) {
        tgl_status st = run_once(ctx, fn);
        if (st)
            return st;
    }
    return TGL_OK;
}

tgl_status tgl_function_output(tgl_ctx *ctx, tgl_function *fn, int i, tgl_array **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(fn && out && i >= 0 && i < fn->nout, TGL_EINVAL,
              "tgl_function_output: no output %d", i + 1);
    TGL_CHECK(fn->last_out[i], TGL_EINVAL, "tgl_function_output: the function has not run");
    tgl_array_retain(fn->last_out[i]);
    *out = fn->last_out[i];
    return TGL_OK;
}

tgl_status tgl_function_wait_compiled(tgl_ctx *ctx, tgl_function *fn)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(fn, TGL_EINVAL, "tgl_function_wait_compiled: NULL function");
    for (int32_t pc = 0; pc < fn->ncode; pc++)
        if (fn->code[pc].kind == TGL_I_OP && fn->code[pc].node->op == TGL_OP_FUSED)
            tgl_cgen_wait(tgl_fprog_get(ctx, (int32_t)fn->code[pc].node->p.i[0]));
    return TGL_OK;
}

/* ---- text ------------------------------------------------------------ */

typedef struct strbuf {
    char *p;
    size_t n, cap;
    bool failed;
} strbuf;

static void sb_printf(strbuf *sb, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void sb_printf(strbuf *sb, const char *fmt, ...)
{
    if (sb->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(sb->p ? sb->p + sb->n : NULL, sb->p ? sb->cap - sb->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            sb->failed = true;
            return;
        }
        if (sb->p && sb->n + (size_t)k < sb->cap) {
            sb->n += (size_t)k;
            return;
        }
        size_t nc = (sb->cap ? sb->cap * 2 : 1024) + (size_t)k;
        char *np = realloc(sb->p, nc);
        if (!np) {
            sb->failed = true;
            return;
        }
        sb->p = np;
        sb->cap = nc;
    }
}

static tgl_status sb_finish(tgl_ctx *ctx, strbuf *sb, char **text)
{
    if (sb->failed || !sb->p) {
        free(sb->p);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl: out of memory formatting text");
    }
    *text = sb->p;
    return TGL_OK;
}

void tgl_free(void *p)
{
    free(p);
}

static void slot_name(const tgl_function *fn, int32_t s, char *buf, size_t size)
{
    const tgl_node *n = fn->slot_node[s];
    if (n->name)
        snprintf(buf, size, "%s", n->name);
    else if (n->kind == TGL_NODE_CONSTANT && n->value->size == 1) {
        snprintf(buf, size, "%g", tgl_load_as_double(n->value->dtype_id, n->value->data, 0));
    } else
        snprintf(buf, size, "%c%d", n->kind == TGL_NODE_CONSTANT ? 'k' : 't', s);
}

tgl_status tgl_function_program(tgl_ctx *ctx, const tgl_function *fn, char **text)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(fn && text, TGL_EINVAL, "tgl_function_program: NULL argument");
    strbuf sb = {0};
    static const char *linkers[] = {"cvm", "cvm_nogc", "vm"};
    sb_printf(&sb, "function %s: %d inputs, %d outputs, %d updates, %d instructions (%s)\n",
              fn->name, fn->nin, fn->nout, fn->nupd, fn->ncode, linkers[fn->linker]);
    char a[64], t[96];
    for (int32_t pc = 0; pc < fn->ncode; pc++) {
        const tgl_instr *ins = &fn->code[pc];
        sb_printf(&sb, "%4d  ", pc);
        switch (ins->kind) {
        case TGL_I_OP:
            if (ins->nouts > 0) {
                const tgl_fprog *p = tgl_fprog_get(fn->ctx, (int32_t)ins->node->p.i[0]);
                int shown = 0;
                for (int k = 0; k < ins->nouts; k++)
                    if (ins->outs[k] >= 0) {
                        slot_name(fn, ins->outs[k], a, sizeof a);
                        sb_printf(&sb, "%s%s", shown++ ? ", " : "", a);
                    }
                sb_printf(&sb, " = fused#%d{", p->id);
                for (int j = 0; j < p->norig; j++)
                    sb_printf(&sb, "%s%s", j ? " " : "", tgl_op_name(p->orig[j]->op));
                sb_printf(&sb, "}[%s](", tgl_cgen_tier(p) == 2 ? "cc" : tgl_cgen_tier(p) == 1 ? "tcc" : "ref");
            } else {
                slot_name(fn, ins->out, a, sizeof a);
                sb_printf(&sb, "%s = %s(", a, tgl_op_name(ins->node->op));
            }
            for (int k = 0; k < ins->nin; k++) {
                slot_name(fn, ins->in[k], a, sizeof a);
                sb_printf(&sb, "%s%s", k ? ", " : "", a);
            }
            sb_printf(&sb, ")  %s", tgl_type_str(ins->node->type, t, sizeof t));
            if (ins->inplace >= 0) {
                slot_name(fn, ins->in[ins->inplace], a, sizeof a);
                sb_printf(&sb, "  [in place of %s]", a);
            }
            if (ins->node->op == TGL_OP_GEMM || ins->node->op == TGL_OP_GEMV ||
                ins->node->op == TGL_OP_GER)
                sb_printf(&sb, "  alpha=%g beta=%g", ins->node->p.f[0], ins->node->p.f[1]);
            if (ins->node->source)
                sb_printf(&sb, "  %s", ins->node->source);
            break;
        case TGL_I_JUMPZ:
            slot_name(fn, ins->in[0], a, sizeof a);
            sb_printf(&sb, "if not %s goto %d", a, ins->target);
            break;
        case TGL_I_JUMP:
            sb_printf(&sb, "goto %d", ins->target);
            break;
        case TGL_I_MOVE:
            slot_name(fn, ins->out, a, sizeof a);
            sb_printf(&sb, "%s = ", a);
            slot_name(fn, ins->in[0], a, sizeof a);
            sb_printf(&sb, "%s", a);
            break;
        }
        sb_printf(&sb, "\n");
    }
    for (int i = 0; i < fn->nout; i++) {
        slot_name(fn, fn->out_slot[i], a, sizeof a);
        sb_printf(&sb, "  output %d: %s\n", i + 1, a);
    }
    for (int k = 0; k < fn->nupd; k++) {
        slot_name(fn, fn->upd_slot[k], a, sizeof a);
        sb_printf(&sb, "  update %s <- %s\n", fn->upd_var[k]->name ? fn->upd_var[k]->name : "?",
                  a);
    }
    return sb_finish(ctx, &sb, text);
}

tgl_status tgl_function_profile(tgl_ctx *ctx, const tgl_function *fn, char **text)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(fn && text, TGL_EINVAL, "tgl_function_profile: NULL argument");
    TGL_CHECK(fn->profile, TGL_EINVAL,
              "tgl_function_profile: %s was not compiled with profile = true", fn->name);
    /* Aggregate by op. */
    uint64_t ns[TGL_NOPS] = {0}, calls[TGL_NOPS] = {0}, nodes[TGL_NOPS] = {0}, in_ops = 0;
    for (int32_t pc = 0; pc < fn->ncode; pc++) {
        const tgl_instr *ins = &fn->code[pc];
        if (ins->kind != TGL_I_OP)
            continue;
        ns[ins->node->op] += ins->ns;
        calls[ins->node->op] += ins->calls;
        nodes[ins->node->op]++;
        in_ops += ins->ns;
    }
    strbuf sb = {0};
    sb_printf(&sb, "Function profile: %s\n", fn->name);
    sb_printf(&sb, "  calls: %" PRIu64 ", total %.3f ms, in ops %.3f ms (%.1f%%), "
              "%.1f us per call\n",
              fn->ncalls, fn->total_ns / 1e6, in_ops / 1e6,
              fn->total_ns ? 100.0 * (double)in_ops / (double)fn->total_ns : 0.0,
              fn->ncalls ? fn->total_ns / 1e3 / (double)fn->ncalls : 0.0);
    sb_printf(&sb, "\n  %-18s %6s %10s %12s %7s %10s\n", "op", "nodes", "calls", "total ms",
              "share", "us/call");
    for (;;) {
        int best = -1;
        for (int op = 0; op < TGL_NOPS; op++)
            if (nodes[op] && (best < 0 || ns[op] > ns[best]))
                best = op;
        if (best < 0)
            break;
        sb_printf(&sb, "  %-18s %6" PRIu64 " %10" PRIu64 " %12.3f %6.1f%% %10.2f\n",
                  tgl_op_name(best), nodes[best], calls[best], ns[best] / 1e6,
                  in_ops ? 100.0 * (double)ns[best] / (double)in_ops : 0.0,
                  calls[best] ? ns[best] / 1e3 / (double)calls[best] : 0.0);
        nodes[best] = 0;
    }
    return sb_finish(ctx, &sb, text);
}
