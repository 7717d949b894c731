/*
 * pool.h — the context's worker threads: a small persistent pthread pool
 * that kernels split their work over.  Created on first use with
 * config.threads threads in all (0: one per online CPU; 1: none, every
 * task runs on the caller), the calling thread being one of them.  Freed
 * with the context.
 */
#ifndef TGL_POOL_H
#define TGL_POOL_H

#include "engine/engine.h"

/* One task of a parallel run: task is 0..ntasks-1. */
typedef void (*tgl_task_fn)(void *arg, int task);

/* How many threads (the caller included) a run with `configured`
 * threads uses (config.threads: 0 is one per online CPU). */
int tgl_pool_size(int configured);
/* How many threads (the caller included) a run on ctx uses. */
int tgl_pool_threads(tgl_ctx *ctx);

/* Runs fn(arg, t) for t in [0, ntasks) on the pool in *slot (made, or
 * remade for a new size, on the first parallel run; `configured` as for
 * tgl_pool_size) and the calling thread, returning when all are done.  A
 * run that finds the pool busy (another thread's run, or a task calling
 * back in) runs its tasks on the calling thread instead of waiting: never
 * deadlocks, never fails.  Code without a context (src/cgen) gets slot
 * and count from a tgl_backend_opts. */
void tgl_pool_run_in(struct tgl_pool **slot, int configured, int ntasks, tgl_task_fn fn,
                     void *arg);
/* tgl_pool_run_in on ctx's pool and thread setting. */
void tgl_pool_run(tgl_ctx *ctx, int ntasks, tgl_task_fn fn, void *arg);

/* Stops and joins the workers (at context teardown). */
void tgl_pool_free(tgl_ctx *ctx);
/* Stops and joins the workers of the pool in *slot (NULL after). */
void tgl_pool_release(struct tgl_pool **slot);
/* Registers the measurement of pool.spin_ns (engine/tune.h). */
void tgl_pool_tune_register(void);

#endif /* TGL_POOL_H */
