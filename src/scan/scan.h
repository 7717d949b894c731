/*
 * scan.h — internal header of the scan op (src/scan): the layout a scan
 * node carries as its payload, and what the scan files share.  The engine
 * never includes it: the compiler, the CVM and the rewrite driver reach
 * scan only through its catalog entry (tgl_impl_scan: the inner-program
 * hooks and the rewrite stage, engine/ops/ops.h).
 *
 * A scan node's inputs are, in order: n_steps (an int64 scalar; -1: the
 * sequences decide), the sequences, the recurrent outputs' initial values,
 * the non-sequences.  Its outputs are the recurrent outputs, then the
 * outputs not fed back.  Everything about the loop beyond that lives in
 * the layout (tgl_scan_layout), never in index arithmetic over the inputs: use
 * the accessors below.
 */
#ifndef TGL_SCAN_H
#define TGL_SCAN_H

#include "engine/program.h"

/* One sequence: its taps (increasing step offsets). */
typedef struct tgl_scan_seq {
    int32_t ntaps;
    int32_t *taps;
    int32_t span;         /* last tap - first tap: elements beyond the steps */
} tgl_scan_seq;

/* One recurrent output: its taps (negative, increasing) and how many
 * earlier values it needs (K = -taps[0]). */
typedef struct tgl_scan_rec {
    int32_t ntaps;
    int32_t *taps;
    int32_t K;
} tgl_scan_rec;

typedef struct tgl_scan_layout {
    tgl_payload base;     /* first: a SCAN node's payload is its layout    */
    char *name;
    int32_t nseq, nrec, nnofb, nnonseq;
    tgl_scan_seq *seq;
    tgl_scan_rec *rec;
    int32_t *keep;        /* per output (nrec + nnofb): a TGL_SCAN_KEEP_* */
    bool has_until;
    bool reverse;
    int32_t truncate_gradient;
    /* The body: placeholders in fn's order (sequence taps, recurrent taps,
     * non-sequences) and the inner outputs (recurrent, not fed back, until). */
    int32_t ninner_in, ninner_out;
    tgl_node **inner_in;
    tgl_node **inner_out;
} tgl_scan_layout;

/* What output k of a scan holds (tgl_scan_layout.keep; tgl_scan_spec.keep). */
enum {
    TGL_SCAN_KEEP_ALL = 0,       /* every step, stacked: (T, ...)                    */
    TGL_SCAN_KEEP_LAST = 1,      /* the last step (the last initial value when no
                                    step runs): a backward scan's accumulators       */
    TGL_SCAN_KEEP_LAST_READ = 2, /* the last step, standing for x[-1] of the stacked
                                    steps (scan_save_mem): no step is an error       */
    TGL_SCAN_KEEP_WITH_INIT = 3, /* a recurrent output of a forward scan: its K
                                    initial values, then every step: (K + T, ...),
                                    the loop's own buffer (scan_share_states; the
                                    shared variables tgl.scan's fn updates, whose
                                    last entry is the final value even with no
                                    step)                                            */
};

static inline const tgl_scan_layout *tgl_scan_of(const tgl_node *n)
{
    return (const tgl_scan_layout *)n->payload;
}
/* Outer input positions. */
static inline int tgl_scan_in_nsteps(void) { return 0; }
static inline int tgl_scan_in_seq(const tgl_scan_layout *s, int i) { (void)s; return 1 + i; }
static inline int tgl_scan_in_init(const tgl_scan_layout *s, int r) { return 1 + s->nseq + r; }
static inline int tgl_scan_in_nonseq(const tgl_scan_layout *s, int j)
{
    return 1 + s->nseq + s->nrec + j;
}
static inline int tgl_scan_nout(const tgl_scan_layout *s) { return s->nrec + s->nnofb; }
/* True when output k holds only the last step (a ring of K + 1 entries). */
static inline bool tgl_scan_keeps_last(const tgl_scan_layout *s, int k)
{
    return s->keep[k] == TGL_SCAN_KEEP_LAST || s->keep[k] == TGL_SCAN_KEEP_LAST_READ;
}
/* Inner input positions: tap a of sequence i, tap a of recurrent output r,
 * non-sequence j. */
int tgl_scan_inner_seq(const tgl_scan_layout *s, int i, int a);
int tgl_scan_inner_rec(const tgl_scan_layout *s, int r, int a);
static inline int tgl_scan_inner_nonseq(const tgl_scan_layout *s, int j)
{
    return s->ninner_in - s->nnonseq + j;
}

/* The scan payload's vtable (for tests of a node's kind). */
extern const tgl_payload_vt tgl_scan_vt;

/* Builds a scan node from a layout (the caller's spec in public form). */
tgl_status tgl_scan_build(tgl_ctx *ctx, const tgl_scan_spec *spec, const char *source,
                          tgl_node **out);

/* The scan stage of the rewrites (scan_opt.c): its passes, each
 * excludable by name.  The scan op's catalog entry registers it
 * (tgl_impl_scan.stage); the driver runs it between stabilize and
 * specialize. */
struct tgl_rewrite_stage;
extern const struct tgl_rewrite_stage tgl_scan_stage;

/* The pushforward (scan_rop.c): the tangent recurrence alongside the
 * forward one, in one loop. */
tgl_status tgl_scan_rop(tgl_ctx *ctx, tgl_node *n, tgl_node *const *tin, tgl_node **tout);

/* The pullback (scan_grad.c): a backward scan. */
tgl_status tgl_scan_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *const *gout, tgl_node **gin);

/* The length of x's leading axis as an int64 scalar node (scan_grad.c);
 * NULL when x is NULL or on error. */
tgl_node *tgl_scan_length0(tgl_ctx *ctx, tgl_node *x);

/* The state of one execution of a scan. */
typedef struct run_state {
    const tgl_scan_layout *s;
    const tgl_node *n;
    int64_t T;
    tgl_array **seq_view;    /* per inner sequence tap                     */
    tgl_array **rec_buf;     /* per recurrent output: (K+T) or ring (K+1)  */
    tgl_array **rec_view;    /* per inner recurrent tap                    */
    tgl_array **rec_dst;     /* per recurrent output: the entry written    */
    tgl_array **out_buf;     /* per output not fed back                    */
    tgl_array **out_dst;     /* per output not fed back: the entry written */
    int nseqv, nrecv;        /* inner sequence taps, inner recurrent taps  */
    bool *taken;             /* per sequence: an output took its buffer    */
    int64_t done;            /* steps run                                  */
    int64_t last_t;          /* the last step run                          */
    struct tgl_scan_loop *loop; /* the generated loop (scan_loop.c), or NULL */
    int loop_state;          /* scan_loop.c: 0 not tried, 1 plan made, 2 never */
} run_state;

/* scan_loop.c: the whole loop in C.  After step `step` (the steps before
 * it ran on the body's frame, which is bound as a step), runs the steps
 * left with the backend's generated loop when the body allows it and its
 * code is ready: *ran is then true and rs->done / rs->last_t tell where it
 * stopped (the error, if any, names the step).  Else *ran is false and the
 * caller goes on step by step (it may ask again later: the code may still
 * be compiling). */
tgl_status tgl_scan_loop_try(tgl_ctx *ctx, tgl_frame *fr, const tgl_instr *ins, tgl_frame *sub,
                             tgl_array *const *in, run_state *rs, int64_t step, bool *ran);
void tgl_scan_loop_free(struct tgl_scan_loop *l);
/* The steps the generated loops ran in this process (for tests: the
 * specs declare it with ffi.cdef; not in tgl.h). */
int64_t tgl_scan_loop_steps(void);

#endif /* TGL_SCAN_H */
