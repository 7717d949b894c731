/*
 * device.c — the CUDA backend's device discovery (built when the toolkit is
 * found).  Links only the CUDA runtime, never the driver library, so the
 * binary starts on machines without a GPU or driver and reports 0 devices.
 */
#include "engine/engine.h"

#include <cuda_runtime_api.h>
#include <stdio.h>

int tgl_cuda_built(void)
{
    return 1;
}

int tgl_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return n;
}

const char *tgl_cuda_version(void)
{
    static char version[32];
    if (!version[0]) {
        int v = CUDART_VERSION;
        snprintf(version, sizeof version, "%d.%d", v / 1000, (v % 1000) / 10);
    }
    return version;
}
