/*
 * graph.c — graph nodes: inputs, constants, shared variables and op
 * applications, hash-consed per context so that building the same
 * expression twice yields the same node (common subexpressions merge for
 * free, and a node's address is its identity).  Also: graph cloning with
 * replacements, topological order.  (Eager evaluation of one op on
 * arrays, which runs kernels, is eval.c.)
 */
#include "engine/ops/ops.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- hashing --------------------------------------------------------- */

#define hash_bytes tgl_hash_bytes

/* Constants up to this many elements are hash-consed by content; larger
 * ones are always distinct nodes (hashing them would cost O(size)). */
#define CONST_MERGE_MAX 64

uint64_t tgl_node_hash(const tgl_node *n)
{
    uint64_t h = tgl_hash_mix(0x1234567ull, (uint64_t)n->kind);
    h = tgl_hash_mix(h, (uint64_t)n->op);
    h = tgl_hash_mix(h, (uint64_t)n->type.dtype | (uint64_t)n->type.ndim << 8 |
                            (uint64_t)n->type.bcast << 16);
    for (int i = 0; i < n->nin; i++)
        h = tgl_hash_mix(h, n->in[i]->id);
    h = tgl_hash_mix(h, (uint64_t)n->p.n | (uint64_t)(uint32_t)n->p.flags << 32);
    for (int i = 0; i < n->p.n; i++)
        h = tgl_hash_mix(h, (uint64_t)n->p.i[i]);
    if (n->payload)
        h = tgl_hash_mix(h, n->payload->hash);
    h = hash_bytes(h, n->p.f, sizeof n->p.f);
    if (n->kind == TGL_NODE_CONSTANT) {
        const tgl_array *a = n->value;
        h = hash_bytes(h, a->shape, sizeof a->shape[0] * (size_t)a->ndim);
        h = hash_bytes(h, a->data, (size_t)a->size * tgl_dtype_size(a->dtype_id));
    }
    return h;
}

static bool same_identity(const tgl_node *a, const tgl_node *b)
{
    if (a->hash != b->hash || a->kind != b->kind || a->op != b->op || a->nin != b->nin ||
        a->payload != b->payload ||
        !tgl_type_eq(a->type, b->type) || a->p.n != b->p.n || a->p.flags != b->p.flags ||
        memcmp(a->p.f, b->p.f, sizeof a->p.f) != 0)
        return false;
    for (int i = 0; i < a->nin; i++)
        if (a->in[i] != b->in[i])
            return false;
    for (int i = 0; i < a->p.n; i++)
        if (a->p.i[i] != b->p.i[i])
            return false;
    if (a->kind == TGL_NODE_CONSTANT)
        return tgl_array_equal_bits(a->value, b->value);
    return true;
}

/* ---- the node table -------------------------------------------------- */

static tgl_node *table_find(struct tgl_graph_table *g, const tgl_node *probe)
{
    if (!g->nbuckets)
        return NULL;
    for (tgl_node *n = g->buckets[probe->hash & (g->nbuckets - 1)]; n; n = n->hnext)
        if (same_identity(n, probe))
            return n;
    return NULL;
}

/* Puts n in its bucket (the table has room). */
static void table_link(struct tgl_graph_table *g, tgl_node *n)
{
    n->hnext = g->buckets[n->hash & (g->nbuckets - 1)];
    g->buckets[n->hash & (g->nbuckets - 1)] = n;
}

static tgl_status table_insert(tgl_ctx *ctx, struct tgl_graph_table *g, tgl_node *n)
{
    if (g->count + 1 > g->nbuckets / 2) {
        size_t nb = g->nbuckets ? g->nbuckets * 2 : 1024;
        tgl_node **b = calloc(nb, sizeof *b);
        if (!b)
            return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_apply: out of memory");
        for (size_t i = 0; i < g->nbuckets; i++)
            for (tgl_node *m = g->buckets[i], *next; m; m = next) {
                next = m->hnext;
                m->hnext = b[m->hash & (nb - 1)];
                b[m->hash & (nb - 1)] = m;
            }
        free(g->buckets);
        g->buckets = b;
        g->nbuckets = nb;
    }
    table_link(g, n);
    g->count++;
    return TGL_OK;
}

static void payload_release(struct tgl_graph_table *g, tgl_payload *p);

static void node_destroy(struct tgl_graph_table *g, tgl_node *n)
{
    tgl_array_release(n->value);
    if (n->payload)
        payload_release(g, n->payload);
    free(n->in);
    free(n->name);
    free(n->source);
    free(n);
}

void tgl_graph_free(struct tgl_graph_table *g)
{
    for (tgl_node *n = g->all, *next; n; n = next) {
        next = n->all_next;
        node_destroy(g, n);
    }
    /* Payloads no node carried any more are gone; these were interned but
     * never carried. */
    for (size_t i = 0; i < g->npbuckets; i++)
        for (tgl_payload *p = g->pbuckets[i], *next; p; p = next) {
            next = p->hnext;
            p->vt->destroy(p);
        }
    free(g->pbuckets);
    free(g->buckets);
    memset(g, 0, sizeof *g);
}

/* ---- payloads -------------------------------------------------------- */

static void payload_unlink(struct tgl_graph_table *g, tgl_payload *p)
{
    tgl_payload **pp = &g->pbuckets[p->hash & (g->npbuckets - 1)];
    while (*pp && *pp != p)
        pp = &(*pp)->hnext;
    if (*pp) {
        *pp = p->hnext;
        g->npayloads--;
    }
}

static void payload_release(struct tgl_graph_table *g, tgl_payload *p)
{
    if (--p->refcount > 0)
        return;
    payload_unlink(g, p);
    p->vt->destroy(p);
}

tgl_status tgl_payload_intern(tgl_ctx *ctx, tgl_payload *p, tgl_payload **out)
{
    struct tgl_graph_table *g = &ctx->graph;
    if (g->npbuckets)
        for (tgl_payload *q = g->pbuckets[p->hash & (g->npbuckets - 1)]; q; q = q->hnext)
            if (q->vt == p->vt && q->hash == p->hash && p->vt->equal(q, p)) {
                p->vt->destroy(p);
                *out = q;
                return TGL_OK;
            }
    if (g->npayloads + 1 > g->npbuckets / 2) {
        size_t nb = g->npbuckets ? g->npbuckets * 2 : 64;
        tgl_payload **b = calloc(nb, sizeof *b);
        if (!b) {
            p->vt->destroy(p);
            return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl: out of memory interning a payload");
        }
        for (size_t i = 0; i < g->npbuckets; i++)
            for (tgl_payload *q = g->pbuckets[i], *next; q; q = next) {
                next = q->hnext;
                q->hnext = b[q->hash & (nb - 1)];
                b[q->hash & (nb - 1)] = q;
            }
        free(g->pbuckets);
        g->pbuckets = b;
        g->npbuckets = nb;
    }
    p->refcount = 0;
    p->id = g->next_payload_id++;
    p->hnext = g->pbuckets[p->hash & (g->npbuckets - 1)];
    g->pbuckets[p->hash & (g->npbuckets - 1)] = p;
    g->npayloads++;
    *out = p;
    return TGL_OK;
}

/* ---- reclaiming nodes ------------------------------------------------ */

void tgl_node_retain(tgl_ctx *ctx, tgl_node *n)
{
    if (!ctx || !n)
        return;
    tgl_node_ref(n);
    tgl_ctx_retain(ctx);
}

void tgl_node_release(tgl_ctx *ctx, tgl_node *n)
{
    if (!ctx || !n)
        return;
    tgl_node_unref(n);
    tgl_ctx_release(ctx);
}

typedef struct mark_stack {
    tgl_node **v;
    size_t n, cap;
    bool failed;
} mark_stack;

static void mark_push(tgl_node *n, void *arg)
{
    mark_stack *s = arg;
    if (!n || (n->flags & TGL_NODEF_MARK))
        return;
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 256;
        tgl_node **v = realloc(s->v, sizeof *v * nc);
        if (!v) {
            s->failed = true;
            return;
        }
        s->v = v;
        s->cap = nc;
    }
    n->flags |= TGL_NODEF_MARK;
    s->v[s->n++] = n;
}

tgl_status tgl_graph_collect(tgl_ctx *ctx)
{
    TGL_CHECK_CTX(ctx);
    struct tgl_graph_table *g = &ctx->graph;
    mark_stack s = {0};
    for (tgl_node *n = g->all; n && !s.failed; n = n->all_next)
        if (n->extref > 0)
            mark_push(n, &s);
    while (s.n && !s.failed) {
        tgl_node *n = s.v[--s.n];
        for (int k = 0; k < n->nin; k++)
            mark_push(n->in[k], &s);
        if (n->payload && n->payload->vt->nodes)
            n->payload->vt->nodes(n->payload, mark_push, &s);
    }
    free(s.v);
    if (s.failed) {
        for (tgl_node *n = g->all; n; n = n->all_next)
            n->flags &= ~TGL_NODEF_MARK;
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_graph_collect: out of memory");
    }
    /* Sweep, then relink the survivors' hash chains. */
    tgl_node **link = &g->all;
    size_t live = 0, hashed = 0;
    memset(g->buckets, 0, sizeof *g->buckets * g->nbuckets);
    for (tgl_node *n = g->all, *next; n; n = next) {
        next = n->all_next;
        if (n->flags & TGL_NODEF_MARK) {
            n->flags &= ~TGL_NODEF_MARK;
            *link = n;
            link = &n->all_next;
            live++;
            if (n->flags & TGL_NODEF_HASHCONSED) {
                table_link(g, n);
                hashed++;
            }
        } else {
            node_destroy(g, n);
        }
    }
    *link = NULL;
    g->count = hashed;
    g->live = g->live_after_gc = live;
    /* Payloads interned but never carried by a surviving node. */
    for (size_t i = 0; i < g->npbuckets; i++)
        for (tgl_payload *p = g->pbuckets[i], *next; p; p = next) {
            next = p->hnext;
            if (p->refcount <= 0) {
                payload_unlink(g, p);
                p->vt->destroy(p);
            }
        }
    return TGL_OK;
}

int tgl_graph_maybe_collect(tgl_ctx *ctx)
{
    if (!ctx)
        return 0;
    struct tgl_graph_table *g = &ctx->graph;
    size_t floor = g->live_after_gc > 32768 ? g->live_after_gc : 32768;
    if (g->live < 2 * floor)
        return 0;
    return tgl_graph_collect(ctx) == TGL_OK;
}

size_t tgl_graph_live_nodes(const tgl_ctx *ctx)
{
    return ctx ? ctx->graph.live : 0;
}

static char *dup_or_null(const char *s)
{
    return s && *s ? strdup(s) : NULL;
}

/* Moves a finished probe into a heap node registered with the context. */
static tgl_status commit_node(tgl_ctx *ctx, const tgl_node *probe, const char *name,
                              const char *source, bool hashcons, tgl_node **out)
{
    struct tgl_graph_table *g = &ctx->graph;
    tgl_node *n = calloc(1, sizeof *n);
    if (!n)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl: out of memory building a node");
    *n = *probe;
    n->in = NULL;
    if (probe->nin) {
        n->in = malloc(sizeof *n->in * (size_t)probe->nin);
        if (!n->in) {
            free(n);
            return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl: out of memory building a node");
        }
        memcpy(n->in, probe->in, sizeof *n->in * (size_t)probe->nin);
    }
    n->name = dup_or_null(name);
    n->source = dup_or_null(source);
    /* A name or a source line lost to a failed copy would change what
     * errors and printouts say: the node is not made. */
    if ((name && *name && !n->name) || (source && *source && !n->source)) {
        free(n->in);
        free(n->name);
        free(n->source);
        free(n);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl: out of memory building a node");
    }
    n->id = g->next_id++;
    n->hnext = NULL;
    n->flags = hashcons ? TGL_NODEF_HASHCONSED : 0;
    n->extref = 0;
    if (n->nout < 1)
        n->nout = 1;
    if (hashcons && table_insert(ctx, g, n) != TGL_OK) {
        free(n->in);
        free(n->name);
        free(n->source);
        free(n);
        return TGL_ENOMEM;
    }
    tgl_array_retain(n->value);
    if (n->payload)
        n->payload->refcount++;
    n->all_next = g->all;
    g->all = n;
    g->live++;
    *out = n;
    return TGL_OK;
}

/* ---- leaves ---------------------------------------------------------- */

tgl_status tgl_node_input(tgl_ctx *ctx, tgl_type type, const char *name, tgl_node **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(out, TGL_EINVAL, "tgl_node_input: out is NULL");
    TGL_CHECK(type.dtype >= 0 && type.dtype < TGL_NDTYPES, TGL_EDTYPE,
              "tgl_node_input: unknown dtype %d", type.dtype);
    TGL_CHECK(type.ndim >= 0 && type.ndim <= TGL_MAX_DIMS, TGL_ESHAPE,
              "tgl_node_input: %d dimensions (at most %d are supported)", type.ndim,
              TGL_MAX_DIMS);
    tgl_node probe = {0};
    probe.kind = TGL_NODE_INPUT;
    probe.op = -1;
    probe.type = tgl_type_make(type.dtype, type.ndim, type.bcast);
    return commit_node(ctx, &probe, name, NULL, false, out);
}

tgl_type tgl_array_type(const tgl_array *a)
{
    uint32_t bcast = 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] == 1)
            bcast |= 1u << i;
    return tgl_type_make(a->dtype_id, a->ndim, bcast);
}

tgl_status tgl_node_constant(tgl_ctx *ctx, tgl_array *value, tgl_node **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(value && out, TGL_EINVAL, "tgl_node_constant: NULL argument");
    /* A constant keeps its own contiguous copy: the caller may change the
     * array it passed, the graph must not see that. */
    tgl_array *copy;
    tgl_status st = tgl_array_copy(ctx, value, value->dtype_id, &copy);
    if (st)
        return st;
    tgl_node probe = {0};
    probe.kind = TGL_NODE_CONSTANT;
    probe.op = -1;
    probe.type = tgl_array_type(copy);
    probe.value = copy;
    bool merge = copy->size <= CONST_MERGE_MAX;
    if (merge) {
        probe.hash = tgl_node_hash(&probe);
        tgl_node *found = table_find(&ctx->graph, &probe);
        if (found) {
            tgl_array_release(copy);
            *out = found;
            return TGL_OK;
        }
    }
    st = commit_node(ctx, &probe, NULL, NULL, merge, out);
    tgl_array_release(copy); /* commit_node took its own reference */
    return st;
}

tgl_status tgl_node_shared(tgl_ctx *ctx, tgl_array *value, uint32_t bcast, const char *name,
                           tgl_node **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(value && out, TGL_EINVAL, "tgl_node_shared: NULL argument");
    for (int i = 0; i < value->ndim; i++)
        TGL_CHECK(!((bcast >> i) & 1u) || value->shape[i] == 1, TGL_ESHAPE,
                  "tgl_node_shared: axis %d is broadcastable but has size %" PRId64, i + 1,
                  value->shape[i]);
    /* The variable lives on the device of the setting: value itself when
     * it is there, else a copy there. */
    tgl_array *v = NULL;
    tgl_status st = tgl_array_on_device(ctx, "tgl_node_shared", value, ctx->config.device, &v);
    if (st)
        return st;
    tgl_node probe = {0};
    probe.kind = TGL_NODE_SHARED;
    probe.op = -1;
    probe.type = tgl_type_make(v->dtype_id, v->ndim, bcast);
    probe.value = v;
    st = commit_node(ctx, &probe, name, NULL, false, out);
    tgl_array_release(v); /* commit_node took its own reference */
    return st;
}

tgl_status tgl_shared_get(tgl_ctx *ctx, const tgl_node *s, tgl_array **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(s && out, TGL_EINVAL, "tgl_shared_get: NULL argument");
    TGL_CHECK(s->kind == TGL_NODE_SHARED, TGL_EINVAL, "tgl_shared_get: not a shared variable");
    tgl_array_retain(s->value);
    *out = s->value;
    return TGL_OK;
}

tgl_status tgl_shared_set(tgl_ctx *ctx, tgl_node *s, tgl_array *value)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(s && value, TGL_EINVAL, "tgl_shared_set: NULL argument");
    TGL_CHECK(s->kind == TGL_NODE_SHARED, TGL_EINVAL, "tgl_shared_set: not a shared variable");
    char want[96], got[96];
    bool ok = value->dtype_id == s->type.dtype && value->ndim == s->type.ndim;
    for (int i = 0; ok && i < value->ndim; i++)
        ok = !tgl_type_bcast(s->type, i) || value->shape[i] == 1;
    TGL_CHECK(ok, TGL_ESHAPE, "tgl_shared_set: %s%s%sexpects %s, got %s",
              s->name ? "'" : "", s->name ? s->name : "", s->name ? "' " : "",
              tgl_type_str(s->type, want, sizeof want), tgl_array_str(value, got, sizeof got));
    tgl_array *old = s->value;
    if (value == old)
        return TGL_OK;
    bool same = old && old->ndim == value->ndim &&
                memcmp(old->shape, value->shape, sizeof *old->shape * (size_t)old->ndim) == 0;
    if (same) {
        /* The variable keeps its storage (arrays borrowed from it, views
         * of it, see the new values); a source overlapping it is copied
         * first. */
        if (value->storage == old->storage) {
            tgl_array *tmp;
            tgl_status st = tgl_array_copy(ctx, value, value->dtype_id, &tmp);
            if (st)
                return st;
            st = tgl_array_assign(ctx, old, tmp);
            tgl_array_release(tmp);
            return st;
        }
        return tgl_array_assign(ctx, old, value);
    }
    /* A new shape: value becomes the variable's, on the variable's device
     * (copied there when it is elsewhere). */
    tgl_array *v = NULL;
    tgl_status st = tgl_array_on_device(ctx, "tgl_shared_set", value, old->device, &v);
    if (st)
        return st;
    tgl_array_release(old);
    s->value = v;
    return TGL_OK;
}

/* ---- op application -------------------------------------------------- */

/* Left-pads the elementwise inputs in[] to a common ndim with new
 * broadcastable axes, writing the padded nodes to padded[]. */
static tgl_status pad_elemwise(tgl_ctx *ctx, int nin, tgl_node *const *in, tgl_node **padded)
{
    int nd = 0;
    for (int i = 0; i < nin; i++)
        if (in[i]->type.ndim > nd)
            nd = in[i]->type.ndim;
    for (int i = 0; i < nin; i++) {
        padded[i] = in[i];
        int k = in[i]->type.ndim;
        if (k == nd)
            continue;
        int64_t order[TGL_MAX_DIMS];
        for (int d = 0; d < nd - k; d++)
            order[d] = -1;
        for (int d = 0; d < k; d++)
            order[nd - k + d] = d;
        padded[i] = tgl_mk_dimshuffle(ctx, in[i], nd, order);
        if (!padded[i])
            return TGL_ESHAPE;
    }
    return TGL_OK;
}

tgl_status tgl_infer_probe(tgl_ctx *ctx, const char *fn, int op, int nin, tgl_node **in,
                           const tgl_params *p, tgl_payload *payload, tgl_node *probe)
{
    TGL_CHECK(op >= 0 && op < TGL_NOPS, TGL_EINVAL, "%s: unknown op id %d", fn, op);
    const tgl_opimpl *d = tgl_op_impl(op);
    const char *name = tgl_op_name(op);
    TGL_CHECK(nin >= d->nin_min && (d->nin_max < 0 || nin <= d->nin_max), TGL_EINVAL,
              "%s: %s takes %s%d inputs, got %d", fn, name,
              d->nin_max < 0 ? "at least " : d->nin_max > d->nin_min ? "at most " : "",
              d->nin_max < 0 || d->nin_max == d->nin_min ? d->nin_min : d->nin_max, nin);
    TGL_CHECK(!p || (p->n >= 0 && p->n <= TGL_MAX_PARAMS), TGL_EINVAL,
              "%s: %s: bad parameter count", fn, name);
    memset(probe, 0, sizeof *probe);
    probe->kind = TGL_NODE_APPLY;
    probe->op = (int16_t)op;
    probe->nin = nin;
    probe->in = in;
    probe->nout = 1;
    probe->payload = payload;
    for (int i = 0; i < nin; i++)
        if (in[i]->nout > 1 && op != TGL_OP_OUTPUT)
            return tgl_ctx_set_error(ctx, TGL_EINVAL,
                                     "%s: %s: input %d has %d outputs; take one with "
                                     "tgl_node_output", fn, name, i + 1, in[i]->nout);
    if (p) {
        probe->p.n = p->n;
        probe->p.flags = p->flags;
        memcpy(probe->p.i, p->i, sizeof p->i[0] * (size_t)p->n);
        memcpy(probe->p.f, p->f, sizeof p->f);
    }
    tgl_status st = d->infer(ctx, probe);
    if (st) {
        char msg[TGL_ERRMSG_SIZE];
        snprintf(msg, sizeof msg, "%s", ctx->errmsg);
        return tgl_ctx_set_error(ctx, st, "%s: %s: %s", fn, name, msg);
    }
    return TGL_OK;
}

tgl_status tgl_apply(tgl_ctx *ctx, int op, int nin, tgl_node *const *in, const tgl_params *p,
                     const char *source, tgl_node **out)
{
    return tgl_apply_payload(ctx, op, nin, in, p, NULL, source, out);
}

tgl_status tgl_node_output(tgl_ctx *ctx, tgl_node *n, int k, tgl_node **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(n && out, TGL_EINVAL, "tgl_node_output: NULL argument");
    TGL_CHECK(k >= 0 && k < n->nout, TGL_EINVAL, "tgl_node_output: %s has %d output%s, not %d",
              n->kind == TGL_NODE_APPLY ? tgl_op_name(n->op) : "the node", n->nout,
              n->nout == 1 ? "" : "s", k + 1);
    if (n->nout == 1) {
        *out = n;
        return TGL_OK;
    }
    tgl_params p = {0};
    p.n = 1;
    p.i[0] = k;
    return tgl_apply(ctx, TGL_OP_OUTPUT, 1, &n, &p, n->source, out);
}

int tgl_node_noutputs(const tgl_node *n)
{
    return n ? n->nout : 0;
}

int tgl_node_payload_label(const tgl_node *n, char *buf, size_t size)
{
    if (size)
        buf[0] = '\0';
    if (!n || !n->payload || !size)
        return 0;
    if (n->payload->vt->describe)
        n->payload->vt->describe(n->payload, buf, size);
    else
        snprintf(buf, size, "%s#%u", n->payload->vt->kind, n->payload->id);
    return 1;
}

tgl_status tgl_apply_payload(tgl_ctx *ctx, int op, int nin, tgl_node *const *in,
                             const tgl_params *p, tgl_payload *payload, const char *source,
                             tgl_node **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(out && (nin == 0 || in) && nin >= 0 && nin <= 1024, TGL_EINVAL,
              "tgl_apply: bad arguments");
    for (int i = 0; i < nin; i++)
        TGL_CHECK(in[i], TGL_EINVAL, "tgl_apply: input %d is NULL", i);
    TGL_CHECK(op >= 0 && op < TGL_NOPS, TGL_EINVAL, "tgl_apply: unknown op id %d", op);
    tgl_node *stackin[8];
    tgl_node **ins = nin <= 8 ? stackin : malloc(sizeof *ins * (size_t)nin);
    if (!ins)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_apply: out of memory");
    tgl_status st = TGL_OK;
    if (tgl_op_impl(op)->family == TGL_FAM_ELEMWISE)
        st = pad_elemwise(ctx, nin, in, ins);
    else
        memcpy(ins, in, sizeof *ins * (size_t)nin);
    tgl_node probe;
    if (!st)
        st = tgl_infer_probe(ctx, "tgl_apply", op, nin, ins, p, payload, &probe);
    if (!st) {
        probe.hash = tgl_node_hash(&probe);
        tgl_node *found = table_find(&ctx->graph, &probe);
        if (found)
            *out = found;
        else
            st = commit_node(ctx, &probe, NULL, source, true, out);
    }
    if (ins != stackin)
        free(ins);
    return st;
}

/* Names a node for messages: its name, or its op and source line. */
const char *tgl_node_describe(const tgl_node *n, char *buf, size_t size)
{
    if (n->name)
        snprintf(buf, size, "'%s'", n->name);
    else if (n->kind == TGL_NODE_APPLY)
        snprintf(buf, size, "the result of %s%s%s", tgl_op_name(n->op),
                 n->source ? " built at " : "", n->source ? n->source : "");
    else
        snprintf(buf, size, "an unnamed %s", n->kind == TGL_NODE_SHARED ? "shared variable"
                                             : n->kind == TGL_NODE_CONSTANT ? "constant"
                                                                            : "input");
    return buf;
}

/* ---- accessors ------------------------------------------------------- */

tgl_type tgl_node_type(const tgl_node *n) { return n->type; }
int tgl_node_kind_of(const tgl_node *n) { return n->kind; }
int tgl_node_op(const tgl_node *n) { return n->op; }
int tgl_node_ninputs(const tgl_node *n) { return n->nin; }
const tgl_params *tgl_node_params(const tgl_node *n) { return &n->p; }
uint32_t tgl_node_id(const tgl_node *n) { return n->id; }
const char *tgl_node_name(const tgl_node *n) { return n->name ? n->name : ""; }
const char *tgl_node_source(const tgl_node *n) { return n->source ? n->source : ""; }

tgl_node *tgl_node_input_at(const tgl_node *n, int i)
{
    return i >= 0 && i < n->nin ? n->in[i] : NULL;
}

tgl_array *tgl_node_value(const tgl_node *n)
{
    return n->kind == TGL_NODE_CONSTANT ? n->value : NULL;
}

tgl_status tgl_node_set_name(tgl_ctx *ctx, tgl_node *n, const char *name)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(n, TGL_EINVAL, "tgl_node_set_name: NULL node");
    char *copy = NULL;
    if (name && *name && !(copy = strdup(name)))
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_node_set_name: out of memory");
    free(n->name);
    n->name = copy;
    return TGL_OK;
}

int tgl_op_lookup(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < TGL_NOPS; i++)
        if (strcmp(tgl_op_name(i), name) == 0)
            return i;
    return -1;
}

const char *tgl_op_name(int op)
{
    return op >= 0 && op < TGL_NOPS ? tgl_opdef_get(op)->name : NULL;
}

int tgl_op_count(void)
{
    return TGL_NOPS;
}

/* ---- text ------------------------------------------------------------ */

const char *tgl_type_str(tgl_type t, char *buf, size_t size)
{
    int k = snprintf(buf, size, "%s (", tgl_dtype_name(t.dtype) ? tgl_dtype_name(t.dtype) : "?");
    for (int i = 0; i < t.ndim && k > 0 && (size_t)k < size; i++)
        k += snprintf(buf + k, size - (size_t)k, "%s%s", i ? "," : "",
                      tgl_type_bcast(t, i) ? "1" : "?");
    if (k > 0 && (size_t)k < size)
        snprintf(buf + k, size - (size_t)k, "%s)", t.ndim == 1 ? "," : "");
    return buf;
}

const char *tgl_array_str(const tgl_array *a, char *buf, size_t size)
{
    int k = snprintf(buf, size, "%s (", tgl_dtype_name(a->dtype_id));
    for (int i = 0; i < a->ndim && k > 0 && (size_t)k < size; i++)
        k += snprintf(buf + k, size - (size_t)k, "%s%" PRId64, i ? "," : "", a->shape[i]);
    if (k > 0 && (size_t)k < size)
        snprintf(buf + k, size - (size_t)k, "%s)", a->ndim == 1 ? "," : "");
    return buf;
}

tgl_status tgl_op_error(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, tgl_status st,
                        const char *fmt, ...)
{
    char what[512], ins[512] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    size_t k = 0;
    for (int i = 0; in && i < n->nin && k < sizeof ins; i++) {
        char a[96];
        int w = snprintf(ins + k, sizeof ins - k, "%s%s", i ? ", " : "",
                         in[i] ? tgl_array_str(in[i], a, sizeof a) : "(not computed)");
        if (w < 0)
            break;
        k += (size_t)w;
    }
    int op = n->origin1 ? n->origin1 - 1 : n->op;
    return tgl_ctx_set_error(ctx, st, "%s: %s (inputs: %s)%s%s", tgl_op_name(op), what,
                             ins, n->source ? "; built at " : "", n->source ? n->source : "");
}

/* ---- shorthands ------------------------------------------------------ */

tgl_node *tgl_mk(tgl_ctx *ctx, int op, int nin, tgl_node *const *in, const tgl_params *p)
{
    for (int i = 0; i < nin; i++)
        if (!in[i])
            return NULL;
    tgl_node *out;
    return tgl_apply(ctx, op, nin, in, p, NULL, &out) == TGL_OK ? out : NULL;
}

tgl_node *tgl_mk1(tgl_ctx *ctx, int op, tgl_node *a)
{
    return tgl_mk(ctx, op, 1, &a, NULL);
}

tgl_node *tgl_mk2(tgl_ctx *ctx, int op, tgl_node *a, tgl_node *b)
{
    tgl_node *in[2] = {a, b};
    return tgl_mk(ctx, op, 2, in, NULL);
}

tgl_node *tgl_mk3(tgl_ctx *ctx, int op, tgl_node *a, tgl_node *b, tgl_node *c)
{
    tgl_node *in[3] = {a, b, c};
    return tgl_mk(ctx, op, 3, in, NULL);
}

tgl_node *tgl_mk_scalar(tgl_ctx *ctx, int dtype, double v)
{
    tgl_array *a;
    if (tgl_array_full(ctx, dtype, 0, NULL, v, &a))
        return NULL;
    tgl_node *n;
    tgl_status st = tgl_node_constant(ctx, a, &n);
    tgl_array_release(a);
    return st ? NULL : n;
}

tgl_node *tgl_mk_fill_like(tgl_ctx *ctx, tgl_node *x, int dtype, double v)
{
    if (!x)
        return NULL;
    tgl_params p = {0};
    p.n = 1;
    p.i[0] = dtype;
    p.f[0] = v;
    return tgl_mk(ctx, TGL_OP_FILL_LIKE, 1, &x, &p);
}

tgl_node *tgl_mk_cast(tgl_ctx *ctx, tgl_node *x, int dtype)
{
    if (!x || x->type.dtype == dtype)
        return x;
    tgl_params p = {0};
    p.n = 1;
    p.i[0] = dtype;
    return tgl_mk(ctx, TGL_OP_CAST, 1, &x, &p);
}

tgl_node *tgl_mk_sum(tgl_ctx *ctx, tgl_node *x, int naxes, const int64_t *axes, bool keepdims)
{
    if (!x)
        return NULL;
    tgl_params p = {0};
    p.n = naxes;
    p.flags = keepdims ? 1 : 0;
    for (int i = 0; i < naxes; i++)
        p.i[i] = axes[i];
    return tgl_mk(ctx, TGL_OP_SUM, 1, &x, &p);
}

tgl_node *tgl_mk_sum_to(tgl_ctx *ctx, tgl_node *g, tgl_type like)
{
    if (!g)
        return NULL;
    int64_t axes[TGL_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < g->type.ndim; i++)
        if (tgl_type_bcast(like, i) && !tgl_type_bcast(g->type, i))
            axes[n++] = i;
    return n ? tgl_mk_sum(ctx, g, n, axes, true) : g;
}

tgl_node *tgl_mk_dimshuffle(tgl_ctx *ctx, tgl_node *x, int n, const int64_t *order)
{
    if (!x)
        return NULL;
    tgl_params p = {0};
    p.n = n;
    for (int i = 0; i < n; i++)
        p.i[i] = order[i];
    return tgl_mk(ctx, TGL_OP_DIMSHUFFLE, 1, &x, &p);
}

/* ---- cloning --------------------------------------------------------- */

tgl_status tgl_clone_replace(tgl_ctx *ctx, int n, tgl_node *const *outs, int nrep,
                             tgl_node *const *from, tgl_node *const *to, tgl_node **result)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(result && (n == 0 || outs) && (nrep == 0 || (from && to)), TGL_EINVAL,
              "tgl_clone_replace: bad arguments");
    char a[96], b[96];
    for (int k = 0; k < nrep; k++) {
        TGL_CHECK(from[k] && to[k], TGL_EINVAL, "tgl_clone_replace: replacement %d is NULL", k);
        TGL_CHECK(from[k]->type.dtype == to[k]->type.dtype &&
                      from[k]->type.ndim == to[k]->type.ndim,
                  TGL_EDTYPE, "tgl_clone_replace: cannot replace %s by %s",
                  tgl_type_str(from[k]->type, a, sizeof a), tgl_type_str(to[k]->type, b, sizeof b));
    }
    tgl_node **order;
    size_t count;
    tgl_status st = tgl_toposort(ctx, n, outs, &order, &count);
    if (st)
        return st;
    tgl_node_map map;
    if ((st = tgl_node_map_init(ctx, &map))) {
        free(order);
        return st;
    }
    for (int k = 0; k < nrep; k++)
        tgl_node_map_set(ctx, &map, from[k], to[k]);
    for (size_t i = 0; i < count && !st; i++) {
        tgl_node *node = order[i];
        if (tgl_node_map_get(&map, node))
            continue;
        tgl_node *repl = node;
        st = tgl_rebuild(ctx, node, &map, &repl);
        if (!st)
            st = tgl_node_map_set(ctx, &map, node, repl);
    }
    for (int i = 0; i < n && !st; i++) {
        tgl_node *m = tgl_node_map_get(&map, outs[i]);
        result[i] = m ? m : outs[i];
    }
    tgl_node_map_free(&map);
    free(order);
    return st;
}
