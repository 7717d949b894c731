/*
 * k_core.c — the CUDA op kernels of the core families (cuda_int.h):
 * elementwise ops, reductions (sum, prod, max, min), argmax/argmin,
 * axes_size, shape, concatenate, fill_like and arange.  The meanings are
 * engine/ops/{elemwise,reduce,shape}.c's; the results are the CPU kernels'
 * (src/cpu/kernels/{elemwise,reduce,shape}.c).
 *
 * Elementwise ops have no second definition here: a node runs as a
 * one-node fused program, built as the fusion pass (opt/fuse.c) builds one
 * (each operand converted to the op's compute dtype by a CAST instruction),
 * rendered by render_cuda and launched by fused.c.  The program and its
 * compiled kernel are kept per (op, dtypes, rank, broadcast pattern) in a
 * process-wide table, so each combination compiles once per process.
 *
 * Reductions pick one of two layouts from the strides: when the reduced
 * axes are innermost in memory (row sums, a full sum), a block per output
 * (and per chunk of a long reduction) whose threads read consecutive
 * elements and fold them with a block-wide tree; when the kept axes are
 * innermost (column sums), a thread per output (and chunk), neighbouring
 * threads reading neighbouring elements.  A reduction cut into chunks
 * leaves one partial accumulator per chunk and a second kernel folds them,
 * in order, into the output.
 */
#include "cuda/k_core.h"
#include "engine/fused_prog.h"
#include "engine/ops/elemwise_def.h"
#include "engine/ops/ops.h"
#include "engine/ops/reduce.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(TGL_CORE_F32 == TGL_FLOAT32 && TGL_CORE_F64 == TGL_FLOAT64 &&
                   TGL_CORE_I32 == TGL_INT32 && TGL_CORE_I64 == TGL_INT64 &&
                   TGL_CORE_U8 == TGL_UINT8 && TGL_CORE_BOOL == TGL_BOOL,
               "core.cuh's dtype codes are tgl_dtype's");
_Static_assert(TGL_CORE_MAX_DIMS == TGL_MAX_DIMS, "core.cuh holds TGL_MAX_DIMS axes");

static tgl_status op_fail(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, tgl_status st,
                          const tgl_errbuf *e)
{
    return tgl_op_error(ctx, n, in, st, "%s", e->msg);
}

/* The device is up (every entry checks: the first op may run before any
 * other device call of the process). */
#define READY(ctx, n, in)                                                                      \
    do {                                                                                       \
        tgl_errbuf e_;                                                                         \
        tgl_status s_ = tgl_cuda_ready(&e_);                                                   \
        if (s_)                                                                                \
            return op_fail(ctx, n, in, s_, &e_);                                               \
    } while (0)

static int64_t abs64(int64_t v)
{
    return v < 0 ? -v : v;
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Streaming multiprocessors, for sizing grids (1 when unknown). */
static int64_t sm_count(void)
{
    const tgl_cuda_devinfo *info = tgl_cuda_info();
    return info && info->sm_count > 0 ? info->sm_count : 1;
}

/* ---- elementwise ------------------------------------------------------------ */

/* One compiled one-node program: its key, the program, its kernel. */
typedef struct ew_entry {
    int32_t op, ndim, nin, odt;
    int32_t idt[3];
    uint32_t ibc[3];
    uint32_t obc;
    tgl_fused_prog *prog;
    tgl_kernel_ref *k;
    struct ew_entry *next;
} ew_entry;

#define EW_BUCKETS 256
static pthread_mutex_t ew_lock = PTHREAD_MUTEX_INITIALIZER;
static ew_entry *ew_table[EW_BUCKETS];
static int32_t ew_next_id = 1 << 28; /* program ids apart from the fusion pass's */

static void ew_describe(const tgl_payload *p, char *buf, size_t size)
{
    const tgl_fused_prog *f = (const tgl_fused_prog *)p;
    int op = f->ninstr ? f->code[f->ninstr - 1].op : -1;
    snprintf(buf, size, "cuda-elemwise#%d{%s}", f->id, op >= 0 ? tgl_op_name(op) : "?");
}

/* The payload's table: these programs are never interned (the table here
 * owns them for the process), so only the label is needed. */
static const tgl_payload_vt ew_vt = {.kind = "fused", .describe = ew_describe};

static void ew_key(const tgl_node *n, ew_entry *k)
{
    memset(k, 0, sizeof *k);
    k->op = n->op;
    k->ndim = n->type.ndim;
    k->nin = n->nin;
    k->odt = n->type.dtype;
    k->obc = n->type.bcast;
    for (int i = 0; i < n->nin && i < 3; i++) {
        k->idt[i] = n->in[i]->type.dtype;
        k->ibc[i] = n->in[i]->type.bcast;
    }
}

static bool ew_same(const ew_entry *a, const ew_entry *b)
{
    return a->op == b->op && a->ndim == b->ndim && a->nin == b->nin && a->odt == b->odt &&
           a->obc == b->obc && memcmp(a->idt, b->idt, sizeof a->idt) == 0 &&
           memcmp(a->ibc, b->ibc, sizeof a->ibc) == 0;
}

static unsigned ew_hash(const ew_entry *k)
{
    uint64_t h = 1469598103934665603ull;
    const int32_t v[] = {k->op, k->ndim, k->nin, k->odt, k->idt[0], k->idt[1], k->idt[2],
                         (int32_t)k->ibc[0], (int32_t)k->ibc[1], (int32_t)k->ibc[2],
                         (int32_t)k->obc};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        h = (h ^ (uint32_t)v[i]) * 1099511628211ull;
    return (unsigned)(h % EW_BUCKETS);
}

static void prog_free(tgl_fused_prog *p)
{
    if (!p)
        return;
    free(p->in_type);
    free(p->code);
    free(p->out_instr);
    free(p->out_type);
    free(p);
}

/* Node n as a one-node program: input i loaded in its own dtype and cast
 * to the op's operand dtype where they differ (as build_prog in
 * opt/fuse.c does: a CAST node's operand stays its input's dtype), then
 * the op, stored as output 0.  NULL when out of memory. */
static tgl_fused_prog *ew_program(const tgl_node *n)
{
    tgl_fused_prog *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->base.vt = &ew_vt;
    p->ndim = n->type.ndim;
    p->nin = n->nin;
    p->reduce_op = -1;
    p->in_type = calloc((size_t)n->nin + 1, sizeof *p->in_type);
    p->code = calloc((size_t)2 * n->nin + 1, sizeof *p->code);
    p->out_instr = calloc(1, sizeof *p->out_instr);
    p->out_type = calloc(1, sizeof *p->out_type);
    if (!p->in_type || !p->code || !p->out_instr || !p->out_type) {
        prog_free(p);
        return NULL;
    }
    tgl_finstr op = {0};
    op.op = n->op;
    op.dtype = n->type.dtype;
    for (int i = 0; i < n->nin; i++) {
        tgl_type t = n->in[i]->type;
        p->in_type[i] = t;
        tgl_finstr ld = {0};
        ld.op = TGL_FP_INPUT;
        ld.dtype = t.dtype;
        ld.arg[0] = i;
        int at = p->ninstr;
        p->code[p->ninstr++] = ld;
        int want = n->op == TGL_OP_CAST ? t.dtype : tgl_elemwise_operand_dtype(n, i);
        if (want != t.dtype) {
            tgl_finstr c = {0};
            c.op = TGL_OP_CAST;
            c.dtype = want;
            c.arg[0] = at;
            at = p->ninstr;
            p->code[p->ninstr++] = c;
        }
        op.arg[i] = at;
    }
    p->out_instr[0] = p->ninstr;
    p->code[p->ninstr++] = op;
    p->nout = 1;
    p->out_type[0] = n->type;
    return p;
}

bool tgl_cuda_supports_elemwise(const struct tgl_node *n)
{
    const tgl_elemwise_def *def = tgl_elemwise_get(n->op);
    if (!def || n->nin != def->arity || n->nin > 3 || n->type.ndim > TGL_CORE_MAX_DIMS)
        return false;
    if (def->kind == TGL_EW_CAST)
        return true; /* render_cuda's cast() renders every (from, to) pair */
    return tgl_elemwise_computes(def->kind, tgl_elemwise_compute_dtype(n, def->kind));
}

/* The table's entry for n, compiling it on first use.  The lock is held
 * across the compile, so a combination compiles once even when two
 * threads meet it together. */
static tgl_status ew_lookup(const tgl_backend_opts *o, const tgl_node *n, ew_entry **out,
                            tgl_errbuf *err)
{
    ew_entry key;
    ew_key(n, &key);
    unsigned h = ew_hash(&key);
    pthread_mutex_lock(&ew_lock);
    for (ew_entry *e = ew_table[h]; e; e = e->next)
        if (ew_same(e, &key)) {
            pthread_mutex_unlock(&ew_lock);
            *out = e;
            return TGL_OK;
        }
    tgl_status st = TGL_OK;
    ew_entry *e = malloc(sizeof *e);
    tgl_fused_prog *p = e ? ew_program(n) : NULL;
    if (!e || !p) {
        free(e);
        pthread_mutex_unlock(&ew_lock);
        return tgl_errbuf_set(err, TGL_ENOMEM, "cuda: out of memory");
    }
    p->id = p->base.id = ew_next_id++;
    /* An op kernel runs now: compile in the foreground, whatever the
     * context's tiering says for fused programs. */
    tgl_backend_opts so = *o;
    so.compile = "sync";
    tgl_kernel_ref *k = NULL;
    st = tgl_cuda_fused_prepare(&so, p, &k, err);
    if (!st && k) {
        tgl_cuda_fused_wait(k);
        if (__atomic_load_n(&k->tier, __ATOMIC_ACQUIRE) <= 0) {
            tgl_cuda_fused_release(k);
            k = NULL;
        }
    }
    if (!st && !k)
        st = tgl_errbuf_set(err, TGL_EINTERNAL,
                            "cuda: the kernel of %s (%s) did not compile: no CUDA compiler "
                            "could build it",
                            tgl_op_name(n->op), tgl_dtype_name(n->type.dtype));
    if (st) {
        prog_free(p);
        free(e);
        pthread_mutex_unlock(&ew_lock);
        return st;
    }
    *e = key;
    e->prog = p;
    e->k = k;
    e->next = ew_table[h];
    ew_table[h] = e;
    pthread_mutex_unlock(&ew_lock);
    *out = e;
    return TGL_OK;
}

static tgl_status elemwise_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                  tgl_array *out)
{
    if (!tgl_cuda_supports_elemwise(n))
        return tgl_op_error(ctx, n, in, TGL_EINTERNAL, "cuda: no kernel for %s in %s",
                            tgl_op_name(n->op), tgl_dtype_name(n->type.dtype));
    if (out->size == 0)
        return TGL_OK;
    READY(ctx, n, in);
    const tgl_backend_opts *o = tgl_cuda_opts(ctx);
    tgl_errbuf err;
    ew_entry *e = NULL;
    tgl_status st = ew_lookup(o, n, &e, &err);
    if (!st) {
        tgl_array *outs[1] = {out};
        st = tgl_cuda_fused_launch(o, e->prog, e->k, in, outs, NULL, &err);
    }
    return st ? op_fail(ctx, n, in, st, &err) : TGL_OK;
}

const tgl_op_kernel tgl_cuda_kernel_elemwise = {.run = elemwise_kernel};

/* ---- reductions ------------------------------------------------------------- */

static int core_op(int op)
{
    switch (op) {
    case TGL_OP_SUM: return TGL_CORE_SUM;
    case TGL_OP_PROD: return TGL_CORE_PROD;
    case TGL_OP_MAX: return TGL_CORE_MAX;
    default: return TGL_CORE_MIN;
    }
}

/* Fills out (contiguous) with the value v in its dtype. */
static tgl_status fill_value(const tgl_backend_opts *o, tgl_array *out, double v, tgl_errbuf *err)
{
    size_t es = tgl_dtype_size(out->dtype_id);
    unsigned char elem[8] = {0};
    static const unsigned char zero[8];
    tgl_store_from_double(out->dtype_id, elem, 0, v);
    if (out->size == 0)
        return TGL_OK;
    if (memcmp(elem, zero, es) == 0 || es == 1)
        return tgl_cuda_drv()->memset(out->data, elem[0], (size_t)out->size * es, err);
    tgl_core_fill_args a = {0};
    a.out = out->data;
    a.n = out->size;
    a.es = (int32_t)es;
    memcpy(&a.bits, elem, es); /* little-endian: the element's bits low */
    unsigned grid, block;
    tgl_cuda_geometry(a.n, &grid, &block);
    return tgl_cuda_lib_launch(o, "core", "tgl_core_fill", grid, block, 0, &a, err);
}

/* Kept axes (not reduced, size > 1) of x in order, merged where x steps
 * over two neighbours as over one axis; returns how many. */
static int kept_axes(const tgl_array *x, uint32_t skip, int64_t *shape, int64_t *str)
{
    int k = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (((skip >> d) & 1u) || x->shape[d] == 1)
            continue;
        if (k > 0 && str[k - 1] == x->strides[d] * x->shape[d]) {
            shape[k - 1] *= x->shape[d];
            str[k - 1] = x->strides[d];
            continue;
        }
        shape[k] = x->shape[d];
        str[k] = x->strides[d];
        k++;
    }
    return k;
}

static tgl_status reduce_run(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                             tgl_array *out, tgl_errbuf *err)
{
    const tgl_array *x = in[0];
    const tgl_backend_opts *o = tgl_cuda_opts(ctx);
    int op = n->op;
    bool copy = n->p.n == 0;
    uint32_t mask = tgl_reduce_axes_mask(n);
    if (x->size == 0) /* the identities: sum 0, prod 1 (max/min failed before) */
        return fill_value(o, out, op == TGL_OP_PROD ? 1.0 : 0.0, err);
    tgl_core_reduce_args a;
    memset(&a, 0, sizeof a);
    a.x = x->data;
    a.out = out->data;
    a.xdt = x->dtype_id;
    a.odt = out->dtype_id;
    a.op = core_op(op);
    a.copy = copy;
    a.nout = out->size;
    a.nk = kept_axes(x, mask, a.kshape, a.kstr);
    /* Reduced axes, largest stride outermost (stable), then merged. */
    int nr = 0;
    int64_t rs[TGL_MAX_DIMS], rx[TGL_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++)
        if (((mask >> d) & 1u) && x->shape[d] != 1) {
            rs[nr] = x->shape[d];
            rx[nr] = x->strides[d];
            nr++;
        }
    for (int i = 1; i < nr; i++)
        for (int j = i; j > 0 && abs64(rx[j - 1]) < abs64(rx[j]); j--) {
            int64_t t;
            t = rs[j], rs[j] = rs[j - 1], rs[j - 1] = t;
            t = rx[j], rx[j] = rx[j - 1], rx[j - 1] = t;
        }
    a.rsize = 1;
    for (int i = 0; i < nr; i++) {
        a.rsize *= rs[i];
        if (a.nr > 0 && a.rstr[a.nr - 1] == rx[i] * rs[i]) {
            a.rshape[a.nr - 1] *= rs[i];
            a.rstr[a.nr - 1] = rx[i];
            continue;
        }
        a.rshape[a.nr] = rs[i];
        a.rstr[a.nr] = rx[i];
        a.nr++;
    }
    /* Which layout: the reduced axes innermost, or the kept ones. */
    int64_t mink = INT64_MAX;
    for (int i = 0; i < a.nk; i++)
        if (abs64(a.kstr[i]) < mink)
            mink = abs64(a.kstr[i]);
    int64_t minr = a.nr ? abs64(a.rstr[a.nr - 1]) : INT64_MAX;
    bool rows = !copy && a.nr > 0 && (a.nk == 0 || (minr < mink && a.rsize >= 64));
    int64_t sms = sm_count();
    unsigned grid, block;
    if (copy || a.nr == 0) {
        a.copy = copy;
        a.chunk = a.nchunk = 1;
    } else if (rows) {
        int64_t want = sms * 8; /* blocks that fill the device */
        a.nchunk = a.nout >= want ? 1 : ceil_div(want, a.nout);
        int64_t most = ceil_div(a.rsize, 2048); /* at least 2048 elements a chunk */
        if (a.nchunk > most)
            a.nchunk = most;
        if (a.nchunk < 1)
            a.nchunk = 1;
        a.chunk = ceil_div(a.rsize, a.nchunk);
        a.nchunk = ceil_div(a.rsize, a.chunk);
    } else {
        int64_t want = sms * 2048; /* threads that fill the device */
        a.nchunk = a.nout >= want ? 1 : ceil_div(want, a.nout);
        int64_t most = ceil_div(a.rsize, 64);
        if (a.nchunk > most)
            a.nchunk = most;
        if (a.nchunk < 1)
            a.nchunk = 1;
        a.chunk = ceil_div(a.rsize, a.nchunk);
        a.nchunk = ceil_div(a.rsize, a.chunk);
    }
    /* The partials: an array of the device's, freed (to the allocator's
     * stream-ordered cache) right after the kernels that use it. */
    tgl_array *part = NULL;
    if (a.nchunk > 1) {
        int64_t np = a.nout * a.nchunk;
        tgl_status ast = tgl_array_alloc_on(ctx, "cuda reduce", out->device,
                                            tgl_dtype_is_float(x->dtype_id) ? TGL_FLOAT64
                                                                            : TGL_INT64,
                                            1, &np, false, &part);
        if (ast)
            return tgl_errbuf_set(err, ast, "%s", tgl_ctx_error(ctx));
        a.part = part->data;
    }
    tgl_status st;
    int64_t items = a.nout * a.nchunk;
    if (rows) {
        int64_t b = a.chunk < 256 ? ceil_div(a.chunk, 32) * 32 : 256;
        block = (unsigned)b;
        grid = (unsigned)(items < (1 << 20) ? items : (1 << 20));
        st = tgl_cuda_lib_launch(o, "core", "tgl_core_reduce_rows", grid, block, 0, &a, err);
    } else {
        tgl_cuda_geometry(items, &grid, &block);
        st = tgl_cuda_lib_launch(o, "core", "tgl_core_reduce_cols", grid, block, 0, &a, err);
    }
    if (!st && a.nchunk > 1) {
        tgl_cuda_geometry(a.nout, &grid, &block);
        st = tgl_cuda_lib_launch(o, "core", "tgl_core_reduce_finish", grid, block, 0, &a, err);
    }
    tgl_array_release(part);
    return st;
}

static tgl_status reduce_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                tgl_array *out)
{
    if (out->size == 0)
        return TGL_OK;
    tgl_status st = tgl_reduce_check_empty(ctx, n, in);
    if (st)
        return st;
    READY(ctx, n, in);
    tgl_errbuf err;
    st = reduce_run(ctx, n, in, out, &err);
    return st ? op_fail(ctx, n, in, st, &err) : TGL_OK;
}

const tgl_op_kernel tgl_cuda_kernel_reduce = {.run = reduce_kernel};

/* ---- argmax / argmin ----------------------------------------------------------- */

static tgl_status argmax_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                tgl_array *out)
{
    const tgl_array *x = in[0];
    int axis = (int)n->p.i[0];
    int64_t len = x->shape[axis];
    if (out->size == 0)
        return TGL_OK;
    tgl_status st = tgl_argmax_check_empty(ctx, n, in);
    if (st)
        return st;
    READY(ctx, n, in);
    tgl_core_arg_args a;
    memset(&a, 0, sizeof a);
    a.x = x->data;
    a.out = out->data;
    a.nout = out->size;
    a.len = len;
    a.s = x->strides[axis];
    a.xdt = x->dtype_id;
    a.want_max = n->op == TGL_OP_ARGMAX;
    a.nk = kept_axes(x, 1u << axis, a.kshape, a.kstr);
    const tgl_backend_opts *o = tgl_cuda_opts(ctx);
    tgl_errbuf err;
    unsigned grid, block;
    /* Long scans: a block per output; short ones: a thread per output. */
    if (len >= 128) {
        grid = (unsigned)(a.nout < (1 << 20) ? a.nout : (1 << 20));
        st = tgl_cuda_lib_launch(o, "core", "tgl_core_arg_rows", grid, 256, 0, &a, &err);
    } else {
        tgl_cuda_geometry(a.nout, &grid, &block);
        st = tgl_cuda_lib_launch(o, "core", "tgl_core_arg_cols", grid, block, 0, &a, &err);
    }
    return st ? op_fail(ctx, n, in, st, &err) : TGL_OK;
}

const tgl_op_kernel tgl_cuda_kernel_argmax = {.run = argmax_kernel};

/* ---- values the host knows: axes_size, shape --------------------------------- */

static tgl_status put_host(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, void *dst,
                           const void *src, size_t bytes)
{
    if (bytes == 0)
        return TGL_OK;
    READY(ctx, n, in);
    tgl_errbuf err;
    tgl_status st = tgl_cuda_drv()->memcpy(dst, src, bytes, TGL_CUDA_H2D, &err);
    return st ? op_fail(ctx, n, in, st, &err) : TGL_OK;
}

static tgl_status axes_size_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                   tgl_array *out)
{
    int64_t count = 1;
    for (int i = 0; i < n->p.n; i++)
        count *= in[0]->shape[n->p.i[i]];
    return put_host(ctx, n, in, out->data, &count, sizeof count);
}

static tgl_status shape_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                               tgl_array *out)
{
    int64_t v[TGL_MAX_DIMS];
    for (int k = 0; k < in[0]->ndim; k++)
        v[k] = in[0]->shape[k];
    return put_host(ctx, n, in, out->data, v, sizeof v[0] * (size_t)in[0]->ndim);
}

const tgl_op_kernel tgl_cuda_kernel_axes_size = {.run = axes_size_kernel};
const tgl_op_kernel tgl_cuda_kernel_shape = {.run = shape_kernel};

/* ---- concatenate, fill_like, arange --------------------------------------------- */

/* Each input copied (converted to the output's dtype where it differs)
 * into its slice of the output. */
static tgl_status concatenate_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                     tgl_array *out)
{
    if (out->size == 0)
        return TGL_OK;
    READY(ctx, n, in);
    const tgl_backend_opts *o = tgl_cuda_opts(ctx);
    int64_t axis = n->p.i[0], off = 0;
    size_t es = tgl_dtype_size(out->dtype_id);
    tgl_errbuf err;
    for (int i = 0; i < n->nin; i++) {
        const tgl_array *x = in[i];
        char *dst = (char *)out->data + (size_t)(off * out->strides[axis]) * es;
        tgl_status st = tgl_cuda_copy_into(o, x->data, x->dtype_id, x->strides, dst,
                                           out->dtype_id, out->strides, x->ndim, x->shape, &err);
        if (st)
            return op_fail(ctx, n, in, st, &err);
        off += x->shape[axis];
    }
    return TGL_OK;
}

static tgl_status fill_like_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                   tgl_array *out)
{
    if (out->size == 0)
        return TGL_OK;
    READY(ctx, n, in);
    tgl_errbuf err;
    tgl_status st = fill_value(tgl_cuda_opts(ctx), out, n->p.f[0], &err);
    return st ? op_fail(ctx, n, in, st, &err) : TGL_OK;
}

/* start and step stay on the device: the kernel reads them (no wait). */
static tgl_status arange_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                tgl_array *out)
{
    if (out->size == 0)
        return TGL_OK;
    READY(ctx, n, in);
    tgl_core_arange_args a;
    memset(&a, 0, sizeof a);
    a.out = out->data;
    a.start = in[0]->data;
    a.step = in[2]->data;
    a.n = out->size;
    a.odt = out->dtype_id;
    a.sdt = in[0]->dtype_id;
    a.tdt = in[2]->dtype_id;
    unsigned grid, block;
    tgl_cuda_geometry(a.n, &grid, &block);
    tgl_errbuf err;
    tgl_status st =
        tgl_cuda_lib_launch(tgl_cuda_opts(ctx), "core", "tgl_core_arange", grid, block, 0, &a, &err);
    return st ? op_fail(ctx, n, in, st, &err) : TGL_OK;
}

const tgl_op_kernel tgl_cuda_kernel_concatenate = {.run = concatenate_kernel};
const tgl_op_kernel tgl_cuda_kernel_fill_like = {.run = fill_like_kernel};
const tgl_op_kernel tgl_cuda_kernel_arange = {.run = arange_kernel};
