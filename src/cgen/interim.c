/* interim.c — until the code generator lands: every fused program runs its
 * reference path.  Replaced by render.c, compile.c, cache.c, launch.c. */
#include "cgen/cgen.h"
tgl_status tgl_cgen_prepare(tgl_ctx *ctx, tgl_fprog *prog) { (void)ctx; (void)prog; return TGL_OK; }
tgl_kernel_fn tgl_cgen_kernel(const tgl_fprog *prog) { (void)prog; return NULL; }
int tgl_cgen_tier(const tgl_fprog *prog) { (void)prog; return 0; }
void tgl_cgen_wait(tgl_fprog *prog) { (void)prog; }
void tgl_cgen_release(tgl_fprog *prog) { (void)prog; }
tgl_status tgl_cgen_launch(tgl_ctx *ctx, const tgl_fprog *prog, tgl_kernel_fn fn, tgl_array *const *in, tgl_array *const *out) { (void)ctx;(void)prog;(void)fn;(void)in;(void)out; return TGL_EINTERNAL; }
