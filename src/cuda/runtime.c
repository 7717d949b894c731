/*
 * runtime.c — the CUDA backend's runtime (cuda_int.h, "runtime"): which
 * driver runs (the real GPU, or the emulator under TGL_CUDA_EMU), the
 * device's one-time initialisation, the caching allocator, error
 * formatting, and the backend table's memory and copy entries.
 *
 * The caching allocator.  cudaMalloc and cudaFree are slow (cudaFree
 * waits for the whole device), and an engine run allocates and frees an
 * array per instruction, so freed blocks are kept and handed out again.
 * A request is rounded up to a size class: multiples of 512 bytes up to
 * 1 MiB, then four classes per power of two (2^e * 5/4, 6/4, 7/4, 8/4),
 * so rounding wastes at most a quarter of a large block.  A block is
 * never split or merged: a free block waits in its class's list for a
 * request of exactly that class.  Reuse needs no event: every kernel and
 * copy runs on the driver's one stream in issue order, so whatever
 * receives a reused block is ordered after the last reader of its former
 * owner (cuda_int.h, "Ordering").  When the driver runs out of memory the
 * cache is returned to it (tgl_cuda_empty_cache) and the request retried
 * once; a request larger than the whole device fails at once.  While a
 * graph capture is under way (step.c) freed blocks are held for the graph
 * instead (tgl_cuda_hold_begin/_end), since its replays still use them,
 * and return to the cache with the graph (tgl_cuda_hold_release).  Held
 * blocks count in `reserved`, not in `allocated`.  One mutex
 * guards the lists, the table of blocks in use (pointer -> block, for
 * tgl_cuda_free) and the statistics.
 */
#include "cuda/cuda_int.h"

#include <cublas_api.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the driver ------------------------------------------------------------ */

static const tgl_cuda_driver *chosen;
static pthread_once_t choose_once = PTHREAD_ONCE_INIT;

/* TGL_CUDA_EMU set to a nonzero value ("1", "yes"; not "", not "0"). */
static void choose(void)
{
    const char *v = getenv("TGL_CUDA_EMU");
    bool emu = v && *v && strtol(v, NULL, 10) != 0;
    if (v && *v && !emu && strspn(v, "0 \t") != strlen(v))
        emu = true; /* a word such as "on" counts as set */
    chosen = emu ? &tgl_cuda_driver_emu : &tgl_cuda_driver_real;
}

const tgl_cuda_driver *tgl_cuda_drv(void)
{
    pthread_once(&choose_once, choose);
    return chosen;
}

/* ---- errors ----------------------------------------------------------------- */

tgl_status tgl_cuda_fail(tgl_errbuf *err, tgl_status st, const char *fmt, ...)
{
    if (!err)
        return st;
    char what[TGL_ERRMSG_SIZE - 8];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tgl_errbuf_set(err, st, "cuda: %s", what);
}

/* ---- initialisation ---------------------------------------------------------- */

static pthread_once_t ready_once = PTHREAD_ONCE_INIT;
static tgl_status ready_status;
static tgl_errbuf ready_err;
static tgl_cuda_devinfo devinfo;

static void ready_init(void)
{
    const tgl_cuda_driver *drv = tgl_cuda_drv();
    if (!drv->init) {
        /* a part of the backend this build lacks (a development build) */
        ready_status = tgl_cuda_fail(&ready_err, TGL_EINTERNAL, "the '%s' driver is not built",
                                     drv->name ? drv->name : "?");
        return;
    }
    ready_status = drv->init(&devinfo, &ready_err);
    if (ready_status && !ready_err.msg[0])
        tgl_cuda_fail(&ready_err, ready_status, "initialising the device failed");
}

tgl_status tgl_cuda_ready(tgl_errbuf *err)
{
    pthread_once(&ready_once, ready_init);
    if (ready_status && err)
        *err = ready_err;
    return ready_status;
}

const tgl_cuda_devinfo *tgl_cuda_info(void)
{
    return &devinfo;
}

/* ---- the caching allocator --------------------------------------------------- */

#define SMALL_STEP ((size_t)512)
#define SMALL_MAX ((size_t)1 << 20)
#define NSMALL ((int)(SMALL_MAX / SMALL_STEP))
#define LARGE_SHIFT 20 /* the first large classes are above 2^20 */
#define NLARGE ((63 - LARGE_SHIFT + 1) * 4)
#define NCLASSES (NSMALL + NLARGE)

typedef struct block {
    void *p;
    size_t size; /* the class's size: what the driver gave */
    int cls;
    struct block *next; /* in a free list, or in a bucket of the used table */
} block;

static struct {
    pthread_mutex_t lock;
    block *free_list[NCLASSES];
    block **used;       /* hash table of blocks handed out, by pointer */
    size_t nbuckets;    /* a power of two, or 0 before the first block */
    size_t nused;
    int holding;        /* a graph capture is under way: frees go to held */
    block *held;        /* blocks freed while holding                    */
    tgl_cuda_mem_stats st;
} A = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The class of a request of n bytes and its size; -1 when n is too large
 * to round. */
static int size_class(size_t n, size_t *size)
{
    if (n == 0)
        n = 1;
    if (n <= SMALL_MAX) {
        size_t k = (n + SMALL_STEP - 1) / SMALL_STEP; /* 1 .. NSMALL */
        *size = k * SMALL_STEP;
        return (int)k - 1;
    }
    if (n > SIZE_MAX / 2)
        return -1;
    int e = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^e < n <= 2^(e+1) */
    size_t base = (size_t)1 << e, step = base >> 2;
    size_t j = (n - base + step - 1) / step; /* 1 .. 4 */
    *size = base + j * step;
    return NSMALL + (e - LARGE_SHIFT) * 4 + (int)j - 1;
}

static size_t bucket_of(const void *p, size_t nbuckets)
{
    uint64_t h = (uint64_t)(uintptr_t)p >> 8;
    h *= 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (nbuckets - 1);
}

/* Adds b to the used table (lock held); false when the table cannot grow. */
static bool used_insert(block *b)
{
    if (A.nused + 1 > A.nbuckets) {
        size_t nb = A.nbuckets ? A.nbuckets * 2 : 256;
        block **t = calloc(nb, sizeof *t);
        if (!t)
            return false;
        for (size_t i = 0; i < A.nbuckets; i++) {
            block *x = A.used[i];
            while (x) {
                block *next = x->next;
                size_t h = bucket_of(x->p, nb);
                x->next = t[h];
                t[h] = x;
                x = next;
            }
        }
        free(A.used);
        A.used = t;
        A.nbuckets = nb;
    }
    size_t h = bucket_of(b->p, A.nbuckets);
    b->next = A.used[h];
    A.used[h] = b;
    A.nused++;
    return true;
}

/* Removes and returns the used block at p (lock held); NULL: not ours. */
static block *used_remove(void *p)
{
    if (!A.nbuckets)
        return NULL;
    block **pp = &A.used[bucket_of(p, A.nbuckets)];
    for (block *b = *pp; b; pp = &b->next, b = *pp) {
        if (b->p == p) {
            *pp = b->next;
            A.nused--;
            return b;
        }
    }
    return NULL;
}

/* Returns every cached block to the driver (lock held). */
static void empty_locked(void)
{
    const tgl_cuda_driver *drv = tgl_cuda_drv();
    for (int c = 0; c < NCLASSES; c++) {
        block *b = A.free_list[c];
        A.free_list[c] = NULL;
        while (b) {
            block *next = b->next;
            if (drv->free)
                drv->free(b->p);
            A.st.reserved -= (int64_t)b->size;
            free(b);
            b = next;
        }
    }
}

void *tgl_cuda_alloc(size_t n)
{
    size_t size;
    int cls = size_class(n, &size);
    const tgl_cuda_driver *drv = tgl_cuda_drv();
    pthread_mutex_lock(&A.lock);
    A.st.n_allocs++;
    /* more than the device has never fits: no need to empty the cache or
     * to ask the driver (the emulator's memory is the host's) */
    if (cls >= 0 && devinfo.total_mem && size > devinfo.total_mem)
        cls = -1;
    block *b = cls >= 0 ? A.free_list[cls] : NULL;
    if (b) {
        A.free_list[cls] = b->next;
        A.st.n_cache_hits++;
    } else if (cls >= 0 && drv->malloc && (b = malloc(sizeof *b))) {
        tgl_errbuf e;
        void *p = NULL;
        if (drv->malloc(&p, size, &e) != TGL_OK || !p) {
            /* the cache holds memory of other classes: give it back, retry once */
            empty_locked();
            p = NULL;
            if (drv->malloc(&p, size, &e) != TGL_OK)
                p = NULL;
        }
        if (p && ((uintptr_t)p & 255u)) {
            drv->free(p); /* the contract promises 256-byte alignment */
            p = NULL;
        }
        if (!p) {
            free(b);
            b = NULL;
        } else {
            b->p = p;
            b->size = size;
            b->cls = cls;
            A.st.reserved += (int64_t)size;
            A.st.n_driver_allocs++;
        }
    }
    if (b && !used_insert(b)) {
        b->next = A.free_list[cls]; /* keep it cached; the request fails */
        A.free_list[cls] = b;
        b = NULL;
    }
    if (!b) {
        A.st.n_ooms++;
        A.st.n_allocs--;
        pthread_mutex_unlock(&A.lock);
        return NULL;
    }
    A.st.allocated += (int64_t)b->size;
    if (A.st.allocated > A.st.peak)
        A.st.peak = A.st.allocated;
    void *p = b->p;
    pthread_mutex_unlock(&A.lock);
    return p;
}

void tgl_cuda_free(void *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&A.lock);
    block *b = used_remove(p);
    if (b) {
        /* during a capture the graph's replays still read the block: held
         * for the graph, not reusable (tgl_cuda_hold_*) */
        block **list = A.holding ? &A.held : &A.free_list[b->cls];
        b->next = *list;
        *list = b;
        A.st.allocated -= (int64_t)b->size;
        A.st.n_frees++;
    }
    pthread_mutex_unlock(&A.lock);
    if (!b)
        fprintf(stderr, "tgl: cuda: freeing %p, which the allocator did not hand out "
                        "(ignored; a bug in tgl)\n", p);
}

void tgl_cuda_hold_begin(void)
{
    pthread_mutex_lock(&A.lock);
    A.holding = 1;
    pthread_mutex_unlock(&A.lock);
}

void *tgl_cuda_hold_end(void)
{
    pthread_mutex_lock(&A.lock);
    A.holding = 0;
    block *held = A.held;
    A.held = NULL;
    pthread_mutex_unlock(&A.lock);
    return held;
}

void tgl_cuda_hold_release(void *held)
{
    pthread_mutex_lock(&A.lock);
    for (block *b = held, *next; b; b = next) {
        next = b->next;
        b->next = A.free_list[b->cls];
        A.free_list[b->cls] = b;
    }
    pthread_mutex_unlock(&A.lock);
}

void tgl_cuda_memory_stats(tgl_cuda_mem_stats *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&A.lock);
    *s = A.st;
    pthread_mutex_unlock(&A.lock);
}

void tgl_cuda_empty_cache(void)
{
    pthread_mutex_lock(&A.lock);
    empty_locked();
    pthread_mutex_unlock(&A.lock);
}

/* ---- settings ------------------------------------------------------------------ */

static int allow_tf32; /* atomic */

const tgl_backend_opts *tgl_cuda_opts(tgl_ctx *ctx)
{
    __atomic_store_n(&allow_tf32, ctx->backend_opts.allow_tf32 ? 1 : 0, __ATOMIC_RELAXED);
    return &ctx->backend_opts;
}

bool tgl_cuda_allow_tf32(void)
{
    return __atomic_load_n(&allow_tf32, __ATOMIC_RELAXED) != 0;
}

/* ---- the backend table's memory entries ---------------------------------------- */

tgl_status tgl_cuda_be_ready(tgl_errbuf *err)
{
    return tgl_cuda_ready(err);
}

void *tgl_cuda_be_alloc(size_t nbytes)
{
    if (tgl_cuda_ready(NULL))
        return NULL;
    return tgl_cuda_alloc(nbytes);
}

void tgl_cuda_be_free(void *p)
{
    tgl_cuda_free(p);
}

tgl_status tgl_cuda_be_memset(void *p, int byte, size_t n, tgl_errbuf *err)
{
    tgl_status st = tgl_cuda_ready(err);
    if (st || n == 0)
        return st;
    return tgl_cuda_drv()->memset(p, byte, n, err);
}

static tgl_status copy(void *dst, const void *src, size_t n, tgl_cuda_copy_kind kind,
                       tgl_errbuf *err)
{
    tgl_status st = tgl_cuda_ready(err);
    if (st || n == 0)
        return st;
    return tgl_cuda_drv()->memcpy(dst, src, n, kind, err);
}

tgl_status tgl_cuda_be_copy_to_host(void *host, const void *src, size_t n, tgl_errbuf *err)
{
    return copy(host, src, n, TGL_CUDA_D2H, err);
}

tgl_status tgl_cuda_be_copy_from_host(void *dst, const void *host, size_t n, tgl_errbuf *err)
{
    return copy(dst, host, n, TGL_CUDA_H2D, err);
}

tgl_status tgl_cuda_be_copy(void *dst, const void *src, size_t n, tgl_errbuf *err)
{
    return copy(dst, src, n, TGL_CUDA_D2D, err);
}

static char info_text[TGL_ERRMSG_SIZE + 64];
static pthread_once_t info_once = PTHREAD_ONCE_INIT;

static void info_init(void)
{
    tgl_errbuf e;
    if (tgl_cuda_ready(&e)) {
        snprintf(info_text, sizeof info_text, "not available (%s)", e.msg);
        return;
    }
    const tgl_cuda_devinfo *d = &devinfo;
    if (tgl_cuda_drv() == &tgl_cuda_driver_real) {
        /* the cuBLAS the process loaded, not the headers' */
        int v[3] = {CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH};
        int got[3];
        if (cublasGetProperty(MAJOR_VERSION, &got[0]) == CUBLAS_STATUS_SUCCESS &&
            cublasGetProperty(MINOR_VERSION, &got[1]) == CUBLAS_STATUS_SUCCESS &&
            cublasGetProperty(PATCH_LEVEL, &got[2]) == CUBLAS_STATUS_SUCCESS)
            memcpy(v, got, sizeof v);
        snprintf(info_text, sizeof info_text, "cuBLAS %d.%d.%d on %s (sm_%d%d)", v[0], v[1], v[2],
                 d->name, d->cc_major, d->cc_minor);
    }
    else
        snprintf(info_text, sizeof info_text, "%s (sm_%d%d, emulated)", d->name, d->cc_major,
                 d->cc_minor);
}

const char *tgl_cuda_be_info(void)
{
    pthread_once(&info_once, info_init);
    return info_text;
}
