/*
 * drv_cuda.c — the real driver (cuda_int.h's tgl_cuda_driver_real): device
 * 0 through the CUDA runtime API, one non-blocking stream that everything
 * runs on, raw memory, copies (small host-to-device copies through pinned
 * staging buffers), module load / kernel lookup / launch through the
 * runtime's library API (cudaLibraryLoadData, cudaLibraryGetKernel,
 * cudaLaunchKernel on the kernel handle: never the driver library,
 * TOOLCHAIN.md), graph capture, and the parts written elsewhere: NVRTC
 * (nvrtc.c) for compiles, cuBLAS (drv_cublas.c) for products.
 *
 * Every CUDA error becomes a message saying what was being done and the
 * runtime's text for the error (cudaGetErrorString), never an abort; the
 * runtime's "last error" is cleared after each one is reported, so that a
 * later sync reports only new failures.
 *
 * Graph capture (capture_begin .. capture_end) runs in thread-local mode:
 * calls the capture would forbid in this thread are avoided or made in
 * relaxed mode here.  Allocation switches to relaxed mode for its
 * cudaMalloc, a free waits until the capture ends (cudaFree would
 * synchronize), and copies to or from the host and syncs fail clearly,
 * since a captured copy would read or write host memory at replay time,
 * not now.
 */
#include "cuda/cuda_int.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cudaStream_t stream;
static int arch;             /* compute capability as 90 for sm_90 */
static size_t shmem_optin;   /* the most dynamic shared memory a block may opt in to */
static int capturing;        /* atomic: a capture on the stream is under way */

/* Whether e leaves the CUDA context corrupt (driver_types.h: "the process
 * must be terminated and relaunched" / "leaves the process in an
 * inconsistent state"): an asynchronous kernel fault.  cudaGetLastError
 * cannot clear these; every later call of the process returns the same
 * error, whatever it was doing, so the message must say so. */
bool tgl_cuda_error_is_sticky(int e)
{
    switch (e) {
    case cudaErrorContained: case cudaErrorIllegalAddress: case cudaErrorLaunchTimeout:
    case cudaErrorAssert: case cudaErrorHardwareStackError: case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress: case cudaErrorInvalidAddressSpace: case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure: case cudaErrorTensorMemoryLeak: case cudaErrorMpsClientTerminated:
    case cudaErrorExternalDevice:
        return true;
    default:
        return false;
    }
}

/* Reports a failed CUDA call: "cuda: <what>: <CUDA's text>". */
static tgl_status fail(tgl_errbuf *err, cudaError_t e, const char *what)
{
    cudaGetLastError(); /* clears a non-sticky error: reported here, not at the next sync */
    tgl_status st = e == cudaErrorMemoryAllocation ? TGL_ENOMEM : TGL_EINTERNAL;
    /* a sticky error shows in whatever call comes next (a copy, an
     * allocation): without this the message blames that call */
    return tgl_cuda_fail(err, st, "%s: %s (%s)%s", what, cudaGetErrorString(e),
                         cudaGetErrorName(e),
                         tgl_cuda_error_is_sticky(e)
                             ? "; a kernel faulted earlier and the CUDA context is lost: every "
                               "later CUDA call in this process fails the same way (restart it)"
                             : "");
}

static bool is_capturing(void)
{
    return __atomic_load_n(&capturing, __ATOMIC_ACQUIRE) != 0;
}

/* ---- device ----------------------------------------------------------------------- */

static int real_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" / "no device" error */
        return 0;
    }
    return n;
}

static tgl_status real_init(tgl_cuda_devinfo *info, tgl_errbuf *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return tgl_cuda_fail(err, TGL_EINVAL, "no CUDA device: %s", cudaGetErrorString(e));
    }
    if (n <= 0)
        return tgl_cuda_fail(err, TGL_EINVAL, "no CUDA device: the driver reports none");
    if ((e = cudaSetDevice(0)) != cudaSuccess)
        return fail(err, e, "initialising device 0 (cudaSetDevice)");
    struct cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    if ((e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess)
        return fail(err, e, "reading device 0's properties (cudaGetDeviceProperties)");
    int rt = 0;
    if ((e = cudaRuntimeGetVersion(&rt)) != cudaSuccess)
        return fail(err, e, "reading the CUDA runtime's version");
    if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess)
        return fail(err, e, "creating the stream (cudaStreamCreateWithFlags)");
    /* cuBLAS's handle and workspace now, never inside a graph capture; a
     * device whose cuBLAS cannot start is no use to tgl (products are
     * everywhere) */
    tgl_status st = tgl_cuda_cublas_init(err);
    if (st)
        return st;
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", p.name);
    info->cc_major = p.major;
    info->cc_minor = p.minor;
    info->sm_count = p.multiProcessorCount;
    info->max_threads_per_block = p.maxThreadsPerBlock;
    info->total_mem = p.totalGlobalMem;
    snprintf(info->target, sizeof info->target, "sm_%d%d %s cudart %d.%d", p.major, p.minor,
             tgl_cuda_nvrtc_version(), rt / 1000, (rt % 1000) / 10);
    arch = p.major * 10 + p.minor;
    shmem_optin = p.sharedMemPerBlockOptin;
    return TGL_OK;
}

void *tgl_cuda_real_stream(void)
{
    return (void *)stream;
}

/* ---- memory ------------------------------------------------------------------------- */

static tgl_status real_malloc(void **p, size_t n, tgl_errbuf *err)
{
    /* cudaMalloc is "potentially unsafe" during a thread-local capture:
     * allowed in relaxed mode, which is what it needs (no stream work) */
    bool cap = is_capturing();
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (cap)
        cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t e = cudaMalloc(p, n);
    if (cap)
        cudaThreadExchangeStreamCaptureMode(&mode);
    if (e != cudaSuccess) {
        *p = NULL;
        char what[96];
        snprintf(what, sizeof what, "allocating %zu bytes (cudaMalloc)", n);
        return fail(err, e, what);
    }
    return TGL_OK;
}

/* Frees held back while a capture was under way (cudaFree synchronizes). */
static struct {
    pthread_mutex_t lock;
    void **p;
    size_t n, cap;
} deferred = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void free_now(void *p)
{
    /* The allocator above rarely frees (empty_cache, a retry after out of
     * memory): wait for the stream so no kernel still uses the block. */
    cudaStreamSynchronize(stream);
    cudaFree(p);
    cudaGetLastError(); /* nothing to report to: a free cannot fail */
}

static void real_free(void *p)
{
    if (!p)
        return;
    if (is_capturing()) {
        pthread_mutex_lock(&deferred.lock);
        if (deferred.n == deferred.cap) {
            size_t cap = deferred.cap ? deferred.cap * 2 : 16;
            void **q = realloc(deferred.p, cap * sizeof *q);
            if (q) {
                deferred.p = q;
                deferred.cap = cap;
            }
        }
        /* with no memory to remember it, the block leaks rather than
         * breaking the capture */
        if (deferred.n < deferred.cap)
            deferred.p[deferred.n++] = p;
        pthread_mutex_unlock(&deferred.lock);
        return;
    }
    free_now(p);
}

static void free_deferred(void)
{
    pthread_mutex_lock(&deferred.lock);
    for (size_t i = 0; i < deferred.n; i++)
        free_now(deferred.p[i]);
    deferred.n = 0;
    pthread_mutex_unlock(&deferred.lock);
}

/* ---- copies --------------------------------------------------------------------------- */

/* Pinned staging for host-to-device copies up to STAGE_MAX bytes: the
 * caller's bytes are copied into a slot and the DMA runs from there
 * asynchronously, so the caller may reuse its buffer at once and the host
 * does not wait for the stream.  Slots are used in turn; a slot's event
 * says when its last copy has left it.  Larger copies run synchronously. */
#define STAGE_SLOTS 4
#define STAGE_MAX ((size_t)4 << 20)
#define STAGE_MIN ((size_t)64 << 10)

static struct {
    pthread_mutex_t lock;
    struct {
        void *buf;
        size_t cap;
        cudaEvent_t ev;
        bool pending; /* ev recorded after the slot's last copy */
    } slot[STAGE_SLOTS];
    int next;
} stage = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* 1: copied through staging; 0: staging unavailable (no pinned memory),
 * copy another way; else a failure reported in err (returned negated). */
static int copy_staged(void *dst, const void *src, size_t n, tgl_errbuf *err)
{
    pthread_mutex_lock(&stage.lock);
    int i = stage.next;
    stage.next = (stage.next + 1) % STAGE_SLOTS;
    cudaError_t e = cudaSuccess;
    const char *what = NULL;
    if (stage.slot[i].pending) {
        if ((e = cudaEventSynchronize(stage.slot[i].ev)) != cudaSuccess)
            what = "copying to the device (waiting for an earlier copy's staging buffer)";
        stage.slot[i].pending = false;
    }
    if (!what && !stage.slot[i].ev &&
        (e = cudaEventCreateWithFlags(&stage.slot[i].ev, cudaEventDisableTiming)) != cudaSuccess) {
        stage.slot[i].ev = NULL;
        what = "copying to the device (creating a staging event)";
    }
    if (!what && stage.slot[i].cap < n) {
        if (stage.slot[i].buf)
            cudaFreeHost(stage.slot[i].buf);
        stage.slot[i].buf = NULL;
        stage.slot[i].cap = 0;
        size_t cap = STAGE_MIN;
        while (cap < n)
            cap *= 2;
        void *buf = NULL;
        if (cudaMallocHost(&buf, cap) != cudaSuccess) {
            cudaGetLastError(); /* no pinned memory: the caller copies without */
            pthread_mutex_unlock(&stage.lock);
            return 0;
        }
        stage.slot[i].buf = buf;
        stage.slot[i].cap = cap;
    }
    if (!what) {
        memcpy(stage.slot[i].buf, src, n);
        if ((e = cudaMemcpyAsync(dst, stage.slot[i].buf, n, cudaMemcpyHostToDevice, stream)) !=
            cudaSuccess)
            what = "copying to the device (cudaMemcpyAsync)";
        else if ((e = cudaEventRecord(stage.slot[i].ev, stream)) != cudaSuccess)
            what = "copying to the device (recording the staging event)";
        else
            stage.slot[i].pending = true;
    }
    pthread_mutex_unlock(&stage.lock);
    if (what)
        return -(int)fail(err, e, what);
    return 1;
}

static tgl_status real_memcpy(void *dst, const void *src, size_t n, tgl_cuda_copy_kind kind,
                              tgl_errbuf *err)
{
    cudaError_t e;
    if (n == 0)
        return TGL_OK;
    if (kind == TGL_CUDA_D2D) {
        if ((e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream)) != cudaSuccess)
            return fail(err, e, "copying within the device (cudaMemcpyAsync)");
        return TGL_OK;
    }
    if (is_capturing())
        return tgl_cuda_fail(err, TGL_EINTERNAL,
                             "copying %zu bytes %s the host while a CUDA graph is being captured",
                             n, kind == TGL_CUDA_D2H ? "to" : "from");
    if (kind == TGL_CUDA_D2H) {
        if ((e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream)) != cudaSuccess)
            return fail(err, e, "copying to the host (cudaMemcpyAsync)");
        /* the bytes are on the host once the stream is done; an earlier
         * kernel's failure shows here */
        if ((e = cudaStreamSynchronize(stream)) != cudaSuccess)
            return fail(err, e, "copying to the host (waiting for the device)");
        return TGL_OK;
    }
    if (n <= STAGE_MAX) {
        int r = copy_staged(dst, src, n, err);
        if (r == 1)
            return TGL_OK;
        if (r < 0)
            return (tgl_status)-r;
    }
    if ((e = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream)) != cudaSuccess)
        return fail(err, e, "copying to the device (cudaMemcpyAsync)");
    if ((e = cudaStreamSynchronize(stream)) != cudaSuccess)
        return fail(err, e, "copying to the device (waiting for the device)");
    return TGL_OK;
}

static tgl_status real_memset(void *p, int byte, size_t n, tgl_errbuf *err)
{
    if (n == 0)
        return TGL_OK;
    cudaError_t e = cudaMemsetAsync(p, byte, n, stream);
    return e == cudaSuccess ? TGL_OK : fail(err, e, "filling device memory (cudaMemsetAsync)");
}

static tgl_status real_sync(tgl_errbuf *err)
{
    if (is_capturing())
        return tgl_cuda_fail(err, TGL_EINTERNAL,
                             "waiting for the device while a CUDA graph is being captured");
    cudaError_t e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess)
        return fail(err, e, "waiting for the device (a kernel failed)");
    if ((e = cudaGetLastError()) != cudaSuccess)
        return fail(err, e, "a CUDA call failed");
    return TGL_OK;
}

/* ---- modules and launches ---------------------------------------------------------- */

struct tgl_cuda_func {
    cudaKernel_t kernel;
    int shmem_set; /* atomic: the dynamic shared memory limit set on it (0: the default) */
    struct tgl_cuda_func *next;
    char name[];
};

struct tgl_cuda_module {
    cudaLibrary_t lib;
    pthread_mutex_t lock; /* guards funcs */
    struct tgl_cuda_func *funcs;
};

static tgl_status real_compile(const char *source, const char *name, void **image, size_t *len,
                               char **log, tgl_errbuf *err)
{
    return tgl_cuda_nvrtc_compile(source, name, arch, image, len, log, err);
}

static tgl_status real_load(const void *image, size_t len, tgl_cuda_module **out,
                            tgl_errbuf *err)
{
    struct tgl_cuda_module *m = calloc(1, sizeof *m);
    if (!m)
        return tgl_cuda_fail(err, TGL_ENOMEM, "loading a module: out of memory");
    bool cap = is_capturing();
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (cap)
        cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t e = cudaLibraryLoadData(&m->lib, image, NULL, NULL, 0, NULL, NULL, 0);
    if (cap)
        cudaThreadExchangeStreamCaptureMode(&mode);
    if (e != cudaSuccess) {
        free(m);
        char what[96];
        snprintf(what, sizeof what, "loading a module of %zu bytes (cudaLibraryLoadData)", len);
        return fail(err, e, what);
    }
    pthread_mutex_init(&m->lock, NULL);
    *out = m;
    return TGL_OK;
}

static tgl_status real_func(tgl_cuda_module *m, const char *symbol, tgl_cuda_func **out,
                            tgl_errbuf *err)
{
    pthread_mutex_lock(&m->lock);
    struct tgl_cuda_func *f = m->funcs;
    while (f && strcmp(f->name, symbol) != 0)
        f = f->next;
    tgl_status st = TGL_OK;
    if (!f) {
        size_t len = strlen(symbol);
        f = calloc(1, sizeof *f + len + 1);
        /* with lazy loading (the default) this may load the kernel into the
         * context: relaxed mode during a capture, as real_load */
        bool cap = is_capturing();
        enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        if (cap)
            cudaThreadExchangeStreamCaptureMode(&mode);
        cudaError_t e = f ? cudaLibraryGetKernel(&f->kernel, m->lib, symbol) : cudaSuccess;
        if (cap)
            cudaThreadExchangeStreamCaptureMode(&mode);
        if (!f) {
            st = tgl_cuda_fail(err, TGL_ENOMEM, "finding kernel '%s': out of memory", symbol);
        } else if (e != cudaSuccess) {
            free(f);
            f = NULL;
            char what[320];
            snprintf(what, sizeof what, "finding kernel '%.256s' in its module (cudaLibraryGetKernel)",
                     symbol);
            st = fail(err, e, what);
        } else {
            memcpy(f->name, symbol, len + 1);
            f->next = m->funcs;
            m->funcs = f;
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (!st)
        *out = f;
    return st;
}

static void real_unload(tgl_cuda_module *m)
{
    if (!m)
        return;
    /* no kernel of the module may still be queued */
    bool cap = is_capturing();
    if (!cap)
        cudaStreamSynchronize(stream);
    /* an unload is a potentially unsafe call in a thread-local capture (it
     * would end this thread's capture): relaxed mode, as real_load (the
     * one unloaded during a capture is a duplicate no launch used) */
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (cap)
        cudaThreadExchangeStreamCaptureMode(&mode);
    cudaLibraryUnload(m->lib);
    if (cap)
        cudaThreadExchangeStreamCaptureMode(&mode);
    cudaGetLastError();
    for (struct tgl_cuda_func *f = m->funcs, *next; f; f = next) {
        next = f->next;
        free(f);
    }
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static tgl_status real_launch(tgl_cuda_func *f, const unsigned grid[3], unsigned block,
                              size_t shmem, void **args, tgl_errbuf *err)
{
    cudaError_t e;
    char what[384];
    if (shmem > ((size_t)48 << 10) &&
        (size_t)__atomic_load_n(&f->shmem_set, __ATOMIC_RELAXED) < shmem) {
        /* above 48 KiB a kernel must opt in to its dynamic shared memory */
        if (shmem > shmem_optin)
            return tgl_cuda_fail(err, TGL_EINTERNAL,
                                 "launching kernel '%s': it asks for %zu bytes of shared memory, "
                                 "the device allows %zu",
                                 f->name, shmem, shmem_optin);
        /* the library API's own call for a cudaKernel_t (device 0, the
         * one this driver uses) */
        e = cudaKernelSetAttributeForDevice(f->kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)shmem, 0);
        if (e != cudaSuccess) {
            snprintf(what, sizeof what,
                     "launching kernel '%.256s' (setting its shared memory to %zu bytes)", f->name,
                     shmem);
            return fail(err, e, what);
        }
        __atomic_store_n(&f->shmem_set, (int)shmem, __ATOMIC_RELAXED);
    }
    dim3 g, b;
    g.x = grid[0];
    g.y = grid[1] ? grid[1] : 1;
    g.z = grid[2] ? grid[2] : 1;
    b.x = block;
    b.y = 1;
    b.z = 1;
    e = cudaLaunchKernel((const void *)f->kernel, g, b, args, shmem, stream);
    if (e != cudaSuccess) {
        snprintf(what, sizeof what,
                 "launching kernel '%.256s' (grid %ux%ux%u, block %u, %zu bytes of shared memory)",
                 f->name, g.x, g.y, g.z, block, shmem);
        return fail(err, e, what);
    }
    return TGL_OK;
}

/* ---- graphs ------------------------------------------------------------------------- */

static tgl_status real_capture_begin(tgl_errbuf *err)
{
    if (is_capturing())
        return tgl_cuda_fail(err, TGL_EINTERNAL, "beginning a graph capture: one is under way");
    cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess)
        return fail(err, e, "beginning a graph capture (cudaStreamBeginCapture)");
    __atomic_store_n(&capturing, 1, __ATOMIC_RELEASE);
    return TGL_OK;
}

static tgl_status real_capture_end(tgl_cuda_graph **out, tgl_errbuf *err)
{
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(stream, &graph);
    __atomic_store_n(&capturing, 0, __ATOMIC_RELEASE);
    free_deferred();
    if (e != cudaSuccess) {
        if (graph)
            cudaGraphDestroy(graph);
        return fail(err, e, "ending a graph capture (cudaStreamEndCapture)");
    }
    if (!graph)
        return tgl_cuda_fail(err, TGL_EINTERNAL, "ending a graph capture: no graph came back");
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph); /* the executable graph is independent of it */
    if (e != cudaSuccess)
        return fail(err, e, "instantiating a captured graph (cudaGraphInstantiate)");
    *out = (tgl_cuda_graph *)exec;
    return TGL_OK;
}

static tgl_status real_graph_launch(tgl_cuda_graph *g, tgl_errbuf *err)
{
    cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)g, stream);
    return e == cudaSuccess ? TGL_OK : fail(err, e, "launching a captured graph (cudaGraphLaunch)");
}

static void real_graph_free(tgl_cuda_graph *g)
{
    /* an executable graph still running is freed when it completes */
    if (g && cudaGraphExecDestroy((cudaGraphExec_t)g) != cudaSuccess)
        cudaGetLastError();
}

const tgl_cuda_driver tgl_cuda_driver_real = {
    .name = "cuda",
    .device_count = real_device_count,
    .init = real_init,
    .malloc = real_malloc,
    .free = real_free,
    .memcpy = real_memcpy,
    .memset = real_memset,
    .sync = real_sync,
    .compile = real_compile,
    .load = real_load,
    .func = real_func,
    .unload = real_unload,
    .launch = real_launch,
    .gemm = tgl_cuda_cublas_gemm,
    .gemm_batched = tgl_cuda_cublas_gemm_batched,
    .gemv = tgl_cuda_cublas_gemv,
    .ger = tgl_cuda_cublas_ger,
    .dot = tgl_cuda_cublas_dot,
    .capture_begin = real_capture_begin,
    .capture_end = real_capture_end,
    .graph_launch = real_graph_launch,
    .graph_free = real_graph_free,
};
