/*
 * backend_cuda.c — the CUDA backend's table (engine/backend.h): memory and
 * copies (runtime.c), cuBLAS products (blas.c), op kernels by op id (the
 * families' k_*.c), fused programs rendered as CUDA C and compiled with
 * NVRTC (fused.c, modules.c), whole steps captured as CUDA Graphs
 * (step.c).  Every impl of the op catalog is named below, with its kernel
 * or NULL and the reason, as src/cpu/kernels/table.c does, so an op added
 * without a CUDA kernel does not build here (an undeclared CUDA_KERNEL_
 * name) and an op with no kernel is a clear compile-time error naming the
 * op and the device (tgl_backend_op_kernel), never a copy to the host.
 */
#include "cuda/cuda_int.h"
#include "engine/ops/ops.h"

#define CUDA_KERNEL_elemwise &tgl_cuda_kernel_elemwise
#define CUDA_KERNEL_reduce &tgl_cuda_kernel_reduce
#define CUDA_KERNEL_argmax &tgl_cuda_kernel_argmax
#define CUDA_KERNEL_axes_size &tgl_cuda_kernel_axes_size
#define CUDA_KERNEL_dot &tgl_cuda_kernel_dot
#define CUDA_KERNEL_batched_dot &tgl_cuda_kernel_batched_dot
#define CUDA_KERNEL_gemm &tgl_cuda_kernel_gemm
#define CUDA_KERNEL_gemv &tgl_cuda_kernel_gemv
#define CUDA_KERNEL_ger &tgl_cuda_kernel_ger
#define CUDA_KERNEL_dimshuffle NULL /* a view */
#define CUDA_KERNEL_reshape NULL    /* a view */
#define CUDA_KERNEL_shape &tgl_cuda_kernel_shape
#define CUDA_KERNEL_concatenate &tgl_cuda_kernel_concatenate
#define CUDA_KERNEL_fill_like &tgl_cuda_kernel_fill_like
#define CUDA_KERNEL_arange &tgl_cuda_kernel_arange
#define CUDA_KERNEL_subtensor NULL  /* a view */
#define CUDA_KERNEL_inc_subtensor &tgl_cuda_kernel_inc_subtensor
#define CUDA_KERNEL_adv_subtensor &tgl_cuda_kernel_adv_subtensor
#define CUDA_KERNEL_adv_inc_subtensor &tgl_cuda_kernel_adv_inc_subtensor
#define CUDA_KERNEL_softmax &tgl_cuda_kernel_softmax
#define CUDA_KERNEL_log_softmax &tgl_cuda_kernel_log_softmax
#define CUDA_KERNEL_one_hot &tgl_cuda_kernel_one_hot
#define CUDA_KERNEL_softmax_xent &tgl_cuda_kernel_softmax_xent
#define CUDA_KERNEL_softmax_xent_dx &tgl_cuda_kernel_softmax_xent_dx
#define CUDA_KERNEL_class_xent &tgl_cuda_kernel_class_xent
#define CUDA_KERNEL_class_xent_delta &tgl_cuda_kernel_class_xent_delta
#define CUDA_KERNEL_class_xent_sgd NULL /* a sequential per-word loop (RNNLM's output update): CPU only */
#define CUDA_KERNEL_conv2d &tgl_cuda_kernel_conv2d
#define CUDA_KERNEL_conv2d_grad_input &tgl_cuda_kernel_conv2d_grad_input
#define CUDA_KERNEL_conv2d_grad_weight &tgl_cuda_kernel_conv2d_grad_weight
#define CUDA_KERNEL_pool2d &tgl_cuda_kernel_pool2d
#define CUDA_KERNEL_pool2d_grad &tgl_cuda_kernel_pool2d_grad
#define CUDA_KERNEL_batch_norm &tgl_cuda_kernel_batch_norm
#define CUDA_KERNEL_batch_norm_stats &tgl_cuda_kernel_batch_norm_stats
#define CUDA_KERNEL_batch_norm_grad &tgl_cuda_kernel_batch_norm_grad
#define CUDA_KERNEL_ifelse NULL        /* a view (compiled to jumps) */
#define CUDA_KERNEL_scan NULL          /* an inner program (exec_inner) */
#define CUDA_KERNEL_output NULL        /* runs nothing: its node's instruction writes it */
#define CUDA_KERNEL_fused NULL         /* the engine runs it (engine/ops/fused.c) */
#define CUDA_KERNEL_rop_direction NULL /* a view */
/* Collectives between GPUs need NCCL (doc/distributed.md): not yet.  A
 * compiled step with an allreduce on cuda fails at compile time naming
 * the op; tgl.dist's eager collectives on cuda arrays go through host
 * memory. */
#define CUDA_KERNEL_allreduce NULL
#define CUDA_KERNEL_allreduce_start NULL
#define CUDA_KERNEL_allreduce_wait NULL

#define ENTRY(ID, name, impl, ...) [TGL_OP_##ID] = CUDA_KERNEL_##impl,
static const tgl_op_kernel *const kernels[TGL_NOPS] = {TGL_OPS(ENTRY)};
#undef ENTRY

static const tgl_op_kernel *cuda_op_kernel(int op)
{
    return op >= 0 && op < TGL_NOPS ? kernels[op] : NULL;
}

/* Device kernels exist for floating-point data in float32 and float64 (and
 * integer data where the op moves or counts rather than computes: the
 * families say); the elementwise family covers what its renderer covers. */
static bool cuda_supports_op(const tgl_node *n)
{
    if (n->op < TGL_NOPS && kernels[n->op] == &tgl_cuda_kernel_elemwise)
        return tgl_cuda_supports_elemwise(n);
    return true;
}

static void cuda_set_threads(int n)
{
    (void)n; /* the GPU's parallelism is its own */
}

const tgl_backend tgl_backend_cuda = {
    .name = "cuda",
    .device = TGL_DEVICE_CUDA,
    .ready = tgl_cuda_be_ready,
    .alloc = tgl_cuda_be_alloc,
    .free = tgl_cuda_be_free,
    .memset = tgl_cuda_be_memset,
    .copy_to_host = tgl_cuda_be_copy_to_host,
    .copy_from_host = tgl_cuda_be_copy_from_host,
    .copy = tgl_cuda_be_copy,
    .gemm = tgl_cuda_be_gemm,
    .gemv = tgl_cuda_be_gemv,
    .ger = tgl_cuda_be_ger,
    .dot = tgl_cuda_be_dot,
    .set_threads = cuda_set_threads,
    .info = tgl_cuda_be_info,
    .op_kernel = cuda_op_kernel,
    .supports_op = cuda_supports_op,
    .prepare = tgl_cuda_fused_prepare,
    .wait = tgl_cuda_fused_wait,
    .release = tgl_cuda_fused_release,
    .launch = tgl_cuda_fused_launch,
    .launch_cache_free = tgl_cuda_fused_launch_cache_free,
    .step_inlinable = tgl_cuda_step_inlinable,
    .step_prepare = tgl_cuda_step_prepare,
    .step_all_callbacks = true,
    .step_run = tgl_cuda_step_run,
    .step_free = tgl_cuda_step_free,
    .cache_clear = tgl_cuda_cache_clear,
    .cache_info = tgl_cuda_cache_info,
    .wait_compiles = NULL,
};
