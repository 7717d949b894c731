/*
 * fprog_test.h — fused programs (engine/fused_prog.h) built by hand, for
 * the C tests of the code generator and the CUDA backend: instructions,
 * inputs, constants and outputs appended to a program whose arrays the
 * caller owns (fp_*: cgen_test.h's pb builder sits on them), and `prog`,
 * a small program with a kernel symbol, the unit of the tests that render
 * CUDA (test_cgen_cuda.c, test_cuda_emu.c, test_cuda_compile.c): the
 * elementwise and cast programs they all build, and their rendering into
 * one source (cgen/render_cuda.c).  Include after cmocka.h.
 */
#ifndef TGL_FPROG_TEST_H
#define TGL_FPROG_TEST_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgen/render_cuda.h"
#include "engine/fused_prog.h"
#include "engine/ops/elemwise_def.h"

/* ---- on any program ----------------------------------------------------------- */

/* p: an empty program of ndim axes without a reduction, its arrays the
 * caller's (p itself zeroed by the caller). */
static inline void fp_bind(tgl_fused_prog *p, int ndim, tgl_type *in_type, tgl_finstr *code,
                           int32_t *out_instr, tgl_type *out_type)
{
    p->ndim = ndim;
    p->in_type = in_type;
    p->code = code;
    p->out_instr = out_instr;
    p->out_type = out_type;
    p->reduce_op = -1;
}

/* Appends instruction op (operands x, y, z; -1: none); its index. */
static inline int fp_op(tgl_fused_prog *p, int op, int dtype, int x, int y, int z)
{
    int i = p->ninstr++;
    p->code[i] = (tgl_finstr){op, dtype, {x, y, z}, 0.0};
    return i;
}

/* A new input of dtype, broadcast on the axes of bcast, and the
 * instruction reading it. */
static inline int fp_in(tgl_fused_prog *p, int dtype, uint32_t bcast)
{
    int j = p->nin++;
    p->in_type[j] = (tgl_type){dtype, p->ndim, bcast};
    return fp_op(p, TGL_FP_INPUT, dtype, j, -1, -1);
}

static inline int fp_const(tgl_fused_prog *p, int dtype, double v)
{
    int i = fp_op(p, TGL_FP_CONST, dtype, -1, -1, -1);
    p->code[i].value = v;
    return i;
}

/* Instruction instr as a new output (elementwise: ndim axes); its index. */
static inline int fp_out(tgl_fused_prog *p, int instr)
{
    int k = p->nout++;
    p->out_instr[k] = instr;
    p->out_type[k] = (tgl_type){p->code[instr].dtype, p->ndim, 0};
    return k;
}

/* ---- prog: a small program with its kernel's symbol ------------------------------ */

typedef struct prog {
    tgl_fused_prog p;
    tgl_type in_type[4];
    tgl_finstr code[32];
    int32_t out_instr[2];
    tgl_type out_type[2];
    char symbol[64];
} prog;

static inline void vprog_init(prog *b, int ndim, const char *fmt, va_list ap)
{
    memset(b, 0, sizeof *b);
    fp_bind(&b->p, ndim, b->in_type, b->code, b->out_instr, b->out_type);
    vsnprintf(b->symbol, sizeof b->symbol, fmt, ap);
}

/* b: an empty program of ndim axes whose kernel is named fmt, ... */
static inline void prog_init(prog *b, int ndim, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprog_init(b, ndim, fmt, ap);
    va_end(ap);
}

static inline int op_(prog *b, int op, int dtype, int x, int y, int z)
{
    assert_true(b->p.ninstr < (int)(sizeof b->code / sizeof b->code[0]));
    return fp_op(&b->p, op, dtype, x, y, z);
}

static inline int in_(prog *b, int dtype, uint32_t bcast)
{
    assert_true(b->p.nin < (int)(sizeof b->in_type / sizeof b->in_type[0]));
    assert_true(b->p.ninstr < (int)(sizeof b->code / sizeof b->code[0]));
    return fp_in(&b->p, dtype, bcast);
}

static inline int const_(prog *b, int dtype, double v)
{
    assert_true(b->p.ninstr < (int)(sizeof b->code / sizeof b->code[0]));
    return fp_const(&b->p, dtype, v);
}

static inline void out_(prog *b, int instr)
{
    assert_true(b->p.nout < (int)(sizeof b->out_instr / sizeof b->out_instr[0]));
    fp_out(&b->p, instr);
}

/* b = k_<op>_<dtype>: elementwise op (not a cast) computing in dt, on 2-d
 * operands: the first contiguous, the second broadcast along axis 0, the
 * third on both axes (both paths of a kernel); switch's condition bool. */
static inline void prog_elemwise(prog *b, int op, int dt)
{
    const tgl_elemwise_def *d = tgl_elemwise_get(op);
    prog_init(b, 2, "k_%s_%s", tgl_op_name(op), tgl_dtype_name(dt));
    bool sel = d->kind == TGL_EW_SELECT;
    int v[3];
    for (int a = 0; a < d->arity; a++)
        v[a] = in_(b, sel && a == 0 ? TGL_BOOL : dt, a == 0 ? 0u : a == 1 ? 1u : 3u);
    int rdt = d->kind == TGL_EW_CMP || d->kind == TGL_EW_LOGIC ? TGL_BOOL : dt;
    out_(b, op_(b, op, rdt, v[0], d->arity > 1 ? v[1] : -1, d->arity > 2 ? v[2] : -1));
}

/* Whether op is an elementwise op other than cast that computes in dt:
 * one prog_elemwise makes. */
static inline bool prog_elemwise_computes(int op, int dt)
{
    const tgl_elemwise_def *d = tgl_elemwise_get(op);
    return d && d->kind != TGL_EW_CAST && tgl_elemwise_computes(d->kind, dt);
}

/* b = k_cast_<from>_<to>: a cast on 1-d operands. */
static inline void prog_cast(prog *b, int from, int to)
{
    prog_init(b, 1, "k_cast_%s_%s", tgl_dtype_name(from), tgl_dtype_name(to));
    out_(b, op_(b, TGL_OP_CAST, to, in_(b, from, 0), -1, -1));
}

/* ps[lo..hi) rendered as one CUDA source (malloc'd), program i with id i;
 * fails the test on an error. */
static inline char *prog_render(prog *ps, int lo, int hi)
{
    int n = hi - lo;
    const tgl_fused_prog **p = malloc(sizeof *p * (size_t)(n > 0 ? n : 1));
    const char **syms = malloc(sizeof *syms * (size_t)(n > 0 ? n : 1));
    assert_non_null(p);
    assert_non_null(syms);
    for (int i = lo; i < hi; i++) {
        ps[i].p.id = i;
        p[i - lo] = &ps[i].p;
        syms[i - lo] = ps[i].symbol;
    }
    tgl_errbuf err = {{0}};
    char *src = NULL;
    tgl_status st = tgl_cgen_render_cuda(p, syms, n, &src, &err);
    free(p);
    free(syms);
    if (st)
        fail_msg("rendering %d CUDA kernels: %s", n, err.msg);
    return src;
}

#endif /* TGL_FPROG_TEST_H */
