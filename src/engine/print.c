/*
 * print.c — compiled functions as text: the CVM program, one instruction
 * per line (what tgl.debugprint(f) shows), and the per-op profile.
 */
#include "engine/program.h"
#include "engine/fused_prog.h"
#include "engine/strbuf.h"
#include "engine/backend.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- text ------------------------------------------------------------ */

void tgl_free(void *p)
{
    free(p);
}

static void slot_name(const tgl_program *fn, int32_t s, char *buf, size_t size)
{
    const tgl_node *n = fn->slot_node[s];
    if (n->name)
        snprintf(buf, size, "%s", n->name);
    else if (n->kind == TGL_NODE_CONSTANT && n->value->size == 1) {
        double v = 0;
        if (tgl_array_scalar(fn->ctx, n->value, &v) == TGL_OK)
            snprintf(buf, size, "%g", v);
        else
            snprintf(buf, size, "k%d", s);
    } else
        snprintf(buf, size, "%c%d", n->kind == TGL_NODE_CONSTANT ? 'k' : 't', s);
}

/* A program as text, its inner programs (scan bodies) indented under the
 * instruction that runs them. */
static void render_program(tgl_sb *sbp, const tgl_program *fn, int indent)
{
    tgl_sb sb = *sbp;
    static const char *linkers[] = {"cvm", "cvm_nogc", "vm"};
    if (indent == 0)
        tgl_sb_printf(&sb, "function %s: %d inputs, %d outputs, %d updates, %d instructions (%s)\n",
                      fn->name, fn->nin, fn->nout, fn->nupd, fn->ncode, linkers[fn->linker]);
    else
        tgl_sb_printf(&sb, "%*sbody of %s: %d inputs, %d outputs, %d instructions\n", indent, "",
                      fn->name, fn->nin, fn->nout, fn->ncode);
    char a[64], t[96];
    for (int32_t pc = 0; pc < fn->ncode; pc++) {
        const tgl_instr *ins = &fn->code[pc];
        tgl_sb_printf(&sb, "%*s%4d  ", indent, "", pc);
        switch (ins->kind) {
        case TGL_I_OP:
            if (ins->node->payload) {
                int shown = 0;
                for (int k = 0; k < ins->nouts; k++)
                    if (ins->outs[k] >= 0) {
                        slot_name(fn, ins->outs[k], a, sizeof a);
                        tgl_sb_printf(&sb, "%s%s", shown++ ? ", " : "", a);
                    }
                char label[512];
                tgl_node_payload_label(ins->node, label, sizeof label);
                tgl_sb_printf(&sb, " = %s", label);
                if (ins->node->op == TGL_OP_FUSED) {
                    int tier = tgl_backend_tier(tgl_fused_prog_of(ins->node), fn->device);
                    tgl_sb_printf(&sb, "[%s]", tier == 2 ? "cc" : tier == 1 ? "tcc" : "ref");
                }
                tgl_sb_printf(&sb, "(");
            } else if (ins->nouts > 1) {
                int shown = 0;
                for (int k = 0; k < ins->nouts; k++)
                    if (ins->outs[k] >= 0) {
                        slot_name(fn, ins->outs[k], a, sizeof a);
                        tgl_sb_printf(&sb, "%s%s", shown++ ? ", " : "", a);
                    }
                tgl_sb_printf(&sb, " = %s(", tgl_op_name(ins->node->op));
            } else {
                slot_name(fn, ins->out, a, sizeof a);
                tgl_sb_printf(&sb, "%s = %s(", a, tgl_op_name(ins->node->op));
            }
            for (int k = 0; k < ins->nin; k++) {
                slot_name(fn, ins->in[k], a, sizeof a);
                tgl_sb_printf(&sb, "%s%s", k ? ", " : "", a);
            }
            tgl_sb_printf(&sb, ")  %s", tgl_type_str(ins->node->type, t, sizeof t));
            if (ins->inplace >= 0) {
                slot_name(fn, ins->in[ins->inplace], a, sizeof a);
                tgl_sb_printf(&sb, "  [in place of %s]", a);
            }
            if (ins->once)
                tgl_sb_printf(&sb, "  [first step only]");
            if (ins->node->op == TGL_OP_GEMM || ins->node->op == TGL_OP_GEMV ||
                ins->node->op == TGL_OP_GER)
                tgl_sb_printf(&sb, "  alpha=%g beta=%g", ins->node->p.f[0], ins->node->p.f[1]);
            if (ins->node->source)
                tgl_sb_printf(&sb, "  %s", ins->node->source);
            break;
        case TGL_I_JUMPZ:
            slot_name(fn, ins->in[0], a, sizeof a);
            tgl_sb_printf(&sb, "if not %s goto %d", a, ins->target);
            break;
        case TGL_I_JUMP:
            tgl_sb_printf(&sb, "goto %d", ins->target);
            break;
        case TGL_I_MOVE:
            slot_name(fn, ins->out, a, sizeof a);
            tgl_sb_printf(&sb, "%s = ", a);
            slot_name(fn, ins->in[0], a, sizeof a);
            tgl_sb_printf(&sb, "%s", a);
            break;
        }
        if (ins->nfree) {
            tgl_sb_printf(&sb, "  [frees");
            for (int k = 0; k < ins->nfree; k++) {
                slot_name(fn, ins->free_slots[k], a, sizeof a);
                tgl_sb_printf(&sb, " %s", a);
            }
            tgl_sb_printf(&sb, "]");
        }
        tgl_sb_printf(&sb, "\n");
        if (ins->sub)
            render_program(&sb, ins->sub, indent + 6);
    }
    for (int i = 0; i < fn->nout; i++) {
        slot_name(fn, fn->out_slot[i], a, sizeof a);
        tgl_sb_printf(&sb, "%*s  output %d: %s\n", indent, "", i + 1, a);
    }
    for (int k = 0; k < fn->nupd; k++) {
        slot_name(fn, fn->upd_slot[k], a, sizeof a);
        tgl_sb_printf(&sb, "  update %s <- %s\n", fn->upd_var[k]->name ? fn->upd_var[k]->name : "?",
                  a);
    }
    *sbp = sb;
}

tgl_status tgl_function_program(tgl_ctx *ctx, const tgl_function *f, char **text)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(f && text, TGL_EINVAL, "tgl_function_program: NULL argument");
    tgl_sb sb = {0};
    render_program(&sb, f->prog, 0);
    return tgl_sb_finish(&sb, ctx, "tgl", text);
}

/* The per-op table of a program run on frame fr; then, for each
 * instruction with a body (scan), the body's table indented under it. */
static void render_profile(tgl_sb *sbp, const tgl_program *fn, const tgl_frame *fr, int indent)
{
    tgl_sb sb = *sbp;
    /* Aggregate by op. */
    uint64_t ns[TGL_NOPS] = {0}, calls[TGL_NOPS] = {0}, nodes[TGL_NOPS] = {0}, in_ops = 0;
    for (int32_t pc = 0; pc < fn->ncode; pc++) {
        const tgl_instr *ins = &fn->code[pc];
        if (ins->kind != TGL_I_OP)
            continue;
        ns[ins->node->op] += fr->ins_ns[pc];
        calls[ins->node->op] += fr->ins_calls[pc];
        nodes[ins->node->op]++;
        in_ops += fr->ins_ns[pc];
    }
    if (indent == 0) {
        tgl_sb_printf(&sb, "Function profile: %s\n", fn->name);
        tgl_sb_printf(&sb, "  calls: %" PRIu64 ", total %.3f ms, in ops %.3f ms (%.1f%%), "
                      "%.1f us per call\n",
                      fr->ncalls, fr->total_ns / 1e6, in_ops / 1e6,
                      fr->total_ns ? 100.0 * (double)in_ops / (double)fr->total_ns : 0.0,
                      fr->ncalls ? fr->total_ns / 1e3 / (double)fr->ncalls : 0.0);
    } else {
        tgl_sb_printf(&sb, "\n%*sbody of scan '%s': %" PRIu64 " steps, in ops %.3f ms, "
                      "%.3f us per step\n", indent, "", fn->name, fr->ncalls, in_ops / 1e6,
                      fr->ncalls ? in_ops / 1e3 / (double)fr->ncalls : 0.0);
    }
    tgl_sb_printf(&sb, "\n%*s  %-18s %6s %10s %12s %7s %10s\n", indent, "", "op", "nodes",
                  "calls", "total ms", "share", "us/call");
    for (;;) {
        int best = -1;
        for (int op = 0; op < TGL_NOPS; op++)
            if (nodes[op] && (best < 0 || ns[op] > ns[best]))
                best = op;
        if (best < 0)
            break;
        tgl_sb_printf(&sb, "%*s  %-18s %6" PRIu64 " %10" PRIu64 " %12.3f %6.1f%% %10.2f\n",
                      indent, "", tgl_op_name(best), nodes[best], calls[best], ns[best] / 1e6,
                      in_ops ? 100.0 * (double)ns[best] / (double)in_ops : 0.0,
                      calls[best] ? ns[best] / 1e3 / (double)calls[best] : 0.0);
        nodes[best] = 0;
    }
    for (int32_t pc = 0; pc < fn->ncode; pc++)
        if (fn->code[pc].sub && fr->sub && fr->sub[pc])
            render_profile(&sb, fn->code[pc].sub, fr->sub[pc], indent + 4);
    *sbp = sb;
}

tgl_status tgl_function_profile(tgl_ctx *ctx, const tgl_function *f, char **text)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(f && text, TGL_EINVAL, "tgl_function_profile: NULL argument");
    const tgl_program *fn = f->prog;
    TGL_CHECK(fn->profile, TGL_EINVAL,
              "tgl_function_profile: %s was not compiled with profile = true", fn->name);
    tgl_sb sb = {0};
    render_profile(&sb, fn, f->frame, 0);
    return tgl_sb_finish(&sb, ctx, "tgl", text);
}
