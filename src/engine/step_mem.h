/*
 * step_mem.h — where the fixed buffers of a bound step lie (step_mem.c):
 * buffers whose lifetimes are disjoint share bytes of one arena, so a
 * bound step holds the peak of its intermediates, not their sum.
 *
 * The planner knows nothing of programs or arrays: a buffer is a size and
 * the closed interval of instruction indices during which it may be
 * written or read.  step.c derives the intervals (views, outputs, the
 * deferred updates) and moves the buffers into the arena.
 */
#ifndef TGL_STEP_MEM_H
#define TGL_STEP_MEM_H
#include <stdint.h>

typedef struct tgl_step_buf {
    int64_t size;      /* bytes; 0 takes no room (its offset is 0)          */
    int32_t first;     /* the instruction that writes it                    */
    int32_t last;      /* the last instruction that may read it (>= first;
                          a smaller one is taken as first)                  */
    int32_t kind;      /* buffers of different kinds never share a byte
                          (step.c: the dtype)                               */
    int64_t offset;    /* out: from the arena's start, a multiple of align  */
} tgl_step_buf;

/* The placement is quadratic in the buffers (each is checked against
 * every one placed before it), so a step of more than this many buffers
 * (a 10^5-link chain: spec/deep_spec.lua) is not planned and each buffer
 * keeps a storage of its own, as when memory runs out.  A bound on the
 * planner's time, not on what is correct. */
#define TGL_STEP_MEM_PLAN_MAX 4096

/* Places the n buffers so that two whose intervals meet (share an
 * instruction), or whose kinds differ, never share a byte; every size is rounded up to align (a
 * power of two).  Returns the arena's size (the planned peak), or -1 when
 * out of memory or n > TGL_STEP_MEM_PLAN_MAX (offsets then unset). */
int64_t tgl_step_mem_plan(tgl_step_buf *b, int32_t n, int64_t align);

#endif /* TGL_STEP_MEM_H */
