/*
 * conv.cuh — the argument structs of the conv family's CUDA kernels
 * (kernels/conv.cu), shared by the device source and the host side
 * (src/cuda/k_conv.c): plain C fields only, the same layout on both.
 * The family: conv2d and its two pullback ops through im2col / col2im and
 * cuBLAS, and the pooling ops (engine/ops/conv.c, engine/ops/pool.c).
 */
#ifndef TGL_CUDA_CONV_CUH
#define TGL_CUDA_CONV_CUH

/* The convolution's geometry (engine/ops/conv.c): x (N, C, H, W), w (O, Cg,
 * kH, kW) in G groups of Og output channels, output (N, O, Ho, Wo). */
typedef struct tgl_conv_geom {
    int64_t C, H, W, O, Cg, Og, kH, kW, Ho, Wo;
    int64_t sh, sw, ph, pw, dh, dw;
} tgl_conv_geom;

/* im2col of images [n0, n0 + nb) of x (any strides, in elements) into col:
 * entry (image n, group gi, row k = (c kH + a) kW + b, column l = i Wo + j)
 * at col[gi sG + k sK + (n - n0) sN + l], 0 outside the image.  Two layouts:
 * (nb, G, K, L) for the batched products, (G, K, nb, L) for grad_weight's
 * one product per group over the whole chunk. */
typedef struct tgl_conv_im2col_args {
    tgl_conv_geom g;
    const void *x;
    int64_t xsn, xsc, xsh, xsw;
    void *col;
    int64_t sG, sK, sN;
    int64_t n0, nb, G;
    int32_t idx32, pad_; /* every flat index below 2^31: 32-bit index arithmetic */
} tgl_conv_im2col_args;

/* col2im as a gather: gx (contiguous, images [n0, n0 + nb)) gets, at each
 * element, the sum of its col entries (layout (nb, G, K, L)) in tap order
 * (a, b) ascending — the CPU's col2im adds them in that order too. */
typedef struct tgl_conv_col2im_args {
    tgl_conv_geom g;
    const void *col;
    void *gx;
    int64_t n0, nb, G;
    int32_t idx32, pad_; /* as im2col's */
} tgl_conv_col2im_args;

/* A 4-d strided copy into contiguous memory; with swap01 the result is laid
 * out (d1, d0, d2, d3) instead (grad_weight's (O, nb, L) view of dy). */
typedef struct tgl_conv_copy4_args {
    const void *src;
    void *dst;
    int64_t d0, d1, d2, d3;
    int64_t s0, s1, s2, s3;
    int32_t swap01, idx32; /* idx32: as im2col's */
} tgl_conv_copy4_args;

/* Pooling (engine/ops/pool.c): planes (n, c) of H x W pooled to Ho x Wo.
 * Strides in elements, n's 0 for a 3-d array. */
typedef struct tgl_pool_geom {
    int64_t planes, C, H, W, Ho, Wo;
    int64_t kH, kW, dH, dW, pH, pW;
    int32_t exclude_pad, pad_;
} tgl_pool_geom;

typedef struct tgl_pool_args {
    tgl_pool_geom g;
    const void *x;     /* x (pool, argmax, grads' and gather's input 0)            */
    int64_t xsn, xsc, xsh, xsw;
    const void *h;     /* grads' g (pooled) or the gather's h (x-shaped)          */
    int64_t hsn, hsc, hsh, hsw;
    const int64_t *idx; /* max grad: each window's argmax (h W + w), pooled layout */
    void *out;         /* contiguous                                               */
    int64_t *idx_out;  /* the argmax kernel's output                               */
    int32_t is_max;
    int32_t idx32;     /* every flat index below 2^31: 32-bit index arithmetic   */
} tgl_pool_args;

#endif /* TGL_CUDA_CONV_CUH */
