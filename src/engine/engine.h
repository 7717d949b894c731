/*
 * engine.h — internal header of the engine (src/engine): the context
 * struct, storage, and helpers shared by the engine's files.  Nothing here
 * is part of the public API; generated kernels never include it.
 */
#ifndef TGL_ENGINE_H
#define TGL_ENGINE_H

#include "tgl.h"

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* The error message buffer of a context. */
#define TGL_ERRMSG_SIZE 1024

/* The node table (graph.h): the hash-consed nodes by identity, every
 * node in one list (for the collector), and the interned payloads. */
struct tgl_graph_table {
    struct tgl_node **buckets;
    size_t nbuckets;
    size_t count;          /* hash-consed nodes in the buckets             */
    size_t live;           /* every node not yet collected                 */
    size_t live_after_gc;  /* live after the last tgl_graph_collect        */
    uint32_t next_id;
    struct tgl_node *all;
    struct tgl_payload **pbuckets;
    size_t npbuckets, npayloads;
    uint32_t next_payload_id;
};

/* Settings read by the compiler and code generator (tgl_config_set). */
struct tgl_config {
    char exclude[1024];      /* ",rule,rule," names of rewrites switched off */
    int threads;             /* kernel threads; 0: all cores                 */
    char cc[256];            /* optimizing compiler command                  */
    char cflags[256];
    char cache_dir[1024];    /* "" : $TGL_CACHE_DIR or ~/.cache/tgl          */
    char compile[16];        /* tiered | sync | tcc | cc                      */
    int64_t cache_max_bytes;
    double exit_wait;        /* seconds exit waits for background compiles   */
    int whole_step;          /* step.c: 0 off, 1 bind and generate, 2 bind   */
    int device;              /* a tgl_device: where tgl_program_new puts
                                programs, tgl_node_shared variables          */
    int allow_tf32;          /* float32 products on a GPU may use TF32       */
    char env_error[2048];    /* bad TGL_* variables, one line each; "" none  */
};

/* What backends (backend.h) may read of the context: pointers into config
 * and the context, copies of its numbers.  Kept in the context and
 * refreshed by tgl_backend_opts_sync whenever config or the interrupt flag
 * change, so a kernel launch hands it over without building it. */
typedef struct tgl_backend_opts {
    const char *cc;          /* the optimizing compiler command              */
    const char *cflags;      /* its flags                                    */
    const char *cache_dir;   /* "" : $TGL_CACHE_DIR, else ~/.cache/tgl       */
    const char *compile;     /* tiered | sync | tcc | cc                     */
    int64_t cache_max_bytes; /* size cap of the kernel cache                 */
    double exit_wait;        /* seconds exit waits for background compiles   */
    int threads;             /* kernel threads in all; 0: one per online CPU */
    struct tgl_pool **pool;  /* the context's worker pool, made on first use */
    volatile int *interrupt; /* nonzero: stop with TGL_EINTERRUPT; may be NULL */
    bool allow_tf32;         /* float32 products may use TF32 (a GPU's)      */
} tgl_backend_opts;

struct tgl_ctx {
    char errmsg[TGL_ERRMSG_SIZE];
    /* Every tgl_ctx_set_error counts here and records its status: a pass
     * that calls builders which report failure as NULL (tgl_mk*) compares
     * the count before and after, instead of reading the message. */
    uint64_t nerrors;
    tgl_status last_status;
    struct tgl_config config;
    int32_t refcount;      /* the owner, plus every compiled function        */
    struct tgl_graph_table graph;  /* every node built with this context     */
    uint64_t rng_seed;     /* key of the counter-based generator            */
    uint64_t rng_offset;   /* counter blocks used since the seed was set    */
    volatile int *interrupt;  /* set by the host's SIGINT handler; may be NULL */
    int interrupt_hold;       /* > 0: interrupts wait (atomic; tgl_ctx_hold_interrupts) */
    struct tgl_pool *pool;    /* kernel threads (pool.h), made on first use     */
    tgl_backend_opts backend_opts; /* what backends read (backend.h)          */
};

/* Reference-counted, 64-byte aligned element buffer on one device, from
 * (and back to) that device's backend (backend.h). */
struct tgl_storage {
    void *base;            /* a device address                            */
    size_t nbytes;
    size_t alloc;          /* bytes allocated at base (>= nbytes)         */
    struct tgl_storage *next_free; /* array.c's cache of freed blocks     */
    int32_t refcount;      /* atomic: views may be released on any thread */
    int32_t device;        /* a tgl_device; every view of it has the same */
};

/* The owners of an array descriptor or a storage (anything with an int32_t
 * refcount), read as a sole-owner test must read it: atomically and with
 * acquire order, since another thread may drop its reference at any time
 * (an output handed to another thread, a shared value read by a call on
 * another frame); a count of 1 seen this way orders that thread's last
 * use of the buffer before our reuse of it. */
#define TGL_REFS(p) __atomic_load_n(&(p)->refcount, __ATOMIC_ACQUIRE)

/* Fails with TGL_EINVAL and a message unless cond holds.  Use inside a
 * function returning tgl_status with a tgl_ctx *ctx in scope. */
#define TGL_CHECK(cond, st, ...) \
    do { if (!(cond)) return tgl_ctx_set_error(ctx, (st), __VA_ARGS__); } while (0)

/* Like TGL_CHECK for a NULL ctx: returns TGL_EINVAL without a message. */
#define TGL_CHECK_CTX(ctx) do { if (!(ctx)) return TGL_EINVAL; } while (0)

/* True when the host asked to stop (Ctrl-C). */
static inline bool tgl_ctx_interrupted(const tgl_ctx *ctx)
{
    return ctx->interrupt && *ctx->interrupt &&
           __atomic_load_n(&ctx->interrupt_hold, __ATOMIC_RELAXED) == 0;
}

/* Between hold (+1) and release (-1) nothing polls the interrupt flag
 * (tgl_ctx_interrupted is false, fused kernels launch without it): a run
 * of work that must finish once begun, such as the deferred in-place
 * updates of shared variables, which would be left half written.  The
 * flag stays set and is seen at the next poll after the release; other
 * threads on the context wait as briefly. */
static inline void tgl_ctx_hold_interrupts(tgl_ctx *ctx, int delta)
{
    __atomic_add_fetch(&ctx->interrupt_hold, delta, __ATOMIC_RELAXED);
}

/* Fills the context's settings from the defaults and the environment. */
void tgl_config_defaults(tgl_ctx *ctx);

/* Context reference counting: compiled functions keep their context (and
 * so its nodes) alive.  tgl_ctx_free drops the owner's reference. */
void tgl_ctx_retain(tgl_ctx *ctx);
void tgl_ctx_release(tgl_ctx *ctx);

/* The most elements an array may have: 2^59, so that every byte count
 * (8-byte elements) and every stride product fits int64 with room to
 * spare.  Element and byte counts are computed in int64 everywhere. */
#define TGL_MAX_ELEMENTS ((int64_t)1 << 59)

/* Writes "(2, 3)" (a 1-d shape "(5,)") into buf of size n; returns buf. */
char *tgl_shape_str(char *buf, size_t n, int ndim, const int64_t *shape);

/* *out = a * b for sizes a, b >= 0; false (and *out untouched) when the
 * product is over TGL_MAX_ELEMENTS. */
static inline bool tgl_size_mul(int64_t a, int64_t b, int64_t *out)
{
    int64_t p;
    if (__builtin_mul_overflow(a, b, &p) || p > TGL_MAX_ELEMENTS)
        return false;
    *out = p;
    return true;
}

/* Checks dtype, ndim and shape for array constructors; fn names the caller
 * in the message (a shape over TGL_MAX_ELEMENTS is named in it too).  On
 * success *size is the element count. */
tgl_status tgl_check_shape(tgl_ctx *ctx, const char *fn, int dtype, int ndim,
                           const int64_t *shape, int64_t *size);

/* A new descriptor over a fresh storage of nbytes (zeroed when zero is
 * true), C-contiguous with the given shape, in host (cpu) memory. */
tgl_status tgl_array_alloc(tgl_ctx *ctx, const char *fn, int dtype, int ndim,
                           const int64_t *shape, bool zero, tgl_array **out);
/* tgl_array_alloc on device's memory, allocated through its backend. */
tgl_status tgl_array_alloc_on(tgl_ctx *ctx, const char *fn, int device, int dtype, int ndim,
                              const int64_t *shape, bool zero, tgl_array **out);

/* True when a has exactly ndim axes of these sizes. */
static inline bool tgl_array_has_shape(const tgl_array *a, int ndim, const int64_t *shape)
{
    if (a->ndim != ndim)
        return false;
    for (int i = 0; i < ndim; i++)
        if (a->shape[i] != shape[i])
            return false;
    return true;
}

/* Monotonic nanoseconds (the profile's timings, the pool's spin limit);
 * inline: the profiled CVM loop reads it twice per instruction. */
static inline uint64_t tgl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* a on device: a itself (retained) when it is there, else a new
 * contiguous copy there (fn names the caller in messages). */
tgl_status tgl_array_on_device(tgl_ctx *ctx, const char *fn, tgl_array *a, int device,
                               tgl_array **out);

/* Element (as double) at flat C-order position i of a contiguous buffer. */
double tgl_load_as_double(int dtype, const void *p, int64_t i);
/* Stores v converted to dtype at flat position i (saturating casts for
 * integers, v != 0 for bool, NaN -> 0 for integers). */
void tgl_store_from_double(int dtype, void *p, int64_t i, double v);

/* Fills C strides for shape. */
void tgl_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);

/* Philox4x32-10: four 32-bit words for counter ctr under key. */
void tgl_philox4x32(uint64_t ctr, uint64_t key, uint32_t out[4]);

#endif /* TGL_ENGINE_H */
