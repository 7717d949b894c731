/*
 * classxent.c — the CPU kernels of class_xent, class_xent_delta and
 * class_xent_sgd (engine/ops/classxent.c, which defines the three ops):
 * the integer inputs validated and indexed once, then per row both
 * softmaxes in double, over the class weights and over the row's own word
 * rows.  class_xent_sgd reads the word matrix in place through its row
 * ids and keeps working copies of the class weights and of each distinct
 * word row its block touches (the words update them one after another),
 * so a row named by several words is updated once per word, in order,
 * exactly as RNNLM's learnNet does.
 */
#include "cpu/kernels/kernels.h"
#include "cpu/kernels/vexp.h"

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
    /* K from the owners: class_xent's word rows, class_xent_sgd's row ids */
    int64_t T = in[0]->shape[0], C = in[1]->shape[0], K = in[5]->shape[0];
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

/* class_xent_sgd.  The block's words run one after another over working
 * copies: Wc transposed (H, C) in scratch (ct), the distinct word rows in
 * the output's last K rows (copy u in row u, U <= K).  wrow[j] is the copy
 * of the j-th word row, src[u] its row of Ww, firstj[u] the first j naming
 * it.  Per word: h[t] copied contiguous; the class logits over ct (inner
 * loops over the C classes, unit stride); their exponentials (the
 * vectorised vexp in float32); per hidden unit one pass over the classes
 * that adds their part of the hidden error and moves each weight to
 * w keep - lr d h (w read once); then the same per word row.  In the
 * rows' own precision; the changes go to the output at the end.  Built for AVX-512, AVX2 and the baseline, picked
 * at load time, as vexp.c is (the library never assumes the machine). */
/* Not under ThreadSanitizer: the clones' resolvers (ifuncs) run while
 * the loader relocates the library, before TSan's runtime is set up,
 * and its instrumentation of them crashes the process at load. */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__has_attribute) && \
    !defined(__SANITIZE_THREAD__)
#if __has_attribute(target_clones)
#define SGD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef SGD_CLONES
#define SGD_CLONES
#endif

static inline double exprow_float(float *z, double m, int64_t n)
{
    return tgl_vexp_shifted_f32(z, (float)m, z, n);
}

static inline double exprow_double(double *z, double m, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += z[i] = exp(z[i] - m);
    return s;
}

#define SGD_KERNEL(T_)                                                                  \
    static inline double sdot_##T_(const T_ *restrict a, const T_ *restrict b, int64_t n) \
    {                                                                                   \
        T_ acc[8] = {0};                                                                \
        int64_t k = 0;                                                                  \
        for (; k + 8 <= n; k += 8)                                                      \
            for (int l = 0; l < 8; l++)                                                 \
                acc[l] += a[k + l] * b[k + l];                                          \
        for (; k < n; k++)                                                              \
            acc[0] += a[k] * b[k];                                                      \
        return ((double)acc[0] + acc[1] + acc[2] + acc[3]) +                            \
               ((double)acc[4] + acc[5] + acc[6] + acc[7]);                             \
    }                                                                                   \
    /* dst = src (sign 0) or dst -= src (sign 1), src with stride ks; the  \
     * unit-stride case vectorises */                                                   \
    static inline void rowop_##T_(T_ *restrict dst, const T_ *restrict src, int64_t ks,  \
                                  int64_t H, int sub)                                    \
    {                                                                                   \
        if (ks == 1) {                                                                  \
            if (sub)                                                                    \
                for (int64_t k = 0; k < H; k++)                                         \
                    dst[k] -= src[k];                                                   \
            else                                                                        \
                for (int64_t k = 0; k < H; k++)                                         \
                    dst[k] = src[k];                                                    \
        } else {                                                                        \
            for (int64_t k = 0; k < H; k++)                                             \
                dst[k] = sub ? dst[k] - src[k * ks] : src[k * ks];                      \
        }                                                                               \
    }                                                                                   \
    static inline void step_##T_(T_ *restrict w, T_ *restrict eh, const T_ *restrict h, \
                                 T_ d, T_ keep, T_ b, int64_t H)                         \
    {                                                                                   \
        if (keep == 1)                                                                  \
            for (int64_t k = 0; k < H; k++) {                                           \
                T_ wk = w[k];                                                           \
                eh[k] += d * wk;                                                        \
                w[k] = wk - b * h[k];                                                   \
            }                                                                           \
        else                                                                            \
            for (int64_t k = 0; k < H; k++) {                                           \
                T_ wk = w[k];                                                           \
                eh[k] += d * wk;                                                        \
                w[k] = wk * keep - b * h[k];                                            \
            }                                                                           \
    }                                                                                   \
    SGD_CLONES static void sgd_##T_(const cx_index *ix, tgl_array *const *in,            \
                                    tgl_array *out, const int64_t *wrow, int64_t U,      \
                                    const int64_t *src, const int64_t *firstj, T_ *z,    \
                                    T_ *eh, T_ *hb, T_ *ct, T_ *dc, T_ *bc)              \
    {                                                                                   \
        const tgl_array *h = in[0], *wc = in[1], *ww = in[2], *beta = in[8];            \
        int64_t T = ix->T, C = ix->C, K = ix->K, H = h->shape[1], W1 = H + 1;           \
        double lr = (double)*(const T_ *)in[7]->data;                                    \
        const T_ *hd = h->data, *wcd = wc->data, *wwd = ww->data, *bd = beta->data;     \
        T_ *o = out->data;                                                              \
        T_ *cw = o + T * W1, *rw = o + (T + C) * W1;                                    \
        /* the class weights transposed, (H, C): the class part runs over   \
         * the C classes in the inner loops (long, unit-stride) */                      \
        for (int64_t c = 0; c < C; c++)                                                 \
            for (int64_t k = 0; k < H; k++)                                             \
                ct[k * C + c] = wcd[c * wc->strides[0] + k * wc->strides[1]];           \
        for (int64_t u = 0; u < U; u++)                                                 \
            rowop_##T_(rw + u * W1, wwd + src[u] * ww->strides[0], ww->strides[1], H, 0); \
        for (int64_t t = 0; t < T; t++) {                                               \
            rowop_##T_(hb, hd + t * h->strides[0], h->strides[1], H, 0);                \
            double m = -INFINITY, s, loss;                                              \
            for (int64_t c = 0; c < C; c++)                                             \
                z[c] = 0;                                                               \
            for (int64_t k = 0; k < H; k++) {                                           \
                const T_ *restrict r = ct + k * C;                                      \
                T_ hk = hb[k];                                                          \
                for (int64_t c = 0; c < C; c++)                                         \
                    z[c] += r[c] * hk;                                                  \
            }                                                                           \
            for (int64_t c = 0; c < C; c++)                                             \
                if (z[c] > m || z[c] != z[c])                                           \
                    m = z[c];                                                           \
            loss = m - (double)z[ix->cls[t]];                                           \
            s = exprow_##T_(z, m, C);                                                   \
            loss += log(s);                                                             \
            T_ keep = (T_)(1 - lr * (double)bd[t * beta->strides[0]]);                  \
            for (int64_t c = 0; c < C; c++) {                                           \
                double d = z[c] / s - (c == ix->cls[t]);                                \
                dc[c] = (T_)d;                                                          \
                bc[c] = (T_)(lr * d);                                                   \
            }                                                                           \
            /* per hidden unit k: its error from the class rows (eight lanes, \
             * vectorised without reassociating), then the rows' step */    \
            for (int64_t k = 0; k < H; k++) {                                           \
                T_ *restrict r = ct + k * C;                                            \
                T_ hk = hb[k], acc[8] = {0};                                            \
                int64_t c = 0;                                                          \
                for (; c + 8 <= C; c += 8)                                              \
                    for (int l = 0; l < 8; l++) {                                       \
                        T_ w = r[c + l];                                                \
                        acc[l] += dc[c + l] * w;                                        \
                        r[c + l] = w * keep - bc[c + l] * hk;                           \
                    }                                                                   \
                for (; c < C; c++) {                                                    \
                    T_ w = r[c];                                                        \
                    acc[0] += dc[c] * w;                                                \
                    r[c] = w * keep - bc[c] * hk;                                       \
                }                                                                       \
                eh[k] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +                       \
                        ((acc[4] + acc[5]) + (acc[6] + acc[7]));                        \
            }                                                                           \
            const int64_t *rows = ix->list + ix->first[t];                              \
            int64_t nr = ix->first[t + 1] - ix->first[t];                               \
            double zt = 0;                                                              \
            m = -INFINITY;                                                              \
            for (int64_t r = 0; r < nr; r++) {                                          \
                double v = sdot_##T_(rw + wrow[rows[r]] * W1, hb, H);              \
                z[r] = (T_)v;                                                           \
                if (v > m || v != v)                                                    \
                    m = v;                                                              \
                if (rows[r] == ix->tgt[t])                                              \
                    zt = z[r];                                                          \
            }                                                                           \
            s = exprow_##T_(z, m, nr);                                                  \
            loss += m + log(s) - zt;                                                    \
            for (int64_t r = 0; r < nr; r++) {                                          \
                double d = z[r] / s - (rows[r] == ix->tgt[t]);                          \
                step_##T_(rw + wrow[rows[r]] * W1, eh, hb, (T_)d, keep, (T_)(lr * d), H); \
            }                                                                           \
            T_ *ot = o + t * W1;                                                        \
            for (int64_t k = 0; k < H; k++)                                             \
                ot[k] = eh[k];                                                          \
            ot[H] = (T_)loss;                                                           \
        }                                                                               \
        /* working copies -> changes: Wc's rows, then the word rows moved  \
         * from copy order to the first j naming each row (copy u sits at  \
         * row u <= firstj[u], both increasing in u: moved from the last   \
         * copy back, none is overwritten before it moves), 0 elsewhere */  \
        for (int64_t c = 0; c < C; c++) {                                               \
            for (int64_t k = 0; k < H; k++)                                             \
                cw[c * W1 + k] = ct[k * C + c] - wcd[c * wc->strides[0] + k * wc->strides[1]]; \
            cw[c * W1 + H] = 0;                                                         \
        }                                                                               \
        for (int64_t u = 0; u < U; u++)                                                 \
            rowop_##T_(rw + u * W1, wwd + src[u] * ww->strides[0], ww->strides[1], H, 1); \
        for (int64_t u = U - 1; u >= 0; u--)                                            \
            if (firstj[u] != u)                                                         \
                for (int64_t k = 0; k < H; k++)                                         \
                    rw[firstj[u] * W1 + k] = rw[u * W1 + k];                            \
        for (int64_t j = 0; j < K; j++) {                                               \
            if (firstj[wrow[j]] != j)                                                   \
                for (int64_t k = 0; k < H; k++)                                         \
                    rw[j * W1 + k] = 0;                                                 \
            rw[j * W1 + H] = 0;                                                         \
        }                                                                               \
    }

SGD_KERNEL(float)
SGD_KERNEL(double)

static tgl_status sgd_kernel(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                             tgl_array *out)
{
    cx_index ix;
    tgl_status st = cx_index_build(ctx, n, in, &ix);
    if (st)
        return st;
    int64_t V = in[2]->shape[0], K = ix.K, H = in[0]->shape[1];
    int64_t zn = ix.C > K ? ix.C : K;
    /* The distinct rows by an open-addressing table of 2^b >= 2K slots
     * (key: row + 1, 0 empty), O(K) rather than O(V) memory.
     * wrow, src, firstj: K each; z: zn doubles; eh, hb: H doubles. */
    int64_t hn = 16;
    while (hn < 2 * K)
        hn *= 2;
    int64_t *wrow = malloc(sizeof(int64_t) * (size_t)(3 * K + 2 * hn + 1));
    int64_t C = ix.C;
    /* z: zn; eh, hb: H; ct: H * C; dc, bc: C (doubles, enough for either type) */
    double *z = malloc(sizeof(double) * (size_t)(zn + 2 * H + H * C + 2 * C + 1));
    if (!wrow || !z) {
        free(wrow), free(z);
        cx_index_free(&ix);
        return tgl_op_error(ctx, n, in, TGL_ENOMEM, "out of memory");
    }
    int64_t *src = wrow + K, *firstj = src + K, *hkey = firstj + K, *hval = hkey + hn, U = 0;
    for (int64_t i = 0; i < hn; i++)
        hkey[i] = 0;
    for (int64_t j = 0; j < K; j++) {
        int64_t v = ld_int(in[6], j);
        if (v < 1 || v > V) {
            free(wrow), free(z);
            cx_index_free(&ix);
            return tgl_op_error(ctx, n, in, TGL_EINVAL,
                                "row %" PRId64 " of the word rows is %" PRId64
                                ", not a row of the word matrix (1..%" PRId64 ")",
                                j + 1, v, V);
        }
        uint64_t i = ((uint64_t)v * 0x9E3779B97F4A7C15u) >> 20;
        for (i &= (uint64_t)hn - 1; hkey[i] && hkey[i] != v; i = (i + 1) & ((uint64_t)hn - 1))
            ;
        if (!hkey[i]) {
            hkey[i] = v;
            hval[i] = U;
            src[U] = v - 1;
            firstj[U++] = j;
        }
        wrow[j] = hval[i];
    }
    if (in[0]->dtype_id == TGL_FLOAT32)
        sgd_float(&ix, in, out, wrow, U, src, firstj, (float *)z, (float *)(z + zn),
                  (float *)(z + zn + H), (float *)(z + zn + 2 * H),
                  (float *)(z + zn + 2 * H + H * C), (float *)(z + zn + 2 * H + H * C + C));
    else
        sgd_double(&ix, in, out, wrow, U, src, firstj, z, z + zn, z + zn + H, z + zn + 2 * H,
                   z + zn + 2 * H + H * C, z + zn + 2 * H + H * C + C);
    free(wrow), free(z);
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
const tgl_op_kernel tgl_cpu_kernel_class_xent_sgd = {.run = sgd_kernel};
