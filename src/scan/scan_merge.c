/*
 * scan_merge.c — the scan passes that work across two loops:
 *
 *   scan_merge      independent scans over the same steps (the same
 *                   n_steps node, or the same sequences with the same
 *                   spans) become one loop running both bodies.
 *   scan_share_states  a backward scan's copy of the forward states
 *                   (concatenate(h0[-K:], H)) becomes the forward loop's
 *                   own buffer, which holds exactly that.
 *
 * Run by the scan stage (scan_opt.c); declared in scan_opt.h.
 */
#include "scan/scan_opt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- scan_merge ---------------------------------------------------------- */

/* True when a and b run the same number of steps for certain: the same
 * n_steps node, and (when the sequences decide) the same sequences with
 * the same spans. */
static bool same_steps(const tgl_node *a, const tgl_node *b)
{
    const tgl_scan_layout *sa = tgl_scan_of(a), *sb = tgl_scan_of(b);
    tgl_node *na = a->in[tgl_scan_in_nsteps()], *nb = b->in[tgl_scan_in_nsteps()];
    if (na != nb)
        return false;
    double v;
    bool inferred = na->kind == TGL_NODE_CONSTANT && tgl_const_value(na, &v) && v < 0;
    if (!inferred)
        return true;
    /* every sequence of one is a sequence of the other, with its span */
    for (int pass = 0; pass < 2; pass++) {
        const tgl_node *x = pass ? b : a, *y = pass ? a : b;
        const tgl_scan_layout *sx = tgl_scan_of(x), *sy = tgl_scan_of(y);
        for (int i = 0; i < sx->nseq; i++) {
            bool found = false;
            for (int j = 0; j < sy->nseq && !found; j++)
                found = x->in[tgl_scan_in_seq(sx, i)] == y->in[tgl_scan_in_seq(sy, j)] &&
                        sx->seq[i].span == sy->seq[j].span;
            if (!found)
                return false;
        }
    }
    return sa->nseq > 0 && sb->nseq > 0;
}

/* True when node `from` is among the ancestors of `to`. */
static bool depends(tgl_ctx *ctx, tgl_node *to, const tgl_node *from)
{
    tgl_node **ord = NULL;
    size_t cnt = 0;
    if (tgl_toposort(ctx, 1, &to, &ord, &cnt))
        return true; /* unsure: do not merge */
    bool dep = false;
    for (size_t i = 0; i < cnt && !dep; i++)
        dep = ord[i] == from;
    free(ord);
    return dep;
}

/* One scan running a's and b's bodies side by side; resa/resb receive the
 * replacements of a's and b's outputs. */
static tgl_status merge_two(tgl_ctx *ctx, tgl_node *a, tgl_node *b, tgl_node **resa,
                            tgl_node **resb)
{
    const tgl_scan_layout *L[2] = {tgl_scan_of(a), tgl_scan_of(b)};
    const tgl_node *N[2] = {a, b};
    int nseq = 0, nseqtaps = 0, nrec = 0, nrectaps = 0, nnofb = 0, nnonseq = 0;
    for (int q = 0; q < 2; q++) {
        nseq += L[q]->nseq;
        nrec += L[q]->nrec;
        nnofb += L[q]->nnofb;
        nnonseq += L[q]->nnonseq;
        for (int i = 0; i < L[q]->nseq; i++)
            nseqtaps += L[q]->seq[i].ntaps;
        for (int r = 0; r < L[q]->nrec; r++)
            nrectaps += L[q]->rec[r].ntaps;
    }
    int nin = nseqtaps + nrectaps + nnonseq, nout = nrec + nnofb;
    int *seq_ntaps = calloc((size_t)nseq + 1, sizeof(int));
    int *seq_taps = calloc((size_t)nseqtaps + 1, sizeof(int));
    int *rec_ntaps = calloc((size_t)nrec + 1, sizeof(int));
    int *rec_taps = calloc((size_t)nrectaps + 1, sizeof(int));
    int *keep = calloc((size_t)nout + 1, sizeof(int));
    tgl_node **inner_in = calloc((size_t)nin + 1, sizeof(tgl_node *));
    tgl_node **inner_out = calloc((size_t)nout + 1, sizeof(tgl_node *));
    tgl_node **seqs = calloc((size_t)nseq + 1, sizeof(tgl_node *));
    tgl_node **inits = calloc((size_t)nrec + 1, sizeof(tgl_node *));
    tgl_node **nonseqs = calloc((size_t)nnonseq + 1, sizeof(tgl_node *));
    tgl_status st = TGL_OK;
    if (!seq_ntaps || !seq_taps || !rec_ntaps || !rec_taps || !keep || !inner_in || !inner_out ||
        !seqs || !inits || !nonseqs)
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_merge: out of memory");
    int wi = 0, ws = 0, wt = 0, wr = 0, wrt = 0, wo = 0, wn = 0;
    for (int q = 0; q < 2 && !st; q++)
        for (int i = 0; i < L[q]->nseq; i++) {
            seq_ntaps[ws] = L[q]->seq[i].ntaps;
            seqs[ws++] = N[q]->in[tgl_scan_in_seq(L[q], i)];
            for (int t = 0; t < L[q]->seq[i].ntaps; t++) {
                seq_taps[wt++] = L[q]->seq[i].taps[t];
                inner_in[wi++] = L[q]->inner_in[tgl_scan_inner_seq(L[q], i, t)];
            }
        }
    for (int q = 0; q < 2 && !st; q++)
        for (int r = 0; r < L[q]->nrec; r++) {
            rec_ntaps[wr] = L[q]->rec[r].ntaps;
            inits[wr++] = N[q]->in[tgl_scan_in_init(L[q], r)];
            for (int t = 0; t < L[q]->rec[r].ntaps; t++) {
                rec_taps[wrt++] = L[q]->rec[r].taps[t];
                inner_in[wi++] = L[q]->inner_in[tgl_scan_inner_rec(L[q], r, t)];
            }
            keep[wo] = L[q]->keep[r];
            inner_out[wo++] = L[q]->inner_out[r];
        }
    for (int q = 0; q < 2 && !st; q++)
        for (int j = 0; j < L[q]->nnonseq; j++) {
            nonseqs[wn++] = N[q]->in[tgl_scan_in_nonseq(L[q], j)];
            inner_in[wi++] = L[q]->inner_in[tgl_scan_inner_nonseq(L[q], j)];
        }
    for (int q = 0; q < 2 && !st; q++)
        for (int k = L[q]->nrec; k < tgl_scan_nout(L[q]); k++) {
            keep[wo] = L[q]->keep[k];
            inner_out[wo++] = L[q]->inner_out[k];
        }
    tgl_node *m = NULL;
    if (!st) {
        char name[256];
        snprintf(name, sizeof name, "%s+%s", L[0]->name, L[1]->name);
        tgl_scan_spec sp = {0};
        tgl_node *ns = a->in[tgl_scan_in_nsteps()];
        double v;
        sp.name = name;
        sp.nseq = nseq;
        sp.seq_ntaps = seq_ntaps;
        sp.seq_taps = seq_taps;
        sp.nrec = nrec;
        sp.rec_ntaps = rec_ntaps;
        sp.rec_taps = rec_taps;
        sp.nnofb = nnofb;
        sp.nnonseq = nnonseq;
        sp.reverse = L[0]->reverse;
        sp.truncate_gradient = L[0]->truncate_gradient;
        sp.inner_in = inner_in;
        sp.inner_out = inner_out;
        sp.n_steps = ns->kind == TGL_NODE_CONSTANT && tgl_const_value(ns, &v) && v < 0 ? NULL : ns;
        sp.seqs = seqs;
        sp.inits = inits;
        sp.nonseqs = nonseqs;
        sp.keep = keep;
        st = tgl_scan_build(ctx, &sp, a->source, &m);
    }
    /* Output positions: a's recurrent, b's recurrent, a's others, b's others. */
    for (int k = 0; k < tgl_scan_nout(L[0]) && !st; k++) {
        int pos = k < L[0]->nrec ? k : nrec + (k - L[0]->nrec);
        st = tgl_node_output(ctx, m, pos, &resa[k]);
    }
    for (int k = 0; k < tgl_scan_nout(L[1]) && !st; k++) {
        int pos = k < L[1]->nrec ? L[0]->nrec + k : nrec + L[0]->nnofb + (k - L[1]->nrec);
        st = tgl_node_output(ctx, m, pos, &resb[k]);
    }
    free(seq_ntaps);
    free(seq_taps);
    free(rec_ntaps);
    free(rec_taps);
    free(keep);
    free(inner_in);
    free(inner_out);
    free(seqs);
    free(inits);
    free(nonseqs);
    return st;
}

/* One step of scan_merge (the stage repeats it to a fixpoint): merges the
 * first pair of scans in order that run the same steps and do not depend
 * on each other. */
tgl_status tgl_scan_merge_step(tgl_ctx *ctx, tgl_node **order, size_t count, int nroots,
                               tgl_node **roots, bool *changed)
{
    tgl_status st = TGL_OK;
    for (size_t i = 0; i < count && !st && !*changed; i++) {
        tgl_node *a = order[i];
        if (a->kind != TGL_NODE_APPLY || a->op != TGL_OP_SCAN || tgl_scan_of(a)->has_until)
            continue;
        for (size_t j = i + 1; j < count && !st && !*changed; j++) {
            tgl_node *b = order[j];
            if (b->kind != TGL_NODE_APPLY || b->op != TGL_OP_SCAN || tgl_scan_of(b)->has_until)
                continue;
            const tgl_scan_layout *sa = tgl_scan_of(a), *sb = tgl_scan_of(b);
            if (sa->reverse != sb->reverse || sa->truncate_gradient != sb->truncate_gradient ||
                !same_steps(a, b) || depends(ctx, b, a))
                continue;
            int na = tgl_scan_nout(sa), nb = tgl_scan_nout(sb);
            tgl_node **res = calloc((size_t)(na + nb) + 1, sizeof *res);
            tgl_node **from = calloc((size_t)(na + nb) + 1, sizeof *from);
            if (!res || !from) {
                free(res);
                free(from);
                st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_merge: out of memory");
                break;
            }
            char saved[TGL_ERRMSG_SIZE];
            snprintf(saved, sizeof saved, "%s", ctx->errmsg);
            tgl_status rst = merge_two(ctx, a, b, res, res + na);
            for (int k = 0; k < na && !rst; k++)
                rst = tgl_node_output(ctx, a, k, &from[k]);
            for (int k = 0; k < nb && !rst; k++)
                rst = tgl_node_output(ctx, b, k, &from[na + k]);
            if (!rst)
                rst = tgl_clone_replace(ctx, nroots, roots, na + nb, from, res, roots);
            if (rst)
                snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s", saved);
            else
                *changed = true;
            free(res);
            free(from);
        }
    }
    return st;
}

/* ---- scan_share_states --------------------------------------------------- */

/* True when x is init's last K entries: init[-K:], or init itself when
 * its leading axis is broadcastable (length 1) and K is 1. */
static bool init_tail(const tgl_node *x, const tgl_node *init, int K)
{
    if (x == init)
        return K == 1 && (init->type.bcast & 1u);
    return x->kind == TGL_NODE_APPLY && x->op == TGL_OP_SUBTENSOR && x->nin == 1 &&
           x->in[0] == init && x->p.n == 4 &&
           x->p.i[0] == (TGL_IDX_SLICE | TGL_IDX_NO_STOP) && x->p.i[1] == -K && x->p.i[3] == 1;
}

/* Which recurrent output of forward scan n concatenation c joins to the
 * initial values it started from (concatenate(h0[-K:], H) along axis 0:
 * the states a backward scan reads as h_{t-1} and h_t); -1 for none. */
static int joins_states(const tgl_node *n, tgl_node *const *outk, const tgl_node *c)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    if (c->kind != TGL_NODE_APPLY || c->op != TGL_OP_CONCATENATE || c->nin != 2 ||
        c->p.i[0] != 0)
        return -1;
    for (int r = 0; r < s->nrec; r++)
        if (s->keep[r] == TGL_SCAN_KEEP_ALL && c->in[1] == outk[r] &&
            init_tail(c->in[0], n->in[tgl_scan_in_init(s, r)], s->rec[r].K))
            return r;
    return -1;
}

/* Such a concatenation is a copy of what the loop's own buffer holds (the
 * K initial values, then every step): the scan hands out that buffer
 * (keep = TGL_SCAN_KEEP_WITH_INIT) and the concatenation becomes it; the
 * output of the steps becomes a view of it from entry K on.  res[k]
 * receives each old output's replacement, (*xfrom, *xto) the
 * concatenations' (*nx of them). */
tgl_status tgl_scan_share_states(tgl_ctx *ctx, tgl_node *n, tgl_node **order, size_t count,
                                 tgl_node **res, tgl_node ***xfrom, tgl_node ***xto, int *nx,
                                 bool *changed)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    int nout = tgl_scan_nout(s);
    *changed = false;
    *nx = 0;
    if (s->reverse || s->nrec == 0)
        return TGL_OK;
    tgl_node **outk = calloc((size_t)s->nrec + 1, sizeof *outk);
    bool *want = calloc((size_t)s->nrec + 1, sizeof *want);
    tgl_status st = outk && want ? TGL_OK
                                 : tgl_ctx_set_error(ctx, TGL_ENOMEM,
                                                     "scan_share_states: out of memory");
    for (int r = 0; r < s->nrec && !st; r++)
        st = tgl_node_output(ctx, n, r, &outk[r]);
    int nmatch = 0;
    for (size_t j = 0; j < count && !st; j++) {
        int r = joins_states(n, outk, order[j]);
        if (r >= 0) {
            want[r] = true;
            nmatch++;
        }
    }
    tgl_node *m = NULL;
    if (!st && nmatch) {
        espec e;
        if (!tgl_espec_of(n, 0, &e)) {
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_share_states: out of memory");
        } else {
            for (int r = 0; r < s->nrec; r++)
                if (want[r])
                    e.keep[r] = TGL_SCAN_KEEP_WITH_INIT;
            st = tgl_scan_build(ctx, &e.sp, n->source, &m);
            tgl_espec_free(&e);
        }
        *xfrom = calloc((size_t)nmatch + 1, sizeof **xfrom);
        *xto = calloc((size_t)nmatch + 1, sizeof **xto);
        if (!st && (!*xfrom || !*xto))
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_share_states: out of memory");
        for (size_t j = 0; j < count && !st; j++) {
            int r = joins_states(n, outk, order[j]);
            if (r < 0)
                continue;
            (*xfrom)[*nx] = order[j];
            st = tgl_node_output(ctx, m, r, &(*xto)[*nx]);
            (*nx)++;
        }
        uint64_t e0 = ctx->nerrors;
        for (int k = 0; k < nout && !st; k++) {
            st = tgl_node_output(ctx, m, k, &res[k]);
            if (!st && k < s->nrec && want[k]) {
                tgl_params p = {0};
                p.n = 4;
                p.i[0] = TGL_IDX_SLICE | TGL_IDX_NO_STOP;
                p.i[1] = s->rec[k].K;
                p.i[3] = 1;
                res[k] = tgl_mk(ctx, TGL_OP_SUBTENSOR, 1, &res[k], &p);
                if (!res[k])
                    st = ctx->nerrors != e0 ? ctx->last_status : TGL_EINTERNAL;
            }
        }
        if (!st)
            *changed = true;
    }
    free(outk);
    free(want);
    return st;
}
