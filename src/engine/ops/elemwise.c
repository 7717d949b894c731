/*
 * elemwise.c — the elementwise op family: unary math, binary arithmetic,
 * comparisons and logic, switch and clip.  Each op is one entry of
 * TGL_ELEMWISE_OPS (elemwise_def.h); this file turns the table into one
 * type rule, one broadcasting shape rule and the pullbacks, and keeps it
 * (with each expression as text, for cgen) behind tgl_elemwise_get.  The
 * CPU backend compiles the same table into its kernel
 * (src/cpu/kernels/elemwise.c).
 *
 * Types: inputs have the same ndim (tgl_apply pads them); an output axis is
 * broadcastable when every input's is.  Dtypes promote as NumPy does among
 * tgl's six (bool < uint8 < int32 < int64 < float32 < float64); then the
 * op's kind decides the compute dtype and the result's (elemwise_def.h).
 *
 * Signed integer arithmetic wraps (computed unsigned), so overflow is
 * defined behaviour.
 */
#include "engine/ops/elemwise_def.h"

#include <stdlib.h>
#include <string.h>

/* ---- the table covers exactly the elemwise ops of TGL_OPS ----------------- */

/* TGL_IS_ELEMWISE_(impl) is 1 when the token impl is `elemwise`, else 0
 * (the probe idiom: only TGL_PROBE_elemwise expands to two arguments). */
#define TGL_SECOND_(a, b, ...) b
#define TGL_PROBE_(...) TGL_SECOND_(__VA_ARGS__, 0, ~)
#define TGL_PROBE_elemwise ~, 1
#define TGL_IS_ELEMWISE_(impl) TGL_PROBE_(TGL_PROBE_##impl)

#define FLAG(ID, name, impl, syn) EW_IN_OPS_##ID = TGL_IS_ELEMWISE_(impl),
#define COUNT(ID, name, impl, syn) +TGL_IS_ELEMWISE_(impl)
#define ENTRY(ID, ...) EW_ENTRY_##ID, /* a repeated entry redeclares this */
#define IS_EW(ID, ...) +EW_IN_OPS_##ID
enum { TGL_OPS(FLAG) EW_IN_OPS = 0 TGL_OPS(COUNT) };
enum { TGL_ELEMWISE_OPS(ENTRY) EW_ENTRIES };
_Static_assert((int)EW_ENTRIES == (int)EW_IN_OPS,
               "TGL_ELEMWISE_OPS must list every op with impl elemwise in TGL_OPS");
_Static_assert((0 TGL_ELEMWISE_OPS(IS_EW)) == (int)EW_ENTRIES,
               "TGL_ELEMWISE_OPS lists an op whose impl in TGL_OPS is not elemwise");
#undef FLAG
#undef COUNT
#undef ENTRY
#undef IS_EW

/* ---- type rules ------------------------------------------------------ */

/* The dtype the loop computes in (inputs are converted to it; switch's
 * condition stays bool). */
static int compute_dtype(const tgl_node *n)
{
    return tgl_elemwise_compute_dtype(n, tgl_elemwise_get(n->op)->kind);
}

int tgl_elemwise_operand_dtype(const tgl_node *n, int i)
{
    if (n->op == TGL_OP_SWITCH && i == 0)
        return TGL_BOOL;
    return compute_dtype(n);
}

static tgl_status elemwise_infer(tgl_ctx *ctx, tgl_node *n)
{
    const tgl_elemwise_def *d = tgl_elemwise_get(n->op);
    TGL_CHECK(n->nin == d->arity, TGL_EINVAL, "takes %d inputs, got %d", d->arity, n->nin);
    int nd = n->in[0]->type.ndim;
    uint32_t bcast = ~0u;
    for (int i = 0; i < n->nin; i++) {
        TGL_CHECK(n->in[i]->type.ndim == nd, TGL_ESHAPE,
                  "inputs have %d and %d dimensions", nd, n->in[i]->type.ndim);
        bcast &= n->in[i]->type.bcast;
    }
    int dt = compute_dtype(n);
    if (d->kind == TGL_EW_SIGNED) {
        TGL_CHECK(n->in[0]->type.dtype != TGL_BOOL, TGL_EDTYPE, "not defined for bool; use not_");
    }
    if (d->kind == TGL_EW_CAST) {
        TGL_CHECK(n->p.n == 1 && n->p.i[0] >= 0 && n->p.i[0] < TGL_NDTYPES, TGL_EDTYPE,
                  "needs a target dtype");
        dt = (int)n->p.i[0];
    } else {
        TGL_CHECK(n->p.n == 0, TGL_EINVAL, "takes no parameters");
    }
    if (d->kind == TGL_EW_CMP || d->kind == TGL_EW_LOGIC)
        dt = TGL_BOOL;
    n->type = tgl_type_make(dt, nd, bcast);
    return TGL_OK;
}

/* ---- shape ----------------------------------------------------------- */

tgl_status tgl_broadcast_shape(tgl_ctx *ctx, const tgl_node *n, int nin, tgl_array *const *in,
                               int64_t *shape)
{
    int nd = n->type.ndim;
    for (int d = 0; d < nd; d++) {
        int64_t s = 1;
        bool fixed = false;
        for (int i = 0; i < nin; i++) {
            int64_t si = in[i]->shape[d];
            bool b = tgl_type_bcast(n->in[i]->type, d);
            if (b && si != 1)
                return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                                    "input %d has size %lld on axis %d, declared broadcastable",
                                    i + 1, (long long)si, d + 1);
            if (b)
                continue;
            if (!fixed) {
                s = si;
                fixed = true;
            } else if (si != s) {
                return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                                    "sizes %lld and %lld differ on axis %d (an axis broadcasts "
                                    "only when declared broadcastable)",
                                    (long long)s, (long long)si, d + 1);
            }
        }
        shape[d] = s;
    }
    return TGL_OK;
}

static tgl_status elemwise_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                 int64_t *shape)
{
    return tgl_broadcast_shape(ctx, n, n->nin, in, shape);
}

/* ---- pullbacks --------------------------------------------------------- */

/* pull_<ID>: the entry's pull column.  A node that fails to build leaves
 * NULL and a message in the context, which the driver reports.  one and
 * zero are built for every op, as before the table (same graphs). */
#define MK1(op, x) tgl_mk1(ctx, TGL_OP_##op, x)
#define MK2(op, x, w) tgl_mk2(ctx, TGL_OP_##op, x, w)
#define MK3(op, x, w, v) tgl_mk3(ctx, TGL_OP_##op, x, w, v)
#define K(v) tgl_mk_scalar(ctx, dt, v)
#define MASK(m) tgl_mk_cast(ctx, m, dt)
#define FLAT(x) tgl_mk_fill_like(ctx, x, dt, 0.0) /* flat almost everywhere */
#define PULL(ID, ar, kind, tmp, fexpr, iexpr, pull)                            \
    static tgl_status pull_##ID(tgl_ctx *ctx, tgl_node *y, tgl_node *g, tgl_node **gin) \
    {                                                                                \
        tgl_node *a = y->in[0], *b = y->nin > 1 ? y->in[1] : NULL;                   \
        tgl_node *c = y->nin > 2 ? y->in[2] : NULL;                                  \
        int dt = y->type.dtype;                                                      \
        tgl_node *one = K(1.0), *zero = K(0.0);                                      \
        (void)a; (void)b; (void)c; (void)g; (void)one; (void)zero;                   \
        pull;                                                                        \
        return TGL_OK;                                                               \
    }
TGL_ELEMWISE_OPS(PULL)
#undef PULL
#undef MK1
#undef MK2
#undef MK3
#undef K
#undef MASK
#undef FLAT

static tgl_status elemwise_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    return tgl_elemwise_get(n->op)->pull(ctx, n, g, gin);
}

/* ---- the table ----------------------------------------------------------- */

#define DEF(ID, ar, kind, tmp, fexpr, iexpr, pull)                            \
    [TGL_OP_##ID] = {ar, TGL_EW_##kind, #tmp, #fexpr, #iexpr, pull_##ID},
static const tgl_elemwise_def defs[TGL_NOPS] = {TGL_ELEMWISE_OPS(DEF)};
#undef DEF

const tgl_elemwise_def *tgl_elemwise_get(int op)
{
    return op >= 0 && op < TGL_NOPS && defs[op].arity ? &defs[op] : NULL;
}

#define HELPER(R, name, params, ...)                                                 \
    {#name, "static inline " #R " " #name #params " { " #__VA_ARGS__ " }"},
const tgl_elemwise_helper tgl_elemwise_helpers[] = {TGL_ELEMWISE_HELPERS(HELPER){NULL, NULL}};
#undef HELPER

/* ---- the implementation -------------------------------------------- */

int tgl_inplace_same_type(const tgl_node *n)
{
    for (int i = 0; i < n->nin; i++)
        if (tgl_type_eq(n->in[i]->type, n->type))
            return i;
    return -1;
}

const tgl_opimpl tgl_impl_elemwise = {
    .inplace = tgl_inplace_same_type,
    .family = TGL_FAM_ELEMWISE,
    .nin_min = 1,
    .nin_max = 3, /* elemwise_infer checks each op's arity */
    .infer = elemwise_infer,
    .shape = elemwise_shape,
    .grad = elemwise_grad,
};
