/*
 * npyfmt.h — internal header of src/io, the file formats: the .npy
 * encoder/decoder that works on memory (npy.c; npz.c uses it for archive
 * entries), and the helpers every format (npy.c, npz.c, idx.c) uses to
 * check a reader's arguments, report errors, open a file to read, and
 * replace a file atomically (io.c).  Not part of the API; the engine never
 * includes it.
 */
#ifndef TGL_NPYFMT_H
#define TGL_NPYFMT_H

#include "engine/engine.h"

#include <stdio.h>

/* A .npy header (preamble, dict, padding) never needs more than this for
 * tgl's dtypes and TGL_MAX_DIMS dimensions; it is a multiple of 64. */
#define TGL_NPY_HEADER_MAX 512

/* The magic bytes a .npy file starts with. */
#define TGL_NPY_MAGIC "\x93NUMPY"

/* Room for where: a file's path in quotes, as messages name it. */
#define TGL_IO_WHERE_SIZE (TGL_ERRMSG_SIZE / 2)

/* The checks a reader starts with: path and out present (else TGL_EINVAL,
 * "fn: <names> must not be NULL"), and where set to the path in quotes
 * ("'a.npy'"), what the reader's messages call the file.  ctx is not NULL
 * (the caller checks it first). */
tgl_status tgl_io_reader_args(tgl_ctx *ctx, const char *fn, const char *path, const void *out,
                              const char *names, char where[TGL_IO_WHERE_SIZE]);

/* Sets "fn: where: <message>" and returns st.  where names the file (and
 * the archive entry), e.g. "'a.npz': entry 'W.npy'". */
tgl_status tgl_io_fail(tgl_ctx *ctx, tgl_status st, const char *fn, const char *where,
                       const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* Bytes read from a file (a header key, an entry name, a file's first
 * bytes), shown in a message: in single quotes, printable ASCII as it is
 * (a quote or backslash escaped with a backslash), every other byte
 * (control characters, newlines, bytes of UTF-8 or of nothing) as \xNN;
 * cut with "..." when it does not fit in size bytes (size >= 16).  The
 * one quoting of file contents in tgl's messages.  Returns buf. */
const char *tgl_io_show(char *buf, size_t size, const void *bytes, size_t n);

/* Opens path for reading without ever waiting: O_NONBLOCK, so that a FIFO
 * with no writer (or a writer that stalls) does not block the open, then
 * fstat refuses anything that is not a regular file (a FIFO, a directory,
 * a device, a socket) with TGL_EIO naming what it is, before a byte is
 * read.  On success *fd reads blocking as usual and *size is the file's
 * size; where names the file in messages ("'a.npy'"). */
tgl_status tgl_io_open_read(tgl_ctx *ctx, const char *fn, const char *where, const char *path,
                            int *fd, uint64_t *size);
/* tgl_io_open_read as a stdio stream. */
tgl_status tgl_io_fopen_read(tgl_ctx *ctx, const char *fn, const char *where, const char *path,
                             FILE **fp, uint64_t *size);

/* Checks that a is an array tgl can write (known dtype, ndim in range,
 * shape and size consistent, data present).  Arguments only; no I/O. */
tgl_status tgl_npy_check_array(tgl_ctx *ctx, const char *fn, const char *what,
                               const tgl_array *a);

/* The array's elements in C order: a itself when contiguous (*copy NULL),
 * else a new contiguous copy in *copy that the caller releases. */
tgl_status tgl_npy_contiguous(tgl_ctx *ctx, const char *fn, const tgl_array *a,
                              tgl_array **copy, const tgl_array **c);

/* Writes the .npy preamble and header for a contiguous array into buf
 * (TGL_NPY_HEADER_MAX bytes); the elements follow it, as stored in memory. */
size_t tgl_npy_encode_header(const tgl_array *a, unsigned char *buf);

/* Decodes a complete .npy image of len bytes into a new contiguous array.
 * Any byte pattern is safe: bad input gives TGL_EFORMAT and a message. */
tgl_status tgl_npy_decode(tgl_ctx *ctx, const char *fn, const char *where,
                          const unsigned char *buf, size_t len, tgl_array **out);

/* A file written to a temporary name and renamed into place on commit, so
 * that a failure at any point leaves the destination as it was.  Only a
 * regular file is ever replaced: when path is a symbolic link to one, the
 * link's target is written (and the link stays a link); anything else that
 * is not a regular file (a directory, FIFO, device, socket, dangling link)
 * is refused with TGL_EIO and left alone. */
typedef struct tgl_atomic_file {
    FILE *fp;
    char *tmp;         /* "<dest>.tmp.XXXXXX" */
    const char *path;  /* what the caller named, for messages */
    char *target;      /* the link's resolved target, or NULL: dest is path */
} tgl_atomic_file;

/* Checks what path is, then creates the temporary file next to the file
 * that will be replaced. */
tgl_status tgl_atomic_open(tgl_ctx *ctx, const char *fn, const char *path,
                           tgl_atomic_file *af);
/* Writes n bytes to the temporary file (TGL_EIO on failure). */
tgl_status tgl_atomic_write(tgl_ctx *ctx, const char *fn, tgl_atomic_file *af,
                            const void *p, size_t n);
/* Flushes, closes and renames into place; on failure removes the temporary
 * file.  af is finished either way. */
tgl_status tgl_atomic_commit(tgl_ctx *ctx, const char *fn, tgl_atomic_file *af);
/* Closes and removes the temporary file (after an error). */
void tgl_atomic_abort(tgl_atomic_file *af);

#endif /* TGL_NPYFMT_H */
