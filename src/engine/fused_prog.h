/*
 * fused_prog.h — fused programs: what a group of elementwise ops (optionally
 * feeding one reduction) computes, as a small scalar instruction list.
 * The fusion pass (opt/fuse.c) builds them, interns them in the context
 * as the payload of a FUSED node (graph.h), a backend (engine/backend.h;
 * on the CPU, src/cgen) compiles them, and ops/fused.c runs them: the
 * backend's kernel when there is one, the original nodes' reference
 * kernels otherwise (and in DEBUG mode, both, compared).
 */
#ifndef TGL_FPROG_H
#define TGL_FPROG_H

#include "engine/graph.h"

#define TGL_FP_INPUT (-1) /* load operand arg[0] (an input index)             */
#define TGL_FP_CONST (-2) /* the constant `value`                             */

/* One scalar instruction: an elementwise op id (TGL_OP_*, including CAST,
 * SWITCH and CLIP), TGL_FP_INPUT or TGL_FP_CONST.  Operands are earlier
 * instructions; every instruction's result has dtype `dtype` (an op's
 * operands have been converted to the op's compute dtype by explicit CAST
 * instructions, so a renderer never has to promote). */
typedef struct tgl_finstr {
    int32_t op;
    int32_t dtype;
    int32_t arg[3];
    double value;
} tgl_finstr;

struct tgl_kernel_ref; /* engine/backend.h: a backend's compiled kernel */

typedef struct tgl_fused_prog {
    tgl_payload base;          /* first: a FUSED node's payload is a program */
    int32_t id;                /* = base.id, for printouts                   */
    int32_t ndim;              /* axes of the elementwise space             */
    int32_t nin;
    tgl_type *in_type;         /* ndim each; bcast: stride 0 on that axis   */
    int32_t ninstr;
    tgl_finstr *code;
    int32_t nout;
    int32_t *out_instr;        /* the instruction each output stores        */
    tgl_type *out_type;        /* elementwise outputs: ndim axes            */
    /* A reduction of output 0 over axes (mask over the space), or -1. */
    int32_t reduce_op;         /* TGL_OP_SUM, TGL_OP_PROD, TGL_OP_MAX, TGL_OP_MIN */
    uint32_t reduce_mask;
    int32_t reduce_keepdims;
    tgl_type reduce_type;      /* the reduced output's type                 */
    /* The original nodes, for the reference path: the group in order, the
     * nodes standing for the inputs, and the nodes of the outputs. */
    int32_t norig;
    tgl_node **orig;
    tgl_node **orig_in;
    tgl_node **orig_out;
    /* Per device (a program compiled for the cpu and one for another device
     * may share the node): the compiled kernel, or NULL
     * (tgl_backend_prepare/release), and how many compiled programs'
     * instructions use it: the last one to go releases it
     * (tgl_backend_unuse), so a kernel's code lives as long as a function
     * runs it, not as long as the graph keeps the node. */
    struct tgl_kernel_ref *kernel[TGL_NDEVICES];
    int32_t kernel_users[TGL_NDEVICES];
} tgl_fused_prog;

/* Interns prog in the context (taking ownership of it and its arrays) and
 * returns the interned program: an equal one already there, or prog. */
tgl_status tgl_fused_prog_intern(tgl_ctx *ctx, tgl_fused_prog *prog, tgl_fused_prog **out);
/* The program of a FUSED node. */
static inline tgl_fused_prog *tgl_fused_prog_of(const tgl_node *n)
{
    return (tgl_fused_prog *)n->payload;
}
/* Runs a FUSED node (it has no backend op kernel: this is its run, for
 * the CVM and the whole step): the backend's generated code when it has
 * some, else the reference path over its nodes' op kernels; cache is the
 * caller's launch cache for it (a frame keeps one per instruction:
 * backend.h's launch). */
tgl_status tgl_fused_kernel_cached(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                   tgl_array *const *out, bool debug, void **cache);
/* Whether output 0 of a FUSED node may overwrite input i: an elementwise
 * program (element j of the output depends only on element j of the
 * inputs) and an input of the output's type.  The op's inplace hook names
 * the first such input; a deferred update (plan.c) wants the variable's. */
static inline bool tgl_fused_may_overwrite(const tgl_node *n, int i)
{
    return tgl_fused_prog_of(n)->reduce_op < 0 && n->type.ndim > 0 && i >= 0 && i < n->nin &&
           tgl_type_eq(n->in[i]->type, n->type);
}
/* The type of output k of a program (output 0 is the reduction's, if any). */
static inline tgl_type tgl_fused_prog_out_type(const tgl_fused_prog *p, int k)
{
    return k == 0 && p->reduce_op >= 0 ? p->reduce_type : p->out_type[k];
}

#endif /* TGL_FPROG_H */
