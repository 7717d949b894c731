/*
 * scan_hoist.c — the scan passes that move work across the loop's edge
 * without changing what the body computes:
 *
 *   scan_hoist      loop-invariant work in the body (depending only on
 *                   non-sequences and constants) is computed once, before
 *                   the loop, and enters the body as a non-sequence.
 *   scan_seq_fill   a sequence that is a fill of one value (the gradient
 *                   of a sum, as a backward scan reads it) is not stored:
 *                   the body fills the shape of a slice of what it filled.
 *
 * Run by the scan stage (scan_opt.c); declared in scan_opt.h.
 */
#include "scan/scan_opt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- scan_hoist ---------------------------------------------------------- */

/* Worth computing before the loop: real work, not a leaf or a view alone. */
static bool hoistable(const tgl_node *n)
{
    return n->kind == TGL_NODE_APPLY && n->op != TGL_OP_OUTPUT;
}

tgl_status tgl_scan_hoist(tgl_ctx *ctx, tgl_node *n, tgl_node **out)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    *out = NULL;
    tgl_node **order = NULL;
    size_t count = 0;
    tgl_status st = tgl_toposort(ctx, s->ninner_out, s->inner_out, &order, &count);
    if (st)
        return st;
    tgl_node_map dep = {0}, seq_of = {0}, isout = {0};
    if ((st = tgl_node_map_init(ctx, &dep)) || (st = tgl_node_map_init(ctx, &seq_of)) ||
        (st = tgl_node_map_init(ctx, &isout))) {
        free(order);
        tgl_node_map_free(&dep);
        tgl_node_map_free(&seq_of);
        return st;
    }
    st = tgl_scan_dependence(ctx, s, order, count, &dep, &seq_of);
    for (int k = 0; k < s->ninner_out && !st; k++)
        st = tgl_node_map_seti(ctx, &isout, s->inner_out[k], 1);
    /* Maximal invariant nodes: invariant, with a client that is not (or an
     * inner output). */
    tgl_node_map chosen = {0};
    if (!st)
        st = tgl_node_map_init(ctx, &chosen);
    int nchosen = 0;
    for (size_t i = 0; i < count && !st; i++) {
        tgl_node *m = order[i];
        if (m->kind != TGL_NODE_APPLY || !tgl_node_map_has(&dep, m))
            continue;
        for (int k = 0; k < m->nin && !st; k++) {
            tgl_node *x = m->in[k];
            if (hoistable(x) && !tgl_node_map_has(&dep, x) && !tgl_node_map_has(&chosen, x)) {
                st = tgl_node_map_seti(ctx, &chosen, x, nchosen++);
            }
        }
    }
    for (int k = 0; k < s->ninner_out && !st; k++) {
        tgl_node *x = s->inner_out[k];
        if (hoistable(x) && !tgl_node_map_has(&dep, x) && !tgl_node_map_has(&chosen, x))
            st = tgl_node_map_seti(ctx, &chosen, x, nchosen++);
    }
    /* An invariant node that only reads constants is constant folding's. */
    espec e;
    bool have = false;
    if (!st && nchosen > 0) {
        if (!tgl_espec_of(n, nchosen, &e))
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_hoist: out of memory");
        else
            have = true;
    }
    tgl_node **from = NULL, **to = NULL;
    int nrep = 0;
    if (have) {
        from = calloc((size_t)nchosen + 1, sizeof *from);
        to = calloc((size_t)nchosen + 1, sizeof *to);
        if (!from || !to)
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_hoist: out of memory");
    }
    for (size_t i = 0; have && i < count && !st; i++) {
        tgl_node *m = order[i];
        if (!tgl_node_map_has(&chosen, m))
            continue;
        tgl_node *v = tgl_scan_outer_value(ctx, n, m);
        tgl_node *ph = tgl_scan_placeholder(ctx, m->type, m->name ? m->name : "hoisted");
        if (!v || !ph)
            continue; /* not hoisted: no harm */
        from[nrep] = m;
        to[nrep] = ph;
        nrep++;
        tgl_espec_add_nonseq(&e, v, ph);
    }
    if (have && !st && nrep > 0) {
        st = tgl_scan_replace_in_body(ctx, &e, s->ninner_out, nrep, from, to);
        if (!st)
            st = tgl_scan_build(ctx, &e.sp, n->source, out);
    }
    if (have)
        tgl_espec_free(&e);
    free(from);
    free(to);
    free(order);
    tgl_node_map_free(&dep);
    tgl_node_map_free(&seq_of);
    tgl_node_map_free(&isout);
    tgl_node_map_free(&chosen);
    return st;
}

/* ---- scan_seq_fill ------------------------------------------------------- */

/* A sequence that is a fill, fill_like(Y, c) (what the gradient of a sum
 * of every step sends a backward scan), holds the same value at every
 * step: the scan reads Y's slices instead (Y exists anyway: the fill
 * reads its shape) and the body fills their shape with c, so no (T, ...)
 * array of c is made.  The fill in the body runs on the first step only
 * (mark_invariant: a slice's shape is the same at every step). */
tgl_status tgl_scan_seq_fill(tgl_ctx *ctx, tgl_node *n, tgl_node **out)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    *out = NULL;
    int nfill = 0, ntaps = 0;
    for (int i = 0; i < s->nseq; i++) {
        tgl_node *x = n->in[tgl_scan_in_seq(s, i)];
        if (x->kind == TGL_NODE_APPLY && x->op == TGL_OP_FILL_LIKE)
            nfill++;
        ntaps += s->seq[i].ntaps;
    }
    if (!nfill)
        return TGL_OK;
    espec e;
    if (!tgl_espec_of(n, 0, &e))
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_seq_fill: out of memory");
    tgl_node **from = calloc((size_t)ntaps + 1, sizeof *from);
    tgl_node **to = calloc((size_t)ntaps + 1, sizeof *to);
    tgl_status st = from && to ? TGL_OK
                               : tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_seq_fill: out of memory");
    int nrep = 0;
    uint64_t e0 = ctx->nerrors;
    for (int i = 0; i < s->nseq && !st; i++) {
        tgl_node *x = n->in[tgl_scan_in_seq(s, i)];
        if (x->kind != TGL_NODE_APPLY || x->op != TGL_OP_FILL_LIKE)
            continue;
        tgl_node *Y = x->in[0];
        tgl_type el = tgl_type_make(Y->type.dtype, Y->type.ndim - 1, Y->type.bcast >> 1);
        e.seqs[i] = Y;
        for (int a = 0; a < s->seq[i].ntaps; a++) {
            int pos = tgl_scan_inner_seq(s, i, a);
            tgl_node *old = s->inner_in[pos];
            tgl_node *ph = tgl_scan_placeholder(ctx, el, old->name);
            from[nrep] = old;
            to[nrep] = tgl_mk_fill_like(ctx, ph, x->type.dtype, x->p.f[0]);
            if (!ph || !to[nrep]) {
                st = ctx->nerrors != e0 ? ctx->last_status : TGL_EINTERNAL;
                break;
            }
            e.inner_in[pos] = ph;
            nrep++;
        }
    }
    if (!st)
        st = tgl_scan_replace_in_body(ctx, &e, s->ninner_out, nrep, from, to);
    if (!st)
        st = tgl_scan_build(ctx, &e.sp, n->source, out);
    free(from);
    free(to);
    tgl_espec_free(&e);
    return st;
}
