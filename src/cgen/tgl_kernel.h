/*
 * tgl_kernel.h — the one header generated kernels see: the argument block
 * the engine passes to every generated kernel.  Nothing else from the
 * engine leaks into generated code.  cgen embeds this text at the top of
 * every kernel source, so compiling a kernel needs no include path.
 *
 * A kernel computes a fused elementwise program over an output space of
 * `ndim` axes that the launcher has already coalesced: adjacent axes that
 * are contiguous in every operand are merged, so the common case is one
 * axis.  The space is walked as rows: the last axis is the row, the
 * others are the "outer" index.  A kernel call covers rows
 * [row_begin, row_end) and, within each row, columns [col_begin, col_end)
 * (the launcher splits a single long row by columns across threads).
 *
 * Strides count elements.  An operand whose static type broadcasts an axis
 * has stride 0 there.  `unit` is 1 when every operand's last-axis stride is
 * 0 or 1 (the vectorizable path); otherwise kernels use the strides.
 * Reductions fused into a kernel accumulate into out[0] (whose strides are
 * 0 along reduced axes); the launcher has initialized it.
 */
#ifndef TGL_KERNEL_H
#define TGL_KERNEL_H

#include <stdint.h>

#define TGL_KERNEL_ABI 1
#define TGL_KERNEL_MAX_DIMS 8

typedef struct tgl_kbuf {
    void *data;                           /* element (0, ..., 0)         */
    int64_t strides[TGL_KERNEL_MAX_DIMS]; /* per axis of the space       */
} tgl_kbuf;

typedef struct tgl_kargs {
    int32_t ndim;                         /* >= 1 (a scalar is 1 x 1)    */
    int32_t unit;                         /* last-axis strides in {0, 1} */
    int64_t shape[TGL_KERNEL_MAX_DIMS];
    int64_t row_begin, row_end;           /* rows: the outer index, flat */
    int64_t col_begin, col_end;
    const tgl_kbuf *in;
    tgl_kbuf *out;
} tgl_kargs;

typedef void (*tgl_kernel_fn)(const tgl_kargs *args);

#endif /* TGL_KERNEL_H */
