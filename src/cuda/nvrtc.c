/*
 * nvrtc.c — a whole CUDA source compiled with NVRTC into a cubin (machine
 * code for one sm_<arch>: ptxas runs inside NVRTC, so what the cache
 * stores loads without a JIT step, and a compile error in the assembler
 * shows here, not at load).  NVRTC needs no device: the compile specs
 * (spec/c/test_cuda_compile.c) call this on machines without a GPU.
 *
 * The options, and why:
 *   --gpu-architecture=sm_<arch>  a cubin for that architecture (a
 *                                 compute_<arch> target would give PTX);
 *   -std=c++17                    the kernels' dialect (templates, if
 *                                 constexpr);
 *   -default-device               helpers without __device__ are device
 *                                 functions (the prelude's and the
 *                                 renderer's are marked; this is for
 *                                 plain inline helpers in a family's .cuh);
 *   --fmad=false                  no contraction of a*b+c into one fused
 *                                 multiply-add: the CPU kernels (the
 *                                 reference the tests compare against;
 *                                 the generated ones are built with
 *                                 -ffp-contract=off, cgen/compile.c)
 *                                 round the product and the sum
 *                                 separately, and a contracted kernel
 *                                 differs from them in cancellations
 *                                 (a*b - c with a*b ~ c: no common digit
 *                                 left); the kernels are memory-bound, so
 *                                 the extra instruction costs nothing
 *                                 measurable, and products go to cuBLAS;
 *   --prec-div=true --prec-sqrt=true --ftz=false
 *                                 IEEE division and square root and
 *                                 denormals kept: NVRTC's defaults, said
 *                                 explicitly because --use_fast_math would
 *                                 flip them (it is never used: the CPU
 *                                 kernels are built without -ffast-math).
 */
#include "cuda/cuda_int.h"

#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The options after the architecture (also part of the cache key:
 * tgl_cuda_nvrtc_options). */
static const char *const fixed_options[] = {"-std=c++17", "-default-device", "--fmad=false",
                                            "--prec-div=true", "--prec-sqrt=true", "--ftz=false"};
#define NFIXED ((int)(sizeof fixed_options / sizeof fixed_options[0]))

const char *tgl_cuda_nvrtc_options(void)
{
    return "-std=c++17 -default-device --fmad=false --prec-div=true --prec-sqrt=true "
           "--ftz=false";
}

const char *tgl_cuda_nvrtc_version(void)
{
    static char text[32];
    static int done; /* written once; a race writes the same bytes */
    if (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
        int major = 0, minor = 0;
        char t[32];
        if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS)
            snprintf(t, sizeof t, "nvrtc %d.%d", major, minor);
        else
            snprintf(t, sizeof t, "nvrtc unknown");
        memcpy(text, t, sizeof t);
        __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    }
    return text;
}

/* The first lines of log (at most max_lines, at most size-1 bytes) into
 * out, joined by " | ", for a one-line error message. */
static void first_lines(const char *log, char *out, size_t size, int max_lines)
{
    size_t n = 0;
    int lines = 0;
    out[0] = '\0';
    for (const char *p = log; p && *p && lines < max_lines && n + 4 < size;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len > 0) {
            if (n > 0) {
                memcpy(out + n, " | ", 3);
                n += 3;
            }
            size_t room = size - 1 - n;
            size_t take = len < room ? len : room;
            memcpy(out + n, p, take);
            n += take;
            out[n] = '\0';
            lines++;
        }
        if (!e)
            break;
        p = e + 1;
    }
}

tgl_status tgl_cuda_nvrtc_compile(const char *source, const char *name, int arch, void **image,
                                  size_t *len, char **log, tgl_errbuf *err)
{
    *image = NULL;
    *len = 0;
    if (log)
        *log = NULL;
    if (!source || arch < 10 || arch > 999)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda: nvrtc: %s (architecture sm_%d)",
                              source ? "no such architecture" : "no source", arch);
    const char *what = name && name[0] ? name : "kernel.cu";
    nvrtcProgram prog;
    nvrtcResult r = nvrtcCreateProgram(&prog, source, what, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS)
        return tgl_errbuf_set(err, r == NVRTC_ERROR_OUT_OF_MEMORY ? TGL_ENOMEM : TGL_EINTERNAL,
                              "cuda: nvrtc: cannot create program %s: %s", what,
                              nvrtcGetErrorString(r));
    char arch_opt[48];
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=sm_%d", arch);
    const char *opts[1 + NFIXED];
    opts[0] = arch_opt;
    for (int i = 0; i < NFIXED; i++)
        opts[1 + i] = fixed_options[i];
    nvrtcResult cr = nvrtcCompileProgram(prog, 1 + NFIXED, opts);

    /* The log, on success too (warnings), for the caller. */
    char *text = NULL;
    size_t log_size = 0;
    if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
        text = malloc(log_size);
        if (text && nvrtcGetProgramLog(prog, text) != NVRTC_SUCCESS) {
            free(text);
            text = NULL;
        }
    }
    tgl_status st = TGL_OK;
    if (cr != NVRTC_SUCCESS) {
        char head[700];
        first_lines(text, head, sizeof head, 6);
        st = tgl_errbuf_set(err, cr == NVRTC_ERROR_OUT_OF_MEMORY ? TGL_ENOMEM : TGL_EINTERNAL,
                            "cuda: nvrtc could not compile %s for sm_%d (%s)%s%s", what, arch,
                            nvrtcGetErrorString(cr), head[0] ? ": " : "", head);
    } else {
        size_t n = 0;
        r = nvrtcGetCUBINSize(prog, &n);
        void *bin = r == NVRTC_SUCCESS && n > 0 ? malloc(n) : NULL;
        if (r != NVRTC_SUCCESS || n == 0)
            st = tgl_errbuf_set(err, TGL_EINTERNAL, "cuda: nvrtc gave no cubin for %s (%s)",
                                what, r == NVRTC_SUCCESS ? "empty" : nvrtcGetErrorString(r));
        else if (!bin)
            st = tgl_errbuf_set(err, TGL_ENOMEM, "cuda: nvrtc: out of memory (%zu bytes)", n);
        else if ((r = nvrtcGetCUBIN(prog, bin)) != NVRTC_SUCCESS)
            st = tgl_errbuf_set(err, TGL_EINTERNAL, "cuda: nvrtc gave no cubin for %s (%s)",
                                what, nvrtcGetErrorString(r));
        if (st) {
            free(bin);
        } else {
            *image = bin;
            *len = n;
        }
    }
    nvrtcDestroyProgram(&prog);
    if (log)
        *log = text;
    else
        free(text);
    return st;
}
