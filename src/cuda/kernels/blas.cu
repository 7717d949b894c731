/*
 * blas.cu — the blas family's own kernels (argument structs and their
 * meaning in blas.cuh): what the products need besides cuBLAS.  Compiled
 * after prelude.cuh and blas.cuh (src/cuda/modules.c); the rules kernels
 * follow are in src/cuda/cuda_int.h.
 */

/* Element i of p (dtype dt) converted to T by a C cast: one rounding
 * (int64 to float32 directly, as the CPU's conversion does). */
template <typename T> static __device__ __forceinline__ T blas_load(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case TGL_BLAS_F32: return (T)((const float *)p)[i];
    case TGL_BLAS_F64: return (T)((const double *)p)[i];
    case TGL_BLAS_I32: return (T)((const int32_t *)p)[i];
    case TGL_BLAS_I64: return (T)((const int64_t *)p)[i];
    default: return (T)((const uint8_t *)p)[i]; /* uint8, bool (0 or 1) */
    }
}

TGL_KERNEL(blas_copy, tgl_blas_copy_args)
{
    TGL_GRID_LOOP(i, a.n)
    {
        int64_t r = i, so = 0, d_off = 0;
        for (int d = a.ndim - 1; d >= 0; d--) {
            int64_t q = r % a.shape[d];
            r /= a.shape[d];
            so += q * a.sstride[d];
            d_off += q * a.dstride[d];
        }
        switch (a.ddt) {
        case TGL_BLAS_F32: ((float *)a.dst)[d_off] = blas_load<float>(a.src, a.sdt, so); break;
        case TGL_BLAS_F64: ((double *)a.dst)[d_off] = blas_load<double>(a.src, a.sdt, so); break;
        case TGL_BLAS_I32: ((int32_t *)a.dst)[d_off] = blas_load<int32_t>(a.src, a.sdt, so); break;
        case TGL_BLAS_I64: ((int64_t *)a.dst)[d_off] = blas_load<int64_t>(a.src, a.sdt, so); break;
        case TGL_BLAS_U8: ((uint8_t *)a.dst)[d_off] = blas_load<uint8_t>(a.src, a.sdt, so); break;
        default: ((uint8_t *)a.dst)[d_off] = blas_load<double>(a.src, a.sdt, so) != 0; break;
        }
    }
}

TGL_KERNEL(blas_scale, tgl_blas_scale_args)
{
    if (a.dt == TGL_BLAS_F32) {
        float *p = (float *)a.p;
        TGL_GRID_LOOP(i, a.n)
        p[i] = (float)(a.beta * (double)p[i]);
    } else {
        double *p = (double *)a.p;
        TGL_GRID_LOOP(i, a.n)
        p[i] = a.beta * p[i];
    }
}

/* One output element per thread: k products in a row. */
template <typename T, typename ACC> static __device__ void blas_prod_thread_t(const tgl_blas_prod_args &a)
{
    const T *A = (const T *)a.a, *B = (const T *)a.b;
    T *C = (T *)a.c;
    TGL_GRID_LOOP(o, a.batch * a.m * a.n)
    {
        int64_t j = o % a.n, t = o / a.n, i = t % a.m, b = t / a.m;
        const T *pa = A + b * a.as_b + i * a.as_r;
        const T *pb = B + b * a.bs_b + j * a.bs_c;
        ACC s = 0;
        for (int64_t p = 0; p < a.k; p++)
            s += (ACC)pa[p * a.as_c] * (ACC)pb[p * a.bs_r];
        C[b * a.cs_b + i * a.cs_r + j * a.cs_c] = (T)s;
    }
}

/* One output element per block (outputs strided by gridDim.x): the k
 * products shared over the block's threads and summed. */
template <typename T, typename ACC>
static __device__ void blas_prod_block_t(const tgl_blas_prod_args &a, ACC *scratch)
{
    const T *A = (const T *)a.a, *B = (const T *)a.b;
    T *C = (T *)a.c;
    const int64_t total = a.batch * a.m * a.n;
    for (int64_t o = blockIdx.x; o < total; o += gridDim.x) {
        int64_t j = o % a.n, t = o / a.n, i = t % a.m, b = t / a.m;
        const T *pa = A + b * a.as_b + i * a.as_r;
        const T *pb = B + b * a.bs_b + j * a.bs_c;
        ACC s = 0;
        for (int64_t p = threadIdx.x; p < a.k; p += blockDim.x)
            s += (ACC)pa[p * a.as_c] * (ACC)pb[p * a.bs_r];
        s = tgl_block_sum(s, scratch);
        if (threadIdx.x == 0)
            C[b * a.cs_b + i * a.cs_r + j * a.cs_c] = (T)s;
    }
}

TGL_KERNEL(blas_prod_thread, tgl_blas_prod_args)
{
    switch (a.dt) {
    case TGL_BLAS_F32: blas_prod_thread_t<float, double>(a); break;
    case TGL_BLAS_F64: blas_prod_thread_t<double, double>(a); break;
    case TGL_BLAS_I32: blas_prod_thread_t<int32_t, uint64_t>(a); break;
    case TGL_BLAS_I64: blas_prod_thread_t<int64_t, uint64_t>(a); break;
    default: blas_prod_thread_t<uint8_t, uint64_t>(a); break;
    }
}

TGL_KERNEL(blas_prod_block, tgl_blas_prod_args)
{
    __shared__ double sd[32];
    __shared__ uint64_t su[32];
    switch (a.dt) {
    case TGL_BLAS_F32: blas_prod_block_t<float, double>(a, sd); break;
    case TGL_BLAS_F64: blas_prod_block_t<double, double>(a, sd); break;
    case TGL_BLAS_I32: blas_prod_block_t<int32_t, uint64_t>(a, su); break;
    case TGL_BLAS_I64: blas_prod_block_t<int64_t, uint64_t>(a, su); break;
    default: blas_prod_block_t<uint8_t, uint64_t>(a, su); break;
    }
}

/* Block `part` of output o sums products part*blockDim + t, stepping by
 * nsplit*blockDim (coalesced along a unit-stride vector). */
template <typename T, typename ACC>
static __device__ void blas_prod_partial_t(const tgl_blas_prod_args &a, ACC *scratch)
{
    const T *A = (const T *)a.a, *B = (const T *)a.b;
    ACC *P = (ACC *)a.partial;
    const int64_t total = a.batch * a.m * a.n * a.nsplit;
    const int64_t step = a.nsplit * blockDim.x;
    for (int64_t q = blockIdx.x; q < total; q += gridDim.x) {
        int64_t part = q % a.nsplit, o = q / a.nsplit;
        int64_t j = o % a.n, t = o / a.n, i = t % a.m, b = t / a.m;
        const T *pa = A + b * a.as_b + i * a.as_r;
        const T *pb = B + b * a.bs_b + j * a.bs_c;
        ACC s = 0;
        for (int64_t p = part * blockDim.x + threadIdx.x; p < a.k; p += step)
            s += (ACC)pa[p * a.as_c] * (ACC)pb[p * a.bs_r];
        s = tgl_block_sum(s, scratch);
        if (threadIdx.x == 0)
            P[q] = s;
    }
}

template <typename T, typename ACC>
static __device__ void blas_prod_finish_t(const tgl_blas_prod_args &a, ACC *scratch)
{
    const ACC *P = (const ACC *)a.partial;
    T *C = (T *)a.c;
    const int64_t total = a.batch * a.m * a.n;
    for (int64_t o = blockIdx.x; o < total; o += gridDim.x) {
        int64_t j = o % a.n, t = o / a.n, i = t % a.m, b = t / a.m;
        ACC s = 0;
        for (int64_t p = threadIdx.x; p < a.nsplit; p += blockDim.x)
            s += P[o * a.nsplit + p];
        s = tgl_block_sum(s, scratch);
        if (threadIdx.x == 0)
            C[b * a.cs_b + i * a.cs_r + j * a.cs_c] = (T)s;
    }
}

TGL_KERNEL(blas_prod_partial, tgl_blas_prod_args)
{
    __shared__ double sd[32];
    __shared__ uint64_t su[32];
    switch (a.dt) {
    case TGL_BLAS_F32: blas_prod_partial_t<float, double>(a, sd); break;
    case TGL_BLAS_F64: blas_prod_partial_t<double, double>(a, sd); break;
    case TGL_BLAS_I32: blas_prod_partial_t<int32_t, uint64_t>(a, su); break;
    case TGL_BLAS_I64: blas_prod_partial_t<int64_t, uint64_t>(a, su); break;
    default: blas_prod_partial_t<uint8_t, uint64_t>(a, su); break;
    }
}

TGL_KERNEL(blas_prod_finish, tgl_blas_prod_args)
{
    __shared__ double sd[32];
    __shared__ uint64_t su[32];
    switch (a.dt) {
    case TGL_BLAS_F32: blas_prod_finish_t<float, double>(a, sd); break;
    case TGL_BLAS_F64: blas_prod_finish_t<double, double>(a, sd); break;
    case TGL_BLAS_I32: blas_prod_finish_t<int32_t, uint64_t>(a, su); break;
    case TGL_BLAS_I64: blas_prod_finish_t<int64_t, uint64_t>(a, su); break;
    default: blas_prod_finish_t<uint8_t, uint64_t>(a, su); break;
    }
}
