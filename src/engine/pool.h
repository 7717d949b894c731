/*
 * pool.h — the worker threads that kernels and products split their work
 * over: one small persistent pthread pool for the whole process (pool.c
 * says why one), made on the first parallel run with as many threads in
 * all as the largest thread setting asked for (config.threads, 0: one per
 * online CPU; 1: none, every task runs on the caller), the calling thread
 * being one of them.  A run uses at most the threads its own setting
 * says.  The workers sleep when idle and end with the process.
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

/* Runs fn(arg, t) for t in [0, ntasks) on the process's pool (made, or
 * remade larger, on the first parallel run that needs it) and the calling
 * thread, with at most tgl_pool_size(configured) threads taking tasks,
 * returning when all are done.  Tasks go to whichever thread asks first,
 * so the split of the work must not depend on which thread runs a task.
 * A run that finds the pool busy (another thread's run, or a task calling
 * back in) runs its tasks on the calling thread instead of waiting: never
 * deadlocks, never fails.  `slot` is not read or written (may be NULL):
 * it names the caller's slot from the time each context and the BLAS
 * split had a pool of their own, kept so that the callers in other rooms
 * (src/cgen gets it from a tgl_backend_opts, src/cpu) need no change. */
void tgl_pool_run_in(struct tgl_pool **slot, int configured, int ntasks, tgl_task_fn fn,
                     void *arg);
/* tgl_pool_run_in on ctx's pool and thread setting. */
void tgl_pool_run(tgl_ctx *ctx, int ntasks, tgl_task_fn fn, void *arg);

/* At context teardown: the context lets go of the pool (its workers
 * belong to the process and sleep once idle). */
void tgl_pool_free(tgl_ctx *ctx);
/* Stops and joins the workers of the pool in *slot (NULL after). */
void tgl_pool_release(struct tgl_pool **slot);
/* Registers the measurement of pool.spin_ns (engine/tune.h). */
void tgl_pool_tune_register(void);

#endif /* TGL_POOL_H */
