/*
 * info.c — build information: versions of tgl and its BLAS (the CPU
 * backend's).  Whether the CUDA backend is built in, and its devices, are
 * src/cuda's answers (device.c, or none.c in a build without it).
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
