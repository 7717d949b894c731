/*
 * elemwise_def.h — the elementwise op table: the one definition of each
 * elementwise op.  TGL_OPS (ops.h) declares every op (id, Lua name, impl,
 * shape and Rop rules, synopsis); TGL_ELEMWISE_OPS below gives, for each op
 * whose impl there is `elemwise`, the rest: arity, kind (which is its dtype
 * rule), its scalar semantics as C text (float and integer forms), its
 * pullback and its pushforward.  Everything about such an op is generated
 * from its entry:
 *
 *   ops/elemwise.c  expands each expression into the reference kernel's
 *                   loops (one loop per op and C type: a switch over the op
 *                   once per row, never per element), each pullback into a
 *                   function, and the entries into tgl_elemwise_get()'s
 *                   table, with the expressions also as strings;
 *   cgen/expr.c     renders those strings into generated kernels (operand
 *                   names, C types and libm names substituted).
 *
 * A second X-macro rather than more columns in TGL_OPS: these columns
 * (C expressions, pullback code) mean nothing for the other families, and
 * TGL_OPS stays one line per op.  elemwise.c static_asserts that this table
 * lists exactly the ops TGL_OPS gives impl `elemwise`, each once.
 *
 * An entry: _(ID, arity, kind, tmp, float, int, pull)
 *
 *   kind   the dtype rule (TGL_EW_<kind>; inputs are promoted as NumPy
 *          promotes bool < uint8 < int32 < int64 < float32 < float64):
 *            MATH    computes in float: integer inputs compute in float64;
 *                    float form only
 *            ARITH   computes in the promoted dtype (bool counts: int64)
 *            SIGNED  ARITH, and bool inputs are an error (use not_)
 *            CMP     computes in the promoted dtype; the result is bool
 *            LOGIC   bool in, bool out; integer form only
 *            SELECT  a is the bool condition; b and c promote; any dtype
 *            CAST    no expression: array.c's conversion is the reference,
 *                    cgen/expr.c's cast() renders it (each (from, to) pair
 *                    is its own rule)
 *   float  the value for float32/float64 compute dtypes, `NONE` if never;
 *   int    the value for int32/int64/uint8/bool (uint8_t) compute dtypes.
 *          Both are C expressions over: a, b, c (the operands, of the
 *          compute type; SELECT's a is uint8_t), T (the compute C type), e
 *          (the temporary), libm functions by their double names (exp,
 *          log1p, fabs...: the reference includes <tgmath.h>, cgen appends
 *          f in float32), the helpers of TGL_ELEMWISE_HELPERS, and casts to
 *          the <stdint.h> types.  The value is converted to the result's C
 *          type.  Integer arithmetic wraps: it is computed in uint64_t.
 *   tmp    the temporary `e` (of type T) computed before the value, so a
 *          subexpression is evaluated once; `0` when there is none.  It is
 *          computed in every form of the op: give one only to MATH ops.
 *   pull   the pullback: statements setting gin[i], the gradient of input
 *          i (left NULL: none).  In scope: g (the output's gradient), y
 *          (the node; as a value, its output), a, b, c (the input nodes),
 *          dt (y's dtype), one and zero (scalars of dt), and elemwise.c's
 *          builders MK1/MK2/MK3(OP, ...), K(v) (a scalar of dt), MASK(m)
 *          (bool m as dt), FLAT(a) (zeros shaped like a, of dt).  The
 *          driver (grad.c) sums each gin[i] to its input's broadcast
 *          pattern and casts it to its dtype.
 *
 * No pushforward column: an elementwise Jacobian is diagonal, so forward
 * mode (src/rop) applies the pullback to the input's tangent.
 *
 * Adding an elementwise op: its line in TGL_OPS (ops.h), its entry here,
 * and its Lua name in lua/tgl if it is public; a libm function cgen has
 * not needed before goes in TGL_CGEN_MATH (cgen/expr.h).  Nothing else
 * names it (doc/internals.md).
 */
#ifndef TGL_ELEMWISE_DEF_H
#define TGL_ELEMWISE_DEF_H

#include "engine/ops/ops.h"

#include <stdbool.h>

#define TGL_ELEMWISE_OPS(_)                                                     \
    /* unary */                                                                 \
    _(NEG, 1, SIGNED, 0, -a, (T)(0 - (uint64_t)a),                              \
      gin[0] = MK1(NEG, g))                                               \
    _(ABS, 1, SIGNED, 0, fabs(a), a < 0 ? (T)(0 - (uint64_t)a) : a,             \
      gin[0] = MK2(MUL, g, MK1(SIGN, a)))                                 \
    /* sign: keeps NaN and -0.0 */                                              \
    _(SIGN, 1, SIGNED, 0, a > 0 ? (T)1 : a < 0 ? (T)-1 : a,                     \
      (T)(a > 0 ? 1 : a < 0 ? -1 : 0),                                          \
      gin[0] = FLAT(a))                                                   \
    _(EXP, 1, MATH, 0, exp(a), NONE,                                            \
      gin[0] = MK2(MUL, g, y))                                            \
    _(LOG, 1, MATH, 0, log(a), NONE,                                            \
      gin[0] = MK2(DIV, g, a))                                            \
    _(LOG1P, 1, MATH, 0, log1p(a), NONE,                                        \
      gin[0] = MK2(DIV, g, MK2(ADD, one, a)))                             \
    _(EXPM1, 1, MATH, 0, expm1(a), NONE,                                        \
      gin[0] = MK2(MUL, g, MK2(ADD, y, one)))                             \
    _(SQRT, 1, MATH, 0, sqrt(a), NONE,                                          \
      gin[0] = MK2(DIV, MK2(MUL, g, K(0.5)), y))                          \
    _(SQR, 1, ARITH, 0, a * a, (T)((uint64_t)a * (uint64_t)a),                  \
      gin[0] = MK2(MUL, g, MK2(MUL, K(2.0), a)))                          \
    _(RECIP, 1, MATH, 0, (T)1 / a, NONE,                                        \
      gin[0] = MK1(NEG, MK2(MUL, g, MK1(SQR, y))))                        \
    _(TANH, 1, MATH, 0, tanh(a), NONE,                                          \
      gin[0] = MK2(MUL, g, MK2(SUB, one, MK1(SQR, y))))                   \
    /* sigmoid: e = e^-|a|, so a >= 0 ? 1/(1+e^-a) : e^a/(1+e^a) (stable,  */  \
    /* NaN stays NaN) with one exp and no branch, which vectorizes         */  \
    _(SIGMOID, 1, MATH, exp(-fabs(a)), a >= 0 ? (T)1 / ((T)1 + e) : e / ((T)1 + e), \
      NONE,                                                                     \
      gin[0] = MK2(MUL, g, MK2(MUL, y, MK2(SUB, one, y))))                \
    /* softplus: a > 0 ? a + ln(1 + e^-a) : ln(1 + e^a), stable            */  \
    _(SOFTPLUS, 1, MATH, log1p(exp(-fabs(a))), a > 0 ? a + e : e, NONE,         \
      gin[0] = MK2(MUL, g, MK1(SIGMOID, a)))                              \
    /* relu: max(x, 0), and maximum propagates NaN (op matrix) */             \
    _(RELU, 1, ARITH, 0, (a > 0 || a != a) ? a : (T)0, a > 0 ? a : (T)0,        \
      gin[0] = MK2(MUL, g, MASK(MK2(GT, a, zero))))                       \
    _(SIN, 1, MATH, 0, sin(a), NONE,                                            \
      gin[0] = MK2(MUL, g, MK1(COS, a)))                                  \
    _(COS, 1, MATH, 0, cos(a), NONE,                                            \
      gin[0] = MK1(NEG, MK2(MUL, g, MK1(SIN, a))))                        \
    _(FLOOR, 1, ARITH, 0, floor(a), a,                                          \
      gin[0] = FLAT(a))                                                   \
    _(CEIL, 1, ARITH, 0, ceil(a), a,                                            \
      gin[0] = FLAT(a))                                                   \
    /* round: half away from zero (C's round, not rint) */                      \
    _(ROUND, 1, ARITH, 0, round(a), a,                                          \
      gin[0] = FLAT(a))                                                   \
    _(NOT, 1, LOGIC, 0, NONE, (T)(a == 0),                                      \
      gin[0] = NULL)                                                      \
    /* cast: float to float passes the gradient; through integers, none */     \
    _(CAST, 1, CAST, 0, NONE, NONE,                                             \
      gin[0] = tgl_dtype_is_float(a->type.dtype) && tgl_dtype_is_float(dt) ? g : NULL)   \
    /* binary */                                                                \
    _(ADD, 2, ARITH, 0, a + b, (T)((uint64_t)a + (uint64_t)b),                  \
      gin[0] = g; gin[1] = g)                                             \
    _(SUB, 2, ARITH, 0, a - b, (T)((uint64_t)a - (uint64_t)b),                  \
      gin[0] = g; gin[1] = MK1(NEG, g))                                   \
    _(MUL, 2, ARITH, 0, a * b, (T)((uint64_t)a * (uint64_t)b),                  \
      gin[0] = MK2(MUL, g, b); gin[1] = MK2(MUL, g, a))                   \
    _(DIV, 2, MATH, 0, a / b, NONE,                                             \
      gin[0] = MK2(DIV, g, b); gin[1] = MK1(NEG, MK2(DIV, MK2(MUL, g, y), b))) \
    /* pow: d/da = b a^(b-1), d/db = a^b ln a (for a > 0) */                   \
    _(POW, 2, ARITH, 0, pow(a, b), (T)tgl_pow_i(a, b),                          \
      gin[0] = MK2(MUL, g, MK2(MUL, b, MK2(POW, a, MK2(SUB, b, one))));         \
      gin[1] = MK2(MUL, g, MK2(MUL, y, MK1(LOG, a))))                     \
    /* mod: Lua's %, the sign of b, computed in double as Lua computes it  */ \
    /* (in float32, a / b overflowed: -2.5 % 1e-45 gave inf; op matrix)     */ \
    _(MOD, 2, ARITH, 0, (T)tgl_mod_f(a, b), (T)tgl_mod_i(a, b),                 \
      gin[0] = g; gin[1] = MK1(NEG, MK2(MUL, g, MK1(FLOOR, MK2(DIV, a, b))))) \
    /* maximum, minimum: a NaN in a wins, and b's NaN fails a >= b */          \
    _(MAXIMUM, 2, ARITH, 0, (a != a || a >= b) ? a : b, a >= b ? a : b,         \
      gin[0] = MK2(MUL, g, MASK(MK2(GE, a, b)));                                \
      gin[1] = MK2(MUL, g, MASK(MK2(LT, a, b))))                          \
    _(MINIMUM, 2, ARITH, 0, (a != a || a <= b) ? a : b, a <= b ? a : b,         \
      gin[0] = MK2(MUL, g, MASK(MK2(LE, a, b)));                                \
      gin[1] = MK2(MUL, g, MASK(MK2(GT, a, b))))                          \
    _(EQ, 2, CMP, 0, a == b, a == b, gin[0] = gin[1] = NULL)              \
    _(NEQ, 2, CMP, 0, a != b, a != b, gin[0] = gin[1] = NULL)             \
    _(LT, 2, CMP, 0, a < b, a < b, gin[0] = gin[1] = NULL)                \
    _(LE, 2, CMP, 0, a <= b, a <= b, gin[0] = gin[1] = NULL)              \
    _(GT, 2, CMP, 0, a > b, a > b, gin[0] = gin[1] = NULL)                \
    _(GE, 2, CMP, 0, a >= b, a >= b, gin[0] = gin[1] = NULL)              \
    _(AND, 2, LOGIC, 0, NONE, (T)(a != 0 && b != 0),                            \
      gin[0] = gin[1] = NULL)                                             \
    _(OR, 2, LOGIC, 0, NONE, (T)(a != 0 || b != 0),                             \
      gin[0] = gin[1] = NULL)                                             \
    /* ternary */                                                               \
    _(SWITCH, 3, SELECT, 0, a ? b : c, a ? b : c,                               \
      gin[0] = NULL; gin[1] = MK3(SWITCH, a, g, zero);                          \
      gin[2] = MK3(SWITCH, a, zero, g))                                   \
    /* clip: min(max(a, b), c) as documented, so hi wins when lo > hi, and  */ \
    /* a NaN anywhere propagates (maximum and minimum do) (op matrix)        */ \
    _(CLIP, 3, ARITH, 0,                                                        \
      a != a ? a : b != b ? b : c != c ? c : a < b ? (b <= c ? b : c) : a > c ? c : a, \
      a < b ? (b <= c ? b : c) : a > c ? c : a,                                 \
      gin[0] = MK2(MUL, g, MASK(MK2(AND, MK2(GE, a, b), MK2(LE, a, c))));       \
      gin[1] = MK2(MUL, g, MASK(MK2(AND, MK2(LT, a, b), MK2(LE, b, c))));       \
      gin[2] = MK2(MUL, g, MASK(MK2(OR, MK2(GT, a, c), MK2(GT, b, c)))))

/* Functions the expressions may call: _(return type, name, (parameters),
 * body...).  The engine compiles them (elemwise.c); a generated kernel
 * gets the same text, once, when one of its instructions calls one. */
#define TGL_ELEMWISE_HELPERS(_)                                                 \
    /* Lua's % on integers: the sign of b; by 0 gives 0, and by -1 too       */ \
    /* (so INT64_MIN % -1 never traps)                                       */ \
    _(int64_t, tgl_mod_i, (int64_t a, int64_t b),                               \
      if (b == 0 || b == -1)                                                    \
          return 0;                                                             \
      int64_t r = a % b;                                                        \
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;)                     \
    /* Lua's a % b = a - floor(a / b) * b in double (float32 operands too:   */ \
    /* their quotient may overflow float); floor by truncation, exact below  */ \
    /* 2^52 (larger doubles are integers), keeping -0.0, NaN and infinities, */ \
    /* with no libm call (helpers are pasted into kernels as they are)       */ \
    _(double, tgl_mod_f, (double a, double b),                                  \
      double q = a / b;                                                         \
      if (q > -4503599627370496.0 && q < 4503599627370496.0) {                  \
          double t = (double)(int64_t)q;                                        \
          if (t > q)                                                            \
              t -= 1;                                                           \
          if (t != q)                                                           \
              q = t;                                                            \
      }                                                                         \
      return a - q * b;)                                                        \
    /* a^b by squaring, wrapping; b < 0: 1/a^-b truncated (0 unless |a| = 1) */ \
    _(int64_t, tgl_pow_i, (int64_t a, int64_t b),                               \
      if (b < 0)                                                                \
          return a == 1 ? 1 : a == -1 ? (b % 2 ? -1 : 1) : 0;                   \
      uint64_t r = 1, x = (uint64_t)a;                                          \
      while (b) {                                                               \
          if (b & 1)                                                            \
              r *= x;                                                           \
          x *= x;                                                               \
          b >>= 1;                                                              \
      }                                                                         \
      return (int64_t)r;)

/* Kinds: the dtype rules above. */
enum {
    TGL_EW_MATH,
    TGL_EW_ARITH,
    TGL_EW_SIGNED,
    TGL_EW_CMP,
    TGL_EW_LOGIC,
    TGL_EW_SELECT,
    TGL_EW_CAST
};

/* An entry of the table, as the engine keeps it (elemwise.c). */
typedef struct tgl_elemwise_def {
    int arity;                 /* 1..3 */
    int kind;                  /* TGL_EW_* */
    const char *tmp;           /* the entry's C text: "0" when no temporary */
    const char *fexpr;         /* "NONE" where the kind has no such form    */
    const char *iexpr;
    tgl_status (*pull)(tgl_ctx *ctx, tgl_node *n, tgl_node *gout, tgl_node **gin);
} tgl_elemwise_def;

/* The entry of op, or NULL when op is not elementwise. */
const tgl_elemwise_def *tgl_elemwise_get(int op);

/* A helper of TGL_ELEMWISE_HELPERS: its name and its C definition. */
typedef struct tgl_elemwise_helper {
    const char *name;
    const char *text;
} tgl_elemwise_helper;

/* The helpers, ended by {NULL, NULL}. */
extern const tgl_elemwise_helper tgl_elemwise_helpers[];

/* Whether an op of kind computes in dtype (its operands' dtype once
 * converted; CMP's result is bool, SELECT's condition is). */
static inline bool tgl_elemwise_computes(int kind, int dtype)
{
    switch (kind) {
    case TGL_EW_MATH: return dtype == TGL_FLOAT32 || dtype == TGL_FLOAT64;
    case TGL_EW_ARITH:
    case TGL_EW_SIGNED: return dtype != TGL_BOOL; /* bool arithmetic counts in int64 */
    case TGL_EW_LOGIC: return dtype == TGL_BOOL;
    default: return true;                         /* CMP, SELECT, CAST */
    }
}

/* The dtype elementwise node n, of kind, computes in: its operands are
 * converted to it (switch's condition stays bool:
 * tgl_elemwise_operand_dtype).  Shared by the type rule (elemwise.c) and
 * the backends' kernels, which call it once per run. */
static inline int tgl_elemwise_compute_dtype(const tgl_node *n, int kind)
{
    if (kind == TGL_EW_CAST)
        return n->in[0]->type.dtype;
    if (kind == TGL_EW_LOGIC)
        return TGL_BOOL;
    int first = kind == TGL_EW_SELECT ? 1 : 0;
    int dt = n->in[first]->type.dtype;
    for (int i = first + 1; i < n->nin; i++)
        dt = tgl_dtype_promote(dt, n->in[i]->type.dtype);
    if (kind == TGL_EW_MATH && !tgl_dtype_is_float(dt))
        dt = TGL_FLOAT64;
    if (dt == TGL_BOOL && kind != TGL_EW_CMP && kind != TGL_EW_SELECT)
        dt = TGL_INT64; /* arithmetic on bools counts */
    return dt;
}

#endif /* TGL_ELEMWISE_DEF_H */
