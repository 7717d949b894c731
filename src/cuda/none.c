/*
 * none.c — src/cuda's answers in a build without the CUDA toolkit
 * (device.c replaces this file when it is found): not built, no device.
 */
#include "engine/engine.h"

int tgl_cuda_built(void)
{
    return 0;
}

int tgl_cuda_device_count(void)
{
    return 0;
}

const char *tgl_cuda_version(void)
{
    return "";
}
