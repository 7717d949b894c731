/*
 * nnet.cuh — the argument structs of the neural-network family's CUDA
 * kernels (nnet.cu), shared by the host side (src/cuda/k_nnet.c), which
 * fills them, and the device, which reads them.  Plain C: the same layout
 * on both sides.  Strides are in elements.
 */
#ifndef TGL_CUDA_NNET_CUH
#define TGL_CUDA_NNET_CUH

/* How a kernel's threads share out rows: one thread walks a row alone
 * (rows whose elements are far apart but whose neighbours are adjacent:
 * a softmax down a column), one warp per row (short rows), or the whole
 * block per row (long rows). */
#define TGL_NNET_TEAM_THREAD 0
#define TGL_NNET_TEAM_WARP 1
#define TGL_NNET_TEAM_BLOCK 2

#define TGL_NNET_MAX_OUTER 7

/* softmax / log_softmax: rows of len elements along the axis; the rows
 * are the odometer over the other axes (outer[], row-major), x and out
 * each with their strides over them. */
typedef struct tgl_nnet_softmax_args {
    const void *x;
    void *out;
    int64_t rows, len;
    int64_t xs, os;                          /* strides along the axis */
    int64_t oshape[TGL_NNET_MAX_OUTER];      /* the other axes         */
    int64_t oxs[TGL_NNET_MAX_OUTER], oos[TGL_NNET_MAX_OUTER];
    int32_t nouter;
    int32_t logsm;
    int32_t team;
    int32_t pad_;
} tgl_nnet_softmax_args;

/* softmax_crossentropy (dx == NULL, out: the loss per row) and its
 * gradient (dy given, out: (rows, cols) at its strides).  Labels are
 * 1-based int32 or int64 (label_i64); a bad one sets *err to the lowest
 * bad row (atomicMin; the host set it to INT64_MAX first). */
typedef struct tgl_nnet_xent_args {
    const void *x;
    const void *labels;
    const void *dy;
    void *out;
    long long *err;
    int64_t rows, cols;
    int64_t xs0, xs1, ls, dys, os0, os1;
    int32_t label_i64;
    int32_t team;
} tgl_nnet_xent_args;

/* n int32/int64 values at stride s into int64 dst (contiguous). */
typedef struct tgl_nnet_gather_args {
    const void *src;
    int64_t *dst;
    int64_t n, s;
    int32_t i64;
    int32_t pad_;
} tgl_nnet_gather_args;

/* class_xent (mode 0), class_xent_delta part 0 (mode 1), part 1 (mode 2).
 * cls, tgt: T 0-based values; first: T + 1 offsets into list (K word-row
 * indices, grouped by owner); z: scratch doubles, T * C (modes 0, 1) + K
 * (modes 0, 2). */
typedef struct tgl_nnet_cx_args {
    const void *h, *wc, *ws;
    void *out;
    const int64_t *cls, *tgt, *first, *list;
    double *z;
    int64_t T, C, K, H;
    int64_t hs0, hs1, wcs0, wcs1, wss0, wss1;
    int32_t mode;
    int32_t pad_;
} tgl_nnet_cx_args;

/* Batch normalisation's geometry: x (and g, out) as (N, C, R...) with the
 * axes after C merged where they can be (at most 3). */
typedef struct tgl_nnet_bn_geom {
    int64_t n[5];
    int64_t xs[5], gs[5], os[5];
} tgl_nnet_bn_geom;

/* Per-channel sums over x (and g): with g == NULL the statistics' shifted
 * sums s1 = sum (x - K), s2 = sum (x - K)^2 with K = x[0, c, 0..] (K
 * written to k); with g, s1 = sum g, s2 = sum g (x - mean[c]) (mean at
 * stride ms).  rows: the (N, C) layout (tiles of 32 channels). */
typedef struct tgl_nnet_bn_sums_args {
    const void *x, *g, *mean;
    double *s1, *s2, *k;
    tgl_nnet_bn_geom geo;
    int64_t ms;
    int32_t rows;
    int32_t pad_;
} tgl_nnet_bn_sums_args;

/* Per-channel finishing, C channels:
 *   mode 0 (stats):  out0 = K + s1/M (mean), out1 = max(var, 0)
 *   mode 1 (norm):   p = (mean, w/sqrt(var + eps), b) in x's dtype
 *   mode 2 (grad):   p = (mean, A, B, D); out0 = sg, out1 = sgx
 * (each output may be NULL; o0s/o1s their strides). */
typedef struct tgl_nnet_bn_prep_args {
    const double *s1, *s2, *k;
    const void *mean, *var, *w, *b;
    void *out0, *out1;
    void *p;
    int64_t C;
    int64_t ms, vs, wst, bst, o0s, o1s;
    double m, eps;
    int32_t mode;
    int32_t pad_;
} tgl_nnet_bn_prep_args;

/* The elementwise pass: mode 1 y = (x - p0) p1 + p2; mode 2 dx = p1 (g -
 * p2 - (x - p0) p3); p: 4 (or 3) arrays of C in x's dtype. */
typedef struct tgl_nnet_bn_apply_args {
    const void *x, *g;
    void *out;
    const void *p;
    tgl_nnet_bn_geom geo;
    int64_t total, C;
    int32_t mode;
    int32_t pad_;
} tgl_nnet_bn_apply_args;

#endif /* TGL_CUDA_NNET_CUH */
