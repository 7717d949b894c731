/*
 * cgint.h — what the CPU kernel machinery of the code generator (render.c,
 * compile.c, cache.c, launch.c) shares with each other and with nothing
 * else: the host's vector math library, the layout decisions the
 * renderer and the launcher must agree on, the embedded kernel header,
 * and the cache primitives the compiler calls (from the calling thread or
 * a background compile thread).  The statements inside kernels come from
 * the device-neutral renderer (expr.h).  Like the rest of cgen, none of
 * it takes a tgl_ctx.
 */
#ifndef TGL_CGINT_H
#define TGL_CGINT_H

#include "cgen/cgen.h"
#include "engine/ops/ops.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- render.c ------------------------------------------------------------ */

/* The math functions (expr.h's TGL_CGEN_MATH) that glibc's libmvec has in
 * vector form on x86-64: _(name, since), since OLD (glibc 2.22) or NEW
 * (2.35).  render.c declares them for gcc's vectorizer; the tests allow
 * those a few ulps. */
#define TGL_CGEN_LIBMVEC(_)                                                     \
    _(exp, OLD) _(log, OLD) _(log1p, NEW) _(expm1, NEW) _(tanh, NEW)            \
    _(sin, OLD) _(cos, OLD) _(pow, OLD)

/* The text of tgl_kernel.h, embedded at the top of every kernel source. */
extern const char tgl_cgen_kernel_header[];

/* ---- the kernel layout: render.c and launch.c ---------------------------- */

/* The element type a fused reduction accumulates in: float64 for sums and
 * products of floats (float32 sums stay accurate, as in the reference),
 * else the reduced output's dtype.  The kernel's out[0] has this dtype;
 * the launcher hands it a scratch buffer when it differs from the
 * output's.  -1 when prog has no reduction. */
static inline int tgl_cgen_acc_dtype(const tgl_fused_prog *p)
{
    if (p->reduce_op < 0)
        return -1;
    int dt = p->reduce_type.dtype;
    bool sp = p->reduce_op == TGL_OP_SUM || p->reduce_op == TGL_OP_PROD;
    return sp && tgl_dtype_is_float(dt) ? TGL_FLOAT64 : dt;
}

/* Whether the kernel's unit path expects input i to be invariant along
 * the last axis (stride 0) rather than contiguous (stride 1): the input's
 * static type broadcasts the space's last axis.  The kernel takes its unit
 * path only when every stride agrees (else the strided path); the launcher
 * makes a lone size-1 axis agree. */
static inline int tgl_cgen_invariant(const tgl_fused_prog *p, int i)
{
    return p->ndim > 0 && tgl_type_bcast(p->in_type[i], p->ndim - 1);
}

/* ---- render.c, for compile.c --------------------------------------------- */

/* A 64-bit digest of what prog computes (names the kernel's symbol). */
uint64_t tgl_cgen_digest(const tgl_fused_prog *prog);

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

/* Whether the open file fd may be handed to dlopen as a cache entry: a
 * regular file holding an ELF shared object whose program headers, loaded
 * segments and section headers lie inside its size (a truncated or
 * garbage entry fails this instead of crashing dlopen).  The entry reader
 * (tgl_cache_load, tgl_cache_load_file) decides with it; the fuzz target
 * cache_entry (spec/fuzz) drives it. */
bool tgl_cache_entry_trusted(int fd);

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

/* The cache directory's name by tgl_cache_dir's rule, without creating it
 * (for the info, which changes nothing on disk).  -1 when there is none. */
int tgl_cache_dir_name(const char *configured, char *dir, size_t size);

/* The files of another kind of entry in the same directory (the CUDA
 * backend's modules, src/cuda/modules.c) go through the same listing,
 * eviction, clearing and info, told apart by their names. */
typedef bool (*tgl_cache_entry_fn)(const char *name);

/* Whether name is a key (TGL_CACHE_KEY_HEX lowercase hex digits) followed
 * by ext exactly. */
bool tgl_cache_is_key_file(const char *name, const char *ext);

/* tgl_cache_evict for the entries is_entry accepts; sweep: also delete
 * the compile temporaries that no live process owns (the CPU's). */
void tgl_cache_evict_entries(const char *dir, int64_t max_bytes, const char *keep,
                             tgl_cache_entry_fn is_entry, bool sweep);

/* Deletes the entries of dir that is_entry accepts (with sweep, the
 * orphaned temporaries too); a directory not there has none.  Errors name
 * tgl_cache_clear. */
tgl_status tgl_cache_clear_entries(const char *dir, tgl_cache_entry_fn is_entry, bool sweep,
                                   tgl_errbuf *err);

/* The text of tgl_cache_info for the entries of dir that is_entry accepts
 * (malloc'd in *text): directory, entries, bytes, max_bytes. */
tgl_status tgl_cache_info_entries(const char *dir, tgl_cache_entry_fn is_entry,
                                  int64_t max_bytes, char **text, tgl_errbuf *err);

#endif /* TGL_CGINT_H */
