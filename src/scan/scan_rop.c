/*
 * scan_rop.c — the pushforward of scan: the tangent recurrence runs
 * alongside the forward one, in one loop.
 *
 * For a scan computing h_t = f(x_t taps, h_{t-k} taps, w), the tangent is
 * dh_t = J_x f · dx_t + Σ_k J_h f · dh_{t-k} + J_w f · dw: a recurrence
 * over the same steps, which needs the forward values of the same step.
 * The tangent scan therefore carries both: its body is the forward body
 * (the same nodes, read through the same placeholders) plus the body's
 * own pushforward (tgl_rop on the inner graph) with placeholders for the
 * tangents of the sequences, of the recurrent taps (carried as recurrent
 * outputs whose initial values are the tangents of the initial values)
 * and of the non-sequences.  Its stop condition is the forward one, so an
 * until-loop's tangent runs exactly the steps the forward loop ran; a
 * reverse scan (a backward scan of a gradient) pushes forward the same
 * way, which is what Hessian-vector products through loops need.
 */
#include "scan/scan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct list {
    void **v;
    int n, cap;
    bool failed;
} list;

static void add(list *l, void *x)
{
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 16;
        void **v = realloc(l->v, sizeof *v * (size_t)nc);
        if (!v) {
            l->failed = true;
            return;
        }
        l->v = v;
        l->cap = nc;
    }
    if (!x)
        l->failed = true;
    l->v[l->n++] = x;
}

/* Integers ride in the same lists, offset so that none is NULL. */
#define INT_BIAS ((intptr_t)1 << 40)

static void addi(list *l, int x)
{
    add(l, (void *)((intptr_t)x + INT_BIAS));
}

static int geti(const list *l, int i)
{
    return (int)((intptr_t)l->v[i] - INT_BIAS);
}

static tgl_node *placeholder(tgl_ctx *ctx, tgl_type t, const char *name)
{
    tgl_node *n = NULL;
    return tgl_node_input(ctx, t, name, &n) ? NULL : n;
}

/* What the tangent scan is built from (tgl_scan_rop), step by step: the
 * lists of its spec (integers biased, see addi) and where the tangents
 * land among its outputs.  Freed by tangent_scan_free. */
typedef struct tangent_scan {
    const tgl_scan_layout *s;
    tgl_node *n;                       /* the forward scan                  */
    tgl_node *const *tin;              /* per input: its tangent (or NULL)  */
    list seqs, seq_ntaps, seq_taps, inits, rec_ntaps, rec_taps, nonseqs;
    list in_seq, in_rec, in_ns;        /* the inner inputs, by kind         */
    list outs, keep;                   /* the inner outputs and their keep  */
    list wrt, dirs;                    /* the body's pushforward: inner
                                        * inputs and their tangents         */
    tgl_node **tan_inner;              /* per inner output: its tangent     */
    int *tan_rec_at;                   /* per recurrent output: its tangent's
                                        * output (-1: none)                 */
    int *tan_nofb_at;                  /* the same per output not fed back  */
    int ntan_nofb;
    tgl_node *m;                       /* the tangent scan                  */
} tangent_scan;

#define TS_NLISTS 14

/* Every list of ts. */
static void lists_of(tangent_scan *ts, list *l[TS_NLISTS])
{
    list *all[TS_NLISTS] = {&ts->seqs,     &ts->seq_ntaps, &ts->seq_taps, &ts->inits,
                            &ts->rec_ntaps, &ts->rec_taps, &ts->nonseqs,  &ts->in_seq,
                            &ts->in_rec,   &ts->in_ns,     &ts->outs,     &ts->keep,
                            &ts->wrt,      &ts->dirs};
    memcpy(l, all, sizeof all);
}

/* A list could not grow (or got a NULL node). */
static bool lists_failed(tangent_scan *ts)
{
    list *l[TS_NLISTS];
    lists_of(ts, l);
    bool failed = false;
    for (int i = 0; i < TS_NLISTS; i++)
        failed |= l[i]->failed;
    return failed;
}

static void tangent_scan_free(tangent_scan *ts)
{
    free(ts->tan_rec_at);
    free(ts->tan_inner);
    free(ts->tan_nofb_at);
    list *l[TS_NLISTS];
    lists_of(ts, l);
    for (int i = 0; i < TS_NLISTS; i++)
        free(l[i]->v);
}

/* The tangent scan's inputs: the forward sequences, initial values and
 * non-sequences, then the tangents of those that have one (a float
 * recurrent output without one starts from zeros), each read in the body
 * through a new placeholder that is a direction of the body's pushforward. */
static tgl_status tangent_inputs(tgl_ctx *ctx, tangent_scan *ts)
{
    const tgl_scan_layout *s = ts->s;
    tgl_node *n = ts->n;
    tgl_node *const *tin = ts->tin;
    tgl_status st = TGL_OK;
    /* Sequences: the forward ones, then the tangents of those that have one. */
    for (int i = 0; i < s->nseq && !st; i++) {
        add(&ts->seqs, n->in[tgl_scan_in_seq(s, i)]);
        addi(&ts->seq_ntaps, s->seq[i].ntaps);
        for (int a = 0; a < s->seq[i].ntaps; a++) {
            addi(&ts->seq_taps, s->seq[i].taps[a]);
            add(&ts->in_seq, s->inner_in[tgl_scan_inner_seq(s, i, a)]);
        }
    }
    for (int i = 0; i < s->nseq && !st; i++) {
        tgl_node *t = tin[tgl_scan_in_seq(s, i)];
        if (!t)
            continue;
        add(&ts->seqs, t);
        addi(&ts->seq_ntaps, s->seq[i].ntaps);
        for (int a = 0; a < s->seq[i].ntaps; a++) {
            tgl_node *p = s->inner_in[tgl_scan_inner_seq(s, i, a)];
            tgl_node *d = placeholder(ctx, p->type, "d_seq");
            addi(&ts->seq_taps, s->seq[i].taps[a]);
            add(&ts->in_seq, d);
            add(&ts->wrt, p);
            add(&ts->dirs, d);
        }
    }
    /* Recurrent: the forward outputs, then the tangents of the float ones. */
    for (int r = 0; r < s->nrec && !st; r++) {
        add(&ts->inits, n->in[tgl_scan_in_init(s, r)]);
        addi(&ts->rec_ntaps, s->rec[r].ntaps);
        for (int a = 0; a < s->rec[r].ntaps; a++) {
            addi(&ts->rec_taps, s->rec[r].taps[a]);
            add(&ts->in_rec, s->inner_in[tgl_scan_inner_rec(s, r, a)]);
        }
        add(&ts->outs, s->inner_out[r]);
        addi(&ts->keep, s->keep[r]);
    }
    int nrec_fwd = s->nrec, ntan_rec = 0;
    for (int r = 0; r < s->nrec && !st; r++) {
        tgl_node *init = n->in[tgl_scan_in_init(s, r)];
        ts->tan_rec_at[r] = -1;
        if (!tgl_dtype_is_float(init->type.dtype))
            continue;
        tgl_node *t = tin[tgl_scan_in_init(s, r)];
        add(&ts->inits, t ? t : tgl_mk_fill_like(ctx, init, init->type.dtype, 0.0));
        addi(&ts->rec_ntaps, s->rec[r].ntaps);
        for (int a = 0; a < s->rec[r].ntaps; a++) {
            tgl_node *p = s->inner_in[tgl_scan_inner_rec(s, r, a)];
            tgl_node *d = placeholder(ctx, p->type, "d_out");
            addi(&ts->rec_taps, s->rec[r].taps[a]);
            add(&ts->in_rec, d);
            add(&ts->wrt, p);
            add(&ts->dirs, d);
        }
        ts->tan_rec_at[r] = nrec_fwd + ntan_rec++;
    }
    /* Non-sequences: the forward ones, then the tangents of those with one. */
    for (int j = 0; j < s->nnonseq && !st; j++) {
        add(&ts->nonseqs, n->in[tgl_scan_in_nonseq(s, j)]);
        add(&ts->in_ns, s->inner_in[tgl_scan_inner_nonseq(s, j)]);
    }
    for (int j = 0; j < s->nnonseq && !st; j++) {
        tgl_node *t = tin[tgl_scan_in_nonseq(s, j)];
        if (!t)
            continue;
        tgl_node *p = s->inner_in[tgl_scan_inner_nonseq(s, j)];
        tgl_node *d = placeholder(ctx, p->type, "d_nonseq");
        add(&ts->nonseqs, t);
        add(&ts->in_ns, d);
        add(&ts->wrt, p);
        add(&ts->dirs, d);
    }
    if (!st && lists_failed(ts))
        st = ctx->last_status ? ctx->last_status
                              : tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan: out of memory");
    return st;
}

/* The body's pushforward (tan_inner), and the tangent scan's inner
 * outputs: the forward ones, the recurrent tangents, the other float
 * outputs' tangents, the forward stop condition. */
static tgl_status tangent_outputs(tgl_ctx *ctx, tangent_scan *ts)
{
    const tgl_scan_layout *s = ts->s;
    const int nout = tgl_scan_nout(s);
    tgl_status st = TGL_OK;
    /* The body's pushforward: tangents of the recurrent and other outputs. */
    if (ts->wrt.n > 0)
        st = tgl_rop(ctx, nout, s->inner_out, ts->wrt.n, (tgl_node **)ts->wrt.v,
                     (tgl_node **)ts->dirs.v, TGL_DISCONNECTED_ZERO, ts->tan_inner);
    for (int k = 0; k < nout && !st && ts->wrt.n == 0; k++)
        ts->tan_inner[k] = tgl_mk_fill_like(ctx, s->inner_out[k], s->inner_out[k]->type.dtype, 0.0);
    for (int r = 0; r < s->nrec && !st; r++)
        if (ts->tan_rec_at[r] >= 0) {
            add(&ts->outs, ts->tan_inner[r]);
            addi(&ts->keep, s->keep[r]);
        }
    int first_nofb = ts->outs.n;
    ts->tan_nofb_at = calloc((size_t)s->nnofb + 1, sizeof *ts->tan_nofb_at);
    if (!st && !ts->tan_nofb_at)
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", s->name);
    for (int k = 0; k < s->nnofb && !st; k++) {
        ts->tan_nofb_at[k] = -1;
        if (!tgl_dtype_is_float(s->inner_out[s->nrec + k]->type.dtype))
            continue;
        add(&ts->outs, ts->tan_inner[s->nrec + k]);
        addi(&ts->keep, s->keep[s->nrec + k]);
        ts->tan_nofb_at[k] = first_nofb + ts->ntan_nofb++;
    }
    if (!st && s->has_until)
        add(&ts->outs, s->inner_out[nout]);
    return st;
}

/* The tangent scan itself (ts->m), from the lists. */
static tgl_status build_tangent(tgl_ctx *ctx, tangent_scan *ts)
{
    const tgl_scan_layout *s = ts->s;
    tgl_node *n = ts->n;
    tgl_status st = TGL_OK;
    list inner = {0};
    for (int i = 0; i < ts->in_seq.n; i++)
        add(&inner, ts->in_seq.v[i]);
    for (int i = 0; i < ts->in_rec.n; i++)
        add(&inner, ts->in_rec.v[i]);
    for (int i = 0; i < ts->in_ns.n; i++)
        add(&inner, ts->in_ns.v[i]);
    int *sn = calloc((size_t)ts->seq_ntaps.n + 1, sizeof *sn);
    int *stp = calloc((size_t)ts->seq_taps.n + 1, sizeof *stp);
    int *rn = calloc((size_t)ts->rec_ntaps.n + 1, sizeof *rn);
    int *rtp = calloc((size_t)ts->rec_taps.n + 1, sizeof *rtp);
    int *kp = calloc((size_t)ts->keep.n + 1, sizeof *kp);
    if (inner.failed || !sn || !stp || !rn || !rtp || !kp) {
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", s->name);
    } else {
        for (int i = 0; i < ts->seq_ntaps.n; i++)
            sn[i] = geti(&ts->seq_ntaps, i);
        for (int i = 0; i < ts->seq_taps.n; i++)
            stp[i] = geti(&ts->seq_taps, i);
        for (int i = 0; i < ts->rec_ntaps.n; i++)
            rn[i] = geti(&ts->rec_ntaps, i);
        for (int i = 0; i < ts->rec_taps.n; i++)
            rtp[i] = geti(&ts->rec_taps, i);
        for (int i = 0; i < ts->keep.n; i++)
            kp[i] = geti(&ts->keep, i);
        char name[256];
        snprintf(name, sizeof name, "Rop of %s", s->name);
        tgl_node *ns = n->in[tgl_scan_in_nsteps()];
        tgl_scan_spec sp = {0};
        sp.name = name;
        sp.nseq = ts->seqs.n;
        sp.seq_ntaps = sn;
        sp.seq_taps = stp;
        sp.nrec = ts->inits.n;
        sp.rec_ntaps = rn;
        sp.rec_taps = rtp;
        sp.nnofb = ts->ntan_nofb;
        sp.nnonseq = ts->nonseqs.n;
        sp.has_until = s->has_until;
        sp.reverse = s->reverse;
        sp.truncate_gradient = s->truncate_gradient;
        sp.inner_in = (tgl_node **)inner.v;
        sp.inner_out = (tgl_node **)ts->outs.v;
        /* n_steps as the forward loop had it (-1: the same sequences decide) */
        sp.n_steps = ns->kind == TGL_NODE_CONSTANT && tgl_node_value(ns) &&
                             tgl_load_as_double(TGL_INT64, tgl_node_value(ns)->data, 0) < 0
                         ? NULL
                         : ns;
        sp.seqs = (tgl_node **)ts->seqs.v;
        sp.inits = (tgl_node **)ts->inits.v;
        sp.nonseqs = (tgl_node **)ts->nonseqs.v;
        sp.keep = kp;
        st = tgl_scan_build(ctx, &sp, n->source, &ts->m);
    }
    free(sn);
    free(stp);
    free(rn);
    free(rtp);
    free(kp);
    free(inner.v);
    return st;
}

tgl_status tgl_scan_rop(tgl_ctx *ctx, tgl_node *n, tgl_node *const *tin, tgl_node **tout)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    tgl_status st = TGL_OK;
    tangent_scan ts = {.s = s, .n = n, .tin = tin};
    ts.tan_rec_at = calloc((size_t)s->nrec + 1, sizeof *ts.tan_rec_at);
    ts.tan_inner = calloc((size_t)s->ninner_out + 1, sizeof *ts.tan_inner);
    if (!ts.tan_rec_at || !ts.tan_inner)
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", s->name);
    if (!st)
        st = tangent_inputs(ctx, &ts);
    if (!st)
        st = tangent_outputs(ctx, &ts);
    if (!st)
        st = build_tangent(ctx, &ts);
    /* The tangents of the forward outputs: the tangent scan's outputs. */
    for (int r = 0; r < s->nrec && !st; r++)
        tout[r] = NULL;
    for (int r = 0; r < s->nrec && !st; r++)
        if (ts.tan_rec_at[r] >= 0)
            st = tgl_node_output(ctx, ts.m, ts.tan_rec_at[r], &tout[r]);
    for (int k = 0; k < s->nnofb && !st; k++) {
        tout[s->nrec + k] = NULL;
        if (ts.tan_nofb_at[k] >= 0)
            st = tgl_node_output(ctx, ts.m, ts.tan_nofb_at[k], &tout[s->nrec + k]);
    }
    tangent_scan_free(&ts);
    return st;
}
