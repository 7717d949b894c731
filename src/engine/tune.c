/*
 * tune.c — the table of measured thresholds (tune.h).
 *
 * This first version holds the table, the fallbacks and the registered
 * measurements; the record cached per CPU model and BLAS and the
 * calibration run are added on top of it (tgl_tune_calibrate).
 */
#include "engine/tune.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct tunable {
    const char *name, *unit;
    int64_t fallback;
} tunable;

static const tunable table[TGL_TUNE_COUNT] = {
#define TGL_TUNE_ROW_(id, name, unit, fallback) {name, unit, (int64_t)(fallback)},
    TGL_TUNABLES(TGL_TUNE_ROW_)
#undef TGL_TUNE_ROW_
};

/* The values in effect and where each came from; guarded by `lock` for
 * writers, read without it (an aligned 64-bit load). */
static _Atomic int64_t value[TGL_TUNE_COUNT];
static const char *source[TGL_TUNE_COUNT];
static tgl_tune_measure_fn measure[TGL_TUNE_COUNT];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void)
{
    for (int i = 0; i < TGL_TUNE_COUNT; i++) {
        atomic_store(&value[i], table[i].fallback);
        source[i] = "fallback";
    }
}

static bool valid(tgl_tune_id id)
{
    return (int)id >= 0 && id < TGL_TUNE_COUNT;
}

int64_t tgl_tune_get(tgl_tune_id id)
{
    pthread_once(&once, init);
    return valid(id) ? atomic_load_explicit(&value[id], memory_order_relaxed) : 0;
}

const char *tgl_tune_name(tgl_tune_id id)
{
    return valid(id) ? table[id].name : "?";
}

const char *tgl_tune_unit(tgl_tune_id id)
{
    return valid(id) ? table[id].unit : "?";
}

int64_t tgl_tune_fallback(tgl_tune_id id)
{
    return valid(id) ? table[id].fallback : 0;
}

const char *tgl_tune_source(tgl_tune_id id)
{
    pthread_once(&once, init);
    if (!valid(id))
        return "?";
    pthread_mutex_lock(&lock);
    const char *s = source[id];
    pthread_mutex_unlock(&lock);
    return s;
}

void tgl_tune_register(tgl_tune_id id, tgl_tune_measure_fn fn)
{
    if (!valid(id))
        return;
    pthread_mutex_lock(&lock);
    measure[id] = fn;
    pthread_mutex_unlock(&lock);
}

void tgl_tune_set(tgl_tune_id id, int64_t v, const char *src)
{
    pthread_once(&once, init);
    if (!valid(id))
        return;
    pthread_mutex_lock(&lock);
    atomic_store(&value[id], v);
    source[id] = src ? src : "set";
    pthread_mutex_unlock(&lock);
}
