/*
 * abi_layout.c — the C compiler's view of tgl.h's public structs and
 * constants (#defines and enumerators), printed for spec/cdef_spec.lua, which compares it with what
 * LuaJIT makes of the generated FFI declarations (tgl.cdef).  The spec
 * fails when a struct or field of tgl.h is missing below, so this list
 * grows with the header.
 *
 * Output, one tab-separated record per line:
 *   struct  <name> <sizeof> <alignof>
 *   field   <struct> <field> <offsetof> <sizeof>
 *   define  <name> <integer value>
 *   enum    <name> <value of the enumerator>
 *   string  <name> <text>
 */
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>

#include "tgl.h"

#define STRUCTS(S, F)                                                     \
    S(tgl_array)                                                          \
    F(tgl_array, data) F(tgl_array, shape) F(tgl_array, strides)          \
    F(tgl_array, size) F(tgl_array, ndim) F(tgl_array, dtype_id)          \
    F(tgl_array, refcount) F(tgl_array, flags) F(tgl_array, storage)      \
    F(tgl_array, device) F(tgl_array, reserved)                           \
    S(tgl_npz)                                                            \
    F(tgl_npz, n) F(tgl_npz, names) F(tgl_npz, arrays)                    \
    S(tgl_type)                                                           \
    F(tgl_type, dtype) F(tgl_type, ndim) F(tgl_type, bcast)               \
    S(tgl_params)                                                         \
    F(tgl_params, n) F(tgl_params, flags) F(tgl_params, i) F(tgl_params, f) \
    S(tgl_compile_options)                                                \
    F(tgl_compile_options, linker) F(tgl_compile_options, profile)        \
    F(tgl_compile_options, name) F(tgl_compile_options, mode)             \
    S(tgl_scan_spec)                                                      \
    F(tgl_scan_spec, name) F(tgl_scan_spec, nseq) F(tgl_scan_spec, seq_ntaps) \
    F(tgl_scan_spec, seq_taps) F(tgl_scan_spec, nrec) F(tgl_scan_spec, rec_ntaps) \
    F(tgl_scan_spec, rec_taps) F(tgl_scan_spec, nnofb) F(tgl_scan_spec, nnonseq) \
    F(tgl_scan_spec, has_until) F(tgl_scan_spec, reverse)                 \
    F(tgl_scan_spec, truncate_gradient) F(tgl_scan_spec, inner_in)        \
    F(tgl_scan_spec, inner_out) F(tgl_scan_spec, n_steps) F(tgl_scan_spec, seqs) \
    F(tgl_scan_spec, inits) F(tgl_scan_spec, nonseqs) F(tgl_scan_spec, keep) \
    S(tgl_cuda_mem_stats)                                                 \
    F(tgl_cuda_mem_stats, allocated) F(tgl_cuda_mem_stats, reserved)      \
    F(tgl_cuda_mem_stats, peak) F(tgl_cuda_mem_stats, n_allocs)           \
    F(tgl_cuda_mem_stats, n_frees) F(tgl_cuda_mem_stats, n_cache_hits)    \
    F(tgl_cuda_mem_stats, n_driver_allocs) F(tgl_cuda_mem_stats, n_ooms)

#define DEFINES(D)                                                        \
    D(TGL_VERSION_MAJOR) D(TGL_VERSION_MINOR) D(TGL_VERSION_PATCH)        \
    D(TGL_MAX_DIMS) D(TGL_ALIGN) D(TGL_ARRAY_CONTIGUOUS) D(TGL_MAX_PARAMS)  \
    D(TGL_FILE_NPY) D(TGL_FILE_NPZ)                                       \
    D(TGL_IDX_INDEX) D(TGL_IDX_SLICE) D(TGL_IDX_KIND_MASK)                \
    D(TGL_IDX_START_INPUT) D(TGL_IDX_STOP_INPUT) D(TGL_IDX_STEP_INPUT)    \
    D(TGL_IDX_NO_START) D(TGL_IDX_NO_STOP) D(TGL_IDX_LUA)                 \
    D(TGL_INC_SET) D(TGL_REDUCE_KEEPDIMS)

/* The enumerators the Lua layer reads through ffi.C (dtype, device and
 * node-kind ids, linkers, modes, levels); the spec checks LuaJIT's values
 * against these. */
#define ENUMS(E)                                                          \
    E(TGL_OK) E(TGL_EINVAL) E(TGL_EINTERNAL)                              \
    E(TGL_FLOAT32) E(TGL_FLOAT64) E(TGL_INT32) E(TGL_INT64) E(TGL_UINT8)  \
    E(TGL_BOOL) E(TGL_NDTYPES)                                            \
    E(TGL_DEVICE_CPU) E(TGL_DEVICE_CUDA) E(TGL_NDEVICES)                  \
    E(TGL_NODE_INPUT) E(TGL_NODE_CONSTANT) E(TGL_NODE_SHARED) E(TGL_NODE_APPLY) \
    E(TGL_DISCONNECTED_RAISE) E(TGL_DISCONNECTED_ZERO)                    \
    E(TGL_OPT_NONE) E(TGL_OPT_STABILIZE) E(TGL_OPT_FAST_RUN)              \
    E(TGL_LINKER_CVM) E(TGL_LINKER_CVM_NOGC) E(TGL_LINKER_VM)             \
    E(TGL_MODE_FAST_RUN) E(TGL_MODE_FAST_COMPILE) E(TGL_MODE_DEBUG)

#define PRINT_STRUCT(s) printf("struct\t%s\t%zu\t%zu\n", #s, sizeof(s), alignof(s));
#define PRINT_FIELD(s, f) \
    printf("field\t%s\t%s\t%zu\t%zu\n", #s, #f, offsetof(s, f), sizeof(((s *)0)->f));
#define PRINT_DEFINE(d) printf("define\t%s\t%lld\n", #d, (long long)(d));
#define PRINT_ENUM(e) printf("enum\t%s\t%lld\n", #e, (long long)(e));

int main(void)
{
    STRUCTS(PRINT_STRUCT, PRINT_FIELD)
    DEFINES(PRINT_DEFINE)
    ENUMS(PRINT_ENUM)
    printf("string\tTGL_VERSION\t%s\n", TGL_VERSION);
    return fflush(stdout) == 0 ? 0 : 1;
}
