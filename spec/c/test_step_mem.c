/*
 * test_step_mem.c — the memory planner of a bound step (src/engine/
 * step_mem.c): on hand-made lifetimes, buffers whose intervals meet never
 * share a byte, every offset is aligned and inside the arena, buffers with
 * disjoint lifetimes do share (the peak is below the sum), and the edge
 * cases hold: no buffer, zero-size buffers, one instruction, every buffer
 * live at once, a `last` before `first`; buffers of different kinds
 * (dtypes) never share.  Random lifetimes and kinds check the same
 * invariants and that the peak lies between the lower bound (per kind, the
 * most bytes of it alive at one instruction, added up) and the sum.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "engine/step_mem.h"

#define ALIGN 64

static int64_t rounded(int64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* Checks a plan: alignment, inside [0, peak), no overlap of buffers whose
 * intervals meet; returns the lower bound (most rounded bytes alive at one
 * instruction). */
static int64_t check_plan(const tgl_step_buf *b, int32_t n, int64_t peak)
{
    int64_t sum = 0;
    int32_t tmax = 0;
    for (int32_t i = 0; i < n; i++) {
        assert_true(b[i].offset >= 0);
        assert_int_equal(b[i].offset % ALIGN, 0);
        if (b[i].size <= 0) {
            assert_int_equal(b[i].offset, 0);
            continue;
        }
        assert_true(b[i].offset + rounded(b[i].size) <= peak);
        sum += rounded(b[i].size);
        if (b[i].last > tmax)
            tmax = b[i].last;
        if (b[i].first > tmax)
            tmax = b[i].first;
        for (int32_t j = 0; j < i; j++) {
            if (b[j].size <= 0)
                continue;
            int32_t li = b[i].last < b[i].first ? b[i].first : b[i].last;
            int32_t lj = b[j].last < b[j].first ? b[j].first : b[j].last;
            bool meet = (b[i].first <= lj && b[j].first <= li) || b[i].kind != b[j].kind;
            bool overlap = b[i].offset < b[j].offset + rounded(b[j].size) &&
                           b[j].offset < b[i].offset + rounded(b[i].size);
            if (meet && overlap)
                fail_msg("buffers %d [%d,%d] and %d [%d,%d] overlap in memory", i, b[i].first,
                         li, j, b[j].first, lj);
        }
    }
    assert_true(peak <= sum);
    int64_t bound = 0;
    for (int32_t kind = 0; kind < 4; kind++) {
        int64_t most = 0;
        for (int32_t t = 0; t <= tmax; t++) {
            int64_t live = 0;
            for (int32_t i = 0; i < n; i++) {
                int32_t li = b[i].last < b[i].first ? b[i].first : b[i].last;
                if (b[i].kind == kind && b[i].size > 0 && b[i].first <= t && t <= li)
                    live += rounded(b[i].size);
            }
            if (live > most)
                most = live;
        }
        bound += most;
    }
    assert_true(peak >= bound);
    return bound;
}

static void a_chain_reuses_two_buffers(void **state)
{
    (void)state;
    /* x0 -> x1 -> ... -> x9, each read only by the next: two alive at once */
    tgl_step_buf b[10];
    for (int i = 0; i < 10; i++)
        b[i] = (tgl_step_buf){.size = 4000, .first = i, .last = i + 1};
    int64_t peak = tgl_step_mem_plan(b, 10, ALIGN);
    check_plan(b, 10, peak);
    assert_int_equal(peak, 2 * rounded(4000));
    assert_true(peak < 10 * rounded(4000));
}

static void an_mlp_like_step(void **state)
{
    (void)state;
    /* forward h = tanh(xW+b), y = softmax(hV+c); backward reads h and y
     * again: the long-lived ones must not be overwritten by the short ones */
    tgl_step_buf b[] = {
        {.size = 60 * 500 * 4, .first = 0, .last = 1},  /* xW            */
        {.size = 60 * 500 * 4, .first = 1, .last = 6},  /* h, read by dV */
        {.size = 60 * 10 * 4, .first = 2, .last = 3},   /* hV            */
        {.size = 60 * 10 * 4, .first = 3, .last = 5},   /* y             */
        {.size = 60 * 8, .first = 4, .last = 4},        /* labels int64  */
        {.size = 60 * 10 * 4, .first = 5, .last = 7},   /* dy            */
        {.size = 500 * 10 * 4, .first = 6, .last = 9},  /* dV            */
        {.size = 60 * 500 * 4, .first = 7, .last = 8},  /* dh            */
        {.size = 784 * 500 * 4, .first = 8, .last = 9}, /* dW            */
    };
    int32_t n = sizeof b / sizeof *b;
    int64_t peak = tgl_step_mem_plan(b, n, ALIGN);
    int64_t bound = check_plan(b, n, peak);
    int64_t sum = 0;
    for (int32_t i = 0; i < n; i++)
        sum += rounded(b[i].size);
    assert_true(peak < sum);
    /* best fit: within 1% of the most bytes alive at one instruction */
    assert_true((double)peak <= 1.01 * (double)bound);
}

static void edge_cases(void **state)
{
    (void)state;
    /* no buffer */
    assert_int_equal(tgl_step_mem_plan(NULL, 0, ALIGN), 0);
    /* zero-size buffers take no room and sit at 0 */
    tgl_step_buf z[3] = {{.size = 0, .first = 0, .last = 5, .offset = 77},
                         {.size = 100, .first = 1, .last = 2},
                         {.size = 0, .first = 2, .last = 2, .offset = 9}};
    int64_t peak = tgl_step_mem_plan(z, 3, ALIGN);
    assert_int_equal(peak, ALIGN * 2);
    assert_int_equal(z[0].offset, 0);
    assert_int_equal(z[2].offset, 0);
    check_plan(z, 3, peak);
    /* one instruction writing three buffers: all alive together */
    tgl_step_buf one[3] = {{.size = 1, .first = 0, .last = 0},
                           {.size = 64, .first = 0, .last = 0},
                           {.size = 65, .first = 0, .last = 0}};
    peak = tgl_step_mem_plan(one, 3, ALIGN);
    check_plan(one, 3, peak);
    assert_int_equal(peak, 64 + 64 + 128);
    /* every buffer alive at once: the peak is the sum */
    tgl_step_buf all[20];
    int64_t sum = 0;
    for (int i = 0; i < 20; i++) {
        all[i] = (tgl_step_buf){.size = 100 * (i + 1), .first = i, .last = 30};
        sum += rounded(100 * (i + 1));
    }
    peak = tgl_step_mem_plan(all, 20, ALIGN);
    check_plan(all, 20, peak);
    assert_int_equal(peak, sum);
    /* a buffer nothing reads (last before first) lives at its writer */
    tgl_step_buf w[2] = {{.size = 64, .first = 3, .last = -1}, {.size = 64, .first = 4, .last = 4}};
    peak = tgl_step_mem_plan(w, 2, ALIGN);
    check_plan(w, 2, peak);
    assert_int_equal(peak, 64);
    /* disjoint lifetimes, but different kinds: no sharing */
    tgl_step_buf k2[3] = {{.size = 64, .first = 0, .last = 1, .kind = 0},
                          {.size = 64, .first = 2, .last = 3, .kind = 1},
                          {.size = 64, .first = 4, .last = 5, .kind = 0}};
    peak = tgl_step_mem_plan(k2, 3, ALIGN);
    check_plan(k2, 3, peak);
    assert_int_equal(peak, 128);
    assert_int_equal(k2[0].offset, k2[2].offset);
    /* an input read by its own output's writer never shares with it */
    tgl_step_buf io[2] = {{.size = 64, .first = 0, .last = 1}, {.size = 64, .first = 1, .last = 2}};
    peak = tgl_step_mem_plan(io, 2, ALIGN);
    check_plan(io, 2, peak);
    assert_int_equal(peak, 128);
}

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint32_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static void random_lifetimes(void **state)
{
    (void)state;
    double worst = 1;
    for (int round = 0; round < 400; round++) {
        int32_t n = 1 + (int32_t)(next_rand() % 60), T = 1 + (int32_t)(next_rand() % 80);
        tgl_step_buf *b = malloc(sizeof *b * (size_t)n);
        assert_non_null(b);
        for (int32_t i = 0; i < n; i++) {
            int32_t first = (int32_t)(next_rand() % (uint32_t)T);
            int32_t len = next_rand() % 4 ? (int32_t)(next_rand() % 5) : (int32_t)(next_rand() % (uint32_t)T);
            int64_t size = next_rand() % 10 == 0 ? 0 : 1 + (int64_t)(next_rand() % 100000);
            b[i] = (tgl_step_buf){.size = size, .first = first, .last = first + len,
                                  .kind = round % 2 ? (int32_t)(next_rand() % 3) : 0};
        }
        int64_t peak = tgl_step_mem_plan(b, n, ALIGN);
        int64_t bound = check_plan(b, n, peak);
        if (bound > 0 && (double)peak / (double)bound > worst)
            worst = (double)peak / (double)bound;
        free(b);
    }
    print_message("worst peak / lower bound over random lifetimes: %.3f\n", worst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_chain_reuses_two_buffers),
        cmocka_unit_test(an_mlp_like_step),
        cmocka_unit_test(edge_cases),
        cmocka_unit_test(random_lifetimes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
