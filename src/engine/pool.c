/*
 * pool.c — the context's persistent worker threads (pool.h).
 *
 * One run at a time: the caller publishes (fn, arg, ntasks) under the
 * lock, bumps a generation counter and wakes the workers; everybody, the
 * caller included, takes task numbers from an atomic counter until none
 * are left; the caller then waits until every worker has checked in, so
 * nothing touches the run's argument after tgl_pool_run returns.  Between
 * runs a worker first watches the generation for a short while (SPIN_NS:
 * the runs of one training step come microseconds apart, and waking a
 * sleeping thread costs about ten), then sleeps on a condition variable,
 * so an idle pool takes no CPU; the caller likewise watches for the
 * workers' check-in before sleeping on it.  A second run that finds
 * the pool busy runs inline rather than queueing, so a task that calls
 * back into the pool cannot deadlock.
 */
#include "engine/pool.h"
#include "engine/tune.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* More threads than this is a configuration mistake, not a wish. */
#define MAX_THREADS 256
/* How long a worker (or the caller) watches before it sleeps. */
#define SPIN_NS tgl_tune_get(TGL_TUNE_POOL_SPIN_NS)

/* Watches *word until it differs from `from` (true) or SPIN_NS pass
 * (false).  The clock is read every 64 turns. */
static bool watch_changes(const uint64_t *word, uint64_t from)
{
    uint64_t deadline = 0;
    for (unsigned i = 1;; i++) {
        if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != from)
            return true;
        if ((i & 63) == 0) {
            uint64_t t = tgl_now_ns();
            if (!deadline)
                deadline = t + SPIN_NS;
            else if (t >= deadline)
                return false;
        }
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

struct tgl_pool {
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    int nthreads;          /* including the caller                          */
    int nworkers;          /* started successfully                          */
    pthread_t *workers;
    uint64_t generation;   /* bumped per run (atomically, under the lock);
                              workers compare with theirs                  */
    uint64_t active;       /* workers that have not finished this run
                              (atomic; changed under the lock)              */
    bool stop;
    tgl_task_fn fn;
    void *arg;
    int ntasks;
    atomic_int next;       /* the next task number to hand out              */
    atomic_flag busy;      /* a run is in progress                          */
};

static void run_tasks(struct tgl_pool *p, tgl_task_fn fn, void *arg, int ntasks)
{
    for (int t; (t = atomic_fetch_add(&p->next, 1)) < ntasks;)
        fn(arg, t);
}

static void *worker(void *arg)
{
    struct tgl_pool *p = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        if (p->generation == seen && !p->stop) {
            /* watch a while before sleeping: the next run is often near */
            pthread_mutex_unlock(&p->lock);
            watch_changes(&p->generation, seen);
            pthread_mutex_lock(&p->lock);
        }
        while (p->generation == seen && !p->stop)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop)
            break;
        seen = p->generation;
        tgl_task_fn fn = p->fn;
        void *a = p->arg;
        int n = p->ntasks;
        pthread_mutex_unlock(&p->lock);
        run_tasks(p, fn, a, n);
        pthread_mutex_lock(&p->lock);
        if (__atomic_sub_fetch(&p->active, 1, __ATOMIC_ACQ_REL) == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int tgl_pool_size(int configured)
{
    int n = configured;
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    return n > MAX_THREADS ? MAX_THREADS : n;
}

int tgl_pool_threads(tgl_ctx *ctx)
{
    return tgl_pool_size(ctx->config.threads);
}

static void pool_destroy(struct tgl_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->nworkers; i++)
        pthread_join(p->workers[i], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    free(p->workers);
    free(p);
}

/* A pool of n threads in all, or NULL (then runs are inline).  Workers
 * block every signal: the host's SIGINT handler runs on its own thread. */
static struct tgl_pool *pool_create(int n)
{
    struct tgl_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->workers = calloc((size_t)n, sizeof *p->workers);
    if (!p->workers) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    atomic_flag_clear(&p->busy);
    p->nthreads = n;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 0; i < n - 1; i++) {
        if (pthread_create(&p->workers[i], NULL, worker, p) != 0)
            break; /* fewer workers: still correct, the caller does more */
        p->nworkers++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return p;
}

void tgl_pool_run_in(struct tgl_pool **slot, int configured, int ntasks, tgl_task_fn fn,
                     void *arg)
{
    if (ntasks <= 0)
        return;
    int n = tgl_pool_size(configured);
    struct tgl_pool *p = *slot;
    if (ntasks > 1 && n > 1 && (!p || p->nthreads != n)) {
        /* First parallel run, or config.threads changed: (re)start. */
        if (!p || !atomic_flag_test_and_set(&p->busy)) {
            pool_destroy(p);
            *slot = p = pool_create(n);
        }
    }
    if (ntasks == 1 || !p || p->nworkers == 0 || atomic_flag_test_and_set(&p->busy)) {
        for (int t = 0; t < ntasks; t++)
            fn(arg, t);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->arg = arg;
    p->ntasks = ntasks;
    atomic_store(&p->next, 0);
    __atomic_store_n(&p->active, (uint64_t)p->nworkers, __ATOMIC_RELEASE);
    __atomic_add_fetch(&p->generation, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    run_tasks(p, fn, arg, ntasks);
    /* the workers usually finish within microseconds of the caller */
    uint64_t a = __atomic_load_n(&p->active, __ATOMIC_ACQUIRE);
    if (a)
        while (a && watch_changes(&p->active, a))
            a = __atomic_load_n(&p->active, __ATOMIC_ACQUIRE);
    pthread_mutex_lock(&p->lock);
    while (p->active > 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
    atomic_flag_clear(&p->busy);
}

void tgl_pool_run(tgl_ctx *ctx, int ntasks, tgl_task_fn fn, void *arg)
{
    tgl_pool_run_in(&ctx->pool, ctx->config.threads, ntasks, fn, arg);
}

void tgl_pool_free(tgl_ctx *ctx)
{
    if (!ctx)
        return;
    pool_destroy(ctx->pool);
    ctx->pool = NULL;
}

void tgl_pool_release(struct tgl_pool **slot)
{
    pool_destroy(*slot);
    *slot = NULL;
}
