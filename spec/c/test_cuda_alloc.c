/*
 * test_cuda_alloc.c — the CUDA caching allocator (src/cuda/runtime.c)
 * through the public API: arrays copied to the device (tgl_array_to_device)
 * and released, measured with tgl_cuda_memory_stats.  Each block is its
 * size class (the engine's 64-byte rounding, then multiples of 512 bytes up
 * to 1 MiB and four classes per power of two above); a freed block serves
 * the next request of its class from the cache; empty_cache gives the
 * cache back; random interleavings keep `allocated` equal to the classes of
 * the live arrays; threads allocating at once leave the figures balanced;
 * an allocation larger than the device fails as out of memory.
 *
 * Runs on the emulated GPU (TGL_CUDA_EMU=1, set here unless the
 * environment already says which driver to use) or a real one; skipped,
 * with the reason, when the build has no CUDA or no device can be used.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tgl_fixture.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* What the allocator reserves for an array of nbytes. */
static int64_t class_size(int64_t nbytes)
{
    int64_t n = (nbytes + 63) / 64 * 64;
    if (n == 0)
        n = 64;
    if (n <= (1 << 20))
        return (n + 511) / 512 * 512;
    int64_t base = 1 << 20;
    while (base * 2 < n)
        base *= 2;
    int64_t step = base / 4;
    return base + (n - base + step - 1) / step * step;
}

static tgl_cuda_mem_stats stats(void)
{
    tgl_cuda_mem_stats s;
    tgl_cuda_memory_stats(&s);
    return s;
}

/* A device array of nbytes (uint8), made from a host array of zeros. */
static tgl_array *device_bytes(tgl_ctx *ctx, int64_t nbytes)
{
    tgl_array *h = NULL, *d = NULL;
    assert_ok(ctx, tgl_array_zeros(ctx, TGL_UINT8, 1, &nbytes, &h));
    assert_ok(ctx, tgl_array_to_device(ctx, h, TGL_DEVICE_CUDA, &d));
    tgl_array_release(h);
    assert_int_equal(d->device, TGL_DEVICE_CUDA);
    return d;
}

static void test_every_block_is_its_size_class(void **state)
{
    tgl_ctx *ctx = ((fixture *)*state)->ctx;
    const int64_t sizes[] = {1,           63,          64,          65,         511,
                             512,         513,         4096,        100000,     (1 << 20) - 1,
                             1 << 20,     (1 << 20) + 1, 5 << 18,   (5 << 18) + 1, 3 << 20,
                             (3 << 20) + 1, (7 << 20) + 3, 9 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        tgl_cuda_mem_stats b = stats();
        tgl_array *d = device_bytes(ctx, sizes[i]);
        tgl_cuda_mem_stats s = stats();
        if (s.allocated - b.allocated != class_size(sizes[i]))
            fail_msg("%lld bytes: the block is %lld bytes, expected %lld", (long long)sizes[i],
                     (long long)(s.allocated - b.allocated), (long long)class_size(sizes[i]));
        assert_int_equal(s.n_allocs, b.n_allocs + 1);
        assert_true(s.peak >= s.allocated);
        assert_true(s.reserved >= s.allocated);
        tgl_array_release(d);
        tgl_cuda_mem_stats a = stats();
        assert_int_equal(a.allocated, b.allocated);
        assert_int_equal(a.n_frees, b.n_frees + 1);
        assert_int_equal(a.reserved, s.reserved); /* cached, not given back */
    }
}

static void test_the_cache_serves_its_class_and_empties(void **state)
{
    tgl_ctx *ctx = ((fixture *)*state)->ctx;
    tgl_array *d = device_bytes(ctx, 3000 * 8);
    tgl_cuda_mem_stats s1 = stats();
    tgl_array_release(d);
    d = device_bytes(ctx, 2990 * 8); /* the same class: 24064 bytes */
    tgl_cuda_mem_stats s2 = stats();
    assert_int_equal(s2.n_cache_hits, s1.n_cache_hits + 1);
    assert_int_equal(s2.n_driver_allocs, s1.n_driver_allocs);
    assert_int_equal(s2.reserved, s1.reserved);
    /* another class does not take it */
    tgl_array_release(d);
    d = device_bytes(ctx, 3100 * 8);
    tgl_cuda_mem_stats s3 = stats();
    assert_int_equal(s3.n_cache_hits, s2.n_cache_hits);
    assert_int_equal(s3.n_driver_allocs, s2.n_driver_allocs + 1);
    tgl_array_release(d);
    tgl_cuda_mem_stats s4 = stats();
    assert_true(s4.reserved > s4.allocated);
    tgl_cuda_empty_cache();
    tgl_cuda_mem_stats s5 = stats();
    assert_int_equal(s5.reserved, s5.allocated);
    assert_int_equal(s5.allocated, s4.allocated);
}

static void test_random_interleavings_keep_the_figures(void **state)
{
    tgl_ctx *ctx = ((fixture *)*state)->ctx;
    srand(22);
    enum { N = 120 };
    tgl_array *live[N] = {0};
    int64_t size[N] = {0};
    tgl_cuda_mem_stats start = stats();
    int64_t expect = start.allocated, peak = start.peak;
    for (int step = 0; step < 600; step++) {
        int i = rand() % N;
        if (live[i]) {
            tgl_array_release(live[i]);
            live[i] = NULL;
            expect -= class_size(size[i]);
        } else {
            /* mostly small, some around 1 MiB, a few large */
            int r = rand() % 10;
            size[i] = r < 7 ? 1 + rand() % 20000 : r < 9 ? (1 << 20) - 4096 + rand() % 8192
                                                         : 1 + rand() % (6 << 20);
            live[i] = device_bytes(ctx, size[i]);
            expect += class_size(size[i]);
        }
        if (expect > peak)
            peak = expect;
        tgl_cuda_mem_stats s = stats();
        assert_int_equal(s.allocated, expect);
        assert_true(s.reserved >= s.allocated);
        assert_true(s.peak >= peak);
    }
    for (int i = 0; i < N; i++)
        tgl_array_release(live[i]);
    tgl_cuda_mem_stats end = stats();
    assert_int_equal(end.allocated, start.allocated);
    assert_int_equal(end.n_allocs - start.n_allocs, end.n_frees - start.n_frees);
    assert_int_equal(end.n_allocs - start.n_allocs,
                     (end.n_cache_hits - start.n_cache_hits) +
                         (end.n_driver_allocs - start.n_driver_allocs));
    tgl_cuda_empty_cache();
    assert_int_equal(stats().reserved, stats().allocated);
}

static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    tgl_ctx *ctx = tgl_ctx_new();
    tgl_array *h = NULL;
    int64_t n = 70000;
    if (!ctx || tgl_array_zeros(ctx, TGL_UINT8, 1, &n, &h))
        return (void *)1;
    uintptr_t bad = 0;
    for (int i = 0; i < 300 && !bad; i++) {
        int64_t len = 1 + (int64_t)(rand_r(&seed) % 70000);
        tgl_array *v = NULL, *d = NULL;
        if (tgl_array_view(ctx, h, 1, &len, (const int64_t[]){1}, 0, &v) ||
            tgl_array_to_device(ctx, v, TGL_DEVICE_CUDA, &d))
            bad = 1;
        tgl_array_release(v);
        tgl_array_release(d);
    }
    tgl_array_release(h);
    tgl_ctx_free(ctx);
    return (void *)bad;
}

static void test_threads_allocating_at_once_balance(void **state)
{
    (void)state;
    tgl_cuda_mem_stats start = stats();
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1)), 0);
    for (int i = 0; i < 4; i++) {
        void *r = NULL;
        pthread_join(t[i], &r);
        assert_null(r);
    }
    tgl_cuda_mem_stats end = stats();
    assert_int_equal(end.allocated, start.allocated);
    assert_int_equal(end.n_allocs - start.n_allocs, 1200);
    assert_int_equal(end.n_frees - start.n_frees, 1200);
}

static void test_larger_than_the_device_is_out_of_memory(void **state)
{
    tgl_ctx *ctx = ((fixture *)*state)->ctx;
    tgl_array *one = NULL, *huge = NULL, *d = NULL;
    int64_t n1 = 1, n = (int64_t)1 << 42, stride = 0;
    assert_ok(ctx, tgl_array_zeros(ctx, TGL_FLOAT32, 1, &n1, &one));
    assert_ok(ctx, tgl_array_view(ctx, one, 1, &n, &stride, 0, &huge));
    tgl_cuda_mem_stats b = stats();
    assert_int_equal(tgl_array_to_device(ctx, huge, TGL_DEVICE_CUDA, &d), TGL_ENOMEM);
    assert_null(d);
    assert_non_null(strstr(tgl_ctx_error(ctx), "out of memory allocating 17592186044416 bytes on cuda"));
    tgl_ctx_clear_error(ctx);
    tgl_cuda_mem_stats a = stats();
    assert_int_equal(a.n_ooms, b.n_ooms + 1);
    assert_int_equal(a.allocated, b.allocated);
    assert_int_equal(a.n_allocs, b.n_allocs);
    tgl_array_release(huge);
    tgl_array_release(one);
    /* the device still works */
    tgl_array_release(device_bytes(ctx, 1000));
}

int main(void)
{
    if (!getenv("TGL_CUDA_EMU"))
        setenv("TGL_CUDA_EMU", "1", 1);
    if (!tgl_cuda_built() || tgl_cuda_unavailable()) {
        printf("test_cuda_alloc: skipped: %s\n",
               tgl_cuda_built() ? tgl_cuda_unavailable() : "tgl was built without CUDA");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_block_is_its_size_class, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_cache_serves_its_class_and_empties, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_random_interleavings_keep_the_figures, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_threads_allocating_at_once_balance, setup, teardown),
        cmocka_unit_test_setup_teardown(test_larger_than_the_device_is_out_of_memory, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
