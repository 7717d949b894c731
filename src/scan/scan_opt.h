/*
 * scan_opt.h — what the scan rewrite passes share (internal to src/scan):
 * the editable copy of a scan's spec they rebuild a scan from, the body
 * helpers, and each pass's entry point.  The stage that runs the passes
 * (their order, names, the loop to a fixpoint) is scan_opt.c; the passes
 * live by group:
 *
 *   scan_edit.c    the editable spec (espec), body helpers, recompose
 *   scan_prune.c   scan_dead_outputs, scan_save_mem
 *   scan_merge.c   scan_merge, scan_share_states
 *   scan_hoist.c   scan_seq_fill, scan_hoist
 *   scan_gemm.c    scan_seq_whole, scan_grad_gemm
 */
#ifndef TGL_SCAN_OPT_H
#define TGL_SCAN_OPT_H

#include "scan/scan.h"
#include "engine/opt/opt.h"

/* ---- an editable copy of a scan's spec (scan_edit.c) ------------------- */

typedef struct espec {
    tgl_scan_spec sp;
    int *seq_ntaps, *seq_taps, *rec_ntaps, *rec_taps, *keep;
    tgl_node **inner_in, **inner_out, **seqs, **inits, **nonseqs;
    int cap_seq, cap_seqtaps, cap_in, cap_out, cap_nonseq;
    int ninner_in;
} espec;

/* The spec of scan node n, with room for `extra` more sequences, inner
 * inputs, inner outputs and non-sequences; false when out of memory. */
bool tgl_espec_of(const tgl_node *n, int extra, espec *e);
void tgl_espec_free(espec *e);
/* A sequence with one tap 0 read through placeholder ph. */
void tgl_espec_add_seq(espec *e, tgl_node *whole, tgl_node *ph);
/* A non-sequence read through placeholder ph. */
void tgl_espec_add_nonseq(espec *e, tgl_node *value, tgl_node *ph);

/* ---- body helpers (scan_edit.c) ---------------------------------------- */

/* A new input node of type t (NULL on an error). */
tgl_node *tgl_scan_placeholder(tgl_ctx *ctx, tgl_type t, const char *name);
/* Over the body's nodes in order, what each depends on (dep: bit 1 a
 * sequence slice, bit 2 a recurrent tap) and which one sequence it reads
 * (seq_of: i + 1; -1 several). */
tgl_status tgl_scan_dependence(tgl_ctx *ctx, const tgl_scan_layout *s, tgl_node **order,
                               size_t count, tgl_node_map *dep, tgl_node_map *seq_of);
/* The outer value of body node v that depends only on non-sequences and
 * constants (NULL on an error). */
tgl_node *tgl_scan_outer_value(tgl_ctx *ctx, const tgl_node *scan, tgl_node *v);
/* The body's outputs with each from[k] replaced by to[k]. */
tgl_status tgl_scan_replace_in_body(tgl_ctx *ctx, espec *e, int nout, int nrep,
                                    tgl_node **from, tgl_node **to);
/* Scan n rebuilt without the outputs drop[] marks, with nextra more
 * outputs not fed back (extra[]): *m the new node, newpos[k] the new
 * position of old output k (-1: dropped), the extras from *first_extra on. */
tgl_status tgl_scan_recompose(tgl_ctx *ctx, tgl_node *n, const bool *drop, int nextra,
                              tgl_node *const *extra, tgl_node **m, int *newpos,
                              int *first_extra);

/* ---- the passes ---------------------------------------------------------
 * Each looks at one scan node n.  A pass that rebuilds the whole scan sets
 * *out to the new node (NULL: no change); one that replaces some outputs
 * sets res[k] (NULL: output k stays) and *changed, and may name other
 * nodes to replace (*xfrom[i] by *xto[i], *nx of them, malloc'd).  order
 * (count nodes) is the whole graph of the roots, inputs first. */

/* scan_prune.c */
tgl_status tgl_scan_dead_outputs(tgl_ctx *ctx, tgl_node *n, tgl_node **order, size_t count,
                                 int nroots, tgl_node **roots, bool *drop, int *ndrop);
tgl_status tgl_scan_drop_outputs(tgl_ctx *ctx, tgl_node *n, const bool *drop, tgl_node **res);
tgl_status tgl_scan_save_mem(tgl_ctx *ctx, tgl_node *n, tgl_node **order, size_t count,
                             int nroots, tgl_node **roots, tgl_node **res, tgl_node ***xfrom,
                             tgl_node ***xto, int *nx, bool *changed);
/* scan_merge.c: scan_merge works on pairs: one step of the stage's
 * fixpoint merges at most one pair of the scans in order. */
tgl_status tgl_scan_merge_step(tgl_ctx *ctx, tgl_node **order, size_t count, int nroots,
                               tgl_node **roots, bool *changed);
tgl_status tgl_scan_share_states(tgl_ctx *ctx, tgl_node *n, tgl_node **order, size_t count,
                                 tgl_node **res, tgl_node ***xfrom, tgl_node ***xto, int *nx,
                                 bool *changed);
/* scan_hoist.c */
tgl_status tgl_scan_seq_fill(tgl_ctx *ctx, tgl_node *n, tgl_node **out);
tgl_status tgl_scan_hoist(tgl_ctx *ctx, tgl_node *n, tgl_node **out);
/* scan_gemm.c */
tgl_status tgl_scan_seq_whole(tgl_ctx *ctx, tgl_node *n, tgl_node **out);
tgl_status tgl_scan_grad_gemm(tgl_ctx *ctx, tgl_node *n, tgl_node **res, bool *changed);

#endif /* TGL_SCAN_OPT_H */
