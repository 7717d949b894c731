/*
 * render_cuda.h — fused programs (engine/fused_prog.h) rendered as CUDA C++
 * (render_cuda.c): the source a CUDA backend compiles with NVRTC (or nvcc)
 * and launches.  Elementwise programs only: a program with a fused
 * reduction is refused.  The statements are the device-neutral renderer's
 * (expr.h), from the same TGL_ELEMWISE_OPS entries as the CPU kernels.
 *
 * The kernel ABI.  Kernel <symbol> is
 *
 *   extern "C" __global__ void <symbol>(const tgl_cuda_space S,
 *                                       const tgl_cuda_operand a0, ...)
 *
 * with one operand per input, then per output, in the program's order,
 * each passed by value (cuLaunchKernel's parameter array: &S, &a0, ...).
 * The space has the program's axes (a scalar is one axis of 1); strides
 * count elements and are 0 along an input's broadcast axes.  One thread
 * computes one element at a time over a grid-stride loop, so any grid
 * covers the space.  The kernel takes its flat path (element k at offset
 * k of every operand, or 0 for an input the program broadcasts on every
 * axis) when the strides say so, checked by the kernel itself; else it
 * finds each operand's offset from the strides.
 *
 * Under TGL_CUDA_EMU (the emulated GPU, cuda/drv_emu.c) each kernel also
 * has extern "C" void <symbol>__emu(void **params), which calls it with
 * the same parameter array, and <symbol>__emu_psizes, the parameters'
 * sizes (0-terminated).
 */
#ifndef TGL_CGEN_RENDER_CUDA_H
#define TGL_CGEN_RENDER_CUDA_H

#include "engine/backend.h"
#include "engine/fused_prog.h"

#include <stdint.h>

#define TGL_CUDA_MAX_DIMS 8

/* The host's view of the kernel's parameters (the source defines the same
 * layout: render_cuda.c checks the sizes). */
typedef struct tgl_cuda_space {
    int64_t n;                          /* elements: the product of shape */
    int64_t ndim;                       /* 1..TGL_CUDA_MAX_DIMS           */
    int64_t shape[TGL_CUDA_MAX_DIMS];
} tgl_cuda_space;

typedef struct tgl_cuda_operand {
    void *data;                         /* device address of element 0   */
    int64_t strides[TGL_CUDA_MAX_DIMS]; /* per axis of the space          */
} tgl_cuda_operand;

/* One CUDA source (*source, malloc'd) defining kernel symbols[i] for
 * progs[i], i < n: one compile for all the kernels of a function.
 * TGL_EINVAL for a program the renderer does not take (a reduction, too
 * many operands for a launch's parameters), naming the program;
 * TGL_EINTERNAL for a malformed one. */
tgl_status tgl_cgen_render_cuda(const tgl_fused_prog *const *progs, const char *const *symbols, int n,
                                char **source, tgl_errbuf *err);

#endif /* TGL_CGEN_RENDER_CUDA_H */
