/*
 * table.c — the CPU backend's op kernels by op id: for each implementation
 * name of the catalog (engine/ops/ops.h, TGL_OPS), its kernel here or
 * NULL with the reason.  Every impl of the catalog must be named below: a
 * new one that is not fails to build here (an undeclared CPU_KERNEL_
 * name), so an op cannot be added and its CPU kernel forgotten silently.
 */
#include "cpu/kernels/kernels.h"
#include "dist/dist.h"

#define CPU_KERNEL_elemwise &tgl_cpu_kernel_elemwise
#define CPU_KERNEL_reduce &tgl_cpu_kernel_reduce
#define CPU_KERNEL_argmax &tgl_cpu_kernel_argmax
#define CPU_KERNEL_axes_size &tgl_cpu_kernel_axes_size
#define CPU_KERNEL_dot &tgl_cpu_kernel_dot
#define CPU_KERNEL_batched_dot &tgl_cpu_kernel_batched_dot
#define CPU_KERNEL_gemm &tgl_cpu_kernel_gemm
#define CPU_KERNEL_gemv &tgl_cpu_kernel_gemv
#define CPU_KERNEL_ger &tgl_cpu_kernel_ger
#define CPU_KERNEL_dimshuffle NULL /* a view */
#define CPU_KERNEL_reshape NULL    /* a view */
#define CPU_KERNEL_shape &tgl_cpu_kernel_shape
#define CPU_KERNEL_concatenate &tgl_cpu_kernel_concatenate
#define CPU_KERNEL_fill_like &tgl_cpu_kernel_fill_like
#define CPU_KERNEL_arange &tgl_cpu_kernel_arange
#define CPU_KERNEL_subtensor NULL  /* a view */
#define CPU_KERNEL_inc_subtensor &tgl_cpu_kernel_inc_subtensor
#define CPU_KERNEL_adv_subtensor &tgl_cpu_kernel_adv_subtensor
#define CPU_KERNEL_adv_inc_subtensor &tgl_cpu_kernel_adv_inc_subtensor
#define CPU_KERNEL_softmax &tgl_cpu_kernel_softmax
#define CPU_KERNEL_log_softmax &tgl_cpu_kernel_log_softmax
#define CPU_KERNEL_one_hot &tgl_cpu_kernel_one_hot
#define CPU_KERNEL_softmax_xent &tgl_cpu_kernel_softmax_xent
#define CPU_KERNEL_softmax_xent_dx &tgl_cpu_kernel_softmax_xent_dx
#define CPU_KERNEL_class_xent &tgl_cpu_kernel_class_xent
#define CPU_KERNEL_class_xent_delta &tgl_cpu_kernel_class_xent_delta
#define CPU_KERNEL_class_xent_sgd &tgl_cpu_kernel_class_xent_sgd
#define CPU_KERNEL_conv2d &tgl_cpu_kernel_conv2d
#define CPU_KERNEL_conv2d_grad_input &tgl_cpu_kernel_conv2d_grad_input
#define CPU_KERNEL_conv2d_grad_weight &tgl_cpu_kernel_conv2d_grad_weight
#define CPU_KERNEL_pool2d &tgl_cpu_kernel_pool2d
#define CPU_KERNEL_pool2d_grad &tgl_cpu_kernel_pool2d_grad
#define CPU_KERNEL_batch_norm &tgl_cpu_kernel_batch_norm
#define CPU_KERNEL_batch_norm_stats &tgl_cpu_kernel_batch_norm_stats
#define CPU_KERNEL_batch_norm_grad &tgl_cpu_kernel_batch_norm_grad
#define CPU_KERNEL_ifelse NULL        /* a view (compiled to jumps) */
#define CPU_KERNEL_scan NULL          /* an inner program (exec_inner) */
#define CPU_KERNEL_output NULL        /* runs nothing: its node's instruction writes it */
#define CPU_KERNEL_fused NULL         /* the engine runs it (engine/ops/fused.c) */
#define CPU_KERNEL_rop_direction NULL /* a view */
/* the collectives' kernels on host memory are src/dist's */
#define CPU_KERNEL_allreduce &tgl_dist_kernel_allreduce
#define CPU_KERNEL_allreduce_start &tgl_dist_kernel_allreduce_start
#define CPU_KERNEL_allreduce_wait &tgl_dist_kernel_allreduce_wait

#define ENTRY(ID, name, impl, ...) [TGL_OP_##ID] = CPU_KERNEL_##impl,
static const tgl_op_kernel *const kernels[TGL_NOPS] = {TGL_OPS(ENTRY)};
#undef ENTRY

const tgl_op_kernel *tgl_cpu_op_kernel(int op)
{
    return op >= 0 && op < TGL_NOPS ? kernels[op] : NULL;
}
