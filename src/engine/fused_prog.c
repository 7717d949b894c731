/*
 * fused_prog.c — fused programs as node payloads.  Programs are interned by
 * content (graph.c's payload table), so two fused groups that compute
 * the same thing share one program (and one compiled kernel), and a FUSED
 * node's identity is its program plus its inputs.  A program lives while
 * a node carries it; it keeps the nodes it was built from alive (the
 * reference path runs them).
 */
#include "engine/fused_prog.h"
#include "engine/hash.h"
#include "engine/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t prog_hash(const tgl_fused_prog *p)
{
    uint64_t h = tgl_hash_mix(0xf00dull, (uint64_t)p->ndim);
    h = tgl_hash_mix(h, (uint64_t)p->nin);
    for (int i = 0; i < p->nin; i++)
        h = tgl_hash_mix(h, (uint64_t)p->in_type[i].dtype << 40 | (uint64_t)p->in_type[i].bcast);
    for (int i = 0; i < p->ninstr; i++) {
        const tgl_finstr *c = &p->code[i];
        uint64_t v;
        memcpy(&v, &c->value, sizeof v);
        h = tgl_hash_mix(h, (uint64_t)(uint32_t)c->op << 32 | (uint32_t)c->dtype);
        h = tgl_hash_mix(h, (uint64_t)(uint32_t)c->arg[0] << 32 | (uint32_t)c->arg[1]);
        h = tgl_hash_mix(h, (uint64_t)(uint32_t)c->arg[2] ^ v);
    }
    for (int i = 0; i < p->nout; i++)
        h = tgl_hash_mix(h, (uint64_t)p->out_instr[i] << 40 |
                                (uint64_t)p->out_type[i].dtype << 32 | p->out_type[i].bcast);
    h = tgl_hash_mix(h, (uint64_t)(uint32_t)p->reduce_op << 32 | p->reduce_mask);
    return tgl_hash_mix(h, (uint64_t)p->reduce_keepdims);
}

static bool same_prog(const tgl_fused_prog *a, const tgl_fused_prog *b)
{
    if (a->base.hash != b->base.hash || a->ndim != b->ndim || a->nin != b->nin || a->ninstr != b->ninstr ||
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

static void free_prog(tgl_fused_prog *p)
{
    /* (a program that fails to build is freed before it is a payload) */
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

static bool payload_equal(const tgl_payload *a, const tgl_payload *b)
{
    return same_prog((const tgl_fused_prog *)a, (const tgl_fused_prog *)b);
}

static void payload_destroy(tgl_payload *p)
{
    free_prog((tgl_fused_prog *)p);
}

static void payload_nodes(const tgl_payload *pl, void (*visit)(tgl_node *, void *), void *arg)
{
    const tgl_fused_prog *p = (const tgl_fused_prog *)pl;
    for (int i = 0; i < p->norig; i++)
        visit(p->orig[i], arg);
    for (int i = 0; i < p->nin; i++)
        visit(p->orig_in[i], arg);
    for (int i = 0; i < p->nout; i++)
        visit(p->orig_out[i], arg);
}

static void payload_describe(const tgl_payload *pl, char *buf, size_t size)
{
    const tgl_fused_prog *p = (const tgl_fused_prog *)pl;
    int k = snprintf(buf, size, "fused#%d{", p->id);
    for (int j = 0; j < p->norig && k > 0 && (size_t)k < size; j++)
        k += snprintf(buf + k, size - (size_t)k, "%s%s", j ? " " : "", tgl_op_name(p->orig[j]->op));
    if (k > 0 && (size_t)k < size)
        snprintf(buf + k, size - (size_t)k, "}");
}

static const tgl_payload_vt fprog_vt = {
    .kind = "fused",
    .equal = payload_equal,
    .destroy = payload_destroy,
    .nodes = payload_nodes,
    .describe = payload_describe,
};

tgl_status tgl_fused_prog_intern(tgl_ctx *ctx, tgl_fused_prog *prog, tgl_fused_prog **out)
{
    prog->base.vt = &fprog_vt;
    prog->base.hash = prog_hash(prog);
    tgl_payload *pl;
    tgl_status st = tgl_payload_intern(ctx, &prog->base, &pl);
    if (st)
        return st;
    *out = (tgl_fused_prog *)pl;
    (*out)->id = (int32_t)pl->id;
    return TGL_OK;
}
