/*
 * graph.h — internal header of the graph: the node struct, the per-context
 * node table that hash-conses nodes, and helpers the op families, grad and
 * the compiler share.
 */
#ifndef TGL_GRAPH_H
#define TGL_GRAPH_H

#include "engine/engine.h"
#include "engine/hash.h"

/* A payload: data an op node carries beyond its integer parameters (a
 * fused program, an inner graph, a layout struct).  Payloads are interned
 * per context by content (vt->equal, hash) and reference counted by the
 * nodes that carry them; a node's identity includes its payload.  A
 * payload that refers to graph nodes lists them through vt->nodes so the
 * collector keeps them alive while a node carries the payload. */
typedef struct tgl_payload tgl_payload;
typedef struct tgl_payload_vt {
    const char *kind;                                   /* "fused", "scan", ... */
    bool (*equal)(const tgl_payload *a, const tgl_payload *b);
    void (*destroy)(tgl_payload *p);                    /* frees p itself too   */
    void (*nodes)(const tgl_payload *p, void (*visit)(tgl_node *n, void *arg), void *arg);
    /* A short label for printouts, e.g. "fused#3{mul add tanh}". */
    void (*describe)(const tgl_payload *p, char *buf, size_t size);
} tgl_payload_vt;

struct tgl_payload {
    const tgl_payload_vt *vt;
    uint64_t hash;             /* set by the payload's maker                */
    int32_t refcount;          /* nodes carrying it                          */
    uint32_t id;               /* per context, for printouts                 */
    tgl_payload *hnext;        /* the context's payload table                */
};

/* Node flags. */
#define TGL_NODEF_HASHCONSED 1u   /* in the context's hash table           */
#define TGL_NODEF_MARK 2u         /* collector's mark                       */

/* A node.  Its identity (kind, op, inputs, params, payload, type) never
 * changes after creation; name, source and origin1 are annotations for
 * messages and printouts, not part of the identity. */
struct tgl_node {
    uint64_t hash;
    uint32_t id;           /* creation order: stable names in printouts     */
    int16_t kind;          /* a tgl_node_kind                               */
    int16_t op;            /* for TGL_NODE_APPLY: the op id                 */
    int16_t origin1;       /* 1 + the op the user wrote, when a rewrite made
                              this node from it (0: none); names errors     */
    int16_t nout;          /* values it produces: 1, or more for a
                              multi-output op (read through OUTPUT nodes)   */
    uint32_t flags;        /* TGL_NODEF_*                                    */
    int32_t nin;
    int32_t extref;        /* owners outside the graph (tgl_node_retain)    */
    tgl_node **in;
    tgl_params p;
    tgl_type type;         /* for a multi-output node: output 0's type      */
    tgl_payload *payload;  /* interned, or NULL                             */
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
/* Names a node for messages into buf: its name ('W'), or "the result of
 * <op> built at <file:line>", or "an unnamed input" (grad and Rop). */
const char *tgl_node_describe(const tgl_node *n, char *buf, size_t size);
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

/* The hash of a node's identity (kind, op, inputs, params, payload, type). */
uint64_t tgl_node_hash(const tgl_node *n);

/* References to a node from inside the engine (compiled programs): the
 * collector keeps it, and everything it depends on, alive. */
static inline void tgl_node_ref(tgl_node *n)
{
    n->extref++;
}
static inline void tgl_node_unref(tgl_node *n)
{
    if (n->extref > 0)
        n->extref--;
}

/* tgl_apply with a payload (may be NULL; the node takes a reference). */
tgl_status tgl_apply_payload(tgl_ctx *ctx, int op, int nin, tgl_node *const *in,
                             const tgl_params *p, tgl_payload *payload, const char *source,
                             tgl_node **out);

/* Fills probe (on the stack, its inputs pointing at in) as an application
 * of op and infers its type, as tgl_apply does before hash-consing;
 * failures name fn and the op.  (Also for eval.c's eager evaluation.) */
tgl_status tgl_infer_probe(tgl_ctx *ctx, const char *fn, int op, int nin, tgl_node **in,
                           const tgl_params *p, tgl_payload *payload, tgl_node *probe);

/* Interns a payload: *out is an equal payload already in the context (and
 * p is destroyed), or p itself, now registered.  The caller then passes
 * *out to tgl_apply_payload; a payload no node carries is destroyed by
 * the next tgl_graph_collect. */
tgl_status tgl_payload_intern(tgl_ctx *ctx, tgl_payload *p, tgl_payload **out);


/* Every node the roots depend on, inputs before users, each once
 * (iterative: deep graphs do not overflow the C stack).  *order is
 * malloc'd; the caller frees it. */
tgl_status tgl_toposort(tgl_ctx *ctx, int nroots, tgl_node *const *roots, tgl_node ***order,
                        size_t *count);

/* A node-keyed hash map (walk.c) for memo tables in passes: its size
 * follows what the pass stores, never the context's node count.  Values
 * are node pointers (get/set) or integers (geti/seti). */
typedef struct tgl_node_map {
    uint32_t *keys;        /* node id + 1; 0: empty                         */
    int64_t *vals;
    uint32_t cap, count;
} tgl_node_map;

tgl_status tgl_node_map_init(tgl_ctx *ctx, tgl_node_map *m);
void tgl_node_map_free(tgl_node_map *m);
bool tgl_node_map_has(const tgl_node_map *m, const tgl_node *key);
/* NULL for a key not in the map. */
tgl_node *tgl_node_map_get(const tgl_node_map *m, const tgl_node *key);
tgl_status tgl_node_map_set(tgl_ctx *ctx, tgl_node_map *m, const tgl_node *key, tgl_node *val);
/* dflt for a key not in the map. */
int64_t tgl_node_map_geti(const tgl_node_map *m, const tgl_node *key, int64_t dflt);
tgl_status tgl_node_map_seti(tgl_ctx *ctx, tgl_node_map *m, const tgl_node *key, int64_t val);

/* A map from each node of order[0..count-1] to its position. */
tgl_status tgl_index_order(tgl_ctx *ctx, tgl_node *const *order, size_t count,
                           tgl_node_map *index);

/* n rebuilt on its inputs mapped through map (inputs not in the map stay):
 * the same op, params and payload, through tgl_apply (so an equal node is
 * found, not duplicated).  *out is n itself when no input changed. */
tgl_status tgl_rebuild(tgl_ctx *ctx, tgl_node *n, const tgl_node_map *map, tgl_node **out);

/* Input node types of an array: dtype, ndim, and size-1 axes broadcastable. */
tgl_type tgl_array_type(const tgl_array *a);

#endif /* TGL_GRAPH_H */
