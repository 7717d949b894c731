/*
 * step_mem.c — the memory plan of a bound step: one arena, and an offset
 * in it for each fixed buffer, such that buffers alive at the same
 * instruction never overlap (step_mem.h).
 *
 * The whole step's lifetimes are known before anything is placed, so the
 * plan is made offline, greedy by size (the arena planners of TFLite and
 * XLA's heap simulator do the same): the buffers are taken from the
 * largest down, and each goes into the smallest gap, between the buffers
 * already placed whose lifetimes meet its own, that holds it, else above
 * them all.  Two buffers meet when some instruction lies in both closed
 * intervals, so an instruction's outputs never share bytes with its inputs
 * (a kernel may write its output before it has read all of its input).
 * Buffers of different kinds (dtypes) are treated as always alive together,
 * so each kind gets bytes of its own within the arena.  The arena's size
 * is the plan's peak; it is allocated once at that size.
 *
 * A linear scan over the instruction order with a free list (ggml-alloc's
 * dynamic allocator) was tried first: it places the small buffers written
 * early into the front of a large block freed early, and the large buffer
 * that comes later no longer fits there (on the 784-500-10 MLP step at
 * batch 60 it planned 480000 bytes where 362400 are alive at once; the
 * largest-first order plans 362432, and 362496 with its int64 and float32
 * buffers apart).  Neither is optimal (placing sized intervals is
 * NP-hard): the peak lies between the lower bound, per kind the most bytes
 * alive at one instruction, and the sum (on random lifetimes up to ~1.25x
 * the bound); spec/c/test_step_mem.c checks both bounds, and that no two
 * buffers alive at one instruction overlap, on hand-made and random
 * lifetimes.
 *
 * Cost: O(n^2) in the fixed buffers of one step, once per binding.
 */
#include "engine/step_mem.h"

#include <stdbool.h>
#include <stdlib.h>

typedef struct item {
    int64_t size;       /* rounded                                         */
    int32_t first, last, kind;
    int32_t i;          /* the buffer                                      */
    int64_t offset;
} item;

/* Largest first; equal sizes in the order they are written, then by index
 * (so the plan is deterministic). */
static int by_size(const void *pa, const void *pb)
{
    const item *a = pa, *b = pb;
    if (a->size != b->size)
        return a->size > b->size ? -1 : 1;
    if (a->first != b->first)
        return a->first < b->first ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

static int by_offset(const void *pa, const void *pb)
{
    const item *const *a = pa, *const *b = pb;
    if ((*a)->offset != (*b)->offset)
        return (*a)->offset < (*b)->offset ? -1 : 1;
    return (*a)->i < (*b)->i ? -1 : (*a)->i > (*b)->i;
}

int64_t tgl_step_mem_plan(tgl_step_buf *b, int32_t n, int64_t align)
{
    if (n > TGL_STEP_MEM_PLAN_MAX)
        return -1;
    item *it = malloc(sizeof *it * ((size_t)n + 1));
    item **meet = malloc(sizeof *meet * ((size_t)n + 1));
    if (!it || !meet) {
        free(it);
        free(meet);
        return -1;
    }
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        b[i].offset = 0;
        if (b[i].size <= 0)
            continue;
        int32_t last = b[i].last < b[i].first ? b[i].first : b[i].last;
        it[m++] = (item){(b[i].size + align - 1) & ~(align - 1), b[i].first, last, b[i].kind,
                         i, 0};
    }
    qsort(it, (size_t)m, sizeof *it, by_size);
    int64_t peak = 0;
    for (int32_t k = 0; k < m; k++) {
        /* the placed buffers alive with it (or of another kind), by offset */
        int32_t nm = 0;
        for (int32_t j = 0; j < k; j++)
            if (it[j].kind != it[k].kind ||
                (it[j].first <= it[k].last && it[k].first <= it[j].last))
                meet[nm++] = &it[j];
        qsort(meet, (size_t)nm, sizeof *meet, by_offset);
        int64_t at = -1, gap_best = 0, low = 0;
        for (int32_t j = 0; j < nm; j++) {
            int64_t gap = meet[j]->offset - low;
            if (gap >= it[k].size && (at < 0 || gap < gap_best)) {
                at = low;
                gap_best = gap;
            }
            if (meet[j]->offset + meet[j]->size > low)
                low = meet[j]->offset + meet[j]->size;
        }
        it[k].offset = at >= 0 ? at : low;
        if (it[k].offset + it[k].size > peak)
            peak = it[k].offset + it[k].size;
        b[it[k].i].offset = it[k].offset;
    }
    free(it);
    free(meet);
    return peak;
}
