/*
 * blas.cuh — the argument structs of the blas family's kernels (blas.cu),
 * shared by the device source and the host side (src/cuda/blas.c).  Plain
 * C: the same layout on both sides.
 *
 * The products themselves are cuBLAS's (the driver's gemm, gemv, ger,
 * dot); these kernels are what cuBLAS has no routine for: copies of
 * strided operands with dtype conversion, the beta scaling of an output
 * when there is nothing to multiply, integer products (cuBLAS has no
 * integer gemm), and dot products accumulated in double (float32 dot and
 * the row-wise batched_dot), as the CPU kernels accumulate them.
 */
#ifndef TGL_CUDA_BLAS_CUH
#define TGL_CUDA_BLAS_CUH

/* dtype ids: tgl_dtype's (include/tgl.h), checked on the host side. */
#define TGL_BLAS_F32 0
#define TGL_BLAS_F64 1
#define TGL_BLAS_I32 2
#define TGL_BLAS_I64 3
#define TGL_BLAS_U8 4
#define TGL_BLAS_BOOL 5

#define TGL_BLAS_MAX_DIMS 8

/* blas_copy: dst[i] = (ddt) src[i] over an n-element array of ndim axes
 * (C order); strides in elements, any sign (0: a broadcast source). */
typedef struct tgl_blas_copy_args {
    const void *src;
    void *dst;
    int64_t n;
    int32_t ndim, sdt, ddt, pad_;
    int64_t shape[TGL_BLAS_MAX_DIMS];
    int64_t sstride[TGL_BLAS_MAX_DIMS];
    int64_t dstride[TGL_BLAS_MAX_DIMS];
} tgl_blas_copy_args;

/* blas_scale: p[i] = beta * p[i] (computed in double) over n contiguous
 * float32 or float64 elements. */
typedef struct tgl_blas_scale_args {
    void *p;
    int64_t n;
    double beta;
    int32_t dt, pad_;
} tgl_blas_scale_args;

/* blas_prod_thread, blas_prod_block: for every (b, i, j) of a
 * batch x m x n output,
 *     C[b,i,j] = sum over p < k of A[b,i,p] B[b,p,j]
 * all three of dtype dt, strides in elements (any sign).  Integers wrap
 * (computed in uint64), floats accumulate in double and are rounded once.
 * _thread: one thread per output element (small k); _block: one block per
 * output element, the k products shared over the block's threads and
 * summed with tgl_block_sum (large k: dot products, row-wise dots).
 * For few outputs of very many products each (a long dot product), the
 * sums are split over nsplit blocks per output: blas_prod_partial writes
 * each block's sum (the accumulator: double or uint64, 8 bytes) to
 * partial[o * nsplit + part], and blas_prod_finish (one block per output)
 * adds an output's nsplit partial sums and stores the result; both
 * orders are fixed, so the result is the same on every run. */
typedef struct tgl_blas_prod_args {
    const void *a;
    const void *b;
    void *c;
    void *partial;            /* nsplit accumulators per output (split) */
    int64_t batch, m, n, k;
    int64_t as_b, as_r, as_c; /* A: batch, row, column strides */
    int64_t bs_b, bs_r, bs_c; /* B */
    int64_t cs_b, cs_r, cs_c; /* C */
    int64_t nsplit;           /* blocks per output (split)              */
    int32_t dt, pad_;
} tgl_blas_prod_args;

#endif /* TGL_CUDA_BLAS_CUH */
