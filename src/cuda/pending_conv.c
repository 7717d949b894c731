/*
 * pending_conv.c — DEVELOPMENT SCAFFOLD (delete with pending.c and
 * pending_runtime.c): weak tgl_cuda_alloc / tgl_cuda_free, which
 * k_conv.c calls and no scaffold defines yet, so that the branch links
 * before runtime.c lands.  runtime.c's strong definitions replace them.
 */
#include "cuda/cuda_int.h"

#define W __attribute__((weak))

W void *tgl_cuda_alloc(size_t n) { (void)n; return NULL; }
W void tgl_cuda_free(void *p) { (void)p; }
