/*
 * cgint.h — what the code generator's files (render.c, expr.c,
 * compile.c, cache.c, launch.c) share with each other and with nothing
 * else: the rendering state, the layout decisions the renderer and the
 * launcher must agree on, the embedded kernel header, and the cache
 * primitives the compiler calls (from the calling thread or a background
 * compile thread).  Like the rest of cgen, none of it takes a tgl_ctx.
 */
#ifndef TGL_CGINT_H
#define TGL_CGINT_H

#include "cgen/cgen.h"
#include "engine/strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- render.c and expr.c -------------------------------------------------- */

/* The state of rendering one program: which libm functions (bit per
 * function, [0] double, [1] float) and helpers (expr.c's, and the
 * elementwise table's: bit k for tgl_elemwise_helpers[k]) the source
 * needs, and the first error. */
typedef struct tgl_render {
    tgl_errbuf *err;
    const tgl_fprog *p;
    const char *pfx;          /* prefix of the row functions' names */
    uint32_t used[2];
    unsigned helpers;
    uint32_t ew_helpers;
    tgl_status st;
} tgl_render;

/* How a row function loads inputs: unit (i<j>[k], or the value i<j> for
 * an invariant input) or strided (i<j>[k * s<j>]). */
enum { TGL_ROW_UNIT, TGL_ROW_STRIDED };

/* The libm functions generated kernels may call, by their double names
 * (the float32 ones add f): _(name, arity, vec), vec saying since when
 * glibc's libmvec has vector variants (OLD: 2.22, NEW: 2.35, NO: never).
 * expr.c declares those a kernel uses; compile.c hands them to libtcc. */
#define TGL_CGEN_LIBM(_)                                                        \
    _(fabs, 1, NO) _(exp, 1, OLD) _(log, 1, OLD) _(log1p, 1, NEW)               \
    _(expm1, 1, NEW) _(sqrt, 1, NO) _(tanh, 1, NEW) _(sin, 1, OLD)              \
    _(cos, 1, OLD) _(floor, 1, NO) _(ceil, 1, NO) _(round, 1, NO)               \
    _(pow, 2, OLD)

/* Renders p's row functions (named <pfx>_row_u/_r/_s, static) and its
 * kernel, `<decl>void <symbol>(const tgl_kargs *A)`, into fns, recording
 * in r what the prelude needs; several programs may share one r (one
 * source, one prelude).  r->st holds the first error. */
void tgl_cgen_render_kernel(tgl_render *r, tgl_sb *fns, const tgl_fprog *p, const char *pfx,
                            const char *decl, const char *symbol);

/* The C type of a dtype's elements. */
const char *tgl_cgen_ctype(int dtype);
/* Sets TGL_EINTERNAL with a message naming the program (first error wins). */
tgl_status tgl_cgen_fail(tgl_render *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A literal of dtype holding v as tgl_store_from_double stores it. */
void tgl_cgen_literal(tgl_render *r, tgl_sb *b, int dtype, double v);
/* `T v<i> = ...;` for instruction i of r->p. */
void tgl_cgen_instr(tgl_render *r, tgl_sb *b, int i, int mode);
/* Declarations of the libm functions and helpers the instructions used. */
void tgl_cgen_prelude(tgl_render *r, tgl_sb *b);

/* The text of tgl_kernel.h, embedded at the top of every kernel source. */
extern const char tgl_cgen_kernel_header[];

/* The element type a fused reduction accumulates in: float64 for sums and
 * products of floats (float32 sums stay accurate, as in the reference),
 * else the reduced output's dtype.  The kernel's out[0] has this dtype;
 * the launcher hands it a scratch buffer when it differs from the
 * output's.  -1 when prog has no reduction. */
int tgl_cgen_acc_dtype(const tgl_fprog *prog);

/* Whether the kernel's unit path expects input i to be invariant along
 * the last axis (stride 0) rather than contiguous (stride 1): the input's
 * static type broadcasts the space's last axis.  The kernel takes its unit
 * path only when every stride agrees (else the strided path); the launcher
 * makes a lone size-1 axis agree. */
int tgl_cgen_invariant(const tgl_fprog *prog, int i);

/* A 64-bit digest of what prog computes (names the kernel's symbol). */
uint64_t tgl_cgen_digest(const tgl_fprog *prog);

/* ---- launch.c ------------------------------------------------------------ */

/* The plan a launch cache holds (tgl_cgen_launch's cache), for the
 * whole-step renderer: false when there is none, or when it splits the
 * work over several tasks or covers no element; else *base (the geometry:
 * ndim, unit, shape, row and column ranges) and *kb (the operands'
 * strides, in the program's order: inputs, then outputs). */
bool tgl_cgen_plan_single(const void *cache, tgl_kargs *base, const tgl_kbuf **kb);

/* ---- cache.c ------------------------------------------------------------ */

/* Length of a cache key in hex digits (SHA-256). */
#define TGL_CACHE_KEY_HEX 64

/* The cache directory: `configured` (the cache_dir setting) when set,
 * else $TGL_CACHE_DIR, else ~/.cache/tgl; created if missing.  -1 when
 * there is none usable. */
int tgl_cache_dir(const char *configured, char *dir, size_t size);

/* The machine code's target on this host: /proc/cpuinfo's model name and
 * feature flags (what -march=native looks at).  Static text. */
const char *tgl_cache_host_target(void);

/* key = SHA-256 of (backend name, target, source, compiler command, its
 * --version line, flags, TGL_KERNEL_ABI), as hex.  -1 if hashing failed. */
int tgl_cache_key(const char *backend, const char *target, const char *source, const char *cc,
                  const char *version, const char *flags, char key[TGL_CACHE_KEY_HEX + 1]);

/* Loads entry <dir>/<key>.so and finds symbol in it.  Returns the dlopen
 * handle (and *fn), or NULL when there is no entry; an entry that exists
 * but does not load (truncated, corrupt, not a regular file: a FIFO is
 * never waited on) is deleted (a directory only when empty) and NULL
 * returned.  A hit refreshes the entry's mtime, so eviction is least
 * recently used. */
void *tgl_cache_load(const char *dir, const char *key, const char *symbol, tgl_kernel_fn *fn);
/* Loads the shared object at path (a compiler's fresh output) with the
 * same checks; NULL when it does not load.  Deletes nothing. */
void *tgl_cache_load_file(const char *path, const char *symbol, tgl_kernel_fn *fn);

/* Deletes the oldest entries (by mtime) of dir until its entries total at
 * most max_bytes, never the entry `keep`.  Also sweeps temporaries that
 * crashed compiles left behind. */
void tgl_cache_evict(const char *dir, int64_t max_bytes, const char *keep);

#endif /* TGL_CGINT_H */
