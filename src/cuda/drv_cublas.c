/*
 * drv_cublas.c — the real driver's products (cuda_int.h: tgl_cuda_cublas_*):
 * cuBLAS on the driver's one stream (tgl_cuda_real_stream), with the
 * meaning engine/backend.h gives the BLAS entries: row-major operands,
 * device pointers, float32 or float64.
 *
 * Row-major onto cuBLAS's column-major.  A row-major r x c matrix with
 * leading dimension ld is, read column-major with the same ld, its
 * transpose (c x r).  So
 *   gemm  C = a op(A) op(B) + b C        is  C' = a op(B)' op(A)' + b C':
 *         cuBLAS gemm with the operands swapped, m and n swapped, and the
 *         same transpose flags (op(B)' of the stored B' is N when B is
 *         not transposed);
 *   gemv  y = a op(A) x + b y, A stored rows x cols, is y = a op'(A') x
 *         with A' the stored cols x rows column-major matrix: the flag
 *         flips and the extents swap;
 *   ger   A += a x y' is A' += a y x': x and y swap, m and n swap;
 *   dot   needs no mapping.
 * Empty extents: an empty output (m or n 0; gemv's y empty) never reaches
 * cuBLAS.  gemm with k 0 goes to cuBLAS, which computes C = beta C as the
 * reference BLAS does; gemv with an empty inner extent leaves y as it is
 * (the reference BLAS's quick return, which cuBLAS follows); dot of 0
 * elements writes 0 here.  The op kernels (src/cuda/blas.c) handle empty
 * inner extents themselves, as the CPU kernels do, and pass none.
 *
 * Precision.  float32 products run in CUBLAS_DEFAULT_MATH, which computes
 * in float32 (no TF32: the results match the CPU's to float32 rounding),
 * unless the caller allows TF32 (config.allow_tf32), then
 * CUBLAS_TF32_TENSOR_OP_MATH.  float64 is always float64.  dot: cublasSdot
 * accumulates float32 in float32; engine/backend.h's dot accumulates
 * float32 in double, so src/cuda/blas.c runs its own kernel for float32
 * dots and uses this entry for float64 only (this entry stays the plain
 * cuBLAS dot for the driver table's callers).
 *
 * One cuBLAS handle for the process, bound to the stream, made by
 * tgl_cuda_cublas_init when the real driver starts (else on first use;
 * every caller has passed tgl_cuda_ready).  It gets a workspace of its own
 * (WORKSPACE bytes, cudaMalloc'd once, outside tgl's allocator), so cuBLAS
 * allocates nothing while a step is being captured as a CUDA Graph
 * (step.c): an allocation inside a capture would end it.  Its settings
 * (pointer mode, math mode) are per handle, so each call sets what it
 * needs under a mutex: two host threads may issue products at once.
 */
#include "cuda/cuda_int.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <pthread.h>

/* cuBLAS's recommended workspace on Hopper (the size its own default
 * pool uses there). */
#define WORKSPACE ((size_t)32 << 20)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static cublasHandle_t handle;        /* NULL until made                  */
static cudaStream_t handle_stream;   /* the stream the handle is bound to */
static bool handle_bound;            /* handle_stream is set              */
static void *workspace;              /* WORKSPACE bytes, or NULL           */

static tgl_status status_of(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_ALLOC_FAILED: return TGL_ENOMEM;
    case CUBLAS_STATUS_INVALID_VALUE: return TGL_EINVAL;
    default: return TGL_EINTERNAL;
    }
}

/* err = "cuda: <what>: <cuBLAS's text> (cuBLAS status <n>)"; returns the status. */
static tgl_status fail(tgl_errbuf *err, cublasStatus_t s, const char *what)
{
    const char *text = cublasGetStatusString(s);
    /* a launch cuBLAS made that failed leaves the runtime's last error set:
     * reported here, so the next sync does not report it again as new */
    (void)cudaGetLastError();
    return tgl_errbuf_set(err, status_of(s), "cuda: %s: %s (cuBLAS status %d)", what,
                          text ? text : "unknown cuBLAS error", (int)s);
}

/* With the lock held: the handle made and bound to the driver's stream,
 * with the workspace. */
static tgl_status make_handle(tgl_errbuf *err)
{
    cublasStatus_t s;
    if (!handle && (s = cublasCreate(&handle)) != CUBLAS_STATUS_SUCCESS) {
        handle = NULL;
        return fail(err, s, "cublasCreate");
    }
    cudaStream_t stream = (cudaStream_t)tgl_cuda_real_stream();
    if (handle_bound && stream == handle_stream)
        return TGL_OK;
    if ((s = cublasSetStream(handle, stream)) != CUBLAS_STATUS_SUCCESS)
        return fail(err, s, "cublasSetStream");
    /* cublasSetStream puts the default workspace pool back: ours after it */
    if (!workspace && cudaMalloc(&workspace, WORKSPACE) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: cuBLAS's own pool then */
        workspace = NULL;
    }
    if (workspace && (s = cublasSetWorkspace(handle, workspace, WORKSPACE)) != CUBLAS_STATUS_SUCCESS)
        return fail(err, s, "cublasSetWorkspace");
    handle_stream = stream;
    handle_bound = true;
    return TGL_OK;
}

tgl_status tgl_cuda_cublas_init(tgl_errbuf *err)
{
    pthread_mutex_lock(&lock);
    tgl_status st = make_handle(err);
    pthread_mutex_unlock(&lock);
    return st;
}

/* Locks and returns the handle, made and bound to the stream, in the
 * modes asked for; unlocked again on failure (err set). */
static tgl_status acquire(cublasPointerMode_t pmode, cublasMath_t math, tgl_errbuf *err)
{
    pthread_mutex_lock(&lock);
    tgl_status st = make_handle(err);
    if (st) {
        pthread_mutex_unlock(&lock);
        return st;
    }
    cublasStatus_t s;
    if ((s = cublasSetPointerMode(handle, pmode)) != CUBLAS_STATUS_SUCCESS ||
        (s = cublasSetMathMode(handle, math)) != CUBLAS_STATUS_SUCCESS) {
        pthread_mutex_unlock(&lock);
        return fail(err, s, "setting the cuBLAS handle's modes");
    }
    return TGL_OK;
}

/* Unlocks; reports s (the product's status) naming what. */
static tgl_status release(cublasStatus_t s, const char *what, tgl_errbuf *err)
{
    pthread_mutex_unlock(&lock);
    return s == CUBLAS_STATUS_SUCCESS ? TGL_OK : fail(err, s, what);
}

static tgl_status bad_dtype(tgl_errbuf *err, const char *what, int dtype)
{
    return tgl_errbuf_set(err, TGL_EDTYPE, "cuda: %s: cuBLAS takes float32 or float64, not %s",
                          what, tgl_dtype_name(dtype));
}

static cublasOperation_t op(bool trans)
{
    return trans ? CUBLAS_OP_T : CUBLAS_OP_N;
}

static cublasMath_t math_of(int dtype, bool tf32)
{
    return dtype == TGL_FLOAT32 && tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
}

tgl_status tgl_cuda_cublas_gemm(int dtype, bool trans_a, bool trans_b, int m, int n, int k,
                                double alpha, const void *a, int lda, const void *b, int ldb,
                                double beta, void *c, int ldc, bool tf32, tgl_errbuf *err)
{
    if (dtype != TGL_FLOAT32 && dtype != TGL_FLOAT64)
        return bad_dtype(err, "gemm", dtype);
    if (m <= 0 || n <= 0)
        return TGL_OK;
    tgl_status st = acquire(CUBLAS_POINTER_MODE_HOST, math_of(dtype, tf32), err);
    if (st)
        return st;
    cublasStatus_t s;
    /* C' (n x m) = op(B)' (n x k) op(A)' (k x m) + beta C' */
    if (dtype == TGL_FLOAT32) {
        float fa = (float)alpha, fb = (float)beta;
        s = cublasSgemm(handle, op(trans_b), op(trans_a), n, m, k, &fa, (const float *)b, ldb,
                        (const float *)a, lda, &fb, (float *)c, ldc);
    } else {
        s = cublasDgemm(handle, op(trans_b), op(trans_a), n, m, k, &alpha, (const double *)b, ldb,
                        (const double *)a, lda, &beta, (double *)c, ldc);
    }
    return release(s, dtype == TGL_FLOAT32 ? "cublasSgemm" : "cublasDgemm", err);
}

tgl_status tgl_cuda_cublas_gemm_batched(int dtype, bool trans_a, bool trans_b, int m, int n,
                                        int k, double alpha, const void *a, int lda,
                                        int64_t stride_a, const void *b, int ldb,
                                        int64_t stride_b, double beta, void *c, int ldc,
                                        int64_t stride_c, int count, bool tf32, tgl_errbuf *err)
{
    if (dtype != TGL_FLOAT32 && dtype != TGL_FLOAT64)
        return bad_dtype(err, "gemm_batched", dtype);
    if (m <= 0 || n <= 0 || count <= 0)
        return TGL_OK;
    tgl_status st = acquire(CUBLAS_POINTER_MODE_HOST, math_of(dtype, tf32), err);
    if (st)
        return st;
    cublasStatus_t s;
    if (dtype == TGL_FLOAT32) {
        float fa = (float)alpha, fb = (float)beta;
        s = cublasSgemmStridedBatched(handle, op(trans_b), op(trans_a), n, m, k, &fa,
                                      (const float *)b, ldb, (long long)stride_b,
                                      (const float *)a, lda, (long long)stride_a, &fb,
                                      (float *)c, ldc, (long long)stride_c, count);
    } else {
        s = cublasDgemmStridedBatched(handle, op(trans_b), op(trans_a), n, m, k, &alpha,
                                      (const double *)b, ldb, (long long)stride_b,
                                      (const double *)a, lda, (long long)stride_a, &beta,
                                      (double *)c, ldc, (long long)stride_c, count);
    }
    return release(s, dtype == TGL_FLOAT32 ? "cublasSgemmStridedBatched"
                                           : "cublasDgemmStridedBatched", err);
}

tgl_status tgl_cuda_cublas_gemv(int dtype, bool trans, int rows, int cols, double alpha,
                                const void *a, int lda, const void *x, int incx, double beta,
                                void *y, int incy, tgl_errbuf *err)
{
    if (dtype != TGL_FLOAT32 && dtype != TGL_FLOAT64)
        return bad_dtype(err, "gemv", dtype);
    /* y has (trans ? cols : rows) elements: none, nothing to do */
    if ((trans ? cols : rows) <= 0)
        return TGL_OK;
    tgl_status st = acquire(CUBLAS_POINTER_MODE_HOST, CUBLAS_DEFAULT_MATH, err);
    if (st)
        return st;
    cublasStatus_t s;
    /* The stored A is, column-major, A' (cols x rows): op flips. */
    cublasOperation_t o = trans ? CUBLAS_OP_N : CUBLAS_OP_T;
    if (dtype == TGL_FLOAT32) {
        float fa = (float)alpha, fb = (float)beta;
        s = cublasSgemv(handle, o, cols, rows, &fa, (const float *)a, lda, (const float *)x, incx,
                        &fb, (float *)y, incy);
    } else {
        s = cublasDgemv(handle, o, cols, rows, &alpha, (const double *)a, lda, (const double *)x,
                        incx, &beta, (double *)y, incy);
    }
    return release(s, dtype == TGL_FLOAT32 ? "cublasSgemv" : "cublasDgemv", err);
}

tgl_status tgl_cuda_cublas_ger(int dtype, int m, int n, double alpha, const void *x, int incx,
                               const void *y, int incy, void *a, int lda, tgl_errbuf *err)
{
    if (dtype != TGL_FLOAT32 && dtype != TGL_FLOAT64)
        return bad_dtype(err, "ger", dtype);
    if (m <= 0 || n <= 0)
        return TGL_OK;
    tgl_status st = acquire(CUBLAS_POINTER_MODE_HOST, CUBLAS_DEFAULT_MATH, err);
    if (st)
        return st;
    cublasStatus_t s;
    /* A' (n x m, column-major) += alpha y x' */
    if (dtype == TGL_FLOAT32) {
        float fa = (float)alpha;
        s = cublasSger(handle, n, m, &fa, (const float *)y, incy, (const float *)x, incx,
                       (float *)a, lda);
    } else {
        s = cublasDger(handle, n, m, &alpha, (const double *)y, incy, (const double *)x, incx,
                       (double *)a, lda);
    }
    return release(s, dtype == TGL_FLOAT32 ? "cublasSger" : "cublasDger", err);
}

tgl_status tgl_cuda_cublas_dot(int dtype, int n, const void *x, int incx, const void *y,
                               int incy, void *out, tgl_errbuf *err)
{
    if (dtype != TGL_FLOAT32 && dtype != TGL_FLOAT64)
        return bad_dtype(err, "dot", dtype);
    /* n 0: the sum of nothing, written here (not left to cuBLAS). */
    if (n <= 0) {
        cudaError_t e = cudaMemsetAsync(out, 0, dtype == TGL_FLOAT32 ? 4 : 8,
                                        (cudaStream_t)tgl_cuda_real_stream());
        if (e == cudaSuccess)
            return TGL_OK;
        (void)cudaGetLastError(); /* reported here, not again at the next sync */
        return tgl_errbuf_set(err, TGL_EINTERNAL, "cuda: dot of nothing: %s",
                              cudaGetErrorString(e));
    }
    /* The result stays on the device (pointer mode device): no wait for
     * the stream. */
    tgl_status st = acquire(CUBLAS_POINTER_MODE_DEVICE, CUBLAS_DEFAULT_MATH, err);
    if (st)
        return st;
    cublasStatus_t s;
    if (dtype == TGL_FLOAT32)
        s = cublasSdot(handle, n, (const float *)x, incx, (const float *)y, incy, (float *)out);
    else
        s = cublasDdot(handle, n, (const double *)x, incx, (const double *)y, incy,
                       (double *)out);
    return release(s, dtype == TGL_FLOAT32 ? "cublasSdot" : "cublasDdot", err);
}
