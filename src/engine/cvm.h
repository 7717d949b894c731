/*
 * cvm.h — internal header of compiled functions: the CVM program (a flat
 * instruction array over numbered storage slots) and the function that
 * owns it.  function.c builds programs from graphs; cvm.c runs them.
 */
#ifndef TGL_CVM_H
#define TGL_CVM_H

#include "engine/ops/ops.h"

typedef enum tgl_instr_kind {
    TGL_I_OP,      /* s[out] = op(s[in...])                                  */
    TGL_I_JUMPZ,   /* if not s[in[0]] then pc = target                       */
    TGL_I_JUMP,    /* pc = target                                            */
    TGL_I_MOVE     /* s[out] = s[in[0]] (a new reference, no copy)            */
} tgl_instr_kind;

typedef struct tgl_instr {
    int32_t kind;
    int32_t out;
    int32_t nin;
    int32_t target;
    int32_t *in;
    int32_t nfree;           /* cvm linker: slots released after this one  */
    int32_t *free_slots;
    const tgl_node *node;    /* for TGL_I_OP: what it computes             */
    const tgl_opimpl *impl;
    int32_t inplace;         /* input whose buffer the output takes, or -1 */
    int32_t update;          /* deferred in-place update of update k, or -1 */
    int32_t nouts;           /* fused: slot of each program output, or -1  */
    int32_t *outs;
    uint64_t calls, ns;      /* profile                                    */
} tgl_instr;

/* What a slot holds between calls. */
typedef enum tgl_slot_kind {
    TGL_SLOT_TEMP,      /* an intermediate                                  */
    TGL_SLOT_INPUT,     /* an argument of the call                          */
    TGL_SLOT_CONSTANT,  /* set once at compile time                         */
    TGL_SLOT_SHARED     /* a shared variable's value, read at each call     */
} tgl_slot_kind;

struct tgl_function {
    tgl_ctx *ctx;            /* retained: keeps the nodes alive            */
    char *name;
    int linker, profile, mode;
    int nin, nout, nupd;
    int32_t nslots;
    tgl_array **slot;
    tgl_node **slot_node;
    uint8_t *slot_kind;
    int32_t *in_slot;        /* per input                                  */
    int32_t *out_slot;       /* per output                                 */
    tgl_node **upd_var;      /* per update: the shared variable            */
    int32_t *upd_slot;       /* per update: the slot of its new value      */
    tgl_instr *code;
    int32_t ncode;
    bool have_inputs;        /* a call has set the input slots             */
    bool has_jumps;
    int32_t defer_start;     /* first deferred update instruction (ncode: none) */
    tgl_array **last_out;    /* outputs of the last run                    */
    tgl_node **roots;        /* the optimized outputs, then update values  */
    uint64_t ncalls, total_ns;
};

/* The memory plan (plan.c): early releases and in-place steps. */
tgl_status tgl_plan_memory(tgl_ctx *ctx, tgl_function *fn, bool inplace);

/* Runs instructions [from, to) of the program on the current slots. */
tgl_status tgl_cvm_run(tgl_ctx *ctx, tgl_function *fn, int32_t from, int32_t to);
/* Checks that the deferred update instructions will not fail on shapes:
 * run before any of them writes into a shared variable. */
tgl_status tgl_cvm_check_deferred(tgl_ctx *ctx, tgl_function *fn);

/* Monotonic nanoseconds. */
uint64_t tgl_now_ns(void);

#endif /* TGL_CVM_H */
