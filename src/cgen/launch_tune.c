/*
 * launch_tune.c — the measurement of kernel.parallel_min (engine/tune.h),
 * the elements from which launch.c splits a generated kernel over the
 * pool: the cheapest kind of kernel run by the calling thread alone
 * against two tasks on a pool of two (engine/pool.h).  The CPU backend
 * registers it (src/cpu/calibrate.c) with its own measurements.
 */
#include "cgen/cgen.h"
#include "engine/pool.h"
#include "engine/tune.h"

#include <stdlib.h>
#include <unistd.h>

/* The cheapest kind of kernel, y = a x + b over float32: the one whose
 * split pays last (a kernel with more work per element pays sooner). */
typedef struct axpb {
    const float *x;
    float *y;
    int64_t n;
} axpb;

static void axpb_range(const axpb *j, int64_t lo, int64_t hi)
{
    const float *x = j->x;
    float *y = j->y;
    for (int64_t i = lo; i < hi; i++)
        y[i] = 1.5f * x[i] + 0.25f;
}

static void axpb_task(void *arg, int t)
{
    const axpb *j = arg;
    axpb_range(j, j->n * t / 2, j->n * (t + 1) / 2);
}

typedef struct axpb_bench {
    axpb job;
    struct tgl_pool *pool;
} axpb_bench;

/* variant 0: the calling thread alone; 1: two tasks on a pool of two. */
static void axpb_run(void *arg, int variant, int64_t n)
{
    axpb_bench *b = arg;
    b->job.n = n;
    if (variant == 0)
        axpb_range(&b->job, 0, n);
    else
        tgl_pool_run_in(&b->pool, 2, 2, axpb_task, &b->job);
}

/* kernel.parallel_min: the elements from which two threads beat one on
 * that kernel, the pool's worker spinning between runs as it does between
 * the kernels of a step. */
static int64_t measure_parallel_min(void)
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        return -1;
    enum { N = 12 };
    int64_t sizes[N];
    for (int i = 0; i < N; i++)
        sizes[i] = (int64_t)1024 << i; /* 1K .. 2M elements */
    axpb_bench b = {{NULL, NULL, 0}, NULL};
    float *x = malloc((size_t)sizes[N - 1] * sizeof *x);
    float *y = malloc((size_t)sizes[N - 1] * sizeof *y);
    int64_t v = -1;
    if (x && y) {
        for (int64_t i = 0; i < sizes[N - 1]; i++)
            x[i] = (float)(i % 7), y[i] = 0;
        b.job.x = x;
        b.job.y = y;
        v = tgl_tune_crossover(axpb_run, &b, sizes, sizes, N);
    }
    tgl_pool_release(&b.pool);
    free(x);
    free(y);
    return v;
}

void tgl_cgen_tune_register(void)
{
    tgl_tune_register(TGL_TUNE_PARALLEL_MIN, measure_parallel_min);
}
