/*
 * pending_runtime.c — DEVELOPMENT SCAFFOLD like pending.c (delete both
 * before issue 22 lands): weak definitions of the runtime entries
 * (runtime.c, helper H-rt) that modules.c calls and pending.c does not
 * have, so the tree links until runtime.c lands.  Each fails or reports
 * no device.
 */
#include "cuda/cuda_int.h"

#include <stdarg.h>
#include <stdio.h>

#define W __attribute__((weak))

W const tgl_cuda_driver *tgl_cuda_drv(void) { return &tgl_cuda_driver_real; }
W tgl_status tgl_cuda_ready(tgl_errbuf *err)
{
    return tgl_errbuf_set(err, TGL_EINTERNAL, "cuda: the runtime is not built yet");
}
W const tgl_cuda_devinfo *tgl_cuda_info(void)
{
    static const tgl_cuda_devinfo none;
    return &none;
}
W tgl_status tgl_cuda_fail(tgl_errbuf *err, tgl_status st, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tgl_errbuf_set(err, st, "cuda: %s", what);
}
