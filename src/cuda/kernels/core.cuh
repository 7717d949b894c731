/*
 * core.cuh — the argument structs of the core family's kernels (core.cu),
 * shared by the host side (k_copy.c, k_core.c) and the device side: plain
 * C fields only, so both compilers lay them out alike.  Strides count
 * elements and may be 0 or negative.
 */
#ifndef TGL_CUDA_CORE_CUH
#define TGL_CUDA_CORE_CUH

#define TGL_CORE_MAX_DIMS 8

/* dtype codes: tgl_dtype's values (include/tgl.h; k_core.c checks them). */
#define TGL_CORE_F32 0
#define TGL_CORE_F64 1
#define TGL_CORE_I32 2
#define TGL_CORE_I64 3
#define TGL_CORE_U8 4
#define TGL_CORE_BOOL 5

/* reduction codes (the host maps TGL_OP_SUM... to these) */
#define TGL_CORE_SUM 0
#define TGL_CORE_PROD 1
#define TGL_CORE_MAX 2
#define TGL_CORE_MIN 3

/* A strided copy: element i of the C-order walk of shape is read at
 * src + soff(i) and written at dst + (dcontig ? i : doff(i)).  sdt != ddt:
 * a converting copy (array.c's conversion rules); else es bytes moved. */
typedef struct tgl_core_copy_args {
    const void *src;
    void *dst;
    int64_t n;
    int64_t shape[TGL_CORE_MAX_DIMS];
    int64_t sstr[TGL_CORE_MAX_DIMS];
    int64_t dstr[TGL_CORE_MAX_DIMS];
    int32_t ndim;
    int32_t es;
    int32_t sdt, ddt;
    int32_t dcontig;
    int32_t pad_;
} tgl_core_copy_args;

/* A reduction: output o (C order over the kept axes) folds the elements
 * at x + koff(o) + roff(r), r < rsize, with op (a TGL_OP_* id: SUM, PROD,
 * MAX, MIN).  The reduced range is cut into nchunk chunks of chunk
 * elements; with nchunk > 1 chunk c of output o goes to part[c * nout + o]
 * (the accumulator: double for float x, long long for integer x) and the
 * finish kernel folds the chunks in order.  copy: a reduction over no
 * axes (each output is its element converted, as an assignment). */
typedef struct tgl_core_reduce_args {
    const void *x;
    void *out;
    void *part;
    int64_t nout, rsize, chunk, nchunk;
    int64_t kshape[TGL_CORE_MAX_DIMS], kstr[TGL_CORE_MAX_DIMS];
    int64_t rshape[TGL_CORE_MAX_DIMS], rstr[TGL_CORE_MAX_DIMS];
    int32_t nk, nr;
    int32_t xdt, odt;
    int32_t op, copy;
} tgl_core_reduce_args;

/* argmax/argmin along one axis (len elements at stride s): output o (C
 * order over the other axes, at x + koff(o)) gets the 1-based position. */
typedef struct tgl_core_arg_args {
    const void *x;
    int64_t *out;
    int64_t nout, len, s;
    int64_t kshape[TGL_CORE_MAX_DIMS], kstr[TGL_CORE_MAX_DIMS];
    int32_t nk, xdt;
    int32_t want_max, pad_;
} tgl_core_arg_args;

/* fill: n elements of es bytes, each the bits of `bits` (little end). */
typedef struct tgl_core_fill_args {
    void *out;
    int64_t n;
    uint64_t bits;
    int32_t es, pad_;
} tgl_core_fill_args;

/* arange: out[i] = start + i * step in double, stored as odt; start and
 * step are one element each of sdt / tdt in device memory. */
typedef struct tgl_core_arange_args {
    void *out;
    const void *start;
    const void *step;
    int64_t n;
    int32_t odt, sdt, tdt, pad_;
} tgl_core_arange_args;

#endif /* TGL_CUDA_CORE_CUH */
