/*
 * idx.c — reading IDX files (the format of MNIST and Fashion-MNIST), plain
 * or gzip-compressed (zlib's gzread reads both).  Big-endian header and
 * data; the element count the header claims is checked against what the
 * file holds before anything is allocated from it.  Only a regular file is
 * opened (tgl_io_open_read: a FIFO is refused, never waited on).
 */
#include "engine/engine.h"
#include "io/npyfmt.h"

#include <errno.h>
#include <stdlib.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* IDX type codes and the tgl dtype each loads as. */
static int idx_dtype(int code, size_t *elsize)
{
    switch (code) {
    case 0x08: *elsize = 1; return TGL_UINT8;
    case 0x09: *elsize = 1; return TGL_INT32;  /* int8, widened */
    case 0x0B: *elsize = 2; return TGL_INT32;  /* int16, widened */
    case 0x0C: *elsize = 4; return TGL_INT32;
    case 0x0D: *elsize = 4; return TGL_FLOAT32;
    case 0x0E: *elsize = 8; return TGL_FLOAT64;
    default: return -1;
    }
}

/* Reads exactly n bytes (n small); false on a short read. */
static bool read_all(gzFile f, void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n) {
        unsigned chunk = n > (1u << 30) ? (1u << 30) : (unsigned)n;
        int got = gzread(f, p, chunk);
        if (got <= 0)
            return false;
        p += got;
        n -= (size_t)got;
    }
    return true;
}

tgl_status tgl_idx_load(tgl_ctx *ctx, const char *path, tgl_array **out)
{
    const char *fn = "tgl_idx_load";
    char where[TGL_IO_WHERE_SIZE];
    TGL_CHECK_CTX(ctx);
    int fd = -1;
    uint64_t size;
    tgl_status st = tgl_io_reader_args(ctx, fn, path, out, "path and out", where);
    if (!st)
        st = tgl_io_open_read(ctx, fn, where, path, &fd, &size);
    if (st)
        return st;
    gzFile f = gzdopen(fd, "rb"); /* owns fd from here: gzclose closes it */
    if (!f) {
        close(fd);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: %s: zlib cannot open it", fn, where);
    }
    unsigned char magic[4];
    tgl_array *a = NULL;
    if (!read_all(f, magic, 4)) {
        st = tgl_ctx_set_error(ctx, TGL_EFORMAT, "%s: '%s' is too short to be an IDX file", fn, path);
        goto done;
    }
    size_t es;
    int dtype = idx_dtype(magic[2], &es);
    if (magic[0] != 0 || magic[1] != 0 || dtype < 0 || magic[3] == 0 || magic[3] > TGL_MAX_DIMS) {
        st = tgl_ctx_set_error(ctx, TGL_EFORMAT,
                               "%s: '%s' is not an IDX file (magic %02x %02x %02x %02x)", fn, path,
                               magic[0], magic[1], magic[2], magic[3]);
        goto done;
    }
    int ndim = magic[3];
    int64_t shape[TGL_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        unsigned char b[4];
        if (!read_all(f, b, 4)) {
            st = tgl_ctx_set_error(ctx, TGL_EFORMAT, "%s: '%s': truncated header", fn, path);
            goto done;
        }
        shape[d] = (int64_t)b[0] << 24 | (int64_t)b[1] << 16 | (int64_t)b[2] << 8 | b[3];
    }
    /* The header's claim is not trusted with memory: the raw bytes are
     * read in chunks into a buffer that grows only as data arrives, so a
     * corrupt header claiming terabytes fails as "truncated", not as an
     * allocation. */
    int64_t count;
    if ((st = tgl_check_shape(ctx, fn, dtype, ndim, shape, &count))) {
        char sh[TGL_MAX_DIMS * 22 + 4];
        st = tgl_ctx_set_error(ctx, st, "%s: '%s': the header's shape %s is too large (over "
                               "2^59 elements)", fn, path, tgl_shape_str(sh, sizeof sh, ndim, shape));
        goto done;
    }
    size_t nbytes = (size_t)count * es, have = 0, cap = 0;
    unsigned char *raw = NULL;
    while (have < nbytes) {
        /* Full: double (from 64 KiB, at most to the claim), so that the
         * buffer is never more than twice the bytes that arrived.  (It
         * used to start at 16 MiB whatever the file held: a 20-byte
         * corrupt file cost a 16 MiB allocation, found by fuzzing.) */
        if (have == cap) {
            size_t nc = cap ? cap * 2 : ((size_t)1 << 16);
            if (nc > nbytes)
                nc = nbytes;
            unsigned char *nr = realloc(raw, nc);
            if (!nr) {
                free(raw);
                st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn);
                goto done;
            }
            raw = nr;
            cap = nc;
        }
        size_t want = cap - have;
        if (want > ((size_t)1 << 24))
            want = (size_t)1 << 24;
        int got = gzread(f, raw + have, (unsigned)want);
        if (got <= 0)
            break;
        have += (size_t)got;
    }
    if (have < nbytes) {
        free(raw);
        st = tgl_ctx_set_error(ctx, TGL_EFORMAT,
                               "%s: '%s': the header claims %" PRId64 " elements but the file "
                               "ends before them", fn, path, count);
        goto done;
    }
    if ((st = tgl_array_alloc(ctx, fn, dtype, ndim, shape, false, &a))) {
        free(raw);
        goto done;
    }
    /* Big-endian to host order, widening small integers. */
    for (int64_t i = 0; i < a->size; i++) {
        const unsigned char *p = raw + (size_t)i * es;
        switch (magic[2]) {
        case 0x08: ((uint8_t *)a->data)[i] = p[0]; break;
        case 0x09: ((int32_t *)a->data)[i] = (int8_t)p[0]; break;
        case 0x0B: ((int32_t *)a->data)[i] = (int16_t)(p[0] << 8 | p[1]); break;
        default: {
            unsigned char tmp[8];
            for (size_t k = 0; k < es; k++)
                tmp[k] = p[es - 1 - k];
            memcpy((unsigned char *)a->data + (size_t)i * es, tmp, es);
        }
        }
    }
    free(raw);
done:
    gzclose(f);
    if (st) {
        tgl_array_release(a);
        return st;
    }
    *out = a;
    return TGL_OK;
}
