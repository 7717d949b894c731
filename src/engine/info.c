/*
 * info.c — build information: versions of tgl and its BLAS (the CPU
 * backend's), and whether the CUDA backend is built in (src/cuda answers
 * the device questions).
 */
#include "engine/backend.h"

#include <time.h>

const char *tgl_version(void)
{
    return TGL_VERSION;
}

double tgl_wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *tgl_blas_info(void)
{
    return tgl_backend_get(TGL_DEVICE_CPU)->info();
}

#ifndef TGL_WITH_CUDA
int tgl_cuda_built(void) { return 0; }
int tgl_cuda_device_count(void) { return 0; }
const char *tgl_cuda_version(void) { return ""; }
#endif
