/*
 * classxent.c — the CPU kernels of class_xent and class_xent_delta
 * (engine/ops/classxent.c, which defines the two ops): the integer
 * inputs validated and indexed once, then per row both softmaxes in
 * double, over the class weights and over the row's own word rows.
 */
#include "cpu/kernels/kernels.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

static int64_t ld_int(const tgl_array *a, int64_t i)
{
    int64_t off = i * a->strides[0];
    return a->dtype_id == TGL_INT32 ? ((const int32_t *)a->data)[off]
                                    : ((const int64_t *)a->data)[off];
}

/* The validated integer inputs, 0-based, and each row's word rows listed
 * together: rows of t are list[first[t] .. first[t+1]-1]. */
typedef struct cx_index {
    int64_t T, C, K;
    int64_t *cls, *tgt, *first, *list;
} cx_index;

static void cx_index_free(cx_index *ix)
{
    free(ix->cls);
    ix->cls = ix->tgt = ix->first = ix->list = NULL;
}

static tgl_status cx_index_build(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                                 cx_index *ix)
{
    int64_t T = in[0]->shape[0], C = in[1]->shape[0], K = in[2]->shape[0];
    ix->T = T, ix->C = C, ix->K = K;
    ix->cls = malloc(sizeof(int64_t) * (size_t)(3 * T + 1 + K + 1));
    if (!ix->cls)
        return tgl_op_error(ctx, n, in, TGL_ENOMEM, "out of memory");
    ix->tgt = ix->cls + T;
    ix->first = ix->tgt + T;
    ix->list = ix->first + T + 1;
    for (int64_t t = 0; t <= T; t++)
        ix->first[t] = 0;
    for (int64_t j = 0; j < K; j++) {
        int64_t o = ld_int(in[5], j);
        if (o < 1 || o > T) {
            cx_index_free(ix);
            return tgl_op_error(ctx, n, in, TGL_EINVAL,
                                "owner %" PRId64 " of word row %" PRId64 " is not in 1..%" PRId64,
                                o, j + 1, T);
        }
        ix->first[o]++;
    }
    for (int64_t t = 0; t < T; t++)
        ix->first[t + 1] += ix->first[t];
    /* first[t] is now where row t's list starts; cur[t] walks it (in
     * the cls slots, filled below). */
    int64_t *cur = ix->cls;
    for (int64_t t = 0; t < T; t++)
        cur[t] = ix->first[t];
    for (int64_t j = 0; j < K; j++)
        ix->list[cur[ld_int(in[5], j) - 1]++] = j;
    for (int64_t t = 0; t < T; t++) {
        int64_t c = ld_int(in[3], t), w = ld_int(in[4], t);
        if (c < 1 || c > C || w < 1 || w > K || ld_int(in[5], w - 1) != t + 1) {
            cx_index_free(ix);
            if (c < 1 || c > C)
                return tgl_op_error(ctx, n, in, TGL_EINVAL,
                                    "class %" PRId64 " of row %" PRId64 " is not in 1..%" PRId64,
                                    c, t + 1, C);
            if (w < 1 || w > K)
                return tgl_op_error(ctx, n, in, TGL_EINVAL,
                                    "target %" PRId64 " of row %" PRId64 " is not in 1..%" PRId64,
                                    w, t + 1, K);
            return tgl_op_error(ctx, n, in, TGL_EINVAL,
                                "target %" PRId64 " of row %" PRId64
                                " is a word row owned by row %" PRId64 ", not by row %" PRId64,
                                w, t + 1, ld_int(in[5], w - 1), t + 1);
        }
        ix->cls[t] = c - 1;
        ix->tgt[t] = w - 1;
    }
    return TGL_OK;
}

/* mode 0: loss into out; 1: class deltas; 2: hidden (word part) and word
 * rows (the parts 0 and 1 of class_xent_delta, plus one).
 * z is scratch for max(C, K) doubles. */
#define CX_KERNEL(T_)                                                                   \
    static double dot_##T_(const T_ *a, int64_t as, const T_ *b, int64_t bs, int64_t n) \
    {                                                                                   \
        double s = 0;                                                                   \
        if (as == 1 && bs == 1) {                                                       \
            /* eight partial sums: the compiler vectorises them */                      \
            T_ acc[8] = {0};                                                            \
            int64_t k = 0;                                                              \
            for (; k + 8 <= n; k += 8)                                                  \
                for (int l = 0; l < 8; l++)                                             \
                    acc[l] += a[k + l] * b[k + l];                                      \
            for (; k < n; k++)                                                          \
                acc[0] += a[k] * b[k];                                                  \
            return ((double)acc[0] + acc[1] + acc[2] + acc[3]) +                        \
                   ((double)acc[4] + acc[5] + acc[6] + acc[7]);                         \
        }                                                                               \
        for (int64_t k = 0; k < n; k++)                                                 \
            s += (double)a[k * as] * b[k * bs];                                         \
        return s;                                                                       \
    }                                                                                   \
    static void run_##T_(int mode, const cx_index *ix, tgl_array *const *in, tgl_array *out, \
                         double *z)                                                     \
    {                                                                                   \
        const tgl_array *h = in[0], *wc = in[1], *ws = in[2];                           \
        int64_t H = h->shape[1];                                                        \
        const T_ *hd = h->data, *wcd = wc->data, *wsd = ws->data;                       \
        T_ *o = out->data;                                                              \
        if (mode == 2)                                                                  \
            for (int64_t j = 0; j < (ix->T + ix->K) * H; j++)                           \
                o[j] = 0;                                                               \
        for (int64_t t = 0; t < ix->T; t++) {                                           \
            const T_ *ht = hd + t * h->strides[0];                                      \
            double loss = 0;                                                            \
            if (mode <= 1) {                                                            \
                double m = -INFINITY, s = 0;                                            \
                for (int64_t c = 0; c < ix->C; c++) {                                   \
                    z[c] = dot_##T_(wcd + c * wc->strides[0], wc->strides[1], ht,       \
                                    h->strides[1], H);                                  \
                    if (z[c] > m || z[c] != z[c])                                       \
                        m = z[c];                                                       \
                }                                                                       \
                double zc = z[ix->cls[t]];                                              \
                for (int64_t c = 0; c < ix->C; c++)                                     \
                    s += z[c] = exp(z[c] - m);                                          \
                if (mode == 0)                                                          \
                    loss += m + log(s) - zc;                                            \
                else                                                                    \
                    for (int64_t c = 0; c < ix->C; c++)                                 \
                        o[t * ix->C + c] =                                              \
                            (T_)(z[c] / s - (c == ix->cls[t] ? 1.0 : 0.0));             \
            }                                                                           \
            if (mode != 1) {                                                            \
                const int64_t *rows = ix->list + ix->first[t];                          \
                int64_t nr = ix->first[t + 1] - ix->first[t];                           \
                double m = -INFINITY, s = 0, zt = 0;                                    \
                for (int64_t r = 0; r < nr; r++) {                                      \
                    z[r] = dot_##T_(wsd + rows[r] * ws->strides[0], ws->strides[1], ht, \
                                    h->strides[1], H);                                  \
                    if (z[r] > m || z[r] != z[r])                                       \
                        m = z[r];                                                       \
                    if (rows[r] == ix->tgt[t])                                          \
                        zt = z[r];                                                      \
                }                                                                       \
                for (int64_t r = 0; r < nr; r++)                                        \
                    s += z[r] = exp(z[r] - m);                                          \
                if (mode == 0)                                                          \
                    loss += m + log(s) - zt;                                            \
                if (mode == 2) {                                                        \
                    T_ *ot = o + t * H;                                                 \
                    int64_t wk = ws->strides[1], hk = h->strides[1];                    \
                    for (int64_t r = 0; r < nr; r++) {                                  \
                        T_ d = (T_)(z[r] / s - (rows[r] == ix->tgt[t]));                \
                        const T_ *w = wsd + rows[r] * ws->strides[0];                   \
                        T_ *orow = o + (ix->T + rows[r]) * H;                           \
                        for (int64_t k = 0; k < H; k++) {                               \
                            ot[k] += d * w[k * wk];                                     \
                            orow[k] += d * ht[k * hk];                                  \
                        }                                                               \
                    }                                                                   \
                }                                                                       \
            }                                                                           \
            if (mode == 0)                                                              \
                o[t] = (T_)loss;                                                        \
        }                                                                               \
    }

CX_KERNEL(float)
CX_KERNEL(double)

static tgl_status cx_run(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, tgl_array *out,
                         int mode)
{
    cx_index ix;
    tgl_status st = cx_index_build(ctx, n, in, &ix);
    if (st)
        return st;
    int64_t zn = ix.C > ix.K ? ix.C : ix.K;
    double *z = malloc(sizeof *z * (size_t)(zn + 1));
    if (!z) {
        cx_index_free(&ix);
        return tgl_op_error(ctx, n, in, TGL_ENOMEM, "out of memory");
    }
    if (in[0]->dtype_id == TGL_FLOAT32)
        run_float(mode, &ix, in, out, z);
    else
        run_double(mode, &ix, in, out, z);
    free(z);
    cx_index_free(&ix);
    return TGL_OK;
}

static tgl_status cx_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, tgl_array *out)
{
    return cx_run(ctx, n, in, out, 0);
}

static tgl_status delta_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                               tgl_array *out)
{
    return cx_run(ctx, n, in, out, 1 + (int)n->p.i[0]);
}

const tgl_op_kernel tgl_cpu_kernel_class_xent = {.run = cx_kernel};
const tgl_op_kernel tgl_cpu_kernel_class_xent_delta = {.run = delta_kernel};
