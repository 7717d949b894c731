/*
 * elemwise.c — the elementwise op family: unary math, binary arithmetic,
 * comparisons and logic, switch and clip.  Each op is one entry of
 * TGL_ELEMWISE_OPS (elemwise_def.h); this file turns the table into one
 * type rule, one broadcasting shape rule, the reference kernel and the
 * pullbacks, and keeps it (with each expression as text, for cgen) behind
 * tgl_elemwise_get.
 *
 * Types: inputs have the same ndim (tgl_apply pads them); an output axis is
 * broadcastable when every input's is.  Dtypes promote as NumPy does among
 * tgl's six (bool < uint8 < int32 < int64 < float32 < float64); then the
 * op's kind decides the compute dtype and the result's (elemwise_def.h).
 *
 * Kernel: inputs whose dtype differs from the compute dtype are converted
 * first, then one loop per output row runs with per-input strides (0 on
 * broadcast axes).  The loop is the table's expression for that op and C
 * type, compiled here.  Signed integer arithmetic wraps (computed
 * unsigned), so overflow is defined behaviour.
 */
#include "engine/ops/elemwise_def.h"

#include <stdlib.h>
#include <string.h>
/* The table's expressions call libm by the double names; type-generic
 * math makes exp(a) expf(a) when a is a float, as cgen renders it. */
#include <tgmath.h>

/* ---- the table covers exactly the elemwise ops of TGL_OPS ----------------- */

/* TGL_IS_ELEMWISE_(impl) is 1 when the token impl is `elemwise`, else 0
 * (the probe idiom: only TGL_PROBE_elemwise expands to two arguments). */
#define TGL_SECOND_(a, b, ...) b
#define TGL_PROBE_(...) TGL_SECOND_(__VA_ARGS__, 0, ~)
#define TGL_PROBE_elemwise ~, 1
#define TGL_IS_ELEMWISE_(impl) TGL_PROBE_(TGL_PROBE_##impl)

#define FLAG(ID, name, impl, ...) EW_IN_OPS_##ID = TGL_IS_ELEMWISE_(impl),
#define COUNT(ID, name, impl, ...) +TGL_IS_ELEMWISE_(impl)
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

static int promote(int a, int b)
{
    return tgl_dtype_promote(a, b);
}

/* The dtype the loop computes in (inputs are converted to it; switch's
 * condition stays bool). */
static int compute_dtype(const tgl_node *n)
{
    int kind = tgl_elemwise_get(n->op)->kind;
    if (kind == TGL_EW_CAST)
        return n->in[0]->type.dtype;
    if (kind == TGL_EW_LOGIC)
        return TGL_BOOL;
    int first = kind == TGL_EW_SELECT ? 1 : 0;
    int dt = n->in[first]->type.dtype;
    for (int i = first + 1; i < n->nin; i++)
        dt = promote(dt, n->in[i]->type.dtype);
    if (kind == TGL_EW_MATH && !tgl_dtype_is_float(dt))
        dt = TGL_FLOAT64;
    if (dt == TGL_BOOL && kind != TGL_EW_CMP && kind != TGL_EW_SELECT)
        dt = TGL_INT64; /* arithmetic on bools counts */
    return dt;
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

/* ---- the reference kernel ---------------------------------------------- */

/* The table's helpers, compiled into the engine. */
#define HELPER(R, name, params, ...) static inline R name params { __VA_ARGS__ }
TGL_ELEMWISE_HELPERS(HELPER)
#undef HELPER

/* The reference evaluates the same expressions as generated kernels, so
 * DEBUG mode's comparison cannot find a wrong formula: the specs with
 * literal expected values (spec/ops_spec.lua, spec/c/) hold the semantics.
 * What the comparison still catches is everything cgen adds around the
 * expression: rendering it (operand and temporary names, float32 libm
 * names and declarations, helpers), the fused instruction list (operand
 * wiring, the casts fusion inserts, constants), indexing, strides,
 * broadcasting, row and thread splitting, fused reductions, and the
 * system compiler's -O3 -march=native -fno-math-errno code (vectorized
 * loops, libmvec's vector functions), against this file's plain loops
 * built by the engine's compiler without fast-math.  spec/c/
 * test_cgen_elemwise.c compares the two for every entry. */

/* One row of len elements of one op: operand j's element k at
 * p<j>[k * s<j>], element k of the result at out[k].  AT: a's C type (T
 * but for SELECT's condition), OT: the result's; T is the compute type. */
#define ROW1(AT, OT, TMP, EXPR)                                               \
    for (int64_t k = 0; k < len; k++) {                                       \
        const AT a = ((const AT *)pa)[k * sa];                                \
        const T e = (T)(TMP);                                                 \
        (void)e;                                                              \
        ((OT *)out)[k] = (OT)(EXPR);                                          \
    }
#define ROW2(AT, OT, TMP, EXPR)                                               \
    for (int64_t k = 0; k < len; k++) {                                       \
        const AT a = ((const AT *)pa)[k * sa];                                \
        const T b = ((const T *)pb)[k * sb];                                  \
        const T e = (T)(TMP);                                                 \
        (void)e;                                                              \
        ((OT *)out)[k] = (OT)(EXPR);                                          \
    }
#define ROW3(AT, OT, TMP, EXPR)                                               \
    for (int64_t k = 0; k < len; k++) {                                       \
        const AT a = ((const AT *)pa)[k * sa];                                \
        const T b = ((const T *)pb)[k * sb];                                  \
        const T c = ((const T *)pc)[k * sc];                                  \
        const T e = (T)(TMP);                                                 \
        (void)e;                                                              \
        ((OT *)out)[k] = (OT)(EXPR);                                          \
    }

/* The cases of a row function: an op's loop in the form its kind has for
 * the row's C type (F_<kind>: float rows, I_<kind>: integer rows, uint8
 * serving bool too), or none. */
#define CASE_T(ID, ar, tmp, ex) case TGL_OP_##ID: ROW##ar(T, T, tmp, ex) return true;
#define CASE_BOOL(ID, ar, tmp, ex) case TGL_OP_##ID: ROW##ar(T, uint8_t, tmp, ex) return true;
#define CASE_SELECT(ID, ar, tmp, ex) case TGL_OP_##ID: ROW##ar(uint8_t, T, tmp, ex) return true;
#define CASE_NONE(ID, ar, tmp, ex)
#define F_MATH CASE_T
#define F_ARITH CASE_T
#define F_SIGNED CASE_T
#define F_CMP CASE_BOOL
#define F_LOGIC CASE_NONE
#define F_SELECT CASE_SELECT
#define F_CAST CASE_NONE
#define I_MATH CASE_NONE
#define I_ARITH CASE_T
#define I_SIGNED CASE_T
#define I_CMP CASE_BOOL
#define I_LOGIC CASE_T
#define I_SELECT CASE_SELECT
#define I_CAST CASE_NONE
#define FCASE(ID, ar, kind, tmp, fexpr, iexpr, pull) F_##kind(ID, ar, tmp, fexpr)
#define ICASE(ID, ar, kind, tmp, fexpr, iexpr, pull) I_##kind(ID, ar, tmp, iexpr)

/* row_<NAME>: one row of op in compute type T; false when op has no loop
 * for T.  The switch runs once per row; each case is a plain loop.  Kept
 * out of elemwise_kernel: compiled on its own, gcc versions each loop for
 * unit strides and vectorizes it (inlined, it left switch's select a
 * branch, mispredicted on random conditions). */
#if defined(__GNUC__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE
#endif
#define ROWS(NAME, CASE)                                                      \
    static NOINLINE bool row_##NAME(int op, int64_t len, void *out, const void *pa, int64_t sa, \
                                    const void *pb, int64_t sb, const void *pc, int64_t sc) \
    {                                                                         \
        (void)pb; (void)sb; (void)pc; (void)sc;                               \
        switch (op) {                                                         \
        TGL_ELEMWISE_OPS(CASE)                                                \
        default:                                                              \
            return false;                                                     \
        }                                                                     \
    }

#define T float
ROWS(float, FCASE)
#undef T
#define T double
ROWS(double, FCASE)
#undef T
/* The integer expressions serve uint8 too, where a < 0 is always false. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtype-limits"
#define T int32_t
ROWS(i32, ICASE)
#undef T
#define T int64_t
ROWS(i64, ICASE)
#undef T
#define T uint8_t
ROWS(u8, ICASE)
#undef T
#pragma GCC diagnostic pop

/* Runs one row of op in compute dtype dt (bool and uint8 share a loop). */
static bool run_row(int dt, int op, int64_t len, void *out, const void *a, int64_t sa,
                    const void *b, int64_t sb, const void *c, int64_t sc)
{
    switch (dt) {
    case TGL_FLOAT32: return row_float(op, len, out, a, sa, b, sb, c, sc);
    case TGL_FLOAT64: return row_double(op, len, out, a, sa, b, sb, c, sc);
    case TGL_INT32: return row_i32(op, len, out, a, sa, b, sb, c, sc);
    case TGL_INT64: return row_i64(op, len, out, a, sa, b, sb, c, sc);
    default: return row_u8(op, len, out, a, sa, b, sb, c, sc);
    }
}

static tgl_status elemwise_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                  tgl_array *out)
{
    int op = n->op;
    const tgl_elemwise_def *def = tgl_elemwise_get(op);
    if (def->kind == TGL_EW_CAST)
        return tgl_array_assign(ctx, out, in[0]);
    int cdt = compute_dtype(n);
    if (!tgl_elemwise_computes(def->kind, cdt))
        return tgl_op_error(ctx, n, in, TGL_EINTERNAL, "does not compute in %s",
                            tgl_dtype_name(cdt));
    tgl_array *conv[3] = {NULL, NULL, NULL};
    const tgl_array *args[3];
    tgl_status st = TGL_OK;
    for (int i = 0; i < n->nin && !st; i++) {
        int want = tgl_elemwise_operand_dtype(n, i);
        args[i] = in[i];
        if (in[i]->dtype_id != want) {
            st = tgl_array_copy(ctx, in[i], want, &conv[i]);
            args[i] = conv[i];
        }
    }
    if (st)
        goto done;
    if (out->size == 0)
        goto done;
    /* Element strides of each input in the output's index space. */
    int nd = out->ndim;
    int64_t istr[3][TGL_MAX_DIMS];
    for (int i = 0; i < n->nin; i++)
        for (int d = 0; d < nd; d++)
            istr[i][d] = args[i]->shape[d] == 1 ? 0 : args[i]->strides[d];
    size_t ies = tgl_dtype_size(args[n->nin - 1]->dtype_id);
    size_t es0 = tgl_dtype_size(args[0]->dtype_id);
    size_t oes = tgl_dtype_size(out->dtype_id);
    int64_t len = nd ? out->shape[nd - 1] : 1;
    int64_t idx[TGL_MAX_DIMS] = {0};
    int64_t rows = len ? out->size / len : 0;
    for (int64_t r = 0; r < rows; r++) {
        if ((r & 1023) == 0 && tgl_ctx_interrupted(ctx)) {
            st = tgl_op_error(ctx, n, in, TGL_EINTERRUPT, "interrupted");
            goto done;
        }
        int64_t off[3] = {0, 0, 0}, ooff = 0;
        for (int d = 0; d < nd - 1; d++) {
            for (int i = 0; i < n->nin; i++)
                off[i] += idx[d] * istr[i][d];
            ooff += idx[d] * out->strides[d];
        }
        int64_t inner[3] = {0, 0, 0};
        for (int i = 0; i < n->nin; i++)
            inner[i] = nd ? istr[i][nd - 1] : 0;
        const void *pb = n->nin > 1 ? (const char *)args[1]->data + (size_t)off[1] * ies : NULL;
        const void *pc = n->nin > 2 ? (const char *)args[2]->data + (size_t)off[2] * ies : NULL;
        if (!run_row(cdt, op, len, (char *)out->data + (size_t)ooff * oes,
                     (const char *)args[0]->data + (size_t)off[0] * es0, inner[0], pb, inner[1],
                     pc, inner[2])) {
            st = tgl_op_error(ctx, n, in, TGL_EINTERNAL, "no reference loop in %s",
                              tgl_dtype_name(cdt));
            goto done;
        }
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < out->shape[d])
                break;
            idx[d] = 0;
        }
    }
done:
    for (int i = 0; i < 3; i++)
        tgl_array_release(conv[i]);
    return st;
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
    .kernel = elemwise_kernel,
    .grad = elemwise_grad,
};
