/*
 * tune.h — thresholds that decide a kernel, a split or a thread count,
 * measured on the machine that runs (issue 23 item 4), never constants
 * tuned on one processor.
 *
 * Every tunable is one line of TGL_TUNABLES: an id, the name `tgl -v`
 * prints, its unit, and the fallback used until a measurement exists.  The
 * fallback is a safe value (a cutoff that is right on most machines, or one
 * derived from sysconf), not a tuned one.  The room that owns a threshold
 * registers the function that measures it (tgl_tune_register, from the
 * room's own init code), so this file names no backend: a measurement of
 * BLAS lives in src/cpu, one of the thread pool in src/engine/pool.c.
 *
 * Reading (tgl_tune_get) is cheap (an array load after the first call)
 * and thread-safe.  The values come, in this order, from: a measurement
 * cached on disk for this CPU model and BLAS (tune.c: the kernel cache
 * directory), else the fallback.  Calibration (tgl_tune_calibrate: `tgl
 * --calibrate`, or the first run on a machine with no cached record) runs
 * every registered measurement and writes the record.
 */
#ifndef TGL_TUNE_H
#define TGL_TUNE_H

#include <stdbool.h>
#include <stdint.h>

/* _(id, "name", "unit", fallback) */
#define TGL_TUNABLES(_)                                                                     \
    _(BLAS_SPLIT_GEMM, "blas.split_gemm", "multiply-adds", 1 << 22)                        \
    _(BLAS_SPLIT_LEVEL2, "blas.split_level2", "matrix elements", 1 << 20)                  \
    _(BLAS_THIN_COLS, "blas.thin_gemv_cols", "columns", 16)                                \
    _(PARALLEL_MIN, "kernel.parallel_min", "elements", 32768)                              \
    _(POOL_SPIN_NS, "pool.spin_ns", "ns", 50000)                                           \
    _(STEP_MAX_BYTES, "step.max_bytes", "bytes", 1 << 20)

typedef enum tgl_tune_id {
#define TGL_TUNE_ENUM_(id, name, unit, fallback) TGL_TUNE_##id,
    TGL_TUNABLES(TGL_TUNE_ENUM_)
#undef TGL_TUNE_ENUM_
        TGL_TUNE_COUNT
} tgl_tune_id;

/* Measures one tunable on this machine: its value, or < 0 where it cannot
 * (the fallback stays). */
typedef int64_t (*tgl_tune_measure_fn)(void);

/* The value of a tunable (measured, cached, or the fallback). */
int64_t tgl_tune_get(tgl_tune_id id);
/* Its name, unit and fallback, for printing. */
const char *tgl_tune_name(tgl_tune_id id);
const char *tgl_tune_unit(tgl_tune_id id);
int64_t tgl_tune_fallback(tgl_tune_id id);
/* Where the value came from: "measured", "cached", "derived" or "fallback". */
const char *tgl_tune_source(tgl_tune_id id);

/* Registers the measurement of one tunable (its owning room, at init). */
void tgl_tune_register(tgl_tune_id id, tgl_tune_measure_fn measure);
/* Sets a value directly (a fact derived from sysconf/cpuid, or a test). */
void tgl_tune_set(tgl_tune_id id, int64_t value, const char *source);

#endif /* TGL_TUNE_H */
