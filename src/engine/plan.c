/*
 * plan.c — the memory plan of a CVM program (after ggml's gallocr: use
 * counts, then decisions per instruction).
 *
 *   release: under the cvm linker each intermediate is released right
 *            after the instruction that reads it last, so its buffer
 *            returns to the allocator for the instructions that follow.
 *   in place: an instruction may take over an input's buffer for its
 *            output when that input is an intermediate read for the last
 *            time here, the op allows it (tgl_opimpl.inplace) and the
 *            types match.  At run time the CVM still checks that nobody
 *            else holds the buffer (reference count 1, not a view).
 *
 *   deferred updates: an update whose value an op computes from the
 *            variable itself (W - lr g as a gemm accumulating into W,
 *            b - lr g as a fused kernel over b), when nothing else reads
 *            that value, moves to the end of the program and writes into
 *            the variable's own buffer: no new buffer, no copy of W.  The
 *            CVM runs these last, after the outputs are taken and after
 *            checking that their shapes fit, so a failing call still
 *            leaves every variable as it was.  At run time the buffer is
 *            taken only if the variable and its slot are its only owners.
 *
 * Graph inputs, constants, outputs and update values are never released
 * early nor overwritten; shared variables only by their own deferred
 * update.  DEBUG mode plans no in-place steps: it reruns the reference
 * kernels on the inputs afterwards.
 */
#include "engine/cvm.h"
#include "engine/fprog.h"

#include <stdlib.h>
#include <string.h>

/* True when instruction pc reads slot s. */
static bool reads(const tgl_instr *ins, int32_t s)
{
    for (int k = 0; k < ins->nin; k++)
        if (ins->in[k] == s)
            return true;
    return false;
}

/* Marks the deferred updates and moves them to the end of the program. */
static tgl_status plan_deferred(tgl_ctx *ctx, tgl_function *fn)
{
    fn->defer_start = fn->ncode;
    if (fn->has_jumps || fn->nupd == 0)
        return TGL_OK;
    bool *move = calloc((size_t)fn->ncode + 1, sizeof *move);
    if (!move)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
    int nmove = 0;
    for (int k = 0; k < fn->nupd; k++) {
        int32_t u = fn->upd_slot[k], w = -1;
        for (int32_t s = 0; s < fn->nslots; s++)
            if (fn->slot_node[s] == fn->upd_var[k])
                w = s;
        int32_t at = -1;
        for (int32_t pc = 0; pc < fn->ncode; pc++)
            if (fn->code[pc].kind == TGL_I_OP && fn->code[pc].out == u && !fn->code[pc].nouts)
                at = pc;
        if (w < 0 || at < 0)
            continue;
        tgl_instr *ins = &fn->code[at];
        if (!ins->impl->inplace || ins->impl->view)
            continue;
        int i = ins->impl->inplace(ins->node);
        if (i < 0 || ins->in[i] != w || !tgl_type_eq(ins->node->type, fn->upd_var[k]->type))
            continue;
        /* The variable is read once here; nothing reads the new value
         * (no instruction, no output, no other update). */
        bool ok = true;
        int uses = 0;
        for (int kk = 0; kk < ins->nin; kk++)
            uses += ins->in[kk] == w;
        ok = uses == 1;
        for (int32_t pc = 0; ok && pc < fn->ncode; pc++)
            ok = !reads(&fn->code[pc], u) && (pc <= at || !reads(&fn->code[pc], w));
        for (int o = 0; ok && o < fn->nout; o++)
            ok = fn->out_slot[o] != u;
        for (int kk = 0; ok && kk < fn->nupd; kk++)
            ok = kk == k || fn->upd_slot[kk] != u;
        if (!ok)
            continue;
        ins->inplace = i;
        ins->update = k;
        move[at] = true;
        nmove++;
    }
    if (nmove) {
        /* Stable partition: the deferred ones keep their order, last. */
        tgl_instr *code = malloc(sizeof *code * (size_t)fn->ncode);
        if (!code) {
            free(move);
            return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
        }
        int32_t n = 0;
        for (int32_t pc = 0; pc < fn->ncode; pc++)
            if (!move[pc])
                code[n++] = fn->code[pc];
        fn->defer_start = n;
        for (int32_t pc = 0; pc < fn->ncode; pc++)
            if (move[pc])
                code[n++] = fn->code[pc];
        memcpy(fn->code, code, sizeof *code * (size_t)fn->ncode);
        free(code);
    }
    free(move);
    return TGL_OK;
}

tgl_status tgl_plan_memory(tgl_ctx *ctx, tgl_function *fn, bool inplace)
{
    if (inplace) {
        tgl_status st0 = plan_deferred(ctx, fn);
        if (st0)
            return st0;
    }
    int32_t *last = malloc(sizeof *last * (size_t)(fn->nslots + 1));
    bool *kept = calloc((size_t)fn->nslots + 1, sizeof *kept);
    if (!last || !kept) {
        free(last);
        free(kept);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
    }
    for (int32_t s = 0; s < fn->nslots; s++) {
        last[s] = -1;
        kept[s] = fn->slot_kind[s] != TGL_SLOT_TEMP;
    }
    for (int i = 0; i < fn->nout; i++)
        kept[fn->out_slot[i]] = true;
    for (int i = 0; i < fn->nupd; i++)
        kept[fn->upd_slot[i]] = true;
    for (int32_t pc = 0; pc < fn->ncode; pc++)
        for (int k = 0; k < fn->code[pc].nin; k++)
            last[fn->code[pc].in[k]] = pc;

    tgl_status st = TGL_OK;
    for (int32_t pc = 0; pc < fn->ncode && !st; pc++) {
        tgl_instr *ins = &fn->code[pc];
        if (ins->update >= 0)
            continue; /* planned by plan_deferred */
        ins->inplace = -1;
        if (ins->kind != TGL_I_OP)
            continue;
        const tgl_opimpl *impl = ins->impl;
        if (inplace && !fn->has_jumps && impl->inplace && !impl->view) {
            int i = impl->inplace(ins->node);
            bool reduces = ins->node->op == TGL_OP_FUSED &&
                           tgl_fprog_get(ctx, (int32_t)ins->node->p.i[0])->reduce_op >= 0;
            if (i >= 0 && !reduces) {
                int32_t s = ins->in[i];
                /* The slot must be read only here (once) and be a temp. */
                int uses = 0;
                for (int k = 0; k < ins->nin; k++)
                    uses += ins->in[k] == s;
                if (!kept[s] && last[s] == pc && uses == 1)
                    ins->inplace = i;
            }
        }
        /* cvm_nogc keeps buffers for reuse; views own none, and a view
         * kept alive would pin its base's storage (blocking in-place
         * updates): they are released after their last reader too. */
        bool views_only = fn->linker == TGL_LINKER_CVM_NOGC;
        if ((fn->linker != TGL_LINKER_CVM && !views_only) || fn->has_jumps)
            continue;
        for (int k = 0; k < ins->nin; k++) {
            int32_t s = ins->in[k];
            if (kept[s] || last[s] != pc || (ins->inplace == k))
                continue;
            if (views_only) {
                /* the producer of s: a view op? */
                bool is_view = false;
                for (int32_t q = 0; q < pc && !is_view; q++)
                    is_view = fn->code[q].kind == TGL_I_OP && fn->code[q].out == s &&
                              fn->code[q].impl->view;
                if (!is_view)
                    continue;
            }
            bool dup = false;
            for (int j = 0; j < ins->nfree; j++)
                dup |= ins->free_slots[j] == s;
            if (dup)
                continue;
            int32_t *f = realloc(ins->free_slots, sizeof *f * (size_t)(ins->nfree + 1));
            if (!f) {
                st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_function_new: out of memory");
                break;
            }
            f[ins->nfree++] = s;
            ins->free_slots = f;
        }
    }
    free(last);
    free(kept);
    return st;
}
