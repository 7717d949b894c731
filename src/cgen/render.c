/*
 * render.c — a fused program (engine/fused_prog.h) rendered as C source for the
 * host compilers (libtcc, cc): the CPU backend's kernels, and its whole
 * steps.
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
 *              vectorizes it (libm calls included: see host_c below).  A
 *              fused reduction accumulates elementwise into out[0] (its
 *              kept axes are along the row).
 *   tgl_row_r  the unit path of a reduction over the row (out[0] stride 0):
 *              values go through a small buffer into eight accumulator
 *              lanes (independent, so the adds vectorize without
 *              reassociating), combined into out[0] once per row.
 *   tgl_row_s  every other layout: per-operand strides.
 *
 * The loop bodies are the statements of the device-neutral renderer
 * (expr.h) in the host compilers' dialect, host_c; the loads of inputs are
 * this file's.  The kernel checks the strides itself before taking the
 * unit path, so a launcher's `unit` hint can never make it read the wrong
 * elements.  Reductions combine as reduce.c does: integer sums and
 * products wrap, max and min keep any NaN they meet.
 */
#include "cgen/cgint.h"
#include "cgen/expr.h"
#include "engine/hash.h"
#include "engine/ops/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tgl_kernel_text.h"  /* generated: TGL_KERNEL_H_TEXT */

/* tgl_kernel.h, verbatim: the build embeds the file's text
 * (cmake/tgl_embed_text.cmake), and spec/c/test_cgen.c checks it against
 * the file. */
const char tgl_cgen_kernel_header[] = TGL_KERNEL_H_TEXT;

/* Rows of a row-reduction go through a buffer of this many values into
 * this many accumulator lanes. */
#define RBUF 256
#define LANES 8

/* ---- the host compilers' dialect ---------------------------------------- */

/* glibc's libmvec has vector forms of TGL_CGEN_LIBMVEC's functions (OLD:
 * since 2.22, NEW: since 2.35) on x86-64; the others gcc inlines as
 * instructions. */
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
#define MVEC_BIT(name, since) | (MVEC_##since ? 1u << TGL_CGEN_M_##name : 0u)

/* C for libtcc and the system compiler.  libm is declared rather than
 * included, so a source compiles under libtcc with no headers (compile.c
 * hands libtcc the functions themselves).  Functions libmvec provides in
 * vector form carry `#pragma omp declare simd notinbranch`: with
 * -fopenmp-simd (compile.c's flags), gcc vectorizes loops calling them
 * (libtcc ignores the pragma); their results may differ from the scalar
 * functions' in the last ulps. */
static const tgl_cgen_dialect host_c = {
    .type = {[TGL_FLOAT32] = "float", [TGL_FLOAT64] = "double", [TGL_INT32] = "int32_t",
             [TGL_INT64] = "int64_t", [TGL_UINT8] = "uint8_t", [TGL_BOOL] = "uint8_t"},
    .f32_suffix = "f",
    .declare_math = true,
    .vector_math = 0u TGL_CGEN_LIBMVEC(MVEC_BIT),
    .vector_decl = "#pragma omp declare simd notinbranch\n",
    .fn = "static inline",
};

#define CT(dt) tgl_cgen_type(&host_c, dt)

/* The state of rendering one source: the statements' (which math
 * functions and helpers the prelude needs, the first error), and the
 * prefix of the row functions' names. */
typedef struct render {
    tgl_cgen_expr x;
    const char *pfx;
} render;

/* How a row function loads inputs: unit (i<j>[k], or the value i<j> for
 * an invariant input) or strided (i<j>[k * s<j>]). */
enum { TGL_ROW_UNIT, TGL_ROW_STRIDED };

/* ---- reductions ----------------------------------------------------------- */

/* The expression combining accumulator l with value w (both of the
 * accumulator's dtype adt): reduce.c's rules — integer sums and products
 * wrap, max/min keep any NaN they have met.  l and w are evaluated more
 * than once: pass plain lvalues. */
static void comb(tgl_sb *b, int op, int adt, const char *l, const char *w)
{
    bool fl = tgl_dtype_is_float(adt);
    switch (op) {
    case TGL_OP_SUM:
        if (fl)
            tgl_sb_printf(b, "%s + %s", l, w);
        else
            tgl_sb_printf(b, "(int64_t)((uint64_t)%s + (uint64_t)%s)", l, w);
        break;
    case TGL_OP_PROD:
        if (fl)
            tgl_sb_printf(b, "%s * %s", l, w);
        else
            tgl_sb_printf(b, "(int64_t)((uint64_t)%s * (uint64_t)%s)", l, w);
        break;
    default: {
        const char *rel = op == TGL_OP_MAX ? ">" : "<";
        if (fl)
            tgl_sb_printf(b, "(%s %s %s || %s != %s) ? %s : %s", w, rel, l, w, w, w, l);
        else
            tgl_sb_printf(b, "%s %s %s ? %s : %s", w, rel, l, w, l);
        break;
    }
    }
}

/* Value v (dtype vdt) as the accumulator's dtype; bools count as 0/1. */
static void conv(tgl_sb *b, int adt, int vdt, const char *v)
{
    if (vdt == TGL_BOOL)
        tgl_sb_printf(b, "(%s)(%s != 0)", CT(adt), v);
    else
        tgl_sb_printf(b, "(%s)%s", CT(adt), v);
}

/* The identity of the reduction in the accumulator's dtype. */
static void identity(render *r, tgl_sb *b, int op, int adt)
{
    bool mx = op == TGL_OP_MAX;
    if (op == TGL_OP_SUM || op == TGL_OP_PROD) {
        tgl_sb_printf(b, "(%s)%d", CT(adt), op == TGL_OP_PROD);
        return;
    }
    switch (adt) {
    case TGL_FLOAT32:
    case TGL_FLOAT64: tgl_cgen_literal(&r->x, b, adt, mx ? -INFINITY : INFINITY); break;
    case TGL_INT32: tgl_cgen_literal(&r->x, b, adt, mx ? -2147483648.0 : 2147483647.0); break;
    case TGL_INT64:
        tgl_cgen_literal(&r->x, b, adt, mx ? -9223372036854775808.0 : 9223372036854775808.0);
        break;
    case TGL_UINT8: tgl_sb_printf(b, "(uint8_t)%d", mx ? 0 : 255); break;
    default: tgl_sb_printf(b, "(uint8_t)%d", mx ? 0 : 1); break;
    }
}

/* ---- row functions and the kernel ------------------------------------------ */

/* The dtype output k's pointer has in the kernel. */
static int out_dtype(const tgl_fused_prog *p, int k)
{
    return k == 0 && p->reduce_op >= 0 ? tgl_cgen_acc_dtype(p) : p->out_type[k].dtype;
}

static void params(render *r, tgl_sb *b, int mode, bool racc)
{
    const tgl_fused_prog *p = r->x.p;
    tgl_sb_printf(b, "int64_t c0, int64_t c1");
    for (int j = 0; j < p->nin; j++) {
        const char *T = CT(p->in_type[j].dtype);
        if (mode == TGL_ROW_STRIDED)
            tgl_sb_printf(b, ", const %s *i%d, int64_t s%d", T, j, j);
        else if (tgl_cgen_invariant(p, j))
            tgl_sb_printf(b, ", %s i%d", T, j);
        else
            tgl_sb_printf(b, ", const %s *restrict i%d", T, j);
    }
    for (int k = 0; k < p->nout; k++) {
        const char *T = CT(out_dtype(p, k));
        if (mode == TGL_ROW_STRIDED)
            tgl_sb_printf(b, ", %s *o%d, int64_t t%d", T, k, k);
        else if (racc && k == 0)
            tgl_sb_printf(b, ", %s *o0", T);
        else
            tgl_sb_printf(b, ", %s *restrict o%d", T, k);
    }
}

/* The loop body for column k: every instruction, then the stores. */
static void body(render *r, tgl_sb *b, int mode, bool racc)
{
    const tgl_fused_prog *p = r->x.p;
    char (*text)[48] = calloc((size_t)p->nin + 1, sizeof *text);
    const char **load = calloc((size_t)p->nin + 1, sizeof *load);
    if (!text || !load) {
        free(text);
        free(load);
        r->x.st = r->x.st ? r->x.st : tgl_errbuf_set(r->x.err, TGL_ENOMEM, "cgen: out of memory");
        return;
    }
    for (int j = 0; j < p->nin; j++) {
        if (mode == TGL_ROW_STRIDED)
            snprintf(text[j], sizeof text[j], "i%d[k * s%d]", j, j);
        else if (tgl_cgen_invariant(p, j))
            snprintf(text[j], sizeof text[j], "i%d", j);
        else
            snprintf(text[j], sizeof text[j], "i%d[k]", j);
        load[j] = text[j];
    }
    for (int i = 0; i < p->ninstr && !r->x.st; i++) {
        tgl_sb_printf(b, "        ");
        tgl_cgen_instr(&r->x, b, i, load);
        tgl_sb_printf(b, "\n");
    }
    free(text);
    free(load);
    for (int k = 0; k < p->nout && !r->x.st; k++) {
        int v = p->out_instr[k];
        if (v < 0 || v >= p->ninstr) {
            tgl_cgen_fail(&r->x, "output %d stores no instruction", k);
            return;
        }
        int vdt = p->code[v].dtype;
        char at[32], vn[16];
        snprintf(at, sizeof at, mode == TGL_ROW_STRIDED ? "o%d[k * t%d]" : "o%d[k]", k, k);
        snprintf(vn, sizeof vn, "v%d", v);
        if (k == 0 && p->reduce_op >= 0) {
            int adt = tgl_cgen_acc_dtype(p);
            if (racc) {
                tgl_sb_printf(b, "        rb[k - k0] = ");
                conv(b, adt, vdt, vn);
                tgl_sb_printf(b, ";\n");
                continue;
            }
            tgl_sb_printf(b, "        { %s w = ", CT(adt));
            conv(b, adt, vdt, vn);
            tgl_sb_printf(b, "; %s = ", at);
            comb(b, p->reduce_op, adt, at, "w");
            tgl_sb_printf(b, "; }\n");
        } else {
            if (p->out_type[k].dtype != vdt) {
                tgl_cgen_fail(&r->x, "output %d is %s but its instruction is %s", k,
                     tgl_dtype_name(p->out_type[k].dtype), tgl_dtype_name(vdt));
                return;
            }
            tgl_sb_printf(b, "        %s = v%d;\n", at, v);
        }
    }
}

/* tgl_row_r: the row folded into LANES accumulators through a buffer. */
static void row_reduce(render *r, tgl_sb *b)
{
    const tgl_fused_prog *p = r->x.p;
    int op = p->reduce_op, adt = tgl_cgen_acc_dtype(p);
    const char *A = CT(adt);
    tgl_sb_printf(b, "static void %s_row_r(", r->pfx);
    params(r, b, TGL_ROW_UNIT, true);
    tgl_sb_printf(b, ")\n{\n    %s l[%d];\n    for (int j = 0; j < %d; j++)\n        l[j] = ", A,
                  LANES, LANES);
    identity(r, b, op, adt);
    /* The buffer holds accumulator values: converting while filling it
     * keeps the lane loop free of widening, which gcc 12.2 miscompiles in
     * this reduction at -O3 (uint8 values into int64 lanes gave wrong sums;
     * spec/c/test_cgen.c's uint8 sums catch it). */
    tgl_sb_printf(b, ";\n    %s rb[%d];\n", A, RBUF);
    tgl_sb_printf(b, "    for (int64_t k0 = c0; k0 < c1; k0 += %d) {\n", RBUF);
    tgl_sb_printf(b, "    const int64_t k1 = c1 - k0 < %d ? c1 : k0 + %d;\n", RBUF, RBUF);
    tgl_sb_printf(b, "    for (int64_t k = k0; k < k1; k++) {\n");
    body(r, b, TGL_ROW_UNIT, true);
    tgl_sb_printf(b, "    }\n    int64_t m = 0;\n    for (; m + %d <= k1 - k0; m += %d)\n", LANES,
                  LANES);
    tgl_sb_printf(b, "        for (int j = 0; j < %d; j++) { %s w = rb[m + j]; l[j] = ", LANES, A);
    comb(b, op, adt, "l[j]", "w");
    tgl_sb_printf(b, "; }\n    for (; m < k1 - k0; m++) { %s w = rb[m]; l[0] = ", A);
    comb(b, op, adt, "l[0]", "w");
    tgl_sb_printf(b, "; }\n    }\n");
    for (int h = LANES / 2; h >= 1; h /= 2) {
        tgl_sb_printf(b, "    for (int j = 0; j < %d; j++) { %s w = l[j + %d]; l[j] = ", h, A, h);
        comb(b, op, adt, "l[j]", "w");
        tgl_sb_printf(b, "; }\n");
    }
    tgl_sb_printf(b, "    { %s w = l[0]; *o0 = ", A);
    comb(b, op, adt, "*o0", "w");
    tgl_sb_printf(b, "; }\n}\n\n");
}

static void row(render *r, tgl_sb *b, const char *name, int mode)
{
    tgl_sb_printf(b, "static void %s_%s(", r->pfx, name);
    params(r, b, mode, false);
    tgl_sb_printf(b, ")\n{\n    for (int64_t k = c0; k < c1; k++) {\n");
    body(r, b, mode, false);
    tgl_sb_printf(b, "    }\n}\n\n");
}

/* Arguments of a row call from the kernel's loop. */
static void call_args(render *r, tgl_sb *b, int mode)
{
    const tgl_fused_prog *p = r->x.p;
    tgl_sb_printf(b, "c0, c1");
    for (int j = 0; j < p->nin; j++) {
        const char *T = CT(p->in_type[j].dtype);
        if (mode == TGL_ROW_STRIDED)
            tgl_sb_printf(b, ", (const %s *)B[%d]->data + off[%d], B[%d]->strides[L]", T, j, j, j);
        else if (tgl_cgen_invariant(p, j))
            tgl_sb_printf(b, ", ((const %s *)B[%d]->data)[off[%d]]", T, j, j);
        else
            tgl_sb_printf(b, ", (const %s *)B[%d]->data + off[%d]", T, j, j);
    }
    for (int k = 0; k < p->nout; k++) {
        int o = p->nin + k;
        tgl_sb_printf(b, ", (%s *)B[%d]->data + off[%d]", CT(out_dtype(p, k)), o, o);
        if (mode == TGL_ROW_STRIDED)
            tgl_sb_printf(b, ", B[%d]->strides[L]", o);
    }
}

static void kernel(render *r, tgl_sb *b, const char *decl, const char *symbol)
{
    const tgl_fused_prog *p = r->x.p;
    bool red = p->reduce_op >= 0;
    int nop = p->nin + p->nout;
    tgl_sb_printf(b, "%svoid %s(const tgl_kargs *A)\n{\n", decl, symbol);
    tgl_sb_printf(b, "    enum { NIN = %d, NOP = %d };\n", p->nin, nop);
    tgl_sb_printf(b, "    const tgl_kbuf *B[NOP];\n"
                     "    for (int j = 0; j < NOP; j++)\n"
                     "        B[j] = j < NIN ? &A->in[j] : &A->out[j - NIN];\n"
                     "    const int L = A->ndim - 1;\n"
                     "    const int64_t c0 = A->col_begin, c1 = A->col_end;\n");
    /* The unit path only when each operand's row stride is what the row
     * function assumes. */
    tgl_sb_printf(b, "    const int unit = A->unit");
    for (int j = 0; j < p->nin; j++)
        tgl_sb_printf(b, " && B[%d]->strides[L] == %d", j, tgl_cgen_invariant(p, j) ? 0 : 1);
    for (int k = red ? 1 : 0; k < p->nout; k++)
        tgl_sb_printf(b, " && B[%d]->strides[L] == 1", p->nin + k);
    tgl_sb_printf(b, ";\n    const int racc = %s;\n", red ? "B[NIN]->strides[L] == 0" : "0");
    tgl_sb_printf(b, "    (void)racc;\n"
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
                     "        if (!unit)\n            %s_row_s(", r->pfx);
    call_args(r, b, TGL_ROW_STRIDED);
    if (red) {
        tgl_sb_printf(b, ");\n        else if (racc)\n            %s_row_r(", r->pfx);
        call_args(r, b, TGL_ROW_UNIT);
    }
    tgl_sb_printf(b, ");\n        else\n            %s_row_u(", r->pfx);
    call_args(r, b, TGL_ROW_UNIT);
    tgl_sb_printf(b, ");\n"
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

/* Renders prog's row functions (named <pfx>_row_u/_r/_s, static) and its
 * kernel, `<decl>void <symbol>(const tgl_kargs *A)`, into fns, recording
 * in r what the prelude needs; several programs may share one r (one
 * source, one prelude).  r->x.st holds the first error. */
static void render_kernel(render *r, tgl_sb *fns, const tgl_fused_prog *prog, const char *pfx,
                          const char *decl, const char *symbol)
{
    r->x.p = prog;
    r->pfx = pfx;
    row(r, fns, "row_u", TGL_ROW_UNIT);
    if (prog->reduce_op >= 0)
        row_reduce(r, fns);
    row(r, fns, "row_s", TGL_ROW_STRIDED);
    kernel(r, fns, decl, symbol);
}

tgl_status tgl_cgen_render(const tgl_fused_prog *prog, const char *symbol, char **source,
                           tgl_errbuf *err)
{
    if (!prog || !symbol || !source)
        return tgl_errbuf_set(err, TGL_EINVAL, "tgl_cgen_render: NULL argument");
    render r = {.x = {.d = &host_c, .err = err, .p = prog}};
    if (prog->ndim < 0 || prog->ndim > TGL_KERNEL_MAX_DIMS || prog->nout < 1 || prog->ninstr < 1)
        return tgl_cgen_fail(&r.x, "%d axes, %d outputs, %d instructions", prog->ndim, prog->nout,
                    prog->ninstr);
    if (prog->reduce_op >= 0 && prog->reduce_op != TGL_OP_SUM && prog->reduce_op != TGL_OP_PROD &&
        prog->reduce_op != TGL_OP_MAX && prog->reduce_op != TGL_OP_MIN)
        return tgl_cgen_fail(&r.x, "reduction op %d", prog->reduce_op);
    /* Functions first: rendering them records which declarations and
     * helpers the prelude needs. */
    tgl_sb fns = {0}, out = {0};
    render_kernel(&r, &fns, prog, "tgl", "", symbol);
    tgl_sb_printf(&out, "/* tgl fused kernel: %d instructions, %d inputs, %d outputs", prog->ninstr,
                  prog->nin, prog->nout);
    if (prog->reduce_op >= 0)
        tgl_sb_printf(&out, ", %s over axes 0x%x", tgl_op_name(prog->reduce_op),
                      (unsigned)prog->reduce_mask);
    tgl_sb_printf(&out, " */\n%s\n", tgl_cgen_kernel_header);
    tgl_cgen_prelude(&r.x, &out);
    tgl_sb_cat(&out, &fns);
    tgl_sb_free(&fns);
    if (r.x.st || out.oom || !out.p) {
        tgl_sb_free(&out);
        return r.x.st ? r.x.st : tgl_errbuf_set(err, TGL_ENOMEM, "cgen: out of memory");
    }
    *source = out.p;
    return TGL_OK;
}

/* ---- digest ---------------------------------------------------------------- */

#define MIX(h, v) \
    do { int64_t v_ = (int64_t)(v); (h) = tgl_hash_bytes((h), &v_, sizeof v_); } while (0)

uint64_t tgl_cgen_digest(const tgl_fused_prog *p)
{
    uint64_t h = TGL_HASH_FNV_BASIS;
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
        h = tgl_hash_bytes(h, &c->value, sizeof c->value);
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

/* ---- whole steps --------------------------------------------------------------- */

bool tgl_cgen_step_inlinable(const tgl_fused_prog *prog, const void *launch_cache,
                             size_t *scratch_elem)
{
    tgl_kargs base;
    const tgl_kbuf *kb;
    *scratch_elem = 0;
    if (!prog || !tgl_cgen_plan_single(launch_cache, &base, &kb))
        return false;
    if (prog->reduce_op < 0)
        return true;
    int adt = tgl_cgen_acc_dtype(prog), odt = prog->reduce_type.dtype;
    if (adt == odt)
        return true; /* the kernel accumulates into output 0 itself */
    /* a float32 sum or product accumulates in double, converted at the end */
    if (adt != TGL_FLOAT64 || odt != TGL_FLOAT32)
        return false;
    *scratch_elem = sizeof(double);
    return true;
}

/* The code running one inlined kernel: its arguments built from the
 * launch cache's geometry over D, the accumulator set up as the launcher
 * does (launch.c), the kernel, the conversion of a double accumulator. */
static void step_kernel(render *r, tgl_sb *b, const tgl_step_item *it)
{
    const tgl_fused_prog *p = it->prog;
    tgl_kargs a;
    const tgl_kbuf *kb;
    if (!tgl_cgen_plan_single(it->launch_cache, &a, &kb)) {
        tgl_cgen_fail(&r->x, "whole step: instruction %d has no single-task launch plan", it->pc);
        return;
    }
    int nop = p->nin + p->nout, L = a.ndim;
    tgl_sb_printf(b, "    {\n        tgl_kbuf b[%d] = {", nop);
    for (int j = 0; j < nop; j++) {
        tgl_sb_printf(b, "%s\n            {D[%d], {", j ? "," : "", (int)it->data[j]);
        for (int d = 0; d < L; d++)
            tgl_sb_printf(b, "%s%lld", d ? ", " : "", (long long)kb[j].strides[d]);
        tgl_sb_printf(b, "}}");
    }
    tgl_sb_printf(b, "};\n        tgl_kargs a = {%d, %d, {", a.ndim, a.unit);
    for (int d = 0; d < L; d++)
        tgl_sb_printf(b, "%s%lld", d ? ", " : "", (long long)a.shape[d]);
    tgl_sb_printf(b, "}, %lld, %lld, %lld, %lld, b, b + %d};\n", (long long)a.row_begin,
                  (long long)a.row_end, (long long)a.col_begin, (long long)a.col_end, p->nin);
    if (p->reduce_op >= 0) {
        int adt = tgl_cgen_acc_dtype(p);
        const char *A = CT(adt);
        int acc = it->scratch >= 0 ? it->scratch : (int)it->data[p->nin];
        tgl_sb_printf(b, "        %s *acc = (%s *)D[%d];\n        b[%d].data = acc;\n", A, A, acc,
                      p->nin);
        tgl_sb_printf(b, "        for (int64_t q = 0; q < %lld; q++)\n            acc[q] = ",
                      (long long)it->acc_size);
        identity(r, b, p->reduce_op, adt);
        tgl_sb_printf(b, ";\n        s%d(&a);\n", it->pc);
        if (it->scratch >= 0)
            tgl_sb_printf(b, "        for (int64_t q = 0; q < %lld; q++)\n"
                             "            ((float *)D[%d])[q] = (float)acc[q];\n",
                          (long long)it->acc_size, (int)it->data[p->nin]);
    } else {
        tgl_sb_printf(b, "        s%d(&a);\n", it->pc);
    }
    tgl_sb_printf(b, "    }\n");
}

/* The body of items[0..n): the inlined kernels' functions into fns, their
 * TGLK keep marks into keep, the statements running the items into body
 * (a callback returning its nonzero status). */
static void render_items(render *r, const tgl_step_item *items, int n, tgl_sb *fns,
                         tgl_sb *body, tgl_sb *keep, int *ninline)
{
    for (int i = 0; i < n && !r->x.st; i++) {
        const tgl_step_item *it = &items[i];
        if (!it->prog) {
            tgl_sb_printf(body, "    if ((st = cb(env, %d)) != 0)\n        return st;\n", i);
            continue;
        }
        (*ninline)++;
        /* A kernel calling libm stays a function of its own (noipa), so
         * its loops vectorize exactly as in the kernel the CVM runs and the
         * vector and scalar libm calls fall on the same elements. */
        uint32_t used0 = r->x.used[0], used1 = r->x.used[1];
        char pfx[24], sym[24], decl[24];
        snprintf(pfx, sizeof pfx, "s%d", it->pc);
        snprintf(sym, sizeof sym, "s%d", it->pc);
        snprintf(decl, sizeof decl, "static TGLK%d ", it->pc);
        render_kernel(r, fns, it->prog, pfx, decl, sym);
        bool libm = r->x.used[0] != used0 || r->x.used[1] != used1 || it->prog->ninstr == 0;
        for (int k = 0; !libm && k < it->prog->ninstr; k++) {
            int op = it->prog->code[k].op;
            libm = op == TGL_OP_EXP || op == TGL_OP_LOG || op == TGL_OP_TANH ||
                   op == TGL_OP_SIGMOID || op == TGL_OP_SOFTPLUS || op == TGL_OP_LOG1P ||
                   op == TGL_OP_EXPM1 || op == TGL_OP_POW || op == TGL_OP_SIN || op == TGL_OP_COS;
        }
        tgl_sb_printf(keep, "#define TGLK%d %s\n", it->pc, libm ? "TGL_KEEP" : "");
        tgl_sb_printf(body, "    /* instruction %d: fused program %d */\n", it->pc, it->prog->id);
        if (it->prep)
            tgl_sb_printf(body, "    st = cb(env, %d);\n    if (st > 0)\n        return st;\n"
                                "    if (st == 0)\n", -1 - i);
        if (it->timed)
            tgl_sb_printf(body, "    {\n    cb(env, %d);\n", TGL_STEP_CB_START + i);
        step_kernel(r, body, it);
        if (it->timed)
            tgl_sb_printf(body, "    cb(env, %d);\n    }\n", TGL_STEP_CB_END + i);
    }
}

/* The source's head: the kernel header, the prelude, the keep marks and
 * the kernels' functions. */
static void render_head(render *r, tgl_sb *out, tgl_sb *keep, tgl_sb *fns)
{
    tgl_sb_printf(out, "%s\n", tgl_cgen_kernel_header);
    tgl_cgen_prelude(&r->x, out);
    tgl_sb_printf(out, "#if defined(__GNUC__) && !defined(__clang__)\n"
                       "#define TGL_KEEP __attribute__((noipa))\n#else\n"
                       "#define TGL_KEEP __attribute__((noinline))\n#endif\n");
    tgl_sb_cat(out, keep);
    tgl_sb_cat(out, fns);
    tgl_sb_printf(out, "typedef int (*tgl_step_cb)(void *env, int i);\n\n");
}

tgl_status tgl_cgen_render_step(const tgl_step_item *items, int n, const char *symbol,
                                char **source, tgl_errbuf *err)
{
    render r = {.x = {.d = &host_c, .err = err}};
    tgl_sb fns = {0}, body = {0}, out = {0}, keep = {0};
    int ninline = 0;
    render_items(&r, items, n, &fns, &body, &keep, &ninline);
    tgl_sb_printf(&out, "/* tgl whole step: %d instructions, %d kernels inline */\n", n, ninline);
    render_head(&r, &out, &keep, &fns);
    tgl_sb_printf(&out, "int %s(void *const *D, void *env, tgl_step_cb cb)\n{\n    int st = 0;\n"
                        "    (void)st;\n", symbol);
    tgl_sb_cat(&out, &body);
    tgl_sb_printf(&out, "    return 0;\n}\n");
    tgl_sb_free(&fns);
    tgl_sb_free(&body);
    tgl_sb_free(&keep);
    if (r.x.st || out.oom || !out.p) {
        tgl_sb_free(&out);
        return r.x.st ? r.x.st : tgl_errbuf_set(err, TGL_ENOMEM, "cgen: out of memory");
    }
    *source = out.p;
    return TGL_OK;
}

/* ---- whole loops (src/scan) -------------------------------------------------------- */

tgl_status tgl_cgen_render_loop(const tgl_loop_plan *pl, const char *symbol, char **source,
                                tgl_errbuf *err)
{
    render r = {.x = {.d = &host_c, .err = err}};
    tgl_sb fns = {0}, body = {0}, out = {0}, keep = {0};
    int ninline = 0;
    render_items(&r, pl->items, pl->nitems, &fns, &body, &keep, &ninline);
    tgl_sb_printf(&out, "/* tgl whole loop: %d instructions, %d kernels inline */\n", pl->nitems,
                  ninline);
    render_head(&r, &out, &keep, &fns);
    tgl_sb_printf(&out, "int %s(void **D, int64_t *L, void *env, tgl_step_cb cb)\n{\n"
                        "    int st = 0;\n    (void)st;\n    const int64_t T = L[0];\n"
                        "    for (int64_t step = L[1]; step < T; step++) {\n"
                        "    const int64_t t = %s;\n    L[2] = t;\n",
                  symbol, pl->reverse ? "T - 1 - step" : "step");
    /* an interrupt is looked at every 4096 steps (cb(env, -1)) */
    tgl_sb_printf(&out, "    if ((step & 4095) == 4095 && (st = cb(env, -1)) != 0)\n"
                        "        return st;\n");
    for (int i = 0; i < pl->nptr; i++) {
        const tgl_loop_ptr *p = &pl->ptr[i];
        tgl_sb_printf(&out, "    D[%d] = (char *)D[%d] + %lld", p->d, p->base, (long long)p->off);
        if (p->moves) {
            if (p->mod > 0)
                tgl_sb_printf(&out, " + (t + %lld) %% %lld * %lld", (long long)p->add,
                              (long long)p->mod, (long long)p->bytes);
            else
                tgl_sb_printf(&out, " + (t + %lld) * %lld", (long long)p->add,
                              (long long)p->bytes);
        }
        tgl_sb_printf(&out, ";\n");
    }
    tgl_sb_cat(&out, &body);
    for (int i = 0; i < pl->nstore; i++)
        tgl_sb_printf(&out, "    __builtin_memmove(D[%d], D[%d], %lld);\n", pl->store[i].dst,
                      pl->store[i].src, (long long)pl->store[i].bytes);
    tgl_sb_printf(&out, "    L[3] = step + 1;\n");
    if (pl->until_d >= 0)
        tgl_sb_printf(&out, "    if (*(const %s *)D[%d] != 0)\n        break;\n",
                      CT(pl->until_dtype), pl->until_d);
    tgl_sb_printf(&out, "    }\n    return 0;\n}\n");
    tgl_sb_free(&fns);
    tgl_sb_free(&body);
    tgl_sb_free(&keep);
    if (r.x.st || out.oom || !out.p) {
        tgl_sb_free(&out);
        return r.x.st ? r.x.st : tgl_errbuf_set(err, TGL_ENOMEM, "cgen: out of memory");
    }
    *source = out.p;
    return TGL_OK;
}
