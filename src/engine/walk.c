/*
 * walk.c — the graph walks every pass shares: a node-keyed hash map sized
 * by what a pass puts in it (never by how many nodes the context has ever
 * built), the one iterative topological sort, the set of nodes some roots
 * depend on, and "rebuild a node on new inputs".  No walk here recurses on the C stack: a 10^5-node chain costs
 * memory proportional to its length and nothing else.
 */
#include "engine/ops/ops.h"

#include <stdlib.h>
#include <string.h>

/* ---- node map -------------------------------------------------------- */

/* Open addressing with linear probing on the node id (ids are unique in a
 * context and never reused); key 0 marks an empty slot, so keys are
 * stored as id + 1.  The table doubles at half load. */

static inline uint32_t slot_of(uint32_t key, uint32_t mask)
{
    uint32_t h = key * 0x9e3779b1u;
    return (h ^ (h >> 15)) & mask;
}

static tgl_status map_grow(tgl_ctx *ctx, tgl_node_map *m)
{
    uint32_t ncap = m->cap ? m->cap * 2 : 64;
    uint32_t *keys = calloc(ncap, sizeof *keys);
    int64_t *vals = malloc(sizeof *vals * ncap);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl: out of memory (node map)");
    }
    for (uint32_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        uint32_t j = slot_of(m->keys[i], ncap - 1);
        while (keys[j])
            j = (j + 1) & (ncap - 1);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = ncap;
    return TGL_OK;
}

tgl_status tgl_node_map_init(tgl_ctx *ctx, tgl_node_map *m)
{
    memset(m, 0, sizeof *m);
    return map_grow(ctx, m);
}

void tgl_node_map_free(tgl_node_map *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static int64_t *map_find(const tgl_node_map *m, const tgl_node *key)
{
    if (!m->cap)
        return NULL;
    uint32_t k = key->id + 1, mask = m->cap - 1;
    for (uint32_t j = slot_of(k, mask);; j = (j + 1) & mask) {
        if (m->keys[j] == k)
            return &m->vals[j];
        if (!m->keys[j])
            return NULL;
    }
}

bool tgl_node_map_has(const tgl_node_map *m, const tgl_node *key)
{
    return map_find(m, key) != NULL;
}

int64_t tgl_node_map_geti(const tgl_node_map *m, const tgl_node *key, int64_t dflt)
{
    const int64_t *v = map_find(m, key);
    return v ? *v : dflt;
}

tgl_node *tgl_node_map_get(const tgl_node_map *m, const tgl_node *key)
{
    const int64_t *v = map_find(m, key);
    return v ? (tgl_node *)(intptr_t)*v : NULL;
}

tgl_status tgl_node_map_seti(tgl_ctx *ctx, tgl_node_map *m, const tgl_node *key, int64_t val)
{
    int64_t *v = map_find(m, key);
    if (v) {
        *v = val;
        return TGL_OK;
    }
    if ((m->count + 1) * 2 > m->cap) {
        tgl_status st = map_grow(ctx, m);
        if (st)
            return st;
    }
    uint32_t k = key->id + 1, mask = m->cap - 1, j = slot_of(k, mask);
    while (m->keys[j])
        j = (j + 1) & mask;
    m->keys[j] = k;
    m->vals[j] = val;
    m->count++;
    return TGL_OK;
}

tgl_status tgl_node_map_set(tgl_ctx *ctx, tgl_node_map *m, const tgl_node *key, tgl_node *val)
{
    return tgl_node_map_seti(ctx, m, key, (int64_t)(intptr_t)val);
}

/* ---- topological order ----------------------------------------------- */

tgl_status tgl_toposort(tgl_ctx *ctx, int nroots, tgl_node *const *roots, tgl_node ***order,
                        size_t *count)
{
    tgl_node_map state; /* 1 on the stack, 2 done */
    size_t cap = 64, n = 0, sp = 0, scap = 64;
    tgl_node **out = malloc(sizeof *out * cap);
    struct frame { tgl_node *node; int next; } *stack = malloc(sizeof *stack * scap);
    if (!out || !stack || tgl_node_map_init(ctx, &state)) {
        free(out);
        free(stack);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl: out of memory sorting the graph");
    }
    tgl_status st = TGL_OK;
    for (int r = 0; r < nroots && !st; r++) {
        if (!roots[r] || tgl_node_map_has(&state, roots[r]))
            continue;
        stack[sp++] = (struct frame){roots[r], 0};
        st = tgl_node_map_seti(ctx, &state, roots[r], 1);
        while (sp && !st) {
            struct frame *f = &stack[sp - 1];
            if (f->next < f->node->nin) {
                tgl_node *c = f->node->in[f->next++];
                if (tgl_node_map_has(&state, c))
                    continue;
                if (sp == scap) {
                    void *ns = realloc(stack, sizeof *stack * scap * 2);
                    if (!ns) {
                        st = TGL_ENOMEM;
                        break;
                    }
                    stack = ns;
                    scap *= 2;
                }
                st = tgl_node_map_seti(ctx, &state, c, 1);
                stack[sp++] = (struct frame){c, 0};
                continue;
            }
            if (n == cap) {
                void *no = realloc(out, sizeof *out * cap * 2);
                if (!no) {
                    st = TGL_ENOMEM;
                    break;
                }
                out = no;
                cap *= 2;
            }
            out[n++] = f->node;
            st = tgl_node_map_seti(ctx, &state, f->node, 2);
            sp--;
        }
    }
    tgl_node_map_free(&state);
    free(stack);
    if (st) {
        free(out);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl: out of memory sorting the graph");
    }
    *order = out;
    *count = n;
    return TGL_OK;
}

tgl_status tgl_index_order(tgl_ctx *ctx, tgl_node *const *order, size_t count, tgl_node_map *index)
{
    tgl_status st = tgl_node_map_init(ctx, index);
    for (size_t i = 0; i < count && !st; i++)
        st = tgl_node_map_seti(ctx, index, order[i], (int64_t)i);
    if (st)
        tgl_node_map_free(index);
    return st;
}

tgl_status tgl_reachable(tgl_ctx *ctx, int nroots, tgl_node *const *roots, tgl_node_map *set,
                         tgl_node ***order, size_t *count)
{
    tgl_node **ord = NULL;
    size_t cnt = 0;
    tgl_status st = tgl_toposort(ctx, nroots, roots, &ord, &cnt);
    if (st)
        return st;
    if ((st = tgl_node_map_init(ctx, set))) {
        free(ord);
        return st;
    }
    for (size_t i = 0; i < cnt && !st; i++)
        st = tgl_node_map_seti(ctx, set, ord[i], 1);
    if (st || !order) {
        free(ord);
        if (st)
            tgl_node_map_free(set);
        return st;
    }
    *order = ord;
    if (count)
        *count = cnt;
    return TGL_OK;
}

/* ---- rebuilding ------------------------------------------------------ */

tgl_status tgl_rebuild(tgl_ctx *ctx, tgl_node *n, const tgl_node_map *map, tgl_node **out)
{
    *out = n;
    if (n->kind != TGL_NODE_APPLY)
        return TGL_OK;
    tgl_node *stackin[8];
    tgl_node **ins = n->nin <= 8 ? stackin : malloc(sizeof *ins * (size_t)n->nin);
    if (!ins)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl: out of memory rebuilding a node");
    bool changed = false;
    for (int k = 0; k < n->nin; k++) {
        tgl_node *m = tgl_node_map_get(map, n->in[k]);
        ins[k] = m ? m : n->in[k];
        changed |= ins[k] != n->in[k];
    }
    tgl_status st = TGL_OK;
    if (changed)
        st = tgl_apply_payload(ctx, n->op, n->nin, ins, &n->p, n->payload, tgl_node_source(n), out);
    if (ins != stackin)
        free(ins);
    return st;
}
