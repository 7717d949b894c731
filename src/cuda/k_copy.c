/*
 * k_copy.c — device copies the op kernels share (cuda_int.h): a strided
 * (and, where dtypes differ, converting) copy of a device array into a
 * device destination (tgl_cuda_copy_into).  The kernels are core.cu's tgl_core_copy / tgl_core_convert; a
 * contiguous source of the destination's dtype is one device-to-device
 * memcpy.
 */
#include "cuda/cuda_int.h"
#include "cuda/k_core.h"

#include <string.h>

/* Axes of size 1 dropped, then neighbours merged where both arrays step
 * over the pair as over one longer axis (a contiguous source becomes one
 * axis).  Returns the number of axes left (0: a single element). */
static int squeeze(int nd, const int64_t *shape, const int64_t *sstr, const int64_t *dstr,
                   int64_t *sh, int64_t *ss, int64_t *ds)
{
    int k = 0;
    for (int d = 0; d < nd; d++) {
        if (shape[d] == 1)
            continue;
        if (k > 0 && ss[k - 1] == sstr[d] * shape[d] && ds[k - 1] == dstr[d] * shape[d]) {
            sh[k - 1] *= shape[d];
            ss[k - 1] = sstr[d];
            ds[k - 1] = dstr[d];
            continue;
        }
        sh[k] = shape[d];
        ss[k] = sstr[d];
        ds[k] = dstr[d];
        k++;
    }
    return k;
}

tgl_status tgl_cuda_copy_into(const tgl_backend_opts *o, const void *src, int sdt,
                              const int64_t *sstr, void *dst, int ddt, const int64_t *dstr,
                              int ndim, const int64_t *shape, tgl_errbuf *err)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    if (n == 0)
        return TGL_OK;
    tgl_core_copy_args a;
    memset(&a, 0, sizeof a);
    a.ndim = squeeze(ndim, shape, sstr, dstr, a.shape, a.sstr, a.dstr);
    size_t es = tgl_dtype_size(ddt);
    /* Both contiguous, one dtype: a memcpy. */
    if (sdt == ddt && (a.ndim == 0 || (a.ndim == 1 && a.sstr[0] == 1 && a.dstr[0] == 1)))
        return tgl_cuda_drv()->memcpy(dst, src, (size_t)n * es, TGL_CUDA_D2D, err);
    if (a.ndim == 0) {
        a.ndim = 1;
        a.shape[0] = 1;
        a.sstr[0] = a.dstr[0] = 0;
    }
    a.src = src;
    a.dst = dst;
    a.n = n;
    a.es = (int32_t)es;
    a.sdt = sdt;
    a.ddt = ddt;
    a.dcontig = a.ndim == 1 && a.dstr[0] == 1;
    unsigned grid, block;
    tgl_cuda_geometry(n, &grid, &block);
    return tgl_cuda_lib_launch(o, "core", sdt == ddt ? "tgl_core_copy" : "tgl_core_convert", grid,
                               block, 0, &a, err);
}
