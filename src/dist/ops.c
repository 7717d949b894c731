/*
 * ops.c — the collectives as graph ops, their CPU kernels, and the
 * compiler stage that groups a step's allreduces into buckets.
 *
 *   allreduce(x)            p.i[0] = a tgl_dist_op (sum, mean, max, min,
 *                           prod): x reduced over every process, x's shape.
 *                           Its pullback and its tangent are the same
 *                           allreduce of the incoming gradient (tangent):
 *                           the op is linear for sum and mean; max, min
 *                           and prod have no gradient here.
 *   allreduce_start(g...)   p.i = {op, bucket, buckets}: the gs packed into
 *                           one 1-d buffer (the bucket's token), whose
 *                           reduction the progress thread starts at once
 *                           (dist/comm.c); the step goes on meanwhile.
 *   allreduce_wait(t..., g...)  p.i = {op, k, self, buckets}: waits for
 *                           the bucket whose token is input `self` and
 *                           unpacks it into k outputs shaped like the
 *                           k gs (inputs buckets..buckets+k-1).  It takes
 *                           every bucket's token, so that the compiler's
 *                           order starts every bucket before any wait.
 *
 * The bucket stage (FAST_RUN, after stabilize) replaces the allreduces of
 * a function whose inputs hold no other allreduce: grouped by reduction
 * and dtype, ordered by when the backward pass produces their inputs
 * (the longest path from the graph's leaves: a gradient nearer the cost
 * comes first), cut into buckets of tgl_dist_bucket_bytes.  Each bucket
 * becomes start + wait.  The waits list the tokens in that order, and the
 * compiler's order (a depth-first walk of each root's inputs in order)
 * then emits each start as soon as the gradients of its bucket are
 * computed, so the reduction of the last layer's gradients overlaps the
 * backward pass of the layers below; the in-place updates come last
 * anyway (plan.c).  In a job of one (joined, size 1) allreduce is x
 * itself and the stage removes it.  Without overlap
 * (tgl_dist_overlaps: no core left free for the progress thread) the
 * allreduces stay: each a blocking collective, in turn.
 *
 * The collectives' kernels are the same on every device in meaning; the
 * CPU's are here (the CPU backend's table names them).  An op with an
 * effect outside the process (TGL_OPF_EFFECT) is never folded into a
 * constant nor evaluated at compile time.
 */
#include "dist/dist.h"
#include "engine/ops/ops.h"
#include "engine/opt/opt.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- allreduce ---------------------------------------------------------- */

/* How many allreduce nodes this process has typed (any context): while
 * none, the bucket stage costs a compile nothing, not even a walk. */
static atomic_long allreduce_built;

static tgl_status ar_infer(tgl_ctx *ctx, tgl_node *n)
{
    TGL_CHECK(n->p.n == 1, TGL_EINVAL, "takes the reduction (p.i[0]) and nothing else");
    tgl_status st = tgl_dist_check_reduce(ctx, "allreduce", (int)n->p.i[0], n->in[0]->type.dtype);
    if (st)
        return st;
    n->type = n->in[0]->type;
    atomic_fetch_add(&allreduce_built, 1);
    return TGL_OK;
}

static tgl_status ar_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    int op = (int)n->p.i[0];
    TGL_CHECK(op == TGL_DIST_SUM || op == TGL_DIST_MEAN, TGL_EINVAL,
              "allreduce: '%s' has no gradient (only 'sum' and 'mean' do)", tgl_dist_op_name(op));
    gin[0] = tgl_mk(ctx, TGL_OP_ALLREDUCE, 1, &g, &n->p);
    return gin[0] ? TGL_OK : ctx->last_status;
}

/* "allreduce(sum)" */
static void op_what(char *buf, size_t n, int op)
{
    snprintf(buf, n, "allreduce(%s)", tgl_dist_op_name(op));
}

/* The CPU kernel: out = x, reduced in place. */
static tgl_status ar_run(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, tgl_array *out)
{
    tgl_status st = tgl_array_assign(ctx, out, in[0]);
    if (st)
        return st;
    char what[48];
    op_what(what, sizeof what, (int)n->p.i[0]);
    tgl_dist_desc d;
    tgl_dist_describe(&d, what, out->dtype_id, out->ndim, out->shape);
    return tgl_dist_comm_allreduce(ctx, &d, out->data, out->size, out->dtype_id, (int)n->p.i[0]);
}
const tgl_op_kernel tgl_dist_kernel_allreduce = {.run = ar_run};

/* ---- allreduce_start ---------------------------------------------------- */

static tgl_status start_infer(tgl_ctx *ctx, tgl_node *n)
{
    TGL_CHECK(n->p.n == 3 && n->p.i[2] > 0 && n->p.i[1] >= 0 && n->p.i[1] < n->p.i[2],
              TGL_EINVAL, "takes {op, bucket, buckets}");
    int dt = n->in[0]->type.dtype;
    for (int i = 1; i < n->nin; i++)
        TGL_CHECK(n->in[i]->type.dtype == dt, TGL_EDTYPE,
                  "a bucket holds one dtype: input 1 is %s, input %d %s", tgl_dtype_name(dt),
                  i + 1, tgl_dtype_name(n->in[i]->type.dtype));
    tgl_status st = tgl_dist_check_reduce(ctx, "allreduce", (int)n->p.i[0], dt);
    if (st)
        return st;
    n->type = tgl_type_make(dt, 1, 0);
    return TGL_OK;
}

static tgl_status start_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              int64_t *shape)
{
    int64_t total = 0;
    for (int i = 0; i < n->nin; i++) {
        TGL_CHECK(in[i]->size <= TGL_MAX_ELEMENTS - total, TGL_ESHAPE,
                  "allreduce: a bucket of more than %lld elements", (long long)TGL_MAX_ELEMENTS);
        total += in[i]->size;
    }
    shape[0] = total;
    return TGL_OK;
}

/* The bucket's description (n an allreduce_start): the reduction, bucket
 * b of B, the dtype, and every part's shape (a hash of them when they do
 * not fit), so that the processes' buckets must agree part by part. */
static void bucket_desc(tgl_dist_desc *d, const tgl_node *n, int nparts,
                        tgl_array *const *parts)
{
    int op = (int)n->p.i[0], nb = (int)n->p.i[2];
    uint64_t h = 1469598103934665603ull;
    char shapes[512];
    int k = 0;
    shapes[0] = 0;
    for (int i = 0; i < nparts; i++) {
        const tgl_array *a = parts[i];
        if (k < (int)sizeof shapes)
            k += snprintf(shapes + k, sizeof shapes - (size_t)k, "%s(", i ? " " : "");
        for (int j = 0; j < a->ndim; j++) {
            h = (h ^ (uint64_t)a->shape[j]) * 1099511628211ull;
            if (k < (int)sizeof shapes)
                k += snprintf(shapes + k, sizeof shapes - (size_t)k, "%s%lld", j ? "," : "",
                              (long long)a->shape[j]);
        }
        h = (h ^ 0xffu) * 1099511628211ull;
        if (k < (int)sizeof shapes)
            k += snprintf(shapes + k, sizeof shapes - (size_t)k, ")");
    }
    const char *dt = nparts ? tgl_dtype_name(parts[0]->dtype_id) : "";
    int w = snprintf(d->text, sizeof d->text, "allreduce(%s) bucket %d of %d, %s %s",
                     tgl_dist_op_name(op), (int)n->p.i[1] + 1, nb, dt, shapes);
    if (w >= (int)sizeof d->text)
        snprintf(d->text + sizeof d->text - 40, 40, "... #%016llx", (unsigned long long)h);
}

static tgl_status start_run(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, tgl_array *out)
{
    size_t esz = tgl_dtype_size(out->dtype_id);
    int64_t at = 0;
    for (int i = 0; i < n->nin; i++) {
        const tgl_array *g = in[i];
        if (g->size == 0)
            continue;
        if ((g->flags & TGL_ARRAY_CONTIGUOUS) && g->device == out->device) {
            memcpy((char *)out->data + (size_t)at * esz, g->data, (size_t)g->size * esz);
        } else {
            /* a strided gradient: into its part of the bucket, seen with
             * its shape, through the array copy (any device) */
            int64_t strides[TGL_MAX_DIMS];
            int64_t step = 1;
            for (int d = g->ndim - 1; d >= 0; d--) {
                strides[d] = step;
                step *= g->shape[d];
            }
            tgl_array *part = NULL;
            tgl_status st = tgl_array_view(ctx, out, g->ndim, g->shape, strides, at, &part);
            if (!st)
                st = tgl_array_assign(ctx, part, g);
            tgl_array_release(part);
            if (st)
                return st;
        }
        at += g->size;
    }
    tgl_dist_desc d;
    bucket_desc(&d, n, n->nin, in);
    int op = (int)n->p.i[0];
    /* Memory the progress thread may not touch while the step runs (a
     * device's, or sim's, open only inside this kernel): reduced here. */
    bool host = out->device == TGL_DEVICE_CPU;
    if (!host) {
        tgl_status st = tgl_dist_comm_allreduce(ctx, &d, out->data, out->size, out->dtype_id, op);
        if (st)
            return st;
    }
    return tgl_dist_async_start(ctx, &d, out, out->data, out->size, out->dtype_id, op, out,
                                !host);
}
const tgl_op_kernel tgl_dist_kernel_allreduce_start = {.run = start_run};

/* ---- allreduce_wait ----------------------------------------------------- */

static tgl_status wait_infer(tgl_ctx *ctx, tgl_node *n)
{
    const tgl_params *p = &n->p;
    TGL_CHECK(p->n == 4 && p->i[1] >= 1 && p->i[3] >= 1 && p->i[2] >= 0 && p->i[2] < p->i[3] &&
                  n->nin == p->i[1] + p->i[3],
              TGL_EINVAL, "takes {op, k, self, buckets} and buckets + k inputs");
    int nb = (int)p->i[3];
    for (int i = 0; i < nb; i++)
        TGL_CHECK(n->in[i]->kind == TGL_NODE_APPLY && n->in[i]->op == TGL_OP_ALLREDUCE_START,
                  TGL_EINVAL, "input %d is not a bucket (allreduce_start)", i + 1);
    n->nout = (int)p->i[1];
    n->type = n->in[nb]->type;
    return TGL_OK;
}

static tgl_type wait_out_type(const tgl_node *n, int k)
{
    return n->in[n->p.i[3] + k]->type;
}

static tgl_status wait_shape_k(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, int k,
                               int64_t *shape)
{
    (void)ctx;
    const tgl_array *g = in[n->p.i[3] + k];
    memcpy(shape, g->shape, sizeof *shape * (size_t)g->ndim);
    return TGL_OK;
}

static tgl_status wait_run(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                           tgl_array *const *out, bool debug)
{
    (void)debug;
    int nb = (int)n->p.i[3], k = (int)n->p.i[1];
    tgl_array *tok = in[n->p.i[2]];
    tgl_status st = tgl_dist_async_wait(ctx, tok);
    if (st)
        return st;
    size_t esz = tgl_dtype_size(tok->dtype_id);
    const char *p = tok->data;
    for (int i = 0; i < k; i++) {
        size_t bytes = (size_t)in[nb + i]->size * esz;
        if (out[i] && bytes)
            memcpy(out[i]->data, p, bytes);
        p += bytes;
    }
    return TGL_OK;
}
const tgl_op_kernel tgl_dist_kernel_allreduce_wait = {.run_n = wait_run};

/* ---- the bucket stage ----------------------------------------------------- */

typedef struct cand {
    tgl_node *n;     /* the allreduce */
    int64_t depth;   /* of its input */
    int64_t pos;     /* in the order (ties) */
    int64_t bytes;   /* the value's size when known at compile time, else 0 */
    int bucket;      /* assigned in production order */
} cand;

/* A bucket holds one reduction of one dtype. */
static int cand_key(const cand *x)
{
    return (int)x->n->p.i[0] * 16 + x->n->type.dtype;
}

/* By bucket (once assigned), then production order. */
static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->bucket != y->bucket)
        return x->bucket < y->bucket ? -1 : 1;
    if (x->depth != y->depth)
        return x->depth < y->depth ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Sizes of the allreduces' values, from the shared variables and
 * constants they provably share a shape with: elementwise ops tie an
 * operand of the result's exact type (the same rank and broadcast pattern,
 * so the same shape) to the result, and an allreduce its input; a
 * gradient meets its parameter in the update (W - lr * allreduce(g)).
 * A union-find over positions in the order; bytes[root] the first value's
 * size found in the class, 0 when none (the shape is known only at run
 * time). */
static int32_t uf_find(int32_t *up, int32_t i)
{
    while (up[i] != i) {
        up[i] = up[up[i]];
        i = up[i];
    }
    return i;
}

static tgl_status class_bytes(tgl_ctx *ctx, tgl_node **order, size_t count, int32_t **up_out,
                              int64_t **bytes_out, tgl_node_map *pos)
{
    int32_t *up = malloc(sizeof *up * (count ? count : 1));
    int64_t *bytes = calloc(count ? count : 1, sizeof *bytes);
    if (!up || !bytes) {
        free(up);
        free(bytes);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "allreduce buckets: out of memory");
    }
    for (size_t i = 0; i < count; i++)
        up[i] = (int32_t)i;
    for (size_t i = 0; i < count; i++) {
        tgl_node *n = order[i];
        if (n->kind != TGL_NODE_APPLY)
            continue;
        bool elem = tgl_op_impl(n->op)->family == TGL_FAM_ELEMWISE || n->op == TGL_OP_ALLREDUCE;
        for (int k = 0; elem && k < n->nin; k++) {
            if (!tgl_type_eq(n->in[k]->type, n->type))
                continue;
            int32_t a = uf_find(up, (int32_t)i);
            int32_t b = uf_find(up, (int32_t)tgl_node_map_geti(pos, n->in[k], (int64_t)i));
            up[a] = b;
        }
    }
    for (size_t i = 0; i < count; i++) {
        const tgl_node *n = order[i];
        const tgl_array *v = n->value;
        if ((n->kind == TGL_NODE_SHARED || n->kind == TGL_NODE_CONSTANT) && v &&
            v->ndim == n->type.ndim) {
            int32_t r = uf_find(up, (int32_t)i);
            if (!bytes[r])
                bytes[r] = v->size * (int64_t)tgl_dtype_size(v->dtype_id);
        }
    }
    *up_out = up;
    *bytes_out = bytes;
    return TGL_OK;
}

static tgl_status bucket_stage(tgl_ctx *ctx, int nroots, tgl_node **roots)
{
    if (!atomic_load(&allreduce_built) || tgl_rule_excluded(ctx, "allreduce_buckets"))
        return TGL_OK;
    bool overlap = tgl_dist_overlaps(ctx->config.threads);
    tgl_node **order = NULL;
    size_t count = 0;
    tgl_status st = tgl_toposort(ctx, nroots, roots, &order, &count);
    if (st)
        return st;
    size_t ncand = 0;
    for (size_t i = 0; i < count; i++)
        ncand += order[i]->kind == TGL_NODE_APPLY && order[i]->op == TGL_OP_ALLREDUCE;
    if (!ncand) {
        free(order);
        return TGL_OK;
    }
    bool alone = tgl_dist_initialized() && tgl_dist_world_size() == 1;
    tgl_node_map depth = {0}, tainted = {0}, map = {0}, pos = {0};
    int32_t *up = NULL;
    int64_t *cbytes = NULL;
    cand *c = calloc(ncand, sizeof *c);
    tgl_node **ins = NULL;
    bool maps = !tgl_node_map_init(ctx, &depth);
    maps = maps && !tgl_node_map_init(ctx, &tainted);
    maps = maps && !tgl_node_map_init(ctx, &map);
    maps = maps && !tgl_index_order(ctx, order, count, &pos);
    maps = maps && !class_bytes(ctx, order, count, &up, &cbytes, &pos);
    if (!c || !maps) {
        free(c);
        free(order);
        free(up);
        free(cbytes);
        tgl_node_map_free(&depth);
        tgl_node_map_free(&tainted);
        tgl_node_map_free(&map);
        tgl_node_map_free(&pos);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "allreduce buckets: out of memory");
    }
    /* Depth of every node (the longest path from a leaf), and whether an
     * allreduce is among its inputs' ancestors. */
    size_t nc = 0;
    for (size_t i = 0; i < count && !st; i++) {
        tgl_node *n = order[i];
        int64_t d = 0, t = 0;
        for (int k = 0; k < n->nin; k++) {
            int64_t dk = tgl_node_map_geti(&depth, n->in[k], 0);
            d = dk > d ? dk : d;
            t |= tgl_node_map_geti(&tainted, n->in[k], 0);
        }
        st = tgl_node_map_seti(ctx, &depth, n, d + 1);
        bool is_ar = n->kind == TGL_NODE_APPLY && n->op == TGL_OP_ALLREDUCE;
        if (!st && (t || is_ar))
            st = tgl_node_map_seti(ctx, &tainted, n, 1);
        if (is_ar && !t) {
            if (alone) {
                st = tgl_node_map_set(ctx, &map, n, n->in[0]);
            } else if (!overlap) {
                /* one blocking allreduce per gradient: left as it is */
            } else {
                c[nc].n = n;
                c[nc].depth = d;
                c[nc].pos = (int64_t)i;
                c[nc].bytes = cbytes[uf_find(up, (int32_t)i)];
                nc++;
            }
        }
    }
    /* Buckets in production order: each (reduction, dtype) fills its own
     * open bucket, which closes when it reaches the size limit; a value
     * whose size is known only at run time counts as a quarter bucket.
     * Then the candidates are sorted by bucket: runs first[b]..first[b+1]. */
    qsort(c, nc, sizeof *c, cand_cmp); /* every bucket 0 yet: production order */
    int64_t limit = tgl_dist_bucket_bytes();
    int nb = 0, nopen = 0;
    int *first = calloc(nc + 1, sizeof *first);
    int *open_key = calloc(nc + 1, sizeof *open_key), *open_b = calloc(nc + 1, sizeof *open_b);
    int64_t *open_acc = calloc(nc + 1, sizeof *open_acc);
    if (!first || !open_key || !open_b || !open_acc)
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "allreduce buckets: out of memory");
    for (size_t i = 0; i < nc && !st; i++) {
        int key = cand_key(&c[i]), j = 0;
        while (j < nopen && open_key[j] != key)
            j++;
        if (j == nopen || open_acc[j] >= limit) {
            if (j == nopen)
                nopen++;
            open_key[j] = key;
            open_b[j] = nb++;
            open_acc[j] = 0;
        }
        c[i].bucket = open_b[j];
        open_acc[j] += c[i].bytes > 0 ? c[i].bytes : limit / 4 + 1;
    }
    free(open_key);
    free(open_b);
    free(open_acc);
    if (!st) {
        qsort(c, nc, sizeof *c, cand_cmp);
        for (size_t i = 0; i < nc; i++)
            if (i == 0 || c[i].bucket != c[i - 1].bucket)
                first[c[i].bucket] = (int)i;
        first[nb] = (int)nc;
    }
    tgl_node **tokens = nb ? calloc((size_t)nb, sizeof *tokens) : NULL;
    ins = calloc(nc + (size_t)nb + 1, sizeof *ins);
    if (!st && nb && (!tokens || !ins))
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "allreduce buckets: out of memory");
    for (int b = 0; b < nb && !st; b++) {
        int k = first[b + 1] - first[b];
        for (int i = 0; i < k; i++)
            ins[i] = c[first[b] + i].n->in[0];
        tgl_params p = {0};
        p.n = 3;
        p.i[0] = c[first[b]].n->p.i[0];
        p.i[1] = b;
        p.i[2] = nb;
        tokens[b] = tgl_mk(ctx, TGL_OP_ALLREDUCE_START, k, ins, &p);
        if (!tokens[b])
            st = ctx->last_status ? ctx->last_status : TGL_EINTERNAL;
    }
    for (int b = 0; b < nb && !st; b++) {
        int k = first[b + 1] - first[b];
        for (int i = 0; i < nb; i++)
            ins[i] = tokens[i];
        for (int i = 0; i < k; i++)
            ins[nb + i] = c[first[b] + i].n->in[0];
        tgl_params p = {0};
        p.n = 4;
        p.i[0] = c[first[b]].n->p.i[0];
        p.i[1] = k;
        p.i[2] = b;
        p.i[3] = nb;
        tgl_node *w = tgl_mk(ctx, TGL_OP_ALLREDUCE_WAIT, nb + k, ins, &p);
        if (!w) {
            st = ctx->last_status ? ctx->last_status : TGL_EINTERNAL;
            break;
        }
        for (int i = 0; i < k && !st; i++) {
            tgl_node *o = NULL;
            st = tgl_node_output(ctx, w, i, &o);
            if (!st)
                st = tgl_node_map_set(ctx, &map, c[first[b] + i].n, o);
        }
    }
    /* Every node above a replaced allreduce, rebuilt on the new inputs. */
    for (size_t i = 0; i < count && !st; i++) {
        tgl_node *n = order[i];
        if (n->kind != TGL_NODE_APPLY || tgl_node_map_has(&map, n))
            continue;
        tgl_node *r = NULL;
        st = tgl_rebuild(ctx, n, &map, &r);
        if (!st && r != n)
            st = tgl_node_map_set(ctx, &map, n, r);
    }
    for (int i = 0; i < nroots && !st; i++) {
        tgl_node *r = roots[i] ? tgl_node_map_get(&map, roots[i]) : NULL;
        if (r)
            roots[i] = r;
    }
    free(tokens);
    free(ins);
    free(first);
    free(c);
    free(order);
    tgl_node_map_free(&depth);
    tgl_node_map_free(&tainted);
    tgl_node_map_free(&map);
    tgl_node_map_free(&pos);
    free(up);
    free(cbytes);
    return st;
}

static const char *pass_name(int i)
{
    return i == 0 ? "allreduce_buckets" : NULL;
}

static const char *pass_synopsis(int i)
{
    return i == 0 ? "allreduce(g) ... -> buckets started as their gradients exist, waited "
                    "for by their users"
                  : NULL;
}

static const tgl_rewrite_stage bucket_stage_def = {
    .name = "dist",
    .npasses = 1,
    .pass_name = pass_name,
    .pass_synopsis = pass_synopsis,
    .run = bucket_stage,
};

const tgl_opimpl tgl_impl_allreduce = {
    .family = TGL_FAM_COMM, .nin_min = 1, .nin_max = 1, .flags = TGL_OPF_EFFECT,
    .infer = ar_infer, .shape = tgl_shape_of_first, .grad = ar_grad,
    .stage = &bucket_stage_def,
};

const tgl_opimpl tgl_impl_allreduce_start = {
    .family = TGL_FAM_COMM, .nin_min = 1, .nin_max = -1, .flags = TGL_OPF_EFFECT,
    .infer = start_infer, .shape = start_shape,
};

const tgl_opimpl tgl_impl_allreduce_wait = {
    .family = TGL_FAM_COMM, .nin_min = 2, .nin_max = -1, .flags = TGL_OPF_EFFECT,
    .infer = wait_infer, .out_type = wait_out_type, .shape_k = wait_shape_k,
};
