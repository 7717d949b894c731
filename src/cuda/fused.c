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
 * other program is compiled at once (no background compiles: wait has
 * nothing to wait for) and runs at tier 2.  A source NVRTC rejects is a
 * tgl bug: the error (TGL_EINTERNAL) carries NVRTC's log.
 *
 * One compile per program.  The backend's prepare takes one program, so
 * a function with k fused programs costs k NVRTC compiles the first time
 * (~0.15 s each); the disk cache makes later runs free.  render_cuda
 * takes n programs, so one compile per function would need a prepare
 * that sees the whole function (a change to engine/backend.h).
 *
 * Launch.  The space is the outputs' shape (a scalar: one axis of 1);
 * each operand's strides are the array's, in elements, and 0 on an
 * input's broadcast axes (its size there is 1).  The launch cache keeps
 * the geometry (tgl_cuda_geometry of the element count), recomputed when
 * the count changes.
 */
#include "cuda/cuda_int.h"
#include "cuda/backend_cuda.h"
#include "cgen/cgint.h"
#include "cgen/render_cuda.h"
#include "engine/fused_prog.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cuda_kernel {
    tgl_kernel_ref head; /* tier 0: no code; 2: f */
    tgl_cuda_func *f;
    char symbol[40];
} cuda_kernel;

typedef struct launch_cache {
    int64_t n;           /* the element count the geometry is for */
    unsigned grid, block;
} launch_cache;

tgl_status tgl_cuda_fused_prepare(const tgl_backend_opts *o, const tgl_fused_prog *prog,
                                  tgl_kernel_ref **out, tgl_errbuf *err)
{
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
    char name[64];
    snprintf(name, sizeof name, "%s.cu", k->symbol);
    tgl_cuda_module *m;
    st = tgl_cuda_module_from_source(o, src, name, &m, err);
    free(src);
    if (!st)
        st = tgl_cuda_drv()->func(m, k->symbol, &k->f, err);
    if (st) {
        free(k);
        return st;
    }
    __atomic_store_n(&k->head.tier, 2, __ATOMIC_RELEASE);
    *out = &k->head;
    return TGL_OK;
}

void tgl_cuda_fused_wait(tgl_kernel_ref *k)
{
    (void)k; /* compiles finish in prepare */
}

void tgl_cuda_fused_release(tgl_kernel_ref *k)
{
    /* The module stays in modules.c's table (other programs, later
     * prepares of this one, share it). */
    free(k);
}

void tgl_cuda_fused_launch_cache_free(void *cache)
{
    free(cache);
}

tgl_status tgl_cuda_fused_launch(const tgl_backend_opts *o, const tgl_fused_prog *prog,
                                 tgl_kernel_ref *ref, tgl_array *const *in,
                                 tgl_array *const *out, void **cache, tgl_errbuf *err)
{
    cuda_kernel *k = (cuda_kernel *)ref;
    if (!prog || !k || (!in && prog->nin > 0) || !out)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda: fused launch: NULL argument");
    if (__atomic_load_n(&k->head.tier, __ATOMIC_ACQUIRE) < 2 || !k->f)
        return tgl_errbuf_set(err, TGL_EINTERNAL, "cuda: fused program %d has no kernel",
                              prog->id);
    if (o && o->interrupt && *o->interrupt)
        return tgl_errbuf_set(err, TGL_EINTERRUPT, "interrupted");
    const int nd = prog->ndim, nop = prog->nin + prog->nout;
    if (nd < 0 || nd > TGL_CUDA_MAX_DIMS)
        return tgl_errbuf_set(err, TGL_EINTERNAL, "cuda: fused program %d has %d axes", prog->id,
                              nd);

    /* The space: output 0's shape; every output has it. */
    tgl_cuda_space S;
    memset(&S, 0, sizeof S);
    S.ndim = nd > 0 ? nd : 1;
    S.n = 1;
    S.shape[0] = 1;
    for (int d = 0; d < nd; d++) {
        S.shape[d] = out[0]->shape[d];
        S.n *= S.shape[d];
    }
    tgl_cuda_operand stack_ops[8];
    tgl_cuda_operand *ops = nop <= 8 ? stack_ops : calloc((size_t)nop, sizeof *ops);
    void *stack_params[9];
    void **params = nop <= 8 ? stack_params : calloc((size_t)nop + 1, sizeof *params);
    tgl_status st = TGL_OK;
    if (!ops || !params) {
        st = tgl_errbuf_set(err, TGL_ENOMEM, "cuda: out of memory");
        goto done;
    }
    for (int j = 0; j < nop && !st; j++) {
        const bool is_in = j < prog->nin;
        const tgl_array *a = is_in ? in[j] : out[j - prog->nin];
        memset(&ops[j], 0, sizeof ops[j]);
        if (!a || a->ndim != nd) {
            st = tgl_errbuf_set(err, TGL_EINTERNAL,
                                "cuda: fused program %d: %s %d has %d axes, the program %d",
                                prog->id, is_in ? "input" : "output",
                                (is_in ? j : j - prog->nin) + 1, a ? a->ndim : -1, nd);
            break;
        }
        ops[j].data = a->data;
        for (int d = 0; d < nd; d++) {
            bool bc = is_in && tgl_type_bcast(prog->in_type[j], d);
            if (bc ? a->shape[d] != 1 : a->shape[d] != S.shape[d]) {
                st = tgl_errbuf_set(err, TGL_ESHAPE,
                                    "cuda: fused program %d: %s %d has size %" PRId64
                                    " on axis %d, the space %" PRId64,
                                    prog->id, is_in ? "input" : "output",
                                    (is_in ? j : j - prog->nin) + 1, a->shape[d], d + 1,
                                    bc ? (int64_t)1 : S.shape[d]);
                break;
            }
            ops[j].strides[d] = bc || a->shape[d] == 1 ? 0 : a->strides[d];
        }
        /* A size-1 axis: any stride reaches the same element; the kernel's
         * flat test passes size-1 axes by their size. */
    }
    if (st || S.n == 0)
        goto done;

    launch_cache *lc = cache ? *cache : NULL;
    launch_cache local;
    if (!lc || lc->n != S.n) {
        if (!lc)
            lc = cache ? malloc(sizeof *lc) : NULL;
        if (!lc)
            lc = &local;
        else if (cache)
            *cache = lc;
        lc->n = S.n;
        tgl_cuda_geometry(S.n, &lc->grid, &lc->block);
    }
    params[0] = &S;
    for (int j = 0; j < nop; j++)
        params[1 + j] = &ops[j];
    const unsigned grid[3] = {lc->grid, 1, 1};
    st = tgl_cuda_drv()->launch(k->f, grid, lc->block, 0, params, err);

done:
    if (ops != stack_ops)
        free(ops);
    if (params != stack_params)
        free(params);
    return st;
}
