/*
 * cache.c — the on-disk cache of compiled kernels.
 *
 * An entry is <dir>/<key>.so where key is the SHA-256 (libcrypto EVP) of
 * everything that decides the machine code: the backend's name ("cpu") and
 * its target (this CPU's identity: /proc/cpuinfo's model name and flags,
 * since the default flags say -march=native), the kernel source, the
 * compiler command and its `--version` line, the flags and TGL_KERNEL_ABI.
 * The directory is the cache_dir setting, else $TGL_CACHE_DIR, else
 * ~/.cache/tgl.
 *
 * Writers compile into a temporary name holding their PID and rename(2) it
 * into place, so a reader sees a whole entry or none, and two processes compiling the same
 * kernel at once both succeed (the second rename replaces an identical
 * file).  A damaged entry is deleted and rebuilt; since dlopen of a
 * truncated ELF file can die of SIGBUS rather than fail, an entry's ELF
 * headers are checked against its size (and its machine against this
 * one's) before it is loaded, and since
 * open(2) of a FIFO waits for a writer, entries are opened with O_NONBLOCK
 * and anything that is not a regular file is damage too.  After each
 * insert the oldest entries (by mtime; a hit refreshes it) go until the
 * cache fits in config.cache_max_bytes.
 *
 * The functions here take no tgl_ctx (background compiles call them); the
 * public tgl_cache_clear and tgl_cache_info reach tgl_cgen_cache_clear and
 * tgl_cgen_cache_info through the CPU backend.  The CUDA backend keeps its
 * modules in the same directory under other names (src/cuda/modules.c):
 * listing, eviction, clearing and the info are the *_entries functions
 * here, told which names are entries.
 */
#include "cgen/cgint.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Temporaries older than this are debris of a crashed compile. */
#define STALE_SECONDS 600

/* ---- the directory ------------------------------------------------------ */

/* mkdir -p path. */
static int make_dirs(char *path)
{
    for (char *s = path + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        int rc = mkdir(path, 0755);
        *s = '/';
        if (rc != 0 && errno != EEXIST)
            return -1;
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return -1;
    /* A directory that can be read but not written (a read-only mount, a
     * shared cache of another user) is still a cache: its entries load,
     * and a kernel it lacks is compiled elsewhere when writing the entry
     * fails (compile.c: one warning per process). */
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && access(path, R_OK | X_OK) == 0 ? 0 : -1;
}

/* The directory's name, without creating it. */
static int dir_name(const char *configured, char *dir, size_t size)
{
    const char *env = getenv("TGL_CACHE_DIR");
    int n;
    if (configured && configured[0]) {
        n = snprintf(dir, size, "%s", configured);
    } else if (env && env[0]) {
        n = snprintf(dir, size, "%s", env);
    } else {
        const char *home = getenv("HOME");
        if (!home || !home[0]) {
            struct passwd *pw = getpwuid(getuid());
            home = pw ? pw->pw_dir : NULL;
        }
        if (!home)
            return -1;
        n = snprintf(dir, size, "%s/.cache/tgl", home);
    }
    if (n <= 0 || (size_t)n >= size)
        return -1;
    while (n > 1 && dir[n - 1] == '/')
        dir[--n] = '\0';
    return 0;
}

int tgl_cache_dir(const char *configured, char *dir, size_t size)
{
    return dir_name(configured, dir, size) == 0 && make_dirs(dir) == 0 ? 0 : -1;
}

/* ---- keys ------------------------------------------------------------------ */

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static char cpu_id[4096]; /* written once, by cpu_read, then read-only */

/* The first "model name" and "flags" lines of /proc/cpuinfo (or, on ARM,
 * "CPU implementer"/"CPU part"/"Features"): what -march=native looks at. */
static void cpu_read(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    size_t n = 0;
    if (f) {
        static const char *keys[] = {"model name", "flags", "CPU implementer", "CPU part",
                                     "Features"};
        bool seen[5] = {false};
        char line[8192];
        while (fgets(line, sizeof line, f)) {
            for (int k = 0; k < 5; k++) {
                size_t kl = strlen(keys[k]);
                if (seen[k] || strncmp(line, keys[k], kl) != 0 ||
                    (line[kl] != ' ' && line[kl] != '\t' && line[kl] != ':'))
                    continue;
                seen[k] = true;
                int w = snprintf(cpu_id + n, sizeof cpu_id - n, "%s", line);
                if (w > 0)
                    n += (size_t)w < sizeof cpu_id - n ? (size_t)w : sizeof cpu_id - n - 1;
            }
        }
        fclose(f);
    }
    if (n == 0)
        snprintf(cpu_id, sizeof cpu_id, "unknown cpu");
}

const char *tgl_cache_host_target(void)
{
    pthread_once(&cpu_once, cpu_read);
    return cpu_id;
}

int tgl_cache_key(const char *backend, const char *target, const char *source, const char *cc,
                  const char *version, const char *flags, char key[TGL_CACHE_KEY_HEX + 1])
{
    char abi[32];
    snprintf(abi, sizeof abi, "abi %d", TGL_KERNEL_ABI);
    const char *parts[] = {backend, target, source, cc, version, flags, abi};
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char h[EVP_MAX_MD_SIZE];
    unsigned hn = 0;
    bool ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1;
    for (size_t i = 0; ok && i < sizeof parts / sizeof parts[0]; i++)
        /* The terminating NUL separates the parts: ("ab","c") != ("a","bc"). */
        ok = EVP_DigestUpdate(md, parts[i], strlen(parts[i]) + 1) == 1;
    ok = ok && EVP_DigestFinal_ex(md, h, &hn) == 1 && hn * 2 == TGL_CACHE_KEY_HEX;
    EVP_MD_CTX_free(md);
    if (!ok)
        return -1;
    for (unsigned i = 0; i < hn; i++)
        snprintf(key + 2 * i, 3, "%02x", h[i]);
    return 0;
}

/* ---- entries ------------------------------------------------------------------ */

static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static ElfW(Half) host_machine; /* written once, by host_read */
static unsigned char host_class, host_data;

/* This process's own ELF identity: the header of the object holding this
 * code, which the loader maps at dladdr's base (no table of
 * architectures to keep). */
static void host_read(void)
{
    Dl_info info;
    if (dladdr((void *)host_read, &info) && info.dli_fbase) {
        const ElfW(Ehdr) *eh = info.dli_fbase;
        host_machine = eh->e_machine;
        host_class = eh->e_ident[EI_CLASS];
        host_data = eh->e_ident[EI_DATA];
    }
}

/* Whether the extent of n items of len bytes at off lies inside size
 * bytes.  Written so that nothing can wrap: an offset near 2^64 plus a
 * length used to wrap to a small sum and pass (found by the cache_entry
 * fuzz target's contract check).  n * len < 2^32: n and len are 16-bit. */
static bool extent_inside(uint64_t off, uint64_t n, uint64_t len, uint64_t size)
{
    return off <= size && n * len <= size - off;
}

/* Whether the file at fd is an ELF shared object for this machine (class,
 * byte order and e_machine of this process's own code: an entry built
 * for another architecture, in a cache directory shared between machines
 * or copied from one, is refused before dlopen sees it) whose program
 * headers, loaded segments and section headers all lie inside its size: a
 * truncated file fails this instead of crashing dlopen. */
static bool elf_whole(int fd)
{
    struct stat st;
    ElfW(Ehdr) eh;
    if (fstat(fd, &st) != 0 || pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh)
        return false;
    uint64_t size = (uint64_t)st.st_size;
    pthread_once(&host_once, host_read);
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != host_class ||
        eh.e_ident[EI_DATA] != host_data || eh.e_machine != host_machine ||
        eh.e_type != ET_DYN ||
        eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum == 0 || eh.e_phnum > 64)
        return false;
    if (!extent_inside(eh.e_phoff, eh.e_phnum, eh.e_phentsize, size) ||
        !extent_inside(eh.e_shoff, eh.e_shnum, eh.e_shentsize, size))
        return false;
    ElfW(Phdr) ph[64];
    size_t bytes = (size_t)eh.e_phnum * sizeof ph[0];
    if (pread(fd, ph, bytes, (off_t)eh.e_phoff) != (ssize_t)bytes)
        return false;
    for (int i = 0; i < eh.e_phnum; i++)
        if (ph[i].p_type == PT_LOAD &&
            (ph[i].p_offset > size || ph[i].p_filesz > size - ph[i].p_offset))
            return false;
    return true;
}

bool tgl_cache_entry_trusted(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && elf_whole(fd);
}

/* Loads the shared object at path and finds symbol in it: the dlopen
 * handle (and *fn), or NULL.  *present says whether anything was at path.
 * The file is opened without blocking (open(2) of a FIFO with no writer
 * would wait forever) and handed to dlopen only when it is a regular file
 * whose ELF headers lie inside it.  With touch, a hit's mtime is set to
 * now. */
static void *load_object(const char *path, const char *symbol, tgl_kernel_fn *fn, bool touch,
                         bool *present, struct stat *seen)
{
    *present = false;
    memset(seen, 0, sizeof *seen);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    *present = true;
    struct stat st;
    bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (regular)
        *seen = st;
    /* The file checked is loaded by name: another process may rename an
     * entry over path in between, but writers only ever rename whole
     * entries into place.  (Not through /proc/self/fd/N: the loader
     * matches names, so a later kernel opened under the same descriptor
     * number would get the first one's handle.) */
    void *h = regular && tgl_cache_entry_trusted(fd) ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    void *sym = h ? dlsym(h, symbol) : NULL;
    if (!sym) {
        if (h)
            dlclose(h);
        close(fd);
        return NULL;
    }
    if (touch) {
        /* A hit is a use: eviction goes by mtime.  An explicit clock
         * reading, because the kernel stamps files with a coarse (jiffy)
         * clock, which would tie with the entries written just before. */
        struct timespec now[2];
        clock_gettime(CLOCK_REALTIME, &now[0]);
        now[1] = now[0];
        futimens(fd, now);
    }
    close(fd);
    /* A data pointer to a function pointer: what POSIX's dlsym needs. */
    memcpy(fn, &sym, sizeof *fn);
    return h;
}

void *tgl_cache_load(const char *dir, const char *key, const char *symbol, tgl_kernel_fn *fn)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.so", dir, key);
    bool present;
    struct stat seen, now;
    void *h = load_object(path, symbol, fn, true, &present, &seen);
    if (!h && present) {
        /* Damaged, from an incompatible build or machine, or not a regular
         * file (a FIFO, a socket, a directory): delete it, the caller
         * rebuilds.  A directory goes only when empty; otherwise the new
         * entry cannot be renamed into place and the caller keeps its
         * kernel uncached.  A regular file goes only while it is still the
         * one examined: another process may have renamed a good entry
         * over it since. */
        if (seen.st_ino && (lstat(path, &now) != 0 || now.st_ino != seen.st_ino ||
                            now.st_dev != seen.st_dev))
            return NULL;
        if (unlink(path) != 0 && (errno == EISDIR || errno == EPERM))
            rmdir(path);
    }
    return h;
}

void *tgl_cache_load_file(const char *path, const char *symbol, tgl_kernel_fn *fn)
{
    bool present;
    struct stat seen;
    return load_object(path, symbol, fn, false, &present, &seen);
}

typedef struct entry {
    char name[TGL_CACHE_KEY_HEX + 8];
    int64_t bytes;
    struct timespec mtime;
} entry;

static int older(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

bool tgl_cache_is_key_file(const char *name, const char *ext)
{
    size_t n = strlen(name);
    if (n < TGL_CACHE_KEY_HEX || strcmp(name + TGL_CACHE_KEY_HEX, ext) != 0)
        return false;
    for (int i = 0; i < TGL_CACHE_KEY_HEX; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return false;
    return true;
}

/* Whether name is an entry: 64 hex digits and ".so". */
static bool is_entry(const char *name)
{
    return tgl_cache_is_key_file(name, ".so");
}

/* Whether name is a temporary of a compile (<key>.so.tmp.PID.* or
 * <key>.tmp.PID.*.c). */
static bool is_temp(const char *name)
{
    return strlen(name) > TGL_CACHE_KEY_HEX && strstr(name, ".tmp.") != NULL;
}

/* Whether the temporary name belongs to no live process: the PID after
 * ".tmp." names no process (a process of another user is alive: EPERM). */
static bool temp_orphaned(const char *name)
{
    const char *t = strstr(name, ".tmp.");
    char *end;
    long pid = strtol(t + 5, &end, 10);
    if (end == t + 5 || *end != '.' || pid <= 0 || pid > INT32_MAX)
        return false;
    return (pid_t)pid != getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Lists dir's entries, the files is_entry accepts (malloc'd array in *out;
 * count returned, -1 when dir cannot be read).  With sweep, temporaries
 * that no live process owns (temp_orphaned: their writer died, or exited
 * without its cleanup) and those older than STALE_SECONDS are deleted.  A
 * live process's fresh temporary is a compile in progress, which renames
 * it into place: even a clear keeps it. */
static int list_entries(const char *dir, entry **out, tgl_cache_entry_fn is_entry_fn, bool sweep)
{
    DIR *d = opendir(dir);
    *out = NULL;
    if (!d)
        return -1;
    entry *v = NULL;
    int n = 0, cap = 0;
    time_t now = time(NULL);
    char path[1200];
    for (struct dirent *e; (e = readdir(d));) {
        bool ent = is_entry_fn(e->d_name), tmp = !ent && sweep && is_temp(e->d_name);
        if (!ent && !tmp)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || S_ISDIR(st.st_mode))
            continue; /* a directory at an entry's name is no entry: left alone */
        if (tmp) {
            if (temp_orphaned(e->d_name) || now - st.st_mtim.tv_sec > STALE_SECONDS)
                unlink(path);
            continue;
        }
        if (strlen(e->d_name) >= sizeof v[0].name)
            continue; /* no entry kind has a longer name */
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            entry *w = realloc(v, (size_t)cap * sizeof *v);
            if (!w)
                break;
            v = w;
        }
        snprintf(v[n].name, sizeof v[n].name, "%s", e->d_name);
        v[n].bytes = (int64_t)st.st_size;
        v[n].mtime = st.st_mtim;
        n++;
    }
    closedir(d);
    *out = v;
    return n;
}

void tgl_cache_evict_entries(const char *dir, int64_t max_bytes, const char *keep,
                             tgl_cache_entry_fn is_entry_fn, bool sweep)
{
    entry *v = NULL;
    int n = list_entries(dir, &v, is_entry_fn, sweep);
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += v[i].bytes;
    if (n > 0 && total > max_bytes) {
        qsort(v, (size_t)n, sizeof *v, older);
        char path[1200];
        for (int i = 0; i < n && total > max_bytes; i++) {
            if (keep && strncmp(v[i].name, keep, TGL_CACHE_KEY_HEX) == 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, v[i].name);
            if (unlink(path) == 0 || errno == ENOENT)
                total -= v[i].bytes;
        }
    }
    free(v);
}

void tgl_cache_evict(const char *dir, int64_t max_bytes, const char *keep)
{
    tgl_cache_evict_entries(dir, max_bytes, keep, is_entry, true);
}

int tgl_cache_dir_name(const char *configured, char *dir, size_t size)
{
    return dir_name(configured, dir, size);
}

tgl_status tgl_cache_clear_entries(const char *dir, tgl_cache_entry_fn is_entry_fn, bool sweep,
                                   tgl_errbuf *err)
{
    entry *v = NULL;
    int n = list_entries(dir, &v, is_entry_fn, sweep);
    if (n < 0)
        return errno == ENOENT
                   ? TGL_OK
                   : tgl_errbuf_set(err, TGL_EIO, "tgl_cache_clear: cannot read %s: %s", dir,
                                    strerror(errno));
    char path[1200];
    tgl_status st = TGL_OK;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, v[i].name);
        if (unlink(path) != 0 && errno != ENOENT && !st)
            st = tgl_errbuf_set(err, TGL_EIO, "tgl_cache_clear: cannot delete %s: %s", path,
                                strerror(errno));
    }
    free(v);
    return st;
}

tgl_status tgl_cache_info_entries(const char *dir, tgl_cache_entry_fn is_entry_fn,
                                  int64_t max_bytes, char **text, tgl_errbuf *err)
{
    entry *v = NULL;
    int n = list_entries(dir, &v, is_entry_fn, false);
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += v[i].bytes;
    free(v);
    size_t size = strlen(dir) + 200;
    char *s = malloc(size);
    if (!s)
        return tgl_errbuf_set(err, TGL_ENOMEM, "tgl_cache_info: out of memory");
    snprintf(s, size,
             "directory: %s%s\nentries: %d\nbytes: %" PRId64 "\nmax_bytes: %" PRId64 "\n", dir,
             n < 0 ? " (not created yet)" : "", n < 0 ? 0 : n, total, max_bytes);
    *text = s;
    return TGL_OK;
}

/* ---- the host's --cache-clear and --cache-info ---------------------------------- */

tgl_status tgl_cgen_cache_clear(const tgl_backend_opts *o, tgl_errbuf *err)
{
    char dir[1100];
    if (dir_name(o->cache_dir, dir, sizeof dir) != 0)
        return tgl_errbuf_set(err, TGL_EIO,
                              "tgl_cache_clear: no cache directory (set cache_dir or "
                              "$TGL_CACHE_DIR)");
    return tgl_cache_clear_entries(dir, is_entry, true, err);
}

tgl_status tgl_cgen_cache_info(const tgl_backend_opts *o, char **text, tgl_errbuf *err)
{
    char dir[1100];
    if (dir_name(o->cache_dir, dir, sizeof dir) != 0)
        return tgl_errbuf_set(err, TGL_EIO,
                              "tgl_cache_info: no cache directory (set cache_dir or "
                              "$TGL_CACHE_DIR)");
    return tgl_cache_info_entries(dir, is_entry, o->cache_max_bytes, text, err);
}
