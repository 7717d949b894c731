/*
 * program.h — internal header of compiled functions: the CVM program, the
 * frame one execution runs on, and the function that pairs them.
 *
 *   program  compile.c builds it from a graph (emit, then plan.c's memory
 *            plan); immutable afterwards and shareable: instructions over
 *            numbered storage slots, which slots are inputs, constants,
 *            shared variables and temporaries, the outputs and updates.
 *   frame    one execution's state: the slot arrays, a pool of buffers
 *            the cvm linker reuses, the outputs of the last run, profile
 *            counters.  cvm.c runs a program on a frame; two frames of one
 *            program may run on two threads (updates to shared variables
 *            aside: those are the caller's to serialize).
 *   function a program and its default frame (call.c): what tgl.compile
 *            returns.  print.c renders programs and profiles as text.
 */
#ifndef TGL_PROGRAM_H
#define TGL_PROGRAM_H

#include "engine/ops/ops.h"
#include "engine/backend.h"

typedef enum tgl_instr_kind {
    TGL_I_OP,      /* s[outs...] = op(s[in...])                              */
    TGL_I_JUMPZ,   /* if not s[in[0]] then pc = target                       */
    TGL_I_JUMP,    /* pc = target                                            */
    TGL_I_MOVE     /* s[out] = s[in[0]] (a new reference, no copy)            */
} tgl_instr_kind;

typedef struct tgl_instr {
    int32_t kind;
    int32_t out;             /* the slot written (outs[0] for an op)       */
    int32_t nin;
    int32_t target;          /* jumps: the pc to go to                     */
    int32_t *in;
    int32_t nfree;           /* slots released after this one runs         */
    int32_t *free_slots;
    const tgl_node *node;    /* for TGL_I_OP: what it computes             */
    const tgl_opimpl *impl;
    const tgl_op_kernel *kern; /* TGL_I_OP: its kernel on the program's backend,
                                  bound at compile time; NULL when the op
                                  needs none (tgl_op_needs_kernel)         */
    int32_t inplace;         /* input whose buffer outs[0] takes, or -1   */
    int32_t update;          /* deferred in-place update of update k, or -1 */
    int32_t nouts;           /* ops: slot of each output, -1 when nobody
                                reads it (multi-output ops; else 1)        */
    int32_t *outs;
    int32_t region;          /* 0: straight-line code; else the ifelse
                                branch it sits in (compile.c; plan.c plans
                                per region)                                */
    struct tgl_program *sub; /* an op with a body (scan): its inner program */
    int32_t once;            /* nonzero: loop-invariant (a scan body's work on
                                non-sequences): runs on the first step only,
                                its result stays in its slot (fr->once_done) */
    int32_t shape_stable;    /* nonzero: its output shapes follow from the
                                call's input and shared shapes (plan.c), so
                                the frame may cache them (cvm.c)           */
} tgl_instr;

/* What a slot holds between calls. */
typedef enum tgl_slot_kind {
    TGL_SLOT_TEMP,      /* an intermediate                                  */
    TGL_SLOT_INPUT,     /* an argument of the call                          */
    TGL_SLOT_CONSTANT,  /* set once when the frame is made                  */
    TGL_SLOT_SHARED     /* a shared variable's value, read at each call     */
} tgl_slot_kind;

/* An ifelse branch: its parent region and its last instruction (the MOVE
 * of the branch's value).  Region 0 is the straight-line code. */
typedef struct tgl_region {
    int32_t parent;
    int32_t end;
    int32_t sibling;         /* the other branch of the same ifelse        */
} tgl_region;

typedef struct tgl_program {
    tgl_ctx *ctx;            /* retained                                   */
    char *name;
    int linker, profile, mode;
    int device;              /* the tgl_device it runs on                  */
    const tgl_backend *backend; /* that device's: its op kernels, memory and
                                   fused kernels                           */
    int nin, nout, nupd;
    int32_t nslots;
    tgl_node **slot_node;
    uint8_t *slot_kind;
    int32_t *in_slot;        /* per input                                  */
    int32_t *out_slot;       /* per output                                 */
    tgl_node **upd_var;      /* per update: the shared variable            */
    int32_t *upd_slot;       /* per update: the slot of its new value      */
    bool *upd_deferred;      /* per update: done in place, last            */
    int32_t *shared_slot, nshared;   /* slots read from shared variables   */
    int32_t *temp_slot, ntemp;       /* slots written by instructions      */
    int32_t *foreign_slot, nforeign; /* inputs, constants, shared: never
                                        handed out without a copy          */
    tgl_instr *code;
    int32_t ncode;
    int32_t defer_start;     /* first deferred update instruction (ncode: none) */
    tgl_region *region;
    int32_t nregions;
    tgl_node **roots;        /* the optimized outputs, then update values  */
    tgl_node_map op_pc;      /* node -> its (last) instruction, for lookups */
    tgl_node **owned;        /* nodes retained for the program's life      */
    size_t nowned;
    int32_t nsub;            /* instructions with an inner program         */
    /* The fused instructions before this pc hold a use of their program's
     * kernel (tgl_backend_prepare), dropped when the program is freed. */
    int32_t prepared_to;
} tgl_program;

/* Free buffers a frame keeps for the next instructions that fit, by size
 * class: class c holds buffers of 2^c to 2^(c+1)-1 bytes, so a request is
 * served from the first class whose every buffer is large enough, in
 * constant time (at most twice the bytes asked for). */
#define TGL_POOL_CLASSES 64
typedef struct tgl_pool_class {
    tgl_array **a;           /* each the sole owner of its storage         */
    int32_t n, cap;
} tgl_pool_class;

typedef struct tgl_frame {
    const tgl_program *prog;
    tgl_array **slot;
    tgl_array **last_out;    /* outputs of the last run                    */
    tgl_array **newval;      /* per update: scratch of one run             */
    tgl_array **seen;        /* nupd + nout: scratch of the alias check    */
    bool have_inputs;        /* a call has set the input slots             */
    tgl_pool_class pool[TGL_POOL_CLASSES];  /* free buffers (cvm linker)   */
    uint64_t *ins_ns, *ins_calls;   /* profile, per instruction            */
    uint64_t ncalls, total_ns;
    struct tgl_frame **sub;  /* per instruction with a body: its frame, made
                                on first use (NULL: the program has none)  */
    bool once_done;          /* the `once` instructions ran for this loop   */
    /* The shape-stable fast path (cvm.c).  shape_cache holds, per
     * instruction, TGL_MAX_DIMS sizes per output (at shape_off[pc]); an
     * entry is good while shape_at[pc] equals shape_epoch, which moves on
     * whenever the shapes a call starts from change (guard: the input and
     * shared slots' shapes of the last call; a scan's inner frame moves it
     * at each run of the loop instead). */
    int64_t *shape_cache;
    int32_t *shape_off;
    uint64_t *shape_at;
    uint64_t shape_epoch;
    int64_t *guard;          /* per input, then shared slot: ndim, sizes   */
    bool guard_set;
    void **launch_cache;     /* per instruction: its fused kernel's launch
                                cache (backend.h), NULL until first launch */
    /* The whole-step plan (step.c): bound for one shape epoch, or NULL. */
    struct tgl_step *step;
    uint64_t step_try;       /* the epoch whose next call binds             */
    bool step_never;         /* the program cannot bind                     */
    uint64_t step_big;       /* the epoch whose step was too large to keep  */
    /* Atomic: 1 while a call runs on the frame (call.c).  A frame holds
     * one run's registers and buffers, so a second thread calling on it at
     * the same time would corrupt both runs: it gets TGL_EBUSY instead. */
    int busy;
} tgl_frame;

struct tgl_function {
    tgl_program *prog;
    tgl_frame *frame;        /* the default frame                          */
};

/* compile.c: a program for the graph (rewritten at opt's level). */
tgl_status tgl_program_new(tgl_ctx *ctx, int nin, tgl_node *const *inputs, int nout,
                           tgl_node *const *outputs, int nupd, tgl_node *const *upd_vars,
                           tgl_node *const *upd_exprs, const tgl_compile_options *opt,
                           tgl_program **out);
void tgl_program_free(tgl_program *prog);

/* plan.c: the memory plan (releases, in-place steps, deferred updates). */
tgl_status tgl_plan_memory(tgl_ctx *ctx, tgl_program *prog, bool inplace);
/* plan.c: marks the instructions whose output shapes the frame may cache
 * (tgl_instr.shape_stable).  Out of memory, it marks none. */
void tgl_plan_shapes(tgl_program *prog);
/* plan.c: whether ins's output shapes follow from its inputs' shapes alone
 * (not from their values: a reshape to a computed shape, a slice with
 * computed bounds, arange; nor only from running it: scan), by the op's
 * shape rule in the catalog (ops.h). */
bool tgl_plan_shape_from_shapes(const tgl_instr *ins);
/* cvm.c: starts a new shape epoch when the input and shared slots' shapes
 * differ from the last call's (or always, with force). */
void tgl_cvm_guard_shapes(tgl_frame *fr, bool force);

/* call.c: a new frame for prog (constants bound), and its end. */
tgl_status tgl_frame_new(tgl_ctx *ctx, const tgl_program *prog, tgl_frame **out);
void tgl_frame_free(tgl_frame *fr);
/* cvm.c: gives a buffer back to the frame's pool (or releases it). */
void tgl_frame_recycle(tgl_frame *fr, tgl_array *a);

/* cvm.c: a contiguous array of that type from fr's pool, or NULL. */
tgl_array *tgl_frame_take_pooled(tgl_frame *fr, int dtype, int ndim, const int64_t *shape);
/* cvm.c: runs one op instruction as the CVM does (shape, buffer, kernel). */
tgl_status tgl_cvm_run_op(tgl_ctx *ctx, tgl_frame *fr, const tgl_instr *ins);

/* step.c: the whole-step plan.  tgl_step_exec runs instructions [from, to)
 * of a call on fr: on the step bound for the current shape epoch, binding
 * it during the run on the epoch's second call, else on the CVM (inner:
 * fr is a scan body's frame, whose outputs the loop copies out).  After
 * the call's first part, fr->step tells whether a bound step ran it: then
 * tgl_step_release_temps replaces the end-of-call release of temporaries.
 * tgl_step_free drops the binding (fixed buffers released). */
typedef struct tgl_step tgl_step;
tgl_status tgl_step_exec(tgl_ctx *ctx, tgl_frame *fr, int32_t from, int32_t to, bool inner);
void tgl_step_release_temps(tgl_frame *fr);
void tgl_step_free(tgl_frame *fr);
/* Blocks until the bound step's generated function, if one is being
 * compiled, is ready (or failed). */
void tgl_step_wait(tgl_frame *fr);

/* cvm.c: runs instructions [from, to) of fr's program on fr. */
tgl_status tgl_cvm_run(tgl_ctx *ctx, tgl_frame *fr, int32_t from, int32_t to);
/* Checks that the deferred update instructions will not fail on shapes:
 * run before any of them writes into a shared variable. */
tgl_status tgl_cvm_check_deferred(tgl_ctx *ctx, tgl_frame *fr);

#endif /* TGL_PROGRAM_H */
