/* fault.c — the counting wrappers behind fault.h (failure injection, a
 * testing hook built only with -DTGL_FAULT_INJECT=ON).
 *
 * Each wrapper counts its call in its kind's counter and, when the count
 * reaches the armed number, fails the way the real call fails on a machine
 * out of memory or with a full or broken disk: NULL / ENOMEM for an
 * allocation; -1 or NULL or a short count with ENOSPC for opening,
 * creating or writing a file, EIO for fsync and close.  A failing close or
 * fclose still closes (as on Linux, where the descriptor is gone even when
 * close reports an error).
 *
 * Only writes to files opened for writing count: the files and descriptors
 * opened for writing are remembered in a small table, so that a read, a
 * pipe or stderr does not shift the numbers.  Counters are atomics: the
 * engine's worker threads allocate too. */
#define TGL_FAULT_IMPL
#include "engine/fault.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>

static struct {
    _Atomic long count, fail_at, fired;
    const char *_Atomic last;
    void *_Atomic site;
} K[TGL_FAULT_KINDS];

int tgl_fault_arm(int kind, long n)
{
    if (kind < 0 || kind >= TGL_FAULT_KINDS)
        return -1;
    atomic_store(&K[kind].fail_at, 0);
    atomic_store(&K[kind].count, 0);
    atomic_store(&K[kind].fired, 0);
    atomic_store(&K[kind].last, "");
    atomic_store(&K[kind].site, NULL);
    atomic_store(&K[kind].fail_at, n < 0 ? 0 : n);
    return 0;
}

long tgl_fault_count(int kind)
{
    return kind >= 0 && kind < TGL_FAULT_KINDS ? atomic_load(&K[kind].count) : -1;
}

long tgl_fault_fired(int kind)
{
    return kind >= 0 && kind < TGL_FAULT_KINDS ? atomic_load(&K[kind].fired) : -1;
}

const char *tgl_fault_last(int kind)
{
    return kind >= 0 && kind < TGL_FAULT_KINDS ? atomic_load(&K[kind].last) : "";
}

void *tgl_fault_site(int kind)
{
    return kind >= 0 && kind < TGL_FAULT_KINDS ? atomic_load(&K[kind].site) : NULL;
}

/* Counts one call of kind; true when this one is to fail (site: where the
 * engine called from). */
#define hit(kind, name) hit_at(kind, name, __builtin_return_address(0))
static bool hit_at(int kind, const char *name, void *site)
{
    long c = atomic_fetch_add(&K[kind].count, 1) + 1;
    long at = atomic_load(&K[kind].fail_at);
    if (at <= 0 || c != at)
        return false;
    atomic_fetch_add(&K[kind].fired, 1);
    atomic_store(&K[kind].last, name);
    atomic_store(&K[kind].site, site);
    return true;
}

/* ---- the files and descriptors open for writing ------------------------ */

#define OPEN_MAX_TRACKED 256
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { FILE *f; int fd; } opened[OPEN_MAX_TRACKED];
static int n_opened;

static void track(FILE *f, int fd)
{
    pthread_mutex_lock(&open_lock);
    if (n_opened < OPEN_MAX_TRACKED)
        opened[n_opened++] = (__typeof__(opened[0])){f, fd};
    pthread_mutex_unlock(&open_lock);
}

/* Whether f (or, f NULL, the descriptor fd) is open for writing; with
 * forget, it is no longer (it is being closed). */
static bool tracked(FILE *f, int fd, bool forget)
{
    bool found = false;
    pthread_mutex_lock(&open_lock);
    for (int i = 0; i < n_opened; i++)
        if (f ? opened[i].f == f : (opened[i].f == NULL && opened[i].fd == fd)) {
            found = true;
            if (forget)
                opened[i--] = opened[--n_opened];
            else
                break;
        }
    pthread_mutex_unlock(&open_lock);
    return found;
}

static bool writes(const char *mode)
{
    return strpbrk(mode, "wa+") != NULL;
}

/* ---- allocations ------------------------------------------------------- */

void *tgl_fault_malloc(size_t n)
{
    if (hit(TGL_FAULT_ALLOC, "malloc")) {
        errno = ENOMEM;
        return NULL;
    }
    return (malloc)(n);
}

void *tgl_fault_calloc(size_t n, size_t size)
{
    if (hit(TGL_FAULT_ALLOC, "calloc")) {
        errno = ENOMEM;
        return NULL;
    }
    return (calloc)(n, size);
}

void *tgl_fault_realloc(void *p, size_t n)
{
    if (hit(TGL_FAULT_ALLOC, "realloc")) {
        errno = ENOMEM;
        return NULL;
    }
    return (realloc)(p, n);
}

char *tgl_fault_strdup(const char *s)
{
    if (hit(TGL_FAULT_ALLOC, "strdup")) {
        errno = ENOMEM;
        return NULL;
    }
    return (strdup)(s);
}

char *tgl_fault_strndup(const char *s, size_t n)
{
    if (hit(TGL_FAULT_ALLOC, "strndup")) {
        errno = ENOMEM;
        return NULL;
    }
    return (strndup)(s, n);
}

int tgl_fault_posix_memalign(void **p, size_t align, size_t n)
{
    if (hit(TGL_FAULT_ALLOC, "posix_memalign"))
        return ENOMEM;
    return (posix_memalign)(p, align, n);
}

void *tgl_fault_aligned_alloc(size_t align, size_t n)
{
    if (hit(TGL_FAULT_ALLOC, "aligned_alloc")) {
        errno = ENOMEM;
        return NULL;
    }
    return (aligned_alloc)(align, n);
}

/* ---- files ------------------------------------------------------------- */

FILE *tgl_fault_fopen(const char *path, const char *mode)
{
    if (!writes(mode))
        return (fopen)(path, mode);
    if (hit(TGL_FAULT_IO, "fopen")) {
        errno = ENOSPC;
        return NULL;
    }
    FILE *f = (fopen)(path, mode);
    if (f)
        track(f, -1);
    return f;
}

FILE *tgl_fault_fdopen(int fd, const char *mode)
{
    if (!writes(mode))
        return (fdopen)(fd, mode);
    if (hit(TGL_FAULT_IO, "fdopen")) {
        errno = ENOMEM; /* what fdopen itself can fail with */
        return NULL;
    }
    FILE *f = (fdopen)(fd, mode);
    if (f) {
        tracked(NULL, fd, true); /* the stream owns the descriptor now */
        track(f, -1);
    }
    return f;
}

int tgl_fault_open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    /* O_TMPFILE holds O_DIRECTORY's bit: test it whole. */
    if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    bool w = (flags & O_ACCMODE) != O_RDONLY || (flags & O_CREAT);
    if (w && hit(TGL_FAULT_IO, "open")) {
        errno = ENOSPC;
        return -1;
    }
    int fd = (open)(path, flags, mode);
    if (w && fd >= 0)
        track(NULL, fd);
    return fd;
}

int tgl_fault_mkstemp(char *tmpl)
{
    if (hit(TGL_FAULT_IO, "mkstemp")) {
        errno = ENOSPC;
        return -1;
    }
    int fd = (mkstemp)(tmpl);
    if (fd >= 0)
        track(NULL, fd);
    return fd;
}

char *tgl_fault_mkdtemp(char *tmpl)
{
    if (hit(TGL_FAULT_IO, "mkdtemp")) {
        errno = ENOSPC;
        return NULL;
    }
    return (mkdtemp)(tmpl);
}

size_t tgl_fault_fwrite(const void *p, size_t size, size_t n, FILE *f)
{
    if (tracked(f, -1, false) && hit(TGL_FAULT_IO, "fwrite")) {
        errno = ENOSPC;
        return 0;
    }
    return (fwrite)(p, size, n, f);
}

ssize_t tgl_fault_write(int fd, const void *p, size_t n)
{
    if (tracked(NULL, fd, false) && hit(TGL_FAULT_IO, "write")) {
        errno = ENOSPC;
        return -1;
    }
    return (write)(fd, p, n);
}

int tgl_fault_fflush(FILE *f)
{
    if (f && tracked(f, -1, false) && hit(TGL_FAULT_IO, "fflush")) {
        errno = ENOSPC;
        return EOF;
    }
    return (fflush)(f);
}

int tgl_fault_fclose(FILE *f)
{
    if (!tracked(f, -1, true))
        return (fclose)(f);
    bool fail = hit(TGL_FAULT_IO, "fclose");
    int rc = (fclose)(f);
    if (fail) {
        errno = EIO;
        return EOF;
    }
    return rc;
}

int tgl_fault_close(int fd)
{
    if (!tracked(NULL, fd, true))
        return (close)(fd);
    bool fail = hit(TGL_FAULT_IO, "close");
    int rc = (close)(fd);
    if (fail) {
        errno = EIO;
        return -1;
    }
    return rc;
}

int tgl_fault_rename(const char *from, const char *to)
{
    if (hit(TGL_FAULT_IO, "rename")) {
        errno = EIO;
        return -1;
    }
    return (rename)(from, to);
}

int tgl_fault_fsync(int fd)
{
    if (hit(TGL_FAULT_IO, "fsync")) {
        errno = EIO;
        return -1;
    }
    return (fsync)(fd);
}

int tgl_fault_fdatasync(int fd)
{
    if (hit(TGL_FAULT_IO, "fdatasync")) {
        errno = EIO;
        return -1;
    }
    return (fdatasync)(fd);
}

int tgl_fault_mkdir(const char *path, mode_t mode)
{
    if (hit(TGL_FAULT_IO, "mkdir")) {
        errno = ENOSPC;
        return -1;
    }
    return (mkdir)(path, mode);
}
