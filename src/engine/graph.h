/*
 * graph.h — internal header of the graph: the node struct, the per-context
 * node table that hash-conses nodes, and helpers the op families, grad and
 * the compiler share.
 */
#ifndef TGL_GRAPH_H
#define TGL_GRAPH_H

#include "engine/engine.h"

struct tgl_node {
    uint64_t hash;
    uint32_t id;           /* creation order: stable names in printouts     */
    int16_t kind;          /* a tgl_node_kind                               */
    int16_t op;            /* for TGL_NODE_APPLY: the op id                 */
    int16_t origin1;       /* 1 + the op the user wrote, when a rewrite made
                              this node from it (0: none); names errors     */
    int32_t nin;
    tgl_node **in;
    tgl_params p;
    tgl_type type;
    char *name;            /* NULL when unnamed                             */
    char *source;          /* "file:line" or NULL                           */
    tgl_array *value;      /* constant's value / shared variable's value    */
    tgl_node *hnext;       /* hash chain                                    */
    tgl_node *all_next;    /* every node of the context, for freeing        */
};

/* Frees every node of a context's table (struct tgl_graph_table in
 * engine.h: every node ever built, and a hash set of the hash-consed ones,
 * constants and applies). */
void tgl_graph_free(struct tgl_graph_table *g);

/* Makes a type; bcast bits beyond ndim are cleared. */
static inline tgl_type tgl_type_make(int dtype, int ndim, uint32_t bcast)
{
    tgl_type t = {dtype, ndim, ndim >= 32 ? bcast : bcast & ((1u << ndim) - 1)};
    return t;
}

static inline bool tgl_type_eq(tgl_type a, tgl_type b)
{
    return a.dtype == b.dtype && a.ndim == b.ndim && a.bcast == b.bcast;
}

static inline bool tgl_type_bcast(tgl_type t, int axis)
{
    return (t.bcast >> axis) & 1u;
}

static inline bool tgl_dtype_is_float(int dtype)
{
    return dtype == TGL_FLOAT32 || dtype == TGL_FLOAT64;
}

/* Renders a type as "float32 matrix (bcast: 1,0)"-like text into buf. */
const char *tgl_type_str(tgl_type t, char *buf, size_t size);
/* Renders an array's dtype and shape as "float32 (3,4)" into buf. */
const char *tgl_array_str(const tgl_array *a, char *buf, size_t size);

/* Shorthands for building nodes inside the engine (grad, rewrites).  Each
 * returns NULL on failure with the context's message set; passing NULL
 * inputs propagates the failure, so chains need one check at the end. */
tgl_node *tgl_mk(tgl_ctx *ctx, int op, int nin, tgl_node *const *in, const tgl_params *p);
tgl_node *tgl_mk1(tgl_ctx *ctx, int op, tgl_node *a);
tgl_node *tgl_mk2(tgl_ctx *ctx, int op, tgl_node *a, tgl_node *b);
tgl_node *tgl_mk3(tgl_ctx *ctx, int op, tgl_node *a, tgl_node *b, tgl_node *c);
/* A scalar constant of the given dtype. */
tgl_node *tgl_mk_scalar(tgl_ctx *ctx, int dtype, double v);
/* An array shaped like x (runtime shape), every element v, of dtype. */
tgl_node *tgl_mk_fill_like(tgl_ctx *ctx, tgl_node *x, int dtype, double v);
/* x cast to dtype (x itself when it already has it). */
tgl_node *tgl_mk_cast(tgl_ctx *ctx, tgl_node *x, int dtype);
/* Sums g over the axes where it is not broadcastable but like is, keeping
 * them, so the result has like's broadcast pattern (and ndim). */
tgl_node *tgl_mk_sum_to(tgl_ctx *ctx, tgl_node *g, tgl_type like);
/* Sum of x over the given 0-based axes (n of them), keepdims or not. */
tgl_node *tgl_mk_sum(tgl_ctx *ctx, tgl_node *x, int naxes, const int64_t *axes, bool keepdims);
/* Dimshuffle x: order[i] is an input axis or -1 for a new broadcastable
 * axis; input axes left out must be broadcastable. */
tgl_node *tgl_mk_dimshuffle(tgl_ctx *ctx, tgl_node *x, int n, const int64_t *order);

/* The hash of a node's identity (kind, op, inputs, params, type). */
uint64_t tgl_node_hash(const tgl_node *n);

/* Every node the roots depend on, inputs before users, each once
 * (iterative: deep graphs do not overflow the C stack).  *order is
 * malloc'd; the caller frees it. */
tgl_status tgl_toposort(tgl_ctx *ctx, int nroots, tgl_node *const *roots, tgl_node ***order,
                        size_t *count);

/* A node id -> pointer map sized for the context's current nodes (ids are
 * dense), for memo tables in passes over the graph. */
typedef struct tgl_node_map {
    tgl_node **slot;
    uint32_t size;
} tgl_node_map;

tgl_status tgl_node_map_init(tgl_ctx *ctx, tgl_node_map *m);
void tgl_node_map_free(tgl_node_map *m);
/* Grows the map when nodes were added since init; NULL for unknown. */
tgl_node *tgl_node_map_get(const tgl_node_map *m, const tgl_node *key);
tgl_status tgl_node_map_set(tgl_ctx *ctx, tgl_node_map *m, const tgl_node *key, tgl_node *val);

/* Input node types of an array: dtype, ndim, and size-1 axes broadcastable. */
tgl_type tgl_array_type(const tgl_array *a);

#endif /* TGL_GRAPH_H */
