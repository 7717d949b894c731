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
    uint64_t errors0 = ctx->nerrors;
    tgl_status st = TGL_OK;

    /* Which inner inputs the outputs depend on. */
    tgl_node_map anc;
    if ((st = tgl_reachable(ctx, nout, s->inner_out, &anc, NULL, NULL)))
        return st;
#define DIFF(x) (tgl_dtype_is_float((x)->type.dtype) && tgl_node_map_has(&anc, (x)))

    /* Forward outputs and the number of steps that ran. */
    tgl_node **H = calloc((size_t)nout, sizeof *H);
    tgl_node **inner_grad = calloc((size_t)s->ninner_in + 1, sizeof *inner_grad);
    tgl_node **q = calloc((size_t)nout, sizeof *q);
    if (!H || !inner_grad || !q) {
        free(H);
        free(inner_grad);
        free(q);
        tgl_node_map_free(&anc);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", nm);
    }
    /* H[k]: every step of output k.  An output with its initial values
     * (keep = TGL_SCAN_KEEP_WITH_INIT: what the shared variables a loop
     * updates come out as) holds them before the steps: it is itself the
     * joined states the backward scan reads (ext[r]), its steps from entry
     * K on, and its gradient's first K entries go to the initial values
     * directly. */
    tgl_node **ext = calloc((size_t)nout + 1, sizeof *ext);
    if (!ext) {
        free(H);
        free(inner_grad);
        free(q);
        tgl_node_map_free(&anc);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", nm);
    }
    for (int k = 0; k < nout && !st; k++) {
        st = tgl_node_output(ctx, n, k, &H[k]);
        if (!st && s->keep[k] == TGL_SCAN_KEEP_WITH_INIT) {
            ext[k] = H[k];
            H[k] = slice_from(ctx, ext[k], s->rec[k].K);
        }
    }
    tgl_node *T = st ? NULL : tgl_scan_length0(ctx, H[0]);
    tgl_node *zero = tgl_mk_scalar(ctx, TGL_INT64, 0);
    tgl_node *start = zero, *nsteps = T;
    if (s->truncate_gradient >= 0) {
        tgl_node *k = tgl_mk_scalar(ctx, TGL_INT64, s->truncate_gradient);
        start = tgl_mk2(ctx, TGL_OP_MAXIMUM, tgl_mk2(ctx, TGL_OP_SUB, T, k), zero);
        nsteps = tgl_mk2(ctx, TGL_OP_SUB, T, start);
    }

    /* The body's pullback: cotangent placeholders q for the outputs. */
    nlist kv = {0}, kg = {0}, wrt = {0};
    ilist wrt_pos = {0};
    for (int k = 0; k < nout && !st; k++) {
        tgl_node *o = s->inner_out[k];
        if (!tgl_dtype_is_float(o->type.dtype))
            continue;
        if (k >= s->nrec && !gout[k])
            continue;
        q[k] = placeholder(ctx, o->type, "grad_out");
        push(&kv, o);
        push(&kg, q[k]);
    }
    for (int i = 0; i < s->ninner_in; i++)
        if (DIFF(s->inner_in[i])) {
            push(&wrt, s->inner_in[i]);
            ipush(&wrt_pos, i);
        }
    if (!st && (kv.failed || kg.failed || wrt.failed || wrt_pos.failed))
        st = ctx->nerrors != errors0 ? ctx->last_status
                                     : tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan: out of memory");
    tgl_node **raw = calloc((size_t)wrt.n + 1, sizeof *raw);
    if (!st && !raw)
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", nm);
    if (!st && kv.n && wrt.n)
        st = tgl_grad(ctx, NULL, wrt.n, wrt.v, kv.n, kv.v, kg.v, TGL_DISCONNECTED_ZERO, raw);

    /* The backward scan's lists. */
    nlist b_seqs = {0}, b_inits = {0}, b_nonseqs = {0}, b_in = {0}, b_out = {0};
    ilist seq_ntaps = {0}, seq_taps = {0}, rec_ntaps = {0}, rec_taps = {0};
    nlist from = {0}, to = {0};
    int nseq_b = 0, nrec_b = 0, nnofb_b = 0;

    /* Sequences 1: the forward sequences, same taps. */
    for (int i = 0; i < s->nseq && !st; i++) {
        tgl_node *x = n->in[tgl_scan_in_seq(s, i)];
        push(&b_seqs, s->truncate_gradient >= 0 ? slice_from_node(ctx, x, start) : x);
        ipush(&seq_ntaps, s->seq[i].ntaps);
        for (int a = 0; a < s->seq[i].ntaps; a++) {
            tgl_node *in = s->inner_in[tgl_scan_inner_seq(s, i, a)];
            tgl_node *p = placeholder(ctx, in->type, in->name);
            ipush(&seq_taps, s->seq[i].taps[a]);
            push(&b_in, p);
            push(&from, in);
            push(&to, p);
        }
        nseq_b++;
    }
    /* Sequences 2: each recurrent output's initial values then steps, read
     * through its taps and tap 0 (the step's own value). */
    for (int r = 0; r < s->nrec && !st; r++) {
        tgl_node *init = n->in[tgl_scan_in_init(s, r)];
        int K = s->rec[r].K;
        tgl_node *cat[2] = {slice_from(ctx, init, -K), H[r]};
        tgl_params p = {0};
        p.n = 1;
        p.i[0] = 0;
        tgl_node *E = ext[r]                 ? ext[r]
                      : cat[0] && cat[1] ? tgl_mk(ctx, TGL_OP_CONCATENATE, 2, cat, &p)
                                         : NULL;
        push(&b_seqs, s->truncate_gradient >= 0 ? slice_from_node(ctx, E, start) : E);
        ipush(&seq_ntaps, s->rec[r].ntaps + 1);
        for (int a = 0; a < s->rec[r].ntaps; a++) {
            tgl_node *in = s->inner_in[tgl_scan_inner_rec(s, r, a)];
            tgl_node *ph = placeholder(ctx, in->type, in->name);
            ipush(&seq_taps, s->rec[r].taps[a]);
            push(&b_in, ph);
            push(&from, in);
            push(&to, ph);
        }
        tgl_node *self = placeholder(ctx, element_type(init->type), "h_t");
        ipush(&seq_taps, 0);
        push(&b_in, self);
        tgl_node *o = s->inner_out[r];
        if (o->kind == TGL_NODE_APPLY) {
            push(&from, o);
            push(&to, self);
        }
        nseq_b++;
    }
    /* Sequences 3: the outputs not fed back (their stored values). */
    for (int k = s->nrec; k < nout && !st; k++) {
        tgl_node *Y = H[k];
        push(&b_seqs, s->truncate_gradient >= 0 ? slice_from_node(ctx, Y, start) : Y);
        ipush(&seq_ntaps, 1);
        ipush(&seq_taps, 0);
        tgl_node *o = s->inner_out[k];
        tgl_node *ph = placeholder(ctx, o->type, "y_t");
        push(&b_in, ph);
        if (o->kind == TGL_NODE_APPLY) {
            bool mapped = false;
            for (int j = 0; j < from.n; j++)
                mapped |= from.v[j] == o;
            if (!mapped) {
                push(&from, o);
                push(&to, ph);
            }
        }
        nseq_b++;
    }
    /* Sequences 4: the output gradients. */
    tgl_node **gph = calloc((size_t)nout, sizeof *gph);
    if (!st && !gph)
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", nm);
    for (int k = 0; k < nout && !st; k++) {
        if (!gout[k] || !q[k])
            continue;
        tgl_node *G = tgl_mk_cast(ctx, gout[k], H[k]->type.dtype);
        if (ext[k])
            G = slice_from(ctx, G, s->rec[k].K);
        push(&b_seqs, s->truncate_gradient >= 0 ? slice_from_node(ctx, G, start) : G);
        ipush(&seq_ntaps, 1);
        ipush(&seq_taps, 0);
        gph[k] = placeholder(ctx, q[k]->type, "g_t");
        push(&b_in, gph[k]);
        nseq_b++;
    }
    /* Recurrent: K accumulators per float recurrent output, one per
     * differentiable non-sequence. */
    int *acc_at = calloc((size_t)s->nrec + 1, sizeof *acc_at);   /* first c_{r,0} */
    int *nacc_at = calloc((size_t)s->nnonseq + 1, sizeof *nacc_at);
    tgl_node **pc_first = calloc((size_t)s->nrec + 1, sizeof *pc_first);
    if (!st && (!acc_at || !nacc_at || !pc_first))
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", nm);
    int rec_in0 = b_in.n;
    for (int r = 0; r < s->nrec && !st; r++) {
        acc_at[r] = -1;
        tgl_node *init = n->in[tgl_scan_in_init(s, r)];
        if (!tgl_dtype_is_float(init->type.dtype) || !q[r])
            continue;
        acc_at[r] = nrec_b;
        tgl_node *z = tgl_mk_fill_like(ctx, slice_from(ctx, init, -1), init->type.dtype, 0.0);
        for (int j = 0; j < s->rec[r].K; j++) {
            push(&b_inits, z);
            ipush(&rec_ntaps, 1);
            ipush(&rec_taps, -1);
            tgl_node *ph = placeholder(ctx, element_type(init->type), "acc");
            if (j == 0)
                pc_first[r] = ph;
            push(&b_in, ph);
            nrec_b++;
        }
    }
    for (int j = 0; j < s->nnonseq && !st; j++) {
        nacc_at[j] = -1;
        tgl_node *w = s->inner_in[tgl_scan_inner_nonseq(s, j)];
        if (!DIFF(w))
            continue;
        tgl_node *wo = n->in[tgl_scan_in_nonseq(s, j)];
        nacc_at[j] = nrec_b;
        push(&b_inits, lead_axis(ctx, tgl_mk_fill_like(ctx, wo, wo->type.dtype, 0.0)));
        ipush(&rec_ntaps, 1);
        ipush(&rec_taps, -1);
        push(&b_in, placeholder(ctx, w->type, "acc"));
        nrec_b++;
    }
    /* Non-sequences: the forward ones. */
    for (int j = 0; j < s->nnonseq && !st; j++) {
        tgl_node *w = s->inner_in[tgl_scan_inner_nonseq(s, j)];
        tgl_node *ph = placeholder(ctx, w->type, w->name);
        push(&b_nonseqs, n->in[tgl_scan_in_nonseq(s, j)]);
        push(&b_in, ph);
        push(&from, w);
        push(&to, ph);
    }
    /* The cotangents: g_t + c_0 for recurrent outputs, g_t for the others. */
    for (int k = 0; k < nout && !st; k++) {
        if (!q[k])
            continue;
        tgl_node *tot = gph[k];
        if (k < s->nrec && pc_first[k])
            tot = tot ? tgl_mk2(ctx, TGL_OP_ADD, tot, pc_first[k]) : pc_first[k];
        if (!tot)
            tot = tgl_mk_fill_like(ctx, q[k], q[k]->type.dtype, 0.0);
        push(&from, q[k]);
        push(&to, tot);
    }
    if (!st && (b_seqs.failed || b_inits.failed || b_nonseqs.failed || b_in.failed ||
                from.failed || to.failed || seq_ntaps.failed || seq_taps.failed ||
                rec_ntaps.failed || rec_taps.failed))
        st = ctx->nerrors != errors0 ? ctx->last_status
                                     : tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan: out of memory");

    /* The pullback on the backward body's placeholders. */
    tgl_node **g = calloc((size_t)wrt.n + 1, sizeof *g);
    if (!st && !g)
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", nm);
    if (!st && kv.n && wrt.n)
        st = tgl_clone_replace(ctx, wrt.n, raw, from.n, from.v, to.v, g);
    for (int w = 0; w < wrt.n && !st; w++)
        inner_grad[wrt_pos.v[w]] = g[w];

    /* Backward body outputs: accumulators, then the sequence gradients. */
    for (int r = 0; r < s->nrec && !st; r++) {
        if (acc_at[r] < 0)
            continue;
        int K = s->rec[r].K;
        for (int j = 0; j < K; j++) {
            /* c'_j = c_{j+1} + d_{j+1} */
            tgl_node *d = NULL;
            for (int a = 0; a < s->rec[r].ntaps; a++)
                if (-s->rec[r].taps[a] == j + 1)
                    d = inner_grad[tgl_scan_inner_rec(s, r, a)];
            tgl_node *c_next = j + 1 < K ? b_in.v[rec_in0 + acc_at[r] + j + 1] : NULL;
            tgl_node *v = c_next && d ? tgl_mk2(ctx, TGL_OP_ADD, c_next, d) : c_next ? c_next : d;
            if (!v)
                v = tgl_mk_fill_like(ctx, b_in.v[rec_in0 + acc_at[r]],
                                     b_in.v[rec_in0 + acc_at[r]]->type.dtype, 0.0);
            push(&b_out, v);
        }
    }
    for (int j = 0; j < s->nnonseq && !st; j++) {
        if (nacc_at[j] < 0)
            continue;
        tgl_node *a = b_in.v[rec_in0 + nacc_at[j]];
        tgl_node *d = inner_grad[tgl_scan_inner_nonseq(s, j)];
        push(&b_out, d ? tgl_mk2(ctx, TGL_OP_ADD, a, d) : a);
    }
    /* one per differentiable sequence tap */
    ilist dx_of = {0}; /* inner position of each sequence-gradient output */
    for (int i = 0; i < s->nseq && !st; i++)
        for (int a = 0; a < s->seq[i].ntaps; a++) {
            int pos = tgl_scan_inner_seq(s, i, a);
            if (!inner_grad[pos] || !tgl_dtype_is_float(n->in[tgl_scan_in_seq(s, i)]->type.dtype))
                continue;
            push(&b_out, inner_grad[pos]);
            ipush(&dx_of, pos);
            nnofb_b++;
        }
    if (!st && (b_out.failed || dx_of.failed))
        st = ctx->nerrors != errors0 ? ctx->last_status
                                     : tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan: out of memory");

    /* The backward scan. */
    tgl_node *B = NULL;
    if (!st && b_out.n > 0) {
        char name[256];
        snprintf(name, sizeof name, "grad of %s", nm);
        int *keep = calloc((size_t)b_out.n + 1, sizeof *keep);
        if (!keep)
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", nm);
        for (int k = 0; keep && k < nrec_b; k++)
            keep[k] = 1;
        tgl_scan_spec sp = {0};
        sp.name = name;
        sp.nseq = nseq_b;
        sp.seq_ntaps = seq_ntaps.v;
        sp.seq_taps = seq_taps.v;
        sp.nrec = nrec_b;
        sp.rec_ntaps = rec_ntaps.v;
        sp.rec_taps = rec_taps.v;
        sp.nnofb = nnofb_b;
        sp.nnonseq = b_nonseqs.n;
        sp.reverse = 1;
        sp.truncate_gradient = -1;
        sp.inner_in = b_in.v;
        sp.inner_out = b_out.v;
        sp.n_steps = nsteps;
        sp.seqs = b_seqs.v;
        sp.inits = b_inits.v;
        sp.nonseqs = b_nonseqs.v;
        sp.keep = keep;
        if (!st)
            st = tgl_scan_build(ctx, &sp, n->source, &B);
        free(keep);
    }

    /* The input gradients from the backward scan's outputs. */
    tgl_node *whole = s->truncate_gradient >= 0 ? tgl_mk_cast(ctx, tgl_mk2(ctx, TGL_OP_EQ, start,
                                                                           zero), TGL_FLOAT64)
                                                : NULL;
    for (int r = 0; r < s->nrec && !st && B; r++) {
        if (acc_at[r] < 0)
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
            if (!tgl_node_output(ctx, B, acc_at[r] + (K - 1 - e), &o))
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
        if (ext[r] && gout[r]) {
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
    for (int j = 0; j < s->nnonseq && !st && B; j++) {
        if (nacc_at[j] < 0)
            continue;
        tgl_node *o = NULL;
        if (!tgl_node_output(ctx, B, nacc_at[j], &o))
            gin[tgl_scan_in_nonseq(s, j)] = o;
    }
    for (int i = 0, k = 0; i < s->nseq && !st && B; i++) {
        tgl_node *x = n->in[tgl_scan_in_seq(s, i)];
        tgl_node *gx = NULL;
        for (int a = 0; a < s->seq[i].ntaps; a++) {
            int pos = tgl_scan_inner_seq(s, i, a);
            if (k >= dx_of.n || dx_of.v[k] != pos)
                continue;
            tgl_node *dX = NULL;
            tgl_node_output(ctx, B, nrec_b + k, &dX);
            k++;
            if (!gx)
                gx = tgl_mk_fill_like(ctx, x, x->type.dtype, 0.0);
            tgl_node *at = tgl_mk2(ctx, TGL_OP_ADD, start,
                                   tgl_mk_scalar(ctx, TGL_INT64,
                                                 s->seq[i].taps[a] - s->seq[i].taps[0]));
            gx = inc_slice(ctx, gx, dX, at, tgl_mk2(ctx, TGL_OP_ADD, at, nsteps));
        }
        gin[tgl_scan_in_seq(s, i)] = gx;
    }
    if (!st && ctx->nerrors != errors0)
        st = ctx->last_status ? ctx->last_status : TGL_EINTERNAL;

#undef DIFF
    tgl_node_map_free(&anc);
    free(H);
    free(ext);
    free(inner_grad);
    free(q);
    free(raw);
    free(g);
    free(gph);
    free(acc_at);
    free(nacc_at);
    free(pc_first);
    free(kv.v);
    free(kg.v);
    free(wrt.v);
    free(wrt_pos.v);
    free(b_seqs.v);
    free(b_inits.v);
    free(b_nonseqs.v);
    free(b_in.v);
    free(b_out.v);
    free(from.v);
    free(to.v);
    free(seq_ntaps.v);
    free(seq_taps.v);
    free(rec_ntaps.v);
    free(rec_taps.v);
    free(dx_of.v);
    return st;
}
