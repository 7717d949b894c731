/*
 * pending.c — DEVELOPMENT SCAFFOLD, deleted before issue 22 lands: weak
 * definitions of every CUDA backend entry, so that each part of the
 * backend builds and links while the others are written in parallel.
 * Each real definition (strong) replaces its weak one here.  A scaffold
 * entry fails with "not built yet".
 */
#include "cuda/cuda_int.h"
#include "engine/ops/ops.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"
#define W __attribute__((weak))

static tgl_status pending_run(tgl_ctx *ctx, const struct tgl_node *n, tgl_array *const *in,
                              tgl_array *out)
{
    return tgl_op_error(ctx, n, in, TGL_EINTERNAL, "cuda: this kernel is not built yet");
}

W const tgl_op_kernel tgl_cuda_kernel_elemwise = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_reduce = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_argmax = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_axes_size = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_shape = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_concatenate = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_fill_like = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_arange = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_dot = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_batched_dot = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_gemm = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_gemv = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_ger = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_inc_subtensor = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_adv_subtensor = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_adv_inc_subtensor = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_one_hot = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_softmax = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_log_softmax = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_softmax_xent = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_softmax_xent_dx = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_class_xent = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_class_xent_delta = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_conv2d = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_conv2d_grad_input = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_conv2d_grad_weight = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_pool2d = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_pool2d_grad = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_batch_norm = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_batch_norm_stats = {.run = pending_run};
W const tgl_op_kernel tgl_cuda_kernel_batch_norm_grad = {.run = pending_run};

W bool tgl_cuda_supports_elemwise(const struct tgl_node *n) { (void)n; return false; }
W void *tgl_cuda_be_alloc(size_t nbytes) { (void)nbytes; return NULL; }
W void tgl_cuda_be_free(void *p) { (void)p; }
#define PENDING(e) return tgl_errbuf_set(e, TGL_EINTERNAL, "cuda: %s is not built yet", __func__)
W tgl_status tgl_cuda_be_memset(void *p, int byte, size_t n, tgl_errbuf *err) { PENDING(err); }
W tgl_status tgl_cuda_be_copy_to_host(void *host, const void *src, size_t n, tgl_errbuf *err) { PENDING(err); }
W tgl_status tgl_cuda_be_copy_from_host(void *dst, const void *host, size_t n, tgl_errbuf *err) { PENDING(err); }
W tgl_status tgl_cuda_be_copy(void *dst, const void *src, size_t n, tgl_errbuf *err) { PENDING(err); }
W const char *tgl_cuda_be_info(void) { return "cuda (pending)"; }
W bool tgl_cuda_allow_tf32(void) { return false; }
W tgl_status tgl_cuda_be_gemm(int dtype, bool trans_a, bool trans_b, int m, int n, int k,
                            double alpha, const void *a, int lda, const void *b, int ldb,
                            double beta, void *c, int ldc, tgl_errbuf *err) { PENDING(err); }
W tgl_status tgl_cuda_be_gemv(int dtype, bool trans, int rows, int cols, double alpha,
                            const void *a, int lda, const void *x, int incx, double beta,
                            void *y, int incy, tgl_errbuf *err) { PENDING(err); }
W tgl_status tgl_cuda_be_ger(int dtype, int m, int n, double alpha, const void *x, int incx,
                           const void *y, int incy, void *a, int lda, tgl_errbuf *err) { PENDING(err); }
W tgl_status tgl_cuda_be_dot(int dtype, int n, const void *x, int incx, const void *y, int incy,
                           void *out, tgl_errbuf *err) { PENDING(err); }
W tgl_status tgl_cuda_fused_prepare(const tgl_backend_opts *o, const struct tgl_fused_prog *prog,
                                  tgl_kernel_ref **out, tgl_errbuf *err) { PENDING(err); }
W void tgl_cuda_fused_wait(tgl_kernel_ref *k) { (void)k; }
W void tgl_cuda_fused_release(tgl_kernel_ref *k) { (void)k; }
W tgl_status tgl_cuda_fused_launch(const tgl_backend_opts *o, const struct tgl_fused_prog *prog,
                                 tgl_kernel_ref *k, tgl_array *const *in, tgl_array *const *out,
                                 void **cache, tgl_errbuf *err) { PENDING(err); }
W void tgl_cuda_fused_launch_cache_free(void *cache) { (void)cache; }
W tgl_status tgl_cuda_cache_clear(const tgl_backend_opts *o, tgl_errbuf *err) { return TGL_OK; }
W tgl_status tgl_cuda_cache_info(const tgl_backend_opts *o, char **text, tgl_errbuf *err) { PENDING(err); }
W const tgl_cuda_driver tgl_cuda_driver_real = {.name = "cuda-pending"};
W const tgl_cuda_driver tgl_cuda_driver_emu = {.name = "emu-pending"};
W const tgl_backend_opts *tgl_cuda_opts(tgl_ctx *ctx) { return &ctx->backend_opts; }

W void *tgl_cuda_fused_geometry_dup(const void *launch_cache) { return NULL; }
W void tgl_cuda_fused_geometry_free(void *geometry) { (void)geometry; }
W tgl_status tgl_cuda_fused_launch_at(const struct tgl_fused_prog *prog, const void *geometry,
                                    void *const *ptrs, tgl_errbuf *err) { PENDING(err); }
W void tgl_cuda_hold_begin(void) {}
W void *tgl_cuda_hold_end(void) { return NULL; }
W void tgl_cuda_hold_release(void *held) { (void)held; }
W const tgl_cuda_driver *tgl_cuda_drv(void) { return &tgl_cuda_driver_real; }
