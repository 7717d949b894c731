/*
 * modules.c — CUDA modules: sources compiled by the driver (NVRTC to a
 * cubin, or the emulator's host compiler to a shared object), kept in a
 * disk cache and in a process-wide table, the library of hand-written
 * kernels (src/cuda/kernels, embedded at build time), and launches.
 *
 * Sources.  What the driver compiles is the prelude (kernels/prelude.cuh)
 * then the source, each after a #line directive naming its file, so that
 * NVRTC's messages point into src/cuda/kernels.  A family's source is its
 * .cuh (when it has one) then its .cu; an `#include "<x>.cuh"` line in
 * them is blanked (kept as a comment, so line numbers hold), since the
 * texts are pasted here and neither NVRTC nor the emulator's compiler
 * has the files.
 *
 * The disk cache.  An entry is <dir>/<key>.cubin (the emulator's:
 * <key>.emu.so) in the CPU kernels' directory (cgen/cache.c's
 * tgl_cache_dir), where key = tgl_cache_key("cuda", the device's target
 * — architecture and toolkit —, the whole source, the driver's name,
 * NVRTC's version and options).  The names differ from the CPU entries'
 * (<key>.so), so each backend lists, evicts and clears its own.  An entry
 * is the image followed by a trailer (magic, length, FNV-1a hash of the
 * image): a truncated or damaged entry, or one the driver does not load,
 * is deleted and rebuilt; never handed to the driver as it is (a cubin
 * is parsed by the driver, a shared object mapped by dlopen: both may
 * crash on garbage).  Writers write <key><ext>.tmp.<pid>.<n> and rename(2)
 * it into place, so a reader sees a whole entry or none (cache.c's
 * sweep recognises these temporaries too).  A hit refreshes the entry's
 * mtime; after an insert the oldest CUDA entries go until they total at
 * most cache_max_bytes.  A disk that cannot be written is not an error:
 * the module is loaded all the same, with one warning per process.
 *
 * The module table.  Every module loaded in this process, by key, so a
 * source compiles (or loads from disk) once per process however many
 * programs or kernels use it; modules stay loaded until exit (the
 * driver's context goes with the process).  Families map to their
 * module, and (family, symbol) pairs to their function, in the same
 * table, under one mutex; compiles run outside it (two threads compiling
 * the same source at once both succeed; the second keeps the first's).
 */
#include "cuda/cuda_int.h"
#include "cgen/cgint.h"

#include "cuda_families.h"
#include "cuda_family_texts.h"
#include "cuda_text_prelude_cuh.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- the embedded texts --------------------------------------------------- */

#define FAMILY_NAME(f) #f,
const char *const tgl_cuda_families[] = {TGL_CUDA_FAMILY_LIST(FAMILY_NAME) NULL};
#undef FAMILY_NAME

#define FAMILY_TEXTS(f) {TGL_CUDA_FAMILY_CUH_##f, TGL_CUDA_TEXT_##f##_cu},
static const char *const family_texts[][2] = {TGL_CUDA_FAMILY_LIST(FAMILY_TEXTS){NULL, NULL}};
#undef FAMILY_TEXTS
#define NFAMILIES ((int)(sizeof family_texts / sizeof family_texts[0]) - 1)

const char *tgl_cuda_prelude_source(void)
{
    return TGL_CUDA_TEXT_prelude_cuh;
}

/* Whether line (up to its end) is `#include "<name>.cuh"` (blanks
 * allowed): an include of a text modules.c pastes itself. */
static bool local_include(const char *line)
{
    const char *p = line;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p++ != '#')
        return false;
    while (*p == ' ' || *p == '\t')
        p++;
    if (strncmp(p, "include", 7) != 0)
        return false;
    p += 7;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p++ != '"')
        return false;
    const char *q = p;
    while (*q && *q != '"' && *q != '\n')
        q++;
    return *q == '"' && q - p > 4 && strncmp(q - 4, ".cuh", 4) == 0;
}

/* Appends text to b (at *n), each local include line made a comment. */
static void append_text(char *b, size_t *n, const char *text)
{
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) + 1 : strlen(p);
        if (local_include(p)) {
            memcpy(b + *n, "// ", 3); /* the line stays: line numbers hold */
            *n += 3;
        }
        memcpy(b + *n, p, len);
        *n += len;
        p += len;
    }
    b[*n] = '\0';
}

static pthread_once_t texts_once = PTHREAD_ONCE_INIT;
static char *family_source[NFAMILIES + 1]; /* written once, then read-only */

static void make_texts(void)
{
    for (int i = 0; i < NFAMILIES; i++) {
        const char *f = tgl_cuda_families[i], *cuh = family_texts[i][0], *cu = family_texts[i][1];
        size_t size = strlen(cuh) + strlen(cu) + 2 * strlen(f) + 200;
        /* every line may gain "// " */
        for (const char *p = cuh; *p; p++)
            size += *p == '\n' ? 3 : 0;
        for (const char *p = cu; *p; p++)
            size += *p == '\n' ? 3 : 0;
        char *b = malloc(size + 6);
        if (!b)
            continue; /* family_source NULL: tgl_cuda_family_source says no */
        size_t n = 0;
        if (cuh[0]) {
            n += (size_t)sprintf(b + n, "#line 1 \"src/cuda/kernels/%s.cuh\"\n", f);
            append_text(b, &n, cuh);
            if (n > 0 && b[n - 1] != '\n')
                b[n++] = '\n';
        }
        n += (size_t)sprintf(b + n, "#line 1 \"src/cuda/kernels/%s.cu\"\n", f);
        append_text(b, &n, cu);
        family_source[i] = b;
    }
}

/* The index of family in tgl_cuda_families, or -1. */
static int family_index(const char *family)
{
    for (int i = 0; family && i < NFAMILIES; i++)
        if (strcmp(tgl_cuda_families[i], family) == 0)
            return i;
    return -1;
}

const char *tgl_cuda_family_source(const char *family)
{
    int i = family_index(family);
    if (i < 0)
        return NULL;
    pthread_once(&texts_once, make_texts);
    return family_source[i];
}

/* ---- hashing --------------------------------------------------------------- */

static uint64_t fnv1a(const void *p, size_t n, uint64_t h)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}
#define FNV_SEED 14695981039346656037ull

/* ---- the module table --------------------------------------------------------- */

typedef struct mod_entry {
    char key[TGL_CACHE_KEY_HEX + 1];
    tgl_cuda_module *m;
    struct mod_entry *next;
} mod_entry;

typedef struct func_entry {
    char *family, *symbol;
    tgl_cuda_func *f;
    struct func_entry *next;
} func_entry;

#define FUNC_BUCKETS 256

static struct {
    pthread_mutex_t lock;
    mod_entry *mods;                    /* every module loaded, by key        */
    tgl_cuda_module *family[NFAMILIES + 1]; /* each family's, once loaded     */
    func_entry *funcs[FUNC_BUCKETS];    /* (family, symbol) -> function       */
    bool warned_io;
    unsigned tmp_counter;
} T = {.lock = PTHREAD_MUTEX_INITIALIZER};

static tgl_cuda_module *find_module(const char *key)
{
    for (mod_entry *e = T.mods; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e->m;
    return NULL;
}

/* ---- entries on disk ------------------------------------------------------------ */

#define TRAILER_MAGIC "tglcuda1"
typedef struct trailer {
    char magic[8];
    uint64_t len;  /* bytes of the image before the trailer */
    uint64_t hash; /* fnv1a of those bytes                  */
} trailer;

static const char *entry_ext(void)
{
    return strcmp(tgl_cuda_drv()->name, "emu") == 0 ? ".emu.so" : ".cubin";
}

/* Whether name is a CUDA entry: 64 hex digits and ".cubin" or ".emu.so"
 * (the listing, eviction, clearing and info are cache.c's, on these). */
static bool is_entry(const char *name)
{
    return tgl_cache_is_key_file(name, ".cubin") || tgl_cache_is_key_file(name, ".emu.so");
}

/* Reads the entry at path: the image (malloc'd) when it is a regular
 * file holding a whole image and its trailer.  *present: something is at
 * path.  The file is opened without blocking (a FIFO at the name never
 * waits for a writer); a hit's mtime is set to now (eviction is least
 * recently used; an explicit clock reading, as cache.c explains). */
static void *read_entry(const char *path, size_t *len, bool *present)
{
    *present = false;
    *len = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    *present = true;
    struct stat st;
    void *image = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > (off_t)sizeof(trailer) &&
        (uint64_t)st.st_size < ((uint64_t)1 << 32)) {
        size_t n = (size_t)st.st_size - sizeof(trailer);
        trailer t;
        image = malloc(n);
        bool ok = image && pread(fd, &t, sizeof t, (off_t)n) == (ssize_t)sizeof t &&
                  memcmp(t.magic, TRAILER_MAGIC, 8) == 0 && t.len == n;
        size_t got = 0;
        while (ok && got < n) {
            ssize_t r = pread(fd, (char *)image + got, n - got, (off_t)got);
            if (r <= 0)
                ok = false;
            else
                got += (size_t)r;
        }
        ok = ok && fnv1a(image, n, FNV_SEED) == t.hash;
        if (ok) {
            *len = n;
            struct timespec now[2];
            clock_gettime(CLOCK_REALTIME, &now[0]);
            now[1] = now[0];
            futimens(fd, now);
        } else {
            free(image);
            image = NULL;
        }
    }
    close(fd);
    return image;
}

/* Deletes a damaged entry (a directory only when empty). */
static void delete_entry(const char *path)
{
    if (unlink(path) != 0 && (errno == EISDIR || errno == EPERM))
        rmdir(path);
}

/* Writes image + trailer to path through a temporary and rename(2).
 * 0, or -1 with why in why[]. */
static int write_entry(const char *path, const void *image, size_t len, char *why,
                       size_t why_size)
{
    char tmp[1300];
    pthread_mutex_lock(&T.lock);
    unsigned c = T.tmp_counter++;
    pthread_mutex_unlock(&T.lock);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(), c);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(why, why_size, "cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    trailer t;
    memcpy(t.magic, TRAILER_MAGIC, 8);
    t.len = len;
    t.hash = fnv1a(image, len, FNV_SEED);
    bool ok = true;
    const char *parts[2] = {image, (const char *)&t};
    size_t sizes[2] = {len, sizeof t};
    for (int k = 0; k < 2 && ok; k++)
        for (size_t done = 0; ok && done < sizes[k];) {
            ssize_t w = write(fd, parts[k] + done, sizes[k] - done);
            if (w <= 0)
                ok = false;
            else
                done += (size_t)w;
        }
    int saved = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        saved = errno;
    }
    if (!ok) {
        unlink(tmp);
        snprintf(why, why_size, "cannot write %s: %s", path, strerror(saved));
        return -1;
    }
    return 0;
}

static void warn_io(const char *dir, const char *why)
{
    pthread_mutex_lock(&T.lock);
    bool first = !T.warned_io;
    T.warned_io = true;
    pthread_mutex_unlock(&T.lock);
    if (first)
        fprintf(stderr, "tgl: cannot store CUDA kernels in the cache %s (%s): they are compiled "
                        "for this process only\n", dir, why);
}

/* ---- modules ----------------------------------------------------------------------- */

/* The source the driver compiles: the prelude, then source, each after
 * a #line naming it. */
static char *whole_source(const char *source, const char *name)
{
    const char *prelude = tgl_cuda_prelude_source();
    size_t size = strlen(prelude) + strlen(source) + strlen(name) + 100;
    char *s = malloc(size);
    if (s)
        snprintf(s, size, "#line 1 \"src/cuda/kernels/prelude.cuh\"\n%s\n#line 1 \"%s\"\n%s",
                 prelude, name, source);
    return s;
}

tgl_status tgl_cuda_module_from_source(const tgl_backend_opts *o, const char *source,
                                       const char *name, tgl_cuda_module **out, tgl_errbuf *err)
{
    *out = NULL;
    if (!source)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda: no source to compile");
    tgl_status st = tgl_cuda_ready(err);
    if (st)
        return st;
    const tgl_cuda_driver *drv = tgl_cuda_drv();
    const char *what = name && name[0] ? name : "kernels.cu";
    char *full = whole_source(source, what);
    if (!full)
        return tgl_errbuf_set(err, TGL_ENOMEM, "cuda: out of memory");
    bool real = strcmp(drv->name, "emu") != 0;
    char key[TGL_CACHE_KEY_HEX + 1];
    if (tgl_cache_key("cuda", tgl_cuda_info()->target, full, drv->name,
                      real ? tgl_cuda_nvrtc_version() : "", real ? tgl_cuda_nvrtc_options() : "",
                      key) != 0) {
        free(full);
        return tgl_errbuf_set(err, TGL_EINTERNAL, "cuda: hashing the kernel source failed");
    }

    pthread_mutex_lock(&T.lock);
    tgl_cuda_module *m = find_module(key);
    pthread_mutex_unlock(&T.lock);
    if (m) {
        free(full);
        *out = m;
        return TGL_OK;
    }

    /* From the disk, else compiled (and stored). */
    char dir[1100], path[1300] = "";
    bool have_dir = tgl_cache_dir(o ? o->cache_dir : NULL, dir, sizeof dir) == 0;
    if (have_dir) {
        snprintf(path, sizeof path, "%s/%s%s", dir, key, entry_ext());
        size_t len;
        bool present;
        void *image = read_entry(path, &len, &present);
        if (image) {
            tgl_errbuf lerr;
            if (drv->load(image, len, &m, &lerr) != TGL_OK)
                m = NULL; /* an entry the driver does not take: rebuilt below */
            free(image);
        }
        if (!m && present)
            delete_entry(path);
    }
    if (!m) {
        void *image = NULL;
        size_t len = 0;
        char *log = NULL;
        st = drv->compile(full, what, &image, &len, &log, err);
        free(log);
        if (!st)
            st = drv->load(image, len, &m, err);
        if (!st && have_dir) {
            char why[1500];
            if (write_entry(path, image, len, why, sizeof why) != 0)
                warn_io(dir, why);
            else
                tgl_cache_evict_entries(dir, o ? o->cache_max_bytes : INT64_MAX, key, is_entry,
                                        false);
        } else if (!st) {
            warn_io("(none)", "no cache directory: set cache_dir or $TGL_CACHE_DIR");
        }
        free(image);
    }
    free(full);
    if (st)
        return st;

    pthread_mutex_lock(&T.lock);
    tgl_cuda_module *had = find_module(key);
    mod_entry *e = had ? NULL : malloc(sizeof *e);
    if (!had && e) {
        memcpy(e->key, key, sizeof key);
        e->m = m;
        e->next = T.mods;
        T.mods = e;
    }
    pthread_mutex_unlock(&T.lock);
    if (had) { /* another thread loaded it meanwhile: one module per source */
        drv->unload(m);
        m = had;
    } else if (!e) {
        drv->unload(m);
        return tgl_errbuf_set(err, TGL_ENOMEM, "cuda: out of memory");
    }
    *out = m;
    return TGL_OK;
}

/* ---- the library ------------------------------------------------------------------- */

static unsigned func_bucket(const char *family, const char *symbol)
{
    uint64_t h = fnv1a(family, strlen(family) + 1, FNV_SEED);
    return (unsigned)(fnv1a(symbol, strlen(symbol), h) % FUNC_BUCKETS);
}

static tgl_cuda_func *find_func(unsigned b, const char *family, const char *symbol)
{
    for (func_entry *e = T.funcs[b]; e; e = e->next)
        if (strcmp(e->symbol, symbol) == 0 && strcmp(e->family, family) == 0)
            return e->f;
    return NULL;
}

tgl_status tgl_cuda_lib_func(const tgl_backend_opts *o, const char *family, const char *symbol,
                             tgl_cuda_func **f, tgl_errbuf *err)
{
    *f = NULL;
    if (!family || !symbol)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda: no kernel family or symbol");
    unsigned b = func_bucket(family, symbol);
    pthread_mutex_lock(&T.lock);
    tgl_cuda_func *hit = find_func(b, family, symbol);
    pthread_mutex_unlock(&T.lock);
    if (hit) {
        *f = hit;
        return TGL_OK;
    }
    int i = family_index(family);
    if (i < 0)
        return tgl_errbuf_set(err, TGL_EINTERNAL,
                              "cuda: no kernel family '%s' (no src/cuda/kernels/%s.cu in this "
                              "build)", family, family);
    pthread_mutex_lock(&T.lock);
    tgl_cuda_module *m = T.family[i];
    pthread_mutex_unlock(&T.lock);
    if (!m) {
        const char *src = tgl_cuda_family_source(family);
        if (!src)
            return tgl_errbuf_set(err, TGL_ENOMEM, "cuda: out of memory");
        char name[200];
        snprintf(name, sizeof name, "src/cuda/kernels/%s.cu", family);
        tgl_status st = tgl_cuda_module_from_source(o, src, name, &m, err);
        if (st)
            return st;
        pthread_mutex_lock(&T.lock);
        T.family[i] = m; /* the same module whoever wins: the table has one per source */
        pthread_mutex_unlock(&T.lock);
    }
    tgl_cuda_func *fn = NULL;
    tgl_status st = tgl_cuda_drv()->func(m, symbol, &fn, err);
    if (st)
        return st;
    func_entry *e = malloc(sizeof *e);
    char *fam = e ? strdup(family) : NULL, *sym = fam ? strdup(symbol) : NULL;
    pthread_mutex_lock(&T.lock);
    if (!find_func(b, family, symbol) && sym) {
        e->family = fam;
        e->symbol = sym;
        e->f = fn;
        e->next = T.funcs[b];
        T.funcs[b] = e;
        e = NULL;
        fam = sym = NULL;
    }
    pthread_mutex_unlock(&T.lock);
    free(e);
    free(fam);
    free(sym);
    *f = fn;
    return TGL_OK;
}

tgl_status tgl_cuda_lib_launch(const tgl_backend_opts *o, const char *family, const char *symbol,
                               unsigned grid, unsigned block, size_t shmem, const void *args,
                               tgl_errbuf *err)
{
    tgl_cuda_func *f;
    tgl_status st = tgl_cuda_lib_func(o, family, symbol, &f, err);
    if (st)
        return st;
    if (grid == 0)
        return TGL_OK; /* no blocks: nothing to run (an empty input) */
    if (block == 0 || block % 32 != 0 || block > 1024)
        return tgl_errbuf_set(err, TGL_EINTERNAL,
                              "cuda: %s: bad launch geometry (%u blocks of %u threads)", symbol,
                              grid, block);
    void *params[1] = {(void *)args};
    const unsigned g[3] = {grid, 1, 1};
    return tgl_cuda_drv()->launch(f, g, block, shmem, params, err);
}

void tgl_cuda_geometry(int64_t n, unsigned *grid, unsigned *block)
{
    const unsigned threads = 256;
    const tgl_cuda_devinfo *info = tgl_cuda_info();
    int64_t sms = info && info->sm_count > 0 ? info->sm_count : 1;
    int64_t want = n > 0 ? (n + threads - 1) / threads : 1;
    int64_t cap = sms * 8;
    int64_t g = want < cap ? want : cap;
    *grid = (unsigned)(g < 1 ? 1 : g);
    *block = threads;
}

/* ---- cache clear and info ------------------------------------------------------------ */

/* The cache directory's name (created if missing), or an error naming fn. */
static tgl_status cache_dir(const tgl_backend_opts *o, const char *fn, char *dir, size_t size,
                            tgl_errbuf *err)
{
    if (tgl_cache_dir(o ? o->cache_dir : NULL, dir, size) != 0)
        return tgl_errbuf_set(err, TGL_EIO,
                              "%s: no cache directory (set cache_dir or $TGL_CACHE_DIR)", fn);
    return TGL_OK;
}

tgl_status tgl_cuda_cache_clear(const tgl_backend_opts *o, tgl_errbuf *err)
{
    char dir[1100];
    tgl_status st = cache_dir(o, "tgl_cache_clear", dir, sizeof dir, err);
    return st ? st : tgl_cache_clear_entries(dir, is_entry, false, err);
}

tgl_status tgl_cuda_cache_info(const tgl_backend_opts *o, char **text, tgl_errbuf *err)
{
    char dir[1100];
    if (tgl_cache_dir_name(o ? o->cache_dir : NULL, dir, sizeof dir) != 0)
        return tgl_errbuf_set(err, TGL_EIO,
                              "tgl_cache_info: no cache directory (set cache_dir or "
                              "$TGL_CACHE_DIR)");
    return tgl_cache_info_entries(dir, is_entry, o ? o->cache_max_bytes : (int64_t)0, text, err);
}
