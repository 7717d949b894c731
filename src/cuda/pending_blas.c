/*
 * pending_blas.c — DEVELOPMENT SCAFFOLD like pending.c (delete with it
 * before issue 22 lands): a weak tgl_cuda_real_stream (drv_cuda.c, helper
 * H-rt) so that drv_cublas.c links until the real driver lands.  NULL is
 * CUDA's legacy default stream.
 */
#include "cuda/cuda_int.h"

__attribute__((weak)) void *tgl_cuda_real_stream(void) { return NULL; }
