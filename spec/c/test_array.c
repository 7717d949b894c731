/*
 * test_array.c — the C API of contexts, dtypes and arrays (include/tgl.h),
 * checked against hand-computed values: creation, conversions, views and
 * their storage sharing, reference counts, element access, the Philox
 * generator (known-answer vectors and statistics), and every bad input
 * (status, a message that starts with the C function's name, out-params
 * left untouched).
 *
 * Every test runs with a fresh context; the teardown checks that the test
 * released every array it made (live storage bytes back to their start).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tgl.h>

/* Under AddressSanitizer an impossible allocation must fail with NULL, as
 * it does without ASan, instead of aborting (an_impossible_allocation...).
 * Unused in builds without ASan. */
__attribute__((used, visibility("default"))) const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */
/* ------------------------------------------------------------------------ */

#include "tgl_fixture.h"

#define CTX (((fixture *)*state)->ctx)

/* A pointer value no allocation returns: out-params must keep it on failure. */
#define SENTINEL ((tgl_array *)(uintptr_t)0x5e47)

#define assert_double_eq(got, want)                                                   \
    do {                                                                              \
        double g_ = (got), w_ = (want);                                               \
        if (!(g_ == w_))                                                              \
            fail_msg("%s is %.17g, expected %.17g", #got, g_, w_);                    \
    } while (0)

#define assert_double_near(got, want, tol)                                            \
    do {                                                                              \
        double g_ = (got), w_ = (want);                                               \
        if (!(fabs(g_ - w_) <= (tol)))                                                \
            fail_msg("%s is %.17g, expected %.17g within %g", #got, g_, w_, (double)(tol)); \
    } while (0)

/* A failed call: the status, a message "<fn>: ..." that contains needle. */
#define assert_fails(ctx, call, want_status, fn, needle)                              \
    do {                                                                              \
        tgl_ctx_clear_error(ctx);                                                     \
        tgl_status st_ = (call);                                                      \
        const char *msg_ = tgl_ctx_error(ctx);                                        \
        if (st_ != (want_status))                                                     \
            fail_msg("%s returned status %d, expected %d (message: %s)", #call,       \
                     (int)st_, (int)(want_status), msg_);                             \
        if (strncmp(msg_, fn ": ", strlen(fn ": ")) != 0)                              \
            fail_msg("message of %s does not start with '%s: ': %s", #call, fn, msg_); \
        if (!strstr(msg_, needle))                                                    \
            fail_msg("message of %s does not mention '%s': %s", #call, needle, msg_); \
    } while (0)

static void assert_elements(tgl_ctx *ctx, const tgl_array *a, const double *want, int64_t n)
{
    assert_int_equal(a->size, n);
    for (int64_t i = 0; i < n; i++) {
        double g = elem(ctx, a, i);
        int same = g == want[i] || (isnan(g) && isnan(want[i]));
        if (!same)
            fail_msg("element %lld is %.17g, expected %.17g", (long long)i, g, want[i]);
    }
}

/* A 1-d float64 array holding vals. */
static tgl_array *from_doubles(tgl_ctx *ctx, const double *vals, int64_t n)
{
    tgl_array *a = NULL;
    assert_int_equal(tgl_array_empty(ctx, TGL_FLOAT64, 1, &n, &a), TGL_OK);
    memcpy(a->data, vals, (size_t)n * sizeof(double));
    return a;
}

static tgl_array *from_int64s(tgl_ctx *ctx, const int64_t *vals, int64_t n)
{
    tgl_array *a = NULL;
    assert_int_equal(tgl_array_empty(ctx, TGL_INT64, 1, &n, &a), TGL_OK);
    memcpy(a->data, vals, (size_t)n * sizeof(int64_t));
    return a;
}

/* 0, 1, 2, ... as a contiguous float64 array of the given shape. */
static tgl_array *iota(tgl_ctx *ctx, int ndim, const int64_t *shape)
{
    tgl_array *a = NULL;
    assert_int_equal(tgl_array_empty(ctx, TGL_FLOAT64, ndim, shape, &a), TGL_OK);
    for (int64_t i = 0; i < a->size; i++)
        ((double *)a->data)[i] = (double)i;
    return a;
}

static uint64_t bits_of(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

static double double_of(uint64_t b)
{
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

/* ------------------------------------------------------------------------ */
/* Context                                                                  */
/* ------------------------------------------------------------------------ */

static void ctx_new_starts_with_an_empty_message_and_seed_zero(void **state)
{
    assert_string_equal(tgl_ctx_error(CTX), "");
    uint64_t seed = 99, offset = 99;
    tgl_ctx_rng_state(CTX, &seed, &offset);
    assert_true(seed == 0 && offset == 0);
}

static void ctx_set_error_formats_the_message_and_returns_the_status(void **state)
{
    assert_int_equal(tgl_ctx_set_error(CTX, TGL_EFORMAT, "my_ext: bad %s %d", "thing", 7),
                     TGL_EFORMAT);
    assert_string_equal(tgl_ctx_error(CTX), "my_ext: bad thing 7");
    tgl_ctx_clear_error(CTX);
    assert_string_equal(tgl_ctx_error(CTX), "");
}

static void ctx_set_error_truncates_a_long_message(void **state)
{
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(tgl_ctx_set_error(CTX, TGL_EINVAL, "%s", big), TGL_EINVAL);
    size_t n = strlen(tgl_ctx_error(CTX));
    assert_true(n > 0 && n < sizeof big - 1);
    assert_true(tgl_ctx_error(CTX)[0] == 'x');
}

static void ctx_error_functions_and_free_tolerate_a_null_context(void **state)
{
    (void)state;
    assert_non_null(tgl_ctx_error(NULL));
    assert_true(strlen(tgl_ctx_error(NULL)) > 0);
    assert_int_equal(tgl_ctx_set_error(NULL, TGL_EIO, "x"), TGL_EIO);
    tgl_ctx_clear_error(NULL);
    tgl_ctx_free(NULL);
}

static void ctx_manual_seed_sets_the_seed_and_restarts_the_counter(void **state)
{
    int64_t shape[1] = {10};
    tgl_array *a = NULL;
    tgl_ctx_manual_seed(CTX, 123);
    assert_ok(CTX, tgl_array_rand(CTX, TGL_FLOAT32, 1, shape, 0, 1, &a));
    uint64_t seed, offset;
    tgl_ctx_rng_state(CTX, &seed, &offset);
    assert_true(seed == 123 && offset == 10);
    tgl_ctx_manual_seed(CTX, 0xfedcba9876543210ull);
    tgl_ctx_rng_state(CTX, &seed, &offset);
    assert_true(seed == 0xfedcba9876543210ull && offset == 0);
    /* either out-pointer may be NULL */
    tgl_ctx_rng_state(CTX, NULL, &offset);
    tgl_ctx_rng_state(CTX, &seed, NULL);
    tgl_array_release(a);
}

static void ctx_set_rng_state_restores_a_saved_state(void **state)
{
    tgl_ctx_set_rng_state(CTX, 42, 1000);
    uint64_t seed, offset;
    tgl_ctx_rng_state(CTX, &seed, &offset);
    assert_true(seed == 42 && offset == 1000);
}

static void ctx_interrupt_flag_stops_allocations_until_cleared(void **state)
{
    volatile int flag = 1;
    int64_t shape[1] = {4};
    tgl_array *a = SENTINEL;
    tgl_ctx_set_interrupt_flag(CTX, &flag);
    assert_fails(CTX, tgl_array_zeros(CTX, TGL_FLOAT32, 1, shape, &a), TGL_EINTERRUPT,
                 "tgl_array_zeros", "interrupted");
    assert_ptr_equal(a, SENTINEL);
    flag = 0;
    assert_ok(CTX, tgl_array_zeros(CTX, TGL_FLOAT32, 1, shape, &a));
    tgl_array_release(a);
    flag = 1;
    tgl_ctx_set_interrupt_flag(CTX, NULL);  /* detached: the flag is ignored */
    assert_ok(CTX, tgl_array_zeros(CTX, TGL_FLOAT32, 1, shape, &a));
    tgl_array_release(a);
}

static void arrays_stay_valid_after_their_context_is_freed(void **state)
{
    tgl_ctx *ctx = tgl_ctx_new();
    assert_non_null(ctx);
    int64_t shape[1] = {3};
    tgl_array *a = NULL;
    assert_ok(ctx, tgl_array_full(ctx, TGL_INT32, 1, shape, 9, &a));
    tgl_ctx_free(ctx);
    assert_int_equal(((int32_t *)a->data)[2], 9);
    double v;
    assert_ok(CTX, tgl_array_get(CTX, a, (int64_t[]){1}, &v));
    assert_double_eq(v, 9);
    tgl_array_release(a);
}

static void a_later_failure_replaces_the_message_and_success_keeps_it(void **state)
{
    int64_t shape[1] = {-1}, ok_shape[1] = {1};
    tgl_array *a = NULL;
    assert_fails(CTX, tgl_array_zeros(CTX, TGL_FLOAT32, 1, shape, &a), TGL_ESHAPE,
                 "tgl_array_zeros", "negative size -1");
    assert_fails(CTX, tgl_array_empty(CTX, 17, 1, ok_shape, &a), TGL_EDTYPE, "tgl_array_empty",
                 "unknown dtype 17");
    /* The message is that of the last *failed* call. */
    assert_ok(CTX, tgl_array_zeros(CTX, TGL_FLOAT32, 1, ok_shape, &a));
    assert_true(strstr(tgl_ctx_error(CTX), "unknown dtype 17") != NULL);
    tgl_array_release(a);
}

/* ------------------------------------------------------------------------ */
/* Dtypes                                                                   */
/* ------------------------------------------------------------------------ */

static void dtype_names_and_sizes_follow_the_abi_order(void **state)
{
    (void)state;
    static const char *names[] = {"float32", "float64", "int32", "int64", "uint8", "bool"};
    static const size_t sizes[] = {4, 8, 4, 8, 1, 1};
    assert_int_equal(TGL_NDTYPES, 6);
    for (int d = 0; d < TGL_NDTYPES; d++) {
        assert_string_equal(tgl_dtype_name(d), names[d]);
        assert_int_equal(tgl_dtype_size(d), sizes[d]);
        assert_int_equal(tgl_dtype_from_name(names[d]), d);
    }
    assert_int_equal(TGL_FLOAT32, 0);
    assert_int_equal(TGL_BOOL, 5);
}

static void dtype_invalid_ids_have_no_name_and_size_zero(void **state)
{
    (void)state;
    assert_null(tgl_dtype_name(-1));
    assert_null(tgl_dtype_name(TGL_NDTYPES));
    assert_null(tgl_dtype_name(1000));
    assert_int_equal(tgl_dtype_size(-1), 0);
    assert_int_equal(tgl_dtype_size(TGL_NDTYPES), 0);
}

static void dtype_promote_takes_the_later_in_bool_uint8_int32_int64_float32_float64(void **state)
{
    (void)state;
    static const int order[] = {TGL_BOOL, TGL_UINT8, TGL_INT32, TGL_INT64, TGL_FLOAT32, TGL_FLOAT64};
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++)
            assert_int_equal(tgl_dtype_promote(order[i], order[j]), order[i > j ? i : j]);
    assert_int_equal(tgl_dtype_promote(TGL_INT64, TGL_FLOAT32), TGL_FLOAT32);
    assert_int_equal(tgl_dtype_promote(-1, TGL_FLOAT32), -1);
    assert_int_equal(tgl_dtype_promote(TGL_FLOAT32, TGL_NDTYPES), -1);
}

static void dtype_from_name_accepts_the_torch_aliases(void **state)
{
    (void)state;
    assert_int_equal(tgl_dtype_from_name("float"), TGL_FLOAT32);
    assert_int_equal(tgl_dtype_from_name("double"), TGL_FLOAT64);
    assert_int_equal(tgl_dtype_from_name("int"), TGL_INT32);
    assert_int_equal(tgl_dtype_from_name("long"), TGL_INT64);
    assert_int_equal(tgl_dtype_from_name("byte"), TGL_UINT8);
}

static void dtype_from_name_rejects_unknown_names(void **state)
{
    (void)state;
    assert_int_equal(tgl_dtype_from_name(NULL), -1);
    assert_int_equal(tgl_dtype_from_name(""), -1);
    assert_int_equal(tgl_dtype_from_name("float16"), -1);
    assert_int_equal(tgl_dtype_from_name("Float32"), -1);
    assert_int_equal(tgl_dtype_from_name("float32 "), -1);
}

/* ------------------------------------------------------------------------ */
/* Creation                                                                 */
/* ------------------------------------------------------------------------ */

static void empty_gives_a_contiguous_descriptor_with_c_strides(void **state)
{
    int64_t shape[3] = {2, 3, 4};
    tgl_array *a = NULL;
    assert_ok(CTX, tgl_array_empty(CTX, TGL_INT64, 3, shape, &a));
    assert_int_equal(a->ndim, 3);
    assert_int_equal(a->dtype_id, TGL_INT64);
    assert_int_equal(a->size, 24);
    assert_int_equal(a->refcount, 1);
    assert_int_equal(a->flags, TGL_ARRAY_CONTIGUOUS);
    assert_true(a->shape[0] == 2 && a->shape[1] == 3 && a->shape[2] == 4);
    assert_true(a->strides[0] == 12 && a->strides[1] == 4 && a->strides[2] == 1);
    assert_non_null(a->storage);
    assert_int_equal(tgl_array_is_contiguous(a), 1);
    tgl_array_release(a);
}

static void empty_with_ndim_zero_is_a_scalar_of_one_element(void **state)
{
    tgl_array *a = NULL;
    assert_ok(CTX, tgl_array_full(CTX, TGL_FLOAT64, 0, NULL, 2.5, &a));
    assert_int_equal(a->ndim, 0);
    assert_int_equal(a->size, 1);
    double v = 0;
    assert_ok(CTX, tgl_array_get(CTX, a, NULL, &v));
    assert_double_eq(v, 2.5);
    tgl_array_release(a);
}

static void zero_sized_dimensions_give_an_empty_array(void **state)
{
    int64_t shape[3] = {3, 0, 5};
    tgl_array *a = NULL;
    assert_ok(CTX, tgl_array_zeros(CTX, TGL_FLOAT32, 3, shape, &a));
    assert_int_equal(a->size, 0);
    assert_non_null(a->data);
    assert_true(a->strides[0] == 5 && a->strides[1] == 5 && a->strides[2] == 1);
    assert_int_equal(tgl_array_is_contiguous(a), 1);
    tgl_array_release(a);
}

static void data_is_64_byte_aligned_for_every_dtype_and_size(void **state)
{
    for (int d = 0; d < TGL_NDTYPES; d++) {
        for (int64_t n = 0; n < 70; n += 7) {
            tgl_array *a = NULL;
            assert_ok(CTX, tgl_array_empty(CTX, d, 1, &n, &a));
            if ((uintptr_t)a->data % TGL_ALIGN != 0)
                fail_msg("%s[%lld] data %p is not 64-byte aligned", tgl_dtype_name(d),
                         (long long)n, a->data);
            tgl_array_release(a);
        }
    }
    assert_int_equal(TGL_ALIGN, 64);
}

static void zeros_are_zero_bytes_for_every_dtype(void **state)
{
    int64_t shape[2] = {7, 9};
    for (int d = 0; d < TGL_NDTYPES; d++) {
        tgl_array *a = NULL;
        assert_ok(CTX, tgl_array_zeros(CTX, d, 2, shape, &a));
        const unsigned char *p = a->data;
        for (size_t i = 0; i < 63 * tgl_dtype_size(d); i++)
            if (p[i] != 0)
                fail_msg("%s byte %zu is %d", tgl_dtype_name(d), i, p[i]);
        tgl_array_release(a);
    }
}

static void full_converts_the_value_to_each_dtype(void **state)
{
    int64_t shape[2] = {2, 3};
    struct { int dtype; double value; double want; } cases[] = {
        {TGL_FLOAT32, 300.7, (double)300.7f}, {TGL_FLOAT64, 300.7, 300.7},
        {TGL_INT32, 300.7, 300},              {TGL_INT64, 300.7, 300},
        {TGL_UINT8, 300.7, 255},              {TGL_BOOL, 300.7, 1},
        {TGL_INT32, -2.7, -2},                {TGL_UINT8, -2.7, 0},
        {TGL_BOOL, 0.0, 0},                   {TGL_BOOL, 0.5, 1},
        {TGL_INT32, NAN, 0},                  {TGL_FLOAT64, -0.0, -0.0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tgl_array *a = NULL;
        assert_ok(CTX, tgl_array_full(CTX, cases[c].dtype, 2, shape, cases[c].value, &a));
        for (int64_t i = 0; i < 6; i++)
            if (elem(CTX, a, i) != cases[c].want)
                fail_msg("full(%s, %g)[%lld] = %.17g, expected %.17g",
                         tgl_dtype_name(cases[c].dtype), cases[c].value, (long long)i,
                         elem(CTX, a, i), cases[c].want);
        tgl_array_release(a);
    }
}

static void full_int64_saturates_at_the_extremes(void **state)
{
    tgl_array *a = NULL, *b = NULL;
    assert_ok(CTX, tgl_array_full(CTX, TGL_INT64, 0, NULL, 9223372036854775808.0, &a));
    assert_ok(CTX, tgl_array_full(CTX, TGL_INT64, 0, NULL, -1e300, &b));
    assert_true(*(int64_t *)a->data == INT64_MAX);
    assert_true(*(int64_t *)b->data == INT64_MIN);
    tgl_array_release(a);
    tgl_array_release(b);
}

static void full_keeps_the_bits_of_negative_zero(void **state)
{
    int64_t n = 3;
    tgl_array *a = NULL;
    assert_ok(CTX, tgl_array_full(CTX, TGL_FLOAT64, 1, &n, -0.0, &a));
    for (int i = 0; i < 3; i++)
        assert_true(bits_of(((double *)a->data)[i]) == 0x8000000000000000ull);
    tgl_array_release(a);
}

static void arange_includes_stop_when_reached_like_lua_for(void **state)
{
    tgl_array *a = NULL;
    assert_ok(CTX, tgl_array_arange(CTX, TGL_FLOAT64, 1, 2, 0.25, &a));
    assert_int_equal(a->ndim, 1);
    assert_elements(CTX, a, (double[]){1, 1.25, 1.5, 1.75, 2}, 5);
    tgl_array_release(a);
    assert_ok(CTX, tgl_array_arange(CTX, TGL_INT32, 1, 10, 3, &a));
    assert_elements(CTX, a, (double[]){1, 4, 7, 10}, 4);
    tgl_array_release(a);
}

static void arange_stops_before_an_unreached_stop(void **state)
{
    tgl_array *a = NULL;
    assert_ok(CTX, tgl_array_arange(CTX, TGL_INT64, 1, 10, 4, &a));
    assert_elements(CTX, a, (double[]){1, 5, 9}, 3);
    tgl_array_release(a);
}

static void arange_counts_down_with_a_negative_step(void **state)
{
    tgl_array *a = NULL;
    assert_ok(CTX, tgl_array_arange(CTX, TGL_INT32, 5, 1, -2, &a));
    assert_elements(CTX, a, (double[]){5, 3, 1}, 3);
    tgl_array_release(a);
}

static void arange_is_empty_when_the_step_goes_the_wrong_way(void **state)
{
    tgl_array *a = NULL;
    assert_ok(CTX, tgl_array_arange(CTX, TGL_FLOAT32, 5, 1, 1, &a));
    assert_int_equal(a->ndim, 1);
    assert_int_equal(a->shape[0], 0);
    assert_int_equal(a->size, 0);
    tgl_array_release(a);
    assert_ok(CTX, tgl_array_arange(CTX, TGL_FLOAT32, 1, 5, -1, &a));
    assert_int_equal(a->size, 0);
    tgl_array_release(a);
}

static void arange_with_start_equal_to_stop_has_one_element(void **state)
{
    tgl_array *a = NULL;
    assert_ok(CTX, tgl_array_arange(CTX, TGL_UINT8, 3, 3, -1, &a));
    assert_elements(CTX, a, (double[]){3}, 1);
    tgl_array_release(a);
}

static void arange_converts_to_the_dtype(void **state)
{
    tgl_array *a = NULL;
    assert_ok(CTX, tgl_array_arange(CTX, TGL_INT32, 0, 1, 0.5, &a));
    assert_elements(CTX, a, (double[]){0, 0, 1}, 3);
    tgl_array_release(a);
    assert_ok(CTX, tgl_array_arange(CTX, TGL_BOOL, 0, 2, 1, &a));
    assert_elements(CTX, a, (double[]){0, 1, 1}, 3);
    tgl_array_release(a);
}

/* ------------------------------------------------------------------------ */
/* Conversions (tgl_array_copy)                                             */
/* ------------------------------------------------------------------------ */

static void copy_from_float_saturates_integers_truncates_and_maps_nan_to_zero(void **state)
{
    static const double src[] = {300.0, -2.7, NAN, 0.5, -1.0, 1e20, -1e20, 255.5,
                                 2147483647.5, -0.0, 2.9};
    const int64_t n = sizeof src / sizeof src[0];
    static const double want_u8[] = {255, 0, 0, 0, 0, 255, 0, 255, 255, 0, 2};
    static const double want_i32[] = {300, -2, 0, 0, -1, 2147483647.0, -2147483648.0,
                                      255, 2147483647.0, 0, 2};
    static const double want_bool[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1};
    static const int64_t want_i64[] = {300, -2, 0, 0, -1, INT64_MAX, INT64_MIN, 255,
                                       2147483647, 0, 2};
    for (int pass = 0; pass < 2; pass++) {
        /* float64 and float32 sources take the same path */
        tgl_array *s64 = from_doubles(CTX, src, n), *s = s64, *u8, *i32, *i64, *b;
        if (pass == 1) {
            assert_ok(CTX, tgl_array_copy(CTX, s64, TGL_FLOAT32, &s));
            tgl_array_release(s64);
        }
        assert_ok(CTX, tgl_array_copy(CTX, s, TGL_UINT8, &u8));
        assert_ok(CTX, tgl_array_copy(CTX, s, TGL_INT32, &i32));
        assert_ok(CTX, tgl_array_copy(CTX, s, TGL_INT64, &i64));
        assert_ok(CTX, tgl_array_copy(CTX, s, TGL_BOOL, &b));
        assert_elements(CTX, u8, want_u8, n);
        assert_elements(CTX, i32, want_i32, n);
        assert_elements(CTX, b, want_bool, n);
        for (int64_t i = 0; i < n; i++) {
            int64_t want = want_i64[i];
            if (pass == 1 && i == 8)
                want = 2147483648;  /* 2147483647.5f rounds to 2^31 */
            if (((int64_t *)i64->data)[i] != want)
                fail_msg("pass %d: int64 element %lld is %lld, expected %lld", pass,
                         (long long)i, (long long)((int64_t *)i64->data)[i], (long long)want);
        }
        /* bool stores exactly 0 or 1 */
        for (int64_t i = 0; i < n; i++)
            assert_true(((uint8_t *)b->data)[i] == want_bool[i]);
        tgl_array_release(s);
        tgl_array_release(u8);
        tgl_array_release(i32);
        tgl_array_release(i64);
        tgl_array_release(b);
    }
}

static void copy_from_int64_narrows_by_wrapping(void **state)
{
    static const int64_t src[] = {((int64_t)1 << 32) + 5, -1, (int64_t)1 << 31, 300, INT64_MIN,
                                  0};
    tgl_array *a = from_int64s(CTX, src, 6), *i32, *u8, *b;
    assert_ok(CTX, tgl_array_copy(CTX, a, TGL_INT32, &i32));
    assert_ok(CTX, tgl_array_copy(CTX, a, TGL_UINT8, &u8));
    assert_ok(CTX, tgl_array_copy(CTX, a, TGL_BOOL, &b));
    assert_elements(CTX, i32, (double[]){5, -1, -2147483648.0, 300, 0, 0}, 6);
    assert_elements(CTX, u8, (double[]){5, 255, 0, 44, 0, 0}, 6);
    assert_elements(CTX, b, (double[]){1, 1, 1, 1, 1, 0}, 6);
    tgl_array_release(a);
    tgl_array_release(i32);
    tgl_array_release(u8);
    tgl_array_release(b);
}

static void copy_from_int32_narrows_by_wrapping_like_int64(void **state)
{
    int64_t n = 5;
    tgl_array *a = NULL, *u8 = NULL, *b = NULL;
    assert_ok(CTX, tgl_array_empty(CTX, TGL_INT32, 1, &n, &a));
    int32_t *p = a->data;
    p[0] = -1; p[1] = 300; p[2] = 70000; p[3] = INT32_MIN; p[4] = 256;
    assert_ok(CTX, tgl_array_copy(CTX, a, TGL_UINT8, &u8));
    assert_ok(CTX, tgl_array_copy(CTX, a, TGL_BOOL, &b));
    /* NumPy's astype: -1 -> 255, 300 -> 44, 70000 -> 112 (mod 256) */
    assert_elements(CTX, u8, (double[]){255, 44, 112, 0, 0}, 5);
    assert_elements(CTX, b, (double[]){1, 1, 1, 1, 1}, 5);
    tgl_array_release(a);
    tgl_array_release(u8);
    tgl_array_release(b);
}

static void copy_widening_integers_is_exact(void **state)
{
    int64_t n = 4;
    tgl_array *a = NULL, *i64 = NULL, *i32 = NULL, *f64 = NULL;
    assert_ok(CTX, tgl_array_empty(CTX, TGL_UINT8, 1, &n, &a));
    uint8_t *p = a->data;
    p[0] = 0; p[1] = 1; p[2] = 200; p[3] = 255;
    assert_ok(CTX, tgl_array_copy(CTX, a, TGL_INT64, &i64));
    assert_ok(CTX, tgl_array_copy(CTX, a, TGL_INT32, &i32));
    assert_ok(CTX, tgl_array_copy(CTX, a, TGL_FLOAT64, &f64));
    for (int i = 0; i < 4; i++) {
        assert_true(((int64_t *)i64->data)[i] == p[i]);
        assert_true(((int32_t *)i32->data)[i] == p[i]);
        assert_true(((double *)f64->data)[i] == p[i]);
    }
    tgl_array_release(a);
    tgl_array_release(i64);
    tgl_array_release(i32);
    tgl_array_release(f64);
}

static void copy_of_int64_keeps_every_bit_of_large_values(void **state)
{
    static const int64_t src[] = {INT64_MAX, INT64_MIN, ((int64_t)1 << 53) + 1};
    tgl_array *a = from_int64s(CTX, src, 3), *c = NULL;
    assert_ok(CTX, tgl_array_copy(CTX, a, TGL_INT64, &c));
    assert_memory_equal(c->data, src, sizeof src);
    tgl_array_release(a);
    tgl_array_release(c);
}

static void copy_of_int64_to_float32_rounds_once(void **state)
{
    /* 2^53 + 2^29 + 1 lies just above the midpoint of two floats; rounding
     * through double first lands exactly on the midpoint and then on 2^53. */
    static const int64_t src[] = {((int64_t)1 << 53) + ((int64_t)1 << 29) + 1};
    tgl_array *a = from_int64s(CTX, src, 1), *f = NULL;
    assert_ok(CTX, tgl_array_copy(CTX, a, TGL_FLOAT32, &f));
    assert_true(*(float *)f->data == (float)src[0]);
    assert_double_eq(*(float *)f->data, 9007199254740992.0 + 1073741824.0);
    tgl_array_release(a);
    tgl_array_release(f);
}

static void copy_of_bool_gives_zero_and_one(void **state)
{
    int64_t n = 2;
    tgl_array *a = NULL, *f = NULL;
    assert_ok(CTX, tgl_array_empty(CTX, TGL_BOOL, 1, &n, &a));
    ((uint8_t *)a->data)[0] = 1;
    ((uint8_t *)a->data)[1] = 0;
    for (int d = 0; d < TGL_NDTYPES; d++) {
        assert_ok(CTX, tgl_array_copy(CTX, a, d, &f));
        assert_elements(CTX, f, (double[]){1, 0}, 2);
        tgl_array_release(f);
    }
    tgl_array_release(a);
}

static void copy_to_the_same_float_dtype_keeps_nan_payloads(void **state)
{
    const double vals[2] = {double_of(0x7ff8000000000123ull), double_of(0xfff0000000000001ull)};
    tgl_array *a = from_doubles(CTX, vals, 2), *c = NULL, *t = NULL;
    assert_ok(CTX, tgl_array_copy(CTX, a, TGL_FLOAT64, &c));
    assert_memory_equal(c->data, vals, sizeof vals);
    /* also through the strided path */
    int64_t shape[1] = {2}, strides[1] = {-1};
    assert_ok(CTX, tgl_array_view(CTX, a, 1, shape, strides, 1, &t));
    tgl_array_release(c);
    assert_ok(CTX, tgl_array_copy(CTX, t, TGL_FLOAT64, &c));
    assert_true(bits_of(((double *)c->data)[0]) == 0xfff0000000000001ull);
    assert_true(bits_of(((double *)c->data)[1]) == 0x7ff8000000000123ull);
    tgl_array_release(a);
    tgl_array_release(c);
    tgl_array_release(t);
}

static void copy_of_a_strided_view_is_contiguous_in_c_order(void **state)
{
    int64_t shape[2] = {2, 3};
    tgl_array *a = iota(CTX, 2, shape), *t = NULL, *c = NULL;
    assert_ok(CTX, tgl_array_transpose(CTX, a, NULL, &t));
    assert_ok(CTX, tgl_array_copy(CTX, t, TGL_INT32, &c));
    assert_int_equal(c->flags, TGL_ARRAY_CONTIGUOUS);
    assert_true(c->shape[0] == 3 && c->shape[1] == 2);
    assert_true(c->storage != a->storage);
    const int32_t want[6] = {0, 3, 1, 4, 2, 5};
    assert_memory_equal(c->data, want, sizeof want);
    tgl_array_release(a);
    tgl_array_release(t);
    tgl_array_release(c);
}

/* ------------------------------------------------------------------------ */
/* Views, reshape, transpose                                                */
/* ------------------------------------------------------------------------ */

static void transpose_shares_storage_writes_show_through(void **state)
{
    int64_t shape[2] = {2, 3};
    tgl_array *a = iota(CTX, 2, shape), *t = NULL;
    assert_ok(CTX, tgl_array_transpose(CTX, a, NULL, &t));
    assert_true(t->storage == a->storage && t->data == a->data);
    assert_true(t->shape[0] == 3 && t->shape[1] == 2);
    assert_true(t->strides[0] == 1 && t->strides[1] == 3);
    assert_int_equal(t->flags, 0);
    assert_int_equal(tgl_array_is_contiguous(t), 0);
    /* write t[2][1], read a[1][2] */
    assert_ok(CTX, tgl_array_set(CTX, t, (int64_t[]){2, 1}, 42));
    double v;
    assert_ok(CTX, tgl_array_get(CTX, a, (int64_t[]){1, 2}, &v));
    assert_double_eq(v, 42);
    tgl_array_release(t);
    tgl_array_release(a);
}

static void transpose_with_a_permutation_moves_shapes_and_strides(void **state)
{
    int64_t shape[3] = {2, 3, 4};
    tgl_array *a = iota(CTX, 3, shape), *p = NULL;
    assert_ok(CTX, tgl_array_transpose(CTX, a, (int[]){2, 0, 1}, &p));
    assert_true(p->shape[0] == 4 && p->shape[1] == 2 && p->shape[2] == 3);
    assert_true(p->strides[0] == 1 && p->strides[1] == 12 && p->strides[2] == 4);
    double v;
    /* p[3][1][2] is a[1][2][3] = 1*12 + 2*4 + 3 */
    assert_ok(CTX, tgl_array_get(CTX, p, (int64_t[]){3, 1, 2}, &v));
    assert_double_eq(v, 23);
    tgl_array_release(p);
    /* the identity permutation stays contiguous */
    assert_ok(CTX, tgl_array_transpose(CTX, a, (int[]){0, 1, 2}, &p));
    assert_int_equal(p->flags, TGL_ARRAY_CONTIGUOUS);
    tgl_array_release(p);
    tgl_array_release(a);
}

static void transpose_of_a_scalar_and_a_vector_is_the_same_layout(void **state)
{
    int64_t n = 4;
    tgl_array *s = NULL, *v = iota(CTX, 1, &n), *t = NULL, *u = NULL;
    assert_ok(CTX, tgl_array_full(CTX, TGL_FLOAT32, 0, NULL, 1, &s));
    assert_ok(CTX, tgl_array_transpose(CTX, s, NULL, &t));
    assert_int_equal(t->ndim, 0);
    assert_ok(CTX, tgl_array_transpose(CTX, v, NULL, &u));
    assert_true(u->shape[0] == 4 && u->strides[0] == 1);
    assert_int_equal(u->flags, TGL_ARRAY_CONTIGUOUS);
    tgl_array_release(s);
    tgl_array_release(t);
    tgl_array_release(v);
    tgl_array_release(u);
}

static void view_reads_with_the_given_shape_strides_and_offset(void **state)
{
    int64_t shape[1] = {12};
    tgl_array *a = iota(CTX, 1, shape), *v = NULL, *w = NULL;
    /* every other element of 2..10, as 1x5 */
    assert_ok(CTX, tgl_array_view(CTX, a, 2, (int64_t[]){1, 5}, (int64_t[]){0, 2}, 2, &v));
    assert_elements(CTX, v, (double[]){2, 4, 6, 8, 10}, 5);
    assert_true(v->storage == a->storage);
    assert_ptr_equal(v->data, (double *)a->data + 2);
    /* a view's offset counts from the view's own data, and may be negative */
    assert_ok(CTX, tgl_array_view(CTX, v, 1, (int64_t[]){2}, (int64_t[]){-1}, -1, &w));
    assert_elements(CTX, w, (double[]){1, 0}, 2);
    tgl_array_release(w);
    assert_ok(CTX, tgl_array_view(CTX, v, 1, (int64_t[]){3}, (int64_t[]){-1}, 0, &w));
    assert_elements(CTX, w, (double[]){2, 1, 0}, 3);
    tgl_array_release(w);
    tgl_array_release(v);
    tgl_array_release(a);
}

static void view_with_zero_strides_repeats_one_element(void **state)
{
    int64_t n = 3;
    tgl_array *a = iota(CTX, 1, &n), *v = NULL;
    assert_ok(CTX, tgl_array_view(CTX, a, 2, (int64_t[]){4, 2}, (int64_t[]){0, 0}, 2, &v));
    assert_elements(CTX, v, (double[]){2, 2, 2, 2, 2, 2, 2, 2}, 8);
    assert_int_equal(v->flags, 0);
    tgl_array_release(v);
    tgl_array_release(a);
}

static void view_rejects_elements_outside_the_storage(void **state)
{
    int64_t n = 10;
    tgl_array *a = iota(CTX, 1, &n), *v = SENTINEL;
    /* one past the end */
    assert_fails(CTX, tgl_array_view(CTX, a, 1, (int64_t[]){11}, (int64_t[]){1}, 0, &v),
                 TGL_ESHAPE, "tgl_array_view", "outside the storage");
    /* the offset pushes the last element out */
    assert_fails(CTX, tgl_array_view(CTX, a, 1, (int64_t[]){5}, (int64_t[]){2}, 2, &v),
                 TGL_ESHAPE, "tgl_array_view", "outside the storage");
    /* a negative stride reaches before the start */
    assert_fails(CTX, tgl_array_view(CTX, a, 1, (int64_t[]){2}, (int64_t[]){-1}, 0, &v),
                 TGL_ESHAPE, "tgl_array_view", "outside the storage");
    /* a negative offset */
    assert_fails(CTX, tgl_array_view(CTX, a, 0, NULL, NULL, -1, &v), TGL_ESHAPE,
                 "tgl_array_view", "outside the storage");
    assert_fails(CTX, tgl_array_view(CTX, a, 0, NULL, NULL, 10, &v), TGL_ESHAPE,
                 "tgl_array_view", "outside the storage");
    assert_ptr_equal(v, SENTINEL);
    /* exactly the last element is fine */
    assert_ok(CTX, tgl_array_view(CTX, a, 0, NULL, NULL, 9, &v));
    double x;
    assert_ok(CTX, tgl_array_get(CTX, v, NULL, &x));
    assert_double_eq(x, 9);
    tgl_array_release(v);
    tgl_array_release(a);
}

static void view_bounds_check_survives_overflowing_strides(void **state)
{
    int64_t n = 10;
    tgl_array *a = iota(CTX, 1, &n), *v = SENTINEL;
    /* (3 - 1) * 2^62 overflows int64: the check must not wrap into range */
    assert_fails(CTX,
                 tgl_array_view(CTX, a, 1, (int64_t[]){3}, (int64_t[]){(int64_t)1 << 62}, 0, &v),
                 TGL_ESHAPE, "tgl_array_view", "outside the storage");
    assert_fails(CTX,
                 tgl_array_view(CTX, a, 2, (int64_t[]){2, 2},
                                (int64_t[]){INT64_MAX, INT64_MAX}, 0, &v),
                 TGL_ESHAPE, "tgl_array_view", "outside the storage");
    assert_fails(CTX, tgl_array_view(CTX, a, 1, (int64_t[]){2}, (int64_t[]){1}, INT64_MAX, &v),
                 TGL_ESHAPE, "tgl_array_view", "outside the storage");
    assert_fails(CTX, tgl_array_view(CTX, a, 1, (int64_t[]){2}, (int64_t[]){-1}, INT64_MIN, &v),
                 TGL_ESHAPE, "tgl_array_view", "outside the storage");
    assert_ptr_equal(v, SENTINEL);
    tgl_array_release(a);
}

static void view_with_no_elements_needs_no_storage(void **state)
{
    int64_t n = 4;
    tgl_array *a = iota(CTX, 1, &n), *v = NULL;
    assert_ok(CTX, tgl_array_view(CTX, a, 2, (int64_t[]){0, 100}, (int64_t[]){100, 1}, 0, &v));
    assert_int_equal(v->size, 0);
    tgl_array_release(v);
    tgl_array_release(a);
}

static void reshape_of_a_contiguous_array_is_a_view(void **state)
{
    int64_t shape[2] = {2, 6};
    tgl_array *a = iota(CTX, 2, shape), *r = NULL;
    assert_ok(CTX, tgl_array_reshape(CTX, a, 3, (int64_t[]){3, 2, 2}, &r));
    assert_true(r->storage == a->storage && r->data == a->data);
    assert_true(r->shape[0] == 3 && r->shape[1] == 2 && r->shape[2] == 2);
    assert_true(r->strides[0] == 4 && r->strides[1] == 2 && r->strides[2] == 1);
    assert_int_equal(r->flags, TGL_ARRAY_CONTIGUOUS);
    assert_ok(CTX, tgl_array_set(CTX, r, (int64_t[]){2, 1, 0}, -5));
    assert_double_eq(((double *)a->data)[10], -5);
    tgl_array_release(r);
    tgl_array_release(a);
}

static void reshape_of_an_offset_view_keeps_the_offset(void **state)
{
    int64_t n = 10;
    tgl_array *a = iota(CTX, 1, &n), *v = NULL, *r = NULL;
    assert_ok(CTX, tgl_array_view(CTX, a, 1, (int64_t[]){6}, (int64_t[]){1}, 3, &v));
    assert_ok(CTX, tgl_array_reshape(CTX, v, 2, (int64_t[]){2, 3}, &r));
    assert_true(r->storage == a->storage);
    assert_elements(CTX, r, (double[]){3, 4, 5, 6, 7, 8}, 6);
    tgl_array_release(a);
    tgl_array_release(v);
    tgl_array_release(r);
}

static void reshape_infers_one_minus_one_dimension(void **state)
{
    int64_t shape[1] = {24};
    tgl_array *a = iota(CTX, 1, shape), *r = NULL;
    assert_ok(CTX, tgl_array_reshape(CTX, a, 3, (int64_t[]){2, -1, 3}, &r));
    assert_true(r->shape[0] == 2 && r->shape[1] == 4 && r->shape[2] == 3);
    tgl_array_release(r);
    assert_ok(CTX, tgl_array_reshape(CTX, a, 1, (int64_t[]){-1}, &r));
    assert_true(r->ndim == 1 && r->shape[0] == 24);
    tgl_array_release(r);
    tgl_array_release(a);
}

static void reshape_of_a_non_contiguous_array_copies(void **state)
{
    int64_t shape[2] = {2, 3};
    tgl_array *a = iota(CTX, 2, shape), *t = NULL, *r = NULL;
    assert_ok(CTX, tgl_array_transpose(CTX, a, NULL, &t));
    assert_ok(CTX, tgl_array_reshape(CTX, t, 1, (int64_t[]){6}, &r));
    assert_true(r->storage != a->storage);
    assert_int_equal(r->flags, TGL_ARRAY_CONTIGUOUS);
    assert_elements(CTX, r, (double[]){0, 3, 1, 4, 2, 5}, 6);
    /* a copy: writing it leaves a alone */
    ((double *)r->data)[0] = 100;
    assert_double_eq(((double *)a->data)[0], 0);
    tgl_array_release(a);
    tgl_array_release(t);
    tgl_array_release(r);
}

static void reshape_to_a_scalar_and_of_empty_arrays(void **state)
{
    int64_t one = 1, zero_shape[2] = {0, 3};
    tgl_array *a = iota(CTX, 1, &one), *r = NULL, *e = NULL;
    assert_ok(CTX, tgl_array_reshape(CTX, a, 0, NULL, &r));
    assert_int_equal(r->ndim, 0);
    assert_int_equal(r->size, 1);
    tgl_array_release(r);
    assert_ok(CTX, tgl_array_zeros(CTX, TGL_FLOAT32, 2, zero_shape, &e));
    assert_ok(CTX, tgl_array_reshape(CTX, e, 3, (int64_t[]){5, 0, 7}, &r));
    assert_int_equal(r->size, 0);
    tgl_array_release(r);
    tgl_array_release(a);
    tgl_array_release(e);
}

static void reshape_rejects_shapes_that_do_not_fit(void **state)
{
    int64_t n = 6;
    tgl_array *a = iota(CTX, 1, &n), *r = SENTINEL;
    assert_fails(CTX, tgl_array_reshape(CTX, a, 1, (int64_t[]){4}, &r), TGL_ESHAPE,
                 "tgl_array_reshape", "cannot reshape 6 elements");
    assert_fails(CTX, tgl_array_reshape(CTX, a, 2, (int64_t[]){-1, -1}, &r), TGL_ESHAPE,
                 "tgl_array_reshape", "more than one dimension is -1");
    assert_fails(CTX, tgl_array_reshape(CTX, a, 2, (int64_t[]){4, -1}, &r), TGL_ESHAPE,
                 "tgl_array_reshape", "cannot infer");
    assert_fails(CTX, tgl_array_reshape(CTX, a, 2, (int64_t[]){0, -1}, &r), TGL_ESHAPE,
                 "tgl_array_reshape", "cannot infer");
    assert_fails(CTX, tgl_array_reshape(CTX, a, 2, (int64_t[]){-2, -3}, &r), TGL_ESHAPE,
                 "tgl_array_reshape", "negative size -2");
    assert_fails(CTX, tgl_array_reshape(CTX, a, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 6}, &r),
                 TGL_ESHAPE, "tgl_array_reshape", "9 dimensions");
    assert_fails(CTX, tgl_array_reshape(CTX, a, -1, NULL, &r), TGL_ESHAPE, "tgl_array_reshape",
                 "-1 dimensions");
    assert_fails(CTX, tgl_array_reshape(CTX, a, 1, NULL, &r), TGL_EINVAL, "tgl_array_reshape",
                 "shape is NULL");
    assert_fails(CTX,
                 tgl_array_reshape(CTX, a, 3,
                                   (int64_t[]){(int64_t)1 << 30, (int64_t)1 << 30,
                                               (int64_t)1 << 30}, &r),
                 TGL_ESHAPE, "tgl_array_reshape", "too large");
    tgl_array *e = NULL;
    assert_ok(CTX, tgl_array_zeros(CTX, TGL_FLOAT32, 1, (int64_t[]){0}, &e));
    assert_fails(CTX,
                 tgl_array_reshape(CTX, e, 3,
                                   (int64_t[]){(int64_t)1 << 40, 0, (int64_t)1 << 40}, &r),
                 TGL_ESHAPE, "tgl_array_reshape", "too large");
    tgl_array_release(e);
    assert_fails(CTX, tgl_array_reshape(CTX, NULL, 1, &n, &r), TGL_EINVAL, "tgl_array_reshape",
                 "NULL");
    assert_fails(CTX, tgl_array_reshape(CTX, a, 1, &n, NULL), TGL_EINVAL, "tgl_array_reshape",
                 "NULL");
    assert_ptr_equal(r, SENTINEL);
    tgl_array_release(a);
}

static void transpose_rejects_a_bad_permutation(void **state)
{
    int64_t shape[3] = {2, 3, 4};
    tgl_array *a = iota(CTX, 3, shape), *t = SENTINEL;
    assert_fails(CTX, tgl_array_transpose(CTX, a, (int[]){0, 0, 1}, &t), TGL_EINVAL,
                 "tgl_array_transpose", "not a permutation of 3 axes");
    assert_fails(CTX, tgl_array_transpose(CTX, a, (int[]){0, 1, 3}, &t), TGL_EINVAL,
                 "tgl_array_transpose", "not a permutation");
    assert_fails(CTX, tgl_array_transpose(CTX, a, (int[]){-1, 0, 1}, &t), TGL_EINVAL,
                 "tgl_array_transpose", "not a permutation");
    assert_fails(CTX, tgl_array_transpose(CTX, NULL, NULL, &t), TGL_EINVAL,
                 "tgl_array_transpose", "NULL");
    assert_fails(CTX, tgl_array_transpose(CTX, a, NULL, NULL), TGL_EINVAL,
                 "tgl_array_transpose", "NULL");
    assert_ptr_equal(t, SENTINEL);
    tgl_array_release(a);
}

/* ------------------------------------------------------------------------ */
/* Reference counts and memory                                              */
/* ------------------------------------------------------------------------ */

static void a_view_keeps_the_storage_alive_after_the_original_goes(void **state)
{
    int64_t shape[2] = {3, 4};
    tgl_array *a = iota(CTX, 2, shape), *t = NULL, *r = NULL;
    int64_t live_with_a = tgl_memory_live_bytes();
    assert_ok(CTX, tgl_array_transpose(CTX, a, NULL, &t));
    assert_ok(CTX, tgl_array_reshape(CTX, a, 1, (int64_t[]){12}, &r));
    /* views add no storage */
    assert_int_equal(tgl_memory_live_bytes(), live_with_a);
    tgl_array_release(a);
    /* under ASan a freed buffer would be reported here */
    assert_elements(CTX, r, (double[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 12);
    double v;
    assert_ok(CTX, tgl_array_get(CTX, t, (int64_t[]){3, 2}, &v));
    assert_double_eq(v, 11);
    assert_int_equal(tgl_memory_live_bytes(), live_with_a);
    tgl_array_release(t);
    assert_int_equal(tgl_memory_live_bytes(), live_with_a);
    tgl_array_release(r);
    assert_true(tgl_memory_live_bytes() < live_with_a);
}

static void retain_adds_an_owner_that_release_removes(void **state)
{
    int64_t n = 5;
    tgl_array *a = iota(CTX, 1, &n);
    tgl_array_retain(a);
    assert_int_equal(a->refcount, 2);
    tgl_array_release(a);
    assert_int_equal(a->refcount, 1);
    assert_double_eq(((double *)a->data)[4], 4);  /* still alive */
    tgl_array_release(a);
    tgl_array_retain(NULL);
    tgl_array_release(NULL);
}

static void live_bytes_count_storage_and_return_to_their_start(void **state)
{
    int64_t start = tgl_memory_live_bytes();
    int64_t n = 1000;
    tgl_array *a = NULL, *b = NULL;
    assert_ok(CTX, tgl_array_zeros(CTX, TGL_FLOAT64, 1, &n, &a));
    int64_t after_a = tgl_memory_live_bytes();
    assert_true(after_a >= start + 8000);
    /* 8000 bytes rounded up: to 64 bytes, and below 64 KiB to a power
     * of two (array.c's cache of small blocks) */
    assert_true(after_a <= start + 8192);
    assert_ok(CTX, tgl_array_copy(CTX, a, TGL_UINT8, &b));
    assert_true(tgl_memory_live_bytes() >= after_a + 1000);
    tgl_array_release(a);
    tgl_array_release(b);
    assert_int_equal(tgl_memory_live_bytes(), start);
}

static void failed_calls_leak_no_storage(void **state)
{
    int64_t start = tgl_memory_live_bytes();
    int64_t n = 6;
    tgl_array *a = iota(CTX, 1, &n), *out = SENTINEL;
    int64_t with_a = tgl_memory_live_bytes();
    assert_int_not_equal(tgl_array_reshape(CTX, a, 1, (int64_t[]){5}, &out), TGL_OK);
    assert_int_not_equal(tgl_array_rand(CTX, TGL_FLOAT32, 1, &n, 1, 0, &out), TGL_OK);
    assert_int_not_equal(tgl_array_copy(CTX, a, 99, &out), TGL_OK);
    assert_int_equal(tgl_memory_live_bytes(), with_a);
    tgl_array_release(a);
    assert_int_equal(tgl_memory_live_bytes(), start);
    assert_ptr_equal(out, SENTINEL);
}

static void an_impossible_allocation_fails_with_enomem(void **state)
{
    /* 2^58 float32s: the shape is legal, the memory is not there. */
    int64_t shape[2] = {(int64_t)1 << 29, (int64_t)1 << 29};
    tgl_array *a = SENTINEL;
    assert_fails(CTX, tgl_array_empty(CTX, TGL_FLOAT32, 2, shape, &a), TGL_ENOMEM,
                 "tgl_array_empty", "out of memory");
    assert_ptr_equal(a, SENTINEL);
}

/* ------------------------------------------------------------------------ */
/* assign, get, set, equal_bits                                             */
/* ------------------------------------------------------------------------ */

static void assign_copies_and_converts_into_a_strided_destination(void **state)
{
    int64_t shape[2] = {2, 3};
    tgl_array *d = NULL, *t = NULL, *s = iota(CTX, 2, (int64_t[]){3, 2});
    assert_ok(CTX, tgl_array_zeros(CTX, TGL_INT32, 2, shape, &d));
    assert_ok(CTX, tgl_array_transpose(CTX, d, NULL, &t));  /* 3x2 view */
    assert_ok(CTX, tgl_array_assign(CTX, t, s));
    /* t[i][j] = 2i + j, so d[j][i] = 2i + j */
    const int32_t want[6] = {0, 2, 4, 1, 3, 5};
    assert_memory_equal(d->data, want, sizeof want);
    tgl_array_release(d);
    tgl_array_release(t);
    tgl_array_release(s);
}

static void assign_between_overlapping_views_reads_before_writing(void **state)
{
    int64_t n = 6;
    tgl_array *a = iota(CTX, 1, &n), *lo = NULL, *hi = NULL;
    assert_ok(CTX, tgl_array_view(CTX, a, 1, (int64_t[]){5}, (int64_t[]){1}, 0, &lo));
    assert_ok(CTX, tgl_array_view(CTX, a, 1, (int64_t[]){5}, (int64_t[]){1}, 1, &hi));
    /* shift right: a[1..5] = a[0..4] */
    assert_ok(CTX, tgl_array_assign(CTX, hi, lo));
    assert_elements(CTX, a, (double[]){0, 0, 1, 2, 3, 4}, 6);
    /* shift left: a[0..4] = a[1..5] */
    assert_ok(CTX, tgl_array_assign(CTX, lo, hi));
    assert_elements(CTX, a, (double[]){0, 1, 2, 3, 4, 4}, 6);
    tgl_array_release(lo);
    tgl_array_release(hi);
    tgl_array_release(a);
}

static void assign_of_a_transpose_onto_itself_transposes_in_place(void **state)
{
    int64_t shape[2] = {3, 3};
    tgl_array *a = iota(CTX, 2, shape), *t = NULL;
    assert_ok(CTX, tgl_array_transpose(CTX, a, NULL, &t));
    assert_ok(CTX, tgl_array_assign(CTX, a, t));
    assert_elements(CTX, a, (double[]){0, 3, 6, 1, 4, 7, 2, 5, 8}, 9);
    tgl_array_release(t);
    tgl_array_release(a);
}

static void assign_of_a_reversed_view_onto_itself_reverses(void **state)
{
    int64_t n = 5;
    tgl_array *a = iota(CTX, 1, &n), *r = NULL;
    assert_ok(CTX, tgl_array_view(CTX, a, 1, (int64_t[]){5}, (int64_t[]){-1}, 4, &r));
    assert_ok(CTX, tgl_array_assign(CTX, a, r));
    assert_elements(CTX, a, (double[]){4, 3, 2, 1, 0}, 5);
    tgl_array_release(r);
    tgl_array_release(a);
}

static void assign_rejects_different_shapes(void **state)
{
    tgl_array *a = iota(CTX, 2, (int64_t[]){2, 3}), *b = iota(CTX, 2, (int64_t[]){3, 2});
    tgl_array *c = iota(CTX, 1, (int64_t[]){6});
    assert_fails(CTX, tgl_array_assign(CTX, a, b), TGL_ESHAPE, "tgl_array_assign", "shape");
    assert_fails(CTX, tgl_array_assign(CTX, a, c), TGL_ESHAPE, "tgl_array_assign", "shape");
    assert_fails(CTX, tgl_array_assign(CTX, NULL, c), TGL_EINVAL, "tgl_array_assign", "NULL");
    assert_fails(CTX, tgl_array_assign(CTX, a, NULL), TGL_EINVAL, "tgl_array_assign", "NULL");
    assert_int_equal(tgl_array_assign(NULL, a, a), TGL_EINVAL);
    /* a is unchanged */
    assert_elements(CTX, a, (double[]){0, 1, 2, 3, 4, 5}, 6);
    tgl_array_release(a);
    tgl_array_release(b);
    tgl_array_release(c);
}

static void get_and_set_use_strides_and_convert(void **state)
{
    int64_t shape[2] = {2, 3};
    tgl_array *a = NULL;
    assert_ok(CTX, tgl_array_zeros(CTX, TGL_UINT8, 2, shape, &a));
    assert_ok(CTX, tgl_array_set(CTX, a, (int64_t[]){1, 2}, 300.5));
    assert_ok(CTX, tgl_array_set(CTX, a, (int64_t[]){0, 1}, 7.9));
    assert_int_equal(((uint8_t *)a->data)[5], 255);
    assert_int_equal(((uint8_t *)a->data)[1], 7);
    double v = -1;
    assert_ok(CTX, tgl_array_get(CTX, a, (int64_t[]){1, 2}, &v));
    assert_double_eq(v, 255);
    tgl_array_release(a);
}

static void get_and_set_reject_out_of_range_indices(void **state)
{
    int64_t shape[2] = {2, 3};
    tgl_array *a = iota(CTX, 2, shape);
    double v = 12345;
    assert_fails(CTX, tgl_array_get(CTX, a, (int64_t[]){2, 0}, &v), TGL_ESHAPE, "tgl_array_get",
                 "index 2 is out of range for dimension 0 of size 2");
    assert_fails(CTX, tgl_array_get(CTX, a, (int64_t[]){0, -1}, &v), TGL_ESHAPE, "tgl_array_get",
                 "index -1 is out of range for dimension 1 of size 3");
    assert_fails(CTX, tgl_array_get(CTX, a, NULL, &v), TGL_EINVAL, "tgl_array_get",
                 "index is NULL");
    assert_fails(CTX, tgl_array_get(CTX, a, (int64_t[]){0, 0}, NULL), TGL_EINVAL,
                 "tgl_array_get", "NULL");
    assert_fails(CTX, tgl_array_get(CTX, NULL, (int64_t[]){0, 0}, &v), TGL_EINVAL,
                 "tgl_array_get", "NULL");
    assert_int_equal(tgl_array_get(NULL, a, (int64_t[]){0, 0}, &v), TGL_EINVAL);
    assert_double_eq(v, 12345);
    assert_fails(CTX, tgl_array_set(CTX, a, (int64_t[]){0, 3}, 1), TGL_ESHAPE, "tgl_array_set",
                 "index 3 is out of range for dimension 1 of size 3");
    assert_fails(CTX, tgl_array_set(CTX, a, NULL, 1), TGL_EINVAL, "tgl_array_set",
                 "index is NULL");
    assert_fails(CTX, tgl_array_set(CTX, NULL, (int64_t[]){0, 0}, 1), TGL_EINVAL,
                 "tgl_array_set", "NULL");
    assert_int_equal(tgl_array_set(NULL, a, (int64_t[]){0, 0}, 1), TGL_EINVAL);
    assert_elements(CTX, a, (double[]){0, 1, 2, 3, 4, 5}, 6);
    tgl_array_release(a);
}

static void get_of_an_empty_array_fails(void **state)
{
    tgl_array *a = NULL;
    assert_ok(CTX, tgl_array_zeros(CTX, TGL_FLOAT32, 1, (int64_t[]){0}, &a));
    double v = 1;
    assert_fails(CTX, tgl_array_get(CTX, a, (int64_t[]){0}, &v), TGL_ESHAPE, "tgl_array_get",
                 "out of range");
    assert_double_eq(v, 1);
    tgl_array_release(a);
}

static void is_contiguous_follows_the_layout(void **state)
{
    int64_t shape[3] = {2, 1, 3};
    tgl_array *a = iota(CTX, 3, shape), *v = NULL;
    assert_int_equal(tgl_array_is_contiguous(a), 1);
    /* the stride of a length-1 axis does not matter */
    assert_ok(CTX, tgl_array_view(CTX, a, 3, shape, (int64_t[]){3, 77, 1}, 0, &v));
    assert_int_equal(tgl_array_is_contiguous(v), 1);
    assert_int_equal(v->flags, TGL_ARRAY_CONTIGUOUS);
    tgl_array_release(v);
    /* a gap between rows */
    assert_ok(CTX, tgl_array_view(CTX, a, 2, (int64_t[]){2, 2}, (int64_t[]){3, 1}, 0, &v));
    assert_int_equal(tgl_array_is_contiguous(v), 0);
    assert_int_equal(v->flags, 0);
    tgl_array_release(v);
    /* reversed */
    assert_ok(CTX, tgl_array_view(CTX, a, 1, (int64_t[]){6}, (int64_t[]){-1}, 5, &v));
    assert_int_equal(tgl_array_is_contiguous(v), 0);
    tgl_array_release(v);
    tgl_array_release(a);
}

static void equal_bits_compares_dtype_shape_and_element_bits(void **state)
{
    const double x[3] = {1.0, 0.0, NAN};
    const double y[3] = {1.0, -0.0, NAN};
    tgl_array *a = from_doubles(CTX, x, 3), *b = from_doubles(CTX, x, 3), *c = from_doubles(CTX, y, 3);
    tgl_array *f = NULL, *r = NULL;
    assert_int_equal(tgl_array_equal_bits(a, b), 1);   /* NaN equals itself bitwise */
    assert_int_equal(tgl_array_equal_bits(a, a), 1);
    assert_int_equal(tgl_array_equal_bits(a, c), 0);   /* -0.0 differs from 0.0 */
    ((double *)b->data)[2] = double_of(0x7ff8000000000001ull);
    assert_int_equal(tgl_array_equal_bits(a, b), 0);   /* another NaN payload */
    assert_ok(CTX, tgl_array_copy(CTX, a, TGL_FLOAT32, &f));
    assert_int_equal(tgl_array_equal_bits(a, f), 0);   /* dtype differs */
    assert_ok(CTX, tgl_array_reshape(CTX, a, 2, (int64_t[]){1, 3}, &r));
    assert_int_equal(tgl_array_equal_bits(a, r), 0);   /* shape differs */
    assert_int_equal(tgl_array_equal_bits(a, NULL), 0);
    assert_int_equal(tgl_array_equal_bits(NULL, NULL), 0);
    tgl_array_release(a);
    tgl_array_release(b);
    tgl_array_release(c);
    tgl_array_release(f);
    tgl_array_release(r);
}

static void equal_bits_compares_strided_views_elementwise(void **state)
{
    int64_t shape[2] = {2, 3};
    tgl_array *a = iota(CTX, 2, shape), *t = NULL, *c = NULL;
    assert_ok(CTX, tgl_array_transpose(CTX, a, NULL, &t));
    assert_ok(CTX, tgl_array_copy(CTX, t, TGL_FLOAT64, &c));
    assert_int_equal(tgl_array_equal_bits(t, c), 1);
    assert_int_equal(tgl_array_equal_bits(c, t), 1);
    ((double *)c->data)[5] = 99;
    assert_int_equal(tgl_array_equal_bits(t, c), 0);
    /* empty arrays of one shape are equal */
    tgl_array *e1 = NULL, *e2 = NULL;
    assert_ok(CTX, tgl_array_empty(CTX, TGL_INT32, 2, (int64_t[]){0, 4}, &e1));
    assert_ok(CTX, tgl_array_empty(CTX, TGL_INT32, 2, (int64_t[]){0, 4}, &e2));
    assert_int_equal(tgl_array_equal_bits(e1, e2), 1);
    tgl_array_release(a);
    tgl_array_release(t);
    tgl_array_release(c);
    tgl_array_release(e1);
    tgl_array_release(e2);
}

/* ------------------------------------------------------------------------ */
/* Bad input to constructors                                                */
/* ------------------------------------------------------------------------ */

static void constructors_reject_a_null_context(void **state)
{
    (void)state;
    int64_t shape[1] = {2};
    tgl_array *a = SENTINEL, *src = NULL;
    assert_int_equal(tgl_array_empty(NULL, TGL_FLOAT32, 1, shape, &a), TGL_EINVAL);
    assert_int_equal(tgl_array_zeros(NULL, TGL_FLOAT32, 1, shape, &a), TGL_EINVAL);
    assert_int_equal(tgl_array_full(NULL, TGL_FLOAT32, 1, shape, 1, &a), TGL_EINVAL);
    assert_int_equal(tgl_array_arange(NULL, TGL_FLOAT32, 1, 2, 1, &a), TGL_EINVAL);
    assert_int_equal(tgl_array_rand(NULL, TGL_FLOAT32, 1, shape, 0, 1, &a), TGL_EINVAL);
    assert_int_equal(tgl_array_randn(NULL, TGL_FLOAT32, 1, shape, 0, 1, &a), TGL_EINVAL);
    tgl_ctx *ctx = tgl_ctx_new();
    assert_ok(ctx, tgl_array_zeros(ctx, TGL_FLOAT32, 1, shape, &src));
    tgl_ctx_free(ctx);
    assert_int_equal(tgl_array_view(NULL, src, 1, shape, (int64_t[]){1}, 0, &a), TGL_EINVAL);
    assert_int_equal(tgl_array_reshape(NULL, src, 1, shape, &a), TGL_EINVAL);
    assert_int_equal(tgl_array_transpose(NULL, src, NULL, &a), TGL_EINVAL);
    assert_int_equal(tgl_array_copy(NULL, src, TGL_FLOAT32, &a), TGL_EINVAL);
    assert_ptr_equal(a, SENTINEL);
    tgl_array_release(src);
}

/* Each constructor with its function name, called with one bad argument. */
typedef enum { K_EMPTY, K_ZEROS, K_FULL, K_RAND, K_RANDN, K_NKINDS } ctor_kind;
static const char *const ctor_name[K_NKINDS] = {"tgl_array_empty", "tgl_array_zeros",
                                                "tgl_array_full", "tgl_array_rand",
                                                "tgl_array_randn"};

static tgl_status make(tgl_ctx *ctx, ctor_kind k, int dtype, int ndim, const int64_t *shape,
                       tgl_array **out)
{
    switch (k) {
    case K_EMPTY: return tgl_array_empty(ctx, dtype, ndim, shape, out);
    case K_ZEROS: return tgl_array_zeros(ctx, dtype, ndim, shape, out);
    case K_FULL: return tgl_array_full(ctx, dtype, ndim, shape, 1.0, out);
    case K_RAND: return tgl_array_rand(ctx, dtype, ndim, shape, 0.0, 1.0, out);
    default: return tgl_array_randn(ctx, dtype, ndim, shape, 0.0, 1.0, out);
    }
}

#define assert_ctor_fails(k, dtype, ndim, shape, out, want, needle)                   \
    do {                                                                              \
        tgl_ctx_clear_error(CTX);                                                     \
        tgl_status st_ = make(CTX, k, dtype, ndim, shape, out);                       \
        const char *msg_ = tgl_ctx_error(CTX);                                        \
        size_t len_ = strlen(ctor_name[k]);                                           \
        if (st_ != (want))                                                            \
            fail_msg("%s: status %d, expected %d (%s)", ctor_name[k], (int)st_,       \
                     (int)(want), msg_);                                              \
        if (strncmp(msg_, ctor_name[k], len_) != 0 || strncmp(msg_ + len_, ": ", 2) != 0) \
            fail_msg("%s: message does not start with the name: %s", ctor_name[k], msg_); \
        if (!strstr(msg_, needle))                                                    \
            fail_msg("%s: message does not mention '%s': %s", ctor_name[k], needle, msg_); \
    } while (0)

static void constructors_reject_a_null_out(void **state)
{
    int64_t shape[1] = {2};
    for (int k = 0; k < K_NKINDS; k++)
        assert_ctor_fails(k, TGL_FLOAT32, 1, shape, NULL, TGL_EINVAL, "out is NULL");
    assert_fails(CTX, tgl_array_arange(CTX, TGL_FLOAT32, 1, 2, 1, NULL), TGL_EINVAL,
                 "tgl_array_arange", "out is NULL");
}

static void constructors_reject_negative_sizes(void **state)
{
    int64_t shape[2] = {2, -3};
    for (int k = 0; k < K_NKINDS; k++) {
        tgl_array *a = SENTINEL;
        assert_ctor_fails(k, TGL_FLOAT32, 2, shape, &a, TGL_ESHAPE,
                          "negative size -3 for dimension 1");
        assert_ptr_equal(a, SENTINEL);
    }
}

static void constructors_reject_more_than_eight_dimensions(void **state)
{
    int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    for (int k = 0; k < K_NKINDS; k++) {
        tgl_array *a = SENTINEL;
        assert_ctor_fails(k, TGL_FLOAT32, 9, shape, &a, TGL_ESHAPE, "9 dimensions");
        assert_ctor_fails(k, TGL_FLOAT32, -1, shape, &a, TGL_ESHAPE, "-1 dimensions");
        assert_ptr_equal(a, SENTINEL);
    }
    /* eight is fine */
    tgl_array *a = NULL;
    assert_ok(CTX, tgl_array_zeros(CTX, TGL_FLOAT32, 8, shape, &a));
    assert_int_equal(a->ndim, 8);
    tgl_array_release(a);
}

static void constructors_reject_an_unknown_dtype(void **state)
{
    int64_t shape[1] = {2};
    for (int k = 0; k < K_NKINDS; k++) {
        tgl_array *a = SENTINEL;
        assert_ctor_fails(k, TGL_NDTYPES, 1, shape, &a, TGL_EDTYPE, "dtype");
        assert_ctor_fails(k, -1, 1, shape, &a, TGL_EDTYPE, "dtype");
        assert_ptr_equal(a, SENTINEL);
    }
    tgl_array *a = SENTINEL;
    assert_fails(CTX, tgl_array_arange(CTX, 42, 1, 2, 1, &a), TGL_EDTYPE, "tgl_array_arange",
                 "unknown dtype 42");
    assert_ptr_equal(a, SENTINEL);
}

static void constructors_reject_shapes_whose_element_count_overflows(void **state)
{
    /* 2^32 * 2^32 * 2^32 wraps to 0 in int64 arithmetic */
    int64_t shape[3] = {(int64_t)1 << 32, (int64_t)1 << 32, (int64_t)1 << 32};
    int64_t max2[2] = {INT64_MAX, INT64_MAX};
    for (int k = 0; k < K_NKINDS; k++) {
        tgl_array *a = SENTINEL;
        assert_ctor_fails(k, TGL_FLOAT32, 3, shape, &a, TGL_ESHAPE, "too large");
        assert_ctor_fails(k, TGL_FLOAT64, 2, max2, &a, TGL_ESHAPE, "too large");
        assert_ptr_equal(a, SENTINEL);
    }
    /* a zero makes the count zero, but the other sizes must still fit (their
     * product gives the strides), as in NumPy */
    int64_t with_zero[3] = {(int64_t)1 << 40, 0, (int64_t)1 << 10};
    int64_t huge_with_zero[3] = {(int64_t)1 << 40, 0, (int64_t)1 << 40};
    tgl_array *a = NULL;
    assert_ok(CTX, tgl_array_empty(CTX, TGL_FLOAT32, 3, with_zero, &a));
    assert_int_equal(a->size, 0);
    assert_true(a->strides[0] == (int64_t)1 << 10 && a->strides[1] == (int64_t)1 << 10);
    tgl_array_release(a);
    for (int k = 0; k < K_NKINDS; k++) {
        a = SENTINEL;
        assert_ctor_fails(k, TGL_FLOAT32, 3, huge_with_zero, &a, TGL_ESHAPE, "too large");
        assert_ptr_equal(a, SENTINEL);
    }
}

static void constructors_reject_a_null_shape(void **state)
{
    for (int k = 0; k < K_NKINDS; k++) {
        tgl_array *a = SENTINEL;
        assert_ctor_fails(k, TGL_FLOAT32, 2, NULL, &a, TGL_EINVAL, "shape is NULL");
        assert_ptr_equal(a, SENTINEL);
    }
}

static void arange_rejects_a_zero_step_and_non_finite_arguments(void **state)
{
    tgl_array *a = SENTINEL;
    assert_fails(CTX, tgl_array_arange(CTX, TGL_FLOAT32, 1, 5, 0, &a), TGL_EINVAL,
                 "tgl_array_arange", "step must not be zero");
    assert_fails(CTX, tgl_array_arange(CTX, TGL_FLOAT32, NAN, 5, 1, &a), TGL_EINVAL,
                 "tgl_array_arange", "finite");
    assert_fails(CTX, tgl_array_arange(CTX, TGL_FLOAT32, 1, INFINITY, 1, &a), TGL_EINVAL,
                 "tgl_array_arange", "finite");
    assert_fails(CTX, tgl_array_arange(CTX, TGL_FLOAT32, 1, 5, -INFINITY, &a), TGL_EINVAL,
                 "tgl_array_arange", "finite");
    assert_ptr_equal(a, SENTINEL);
}

static void arange_rejects_ranges_with_too_many_elements(void **state)
{
    tgl_array *a = SENTINEL;
    assert_fails(CTX, tgl_array_arange(CTX, TGL_FLOAT64, 0, 1e300, 1, &a), TGL_ESHAPE,
                 "tgl_array_arange", "too many elements");
    /* stop - start overflows to infinity */
    assert_fails(CTX, tgl_array_arange(CTX, TGL_FLOAT64, -1.5e308, 1.5e308, 1e-300, &a),
                 TGL_ESHAPE, "tgl_array_arange", "too many elements");
    assert_fails(CTX, tgl_array_arange(CTX, TGL_FLOAT64, 0, 1, 1e-300, &a), TGL_ESHAPE,
                 "tgl_array_arange", "too many elements");
    assert_ptr_equal(a, SENTINEL);
}

static void rand_rejects_bad_bounds_and_integer_dtypes(void **state)
{
    int64_t shape[1] = {4};
    tgl_array *a = SENTINEL;
    assert_fails(CTX, tgl_array_rand(CTX, TGL_FLOAT32, 1, shape, 1, 1, &a), TGL_EINVAL,
                 "tgl_array_rand", "lower bound 1 is not below the upper bound 1");
    assert_fails(CTX, tgl_array_rand(CTX, TGL_FLOAT64, 1, shape, 2, 1, &a), TGL_EINVAL,
                 "tgl_array_rand", "not below");
    assert_fails(CTX, tgl_array_rand(CTX, TGL_FLOAT64, 1, shape, NAN, 1, &a), TGL_EINVAL,
                 "tgl_array_rand", "finite");
    assert_fails(CTX, tgl_array_rand(CTX, TGL_FLOAT64, 1, shape, 0, INFINITY, &a), TGL_EINVAL,
                 "tgl_array_rand", "finite");
    for (int d = TGL_INT32; d < TGL_NDTYPES; d++)
        assert_fails(CTX, tgl_array_rand(CTX, d, 1, shape, 0, 1, &a), TGL_EDTYPE,
                     "tgl_array_rand", "dtype must be float32 or float64");
    assert_ptr_equal(a, SENTINEL);
    uint64_t seed, offset;
    tgl_ctx_rng_state(CTX, &seed, &offset);
    assert_true(offset == 0);  /* failed draws use no counters */
}

static void rand_rejects_a_range_wider_than_a_double(void **state)
{
    int64_t shape[1] = {4};
    tgl_array *a = SENTINEL;
    /* hi - lo overflows to infinity: every element would be inf */
    assert_fails(CTX, tgl_array_rand(CTX, TGL_FLOAT64, 1, shape, -1e308, 1e308, &a), TGL_EINVAL,
                 "tgl_array_rand", "range");
    assert_ptr_equal(a, SENTINEL);
}

static void rand_float32_rejects_bounds_that_round_to_one_float(void **state)
{
    int64_t shape[1] = {4};
    tgl_array *a = SENTINEL;
    /* lo < hi as doubles, but both are 1.0f: [lo, hi) has no float32 in it */
    assert_fails(CTX, tgl_array_rand(CTX, TGL_FLOAT32, 1, shape, 1.0, 1.0 + 1e-12, &a),
                 TGL_EINVAL, "tgl_array_rand", "float32");
    assert_ptr_equal(a, SENTINEL);
}

static void randn_rejects_a_negative_std_and_integer_dtypes(void **state)
{
    int64_t shape[1] = {4};
    tgl_array *a = SENTINEL;
    assert_fails(CTX, tgl_array_randn(CTX, TGL_FLOAT32, 1, shape, 0, -1, &a), TGL_EINVAL,
                 "tgl_array_randn", "standard deviation -1 is negative");
    assert_fails(CTX, tgl_array_randn(CTX, TGL_FLOAT32, 1, shape, NAN, 1, &a), TGL_EINVAL,
                 "tgl_array_randn", "finite");
    assert_fails(CTX, tgl_array_randn(CTX, TGL_FLOAT32, 1, shape, 0, INFINITY, &a), TGL_EINVAL,
                 "tgl_array_randn", "finite");
    assert_fails(CTX, tgl_array_randn(CTX, TGL_INT64, 1, shape, 0, 1, &a), TGL_EDTYPE,
                 "tgl_array_randn", "dtype must be float32 or float64");
    assert_fails(CTX, tgl_array_randn(CTX, 77, 1, shape, 0, 1, &a), TGL_EDTYPE,
                 "tgl_array_randn", "dtype");
    assert_ptr_equal(a, SENTINEL);
}

static void randn_with_zero_std_gives_the_mean(void **state)
{
    int64_t shape[1] = {100};
    tgl_array *a = NULL;
    assert_ok(CTX, tgl_array_randn(CTX, TGL_FLOAT64, 1, shape, 3.25, 0, &a));
    for (int i = 0; i < 100; i++)
        assert_double_eq(((double *)a->data)[i], 3.25);
    tgl_array_release(a);
}

static void view_copy_and_transpose_reject_null_arguments(void **state)
{
    int64_t n = 4;
    tgl_array *a = iota(CTX, 1, &n), *v = SENTINEL;
    assert_fails(CTX, tgl_array_view(CTX, NULL, 1, &n, (int64_t[]){1}, 0, &v), TGL_EINVAL,
                 "tgl_array_view", "NULL");
    assert_fails(CTX, tgl_array_view(CTX, a, 1, &n, (int64_t[]){1}, 0, NULL), TGL_EINVAL,
                 "tgl_array_view", "NULL");
    assert_fails(CTX, tgl_array_view(CTX, a, 1, &n, NULL, 0, &v), TGL_EINVAL, "tgl_array_view",
                 "strides is NULL");
    assert_fails(CTX, tgl_array_view(CTX, a, 1, NULL, (int64_t[]){1}, 0, &v), TGL_EINVAL,
                 "tgl_array_view", "shape is NULL");
    assert_fails(CTX, tgl_array_view(CTX, a, 9, (int64_t[9]){1}, (int64_t[9]){1}, 0, &v),
                 TGL_ESHAPE, "tgl_array_view", "9 dimensions");
    assert_fails(CTX, tgl_array_view(CTX, a, 1, (int64_t[]){-2}, (int64_t[]){1}, 0, &v),
                 TGL_ESHAPE, "tgl_array_view", "negative size -2");
    assert_fails(CTX, tgl_array_copy(CTX, NULL, TGL_FLOAT32, &v), TGL_EINVAL, "tgl_array_copy",
                 "NULL");
    assert_fails(CTX, tgl_array_copy(CTX, a, TGL_FLOAT32, NULL), TGL_EINVAL, "tgl_array_copy",
                 "NULL");
    assert_fails(CTX, tgl_array_copy(CTX, a, -3, &v), TGL_EDTYPE, "tgl_array_copy",
                 "unknown dtype -3");
    assert_ptr_equal(v, SENTINEL);
    tgl_array_release(a);
}

/* ------------------------------------------------------------------------ */
/* The random generator                                                     */
/* ------------------------------------------------------------------------ */

/* Philox4x32-10 written from the Random123 specification: a full 128-bit
 * counter and 64-bit key.  Checked against the published vectors below, it
 * is the oracle for what the engine draws. */
static void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* The engine's word stream: block offset+i under key seed. */
static void engine_words(uint64_t seed, uint64_t block, uint32_t w[4])
{
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), 0, 0};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    ref_philox4x32_10(ctr, key, w);
}

/* A double in [0, 1) from the top 32 bits (hi) and 21 bits of lo. */
static double ref_unit53(uint32_t hi, uint32_t lo)
{
    return (double)(((uint64_t)hi << 21) | (lo >> 11)) * 0x1p-53;
}

static void philox_reference_matches_the_random123_known_answers(void **state)
{
    (void)state;
    static const struct { uint32_t ctr[4], key[2], want[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        ref_philox4x32_10(kat[i].ctr, kat[i].key, out);
        for (int j = 0; j < 4; j++)
            if (out[j] != kat[i].want[j])
                fail_msg("vector %zu word %d: %08x, expected %08x", i, j, out[j],
                         kat[i].want[j]);
    }
}

static void rand_draws_the_published_philox_block_for_seed_zero(void **state)
{
    /* Random123 KAT: counter {0,0,0,0}, key {0,0} gives these words; the
     * first float64 uniform of seed 0 is made from words 0 and 1. */
    int64_t shape[1] = {1};
    tgl_array *a = NULL;
    tgl_ctx_manual_seed(CTX, 0);
    assert_ok(CTX, tgl_array_rand(CTX, TGL_FLOAT64, 1, shape, 0, 1, &a));
    assert_double_eq(((double *)a->data)[0], ref_unit53(0x6627e8d5u, 0xe169c58du));
    tgl_array_release(a);
}

static void rand_follows_the_philox_stream_for_any_seed_and_offset(void **state)
{
    static const uint64_t seeds[] = {0, 1, 42, 0xdeadbeefcafef00dull, UINT64_MAX};
    /* 2^32 - 2 makes the counter carry into its second word mid-draw */
    static const uint64_t offsets[] = {0, 7, 0xfffffffeull, 0x123456789abull};
    int64_t shape[1] = {5};
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
        for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++) {
            tgl_array *u = NULL, *n = NULL;
            tgl_ctx_set_rng_state(CTX, seeds[s], offsets[o]);
            assert_ok(CTX, tgl_array_rand(CTX, TGL_FLOAT64, 1, shape, -2, 6, &u));
            tgl_ctx_set_rng_state(CTX, seeds[s], offsets[o]);
            assert_ok(CTX, tgl_array_randn(CTX, TGL_FLOAT64, 1, shape, 1, 3, &n));
            for (int64_t i = 0; i < 5; i++) {
                uint32_t w[4];
                engine_words(seeds[s], offsets[o] + (uint64_t)i, w);
                double uw = -2 + 8 * ref_unit53(w[0], w[1]);
                double z = sqrt(-2.0 * log(1.0 - ref_unit53(w[0], w[1]))) *
                           cos(2.0 * M_PI * ref_unit53(w[2], w[3]));
                double nw = 1 + 3 * z;
                if (((double *)u->data)[i] != uw)
                    fail_msg("seed %llx offset %llx: uniform %lld is %.17g, expected %.17g",
                             (unsigned long long)seeds[s], (unsigned long long)offsets[o],
                             (long long)i, ((double *)u->data)[i], uw);
                if (fabs(((double *)n->data)[i] - nw) > 1e-12 * (1 + fabs(nw)))
                    fail_msg("seed %llx offset %llx: normal %lld is %.17g, expected %.17g",
                             (unsigned long long)seeds[s], (unsigned long long)offsets[o],
                             (long long)i, ((double *)n->data)[i], nw);
            }
            tgl_array_release(u);
            tgl_array_release(n);
        }
    }
}

static void draws_advance_the_offset_by_the_element_count(void **state)
{
    int64_t shape[2] = {3, 7};
    tgl_array *a = NULL, *b = NULL;
    tgl_ctx_manual_seed(CTX, 5);
    assert_ok(CTX, tgl_array_rand(CTX, TGL_FLOAT32, 2, shape, 0, 1, &a));
    assert_ok(CTX, tgl_array_randn(CTX, TGL_FLOAT64, 1, shape, 0, 1, &b));
    uint64_t seed, offset;
    tgl_ctx_rng_state(CTX, &seed, &offset);
    assert_true(seed == 5 && offset == 21 + 3);
    tgl_array_release(a);
    tgl_array_release(b);
}

static void element_i_depends_only_on_seed_and_offset_plus_i(void **state)
{
    int64_t ten = 10, six = 6;
    tgl_array *all = NULL, *tail = NULL;
    tgl_ctx_manual_seed(CTX, 77);
    assert_ok(CTX, tgl_array_randn(CTX, TGL_FLOAT64, 1, &ten, 0, 1, &all));
    tgl_ctx_set_rng_state(CTX, 77, 4);
    assert_ok(CTX, tgl_array_randn(CTX, TGL_FLOAT64, 1, &six, 0, 1, &tail));
    assert_memory_equal(tail->data, (double *)all->data + 4, 6 * sizeof(double));
    tgl_array_release(all);
    tgl_array_release(tail);
}

static void the_same_seed_gives_identical_bits(void **state)
{
    int64_t shape[2] = {17, 5};
    for (int d = TGL_FLOAT32; d <= TGL_FLOAT64; d++) {
        tgl_array *a = NULL, *b = NULL, *c = NULL, *e = NULL;
        tgl_ctx_manual_seed(CTX, 2024);
        assert_ok(CTX, tgl_array_rand(CTX, d, 2, shape, -1, 1, &a));
        assert_ok(CTX, tgl_array_randn(CTX, d, 2, shape, 0, 1, &c));
        tgl_ctx_manual_seed(CTX, 2024);
        assert_ok(CTX, tgl_array_rand(CTX, d, 2, shape, -1, 1, &b));
        assert_ok(CTX, tgl_array_randn(CTX, d, 2, shape, 0, 1, &e));
        assert_int_equal(tgl_array_equal_bits(a, b), 1);
        assert_int_equal(tgl_array_equal_bits(c, e), 1);
        /* a second context with the same seed draws the same numbers */
        tgl_ctx *other = tgl_ctx_new();
        tgl_array *o = NULL;
        tgl_ctx_manual_seed(other, 2024);
        assert_ok(other, tgl_array_rand(other, d, 2, shape, -1, 1, &o));
        assert_int_equal(tgl_array_equal_bits(a, o), 1);
        tgl_ctx_free(other);
        tgl_array_release(o);
        tgl_array_release(a);
        tgl_array_release(b);
        tgl_array_release(c);
        tgl_array_release(e);
    }
}

static int count_equal_doubles(const tgl_array *a, const tgl_array *b)
{
    int same = 0;
    for (int64_t i = 0; i < a->size; i++)
        same += ((double *)a->data)[i] == ((double *)b->data)[i];
    return same;
}

static void different_seeds_and_consecutive_draws_differ(void **state)
{
    int64_t shape[1] = {1000};
    tgl_array *a = NULL, *b = NULL, *c = NULL;
    tgl_ctx_manual_seed(CTX, 1);
    assert_ok(CTX, tgl_array_rand(CTX, TGL_FLOAT64, 1, shape, 0, 1, &a));
    assert_ok(CTX, tgl_array_rand(CTX, TGL_FLOAT64, 1, shape, 0, 1, &c));
    tgl_ctx_manual_seed(CTX, 2);
    assert_ok(CTX, tgl_array_rand(CTX, TGL_FLOAT64, 1, shape, 0, 1, &b));
    assert_int_equal(count_equal_doubles(a, b), 0);
    assert_int_equal(count_equal_doubles(a, c), 0);
    tgl_array_release(a);
    tgl_array_release(b);
    tgl_array_release(c);
}

static void rng_state_round_trip_reproduces_a_draw(void **state)
{
    int64_t shape[2] = {4, 4};
    tgl_array *first = NULL, *a = NULL, *b = NULL;
    tgl_ctx_manual_seed(CTX, 9);
    assert_ok(CTX, tgl_array_randn(CTX, TGL_FLOAT32, 2, shape, 0, 1, &first));
    uint64_t seed, offset;
    tgl_ctx_rng_state(CTX, &seed, &offset);
    assert_ok(CTX, tgl_array_randn(CTX, TGL_FLOAT32, 2, shape, 0, 1, &a));
    tgl_ctx_manual_seed(CTX, 1234);  /* wander off */
    tgl_ctx_set_rng_state(CTX, seed, offset);
    assert_ok(CTX, tgl_array_randn(CTX, TGL_FLOAT32, 2, shape, 0, 1, &b));
    assert_int_equal(tgl_array_equal_bits(a, b), 1);
    assert_int_equal(tgl_array_equal_bits(first, b), 0);
    tgl_array_release(first);
    tgl_array_release(a);
    tgl_array_release(b);
}

static void float32_randn_is_float64_randn_rounded(void **state)
{
    int64_t shape[1] = {10000};
    tgl_array *f = NULL, *d = NULL;
    tgl_ctx_manual_seed(CTX, 31337);
    assert_ok(CTX, tgl_array_randn(CTX, TGL_FLOAT32, 1, shape, 0.5, 2, &f));
    tgl_ctx_manual_seed(CTX, 31337);
    assert_ok(CTX, tgl_array_randn(CTX, TGL_FLOAT64, 1, shape, 0.5, 2, &d));
    for (int64_t i = 0; i < shape[0]; i++)
        if (((float *)f->data)[i] != (float)((double *)d->data)[i])
            fail_msg("element %lld: %.9g vs %.17g", (long long)i, ((float *)f->data)[i],
                     ((double *)d->data)[i]);
    tgl_array_release(f);
    tgl_array_release(d);
}

static void rand_float32_stays_in_the_half_open_interval(void **state)
{
    const int64_t n = 1000000;
    struct { double lo, hi; } cases[] = {
        {0, 1},
        {-3, 5},
        /* hi small: hi - lo is one float32 ulp, so half of the doubles drawn
         * round up to hi and must be pulled back to lo */
        {1.0, (double)nextafterf(1.0f, 2.0f)},
        {0, 1e-38},
        {-1e-30, 1e-30},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tgl_array *a = NULL;
        tgl_ctx_manual_seed(CTX, 100 + c);
        assert_ok(CTX, tgl_array_rand(CTX, TGL_FLOAT32, 1, &n, cases[c].lo, cases[c].hi, &a));
        const float *p = a->data, lo = (float)cases[c].lo, hi = (float)cases[c].hi;
        float mn = hi, mx = lo;
        for (int64_t i = 0; i < n; i++) {
            if (!(p[i] >= lo && p[i] < hi))
                fail_msg("case %zu: element %lld = %.9g is outside [%.9g, %.9g)", c,
                         (long long)i, p[i], lo, hi);
            if (p[i] < mn) mn = p[i];
            if (p[i] > mx) mx = p[i];
        }
        /* the draws cover the range */
        if (c < 2)
            assert_true(mn < lo + 1e-4 * (hi - lo) && mx > hi - 1e-4 * (hi - lo));
        tgl_array_release(a);
    }
}

static void rand_float64_is_uniform_in_the_half_open_interval(void **state)
{
    const int64_t n = 1000000;
    tgl_array *a = NULL;
    tgl_ctx_manual_seed(CTX, 7);
    assert_ok(CTX, tgl_array_rand(CTX, TGL_FLOAT64, 1, &n, 2, 4, &a));
    const double *p = a->data;
    double sum = 0, sq = 0;
    int64_t bins[10] = {0};
    for (int64_t i = 0; i < n; i++) {
        assert_true(p[i] >= 2 && p[i] < 4);
        sum += p[i];
        sq += (p[i] - 3) * (p[i] - 3);
        bins[(int)((p[i] - 2) * 5)]++;
    }
    /* mean 3, variance (4-2)^2/12 = 1/3; standard errors ~0.0006 and ~0.0003 */
    assert_double_near(sum / n, 3.0, 0.005);
    assert_double_near(sq / n, 1.0 / 3.0, 0.003);
    for (int b = 0; b < 10; b++)
        assert_true(bins[b] > 99000 && bins[b] < 101000);  /* 100000 +- 3 sigma */
    tgl_array_release(a);
}

static void randn_has_the_requested_mean_and_std(void **state)
{
    const int64_t n = 1000000;
    struct { int dtype; double mean, std; } cases[] = {
        {TGL_FLOAT64, 0, 1}, {TGL_FLOAT32, 0, 1}, {TGL_FLOAT64, -5, 0.5},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tgl_array *a = NULL, *d = NULL;
        tgl_ctx_manual_seed(CTX, 11 + c);
        assert_ok(CTX, tgl_array_randn(CTX, cases[c].dtype, 1, &n, cases[c].mean, cases[c].std,
                                       &a));
        assert_ok(CTX, tgl_array_copy(CTX, a, TGL_FLOAT64, &d));
        const double *p = d->data;
        double sum = 0, sq = 0;
        int64_t within1 = 0, finite = 0;
        for (int64_t i = 0; i < n; i++) {
            sum += p[i];
            finite += isfinite(p[i]) != 0;
        }
        double mean = sum / n;
        for (int64_t i = 0; i < n; i++) {
            sq += (p[i] - mean) * (p[i] - mean);
            within1 += fabs(p[i] - cases[c].mean) < cases[c].std;
        }
        double sd = sqrt(sq / (n - 1));
        assert_int_equal(finite, n);
        /* standard errors: mean 0.001 std, std 0.0007 std */
        assert_double_near((mean - cases[c].mean) / cases[c].std, 0, 0.01);
        assert_double_near(sd / cases[c].std, 1, 0.01);
        /* 68.27% within one std; the standard error is 0.05% */
        assert_double_near((double)within1 / n, 0.682689, 0.003);
        tgl_array_release(a);
        tgl_array_release(d);
    }
}

/* ------------------------------------------------------------------------ */
/* devices                                                                  */
/* ------------------------------------------------------------------------ */

/* The descriptor's layout is what tgl.h documents (the Lua layer mirrors it). */
static void array_layout_is_the_documented_abi(void **state)
{
    (void)state;
    assert_int_equal(offsetof(tgl_array, storage), 160);
    assert_int_equal(offsetof(tgl_array, device), 168);
    assert_int_equal(offsetof(tgl_array, reserved), 172);
    assert_int_equal(sizeof(tgl_array), 176);
    assert_string_equal(tgl_device_name(TGL_DEVICE_CPU), "cpu");
    assert_string_equal(tgl_device_name(TGL_DEVICE_CUDA), "cuda");
    assert_null(tgl_device_name(TGL_NDEVICES));
    assert_null(tgl_device_name(-1));
}

/* Constructors, views and copies all live in cpu memory. */
static void arrays_views_and_copies_are_cpu_arrays(void **state)
{
    int64_t shape[2] = {2, 3};
    tgl_array *a = NULL, *t = NULL, *c = NULL, *f = NULL;
    assert_ok(CTX, tgl_array_zeros(CTX, TGL_FLOAT64, 2, shape, &a));
    assert_ok(CTX, tgl_array_transpose(CTX, a, NULL, &t));
    assert_ok(CTX, tgl_array_copy(CTX, t, TGL_INT32, &c));
    assert_ok(CTX, tgl_array_full(CTX, TGL_UINT8, 2, shape, 7, &f));
    assert_int_equal(a->device, TGL_DEVICE_CPU);
    assert_int_equal(t->device, TGL_DEVICE_CPU);
    assert_int_equal(c->device, TGL_DEVICE_CPU);
    assert_int_equal(f->device, TGL_DEVICE_CPU);
    assert_int_equal(a->reserved, 0);
    tgl_array_release(a);
    tgl_array_release(t);
    tgl_array_release(c);
    tgl_array_release(f);
}

/* An array on a device with no backend (here a descriptor relabelled by
 * hand with a device number no build has): element access and copies
 * refuse it with a message, and nothing reads its memory on the host. */
static void arrays_on_a_device_without_a_backend_are_refused(void **state)
{
    int64_t shape[1] = {4}, idx[1] = {1};
    tgl_array *a = NULL, *h = NULL, *c = (tgl_array *)0x1;
    double v = 0;
    assert_ok(CTX, tgl_array_zeros(CTX, TGL_FLOAT32, 1, shape, &a));
    assert_ok(CTX, tgl_array_zeros(CTX, TGL_FLOAT32, 1, shape, &h));
    a->device = TGL_NDEVICES + 5; /* the storage itself stays cpu memory */
    assert_fails(CTX, tgl_array_get(CTX, a, idx, &v), TGL_EINVAL, "tgl_array_get", "device");
    assert_fails(CTX, tgl_array_set(CTX, a, idx, 1), TGL_EINVAL, "tgl_array_set", "device");
    assert_fails(CTX, tgl_array_copy(CTX, a, TGL_FLOAT32, &c), TGL_EINVAL, "tgl_array_copy",
                 "device");
    assert_true(c == (tgl_array *)0x1);
    assert_fails(CTX, tgl_array_assign(CTX, h, a), TGL_EINVAL, "tgl_array_assign", "device");
    assert_fails(CTX, tgl_npy_save(CTX, "never-written.npy", a), TGL_EINVAL, "tgl_npy_save",
                 "cpu array");
    assert_int_equal(tgl_array_equal_bits(a, a), 0);
    a->device = TGL_DEVICE_CPU;
    assert_int_equal(tgl_array_equal_bits(a, a), 1);
    tgl_array_release(a);
    tgl_array_release(h);
}

/* ------------------------------------------------------------------------ */

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* context */
        T(ctx_new_starts_with_an_empty_message_and_seed_zero),
        T(ctx_set_error_formats_the_message_and_returns_the_status),
        T(ctx_set_error_truncates_a_long_message),
        T(ctx_error_functions_and_free_tolerate_a_null_context),
        T(ctx_manual_seed_sets_the_seed_and_restarts_the_counter),
        T(ctx_set_rng_state_restores_a_saved_state),
        T(ctx_interrupt_flag_stops_allocations_until_cleared),
        T(arrays_stay_valid_after_their_context_is_freed),
        T(a_later_failure_replaces_the_message_and_success_keeps_it),
        /* dtypes */
        T(dtype_names_and_sizes_follow_the_abi_order),
        T(dtype_invalid_ids_have_no_name_and_size_zero),
        T(dtype_promote_takes_the_later_in_bool_uint8_int32_int64_float32_float64),
        T(dtype_from_name_accepts_the_torch_aliases),
        T(dtype_from_name_rejects_unknown_names),
        /* devices */
        T(array_layout_is_the_documented_abi),
        T(arrays_views_and_copies_are_cpu_arrays),
        T(arrays_on_a_device_without_a_backend_are_refused),
        /* creation */
        T(empty_gives_a_contiguous_descriptor_with_c_strides),
        T(empty_with_ndim_zero_is_a_scalar_of_one_element),
        T(zero_sized_dimensions_give_an_empty_array),
        T(data_is_64_byte_aligned_for_every_dtype_and_size),
        T(zeros_are_zero_bytes_for_every_dtype),
        T(full_converts_the_value_to_each_dtype),
        T(full_int64_saturates_at_the_extremes),
        T(full_keeps_the_bits_of_negative_zero),
        T(arange_includes_stop_when_reached_like_lua_for),
        T(arange_stops_before_an_unreached_stop),
        T(arange_counts_down_with_a_negative_step),
        T(arange_is_empty_when_the_step_goes_the_wrong_way),
        T(arange_with_start_equal_to_stop_has_one_element),
        T(arange_converts_to_the_dtype),
        /* conversions */
        T(copy_from_float_saturates_integers_truncates_and_maps_nan_to_zero),
        T(copy_from_int64_narrows_by_wrapping),
        T(copy_from_int32_narrows_by_wrapping_like_int64),
        T(copy_widening_integers_is_exact),
        T(copy_of_int64_keeps_every_bit_of_large_values),
        T(copy_of_int64_to_float32_rounds_once),
        T(copy_of_bool_gives_zero_and_one),
        T(copy_to_the_same_float_dtype_keeps_nan_payloads),
        T(copy_of_a_strided_view_is_contiguous_in_c_order),
        /* views */
        T(transpose_shares_storage_writes_show_through),
        T(transpose_with_a_permutation_moves_shapes_and_strides),
        T(transpose_of_a_scalar_and_a_vector_is_the_same_layout),
        T(view_reads_with_the_given_shape_strides_and_offset),
        T(view_with_zero_strides_repeats_one_element),
        T(view_rejects_elements_outside_the_storage),
        T(view_bounds_check_survives_overflowing_strides),
        T(view_with_no_elements_needs_no_storage),
        T(reshape_of_a_contiguous_array_is_a_view),
        T(reshape_of_an_offset_view_keeps_the_offset),
        T(reshape_infers_one_minus_one_dimension),
        T(reshape_of_a_non_contiguous_array_copies),
        T(reshape_to_a_scalar_and_of_empty_arrays),
        T(reshape_rejects_shapes_that_do_not_fit),
        T(transpose_rejects_a_bad_permutation),
        /* ownership and memory */
        T(a_view_keeps_the_storage_alive_after_the_original_goes),
        T(retain_adds_an_owner_that_release_removes),
        T(live_bytes_count_storage_and_return_to_their_start),
        T(failed_calls_leak_no_storage),
        T(an_impossible_allocation_fails_with_enomem),
        /* assign, get, set, equal_bits */
        T(assign_copies_and_converts_into_a_strided_destination),
        T(assign_between_overlapping_views_reads_before_writing),
        T(assign_of_a_transpose_onto_itself_transposes_in_place),
        T(assign_of_a_reversed_view_onto_itself_reverses),
        T(assign_rejects_different_shapes),
        T(get_and_set_use_strides_and_convert),
        T(get_and_set_reject_out_of_range_indices),
        T(get_of_an_empty_array_fails),
        T(is_contiguous_follows_the_layout),
        T(equal_bits_compares_dtype_shape_and_element_bits),
        T(equal_bits_compares_strided_views_elementwise),
        /* bad input */
        T(constructors_reject_a_null_context),
        T(constructors_reject_a_null_out),
        T(constructors_reject_negative_sizes),
        T(constructors_reject_more_than_eight_dimensions),
        T(constructors_reject_an_unknown_dtype),
        T(constructors_reject_shapes_whose_element_count_overflows),
        T(constructors_reject_a_null_shape),
        T(arange_rejects_a_zero_step_and_non_finite_arguments),
        T(arange_rejects_ranges_with_too_many_elements),
        T(rand_rejects_bad_bounds_and_integer_dtypes),
        T(rand_rejects_a_range_wider_than_a_double),
        T(rand_float32_rejects_bounds_that_round_to_one_float),
        T(randn_rejects_a_negative_std_and_integer_dtypes),
        T(randn_with_zero_std_gives_the_mean),
        T(view_copy_and_transpose_reject_null_arguments),
        /* random generator */
        T(philox_reference_matches_the_random123_known_answers),
        T(rand_draws_the_published_philox_block_for_seed_zero),
        T(rand_follows_the_philox_stream_for_any_seed_and_offset),
        T(draws_advance_the_offset_by_the_element_count),
        T(element_i_depends_only_on_seed_and_offset_plus_i),
        T(the_same_seed_gives_identical_bits),
        T(different_seeds_and_consecutive_draws_differ),
        T(rng_state_round_trip_reproduces_a_draw),
        T(float32_randn_is_float64_randn_rounded),
        T(rand_float32_stays_in_the_half_open_interval),
        T(rand_float64_is_uniform_in_the_half_open_interval),
        T(randn_has_the_requested_mean_and_std),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
