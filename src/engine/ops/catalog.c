/*
 * catalog.c — the op table, generated from TGL_OPS in ops.h: one entry per
 * op with its name, synopsis and implementation.
 */
#include "engine/ops/ops.h"

static const tgl_opdef catalog[] = {
#define TGL_OP_ENTRY(ID, name, impl, syn) [TGL_OP_##ID] = {name, syn, &tgl_impl_##impl},
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
