/*
 * pending_blas.c — DEVELOPMENT SCAFFOLD like pending.c (delete with it
 * before issue 22 lands): weak definitions of the entries blas.c and
 * drv_cublas.c call that neither pending.c nor pending_runtime.c has
 * (drv_cuda.c's stream and runtime.c's allocator, helper H-rt), so the
 * tree links until they land.  NULL is CUDA's legacy default stream; the
 * allocator has no memory.
 */
#include "cuda/cuda_int.h"

#define W __attribute__((weak))

W void *tgl_cuda_real_stream(void) { return NULL; }
W void *tgl_cuda_alloc(size_t n) { (void)n; return NULL; }
W void tgl_cuda_free(void *p) { (void)p; }
