/*
 * vexp_isa.h — the body of vexp.c's row kernels, written once over VEXP_W
 * float lanes (GCC vector extensions) and included by vexp.c once per
 * instruction set with VEXP_W, VEXP_SFX (the name suffix) and VEXP_ATTR
 * (its target attribute) defined.  No include guard: that is the point.
 *
 * A vector is as wide as the instruction set's registers (16 lanes for
 * AVX-512, 8 for AVX2, 4 for SSE2): GCC splits a wider one through the
 * stack, lane by lane (a 16-lane body built for AVX2 ran 8 ns an element
 * on Zen 3, against 0.3 ns here).  Elements go in blocks of 16 whatever
 * the width, and the sums keep 16 double lanes, so every build adds the
 * same terms in the same order.
 */
#define VEXP_CAT2(a, b) a##_##b
#define VEXP_CAT(a, b) VEXP_CAT2(a, b)
#define VF VEXP_CAT(vexp_vf, VEXP_SFX)
#define VI VEXP_CAT(vexp_vi, VEXP_SFX)
#define FN(name) VEXP_CAT(name, VEXP_SFX)

typedef float VF __attribute__((vector_size(4 * VEXP_W)));
typedef int32_t VI __attribute__((vector_size(4 * VEXP_W)));

#define VEXP_INLINE VEXP_ATTR static inline __attribute__((always_inline))

VEXP_INLINE VF FN(splat)(float a)
{
    VF z = {0};
    return z + a;
}

VEXP_INLINE VF FN(sel)(VI mask, VF a, VF b)
{
    return (VF)((mask & (VI)a) | (~mask & (VI)b));
}

/* exp_core (vexp.c) on every lane. */
VEXP_INLINE VF FN(exp_lanes)(VF d)
{
    VI low = d < FN(splat)(-87.0f);
    VF c = FN(sel)(low, FN(splat)(-87.0f), d);
    VF t = c * 1.44269504088896341f + 12582912.0f;
    VF k = t - 12582912.0f;
    VI ki = (VI)t - 0x4B400000;
    VF r = c - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    VF r2 = r * r;
    VF p = FN(splat)(1.9875691500e-4f);
    VEXP_POLY(p, r, r2);
    VF e = p * (VF)((ki + 127) << 23);
    return FN(sel)(low, FN(splat)(0.0f), e);
}

/* The exponentials of one block of 16 elements at x, shifted by m, into
 * out (when not NULL) and added to acc's 16 double lanes. */
VEXP_INLINE void FN(exp_block)(const float *x, VF vm, float *out, double *acc)
{
    float e[16];
    for (int v = 0; v < 16; v += VEXP_W) {
        VF xv;
        memcpy(&xv, x + v, sizeof xv);
        VF ev = FN(exp_lanes)(xv - vm);
        memcpy(e + v, &ev, sizeof ev);
    }
    if (out)
        memcpy(out, e, sizeof e);
    for (int l = 0; l < 16; l++)
        acc[l] += (double)e[l];
}

/* vexp.h's tgl_vexp_shifted_f32 (out may be NULL: the sum alone) for a
 * finite m and n >= 16. */
VEXP_ATTR static double FN(vexp_rows)(const float *x, float m, float *out, int64_t n)
{
    double acc[16] = {0};
    VF vm = FN(splat)(m);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        FN(exp_block)(x + j, vm, out ? out + j : NULL, acc);
    if (j < n) {
        /* the last n - j < 16: one padded block (-inf: exp 0) */
        float pad[16], e[16];
        for (int l = 0; l < 16; l++)
            pad[l] = j + l < n ? x[j + l] : -INFINITY;
        FN(exp_block)(pad, vm, e, acc);
        if (out)
            memcpy(out + j, e, sizeof(float) * (size_t)(n - j));
    }
    double s = 0;
    for (int l = 0; l < 8; l++)
        s += acc[l] + acc[l + 8];
    return s;
}

/* vexp.h's tgl_vmax_f32 for n >= 16. */
VEXP_ATTR static float FN(vmax_rows)(const float *x, int64_t n)
{
    VF m = FN(splat)(-INFINITY);
    VI nan = {0};
    int64_t j = 0;
    for (; j + VEXP_W <= n; j += VEXP_W) {
        VF v;
        memcpy(&v, x + j, sizeof v);
        nan |= v != v;
        m = FN(sel)(v > m, v, m);
    }
    float r = -INFINITY;
    bool any_nan = false;
    for (int l = 0; l < VEXP_W; l++) {
        any_nan = any_nan || nan[l];
        r = m[l] > r ? m[l] : r;
    }
    for (; j < n; j++) {
        any_nan = any_nan || x[j] != x[j];
        r = x[j] > r ? x[j] : r;
    }
    return any_nan ? NAN : r;
}

#undef VEXP_INLINE
#undef FN
#undef VI
#undef VF
#undef VEXP_CAT
#undef VEXP_CAT2
