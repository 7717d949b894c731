/*
 * backend_sim.c — the simulated device (`sim`), a backend for testing
 * (engine/backend.h).  Chosen only with tgl.config.device = 'sim' or
 * TGL_DEVICE=sim; never by default.
 *
 * Its memory is host memory the engine cannot read: every block is a
 * mapping of its own (mmap) kept PROT_NONE, except while one of this
 * backend's own entries runs (memory, copies, BLAS, op kernels, fused
 * launches).  Such an entry makes the mappings it touches readable and
 * writable, runs the CPU backend's implementation of the same entry, and
 * protects them again.  So an engine path that dereferences device memory
 * itself, instead of going through the backend as it must for a GPU,
 * dies with SIGSEGV at the line that does it: running the specs on this
 * device proves the seam long before a GPU sees it (DESIGN.md).
 *
 * The CPU backend comes from the backend table (tgl_backend_get), never
 * from its header: backends do not know each other.
 *
 * Protection.  Entries nest (an op kernel calls the BLAS entries of its
 * output's backend, which is this one) and may run on several threads at
 * once (frames on two threads; the CPU kernels' own worker threads).  A
 * process-wide depth counts the entries in progress; the mappings opened
 * stay open until it falls back to 0, so a nested entry or another
 * thread never loses memory an entry in progress is using.  The CPU
 * kernels' worker threads all return before the entry that started them
 * does, so nothing runs on open memory after the last entry has left.
 * The depth, the open list and the table of mappings change under one
 * mutex, held only for that bookkeeping (never across the CPU work), so a
 * nested entry on a worker thread cannot deadlock.
 *
 * Fused kernels: this backend delegates.  prepare makes the CPU kernel
 * and wraps it in a kernel of its own (so the engine's launches come here
 * and run inside the protection); its tier follows the CPU kernel's.
 * Whole steps: declined (the step entries are NULL), so the engine runs
 * a bound step instruction by instruction, each through this backend.
 */
#include "engine/backend.h"
#include "engine/ops/ops.h"
#include "engine/fused_prog.h"
#include "sim/backend_sim.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- the mappings ---------------------------------------------------------- */

typedef struct mapping {
    uintptr_t base;
    size_t len;    /* bytes mapped (whole pages)               */
    bool open;     /* readable and writable now (on the open list) */
} mapping;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static mapping *maps;        /* sorted by base                          */
static size_t nmaps, capmaps;
static uintptr_t *open_list; /* bases of the open mappings              */
static size_t nopen, capopen;
static int depth;            /* entries in progress, all threads        */

static size_t page_size(void)
{
    static size_t ps;
    if (!ps) {
        long v = sysconf(_SC_PAGESIZE);
        ps = v > 0 ? (size_t)v : 4096;
    }
    return ps;
}

/* The index of the mapping holding address p, or -1 (lock held). */
static ptrdiff_t find(uintptr_t p)
{
    size_t lo = 0, hi = nmaps;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (maps[mid].base + maps[mid].len <= p)
            lo = mid + 1;
        else if (maps[mid].base > p)
            hi = mid;
        else
            return (ptrdiff_t)mid;
    }
    return -1;
}

/* Makes the mapping holding p readable and writable until the depth
 * falls to 0; false when p is not device memory (lock held). */
static bool open_at(const void *p)
{
    ptrdiff_t i = find((uintptr_t)p);
    if (i < 0)
        return false;
    mapping *m = &maps[i];
    if (m->open)
        return true;
    if (nopen == capopen) {
        size_t nc = capopen ? capopen * 2 : 64;
        uintptr_t *o = realloc(open_list, nc * sizeof *o);
        if (!o)
            abort(); /* a test device: no way to continue safely */
        open_list = o;
        capopen = nc;
    }
    if (mprotect((void *)m->base, m->len, PROT_READ | PROT_WRITE) != 0)
        abort();
    m->open = true;
    open_list[nopen++] = m->base;
    return true;
}

/* Starts an entry (lock held on return). */
static void enter_locked(void)
{
    pthread_mutex_lock(&lock);
    depth++;
}

/* Ends an entry: the last one out protects every open mapping. */
static void leave(void)
{
    pthread_mutex_lock(&lock);
    if (--depth == 0) {
        for (size_t k = 0; k < nopen; k++) {
            ptrdiff_t i = find(open_list[k]);
            if (i < 0)
                continue; /* freed while open */
            if (mprotect((void *)maps[i].base, maps[i].len, PROT_NONE) != 0)
                abort();
            maps[i].open = false;
        }
        nopen = 0;
    }
    pthread_mutex_unlock(&lock);
}

/* Enters and opens the blocks of n raw device pointers; fails (leaving)
 * naming what when one is not device memory. */
static tgl_status enter_ptrs(tgl_errbuf *err, const char *what, int n, const void *const *p)
{
    enter_locked();
    for (int k = 0; k < n; k++)
        if (!open_at(p[k])) {
            pthread_mutex_unlock(&lock);
            leave();
            return tgl_errbuf_set(err, TGL_EINVAL, "sim %s: operand %d (%p) is not sim memory",
                                  what, k + 1, p[k]);
        }
    pthread_mutex_unlock(&lock);
    return TGL_OK;
}

/* ---- memory ------------------------------------------------------------------ */

static void *sim_alloc(size_t nbytes)
{
    size_t ps = page_size();
    size_t len = (nbytes + ps - 1) / ps * ps;
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    pthread_mutex_lock(&lock);
    if (nmaps == capmaps) {
        size_t nc = capmaps ? capmaps * 2 : 256;
        mapping *m = realloc(maps, nc * sizeof *m);
        if (!m) {
            pthread_mutex_unlock(&lock);
            munmap(p, len);
            return NULL;
        }
        maps = m;
        capmaps = nc;
    }
    size_t at = nmaps;
    while (at > 0 && maps[at - 1].base > (uintptr_t)p)
        at--;
    memmove(maps + at + 1, maps + at, (nmaps - at) * sizeof *maps);
    maps[at] = (mapping){(uintptr_t)p, len, false};
    nmaps++;
    /* A block made inside one of the backend's calls (a kernel's scratch
     * on its output's device) is that call's to use: open like the rest. */
    if (depth > 0)
        open_at(p);
    pthread_mutex_unlock(&lock);
    return p;
}

static void sim_free(void *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&lock);
    ptrdiff_t i = find((uintptr_t)p);
    if (i < 0 || maps[i].base != (uintptr_t)p) {
        pthread_mutex_unlock(&lock);
        fprintf(stderr, "tgl: sim: free of %p, which is not a sim block\n", p);
        abort();
    }
    size_t len = maps[i].len;
    memmove(maps + i, maps + i + 1, (nmaps - (size_t)i - 1) * sizeof *maps);
    nmaps--;
    munmap(p, len);
    pthread_mutex_unlock(&lock);
}

static const tgl_backend *cpu(void)
{
    return tgl_backend_get(TGL_DEVICE_CPU);
}

static tgl_status sim_memset(void *p, int byte, size_t n, tgl_errbuf *err)
{
    const void *ops[1] = {p};
    tgl_status st = enter_ptrs(err, "memset", 1, ops);
    if (st)
        return st;
    st = cpu()->memset(p, byte, n, err);
    leave();
    return st;
}

static tgl_status sim_copy_to_host(void *host, const void *src, size_t n, tgl_errbuf *err)
{
    const void *ops[1] = {src};
    tgl_status st = enter_ptrs(err, "copy_to_host", 1, ops);
    if (st)
        return st;
    st = cpu()->copy_to_host(host, src, n, err);
    leave();
    return st;
}

static tgl_status sim_copy_from_host(void *dst, const void *host, size_t n, tgl_errbuf *err)
{
    const void *ops[1] = {dst};
    tgl_status st = enter_ptrs(err, "copy_from_host", 1, ops);
    if (st)
        return st;
    st = cpu()->copy_from_host(dst, host, n, err);
    leave();
    return st;
}

static tgl_status sim_copy(void *dst, const void *src, size_t n, tgl_errbuf *err)
{
    const void *ops[2] = {dst, src};
    tgl_status st = enter_ptrs(err, "copy", 2, ops);
    if (st)
        return st;
    st = cpu()->copy(dst, src, n, err);
    leave();
    return st;
}

/* ---- BLAS -------------------------------------------------------------------- */

static tgl_status sim_gemm(int dtype, bool trans_a, bool trans_b, int m, int n, int k,
                           double alpha, const void *a, int lda, const void *b, int ldb,
                           double beta, void *c, int ldc, tgl_errbuf *err)
{
    const void *ops[3] = {a, b, c};
    tgl_status st = enter_ptrs(err, "gemm", 3, ops);
    if (st)
        return st;
    st = cpu()->gemm(dtype, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, err);
    leave();
    return st;
}

static tgl_status sim_gemv(int dtype, bool trans, int rows, int cols, double alpha, const void *a,
                           int lda, const void *x, int incx, double beta, void *y, int incy,
                           tgl_errbuf *err)
{
    const void *ops[3] = {a, x, y};
    tgl_status st = enter_ptrs(err, "gemv", 3, ops);
    if (st)
        return st;
    st = cpu()->gemv(dtype, trans, rows, cols, alpha, a, lda, x, incx, beta, y, incy, err);
    leave();
    return st;
}

static tgl_status sim_ger(int dtype, int m, int n, double alpha, const void *x, int incx,
                          const void *y, int incy, void *a, int lda, tgl_errbuf *err)
{
    const void *ops[3] = {x, y, a};
    tgl_status st = enter_ptrs(err, "ger", 3, ops);
    if (st)
        return st;
    st = cpu()->ger(dtype, m, n, alpha, x, incx, y, incy, a, lda, err);
    leave();
    return st;
}

static tgl_status sim_dot(int dtype, int n, const void *x, int incx, const void *y, int incy,
                          void *out, tgl_errbuf *err)
{
    const void *ops[3] = {x, y, out};
    tgl_status st = enter_ptrs(err, "dot", 3, ops);
    if (st)
        return st;
    st = cpu()->dot(dtype, n, x, incx, y, incy, out, err);
    leave();
    return st;
}

static const char *sim_info(void)
{
    return "sim (a simulated device for testing: CPU kernels on guarded memory)";
}

/* ---- arrays: op kernels and fused launches ---------------------------------- */

/* Enters and opens the storage of every array of in[0..nin) and
 * out[0..nout) (NULL entries skipped).  Each must be a sim array: a cpu
 * array here is an engine path that hands host memory to a device
 * kernel, which a GPU could not read; fails naming which. */
static tgl_status enter_arrays(char *why, size_t whylen, int nin, tgl_array *const *in,
                               int nout, tgl_array *const *out)
{
    enter_locked();
    for (int k = 0; k < nin + nout; k++) {
        const tgl_array *a = k < nin ? in[k] : out[k - nin];
        if (!a)
            continue;
        if (a->device != TGL_DEVICE_SIM || !a->storage || !open_at(a->storage->base)) {
            pthread_mutex_unlock(&lock);
            leave();
            snprintf(why, whylen, "%s %d is on %s, not on sim", k < nin ? "input" : "output",
                     (k < nin ? k : k - nin) + 1,
                     tgl_device_name(a->device) ? tgl_device_name(a->device) : "no device");
            return TGL_EINVAL;
        }
    }
    pthread_mutex_unlock(&lock);
    return TGL_OK;
}

/* The op kernels: one pair for every op, which finds the CPU backend's
 * kernel of the node's op and runs it on the opened arrays. */
static tgl_status sim_run(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, tgl_array *out)
{
    char why[128];
    tgl_array *outs[1] = {out};
    if (enter_arrays(why, sizeof why, n->nin, in, 1, outs))
        return tgl_op_error(ctx, n, in, TGL_EINVAL, "sim: %s", why);
    tgl_status st = cpu()->op_kernel(n->op)->run(ctx, n, in, out);
    leave();
    return st;
}

static tgl_status sim_run_n(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                            tgl_array *const *out, bool debug)
{
    char why[128];
    if (enter_arrays(why, sizeof why, n->nin, in, n->nout, out))
        return tgl_op_error(ctx, n, in, TGL_EINVAL, "sim: %s", why);
    tgl_status st = cpu()->op_kernel(n->op)->run_n(ctx, n, in, out, debug);
    leave();
    return st;
}

static const tgl_op_kernel sim_single = {.run = sim_run};
static const tgl_op_kernel sim_multi = {.run_n = sim_run_n};

/* sim runs what the CPU backend runs. */
static const tgl_op_kernel *sim_op_kernel(int op)
{
    const tgl_op_kernel *k = cpu()->op_kernel(op);
    return !k ? NULL : k->run ? &sim_single : &sim_multi;
}

static bool sim_supports_op(const tgl_node *n)
{
    return !cpu()->supports_op || cpu()->supports_op(n);
}

/* A fused program's kernel on sim: the CPU backend's, wrapped. */
typedef struct sim_kernel {
    tgl_kernel_ref head;   /* backend: sim; tier: the CPU kernel's, copied */
    tgl_kernel_ref *inner; /* the CPU backend's kernel                     */
} sim_kernel;

static void sync_tier(sim_kernel *k)
{
    __atomic_store_n(&k->head.tier, __atomic_load_n(&k->inner->tier, __ATOMIC_ACQUIRE),
                     __ATOMIC_RELEASE);
}

static tgl_status sim_prepare(const tgl_backend_opts *o, const tgl_fused_prog *prog,
                              tgl_kernel_ref **out, tgl_errbuf *err)
{
    sim_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return tgl_errbuf_set(err, TGL_ENOMEM, "sim: out of memory");
    tgl_status st = cpu()->prepare(o, prog, &k->inner, err);
    if (st) {
        free(k);
        return st;
    }
    k->head.backend = &tgl_backend_sim;
    sync_tier(k);
    *out = &k->head;
    return TGL_OK;
}

static void sim_wait(tgl_kernel_ref *ref)
{
    sim_kernel *k = (sim_kernel *)ref;
    k->inner->backend->wait(k->inner);
    sync_tier(k);
}

static void sim_release(tgl_kernel_ref *ref)
{
    sim_kernel *k = (sim_kernel *)ref;
    if (!k)
        return;
    k->inner->backend->release(k->inner);
    free(k);
}

static tgl_status sim_launch(const tgl_backend_opts *o, const tgl_fused_prog *prog,
                             tgl_kernel_ref *ref, tgl_array *const *in, tgl_array *const *out,
                             void **cache, tgl_errbuf *err)
{
    sim_kernel *k = (sim_kernel *)ref;
    char why[128];
    if (enter_arrays(why, sizeof why, prog->nin, in, prog->nout, out))
        return tgl_errbuf_set(err, TGL_EINVAL, "sim: fused program %d: %s", prog->id, why);
    tgl_status st = k->inner->backend->launch(o, prog, k->inner, in, out, cache, err);
    leave();
    sync_tier(k);
    return st;
}

static void sim_launch_cache_free(void *cache)
{
    cpu()->launch_cache_free(cache);
}

const tgl_backend tgl_backend_sim = {
    .name = "sim",
    .device = TGL_DEVICE_SIM,
    .alloc = sim_alloc,
    .free = sim_free,
    .memset = sim_memset,
    .copy_to_host = sim_copy_to_host,
    .copy_from_host = sim_copy_from_host,
    .copy = sim_copy,
    .gemm = sim_gemm,
    .gemv = sim_gemv,
    .ger = sim_ger,
    .dot = sim_dot,
    .info = sim_info,
    .op_kernel = sim_op_kernel,
    .supports_op = sim_supports_op,
    .prepare = sim_prepare,
    .wait = sim_wait,
    .release = sim_release,
    .launch = sim_launch,
    .launch_cache_free = sim_launch_cache_free,
    /* whole steps: none (the engine runs bound steps op by op);
     * kernel cache and background compiles: the CPU backend's own */
};
