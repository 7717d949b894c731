/*
 * pool.c — the process's worker threads (pool.h).
 *
 * One set of workers for the whole process: generated kernels (through
 * each context's slot) and the CPU backend's split products (its own
 * slot) run on the same threads, so `threads = 2` means one worker, not
 * one per user of the pool.  Two sets, each with a worker watching for
 * its next run after a run of its own, put three busy threads on two
 * CPUs, and each set's worker had to be woken from sleep separately
 * (issue 23: on a 2-vCPU AMD EPYC an MLP step at batch 60 ran slower on
 * two threads than on one).  The set is made with the
 * largest thread count asked for; a run with a smaller `configured`
 * count lets only that many threads (the caller included) take tasks.
 *
 * One run at a time: the caller publishes (fn, arg, ntasks) under the
 * lock, bumps a generation counter and wakes the workers that sleep;
 * everybody, the caller included, takes task numbers from one atomic word
 * holding the run's generation and the next task, so a worker that wakes
 * late can never take a task of a later run, or call a finished run's
 * function.  The caller waits only for the tasks it handed out to be
 * finished, never for a worker to check in: a worker that had not woken
 * when the caller took the last task costs the run nothing (on a VM, a
 * sleeping vCPU takes tens of microseconds to wake, more on a busy host).
 * Between runs a worker first watches the generation for a while
 * (POOL_SPIN_NS: the runs of one training step come microseconds apart),
 * then sleeps on a condition variable, so an idle pool takes no CPU; the
 * caller likewise watches for the last task before sleeping.  A run that
 * finds the pool busy (another thread's run, or a task calling back in)
 * runs its tasks on the calling thread instead of waiting: never
 * deadlocks, never fails.
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

static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Watches *word until it differs from `from` (true) or SPIN_NS pass
 * (false).  The clock is read every 64 turns. */
static bool watch_changes(const _Atomic uint64_t *word, uint64_t from)
{
    uint64_t deadline = 0;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) != from)
            return true;
        if ((i & 63) == 0) {
            uint64_t t = tgl_now_ns();
            if (!deadline)
                deadline = t + (uint64_t)SPIN_NS;
            else if (t >= deadline)
                return false;
        }
        relax();
    }
}

struct tgl_pool {
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    int nthreads;            /* including the caller                        */
    int nworkers;            /* started successfully                        */
    pthread_t *workers;
    _Atomic uint64_t generation; /* bumped per run, under the lock          */
    _Atomic uint64_t next;   /* generation << 32 | the next task number     */
    atomic_int finished;     /* tasks of this run finished                  */
    int sleepers;            /* workers waiting on `wake` (under the lock)  */
    bool caller_waits;       /* the caller waits on `done` (under the lock) */
    bool stop;
    tgl_task_fn fn;          /* the run: set under the lock                 */
    void *arg;
    int ntasks;
    int limit;               /* workers 0..limit-1 take part in this run    */
    atomic_flag busy;        /* a run is in progress                        */
};

typedef struct worker_arg {
    struct tgl_pool *p;
    int index;
} worker_arg;

/* Takes and runs tasks of run `gen` until none are left (or the word
 * belongs to another run). */
static void take_tasks(struct tgl_pool *p, uint64_t gen, tgl_task_fn fn, void *arg, int ntasks)
{
    uint64_t tag = (gen & 0xffffffffu) << 32;
    uint64_t v = atomic_load_explicit(&p->next, memory_order_acquire);
    for (;;) {
        if ((v & ~(uint64_t)0xffffffffu) != tag || (int64_t)(v & 0xffffffffu) >= ntasks)
            return;
        if (!atomic_compare_exchange_weak_explicit(&p->next, &v, v + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        fn(arg, (int)(v & 0xffffffffu));
        if (atomic_fetch_add_explicit(&p->finished, 1, memory_order_acq_rel) + 1 == ntasks) {
            pthread_mutex_lock(&p->lock);
            if (p->caller_waits)
                pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->lock);
            return;
        }
        v = atomic_load_explicit(&p->next, memory_order_acquire);
    }
}

static void *worker(void *varg)
{
    worker_arg *w = varg;
    struct tgl_pool *p = w->p;
    int index = w->index;
    free(w);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        if (atomic_load(&p->generation) == seen && !p->stop) {
            /* watch a while before sleeping: the next run is often near */
            pthread_mutex_unlock(&p->lock);
            watch_changes(&p->generation, seen);
            pthread_mutex_lock(&p->lock);
        }
        while (atomic_load(&p->generation) == seen && !p->stop) {
            p->sleepers++;
            pthread_cond_wait(&p->wake, &p->lock);
            p->sleepers--;
        }
        if (p->stop)
            break;
        seen = atomic_load(&p->generation);
        tgl_task_fn fn = p->fn;
        void *a = p->arg;
        int n = p->ntasks;
        bool part = index < p->limit;
        pthread_mutex_unlock(&p->lock);
        if (part)
            take_tasks(p, seen, fn, a, n);
        pthread_mutex_lock(&p->lock);
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
    atomic_init(&p->generation, 0);
    atomic_init(&p->next, 0);
    atomic_init(&p->finished, 0);
    atomic_flag_clear(&p->busy);
    p->nthreads = n;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 0; i < n - 1; i++) {
        worker_arg *w = malloc(sizeof *w);
        if (!w)
            break;
        *w = (worker_arg){p, i};
        if (pthread_create(&p->workers[i], NULL, worker, w) != 0) {
            free(w);
            break; /* fewer workers: still correct, the caller does more */
        }
        p->nworkers++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return p;
}

/* The process's pool and the lock that guards replacing it.  A pool is
 * only destroyed by whoever holds both this lock and its busy flag, so a
 * run (which holds the busy flag) never sees it go. */
static struct tgl_pool *shared;
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* A child of fork() has none of the parent's threads: it forgets the pool
 * (a new one is made on its first parallel run). */
static void at_fork_child(void)
{
    pthread_mutex_init(&shared_lock, NULL);
    shared = NULL;
}

static void register_fork(void)
{
    pthread_atfork(NULL, NULL, at_fork_child);
}

/* The pool with at least n threads, busy flag taken, or NULL (busy:
 * another run is in progress, or no memory). */
static struct tgl_pool *acquire(int n)
{
    pthread_once(&fork_once, register_fork);
    pthread_mutex_lock(&shared_lock);
    struct tgl_pool *p = shared;
    if (!p || p->nthreads < n) {
        /* First parallel run, or more threads asked for: (re)start. */
        if (!p || !atomic_flag_test_and_set(&p->busy)) {
            struct tgl_pool *q = pool_create(n);
            if (q) {
                pool_destroy(p);
                shared = p = q;
            } else if (p) {
                atomic_flag_clear(&p->busy);
            }
        }
    }
    if (p && atomic_flag_test_and_set(&p->busy))
        p = NULL;
    pthread_mutex_unlock(&shared_lock);
    return p;
}

void tgl_pool_run_in(struct tgl_pool **slot, int configured, int ntasks, tgl_task_fn fn,
                     void *arg)
{
    if (ntasks <= 0)
        return;
    int n = tgl_pool_size(configured);
    (void)slot; /* the pool is the process's (pool.h) */
    struct tgl_pool *p = ntasks > 1 && n > 1 ? acquire(n) : NULL;
    if (!p || p->nworkers == 0) {
        for (int t = 0; t < ntasks; t++)
            fn(arg, t);
        if (p)
            atomic_flag_clear(&p->busy);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->arg = arg;
    p->ntasks = ntasks;
    p->limit = n - 1 < p->nworkers ? n - 1 : p->nworkers;
    atomic_store(&p->finished, 0);
    uint64_t gen = atomic_load(&p->generation) + 1;
    atomic_store(&p->next, (gen & 0xffffffffu) << 32);
    atomic_store(&p->generation, gen);
    if (p->sleepers)
        pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    take_tasks(p, gen, fn, arg, ntasks);
    /* the workers' tasks usually finish within microseconds of ours */
    uint64_t deadline = 0;
    for (unsigned i = 1; atomic_load_explicit(&p->finished, memory_order_acquire) < ntasks;
         i++) {
        if ((i & 63) == 0) {
            uint64_t t = tgl_now_ns();
            if (!deadline)
                deadline = t + (uint64_t)SPIN_NS;
            else if (t >= deadline)
                break;
        }
        relax();
    }
    pthread_mutex_lock(&p->lock);
    while (atomic_load(&p->finished) < ntasks) {
        p->caller_waits = true;
        pthread_cond_wait(&p->done, &p->lock);
    }
    p->caller_waits = false;
    pthread_mutex_unlock(&p->lock);
    atomic_flag_clear(&p->busy);
}

void tgl_pool_run(tgl_ctx *ctx, int ntasks, tgl_task_fn fn, void *arg)
{
    tgl_pool_run_in(&ctx->pool, ctx->config.threads, ntasks, fn, arg);
}

/* The workers belong to the process (the CPU backend's products use them
 * too); a context only lets go of them.  They sleep once idle and end
 * with the process. */
void tgl_pool_free(tgl_ctx *ctx)
{
    if (!ctx)
        return;
    ctx->pool = NULL;
}

void tgl_pool_release(struct tgl_pool **slot)
{
    pool_destroy(*slot);
    *slot = NULL;
}
