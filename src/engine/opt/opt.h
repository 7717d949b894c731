/*
 * opt.h — internal header of the graph rewrites (src/engine/opt).
 *
 * A rewrite rule looks at one node and returns a replacement that computes
 * the same values (or NULL: no match).  Rules are small named functions
 * listed in one table per stage (canonicalize.c, stabilize.c,
 * specialize.c, fuse.c); driver.c runs the stages in order, each to a
 * fixed point with one worklist pass over the graph, and runs the stages
 * features own (tgl_rewrite_stage below) in their place.  Every rule can be
 * switched off by name (tgl.config.exclude / TGL_EXCLUDE), which is how a
 * wrong-result bug is bisected to one rule.
 */
#ifndef TGL_OPT_H
#define TGL_OPT_H

#include "engine/ops/ops.h"

typedef enum tgl_stage {
    TGL_STAGE_CANONICALIZE,  /* algebraic normal form, constant folding      */
    TGL_STAGE_STABILIZE,     /* numerically safe forms                       */
    TGL_STAGE_SPECIALIZE,    /* faster forms: GEMM, GEMV, GER, fused losses  */
    TGL_STAGE_FUSE,          /* elementwise fusion into generated kernels    */
    TGL_NSTAGES
} tgl_stage;

typedef struct tgl_rewriter tgl_rewriter;

/* A rule: the op it matches (-1: any), and the function.  The function
 * builds its replacement through tgl_mk* and returns NULL when it does not
 * apply; it must not fail hard (a failed build is "no match"). */
typedef tgl_node *(*tgl_rule_fn)(tgl_rewriter *rw, tgl_node *n);

typedef struct tgl_rule {
    const char *name;
    int op;
    tgl_rule_fn fn;
    const char *synopsis;
} tgl_rule;

/* What rules may ask the driver. */
struct tgl_rewriter {
    tgl_ctx *ctx;
    /* How many nodes of the graph being rewritten use each node; a
     * replacement inherits the count of the node it replaces.  A rule
     * that would duplicate work (folding a product used twice into two
     * GEMMs) checks it. */
    tgl_node_map clients;
};

static inline uint32_t tgl_rw_clients(const tgl_rewriter *rw, const tgl_node *n)
{
    return (uint32_t)tgl_node_map_geti(&rw->clients, n, 0);
}

/* True when the named rule is switched off in the context's config. */
bool tgl_rule_excluded(const tgl_ctx *ctx, const char *name);

/* The rules of each stage (defined in the stage files). */
extern const tgl_rule tgl_rules_canonicalize[];
extern const tgl_rule tgl_rules_stabilize[];
extern const tgl_rule tgl_rules_specialize[];
extern const int tgl_nrules_canonicalize, tgl_nrules_stabilize, tgl_nrules_specialize;

/* A rewrite stage a feature owns (src/scan's loop passes), registered
 * through its op's catalog entry (tgl_opimpl.stage).  The driver runs
 * every such stage after stabilize and before specialize, only at
 * TGL_OPT_FAST_RUN and above, then canonicalizes again when it made new
 * nodes (what a pass moved out of a body gets the ordinary rewrites).
 * Its passes are listed in the rule list under the stage's name, and run
 * must skip those switched off by name (tgl_rule_excluded). */
typedef struct tgl_rewrite_stage {
    const char *name;        /* the stage, as the rule list shows it     */
    int npasses;
    const char *(*pass_name)(int i);
    const char *(*pass_synopsis)(int i);
    /* Rewrites the graphs of roots in place (roots[i] replaced). */
    tgl_status (*run)(tgl_ctx *ctx, int n, tgl_node **roots);
} tgl_rewrite_stage;

/* Elementwise fusion (fuse.c): replaces maximal elementwise groups by
 * fused nodes.  A whole-graph pass, not a per-node rule. */
tgl_status tgl_fuse_elemwise(tgl_ctx *ctx, int n, tgl_node **roots);

/* ---- matching helpers (match.c) ------------------------------------- */

/* n looks through dimshuffles that only add broadcastable axes. */
tgl_node *tgl_strip_pad(tgl_node *n);
/* True when n (looking through padding) is a constant whose elements all
 * equal one value; *v receives it. */
bool tgl_const_value(tgl_node *n, double *v);
/* True when n is a constant of one value with every axis of size 1 (a
 * scalar, possibly as a 1x1 array): it scales without fixing a shape. */
bool tgl_scalar_const(tgl_node *n, double *v);
/* True when n is such a constant equal to v. */
bool tgl_is_const(tgl_node *n, double v);
/* True when a and b have the same dtype, ndim and broadcast pattern. */
bool tgl_same_type(const tgl_node *a, const tgl_node *b);
/* x, if replacing n by x keeps n's type; NULL otherwise. */
tgl_node *tgl_if_same_type(tgl_node *n, tgl_node *x);
/* True when n's result has exactly the shape of its input i: n is a
 * fill_like (i = 0), or an elementwise op and input i has n's rank and
 * broadcast pattern (every other input broadcasts to it). */
bool tgl_shape_step(const tgl_node *n, int i);
/* The nodes shape steps reach from n (n's shape is theirs), n first,
 * breadth first, at most cap: a bound on the work, so a longer search
 * only proves less.  Returns how many. */
#define TGL_SHAPE_CLASS_MAX 48
int tgl_shape_class(tgl_node *n, tgl_node **out, int cap);
/* True when a and b provably have the same shape whenever both are
 * computed: the same rank and broadcast pattern, and shape steps from
 * each reach a common node (a bounded search: false means "not proved"). */
bool tgl_same_shape(tgl_node *a, tgl_node *b);
/* op with p.i[0..np-1] as its params (for reductions and the like). */
tgl_node *tgl_mk_params(tgl_ctx *ctx, int op, int nin, tgl_node *const *in, int np,
                        const int64_t *ints, int flags);

#endif /* TGL_OPT_H */
