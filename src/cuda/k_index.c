/*
 * k_index.c — the CUDA kernels of the indexing family (the host side;
 * device code: kernels/index.cu, argument structs: kernels/index.cuh):
 * INC_SUBTENSOR, ADV_SUBTENSOR, ADV_INC_SUBTENSOR (engine/ops/subtensor.c)
 * and ONE_HOT (engine/ops/nnet.c).  They compute what the CPU kernels
 * compute (src/cpu/kernels/subtensor.c, nnet.c) and fail with the same
 * messages; index resolution is the engine's (engine/ops/subtensor.h), so
 * bounds held in 0-d inputs are read through their backend.
 *
 * Index checks.  Index arrays and labels are data on the device; a kernel
 * checks each one and stores the first bad position (atomicMin) into an
 * error word.  The host reads that word back (a D2H copy, so a wait for
 * the stream) on every call of ADV_SUBTENSOR, ADV_INC_SUBTENSOR and
 * ONE_HOT: the price of reporting a bad index as the CPU does, naming the
 * index and its position, before anything is written.  On a bad position
 * the host rereads the few index values there (tgl_array_read_elem) to
 * word the message.
 *
 * Repeated positions (ADV_INC_SUBTENSOR).  Adding uses atomics (float32,
 * float64, int32, int64 natively; uint8 through a uint32 accumulator;
 * bool's "or" is a store of 1), so float sums of repeated positions land
 * in whatever order the atomics do: within rounding of the CPU's C-order
 * sum, not bit for bit.  Setting follows the CPU's promise (subtensor.c's
 * update_grad: only the last write reaches y): the highest result position
 * writing each indexed cell wins, found with atomicMax before the stores.
 *
 * Shapes and layouts.  Inputs may be any strided views; the outputs the
 * caller allocates are written through their own strides, and the updates
 * run in place when the output is x's buffer (the plan's in-place update),
 * as on the CPU.  v is converted to the output's dtype first when it has
 * another (a device copy with tgl's conversions).
 */
#include "cuda/cuda_int.h"
#include "cuda/kernels/index.cuh"
#include "engine/engine.h"
#include "engine/ops/subtensor.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

_Static_assert(TGL_IDX_MAXD == TGL_MAX_DIMS, "index.cuh's TGL_IDX_MAXD must be TGL_MAX_DIMS");
_Static_assert(TGL_IDX_F32 == TGL_FLOAT32 && TGL_IDX_F64 == TGL_FLOAT64 &&
                   TGL_IDX_I32 == TGL_INT32 && TGL_IDX_I64 == TGL_INT64 &&
                   TGL_IDX_U8 == TGL_UINT8 && TGL_IDX_BOOL == TGL_BOOL,
               "index.cuh's dtype codes must be tgl's");

/* What the error word holds when no position was bad (memset 0x7f bytes:
 * above every position). */
#define NO_ERROR 0x7f7f7f7f7f7f7f7fLL

static const char *const dtype_tag[TGL_NDTYPES] = {"f32", "f64", "i32", "i64", "u8", "bool"};

/* ---- launches, scratch, copies -------------------------------------------------- */

static tgl_status launch(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                         const char *symbol, int64_t items, const void *args)
{
    unsigned grid, block;
    tgl_errbuf e;
    tgl_cuda_geometry(items, &grid, &block);
    tgl_status st =
        tgl_cuda_lib_launch(tgl_cuda_opts(ctx), "index", symbol, grid, block, 0, args, &e);
    return st ? tgl_op_error(ctx, n, in, st, "%s", e.msg) : TGL_OK;
}

/* Device scratch of nbytes (> 0), or an error naming what it was for. */
static tgl_status scratch(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, size_t nbytes,
                          const char *what, void **p)
{
    *p = tgl_cuda_alloc(nbytes);
    if (!*p)
        return tgl_op_error(ctx, n, in, TGL_ENOMEM, "out of device memory (%zu bytes for %s)",
                            nbytes, what);
    return TGL_OK;
}

static tgl_status drv_fail(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, tgl_status st,
                           const tgl_errbuf *e)
{
    return tgl_op_error(ctx, n, in, st, "%s", e->msg);
}

/* Fills a device word with byte b (0x7f: the error word's NO_ERROR). */
static tgl_status dev_memset(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, void *p,
                             int b, size_t nbytes)
{
    tgl_errbuf e;
    tgl_status st = tgl_cuda_drv()->memset(p, b, nbytes, &e);
    return st ? drv_fail(ctx, n, in, st, &e) : TGL_OK;
}

/* *w = the error word at p (a D2H copy: waits for the kernels before it). */
static tgl_status read_word(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                            const void *p, long long *w)
{
    tgl_errbuf e;
    tgl_status st = tgl_cuda_drv()->memcpy(w, p, sizeof *w, TGL_CUDA_D2H, &e);
    return st ? drv_fail(ctx, n, in, st, &e) : TGL_OK;
}

/* dst = src elementwise (same shape; dtypes may differ: tgl's conversions),
 * both device arrays of any strides. */
static tgl_status dev_copy(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, tgl_array *dst,
                           const tgl_array *src)
{
    if (src->size == 0)
        return TGL_OK;
    tgl_idx_copy_args a;
    memset(&a, 0, sizeof a);
    a.dst = dst->data;
    a.src = src->data;
    a.n = src->size;
    a.nd = src->ndim;
    a.sdt = src->dtype_id;
    a.ddt = dst->dtype_id;
    for (int d = 0; d < src->ndim; d++) {
        a.shape[d] = src->shape[d];
        a.ds[d] = dst->strides[d];
        a.ss[d] = src->strides[d];
    }
    return launch(ctx, n, in, "tgl_index_copy", a.n, &a);
}

/* *out = a on the device (a itself, retained, when it is there). */
static tgl_status on_device(tgl_ctx *ctx, tgl_array *a, tgl_array **out)
{
    return tgl_array_on_device(ctx, "cuda", a, TGL_DEVICE_CUDA, out);
}

/* *out = v on the device in dtype (a new reference). */
static tgl_status v_as(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, tgl_array *v,
                       int dtype, tgl_array **out)
{
    tgl_array *d = NULL;
    tgl_status st = on_device(ctx, v, &d);
    if (st || d->dtype_id == dtype) {
        *out = d;
        return st;
    }
    tgl_array *c = NULL;
    st = tgl_array_alloc_on(ctx, "cuda", TGL_DEVICE_CUDA, dtype, d->ndim, d->shape, false, &c);
    if (!st)
        st = dev_copy(ctx, n, in, c, d);
    tgl_array_release(d);
    if (st) {
        tgl_array_release(c);
        c = NULL;
    }
    *out = c;
    return st;
}

/* ---- INC_SUBTENSOR ------------------------------------------------------------- */

static tgl_status inc_subtensor_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                       tgl_array *out)
{
    tgl_index_region r;
    tgl_idx_update_args a;
    tgl_array *x = NULL, *v = NULL;
    tgl_errbuf e;
    tgl_status st = tgl_cuda_ready(&e);
    if (st)
        return drv_fail(ctx, n, in, st, &e);
    if ((st = tgl_subtensor_resolve(ctx, n, in, 2, out, &r)))
        return st;
    memset(&a, 0, sizeof a);
    /* the shape check first, on v as given: a bad v converts nothing */
    if ((st = tgl_subtensor_broadcast_v(ctx, n, in, in[1], n->in[1]->type, r.ndim, r.shape,
                                        "x[idx]", a.vs)))
        return st;
    if ((st = v_as(ctx, n, in, in[1], out->dtype_id, &v)) ||
        (st = tgl_subtensor_broadcast_v(ctx, n, in, v, n->in[1]->type, r.ndim, r.shape, "x[idx]",
                                        a.vs)) ||
        (st = on_device(ctx, in[0], &x)))
        goto done;
    if (!tgl_subtensor_same_buffer(out, x) && (st = dev_copy(ctx, n, in, out, x)))
        goto done;
    a.n = 1;
    for (int d = 0; d < r.ndim; d++) {
        a.shape[d] = r.shape[d];
        a.os[d] = r.strides[d];
        a.n *= r.shape[d];
    }
    if (a.n == 0)
        goto done;
    a.out = out->data;
    a.v = v->data;
    a.off = r.offset;
    a.nd = r.ndim;
    char sym[48];
    if (n->p.flags & TGL_INC_SET)
        snprintf(sym, sizeof sym, "tgl_index_update_set%zu", tgl_dtype_size(out->dtype_id));
    else
        snprintf(sym, sizeof sym, "tgl_index_update_%s_add", dtype_tag[out->dtype_id]);
    st = launch(ctx, n, in, sym, a.n, &a);
done:
    tgl_array_release(v);
    tgl_array_release(x);
    return st;
}

/* ---- advanced indexing --------------------------------------------------------- */

/* The device buffers of an advanced index: the error word, each broadcast
 * position's target offset and (setting) its cell; one block. */
typedef struct adv_bufs {
    void *block;
    long long *err;
    int64_t *pos, *cell;
    int64_t ncells;
} adv_bufs;

/* The CPU kernel's message for the first bad index position b: the value
 * of each index array there is read back and checked in order. */
static tgl_status adv_index_error(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                  int nfixed, const tgl_adv_plan *pl, int64_t b)
{
    int first = pl->lay.first, k = pl->lay.k, bnd = pl->lay.bnd;
    int64_t bi[TGL_MAX_DIMS] = {0}, rem = b;
    for (int d = bnd - 1; d >= 0; d--) {
        bi[d] = rem % pl->rshape[first + d];
        rem /= pl->rshape[first + d];
    }
    for (int j = 0; j < k; j++) {
        const tgl_array *ix = in[nfixed + j];
        int64_t e = tgl_adv_index_elem(ix, bi, bnd);
        union { int32_t i32; int64_t i64; } u;
        tgl_status st = tgl_array_read_elem(ctx, ix, e, &u);
        if (st)
            return st;
        int64_t v = ix->dtype_id == TGL_INT32 ? u.i32 : u.i64;
        int axis = first + j;
        int64_t i;
        if ((st = tgl_adv_index_check(ctx, n, in, axis, v, in[0]->shape[axis], &i)))
            return st;
    }
    return tgl_op_error(ctx, n, in, TGL_EINTERNAL,
                        "cuda: the index check flagged position %" PRId64
                        " but its indices are in range",
                        b);
}

/* Computes the target offset (strides: the target's) and, when cells,
 * the cell of each broadcast position, checking every index; ix[j]: index
 * array j on the device.  Waits for the check (read_word). */
static tgl_status adv_positions(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                int nfixed, const tgl_adv_plan *pl, tgl_array *const *ix,
                                const int64_t *strides, bool cells, adv_bufs *bf)
{
    int first = pl->lay.first, k = pl->lay.k, bnd = pl->lay.bnd;
    memset(bf, 0, sizeof *bf);
    if (pl->nb == 0)
        return TGL_OK;
    size_t nbytes = 256 + (size_t)pl->nb * sizeof(int64_t) * (cells ? 2 : 1);
    tgl_status st = scratch(ctx, n, in, nbytes, "index positions", &bf->block);
    if (st)
        return st;
    bf->err = bf->block;
    bf->pos = (int64_t *)((char *)bf->block + 256);
    bf->cell = cells ? bf->pos + pl->nb : NULL;
    tgl_idx_positions_args a;
    memset(&a, 0, sizeof a);
    a.pos = bf->pos;
    a.cell = bf->cell;
    a.err = bf->err;
    a.nb = pl->nb;
    a.k = k;
    a.bnd = bnd;
    for (int d = 0; d < bnd; d++)
        a.bshape[d] = pl->rshape[first + d];
    int64_t cs = 1;
    for (int j = k - 1; j >= 0; j--) {
        const tgl_array *t = ix[j];
        a.ix[j] = t->data;
        a.is32[j] = t->dtype_id == TGL_INT32;
        a.len[j] = in[0]->shape[first + j];
        a.ts[j] = strides[first + j];
        a.cs[j] = cs;
        cs *= a.len[j];
        for (int ja = 0; ja < t->ndim; ja++)
            if (t->shape[ja] != 1)
                a.is[j][ja + bnd - t->ndim] = t->strides[ja];
    }
    bf->ncells = cs;
    long long w = NO_ERROR;
    if ((st = dev_memset(ctx, n, in, bf->err, 0x7f, sizeof(long long))) ||
        (st = launch(ctx, n, in, "tgl_index_positions", pl->nb, &a)) ||
        (st = read_word(ctx, n, in, bf->err, &w)))
        return st;
    if (w != NO_ERROR)
        return adv_index_error(ctx, n, in, nfixed, pl, (int64_t)w);
    return TGL_OK;
}

/* The walk's strides: the target's on x's pre and post axes (0 on the
 * broadcast ones), the result-shaped side's rs as given. */
static void walk_init(tgl_idx_walk_args *a, const tgl_adv_plan *pl, const int64_t *tstrides,
                      const int64_t *rs, void *t, void *r, const adv_bufs *bf)
{
    int first = pl->lay.first, k = pl->lay.k, bnd = pl->lay.bnd;
    memset(a, 0, sizeof *a);
    a->t = t;
    a->r = r;
    a->pos = bf->pos;
    a->cell = bf->cell;
    a->nb = pl->nb;
    a->rnd = pl->rnd;
    a->first = first;
    a->bnd = bnd;
    a->n = 1;
    for (int d = 0; d < pl->rnd; d++) {
        a->rshape[d] = pl->rshape[d];
        a->n *= pl->rshape[d];
        a->rs[d] = rs[d];
        if (d < first)
            a->ts[d] = tstrides[d];
        else if (d >= first + bnd)
            a->ts[d] = tstrides[d - bnd + k];
    }
}

/* The index arrays (in[nfixed..]) on the device, into ix[]. */
static tgl_status index_arrays(tgl_ctx *ctx, tgl_array *const *in, int nfixed, int k,
                               tgl_array **ix)
{
    for (int j = 0; j < k; j++) {
        tgl_status st = on_device(ctx, in[nfixed + j], &ix[j]);
        if (st)
            return st;
    }
    return TGL_OK;
}

static void release_all(tgl_array **a, int k)
{
    for (int j = 0; j < k; j++)
        tgl_array_release(a[j]);
}

static tgl_status adv_subtensor_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                       tgl_array *out)
{
    tgl_adv_plan pl;
    tgl_array *x = NULL, *ix[TGL_MAX_DIMS] = {0};
    adv_bufs bf = {0};
    tgl_errbuf e;
    tgl_status st = tgl_cuda_ready(&e);
    if (st)
        return drv_fail(ctx, n, in, st, &e);
    if ((st = tgl_adv_subtensor_plan(ctx, n, in, 1, &pl)))
        return st;
    if (!(st = on_device(ctx, in[0], &x)) && !(st = index_arrays(ctx, in, 1, pl.lay.k, ix)) &&
        !(st = adv_positions(ctx, n, in, 1, &pl, ix, x->strides, false, &bf))) {
        tgl_idx_walk_args a;
        walk_init(&a, &pl, x->strides, out->strides, x->data, out->data, &bf);
        if (a.n > 0) {
            char sym[32];
            snprintf(sym, sizeof sym, "tgl_index_gather%zu", tgl_dtype_size(out->dtype_id));
            st = launch(ctx, n, in, sym, a.n, &a);
        }
    }
    if (bf.block)
        tgl_cuda_free(bf.block);
    release_all(ix, pl.lay.k);
    tgl_array_release(x);
    return st;
}

/* The scatter into t (contiguous, holding x) of v broadcast by vs. */
static tgl_status adv_scatter(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              const tgl_adv_plan *pl, const adv_bufs *bf, tgl_array *t,
                              const tgl_array *v, const int64_t *vs)
{
    tgl_idx_walk_args a;
    walk_init(&a, pl, t->strides, vs, t->data, v->data, bf);
    if (a.n == 0)
        return TGL_OK;
    int dt = t->dtype_id;
    char sym[40];
    tgl_status st;
    void *tmp = NULL;
    if (n->p.flags & TGL_INC_SET) {
        size_t nbytes = (size_t)bf->ncells * sizeof(long long);
        if ((st = scratch(ctx, n, in, nbytes, "the set's winners", &tmp)))
            return st;
        a.winner = tmp;
        snprintf(sym, sizeof sym, "tgl_index_scatter_set%zu", tgl_dtype_size(dt));
        if (!(st = dev_memset(ctx, n, in, tmp, 0xff, nbytes)) && /* -1: no writer */
            !(st = launch(ctx, n, in, "tgl_index_winner", a.nb, &a)))
            st = launch(ctx, n, in, sym, a.n, &a);
    } else if (dt == TGL_UINT8) {
        size_t nbytes = (size_t)t->size * sizeof(unsigned);
        if ((st = scratch(ctx, n, in, nbytes, "uint8 sums", &tmp)))
            return st;
        a.acc = tmp;
        tgl_idx_acc_args c = {.t = t->data, .acc = tmp, .n = t->size};
        if (!(st = dev_memset(ctx, n, in, tmp, 0, nbytes)) &&
            !(st = launch(ctx, n, in, "tgl_index_scatter_u8", a.n, &a)))
            st = launch(ctx, n, in, "tgl_index_acc_u8", c.n, &c);
    } else {
        snprintf(sym, sizeof sym, "tgl_index_scatter_%s", dtype_tag[dt]);
        st = launch(ctx, n, in, sym, a.n, &a);
    }
    if (tmp)
        tgl_cuda_free(tmp); /* stream-ordered: after the kernels that read it */
    return st;
}

static tgl_status adv_inc_subtensor_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                           tgl_array *out)
{
    tgl_adv_plan pl;
    tgl_array *x = NULL, *v = NULL, *work = NULL, *ix[TGL_MAX_DIMS] = {0};
    adv_bufs bf = {0};
    int64_t vs[TGL_MAX_DIMS];
    tgl_errbuf e;
    tgl_status st = tgl_cuda_ready(&e);
    if (st)
        return drv_fail(ctx, n, in, st, &e);
    if ((st = tgl_adv_subtensor_plan(ctx, n, in, 2, &pl)))
        return st;
    if ((st = tgl_subtensor_broadcast_v(ctx, n, in, in[1], n->in[1]->type, pl.rnd, pl.rshape,
                                        "x[indices]", vs)))
        return st;
    bool inplace = tgl_subtensor_same_buffer(out, in[0]);
    /* The scatter runs on a contiguous target (the accumulators and the
     * winners are indexed by its offsets): out, or a copy written back. */
    if ((st = v_as(ctx, n, in, in[1], out->dtype_id, &v)) ||
        (st = tgl_subtensor_broadcast_v(ctx, n, in, v, n->in[1]->type, pl.rnd, pl.rshape,
                                        "x[indices]", vs)) ||
        (st = on_device(ctx, in[0], &x)) || (st = index_arrays(ctx, in, 2, pl.lay.k, ix)))
        goto done;
    if (tgl_array_is_contiguous(out)) {
        tgl_array_retain(out);
        work = out;
    } else if ((st = tgl_array_alloc_on(ctx, "cuda", TGL_DEVICE_CUDA, out->dtype_id, out->ndim,
                                        out->shape, false, &work))) {
        goto done;
    }
    if ((st = adv_positions(ctx, n, in, 2, &pl, ix, work->strides, n->p.flags & TGL_INC_SET,
                            &bf)))
        goto done;
    if ((work != out || !inplace) && (st = dev_copy(ctx, n, in, work, x)))
        goto done;
    if ((st = adv_scatter(ctx, n, in, &pl, &bf, work, v, vs)))
        goto done;
    if (work != out)
        st = dev_copy(ctx, n, in, out, work);
done:
    if (bf.block)
        tgl_cuda_free(bf.block);
    release_all(ix, pl.lay.k);
    tgl_array_release(work);
    tgl_array_release(v);
    tgl_array_release(x);
    return st;
}

/* ---- ONE_HOT ------------------------------------------------------------------- */

/* The bit pattern of 1 in dtype. */
static unsigned long long one_bits(int dtype)
{
    switch (dtype) {
    case TGL_FLOAT32: { float f = 1.0f; uint32_t u; memcpy(&u, &f, 4); return u; }
    case TGL_FLOAT64: { double f = 1.0; uint64_t u; memcpy(&u, &f, 8); return u; }
    default: return 1;
    }
}

static tgl_status one_hot_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                 tgl_array *out)
{
    tgl_array *y = NULL;
    void *errw = NULL;
    tgl_errbuf e;
    tgl_status st = tgl_cuda_ready(&e);
    if (st)
        return drv_fail(ctx, n, in, st, &e);
    int64_t ncls = n->p.i[0];
    if (out->size == 0)
        return TGL_OK;
    if ((st = on_device(ctx, in[0], &y)) ||
        (st = scratch(ctx, n, in, sizeof(long long), "the label check", &errw)))
        goto done;
    tgl_idx_one_hot_args a;
    memset(&a, 0, sizeof a);
    a.out = out->data;
    a.labels = y->data;
    a.err = errw;
    a.one = one_bits(out->dtype_id);
    a.n = out->size;
    a.ncls = ncls;
    a.nd = y->ndim;
    a.ldt = y->dtype_id;
    for (int d = 0; d < y->ndim; d++) {
        a.shape[d] = y->shape[d];
        a.ls[d] = y->strides[d];
    }
    for (int d = 0; d <= y->ndim; d++)
        a.os[d] = out->strides[d];
    char sym[32];
    snprintf(sym, sizeof sym, "tgl_index_one_hot%zu", tgl_dtype_size(out->dtype_id));
    long long w = NO_ERROR;
    if ((st = dev_memset(ctx, n, in, errw, 0x7f, sizeof w)) ||
        (st = launch(ctx, n, in, sym, a.n, &a)) || (st = read_word(ctx, n, in, errw, &w)))
        goto done;
    if (w != NO_ERROR) {
        /* the CPU's message: the label and its 1-based position */
        int64_t idx[TGL_MAX_DIMS], rem = w, off = 0;
        for (int d = y->ndim - 1; d >= 0; d--) {
            idx[d] = rem % y->shape[d];
            rem /= y->shape[d];
            off += idx[d] * y->strides[d];
        }
        union { uint8_t u8; int32_t i32; int64_t i64; } u;
        if ((st = tgl_array_read_elem(ctx, y, off, &u)))
            goto done;
        int64_t v = y->dtype_id == TGL_INT32 ? u.i32 : y->dtype_id == TGL_INT64 ? u.i64 : u.u8;
        char pos[TGL_MAX_DIMS * 21 + 3] = "(";
        size_t k = 1;
        for (int d = 0; d < y->ndim; d++)
            k += (size_t)snprintf(pos + k, sizeof pos - k, "%s%" PRId64, d ? "," : "",
                                  idx[d] + 1);
        snprintf(pos + k, sizeof pos - k, ")");
        st = tgl_op_error(ctx, n, in, TGL_EINVAL,
                          "label %" PRId64 " at position %s is outside 1..%" PRId64
                          " (labels count from 1)",
                          v, pos, ncls);
    }
done:
    if (errw)
        tgl_cuda_free(errw);
    tgl_array_release(y);
    return st;
}

const tgl_op_kernel tgl_cuda_kernel_inc_subtensor = {.run = inc_subtensor_kernel};
const tgl_op_kernel tgl_cuda_kernel_adv_subtensor = {.run = adv_subtensor_kernel};
const tgl_op_kernel tgl_cuda_kernel_adv_inc_subtensor = {.run = adv_inc_subtensor_kernel};
const tgl_op_kernel tgl_cuda_kernel_one_hot = {.run = one_hot_kernel};
