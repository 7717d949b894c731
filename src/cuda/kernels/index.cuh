/*
 * index.cuh — the argument structs of the indexing family's CUDA kernels
 * (index.cu), shared by the host side (src/cuda/k_index.c) and the device
 * side (modules.c compiles prelude.cuh + this + index.cu).  Plain C fields
 * only, so both compilers lay them out alike.
 *
 * Strides and offsets are in elements and may be 0 or negative.  Dtype
 * codes are tgl's (TGL_FLOAT32 = 0 ... TGL_BOOL = 5, include/tgl.h),
 * repeated here because the device side sees no tgl header.
 */
#ifndef TGL_CUDA_INDEX_CUH
#define TGL_CUDA_INDEX_CUH

#define TGL_IDX_MAXD 8   /* TGL_MAX_DIMS (k_index.c checks they agree) */
#define TGL_IDX_F32 0
#define TGL_IDX_F64 1
#define TGL_IDX_I32 2
#define TGL_IDX_I64 3
#define TGL_IDX_U8 4
#define TGL_IDX_BOOL 5

/* tgl_index_copy: dst[i] = convert(src[i]) over an nd-dimensional shape
 * (n elements), both strided; sdt/ddt the dtypes (equal: a bitwise copy). */
typedef struct tgl_idx_copy_args {
    void *dst;
    const void *src;
    int64_t n;
    int32_t nd, sdt, ddt, pad_;
    int64_t shape[TGL_IDX_MAXD];
    int64_t ds[TGL_IDX_MAXD];
    int64_t ss[TGL_IDX_MAXD];
} tgl_idx_copy_args;

/* tgl_index_update_<dtype>_{add,set}: over the region's nd-dimensional
 * shape (n elements), out[off + idx . os] (+)= v[idx . vs].  A basic
 * region's positions are distinct: no atomics. */
typedef struct tgl_idx_update_args {
    void *out;
    const void *v;
    int64_t n, off;
    int32_t nd, pad_;
    int64_t shape[TGL_IDX_MAXD];
    int64_t os[TGL_IDX_MAXD];
    int64_t vs[TGL_IDX_MAXD];
} tgl_idx_update_args;

/* tgl_index_positions: for each position b < nb of the index arrays'
 * broadcast shape (bnd axes, C order), pos[b] = sum_j i_j * ts[j] where
 * i_j is index array j's value there made 0-based (1 is the first, -1 the
 * last), and (cell not NULL) cell[b] = sum_j i_j * cs[j], the position's
 * number among the indexed axes' cells.  An index that is 0 or out of
 * range stores min(b) into *err (the host rereads that position to word
 * the error as the CPU kernel does). */
typedef struct tgl_idx_positions_args {
    int64_t *pos, *cell;
    long long *err;
    int64_t nb;
    int32_t k, bnd;
    int64_t bshape[TGL_IDX_MAXD];
    const void *ix[TGL_IDX_MAXD];              /* index array j's data       */
    int32_t is32[TGL_IDX_MAXD];                /* 1: int32, 0: int64         */
    int64_t len[TGL_IDX_MAXD];                 /* the indexed axis' size     */
    int64_t ts[TGL_IDX_MAXD];                  /* the target's stride there  */
    int64_t cs[TGL_IDX_MAXD];                  /* cell stride                */
    int64_t is[TGL_IDX_MAXD][TGL_IDX_MAXD];    /* [j][a]: index j's stride on
                                                  broadcast axis a (0: bcast) */
} tgl_idx_positions_args;

/* The walk of advanced indexing over the result's rnd-dimensional shape
 * (n elements): axes [0, first) are x's pre axes, [first, first + bnd) the
 * broadcast index axes (flattened to b, whose target offset is pos[b]),
 * the rest x's post axes.  ts: the target's (x's or out's) strides for
 * the pre and post result axes (0 on the broadcast ones); rs: the
 * result-shaped side's strides (the gather's output, or v broadcast).
 *   tgl_index_gather<size>:   r[.] = t[.]
 *   tgl_index_scatter_<dtype>: t[.] += r[.] (atomics: positions repeat)
 *   tgl_index_scatter_set<size>: t[.] = r[.] where winner[cell[b]] == b
 *   tgl_index_winner: winner[cell[b]] = max b (atomicMax), over b < nb
 * acc (uint8 scatter only): a uint32 accumulator of the target's size,
 * indexed by the target offset (the target is contiguous then). */
typedef struct tgl_idx_walk_args {
    void *t;
    void *r;
    const int64_t *pos, *cell;
    long long *winner;
    unsigned int *acc;
    int64_t n, nb;
    int32_t rnd, first, bnd, pad_;
    int64_t rshape[TGL_IDX_MAXD];
    int64_t ts[TGL_IDX_MAXD];
    int64_t rs[TGL_IDX_MAXD];
} tgl_idx_walk_args;

/* tgl_index_acc_u8: t[i] = (uint8)(t[i] + acc[i]) for i < n (t contiguous). */
typedef struct tgl_idx_acc_args {
    unsigned char *t;
    const unsigned int *acc;
    int64_t n;
} tgl_idx_acc_args;

/* tgl_index_one_hot<size>: every element of out (its shape: the labels'
 * nd axes then the classes, n elements; os its strides) is one (the bit
 * pattern `one` of out's dtype) where the label (ldt: int32, int64 or
 * uint8, strides ls) equals the class + 1, else 0.  A label outside
 * 1..ncls stores the first such label's C-order position into *err. */
typedef struct tgl_idx_one_hot_args {
    void *out;
    const void *labels;
    long long *err;
    unsigned long long one;
    int64_t n, ncls;
    int32_t nd, ldt;
    int64_t shape[TGL_IDX_MAXD]; /* the labels' shape                 */
    int64_t ls[TGL_IDX_MAXD];    /* the labels' strides               */
    int64_t os[TGL_IDX_MAXD + 1];/* out's strides (classes last)      */
} tgl_idx_one_hot_args;

#endif /* TGL_CUDA_INDEX_CUH */
