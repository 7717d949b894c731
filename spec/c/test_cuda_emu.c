/*
 * test_cuda_emu.c — the emulated GPU (src/cuda/drv_emu.c with
 * src/cuda/kernels/emu_prelude.h): kernels written as the hand-written
 * ones are (prelude.cuh's TGL_KERNEL) compiled by the host compiler and run
 * through the driver table's compile/load/func/launch: grid-stride loops
 * over any n, block and warp sums for blockDim 32/64/256 (shrunk and at
 * full geometry), the warp-wide calls, atomics on repeated indices, dynamic
 * shared memory, graph capture and replay, the BLAS entries, fused
 * elementwise programs rendered by cgen/render_cuda.c (the whole op table
 * compiles; a set of programs against hand-computed values), and the
 * errors: a compile error carrying the compiler's log, lanes of a warp
 * parting at a shuffle, a bad launch geometry, a host copy during a
 * capture.  No GPU is needed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cgen/render_cuda.h"
#include "cuda/cuda_int.h"
#include "cuda_text_prelude_cuh.h"
#include "engine/ops/elemwise_def.h"
#include "fprog_test.h"

static const tgl_cuda_driver *D = &tgl_cuda_driver_emu;

/* ---- helpers ----------------------------------------------------------------- */

/* Compiles prelude.cuh + src into a loaded module; fails the test with the
 * driver's message on an error. */
static tgl_cuda_module *module(const char *src, const char *name, bool with_prelude)
{
    size_t n = strlen(TGL_CUDA_TEXT_prelude_cuh) + strlen(src) + 2;
    char *whole = malloc(n);
    assert_non_null(whole);
    snprintf(whole, n, "%s\n%s", with_prelude ? TGL_CUDA_TEXT_prelude_cuh : "", src);
    tgl_errbuf err = {{0}};
    void *image = NULL;
    size_t len = 0;
    char *log = NULL;
    tgl_status st = D->compile(whole, name, &image, &len, &log, &err);
    free(whole);
    if (st)
        fail_msg("compiling %s: %s\nlog: %s", name, err.msg, log ? log : "(none)");
    free(log);
    tgl_cuda_module *m = NULL;
    st = D->load(image, len, &m, &err);
    free(image);
    if (st)
        fail_msg("loading %s: %s", name, err.msg);
    return m;
}

static tgl_cuda_func *func(tgl_cuda_module *m, const char *sym)
{
    tgl_errbuf err = {{0}};
    tgl_cuda_func *f = NULL;
    if (D->func(m, sym, &f, &err))
        fail_msg("func %s: %s", sym, err.msg);
    return f;
}

static void *dmalloc(size_t n)
{
    tgl_errbuf err = {{0}};
    void *p = NULL;
    if (D->malloc(&p, n, &err))
        fail_msg("malloc %zu: %s", n, err.msg);
    return p;
}

/* Launches f with one argument struct. */
static tgl_status launch1(tgl_cuda_func *f, unsigned gx, unsigned gy, unsigned gz, unsigned block,
                          size_t shmem, void *args, tgl_errbuf *err)
{
    unsigned grid[3] = {gx, gy, gz};
    void *params[1] = {args};
    return D->launch(f, grid, block, shmem, params, err);
}

static void launch_ok(tgl_cuda_func *f, unsigned gx, unsigned block, size_t shmem, void *args)
{
    tgl_errbuf err = {{0}};
    if (launch1(f, gx, 1, 1, block, shmem, args, &err))
        fail_msg("launch: %s", err.msg);
}

static void set_full(bool full)
{
    if (full)
        setenv("TGL_CUDA_EMU_FULL", "1", 1);
    else
        unsetenv("TGL_CUDA_EMU_FULL");
}

/* ---- the kernels ---------------------------------------------------------------- */

static const char kernels[] =
    "struct FillArgs { const double *in; double *out; int64_t n; };\n"
    "TGL_KERNEL(k_fill, FillArgs)\n"
    "{\n"
    "    TGL_GRID_LOOP(i, a.n) a.out[i] = 2.0 * a.in[i] + (double)i;\n"
    "}\n"
    "struct GeoArgs { unsigned *out; };\n"
    "TGL_KERNEL(k_geometry, GeoArgs)\n"
    "{\n"
    "    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0) {\n"
    "        a.out[0] = blockDim.x; a.out[1] = blockDim.y; a.out[2] = blockDim.z;\n"
    "        a.out[3] = gridDim.x; a.out[4] = gridDim.y; a.out[5] = gridDim.z;\n"
    "        a.out[6] = warpSize;\n"
    "    }\n"
    "    atomicAdd(&a.out[7], 1u); /* threads run */\n"
    "    if (threadIdx.x == 0) atomicAdd(&a.out[8], 1u + blockIdx.x + 10u * blockIdx.y + "
    "100u * blockIdx.z);\n"
    "}\n"
    /* one block per row (rows strided by the grid), a block sum */
    "struct RowArgs { const double *in; double *out; int64_t rows, cols; };\n"
    "TGL_KERNEL(k_row_sum, RowArgs)\n"
    "{\n"
    "    __shared__ double scratch[32];\n"
    "    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {\n"
    "        double v = 0;\n"
    "        for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x)\n"
    "            v += a.in[r * a.cols + c];\n"
    "        v = tgl_block_sum(v, scratch);\n"
    "        if (threadIdx.x == 0) a.out[r] = v;\n"
    "    }\n"
    "}\n"
    /* the warp-wide calls: per warp, lane 0 writes the results */
    "struct WarpArgs { const int *in; long long *out; };\n"
    "TGL_KERNEL(k_warp, WarpArgs)\n"
    "{\n"
    "    const int lane = threadIdx.x & 31;\n"
    "    const int64_t g = (int64_t)(blockIdx.x * blockDim.x + threadIdx.x);\n"
    "    const int w = (int)(g >> 5);\n"
    "    int v = a.in[g];\n"
    "    int s = v;\n"
    "    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);\n"
    "    float f = (float)v;\n"
    "    f = tgl_warp_sum(f);\n"
    "    double up = __shfl_up_sync(0xffffffffu, (double)v, 1);\n"
    "    long long bc = __shfl_sync(0xffffffffu, (long long)v * 1000000000LL, 5);\n"
    "    unsigned ballot = __ballot_sync(0xffffffffu, v % 2 == 0);\n"
    "    int any = __any_sync(0xffffffffu, v == 7), all = __all_sync(0xffffffffu, v >= 0);\n"
    "    int x8 = __shfl_xor_sync(0xffffffffu, v, 8, 16);\n"
    "    if (lane == 0) {\n"
    "        a.out[w * 8 + 0] = s; a.out[w * 8 + 1] = (long long)f;\n"
    "        a.out[w * 8 + 2] = (long long)up; a.out[w * 8 + 3] = bc;\n"
    "        a.out[w * 8 + 4] = ballot; a.out[w * 8 + 5] = any * 10 + all;\n"
    "    }\n"
    "    if (lane == 3) { a.out[w * 8 + 6] = (long long)up; a.out[w * 8 + 7] = x8; }\n"
    "}\n"
    /* atomics on repeated indices */
    "struct AtomArgs { const int *idx; int64_t n; float *hf; double *hd; int *hi;\n"
    "                  unsigned long long *hu; int *mx; long long *mn; double *cas; };\n"
    "TGL_KERNEL(k_atomics, AtomArgs)\n"
    "{\n"
    "    TGL_GRID_LOOP(i, a.n) {\n"
    "        const int j = a.idx[i];\n"
    "        atomicAdd(&a.hf[j], 1.0f);\n"
    "        atomicAdd(&a.hd[j], 0.5);\n"
    "        atomicAdd(&a.hi[j], 1);\n"
    "        atomicAdd(&a.hu[j], 2ull);\n"
    "        atomicMax(&a.mx[j], (int)i);\n"
    "        atomicMin(&a.mn[j], (long long)i);\n"
    "        unsigned long long *p = (unsigned long long *)&a.cas[j];\n"
    "        unsigned long long old = *p, assumed;\n"
    "        do {\n"
    "            assumed = old;\n"
    "            old = atomicCAS(p, assumed,\n"
    "                  (unsigned long long)__double_as_longlong(__longlong_as_double((long "
    "long)assumed) + 0.25));\n"
    "        } while (assumed != old);\n"
    "    }\n"
    "}\n"
    /* dynamic shared memory: each row reversed through it */
    "struct RevArgs { const float *in; float *out; int64_t rows, cols; };\n"
    "TGL_KERNEL(k_reverse, RevArgs)\n"
    "{\n"
    "    TGL_DYN_SHARED(float, s);\n"
    "    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {\n"
    "        for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x)\n"
    "            s[c] = __ldg(&a.in[r * a.cols + c]);\n"
    "        __syncthreads();\n"
    "        for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x)\n"
    "            a.out[r * a.cols + c] = s[a.cols - 1 - c];\n"
    "        __syncthreads();\n"
    "    }\n"
    "}\n"
    /* math and conversions of the prelude */
    "struct MathArgs { double *out; };\n"
    "TGL_KERNEL(k_math, MathArgs)\n"
    "{\n"
    "    if (blockIdx.x || threadIdx.x) return;\n"
    "    a.out[0] = expf(1.0f); a.out[1] = log1p(1e-10); a.out[2] = min(3, 2.5);\n"
    "    a.out[3] = max((int64_t)-4, 7); a.out[4] = __int_as_float(0x3f800000);\n"
    "    a.out[5] = __longlong_as_double(__double_as_longlong(-0.5));\n"
    "    a.out[6] = isnan(NAN) ? 1 : 0; a.out[7] = -INFINITY; a.out[8] = rsqrtf(4.0f);\n"
    "    a.out[9] = min(NAN, 1.0f); a.out[10] = __float2int_rz(3e10f);\n"
    "    a.out[11] = copysign(2.0, -0.0); a.out[12] = __popc(0xf0f0u);\n"
    "    a.out[13] = (double)(llabs(-5LL) + abs(-3)) + fabs(-0.5f);\n"
    "}\n"
    /* lanes part at a shuffle: an error, never a hang */
    "struct BadArgs { int *out; };\n"
    "TGL_KERNEL(k_diverge, BadArgs)\n"
    "{\n"
    "    if ((threadIdx.x & 31) >= 16) return;\n"
    "    a.out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);\n"
    "}\n"
    /* the speed figure: a 256-thread elementwise kernel */
    "struct AxpyArgs { const float *x; float *y; float alpha; int64_t n; };\n"
    "TGL_KERNEL(k_axpy, AxpyArgs)\n"
    "{\n"
    "    TGL_GRID_LOOP(i, a.n) a.y[i] = a.alpha * a.x[i] + a.y[i];\n"
    "}\n";

static tgl_cuda_module *lib;

static int setup(void **state)
{
    (void)state;
    tgl_errbuf err = {{0}};
    tgl_cuda_devinfo info;
    if (D->init(&info, &err))
        fail_msg("init: %s", err.msg);
    print_message("emulated device: %s (cc %d.%d), target \"%s\"\n", info.name, info.cc_major,
                  info.cc_minor, info.target);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    lib = module(kernels, "test_kernels.cu", true);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    print_message("compiling the test kernels: %.2f s\n",
                  (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    D->unload(lib);
    return 0;
}

/* ---- the tests ------------------------------------------------------------------- */

static void device_and_memory(void **state)
{
    (void)state;
    assert_int_equal(D->device_count(), 1);
    assert_string_equal(D->name, "emu");
    tgl_errbuf err = {{0}};
    tgl_cuda_devinfo info;
    assert_int_equal(D->init(&info, &err), TGL_OK);
    assert_string_equal(info.name, "tgl emulated GPU");
    assert_int_equal(info.cc_major, 9);
    assert_int_equal(info.cc_minor, 0);
    assert_true(strncmp(info.target, "emu", 3) == 0);
    unsigned char *p = dmalloc(1000), *q = dmalloc(1000);
    assert_int_equal((uintptr_t)p % 256, 0);
    assert_int_equal(p[0], 0xff); /* fresh memory is NaN, not 0 */
    unsigned char host[1000];
    for (int i = 0; i < 1000; i++)
        host[i] = (unsigned char)i;
    assert_int_equal(D->memcpy(p, host, 1000, TGL_CUDA_H2D, &err), TGL_OK);
    assert_int_equal(D->memcpy(q, p, 1000, TGL_CUDA_D2D, &err), TGL_OK);
    assert_int_equal(D->memset(q, 7, 10, &err), TGL_OK);
    unsigned char back[1000];
    assert_int_equal(D->memcpy(back, q, 1000, TGL_CUDA_D2H, &err), TGL_OK);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(back[i], i < 10 ? 7 : (unsigned char)i);
    assert_int_equal(D->sync(&err), TGL_OK);
    D->free(p);
    D->free(q);
}

/* The grid-stride loop covers every n with any geometry, shrunk or not. */
static void grid_loop_covers_n(void **state)
{
    (void)state;
    tgl_cuda_func *f = func(lib, "k_fill");
    static const int64_t ns[] = {1, 31, 64, 257, 1000, 100003};
    static const unsigned grids[] = {1, 3, 1000}, blocks[] = {32, 64, 256, 1024};
    double *in = dmalloc(100003 * sizeof(double)), *out = dmalloc(100004 * sizeof(double));
    for (int64_t i = 0; i < 100003; i++)
        in[i] = (double)(i % 97) - 40.0;
    for (int full = 0; full < 2; full++) {
        set_full(full);
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (size_t g = 0; g < 3; g++)
                for (size_t b = 0; b < 4; b++) {
                    int64_t n = ns[a];
                    if (full && grids[g] * blocks[b] > 300000u)
                        continue; /* the full geometry is slow; enough */
                    memset(out, 0xff, (size_t)(n + 1) * sizeof(double));
                    struct { const double *in; double *out; int64_t n; } args = {in, out, n};
                    launch_ok(f, grids[g], blocks[b], 0, &args);
                    for (int64_t i = 0; i < n; i++)
                        if (out[i] != 2.0 * in[i] + (double)i)
                            fail_msg("n %lld grid %u block %u full %d: out[%lld] = %g",
                                     (long long)n, grids[g], blocks[b], full, (long long)i,
                                     out[i]);
                    /* nothing past n */
                    unsigned char *past = (unsigned char *)&out[n];
                    assert_int_equal(past[0], 0xff);
                }
    }
    set_full(false);
    D->free(in);
    D->free(out);
}

/* The shrunk geometry (documented) and TGL_CUDA_EMU_FULL. */
static void geometry_shrinks_unless_full(void **state)
{
    (void)state;
    tgl_cuda_func *f = func(lib, "k_geometry");
    unsigned *out = dmalloc(9 * sizeof(unsigned));
    for (int full = 0; full < 2; full++) {
        set_full(full);
        memset(out, 0, 9 * sizeof(unsigned));
        struct { unsigned *out; } args = {out};
        tgl_errbuf err = {{0}};
        assert_int_equal(launch1(f, 10, 5, 2, 256, 0, &args, &err), TGL_OK);
        unsigned bx = full ? 256 : 64, gx = full ? 10 : 4, gy = full ? 5 : 4, gz = 2;
        assert_int_equal(out[0], bx);
        assert_int_equal(out[1], 1);
        assert_int_equal(out[2], 1);
        assert_int_equal(out[3], gx);
        assert_int_equal(out[4], gy);
        assert_int_equal(out[5], gz);
        assert_int_equal(out[6], 32);
        assert_int_equal(out[7], bx * gx * gy * gz);
        unsigned want = 0;
        for (unsigned z = 0; z < gz; z++)
            for (unsigned y = 0; y < gy; y++)
                for (unsigned x = 0; x < gx; x++)
                    want += 1 + x + 10 * y + 100 * z;
        assert_int_equal(out[8], want); /* every block once */
        /* below the limits nothing changes */
        memset(out, 0, 9 * sizeof(unsigned));
        assert_int_equal(launch1(f, 3, 1, 1, 32, 0, &args, &err), TGL_OK);
        assert_int_equal(out[0], 32);
        assert_int_equal(out[3], 3);
        assert_int_equal(out[7], 96);
    }
    set_full(false);
    D->free(out);
}

/* Block sums (tgl_block_sum: warp shuffles and __syncthreads) for blockDim
 * 32, 64 and 256, over rows strided by the grid. */
static void block_sum_any_block(void **state)
{
    (void)state;
    tgl_cuda_func *f = func(lib, "k_row_sum");
    const int64_t rows = 37, cols = 1001;
    double *in = dmalloc((size_t)(rows * cols) * sizeof(double));
    double *out = dmalloc((size_t)rows * sizeof(double));
    double want[37];
    for (int64_t r = 0; r < rows; r++) {
        want[r] = 0;
        for (int64_t c = 0; c < cols; c++) {
            in[r * cols + c] = (double)((r * 7 + c * 13) % 101) - 50.0;
            want[r] += in[r * cols + c];
        }
    }
    static const unsigned blocks[] = {32, 64, 256};
    static const unsigned grids[] = {1, 5, 37, 100};
    for (int full = 0; full < 2; full++) {
        set_full(full);
        for (int b = 0; b < 3; b++)
            for (int g = 0; g < 4; g++) {
                memset(out, 0xff, (size_t)rows * sizeof(double));
                struct { const double *in; double *out; int64_t rows, cols; } args = {
                    in, out, rows, cols};
                launch_ok(f, grids[g], blocks[b], 0, &args);
                for (int64_t r = 0; r < rows; r++)
                    if (out[r] != want[r])
                        fail_msg("block %u grid %u full %d: row %lld sum %g, want %g",
                                 blocks[b], grids[g], full, (long long)r, out[r], want[r]);
            }
    }
    set_full(false);
    D->free(in);
    D->free(out);
}

/* Shuffles (down, xor, up, idx, widths), votes, for every warp of 1, 2
 * and 8-warp blocks. */
static void warp_calls(void **state)
{
    (void)state;
    tgl_cuda_func *f = func(lib, "k_warp");
    set_full(true); /* every thread of the launch runs once */
    static const unsigned blocks[] = {32, 64, 256};
    for (int b = 0; b < 3; b++) {
        unsigned block = blocks[b], grid = 2, nthr = block * grid, nw = nthr / 32;
        int *in = dmalloc(nthr * sizeof(int));
        long long *out = dmalloc(nw * 8 * sizeof(long long));
        for (unsigned i = 0; i < nthr; i++)
            in[i] = (int)((i * 37u + 11u) % 50u);
        struct { const int *in; long long *out; } args = {in, out};
        launch_ok(f, grid, block, 0, &args);
        for (unsigned w = 0; w < nw; w++) {
            const int *v = in + 32 * w;
            long long sum = 0;
            unsigned ballot = 0;
            int any = 0, all = 1;
            for (int l = 0; l < 32; l++) {
                sum += v[l];
                ballot |= (unsigned)(v[l] % 2 == 0) << l;
                any |= v[l] == 7;
                all &= v[l] >= 0;
            }
            const long long *o = out + 8 * w;
            assert_int_equal(o[0], sum);
            assert_int_equal(o[1], sum);
            assert_int_equal(o[2], v[0]); /* up by 1: lane 0 keeps its own */
            assert_int_equal(o[3], (long long)v[5] * 1000000000LL);
            assert_int_equal((unsigned)o[4], ballot);
            assert_int_equal(o[5], any * 10 + all);
            assert_int_equal(o[6], v[2]);     /* lane 3 up by 1 */
            assert_int_equal(o[7], v[3 ^ 8]); /* xor 8 within 16 */
        }
        D->free(in);
        D->free(out);
    }
    set_full(false);
}

/* Atomics where many threads hit the same index. */
static void atomics_repeated_indices(void **state)
{
    (void)state;
    tgl_cuda_func *f = func(lib, "k_atomics");
    const int64_t n = 5000;
    const int bins = 7;
    int *idx = dmalloc((size_t)n * sizeof(int));
    for (int64_t i = 0; i < n; i++)
        idx[i] = (int)((i * i + 3) % bins);
    float *hf = dmalloc(bins * sizeof(float));
    double *hd = dmalloc(bins * sizeof(double)), *cas = dmalloc(bins * sizeof(double));
    int *hi = dmalloc(bins * sizeof(int)), *mx = dmalloc(bins * sizeof(int));
    unsigned long long *hu = dmalloc(bins * sizeof(unsigned long long));
    long long *mn = dmalloc(bins * sizeof(long long));
    for (int full = 0; full < 2; full++) {
        set_full(full);
        for (int j = 0; j < bins; j++) {
            hf[j] = 0;
            hd[j] = cas[j] = 0;
            hi[j] = 0;
            hu[j] = 0;
            mx[j] = -1;
            mn[j] = 1LL << 40;
        }
        struct {
            const int *idx;
            int64_t n;
            float *hf;
            double *hd;
            int *hi;
            unsigned long long *hu;
            int *mx;
            long long *mn;
            double *cas;
        } args = {idx, n, hf, hd, hi, hu, mx, mn, cas};
        launch_ok(f, 100, 256, 0, &args);
        for (int j = 0; j < bins; j++) {
            int count = 0, last = -1;
            long long first = -1;
            for (int64_t i = 0; i < n; i++)
                if (idx[i] == j) {
                    count++;
                    last = (int)i;
                    if (first < 0)
                        first = i;
                }
            assert_true(hf[j] == (float)count);
            assert_true(hd[j] == 0.5 * count);
            assert_true(cas[j] == 0.25 * count);
            assert_int_equal(hi[j], count);
            assert_int_equal(hu[j], 2ull * (unsigned long long)count);
            assert_int_equal(mx[j], last);
            assert_int_equal(mn[j], count ? first : 1LL << 40);
        }
    }
    set_full(false);
    D->free(idx);
    D->free(hf);
    D->free(hd);
    D->free(cas);
    D->free(hi);
    D->free(mx);
    D->free(hu);
    D->free(mn);
}

/* Dynamic shared memory: the launch's bytes, per block. */
static void dynamic_shared_memory(void **state)
{
    (void)state;
    tgl_cuda_func *f = func(lib, "k_reverse");
    const int64_t rows = 9, cols = 333;
    float *in = dmalloc((size_t)(rows * cols) * sizeof(float));
    float *out = dmalloc((size_t)(rows * cols) * sizeof(float));
    for (int64_t i = 0; i < rows * cols; i++)
        in[i] = (float)i;
    for (int full = 0; full < 2; full++) {
        set_full(full);
        static const unsigned blocks[] = {32, 128, 1024};
        for (int b = 0; b < 3; b++) {
            memset(out, 0, (size_t)(rows * cols) * sizeof(float));
            struct { const float *in; float *out; int64_t rows, cols; } args = {in, out, rows,
                                                                               cols};
            launch_ok(f, 4, blocks[b], (size_t)cols * sizeof(float), &args);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < cols; c++)
                    assert_true(out[r * cols + c] == in[r * cols + cols - 1 - c]);
        }
    }
    set_full(false);
    /* more than an sm_90 block can have */
    tgl_errbuf err = {{0}};
    struct { const float *in; float *out; int64_t rows, cols; } args = {in, out, rows, cols};
    assert_int_equal(launch1(f, 1, 1, 1, 32, 300000, &args, &err), TGL_EINVAL);
    assert_non_null(strstr(err.msg, "k_reverse"));
    assert_non_null(strstr(err.msg, "dynamic shared memory"));
    D->free(in);
    D->free(out);
}

static void math_and_conversions(void **state)
{
    (void)state;
    tgl_cuda_func *f = func(lib, "k_math");
    double *out = dmalloc(14 * sizeof(double));
    struct { double *out; } args = {out};
    launch_ok(f, 1, 32, 0, &args);
    assert_true(out[0] == (double)expf(1.0f));
    assert_true(out[1] == log1p(1e-10));
    assert_true(out[2] == 2.5);
    assert_true(out[3] == 7.0);
    assert_true(out[4] == 1.0);
    assert_true(out[5] == -0.5);
    assert_true(out[6] == 1.0);
    assert_true(isinf(out[7]) && out[7] < 0);
    assert_true(out[8] == 0.5);
    assert_true(out[9] == 1.0);          /* min is fminf: NaN loses */
    assert_true(out[10] == 2147483647.0); /* saturates as the device does */
    assert_true(out[11] == -2.0);
    assert_true(out[12] == 8.0);
    assert_true(out[13] == 8.5);
    D->free(out);
}

/* Capture records (parameters by value) and runs nothing; replay runs it
 * all; a copy with the host or a synchronize fails the capture. */
static void capture_and_replay(void **state)
{
    (void)state;
    tgl_cuda_func *f = func(lib, "k_fill");
    const int64_t n = 1000;
    double *in = dmalloc(n * sizeof(double)), *out = dmalloc(n * sizeof(double));
    double *copy = dmalloc(n * sizeof(double));
    double *A = dmalloc(6 * sizeof(double)), *B = dmalloc(6 * sizeof(double));
    double *Cm = dmalloc(4 * sizeof(double)), *dot = dmalloc(sizeof(double));
    for (int i = 0; i < 6; i++) {
        A[i] = i + 1;     /* 2x3 */
        B[i] = 2 * i - 3; /* 3x2 */
    }
    tgl_errbuf err = {{0}};
    assert_int_equal(D->capture_begin(&err), TGL_OK);
    assert_int_equal(D->capture_begin(&err), TGL_EINVAL); /* one at a time */
    assert_int_equal(D->memset(in, 0, n * sizeof(double), &err), TGL_OK);
    struct { const double *in; double *out; int64_t n; } args = {in, out, n};
    launch_ok(f, 8, 256, 0, &args);
    args.n = 1; /* recorded by value: the replay still covers n */
    args.out = NULL;
    assert_int_equal(D->memcpy(copy, out, n * sizeof(double), TGL_CUDA_D2D, &err), TGL_OK);
    assert_int_equal(D->gemm(TGL_FLOAT64, false, false, 2, 2, 3, 1.0, A, 3, B, 2, 0.0, Cm, 2,
                             true, &err),
                     TGL_OK);
    assert_int_equal(D->dot(TGL_FLOAT64, 6, A, 1, B, 1, dot, &err), TGL_OK);
    tgl_cuda_graph *g = NULL;
    assert_int_equal(D->capture_end(&g, &err), TGL_OK);
    assert_non_null(g);
    /* nothing ran */
    unsigned char *raw = (unsigned char *)out;
    assert_int_equal(raw[0], 0xff);
    assert_int_equal(((unsigned char *)Cm)[0], 0xff);
    for (int rep = 0; rep < 2; rep++) {
        memset(out, 0xff, n * sizeof(double));
        for (int64_t i = 0; i < n; i++)
            in[i] = 5.0;
        assert_int_equal(D->graph_launch(g, &err), TGL_OK);
        for (int64_t i = 0; i < n; i++) {
            assert_true(in[i] == 0.0); /* the memset ran first */
            assert_true(out[i] == (double)i);
            assert_true(copy[i] == (double)i);
        }
        /* C = A B: [[1 2 3],[4 5 6]] [[-3 -1],[1 3],[5 7]] */
        assert_true(Cm[0] == 14.0 && Cm[1] == 26.0 && Cm[2] == 23.0 && Cm[3] == 53.0);
        assert_true(*dot == 1 * -3 + 2 * -1 + 3 * 1 + 4 * 3 + 5 * 5 + 6 * 7);
    }
    D->graph_free(g);

    /* a copy with the host during a capture is an error naming it */
    double host[4] = {0};
    assert_int_equal(D->capture_begin(&err), TGL_OK);
    assert_int_equal(D->memcpy(in, host, sizeof host, TGL_CUDA_H2D, &err), TGL_EINVAL);
    assert_non_null(strstr(err.msg, "host to device"));
    assert_non_null(strstr(err.msg, "graph capture"));
    g = NULL;
    assert_int_equal(D->capture_end(&g, &err), TGL_EINVAL);
    assert_null(g);
    assert_non_null(strstr(err.msg, "host to device"));
    assert_int_equal(D->capture_begin(&err), TGL_OK);
    assert_int_equal(D->memcpy(host, in, sizeof host, TGL_CUDA_D2H, &err), TGL_EINVAL);
    assert_non_null(strstr(err.msg, "device to host"));
    assert_int_equal(D->capture_end(&g, &err), TGL_EINVAL);
    assert_int_equal(D->capture_begin(&err), TGL_OK);
    assert_int_equal(D->sync(&err), TGL_EINVAL);
    assert_non_null(strstr(err.msg, "synchronize"));
    assert_int_equal(D->capture_end(&g, &err), TGL_EINVAL);
    assert_int_equal(D->capture_end(&g, &err), TGL_EINVAL); /* none on */
    /* after a failed capture the stream runs again */
    assert_int_equal(D->memcpy(host, in, sizeof host, TGL_CUDA_D2H, &err), TGL_OK);
    assert_int_equal(D->sync(&err), TGL_OK);
    D->free(in);
    D->free(out);
    D->free(copy);
    D->free(A);
    D->free(B);
    D->free(Cm);
    D->free(dot);
}

/* The BLAS entries: the CPU backend's, gemm_batched a loop, float32 too. */
static void blas_entries(void **state)
{
    (void)state;
    tgl_errbuf err = {{0}};
    float *a = dmalloc(2 * 6 * sizeof(float)), *b = dmalloc(2 * 6 * sizeof(float));
    float *c = dmalloc(2 * 4 * sizeof(float));
    for (int i = 0; i < 12; i++) {
        a[i] = (float)(i % 5);
        b[i] = (float)(3 - i % 4);
    }
    /* c_i = a_i^T b_i^T... keep it simple: c_i (2x2) = a_i (2x3) b_i (3x2) */
    assert_int_equal(D->gemm_batched(TGL_FLOAT32, false, false, 2, 2, 3, 2.0, a, 3, 6, b, 2, 6,
                                     0.0, c, 2, 4, 2, false, &err),
                     TGL_OK);
    for (int i = 0; i < 2; i++)
        for (int r = 0; r < 2; r++)
            for (int q = 0; q < 2; q++) {
                float s = 0;
                for (int k = 0; k < 3; k++)
                    s += a[i * 6 + r * 3 + k] * b[i * 6 + k * 2 + q];
                assert_true(c[i * 4 + r * 2 + q] == 2.0f * s);
            }
    /* y = A^T x; A += x y' */
    double *A = dmalloc(6 * sizeof(double)), *x = dmalloc(2 * sizeof(double));
    double *y = dmalloc(3 * sizeof(double));
    for (int i = 0; i < 6; i++)
        A[i] = i;
    x[0] = 1;
    x[1] = -2;
    assert_int_equal(D->gemv(TGL_FLOAT64, true, 2, 3, 1.0, A, 3, x, 1, 0.0, y, 1, &err), TGL_OK);
    assert_true(y[0] == -6 && y[1] == -7 && y[2] == -8);
    assert_int_equal(D->ger(TGL_FLOAT64, 2, 3, 1.0, x, 1, y, 1, A, 3, &err), TGL_OK);
    assert_true(A[0] == -6 && A[5] == 5 + 16);
    assert_int_equal(D->gemm(7, false, false, 1, 1, 1, 1.0, A, 1, A, 1, 0.0, A, 1, false, &err),
                     TGL_EDTYPE);
    D->free(a);
    D->free(b);
    D->free(c);
    D->free(A);
    D->free(x);
    D->free(y);
}

/* ---- errors ------------------------------------------------------------------------ */

static void compile_error_carries_the_log(void **state)
{
    (void)state;
    tgl_errbuf err = {{0}};
    void *image = NULL;
    size_t len = 0;
    char *log = NULL;
    tgl_status st =
        D->compile("extern \"C\" void k__emu(void **p) { this is not C++; }\n", "broken.cu",
                   &image, &len, &log, &err);
    assert_int_not_equal(st, TGL_OK);
    assert_null(image);
    assert_non_null(strstr(err.msg, "compiling broken.cu"));
    assert_non_null(strstr(err.msg, "broken.cu:1"));
    assert_non_null(log);
    assert_non_null(strstr(log, "broken.cu:1"));
    assert_non_null(strstr(log, "error"));
    free(log);
    /* a module without the symbol, an image that is no module */
    tgl_cuda_func *f = NULL;
    assert_int_equal(D->func(lib, "k_nothing", &f, &err), TGL_EINVAL);
    assert_non_null(strstr(err.msg, "k_nothing"));
    tgl_cuda_module *m = NULL;
    assert_int_equal(D->load("garbage", 7, &m, &err), TGL_EINVAL);
    assert_null(m);
}

static void divergent_warp_is_an_error(void **state)
{
    (void)state;
    tgl_cuda_func *f = func(lib, "k_diverge");
    int *out = dmalloc(64 * sizeof(int));
    struct { int *out; } args = {out};
    tgl_errbuf err = {{0}};
    assert_int_equal(launch1(f, 1, 1, 1, 64, 0, &args, &err), TGL_EINTERNAL);
    assert_non_null(strstr(err.msg, "kernel k_diverge"));
    assert_non_null(strstr(err.msg, "16 lanes at a warp-wide call"));
    assert_non_null(strstr(err.msg, "16 exited"));
    /* the emulator runs the next launch normally (the threads' stacks reused) */
    tgl_cuda_func *g = func(lib, "k_row_sum");
    double in[64], sum = 0;
    double *din = dmalloc(sizeof in), *dout = dmalloc(sizeof(double));
    for (int i = 0; i < 64; i++)
        sum += in[i] = i * 0.5;
    memcpy(din, in, sizeof in);
    struct { const double *in; double *out; int64_t rows, cols; } rargs = {din, dout, 1, 64};
    launch_ok(g, 1, 64, 0, &rargs);
    assert_true(*dout == sum);
    D->free(out);
    D->free(din);
    D->free(dout);
}

static void bad_launches_are_errors(void **state)
{
    (void)state;
    tgl_cuda_func *f = func(lib, "k_fill");
    struct { const double *in; double *out; int64_t n; } args = {NULL, NULL, 0};
    tgl_errbuf err = {{0}};
    assert_int_equal(launch1(f, 1, 1, 1, 100, 0, &args, &err), TGL_EINVAL);
    assert_non_null(strstr(err.msg, "k_fill: 100 threads per block"));
    assert_int_equal(launch1(f, 1, 1, 1, 2048, 0, &args, &err), TGL_EINVAL);
    assert_int_equal(launch1(f, 0, 1, 1, 64, 0, &args, &err), TGL_EINVAL);
    assert_non_null(strstr(err.msg, "grid (0,1,1)"));
    assert_int_equal(launch1(f, 1, 70000, 1, 64, 0, &args, &err), TGL_EINVAL);
}

/* ---- fused programs rendered by cgen/render_cuda.c ---------------------------------- */

#define MAXP 512
static prog progs[MAXP];

static char *render(int n)
{
    return prog_render(progs, 0, n);
}

/* Every op of the table in every dtype it computes in, and every cast,
 * compiles for the emulator and has its __emu entry. */
static void every_rendered_op_compiles(void **state)
{
    (void)state;
    int n = 0;
    for (int dt = 0; dt < TGL_NDTYPES; dt++)
        for (int op = 0; op < TGL_NOPS; op++)
            if (prog_elemwise_computes(op, dt))
                prog_elemwise(&progs[n++], op, dt);
    for (int from = 0; from < TGL_NDTYPES; from++)
        for (int to = 0; to < TGL_NDTYPES; to++)
            prog_cast(&progs[n++], from, to);
    char *src = render(n);
    tgl_cuda_module *m = module(src, "every_op.cu", false);
    free(src);
    for (int i = 0; i < n; i++)
        func(m, progs[i].symbol);
    D->unload(m);
}

/* The operands of a fused launch: the space and one operand per array. */
typedef struct opnd {
    void *data;
    int64_t strides[TGL_CUDA_MAX_DIMS];
} opnd;

static tgl_status run_prog(tgl_cuda_func *f, const tgl_cuda_space *S, tgl_cuda_operand *ops,
                           int nop, tgl_errbuf *err)
{
    void *params[8];
    params[0] = (void *)S;
    for (int j = 0; j < nop; j++)
        params[j + 1] = &ops[j];
    unsigned grid[3] = {7, 1, 1};
    return D->launch(f, grid, 256, 0, params, err);
}

/* Fused programs run on the emulator, both the flat and the strided path,
 * against values computed here. */
static void rendered_programs_run(void **state)
{
    (void)state;
    /* 0: out = exp(x) * y + 1.5 (float64), y broadcast along axis 0 */
    prog *b = &progs[0];
    prog_init(b, 2, "f_expmul");
    int x = in_(b, TGL_FLOAT64, 0), y = in_(b, TGL_FLOAT64, 1u);
    out_(b, op_(b, TGL_OP_ADD, TGL_FLOAT64,
                op_(b, TGL_OP_MUL, TGL_FLOAT64, op_(b, TGL_OP_EXP, TGL_FLOAT64, x, -1, -1), y, -1),
                const_(b, TGL_FLOAT64, 1.5), -1));
    /* 1: int64 mod (Lua's sign) and pow, two outputs */
    b = &progs[1];
    prog_init(b, 1, "f_intops");
    x = in_(b, TGL_INT64, 0);
    y = in_(b, TGL_INT64, 0);
    out_(b, op_(b, TGL_OP_MOD, TGL_INT64, x, y, -1));
    out_(b, op_(b, TGL_OP_POW, TGL_INT64, x, const_(b, TGL_INT64, 3), -1));
    /* 2: float32 sigmoid, then a saturating cast to int32, and maximum with NaN */
    b = &progs[2];
    prog_init(b, 1, "f_casts");
    x = in_(b, TGL_FLOAT32, 0);
    out_(b, op_(b, TGL_OP_CAST, TGL_INT32, x, -1, -1));
    out_(b, op_(b, TGL_OP_MAXIMUM, TGL_FLOAT32, op_(b, TGL_OP_SIGMOID, TGL_FLOAT32, x, -1, -1),
                const_(b, TGL_FLOAT32, 0.25), -1));
    /* 3: switch(c, a, clip(a, -1, 1)) on uint8 condition */
    b = &progs[3];
    prog_init(b, 1, "f_switch");
    int c = in_(b, TGL_BOOL, 0);
    x = in_(b, TGL_FLOAT32, 0);
    out_(b, op_(b, TGL_OP_SWITCH, TGL_FLOAT32, c, x,
                op_(b, TGL_OP_CLIP, TGL_FLOAT32, x, const_(b, TGL_FLOAT32, -1),
                    const_(b, TGL_FLOAT32, 1))));
    char *src = render(4);
    tgl_cuda_module *m = module(src, "fused.cu", false);
    free(src);
    tgl_errbuf err = {{0}};

    for (int full = 0; full < 2; full++) {
        set_full(full);
        /* program 0 on a 13 x 29 space: x contiguous (flat), then x transposed (strided) */
        {
            const int64_t R = 13, Cc = 29;
            double *X = dmalloc((size_t)(R * Cc) * sizeof(double));
            double *Y = dmalloc((size_t)Cc * sizeof(double));
            double *O = dmalloc((size_t)(R * Cc) * sizeof(double));
            for (int64_t i = 0; i < R * Cc; i++)
                X[i] = (double)(i % 17) / 8.0 - 1.0;
            for (int64_t j = 0; j < Cc; j++)
                Y[j] = (double)j - 3.0;
            tgl_cuda_space S = {R * Cc, 2, {R, Cc}};
            for (int path = 0; path < 2; path++) {
                tgl_cuda_operand ops[3] = {
                    {X, {path ? 1 : Cc, path ? R : 1}}, {Y, {0, 1}}, {O, {Cc, 1}}};
                memset(O, 0xff, (size_t)(R * Cc) * sizeof(double));
                if (run_prog(func(m, "f_expmul"), &S, ops, 3, &err))
                    fail_msg("f_expmul: %s", err.msg);
                for (int64_t r = 0; r < R; r++)
                    for (int64_t q = 0; q < Cc; q++) {
                        double xv = path ? X[q * R + r] : X[r * Cc + q];
                        double want = exp(xv) * Y[q] + 1.5;
                        if (O[r * Cc + q] != want)
                            fail_msg("f_expmul path %d [%lld,%lld] = %.17g, want %.17g", path,
                                     (long long)r, (long long)q, O[r * Cc + q], want);
                    }
            }
            D->free(X);
            D->free(Y);
            D->free(O);
        }
        /* program 1 */
        {
            static const int64_t xs[] = {7, -7, 7, -7, 5, INT64_MIN, 3, 0, -2};
            static const int64_t ys[] = {3, 3, -3, -3, 0, -1, 1, 5, 7};
            static const int64_t mods[] = {1, 2, -2, -1, 0, 0, 0, 0, 5};
            const int n = 9;
            int64_t *X = dmalloc(n * 8), *Y = dmalloc(n * 8), *O1 = dmalloc(n * 8),
                    *O2 = dmalloc(n * 8);
            memcpy(X, xs, sizeof xs);
            memcpy(Y, ys, sizeof ys);
            tgl_cuda_space S = {n, 1, {n}};
            tgl_cuda_operand ops[4] = {{X, {1}}, {Y, {1}}, {O1, {1}}, {O2, {1}}};
            if (run_prog(func(m, "f_intops"), &S, ops, 4, &err))
                fail_msg("f_intops: %s", err.msg);
            for (int i = 0; i < n; i++) {
                assert_int_equal(O1[i], mods[i]);
                assert_int_equal(O2[i], (int64_t)((uint64_t)xs[i] * (uint64_t)xs[i] *
                                                  (uint64_t)xs[i]));
            }
            D->free(X);
            D->free(Y);
            D->free(O1);
            D->free(O2);
        }
        /* program 2 */
        {
            static const float xs[] = {0.0f, 2.5f, -2.5f, 3e10f, -3e10f, NAN, INFINITY, -40.0f};
            const int n = 8;
            float *X = dmalloc(sizeof xs), *O2 = dmalloc(sizeof xs);
            int32_t *O1 = dmalloc(n * sizeof(int32_t));
            memcpy(X, xs, sizeof xs);
            tgl_cuda_space S = {n, 1, {n}};
            tgl_cuda_operand ops[3] = {{X, {1}}, {O1, {1}}, {O2, {1}}};
            if (run_prog(func(m, "f_casts"), &S, ops, 3, &err))
                fail_msg("f_casts: %s", err.msg);
            static const int32_t casts[] = {0, 2, -2, INT32_MAX, INT32_MIN, 0, INT32_MAX, -40};
            for (int i = 0; i < n; i++) {
                assert_int_equal(O1[i], casts[i]);
                float e = expf(-fabsf(xs[i]));
                float s = xs[i] >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
                float want = (s != s || s >= 0.25f) ? s : 0.25f;
                if (isnan(want))
                    assert_true(isnan(O2[i]));
                else
                    assert_true(O2[i] == want);
            }
            D->free(X);
            D->free(O1);
            D->free(O2);
        }
        /* program 3, with a negative stride on x */
        {
            const int n = 6;
            uint8_t *Cn = dmalloc(n);
            float *X = dmalloc(n * sizeof(float)), *O = dmalloc(n * sizeof(float));
            static const float xs[] = {-3, -0.5f, 0.5f, 3, 7, -7};
            for (int i = 0; i < n; i++) {
                Cn[i] = (uint8_t)(i % 2);
                X[i] = xs[i];
            }
            tgl_cuda_space S = {n, 1, {n}};
            tgl_cuda_operand ops[3] = {{Cn, {1}}, {X + n - 1, {-1}}, {O, {1}}};
            if (run_prog(func(m, "f_switch"), &S, ops, 3, &err))
                fail_msg("f_switch: %s", err.msg);
            for (int i = 0; i < n; i++) {
                float xv = xs[n - 1 - i];
                float want = i % 2 ? xv : xv < -1 ? -1 : xv > 1 ? 1 : xv;
                assert_true(O[i] == want);
            }
            D->free(Cn);
            D->free(X);
            D->free(O);
        }
    }
    set_full(false);
    D->unload(m);
}

/* The speed figure (printed, never asserted): a 256-thread kernel over
 * 1e5 elements, and a block-sum kernel over many rows. */
static void speed(void **state)
{
    (void)state;
    tgl_cuda_func *f = func(lib, "k_axpy");
    const int64_t n = 100000;
    float *x = dmalloc(n * sizeof(float)), *y = dmalloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = y[i] = 1.0f;
    struct { const float *x; float *y; float alpha; int64_t n; } args = {x, y, 2.0f, n};
    struct timespec t0, t1;
    launch_ok(f, 391, 256, 0, &args);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    for (int r = 0; r < 10; r++)
        launch_ok(f, 391, 256, 0, &args);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    double ms = 1e3 * ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    print_message("axpy, 1e5 elements, grid 391 x 256 (shrunk): %.3f ms CPU a launch\n",
                  ms / 10);
    assert_true(y[0] == 23.0f && y[n - 1] == 23.0f);
    tgl_cuda_func *g = func(lib, "k_row_sum");
    const int64_t rows = 2000, cols = 256;
    double *in = dmalloc((size_t)(rows * cols) * sizeof(double));
    double *out = dmalloc((size_t)rows * sizeof(double));
    for (int64_t i = 0; i < rows * cols; i++)
        in[i] = 1.0;
    struct { const double *in; double *out; int64_t rows, cols; } rargs = {in, out, rows, cols};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    launch_ok(g, (unsigned)rows, 256, 0, &rargs);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    ms = 1e3 * ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    print_message("row sums, 2000 rows x 256 (a block sum a row: 2 barriers and 10 shuffles "
                  "per thread): %.3f ms CPU\n",
                  ms);
    assert_true(out[0] == 256.0 && out[rows - 1] == 256.0);
    D->free(x);
    D->free(y);
    D->free(in);
    D->free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(device_and_memory),
        cmocka_unit_test(grid_loop_covers_n),
        cmocka_unit_test(geometry_shrinks_unless_full),
        cmocka_unit_test(block_sum_any_block),
        cmocka_unit_test(warp_calls),
        cmocka_unit_test(atomics_repeated_indices),
        cmocka_unit_test(dynamic_shared_memory),
        cmocka_unit_test(math_and_conversions),
        cmocka_unit_test(capture_and_replay),
        cmocka_unit_test(blas_entries),
        cmocka_unit_test(compile_error_carries_the_log),
        cmocka_unit_test(divergent_warp_is_an_error),
        cmocka_unit_test(bad_launches_are_errors),
        cmocka_unit_test(every_rendered_op_compiles),
        cmocka_unit_test(rendered_programs_run),
        cmocka_unit_test(speed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
