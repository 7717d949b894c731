/*
 * prelude.cuh — what every hand-written CUDA kernel source of tgl opens with
 * (src/cuda/modules.c prepends it to each family's <family>.cuh and
 * <family>.cu).  Compiled by NVRTC for the device, and by the host C++
 * compiler for the emulated GPU (drv_emu.c prepends emu_prelude.h, which
 * defines TGL_CUDA_EMU and the CUDA names before this file).  The rules
 * kernels follow are in src/cuda/cuda_int.h.
 */
#ifndef TGL_CUDA_PRELUDE
#define TGL_CUDA_PRELUDE

#if defined(__CUDACC_RTC__)
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif

/* TGL_KERNEL(symbol, Args) { ... }: a kernel taking one struct of
 * parameters by value, read as `a`.  On the emulator the same body is a
 * host function, reached through symbol__emu(void **params), and
 * symbol__emu_psizes gives the parameters' sizes (a graph capture copies
 * them: kernels/emu_prelude.h). */
#ifdef TGL_CUDA_EMU
#define TGL_KERNEL(sym, Args)                                                                 \
    static void sym##__body(const Args &a);                                                   \
    extern "C" const unsigned long long sym##__emu_psizes[] = {sizeof(Args), 0};              \
    extern "C" void sym##__emu(void **p) { sym##__body(*(const Args *)p[0]); }                \
    static void sym##__body(const Args &a)
#else
#define TGL_KERNEL(sym, Args) extern "C" __global__ void sym(const Args a)
#endif

/* Dynamic shared memory (the launch's shmem bytes) as a T array. */
#ifndef TGL_DYN_SHARED
#define TGL_DYN_SHARED(T, name)                                                               \
    extern __shared__ unsigned char tgl_dyn_shared_[];                                        \
    T *name = (T *)tgl_dyn_shared_
#endif

/* for (i = first; i < n; i += all threads of the grid) */
#define TGL_GRID_LOOP(i, n)                                                                   \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (int64_t)(n);        \
         i += (int64_t)blockDim.x * gridDim.x)

/* A whole-warp sum (every lane gets it); every lane must call it. */
template <typename T> static __device__ __forceinline__ T tgl_warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* A whole-block sum for any blockDim.x that is a multiple of 32: every
 * thread must call it; scratch: 32 elements of shared memory.  The result
 * is returned to every thread. */
template <typename T> static __device__ __forceinline__ T tgl_block_sum(T v, T *scratch)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = tgl_warp_sum(v);
    __syncthreads(); /* scratch may still be read by a previous call */
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    T t = lane < nwarps ? scratch[lane] : (T)0;
    return tgl_warp_sum(t);
}

#endif /* TGL_CUDA_PRELUDE */
