/*
 * scan_gemm.c — the scan passes that turn per-step matrix-vector work into
 * one matrix-matrix product outside the loop (one GEMM instead of T GEMVs):
 *
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
 *
 * Run by the scan stage (scan_opt.c); declared in scan_opt.h.
 */
#include "scan/scan_opt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
                in[k] = tgl_scan_outer_value(ctx, scan, x);
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
            tgl_node *A = tgl_node_map_get(wh, a), *B = tgl_scan_outer_value(ctx, scan, b);
            return A && B ? tgl_mk2(ctx, TGL_OP_DOT, A, B) : NULL;
        }
        if (sa && !sb && a->type.ndim == 2 && b->type.ndim == 2) {
            /* a batch X_t (b,n) . W for every t: (T*b, n) . W, reshaped to (T, b, m) */
            tgl_node *A = tgl_node_map_get(wh, a), *B = tgl_scan_outer_value(ctx, scan, b);
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
            tgl_node *A = tgl_scan_outer_value(ctx, scan, a), *B = tgl_node_map_get(wh, b);
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

tgl_status tgl_scan_seq_whole(tgl_ctx *ctx, tgl_node *n, tgl_node **out)
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
    if ((st = tgl_scan_dependence(ctx, s, order, count, &dep, &seq_of)))
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
        if (!tgl_espec_of(n, nchosen, &e)) {
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
            tgl_node *ph = tgl_scan_placeholder(ctx, m->type, m->name ? m->name : "whole[t]");
            if (!ph)
                continue;
            from[nrep] = m;
            to[nrep] = ph;
            nrep++;
            tgl_espec_add_seq(&e, tgl_node_map_get(&wh, m), ph);
        }
        if (!st && nrep > 0) {
            st = tgl_scan_replace_in_body(ctx, &e, s->ninner_out, nrep, from, to);
            if (!st)
                st = tgl_scan_build(ctx, &e.sp, n->source, out);
        }
        free(from);
        free(to);
        tgl_espec_free(&e);
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
tgl_status tgl_scan_grad_gemm(tgl_ctx *ctx, tgl_node *n, tgl_node **res, bool *changed)
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
            st = tgl_scan_recompose(ctx, n, drop, nx, extra, &m, newpos, &first);
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
