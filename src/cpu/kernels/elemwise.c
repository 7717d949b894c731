/*
 * elemwise.c — the CPU kernel of the elementwise family: the table of
 * engine/ops/elemwise_def.h (the ops' meaning, types and pullbacks are in
 * engine/ops/elemwise.c) compiled into plain C loops, one per op and C
 * type.  This is the reference the generated kernels are checked against.
 *
 * Inputs whose dtype differs from the compute dtype are converted first,
 * then one loop per output row runs with per-input strides (0 on
 * broadcast axes).  Signed integer arithmetic wraps (computed unsigned),
 * so overflow is defined behaviour.
 */
#include "cpu/kernels/kernels.h"
#include "engine/ops/elemwise_def.h"

#include <stdlib.h>
#include <string.h>
/* The table's expressions call libm by the double names; type-generic
 * math makes exp(a) expf(a) when a is a float, as cgen renders it. */
#include <tgmath.h>

/* The table's helpers, compiled here. */
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
    int cdt = tgl_elemwise_compute_dtype(n, def->kind);
    if (!tgl_elemwise_computes(def->kind, cdt))
        return tgl_op_error(ctx, n, in, TGL_EINTERNAL, "does not compute in %s",
                            tgl_dtype_name(cdt));
    tgl_array *conv[3] = {NULL, NULL, NULL};
    const tgl_array *args[3];
    tgl_status st = TGL_OK;
    for (int i = 0; i < n->nin && !st; i++) {
        /* tgl_elemwise_operand_dtype, without looking the op up again */
        int want = n->op == TGL_OP_SWITCH && i == 0 ? TGL_BOOL : cdt;
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

const tgl_op_kernel tgl_cpu_kernel_elemwise = {.run = elemwise_kernel};
