/*
 * render_cuda.c — fused elementwise programs rendered as CUDA kernels
 * (render_cuda.h: the ABI), the CUDA dialect of the device-neutral
 * renderer (expr.h) around them.
 *
 * The dialect differs from the host compilers' C in three places: math
 * functions are CUDA's built-in device functions, not declared (expf,
 * log1pf...: the precise ones; the intrinsics such as __expf are not
 * exact enough for the reference's results); float constants are written
 * as their bits (__int_as_float, __longlong_as_double), which is exact
 * and needs neither hex-float literals (C++17) nor a NaN or infinity
 * constant in memory the device cannot read; helpers are __device__
 * functions.  Under NVRTC there is no <stdint.h>: the source defines the
 * fixed-width types itself.
 */
#include "cgen/render_cuda.h"
#include "cgen/expr.h"

#include <stdio.h>
#include <stdlib.h>

/* The kernel's parameter space (4 KiB on every device) holds the space
 * and the operands, passed by value. */
#define PARAM_BYTES 4096
_Static_assert(sizeof(tgl_cuda_space) == 80 && sizeof(tgl_cuda_operand) == 72,
               "the source's tgl_cuda_space and tgl_cuda_operand have these sizes");

static const tgl_cgen_dialect cuda = {
    .type = {[TGL_FLOAT32] = "float", [TGL_FLOAT64] = "double", [TGL_INT32] = "int32_t",
             [TGL_INT64] = "int64_t", [TGL_UINT8] = "uint8_t", [TGL_BOOL] = "uint8_t"},
    .f32_suffix = "f",
    .f32_from_bits = "__int_as_float",
    .f64_from_bits = "__longlong_as_double",
    .declare_math = false,
    .fn = "static __device__ __forceinline__",
};

/* What every source opens with: the fixed-width types and the ABI's
 * structs (render_cuda.h has the host's view). */
static const char head[] =
    "#if defined(__CUDACC_RTC__)\n"
    "typedef signed char int8_t;\n"
    "typedef unsigned char uint8_t;\n"
    "typedef int int32_t;\n"
    "typedef unsigned int uint32_t;\n"
    "typedef long long int64_t;\n"
    "typedef unsigned long long uint64_t;\n"
    "#else\n"
    "#include <stdint.h>\n"
    "#endif\n"
    "#define TGL_CUDA_MAX_DIMS 8\n"
    "typedef struct tgl_cuda_space {\n"
    "    int64_t n;\n"
    "    int64_t ndim;\n"
    "    int64_t shape[TGL_CUDA_MAX_DIMS];\n"
    "} tgl_cuda_space;\n"
    "typedef struct tgl_cuda_operand {\n"
    "    void *data;\n"
    "    int64_t strides[TGL_CUDA_MAX_DIMS];\n"
    "} tgl_cuda_operand;\n";

/* Whether the program broadcasts input j on every axis: one element, at
 * offset 0 on the flat path. */
static bool scalar_input(const tgl_fused_prog *p, int j)
{
    for (int d = 0; d < p->ndim; d++)
        if (!tgl_type_bcast(p->in_type[j], d))
            return false;
    return true;
}

/* The statements and stores for element k: loads and stores at the
 * offsets `at` gives per operand ("k"/"0" on the flat path, "u<j>"
 * else). */
static void body(tgl_cgen_expr *x, tgl_sb *b, char (*at)[16], const char *indent)
{
    const tgl_fused_prog *p = x->p;
    char (*text)[48] = calloc((size_t)p->nin + 1, sizeof *text);
    const char **load = calloc((size_t)p->nin + 1, sizeof *load);
    if (!text || !load) {
        free(text);
        free(load);
        x->st = x->st ? x->st : tgl_errbuf_set(x->err, TGL_ENOMEM, "cgen: out of memory");
        return;
    }
    for (int j = 0; j < p->nin; j++) {
        snprintf(text[j], sizeof text[j], "i%d[%s]", j, at[j]);
        load[j] = text[j];
    }
    for (int i = 0; i < p->ninstr && !x->st; i++) {
        tgl_sb_printf(b, "%s", indent);
        tgl_cgen_instr(x, b, i, load);
        tgl_sb_printf(b, "\n");
    }
    free(text);
    free(load);
    for (int k = 0; k < p->nout && !x->st; k++) {
        int v = p->out_instr[k];
        if (v < 0 || v >= p->ninstr) {
            tgl_cgen_fail(x, "output %d stores no instruction", k);
            return;
        }
        if (p->out_type[k].dtype != p->code[v].dtype) {
            tgl_cgen_fail(x, "output %d is %s but its instruction is %s", k,
                          tgl_dtype_name(p->out_type[k].dtype), tgl_dtype_name(p->code[v].dtype));
            return;
        }
        tgl_sb_printf(b, "%so%d[%s] = v%d;\n", indent, k, at[p->nin + k], v);
    }
}

static void kernel(tgl_cgen_expr *x, tgl_sb *b, const char *symbol)
{
    const tgl_fused_prog *p = x->p;
    int nop = p->nin + p->nout;
    char (*at)[16] = calloc((size_t)nop, sizeof *at);
    if (!at) {
        x->st = x->st ? x->st : tgl_errbuf_set(x->err, TGL_ENOMEM, "cgen: out of memory");
        return;
    }
    tgl_sb_printf(b, "/* fused program %d: %d instructions, %d inputs, %d outputs */\n", p->id,
                  p->ninstr, p->nin, p->nout);
    tgl_sb_printf(b, "extern \"C\" __global__ void %s(const tgl_cuda_space S", symbol);
    for (int j = 0; j < nop; j++)
        tgl_sb_printf(b, ", const tgl_cuda_operand a%d", j);
    tgl_sb_printf(b, ")\n{\n");
    for (int j = 0; j < p->nin; j++) {
        const char *T = tgl_cgen_type(x->d, p->in_type[j].dtype);
        tgl_sb_printf(b, "    const %s *const i%d = (const %s *)a%d.data;\n", T, j, T, j);
    }
    for (int k = 0; k < p->nout; k++) {
        const char *T = tgl_cgen_type(x->d, p->out_type[k].dtype);
        tgl_sb_printf(b, "    %s *const o%d = (%s *)a%d.data;\n", T, k, T, p->nin + k);
    }
    /* Flat: each operand steps through the space in C order (size-1 axes
     * do not count), but an input the program broadcasts everywhere,
     * which stays put. */
    tgl_sb_printf(b, "    int flat = 1;\n"
                     "    for (int64_t d = S.ndim - 1, c = 1; d >= 0; c *= S.shape[d], d--)\n"
                     "        flat = flat && (S.shape[d] == 1 || (");
    for (int j = 0; j < nop; j++)
        tgl_sb_printf(b, "%sa%d.strides[d] == %s", j ? " && " : "", j,
                      j < p->nin && scalar_input(p, j) ? "0" : "c");
    tgl_sb_printf(b, "));\n"
                     "    const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
                     "    int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
                     "    if (flat) {\n"
                     "        for (; k < S.n; k += step) {\n");
    for (int j = 0; j < nop; j++)
        snprintf(at[j], sizeof at[j], "%s", j < p->nin && scalar_input(p, j) ? "0" : "k");
    body(x, b, at, "            ");
    tgl_sb_printf(b, "        }\n        return;\n    }\n"
                     "    for (; k < S.n; k += step) {\n"
                     "        int64_t q = k");
    for (int j = 0; j < nop; j++)
        tgl_sb_printf(b, ", u%d = 0", j);
    tgl_sb_printf(b, ";\n"
                     "        for (int64_t d = S.ndim - 1; d >= 0; d--) {\n"
                     "            const int64_t x = q %% S.shape[d];\n"
                     "            q /= S.shape[d];\n");
    for (int j = 0; j < nop; j++) {
        tgl_sb_printf(b, "            u%d += x * a%d.strides[d];\n", j, j);
        snprintf(at[j], sizeof at[j], "u%d", j);
    }
    tgl_sb_printf(b, "        }\n");
    body(x, b, at, "        ");
    tgl_sb_printf(b, "    }\n}\n");
    /* The emulated GPU (cuda/drv_emu.c) calls a kernel through
     * <symbol>__emu(params) and copies its parameters, sized by
     * <symbol>__emu_psizes, into a captured graph; a CUDA compile sees
     * none of it. */
    tgl_sb_printf(b, "#ifdef TGL_CUDA_EMU\n"
                     "extern \"C\" const unsigned long long %s__emu_psizes[] = "
                     "{sizeof(tgl_cuda_space)",
                  symbol);
    for (int j = 0; j < nop; j++)
        tgl_sb_printf(b, ", sizeof(tgl_cuda_operand)");
    tgl_sb_printf(b, ", 0};\nextern \"C\" void %s__emu(void **p)\n{\n"
                     "    %s(*(const tgl_cuda_space *)p[0]",
                  symbol, symbol);
    for (int j = 0; j < nop; j++)
        tgl_sb_printf(b, ", *(const tgl_cuda_operand *)p[%d]", j + 1);
    tgl_sb_printf(b, ");\n}\n#endif\n\n");
    free(at);
}

tgl_status tgl_cgen_render_cuda(const tgl_fused_prog *const *progs, const char *const *symbols, int n,
                                char **source, tgl_errbuf *err)
{
    if (!progs || !symbols || !source || n < 1)
        return tgl_errbuf_set(err, TGL_EINVAL, "tgl_cgen_render_cuda: no program");
    tgl_cgen_expr x = {.d = &cuda, .err = err};
    tgl_sb fns = {0}, out = {0};
    for (int i = 0; i < n && !x.st; i++) {
        const tgl_fused_prog *p = progs[i];
        if (!p || !symbols[i]) {
            tgl_sb_free(&fns);
            return tgl_errbuf_set(err, TGL_EINVAL, "tgl_cgen_render_cuda: NULL program %d", i);
        }
        x.p = p;
        if (p->reduce_op >= 0) {
            x.st = tgl_errbuf_set(err, TGL_EINVAL,
                                  "cgen: program %d: the CUDA kernels have no fused reduction "
                                  "(%s over axes 0x%x)",
                                  p->id, tgl_op_name(p->reduce_op), (unsigned)p->reduce_mask);
            break;
        }
        int nop = p->nin + p->nout;
        if (nop > (PARAM_BYTES - (int)sizeof(tgl_cuda_space)) / (int)sizeof(tgl_cuda_operand)) {
            x.st = tgl_errbuf_set(err, TGL_EINVAL,
                                  "cgen: program %d: %d operands do not fit a CUDA kernel's "
                                  "parameters",
                                  p->id, nop);
            break;
        }
        if (p->ndim < 0 || p->ndim > TGL_CUDA_MAX_DIMS || p->nout < 1 || p->ninstr < 1 ||
            p->nin < 0) {
            tgl_cgen_fail(&x, "%d axes, %d inputs, %d outputs, %d instructions", p->ndim, p->nin,
                          p->nout, p->ninstr);
            break;
        }
        kernel(&x, &fns, symbols[i]);
    }
    tgl_sb_printf(&out, "/* tgl fused CUDA kernels: %d */\n%s\n", n, head);
    tgl_cgen_prelude(&x, &out);
    tgl_sb_cat(&out, &fns);
    tgl_sb_free(&fns);
    if (x.st || out.oom || !out.p) {
        tgl_sb_free(&out);
        return x.st ? x.st : tgl_errbuf_set(err, TGL_ENOMEM, "cgen: out of memory");
    }
    *source = out.p;
    return TGL_OK;
}
