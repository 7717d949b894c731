/*
 * expr.c — the scalar C of one fused instruction (render.c lays out the
 * kernel around it), and the declarations and helpers that C needs.
 *
 * An elementwise op renders as `T v<i> = ...;` (after `const T e<i> = ...;`
 * when it has a temporary) from its entry in TGL_ELEMWISE_OPS
 * (engine/ops/elemwise_def.h), the text the reference kernel compiles too:
 * the operands a, b, c become the instructions they name, e the
 * instruction's temporary, T the compute type, and libm's double names
 * their float32 names in float32; the table's helpers (integer pow and
 * mod) are pasted in, once, when called.  So every rule of the
 * reference (dtype rules, NaN handling of maximum/minimum/sign/relu, Lua's
 * mod, the stable sigmoid and softplus, integer arithmetic wrapping
 * through uint64) holds here by construction.  Casts render here, as
 * array.c's copy_elements converts (integers wrap, floats saturate into
 * integers, NaN -> 0).  Constants are hex-float literals: exact.
 *
 * libm is declared here rather than included, so a source compiles under
 * libtcc with no headers.  Functions glibc's libmvec provides in vector
 * form carry `#pragma omp declare simd notinbranch`: with -fopenmp-simd,
 * gcc vectorizes loops calling them (libtcc ignores the pragma).  Their
 * results may differ from the scalar functions' in the last ulps.
 */
#include "cgen/cgint.h"
#include "engine/ops/elemwise_def.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- libm and helpers the source may need ------------------------------ */

/* TGL_CGEN_LIBM (cgint.h): the libm functions the table's expressions may
 * call, by their double names (an expression naming another fails to
 * render).  vec: glibc's libmvec has vector variants (OLD: since 2.22, NEW:
 * since 2.35).  The others gcc inlines as instructions. */
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
#define MVEC_NO false

static const struct {
    const char *name;
    int arity;
    bool vec;
} libm[] = {
#define LM(name, arity, vec) {#name, arity, MVEC_##vec},
    TGL_CGEN_LIBM(LM)
#undef LM
};
enum { LM_COUNT = sizeof libm / sizeof libm[0] };
_Static_assert(LM_COUNT <= 32, "tgl_render.used has a bit per libm function");

enum {
    H_F2I32 = 1u, /* saturating double -> int32  */
    H_F2I64 = 2u, /* saturating double -> int64  */
    H_F2U8 = 4u,  /* saturating double -> uint8  */
    H_INF = 8u,   /* TGL_INF / TGL_NAN constants */
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
void tgl_cgen_literal(tgl_render *r, tgl_sb *b, int dt, double v)
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
static void cast(tgl_render *r, tgl_sb *b, int i, int from, int to, const char *x)
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

/* Whether the len characters at t spell name. */
static bool is_name(const char *t, int len, const char *name)
{
    return (int)strlen(name) == len && strncmp(t, name, (size_t)len) == 0;
}

/* Appends the table's C text s for instruction i: a, b, c become the
 * operands x[0..n-1], e the temporary e<i>, T the compute type cdt's C
 * type, libm functions their names in cdt (recorded for the prelude),
 * helpers stay (recorded).  Any other name must be a <stdint.h> type: a
 * name cgen does not know fails here rather than in the compiler. */
static void text(tgl_render *r, tgl_sb *b, const char *s, int i, int cdt, char x[3][16], int n)
{
    static const char *const ctypes[] = {"int32_t", "int64_t", "uint8_t", "uint32_t", "uint64_t"};
    while (*s && !r->st) {
        const char *t = s;
        if (isdigit((unsigned char)*s)) { /* a number, exponent sign included */
            while (isalnum((unsigned char)*s) || *s == '_' || *s == '.' ||
                   ((*s == '+' || *s == '-') && strchr("eEpP", s[-1])))
                s++;
            tgl_sb_printf(b, "%.*s", (int)(s - t), t);
            continue;
        }
        if (!isalpha((unsigned char)*s) && *s != '_') {
            tgl_sb_printf(b, "%c", *s++);
            continue;
        }
        while (isalnum((unsigned char)*s) || *s == '_')
            s++;
        int len = (int)(s - t), f = 0, h = 0;
        size_t c = 0;
        while (f < LM_COUNT && !is_name(t, len, libm[f].name))
            f++;
        while (tgl_elemwise_helpers[h].name && !is_name(t, len, tgl_elemwise_helpers[h].name))
            h++;
        while (c < sizeof ctypes / sizeof ctypes[0] && !is_name(t, len, ctypes[c]))
            c++;
        if (len == 1 && *t >= 'a' && *t < 'a' + n) {
            tgl_sb_printf(b, "%s", x[*t - 'a']);
        } else if (is_name(t, len, "e")) {
            tgl_sb_printf(b, "e%d", i);
        } else if (is_name(t, len, "T")) {
            tgl_sb_printf(b, "%s", tgl_cgen_ctype(cdt));
        } else if (f < LM_COUNT) {
            bool single = cdt == TGL_FLOAT32;
            r->used[single] |= 1u << f;
            tgl_sb_printf(b, "%s%s", libm[f].name, single ? "f" : "");
        } else if (tgl_elemwise_helpers[h].name) {
            r->ew_helpers |= 1u << h;
            tgl_sb_printf(b, "%.*s", len, t);
        } else if (c < sizeof ctypes / sizeof ctypes[0]) {
            tgl_sb_printf(b, "%.*s", len, t);
        } else {
            tgl_cgen_fail(r, "instruction %d: the expression of %s names '%.*s'", i,
                          tgl_op_name(r->p->code[i].op), len, t);
        }
    }
}

/* `T v<i> = ...;` for instruction i; mode says how inputs are loaded. */
void tgl_cgen_instr(tgl_render *r, tgl_sb *b, int i, int mode)
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
    const tgl_elemwise_def *def = tgl_elemwise_get(op);
    if (!def) {
        tgl_cgen_fail(r, "instruction %d: op %d is not elementwise", i, op);
        return;
    }
    int n = def->arity, od[3] = {-1, -1, -1};
    char x[3][16];
    for (int a = 0; a < n; a++) {
        if (in->arg[a] < 0 || in->arg[a] >= i) {
            tgl_cgen_fail(r, "instruction %d: operand %d is not an earlier instruction", i, a);
            return;
        }
        od[a] = p->code[in->arg[a]].dtype;
        snprintf(x[a], sizeof x[a], "v%d", in->arg[a]);
    }
    if (def->kind == TGL_EW_CAST) {
        cast(r, b, i, od[0], dt, x[0]);
        return;
    }
    /* Operands come in the compute dtype (fusion casts them): the result's,
     * but a comparison's operands' (its result is bool), and a switch's
     * condition is bool. */
    int cdt = def->kind == TGL_EW_CMP ? od[0] : dt;
    bool ok = tgl_elemwise_computes(def->kind, cdt) && (def->kind != TGL_EW_CMP || dt == TGL_BOOL);
    for (int a = 0; a < n; a++)
        ok = ok && od[a] == (def->kind == TGL_EW_SELECT && a == 0 ? TGL_BOOL : cdt);
    if (!ok) {
        tgl_cgen_fail(r, "instruction %d: %s does not take these operand dtypes (result %s)", i,
                      tgl_op_name(op), tgl_dtype_name(dt));
        return;
    }
    if (strcmp(def->tmp, "0") != 0) {
        tgl_sb_printf(b, "const %s e%d = ", tgl_cgen_ctype(cdt), i);
        text(r, b, def->tmp, i, cdt, x, n);
        tgl_sb_printf(b, "; ");
    }
    tgl_sb_printf(b, "%s v%d = ", T, i);
    text(r, b, tgl_dtype_is_float(cdt) ? def->fexpr : def->iexpr, i, cdt, x, n);
    tgl_sb_printf(b, ";");
}

/* ---- the prelude ---------------------------------------------------------- */

/* Declarations of the libm functions used, and the helpers. */
void tgl_cgen_prelude(tgl_render *r, tgl_sb *b)
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
    for (int k = 0; tgl_elemwise_helpers[k].name; k++)
        if ((r->ew_helpers >> k) & 1u)
            tgl_sb_printf(b, "%s\n", tgl_elemwise_helpers[k].text);
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
