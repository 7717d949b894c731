/*
 * core.cu — the core family's CUDA kernels (host side: k_copy.c,
 * k_core.c): strided and converting copies, reductions (sum, prod, max,
 * min over any axes), argmax/argmin, fill and arange.  Arguments: core.cuh.
 * The results are the CPU kernels' (src/cpu/kernels/reduce.c, shape.c,
 * engine/array.c's conversions): float data accumulates in double, integer
 * data in 64-bit integers that wrap, max/min propagate NaN, argmax takes
 * the first of equal values and the first NaN outright.
 */

/* ---- element access -------------------------------------------------- */

/* tgl_load_as_double (engine/dtype.c) */
static __device__ __forceinline__ double core_load_f(int dt, const void *p, int64_t i)
{
    switch (dt) {
    case TGL_CORE_F32: return (double)((const float *)p)[i];
    case TGL_CORE_F64: return ((const double *)p)[i];
    case TGL_CORE_I32: return (double)((const int32_t *)p)[i];
    case TGL_CORE_I64: return (double)((const long long *)p)[i];
    case TGL_CORE_U8: return (double)((const uint8_t *)p)[i];
    default: return ((const uint8_t *)p)[i] != 0 ? 1.0 : 0.0;
    }
}

/* clamp_to_int: truncation toward zero, saturating, NaN to 0 */
static __device__ __forceinline__ long long core_clamp(double v, double lo, double hi)
{
    if (v != v)
        return 0;
    if (v <= lo)
        return (long long)lo;
    if (v >= hi)
        return (long long)hi;
    return (long long)v;
}

/* tgl_store_from_double */
static __device__ __forceinline__ void core_store_f(int dt, void *p, int64_t i, double v)
{
    switch (dt) {
    case TGL_CORE_F32: ((float *)p)[i] = (float)v; break;
    case TGL_CORE_F64: ((double *)p)[i] = v; break;
    case TGL_CORE_I32: ((int32_t *)p)[i] = (int32_t)core_clamp(v, -2147483648.0, 2147483647.0); break;
    case TGL_CORE_I64:
        if (v != v)
            ((long long *)p)[i] = 0;
        else if (v >= 9223372036854775808.0)
            ((long long *)p)[i] = 9223372036854775807LL;
        else if (v <= -9223372036854775808.0)
            ((long long *)p)[i] = -9223372036854775807LL - 1;
        else
            ((long long *)p)[i] = (long long)v;
        break;
    case TGL_CORE_U8: ((uint8_t *)p)[i] = (uint8_t)core_clamp(v, 0.0, 255.0); break;
    default: ((uint8_t *)p)[i] = v != 0.0; break;
    }
}

/* array.c's load_int: bool and uint8 bytes as they are */
static __device__ __forceinline__ long long core_load_i(int dt, const void *p, int64_t i)
{
    switch (dt) {
    case TGL_CORE_I32: return ((const int32_t *)p)[i];
    case TGL_CORE_I64: return ((const long long *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

/* array.c's store_int_wrapping */
static __device__ __forceinline__ void core_store_i(int dt, void *p, int64_t i, long long v)
{
    switch (dt) {
    case TGL_CORE_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)(unsigned long long)v; break;
    case TGL_CORE_I64: ((long long *)p)[i] = v; break;
    case TGL_CORE_U8: ((uint8_t *)p)[i] = (uint8_t)(unsigned long long)v; break;
    default: ((uint8_t *)p)[i] = v != 0; break;
    }
}

static __device__ __forceinline__ bool core_is_int(int dt)
{
    return dt != TGL_CORE_F32 && dt != TGL_CORE_F64;
}

/* Element offset of C-order position i over nd axes. */
static __device__ __forceinline__ int64_t core_offset(int64_t i, int nd, const int64_t *shape,
                                                      const int64_t *str)
{
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        const int64_t s = shape[d];
        off += (i % s) * str[d];
        i /= s;
    }
    return off;
}

/* ---- copies ------------------------------------------------------------ */

template <typename T> static __device__ void core_copy_t(const tgl_core_copy_args &a)
{
    const T *src = (const T *)a.src;
    T *dst = (T *)a.dst;
    if (a.ndim == 1 && a.dcontig) {
        const int64_t s = a.sstr[0];
        TGL_GRID_LOOP(i, a.n)
        dst[i] = src[i * s];
        return;
    }
    TGL_GRID_LOOP(i, a.n)
    {
        const int64_t so = core_offset(i, a.ndim, a.shape, a.sstr);
        const int64_t d = a.dcontig ? i : core_offset(i, a.ndim, a.shape, a.dstr);
        dst[d] = src[so];
    }
}

TGL_KERNEL(tgl_core_copy, tgl_core_copy_args)
{
    switch (a.es) {
    case 1: core_copy_t<uint8_t>(a); break;
    case 2: core_copy_t<unsigned short>(a); break;
    case 4: core_copy_t<uint32_t>(a); break;
    default: core_copy_t<unsigned long long>(a); break;
    }
}

/* A converting copy, with array.c's rules: integer to integer wraps
 * (exact when widening), int64 to float32 rounds once, everything else
 * goes through double (tgl_load_as_double, tgl_store_from_double). */
TGL_KERNEL(tgl_core_convert, tgl_core_copy_args)
{
    const bool ii = core_is_int(a.sdt) && core_is_int(a.ddt);
    const bool l2f = a.sdt == TGL_CORE_I64 && a.ddt == TGL_CORE_F32;
    TGL_GRID_LOOP(i, a.n)
    {
        const int64_t so = core_offset(i, a.ndim, a.shape, a.sstr);
        const int64_t d = a.dcontig ? i : core_offset(i, a.ndim, a.shape, a.dstr);
        if (ii)
            core_store_i(a.ddt, a.dst, d, core_load_i(a.sdt, a.src, so));
        else if (l2f)
            ((float *)a.dst)[d] = (float)((const long long *)a.src)[so];
        else
            core_store_f(a.ddt, a.dst, d, core_load_f(a.sdt, a.src, so));
    }
}

/* ---- reductions -------------------------------------------------------- */

/* The identity of op in the accumulator A (double or long long). */
template <typename A> static __device__ __forceinline__ A core_identity(int op);
template <> __device__ __forceinline__ double core_identity<double>(int op)
{
    const double inf = __longlong_as_double(0x7ff0000000000000LL); /* no INFINITY under NVRTC */
    return op == TGL_CORE_SUM ? 0.0 : op == TGL_CORE_PROD ? 1.0 : op == TGL_CORE_MAX ? -inf : inf;
}
template <> __device__ __forceinline__ long long core_identity<long long>(int op)
{
    return op == TGL_CORE_SUM ? 0LL : op == TGL_CORE_PROD ? 1LL : op == TGL_CORE_MAX
                                                                  ? -9223372036854775807LL - 1
                                                                  : 9223372036854775807LL;
}

/* acc op v.  Floats: max/min keep a NaN once seen and take any NaN they
 * meet (reduce.c's PICK), so folding partial results in any order gives
 * NaN when any element is NaN.  Integers wrap (computed unsigned). */
static __device__ __forceinline__ double core_fold(int op, double acc, double v)
{
    switch (op) {
    case TGL_CORE_SUM: return acc + v;
    case TGL_CORE_PROD: return acc * v;
    case TGL_CORE_MAX: return (v > acc || v != v) ? v : acc;
    default: return (v < acc || v != v) ? v : acc;
    }
}
static __device__ __forceinline__ long long core_fold(int op, long long acc, long long v)
{
    switch (op) {
    case TGL_CORE_SUM: return (long long)((unsigned long long)acc + (unsigned long long)v);
    case TGL_CORE_PROD: return (long long)((unsigned long long)acc * (unsigned long long)v);
    case TGL_CORE_MAX: return v > acc ? v : acc;
    default: return v < acc ? v : acc;
    }
}

/* Element i of x in the accumulator's type (bool normalized to 0/1). */
static __device__ __forceinline__ void core_load_acc(int dt, const void *x, int64_t i, double *v)
{
    *v = dt == TGL_CORE_F32 ? (double)__ldg((const float *)x + i) : __ldg((const double *)x + i);
}
static __device__ __forceinline__ void core_load_acc(int dt, const void *x, int64_t i,
                                                     long long *v)
{
    switch (dt) {
    case TGL_CORE_I32: *v = __ldg((const int *)x + i); break;
    case TGL_CORE_I64: *v = __ldg((const long long *)x + i); break;
    case TGL_CORE_U8: *v = ((const uint8_t *)x)[i]; break;
    default: *v = ((const uint8_t *)x)[i] != 0; break;
    }
}

/* The final value of an accumulator stored as the output's dtype. */
static __device__ __forceinline__ void core_store_acc(int odt, void *out, int64_t o, double v)
{
    core_store_f(odt, out, o, v);
}
static __device__ __forceinline__ void core_store_acc(int odt, void *out, int64_t o, long long v)
{
    switch (odt) {
    case TGL_CORE_I64: ((long long *)out)[o] = v; break;
    case TGL_CORE_I32: ((int32_t *)out)[o] = (int32_t)v; break;
    default: ((uint8_t *)out)[o] = (uint8_t)v; break;
    }
}

/* Where a chunk's result goes: the output (one chunk) or the partials. */
template <typename A>
static __device__ __forceinline__ void core_put(const tgl_core_reduce_args &a, int64_t o,
                                                int64_t c, A acc)
{
    if (a.nchunk == 1)
        core_store_acc(a.odt, a.out, o, acc);
    else
        ((A *)a.part)[c * a.nout + o] = acc;
}

/* A warp's fold (every lane gets it); every lane must call it. */
template <typename A> static __device__ __forceinline__ A core_warp_fold(int op, A v)
{
    for (int s = 16; s > 0; s >>= 1)
        v = core_fold(op, v, __shfl_xor_sync(0xffffffffu, v, s));
    return v;
}

/* A block's fold for any blockDim.x multiple of 32 (every thread calls it;
 * scratch: 32 shared elements); the result reaches every thread. */
template <typename A> static __device__ __forceinline__ A core_block_fold(int op, A v, A *scratch)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = core_warp_fold(op, v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    A t = lane < nwarps ? scratch[lane] : core_identity<A>(op);
    return core_warp_fold(op, t);
}

/* Reduced axes innermost in memory: a block per (output, chunk), its
 * threads reading consecutive reduced elements (coalesced when the
 * innermost reduced axis is contiguous), folded with core_block_fold. */
template <typename A> static __device__ void core_rows(const tgl_core_reduce_args &a, A *scratch)
{
    const int64_t items = a.nout * a.nchunk;
    for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
        const int64_t o = it / a.nchunk, c = it % a.nchunk;
        const int64_t base = core_offset(o, a.nk, a.kshape, a.kstr);
        const int64_t r0 = c * a.chunk;
        const int64_t r1 = r0 + a.chunk < a.rsize ? r0 + a.chunk : a.rsize;
        A acc = core_identity<A>(a.op);
        if (a.nr == 1) {
            const int64_t s = a.rstr[0];
            for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x) {
                A v;
                core_load_acc(a.xdt, a.x, base + r * s, &v);
                acc = core_fold(a.op, acc, v);
            }
        } else {
            for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x) {
                A v;
                core_load_acc(a.xdt, a.x, base + core_offset(r, a.nr, a.rshape, a.rstr), &v);
                acc = core_fold(a.op, acc, v);
            }
        }
        acc = core_block_fold(a.op, acc, scratch);
        if (threadIdx.x == 0)
            core_put(a, o, c, acc);
    }
}

TGL_KERNEL(tgl_core_reduce_rows, tgl_core_reduce_args)
{
    __shared__ double sd[32];
    __shared__ long long sl[32];
    if (core_is_int(a.xdt))
        core_rows<long long>(a, sl);
    else
        core_rows<double>(a, sd);
}

/* Kept axes innermost (or no reduction at all): a thread per (output,
 * chunk), outputs fastest, so neighbouring threads read neighbouring
 * elements; each folds its chunk in order, walking the reduced axes with
 * an odometer. */
template <typename A> static __device__ void core_cols(const tgl_core_reduce_args &a)
{
    TGL_GRID_LOOP(it, a.nout * a.nchunk)
    {
        const int64_t o = it % a.nout, c = it / a.nout;
        const int64_t base = core_offset(o, a.nk, a.kshape, a.kstr);
        if (a.copy) {
            A v;
            core_load_acc(a.xdt, a.x, base, &v);
            core_store_acc(a.odt, a.out, o, v);
            continue;
        }
        const int64_t r0 = c * a.chunk;
        const int64_t r1 = r0 + a.chunk < a.rsize ? r0 + a.chunk : a.rsize;
        int64_t idx[TGL_CORE_MAX_DIMS];
        int64_t q = r0, off = 0;
        for (int d = a.nr - 1; d >= 0; d--) {
            idx[d] = q % a.rshape[d];
            q /= a.rshape[d];
            off += idx[d] * a.rstr[d];
        }
        A acc = core_identity<A>(a.op);
        for (int64_t r = r0; r < r1; r++) {
            A v;
            core_load_acc(a.xdt, a.x, base + off, &v);
            acc = core_fold(a.op, acc, v);
            for (int d = a.nr - 1; d >= 0; d--) {
                off += a.rstr[d];
                if (++idx[d] < a.rshape[d])
                    break;
                off -= a.rstr[d] * a.rshape[d];
                idx[d] = 0;
            }
        }
        core_put(a, o, c, acc);
    }
}

TGL_KERNEL(tgl_core_reduce_cols, tgl_core_reduce_args)
{
    if (core_is_int(a.xdt))
        core_cols<long long>(a);
    else
        core_cols<double>(a);
}

/* The chunks of each output folded in order into the output. */
template <typename A> static __device__ void core_finish(const tgl_core_reduce_args &a)
{
    const A *part = (const A *)a.part;
    TGL_GRID_LOOP(o, a.nout)
    {
        A acc = core_identity<A>(a.op);
        for (int64_t c = 0; c < a.nchunk; c++)
            acc = core_fold(a.op, acc, part[c * a.nout + o]);
        core_store_acc(a.odt, a.out, o, acc);
    }
}

TGL_KERNEL(tgl_core_reduce_finish, tgl_core_reduce_args)
{
    if (core_is_int(a.xdt))
        core_finish<long long>(a);
    else
        core_finish<double>(a);
}

/* ---- argmax / argmin ------------------------------------------------------ */

/* Whether (v, p) beats (best, bp): a NaN beats any number, the earlier of
 * two NaNs wins, else the larger (smaller) value, the earlier of equal
 * ones; bp < 0 is no candidate yet. */
template <typename T>
static __device__ __forceinline__ bool core_beats(bool want_max, T v, int64_t p, T best, int64_t bp)
{
    if (bp < 0)
        return p >= 0;
    if (p < 0)
        return false;
    const bool vn = v != v, bn = best != best;
    if (vn || bn)
        return vn && (!bn || p < bp);
    if (v == best)
        return p < bp;
    return want_max ? v > best : v < best;
}

/* A thread per output: reduce.c's scan (first NaN returns at once). */
template <typename T> static __device__ void core_arg_cols(const tgl_core_arg_args &a)
{
    const T *x = (const T *)a.x;
    const bool want_max = a.want_max != 0;
    TGL_GRID_LOOP(o, a.nout)
    {
        const T *p = x + core_offset(o, a.nk, a.kshape, a.kstr);
        T best = p[0];
        int64_t pos = 0;
        if (best == best) {
            for (int64_t k = 1; k < a.len; k++) {
                const T v = p[k * a.s];
                if (v != v) {
                    pos = k;
                    break;
                }
                if (want_max ? v > best : v < best)
                    best = v, pos = k;
            }
        }
        a.out[o] = pos + 1;
    }
}

/* A block per output: each thread scans a strided share, then a tree over
 * the block's candidates (any blockDim: pairs at distance 1, 2, 4...). */
template <typename T> static __device__ void core_arg_rows(const tgl_core_arg_args &a, T *sv, int64_t *sp)
{
    const T *x = (const T *)a.x;
    const bool want_max = a.want_max != 0;
    const int t = threadIdx.x;
    for (int64_t o = blockIdx.x; o < a.nout; o += gridDim.x) {
        const T *p = x + core_offset(o, a.nk, a.kshape, a.kstr);
        T best = (T)0;
        int64_t bp = -1;
        for (int64_t k = t; k < a.len; k += blockDim.x) {
            const T v = p[k * a.s];
            if (core_beats<T>(want_max, v, k, best, bp))
                best = v, bp = k;
        }
        __syncthreads(); /* the previous output's tree is done with sv/sp */
        sv[t] = best;
        sp[t] = bp;
        __syncthreads();
        for (int s = 1; s < (int)blockDim.x; s <<= 1) {
            if ((t & (2 * s - 1)) == 0 && t + s < (int)blockDim.x &&
                core_beats<T>(want_max, sv[t + s], sp[t + s], sv[t], sp[t])) {
                sv[t] = sv[t + s];
                sp[t] = sp[t + s];
            }
            __syncthreads();
        }
        if (t == 0)
            a.out[o] = sp[0] + 1;
    }
}

TGL_KERNEL(tgl_core_arg_cols, tgl_core_arg_args)
{
    switch (a.xdt) {
    case TGL_CORE_F32: core_arg_cols<float>(a); break;
    case TGL_CORE_F64: core_arg_cols<double>(a); break;
    case TGL_CORE_I32: core_arg_cols<int32_t>(a); break;
    case TGL_CORE_I64: core_arg_cols<long long>(a); break;
    default: core_arg_cols<uint8_t>(a); break;
    }
}

/* The block's candidates: values in sv (any T of at most 8 bytes),
 * positions in sp; blockDim.x <= 1024. */
TGL_KERNEL(tgl_core_arg_rows, tgl_core_arg_args)
{
    __shared__ double sv[1024];
    __shared__ int64_t sp[1024];
    switch (a.xdt) {
    case TGL_CORE_F32: core_arg_rows<float>(a, (float *)sv, sp); break;
    case TGL_CORE_F64: core_arg_rows<double>(a, sv, sp); break;
    case TGL_CORE_I32: core_arg_rows<int32_t>(a, (int32_t *)sv, sp); break;
    case TGL_CORE_I64: core_arg_rows<long long>(a, (long long *)sv, sp); break;
    default: core_arg_rows<uint8_t>(a, (uint8_t *)sv, sp); break;
    }
}

/* ---- fill and arange -------------------------------------------------------- */

TGL_KERNEL(tgl_core_fill, tgl_core_fill_args)
{
    switch (a.es) {
    case 1: {
        const uint8_t v = (uint8_t)a.bits;
        TGL_GRID_LOOP(i, a.n)
        ((uint8_t *)a.out)[i] = v;
        break;
    }
    case 4: {
        const uint32_t v = (uint32_t)a.bits;
        TGL_GRID_LOOP(i, a.n)
        ((uint32_t *)a.out)[i] = v;
        break;
    }
    default: {
        const unsigned long long v = (unsigned long long)a.bits;
        TGL_GRID_LOOP(i, a.n)
        ((unsigned long long *)a.out)[i] = v;
        break;
    }
    }
}

/* shape.c's arange: start + i * step in double, stored as the output's
 * dtype (tgl_store_from_double). */
TGL_KERNEL(tgl_core_arange, tgl_core_arange_args)
{
    const double start = core_load_f(a.sdt, a.start, 0);
    const double step = core_load_f(a.tdt, a.step, 0);
    TGL_GRID_LOOP(i, a.n)
    core_store_f(a.odt, a.out, i, start + (double)i * step);
}
