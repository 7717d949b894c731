/*
 * fuse.c — the fuse stage: elementwise fusion.  Maximal groups of
 * elementwise nodes over one iteration space become one fused node (one
 * generated loop instead of one pass over memory per op), and a reduction
 * fed only by such a group is folded into it (sum((x - y)^2) never
 * materializes x - y).
 *
 * Groups grow from the outputs toward the inputs.  A node joins its
 * consumer's group when it has the group's space (same rank and the same
 * broadcast pattern: a bias row stays outside a matrix group, or it would
 * be recomputed for every row) and either every client is in the group,
 * or — as an extra output of the group — no client outside the group
 * leads back into it (which would make the fused node depend on itself).
 *
 * Scalar constants become immediates of the program; every operand is
 * converted to its op's compute dtype by an explicit cast instruction, so
 * the code generator never promotes.
 */
#include "engine/opt/opt.h"
#include "engine/fprog.h"

#include <stdlib.h>
#include <string.h>

typedef struct fuse_pass {
    tgl_ctx *ctx;
    tgl_node **order;
    size_t count;
    int32_t *pos;           /* node id -> position in order, -1 outside      */
    int32_t **clients;      /* node id -> ids of clients (-1: a graph root)  */
    int32_t *nclients;
    int32_t *group;         /* node id -> group index, -1 none               */
    int32_t ngroups;
    tgl_node **reduce;      /* group -> the reduction folded in, or NULL     */
    tgl_node **root;        /* group -> its elementwise root                 */
    tgl_node_map built;     /* old node -> rebuilt node                      */
    unsigned char *seen;    /* scratch for the ancestor search              */
} fuse_pass;

static bool is_elemwise(const tgl_node *n)
{
    return n->kind == TGL_NODE_APPLY && tgl_op_impl(n->op)->family == TGL_FAM_ELEMWISE;
}

static bool is_foldable_reduce(const tgl_node *n)
{
    return n->kind == TGL_NODE_APPLY &&
           (n->op == TGL_OP_SUM || n->op == TGL_OP_PROD || n->op == TGL_OP_MAX || n->op == TGL_OP_MIN);
}

/* A scalar-valued constant that does not fix the space's shape. */
static bool is_immediate(tgl_node *x, double *v)
{
    uint32_t all = x->type.ndim >= 32 ? ~0u : (1u << x->type.ndim) - 1;
    return (x->type.bcast & all) == all && tgl_const_value(x, v);
}

static bool same_space(const tgl_node *x, const tgl_node *root)
{
    return x->type.ndim == root->type.ndim && x->type.bcast == root->type.bcast;
}

/* True when a node outside group g that consumes a member of g is also an
 * ancestor of a node of `from` (members): the fused node would depend on
 * itself.  Only nodes at positions >= lowest can be such ancestors. */
static bool reaches(fuse_pass *f, tgl_node **from, int nfrom, int g, int32_t lowest)
{
    size_t cap = 64, sp = 0;
    tgl_node **stack = malloc(sizeof *stack * cap);
    int32_t *touched = malloc(sizeof *touched * (f->count + 1));
    size_t nt = 0;
    bool found = false;
    if (!stack || !touched) {
        free(stack);
        free(touched);
        return true; /* be safe: do not fuse */
    }
    for (int i = 0; i < nfrom; i++)
        stack[sp++] = from[i];
    while (sp && !found) {
        tgl_node *n = stack[--sp];
        for (int k = 0; k < n->nin; k++) {
            tgl_node *x = n->in[k];
            int32_t p = f->pos[x->id];
            if (p < lowest || f->seen[x->id])
                continue;
            f->seen[x->id] = 1;
            touched[nt++] = (int32_t)x->id;
            if (f->group[x->id] != g) {
                /* an outside node on a path into the group: is it a client
                 * of a group member? */
                for (int c = 0; c < x->nin && !found; c++)
                    found = f->group[x->in[c]->id] == g;
            }
            if (sp == cap) {
                cap *= 2;
                tgl_node **ns = realloc(stack, sizeof *ns * cap);
                if (!ns) {
                    found = true;
                    break;
                }
                stack = ns;
            }
            stack[sp++] = x;
        }
    }
    for (size_t i = 0; i < nt; i++)
        f->seen[touched[i]] = 0;
    free(stack);
    free(touched);
    return found;
}

static bool all_clients_in(const fuse_pass *f, const tgl_node *x, int g)
{
    for (int c = 0; c < f->nclients[x->id]; c++) {
        int32_t id = f->clients[x->id][c];
        if (id < 0 || f->group[id] != g)
            return false;
    }
    return true;
}

/* Grows group g from its members toward the inputs.  Every addition is
 * checked for cycles: an outside client of any member (the root, an extra
 * output, or the new node) must not also be an ancestor of a member. */
static void grow(fuse_pass *f, int g, tgl_node **members, int *nmem, int cap)
{
    tgl_node *root = f->root[g];
    int32_t lowest = f->pos[root->id];
    for (int i = 0; i < *nmem; i++) {
        tgl_node *m = members[i];
        for (int k = 0; k < m->nin; k++) {
            tgl_node *x = m->in[k];
            if (!is_elemwise(x) || f->group[x->id] >= 0 || f->pos[x->id] < 0 ||
                !same_space(x, root) || *nmem >= cap)
                continue;
            f->group[x->id] = g;
            members[*nmem] = x;
            int32_t low = f->pos[x->id] < lowest ? f->pos[x->id] : lowest;
            if (reaches(f, members, *nmem + 1, g, low)) {
                f->group[x->id] = -1;
                continue;
            }
            lowest = low;
            (*nmem)++;
        }
    }
}

/* ---- program construction --------------------------------------------- */

typedef struct prog_builder {
    tgl_fprog *p;
    int cap;
    tgl_node **value_node;  /* instruction -> node it computes (or NULL)   */
} prog_builder;

static int32_t emit(prog_builder *b, tgl_finstr ins, tgl_node *node)
{
    if (b->p->ninstr == b->cap) {
        int nc = b->cap ? b->cap * 2 : 32;
        tgl_finstr *c = realloc(b->p->code, sizeof *c * (size_t)nc);
        tgl_node **v = realloc(b->value_node, sizeof *v * (size_t)nc);
        if (!c || !v) {
            if (c)
                b->p->code = c;
            if (v)
                b->value_node = v;
            return -1;
        }
        b->p->code = c;
        b->value_node = v;
        b->cap = nc;
    }
    b->p->code[b->p->ninstr] = ins;
    b->value_node[b->p->ninstr] = node;
    return b->p->ninstr++;
}

/* The instruction holding x's value converted to dtype (emitting loads,
 * immediates and casts as needed); -1 on failure. */
static int32_t operand(prog_builder *b, fuse_pass *f, int g, tgl_node *x, int dtype)
{
    int32_t at = -1;
    for (int32_t i = 0; i < b->p->ninstr && at < 0; i++)
        if (b->value_node[i] == x)
            at = i;
    if (at < 0) {
        double v;
        tgl_finstr ins = {0};
        ins.dtype = x->type.dtype;
        if (f->group[x->id] != g && is_immediate(x, &v)) {
            ins.op = TGL_FP_CONST;
            ins.value = v;
        } else {
            /* an input of the program */
            int idx = -1;
            for (int i = 0; i < b->p->nin && idx < 0; i++)
                if (b->p->orig_in[i] == x)
                    idx = i;
            if (idx < 0) {
                idx = b->p->nin++;
                tgl_node **oi = realloc(b->p->orig_in, sizeof *oi * (size_t)b->p->nin);
                tgl_type *it = realloc(b->p->in_type, sizeof *it * (size_t)b->p->nin);
                if (oi)
                    b->p->orig_in = oi;
                if (it)
                    b->p->in_type = it;
                if (!oi || !it)
                    return -1;
                b->p->orig_in[idx] = x;
                b->p->in_type[idx] = x->type;
            }
            ins.op = TGL_FP_INPUT;
            ins.arg[0] = idx;
        }
        at = emit(b, ins, x);
        if (at < 0)
            return -1;
    }
    if (b->p->code[at].dtype == dtype)
        return at;
    tgl_finstr cast = {0};
    cast.op = TGL_OP_CAST;
    cast.dtype = dtype;
    cast.arg[0] = at;
    return emit(b, cast, NULL);
}

/* Builds and interns the program of group g; members in topological order.
 * in/outs receive this group's input and output nodes (malloc'd): an
 * equal program interned earlier keeps the nodes of the graph it was
 * built from. */
static tgl_status build_prog(fuse_pass *f, int g, tgl_node **members, int nmem, tgl_fprog **out,
                             tgl_node ***in, tgl_node ***outs)
{
    tgl_ctx *ctx = f->ctx;
    tgl_fprog *p = calloc(1, sizeof *p);
    prog_builder b = {p, 0, NULL};
    if (!p)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "fusion: out of memory");
    p->ndim = f->root[g]->type.ndim;
    p->reduce_op = -1;
    p->norig = nmem + (f->reduce[g] ? 1 : 0);
    p->orig = malloc(sizeof *p->orig * (size_t)p->norig);
    int32_t *value_of = malloc(sizeof *value_of * (size_t)nmem);
    bool ok = p->orig && value_of;
    for (int i = 0; ok && i < nmem; i++) {
        tgl_node *m = members[i];
        p->orig[i] = m;
        tgl_finstr ins = {0};
        ins.op = m->op;
        ins.dtype = m->type.dtype;
        for (int k = 0; ok && k < m->nin; k++) {
            int dt = m->op == TGL_OP_CAST ? m->in[0]->type.dtype : tgl_elemwise_operand_dtype(m, k);
            ins.arg[k] = operand(&b, f, g, m->in[k], dt);
            ok = ins.arg[k] >= 0;
        }
        if (ok) {
            value_of[i] = emit(&b, ins, m);
            ok = value_of[i] >= 0;
        }
    }
    if (f->reduce[g] && ok)
        p->orig[nmem] = f->reduce[g];
    /* Outputs: the root first, then members with clients outside. */
    if (ok) {
        p->out_instr = malloc(sizeof *p->out_instr * (size_t)nmem);
        p->out_type = malloc(sizeof *p->out_type * (size_t)nmem);
        p->orig_out = malloc(sizeof *p->orig_out * (size_t)nmem);
        ok = p->out_instr && p->out_type && p->orig_out;
    }
    for (int pass = 0; ok && pass < 2; pass++)
        for (int i = nmem - 1; i >= 0; i--) {
            tgl_node *m = members[i];
            bool is_root = m == f->root[g];
            if ((pass == 0) != is_root || (pass == 1 && all_clients_in(f, m, g)))
                continue;
            p->out_instr[p->nout] = value_of[i];
            p->out_type[p->nout] = m->type;
            p->orig_out[p->nout] = is_root && f->reduce[g] ? f->reduce[g] : m;
            p->nout++;
        }
    if (ok && f->reduce[g]) {
        tgl_node *r = f->reduce[g];
        p->reduce_op = r->op;
        for (int k = 0; k < r->p.n; k++)
            p->reduce_mask |= 1u << r->p.i[k];
        p->reduce_keepdims = (r->p.flags & TGL_REDUCE_KEEPDIMS) != 0;
        p->reduce_type = r->type;
    }
    free(value_of);
    free(b.value_node);
    if (ok) {
        *in = malloc(sizeof **in * (size_t)(p->nin + 1));
        *outs = malloc(sizeof **outs * (size_t)(p->nout + 1));
        ok = *in && *outs;
        if (ok) {
            if (p->nin)
                memcpy(*in, p->orig_in, sizeof **in * (size_t)p->nin);
            memcpy(*outs, p->orig_out, sizeof **outs * (size_t)p->nout);
        } else {
            free(*in);
            free(*outs);
        }
    }
    if (!ok) {
        free(p->orig);
        free(p->orig_in);
        free(p->in_type);
        free(p->code);
        free(p->out_instr);
        free(p->out_type);
        free(p->orig_out);
        free(p);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "fusion: out of memory");
    }
    return tgl_fprog_intern(ctx, p, out);
}

/* ---- rebuilding the graph ---------------------------------------------- */

static tgl_node *build(fuse_pass *f, tgl_node *n);

static tgl_status build_group(fuse_pass *f, int g)
{
    tgl_ctx *ctx = f->ctx;
    /* Members in topological order. */
    int nmem = 0;
    tgl_node **members = malloc(sizeof *members * (f->count + 1));
    if (!members)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "fusion: out of memory");
    for (size_t i = 0; i < f->count; i++)
        if (f->group[f->order[i]->id] == g && f->order[i] != f->reduce[g])
            members[nmem++] = f->order[i];
    tgl_fprog *p;
    tgl_node **gin = NULL, **gout = NULL;
    tgl_status st = build_prog(f, g, members, nmem, &p, &gin, &gout);
    free(members);
    if (st)
        return st;
    tgl_node **ins = malloc(sizeof *ins * (size_t)(p->nin + 1));
    if (!ins) {
        free(gin);
        free(gout);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "fusion: out of memory");
    }
    for (int i = 0; i < p->nin && !st; i++)
        if (!(ins[i] = build(f, gin[i])))
            st = TGL_EINVAL;
    for (int k = 0; k < p->nout && !st; k++) {
        tgl_params prm = {0};
        prm.n = 2;
        prm.i[0] = p->id;
        prm.i[1] = k;
        tgl_node *fused;
        st = tgl_apply(ctx, TGL_OP_FUSED, p->nin, ins, &prm, gout[k]->source, &fused);
        if (!st)
            st = tgl_node_map_set(ctx, &f->built, gout[k], fused);
    }
    free(ins);
    free(gin);
    free(gout);
    return st;
}

/* The rebuilt form of n (recursive over the graph; depth is the graph's
 * depth in groups and non-fused nodes). */
static tgl_node *build(fuse_pass *f, tgl_node *n)
{
    tgl_node *done = tgl_node_map_get(&f->built, n);
    if (done)
        return done;
    int g = f->pos[n->id] >= 0 ? f->group[n->id] : -1;
    if (g >= 0) {
        if (build_group(f, g))
            return NULL;
        return tgl_node_map_get(&f->built, n);
    }
    tgl_node *r = n;
    if (n->kind == TGL_NODE_APPLY) {
        tgl_node *stackin[8];
        tgl_node **ins = n->nin <= 8 ? stackin : malloc(sizeof *ins * (size_t)n->nin);
        if (!ins)
            return NULL;
        bool changed = false, failed = false;
        for (int k = 0; k < n->nin && !failed; k++) {
            ins[k] = build(f, n->in[k]);
            failed = !ins[k];
            changed |= !failed && ins[k] != n->in[k];
        }
        if (!failed && changed && tgl_apply(f->ctx, n->op, n->nin, ins, &n->p, n->source, &r))
            failed = true;
        if (ins != stackin)
            free(ins);
        if (failed)
            return NULL;
    }
    if (tgl_node_map_set(f->ctx, &f->built, n, r))
        return NULL;
    return r;
}

tgl_status tgl_fuse_elemwise(tgl_ctx *ctx, int nroots, tgl_node **roots)
{
    fuse_pass f = {0};
    f.ctx = ctx;
    tgl_status st = tgl_toposort(ctx, nroots, roots, &f.order, &f.count);
    if (st)
        return st;
    uint32_t nids = ctx->graph.next_id + 1;
    f.pos = malloc(sizeof *f.pos * nids);
    f.clients = calloc(nids, sizeof *f.clients);
    f.nclients = calloc(nids, sizeof *f.nclients);
    f.group = malloc(sizeof *f.group * nids);
    f.seen = calloc(nids, 1);
    f.reduce = calloc(f.count + 1, sizeof *f.reduce);
    f.root = calloc(f.count + 1, sizeof *f.root);
    tgl_node **members = malloc(sizeof *members * (f.count + 1));
    if (!f.pos || !f.clients || !f.nclients || !f.group || !f.seen || !f.reduce || !f.root ||
        !members || tgl_node_map_init(ctx, &f.built)) {
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "fusion: out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < nids; i++) {
        f.pos[i] = -1;
        f.group[i] = -1;
    }
    for (size_t i = 0; i < f.count; i++)
        f.pos[f.order[i]->id] = (int32_t)i;
    /* Client lists (a root of the graph counts as an outside client). */
    for (size_t i = 0; i < f.count; i++)
        for (int k = 0; k < f.order[i]->nin; k++)
            f.nclients[f.order[i]->in[k]->id]++;
    for (int r = 0; r < nroots; r++)
        f.nclients[roots[r]->id]++;
    for (uint32_t i = 0; i < nids; i++)
        if (f.nclients[i] && !(f.clients[i] = malloc(sizeof **f.clients * (size_t)f.nclients[i]))) {
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "fusion: out of memory");
            goto done;
        }
    memset(f.nclients, 0, sizeof *f.nclients * nids);
    for (size_t i = 0; i < f.count; i++)
        for (int k = 0; k < f.order[i]->nin; k++) {
            uint32_t x = f.order[i]->in[k]->id;
            f.clients[x][f.nclients[x]++] = (int32_t)f.order[i]->id;
        }
    for (int r = 0; r < nroots; r++)
        f.clients[roots[r]->id][f.nclients[roots[r]->id]++] = -1;

    /* Groups, from the outputs toward the inputs. */
    for (size_t i = f.count; i-- > 0;) {
        tgl_node *n = f.order[i];
        if (f.group[n->id] >= 0)
            continue;
        tgl_node *root = NULL, *red = NULL;
        if (is_elemwise(n)) {
            root = n;
        } else if (is_foldable_reduce(n) && is_elemwise(n->in[0]) && f.group[n->in[0]->id] < 0 &&
                   f.nclients[n->in[0]->id] == 1 && n->in[0]->type.ndim > 0) {
            root = n->in[0];
            red = n;
        }
        if (!root)
            continue;
        int g = f.ngroups++;
        f.root[g] = root;
        f.reduce[g] = red;
        f.group[root->id] = g;
        if (red)
            f.group[red->id] = g;
        int nmem = 1;
        members[0] = root;
        grow(&f, g, members, &nmem, (int)f.count);
    }
    for (int r = 0; r < nroots && !st; r++) {
        tgl_node *b = build(&f, roots[r]);
        if (!b)
            st = ctx->errmsg[0] ? TGL_EINVAL : tgl_ctx_set_error(ctx, TGL_EINTERNAL, "fusion failed");
        else
            roots[r] = b;
    }
done:
    if (f.clients)
        for (uint32_t i = 0; i < nids; i++)
            free(f.clients[i]);
    free(f.clients);
    free(f.nclients);
    free(f.pos);
    free(f.group);
    free(f.seen);
    free(f.reduce);
    free(f.root);
    free(members);
    free(f.order);
    tgl_node_map_free(&f.built);
    return st;
}
