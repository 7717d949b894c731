/*
 * emu_prelude.h — the CUDA names a kernel source uses, for the host C++
 * compiler: what makes a CUDA source (prelude.cuh, a family's .cuh and
 * .cu, or a fused program from cgen/render_cuda.c) a shared object the
 * emulated GPU (src/cuda/drv_emu.c) runs.  drv_emu.c compiles
 *
 *     #define TGL_CUDA_EMU 1
 *     <this file>
 *     <the source>
 *
 * with the host compiler; the file is embedded at build time.  It has two
 * parts: the ABI between the driver and the shared object (plain C, which
 * drv_emu.c includes with TGL_EMU_ABI_ONLY defined), and the CUDA names
 * (C++).
 *
 * How kernels run (drv_emu.c): blocks one after another on the launching
 * OS thread, each thread of a block a coroutine that switches only at
 * __syncthreads, __syncwarp and the warp-wide calls (shuffles, votes).  So
 * shared memory is a plain static array (one block lives at a time), and
 * atomics are plain read-modify-writes (one OS thread runs the grid; the
 * driver serialises launches).  Shared memory starts with what the
 * previous block left, as on a GPU, where it is uninitialised.
 */
#ifndef TGL_CUDA_EMU_PRELUDE
#define TGL_CUDA_EMU_PRELUDE

/* ---- the ABI (C) ---------------------------------------------------------- */

/* Bumped whenever tgl_emu_state changes: tgl_emu_bind refuses an object
 * built against another layout. */
#define TGL_EMU_ABI 1

typedef struct tgl_emu_dim3 {
    unsigned x, y, z;
} tgl_emu_dim3;

/* Warp-wide operations (tgl_emu_state.shfl / vote). */
enum { TGL_EMU_SHFL_IDX, TGL_EMU_SHFL_UP, TGL_EMU_SHFL_DOWN, TGL_EMU_SHFL_XOR };
enum { TGL_EMU_VOTE_BALLOT, TGL_EMU_VOTE_ANY, TGL_EMU_VOTE_ALL };

/* The driver's state as a running kernel sees it: the driver owns it and
 * hands its address to the object (tgl_emu_bind) after loading it. */
typedef struct tgl_emu_state {
    const tgl_emu_dim3 *thread_idx; /* the running thread's threadIdx      */
    tgl_emu_dim3 block_idx, block_dim, grid_dim;
    void *dyn_shared;               /* the block's dynamic shared memory    */
    /* Barriers of the block and of the calling thread's warp. */
    void (*syncthreads)(void);
    void (*syncwarp)(void);
    /* The value (bits) of lane f(lane, arg, width) of the calling warp,
     * every lane posting v; kind TGL_EMU_SHFL_*. */
    unsigned long long (*shfl)(int kind, unsigned long long v, int arg, int width);
    /* kind TGL_EMU_VOTE_*: the ballot's mask, or whether any/all lanes' pred. */
    unsigned (*vote)(int kind, int pred);
} tgl_emu_state;

/* Each kernel <symbol> has, in the object,
 *   extern "C" void <symbol>__emu(void **params);   the kernel, one thread
 *   extern "C" const unsigned long long <symbol>__emu_psizes[];
 *                         its parameters' sizes, 0-terminated (so a graph
 *                         capture copies them by value) */

#ifndef TGL_EMU_ABI_ONLY

/* ---- the CUDA names (C++) ---------------------------------------------------- */

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits>
#include <type_traits>

static tgl_emu_state *tgl_emu_st;

extern "C" int tgl_emu_bind(tgl_emu_state *st, unsigned abi, unsigned long long size)
{
    if (abi != TGL_EMU_ABI || size != sizeof(tgl_emu_state))
        return -1;
    tgl_emu_st = st;
    return 0;
}

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static
#define __constant__ static
/* __restrict__ is a keyword of the host compilers already. */

typedef tgl_emu_dim3 dim3;
typedef tgl_emu_dim3 uint3;

#define threadIdx (*tgl_emu_st->thread_idx)
#define blockIdx (tgl_emu_st->block_idx)
#define blockDim (tgl_emu_st->block_dim)
#define gridDim (tgl_emu_st->grid_dim)
#define warpSize 32

/* extern __shared__ T name[] has no host form: the launch's buffer. */
#define TGL_DYN_SHARED(T, name) T *name = (T *)tgl_emu_st->dyn_shared

static inline void __syncthreads(void) { tgl_emu_st->syncthreads(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)mask; tgl_emu_st->syncwarp(); }
static inline void __threadfence(void) {}
static inline void __threadfence_block(void) {}

/* ---- warp shuffles and votes ---- */

template <typename T> static inline T tgl_emu_shfl(int kind, T v, int arg, int width)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "a shuffled value is at most 8 bytes");
    unsigned long long bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = tgl_emu_st->shfl(kind, bits, arg, width);
    T r;
    memcpy(&r, &bits, sizeof r);
    return r;
}
template <typename T>
static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    (void)mask;
    return tgl_emu_shfl(TGL_EMU_SHFL_IDX, v, src, width);
}
template <typename T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    (void)mask;
    return tgl_emu_shfl(TGL_EMU_SHFL_UP, v, (int)delta, width);
}
template <typename T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    (void)mask;
    return tgl_emu_shfl(TGL_EMU_SHFL_DOWN, v, (int)delta, width);
}
template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    (void)mask;
    return tgl_emu_shfl(TGL_EMU_SHFL_XOR, v, lane_mask, width);
}
static inline unsigned __ballot_sync(unsigned mask, int pred)
{
    (void)mask;
    return tgl_emu_st->vote(TGL_EMU_VOTE_BALLOT, pred != 0);
}
static inline int __any_sync(unsigned mask, int pred)
{
    (void)mask;
    return (int)tgl_emu_st->vote(TGL_EMU_VOTE_ANY, pred != 0);
}
static inline int __all_sync(unsigned mask, int pred)
{
    (void)mask;
    return (int)tgl_emu_st->vote(TGL_EMU_VOTE_ALL, pred != 0);
}
static inline unsigned __activemask(void) { return 0xffffffffu; }

/* ---- atomics: plain read-modify-write (one OS thread runs the grid).  The
 * types are CUDA's; long and unsigned long stand for long long and
 * unsigned long long, since the host's int64_t is long where NVRTC's is
 * long long. ---- */

#define TGL_EMU_ATOMIC(name, T, expr)                                                         \
    static inline T name(T *p, T v)                                                           \
    {                                                                                         \
        T o = *p;                                                                             \
        *p = (expr);                                                                          \
        return o;                                                                             \
    }
#define TGL_EMU_ATOMIC_INTS(name, expr)                                                       \
    TGL_EMU_ATOMIC(name, int, expr)                                                           \
    TGL_EMU_ATOMIC(name, unsigned, expr)                                                      \
    TGL_EMU_ATOMIC(name, long long, expr)                                                     \
    TGL_EMU_ATOMIC(name, unsigned long long, expr)                                            \
    TGL_EMU_ATOMIC(name, long, expr)                                                          \
    TGL_EMU_ATOMIC(name, unsigned long, expr)
TGL_EMU_ATOMIC(atomicAdd, int, o + v)
TGL_EMU_ATOMIC(atomicAdd, unsigned, o + v)
TGL_EMU_ATOMIC(atomicAdd, unsigned long long, o + v)
TGL_EMU_ATOMIC(atomicAdd, unsigned long, o + v)
TGL_EMU_ATOMIC(atomicAdd, float, o + v)
TGL_EMU_ATOMIC(atomicAdd, double, o + v)
TGL_EMU_ATOMIC(atomicSub, int, o - v)
TGL_EMU_ATOMIC(atomicSub, unsigned, o - v)
TGL_EMU_ATOMIC_INTS(atomicMax, o < v ? v : o)
TGL_EMU_ATOMIC_INTS(atomicMin, v < o ? v : o)
TGL_EMU_ATOMIC_INTS(atomicAnd, o & v)
TGL_EMU_ATOMIC_INTS(atomicOr, o | v)
TGL_EMU_ATOMIC_INTS(atomicXor, o ^ v)
TGL_EMU_ATOMIC(atomicExch, int, v)
TGL_EMU_ATOMIC(atomicExch, unsigned, v)
TGL_EMU_ATOMIC(atomicExch, unsigned long long, v)
TGL_EMU_ATOMIC(atomicExch, unsigned long, v)
TGL_EMU_ATOMIC(atomicExch, float, v)
TGL_EMU_ATOMIC(atomicInc, unsigned, o >= v ? 0u : o + 1u)
TGL_EMU_ATOMIC(atomicDec, unsigned, (o == 0u || o > v) ? v : o - 1u)
#undef TGL_EMU_ATOMIC_INTS
#undef TGL_EMU_ATOMIC
#define TGL_EMU_CAS(T)                                                                        \
    static inline T atomicCAS(T *p, T cmp, T v)                                               \
    {                                                                                         \
        T o = *p;                                                                             \
        if (o == cmp)                                                                         \
            *p = v;                                                                           \
        return o;                                                                             \
    }
TGL_EMU_CAS(int)
TGL_EMU_CAS(unsigned)
TGL_EMU_CAS(unsigned short)
TGL_EMU_CAS(unsigned long long)
TGL_EMU_CAS(unsigned long)
#undef TGL_EMU_CAS

/* ---- loads, bits, conversions ---- */

template <typename T> static inline T __ldg(const T *p) { return *p; }

template <typename To, typename From> static inline To tgl_emu_bits(From v)
{
    static_assert(sizeof(To) == sizeof(From), "same size");
    To r;
    memcpy(&r, &v, sizeof r);
    return r;
}
static inline float __int_as_float(int v) { return tgl_emu_bits<float>(v); }
static inline int __float_as_int(float v) { return tgl_emu_bits<int>(v); }
static inline float __uint_as_float(unsigned v) { return tgl_emu_bits<float>(v); }
static inline unsigned __float_as_uint(float v) { return tgl_emu_bits<unsigned>(v); }
static inline double __longlong_as_double(long long v) { return tgl_emu_bits<double>(v); }
static inline long long __double_as_longlong(double v) { return tgl_emu_bits<long long>(v); }

static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
static inline int __clz(int v) { return v ? __builtin_clz((unsigned)v) : 32; }
static inline int __clzll(long long v) { return v ? __builtin_clzll((unsigned long long)v) : 64; }
static inline int __ffs(int v) { return __builtin_ffs(v); }
static inline int __ffsll(long long v) { return __builtin_ffsll(v); }
static inline unsigned __brev(unsigned v)
{
    unsigned r = 0;
    for (int i = 0; i < 32; i++, v >>= 1)
        r = (r << 1) | (v & 1u);
    return r;
}

/* Float to integer as the device converts: NaN gives 0, out of range
 * saturates (C++ leaves both undefined). */
template <typename I, typename F> static inline I tgl_emu_f2i(F v)
{
    if (v != v)
        return 0;
    if (v <= (F)std::numeric_limits<I>::min())
        return std::numeric_limits<I>::min();
    if (v >= (F)std::numeric_limits<I>::max())
        return std::numeric_limits<I>::max();
    return (I)v;
}
static inline int __float2int_rz(float v) { return tgl_emu_f2i<int>(v); }
static inline int __float2int_rn(float v) { return tgl_emu_f2i<int>(rintf(v)); }
static inline int __float2int_rd(float v) { return tgl_emu_f2i<int>(floorf(v)); }
static inline int __float2int_ru(float v) { return tgl_emu_f2i<int>(ceilf(v)); }
static inline int __double2int_rz(double v) { return tgl_emu_f2i<int>(v); }
static inline int __double2int_rn(double v) { return tgl_emu_f2i<int>(rint(v)); }
static inline long long __float2ll_rz(float v) { return tgl_emu_f2i<long long>(v); }
static inline long long __double2ll_rz(double v) { return tgl_emu_f2i<long long>(v); }
static inline float __int2float_rn(int v) { return (float)v; }
static inline double __int2double_rn(int v) { return (double)v; }
static inline double __ll2double_rn(long long v) { return (double)v; }

/* ---- min, max and the math functions (libm's, the precise ones; the
 * intrinsics as their precise forms) ---- */

template <typename A, typename B>
static inline typename std::common_type<A, B>::type min(A a, B b)
{
    typedef typename std::common_type<A, B>::type C;
    if constexpr (std::is_floating_point<C>::value)
        return fmin((C)a, (C)b);
    else
        return (C)b < (C)a ? (C)b : (C)a;
}
template <typename A, typename B>
static inline typename std::common_type<A, B>::type max(A a, B b)
{
    typedef typename std::common_type<A, B>::type C;
    if constexpr (std::is_floating_point<C>::value)
        return fmax((C)a, (C)b);
    else
        return (C)a < (C)b ? (C)b : (C)a;
}

static inline float rsqrtf(float v) { return 1.0f / sqrtf(v); }
static inline double rsqrt(double v) { return 1.0 / sqrt(v); }
/* glibc declares these names itself (its internal aliases), so macros. */
#define __expf(v) expf(v)
#define __exp10f(v) exp10f(v)
#define __logf(v) logf(v)
#define __log2f(v) log2f(v)
#define __log10f(v) log10f(v)
#define __sinf(v) sinf(v)
#define __cosf(v) cosf(v)
#define __tanf(v) tanf(v)
#define __powf(a, b) powf(a, b)
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __saturatef(float v) { return v != v ? 0.0f : v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }

#endif /* TGL_EMU_ABI_ONLY */
#endif /* TGL_CUDA_EMU_PRELUDE */
