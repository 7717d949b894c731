/*
 * tgl_fixture.h — the cmocka fixture the C tests share: a fresh context
 * per test, and a teardown that fails the test when an array it made is
 * still alive after the context is freed (live bytes back to the start);
 * and the small assertions every test file uses.
 */
#ifndef TGL_FIXTURE_H
#define TGL_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <tgl.h>

/* A call that must succeed; on failure, the call and the context's message. */
#define assert_ok(ctx, call)                                                          \
    do {                                                                              \
        tgl_status st_ = (call);                                                      \
        if (st_ != TGL_OK)                                                            \
            fail_msg("%s failed with status %d: %s", #call, (int)st_, tgl_ctx_error(ctx)); \
    } while (0)

/* Element i (C order over a's shape) of a. */
static inline double elem(tgl_ctx *ctx, const tgl_array *a, int64_t i)
{
    int64_t idx[TGL_MAX_DIMS];
    for (int d = a->ndim - 1; d >= 0; d--) {
        idx[d] = i % a->shape[d];
        i /= a->shape[d];
    }
    double v = NAN;
    assert_ok(ctx, tgl_array_get(ctx, a, idx, &v));
    return v;
}

/* a has exactly this shape. */
static inline void assert_shape(const tgl_array *a, int ndim, const int64_t *shape)
{
    assert_int_equal(a->ndim, ndim);
    for (int d = 0; d < ndim; d++)
        if (a->shape[d] != shape[d])
            fail_msg("axis %d has size %lld, expected %lld", d, (long long)a->shape[d],
                     (long long)shape[d]);
}

typedef struct {
    tgl_ctx *ctx;
    int64_t live_at_start;
} fixture;

static int setup(void **state)
{
    fixture *f = malloc(sizeof *f);
    if (!f)
        return -1;
    f->ctx = tgl_ctx_new();
    if (!f->ctx) {
        free(f);
        return -1;
    }
    f->live_at_start = tgl_memory_live_bytes();
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    tgl_ctx_free(f->ctx); /* nodes (constants, shared values) die with the context */
    int64_t live = tgl_memory_live_bytes();
    int64_t start = f->live_at_start;
    free(f);
    if (live != start) {
        print_error("live bytes %lld after the test, %lld before: an array was not released\n",
                    (long long)live, (long long)start);
        return -1;
    }
    return 0;
}

#endif /* TGL_FIXTURE_H */
