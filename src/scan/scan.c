/*
 * scan.c — the scan op: a loop whose body is a graph (scan.h).
 *
 * Building (tgl_scan_build): the caller's body (inner placeholders and
 * inner outputs) is checked against the outer sequences, initial values
 * and non-sequences; every other leaf of the body (shared variables,
 * outer inputs) becomes an extra non-sequence with a placeholder of its
 * own, so the body refers to nothing outside itself; inner inputs nothing
 * reads are dropped.  The layout is a payload, interned like a fused
 * program, and the node a multi-output node.
 *
 * Compiling (scan_prepare, the op's prepare_inner hook): the body becomes an inner program with all
 * the ordinary rewrites, once per outer compile.
 *
 * Running (scan_exec_hook, the op's exec_inner hook): each step points a fixed set of view
 * descriptors at the step's slices of the sequences and of the recurrent
 * outputs' buffers, runs the inner program on the scan's own frame (its
 * buffers are reused step after step), and copies each inner output into
 * its place in the output buffers.  A recurrent output keeps every step
 * in a (K + T)-entry buffer whose first K entries are the initial values,
 * so taps read earlier steps in place; the output is a view of its
 * steps (or, keep = TGL_SCAN_KEEP_WITH_INIT, of the whole buffer: what a
 * backward scan reads as h_{t-1} and h_t, without a copy).  With a last-
 * only keep it is a ring of K + 1 entries.  After the first step nothing
 * is allocated.
 */
#include "scan/scan.h"
#include "engine/backend.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the layout as a payload ---------------------------------------- */

int tgl_scan_inner_seq(const tgl_scan_layout *s, int i, int a)
{
    int p = 0;
    for (int j = 0; j < i; j++)
        p += s->seq[j].ntaps;
    return p + a;
}

int tgl_scan_inner_rec(const tgl_scan_layout *s, int r, int a)
{
    int p = 0;
    for (int j = 0; j < s->nseq; j++)
        p += s->seq[j].ntaps;
    for (int j = 0; j < r; j++)
        p += s->rec[j].ntaps;
    return p + a;
}

static void scan_free(tgl_scan_layout *s)
{
    if (!s)
        return;
    for (int i = 0; s->seq && i < s->nseq; i++)
        free(s->seq[i].taps);
    for (int r = 0; s->rec && r < s->nrec; r++)
        free(s->rec[r].taps);
    free(s->seq);
    free(s->rec);
    free(s->keep);
    free(s->inner_in);
    free(s->inner_out);
    free(s->name);
    free(s);
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

static uint64_t scan_hash(const tgl_scan_layout *s)
{
    uint64_t h = 0x5ca9;
    h = mix(h, (uint64_t)s->nseq);
    h = mix(h, (uint64_t)s->nrec);
    h = mix(h, (uint64_t)s->nnofb);
    h = mix(h, (uint64_t)s->nnonseq);
    h = mix(h, (uint64_t)s->has_until | (uint64_t)s->reverse << 1);
    h = mix(h, (uint64_t)(int64_t)s->truncate_gradient);
    for (int i = 0; i < s->ninner_in; i++)
        h = mix(h, s->inner_in[i]->id);
    for (int i = 0; i < s->ninner_out; i++)
        h = mix(h, s->inner_out[i]->id);
    for (int k = 0; k < tgl_scan_nout(s); k++)
        h = mix(h, (uint64_t)s->keep[k]);
    return h;
}

static bool same_taps(int na, const int32_t *a, int nb, const int32_t *b)
{
    return na == nb && memcmp(a, b, sizeof *a * (size_t)na) == 0;
}

static bool scan_equal(const tgl_payload *pa, const tgl_payload *pb)
{
    const tgl_scan_layout *a = (const tgl_scan_layout *)pa, *b = (const tgl_scan_layout *)pb;
    if (a->nseq != b->nseq || a->nrec != b->nrec || a->nnofb != b->nnofb ||
        a->nnonseq != b->nnonseq || a->has_until != b->has_until || a->reverse != b->reverse ||
        a->truncate_gradient != b->truncate_gradient || a->ninner_in != b->ninner_in ||
        a->ninner_out != b->ninner_out || strcmp(a->name, b->name) != 0)
        return false;
    for (int i = 0; i < a->nseq; i++)
        if (!same_taps(a->seq[i].ntaps, a->seq[i].taps, b->seq[i].ntaps, b->seq[i].taps))
            return false;
    for (int r = 0; r < a->nrec; r++)
        if (!same_taps(a->rec[r].ntaps, a->rec[r].taps, b->rec[r].ntaps, b->rec[r].taps))
            return false;
    return memcmp(a->inner_in, b->inner_in, sizeof *a->inner_in * (size_t)a->ninner_in) == 0 &&
           memcmp(a->inner_out, b->inner_out, sizeof *a->inner_out * (size_t)a->ninner_out) == 0 &&
           memcmp(a->keep, b->keep, sizeof *a->keep * (size_t)tgl_scan_nout(a)) == 0;
}

static void scan_destroy(tgl_payload *p)
{
    scan_free((tgl_scan_layout *)p);
}

static void scan_nodes(const tgl_payload *p, void (*visit)(tgl_node *, void *), void *arg)
{
    const tgl_scan_layout *s = (const tgl_scan_layout *)p;
    for (int i = 0; i < s->ninner_in; i++)
        visit(s->inner_in[i], arg);
    for (int i = 0; i < s->ninner_out; i++)
        visit(s->inner_out[i], arg);
}

static void scan_describe(const tgl_payload *p, char *buf, size_t size)
{
    const tgl_scan_layout *s = (const tgl_scan_layout *)p;
    int n = snprintf(buf, size, "scan#%u{%s: %d seq, %d rec, %d out, %d nonseq", p->id, s->name,
                     s->nseq, s->nrec, s->nnofb, s->nnonseq);
    bool any_last = false, any_init = false;
    for (int k = 0; k < tgl_scan_nout(s); k++) {
        any_last |= tgl_scan_keeps_last(s, k);
        any_init |= s->keep[k] == TGL_SCAN_KEEP_WITH_INIT;
    }
    if (n > 0 && (size_t)n < size && any_last) {
        n += snprintf(buf + n, size - (size_t)n, ", last only:");
        for (int k = 0; k < tgl_scan_nout(s) && n > 0 && (size_t)n < size; k++)
            if (tgl_scan_keeps_last(s, k))
                n += snprintf(buf + n, size - (size_t)n, " %d", k + 1);
    }
    if (n > 0 && (size_t)n < size && any_init) {
        n += snprintf(buf + n, size - (size_t)n, ", with initial values:");
        for (int k = 0; k < tgl_scan_nout(s) && n > 0 && (size_t)n < size; k++)
            if (s->keep[k] == TGL_SCAN_KEEP_WITH_INIT)
                n += snprintf(buf + n, size - (size_t)n, " %d", k + 1);
    }
    if (n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "%s%s}", s->has_until ? ", until" : "",
                 s->reverse ? ", reverse" : "");
}

const tgl_payload_vt tgl_scan_vt = {
    .kind = "scan",
    .equal = scan_equal,
    .destroy = scan_destroy,
    .nodes = scan_nodes,
    .describe = scan_describe,
};

/* ---- types ---------------------------------------------------------- */

/* The type of t with one more leading axis (not broadcastable). */
static tgl_type stacked(tgl_type t)
{
    return tgl_type_make(t.dtype, t.ndim + 1, t.bcast << 1);
}

/* The type of one element of t along its leading axis. */
static tgl_type element(tgl_type t)
{
    return tgl_type_make(t.dtype, t.ndim - 1, t.bcast >> 1);
}

static tgl_type scan_out_type(const tgl_node *n, int k)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    tgl_type t = k < s->nrec ? element(n->in[tgl_scan_in_init(s, k)]->type)
                             : s->inner_out[k]->type;
    return tgl_scan_keeps_last(s, k) ? t : stacked(t);
}

static tgl_status scan_infer(tgl_ctx *ctx, tgl_node *n)
{
    TGL_CHECK(n->payload && n->payload->vt == &tgl_scan_vt, TGL_EINVAL,
              "scan: a scan node is built by tgl_scan_layout");
    const tgl_scan_layout *s = tgl_scan_of(n);
    TGL_CHECK(n->nin == 1 + s->nseq + s->nrec + s->nnonseq, TGL_EINVAL,
              "scan '%s': %d inputs where the layout has %d", s->name, n->nin,
              1 + s->nseq + s->nrec + s->nnonseq);
    n->nout = (int16_t)tgl_scan_nout(s);
    n->type = scan_out_type(n, 0);
    return TGL_OK;
}

/* ---- building ------------------------------------------------------- */

/* Names an inner output for messages, 1-based as fn returns them. */
static const char *out_label(const tgl_scan_spec *sp, int k, char *buf, size_t size)
{
    if (k < sp->nrec)
        snprintf(buf, size, "recurrent output %d", k + 1);
    else if (k < sp->nrec + sp->nnofb)
        snprintf(buf, size, "output %d (not fed back)", k - sp->nrec + 1);
    else
        snprintf(buf, size, "the until condition");
    return buf;
}

/* The work area of tgl_scan_build: the lists as they grow (closures) and
 * shrink (pruning). */
typedef struct building {
    tgl_ctx *ctx;
    const char *name;
    int nseq, nrec, nnofb, nnonseq, has_until;
    int32_t *seq_ntaps, *seq_taps, *rec_ntaps, *rec_taps;
    int ninner_in, ninner_out;
    tgl_node **inner_in, **inner_out;
    tgl_node **seqs, **inits, **nonseqs;
} building;

static void building_free(building *b)
{
    free(b->seq_ntaps);
    free(b->seq_taps);
    free(b->rec_ntaps);
    free(b->rec_taps);
    free(b->inner_in);
    free(b->inner_out);
    free(b->seqs);
    free(b->inits);
    free(b->nonseqs);
}

static tgl_status oom(tgl_ctx *ctx, const char *name)
{
    return tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", name);
}

/* Checks the spec and copies it into b (with room for closures). */
static tgl_status take_spec(tgl_ctx *ctx, const tgl_scan_spec *sp, building *b)
{
    const char *nm = b->name;
    char t1[96], t2[96], lb[64];
    TGL_CHECK(sp->nseq >= 0 && sp->nrec >= 0 && sp->nnofb >= 0 && sp->nnonseq >= 0 &&
                  (sp->nseq == 0 || (sp->seq_ntaps && sp->seq_taps && sp->seqs)) &&
                  (sp->nrec == 0 || (sp->rec_ntaps && sp->rec_taps && sp->inits)) &&
                  (sp->nnonseq == 0 || sp->nonseqs),
              TGL_EINVAL, "scan '%s': bad arguments", nm);
    TGL_CHECK(sp->nrec + sp->nnofb > 0, TGL_EINVAL,
              "scan '%s': the step function returns no output", nm);
    TGL_CHECK(sp->nseq > 0 || sp->n_steps, TGL_EINVAL,
              "scan '%s': with no sequences, n_steps is required", nm);
    int ntap_seq = 0, ntap_rec = 0;
    for (int i = 0; i < sp->nseq; i++) {
        TGL_CHECK(sp->seq_ntaps[i] >= 1 && sp->seq_ntaps[i] <= 4096, TGL_EINVAL,
                  "scan '%s': sequence %d has %d taps (at least one)", nm, i + 1,
                  sp->seq_ntaps[i]);
        for (int a = 1; a < sp->seq_ntaps[i]; a++)
            TGL_CHECK(sp->seq_taps[ntap_seq + a] > sp->seq_taps[ntap_seq + a - 1], TGL_EINVAL,
                      "scan '%s': the taps of sequence %d must increase", nm, i + 1);
        ntap_seq += sp->seq_ntaps[i];
    }
    for (int r = 0; r < sp->nrec; r++) {
        TGL_CHECK(sp->rec_ntaps[r] >= 1 && sp->rec_ntaps[r] <= 4096, TGL_EINVAL,
                  "scan '%s': recurrent output %d has %d taps (at least one)", nm, r + 1,
                  sp->rec_ntaps[r]);
        for (int a = 0; a < sp->rec_ntaps[r]; a++) {
            int tap = sp->rec_taps[ntap_rec + a];
            TGL_CHECK(tap < 0, TGL_EINVAL,
                      "scan '%s': recurrent output %d has tap %d; its taps must be negative "
                      "(-1 is the previous step)", nm, r + 1, tap);
            TGL_CHECK(a == 0 || tap > sp->rec_taps[ntap_rec + a - 1], TGL_EINVAL,
                      "scan '%s': the taps of recurrent output %d must increase", nm, r + 1);
        }
        ntap_rec += sp->rec_ntaps[r];
    }
    int nin = ntap_seq + ntap_rec + sp->nnonseq;
    int nout = sp->nrec + sp->nnofb + (sp->has_until ? 1 : 0);
    TGL_CHECK(sp->inner_in || nin == 0, TGL_EINVAL, "scan '%s': no inner inputs", nm);
    TGL_CHECK(sp->inner_out, TGL_EINVAL, "scan '%s': no inner outputs", nm);
    if (sp->n_steps) {
        tgl_type t = sp->n_steps->type;
        TGL_CHECK(t.ndim == 0 && (t.dtype == TGL_INT32 || t.dtype == TGL_INT64 ||
                                  t.dtype == TGL_UINT8),
                  TGL_EDTYPE, "scan '%s': n_steps must be an integer scalar, got %s", nm,
                  tgl_type_str(t, t1, sizeof t1));
    }
    for (int i = 0; i < nin; i++) {
        TGL_CHECK(sp->inner_in[i] && sp->inner_in[i]->kind == TGL_NODE_INPUT, TGL_EINVAL,
                  "scan '%s': inner input %d is not a placeholder input", nm, i + 1);
        for (int j = 0; j < i; j++)
            TGL_CHECK(sp->inner_in[j] != sp->inner_in[i], TGL_EINVAL,
                      "scan '%s': inner inputs %d and %d are the same node", nm, j + 1, i + 1);
    }
    for (int k = 0; k < nout; k++)
        TGL_CHECK(sp->inner_out[k] && sp->inner_out[k]->nout == 1, TGL_EINVAL,
                  "scan '%s': %s is %s", nm, out_label(sp, k, lb, sizeof lb),
                  sp->inner_out[k] ? "a node with several values" : "missing");
    /* Sequences and their slices. */
    int p = 0;
    for (int i = 0; i < sp->nseq; i++) {
        tgl_node *x = sp->seqs[i];
        TGL_CHECK(x, TGL_EINVAL, "scan '%s': sequence %d is NULL", nm, i + 1);
        TGL_CHECK(x->type.ndim >= 1, TGL_ESHAPE,
                  "scan '%s': sequence %d is a scalar; a sequence has a leading axis of steps",
                  nm, i + 1);
        for (int a = 0; a < sp->seq_ntaps[i]; a++, p++) {
            tgl_type want = element(x->type), got = sp->inner_in[p]->type;
            TGL_CHECK(want.dtype == got.dtype && want.ndim == got.ndim, TGL_EDTYPE,
                      "scan '%s': the slice placeholder of sequence %d is %s, the slices are %s",
                      nm, i + 1, tgl_type_str(got, t1, sizeof t1),
                      tgl_type_str(want, t2, sizeof t2));
        }
    }
    for (int r = 0; r < sp->nrec; r++) {
        tgl_node *h0 = sp->inits[r];
        TGL_CHECK(h0, TGL_EINVAL, "scan '%s': the initial value of output %d is NULL", nm, r + 1);
        TGL_CHECK(h0->type.ndim >= 1 && h0->type.ndim < TGL_MAX_DIMS, TGL_ESHAPE,
                  "scan '%s': the initial values of recurrent output %d need a leading axis "
                  "of earlier steps", nm, r + 1);
        tgl_type st = element(h0->type);
        for (int a = 0; a < sp->rec_ntaps[r]; a++, p++) {
            tgl_type got = sp->inner_in[p]->type;
            TGL_CHECK(st.dtype == got.dtype && st.ndim == got.ndim, TGL_EDTYPE,
                      "scan '%s': the placeholder of recurrent output %d is %s, its initial "
                      "value %s", nm, r + 1, tgl_type_str(got, t1, sizeof t1),
                      tgl_type_str(st, t2, sizeof t2));
        }
        tgl_type o = sp->inner_out[r]->type;
        TGL_CHECK(o.dtype == st.dtype && o.ndim == st.ndim, TGL_EDTYPE,
                  "scan '%s': recurrent output %d is %s at each step, but its initial value is "
                  "%s (a recurrent output keeps its dtype and rank: cast the initial value or "
                  "the output)", nm, r + 1, tgl_type_str(o, t1, sizeof t1),
                  tgl_type_str(st, t2, sizeof t2));
    }
    for (int j = 0; j < sp->nnonseq; j++, p++) {
        TGL_CHECK(sp->nonseqs[j], TGL_EINVAL, "scan '%s': non-sequence %d is NULL", nm, j + 1);
        tgl_type want = sp->nonseqs[j]->type, got = sp->inner_in[p]->type;
        TGL_CHECK(want.dtype == got.dtype && want.ndim == got.ndim, TGL_EDTYPE,
                  "scan '%s': the placeholder of non-sequence %d is %s, the value %s", nm, j + 1,
                  tgl_type_str(got, t1, sizeof t1), tgl_type_str(want, t2, sizeof t2));
    }
    for (int k = sp->nrec; k < sp->nrec + sp->nnofb; k++)
        TGL_CHECK(sp->inner_out[k]->type.ndim < TGL_MAX_DIMS, TGL_ESHAPE,
                  "scan '%s': %s has %d dimensions; stacking its steps needs one more", nm,
                  out_label(sp, k, lb, sizeof lb), sp->inner_out[k]->type.ndim);
    if (sp->has_until) {
        tgl_type c = sp->inner_out[nout - 1]->type;
        TGL_CHECK(c.ndim == 0 && c.dtype == TGL_BOOL, TGL_EDTYPE,
                  "scan '%s': the until condition must be a boolean scalar (a comparison), "
                  "got %s", nm, tgl_type_str(c, t1, sizeof t1));
    }

    b->nseq = sp->nseq;
    b->nrec = sp->nrec;
    b->nnofb = sp->nnofb;
    b->nnonseq = sp->nnonseq;
    b->has_until = sp->has_until != 0;
    b->ninner_in = nin;
    b->ninner_out = nout;
    b->seq_ntaps = malloc(sizeof(int32_t) * (size_t)(sp->nseq + 1));
    b->seq_taps = malloc(sizeof(int32_t) * (size_t)(ntap_seq + 1));
    b->rec_ntaps = malloc(sizeof(int32_t) * (size_t)(sp->nrec + 1));
    b->rec_taps = malloc(sizeof(int32_t) * (size_t)(ntap_rec + 1));
    b->inner_out = malloc(sizeof(tgl_node *) * (size_t)(nout + 1));
    b->seqs = malloc(sizeof(tgl_node *) * (size_t)(sp->nseq + 1));
    b->inits = malloc(sizeof(tgl_node *) * (size_t)(sp->nrec + 1));
    /* inner_in and nonseqs grow with the closures: sized later. */
    if (!b->seq_ntaps || !b->seq_taps || !b->rec_ntaps || !b->rec_taps || !b->inner_out ||
        !b->seqs || !b->inits)
        return oom(ctx, nm);
    for (int i = 0; i < sp->nseq; i++)
        b->seq_ntaps[i] = sp->seq_ntaps[i], b->seqs[i] = sp->seqs[i];
    for (int i = 0; i < ntap_seq; i++)
        b->seq_taps[i] = sp->seq_taps[i];
    for (int r = 0; r < sp->nrec; r++)
        b->rec_ntaps[r] = sp->rec_ntaps[r], b->inits[r] = sp->inits[r];
    for (int i = 0; i < ntap_rec; i++)
        b->rec_taps[i] = sp->rec_taps[i];
    for (int k = 0; k < nout; k++)
        b->inner_out[k] = sp->inner_out[k];
    return TGL_OK;
}

/* Every leaf of the body that is not an inner input or a constant (a
 * shared variable, an outer input) becomes a non-sequence: a new
 * placeholder stands for it inside. */
static tgl_status take_closures(tgl_ctx *ctx, const tgl_scan_spec *sp, building *b)
{
    tgl_node **order = NULL;
    size_t count = 0;
    tgl_status st = tgl_toposort(ctx, b->ninner_out, b->inner_out, &order, &count);
    if (st)
        return st;
    tgl_node_map mine;
    if ((st = tgl_node_map_init(ctx, &mine))) {
        free(order);
        return st;
    }
    int nin0 = b->ninner_in;
    for (int i = 0; i < nin0 && !st; i++)
        st = tgl_node_map_seti(ctx, &mine, sp->inner_in[i], 1);
    size_t nfree = 0;
    for (size_t i = 0; i < count; i++) {
        tgl_node *n = order[i];
        if ((n->kind == TGL_NODE_INPUT || n->kind == TGL_NODE_SHARED) &&
            !tgl_node_map_has(&mine, n))
            order[nfree++] = n; /* reuse order as the list of free leaves */
    }
    b->inner_in = malloc(sizeof(tgl_node *) * (size_t)(nin0 + (int)nfree + 1));
    b->nonseqs = malloc(sizeof(tgl_node *) * (size_t)(b->nnonseq + (int)nfree + 1));
    tgl_node **to = malloc(sizeof(tgl_node *) * (nfree + 1));
    if (!st && (!b->inner_in || !b->nonseqs || !to))
        st = oom(ctx, b->name);
    for (int i = 0; !st && i < nin0; i++)
        b->inner_in[i] = sp->inner_in[i];
    for (int j = 0; !st && j < b->nnonseq; j++)
        b->nonseqs[j] = sp->nonseqs[j];
    for (size_t i = 0; !st && i < nfree; i++) {
        tgl_node *leaf = order[i];
        st = tgl_node_input(ctx, leaf->type, leaf->name, &to[i]);
        if (!st) {
            b->inner_in[b->ninner_in++] = to[i];
            b->nonseqs[b->nnonseq++] = leaf;
        }
    }
    if (!st && nfree)
        st = tgl_clone_replace(ctx, b->ninner_out, b->inner_out, (int)nfree, order, to,
                               b->inner_out);
    free(to);
    free(order);
    tgl_node_map_free(&mine);
    return st;
}

/* A slice x[from:] along axis 0 (from a constant). */
static tgl_node *slice_from(tgl_ctx *ctx, tgl_node *x, int64_t from)
{
    tgl_params p = {0};
    p.n = 4;
    p.i[0] = TGL_IDX_SLICE | TGL_IDX_NO_STOP;
    p.i[1] = from;
    p.i[3] = 1;
    return tgl_mk(ctx, TGL_OP_SUBTENSOR, 1, &x, &p);
}

/* Drops inner inputs no output reads: non-sequences, and for a backward
 * scan (reverse: built by the pullback, whose sequences are long enough by
 * construction) sequence taps and whole sequences.  A user's scan keeps
 * its sequences: their declared taps decide how many steps there are and
 * check n_steps.  Dropping a sequence's first taps slices the sequence so
 * that the taps left read the same elements. */
static tgl_status prune(tgl_ctx *ctx, const tgl_scan_spec *sp, building *b)
{
    tgl_node_map used;
    tgl_status st = tgl_reachable(ctx, b->ninner_out, b->inner_out, &used, NULL, NULL);
    if (st)
        return st;
    int w = 0, p = 0, wt = 0, ws = 0;
    tgl_node **in = b->inner_in;
    /* Sequences. */
    int tp = 0;
    for (int i = 0; i < b->nseq && !st; i++) {
        int nt = b->seq_ntaps[i], kept = 0, first = b->seq_taps[tp];
        int newfirst = 0;
        for (int a = 0; a < nt; a++) {
            bool keep = !sp->n_steps || !sp->reverse || tgl_node_map_has(&used, in[p + a]);
            if (keep) {
                if (!kept)
                    newfirst = b->seq_taps[tp + a];
                in[w++] = in[p + a];
                b->seq_taps[wt++] = b->seq_taps[tp + a];
                kept++;
            }
        }
        p += nt;
        tp += nt;
        if (kept) {
            tgl_node *x = b->seqs[i];
            if (newfirst != first) {
                uint64_t e0 = ctx->nerrors;
                x = slice_from(ctx, x, newfirst - first);
                if (!x) {
                    st = ctx->nerrors != e0 ? ctx->last_status : TGL_EINTERNAL;
                    break;
                }
            }
            b->seqs[ws] = x;
            b->seq_ntaps[ws++] = kept;
        }
    }
    b->nseq = ws;
    /* Recurrent taps stay (they are the loop's state). */
    int nrt = 0;
    for (int r = 0; r < b->nrec; r++)
        nrt += b->rec_ntaps[r];
    for (int a = 0; a < nrt; a++)
        in[w++] = in[p++];
    /* Non-sequences. */
    int wn = 0;
    for (int j = 0; j < b->nnonseq; j++, p++)
        if (tgl_node_map_has(&used, in[p])) {
            in[w++] = in[p];
            b->nonseqs[wn++] = b->nonseqs[j];
        }
    b->nnonseq = wn;
    b->ninner_in = w;
    tgl_node_map_free(&used);
    return st;
}

tgl_status tgl_scan_build(tgl_ctx *ctx, const tgl_scan_spec *sp, const char *source,
                          tgl_node **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(sp && out, TGL_EINVAL, "tgl_scan_layout: NULL argument");
    building b = {0};
    b.ctx = ctx;
    b.name = sp->name && *sp->name ? sp->name : "scan";
    tgl_status st = take_spec(ctx, sp, &b);
    if (!st)
        st = take_closures(ctx, sp, &b);
    if (!st)
        st = prune(ctx, sp, &b);
    tgl_node *nsteps = sp->n_steps;
    if (!st && !nsteps) {
        nsteps = tgl_mk_scalar(ctx, TGL_INT64, -1);
        if (!nsteps)
            st = ctx->last_status;
    } else if (!st) {
        nsteps = tgl_mk_cast(ctx, nsteps, TGL_INT64);
        if (!nsteps)
            st = ctx->last_status;
    }
    /* The layout. */
    tgl_scan_layout *s = NULL;
    if (!st && !(s = calloc(1, sizeof *s)))
        st = oom(ctx, b.name);
    if (!st) {
        s->base.vt = &tgl_scan_vt;
        s->name = strdup(b.name);
        s->nseq = b.nseq;
        s->nrec = b.nrec;
        s->nnofb = b.nnofb;
        s->nnonseq = b.nnonseq;
        s->has_until = b.has_until;
        s->reverse = sp->reverse != 0;
        s->truncate_gradient = sp->truncate_gradient < 0 ? -1 : sp->truncate_gradient;
        s->ninner_in = b.ninner_in;
        s->ninner_out = b.ninner_out;
        s->seq = calloc((size_t)b.nseq + 1, sizeof *s->seq);
        s->rec = calloc((size_t)b.nrec + 1, sizeof *s->rec);
        s->keep = calloc((size_t)(b.nrec + b.nnofb) + 1, sizeof *s->keep);
        s->inner_in = malloc(sizeof *s->inner_in * ((size_t)b.ninner_in + 1));
        s->inner_out = malloc(sizeof *s->inner_out * ((size_t)b.ninner_out + 1));
        if (!s->name || !s->seq || !s->rec || !s->keep || !s->inner_in || !s->inner_out)
            st = oom(ctx, b.name);
    }
    for (int i = 0, tp = 0; !st && i < b.nseq; tp += b.seq_ntaps[i], i++) {
        s->seq[i].ntaps = b.seq_ntaps[i];
        if (!(s->seq[i].taps = malloc(sizeof(int32_t) * (size_t)b.seq_ntaps[i]))) {
            st = oom(ctx, b.name);
            break;
        }
        memcpy(s->seq[i].taps, b.seq_taps + tp, sizeof(int32_t) * (size_t)b.seq_ntaps[i]);
        s->seq[i].span = s->seq[i].taps[b.seq_ntaps[i] - 1] - s->seq[i].taps[0];
    }
    for (int r = 0, tp = 0; !st && r < b.nrec; tp += b.rec_ntaps[r], r++) {
        s->rec[r].ntaps = b.rec_ntaps[r];
        if (!(s->rec[r].taps = malloc(sizeof(int32_t) * (size_t)b.rec_ntaps[r]))) {
            st = oom(ctx, b.name);
            break;
        }
        memcpy(s->rec[r].taps, b.rec_taps + tp, sizeof(int32_t) * (size_t)b.rec_ntaps[r]);
        s->rec[r].K = -s->rec[r].taps[0];
    }
    for (int k = 0; !st && sp->keep && k < b.nrec + b.nnofb; k++) {
        int kp = sp->keep[k];
        if (kp == TGL_SCAN_KEEP_WITH_INIT && (k >= b.nrec || sp->reverse)) {
            st = tgl_ctx_set_error(ctx, TGL_EINVAL,
                                   "scan '%s': keep = 3 (initial values and steps) is for a "
                                   "recurrent output of a forward scan, not output %d",
                                   b.name, k + 1);
            break;
        }
        s->keep[k] = kp == TGL_SCAN_KEEP_LAST_READ || kp == TGL_SCAN_KEEP_WITH_INIT ? kp
                     : kp ? TGL_SCAN_KEEP_LAST
                          : TGL_SCAN_KEEP_ALL;
    }
    if (!st) {
        memcpy(s->inner_in, b.inner_in, sizeof *s->inner_in * (size_t)b.ninner_in);
        memcpy(s->inner_out, b.inner_out, sizeof *s->inner_out * (size_t)b.ninner_out);
        s->base.hash = scan_hash(s);
    }
    /* Outer inputs: n_steps, sequences, initial values, non-sequences. */
    int nin = 1 + b.nseq + b.nrec + b.nnonseq;
    tgl_node **ins = st ? NULL : malloc(sizeof *ins * (size_t)nin);
    if (!st && !ins)
        st = oom(ctx, b.name);
    if (!st) {
        int p = 0;
        ins[p++] = nsteps;
        for (int i = 0; i < b.nseq; i++)
            ins[p++] = b.seqs[i];
        for (int r = 0; r < b.nrec; r++)
            ins[p++] = b.inits[r];
        for (int j = 0; j < b.nnonseq; j++)
            ins[p++] = b.nonseqs[j];
    }
    tgl_payload *pl = NULL;
    if (!st) {
        st = tgl_payload_intern(ctx, &s->base, &pl);
        s = NULL; /* owned by the context now (or destroyed) */
    }
    if (!st)
        st = tgl_apply_payload(ctx, TGL_OP_SCAN, nin, ins, NULL, pl, source, out);
    if (s)
        scan_free(s);
    free(ins);
    building_free(&b);
    return st;
}

tgl_status tgl_scan(tgl_ctx *ctx, const tgl_scan_spec *spec, const char *source,
                    tgl_node **out)
{
    return tgl_scan_build(ctx, spec, source, out);
}

/* ---- compiling ------------------------------------------------------- */

/* The body's loop-invariant instructions: straight-line ops whose inputs
 * are non-sequences, constants or other invariant results (what the
 * body's own rewrites made of the non-sequences, e.g. the transposed
 * weight a gemv reads), and ops that read only the shape of a step's
 * slice or state (fill_like, shape: every step of a run has the same
 * shapes; scan_seq_fill's fills).  They run on the first step only; their
 * slots are never freed or taken over in place, so later steps read them. */
static tgl_status mark_invariant(tgl_ctx *ctx, const tgl_scan_layout *s, tgl_program *ip)
{
    bool *inv = calloc((size_t)ip->nslots + 1, sizeof *inv);
    bool *stepped = calloc((size_t)ip->nslots + 1, sizeof *stepped);
    if (!inv || !stepped) {
        free(inv);
        free(stepped);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan '%s': out of memory", s->name);
    }
    for (int i = 0; i < s->ninner_in - s->nnonseq; i++)
        stepped[ip->in_slot[i]] = true;
    for (int j = 0; j < s->nnonseq; j++)
        inv[ip->in_slot[tgl_scan_inner_nonseq(s, j)]] = true;
    for (int32_t k = 0; k < ip->nslots; k++)
        if (ip->slot_kind[k] == TGL_SLOT_CONSTANT)
            inv[k] = true;
    int nonce = 0;
    for (int32_t pc = 0; pc < ip->ncode; pc++) {
        tgl_instr *ins = &ip->code[pc];
        if (ins->kind != TGL_I_OP || ins->region != 0 || ins->sub || ins->nouts != 1 ||
            ins->update >= 0)
            continue;
        bool all = true;
        bool shape_only = ins->node && ins->node->kind == TGL_NODE_APPLY &&
                          (ins->node->op == TGL_OP_FILL_LIKE || ins->node->op == TGL_OP_SHAPE);
        for (int i = 0; i < ins->nin && all; i++)
            all = inv[ins->in[i]] || (shape_only && stepped[ins->in[i]]);
        if (!all)
            continue;
        ins->once = 1;
        inv[ins->out] = true;
        nonce++;
    }
    if (nonce) {
        for (int32_t pc = 0; pc < ip->ncode; pc++) {
            tgl_instr *ins = &ip->code[pc];
            /* invariant results are never released, nor consumed in place */
            int32_t w = 0;
            for (int32_t k = 0; k < ins->nfree; k++)
                if (!inv[ins->free_slots[k]] || ip->slot_kind[ins->free_slots[k]] != TGL_SLOT_TEMP)
                    ins->free_slots[w++] = ins->free_slots[k];
            ins->nfree = w;
            if (ins->kind == TGL_I_OP && ins->inplace >= 0 && inv[ins->in[ins->inplace]])
                ins->inplace = -1;
        }
    }
    free(inv);
    free(stepped);
    return TGL_OK;
}

/* The prepare_inner hook (ops.h): the body, compiled with the outer
 * compile's options. */
static tgl_status scan_prepare(tgl_ctx *ctx, const tgl_node *n, const tgl_program *outer,
                               tgl_program **inner)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    tgl_compile_options opt = {0};
    opt.linker = outer->linker;
    opt.profile = outer->profile;
    opt.mode = outer->mode;
    opt.name = s->name;
    tgl_status st = tgl_program_new(ctx, s->ninner_in, s->inner_in, s->ninner_out, s->inner_out,
                                    0, NULL, NULL, &opt, inner);
    if (st) {
        char msg[TGL_ERRMSG_SIZE];
        snprintf(msg, sizeof msg, "%s", ctx->errmsg);
        return tgl_ctx_set_error(ctx, st, "scan '%s': compiling the step function: %s",
                                 s->name, msg);
    }
    return mark_invariant(ctx, s, *inner);
}

/* ---- running --------------------------------------------------------- */

/* Where entry `e` (0-based, in the (K + T)-entry order: K initial values,
 * then the steps; for a reverse scan the steps then the initial values)
 * lives in a recurrent output's buffer: itself, or its place in the ring
 * of K + 1 entries. */
static inline int64_t rec_slot(bool ring, int64_t K, int64_t e)
{
    return ring ? e % (K + 1) : e;
}

/* Copies src into dst (same shape): memcpy when both are contiguous cpu
 * arrays of one dtype, else elementwise. */
static tgl_status put(tgl_ctx *ctx, tgl_array *dst, const tgl_array *src)
{
    if (dst->dtype_id == src->dtype_id && (dst->flags & TGL_ARRAY_CONTIGUOUS) &&
        (src->flags & TGL_ARRAY_CONTIGUOUS) && dst->device == TGL_DEVICE_CPU &&
        src->device == TGL_DEVICE_CPU) {
        if (dst->data != src->data)
            memmove(dst->data, src->data, (size_t)src->size * tgl_dtype_size(src->dtype_id));
        return TGL_OK;
    }
    return tgl_array_assign(ctx, dst, (tgl_array *)src);
}

static const char *dims_str(int ndim, const int64_t *shape, char *buf, size_t size)
{
    int k = snprintf(buf, size, "(");
    for (int i = 0; i < ndim && k > 0 && (size_t)k < size; i++)
        k += snprintf(buf + k, size - (size_t)k, "%s%" PRId64, i ? "," : "", shape[i]);
    if (k > 0 && (size_t)k < size)
        snprintf(buf + k, size - (size_t)k, "%s)", ndim == 1 ? "," : "");
    return buf;
}

/* A view of a's entry e along axis 0 (a descriptor the loop moves). */
static tgl_status entry_view(tgl_ctx *ctx, tgl_array *a, int64_t e, tgl_array **out)
{
    return tgl_array_view(ctx, a, a->ndim - 1, a->shape + 1, a->strides + 1, e * a->strides[0],
                          out);
}

/* Points view v (made by entry_view on a) at entry e of a. */
static inline void move_view(tgl_array *v, const tgl_array *a, int64_t e)
{
    v->data = (char *)a->data + e * a->strides[0] * (int64_t)tgl_dtype_size(a->dtype_id);
}

static void run_state_free(run_state *rs)
{
    const tgl_scan_layout *s = rs->s;
    for (int i = 0; rs->seq_view && i < rs->nseqv; i++)
        tgl_array_release(rs->seq_view[i]);
    for (int i = 0; rs->rec_view && i < rs->nrecv; i++)
        tgl_array_release(rs->rec_view[i]);
    for (int r = 0; r < s->nrec; r++) {
        if (rs->rec_buf)
            tgl_array_release(rs->rec_buf[r]);
        if (rs->rec_dst)
            tgl_array_release(rs->rec_dst[r]);
    }
    for (int k = 0; k < s->nnofb; k++) {
        if (rs->out_buf)
            tgl_array_release(rs->out_buf[k]);
        if (rs->out_dst)
            tgl_array_release(rs->out_dst[k]);
    }
    free(rs->seq_view);
    free(rs->rec_view);
    free(rs->rec_buf);
    free(rs->rec_dst);
    free(rs->out_buf);
    free(rs->out_dst);
    free(rs->taken);
    tgl_scan_loop_free(rs->loop);
}

/* Sets inner input slot i of the sub-frame to a (a new reference). */
static inline void bind(tgl_frame *sub, int i, tgl_array *a)
{
    tgl_array **slot = &sub->slot[sub->prog->in_slot[i]];
    if (*slot == a)
        return;
    tgl_array_retain(a);
    tgl_array_release(*slot);
    *slot = a;
}

/* An output buffer of the loop: from the outer frame's pool when it has
 * one (what the instructions before the scan freed, e.g. the input
 * projection of a forward scan whose buffer a backward scan's stacked
 * output can take), else new. */
static tgl_status out_alloc(tgl_ctx *ctx, tgl_frame *fr, int dtype, int ndim,
                            const int64_t *shape, tgl_array **out)
{
    *out = tgl_frame_take_pooled(fr, dtype, ndim, shape);
    return *out ? TGL_OK
                : tgl_array_alloc_on(ctx, "scan", fr->prog->device, dtype, ndim, shape, false, out);
}

/* A sequence whose buffer a stacked output not fed back can take over
 * (the loop writes step t's value where step t read its slice, and no
 * later step reads that element): one tap (so step t reads element t
 * only), a plain contiguous buffer of the output's dtype and shape that
 * nothing else holds (its slot, released after this instruction, is its
 * only owner besides the loop's own view of its slices; no other input
 * of the scan is it) and not taken already.
 * A backward scan's stacked delta thus takes the place of the output
 * gradients it read: one buffer of every step instead of two.  -1 for
 * none. */
static int seq_to_take(const tgl_frame *fr, const tgl_instr *ins, tgl_array *const *in,
                       int dtype, int ndim, const int64_t *shape, const bool *taken)
{
    const tgl_scan_layout *s = tgl_scan_of(ins->node);
    if (fr->prog->linker == TGL_LINKER_VM) /* the vm linker releases nothing */
        return -1;
    for (int i = 0; i < s->nseq; i++) {
        int at = tgl_scan_in_seq(s, i);
        const tgl_array *x = in[at];
        if (taken[i] || s->seq[i].ntaps != 1 || x->dtype_id != dtype ||
            !tgl_array_has_shape(x, ndim, shape) || x->device != fr->prog->device ||
            !(x->flags & TGL_ARRAY_CONTIGUOUS) || TGL_REFS(x) != 1 || !x->storage ||
            TGL_REFS(x->storage) != 2 || x->data != x->storage->base)
            continue;
        bool freed = false, alone = true;
        for (int32_t f = 0; f < ins->nfree; f++)
            freed |= ins->free_slots[f] == ins->in[at];
        for (int j = 0; j < ins->nin; j++)
            alone &= j == at || in[j] != x;
        if (freed && alone)
            return i;
    }
    return -1;
}

/* When no step runs, the shape of a step's output not fed back is still
 * known: the body runs once on stand-ins of the step's inputs, ones
 * shaped as the sequences' slices (ones, not zeros: an integer sequence
 * may index, 1-based) and the initial values' entries for the recurrent
 * taps, and its outputs' shapes are read (ndim, shape; ndim stays -1
 * for each output whose shape is unknown).  The
 * body is a pure function of its inputs, so nothing else changes; a body
 * that fails on the stand-ins leaves the outputs' shapes unknown (zeros),
 * the error dropped.  The profile does not count the run. */
static void dry_step(tgl_ctx *ctx, const tgl_scan_layout *s, tgl_array *const *in,
                     tgl_frame *sub, int *ndim, int64_t (*shape)[TGL_MAX_DIMS])
{
    const tgl_program *ip = sub->prog;
    tgl_status saved_st = ctx->last_status;
    char saved[TGL_ERRMSG_SIZE];
    snprintf(saved, sizeof saved, "%s", ctx->errmsg);
    size_t nprof = ip->profile ? (size_t)ip->ncode : 0;
    uint64_t *prof = nprof ? malloc(sizeof *prof * 2 * nprof) : NULL;
    if (nprof && !prof)
        return;
    if (prof) {
        memcpy(prof, sub->ins_ns, sizeof *prof * nprof);
        memcpy(prof + nprof, sub->ins_calls, sizeof *prof * nprof);
    }
    tgl_status st = TGL_OK;
    for (int i = 0; i < s->nseq && !st; i++) {
        const tgl_array *x = in[tgl_scan_in_seq(s, i)];
        tgl_array *one = NULL, *host = NULL;
        st = tgl_array_full(ctx, x->dtype_id, x->ndim - 1, x->shape + 1, 1.0, &host);
        if (!st) /* on the body's device */
            st = tgl_array_on_device(ctx, "scan", host, ip->device, &one);
        tgl_array_release(host);
        for (int a = 0; a < s->seq[i].ntaps && !st; a++)
            bind(sub, tgl_scan_inner_seq(s, i, a), one);
        tgl_array_release(one);
    }
    for (int r = 0; r < s->nrec && !st; r++) {
        tgl_array *h0 = in[tgl_scan_in_init(s, r)];
        for (int a = 0; a < s->rec[r].ntaps && !st; a++) {
            /* tap -k at the first step: k entries before the end of h0 */
            tgl_array *e = NULL;
            st = entry_view(ctx, h0, h0->shape[0] + s->rec[r].taps[a], &e);
            if (!st)
                bind(sub, tgl_scan_inner_rec(s, r, a), e);
            tgl_array_release(e);
        }
    }
    sub->once_done = false;
    if (sub->step)
        tgl_step_free(sub); /* the run goes through the CVM, not a bound step */
    if (!st)
        st = tgl_cvm_run(ctx, sub, 0, ip->ncode);
    for (int k = 0; k < s->nnofb && !st; k++) {
        const tgl_array *o = sub->slot[ip->out_slot[s->nrec + k]];
        ndim[k] = o->ndim;
        memcpy(shape[k], o->shape, sizeof *o->shape * (size_t)o->ndim);
    }
    if (st) {
        ctx->last_status = saved_st;
        snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s", saved);
    }
    if (prof) {
        memcpy(sub->ins_ns, prof, sizeof *prof * nprof);
        memcpy(sub->ins_calls, prof + nprof, sizeof *prof * nprof);
        free(prof);
    }
}

/* Prefixes the context's message with the scan's name and the step. */
static tgl_status step_error(tgl_ctx *ctx, const tgl_scan_layout *s, int64_t t, tgl_status st)
{
    char msg[TGL_ERRMSG_SIZE];
    snprintf(msg, sizeof msg, "%s", ctx->errmsg);
    return tgl_ctx_set_error(ctx, st, "scan '%s', step %" PRId64 ": %s", s->name, t + 1, msg);
}

/* The number of steps (n_steps, or what the shortest sequence allows),
 * checked against the sequences and the initial values. */
static tgl_status count_steps(tgl_ctx *ctx, const tgl_scan_layout *s, tgl_array *const *in,
                              int64_t *steps)
{
    const char *nm = s->name;
    double nsteps;
    tgl_status st = tgl_array_scalar(ctx, in[tgl_scan_in_nsteps()], &nsteps);
    if (st)
        return st;
    int64_t T = (int64_t)nsteps;
    bool given = T >= 0;
    for (int i = 0; i < s->nseq; i++) {
        const tgl_array *x = in[tgl_scan_in_seq(s, i)];
        int64_t avail = x->shape[0] - s->seq[i].span;
        if (given && T > 0 && avail < T) /* no step reads nothing: any length will do */
            return tgl_ctx_set_error(
                ctx, TGL_ESHAPE,
                "scan '%s': n_steps is %" PRId64 " but sequence %d has %" PRId64
                " elements, enough for %" PRId64 " steps with taps %d..%d",
                nm, T, i + 1, x->shape[0], avail < 0 ? 0 : avail, s->seq[i].taps[0],
                s->seq[i].taps[s->seq[i].ntaps - 1]);
        if (!given && (i == 0 || avail < T))
            T = avail;
    }
    if (T < 0) {
        if (given || s->nseq == 0)
            return tgl_ctx_set_error(ctx, TGL_EINVAL, "scan '%s': n_steps is %" PRId64
                                     " (it must be 0 or more)", nm, T);
        const tgl_array *x = in[tgl_scan_in_seq(s, 0)];
        return tgl_ctx_set_error(ctx, TGL_ESHAPE,
                                 "scan '%s': the taps %d..%d reach beyond the %" PRId64
                                 " elements of sequence 1", nm, s->seq[0].taps[0],
                                 s->seq[0].taps[s->seq[0].ntaps - 1], x->shape[0]);
    }
    for (int r = 0; r < s->nrec; r++) {
        const tgl_array *h0 = in[tgl_scan_in_init(s, r)];
        if (h0->shape[0] < s->rec[r].K)
            return tgl_ctx_set_error(ctx, TGL_ESHAPE,
                                     "scan '%s': recurrent output %d reads %d steps back (tap "
                                     "%d) but its initial value holds %" PRId64
                                     " (its leading axis)", nm, r + 1, s->rec[r].K,
                                     s->rec[r].taps[0], h0->shape[0]);
    }
    *steps = T;
    return TGL_OK;
}

/* Everything the loop needs before its first step: the views of the
 * sequences (at the first step), the non-sequences bound once, and each
 * recurrent output's buffer with its initial values in place. */
static tgl_status start_run(tgl_ctx *ctx, tgl_frame *fr, tgl_frame *sub, tgl_array *const *in,
                            run_state *rs)
{
    const tgl_scan_layout *s = rs->s;
    const int64_t T = rs->T;
    tgl_status st;
    for (int i = 0; i < s->nseq; i++)
        rs->nseqv += s->seq[i].ntaps;
    for (int r = 0; r < s->nrec; r++)
        rs->nrecv += s->rec[r].ntaps;
    rs->seq_view = calloc((size_t)rs->nseqv + 1, sizeof *rs->seq_view);
    rs->rec_view = calloc((size_t)rs->nrecv + 1, sizeof *rs->rec_view);
    rs->rec_buf = calloc((size_t)s->nrec + 1, sizeof *rs->rec_buf);
    rs->rec_dst = calloc((size_t)s->nrec + 1, sizeof *rs->rec_dst);
    rs->out_buf = calloc((size_t)s->nnofb + 1, sizeof *rs->out_buf);
    rs->out_dst = calloc((size_t)s->nnofb + 1, sizeof *rs->out_dst);
    rs->taken = calloc((size_t)s->nseq + 1, sizeof *rs->taken);
    st = rs->seq_view && rs->rec_view && rs->rec_buf && rs->rec_dst && rs->out_buf &&
                 rs->out_dst && rs->taken
             ? TGL_OK
             : oom(ctx, s->name);

    /* Sequence views (at the first step), non-sequences bound once. */
    for (int i = 0, v = 0; !st && i < s->nseq; i++) {
        tgl_array *x = in[tgl_scan_in_seq(s, i)];
        for (int a = 0; a < s->seq[i].ntaps && !st; a++, v++) {
            int64_t e = (s->reverse ? T - 1 : 0) + s->seq[i].taps[a] - s->seq[i].taps[0];
            if (T == 0)
                e = 0;
            if (x->shape[0] == 0) {
                /* nothing to view: the loop does not run */
                continue;
            }
            st = entry_view(ctx, x, e, &rs->seq_view[v]);
        }
    }
    for (int j = 0; !st && j < s->nnonseq; j++)
        bind(sub, tgl_scan_inner_nonseq(s, j), in[tgl_scan_in_nonseq(s, j)]);

    /* Recurrent buffers: initial values in place, then the steps. */
    for (int r = 0, v = 0; !st && r < s->nrec; r++) {
        tgl_array *h0 = in[tgl_scan_in_init(s, r)];
        int64_t K = s->rec[r].K;
        bool ring = tgl_scan_keeps_last(s, r);
        int64_t shape[TGL_MAX_DIMS];
        memcpy(shape, h0->shape, sizeof *shape * (size_t)h0->ndim);
        shape[0] = ring ? K + 1 : K + T;
        st = out_alloc(ctx, fr, h0->dtype_id, h0->ndim, shape, &rs->rec_buf[r]);
        tgl_array *B = rs->rec_buf[r];
        /* h0's last K entries, oldest first, at entries 0..K-1 (forward) or
         * T..T+K-1 (reverse). */
        for (int64_t j = 0; !st && j < K; j++) {
            tgl_array *src = NULL, *dst = NULL;
            int64_t e = (s->reverse ? T : 0) + j;
            st = entry_view(ctx, h0, h0->shape[0] - K + j, &src);
            if (!st)
                st = entry_view(ctx, B, rec_slot(ring, K, e), &dst);
            if (!st)
                st = put(ctx, dst, src);
            tgl_array_release(src);
            tgl_array_release(dst);
        }
        if (!st)
            st = entry_view(ctx, B, 0, &rs->rec_dst[r]);
        for (int a = 0; a < s->rec[r].ntaps && !st; a++, v++)
            st = entry_view(ctx, B, 0, &rs->rec_view[v]);
    }
    return st;
}

/* Points the inner inputs' views at step t (sequence slices, recurrent
 * taps) and the recurrent outputs' destinations at their entry. */
static inline void point_views(tgl_frame *sub, tgl_array *const *in, run_state *rs, int64_t t)
{
    const tgl_scan_layout *s = rs->s;
    for (int i = 0, v = 0; i < s->nseq; i++) {
        const tgl_array *x = in[tgl_scan_in_seq(s, i)];
        for (int a = 0; a < s->seq[i].ntaps; a++, v++) {
            move_view(rs->seq_view[v], x, t + s->seq[i].taps[a] - s->seq[i].taps[0]);
            bind(sub, tgl_scan_inner_seq(s, i, a), rs->seq_view[v]);
        }
    }
    for (int r = 0, v = 0; r < s->nrec; r++) {
        const tgl_array *B = rs->rec_buf[r];
        int64_t K = s->rec[r].K;
        bool ring = tgl_scan_keeps_last(s, r);
        int64_t self = s->reverse ? t : K + t;
        for (int a = 0; a < s->rec[r].ntaps; a++, v++) {
            int64_t k = -s->rec[r].taps[a];
            move_view(rs->rec_view[v], B, rec_slot(ring, K, s->reverse ? self + k : self - k));
            bind(sub, tgl_scan_inner_rec(s, r, a), rs->rec_view[v]);
        }
        move_view(rs->rec_dst[r], B, rec_slot(ring, K, self));
    }
}

/* Output k not fed back, at its first step (which fixes its shape: o's):
 * its buffer, a sequence the run may take over (seq_to_take) or a new
 * array, and the entry each step writes. */
static tgl_status start_output(tgl_ctx *ctx, tgl_frame *fr, const tgl_instr *ins,
                               tgl_array *const *in, run_state *rs, int k, const tgl_array *o)
{
    const tgl_scan_layout *s = rs->s;
    int64_t shape[TGL_MAX_DIMS];
    bool last = tgl_scan_keeps_last(s, s->nrec + k);
    tgl_status st = TGL_OK;
    shape[0] = rs->T;
    memcpy(shape + (last ? 0 : 1), o->shape, sizeof *shape * (size_t)o->ndim);
    int i = last ? -1 : seq_to_take(fr, ins, in, o->dtype_id, o->ndim + 1, shape, rs->taken);
    if (i >= 0) {
        rs->taken[i] = true;
        rs->out_buf[k] = in[tgl_scan_in_seq(s, i)];
        tgl_array_retain(rs->out_buf[k]);
    } else {
        st = out_alloc(ctx, fr, o->dtype_id, o->ndim + (last ? 0 : 1), shape, &rs->out_buf[k]);
    }
    if (!st && !last)
        st = entry_view(ctx, rs->out_buf[k], 0, &rs->out_dst[k]);
    if (!st && last) {
        rs->out_dst[k] = rs->out_buf[k];
        tgl_array_retain(rs->out_dst[k]);
    }
    return st;
}

/* Copies step t's outputs (in the inner frame's output slots) to their
 * entries, each checked against the shape its buffer has. */
static tgl_status store_step(tgl_ctx *ctx, tgl_frame *fr, const tgl_instr *ins, tgl_frame *sub,
                             tgl_array *const *in, run_state *rs, int64_t t)
{
    const tgl_scan_layout *s = rs->s;
    const tgl_program *ip = sub->prog;
    const char *nm = s->name;
    char b1[160], b2[160];
    tgl_status st = TGL_OK;
    for (int r = 0; r < s->nrec && !st; r++) {
        const tgl_array *o = sub->slot[ip->out_slot[r]];
        tgl_array *d = rs->rec_dst[r];
        if (!tgl_array_has_shape(o, d->ndim, d->shape))
            st = tgl_ctx_set_error(
                ctx, TGL_ESHAPE,
                "scan '%s', step %" PRId64 ": recurrent output %d has shape %s, but its "
                "initial value (and so every step) has %s",
                nm, t + 1, r + 1, dims_str(o->ndim, o->shape, b1, sizeof b1),
                dims_str(d->ndim, d->shape, b2, sizeof b2));
        else
            st = put(ctx, d, o);
    }
    for (int k = 0; k < s->nnofb && !st; k++) {
        const tgl_array *o = sub->slot[ip->out_slot[s->nrec + k]];
        if (!rs->out_buf[k] && (st = start_output(ctx, fr, ins, in, rs, k, o)))
            break;
        tgl_array *d = rs->out_dst[k];
        if (d != rs->out_buf[k])
            move_view(d, rs->out_buf[k], t);
        if (!tgl_array_has_shape(o, d->ndim, d->shape))
            st = tgl_ctx_set_error(
                ctx, TGL_ESHAPE,
                "scan '%s', step %" PRId64 ": output %d has shape %s, but %s at the first "
                "step (an output keeps its shape)",
                nm, t + 1, s->nrec + k + 1, dims_str(o->ndim, o->shape, b1, sizeof b1),
                dims_str(d->ndim, d->shape, b2, sizeof b2));
        else /* o may view the slice d overwrites: put copies overlaps safely */
            st = put(ctx, d, o);
    }
    return st;
}

/* The loop: each step's views, the body, its outputs stored; stops after
 * T steps or when the until condition holds.  rs->done counts the steps
 * run, rs->last_t is the last. */
static tgl_status run_steps(tgl_ctx *ctx, tgl_frame *fr, const tgl_instr *ins, tgl_frame *sub,
                            tgl_array *const *in, run_state *rs)
{
    const tgl_scan_layout *s = rs->s;
    const tgl_program *ip = sub->prog;
    const int64_t T = rs->T;
    const int nout = tgl_scan_nout(s);
    tgl_status st = TGL_OK;
    rs->last_t = s->reverse ? T - 1 : 0;
    for (int64_t step = 0; !st && step < T; step++) {
        bool ran = false;
        st = tgl_scan_loop_try(ctx, fr, ins, sub, in, rs, step, &ran);
        if (ran || st)
            break; /* the generated loop ran the steps left (scan_loop.c) */
        int64_t t = s->reverse ? T - 1 - step : step;
        point_views(sub, in, rs, t);
        st = tgl_step_exec(ctx, sub, 0, ip->ncode, true);
        if (st) {
            st = step_error(ctx, s, t, st);
            break;
        }
        sub->once_done = true;
        sub->ncalls++;
        st = store_step(ctx, fr, ins, sub, in, rs, t);
        rs->done++;
        rs->last_t = t;
        if (!st && s->has_until) {
            const tgl_array *c = sub->slot[ip->out_slot[nout]];
            double stop;
            if ((st = tgl_array_scalar(ctx, c, &stop)))
                break;
            if (stop != 0)
                break;
        }
    }
    return st;
}

/* Output k of the scan as the caller sees it (*res): a view of the steps
 * that ran (with the initial values before them for KEEP_WITH_INIT), the
 * last entry for a kept-last output, or an empty array when no step ran
 * (its step's shape from dry_step when it could run: dry_ndim, dry_shape). */
static tgl_status finish_output(tgl_ctx *ctx, int device, const tgl_node *n, const run_state *rs,
                                int k, const int *dry_ndim, int64_t (*dry_shape)[TGL_MAX_DIMS],
                                tgl_array **res)
{
    const tgl_scan_layout *s = rs->s;
    const int64_t T = rs->T, done = rs->done, last_t = rs->last_t;
    bool last = tgl_scan_keeps_last(s, k);
    if (s->keep[k] == TGL_SCAN_KEEP_LAST_READ && done == 0)
        /* scan_save_mem made it from x[-1], which fails on no steps */
        return tgl_ctx_set_error(ctx, TGL_ESHAPE,
                                 "scan '%s': index -1 is out of range for axis 1 of size 0 "
                                 "(output %d: the loop ran no step)", s->name, k + 1);
    /* the range of entries the run wrote, in the buffer's order */
    if (k < s->nrec) {
        tgl_array *B = rs->rec_buf[k];
        int64_t K = s->rec[k].K;
        if (last) {
            int64_t e = done ? (s->reverse ? last_t : K + last_t) : (s->reverse ? T : K - 1);
            return entry_view(ctx, B, rec_slot(true, K, e), res);
        }
        /* the steps that ran; with the initial values before them for
         * KEEP_WITH_INIT (a forward scan's buffer from entry 0) */
        bool with_init = s->keep[k] == TGL_SCAN_KEEP_WITH_INIT;
        int64_t from = s->reverse ? T - done : with_init ? 0 : K;
        int64_t shape[TGL_MAX_DIMS];
        memcpy(shape, B->shape, sizeof *shape * (size_t)B->ndim);
        shape[0] = done + (with_init ? K : 0);
        return tgl_array_view(ctx, B, B->ndim, shape, B->strides, from * B->strides[0], res);
    }
    int j = k - s->nrec;
    tgl_array *Y = rs->out_buf[j];
    if (!Y) {
        /* No step ran: an empty output, (0, step shape...) with the step's
         * shape from dry_step (zeros when it could not run). */
        int64_t shape[TGL_MAX_DIMS] = {0};
        tgl_type t = scan_out_type(n, k);
        if (dry_ndim && dry_ndim[j] + (last ? 0 : 1) == t.ndim)
            memcpy(shape + (last ? 0 : 1), dry_shape[j], sizeof *shape * (size_t)dry_ndim[j]);
        return tgl_array_alloc_on(ctx, "scan", device, t.dtype, t.ndim, shape, true, res);
    }
    if (last) {
        *res = Y;
        tgl_array_retain(Y);
        return TGL_OK;
    }
    int64_t from = s->reverse ? T - done : 0;
    int64_t shape[TGL_MAX_DIMS];
    memcpy(shape, Y->shape, sizeof *shape * (size_t)Y->ndim);
    shape[0] = done;
    return tgl_array_view(ctx, Y, Y->ndim, shape, Y->strides, from * Y->strides[0], res);
}

static tgl_status scan_exec(tgl_ctx *ctx, tgl_frame *fr, const tgl_instr *ins, tgl_frame **subp,
                            tgl_array *const *in)
{
    const tgl_node *n = ins->node;
    const tgl_scan_layout *s = tgl_scan_of(n);
    const char *nm = s->name;
    tgl_status st;
    /* The loop runs on the program's device: its inputs are there (call.c
     * moved them), and its values are read through the backend. */
    for (int i = 0; i < n->nin; i++)
        if (in[i]->device != fr->prog->device)
            return tgl_ctx_set_error(ctx, TGL_EINTERNAL,
                                     "scan '%s': input %d is on %s, the program on %s", nm,
                                     i + 1, tgl_device_name(in[i]->device),
                                     tgl_device_name(fr->prog->device));
    int64_t T = 0;
    if ((st = count_steps(ctx, s, in, &T)))
        return st;

    /* The inner frame, made on first use and kept in the outer frame. */
    if (!*subp && (st = tgl_frame_new(ctx, ins->sub, subp)))
        return st;
    tgl_frame *sub = *subp;
    sub->once_done = false; /* the non-sequences may have changed */
    /* Every step of this run sees the same inner shapes (slices of the
     * same sequences, entries of the same buffers): the inner frame's
     * shape cache, filled at the first step, serves the others. */
    tgl_cvm_guard_shapes(sub, true);
    const tgl_program *ip = sub->prog;

    run_state rs = {0};
    rs.s = s;
    rs.n = n;
    rs.T = T;
    st = start_run(ctx, fr, sub, in, &rs);
    if (!st)
        st = run_steps(ctx, fr, ins, sub, in, &rs);

    /* per output not fed back, its step's shape when no step ran (-1: unknown) */
    int *dry_ndim = NULL;
    int64_t (*dry_shape)[TGL_MAX_DIMS] = NULL;
    if (!st && rs.done == 0 && s->nnofb > 0) {
        dry_ndim = malloc(sizeof *dry_ndim * (size_t)s->nnofb);
        dry_shape = malloc(sizeof *dry_shape * (size_t)s->nnofb);
        if (!dry_ndim || !dry_shape)
            st = oom(ctx, nm);
        for (int k = 0; !st && k < s->nnofb; k++)
            dry_ndim[k] = -1;
        if (!st)
            dry_step(ctx, s, in, sub, dry_ndim, dry_shape);
    }

    /* Unbind the inner inputs: the frame must not keep the outer arrays. */
    for (int i = 0; i < s->ninner_in; i++) {
        tgl_array **slot = &sub->slot[ip->in_slot[i]];
        tgl_array_release(*slot);
        *slot = NULL;
    }

    /* The outputs: views of the steps that ran. */
    for (int k = 0; k < tgl_scan_nout(s) && !st; k++) {
        tgl_array *res = NULL;
        st = finish_output(ctx, fr->prog->device, n, &rs, k, dry_ndim, dry_shape, &res);
        if (!st && ins->outs[k] >= 0) {
            tgl_array **dst = &fr->slot[ins->outs[k]];
            tgl_frame_recycle(fr, *dst);
            *dst = res;
        } else {
            tgl_array_release(res);
        }
    }
    run_state_free(&rs);
    free(dry_ndim);
    free(dry_shape);
    return st;
}

/* The scan's own run-time errors end with where the user built it, as
 * other ops' do (tgl_op_error); an error inside a step already names the
 * inner op's line. */
/* The exec_inner hook (ops.h): the loop, its errors naming where the scan
 * was built. */
static tgl_status scan_exec_hook(tgl_ctx *ctx, tgl_frame *fr, const tgl_instr *ins,
                                 tgl_frame **subp, tgl_array *const *in)
{
    tgl_status st = scan_exec(ctx, fr, ins, subp, in);
    const char *src = ins->node->source;
    if (st && src && !strstr(ctx->errmsg, "built at ")) {
        char msg[TGL_ERRMSG_SIZE];
        snprintf(msg, sizeof msg, "%s", ctx->errmsg);
        return tgl_ctx_set_error(ctx, st, "%s; built at %s", msg, src);
    }
    return st;
}

/* ---- the op ---------------------------------------------------------- */

static tgl_status scan_shape_k(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, int k,
                               int64_t *shape)
{
    (void)in;
    (void)k;
    (void)shape;
    return tgl_ctx_set_error(ctx, TGL_EINVAL,
                             "scan '%s': a scan runs in a compiled function (tgl.compile)",
                             tgl_scan_of(n)->name);
}

const tgl_opimpl tgl_impl_scan = {
    .family = TGL_FAM_CONTROL, .nin_min = 1, .nin_max = -1,
    .infer = scan_infer, .out_type = scan_out_type, .shape_k = scan_shape_k,
    .grad_n = tgl_scan_grad, .rop = tgl_scan_rop,
    .prepare_inner = scan_prepare, .exec_inner = scan_exec_hook, .stage = &tgl_scan_stage,
};
