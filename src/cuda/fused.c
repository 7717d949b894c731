/*
 * fused.c — fused programs on the CUDA device (engine/backend.h's
 * prepare, wait, release, launch, launch_cache_free): each program
 * rendered as a CUDA kernel (cgen/render_cuda.c, whose header defines
 * the kernel's ABI) and compiled into a module by modules.c (NVRTC, the
 * disk cache, one module per source per process).
 *
 * Tiers.  A program the renderer does not take (a fused reduction, too
 * many operands for a launch's parameters) gets a kernel at tier 0: the
 * engine then runs the program's nodes' own kernels one by one
 * (engine/ops/fused.c's reference path, with the CUDA op kernels).  Any
 * other program gets tier 2 at once, and its code at its first launch.
 * A source NVRTC rejects is a tgl bug: the error (TGL_EINTERNAL, from
 * that launch) carries NVRTC's log.
 *
 * One compile per function.  prepare takes one program, but compiling
 * each alone costs one NVRTC run per program (~0.15 s; the emulator's
 * host compiler, seconds).  So prepare only renders the program (to know
 * its tier) and queues it; the first launch of any queued kernel renders
 * every queued program into one source (render_cuda takes n) and
 * compiles it once: compiling a function prepares all its programs
 * before it runs any, so a function's kernels come from one compile.
 * The queue's order is the preparation order, so the same script makes
 * the same source, and the disk cache (modules.c) hits on the next run.
 * No background compiles: wait has nothing to wait for.  A whole step
 * (step.c) launches only kernels that have run once, so no compile
 * happens inside a graph capture.
 *
 * Launch.  The space is the outputs' shape (a scalar: one axis of 1);
 * each operand's strides are the array's, in elements, and 0 on an
 * input's broadcast axes (its size there is 1).  The launch cache keeps
 * what launch decides from the operands' layouts (their shapes and
 * strides): the space, the operands' strides and the geometry
 * (tgl_cuda_geometry of the element count), reused while the layouts are
 * the same; a whole step (step.c) keeps a copy and launches with it over
 * the data pointers it is given (tgl_cuda_fused_launch_at).
 */
#include "cuda/cuda_int.h"
#include "cuda/backend_cuda.h"
#include "cgen/cgint.h"
#include "cgen/render_cuda.h"
#include "engine/fused_prog.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cuda_kernel {
    tgl_kernel_ref head;          /* tier 0: no code; 2: f, or compiled at first launch */
    tgl_cuda_func *f;             /* atomic: NULL until compiled                */
    const tgl_fused_prog *prog;   /* outlives the kernel (backend.h)            */
    struct cuda_kernel *prev, *next; /* the pending list, while f is NULL       */
    char symbol[40];
} cuda_kernel;

/* Kernels prepared and not compiled yet, in the order prepared (so the
 * batch a function makes, and its cache key, is the same every run).
 * The lock is held over a batch's compile, so a release waits for it
 * rather than freeing a kernel the batch is using. */
static struct {
    pthread_mutex_t lock;
    cuda_kernel *head, *tail;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* At most this many programs in one source: NVRTC's time grows with it. */
#define BATCH_MAX 128

static void pending_remove(cuda_kernel *k)
{
    if (k->prev)
        k->prev->next = k->next;
    else if (P.head == k)
        P.head = k->next;
    if (k->next)
        k->next->prev = k->prev;
    else if (P.tail == k)
        P.tail = k->prev;
    k->prev = k->next = NULL;
}

/* Compiles the pending kernels, in batches, until k has its code (k is
 * pending, or was compiled by another thread meanwhile). */
static tgl_status compile_pending(const tgl_backend_opts *o, cuda_kernel *k, tgl_errbuf *err)
{
    tgl_status st = TGL_OK;
    bool alone = false; /* after a batch failed: k by itself */
    pthread_mutex_lock(&P.lock);
    while (!st && !__atomic_load_n(&k->f, __ATOMIC_ACQUIRE)) {
        /* The batch: k first, then the others in order, symbols once
         * (programs that compute the same share a symbol and a kernel). */
        cuda_kernel *batch[BATCH_MAX];
        const tgl_fused_prog *ps[BATCH_MAX];
        const char *syms[BATCH_MAX];
        int n = 0, np = 0;
        batch[n++] = k;
        for (cuda_kernel *q = P.head; q && n < BATCH_MAX && !alone; q = q->next)
            if (q != k)
                batch[n++] = q;
        for (int i = 0; i < n; i++) {
            bool dup = false;
            for (int j = 0; j < np && !dup; j++)
                dup = strcmp(syms[j], batch[i]->symbol) == 0;
            if (!dup) {
                ps[np] = batch[i]->prog;
                syms[np++] = batch[i]->symbol;
            }
        }
        char *src = NULL;
        tgl_errbuf rerr;
        st = tgl_cgen_render_cuda(ps, syms, np, &src, &rerr);
        if (st)
            st = tgl_errbuf_set(err, st == TGL_EINVAL ? TGL_EINTERNAL : st, "%s", rerr.msg);
        tgl_cuda_module *m = NULL;
        if (!st)
            st = tgl_cuda_module_from_source(o, src, "tgl_fused.cu", &m, err);
        free(src);
        if (st && n > 1) {
            /* Another queued program may be what failed: k alone, so one
             * bad program does not stop every kernel queued with it (it
             * fails at its own launch). */
            alone = true;
            st = TGL_OK;
            continue;
        }
        for (int i = 0; i < n && !st; i++) {
            tgl_cuda_func *f;
            st = tgl_cuda_drv()->func(m, batch[i]->symbol, &f, err);
            if (!st) {
                __atomic_store_n(&batch[i]->f, f, __ATOMIC_RELEASE);
                pending_remove(batch[i]);
            }
        }
    }
    pthread_mutex_unlock(&P.lock);
    return st;
}

/* A launch cache (and a whole step's copy of one: step.c): what launch
 * decided from the operands' layouts.  key: each operand's shape and
 * strides (nd each), the layout it was decided for. */
typedef struct geometry {
    size_t bytes;        /* of this whole block (dup copies it) */
    int32_t nop, nd;
    unsigned grid, block;
    tgl_cuda_space S;
    int64_t *key;        /* nop * 2 * nd, after ops             */
    tgl_cuda_operand ops[]; /* data NULL: set per launch          */
} geometry;

tgl_status tgl_cuda_fused_prepare(const tgl_backend_opts *o, const tgl_fused_prog *prog,
                                  tgl_kernel_ref **out, tgl_errbuf *err)
{
    (void)o; /* the options the compile reads are the first launch's */
    *out = NULL;
    if (!prog)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda: no fused program to prepare");
    cuda_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return tgl_errbuf_set(err, TGL_ENOMEM, "cuda: out of memory");
    k->head.backend = &tgl_backend_cuda;
    snprintf(k->symbol, sizeof k->symbol, "tgl_fused_%016" PRIx64, tgl_cgen_digest(prog));
    const tgl_fused_prog *ps[1] = {prog};
    const char *syms[1] = {k->symbol};
    char *src = NULL;
    tgl_errbuf rerr;
    tgl_status st = tgl_cgen_render_cuda(ps, syms, 1, &src, &rerr);
    if (st == TGL_EINVAL) {
        /* Not a program for these kernels: the reference path runs it. */
        *out = &k->head;
        return TGL_OK;
    }
    if (st) {
        free(k);
        return tgl_errbuf_set(err, st, "%s", rerr.msg);
    }
    free(src);
    /* The device must be there now (a clear error at compile time);
     * the code is compiled at the first launch, with every program
     * prepared by then: one compile for a function's kernels. */
    if ((st = tgl_cuda_ready(err))) {
        free(k);
        return st;
    }
    k->prog = prog;
    pthread_mutex_lock(&P.lock);
    k->prev = P.tail;
    if (P.tail)
        P.tail->next = k;
    else
        P.head = k;
    P.tail = k;
    pthread_mutex_unlock(&P.lock);
    __atomic_store_n(&k->head.tier, 2, __ATOMIC_RELEASE);
    *out = &k->head;
    return TGL_OK;
}

void tgl_cuda_fused_wait(tgl_kernel_ref *k)
{
    (void)k; /* no background compiles: a kernel compiles at its first launch */
}

void tgl_cuda_fused_release(tgl_kernel_ref *ref)
{
    /* The module stays in modules.c's table (other programs, later
     * prepares of this one, share it). */
    cuda_kernel *k = (cuda_kernel *)ref;
    if (!k)
        return;
    pthread_mutex_lock(&P.lock);
    if (!__atomic_load_n(&k->f, __ATOMIC_ACQUIRE))
        pending_remove(k);
    pthread_mutex_unlock(&P.lock);
    free(k);
}

void tgl_cuda_fused_launch_cache_free(void *cache)
{
    free(cache);
}

void *tgl_cuda_fused_geometry_dup(const void *launch_cache)
{
    const geometry *g = launch_cache;
    geometry *c = g ? malloc(g->bytes) : NULL;
    if (c) {
        memcpy(c, g, g->bytes);
        c->key = (int64_t *)(c->ops + c->nop);
    }
    return c;
}

void tgl_cuda_fused_geometry_free(void *g)
{
    free(g);
}

/* Launches k over g's space with the operands' data at ptrs[0..nop). */
static tgl_status launch_with(const cuda_kernel *k, const geometry *g, void *const *ptrs,
                              tgl_errbuf *err)
{
    if (g->S.n == 0)
        return TGL_OK;
    tgl_cuda_operand stack_ops[8];
    void *stack_params[9];
    tgl_cuda_operand *ops = g->nop <= 8 ? stack_ops : malloc(sizeof *ops * (size_t)g->nop);
    void **params = g->nop <= 8 ? stack_params : malloc(sizeof *params * ((size_t)g->nop + 1));
    tgl_status st;
    if (!ops || !params) {
        st = tgl_errbuf_set(err, TGL_ENOMEM, "cuda: out of memory");
    } else {
        /* The driver copies the parameters at the launch (and a capture
         * into its graph): stack storage is enough. */
        tgl_cuda_space S = g->S;
        params[0] = &S;
        for (int j = 0; j < g->nop; j++) {
            ops[j] = g->ops[j];
            ops[j].data = ptrs[j];
            params[1 + j] = &ops[j];
        }
        const unsigned grid[3] = {g->grid, 1, 1};
        st = tgl_cuda_drv()->launch(k->f, grid, g->block, 0, params, err);
    }
    if (ops != stack_ops)
        free(ops);
    if (params != stack_params)
        free(params);
    return st;
}

/* The kernel of prog, ready to launch (compiled now, with the other
 * pending ones, at its first launch), or an error. */
static tgl_status ready_kernel(const tgl_backend_opts *o, const tgl_fused_prog *prog,
                               tgl_kernel_ref *ref, tgl_errbuf *err)
{
    cuda_kernel *k = (cuda_kernel *)ref;
    if (!k || __atomic_load_n(&k->head.tier, __ATOMIC_ACQUIRE) < 2)
        return tgl_errbuf_set(err, TGL_EINTERNAL, "cuda: fused program %d has no kernel",
                              prog->id);
    if (__atomic_load_n(&k->f, __ATOMIC_ACQUIRE))
        return TGL_OK;
    return compile_pending(o, k, err);
}

tgl_status tgl_cuda_fused_launch_at(const struct tgl_fused_prog *prog, const void *geom,
                                    void *const *ptrs, tgl_errbuf *err)
{
    if (!prog || !geom || !ptrs)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda: fused launch: NULL argument");
    tgl_kernel_ref *ref = prog->kernel[TGL_DEVICE_CUDA];
    /* (a whole step's geometry comes from a launch: the kernel has its
     * code, and no options are needed to compile it) */
    tgl_status st = ready_kernel(NULL, prog, ref, err);
    const geometry *g = geom;
    if (!st && g->nop != prog->nin + prog->nout)
        st = tgl_errbuf_set(err, TGL_EINTERNAL, "cuda: fused program %d: a geometry of %d "
                            "operands", prog->id, g->nop);
    return st ? st : launch_with((const cuda_kernel *)ref, g, ptrs, err);
}

/* Whether g was decided for the layouts of the operands (in[], out[]). */
static bool same_layout(const geometry *g, const tgl_fused_prog *prog, tgl_array *const *in,
                        tgl_array *const *out)
{
    const int64_t *key = g->key;
    for (int j = 0; j < g->nop; j++) {
        const tgl_array *a = j < prog->nin ? in[j] : out[j - prog->nin];
        if (!a || a->ndim != g->nd)
            return false;
        for (int d = 0; d < g->nd; d++, key += 2)
            if (key[0] != a->shape[d] || key[1] != a->strides[d])
                return false;
    }
    return true;
}

/* Decides the geometry for the operands' layouts into a new block. */
static tgl_status make_geometry(const tgl_fused_prog *prog, tgl_array *const *in,
                                tgl_array *const *out, geometry **gout, tgl_errbuf *err)
{
    const int nd = prog->ndim, nop = prog->nin + prog->nout;
    *gout = NULL;
    if (nd < 0 || nd > TGL_CUDA_MAX_DIMS)
        return tgl_errbuf_set(err, TGL_EINTERNAL, "cuda: fused program %d has %d axes", prog->id,
                              nd);
    size_t bytes = sizeof(geometry) + sizeof(tgl_cuda_operand) * (size_t)nop +
                   sizeof(int64_t) * 2 * (size_t)nd * (size_t)nop;
    geometry *g = calloc(1, bytes);
    if (!g)
        return tgl_errbuf_set(err, TGL_ENOMEM, "cuda: out of memory");
    g->bytes = bytes;
    g->nop = nop;
    g->nd = nd;
    g->key = (int64_t *)(g->ops + nop);
    /* The space: output 0's shape, which every output has (a scalar: one
     * axis of 1). */
    tgl_cuda_space *S = &g->S;
    S->ndim = nd > 0 ? nd : 1;
    S->n = 1;
    S->shape[0] = 1;
    if (!out[0] || out[0]->ndim != nd) {
        free(g);
        return tgl_errbuf_set(err, TGL_EINTERNAL, "cuda: fused program %d: output 1 has %d axes, "
                              "the program %d", prog->id, out[0] ? out[0]->ndim : -1, nd);
    }
    for (int d = 0; d < nd; d++) {
        S->shape[d] = out[0]->shape[d];
        S->n *= S->shape[d];
    }
    int64_t *key = g->key;
    for (int j = 0; j < nop; j++) {
        const bool is_in = j < prog->nin;
        const int num = (is_in ? j : j - prog->nin) + 1;
        const tgl_array *a = is_in ? in[j] : out[j - prog->nin];
        if (!a || a->ndim != nd) {
            free(g);
            return tgl_errbuf_set(err, TGL_EINTERNAL,
                                  "cuda: fused program %d: %s %d has %d axes, the program %d",
                                  prog->id, is_in ? "input" : "output", num, a ? a->ndim : -1,
                                  nd);
        }
        for (int d = 0; d < nd; d++, key += 2) {
            bool bc = is_in && tgl_type_bcast(prog->in_type[j], d);
            if (bc ? a->shape[d] != 1 : a->shape[d] != S->shape[d]) {
                int64_t want = bc ? 1 : S->shape[d];
                free(g);
                return tgl_errbuf_set(err, TGL_ESHAPE,
                                      "cuda: fused program %d: %s %d has size %" PRId64
                                      " on axis %d, the space %" PRId64,
                                      prog->id, is_in ? "input" : "output", num, a->shape[d],
                                      d + 1, want);
            }
            /* Broadcast axes step by 0; so does any size-1 axis (one index). */
            g->ops[j].strides[d] = bc || a->shape[d] == 1 ? 0 : a->strides[d];
            key[0] = a->shape[d];
            key[1] = a->strides[d];
        }
    }
    tgl_cuda_geometry(S->n, &g->grid, &g->block);
    *gout = g;
    return TGL_OK;
}

tgl_status tgl_cuda_fused_launch(const tgl_backend_opts *o, const tgl_fused_prog *prog,
                                 tgl_kernel_ref *ref, tgl_array *const *in,
                                 tgl_array *const *out, void **cache, tgl_errbuf *err)
{
    if (!prog || (!in && prog->nin > 0) || !out)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda: fused launch: NULL argument");
    if (o && o->interrupt && *o->interrupt)
        return tgl_errbuf_set(err, TGL_EINTERRUPT, "interrupted");
    tgl_status st = ready_kernel(o, prog, ref, err);
    if (st)
        return st;
    if (o && o->interrupt && *o->interrupt)
        return tgl_errbuf_set(err, TGL_EINTERRUPT, "interrupted");
    const int nop = prog->nin + prog->nout;
    geometry *g = cache ? *cache : NULL;
    bool owned = false;
    if (!g || g->nop != nop || !same_layout(g, prog, in, out)) {
        geometry *ng;
        if ((st = make_geometry(prog, in, out, &ng, err)))
            return st;
        if (cache) {
            free(*cache);
            *cache = ng;
        } else {
            owned = true;
        }
        g = ng;
    }
    void *stack_ptrs[16];
    void **ptrs = nop <= 16 ? stack_ptrs : malloc(sizeof *ptrs * (size_t)nop);
    if (!ptrs) {
        st = tgl_errbuf_set(err, TGL_ENOMEM, "cuda: out of memory");
    } else {
        for (int j = 0; j < nop; j++)
            ptrs[j] = j < prog->nin ? in[j]->data : out[j - prog->nin]->data;
        st = launch_with((const cuda_kernel *)ref, g, ptrs, err);
    }
    if (ptrs != stack_ptrs)
        free(ptrs);
    if (owned)
        free(g);
    return st;
}
