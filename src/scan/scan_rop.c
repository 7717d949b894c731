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

tgl_status tgl_scan_rop(tgl_ctx *ctx, tgl_node *n, tgl_node *const *tin, tgl_node **tout)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    const int nout = tgl_scan_nout(s);
    tgl_status st = TGL_OK;
    list seqs = {0}, seq_ntaps = {0}, seq_taps = {0}, inits = {0}, rec_ntaps = {0},
         rec_taps = {0}, nonseqs = {0}, in_seq = {0}, in_rec = {0}, in_ns = {0}, outs = {0},
         keep = {0}, wrt = {0}, dirs = {0};
    int *tan_rec_at = calloc((size_t)s->nrec + 1, sizeof *tan_rec_at);
    tgl_node **tan_inner = calloc((size_t)s->ninner_out + 1, sizeof *tan_inner);
    if (!tan_rec_at || !tan_inner)
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", s->name);

    /* Sequences: the forward ones, then the tangents of those that have one. */
    for (int i = 0; i < s->nseq && !st; i++) {
        add(&seqs, n->in[tgl_scan_in_seq(s, i)]);
        addi(&seq_ntaps, s->seq[i].ntaps);
        for (int a = 0; a < s->seq[i].ntaps; a++) {
            addi(&seq_taps, s->seq[i].taps[a]);
            add(&in_seq, s->inner_in[tgl_scan_inner_seq(s, i, a)]);
        }
    }
    for (int i = 0; i < s->nseq && !st; i++) {
        tgl_node *t = tin[tgl_scan_in_seq(s, i)];
        if (!t)
            continue;
        add(&seqs, t);
        addi(&seq_ntaps, s->seq[i].ntaps);
        for (int a = 0; a < s->seq[i].ntaps; a++) {
            tgl_node *p = s->inner_in[tgl_scan_inner_seq(s, i, a)];
            tgl_node *d = placeholder(ctx, p->type, "d_seq");
            addi(&seq_taps, s->seq[i].taps[a]);
            add(&in_seq, d);
            add(&wrt, p);
            add(&dirs, d);
        }
    }
    /* Recurrent: the forward outputs, then the tangents of the float ones. */
    for (int r = 0; r < s->nrec && !st; r++) {
        add(&inits, n->in[tgl_scan_in_init(s, r)]);
        addi(&rec_ntaps, s->rec[r].ntaps);
        for (int a = 0; a < s->rec[r].ntaps; a++) {
            addi(&rec_taps, s->rec[r].taps[a]);
            add(&in_rec, s->inner_in[tgl_scan_inner_rec(s, r, a)]);
        }
        add(&outs, s->inner_out[r]);
        addi(&keep, s->keep[r]);
    }
    int nrec_fwd = s->nrec, ntan_rec = 0;
    for (int r = 0; r < s->nrec && !st; r++) {
        tgl_node *init = n->in[tgl_scan_in_init(s, r)];
        tan_rec_at[r] = -1;
        if (!tgl_dtype_is_float(init->type.dtype))
            continue;
        tgl_node *t = tin[tgl_scan_in_init(s, r)];
        add(&inits, t ? t : tgl_mk_fill_like(ctx, init, init->type.dtype, 0.0));
        addi(&rec_ntaps, s->rec[r].ntaps);
        for (int a = 0; a < s->rec[r].ntaps; a++) {
            tgl_node *p = s->inner_in[tgl_scan_inner_rec(s, r, a)];
            tgl_node *d = placeholder(ctx, p->type, "d_out");
            addi(&rec_taps, s->rec[r].taps[a]);
            add(&in_rec, d);
            add(&wrt, p);
            add(&dirs, d);
        }
        tan_rec_at[r] = nrec_fwd + ntan_rec++;
    }
    /* Non-sequences: the forward ones, then the tangents of those with one. */
    for (int j = 0; j < s->nnonseq && !st; j++) {
        add(&nonseqs, n->in[tgl_scan_in_nonseq(s, j)]);
        add(&in_ns, s->inner_in[tgl_scan_inner_nonseq(s, j)]);
    }
    for (int j = 0; j < s->nnonseq && !st; j++) {
        tgl_node *t = tin[tgl_scan_in_nonseq(s, j)];
        if (!t)
            continue;
        tgl_node *p = s->inner_in[tgl_scan_inner_nonseq(s, j)];
        tgl_node *d = placeholder(ctx, p->type, "d_nonseq");
        add(&nonseqs, t);
        add(&in_ns, d);
        add(&wrt, p);
        add(&dirs, d);
    }
    if (!st && (seqs.failed || seq_ntaps.failed || seq_taps.failed || inits.failed ||
                rec_ntaps.failed || rec_taps.failed || nonseqs.failed || in_seq.failed ||
                in_rec.failed || in_ns.failed || outs.failed || keep.failed || wrt.failed ||
                dirs.failed))
        st = ctx->last_status ? ctx->last_status
                              : tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan: out of memory");

    /* The body's pushforward: tangents of the recurrent and other outputs. */
    if (!st && wrt.n > 0)
        st = tgl_rop(ctx, nout, s->inner_out, wrt.n, (tgl_node **)wrt.v, (tgl_node **)dirs.v,
                     TGL_DISCONNECTED_ZERO, tan_inner);
    for (int k = 0; k < nout && !st && wrt.n == 0; k++)
        tan_inner[k] = tgl_mk_fill_like(ctx, s->inner_out[k], s->inner_out[k]->type.dtype, 0.0);
    for (int r = 0; r < s->nrec && !st; r++)
        if (tan_rec_at[r] >= 0) {
            add(&outs, tan_inner[r]);
            addi(&keep, s->keep[r]);
        }
    int first_nofb = outs.n, ntan_nofb = 0;
    int *tan_nofb_at = calloc((size_t)s->nnofb + 1, sizeof *tan_nofb_at);
    if (!st && !tan_nofb_at)
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", s->name);
    for (int k = 0; k < s->nnofb && !st; k++) {
        tan_nofb_at[k] = -1;
        if (!tgl_dtype_is_float(s->inner_out[s->nrec + k]->type.dtype))
            continue;
        add(&outs, tan_inner[s->nrec + k]);
        addi(&keep, s->keep[s->nrec + k]);
        tan_nofb_at[k] = first_nofb + ntan_nofb++;
    }
    if (!st && s->has_until)
        add(&outs, s->inner_out[nout]);

    /* The tangent scan. */
    tgl_node *m = NULL;
    if (!st) {
        list inner = {0};
        for (int i = 0; i < in_seq.n; i++)
            add(&inner, in_seq.v[i]);
        for (int i = 0; i < in_rec.n; i++)
            add(&inner, in_rec.v[i]);
        for (int i = 0; i < in_ns.n; i++)
            add(&inner, in_ns.v[i]);
        int *sn = calloc((size_t)seq_ntaps.n + 1, sizeof *sn);
        int *stp = calloc((size_t)seq_taps.n + 1, sizeof *stp);
        int *rn = calloc((size_t)rec_ntaps.n + 1, sizeof *rn);
        int *rtp = calloc((size_t)rec_taps.n + 1, sizeof *rtp);
        int *kp = calloc((size_t)keep.n + 1, sizeof *kp);
        if (inner.failed || !sn || !stp || !rn || !rtp || !kp) {
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", s->name);
        } else {
            for (int i = 0; i < seq_ntaps.n; i++)
                sn[i] = geti(&seq_ntaps, i);
            for (int i = 0; i < seq_taps.n; i++)
                stp[i] = geti(&seq_taps, i);
            for (int i = 0; i < rec_ntaps.n; i++)
                rn[i] = geti(&rec_ntaps, i);
            for (int i = 0; i < rec_taps.n; i++)
                rtp[i] = geti(&rec_taps, i);
            for (int i = 0; i < keep.n; i++)
                kp[i] = geti(&keep, i);
            char name[256];
            snprintf(name, sizeof name, "Rop of %s", s->name);
            tgl_node *ns = n->in[tgl_scan_in_nsteps()];
            tgl_scan_spec sp = {0};
            sp.name = name;
            sp.nseq = seqs.n;
            sp.seq_ntaps = sn;
            sp.seq_taps = stp;
            sp.nrec = inits.n;
            sp.rec_ntaps = rn;
            sp.rec_taps = rtp;
            sp.nnofb = ntan_nofb;
            sp.nnonseq = nonseqs.n;
            sp.has_until = s->has_until;
            sp.reverse = s->reverse;
            sp.truncate_gradient = s->truncate_gradient;
            sp.inner_in = (tgl_node **)inner.v;
            sp.inner_out = (tgl_node **)outs.v;
            /* n_steps as the forward loop had it (-1: the same sequences decide) */
            sp.n_steps = ns->kind == TGL_NODE_CONSTANT && tgl_node_value(ns) &&
                                 tgl_load_as_double(TGL_INT64, tgl_node_value(ns)->data, 0) < 0
                             ? NULL
                             : ns;
            sp.seqs = (tgl_node **)seqs.v;
            sp.inits = (tgl_node **)inits.v;
            sp.nonseqs = (tgl_node **)nonseqs.v;
            sp.keep = kp;
            st = tgl_scan_build(ctx, &sp, n->source, &m);
        }
        free(sn);
        free(stp);
        free(rn);
        free(rtp);
        free(kp);
        free(inner.v);
    }
    for (int r = 0; r < s->nrec && !st; r++)
        tout[r] = NULL;
    for (int r = 0; r < s->nrec && !st; r++)
        if (tan_rec_at[r] >= 0)
            st = tgl_node_output(ctx, m, tan_rec_at[r], &tout[r]);
    for (int k = 0; k < s->nnofb && !st; k++) {
        tout[s->nrec + k] = NULL;
        if (tan_nofb_at[k] >= 0)
            st = tgl_node_output(ctx, m, tan_nofb_at[k], &tout[s->nrec + k]);
    }
    free(tan_rec_at);
    free(tan_inner);
    free(tan_nofb_at);
    free(seqs.v);
    free(seq_ntaps.v);
    free(seq_taps.v);
    free(inits.v);
    free(rec_ntaps.v);
    free(rec_taps.v);
    free(nonseqs.v);
    free(in_seq.v);
    free(in_rec.v);
    free(in_ns.v);
    free(outs.v);
    free(keep.v);
    free(wrt.v);
    free(dirs.v);
    return st;
}
