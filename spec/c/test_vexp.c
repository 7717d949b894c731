/*
 * test_vexp.c — the vectorised float32 exponentials (src/cpu/kernels/vexp.h)
 * against libm's expf: within 2 ulp over [-80, 0] for every row length
 * around the 16-lane blocking (so the vector body and the scalar tail are
 * both checked), sums against a double reference, and the special rows:
 * NaN stays NaN, -inf and values below -87 give 0, an infinite max gives
 * 1 where x equals it; the row max (NaN wins) for every length to 70;
 * and every build the processor runs (AVX-512, AVX2, base) bit for bit
 * against the base one.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <cmocka.h>

#include "cpu/kernels/vexp.h"

static double ulps(float got, float want)
{
    if (got == want)
        return 0;
    return fabs((double)got - want) / (double)(nextafterf(want, INFINITY) - want);
}

static void matches_expf_over_rows_of_every_length(void **state)
{
    (void)state;
    float x[300], out[300];
    for (int n = 0; n <= 300; n += (n < 40 ? 1 : 37)) {
        for (int j = 0; j < n; j++)
            x[j] = -80.0f * (float)((j * 7919) % 301) / 300.0f + 0.5f;
        double want = 0;
        for (int j = 0; j < n; j++)
            want += expf(x[j] - 0.5f);
        double sum = tgl_vexp_shifted_f32(x, 0.5f, out, n);
        assert_true(fabs(sum - want) <= 1e-6 * (want + 1));
        assert_true(fabs(tgl_vexp_sum_f32(x, 0.5f, n) - sum) <= 1e-12 * (sum + 1));
        for (int j = 0; j < n; j++)
            assert_true(ulps(out[j], expf(x[j] - 0.5f)) <= 2);
    }
}

static void special_values(void **state)
{
    (void)state;
    float x[20], out[20];
    for (int j = 0; j < 20; j++)
        x[j] = -1.0f;
    x[3] = NAN;
    x[5] = -INFINITY;
    x[17] = -88.0f;
    x[18] = -200.0f;
    tgl_vexp_shifted_f32(x, 0.0f, out, 20);
    assert_true(isnan(out[3]));
    assert_true(out[5] == 0 && out[17] == 0 && out[18] == 0);
    assert_true(ulps(out[0], expf(-1.0f)) <= 2 && ulps(out[19], expf(-1.0f)) <= 2);
    float inf[3] = {INFINITY, 1.0f, INFINITY};
    assert_true(tgl_vexp_shifted_f32(inf, INFINITY, out, 3) == 2.0);
    assert_true(out[0] == 1 && out[1] == 0 && out[2] == 1);
    float ninf[2] = {-INFINITY, -INFINITY};
    assert_true(tgl_vexp_sum_f32(ninf, -INFINITY, 2) == 2.0);
}

static void max_of_rows(void **state)
{
    (void)state;
    float x[70];
    for (int n = 0; n <= 70; n++) {
        float want = -INFINITY;
        for (int j = 0; j < n; j++) {
            x[j] = (float)((j * 37) % 71) - 35.0f;
            want = x[j] > want ? x[j] : want;
        }
        assert_true(tgl_vmax_f32(x, n) == want);
        if (n > 0) {
            x[n - 1] = NAN;
            assert_true(isnan(tgl_vmax_f32(x, n)));
            x[n - 1] = -INFINITY;
            x[0] = INFINITY;
            assert_true(tgl_vmax_f32(x, n) == INFINITY);
        }
    }
}

/* Every build this processor runs gives the same bits as the baseline's
 * (vexp.c: blocks of 16, 16 double lanes, no contraction), on rows of
 * every length; and each passes the checks above. */
static void every_build_gives_the_same_bits(void **state)
{
    (void)state;
    static const char *isas[] = {"base", "avx2", "avx512f"};
    const char *was = tgl_vexp_isa();
    enum { N = 700 };
    float x[N], want[N], got[N];
    for (int j = 0; j < N; j++)
        x[j] = 6.0f * sinf((float)j * 0.37f) - 0.01f * (float)j;
    int ran = 0;
    for (int i = 0; i < 3; i++) {
        if (!tgl_vexp_use(isas[i]))
            continue;
        ran++;
        assert_string_equal(tgl_vexp_isa(), isas[i]);
        matches_expf_over_rows_of_every_length(NULL);
        special_values(NULL);
        max_of_rows(NULL);
        for (int n = 16; n <= N; n += 41) {
            float m = tgl_vmax_f32(x, n);
            assert_true(tgl_vexp_use("base"));
            double ws = tgl_vexp_shifted_f32(x, m, want, n);
            assert_true(tgl_vmax_f32(x, n) == m);
            assert_true(tgl_vexp_use(isas[i]));
            double gs = tgl_vexp_shifted_f32(x, m, got, n);
            assert_true(gs == ws);
            assert_true(tgl_vexp_sum_f32(x, m, n) == ws);
            assert_memory_equal(got, want, sizeof(float) * (size_t)n);
        }
    }
    assert_true(ran >= 1);
    assert_true(!tgl_vexp_use("sse9"));
    assert_true(tgl_vexp_use(was));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_expf_over_rows_of_every_length),
        cmocka_unit_test(special_values),
        cmocka_unit_test(max_of_rows),
        cmocka_unit_test(every_build_gives_the_same_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
