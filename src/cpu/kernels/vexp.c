/*
 * vexp.c — vectorised float32 exp for the softmax family (vexp.h).
 *
 * libm's expf is one call per element (about 4 ns); the softmax and
 * crossentropy rows of a language model's output layer take thousands of
 * exponentials a step.  Here exp(d) = 2^k p(r), with k = round(d / ln 2),
 * r = d - k ln 2 (ln 2 split in two for exactness) and p Cephes' degree-7
 * polynomial for e^r on [-ln2/2, ln2/2]; 2^k is built in the exponent
 * bits.  The row kernels are written once over vectors as wide as the
 * registers (vexp_isa.h), built for AVX-512, AVX2 and the baseline, and
 * picked once, at the first call, from what the processor supports: the
 * library never assumes the machine.  Sums are kept in 16 double lanes
 * (exact enough for 10^5 terms, vectorisable without reassociating, and
 * the same order on every build).
 */
#include "cpu/kernels/vexp.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* The vector helpers below are static: no ABI to keep. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif


/* p(r) = e^r on [-ln2/2, ln2/2] (Cephes' coefficients), p holding the
 * leading one on entry; for a float or a vector of floats (vexp_isa.h). */
#define VEXP_POLY(p, r, r2)                                                  \
    do {                                                                     \
        p = p * r + 1.3981999507e-3f;                                        \
        p = p * r + 8.3334519073e-3f;                                        \
        p = p * r + 4.1665795894e-2f;                                        \
        p = p * r + 1.6666665459e-1f;                                        \
        p = p * r + 5.0000001201e-1f;                                        \
        p = p * r2 + r + 1.0f;                                               \
    } while (0)

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
    VEXP_POLY(p, r, r2);
    int32_t bits = (ki + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float e = p * scale;
    /* NaN has gone through every step above and is still NaN */
    return d < -87.0f ? 0.0f : e;
}

/* The kernels per instruction set (vexp_isa.h). */
#define VEXP_W 4
#define VEXP_SFX base
#define VEXP_ATTR
#include "cpu/kernels/vexp_isa.h"
#undef VEXP_W
#undef VEXP_SFX
#undef VEXP_ATTR

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define VEXP_X86 1
#define VEXP_W 8
#define VEXP_SFX avx2
#define VEXP_ATTR __attribute__((target("avx2")))
#include "cpu/kernels/vexp_isa.h"
#undef VEXP_W
#undef VEXP_SFX
#undef VEXP_ATTR
#define VEXP_W 16
#define VEXP_SFX avx512
#define VEXP_ATTR __attribute__((target("avx512f")))
#include "cpu/kernels/vexp_isa.h"
#undef VEXP_W
#undef VEXP_SFX
#undef VEXP_ATTR
#endif

typedef double (*rows_fn)(const float *, float, float *, int64_t);
typedef float (*max_fn)(const float *, int64_t);

typedef struct isa_build {
    const char *name;
    rows_fn rows;
    max_fn max;
} isa_build;

static const isa_build builds[] = {
#ifdef VEXP_X86
    {"avx512f", vexp_rows_avx512, vmax_rows_avx512},
    {"avx2", vexp_rows_avx2, vmax_rows_avx2},
#endif
    {"base", vexp_rows_base, vmax_rows_base},
};
enum { NBUILDS = sizeof builds / sizeof builds[0] };

static bool runs_here(const isa_build *b)
{
#ifdef VEXP_X86
    __builtin_cpu_init();
    if (strcmp(b->name, "avx512f") == 0)
        return __builtin_cpu_supports("avx512f");
    if (strcmp(b->name, "avx2") == 0)
        return __builtin_cpu_supports("avx2");
#endif
    (void)b;
    return true;
}

/* The build in use: the widest this processor runs, chosen at the first
 * call (threads racing there store the same pointer). */
static const isa_build *in_use;

static const isa_build *pick(void)
{
    const isa_build *b = __atomic_load_n(&in_use, __ATOMIC_ACQUIRE);
    if (b)
        return b;
    for (int i = 0; i < NBUILDS && !b; i++)
        if (runs_here(&builds[i]))
            b = &builds[i];
    __atomic_store_n(&in_use, b, __ATOMIC_RELEASE);
    return b;
}

const char *tgl_vexp_isa(void)
{
    return pick()->name;
}

bool tgl_vexp_use(const char *isa)
{
    for (int i = 0; i < NBUILDS; i++)
        if (strcmp(builds[i].name, isa) == 0 && runs_here(&builds[i])) {
            __atomic_store_n(&in_use, &builds[i], __ATOMIC_RELEASE);
            return true;
        }
    return false;
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

double tgl_vexp_shifted_f32(const float *x, float m, float *out, int64_t n)
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
    return pick()->rows(x, m, out, n);
}

double tgl_vexp_sum_f32(const float *x, float m, int64_t n)
{
    if (!isfinite(m))
        return shifted_inf(x, m, NULL, n);
    if (n < 16) {
        double sum = 0;
        for (int64_t j = 0; j < n; j++)
            sum += exp_core(x[j] - m);
        return sum;
    }
    return pick()->rows(x, m, NULL, n);
}

float tgl_vmax_f32(const float *x, int64_t n)
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
    return pick()->max(x, n);
}
