/*
 * index.cu — the indexing family's CUDA kernels (host side:
 * src/cuda/k_index.c; argument structs: index.cuh).  They compute what
 * src/cpu/kernels/subtensor.c and nnet.c's one_hot compute:
 *
 *   tgl_index_copy          a strided copy with tgl's dtype conversions
 *                           (x into the output, v into the output's dtype)
 *   tgl_index_update_*      basic inc/set_subtensor over a region (its
 *                           positions are distinct: plain stores)
 *   tgl_index_positions     each broadcast index position's target offset,
 *                           with the index checks (first bad one: atomicMin)
 *   tgl_index_gather*       adv_subtensor, a thread per output element
 *   tgl_index_scatter_*     adv_inc_subtensor adding: atomics, since the
 *                           positions may repeat (uint8 accumulates in a
 *                           uint32 buffer; bool's "or" is a store of 1)
 *   tgl_index_winner, tgl_index_scatter_set*
 *                           adv_inc_subtensor setting: the CPU's loop lets
 *                           the last write (highest result position) win;
 *                           atomicMax picks that position per indexed cell,
 *                           and only it stores
 *   tgl_index_one_hot*      one_hot, a thread per output element
 *
 * Every kernel is a grid-stride loop over independent items (thread per
 * output element: coalesced stores, and coalesced loads along the last
 * axis when the source's last stride is 1), so any block size and grid
 * give the same result (cuda_int.h's rules).
 */

/* ---- element access ----------------------------------------------------------- */

/* Integer value of element off of an integer array of dtype dt. */
static __device__ __forceinline__ long long idx_load_int(int dt, const void *p, int64_t off)
{
    switch (dt) {
    case TGL_IDX_I32: return ((const int32_t *)p)[off];
    case TGL_IDX_I64: return ((const long long *)p)[off];
    default: return ((const unsigned char *)p)[off]; /* uint8, bool */
    }
}

static __device__ __forceinline__ double idx_load_double(int dt, const void *p, int64_t off)
{
    switch (dt) {
    case TGL_IDX_F32: return ((const float *)p)[off];
    case TGL_IDX_F64: return ((const double *)p)[off];
    case TGL_IDX_I32: return ((const int32_t *)p)[off];
    case TGL_IDX_I64: return (double)((const long long *)p)[off];
    case TGL_IDX_U8: return ((const unsigned char *)p)[off];
    default: return ((const unsigned char *)p)[off] != 0;
    }
}

/* engine/dtype.c's clamp_to_int: truncation, saturation, NaN -> 0. */
static __device__ __forceinline__ long long idx_clamp(double v, double lo, double hi)
{
    if (isnan(v))
        return 0;
    if (v <= lo)
        return (long long)lo;
    if (v >= hi)
        return (long long)hi;
    return (long long)v;
}

/* engine/array.c's element conversion (copy_elements): integer to integer
 * wraps (bool: != 0), int64 to float32 rounds once, the rest goes through
 * double with tgl_store_from_double's saturating integer casts. */
static __device__ void idx_convert(int sdt, const void *s, int64_t so, int ddt, void *d,
                                   int64_t doff)
{
    bool sint = sdt >= TGL_IDX_I32, dint = ddt >= TGL_IDX_I32;
    if (sint && dint) {
        long long v = idx_load_int(sdt, s, so);
        switch (ddt) {
        case TGL_IDX_I32: ((int32_t *)d)[doff] = (int32_t)(uint32_t)(unsigned long long)v; break;
        case TGL_IDX_I64: ((long long *)d)[doff] = v; break;
        case TGL_IDX_U8: ((unsigned char *)d)[doff] = (unsigned char)(unsigned long long)v; break;
        default: ((unsigned char *)d)[doff] = v != 0; break;
        }
        return;
    }
    if (sdt == TGL_IDX_I64 && ddt == TGL_IDX_F32) {
        ((float *)d)[doff] = (float)((const long long *)s)[so];
        return;
    }
    double v = idx_load_double(sdt, s, so);
    switch (ddt) {
    case TGL_IDX_F32: ((float *)d)[doff] = (float)v; break;
    case TGL_IDX_F64: ((double *)d)[doff] = v; break;
    case TGL_IDX_I32: ((int32_t *)d)[doff] = (int32_t)idx_clamp(v, -2147483648.0, 2147483647.0); break;
    case TGL_IDX_I64:
        if (isnan(v))
            ((long long *)d)[doff] = 0;
        else if (v >= 9223372036854775808.0)
            ((long long *)d)[doff] = 9223372036854775807LL;
        else if (v <= -9223372036854775808.0)
            ((long long *)d)[doff] = -9223372036854775807LL - 1;
        else
            ((long long *)d)[doff] = (long long)v;
        break;
    case TGL_IDX_U8: ((unsigned char *)d)[doff] = (unsigned char)idx_clamp(v, 0.0, 255.0); break;
    default: ((unsigned char *)d)[doff] = v != 0.0; break;
    }
}

/* ---- copies ------------------------------------------------------------------- */

TGL_KERNEL(tgl_index_copy, tgl_idx_copy_args)
{
    TGL_GRID_LOOP(i, a.n) {
        int64_t rem = i, doff = 0, soff = 0;
        for (int d = a.nd - 1; d >= 0; d--) {
            int64_t c = rem % a.shape[d];
            rem /= a.shape[d];
            doff += c * a.ds[d];
            soff += c * a.ss[d];
        }
        if (a.sdt != a.ddt) {
            idx_convert(a.sdt, a.src, soff, a.ddt, a.dst, doff);
        } else if (a.sdt == TGL_IDX_F64 || a.sdt == TGL_IDX_I64) {
            ((unsigned long long *)a.dst)[doff] = ((const unsigned long long *)a.src)[soff];
        } else if (a.sdt == TGL_IDX_F32 || a.sdt == TGL_IDX_I32) {
            ((unsigned int *)a.dst)[doff] = ((const unsigned int *)a.src)[soff];
        } else {
            ((unsigned char *)a.dst)[doff] = ((const unsigned char *)a.src)[soff];
        }
    }
}

/* ---- basic inc/set_subtensor -------------------------------------------------- */

/* a + b as the CPU's row_apply adds: integers wrap (computed unsigned),
 * bool is logical or. */
template <typename T> struct idx_add {
    static __device__ __forceinline__ T f(T x, T y) { return x + y; }
};
template <> struct idx_add<int32_t> {
    static __device__ __forceinline__ int32_t f(int32_t x, int32_t y)
    {
        return (int32_t)((uint32_t)x + (uint32_t)y);
    }
};
template <> struct idx_add<long long> {
    static __device__ __forceinline__ long long f(long long x, long long y)
    {
        return (long long)((unsigned long long)x + (unsigned long long)y);
    }
};
template <> struct idx_add<unsigned char> {
    static __device__ __forceinline__ unsigned char f(unsigned char x, unsigned char y)
    {
        return (unsigned char)(x + y);
    }
};
/* bool: a distinct type name for the template (same storage as uint8). */
struct idx_bool {
    unsigned char b;
};
template <> struct idx_add<idx_bool> {
    static __device__ __forceinline__ idx_bool f(idx_bool x, idx_bool y)
    {
        idx_bool r;
        r.b = (unsigned char)(x.b || y.b);
        return r;
    }
};

template <typename T, bool ADD> static __device__ void idx_update(const tgl_idx_update_args &a)
{
    T *out = (T *)a.out + a.off;
    const T *v = (const T *)a.v;
    TGL_GRID_LOOP(i, a.n) {
        int64_t rem = i, oo = 0, vo = 0;
        for (int d = a.nd - 1; d >= 0; d--) {
            int64_t c = rem % a.shape[d];
            rem /= a.shape[d];
            oo += c * a.os[d];
            vo += c * a.vs[d];
        }
        out[oo] = ADD ? idx_add<T>::f(out[oo], v[vo]) : v[vo];
    }
}

#define IDX_UPDATE(name, T, ADD)                                                              \
    TGL_KERNEL(tgl_index_update_##name, tgl_idx_update_args) { idx_update<T, ADD>(a); }
IDX_UPDATE(f32_add, float, true)
IDX_UPDATE(f64_add, double, true)
IDX_UPDATE(i32_add, int32_t, true)
IDX_UPDATE(i64_add, long long, true)
IDX_UPDATE(u8_add, unsigned char, true)
IDX_UPDATE(bool_add, idx_bool, true)
IDX_UPDATE(set1, unsigned char, false)
IDX_UPDATE(set4, unsigned int, false)
IDX_UPDATE(set8, unsigned long long, false)

/* ---- advanced indexing: positions --------------------------------------------- */

TGL_KERNEL(tgl_index_positions, tgl_idx_positions_args)
{
    TGL_GRID_LOOP(b, a.nb) {
        int64_t c[TGL_IDX_MAXD], rem = b;
        for (int d = a.bnd - 1; d >= 0; d--) {
            c[d] = rem % a.bshape[d];
            rem /= a.bshape[d];
        }
        int64_t off = 0, cell = 0;
        bool bad = false;
        for (int j = 0; j < a.k; j++) {
            int64_t e = 0;
            for (int d = 0; d < a.bnd; d++)
                e += c[d] * a.is[j][d];
            long long v = a.is32[j] ? (long long)((const int32_t *)a.ix[j])[e]
                                    : ((const long long *)a.ix[j])[e];
            long long i = v > 0 ? v - 1 : v + a.len[j];
            if (v == 0 || i < 0 || i >= a.len[j])
                bad = true;
            off += i * a.ts[j];
            cell += i * a.cs[j];
        }
        if (bad)
            atomicMin(a.err, (long long)b);
        a.pos[b] = bad ? 0 : off;
        if (a.cell)
            a.cell[b] = bad ? 0 : cell;
    }
}

/* ---- advanced indexing: the walks --------------------------------------------- */

/* The walk's offsets of result element i: into the target (t) and into the
 * result-shaped side (r), and its broadcast index position b. */
static __device__ __forceinline__ void idx_walk_at(const tgl_idx_walk_args &a, int64_t i,
                                                   int64_t *toff, int64_t *roff, int64_t *b)
{
    int64_t rem = i, to = 0, ro = 0, bb = 0, bm = 1;
    for (int d = a.rnd - 1; d >= 0; d--) {
        int64_t s = a.rshape[d], c = rem % s;
        rem /= s;
        to += c * a.ts[d];
        ro += c * a.rs[d];
        if (d >= a.first && d < a.first + a.bnd) {
            bb += c * bm;
            bm *= s;
        }
    }
    *toff = to + a.pos[bb];
    *roff = ro;
    *b = bb;
}

template <typename T> static __device__ void idx_gather(const tgl_idx_walk_args &a)
{
    TGL_GRID_LOOP(i, a.n) {
        int64_t to, ro, b;
        idx_walk_at(a, i, &to, &ro, &b);
        ((T *)a.r)[ro] = ((const T *)a.t)[to];
    }
}
TGL_KERNEL(tgl_index_gather1, tgl_idx_walk_args) { idx_gather<unsigned char>(a); }
TGL_KERNEL(tgl_index_gather4, tgl_idx_walk_args) { idx_gather<unsigned int>(a); }
TGL_KERNEL(tgl_index_gather8, tgl_idx_walk_args) { idx_gather<unsigned long long>(a); }

/* Adding: repeated positions meet on one element, so every add is atomic
 * (floats then sum in the order the atomics land: within rounding of the
 * CPU's C-order sum; integers wrap as there). */
template <typename T> struct idx_atomic_add;
template <> struct idx_atomic_add<float> {
    static __device__ __forceinline__ void f(const tgl_idx_walk_args &a, int64_t to, float v)
    {
        atomicAdd((float *)a.t + to, v);
    }
};
template <> struct idx_atomic_add<double> {
    static __device__ __forceinline__ void f(const tgl_idx_walk_args &a, int64_t to, double v)
    {
        atomicAdd((double *)a.t + to, v);
    }
};
template <> struct idx_atomic_add<int32_t> {
    static __device__ __forceinline__ void f(const tgl_idx_walk_args &a, int64_t to, int32_t v)
    {
        atomicAdd((int *)a.t + to, (int)v);
    }
};
template <> struct idx_atomic_add<long long> {
    static __device__ __forceinline__ void f(const tgl_idx_walk_args &a, int64_t to, long long v)
    {
        /* two's complement: the unsigned sum wraps as the CPU's does */
        atomicAdd((unsigned long long *)a.t + to, (unsigned long long)v);
    }
};
template <> struct idx_atomic_add<unsigned char> {
    /* no byte atomics: a uint32 accumulator per target element, added in
     * by tgl_index_acc_u8 (the low 8 bits wrap as the CPU's sum does) */
    static __device__ __forceinline__ void f(const tgl_idx_walk_args &a, int64_t to,
                                             unsigned char v)
    {
        if (v)
            atomicAdd((int *)a.acc + to, (int)v);
    }
};
template <> struct idx_atomic_add<idx_bool> {
    /* x or v: every writer stores the same 1 */
    static __device__ __forceinline__ void f(const tgl_idx_walk_args &a, int64_t to, idx_bool v)
    {
        if (v.b)
            ((unsigned char *)a.t)[to] = 1;
    }
};

template <typename T> static __device__ void idx_scatter_add(const tgl_idx_walk_args &a)
{
    TGL_GRID_LOOP(i, a.n) {
        int64_t to, ro, b;
        idx_walk_at(a, i, &to, &ro, &b);
        idx_atomic_add<T>::f(a, to, ((const T *)a.r)[ro]);
    }
}
TGL_KERNEL(tgl_index_scatter_f32, tgl_idx_walk_args) { idx_scatter_add<float>(a); }
TGL_KERNEL(tgl_index_scatter_f64, tgl_idx_walk_args) { idx_scatter_add<double>(a); }
TGL_KERNEL(tgl_index_scatter_i32, tgl_idx_walk_args) { idx_scatter_add<int32_t>(a); }
TGL_KERNEL(tgl_index_scatter_i64, tgl_idx_walk_args) { idx_scatter_add<long long>(a); }
TGL_KERNEL(tgl_index_scatter_u8, tgl_idx_walk_args) { idx_scatter_add<unsigned char>(a); }
TGL_KERNEL(tgl_index_scatter_bool, tgl_idx_walk_args) { idx_scatter_add<idx_bool>(a); }

TGL_KERNEL(tgl_index_acc_u8, tgl_idx_acc_args)
{
    TGL_GRID_LOOP(i, a.n) {
        unsigned int s = a.acc[i];
        if (s)
            a.t[i] = (unsigned char)(a.t[i] + s);
    }
}

/* Setting: for a fixed pre/post position the CPU writes in increasing b,
 * so the highest b among those naming the same cell is the one left. */
TGL_KERNEL(tgl_index_winner, tgl_idx_walk_args)
{
    TGL_GRID_LOOP(b, a.nb) {
        atomicMax(a.winner + a.cell[b], (long long)b);
    }
}

template <typename T> static __device__ void idx_scatter_set(const tgl_idx_walk_args &a)
{
    TGL_GRID_LOOP(i, a.n) {
        int64_t to, ro, b;
        idx_walk_at(a, i, &to, &ro, &b);
        if (a.winner[a.cell[b]] == (long long)b)
            ((T *)a.t)[to] = ((const T *)a.r)[ro];
    }
}
TGL_KERNEL(tgl_index_scatter_set1, tgl_idx_walk_args) { idx_scatter_set<unsigned char>(a); }
TGL_KERNEL(tgl_index_scatter_set4, tgl_idx_walk_args) { idx_scatter_set<unsigned int>(a); }
TGL_KERNEL(tgl_index_scatter_set8, tgl_idx_walk_args) { idx_scatter_set<unsigned long long>(a); }

/* ---- one_hot -------------------------------------------------------------------- */

template <typename T> static __device__ void idx_one_hot(const tgl_idx_one_hot_args &a)
{
    TGL_GRID_LOOP(e, a.n) {
        int64_t cls = e % a.ncls, li = e / a.ncls, rem = li, lo = 0;
        int64_t oo = cls * a.os[a.nd];
        for (int d = a.nd - 1; d >= 0; d--) {
            int64_t c = rem % a.shape[d];
            rem /= a.shape[d];
            lo += c * a.ls[d];
            oo += c * a.os[d];
        }
        long long v = idx_load_int(a.ldt, a.labels, lo);
        if (cls == 0 && (v < 1 || v > a.ncls))
            atomicMin(a.err, (long long)li);
        ((T *)a.out)[oo] = v == cls + 1 ? (T)a.one : (T)0;
    }
}
TGL_KERNEL(tgl_index_one_hot1, tgl_idx_one_hot_args) { idx_one_hot<unsigned char>(a); }
TGL_KERNEL(tgl_index_one_hot4, tgl_idx_one_hot_args) { idx_one_hot<unsigned int>(a); }
TGL_KERNEL(tgl_index_one_hot8, tgl_idx_one_hot_args) { idx_one_hot<unsigned long long>(a); }
