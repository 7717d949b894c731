/*
 * tgl.h — the C API of the tgl engine.
 *
 * tgl is a symbolic numerical engine: arrays, graphs of tensor expressions,
 * their derivatives, and compiled programs that run them.  This header is the
 * whole engine for C users; the Lua layer (lua/tgl) binds exactly these
 * declarations with LuaJIT FFI.
 *
 * A short tour:
 *
 *     #include <tgl.h>
 *
 *     tgl_ctx *ctx = tgl_ctx_new();          // error text, RNG and config live here
 *     tgl_array *a = NULL, *b = NULL;
 *     int64_t shape[2] = {2, 3};
 *
 *     tgl_ctx_manual_seed(ctx, 42);
 *     if (tgl_array_randn(ctx, TGL_FLOAT32, 2, shape, 0.0, 1.0, &a) != TGL_OK)
 *         fprintf(stderr, "%s\n", tgl_ctx_error(ctx));   // every call returns a status
 *
 *     float *p = a->data;                    // the descriptor is public: data,
 *     p[0] = 1.0f;                           // shape, strides (in elements), dtype
 *
 *     tgl_array_transpose(ctx, a, NULL, &b); // a 3x2 view sharing a's storage
 *     tgl_npy_save(ctx, "a.npy", a);         // NumPy's format, written atomically
 *
 *     tgl_array_release(a);                  // arrays are reference counted;
 *     tgl_array_release(b);                  // storage goes when its last view goes
 *     tgl_ctx_free(ctx);
 *
 * Conventions.  Every function that can fail returns a tgl_status and, on
 * failure, leaves a message naming the function and the problem in its
 * context (tgl_ctx_error).  Out-parameters are written only on success.
 * Axes and indices count from 0 here, as C does; the Lua layer presents
 * Lua's 1-based convention and translates at the boundary.  Strides count
 * elements, not bytes.  Array memory is 64-byte aligned and owned by C.
 */
#ifndef TGL_H
#define TGL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TGL_API __attribute__((visibility("default")))
#else
#define TGL_API
#endif

#define TGL_VERSION_MAJOR 0
#define TGL_VERSION_MINOR 1
#define TGL_VERSION_PATCH 0
#define TGL_VERSION "0.1.0"

/* Most dimensions an array may have. */
#define TGL_MAX_DIMS 8
/* Alignment of every buffer tgl allocates, in bytes. */
#define TGL_ALIGN 64

/* Status codes.  TGL_OK is zero; everything else is an error. */
typedef enum tgl_status {
    TGL_OK = 0,
    TGL_EINVAL,      /* a bad argument: wrong type, value out of range     */
    TGL_ESHAPE,      /* shapes that do not fit together                    */
    TGL_EDTYPE,      /* an unknown or unsupported dtype                    */
    TGL_ENOMEM,      /* an allocation failed                               */
    TGL_EIO,         /* a file could not be opened, read or written        */
    TGL_EFORMAT,     /* a file's contents are corrupt or unsupported       */
    TGL_EINTERRUPT,  /* stopped by an interrupt (Ctrl-C)                   */
    TGL_EINTERNAL,   /* a bug in tgl: please report it                     */
    TGL_EBUSY,       /* a frame already running a call on another thread   */
    TGL_EDIST        /* a collective failed: the processes disagree, or one
                        stopped answering (tgl.dist; the job cannot go on)  */
} tgl_status;

/* The six dtypes.  The order is part of the ABI. */
typedef enum tgl_dtype {
    TGL_FLOAT32 = 0,
    TGL_FLOAT64,
    TGL_INT32,
    TGL_INT64,
    TGL_UINT8,
    TGL_BOOL,        /* one byte per element, 0 or 1 */
    TGL_NDTYPES
} tgl_dtype;

/* ------------------------------------------------------------------------ */
/* Context: error messages, the random generator, configuration.            */
/* ------------------------------------------------------------------------ */

typedef struct tgl_ctx tgl_ctx;

/* A new context, or NULL when out of memory. */
TGL_API tgl_ctx *tgl_ctx_new(void);
/* Drops the caller's reference to a context; it is freed, with every node
 * built in it, once no compiled function uses it.  Arrays stay valid. */
TGL_API void tgl_ctx_free(tgl_ctx *ctx);
/* The message of the last failed call made with ctx ("" if none). */
TGL_API const char *tgl_ctx_error(const tgl_ctx *ctx);
/* Sets the error message (printf-style) and returns st; for extensions. */
TGL_API tgl_status tgl_ctx_set_error(tgl_ctx *ctx, tgl_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Clears the error message. */
TGL_API void tgl_ctx_clear_error(tgl_ctx *ctx);
/* Reseeds the context's generator: the counter restarts at zero. */
TGL_API void tgl_ctx_manual_seed(tgl_ctx *ctx, uint64_t seed);
/* The generator's seed and how many counter blocks it has used. */
TGL_API void tgl_ctx_rng_state(const tgl_ctx *ctx, uint64_t *seed, uint64_t *offset);
/* Restores a state returned by tgl_ctx_rng_state. */
TGL_API void tgl_ctx_set_rng_state(tgl_ctx *ctx, uint64_t seed, uint64_t offset);
/* Points the context at a flag that an interrupt handler sets to nonzero;
 * long-running calls check it and fail with TGL_EINTERRUPT.  NULL detaches. */
TGL_API void tgl_ctx_set_interrupt_flag(tgl_ctx *ctx, volatile int *flag);

/* ------------------------------------------------------------------------ */
/* Dtypes                                                                   */
/* ------------------------------------------------------------------------ */

/* "float32", ... for a dtype; NULL for an invalid one. */
TGL_API const char *tgl_dtype_name(int dtype);
/* The dtype named name (also accepts "float", "double", "int", "long",
 * "byte"), or -1 when unknown. */
TGL_API int tgl_dtype_from_name(const char *name);
/* Bytes per element; 0 for an invalid dtype. */
TGL_API size_t tgl_dtype_size(int dtype);
/* The dtype that a and b promote to: the later of the two in bool < uint8 <
 * int32 < int64 < float32 < float64 (so int64 with float32 is float32);
 * -1 if either is not a dtype.  Symmetric. */
TGL_API int tgl_dtype_promote(int a, int b);

/* ------------------------------------------------------------------------ */
/* Arrays                                                                   */
/* ------------------------------------------------------------------------ */

/* Where an array's elements live.  The numbers are part of the ABI.  The
 * array constructors make cpu arrays (host memory, data is an ordinary
 * pointer); a device array's data is that device's address and must not
 * be dereferenced on the host.  sim is a simulated device for testing
 * (doc/devices.md): host memory the host cannot read outside its
 * backend's calls, so that any direct read of device memory crashes. */
typedef enum tgl_device {
    TGL_DEVICE_CPU = 0,
    TGL_DEVICE_CUDA,
    TGL_DEVICE_SIM,
    TGL_NDEVICES
} tgl_device;

/* "cpu", "cuda", "sim" for a device; NULL for an invalid one. */
TGL_API const char *tgl_device_name(int device);

typedef struct tgl_storage tgl_storage;

/* An n-dimensional strided view of a reference-counted storage.  The fields
 * are public for reading; change them only through the functions below.
 * The layout is ABI (the Lua layer mirrors it): on LP64 targets data is at
 * byte 0, shape 8, strides 72, size 136, ndim 144, dtype_id 148, refcount
 * 152, flags 156, storage 160, device 168, reserved 172; 176 bytes in all.
 * Fields are only ever added at the end. */
typedef struct tgl_array {
    void *data;                      /* address of element (0,...,0)        */
    int64_t shape[TGL_MAX_DIMS];
    int64_t strides[TGL_MAX_DIMS];   /* in elements; may be 0 or negative   */
    int64_t size;                    /* number of elements                  */
    int32_t ndim;
    int32_t dtype_id;                /* a tgl_dtype                         */
    int32_t refcount;                /* owners of this descriptor           */
    int32_t flags;                   /* TGL_ARRAY_* bits                    */
    tgl_storage *storage;
    int32_t device;                  /* a tgl_device: where data points     */
    int32_t reserved;                /* 0; keeps the layout 8-byte aligned  */
} tgl_array;

/* flags: the elements are laid out in C order with no gaps. */
#define TGL_ARRAY_CONTIGUOUS 1

/* A new array with uninitialized contents.  shape[i] >= 0; ndim 0 is a
 * scalar. */
TGL_API tgl_status tgl_array_empty(tgl_ctx *ctx, int dtype, int ndim, const int64_t *shape,
                                   tgl_array **out);
/* A new array filled with zeros. */
TGL_API tgl_status tgl_array_zeros(tgl_ctx *ctx, int dtype, int ndim, const int64_t *shape,
                                   tgl_array **out);
/* A new array with every element set to value (converted to dtype). */
TGL_API tgl_status tgl_array_full(tgl_ctx *ctx, int dtype, int ndim, const int64_t *shape,
                                  double value, tgl_array **out);
/* A 1-d array start, start+step, ... up to and including stop when it is
 * reached exactly (the values of Lua's `for i = start, stop, step`). */
TGL_API tgl_status tgl_array_arange(tgl_ctx *ctx, int dtype, double start, double stop,
                                    double step, tgl_array **out);
/* Uniform numbers in [lo, hi) from the context's counter-based generator. */
TGL_API tgl_status tgl_array_rand(tgl_ctx *ctx, int dtype, int ndim, const int64_t *shape,
                                  double lo, double hi, tgl_array **out);
/* Normal numbers with the given mean and standard deviation. */
TGL_API tgl_status tgl_array_randn(tgl_ctx *ctx, int dtype, int ndim, const int64_t *shape,
                                   double mean, double std, tgl_array **out);

/* Adds an owner to a. */
TGL_API void tgl_array_retain(tgl_array *a);
/* Drops an owner; the descriptor is freed with its last owner and the
 * storage with its last descriptor.  NULL is ignored. */
TGL_API void tgl_array_release(tgl_array *a);

/* A view of a's storage with the given shape, strides (elements) and
 * offset (elements from a->data).  Fails if any element falls outside the
 * storage. */
TGL_API tgl_status tgl_array_view(tgl_ctx *ctx, tgl_array *a, int ndim, const int64_t *shape,
                                  const int64_t *strides, int64_t offset, tgl_array **out);
/* The same elements with a new shape: a view when a is contiguous, a copy
 * otherwise.  One entry of shape may be -1 and is then inferred. */
TGL_API tgl_status tgl_array_reshape(tgl_ctx *ctx, tgl_array *a, int ndim, const int64_t *shape,
                                     tgl_array **out);
/* A view with axes permuted: axis i of the result is axis perm[i] of a.
 * perm NULL reverses the axes. */
TGL_API tgl_status tgl_array_transpose(tgl_ctx *ctx, tgl_array *a, const int *perm,
                                       tgl_array **out);
/* A new contiguous array holding a's elements converted to dtype. */
TGL_API tgl_status tgl_array_copy(tgl_ctx *ctx, const tgl_array *a, int dtype, tgl_array **out);
/* a on device: a itself (a new reference) when it is there already, else
 * a new contiguous copy there, through the devices' backends; fails when
 * this build has no backend for device. */
TGL_API tgl_status tgl_array_to_device(tgl_ctx *ctx, tgl_array *a, int device, tgl_array **out);
/* Copies src's elements into dst (same shape; dtypes may differ). */
TGL_API tgl_status tgl_array_assign(tgl_ctx *ctx, tgl_array *dst, const tgl_array *src);
/* Reads element idx[0..ndim-1] as a double. */
TGL_API tgl_status tgl_array_get(tgl_ctx *ctx, const tgl_array *a, const int64_t *idx,
                                 double *out);
/* Writes value (converted to a's dtype) at element idx. */
TGL_API tgl_status tgl_array_set(tgl_ctx *ctx, tgl_array *a, const int64_t *idx, double value);
/* 1 when a is laid out in C order with no gaps. */
TGL_API int tgl_array_is_contiguous(const tgl_array *a);
/* 1 when a and b have the same dtype, shape and elements (bitwise for
 * floats, so NaN payloads and -0.0 count). */
TGL_API int tgl_array_equal_bits(const tgl_array *a, const tgl_array *b);
/* Bytes of array storage currently alive in this process.  The Lua layer
 * uses it to tell the garbage collector about memory it cannot see. */
TGL_API int64_t tgl_memory_live_bytes(void);

/* ------------------------------------------------------------------------ */
/* Files: NumPy .npy and .npz                                               */
/* ------------------------------------------------------------------------ */

/* Writes a as a .npy file (C order).  Writes to a temporary file in the same
 * directory and renames it into place, so a failure leaves path as it was. */
TGL_API tgl_status tgl_npy_save(tgl_ctx *ctx, const char *path, const tgl_array *a);
/* Reads a .npy file (C or Fortran order, either byte order, any of the six
 * dtypes) into a new contiguous array. */
TGL_API tgl_status tgl_npy_load(tgl_ctx *ctx, const char *path, tgl_array **out);

/* Writes n named arrays as a .npz archive (each entry "<name>.npy");
 * compress nonzero deflates the entries (np.savez_compressed).  Atomic as
 * tgl_npy_save. */
TGL_API tgl_status tgl_npz_save(tgl_ctx *ctx, const char *path, int n, const char *const *names,
                                const tgl_array *const *arrays, int compress);

/* What tgl_file_format finds at the start of a file. */
#define TGL_FILE_NPY 1   /* \x93NUMPY: a .npy file (tgl_npy_load)            */
#define TGL_FILE_NPZ 2   /* a zip archive: a .npz (tgl_npz_load)              */
/* Which format path holds, by its first bytes (not its name): *format is
 * TGL_FILE_NPY or TGL_FILE_NPZ.  Only a regular file is read: a FIFO, a
 * directory or a device fails with TGL_EIO at once (never waits for a
 * writer); an empty file or any other content is TGL_EFORMAT, quoting the
 * first bytes. */
TGL_API tgl_status tgl_file_format(tgl_ctx *ctx, const char *path, int *format);

/* The contents of a .npz archive, as read by tgl_npz_load. */
typedef struct tgl_npz {
    int n;
    char **names;        /* entry names without the ".npy" suffix */
    tgl_array **arrays;  /* owned by the tgl_npz                  */
} tgl_npz;

/* Reads every entry of a .npz archive (stored or deflated). */
TGL_API tgl_status tgl_npz_load(tgl_ctx *ctx, const char *path, tgl_npz **out);
/* Frees an archive and releases its arrays (retain those you keep). */
TGL_API void tgl_npz_free(tgl_npz *npz);

/* ------------------------------------------------------------------------ */
/* Types and graph nodes                                                    */
/* ------------------------------------------------------------------------ */

/* The static type of a node: dtype, number of dimensions, and which axes
 * are broadcastable (bit i set: axis i has size 1 and broadcasts). */
typedef struct tgl_type {
    int32_t dtype;
    int32_t ndim;
    uint32_t bcast;
} tgl_type;

/* Most integer parameters an op node carries (axes, permutations, slices). */
#define TGL_MAX_PARAMS 40

/* Op parameters: part of a node's identity (hash-consing compares them). */
typedef struct tgl_params {
    int32_t n;                      /* entries of i[] in use              */
    int32_t flags;                  /* op-specific bits                   */
    int64_t i[TGL_MAX_PARAMS];
    double f[2];                    /* op-specific scalars                */
} tgl_params;

/* Flags and codes in op parameters (the op catalog in doc/c-api.md says
 * which op reads which).
 *
 * Parameters of subtensor and inc_subtensor: four entries per indexed
 * axis (kind, start, stop, step) for the leading p.n / 4 axes; the other
 * axes are taken whole.  Values are 0-based with Python's slice semantics
 * (stop exclusive, negative counts from the end, clipped to the axis).  A
 * bound marked _INPUT comes from the next extra input (a 0-d integer node,
 * after x, and after v for inc_subtensor), in axis order then start, stop,
 * step. */
#define TGL_IDX_INDEX 0          /* start is an index; the axis is dropped  */
#define TGL_IDX_SLICE 1          /* start:stop:step; the axis is kept       */
#define TGL_IDX_KIND_MASK 3
#define TGL_IDX_START_INPUT 4
#define TGL_IDX_STOP_INPUT 8
#define TGL_IDX_STEP_INPUT 16
#define TGL_IDX_NO_START 32      /* omitted: 0 (or the end when step < 0)   */
#define TGL_IDX_NO_STOP 64       /* omitted: the end (or before 0)          */
#define TGL_IDX_LUA 128          /* the _INPUT bounds are Lua-style: 1-based,
                                    stop inclusive, negative from the end  */
/* adv_subtensor / adv_inc_subtensor: p.n = x's ndim; p.i[d] = 1 when axis d
 * is indexed by the next integer-array input (indexed axes are
 * consecutive), 0 when taken whole.  Index values are 1-based (negative
 * from the end), as users write them. */
/* inc_subtensor / adv_inc_subtensor p.flags: assign instead of add. */
#define TGL_INC_SET 1
/* Reductions' (sum, prod, max, min, argmax, argmin) p.flags: keep the
 * reduced axes with size 1. */
#define TGL_REDUCE_KEEPDIMS 1
/* Pooling ops' (max_pool2d, avg_pool2d and their gradients) p.flags;
 * p.i = {kH, kW, dH, dW, padH, padW}. */
#define TGL_POOL_CEIL 1          /* ceil_mode: Torch7's :ceil()             */
#define TGL_POOL_EXCLUDE_PAD 2   /* avg: count_include_pad = false          */

/* What a node is. */
typedef enum tgl_node_kind {
    TGL_NODE_INPUT = 0,   /* a symbolic input, given at each call          */
    TGL_NODE_CONSTANT,    /* a fixed array                                 */
    TGL_NODE_SHARED,      /* state kept across calls (weights)             */
    TGL_NODE_APPLY        /* an op applied to input nodes                  */
} tgl_node_kind;

typedef struct tgl_node tgl_node;

/* The id of the op named name ("add", "tanh", ...), or -1. */
TGL_API int tgl_op_lookup(const char *name);
/* The name of op id, or NULL. */
TGL_API const char *tgl_op_name(int op);
/* Number of ops in the catalog: ids run from 0 to tgl_op_count() - 1. */
TGL_API int tgl_op_count(void);
/* The one-line synopsis of op id ("y = tanh x"), or NULL. */
TGL_API const char *tgl_op_synopsis(int op);
/* A property of op id as text, or NULL for a bad op or key (doc/c-api.md,
 * tgl_op_property): "shape" and "rop", its rules as the catalog states
 * them; "family"; "outputs" ("one" or "several"); "grad", "rop_hook",
 * "view", "inplace", "lazy", "inner": "yes" or "no". */
TGL_API const char *tgl_op_property(int op, const char *key);

/* A new symbolic input of the given type.  Never merged with another. */
TGL_API tgl_status tgl_node_input(tgl_ctx *ctx, tgl_type type, const char *name, tgl_node **out);
/* A constant holding a copy of value (later changes to value do not reach
 * the graph).  Small equal constants (same dtype, shape and bits) are the
 * same node. */
TGL_API tgl_status tgl_node_constant(tgl_ctx *ctx, tgl_array *value, tgl_node **out);
/* A shared variable whose value starts as value (retained, not copied;
 * copied when value is not on the device of the context's `device`
 * setting, where the variable lives).  Its type is value's dtype and ndim;
 * bcast sets broadcastable axes, which must have size 1. */
TGL_API tgl_status tgl_node_shared(tgl_ctx *ctx, tgl_array *value, uint32_t bcast,
                                   const char *name, tgl_node **out);
/* The current value of a shared variable (a new reference). */
TGL_API tgl_status tgl_shared_get(tgl_ctx *ctx, const tgl_node *s, tgl_array **out);
/* Sets a shared variable's value.  The type must match: same dtype and
 * ndim, size 1 on broadcastable axes.  With the current shape, value's
 * elements are copied into the variable's storage (which it keeps, so
 * arrays borrowed from it see them); with a new shape, value (retained;
 * a copy when it is on another device than the variable) replaces it. */
TGL_API tgl_status tgl_shared_set(tgl_ctx *ctx, tgl_node *s, tgl_array *value);
/* op applied to in[0..nin-1] with parameters p (NULL: none).  Type-checks
 * and infers the result type; returns the existing node when an identical
 * one exists.  source (may be NULL) records where the user built it, for
 * error messages.  Elementwise ops left-pad lower-dimensional inputs with
 * broadcastable axes, as NumPy does. */
TGL_API tgl_status tgl_apply(tgl_ctx *ctx, int op, int nin, tgl_node *const *in,
                             const tgl_params *p, const char *source, tgl_node **out);

TGL_API tgl_type tgl_node_type(const tgl_node *n);
TGL_API int tgl_node_kind_of(const tgl_node *n);
TGL_API int tgl_node_op(const tgl_node *n);
TGL_API int tgl_node_ninputs(const tgl_node *n);
TGL_API tgl_node *tgl_node_input_at(const tgl_node *n, int i);
TGL_API const tgl_params *tgl_node_params(const tgl_node *n);
TGL_API uint32_t tgl_node_id(const tgl_node *n);
/* The node's name, or "" when unnamed. */
TGL_API const char *tgl_node_name(const tgl_node *n);
TGL_API tgl_status tgl_node_set_name(tgl_ctx *ctx, tgl_node *n, const char *name);
/* Where the node was built ("script.lua:12"), or "". */
TGL_API const char *tgl_node_source(const tgl_node *n);
/* A constant's value (borrowed), or NULL for other nodes. */
TGL_API tgl_array *tgl_node_value(const tgl_node *n);

/* Multi-output nodes.  A node of a multi-output op (a fused group with
 * several outputs, later scan) produces tgl_node_noutputs(n) values; other
 * nodes read value k through the node tgl_node_output returns (n itself
 * when n has one output). */
TGL_API int tgl_node_noutputs(const tgl_node *n);
TGL_API tgl_status tgl_node_output(tgl_ctx *ctx, tgl_node *n, int k, tgl_node **out);
/* A label for the node's payload ("fused#3{mul add tanh}") written into
 * buf; returns 0 (and writes "") when the node has none. */
TGL_API int tgl_node_payload_label(const tgl_node *n, char *buf, size_t size);

/* Node lifetime.  Nodes belong to their context.  A caller that keeps a
 * node across tgl_graph_collect retains it (the Lua layer retains every
 * node it holds); the collector frees every node that no retained node,
 * and no compiled function, depends on.  Without tgl_graph_collect nodes
 * live as long as the context.  A retained node also keeps its context
 * alive. */
TGL_API void tgl_node_retain(tgl_ctx *ctx, tgl_node *n);
/* Drops a reference taken by tgl_node_retain (the node's and its
 * context's: the last one may free the context, after tgl_ctx_free). */
TGL_API void tgl_node_release(tgl_ctx *ctx, tgl_node *n);
/* Frees the nodes nothing retained depends on.  Node pointers not
 * retained may dangle afterwards. */
TGL_API tgl_status tgl_graph_collect(tgl_ctx *ctx);
/* Collects when the live nodes have doubled since the last collection
 * (and number at least 64k); returns 1 when it collected. */
TGL_API int tgl_graph_maybe_collect(tgl_ctx *ctx);
/* Nodes currently alive in ctx. */
TGL_API size_t tgl_graph_live_nodes(const tgl_ctx *ctx);

/* Applies op eagerly to arrays: the reference kernel, no graph kept. */
TGL_API tgl_status tgl_eval(tgl_ctx *ctx, int op, int nin, tgl_array *const *in,
                            const tgl_params *p, tgl_array **out);

/* The graphs outs[0..n-1] with each from[k] replaced by to[k] (types must
 * match); result[i] receives the new outs[i]. */
TGL_API tgl_status tgl_clone_replace(tgl_ctx *ctx, int n, tgl_node *const *outs, int nrep,
                                     tgl_node *const *from, tgl_node *const *to,
                                     tgl_node **result);

/* ------------------------------------------------------------------------ */
/* Differentiation                                                          */
/* ------------------------------------------------------------------------ */

/* What tgl_grad does with a wrt node the cost does not depend on. */
typedef enum tgl_disconnected {
    TGL_DISCONNECTED_RAISE = 0,  /* fail with an error naming the node      */
    TGL_DISCONNECTED_ZERO        /* its gradient is zeros of its shape      */
} tgl_disconnected;

/* Reverse mode: d cost / d wrt[i] into grads[i].  cost is a scalar unless
 * known gradients are given: known_vars[k] gets the gradient
 * known_grads[k] (of its type) as a starting point. */
TGL_API tgl_status tgl_grad(tgl_ctx *ctx, tgl_node *cost, int nwrt, tgl_node *const *wrt,
                            int nknown, tgl_node *const *known_vars,
                            tgl_node *const *known_grads, tgl_disconnected disconnected,
                            tgl_node **grads);

/* Forward mode (src/rop): out[i] = J_i v, the derivative of f[i] along the
 * directions v[k] of the variables wrt[k] (the R-operator), in one forward
 * walk.  v[k] has wrt[k]'s rank (a float).  A wrt that no f depends on
 * fails under TGL_DISCONNECTED_RAISE; a result with no tangent is zeros of
 * f[i]'s shape. */
TGL_API tgl_status tgl_rop(tgl_ctx *ctx, int nf, tgl_node *const *f, int nwrt,
                           tgl_node *const *wrt, tgl_node *const *v,
                           tgl_disconnected disconnected, tgl_node **out);

/* ------------------------------------------------------------------------ */
/* Loops: scan                                                              */
/* ------------------------------------------------------------------------ */

/* A loop whose body is a graph (src/scan): step t reads slices of the
 * sequences, earlier values of the recurrent outputs and the
 * non-sequences, and computes every output for step t.
 *
 * The body is given as inner placeholder inputs (tgl_node_input, each
 * used by one scan only) and the inner outputs computed from them, in this
 * order:
 *   inner_in   every tap of sequence 0, of sequence 1, ...; then every tap
 *              of recurrent output 0, 1, ...; then the non-sequences.
 *   inner_out  the nrec recurrent outputs, then the nnofb outputs not fed
 *              back, then (has_until) the stop condition, a scalar.
 * Taps are increasing step offsets: a sequence tap d reads element
 * t + d - (first tap) of the sequence at step t (so the first step reads
 * the sequence's first element through its first tap); a recurrent tap is
 * negative, -k reading the value the output had k steps earlier.  The
 * outer initial value of a recurrent output has K = -(first tap) leading
 * entries (K, state...): its last K values, oldest first.
 * Leaves of the body other than inner_in and constants (shared variables,
 * outer inputs and values) become extra non-sequences automatically;
 * inner inputs no output depends on are dropped.
 *
 * The node has nrec + nnofb outputs: output k stacks every step's value of
 * inner output k on a new leading axis (T, ...), or, with keep[k] = 1,
 * only holds the value of the last step (the output's own type; for a
 * recurrent output with no step run, its last initial value).  With a
 * stop condition the loop ends after the first step whose condition is
 * true, and outputs hold the steps that ran. */
typedef struct tgl_scan_spec {
    const char *name;             /* for messages and printouts; NULL: "scan" */
    int nseq;
    const int *seq_ntaps;         /* per sequence: its number of taps (>= 1)  */
    const int *seq_taps;          /* every sequence's taps, one after another */
    int nrec;
    const int *rec_ntaps;
    const int *rec_taps;          /* negative, increasing                     */
    int nnofb;
    int nnonseq;
    int has_until;
    int reverse;                  /* nonzero: steps run from T-1 down to 0 and
                                     a tap -k reads step t+k (a backward scan;
                                     initial values follow the last step)   */
    int truncate_gradient;        /* -1: full backpropagation through time  */
    tgl_node *const *inner_in;
    tgl_node *const *inner_out;
    tgl_node *n_steps;            /* an integer scalar, or NULL: the sequences
                                     decide (the shortest)                   */
    tgl_node *const *seqs;        /* nseq outer sequences                     */
    tgl_node *const *inits;       /* nrec initial values (K, state...)        */
    tgl_node *const *nonseqs;     /* nnonseq                                  */
    const int *keep;              /* nrec + nnofb: 0 every step, 1 the last
                                     (the last initial value when no step
                                     runs), 2 the last (an error when no step
                                     runs, as x[-1] of no steps), 3 (a
                                     recurrent output of a forward scan) its
                                     K initial values then every step,
                                     (K + T, ...); NULL: 0s                 */
} tgl_scan_spec;

/* Builds a scan node (a multi-output node: read output k through
 * tgl_node_output).  source as for tgl_apply. */
TGL_API tgl_status tgl_scan(tgl_ctx *ctx, const tgl_scan_spec *spec, const char *source,
                            tgl_node **out);

/* ------------------------------------------------------------------------ */
/* Configuration and graph rewrites                                         */
/* ------------------------------------------------------------------------ */

/* Sets a setting of the context (values are strings):
 *   exclude          comma-separated rewrite rules to switch off
 *   threads          threads for kernels and for large BLAS products, 0..256
 *                    (0: one per core; OpenBLAS itself runs single-threaded)
 *   cc, cflags       the optimizing compiler and its flags
 *   cache_dir        the kernel cache ("" : $TGL_CACHE_DIR or ~/.cache/tgl)
 *   compile          tiered | sync | tcc | cc
 *   cache_max_bytes  size cap of the kernel cache
 *   exit_wait        seconds the process's exit waits for background compiles
 *                    to store their kernels (0 to 3600; default 5)
 *   whole_step       on | off | bound: bind straight-line programs to fixed
 *                    buffers (and generate their C, but for bound)
 *   device           cpu | sim (| cuda when built): where functions compiled
 *                    afterwards run and new shared variables live; cuda
 *                    fails, leaving the setting as it was, when tgl was
 *                    built without CUDA or no device can be used
 *   allow_tf32       true | false (default): float32 products on the GPU
 *                    may use TF32 (faster, about 10 mantissa bits)
 *   tune             overrides of the measured thresholds, "name=value,..."
 *                    (an integer >= 0 or never; "" for none; process-wide;
 *                    doc/calibration.md), for tests and experiments
 * Unknown keys and bad values fail with TGL_EINVAL. */
TGL_API tgl_status tgl_config_set(tgl_ctx *ctx, const char *key, const char *value);
/* The current value of a setting as text (NULL for an unknown key). */
TGL_API const char *tgl_config_get(tgl_ctx *ctx, const char *key);
/* The settings: how many, and the key of setting i (NULL out of range). */
TGL_API int tgl_config_count(void);
TGL_API const char *tgl_config_key(int i);
/* NULL when every TGL_* environment variable the context read when it was
 * made (TGL_FLOATX, TGL_EXCLUDE, TGL_NUM_THREADS, TGL_CC, TGL_CFLAGS,
 * TGL_CACHE_DIR, TGL_COMPILE, TGL_DEVICE, TGL_TUNE) was valid or unset; otherwise a message with
 * one line per bad variable, naming it, its value and the accepted values
 * (the setting then keeps its default).  Owned by the context. */
TGL_API const char *tgl_config_env_error(tgl_ctx *ctx);

/* How much rewriting tgl_optimize does. */
typedef enum tgl_opt_level {
    TGL_OPT_NONE = 0,
    TGL_OPT_STABILIZE,      /* canonicalize + stabilize (cheap rules)      */
    TGL_OPT_FAST_RUN        /* every stage: + specialize, fuse             */
} tgl_opt_level;

/* The graphs in[0..n-1] rewritten at the given level into out[0..n-1]
 * (same values, faster or numerically safer form). */
TGL_API tgl_status tgl_optimize(tgl_ctx *ctx, int level, int n, tgl_node *const *in,
                                tgl_node **out);
/* The rewrite rules: how many, and each one's name, stage and synopsis. */
TGL_API int tgl_rule_count(void);
TGL_API const char *tgl_rule_name(int i);
TGL_API const char *tgl_rule_stage(int i);
TGL_API const char *tgl_rule_synopsis(int i);

/* Deletes every compiled kernel in the kernel cache (config cache_dir,
 * else $TGL_CACHE_DIR, else ~/.cache/tgl). */
TGL_API tgl_status tgl_cache_clear(tgl_ctx *ctx);
/* The cache as text: "directory: ...\nentries: N\nbytes: B\nmax_bytes: C\n"
 * (malloc'd; free it with tgl_free). */
TGL_API tgl_status tgl_cache_info(tgl_ctx *ctx, char **text);
/* ---- Measured thresholds (doc/calibration.md) ----
 * The thresholds that decide a BLAS split, a thin kernel, a kernel's
 * thread count, the pool's spin and a bound step's budget are measured on
 * the machine (a short calibration, cached per CPU model and BLAS in the
 * kernel cache) or derived from sysconf.  The calls below first load this
 * machine's record, measuring it when there is none, as the CPU backend's
 * first use does; without a usable cache directory the fallbacks apply. */
/* The table as text, what `tgl -v` prints: "cpu: ...", "blas: ...",
 * "record: <file>", then one line per tunable "  name value source unit"
 * (malloc'd; free it with tgl_free). */
TGL_API tgl_status tgl_tune_info(tgl_ctx *ctx, char **text);
/* Measures every threshold again now and rewrites the record (`tgl
 * --calibrate`).  Overrides (the tune setting) stay in force. */
TGL_API tgl_status tgl_calibrate(tgl_ctx *ctx);
/* How many tunables there are. */
TGL_API int tgl_tunable_count(void);
/* Tunable i (0 <= i < tgl_tunable_count()): its name, value (INT64_MAX:
 * never), unit and source ("measured", "cached", "derived", "fallback" or
 * "override"); any out pointer may be NULL. */
TGL_API tgl_status tgl_tunable(tgl_ctx *ctx, int i, const char **name, int64_t *value,
                               const char **unit, const char **source);
/* What the process does at exit, done now: waits for the background
 * compiles still pending (compile = tiered) to store their kernels in the
 * cache, up to exit_wait seconds (the setting in force when the latest one
 * started), then stops the rest, whose temporaries are removed.  No
 * background compile starts afterwards.  Call it just before exiting,
 * before freeing the functions (a released function's compile that has
 * not started is dropped when others are waiting).  exit() calls it too
 * (atexit). */
TGL_API void tgl_compile_wait_all(void);
/* Deprecated: the old name of tgl_compile_wait_all, which waits for the
 * background compiles rather than flushing anything; it stays for the 0.1
 * releases and goes in 0.2. */
TGL_API void tgl_cache_flush(void)
#if defined(__GNUC__)
    __attribute__((deprecated("use tgl_compile_wait_all")))
#endif
    ;
/* Compiled kernels currently loaded in this process (one per fused program
 * that a live compiled function runs; libtcc code or a loaded shared
 * object).  A kernel is freed with the last function that runs it. */
TGL_API int64_t tgl_kernels_live(void);

/* ------------------------------------------------------------------------ */
/* Compiled functions and the CVM                                           */
/* ------------------------------------------------------------------------ */

typedef struct tgl_function tgl_function;

typedef enum tgl_linker {
    TGL_LINKER_CVM = 0,     /* intermediates freed after their last use    */
    TGL_LINKER_CVM_NOGC,    /* intermediates kept and reused across calls  */
    TGL_LINKER_VM           /* one checked thunk per op, for debugging      */
} tgl_linker;

typedef enum tgl_mode {
    TGL_MODE_FAST_RUN = 0,  /* every rewrite, generated kernels             */
    TGL_MODE_FAST_COMPILE,  /* cheap rewrites only, reference kernels       */
    TGL_MODE_DEBUG          /* as FAST_RUN, and every generated kernel is
                               checked against the reference on each call  */
} tgl_mode;

typedef struct tgl_compile_options {
    int linker;             /* a tgl_linker                                 */
    int profile;            /* nonzero: time every instruction              */
    const char *name;       /* for messages and profiles; may be NULL      */
    int mode;               /* a tgl_mode                                   */
} tgl_compile_options;

/* Compiles outputs (and updates: upd_vars[k] gets upd_exprs[k] after each
 * call) as a function of inputs.  Every input node the outputs need must
 * be listed. */
TGL_API tgl_status tgl_function_new(tgl_ctx *ctx, int nin, tgl_node *const *inputs, int nout,
                                    tgl_node *const *outputs, int nupd,
                                    tgl_node *const *upd_vars, tgl_node *const *upd_exprs,
                                    const tgl_compile_options *opt, tgl_function **out);
/* Frees a function (NULL is ignored). */
TGL_API void tgl_function_free(tgl_function *fn);
/* Runs fn on in[0..nin-1]; out[i] receives a new reference to output i.
 * Every input's dtype and rank are checked (trust is accepted for the
 * Lua layer's trust_input, which skips only its own conversions).  Outputs
 * never share memory with inputs, constants or shared variables.  On
 * failure no shared variable changes. */
TGL_API tgl_status tgl_function_call(tgl_ctx *ctx, tgl_function *fn, tgl_array *const *in,
                                     tgl_array **out, int trust);
/* Frames.  A function is an immutable program plus a default frame (its
 * buffers and registers); more frames let one program run several
 * executions, e.g. on two threads (updates to shared variables are the
 * callers' to serialize).  A frame runs one call at a time: a call on a
 * frame (the default one included) that another thread is running fails
 * with TGL_EBUSY and changes nothing; retry it later.  Threads calling at
 * once use one tgl_ctx each (doc/c-api.md, "Threads"). */
typedef struct tgl_frame tgl_frame;
/* A new frame for fn's program. */
TGL_API tgl_status tgl_function_frame_new(tgl_ctx *ctx, const tgl_function *fn, tgl_frame **out);
/* Frees a frame (NULL is ignored); free frames before their function. */
TGL_API void tgl_frame_free(tgl_frame *frame);
/* tgl_function_call on the given frame instead of the default one. */
TGL_API tgl_status tgl_function_call_frame(tgl_ctx *ctx, tgl_function *fn, tgl_frame *frame,
                                           tgl_array *const *in, tgl_array **out);
/* Runs fn n_calls times with the inputs of the last call, applying the
 * updates each time; outputs of the last run are kept for
 * tgl_function_output. */
TGL_API tgl_status tgl_function_run(tgl_ctx *ctx, tgl_function *fn, int64_t n_calls);
/* A new reference to output i of the last run. */
TGL_API tgl_status tgl_function_output(tgl_ctx *ctx, tgl_function *fn, int i, tgl_array **out);
/* Drops the caller's reference to a (an output of fn the caller no longer
 * needs; NULL is ignored).  When nobody else holds a or its storage, its
 * buffer goes to fn's default frame's pool and a later call's output or
 * intermediate reuses it instead of allocating; otherwise this is
 * tgl_array_release.  A buffer another owner holds is never reused. */
TGL_API void tgl_function_recycle(tgl_function *fn, tgl_array *a);
/* Blocks until every kernel of fn compiled in the background (tiered
 * compilation) has been swapped in. */
TGL_API tgl_status tgl_function_wait_compiled(tgl_ctx *ctx, tgl_function *fn);
/* Root i of fn's optimized graph (outputs first, then update values), or
 * NULL past the end. */
TGL_API tgl_node *tgl_function_root(const tgl_function *fn, int i);
/* 1 when fn computes node n in place of one of its inputs' buffers. */
TGL_API int tgl_function_inplace(const tgl_function *fn, const tgl_node *n);
/* Whether fn's default frame runs a bound whole step (doc/compile.md,
 * "Whole-step plan"): 1 when it does, and then *fixed_bytes (its fixed
 * buffers), *fixed (instructions run as direct kernel calls), *dynamic
 * (instructions run as the CVM runs them) and *generated (1 when the
 * step's generated C function runs it) are set; 0 when the CVM runs the
 * program.  Any pointer may be NULL. */
TGL_API int tgl_function_whole_step(const tgl_function *fn, int64_t *fixed_bytes, int *fixed,
                                    int *dynamic, int *generated);
/* The memory of fn's bound whole steps (its own, and its scan bodies' as
 * bound for their last run): how many are bound, and in *sum the bytes
 * their fixed buffers would hold with a buffer each, in *peak the arenas
 * they hold (buffers with disjoint lifetimes share bytes; the planned peak,
 * which each step's budget is checked against).  Either may be NULL. */
TGL_API int tgl_function_step_memory(const tgl_function *fn, int64_t *sum, int64_t *peak);
/* Numbers of inputs and outputs. */
TGL_API int tgl_function_ninputs(const tgl_function *fn);
TGL_API int tgl_function_noutputs(const tgl_function *fn);
/* The program as text, one instruction per line (malloc'd; free with
 * tgl_free). */
TGL_API tgl_status tgl_function_program(tgl_ctx *ctx, const tgl_function *fn, char **text);
/* Per-op time table of a function compiled with profile (malloc'd). */
TGL_API tgl_status tgl_function_profile(tgl_ctx *ctx, const tgl_function *fn, char **text);
/* Frees text returned by tgl. */
TGL_API void tgl_free(void *p);

/* Reads an IDX file (MNIST's format), plain or gzip-compressed: uint8 data
 * loads as uint8, int8/int16/int32 as int32, floats as themselves. */
TGL_API tgl_status tgl_idx_load(tgl_ctx *ctx, const char *path, tgl_array **out);

/* ------------------------------------------------------------------------ */
/* Collectives between processes (tgl.dist, doc/distributed.md)             */
/* ------------------------------------------------------------------------ */

/* Data parallelism over MPI (Open MPI).  A process started by mpirun (or
 * srun) joins the job with tgl_dist_init; a process started alone runs as
 * a job of one (rank 0 of 1) with or without MPI.  Ranks are 0-based here
 * (Lua counts from 1).  Every collective is checked first: the processes
 * exchange a short description of what they are about to do (the
 * collective, its reduction, dtype and shape), so that a mismatch fails on
 * every rank with TGL_EDIST naming each rank's side, never a corrupt
 * result; a collective that has not completed after the timeout fails with
 * TGL_EDIST too, and the job is then broken: every later collective fails
 * at once and tgl_dist_shutdown ends the whole job. */

/* Reductions of tgl_dist_allreduce and the allreduce op (p.i[0]). */
typedef enum tgl_dist_op {
    TGL_DIST_SUM = 0,
    TGL_DIST_MEAN,   /* the sum divided by the number of processes (floats)  */
    TGL_DIST_MAX,
    TGL_DIST_MIN,
    TGL_DIST_PROD
} tgl_dist_op;

/* 1 when tgl was built with MPI. */
TGL_API int tgl_dist_available(void);
/* The MPI library's own name and version ("Open MPI v4.1.4, ..."; its
 * first line), or "" in a tgl built without MPI. */
TGL_API const char *tgl_dist_library(void);
/* How the process was started: the world size the launcher announces
 * (mpirun's OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS under srun), or
 * 0 when no launcher started it. */
TGL_API int tgl_dist_launched_size(void);
/* Joins the job: MPI_Init when a launcher started the process, nothing
 * otherwise (a job of one).  A second call only sets the timeout.  timeout_s
 * (> 0) bounds every wait for the other processes; <= 0 keeps the
 * default (TGL_DIST_TIMEOUT, else 300 s).  Fails (TGL_EDIST) in a tgl
 * built without MPI that a launcher started with more than one process. */
TGL_API tgl_status tgl_dist_init(tgl_ctx *ctx, double timeout_s);
/* 1 after a successful tgl_dist_init. */
TGL_API int tgl_dist_initialized(void);
/* This process's rank (0-based) and the number of processes; 0 and 1
 * before tgl_dist_init. */
TGL_API int tgl_dist_rank(void);
TGL_API int tgl_dist_size(void);
/* Seconds a collective waits for the others before failing. */
TGL_API double tgl_dist_timeout(void);
/* Size in bytes of the gradient buckets the compiler groups allreduce
 * ops into (doc/distributed.md); <= 0 restores the default
 * (TGL_DIST_BUCKET_BYTES, else 1 MiB).  Read when a function is compiled. */
TGL_API void tgl_dist_set_bucket_bytes(int64_t bytes);
TGL_API int64_t tgl_dist_bucket_bytes(void);
/* Whether compiled steps overlap their gradient buckets' reduction with
 * the backward pass (the allreduce_buckets rewrite, on a progress
 * thread): 1 on, 0 off (one blocking allreduce per gradient, in turn),
 * -1 auto (the default; TGL_DIST_OVERLAP=on|off|auto): on unless the
 * processes on this machine times the kernel threads of each (threads,
 * 0: every core) leave no core free, since the transport between
 * processes of one machine copies memory on the same cores the step
 * computes on, and overlapping then costs more than it hides
 * (doc/distributed.md).  Read when a function is compiled. */
TGL_API void tgl_dist_set_overlap(int mode);
/* The setting (1, 0, -1), and whether a step compiled now with that
 * many kernel threads would overlap. */
TGL_API int tgl_dist_overlap_setting(void);
TGL_API int tgl_dist_overlaps(int threads);
/* Waits until every process has called it. */
TGL_API tgl_status tgl_dist_barrier(tgl_ctx *ctx);
/* a = the reduction of every process's a, in place (a may be a strided
 * view, on any device).  float32, float64, int32, int64 (MEAN: floats). */
TGL_API tgl_status tgl_dist_allreduce(tgl_ctx *ctx, tgl_array *a, int op);
/* a = root's a on every process, in place (any dtype). */
TGL_API tgl_status tgl_dist_broadcast(tgl_ctx *ctx, tgl_array *a, int root);
/* A new array (size, ...a's shape) holding every process's a in rank
 * order (any dtype; every a must have the same shape). */
TGL_API tgl_status tgl_dist_allgather(tgl_ctx *ctx, const tgl_array *a, tgl_array **out);
/* Ends this process's part in the job at exit: status 0 leaves it
 * cleanly (MPI_Finalize) unless the job is broken; otherwise, with MPI
 * initialised, it aborts the whole job (MPI_Abort), so that the other
 * processes stop instead of waiting for this one.  The tgl host calls it;
 * a program embedding tgl calls it before exit (an atexit handler left by
 * tgl_dist_init finalizes a job that is still running, as status 0). */
TGL_API void tgl_dist_shutdown(int status);

/* ------------------------------------------------------------------------ */
/* Build information                                                        */
/* ------------------------------------------------------------------------ */

/* "0.1.0" */
TGL_API const char *tgl_version(void);
/* Seconds on a monotonic clock (for timing; the origin is arbitrary). */
TGL_API double tgl_wall_time(void);
/* The BLAS library and its configuration, e.g. "OpenBLAS 0.3.21 ...". */
TGL_API const char *tgl_blas_info(void);
/* 1 when tgl was built with the CUDA backend. */
TGL_API int tgl_cuda_built(void);
/* Number of CUDA devices usable now (0 without CUDA or without a GPU). */
TGL_API int tgl_cuda_device_count(void);
/* The CUDA runtime version as "13.0", or "" without CUDA. */
TGL_API const char *tgl_cuda_version(void);
/* NULL when a CUDA device can be used (initialising it on the first call),
 * else why not: "tgl was built without CUDA", or the driver's reason
 * ("cuda: no CUDA device: ..."). */
TGL_API const char *tgl_cuda_unavailable(void);
/* The device's name ("NVIDIA H200"; the emulator's under TGL_CUDA_EMU),
 * or NULL when no device can be used (tgl_cuda_unavailable says why). */
TGL_API const char *tgl_cuda_device_name(void);
/* Waits for everything issued to the GPU; fails with the device's error
 * (a kernel's asynchronous failure) or when no device can be used. */
TGL_API tgl_status tgl_cuda_synchronize(tgl_ctx *ctx);
/* The CUDA caching allocator's figures: bytes, and counts of calls. */
typedef struct tgl_cuda_mem_stats {
    int64_t allocated;       /* bytes in blocks handed out now               */
    int64_t reserved;        /* bytes held from the driver (incl. the cache) */
    int64_t peak;            /* highest `allocated` since the start          */
    int64_t n_allocs;        /* allocations served                           */
    int64_t n_frees;         /* blocks given back                            */
    int64_t n_cache_hits;    /* allocations served from the cache            */
    int64_t n_driver_allocs; /* allocations that asked the driver            */
    int64_t n_ooms;          /* allocations that failed (out of memory)      */
} tgl_cuda_mem_stats;
/* Fills *s (all zero without CUDA, or before the first allocation). */
TGL_API void tgl_cuda_memory_stats(tgl_cuda_mem_stats *s);
/* Returns the allocator's cached (free) blocks to the driver, so that
 * `reserved` falls to `allocated`; nothing without CUDA. */
TGL_API void tgl_cuda_empty_cache(void);

#ifdef __cplusplus
}
#endif

#endif /* TGL_H */
