/*
 * vexp.h — vectorised float32 exponentials for the softmax family's rows
 * (nnet.c): exp(x - m) over a contiguous row, with the row's sum.
 */
#ifndef TGL_CPU_VEXP_H
#define TGL_CPU_VEXP_H

#include <stdbool.h>
#include <stdint.h>

/* out[j] = exp(x[j] - m) for j < n (1 where x[j] == m, so an infinite max
 * gives no NaN; NaN stays NaN); returns the sum of out[0..n) in double.
 * out may be x.  Within 2 ulp of expf; results below 2^-126 are 0. */
double tgl_vexp_shifted_f32(const float *x, float m, float *out, int64_t n);
/* The same sum, storing nothing. */
double tgl_vexp_sum_f32(const float *x, float m, int64_t n);

/* The largest of x[0..n), NaN when any is NaN, -inf for n == 0. */
float tgl_vmax_f32(const float *x, int64_t n);

/* The instruction set the row kernels run on: "avx512f", "avx2" or "base"
 * (the widest this processor supports, chosen at the first call). */
const char *tgl_vexp_isa(void);
/* Makes the row kernels run on `isa` (a name above) from now on, for the
 * tests that compare the builds; false, changing nothing, when this
 * processor or build cannot. */
bool tgl_vexp_use(const char *isa);

#endif /* TGL_CPU_VEXP_H */
