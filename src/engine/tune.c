/*
 * tune.c — the table of measured thresholds (tune.h) and its calibration
 * record on disk.
 *
 * Each tunable has two layers: its base value (the fallback, a value
 * derived from sysconf, or one cached/measured for this machine) and an
 * optional override (TGL_TUNE); tgl_tune_get reads the effective one, kept
 * in an atomic per tunable so that readers (BLAS calls, kernel launches,
 * the pool's workers) never take a lock.
 *
 * The record is a small text file in the kernel cache directory, named
 * tune-<FNV-1a of the key>.txt, whose key is this CPU (the cpuid brand
 * string and family/model/stepping, or /proc/cpuinfo's model lines, and
 * the count of online CPUs: the pool's splits measure threads against each
 * other) and the BLAS (a registered function: the CPU backend's library,
 * version and kernel; this file names none):
 *
 *     tgl-tune 1
 *     cpu Intel(R) Xeon(R) ... (family 6 model 85 stepping 7), 2 cpus
 *     blas OpenBLAS 0.3.21 ... (core SkylakeX)
 *     measured 1764700000 0.412
 *     blas.split_gemm 262144
 *     ...
 *     end
 *
 * Written to a temporary name and renamed into place, so a reader sees a
 * whole record or none.  Read robustly: a file that is not a record, whose
 * key is another machine's (a copied cache), that lacks its "end" line
 * (truncated) or has a bad value is ignored with one warning and measured
 * again; an unknown name (a tunable of another tgl version) is skipped; a
 * tunable the record lacks is measured and the record rewritten.  Nothing
 * here can fail a user's call: the worst case is the fallbacks.
 */
#include "engine/tune.h"
#include "engine/backend.h"
#include "engine/hash.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#define RECORD_MAGIC "tgl-tune 1"
#define RECORD_MAX_BYTES 65536
/* The longest a pool worker may spin (a worker that never sleeps never
 * notices the pool stopping). */
#define SPIN_MAX_NS ((int64_t)1000000000)

typedef struct tunable {
    const char *name, *unit;
    int64_t fallback;
} tunable;

static const tunable table[TGL_TUNE_COUNT] = {
#define TGL_TUNE_ROW_(id, name, unit, fallback) {name, unit, (int64_t)(fallback)},
    TGL_TUNABLES(TGL_TUNE_ROW_)
#undef TGL_TUNE_ROW_
};

/* The values in effect (read without a lock) and their layers (guarded
 * by `lock`). */
static _Atomic int64_t value[TGL_TUNE_COUNT];
static int64_t base_value[TGL_TUNE_COUNT];
static const char *base_source[TGL_TUNE_COUNT];
static bool ov_set[TGL_TUNE_COUNT];
static int64_t ov_value[TGL_TUNE_COUNT];
static char ov_text[1024];
static tgl_tune_measure_fn measure[TGL_TUNE_COUNT];
static const char *(*blas_fn)(void);
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The record: loading is serialized by load_lock (held while measuring, so
 * a second caller waits for the first one's values). */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool ready;
static char cpu_key[512], blas_key[512], file[1200];
static double seconds = -1;
static bool warned;

static bool valid(tgl_tune_id id)
{
    return (int)id >= 0 && id < TGL_TUNE_COUNT;
}

/* Under lock. */
static void publish(int i)
{
    atomic_store(&value[i], ov_set[i] ? ov_value[i] : base_value[i]);
}

static void set_base(int i, int64_t v, const char *src)
{
    base_value[i] = v;
    base_source[i] = src;
    publish(i);
}

/* Fallbacks, then what sysconf says.  Under lock (or from once). */
static void derive(void)
{
    for (int i = 0; i < TGL_TUNE_COUNT; i++)
        set_base(i, table[i].fallback, "fallback");
    /* The bound step's buffers fit this core's L2 (at least 256 KiB). */
    long l2 = -1;
#ifdef _SC_LEVEL2_CACHE_SIZE
    l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    if (l2 > 0)
        set_base(TGL_TUNE_STEP_MAX_BYTES, l2 < (256 << 10) ? (256 << 10) : (int64_t)l2, "derived");
    /* One CPU: two threads only take turns, so no split pays, and a
     * spinning worker holds the CPU the thread it waits for needs. */
    if (sysconf(_SC_NPROCESSORS_ONLN) == 1) {
        set_base(TGL_TUNE_BLAS_SPLIT_GEMM, TGL_TUNE_NEVER, "derived");
        set_base(TGL_TUNE_BLAS_SPLIT_LEVEL2, TGL_TUNE_NEVER, "derived");
        set_base(TGL_TUNE_PARALLEL_MIN, TGL_TUNE_NEVER, "derived");
        set_base(TGL_TUNE_POOL_SPIN_NS, 0, "derived");
    }
}

static void init(void)
{
    derive();
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

int tgl_tune_find(const char *name)
{
    for (int i = 0; name && i < TGL_TUNE_COUNT; i++)
        if (!strcmp(name, table[i].name))
            return i;
    return -1;
}

const char *tgl_tune_source(tgl_tune_id id)
{
    pthread_once(&once, init);
    if (!valid(id))
        return "?";
    pthread_mutex_lock(&lock);
    const char *s = ov_set[id] ? "override" : base_source[id];
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

void tgl_tune_register_blas(const char *(*fn)(void))
{
    pthread_mutex_lock(&lock);
    blas_fn = fn;
    pthread_mutex_unlock(&lock);
}

void tgl_tune_set(tgl_tune_id id, int64_t v, const char *src)
{
    pthread_once(&once, init);
    if (!valid(id))
        return;
    pthread_mutex_lock(&lock);
    if (src && !strcmp(src, "override")) {
        ov_set[id] = true;
        ov_value[id] = v;
        publish(id);
    } else {
        set_base(id, v, src ? src : "set");
    }
    pthread_mutex_unlock(&lock);
}

/* ---- overrides --------------------------------------------------------- */

static void format_value(char *buf, size_t n, int64_t v)
{
    if (v == TGL_TUNE_NEVER)
        snprintf(buf, n, "never");
    else
        snprintf(buf, n, "%" PRId64, v);
}

/* An integer >= 0 or "never" from s[0..n). */
static bool parse_value(const char *s, size_t n, int64_t *out)
{
    if (n == 5 && !strncmp(s, "never", 5)) {
        *out = TGL_TUNE_NEVER;
        return true;
    }
    if (n == 0 || n > 19)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9' || v > (INT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

int tgl_tune_override(const char *list, char *why, size_t why_size)
{
    pthread_once(&once, init);
    bool set[TGL_TUNE_COUNT] = {false};
    int64_t val[TGL_TUNE_COUNT] = {0};
    const char *p = list ? list : "";
    while (*p) {
        while (*p == ',' || *p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        size_t n = strcspn(p, ",");
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        const char *eq = memchr(p, '=', n);
        char name[64];
        size_t nl = eq ? (size_t)(eq - p) : n;
        while (nl && (p[nl - 1] == ' ' || p[nl - 1] == '\t'))
            nl--;
        snprintf(name, sizeof name, "%.*s", (int)(nl < 63 ? nl : 63), p);
        int id = nl < 63 ? tgl_tune_find(name) : -1;
        if (id < 0) {
            snprintf(why, why_size, "unknown tunable '%.*s' (tgl -v lists them)", (int)nl, p);
            return -1;
        }
        const char *v = eq ? eq + 1 : p + n;
        while (v < p + n && (*v == ' ' || *v == '\t'))
            v++;
        if (!eq || !parse_value(v, (size_t)(p + n - v), &val[id])) {
            snprintf(why, why_size, "%s needs =<integer >= 0> or =never, got '%.*s'", name,
                     (int)n, p);
            return -1;
        }
        if (id == TGL_TUNE_POOL_SPIN_NS && val[id] > SPIN_MAX_NS) {
            /* a worker that never sleeps never sees the pool stop */
            snprintf(why, why_size, "pool.spin_ns must be at most %lld ns",
                     (long long)SPIN_MAX_NS);
            return -1;
        }
        set[id] = true;
        p += strcspn(p, ",");
    }
    pthread_mutex_lock(&lock);
    size_t used = 0;
    ov_text[0] = '\0';
    for (int i = 0; i < TGL_TUNE_COUNT; i++) {
        ov_set[i] = set[i];
        ov_value[i] = val[i];
        publish(i);
        if (set[i]) {
            char v[32];
            format_value(v, sizeof v, val[i]);
            int k = snprintf(ov_text + used, sizeof ov_text - used, "%s%s=%s", used ? "," : "",
                             table[i].name, v);
            if (k > 0 && used + (size_t)k < sizeof ov_text)
                used += (size_t)k;
        }
    }
    pthread_mutex_unlock(&lock);
    return 0;
}

const char *tgl_tune_overrides(void)
{
    return ov_text;
}

/* ---- the key ------------------------------------------------------------ */

/* This CPU, as the record's key: the model and its family/model/stepping
 * (cpuid on x86, /proc/cpuinfo elsewhere) and the online CPU count. */
static void cpu_describe(char *out, size_t size)
{
    char model[256] = "";
    size_t n = 0;
#if defined(__x86_64__) || defined(__i386__)
    unsigned r[12], a, b, c, d;
    if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
        for (unsigned leaf = 0; leaf < 3; leaf++)
            __get_cpuid(0x80000002 + leaf, &r[4 * leaf], &r[4 * leaf + 1], &r[4 * leaf + 2],
                        &r[4 * leaf + 3]);
        char brand[49];
        memcpy(brand, r, 48);
        brand[48] = '\0';
        const char *s = brand;
        while (*s == ' ')
            s++;
        n = (size_t)snprintf(model, sizeof model, "%s", s);
    }
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        unsigned fam = (a >> 8) & 0xf, mod = (a >> 4) & 0xf, step = a & 0xf;
        if (fam == 0xf)
            fam += (a >> 20) & 0xff;
        if (fam == 6 || fam >= 0xf)
            mod += ((a >> 16) & 0xf) << 4;
        if (n < sizeof model)
            snprintf(model + n, sizeof model - n, " (family %u model %u stepping %u)", fam, mod,
                     step);
    }
#else
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        static const char *keys[] = {"model name", "cpu family", "model", "stepping",
                                     "CPU implementer", "CPU part", "CPU variant",
                                     "CPU revision"};
        bool seen[8] = {false};
        char line[1024];
        while (fgets(line, sizeof line, f)) {
            for (int k = 0; k < 8; k++) {
                size_t kl = strlen(keys[k]);
                const char *colon = strchr(line, ':');
                if (seen[k] || !colon || strncmp(line, keys[k], kl) != 0 ||
                    (line[kl] != ' ' && line[kl] != '\t' && line[kl] != ':'))
                    continue;
                seen[k] = true;
                const char *v = colon + 1;
                while (*v == ' ')
                    v++;
                int w = snprintf(model + n, sizeof model - n, "%s%s %.*s", n ? ", " : "",
                                 keys[k], (int)strcspn(v, "\n"), v);
                if (w > 0 && n + (size_t)w < sizeof model)
                    n += (size_t)w;
            }
        }
        fclose(f);
    }
#endif
    if (!model[0])
        snprintf(model, sizeof model, "unknown cpu");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(out, size, "%s, %ld cpu%s", model, cpus > 0 ? cpus : 1, cpus == 1 ? "" : "s");
}

/* ---- the record --------------------------------------------------------- */

typedef struct record {
    bool have[TGL_TUNE_COUNT];
    int64_t v[TGL_TUNE_COUNT];
} record;

/* Reads path into rec.  0: read; 1: no file; -1: not usable, why says. */
static int record_read(const char *path, record *rec, char *why, size_t why_size)
{
    memset(rec, 0, sizeof *rec);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 1;
        snprintf(why, why_size, "cannot be read: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > RECORD_MAX_BYTES) {
        close(fd);
        snprintf(why, why_size, "not a regular file of at most %d bytes", RECORD_MAX_BYTES);
        return -1;
    }
    char *text = malloc((size_t)st.st_size + 1);
    ssize_t got = text ? read(fd, text, (size_t)st.st_size) : -1;
    close(fd);
    if (got < 0) {
        free(text);
        snprintf(why, why_size, "cannot be read");
        return -1;
    }
    text[got] = '\0';
    int rc = 0;
    bool cpu_ok = false, blas_ok = false, end = false;
    int lineno = 0;
    for (char *line = text, *next; line && *line && rc == 0; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        lineno++;
        if (end) {
            if (*line) {
                snprintf(why, why_size, "text after its end line");
                rc = -1;
            }
            continue;
        }
        if (lineno == 1) {
            if (strcmp(line, RECORD_MAGIC) != 0) {
                snprintf(why, why_size, "not a tgl calibration record");
                rc = -1;
            }
            continue;
        }
        if (!*line || line[0] == '#')
            continue;
        if (!strcmp(line, "end")) {
            end = true;
            continue;
        }
        char *sp = strchr(line, ' ');
        if (!sp) {
            snprintf(why, why_size, "line %d is not 'name value'", lineno);
            rc = -1;
            continue;
        }
        *sp = '\0';
        const char *rest = sp + 1;
        if (!strcmp(line, "cpu")) {
            cpu_ok = !strcmp(rest, cpu_key);
            if (!cpu_ok) {
                snprintf(why, why_size, "made on another cpu: %.200s", rest);
                rc = -1;
            }
        } else if (!strcmp(line, "blas")) {
            blas_ok = !strcmp(rest, blas_key);
            if (!blas_ok) {
                snprintf(why, why_size, "made with another BLAS: %.200s", rest);
                rc = -1;
            }
        } else if (!strcmp(line, "measured")) {
            continue; /* when and how long: informative */
        } else {
            int id = tgl_tune_find(line);
            if (id < 0)
                continue; /* another version's tunable */
            if (!parse_value(rest, strlen(rest), &rec->v[id]) ||
                (id == TGL_TUNE_POOL_SPIN_NS && rec->v[id] > SPIN_MAX_NS)) {
                snprintf(why, why_size, "bad value for %s: '%.40s'", line, rest);
                rc = -1;
            } else {
                rec->have[id] = true;
            }
        }
    }
    free(text);
    if (rc == 0 && !end) {
        snprintf(why, why_size, "truncated (no end line)");
        rc = -1;
    }
    if (rc == 0 && (!cpu_ok || !blas_ok)) {
        snprintf(why, why_size, "its cpu or blas line is missing");
        rc = -1;
    }
    if (rc != 0)
        memset(rec, 0, sizeof *rec);
    return rc;
}

/* Writes rec to path through a temporary and rename(2).  0 or -1. */
static int record_write(const char *path, const record *rec)
{
    char tmp[sizeof file + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    fprintf(f, "%s\n# thresholds measured on this machine; tgl --calibrate measures again\n",
            RECORD_MAGIC);
    fprintf(f, "cpu %s\nblas %s\nmeasured %lld %.3f\n", cpu_key, blas_key, (long long)time(NULL),
            seconds > 0 ? seconds : 0.0);
    for (int i = 0; i < TGL_TUNE_COUNT; i++) {
        if (!rec->have[i])
            continue;
        char v[32];
        format_value(v, sizeof v, rec->v[i]);
        fprintf(f, "%s %s\n", table[i].name, v);
    }
    fprintf(f, "end\n");
    bool ok = fflush(f) == 0 && !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Whether id's value comes from this machine's record (not a sysconf fact). */
static bool recorded(int id)
{
    return strcmp(base_source[id], "derived") != 0;
}

bool tgl_tune_ready(void)
{
    return atomic_load_explicit(&ready, memory_order_acquire);
}

void tgl_tune_load(const char *dir, bool force)
{
    pthread_once(&once, init);
    pthread_mutex_lock(&load_lock);
    if (tgl_tune_ready() && !force) {
        pthread_mutex_unlock(&load_lock);
        return;
    }
    if (!cpu_key[0])
        cpu_describe(cpu_key, sizeof cpu_key);
    pthread_mutex_lock(&lock);
    const char *(*bf)(void) = blas_fn;
    tgl_tune_measure_fn m[TGL_TUNE_COUNT];
    memcpy(m, measure, sizeof m);
    pthread_mutex_unlock(&lock);
    snprintf(blas_key, sizeof blas_key, "%s", bf && bf() ? bf() : "no BLAS");
    /* keep the key on one line */
    for (char *p = blas_key; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    file[0] = '\0';
    if (!dir || !dir[0]) {
        atomic_store_explicit(&ready, true, memory_order_release);
        pthread_mutex_unlock(&load_lock);
        return;
    }
    uint64_t h = tgl_hash_bytes(TGL_HASH_FNV_BASIS, cpu_key, strlen(cpu_key) + 1);
    h = tgl_hash_bytes(h, blas_key, strlen(blas_key) + 1);
    snprintf(file, sizeof file, "%s/tune-%016" PRIx64 ".txt", dir, h);

    record rec;
    char why[300] = "";
    int rc = force ? 1 : record_read(file, &rec, why, sizeof why);
    if (rc != 0)
        memset(&rec, 0, sizeof rec);
    if (rc < 0 && !warned) {
        warned = true;
        fprintf(stderr, "tgl: ignoring the calibration record %s (%s): measuring again\n", file,
                why);
    }
    pthread_mutex_lock(&lock);
    for (int i = 0; i < TGL_TUNE_COUNT; i++)
        if (rec.have[i] && recorded(i))
            set_base(i, rec.v[i], "cached");
    pthread_mutex_unlock(&lock);

    /* What the record lacks: the pool's spin first (the others run on the
     * pool), then in table order. */
    bool wrote_any = false;
    uint64_t t0 = tgl_now_ns();
    for (int k = -1; k < TGL_TUNE_COUNT; k++) {
        int i = k < 0 ? TGL_TUNE_POOL_SPIN_NS : k;
        if (k >= 0 && i == TGL_TUNE_POOL_SPIN_NS)
            continue;
        pthread_mutex_lock(&lock);
        bool want = m[i] && recorded(i) && !rec.have[i];
        pthread_mutex_unlock(&lock);
        if (!want)
            continue;
        int64_t v = m[i]();
        if (v < 0)
            continue;
        if (i == TGL_TUNE_POOL_SPIN_NS && v > SPIN_MAX_NS)
            v = SPIN_MAX_NS;
        rec.have[i] = true;
        rec.v[i] = v;
        wrote_any = true;
        pthread_mutex_lock(&lock);
        set_base(i, v, "measured");
        pthread_mutex_unlock(&lock);
    }
    if (wrote_any) {
        seconds = (double)(tgl_now_ns() - t0) * 1e-9;
        /* a full disk or a read-only directory: this process keeps its
         * measurements, the next one measures again */
        record_write(file, &rec);
    }
    atomic_store_explicit(&ready, true, memory_order_release);
    pthread_mutex_unlock(&load_lock);
}

const char *tgl_tune_cpu(void)
{
    return cpu_key;
}

const char *tgl_tune_blas(void)
{
    return blas_key;
}

const char *tgl_tune_file(void)
{
    return file;
}

double tgl_tune_seconds(void)
{
    return seconds;
}

char *tgl_tune_text(void)
{
    pthread_once(&once, init);
    size_t size = 4096;
    char *t = malloc(size);
    if (!t)
        return NULL;
    pthread_mutex_lock(&load_lock);
    size_t n = 0;
#define PUT(...)                                                                            \
    do {                                                                                    \
        int k_ = snprintf(t + n, size - n, __VA_ARGS__);                                    \
        if (k_ > 0)                                                                         \
            n = n + (size_t)k_ < size ? n + (size_t)k_ : size - 1;                          \
    } while (0)
    PUT("cpu: %s\n", cpu_key[0] ? cpu_key : "(not described yet)");
    PUT("blas: %s\n", blas_key[0] ? blas_key : "(not described yet)");
    if (file[0])
        PUT("record: %s\n", file);
    else
        PUT("record: none (no usable kernel cache directory: fallbacks)\n");
    if (seconds >= 0)
        PUT("calibrated in %.2f s\n", seconds);
    pthread_mutex_lock(&lock);
    for (int i = 0; i < TGL_TUNE_COUNT; i++) {
        char v[32];
        format_value(v, sizeof v, atomic_load(&value[i]));
        PUT("  %-22s %12s  %-9s %s\n", table[i].name, v, ov_set[i] ? "override" : base_source[i],
            table[i].unit);
    }
    pthread_mutex_unlock(&lock);
    pthread_mutex_unlock(&load_lock);
#undef PUT
    return t;
}

void tgl_tune_reset(void)
{
    pthread_once(&once, init);
    pthread_mutex_lock(&load_lock);
    pthread_mutex_lock(&lock);
    for (int i = 0; i < TGL_TUNE_COUNT; i++)
        ov_set[i] = false;
    ov_text[0] = '\0';
    derive();
    pthread_mutex_unlock(&lock);
    cpu_key[0] = blas_key[0] = file[0] = '\0';
    seconds = -1;
    warned = false;
    atomic_store(&ready, false);
    pthread_mutex_unlock(&load_lock);
}

/* ---- helpers for the measurements ---------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void tgl_tune_time2(tgl_tune_run_fn run, void *arg, int64_t size, int reps, double ns[2])
{
    enum { MAX_REPS = 31 };
    reps = reps < 1 ? 1 : reps > MAX_REPS ? MAX_REPS : reps;
    /* warm both up (caches, page faults, the pool's threads), and size a
     * sample from the slower of the two */
    int64_t inner = 1;
    uint64_t slow = 1;
    for (int v = 0; v < 2; v++) {
        run(arg, v, size);
        uint64_t t = tgl_now_ns();
        run(arg, v, size);
        t = tgl_now_ns() - t;
        slow = t > slow ? t : slow;
    }
    if (slow < 20000)
        inner = (int64_t)(20000 / slow) + 1;
    double s[2][MAX_REPS];
    for (int r = 0; r < reps; r++)
        for (int v = 0; v < 2; v++) {
            uint64_t t = tgl_now_ns();
            for (int64_t i = 0; i < inner; i++)
                run(arg, v, size);
            s[v][r] = (double)(tgl_now_ns() - t) / (double)inner;
        }
    for (int v = 0; v < 2; v++) {
        qsort(s[v], (size_t)reps, sizeof s[v][0], cmp_double);
        ns[v] = s[v][reps / 2];
    }
}

int64_t tgl_tune_crossover(tgl_tune_run_fn run, void *arg, const int64_t *sizes,
                           const int64_t *work, int n)
{
    int won = -1; /* the first of the current run of wins */
    for (int i = 0; i < n; i++) {
        double ns[2];
        tgl_tune_time2(run, arg, sizes[i], 7, ns);
        if (ns[1] >= ns[0]) {
            won = -1;
            continue;
        }
        if (won < 0)
            won = i;
        if (i > won || i == n - 1) {
            if (won == 0)
                return work[0];
            /* the crossover lies between the last loss and the first win */
            double g = sqrt((double)work[won - 1] * (double)work[won]);
            return (int64_t)g;
        }
    }
    return work[n - 1] > INT64_MAX / 4 ? TGL_TUNE_NEVER : 4 * work[n - 1];
}

/* ---- the public calls (include/tgl.h) ---------------------------------- */

/* The CPU backend's record, loaded (or measured) as its first use does. */
static void load_for(tgl_ctx *ctx)
{
    tgl_backend_tune(ctx, tgl_backend_get(TGL_DEVICE_CPU));
}

tgl_status tgl_tune_info(tgl_ctx *ctx, char **text)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(text, TGL_EINVAL, "tgl_tune_info: NULL argument");
    load_for(ctx);
    *text = tgl_tune_text();
    TGL_CHECK(*text, TGL_ENOMEM, "tgl_tune_info: out of memory");
    return TGL_OK;
}

tgl_status tgl_calibrate(tgl_ctx *ctx)
{
    TGL_CHECK_CTX(ctx);
    const tgl_backend *be = tgl_backend_get(TGL_DEVICE_CPU);
    if (be && be->tune)
        be->tune(&ctx->backend_opts, true);
    return TGL_OK;
}

int tgl_tunable_count(void)
{
    return TGL_TUNE_COUNT;
}

tgl_status tgl_tunable(tgl_ctx *ctx, int i, const char **name, int64_t *val, const char **unit,
                       const char **src)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(i >= 0 && i < TGL_TUNE_COUNT, TGL_EINVAL,
              "tgl_tunable: index %d is out of range (0 to %d)", i, TGL_TUNE_COUNT - 1);
    load_for(ctx);
    if (name)
        *name = table[i].name;
    if (unit)
        *unit = table[i].unit;
    if (val)
        *val = tgl_tune_get((tgl_tune_id)i);
    if (src)
        *src = tgl_tune_source((tgl_tune_id)i);
    return TGL_OK;
}
