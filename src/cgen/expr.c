/*
 * expr.c — the scalar C of one fused instruction (render.c lays out the
 * kernel around it), and the declarations and helpers that C needs.
 *
 * Each op renders as one statement `T v<i> = ...;` that reproduces its
 * reference row in ops/elemwise.c exactly: the same dtype rules, NaN
 * handling of maximum/minimum/sign/relu, Lua's mod, the stable sigmoid and
 * softplus (branch-free here, with the reference's results, so gcc
 * vectorizes them), integer arithmetic wrapping through uint64, integer
 * pow and mod by 0, and casts as array.c's copy_elements converts
 * (integers wrap, floats saturate into integers, NaN -> 0).  Constants are
 * hex-float literals: exact.
 *
 * libm is declared here rather than included, so a source compiles under
 * libtcc with no headers.  Functions glibc's libmvec provides in vector
 * form carry `#pragma omp declare simd notinbranch`: with -fopenmp-simd,
 * gcc vectorizes loops calling them (libtcc ignores the pragma).  Their
 * results may differ from the scalar functions' in the last ulps.
 */
#include "cgen/cgint.h"
#include "engine/ops/ops.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a growing string ------------------------------------------------------ */

void tgl_sb_printf(tgl_sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if (b->p && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + (size_t)k + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

/* ---- libm and helpers the source may need ------------------------------ */

/* vec: glibc's libmvec has vector variants (2.22: exp log sin cos pow;
 * 2.35: expm1 log1p tanh).  The others gcc inlines as instructions. */
enum { LM_FABS, LM_EXP, LM_LOG, LM_LOG1P, LM_EXPM1, LM_SQRT, LM_TANH, LM_SIN, LM_COS,
       LM_FLOOR, LM_CEIL, LM_ROUND, LM_POW, LM_COUNT };

#if defined(__x86_64__) && defined(__GLIBC__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#define MVEC_NEW true
#else
#define MVEC_NEW false
#endif
#if defined(__x86_64__) && defined(__GLIBC__)
#define MVEC_OLD true
#else
#define MVEC_OLD false
#endif

static const struct {
    const char *name;
    int arity;
    bool vec;
} libm[LM_COUNT] = {
    [LM_FABS] = {"fabs", 1, false},     [LM_EXP] = {"exp", 1, MVEC_OLD},
    [LM_LOG] = {"log", 1, MVEC_OLD},    [LM_LOG1P] = {"log1p", 1, MVEC_NEW},
    [LM_EXPM1] = {"expm1", 1, MVEC_NEW}, [LM_SQRT] = {"sqrt", 1, false},
    [LM_TANH] = {"tanh", 1, MVEC_NEW},  [LM_SIN] = {"sin", 1, MVEC_OLD},
    [LM_COS] = {"cos", 1, MVEC_OLD},    [LM_FLOOR] = {"floor", 1, false},
    [LM_CEIL] = {"ceil", 1, false},     [LM_ROUND] = {"round", 1, false},
    [LM_POW] = {"pow", 2, MVEC_OLD},
};

enum {
    H_MODI = 1u,  /* Lua's mod on integers       */
    H_POWI = 2u,  /* integer power               */
    H_F2I32 = 4u, /* saturating double -> int32  */
    H_F2I64 = 8u, /* saturating double -> int64  */
    H_F2U8 = 16u, /* saturating double -> uint8  */
    H_INF = 32u,  /* TGL_INF / TGL_NAN constants */
};

const char *tgl_cgen_ctype(int dt)
{
    switch (dt) {
    case TGL_FLOAT32: return "float";
    case TGL_FLOAT64: return "double";
    case TGL_INT32: return "int32_t";
    case TGL_INT64: return "int64_t";
    default: return "uint8_t"; /* uint8, bool */
    }
}

static bool is_int(int dt)
{
    return dt == TGL_INT32 || dt == TGL_INT64 || dt == TGL_UINT8;
}

/* Records a use of libm function f in dtype dt and returns its name. */
static const char *fn(tgl_render *r, int f, int dt, char buf[16])
{
    bool single = dt == TGL_FLOAT32;
    r->used[single] |= 1u << f;
    snprintf(buf, 16, "%s%s", libm[f].name, single ? "f" : "");
    return buf;
}

tgl_status tgl_cgen_fail(tgl_render *r, const char *fmt, ...)
{
    if (r->st)
        return r->st;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->st = tgl_errbuf_set(r->err, TGL_EINTERNAL, "cgen: program %d: %s", r->p->id, msg);
    return r->st;
}

/* A literal of dtype dt holding v as the reference's constant array holds
 * it (tgl_store_from_double), exactly: hex floats, no decimal rounding. */
void tgl_cgen_literal(tgl_render *r, tgl_sbuf *b, int dt, double v)
{
    union { float f; double d; int32_t i32; int64_t i64; uint8_t u8; } x;
    tgl_store_from_double(dt, &x, 0, v);
    double d = dt == TGL_FLOAT32 ? (double)x.f : x.d;
    switch (dt) {
    case TGL_FLOAT32:
    case TGL_FLOAT64:
        if (d != d) {
            r->helpers |= H_INF;
            tgl_sb_printf(b, "((%s)TGL_NAN)", tgl_cgen_ctype(dt));
        } else if (isinf(d)) {
            r->helpers |= H_INF;
            tgl_sb_printf(b, "((%s)%sTGL_INF)", tgl_cgen_ctype(dt), d < 0 ? "-" : "");
        } else {
            tgl_sb_printf(b, "((%s)%a)", tgl_cgen_ctype(dt), d);
        }
        break;
    case TGL_INT32:
        if (x.i32 == INT32_MIN)
            tgl_sb_printf(b, "((int32_t)(-2147483647 - 1))");
        else
            tgl_sb_printf(b, "((int32_t)%" PRId32 ")", x.i32);
        break;
    case TGL_INT64:
        if (x.i64 == INT64_MIN)
            tgl_sb_printf(b, "((int64_t)(-9223372036854775807LL - 1))");
        else
            tgl_sb_printf(b, "((int64_t)%" PRId64 "LL)", x.i64);
        break;
    default:
        tgl_sb_printf(b, "((uint8_t)%u)", (unsigned)x.u8);
        break;
    }
}

/* ---- one instruction ----------------------------------------------------- */


/* `T v<i> = x converted from dtype from to dtype to`, as copy_elements in
 * array.c converts: integers wrap, int64 -> float32 rounds once, the rest
 * goes through double with saturating, NaN-to-0 float-to-int. */
static void cast(tgl_render *r, tgl_sbuf *b, int i, int from, int to, const char *x)
{
    const char *T = tgl_cgen_ctype(to);
    if (from == to) {
        tgl_sb_printf(b, "%s v%d = %s;", T, i, x);
        return;
    }
    bool ifrom = from != TGL_FLOAT32 && from != TGL_FLOAT64;
    bool ito = to != TGL_FLOAT32 && to != TGL_FLOAT64;
    if (ifrom && ito) {
        switch (to) {
        case TGL_BOOL: tgl_sb_printf(b, "uint8_t v%d = (uint8_t)(%s != 0);", i, x); break;
        case TGL_INT64: tgl_sb_printf(b, "int64_t v%d = (int64_t)%s;", i, x); break;
        case TGL_INT32:
            tgl_sb_printf(b, "int32_t v%d = (int32_t)(uint32_t)(uint64_t)(int64_t)%s;", i, x);
            break;
        default: tgl_sb_printf(b, "uint8_t v%d = (uint8_t)(uint64_t)(int64_t)%s;", i, x); break;
        }
        return;
    }
    if (from == TGL_INT64 && to == TGL_FLOAT32) {
        tgl_sb_printf(b, "float v%d = (float)%s;", i, x);
        return;
    }
    char d[64];
    if (from == TGL_BOOL)
        snprintf(d, sizeof d, "(double)(%s != 0)", x);
    else
        snprintf(d, sizeof d, "(double)%s", x);
    switch (to) {
    case TGL_FLOAT32: tgl_sb_printf(b, "float v%d = (float)%s;", i, d); break;
    case TGL_FLOAT64: tgl_sb_printf(b, "double v%d = %s;", i, d); break;
    case TGL_INT32:
        r->helpers |= H_F2I32;
        tgl_sb_printf(b, "int32_t v%d = tgl_f2i32(%s);", i, d);
        break;
    case TGL_INT64:
        r->helpers |= H_F2I64;
        tgl_sb_printf(b, "int64_t v%d = tgl_f2i64(%s);", i, d);
        break;
    case TGL_UINT8:
        r->helpers |= H_F2U8;
        tgl_sb_printf(b, "uint8_t v%d = tgl_f2u8(%s);", i, d);
        break;
    default: tgl_sb_printf(b, "uint8_t v%d = (uint8_t)(%s != 0.0);", i, d); break;
    }
}

static int arity(int op)
{
    return op <= TGL_OP_CAST ? 1 : op <= TGL_OP_OR ? 2 : 3;
}

/* Float math of instruction i (result dtype dt, operands x y z). */
static bool float_op(tgl_render *r, tgl_sbuf *b, int i, int op, int dt, const char *x,
                     const char *y, const char *z)
{
    const char *T = tgl_cgen_ctype(dt);
    char f[16], g[16];
    switch (op) {
    case TGL_OP_NEG: tgl_sb_printf(b, "%s v%d = -%s;", T, i, x); break;
    case TGL_OP_ABS: tgl_sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_FABS, dt, f), x); break;
    case TGL_OP_SIGN: /* keeps NaN and -0.0 */
        tgl_sb_printf(b, "%s v%d = %s > 0 ? (%s)1 : %s < 0 ? (%s)-1 : %s;", T, i, x, T, x, T, x);
        break;
    case TGL_OP_EXP: tgl_sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_EXP, dt, f), x); break;
    case TGL_OP_LOG: tgl_sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_LOG, dt, f), x); break;
    case TGL_OP_LOG1P: tgl_sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_LOG1P, dt, f), x); break;
    case TGL_OP_EXPM1: tgl_sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_EXPM1, dt, f), x); break;
    case TGL_OP_SQRT: tgl_sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_SQRT, dt, f), x); break;
    case TGL_OP_SQR: tgl_sb_printf(b, "%s v%d = %s * %s;", T, i, x, x); break;
    case TGL_OP_RECIP: tgl_sb_printf(b, "%s v%d = (%s)1 / %s;", T, i, T, x); break;
    case TGL_OP_TANH: tgl_sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_TANH, dt, f), x); break;
    case TGL_OP_SIGMOID:
        /* x >= 0 ? 1/(1+e^-x) : e^x/(1+e^x), both with e = exp(-|x|):
         * the reference's values (NaN included) without a branch. */
        tgl_sb_printf(
            b,
            "%s e%d = %s(-%s(%s)); %s v%d = %s >= 0 ? (%s)1 / ((%s)1 + e%d) : e%d / ((%s)1 + e%d);",
            T, i, fn(r, LM_EXP, dt, f), fn(r, LM_FABS, dt, g), x, T, i, x, T, T, i, i, T, i);
        break;
    case TGL_OP_SOFTPLUS:
        /* x > 0 ? x + log1p(e^-x) : log1p(e^x), e as for the sigmoid */
        tgl_sb_printf(b, "%s e%d = %s(%s(-", T, i, fn(r, LM_LOG1P, dt, f), fn(r, LM_EXP, dt, g));
        tgl_sb_printf(b, "%s(%s))); %s v%d = %s > 0 ? %s + e%d : e%d;", fn(r, LM_FABS, dt, f), x, T,
                      i, x, x, i, i);
        break;
    case TGL_OP_RELU: tgl_sb_printf(b, "%s v%d = %s > 0 ? %s : (%s)0;", T, i, x, x, T); break;
    case TGL_OP_SIN: tgl_sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_SIN, dt, f), x); break;
    case TGL_OP_COS: tgl_sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_COS, dt, f), x); break;
    case TGL_OP_FLOOR: tgl_sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_FLOOR, dt, f), x); break;
    case TGL_OP_CEIL: tgl_sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_CEIL, dt, f), x); break;
    case TGL_OP_ROUND: tgl_sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_ROUND, dt, f), x); break;
    case TGL_OP_ADD: tgl_sb_printf(b, "%s v%d = %s + %s;", T, i, x, y); break;
    case TGL_OP_SUB: tgl_sb_printf(b, "%s v%d = %s - %s;", T, i, x, y); break;
    case TGL_OP_MUL: tgl_sb_printf(b, "%s v%d = %s * %s;", T, i, x, y); break;
    case TGL_OP_DIV: tgl_sb_printf(b, "%s v%d = %s / %s;", T, i, x, y); break;
    case TGL_OP_POW:
        tgl_sb_printf(b, "%s v%d = %s(%s, %s);", T, i, fn(r, LM_POW, dt, f), x, y);
        break;
    case TGL_OP_MOD:
        tgl_sb_printf(b, "%s v%d = %s - %s(%s / %s) * %s;", T, i, x, fn(r, LM_FLOOR, dt, f), x, y,
                      y);
        break;
    case TGL_OP_MAXIMUM: /* a NaN in x wins, and y's NaN fails x >= y */
        tgl_sb_printf(b, "%s v%d = (%s != %s || %s >= %s) ? %s : %s;", T, i, x, x, x, y, x, y);
        break;
    case TGL_OP_MINIMUM:
        tgl_sb_printf(b, "%s v%d = (%s != %s || %s <= %s) ? %s : %s;", T, i, x, x, x, y, x, y);
        break;
    case TGL_OP_CLIP:
        tgl_sb_printf(b, "%s v%d = %s < %s ? %s : %s > %s ? %s : %s;", T, i, x, y, y, x, z, z, x);
        break;
    default:
        return false;
    }
    return true;
}

/* Integer arithmetic of instruction i: wraps through uint64 as the
 * reference does, so overflow is defined. */
static bool int_op(tgl_render *r, tgl_sbuf *b, int i, int op, int dt, const char *x, const char *y,
                   const char *z)
{
    const char *T = tgl_cgen_ctype(dt);
    bool u = dt == TGL_UINT8;
    switch (op) {
    case TGL_OP_NEG: tgl_sb_printf(b, "%s v%d = (%s)(0 - (uint64_t)%s);", T, i, T, x); break;
    case TGL_OP_ABS:
        if (u)
            tgl_sb_printf(b, "%s v%d = %s;", T, i, x);
        else
            tgl_sb_printf(b, "%s v%d = %s < 0 ? (%s)(0 - (uint64_t)%s) : %s;", T, i, x, T, x, x);
        break;
    case TGL_OP_SIGN:
        if (u)
            tgl_sb_printf(b, "%s v%d = (%s)(%s > 0);", T, i, T, x);
        else
            tgl_sb_printf(b, "%s v%d = (%s)(%s > 0 ? 1 : %s < 0 ? -1 : 0);", T, i, T, x, x);
        break;
    case TGL_OP_SQR:
        tgl_sb_printf(b, "%s v%d = (%s)((uint64_t)%s * (uint64_t)%s);", T, i, T, x, x);
        break;
    case TGL_OP_RELU: tgl_sb_printf(b, "%s v%d = %s > 0 ? %s : (%s)0;", T, i, x, x, T); break;
    case TGL_OP_FLOOR:
    case TGL_OP_CEIL:
    case TGL_OP_ROUND: tgl_sb_printf(b, "%s v%d = %s;", T, i, x); break;
    case TGL_OP_ADD:
        tgl_sb_printf(b, "%s v%d = (%s)((uint64_t)%s + (uint64_t)%s);", T, i, T, x, y);
        break;
    case TGL_OP_SUB:
        tgl_sb_printf(b, "%s v%d = (%s)((uint64_t)%s - (uint64_t)%s);", T, i, T, x, y);
        break;
    case TGL_OP_MUL:
        tgl_sb_printf(b, "%s v%d = (%s)((uint64_t)%s * (uint64_t)%s);", T, i, T, x, y);
        break;
    case TGL_OP_POW:
        r->helpers |= H_POWI;
        tgl_sb_printf(b, "%s v%d = (%s)tgl_pow_i(%s, %s);", T, i, T, x, y);
        break;
    case TGL_OP_MOD:
        r->helpers |= H_MODI;
        tgl_sb_printf(b, "%s v%d = (%s)tgl_mod_i(%s, %s);", T, i, T, x, y);
        break;
    case TGL_OP_MAXIMUM: tgl_sb_printf(b, "%s v%d = %s >= %s ? %s : %s;", T, i, x, y, x, y); break;
    case TGL_OP_MINIMUM: tgl_sb_printf(b, "%s v%d = %s <= %s ? %s : %s;", T, i, x, y, x, y); break;
    case TGL_OP_CLIP:
        tgl_sb_printf(b, "%s v%d = %s < %s ? %s : %s > %s ? %s : %s;", T, i, x, y, y, x, z, z, x);
        break;
    default:
        return false;
    }
    return true;
}

/* `T v<i> = ...;` for instruction i; mode says how inputs are loaded. */
void tgl_cgen_instr(tgl_render *r, tgl_sbuf *b, int i, int mode)
{
    const tgl_fprog *p = r->p;
    const tgl_finstr *in = &p->code[i];
    int op = in->op, dt = in->dtype;
    if (dt < 0 || dt >= TGL_NDTYPES) {
        tgl_cgen_fail(r, "instruction %d has dtype %d", i, dt);
        return;
    }
    const char *T = tgl_cgen_ctype(dt);
    if (op == TGL_FP_INPUT) {
        int j = in->arg[0];
        if (j < 0 || j >= p->nin || p->in_type[j].dtype != dt) {
            tgl_cgen_fail(r, "instruction %d loads input %d of another dtype or none", i, j);
            return;
        }
        if (mode == TGL_ROW_STRIDED)
            tgl_sb_printf(b, "%s v%d = i%d[k * s%d];", T, i, j, j);
        else if (tgl_cgen_invariant(p, j))
            tgl_sb_printf(b, "%s v%d = i%d;", T, i, j);
        else
            tgl_sb_printf(b, "%s v%d = i%d[k];", T, i, j);
        return;
    }
    if (op == TGL_FP_CONST) {
        tgl_sb_printf(b, "const %s v%d = ", T, i);
        tgl_cgen_literal(r, b, dt, in->value);
        tgl_sb_printf(b, ";");
        return;
    }
    if (op < 0 || op > TGL_OP_CLIP) {
        tgl_cgen_fail(r, "instruction %d: op %d is not elementwise", i, op);
        return;
    }
    int n = arity(op), od[3] = {-1, -1, -1};
    char x[3][16];
    for (int a = 0; a < n; a++) {
        if (in->arg[a] < 0 || in->arg[a] >= i) {
            tgl_cgen_fail(r, "instruction %d: operand %d is not an earlier instruction", i, a);
            return;
        }
        od[a] = p->code[in->arg[a]].dtype;
        snprintf(x[a], sizeof x[a], "v%d", in->arg[a]);
    }
    bool ok = true;
    if (op == TGL_OP_CAST) {
        cast(r, b, i, od[0], dt, x[0]);
    } else if (op >= TGL_OP_EQ && op <= TGL_OP_GE) {
        static const char *rel[] = {"==", "!=", "<", "<=", ">", ">="};
        ok = dt == TGL_BOOL && od[0] == od[1];
        tgl_sb_printf(b, "uint8_t v%d = (uint8_t)(%s %s %s);", i, x[0], rel[op - TGL_OP_EQ], x[1]);
    } else if (op == TGL_OP_AND || op == TGL_OP_OR || op == TGL_OP_NOT) {
        ok = dt == TGL_BOOL && od[0] == TGL_BOOL && (n == 1 || od[1] == TGL_BOOL);
        if (op == TGL_OP_NOT)
            tgl_sb_printf(b, "uint8_t v%d = (uint8_t)(%s == 0);", i, x[0]);
        else
            tgl_sb_printf(b, "uint8_t v%d = (uint8_t)(%s != 0 %s %s != 0);", i, x[0],
                          op == TGL_OP_AND ? "&&" : "||", x[1]);
    } else if (op == TGL_OP_SWITCH) {
        ok = od[0] == TGL_BOOL && od[1] == dt && od[2] == dt;
        tgl_sb_printf(b, "%s v%d = %s ? %s : %s;", T, i, x[0], x[1], x[2]);
    } else {
        for (int a = 0; a < n; a++)
            ok = ok && od[a] == dt;
        if (ok && tgl_dtype_is_float(dt))
            ok = float_op(r, b, i, op, dt, x[0], x[1], x[2]);
        else if (ok && is_int(dt))
            ok = int_op(r, b, i, op, dt, x[0], x[1], x[2]);
        else
            ok = false;
    }
    if (!ok)
        tgl_cgen_fail(r, "instruction %d: %s does not take these operand dtypes (result %s)", i,
             tgl_op_name(op), tgl_dtype_name(dt));
}

/* ---- the prelude ---------------------------------------------------------- */

/* Declarations of the libm functions used, and the helpers. */
void tgl_cgen_prelude(tgl_render *r, tgl_sbuf *b)
{
    for (int s = 0; s < 2; s++)
        for (int f = 0; f < LM_COUNT; f++) {
            if (!((r->used[s] >> f) & 1u))
                continue;
            const char *T = s ? "float" : "double";
            if (libm[f].vec)
                tgl_sb_printf(b, "#pragma omp declare simd notinbranch\n");
            tgl_sb_printf(b, "%s %s%s(%s%s%s);\n", T, libm[f].name, s ? "f" : "", T,
                          libm[f].arity == 2 ? ", " : "", libm[f].arity == 2 ? T : "");
        }
    unsigned h = r->helpers;
    if (h & H_INF)
        tgl_sb_printf(
            b, "static const union { uint64_t u; double d; } tgl_inf = {0x7ff0000000000000ULL},\n"
               "    tgl_nan = {0x7ff8000000000000ULL};\n"
               "#define TGL_INF (tgl_inf.d)\n#define TGL_NAN (tgl_nan.d)\n");
    if (h & H_MODI) /* Lua's %: the sign of b; by 0 gives 0 (as the reference) */
        tgl_sb_printf(b, "static inline int64_t tgl_mod_i(int64_t a, int64_t b)\n{\n"
                         "    if (b == 0 || b == -1)\n        return 0;\n"
                         "    int64_t r = a %% b;\n"
                         "    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}\n");
    if (h & H_POWI)
        tgl_sb_printf(
            b, "static inline int64_t tgl_pow_i(int64_t a, int64_t b)\n{\n"
               "    if (b < 0)\n        return a == 1 ? 1 : a == -1 ? (b %% 2 ? -1 : 1) : 0;\n"
               "    uint64_t r = 1, x = (uint64_t)a;\n"
               "    while (b) {\n        if (b & 1)\n            r *= x;\n"
               "        x *= x;\n        b >>= 1;\n    }\n    return (int64_t)r;\n}\n");
    /* Truncation toward zero, saturating, NaN -> 0 (tgl_store_from_double). */
    if (h & H_F2I32)
        tgl_sb_printf(
            b, "static inline int32_t tgl_f2i32(double v)\n{\n"
               "    return v != v ? 0 : v <= -2147483648.0 ? (int32_t)(-2147483647 - 1)\n"
               "         : v >= 2147483647.0 ? (int32_t)2147483647 : (int32_t)(int64_t)v;\n}\n");
    if (h & H_F2I64)
        tgl_sb_printf(
            b,
            "static inline int64_t tgl_f2i64(double v)\n{\n"
            "    return v != v ? 0 : v >= 9223372036854775808.0 ? (int64_t)9223372036854775807LL\n"
            "         : v <= -9223372036854775808.0 ? (int64_t)(-9223372036854775807LL - 1)\n"
            "         : (int64_t)v;\n}\n");
    if (h & H_F2U8)
        tgl_sb_printf(
            b,
            "static inline uint8_t tgl_f2u8(double v)\n{\n"
            "    return v != v ? 0 : v <= 0.0 ? 0 : v >= 255.0 ? 255 : (uint8_t)(int64_t)v;\n}\n");
    tgl_sb_printf(b, "\n");
}
