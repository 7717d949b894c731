/*
 * render.c — a fused program (engine/fprog.h) rendered as C source.
 *
 * The kernel is `void <symbol>(const tgl_kargs *A)` against the ABI of
 * tgl_kernel.h, whose text opens every source, so compiling needs no
 * include path.  It walks rows (axes 0..ndim-2, an odometer over
 * per-operand offsets) and calls one of three row functions:
 *
 *   tgl_row_u  the unit path: every operand is contiguous (stride 1) or
 *              invariant (stride 0) along the row, as the program's static
 *              broadcast pattern says.  Pointers are restrict and invariant
 *              inputs arrive as values, hoisted out of the loop, so gcc -O3
 *              vectorizes it; math on floats calls libm functions declared
 *              here with `#pragma omp declare simd`, which with
 *              -fopenmp-simd lets gcc call glibc's vector variants
 *              (libmvec).  A fused reduction accumulates elementwise into
 *              out[0] (its kept axes are along the row).
 *   tgl_row_r  the unit path of a reduction over the row (out[0] stride 0):
 *              values go through a small buffer into eight accumulator
 *              lanes (independent, so the adds vectorize without
 *              reassociating), combined into out[0] once per row.
 *   tgl_row_s  every other layout: per-operand strides.
 *
 * The kernel checks the strides itself before taking the unit path, so a
 * launcher's `unit` hint can never make it read the wrong elements.
 *
 * Semantics are those of the reference kernels (ops/elemwise.c, reduce.c,
 * dtype.c): each expression below reproduces its reference row exactly —
 * NaN handling of maximum/minimum/sign/relu, Lua's mod, the stable
 * sigmoid/softplus (written branch-free, with the same results), integer
 * arithmetic wrapping through uint64, saturating float-to-int casts.  Only
 * libm's scalar and vector variants may differ in the last ulps.  libm is
 * declared here rather than included, so the source also compiles under
 * libtcc without system math headers.
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

/* tgl_kernel.h, verbatim (spec/c/test_cgen.c checks it against the file). */
const char tgl_cgen_kernel_header[] =
    "/*\n"
    " * tgl_kernel.h — the one header generated kernels see: the argument block\n"
    " * the engine passes to every generated kernel.  Nothing else from the\n"
    " * engine leaks into generated code.  cgen embeds this text at the top of\n"
    " * every kernel source, so compiling a kernel needs no include path.\n"
    " *\n"
    " * A kernel computes a fused elementwise program over an output space of\n"
    " * `ndim` axes that the launcher has already coalesced: adjacent axes that\n"
    " * are contiguous in every operand are merged, so the common case is one\n"
    " * axis.  The space is walked as rows: the last axis is the row, the\n"
    " * others are the \"outer\" index.  A kernel call covers rows\n"
    " * [row_begin, row_end) and, within each row, columns [col_begin, col_end)\n"
    " * (the launcher splits a single long row by columns across threads).\n"
    " *\n"
    " * Strides count elements.  An operand whose static type broadcasts an axis\n"
    " * has stride 0 there.  `unit` is 1 when every operand's last-axis stride is\n"
    " * 0 or 1 (the vectorizable path); otherwise kernels use the strides.\n"
    " * Reductions fused into a kernel accumulate into out[0] (whose strides are\n"
    " * 0 along reduced axes); the launcher has initialized it.\n"
    " */\n"
    "#ifndef TGL_KERNEL_H\n"
    "#define TGL_KERNEL_H\n"
    "\n"
    "#include <stdint.h>\n"
    "\n"
    "#define TGL_KERNEL_ABI 1\n"
    "#define TGL_KERNEL_MAX_DIMS 8\n"
    "\n"
    "typedef struct tgl_kbuf {\n"
    "    void *data;                           /* element (0, ..., 0)         */\n"
    "    int64_t strides[TGL_KERNEL_MAX_DIMS]; /* per axis of the space       */\n"
    "} tgl_kbuf;\n"
    "\n"
    "typedef struct tgl_kargs {\n"
    "    int32_t ndim;                         /* >= 1 (a scalar is 1 x 1)    */\n"
    "    int32_t unit;                         /* last-axis strides in {0, 1} */\n"
    "    int64_t shape[TGL_KERNEL_MAX_DIMS];\n"
    "    int64_t row_begin, row_end;           /* rows: the outer index, flat */\n"
    "    int64_t col_begin, col_end;\n"
    "    const tgl_kbuf *in;\n"
    "    tgl_kbuf *out;\n"
    "} tgl_kargs;\n"
    "\n"
    "typedef void (*tgl_kernel_fn)(const tgl_kargs *args);\n"
    "\n"
    "#endif /* TGL_KERNEL_H */\n";
_Static_assert(TGL_KERNEL_ABI == 1,
               "tgl_kernel.h changed: update tgl_cgen_kernel_header in render.c");

/* Rows of a row-reduction go through a buffer of this many values into
 * this many accumulator lanes. */
#define RBUF 256
#define LANES 8

/* ---- a growing string -------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void sb_printf(sbuf *b, const char *fmt, ...)
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

typedef struct render {
    tgl_ctx *ctx;
    const tgl_fprog *p;
    uint32_t used[2]; /* libm functions: [0] double, [1] float (bit per LM_) */
    unsigned helpers;
    tgl_status st;
} render;

static const char *ctype(int dt)
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
static const char *fn(render *r, int f, int dt, char buf[16])
{
    bool single = dt == TGL_FLOAT32;
    r->used[single] |= 1u << f;
    snprintf(buf, 16, "%s%s", libm[f].name, single ? "f" : "");
    return buf;
}

static tgl_status fail(render *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static tgl_status fail(render *r, const char *fmt, ...)
{
    if (r->st)
        return r->st;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->st = tgl_ctx_set_error(r->ctx, TGL_EINTERNAL, "cgen: program %d: %s", r->p->id, msg);
    return r->st;
}

/* A literal of dtype dt holding v as the reference's constant array holds
 * it (tgl_store_from_double), exactly: hex floats, no decimal rounding. */
static void literal(render *r, sbuf *b, int dt, double v)
{
    union { float f; double d; int32_t i32; int64_t i64; uint8_t u8; } x;
    tgl_store_from_double(dt, &x, 0, v);
    double d = dt == TGL_FLOAT32 ? (double)x.f : x.d;
    switch (dt) {
    case TGL_FLOAT32:
    case TGL_FLOAT64:
        if (d != d) {
            r->helpers |= H_INF;
            sb_printf(b, "((%s)TGL_NAN)", ctype(dt));
        } else if (isinf(d)) {
            r->helpers |= H_INF;
            sb_printf(b, "((%s)%sTGL_INF)", ctype(dt), d < 0 ? "-" : "");
        } else {
            sb_printf(b, "((%s)%a)", ctype(dt), d);
        }
        break;
    case TGL_INT32:
        if (x.i32 == INT32_MIN)
            sb_printf(b, "((int32_t)(-2147483647 - 1))");
        else
            sb_printf(b, "((int32_t)%" PRId32 ")", x.i32);
        break;
    case TGL_INT64:
        if (x.i64 == INT64_MIN)
            sb_printf(b, "((int64_t)(-9223372036854775807LL - 1))");
        else
            sb_printf(b, "((int64_t)%" PRId64 "LL)", x.i64);
        break;
    default:
        sb_printf(b, "((uint8_t)%u)", (unsigned)x.u8);
        break;
    }
}

/* ---- one instruction ----------------------------------------------------- */

enum { MODE_UNIT, MODE_STRIDED };

/* `T v<i> = x converted from dtype from to dtype to`, as copy_elements in
 * array.c converts: integers wrap, int64 -> float32 rounds once, the rest
 * goes through double with saturating, NaN-to-0 float-to-int. */
static void cast(render *r, sbuf *b, int i, int from, int to, const char *x)
{
    const char *T = ctype(to);
    if (from == to) {
        sb_printf(b, "%s v%d = %s;", T, i, x);
        return;
    }
    bool ifrom = from != TGL_FLOAT32 && from != TGL_FLOAT64;
    bool ito = to != TGL_FLOAT32 && to != TGL_FLOAT64;
    if (ifrom && ito) {
        switch (to) {
        case TGL_BOOL: sb_printf(b, "uint8_t v%d = (uint8_t)(%s != 0);", i, x); break;
        case TGL_INT64: sb_printf(b, "int64_t v%d = (int64_t)%s;", i, x); break;
        case TGL_INT32:
            sb_printf(b, "int32_t v%d = (int32_t)(uint32_t)(uint64_t)(int64_t)%s;", i, x);
            break;
        default: sb_printf(b, "uint8_t v%d = (uint8_t)(uint64_t)(int64_t)%s;", i, x); break;
        }
        return;
    }
    if (from == TGL_INT64 && to == TGL_FLOAT32) {
        sb_printf(b, "float v%d = (float)%s;", i, x);
        return;
    }
    char d[64];
    if (from == TGL_BOOL)
        snprintf(d, sizeof d, "(double)(%s != 0)", x);
    else
        snprintf(d, sizeof d, "(double)%s", x);
    switch (to) {
    case TGL_FLOAT32: sb_printf(b, "float v%d = (float)%s;", i, d); break;
    case TGL_FLOAT64: sb_printf(b, "double v%d = %s;", i, d); break;
    case TGL_INT32: r->helpers |= H_F2I32; sb_printf(b, "int32_t v%d = tgl_f2i32(%s);", i, d); break;
    case TGL_INT64: r->helpers |= H_F2I64; sb_printf(b, "int64_t v%d = tgl_f2i64(%s);", i, d); break;
    case TGL_UINT8: r->helpers |= H_F2U8; sb_printf(b, "uint8_t v%d = tgl_f2u8(%s);", i, d); break;
    default: sb_printf(b, "uint8_t v%d = (uint8_t)(%s != 0.0);", i, d); break;
    }
}

static int arity(int op)
{
    return op <= TGL_OP_CAST ? 1 : op <= TGL_OP_OR ? 2 : 3;
}

/* Float math of instruction i (result dtype dt, operands x y z). */
static bool float_op(render *r, sbuf *b, int i, int op, int dt, const char *x, const char *y,
                     const char *z)
{
    const char *T = ctype(dt);
    char f[16], g[16];
    switch (op) {
    case TGL_OP_NEG: sb_printf(b, "%s v%d = -%s;", T, i, x); break;
    case TGL_OP_ABS: sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_FABS, dt, f), x); break;
    case TGL_OP_SIGN: /* keeps NaN and -0.0 */
        sb_printf(b, "%s v%d = %s > 0 ? (%s)1 : %s < 0 ? (%s)-1 : %s;", T, i, x, T, x, T, x);
        break;
    case TGL_OP_EXP: sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_EXP, dt, f), x); break;
    case TGL_OP_LOG: sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_LOG, dt, f), x); break;
    case TGL_OP_LOG1P: sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_LOG1P, dt, f), x); break;
    case TGL_OP_EXPM1: sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_EXPM1, dt, f), x); break;
    case TGL_OP_SQRT: sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_SQRT, dt, f), x); break;
    case TGL_OP_SQR: sb_printf(b, "%s v%d = %s * %s;", T, i, x, x); break;
    case TGL_OP_RECIP: sb_printf(b, "%s v%d = (%s)1 / %s;", T, i, T, x); break;
    case TGL_OP_TANH: sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_TANH, dt, f), x); break;
    case TGL_OP_SIGMOID:
        /* x >= 0 ? 1/(1+e^-x) : e^x/(1+e^x), both with e = exp(-|x|):
         * the reference's values (NaN included) without a branch. */
        sb_printf(b, "%s e%d = %s(-%s(%s)); %s v%d = %s >= 0 ? (%s)1 / ((%s)1 + e%d) : e%d / ((%s)1 + e%d);",
                  T, i, fn(r, LM_EXP, dt, f), fn(r, LM_FABS, dt, g), x, T, i, x, T, T, i, i, T, i);
        break;
    case TGL_OP_SOFTPLUS:
        /* x > 0 ? x + log1p(e^-x) : log1p(e^x), e as for the sigmoid */
        sb_printf(b, "%s e%d = %s(%s(-", T, i, fn(r, LM_LOG1P, dt, f), fn(r, LM_EXP, dt, g));
        sb_printf(b, "%s(%s))); %s v%d = %s > 0 ? %s + e%d : e%d;", fn(r, LM_FABS, dt, f), x, T,
                  i, x, x, i, i);
        break;
    case TGL_OP_RELU: sb_printf(b, "%s v%d = %s > 0 ? %s : (%s)0;", T, i, x, x, T); break;
    case TGL_OP_SIN: sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_SIN, dt, f), x); break;
    case TGL_OP_COS: sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_COS, dt, f), x); break;
    case TGL_OP_FLOOR: sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_FLOOR, dt, f), x); break;
    case TGL_OP_CEIL: sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_CEIL, dt, f), x); break;
    case TGL_OP_ROUND: sb_printf(b, "%s v%d = %s(%s);", T, i, fn(r, LM_ROUND, dt, f), x); break;
    case TGL_OP_ADD: sb_printf(b, "%s v%d = %s + %s;", T, i, x, y); break;
    case TGL_OP_SUB: sb_printf(b, "%s v%d = %s - %s;", T, i, x, y); break;
    case TGL_OP_MUL: sb_printf(b, "%s v%d = %s * %s;", T, i, x, y); break;
    case TGL_OP_DIV: sb_printf(b, "%s v%d = %s / %s;", T, i, x, y); break;
    case TGL_OP_POW: sb_printf(b, "%s v%d = %s(%s, %s);", T, i, fn(r, LM_POW, dt, f), x, y); break;
    case TGL_OP_MOD:
        sb_printf(b, "%s v%d = %s - %s(%s / %s) * %s;", T, i, x, fn(r, LM_FLOOR, dt, f), x, y, y);
        break;
    case TGL_OP_MAXIMUM: /* a NaN in x wins, and y's NaN fails x >= y */
        sb_printf(b, "%s v%d = (%s != %s || %s >= %s) ? %s : %s;", T, i, x, x, x, y, x, y);
        break;
    case TGL_OP_MINIMUM:
        sb_printf(b, "%s v%d = (%s != %s || %s <= %s) ? %s : %s;", T, i, x, x, x, y, x, y);
        break;
    case TGL_OP_CLIP:
        sb_printf(b, "%s v%d = %s < %s ? %s : %s > %s ? %s : %s;", T, i, x, y, y, x, z, z, x);
        break;
    default:
        return false;
    }
    return true;
}

/* Integer arithmetic of instruction i: wraps through uint64 as the
 * reference does, so overflow is defined. */
static bool int_op(render *r, sbuf *b, int i, int op, int dt, const char *x, const char *y,
                   const char *z)
{
    const char *T = ctype(dt);
    bool u = dt == TGL_UINT8;
    switch (op) {
    case TGL_OP_NEG: sb_printf(b, "%s v%d = (%s)(0 - (uint64_t)%s);", T, i, T, x); break;
    case TGL_OP_ABS:
        if (u)
            sb_printf(b, "%s v%d = %s;", T, i, x);
        else
            sb_printf(b, "%s v%d = %s < 0 ? (%s)(0 - (uint64_t)%s) : %s;", T, i, x, T, x, x);
        break;
    case TGL_OP_SIGN:
        if (u)
            sb_printf(b, "%s v%d = (%s)(%s > 0);", T, i, T, x);
        else
            sb_printf(b, "%s v%d = (%s)(%s > 0 ? 1 : %s < 0 ? -1 : 0);", T, i, T, x, x);
        break;
    case TGL_OP_SQR: sb_printf(b, "%s v%d = (%s)((uint64_t)%s * (uint64_t)%s);", T, i, T, x, x); break;
    case TGL_OP_RELU: sb_printf(b, "%s v%d = %s > 0 ? %s : (%s)0;", T, i, x, x, T); break;
    case TGL_OP_FLOOR:
    case TGL_OP_CEIL:
    case TGL_OP_ROUND: sb_printf(b, "%s v%d = %s;", T, i, x); break;
    case TGL_OP_ADD: sb_printf(b, "%s v%d = (%s)((uint64_t)%s + (uint64_t)%s);", T, i, T, x, y); break;
    case TGL_OP_SUB: sb_printf(b, "%s v%d = (%s)((uint64_t)%s - (uint64_t)%s);", T, i, T, x, y); break;
    case TGL_OP_MUL: sb_printf(b, "%s v%d = (%s)((uint64_t)%s * (uint64_t)%s);", T, i, T, x, y); break;
    case TGL_OP_POW:
        r->helpers |= H_POWI;
        sb_printf(b, "%s v%d = (%s)tgl_pow_i(%s, %s);", T, i, T, x, y);
        break;
    case TGL_OP_MOD:
        r->helpers |= H_MODI;
        sb_printf(b, "%s v%d = (%s)tgl_mod_i(%s, %s);", T, i, T, x, y);
        break;
    case TGL_OP_MAXIMUM: sb_printf(b, "%s v%d = %s >= %s ? %s : %s;", T, i, x, y, x, y); break;
    case TGL_OP_MINIMUM: sb_printf(b, "%s v%d = %s <= %s ? %s : %s;", T, i, x, y, x, y); break;
    case TGL_OP_CLIP:
        sb_printf(b, "%s v%d = %s < %s ? %s : %s > %s ? %s : %s;", T, i, x, y, y, x, z, z, x);
        break;
    default:
        return false;
    }
    return true;
}

/* `T v<i> = ...;` for instruction i; mode says how inputs are loaded. */
static void instr(render *r, sbuf *b, int i, int mode)
{
    const tgl_fprog *p = r->p;
    const tgl_finstr *in = &p->code[i];
    int op = in->op, dt = in->dtype;
    if (dt < 0 || dt >= TGL_NDTYPES) {
        fail(r, "instruction %d has dtype %d", i, dt);
        return;
    }
    const char *T = ctype(dt);
    if (op == TGL_FP_INPUT) {
        int j = in->arg[0];
        if (j < 0 || j >= p->nin || p->in_type[j].dtype != dt) {
            fail(r, "instruction %d loads input %d of another dtype or none", i, j);
            return;
        }
        if (mode == MODE_STRIDED)
            sb_printf(b, "%s v%d = i%d[k * s%d];", T, i, j, j);
        else if (tgl_cgen_invariant(p, j))
            sb_printf(b, "%s v%d = i%d;", T, i, j);
        else
            sb_printf(b, "%s v%d = i%d[k];", T, i, j);
        return;
    }
    if (op == TGL_FP_CONST) {
        sb_printf(b, "const %s v%d = ", T, i);
        literal(r, b, dt, in->value);
        sb_printf(b, ";");
        return;
    }
    if (op < 0 || op > TGL_OP_CLIP) {
        fail(r, "instruction %d: op %d is not elementwise", i, op);
        return;
    }
    int n = arity(op), od[3] = {-1, -1, -1};
    char x[3][16];
    for (int a = 0; a < n; a++) {
        if (in->arg[a] < 0 || in->arg[a] >= i) {
            fail(r, "instruction %d: operand %d is not an earlier instruction", i, a);
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
        sb_printf(b, "uint8_t v%d = (uint8_t)(%s %s %s);", i, x[0], rel[op - TGL_OP_EQ], x[1]);
    } else if (op == TGL_OP_AND || op == TGL_OP_OR || op == TGL_OP_NOT) {
        ok = dt == TGL_BOOL && od[0] == TGL_BOOL && (n == 1 || od[1] == TGL_BOOL);
        if (op == TGL_OP_NOT)
            sb_printf(b, "uint8_t v%d = (uint8_t)(%s == 0);", i, x[0]);
        else
            sb_printf(b, "uint8_t v%d = (uint8_t)(%s != 0 %s %s != 0);", i, x[0],
                      op == TGL_OP_AND ? "&&" : "||", x[1]);
    } else if (op == TGL_OP_SWITCH) {
        ok = od[0] == TGL_BOOL && od[1] == dt && od[2] == dt;
        sb_printf(b, "%s v%d = %s ? %s : %s;", T, i, x[0], x[1], x[2]);
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
        fail(r, "instruction %d: %s does not take these operand dtypes (result %s)", i,
             tgl_op_name(op), tgl_dtype_name(dt));
}

/* ---- reductions ----------------------------------------------------------- */

int tgl_cgen_acc_dtype(const tgl_fprog *p)
{
    if (p->reduce_op < 0)
        return -1;
    int dt = p->reduce_type.dtype;
    bool sp = p->reduce_op == TGL_OP_SUM || p->reduce_op == TGL_OP_PROD;
    return sp && tgl_dtype_is_float(dt) ? TGL_FLOAT64 : dt;
}

/* The expression combining accumulator l with value w (both of the
 * accumulator's dtype adt): reduce.c's rules — integer sums and products
 * wrap, max/min keep any NaN they have met.  l and w are evaluated more
 * than once: pass plain lvalues. */
static void comb(sbuf *b, int op, int adt, const char *l, const char *w)
{
    bool fl = tgl_dtype_is_float(adt);
    switch (op) {
    case TGL_OP_SUM:
        if (fl)
            sb_printf(b, "%s + %s", l, w);
        else
            sb_printf(b, "(int64_t)((uint64_t)%s + (uint64_t)%s)", l, w);
        break;
    case TGL_OP_PROD:
        if (fl)
            sb_printf(b, "%s * %s", l, w);
        else
            sb_printf(b, "(int64_t)((uint64_t)%s * (uint64_t)%s)", l, w);
        break;
    default: {
        const char *rel = op == TGL_OP_MAX ? ">" : "<";
        if (fl)
            sb_printf(b, "(%s %s %s || %s != %s) ? %s : %s", w, rel, l, w, w, w, l);
        else
            sb_printf(b, "%s %s %s ? %s : %s", w, rel, l, w, l);
        break;
    }
    }
}

/* Value v (dtype vdt) as the accumulator's dtype; bools count as 0/1. */
static void conv(sbuf *b, int adt, int vdt, const char *v)
{
    if (vdt == TGL_BOOL)
        sb_printf(b, "(%s)(%s != 0)", ctype(adt), v);
    else
        sb_printf(b, "(%s)%s", ctype(adt), v);
}

/* The identity of the reduction in the accumulator's dtype. */
static void identity(render *r, sbuf *b, int op, int adt)
{
    bool mx = op == TGL_OP_MAX;
    if (op == TGL_OP_SUM || op == TGL_OP_PROD) {
        sb_printf(b, "(%s)%d", ctype(adt), op == TGL_OP_PROD);
        return;
    }
    switch (adt) {
    case TGL_FLOAT32:
    case TGL_FLOAT64: literal(r, b, adt, mx ? -INFINITY : INFINITY); break;
    case TGL_INT32: literal(r, b, adt, mx ? -2147483648.0 : 2147483647.0); break;
    case TGL_INT64: literal(r, b, adt, mx ? -9223372036854775808.0 : 9223372036854775808.0); break;
    case TGL_UINT8: sb_printf(b, "(uint8_t)%d", mx ? 0 : 255); break;
    default: sb_printf(b, "(uint8_t)%d", mx ? 0 : 1); break;
    }
}

/* ---- row functions and the kernel ------------------------------------------ */

/* The dtype output k's pointer has in the kernel. */
static int out_dtype(const tgl_fprog *p, int k)
{
    return k == 0 && p->reduce_op >= 0 ? tgl_cgen_acc_dtype(p) : p->out_type[k].dtype;
}

static void params(render *r, sbuf *b, int mode, bool racc)
{
    const tgl_fprog *p = r->p;
    sb_printf(b, "int64_t c0, int64_t c1");
    for (int j = 0; j < p->nin; j++) {
        const char *T = ctype(p->in_type[j].dtype);
        if (mode == MODE_STRIDED)
            sb_printf(b, ", const %s *i%d, int64_t s%d", T, j, j);
        else if (tgl_cgen_invariant(p, j))
            sb_printf(b, ", %s i%d", T, j);
        else
            sb_printf(b, ", const %s *restrict i%d", T, j);
    }
    for (int k = 0; k < p->nout; k++) {
        const char *T = ctype(out_dtype(p, k));
        if (mode == MODE_STRIDED)
            sb_printf(b, ", %s *o%d, int64_t t%d", T, k, k);
        else if (racc && k == 0)
            sb_printf(b, ", %s *o0", T);
        else
            sb_printf(b, ", %s *restrict o%d", T, k);
    }
}

/* The loop body for column k: every instruction, then the stores. */
static void body(render *r, sbuf *b, int mode, bool racc)
{
    const tgl_fprog *p = r->p;
    for (int i = 0; i < p->ninstr && !r->st; i++) {
        sb_printf(b, "        ");
        instr(r, b, i, mode);
        sb_printf(b, "\n");
    }
    for (int k = 0; k < p->nout && !r->st; k++) {
        int v = p->out_instr[k];
        if (v < 0 || v >= p->ninstr) {
            fail(r, "output %d stores no instruction", k);
            return;
        }
        int vdt = p->code[v].dtype;
        char at[32], vn[16];
        snprintf(at, sizeof at, mode == MODE_STRIDED ? "o%d[k * t%d]" : "o%d[k]", k, k);
        snprintf(vn, sizeof vn, "v%d", v);
        if (k == 0 && p->reduce_op >= 0) {
            int adt = tgl_cgen_acc_dtype(p);
            if (racc) {
                sb_printf(b, "        rb[k - k0] = v%d;\n", v);
                continue;
            }
            sb_printf(b, "        { %s w = ", ctype(adt));
            conv(b, adt, vdt, vn);
            sb_printf(b, "; %s = ", at);
            comb(b, p->reduce_op, adt, at, "w");
            sb_printf(b, "; }\n");
        } else {
            if (p->out_type[k].dtype != vdt) {
                fail(r, "output %d is %s but its instruction is %s", k,
                     tgl_dtype_name(p->out_type[k].dtype), tgl_dtype_name(vdt));
                return;
            }
            sb_printf(b, "        %s = v%d;\n", at, v);
        }
    }
}

/* tgl_row_r: the row folded into LANES accumulators through a buffer. */
static void row_reduce(render *r, sbuf *b)
{
    const tgl_fprog *p = r->p;
    int op = p->reduce_op, adt = tgl_cgen_acc_dtype(p);
    const char *A = ctype(adt);
    sb_printf(b, "static void tgl_row_r(");
    params(r, b, MODE_UNIT, true);
    sb_printf(b, ")\n{\n    %s l[%d];\n    for (int j = 0; j < %d; j++)\n        l[j] = ", A, LANES,
              LANES);
    identity(r, b, op, adt);
    sb_printf(b, ";\n    %s rb[%d];\n", ctype(p->code[p->out_instr[0]].dtype), RBUF);
    sb_printf(b, "    for (int64_t k0 = c0; k0 < c1; k0 += %d) {\n", RBUF);
    sb_printf(b, "    const int64_t k1 = c1 - k0 < %d ? c1 : k0 + %d;\n", RBUF, RBUF);
    sb_printf(b, "    for (int64_t k = k0; k < k1; k++) {\n");
    body(r, b, MODE_UNIT, true);
    sb_printf(b, "    }\n    int64_t m = 0;\n    for (; m + %d <= k1 - k0; m += %d)\n", LANES, LANES);
    sb_printf(b, "        for (int j = 0; j < %d; j++) { %s w = ", LANES, A);
    conv(b, adt, p->code[p->out_instr[0]].dtype, "rb[m + j]");
    sb_printf(b, "; l[j] = ");
    comb(b, op, adt, "l[j]", "w");
    sb_printf(b, "; }\n    for (; m < k1 - k0; m++) { %s w = ", A);
    conv(b, adt, p->code[p->out_instr[0]].dtype, "rb[m]");
    sb_printf(b, "; l[0] = ");
    comb(b, op, adt, "l[0]", "w");
    sb_printf(b, "; }\n    }\n");
    for (int h = LANES / 2; h >= 1; h /= 2) {
        sb_printf(b, "    for (int j = 0; j < %d; j++) { %s w = l[j + %d]; l[j] = ", h, A, h);
        comb(b, op, adt, "l[j]", "w");
        sb_printf(b, "; }\n");
    }
    sb_printf(b, "    { %s w = l[0]; *o0 = ", A);
    comb(b, op, adt, "*o0", "w");
    sb_printf(b, "; }\n}\n\n");
}

static void row(render *r, sbuf *b, const char *name, int mode)
{
    sb_printf(b, "static void %s(", name);
    params(r, b, mode, false);
    sb_printf(b, ")\n{\n    for (int64_t k = c0; k < c1; k++) {\n");
    body(r, b, mode, false);
    sb_printf(b, "    }\n}\n\n");
}

/* Arguments of a row call from the kernel's loop. */
static void call_args(render *r, sbuf *b, int mode)
{
    const tgl_fprog *p = r->p;
    sb_printf(b, "c0, c1");
    for (int j = 0; j < p->nin; j++) {
        const char *T = ctype(p->in_type[j].dtype);
        if (mode == MODE_STRIDED)
            sb_printf(b, ", (const %s *)B[%d]->data + off[%d], B[%d]->strides[L]", T, j, j, j);
        else if (tgl_cgen_invariant(p, j))
            sb_printf(b, ", ((const %s *)B[%d]->data)[off[%d]]", T, j, j);
        else
            sb_printf(b, ", (const %s *)B[%d]->data + off[%d]", T, j, j);
    }
    for (int k = 0; k < p->nout; k++) {
        int o = p->nin + k;
        sb_printf(b, ", (%s *)B[%d]->data + off[%d]", ctype(out_dtype(p, k)), o, o);
        if (mode == MODE_STRIDED)
            sb_printf(b, ", B[%d]->strides[L]", o);
    }
}

static void kernel(render *r, sbuf *b, const char *symbol)
{
    const tgl_fprog *p = r->p;
    bool red = p->reduce_op >= 0;
    int nop = p->nin + p->nout;
    sb_printf(b, "void %s(const tgl_kargs *A)\n{\n", symbol);
    sb_printf(b, "    enum { NIN = %d, NOP = %d };\n", p->nin, nop);
    sb_printf(b, "    const tgl_kbuf *B[NOP];\n"
                 "    for (int j = 0; j < NOP; j++)\n"
                 "        B[j] = j < NIN ? &A->in[j] : &A->out[j - NIN];\n"
                 "    const int L = A->ndim - 1;\n"
                 "    const int64_t c0 = A->col_begin, c1 = A->col_end;\n");
    /* The unit path only when each operand's row stride is what the row
     * function assumes. */
    sb_printf(b, "    const int unit = A->unit");
    for (int j = 0; j < p->nin; j++)
        sb_printf(b, " && B[%d]->strides[L] == %d", j, tgl_cgen_invariant(p, j) ? 0 : 1);
    for (int k = red ? 1 : 0; k < p->nout; k++)
        sb_printf(b, " && B[%d]->strides[L] == 1", p->nin + k);
    sb_printf(b, ";\n    const int racc = %s;\n", red ? "B[NIN]->strides[L] == 0" : "0");
    sb_printf(b, "    (void)racc;\n"
                 "    int64_t idx[TGL_KERNEL_MAX_DIMS], off[NOP];\n"
                 "    for (int j = 0; j < NOP; j++)\n"
                 "        off[j] = 0;\n"
                 "    int64_t q = A->row_begin;\n"
                 "    for (int d = L - 1; d >= 0; d--) {\n"
                 "        idx[d] = q %% A->shape[d];\n"
                 "        q /= A->shape[d];\n"
                 "        for (int j = 0; j < NOP; j++)\n"
                 "            off[j] += idx[d] * B[j]->strides[d];\n"
                 "    }\n"
                 "    for (int64_t row = A->row_begin; row < A->row_end; row++) {\n"
                 "        if (!unit)\n            tgl_row_s(");
    call_args(r, b, MODE_STRIDED);
    if (red) {
        sb_printf(b, ");\n        else if (racc)\n            tgl_row_r(");
        call_args(r, b, MODE_UNIT);
    }
    sb_printf(b, ");\n        else\n            tgl_row_u(");
    call_args(r, b, MODE_UNIT);
    sb_printf(b, ");\n"
                 "        for (int d = L - 1; d >= 0; d--) {\n"
                 "            for (int j = 0; j < NOP; j++)\n"
                 "                off[j] += B[j]->strides[d];\n"
                 "            if (++idx[d] < A->shape[d])\n"
                 "                break;\n"
                 "            for (int j = 0; j < NOP; j++)\n"
                 "                off[j] -= B[j]->strides[d] * A->shape[d];\n"
                 "            idx[d] = 0;\n"
                 "        }\n"
                 "    }\n}\n");
}

/* Declarations of the libm functions used, and the helpers. */
static void prelude(render *r, sbuf *b)
{
    for (int s = 0; s < 2; s++)
        for (int f = 0; f < LM_COUNT; f++) {
            if (!((r->used[s] >> f) & 1u))
                continue;
            const char *T = s ? "float" : "double";
            if (libm[f].vec)
                sb_printf(b, "#pragma omp declare simd notinbranch\n");
            sb_printf(b, "%s %s%s(%s%s%s);\n", T, libm[f].name, s ? "f" : "", T,
                      libm[f].arity == 2 ? ", " : "", libm[f].arity == 2 ? T : "");
        }
    unsigned h = r->helpers;
    if (h & H_INF)
        sb_printf(b, "static const union { uint64_t u; double d; } tgl_inf = {0x7ff0000000000000ULL},\n"
                     "    tgl_nan = {0x7ff8000000000000ULL};\n"
                     "#define TGL_INF (tgl_inf.d)\n#define TGL_NAN (tgl_nan.d)\n");
    if (h & H_MODI) /* Lua's %: the sign of b; by 0 gives 0 (as the reference) */
        sb_printf(b, "static inline int64_t tgl_mod_i(int64_t a, int64_t b)\n{\n"
                     "    if (b == 0 || b == -1)\n        return 0;\n"
                     "    int64_t r = a %% b;\n"
                     "    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}\n");
    if (h & H_POWI)
        sb_printf(b, "static inline int64_t tgl_pow_i(int64_t a, int64_t b)\n{\n"
                     "    if (b < 0)\n        return a == 1 ? 1 : a == -1 ? (b %% 2 ? -1 : 1) : 0;\n"
                     "    uint64_t r = 1, x = (uint64_t)a;\n"
                     "    while (b) {\n        if (b & 1)\n            r *= x;\n"
                     "        x *= x;\n        b >>= 1;\n    }\n    return (int64_t)r;\n}\n");
    /* Truncation toward zero, saturating, NaN -> 0 (tgl_store_from_double). */
    if (h & H_F2I32)
        sb_printf(b, "static inline int32_t tgl_f2i32(double v)\n{\n"
                     "    return v != v ? 0 : v <= -2147483648.0 ? (int32_t)(-2147483647 - 1)\n"
                     "         : v >= 2147483647.0 ? (int32_t)2147483647 : (int32_t)(int64_t)v;\n}\n");
    if (h & H_F2I64)
        sb_printf(b, "static inline int64_t tgl_f2i64(double v)\n{\n"
                     "    return v != v ? 0 : v >= 9223372036854775808.0 ? (int64_t)9223372036854775807LL\n"
                     "         : v <= -9223372036854775808.0 ? (int64_t)(-9223372036854775807LL - 1)\n"
                     "         : (int64_t)v;\n}\n");
    if (h & H_F2U8)
        sb_printf(b, "static inline uint8_t tgl_f2u8(double v)\n{\n"
                     "    return v != v ? 0 : v <= 0.0 ? 0 : v >= 255.0 ? 255 : (uint8_t)(int64_t)v;\n}\n");
    sb_printf(b, "\n");
}

int tgl_cgen_invariant(const tgl_fprog *p, int i)
{
    return p->ndim > 0 && tgl_type_bcast(p->in_type[i], p->ndim - 1);
}

tgl_status tgl_cgen_render(tgl_ctx *ctx, const tgl_fprog *prog, const char *symbol, char **source)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(prog && symbol && source, TGL_EINVAL, "tgl_cgen_render: NULL argument");
    render r = {.ctx = ctx, .p = prog};
    if (prog->ndim < 0 || prog->ndim > TGL_KERNEL_MAX_DIMS || prog->nout < 1 || prog->ninstr < 1)
        return fail(&r, "%d axes, %d outputs, %d instructions", prog->ndim, prog->nout,
                    prog->ninstr);
    if (prog->reduce_op >= 0 && prog->reduce_op != TGL_OP_SUM && prog->reduce_op != TGL_OP_PROD &&
        prog->reduce_op != TGL_OP_MAX && prog->reduce_op != TGL_OP_MIN)
        return fail(&r, "reduction op %d", prog->reduce_op);
    /* Functions first: rendering them records which declarations and
     * helpers the prelude needs. */
    sbuf fns = {0}, out = {0};
    row(&r, &fns, "tgl_row_u", MODE_UNIT);
    if (prog->reduce_op >= 0)
        row_reduce(&r, &fns);
    row(&r, &fns, "tgl_row_s", MODE_STRIDED);
    kernel(&r, &fns, symbol);
    sb_printf(&out, "/* tgl fused kernel: %d instructions, %d inputs, %d outputs", prog->ninstr,
              prog->nin, prog->nout);
    if (prog->reduce_op >= 0)
        sb_printf(&out, ", %s over axes 0x%x", tgl_op_name(prog->reduce_op),
                  (unsigned)prog->reduce_mask);
    sb_printf(&out, " */\n%s\n", tgl_cgen_kernel_header);
    prelude(&r, &out);
    sb_printf(&out, "%s", fns.p ? fns.p : "");
    free(fns.p);
    if (r.st || out.oom || fns.oom) {
        free(out.p);
        return r.st ? r.st : tgl_ctx_set_error(ctx, TGL_ENOMEM, "cgen: out of memory");
    }
    *source = out.p;
    return TGL_OK;
}

/* ---- digest ---------------------------------------------------------------- */

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *c = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

#define MIX(h, v) do { int64_t v_ = (int64_t)(v); (h) = fnv((h), &v_, sizeof v_); } while (0)

uint64_t tgl_cgen_digest(const tgl_fprog *p)
{
    uint64_t h = 14695981039346656037ull;
    MIX(h, p->ndim);
    MIX(h, p->nin);
    for (int j = 0; j < p->nin; j++) {
        MIX(h, p->in_type[j].dtype);
        MIX(h, p->in_type[j].bcast);
    }
    MIX(h, p->ninstr);
    for (int i = 0; i < p->ninstr; i++) {
        const tgl_finstr *c = &p->code[i];
        MIX(h, c->op);
        MIX(h, c->dtype);
        for (int a = 0; a < 3; a++)
            MIX(h, c->arg[a]);
        h = fnv(h, &c->value, sizeof c->value);
    }
    MIX(h, p->nout);
    for (int k = 0; k < p->nout; k++) {
        MIX(h, p->out_instr[k]);
        MIX(h, p->out_type[k].dtype);
    }
    MIX(h, p->reduce_op);
    MIX(h, p->reduce_mask);
    MIX(h, p->reduce_type.dtype);
    return h;
}
