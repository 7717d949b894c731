/*
 * plan.c — the memory plan of a CVM program (after ggml's gallocr: use
 * counts, then decisions per instruction).
 *
 *   release: under the cvm linker each intermediate is released right
 *            after the instruction that reads it last, so its buffer
 *            returns to the frame's pool for the instructions that follow.
 *   in place: an instruction may take over an input's buffer for its
 *            (first) output when that input is an intermediate read for
 *            the last time here, the op allows it (tgl_opimpl.inplace)
 *            and the types match.  At run time the CVM still checks that
 *            nobody else holds the buffer (reference count 1, not a view).
 *   deferred updates: an update whose value an op computes from the
 *            variable itself (W - lr g as a gemm accumulating into W,
 *            b - lr g as a fused kernel over b), when nothing else reads
 *            that value, moves to the end of the program and writes into
 *            the variable's own buffer: no new buffer, no copy of W.  The
 *            CVM runs these last, after the outputs are taken and after
 *            checking that their shapes fit, so a failing call still
 *            leaves every variable as it was.
 *
 * Branches.  An ifelse compiles to jumps around two regions (compile.c);
 * the plan works per region, so one ifelse does not switch anything off
 * elsewhere.  A slot is defined in one region (the one its writer sits
 * in; leaves in region 0) and read there or in regions nested inside it.
 * A read in a nested region counts, for the defining region, as a read
 * by the whole ifelse it is part of; when that is the last read, the slot
 * is released at the end of both branches (exactly one of them runs).  In
 * place steps need the input defined in the instruction's own region;
 * deferred updates need the instruction in region 0.
 *
 * Graph inputs, constants, outputs and update values are never released
 * early nor overwritten; shared variables only by their own deferred
 * update.  DEBUG mode plans no in-place steps: it reruns the reference
 * kernels on the inputs afterwards.
 */
#include "engine/program.h"
#include "engine/fused_prog.h"

#include <stdlib.h>
#include <string.h>

/* Marks the deferred updates and moves them to the end of the program
 * (jump targets follow). */
static tgl_status plan_deferred(tgl_ctx *ctx, tgl_program *prog)
{
    prog->defer_start = prog->ncode;
    if (prog->nupd == 0)
        return TGL_OK;
    bool *move = calloc((size_t)prog->ncode + 1, sizeof *move);
    int32_t *writer = malloc(sizeof *writer * (size_t)(prog->nslots + 1));
    int32_t *var_slot = malloc(sizeof *var_slot * (size_t)(prog->nupd + 1));
    /* How many instructions read each slot, and the last reader. */
    int32_t *nreaders = calloc((size_t)prog->nslots + 1, sizeof *nreaders);
    int32_t *last_read = malloc(sizeof *last_read * (size_t)(prog->nslots + 1));
    tgl_status st = TGL_OK;
    if (!move || !writer || !var_slot || !nreaders || !last_read) {
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
        goto done;
    }
    for (int32_t s = 0; s < prog->nslots; s++)
        writer[s] = last_read[s] = -1;
    for (int32_t pc = 0; pc < prog->ncode; pc++) {
        const tgl_instr *ins = &prog->code[pc];
        if (ins->kind == TGL_I_OP && ins->nouts == 1)
            writer[ins->out] = pc;
        for (int k = 0; k < ins->nin; k++) {
            nreaders[ins->in[k]]++;
            last_read[ins->in[k]] = pc;
        }
    }
    for (int k = 0; k < prog->nupd; k++)
        var_slot[k] = -1;
    for (int32_t s = 0; s < prog->nslots; s++)
        if (prog->slot_kind[s] == TGL_SLOT_SHARED)
            for (int k = 0; k < prog->nupd; k++)
                if (prog->slot_node[s] == prog->upd_var[k])
                    var_slot[k] = s;
    /* How many roots (outputs, updates) each slot is. */
    int nmove = 0;
    for (int k = 0; k < prog->nupd; k++) {
        int32_t u = prog->upd_slot[k], w = var_slot[k];
        int32_t at = writer[u];
        if (w < 0 || at < 0)
            continue;
        tgl_instr *ins = &prog->code[at];
        /* An op whose kernel computes its output shape (a fused
         * elementwise kernel: b - lr g) qualifies with one output: the
         * CVM computes that shape before any deferred update runs
         * (tgl_cvm_check_deferred, which reads at most 16 inputs), and
         * takes the variable's buffer only when the shape is the
         * variable's (take_buffer); otherwise the update writes a new
         * buffer as any other would. */
        if (ins->region != 0 || !ins->impl->inplace || ins->impl->view || ins->sub || ins->nin > 16 ||
            (ins->impl->shape_k && ins->nouts != 1))
            continue;
        int i = ins->impl->inplace(ins->node);
        if (ins->node->op == TGL_OP_FUSED) {
            /* any input of the output's type will do: the variable's */
            i = -1;
            for (int kk = 0; kk < ins->nin && i < 0; kk++)
                if (ins->in[kk] == w && tgl_fused_may_overwrite(ins->node, kk))
                    i = kk;
        }
        if (i < 0 || ins->in[i] != w || !tgl_type_eq(ins->node->type, prog->upd_var[k]->type))
            continue;
        /* The variable is read once here and by nothing later; nothing
         * reads the new value (no instruction, no output, no other
         * update). */
        int uses = 0;
        for (int kk = 0; kk < ins->nin; kk++)
            uses += ins->in[kk] == w;
        bool ok = uses == 1 && nreaders[u] == 0 && last_read[w] == at;
        for (int o = 0; ok && o < prog->nout; o++)
            ok = prog->out_slot[o] != u;
        for (int kk = 0; ok && kk < prog->nupd; kk++)
            ok = kk == k || prog->upd_slot[kk] != u;
        if (!ok)
            continue;
        ins->inplace = i;
        ins->update = k;
        prog->upd_deferred[k] = true;
        move[at] = true;
        nmove++;
    }
    if (nmove) {
        /* Stable partition: the deferred ones keep their order, last.  A
         * jump to pc goes to the first kept instruction at or after pc. */
        tgl_instr *code = malloc(sizeof *code * (size_t)prog->ncode);
        int32_t *newpc = malloc(sizeof *newpc * (size_t)(prog->ncode + 1));
        if (!code || !newpc) {
            free(code);
            free(newpc);
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
            goto done;
        }
        int32_t n = 0;
        for (int32_t pc = 0; pc < prog->ncode; pc++) {
            newpc[pc] = n;
            if (!move[pc])
                code[n++] = prog->code[pc];
        }
        newpc[prog->ncode] = n;
        prog->defer_start = n;
        for (int32_t pc = 0; pc < prog->ncode; pc++)
            if (move[pc])
                code[n++] = prog->code[pc];
        for (int32_t pc = 0; pc < prog->defer_start; pc++)
            if (code[pc].kind == TGL_I_JUMP || code[pc].kind == TGL_I_JUMPZ)
                code[pc].target = newpc[code[pc].target];
        for (int32_t r = 1; r < prog->nregions; r++)
            prog->region[r].end = newpc[prog->region[r].end];
        prog->region[0].end = prog->defer_start - 1;
        memcpy(prog->code, code, sizeof *code * (size_t)prog->ncode);
        free(code);
        free(newpc);
    }
done:
    free(move);
    free(writer);
    free(var_slot);
    free(nreaders);
    free(last_read);
    return st;
}

/* Appends s to the instruction's release list (once). */
static tgl_status add_free(tgl_ctx *ctx, tgl_instr *ins, int32_t s)
{
    for (int j = 0; j < ins->nfree; j++)
        if (ins->free_slots[j] == s)
            return TGL_OK;
    int32_t *f = realloc(ins->free_slots, sizeof *f * (size_t)(ins->nfree + 1));
    if (!f)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
    f[ins->nfree++] = s;
    ins->free_slots = f;
    return TGL_OK;
}

/* The innermost region containing both a and b. */
static int32_t common_region(const tgl_program *prog, int32_t a, int32_t b)
{
    for (int32_t x = a; x >= 0; x = x > 0 ? prog->region[x].parent : -1)
        for (int32_t y = b; y >= 0; y = y > 0 ? prog->region[y].parent : -1)
            if (x == y)
                return x;
    return 0;
}

/* The child of region `of` on the path from region r up to it, or -1
 * when r is `of` itself. */
static int32_t child_under(const tgl_program *prog, int32_t r, int32_t of)
{
    int32_t c = -1;
    while (r != of && r > 0) {
        c = r;
        r = prog->region[r].parent;
    }
    return r == of ? c : -2; /* -2: not nested (should not happen) */
}

tgl_status tgl_plan_memory(tgl_ctx *ctx, tgl_program *prog, bool inplace)
{
    if (inplace) {
        tgl_status st0 = plan_deferred(ctx, prog);
        if (st0)
            return st0;
    }
    int32_t n = prog->nslots + 1;
    int32_t *def = malloc(sizeof *def * (size_t)n);     /* defining region    */
    int32_t *last = malloc(sizeof *last * (size_t)n);   /* last (lifted) read */
    int32_t *lastc = malloc(sizeof *lastc * (size_t)n); /* its branch, or -1  */
    int32_t *nread = calloc((size_t)n, sizeof *nread);  /* reads at `last`    */
    int32_t *producer = malloc(sizeof *producer * (size_t)n);
    bool *kept = calloc((size_t)n, sizeof *kept);
    tgl_status st = TGL_OK;
    if (!def || !last || !lastc || !nread || !producer || !kept) {
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
        goto done;
    }
    for (int32_t s = 0; s < prog->nslots; s++) {
        def[s] = 0;
        last[s] = lastc[s] = producer[s] = -1;
        kept[s] = prog->slot_kind[s] != TGL_SLOT_TEMP;
    }
    for (int i = 0; i < prog->nout; i++)
        kept[prog->out_slot[i]] = true;
    for (int i = 0; i < prog->nupd; i++)
        kept[prog->upd_slot[i]] = true;
    /* Defining regions: an ifelse's result is written by the MOVEs at the
     * end of its branches and belongs to the region around them; a node
     * both branches need is computed in each, and belongs to the region
     * that holds both. */
    for (int32_t s = 0; s < prog->nslots; s++)
        def[s] = -1;
    for (int32_t pc = 0; pc < prog->ncode; pc++) {
        const tgl_instr *ins = &prog->code[pc];
        int32_t r = -1;
        if (ins->kind == TGL_I_OP)
            r = ins->region;
        else if (ins->kind == TGL_I_MOVE)
            r = ins->region > 0 ? prog->region[ins->region].parent : 0;
        for (int k = 0; r >= 0 && k < (ins->kind == TGL_I_OP ? ins->nouts : 1); k++) {
            int32_t s = ins->kind == TGL_I_OP ? ins->outs[k] : ins->out;
            if (s < 0)
                continue;
            def[s] = def[s] < 0 ? r : common_region(prog, def[s], r);
            if (ins->kind == TGL_I_OP)
                producer[s] = pc;
        }
    }
    for (int32_t s = 0; s < prog->nslots; s++)
        if (def[s] < 0)
            def[s] = 0;
    /* Last reads, lifted to the defining region: a read inside a nested
     * branch stands at the end of the ifelse that holds it. */
    for (int32_t pc = 0; pc < prog->ncode; pc++) {
        const tgl_instr *ins = &prog->code[pc];
        for (int k = 0; k < ins->nin; k++) {
            int32_t s = ins->in[k];
            int32_t c = child_under(prog, ins->region, def[s]);
            if (c == -2) {
                kept[s] = true; /* unexpected shape: keep it, be safe */
                continue;
            }
            int32_t at = pc, branch = -1;
            if (c >= 0) {
                /* The else branch of that ifelse ends last. */
                int32_t other = prog->region[c].sibling >= 0 ? prog->region[c].sibling : c;
                at = prog->region[c].end > prog->region[other].end ? prog->region[c].end
                                                                   : prog->region[other].end;
                branch = c;
            }
            if (at > last[s]) {
                last[s] = at;
                lastc[s] = branch;
                nread[s] = 0;
            }
            if (at == last[s])
                nread[s]++;
        }
    }

    bool gc = prog->linker == TGL_LINKER_CVM;
    bool views_only = prog->linker == TGL_LINKER_CVM_NOGC;
    for (int32_t pc = 0; pc < prog->ncode && !st; pc++) {
        tgl_instr *ins = &prog->code[pc];
        if (ins->update >= 0)
            continue; /* planned by plan_deferred */
        if (ins->kind == TGL_I_OP) {
            ins->inplace = -1;
            const tgl_opimpl *impl = ins->impl;
            if (inplace && impl->inplace && !impl->view) {
                int i = impl->inplace(ins->node);
                if (i >= 0) {
                    int32_t s = ins->in[i];
                    /* Read only here (once), a temp of this region. */
                    if (!kept[s] && last[s] == pc && lastc[s] < 0 && nread[s] == 1 &&
                        def[s] == ins->region)
                        ins->inplace = i;
                }
            }
        }
    }
    /* Releases.  cvm_nogc keeps buffers for reuse; views own none, and a
     * view kept alive would pin its base's storage (blocking in-place
     * updates): they are released after their last reader too. */
    for (int32_t s = 0; s < prog->nslots && !st && (gc || views_only); s++) {
        if (kept[s] || last[s] < 0)
            continue;
        if (views_only && !(producer[s] >= 0 && prog->code[producer[s]].impl &&
                            prog->code[producer[s]].impl->view))
            continue;
        if (lastc[s] < 0) {
            tgl_instr *ins = &prog->code[last[s]];
            if (ins->kind == TGL_I_OP && ins->inplace >= 0 && ins->in[ins->inplace] == s)
                continue; /* its buffer moved to the output */
            st = add_free(ctx, ins, s);
        } else {
            /* Read inside an ifelse: released at the end of both
             * branches (the MOVE of each branch's value). */
            int32_t c = lastc[s], other = prog->region[c].sibling;
            st = add_free(ctx, &prog->code[prog->region[c].end], s);
            if (!st && other >= 0)
                st = add_free(ctx, &prog->code[prog->region[other].end], s);
        }
    }
done:
    free(def);
    free(last);
    free(lastc);
    free(nread);
    free(producer);
    free(kept);
    return st;
}

/* ---- shape-stable instructions --------------------------------------------
 *
 * The shape-stable fast path (cvm.c): when a call's inputs and shared
 * variables have the shapes of the previous call, an instruction whose
 * output shapes are a function of those shapes alone takes them from its
 * frame's cache instead of asking its op.  Which instructions qualify is
 * decided here, conservatively, by two facts per slot:
 *
 *   stable   its shape is a function of the call's input and shared shapes;
 *   shaped   its value is (axes_size, shape, constants, and elementwise or
 *            arange over such values: the sizes a graph computes from
 *            shapes, as a mean's divisor or a gradient's arange).
 *
 * Each op states in the catalog (the shape column of its TGL_OPS line,
 * ops.h) what its output shapes follow from (shape_from) and when its
 * value is a size (size_from); an op whose shapes are known only by
 * running it (scan; an ifelse, whose condition's value picks the branch)
 * is never stable, so nothing downstream of it is either.  A slot written
 * twice (a node computed in both branches of an ifelse) keeps what both
 * writes agree on. */

bool tgl_plan_shape_from_shapes(const tgl_instr *ins)
{
    if (ins->kind != TGL_I_OP)
        return false;
    switch (tgl_opdef_get(ins->node->op)->shape_from) {
    case TGL_SHAPE_FROM_SHAPES:
    case TGL_SHAPE_FROM_SHAPE0:
    case TGL_SHAPE_FROM_RANKS:
        return true;
    case TGL_SHAPE_FROM_SHAPE0_VALUES:
        return ins->nin == 1; /* else the shape or the bounds are values */
    case TGL_SHAPE_FROM_VALUES:
    case TGL_SHAPE_FROM_RUN:
        break;
    }
    return false;
}

void tgl_plan_shapes(tgl_program *prog)
{
    int32_t n = prog->nslots + 1;
    uint8_t *stable = calloc((size_t)n, 1), *shaped = calloc((size_t)n, 1);
    uint8_t *written = calloc((size_t)n, 1);
    /* The vm linker (debugging) asks every op for every shape, every
     * call; out of memory, no instruction takes the fast path either. */
    if (!stable || !shaped || !written || prog->linker == TGL_LINKER_VM) {
        for (int32_t pc = 0; pc < prog->ncode; pc++)
            prog->code[pc].shape_stable = 0;
        goto done;
    }
    for (int32_t s = 0; s < prog->nslots; s++) {
        stable[s] = prog->slot_kind[s] != TGL_SLOT_TEMP;
        shaped[s] = prog->slot_kind[s] == TGL_SLOT_CONSTANT;
    }
    for (int32_t pc = 0; pc < prog->ncode; pc++) {
        tgl_instr *ins = &prog->code[pc];
        bool s = false, v = false;
        if (ins->kind == TGL_I_MOVE) {
            /* an ifelse's result: its shape is the branch's that ran,
             * which the condition's value picks */
            s = v = false;
        } else if (ins->kind == TGL_I_OP) {
            bool all_s = true, all_v = true, rest_v = true;
            for (int i = 0; i < ins->nin; i++) {
                all_s = all_s && stable[ins->in[i]];
                all_v = all_v && shaped[ins->in[i]];
                if (i > 0)
                    rest_v = rest_v && shaped[ins->in[i]];
            }
            bool x_s = ins->nin > 0 && stable[ins->in[0]];
            const tgl_opdef *d = tgl_opdef_get(ins->node->op);
            switch (d->shape_from) {
            case TGL_SHAPE_FROM_RUN: s = false; break;
            case TGL_SHAPE_FROM_SHAPES: s = all_s; break;
            case TGL_SHAPE_FROM_SHAPE0: s = x_s; break;
            case TGL_SHAPE_FROM_RANKS: s = true; break;
            case TGL_SHAPE_FROM_VALUES: s = all_v; break;
            case TGL_SHAPE_FROM_SHAPE0_VALUES: s = x_s && rest_v; break;
            }
            switch (d->size_from) {
            case TGL_SIZE_NONE: v = false; break;
            case TGL_SIZE_VALUES: v = all_v; break;
            case TGL_SIZE_VALUE0: v = ins->nin > 0 && shaped[ins->in[0]]; break;
            case TGL_SIZE_SHAPES: v = all_s; break;
            case TGL_SIZE_SHAPE0: v = x_s; break;
            }
            ins->shape_stable = s;
        } else {
            continue;
        }
        int nw = ins->kind == TGL_I_OP ? ins->nouts : 1;
        for (int k = 0; k < nw; k++) {
            int32_t o = ins->kind == TGL_I_OP ? ins->outs[k] : ins->out;
            if (o < 0)
                continue;
            stable[o] = written[o] ? stable[o] && s : s;
            shaped[o] = written[o] ? shaped[o] && v : v;
            written[o] = 1;
        }
    }
done:
    free(stable);
    free(shaped);
    free(written);
}
