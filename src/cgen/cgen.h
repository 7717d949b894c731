/*
 * cgen.h — internal header of the code generator (src/cgen): turning a
 * fused program (engine/fprog.h) into C, compiling it (libtcc in memory
 * at once, the system compiler in the background, swapped in when ready),
 * caching compiled kernels on disk, and launching them over arrays on the
 * engine's threads.
 */
#ifndef TGL_CGEN_H
#define TGL_CGEN_H

#include "engine/fprog.h"

/* A kernel whose code can be replaced while the program runs: the CVM
 * reads `fn` once per call (an atomic load) and falls back to the
 * reference path when it is NULL. */
typedef struct tgl_kernel_ref tgl_kernel_ref;

/* The C source of prog's kernel (with tgl_kernel.h embedded), defining
 * `void <symbol>(const tgl_kargs *)`.  malloc'd. */
tgl_status tgl_cgen_render(tgl_ctx *ctx, const tgl_fprog *prog, const char *symbol, char **source);

/* Makes prog's kernel available as the context's config.compile says:
 *   sync   — compile with the system compiler (or load it from the cache) now;
 *   tcc    — compile in memory with libtcc only;
 *   cc     — like sync;
 *   tiered — libtcc now, the system compiler on a background thread, and
 *            the faster code swapped in when ready.
 * With no working compiler, prog keeps the reference path and one warning
 * is printed per process.  Never fails for want of a compiler. */
tgl_status tgl_cgen_prepare(tgl_ctx *ctx, tgl_fprog *prog);

/* The current kernel of prog, or NULL (reference path). */
tgl_kernel_fn tgl_cgen_kernel(const tgl_fprog *prog);
/* Which code runs now: 0 none, 1 libtcc, 2 system compiler. */
int tgl_cgen_tier(const tgl_fprog *prog);
/* Blocks until prog's background compile (if any) has finished. */
void tgl_cgen_wait(tgl_fprog *prog);
/* Frees prog's kernel.  Does not wait: a background compile already
 * running finishes into the disk cache; one not started is dropped. */
void tgl_cgen_release(tgl_fprog *prog);

/* Runs fn over the arrays: out[k] are allocated by the caller with the
 * output shapes (for a fused reduction, out[0] has the reduced shape);
 * in[k] have the space's ndim (broadcast axes of size 1).  Coalesces
 * axes, picks rows/columns per thread, and runs on ctx's threads. */
tgl_status tgl_cgen_launch(tgl_ctx *ctx, const tgl_fprog *prog, tgl_kernel_fn fn,
                           tgl_array *const *in, tgl_array *const *out);

#endif /* TGL_CGEN_H */
