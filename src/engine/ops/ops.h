/*
 * ops.h — the op catalog.  Every op is listed once in TGL_OPS below (the
 * X-macro: id, Lua name, family, one-line synopsis); ids, names and the
 * dispatch table all come from it.  Each family file (elemwise.c,
 * reduce.c, blas.c, shape.c, subtensor.c, nnet.c, control.c) defines one
 * implementation (tgl_opimpl) per kind of op it owns, named tgl_impl_<impl>.
 *
 * An implementation is the op's meaning, the same on every device: types,
 * shapes, views, pullback and pushforward.  Its kernels are not here:
 * each backend has its own (engine/backend.h: tgl_op_kernel, the
 * backend's op_kernel), the CPU's in src/cpu/kernels/ (one file per
 * family, the table by op id in table.c).  The compiler binds each
 * instruction's kernel on the program's backend, so an op a device has
 * no kernel for fails at compile time (views, ops with an inner program
 * and fused programs need none: fused.c launches the backend's generated
 * code, or runs its nodes' kernels).  A kernel fills its outputs
 * (allocated by the caller with the shapes from `shape`/`shape_k`:
 * contiguous, C order, contents undefined) from the inputs, which may be
 * strided views.
 *
 * An entry gives:
 *   infer  — checks the inputs' types and parameters, sets n->type.
 *   shape  — the output shape from the input arrays (runtime); the
 *            backend's kernel (tgl_op_kernel.run) then fills the output.
 *   view   — instead of shape and a kernel: returns a new array that may
 *            share the input's storage (dimshuffle, reshape, basic
 *            indexing).
 *   grad   — the pullback: given the output gradient gout (of n's type),
 *            sets gin[i] to the gradient of input i, or NULL when input i
 *            gets none (integer inputs, indices, disconnected).
 *   rop    — the pushforward (forward mode); NULL means "derive it from
 *            the pullback" (the later Rop issue).
 *
 * Multi-output ops (nouts given) produce several values: infer sets
 * n->nout and n->type (output 0's type), out_type gives every output's
 * type, and users read output k through an OUTPUT node
 * (tgl_node_output).  Instead of shape/grad they give:
 *   shape_k     — the shape of output k (the backend's kernel,
 *                 tgl_op_kernel.run_n, fills every wanted output at once);
 *   grad_n      — the pullback given every output's gradient at once
 *                 (gout[k] NULL: output k gets none).
 * A payload (graph.h) carries what such an op needs beyond params: an
 * inner program, a layout.
 *
 * An op with an inner program (scan: a loop over a body) has no kernel; it
 * gives two hooks through which the compiler and the CVM run it
 * without naming it:
 *   prepare_inner — at compile time, once per instruction: compiles the
 *                   body into *inner (kept in the instruction, tgl_instr.sub)
 *                   with the outer program's options;
 *   exec_inner    — at run time: reads in[], runs the loop on the inner
 *                   frame *sub (made on first use and kept in the outer
 *                   frame for this instruction), and writes the slots of
 *                   the instruction's outputs itself.
 * There is no free hook: the inner program is a tgl_program and the inner
 * frame a tgl_frame, so the engine frees them with the outer ones
 * (tgl_program_free, tgl_frame_free); an op keeping more state across
 * steps would add one.
 *
 * Such an op may also own a rewrite stage (stage: whole-graph passes over
 * its nodes, engine/opt/opt.h), which the rewrite driver runs in its place
 * among the built-in stages.  The catalog is how a feature registers it:
 * a const table fixed at build time, so there is no registration call and
 * no mutable registry.
 */
#ifndef TGL_OPS_H
#define TGL_OPS_H

#include "engine/graph.h"

struct tgl_program; /* engine/program.h */
struct tgl_frame;
struct tgl_instr;
struct tgl_rewrite_stage; /* engine/opt/opt.h */

/*  _(ID, "name", impl, "synopsis"): impl names the tgl_opimpl (tgl_impl_<impl>)
 *  that runs the op; ops of one family share one where the code is shared. */
#define TGL_OPS(_)                                                              \
    /* elemwise: unary */                                                       \
    _(NEG, "neg", elemwise, "y = -x")                                           \
    _(ABS, "abs", elemwise, "y = |x|")                                          \
    _(SIGN, "sign", elemwise, "y = -1, 0 or 1 by the sign of x")                \
    _(EXP, "exp", elemwise, "y = e^x")                                          \
    _(LOG, "log", elemwise, "y = ln x")                                         \
    _(LOG1P, "log1p", elemwise, "y = ln(1 + x), exact near 0")                  \
    _(EXPM1, "expm1", elemwise, "y = e^x - 1, exact near 0")                    \
    _(SQRT, "sqrt", elemwise, "y = sqrt(x)")                                    \
    _(SQR, "sqr", elemwise, "y = x * x")                                        \
    _(RECIP, "recip", elemwise, "y = 1 / x")                                    \
    _(TANH, "tanh", elemwise, "y = tanh x")                                     \
    _(SIGMOID, "sigmoid", elemwise, "y = 1 / (1 + e^-x)")                       \
    _(SOFTPLUS, "softplus", elemwise, "y = ln(1 + e^x), stable")                \
    _(RELU, "relu", elemwise, "y = max(x, 0)")                                  \
    _(SIN, "sin", elemwise, "y = sin x")                                        \
    _(COS, "cos", elemwise, "y = cos x")                                        \
    _(FLOOR, "floor", elemwise, "y = floor x")                                  \
    _(CEIL, "ceil", elemwise, "y = ceil x")                                     \
    _(ROUND, "round", elemwise, "y = x rounded half away from zero")            \
    _(NOT, "not_", elemwise, "y = not x (bool)")                                \
    _(CAST, "cast", elemwise, "y = x converted to p.i[0] (a dtype)")            \
    /* elemwise: binary */                                                      \
    _(ADD, "add", elemwise, "y = a + b")                                        \
    _(SUB, "sub", elemwise, "y = a - b")                                        \
    _(MUL, "mul", elemwise, "y = a * b")                                        \
    _(DIV, "div", elemwise, "y = a / b (true division)")                        \
    _(POW, "pow", elemwise, "y = a ^ b")                                        \
    _(MOD, "mod", elemwise, "y = a - floor(a / b) * b (Lua's %)")               \
    _(MAXIMUM, "maximum", elemwise, "y = max(a, b)")                            \
    _(MINIMUM, "minimum", elemwise, "y = min(a, b)")                            \
    _(EQ, "eq", elemwise, "y = a == b (bool)")                                  \
    _(NEQ, "neq", elemwise, "y = a ~= b (bool)")                                \
    _(LT, "lt", elemwise, "y = a < b (bool)")                                   \
    _(LE, "le", elemwise, "y = a <= b (bool)")                                  \
    _(GT, "gt", elemwise, "y = a > b (bool)")                                   \
    _(GE, "ge", elemwise, "y = a >= b (bool)")                                  \
    _(AND, "and_", elemwise, "y = a and b (bool)")                              \
    _(OR, "or_", elemwise, "y = a or b (bool)")                                 \
    /* elemwise: ternary */                                                     \
    _(SWITCH, "switch", elemwise, "y = c ? a : b, elementwise")                 \
    _(CLIP, "clip", elemwise, "y = min(max(x, lo), hi)")                        \
    /* reductions over p.i[0..n-1] (0-based axes); flags&1: keepdims */        \
    _(SUM, "sum", reduce, "y = sum of x over axes")                             \
    _(PROD, "prod", reduce, "y = product of x over axes")                       \
    _(MAX, "max", reduce, "y = max of x over axes")                             \
    _(MIN, "min", reduce, "y = min of x over axes")                             \
    _(ARGMAX, "argmax", argmax, "y = 1-based position of the max along p.i[0]") \
    _(ARGMIN, "argmin", argmax, "y = 1-based position of the min along p.i[0]") \
    _(AXES_SIZE, "axes_size", axes_size, "y = number of elements over axes (int64)") \
    /* linear algebra */                                                        \
    _(DOT, "dot", dot, "y = a . b (vector/matrix products)")                   \
    _(BATCHED_DOT, "batched_dot", batched_dot, "y[k] = a[k] . b[k]")                   \
    _(GEMM, "gemm", gemm, "y = p.f[0] a.b + p.f[1] c (matrices, BLAS)")        \
    _(GEMV, "gemv", gemv, "y = p.f[0] A.x + p.f[1] c (BLAS)")                  \
    _(GER, "ger", ger, "Y = A + p.f[0] x y' (BLAS rank-1 update)")             \
    /* shape */                                                                 \
    _(DIMSHUFFLE, "dimshuffle", dimshuffle, "y = x with axes p.i reordered (-1 adds one)") \
    _(RESHAPE, "reshape", reshape, "y = x with shape p.i (or input 2)")           \
    _(SHAPE, "shape", shape, "y = the shape of x (int64 vector)")               \
    _(CONCATENATE, "concatenate", concatenate, "y = inputs joined along axis p.i[0]") \
    _(FILL_LIKE, "fill_like", fill_like, "y = array shaped like x, all p.f[0]")     \
    _(ARANGE, "arange", arange, "y = start, start+step, ..., stop (Lua's for; p.i[0] dtype)") \
    /* indexing */                                                              \
    _(SUBTENSOR, "subtensor", subtensor, "y = x[idx] (ints and slices)")        \
    _(INC_SUBTENSOR, "inc_subtensor", inc_subtensor, "y = x; y[idx] += v (or = v)") \
    _(ADV_SUBTENSOR, "adv_subtensor", adv_subtensor, "y = x[int arrays]")           \
    _(ADV_INC_SUBTENSOR, "adv_inc_subtensor", adv_inc_subtensor, "y = x; y[int arrays] += v (or = v)") \
    /* nnet */                                                                  \
    _(SOFTMAX, "softmax", softmax, "y = exp(x) / sum(exp(x)) along p.i[0]")        \
    _(LOG_SOFTMAX, "log_softmax", log_softmax, "y = x - log(sum(exp(x))) along p.i[0]") \
    _(ONE_HOT, "one_hot", one_hot, "y[..., k] = (labels == k), k = 1..p.i[0]")     \
    _(SOFTMAX_XENT, "softmax_crossentropy", softmax_xent,                      \
      "y[i] = -log softmax(x[i])[labels[i]] (1-based labels), stable")         \
    _(SOFTMAX_XENT_DX, "softmax_crossentropy_dx", softmax_xent_dx,             \
      "dx[i] = dy[i] (softmax(x[i]) - onehot(labels[i])): the gradient above") \
    _(CLASS_XENT, "class_xent", class_xent,                                    \
      "y[t] = -log P(cls[t] | h[t]) - log P(tgt[t] | cls[t], h[t]), class-factored") \
    _(CLASS_XENT_DELTA, "class_xent_delta", class_xent_delta,                  \
      "y = class_xent's pullback pieces: class deltas (p.i[0] 0); h's word part, word rows (1)") \
    /* control */                                                               \
    _(IFELSE, "ifelse", ifelse, "y = c ? a : b, computing only the branch taken")      \
    /* loops (src/scan): the layout and the body are the payload */            \
    _(SCAN, "scan", scan, "y0, y1, ... = the outputs of a loop over the body (payload)") \
    /* multi-output nodes: one of their values */                             \
    _(OUTPUT, "output", output, "y = output p.i[0] of the multi-output node x")  \
    /* fused elementwise groups (the fuse stage builds them) */                 \
    _(FUSED, "fused", fused, "y0, y1, ... = the outputs of the fused program (payload) on the inputs") \
    /* forward mode (src/rop): a direction, checked when it runs */             \
    _(ROP_DIRECTION, "rop_direction", rop_direction,                            \
      "y = v once it has the shape of wrt (input 2); else an error naming p.i")

enum {
#define TGL_OP_ENUM(ID, name, impl, syn) TGL_OP_##ID,
    TGL_OPS(TGL_OP_ENUM)
#undef TGL_OP_ENUM
    TGL_NOPS
};

typedef enum tgl_op_family {
    TGL_FAM_ELEMWISE,
    TGL_FAM_REDUCE,
    TGL_FAM_BLAS,
    TGL_FAM_SHAPE,
    TGL_FAM_SUBTENSOR,
    TGL_FAM_NNET,
    TGL_FAM_CONTROL,
    TGL_FAM_FUSED
} tgl_op_family;

/* Parameters of SUBTENSOR and INC_SUBTENSOR: four entries per indexed
 * axis (kind, start, stop, step) for the leading p.n / 4 axes; the other
 * axes are taken whole.  Values are 0-based with Python's slice semantics
 * (stop exclusive, negative counts from the end, clipped to the axis).  A
 * bound marked _INPUT comes from the next extra input (a 0-d integer node,
 * after x, and after v for INC_SUBTENSOR), in axis order then start, stop,
 * step. */
#define TGL_IDX_INDEX 0          /* start is an index; the axis is dropped  */
#define TGL_IDX_SLICE 1          /* start:stop:step; the axis is kept       */
#define TGL_IDX_KIND_MASK 3
#define TGL_IDX_START_INPUT 4
#define TGL_IDX_STOP_INPUT 8
#define TGL_IDX_STEP_INPUT 16
#define TGL_IDX_NO_START 32      /* omitted: 0 (or the end when step < 0)   */
#define TGL_IDX_NO_STOP 64       /* omitted: the end (or before 0)          */
#define TGL_IDX_LUA 128          /* the _INPUT bounds are Lua-style: 1-based,
                                    stop inclusive, negative from the end  */
/* ADV_SUBTENSOR / ADV_INC_SUBTENSOR: p.n = x's ndim; p.i[d] = 1 when axis d
 * is indexed by the next integer-array input (indexed axes are
 * consecutive), 0 when taken whole.  Index values are 1-based (negative
 * from the end), as users write them. */
/* INC_SUBTENSOR / ADV_INC_SUBTENSOR p.flags: assign instead of add. */
#define TGL_INC_SET 1
/* Reductions' p.flags: keep the reduced axes with size 1. */
#define TGL_REDUCE_KEEPDIMS 1

/* Op flags (tgl_opimpl.flags). */
#define TGL_OPF_LAZY 1u      /* inputs 2.. are evaluated on demand (ifelse) */

typedef struct tgl_opimpl {
    int family;
    int nin_min, nin_max;   /* nin_max -1: any number */
    unsigned flags;
    tgl_status (*infer)(tgl_ctx *ctx, tgl_node *n);
    tgl_status (*shape)(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, int64_t *shape);
    tgl_status (*view)(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, tgl_array **out);
    tgl_status (*grad)(tgl_ctx *ctx, tgl_node *n, tgl_node *gout, tgl_node **gin);
    tgl_status (*rop)(tgl_ctx *ctx, tgl_node *n, tgl_node *const *tin, tgl_node **tout);
    /* The input whose buffer the output (output 0 of a multi-output op)
     * may take over when that input is not read again (in-place
     * execution), or -1; NULL means never. */
    int (*inplace)(const tgl_node *n);
    /* Multi-output ops (see above); NULL for single-output ones. */
    tgl_type (*out_type)(const tgl_node *n, int k);
    tgl_status (*shape_k)(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, int k,
                          int64_t *shape);
    tgl_status (*grad_n)(tgl_ctx *ctx, tgl_node *n, tgl_node *const *gout, tgl_node **gin);
    /* Ops with an inner program (see above); NULL for the others. */
    tgl_status (*prepare_inner)(tgl_ctx *ctx, const tgl_node *n, const struct tgl_program *outer,
                                struct tgl_program **inner);
    tgl_status (*exec_inner)(tgl_ctx *ctx, struct tgl_frame *fr, const struct tgl_instr *ins,
                             struct tgl_frame **sub, tgl_array *const *in);
    /* The op's rewrite stage (see above), or NULL. */
    const struct tgl_rewrite_stage *stage;
} tgl_opimpl;

/* The first input of n with n's exact type, or -1: elementwise ops may
 * write their output over such an input. */
int tgl_inplace_same_type(const tgl_node *n);

/* A catalog entry: the op's name and synopsis, and its implementation. */
typedef struct tgl_opdef {
    const char *name;
    const char *synopsis;
    const tgl_opimpl *impl;
} tgl_opdef;

#define TGL_IMPL_DECL(ID, name, impl, syn) extern const tgl_opimpl tgl_impl_##impl;
TGL_OPS(TGL_IMPL_DECL)
#undef TGL_IMPL_DECL

/* The entry of op id (id must be valid). */
const tgl_opdef *tgl_opdef_get(int op);
/* The implementation of op id (id must be valid). */
static inline const tgl_opimpl *tgl_op_impl(int op)
{
    return tgl_opdef_get(op)->impl;
}

/* Error helper for kernels and shape functions: a message naming the op,
 * its inputs' dtypes and shapes, and where the node was built. */
tgl_status tgl_op_error(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, tgl_status st,
                        const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;


/* The dtype elementwise node n converts input i to before computing (the
 * kernel's compute dtype; bool for switch's condition). */
int tgl_elemwise_operand_dtype(const tgl_node *n, int i);

/* Broadcast output shape of elementwise inputs (same ndim), checking that
 * non-broadcastable axes agree. */
tgl_status tgl_broadcast_shape(tgl_ctx *ctx, const tgl_node *n, int nin, tgl_array *const *in,
                               int64_t *shape);

#endif /* TGL_OPS_H */
