/*
 * expr.c — the device-neutral renderer (expr.h): the scalar statement of
 * one fused instruction in a dialect, and the helpers those statements
 * need.  The kernel renderers (render.c for the host compilers,
 * render_cuda.c for CUDA) lay out the kernel around the statements.
 *
 * An elementwise op renders as `T v<i> = ...;` (after `const T e<i> = ...;`
 * when it has a temporary) from its entry in TGL_ELEMWISE_OPS
 * (engine/ops/elemwise_def.h), the text the reference kernel compiles too:
 * the operands a, b, c become the instructions they name, e the
 * instruction's temporary, T the compute type, and the math functions'
 * double names their float32 names in float32; the table's helpers
 * (integer pow and mod) are pasted in, once, when called.  So every rule
 * of the reference (dtype rules, NaN handling of maximum/minimum/sign/relu,
 * Lua's mod, the stable sigmoid and softplus, integer arithmetic wrapping
 * through uint64) holds here by construction, in every dialect.  Casts
 * render here, as array.c's copy_elements converts (integers wrap, floats
 * saturate into integers, NaN -> 0).  Constants are exact: hex-float
 * literals, or the bits of the value where the dialect says so.
 *
 * Nothing here knows a compiler, a library or a device: the dialect says
 * what differs (expr.h).
 */
#include "cgen/expr.h"
#include "engine/ops/elemwise_def.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- math functions and helpers the source may need -------------------- */

static const struct {
    const char *name;
    int arity;
} math[] = {
#define M(name, arity) {#name, arity},
    TGL_CGEN_MATH(M)
#undef M
};
_Static_assert(TGL_CGEN_NMATH <= 32, "tgl_cgen_expr.used has a bit per math function");

enum {
    H_F2I32 = 1u, /* saturating double -> int32  */
    H_F2I64 = 2u, /* saturating double -> int64  */
    H_F2U8 = 4u,  /* saturating double -> uint8  */
    H_INF = 8u,   /* TGL_INF / TGL_NAN constants */
};

const char *tgl_cgen_type(const tgl_cgen_dialect *d, int dt)
{
    return d->type[dt >= 0 && dt < TGL_NDTYPES ? dt : TGL_BOOL];
}

tgl_status tgl_cgen_fail(tgl_cgen_expr *x, const char *fmt, ...)
{
    if (x->st)
        return x->st;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    x->st = tgl_errbuf_set(x->err, TGL_EINTERNAL, "cgen: program %d: %s", x->p ? x->p->id : -1,
                           msg);
    return x->st;
}

/* A literal of dtype dt holding v as the reference's constant array holds
 * it (tgl_store_from_double), exactly: hex floats or bits, no decimal
 * rounding. */
void tgl_cgen_literal(tgl_cgen_expr *x, tgl_sb *b, int dt, double v)
{
    const tgl_cgen_dialect *D = x->d;
    union { float f; double d; int32_t i32; int64_t i64; uint8_t u8; uint32_t b32; uint64_t b64; } u;
    tgl_store_from_double(dt, &u, 0, v);
    double d = dt == TGL_FLOAT32 ? (double)u.f : u.d;
    const char *T = tgl_cgen_type(D, dt);
    switch (dt) {
    case TGL_FLOAT32:
    case TGL_FLOAT64:
        if (D->f32_from_bits) {
            if (dt == TGL_FLOAT32)
                tgl_sb_printf(b, "%s((int)0x%08" PRIx32 "U)", D->f32_from_bits, u.b32);
            else
                tgl_sb_printf(b, "%s((long long)0x%016" PRIx64 "ULL)", D->f64_from_bits, u.b64);
        } else if (d != d) {
            x->helpers |= H_INF;
            tgl_sb_printf(b, "((%s)TGL_NAN)", T);
        } else if (isinf(d)) {
            x->helpers |= H_INF;
            tgl_sb_printf(b, "((%s)%sTGL_INF)", T, d < 0 ? "-" : "");
        } else {
            tgl_sb_printf(b, "((%s)%a)", T, d);
        }
        break;
    case TGL_INT32:
        if (u.i32 == INT32_MIN)
            tgl_sb_printf(b, "((%s)(-2147483647 - 1))", T);
        else
            tgl_sb_printf(b, "((%s)%" PRId32 ")", T, u.i32);
        break;
    case TGL_INT64:
        if (u.i64 == INT64_MIN)
            tgl_sb_printf(b, "((%s)(-9223372036854775807LL - 1))", T);
        else
            tgl_sb_printf(b, "((%s)%" PRId64 "LL)", T, u.i64);
        break;
    default:
        tgl_sb_printf(b, "((%s)%u)", T, (unsigned)u.u8);
        break;
    }
}

/* ---- one instruction ----------------------------------------------------- */

/* `T v<i> = x converted from dtype from to dtype to`, as copy_elements in
 * array.c converts: integers wrap, int64 -> float32 rounds once, the rest
 * goes through double with saturating, NaN-to-0 float-to-int. */
static void cast(tgl_cgen_expr *r, tgl_sb *b, int i, int from, int to, const char *x)
{
    const tgl_cgen_dialect *D = r->d;
    const char *T = tgl_cgen_type(D, to), *F64 = D->type[TGL_FLOAT64];
    if (from == to) {
        tgl_sb_printf(b, "%s v%d = %s;", T, i, x);
        return;
    }
    bool ifrom = from != TGL_FLOAT32 && from != TGL_FLOAT64;
    bool ito = to != TGL_FLOAT32 && to != TGL_FLOAT64;
    if (ifrom && ito) {
        switch (to) {
        case TGL_BOOL: tgl_sb_printf(b, "%s v%d = (%s)(%s != 0);", T, i, T, x); break;
        case TGL_INT64: tgl_sb_printf(b, "%s v%d = (%s)%s;", T, i, T, x); break;
        case TGL_INT32:
            tgl_sb_printf(b, "%s v%d = (%s)(uint32_t)(uint64_t)(int64_t)%s;", T, i, T, x);
            break;
        default: tgl_sb_printf(b, "%s v%d = (%s)(uint64_t)(int64_t)%s;", T, i, T, x); break;
        }
        return;
    }
    if (from == TGL_INT64 && to == TGL_FLOAT32) {
        tgl_sb_printf(b, "%s v%d = (%s)%s;", T, i, T, x);
        return;
    }
    char d[96];
    if (from == TGL_BOOL)
        snprintf(d, sizeof d, "(%s)(%s != 0)", F64, x);
    else
        snprintf(d, sizeof d, "(%s)%s", F64, x);
    switch (to) {
    case TGL_FLOAT32: tgl_sb_printf(b, "%s v%d = (%s)%s;", T, i, T, d); break;
    case TGL_FLOAT64: tgl_sb_printf(b, "%s v%d = %s;", T, i, d); break;
    case TGL_INT32:
        r->helpers |= H_F2I32;
        tgl_sb_printf(b, "%s v%d = tgl_f2i32(%s);", T, i, d);
        break;
    case TGL_INT64:
        r->helpers |= H_F2I64;
        tgl_sb_printf(b, "%s v%d = tgl_f2i64(%s);", T, i, d);
        break;
    case TGL_UINT8:
        r->helpers |= H_F2U8;
        tgl_sb_printf(b, "%s v%d = tgl_f2u8(%s);", T, i, d);
        break;
    default: tgl_sb_printf(b, "%s v%d = (%s)(%s != 0.0);", T, i, T, d); break;
    }
}

/* Whether the len characters at t spell name. */
static bool is_name(const char *t, int len, const char *name)
{
    return (int)strlen(name) == len && strncmp(t, name, (size_t)len) == 0;
}

/* Appends the table's C text s for instruction i: a, b, c become the
 * operands x[0..n-1], e the temporary e<i>, T the compute type cdt's
 * type, math functions their names in cdt (recorded for the prelude),
 * helpers stay (recorded).  Any other name must be a <stdint.h> type: a
 * name cgen does not know fails here rather than in the compiler. */
static void text(tgl_cgen_expr *r, tgl_sb *b, const char *s, int i, int cdt, char x[3][16], int n)
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
        while (f < TGL_CGEN_NMATH && !is_name(t, len, math[f].name))
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
            tgl_sb_printf(b, "%s", tgl_cgen_type(r->d, cdt));
        } else if (f < TGL_CGEN_NMATH) {
            bool single = cdt == TGL_FLOAT32;
            r->used[single] |= 1u << f;
            tgl_sb_printf(b, "%s%s", math[f].name, single ? r->d->f32_suffix : "");
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

void tgl_cgen_instr(tgl_cgen_expr *r, tgl_sb *b, int i, const char *const *load)
{
    const tgl_fused_prog *p = r->p;
    const tgl_finstr *in = &p->code[i];
    int op = in->op, dt = in->dtype;
    if (dt < 0 || dt >= TGL_NDTYPES) {
        tgl_cgen_fail(r, "instruction %d has dtype %d", i, dt);
        return;
    }
    const char *T = tgl_cgen_type(r->d, dt);
    if (op == TGL_FP_INPUT) {
        int j = in->arg[0];
        if (j < 0 || j >= p->nin || p->in_type[j].dtype != dt) {
            tgl_cgen_fail(r, "instruction %d loads input %d of another dtype or none", i, j);
            return;
        }
        tgl_sb_printf(b, "%s v%d = %s;", T, i, load[j]);
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
        tgl_sb_printf(b, "const %s e%d = ", tgl_cgen_type(r->d, cdt), i);
        text(r, b, def->tmp, i, cdt, x, n);
        tgl_sb_printf(b, "; ");
    }
    tgl_sb_printf(b, "%s v%d = ", T, i);
    text(r, b, tgl_dtype_is_float(cdt) ? def->fexpr : def->iexpr, i, cdt, x, n);
    tgl_sb_printf(b, ";");
}

/* ---- the prelude ---------------------------------------------------------- */

/* The table's helpers are written `static inline R name(...) { ... }`
 * (elemwise.c); the dialect may declare functions otherwise. */
#define HELPER_START "static inline "

void tgl_cgen_prelude(tgl_cgen_expr *r, tgl_sb *b)
{
    const tgl_cgen_dialect *D = r->d;
    for (int s = 0; s < 2 && D->declare_math; s++)
        for (int f = 0; f < TGL_CGEN_NMATH; f++) {
            if (!((r->used[s] >> f) & 1u))
                continue;
            const char *T = D->type[s ? TGL_FLOAT32 : TGL_FLOAT64];
            if ((D->vector_math >> f) & 1u)
                tgl_sb_printf(b, "%s", D->vector_decl);
            tgl_sb_printf(b, "%s %s%s(%s%s%s);\n", T, math[f].name, s ? D->f32_suffix : "", T,
                          math[f].arity == 2 ? ", " : "", math[f].arity == 2 ? T : "");
        }
    unsigned h = r->helpers;
    if (h & H_INF)
        tgl_sb_printf(
            b, "static const union { uint64_t u; double d; } tgl_inf = {0x7ff0000000000000ULL},\n"
               "    tgl_nan = {0x7ff8000000000000ULL};\n"
               "#define TGL_INF (tgl_inf.d)\n#define TGL_NAN (tgl_nan.d)\n");
    for (int k = 0; tgl_elemwise_helpers[k].name; k++) {
        if (!((r->ew_helpers >> k) & 1u))
            continue;
        const char *t = tgl_elemwise_helpers[k].text;
        if (strncmp(t, HELPER_START, strlen(HELPER_START)) != 0) {
            tgl_cgen_fail(r, "helper %s does not start with '" HELPER_START "'",
                          tgl_elemwise_helpers[k].name);
            return;
        }
        tgl_sb_printf(b, "%s %s\n", D->fn, t + strlen(HELPER_START));
    }
    /* Truncation toward zero, saturating, NaN -> 0 (tgl_store_from_double). */
    if (h & H_F2I32)
        tgl_sb_printf(
            b, "%s int32_t tgl_f2i32(double v)\n{\n"
               "    return v != v ? 0 : v <= -2147483648.0 ? (int32_t)(-2147483647 - 1)\n"
               "         : v >= 2147483647.0 ? (int32_t)2147483647 : (int32_t)(int64_t)v;\n}\n",
            D->fn);
    if (h & H_F2I64)
        tgl_sb_printf(
            b,
            "%s int64_t tgl_f2i64(double v)\n{\n"
            "    return v != v ? 0 : v >= 9223372036854775808.0 ? (int64_t)9223372036854775807LL\n"
            "         : v <= -9223372036854775808.0 ? (int64_t)(-9223372036854775807LL - 1)\n"
            "         : (int64_t)v;\n}\n",
            D->fn);
    if (h & H_F2U8)
        tgl_sb_printf(
            b,
            "%s uint8_t tgl_f2u8(double v)\n{\n"
            "    return v != v ? 0 : v <= 0.0 ? 0 : v >= 255.0 ? 255 : (uint8_t)(int64_t)v;\n}\n",
            D->fn);
    tgl_sb_printf(b, "\n");
}
