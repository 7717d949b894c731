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
 * Reading (tgl_tune_get) is cheap (an atomic load) and thread-safe.  A
 * value comes, first that applies, from: an override (TGL_TUNE, the
 * config setting `tune`: tests and experiments), a fact derived from
 * sysconf (step.max_bytes from the L2 size; on one CPU no split ever pays),
 * the calibration record of this CPU model and BLAS (tune.c: a text file
 * in the kernel cache directory; "cached" when read, "measured" when this
 * process measured it), else the fallback.  The first use of a backend
 * that measures (backend.h: tune) loads the record, measuring and writing
 * it when there is none (tgl_tune_load); `tgl --calibrate` measures again
 * (force).  Without a usable directory nothing is measured: the fallbacks
 * stay, silently.
 */
#ifndef TGL_TUNE_H
#define TGL_TUNE_H

#include <stdbool.h>
#include <stddef.h>
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
/* Sets a value directly: source "derived" for a fact from sysconf/cpuid
 * (the record never replaces it), "override" for TGL_TUNE and tests (it
 * beats everything until tgl_tune_override clears it), else a plain value
 * (the record replaces it). */
void tgl_tune_set(tgl_tune_id id, int64_t value, const char *source);
/* The id of a tunable's name, or -1. */
int tgl_tune_find(const char *name);

/* "Never": a threshold no work reaches (printed "never"). */
#define TGL_TUNE_NEVER INT64_MAX

/* Registers the function naming the BLAS the measurements are for (the
 * CPU backend's: its library, version and kernel), part of the record's
 * key with the CPU model. */
void tgl_tune_register_blas(const char *(*blas_id)(void));

/* Whether this process has loaded (or measured, or given up on) the
 * record: the engine calls the backend's tune until it has. */
bool tgl_tune_ready(void);
/* Loads the record for this CPU and BLAS from dir (NULL: no usable
 * directory: nothing is measured, the fallbacks stay), measures what it
 * lacks (every registered measurement; a missing, corrupt, truncated or
 * foreign record: one warning for the latter three, then all) and writes
 * it back atomically.  force (tgl --calibrate): measures everything and
 * rewrites.  Once per process unless force; concurrent callers wait. */
void tgl_tune_load(const char *dir, bool force);
/* The record's key and file ("" before tgl_tune_load or without a
 * directory), and how long the last calibration took (s; < 0: none ran). */
const char *tgl_tune_cpu(void);
const char *tgl_tune_blas(void);
const char *tgl_tune_file(void);
double tgl_tune_seconds(void);

/* Overrides from "name=value,name=value" (value: an integer >= 0 or
 * "never"); "" clears every override.  0, or -1 with why filled (an
 * unknown name, a bad value: nothing is changed). */
int tgl_tune_override(const char *list, char *why, size_t why_size);
/* The overrides in force, as "name=value,..." ("" for none). */
const char *tgl_tune_overrides(void);
/* The table as text, what `tgl -v` prints (malloc'd; NULL: no memory). */
char *tgl_tune_text(void);

/* ---- helpers for the measurements (medians of interleaved timings) ---- */

/* One run of what a measurement compares: variant 0 (the baseline, e.g.
 * one thread) or 1 (the contender) at ladder size `size`. */
typedef void (*tgl_tune_run_fn)(void *arg, int variant, int64_t size);
/* ns[v]: the median time of one run of each variant at size, over `reps`
 * samples taken in alternation (0, 1, 0, 1, ...: the machine's load hits
 * both alike), each sample repeating the run until it lasts >= 20 us. */
void tgl_tune_time2(tgl_tune_run_fn run, void *arg, int64_t size, int reps, double ns[2]);
/* Where variant 1 starts to win along an ascending ladder (sizes[i], the
 * work work[i]): the geometric mean of the work of the last size where it
 * lost and of the first of two sizes in a row where it won (so one lucky
 * sample does not decide); work[0] when it wins from the start; 4x the
 * last work when it never wins twice in a row on the ladder. */
int64_t tgl_tune_crossover(tgl_tune_run_fn run, void *arg, const int64_t *sizes,
                           const int64_t *work, int n);

/* Tests: forgets the record, the measurements and the overrides (the
 * registrations stay), as in a new process. */
void tgl_tune_reset(void);

#endif /* TGL_TUNE_H */
