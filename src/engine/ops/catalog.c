/*
 * catalog.c — the op table, generated from TGL_OPS in ops.h: one entry per
 * op with its name, synopsis, implementation and properties, and
 * tgl_op_property, which names them for the specs that walk the catalog.
 */
#include "engine/ops/ops.h"

#include <string.h>

static const tgl_opdef catalog[] = {
#define TGL_OP_ENTRY(ID, name, impl, shape, rop, syn)                                         \
    [TGL_OP_##ID] = {name, syn, &tgl_impl_##impl, TGL_SHAPE_RULE_##shape, TGL_ROP_RULE_##rop, \
                     #shape, #rop},
    TGL_OPS(TGL_OP_ENTRY)
#undef TGL_OP_ENTRY
};

_Static_assert(sizeof catalog / sizeof catalog[0] == TGL_NOPS, "catalog must list every op");

const tgl_opdef *tgl_opdef_get(int op)
{
    return &catalog[op];
}

/* The public view of an entry (tgl.h): the Lua layer lists the catalog
 * through tgl_op_count, tgl_op_name and this, to build its exports. */
const char *tgl_op_synopsis(int op)
{
    return op >= 0 && op < TGL_NOPS ? catalog[op].synopsis : NULL;
}

static const char *const family_name[] = {
    [TGL_FAM_ELEMWISE] = "elemwise", [TGL_FAM_REDUCE] = "reduce",
    [TGL_FAM_BLAS] = "blas",         [TGL_FAM_SHAPE] = "shape",
    [TGL_FAM_SUBTENSOR] = "subtensor", [TGL_FAM_NNET] = "nnet",
    [TGL_FAM_CONTROL] = "control",   [TGL_FAM_FUSED] = "fused",
    [TGL_FAM_COMM] = "comm",
};

static const char *yes(bool b)
{
    return b ? "yes" : "no";
}

const char *tgl_op_property(int op, const char *key)
{
    if (op < 0 || op >= TGL_NOPS || !key)
        return NULL;
    const tgl_opdef *d = &catalog[op];
    const tgl_opimpl *m = d->impl;
    if (strcmp(key, "shape") == 0)
        return d->shape_word;
    if (strcmp(key, "rop") == 0)
        return d->rop_word;
    if (strcmp(key, "family") == 0)
        return m->family >= 0 && m->family < (int)(sizeof family_name / sizeof *family_name)
                   ? family_name[m->family]
                   : NULL;
    if (strcmp(key, "grad") == 0)
        return yes(m->grad || m->grad_n);
    if (strcmp(key, "rop_hook") == 0)
        return yes(m->rop);
    if (strcmp(key, "view") == 0)
        return yes(m->view);
    if (strcmp(key, "inplace") == 0)
        return yes(m->inplace);
    if (strcmp(key, "lazy") == 0)
        return yes(m->flags & TGL_OPF_LAZY);
    if (strcmp(key, "inner") == 0)
        return yes(m->prepare_inner && m->exec_inner);
    if (strcmp(key, "outputs") == 0)
        return m->out_type ? "several" : "one";
    return NULL;
}
