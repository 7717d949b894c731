/*
 * array.c — n-dimensional strided arrays over reference-counted storage:
 * creation, views (reshape, transpose, general), copies with casts, element
 * access.  These are the reference paths; compiled kernels come later and
 * use the same descriptor.
 *
 * A storage lives on one device and is allocated, filled and freed by that
 * device's backend (backend.h); its views carry the same device.  Element
 * access and whole copies go through the backends too; conversions and
 * strided copies are host loops, so they take cpu arrays only.
 */
#include "engine/backend.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The descriptor's layout is ABI (tgl.h, and lua/tgl/core.lua mirrors it). */
#if UINTPTR_MAX == UINT64_MAX
_Static_assert(offsetof(tgl_array, shape) == 8 && offsetof(tgl_array, strides) == 72 &&
                   offsetof(tgl_array, size) == 136 && offsetof(tgl_array, ndim) == 144 &&
                   offsetof(tgl_array, flags) == 156 && offsetof(tgl_array, storage) == 160 &&
                   offsetof(tgl_array, device) == 168 && sizeof(tgl_array) == 176,
               "tgl_array's layout is the one tgl.h documents");
#endif

/* Bytes of live storage in the process.  The one global besides contexts:
 * storage is freed without a context (by whichever owner goes last). */
static int64_t live_bytes;

int64_t tgl_memory_live_bytes(void)
{
    return __atomic_load_n(&live_bytes, __ATOMIC_RELAXED);
}

void tgl_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i] > 0 ? shape[i] : 1;
    }
}

char *tgl_shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t k = 0;
    k += (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, "%s", ndim == 1 ? ",)" : ")");
    return buf;
}

int tgl_array_is_contiguous(const tgl_array *a)
{
    int64_t s = 1;
    if (a->size == 0)
        return 1;
    for (int i = a->ndim - 1; i >= 0; i--) {
        if (a->shape[i] != 1 && a->strides[i] != s)
            return 0;
        s *= a->shape[i];
    }
    return 1;
}

static void update_flags(tgl_array *a)
{
    a->flags = tgl_array_is_contiguous(a) ? TGL_ARRAY_CONTIGUOUS : 0;
}

tgl_status tgl_check_shape(tgl_ctx *ctx, const char *fn, int dtype, int ndim,
                           const int64_t *shape, int64_t *size)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(dtype >= 0 && dtype < TGL_NDTYPES, TGL_EDTYPE, "%s: unknown dtype %d", fn, dtype);
    TGL_CHECK(ndim >= 0 && ndim <= TGL_MAX_DIMS, TGL_ESHAPE,
              "%s: %d dimensions (at most %d are supported)", fn, ndim, TGL_MAX_DIMS);
    TGL_CHECK(ndim == 0 || shape, TGL_EINVAL, "%s: shape is NULL", fn);
    /* Element and byte counts must fit comfortably in int64 and size_t.
     * Zero sizes are left out of the product (as NumPy does): strides are
     * products of the other sizes and must not overflow either. */
    int64_t n = 1;
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        TGL_CHECK(shape[i] >= 0, TGL_ESHAPE, "%s: negative size %" PRId64 " for dimension %d",
                  fn, shape[i], i);
        if (shape[i] == 0) {
            empty = true;
            continue;
        }
        if (!tgl_size_mul(n, shape[i], &n)) {
            char sh[TGL_MAX_DIMS * 22 + 4];
            return tgl_ctx_set_error(ctx, TGL_ESHAPE,
                                     "%s: shape %s is too large (over 2^59 elements)", fn,
                                     tgl_shape_str(sh, sizeof sh, ndim, shape));
        }
    }
    *size = empty ? 0 : n;
    return TGL_OK;
}

/* Zeroes n bytes at p, a block of be's. */
static tgl_status zero_fill(tgl_ctx *ctx, const tgl_backend *be, void *p, size_t n)
{
    tgl_errbuf e;
    tgl_status st = be->memset(p, 0, n, &e);
    return st ? tgl_errbuf_take(ctx, st, &e) : TGL_OK;
}

/* ---- a cache of small host blocks ------------------------------------------
 *
 * A compiled function hands out a new array per output per call, and the
 * caller's garbage collector frees the old ones in batches of thousands:
 * for small arrays, malloc and posix_memalign were most of a call's cost
 * (about half of a 1 us call from Lua).  Freed host storage of up to
 * CACHE_MAX_BYTES (rounded up to a power of two) and freed descriptors are
 * kept on free lists, up to CACHE_CLASS_BYTES per size, and handed out
 * again.  One spin lock guards them: arrays may be freed on any thread,
 * and the critical sections are a few loads and stores. */
#define CACHE_MIN_SHIFT 6                   /* TGL_ALIGN, 64 bytes          */
#define CACHE_MAX_SHIFT 16                  /* 64 KiB                       */
#define CACHE_MAX_BYTES ((size_t)1 << CACHE_MAX_SHIFT)
#define CACHE_CLASS_BYTES ((size_t)1 << 20) /* kept per size class          */
#define CACHE_NCLASS (CACHE_MAX_SHIFT - CACHE_MIN_SHIFT + 1)

/* Under AddressSanitizer nothing is kept, so that a use after free is
 * still caught. */
#if defined(__SANITIZE_ADDRESS__)
#define CACHE_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CACHE_OFF 1
#endif
#endif
#ifndef CACHE_OFF
#define CACHE_OFF 0
#endif

static struct {
    tgl_storage *storage[CACHE_NCLASS]; /* linked through next_free        */
    size_t nstorage[CACHE_NCLASS];
    tgl_array *desc;                    /* linked through data             */
    size_t ndesc;
    int lock;
} cache;

static void cache_lock(void)
{
    while (__atomic_exchange_n(&cache.lock, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&cache.lock, __ATOMIC_RELAXED))
            ;
}

static void cache_unlock(void)
{
    __atomic_store_n(&cache.lock, 0, __ATOMIC_RELEASE);
}

/* The cache's size class of a host allocation of alloc bytes (a multiple
 * of TGL_ALIGN), or -1 when it is too large to keep. */
static int cache_class(size_t alloc)
{
    if (CACHE_OFF || alloc > CACHE_MAX_BYTES)
        return -1;
    int c = 0;
    while (((size_t)1 << (c + CACHE_MIN_SHIFT)) < alloc)
        c++;
    return c;
}

static tgl_array *desc_new(void)
{
    tgl_array *a = NULL;
    cache_lock();
    if (cache.desc) {
        a = cache.desc;
        cache.desc = a->data;
        cache.ndesc--;
    }
    cache_unlock();
    if (a) {
        memset(a, 0, sizeof *a);
        return a;
    }
    return calloc(1, sizeof *a);
}

static void desc_free(tgl_array *a)
{
    if (!CACHE_OFF) {
        cache_lock();
        if (cache.ndesc < CACHE_CLASS_BYTES / sizeof *a) {
            a->data = cache.desc;
            cache.desc = a;
            cache.ndesc++;
            a = NULL;
        }
        cache_unlock();
    }
    free(a);
}

static tgl_status new_storage(tgl_ctx *ctx, const char *fn, const tgl_backend *be, size_t nbytes,
                              bool zero, tgl_storage **out)
{
    /* Round up so vector loops may read whole 64-byte lines. */
    size_t alloc = (nbytes + TGL_ALIGN - 1) / TGL_ALIGN * TGL_ALIGN;
    if (alloc == 0)
        alloc = TGL_ALIGN;
    int c = be->device == TGL_DEVICE_CPU ? cache_class(alloc) : -1;
    if (c >= 0) {
        alloc = (size_t)1 << (c + CACHE_MIN_SHIFT);
        tgl_storage *s = NULL;
        cache_lock();
        if ((s = cache.storage[c])) {
            cache.storage[c] = s->next_free;
            cache.nstorage[c]--;
        }
        cache_unlock();
        if (s) {
            if (zero)
                memset(s->base, 0, alloc);
            s->nbytes = nbytes;
            s->refcount = 1;
            __atomic_add_fetch(&live_bytes, (int64_t)alloc, __ATOMIC_RELAXED);
            *out = s;
            return TGL_OK;
        }
    }
    tgl_storage *s = malloc(sizeof *s);
    void *base = s ? be->alloc(alloc) : NULL;
    if (!base) {
        free(s);
        /* a device that cannot be used says why, rather than "out of memory" */
        tgl_errbuf e;
        if (be->ready && be->ready(&e) != TGL_OK)
            return tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: %s", fn, e.msg);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory allocating %zu bytes%s%s", fn,
                                 nbytes, be->device == TGL_DEVICE_CPU ? "" : " on ",
                                 be->device == TGL_DEVICE_CPU ? "" : be->name);
    }
    tgl_status st = zero ? zero_fill(ctx, be, base, alloc) : TGL_OK;
    if (st) {
        be->free(base);
        free(s);
        return st;
    }
    s->base = base;
    s->nbytes = nbytes;
    s->alloc = alloc;
    s->refcount = 1;
    s->device = be->device;
    __atomic_add_fetch(&live_bytes, (int64_t)alloc, __ATOMIC_RELAXED);
    *out = s;
    return TGL_OK;
}

static void storage_release(tgl_storage *s)
{
    if (__atomic_sub_fetch(&s->refcount, 1, __ATOMIC_ACQ_REL) == 0) {
        __atomic_sub_fetch(&live_bytes, (int64_t)s->alloc, __ATOMIC_RELAXED);
        int c = s->device == TGL_DEVICE_CPU ? cache_class(s->alloc) : -1;
        if (c >= 0 && s->alloc == (size_t)1 << (c + CACHE_MIN_SHIFT)) {
            cache_lock();
            if (cache.nstorage[c] < CACHE_CLASS_BYTES / s->alloc) {
                s->next_free = cache.storage[c];
                cache.storage[c] = s;
                cache.nstorage[c]++;
                s = NULL;
            }
            cache_unlock();
            if (!s)
                return;
        }
        tgl_backend_get(s->device)->free(s->base);
        free(s);
    }
}

tgl_status tgl_array_alloc(tgl_ctx *ctx, const char *fn, int dtype, int ndim,
                           const int64_t *shape, bool zero, tgl_array **out)
{
    return tgl_array_alloc_on(ctx, fn, TGL_DEVICE_CPU, dtype, ndim, shape, zero, out);
}

tgl_status tgl_array_alloc_on(tgl_ctx *ctx, const char *fn, int device, int dtype, int ndim,
                              const int64_t *shape, bool zero, tgl_array **out)
{
    int64_t size;
    tgl_status st = tgl_check_shape(ctx, fn, dtype, ndim, shape, &size);
    if (st)
        return st;
    TGL_CHECK(out, TGL_EINVAL, "%s: out is NULL", fn);
    const tgl_backend *be = tgl_backend_get(device);
    if (!be) {
        TGL_CHECK(tgl_device_name(device), TGL_EINVAL, "%s: invalid device %d", fn, device);
        return tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: this build of tgl has no backend for "
                                 "device %s", fn, tgl_device_name(device));
    }
    if (tgl_ctx_interrupted(ctx))
        return tgl_ctx_set_error(ctx, TGL_EINTERRUPT, "%s: interrupted", fn);
    tgl_array *a = desc_new();
    if (!a)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn);
    st = new_storage(ctx, fn, be, (size_t)size * tgl_dtype_size(dtype), zero, &a->storage);
    if (st) {
        desc_free(a);
        if (st == TGL_ENOMEM) {
            /* name what was asked for: a shape computed from the user's
             * data is often the surprise */
            char sh[TGL_MAX_DIMS * 22 + 4];
            size_t k = strlen(ctx->errmsg);
            snprintf(ctx->errmsg + k, sizeof ctx->errmsg - k, " (a %s array of shape %s)",
                     tgl_dtype_name(dtype), tgl_shape_str(sh, sizeof sh, ndim, shape));
        }
        return st;
    }
    a->data = a->storage->base;
    a->device = device;
    a->ndim = ndim;
    a->dtype_id = dtype;
    a->size = size;
    a->refcount = 1;
    for (int i = 0; i < ndim; i++)
        a->shape[i] = shape[i];
    tgl_contiguous_strides(ndim, a->shape, a->strides);
    a->flags = TGL_ARRAY_CONTIGUOUS;
    *out = a;
    return TGL_OK;
}

tgl_status tgl_array_empty(tgl_ctx *ctx, int dtype, int ndim, const int64_t *shape,
                           tgl_array **out)
{
    return tgl_array_alloc(ctx, "tgl_array_empty", dtype, ndim, shape, false, out);
}

tgl_status tgl_array_zeros(tgl_ctx *ctx, int dtype, int ndim, const int64_t *shape,
                           tgl_array **out)
{
    return tgl_array_alloc(ctx, "tgl_array_zeros", dtype, ndim, shape, true, out);
}

tgl_status tgl_array_full(tgl_ctx *ctx, int dtype, int ndim, const int64_t *shape, double value,
                          tgl_array **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(out, TGL_EINVAL, "tgl_array_full: out is NULL");
    tgl_array *a = NULL;
    tgl_status st = tgl_array_alloc(ctx, "tgl_array_full", dtype, ndim, shape, false, &a);
    if (st)
        return st;
    /* Convert once, then replicate the element's bytes. */
    size_t es = tgl_dtype_size(dtype);
    unsigned char elem[8];
    tgl_store_from_double(dtype, elem, 0, value);
    unsigned char *p = a->data;
    for (int64_t i = 0; i < a->size; i++)
        memcpy(p + (size_t)i * es, elem, es);
    *out = a;
    return TGL_OK;
}

tgl_status tgl_array_arange(tgl_ctx *ctx, int dtype, double start, double stop, double step,
                            tgl_array **out)
{
    TGL_CHECK_CTX(ctx);
    const char *fn = "tgl_array_arange";
    TGL_CHECK(isfinite(start) && isfinite(stop) && isfinite(step), TGL_EINVAL,
              "%s: start, stop and step must be finite", fn);
    TGL_CHECK(step != 0, TGL_EINVAL, "%s: step must not be zero", fn);
    TGL_CHECK(out, TGL_EINVAL, "%s: out is NULL", fn);
    /* Lua's numeric for: count = floor((stop - start) / step) + 1, or 0.
     * The size check comes first: converting a huge span to int64 is
     * undefined behaviour. */
    double span = (stop - start) / step;
    TGL_CHECK(span < 1e15, TGL_ESHAPE, "%s: too many elements", fn);
    int64_t n = span < 0 ? 0 : (int64_t)floor(span) + 1;
    tgl_array *a = NULL;
    tgl_status st = tgl_array_alloc(ctx, fn, dtype, 1, &n, false, &a);
    if (st)
        return st;
    for (int64_t i = 0; i < n; i++)
        tgl_store_from_double(dtype, a->data, i, start + (double)i * step);
    *out = a;
    return TGL_OK;
}

void tgl_array_retain(tgl_array *a)
{
    if (a)
        __atomic_add_fetch(&a->refcount, 1, __ATOMIC_RELAXED);
}

void tgl_array_release(tgl_array *a)
{
    if (!a)
        return;
    if (__atomic_sub_fetch(&a->refcount, 1, __ATOMIC_ACQ_REL) == 0) {
        storage_release(a->storage);
        desc_free(a);
    }
}

/* A new descriptor on a's storage; shape/strides filled by the caller. */
static tgl_status new_view(tgl_ctx *ctx, const char *fn, tgl_array *a, tgl_array **out)
{
    tgl_array *v = desc_new();
    if (!v)
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", fn);
    /* Every field but the count: another thread may be changing a's
     * count (atomically) while this view is made. */
    const size_t rc = offsetof(tgl_array, refcount), after = rc + sizeof a->refcount;
    memcpy(v, a, rc);
    memcpy((char *)v + after, (const char *)a + after, sizeof *v - after);
    v->refcount = 1;
    __atomic_add_fetch(&a->storage->refcount, 1, __ATOMIC_RELAXED);
    *out = v;
    return TGL_OK;
}

tgl_status tgl_array_view(tgl_ctx *ctx, tgl_array *a, int ndim, const int64_t *shape,
                          const int64_t *strides, int64_t offset, tgl_array **out)
{
    const char *fn = "tgl_array_view";
    int64_t size;
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(a && out, TGL_EINVAL, "%s: NULL argument", fn);
    tgl_status st = tgl_check_shape(ctx, fn, a->dtype_id, ndim, shape, &size);
    if (st)
        return st;
    TGL_CHECK(ndim == 0 || strides, TGL_EINVAL, "%s: strides is NULL", fn);
    /* Every element the view can reach must lie inside the storage.  The
     * arithmetic is checked: huge strides or offsets must not wrap around
     * into range. */
    size_t es = tgl_dtype_size(a->dtype_id);
    int64_t nelem = (int64_t)(a->storage->nbytes / es);
    int64_t base;
    bool overflow = __builtin_add_overflow(
        ((char *)a->data - (char *)a->storage->base) / (int64_t)es, offset, &base);
    int64_t lo = base, hi = base;
    if (size > 0) {
        for (int i = 0; i < ndim && !overflow; i++) {
            int64_t reach;
            overflow = __builtin_mul_overflow(shape[i] - 1, strides[i], &reach) ||
                       (reach < 0 ? __builtin_add_overflow(lo, reach, &lo)
                                  : __builtin_add_overflow(hi, reach, &hi));
        }
    }
    TGL_CHECK(!overflow, TGL_ESHAPE,
              "%s: the view's offset and strides reach outside the storage of %" PRId64
              " elements (the index arithmetic overflows)", fn, nelem);
    if (size > 0) {
        TGL_CHECK(lo >= 0 && hi < nelem, TGL_ESHAPE,
                  "%s: the view reaches elements %" PRId64 "..%" PRId64
                  " outside the storage of %" PRId64 " elements",
                  fn, lo, hi, nelem);
    }
    tgl_array *v = NULL;
    if ((st = new_view(ctx, fn, a, &v)))
        return st;
    v->data = (char *)a->storage->base + base * (int64_t)es;
    v->ndim = ndim;
    v->size = size;
    for (int i = 0; i < ndim; i++) {
        v->shape[i] = shape[i];
        v->strides[i] = strides[i];
    }
    for (int i = ndim; i < TGL_MAX_DIMS; i++)
        v->shape[i] = v->strides[i] = 0;
    update_flags(v);
    *out = v;
    return TGL_OK;
}

tgl_status tgl_array_reshape(tgl_ctx *ctx, tgl_array *a, int ndim, const int64_t *shape,
                             tgl_array **out)
{
    const char *fn = "tgl_array_reshape";
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(a && out, TGL_EINVAL, "%s: NULL argument", fn);
    TGL_CHECK(ndim >= 0 && ndim <= TGL_MAX_DIMS, TGL_ESHAPE,
              "%s: %d dimensions (at most %d are supported)", fn, ndim, TGL_MAX_DIMS);
    TGL_CHECK(ndim == 0 || shape, TGL_EINVAL, "%s: shape is NULL", fn);
    int64_t newshape[TGL_MAX_DIMS];
    int infer = -1;
    int64_t known = 1, nonzero = 1;  /* nonzero: the product strides come from */
    for (int i = 0; i < ndim; i++) {
        newshape[i] = shape[i];
        if (shape[i] == -1) {
            TGL_CHECK(infer < 0, TGL_ESHAPE, "%s: more than one dimension is -1", fn);
            infer = i;
        } else {
            TGL_CHECK(shape[i] >= 0, TGL_ESHAPE, "%s: negative size %" PRId64, fn, shape[i]);
            if (shape[i] != 0) {
                if (!tgl_size_mul(nonzero, shape[i], &nonzero)) {
                    char sh[TGL_MAX_DIMS * 22 + 4];
                    return tgl_ctx_set_error(ctx, TGL_ESHAPE,
                                             "%s: shape %s is too large (over 2^59 elements)", fn,
                                             tgl_shape_str(sh, sizeof sh, ndim, shape));
                }
            }
            known *= shape[i];
        }
    }
    if (infer >= 0) {
        TGL_CHECK(known != 0 && a->size % known == 0, TGL_ESHAPE,
                  "%s: cannot infer the -1 dimension: %" PRId64
                  " elements do not divide into blocks of %" PRId64,
                  fn, a->size, known);
        newshape[infer] = a->size / known;
        known *= newshape[infer];
    }
    TGL_CHECK(known == a->size, TGL_ESHAPE,
              "%s: cannot reshape %" PRId64 " elements into a shape of %" PRId64 " elements", fn,
              a->size, known);
    tgl_array *src = a, *copy = NULL;
    tgl_status st;
    if (!tgl_array_is_contiguous(a)) {
        if ((st = tgl_array_copy(ctx, a, a->dtype_id, &copy)))
            return st;
        src = copy;
    }
    int64_t strides[TGL_MAX_DIMS];
    tgl_contiguous_strides(ndim, newshape, strides);
    st = tgl_array_view(ctx, src, ndim, newshape, strides, 0, out);
    tgl_array_release(copy);
    return st;
}

tgl_status tgl_array_transpose(tgl_ctx *ctx, tgl_array *a, const int *perm, tgl_array **out)
{
    const char *fn = "tgl_array_transpose";
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(a && out, TGL_EINVAL, "%s: NULL argument", fn);
    int p[TGL_MAX_DIMS];
    bool seen[TGL_MAX_DIMS] = {false};
    for (int i = 0; i < a->ndim; i++) {
        p[i] = perm ? perm[i] : a->ndim - 1 - i;
        TGL_CHECK(p[i] >= 0 && p[i] < a->ndim && !seen[p[i]], TGL_EINVAL,
                  "%s: the permutation is not a permutation of %d axes", fn, a->ndim);
        seen[p[i]] = true;
    }
    tgl_array *v = NULL;
    tgl_status st = new_view(ctx, fn, a, &v);
    if (st)
        return st;
    for (int i = 0; i < a->ndim; i++) {
        v->shape[i] = a->shape[p[i]];
        v->strides[i] = a->strides[p[i]];
    }
    update_flags(v);
    *out = v;
    return TGL_OK;
}

/* Calls visit(dst_off, src_off) for every element of shape in C order, with
 * element offsets into two strided arrays.  The innermost loop is flat. */
#define FOR_EACH_PAIR(ndim, shape, dstr, sstr, BODY)                                  \
    do {                                                                              \
        int64_t idx_[TGL_MAX_DIMS] = {0};                                             \
        int64_t doff = 0, soff = 0;                                                   \
        int nd_ = (ndim);                                                             \
        int64_t inner_ = nd_ > 0 ? (shape)[nd_ - 1] : 1;                              \
        int64_t dsi_ = nd_ > 0 ? (dstr)[nd_ - 1] : 0, ssi_ = nd_ > 0 ? (sstr)[nd_ - 1] : 0; \
        for (;;) {                                                                    \
            for (int64_t k_ = 0; k_ < inner_; k_++) {                                 \
                int64_t d = doff + k_ * dsi_, s = soff + k_ * ssi_;                   \
                BODY;                                                                 \
            }                                                                         \
            int ax_ = nd_ - 2;                                                        \
            for (; ax_ >= 0; ax_--) {                                                 \
                idx_[ax_]++;                                                          \
                doff += (dstr)[ax_];                                                  \
                soff += (sstr)[ax_];                                                  \
                if (idx_[ax_] < (shape)[ax_])                                         \
                    break;                                                            \
                doff -= (dstr)[ax_] * idx_[ax_];                                      \
                soff -= (sstr)[ax_] * idx_[ax_];                                      \
                idx_[ax_] = 0;                                                        \
            }                                                                         \
            if (ax_ < 0)                                                              \
                break;                                                                \
        }                                                                             \
    } while (0)

static bool is_integer(int dtype)
{
    return dtype == TGL_INT32 || dtype == TGL_INT64 || dtype == TGL_UINT8 || dtype == TGL_BOOL;
}

static int64_t load_int(int dtype, const void *p, int64_t i)
{
    switch (dtype) {
    case TGL_INT32: return ((const int32_t *)p)[i];
    case TGL_INT64: return ((const int64_t *)p)[i];
    default: return ((const uint8_t *)p)[i];  /* uint8, bool */
    }
}

static void store_int_wrapping(int dtype, void *p, int64_t i, int64_t v)
{
    switch (dtype) {
    case TGL_INT32: ((int32_t *)p)[i] = (int32_t)(uint32_t)(uint64_t)v; break;
    case TGL_INT64: ((int64_t *)p)[i] = v; break;
    case TGL_UINT8: ((uint8_t *)p)[i] = (uint8_t)(uint64_t)v; break;
    default: ((uint8_t *)p)[i] = v != 0; break;
    }
}

/* Copies n bytes from src to dst through their backends: within a device,
 * or between the host and a device. */
static tgl_status transfer(tgl_ctx *ctx, const char *fn, tgl_array *dst, const tgl_array *src,
                           size_t n)
{
    const tgl_backend *db, *sb;
    tgl_status st;
    if ((st = tgl_backend_check(ctx, fn, dst, &db)) || (st = tgl_backend_check(ctx, fn, src, &sb)))
        return st;
    tgl_errbuf e;
    if (dst->device == src->device)
        st = db->copy(dst->data, src->data, n, &e);
    else if (dst->device == TGL_DEVICE_CPU)
        st = sb->copy_to_host(dst->data, src->data, n, &e);
    else if (src->device == TGL_DEVICE_CPU)
        st = db->copy_from_host(dst->data, src->data, n, &e);
    else
        return tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: cannot copy from %s to %s directly", fn,
                                 sb->name, db->name);
    return st ? tgl_errbuf_take(ctx, st, &e) : TGL_OK;
}

static tgl_status copy_elements(tgl_ctx *ctx, const char *fn, tgl_array *dst,
                                const tgl_array *src);

/* A cpu array laid out as a (same shape, strides and offset) over a host
 * copy of a's whole storage; a itself (retained) when it is a cpu array. */
static tgl_status host_mirror(tgl_ctx *ctx, const char *fn, const tgl_array *a, tgl_array **out)
{
    if (a->device == TGL_DEVICE_CPU) {
        tgl_array_retain((tgl_array *)a);
        *out = (tgl_array *)a;
        return TGL_OK;
    }
    const tgl_backend *be;
    tgl_status st = tgl_backend_check(ctx, fn, a, &be);
    if (st)
        return st;
    size_t es = tgl_dtype_size(a->dtype_id);
    int64_t n = (int64_t)(a->storage->nbytes / es);
    tgl_array *buf = NULL;
    if ((st = tgl_array_alloc(ctx, fn, a->dtype_id, 1, &n, false, &buf)))
        return st;
    tgl_errbuf e;
    if ((st = be->copy_to_host(buf->data, a->storage->base, (size_t)n * es, &e))) {
        tgl_array_release(buf);
        return tgl_errbuf_take(ctx, st, &e);
    }
    int64_t off = ((char *)a->data - (char *)a->storage->base) / (int64_t)es;
    st = tgl_array_view(ctx, buf, a->ndim, a->shape, a->strides, off, out);
    tgl_array_release(buf);
    return st;
}

/* copy_elements for a device array that is not a plain copy: through host
 * mirrors of both storages, the destination's written back whole.  Slow,
 * and only for what has no device kernel (a strided or converting copy on
 * a device: printing a transposed view, an output that aliases). */
static tgl_status copy_staged(tgl_ctx *ctx, const char *fn, tgl_array *dst, const tgl_array *src)
{
    tgl_array *hs = NULL, *hd = NULL;
    tgl_status st = host_mirror(ctx, fn, src, &hs);
    if (!st)
        st = host_mirror(ctx, fn, dst, &hd);
    if (!st)
        st = copy_elements(ctx, fn, hd, hs);
    if (!st && dst->device != TGL_DEVICE_CPU) {
        const tgl_backend *be = tgl_backend_get(dst->device);
        tgl_errbuf e;
        if ((st = be->copy_from_host(dst->storage->base, hd->storage->base, dst->storage->nbytes,
                                     &e)))
            st = tgl_errbuf_take(ctx, st, &e);
    }
    tgl_array_release(hs);
    tgl_array_release(hd);
    return st;
}

/* Copies src into dst elementwise (same shape), converting dtypes.  Equal
 * dtypes copy bytes, so int64 and NaN payloads survive exactly.  A whole
 * copy (same dtype, both contiguous) goes through the backends, on any
 * devices; the element loops run on the host, for cpu arrays, and
 * through host mirrors for device ones (copy_staged). */
static tgl_status copy_elements(tgl_ctx *ctx, const char *fn, tgl_array *dst,
                                const tgl_array *src)
{
    if (src->size == 0)
        return TGL_OK;
    int dt = dst->dtype_id, st = src->dtype_id;
    size_t es = tgl_dtype_size(dt);
    if (dt == st && tgl_array_is_contiguous(dst) && tgl_array_is_contiguous(src))
        return transfer(ctx, fn, dst, src, (size_t)src->size * es);
    if (dst->device != TGL_DEVICE_CPU || src->device != TGL_DEVICE_CPU) {
        const tgl_backend *be;
        tgl_status rc;
        if ((rc = tgl_backend_check(ctx, fn, dst, &be)) ||
            (rc = tgl_backend_check(ctx, fn, src, &be)))
            return rc;
        return copy_staged(ctx, fn, dst, src);
    }
    char *dp = dst->data;
    const char *sp = src->data;
    if (dt == st) {
        FOR_EACH_PAIR(src->ndim, src->shape, dst->strides, src->strides,
                      memcpy(dp + d * (int64_t)es, sp + s * (int64_t)es, es));
    } else if (is_integer(dt) && is_integer(st)) {
        /* Integer to integer is exact: widening keeps the value, narrowing
         * wraps modulo 2^k (as NumPy's astype does), bool is v != 0. */
        FOR_EACH_PAIR(src->ndim, src->shape, dst->strides, src->strides,
                      store_int_wrapping(dt, dp, d, load_int(st, sp, s)));
    } else if (st == TGL_INT64 && dt == TGL_FLOAT32) {
        /* One rounding: going through double would round twice. */
        FOR_EACH_PAIR(src->ndim, src->shape, dst->strides, src->strides,
                      ((float *)dp)[d] = (float)((const int64_t *)sp)[s]);
    } else {
        FOR_EACH_PAIR(src->ndim, src->shape, dst->strides, src->strides,
                      tgl_store_from_double(dt, dp, d, tgl_load_as_double(st, sp, s)));
    }
    return TGL_OK;
}

tgl_status tgl_array_copy(tgl_ctx *ctx, const tgl_array *a, int dtype, tgl_array **out)
{
    const char *fn = "tgl_array_copy";
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(a && out, TGL_EINVAL, "%s: NULL argument", fn);
    tgl_array *c = NULL;
    tgl_status st = tgl_array_alloc_on(ctx, fn, a->device, dtype, a->ndim, a->shape, false, &c);
    if (st)
        return st;
    if ((st = copy_elements(ctx, fn, c, a))) {
        tgl_array_release(c);
        return st;
    }
    *out = c;
    return TGL_OK;
}

tgl_status tgl_array_on_device(tgl_ctx *ctx, const char *fn, tgl_array *a, int device,
                               tgl_array **out)
{
    if (a->device == device) {
        tgl_array_retain(a);
        *out = a;
        return TGL_OK;
    }
    tgl_array *c = NULL;
    tgl_status st = tgl_array_alloc_on(ctx, fn, device, a->dtype_id, a->ndim, a->shape, false, &c);
    if (st)
        return st;
    if ((st = copy_elements(ctx, fn, c, a))) {
        tgl_array_release(c);
        return st;
    }
    *out = c;
    return TGL_OK;
}

tgl_status tgl_array_to_device(tgl_ctx *ctx, tgl_array *a, int device, tgl_array **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(a && out, TGL_EINVAL, "tgl_array_to_device: NULL argument");
    return tgl_array_on_device(ctx, "tgl_array_to_device", a, device, out);
}

/* "2x3" for a's shape, "scalar" for 0-d. */
static const char *shape_text(const tgl_array *a, char *buf, size_t size)
{
    if (a->ndim == 0)
        return "scalar";
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < a->ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, i ? "x%" PRId64 : "%" PRId64, a->shape[i]);
    return buf;
}

tgl_status tgl_array_assign(tgl_ctx *ctx, tgl_array *dst, const tgl_array *src)
{
    const char *fn = "tgl_array_assign";
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(dst && src, TGL_EINVAL, "%s: NULL argument", fn);
    bool same = dst->ndim == src->ndim;
    for (int i = 0; same && i < dst->ndim; i++)
        same = dst->shape[i] == src->shape[i];
    if (!same) {
        char ds[TGL_MAX_DIMS * 21 + 1], ss[TGL_MAX_DIMS * 21 + 1];
        return tgl_ctx_set_error(ctx, TGL_ESHAPE,
                                 "%s: shapes differ (destination %s, source %s)", fn,
                                 shape_text(dst, ds, sizeof ds), shape_text(src, ss, sizeof ss));
    }
    if (dst->storage == src->storage) {
        /* Overlapping views: go through a temporary so no element is read
         * after it was overwritten. */
        tgl_array *tmp = NULL;
        tgl_status st = tgl_array_copy(ctx, src, src->dtype_id, &tmp);
        if (st)
            return st;
        st = copy_elements(ctx, fn, dst, tmp);
        tgl_array_release(tmp);
        return st;
    }
    return copy_elements(ctx, fn, dst, src);
}

/* Element offset of idx in a, or -1 (with an error) when out of range. */
static tgl_status element_offset(tgl_ctx *ctx, const char *fn, const tgl_array *a,
                                 const int64_t *idx, int64_t *off)
{
    TGL_CHECK(a->ndim == 0 || idx, TGL_EINVAL, "%s: index is NULL", fn);
    int64_t o = 0;
    for (int i = 0; i < a->ndim; i++) {
        TGL_CHECK(idx[i] >= 0 && idx[i] < a->shape[i], TGL_ESHAPE,
                  "%s: index %" PRId64 " is out of range for dimension %d of size %" PRId64, fn,
                  idx[i], i, a->shape[i]);
        o += idx[i] * a->strides[i];
    }
    *off = o;
    return TGL_OK;
}

/* One element is read and written through a's backend, so both work on
 * any device. */
tgl_status tgl_array_get(tgl_ctx *ctx, const tgl_array *a, const int64_t *idx, double *out)
{
    const char *fn = "tgl_array_get";
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(a && out, TGL_EINVAL, "%s: NULL argument", fn);
    const tgl_backend *be;
    int64_t off;
    tgl_status st;
    if ((st = tgl_backend_check(ctx, fn, a, &be)) || (st = element_offset(ctx, fn, a, idx, &off)))
        return st;
    size_t es = tgl_dtype_size(a->dtype_id);
    unsigned char elem[8];
    tgl_errbuf e;
    if ((st = be->copy_to_host(elem, (const char *)a->data + off * (int64_t)es, es, &e)))
        return tgl_errbuf_take(ctx, st, &e);
    *out = tgl_load_as_double(a->dtype_id, elem, 0);
    return TGL_OK;
}

tgl_status tgl_array_set(tgl_ctx *ctx, tgl_array *a, const int64_t *idx, double value)
{
    const char *fn = "tgl_array_set";
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(a, TGL_EINVAL, "%s: NULL argument", fn);
    const tgl_backend *be;
    int64_t off;
    tgl_status st;
    if ((st = tgl_backend_check(ctx, fn, a, &be)) || (st = element_offset(ctx, fn, a, idx, &off)))
        return st;
    size_t es = tgl_dtype_size(a->dtype_id);
    unsigned char elem[8];
    tgl_store_from_double(a->dtype_id, elem, 0, value);
    tgl_errbuf e;
    if ((st = be->copy_from_host((char *)a->data + off * (int64_t)es, elem, es, &e)))
        return tgl_errbuf_take(ctx, st, &e);
    return TGL_OK;
}

int tgl_array_equal_bits(const tgl_array *a, const tgl_array *b)
{
    /* Elements are compared on the host: device arrays never compare equal. */
    if (!a || !b || a->dtype_id != b->dtype_id || a->ndim != b->ndim ||
        a->device != TGL_DEVICE_CPU || b->device != TGL_DEVICE_CPU)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    if (a->size == 0)
        return 1;
    size_t es = tgl_dtype_size(a->dtype_id);
    const char *ap = a->data, *bp = b->data;
    int equal = 1;
    FOR_EACH_PAIR(a->ndim, a->shape, a->strides, b->strides,
                  if (memcmp(ap + d * (int64_t)es, bp + s * (int64_t)es, es)) equal = 0);
    return equal;
}
