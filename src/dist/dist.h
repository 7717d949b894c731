/*
 * dist.h — tgl.dist's internals: the transport (comm.c) and what the
 * allreduce ops (ops.c) and the array collectives (collectives.c) ask of it.
 *
 * The transport is MPI when tgl is built with it (TGL_HAVE_MPI), else a
 * job of one process.  It owns two communicators: one for the collectives
 * a caller runs and waits for (the array collectives, the blocking
 * allreduce op), and one for the gradient buckets of a compiled step,
 * which a progress thread runs in the order they were started while the
 * step goes on (tgl_dist_async_*).  Every collective first exchanges a
 * description of itself (dist_desc), so that processes that disagree
 * fail together with each one's side named, and every wait is bounded by
 * the timeout.
 */
#ifndef TGL_DIST_H
#define TGL_DIST_H

#include "engine/engine.h"
#include "engine/backend.h"

#include <stdbool.h>
#include <stdint.h>

/* What a collective is, as the processes compare it and as an error
 * names it: "allreduce(sum) of float32 (500,784)". */
#define TGL_DIST_DESC 160
typedef struct tgl_dist_desc {
    char text[TGL_DIST_DESC];
} tgl_dist_desc;

/* Sets d to "<what> of <dtype> <shape>" (what: "allreduce(sum)"). */
void tgl_dist_describe(tgl_dist_desc *d, const char *what, int dtype, int ndim,
                       const int64_t *shape);
/* The name of a reduction ("sum", "mean", ...), or NULL for a bad one. */
const char *tgl_dist_op_name(int op);
/* Whether op reduces dtype; a clear error on ctx when not (fname says who). */
tgl_status tgl_dist_check_reduce(tgl_ctx *ctx, const char *fname, int op, int dtype);

/* ---- blocking collectives on host memory (the caller's thread) ---- */
/* buf (count elements of dtype, contiguous, host memory) reduced over
 * every process in place; MEAN divides the sum by the size. */
tgl_status tgl_dist_comm_allreduce(tgl_ctx *ctx, const tgl_dist_desc *d, void *buf,
                                   int64_t count, int dtype, int op);
/* buf = root's buf on every process (nbytes bytes). */
tgl_status tgl_dist_comm_broadcast(tgl_ctx *ctx, const tgl_dist_desc *d, void *buf,
                                   int64_t nbytes, int root);
/* out (size * nbytes) = every process's in (nbytes), in rank order. */
tgl_status tgl_dist_comm_allgather(tgl_ctx *ctx, const tgl_dist_desc *d, const void *in,
                                   void *out, int64_t nbytes);
tgl_status tgl_dist_comm_barrier(tgl_ctx *ctx);

/* ---- the gradient buckets of a compiled step (the progress thread) ----
 * start: buf (host memory, count elements of dtype) is reduced in place
 * by the progress thread, after the buckets started before it; hold is an
 * array whose storage holds buf, kept alive until the bucket is waited for
 * (or found abandoned: a step that failed between start and wait).  key
 * names the bucket for wait (its token array).  reduced: the caller has
 * reduced buf already (memory the thread may not touch); the bucket is
 * only registered, done.  wait: blocks until the bucket with that key is
 * done, and reports its error. */
tgl_status tgl_dist_async_start(tgl_ctx *ctx, const tgl_dist_desc *d, const void *key,
                                void *buf, int64_t count, int dtype, int op, tgl_array *hold,
                                bool reduced);
tgl_status tgl_dist_async_wait(tgl_ctx *ctx, const void *key);

/* The collectives' kernels on host memory (ops.c), which the CPU backend's
 * table lists (and sim's, through it). */
extern const tgl_op_kernel tgl_dist_kernel_allreduce;
extern const tgl_op_kernel tgl_dist_kernel_allreduce_start;
extern const tgl_op_kernel tgl_dist_kernel_allreduce_wait;

/* The world as the transport sees it (1 process before init). */
int tgl_dist_world_rank(void);
int tgl_dist_world_size(void);

#endif /* TGL_DIST_H */
