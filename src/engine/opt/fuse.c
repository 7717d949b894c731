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
 *
 * A group becomes one FUSED node (its program is the node's payload) with
 * one output per value read outside the group; other nodes read them
 * through OUTPUT nodes.  Every table here is indexed by the node's
 * position in the pass's topological order, so the pass costs in
 * proportion to the graph it rewrites, and no walk recurses.  Groups are
 * capped at MAX_GROUP members (a generated loop body that long gains
 * nothing, and compilers slow down on huge functions); a longer chain
 * becomes several groups.
 */
#include "engine/opt/opt.h"
#include "engine/fused_prog.h"

#include <stdlib.h>
#include <string.h>

#define MAX_GROUP 256
/* Operands of one generated kernel: every input and output is a pointer
 * argument of its row functions, and libtcc's value stack overflows past
 * about 100 of them.  A group stops growing before it would need more. */
#define MAX_GROUP_INPUTS 40
#define MAX_GROUP_OUTPUTS 40

typedef struct fuse_pass {
    tgl_ctx *ctx;
    tgl_node **order;
    size_t count;
    tgl_node_map index;     /* node -> position in order                     */
    int32_t **clients;      /* position -> positions of clients (-1: a root) */
    int32_t *nclients;
    int32_t *group;         /* position -> group index, -1 none              */
    int32_t ngroups;
    tgl_node **reduce;      /* group -> the reduction folded in, or NULL     */
    tgl_node **root;        /* group -> its elementwise root                 */
    bool *extra;            /* group -> a member other than the root has
                               clients outside the group                     */
    int32_t *edges_in;      /* group -> edges from members to outside nodes
                               (a bound on its inputs)                      */
    int32_t *nouts;         /* group -> outputs (root + members read outside) */
    tgl_node_map built;     /* old node -> rebuilt node                      */
    unsigned char *seen;    /* position -> scratch for the ancestor search   */
    int32_t *touched;       /* positions marked in seen                      */
    size_t budget;          /* ancestor-search steps left                    */
} fuse_pass;

static int32_t pos(const fuse_pass *f, const tgl_node *n)
{
    return (int32_t)tgl_node_map_geti(&f->index, n, -1);
}

static int32_t group_of(const fuse_pass *f, const tgl_node *n)
{
    int32_t p = pos(f, n);
    return p < 0 ? -1 : f->group[p];
}

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

static bool all_clients_in(const fuse_pass *f, const tgl_node *x, int g)
{
    int32_t p = pos(f, x);
    for (int c = 0; c < f->nclients[p]; c++) {
        int32_t q = f->clients[p][c];
        if (q < 0 || f->group[q] != g)
            return false;
    }
    return true;
}

/* True when a node outside group g that consumes a member of g is also an
 * ancestor of a node of `from` (members): the fused node would depend on
 * itself.  Only nodes at positions >= lowest can be such ancestors.  Also
 * true (do not fuse) when the pass's search budget is spent. */
static bool reaches(fuse_pass *f, tgl_node **from, int nfrom, int g, int32_t lowest)
{
    size_t cap = (size_t)nfrom + 64, sp = 0, nt = 0;
    tgl_node **stack = malloc(sizeof *stack * cap);
    bool found = false;
    if (!stack)
        return true; /* be safe: do not fuse */
    for (int i = 0; i < nfrom; i++)
        stack[sp++] = from[i];
    while (sp && !found) {
        tgl_node *n = stack[--sp];
        for (int k = 0; k < n->nin && !found; k++) {
            tgl_node *x = n->in[k];
            int32_t p = pos(f, x);
            if (p < lowest || f->seen[p])
                continue;
            if (f->budget == 0) {
                found = true;
                break;
            }
            f->budget--;
            f->seen[p] = 1;
            f->touched[nt++] = p;
            if (f->group[p] != g) {
                /* an outside node on a path into the group: is it a client
                 * of a group member? */
                for (int c = 0; c < x->nin && !found; c++)
                    found = group_of(f, x->in[c]) == g;
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
        f->seen[f->touched[i]] = 0;
    free(stack);
    return found;
}

/* Grows group g from its members toward the inputs.  A node whose clients
 * are all in the group joins at once when no member but the root has
 * clients outside: every path out of the group leaves through the root,
 * and the root's descendants cannot be ancestors of its ancestors.
 * Otherwise the addition is checked for cycles: an outside client of a
 * member must not also be an ancestor of a member (only paths through x
 * are new, so a node whose clients are all inside needs only its own
 * ancestors searched). */
static void grow(fuse_pass *f, int g, tgl_node **members, int *nmem, int cap)
{
    tgl_node *root = f->root[g];
    int32_t lowest = pos(f, root);
    for (int i = 0; i < *nmem; i++) {
        tgl_node *m = members[i];
        for (int k = 0; k < m->nin; k++) {
            tgl_node *x = m->in[k];
            int32_t px = pos(f, x);
            if (*nmem >= cap || px < 0 || !is_elemwise(x) || f->group[px] >= 0 ||
                !same_space(x, root))
                continue;
            f->group[px] = g;
            bool inside = all_clients_in(f, x, g);
            /* x's inputs become the group's; the edge to x no longer is. */
            if (f->edges_in[g] - 1 + x->nin > MAX_GROUP_INPUTS ||
                (!inside && f->nouts[g] + 1 > MAX_GROUP_OUTPUTS)) {
                f->group[px] = -1;
                continue;
            }
            int32_t low = px < lowest ? px : lowest;
            members[*nmem] = x;
            bool cycle = !inside ? reaches(f, members, *nmem + 1, g, low)
                         : f->extra[g] ? reaches(f, &members[*nmem], 1, g, low) : false;
            if (cycle) {
                f->group[px] = -1;
                continue;
            }
            f->extra[g] |= !inside;
            f->edges_in[g] += x->nin - 1;
            f->nouts[g] += !inside;
            lowest = low;
            (*nmem)++;
        }
    }
}

/* ---- program construction --------------------------------------------- */

typedef struct prog_builder {
    tgl_fused_prog *p;
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
        if (group_of(f, x) != g && is_immediate(x, &v)) {
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
static tgl_status build_prog(fuse_pass *f, int g, tgl_node **members, int nmem, tgl_fused_prog **out,
                             tgl_node ***in, tgl_node ***outs)
{
    tgl_ctx *ctx = f->ctx;
    tgl_fused_prog *p = calloc(1, sizeof *p);
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
    return tgl_fused_prog_intern(ctx, p, out);
}

/* ---- rebuilding the graph ---------------------------------------------- */

/* Builds group g (members in topological order) into one FUSED node and
 * maps each member read outside the group to its output. */
static tgl_status build_group(fuse_pass *f, int g, tgl_node **members, int nmem)
{
    tgl_ctx *ctx = f->ctx;
    tgl_fused_prog *p;
    tgl_node **gin = NULL, **gout = NULL;
    tgl_status st = build_prog(f, g, members, nmem, &p, &gin, &gout);
    if (st)
        return st;
    tgl_node **ins = malloc(sizeof *ins * (size_t)(p->nin + 1));
    if (!ins) {
        free(gin);
        free(gout);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "fusion: out of memory");
    }
    for (int i = 0; i < p->nin; i++) {
        tgl_node *b = tgl_node_map_get(&f->built, gin[i]);
        ins[i] = b ? b : gin[i];
    }
    tgl_node *fused = NULL;
    st = tgl_apply_payload(ctx, TGL_OP_FUSED, p->nin, ins, NULL, &p->base, gout[0]->source,
                           &fused);
    for (int k = 0; k < p->nout && !st; k++) {
        tgl_node *o;
        st = tgl_node_output(ctx, fused, k, &o);
        if (!st)
            st = tgl_node_map_set(ctx, &f->built, gout[k], o);
    }
    free(ins);
    free(gin);
    free(gout);
    return st;
}

/* Rebuilds the graph under the roots with the groups fused, in a
 * topological order of "units" (a node outside groups, or a whole group,
 * whose inputs are the outside inputs of its members): an iterative
 * depth-first walk from the roots, building each unit after its inputs. */
typedef struct unit_frame {
    int32_t unit;          /* position (node), or -1 - group               */
    int32_t member, input; /* the next child to visit                      */
} unit_frame;

static int32_t unit_of(const fuse_pass *f, int32_t p)
{
    return f->group[p] >= 0 ? -1 - f->group[p] : p;
}

static tgl_status rebuild_all(fuse_pass *f, int nroots, tgl_node **roots)
{
    tgl_ctx *ctx = f->ctx;
    size_t ng = (size_t)f->ngroups + 1;
    int32_t *count = calloc(ng, sizeof *count), *start = calloc(ng + 1, sizeof *start);
    tgl_node **members = malloc(sizeof *members * (f->count + 1));
    unsigned char *state = calloc(f->count + ng, 1); /* nodes, then groups */
    size_t cap = 64, sp = 0;
    unit_frame *stack = malloc(sizeof *stack * cap);
    tgl_status st = TGL_OK;
    if (!count || !start || !members || !state || !stack) {
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "fusion: out of memory");
        goto out;
    }
    for (size_t i = 0; i < f->count; i++) {
        int g = f->group[i];
        if (g >= 0 && f->order[i] != f->reduce[g])
            count[g]++;
    }
    for (int g = 0; g < f->ngroups; g++)
        start[g + 1] = start[g] + count[g];
    memset(count, 0, sizeof *count * ng);
    for (size_t i = 0; i < f->count; i++) {
        int g = f->group[i];
        if (g >= 0 && f->order[i] != f->reduce[g])
            members[start[g] + count[g]++] = f->order[i];
    }
#define STATE(u) state[(u) >= 0 ? (size_t)(u) : f->count + (size_t)(-1 - (u))]
    for (int r = 0; r < nroots && !st; r++) {
        int32_t u0 = unit_of(f, pos(f, roots[r]));
        if (STATE(u0))
            continue;
        STATE(u0) = 1;
        stack[sp++] = (unit_frame){u0, 0, 0};
        while (sp && !st) {
            unit_frame *fr = &stack[sp - 1];
            tgl_node *child = NULL;
            if (fr->unit >= 0) {
                tgl_node *n = f->order[fr->unit];
                if (fr->input < n->nin)
                    child = n->in[fr->input++];
            } else {
                int g = -1 - fr->unit;
                while (!child && fr->member < count[g]) {
                    tgl_node *m = members[start[g] + fr->member];
                    if (fr->input < m->nin) {
                        tgl_node *x = m->in[fr->input++];
                        if (group_of(f, x) != g)
                            child = x;
                    } else {
                        fr->member++;
                        fr->input = 0;
                    }
                }
            }
            if (child) {
                int32_t u = unit_of(f, pos(f, child));
                if (STATE(u))
                    continue; /* done (a cycle is impossible: grow checks) */
                if (sp == cap) {
                    unit_frame *ns = realloc(stack, sizeof *ns * cap * 2);
                    if (!ns) {
                        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "fusion: out of memory");
                        break;
                    }
                    stack = ns;
                    cap *= 2;
                }
                STATE(u) = 1;
                stack[sp++] = (unit_frame){u, 0, 0};
                continue;
            }
            /* Every input is built: build this unit. */
            int32_t u = fr->unit;
            sp--;
            if (u < 0) {
                int g = -1 - u;
                st = build_group(f, g, members + start[g], count[g]);
            } else {
                tgl_node *n = f->order[u], *b;
                st = tgl_rebuild(ctx, n, &f->built, &b);
                if (!st && b != n)
                    st = tgl_node_map_set(ctx, &f->built, n, b);
            }
            STATE(u) = 2;
        }
    }
#undef STATE
out:
    free(count);
    free(start);
    free(members);
    free(state);
    free(stack);
    return st;
}

tgl_status tgl_fuse_elemwise(tgl_ctx *ctx, int nroots, tgl_node **roots)
{
    fuse_pass f = {0};
    f.ctx = ctx;
    tgl_status st = tgl_toposort(ctx, nroots, roots, &f.order, &f.count);
    if (st)
        return st;
    size_t n = f.count + 1;
    f.clients = calloc(n, sizeof *f.clients);
    f.nclients = calloc(n, sizeof *f.nclients);
    f.group = malloc(sizeof *f.group * n);
    f.seen = calloc(n, 1);
    f.touched = malloc(sizeof *f.touched * n);
    f.reduce = calloc(n, sizeof *f.reduce);
    f.root = calloc(n, sizeof *f.root);
    f.extra = calloc(n, sizeof *f.extra);
    f.edges_in = calloc(n, sizeof *f.edges_in);
    f.nouts = calloc(n, sizeof *f.nouts);
    f.budget = 64 * n + 100000;
    tgl_node **members = malloc(sizeof *members * n);
    bool have_index = false, have_built = false;
    if (!f.clients || !f.nclients || !f.group || !f.seen || !f.touched || !f.reduce || !f.root ||
        !f.extra || !f.edges_in || !f.nouts || !members || !(have_index = !tgl_index_order(ctx, f.order, f.count, &f.index)) ||
        !(have_built = !tgl_node_map_init(ctx, &f.built))) {
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "fusion: out of memory");
        goto done;
    }
    for (size_t i = 0; i < f.count; i++)
        f.group[i] = -1;
    /* Client lists (a root of the graph counts as an outside client). */
    for (size_t i = 0; i < f.count; i++)
        for (int k = 0; k < f.order[i]->nin; k++)
            f.nclients[pos(&f, f.order[i]->in[k])]++;
    for (int r = 0; r < nroots; r++)
        f.nclients[pos(&f, roots[r])]++;
    for (size_t i = 0; i < f.count; i++)
        if (f.nclients[i] && !(f.clients[i] = malloc(sizeof **f.clients * (size_t)f.nclients[i]))) {
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "fusion: out of memory");
            goto done;
        }
    memset(f.nclients, 0, sizeof *f.nclients * n);
    for (size_t i = 0; i < f.count; i++)
        for (int k = 0; k < f.order[i]->nin; k++) {
            int32_t x = pos(&f, f.order[i]->in[k]);
            f.clients[x][f.nclients[x]++] = (int32_t)i;
        }
    for (int r = 0; r < nroots; r++) {
        int32_t x = pos(&f, roots[r]);
        f.clients[x][f.nclients[x]++] = -1;
    }

    /* Groups, from the outputs toward the inputs. */
    for (size_t i = f.count; i-- > 0;) {
        tgl_node *nd = f.order[i];
        if (f.group[i] >= 0)
            continue;
        tgl_node *root = NULL, *red = NULL;
        if (is_elemwise(nd)) {
            root = nd;
        } else if (is_foldable_reduce(nd) && is_elemwise(nd->in[0]) && group_of(&f, nd->in[0]) < 0 &&
                   f.nclients[pos(&f, nd->in[0])] == 1 && nd->in[0]->type.ndim > 0) {
            root = nd->in[0];
            red = nd;
        }
        if (!root)
            continue;
        int g = f.ngroups++;
        f.root[g] = root;
        f.reduce[g] = red;
        f.group[pos(&f, root)] = g;
        if (red)
            f.group[i] = g;
        int nmem = 1;
        members[0] = root;
        f.edges_in[g] = root->nin;
        f.nouts[g] = 1;
        grow(&f, g, members, &nmem, MAX_GROUP);
    }
    st = rebuild_all(&f, nroots, roots);
    for (int r = 0; r < nroots && !st; r++) {
        tgl_node *b = tgl_node_map_get(&f.built, roots[r]);
        if (b)
            roots[r] = b;
    }
done:
    if (f.clients)
        for (size_t i = 0; i < n; i++)
            free(f.clients[i]);
    free(f.clients);
    free(f.nclients);
    free(f.group);
    free(f.seen);
    free(f.touched);
    free(f.reduce);
    free(f.root);
    free(f.extra);
    free(f.edges_in);
    free(f.nouts);
    free(members);
    free(f.order);
    if (have_index)
        tgl_node_map_free(&f.index);
    if (have_built)
        tgl_node_map_free(&f.built);
    return st;
}
