/*
 * test_cuda_runtime.c — src/cuda/runtime.c from the inside (an internal
 * test, built with the CUDA backend only): the allocator's holding of
 * blocks freed during a graph capture (tgl_cuda_hold_*), its size classes
 * and alignment through tgl_cuda_alloc, the backend's memory entries
 * (fill, copies both ways and within the device, zero bytes), error
 * formatting, the TF32 setting as op kernels read it, the backend's info
 * text, and the real driver without a GPU (0 devices, a clear error from
 * init, never an abort).
 *
 * The device cases run on the emulated GPU (TGL_CUDA_EMU=1, set here unless
 * the environment says otherwise) or a real one; they are skipped, with the
 * reason, when no device can be used.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cuda/cuda_int.h"
#include "engine/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tgl_cuda_mem_stats stats(void)
{
    tgl_cuda_mem_stats s;
    tgl_cuda_memory_stats(&s);
    return s;
}

static void test_blocks_freed_during_a_capture_are_held(void **state)
{
    (void)state;
    void *a = tgl_cuda_alloc(5000);
    assert_non_null(a);
    tgl_cuda_free(a);
    void *b = tgl_cuda_alloc(5000); /* the cache serves the same block */
    assert_ptr_equal(a, b);

    tgl_cuda_mem_stats s0 = stats();
    tgl_cuda_hold_begin();
    tgl_cuda_free(b);
    tgl_cuda_mem_stats s1 = stats();
    assert_int_equal(s1.allocated, s0.allocated - 5120);
    assert_int_equal(s1.reserved, s0.reserved); /* held, not given back */
    void *c = tgl_cuda_alloc(5000);             /* not the held block */
    assert_non_null(c);
    assert_ptr_not_equal(c, b);
    tgl_cuda_free(c);
    tgl_cuda_empty_cache(); /* held blocks are not the cache's */
    void *held = tgl_cuda_hold_end();
    assert_non_null(held);
    tgl_cuda_mem_stats s2 = stats();
    assert_int_equal(s2.reserved, s2.allocated + 2 * 5120); /* b and c, both held */

    /* after the capture, frees go to the cache again */
    void *d = tgl_cuda_alloc(100);
    tgl_cuda_free(d);
    assert_ptr_equal(tgl_cuda_alloc(100), d);
    tgl_cuda_free(d);
    assert_null(tgl_cuda_hold_end()); /* nothing held since */

    /* the graph gives its blocks back: they serve requests again */
    tgl_cuda_hold_release(held);
    void *e = tgl_cuda_alloc(5000), *f = tgl_cuda_alloc(5000);
    assert_true((e == b && f == c) || (e == c && f == b));
    tgl_cuda_free(e);
    tgl_cuda_free(f);
    tgl_cuda_hold_release(NULL); /* nothing: fine */
    tgl_cuda_empty_cache();
    assert_int_equal(stats().reserved, stats().allocated);
}

static void test_alloc_rounds_to_classes_and_aligns(void **state)
{
    (void)state;
    static const struct { size_t n, size; } cases[] = {
        {1, 512},
        {512, 512},
        {513, 1024},
        {(1 << 20) - 1, 1 << 20},
        {1 << 20, 1 << 20},
        {(1 << 20) + 1, (5 << 20) / 4},
        {(5 << 20) / 4, (5 << 20) / 4},
        {(5 << 20) / 4 + 1, (6 << 20) / 4},
        {(7 << 20) / 4 + 1, 2 << 20},
        {(2 << 20) + 1, (5 << 21) / 4},
        {(3 << 22) + 5, 7 << 21},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tgl_cuda_mem_stats b = stats();
        void *p = tgl_cuda_alloc(cases[i].n);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 256, 0);
        if ((size_t)(stats().allocated - b.allocated) != cases[i].size)
            fail_msg("%zu bytes: a block of %lld, expected %zu", cases[i].n,
                     (long long)(stats().allocated - b.allocated), cases[i].size);
        tgl_cuda_free(p);
    }
    /* freeing NULL, and a pointer the allocator never gave, changes nothing */
    tgl_cuda_mem_stats b = stats();
    tgl_cuda_free(NULL);
    int not_ours;
    tgl_cuda_free(&not_ours);
    tgl_cuda_mem_stats a = stats();
    assert_int_equal(a.n_frees, b.n_frees);
    assert_int_equal(a.allocated, b.allocated);
    /* more than the device has: NULL at once, counted */
    assert_null(tgl_cuda_alloc(tgl_cuda_info()->total_mem + 1));
    assert_int_equal(stats().n_ooms, a.n_ooms + 1);
}

static void test_memory_entries_move_the_bytes(void **state)
{
    (void)state;
    enum { N = 300000 }; /* over one staging slot's first size */
    unsigned char *h = malloc(N), *back = malloc(N);
    assert_non_null(h);
    assert_non_null(back);
    for (int i = 0; i < N; i++)
        h[i] = (unsigned char)(i * 7 + 3);
    void *d1 = tgl_cuda_be_alloc(N), *d2 = tgl_cuda_be_alloc(N);
    assert_non_null(d1);
    assert_non_null(d2);
    tgl_errbuf e;
    assert_int_equal(tgl_cuda_be_copy_from_host(d1, h, N, &e), TGL_OK);
    memset(h, 0, 16); /* the host buffer may be reused at once */
    assert_int_equal(tgl_cuda_be_copy(d2, d1, N, &e), TGL_OK);
    assert_int_equal(tgl_cuda_be_memset(d1, 0xab, 1000, &e), TGL_OK);
    assert_int_equal(tgl_cuda_be_copy_to_host(back, d2, N, &e), TGL_OK);
    for (int i = 16; i < N; i++)
        if (back[i] != (unsigned char)(i * 7 + 3))
            fail_msg("byte %d: %d, expected %d", i, back[i], (unsigned char)(i * 7 + 3));
    for (int i = 0; i < 16; i++)
        assert_int_equal(back[i], (unsigned char)(i * 7 + 3));
    assert_int_equal(tgl_cuda_be_copy_to_host(back, d1, 2000, &e), TGL_OK);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(back[i], 0xab);
    assert_int_equal(back[1000], (unsigned char)(1000 * 7 + 3));
    /* many small copies in a row go through the staging slots in turn */
    for (int k = 0; k < 20; k++) {
        unsigned char v[64];
        memset(v, k, sizeof v);
        assert_int_equal(tgl_cuda_be_copy_from_host((char *)d1 + 64 * k, v, sizeof v, &e), TGL_OK);
    }
    assert_int_equal(tgl_cuda_be_copy_to_host(back, d1, 64 * 20, &e), TGL_OK);
    for (int i = 0; i < 64 * 20; i++)
        assert_int_equal(back[i], i / 64);
    /* zero bytes: nothing to do, never an error */
    assert_int_equal(tgl_cuda_be_copy_to_host(back, d1, 0, &e), TGL_OK);
    assert_int_equal(tgl_cuda_be_memset(d1, 0, 0, &e), TGL_OK);
    assert_int_equal(tgl_cuda_drv()->sync(&e), TGL_OK);
    tgl_cuda_be_free(d1);
    tgl_cuda_be_free(d2);
    tgl_cuda_be_free(NULL);
    free(h);
    free(back);
}

static void test_settings_errors_and_info(void **state)
{
    (void)state;
    tgl_errbuf e;
    assert_int_equal(tgl_cuda_fail(&e, TGL_EIO, "reading %s (%d)", "x", 3), TGL_EIO);
    assert_string_equal(e.msg, "cuda: reading x (3)");
    assert_int_equal(tgl_cuda_fail(NULL, TGL_EINVAL, "no buffer"), TGL_EINVAL);

    tgl_ctx *ctx = tgl_ctx_new();
    assert_non_null(ctx);
    assert_ptr_equal(tgl_cuda_opts(ctx), &ctx->backend_opts);
    assert_false(tgl_cuda_allow_tf32());
    assert_int_equal(tgl_config_set(ctx, "allow_tf32", "true"), TGL_OK);
    assert_false(tgl_cuda_allow_tf32()); /* read when an op kernel asks for the options */
    assert_true(tgl_cuda_opts(ctx)->allow_tf32);
    assert_true(tgl_cuda_allow_tf32());
    assert_int_equal(tgl_config_set(ctx, "allow_tf32", "false"), TGL_OK);
    tgl_cuda_opts(ctx);
    assert_false(tgl_cuda_allow_tf32());
    tgl_ctx_free(ctx);

    assert_int_equal(tgl_cuda_ready(&e), TGL_OK);
    assert_int_equal(tgl_cuda_ready(NULL), TGL_OK); /* the first answer, again */
    const tgl_cuda_devinfo *d = tgl_cuda_info();
    assert_true(d->name[0] != '\0');
    assert_true(d->cc_major >= 3);
    assert_true(d->total_mem > 0);
    assert_true(d->target[0] != '\0');
    const char *info = tgl_cuda_be_info();
    assert_non_null(strstr(info, d->name));
    char sm[16];
    snprintf(sm, sizeof sm, "sm_%d%d", d->cc_major, d->cc_minor);
    assert_non_null(strstr(info, sm));
    assert_ptr_equal(tgl_cuda_be_info(), info);
    assert_string_equal(tgl_cuda_device_name(), d->name);
    assert_null(tgl_cuda_unavailable());
    assert_int_equal(tgl_cuda_device_count(), tgl_cuda_drv()->device_count());
    assert_true(tgl_cuda_device_count() >= 1);
}

static void test_the_real_driver_without_a_gpu_says_so(void **state)
{
    (void)state;
    const tgl_cuda_driver *real = &tgl_cuda_driver_real;
    int n = real->device_count();
    if (n > 0) {
        skip(); /* a GPU is here: the device cases cover it */
        return;
    }
    assert_int_equal(n, 0);
    assert_int_equal(real->device_count(), 0); /* again: the sticky error was cleared */
    tgl_cuda_devinfo info;
    tgl_errbuf e = {{0}};
    assert_int_not_equal(real->init(&info, &e), TGL_OK);
    assert_non_null(strstr(e.msg, "cuda: no CUDA device: "));
}

/* After an asynchronous kernel fault the context is lost and every later
 * CUDA call returns that fault: the real driver's messages say so for
 * exactly the errors driver_types.h calls sticky (codes from it). */
static void test_sticky_cuda_errors_are_told_apart(void **state)
{
    (void)state;
    assert_true(tgl_cuda_error_is_sticky(700));  /* cudaErrorIllegalAddress   */
    assert_true(tgl_cuda_error_is_sticky(719));  /* cudaErrorLaunchFailure    */
    assert_true(tgl_cuda_error_is_sticky(710));  /* cudaErrorAssert           */
    assert_true(tgl_cuda_error_is_sticky(716));  /* cudaErrorMisalignedAddress */
    assert_false(tgl_cuda_error_is_sticky(0));   /* cudaSuccess               */
    assert_false(tgl_cuda_error_is_sticky(2));   /* cudaErrorMemoryAllocation */
    assert_false(tgl_cuda_error_is_sticky(1));   /* cudaErrorInvalidValue     */
    assert_false(tgl_cuda_error_is_sticky(100)); /* cudaErrorNoDevice         */
    assert_false(tgl_cuda_error_is_sticky(901)); /* cudaErrorStreamCaptureInvalidated */
}

int main(void)
{
    if (!getenv("TGL_CUDA_EMU"))
        setenv("TGL_CUDA_EMU", "1", 1);
    const struct CMUnitTest always[] = {
        cmocka_unit_test(test_the_real_driver_without_a_gpu_says_so),
        cmocka_unit_test(test_sticky_cuda_errors_are_told_apart),
    };
    int failed = cmocka_run_group_tests(always, NULL, NULL);
    const char *why = tgl_cuda_unavailable();
    if (why) {
        printf("test_cuda_runtime: device cases skipped: %s\n", why);
        return failed;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks_freed_during_a_capture_are_held),
        cmocka_unit_test(test_alloc_rounds_to_classes_and_aligns),
        cmocka_unit_test(test_memory_entries_move_the_bytes),
        cmocka_unit_test(test_settings_errors_and_info),
    };
    return failed | cmocka_run_group_tests(tests, NULL, NULL);
}
