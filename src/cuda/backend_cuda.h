/*
 * backend_cuda.h — the CUDA backend's table (backend_cuda.c), for
 * src/backends.c; built only when the CUDA toolkit is found.
 */
#ifndef TGL_BACKEND_CUDA_H
#define TGL_BACKEND_CUDA_H

#include "engine/backend.h"

extern const tgl_backend tgl_backend_cuda;

#endif /* TGL_BACKEND_CUDA_H */
