/*
 * scan_opt.c — the scan stage of the rewrites: whole-graph passes over the
 * scan nodes of a graph, each named and each excludable like any rule.
 * They run in this order (the table `passes` below; what each does is in
 * its synopsis there and in the header of its file):
 *
 *   scan_dead_outputs   scan_prune.c  outputs nothing reads are dropped
 *   scan_merge          scan_merge.c  scans over the same steps: one loop
 *   scan_seq_fill       scan_hoist.c  a fill sequence is filled per step
 *   scan_hoist          scan_hoist.c  loop-invariant work before the loop
 *   scan_seq_whole      scan_gemm.c   x_t . W per step: X . W, one GEMM
 *   scan_grad_gemm      scan_gemm.c   sum of a_t b_t': A' B, one GEMM
 *   scan_share_states   scan_merge.c  the backward scan reads the forward
 *                                     loop's own buffer of states
 *   scan_save_mem       scan_prune.c  h[-1] only: keep the last step only
 *
 * Each pass rebuilds one scan node at a time through tgl_scan_build (which
 * drops the inner inputs nobody reads any more) and replaces its outputs
 * in the graph, and is repeated until no scan changes (fixpoint below;
 * scan_merge, which works on pairs, the same way).  The body itself gets
 * the ordinary rewrites when the inner program is compiled.
 */
#include "scan/scan_opt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the stage ----------------------------------------------------------- */

typedef enum {
    PASS_DEAD,
    PASS_MERGE,
    PASS_SEQ_FILL,
    PASS_HOIST,
    PASS_SEQ_WHOLE,
    PASS_GRAD_GEMM,
    PASS_SHARE_STATES,
    PASS_SAVE_MEM
} pass_kind;

/* Replaces, in the roots, the outputs of scan node n: output k by res[k]
 * (n's own outputs where res[k] is NULL). */
static tgl_status replace_outputs(tgl_ctx *ctx, tgl_node *n, tgl_node **res, int nroots,
                                  tgl_node **roots, int nextra, tgl_node **xfrom,
                                  tgl_node **xto)
{
    int nout = n->nout;
    int cap = nout + nextra + 1;
    tgl_node **from = malloc(sizeof *from * (size_t)cap);
    tgl_node **to = malloc(sizeof *to * (size_t)cap);
    if (!from || !to) {
        free(from);
        free(to);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan rewrites: out of memory");
    }
    int m = 0;
    tgl_status st = TGL_OK;
    for (int k = 0; k < nout && !st; k++) {
        if (!res[k])
            continue;
        tgl_node *o = NULL;
        st = tgl_node_output(ctx, n, k, &o);
        if (!st && o != res[k]) {
            from[m] = o;
            to[m] = res[k];
            m++;
        }
    }
    for (int k = 0; k < nextra; k++) {
        from[m] = xfrom[k];
        to[m] = xto[k];
        m++;
    }
    if (!st && m)
        st = tgl_clone_replace(ctx, nroots, roots, m, from, to, roots);
    free(from);
    free(to);
    return st;
}

/* The graph of the roots sorted, handed to step, again and again until a
 * step changes nothing (or after max_rounds: a guard against a pair of
 * rewrites undoing each other). */
typedef tgl_status (*fixpoint_step)(tgl_ctx *ctx, tgl_node **order, size_t count, int nroots,
                                    tgl_node **roots, void *arg, bool *changed);

static tgl_status fixpoint(tgl_ctx *ctx, int nroots, tgl_node **roots, int max_rounds,
                           fixpoint_step step, void *arg)
{
    tgl_status st = TGL_OK;
    for (int guard = 0; guard < max_rounds && !st; guard++) {
        tgl_node **order = NULL;
        size_t count = 0;
        if ((st = tgl_toposort(ctx, nroots, roots, &order, &count)))
            break;
        bool changed = false;
        st = step(ctx, order, count, nroots, roots, arg, &changed);
        free(order);
        if (!changed)
            break;
    }
    return st;
}

/* Pass kind on scan node n (of order[]): *m a new scan replacing n, or
 * res[k] for some outputs and the extra replacements (xfrom, xto). */
static tgl_status rewrite_one(tgl_ctx *ctx, pass_kind kind, tgl_node *n, tgl_node **order,
                              size_t count, int nroots, tgl_node **roots, tgl_node **res,
                              tgl_node **m, tgl_node ***xfrom, tgl_node ***xto, int *nextra,
                              bool *changed)
{
    tgl_status rst = TGL_OK;
    switch (kind) {
    case PASS_MERGE: /* tgl_scan_merge_step: pairs, not one scan */
        break;
    case PASS_DEAD: {
        int nout = tgl_scan_nout(tgl_scan_of(n));
        bool *drop = calloc((size_t)nout + 1, sizeof *drop);
        int ndrop = 0;
        rst = drop ? tgl_scan_dead_outputs(ctx, n, order, count, nroots, roots, drop, &ndrop)
                   : tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan: out of memory");
        if (!rst && ndrop) {
            rst = tgl_scan_drop_outputs(ctx, n, drop, res);
            if (!rst)
                *changed = true;
        }
        free(drop);
        break;
    }
    case PASS_SEQ_FILL:
        rst = tgl_scan_seq_fill(ctx, n, m);
        break;
    case PASS_HOIST:
        rst = tgl_scan_hoist(ctx, n, m);
        break;
    case PASS_SHARE_STATES:
        rst = tgl_scan_share_states(ctx, n, order, count, res, xfrom, xto, nextra, changed);
        break;
    case PASS_SEQ_WHOLE:
        rst = tgl_scan_seq_whole(ctx, n, m);
        break;
    case PASS_GRAD_GEMM:
        rst = tgl_scan_grad_gemm(ctx, n, res, changed);
        break;
    case PASS_SAVE_MEM:
        rst = tgl_scan_save_mem(ctx, n, order, count, nroots, roots, res, xfrom, xto, nextra,
                                changed);
        break;
    }
    return rst;
}

typedef struct {
    pass_kind kind;
    tgl_node_map done; /* scans this pass has looked at or built */
} pass_run;

/* One step of a pass: the first scan in order not yet done, rewritten and
 * replaced in the roots.  A rewrite that cannot be built is no rewrite:
 * the scan stays as it is, and the error message as it was. */
static tgl_status pass_step(tgl_ctx *ctx, tgl_node **order, size_t count, int nroots,
                            tgl_node **roots, void *arg, bool *pchanged)
{
    pass_run *run = arg;
    tgl_status st = TGL_OK;
    bool changed = false;
    for (size_t i = 0; i < count && !st && !changed; i++) {
        tgl_node *n = order[i];
        if (n->kind != TGL_NODE_APPLY || n->op != TGL_OP_SCAN || tgl_node_map_has(&run->done, n))
            continue;
        int nout = tgl_scan_nout(tgl_scan_of(n));
        tgl_node **res = calloc((size_t)nout + 1, sizeof *res);
        if (!res) {
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan rewrites: out of memory");
            break;
        }
        tgl_node *m = NULL;
        char saved[TGL_ERRMSG_SIZE];
        snprintf(saved, sizeof saved, "%s", ctx->errmsg);
        tgl_node **xfrom = NULL, **xto = NULL;
        int nextra = 0;
        tgl_status rst = rewrite_one(ctx, run->kind, n, order, count, nroots, roots, res, &m,
                                     &xfrom, &xto, &nextra, &changed);
        if (!rst && m) {
            for (int k = 0; k < nout && !rst; k++)
                rst = tgl_node_output(ctx, m, k, &res[k]);
            changed = true;
        }
        if (!rst && changed)
            rst = replace_outputs(ctx, n, res, nroots, roots, nextra, xfrom, xto);
        if (rst) {
            snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s", saved);
            changed = false;
        }
        if (!changed || m)
            st = tgl_node_map_seti(ctx, &run->done, m ? m : n, 1);
        if (changed && !st) {
            /* the new scan is done for this pass */
            for (int k = 0; k < nout && !st; k++)
                if (res[k] && res[k]->kind == TGL_NODE_APPLY && res[k]->op == TGL_OP_OUTPUT)
                    st = tgl_node_map_seti(ctx, &run->done, res[k]->in[0], 1);
                else if (res[k] && res[k]->op == TGL_OP_SCAN)
                    st = tgl_node_map_seti(ctx, &run->done, res[k], 1);
            for (int k = 0; k < nextra && !st; k++)
                if (xto[k]->op == TGL_OP_OUTPUT)
                    st = tgl_node_map_seti(ctx, &run->done, xto[k]->in[0], 1);
                else
                    st = tgl_node_map_seti(ctx, &run->done, xto[k], 1);
        }
        free(xfrom);
        free(xto);
        free(res);
    }
    *pchanged = changed;
    return st;
}

static tgl_status merge_step(tgl_ctx *ctx, tgl_node **order, size_t count, int nroots,
                             tgl_node **roots, void *arg, bool *changed)
{
    (void)arg;
    return tgl_scan_merge_step(ctx, order, count, nroots, roots, changed);
}

/* One pass kind over the graph, one scan at a time, until nothing changes. */
static tgl_status run_pass(tgl_ctx *ctx, pass_kind kind, int nroots, tgl_node **roots)
{
    if (kind == PASS_MERGE)
        return fixpoint(ctx, nroots, roots, 1000, merge_step, NULL);
    pass_run run = {.kind = kind};
    tgl_status st = tgl_node_map_init(ctx, &run.done);
    if (st)
        return st;
    st = fixpoint(ctx, nroots, roots, 10000, pass_step, &run);
    tgl_node_map_free(&run.done);
    return st;
}

static const struct {
    const char *name;
    pass_kind kind;
    const char *synopsis;
} passes[] = {
    {"scan_dead_outputs", PASS_DEAD,
     "outputs of a scan that nothing reads (e.g. the gradient of a sequence nobody asked for) "
     "are not computed"},
    {"scan_merge", PASS_MERGE,
     "independent scans over the same steps (the same n_steps, or the same sequences) become "
     "one loop"},
    {"scan_seq_fill", PASS_SEQ_FILL,
     "a scan sequence that is a fill of one value (the gradient of a sum, in a backward scan) "
     "is filled per step in the body instead of stored for every step"},
    {"scan_hoist", PASS_HOIST,
     "loop-invariant work in a scan's body is computed once before the loop"},
    {"scan_seq_whole", PASS_SEQ_WHOLE,
     "per-step products of one sequence's slices with non-sequences (x_t . W, and the "
     "elementwise work around them) become one whole-sequence op before the loop"},
    {"scan_grad_gemm", PASS_GRAD_GEMM,
     "an accumulated outer product in a backward scan (a weight gradient) becomes one GEMM "
     "after the loop"},
    {"scan_share_states", PASS_SHARE_STATES,
     "a backward scan reads the forward scan's states (initial values and steps) from the "
     "loop's own buffer instead of a copy joining them"},
    {"scan_save_mem", PASS_SAVE_MEM,
     "a scan output read only through its last step keeps only the last step"},
};

#define NPASSES ((int)(sizeof passes / sizeof passes[0]))

static const char *pass_name(int i)
{
    return i >= 0 && i < NPASSES ? passes[i].name : NULL;
}

static const char *pass_synopsis(int i)
{
    return i >= 0 && i < NPASSES ? passes[i].synopsis : NULL;
}

/* Every pass not excluded, in order, over the graphs of roots. */
static tgl_status scan_optimize(tgl_ctx *ctx, int n, tgl_node **roots)
{
    /* Only graphs with a scan pay for the walk. */
    tgl_node **order = NULL;
    size_t count = 0;
    tgl_status st = tgl_toposort(ctx, n, roots, &order, &count);
    if (st)
        return st;
    bool any = false;
    for (size_t i = 0; i < count && !any; i++)
        any = order[i]->kind == TGL_NODE_APPLY && order[i]->op == TGL_OP_SCAN;
    free(order);
    for (int p = 0; any && p < NPASSES && !st; p++)
        if (!tgl_rule_excluded(ctx, passes[p].name))
            st = run_pass(ctx, passes[p].kind, n, roots);
    return st;
}

const tgl_rewrite_stage tgl_scan_stage = {
    .name = "scan",
    .npasses = NPASSES,
    .pass_name = pass_name,
    .pass_synopsis = pass_synopsis,
    .run = scan_optimize,
};

