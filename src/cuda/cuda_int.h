/*
 * cuda_int.h — the CUDA backend's internal contract (src/cuda only).
 *
 * Layers, bottom up:
 *
 *   driver     a table of the device operations the backend needs (init,
 *              raw memory, copies, one stream, module compile/load/launch,
 *              cuBLAS-shaped products, graph capture).  Two drivers:
 *              drv_cuda.c, the real one (CUDA runtime, cuBLAS, NVRTC; never
 *              the driver library, TOOLCHAIN.md), and drv_emu.c, an emulated
 *              GPU for tests on machines without one: host memory, kernels
 *              compiled for the host from the same CUDA source with an
 *              emulation prelude and run block by block, thread by thread
 *              (a coroutine per thread, so __syncthreads and warp shuffles
 *              work).  TGL_CUDA_EMU=1 in the environment picks the emulator
 *              (doc/cuda.md: for tests only).
 *   runtime    runtime.c: the chosen driver, lazy initialisation, the
 *              caching allocator (size classes, stream-ordered reuse,
 *              statistics), errors.
 *   modules    modules.c: CUDA sources compiled (NVRTC, or the host
 *              compiler for the emulator) and cached on disk by content hash
 *              (the key holds the driver's target: architecture and toolkit
 *              version), the library of hand-written kernels
 *              (the .cu files of src/cuda/kernels, embedded at build time), launches.
 *   kernels    one file per op family (k_*.c): the op kernels
 *              (engine/backend.h's tgl_op_kernel) over device arrays.
 *   backend    backend_cuda.c: the tgl_backend table.
 *
 * Ordering.  Everything runs on the driver's one stream, in issue order:
 * a kernel may free (tgl_cuda_free) a scratch block right after launching
 * the kernel that reads it, since the next user of that block is ordered
 * after it on the same stream.  The host waits only in copies to the host
 * and in tgl_cuda_sync.
 *
 * Kernel sources (src/cuda/kernels/<family>.cu and its host-shared header
 * <family>.cuh).  CUDA C++ compiled by NVRTC after the prelude
 * (kernels/prelude.cuh, which gives int64_t and friends, TGL_KERNEL and the
 * helpers), and by the host compiler for the emulator.  Rules, so that both
 * compile it and the emulator runs it:
 *   - a kernel is TGL_KERNEL(symbol, ArgsType) { ... } and reads its
 *     parameters from `a`, one struct of plain C fields (int64_t, int32_t,
 *     double, float, pointers) defined in the family's .cuh, which the host
 *     file includes too (same layout on both sides);
 *   - 1-D blocks: blockDim.x a multiple of 32, at most 1024; any grid
 *     (1-D to 3-D).  A kernel gives the same result for ANY blockDim.x
 *     multiple of 32 and ANY grid (grid-stride loops; rows strided by
 *     gridDim), so the emulator may run it with smaller ones;
 *   - CUDA features allowed: threadIdx/blockIdx/blockDim/gridDim, warpSize,
 *     __syncthreads, static __shared__ arrays, TGL_DYN_SHARED(T, name) for
 *     dynamic shared memory, atomicAdd (float, double, int, unsigned long
 *     long), atomicMax/atomicMin (int, long long), atomicCAS (int,
 *     unsigned long long), __shfl_down_sync/__shfl_xor_sync with the full
 *     mask called by every lane of the warp, the CUDA math functions with
 *     libm's names, __int_as_float & co., __ldg, min/max, INFINITY/NAN,
 *     C++ templates.  Nothing else (no cooperative groups, no CUB).
 */
#ifndef TGL_CUDA_INT_H
#define TGL_CUDA_INT_H

#include "engine/backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the driver ------------------------------------------------------------ */

typedef struct tgl_cuda_devinfo {
    char name[256];          /* "NVIDIA H200", "tgl emulated GPU"          */
    int cc_major, cc_minor;  /* compute capability                          */
    int sm_count;
    int max_threads_per_block;
    size_t total_mem;        /* bytes                                       */
    char target[96];         /* what decides the machine code: "sm_90 nvrtc 13.0" */
} tgl_cuda_devinfo;

typedef struct tgl_cuda_module tgl_cuda_module; /* a loaded module (driver's)  */
typedef struct tgl_cuda_func tgl_cuda_func;     /* a kernel in a module        */
typedef struct tgl_cuda_graph tgl_cuda_graph;   /* an instantiated captured graph */

typedef enum { TGL_CUDA_H2D, TGL_CUDA_D2H, TGL_CUDA_D2D } tgl_cuda_copy_kind;

typedef struct tgl_cuda_driver {
    const char *name; /* "cuda", "emu" */
    /* How many devices (0 when no driver/device; never fails). */
    int (*device_count)(void);
    /* Initialises device 0 and the stream, fills *info; a clear error when
     * there is no device or driver.  Called once (runtime.c). */
    tgl_status (*init)(tgl_cuda_devinfo *info, tgl_errbuf *err);

    /* Raw device memory (runtime.c's allocator sits above these). */
    tgl_status (*malloc)(void **p, size_t n, tgl_errbuf *err);
    void (*free)(void *p); /* waits for the stream first where it must */
    /* Copies on the stream.  D2H returns when the bytes are on the host
     * (waits for the stream); H2D returns when the host buffer may be
     * reused (pinned staging for small copies, else synchronous); D2D is
     * asynchronous. */
    tgl_status (*memcpy)(void *dst, const void *src, size_t n, tgl_cuda_copy_kind kind,
                         tgl_errbuf *err);
    tgl_status (*memset)(void *p, int byte, size_t n, tgl_errbuf *err); /* async */
    /* Waits for everything issued on the stream; reports an asynchronous
     * failure (a kernel's) that happened since the last check. */
    tgl_status (*sync)(tgl_errbuf *err);

    /* Modules.  compile turns a whole CUDA source (prelude included) into
     * an image (*image malloc'd: a cubin; for the emulator a shared
     * object), for this device's target; load makes a module of an image. */
    tgl_status (*compile)(const char *source, const char *name, void **image, size_t *len,
                          char **log, tgl_errbuf *err);
    tgl_status (*load)(const void *image, size_t len, tgl_cuda_module **m, tgl_errbuf *err);
    tgl_status (*func)(tgl_cuda_module *m, const char *symbol, tgl_cuda_func **f, tgl_errbuf *err);
    void (*unload)(tgl_cuda_module *m);
    /* Launches f on the stream with its parameters args[] (cuLaunchKernel's
     * convention: one pointer per kernel parameter). */
    tgl_status (*launch)(tgl_cuda_func *f, const unsigned grid[3], unsigned block, size_t shmem,
                         void **args, tgl_errbuf *err);

    /* Products, row-major as engine/backend.h says (the real driver swaps
     * operands for cuBLAS's column-major), device pointers, dtype
     * TGL_FLOAT32 or TGL_FLOAT64; tf32: float32 products may use TF32. */
    tgl_status (*gemm)(int dtype, bool trans_a, bool trans_b, int m, int n, int k, double alpha,
                       const void *a, int lda, const void *b, int ldb, double beta, void *c,
                       int ldc, bool tf32, tgl_errbuf *err);
    /* count independent products, operand i at a + i*stride_a elements, etc. */
    tgl_status (*gemm_batched)(int dtype, bool trans_a, bool trans_b, int m, int n, int k,
                               double alpha, const void *a, int lda, int64_t stride_a,
                               const void *b, int ldb, int64_t stride_b, double beta, void *c,
                               int ldc, int64_t stride_c, int count, bool tf32, tgl_errbuf *err);
    tgl_status (*gemv)(int dtype, bool trans, int rows, int cols, double alpha, const void *a,
                       int lda, const void *x, int incx, double beta, void *y, int incy,
                       tgl_errbuf *err);
    tgl_status (*ger)(int dtype, int m, int n, double alpha, const void *x, int incx,
                      const void *y, int incy, void *a, int lda, tgl_errbuf *err);
    /* *out (device memory, dtype) = x . y */
    tgl_status (*dot)(int dtype, int n, const void *x, int incx, const void *y, int incy,
                      void *out, tgl_errbuf *err);

    /* Graphs: capture everything issued on the stream between begin and
     * end into an instantiated graph; replay it; free it.  NULL entries: the
     * driver captures nothing (the backend then runs steps eagerly). */
    tgl_status (*capture_begin)(tgl_errbuf *err);
    tgl_status (*capture_end)(tgl_cuda_graph **g, tgl_errbuf *err);
    tgl_status (*graph_launch)(tgl_cuda_graph *g, tgl_errbuf *err);
    void (*graph_free)(tgl_cuda_graph *g);
} tgl_cuda_driver;

extern const tgl_cuda_driver tgl_cuda_driver_real; /* drv_cuda.c */
extern const tgl_cuda_driver tgl_cuda_driver_emu;  /* drv_emu.c  */

/* ---- the real driver's parts ------------------------------------------------- */

/* nvrtc.c: source (whole) compiled with NVRTC into a cubin for sm_<arch>
 * (90 for sm_90), with no device needed; *log: NVRTC's log (malloc'd, may
 * be NULL).  The compile specs call it directly. */
tgl_status tgl_cuda_nvrtc_compile(const char *source, const char *name, int arch, void **image,
                                  size_t *len, char **log, tgl_errbuf *err);
/* "nvrtc 13.0" (static text), for the cache key. */
const char *tgl_cuda_nvrtc_version(void);
/* The options tgl_cuda_nvrtc_compile passes after the architecture
 * (static text), for the cache key. */
const char *tgl_cuda_nvrtc_options(void);

/* drv_cuda.c: the stream everything runs on (a cudaStream_t). */
void *tgl_cuda_real_stream(void);
/* drv_cuda.c: whether the CUDA error code e (a cudaError_t) is sticky (an
 * asynchronous kernel fault: the context is lost for the process). */
bool tgl_cuda_error_is_sticky(int e);

/* drv_cublas.c: cuBLAS on that stream, with the driver entries' meaning
 * (the real driver's table points at these). */
/* Makes the cuBLAS handle, bound to the stream, with its own workspace:
 * the real driver's init calls it once the stream exists, so that no
 * handle or workspace is made while a graph is being captured (the
 * products make the handle on first use otherwise).  Idempotent. */
tgl_status tgl_cuda_cublas_init(tgl_errbuf *err);
tgl_status tgl_cuda_cublas_gemm(int dtype, bool trans_a, bool trans_b, int m, int n, int k,
                                double alpha, const void *a, int lda, const void *b, int ldb,
                                double beta, void *c, int ldc, bool tf32, tgl_errbuf *err);
tgl_status tgl_cuda_cublas_gemm_batched(int dtype, bool trans_a, bool trans_b, int m, int n,
                                        int k, double alpha, const void *a, int lda,
                                        int64_t stride_a, const void *b, int ldb,
                                        int64_t stride_b, double beta, void *c, int ldc,
                                        int64_t stride_c, int count, bool tf32, tgl_errbuf *err);
tgl_status tgl_cuda_cublas_gemv(int dtype, bool trans, int rows, int cols, double alpha,
                                const void *a, int lda, const void *x, int incx, double beta,
                                void *y, int incy, tgl_errbuf *err);
tgl_status tgl_cuda_cublas_ger(int dtype, int m, int n, double alpha, const void *x, int incx,
                               const void *y, int incy, void *a, int lda, tgl_errbuf *err);
tgl_status tgl_cuda_cublas_dot(int dtype, int n, const void *x, int incx, const void *y,
                               int incy, void *out, tgl_errbuf *err);

/* ---- runtime (runtime.c) ---------------------------------------------------- */

/* The driver in use: the emulator when TGL_CUDA_EMU is set to a nonzero
 * value in the environment, else the real one. */
const tgl_cuda_driver *tgl_cuda_drv(void);
/* Initialises the device once (thread-safe); later calls return the first
 * result.  Every entry that touches the device calls it first. */
tgl_status tgl_cuda_ready(tgl_errbuf *err);
/* The device's description (after a successful tgl_cuda_ready). */
const tgl_cuda_devinfo *tgl_cuda_info(void);

/* The caching allocator: a block of at least n bytes (n > 0), 256-byte
 * aligned, from the cache when one of its size class is free, else new
 * from the driver (on out of memory: the cache is emptied and the
 * allocation retried once).  NULL when the device is out of memory. */
void *tgl_cuda_alloc(size_t n);
/* Gives a block back to the cache (stream-ordered reuse: see above). */
void tgl_cuda_free(void *p);
/* The statistics (tgl_cuda_mem_stats) and emptying the cache are public:
 * tgl.h's tgl_cuda_memory_stats and tgl_cuda_empty_cache (runtime.c). */

/* While a graph capture is in progress (step.c), blocks given back with
 * tgl_cuda_free are held instead of reused, since every replay of the
 * captured work reads them: hold_end returns what was held (NULL: none),
 * which the graph keeps until hold_release gives it back to the cache. */
void tgl_cuda_hold_begin(void);
void *tgl_cuda_hold_end(void);
void tgl_cuda_hold_release(void *held);

/* Formats "cuda: <what>: <driver's message>" into err; returns st. */
tgl_status tgl_cuda_fail(tgl_errbuf *err, tgl_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---- modules and launches (modules.c) --------------------------------------- */

/* The kernel `symbol` of the hand-written family `family` ("nnet", ...:
 * src/cuda/kernels/<family>.cu), compiling the family's module on first
 * use (from the disk cache when it holds it). */
tgl_status tgl_cuda_lib_func(const tgl_backend_opts *o, const char *family, const char *symbol,
                             tgl_cuda_func **f, tgl_errbuf *err);
/* Launches a library kernel with its argument struct (passed by value as
 * the kernel's one parameter).  grid: blocks in x (y, z = 1). */
tgl_status tgl_cuda_lib_launch(const tgl_backend_opts *o, const char *family, const char *symbol,
                               unsigned grid, unsigned block, size_t shmem, const void *args,
                               tgl_errbuf *err);
/* A good 1-D geometry for n independent items on this device: *block
 * threads (256), *grid blocks (enough to fill the device, at most what
 * covers n, at least 1). */
void tgl_cuda_geometry(int64_t n, unsigned *grid, unsigned *block);
/* Compiles a whole source (the prelude is prepended) into a module, from
 * or into the disk cache (o's cache_dir); for generated kernels. */
tgl_status tgl_cuda_module_from_source(const tgl_backend_opts *o, const char *source,
                                       const char *name, tgl_cuda_module **m, tgl_errbuf *err);
/* The embedded texts: the prelude, and each family's .cuh + .cu. */
const char *tgl_cuda_prelude_source(void);
const char *tgl_cuda_family_source(const char *family); /* NULL: no such family */
extern const char *const tgl_cuda_families[]; /* NULL-terminated */

/* ---- helpers for op kernels (k_copy.c) ---------------------------------------- */

/* The settings the op kernels read (tf32, cache dir, ...): the context's
 * backend options. */
const tgl_backend_opts *tgl_cuda_opts(tgl_ctx *ctx);

/* ---- op kernels by family (k_*.c): tgl_op_kernel entries ------------------------ */

#define TGL_CUDA_DECLARE_KERNEL(name) extern const tgl_op_kernel tgl_cuda_kernel_##name;
#define TGL_CUDA_KERNELS(X)                                                                \
    X(elemwise) X(reduce) X(argmax) X(axes_size) X(shape) X(concatenate) X(fill_like)    \
    X(arange) X(dot) X(batched_dot) X(gemm) X(gemv) X(ger) X(inc_subtensor)               \
    X(adv_subtensor) X(adv_inc_subtensor) X(one_hot) X(softmax) X(log_softmax)             \
    X(softmax_xent) X(softmax_xent_dx) X(class_xent) X(class_xent_delta) X(conv2d)         \
    X(conv2d_grad_input) X(conv2d_grad_weight) X(pool2d) X(pool2d_grad) X(batch_norm)      \
    X(batch_norm_stats) X(batch_norm_grad)
TGL_CUDA_KERNELS(TGL_CUDA_DECLARE_KERNEL)

/* Whether each family's kernel runs node n's dtypes (backend_cuda.c's
 * supports_op asks the family; NULL: every dtype the op's meaning allows). */
bool tgl_cuda_supports_elemwise(const struct tgl_node *n);

/* ---- the backend table's entries, by file ------------------------------------ */

/* runtime.c: memory and copies (engine/backend.h's entries). */
tgl_status tgl_cuda_be_ready(tgl_errbuf *err); /* tgl_cuda_ready */
void *tgl_cuda_be_alloc(size_t nbytes);
void tgl_cuda_be_free(void *p);
tgl_status tgl_cuda_be_memset(void *p, int byte, size_t n, tgl_errbuf *err);
tgl_status tgl_cuda_be_copy_to_host(void *host, const void *src, size_t n, tgl_errbuf *err);
tgl_status tgl_cuda_be_copy_from_host(void *dst, const void *host, size_t n, tgl_errbuf *err);
tgl_status tgl_cuda_be_copy(void *dst, const void *src, size_t n, tgl_errbuf *err);
const char *tgl_cuda_be_info(void);
/* Whether float32 products may use TF32: the last context that ran a
 * CUDA op kernel said so (config.allow_tf32; the backend's BLAS entries
 * take no options).  Set by tgl_cuda_opts. */
bool tgl_cuda_allow_tf32(void);

/* blas.c: the BLAS entries. */
tgl_status tgl_cuda_be_gemm(int dtype, bool trans_a, bool trans_b, int m, int n, int k,
                            double alpha, const void *a, int lda, const void *b, int ldb,
                            double beta, void *c, int ldc, tgl_errbuf *err);
tgl_status tgl_cuda_be_gemv(int dtype, bool trans, int rows, int cols, double alpha,
                            const void *a, int lda, const void *x, int incx, double beta,
                            void *y, int incy, tgl_errbuf *err);
tgl_status tgl_cuda_be_ger(int dtype, int m, int n, double alpha, const void *x, int incx,
                           const void *y, int incy, void *a, int lda, tgl_errbuf *err);
tgl_status tgl_cuda_be_dot(int dtype, int n, const void *x, int incx, const void *y, int incy,
                           void *out, tgl_errbuf *err);

/* fused.c: fused programs (render_cuda.c's source, compiled by modules.c). */
tgl_status tgl_cuda_fused_prepare(const tgl_backend_opts *o, const struct tgl_fused_prog *prog,
                                  tgl_kernel_ref **out, tgl_errbuf *err);
void tgl_cuda_fused_wait(tgl_kernel_ref *k);
void tgl_cuda_fused_release(tgl_kernel_ref *k);
tgl_status tgl_cuda_fused_launch(const tgl_backend_opts *o, const struct tgl_fused_prog *prog,
                                 tgl_kernel_ref *k, tgl_array *const *in, tgl_array *const *out,
                                 void **cache, tgl_errbuf *err);
void tgl_cuda_fused_launch_cache_free(void *cache);
/* For whole steps (step.c): a copy of the geometry a launch cache holds
 * (what launch decided from the operands' layouts; NULL when out of
 * memory or the cache holds none), its release, and a launch of prog's
 * kernel with that geometry over the operands at ptrs[0..nin+nout). */
void *tgl_cuda_fused_geometry_dup(const void *launch_cache);
void tgl_cuda_fused_geometry_free(void *geometry);
tgl_status tgl_cuda_fused_launch_at(const struct tgl_fused_prog *prog, const void *geometry,
                                    void *const *ptrs, tgl_errbuf *err);

/* modules.c: the disk cache of compiled modules. */
tgl_status tgl_cuda_cache_clear(const tgl_backend_opts *o, tgl_errbuf *err);
tgl_status tgl_cuda_cache_info(const tgl_backend_opts *o, char **text, tgl_errbuf *err);

/* step.c: whole steps (captured as CUDA Graphs). */
bool tgl_cuda_step_inlinable(const struct tgl_fused_prog *prog, const void *launch_cache,
                             size_t *scratch_bytes);
tgl_status tgl_cuda_step_prepare(const tgl_backend_opts *o, const tgl_step_item *items, int n,
                                 tgl_kernel_ref **out, tgl_errbuf *err);
int tgl_cuda_step_run(tgl_kernel_ref *k, void *const *D, void *env, tgl_step_cb cb);
void tgl_cuda_step_free(tgl_kernel_ref *k);

#endif /* TGL_CUDA_INT_H */
