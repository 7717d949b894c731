/*
 * launch.c — running a generated kernel over arrays (tgl_cgen_launch).
 *
 * The launcher turns arrays into the kernel ABI (tgl_kernel.h): strides in
 * elements, 0 along an input's broadcast axes and, for a fused reduction,
 * along out[0]'s reduced axes.  It then simplifies the space: size-1 axes
 * go, and neighbours that every operand steps over as one longer axis are
 * merged (never a reduced axis with a kept one), so contiguous arrays of
 * any shape become one row.
 *
 * Work is split over the context's pool (engine/pool.h, handed over in the
 * tgl_backend_opts with the thread setting) by rows when there
 * are enough of them, else by columns of the rows; problems whose work
 * (elements times what one costs: operands, operations, libm calls, see
 * cost_per_element) is under PARALLEL_MIN elements of a one-op kernel
 * stay on the calling thread, where thread wake-up would cost more than
 * it saves.  A reduction accumulates in the kernel's
 * accumulator dtype (tgl_cgen_acc_dtype: double for float sums) in a buffer laid out
 * C-contiguous over the kept axes: out[0] itself when it is already that
 * buffer, else scratch converted into out[0] at the end.  Splitting a
 * reduction along its kept last axis needs nothing more; any other split
 * gives each task a private accumulator buffer, combined in task order (so
 * results do not depend on scheduling), when out[0] is small enough.
 *
 * A caller that launches the same program again and again on operands of
 * the same layout (a frame's instruction) passes a launch cache: the
 * checks, the geometry and the split are then made once per layout
 * (struct lplan), and a launch only compares shapes and strides.
 */
#include "cgen/cgint.h"
#include "engine/ops/ops.h"
#include "engine/pool.h"
#include "engine/tune.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Less work than this runs on the calling thread: tgl_tune_get's
 * kernel.parallel_min, in elements of a one-op binary kernel (two loads,
 * an operation, a store: WORK_UNIT units of cost_per_element). */
#define PARALLEL_MIN tgl_tune_get(TGL_TUNE_PARALLEL_MIN)
#define WORK_UNIT 4
/* What a call of libm's float functions costs per element, in units of
 * one load, store or arithmetic operation: their vector forms (libmvec)
 * take some 10 to 20 times an add per element on x86-64. */
#define MATH_UNITS 16
/* Largest out[0] (elements) that gets one private accumulator per task. */
#define PRIVATE_MAX 65536
/* A column split gives each task at least this many columns. */
#define COLS_MIN 1024
/* Column-split boundaries fall on multiples of this many elements, so an
 * element is in the same position of the vectorized loop (a vector lane,
 * or the scalar tail at the row's end) as when the row runs whole: the
 * vector and scalar forms of a libm function may differ in the last bit,
 * and a split must not change any result.  64 covers the widest vector
 * times gcc's unrolling. */
#define COL_ALIGN 64

typedef struct run {
    tgl_kargs base;
    tgl_kernel_fn fn;
    int ntasks, nout;
    bool by_cols;
    int64_t rows, len;
    tgl_kbuf *outs; /* ntasks * nout: per-task out[] (private accumulators) */
} run;

/* Where task t's columns start (t = ntasks: the row's end). */
static int64_t col_bound(const run *r, int t)
{
    if (t >= r->ntasks)
        return r->len;
    int64_t c = r->len * t / r->ntasks;
    return c - c % COL_ALIGN;
}

static void run_task(void *arg, int t)
{
    const run *r = arg;
    tgl_kargs a = r->base;
    if (r->by_cols) {
        a.col_begin = col_bound(r, t);
        a.col_end = col_bound(r, t + 1);
    } else {
        a.row_begin = r->rows * t / r->ntasks;
        a.row_end = r->rows * (t + 1) / r->ntasks;
    }
    if (r->outs)
        a.out = r->outs + (size_t)t * (size_t)r->nout;
    if (a.row_begin < a.row_end && a.col_begin < a.col_end)
        r->fn(&a);
}

/* ---- accumulators ---------------------------------------------------------- */

/* n accumulators of dtype adt set to the identity of op. */
static void fill_identity(void *buf, int adt, int op, int64_t n)
{
    bool mx = op == TGL_OP_MAX, mn = op == TGL_OP_MIN, prod = op == TGL_OP_PROD;
    for (int64_t i = 0; i < n; i++) {
        switch (adt) {
        case TGL_FLOAT64:
            ((double *)buf)[i] = mx ? -INFINITY : mn ? INFINITY : prod ? 1.0 : 0.0;
            break;
        case TGL_FLOAT32: ((float *)buf)[i] = mx ? -INFINITY : INFINITY; break;
        case TGL_INT64: ((int64_t *)buf)[i] = mx ? INT64_MIN : mn ? INT64_MAX : prod; break;
        case TGL_INT32: ((int32_t *)buf)[i] = mx ? INT32_MIN : INT32_MAX; break;
        case TGL_UINT8: ((uint8_t *)buf)[i] = mx ? 0 : 255; break;
        default: ((uint8_t *)buf)[i] = mn; break; /* bool */
        }
    }
}

/* dst[i] = dst[i] (op) src[i], with the kernel's rules: integer sums and
 * products wrap, max/min keep NaN. */
#define PICK(a, v, mx) ((((mx) ? (v) > (a) : (v) < (a)) || (v) != (v)) ? (v) : (a))
static void combine(void *dst, const void *src, int adt, int op, int64_t n)
{
    bool mx = op == TGL_OP_MAX;
    for (int64_t i = 0; i < n; i++) {
        switch (adt) {
        case TGL_FLOAT64: {
            double *d = (double *)dst + i, s = ((const double *)src)[i];
            *d = op == TGL_OP_SUM ? *d + s : op == TGL_OP_PROD ? *d * s : PICK(*d, s, mx);
            break;
        }
        case TGL_FLOAT32: {
            float *d = (float *)dst + i, s = ((const float *)src)[i];
            *d = PICK(*d, s, mx);
            break;
        }
        case TGL_INT64: {
            int64_t *d = (int64_t *)dst + i, s = ((const int64_t *)src)[i];
            *d = op == TGL_OP_SUM    ? (int64_t)((uint64_t)*d + (uint64_t)s)
                 : op == TGL_OP_PROD ? (int64_t)((uint64_t)*d * (uint64_t)s)
                 : (mx ? s > *d : s < *d) ? s : *d;
            break;
        }
        case TGL_INT32: {
            int32_t *d = (int32_t *)dst + i, s = ((const int32_t *)src)[i];
            *d = (mx ? s > *d : s < *d) ? s : *d;
            break;
        }
        default: { /* uint8, bool */
            uint8_t *d = (uint8_t *)dst + i, s = ((const uint8_t *)src)[i];
            *d = (mx ? s > *d : s < *d) ? s : *d;
            break;
        }
        }
    }
}

/* out (any strides) = acc (C order over out's shape, dtype adt). */
static void store_out(tgl_array *out, const void *acc, int adt)
{
    size_t es = tgl_dtype_size(adt);
    int64_t idx[TGL_MAX_DIMS] = {0}, off = 0;
    for (int64_t i = 0; i < out->size; i++) {
        if (adt == out->dtype_id)
            memcpy((char *)out->data + off * (int64_t)es, (const char *)acc + i * (int64_t)es, es);
        else /* a float sum's double accumulator into float32 */
            tgl_store_from_double(out->dtype_id, out->data, off, ((const double *)acc)[i]);
        for (int d = out->ndim - 1; d >= 0; d--) {
            off += out->strides[d];
            if (++idx[d] < out->shape[d])
                break;
            off -= out->strides[d] * out->shape[d];
            idx[d] = 0;
        }
    }
}

/* ---- the cost of the work ------------------------------------------------------ */

/* What one element of prog costs: a unit per operand loaded or stored and
 * per operation, MATH_UNITS per libm function.  A kernel whose elements
 * call tanh pays for a wake-up of the pool at far fewer elements than a
 * copy does (at batch 60 the tanh of a 500-wide hidden layer is 30000
 * elements, too few by count alone). */
static int64_t cost_per_element(const tgl_fused_prog *p)
{
    int64_t c = p->nin + p->nout;
    for (int i = 0; i < p->ninstr; i++) {
        switch (p->code[i].op) {
        case TGL_FP_INPUT:
        case TGL_FP_CONST: break;
        case TGL_OP_EXP:
        case TGL_OP_LOG:
        case TGL_OP_LOG1P:
        case TGL_OP_EXPM1:
        case TGL_OP_TANH:
        case TGL_OP_SIGMOID:
        case TGL_OP_SOFTPLUS:
        case TGL_OP_SIN:
        case TGL_OP_COS:
        case TGL_OP_POW: c += MATH_UNITS; break;
        default: c += 1; break;
        }
    }
    return c;
}

/* ---- geometry ---------------------------------------------------------------- */

static bool c_contiguous(const tgl_array *a)
{
    int64_t s = 1;
    for (int d = a->ndim - 1; d >= 0; d--) {
        if (a->shape[d] != 1 && a->strides[d] != s)
            return false;
        s *= a->shape[d];
    }
    return true;
}

/* Fails with st and a message in *err unless cond holds. */
#define CHECK(cond, st, ...) \
    do { if (!(cond)) return tgl_errbuf_set(err, (st), __VA_ARGS__); } while (0)

/* Checks the arrays against the program and computes the space's shape. */
static tgl_status check(const tgl_fused_prog *p, tgl_array *const *in, tgl_array *const *out,
                        int64_t *space, tgl_errbuf *err)
{
    int nd = p->ndim;
    for (int d = 0; d < nd; d++)
        space[d] = 1;
    for (int j = 0; j < p->nin; j++) {
        CHECK(in[j] && in[j]->ndim == nd && in[j]->dtype_id == p->in_type[j].dtype,
              TGL_EINTERNAL, "cgen: input %d of fused program %d has the wrong dtype or ndim",
              j + 1, p->id);
        for (int d = 0; d < nd; d++)
            if (!tgl_type_bcast(p->in_type[j], d) && in[j]->shape[d] != 1)
                space[d] = in[j]->shape[d];
    }
    for (int j = 0; j < p->nin; j++)
        for (int d = 0; d < nd; d++)
            CHECK(in[j]->shape[d] == space[d] || in[j]->shape[d] == 1, TGL_ESHAPE,
                  "cgen: input %d of fused program %d: size %lld on axis %d, expected %lld",
                  j + 1, p->id, (long long)in[j]->shape[d], d + 1, (long long)space[d]);
    for (int k = 0; k < p->nout; k++) {
        bool red = k == 0 && p->reduce_op >= 0;
        tgl_type t = red ? p->reduce_type : p->out_type[k];
        CHECK(out[k] && out[k]->dtype_id == t.dtype && out[k]->ndim == t.ndim, TGL_EINTERNAL,
              "cgen: output %d of fused program %d has the wrong dtype or ndim", k + 1, p->id);
        for (int d = 0, od = 0; d < nd; d++) {
            bool r = red && ((p->reduce_mask >> d) & 1u);
            if (r && !p->reduce_keepdims)
                continue;
            int64_t want = r ? 1 : space[d];
            CHECK(out[k]->shape[od] == want, TGL_ESHAPE,
                  "cgen: output %d of fused program %d: size %lld on axis %d, expected %lld",
                  k + 1, p->id, (long long)out[k]->shape[od], od + 1, (long long)want);
            od++;
        }
    }
    return TGL_OK;
}

/* Fills kb (nin + nout buffers) and the kernel's shape: strides over the
 * space, size-1 axes dropped, mergeable neighbours merged.  out[0] of a
 * reduction is described by the accumulator layout (C order over the kept
 * axes), its data set later.  Returns the kernel's ndim. */
static int geometry(const tgl_fused_prog *p, tgl_array *const *in, tgl_array *const *out,
                    const int64_t *space, tgl_kbuf *kb, int64_t *shape)
{
    int nop = p->nin + p->nout, nd = 0;
    bool red = p->reduce_op >= 0;
    /* Accumulator strides: C order over the kept axes. */
    int64_t acc[TGL_MAX_DIMS], s = 1;
    for (int d = p->ndim - 1; d >= 0; d--) {
        bool r = red && ((p->reduce_mask >> d) & 1u);
        acc[d] = r ? 0 : s;
        s *= r ? 1 : space[d];
    }
    uint32_t redk = 0; /* reduced kernel axes */
    for (int d = 0; d < p->ndim; d++) {
        if (space[d] == 1)
            continue;
        bool r = red && ((p->reduce_mask >> d) & 1u);
        for (int j = 0; j < nop; j++) {
            int64_t st;
            if (j < p->nin)
                st = in[j]->shape[d] == 1 ? 0 : in[j]->strides[d];
            else if (j == p->nin && red)
                st = acc[d];
            else
                st = out[j - p->nin]->strides[d];
            kb[j].strides[nd] = st;
        }
        /* Merge into the previous axis when every operand steps over the
         * pair as one axis. */
        bool merge = nd > 0 && ((redk >> (nd - 1)) & 1u) == r;
        for (int j = 0; merge && j < nop; j++)
            merge = kb[j].strides[nd - 1] == kb[j].strides[nd] * space[d];
        if (merge) {
            shape[nd - 1] *= space[d];
            for (int j = 0; j < nop; j++)
                kb[j].strides[nd - 1] = kb[j].strides[nd];
            continue;
        }
        shape[nd] = space[d];
        redk |= (uint32_t)r << nd;
        nd++;
    }
    if (nd == 0) {
        /* One element: any stride reads it; give each operand the one the
         * unit path expects. */
        shape[0] = 1;
        for (int j = 0; j < nop; j++)
            kb[j].strides[0] = j < p->nin ? !tgl_cgen_invariant(p, j) : !(red && j == p->nin);
        nd = 1;
    }
    return nd;
}

/* ---- the launch ----------------------------------------------------------------- */

/* What a launch decides from the operands' shapes and strides alone (the
 * geometry, the split, the accumulator layout), kept in the caller's
 * launch cache (tgl_cgen_launch's `cache`) and reused while the operands'
 * shapes, strides and the thread setting are the same: one allocation,
 * the key's sizes and strides after the struct. */
typedef struct lplan {
    int nop, threads, nth;
    int64_t total;
    tgl_kargs base;        /* geometry; data pointers set per launch */
    int64_t rows, len;
    int ntasks;
    bool by_cols, privat;
    /* then: kb[nop] (strides), key: per operand ndim, shape, strides */
} lplan;

static tgl_kbuf *plan_kb(lplan *p) { return (tgl_kbuf *)(p + 1); }
static int64_t *plan_key(lplan *p) { return (int64_t *)(plan_kb(p) + p->nop); }

/* The key of the operands: per operand ndim, then sizes, then strides. */
static size_t key_len(const tgl_fused_prog *prog, tgl_array *const *in, tgl_array *const *out)
{
    size_t n = 0;
    for (int j = 0; j < prog->nin + prog->nout; j++) {
        const tgl_array *a = j < prog->nin ? in[j] : out[j - prog->nin];
        n += 1 + 2 * (size_t)(a ? a->ndim : 0);
    }
    return n;
}

static bool key_same(const int64_t *key, const tgl_fused_prog *prog, tgl_array *const *in,
                     tgl_array *const *out)
{
    for (int j = 0; j < prog->nin + prog->nout; j++) {
        const tgl_array *a = j < prog->nin ? in[j] : out[j - prog->nin];
        if (!a || *key++ != a->ndim)
            return false;
        for (int d = 0; d < a->ndim; d++)
            if (key[d] != a->shape[d] || key[a->ndim + d] != a->strides[d])
                return false;
        key += 2 * a->ndim;
    }
    return true;
}

static void key_put(int64_t *key, const tgl_fused_prog *prog, tgl_array *const *in,
                    tgl_array *const *out)
{
    for (int j = 0; j < prog->nin + prog->nout; j++) {
        const tgl_array *a = j < prog->nin ? in[j] : out[j - prog->nin];
        *key++ = a->ndim;
        memcpy(key, a->shape, sizeof *key * (size_t)a->ndim);
        memcpy(key + a->ndim, a->strides, sizeof *key * (size_t)a->ndim);
        key += 2 * a->ndim;
    }
}

/* Computes the plan for these operands into p (kb: p's nop buffers). */
static tgl_status make_plan(const tgl_backend_opts *o, const tgl_fused_prog *prog,
                            tgl_array *const *in, tgl_array *const *out, lplan *p, tgl_kbuf *kb,
                            tgl_errbuf *err)
{
    int64_t space[TGL_MAX_DIMS];
    tgl_status st = check(prog, in, out, space, err);
    if (st)
        return st;
    int64_t total = 1;
    for (int d = 0; d < prog->ndim; d++)
        total *= space[d];
    p->total = total;
    p->threads = o->threads;
    if (total == 0)
        return TGL_OK;
    bool red = prog->reduce_op >= 0;
    int nop = prog->nin + prog->nout;
    memset(kb, 0, sizeof *kb * (size_t)nop);
    tgl_kargs *a = &p->base;
    a->ndim = geometry(prog, in, out, space, kb, a->shape);
    int L = a->ndim - 1;
    a->unit = 1;
    for (int j = 0; j < nop; j++)
        a->unit &= kb[j].strides[L] == 0 || kb[j].strides[L] == 1;
    p->len = a->shape[L];
    p->rows = total / p->len;
    a->row_begin = 0;
    a->row_end = p->rows;
    a->col_begin = 0;
    a->col_end = p->len;
    /* How to split. */
    /* The work in elements of a one-op binary kernel (saturating: a huge
     * total times a long program is simply large). */
    int64_t cpe = cost_per_element(prog);
    int64_t work = total > INT64_MAX / cpe ? INT64_MAX / WORK_UNIT : total * cpe / WORK_UNIT;
    int nth = work < PARALLEL_MIN ? 1 : tgl_pool_size(o->threads);
    p->nth = nth;
    p->privat = p->by_cols = false;
    p->ntasks = 1;
    if (nth > 1) {
        bool cols_ok = p->len >= (int64_t)nth * COLS_MIN;
        bool kept_last = !red || kb[prog->nin].strides[L] != 0;
        if (!red && p->rows >= nth) {
            p->ntasks = nth;
        } else if (kept_last && cols_ok) {
            p->ntasks = nth; /* each column is its own output element(s) */
            p->by_cols = true;
        } else if (!red && p->rows > 1) {
            p->ntasks = (int)p->rows; /* fewer rows than threads, short ones */
        } else if (red && out[0]->size <= PRIVATE_MAX && (p->rows >= nth || cols_ok)) {
            p->ntasks = nth;
            p->by_cols = p->rows < nth;
            p->privat = true;
        }
    }
    return TGL_OK;
}

void tgl_cgen_launch_cache_free(void *cache)
{
    free(cache);
}

bool tgl_cgen_plan_single(const void *cache, tgl_kargs *base, const tgl_kbuf **kb)
{
    lplan *p = (lplan *)cache;
    if (!p || p->ntasks != 1 || p->total == 0)
        return false;
    *base = p->base;
    *kb = plan_kb(p);
    return true;
}

tgl_status tgl_cgen_launch(const tgl_backend_opts *o, const tgl_fused_prog *prog, tgl_kernel_fn fn,
                           tgl_array *const *in, tgl_array *const *out, void **cache,
                           tgl_errbuf *err)
{
    CHECK(o && prog && fn && (in || prog->nin == 0) && out, TGL_EINVAL,
          "tgl_cgen_launch: NULL argument");
    int nop = prog->nin + prog->nout;
    /* The plan: the cached one when the operands match it, else a new one
     * (into the cache when there is one). */
    lplan *p = cache ? *cache : NULL;
    lplan local;
    tgl_kbuf kb_stack[8];
    tgl_kbuf *kb;
    if (p && p->nop == nop && p->threads == o->threads && key_same(plan_key(p), prog, in, out)) {
        kb = plan_kb(p);
    } else {
        size_t klen = key_len(prog, in, out);
        lplan *np = cache ? malloc(sizeof *np + sizeof(tgl_kbuf) * (size_t)nop +
                                   sizeof(int64_t) * klen)
                          : NULL;
        if (cache) {
            free(*cache);
            *cache = NULL;
        }
        if (np) {
            p = np;
            kb = plan_kb(p);
        } else {
            p = &local;
            kb = nop <= 8 ? kb_stack : calloc((size_t)nop, sizeof *kb);
            CHECK(kb, TGL_ENOMEM, "cgen: out of memory");
        }
        memset(p, 0, sizeof *p);
        p->nop = nop;
        tgl_status st = make_plan(o, prog, in, out, p, kb, err);
        if (st) {
            if (p != &local)
                free(p);
            else if (kb != kb_stack)
                free(kb);
            return st;
        }
        if (p != &local) {
            key_put(plan_key(p), prog, in, out);
            *cache = p;
        }
    }
    tgl_status st = TGL_OK;
    if (o->interrupt && *o->interrupt) {
        st = tgl_errbuf_set(err, TGL_EINTERRUPT, "interrupted");
        goto done;
    }
    bool red = prog->reduce_op >= 0;
    int adt = tgl_cgen_acc_dtype(prog), op = prog->reduce_op;
    tgl_array *o0 = out[0];
    size_t aes = red ? tgl_dtype_size(adt) : 0;
    if (p->total == 0) {
        if (!red || o0->size == 0)
            goto done;
        if (op == TGL_OP_MAX || op == TGL_OP_MIN) {
            st = tgl_errbuf_set(err, TGL_ESHAPE,
                                "zero-size reduction (%s of no elements is undefined)",
                                tgl_op_name(op));
            goto done;
        }
        void *a = malloc((size_t)o0->size * aes);
        if (!a) {
            st = tgl_errbuf_set(err, TGL_ENOMEM, "cgen: out of memory");
            goto done;
        }
        fill_identity(a, adt, op, o0->size);
        store_out(o0, a, adt);
        free(a);
        goto done;
    }

    run r = {.fn = fn, .nout = prog->nout, .base = p->base, .ntasks = p->ntasks,
             .by_cols = p->by_cols, .rows = p->rows, .len = p->len};
    tgl_kargs *a = &r.base;
    for (int j = 0; j < nop; j++)
        kb[j].data = j < prog->nin ? in[j]->data : out[j - prog->nin]->data;
    a->in = kb;
    a->out = kb + prog->nin;
    bool privat = p->privat;

    /* Accumulator buffers: task 0 writes out[0] itself when it already has
     * the accumulator's dtype and layout. */
    void *scratch = NULL;
    char *acc0 = NULL;
    if (red) {
        bool direct = adt == o0->dtype_id && c_contiguous(o0);
        int nbuf = privat ? r.ntasks : 1;
        size_t n = (size_t)o0->size * aes;
        scratch = malloc(n * (size_t)(nbuf - direct) + 1);
        r.outs = privat ? malloc((size_t)nbuf * (size_t)prog->nout * sizeof *r.outs) : NULL;
        if (!scratch || (privat && !r.outs)) {
            free(scratch);
            free(r.outs);
            st = tgl_errbuf_set(err, TGL_ENOMEM, "cgen: out of memory");
            goto done;
        }
        acc0 = direct ? o0->data : scratch;
        char *next = direct ? scratch : (char *)scratch + n;
        kb[prog->nin].data = acc0;
        for (size_t t = 0; t < (size_t)nbuf; t++) {
            char *buf = t == 0 ? acc0 : next + (t - 1) * n;
            fill_identity(buf, adt, op, o0->size);
            if (privat) {
                memcpy(r.outs + t * (size_t)prog->nout, a->out,
                       (size_t)prog->nout * sizeof *r.outs);
                r.outs[t * (size_t)prog->nout].data = buf;
            }
        }
    }

    if (r.ntasks > 1)
        tgl_pool_run_in(o->pool, o->threads, r.ntasks, run_task, &r);
    else
        fn(a);

    if (red) {
        if (privat)
            for (int t = 1; t < r.ntasks; t++)
                combine(acc0, r.outs[(size_t)t * (size_t)prog->nout].data, adt, op, o0->size);
        if (acc0 != o0->data)
            store_out(o0, acc0, adt);
    }
    free(scratch);
    free(r.outs);
done:
    if (p == &local && kb != kb_stack)
        free(kb);
    return st;
}
