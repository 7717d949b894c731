/*
 * npy.c — NumPy's .npy format: tgl_npy_save and tgl_npy_load, and the
 * in-memory encoder and decoder npz.c uses for archive entries (declared in
 * npyfmt.h; what every format shares is io.c).
 *
 * The format (numpy/lib/format.py): "\x93NUMPY", major and minor version
 * bytes, the header length (2 bytes little-endian in 1.0, 4 bytes in 2.0 and
 * 3.0), the header — a Python dict literal such as
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and a final '\n' so the data starts at a multiple of 64
 * bytes — then the elements, raw.  3.0 only differs in allowing UTF-8 in
 * the header, which matters to no dtype tgl reads.
 *
 * Every length and count read from a file is checked against the bytes
 * actually present before anything is allocated, so a corrupt or hostile
 * file fails with TGL_EFORMAT instead of crashing or exhausting memory.
 */
#include "io/npyfmt.h"
#include "engine/backend.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const unsigned char npy_magic[6] = TGL_NPY_MAGIC;

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define HOST_ORDER '>'
#define FOREIGN_ORDER '<'
#else
#define HOST_ORDER '<'
#define FOREIGN_ORDER '>'
#endif

/* The dtypes' descr kind letters, indexed by tgl_dtype. */
static const char dtype_kind[TGL_NDTYPES] = { 'f', 'f', 'i', 'i', 'u', 'b' };


/* ------------------------------------------------------------------------ */
/* Header parsing                                                           */
/* ------------------------------------------------------------------------ */

/* What a header says about the data that follows it. */
typedef struct npy_info {
    int dtype;
    int ndim;
    int64_t shape[TGL_MAX_DIMS];
    bool fortran;        /* elements stored in Fortran (column-major) order */
    bool swap;           /* elements stored in the other byte order         */
    int64_t count;       /* elements                                        */
    uint64_t nbytes;     /* bytes of element data                           */
} npy_info;

/* A cursor over the header text.  The header is untrusted: every read is
 * bounded by end, and nothing recurses, so nesting cannot overflow. */
typedef struct parser {
    const unsigned char *start, *p, *end;
    tgl_ctx *ctx;
    const char *fn, *where;
} parser;

static tgl_status perr(parser *ps, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static tgl_status perr(parser *ps, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tgl_io_fail(ps->ctx, TGL_EFORMAT, ps->fn, ps->where,
                       "bad header: %s (at byte %td of the header)", msg, ps->p - ps->start);
}

static void skip_space(parser *ps)
{
    while (ps->p < ps->end &&
           (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

/* Consumes c (after optional whitespace) if it is next. */
static bool accept(parser *ps, char c)
{
    skip_space(ps);
    if (ps->p < ps->end && *ps->p == (unsigned char)c) {
        ps->p++;
        return true;
    }
    return false;
}

/* A quoted Python string into buf (truncated to cap-1 bytes; the whole
 * literal is consumed either way).  Escapes keep the escaped character,
 * which is all the keys and dtype names of a .npy header can need. */
static tgl_status parse_string(parser *ps, char *buf, size_t cap)
{
    skip_space(ps);
    if (ps->p >= ps->end || (*ps->p != '\'' && *ps->p != '"'))
        return perr(ps, "expected a quoted string");
    unsigned char q = *ps->p++;
    size_t n = 0;
    while (ps->p < ps->end && *ps->p != q) {
        if (*ps->p == '\\' && ps->p + 1 < ps->end)
            ps->p++;
        if (n + 1 < cap)
            buf[n++] = (char)*ps->p;
        ps->p++;
    }
    if (ps->p >= ps->end)
        return perr(ps, "unterminated string");
    ps->p++;
    buf[n] = '\0';
    return TGL_OK;
}

/* True if the word w is next, not followed by more identifier characters. */
static bool accept_word(parser *ps, const char *w)
{
    size_t n = strlen(w);
    skip_space(ps);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, w, n) != 0)
        return false;
    if (ps->p + n < ps->end) {
        unsigned char c = ps->p[n];
        if (c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
            (c >= 'A' && c <= 'Z'))
            return false;
    }
    ps->p += n;
    return true;
}

static tgl_status parse_bool(parser *ps, bool *v)
{
    if (accept_word(ps, "True"))
        *v = true;
    else if (accept_word(ps, "False"))
        *v = false;
    else
        return perr(ps, "'fortran_order' must be True or False");
    return TGL_OK;
}

/* A tuple of non-negative integers: (), (5,), (2, 3). */
static tgl_status parse_shape(parser *ps, npy_info *info)
{
    if (!accept(ps, '('))
        return perr(ps, "'shape' must be a tuple such as (2, 3)");
    int n = 0;
    bool comma = false;
    while (!accept(ps, ')')) {
        if (n > 0 && !comma)
            return perr(ps, "expected ',' or ')' in 'shape'");
        skip_space(ps);
        bool neg = ps->p < ps->end && *ps->p == '-';
        if (neg)
            ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
            return perr(ps, "expected an integer in 'shape'");
        uint64_t v = 0;
        bool big = false;
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
            unsigned d = *ps->p++ - '0';
            if (v > (uint64_t)(INT64_MAX - d) / 10)
                big = true;
            else
                v = v * 10 + d;
        }
        if (ps->p < ps->end && *ps->p == 'L')   /* Python 2 wrote longs as 5L */
            ps->p++;
        if (neg && (v != 0 || big))
            return tgl_io_fail(ps->ctx, TGL_EFORMAT, ps->fn, ps->where,
                               "negative dimension in shape (dimension %d)", n + 1);
        if (big)
            return tgl_io_fail(ps->ctx, TGL_EFORMAT, ps->fn, ps->where,
                               "dimension %d of the shape does not fit in 64 bits", n + 1);
        if (n == TGL_MAX_DIMS)
            return tgl_io_fail(ps->ctx, TGL_EFORMAT, ps->fn, ps->where,
                               "more than %d dimensions (tgl arrays have at most %d)",
                               TGL_MAX_DIMS, TGL_MAX_DIMS);
        info->shape[n++] = (int64_t)v;
        comma = accept(ps, ',');
    }
    /* (5) is the number 5 in Python, not a tuple. */
    if (n == 1 && !comma)
        return perr(ps, "'shape' must be a tuple; (n) is not one, (n,) is");
    info->ndim = n;
    return TGL_OK;
}

/* descr such as '<f4' -> dtype and byte order. */
static tgl_status parse_descr(parser *ps, const char *descr, npy_info *info)
{
    const char *s = descr;
    char order = '=';
    if (*s == '<' || *s == '>' || *s == '=' || *s == '|' || *s == '!')
        order = *s++;
    char kind = *s ? *s++ : '\0';
    int size = 0;
    while (*s >= '0' && *s <= '9' && size < 1000)
        size = size * 10 + (*s++ - '0');
    char shown[4 * 40 + 8];
    tgl_io_show(shown, sizeof shown, descr, strlen(descr));
    if (kind == 'O')
        return tgl_io_fail(ps->ctx, TGL_EDTYPE, ps->fn, ps->where,
                           "object arrays (descr %s) are not supported", shown);
    int dtype = -1;
    if (*s == '\0')
        for (int d = 0; d < TGL_NDTYPES; d++)
            if (dtype_kind[d] == kind && (size_t)size == tgl_dtype_size(d))
                dtype = d;
    /* '|' means "byte order does not apply": only for one-byte elements. */
    if (dtype < 0 || (order == '|' && size != 1))
        return tgl_io_fail(ps->ctx, TGL_EDTYPE, ps->fn, ps->where,
                           "unsupported dtype %s (tgl reads float32 '<f4', float64 '<f8', "
                           "int32 '<i4', int64 '<i8', uint8 '|u1' and bool '|b1', "
                           "in either byte order)", shown);
    info->dtype = dtype;
    info->swap = size > 1 && (order == FOREIGN_ORDER || (order == '!' && HOST_ORDER == '<'));
    return TGL_OK;
}

/* Parses the header dict.  Keys may come in any order; all three are
 * required and no others are allowed (NumPy refuses the same files). */
static tgl_status parse_header(tgl_ctx *ctx, const char *fn, const char *where,
                               const unsigned char *h, size_t len, npy_info *info)
{
    parser ps = { h, h, h + len, ctx, fn, where };
    char key[32], descr[40];
    bool have_descr = false, have_order = false, have_shape = false;
    tgl_status st;

    memset(info, 0, sizeof *info);
    if (!accept(&ps, '{'))
        return perr(&ps, "expected '{'");
    while (!accept(&ps, '}')) {
        if ((st = parse_string(&ps, key, sizeof key)))
            return st;
        char shown[4 * sizeof key + 8];
        tgl_io_show(shown, sizeof shown, key, strlen(key));
        if (!accept(&ps, ':'))
            return perr(&ps, "expected ':' after %s", shown);
        bool *seen;
        if (strcmp(key, "descr") == 0) {
            skip_space(&ps);
            if (ps.p < ps.end && (*ps.p == '[' || *ps.p == '{'))
                return tgl_io_fail(ctx, TGL_EDTYPE, fn, where,
                                   "structured dtypes are not supported");
            if ((st = parse_string(&ps, descr, sizeof descr)))
                return st;
            seen = &have_descr;
        } else if (strcmp(key, "fortran_order") == 0) {
            if ((st = parse_bool(&ps, &info->fortran)))
                return st;
            seen = &have_order;
        } else if (strcmp(key, "shape") == 0) {
            if ((st = parse_shape(&ps, info)))
                return st;
            seen = &have_shape;
        } else {
            return perr(&ps, "unexpected key %s", shown);
        }
        if (*seen)
            return perr(&ps, "key %s appears twice", shown);
        *seen = true;
        if (!accept(&ps, ',')) {
            if (accept(&ps, '}'))
                break;
            return perr(&ps, "expected ',' or '}'");
        }
    }
    /* Padding: spaces and the final newline (some writers pad with NULs). */
    while (ps.p < ps.end && (*ps.p == ' ' || *ps.p == '\n' || *ps.p == '\r' ||
                             *ps.p == '\t' || *ps.p == '\0'))
        ps.p++;
    if (ps.p != ps.end)
        return perr(&ps, "unexpected text after the dict");
    if (!have_descr || !have_order || !have_shape)
        return perr(&ps, "missing key '%s'",
                    !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
    if ((st = parse_descr(&ps, descr, info)))
        return st;

    /* Element and byte counts, refusing overflow: the same bound as
     * tgl_check_shape, so what passes here can be allocated. */
    int64_t count = 1;
    for (int i = 0; i < info->ndim; i++) {
        if (info->shape[i] != 0 && !tgl_size_mul(count, info->shape[i], &count)) {
            for (int j = i + 1; j < info->ndim; j++)
                if (info->shape[j] == 0)
                    goto empty;  /* a zero dimension makes the product 0 */
            char sh[TGL_MAX_DIMS * 22 + 4];
            return tgl_io_fail(ctx, TGL_EFORMAT, fn, where,
                               "shape too large (over 2^59 elements): %s",
                               tgl_shape_str(sh, sizeof sh, info->ndim, info->shape));
        }
        if (info->shape[i] == 0)
            count = 0;
    }
    info->count = count;
    info->nbytes = (uint64_t)count * tgl_dtype_size(info->dtype);
    return TGL_OK;
empty:
    info->count = 0;
    info->nbytes = 0;
    return TGL_OK;
}

/* The fixed-size preamble: magic, version, header length.  On success
 * *hoff is where the header starts and *hlen its length. */
static tgl_status parse_preamble(tgl_ctx *ctx, const char *fn, const char *where,
                                 const unsigned char *p, size_t avail, size_t *hoff,
                                 uint64_t *hlen)
{
    size_t m = avail < sizeof npy_magic ? avail : sizeof npy_magic;
    if (memcmp(p, npy_magic, m) != 0)
        return tgl_io_fail(ctx, TGL_EFORMAT, fn, where,
                           "not a .npy file (it does not start with \\x93NUMPY)");
    if (avail < 8)
        return tgl_io_fail(ctx, TGL_EFORMAT, fn, where,
                           "truncated: %zu bytes, too short for a .npy file", avail);
    int major = p[6], minor = p[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
        return tgl_io_fail(ctx, TGL_EFORMAT, fn, where,
                           "unsupported .npy format version %d.%d (tgl reads 1.0, 2.0, 3.0)",
                           major, minor);
    *hoff = major == 1 ? 10 : 12;
    if (avail < *hoff)
        return tgl_io_fail(ctx, TGL_EFORMAT, fn, where,
                           "truncated: %zu bytes, too short for a .npy file", avail);
    *hlen = major == 1 ? (uint64_t)p[8] | (uint64_t)p[9] << 8
                       : (uint64_t)p[8] | (uint64_t)p[9] << 8 | (uint64_t)p[10] << 16 |
                             (uint64_t)p[11] << 24;
    return TGL_OK;
}

/* The data must be exactly what the header describes. */
static tgl_status check_data_size(tgl_ctx *ctx, const char *fn, const char *where,
                                  const npy_info *info, uint64_t avail)
{
    if (info->nbytes > avail)
        return tgl_io_fail(ctx, TGL_EFORMAT, fn, where,
                           "truncated: header claims %" PRId64 " elements (%" PRIu64
                           " bytes) but only %" PRIu64 " bytes follow",
                           info->count, info->nbytes, avail);
    if (info->nbytes < avail)
        return tgl_io_fail(ctx, TGL_EFORMAT, fn, where,
                           "%" PRIu64 " bytes of unexpected data after the %" PRId64
                           " elements the header claims", avail - info->nbytes, info->count);
    return TGL_OK;
}

/* ------------------------------------------------------------------------ */
/* Element data                                                             */
/* ------------------------------------------------------------------------ */

/* Copies count elements of es bytes from Fortran order (src) into C order
 * (dst): walk the C index like an odometer and track the Fortran offset. */
static void fortran_to_c(unsigned char *dst, const unsigned char *src, const npy_info *info,
                         size_t es)
{
    int64_t fstride[TGL_MAX_DIMS], idx[TGL_MAX_DIMS] = { 0 };
    int64_t s = 1, off = 0;
    for (int k = 0; k < info->ndim; k++) {
        fstride[k] = s;
        s *= info->shape[k];
    }
    for (int64_t i = 0; i < info->count; i++) {
        memcpy(dst + (size_t)i * es, src + (size_t)off * es, es);
        for (int k = info->ndim - 1; k >= 0; k--) {
            if (++idx[k] < info->shape[k]) {
                off += fstride[k];
                break;
            }
            off -= (info->shape[k] - 1) * fstride[k];
            idx[k] = 0;
        }
    }
}

static void byteswap(unsigned char *p, int64_t count, size_t es)
{
    for (int64_t i = 0; i < count; i++, p += es) {
        if (es == 4) {
            uint32_t v;
            memcpy(&v, p, 4);
            v = __builtin_bswap32(v);
            memcpy(p, &v, 4);
        } else if (es == 8) {
            uint64_t v;
            memcpy(&v, p, 8);
            v = __builtin_bswap64(v);
            memcpy(p, &v, 8);
        }
    }
}

/* Makes the array from the data, which is either in memory (mem) or the
 * next info->nbytes bytes of fp; size checks are already done. */
static tgl_status materialize(tgl_ctx *ctx, const char *fn, const char *where,
                              const npy_info *info, const unsigned char *mem, FILE *fp,
                              tgl_array **out)
{
    tgl_array *a;
    tgl_status st = tgl_array_alloc(ctx, fn, info->dtype, info->ndim, info->shape, false, &a);
    if (st)
        return st;
    size_t es = tgl_dtype_size(info->dtype), nbytes = (size_t)info->nbytes;
    bool transpose = info->fortran && info->ndim > 1 && nbytes > 0;
    unsigned char *tmp = NULL;
    if (fp && nbytes > 0) {
        /* Fortran data is read aside, then transposed into place. */
        unsigned char *dst = a->data;
        if (transpose && !(dst = tmp = malloc(nbytes))) {
            tgl_array_release(a);
            return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory (%zu bytes)", fn,
                                     nbytes);
        }
        if (fread(dst, 1, nbytes, fp) != nbytes) {
            int e = ferror(fp) ? errno : 0;
            free(tmp);
            tgl_array_release(a);
            return tgl_io_fail(ctx, e ? TGL_EIO : TGL_EFORMAT, fn, where, "read failed: %s",
                               e ? strerror(e) : "the file got shorter while reading it");
        }
        mem = tmp;
    }
    if (transpose)
        fortran_to_c(a->data, mem, info, es);
    else if (mem && nbytes > 0)
        memcpy(a->data, mem, nbytes);
    free(tmp);
    if (info->swap)
        byteswap(a->data, info->count, es);
    if (info->dtype == TGL_BOOL) {
        unsigned char *b = a->data;   /* tgl's bools are exactly 0 or 1 */
        for (int64_t i = 0; i < info->count; i++)
            b[i] = b[i] != 0;
    }
    *out = a;
    return TGL_OK;
}

tgl_status tgl_npy_decode(tgl_ctx *ctx, const char *fn, const char *where,
                          const unsigned char *buf, size_t len, tgl_array **out)
{
    size_t hoff = 0;
    uint64_t hlen = 0;
    npy_info info;
    tgl_status st = parse_preamble(ctx, fn, where, buf, len, &hoff, &hlen);
    if (st)
        return st;
    if (hlen > len - hoff)
        return tgl_io_fail(ctx, TGL_EFORMAT, fn, where,
                           "truncated: header claims %" PRIu64 " bytes but only %zu follow",
                           hlen, len - hoff);
    if ((st = parse_header(ctx, fn, where, buf + hoff, (size_t)hlen, &info)) ||
        (st = check_data_size(ctx, fn, where, &info, len - hoff - hlen)))
        return st;
    return materialize(ctx, fn, where, &info, buf + hoff + hlen, NULL, out);
}

tgl_status tgl_npy_load(tgl_ctx *ctx, const char *path, tgl_array **out)
{
    const char *fn = "tgl_npy_load";
    char where[TGL_IO_WHERE_SIZE];
    TGL_CHECK_CTX(ctx);
    FILE *fp;
    uint64_t size;
    tgl_status st = tgl_io_reader_args(ctx, fn, path, out, "path and out", where);
    if (!st)
        st = tgl_io_fopen_read(ctx, fn, where, path, &fp, &size);
    if (st)
        return st;
    unsigned char pre[12], *hdr = NULL;
    size_t hoff = 0;
    uint64_t hlen = 0;
    npy_info info;
    size_t npre = fread(pre, 1, size < sizeof pre ? (size_t)size : sizeof pre, fp);
    if ((st = parse_preamble(ctx, fn, where, pre, npre, &hoff, &hlen)))
        goto done;
    if (hlen > size - hoff) {
        st = tgl_io_fail(ctx, TGL_EFORMAT, fn, where,
                         "truncated: header claims %" PRIu64 " bytes but the file has only %"
                         PRIu64 " after the preamble", hlen, size - hoff);
        goto done;
    }
    /* hlen is bounded by the file's size, checked above. */
    if (!(hdr = malloc(hlen ? (size_t)hlen : 1))) {
        st = tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn);
        goto done;
    }
    if (fseeko(fp, (off_t)hoff, SEEK_SET) != 0 || fread(hdr, 1, (size_t)hlen, fp) != hlen) {
        st = tgl_io_fail(ctx, TGL_EIO, fn, where, "read failed: %s", strerror(errno));
        goto done;
    }
    if ((st = parse_header(ctx, fn, where, hdr, (size_t)hlen, &info)) ||
        (st = check_data_size(ctx, fn, where, &info, size - hoff - hlen)))
        goto done;
    st = materialize(ctx, fn, where, &info, NULL, fp, out);
done:
    free(hdr);
    fclose(fp);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                  */
/* ------------------------------------------------------------------------ */

tgl_status tgl_npy_check_array(tgl_ctx *ctx, const char *fn, const char *what,
                               const tgl_array *a)
{
    int64_t size;
    TGL_CHECK(a, TGL_EINVAL, "%s: %s is NULL", fn, what);
    tgl_status st = tgl_check_shape(ctx, fn, a->dtype_id, a->ndim, a->shape, &size);
    if (st)
        return st;
    TGL_CHECK(size == a->size, TGL_EINVAL,
              "%s: %s has size %" PRId64 " but its shape holds %" PRId64 " elements", fn,
              what, a->size, size);
    TGL_CHECK(size == 0 || a->data, TGL_EINVAL, "%s: %s has no data", fn, what);
    /* Files are written from host memory. */
    return tgl_array_require_host(ctx, fn, a);
}

tgl_status tgl_npy_contiguous(tgl_ctx *ctx, const char *fn, const tgl_array *a,
                              tgl_array **copy, const tgl_array **c)
{
    *copy = NULL;
    *c = a;
    if (tgl_array_is_contiguous(a))
        return TGL_OK;
    tgl_status st = tgl_array_copy(ctx, a, a->dtype_id, copy);
    if (st) {
        /* Report under the caller's name; the copy's message says why. */
        char why[TGL_ERRMSG_SIZE];
        snprintf(why, sizeof why, "%s", tgl_ctx_error(ctx));
        return tgl_ctx_set_error(ctx, st, "%s: cannot make a contiguous copy to write (%s)",
                                 fn, why);
    }
    *c = *copy;
    return TGL_OK;
}

/* The header NumPy 1.24 writes for the same array, byte for byte (including
 * the spare spaces it leaves for growing the first axis in place).  Version
 * 2.0 would only be needed past 64 KiB of header, which six dtypes and
 * eight dimensions cannot reach (the header is under 400 bytes). */
size_t tgl_npy_encode_header(const tgl_array *a, unsigned char *buf)
{
    char dict[TGL_NPY_HEADER_MAX];
    size_t es = tgl_dtype_size(a->dtype_id);
    int n = snprintf(dict, sizeof dict, "{'descr': '%c%c%zu', 'fortran_order': False, 'shape': (",
                     es == 1 ? '|' : HOST_ORDER, dtype_kind[a->dtype_id], es);
    for (int i = 0; i < a->ndim; i++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, i ? ", %" PRId64 : "%" PRId64,
                      a->shape[i]);
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", a->ndim == 1 ? "," : "");
    if (a->ndim > 0) {
        int digits = snprintf(NULL, 0, "%" PRId64, a->shape[0]);
        for (int i = digits; i < 21; i++)   /* NumPy's GROWTH_AXIS_MAX_DIGITS */
            dict[n++] = ' ';
    }
    size_t hlen = (size_t)n + 1, pad = 64 - (10 + hlen) % 64;
    memcpy(buf, npy_magic, 6);
    buf[6] = 1;
    buf[7] = 0;
    buf[8] = (unsigned char)((hlen + pad) & 0xff);
    buf[9] = (unsigned char)((hlen + pad) >> 8);
    memcpy(buf + 10, dict, (size_t)n);
    memset(buf + 10 + n, ' ', pad);
    buf[10 + n + pad] = '\n';
    return 10 + hlen + pad;
}

tgl_status tgl_npy_save(tgl_ctx *ctx, const char *path, const tgl_array *a)
{
    const char *fn = "tgl_npy_save";
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(path, TGL_EINVAL, "%s: path is NULL", fn);
    tgl_status st = tgl_npy_check_array(ctx, fn, "the array", a);
    if (st)
        return st;
    tgl_array *copy;
    const tgl_array *c;
    if ((st = tgl_npy_contiguous(ctx, fn, a, &copy, &c)))
        return st;
    unsigned char hdr[TGL_NPY_HEADER_MAX];
    size_t hlen = tgl_npy_encode_header(c, hdr);
    tgl_atomic_file af;
    if (!(st = tgl_atomic_open(ctx, fn, path, &af))) {
        if ((st = tgl_atomic_write(ctx, fn, &af, hdr, hlen)) ||
            (st = tgl_atomic_write(ctx, fn, &af, c->data,
                                   (size_t)c->size * tgl_dtype_size(c->dtype_id))))
            tgl_atomic_abort(&af);
        else
            st = tgl_atomic_commit(ctx, fn, &af);
    }
    tgl_array_release(copy);
    return st;
}
