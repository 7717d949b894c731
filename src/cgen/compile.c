/*
 * compile.c — making a fused program's kernel callable (cgen.h):
 *
 *   libtcc   compiles the source in memory in a fraction of a millisecond;
 *            slow code, but at once.  Looked up in the running program
 *            (see find_tcc): a program that does not link it has no
 *            libtcc tier.
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
 * TGL_EINTERNAL with the compiler's message; but only when the compiler
 * rejects the source (-fsyntax-only says so).  The disk is never tgl's
 * bug nor the user's call's failure: a kernel that cannot be written into
 * the cache (full disk, a directory at the entry's name) is compiled in a
 * private temporary directory, and when that fails too the program keeps
 * its current code; one warning per process for each.
 *
 * Process-wide state, all of it in `G` and behind `G.lock`, except
 * `G.tcc_lock` itself: libtcc is not thread-safe (its parser keeps global
 * state), so every libtcc call holds G.tcc_lock; "warn once per process"
 * needs flags; the compiler's --version is probed once per process and
 * command; and the background compiles' queue and workers.  (libtcc's
 * entry points, `T`, are found once and then read-only.)
 *
 * Background compiles.  A kernel to build in the background is a job
 * appended to one FIFO queue (a list: it grows as needed), which at most
 * G.max_workers threads take from, one job at a time: one fewer than the
 * online CPUs, at least one, so that preparing many kernels neither starts
 * one compiler per kernel at once nor one thread per kernel.  A worker is
 * started when a job is queued and fewer workers than jobs are free (up
 * to the bound), and exits when it finds the queue empty: a process that
 * compiles nothing in the background has no worker, and an idle one none
 * left.  A job is shared by its kernel and the queue (then its worker),
 * each holding a reference (j->refs, under G.lock): a kernel released
 * before its job ran only marks it cancelled, and the worker publishes
 * into the kernel only while it is not (under G.lock), so a job never
 * touches a freed kernel and the last reference frees the job.  A
 * cancelled job still runs into the cache when its turn comes (a script
 * that fails right after compiling stores its kernels), unless other jobs
 * are queued behind it then: it is dropped for them.  Workers block every
 * signal (a Ctrl-C is the Lua thread's); the compilers they start get an
 * empty mask.
 *
 * At exit.  Background compiles are listed in G.pending from the moment
 * they are queued until their worker is done with them; tgl_cgen_wait_all
 * (tgl_compile_wait_all, which the host calls before closing the Lua state,
 * and an atexit handler that the first one registers) waits for them up
 * to config.exit_wait seconds, so that a short script still stores its
 * kernels in the cache.  At the deadline the remaining ones are
 * abandoned: G.exiting makes the workers drop the queued jobs, and the
 * compilers still running (each in its own process group) get SIGTERM,
 * then SIGKILL, and their temporaries are removed.
 *
 * At fork.  A child of fork() has none of the parent's threads: the
 * parent's queued and running jobs stay the parent's (it stores them in
 * the cache), and in the child they are marked done as if abandoned, so
 * that nothing there waits for them (f:wait_compiled, the exit wait) and
 * their kernels keep the code they run; the child's own background
 * compiles start workers of its own.  The handlers hold G.tcc_lock and
 * G.lock across the fork so that the child's copies are consistent, and
 * wait until no compiler's pipe is half made (G.spawning).
 */
#include "cgen/cgint.h"
#include "cgen/expr.h"
#include "engine/hash.h"
#include "engine/ops/ops.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libtcc.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
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

struct job;

static struct {
    pthread_mutex_t tcc_lock;
    pthread_mutex_t lock;
    /* Commands whose pipe has its write end open in this process, and
     * whether a fork waits for them to close it (then no new one opens):
     * a child of fork() that kept a copy of that end would keep the
     * reader from ever seeing the end of the output.  spawn_cv: broadcast
     * when either changes. */
    int spawning;
    bool forking;
    pthread_cond_t spawn_cv;
    bool warned, warned_tcc, warned_io, warned_uncached;
    int nprobes;
    struct probe { char cc[256]; bool ok; char version[256]; } probes[MAX_PROBES];
    /* Background compiles (see "Background compiles" above). */
    struct job *head, *tail; /* the queue, oldest first, through job.qnext */
    int nqueued;
    int workers;           /* worker threads alive                         */
    int busy;              /* of them, those running a job                 */
    int max_workers;       /* the bound; 0 until the first job is queued   */
    /* Broadcast when the last pending job leaves G.pending (the exit
     * wait).  A job's waiters wait on its own done_cv: one condition for
     * all woke each f:wait_compiled at every job, and the worker it then
     * contended with took about 15% longer over 2000 kernels. */
    pthread_cond_t idle;
    struct job *pending;   /* queued or running; doubly linked through job.next/prev */
    int npending;
    double exit_wait;      /* the setting of the latest one queued         */
    bool exiting;          /* past the deadline: abandon them all          */
    bool registered;       /* tgl_cgen_wait_all is registered with atexit      */
} G = {.tcc_lock = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER,
       .spawn_cv = PTHREAD_COND_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER};

/* The fork handlers (see "At fork"), registered before the first command
 * runs or the first job is queued: not under G.lock, since fork holds its
 * own lock while it calls them. */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void register_fork(void);

/* What the system-compiler path of one kernel needs; a background compile
 * owns a copy, so it never touches the caller's settings. */
typedef struct job {
    char *source;
    char symbol[48];
    char backend[16];     /* the backend's name, for the cache key */
    char cc[256], cflags[256];
    char dir[1100];       /* "" : no usable cache directory */
    int64_t max_bytes;
    char version[256];
    char key[TGL_CACHE_KEY_HEX + 1];
    char err[TAIL + 900];
    /* Set when the kernel was built but could not be kept in the cache:
     * why (the one-time warning quotes it). */
    char uncached[TAIL + 900];
    /* Whether the compiler accepts the source as C (-fsyntax-only): 0 not
     * asked yet, 1 yes, -1 no.  Tells a rejected source from a failure to
     * write the compiler's output. */
    int accepted;
    bool step;     /* a whole step, not a fused program's kernel */
    /* Under G.lock (see "Background compiles" above): the references of
     * the kernel and of the queue or worker; whether the job is done (its
     * result published, or dropped); whether its kernel was released
     * (then ref is not to be touched). */
    int refs;
    bool done, cancelled;
    pthread_cond_t done_cv; /* broadcast when done is set */
    bool tcc_tier; /* the program runs libtcc code meanwhile */
    struct kernel *ref;   /* where to publish; only while !cancelled */
    double exit_wait;     /* config.exit_wait when it was made */
    /* Under G.lock: the queue's link, the list of pending compiles, and
     * the process group of the compiler running for it (0: none). */
    struct job *qnext;
    struct job *next, *prev;
    pid_t child;
} job;

/* A compiled kernel.  The head comes first: the engine holds a kernel as
 * its tgl_kernel_ref, and reads head.tier (atomic: 0 none, 1 libtcc, 2 cc). */
typedef struct kernel {
    tgl_kernel_ref head;
    tgl_kernel_fn fn;     /* atomic: the code calls run now (NULL: reference) */
    TCCState *tcc;        /* owns the libtcc code; freed at release           */
    void *dl;             /* the cc code (dlopen handle); closed at release   */
    job *job;             /* the background compile, or NULL                 */
} kernel;

/* BUILD_IO: the kernel could not be built for a reason outside its
 * source (a full disk, a directory that cannot be written, an object that
 * cannot be renamed): never tgl's bug and never the user's call's failure;
 * the caller keeps the code it has and warns once. */
enum { BUILD_OK, BUILD_NOCC, BUILD_FAIL, BUILD_ABANDONED, BUILD_IO };

static bool first_time(bool *flag);

static void warn_no_cc(const char *cc, const char *using)
{
    if (first_time(&G.warned))
        fprintf(stderr, "tgl: no C compiler (%s): using %s kernels\n", cc, using);
}

/* True the first time it is called with *flag false (under G.lock): for
 * the warnings printed once per process. */
static bool first_time(bool *flag)
{
    pthread_mutex_lock(&G.lock);
    bool first = !*flag;
    *flag = true;
    pthread_mutex_unlock(&G.lock);
    return first;
}

/* why on one line, for a warning: the compiler's output lines joined by
 * "; " (by a space after a colon). */
static void one_line(char *out, size_t size, const char *why)
{
    size_t n = 0;
    bool gap = false;
    for (const char *p = why; *p && n + 3 < size; p++) {
        if (*p == '\n' || *p == '\r') {
            gap = n > 0;
            continue;
        }
        if (gap && *p != ';') {
            if (out[n - 1] != ':')
                out[n++] = ';';
            out[n++] = ' ';
        }
        gap = false;
        out[n++] = *p;
    }
    out[n] = '\0';
}

/* A kernel that could not be built for want of disk (BUILD_IO): the
 * program keeps `using`. */
static void warn_io(const char *why, const char *using)
{
    if (first_time(&G.warned_io)) {
        char line[TAIL + 1000];
        one_line(line, sizeof line, why);
        fprintf(stderr, "tgl: cannot write compiled kernels (%s): using %s\n", line, using);
    }
}

/* A kernel built, but outside the cache. */
static void warn_uncached(const char *dir, const char *why)
{
    if (first_time(&G.warned_uncached)) {
        char line[TAIL + 1000];
        one_line(line, sizeof line, why);
        fprintf(stderr, "tgl: cannot store kernels in the cache %s (%s): they are compiled for "
                        "this process only\n", dir, line);
    }
}

/* ---- running a command ---------------------------------------------------- */

/* Splits s at blanks into argv (no quoting: compiler commands and flags
 * are words).  buf holds the words.  Returns the count, -1 if too many. */
static int split(const char *s, char *buf, size_t size, char **argv, int max)
{
    snprintf(buf, size, "%s", s);
    int n = 0;
    char *save = NULL; /* strtok_r: background compiles split at the same time */
    for (char *t = strtok_r(buf, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save)) {
        if (n == max)
            return -1;
        argv[n++] = t;
    }
    return n;
}

/* The write end of a command's pipe is closed (see G.spawning). */
static void spawned(void)
{
    pthread_mutex_lock(&G.lock);
    if (--G.spawning == 0)
        pthread_cond_broadcast(&G.spawn_cv);
    pthread_mutex_unlock(&G.lock);
}

/* Runs argv with stdin from /dev/null and stdout+stderr captured: the
 * first line into first (may be NULL), the last TAIL bytes into tail.
 * With a slot, the command runs in a process group of its own, whose id
 * is kept in *slot (under G.lock) while it runs, for the exit deadline to
 * stop it (at once if that has passed).  Returns -1 when it cannot be
 * started (no such program), else its exit status (a signal counts as
 * failure). */
static int run(char *const *argv, char *first, size_t first_size, char *tail, pid_t *slot)
{
    pthread_once(&fork_once, register_fork);
    pthread_mutex_lock(&G.lock);
    while (G.forking)
        pthread_cond_wait(&G.spawn_cv, &G.lock);
    G.spawning++;
    pthread_mutex_unlock(&G.lock);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        spawned();
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    /* An empty signal mask: the compile workers block every signal, and a
     * compiler must still stop at the exit deadline's SIGTERM. */
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    short flags = POSIX_SPAWN_SETSIGMASK;
    if (slot) {
        posix_spawnattr_setpgroup(&attr, 0);
        flags |= POSIX_SPAWN_SETPGROUP;
    }
    posix_spawnattr_setflags(&attr, flags);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv, environ);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    spawned();
    if (rc != 0) {
        close(fds[0]);
        return -1;
    }
    if (slot) {
        pthread_mutex_lock(&G.lock);
        if (G.exiting)
            kill(-pid, SIGKILL);
        else
            *slot = pid;
        pthread_mutex_unlock(&G.lock);
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
    if (slot) {
        /* Forget the group before the child is reaped (its id could be
         * reused after): wait without reaping first. */
        siginfo_t si;
        while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR)
            ;
        pthread_mutex_lock(&G.lock);
        *slot = 0;
        pthread_mutex_unlock(&G.lock);
    }
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
        ok = run(argv, version, size, tail, NULL) == 0;
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
    if (tgl_cache_key(j->backend, tgl_cache_host_target(), j->source, j->cc, j->version, flags,
                      j->key) != 0) {
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

/* Whether the exit deadline has passed (compilers are being stopped). */
static bool exiting(void)
{
    pthread_mutex_lock(&G.lock);
    bool e = G.exiting;
    pthread_mutex_unlock(&G.lock);
    return e;
}

/* Writes text to a new file at path.  O_EXCL: whatever is already at the
 * name (a FIFO, a link) is neither followed nor waited on.  0, or -1 with
 * errno (a full disk shows up at write or at close). */
static int write_new(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    size_t n = strlen(text);
    while (n > 0) {
        ssize_t k = write(fd, text, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            int e = k < 0 ? errno : EIO;
            close(fd);
            errno = e;
            return -1;
        }
        text += k;
        n -= (size_t)k;
    }
    /* close reports late write errors; the descriptor is gone either way
     * (never closed twice, never retried). */
    return close(fd);
}

/* The compiler's command line for j in argv (words holds them): cc, the
 * flags, then the words of `tail` (e.g. "-o out.so src.c -lmvec -lm"),
 * split at blanks like the rest.  Returns the count, <= 0 when it does
 * not fit. */
static int compiler_argv(const job *j, const char *tail, char *words, size_t size, char **argv)
{
    char line[3200];
    int w = snprintf(line, sizeof line, "%s %s " FIXED_FLAGS " %s", j->cc, j->cflags, tail);
    if (w < 0 || (size_t)w >= sizeof line || strlen(line) >= size)
        return -1;
    int n = split(line, words, size, argv, MAX_ARGS * 2);
    if (n > 0)
        argv[n] = NULL;
    return n;
}

/* Whether the compiler accepts the source at src as C: -fsyntax-only
 * writes no file, so a compile that failed although this passes failed at
 * writing its output (a full disk), not at the source.  Asked once per
 * job. */
static bool source_accepted(job *j, const char *src)
{
    if (j->accepted == 0) {
        char tail[1400], words[3200], *argv[MAX_ARGS * 2 + 8], out[TAIL + 1];
        snprintf(tail, sizeof tail, "-fsyntax-only %s", src);
        int n = compiler_argv(j, tail, words, sizeof words, argv);
        j->accepted = n > 0 && run(argv, NULL, 0, out, &j->child) == 0 ? 1 : -1;
    }
    return j->accepted > 0;
}

/* Compiles j's source in dir under temporary names and loads the object.
 * With keep (dir is the cache), the object is then renamed into place as
 * <dir>/<key>.so; when that fails, the kernel is loaded all the same and
 * j->uncached says why.  BUILD_IO when the files could not be written
 * (j->err says why). */
static int build_in(job *j, const char *dir, bool keep, void **dl, tgl_kernel_fn *fn)
{
    char src[1300], so[1300], final[1300];
    unique(src, sizeof src, dir, j->key, "c");
    unique(so, sizeof so, dir, j->key, "so");
    snprintf(final, sizeof final, "%s/%s.so", dir, j->key);
    int result = BUILD_FAIL;
    if (write_new(src, j->source) != 0) {
        snprintf(j->err, sizeof j->err, "cannot write %.600s: %s", src, strerror(errno));
        result = BUILD_IO;
        goto done;
    }
    char tail[2800], words[3200], *argv[MAX_ARGS * 2 + 8];
    snprintf(tail, sizeof tail, "-o %s %s " LIBS, so, src);
    if (compiler_argv(j, tail, words, sizeof words, argv) <= 0) {
        snprintf(j->err, sizeof j->err, "bad compiler command '%s %s'", j->cc, j->cflags);
        goto done;
    }
    char out[TAIL + 1];
    int rc = run(argv, NULL, 0, out, &j->child);
    bool accepted = rc > 0 && source_accepted(j, src);
    if (rc != 0 && exiting()) { /* stopped at the exit deadline: no entry, no message */
        result = BUILD_ABANDONED;
        goto done;
    }
    if (rc < 0) {
        result = BUILD_NOCC;
        goto done;
    }
    if (rc != 0) {
        snprintf(j->err, sizeof j->err, "%.150s exited with status %d:\n%s", j->cc, rc, out);
        result = accepted ? BUILD_IO : BUILD_FAIL;
        goto done;
    }
    /* Loaded before the rename: a kernel that compiled runs whether or
     * not the cache can keep it. */
    if (!(*dl = tgl_cache_load_file(so, j->symbol, fn))) {
        snprintf(j->err, sizeof j->err, "the compiled kernel %.600s does not load", so);
        goto done;
    }
    result = BUILD_OK;
    if (keep) {
        if (rename(so, final) != 0)
            snprintf(j->uncached, sizeof j->uncached, "cannot rename %.600s to %s.so: %s", so,
                     j->key, strerror(errno));
        else
            tgl_cache_evict(dir, j->max_bytes, j->key);
    }
done:
    unlink(src);
    unlink(so); /* gone after the rename; the mapping stays valid after unlink */
    return result;
}

/* Compiles j's source into the cache and loads it.  When the cache cannot
 * be written (no directory, a full disk, an entry that cannot be
 * replaced), in a private temporary directory instead, with one warning
 * per process; BUILD_IO when that fails too. */
static int job_compile(job *j, void **dl, tgl_kernel_fn *fn)
{
    char why[sizeof j->err];
    why[0] = j->uncached[0] = '\0';
    if (j->dir[0]) {
        int rc = build_in(j, j->dir, true, dl, fn);
        if (rc == BUILD_OK && j->uncached[0])
            warn_uncached(j->dir, j->uncached);
        if (rc != BUILD_IO)
            return rc;
        snprintf(why, sizeof why, "%s", j->err);
    }
    char dir[1100];
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%.1000s/tgl-XXXXXX", t && t[0] ? t : "/tmp");
    int rc = BUILD_IO;
    if (!mkdtemp(dir))
        snprintf(j->err, sizeof j->err, "cannot make a temporary directory %.1000s: %s", dir,
                 strerror(errno));
    else {
        rc = build_in(j, dir, false, dl, fn);
        rmdir(dir);
    }
    if (why[0] && rc == BUILD_OK)
        warn_uncached(j->dir, why);
    else if (why[0] && rc == BUILD_IO) {
        char both[sizeof j->err + 64];
        snprintf(both, sizeof both, "%.700s; and in a temporary directory: %.700s", why, j->err);
        snprintf(j->err, sizeof j->err, "%.*s", (int)(sizeof j->err - 1), both);
    }
    return rc;
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

/* The libm functions kernels may call (expr.h: TGL_CGEN_MATH), handed to libtcc
 * directly: with -nostdlib it links neither libc nor its runtime library
 * (libtcc1.a), which saves time and needs nothing installed beside
 * libtcc.a. */
static const struct {
    const char *name;
    const void *fn;
} libm_syms[] = {
#define F2(name, arity) {#name, (const void *)name}, {#name "f", (const void *)name##f},
    TGL_CGEN_MATH(F2)
#undef F2
};

#if defined(__GLIBC__)
/* glibc's <stdint.h> costs libtcc more time to parse than the whole
 * kernel; its include guard and these typedefs stand in for it.  Only the
 * kernel uses them, so only their sizes (the ABI) matter. */
#define TCC_PRELUDE                                                              \
    "#define _STDINT_H 1\n"                                                      \
    "typedef signed char int8_t; typedef unsigned char uint8_t;\n"               \
    "typedef int int32_t; typedef unsigned int uint32_t;\n"                      \
    "typedef long long int64_t; typedef unsigned long long uint64_t;\n"          \
    "typedef long long intptr_t; typedef unsigned long long uintptr_t;\n"
_Static_assert(sizeof(long long) == 8 && sizeof(void *) == 8, "TCC_PRELUDE assumes LP64");
#else
#define TCC_PRELUDE ""
#endif

/* libtcc's entry points, looked up in the running program.  Debian's
 * libtcc.a is not position-independent, so it cannot be linked into
 * libtgl.so: the programs (the tgl host, the tests) link it and export its
 * symbols, and a program without it simply has no libtcc tier. */
static struct {
    TCCState *(*new_)(void);
    void (*delete_)(TCCState *);
    void (*set_error_func)(TCCState *, void *, TCCErrorFunc);
    void (*set_options)(TCCState *, const char *);
    int (*set_output_type)(TCCState *, int);
    int (*add_symbol)(TCCState *, const char *, const void *);
    int (*compile_string)(TCCState *, const char *);
    int (*relocate)(TCCState *, void *);
    void *(*get_symbol)(TCCState *, const char *);
    bool ok;
} T; /* written once by find_tcc, then read-only */
static pthread_once_t T_once = PTHREAD_ONCE_INIT;

static void find_tcc(void)
{
    static const char *names[] = {"tcc_new", "tcc_delete", "tcc_set_error_func",
                                  "tcc_set_options", "tcc_set_output_type", "tcc_add_symbol",
                                  "tcc_compile_string", "tcc_relocate", "tcc_get_symbol"};
    void *slots[] = {&T.new_, &T.delete_, &T.set_error_func, &T.set_options,
                     &T.set_output_type, &T.add_symbol, &T.compile_string, &T.relocate,
                     &T.get_symbol};
    bool ok = true;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *f = dlsym(RTLD_DEFAULT, names[i]);
        ok = ok && f;
        memcpy(slots[i], &f, sizeof f); /* POSIX: a data pointer holds a function's */
    }
    T.ok = ok;
}

static bool have_tcc(void)
{
    pthread_once(&T_once, find_tcc);
    return T.ok;
}

static void warn_no_tcc(void)
{
    if (first_time(&G.warned_tcc))
        fprintf(stderr, "tgl: libtcc is not linked into this program: no libtcc kernels\n");
}

/* Compiles source in memory; *state owns the code.  BUILD_NOCC when there
 * is no libtcc, BUILD_FAIL with the messages in err. */
static int build_tcc(const char *source, const char *symbol, TCCState **state, tgl_kernel_fn *fn,
                     char *err, size_t size)
{
    if (!have_tcc())
        return BUILD_NOCC;
    tcc_msgs m = {.n = 0};
    m.text[0] = '\0';
    size_t n = strlen(TCC_PRELUDE), len = strlen(source);
    char *text = malloc(n + len + 1);
    if (!text) {
        snprintf(err, size, "out of memory");
        return BUILD_FAIL;
    }
    memcpy(text, TCC_PRELUDE, n);
    memcpy(text + n, source, len + 1);
    pthread_mutex_lock(&G.tcc_lock);
    TCCState *s = T.new_();
    void *sym = NULL;
    if (s) {
        T.set_error_func(s, &m, on_tcc_error);
        T.set_options(s, "-nostdlib");
        T.set_output_type(s, TCC_OUTPUT_MEMORY);
        for (size_t i = 0; i < sizeof libm_syms / sizeof libm_syms[0]; i++)
            T.add_symbol(s, libm_syms[i].name, libm_syms[i].fn);
        if (T.compile_string(s, text) == 0 && T.relocate(s, TCC_RELOCATE_AUTO) >= 0)
            sym = T.get_symbol(s, symbol);
        if (!sym) {
            T.delete_(s);
            s = NULL;
        }
    }
    pthread_mutex_unlock(&G.tcc_lock);
    free(text);
    if (!sym) {
        snprintf(err, size, "libtcc: %s", m.n ? m.text : "out of memory or symbol missing");
        return BUILD_FAIL;
    }
    *state = s;
    memcpy(fn, &sym, sizeof *fn);
    return BUILD_OK;
}

/* ---- background compiles --------------------------------------------------------- */

/* The workers' bound: one fewer than the online CPUs (the thread that
 * compiles functions keeps one), at least one. */
static int worker_bound(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 2 ? (int)n - 1 : 1;
}

static void job_free(job *j);

/* Takes j off G.pending and drops the queue's (its worker's) reference,
 * G.lock held.  True when that was the last one: the caller frees j once
 * it has unlocked. */
static bool job_retire_locked(job *j)
{
    if (j->prev)
        j->prev->next = j->next;
    else
        G.pending = j->next;
    if (j->next)
        j->next->prev = j->prev;
    j->next = j->prev = NULL;
    if (--G.npending == 0)
        pthread_cond_broadcast(&G.idle);
    return --j->refs == 0;
}

/* A worker's turn at j (G.lock not held): compiles it when run says so,
 * else only drops it; publishes the code into j's kernel unless that was
 * released meanwhile; then retires j. */
static void job_run(job *j, bool run)
{
    void *dl = NULL;
    tgl_kernel_fn fn = NULL;
    int rc = BUILD_ABANDONED;
    if (run) {
        rc = job_key(j);
        if (rc == BUILD_OK && !(j->dir[0] && (dl = tgl_cache_load(j->dir, j->key, j->symbol, &fn))))
            rc = job_compile(j, &dl, &fn);
    }
    pthread_mutex_lock(&G.lock);
    bool live = !j->cancelled;
    if (rc == BUILD_OK && live) {
        j->ref->dl = dl;
        __atomic_store_n(&j->ref->fn, fn, __ATOMIC_RELEASE);
        __atomic_store_n(&j->ref->head.tier, 2, __ATOMIC_RELEASE);
    }
    j->done = true;
    pthread_cond_broadcast(&j->done_cv);
    pthread_mutex_unlock(&G.lock);
    if (rc == BUILD_OK && !live)
        dlclose(dl); /* released meanwhile: nothing calls it (the cache keeps it) */
    if (rc == BUILD_NOCC)
        warn_no_cc(j->cc, j->tcc_tier ? "libtcc" : "reference");
    else if (rc == BUILD_IO && live)
        warn_io(j->err, j->step ? "its kernels one by one for the whole step"
                        : j->tcc_tier ? "libtcc kernels" : "reference kernels");
    else if (rc == BUILD_FAIL && live)
        /* Nobody to return an error to: the code that runs now stays. */
        fprintf(stderr, "tgl: internal error (please report): a kernel does not compile with %s, "
                        "keeping the code it runs now: %s\n", j->cc, j->err);
    /* Retired last, so that the exit wait also waits for the messages. */
    pthread_mutex_lock(&G.lock);
    bool last = job_retire_locked(j);
    pthread_mutex_unlock(&G.lock);
    if (last)
        job_free(j);
}

/* A compile worker: takes the queue's jobs, oldest first, until it finds
 * the queue empty; then it exits. */
static void *worker(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&G.lock);
    for (job *j; (j = G.head) != NULL;) {
        G.head = j->qnext;
        if (!G.head)
            G.tail = NULL;
        G.nqueued--;
        j->qnext = NULL;
        /* A released kernel's job yields to the jobs queued behind it,
         * and is of no use without a cache to fill; past the exit
         * deadline every job is dropped. */
        bool run = !G.exiting && !(j->cancelled && (G.head || !j->dir[0]));
        G.busy++;
        pthread_mutex_unlock(&G.lock);
        job_run(j, run);
        pthread_mutex_lock(&G.lock);
        G.busy--;
    }
    G.workers--;
    pthread_mutex_unlock(&G.lock);
    return NULL;
}

/* Starts a detached worker with every signal blocked (a process-directed
 * signal, Ctrl-C, goes to a thread that runs Lua).  G.lock held: the
 * worker waits for it. */
static bool start_worker(void)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_t t;
    bool ok = pthread_attr_init(&attr) == 0;
    if (ok) {
        ok = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
             pthread_create(&t, &attr, worker, NULL) == 0;
        pthread_attr_destroy(&attr);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return ok;
}

/* ---- at fork ------------------------------------------------------------------------ */

/* G.tcc_lock before G.lock (no thread holding G.lock waits for
 * G.tcc_lock); then the commands being started close their pipes' write
 * ends, and no new one starts. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&G.tcc_lock);
    pthread_mutex_lock(&G.lock);
    G.forking = true;
    while (G.spawning > 0)
        pthread_cond_wait(&G.spawn_cv, &G.lock);
}

static void fork_parent(void)
{
    G.forking = false;
    pthread_cond_broadcast(&G.spawn_cv);
    pthread_mutex_unlock(&G.lock);
    pthread_mutex_unlock(&G.tcc_lock);
}

/* The child has no worker: the parent's jobs are marked done here (their
 * kernels keep their code) and leave the child's lists; see "At fork". */
static void fork_child(void)
{
    /* Their waiters were other threads (a job's too: made anew before
     * job_free destroys it). */
    pthread_cond_init(&G.idle, NULL);
    pthread_cond_init(&G.spawn_cv, NULL);
    G.forking = false;
    job *j = G.pending;
    G.pending = NULL;
    G.npending = 0;
    G.head = G.tail = NULL;
    G.nqueued = G.workers = G.busy = 0;
    while (j) {
        job *next = j->next;
        j->qnext = j->next = j->prev = NULL;
        j->child = 0; /* the parent's compiler, not this process's */
        j->done = true;
        pthread_cond_init(&j->done_cv, NULL);
        if (--j->refs == 0)
            job_free(j);
        j = next;
    }
    pthread_mutex_unlock(&G.lock);
    pthread_mutex_unlock(&G.tcc_lock);
}

static void register_fork(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* ---- at exit ------------------------------------------------------------------------ */

/* Waits on G.idle (G.lock held) until no compile is pending or until
 * deadline (CLOCK_REALTIME, what pthread_cond_timedwait measures).
 * Returns whether none is pending. */
static bool wait_idle(const struct timespec *deadline)
{
    while (G.npending > 0)
        if (pthread_cond_timedwait(&G.idle, &G.lock, deadline) == ETIMEDOUT)
            break;
    return G.npending == 0;
}

static struct timespec after(double seconds)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    double whole = floor(seconds);
    t.tv_sec += (time_t)whole;
    t.tv_nsec += (long)((seconds - whole) * 1e9);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

static void signal_compilers(int sig)
{
    for (job *j = G.pending; j; j = j->next)
        if (j->child > 0)
            kill(-j->child, sig);
}

/* Registered with atexit by the first background compile; also called
 * by tgl_compile_wait_all, before the program releases its functions. */
void tgl_cgen_wait_all(void)
{
    pthread_mutex_lock(&G.lock);
    struct timespec deadline = after(G.exit_wait);
    if (!wait_idle(&deadline)) {
        /* Abandon the rest: the workers drop the queued jobs, the
         * compilers running stop (SIGTERM lets gcc's driver delete its own
         * temporaries), and each worker removes its temporaries. */
        G.exiting = true;
        signal_compilers(SIGTERM);
        deadline = after(0.5);
        if (!wait_idle(&deadline)) {
            signal_compilers(SIGKILL);
            deadline = after(0.5);
            wait_idle(&deadline);
        }
    }
    G.exiting = true; /* whatever is compiled after this is never waited for */
    pthread_mutex_unlock(&G.lock);
}

/* Lists j as pending and appends it to the queue, starting a worker when
 * fewer are free than jobs are queued (up to the bound).  False, with j
 * still the caller's alone, once exit has begun or when no worker runs
 * and none could start. */
static bool job_queue(job *j)
{
    pthread_once(&fork_once, register_fork);
    pthread_mutex_lock(&G.lock);
    bool ok = !G.exiting;
    if (ok) {
        if (!G.registered)
            G.registered = atexit(tgl_cgen_wait_all) == 0;
        if (!G.max_workers)
            G.max_workers = worker_bound();
        j->prev = NULL;
        j->next = G.pending;
        if (G.pending)
            G.pending->prev = j;
        G.pending = j;
        G.npending++;
        G.exit_wait = j->exit_wait;
        j->qnext = NULL;
        if (G.tail)
            G.tail->qnext = j;
        else
            G.head = j;
        G.tail = j;
        G.nqueued++;
        if (G.workers < G.max_workers && G.workers - G.busy < G.nqueued) {
            if (start_worker()) {
                G.workers++;
            } else if (G.workers == 0) {
                /* Nobody would run it (with no worker the queue held j
                 * alone): take it back. */
                G.head = G.tail = NULL;
                G.nqueued = 0;
                (void)job_retire_locked(j); /* the caller frees j */
                ok = false;
            }
        }
    }
    pthread_mutex_unlock(&G.lock);
    return ok;
}

/* ---- the interface ------------------------------------------------------------------ */

static job *job_new(const tgl_backend_opts *o, const tgl_backend *be, const char *source,
                    const char *symbol)
{
    job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->source = strdup(source);
    if (!j->source) {
        free(j);
        return NULL;
    }
    snprintf(j->symbol, sizeof j->symbol, "%s", symbol);
    snprintf(j->backend, sizeof j->backend, "%s", be->name);
    snprintf(j->cc, sizeof j->cc, "%s", o->cc);
    snprintf(j->cflags, sizeof j->cflags, "%s", o->cflags);
    if (tgl_cache_dir(o->cache_dir, j->dir, sizeof j->dir) != 0)
        j->dir[0] = '\0';
    j->max_bytes = o->cache_max_bytes;
    j->exit_wait = o->exit_wait;
    pthread_cond_init(&j->done_cv, NULL);
    return j;
}

static void job_free(job *j)
{
    if (j) {
        pthread_cond_destroy(&j->done_cv);
        free(j->source);
        free(j);
    }
}

static tgl_status internal(tgl_errbuf *e, const tgl_fused_prog *prog, const char *how, const char *msg)
{
    return tgl_errbuf_set(e, TGL_EINTERNAL,
                          "cgen: the kernel of fused program %d does not compile with %s "
                          "(a tgl bug; please report it): %s",
                          prog->id, how, msg);
}

/* Hands j to the background compiles, to publish into k (the queue then
 * holds j's second reference); false when it could not be queued (j is
 * still the caller's). */
static bool start_background(job *j, kernel *k, bool tcc_tier)
{
    j->ref = k;
    j->tcc_tier = tcc_tier;
    j->refs = 2;
    k->job = j;
    if (job_queue(j))
        return true;
    k->job = NULL;
    return false;
}

/* Compiles source in the mode asked for into k; see the file comment. */
static tgl_status compile(const tgl_backend_opts *o, const tgl_backend *be, const tgl_fused_prog *prog,
                          const char *source, const char *symbol, kernel *k, tgl_errbuf *e)
{
    const char *mode = o->compile;
    char err[TAIL + 200];
    int rt;
    if (strcmp(mode, "tcc") == 0) {
        rt = build_tcc(source, symbol, &k->tcc, &k->fn, err, sizeof err);
        if (rt == BUILD_FAIL)
            return internal(e, prog, "libtcc", err);
        if (rt == BUILD_NOCC)
            warn_no_tcc();
        k->head.tier = rt == BUILD_OK;
        return TGL_OK;
    }
    job *j = job_new(o, be, source, symbol);
    if (!j)
        return tgl_errbuf_set(e, TGL_ENOMEM, "cgen: out of memory");
    bool tiered = strcmp(mode, "tiered") == 0;
    int rc = job_key(j);
    if (rc == BUILD_OK && j->dir[0] &&
        (k->dl = tgl_cache_load(j->dir, j->key, symbol, &k->fn))) {
        k->head.tier = 2;
    } else if (rc == BUILD_OK && !tiered) {
        rc = job_compile(j, &k->dl, &k->fn);
        if (rc == BUILD_OK)
            k->head.tier = 2;
    } else if (tiered) {
        /* libtcc code now (the reference path without libtcc); cc later. */
        rt = build_tcc(source, symbol, &k->tcc, &k->fn, err, sizeof err);
        if (rt == BUILD_FAIL) {
            job_free(j);
            return internal(e, prog, "libtcc", err);
        }
        k->head.tier = rt == BUILD_OK;
        if (rc == BUILD_OK && start_background(j, k, k->head.tier == 1))
            return TGL_OK;
    }
    tgl_status st = TGL_OK;
    if (rc == BUILD_NOCC)
        warn_no_cc(j->cc, k->head.tier == 1 ? "libtcc" : "reference");
    else if (rc == BUILD_IO)
        warn_io(j->err, k->head.tier == 1 ? "libtcc kernels" : "reference kernels");
    else if (rc == BUILD_FAIL)
        st = internal(e, prog, j->cc, j->err);
    job_free(j);
    return st;
}

tgl_status tgl_cgen_compile(const tgl_backend_opts *o, const tgl_backend *be,
                            const tgl_fused_prog *prog, tgl_kernel_ref **out, tgl_errbuf *err)
{
    if (!o || !be || !prog || !out)
        return tgl_errbuf_set(err, TGL_EINVAL, "tgl_cgen_compile: NULL argument");
    char symbol[48];
    snprintf(symbol, sizeof symbol, "tgl_fused_%016llx", (unsigned long long)tgl_cgen_digest(prog));
    char *source = NULL;
    tgl_status st = tgl_cgen_render(prog, symbol, &source, err);
    if (st)
        return st;
    kernel *k = calloc(1, sizeof *k);
    if (!k) {
        free(source);
        return tgl_errbuf_set(err, TGL_ENOMEM, "cgen: out of memory");
    }
    k->head.backend = be;
    st = compile(o, be, prog, source, symbol, k, err);
    free(source);
    if (st) {
        tgl_cgen_kernel_release(&k->head);
        return st;
    }
    *out = &k->head;
    return TGL_OK;
}

tgl_status tgl_cgen_upgrade(const tgl_backend_opts *o, const tgl_backend *be,
                            const tgl_fused_prog *prog, tgl_kernel_ref *ref, tgl_errbuf *err)
{
    if (!o || !be || !prog || !ref)
        return tgl_errbuf_set(err, TGL_EINVAL, "tgl_cgen_upgrade: NULL argument");
    kernel *k = (kernel *)ref;
    bool tiered = strcmp(o->compile, "tiered") == 0;
    /* k->job is set only here and in tgl_cgen_compile, on the thread that
     * compiles functions; a job once started is not tried again, but
     * 'sync' and 'cc' wait for it (their functions start on cc code). */
    if (k->job && !tiered && strcmp(o->compile, "tcc") != 0)
        tgl_cgen_kernel_wait(ref);
    if (strcmp(o->compile, "tcc") == 0 || k->job || __atomic_load_n(&k->head.tier, __ATOMIC_ACQUIRE) == 2)
        return TGL_OK;
    char symbol[48];
    snprintf(symbol, sizeof symbol, "tgl_fused_%016llx", (unsigned long long)tgl_cgen_digest(prog));
    char *source = NULL;
    tgl_status st = tgl_cgen_render(prog, symbol, &source, err);
    if (st)
        return st;
    job *j = job_new(o, be, source, symbol);
    free(source);
    if (!j)
        return tgl_errbuf_set(err, TGL_ENOMEM, "cgen: out of memory");
    int tier = __atomic_load_n(&k->head.tier, __ATOMIC_ACQUIRE);
    void *dl = NULL;
    tgl_kernel_fn fn = NULL;
    int rc = job_key(j);
    if (rc == BUILD_OK && !(j->dir[0] && (dl = tgl_cache_load(j->dir, j->key, symbol, &fn)))) {
        if (tiered) {
            if (!start_background(j, k, tier == 1))
                job_free(j);
            return TGL_OK;
        }
        rc = job_compile(j, &dl, &fn);
    }
    if (rc == BUILD_OK) {
        /* published as a background compile publishes: a call running
         * the old code finishes on it (freed at release) */
        k->dl = dl;
        __atomic_store_n(&k->fn, fn, __ATOMIC_RELEASE);
        __atomic_store_n(&k->head.tier, 2, __ATOMIC_RELEASE);
    } else if (rc == BUILD_NOCC)
        warn_no_cc(j->cc, tier == 1 ? "libtcc" : "reference");
    else if (rc == BUILD_IO)
        warn_io(j->err, tier == 1 ? "libtcc kernels" : "reference kernels");
    else if (rc == BUILD_FAIL)
        st = internal(err, prog, j->cc, j->err);
    job_free(j);
    return st;
}

/* A whole step's or loop's handle for source (rendered; freed here):
 * from the kernel cache, else compiled now or in the background as
 * o->compile says; tier 0 (no code) under 'tcc' or when it cannot build. */
static tgl_status prepare_whole(const tgl_backend_opts *o, char *source, const char *symbol,
                                tgl_kernel_ref **out, tgl_errbuf *err)
{
    kernel *k = calloc(1, sizeof *k);
    job *j = k ? job_new(o, &tgl_backend_cpu, source, symbol) : NULL;
    free(source);
    if (!j) {
        free(k);
        return tgl_errbuf_set(err, TGL_ENOMEM, "cgen: out of memory");
    }
    k->head.backend = &tgl_backend_cpu;
    j->step = true;
    *out = &k->head;
    /* libtcc's code would not be the optimizing compiler's, nor as fast:
     * the whole step waits for cc (the engine runs the step meanwhile). */
    if (strcmp(o->compile, "tcc") == 0 || job_key(j) != BUILD_OK) {
        job_free(j);
        return TGL_OK;
    }
    if (j->dir[0] && (k->dl = tgl_cache_load(j->dir, j->key, symbol, &k->fn))) {
        k->head.tier = 2;
        job_free(j);
        return TGL_OK;
    }
    if (strcmp(o->compile, "tiered") != 0) {
        int rc = job_compile(j, &k->dl, &k->fn);
        if (rc == BUILD_OK)
            k->head.tier = 2;
        else if (rc == BUILD_IO)
            warn_io(j->err, "its kernels one by one for the whole step");
        else if (rc == BUILD_FAIL)
            fprintf(stderr, "tgl: internal error (please report): a whole step does not compile "
                            "with %s; its instructions run one by one: %s\n", j->cc, j->err);
        job_free(j);
        return TGL_OK;
    }
    if (!start_background(j, k, false))
        job_free(j);
    return TGL_OK;
}

tgl_status tgl_cgen_step_prepare(const tgl_backend_opts *o, const tgl_step_item *items, int n,
                                 tgl_kernel_ref **out, tgl_errbuf *err)
{
    if (!o || !items || !out)
        return tgl_errbuf_set(err, TGL_EINVAL, "tgl_cgen_step_prepare: NULL argument");
    const char *symbol = "tgl_whole_step";
    char *source = NULL;
    tgl_status st = tgl_cgen_render_step(items, n, symbol, &source, err);
    if (st)
        return st;
    return prepare_whole(o, source, symbol, out, err);
}

/* ---- whole loops ------------------------------------------------------------
 *
 * A scan makes its loop's plan at every run (its buffers are new each
 * run), and most runs have the plan of the run before.  Rendering and
 * hashing the source each time would cost more than a short loop's steps,
 * so the handles are kept here by the plan's signature: everything the
 * source is made of (the kernels' digests and geometry, the D indices,
 * the pointers, stores and condition), compared in full.  A handle stays
 * until exit (a scan may be running it on another context's thread, so
 * none is dropped earlier): one per distinct loop geometry the process
 * ran. */

static struct {
    pthread_mutex_t lock;
    struct loop_entry { uint64_t h; size_t n; int64_t *sig; kernel *k; } *e;
    int n, cap;
    bool atexit_set;
} LT = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void loop_table_free(void)
{
    pthread_mutex_lock(&LT.lock);
    for (int i = 0; i < LT.n; i++) {
        free(LT.e[i].sig);
        tgl_cgen_kernel_release(&LT.e[i].k->head);
    }
    free(LT.e);
    LT.e = NULL;
    LT.n = LT.cap = 0;
    pthread_mutex_unlock(&LT.lock);
}

/* The signature of pl: int64 words, malloc'd (*n words); NULL when a
 * kernel has no single-task plan (not inlinable) or out of memory. */
static int64_t *loop_signature(const tgl_loop_plan *pl, size_t *n)
{
    size_t cap = 16 + (size_t)pl->nptr * 7 + (size_t)pl->nstore * 3;
    for (int i = 0; i < pl->nitems; i++)
        if (pl->items[i].prog)
            cap += 16 + 3 * TGL_KERNEL_MAX_DIMS +
                   (size_t)(pl->items[i].prog->nin + pl->items[i].prog->nout) *
                       (1 + TGL_KERNEL_MAX_DIMS);
        else
            cap += 1;
    int64_t *w = malloc(sizeof *w * cap);
    if (!w)
        return NULL;
    size_t m = 0;
    w[m++] = pl->nitems;
    w[m++] = pl->nptr;
    w[m++] = pl->nstore;
    w[m++] = pl->until_d;
    w[m++] = pl->until_dtype;
    w[m++] = pl->reverse;
    for (int i = 0; i < pl->nitems; i++) {
        const tgl_step_item *it = &pl->items[i];
        if (!it->prog) {
            w[m++] = -1;
            continue;
        }
        tgl_kargs a;
        const tgl_kbuf *kb;
        if (!tgl_cgen_plan_single(it->launch_cache, &a, &kb)) {
            free(w);
            return NULL;
        }
        int nop = it->prog->nin + it->prog->nout;
        w[m++] = (int64_t)tgl_cgen_digest(it->prog);
        w[m++] = it->prog->id;
        w[m++] = it->pc;
        w[m++] = it->scratch;
        w[m++] = it->acc_size;
        w[m++] = a.ndim;
        w[m++] = a.unit;
        w[m++] = a.row_begin;
        w[m++] = a.row_end;
        w[m++] = a.col_begin;
        w[m++] = a.col_end;
        for (int d = 0; d < a.ndim; d++)
            w[m++] = a.shape[d];
        for (int j = 0; j < nop; j++) {
            w[m++] = it->data[j];
            for (int d = 0; d < a.ndim; d++)
                w[m++] = kb[j].strides[d];
        }
    }
    for (int i = 0; i < pl->nptr; i++) {
        const tgl_loop_ptr *p = &pl->ptr[i];
        w[m++] = p->d;
        w[m++] = p->base;
        w[m++] = p->moves;
        w[m++] = p->off;
        w[m++] = p->add;
        w[m++] = p->mod;
        w[m++] = p->bytes;
    }
    for (int i = 0; i < pl->nstore; i++) {
        w[m++] = pl->store[i].dst;
        w[m++] = pl->store[i].src;
        w[m++] = pl->store[i].bytes;
    }
    *n = m;
    return w;
}

tgl_status tgl_cgen_loop_prepare(const tgl_backend_opts *o, const tgl_loop_plan *pl,
                                 tgl_kernel_ref **out, tgl_errbuf *err)
{
    if (!o || !pl || !out)
        return tgl_errbuf_set(err, TGL_EINVAL, "tgl_cgen_loop_prepare: NULL argument");
    size_t n = 0;
    int64_t *sig = loop_signature(pl, &n);
    if (!sig)
        return tgl_errbuf_set(err, TGL_EINVAL, "cgen: the loop has a kernel with no "
                                               "single-task launch plan");
    uint64_t h = tgl_hash_bytes(TGL_HASH_FNV_BASIS, sig, sizeof *sig * n);
    pthread_mutex_lock(&LT.lock);
    for (int i = 0; i < LT.n; i++)
        if (LT.e[i].h == h && LT.e[i].n == n && memcmp(LT.e[i].sig, sig, sizeof *sig * n) == 0) {
            *out = &LT.e[i].k->head;
            pthread_mutex_unlock(&LT.lock);
            free(sig);
            return TGL_OK;
        }
    pthread_mutex_unlock(&LT.lock);
    const char *symbol = "tgl_whole_loop";
    char *source = NULL;
    tgl_status st = tgl_cgen_render_loop(pl, symbol, &source, err);
    tgl_kernel_ref *ref = NULL;
    if (!st)
        st = prepare_whole(o, source, symbol, &ref, err);
    if (st) {
        free(sig);
        return st;
    }
    pthread_mutex_lock(&LT.lock);
    if (!LT.atexit_set) {
        LT.atexit_set = true;
        atexit(loop_table_free);
    }
    if (LT.n == LT.cap) {
        int cap = LT.cap ? 2 * LT.cap : 16;
        struct loop_entry *e = realloc(LT.e, sizeof *e * (size_t)cap);
        if (!e) {
            pthread_mutex_unlock(&LT.lock);
            free(sig);
            tgl_cgen_kernel_release(ref);
            return tgl_errbuf_set(err, TGL_ENOMEM, "cgen: out of memory");
        }
        LT.e = e;
        LT.cap = cap;
    }
    LT.e[LT.n++] = (struct loop_entry){h, n, sig, (kernel *)ref};
    pthread_mutex_unlock(&LT.lock);
    *out = ref;
    return TGL_OK;
}

tgl_loop_fn tgl_cgen_loop_code(const tgl_kernel_ref *ref)
{
    const kernel *k = (const kernel *)ref;
    if (!k || __atomic_load_n(&k->head.tier, __ATOMIC_ACQUIRE) != 2)
        return NULL;
    return (tgl_loop_fn)(void (*)(void))__atomic_load_n(&k->fn, __ATOMIC_ACQUIRE);
}

tgl_step_fn tgl_cgen_step_code(const tgl_kernel_ref *ref)
{
    const kernel *k = (const kernel *)ref;
    if (!k || __atomic_load_n(&k->head.tier, __ATOMIC_ACQUIRE) != 2)
        return NULL;
    /* the code is `int f(void *const *, void *, tgl_step_cb)`, stored as a
     * tgl_kernel_fn like every compiled symbol */
    return (tgl_step_fn)(void (*)(void))__atomic_load_n(&k->fn, __ATOMIC_ACQUIRE);
}

tgl_kernel_fn tgl_cgen_kernel_fn(const tgl_kernel_ref *ref)
{
    const kernel *k = (const kernel *)ref;
    return k ? __atomic_load_n(&k->fn, __ATOMIC_ACQUIRE) : NULL;
}

tgl_status tgl_cgen_kernel_launch(const tgl_backend_opts *o, const tgl_fused_prog *prog,
                                  tgl_kernel_ref *ref, tgl_array *const *in,
                                  tgl_array *const *out, void **cache, tgl_errbuf *err)
{
    /* Code, once there, is only ever swapped for other code. */
    tgl_kernel_fn fn = tgl_cgen_kernel_fn(ref);
    if (!fn)
        return tgl_errbuf_set(err, TGL_EINTERNAL,
                              "cgen: fused program %d has no kernel code to launch", prog->id);
    return tgl_cgen_launch(o, prog, fn, in, out, cache, err);
}

void tgl_cgen_kernel_wait(tgl_kernel_ref *ref)
{
    kernel *k = (kernel *)ref;
    job *j = k ? k->job : NULL;
    if (!j)
        return;
    pthread_mutex_lock(&G.lock);
    while (!j->done)
        pthread_cond_wait(&j->done_cv, &G.lock);
    pthread_mutex_unlock(&G.lock);
}

void tgl_cgen_kernel_release(tgl_kernel_ref *ref)
{
    kernel *k = (kernel *)ref;
    if (!k)
        return;
    if (k->job) {
        /* The job goes on without k (see "Background compiles"). */
        job *j = k->job;
        pthread_mutex_lock(&G.lock);
        j->cancelled = true;
        bool last = --j->refs == 0;
        pthread_mutex_unlock(&G.lock);
        if (last)
            job_free(j);
    }
    if (k->tcc) {
        pthread_mutex_lock(&G.tcc_lock);
        T.delete_(k->tcc);
        pthread_mutex_unlock(&G.tcc_lock);
    }
    /* Released with the last program that runs it (engine/backend.c), so
     * no call is running it: its code can go. */
    if (k->dl)
        dlclose(k->dl);
    free(k);
}
