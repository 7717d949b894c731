/*
 * k_nnet.c — the CUDA op kernels of the neural-network family: softmax,
 * log_softmax, softmax_crossentropy and its gradient, class_xent and
 * class_xent_delta, batch_norm, batch_norm_stats, batch_norm_grad.  What
 * each op computes is in engine/ops/nnet.c, classxent.c and batch_norm.c;
 * the device code is src/cuda/kernels/nnet.cu, whose header says how rows
 * are shared out.  Inputs are device arrays at any strides (in elements,
 * possibly 0 or negative); outputs are written at their own strides.
 * float32 and float64, as the ops allow.
 *
 * The host reads device memory only where the CPU kernel raises an error
 * on the data: the crossentropy's labels (an error word the kernel sets,
 * read back once per call) and class_xent's classes, targets and owners
 * (copied back once per call, checked with the CPU's messages and grouped
 * by owner here, then sent back as the kernel's index).
 */
#include "cuda/cuda_int.h"
#include "cuda/kernels/nnet.cuh"
#include "engine/engine.h"
#include "engine/ops/ops.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Blocks at most per launch: the kernels stride rows by the grid. */
#define NNET_MAX_GRID 65535u

static bool is_f32(const tgl_array *a)
{
    return a->dtype_id == TGL_FLOAT32;
}

/* "nnet_<stem>_f32" or "_f64". */
static const char *sym(char *buf, size_t n, const char *stem, bool f32)
{
    snprintf(buf, n, "nnet_%s_%s", stem, f32 ? "f32" : "f64");
    return buf;
}

static tgl_status device_ready(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in)
{
    tgl_errbuf err;
    tgl_status st = tgl_cuda_ready(&err);
    return st ? tgl_op_error(ctx, n, in, st, "%s", err.msg) : TGL_OK;
}

static tgl_status launch(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                         const char *symbol, unsigned grid, unsigned block, const void *args)
{
    tgl_errbuf err;
    tgl_status st = tgl_cuda_lib_launch(tgl_cuda_opts(ctx), "nnet", symbol, grid, block, 0, args,
                                        &err);
    return st ? tgl_op_error(ctx, n, in, st, "%s", err.msg) : TGL_OK;
}

static unsigned clamp_grid(int64_t blocks)
{
    if (blocks < 1)
        return 1;
    return blocks > (int64_t)NNET_MAX_GRID ? NNET_MAX_GRID : (unsigned)blocks;
}

/* Device scratch of n bytes, or the op's out-of-memory error. */
static tgl_status scratch(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, size_t bytes,
                          void **p)
{
    *p = tgl_cuda_alloc(bytes ? bytes : 8);
    if (!*p)
        return tgl_op_error(ctx, n, in, TGL_ENOMEM,
                            "cuda: out of device memory (%zu bytes of scratch)", bytes);
    return TGL_OK;
}

static tgl_status to_host(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, void *dst,
                          const void *src, size_t bytes)
{
    tgl_errbuf err;
    tgl_status st = tgl_cuda_drv()->memcpy(dst, src, bytes, TGL_CUDA_D2H, &err);
    return st ? tgl_op_error(ctx, n, in, st, "%s", err.msg) : TGL_OK;
}

static tgl_status to_device(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, void *dst,
                            const void *src, size_t bytes)
{
    tgl_errbuf err;
    tgl_status st = tgl_cuda_drv()->memcpy(dst, src, bytes, TGL_CUDA_H2D, &err);
    return st ? tgl_op_error(ctx, n, in, st, "%s", err.msg) : TGL_OK;
}

/* A team for rows of len elements at stride es, the next row's first
 * element at stride rs from this one's: one thread per row when the rows'
 * neighbours are adjacent and their own elements are not (a softmax down
 * the columns), else a warp per short row and a block per long one. */
static int team_for(int64_t rows, int64_t len, int64_t es, int64_t rs, unsigned *grid,
                    unsigned *block)
{
    if (es != 1 && (rs == 1 || rs == -1) && rows >= 1024) {
        *block = 256;
        *grid = clamp_grid((rows + 255) / 256);
        return TGL_NNET_TEAM_THREAD;
    }
    if (len <= 256) {
        *block = 256;
        *grid = clamp_grid((rows + 7) / 8);
        return TGL_NNET_TEAM_WARP;
    }
    /* at most 512: the float64 softmax takes 84 registers a thread, and
     * 1024 threads of it would not fit an SM's 64K */
    *block = len >= 2048 ? 512 : 256;
    *grid = clamp_grid(rows);
    return TGL_NNET_TEAM_BLOCK;
}

/* ---- softmax, log_softmax ---------------------------------------------- */

static tgl_status softmax_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                 tgl_array *out)
{
    const tgl_array *x = in[0];
    int axis = (int)n->p.i[0];
    if (out->size == 0)
        return TGL_OK;
    tgl_status st = device_ready(ctx, n, in);
    if (st)
        return st;
    tgl_nnet_softmax_args a;
    memset(&a, 0, sizeof a);
    a.x = x->data;
    a.out = out->data;
    a.len = x->shape[axis];
    a.rows = out->size / a.len;
    a.xs = x->strides[axis];
    a.os = out->strides[axis];
    a.logsm = n->op == TGL_OP_LOG_SOFTMAX;
    for (int d = 0; d < x->ndim; d++) {
        if (d == axis || x->shape[d] == 1)
            continue; /* a length-1 axis moves nothing */
        a.oshape[a.nouter] = x->shape[d];
        a.oxs[a.nouter] = x->strides[d];
        a.oos[a.nouter] = out->strides[d];
        a.nouter++;
    }
    unsigned grid, block;
    a.team = team_for(a.rows, a.len, a.xs, a.nouter ? a.oxs[a.nouter - 1] : 0, &grid, &block);
    char s[64];
    return launch(ctx, n, in, sym(s, sizeof s, "softmax", is_f32(x)), grid, block, &a);
}

/* ---- softmax_crossentropy and its gradient ------------------------------ */

/* in: x, labels (loss) or dy, x, labels (dx). */
static tgl_status xent_run(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, tgl_array *out,
                           bool dx)
{
    const tgl_array *x = in[dx ? 1 : 0], *y = in[dx ? 2 : 1], *dy = dx ? in[0] : NULL;
    int64_t rows = x->shape[0], cols = x->shape[1];
    if (rows == 0)
        return TGL_OK;
    tgl_status st = device_ready(ctx, n, in);
    if (st)
        return st;
    tgl_nnet_xent_args a;
    memset(&a, 0, sizeof a);
    a.x = x->data;
    a.labels = y->data;
    a.dy = dy ? dy->data : NULL;
    a.out = out->data;
    a.rows = rows;
    a.cols = cols;
    a.xs0 = x->strides[0];
    a.xs1 = x->strides[1];
    a.ls = y->strides[0];
    a.dys = dy ? dy->strides[0] : 0;
    a.os0 = out->strides[0];
    a.os1 = dx ? out->strides[1] : 0;
    a.label_i64 = y->dtype_id == TGL_INT64;
    void *errw;
    if ((st = scratch(ctx, n, in, sizeof(long long), &errw)))
        return st;
    a.err = errw;
    tgl_errbuf err;
    if ((st = tgl_cuda_drv()->memset(errw, 0x7f, sizeof(long long), &err))) {
        tgl_cuda_free(errw);
        return tgl_op_error(ctx, n, in, st, "%s", err.msg);
    }
    unsigned grid, block;
    a.team = team_for(rows, cols, a.xs1, a.xs0, &grid, &block);
    char s[64];
    st = launch(ctx, n, in, sym(s, sizeof s, "xent", is_f32(x)), grid, block, &a);
    long long bad = INT64_MAX;
    if (!st)
        st = to_host(ctx, n, in, &bad, errw, sizeof bad);
    tgl_cuda_free(errw);
    if (st || bad >= rows)
        return st;
    /* the first bad row: its label, for the CPU's message */
    int64_t label = 0;
    size_t es = y->dtype_id == TGL_INT64 ? 8 : 4;
    union {
        int32_t i32;
        int64_t i64;
    } v;
    if ((st = to_host(ctx, n, in, &v, (const char *)y->data + (ptrdiff_t)(bad * y->strides[0]) *
                                                                (ptrdiff_t)es,
                      es)))
        return st;
    label = es == 8 ? v.i64 : v.i32;
    return tgl_op_error(ctx, n, in, TGL_EINVAL,
                        "label %" PRId64 " at position %" PRId64 " is not in 1..%" PRId64, label,
                        (int64_t)bad + 1, cols);
}

static tgl_status xent_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              tgl_array *out)
{
    return xent_run(ctx, n, in, out, false);
}

static tgl_status xent_dx_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                 tgl_array *out)
{
    return xent_run(ctx, n, in, out, true);
}

/* ---- class_xent, class_xent_delta ---------------------------------------- */

/* Gathers the integer vector v (any stride, int32/int64) into dst (int64,
 * contiguous, device). */
static tgl_status gather_ints(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              const tgl_array *v, int64_t *dst)
{
    if (v->size == 0)
        return TGL_OK;
    tgl_nnet_gather_args a = {.src = v->data, .dst = dst, .n = v->shape[0], .s = v->strides[0],
                              .i64 = v->dtype_id == TGL_INT64};
    unsigned grid, block;
    tgl_cuda_geometry(v->shape[0], &grid, &block);
    return launch(ctx, n, in, "nnet_gather_i64", grid, block, &a);
}

/* mode 0: the loss; 1: class deltas; 2: hidden and word-row deltas (as
 * the CPU kernel's modes). */
static tgl_status cx_run(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, tgl_array *out,
                         int mode)
{
    const tgl_array *h = in[0], *wc = in[1], *ws = in[2];
    int64_t T = h->shape[0], H = h->shape[1], C = wc->shape[0], K = ws->shape[0];
    if (T + K == 0)
        return TGL_OK;
    tgl_status st = device_ready(ctx, n, in);
    if (st)
        return st;
    /* the integer inputs, to the host in one copy: cls (T), tgt (T),
     * owner (K) */
    size_t ni = (size_t)(2 * T + K);
    int64_t *hi = malloc(sizeof(int64_t) * (ni + (size_t)(2 * T + T + 1 + K)));
    if (!hi)
        return tgl_op_error(ctx, n, in, TGL_ENOMEM, "out of memory");
    void *di = NULL, *dx = NULL, *z = NULL;
    if ((st = scratch(ctx, n, in, sizeof(int64_t) * ni, &di)))
        goto done;
    if ((st = gather_ints(ctx, n, in, in[3], (int64_t *)di)) ||
        (st = gather_ints(ctx, n, in, in[4], (int64_t *)di + T)) ||
        (st = gather_ints(ctx, n, in, in[5], (int64_t *)di + 2 * T)) ||
        (st = to_host(ctx, n, in, hi, di, sizeof(int64_t) * ni)))
        goto done;
    const int64_t *cls = hi, *tgt = hi + T, *own = hi + 2 * T;
    /* the kernel's index: cls0 (T), tgt0 (T), first (T + 1), list (K) */
    int64_t *ix = hi + ni, *cls0 = ix, *tgt0 = ix + T, *first = ix + 2 * T, *list = first + T + 1;
    for (int64_t t = 0; t <= T; t++)
        first[t] = 0;
    for (int64_t j = 0; j < K; j++) {
        if (own[j] < 1 || own[j] > T) {
            st = tgl_op_error(ctx, n, in, TGL_EINVAL,
                              "owner %" PRId64 " of word row %" PRId64 " is not in 1..%" PRId64,
                              own[j], j + 1, T);
            goto done;
        }
        first[own[j]]++;
    }
    for (int64_t t = 0; t < T; t++)
        first[t + 1] += first[t];
    /* cls0 walks each row's list while it is filled, then gets the
     * classes */
    for (int64_t t = 0; t < T; t++)
        cls0[t] = first[t];
    for (int64_t j = 0; j < K; j++)
        list[cls0[own[j] - 1]++] = j;
    for (int64_t t = 0; t < T; t++) {
        int64_t c = cls[t], w = tgt[t];
        if (c < 1 || c > C) {
            st = tgl_op_error(ctx, n, in, TGL_EINVAL,
                              "class %" PRId64 " of row %" PRId64 " is not in 1..%" PRId64, c,
                              t + 1, C);
            goto done;
        }
        if (w < 1 || w > K) {
            st = tgl_op_error(ctx, n, in, TGL_EINVAL,
                              "target %" PRId64 " of row %" PRId64 " is not in 1..%" PRId64, w,
                              t + 1, K);
            goto done;
        }
        if (own[w - 1] != t + 1) {
            st = tgl_op_error(ctx, n, in, TGL_EINVAL,
                              "target %" PRId64 " of row %" PRId64
                              " is a word row owned by row %" PRId64 ", not by row %" PRId64,
                              w, t + 1, own[w - 1], t + 1);
            goto done;
        }
        cls0[t] = c - 1;
        tgt0[t] = w - 1;
    }
    if (out->size == 0)
        goto done;
    size_t nx = (size_t)(3 * T + 1 + K);
    if ((st = scratch(ctx, n, in, sizeof(int64_t) * nx, &dx)) ||
        (st = to_device(ctx, n, in, dx, ix, sizeof(int64_t) * nx)))
        goto done;
    size_t nz = (size_t)((mode <= 1 ? T * C : 0) + (mode != 1 ? K : 0));
    if ((st = scratch(ctx, n, in, sizeof(double) * nz, &z)))
        goto done;
    tgl_nnet_cx_args a;
    memset(&a, 0, sizeof a);
    a.h = h->data, a.wc = wc->data, a.ws = ws->data, a.out = out->data;
    a.cls = (const int64_t *)dx;
    a.tgt = a.cls + T;
    a.first = a.tgt + T;
    a.list = a.first + T + 1;
    a.z = z;
    a.T = T, a.C = C, a.K = K, a.H = H;
    a.hs0 = h->strides[0], a.hs1 = h->strides[1];
    a.wcs0 = wc->strides[0], a.wcs1 = wc->strides[1];
    a.wss0 = ws->strides[0], a.wss1 = ws->strides[1];
    a.mode = mode;
    char s[64];
    st = launch(ctx, n, in, sym(s, sizeof s, "cx", is_f32(h)), clamp_grid(T), 256, &a);
done:
    /* stream-ordered: the kernel that reads these runs before any reuse */
    if (di)
        tgl_cuda_free(di);
    if (dx)
        tgl_cuda_free(dx);
    if (z)
        tgl_cuda_free(z);
    free(hi);
    return st;
}

static tgl_status cx_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                            tgl_array *out)
{
    return cx_run(ctx, n, in, out, 0);
}

static tgl_status delta_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                               tgl_array *out)
{
    return cx_run(ctx, n, in, out, 1 + (int)n->p.i[0]);
}

/* ---- batch normalisation ------------------------------------------------- */

/* x (and the arrays walked with it: a[1], a[2] may be NULL) as (N, C, R...)
 * with the axes after C merged where every array's strides allow and
 * right-aligned, as the CPU kernel (src/cpu/kernels/batch_norm.c). */
static void bn_geom_of(const tgl_array *x, const tgl_array *g, const tgl_array *o,
                       tgl_nnet_bn_geom *q)
{
    const tgl_array *a[3] = {x, g, o};
    int64_t tn[3], ts[3][3];
    int k = 0;
    for (int d = 2; d < x->ndim; d++) {
        if (x->shape[d] == 1)
            continue;
        bool merge = k > 0;
        for (int i = 0; i < 3 && merge; i++)
            if (a[i])
                merge = ts[i][k - 1] == a[i]->strides[d] * x->shape[d];
        if (merge)
            tn[k - 1] *= x->shape[d];
        else
            tn[k++] = x->shape[d];
        for (int i = 0; i < 3; i++)
            ts[i][k - 1] = a[i] ? a[i]->strides[d] : 0;
    }
    int64_t *st[3] = {q->xs, q->gs, q->os};
    for (int d = 0; d < 5; d++) {
        int j = d - (5 - k);
        q->n[d] = d < 2 ? x->shape[d] : j >= 0 ? tn[j] : 1;
        for (int i = 0; i < 3; i++)
            st[i][d] = !a[i] ? 0 : d < 2 ? a[i]->strides[d] : j >= 0 ? ts[i][j] : 0;
    }
}

static int64_t bn_per_channel(const tgl_nnet_bn_geom *q)
{
    return q->n[0] * q->n[2] * q->n[3] * q->n[4];
}

/* The per-channel sums (nnet.cuh) of x, or of g and g (x - mean). */
static tgl_status bn_sums(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                          const tgl_nnet_bn_geom *q, const tgl_array *x, const tgl_array *g,
                          const tgl_array *mean, double *s1, double *s2, double *k)
{
    tgl_nnet_bn_sums_args a;
    memset(&a, 0, sizeof a);
    a.x = x->data;
    a.g = g ? g->data : NULL;
    a.mean = mean ? mean->data : NULL;
    a.ms = mean ? mean->strides[0] : 0;
    a.s1 = s1, a.s2 = s2, a.k = k;
    a.geo = *q;
    int64_t C = q->n[1], M = bn_per_channel(q);
    a.rows = q->n[2] == 1 && q->n[3] == 1 && q->n[4] == 1;
    unsigned grid, block;
    if (a.rows) {
        block = M >= 256 ? 256 : M >= 64 ? 128 : 32;
        grid = clamp_grid((C + 31) / 32);
    } else {
        block = M >= 2048 ? 512 : 256;
        grid = clamp_grid(C);
    }
    char s[64];
    return launch(ctx, n, in, sym(s, sizeof s, "bn_sums", is_f32(x)), grid, block, &a);
}

static tgl_status bn_prep(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                          tgl_nnet_bn_prep_args *a, bool f32)
{
    unsigned grid, block;
    tgl_cuda_geometry(a->C, &grid, &block);
    char s[64];
    return launch(ctx, n, in, sym(s, sizeof s, "bn_prep", f32), grid, block, a);
}

static tgl_status bn_apply(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                           const tgl_nnet_bn_geom *q, const tgl_array *x, const tgl_array *g,
                           tgl_array *out, const void *p, int mode)
{
    tgl_nnet_bn_apply_args a;
    memset(&a, 0, sizeof a);
    a.x = x->data;
    a.g = g ? g->data : NULL;
    a.out = out->data;
    a.p = p;
    a.geo = *q;
    a.total = x->size;
    a.C = q->n[1];
    a.mode = mode;
    unsigned grid, block;
    tgl_cuda_geometry(x->size, &grid, &block);
    char s[64];
    return launch(ctx, n, in, sym(s, sizeof s, "bn_apply", is_f32(x)), grid, block, &a);
}

/* in[0] = x; out[0] = mean, out[1] = var (either may be NULL). */
static tgl_status stats_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                               tgl_array *const *out, bool debug)
{
    (void)debug;
    const tgl_array *x = in[0];
    tgl_nnet_bn_geom q;
    bn_geom_of(x, NULL, NULL, &q);
    int64_t C = q.n[1], M = bn_per_channel(&q);
    if (C == 0 || M == 0 || (!out[0] && !out[1]))
        return TGL_OK;
    tgl_status st = device_ready(ctx, n, in);
    if (st)
        return st;
    double *buf;
    if ((st = scratch(ctx, n, in, sizeof(double) * 3 * (size_t)C, (void **)&buf)))
        return st;
    st = bn_sums(ctx, n, in, &q, x, NULL, NULL, buf, buf + C, buf + 2 * C);
    if (!st) {
        tgl_nnet_bn_prep_args a;
        memset(&a, 0, sizeof a);
        a.s1 = buf, a.s2 = buf + C, a.k = buf + 2 * C;
        a.out0 = out[0] ? out[0]->data : NULL;
        a.out1 = out[1] ? out[1]->data : NULL;
        a.o0s = out[0] ? out[0]->strides[0] : 0;
        a.o1s = out[1] ? out[1]->strides[0] : 0;
        a.C = C;
        a.m = (double)M;
        a.mode = 0;
        st = bn_prep(ctx, n, in, &a, is_f32(x));
    }
    tgl_cuda_free(buf);
    return st;
}

/* in = x, mean, var [, w, b]; p.f[0] = eps. */
static tgl_status bn_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                            tgl_array *out)
{
    const tgl_array *x = in[0];
    if (x->size == 0)
        return TGL_OK;
    tgl_status st = device_ready(ctx, n, in);
    if (st)
        return st;
    tgl_nnet_bn_geom q;
    bn_geom_of(x, NULL, out, &q);
    int64_t C = q.n[1];
    size_t es = tgl_dtype_size(x->dtype_id);
    void *p;
    if ((st = scratch(ctx, n, in, es * 3 * (size_t)C, &p)))
        return st;
    tgl_nnet_bn_prep_args a;
    memset(&a, 0, sizeof a);
    a.mean = in[1]->data, a.ms = in[1]->strides[0];
    a.var = in[2]->data, a.vs = in[2]->strides[0];
    if (n->nin == 5) {
        a.w = in[3]->data, a.wst = in[3]->strides[0];
        a.b = in[4]->data, a.bst = in[4]->strides[0];
    }
    a.p = p;
    a.C = C;
    a.eps = n->p.f[0];
    a.mode = 1;
    st = bn_prep(ctx, n, in, &a, is_f32(x));
    if (!st)
        st = bn_apply(ctx, n, in, &q, x, NULL, out, p, 1);
    tgl_cuda_free(p);
    return st;
}

/* in = x, g, mean, var [, w]; out = dx, sg, sgx (any may be NULL). */
static tgl_status grad_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              tgl_array *const *out, bool debug)
{
    (void)debug;
    const tgl_array *x = in[0], *g = in[1];
    tgl_nnet_bn_geom q;
    bn_geom_of(x, g, out[0], &q);
    int64_t C = q.n[1], M = bn_per_channel(&q);
    if (C == 0 || M == 0)
        return TGL_OK;
    tgl_status st = device_ready(ctx, n, in);
    if (st)
        return st;
    size_t es = tgl_dtype_size(x->dtype_id);
    char *buf;
    if ((st = scratch(ctx, n, in, (sizeof(double) * 2 + es * 4) * (size_t)C, (void **)&buf)))
        return st;
    double *s1 = (double *)buf, *s2 = s1 + C;
    void *p = buf + sizeof(double) * 2 * (size_t)C;
    st = bn_sums(ctx, n, in, &q, x, g, in[2], s1, s2, NULL);
    if (!st) {
        tgl_nnet_bn_prep_args a;
        memset(&a, 0, sizeof a);
        a.s1 = s1, a.s2 = s2;
        a.mean = in[2]->data, a.ms = in[2]->strides[0];
        a.var = in[3]->data, a.vs = in[3]->strides[0];
        if (n->nin == 5)
            a.w = in[4]->data, a.wst = in[4]->strides[0];
        a.out0 = out[1] ? out[1]->data : NULL;
        a.out1 = out[2] ? out[2]->data : NULL;
        a.o0s = out[1] ? out[1]->strides[0] : 0;
        a.o1s = out[2] ? out[2]->strides[0] : 0;
        a.p = p;
        a.C = C;
        a.m = (double)M;
        a.eps = n->p.f[0];
        a.mode = 2;
        st = bn_prep(ctx, n, in, &a, is_f32(x));
    }
    if (!st && out[0] && x->size > 0)
        st = bn_apply(ctx, n, in, &q, x, g, out[0], p, 2);
    tgl_cuda_free(buf);
    return st;
}

const tgl_op_kernel tgl_cuda_kernel_softmax = {.run = softmax_kernel};
const tgl_op_kernel tgl_cuda_kernel_log_softmax = {.run = softmax_kernel};
const tgl_op_kernel tgl_cuda_kernel_softmax_xent = {.run = xent_kernel};
const tgl_op_kernel tgl_cuda_kernel_softmax_xent_dx = {.run = xent_dx_kernel};
const tgl_op_kernel tgl_cuda_kernel_class_xent = {.run = cx_kernel};
const tgl_op_kernel tgl_cuda_kernel_class_xent_delta = {.run = delta_kernel};
const tgl_op_kernel tgl_cuda_kernel_batch_norm = {.run = bn_kernel};
const tgl_op_kernel tgl_cuda_kernel_batch_norm_stats = {.run_n = stats_kernel};
const tgl_op_kernel tgl_cuda_kernel_batch_norm_grad = {.run_n = grad_kernel};
