/*
 * none.c — src/cuda's answers in a build without the CUDA toolkit
 * (device.c and runtime.c replace this file when it is found): not built,
 * no device, an allocator that never allocated.
 */
#include "engine/engine.h"

#include <string.h>

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

const char *tgl_cuda_unavailable(void)
{
    return "tgl was built without CUDA";
}

const char *tgl_cuda_device_name(void)
{
    return NULL;
}

tgl_status tgl_cuda_synchronize(tgl_ctx *ctx)
{
    TGL_CHECK_CTX(ctx);
    return tgl_ctx_set_error(ctx, TGL_EINVAL, "tgl_cuda_synchronize: tgl was built without CUDA");
}

void tgl_cuda_memory_stats(tgl_cuda_mem_stats *s)
{
    if (s)
        memset(s, 0, sizeof *s);
}

void tgl_cuda_empty_cache(void)
{
}
