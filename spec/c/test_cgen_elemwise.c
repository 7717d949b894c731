/*
 * test_cgen_elemwise.c — the elementwise op table (src/engine/ops/
 * elemwise_def.h), entry by entry: for every elementwise op and every
 * compute dtype its kind allows, the reference kernel (the entry's
 * expression as the engine compiled it) against a kernel generated from
 * the same entry and compiled by libtcc and by the system compiler (-O3,
 * vectorized), on contiguous and strided operands, on edge values (NaN,
 * +-inf, +-0, +-1, large, integer extremes).  Casts between every pair of
 * dtypes are test_cgen.c's.
 *
 * libtcc's code calls the same scalar libm as the reference: it matches bit
 * for bit.  The system compiler's may call libmvec's vector functions, so
 * an expression calling a transcendental function matches within a few
 * ulps there, and everything else bit for bit.
 */
#include "cgen_test.h"

#include "engine/ops/elemwise_def.h"

#include <ctype.h>

/* Whether C text s calls a libm function that libmvec has in vector form
 * (cgint.h's TGL_CGEN_LIBMVEC). */
static bool calls_vector_libm(const char *s)
{
#define LM(name, since) {#name, true},
    static const struct {
        const char *name;
        bool vec;
    } libm[] = {TGL_CGEN_LIBMVEC(LM)};
#undef LM
    while (*s) {
        if (!isalpha((unsigned char)*s) && *s != '_') {
            s++;
            continue;
        }
        const char *t = s;
        while (isalnum((unsigned char)*s) || *s == '_')
            s++;
        for (int k = 0; k < COUNT(libm); k++)
            if (libm[k].vec && strlen(libm[k].name) == (size_t)(s - t) &&
                !strncmp(t, libm[k].name, (size_t)(s - t)))
                return true;
    }
    return false;
}

/* The table has an entry for exactly the ops of the elemwise family, with
 * the forms its kind computes in. */
static void table_covers_the_elemwise_family(void **state)
{
    (void)state;
    int entries = 0;
    for (int op = 0; op < TGL_NOPS; op++) {
        const tgl_elemwise_def *d = tgl_elemwise_get(op);
        bool fam = tgl_op_impl(op)->family == TGL_FAM_ELEMWISE;
        if (!d) {
            if (fam)
                fail_msg("%s is elementwise but has no entry", tgl_op_name(op));
            continue;
        }
        entries++;
        if (!fam)
            fail_msg("%s has an entry but is not elementwise", tgl_op_name(op));
        assert_in_range(d->arity, 1, 3);
        assert_in_range(d->kind, TGL_EW_MATH, TGL_EW_CAST);
        assert_non_null(d->pull);
        bool fl = tgl_elemwise_computes(d->kind, TGL_FLOAT64);
        bool in = tgl_elemwise_computes(d->kind, TGL_INT64) ||
                  tgl_elemwise_computes(d->kind, TGL_BOOL);
        if (d->kind != TGL_EW_CAST && (fl != (strcmp(d->fexpr, "NONE") != 0) ||
                                       in != (strcmp(d->iexpr, "NONE") != 0)))
            fail_msg("%s: float form '%s', integer form '%s'", tgl_op_name(op), d->fexpr,
                     d->iexpr);
    }
    assert_true(entries > 0);
    assert_null(tgl_elemwise_get(-1));
    assert_null(tgl_elemwise_get(TGL_OP_SUM));
    assert_null(tgl_elemwise_get(TGL_NOPS));
}

typedef struct case_ {
    int op;
    tgl_array *want;
    bool vlibm; /* the cc kernel may differ in the last ulps */
} case_;

/* Runs b's program with libtcc and cc, on in and on strided sin, against
 * each case's reference result. */
static void check(tgl_ctx *ctx, pb *b, tgl_array **in, tgl_array **sin, case_ *cs, int ncase,
                  const char *what)
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
                snprintf(msg, sizeof msg, "%s %s (%s, %s)", tgl_op_name(cs[k].op), what,
                         modes[m], s ? "strided" : "unit");
                expect_match(out[k], cs[k].want, m == 1 && cs[k].vlibm ? 8 : 0, msg);
            }
            release_all(out, b->p.nout);
        }
    }
    tgl_backend_release(&b->p);
}

/* Every entry but cast, in every compute dtype: the program computes each
 * op on inputs already of that dtype, as fusion hands them over. */
static void generated_ops_match_reference_in_every_compute_dtype(void **state)
{
    int tested[TGL_NOPS] = {0};
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
        int v[4];
        for (int j = 0; j < 4; j++)
            v[j] = pb_in(&b, dts[j], 0);
        case_ cs[64];
        int ncase = 0;
        for (int op = 0; op < TGL_NOPS; op++) {
            const tgl_elemwise_def *d = tgl_elemwise_get(op);
            if (!d || d->kind == TGL_EW_CAST || !tgl_elemwise_computes(d->kind, dt))
                continue;
            bool sel = d->kind == TGL_EW_SELECT;
            int rdt = d->kind == TGL_EW_CMP || d->kind == TGL_EW_LOGIC ? TGL_BOOL : dt;
            tgl_array *args[3] = {sel ? in[3] : in[0], sel ? in[0] : in[1], sel ? in[1] : in[2]};
            int ops[3] = {sel ? v[3] : v[0], sel ? v[0] : v[1], sel ? v[1] : v[2]};
            tgl_array *want = NULL;
            assert_ok(CTX, tgl_eval(CTX, op, d->arity, args, NULL, &want));
            if (want->dtype_id != rdt)
                fail_msg("%s of %s gives %s, want %s", tgl_op_name(op), tgl_dtype_name(dt),
                         tgl_dtype_name(want->dtype_id), tgl_dtype_name(rdt));
            pb_out(&b, pb_op(&b, op, rdt, ops[0], d->arity > 1 ? ops[1] : -1,
                             d->arity > 2 ? ops[2] : -1));
            const char *form = tgl_dtype_is_float(dt) ? d->fexpr : d->iexpr;
            cs[ncase++] = (case_){op, want, calls_vector_libm(form) || calls_vector_libm(d->tmp)};
            tested[op]++;
        }
        check(CTX, &b, in, sin, cs, ncase, tgl_dtype_name(dt));
        for (int k = 0; k < ncase; k++)
            tgl_array_release(cs[k].want);
        release_all(in, 4);
        release_all(sin, 4);
    }
    /* Each entry ran in at least one dtype (a kind computing in none
     * would have skipped it). */
    for (int op = 0; op < TGL_NOPS; op++) {
        const tgl_elemwise_def *d = tgl_elemwise_get(op);
        if (d && d->kind != TGL_EW_CAST && !tested[op])
            fail_msg("%s ran in no dtype", tgl_op_name(op));
    }
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(table_covers_the_elemwise_family),
        T(generated_ops_match_reference_in_every_compute_dtype),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
