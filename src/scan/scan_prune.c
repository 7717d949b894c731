/*
 * scan_prune.c — the scan passes that make a loop keep less:
 *
 *   scan_dead_outputs  outputs nothing reads (not a root, no reader in the
 *                   graph, no other output's body reading their taps) are
 *                   not computed: the scan is rebuilt without them.
 *   scan_save_mem   an output of which nothing reads more than the last
 *                   step (h[-1]) keeps only the last step: a ring of K + 1
 *                   entries instead of K + T.
 *
 * Run by the scan stage (scan_opt.c); declared in scan_opt.h.
 */
#include "scan/scan_opt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- scan_dead_outputs ---------------------------------------------------- */

/* Scan n without the outputs drop[k] marks; res[k] gets the new node's
 * output for each output kept. */
tgl_status tgl_scan_drop_outputs(tgl_ctx *ctx, tgl_node *n, const bool *drop,
                                 tgl_node **res)
{
    int nout = tgl_scan_nout(tgl_scan_of(n));
    int *newpos = calloc((size_t)nout + 1, sizeof *newpos);
    if (!newpos)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_dead_outputs: out of memory");
    tgl_node *m = NULL;
    int first;
    tgl_status st = tgl_scan_recompose(ctx, n, drop, 0, NULL, &m, newpos, &first);
    for (int k = 0; k < nout && !st && m; k++)
        if (newpos[k] >= 0)
            st = tgl_node_output(ctx, m, newpos[k], &res[k]);
    free(newpos);
    return st;
}

/* Which outputs of n nothing reads: not a root, no reader among order[]
 * (and, for a recurrent output, no other output's body reads its taps). */
tgl_status tgl_scan_dead_outputs(tgl_ctx *ctx, tgl_node *n, tgl_node **order, size_t count,
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

/* ---- scan_save_mem ------------------------------------------------------- */

/* True when m takes the last step of its input: x[-1] along axis 0. */
static bool takes_last(const tgl_node *m)
{
    return m->kind == TGL_NODE_APPLY && m->op == TGL_OP_SUBTENSOR && m->nin == 1 &&
           m->p.n == 4 && (m->p.i[0] & TGL_IDX_KIND_MASK) == TGL_IDX_INDEX &&
           !(m->p.i[0] & TGL_IDX_START_INPUT) && m->p.i[1] == -1;
}

/* The outputs of n (not roots) whose every reader takes the last step keep
 * only the last step: n is rebuilt with those outputs' keep changed, each
 * reader x[-1] is replaced by the new output itself (*xfrom, *xto: *nx of
 * them) and the other outputs by the new node's (res[k]). */
tgl_status tgl_scan_save_mem(tgl_ctx *ctx, tgl_node *n, tgl_node **order, size_t count,
                             int nroots, tgl_node **roots, tgl_node **res, tgl_node ***xfrom,
                             tgl_node ***xto, int *nx, bool *changed)
{
    const tgl_scan_layout *s = tgl_scan_of(n);
    int nout = tgl_scan_nout(s);
    tgl_status rst = TGL_OK;
    int *keep = calloc((size_t)nout + 1, sizeof *keep);
    tgl_node **outk = calloc((size_t)nout + 1, sizeof *outk);
    if (!keep || !outk)
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
        tgl_node *m = NULL;
        espec e;
        if (!tgl_espec_of(n, 0, &e)) {
            rst = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_save_mem: out of memory");
        } else {
            /* x[-1] of the steps fails on no step; of the initial values
             * and the steps, it is the last initial value */
            for (int k = 0; k < nout; k++)
                e.keep[k] = !keep[k] ? s->keep[k]
                            : s->keep[k] == TGL_SCAN_KEEP_WITH_INIT ? TGL_SCAN_KEEP_LAST
                                                                    : TGL_SCAN_KEEP_LAST_READ;
            rst = tgl_scan_build(ctx, &e.sp, n->source, &m);
            tgl_espec_free(&e);
        }
        /* readers x[-1] of a kept output -> the new output; other outputs
         * -> the new node's */
        tgl_node **xf = calloc(count + 1, sizeof *xf), **xt = calloc(count + 1, sizeof *xt);
        *xfrom = xf;
        *xto = xt;
        if (!rst && (!xf || !xt))
            rst = tgl_ctx_set_error(ctx, TGL_ENOMEM, "scan_save_mem: out of memory");
        for (size_t j = 0; j < count && !rst; j++) {
            tgl_node *c = order[j];
            if (!takes_last(c))
                continue;
            for (int k = 0; k < nout && !rst; k++)
                if (keep[k] && c->in[0] == outk[k]) {
                    rst = tgl_node_output(ctx, m, k, &xt[*nx]);
                    xf[(*nx)++] = c;
                }
        }
        for (int k = 0; k < nout && !rst; k++)
            if (!keep[k])
                rst = tgl_node_output(ctx, m, k, &res[k]);
        if (!rst)
            *changed = true;
    }
    free(keep);
    free(outk);
    return rst;
}
