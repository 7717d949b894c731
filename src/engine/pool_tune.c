/*
 * pool_tune.c — the measurement of pool.spin_ns (engine/tune.h), how long
 * an idle worker of the pool (pool.c) watches for the next run before it
 * sleeps: from the wake-up latency of a thread sleeping on a condition
 * variable, as an idle worker does, against one watching a word, as a
 * spinning one does.  The CPU backend registers it (src/cpu/calibrate.c)
 * with its own measurements.
 */
#include "engine/pool.h"
#include "engine/tune.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

/* A waker and a sleeper: how long after the waker's signal the sleeper
 * runs, when it sleeps on a condition variable (as an idle worker does)
 * and when it watches a word (as a spinning one does). */
typedef struct wake_probe {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t go, sent, seen; /* atomics                                    */
    int mode;                /* 0 sleep, 1 spin, 2 stop                    */
    bool waiting;
} wake_probe;

static void *wake_sleeper(void *arg)
{
    wake_probe *w = arg;
    uint64_t gen = 0;
    for (;;) {
        pthread_mutex_lock(&w->lock);
        int mode = __atomic_load_n(&w->mode, __ATOMIC_ACQUIRE);
        if (mode == 2) {
            pthread_mutex_unlock(&w->lock);
            return NULL;
        }
        if (mode == 0) {
            w->waiting = true;
            pthread_cond_broadcast(&w->cond);
            while (__atomic_load_n(&w->go, __ATOMIC_ACQUIRE) == gen && w->mode == 0)
                pthread_cond_wait(&w->cond, &w->lock);
            w->waiting = false;
            pthread_mutex_unlock(&w->lock);
        } else {
            pthread_mutex_unlock(&w->lock);
            while (__atomic_load_n(&w->go, __ATOMIC_ACQUIRE) == gen &&
                   __atomic_load_n(&w->mode, __ATOMIC_ACQUIRE) == 1) {
#if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
#endif
            }
        }
        uint64_t t = tgl_now_ns();
        uint64_t g = __atomic_load_n(&w->go, __ATOMIC_ACQUIRE);
        if (g == gen)
            continue; /* the mode changed: no wake-up to time */
        gen = g;
        __atomic_store_n(&w->seen, t, __ATOMIC_RELEASE);
    }
}

/* The median wake-up latency (ns) in mode 0 (sleeping) or 1 (spinning). */
static double wake_latency(wake_probe *w, int mode, int reps)
{
    double s[15];
    for (int r = 0; r < reps; r++) {
        pthread_mutex_lock(&w->lock);
        __atomic_store_n(&w->mode, mode, __ATOMIC_RELEASE);
        __atomic_store_n(&w->seen, 0, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&w->cond);
        if (mode == 0)
            while (!w->waiting)
                pthread_cond_wait(&w->cond, &w->lock);
        pthread_mutex_unlock(&w->lock);
        /* let a sleeper's core go idle, as between two steps */
        struct timespec pause = {0, mode == 0 ? 200000 : 20000};
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&w->lock);
        uint64_t t0 = tgl_now_ns();
        __atomic_add_fetch(&w->go, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
        uint64_t t1;
        while (!(t1 = __atomic_load_n(&w->seen, __ATOMIC_ACQUIRE)))
            sched_yield();
        s[r] = t1 > t0 ? (double)(t1 - t0) : 0.0;
    }
    for (int i = 1; i < reps; i++)
        for (int j = i; j > 0 && s[j] < s[j - 1]; j--) {
            double x = s[j];
            s[j] = s[j - 1];
            s[j - 1] = x;
        }
    return s[reps / 2];
}

/* pool.spin_ns: five wake-ups of a sleeping worker (less a spinning one's).
 * A worker that went to sleep costs the next run one wake-up on its
 * critical path; watching for a few wake-ups' time covers the gaps between
 * the products and kernels of one step, and costs at most that much CPU
 * per idle period (on the Xeon where the old 50 us was chosen, a wake-up
 * measured about ten). */
static int64_t measure_spin(void)
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        return -1;
    wake_probe w = {.mode = 1};
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    pthread_t th;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&th, NULL, wake_sleeper, &w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    int64_t spin = -1;
    if (rc == 0) {
        double spinning = wake_latency(&w, 1, 15);
        double sleeping = wake_latency(&w, 0, 15);
        double d = sleeping > spinning ? sleeping - spinning : 0;
        spin = (int64_t)(5 * d);
        pthread_mutex_lock(&w.lock);
        __atomic_store_n(&w.mode, 2, __ATOMIC_RELEASE);
        __atomic_add_fetch(&w.go, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&w.cond);
        pthread_mutex_unlock(&w.lock);
        pthread_join(th, NULL);
    }
    pthread_cond_destroy(&w.cond);
    pthread_mutex_destroy(&w.lock);
    return spin;
}

void tgl_pool_tune_register(void)
{
    tgl_tune_register(TGL_TUNE_POOL_SPIN_NS, measure_spin);
}
