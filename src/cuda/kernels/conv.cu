/*
 * conv.cu — the conv family's CUDA kernels (host side: src/cuda/k_conv.c;
 * meanings: engine/ops/conv.c and engine/ops/pool.c; CPU reference:
 * src/cpu/kernels/conv.c and pool.c).
 *
 * Convolutions are im2col + cuBLAS products (issued by k_conv.c); here are
 * the data movements around the products: im2col from a strided x, col2im
 * as a gather (each input element sums its own window entries: no atomics,
 * the same additions in the same order as the CPU's col2im), and a strided
 * 4-d copy.  Pooling is one thread per output element (forward, gather) or
 * per input element (the pullbacks, as gathers over the windows covering
 * it, in the CPU's window order, so the sums round the same way).  Every
 * kernel is a grid-stride loop over independent items: any grid and block
 * give the same result (cuda_int.h's rules).
 */

/* ---- convolution ------------------------------------------------------------ */

/* The kernels split a flat index into coordinates by division; I is the
 * type of that arithmetic: int32_t when the host says every index fits
 * (idx32: 64-bit division costs several times more on the device), else
 * int64_t.  Element addresses with strides are computed in 64 bits. */
template <typename T, typename I> static __device__ void im2col_i(const tgl_conv_im2col_args &a)
{
    const tgl_conv_geom &g = a.g;
    const T *x = (const T *)a.x;
    T *col = (T *)a.col;
    const I Wo = (I)g.Wo, kW = (I)g.kW, kH = (I)g.kH, G = (I)a.G;
    const I L = (I)(g.Ho * g.Wo), K = (I)(g.Cg * g.kH * g.kW);
    const int64_t total = a.nb * a.G * g.Cg * g.kH * g.kW * g.Ho * g.Wo;
    TGL_GRID_LOOP(t64, total)
    {
        /* t in (n, gi, k, l) order, l fastest: writes run along l in both layouts. */
        I t = (I)t64;
        I l = t % L, r = t / L;
        I k = r % K;
        r /= K;
        I gi = r % G, n = r / G;
        I i = l / Wo, j = l % Wo;
        I b = k % kW, ca = k / kW;
        I aa = ca % kH, c = ca / kH;
        int64_t ih = (int64_t)i * g.sh - g.ph + (int64_t)aa * g.dh;
        int64_t iw = (int64_t)j * g.sw - g.pw + (int64_t)b * g.dw;
        T v = (T)0;
        if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W)
            v = x[(a.n0 + n) * a.xsn + ((int64_t)gi * g.Cg + c) * a.xsc + ih * a.xsh + iw * a.xsw];
        col[(int64_t)gi * a.sG + (int64_t)k * a.sK + (int64_t)n * a.sN + l] = v;
    }
}

template <typename T, typename I> static __device__ void col2im_i(const tgl_conv_col2im_args &a)
{
    const tgl_conv_geom &g = a.g;
    const T *col = (const T *)a.col;
    T *gx = (T *)a.gx;
    const int64_t L = g.Ho * g.Wo, K = g.Cg * g.kH * g.kW;
    const int64_t total = a.nb * g.C * g.H * g.W;
    const I W = (I)g.W, H = (I)g.H, C = (I)g.C, Cg = (I)g.Cg, kH = (I)g.kH, kW = (I)g.kW;
    const I sh = (I)g.sh, sw = (I)g.sw, ph = (I)g.ph, pw = (I)g.pw, dh = (I)g.dh, dw = (I)g.dw;
    const I Ho = (I)g.Ho, Wo = (I)g.Wo;
    TGL_GRID_LOOP(t64, total)
    {
        I t = (I)t64;
        I iw = t % W, r = t / W;
        I ih = r % H;
        r /= H;
        I c = r % C, n = r / C;
        I gi = c / Cg, cc = c % Cg;
        const T *cb = col + (((int64_t)n * a.G + gi) * K + (int64_t)cc * kH * kW) * L;
        T s = (T)0;
        for (I aa = 0; aa < kH; aa++) {
            I th = ih + ph - aa * dh;
            if (th < 0 || th % sh != 0 || th / sh >= Ho)
                continue;
            I oh = th / sh;
            for (I b = 0; b < kW; b++) {
                I tw = iw + pw - b * dw;
                if (tw < 0 || tw % sw != 0 || tw / sw >= Wo)
                    continue;
                s += cb[(int64_t)(aa * kW + b) * L + (int64_t)oh * Wo + tw / sw];
            }
        }
        gx[(a.n0 * g.C) * g.H * g.W + t64] = s;
    }
}

template <typename T, typename I> static __device__ void copy4_i(const tgl_conv_copy4_args &a)
{
    const T *src = (const T *)a.src;
    T *dst = (T *)a.dst;
    const int64_t total = a.d0 * a.d1 * a.d2 * a.d3;
    const I d0 = (I)a.d0, d1 = (I)a.d1, d2 = (I)a.d2, d3 = (I)a.d3;
    TGL_GRID_LOOP(t64, total)
    {
        I t = (I)t64;
        I i3 = t % d3, r = t / d3;
        I i2 = r % d2, i0, i1;
        r /= d2;
        if (a.swap01)
            i0 = r % d0, i1 = r / d0;
        else
            i1 = r % d1, i0 = r / d1;
        dst[t64] = src[i0 * a.s0 + i1 * a.s1 + i2 * a.s2 + i3 * a.s3];
    }
}

template <typename T> static __device__ void im2col(const tgl_conv_im2col_args &a)
{
    if (a.idx32)
        im2col_i<T, int32_t>(a);
    else
        im2col_i<T, int64_t>(a);
}

template <typename T> static __device__ void col2im(const tgl_conv_col2im_args &a)
{
    if (a.idx32)
        col2im_i<T, int32_t>(a);
    else
        col2im_i<T, int64_t>(a);
}

template <typename T> static __device__ void copy4(const tgl_conv_copy4_args &a)
{
    if (a.idx32)
        copy4_i<T, int32_t>(a);
    else
        copy4_i<T, int64_t>(a);
}

TGL_KERNEL(conv_im2col_f32, tgl_conv_im2col_args) { im2col<float>(a); }
TGL_KERNEL(conv_im2col_f64, tgl_conv_im2col_args) { im2col<double>(a); }
TGL_KERNEL(conv_col2im_f32, tgl_conv_col2im_args) { col2im<float>(a); }
TGL_KERNEL(conv_col2im_f64, tgl_conv_col2im_args) { col2im<double>(a); }
TGL_KERNEL(conv_copy4_f32, tgl_conv_copy4_args) { copy4<float>(a); }
TGL_KERNEL(conv_copy4_f64, tgl_conv_copy4_args) { copy4<double>(a); }

/* ---- pooling ---------------------------------------------------------------- */

/* Window (i, j)'s rows [h0, h1) and columns [w0, w1) inside the input and
 * its avg divisor, as the CPU's window(). */
static __device__ __forceinline__ int64_t pool_window(const tgl_pool_geom &g, int64_t i, int64_t j,
                                                      int64_t &h0, int64_t &h1, int64_t &w0,
                                                      int64_t &w1)
{
    int64_t hs = i * g.dH - g.pH, ws = j * g.dW - g.pW;
    int64_t he = hs + g.kH, we = ws + g.kW;
    if (he > g.H + g.pH)
        he = g.H + g.pH;
    if (we > g.W + g.pW)
        we = g.W + g.pW;
    int64_t count = (he - hs) * (we - ws);
    h0 = hs < 0 ? 0 : hs;
    w0 = ws < 0 ? 0 : ws;
    h1 = he > g.H ? g.H : he;
    w1 = we > g.W ? g.W : we;
    if (g.exclude_pad)
        count = (h1 - h0) * (w1 - w0);
    return count;
}

/* Window (i, j)'s maximum over plane xp, and its position: the first in
 * row-major order among equals; a NaN wins, the last one (the CPU's rule). */
template <typename T>
static __device__ T pool_argmax(const tgl_pool_geom &g, const T *xp, int64_t sh, int64_t sw,
                                int64_t i, int64_t j, int64_t &bh, int64_t &bw)
{
    int64_t h0, h1, w0, w1;
    pool_window(g, i, j, h0, h1, w0, w1);
    bh = h0, bw = w0;
    T m = xp[h0 * sh + w0 * sw], nanv = m;
    int64_t nh = -1, nw = -1;
    for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++) {
            T v = xp[h * sh + w * sw];
            if (v > m)
                m = v, bh = h, bw = w;
            if (v != v)
                nanv = v, nh = h, nw = w;
        }
    if (nh >= 0)
        m = nanv, bh = nh, bw = nw;
    return m;
}

/* max_pool2d / avg_pool2d: one thread per output element.  I: the flat
 * index's type, as for the convolution kernels. */
template <typename T, typename I> static __device__ void pool_fwd_i(const tgl_pool_args &a)
{
    const tgl_pool_geom &g = a.g;
    const I per = (I)(g.Ho * g.Wo), Wo = (I)g.Wo, C = (I)g.C;
    T *out = (T *)a.out;
    TGL_GRID_LOOP(t, g.planes * g.Ho * g.Wo)
    {
        I ti = (I)t;
        I q = ti / per, r = ti % per, i = r / Wo, j = r % Wo;
        const T *xp = (const T *)a.x + (int64_t)(q / C) * a.xsn + (int64_t)(q % C) * a.xsc;
        int64_t h0, h1, w0, w1;
        if (a.is_max) {
            out[t] = pool_argmax<T>(g, xp, a.xsh, a.xsw, i, j, h0, w0);
            continue;
        }
        int64_t count = pool_window(g, i, j, h0, h1, w0, w1);
        T s = (T)0;
        for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++)
                s += xp[h * a.xsh + w * a.xsw];
        out[t] = s / (T)count;
    }
}

/* Each window's argmax as h W + w in its plane (for max_pool2d_grad), or,
 * for max_pool2d_gather, h read there: one thread per output element. */
template <typename T, typename I> static __device__ void pool_argmax_i(const tgl_pool_args &a)
{
    const tgl_pool_geom &g = a.g;
    const I per = (I)(g.Ho * g.Wo), Wo = (I)g.Wo, C = (I)g.C;
    TGL_GRID_LOOP(t, g.planes * g.Ho * g.Wo)
    {
        I ti = (I)t;
        I q = ti / per, r = ti % per, i = r / Wo, j = r % Wo;
        const int64_t qn = q / C, qc = q % C;
        const T *xp = (const T *)a.x + qn * a.xsn + qc * a.xsc;
        int64_t bh, bw;
        pool_argmax<T>(g, xp, a.xsh, a.xsw, i, j, bh, bw);
        if (a.idx_out)
            a.idx_out[t] = bh * g.W + bw;
        else
            ((T *)a.out)[t] = ((const T *)a.h)[qn * a.hsn + qc * a.hsc + bh * a.hsh + bw * a.hsw];
    }
}

/* max_pool2d_grad (is_max: g where the window's argmax, idx, is this
 * element) and avg_pool2d_grad (g / count): one thread per input element,
 * summing over the windows that cover it in row-major window order. */
template <typename T, typename I> static __device__ void pool_grad_i(const tgl_pool_args &a)
{
    const tgl_pool_geom &g = a.g;
    const I per = (I)(g.H * g.W), W = (I)g.W, C = (I)g.C;
    const I kH = (I)g.kH, kW = (I)g.kW, dH = (I)g.dH, dW = (I)g.dW, pH = (I)g.pH, pW = (I)g.pW;
    T *out = (T *)a.out;
    TGL_GRID_LOOP(t, g.planes * g.H * g.W)
    {
        I ti = (I)t;
        I q = ti / per, r = ti % per, h = r / W, w = r % W;
        const T *gp = (const T *)a.h + (int64_t)(q / C) * a.hsn + (int64_t)(q % C) * a.hsc;
        /* windows i with i dH - pH <= h < i dH - pH + kH */
        I hn = h + pH - kH + 1, wn = w + pW - kW + 1;
        int64_t i0 = hn <= 0 ? 0 : (hn + dH - 1) / dH;
        int64_t j0 = wn <= 0 ? 0 : (wn + dW - 1) / dW;
        int64_t i1 = (h + pH) / dH, j1 = (w + pW) / dW;
        if (i1 > g.Ho - 1)
            i1 = g.Ho - 1;
        if (j1 > g.Wo - 1)
            j1 = g.Wo - 1;
        T s = (T)0;
        for (int64_t i = i0; i <= i1; i++)
            for (int64_t j = j0; j <= j1; j++) {
                T gv = gp[i * a.hsh + j * a.hsw];
                if (a.is_max) {
                    if (a.idx[(int64_t)q * g.Ho * g.Wo + i * g.Wo + j] == r)
                        s += gv;
                } else {
                    int64_t h0, h1, w0, w1;
                    s += gv / (T)pool_window(g, i, j, h0, h1, w0, w1);
                }
            }
        out[t] = s;
    }
}

template <typename T> static __device__ void pool_fwd(const tgl_pool_args &a)
{
    if (a.idx32)
        pool_fwd_i<T, int32_t>(a);
    else
        pool_fwd_i<T, int64_t>(a);
}

template <typename T> static __device__ void pool_argmax_k(const tgl_pool_args &a)
{
    if (a.idx32)
        pool_argmax_i<T, int32_t>(a);
    else
        pool_argmax_i<T, int64_t>(a);
}

template <typename T> static __device__ void pool_grad(const tgl_pool_args &a)
{
    if (a.idx32)
        pool_grad_i<T, int32_t>(a);
    else
        pool_grad_i<T, int64_t>(a);
}

TGL_KERNEL(pool_fwd_f32, tgl_pool_args) { pool_fwd<float>(a); }
TGL_KERNEL(pool_fwd_f64, tgl_pool_args) { pool_fwd<double>(a); }
TGL_KERNEL(pool_argmax_f32, tgl_pool_args) { pool_argmax_k<float>(a); }
TGL_KERNEL(pool_argmax_f64, tgl_pool_args) { pool_argmax_k<double>(a); }
TGL_KERNEL(pool_grad_f32, tgl_pool_args) { pool_grad<float>(a); }
TGL_KERNEL(pool_grad_f64, tgl_pool_args) { pool_grad<double>(a); }
