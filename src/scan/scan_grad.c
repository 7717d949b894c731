/*
 * scan_grad.c — the pullback of scan: backpropagation through time as a
 * backward scan (a scan with reverse = 1 over the same steps).
 *
 * Forward, step t computes h_t = f(x_t taps, h_{t-k} for each tap -k, w).
 * The gradient of h_t is complete once every later step that reads it has
 * run, so the backward scan walks t = T-1 .. 0 carrying, per recurrent
 * output with K earlier values, K accumulators: c_0 is what later steps
 * sent to h_t, c_j what they sent to h_{t-j}.  At step t the body's
 * pullback runs with cotangent g_t + c_0 (g_t: the gradient of the stacked
 * output at t) and yields d_k for each tap -k, the gradients of the
 * sequence slices and of the non-sequences; then c'_j = c_{j+1} + d_{j+1}
 * (c'_{K-1} = d_K) and each non-sequence's accumulator adds its share.
 * After t = 0 the accumulators hold the gradients of the initial values.
 *
 * The body's pullback is built by tgl_grad on the forward body; the
 * forward values it needs (the tap inputs, and the step's own outputs,
 * which pullbacks like tanh's read) come in as sequences of the stored
 * forward results instead of being recomputed: the forward outputs in the
 * pullback are replaced by placeholders reading the stacked outputs.
 *
 * truncate_gradient = k runs the backward scan over the last k steps only;
 * earlier sequence elements and the initial values then get zeros (as in
 * Theano).
 */
#include "scan/scan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- node helpers (NULL in, NULL out: one check at the end) ---------- */

/* x[from:] along axis 0 (from a constant; negative counts from the end). */
static tgl_node *slice_from(tgl_ctx *ctx, tgl_node *x, int64_t from)
{
    if (!x)
        return NULL;
    tgl_params p = {0};
    p.n = 4;
    p.i[0] = TGL_IDX_SLICE | TGL_IDX_NO_STOP;
    p.i[1] = from;
    p.i[3] = 1;
    return tgl_mk(ctx, TGL_OP_SUBTENSOR, 1, &x, &p);
}

/* x[start:] along axis 0, start an int64 scalar node. */
static tgl_node *slice_from_node(tgl_ctx *ctx, tgl_node *x, tgl_node *start)
{
    if (!x || !start)
        return NULL;
    tgl_params p = {0};
    p.n = 4;
    p.i[0] = TGL_IDX_SLICE | TGL_IDX_START_INPUT | TGL_IDX_NO_STOP;
    p.i[3] = 1;
    tgl_node *in[2] = {x, start};
    return tgl_mk(ctx, TGL_OP_SUBTENSOR, 2, in, &p);
}

/* x with x[start:stop] (axis 0) incremented by v. */
static tgl_node *inc_slice(tgl_ctx *ctx, tgl_node *x, tgl_node *v, tgl_node *start,
                           tgl_node *stop)
{
    if (!x || !v || !start || !stop)
        return NULL;
    tgl_params p = {0};
    p.n = 4;
    p.i[0] = TGL_IDX_SLICE | TGL_IDX_START_INPUT | TGL_IDX_STOP_INPUT;
    p.i[3] = 1;
    tgl_node *in[4] = {x, v, start, stop};
    return tgl_mk(ctx, TGL_OP_INC_SUBTENSOR, 4, in, &p);
}

/* x with a new leading broadcastable axis. */
static tgl_node *lead_axis(tgl_ctx *ctx, tgl_node *x)
{
    if (!x)
        return NULL;
    int64_t order[TGL_MAX_DIMS];
    order[0] = -1;
    for (int d = 0; d < x->type.ndim; d++)
        order[d + 1] = d;
    return tgl_mk_dimshuffle(ctx, x, x->type.ndim + 1, order);
}

/* The length of x's leading axis, an int64 scalar (scan.h). */
tgl_node *tgl_scan_length0(tgl_ctx *ctx, tgl_node *x)
{
    tgl_node *sh = x ? tgl_mk1(ctx, TGL_OP_SHAPE, x) : NULL;
    if (!sh)
        return NULL;
    tgl_params p = {0};
    p.n = 4;
    p.i[0] = TGL_IDX_INDEX;
    p.i[1] = 0;
    return tgl_mk(ctx, TGL_OP_SUBTENSOR, 1, &sh, &p);
}

static tgl_node *placeholder(tgl_ctx *ctx, tgl_type t, const char *name)
{
    tgl_node *n = NULL;
    return tgl_node_input(ctx, t, name, &n) ? NULL : n;
}

static tgl_type element_type(tgl_type t)
{
    return tgl_type_make(t.dtype, t.ndim - 1, t.bcast >> 1);
}

/* ---- growing lists ---------------------------------------------------- */

typedef struct nlist {
    tgl_node **v;
    int n, cap;
    bool failed;
} nlist;

static int push(nlist *l, tgl_node *x)
{
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 16;
        tgl_node **v = realloc(l->v, sizeof *v * (size_t)nc);
        if (!v) {
            l->failed = true;
            return -1;
        }
        l->v = v;
        l->cap = nc;
    }
    if (!x)
        l->failed = true;
    l->v[l->n] = x;
    return l->n++;
}

typedef struct ilist {
    int *v;
    int n, cap;
    bool failed;
} ilist;

static void ipush(ilist *l, int x)
{
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 16;
        int *v = realloc(l->v, sizeof *v * (size_t)nc);
        if (!v) {
            l->failed = true;
            return;
        }
        l->v = v;
        l->cap = nc;
    }
    l->v[l->n++] = x;
}

/* ---- the pullback ----------------------------------------------------- */

/* What the pullback of a scan builds, step by step (tgl_scan_grad):
 * the forward scan's outputs, the body's own pullback, and the lists the
 * backward scan is made of.  Every pointer and list is freed by
 * pullback_free. */
typedef struct pullback {
    const tgl_scan_layout *s;
    tgl_node *n;                  /* the forward scan                        */
    tgl_node *const *gout;        /* per output: its cotangent (or NULL)     */
    tgl_node **gin;               /* per input: its gradient (out)           */
    int nout;
    uint64_t errors0;             /* ctx->nerrors on entry                   */
    tgl_node_map anc;             /* what the body's outputs depend on       */
    /* the forward outputs, the number of steps, the steps differentiated */
    tgl_node **H, **ext;          /* per output: its steps; with its initial
                                   * values (KEEP_WITH_INIT) or NULL         */
    tgl_node *T, *zero, *start, *nsteps;
    /* the body's pullback */
    tgl_node **q;                 /* per output: its cotangent placeholder   */
    nlist kv, kg, wrt;            /* tgl_grad's outputs, cotangents, wrt     */
    ilist wrt_pos;                /* inner position of each wrt              */
    tgl_node **raw;               /* per wrt: its gradient on q              */
    tgl_node **g;                 /* the same on the backward placeholders   */
    tgl_node **inner_grad;        /* per inner input: its gradient or NULL   */
    /* the backward scan's lists */
    nlist b_seqs, b_inits, b_nonseqs, b_in, b_out;
    ilist seq_ntaps, seq_taps, rec_ntaps, rec_taps;
    nlist from, to;               /* forward body node -> backward one       */
    int nseq_b, nrec_b, nnofb_b;
    tgl_node **gph;               /* per output: its g_t placeholder         */
    int *acc_at;                  /* per recurrent output: first c_{r,0}     */
    int *nacc_at;                 /* per non-sequence: its accumulator       */
    tgl_node **pc_first;          /* per recurrent output: c_{r,0}'s input   */
    int rec_in0;                  /* b_in's first recurrent placeholder      */
    ilist dx_of;                  /* inner position of each sequence gradient */
    tgl_node *B;                  /* the backward scan                       */
} pullback;

static void pullback_free(pullback *pb)
{
    tgl_node_map_free(&pb->anc);
    free(pb->H);
    free(pb->ext);
    free(pb->inner_grad);
    free(pb->q);
    free(pb->raw);
    free(pb->g);
    free(pb->gph);
    free(pb->acc_at);
    free(pb->nacc_at);
    free(pb->pc_first);
    free(pb->kv.v);
    free(pb->kg.v);
    free(pb->wrt.v);
    free(pb->wrt_pos.v);
    free(pb->b_seqs.v);
    free(pb->b_inits.v);
    free(pb->b_nonseqs.v);
    free(pb->b_in.v);
    free(pb->b_out.v);
    free(pb->from.v);
    free(pb->to.v);
    free(pb->seq_ntaps.v);
    free(pb->seq_taps.v);
    free(pb->rec_ntaps.v);
    free(pb->rec_taps.v);
    free(pb->dx_of.v);
}

/* A list that could not grow: the error a node left (a node that could
 * not be built is NULL in the list) or out of memory. */
static tgl_status list_failed(tgl_ctx *ctx, const pullback *pb)
{
    return ctx->nerrors != pb->errors0 ? ctx->last_status
                                       : tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan: out of memory");
}

/* Differentiable: a float the body's outputs depend on. */
static bool diff(const pullback *pb, const tgl_node *x)
{
    return tgl_dtype_is_float(x->type.dtype) && tgl_node_map_has(&pb->anc, x);
}

/* Which inner inputs the outputs depend on; the forward outputs (H, ext)
 * and the number of steps that ran (T), of which the last nsteps, from
 * start on, are differentiated (truncate_gradient). */
static tgl_status forward_outputs(tgl_ctx *ctx, pullback *pb)
{
    const tgl_scan_layout *s = pb->s;
    const char *nm = s->name;
    const int nout = pb->nout;
    tgl_status st = tgl_reachable(ctx, nout, s->inner_out, &pb->anc, NULL, NULL);
    if (st)
        return st;
    pb->H = calloc((size_t)nout, sizeof *pb->H);
    pb->inner_grad = calloc((size_t)s->ninner_in + 1, sizeof *pb->inner_grad);
    pb->q = calloc((size_t)nout, sizeof *pb->q);
    if (!pb->H || !pb->inner_grad || !pb->q)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", nm);
    /* H[k]: every step of output k.  An output with its initial values
     * (keep = TGL_SCAN_KEEP_WITH_INIT: what the shared variables a loop
     * updates come out as) holds them before the steps: it is itself the
     * joined states the backward scan reads (ext[r]), its steps from entry
     * K on, and its gradient's first K entries go to the initial values
     * directly. */
    pb->ext = calloc((size_t)nout + 1, sizeof *pb->ext);
    if (!pb->ext)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", nm);
    for (int k = 0; k < nout && !st; k++) {
        st = tgl_node_output(ctx, pb->n, k, &pb->H[k]);
        if (!st && s->keep[k] == TGL_SCAN_KEEP_WITH_INIT) {
            pb->ext[k] = pb->H[k];
            pb->H[k] = slice_from(ctx, pb->ext[k], s->rec[k].K);
        }
    }
    pb->T = st ? NULL : tgl_scan_length0(ctx, pb->H[0]);
    pb->zero = tgl_mk_scalar(ctx, TGL_INT64, 0);
    pb->start = pb->zero;
    pb->nsteps = pb->T;
    if (s->truncate_gradient >= 0) {
        tgl_node *k = tgl_mk_scalar(ctx, TGL_INT64, s->truncate_gradient);
        pb->start = tgl_mk2(ctx, TGL_OP_MAXIMUM, tgl_mk2(ctx, TGL_OP_SUB, pb->T, k), pb->zero);
        pb->nsteps = tgl_mk2(ctx, TGL_OP_SUB, pb->T, pb->start);
    }
    return st;
}

/* The body's pullback (raw): the gradients of its float outputs, on
 * cotangent placeholders q, with respect to its differentiable inputs. */
static tgl_status body_pullback(tgl_ctx *ctx, pullback *pb)
{
    const tgl_scan_layout *s = pb->s;
    const char *nm = s->name;
    const int nout = pb->nout;
    tgl_node *const *gout = pb->gout;
    tgl_status st = TGL_OK;
    /* The body's pullback: cotangent placeholders q for the outputs. */
    for (int k = 0; k < nout && !st; k++) {
        tgl_node *o = s->inner_out[k];
        if (!tgl_dtype_is_float(o->type.dtype))
            continue;
        if (k >= s->nrec && !gout[k])
            continue;
        pb->q[k] = placeholder(ctx, o->type, "grad_out");
        push(&pb->kv, o);
        push(&pb->kg, pb->q[k]);
    }
    for (int i = 0; i < s->ninner_in; i++)
        if (diff(pb, s->inner_in[i])) {
            push(&pb->wrt, s->inner_in[i]);
            ipush(&pb->wrt_pos, i);
        }
    if (!st && (pb->kv.failed || pb->kg.failed || pb->wrt.failed || pb->wrt_pos.failed))
        st = list_failed(ctx, pb);
    pb->raw = calloc((size_t)pb->wrt.n + 1, sizeof *pb->raw);
    if (!st && !pb->raw)
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", nm);
    if (!st && pb->kv.n && pb->wrt.n)
        st = tgl_grad(ctx, NULL, pb->wrt.n, pb->wrt.v, pb->kv.n, pb->kv.v, pb->kg.v,
                      TGL_DISCONNECTED_ZERO, pb->raw);
    return st;
}

/* The backward scan's sequences: the forward sequences, each recurrent
 * output's initial values and steps, the outputs not fed back, the output
 * gradients; from/to map the forward body's inputs to the backward ones. */
static tgl_status backward_sequences(tgl_ctx *ctx, pullback *pb)
{
    const tgl_scan_layout *s = pb->s;
    const char *nm = s->name;
    const int nout = pb->nout;
    tgl_node *n = pb->n;
    tgl_node *const *gout = pb->gout;
    tgl_status st = TGL_OK;
    /* Sequences 1: the forward sequences, same taps. */
    for (int i = 0; i < s->nseq && !st; i++) {
        tgl_node *x = n->in[tgl_scan_in_seq(s, i)];
        push(&pb->b_seqs, s->truncate_gradient >= 0 ? slice_from_node(ctx, x, pb->start) : x);
        ipush(&pb->seq_ntaps, s->seq[i].ntaps);
        for (int a = 0; a < s->seq[i].ntaps; a++) {
            tgl_node *in = s->inner_in[tgl_scan_inner_seq(s, i, a)];
            tgl_node *p = placeholder(ctx, in->type, in->name);
            ipush(&pb->seq_taps, s->seq[i].taps[a]);
            push(&pb->b_in, p);
            push(&pb->from, in);
            push(&pb->to, p);
        }
        pb->nseq_b++;
    }
    /* Sequences 2: each recurrent output's initial values then steps, read
     * through its taps and tap 0 (the step's own value). */
    for (int r = 0; r < s->nrec && !st; r++) {
        tgl_node *init = n->in[tgl_scan_in_init(s, r)];
        int K = s->rec[r].K;
        tgl_node *cat[2] = {slice_from(ctx, init, -K), pb->H[r]};
        tgl_params p = {0};
        p.n = 1;
        p.i[0] = 0;
        tgl_node *E = pb->ext[r]                 ? pb->ext[r]
                      : cat[0] && cat[1] ? tgl_mk(ctx, TGL_OP_CONCATENATE, 2, cat, &p)
                                         : NULL;
        push(&pb->b_seqs, s->truncate_gradient >= 0 ? slice_from_node(ctx, E, pb->start) : E);
        ipush(&pb->seq_ntaps, s->rec[r].ntaps + 1);
        for (int a = 0; a < s->rec[r].ntaps; a++) {
            tgl_node *in = s->inner_in[tgl_scan_inner_rec(s, r, a)];
            tgl_node *ph = placeholder(ctx, in->type, in->name);
            ipush(&pb->seq_taps, s->rec[r].taps[a]);
            push(&pb->b_in, ph);
            push(&pb->from, in);
            push(&pb->to, ph);
        }
        tgl_node *self = placeholder(ctx, element_type(init->type), "h_t");
        ipush(&pb->seq_taps, 0);
        push(&pb->b_in, self);
        tgl_node *o = s->inner_out[r];
        if (o->kind == TGL_NODE_APPLY) {
            push(&pb->from, o);
            push(&pb->to, self);
        }
        pb->nseq_b++;
    }
    /* Sequences 3: the outputs not fed back (their stored values). */
    for (int k = s->nrec; k < nout && !st; k++) {
        tgl_node *Y = pb->H[k];
        push(&pb->b_seqs, s->truncate_gradient >= 0 ? slice_from_node(ctx, Y, pb->start) : Y);
        ipush(&pb->seq_ntaps, 1);
        ipush(&pb->seq_taps, 0);
        tgl_node *o = s->inner_out[k];
        tgl_node *ph = placeholder(ctx, o->type, "y_t");
        push(&pb->b_in, ph);
        if (o->kind == TGL_NODE_APPLY) {
            bool mapped = false;
            for (int j = 0; j < pb->from.n; j++)
                mapped |= pb->from.v[j] == o;
            if (!mapped) {
                push(&pb->from, o);
                push(&pb->to, ph);
            }
        }
        pb->nseq_b++;
    }
    /* Sequences 4: the output gradients. */
    pb->gph = calloc((size_t)nout, sizeof *pb->gph);
    if (!st && !pb->gph)
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", nm);
    for (int k = 0; k < nout && !st; k++) {
        if (!gout[k] || !pb->q[k])
            continue;
        tgl_node *G = tgl_mk_cast(ctx, gout[k], pb->H[k]->type.dtype);
        if (pb->ext[k])
            G = slice_from(ctx, G, s->rec[k].K);
        push(&pb->b_seqs, s->truncate_gradient >= 0 ? slice_from_node(ctx, G, pb->start) : G);
        ipush(&pb->seq_ntaps, 1);
        ipush(&pb->seq_taps, 0);
        pb->gph[k] = placeholder(ctx, pb->q[k]->type, "g_t");
        push(&pb->b_in, pb->gph[k]);
        pb->nseq_b++;
    }
    return st;
}

/* The backward scan's recurrent states (K accumulators per float
 * recurrent output, one per differentiable non-sequence) and its
 * non-sequences; the cotangents q mapped to what they are in the backward
 * body. */
static tgl_status backward_states(tgl_ctx *ctx, pullback *pb)
{
    const tgl_scan_layout *s = pb->s;
    const char *nm = s->name;
    const int nout = pb->nout;
    tgl_node *n = pb->n;
    tgl_status st = TGL_OK;
    /* Recurrent: K accumulators per float recurrent output, one per
     * differentiable non-sequence. */
    pb->acc_at = calloc((size_t)s->nrec + 1, sizeof *pb->acc_at);   /* first c_{r,0} */
    pb->nacc_at = calloc((size_t)s->nnonseq + 1, sizeof *pb->nacc_at);
    pb->pc_first = calloc((size_t)s->nrec + 1, sizeof *pb->pc_first);
    if (!st && (!pb->acc_at || !pb->nacc_at || !pb->pc_first))
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", nm);
    pb->rec_in0 = pb->b_in.n;
    for (int r = 0; r < s->nrec && !st; r++) {
        pb->acc_at[r] = -1;
        tgl_node *init = n->in[tgl_scan_in_init(s, r)];
        if (!tgl_dtype_is_float(init->type.dtype) || !pb->q[r])
            continue;
        pb->acc_at[r] = pb->nrec_b;
        tgl_node *z = tgl_mk_fill_like(ctx, slice_from(ctx, init, -1), init->type.dtype, 0.0);
        for (int j = 0; j < s->rec[r].K; j++) {
            push(&pb->b_inits, z);
            ipush(&pb->rec_ntaps, 1);
            ipush(&pb->rec_taps, -1);
            tgl_node *ph = placeholder(ctx, element_type(init->type), "acc");
            if (j == 0)
                pb->pc_first[r] = ph;
            push(&pb->b_in, ph);
            pb->nrec_b++;
        }
    }
    for (int j = 0; j < s->nnonseq && !st; j++) {
        pb->nacc_at[j] = -1;
        tgl_node *w = s->inner_in[tgl_scan_inner_nonseq(s, j)];
        if (!diff(pb, w))
            continue;
        tgl_node *wo = n->in[tgl_scan_in_nonseq(s, j)];
        pb->nacc_at[j] = pb->nrec_b;
        push(&pb->b_inits, lead_axis(ctx, tgl_mk_fill_like(ctx, wo, wo->type.dtype, 0.0)));
        ipush(&pb->rec_ntaps, 1);
        ipush(&pb->rec_taps, -1);
        push(&pb->b_in, placeholder(ctx, w->type, "acc"));
        pb->nrec_b++;
    }
    /* Non-sequences: the forward ones. */
    for (int j = 0; j < s->nnonseq && !st; j++) {
        tgl_node *w = s->inner_in[tgl_scan_inner_nonseq(s, j)];
        tgl_node *ph = placeholder(ctx, w->type, w->name);
        push(&pb->b_nonseqs, n->in[tgl_scan_in_nonseq(s, j)]);
        push(&pb->b_in, ph);
        push(&pb->from, w);
        push(&pb->to, ph);
    }
    /* The cotangents: g_t + c_0 for recurrent outputs, g_t for the others. */
    for (int k = 0; k < nout && !st; k++) {
        if (!pb->q[k])
            continue;
        tgl_node *tot = pb->gph[k];
        if (k < s->nrec && pb->pc_first[k])
            tot = tot ? tgl_mk2(ctx, TGL_OP_ADD, tot, pb->pc_first[k]) : pb->pc_first[k];
        if (!tot)
            tot = tgl_mk_fill_like(ctx, pb->q[k], pb->q[k]->type.dtype, 0.0);
        push(&pb->from, pb->q[k]);
        push(&pb->to, tot);
    }
    if (!st && (pb->b_seqs.failed || pb->b_inits.failed || pb->b_nonseqs.failed ||
                pb->b_in.failed || pb->from.failed || pb->to.failed || pb->seq_ntaps.failed ||
                pb->seq_taps.failed || pb->rec_ntaps.failed || pb->rec_taps.failed))
        st = list_failed(ctx, pb);
    return st;
}

/* The body's pullback moved onto the backward body's placeholders, and
 * the backward body's outputs: the accumulators' next values, then one
 * gradient per differentiable sequence tap. */
static tgl_status backward_outputs(tgl_ctx *ctx, pullback *pb)
{
    const tgl_scan_layout *s = pb->s;
    const char *nm = s->name;
    tgl_node *n = pb->n;
    tgl_status st = TGL_OK;
    /* The pullback on the backward body's placeholders. */
    pb->g = calloc((size_t)pb->wrt.n + 1, sizeof *pb->g);
    if (!st && !pb->g)
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", nm);
    if (!st && pb->kv.n && pb->wrt.n)
        st = tgl_clone_replace(ctx, pb->wrt.n, pb->raw, pb->from.n, pb->from.v, pb->to.v, pb->g);
    for (int w = 0; w < pb->wrt.n && !st; w++)
        pb->inner_grad[pb->wrt_pos.v[w]] = pb->g[w];

    /* Backward body outputs: accumulators, then the sequence gradients. */
    for (int r = 0; r < s->nrec && !st; r++) {
        if (pb->acc_at[r] < 0)
            continue;
        int K = s->rec[r].K;
        for (int j = 0; j < K; j++) {
            /* c'_j = c_{j+1} + d_{j+1} */
            tgl_node *d = NULL;
            for (int a = 0; a < s->rec[r].ntaps; a++)
                if (-s->rec[r].taps[a] == j + 1)
                    d = pb->inner_grad[tgl_scan_inner_rec(s, r, a)];
            tgl_node *c_next = j + 1 < K ? pb->b_in.v[pb->rec_in0 + pb->acc_at[r] + j + 1] : NULL;
            tgl_node *v = c_next && d ? tgl_mk2(ctx, TGL_OP_ADD, c_next, d) : c_next ? c_next : d;
            if (!v)
                v = tgl_mk_fill_like(ctx, pb->b_in.v[pb->rec_in0 + pb->acc_at[r]],
                                     pb->b_in.v[pb->rec_in0 + pb->acc_at[r]]->type.dtype, 0.0);
            push(&pb->b_out, v);
        }
    }
    for (int j = 0; j < s->nnonseq && !st; j++) {
        if (pb->nacc_at[j] < 0)
            continue;
        tgl_node *a = pb->b_in.v[pb->rec_in0 + pb->nacc_at[j]];
        tgl_node *d = pb->inner_grad[tgl_scan_inner_nonseq(s, j)];
        push(&pb->b_out, d ? tgl_mk2(ctx, TGL_OP_ADD, a, d) : a);
    }
    /* one per differentiable sequence tap */
    for (int i = 0; i < s->nseq && !st; i++)
        for (int a = 0; a < s->seq[i].ntaps; a++) {
            int pos = tgl_scan_inner_seq(s, i, a);
            if (!pb->inner_grad[pos] ||
                !tgl_dtype_is_float(n->in[tgl_scan_in_seq(s, i)]->type.dtype))
                continue;
            push(&pb->b_out, pb->inner_grad[pos]);
            ipush(&pb->dx_of, pos);
            pb->nnofb_b++;
        }
    if (!st && (pb->b_out.failed || pb->dx_of.failed))
        st = list_failed(ctx, pb);
    return st;
}

/* The backward scan itself (pb->B; none when it has no output). */
static tgl_status build_backward(tgl_ctx *ctx, pullback *pb)
{
    const tgl_scan_layout *s = pb->s;
    const char *nm = s->name;
    tgl_node *n = pb->n;
    tgl_status st = TGL_OK;
    /* The backward scan. */
    if (!st && pb->b_out.n > 0) {
        char name[256];
        snprintf(name, sizeof name, "grad of %s", nm);
        int *keep = calloc((size_t)pb->b_out.n + 1, sizeof *keep);
        if (!keep)
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", nm);
        for (int k = 0; keep && k < pb->nrec_b; k++)
            keep[k] = 1;
        tgl_scan_spec sp = {0};
        sp.name = name;
        sp.nseq = pb->nseq_b;
        sp.seq_ntaps = pb->seq_ntaps.v;
        sp.seq_taps = pb->seq_taps.v;
        sp.nrec = pb->nrec_b;
        sp.rec_ntaps = pb->rec_ntaps.v;
        sp.rec_taps = pb->rec_taps.v;
        sp.nnofb = pb->nnofb_b;
        sp.nnonseq = pb->b_nonseqs.n;
        sp.reverse = 1;
        sp.truncate_gradient = -1;
        sp.inner_in = pb->b_in.v;
        sp.inner_out = pb->b_out.v;
        sp.n_steps = pb->nsteps;
        sp.seqs = pb->b_seqs.v;
        sp.inits = pb->b_inits.v;
        sp.nonseqs = pb->b_nonseqs.v;
        sp.keep = keep;
        if (!st)
            st = tgl_scan_build(ctx, &sp, n->source, &pb->B);
        free(keep);
    }
    return st;
}

/* The forward scan's input gradients (gin) from the backward scan's
 * outputs: the initial values', the non-sequences', the sequences'. */
static tgl_status input_gradients(tgl_ctx *ctx, pullback *pb)
{
    const tgl_scan_layout *s = pb->s;
    const char *nm = s->name;
    tgl_node *n = pb->n;
    tgl_node *const *gout = pb->gout;
    tgl_node **gin = pb->gin;
    tgl_status st = TGL_OK;
    tgl_node *whole = s->truncate_gradient >= 0
                          ? tgl_mk_cast(ctx, tgl_mk2(ctx, TGL_OP_EQ, pb->start, pb->zero),
                                        TGL_FLOAT64)
                          : NULL;
    for (int r = 0; r < s->nrec && !st && pb->B; r++) {
        if (pb->acc_at[r] < 0)
            continue;
        int K = s->rec[r].K;
        tgl_node *init = n->in[tgl_scan_in_init(s, r)];
        /* Entry K-1-j of the initial values got accumulator j. */
        tgl_node **parts = calloc((size_t)K, sizeof *parts);
        if (!parts) {
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", nm);
            break;
        }
        for (int e = 0; e < K; e++) {
            tgl_node *o = NULL;
            if (!tgl_node_output(ctx, pb->B, pb->acc_at[r] + (K - 1 - e), &o))
                parts[e] = lead_axis(ctx, o);
        }
        tgl_params p = {0};
        p.n = 1;
        p.i[0] = 0;
        tgl_node *stack = K == 1 ? parts[0] : tgl_mk(ctx, TGL_OP_CONCATENATE, K, parts, &p);
        free(parts);
        if (whole)
            stack = tgl_mk2(ctx, TGL_OP_MUL, stack, tgl_mk_cast(ctx, whole, init->type.dtype));
        /* into the initial values' last K entries */
        tgl_node *L = tgl_scan_length0(ctx, init);
        tgl_node *from0 = tgl_mk2(ctx, TGL_OP_SUB, L, tgl_mk_scalar(ctx, TGL_INT64, K));
        if (pb->ext[r] && gout[r]) {
            /* the output's own first K entries are the initial values */
            tgl_params sp = {0};
            sp.n = 4;
            sp.i[0] = TGL_IDX_SLICE;
            sp.i[2] = K;
            sp.i[3] = 1;
            tgl_node *G = tgl_mk_cast(ctx, gout[r], init->type.dtype);
            tgl_node *direct = G ? tgl_mk(ctx, TGL_OP_SUBTENSOR, 1, &G, &sp) : NULL;
            stack = direct ? tgl_mk2(ctx, TGL_OP_ADD, stack, direct) : NULL;
        }
        gin[tgl_scan_in_init(s, r)] =
            inc_slice(ctx, tgl_mk_fill_like(ctx, init, init->type.dtype, 0.0), stack, from0, L);
    }
    for (int j = 0; j < s->nnonseq && !st && pb->B; j++) {
        if (pb->nacc_at[j] < 0)
            continue;
        tgl_node *o = NULL;
        if (!tgl_node_output(ctx, pb->B, pb->nacc_at[j], &o))
            gin[tgl_scan_in_nonseq(s, j)] = o;
    }
    for (int i = 0, k = 0; i < s->nseq && !st && pb->B; i++) {
        tgl_node *x = n->in[tgl_scan_in_seq(s, i)];
        tgl_node *gx = NULL;
        for (int a = 0; a < s->seq[i].ntaps; a++) {
            int pos = tgl_scan_inner_seq(s, i, a);
            if (k >= pb->dx_of.n || pb->dx_of.v[k] != pos)
                continue;
            tgl_node *dX = NULL;
            tgl_node_output(ctx, pb->B, pb->nrec_b + k, &dX);
            k++;
            if (!gx)
                gx = tgl_mk_fill_like(ctx, x, x->type.dtype, 0.0);
            tgl_node *at = tgl_mk2(ctx, TGL_OP_ADD, pb->start,
                                   tgl_mk_scalar(ctx, TGL_INT64,
                                                 s->seq[i].taps[a] - s->seq[i].taps[0]));
            gx = inc_slice(ctx, gx, dX, at, tgl_mk2(ctx, TGL_OP_ADD, at, pb->nsteps));
        }
        gin[tgl_scan_in_seq(s, i)] = gx;
    }
    return st;
}

tgl_status tgl_scan_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *const *gout, tgl_node **gin)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    const char *nm = s->name;
    const int nout = tgl_scan_nout(s);
    for (int k = 0; k < nout; k++)
        TGL_CHECK(!tgl_scan_keeps_last(s, k), TGL_EINVAL,
                  "scan '%s': cannot differentiate a scan that keeps only its last step "
                  "(a gradient's own backward scan: second derivatives through scan are not "
                  "supported)", nm);
    TGL_CHECK(!s->reverse, TGL_EINVAL, "scan '%s': cannot differentiate a reverse scan", nm);
    pullback pb = {.s = s, .n = n, .gout = gout, .gin = gin, .nout = nout,
                   .errors0 = ctx->nerrors};
    tgl_status st = forward_outputs(ctx, &pb);
    if (!st)
        st = body_pullback(ctx, &pb);
    if (!st)
        st = backward_sequences(ctx, &pb);
    if (!st)
        st = backward_states(ctx, &pb);
    if (!st)
        st = backward_outputs(ctx, &pb);
    if (!st)
        st = build_backward(ctx, &pb);
    if (!st)
        st = input_gradients(ctx, &pb);
    if (!st && ctx->nerrors != pb.errors0)
        st = ctx->last_status ? ctx->last_status : TGL_EINTERNAL;
    pullback_free(&pb);
    return st;
}
