/*
 * ops.h — the op catalog.  Every op is listed once in TGL_OPS below (the
 * X-macro: id, Lua name, implementation, shape rule, Rop rule, one-line
 * synopsis); ids, names, the dispatch table and the op properties all come
 * from it.  Each family file (elemwise.c, reduce.c, blas.c, gemm.c, shape.c,
 * subtensor.c, nnet.c, classxent.c, conv.c, pool.c, batch_norm.c, control.c, fused.c) defines one
 * implementation (tgl_opimpl) per kind of op it owns, named tgl_impl_<impl>
 * (features define theirs: scan in src/scan, rop_direction in src/rop,
 * the collectives in src/dist).
 *
 * The two property columns are what the rest of the engine and the
 * features may ask about an op without naming it; every line must state
 * both (the macro's arity and the token pasting make a missing or unknown
 * entry a compile error), so a new op cannot silently fall out of the
 * shape cache or get a wrong forward-mode rule:
 *   shape — what the op's output shapes follow from, and whether its value
 *           is a size computed from shapes (TGL_SHAPE_RULE_* below): the
 *           shape cache and the whole-step plan's fixed binding (plan.c,
 *           step.c) take it from here;
 *   rop   — how forward mode (src/rop) pushes a tangent through it
 *           (TGL_ROP_RULE_* below): the op's own hook, diagonal, linear in
 *           which inputs, bilinear, a closed form the Rop feature keeps,
 *           the transposed pullback, or none (an OUTPUT: pushed with its
 *           multi-output node).
 * The other properties are the implementation's: elementwise (family
 * TGL_FAM_ELEMWISE, the ops the fuse stage renders: elemwise.c asserts
 * that they are exactly TGL_ELEMWISE_OPS), in place (inplace), view
 * (view), lazy inputs (TGL_OPF_LAZY).  tgl_op_property (tgl.h) names them
 * all for the specs, which walk the catalog.
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
 *   rop    — the pushforward (forward mode), for an op whose Rop rule is
 *            OWN; the other rules need none (src/rop/rop.c).
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

/* How an op's output shapes follow (tgl_opdef.shape_from) and when its
 * value is a size (tgl_opdef.size_from), for the shape cache (plan.c): an
 * instruction's shapes are cached when they follow from the call's input
 * and shared shapes alone, through values that are themselves sizes where
 * the op reads values (a mean's divisor, a reshape to a computed shape). */
typedef enum tgl_shape_from {
    TGL_SHAPE_FROM_RUN,           /* known only by running it (a value picks it) */
    TGL_SHAPE_FROM_SHAPES,        /* the inputs' shapes (and the parameters)     */
    TGL_SHAPE_FROM_SHAPE0,        /* input 0's shape                             */
    TGL_SHAPE_FROM_RANKS,         /* the parameters and the inputs' ranks        */
    TGL_SHAPE_FROM_VALUES,        /* every input's value                         */
    TGL_SHAPE_FROM_SHAPE0_VALUES  /* input 0's shape, the other inputs' values   */
} tgl_shape_from;
typedef enum tgl_size_from {
    TGL_SIZE_NONE,                /* never a size                                */
    TGL_SIZE_VALUES,              /* a size when every input is one              */
    TGL_SIZE_VALUE0,              /* a size when input 0 is one                  */
    TGL_SIZE_SHAPES,              /* computed from the inputs' shapes            */
    TGL_SIZE_SHAPE0               /* computed from input 0's shape               */
} tgl_size_from;
/* The shape column's words: each one a (shape_from, size_from) pair. */
#define TGL_SHAPE_RULE_SHAPES TGL_SHAPE_FROM_SHAPES, TGL_SIZE_NONE
#define TGL_SHAPE_RULE_MAP TGL_SHAPE_FROM_SHAPES, TGL_SIZE_VALUES /* elementwise, dimshuffle */
#define TGL_SHAPE_RULE_PASS0 TGL_SHAPE_FROM_SHAPES, TGL_SIZE_VALUE0
#define TGL_SHAPE_RULE_META TGL_SHAPE_FROM_RANKS, TGL_SIZE_SHAPES /* shape, axes_size */
#define TGL_SHAPE_RULE_LIKE0 TGL_SHAPE_FROM_SHAPE0, TGL_SIZE_NONE
#define TGL_SHAPE_RULE_FILL0 TGL_SHAPE_FROM_SHAPE0, TGL_SIZE_SHAPE0
#define TGL_SHAPE_RULE_VALUES TGL_SHAPE_FROM_VALUES, TGL_SIZE_VALUES
#define TGL_SHAPE_RULE_INDEXED TGL_SHAPE_FROM_SHAPE0_VALUES, TGL_SIZE_VALUES
#define TGL_SHAPE_RULE_RUN TGL_SHAPE_FROM_RUN, TGL_SIZE_NONE

/* How forward mode pushes a tangent through an op (tgl_opdef.rop), and
 * for LINEAR and BILINEAR which inputs carry data (tgl_opdef.rop_in: bit
 * i for input i, bit 31 for inputs 31 and up; the others are indices,
 * shapes, conditions, passed unchanged). */
typedef enum tgl_push_kind {
    TGL_ROP_KIND_NONE,      /* never pushed on its own (an OUTPUT: with its node) */
    TGL_ROP_KIND_OWN,       /* the implementation's rop hook                      */
    TGL_ROP_KIND_DIAGONAL,  /* symmetric Jacobian: the pullback of each tangent   */
    TGL_ROP_KIND_LINEAR,    /* the op applied to the tangents of rop_in           */
    TGL_ROP_KIND_BILINEAR,  /* product rule in its two inputs: f(ta, b) + f(a, tb) */
    TGL_ROP_KIND_FORMULA,   /* a closed form the Rop feature keeps (rop.c)        */
    TGL_ROP_KIND_PULLBACK   /* the transposed pullback (any op with a pullback)   */
} tgl_push_kind;
#define TGL_ROP_IN_BIT(i) (1u << ((i) < 31 ? (i) : 31))
#define TGL_ROP_IN0 1u             /* input 0                          */
#define TGL_ROP_IN0_1 3u           /* inputs 0 and 1                   */
#define TGL_ROP_ALL 0xffffffffu    /* every input                      */
#define TGL_ROP_ALL_BUT0 0xfffffffeu /* every input but 0 (a condition) */
/* The Rop column's words: each one a (kind, inputs) pair. */
#define TGL_ROP_RULE_NONE TGL_ROP_KIND_NONE, 0u
#define TGL_ROP_RULE_OWN TGL_ROP_KIND_OWN, 0u
#define TGL_ROP_RULE_DIAGONAL TGL_ROP_KIND_DIAGONAL, TGL_ROP_ALL
#define TGL_ROP_RULE_LINEAR(in) TGL_ROP_KIND_LINEAR, TGL_ROP_##in
#define TGL_ROP_RULE_BILINEAR TGL_ROP_KIND_BILINEAR, TGL_ROP_IN0_1
#define TGL_ROP_RULE_FORMULA TGL_ROP_KIND_FORMULA, 0u
#define TGL_ROP_RULE_PULLBACK TGL_ROP_KIND_PULLBACK, TGL_ROP_ALL

/*  _(ID, "name", impl, shape, rop, "synopsis"): impl names the tgl_opimpl
 *  (tgl_impl_<impl>) that runs the op (ops of one family share one where
 *  the code is shared); shape is a TGL_SHAPE_RULE_ word, rop a
 *  TGL_ROP_RULE_ word (above). */
#define TGL_OPS(_)                                                                                  \
    /* elemwise: unary */                                                                           \
    _(NEG, "neg", elemwise, MAP, DIAGONAL, "y = -x")                                                \
    _(ABS, "abs", elemwise, MAP, DIAGONAL, "y = |x|")                                               \
    _(SIGN, "sign", elemwise, MAP, DIAGONAL, "y = -1, 0 or 1 by the sign of x")                     \
    _(EXP, "exp", elemwise, MAP, DIAGONAL, "y = e^x")                                               \
    _(LOG, "log", elemwise, MAP, DIAGONAL, "y = ln x")                                              \
    _(LOG1P, "log1p", elemwise, MAP, DIAGONAL, "y = ln(1 + x), exact near 0")                       \
    _(EXPM1, "expm1", elemwise, MAP, DIAGONAL, "y = e^x - 1, exact near 0")                         \
    _(SQRT, "sqrt", elemwise, MAP, DIAGONAL, "y = sqrt(x)")                                         \
    _(SQR, "sqr", elemwise, MAP, DIAGONAL, "y = x * x")                                             \
    _(RECIP, "recip", elemwise, MAP, DIAGONAL, "y = 1 / x")                                         \
    _(TANH, "tanh", elemwise, MAP, DIAGONAL, "y = tanh x")                                          \
    _(SIGMOID, "sigmoid", elemwise, MAP, DIAGONAL, "y = 1 / (1 + e^-x)")                            \
    _(SOFTPLUS, "softplus", elemwise, MAP, DIAGONAL, "y = ln(1 + e^x), stable")                     \
    _(RELU, "relu", elemwise, MAP, DIAGONAL, "y = max(x, 0)")                                       \
    _(SIN, "sin", elemwise, MAP, DIAGONAL, "y = sin x")                                             \
    _(COS, "cos", elemwise, MAP, DIAGONAL, "y = cos x")                                             \
    _(FLOOR, "floor", elemwise, MAP, DIAGONAL, "y = floor x")                                       \
    _(CEIL, "ceil", elemwise, MAP, DIAGONAL, "y = ceil x")                                          \
    _(ROUND, "round", elemwise, MAP, DIAGONAL, "y = x rounded half away from zero")                 \
    _(NOT, "not_", elemwise, MAP, DIAGONAL, "y = not x (bool)")                                     \
    _(CAST, "cast", elemwise, MAP, DIAGONAL, "y = x converted to p.i[0] (a dtype)")                 \
    /* elemwise: binary */                                                                          \
    _(ADD, "add", elemwise, MAP, DIAGONAL, "y = a + b")                                             \
    _(SUB, "sub", elemwise, MAP, DIAGONAL, "y = a - b")                                             \
    _(MUL, "mul", elemwise, MAP, DIAGONAL, "y = a * b")                                             \
    _(DIV, "div", elemwise, MAP, DIAGONAL, "y = a / b (true division)")                             \
    _(POW, "pow", elemwise, MAP, DIAGONAL, "y = a ^ b")                                             \
    _(MOD, "mod", elemwise, MAP, DIAGONAL, "y = a - floor(a / b) * b (Lua's %)")                    \
    _(MAXIMUM, "maximum", elemwise, MAP, DIAGONAL, "y = max(a, b)")                                 \
    _(MINIMUM, "minimum", elemwise, MAP, DIAGONAL, "y = min(a, b)")                                 \
    _(EQ, "eq", elemwise, MAP, DIAGONAL, "y = a == b (bool)")                                       \
    _(NEQ, "neq", elemwise, MAP, DIAGONAL, "y = a ~= b (bool)")                                     \
    _(LT, "lt", elemwise, MAP, DIAGONAL, "y = a < b (bool)")                                        \
    _(LE, "le", elemwise, MAP, DIAGONAL, "y = a <= b (bool)")                                       \
    _(GT, "gt", elemwise, MAP, DIAGONAL, "y = a > b (bool)")                                        \
    _(GE, "ge", elemwise, MAP, DIAGONAL, "y = a >= b (bool)")                                       \
    _(AND, "and_", elemwise, MAP, DIAGONAL, "y = a and b (bool)")                                   \
    _(OR, "or_", elemwise, MAP, DIAGONAL, "y = a or b (bool)")                                      \
    /* elemwise: ternary */                                                                         \
    _(SWITCH, "switch", elemwise, MAP, DIAGONAL, "y = c ? a : b, elementwise")                      \
    _(CLIP, "clip", elemwise, MAP, DIAGONAL, "y = min(max(x, lo), hi)")                             \
    /* reductions over p.i[0..n-1] (0-based axes); flags&1: keepdims */                             \
    _(SUM, "sum", reduce, SHAPES, LINEAR(IN0), "y = sum of x over axes")                            \
    _(PROD, "prod", reduce, SHAPES, PULLBACK, "y = product of x over axes")                         \
    _(MAX, "max", reduce, SHAPES, PULLBACK, "y = max of x over axes")                               \
    _(MIN, "min", reduce, SHAPES, PULLBACK, "y = min of x over axes")                               \
    _(ARGMAX, "argmax", argmax, SHAPES, PULLBACK, "y = 1-based position of the max along p.i[0]")   \
    _(ARGMIN, "argmin", argmax, SHAPES, PULLBACK, "y = 1-based position of the min along p.i[0]")   \
    _(AXES_SIZE, "axes_size", axes_size, META, PULLBACK, "y = number of elements over axes (int64)") \
    /* linear algebra */                                                                            \
    _(DOT, "dot", dot, SHAPES, BILINEAR, "y = a . b (vector/matrix products)")                      \
    _(BATCHED_DOT, "batched_dot", batched_dot, SHAPES, BILINEAR, "y[k] = a[k] . b[k]")              \
    _(GEMM, "gemm", gemm, SHAPES, FORMULA, "y = p.f[0] a.b + p.f[1] c (matrices, BLAS)")            \
    _(GEMV, "gemv", gemv, SHAPES, FORMULA, "y = p.f[0] A.x + p.f[1] c (BLAS)")                      \
    _(GER, "ger", ger, SHAPES, FORMULA, "Y = A + p.f[0] x y' (BLAS rank-1 update)")                 \
    /* shape */                                                                                     \
    _(DIMSHUFFLE, "dimshuffle", dimshuffle, MAP, LINEAR(IN0), "y = x with axes p.i reordered (-1 adds one)") \
    _(RESHAPE, "reshape", reshape, INDEXED, LINEAR(IN0), "y = x with shape p.i (or input 2)")       \
    _(SHAPE, "shape", shape, META, PULLBACK, "y = the shape of x (int64 vector)")                   \
    _(CONCATENATE, "concatenate", concatenate, SHAPES, LINEAR(ALL), "y = inputs joined along axis p.i[0]") \
    _(FILL_LIKE, "fill_like", fill_like, FILL0, PULLBACK, "y = array shaped like x, all p.f[0]")    \
    _(ARANGE, "arange", arange, VALUES, PULLBACK, "y = start, start+step, ..., stop (Lua's for; p.i[0] dtype)") \
    /* indexing */                                                                                  \
    _(SUBTENSOR, "subtensor", subtensor, INDEXED, LINEAR(IN0), "y = x[idx] (ints and slices)")      \
    _(INC_SUBTENSOR, "inc_subtensor", inc_subtensor, LIKE0, LINEAR(IN0_1), "y = x; y[idx] += v (or = v)") \
    _(ADV_SUBTENSOR, "adv_subtensor", adv_subtensor, SHAPES, LINEAR(IN0), "y = x[int arrays]")      \
    _(ADV_INC_SUBTENSOR, "adv_inc_subtensor", adv_inc_subtensor, LIKE0, LINEAR(IN0_1), "y = x; y[int arrays] += v (or = v)") \
    /* nnet */                                                                                      \
    _(SOFTMAX, "softmax", softmax, SHAPES, DIAGONAL, "y = exp(x) / sum(exp(x)) along p.i[0]")       \
    _(LOG_SOFTMAX, "log_softmax", log_softmax, SHAPES, FORMULA, "y = x - log(sum(exp(x))) along p.i[0]") \
    _(ONE_HOT, "one_hot", one_hot, SHAPES, PULLBACK, "y[..., k] = (labels == k), k = 1..p.i[0]")    \
    _(SOFTMAX_XENT, "softmax_crossentropy", softmax_xent, SHAPES, PULLBACK,                         \
      "y[i] = -log softmax(x[i])[labels[i]] (1-based labels), stable")                              \
    _(SOFTMAX_XENT_DX, "softmax_crossentropy_dx", softmax_xent_dx, SHAPES, PULLBACK,                \
      "dx[i] = dy[i] (softmax(x[i]) - onehot(labels[i])): the gradient above")                      \
    _(CLASS_XENT, "class_xent", class_xent, SHAPES, PULLBACK,                                       \
      "y[t] = -log P(cls[t] | h[t]) - log P(tgt[t] | cls[t], h[t]), class-factored")                \
    _(CLASS_XENT_DELTA, "class_xent_delta", class_xent_delta, SHAPES, PULLBACK,                     \
      "y = class_xent's pullback pieces: class deltas (p.i[0] 0); h's word part, word rows (1)")    \
    _(CLASS_XENT_SGD, "class_xent_sgd", class_xent_sgd, SHAPES, PULLBACK,                           \
      "y = RNNLM's per-word output step: hidden errors and losses, changes of Wc and Ww's rows")  \
    _(CONV2D, "conv2d", conv2d, SHAPES, BILINEAR,                                                   \
      "y = x (N,C,H,W) cross-correlated with w (O,C/groups,kH,kW); p.i: stride, padding, dilation, groups") \
    _(CONV2D_GRAD_INPUT, "conv2d_grad_input", conv2d_grad_input, SHAPES, BILINEAR,                  \
      "y = conv2d's pullback to x: g transposed-convolved by w, shaped like x (input 2)")            \
    _(CONV2D_GRAD_WEIGHT, "conv2d_grad_weight", conv2d_grad_weight, SHAPES, BILINEAR,               \
      "y = conv2d's pullback to w: x correlated with g, shaped like w (input 2)")                   \
    /* pooling (pool.c): p.i = {kH, kW, dH, dW, padH, padW}, p.flags TGL_POOL_* */                  \
    _(MAX_POOL2D, "max_pool2d", pool2d, SHAPES, PULLBACK, "y = max over each kH x kW window of x (NCHW or CHW)") \
    _(AVG_POOL2D, "avg_pool2d", pool2d, SHAPES, LINEAR(IN0), "y = mean over each kH x kW window of x (NCHW or CHW)") \
    _(MAX_POOL2D_GRAD, "max_pool2d_grad", pool2d_grad, SHAPES, LINEAR(ALL_BUT0),                    \
      "dx = g(x, gout) routed to each window's argmax of x: max_pool2d's pullback")                 \
    _(AVG_POOL2D_GRAD, "avg_pool2d_grad", pool2d_grad, SHAPES, LINEAR(ALL_BUT0),                    \
      "dx = gout / count spread over each window (x read for its shape): avg_pool2d's pullback")    \
    _(MAX_POOL2D_GATHER, "max_pool2d_gather", pool2d_grad, SHAPES, LINEAR(ALL_BUT0),                \
      "y = h (x's shape) at each window's argmax of x: max_pool2d's tangent")                       \
    /* batch normalisation (batch_norm.c): channels on axis 1; batch_norm's p.f[0] = eps */        \
    _(BATCH_NORM, "batch_norm", batch_norm, SHAPES, PULLBACK,                                       \
      "y = (x - mean) / sqrt(var + eps) * w + b, the (C) vectors along axis 1 (w, b optional)")     \
    _(BATCH_NORM_STATS, "batch_norm_stats", batch_norm_stats, SHAPES, PULLBACK,                     \
      "mean, var = x's mean and biased variance over every axis but 1 (two (C) outputs)")           \
    _(BATCH_NORM_GRAD, "batch_norm_grad", batch_norm_grad, SHAPES, PULLBACK,                        \
      "dx, Sg, Sgx = batch_norm's training-form pullback: dx through the batch statistics, sums")   \
    /* control */                                                                                   \
    _(IFELSE, "ifelse", ifelse, RUN, LINEAR(ALL_BUT0), "y = c ? a : b, computing only the branch taken") \
    /* loops (src/scan): the layout and the body are the payload */                                 \
    _(SCAN, "scan", scan, RUN, OWN, "y0, y1, ... = the outputs of a loop over the body (payload)")  \
    /* multi-output nodes: one of their values */                                                   \
    _(OUTPUT, "output", output, RUN, NONE, "y = output p.i[0] of the multi-output node x")          \
    /* fused elementwise groups (the fuse stage builds them) */                                     \
    _(FUSED, "fused", fused, MAP, PULLBACK, "y0, y1, ... = the outputs of the fused program (payload) on the inputs") \
    /* forward mode (src/rop): a direction, checked when it runs */                                 \
    _(ROP_DIRECTION, "rop_direction", rop_direction, PASS0, OWN,                                    \
      "y = v once it has the shape of wrt (input 2); else an error naming p.i")                     \
    /* collectives between processes (src/dist): p.i[0] a tgl_dist_op */                           \
    _(ALLREDUCE, "allreduce", allreduce, LIKE0, LINEAR(IN0),                                        \
      "y = x reduced over every process (sum, mean, max, min, prod: p.i[0])")                       \
    _(ALLREDUCE_START, "allreduce_start", allreduce_start, SHAPES, NONE,                            \
      "y = the inputs packed into one bucket, whose reduction starts now (p.i: op, bucket, buckets)") \
    _(ALLREDUCE_WAIT, "allreduce_wait", allreduce_wait, SHAPES, NONE,                               \
      "y0, y1, ... = bucket p.i[2]'s reduction (it waits), unpacked like inputs buckets..")

enum {
#define TGL_OP_ENUM(ID, ...) TGL_OP_##ID,
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
    TGL_FAM_FUSED,
    TGL_FAM_COMM
} tgl_op_family;

/* The op parameters' flags (TGL_IDX_*, TGL_INC_SET, TGL_REDUCE_KEEPDIMS)
 * are public, in tgl.h next to tgl_params: C callers of tgl_apply and the
 * Lua layer build parameters with them. */

/* Op flags (tgl_opimpl.flags). */
#define TGL_OPF_LAZY 1u      /* inputs 2.. are evaluated on demand (ifelse) */
#define TGL_OPF_EFFECT 2u    /* acts outside the process (a collective): never
                                folded into a constant at compile time */

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

/* A catalog entry: the op's name and synopsis, its implementation, and
 * its properties (the shape and Rop columns of its TGL_OPS line, and those
 * words as written, for tgl_op_property). */
typedef struct tgl_opdef {
    const char *name;
    const char *synopsis;
    const tgl_opimpl *impl;
    tgl_shape_from shape_from;
    tgl_size_from size_from;
    tgl_push_kind rop;
    uint32_t rop_in;        /* LINEAR, BILINEAR: the inputs carrying data */
    const char *shape_word; /* the words as written: "MAP", "LINEAR(IN0)" */
    const char *rop_word;
} tgl_opdef;

#define TGL_IMPL_DECL(ID, name, impl, ...) extern const tgl_opimpl tgl_impl_##impl;
TGL_OPS(TGL_IMPL_DECL)
#undef TGL_IMPL_DECL

/* The entry of op id (id must be valid). */
const tgl_opdef *tgl_opdef_get(int op);
/* The implementation of op id (id must be valid). */
static inline const tgl_opimpl *tgl_op_impl(int op)
{
    return tgl_opdef_get(op)->impl;
}
/* Whether input i of op carries data in its Rop rule (LINEAR, BILINEAR). */
static inline bool tgl_op_rop_input(int op, int i)
{
    return (tgl_opdef_get(op)->rop_in & TGL_ROP_IN_BIT(i)) != 0;
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

/* A shape function (tgl_opimpl.shape) for an op whose output has its
 * first input's shape. */
tgl_status tgl_shape_of_first(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              int64_t *shape);

/* Broadcast output shape of elementwise inputs (same ndim), checking that
 * non-broadcastable axes agree. */
tgl_status tgl_broadcast_shape(tgl_ctx *ctx, const tgl_node *n, int nin, tgl_array *const *in,
                               int64_t *shape);

#endif /* TGL_OPS_H */
