/*
 * elemwise.c — the elementwise op family: unary math, binary arithmetic,
 * comparisons and logic, switch and clip.  One type rule, one broadcasting
 * shape rule, one reference kernel and one pullback serve every op here,
 * each switching on the op id.
 *
 * Types: inputs have the same ndim (tgl_apply pads them); an output axis is
 * broadcastable when every input's is.  Dtypes promote as NumPy does among
 * tgl's six (bool < uint8 < int32 < int64 < float32 < float64); math
 * functions of integers give float64 (the Lua layer casts integers to
 * floatX first); comparisons and logic give bool.
 *
 * Kernel: inputs whose dtype differs from the compute dtype are converted
 * first, then one loop per output row runs with per-input strides (0 on
 * broadcast axes).  Signed integer arithmetic wraps (computed unsigned), so
 * overflow is defined behaviour.
 */
#include "engine/ops/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- type rules ------------------------------------------------------ */

static int promote(int a, int b)
{
    return tgl_dtype_promote(a, b);
}

static bool is_unary_math(int op)
{
    switch (op) {
    case TGL_OP_EXP: case TGL_OP_LOG: case TGL_OP_LOG1P: case TGL_OP_EXPM1:
    case TGL_OP_SQRT: case TGL_OP_TANH: case TGL_OP_SIGMOID: case TGL_OP_SOFTPLUS:
    case TGL_OP_SIN: case TGL_OP_COS: case TGL_OP_RECIP:
        return true;
    default:
        return false;
    }
}

static bool is_compare(int op)
{
    return op >= TGL_OP_EQ && op <= TGL_OP_GE;
}

static bool is_logic(int op)
{
    return op == TGL_OP_AND || op == TGL_OP_OR || op == TGL_OP_NOT;
}

/* The dtype the loop computes in (inputs are converted to it). */
static int compute_dtype(const tgl_node *n)
{
    int op = n->op;
    if (op == TGL_OP_CAST)
        return n->in[0]->type.dtype;
    if (is_logic(op))
        return TGL_BOOL;
    int first = op == TGL_OP_SWITCH ? 1 : 0;
    int dt = n->in[first]->type.dtype;
    for (int i = first + 1; i < n->nin; i++)
        dt = promote(dt, n->in[i]->type.dtype);
    if ((is_unary_math(op) || op == TGL_OP_DIV) && !tgl_dtype_is_float(dt))
        dt = TGL_FLOAT64;
    if (dt == TGL_BOOL && !is_compare(op) && op != TGL_OP_SWITCH)
        dt = TGL_INT64; /* arithmetic on bools counts */
    return dt;
}

int tgl_elemwise_operand_dtype(const tgl_node *n, int i)
{
    if (n->op == TGL_OP_CAST)
        return n->in[0]->type.dtype;
    if (n->op == TGL_OP_SWITCH)
        return i == 0 ? TGL_BOOL : n->type.dtype;
    return compute_dtype(n);
}

static tgl_status elemwise_infer(tgl_ctx *ctx, tgl_node *n)
{
    int op = n->op;
    int arity = op <= TGL_OP_CAST ? 1 : op <= TGL_OP_OR ? 2 : 3;
    TGL_CHECK(n->nin == arity, TGL_EINVAL, "takes %d inputs, got %d", arity, n->nin);
    int nd = n->in[0]->type.ndim;
    uint32_t bcast = ~0u;
    for (int i = 0; i < n->nin; i++) {
        TGL_CHECK(n->in[i]->type.ndim == nd, TGL_ESHAPE,
                  "inputs have %d and %d dimensions", nd, n->in[i]->type.ndim);
        bcast &= n->in[i]->type.bcast;
    }
    int dt = compute_dtype(n);
    if (op == TGL_OP_NEG || op == TGL_OP_ABS || op == TGL_OP_SIGN) {
        TGL_CHECK(n->in[0]->type.dtype != TGL_BOOL, TGL_EDTYPE, "not defined for bool; use not_");
    }
    if (op == TGL_OP_CAST) {
        TGL_CHECK(n->p.n == 1 && n->p.i[0] >= 0 && n->p.i[0] < TGL_NDTYPES, TGL_EDTYPE,
                  "needs a target dtype");
        dt = (int)n->p.i[0];
    } else {
        TGL_CHECK(n->p.n == 0, TGL_EINVAL, "takes no parameters");
    }
    if (is_compare(op) || is_logic(op))
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

/* ---- scalar functions ------------------------------------------------ */

static inline double sigmoid_d(double x)
{
    if (x >= 0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

static inline float sigmoid_f(float x)
{
    if (x >= 0)
        return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

static inline double softplus_d(double x)
{
    return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

static inline float softplus_f(float x)
{
    return x > 0 ? x + log1pf(expf(-x)) : log1pf(expf(x));
}

static inline double sign_d(double x)
{
    return x > 0 ? 1.0 : x < 0 ? -1.0 : x; /* keeps NaN and -0.0 */
}

static inline double mod_d(double a, double b)
{
    return a - floor(a / b) * b;
}

static inline float mod_f(float a, float b)
{
    return a - floorf(a / b) * b;
}

static inline int64_t mod_i(int64_t a, int64_t b)
{
    if (b == 0)
        return 0;
    if (b == -1)
        return 0; /* also avoids INT64_MIN % -1 */
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

static inline int64_t pow_i(int64_t a, int64_t b)
{
    if (b < 0)
        return a == 1 ? 1 : a == -1 ? (b % 2 ? -1 : 1) : 0;
    uint64_t r = 1, x = (uint64_t)a;
    while (b) {
        if (b & 1)
            r *= x;
        x *= x;
        b >>= 1;
    }
    return (int64_t)r;
}

/* ---- the loops ------------------------------------------------------- */

/* One row: n elements, element k of input j at ptr_j[k * s_j]. */
#define ROW(EXPR)                                                             \
    for (int64_t k = 0; k < len; k++) {                                       \
        T x = a[k * sa];                                                      \
        T y = nb ? b[k * sb] : (T)0;                                          \
        T z = nc ? c[k * sc] : (T)0;                                          \
        (void)x; (void)y; (void)z;                                            \
        o[k] = (EXPR);                                                        \
    }

#define ROW_BOOL(EXPR)                                                        \
    for (int64_t k = 0; k < len; k++) {                                       \
        T x = a[k * sa];                                                      \
        T y = b[k * sb];                                                      \
        ob[k] = (uint8_t)(EXPR);                                              \
    }

/* Float rows: every op.  F is the libm suffix (f or nothing). */
#define FLOAT_ROWS(T, SIG, SOFTPLUS, MOD, F)                                   \
    static void row_##T(int op, int64_t len, void *out, const T *a, int64_t sa, \
                        const T *b, int64_t sb, const T *c, int64_t sc, int nb, int nc) \
    {                                                                          \
        T *o = out;                                                            \
        uint8_t *ob = out;                                                     \
        switch (op) {                                                          \
        case TGL_OP_NEG: ROW(-x) break;                                        \
        case TGL_OP_ABS: ROW(fabs##F(x)) break;                                \
        case TGL_OP_SIGN: ROW((T)sign_d(x)) break;                             \
        case TGL_OP_EXP: ROW(exp##F(x)) break;                                 \
        case TGL_OP_LOG: ROW(log##F(x)) break;                                 \
        case TGL_OP_LOG1P: ROW(log1p##F(x)) break;                             \
        case TGL_OP_EXPM1: ROW(expm1##F(x)) break;                             \
        case TGL_OP_SQRT: ROW(sqrt##F(x)) break;                               \
        case TGL_OP_SQR: ROW(x * x) break;                                     \
        case TGL_OP_RECIP: ROW((T)1 / x) break;                                \
        case TGL_OP_TANH: ROW(tanh##F(x)) break;                               \
        case TGL_OP_SIGMOID: ROW(SIG(x)) break;                                \
        case TGL_OP_SOFTPLUS: ROW(SOFTPLUS(x)) break;                          \
        case TGL_OP_RELU: ROW(x > 0 ? x : (T)0) break;                         \
        case TGL_OP_SIN: ROW(sin##F(x)) break;                                 \
        case TGL_OP_COS: ROW(cos##F(x)) break;                                 \
        case TGL_OP_FLOOR: ROW(floor##F(x)) break;                             \
        case TGL_OP_CEIL: ROW(ceil##F(x)) break;                               \
        case TGL_OP_ROUND: ROW(round##F(x)) break;                             \
        case TGL_OP_ADD: ROW(x + y) break;                                     \
        case TGL_OP_SUB: ROW(x - y) break;                                     \
        case TGL_OP_MUL: ROW(x * y) break;                                     \
        case TGL_OP_DIV: ROW(x / y) break;                                     \
        case TGL_OP_POW: ROW(pow##F(x, y)) break;                              \
        case TGL_OP_MOD: ROW(MOD(x, y)) break;                                 \
        case TGL_OP_MAXIMUM: ROW((x != x || x >= y) ? x : y) break;            \
        case TGL_OP_MINIMUM: ROW((x != x || x <= y) ? x : y) break;            \
        case TGL_OP_EQ: ROW_BOOL(x == y) break;                                \
        case TGL_OP_NEQ: ROW_BOOL(x != y) break;                               \
        case TGL_OP_LT: ROW_BOOL(x < y) break;                                 \
        case TGL_OP_LE: ROW_BOOL(x <= y) break;                                \
        case TGL_OP_GT: ROW_BOOL(x > y) break;                                 \
        case TGL_OP_GE: ROW_BOOL(x >= y) break;                                \
        case TGL_OP_CLIP: ROW(x < y ? y : x > z ? z : x) break;                \
        default: break;                                                        \
        }                                                                      \
    }

#define T float
FLOAT_ROWS(float, sigmoid_f, softplus_f, mod_f, f)
#undef T
#define T double
FLOAT_ROWS(double, sigmoid_d, softplus_d, mod_d, )
#undef T

/* Sign test that also compiles quietly for unsigned element types. */
static inline bool is_neg(int64_t v)
{
    return v < 0;
}

/* Integer rows (int32, int64, uint8 and bool as uint8): arithmetic wraps
 * through uint64_t; math functions never reach here (they compute in
 * float). */
#define INT_ROWS(T, NAME)                                                      \
    static void row_##NAME(int op, int64_t len, void *out, const T *a, int64_t sa, \
                           const T *b, int64_t sb, const T *c, int64_t sc, int nb, int nc) \
    {                                                                          \
        T *o = out;                                                            \
        uint8_t *ob = out;                                                     \
        switch (op) {                                                          \
        case TGL_OP_NEG: ROW((T)(0 - (uint64_t)x)) break;                      \
        case TGL_OP_ABS: ROW(is_neg(x) ? (T)(0 - (uint64_t)x) : x) break;      \
        case TGL_OP_SIGN: ROW((T)(x > 0 ? 1 : is_neg(x) ? -1 : 0)) break;      \
        case TGL_OP_SQR: ROW((T)((uint64_t)x * (uint64_t)x)) break;            \
        case TGL_OP_RELU: ROW(x > 0 ? x : (T)0) break;                         \
        case TGL_OP_FLOOR: case TGL_OP_CEIL: case TGL_OP_ROUND: ROW(x) break;  \
        case TGL_OP_NOT: ROW((T)(x == 0)) break;                               \
        case TGL_OP_ADD: ROW((T)((uint64_t)x + (uint64_t)y)) break;            \
        case TGL_OP_SUB: ROW((T)((uint64_t)x - (uint64_t)y)) break;            \
        case TGL_OP_MUL: ROW((T)((uint64_t)x * (uint64_t)y)) break;            \
        case TGL_OP_POW: ROW((T)pow_i(x, y)) break;                            \
        case TGL_OP_MOD: ROW((T)mod_i(x, y)) break;                            \
        case TGL_OP_MAXIMUM: ROW(x >= y ? x : y) break;                        \
        case TGL_OP_MINIMUM: ROW(x <= y ? x : y) break;                        \
        case TGL_OP_EQ: ROW_BOOL(x == y) break;                                \
        case TGL_OP_NEQ: ROW_BOOL(x != y) break;                               \
        case TGL_OP_LT: ROW_BOOL(x < y) break;                                 \
        case TGL_OP_LE: ROW_BOOL(x <= y) break;                                \
        case TGL_OP_GT: ROW_BOOL(x > y) break;                                 \
        case TGL_OP_GE: ROW_BOOL(x >= y) break;                                \
        case TGL_OP_AND: ROW((T)(x != 0 && y != 0)) break;                     \
        case TGL_OP_OR: ROW((T)(x != 0 || y != 0)) break;                      \
        case TGL_OP_CLIP: ROW(x < y ? y : x > z ? z : x) break;                \
        default: break;                                                        \
        }                                                                      \
    }

#define T int32_t
INT_ROWS(int32_t, i32)
#undef T
#define T int64_t
INT_ROWS(int64_t, i64)
#undef T
#define T uint8_t
INT_ROWS(uint8_t, u8)
#undef T

/* Runs one row of op in compute dtype dt. */
static void run_row(int dt, int op, int64_t len, void *out, const void *a, int64_t sa,
                    const void *b, int64_t sb, const void *c, int64_t sc, int nb, int nc)
{
    switch (dt) {
    case TGL_FLOAT32: row_float(op, len, out, a, sa, b, sb, c, sc, nb, nc); break;
    case TGL_FLOAT64: row_double(op, len, out, a, sa, b, sb, c, sc, nb, nc); break;
    case TGL_INT32: row_i32(op, len, out, a, sa, b, sb, c, sc, nb, nc); break;
    case TGL_INT64: row_i64(op, len, out, a, sa, b, sb, c, sc, nb, nc); break;
    default: row_u8(op, len, out, a, sa, b, sb, c, sc, nb, nc); break;
    }
}

/* The switch op: picks per element between two inputs of the output dtype
 * by a bool condition. */
static void switch_rows(size_t es, int64_t len, char *o, const uint8_t *cnd, int64_t scnd,
                        const char *a, int64_t sa, const char *b, int64_t sb)
{
    for (int64_t k = 0; k < len; k++)
        memcpy(o + (size_t)k * es, cnd[k * scnd] ? a + (size_t)(k * sa) * es
                                                 : b + (size_t)(k * sb) * es, es);
}

static tgl_status elemwise_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                  tgl_array *out)
{
    int op = n->op;
    if (op == TGL_OP_CAST)
        return tgl_array_assign(ctx, out, in[0]);
    int cdt = compute_dtype(n);
    tgl_array *conv[3] = {NULL, NULL, NULL};
    const tgl_array *args[3];
    tgl_status st = TGL_OK;
    for (int i = 0; i < n->nin && !st; i++) {
        int want = (op == TGL_OP_SWITCH && i == 0) ? TGL_BOOL
                   : op == TGL_OP_SWITCH           ? n->type.dtype
                                                   : cdt;
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
        char *op_out = (char *)out->data + (size_t)ooff * oes;
        if (op == TGL_OP_SWITCH) {
            switch_rows(oes, len, op_out, (const uint8_t *)args[0]->data + off[0], inner[0],
                        (const char *)args[1]->data + (size_t)off[1] * oes, inner[1],
                        (const char *)args[2]->data + (size_t)off[2] * oes, inner[2]);
        } else {
            const void *pb = n->nin > 1 ? (const char *)args[1]->data + (size_t)off[1] * ies : NULL;
            const void *pc = n->nin > 2 ? (const char *)args[2]->data + (size_t)off[2] * ies : NULL;
            run_row(cdt, op, len, op_out, (const char *)args[0]->data + (size_t)off[0] * es0,
                    inner[0], pb, inner[1], pc, inner[2], n->nin > 1, n->nin > 2);
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

/* ---- pullbacks ------------------------------------------------------- */

/* The driver (grad.c) sums each gin to its input's broadcast pattern and
 * casts it to the input's dtype, so pullbacks may return full-shape
 * gradients of the output's dtype.  A node that fails to build leaves NULL
 * and a message in the context, which the driver reports. */
static tgl_status elemwise_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    tgl_node *a = n->in[0], *b = n->nin > 1 ? n->in[1] : NULL, *c = n->nin > 2 ? n->in[2] : NULL;
    int dt = n->type.dtype;
    tgl_node *one = tgl_mk_scalar(ctx, dt, 1.0);
    tgl_node *zero = tgl_mk_scalar(ctx, dt, 0.0);
#define MK1(op, x) tgl_mk1(ctx, TGL_OP_##op, x)
#define MK2(op, x, y) tgl_mk2(ctx, TGL_OP_##op, x, y)
#define MASK(x) tgl_mk_cast(ctx, x, dt)
    switch (n->op) {
    case TGL_OP_NEG: gin[0] = MK1(NEG, g); break;
    case TGL_OP_ABS: gin[0] = MK2(MUL, g, MK1(SIGN, a)); break;
    case TGL_OP_SIGN: case TGL_OP_FLOOR: case TGL_OP_CEIL: case TGL_OP_ROUND:
        gin[0] = tgl_mk_fill_like(ctx, a, dt, 0.0); /* flat almost everywhere */
        break;
    case TGL_OP_EXP: gin[0] = MK2(MUL, g, n); break;
    case TGL_OP_LOG: gin[0] = MK2(DIV, g, a); break;
    case TGL_OP_LOG1P: gin[0] = MK2(DIV, g, MK2(ADD, one, a)); break;
    case TGL_OP_EXPM1: gin[0] = MK2(MUL, g, MK2(ADD, n, one)); break;
    case TGL_OP_SQRT:
        gin[0] = MK2(DIV, MK2(MUL, g, tgl_mk_scalar(ctx, dt, 0.5)), n);
        break;
    case TGL_OP_SQR: gin[0] = MK2(MUL, g, MK2(MUL, tgl_mk_scalar(ctx, dt, 2.0), a)); break;
    case TGL_OP_RECIP: gin[0] = MK1(NEG, MK2(MUL, g, MK1(SQR, n))); break;
    case TGL_OP_TANH: gin[0] = MK2(MUL, g, MK2(SUB, one, MK1(SQR, n))); break;
    case TGL_OP_SIGMOID: gin[0] = MK2(MUL, g, MK2(MUL, n, MK2(SUB, one, n))); break;
    case TGL_OP_SOFTPLUS: gin[0] = MK2(MUL, g, MK1(SIGMOID, a)); break;
    case TGL_OP_RELU: gin[0] = MK2(MUL, g, MASK(MK2(GT, a, zero))); break;
    case TGL_OP_SIN: gin[0] = MK2(MUL, g, MK1(COS, a)); break;
    case TGL_OP_COS: gin[0] = MK1(NEG, MK2(MUL, g, MK1(SIN, a))); break;
    case TGL_OP_CAST:
        gin[0] = tgl_dtype_is_float(a->type.dtype) && tgl_dtype_is_float(dt) ? g : NULL;
        break;
    case TGL_OP_ADD: gin[0] = g; gin[1] = g; break;
    case TGL_OP_SUB: gin[0] = g; gin[1] = MK1(NEG, g); break;
    case TGL_OP_MUL: gin[0] = MK2(MUL, g, b); gin[1] = MK2(MUL, g, a); break;
    case TGL_OP_DIV:
        gin[0] = MK2(DIV, g, b);
        gin[1] = MK1(NEG, MK2(DIV, MK2(MUL, g, n), b));
        break;
    case TGL_OP_POW:
        /* d/da = b a^(b-1); d/db = a^b ln a (defined for a > 0) */
        gin[0] = MK2(MUL, g, MK2(MUL, b, tgl_mk2(ctx, TGL_OP_POW, a, MK2(SUB, b, one))));
        gin[1] = MK2(MUL, g, MK2(MUL, n, MK1(LOG, a)));
        break;
    case TGL_OP_MOD:
        gin[0] = g;
        gin[1] = MK1(NEG, MK2(MUL, g, MK1(FLOOR, MK2(DIV, a, b))));
        break;
    case TGL_OP_MAXIMUM:
        gin[0] = MK2(MUL, g, MASK(MK2(GE, a, b)));
        gin[1] = MK2(MUL, g, MASK(MK2(LT, a, b)));
        break;
    case TGL_OP_MINIMUM:
        gin[0] = MK2(MUL, g, MASK(MK2(LE, a, b)));
        gin[1] = MK2(MUL, g, MASK(MK2(GT, a, b)));
        break;
    case TGL_OP_SWITCH:
        gin[0] = NULL;
        gin[1] = tgl_mk3(ctx, TGL_OP_SWITCH, a, g, zero);
        gin[2] = tgl_mk3(ctx, TGL_OP_SWITCH, a, zero, g);
        break;
    case TGL_OP_CLIP:
        gin[0] = MK2(MUL, g, MASK(MK2(AND, MK2(GE, a, b), MK2(LE, a, c))));
        gin[1] = MK2(MUL, g, MASK(MK2(LT, a, b)));
        gin[2] = MK2(MUL, g, MASK(MK2(GT, a, c)));
        break;
    default: /* comparisons, logic: not differentiable */
        for (int i = 0; i < n->nin; i++)
            gin[i] = NULL;
        return TGL_OK;
    }
#undef MK1
#undef MK2
#undef MASK
    return TGL_OK;
}

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
    .nin_max = 3, /* elemwise_infer checks each op's exact arity */
    .infer = elemwise_infer,
    .shape = elemwise_shape,
    .kernel = elemwise_kernel,
    .grad = elemwise_grad,
};
