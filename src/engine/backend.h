/*
 * backend.h — the seam between the engine and the devices it runs on.
 *
 * A backend is a table of function pointers, in ggml-backend's shape:
 * memory (allocate, free, fill, copy within the device and to and from the
 * host), dense linear algebra (gemm, gemv, ger, dot in float32 and
 * float64), and fused kernels (compile a fused program, wait for a
 * background compile, release, launch over arrays).  The
 * engine reaches BLAS, kernel compilation and array memory only through
 * these tables, so no engine file names OpenBLAS, src/cgen or CUDA.
 *
 * tgl_backend_get maps a device (tgl_array.device, a tgl_device) to its
 * backend, through the table src/backends.c fills (outside the engine, so
 * that no engine file names a backend).  src/cpu/backend_cpu.c is the CPU
 * one (OpenBLAS + src/cgen); a CUDA one (cuBLAS + NVRTC) plugs in the same
 * way (doc/internals.md).
 *
 * An op's meaning (types, shapes, views, pullback: engine/ops/ops.h) is
 * the same on every device; its kernel is the backend's: op_kernel gives
 * the kernel of an op on this backend (NULL: none), supports_op whether
 * it runs a node of that op with the node's input and output dtypes.  The
 * compiler binds each instruction's kernel once (tgl_backend_op_kernel),
 * so a missing kernel is a compile-time error naming the op and the
 * device, and the CVM calls the bound kernel directly.
 *
 * The memory, BLAS and fused-kernel entries never see a tgl_ctx: the
 * settings they may read arrive in a tgl_backend_opts (engine.h) that the
 * context keeps up to date, and errors come back as a status plus a
 * message in a tgl_errbuf, which the engine copies into the context.  Op
 * kernels are the exception: they run inside the engine's call, take the
 * tgl_ctx and report errors with tgl_op_error (engine/ops/ops.h), which
 * names the op, its inputs and where the node was built.  The
 * tgl_backend_* functions at the end are the engine's side of all this:
 * they pick the backend, pass the options, bind kernels, and copy errors.
 */
#ifndef TGL_BACKEND_H
#define TGL_BACKEND_H

#include "engine/engine.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tgl_fused_prog; /* engine/fused_prog.h */
struct tgl_node;  /* engine/graph.h */

/* A backend's error message; the engine copies it into the context. */
typedef struct tgl_errbuf {
    char msg[TGL_ERRMSG_SIZE];
} tgl_errbuf;

/* The head of every backend's compiled kernel (one per fused program): the
 * backend that made it, and which code it runs now, which the engine reads
 * on every run of the program (an atomic load, no call into the backend). */
typedef struct tgl_kernel_ref {
    const struct tgl_backend *backend;
    int tier; /* atomic, kept by the backend: 0 no code (the reference path),
                 1 quick code, 2 optimized code */
} tgl_kernel_ref;

/* An op's kernel on one backend.  Both take the node (its params and
 * types), the input arrays (which may be strided views) and the outputs,
 * allocated by the caller with the shapes of the op's shape function
 * (contiguous, C order, contents undefined), all on the backend's device.
 *   run    a single-output op: fills out.
 *   run_n  a multi-output op: fills every wanted output at once (out[k]
 *          NULL: not wanted); debug: the program runs in DEBUG mode.
 * An op has one or the other.  Errors: tgl_op_error on ctx. */
typedef struct tgl_op_kernel {
    tgl_status (*run)(tgl_ctx *ctx, const struct tgl_node *n, tgl_array *const *in,
                      tgl_array *out);
    tgl_status (*run_n)(tgl_ctx *ctx, const struct tgl_node *n, tgl_array *const *in,
                        tgl_array *const *out, bool debug);
} tgl_op_kernel;

/* ---- whole steps (engine/step.c) ---- */

/* The engine's callback while a backend runs a whole step (step_run):
 * cb(env, i) runs or prepares what the backend does not run itself
 * (engine/step.c says which i means what); 0 on success, else a status. */
typedef int (*tgl_step_cb)(void *env, int i);
/* What step_run returns when the step's code is not ready (yet, or ever):
 * the engine then runs the step's instructions itself. */
#define TGL_STEP_NOT_READY (-1)

/* One instruction of a whole step, as the engine hands it to the backend. */
typedef struct tgl_step_item {
    const struct tgl_fused_prog *prog; /* a fused kernel to run inline, or NULL:
                                     the function calls cb(env, i)          */
    const void *launch_cache;     /* the instruction's launch cache (its
                                     geometry: backend.launch)              */
    const int32_t *data;          /* D index of each operand: inputs, outputs */
    int32_t scratch;              /* D index of a reduction's accumulator
                                     buffer (step_inlinable asked for one), or -1 */
    int64_t acc_size;             /* elements of output 0 (a reduction's)   */
    int32_t prep;                 /* nonzero: first cb(env, -1 - i), which
                                     fills D for the caller's arrays: 0 run
                                     inline, -1 the engine ran it, else fail */
    int32_t pc;                   /* the instruction, for the source's comments */
    int32_t timed;                /* profile: cb(env, TGL_STEP_CB_START + i)
                                     before the kernel, TGL_STEP_CB_END + i after */
    int32_t fixed;                /* nonzero: the op reads and writes only the
                                     step's own buffers (and views of them),
                                     the same addresses on every run, so its
                                     device work may be captured and replayed
                                     (a CUDA Graph); zero: it follows the
                                     caller's arrays or makes fresh ones     */
} tgl_step_item;
#define TGL_STEP_CB_START (1 << 24)
#define TGL_STEP_CB_END (2 << 24)
/* For a backend that replays recorded device work (a CUDA Graph): cb(env,
 * TGL_STEP_CB_PIN + i) remembers the addresses and layouts of item i's
 * operands that are not the step's own buffers (a shared variable's
 * value, a view of one); cb(env, TGL_STEP_CB_SAME + i) then returns 0
 * while they are all as remembered, 1 when any changed (or none was
 * remembered).  Only for items with `fixed` set. */
#define TGL_STEP_CB_PIN (3 << 24)
#define TGL_STEP_CB_SAME (4 << 24)

/* ---- whole loops (src/scan: a scan's loop as one function) ----
 * A pointer the loop sets before each step t (the step's index in the
 * sequences, T - 1 - step for a reverse scan):
 *   D[d] = (char *)D[base] + off + e * bytes, e = moves ? (t + add) : 0,
 *   taken modulo mod when mod > 0 (a ring); in the order given (a view of
 *   a moving operand comes after it). */
typedef struct tgl_loop_ptr {
    int32_t d, base, moves;
    int64_t off, add, mod, bytes;
} tgl_loop_ptr;
/* After the body: memmove(D[dst], D[src], bytes) (a step's output into
 * its entry), in order. */
typedef struct tgl_loop_store {
    int32_t dst, src;
    int64_t bytes;
} tgl_loop_store;
/* The loop: per step its pointers, the body's items (as a whole step's:
 * inline kernels or cb(env, i)), its stores, then the until condition
 * (until_d >= 0: stop after the step when the scalar of dtype until_dtype
 * at D[until_d] is nonzero). */
typedef struct tgl_loop_plan {
    const tgl_step_item *items;
    int nitems;
    const tgl_loop_ptr *ptr;
    int nptr;
    const tgl_loop_store *store;
    int nstore;
    int32_t until_d;
    int until_dtype;
    int reverse;
} tgl_loop_plan;
/* loop_run's L: L[0] = T (in), L[1] = the first step to run (in), then the
 * function keeps L[2] = the step running (its t) and L[3] = the steps done
 * (out: for the callbacks, and where the loop stopped). */

typedef struct tgl_backend {
    const char *name; /* "cpu", "cuda"; part of the kernel cache key */
    int device;       /* the tgl_device it serves                    */
    /* Whether the device can be used now, initialising it on the first
     * call; a clear message when not (no GPU, no driver).  NULL: always. */
    tgl_status (*ready)(tgl_errbuf *err);

    /* ---- memory: device addresses, sizes in bytes ---- */
    /* A block of nbytes (> 0, a multiple of TGL_ALIGN), TGL_ALIGN-aligned; NULL when out of memory. */
    void *(*alloc)(size_t nbytes);
    /* Frees a block from alloc; NULL is ignored. */
    void (*free)(void *p);
    /* Sets n bytes at p to byte. */
    tgl_status (*memset)(void *p, int byte, size_t n, tgl_errbuf *err);
    /* Copies n bytes from the device (src) to host memory. */
    tgl_status (*copy_to_host)(void *host, const void *src, size_t n, tgl_errbuf *err);
    /* Copies n bytes from host memory to the device (dst). */
    tgl_status (*copy_from_host)(void *dst, const void *host, size_t n, tgl_errbuf *err);
    /* Copies n bytes within the device; the regions do not overlap. */
    tgl_status (*copy)(void *dst, const void *src, size_t n, tgl_errbuf *err);

    /* ---- BLAS: row-major, dtype TGL_FLOAT32 or TGL_FLOAT64, device pointers;
     * alpha and beta are converted to dtype ---- */
    /* c = alpha op(a) op(b) + beta c, op(a) m x k, op(b) k x n; trans_*: op is the transpose. */
    tgl_status (*gemm)(int dtype, bool trans_a, bool trans_b, int m, int n, int k, double alpha,
                       const void *a, int lda, const void *b, int ldb, double beta, void *c,
                       int ldc, tgl_errbuf *err);
    /* y = alpha op(a) x + beta y, a stored as rows x cols. */
    tgl_status (*gemv)(int dtype, bool trans, int rows, int cols, double alpha, const void *a,
                       int lda, const void *x, int incx, double beta, void *y, int incy,
                       tgl_errbuf *err);
    /* a = a + alpha x y' (a is m x n). */
    tgl_status (*ger)(int dtype, int m, int n, double alpha, const void *x, int incx,
                      const void *y, int incy, void *a, int lda, tgl_errbuf *err);
    /* *out = x . y, one element of dtype in device memory; float32 sums in double. */
    tgl_status (*dot)(int dtype, int n, const void *x, int incx, const void *y, int incy,
                      void *out, tgl_errbuf *err);
    /* Sets how many threads the backend's products may use. */
    void (*set_threads)(int n);
    /* The BLAS library and its configuration, as static text. */
    const char *(*info)(void);

    /* ---- op kernels (see above) ---- */
    /* The kernel of op (a TGL_OP_* id) on this backend, or NULL: none. */
    const tgl_op_kernel *(*op_kernel)(int op);
    /* Whether the kernel of n's op runs n, with n's input and output dtypes. */
    bool (*supports_op)(const struct tgl_node *n);

    /* ---- fused kernels (engine/fused_prog.h) ---- */
    /* Makes prog's kernel as o->compile says (its head names this backend and
     * its tier); with no working compiler it succeeds at tier 0. */
    tgl_status (*prepare)(const tgl_backend_opts *o, const struct tgl_fused_prog *prog,
                          tgl_kernel_ref **out, tgl_errbuf *err);
    /* Optional: raises the tier of k (prog's kernel, made by prepare under
     * another o->compile) to what o->compile promises, as prepare would
     * make it ('sync'/'cc': the system compiler's code now; 'tiered': in
     * the background); a kernel at tier 2 or with a background compile is
     * left as it is.  NULL: kernels keep the tier they were made with. */
    tgl_status (*upgrade)(const tgl_backend_opts *o, const struct tgl_fused_prog *prog,
                          tgl_kernel_ref *k, tgl_errbuf *err);
    /* Blocks until k's background compile, if any, has finished. */
    void (*wait)(tgl_kernel_ref *k);
    /* Frees k; a background compile is not waited for. */
    void (*release)(tgl_kernel_ref *k);
    /* Runs k (tier > 0) over in[] into out[], shaped as engine/ops/fused.c allocates them.
     * cache (may be NULL): the caller's launch cache for this program, *cache
     * NULL at first; the backend keeps what it decided from the operands'
     * layout there and reuses it while the layout is the same. */
    tgl_status (*launch)(const tgl_backend_opts *o, const struct tgl_fused_prog *prog,
                         tgl_kernel_ref *k, tgl_array *const *in, tgl_array *const *out,
                         void **cache, tgl_errbuf *err);
    /* Frees a launch cache; NULL is ignored. */
    void (*launch_cache_free)(void *cache);

    /* ---- whole steps (optional: all NULL where the backend runs none: the
     * engine then runs a bound step instruction by instruction) ----
     * The backend owns what a whole step becomes: the CPU backend a C
     * function it generates and keeps in the handle, a CUDA backend could
     * capture a graph.  The engine holds only the handle. */
    /* Whether prog's kernel can run inline in a whole step with the geometry
     * of launch_cache; *scratch_bytes: the accumulator buffer it then needs
     * (0: none). */
    bool (*step_inlinable)(const struct tgl_fused_prog *prog, const void *launch_cache,
                           size_t *scratch_bytes);
    /* Makes the handle of the whole step of items[0..n) (the plan): the CPU
     * backend renders it and compiles it with the optimizing compiler (from
     * the kernel cache, else in the background under o->compile 'tiered';
     * never with libtcc).  The handle's tier becomes 2 when its code is
     * ready, and stays 0 when there is none. */
    tgl_status (*step_prepare)(const tgl_backend_opts *o, const tgl_step_item *items, int n,
                               tgl_kernel_ref **out, tgl_errbuf *err);
    /* Whether a whole step is worth making even when none of its kernels
     * runs inline (all items call back): true for a backend that records
     * and replays the device work the callbacks issue (CUDA Graphs). */
    bool step_all_callbacks;
    /* Runs the prepared step k over D, the table of data pointers the
     * engine keeps, calling back into the engine (cb, with env) for what it
     * does not run itself: 0 when done, the nonzero status a callback
     * returned, or TGL_STEP_NOT_READY when k has no code to run. */
    int (*step_run)(tgl_kernel_ref *k, void *const *D, void *env, tgl_step_cb cb);
    /* Frees k; a background compile is not waited for.  (Waiting for one
     * is k->backend->wait, as for fused kernels.) */
    void (*step_free)(tgl_kernel_ref *k);

    /* ---- whole loops (optional; NULL: scan runs its loop step by step) ----
     * The handle of the loop of plan: its code compiled like a whole
     * step's (kernel cache, background under 'tiered'), tier 2 when ready.
     * The backend keeps the handle (with its code, found again for an equal
     * plan); the caller never frees it. */
    tgl_status (*loop_prepare)(const tgl_backend_opts *o, const tgl_loop_plan *plan,
                               tgl_kernel_ref **out, tgl_errbuf *err);
    /* Runs the loop k over D (L: tgl_loop_plan above): 0 when done, a
     * callback's nonzero status, or TGL_STEP_NOT_READY (no code yet). */
    int (*loop_run)(tgl_kernel_ref *k, void **D, int64_t *L, void *env, tgl_step_cb cb);

    /* ---- the kernel cache ---- */
    /* Deletes every cached kernel of this backend. */
    tgl_status (*cache_clear)(const tgl_backend_opts *o, tgl_errbuf *err);
    /* The cache as text, malloc'd: "directory: ...\nentries: N\nbytes: B\nmax_bytes: C\n". */
    tgl_status (*cache_info)(const tgl_backend_opts *o, char **text, tgl_errbuf *err);
    /* Waits (bounded) for the backend's background compiles (tgl_compile_wait_all,
     * and at exit); NULL where it compiles nothing in the background. */
    void (*wait_compiles)(void);

    /* ---- measured thresholds (engine/tune.h) ---- */
    /* Registers the backend's measurements and loads this machine's record
     * from the kernel cache (measuring and writing it when there is none;
     * force: always); NULL where the backend decides nothing by them.  The
     * engine calls it on the backend's first use (tgl_backend_tune). */
    void (*tune)(const tgl_backend_opts *o, bool force);
} tgl_backend;

/* ---- the engine's side ------------------------------------------------- */

/* Formats a message into e and returns st (for backends). */
tgl_status tgl_errbuf_set(tgl_errbuf *e, tgl_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Copies e's message into ctx's error and returns st. */
tgl_status tgl_errbuf_take(tgl_ctx *ctx, tgl_status st, const tgl_errbuf *e);

/* Each device's backend, NULL where this build has none (src/backends.c). */
extern const tgl_backend *const tgl_backends[TGL_NDEVICES];

/* The backend of device, or NULL when there is none (not built, or not a device). */
static inline const tgl_backend *tgl_backend_get(int device)
{
    return device >= 0 && device < TGL_NDEVICES ? tgl_backends[device] : NULL;
}
/* *be = the backend of a's device; fails naming fn when there is none. */
tgl_status tgl_backend_check(tgl_ctx *ctx, const char *fn, const tgl_array *a,
                             const tgl_backend **be);
/* Loads the record of the thresholds be measures (be->tune) on its first
 * use in this process: a flag test afterwards. */
void tgl_backend_tune(tgl_ctx *ctx, const tgl_backend *be);
/* Refreshes ctx->backend_opts from ctx's settings and interrupt flag
 * (config.c and ctx.c call it after every change). */
void tgl_backend_opts_sync(tgl_ctx *ctx);

/* Fails naming fn unless a is a cpu array (for code that reads elements on the host). */
tgl_status tgl_array_require_host(tgl_ctx *ctx, const char *fn, const tgl_array *a);
/* Copies the bytes of the element at off (in elements from a->data) into
 * elem, through a's backend (a plain copy for a cpu array): how engine code
 * outside a backend's calls reads one value of an array on any device. */
tgl_status tgl_array_read_elem(tgl_ctx *ctx, const tgl_array *a, int64_t off, void *elem);
/* *out = the element at off as a double, read as tgl_array_read_elem does. */
tgl_status tgl_array_load(tgl_ctx *ctx, const tgl_array *a, int64_t off, double *out);
/* *out = a's first element as a double, read through a's backend. */
tgl_status tgl_array_scalar(tgl_ctx *ctx, const tgl_array *a, double *out);

/* Whether an instruction of n's op calls a kernel: not when the op is a
 * view, computes nothing itself (output), has an inner program (its
 * exec_inner runs it), or is a fused program (the engine launches its
 * generated code, or runs its nodes' kernels: engine/ops/fused.c). */
bool tgl_op_needs_kernel(const struct tgl_node *n);
/* *k = the kernel of n's op on be (NULL: be is no backend), checked as the
 * compiler binds it: fails naming the op and the device when be has none,
 * or does not run it with n's dtypes. */
tgl_status tgl_backend_op_kernel(tgl_ctx *ctx, const tgl_backend *be, const struct tgl_node *n,
                                 const tgl_op_kernel **k);

/* Makes prog's kernel on device's backend (prog->kernel[device]), once per
 * program and device: later calls return at once.  Each successful call is
 * a use of the kernel (prog->kernel_users[device]), which the caller gives
 * back with tgl_backend_unuse.  The calls below take the device whose
 * kernel they mean. */
tgl_status tgl_backend_prepare(tgl_ctx *ctx, int device, struct tgl_fused_prog *prog);
/* Gives back a use of prog's kernel; the last one releases the kernel (a
 * later prepare makes it again: from the disk cache, or libtcc). */
void tgl_backend_unuse(struct tgl_fused_prog *prog, int device);
/* Which code prog runs now: 0 none (reference path), 1 quick, 2 optimized. */
int tgl_backend_tier(const struct tgl_fused_prog *prog, int device);
/* Blocks until prog's background compile, if any, has finished. */
void tgl_backend_wait(const struct tgl_fused_prog *prog, int device);
/* Frees prog's kernels (on every device) whatever their uses (the program
 * itself is going); does not wait. */
void tgl_backend_release(struct tgl_fused_prog *prog);
/* Runs prog's kernel (tier > 0) over in[] into out[] on its backend;
 * cache (may be NULL) is a launch cache the caller keeps for this program
 * (backend.launch), freed with tgl_backend_launch_cache_free. */
tgl_status tgl_backend_launch(tgl_ctx *ctx, const struct tgl_fused_prog *prog, int device,
                              tgl_array *const *in, tgl_array *const *out, void **cache);
/* Frees a launch cache made by launches of prog's kernel (NULL is ignored). */
void tgl_backend_launch_cache_free(const struct tgl_fused_prog *prog, int device, void *cache);

#endif /* TGL_BACKEND_H */
