/*
 * gemm_pick.h — which BLAS runs each product shape on the CPU backend
 * (gemm_pick.c): OpenBLAS, or BLIS where a one-time measurement on this
 * machine says BLIS is faster for that shape (issue 23 item 3); and
 * whether a mid-sized product splits over the pool (tgl_gemm_split_pays).
 *
 * Why: no one library wins every shape.  Measured on an AMD EPYC (Zen 3,
 * one thread, bench/gemm_shapes.c): BLIS runs the weight gradient
 * X'.d of the 784-500 layer at batch 60 and the 100x50x3000 output layer
 * 15-30% faster than OpenBLAS, and the k = 10 products (d.W2' of a
 * 10-class layer) 2-3x slower.  So the choice is made per shape, by
 * timing both on scratch operands of that shape the first time it is
 * seen, and is remembered on disk in the kernel cache directory
 * (gemm-pick-<key>.txt, keyed by the CPU model and both libraries'
 * versions), so each shape is measured once per machine.
 *
 * BLIS is optional: it is loaded with dlopen (libblis.so.4, the Debian
 * package libblis4) at the first product; without it every product runs
 * on OpenBLAS and nothing is measured.  dlopen with RTLD_LOCAL keeps its
 * CBLAS names (which clash with OpenBLAS's) out of the process.
 *
 * The environment variable TGL_BLAS_PICK=openblas|blis|auto (default
 * auto) forces one library for every product (A/B measurements, tests);
 * TGL_BLIS_LIB names the BLIS library to load instead of libblis.so.4
 * ("" loads none).  Sanitizer builds load none unless TGL_BLIS_LIB is set.
 */
#ifndef TGL_CPU_GEMM_PICK_H
#define TGL_CPU_GEMM_PICK_H

#include <stdbool.h>

typedef enum tgl_gemm_lib { TGL_GEMM_OPENBLAS = 0, TGL_GEMM_BLIS = 1 } tgl_gemm_lib;

/* The library for one product C = alpha op(A) op(B) + beta C of this
 * shape (dtype TGL_FLOAT32 or TGL_FLOAT64; m x n result, inner k; acc:
 * beta != 0, C is read: a step's fused updates W += -lr X'd and biases
 * broadcast into C accumulate, and a library's lead measured with beta 0
 * can turn into a loss with beta 1: BLIS's 784x500x60 weight gradient
 * 15% faster alone, the whole MLP step 4% slower with it).  The
 * first call for a shape may measure (a few calls of each library on
 * scratch operands, some milliseconds at most for the largest shapes).
 * Thread-safe. */
tgl_gemm_lib tgl_gemm_pick(int dtype, bool ta, bool tb, bool acc, int m, int n, int k);

/* Runs the product on `lib` (row-major, leading dimensions as CBLAS
 * takes them).  lib == TGL_GEMM_BLIS requires tgl_gemm_blis_loaded(). */
void tgl_gemm_run(tgl_gemm_lib lib, int dtype, bool ta, bool tb, int m, int n, int k,
                  double alpha, const void *a, int lda, const void *b, int ldb, double beta,
                  void *c, int ldc);

/* Runs one product of a shape on contiguous operands (op(A) m x k, op(B)
 * k x n, C m x n; alpha 1, beta 1 for an accumulating shape, else 0) as
 * the backend would: in one call on
 * the calling thread (split false) or split into its blocks over the
 * pool (true). */
typedef void (*tgl_gemm_split_fn)(void *arg, bool split, const void *a, const void *b,
                                  void *c);

/* Whether a product of this shape split into `nblocks` blocks over the
 * pool beats one call on the calling thread, as products run inside a
 * step: measured the first time the shape is seen (run on scratch
 * operands, some milliseconds; gemm_pick.c's measure_split says how) and
 * remembered in the kernel cache directory (the same file as the library
 * choices).  The backend asks only for products between the
 * calibrated blas.split_gemm and a multiple of it (smaller ones never
 * split, larger ones always do).  While another thread measures a shape,
 * false.  `run` NULL only looks the shape up (tests): an unmeasured shape
 * then gives false for this process and is not measured or recorded.
 * Thread-safe. */
bool tgl_gemm_split_pays(int dtype, bool ta, bool tb, bool acc, int m, int n, int k,
                         int nblocks, tgl_gemm_split_fn run, void *arg);

/* Whether BLIS was found (loads it on the first call). */
bool tgl_gemm_blis_loaded(void);

/* One line for `tgl -v`: BLIS's version or why it is not used, the
 * cache file, and how many shapes chose each library. */
const char *tgl_gemm_pick_info(void);

/* Tests: -1 picks by measurement (or TGL_BLAS_PICK), 0 forces OpenBLAS,
 * 1 forces BLIS (when loaded). */
void tgl_gemm_pick_force(int lib);

#endif /* TGL_CPU_GEMM_PICK_H */
