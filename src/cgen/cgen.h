/*
 * cgen.h — internal header of the code generator's CPU side (src/cgen),
 * the kernel half of the CPU backend (src/cpu/backend_cpu.c): turning a
 * fused program (engine/fused_prog.h) into C for the host compilers, compiling
 * it (libtcc in memory at once, the system compiler in the background,
 * swapped in when ready), caching compiled kernels on disk, and launching
 * them over arrays on the engine's worker threads.  The statements inside
 * the kernels come from the device-neutral renderer (expr.h), which also
 * renders CUDA kernels (render_cuda.h, for a CUDA backend).
 *
 * cgen never sees a tgl_ctx: the settings it reads arrive in a
 * tgl_backend_opts, and errors leave as a status plus a message in a
 * tgl_errbuf (engine/backend.h).  No engine file includes this header.
 */
#ifndef TGL_CGEN_H
#define TGL_CGEN_H

#include "engine/backend.h"
#include "engine/fused_prog.h"
#include "cgen/tgl_kernel.h"
#include "cpu/backend_cpu.h"

/* The C source of prog's kernel (with tgl_kernel.h embedded), defining
 * `void <symbol>(const tgl_kargs *)`; *source is malloc'd. */
tgl_status tgl_cgen_render(const tgl_fused_prog *prog, const char *symbol, char **source,
                           tgl_errbuf *err);

/* Makes prog's kernel as o->compile says, into *out (its head naming be,
 * the backend whose name goes into the cache key):
 *   sync   — compile with the system compiler (or load it from the cache) now;
 *   tcc    — compile in memory with libtcc only;
 *   cc     — like sync;
 *   tiered — libtcc now, the system compiler on one of a bounded number
 *            of background workers, and the faster code swapped in when
 *            ready.
 * With no working compiler the kernel has no code (tier 0: the reference
 * path) and one warning is printed per process.  Never fails for want of
 * a compiler or of disk (a cache that cannot be written: a private
 * temporary directory, else the current code, with one warning); a kernel
 * whose source the compiler rejects is TGL_EINTERNAL. */
tgl_status tgl_cgen_compile(const tgl_backend_opts *o, const tgl_backend *be,
                            const tgl_fused_prog *prog, tgl_kernel_ref **out, tgl_errbuf *err);

/* Raises k (prog's kernel from tgl_cgen_compile under another mode) to
 * what o->compile promises: under 'sync' and 'cc' the system compiler's
 * code (cache or compile) now, under 'tiered' a background compile; under
 * 'tcc', at tier 2 or with a background compile already, nothing.  A
 * process that made a kernel under 'tcc' and compiles it again under
 * 'sync' would otherwise keep libtcc's code (found by the op matrix). */
tgl_status tgl_cgen_upgrade(const tgl_backend_opts *o, const tgl_backend *be,
                            const tgl_fused_prog *prog, tgl_kernel_ref *k, tgl_errbuf *err);

/* The code k runs now, or NULL (the reference path).  k may be NULL.
 * Which code that is: k->tier, 0 none, 1 libtcc, 2 system compiler. */
tgl_kernel_fn tgl_cgen_kernel_fn(const tgl_kernel_ref *k);
/* Blocks until k's background compile (if any) has finished. */
void tgl_cgen_kernel_wait(tgl_kernel_ref *k);
/* Frees k (its libtcc state, its shared object).  Does not wait: a
 * background compile finishes into the disk cache; one not started yet is
 * dropped when other compiles are waiting for their turn. */
void tgl_cgen_kernel_release(tgl_kernel_ref *k);

/* Runs fn over the arrays: out[k] are allocated by the caller with the
 * output shapes (for a fused reduction, out[0] has the reduced shape);
 * in[k] have the space's ndim (broadcast axes of size 1).  Coalesces
 * axes, picks rows/columns per thread, and runs on o's threads.  cache
 * (may be NULL) is the caller's launch cache: *cache NULL or a plan from
 * an earlier launch of prog, reused when the operands' shapes and strides
 * match it, else replaced (freed with tgl_cgen_launch_cache_free). */
tgl_status tgl_cgen_launch(const tgl_backend_opts *o, const tgl_fused_prog *prog, tgl_kernel_fn fn,
                           tgl_array *const *in, tgl_array *const *out, void **cache,
                           tgl_errbuf *err);
/* tgl_cgen_launch with k's current code (TGL_EINTERNAL when it has none). */
tgl_status tgl_cgen_kernel_launch(const tgl_backend_opts *o, const tgl_fused_prog *prog,
                                  tgl_kernel_ref *k, tgl_array *const *in,
                                  tgl_array *const *out, void **cache, tgl_errbuf *err);
/* Frees a launch cache (NULL is ignored). */
void tgl_cgen_launch_cache_free(void *cache);

/* ---- whole steps (engine/step.c, through backend.h's step_* entries) ---- */

/* backend.step_inlinable: prog's kernel runs inline with the geometry of
 * its launch cache when that runs as one task; a float32 sum or product
 * then needs a double accumulator (*scratch_elem = 8 bytes per element). */
bool tgl_cgen_step_inlinable(const tgl_fused_prog *prog, const void *launch_cache,
                             size_t *scratch_elem);
/* The C source of the whole step (render.c): the inlined kernels (those
 * calling libm kept noipa, so they compile as the kernels the CVM runs),
 * then `int <symbol>(void *const *D, void *env, tgl_step_cb cb)`. */
tgl_status tgl_cgen_render_step(const tgl_step_item *items, int n, const char *symbol,
                                char **source, tgl_errbuf *err);
/* backend.step_prepare (compile.c): renders and compiles with the system
 * compiler only (cache hit: ready at once; 'tiered': in the background;
 * 'sync'/'cc': now; 'tcc': never). */
tgl_status tgl_cgen_step_prepare(const tgl_backend_opts *o, const tgl_step_item *items, int n,
                                 tgl_kernel_ref **out, tgl_errbuf *err);
/* The generated function of a whole step, as step_run (backend.h) calls
 * it: 0 when done, else the nonzero status a callback returned. */
typedef int (*tgl_step_fn)(void *const *D, void *env, tgl_step_cb cb);
/* The code of a prepared whole step, NULL until it is ready (the CPU
 * backend's step_run calls it). */
tgl_step_fn tgl_cgen_step_code(const tgl_kernel_ref *k);

/* ---- whole loops (src/scan, through backend.h's loop_* entries) ---- */

/* The C source of a whole loop (render.c): the body's kernels as a whole
 * step's, then `int <symbol>(void **D, int64_t *L, void *env,
 * tgl_step_cb cb)` running the steps L[1]..L[0]-1 (backend.h). */
tgl_status tgl_cgen_render_loop(const tgl_loop_plan *plan, const char *symbol, char **source,
                                tgl_errbuf *err);
/* backend.loop_prepare (compile.c): the handle of an equal plan made
 * before, else rendered and compiled as a whole step is; kept by cgen
 * (the caller never frees it). */
tgl_status tgl_cgen_loop_prepare(const tgl_backend_opts *o, const tgl_loop_plan *plan,
                                 tgl_kernel_ref **out, tgl_errbuf *err);
typedef int (*tgl_loop_fn)(void **D, int64_t *L, void *env, tgl_step_cb cb);
/* The code of a prepared loop, NULL until it is ready. */
tgl_loop_fn tgl_cgen_loop_code(const tgl_kernel_ref *k);

/* Deletes every entry of the kernel cache (o->cache_dir, else
 * $TGL_CACHE_DIR, else ~/.cache/tgl). */
tgl_status tgl_cgen_cache_clear(const tgl_backend_opts *o, tgl_errbuf *err);
/* Waits (bounded) for the pending background compiles, then abandons the
 * rest; no background compile starts afterwards (compile.c, "At exit"). */
void tgl_cgen_wait_all(void);
/* The cache as text (malloc'd): directory, entries, bytes, max_bytes. */
tgl_status tgl_cgen_cache_info(const tgl_backend_opts *o, char **text, tgl_errbuf *err);

/* Registers the measurement of kernel.parallel_min (launch.c, engine/tune.h). */
void tgl_cgen_tune_register(void);

#endif /* TGL_CGEN_H */
