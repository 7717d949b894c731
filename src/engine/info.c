/*
 * info.c — build information: versions of tgl and its BLAS, and whether the
 * CUDA backend is built in (src/cuda answers the device questions).
 */
#include "engine/engine.h"

#include <cblas.h>
#include <stdio.h>
#include <time.h>
#include <string.h>

/* OpenBLAS reports its build and the kernel it picked for this CPU. */
extern char *openblas_get_config(void);
extern char *openblas_get_corename(void);
extern int openblas_get_num_threads(void);

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
    /* Built once; the strings OpenBLAS returns are static.  A benign race:
     * concurrent first calls write the same bytes. */
    static char info[256];
    if (!info[0]) {
        /* The config string already starts "OpenBLAS 0.3.21 ..." */
        const char *config = openblas_get_config();
        const char *prefix = strncmp(config, "OpenBLAS ", 9) == 0 ? "" : "OpenBLAS ";
        snprintf(info, sizeof info, "%s%s (core %s, %d threads)", prefix, config,
                 openblas_get_corename(), openblas_get_num_threads());
    }
    return info;
}

#ifndef TGL_WITH_CUDA
int tgl_cuda_built(void) { return 0; }
int tgl_cuda_device_count(void) { return 0; }
const char *tgl_cuda_version(void) { return ""; }
#endif
