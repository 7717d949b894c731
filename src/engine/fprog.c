/*
 * fprog.c — the context's table of fused programs.  Programs are interned
 * by content, so two fused groups that compute the same thing share one
 * program (and one compiled kernel), and a FUSED node's identity is its
 * program id plus its inputs.
 */
#include "engine/fprog.h"
#include "engine/backend.h"

#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

static uint64_t prog_hash(const tgl_fprog *p)
{
    uint64_t h = mix(0xf00dull, (uint64_t)p->ndim);
    h = mix(h, (uint64_t)p->nin);
    for (int i = 0; i < p->nin; i++)
        h = mix(h, (uint64_t)p->in_type[i].dtype << 40 | (uint64_t)p->in_type[i].bcast);
    for (int i = 0; i < p->ninstr; i++) {
        const tgl_finstr *c = &p->code[i];
        uint64_t v;
        memcpy(&v, &c->value, sizeof v);
        h = mix(h, (uint64_t)(uint32_t)c->op << 32 | (uint32_t)c->dtype);
        h = mix(h, (uint64_t)(uint32_t)c->arg[0] << 32 | (uint32_t)c->arg[1]);
        h = mix(h, (uint64_t)(uint32_t)c->arg[2] ^ v);
    }
    for (int i = 0; i < p->nout; i++)
        h = mix(h, (uint64_t)p->out_instr[i] << 40 | (uint64_t)p->out_type[i].dtype << 32 |
                       p->out_type[i].bcast);
    h = mix(h, (uint64_t)(uint32_t)p->reduce_op << 32 | p->reduce_mask);
    return mix(h, (uint64_t)p->reduce_keepdims);
}

static bool same_prog(const tgl_fprog *a, const tgl_fprog *b)
{
    if (a->hash != b->hash || a->ndim != b->ndim || a->nin != b->nin || a->ninstr != b->ninstr ||
        a->nout != b->nout || a->reduce_op != b->reduce_op || a->reduce_mask != b->reduce_mask ||
        a->reduce_keepdims != b->reduce_keepdims)
        return false;
    for (int i = 0; i < a->nin; i++)
        if (!tgl_type_eq(a->in_type[i], b->in_type[i]))
            return false;
    for (int i = 0; i < a->ninstr; i++) {
        const tgl_finstr *x = &a->code[i], *y = &b->code[i];
        if (x->op != y->op || x->dtype != y->dtype || memcmp(x->arg, y->arg, sizeof x->arg) ||
            memcmp(&x->value, &y->value, sizeof x->value))
            return false;
    }
    for (int i = 0; i < a->nout; i++)
        if (a->out_instr[i] != b->out_instr[i] || !tgl_type_eq(a->out_type[i], b->out_type[i]))
            return false;
    return true;
}

static void free_prog(tgl_fprog *p)
{
    if (!p)
        return;
    tgl_backend_release(p);
    free(p->in_type);
    free(p->code);
    free(p->out_instr);
    free(p->out_type);
    free(p->orig);
    free(p->orig_in);
    free(p->orig_out);
    free(p);
}

tgl_status tgl_fprog_intern(tgl_ctx *ctx, tgl_fprog *prog, tgl_fprog **out)
{
    prog->hash = prog_hash(prog);
    for (int32_t i = 0; i < ctx->nfprogs; i++)
        if (same_prog(ctx->fprogs[i], prog)) {
            /* The equal program keeps its original nodes: they compute the
             * same values. */
            free_prog(prog);
            *out = ctx->fprogs[i];
            return TGL_OK;
        }
    if (ctx->nfprogs == ctx->fprogs_cap) {
        int32_t cap = ctx->fprogs_cap ? ctx->fprogs_cap * 2 : 16;
        tgl_fprog **t = realloc(ctx->fprogs, sizeof *t * (size_t)cap);
        if (!t) {
            free_prog(prog);
            return tgl_ctx_set_error(ctx, TGL_ENOMEM, "fusion: out of memory");
        }
        ctx->fprogs = t;
        ctx->fprogs_cap = cap;
    }
    prog->id = ctx->nfprogs;
    ctx->fprogs[ctx->nfprogs++] = prog;
    *out = prog;
    return TGL_OK;
}

tgl_fprog *tgl_fprog_get(const tgl_ctx *ctx, int32_t id)
{
    return id >= 0 && id < ctx->nfprogs ? ctx->fprogs[id] : NULL;
}

void tgl_fprog_free_all(tgl_ctx *ctx)
{
    for (int32_t i = 0; i < ctx->nfprogs; i++)
        free_prog(ctx->fprogs[i]);
    free(ctx->fprogs);
    ctx->fprogs = NULL;
    ctx->nfprogs = ctx->fprogs_cap = 0;
}
