/*
 * nnet.cu — the CUDA kernels of the neural-network family (the host side
 * is src/cuda/k_nnet.c; what each op computes is engine/ops/nnet.c,
 * classxent.c and batch_norm.c; the CPU kernels in src/cpu/kernels are
 * the reference these follow step for step): softmax and log_softmax
 * along one axis, softmax_crossentropy and its gradient, the class-
 * factored crossentropy of RNNLM and its deltas, and batch normalisation
 * (statistics, normalise, the training gradient).
 *
 * Accumulation as on the CPU: exponentials in the data's precision
 * (expf for float32), every sum in double, rows shifted by their maximum
 * (NaN wins the maximum, and an element equal to an infinite maximum
 * counts as shift 0).  Rows are shared out to teams (nnet.cuh): one
 * thread, one warp or one block per row, rows strided by the number of
 * teams, so any blockDim (a multiple of 32) and any grid give the same
 * values.
 */

#define NNET_FULL 0xffffffffu

/* NVRTC has no <math.h>: the two special values from their bits where the
 * prelude does not give them. */
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif

/* The larger of a and b, NaN winning (as the CPU's `v > m || v != v`). */
static __device__ __forceinline__ double nnet_max2(double a, double b)
{
    return (b > a || b != b) ? b : a;
}

static __device__ __forceinline__ double nnet_warp_max(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = nnet_max2(v, __shfl_xor_sync(NNET_FULL, v, o));
    return v;
}

/* A whole-block maximum (every thread calls it; scratch: 32 doubles of
 * shared memory, as tgl_block_sum). */
static __device__ __forceinline__ double nnet_block_max(double v, double *scratch)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = nnet_warp_max(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    double t = lane < nwarps ? scratch[lane] : -INFINITY;
    return nnet_warp_max(t);
}

/* A team: the threads that share one row. */
struct nnet_team {
    int kind, lane, size;
    int64_t id, count;
};

static __device__ __forceinline__ nnet_team nnet_team_of(int kind)
{
    nnet_team t;
    t.kind = kind;
    if (kind == TGL_NNET_TEAM_BLOCK) {
        t.lane = threadIdx.x, t.size = blockDim.x;
        t.id = blockIdx.x, t.count = gridDim.x;
    } else if (kind == TGL_NNET_TEAM_WARP) {
        t.lane = threadIdx.x & 31, t.size = 32;
        t.id = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
        t.count = ((int64_t)gridDim.x * blockDim.x) >> 5;
    } else {
        t.lane = 0, t.size = 1;
        t.id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
        t.count = (int64_t)gridDim.x * blockDim.x;
    }
    return t;
}

static __device__ __forceinline__ double nnet_team_sum(const nnet_team &t, double v,
                                                       double *scratch)
{
    if (t.kind == TGL_NNET_TEAM_BLOCK)
        return tgl_block_sum(v, scratch);
    if (t.kind == TGL_NNET_TEAM_WARP)
        return tgl_warp_sum(v);
    return v;
}

static __device__ __forceinline__ double nnet_team_max(const nnet_team &t, double v,
                                                       double *scratch)
{
    if (t.kind == TGL_NNET_TEAM_BLOCK)
        return nnet_block_max(v, scratch);
    if (t.kind == TGL_NNET_TEAM_WARP)
        return nnet_warp_max(v);
    return v;
}

/* Exponentials in the data's precision, as the CPU kernels. */
static __device__ __forceinline__ float nnet_exp(float d) { return expf(d); }
static __device__ __forceinline__ double nnet_exp(double d) { return exp(d); }

/* ---- softmax, log_softmax ------------------------------------------------ */

template <typename T> static __device__ void nnet_softmax(const tgl_nnet_softmax_args &a)
{
    __shared__ double scratch[32];
    const nnet_team tm = nnet_team_of(a.team);
    const T *x = (const T *)a.x;
    T *out = (T *)a.out;
    const int64_t xs = a.xs, os = a.os;
    for (int64_t r = tm.id; r < a.rows; r += tm.count) {
        int64_t rem = r, xo = 0, oo = 0;
        for (int d = a.nouter - 1; d >= 0; d--) {
            int64_t i = rem % a.oshape[d];
            rem /= a.oshape[d];
            xo += i * a.oxs[d];
            oo += i * a.oos[d];
        }
        const T *xr = x + xo;
        T *orow = out + oo;
        double ml = -INFINITY;
        for (int64_t k = tm.lane; k < a.len; k += tm.size)
            ml = nnet_max2(ml, (double)xr[k * xs]);
        const T m = (T)nnet_team_max(tm, ml, scratch);
        double s = 0;
        for (int64_t k = tm.lane; k < a.len; k += tm.size) {
            T v = xr[k * xs], d = v == m ? (T)0 : v - m;
            s += (double)nnet_exp(d);
        }
        s = nnet_team_sum(tm, s, scratch);
        if (a.logsm) {
            const T ls = (T)log(s);
            for (int64_t k = tm.lane; k < a.len; k += tm.size) {
                T v = xr[k * xs], d = v == m ? (T)0 : v - m;
                orow[k * os] = d - ls;
            }
        } else {
            const T inv = (T)(1.0 / s);
            for (int64_t k = tm.lane; k < a.len; k += tm.size) {
                T v = xr[k * xs], d = v == m ? (T)0 : v - m;
                orow[k * os] = nnet_exp(d) * inv;
            }
        }
    }
}

TGL_KERNEL(nnet_softmax_f32, tgl_nnet_softmax_args) { nnet_softmax<float>(a); }
TGL_KERNEL(nnet_softmax_f64, tgl_nnet_softmax_args) { nnet_softmax<double>(a); }

/* ---- softmax_crossentropy and its gradient ------------------------------- */

template <typename T> static __device__ void nnet_xent(const tgl_nnet_xent_args &a)
{
    __shared__ double scratch[32];
    const nnet_team tm = nnet_team_of(a.team);
    const T *x = (const T *)a.x;
    T *out = (T *)a.out;
    const int64_t cols = a.cols, cs = a.xs1;
    for (int64_t r = tm.id; r < a.rows; r += tm.count) {
        int64_t lab = a.label_i64 ? ((const int64_t *)a.labels)[r * a.ls]
                                  : (int64_t)((const int32_t *)a.labels)[r * a.ls];
        const bool bad = lab < 1 || lab > cols;
        if (bad && tm.lane == 0)
            atomicMin(a.err, (long long)r);
        const T *xr = x + r * a.xs0;
        double ml = -INFINITY;
        for (int64_t k = tm.lane; k < cols; k += tm.size)
            ml = nnet_max2(ml, (double)xr[k * cs]);
        const T m = (T)nnet_team_max(tm, ml, scratch);
        double s = 0;
        for (int64_t k = tm.lane; k < cols; k += tm.size) {
            T v = xr[k * cs];
            s += v == m ? 1.0 : (double)nnet_exp((T)(v - m));
        }
        s = nnet_team_sum(tm, s, scratch);
        if (!a.dy) {
            if (tm.lane == 0)
                out[r * a.os0] =
                    bad ? (T)NAN : (T)((double)m + log(s) - (double)xr[(lab - 1) * cs]);
            continue;
        }
        /* dx = dy (e^(x - max) / sum) - dy [j == label]; out may be x:
         * every element is read by the thread that writes it, after the
         * sums (the team's reductions wait for every read). */
        const T dyv = ((const T *)a.dy)[r * a.dys];
        const T scale = (T)((double)dyv / s);
        T *orow = out + r * a.os0;
        for (int64_t k = tm.lane; k < cols; k += tm.size) {
            T v = xr[k * cs], e = v == m ? (T)1 : nnet_exp((T)(v - m)), o = e * scale;
            if (k == lab - 1)
                o -= dyv;
            orow[k * a.os1] = o;
        }
    }
}

TGL_KERNEL(nnet_xent_f32, tgl_nnet_xent_args) { nnet_xent<float>(a); }
TGL_KERNEL(nnet_xent_f64, tgl_nnet_xent_args) { nnet_xent<double>(a); }

/* ---- class_xent ---------------------------------------------------------- */

TGL_KERNEL(nnet_gather_i64, tgl_nnet_gather_args)
{
    TGL_GRID_LOOP(i, a.n)
    {
        a.dst[i] = a.i64 ? ((const int64_t *)a.src)[i * a.s]
                         : (int64_t)((const int32_t *)a.src)[i * a.s];
    }
}

/* One block per row t of h.  The logits are dot products in double, one
 * warp per class (or word row) reading the weight row and h[t] along the
 * hidden axis; the softmaxes in double as the CPU, over the class weights
 * and over the rows of the word matrix t owns (read where they are). */
template <typename T> static __device__ void nnet_cx(const tgl_nnet_cx_args &a)
{
    __shared__ double scratch[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const T *h = (const T *)a.h, *wc = (const T *)a.wc, *ws = (const T *)a.ws;
    T *out = (T *)a.out;
    const int64_t H = a.H, C = a.C;
    for (int64_t t = blockIdx.x; t < a.T; t += gridDim.x) {
        const T *ht = h + t * a.hs0;
        double loss = 0;
        if (a.mode <= 1) {
            double *z = a.z + t * C;
            for (int64_t c = warp; c < C; c += nw) {
                const T *w = wc + c * a.wcs0;
                double s = 0;
                for (int64_t k = lane; k < H; k += 32)
                    s += (double)w[k * a.wcs1] * (double)ht[k * a.hs1];
                s = tgl_warp_sum(s);
                if (lane == 0)
                    z[c] = s;
            }
            __syncthreads();
            double m = -INFINITY;
            for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
                m = nnet_max2(m, z[c]);
            m = nnet_block_max(m, scratch);
            double s = 0;
            for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
                s += exp(z[c] - m);
            s = tgl_block_sum(s, scratch);
            const int64_t cl = a.cls[t];
            if (a.mode == 0)
                loss += m + log(s) - z[cl];
            else
                for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
                    out[t * C + c] = (T)(exp(z[c] - m) / s - (c == cl ? 1.0 : 0.0));
        }
        if (a.mode != 1) {
            const int64_t *rows = a.list + a.first[t];
            const int64_t nr = a.first[t + 1] - a.first[t], tg = a.tgt[t];
            double *z = a.z + (a.mode == 0 ? a.T * C : 0) + a.first[t];
            for (int64_t r = warp; r < nr; r += nw) {
                const T *w = ws + rows[r] * a.wss0;
                double s = 0;
                for (int64_t k = lane; k < H; k += 32)
                    s += (double)w[k * a.wss1] * (double)ht[k * a.hs1];
                s = tgl_warp_sum(s);
                if (lane == 0)
                    z[r] = s;
            }
            __syncthreads();
            double m = -INFINITY, zt = 0;
            for (int64_t r = threadIdx.x; r < nr; r += blockDim.x) {
                m = nnet_max2(m, z[r]);
                if (rows[r] == tg)
                    zt = z[r];
            }
            m = nnet_block_max(m, scratch);
            double s = 0;
            for (int64_t r = threadIdx.x; r < nr; r += blockDim.x)
                s += exp(z[r] - m);
            s = tgl_block_sum(s, scratch);
            if (a.mode == 0) {
                /* the target is one of t's rows (checked): one thread
                 * holds it, every other adds 0 */
                zt = tgl_block_sum(zt, scratch);
                loss += m + log(s) - zt;
            } else {
                /* the deltas D[r], in place of the logits, then each
                 * thread its hidden units: h's row gets sum D[r] Ws[r]
                 * (in T, in t's row order, as the CPU), each word row
                 * D[r] h[t] */
                for (int64_t r = threadIdx.x; r < nr; r += blockDim.x)
                    z[r] = (double)(T)(exp(z[r] - m) / s - (rows[r] == tg ? 1.0 : 0.0));
                __syncthreads();
                for (int64_t k = threadIdx.x; k < H; k += blockDim.x) {
                    const T hk = ht[k * a.hs1];
                    T acc = 0;
                    for (int64_t r = 0; r < nr; r++) {
                        const T d = (T)z[r];
                        acc += d * ws[rows[r] * a.wss0 + k * a.wss1];
                        out[(a.T + rows[r]) * H + k] = d * hk;
                    }
                    out[t * H + k] = acc;
                }
            }
        }
        if (a.mode == 0 && threadIdx.x == 0)
            out[t] = (T)loss;
        /* the next row's logits overwrite nothing of this one's (z is per
         * row), but the shared scratch is reused: the reductions begin
         * with a barrier */
    }
}

TGL_KERNEL(nnet_cx_f32, tgl_nnet_cx_args) { nnet_cx<float>(a); }
TGL_KERNEL(nnet_cx_f64, tgl_nnet_cx_args) { nnet_cx<double>(a); }

/* ---- batch normalisation ------------------------------------------------- */

/* The offset of element (i0, c, i2, i3, i4) of an array with strides s. */
static __device__ __forceinline__ int64_t nnet_bn_off(const int64_t *s, int64_t i0, int64_t c,
                                                      int64_t i2, int64_t i3, int64_t i4)
{
    return i0 * s[0] + c * s[1] + i2 * s[2] + i3 * s[3] + i4 * s[4];
}

/* Per-channel sums (nnet.cuh).  The (N, C, R) layout: one block per
 * channel, the channel's elements in order (the innermost run is the
 * longest contiguous one: neighbouring threads read neighbouring
 * elements).  The (N, C) layout: a block per tile of 32 channels, lanes
 * across the channels of a row (one row is contiguous), warps down the
 * rows, the warps' sums added in shared memory. */
template <typename T> static __device__ void nnet_bn_sums(const tgl_nnet_bn_sums_args &a)
{
    __shared__ double scratch[32];
    __shared__ double t1[32][33], t2[32][33];
    const T *x = (const T *)a.x, *g = (const T *)a.g;
    const tgl_nnet_bn_geom &q = a.geo;
    const int64_t C = q.n[1];
    if (a.rows) {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
        const int64_t ntiles = (C + 31) / 32;
        for (int64_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
            const int64_t c = tile * 32 + lane;
            const bool on = c < C;
            double K = 0, a1 = 0, a2 = 0;
            if (on)
                K = g ? (double)((const T *)a.mean)[c * a.ms] : (double)x[c * q.xs[1]];
            if (on)
                for (int64_t i = warp; i < q.n[0]; i += nw) {
                    const double v = (double)x[i * q.xs[0] + c * q.xs[1]] - K;
                    if (g) {
                        const double gv = (double)g[i * q.gs[0] + c * q.gs[1]];
                        a1 += gv;
                        a2 += gv * v;
                    } else {
                        a1 += v;
                        a2 += v * v;
                    }
                }
            __syncthreads(); /* the previous tile's sums are read */
            if (warp < 32) {
                t1[warp][lane] = a1;
                t2[warp][lane] = a2;
            }
            __syncthreads();
            if (warp == 0 && on) {
                double s1 = 0, s2 = 0;
                for (int w = 0; w < nw && w < 32; w++)
                    s1 += t1[w][lane], s2 += t2[w][lane];
                a.s1[c] = s1;
                a.s2[c] = s2;
                if (a.k)
                    a.k[c] = K;
            }
        }
        return;
    }
    const int64_t n4 = q.n[4], n3 = q.n[3], n2 = q.n[2];
    const int64_t R = n2 * n3 * n4, M = q.n[0] * R;
    for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
        const double K = g ? (double)((const T *)a.mean)[c * a.ms] : (double)x[c * q.xs[1]];
        double a1 = 0, a2 = 0;
        for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
            int64_t rem = i;
            const int64_t i4 = rem % n4;
            rem /= n4;
            const int64_t i3 = rem % n3;
            rem /= n3;
            const int64_t i2 = rem % n2, i0 = rem / n2;
            const double v = (double)x[nnet_bn_off(q.xs, i0, c, i2, i3, i4)] - K;
            if (g) {
                const double gv = (double)g[nnet_bn_off(q.gs, i0, c, i2, i3, i4)];
                a1 += gv;
                a2 += gv * v;
            } else {
                a1 += v;
                a2 += v * v;
            }
        }
        a1 = tgl_block_sum(a1, scratch);
        a2 = tgl_block_sum(a2, scratch);
        if (threadIdx.x == 0) {
            a.s1[c] = a1;
            a.s2[c] = a2;
            if (a.k)
                a.k[c] = K;
        }
    }
}

TGL_KERNEL(nnet_bn_sums_f32, tgl_nnet_bn_sums_args) { nnet_bn_sums<float>(a); }
TGL_KERNEL(nnet_bn_sums_f64, tgl_nnet_bn_sums_args) { nnet_bn_sums<double>(a); }

template <typename T> static __device__ void nnet_bn_prep(const tgl_nnet_bn_prep_args &a)
{
    T *p = (T *)a.p, *o0 = (T *)a.out0, *o1 = (T *)a.out1;
    const T *mean = (const T *)a.mean, *var = (const T *)a.var, *w = (const T *)a.w,
            *b = (const T *)a.b;
    const int64_t C = a.C;
    TGL_GRID_LOOP(c, C)
    {
        if (a.mode == 0) {
            const double m = a.m, s1 = a.s1[c], v = (a.s2[c] - s1 * s1 / m) / m;
            if (o0)
                o0[c * a.o0s] = (T)(a.k[c] + s1 / m);
            if (o1)
                o1[c * a.o1s] = (T)(v > 0 ? v : 0);
        } else if (a.mode == 1) {
            const double mu = (double)mean[c * a.ms];
            double scale = 1.0 / sqrt((double)var[c * a.vs] + a.eps), shift = 0;
            if (w) {
                scale *= (double)w[c * a.wst];
                shift = (double)b[c * a.bst];
            }
            p[c] = (T)mu;
            p[C + c] = (T)scale;
            p[2 * C + c] = (T)shift;
        } else {
            const double sg = a.s1[c], sgx = a.s2[c], m = a.m;
            const double ve = (double)var[c * a.vs] + a.eps;
            const double A = (w ? (double)w[c * a.wst] : 1.0) / sqrt(ve);
            if (o0)
                o0[c * a.o0s] = (T)sg;
            if (o1)
                o1[c * a.o1s] = (T)sgx;
            p[c] = (T)(double)mean[c * a.ms];
            p[C + c] = (T)A;
            p[2 * C + c] = (T)(sg / m);
            p[3 * C + c] = (T)(sgx / (m * ve));
        }
    }
}

TGL_KERNEL(nnet_bn_prep_f32, tgl_nnet_bn_prep_args) { nnet_bn_prep<float>(a); }
TGL_KERNEL(nnet_bn_prep_f64, tgl_nnet_bn_prep_args) { nnet_bn_prep<double>(a); }

/* The elementwise pass over every element of x, in x's precision as the
 * CPU; out may be x (batch_norm in place): each element is read and
 * written by the same thread. */
template <typename T> static __device__ void nnet_bn_apply(const tgl_nnet_bn_apply_args &a)
{
    const T *x = (const T *)a.x, *g = (const T *)a.g, *p = (const T *)a.p;
    T *out = (T *)a.out;
    const tgl_nnet_bn_geom &q = a.geo;
    const int64_t C = a.C, n4 = q.n[4], n3 = q.n[3], n2 = q.n[2], n1 = q.n[1];
    TGL_GRID_LOOP(i, a.total)
    {
        int64_t rem = i;
        const int64_t i4 = rem % n4;
        rem /= n4;
        const int64_t i3 = rem % n3;
        rem /= n3;
        const int64_t i2 = rem % n2;
        rem /= n2;
        const int64_t c = rem % n1, i0 = rem / n1;
        const T xv = x[nnet_bn_off(q.xs, i0, c, i2, i3, i4)];
        T r;
        if (a.mode == 1) {
            r = (xv - p[c]) * p[C + c] + p[2 * C + c];
        } else {
            const T gv = g[nnet_bn_off(q.gs, i0, c, i2, i3, i4)];
            r = p[C + c] * (gv - p[2 * C + c] - (xv - p[c]) * p[3 * C + c]);
        }
        out[nnet_bn_off(q.os, i0, c, i2, i3, i4)] = r;
    }
}

TGL_KERNEL(nnet_bn_apply_f32, tgl_nnet_bn_apply_args) { nnet_bn_apply<float>(a); }
TGL_KERNEL(nnet_bn_apply_f64, tgl_nnet_bn_apply_args) { nnet_bn_apply<double>(a); }
