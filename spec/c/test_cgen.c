/*
 * test_cgen.c — the code generator's values (src/cgen): fused programs
 * built by hand, rendered to C, compiled with libtcc and with the system
 * compiler, and run over arrays against the reference kernels (tgl_eval
 * on the original ops) as the oracle.
 *
 * Every elementwise op in every dtype it applies to, on edge values (NaN,
 * +-inf, -0.0, extreme and wrapping integers, negative mod), every cast, in
 * the unit (contiguous) and strided paths; fused chains with row, column
 * and scalar broadcasting; several outputs; fused reductions over all, the
 * last and the first axes, on one thread and on several.  Only libm's
 * transcendental functions may differ from the reference, by a few ulps
 * (glibc's vector variants); everything else matches bit for bit.
 * test_cgen_cache.c covers compiling, tiers and the disk cache.
 */
#include "cgen_test.h"

#include "engine/ops/elemwise_def.h"

/* ---- the embedded header ----------------------------------------------- */

/* The header generated sources embed is tgl_kernel.h, byte for byte. */
static void kernel_header_embedded_verbatim(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s", __FILE__);
    char *cut = strstr(path, "spec/c/test_cgen.c");
    assert_non_null(cut);
    snprintf(cut, sizeof path - (size_t)(cut - path), "src/cgen/tgl_kernel.h");
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    assert_string_equal(tgl_cgen_kernel_header, text);
}

/* ---- every elementwise op and cast -------------------------------------- */

/* elemwise.c's compute dtype for inputs all of dtype dt (the kinds of
 * engine/ops/elemwise_def.h). */
static int compute_dtype(int op, int dt)
{
    int kind = tgl_elemwise_get(op)->kind;
    if (kind == TGL_EW_LOGIC)
        return TGL_BOOL;
    if (kind == TGL_EW_MATH && dt != TGL_FLOAT32 && dt != TGL_FLOAT64)
        return TGL_FLOAT64;
    if (dt == TGL_BOOL && kind != TGL_EW_CMP && kind != TGL_EW_SELECT)
        return TGL_INT64;
    return dt;
}

/* Instruction x converted to dtype to (a CAST when needed). */
static int as(pb *b, int x, int to)
{
    return b->code[x].dtype == to ? x : pb_op(b, TGL_OP_CAST, to, x, -1, -1);
}

typedef struct case_ {
    int op, from, to; /* op (CAST: from -> to) */
    tgl_array *want;
} case_;

/* Runs b's program in libtcc and cc, unit and strided, against cases. */
static void check_cases(tgl_ctx *ctx, pb *b, tgl_array **in, tgl_array **sin, case_ *cs,
                        int ncase, const char *what)
{
    static const char *modes[] = {"tcc", "sync"};
    for (int m = 0; m < 2; m++) {
        tgl_backend_release(&b->p);
        for (int s = 0; s < 2; s++) {
            tgl_array *out[64] = {NULL};
            run_prog(ctx, &b->p, modes[m], s ? sin : in, out);
            assert_int_equal(tgl_backend_tier(&b->p, TGL_DEVICE_CPU), m + 1);
            for (int k = 0; k < ncase; k++) {
                char msg[160];
                snprintf(msg, sizeof msg, "%s %s %s->%s (%s, %s)", what,
                         tgl_op_name(cs[k].op), tgl_dtype_name(cs[k].from),
                         tgl_dtype_name(cs[k].to), modes[m], s ? "strided" : "unit");
                bool fl = cs[k].to == TGL_FLOAT32 || cs[k].to == TGL_FLOAT64;
                expect_match(out[k], cs[k].want, fl && libm_op(cs[k].op) ? 8 : 0, msg);
            }
            release_all(out, b->p.nout);
        }
    }
    tgl_backend_release(&b->p);
}

static void elementwise_ops_match_reference_in_every_dtype(void **state)
{
    for (int dt = 0; dt < TGL_NDTYPES; dt++) {
        int64_t n = (int64_t)nvals(dt) * nvals(dt);
        tgl_array *in[4], *sin[4];
        int dts[4] = {dt, dt, dt, TGL_BOOL};
        for (int j = 0; j < 4; j++) {
            in[j] = edge_array(CTX, dts[j], n, j, false);
            sin[j] = edge_array(CTX, dts[j], n, j, true);
        }
        pb b;
        pb_init(&b, 1);
        int x = pb_in(&b, dt, 0), y = pb_in(&b, dt, 0), z = pb_in(&b, dt, 0);
        int c = pb_in(&b, TGL_BOOL, 0);
        case_ cs[64];
        int ncase = 0;
        for (int op = 0; op < TGL_NOPS; op++) {
            const tgl_elemwise_def *d = tgl_elemwise_get(op);
            if (!d || d->kind == TGL_EW_CAST)
                continue;
            int ar = d->arity;
            tgl_array *args[3] = {in[0], in[1], in[2]};
            if (op == TGL_OP_SWITCH)
                args[0] = in[3], args[1] = in[0], args[2] = in[1];
            tgl_array *want = NULL;
            if (tgl_eval(CTX, op, ar, args, NULL, &want) != TGL_OK) {
                tgl_ctx_clear_error(CTX); /* not defined for dt (neg of bool...) */
                continue;
            }
            int cdt = compute_dtype(op, dt), i;
            if (op == TGL_OP_SWITCH)
                i = pb_op(&b, op, dt, c, x, y);
            else if (ar == 1)
                i = pb_op(&b, op, want->dtype_id, as(&b, x, cdt), -1, -1);
            else if (ar == 2)
                i = pb_op(&b, op, want->dtype_id, as(&b, x, cdt), as(&b, y, cdt), -1);
            else
                i = pb_op(&b, op, want->dtype_id, as(&b, x, cdt), as(&b, y, cdt), as(&b, z, cdt));
            pb_out(&b, i);
            cs[ncase++] = (case_){op, dt, want->dtype_id, want};
        }
        assert_true(ncase >= 30);
        check_cases(CTX, &b, in, sin, cs, ncase, "op");
        for (int k = 0; k < ncase; k++)
            tgl_array_release(cs[k].want);
        release_all(in, 4);
        release_all(sin, 4);
    }
}

static void casts_match_reference_between_every_dtype(void **state)
{
    int64_t n = 2 * COUNT(fvals);
    tgl_array *in[TGL_NDTYPES], *sin[TGL_NDTYPES];
    pb b;
    pb_init(&b, 1);
    int x[TGL_NDTYPES];
    for (int dt = 0; dt < TGL_NDTYPES; dt++) {
        in[dt] = edge_array(CTX, dt, n, 0, false);
        sin[dt] = edge_array(CTX, dt, n, 0, true);
        x[dt] = pb_in(&b, dt, 0);
    }
    case_ cs[TGL_NDTYPES * TGL_NDTYPES];
    int ncase = 0;
    for (int from = 0; from < TGL_NDTYPES; from++)
        for (int to = 0; to < TGL_NDTYPES; to++) {
            tgl_params p = {.n = 1, .i = {to}};
            tgl_array *want = NULL;
            assert_ok(CTX, tgl_eval(CTX, TGL_OP_CAST, 1, &in[from], &p, &want));
            pb_out(&b, pb_op(&b, TGL_OP_CAST, to, x[from], -1, -1));
            cs[ncase++] = (case_){TGL_OP_CAST, from, to, want};
        }
    check_cases(CTX, &b, in, sin, cs, ncase, "cast");
    for (int k = 0; k < ncase; k++)
        tgl_array_release(cs[k].want);
    release_all(in, TGL_NDTYPES);
    release_all(sin, TGL_NDTYPES);
}

/* ---- fused programs ------------------------------------------------------- */

/* A float32 array of shape (r, c) with values from a simple formula;
 * transposed: a view of a (c, r) array. */
static tgl_array *grid(tgl_ctx *ctx, int dt, int64_t r, int64_t c, bool transposed, double scale)
{
    int64_t shape[2] = {transposed ? c : r, transposed ? r : c};
    tgl_array *a = NULL, *t = NULL;
    assert_ok(ctx, tgl_array_empty(ctx, dt, 2, shape, &a));
    for (int64_t i = 0; i < a->size; i++)
        tgl_store_from_double(dt, a->data, i, scale * sin(0.37 * (double)i + 0.1) + (i % 5 == 0));
    if (!transposed)
        return a;
    assert_ok(ctx, tgl_array_transpose(ctx, a, NULL, &t));
    tgl_array_release(a);
    return t;
}

static tgl_array *eval2(tgl_ctx *ctx, int op, tgl_array *a, tgl_array *b)
{
    tgl_array *in[2] = {a, b}, *out = NULL;
    assert_ok(ctx, tgl_eval(ctx, op, b ? 2 : 1, in, NULL, &out));
    return out;
}

/* tanh(x * row + col) * s + 5 with row (1,C), column (R,1) and scalar
 * (1,1) broadcasts, x contiguous or transposed, on 1 and 3 threads.  (+5,
 * not a smaller constant: cancellation would magnify tanh's last-ulp
 * differences beyond a relative tolerance.) */
static void fused_chain_broadcasts_rows_columns_and_scalars(void **state)
{
    int64_t R = 64, C = 600;
    for (int tr = 0; tr < 2; tr++) {
        tgl_array *x = grid(CTX, TGL_FLOAT32, R, C, tr, 2.0);
        tgl_array *row = grid(CTX, TGL_FLOAT32, 1, C, false, 1.5);
        tgl_array *col = grid(CTX, TGL_FLOAT32, R, 1, false, 0.5);
        tgl_array *s = grid(CTX, TGL_FLOAT32, 1, 1, false, 3.0), *half = NULL;
        assert_ok(CTX, tgl_array_full(CTX, TGL_FLOAT32, 0, NULL, 5.0, &half));
        tgl_array *t1 = eval2(CTX, TGL_OP_MUL, x, row), *t2 = eval2(CTX, TGL_OP_ADD, t1, col);
        tgl_array *t3 = eval2(CTX, TGL_OP_TANH, t2, NULL), *t4 = eval2(CTX, TGL_OP_MUL, t3, s);
        tgl_array *want = eval2(CTX, TGL_OP_ADD, t4, half);
        pb b;
        pb_init(&b, 2);
        int ix = pb_in(&b, TGL_FLOAT32, 0), ir = pb_in(&b, TGL_FLOAT32, 1);
        int ic = pb_in(&b, TGL_FLOAT32, 2), is = pb_in(&b, TGL_FLOAT32, 3);
        int v = pb_op(&b, TGL_OP_MUL, TGL_FLOAT32, ix, ir, -1);
        v = pb_op(&b, TGL_OP_ADD, TGL_FLOAT32, v, ic, -1);
        v = pb_op(&b, TGL_OP_TANH, TGL_FLOAT32, v, -1, -1);
        v = pb_op(&b, TGL_OP_MUL, TGL_FLOAT32, v, is, -1);
        pb_out(&b, pb_op(&b, TGL_OP_ADD, TGL_FLOAT32, v, pb_const(&b, TGL_FLOAT32, 5.0), -1));
        tgl_array *in[4] = {x, row, col, s}, *got[2][1] = {{NULL}, {NULL}};
        for (int th = 0; th < 2; th++) {
            set(CTX, "threads", th ? "3" : "1");
            run_prog(CTX, &b.p, "sync", in, got[th]);
            expect_match(got[th][0], want, 8, tr ? "transposed chain" : "chain");
        }
        expect_match(got[1][0], got[0][0], 0, "3 threads vs 1");
        tgl_backend_release(&b.p);
        tgl_array *all[] = {x, row, col, s, half, t1, t2, t3, t4, want, got[0][0], got[1][0]};
        release_all(all, COUNT(all));
    }
}

/* One pass fills several outputs of different dtypes. */
static void multi_output_program_fills_every_output(void **state)
{
    int64_t n = 1000;
    tgl_array *x = edge_array(CTX, TGL_FLOAT64, n, 0, false);
    tgl_array *y = edge_array(CTX, TGL_FLOAT64, n, 2, true);
    tgl_array *want[4] = {eval2(CTX, TGL_OP_ADD, x, y), eval2(CTX, TGL_OP_MUL, x, y),
                          eval2(CTX, TGL_OP_LT, x, y), eval2(CTX, TGL_OP_SQRT, x, NULL)};
    pb b;
    pb_init(&b, 1);
    int ix = pb_in(&b, TGL_FLOAT64, 0), iy = pb_in(&b, TGL_FLOAT64, 0);
    pb_out(&b, pb_op(&b, TGL_OP_ADD, TGL_FLOAT64, ix, iy, -1));
    pb_out(&b, pb_op(&b, TGL_OP_MUL, TGL_FLOAT64, ix, iy, -1));
    pb_out(&b, pb_op(&b, TGL_OP_LT, TGL_BOOL, ix, iy, -1));
    pb_out(&b, pb_op(&b, TGL_OP_SQRT, TGL_FLOAT64, ix, -1, -1));
    tgl_array *in[2] = {x, y}, *got[4] = {NULL};
    run_prog(CTX, &b.p, "sync", in, got);
    for (int k = 0; k < 4; k++)
        expect_match(got[k], want[k], 0, "output");
    tgl_backend_release(&b.p);
    release_all(got, 4);
    release_all(want, 4);
    release_all(in, 2);
}

/* A 0-d space: one element, every operand a scalar. */
static void scalar_space(void **state)
{
    tgl_array *x = NULL, *y = NULL;
    assert_ok(CTX, tgl_array_full(CTX, TGL_INT32, 0, NULL, -7, &x));
    assert_ok(CTX, tgl_array_full(CTX, TGL_INT32, 0, NULL, 3, &y));
    tgl_array *want = eval2(CTX, TGL_OP_MOD, x, y);
    pb b;
    pb_init(&b, 0);
    int ix = pb_in(&b, TGL_INT32, 0), iy = pb_in(&b, TGL_INT32, 0);
    pb_out(&b, pb_op(&b, TGL_OP_MOD, TGL_INT32, ix, iy, -1));
    tgl_array *in[2] = {x, y}, *got[1] = {NULL};
    run_prog(CTX, &b.p, "sync", in, got);
    expect_match(got[0], want, 0, "0-d mod");
    assert_int_equal(((int32_t *)got[0]->data)[0], 2); /* Lua: -7 % 3 == 2 */
    tgl_backend_release(&b.p);
    tgl_array *all[] = {x, y, want, got[0]};
    release_all(all, 4);
}

/* A reduction of dtype dt by op over mask of an nd-d array, with the
 * elementwise value 1.5 * x (x itself for products), against sum/prod/
 * max/min of tgl_eval, on 1 and 4 threads. */
static void check_reduction(tgl_ctx *ctx, int dt, int op, int nd, const int64_t *shape,
                            uint32_t mask, int keep, bool nans)
{
    tgl_array *x = NULL;
    assert_ok(ctx, tgl_array_empty(ctx, dt, nd, shape, &x));
    for (int64_t i = 0; i < x->size; i++) {
        double v = op == TGL_OP_PROD ? (i % 7 ? 1.0 + 0.01 * sin((double)i) : -1.0)
                                     : 100 * sin(1.3 * (double)i) + 150; /* no cancellation */
        if (dt != TGL_FLOAT32 && dt != TGL_FLOAT64)
            v = op == TGL_OP_PROD ? (double)(1 + i % 3) : (double)((i * 7919) % 2001 - 1000);
        if (nans && i % 997 == 3)
            v = NAN;
        tgl_store_from_double(dt, x->data, i, v);
    }
    pb b;
    pb_init(&b, nd);
    int ix = pb_in(&b, dt, 0), v = ix;
    tgl_array *val = x;
    tgl_array_retain(x);
    if (op != TGL_OP_PROD && dt != TGL_BOOL) {
        tgl_array *k = NULL;
        assert_ok(ctx, tgl_array_full(ctx, dt, 0, NULL,
                                      dt == TGL_FLOAT32 || dt == TGL_FLOAT64 ? 1.5 : 3, &k));
        tgl_array_release(val);
        val = eval2(ctx, TGL_OP_MUL, x, k);
        tgl_array_release(k);
        v = pb_op(&b, TGL_OP_MUL, dt, ix,
                  pb_const(&b, dt, dt == TGL_FLOAT32 || dt == TGL_FLOAT64 ? 1.5 : 3), -1);
    }
    pb_out(&b, v);
    pb_reduce(&b, op, mask, keep);
    tgl_params p = {.flags = keep ? TGL_REDUCE_KEEPDIMS : 0};
    for (int d = 0; d < nd; d++)
        if ((mask >> d) & 1u)
            p.i[p.n++] = d;
    tgl_array *want = NULL, *got[2] = {NULL};
    assert_ok(ctx, tgl_eval(ctx, op, 1, &val, &p, &want));
    /* Sums and products: the order of the additions differs. */
    double ulps = dt == TGL_FLOAT64 && op != TGL_OP_MAX && op != TGL_OP_MIN ? 1e5
                  : dt == TGL_FLOAT32 && op != TGL_OP_MAX && op != TGL_OP_MIN ? 1 : 0;
    char what[160];
    for (int th = 0; th < 2; th++) {
        set(ctx, "threads", th ? "4" : "1");
        run_prog(ctx, &b.p, "sync", &x, got);
        snprintf(what, sizeof what, "%s %s over 0x%x of %d-d (%s)%s", tgl_op_name(op),
                 tgl_dtype_name(dt), (unsigned)mask, nd, th ? "4 threads" : "1 thread",
                 keep ? " keepdims" : "");
        assert_int_equal(got[0]->ndim, want->ndim);
        expect_match(got[0], want, ulps, what);
        tgl_array_release(got[0]);
    }
    tgl_backend_release(&b.p);
    tgl_array_release(want);
    tgl_array_release(val);
    tgl_array_release(x);
}

static void fused_reductions_over_all_last_and_first_axes(void **state)
{
    static const int64_t s2[2] = {300, 200}, wide[2] = {8, 10000}, s3[3] = {20, 30, 100};
    static const int ops[] = {TGL_OP_SUM, TGL_OP_PROD, TGL_OP_MAX, TGL_OP_MIN};
    static const int dts[] = {TGL_FLOAT32, TGL_FLOAT64, TGL_INT32, TGL_INT64, TGL_UINT8};
    for (int o = 0; o < 4; o++) {
        for (int t = 0; t < COUNT(dts); t++)
            for (uint32_t mask = 1; mask <= 3; mask++)
                check_reduction(CTX, dts[t], ops[o], 2, s2, mask, 0, false);
        /* long kept rows (split by columns), a middle axis, keepdims */
        check_reduction(CTX, TGL_FLOAT32, ops[o], 2, wide, 1, 1, false);
        check_reduction(CTX, TGL_INT64, ops[o], 2, wide, 1, 0, false);
        check_reduction(CTX, TGL_FLOAT64, ops[o], 3, s3, 2, 0, false);
        check_reduction(CTX, TGL_INT32, ops[o], 3, s3, 2, 1, false);
        /* NaN propagates through every path */
        for (uint32_t mask = 1; mask <= 3; mask++)
            check_reduction(CTX, TGL_FLOAT64, ops[o], 2, s2, mask, mask == 3, true);
        check_reduction(CTX, TGL_FLOAT32, ops[o], 2, wide, 3, 0, true);
    }
    check_reduction(CTX, TGL_BOOL, TGL_OP_SUM, 2, s2, 2, 0, false);
    check_reduction(CTX, TGL_BOOL, TGL_OP_MAX, 2, s2, 1, 0, false);
}

/* A reduced output 0 next to an elementwise output 1. */
static void reduction_with_elementwise_output(void **state)
{
    int64_t shape[2] = {50, 700};
    tgl_array *x = grid(CTX, TGL_FLOAT64, shape[0], shape[1], false, 1.0);
    tgl_array *sq = eval2(CTX, TGL_OP_SQR, x, NULL), *want = NULL;
    tgl_params p = {.n = 1, .i = {1}};
    assert_ok(CTX, tgl_eval(CTX, TGL_OP_SUM, 1, &sq, &p, &want));
    pb b;
    pb_init(&b, 2);
    int v = pb_op(&b, TGL_OP_SQR, TGL_FLOAT64, pb_in(&b, TGL_FLOAT64, 0), -1, -1);
    pb_out(&b, v);
    pb_out(&b, v);
    pb_reduce(&b, TGL_OP_SUM, 2, 0);
    for (int th = 0; th < 2; th++) {
        tgl_array *got[2] = {NULL};
        set(CTX, "threads", th ? "2" : "1");
        run_prog(CTX, &b.p, "sync", &x, got);
        expect_match(got[0], want, 5000, "row sums");
        expect_match(got[1], sq, 0, "squares");
        release_all(got, 2);
    }
    tgl_backend_release(&b.p);
    tgl_array *all[] = {x, sq, want};
    release_all(all, 3);
}

/* Empty spaces: nothing to do, sums of nothing are 0, max of nothing fails. */
static void empty_spaces_and_empty_reductions(void **state)
{
    int64_t shape[2] = {0, 5};
    tgl_array *x = NULL, *out = NULL;
    assert_ok(CTX, tgl_array_empty(CTX, TGL_FLOAT64, 2, shape, &x));
    for (int op = TGL_OP_SUM; op <= TGL_OP_MAX; op += TGL_OP_MAX - TGL_OP_SUM) {
        pb b;
        pb_init(&b, 2);
        pb_out(&b, pb_in(&b, TGL_FLOAT64, 0));
        pb_reduce(&b, op, 1, 0);
        set(CTX, "compile", "tcc");
        assert_ok(CTX, tgl_backend_prepare(CTX, TGL_DEVICE_CPU, &b.p));
        assert_ok(CTX, tgl_array_empty(CTX, TGL_FLOAT64, 1, &shape[1], &out));
        tgl_status st = tgl_backend_launch(CTX, &b.p, TGL_DEVICE_CPU, &x, &out, NULL);
        if (op == TGL_OP_SUM) {
            assert_int_equal(st, TGL_OK);
            for (int i = 0; i < 5; i++)
                assert_true(((double *)out->data)[i] == 0.0);
        } else {
            assert_int_equal(st, TGL_ESHAPE);
            assert_non_null(strstr(tgl_ctx_error(CTX), "zero-size"));
        }
        tgl_array_release(out);
        tgl_backend_release(&b.p);
    }
    tgl_array_release(x);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(kernel_header_embedded_verbatim),
        T(elementwise_ops_match_reference_in_every_dtype),
        T(casts_match_reference_between_every_dtype),
        T(fused_chain_broadcasts_rows_columns_and_scalars),
        T(multi_output_program_fills_every_output),
        T(scalar_space),
        T(fused_reductions_over_all_last_and_first_axes),
        T(reduction_with_elementwise_output),
        T(empty_spaces_and_empty_reductions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
