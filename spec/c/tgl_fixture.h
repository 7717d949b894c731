/*
 * tgl_fixture.h — the cmocka fixture the C tests share: a fresh context
 * per test, and a teardown that fails the test when an array it made is
 * still alive after the context is freed (live bytes back to the start).
 */
#ifndef TGL_FIXTURE_H
#define TGL_FIXTURE_H

#include <stdint.h>
#include <stdlib.h>
#include <tgl.h>

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
