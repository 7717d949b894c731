/*
 * scan_edit.c — how the scan rewrite passes edit a scan: an editable copy
 * of a scan node's spec (espec) to rebuild it from through tgl_scan_build,
 * the body helpers several passes use (placeholders, what the body's
 * nodes depend on, a body value computed outside), and recompose (a scan
 * rebuilt without some outputs and with new ones: scan_dead_outputs and
 * scan_grad_gemm).  Declared in scan_opt.h.
 */
#include "scan/scan_opt.h"

#include <stdlib.h>
#include <string.h>

/* ---- an editable copy of a scan's spec -------------------------------- */

void tgl_espec_free(espec *e)
{
    free(e->seq_ntaps);
    free(e->seq_taps);
    free(e->rec_ntaps);
    free(e->rec_taps);
    free(e->keep);
    free(e->inner_in);
    free(e->inner_out);
    free(e->seqs);
    free(e->inits);
    free(e->nonseqs);
}

/* The spec of scan node n, with room for `extra` more sequences, inner
 * inputs, inner outputs and non-sequences. */
bool tgl_espec_of(const tgl_node *n, int extra, espec *e)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    memset(e, 0, sizeof *e);
    int nseqtaps = 0, nrectaps = 0;
    for (int i = 0; i < s->nseq; i++)
        nseqtaps += s->seq[i].ntaps;
    for (int r = 0; r < s->nrec; r++)
        nrectaps += s->rec[r].ntaps;
    int nout = s->nrec + s->nnofb;
    e->cap_seq = s->nseq + extra + 1;
    e->cap_seqtaps = nseqtaps + extra + 1;
    e->cap_in = s->ninner_in + 2 * extra + 1;
    e->cap_out = s->ninner_out + 2 * extra + 1;
    e->cap_nonseq = s->nnonseq + extra + 1;
    e->seq_ntaps = calloc((size_t)e->cap_seq, sizeof(int));
    e->seq_taps = calloc((size_t)e->cap_seqtaps, sizeof(int));
    e->rec_ntaps = calloc((size_t)s->nrec + 1, sizeof(int));
    e->rec_taps = calloc((size_t)nrectaps + 1, sizeof(int));
    e->keep = calloc((size_t)e->cap_out, sizeof(int));
    e->inner_in = calloc((size_t)e->cap_in, sizeof(tgl_node *));
    e->inner_out = calloc((size_t)e->cap_out, sizeof(tgl_node *));
    e->seqs = calloc((size_t)e->cap_seq, sizeof(tgl_node *));
    e->inits = calloc((size_t)s->nrec + 1, sizeof(tgl_node *));
    e->nonseqs = calloc((size_t)e->cap_nonseq, sizeof(tgl_node *));
    if (!e->seq_ntaps || !e->seq_taps || !e->rec_ntaps || !e->rec_taps || !e->keep ||
        !e->inner_in || !e->inner_out || !e->seqs || !e->inits || !e->nonseqs) {
        tgl_espec_free(e);
        return false;
    }
    int t = 0;
    for (int i = 0; i < s->nseq; i++) {
        e->seq_ntaps[i] = s->seq[i].ntaps;
        e->seqs[i] = n->in[tgl_scan_in_seq(s, i)];
        for (int a = 0; a < s->seq[i].ntaps; a++)
            e->seq_taps[t++] = s->seq[i].taps[a];
    }
    t = 0;
    for (int r = 0; r < s->nrec; r++) {
        e->rec_ntaps[r] = s->rec[r].ntaps;
        e->inits[r] = n->in[tgl_scan_in_init(s, r)];
        for (int a = 0; a < s->rec[r].ntaps; a++)
            e->rec_taps[t++] = s->rec[r].taps[a];
    }
    for (int j = 0; j < s->nnonseq; j++)
        e->nonseqs[j] = n->in[tgl_scan_in_nonseq(s, j)];
    memcpy(e->inner_in, s->inner_in, sizeof(tgl_node *) * (size_t)s->ninner_in);
    memcpy(e->inner_out, s->inner_out, sizeof(tgl_node *) * (size_t)s->ninner_out);
    for (int k = 0; k < nout; k++)
        e->keep[k] = s->keep[k];
    e->ninner_in = s->ninner_in;
    tgl_scan_spec *sp = &e->sp;
    sp->name = s->name;
    sp->nseq = s->nseq;
    sp->seq_ntaps = e->seq_ntaps;
    sp->seq_taps = e->seq_taps;
    sp->nrec = s->nrec;
    sp->rec_ntaps = e->rec_ntaps;
    sp->rec_taps = e->rec_taps;
    sp->nnofb = s->nnofb;
    sp->nnonseq = s->nnonseq;
    sp->has_until = s->has_until;
    sp->reverse = s->reverse;
    sp->truncate_gradient = s->truncate_gradient;
    sp->inner_in = e->inner_in;
    sp->inner_out = e->inner_out;
    /* n_steps: -1 (a constant) means "the sequences decide": say so. */
    tgl_node *ns = n->in[tgl_scan_in_nsteps()];
    double v;
    sp->n_steps = ns->kind == TGL_NODE_CONSTANT && tgl_const_value(ns, &v) && v < 0 ? NULL : ns;
    sp->seqs = e->seqs;
    sp->inits = e->inits;
    sp->nonseqs = e->nonseqs;
    sp->keep = e->keep;
    return true;
}

/* Adds a sequence with one tap 0 read through placeholder ph (inserted
 * after the other sequences' taps). */
void tgl_espec_add_seq(espec *e, tgl_node *whole, tgl_node *ph)
{
    tgl_scan_spec *sp = &e->sp;
    int nseqtaps = 0;
    for (int i = 0; i < sp->nseq; i++)
        nseqtaps += e->seq_ntaps[i];
    memmove(e->inner_in + nseqtaps + 1, e->inner_in + nseqtaps,
            sizeof(tgl_node *) * (size_t)(e->ninner_in - nseqtaps));
    e->inner_in[nseqtaps] = ph;
    e->ninner_in++;
    e->seq_taps[nseqtaps] = 0;
    e->seq_ntaps[sp->nseq] = 1;
    e->seqs[sp->nseq] = whole;
    sp->nseq++;
}

/* Adds a non-sequence read through placeholder ph. */
void tgl_espec_add_nonseq(espec *e, tgl_node *value, tgl_node *ph)
{
    e->inner_in[e->ninner_in++] = ph;
    e->nonseqs[e->sp.nnonseq++] = value;
}

/* ---- node helpers ----------------------------------------------------- */

tgl_node *tgl_scan_placeholder(tgl_ctx *ctx, tgl_type t, const char *name)
{
    tgl_node *n = NULL;
    return tgl_node_input(ctx, t, name, &n) ? NULL : n;
}

/* Marks, over the body's nodes in order, what each depends on: bit 1 a
 * sequence slice, bit 2 a recurrent tap. */
tgl_status tgl_scan_dependence(tgl_ctx *ctx, const tgl_scan_layout *s, tgl_node **order,
                               size_t count, tgl_node_map *dep, tgl_node_map *seq_of)
{
    tgl_status st = TGL_OK;
    for (int i = 0; i < s->nseq && !st; i++)
        for (int a = 0; a < s->seq[i].ntaps && !st; a++) {
            tgl_node *p = s->inner_in[tgl_scan_inner_seq(s, i, a)];
            st = tgl_node_map_seti(ctx, dep, p, 1);
            if (!st)
                st = tgl_node_map_seti(ctx, seq_of, p, i + 1);
        }
    for (int r = 0; r < s->nrec && !st; r++)
        for (int a = 0; a < s->rec[r].ntaps && !st; a++)
            st = tgl_node_map_seti(ctx, dep, s->inner_in[tgl_scan_inner_rec(s, r, a)], 2);
    for (size_t i = 0; i < count && !st; i++) {
        tgl_node *n = order[i];
        if (n->kind != TGL_NODE_APPLY)
            continue;
        int64_t d = 0, sq = 0;
        for (int k = 0; k < n->nin; k++) {
            d |= tgl_node_map_geti(dep, n->in[k], 0);
            int64_t si = tgl_node_map_geti(seq_of, n->in[k], 0);
            if (si)
                sq = sq == 0 || sq == si ? si : -1;
        }
        /* A random draw or a nested loop still counts as the body's own work. */
        if (d)
            st = tgl_node_map_seti(ctx, dep, n, d);
        if (!st && sq)
            st = tgl_node_map_seti(ctx, seq_of, n, sq);
    }
    return st;
}

/* The outer value of a body node that depends only on non-sequences and
 * constants: the node with each non-sequence placeholder replaced by its
 * outer value. */
tgl_node *tgl_scan_outer_value(tgl_ctx *ctx, const tgl_node *scan, tgl_node *v)
{
    const tgl_scan_layout *s = tgl_scan_of(scan);
    tgl_node **from = malloc(sizeof *from * ((size_t)s->nnonseq + 1));
    tgl_node **to = malloc(sizeof *to * ((size_t)s->nnonseq + 1));
    tgl_node *res = NULL;
    if (from && to) {
        for (int j = 0; j < s->nnonseq; j++) {
            from[j] = s->inner_in[tgl_scan_inner_nonseq(s, j)];
            to[j] = scan->in[tgl_scan_in_nonseq(s, j)];
        }
        if (tgl_clone_replace(ctx, 1, &v, s->nnonseq, from, to, &res))
            res = NULL;
    }
    free(from);
    free(to);
    return res;
}

/* The body's outputs with each from[k] replaced by to[k]. */
tgl_status tgl_scan_replace_in_body(tgl_ctx *ctx, espec *e, int nout, int nrep, tgl_node **from,
                                    tgl_node **to)
{
    return tgl_clone_replace(ctx, nout, e->inner_out, nrep, from, to, e->inner_out);
}

/* ---- rebuilding a scan ----------------------------------------------- */

/* Scan n rebuilt without the outputs drop[k] marks (outputs not fed back,
 * or recurrent ones whose taps nothing left in the body reads), with
 * nextra more outputs not fed back (extra[]) after the others.  *m is the
 * new node; newpos[k] the new position of old output k (-1: dropped);
 * the extras are outputs *first_extra on. */
tgl_status tgl_scan_recompose(tgl_ctx *ctx, tgl_node *n, const bool *drop, int nextra,
                              tgl_node *const *extra, tgl_node **m, int *newpos, int *first_extra)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    int nout = tgl_scan_nout(s);
    espec e;
    if (!tgl_espec_of(n, nextra, &e))
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan rewrites: out of memory");
    int nseqtaps = 0;
    for (int i = 0; i < s->nseq; i++)
        nseqtaps += s->seq[i].ntaps;
    int wi = nseqtaps, wr = 0, wt = 0, wo = 0, wn = 0;
    for (int r = 0; r < s->nrec; r++) {
        newpos[r] = -1;
        if (drop[r])
            continue;
        e.rec_ntaps[wr] = s->rec[r].ntaps;
        e.inits[wr] = n->in[tgl_scan_in_init(s, r)];
        for (int a = 0; a < s->rec[r].ntaps; a++) {
            e.rec_taps[wt++] = s->rec[r].taps[a];
            e.inner_in[wi++] = s->inner_in[tgl_scan_inner_rec(s, r, a)];
        }
        e.inner_out[wo] = s->inner_out[r];
        e.keep[wo] = s->keep[r];
        newpos[r] = wo++;
        wr++;
    }
    for (int j = 0; j < s->nnonseq; j++)
        e.inner_in[wi++] = s->inner_in[tgl_scan_inner_nonseq(s, j)];
    for (int k = s->nrec; k < nout; k++) {
        newpos[k] = -1;
        if (drop[k])
            continue;
        e.inner_out[wo] = s->inner_out[k];
        e.keep[wo] = s->keep[k];
        newpos[k] = wo++;
        wn++;
    }
    *first_extra = wo;
    for (int x = 0; x < nextra; x++) {
        e.inner_out[wo] = extra[x];
        e.keep[wo++] = 0;
    }
    if (s->has_until)
        e.inner_out[wo++] = s->inner_out[nout];
    e.sp.nrec = wr;
    e.sp.nnofb = wn + nextra;
    e.ninner_in = wi;
    *m = NULL;
    tgl_status st = wr + wn + nextra > 0 ? tgl_scan_build(ctx, &e.sp, n->source, m) : TGL_OK;
    tgl_espec_free(&e);
    return st;
}
