/*
 * device.c — the public CUDA calls of tgl.h (built when the toolkit is
 * found; none.c answers them otherwise): whether the build has CUDA, how
 * many devices the driver in use sees (the real GPU's, or the emulator's
 * one under TGL_CUDA_EMU), why no device can be used, its name, waiting
 * for it.  Links only the CUDA runtime, never the driver library, so the
 * binary starts on machines without a GPU or driver and reports 0 devices.
 */
#include "cuda/cuda_int.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>

int tgl_cuda_built(void)
{
    return 1;
}

int tgl_cuda_device_count(void)
{
    const tgl_cuda_driver *drv = tgl_cuda_drv();
    return drv->device_count ? drv->device_count() : 0;
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

/* tgl_cuda_ready's answer never changes: its message, copied once. */
static tgl_errbuf why;
static tgl_status why_status;
static pthread_once_t why_once = PTHREAD_ONCE_INIT;

static void why_init(void)
{
    why_status = tgl_cuda_ready(&why);
}

const char *tgl_cuda_unavailable(void)
{
    pthread_once(&why_once, why_init);
    return why_status ? why.msg : NULL;
}

const char *tgl_cuda_device_name(void)
{
    return tgl_cuda_unavailable() ? NULL : tgl_cuda_info()->name;
}

tgl_status tgl_cuda_synchronize(tgl_ctx *ctx)
{
    TGL_CHECK_CTX(ctx);
    tgl_errbuf e;
    tgl_status st = tgl_cuda_ready(&e);
    if (!st)
        st = tgl_cuda_drv()->sync(&e);
    return st ? tgl_errbuf_take(ctx, st, &e) : TGL_OK;
}
