/*
 * kernels.h — the CPU backend's op kernels (engine/backend.h:
 * tgl_op_kernel): plain C over host memory, one file per op family in
 * this directory, each defining tgl_cpu_kernel_<impl> for the impl names
 * of the catalog (engine/ops/ops.h, TGL_OPS).  table.c indexes them by op
 * id; the backend's op_kernel is tgl_cpu_op_kernel.  They are also the
 * reference that generated (fused) kernels are checked against in DEBUG
 * mode.
 */
#ifndef TGL_CPU_KERNELS_H
#define TGL_CPU_KERNELS_H

#include "engine/backend.h"
#include "engine/ops/ops.h"

/* elemwise.c */
extern const tgl_op_kernel tgl_cpu_kernel_elemwise;
/* reduce.c */
extern const tgl_op_kernel tgl_cpu_kernel_reduce, tgl_cpu_kernel_argmax,
    tgl_cpu_kernel_axes_size;
/* blas.c, gemm.c */
extern const tgl_op_kernel tgl_cpu_kernel_dot, tgl_cpu_kernel_batched_dot, tgl_cpu_kernel_gemm,
    tgl_cpu_kernel_gemv, tgl_cpu_kernel_ger;
/* shape.c */
extern const tgl_op_kernel tgl_cpu_kernel_shape, tgl_cpu_kernel_concatenate,
    tgl_cpu_kernel_fill_like, tgl_cpu_kernel_arange;
/* subtensor.c */
extern const tgl_op_kernel tgl_cpu_kernel_inc_subtensor, tgl_cpu_kernel_adv_subtensor,
    tgl_cpu_kernel_adv_inc_subtensor;
/* nnet.c, classxent.c */
extern const tgl_op_kernel tgl_cpu_kernel_softmax, tgl_cpu_kernel_log_softmax,
    tgl_cpu_kernel_one_hot, tgl_cpu_kernel_softmax_xent, tgl_cpu_kernel_softmax_xent_dx,
    tgl_cpu_kernel_class_xent, tgl_cpu_kernel_class_xent_delta,
    tgl_cpu_kernel_class_xent_sgd;
/* conv.c */
extern const tgl_op_kernel tgl_cpu_kernel_conv2d, tgl_cpu_kernel_conv2d_grad_input,
    tgl_cpu_kernel_conv2d_grad_weight;
/* pool.c */
extern const tgl_op_kernel tgl_cpu_kernel_pool2d, tgl_cpu_kernel_pool2d_grad;
/* batch_norm.c */
extern const tgl_op_kernel tgl_cpu_kernel_batch_norm, tgl_cpu_kernel_batch_norm_stats,
    tgl_cpu_kernel_batch_norm_grad;

/* The kernel of op on the CPU, or NULL (views, inner programs, fused
 * programs): the CPU backend's op_kernel. */
const tgl_op_kernel *tgl_cpu_op_kernel(int op);

#endif /* TGL_CPU_KERNELS_H */
