/*
 * compile.c — compiling graphs into CVM programs (program.h).
 *
 * Rewrite the outputs and update values (opt/), sort the nodes they need,
 * give each a storage slot, and emit one instruction per op.  A
 * multi-output node is one instruction writing the slots of its OUTPUT
 * nodes (an OUTPUT node emits nothing).  An ifelse becomes a conditional
 * jump around the instructions only one branch needs, so the branch not
 * taken is never computed; each branch is a region of the program, which
 * the memory plan (plan.c) uses to free and reuse buffers inside and
 * around branches.  Each op instruction's kernel is bound on the
 * program's backend, once (an op the device cannot run fails here); then
 * the fused groups get their generated kernels and ops with a body their
 * inner programs.  tgl_program_new at the end reads as that list of steps.
 */
#include "engine/program.h"
#include "engine/fused_prog.h"
#include "engine/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct builder {
    tgl_ctx *ctx;
    tgl_program *prog;
    tgl_node **order;        /* every node, inputs before users            */
    size_t count;
    tgl_node_map pos;        /* node -> position in order (= its slot)     */
    int32_t *outs_at;        /* position of a multi-output node -> start of
                                its outputs' slots in outslot              */
    int32_t *outslot;
    unsigned char *avail;    /* position -> computed on the current path   */
    unsigned char *mark;     /* scratch: position -> in the current subset */
    int32_t cap, region_cap;
    int32_t region;          /* the region being emitted                   */
    tgl_node **stack;        /* scratch for mark_subset                    */
    int32_t *done;           /* positions emitted, innermost subset last   */
    size_t ndone;
} builder;

/* The slot of node n: its position in the order. */
static int32_t slot_of(const builder *b, const tgl_node *n)
{
    return (int32_t)tgl_node_map_geti(&b->pos, n, -1);
}

static tgl_status emit(builder *b, tgl_instr ins)
{
    tgl_program *prog = b->prog;
    if (prog->ncode == b->cap) {
        int32_t nc = b->cap ? b->cap * 2 : 64;
        tgl_instr *c = realloc(prog->code, sizeof *c * (size_t)nc);
        if (!c)
            return tgl_ctx_set_error(b->ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
        prog->code = c;
        b->cap = nc;
    }
    ins.region = b->region;
    prog->code[prog->ncode++] = ins;
    return TGL_OK;
}

static tgl_status emit_op(builder *b, tgl_node *n)
{
    tgl_instr ins = {0};
    ins.kind = TGL_I_OP;
    ins.node = n;
    ins.impl = tgl_op_impl(n->op);
    ins.inplace = -1;
    ins.update = -1;
    ins.target = -1;
    ins.nouts = n->nout;
    ins.nin = n->nin;
    ins.outs = malloc(sizeof *ins.outs * (size_t)n->nout);
    ins.in = malloc(sizeof *ins.in * (size_t)(n->nin ? n->nin : 1));
    if (!ins.outs || !ins.in) {
        free(ins.outs);
        free(ins.in);
        return tgl_ctx_set_error(b->ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
    }
    int32_t p = slot_of(b, n);
    if (n->nout == 1) {
        ins.outs[0] = p;
    } else {
        for (int k = 0; k < n->nout; k++)
            ins.outs[k] = b->outslot[b->outs_at[p] + k];
    }
    ins.out = ins.outs[0];
    for (int i = 0; i < n->nin; i++)
        ins.in[i] = slot_of(b, n->in[i]);
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

/* Opens a region (an ifelse branch) under the current one. */
static tgl_status open_region(builder *b, int32_t *saved)
{
    tgl_program *prog = b->prog;
    if (prog->nregions == b->region_cap) {
        int32_t nc = b->region_cap ? b->region_cap * 2 : 8;
        tgl_region *r = realloc(prog->region, sizeof *r * (size_t)nc);
        if (!r)
            return tgl_ctx_set_error(b->ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
        prog->region = r;
        b->region_cap = nc;
    }
    prog->region[prog->nregions] = (tgl_region){b->region, -1, -1};
    *saved = b->region;
    b->region = prog->nregions++;
    return TGL_OK;
}

static void close_region(builder *b, int32_t saved)
{
    b->prog->region[b->region].end = b->prog->ncode - 1;
    b->region = saved;
}

/* Marks the nodes the roots need that are not available yet (entering an
 * ifelse only through its condition); [lo, hi] spans their positions. */
static tgl_status mark_subset(builder *b, tgl_node *const *roots, int nroots, tgl_node **stack,
                              size_t *lo, size_t *hi)
{
    size_t sp = 0;
    *lo = b->count;
    *hi = 0;
    for (int r = 0; r < nroots; r++) {
        int32_t q = slot_of(b, roots[r]);
        if (!b->avail[q] && !b->mark[q]) {
            b->mark[q] = 1;
            stack[sp++] = roots[r];
        }
    }
    while (sp) {
        tgl_node *n = stack[--sp];
        size_t p = (size_t)slot_of(b, n);
        *lo = p < *lo ? p : *lo;
        *hi = p > *hi ? p : *hi;
        bool lazy = n->kind == TGL_NODE_APPLY && (tgl_op_impl(n->op)->flags & TGL_OPF_LAZY);
        for (int i = 0; i < (lazy ? 1 : n->nin); i++) {
            int32_t q = slot_of(b, n->in[i]);
            if (!b->avail[q] && !b->mark[q]) {
                b->mark[q] = 1;
                stack[sp++] = n->in[i];
            }
        }
    }
    return TGL_OK;
}

/* Most ifelse nested inside one another (emission recurses once per
 * level, with a small C frame; the graph's depth costs nothing). */
#define MAX_IFELSE_NESTING 2000

/* Emits the nodes the roots need that are not yet available, in order.
 * An ifelse's branches are not among its needs: each branch is emitted
 * behind a jump, in a region of its own, and what a branch computed is
 * forgotten afterwards (the other path, and the code after the ifelse, do
 * not have it).  Nodes that both a branch and later code need are
 * ancestors of the ifelse, so they come before it in the order and are
 * computed unconditionally. */
static tgl_status emit_nodes(builder *b, int nroots, tgl_node *const *roots, bool scoped,
                             int nesting)
{
    if (nesting > MAX_IFELSE_NESTING)
        return tgl_ctx_set_error(b->ctx, TGL_EINVAL,
                                 "tgl_function_new: ifelse nested more than %d deep",
                                 MAX_IFELSE_NESTING);
    size_t lo, hi;
    tgl_status st = mark_subset(b, roots, nroots, b->stack, &lo, &hi);
    size_t done0 = b->ndone;
    for (size_t p = lo; p <= hi && hi >= lo && !st; p++) {
        tgl_node *n = b->order[p];
        if (!b->mark[p])
            continue;
        b->mark[p] = 0;
        if (n->kind == TGL_NODE_APPLY && (tgl_op_impl(n->op)->flags & TGL_OPF_LAZY)) {
            int32_t out = (int32_t)p, saved = 0, then_r = -1;
            int32_t jz = b->prog->ncode, j = -1;
            st = emit_simple(b, TGL_I_JUMPZ, slot_of(b, n->in[0]), -1);
            if (!st)
                st = open_region(b, &saved);
            if (!st) {
                then_r = b->region;
                st = emit_nodes(b, 1, &n->in[1], true, nesting + 1);
            }
            if (!st)
                st = emit_simple(b, TGL_I_MOVE, slot_of(b, n->in[1]), out);
            if (!st) {
                close_region(b, saved);
                j = b->prog->ncode;
                st = emit_simple(b, TGL_I_JUMP, -1, -1);
            }
            if (!st) {
                b->prog->code[jz].target = b->prog->ncode;
                st = open_region(b, &saved);
            }
            if (!st) {
                b->prog->region[b->region].sibling = then_r;
                b->prog->region[then_r].sibling = b->region;
                st = emit_nodes(b, 1, &n->in[2], true, nesting + 1);
            }
            if (!st)
                st = emit_simple(b, TGL_I_MOVE, slot_of(b, n->in[2]), out);
            if (!st) {
                close_region(b, saved);
                b->prog->code[j].target = b->prog->ncode;
            }
        } else if (n->kind == TGL_NODE_APPLY && n->op != TGL_OP_OUTPUT) {
            st = emit_op(b, n);
        }
        b->avail[p] = 1;
        b->done[b->ndone++] = (int32_t)p;
    }
    if (scoped) {
        for (size_t k = done0; k < b->ndone; k++)
            b->avail[b->done[k]] = 0;
        b->ndone = done0;
    }
    return st;
}

/* Binds each op instruction's kernel on the program's backend, once, so
 * that the CVM calls it directly and an op the device cannot run fails
 * here, naming the op and the device.  A fused program's nodes are
 * checked too: its reference path (tier 0) runs their kernels. */
static tgl_status bind_kernels(tgl_ctx *ctx, tgl_program *prog)
{
    tgl_status st = TGL_OK;
    for (int32_t pc = 0; pc < prog->ncode && !st; pc++) {
        tgl_instr *ins = &prog->code[pc];
        if (ins->kind != TGL_I_OP)
            continue;
        if (tgl_op_needs_kernel(ins->node)) {
            st = tgl_backend_op_kernel(ctx, prog->backend, ins->node, &ins->kern);
        } else if (ins->node->op == TGL_OP_FUSED) {
            const tgl_fused_prog *p = tgl_fused_prog_of(ins->node);
            const tgl_op_kernel *k;
            for (int32_t j = 0; j < p->norig && !st; j++)
                st = tgl_backend_op_kernel(ctx, prog->backend, p->orig[j], &k);
        }
    }
    return st;
}

void tgl_program_free(tgl_program *prog)
{
    if (!prog)
        return;
    for (int32_t pc = 0; pc < prog->prepared_to; pc++)
        if (prog->code[pc].kind == TGL_I_OP && prog->code[pc].node->op == TGL_OP_FUSED)
            tgl_backend_unuse(tgl_fused_prog_of(prog->code[pc].node), prog->device);
    for (int32_t pc = 0; pc < prog->ncode; pc++) {
        free(prog->code[pc].in);
        free(prog->code[pc].free_slots);
        free(prog->code[pc].outs);
        tgl_program_free(prog->code[pc].sub);
    }
    for (size_t i = 0; i < prog->nowned; i++)
        tgl_node_unref(prog->owned[i]);
    free(prog->owned);
    if (prog->op_pc.keys)
        tgl_node_map_free(&prog->op_pc);
    free(prog->code);
    free(prog->region);
    free(prog->slot_node);
    free(prog->slot_kind);
    free(prog->in_slot);
    free(prog->out_slot);
    free(prog->upd_var);
    free(prog->upd_slot);
    free(prog->upd_deferred);
    free(prog->shared_slot);
    free(prog->temp_slot);
    free(prog->foreign_slot);
    free(prog->roots);
    free(prog->name);
    if (prog->ctx)
        tgl_ctx_release(prog->ctx);
    free(prog);
}

static const char *node_label(const tgl_node *n, char *buf, size_t size)
{
    if (n->name)
        snprintf(buf, size, "'%s'", n->name);
    else
        snprintf(buf, size, "an unnamed %s", n->kind == TGL_NODE_INPUT ? "input" : "variable");
    return buf;
}

/* The argument checks of tgl_function_new: every message names the
 * input, output or update by its 1-based number. */
static tgl_status check_args(tgl_ctx *ctx, int nin, tgl_node *const *inputs, int nout,
                             tgl_node *const *outputs, int nupd, tgl_node *const *upd_vars,
                             tgl_node *const *upd_exprs)
{
    const char *fn_ = "tgl_function_new";
    char buf[128], t1[96], t2[96];
    TGL_CHECK(nin >= 0 && nout >= 0 && nupd >= 0 && (nin == 0 || inputs) &&
                  (nout == 0 || outputs) && (nupd == 0 || (upd_vars && upd_exprs)),
              TGL_EINVAL, "%s: bad arguments", fn_);
    tgl_node_map seen;
    tgl_status st = tgl_node_map_init(ctx, &seen);
    for (int i = 0; i < nin && !st; i++) {
        if (!inputs[i])
            st = tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: input %d is NULL", fn_, i + 1);
        else if (inputs[i]->kind != TGL_NODE_INPUT)
            st = tgl_ctx_set_error(ctx, TGL_EINVAL,
                                   "%s: input %d is not a symbolic input (constants and shared "
                                   "variables are not passed in)", fn_, i + 1);
        else if (tgl_node_map_has(&seen, inputs[i]))
            st = tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: input %d repeats input %d", fn_, i + 1,
                                   (int)tgl_node_map_geti(&seen, inputs[i], 0) + 1);
        else
            st = tgl_node_map_seti(ctx, &seen, inputs[i], i);
    }
    tgl_node_map_free(&seen);
    for (int i = 0; i < nout && !st; i++)
        if (!outputs[i])
            st = tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: output %d is NULL", fn_, i + 1);
        else if (outputs[i]->nout > 1)
            st = tgl_ctx_set_error(ctx, TGL_EINVAL,
                                   "%s: output %d has %d values; pass each (tgl_node_output)",
                                   fn_, i + 1, outputs[i]->nout);
    if (!st)
        st = tgl_node_map_init(ctx, &seen);
    else
        return st;
    for (int k = 0; k < nupd && !st; k++) {
        if (!upd_vars[k] || !upd_exprs[k]) {
            st = tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: update %d is NULL", fn_, k + 1);
            break;
        }
        if (upd_vars[k]->kind != TGL_NODE_SHARED) {
            st = tgl_ctx_set_error(ctx, TGL_EINVAL,
                                   "%s: update %d targets %s, which is not a shared variable",
                                   fn_, k + 1, node_label(upd_vars[k], buf, sizeof buf));
            break;
        }
        tgl_type a = upd_vars[k]->type, e = upd_exprs[k]->type;
        if (!(a.dtype == e.dtype && a.ndim == e.ndim && (e.bcast & a.bcast) == a.bcast) ||
            upd_exprs[k]->nout > 1) {
            st = tgl_ctx_set_error(ctx, TGL_EDTYPE, "%s: update %d of %s gives %s, the variable is %s",
                                   fn_, k + 1, node_label(upd_vars[k], buf, sizeof buf),
                                   tgl_type_str(e, t1, sizeof t1), tgl_type_str(a, t2, sizeof t2));
            break;
        }
        if (tgl_node_map_has(&seen, upd_vars[k])) {
            st = tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: %s is updated twice (updates %d and %d)",
                                   fn_, node_label(upd_vars[k], buf, sizeof buf),
                                   (int)tgl_node_map_geti(&seen, upd_vars[k], 0) + 1, k + 1);
            break;
        }
        st = tgl_node_map_seti(ctx, &seen, upd_vars[k], k);
    }
    tgl_node_map_free(&seen);
    return st;
}

/* Slot bookkeeping that the run-time side reads: which slots are shared,
 * temporaries, or foreign (never handed out uncopied). */
static tgl_status slot_lists(tgl_ctx *ctx, tgl_program *prog)
{
    int32_t n = prog->nslots + 1;
    prog->shared_slot = malloc(sizeof *prog->shared_slot * (size_t)n);
    prog->temp_slot = malloc(sizeof *prog->temp_slot * (size_t)n);
    prog->foreign_slot = malloc(sizeof *prog->foreign_slot * (size_t)n);
    if (!prog->shared_slot || !prog->temp_slot || !prog->foreign_slot)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
    for (int32_t s = 0; s < prog->nslots; s++) {
        switch (prog->slot_kind[s]) {
        case TGL_SLOT_SHARED:
            prog->shared_slot[prog->nshared++] = s;
            prog->foreign_slot[prog->nforeign++] = s;
            break;
        case TGL_SLOT_TEMP:
            prog->temp_slot[prog->ntemp++] = s;
            break;
        default:
            prog->foreign_slot[prog->nforeign++] = s;
        }
    }
    return TGL_OK;
}

/* The new program's header: options, name, counts (the context retained). */
static tgl_status new_program(tgl_ctx *ctx, int nin, int nout, int nupd,
                              const tgl_compile_options *opt, tgl_program **out)
{
    tgl_program *prog = calloc(1, sizeof *prog);
    if (!prog)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
    tgl_ctx_retain(ctx);
    prog->ctx = ctx;
    prog->linker = opt ? opt->linker : TGL_LINKER_CVM;
    prog->profile = opt ? opt->profile : 0;
    prog->mode = opt ? opt->mode : TGL_MODE_FAST_RUN;
    prog->device = ctx->config.device; /* the setting when it is compiled */
    prog->backend = tgl_backend_get(prog->device);
    prog->name = strdup(opt && opt->name ? opt->name : "function");
    prog->nin = nin;
    prog->nout = nout;
    prog->nupd = nupd;
    *out = prog;
    return prog->name ? TGL_OK
                      : tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
}

/* roots = inputs, outputs, update values; the computed ones rewritten in
 * place at the program's level, then every node they need in order, each
 * with its position. */
static tgl_status rewrite_and_order(builder *b, int nin, tgl_node *const *inputs, int nout,
                                    tgl_node *const *outputs, int nupd,
                                    tgl_node *const *upd_exprs, tgl_node **roots)
{
    int r = 0;
    for (int i = 0; i < nin; i++)
        roots[r++] = inputs[i];
    for (int i = 0; i < nout; i++)
        roots[r++] = outputs[i];
    for (int k = 0; k < nupd; k++)
        roots[r++] = upd_exprs[k];
    int level = b->prog->mode == TGL_MODE_FAST_COMPILE ? TGL_OPT_STABILIZE : TGL_OPT_FAST_RUN;
    tgl_status st = tgl_optimize(b->ctx, level, nout + nupd, roots + nin, roots + nin);
    if (!st)
        st = tgl_toposort(b->ctx, r, roots, &b->order, &b->count);
    if (!st)
        st = tgl_index_order(b->ctx, b->order, b->count, &b->pos);
    return st;
}

/* The per-node tables of the builder and the program, and the program's
 * hold on the nodes it runs (and on the updated variables). */
static tgl_status alloc_tables(builder *b, int nin, int nout, int nupd,
                               tgl_node *const *upd_vars)
{
    tgl_program *prog = b->prog;
    size_t n1 = b->count + 1;
    b->avail = calloc(n1, 1);
    b->mark = calloc(n1, 1);
    b->outs_at = malloc(sizeof *b->outs_at * n1);
    b->stack = malloc(sizeof *b->stack * n1);
    b->done = malloc(sizeof *b->done * n1);
    prog->nslots = (int32_t)b->count;
    prog->slot_node = calloc(n1, sizeof *prog->slot_node);
    prog->slot_kind = calloc(n1, 1);
    prog->in_slot = calloc((size_t)nin + 1, sizeof *prog->in_slot);
    prog->out_slot = calloc((size_t)nout + 1, sizeof *prog->out_slot);
    prog->upd_var = calloc((size_t)nupd + 1, sizeof *prog->upd_var);
    prog->upd_slot = calloc((size_t)nupd + 1, sizeof *prog->upd_slot);
    prog->upd_deferred = calloc((size_t)nupd + 1, sizeof *prog->upd_deferred);
    prog->owned = calloc(n1 + (size_t)nupd, sizeof *prog->owned);
    if (!b->avail || !b->mark || !b->outs_at || !b->stack || !b->done || !prog->slot_node ||
        !prog->slot_kind || !prog->in_slot || !prog->out_slot || !prog->upd_var ||
        !prog->upd_slot || !prog->upd_deferred || !prog->owned)
        return tgl_ctx_set_error(b->ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
    for (size_t i = 0; i < b->count; i++) {
        tgl_node_ref(b->order[i]);
        prog->owned[prog->nowned++] = b->order[i];
    }
    for (int k = 0; k < nupd; k++) {
        tgl_node_ref(upd_vars[k]);
        prog->owned[prog->nowned++] = upd_vars[k];
    }
    return TGL_OK;
}

/* Slots: one per node; leaves are available from the start.  The outputs
 * of multi-output nodes get their slots listed per node.  Every input
 * node the roots need must be listed in inputs. */
static tgl_status assign_slots(builder *b, int nin, tgl_node *const *inputs)
{
    const char *fn_ = "tgl_function_new";
    tgl_program *prog = b->prog;
    char buf[128], t1[96];
    size_t nmulti = 0;
    for (size_t i = 0; i < b->count; i++)
        if (b->order[i]->nout > 1)
            nmulti += (size_t)b->order[i]->nout;
    if (!(b->outslot = malloc(sizeof *b->outslot * (nmulti + 1))))
        return tgl_ctx_set_error(b->ctx, TGL_ENOMEM, "%s: out of memory", fn_);
    nmulti = 0;
    tgl_node_map listed;
    tgl_status st = tgl_node_map_init(b->ctx, &listed);
    if (st)
        return st;
    for (int k = 0; k < nin && !st; k++)
        st = tgl_node_map_seti(b->ctx, &listed, inputs[k], 1);
    for (size_t i = 0; !st && i < b->count; i++) {
        tgl_node *n = b->order[i];
        prog->slot_node[i] = n;
        b->outs_at[i] = -1;
        if (n->nout > 1) {
            b->outs_at[i] = (int32_t)nmulti;
            for (int k = 0; k < n->nout; k++)
                b->outslot[nmulti + (size_t)k] = -1;
            nmulti += (size_t)n->nout;
        }
        if (n->kind == TGL_NODE_APPLY && n->op == TGL_OP_OUTPUT)
            b->outslot[b->outs_at[slot_of(b, n->in[0])] + n->p.i[0]] = (int32_t)i;
        switch (n->kind) {
        case TGL_NODE_INPUT:
            if (!tgl_node_map_has(&listed, n))
                st = tgl_ctx_set_error(b->ctx, TGL_EINVAL,
                                       "%s: the outputs need the input %s (%s), which is not "
                                       "in the inputs list",
                                       fn_, node_label(n, buf, sizeof buf),
                                       tgl_type_str(n->type, t1, sizeof t1));
            prog->slot_kind[i] = TGL_SLOT_INPUT;
            b->avail[i] = 1;
            break;
        case TGL_NODE_CONSTANT:
            prog->slot_kind[i] = TGL_SLOT_CONSTANT;
            b->avail[i] = 1;
            break;
        case TGL_NODE_SHARED:
            prog->slot_kind[i] = TGL_SLOT_SHARED;
            b->avail[i] = 1;
            break;
        default:
            prog->slot_kind[i] = TGL_SLOT_TEMP;
        }
    }
    tgl_node_map_free(&listed);
    return st;
}

/* The slots of the inputs, outputs and update values (roots: inputs,
 * outputs, update values, as rewrite_and_order left them). */
static void root_slots(builder *b, tgl_node *const *roots, tgl_node *const *upd_vars)
{
    tgl_program *prog = b->prog;
    int nin = prog->nin, nout = prog->nout;
    for (int i = 0; i < nin; i++)
        prog->in_slot[i] = slot_of(b, roots[i]);
    for (int i = 0; i < nout; i++)
        prog->out_slot[i] = slot_of(b, roots[nin + i]);
    for (int k = 0; k < prog->nupd; k++) {
        prog->upd_var[k] = upd_vars[k];
        prog->upd_slot[k] = slot_of(b, roots[nin + nout + k]);
    }
}

/* The instructions: region 0 is the straight-line code. */
static tgl_status emit_program(builder *b, int nroots, tgl_node *const *roots)
{
    tgl_program *prog = b->prog;
    int32_t unused;
    tgl_status st = open_region(b, &unused);
    b->region = 0;
    if (!st && nroots)
        st = emit_nodes(b, nroots, roots, false, 0);
    if (!st)
        prog->region[0].end = prog->ncode - 1;
    prog->defer_start = prog->ncode;
    return st;
}

/* Generated kernels for the fused groups, on the program's device (at
 * tier 0 where there is no compiler). */
static tgl_status prepare_fused(tgl_ctx *ctx, tgl_program *prog)
{
    tgl_status st = TGL_OK;
    for (int32_t pc = 0; !st && pc < prog->ncode; pc++) {
        if (prog->code[pc].kind == TGL_I_OP && prog->code[pc].node->op == TGL_OP_FUSED)
            st = tgl_backend_prepare(ctx, prog->device, tgl_fused_prog_of(prog->code[pc].node));
        if (!st)
            prog->prepared_to = pc + 1;
    }
    return st;
}

/* Inner programs of ops with a body (scan), compiled with the same
 * options by the op's own hook (ops.h). */
static tgl_status compile_inner(tgl_ctx *ctx, tgl_program *prog)
{
    tgl_status st = TGL_OK;
    for (int32_t pc = 0; !st && pc < prog->ncode; pc++) {
        tgl_instr *ins = &prog->code[pc];
        if (ins->kind == TGL_I_OP && ins->impl->prepare_inner) {
            st = ins->impl->prepare_inner(ctx, ins->node, prog, &ins->sub);
            prog->nsub++;
        }
    }
    return st;
}

/* Lookups the program keeps: node -> instruction, and the optimized
 * outputs and update values. */
static tgl_status index_program(tgl_ctx *ctx, tgl_program *prog, tgl_node *const *computed)
{
    tgl_status st = tgl_node_map_init(ctx, &prog->op_pc);
    for (int32_t pc = 0; !st && pc < prog->ncode; pc++)
        if (prog->code[pc].kind == TGL_I_OP)
            st = tgl_node_map_seti(ctx, &prog->op_pc, prog->code[pc].node, pc);
    if (st)
        return st;
    size_t n = (size_t)(prog->nout + prog->nupd);
    prog->roots = malloc(sizeof *prog->roots * (n + 1));
    if (!prog->roots)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
    memcpy(prog->roots, computed, sizeof *prog->roots * n);
    return TGL_OK;
}

static void builder_free(builder *b)
{
    free(b->order);
    if (b->pos.keys)
        tgl_node_map_free(&b->pos);
    free(b->avail);
    free(b->mark);
    free(b->outs_at);
    free(b->outslot);
    free(b->stack);
    free(b->done);
}

tgl_status tgl_program_new(tgl_ctx *ctx, int nin, tgl_node *const *inputs, int nout,
                           tgl_node *const *outputs, int nupd, tgl_node *const *upd_vars,
                           tgl_node *const *upd_exprs, const tgl_compile_options *opt,
                           tgl_program **out)
{
    tgl_status st = check_args(ctx, nin, inputs, nout, outputs, nupd, upd_vars, upd_exprs);
    if (st)
        return st;
    tgl_program *prog = NULL;
    builder b = {0};
    int nroots = nout + nupd + nin;
    tgl_node **roots = malloc(sizeof *roots * (size_t)(nroots ? nroots : 1));
    st = new_program(ctx, nin, nout, nupd, opt, &prog);
    if (!st && !roots)
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
    b.ctx = ctx;
    b.prog = prog;
    if (!st)
        st = rewrite_and_order(&b, nin, inputs, nout, outputs, nupd, upd_exprs, roots);
    if (!st)
        st = alloc_tables(&b, nin, nout, nupd, upd_vars);
    if (!st)
        st = assign_slots(&b, nin, inputs);
    if (!st) {
        root_slots(&b, roots, upd_vars);
        st = emit_program(&b, nroots, roots);
    }
    if (!st)
        st = bind_kernels(ctx, prog);
    if (!st)
        st = slot_lists(ctx, prog);
    if (!st)
        st = tgl_plan_memory(ctx, prog, prog->mode != TGL_MODE_DEBUG);
    if (!st)
        tgl_plan_shapes(prog);
    if (!st)
        st = prepare_fused(ctx, prog);
    if (!st)
        st = compile_inner(ctx, prog);
    if (!st)
        st = index_program(ctx, prog, roots + nin);
    free(roots);
    builder_free(&b);
    if (st) {
        tgl_program_free(prog);
        return st;
    }
    *out = prog;
    return TGL_OK;
}
