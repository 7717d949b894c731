/*
 * driver.c — runs the rewrite stages over a graph.
 *
 * Nodes are immutable and hash-consed, so a rewrite builds a new graph:
 * each node is rebuilt on its rewritten inputs, then the stage's rules are
 * tried on it; when one fires, its replacement (which may contain new
 * nodes) is rewritten the same way, recursively, and taken as final.  A
 * memo maps every visited node to its final form, so each node is
 * processed once per stage: one worklist pass reaches the fixed point,
 * with no repeated whole-graph walks.  Merging equal subgraphs needs no
 * rule: rebuilding through tgl_apply returns the existing node.
 *
 * Stages that features own (tgl_rewrite_stage: scan's loop passes) come
 * through their ops' catalog entries; the driver runs them in their place
 * without naming them.
 */
#include "engine/opt/opt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A rule firing inside a rule's replacement inside ... stops here. */
#define MAX_DEPTH 64

typedef struct stage_run {
    tgl_rewriter rw;
    const tgl_rule *rules;
    int nrules;
    tgl_node_map memo;
    bool failed;
    tgl_status status;       /* why, when failed                           */
} stage_run;

bool tgl_rule_excluded(const tgl_ctx *ctx, const char *name)
{
    const char *ex = ctx->config.exclude;
    size_t len = strlen(name);
    for (const char *p = ex; (p = strstr(p, name)) != NULL; p += len) {
        bool start = p == ex || p[-1] == ',';
        bool end = p[len] == '\0' || p[len] == ',';
        if (start && end)
            return true;
    }
    return false;
}

static tgl_node *rewrite(stage_run *s, tgl_node *root, int depth);

/* rep takes over old's clients (when rep is new to the count). */
static void inherit_clients(stage_run *s, const tgl_node *old, const tgl_node *rep)
{
    tgl_rewriter *rw = &s->rw;
    /* On failure the count stays unknown (0): rules then do not fuse. */
    if (tgl_rw_clients(rw, rep) == 0 &&
        tgl_node_map_seti(rw->ctx, &rw->clients, rep, tgl_rw_clients(rw, old)))
        tgl_ctx_clear_error(rw->ctx);
}

/* Tries the stage's rules on m until one fires; returns the rewritten
 * replacement, or m. */
static tgl_node *apply_rules(stage_run *s, tgl_node *m, int depth)
{
    if (m->kind != TGL_NODE_APPLY || depth >= MAX_DEPTH)
        return m;
    tgl_ctx *ctx = s->rw.ctx;
    for (int k = 0; k < s->nrules; k++) {
        const tgl_rule *r = &s->rules[k];
        if (r->op >= 0 && r->op != m->op)
            continue;
        if (tgl_rule_excluded(ctx, r->name))
            continue;
        uint64_t errors0 = ctx->nerrors;
        tgl_node *rep = r->fn(&s->rw, m);
        if (!rep || rep == m) {
            /* NULL is "no match"; a build that failed inside the rule
             * (its pattern did not type-check) is "no match" too. */
            if (ctx->nerrors != errors0)
                tgl_ctx_clear_error(ctx);
            continue;
        }
        if (rep->type.dtype != m->type.dtype || rep->type.ndim != m->type.ndim)
            continue; /* a rule must not change the type: ignore it */
        inherit_clients(s, m, rep);
        /* Errors at run time name the line the user wrote. */
        if (!rep->source && m->source)
            rep->source = strdup(m->source);
        tgl_node *fin = rewrite(s, rep, depth + 1);
        return fin ? fin : m;
    }
    return m;
}

/* Rewrites the subgraph under root (nodes not yet in the memo), inputs
 * first, and returns root's final form.  Iterative over the subgraph, so
 * deep graphs do not exhaust the C stack. */
static tgl_node *rewrite(stage_run *s, tgl_node *root, int depth)
{
    tgl_ctx *ctx = s->rw.ctx;
    tgl_node *done = tgl_node_map_get(&s->memo, root);
    if (done)
        return done;
    /* Nodes under root that still need processing, in topological order. */
    size_t cap = 64, n = 0, sp = 0, scap = 64;
    tgl_node **order = malloc(sizeof *order * cap);
    struct frame { tgl_node *node; int next; } *stack = malloc(sizeof *stack * scap);
    tgl_node_map onstack = {0};
    if (!order || !stack || tgl_node_map_init(ctx, &onstack))
        goto nomem;
    stack[sp++] = (struct frame){root, 0};
    tgl_node_map_set(ctx, &onstack, root, root);
    while (sp) {
        struct frame *f = &stack[sp - 1];
        if (f->next < f->node->nin) {
            tgl_node *c = f->node->in[f->next++];
            if (tgl_node_map_get(&s->memo, c) || tgl_node_map_get(&onstack, c))
                continue;
            if (sp == scap) {
                scap *= 2;
                void *ns = realloc(stack, sizeof *stack * scap);
                if (!ns)
                    goto nomem;
                stack = ns;
            }
            tgl_node_map_set(ctx, &onstack, c, c);
            stack[sp++] = (struct frame){c, 0};
            continue;
        }
        if (n == cap) {
            cap *= 2;
            void *no = realloc(order, sizeof *order * cap);
            if (!no)
                goto nomem;
            order = no;
        }
        order[n++] = f->node;
        sp--;
    }
    free(stack);
    stack = NULL;
    tgl_node_map_free(&onstack);

    for (size_t i = 0; i < n && !s->failed; i++) {
        tgl_node *node = order[i];
        if (tgl_node_map_get(&s->memo, node))
            continue; /* finished by a nested rewrite meanwhile */
        tgl_node *m = node;
        if (node->kind == TGL_NODE_APPLY) {
            if (tgl_rebuild(ctx, node, &s->memo, &m)) {
                /* The rewritten inputs no longer type-check: keep the node
                 * as it was (should not happen with type-preserving rules). */
                tgl_ctx_clear_error(ctx);
                m = node;
            }
            if (m != node)
                inherit_clients(s, node, m);
            m = apply_rules(s, m, depth);
        }
        if (tgl_node_map_set(ctx, &s->memo, node, m) || tgl_node_map_set(ctx, &s->memo, m, m))
            goto nomem_late;
    }
    free(order);
    if (s->failed)
        return NULL;
    return tgl_node_map_get(&s->memo, root);
nomem:
    free(stack);
    tgl_node_map_free(&onstack);
nomem_late:
    free(order);
    s->failed = true;
    s->status = tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_optimize: out of memory");
    return NULL;
}

/* Client counts over the graph under the roots (each root counts one). */
static tgl_status count_clients(tgl_ctx *ctx, int n, tgl_node *const *roots, tgl_node_map *c)
{
    tgl_node **order;
    size_t count;
    tgl_status st = tgl_toposort(ctx, n, roots, &order, &count);
    if (st)
        return st;
    st = tgl_node_map_init(ctx, c);
    for (size_t i = 0; i < count && !st; i++)
        for (int k = 0; k < order[i]->nin && !st; k++)
            st = tgl_node_map_seti(ctx, c, order[i]->in[k],
                                   tgl_node_map_geti(c, order[i]->in[k], 0) + 1);
    for (int r = 0; r < n && !st; r++)
        st = tgl_node_map_seti(ctx, c, roots[r], tgl_node_map_geti(c, roots[r], 0) + 1);
    free(order);
    if (st)
        tgl_node_map_free(c); /* the caller frees it only when this succeeds */
    return st;
}

static tgl_status run_stage(tgl_ctx *ctx, const tgl_rule *rules, int nrules, int n,
                            tgl_node **roots)
{
    stage_run s = {0};
    s.rw.ctx = ctx;
    s.rules = rules;
    s.nrules = nrules;
    if (count_clients(ctx, n, roots, &s.rw.clients))
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_optimize: out of memory");
    if (tgl_node_map_init(ctx, &s.memo)) {
        tgl_node_map_free(&s.rw.clients);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_optimize: out of memory");
    }
    tgl_status st = TGL_OK;
    for (int i = 0; i < n; i++) {
        tgl_node *r = rewrite(&s, roots[i], 0);
        if (!r) {
            st = s.failed ? s.status
                          : tgl_ctx_set_error(ctx, TGL_EINTERNAL, "tgl_optimize: rewrite failed");
            break;
        }
        roots[i] = r;
    }
    tgl_node_map_free(&s.memo);
    tgl_node_map_free(&s.rw.clients);
    return st;
}

/* The k-th rewrite stage a feature owns (tgl_opimpl.stage), in catalog
 * order, each once however many ops share it; NULL past the last. */
static const tgl_rewrite_stage *feature_stage(int k)
{
    for (int op = 0; op < TGL_NOPS; op++) {
        const tgl_rewrite_stage *fs = tgl_op_impl(op)->stage;
        bool seen = false;
        for (int e = 0; fs && e < op && !seen; e++)
            seen = tgl_op_impl(e)->stage == fs;
        if (fs && !seen && k-- == 0)
            return fs;
    }
    return NULL;
}

tgl_status tgl_optimize(tgl_ctx *ctx, int level, int n, tgl_node *const *in, tgl_node **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(n >= 0 && (n == 0 || (in && out)), TGL_EINVAL, "tgl_optimize: bad arguments");
    for (int i = 0; i < n; i++) {
        TGL_CHECK(in[i], TGL_EINVAL, "tgl_optimize: root %d is NULL", i + 1);
        out[i] = in[i];
    }
    if (level <= TGL_OPT_NONE)
        return TGL_OK;
    tgl_status st = run_stage(ctx, tgl_rules_canonicalize, tgl_nrules_canonicalize, n, out);
    if (!st)
        st = run_stage(ctx, tgl_rules_stabilize, tgl_nrules_stabilize, n, out);
    /* Stabilized forms can expose canonical ones (e.g. a folded constant). */
    if (!st)
        st = run_stage(ctx, tgl_rules_canonicalize, tgl_nrules_canonicalize, n, out);
    /* The features' stages (loops: hoisting, whole-sequence ops, saving
     * memory); what they move out of a body is then canonicalized like the
     * rest.  Only when compiling for speed: tgl.grad stabilizes a cost
     * before differentiating it, and a scan keeping only its last step has
     * no gradient. */
    const tgl_rewrite_stage *fs;
    for (int k = 0; !st && level >= TGL_OPT_FAST_RUN && (fs = feature_stage(k)); k++) {
        size_t before = ctx->graph.next_id;
        st = fs->run(ctx, n, out);
        if (!st && ctx->graph.next_id != before)
            st = run_stage(ctx, tgl_rules_canonicalize, tgl_nrules_canonicalize, n, out);
    }
    if (!st && level >= TGL_OPT_FAST_RUN)
        st = run_stage(ctx, tgl_rules_specialize, tgl_nrules_specialize, n, out);
    if (!st && level >= TGL_OPT_FAST_RUN && !tgl_rule_excluded(ctx, "elemwise_fusion"))
        st = tgl_fuse_elemwise(ctx, n, out);
    return st;
}

/* ---- the rule list, for inspection ---------------------------------- */

/* The rules in driver order: canonicalize, stabilize, the features'
 * stages' passes, specialize, fusion.  *stage names the stage; the result
 * is the per-node rule, or NULL with *pass set for a whole-graph pass (an
 * index into *fs's passes, or -1 for fusion). */
static const tgl_rule *rule_at(int i, const char **stage, int *pass,
                               const tgl_rewrite_stage **fs)
{
    *pass = -2;
    *fs = NULL;
    if (i < 0)
        return NULL;
    if (i < tgl_nrules_canonicalize) {
        *stage = "canonicalize";
        return &tgl_rules_canonicalize[i];
    }
    i -= tgl_nrules_canonicalize;
    if (i < tgl_nrules_stabilize) {
        *stage = "stabilize";
        return &tgl_rules_stabilize[i];
    }
    i -= tgl_nrules_stabilize;
    for (int k = 0; (*fs = feature_stage(k)) != NULL; k++) {
        if (i < (*fs)->npasses) {
            *stage = (*fs)->name;
            *pass = i;
            return NULL;
        }
        i -= (*fs)->npasses;
    }
    if (i < tgl_nrules_specialize) {
        *stage = "specialize";
        return &tgl_rules_specialize[i];
    }
    i -= tgl_nrules_specialize;
    if (i == 0) {
        *stage = "fuse";
        *pass = -1;
    }
    return NULL;
}

int tgl_rule_count(void)
{
    int npasses = 0;
    for (int k = 0; feature_stage(k); k++)
        npasses += feature_stage(k)->npasses;
    return tgl_nrules_canonicalize + tgl_nrules_stabilize + npasses + tgl_nrules_specialize + 1;
}

const char *tgl_rule_name(int i)
{
    const char *stage = NULL;
    int pass;
    const tgl_rewrite_stage *fs;
    const tgl_rule *r = rule_at(i, &stage, &pass, &fs);
    if (r)
        return r->name;
    return pass >= 0 ? fs->pass_name(pass) : pass == -1 ? "elemwise_fusion" : NULL;
}

const char *tgl_rule_stage(int i)
{
    const char *stage = NULL;
    int pass;
    const tgl_rewrite_stage *fs;
    const tgl_rule *r = rule_at(i, &stage, &pass, &fs);
    return r || pass >= -1 ? stage : NULL;
}

const char *tgl_rule_synopsis(int i)
{
    const char *stage = NULL;
    int pass;
    const tgl_rewrite_stage *fs;
    const tgl_rule *r = rule_at(i, &stage, &pass, &fs);
    if (r)
        return r->synopsis;
    if (pass >= 0)
        return fs->pass_synopsis(pass);
    return pass == -1 ? "maximal groups of elementwise ops (and a reduction they feed) become one "
                        "generated kernel"
                      : NULL;
}
