/*
 * k_core.h — what the core family's host files (k_copy.c, k_core.c) share:
 * the kernels' argument structs (kernels/core.cuh) and the general strided
 * copy both use.  Private to src/cuda.
 */
#ifndef TGL_CUDA_K_CORE_H
#define TGL_CUDA_K_CORE_H

#include "cuda/cuda_int.h"

#include <stdint.h>

#include "cuda/kernels/core.cuh"

/* Copies the ndim-axis shape from src (dtype sdt, strides sstr) to dst
 * (ddt, dstr), device pointers to element 0; converting with array.c's
 * rules when the dtypes differ.  The regions do not overlap. */
tgl_status tgl_cuda_copy_into(const tgl_backend_opts *o, const void *src, int sdt,
                              const int64_t *sstr, void *dst, int ddt, const int64_t *dstr,
                              int ndim, const int64_t *shape, tgl_errbuf *err);

#endif /* TGL_CUDA_K_CORE_H */
