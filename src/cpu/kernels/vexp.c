/*
 * vexp.c — vectorised float32 exp for the softmax family (vexp.h).
 *
 * libm's expf is one call per element (about 4 ns); the softmax and
 * crossentropy rows of a language model's output layer take thousands of
 * exponentials a step.  Here exp(d) = 2^k p(r), with k = round(d / ln 2),
 * r = d - k ln 2 (ln 2 split in two for exactness) and p Cephes' degree-7
 * polynomial for e^r on [-ln2/2, ln2/2]; 2^k is built in the exponent
 * bits.  Plain branch-free loops that the compiler vectorises, built for
 * AVX-512, AVX2 and the baseline and picked at load time (target_clones):
 * the library never assumes the machine.  Sums are kept in 8 double lanes
 * (exact enough for 10^5 terms, and vectorisable without reassociating).
 */
#include "cpu/kernels/vexp.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* The vector helpers below are static: no ABI to keep. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#if defined(__GNUC__) && defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define VEXP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef VEXP_CLONES
#define VEXP_CLONES
#endif

static inline float exp_core(float d)
{
    const float log2e = 1.44269504088896341f, ln2_hi = 0.693359375f,
                ln2_lo = -2.12194440e-4f, shifter = 12582912.0f; /* 1.5 * 2^23 */
    /* d <= 0 here except for NaN (rows are shifted by their max); clamp so
     * that 2^k stays a normal float, and flush what is below to 0. */
    float c = d < -87.0f ? -87.0f : d;
    float t = c * log2e + shifter;
    float k = t - shifter;
    int32_t ki;
    memcpy(&ki, &t, sizeof ki);
    ki -= 0x4B400000; /* the integer k from the shifter's mantissa */
    float r = c - k * ln2_hi;
    r = r - k * ln2_lo;
    float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    int32_t bits = (ki + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float e = p * scale;
    /* NaN has gone through every step above and is still NaN */
    return d < -87.0f ? 0.0f : e;
}

/* The same on 16 lanes at once (GCC vector extensions: one AVX-512
 * register, two AVX2 ones or four SSE ones, by the clone). */
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef double v8d __attribute__((vector_size(64)));

static inline __attribute__((always_inline)) v16f vsplat(float a)
{
    return (v16f){a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a};
}

static inline __attribute__((always_inline)) v16f vselect(v16i mask, v16f a, v16f b)
{
    return (v16f)((mask & (v16i)a) | (~mask & (v16i)b));
}

static inline __attribute__((always_inline)) v16f exp_lanes(v16f d)
{
    v16i low = d < vsplat(-87.0f);
    v16f c = vselect(low, vsplat(-87.0f), d);
    v16f t = c * vsplat(1.44269504088896341f) + vsplat(12582912.0f);
    v16f k = t - vsplat(12582912.0f);
    v16i ki = (v16i)t - 0x4B400000;
    v16f r = c - k * vsplat(0.693359375f);
    r = r - k * vsplat(-2.12194440e-4f);
    v16f r2 = r * r;
    v16f p = vsplat(1.9875691500e-4f);
    p = p * r + vsplat(1.3981999507e-3f);
    p = p * r + vsplat(8.3334519073e-3f);
    p = p * r + vsplat(4.1665795894e-2f);
    p = p * r + vsplat(1.6666665459e-1f);
    p = p * r + vsplat(5.0000001201e-1f);
    p = p * r2 + r + vsplat(1.0f);
    v16f e = p * (v16f)((ki + 127) << 23);
    return vselect(low, vsplat(0.0f), e);
}

/* acc += the 16 lanes of e, in double */
static inline __attribute__((always_inline)) void add_lanes(v8d *lo, v8d *hi, v16f e)
{
    v8f a = __builtin_shufflevector(e, e, 0, 1, 2, 3, 4, 5, 6, 7);
    v8f b = __builtin_shufflevector(e, e, 8, 9, 10, 11, 12, 13, 14, 15);
    *lo += __builtin_convertvector(a, v8d);
    *hi += __builtin_convertvector(b, v8d);
}

static double lanes_sum(v8d lo, v8d hi)
{
    double s = 0;
    for (int l = 0; l < 8; l++)
        s += lo[l] + hi[l];
    return s;
}

/* A row whose max is infinite: x == m counts as d = 0 (exp 1), so that
 * inf - inf gives no NaN.  Rare; scalar. */
static double shifted_inf(const float *x, float m, float *out, int64_t n)
{
    double sum = 0;
    for (int64_t j = 0; j < n; j++) {
        float v = x[j], e = v == m ? 1.0f : exp_core(v - m);
        if (out)
            out[j] = e;
        sum += e;
    }
    return sum;
}

VEXP_CLONES double tgl_vexp_shifted_f32(const float *x, float m, float *out, int64_t n)
{
    if (!isfinite(m))
        return shifted_inf(x, m, out, n);
    if (n < 16) {
        /* a short row (10 classes): no vector setup */
        double sum = 0;
        for (int64_t j = 0; j < n; j++) {
            float e = exp_core(x[j] - m);
            out[j] = e;
            sum += e;
        }
        return sum;
    }
    v8d lo = {0}, hi = {0};
    v16f vm = vsplat(m);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        v16f v;
        memcpy(&v, x + j, sizeof v);
        v16f e = exp_lanes(v - vm);
        memcpy(out + j, &e, sizeof e);
        add_lanes(&lo, &hi, e);
    }
    if (j < n) {
        /* the last n - j < 16: one padded vector (-inf: exp 0) */
        v16f v = vsplat(-INFINITY);
        memcpy(&v, x + j, sizeof(float) * (size_t)(n - j));
        v16f e = exp_lanes(v - vm);
        memcpy(out + j, &e, sizeof(float) * (size_t)(n - j));
        add_lanes(&lo, &hi, e);
    }
    return lanes_sum(lo, hi);
}

VEXP_CLONES double tgl_vexp_sum_f32(const float *x, float m, int64_t n)
{
    if (!isfinite(m))
        return shifted_inf(x, m, NULL, n);
    if (n < 16) {
        double sum = 0;
        for (int64_t j = 0; j < n; j++)
            sum += exp_core(x[j] - m);
        return sum;
    }
    v8d lo = {0}, hi = {0};
    v16f vm = vsplat(m);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        v16f v;
        memcpy(&v, x + j, sizeof v);
        add_lanes(&lo, &hi, exp_lanes(v - vm));
    }
    if (j < n) {
        v16f v = vsplat(-INFINITY);
        memcpy(&v, x + j, sizeof(float) * (size_t)(n - j));
        add_lanes(&lo, &hi, exp_lanes(v - vm));
    }
    return lanes_sum(lo, hi);
}

VEXP_CLONES float tgl_vmax_f32(const float *x, int64_t n)
{
    if (n < 16) {
        float r = -INFINITY;
        bool any_nan = false;
        for (int64_t j = 0; j < n; j++) {
            any_nan = any_nan || x[j] != x[j];
            r = x[j] > r ? x[j] : r;
        }
        return any_nan ? NAN : r;
    }
    v16f m = vsplat(-INFINITY);
    v16i nan = {0};
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        v16f v;
        memcpy(&v, x + j, sizeof v);
        nan |= v != v;
        m = vselect(v > m, v, m);
    }
    if (j < n) {
        v16f v = vsplat(-INFINITY);
        memcpy(&v, x + j, sizeof(float) * (size_t)(n - j));
        nan |= v != v;
        m = vselect(v > m, v, m);
    }
    float r = -INFINITY;
    bool any_nan = false;
    for (int l = 0; l < 16; l++) {
        any_nan = any_nan || nan[l];
        r = m[l] > r ? m[l] : r;
    }
    return any_nan ? NAN : r;
}
