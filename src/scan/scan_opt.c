/*
 * scan_opt.c — the scan stage of the rewrites: whole-graph passes over the
 * scan nodes of a graph (each named, each excludable like any rule).
 *
 *   scan_hoist      loop-invariant work in the body (depending only on
 *                   non-sequences and constants) is computed once, before
 *                   the loop, and enters the body as a non-sequence.
 *   scan_seq_fill   a sequence that is a fill of one value (the gradient
 *                   of a sum, as a backward scan reads it) is not stored:
 *                   the body fills the shape of a slice of what it filled.
 *   scan_seq_whole  per-step work on the slices of one sequence that does
 *                   not depend on the recurrence and has a product with
 *                   non-sequences in it (the input projection x_t . Wx,
 *                   and elementwise work around it) becomes one
 *                   whole-sequence op before the loop (X . Wx, one GEMM)
 *                   and enters the body as a sequence.
 *   scan_grad_gemm  an accumulator of the backward scan that adds an outer
 *                   product a_t b_t' per step (a weight gradient) becomes
 *                   one GEMM A' B after the loop: A, B are stacked outputs
 *                   (one per distinct vector), or the sequence itself when
 *                   a_t is a sequence's slice.
 *   scan_share_states  a backward scan's copy of the forward states
 *                   (concatenate(h0[-K:], H)) becomes the forward loop's
 *                   own buffer, which holds exactly that.
 *   scan_save_mem   an output of which nothing reads more than the last
 *                   step (h[-1]) keeps only the last step: a ring of K + 1
 *                   entries instead of K + T.
 *
 * Each pass rebuilds one scan node at a time through tgl_scan_build (which
 * drops the inner inputs nobody reads any more) and replaces its outputs
 * in the graph, until no scan changes.  The body itself gets the ordinary
 * rewrites when the inner program is compiled.
 */
#include "scan/scan.h"
#include "engine/opt/opt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- an editable copy of a scan's spec -------------------------------- */

typedef struct espec {
    tgl_scan_spec sp;
    int *seq_ntaps, *seq_taps, *rec_ntaps, *rec_taps, *keep;
    tgl_node **inner_in, **inner_out, **seqs, **inits, **nonseqs;
    int cap_seq, cap_seqtaps, cap_in, cap_out, cap_nonseq;
    int ninner_in;
} espec;

static void espec_free(espec *e)
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
static bool espec_of(const tgl_node *n, int extra, espec *e)
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
        espec_free(e);
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
static void espec_add_seq(espec *e, tgl_node *whole, tgl_node *ph)
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
static void espec_add_nonseq(espec *e, tgl_node *value, tgl_node *ph)
{
    e->inner_in[e->ninner_in++] = ph;
    e->nonseqs[e->sp.nnonseq++] = value;
}

/* ---- node helpers ----------------------------------------------------- */

static tgl_node *placeholder(tgl_ctx *ctx, tgl_type t, const char *name)
{
    tgl_node *n = NULL;
    return tgl_node_input(ctx, t, name, &n) ? NULL : n;
}

/* Where each inner input sits: kind and owner. */
enum { IN_SEQ = 1, IN_REC, IN_NONSEQ };

/* Marks, over the body's nodes in order, what each depends on: bit 1 a
 * sequence slice, bit 2 a recurrent tap. */
static tgl_status dependence(tgl_ctx *ctx, const tgl_scan_layout *s, tgl_node **order,
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
static tgl_node *outer_value(tgl_ctx *ctx, const tgl_node *scan, tgl_node *v)
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
static tgl_status replace_in_body(tgl_ctx *ctx, espec *e, int nout, int nrep, tgl_node **from,
                                  tgl_node **to)
{
    return tgl_clone_replace(ctx, nout, e->inner_out, nrep, from, to, e->inner_out);
}

/* ---- scan_hoist ---------------------------------------------------------- */

/* Worth computing before the loop: real work, not a leaf or a view alone. */
static bool hoistable(const tgl_node *n)
{
    return n->kind == TGL_NODE_APPLY && n->op != TGL_OP_OUTPUT;
}

static tgl_status hoist(tgl_ctx *ctx, tgl_node *n, tgl_node **out)
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
    st = dependence(ctx, s, order, count, &dep, &seq_of);
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
        if (!espec_of(n, nchosen, &e))
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
        tgl_node *v = outer_value(ctx, n, m);
        tgl_node *ph = placeholder(ctx, m->type, m->name ? m->name : "hoisted");
        if (!v || !ph)
            continue; /* not hoisted: no harm */
        from[nrep] = m;
        to[nrep] = ph;
        nrep++;
        espec_add_nonseq(&e, v, ph);
    }
    if (have && !st && nrep > 0) {
        st = replace_in_body(ctx, &e, s->ninner_out, nrep, from, to);
        if (!st)
            st = tgl_scan_build(ctx, &e.sp, n->source, out);
    }
    if (have)
        espec_free(&e);
    free(from);
    free(to);
    free(order);
    tgl_node_map_free(&dep);
    tgl_node_map_free(&seq_of);
    tgl_node_map_free(&isout);
    tgl_node_map_free(&chosen);
    return st;
}

/* ---- scan_seq_whole ------------------------------------------------------ */

/* The whole-sequence version of body node m (which depends on the slices
 * of one sequence, and on non-sequences and constants): a node with a
 * leading axis of steps, or NULL when m's op cannot be lifted.  wh maps
 * body nodes already lifted; slices of sequence i with tap d are the
 * sequence from element d - first on. */
static tgl_node *lift(tgl_ctx *ctx, const tgl_node *scan, tgl_node *m, tgl_node_map *wh,
                      tgl_node_map *dep, tgl_node_map *slice_of)
{
    tgl_node *got = tgl_node_map_get(wh, m);
    if (got)
        return got;
    if (!tgl_node_map_has(dep, m))
        return NULL; /* invariant: used as is (outer_value) by the caller */
    if (m->kind != TGL_NODE_APPLY)
        return NULL;
    const tgl_opimpl *impl = tgl_op_impl(m->op);
    tgl_node *in[3];
    int nd = m->type.ndim;
    if (impl->family == TGL_FAM_ELEMWISE && m->nin <= 3 && m->op != TGL_OP_CAST) {
        for (int k = 0; k < m->nin; k++) {
            tgl_node *x = m->in[k];
            if (tgl_node_map_has(dep, x)) {
                tgl_node *w = tgl_node_map_get(wh, x);
                if (!w)
                    return NULL;
                /* a lower-rank stepped operand: new axes after the steps */
                if (w->type.ndim - 1 < nd) {
                    int64_t order[TGL_MAX_DIMS];
                    int pad = nd - (w->type.ndim - 1), p = 0;
                    order[p++] = 0;
                    for (int q = 0; q < pad; q++)
                        order[p++] = -1;
                    for (int q = 1; q < w->type.ndim; q++)
                        order[p++] = q;
                    w = tgl_mk_dimshuffle(ctx, w, nd + 1, order);
                }
                in[k] = w;
            } else {
                in[k] = outer_value(ctx, scan, x);
            }
            if (!in[k])
                return NULL;
        }
        return tgl_mk(ctx, m->op, m->nin, in, &m->p);
    }
    if (m->op == TGL_OP_CAST) {
        tgl_node *w = tgl_node_map_get(wh, m->in[0]);
        return w ? tgl_mk(ctx, TGL_OP_CAST, 1, &w, &m->p) : NULL;
    }
    if (m->op == TGL_OP_DOT) {
        tgl_node *a = m->in[0], *b = m->in[1];
        bool sa = tgl_node_map_has(dep, a), sb = tgl_node_map_has(dep, b);
        if (sa && !sb && a->type.ndim == 1 && b->type.ndim == 2) {
            /* x_t . W for every t: X . W */
            tgl_node *A = tgl_node_map_get(wh, a), *B = outer_value(ctx, scan, b);
            return A && B ? tgl_mk2(ctx, TGL_OP_DOT, A, B) : NULL;
        }
        if (sa && !sb && a->type.ndim == 2 && b->type.ndim == 2) {
            /* a batch X_t (b,n) . W for every t: (T*b, n) . W, reshaped to (T, b, m) */
            tgl_node *A = tgl_node_map_get(wh, a), *B = outer_value(ctx, scan, b);
            if (!A || !B)
                return NULL;
            tgl_params rp = {0};
            rp.n = 2;
            rp.i[0] = -1;
            rp.i[1] = -4; /* copy axis 2 */
            tgl_node *A2 = tgl_mk(ctx, TGL_OP_RESHAPE, 1, &A, &rp);
            tgl_node *R = tgl_mk2(ctx, TGL_OP_DOT, A2, B);
            tgl_params lead = {0}, tail = {0};
            lead.n = 4;
            lead.i[0] = TGL_IDX_SLICE;
            lead.i[1] = 0;
            lead.i[2] = 2;
            lead.i[3] = 1;
            tail.n = 4;
            tail.i[0] = TGL_IDX_SLICE | TGL_IDX_NO_STOP;
            tail.i[1] = 1;
            tail.i[3] = 1;
            tgl_node *sa_ = tgl_mk1(ctx, TGL_OP_SHAPE, A), *sr = R ? tgl_mk1(ctx, TGL_OP_SHAPE, R) : NULL;
            tgl_node *parts[2] = {sa_ ? tgl_mk(ctx, TGL_OP_SUBTENSOR, 1, &sa_, &lead) : NULL,
                                  sr ? tgl_mk(ctx, TGL_OP_SUBTENSOR, 1, &sr, &tail) : NULL};
            tgl_params cp = {0};
            cp.n = 1;
            tgl_node *shape = parts[0] && parts[1] ? tgl_mk(ctx, TGL_OP_CONCATENATE, 2, parts, &cp)
                                                   : NULL;
            tgl_params op = {0};
            op.n = 3;
            tgl_node *ins2[2] = {R, shape};
            return R && shape ? tgl_mk(ctx, TGL_OP_RESHAPE, 2, ins2, &op) : NULL;
        }
        if (sb && !sa && a->type.ndim == 2 && b->type.ndim == 1) {
            /* W . x_t for every t: X . W' */
            static const int64_t tr[2] = {1, 0};
            tgl_node *A = outer_value(ctx, scan, a), *B = tgl_node_map_get(wh, b);
            return A && B ? tgl_mk2(ctx, TGL_OP_DOT, B, tgl_mk_dimshuffle(ctx, A, 2, tr)) : NULL;
        }
        return NULL;
    }
    (void)slice_of;
    return NULL;
}

static bool real_work(const tgl_node *m)
{
    return m->kind == TGL_NODE_APPLY &&
           (m->op == TGL_OP_DOT || tgl_op_impl(m->op)->family == TGL_FAM_ELEMWISE);
}

static tgl_status seq_whole(tgl_ctx *ctx, tgl_node *n, tgl_node **out)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    *out = NULL;
    if (s->nseq == 0)
        return TGL_OK;
    tgl_node **order = NULL;
    size_t count = 0;
    tgl_status st = tgl_toposort(ctx, s->ninner_out, s->inner_out, &order, &count);
    if (st)
        return st;
    tgl_node_map dep = {0}, seq_of = {0}, wh = {0}, chosen = {0}, dotted = {0};
    if ((st = tgl_node_map_init(ctx, &dep)) || (st = tgl_node_map_init(ctx, &seq_of)) ||
        (st = tgl_node_map_init(ctx, &wh)) || (st = tgl_node_map_init(ctx, &chosen)) ||
        (st = tgl_node_map_init(ctx, &dotted)))
        goto done;
    if ((st = dependence(ctx, s, order, count, &dep, &seq_of)))
        goto done;
    /* Lift every node that depends on the slices of exactly one sequence
     * and on no recurrent tap (dep == 1). */
    for (int i = 0; i < s->nseq && !st; i++) {
        tgl_node *x = n->in[tgl_scan_in_seq(s, i)];
        int span = s->seq[i].span;
        for (int a = 0; a < s->seq[i].ntaps && !st; a++) {
            int off = s->seq[i].taps[a] - s->seq[i].taps[0];
            tgl_params p = {0};
            p.n = 4;
            p.i[0] = TGL_IDX_SLICE | (span - off > 0 ? 0 : TGL_IDX_NO_STOP);
            p.i[1] = off;
            p.i[2] = -(span - off);
            p.i[3] = 1;
            tgl_node *w = tgl_mk(ctx, TGL_OP_SUBTENSOR, 1, &x, &p);
            if (w)
                st = tgl_node_map_set(ctx, &wh, s->inner_in[tgl_scan_inner_seq(s, i, a)], w);
        }
    }
    for (size_t i = 0; i < count && !st; i++) {
        tgl_node *m = order[i];
        if (m->kind != TGL_NODE_APPLY || tgl_node_map_geti(&dep, m, 0) != 1 ||
            tgl_node_map_geti(&seq_of, m, 0) <= 0)
            continue;
        tgl_node *w = lift(ctx, n, m, &wh, &dep, &seq_of);
        /* Errors at run time name the line the user wrote. */
        if (w && !w->source && m->source)
            w->source = strdup(m->source);
        if (w)
            st = tgl_node_map_set(ctx, &wh, m, w);
        bool dot = w && m->op == TGL_OP_DOT;
        for (int k = 0; w && k < m->nin && !dot; k++)
            dot = tgl_node_map_has(&dotted, m->in[k]);
        if (dot && !st)
            st = tgl_node_map_seti(ctx, &dotted, m, 1);
    }
    /* Lifted nodes with a client that was not lifted (or an inner output):
     * they enter the body as sequences.  Only work with a product in it
     * (x_t . W, and what the product's result feeds): one GEMM instead of
     * a product per step is worth a (T, ...) buffer; elementwise work
     * alone is not (the body fuses it with the step's own elementwise
     * ops for the same cost per element, and a backward scan's 1 - h_t^2
     * lifted would be one more buffer of every step). */
    int nchosen = 0;
    for (size_t i = 0; i < count && !st; i++) {
        tgl_node *m = order[i];
        if (m->kind != TGL_NODE_APPLY)
            continue;
        bool lifted_m = tgl_node_map_geti(&dep, m, 0) == 1 && tgl_node_map_has(&wh, m);
        for (int k = 0; k < m->nin && !st; k++) {
            tgl_node *x = m->in[k];
            if (!lifted_m && real_work(x) && tgl_node_map_has(&dotted, x) &&
                tgl_node_map_geti(&dep, x, 0) == 1 && !tgl_node_map_has(&chosen, x))
                st = tgl_node_map_seti(ctx, &chosen, x, nchosen++);
        }
    }
    for (int k = 0; k < s->ninner_out && !st; k++) {
        tgl_node *x = s->inner_out[k];
        if (real_work(x) && tgl_node_map_has(&dotted, x) && tgl_node_map_geti(&dep, x, 0) == 1 &&
            !tgl_node_map_has(&chosen, x))
            st = tgl_node_map_seti(ctx, &chosen, x, nchosen++);
    }
    if (!st && nchosen > 0) {
        espec e;
        if (!espec_of(n, nchosen, &e)) {
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_seq_whole: out of memory");
            goto done;
        }
        tgl_node **from = calloc((size_t)nchosen + 1, sizeof *from);
        tgl_node **to = calloc((size_t)nchosen + 1, sizeof *to);
        int nrep = 0;
        if (!from || !to)
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_seq_whole: out of memory");
        for (size_t i = 0; i < count && !st; i++) {
            tgl_node *m = order[i];
            if (!tgl_node_map_has(&chosen, m))
                continue;
            tgl_node *ph = placeholder(ctx, m->type, m->name ? m->name : "whole[t]");
            if (!ph)
                continue;
            from[nrep] = m;
            to[nrep] = ph;
            nrep++;
            espec_add_seq(&e, tgl_node_map_get(&wh, m), ph);
        }
        if (!st && nrep > 0) {
            st = replace_in_body(ctx, &e, s->ninner_out, nrep, from, to);
            if (!st)
                st = tgl_scan_build(ctx, &e.sp, n->source, out);
        }
        free(from);
        free(to);
        espec_free(&e);
    }
done:
    free(order);
    tgl_node_map_free(&dep);
    tgl_node_map_free(&seq_of);
    tgl_node_map_free(&wh);
    tgl_node_map_free(&chosen);
    tgl_node_map_free(&dotted);
    return st;
}

/* ---- scan_dead_outputs ---------------------------------------------------- */

/* Scan n rebuilt without the outputs drop[k] marks (outputs not fed back,
 * or recurrent ones whose taps nothing left in the body reads), with
 * nextra more outputs not fed back (extra[]) after the others.  *m is the
 * new node; newpos[k] the new position of old output k (-1: dropped);
 * the extras are outputs *first_extra on. */
static tgl_status recompose(tgl_ctx *ctx, tgl_node *n, const bool *drop, int nextra,
                            tgl_node *const *extra, tgl_node **m, int *newpos, int *first_extra)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    int nout = tgl_scan_nout(s);
    espec e;
    if (!espec_of(n, nextra, &e))
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
    espec_free(&e);
    return st;
}

/* Scan n without the outputs drop[k] marks; res[k] gets the new node's
 * output for each output kept. */
static tgl_status drop_outputs(tgl_ctx *ctx, tgl_node *n, const bool *drop, tgl_node **res)
{
    int nout = tgl_scan_nout(tgl_scan_of(n));
    int *newpos = calloc((size_t)nout + 1, sizeof *newpos);
    if (!newpos)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_dead_outputs: out of memory");
    tgl_node *m = NULL;
    int first;
    tgl_status st = recompose(ctx, n, drop, 0, NULL, &m, newpos, &first);
    for (int k = 0; k < nout && !st && m; k++)
        if (newpos[k] >= 0)
            st = tgl_node_output(ctx, m, newpos[k], &res[k]);
    free(newpos);
    return st;
}

/* Which outputs of n nothing reads: not a root, no reader among order[]
 * (and, for a recurrent output, no other output's body reads its taps). */
static tgl_status dead_outputs(tgl_ctx *ctx, tgl_node *n, tgl_node **order, size_t count,
                               int nroots, tgl_node **roots, bool *drop, int *ndrop)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    int nout = tgl_scan_nout(s);
    *ndrop = 0;
    tgl_node **outk = calloc((size_t)nout + 1, sizeof *outk);
    if (!outk)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_dead_outputs: out of memory");
    tgl_status st = TGL_OK;
    for (int k = 0; k < nout && !st; k++) {
        st = tgl_node_output(ctx, n, k, &outk[k]);
        drop[k] = true;
    }
    for (int r = 0; r < nroots && !st; r++)
        for (int k = 0; k < nout; k++)
            if (roots[r] == outk[k])
                drop[k] = false;
    for (size_t j = 0; j < count && !st; j++) {
        tgl_node *c = order[j];
        if (c->kind != TGL_NODE_APPLY)
            continue;
        for (int q = 0; q < c->nin; q++)
            for (int k = 0; k < nout; k++)
                if (c->in[q] == outk[k] && c != outk[k])
                    drop[k] = false;
    }
    /* A recurrent output stays while a kept output's body reads its taps. */
    bool again = true;
    while (again && !st) {
        again = false;
        int nkeep = 0;
        tgl_node **kept = calloc((size_t)s->ninner_out + 1, sizeof *kept);
        if (!kept) {
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_dead_outputs: out of memory");
            break;
        }
        for (int k = 0; k < nout; k++)
            if (!drop[k])
                kept[nkeep++] = s->inner_out[k];
        if (s->has_until)
            kept[nkeep++] = s->inner_out[nout];
        tgl_node_map used;
        if ((st = tgl_reachable(ctx, nkeep, kept, &used, NULL, NULL))) {
            free(kept);
            break;
        }
        for (int r = 0; r < s->nrec && !st; r++) {
            if (!drop[r])
                continue;
            for (int a = 0; a < s->rec[r].ntaps; a++)
                if (tgl_node_map_has(&used, s->inner_in[tgl_scan_inner_rec(s, r, a)])) {
                    drop[r] = false;
                    again = true;
                }
        }
        tgl_node_map_free(&used);
        free(kept);
    }
    for (int k = 0; k < nout; k++)
        *ndrop += drop[k];
    if (*ndrop == nout)
        *ndrop = 0; /* a scan nobody reads is dead code: not this pass's */
    free(outk);
    return st;
}

/* ---- scan_grad_gemm ------------------------------------------------------ */

/* x as a column (n,1) or a row (1,n) of a vector: a dimshuffle adding one
 * broadcastable axis; the vector, or NULL. */
static tgl_node *vector_as(tgl_node *x, bool column)
{
    if (x->kind != TGL_NODE_APPLY || x->op != TGL_OP_DIMSHUFFLE || x->type.ndim != 2 ||
        x->in[0]->type.ndim != 1 || x->p.n != 2)
        return NULL;
    if (column && x->p.i[0] == 0 && x->p.i[1] == -1)
        return x->in[0];
    if (!column && x->p.i[0] == -1 && x->p.i[1] == 0)
        return x->in[0];
    return NULL;
}

/* True when x is all zeros: a zero constant or fill, through dimshuffles. */
static bool is_zeros(tgl_node *x)
{
    while (x->kind == TGL_NODE_APPLY && x->op == TGL_OP_DIMSHUFFLE)
        x = x->in[0];
    double v;
    if (x->kind == TGL_NODE_APPLY && x->op == TGL_OP_FILL_LIKE)
        return x->p.f[0] == 0;
    return tgl_const_value(x, &v) && v == 0;
}

/* The outer-product term of accumulator r of scan n, as vectors a, b
 * (acc' = acc + a b' with a, b not reading acc); false when r is no such
 * accumulator. */
static bool outer_accumulator(tgl_ctx *ctx, const tgl_node *n, int r, tgl_node **pa,
                              tgl_node **pb)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    tgl_node *o = s->inner_out[r];
    tgl_node *acc = s->inner_in[tgl_scan_inner_rec(s, r, 0)];
    if (!tgl_scan_keeps_last(s, r) || s->rec[r].ntaps != 1 || s->rec[r].taps[0] != -1 ||
        !is_zeros(n->in[tgl_scan_in_init(s, r)]) || o->kind != TGL_NODE_APPLY ||
        o->op != TGL_OP_ADD || o->type.ndim != 2)
        return false;
    tgl_node *term = o->in[0] == acc ? o->in[1] : o->in[1] == acc ? o->in[0] : NULL;
    if (!term || term->kind != TGL_NODE_APPLY || term->op != TGL_OP_DOT)
        return false;
    tgl_node *a = vector_as(term->in[0], true), *b = vector_as(term->in[1], false);
    if (!a || !b)
        return false;
    tgl_node *roots[2] = {a, b};
    tgl_node **ord = NULL;
    size_t cnt = 0;
    if (tgl_toposort(ctx, 2, roots, &ord, &cnt))
        return false;
    bool reads = false;
    for (size_t i = 0; i < cnt; i++)
        reads |= ord[i] == acc;
    free(ord);
    /* nothing else in the body may read the accumulator either */
    for (int k = 0; k < s->ninner_out && !reads; k++) {
        if (k == r)
            continue;
        if (tgl_toposort(ctx, 1, &s->inner_out[k], &ord, &cnt))
            return false;
        for (size_t i = 0; i < cnt; i++)
            reads |= ord[i] == acc;
        free(ord);
    }
    if (reads)
        return false;
    *pa = a;
    *pb = b;
    return true;
}

/* When body vector v is the slice placeholder of one of n's sequences
 * (tap d of sequence i), the position of that tap; -1 otherwise.  The
 * stacked values of v over the steps are then the sequence itself, from
 * element d - (first tap) on: the GEMM reads them there instead of a copy. */
static int seq_tap_of(const tgl_node *n, const tgl_node *v, int *seq, int *off)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    if (s->has_until) /* the stacked outputs hold the steps that ran */
        return -1;
    for (int i = 0; i < s->nseq; i++)
        for (int a = 0; a < s->seq[i].ntaps; a++)
            if (s->inner_in[tgl_scan_inner_seq(s, i, a)] == v) {
                *seq = i;
                *off = s->seq[i].taps[a] - s->seq[i].taps[0];
                return tgl_scan_inner_seq(s, i, a);
            }
    return -1;
}

/* x[off : off + len] along axis 0 (len an int64 node). */
static tgl_node *steps_of(tgl_ctx *ctx, tgl_node *x, int off, tgl_node *len)
{
    if (!x || !len)
        return NULL;
    tgl_node *stop = off ? tgl_mk2(ctx, TGL_OP_ADD, len, tgl_mk_scalar(ctx, TGL_INT64, off))
                         : len;
    if (!stop)
        return NULL;
    tgl_params p = {0};
    p.n = 4;
    p.i[0] = TGL_IDX_SLICE | TGL_IDX_STOP_INPUT;
    p.i[1] = off;
    p.i[3] = 1;
    tgl_node *in[2] = {x, stop};
    return tgl_mk(ctx, TGL_OP_SUBTENSOR, 2, in, &p);
}

/* Rebuilds scan n without the outer-product accumulators: each one's
 * vectors a_t, b_t become stacked outputs (one output per distinct vector:
 * the weight gradients of one layer share their delta), or, for a vector
 * that is a sequence's slice, the sequence itself; each accumulator's
 * value is one GEMM A' B after the loop.  At least one side of each
 * product stays a stacked output: its length is the number of steps.
 * res[k] receives each old output's replacement. */
static tgl_status grad_gemm(tgl_ctx *ctx, tgl_node *n, tgl_node **res, bool *changed)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    *changed = false;
    int nout = tgl_scan_nout(s);
    tgl_node **A = calloc((size_t)s->nrec + 1, sizeof *A);
    tgl_node **B = calloc((size_t)s->nrec + 1, sizeof *B);
    if (!A || !B) {
        free(A);
        free(B);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_grad_gemm: out of memory");
    }
    int nfound = 0;
    for (int r = 0; r < s->nrec; r++)
        if (outer_accumulator(ctx, n, r, &A[r], &B[r]))
            nfound++;
        else
            A[r] = B[r] = NULL;
    tgl_status st = TGL_OK;
    if (nfound) {
        bool *drop = calloc((size_t)nout + 1, sizeof *drop);
        tgl_node **extra = calloc((size_t)(2 * nfound) + 1, sizeof *extra);
        int *newpos = calloc((size_t)nout + 1, sizeof *newpos);
        /* per accumulator and side: the extra output it reads (-1: a sequence) */
        int *xa = calloc((size_t)s->nrec + 1, sizeof *xa);
        int *xb = calloc((size_t)s->nrec + 1, sizeof *xb);
        int nx = 0, first = 0;
        tgl_node *m = NULL;
        if (!drop || !extra || !newpos || !xa || !xb)
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_grad_gemm: out of memory");
        for (int r = 0; r < s->nrec && !st; r++) {
            if (!A[r])
                continue;
            drop[r] = true;
            int si, off;
            bool seq_a = seq_tap_of(n, A[r], &si, &off) >= 0;
            bool seq_b = !seq_a && seq_tap_of(n, B[r], &si, &off) >= 0;
            for (int side = 0; side < 2; side++) {
                tgl_node *v = side ? B[r] : A[r];
                int *x = side ? &xb[r] : &xa[r];
                *x = -1;
                if (side ? seq_b : seq_a)
                    continue;
                for (int q = 0; q < nx && *x < 0; q++)
                    if (extra[q] == v)
                        *x = q;
                if (*x < 0) {
                    extra[nx] = v;
                    *x = nx++;
                }
            }
        }
        if (!st)
            st = recompose(ctx, n, drop, nx, extra, &m, newpos, &first);
        static const int64_t tr[2] = {1, 0};
        for (int k = 0; k < nout && !st; k++) {
            if (newpos[k] >= 0) {
                st = tgl_node_output(ctx, m, newpos[k], &res[k]);
                continue;
            }
            int r = k; /* a dropped output is accumulator r = k */
            tgl_node *S[2] = {NULL, NULL};
            int xs[2] = {xa[r], xb[r]};
            for (int side = 0; side < 2 && !st; side++)
                if (xs[side] >= 0)
                    st = tgl_node_output(ctx, m, first + xs[side], &S[side]);
            uint64_t e0 = ctx->nerrors;
            for (int side = 0; side < 2 && !st; side++) {
                if (S[side])
                    continue;
                int si = 0, off = 0;
                seq_tap_of(n, side ? B[r] : A[r], &si, &off);
                S[side] = steps_of(ctx, n->in[tgl_scan_in_seq(s, si)], off,
                                   tgl_scan_length0(ctx, S[1 - side]));
            }
            if (!st)
                res[k] = tgl_mk_cast(ctx, tgl_mk2(ctx, TGL_OP_DOT,
                                                  tgl_mk_dimshuffle(ctx, S[0], 2, tr), S[1]),
                                     s->inner_out[k]->type.dtype);
            if (!st && !res[k])
                st = ctx->nerrors != e0 ? ctx->last_status : TGL_EINTERNAL;
        }
        if (!st)
            *changed = true;
        free(drop);
        free(extra);
        free(newpos);
        free(xa);
        free(xb);
    }
    free(A);
    free(B);
    return st;
}

/* ---- scan_seq_fill ------------------------------------------------------- */

/* A sequence that is a fill, fill_like(Y, c) (what the gradient of a sum
 * of every step sends a backward scan), holds the same value at every
 * step: the scan reads Y's slices instead (Y exists anyway: the fill
 * reads its shape) and the body fills their shape with c, so no (T, ...)
 * array of c is made.  The fill in the body runs on the first step only
 * (mark_invariant: a slice's shape is the same at every step). */
static tgl_status seq_fill(tgl_ctx *ctx, tgl_node *n, tgl_node **out)
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
    if (!espec_of(n, 0, &e))
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
            tgl_node *ph = placeholder(ctx, el, old->name);
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
        st = replace_in_body(ctx, &e, s->ninner_out, nrep, from, to);
    if (!st)
        st = tgl_scan_build(ctx, &e.sp, n->source, out);
    free(from);
    free(to);
    espec_free(&e);
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
static tgl_status share_states(tgl_ctx *ctx, tgl_node *n, tgl_node **order, size_t count,
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
        if (!espec_of(n, 0, &e)) {
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_share_states: out of memory");
        } else {
            for (int r = 0; r < s->nrec; r++)
                if (want[r])
                    e.keep[r] = TGL_SCAN_KEEP_WITH_INIT;
            st = tgl_scan_build(ctx, &e.sp, n->source, &m);
            espec_free(&e);
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

/* ---- scan_save_mem ------------------------------------------------------- */

/* True when m takes the last step of its input: x[-1] along axis 0. */
static bool takes_last(const tgl_node *m)
{
    return m->kind == TGL_NODE_APPLY && m->op == TGL_OP_SUBTENSOR && m->nin == 1 &&
           m->p.n == 4 && (m->p.i[0] & TGL_IDX_KIND_MASK) == TGL_IDX_INDEX &&
           !(m->p.i[0] & TGL_IDX_START_INPUT) && m->p.i[1] == -1;
}

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

/* Merges pairs of scans over the same steps, one pair at a time. */
static tgl_status run_merge(tgl_ctx *ctx, int nroots, tgl_node **roots)
{
    tgl_status st = TGL_OK;
    for (int guard = 0; guard < 1000 && !st; guard++) {
        tgl_node **order = NULL;
        size_t count = 0;
        if ((st = tgl_toposort(ctx, nroots, roots, &order, &count)))
            break;
        bool changed = false;
        for (size_t i = 0; i < count && !st && !changed; i++) {
            tgl_node *a = order[i];
            if (a->kind != TGL_NODE_APPLY || a->op != TGL_OP_SCAN || tgl_scan_of(a)->has_until)
                continue;
            for (size_t j = i + 1; j < count && !st && !changed; j++) {
                tgl_node *b = order[j];
                if (b->kind != TGL_NODE_APPLY || b->op != TGL_OP_SCAN ||
                    tgl_scan_of(b)->has_until)
                    continue;
                const tgl_scan_layout *sa = tgl_scan_of(a), *sb = tgl_scan_of(b);
                if (sa->reverse != sb->reverse ||
                    sa->truncate_gradient != sb->truncate_gradient || !same_steps(a, b) ||
                    depends(ctx, b, a))
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
                    changed = true;
                free(res);
                free(from);
            }
        }
        free(order);
        if (!changed)
            break;
    }
    return st;
}

/* ---- the stage ----------------------------------------------------------- */

typedef enum {
    PASS_DEAD,
    PASS_MERGE,
    PASS_SEQ_FILL,
    PASS_HOIST,
    PASS_SEQ_WHOLE,
    PASS_GRAD_GEMM,
    PASS_SHARE_STATES,
    PASS_SAVE_MEM
} pass_kind;

/* Replaces, in the roots, the outputs of scan node n: output k by res[k]
 * (n's own outputs where res[k] is NULL). */
static tgl_status replace_outputs(tgl_ctx *ctx, tgl_node *n, tgl_node **res, int nroots,
                                  tgl_node **roots, int nextra, tgl_node **xfrom,
                                  tgl_node **xto)
{
    int nout = n->nout;
    int cap = nout + nextra + 1;
    tgl_node **from = malloc(sizeof *from * (size_t)cap);
    tgl_node **to = malloc(sizeof *to * (size_t)cap);
    if (!from || !to) {
        free(from);
        free(to);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan rewrites: out of memory");
    }
    int m = 0;
    tgl_status st = TGL_OK;
    for (int k = 0; k < nout && !st; k++) {
        if (!res[k])
            continue;
        tgl_node *o = NULL;
        st = tgl_node_output(ctx, n, k, &o);
        if (!st && o != res[k]) {
            from[m] = o;
            to[m] = res[k];
            m++;
        }
    }
    for (int k = 0; k < nextra; k++) {
        from[m] = xfrom[k];
        to[m] = xto[k];
        m++;
    }
    if (!st && m)
        st = tgl_clone_replace(ctx, nroots, roots, m, from, to, roots);
    free(from);
    free(to);
    return st;
}

/* One pass kind over the graph, one scan at a time, until nothing changes. */
static tgl_status run_pass(tgl_ctx *ctx, pass_kind kind, int nroots, tgl_node **roots)
{
    tgl_node_map done;
    tgl_status st = tgl_node_map_init(ctx, &done);
    if (st)
        return st;
    for (int guard = 0; guard < 10000 && !st; guard++) {
        tgl_node **order = NULL;
        size_t count = 0;
        if ((st = tgl_toposort(ctx, nroots, roots, &order, &count)))
            break;
        bool changed = false;
        for (size_t i = 0; i < count && !st && !changed; i++) {
            tgl_node *n = order[i];
            if (n->kind != TGL_NODE_APPLY || n->op != TGL_OP_SCAN || tgl_node_map_has(&done, n))
                continue;
            const tgl_scan_layout *s = tgl_scan_of(n);
            int nout = tgl_scan_nout(s);
            tgl_node **res = calloc((size_t)nout + 1, sizeof *res);
            if (!res) {
                st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan rewrites: out of memory");
                break;
            }
            tgl_node *m = NULL;
            uint64_t e0 = ctx->nerrors;
            char saved[TGL_ERRMSG_SIZE];
            snprintf(saved, sizeof saved, "%s", ctx->errmsg);
            tgl_status rst = TGL_OK;
            tgl_node **xfrom = NULL, **xto = NULL;
            int nextra = 0;
            switch (kind) {
            case PASS_MERGE: /* run_merge: pairs, not one scan */
                break;
            case PASS_DEAD: {
                bool *drop = calloc((size_t)nout + 1, sizeof *drop);
                int ndrop = 0;
                rst = drop ? dead_outputs(ctx, n, order, count, nroots, roots, drop, &ndrop)
                           : tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan: out of memory");
                if (!rst && ndrop) {
                    rst = drop_outputs(ctx, n, drop, res);
                    if (!rst)
                        changed = true;
                }
                free(drop);
                break;
            }
            case PASS_SEQ_FILL:
                rst = seq_fill(ctx, n, &m);
                break;
            case PASS_HOIST:
                rst = hoist(ctx, n, &m);
                break;
            case PASS_SHARE_STATES:
                rst = share_states(ctx, n, order, count, res, &xfrom, &xto, &nextra, &changed);
                break;
            case PASS_SEQ_WHOLE:
                rst = seq_whole(ctx, n, &m);
                break;
            case PASS_GRAD_GEMM:
                rst = grad_gemm(ctx, n, res, &changed);
                break;
            case PASS_SAVE_MEM: {
                /* Outputs whose every reader takes the last step, and which
                 * are not roots. */
                tgl_node_map last = {0};
                rst = tgl_node_map_init(ctx, &last);
                int *keep = calloc((size_t)nout + 1, sizeof *keep);
                tgl_node **outk = calloc((size_t)nout + 1, sizeof *outk);
                if (!rst && (!keep || !outk))
                    rst = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_save_mem: out of memory");
                for (int k = 0; k < nout && !rst; k++) {
                    rst = tgl_node_output(ctx, n, k, &outk[k]);
                    keep[k] = s->keep[k] == TGL_SCAN_KEEP_ALL ||
                              s->keep[k] == TGL_SCAN_KEEP_WITH_INIT; /* candidate */
                }
                for (int r = 0; r < nroots && !rst; r++)
                    for (int k = 0; k < nout; k++)
                        if (roots[r] == outk[k])
                            keep[k] = 0;
                int nlast = 0;
                for (size_t j = 0; j < count && !rst; j++) {
                    tgl_node *c = order[j];
                    if (c->kind != TGL_NODE_APPLY)
                        continue;
                    for (int q = 0; q < c->nin; q++)
                        for (int k = 0; k < nout; k++)
                            if (c->in[q] == outk[k] && c != outk[k]) {
                                if (takes_last(c))
                                    nlast++;
                                else
                                    keep[k] = 0;
                            }
                }
                int any = 0;
                for (int k = 0; k < nout && !rst; k++)
                    any |= keep[k];
                if (!rst && any && nlast) {
                    espec e;
                    if (!espec_of(n, 0, &e)) {
                        rst = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_save_mem: out of memory");
                    } else {
                        /* x[-1] of the steps fails on no step; of the
                         * initial values and the steps, it is the last
                         * initial value */
                        for (int k = 0; k < nout; k++)
                            e.keep[k] = !keep[k] ? s->keep[k]
                                        : s->keep[k] == TGL_SCAN_KEEP_WITH_INIT
                                            ? TGL_SCAN_KEEP_LAST
                                            : TGL_SCAN_KEEP_LAST_READ;
                        rst = tgl_scan_build(ctx, &e.sp, n->source, &m);
                        espec_free(&e);
                    }
                    /* readers x[-1] of a kept output -> the new output;
                     * other outputs -> the new node's */
                    xfrom = calloc(count + 1, sizeof *xfrom);
                    xto = calloc(count + 1, sizeof *xto);
                    if (!rst && (!xfrom || !xto))
                        rst = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_save_mem: out of memory");
                    for (size_t j = 0; j < count && !rst; j++) {
                        tgl_node *c = order[j];
                        if (!takes_last(c))
                            continue;
                        for (int k = 0; k < nout && !rst; k++)
                            if (keep[k] && c->in[0] == outk[k]) {
                                rst = tgl_node_output(ctx, m, k, &xto[nextra]);
                                xfrom[nextra++] = c;
                            }
                    }
                    for (int k = 0; k < nout && !rst; k++)
                        if (!keep[k])
                            rst = tgl_node_output(ctx, m, k, &res[k]);
                    if (!rst)
                        changed = true;
                    m = NULL;
                }
                free(keep);
                free(outk);
                tgl_node_map_free(&last);
                break;
            }
            }
            if (!rst && m) {
                for (int k = 0; k < nout && !rst; k++)
                    rst = tgl_node_output(ctx, m, k, &res[k]);
                changed = true;
            }
            if (!rst && changed)
                rst = replace_outputs(ctx, n, res, nroots, roots, nextra, xfrom, xto);
            if (rst) {
                /* A rewrite that cannot be built is no rewrite: restore the
                 * message and leave this scan as it is. */
                (void)e0;
                snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s", saved);
                changed = false;
            }
            if (!changed || m)
                st = tgl_node_map_seti(ctx, &done, m ? m : n, 1);
            if (changed && !st) {
                /* the new scan is done for this pass */
                for (int k = 0; k < nout && !st; k++)
                    if (res[k] && res[k]->kind == TGL_NODE_APPLY && res[k]->op == TGL_OP_OUTPUT)
                        st = tgl_node_map_seti(ctx, &done, res[k]->in[0], 1);
                    else if (res[k] && res[k]->op == TGL_OP_SCAN)
                        st = tgl_node_map_seti(ctx, &done, res[k], 1);
                for (int k = 0; k < nextra && !st; k++)
                    if (xto[k]->op == TGL_OP_OUTPUT)
                        st = tgl_node_map_seti(ctx, &done, xto[k]->in[0], 1);
                    else
                        st = tgl_node_map_seti(ctx, &done, xto[k], 1);
            }
            free(xfrom);
            free(xto);
            free(res);
        }
        free(order);
        if (!changed)
            break;
    }
    tgl_node_map_free(&done);
    return st;
}

static const struct {
    const char *name;
    pass_kind kind;
    const char *synopsis;
} passes[] = {
    {"scan_dead_outputs", PASS_DEAD,
     "outputs of a scan that nothing reads (e.g. the gradient of a sequence nobody asked for) "
     "are not computed"},
    {"scan_merge", PASS_MERGE,
     "independent scans over the same steps (the same n_steps, or the same sequences) become "
     "one loop"},
    {"scan_seq_fill", PASS_SEQ_FILL,
     "a scan sequence that is a fill of one value (the gradient of a sum, in a backward scan) "
     "is filled per step in the body instead of stored for every step"},
    {"scan_hoist", PASS_HOIST,
     "loop-invariant work in a scan's body is computed once before the loop"},
    {"scan_seq_whole", PASS_SEQ_WHOLE,
     "per-step products of one sequence's slices with non-sequences (x_t . W, and the "
     "elementwise work around them) become one whole-sequence op before the loop"},
    {"scan_grad_gemm", PASS_GRAD_GEMM,
     "an accumulated outer product in a backward scan (a weight gradient) becomes one GEMM "
     "after the loop"},
    {"scan_share_states", PASS_SHARE_STATES,
     "a backward scan reads the forward scan's states (initial values and steps) from the "
     "loop's own buffer instead of a copy joining them"},
    {"scan_save_mem", PASS_SAVE_MEM,
     "a scan output read only through its last step keeps only the last step"},
};

#define NPASSES ((int)(sizeof passes / sizeof passes[0]))

static const char *pass_name(int i)
{
    return i >= 0 && i < NPASSES ? passes[i].name : NULL;
}

static const char *pass_synopsis(int i)
{
    return i >= 0 && i < NPASSES ? passes[i].synopsis : NULL;
}

/* Every pass not excluded, in order, over the graphs of roots. */
static tgl_status scan_optimize(tgl_ctx *ctx, int n, tgl_node **roots)
{
    /* Only graphs with a scan pay for the walk. */
    tgl_node **order = NULL;
    size_t count = 0;
    tgl_status st = tgl_toposort(ctx, n, roots, &order, &count);
    if (st)
        return st;
    bool any = false;
    for (size_t i = 0; i < count && !any; i++)
        any = order[i]->kind == TGL_NODE_APPLY && order[i]->op == TGL_OP_SCAN;
    free(order);
    for (int p = 0; any && p < NPASSES && !st; p++)
        if (!tgl_rule_excluded(ctx, passes[p].name))
            st = passes[p].kind == PASS_MERGE ? run_merge(ctx, n, roots)
                                              : run_pass(ctx, passes[p].kind, n, roots);
    return st;
}

const tgl_rewrite_stage tgl_scan_stage = {
    .name = "scan",
    .npasses = NPASSES,
    .pass_name = pass_name,
    .pass_synopsis = pass_synopsis,
    .run = scan_optimize,
};
