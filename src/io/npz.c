/*
 * npz.c — NumPy's .npz format: a ZIP archive whose entries "<name>.npy" are
 * .npy files (np.savez stores them, np.savez_compressed deflates them).
 * tgl_npz_save writes one; tgl_npz_load reads one, entry by entry.
 *
 * The ZIP subset (APPNOTE.TXT): local file headers each followed by the
 * entry's data, a central directory listing every entry, and an
 * end-of-central-directory record (EOCD) at the very end.  Sizes and
 * offsets are 32-bit unless the Zip64 extensions carry them: an extra field
 * (id 1) per entry, and a Zip64 EOCD record found through a locator just
 * before the EOCD.  NumPy writes the Zip64 extra field in every local header
 * (it opens entries with force_zip64=True).  Methods: stored (0) and
 * deflated (8, raw deflate with zlib).
 *
 * Reading trusts only the central directory, checks each local header
 * against it, bounds every size by the file's size before allocating, and
 * checks every entry's CRC before decoding it.
 */
#include "io/npyfmt.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ZLIB_CONST
#include <zlib.h>

#define SIG_LOCAL   0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD    0x06054b50u
#define SIG_EOCD64  0x06064b50u
#define SIG_LOC64   0x07064b50u
#define ZIP32_MAX   0xFFFFFFFFu   /* this value in a 32-bit field means "see Zip64" */
#define LOCAL_SIZE   30
#define CENTRAL_SIZE 46
#define EOCD_SIZE    22
#define EOCD64_SIZE  56
#define LOC64_SIZE   20
#define DOS_DATE_1980 0x0021   /* 1980-01-01: a fixed date keeps archives reproducible */
#define CHUNK (1u << 24)       /* bytes per zlib call: uInt-sized, and an interrupt check */

static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }
static unsigned char *put16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    return p + 2;
}
static unsigned char *put32(unsigned char *p, uint32_t v)
{
    return put16(put16(p, v & 0xffff), v >> 16);
}
static unsigned char *put64(unsigned char *p, uint64_t v)
{
    return put32(put32(p, (uint32_t)v), (uint32_t)(v >> 32));
}
static uint32_t clamp32(uint64_t v) { return v >= ZIP32_MAX ? ZIP32_MAX : (uint32_t)v; }

static uint32_t crc_of(uint32_t crc, const void *p, size_t n)
{
    return n ? (uint32_t)crc32_z(crc, p, n) : crc;
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                  */
/* ------------------------------------------------------------------------ */

/* What the central directory needs to know about an entry once written. */
typedef struct zentry {
    char *name;          /* "<name>.npy" */
    size_t nlen;
    uint64_t offset, csize, usize;
    uint32_t crc;
    uint16_t method, version, flags;
} zentry;

static int cmp_names(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* Feeds n bytes to the compressor and writes what comes out; flush is
 * Z_FINISH for the last piece of the entry. */
static tgl_status deflate_some(tgl_ctx *ctx, const char *fn, tgl_atomic_file *af,
                               z_stream *zs, const unsigned char *p, size_t n, int flush,
                               unsigned char *obuf, uint64_t *csize)
{
    do {
        size_t take = n < CHUNK ? n : CHUNK;
        zs->next_in = p;
        zs->avail_in = (uInt)take;
        p += take;
        n -= take;
        if (tgl_ctx_interrupted(ctx))
            return tgl_ctx_set_error(ctx, TGL_EINTERRUPT, "%s: interrupted", fn);
        do {
            zs->next_out = obuf;
            zs->avail_out = CHUNK;
            if (deflate(zs, n ? Z_NO_FLUSH : flush) == Z_STREAM_ERROR)
                return tgl_ctx_set_error(ctx, TGL_EINTERNAL, "%s: zlib deflate failed", fn);
            size_t have = CHUNK - zs->avail_out;
            tgl_status st = tgl_atomic_write(ctx, fn, af, obuf, have);
            if (st)
                return st;
            *csize += have;
        } while (zs->avail_out == 0);
    } while (n > 0);
    return TGL_OK;
}

/* Writes one entry: local header, then the .npy image (stored or
 * deflated); then goes back to fill in the CRC and sizes. */
static tgl_status write_entry(tgl_ctx *ctx, const char *fn, tgl_atomic_file *af,
                              const tgl_array *a, bool compress, unsigned char *obuf,
                              zentry *e)
{
    tgl_array *copy;
    const tgl_array *c;
    tgl_status st = tgl_npy_contiguous(ctx, fn, a, &copy, &c);
    if (st)
        return st;
    unsigned char npy[TGL_NPY_HEADER_MAX], lh[LOCAL_SIZE + 20], *q;
    size_t hlen = tgl_npy_encode_header(c, npy);
    size_t nbytes = (size_t)c->size * tgl_dtype_size(c->dtype_id);
    e->usize = hlen + nbytes;
    e->method = compress ? 8 : 0;
    /* Zip64 in the local header must be decided before the compressed size
     * is known: allow for deflate's worst-case growth (zlib's compressBound). */
    uint64_t worst = e->usize + (e->usize >> 12) + (e->usize >> 14) + (e->usize >> 25) + 13;
    bool zip64 = (compress ? worst : e->usize) >= ZIP32_MAX;
    e->version = zip64 ? 45 : compress ? 20 : 10;
    /* Bit 11: the name is UTF-8, so readers do not take it for CP437. */
    e->flags = 0;
    for (size_t i = 0; i < e->nlen; i++)
        if ((unsigned char)e->name[i] >= 0x80)
            e->flags = 1u << 11;
    off_t off = ftello(af->fp);
    if (off < 0) {
        st = tgl_ctx_set_error(ctx, TGL_EIO, "%s: '%s': cannot tell the file position: %s",
                               fn, af->path, strerror(errno));
        goto done;
    }
    e->offset = (uint64_t)off;
    q = put32(lh, SIG_LOCAL);
    q = put16(q, e->version);
    q = put16(q, e->flags);
    q = put16(q, e->method);
    q = put16(q, 0);                       /* time */
    q = put16(q, DOS_DATE_1980);
    q = put32(q, 0);                       /* CRC and sizes: patched below */
    q = put32(q, zip64 ? ZIP32_MAX : 0);
    q = put32(q, zip64 ? ZIP32_MAX : 0);
    q = put16(q, (unsigned)e->nlen);
    q = put16(q, zip64 ? 20 : 0);
    if ((st = tgl_atomic_write(ctx, fn, af, lh, LOCAL_SIZE)) ||
        (st = tgl_atomic_write(ctx, fn, af, e->name, e->nlen)))
        goto done;
    if (zip64) {
        q = put16(put16(lh, 1), 16);
        q = put64(put64(q, 0), 0);
        if ((st = tgl_atomic_write(ctx, fn, af, lh, 20)))
            goto done;
    }
    e->crc = crc_of(crc_of(0, npy, hlen), c->data, nbytes);
    if (compress) {
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY)
            != Z_OK) {
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: zlib cannot start deflate", fn);
            goto done;
        }
        e->csize = 0;
        st = deflate_some(ctx, fn, af, &zs, npy, hlen, Z_NO_FLUSH, obuf, &e->csize);
        if (!st)
            st = deflate_some(ctx, fn, af, &zs, c->data, nbytes, Z_FINISH, obuf, &e->csize);
        deflateEnd(&zs);
    } else {
        e->csize = e->usize;
        if (!(st = tgl_atomic_write(ctx, fn, af, npy, hlen)))
            st = tgl_atomic_write(ctx, fn, af, c->data, nbytes);
    }
    if (st)
        goto done;
    /* Patch CRC and sizes, in the header fields or in the Zip64 extra. */
    q = put32(lh, e->crc);
    q = put32(q, zip64 ? ZIP32_MAX : (uint32_t)e->csize);
    q = put32(q, zip64 ? ZIP32_MAX : (uint32_t)e->usize);
    q = put64(put64(q, e->usize), e->csize);
    if (fseeko(af->fp, off + 14, SEEK_SET) != 0 ||
        (st = tgl_atomic_write(ctx, fn, af, lh, 12)) ||
        (zip64 && (fseeko(af->fp, off + LOCAL_SIZE + (off_t)e->nlen + 4, SEEK_SET) != 0 ||
                   (st = tgl_atomic_write(ctx, fn, af, lh + 12, 16)))) ||
        fseeko(af->fp, 0, SEEK_END) != 0) {
        if (!st)
            st = tgl_ctx_set_error(ctx, TGL_EIO, "%s: '%s': seek failed: %s", fn, af->path,
                                   strerror(errno));
    }
done:
    tgl_array_release(copy);
    return st;
}

/* The central directory, then the Zip64 EOCD record and locator when any
 * count, size or offset needs them, then the EOCD. */
static tgl_status write_directory(tgl_ctx *ctx, const char *fn, tgl_atomic_file *af, int n,
                                  const zentry *es)
{
    unsigned char b[CENTRAL_SIZE + 28 + EOCD64_SIZE + LOC64_SIZE + EOCD_SIZE], *q;
    tgl_status st;
    off_t cd_start = ftello(af->fp);
    if (cd_start < 0)
        return tgl_ctx_set_error(ctx, TGL_EIO, "%s: '%s': cannot tell the file position: %s",
                                 fn, af->path, strerror(errno));
    for (int i = 0; i < n; i++) {
        const zentry *e = &es[i];
        unsigned char x[28], *xq = put16(x, 1) + 2;
        if (e->usize >= ZIP32_MAX)
            xq = put64(xq, e->usize);
        if (e->csize >= ZIP32_MAX)
            xq = put64(xq, e->csize);
        if (e->offset >= ZIP32_MAX)
            xq = put64(xq, e->offset);
        size_t xlen = xq - x > 4 ? (size_t)(xq - x) : 0;
        put16(x + 2, (unsigned)(xlen ? xlen - 4 : 0));
        uint16_t version = xlen && e->version < 45 ? 45 : e->version;
        q = put32(b, SIG_CENTRAL);
        q = put16(q, 3u << 8 | version);   /* made by: Unix, so the mode below counts */
        q = put16(q, version);
        q = put16(q, e->flags);
        q = put16(q, e->method);
        q = put16(q, 0);
        q = put16(q, DOS_DATE_1980);
        q = put32(q, e->crc);
        q = put32(q, clamp32(e->csize));
        q = put32(q, clamp32(e->usize));
        q = put16(q, (unsigned)e->nlen);
        q = put16(q, (unsigned)xlen);
        q = put16(q, 0);                   /* comment */
        q = put16(q, 0);                   /* disk */
        q = put16(q, 0);                   /* internal attributes */
        q = put32(q, 0100644u << 16);      /* regular file, rw-r--r-- */
        q = put32(q, clamp32(e->offset));
        if ((st = tgl_atomic_write(ctx, fn, af, b, CENTRAL_SIZE)) ||
            (st = tgl_atomic_write(ctx, fn, af, e->name, e->nlen)) ||
            (st = tgl_atomic_write(ctx, fn, af, x, xlen)))
            return st;
    }
    off_t cd_end = ftello(af->fp);
    if (cd_end < 0)
        return tgl_ctx_set_error(ctx, TGL_EIO, "%s: '%s': cannot tell the file position: %s",
                                 fn, af->path, strerror(errno));
    uint64_t cd_off = (uint64_t)cd_start, cd_size = (uint64_t)(cd_end - cd_start);
    q = b;
    if (n >= 0xFFFF || cd_off >= ZIP32_MAX || cd_size >= ZIP32_MAX) {
        q = put32(q, SIG_EOCD64);
        q = put64(q, EOCD64_SIZE - 12);    /* size of the rest of the record */
        q = put16(q, 3u << 8 | 45);
        q = put16(q, 45);
        q = put32(put32(q, 0), 0);         /* this disk, the directory's disk */
        q = put64(put64(q, (uint64_t)n), (uint64_t)n);
        q = put64(put64(q, cd_size), cd_off);
        q = put32(q, SIG_LOC64);
        q = put32(q, 0);
        q = put64(q, (uint64_t)cd_end);    /* where the Zip64 EOCD record starts */
        q = put32(q, 1);                   /* disks */
    }
    q = put32(q, SIG_EOCD);
    q = put16(put16(q, 0), 0);
    q = put16(put16(q, n >= 0xFFFF ? 0xFFFF : (unsigned)n), n >= 0xFFFF ? 0xFFFF : (unsigned)n);
    q = put32(put32(q, clamp32(cd_size)), clamp32(cd_off));
    q = put16(q, 0);                       /* comment */
    return tgl_atomic_write(ctx, fn, af, b, (size_t)(q - b));
}

tgl_status tgl_npz_save(tgl_ctx *ctx, const char *path, int n, const char *const *names,
                        const tgl_array *const *arrays, int compress)
{
    const char *fn = "tgl_npz_save";
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(path, TGL_EINVAL, "%s: path is NULL", fn);
    TGL_CHECK(n >= 0, TGL_EINVAL, "%s: negative number of arrays (%d)", fn, n);
    TGL_CHECK(n == 0 || (names && arrays), TGL_EINVAL, "%s: names or arrays is NULL", fn);
    /* Check every argument before touching the file system. */
    for (int i = 0; i < n; i++) {
        TGL_CHECK(names[i] && names[i][0], TGL_EINVAL, "%s: name %d is %s", fn, i + 1,
                  names[i] ? "empty" : "NULL");
        TGL_CHECK(strlen(names[i]) <= 0xFFFF - 4, TGL_EINVAL, "%s: name %d is too long", fn,
                  i + 1);
        char what[80];
        snprintf(what, sizeof what, "array '%.60s'", names[i]);
        tgl_status st = tgl_npy_check_array(ctx, fn, what, arrays[i]);
        if (st)
            return st;
    }
    const char **sorted = malloc(sizeof *sorted * (size_t)(n ? n : 1));
    zentry *es = calloc((size_t)(n ? n : 1), sizeof *es);
    unsigned char *obuf = compress ? malloc(CHUNK) : NULL;
    tgl_status st = TGL_OK;
    if (!sorted || !es || (compress && !obuf)) {
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn);
        goto done;
    }
    if (n > 0)
        memcpy(sorted, names, sizeof *sorted * (size_t)n);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_names);
    for (int i = 1; i < n; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) {
            st = tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: the name '%.200s' is given twice", fn,
                                   sorted[i]);
            goto done;
        }
    for (int i = 0; i < n; i++) {
        es[i].nlen = strlen(names[i]) + 4;
        if (!(es[i].name = malloc(es[i].nlen + 1))) {
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn);
            goto done;
        }
        snprintf(es[i].name, es[i].nlen + 1, "%s.npy", names[i]);
    }
    tgl_atomic_file af;
    if ((st = tgl_atomic_open(ctx, fn, path, &af)))
        goto done;
    for (int i = 0; i < n && !st; i++)
        st = write_entry(ctx, fn, &af, arrays[i], compress != 0, obuf, &es[i]);
    if (!st)
        st = write_directory(ctx, fn, &af, n, es);
    if (st)
        tgl_atomic_abort(&af);
    else
        st = tgl_atomic_commit(ctx, fn, &af);
done:
    for (int i = 0; es && i < n; i++)
        free(es[i].name);
    free(es);
    free(sorted);
    free(obuf);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Reading                                                                  */
/* ------------------------------------------------------------------------ */

/* An entry as the central directory describes it. */
typedef struct zinfo {
    const unsigned char *name;   /* into the directory buffer, not NUL-ended */
    size_t nlen;
    uint64_t csize, usize, offset;
    uint32_t crc;
    uint16_t method;
} zinfo;

typedef struct zreader {
    tgl_ctx *ctx;
    const char *fn, *where;
    FILE *fp;
    uint64_t size;
} zreader;

/* Reads n bytes at off; the caller has checked off + n <= size. */
static tgl_status read_at(zreader *z, uint64_t off, void *buf, size_t n)
{
    if (n == 0)
        return TGL_OK;
    if (fseeko(z->fp, (off_t)off, SEEK_SET) != 0 || fread(buf, 1, n, z->fp) != n)
        return tgl_io_fail(z->ctx, TGL_EIO, z->fn, z->where, "read failed: %s",
                           ferror(z->fp) ? strerror(errno) : "the file got shorter");
    return TGL_OK;
}

/* An entry's name for messages, quoted and escaped (tgl_io_show). */
static void display_name(const zinfo *e, char *buf, size_t cap)
{
    tgl_io_show(buf, cap, e->name, e->nlen);
}

/* Inflates exactly usize bytes from csize, refusing streams that end early
 * or would produce more than the directory claims. */
static tgl_status inflate_entry(zreader *z, const char *ename, const unsigned char *in,
                                uint64_t csize, unsigned char *out, uint64_t usize)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, -15) != Z_OK)
        return tgl_ctx_set_error(z->ctx, TGL_ENOMEM, "%s: zlib cannot start inflate", z->fn);
    uint64_t in_given = 0, out_given = 0;
    unsigned char spare[64];
    bool over = false, too_long = false;
    int r;
    for (;;) {
        if (zs.avail_in == 0 && in_given < csize) {
            uint64_t take = csize - in_given < CHUNK ? csize - in_given : CHUNK;
            zs.next_in = in + in_given;
            zs.avail_in = (uInt)take;
            in_given += take;
        }
        if (zs.avail_out == 0) {
            if (tgl_ctx_interrupted(z->ctx)) {
                inflateEnd(&zs);
                return tgl_ctx_set_error(z->ctx, TGL_EINTERRUPT, "%s: interrupted", z->fn);
            }
            if (out_given < usize) {
                uint64_t take = usize - out_given < CHUNK ? usize - out_given : CHUNK;
                zs.next_out = out + out_given;
                zs.avail_out = (uInt)take;
                out_given += take;
            } else {
                /* All claimed bytes are out: anything more is an error. */
                zs.next_out = spare;
                zs.avail_out = sizeof spare;
                over = true;
            }
        }
        r = inflate(&zs, Z_NO_FLUSH);
        if (over && zs.avail_out < sizeof spare) {
            too_long = true;
            break;
        }
        if (r != Z_OK)
            break;
    }
    uint64_t produced = over ? usize : out_given - zs.avail_out;
    char why[128];
    if (too_long)
        snprintf(why, sizeof why, "it inflates to more than the %" PRIu64 " bytes the "
                 "archive's directory says", usize);
    else if (r == Z_STREAM_END && produced == usize)
        why[0] = '\0';
    else if (r == Z_STREAM_END)
        snprintf(why, sizeof why, "it inflates to %" PRIu64 " bytes, not the %" PRIu64
                 " the archive's directory says", produced, usize);
    else if (r == Z_DATA_ERROR)
        snprintf(why, sizeof why, "corrupt deflate data (%s)", zs.msg ? zs.msg : "zlib");
    else if (r == Z_MEM_ERROR)
        snprintf(why, sizeof why, "out of memory");
    else
        snprintf(why, sizeof why, "truncated deflate data");
    inflateEnd(&zs);
    if (why[0])
        return tgl_io_fail(z->ctx, !too_long && r == Z_MEM_ERROR ? TGL_ENOMEM : TGL_EFORMAT, z->fn, z->where,
                           "entry %s: %s", ename, why);
    return TGL_OK;
}

/* Finds the EOCD and, through it, the central directory's extent. */
static tgl_status find_directory(zreader *z, uint64_t *n, uint64_t *cd_off, uint64_t *cd_size,
                                 uint64_t *cd_limit)
{
    unsigned char b[EOCD64_SIZE];
    const size_t tmax = EOCD_SIZE + 0xFFFF;
    size_t tlen = z->size < tmax ? (size_t)z->size : tmax;
    unsigned char *tail = malloc(tmax);
    if (!tail)
        return tgl_ctx_set_error(z->ctx, TGL_ENOMEM, "%s: out of memory", z->fn);
    tgl_status st = read_at(z, z->size - tlen, tail, tlen);
    if (st) {
        free(tail);
        return st;
    }
    /* The EOCD is the last record; a comment of up to 64 KiB may follow it. */
    size_t i = tlen >= EOCD_SIZE ? tlen - EOCD_SIZE + 1 : 0;
    while (i-- > 0)
        if (get32(tail + i) == SIG_EOCD && i + EOCD_SIZE + get16(tail + i + 20) <= tlen)
            break;
    if (i == (size_t)-1) {
        free(tail);
        return tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                           "not a zip archive, or truncated: no end-of-central-directory "
                           "record");
    }
    const unsigned char *e = tail + i;
    uint64_t pos = z->size - tlen + i;
    uint32_t disk = get16(e + 4), cd_disk = get16(e + 6);
    uint64_t n_disk = get16(e + 8);
    *n = get16(e + 10);
    *cd_size = get32(e + 12);
    *cd_off = get32(e + 16);
    *cd_limit = pos;
    free(tail);
    if (pos >= LOC64_SIZE) {
        if ((st = read_at(z, pos - LOC64_SIZE, b, LOC64_SIZE)))
            return st;
        if (get32(b) == SIG_LOC64) {
            uint64_t off64 = get64(b + 8);
            if (off64 > pos - LOC64_SIZE || pos - LOC64_SIZE - off64 < EOCD64_SIZE)
                return tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                                   "bad Zip64 locator (record offset %" PRIu64 ")", off64);
            if ((st = read_at(z, off64, b, EOCD64_SIZE)))
                return st;
            if (get32(b) != SIG_EOCD64)
                return tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                                   "no Zip64 end-of-central-directory record where its "
                                   "locator points");
            disk = get32(b + 16);
            cd_disk = get32(b + 20);
            n_disk = get64(b + 24);
            *n = get64(b + 32);
            *cd_size = get64(b + 40);
            *cd_off = get64(b + 48);
            *cd_limit = off64;
        }
    }
    if (disk != 0 || cd_disk != 0 || n_disk != *n)
        return tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                           "multi-volume archives are not supported");
    if (*cd_off > *cd_limit || *cd_size > *cd_limit - *cd_off)
        return tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                           "truncated or corrupt: the central directory (%" PRIu64
                           " bytes at offset %" PRIu64 ") lies outside the archive",
                           *cd_size, *cd_off);
    if (*n > *cd_size / CENTRAL_SIZE)
        return tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                           "corrupt: %" PRIu64 " entries claimed but the central directory "
                           "holds at most %" PRIu64, *n, *cd_size / CENTRAL_SIZE);
    return TGL_OK;
}

/* Parses the central directory into es[0..n-1]. */
static tgl_status parse_directory(zreader *z, const unsigned char *cd, uint64_t cd_size,
                                  uint64_t n, zinfo *es)
{
    const unsigned char *p = cd, *end = cd + cd_size;
    for (uint64_t k = 0; k < n; k++) {
        zinfo *e = &es[k];
        if (end - p < CENTRAL_SIZE || get32(p) != SIG_CENTRAL)
            return tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                               "corrupt central directory (entry %" PRIu64 ")", k + 1);
        uint16_t flags = get16(p + 8), nlen = get16(p + 28), xlen = get16(p + 30);
        e->method = get16(p + 10);
        e->crc = get32(p + 16);
        e->csize = get32(p + 20);
        e->usize = get32(p + 24);
        e->offset = get32(p + 42);
        size_t total = (size_t)CENTRAL_SIZE + nlen + xlen + get16(p + 32);
        if ((size_t)(end - p) < total)
            return tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                               "corrupt central directory (entry %" PRIu64 ")", k + 1);
        e->name = p + CENTRAL_SIZE;
        e->nlen = nlen;
        char dn[128];
        display_name(e, dn, sizeof dn);
        if (nlen == 0 || memchr(e->name, 0, nlen))
            return tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                               "entry %" PRIu64 " has an empty name or one with a NUL byte",
                               k + 1);
        /* Zip64 extra: 64-bit values for exactly the fields that read
         * 0xFFFFFFFF, in the order usize, csize, offset. */
        const unsigned char *x = e->name + nlen, *xend = x + xlen;
        while (xend - x >= 4) {
            uint16_t id = get16(x), sz = get16(x + 2);
            if (xend - x - 4 < sz)
                break;
            if (id == 1) {
                const unsigned char *f = x + 4, *fend = f + sz;
                uint64_t *fields[3] = { &e->usize, &e->csize, &e->offset };
                for (int j = 0; j < 3; j++) {
                    if (*fields[j] != ZIP32_MAX)
                        continue;
                    if (fend - f < 8)
                        return tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                                           "entry %s: Zip64 extra field too short", dn);
                    *fields[j] = get64(f);
                    f += 8;
                }
            }
            x += 4 + sz;
        }
        if (flags & 0x41)
            return tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                               "entry %s is encrypted (not supported)", dn);
        if (e->method != 0 && e->method != 8)
            return tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                               "entry %s uses compression method %u (tgl reads stored (0) "
                               "and deflated (8))", dn, e->method);
        p += total;
    }
    return TGL_OK;
}

/* Reads, checks and decodes one entry into *out. */
static tgl_status load_entry(zreader *z, const zinfo *e, uint64_t data_limit, tgl_array **out)
{
    char dn[128], where[TGL_ERRMSG_SIZE];
    unsigned char lh[LOCAL_SIZE], *lname = NULL, *cbuf = NULL, *ubuf = NULL;
    display_name(e, dn, sizeof dn);
    tgl_status st;
    if (e->offset > data_limit || data_limit - e->offset < LOCAL_SIZE)
        return tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                           "entry %s: local header offset %" PRIu64 " is past the data", dn,
                           e->offset);
    if ((st = read_at(z, e->offset, lh, LOCAL_SIZE)))
        return st;
    uint64_t data = e->offset + LOCAL_SIZE + get16(lh + 26) + get16(lh + 28);
    if (get32(lh) != SIG_LOCAL || get16(lh + 26) != e->nlen || get16(lh + 8) != e->method)
        return tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                           "entry %s: its local header does not match the central directory",
                           dn);
    if (data > data_limit || e->csize > data_limit - data)
        return tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                           "truncated or corrupt: entry %s (%" PRIu64 " bytes at offset %"
                           PRIu64 ") runs past the end of the archive's data", dn, e->csize,
                           data);
    /* Max deflate ratio is 1032:1, so this bounds usize by the file size. */
    if (e->method == 0 ? e->usize != e->csize : e->usize / 1032 > e->csize + 1)
        return tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                           "corrupt: entry %s claims %" PRIu64 " bytes from %" PRIu64
                           " %s bytes", dn, e->usize, e->csize,
                           e->method == 0 ? "stored" : "deflated");
    /* Sizes are now bounded by the file size (or 1032 times it). */
    if (!(lname = malloc(e->nlen)) || !(cbuf = malloc(e->csize ? (size_t)e->csize : 1)) ||
        (e->method == 8 && !(ubuf = malloc(e->usize ? (size_t)e->usize : 1)))) {
        st = tgl_ctx_set_error(z->ctx, TGL_ENOMEM, "%s: out of memory reading entry %s",
                               z->fn, dn);
        goto done;
    }
    if ((st = read_at(z, e->offset + LOCAL_SIZE, lname, e->nlen)))
        goto done;
    if (memcmp(lname, e->name, e->nlen) != 0) {
        st = tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                         "entry %s: its local header does not match the central directory",
                         dn);
        goto done;
    }
    if ((st = read_at(z, data, cbuf, (size_t)e->csize)))
        goto done;
    if (e->method == 8 && (st = inflate_entry(z, dn, cbuf, e->csize, ubuf, e->usize)))
        goto done;
    const unsigned char *u = e->method == 8 ? ubuf : cbuf;
    uint32_t crc = crc_of(0, u, (size_t)e->usize);
    if (crc != e->crc) {
        st = tgl_io_fail(z->ctx, TGL_EFORMAT, z->fn, z->where,
                         "CRC mismatch in entry %s (the directory says %08" PRIx32
                         ", the data gives %08" PRIx32 ")", dn, e->crc, crc);
        goto done;
    }
    snprintf(where, sizeof where, "%s: entry %s", z->where, dn);
    st = tgl_npy_decode(z->ctx, z->fn, where, u, (size_t)e->usize, out);
done:
    free(lname);
    free(cbuf);
    free(ubuf);
    return st;
}

void tgl_npz_free(tgl_npz *npz)
{
    if (!npz)
        return;
    for (int i = 0; i < npz->n; i++) {
        free(npz->names ? npz->names[i] : NULL);
        tgl_array_release(npz->arrays ? npz->arrays[i] : NULL);
    }
    free(npz->names);
    free(npz->arrays);
    free(npz);
}

tgl_status tgl_npz_load(tgl_ctx *ctx, const char *path, tgl_npz **out)
{
    const char *fn = "tgl_npz_load";
    char where[TGL_IO_WHERE_SIZE];
    TGL_CHECK_CTX(ctx);
    zreader z = { ctx, fn, where, NULL, 0 };
    tgl_status st = tgl_io_reader_args(ctx, fn, path, out, "path and out", where);
    if (!st)
        st = tgl_io_fopen_read(ctx, fn, where, path, &z.fp, &z.size);
    if (st)
        return st;
    uint64_t n = 0, cd_off = 0, cd_size = 0, cd_limit = 0;
    unsigned char *cd = NULL;
    zinfo *es = NULL;
    char **sorted = NULL;
    tgl_npz *npz = NULL;
    if ((st = find_directory(&z, &n, &cd_off, &cd_size, &cd_limit)))
        goto done;
    if (n > INT32_MAX) {
        st = tgl_io_fail(ctx, TGL_EFORMAT, fn, where, "too many entries (%" PRIu64 ")", n);
        goto done;
    }
    /* Both are bounded by the directory's size, itself inside the file. */
    cd = malloc(cd_size ? (size_t)cd_size : 1);
    es = calloc(n ? (size_t)n : 1, sizeof *es);
    sorted = malloc(sizeof *sorted * (n ? (size_t)n : 1));
    npz = calloc(1, sizeof *npz);
    if (npz) {
        npz->names = calloc(n ? (size_t)n : 1, sizeof *npz->names);
        npz->arrays = calloc(n ? (size_t)n : 1, sizeof *npz->arrays);
    }
    if (!cd || !es || !sorted || !npz || !npz->names || !npz->arrays) {
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn);
        goto done;
    }
    npz->n = (int)n;
    if ((st = read_at(&z, cd_off, cd, (size_t)cd_size)) ||
        (st = parse_directory(&z, cd, cd_size, n, es)))
        goto done;
    /* Names: "W.npy" -> "W" (NumPy keeps other names whole), no repeats. */
    for (uint64_t k = 0; k < n; k++) {
        size_t len = es[k].nlen;
        if (len > 4 && memcmp(es[k].name + len - 4, ".npy", 4) == 0)
            len -= 4;
        if (!(npz->names[k] = malloc(len + 1))) {
            st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn);
            goto done;
        }
        memcpy(npz->names[k], es[k].name, len);
        npz->names[k][len] = '\0';
        sorted[k] = npz->names[k];
    }
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_names);
    for (uint64_t k = 1; k < n; k++)
        if (strcmp(sorted[k - 1], sorted[k]) == 0) {
            char shown[128];
            st = tgl_io_fail(ctx, TGL_EFORMAT, fn, where, "two entries are named %s",
                             tgl_io_show(shown, sizeof shown, sorted[k], strlen(sorted[k])));
            goto done;
        }
    for (uint64_t k = 0; k < n; k++)
        if ((st = load_entry(&z, &es[k], cd_off, &npz->arrays[k])))
            goto done;
    *out = npz;
    npz = NULL;
done:
    tgl_npz_free(npz);
    free(sorted);
    free(es);
    free(cd);
    fclose(z.fp);
    return st;
}
