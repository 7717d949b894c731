/*
 * test_tune.c — the calibration record of src/engine/tune.c: measured
 * values written and read back ("measured" then "cached", nothing
 * measured twice); a corrupt, truncated or foreign (another CPU's) record
 * ignored and measured again, then rewritten whole; unknown names
 * skipped; a tunable the record lacks measured alone; no directory: the
 * fallbacks, nothing measured; an unwritable one: measured for this
 * process only; overrides (TGL_TUNE's syntax) beat the record and go.
 * The measurements here are counting stand-ins, registered as the rooms
 * register theirs, so the test is exact and fast.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine/tune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int calls[TGL_TUNE_COUNT];

static int64_t m_gemm(void) { calls[TGL_TUNE_BLAS_SPLIT_GEMM]++; return 111111; }
static int64_t m_level2(void) { calls[TGL_TUNE_BLAS_SPLIT_LEVEL2]++; return 22222; }
static int64_t m_thin(void) { calls[TGL_TUNE_BLAS_THIN_COLS]++; return 24; }
static int64_t m_par(void) { calls[TGL_TUNE_PARALLEL_MIN]++; return TGL_TUNE_NEVER; }
static int64_t m_spin(void) { calls[TGL_TUNE_POOL_SPIN_NS]++; return 7000; }
static const char *blas(void) { return "test BLAS 1.0 (core Test)"; }

static char dir[256];

static int total_calls(void)
{
    int n = 0;
    for (int i = 0; i < TGL_TUNE_COUNT; i++)
        n += calls[i];
    return n;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "%s/tune-test-%ld", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (long)getpid());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    if (system(cmd) != 0)
        return -1;
    tgl_tune_reset();
    memset(calls, 0, sizeof calls);
    tgl_tune_register_blas(blas);
    tgl_tune_register(TGL_TUNE_BLAS_SPLIT_GEMM, m_gemm);
    tgl_tune_register(TGL_TUNE_BLAS_SPLIT_LEVEL2, m_level2);
    tgl_tune_register(TGL_TUNE_BLAS_THIN_COLS, m_thin);
    tgl_tune_register(TGL_TUNE_PARALLEL_MIN, m_par);
    tgl_tune_register(TGL_TUNE_POOL_SPIN_NS, m_spin);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    tgl_tune_reset();
    return system(cmd) == 0 ? 0 : -1;
}

/* Whether this machine has one CPU (splits are then derived, not measured). */
static bool one_cpu(void)
{
    return sysconf(_SC_NPROCESSORS_ONLN) == 1;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = calloc(1, 65537);
    size_t n = fread(buf, 1, 65536, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void spit(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Replaces the first occurrence of `from` in the record with `to`. */
static void edit_record(const char *from, const char *to)
{
    char *t = slurp(tgl_tune_file());
    assert_non_null(t);
    char *p = strstr(t, from);
    assert_non_null(p);
    char *out = calloc(1, strlen(t) + strlen(to) + 1);
    memcpy(out, t, (size_t)(p - t));
    strcat(out, to);
    strcat(out, p + strlen(from));
    spit(tgl_tune_file(), out);
    free(t);
    free(out);
}

/* A new process: forget everything but the registrations. */
static void new_process(void)
{
    tgl_tune_reset();
}

static void expect_measured_values(const char *source)
{
    if (one_cpu()) {
        assert_string_equal(tgl_tune_source(TGL_TUNE_BLAS_SPLIT_GEMM), "derived");
    } else {
        assert_int_equal(tgl_tune_get(TGL_TUNE_BLAS_SPLIT_GEMM), 111111);
        assert_int_equal(tgl_tune_get(TGL_TUNE_BLAS_SPLIT_LEVEL2), 22222);
        assert_true(tgl_tune_get(TGL_TUNE_PARALLEL_MIN) == TGL_TUNE_NEVER);
        assert_int_equal(tgl_tune_get(TGL_TUNE_POOL_SPIN_NS), 7000);
        assert_string_equal(tgl_tune_source(TGL_TUNE_BLAS_SPLIT_GEMM), source);
        assert_string_equal(tgl_tune_source(TGL_TUNE_POOL_SPIN_NS), source);
    }
    assert_int_equal(tgl_tune_get(TGL_TUNE_BLAS_THIN_COLS), 24);
    assert_string_equal(tgl_tune_source(TGL_TUNE_BLAS_THIN_COLS), source);
}

static void record_round_trip_measures_once_then_reads_back(void **state)
{
    (void)state;
    tgl_tune_load(dir, false);
    expect_measured_values("measured");
    int measured = total_calls();
    assert_true(measured >= 1);
    const char *f = tgl_tune_file();
    assert_non_null(strstr(f, dir));
    char *t = slurp(f);
    assert_non_null(t);
    assert_true(strncmp(t, "tgl-tune 1\n", 11) == 0);
    assert_non_null(strstr(t, "\nblas test BLAS 1.0 (core Test)\n"));
    assert_non_null(strstr(t, "\nblas.thin_gemv_cols 24\n"));
    assert_non_null(strstr(t, "\nend\n"));
    free(t);
    /* a second load in the same process does nothing */
    tgl_tune_load(dir, false);
    assert_int_equal(total_calls(), measured);
    /* a new process reads the record and measures nothing */
    new_process();
    tgl_tune_load(dir, false);
    expect_measured_values("cached");
    assert_int_equal(total_calls(), measured);
    assert_string_equal(tgl_tune_source(TGL_TUNE_BLAS_SPLIT_GEMM), one_cpu() ? "derived" : "cached");
    /* force (tgl --calibrate) measures again */
    tgl_tune_load(dir, true);
    assert_int_equal(total_calls(), 2 * measured);
    expect_measured_values("measured");
    char *text = tgl_tune_text();
    assert_non_null(strstr(text, "blas.thin_gemv_cols"));
    assert_non_null(strstr(text, "record: "));
    free(text);
}

/* Loads a record made bad by `from` -> `to` (NULL: replace the whole
 * file with `to`): measured again and rewritten whole. */
static void bad_record_is_measured_again(const char *from, const char *to)
{
    tgl_tune_load(dir, false);
    int measured = total_calls();
    if (from)
        edit_record(from, to);
    else
        spit(tgl_tune_file(), to);
    new_process();
    tgl_tune_load(dir, false);
    assert_int_equal(total_calls(), 2 * measured);
    expect_measured_values("measured");
    /* the rewritten record is good again */
    new_process();
    tgl_tune_load(dir, false);
    assert_int_equal(total_calls(), 2 * measured);
    expect_measured_values("cached");
}

static void corrupt_record_is_ignored_and_measured_again(void **state)
{
    (void)state;
    bad_record_is_measured_again(NULL, "\x7f" "ELF\x01\x02 garbage\n\n\xff\xfe");
}

static void bad_value_is_ignored_and_measured_again(void **state)
{
    (void)state;
    bad_record_is_measured_again("blas.thin_gemv_cols 24", "blas.thin_gemv_cols -3x");
}

static void truncated_record_is_ignored_and_measured_again(void **state)
{
    (void)state;
    bad_record_is_measured_again("end\n", "");
}

static void another_cpus_record_is_ignored_and_measured_again(void **state)
{
    (void)state;
    bad_record_is_measured_again("\ncpu ", "\ncpu Some Other CPU (family 1 model 2 stepping 3), 64 cpus x");
}

static void empty_record_is_ignored_and_measured_again(void **state)
{
    (void)state;
    bad_record_is_measured_again(NULL, "");
}

static void unknown_names_are_skipped_and_missing_ones_measured(void **state)
{
    (void)state;
    tgl_tune_load(dir, false);
    int measured = total_calls();
    edit_record("end\n", "some.future_tunable 12345\nend\n");
    new_process();
    tgl_tune_load(dir, false);
    assert_int_equal(total_calls(), measured);
    expect_measured_values("cached");
    /* a record without thin_gemv_cols: only that one is measured */
    edit_record("blas.thin_gemv_cols 24\n", "");
    new_process();
    tgl_tune_load(dir, false);
    assert_int_equal(total_calls(), measured + 1);
    assert_int_equal(calls[TGL_TUNE_BLAS_THIN_COLS], 2);
    assert_string_equal(tgl_tune_source(TGL_TUNE_BLAS_THIN_COLS), "measured");
    if (!one_cpu())
        assert_string_equal(tgl_tune_source(TGL_TUNE_BLAS_SPLIT_GEMM), "cached");
}

static void no_directory_keeps_the_fallbacks_and_measures_nothing(void **state)
{
    (void)state;
    tgl_tune_load(NULL, false);
    assert_int_equal(total_calls(), 0);
    assert_true(tgl_tune_ready());
    assert_string_equal(tgl_tune_file(), "");
    assert_int_equal(tgl_tune_get(TGL_TUNE_BLAS_THIN_COLS), tgl_tune_fallback(TGL_TUNE_BLAS_THIN_COLS));
    assert_string_equal(tgl_tune_source(TGL_TUNE_BLAS_THIN_COLS), "fallback");
    if (!one_cpu())
        assert_int_equal(tgl_tune_get(TGL_TUNE_BLAS_SPLIT_GEMM),
                         tgl_tune_fallback(TGL_TUNE_BLAS_SPLIT_GEMM));
}

static void unwritable_directory_measures_for_this_process_only(void **state)
{
    (void)state;
    /* a directory that cannot exist: its parent is a regular file */
    char file[300], sub[320];
    snprintf(file, sizeof file, "%s/plain", dir);
    spit(file, "x");
    snprintf(sub, sizeof sub, "%s/sub", file);
    tgl_tune_load(sub, false);
    int measured = total_calls();
    assert_true(measured >= 1);
    expect_measured_values("measured");
    assert_int_equal(access(tgl_tune_file(), F_OK), -1);
    new_process();
    tgl_tune_load(sub, false);
    assert_int_equal(total_calls(), 2 * measured);
}

static void overrides_beat_the_record_and_clear(void **state)
{
    (void)state;
    tgl_tune_load(dir, false);
    char why[200] = "";
    assert_int_equal(tgl_tune_override("blas.thin_gemv_cols=3, kernel.parallel_min=never", why,
                                       sizeof why), 0);
    assert_int_equal(tgl_tune_get(TGL_TUNE_BLAS_THIN_COLS), 3);
    assert_true(tgl_tune_get(TGL_TUNE_PARALLEL_MIN) == TGL_TUNE_NEVER);
    assert_string_equal(tgl_tune_source(TGL_TUNE_BLAS_THIN_COLS), "override");
    assert_string_equal(tgl_tune_overrides(), "blas.thin_gemv_cols=3,kernel.parallel_min=never");
    /* a calibration keeps them in force */
    tgl_tune_load(dir, true);
    assert_int_equal(tgl_tune_get(TGL_TUNE_BLAS_THIN_COLS), 3);
    /* bad lists change nothing and say why */
    assert_int_equal(tgl_tune_override("nope=1", why, sizeof why), -1);
    assert_non_null(strstr(why, "unknown tunable 'nope'"));
    assert_int_equal(tgl_tune_override("blas.split_gemm=-1", why, sizeof why), -1);
    assert_non_null(strstr(why, "blas.split_gemm"));
    assert_int_equal(tgl_tune_override("blas.split_gemm", why, sizeof why), -1);
    assert_int_equal(tgl_tune_override("pool.spin_ns=never", why, sizeof why), -1);
    assert_int_equal(tgl_tune_get(TGL_TUNE_BLAS_THIN_COLS), 3);
    /* "" clears them: the record's values are back */
    assert_int_equal(tgl_tune_override("", why, sizeof why), 0);
    assert_int_equal(tgl_tune_get(TGL_TUNE_BLAS_THIN_COLS), 24);
    assert_string_equal(tgl_tune_source(TGL_TUNE_BLAS_THIN_COLS), "measured");
    assert_string_equal(tgl_tune_overrides(), "");
}

static void derived_facts_are_not_replaced_by_the_record(void **state)
{
    (void)state;
    tgl_tune_load(dir, false);
    int64_t step = tgl_tune_get(TGL_TUNE_STEP_MAX_BYTES);
    assert_true(step >= 256 * 1024);
    edit_record("end\n", "step.max_bytes 5\nend\n");
    new_process();
    tgl_tune_load(dir, false);
    assert_int_equal(tgl_tune_get(TGL_TUNE_STEP_MAX_BYTES), step);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(record_round_trip_measures_once_then_reads_back, setup, teardown),
        cmocka_unit_test_setup_teardown(corrupt_record_is_ignored_and_measured_again, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_value_is_ignored_and_measured_again, setup, teardown),
        cmocka_unit_test_setup_teardown(truncated_record_is_ignored_and_measured_again, setup, teardown),
        cmocka_unit_test_setup_teardown(another_cpus_record_is_ignored_and_measured_again, setup, teardown),
        cmocka_unit_test_setup_teardown(empty_record_is_ignored_and_measured_again, setup, teardown),
        cmocka_unit_test_setup_teardown(unknown_names_are_skipped_and_missing_ones_measured, setup, teardown),
        cmocka_unit_test_setup_teardown(no_directory_keeps_the_fallbacks_and_measures_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(unwritable_directory_measures_for_this_process_only, setup, teardown),
        cmocka_unit_test_setup_teardown(overrides_beat_the_record_and_clear, setup, teardown),
        cmocka_unit_test_setup_teardown(derived_facts_are_not_replaced_by_the_record, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
