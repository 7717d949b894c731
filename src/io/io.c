/*
 * io.c — what every file format of src/io (npy.c, npz.c, idx.c) shares,
 * declared in npyfmt.h: the readers' argument checks and messages (the
 * file named in quotes, file contents shown quoted), opening a file to
 * read without blocking on anything but a regular file, telling the
 * formats apart (tgl_file_format), and replacing a file atomically.
 */
#include "io/npyfmt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Messages and reading                                                     */
/* ------------------------------------------------------------------------ */

tgl_status tgl_io_fail(tgl_ctx *ctx, tgl_status st, const char *fn, const char *where,
                       const char *fmt, ...)
{
    char msg[TGL_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tgl_ctx_set_error(ctx, st, "%s: %s: %s", fn, where, msg);
}

/* What a file that is not a regular file is, for messages. */
static const char *file_kind(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO (named pipe)";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISLNK(m))
        return "a symbolic link";
    return "not a regular file";
}

const char *tgl_io_show(char *buf, size_t size, const void *bytes, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *b = bytes;
    size_t k = 0;
    buf[k++] = '\'';
    size_t i = 0;
    /* room for the widest form of a byte (\xNN), then "'..." and the NUL */
    for (; i < n && k + 4 + 5 <= size; i++) {
        unsigned char c = b[i];
        if (c == '\'' || c == '\\') {
            buf[k++] = '\\';
            buf[k++] = (char)c;
        } else if (c >= 0x20 && c < 0x7f) {
            buf[k++] = (char)c;
        } else {
            buf[k++] = '\\';
            buf[k++] = 'x';
            buf[k++] = hex[c >> 4];
            buf[k++] = hex[c & 15];
        }
    }
    buf[k++] = '\'';
    if (i < n) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
    return buf;
}

tgl_status tgl_io_open_read(tgl_ctx *ctx, const char *fn, const char *where, const char *path,
                            int *fd, uint64_t *size)
{
    int d = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (d < 0)
        return tgl_io_fail(ctx, TGL_EIO, fn, where, "cannot open: %s", strerror(errno));
    struct stat sb;
    if (fstat(d, &sb) != 0) {
        int e = errno;
        close(d);
        return tgl_io_fail(ctx, TGL_EIO, fn, where, "cannot open: %s", strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(d);
        return tgl_io_fail(ctx, TGL_EIO, fn, where, "is %s, not a regular file; load reads "
                           "only regular files", file_kind(sb.st_mode));
    }
    /* Reads block again (O_NONBLOCK means nothing for a regular file's
     * data, but the descriptor is handed to stdio and zlib). */
    int fl = fcntl(d, F_GETFL);
    if (fl != -1)
        (void)fcntl(d, F_SETFL, fl & ~O_NONBLOCK);
    *fd = d;
    *size = (uint64_t)sb.st_size;
    return TGL_OK;
}

tgl_status tgl_io_fopen_read(tgl_ctx *ctx, const char *fn, const char *where, const char *path,
                             FILE **fp, uint64_t *size)
{
    int fd = -1;
    tgl_status st = tgl_io_open_read(ctx, fn, where, path, &fd, size);
    if (st)
        return st;
    if (!(*fp = fdopen(fd, "rb"))) {
        int e = errno;
        close(fd);
        return tgl_io_fail(ctx, TGL_EIO, fn, where, "cannot open: %s", strerror(e));
    }
    return TGL_OK;
}

tgl_status tgl_io_reader_args(tgl_ctx *ctx, const char *fn, const char *path, const void *out,
                              const char *names, char where[TGL_IO_WHERE_SIZE])
{
    TGL_CHECK(path && out, TGL_EINVAL, "%s: %s must not be NULL", fn, names);
    snprintf(where, TGL_IO_WHERE_SIZE, "'%s'", path);
    return TGL_OK;
}

tgl_status tgl_file_format(tgl_ctx *ctx, const char *path, int *format)
{
    const char *fn = "tgl_file_format";
    char where[TGL_IO_WHERE_SIZE];
    TGL_CHECK_CTX(ctx);
    int fd = -1;
    uint64_t size;
    tgl_status st = tgl_io_reader_args(ctx, fn, path, format, "path and format", where);
    if (!st)
        st = tgl_io_open_read(ctx, fn, where, path, &fd, &size);
    if (st)
        return st;
    unsigned char head[6];
    ssize_t n;
    while ((n = read(fd, head, sizeof head)) < 0 && errno == EINTR)
        ;
    int e = errno;
    close(fd);
    if (n < 0)
        return tgl_io_fail(ctx, TGL_EIO, fn, where, "cannot read: %s", strerror(e));
    if (n == 0)
        return tgl_ctx_set_error(ctx, TGL_EFORMAT, "%s: %s is empty", fn, where);
    if (n == (ssize_t)sizeof head && memcmp(head, TGL_NPY_MAGIC, sizeof head) == 0) {
        *format = TGL_FILE_NPY;
        return TGL_OK;
    }
    /* PK\5\6 starts an archive with no entries (np.savez with no arrays). */
    if (n >= 4 && (memcmp(head, "PK\3\4", 4) == 0 || memcmp(head, "PK\5\6", 4) == 0)) {
        *format = TGL_FILE_NPZ;
        return TGL_OK;
    }
    char shown[40];
    return tgl_ctx_set_error(ctx, TGL_EFORMAT,
                             "%s: %s is neither a .npy file nor a .npz archive (it starts with "
                             "%s)", fn, where, tgl_io_show(shown, sizeof shown, head, (size_t)n));
}

/* ------------------------------------------------------------------------ */
/* Atomic replacement                                                       */
/* ------------------------------------------------------------------------ */

/* The process umask, read without changing it (umask(2) can only be read
 * by setting it, which races with other threads creating files). */
static mode_t current_umask(void)
{
    mode_t mask = 022;
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "Umask:", 6) == 0) {
                mask = (mode_t)strtoul(line + 6, NULL, 8);
                break;
            }
        fclose(f);
    }
    return mask & 0777;
}

#define ONLY_REGULAR "save replaces only a regular file (or a symbolic link to one)"

/* Refuses to replace anything but a regular file.  On success *target is
 * NULL (path itself is written, or created) or the resolved target of the
 * symbolic link path, to be written instead (malloc'd). */
static tgl_status check_destination(tgl_ctx *ctx, const char *fn, const char *where,
                                    const char *path, char **target)
{
    *target = NULL;
    struct stat lsb, sb;
    if (lstat(path, &lsb) != 0)
        return TGL_OK;   /* nothing there (or unreachable): creating it reports */
    if (S_ISREG(lsb.st_mode))
        return TGL_OK;
    if (!S_ISLNK(lsb.st_mode))
        return tgl_io_fail(ctx, TGL_EIO, fn, where, "is %s, not a regular file; " ONLY_REGULAR,
                           file_kind(lsb.st_mode));
    if (stat(path, &sb) != 0) {
        int e = errno;
        if (e == ENOENT)
            return tgl_io_fail(ctx, TGL_EIO, fn, where,
                               "is a dangling symbolic link (its target does not exist); "
                               ONLY_REGULAR);
        return tgl_io_fail(ctx, TGL_EIO, fn, where,
                           "is a symbolic link that cannot be followed (%s); " ONLY_REGULAR,
                           strerror(e));
    }
    if (!S_ISREG(sb.st_mode))
        return tgl_io_fail(ctx, TGL_EIO, fn, where,
                           "is a symbolic link to %s, not to a regular file; " ONLY_REGULAR,
                           file_kind(sb.st_mode));
    if (!(*target = realpath(path, NULL))) {
        int e = errno;
        return tgl_io_fail(ctx, TGL_EIO, fn, where, "cannot resolve the symbolic link: %s",
                           strerror(e));
    }
    return TGL_OK;
}

tgl_status tgl_atomic_open(tgl_ctx *ctx, const char *fn, const char *path,
                           tgl_atomic_file *af)
{
    char where[TGL_ERRMSG_SIZE / 2];
    snprintf(where, sizeof where, "'%s'", path);
    af->fp = NULL;
    af->path = path;
    af->tmp = NULL;
    tgl_status st = check_destination(ctx, fn, where, path, &af->target);
    if (st)
        return st;
    const char *dest = af->target ? af->target : path;
    size_t n = strlen(dest);
    af->tmp = malloc(n + sizeof ".tmp.XXXXXX");
    if (!af->tmp) {
        free(af->target);
        af->target = NULL;
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn);
    }
    memcpy(af->tmp, dest, n);
    memcpy(af->tmp + n, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
    int fd = mkstemp(af->tmp);
    if (fd < 0) {
        int e = errno;
        free(af->tmp);
        free(af->target);
        af->tmp = af->target = NULL;
        return tgl_io_fail(ctx, TGL_EIO, fn, where, "cannot create a file in its directory: %s",
                           strerror(e));
    }
    /* mkstemp makes the file private (0600); give it the mode a plain
     * fopen would, or keep the mode of the file being replaced. */
    struct stat sb;
    mode_t mode = stat(dest, &sb) == 0 && S_ISREG(sb.st_mode) ? (sb.st_mode & 07777)
                                                              : (0666 & ~current_umask());
    (void)fchmod(fd, mode);   /* best effort: the data is what matters */
    if (!(af->fp = fdopen(fd, "wb"))) {
        int e = errno;
        close(fd);
        unlink(af->tmp);
        free(af->tmp);
        free(af->target);
        af->tmp = af->target = NULL;
        return tgl_io_fail(ctx, TGL_EIO, fn, where, "cannot open: %s", strerror(e));
    }
    return TGL_OK;
}

tgl_status tgl_atomic_write(tgl_ctx *ctx, const char *fn, tgl_atomic_file *af,
                            const void *p, size_t n)
{
    if (n == 0 || fwrite(p, 1, n, af->fp) == n)
        return TGL_OK;
    char where[TGL_ERRMSG_SIZE / 2];
    snprintf(where, sizeof where, "'%s'", af->path);
    return tgl_io_fail(ctx, TGL_EIO, fn, where, "write failed: %s", strerror(errno));
}

tgl_status tgl_atomic_commit(tgl_ctx *ctx, const char *fn, tgl_atomic_file *af)
{
    char where[TGL_ERRMSG_SIZE / 2];
    snprintf(where, sizeof where, "'%s'", af->path);
    /* Buffered writes can fail late (a full disk shows up at the flush). */
    int e = 0;
    if (fflush(af->fp) != 0 || ferror(af->fp))
        e = errno ? errno : EIO;
    if (fclose(af->fp) != 0 && !e)
        e = errno;
    af->fp = NULL;
    tgl_status st = TGL_OK;
    const char *dest = af->target ? af->target : af->path;
    struct stat sb;
    if (e)
        st = tgl_io_fail(ctx, TGL_EIO, fn, where, "write failed: %s", strerror(e));
    /* Check again just before replacing: something else may have been put
     * there while the data was written. */
    else if (lstat(dest, &sb) == 0 && !S_ISREG(sb.st_mode))
        st = tgl_io_fail(ctx, TGL_EIO, fn, where, "is %s, not a regular file; " ONLY_REGULAR,
                         file_kind(sb.st_mode));
    else if (rename(af->tmp, dest) != 0)
        st = tgl_io_fail(ctx, TGL_EIO, fn, where, "cannot replace it: %s", strerror(errno));
    if (st)
        unlink(af->tmp);
    free(af->tmp);
    free(af->target);
    af->tmp = af->target = NULL;
    return st;
}

void tgl_atomic_abort(tgl_atomic_file *af)
{
    if (af->fp)
        fclose(af->fp);
    if (af->tmp) {
        unlink(af->tmp);
        free(af->tmp);
    }
    free(af->target);
    af->fp = NULL;
    af->tmp = af->target = NULL;
}
