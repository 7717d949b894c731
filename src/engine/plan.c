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
 * Graph inputs, constants, shared variables, outputs and update values
 * are never released early nor overwritten.  DEBUG mode plans no in-place
 * steps: it reruns the reference kernels on the inputs afterwards.
 */
#include "engine/cvm.h"
#include "engine/fprog.h"

#include <stdlib.h>

tgl_status tgl_plan_memory(tgl_ctx *ctx, tgl_function *fn, bool inplace)
{
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
        if (fn->linker != TGL_LINKER_CVM || fn->has_jumps)
            continue;
        for (int k = 0; k < ins->nin; k++) {
            int32_t s = ins->in[k];
            if (kept[s] || last[s] != pc || (ins->inplace == k))
                continue;
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
