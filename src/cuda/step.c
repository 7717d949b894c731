/*
 * step.c — whole steps on the GPU (engine/backend.h's step entries): a
 * bound straight-line step (engine/step.c) replayed as CUDA Graphs.
 *
 * The engine hands over the step's first part as items: a fused kernel to
 * run inline (its operands' addresses in the engine's D table), or a
 * callback into the engine for everything else (cuBLAS products, the other
 * op kernels, views, the call's outputs).  Each item says whether it is
 * `fixed`: it reads and writes the step's own buffers, or views and
 * shared values whose addresses the engine can check (TGL_STEP_CB_PIN /
 * TGL_STEP_CB_SAME).
 *
 * A segment is a maximal run of items that may be replayed: fixed, not
 * timed (profile), not reading a caller's array through the D table
 * (prep), and not marked eager.  On its first run a segment is captured
 * (driver capture_begin; the items issue their device work, which is
 * recorded rather than run; capture_end) and its graph launched; later
 * runs check that the pinned operands are where they were and launch the
 * graph again: one launch for the whole segment instead of one per
 * kernel, and no host work per op.  The other items run as the engine
 * would run them, between the segments, on the same stream.
 *
 * When a check fails (an operand moved: the user's input array, a shared
 * variable given a new value), the first item whose operands moved is
 * marked eager for the life of the step and the segments are recut, so a
 * step settles after a call or two with only the items that follow the
 * caller's arrays running eagerly.  When an item fails inside a capture
 * (it did something a capture cannot hold, such as reading a value back
 * to the host), that item runs eagerly from then on and the segment is
 * cut around it; when the capture itself fails, the segment runs eagerly.  Scratch
 * blocks freed during a capture are held by its graph (runtime.c's hold),
 * since every replay reads them.
 */
#include "cuda/cuda_int.h"
#include "engine/fused_prog.h"

#include <stdlib.h>
#include <string.h>

enum { SEG_UNTRIED, SEG_CAPTURED, SEG_NEVER };

typedef struct step_item {
    const tgl_fused_prog *prog; /* inline fused kernel, or NULL: callback  */
    void *geometry;             /* its launch geometry (fused.c)           */
    int32_t *data;              /* D index per operand                     */
    int32_t nops;
    int32_t prep, fixed, timed;
    int32_t eager;              /* never in a segment                      */
} step_item;

typedef struct segment {
    int32_t first, end;         /* items [first, end)                      */
    int32_t state;
    tgl_cuda_graph *graph;
    void *held;                 /* blocks the graph's work reads           */
} segment;

typedef struct cuda_step {
    tgl_kernel_ref head;
    int32_t n;
    step_item *it;
    segment *seg;
    int32_t nseg;
    int32_t *seg_of;            /* per item: its segment, or -1            */
} cuda_step;

static bool capturable(const step_item *it)
{
    return it->fixed && !it->prep && !it->timed && !it->eager;
}

static void segment_free(segment *g)
{
    const tgl_cuda_driver *drv = tgl_cuda_drv();
    if (g->graph && drv->graph_free)
        drv->graph_free(g->graph);
    g->graph = NULL;
    tgl_cuda_hold_release(g->held);
    g->held = NULL;
}

/* Cuts the items into segments of two or more capturable items (a graph
 * of one kernel saves nothing).  A segment of the old cut that is also
 * one of the new keeps its graph and state; the others' are freed. */
static void recut(cuda_step *s)
{
    segment *old = s->nseg ? malloc(sizeof *old * (size_t)s->nseg) : NULL;
    int32_t nold = old ? s->nseg : 0;
    if (old)
        memcpy(old, s->seg, sizeof *old * (size_t)nold);
    else
        for (int32_t k = 0; k < s->nseg; k++)
            segment_free(&s->seg[k]);
    s->nseg = 0;
    for (int32_t i = 0; i < s->n; i++)
        s->seg_of[i] = -1;
    for (int32_t i = 0; tgl_cuda_drv()->capture_begin && i < s->n;) {
        if (!capturable(&s->it[i])) {
            i++;
            continue;
        }
        int32_t j = i;
        while (j < s->n && capturable(&s->it[j]))
            j++;
        if (j - i >= 2) {
            segment *g = &s->seg[s->nseg];
            *g = (segment){.first = i, .end = j, .state = SEG_UNTRIED};
            for (int32_t k = 0; k < nold; k++)
                if (old[k].first == i && old[k].end == j) {
                    *g = old[k];
                    old[k].graph = NULL;
                    old[k].held = NULL;
                }
            for (int32_t k = i; k < j; k++)
                s->seg_of[k] = s->nseg;
            s->nseg++;
        }
        i = j;
    }
    for (int32_t k = 0; k < nold; k++)
        segment_free(&old[k]);
    free(old);
}

bool tgl_cuda_step_inlinable(const struct tgl_fused_prog *prog, const void *launch_cache,
                             size_t *scratch_bytes)
{
    *scratch_bytes = 0;
    /* elementwise programs with a device kernel (reductions run their
     * nodes' kernels: a callback) */
    return prog->reduce_op < 0 && launch_cache != NULL &&
           prog->kernel[TGL_DEVICE_CUDA] != NULL &&
           __atomic_load_n(&prog->kernel[TGL_DEVICE_CUDA]->tier, __ATOMIC_ACQUIRE) == 2;
}

void tgl_cuda_step_free(tgl_kernel_ref *k)
{
    cuda_step *s = (cuda_step *)k;
    if (!s)
        return;
    for (int32_t k2 = 0; k2 < s->nseg; k2++)
        segment_free(&s->seg[k2]);
    for (int32_t i = 0; i < s->n; i++) {
        free(s->it[i].data);
        tgl_cuda_fused_geometry_free(s->it[i].geometry);
    }
    free(s->it);
    free(s->seg);
    free(s->seg_of);
    free(s);
}

tgl_status tgl_cuda_step_prepare(const tgl_backend_opts *o, const tgl_step_item *items, int n,
                                 tgl_kernel_ref **out, tgl_errbuf *err)
{
    (void)o;
    cuda_step *s = calloc(1, sizeof *s);
    if (!s)
        return tgl_errbuf_set(err, TGL_ENOMEM, "cuda: out of memory (whole step)");
    s->head.backend = tgl_backend_get(TGL_DEVICE_CUDA);
    s->n = n;
    s->it = calloc((size_t)n + 1, sizeof *s->it);
    s->seg = calloc((size_t)n + 1, sizeof *s->seg);
    s->seg_of = calloc((size_t)n + 1, sizeof *s->seg_of);
    if (!s->it || !s->seg || !s->seg_of) {
        tgl_cuda_step_free(&s->head);
        return tgl_errbuf_set(err, TGL_ENOMEM, "cuda: out of memory (whole step)");
    }
    for (int i = 0; i < n; i++) {
        const tgl_step_item *src = &items[i];
        step_item *it = &s->it[i];
        it->prep = src->prep;
        it->fixed = src->fixed;
        it->timed = src->timed;
        if (!src->prog)
            continue;
        it->prog = src->prog;
        it->nops = src->prog->nin + src->prog->nout;
        it->data = malloc(sizeof *it->data * (size_t)it->nops);
        it->geometry = tgl_cuda_fused_geometry_dup(src->launch_cache);
        if (!it->data || !it->geometry) {
            tgl_cuda_step_free(&s->head);
            return tgl_errbuf_set(err, TGL_ENOMEM, "cuda: out of memory (whole step)");
        }
        memcpy(it->data, src->data, sizeof *it->data * (size_t)it->nops);
    }
    recut(s);
    __atomic_store_n(&s->head.tier, 2, __ATOMIC_RELEASE);
    *out = &s->head;
    return TGL_OK;
}

/* Runs item i as the engine would (inline kernel or callback): 0 or a
 * nonzero status. */
static int run_item(cuda_step *s, int32_t i, void *const *D, void *env, tgl_step_cb cb)
{
    step_item *it = &s->it[i];
    if (it->prep) {
        int r = cb(env, -1 - i);
        if (r == -1)
            return 0; /* the engine ran it itself */
        if (r)
            return r;
    }
    if (!it->prog)
        return cb(env, i);
    if (it->timed)
        cb(env, TGL_STEP_CB_START + i);
    void *ptrs[64];
    void **p = it->nops <= 64 ? ptrs : malloc(sizeof *p * (size_t)it->nops);
    if (!p)
        return cb(env, i); /* let the engine run it (and report) */
    for (int32_t j = 0; j < it->nops; j++)
        p[j] = D[it->data[j]];
    tgl_errbuf e;
    tgl_status st = tgl_cuda_fused_launch_at(it->prog, it->geometry, p, &e);
    if (p != ptrs)
        free(p);
    if (it->timed)
        cb(env, TGL_STEP_CB_END + i);
    if (st)
        return cb(env, i); /* the engine's own path reports it, naming the op */
    return 0;
}

/* Whether every callback item of g still has its operands where they were
 * when it was captured; else marks the first one that moved eager. */
static bool segment_same(cuda_step *s, segment *g, void *env, tgl_step_cb cb)
{
    for (int32_t i = g->first; i < g->end; i++) {
        if (s->it[i].prog)
            continue; /* an inline kernel without prep: fixed buffers only */
        if (cb(env, TGL_STEP_CB_SAME + i) != 0) {
            s->it[i].eager = 1;
            return false;
        }
    }
    return true;
}

/* Captures g's items and launches the graph; false when the capture could
 * not be made (nothing ran: the caller runs the items), with *failed the
 * item that failed inside the capture (one that reads a value back, say),
 * or -1 when the capture itself failed. */
static bool capture(cuda_step *s, segment *g, void *const *D, void *env, tgl_step_cb cb,
                    int32_t *failed)
{
    const tgl_cuda_driver *drv = tgl_cuda_drv();
    tgl_errbuf e;
    *failed = -1;
    if (drv->capture_begin(&e))
        return false;
    tgl_cuda_hold_begin();
    int r = 0;
    for (int32_t i = g->first; i < g->end && !r; i++)
        if ((r = run_item(s, i, D, env, cb)) != 0)
            *failed = i;
    tgl_cuda_graph *graph = NULL;
    tgl_status st = drv->capture_end(&graph, &e);
    void *held = tgl_cuda_hold_end();
    if (r || st || !graph) {
        if (graph)
            drv->graph_free(graph);
        tgl_cuda_hold_release(held);
        return false;
    }
    for (int32_t i = g->first; i < g->end; i++)
        if (!s->it[i].prog && cb(env, TGL_STEP_CB_PIN + i) != 0) {
            drv->graph_free(graph);
            tgl_cuda_hold_release(held);
            return false;
        }
    if (drv->graph_launch(graph, &e)) {
        drv->graph_free(graph);
        tgl_cuda_hold_release(held);
        return false;
    }
    g->graph = graph;
    g->held = held;
    g->state = SEG_CAPTURED;
    return true;
}

int tgl_cuda_step_run(tgl_kernel_ref *k, void *const *D, void *env, tgl_step_cb cb)
{
    cuda_step *s = (cuda_step *)k;
    const tgl_cuda_driver *drv = tgl_cuda_drv();
    for (int32_t i = 0; i < s->n;) {
        int32_t gi = s->seg_of[i];
        if (gi < 0) {
            int r = run_item(s, i, D, env, cb);
            if (r)
                return r;
            i++;
            continue;
        }
        segment *g = &s->seg[gi];
        if (g->state == SEG_CAPTURED) {
            if (!segment_same(s, g, env, cb)) {
                recut(s); /* the moved item is eager now; i is unchanged */
                continue;
            }
            tgl_errbuf e;
            if (!drv->graph_launch(g->graph, &e)) {
                i = g->end;
                continue;
            }
            g->state = SEG_NEVER; /* the replay failed: run it as it is */
            segment_free(g);
        } else if (g->state == SEG_UNTRIED) {
            int32_t failed;
            if (capture(s, g, D, env, cb, &failed)) {
                i = g->end;
                continue;
            }
            /* nothing of the segment ran: run it now; then the item that
             * could not be captured runs eagerly from now on and the rest
             * is cut again (a capture failure of the whole segment: it
             * stays eager) */
            int32_t first = g->first, end = g->end;
            if (failed >= 0) {
                s->it[failed].eager = 1;
                recut(s);
            } else {
                g->state = SEG_NEVER;
            }
            for (int32_t j = first; j < end; j++) {
                int r = run_item(s, j, D, env, cb);
                if (r)
                    return r;
            }
            i = end;
            continue;
        }
        for (int32_t j = g->first; j < g->end; j++) {
            int r = run_item(s, j, D, env, cb);
            if (r)
                return r;
        }
        i = g->end;
    }
    return 0;
}
