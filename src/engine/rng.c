/*
 * rng.c — the counter-based random generator (Philox4x32-10, Salmon et al.,
 * "Parallel random numbers: as easy as 1, 2, 3", SC 2011).
 *
 * Element i of a draw is a pure function of (seed, offset + i): the numbers
 * do not depend on the order elements are filled in, on the thread count or
 * on the machine.  Each draw advances the context's offset by its element
 * count, so consecutive draws never share counters.
 */
#include "engine/engine.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void tgl_philox4x32(uint64_t ctr, uint64_t key, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)ctr, c1 = (uint32_t)(ctr >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* A double in [0, 1) with 53 random bits from two words. */
static double unit53(uint32_t hi, uint32_t lo)
{
    uint64_t bits = ((uint64_t)hi << 21) ^ (lo >> 11);
    return (double)(bits & ((1ull << 53) - 1)) * 0x1p-53;
}

typedef enum { DRAW_UNIFORM, DRAW_NORMAL } draw_kind;

static tgl_status draw(tgl_ctx *ctx, const char *fn, draw_kind kind, int dtype, int ndim,
                       const int64_t *shape, double p0, double p1, tgl_array **out)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(dtype == TGL_FLOAT32 || dtype == TGL_FLOAT64, TGL_EDTYPE,
              "%s: dtype must be float32 or float64, got %s", fn,
              tgl_dtype_name(dtype) ? tgl_dtype_name(dtype) : "an unknown dtype");
    TGL_CHECK(isfinite(p0) && isfinite(p1), TGL_EINVAL, "%s: parameters must be finite", fn);
    TGL_CHECK(out, TGL_EINVAL, "%s: out is NULL", fn);
    if (kind == DRAW_UNIFORM) {
        TGL_CHECK(p0 < p1, TGL_EINVAL, "%s: the lower bound %g is not below the upper bound %g",
                  fn, p0, p1);
        TGL_CHECK(isfinite(p1 - p0), TGL_EINVAL,
                  "%s: the range [%g, %g) is wider than the largest double", fn, p0, p1);
        /* Otherwise every float32 drawn would equal hi. */
        TGL_CHECK(dtype != TGL_FLOAT32 || (float)p0 < (float)p1, TGL_EINVAL,
                  "%s: the bounds %.9g and %.9g round to the same float32", fn, p0, p1);
    } else {
        TGL_CHECK(p1 >= 0, TGL_EINVAL, "%s: the standard deviation %g is negative", fn, p1);
    }
    tgl_array *a = NULL;
    tgl_status st = tgl_array_alloc(ctx, fn, dtype, ndim, shape, false, &a);
    if (st)
        return st;
    const uint64_t key = ctx->rng_seed, base = ctx->rng_offset;
    for (int64_t i = 0; i < a->size; i++) {
        uint32_t w[4];
        tgl_philox4x32(base + (uint64_t)i, key, w);
        double v;
        if (kind == DRAW_UNIFORM) {
            v = p0 + (p1 - p0) * unit53(w[0], w[1]);
        } else {
            /* Box-Muller with u1 in (0, 1] so the log is finite. */
            double u1 = 1.0 - unit53(w[0], w[1]);
            double u2 = unit53(w[2], w[3]);
            v = p0 + p1 * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
        }
        if (dtype == TGL_FLOAT32) {
            float f = (float)v;
            /* Rounding to float may reach the excluded upper bound. */
            if (kind == DRAW_UNIFORM && f >= (float)p1)
                f = nextafterf((float)p1, (float)p0);
            ((float *)a->data)[i] = f;
        } else {
            ((double *)a->data)[i] = v;
        }
    }
    ctx->rng_offset = base + (uint64_t)a->size;
    *out = a;
    return TGL_OK;
}

tgl_status tgl_array_rand(tgl_ctx *ctx, int dtype, int ndim, const int64_t *shape, double lo,
                          double hi, tgl_array **out)
{
    return draw(ctx, "tgl_array_rand", DRAW_UNIFORM, dtype, ndim, shape, lo, hi, out);
}

tgl_status tgl_array_randn(tgl_ctx *ctx, int dtype, int ndim, const int64_t *shape, double mean,
                           double std, tgl_array **out)
{
    return draw(ctx, "tgl_array_randn", DRAW_NORMAL, dtype, ndim, shape, mean, std, out);
}
