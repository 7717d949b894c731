/*
 * expr.h — the device-neutral renderer of fused instructions (expr.c):
 * the scalar statement `T v<i> = ...;` of one instruction of a fused
 * program (engine/fused_prog.h), from the op's entry in TGL_ELEMWISE_OPS
 * (engine/ops/elemwise_def.h), and the helper definitions those
 * statements need, in a dialect the caller describes.
 *
 * The renderer knows C's expression syntax (which C++ and CUDA share),
 * the elementwise table and the reference's conversion rules; it knows no
 * compiler, library or device.  What differs between targets is the
 * dialect (tgl_cgen_dialect): the type names, the float32 names of the
 * math functions, how float constants are written, whether the math
 * functions are declared and which have vector forms, how helper
 * functions are declared.  The kernel renderers own the loop around the
 * statements and how operands are loaded: render.c (C kernels for the
 * host compilers, with the dialect of those) and render_cuda.c (CUDA
 * kernels).
 */
#ifndef TGL_CGEN_EXPR_H
#define TGL_CGEN_EXPR_H

#include "engine/backend.h"
#include "engine/fused_prog.h"
#include "engine/strbuf.h"

#include <stdint.h>

/* The math functions the table's expressions may call, by their double
 * names: _(name, arity).  An expression naming another fails to render;
 * a function the table starts to use is added here (and, if the host's
 * vector library has it, in cgint.h's TGL_CGEN_LIBMVEC). */
#define TGL_CGEN_MATH(_)                                                        \
    _(fabs, 1) _(exp, 1) _(log, 1) _(log1p, 1) _(expm1, 1) _(sqrt, 1)           \
    _(tanh, 1) _(sin, 1) _(cos, 1) _(floor, 1) _(ceil, 1) _(round, 1)           \
    _(pow, 2)

/* TGL_CGEN_M_<name>: a math function's index (its bit in the masks). */
enum {
#define TGL_CGEN_M_(name, arity) TGL_CGEN_M_##name,
    TGL_CGEN_MATH(TGL_CGEN_M_)
#undef TGL_CGEN_M_
    TGL_CGEN_NMATH
};

/* A target language, as the renderer sees it. */
typedef struct tgl_cgen_dialect {
    /* The element type of each dtype (integer dtypes by their <stdint.h>
     * names: the table's expressions cast to those names). */
    const char *type[TGL_NDTYPES];
    /* Appended to a math function's double name to call its float32
     * form ("f": expf, the precise one in C and in CUDA alike). */
    const char *f32_suffix;
    /* NULL: float constants are hex-float literals, and infinities and
     * NaN come from a TGL_INF/TGL_NAN helper.  Else the functions that
     * make a float32 and a float64 from their bits (an int, a long long):
     * every float constant is written through them, exactly. */
    const char *f32_from_bits, *f64_from_bits;
    /* Whether the source declares the math functions it calls (it
     * includes no header), and, for those whose bit is set in
     * vector_math, the line put before the declaration (a vector form
     * exists: e.g. an OpenMP `declare simd` pragma). */
    bool declare_math;
    uint32_t vector_math;
    const char *vector_decl;
    /* What starts the definition of a helper function, in place of
     * "static inline" (the table's helpers are written with it). */
    const char *fn;
} tgl_cgen_dialect;

/* The state of rendering instructions: the dialect, the program (set by
 * the caller; several programs may share one state, then one prelude),
 * which math functions (bit per TGL_CGEN_M_*, [0] double, [1] float32)
 * and helpers (expr.c's, and bit k for tgl_elemwise_helpers[k]) the
 * statements used, and the first error. */
typedef struct tgl_cgen_expr {
    const tgl_cgen_dialect *d;
    tgl_errbuf *err;
    const tgl_fused_prog *p;
    uint32_t used[2];
    unsigned helpers;
    uint32_t ew_helpers;
    tgl_status st;
} tgl_cgen_expr;

/* The dialect's type of dtype's elements (bool's for a dtype out of
 * range: an instruction with such a dtype fails in tgl_cgen_instr). */
const char *tgl_cgen_type(const tgl_cgen_dialect *d, int dtype);
/* Sets TGL_EINTERNAL with a message naming the program (first error wins). */
tgl_status tgl_cgen_fail(tgl_cgen_expr *x, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A literal of dtype holding v as tgl_store_from_double stores it. */
void tgl_cgen_literal(tgl_cgen_expr *x, tgl_sb *b, int dtype, double v);
/* `T v<i> = ...;` for instruction i of x->p.  An input instruction loads
 * the text load[j] (input j's element as the kernel's loop reaches it);
 * the others are the renderer's own. */
void tgl_cgen_instr(tgl_cgen_expr *x, tgl_sb *b, int i, const char *const *load);
/* The declarations and helper definitions the statements rendered with x
 * need, then an empty line. */
void tgl_cgen_prelude(tgl_cgen_expr *x, tgl_sb *b);

#endif /* TGL_CGEN_EXPR_H */
