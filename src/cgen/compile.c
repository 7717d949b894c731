/*
 * compile.c — making a fused program's kernel callable (cgen.h):
 *
 *   libtcc   compiles the source in memory in well under a millisecond;
 *            slow code, but at once.
 *   cc       the system compiler (config.cc + config.cflags + the flags
 *            below), run with posix_spawn on a temporary file, the shared
 *            object renamed into the cache (cache.c) and dlopen'ed.
 *
 * Modes (config.compile): `tcc`; `sync`/`cc` (cc now, from the cache when
 * it can); `tiered` (a cache hit at once, else libtcc now and cc on a
 * background thread whose result is swapped in with an atomic store of the
 * kernel pointer — a running call finishes on the old code, which stays
 * loaded until release).  No working cc is not an error: one warning per
 * process, and the program keeps the reference path (or, tiered, the
 * libtcc code).  A kernel that fails to compile is a tgl bug:
 * TGL_EINTERNAL with the compiler's message.
 *
 * Process-wide state, all of it here and all behind `G.lock` except
 * `G.tcc_lock` itself: libtcc is not thread-safe (its parser keeps global
 * state), so every libtcc call holds G.tcc_lock; "warn once per process"
 * needs a flag; the compiler's --version is probed once per process and
 * command; and background compiles take one of a fixed number of slots so
 * that preparing many kernels does not start one compiler per kernel at
 * once.
 */
#include "cgen/cgint.h"
#include "engine/ops/ops.h"

#include <errno.h>
#include <fcntl.h>
#include <libtcc.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Flags tgl always adds: position-independent shared object;
 * `declare simd` pragmas honoured (vector libm calls); no errno from libm
 * (sqrt inlines, calls vectorize); and no contraction of a*b+c into an
 * fma, which would round differently from the reference kernels. */
#define FIXED_FLAGS "-fPIC -shared -fopenmp-simd -fno-math-errno -ffp-contract=off"
#if defined(__x86_64__) && defined(__GLIBC__)
#define LIBS "-lmvec -lm" /* glibc's vector math, for the declare simd calls */
#else
#define LIBS "-lm"
#endif

#define MAX_ARGS 64
#define MAX_PROBES 8
#define TAIL 700 /* bytes of compiler output kept for the error message */

static struct {
    pthread_mutex_t tcc_lock;
    pthread_mutex_t lock;
    pthread_cond_t slot_free;
    int running; /* background compiles holding a slot */
    bool warned;
    int nprobes;
    struct probe { char cc[256]; bool ok; char version[256]; } probes[MAX_PROBES];
} G = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0,
       false, 0, {{{0}, false, {0}}}};

/* What the system-compiler path of one kernel needs; a background compile
 * owns a copy, so it never touches the context. */
typedef struct job {
    char *source;
    char symbol[48];
    char cc[256], cflags[256];
    char dir[1100];       /* "" : no usable cache directory */
    int64_t max_bytes;
    char version[256];
    char key[TGL_CACHE_KEY_HEX + 1];
    char err[TAIL + 900];
    struct tgl_kernel_ref *ref;
} job;

struct tgl_kernel_ref {
    tgl_kernel_fn fn;     /* atomic: the code calls run now (NULL: reference) */
    int tier;             /* atomic: 0 none, 1 libtcc, 2 cc                   */
    TCCState *tcc;        /* owns the libtcc code; freed at release           */
    void *dl;             /* the cc code; never dlclose'd (calls may be live) */
    pthread_mutex_t lock; /* serializes joining the background compile        */
    bool has_thread;
    pthread_t thread;
    job *job;
};

enum { BUILD_OK, BUILD_NOCC, BUILD_FAIL };

static void warn_no_cc(const char *cc, const char *using)
{
    pthread_mutex_lock(&G.lock);
    bool first = !G.warned;
    G.warned = true;
    pthread_mutex_unlock(&G.lock);
    if (first)
        fprintf(stderr, "tgl: no C compiler (%s): using %s kernels\n", cc, using);
}

/* ---- running a command ---------------------------------------------------- */

/* Splits s at blanks into argv (no quoting: compiler commands and flags
 * are words).  buf holds the words.  Returns the count, -1 if too many. */
static int split(const char *s, char *buf, size_t size, char **argv, int max)
{
    snprintf(buf, size, "%s", s);
    int n = 0;
    for (char *t = strtok(buf, " \t\n"); t; t = strtok(NULL, " \t\n")) {
        if (n == max)
            return -1;
        argv[n++] = t;
    }
    return n;
}

/* Runs argv with stdin from /dev/null and stdout+stderr captured: the
 * first line into first (may be NULL), the last TAIL bytes into tail.
 * Returns -1 when it cannot be started (no such program), else its exit
 * status (a signal counts as failure). */
static int run(char *const *argv, char *first, size_t first_size, char *tail)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        return -1;
    }
    char out[TAIL * 2 + 1];
    size_t n = 0, nfirst = 0;
    bool got_first = false;
    for (;;) {
        if (n >= TAIL * 2) { /* keep the tail only */
            memmove(out, out + n - TAIL, TAIL);
            n = TAIL;
        }
        ssize_t k = read(fds[0], out + n, TAIL * 2 - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        if (first && !got_first) {
            for (ssize_t i = 0; i < k && !got_first; i++) {
                char c = out[n + (size_t)i];
                if (c == '\n')
                    got_first = true;
                else if (nfirst + 1 < first_size)
                    first[nfirst++] = c;
            }
        }
        n += (size_t)k;
    }
    close(fds[0]);
    if (first)
        first[nfirst] = '\0';
    out[n] = '\0';
    size_t from = n > TAIL ? n - TAIL : 0;
    snprintf(tail, TAIL + 1, "%s", out + from);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* The first line of `cc --version`, probed once per process and command.
 * -1 when cc does not run. */
static int probe(const char *cc, char *version, size_t size)
{
    pthread_mutex_lock(&G.lock);
    for (int i = 0; i < G.nprobes; i++)
        if (strcmp(G.probes[i].cc, cc) == 0) {
            bool ok = G.probes[i].ok;
            snprintf(version, size, "%s", G.probes[i].version);
            pthread_mutex_unlock(&G.lock);
            return ok ? 0 : -1;
        }
    pthread_mutex_unlock(&G.lock);
    char buf[512], *argv[MAX_ARGS + 2], tail[TAIL + 1];
    int n = split(cc, buf, sizeof buf, argv, MAX_ARGS);
    bool ok = false;
    version[0] = '\0';
    if (n > 0) {
        argv[n] = "--version";
        argv[n + 1] = NULL;
        ok = run(argv, version, size, tail) == 0;
    }
    pthread_mutex_lock(&G.lock);
    if (G.nprobes < MAX_PROBES) {
        struct probe *p = &G.probes[G.nprobes++];
        snprintf(p->cc, sizeof p->cc, "%s", cc);
        snprintf(p->version, sizeof p->version, "%s", version);
        p->ok = ok;
    }
    pthread_mutex_unlock(&G.lock);
    return ok ? 0 : -1;
}

/* ---- the system compiler ---------------------------------------------------- */

/* Fills j->version and j->key.  BUILD_NOCC when cc does not run. */
static int job_key(job *j)
{
    if (probe(j->cc, j->version, sizeof j->version) != 0)
        return BUILD_NOCC;
    char flags[600];
    snprintf(flags, sizeof flags, "%s " FIXED_FLAGS " " LIBS, j->cflags);
    if (tgl_cache_key(j->source, j->cc, j->version, flags, j->key) != 0) {
        snprintf(j->err, sizeof j->err, "hashing the kernel source failed (libcrypto)");
        return BUILD_FAIL;
    }
    return BUILD_OK;
}

/* A name unique among processes and threads: pid and a clock reading. */
static void unique(char *buf, size_t size, const char *dir, const char *key, const char *suffix)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned r = (unsigned)(ts.tv_nsec ^ (ts.tv_sec << 20) ^ ((uintptr_t)buf >> 4));
    snprintf(buf, size, "%s/%s%s.tmp.%d.%08x%s", dir, key, suffix[0] == 'c' ? "" : ".so",
             (int)getpid(), r, suffix[0] == 'c' ? ".c" : "");
}

/* Compiles j's source into the cache (or a private temporary directory
 * when there is no cache) and loads it. */
static int job_compile(job *j, void **dl, tgl_kernel_fn *fn)
{
    char dir[1100];
    bool cached = j->dir[0] != '\0';
    if (cached) {
        snprintf(dir, sizeof dir, "%s", j->dir);
    } else {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/tgl-XXXXXX", t && t[0] ? t : "/tmp");
        if (!mkdtemp(dir)) {
            snprintf(j->err, sizeof j->err, "cannot make a temporary directory: %s", strerror(errno));
            return BUILD_FAIL;
        }
    }
    char src[1300], so[1300], final[1300];
    unique(src, sizeof src, dir, j->key, "c");
    unique(so, sizeof so, dir, j->key, "so");
    snprintf(final, sizeof final, "%s/%s.so", dir, j->key);
    int result = BUILD_FAIL;
    FILE *f = fopen(src, "w");
    if (!f || fputs(j->source, f) < 0 || fclose(f) != 0) {
        if (f)
            fclose(f);
        snprintf(j->err, sizeof j->err, "cannot write %.600s: %s", src, strerror(errno));
        goto done;
    }
    char words[1400], *argv[MAX_ARGS * 2 + 8];
    char line[800];
    snprintf(line, sizeof line, "%s %s " FIXED_FLAGS, j->cc, j->cflags);
    int n = split(line, words, sizeof words, argv, MAX_ARGS * 2);
    if (n <= 0) {
        snprintf(j->err, sizeof j->err, "bad compiler command '%s %s'", j->cc, j->cflags);
        goto done;
    }
    char libs[] = LIBS, *lib2 = strchr(libs, ' ');
    argv[n++] = "-o";
    argv[n++] = so;
    argv[n++] = src;
    if (lib2)
        *lib2++ = '\0';
    argv[n++] = libs;
    if (lib2)
        argv[n++] = lib2;
    argv[n] = NULL;
    char tail[TAIL + 1];
    int rc = run(argv, NULL, 0, tail);
    if (rc < 0) {
        result = BUILD_NOCC;
        goto done;
    }
    if (rc != 0) {
        snprintf(j->err, sizeof j->err, "%.150s exited with status %d:\n%s", j->cc, rc, tail);
        goto done;
    }
    if (rename(so, final) != 0) {
        snprintf(j->err, sizeof j->err, "cannot rename %.600s: %s", so, strerror(errno));
        goto done;
    }
    if (cached)
        tgl_cache_evict(dir, j->max_bytes, j->key);
    *dl = tgl_cache_load(dir, j->key, j->symbol, fn);
    if (*dl)
        result = BUILD_OK;
    else
        snprintf(j->err, sizeof j->err, "the compiled kernel %.600s does not load", final);
done:
    unlink(src);
    unlink(so);
    if (!cached) {
        unlink(final); /* the mapping stays valid after unlink */
        rmdir(dir);
    }
    return result;
}

/* ---- libtcc ---------------------------------------------------------------------- */

typedef struct tcc_msgs {
    char text[TAIL + 1];
    size_t n;
} tcc_msgs;

static void on_tcc_error(void *opaque, const char *msg)
{
    tcc_msgs *m = opaque;
    int k = snprintf(m->text + m->n, sizeof m->text - m->n, "%s\n", msg);
    if (k > 0)
        m->n = m->n + (size_t)k < sizeof m->text ? m->n + (size_t)k : sizeof m->text - 1;
}

/* Compiles source in memory; *state owns the code.  false with the
 * messages in err on failure. */
static bool build_tcc(const char *source, const char *symbol, TCCState **state, tgl_kernel_fn *fn,
                      char *err, size_t size)
{
    tcc_msgs m = {.n = 0};
    m.text[0] = '\0';
    pthread_mutex_lock(&G.tcc_lock);
    TCCState *s = tcc_new();
    void *sym = NULL;
    if (s) {
        tcc_set_error_func(s, &m, on_tcc_error);
        tcc_set_output_type(s, TCC_OUTPUT_MEMORY);
        if (tcc_compile_string(s, source) == 0 && tcc_relocate(s, TCC_RELOCATE_AUTO) >= 0)
            sym = tcc_get_symbol(s, symbol);
        if (!sym) {
            tcc_delete(s);
            s = NULL;
        }
    }
    pthread_mutex_unlock(&G.tcc_lock);
    if (!sym) {
        snprintf(err, size, "libtcc: %s", m.n ? m.text : "out of memory or symbol missing");
        return false;
    }
    *state = s;
    memcpy(fn, &sym, sizeof *fn);
    return true;
}

/* ---- background compiles --------------------------------------------------------- */

static int slots(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 2 ? (int)n - 1 : 1;
}

static void *background(void *arg)
{
    job *j = arg;
    pthread_mutex_lock(&G.lock);
    while (G.running >= slots())
        pthread_cond_wait(&G.slot_free, &G.lock);
    G.running++;
    pthread_mutex_unlock(&G.lock);
    void *dl = NULL;
    tgl_kernel_fn fn = NULL;
    int rc = job_key(j);
    if (rc == BUILD_OK && j->dir[0] && (dl = tgl_cache_load(j->dir, j->key, j->symbol, &fn)))
        rc = BUILD_OK;
    else if (rc == BUILD_OK)
        rc = job_compile(j, &dl, &fn);
    pthread_mutex_lock(&G.lock);
    G.running--;
    pthread_cond_signal(&G.slot_free);
    pthread_mutex_unlock(&G.lock);
    if (rc == BUILD_OK) {
        j->ref->dl = dl;
        __atomic_store_n(&j->ref->fn, fn, __ATOMIC_RELEASE);
        __atomic_store_n(&j->ref->tier, 2, __ATOMIC_RELEASE);
    } else if (rc == BUILD_NOCC) {
        warn_no_cc(j->cc, "libtcc");
    } else {
        /* Nobody to return an error to: the libtcc code keeps running. */
        fprintf(stderr, "tgl: internal error (please report): a kernel does not compile with %s, "
                        "keeping the libtcc code: %s\n", j->cc, j->err);
    }
    return NULL;
}

/* ---- the interface ------------------------------------------------------------------ */

static job *job_new(tgl_ctx *ctx, const tgl_fprog *prog, const char *symbol)
{
    job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->source = strdup(prog->source);
    if (!j->source) {
        free(j);
        return NULL;
    }
    snprintf(j->symbol, sizeof j->symbol, "%s", symbol);
    snprintf(j->cc, sizeof j->cc, "%s", ctx->config.cc);
    snprintf(j->cflags, sizeof j->cflags, "%s", ctx->config.cflags);
    if (tgl_cache_dir(&ctx->config, j->dir, sizeof j->dir) != 0)
        j->dir[0] = '\0';
    j->max_bytes = ctx->config.cache_max_bytes;
    return j;
}

static void job_free(job *j)
{
    if (j) {
        free(j->source);
        free(j);
    }
}

static tgl_status internal(tgl_ctx *ctx, const tgl_fprog *prog, const char *how, const char *err)
{
    return tgl_ctx_set_error(ctx, TGL_EINTERNAL,
                             "cgen: the kernel of fused program %d does not compile with %s "
                             "(a tgl bug; please report it): %s",
                             prog->id, how, err);
}

/* Compiles prog->source in the mode asked for; see the file comment. */
static tgl_status compile(tgl_ctx *ctx, tgl_fprog *prog, struct tgl_kernel_ref *ref,
                          const char *symbol)
{
    const char *mode = ctx->config.compile;
    char err[TAIL + 200];
    if (strcmp(mode, "tcc") == 0) {
        if (!build_tcc(prog->source, symbol, &ref->tcc, &ref->fn, err, sizeof err))
            return internal(ctx, prog, "libtcc", err);
        ref->tier = 1;
        return TGL_OK;
    }
    job *j = job_new(ctx, prog, symbol);
    if (!j)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "cgen: out of memory");
    bool tiered = strcmp(mode, "tiered") == 0;
    int rc = job_key(j);
    if (rc == BUILD_OK && j->dir[0] && (ref->dl = tgl_cache_load(j->dir, j->key, symbol, &ref->fn))) {
        ref->tier = 2;
    } else if (rc == BUILD_OK && !tiered) {
        rc = job_compile(j, &ref->dl, &ref->fn);
        if (rc == BUILD_OK)
            ref->tier = 2;
    } else if (tiered) {
        if (!build_tcc(prog->source, symbol, &ref->tcc, &ref->fn, err, sizeof err)) {
            job_free(j);
            return internal(ctx, prog, "libtcc", err);
        }
        ref->tier = 1;
        if (rc == BUILD_OK) {
            j->ref = ref;
            if (pthread_create(&ref->thread, NULL, background, j) == 0) {
                ref->has_thread = true;
                ref->job = j;
                return TGL_OK;
            }
        }
    }
    tgl_status st = TGL_OK;
    if (rc == BUILD_NOCC)
        warn_no_cc(j->cc, tiered ? "libtcc" : "reference");
    else if (rc == BUILD_FAIL)
        st = internal(ctx, prog, j->cc, j->err);
    job_free(j);
    return st;
}

tgl_status tgl_cgen_prepare(tgl_ctx *ctx, tgl_fprog *prog)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(prog, TGL_EINVAL, "tgl_cgen_prepare: NULL program");
    if (prog->kernel)
        return TGL_OK; /* one kernel per program, however many functions use it */
    char symbol[48];
    snprintf(symbol, sizeof symbol, "tgl_fused_%016llx", (unsigned long long)tgl_cgen_digest(prog));
    if (!prog->source) {
        tgl_status st = tgl_cgen_render(ctx, prog, symbol, &prog->source);
        if (st)
            return st;
    }
    struct tgl_kernel_ref *ref = calloc(1, sizeof *ref);
    if (!ref)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "cgen: out of memory");
    pthread_mutex_init(&ref->lock, NULL);
    tgl_status st = compile(ctx, prog, ref, symbol);
    prog->kernel = ref;
    if (st) {
        tgl_cgen_release(prog);
        return st;
    }
    return TGL_OK;
}

tgl_kernel_fn tgl_cgen_kernel(const tgl_fprog *prog)
{
    return prog && prog->kernel ? __atomic_load_n(&prog->kernel->fn, __ATOMIC_ACQUIRE) : NULL;
}

int tgl_cgen_tier(const tgl_fprog *prog)
{
    return prog && prog->kernel ? __atomic_load_n(&prog->kernel->tier, __ATOMIC_ACQUIRE) : 0;
}

void tgl_cgen_wait(tgl_fprog *prog)
{
    struct tgl_kernel_ref *ref = prog ? prog->kernel : NULL;
    if (!ref)
        return;
    pthread_mutex_lock(&ref->lock);
    if (ref->has_thread) {
        pthread_join(ref->thread, NULL);
        ref->has_thread = false;
        job_free(ref->job);
        ref->job = NULL;
    }
    pthread_mutex_unlock(&ref->lock);
}

void tgl_cgen_release(tgl_fprog *prog)
{
    if (!prog)
        return;
    struct tgl_kernel_ref *ref = prog->kernel;
    if (ref) {
        tgl_cgen_wait(prog);
        if (ref->tcc) {
            pthread_mutex_lock(&G.tcc_lock);
            tcc_delete(ref->tcc);
            pthread_mutex_unlock(&G.tcc_lock);
        }
        pthread_mutex_destroy(&ref->lock);
        free(ref);
        prog->kernel = NULL;
    }
    free(prog->source);
    prog->source = NULL;
}
