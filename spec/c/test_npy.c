/*
 * test_npy.c — specs of the .npy and .npz readers and writers
 * (tgl_npy_save/load, tgl_npz_save/load): bit-exact round trips for every
 * dtype and shape kind, the NumPy-written fixtures in spec/fixtures (made
 * by make_fixtures.py), every corruption we can think of failing cleanly
 * (run under -DTGL_SANITIZE=ON to make "cleanly" mean ASan-clean), and
 * atomic replacement of the destination.
 *
 * TGL_TEST_BIG=1 also runs an archive with a > 4 GiB entry (Zip64 sizes on
 * write); it needs about 9 GiB of memory and a minute.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tgl.h"

static tgl_ctx *ctx;
static char scratch[64];   /* a fresh directory under the working directory */

/* ---- helpers ---------------------------------------------------------- */

static const char *tpath(const char *name)
{
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", scratch, name);
    return buf[k];
}

/* spec/fixtures, found from this file's path (CMake compiles it by its
 * absolute path) unless TGL_FIXTURES says otherwise. */
static const char *fixture(const char *name)
{
    static char buf[1024];
    const char *env = getenv("TGL_FIXTURES"), *slash = strrchr(__FILE__, '/');
    if (env)
        snprintf(buf, sizeof buf, "%s/%s", env, name);
    else
        snprintf(buf, sizeof buf, "%.*s../fixtures/%s", slash ? (int)(slash - __FILE__ + 1) : 0,
                 __FILE__, name);
    return buf;
}

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(*len + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, *len, f), *len);
    fclose(f);
    return p;
}

static void write_all(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static tgl_array *make(int dtype, int ndim, const int64_t *shape)
{
    tgl_array *a = NULL;
    assert_int_equal(tgl_array_empty(ctx, dtype, ndim, shape, &a), TGL_OK);
    /* A byte pattern that makes every float bit pattern likely, NaNs too. */
    unsigned char *p = a->data;
    size_t n = (size_t)a->size * tgl_dtype_size(dtype);
    for (size_t i = 0; i < n; i++)
        p[i] = dtype == TGL_BOOL ? (unsigned char)(i % 3 == 0) : (unsigned char)(i * 151 + 7);
    return a;
}

static void assert_same(const tgl_array *a, const tgl_array *b)
{
    assert_int_equal(a->dtype_id, b->dtype_id);
    assert_int_equal(a->ndim, b->ndim);
    assert_int_equal(a->size, b->size);
    for (int i = 0; i < a->ndim; i++)
        assert_int_equal(a->shape[i], b->shape[i]);
    assert_true(tgl_array_is_contiguous(b));
    if (a->size)
        assert_memory_equal(a->data, b->data, (size_t)a->size * tgl_dtype_size(a->dtype_id));
}

static void assert_error(tgl_status got, tgl_status want, const char *needle)
{
    if (got != want || !strstr(tgl_ctx_error(ctx), needle))
        fail_msg("status %d (want %d), message \"%s\" (want it to contain \"%s\")", got, want,
                 tgl_ctx_error(ctx), needle);
}

/* Loading (npz: as an archive) must fail without writing the
 * out-parameter or leaking array storage. */
static void expect_fails(int npz, const char *path, tgl_status want, const char *needle)
{
    int64_t live = tgl_memory_live_bytes();
    tgl_array *a = NULL;
    tgl_npz *z = NULL;
    assert_error(npz ? tgl_npz_load(ctx, path, &z) : tgl_npy_load(ctx, path, &a), want, needle);
    assert_true(a == NULL && z == NULL);
    assert_int_equal(tgl_memory_live_bytes(), live);
}
#define expect_load_fails(...) expect_fails(0, __VA_ARGS__)
#define expect_npz_fails(...) expect_fails(1, __VA_ARGS__)

static tgl_array *load_ok(const char *path)
{
    tgl_array *a = NULL;
    tgl_status st = tgl_npy_load(ctx, path, &a);
    if (st != TGL_OK)
        fail_msg("loading %s: %s", path, tgl_ctx_error(ctx));
    return a;
}

static tgl_npz *npz_ok(const char *path)
{
    tgl_npz *z = NULL;
    tgl_status st = tgl_npz_load(ctx, path, &z);
    if (st != TGL_OK)
        fail_msg("loading %s: %s", path, tgl_ctx_error(ctx));
    return z;
}

static void assert_shape(const tgl_array *a, int dtype, int ndim, const int64_t *shape)
{
    assert_int_equal(a->dtype_id, dtype);
    assert_int_equal(a->ndim, ndim);
    for (int i = 0; i < ndim; i++)
        assert_int_equal(a->shape[i], shape[i]);
}

/* A .npy file with a hand-written header (version major.0). */
static void craft(const char *path, int major, const char *header, const void *data, size_t n)
{
    size_t hl = strlen(header), pre = major == 1 ? 10 : 12;
    unsigned char *b = malloc(pre + hl + n + 1);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = 0;
    b[8] = (unsigned char)hl;
    b[9] = (unsigned char)(hl >> 8);
    b[10] = b[11] = 0;
    memcpy(b + pre, header, hl);
    if (n)
        memcpy(b + pre + hl, data, n);
    write_all(path, b, pre + hl + n);
    free(b);
}

/* Offset of the first occurrence of the 4-byte signature, or -1. */
static long find_sig(const unsigned char *p, size_t n, const char *sig)
{
    for (size_t i = 0; i + 4 <= n; i++)
        if (memcmp(p + i, sig, 4) == 0)
            return (long)i;
    return -1;
}

static int count_tmp_files(void)
{
    int n = 0;
    DIR *d = opendir(scratch);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

/* ---- .npy: round trips ------------------------------------------------ */

static void test_roundtrip_every_dtype_and_shape(void **state)
{
    (void)state;
    static const int64_t s23[] = { 2, 3 }, s03[] = { 0, 3 }, s5[] = { 5 },
                         s8[] = { 1, 2, 1, 2, 1, 2, 1, 2 };
    struct { int ndim; const int64_t *shape; } shapes[] = {
        { 2, s23 }, { 0, NULL }, { 2, s03 }, { 1, s5 }, { 8, s8 },
    };
    for (int d = 0; d < TGL_NDTYPES; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            tgl_array *a = make(d, shapes[s].ndim, shapes[s].shape), *b;
            assert_int_equal(tgl_npy_save(ctx, tpath("rt.npy"), a), TGL_OK);
            b = load_ok(tpath("rt.npy"));
            assert_same(a, b);
            tgl_array_release(a);
            tgl_array_release(b);
        }
}

static void test_roundtrip_keeps_special_values_bit_exact(void **state)
{
    (void)state;
    int64_t n = 6;
    tgl_array *f = make(TGL_FLOAT64, 1, &n), *g = make(TGL_FLOAT32, 1, &n),
              *i = make(TGL_INT64, 1, &n), *b;
    uint64_t fb[6] = { 0x7ff8000000000001u, 0x8000000000000000u, 0x7ff0000000000000u,
                       0xfff0000000000000u, 0x0000000000000001u, 0xfff4000000000abcu };
    uint32_t gb[6] = { 0x7fc00001u, 0x80000000u, 0x7f800000u, 0xff800000u, 1u, 0xffa00abcu };
    int64_t ib[6] = { INT64_MIN, INT64_MAX, -1, 0, 1, INT64_MIN + 1 };
    memcpy(f->data, fb, sizeof fb);
    memcpy(g->data, gb, sizeof gb);
    memcpy(i->data, ib, sizeof ib);
    tgl_array *all[3] = { f, g, i };
    for (int k = 0; k < 3; k++) {
        assert_int_equal(tgl_npy_save(ctx, tpath("sp.npy"), all[k]), TGL_OK);
        b = load_ok(tpath("sp.npy"));
        assert_same(all[k], b);
        tgl_array_release(b);
    }
    for (int k = 0; k < 3; k++)
        tgl_array_release(all[k]);
}

/* Our files are byte-identical to np.save's for the same arrays. */
static void test_save_writes_the_bytes_numpy_writes(void **state)
{
    (void)state;
    static const char *names[] = { "f4_2x3.npy", "f8_special.npy", "i4_ext.npy", "i8_ext.npy",
                                   "u1.npy",     "b1.npy",         "scalar_f8.npy",
                                   "empty_0x3.npy", "nd8_i4.npy" };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        tgl_array *a = load_ok(fixture(names[k]));
        assert_int_equal(tgl_npy_save(ctx, tpath("same.npy"), a), TGL_OK);
        size_t l1, l2;
        unsigned char *p1 = read_all(fixture(names[k]), &l1), *p2 = read_all(tpath("same.npy"), &l2);
        assert_int_equal(l1, l2);
        assert_memory_equal(p1, p2, l1);
        free(p1);
        free(p2);
        tgl_array_release(a);
    }
}

static void test_save_copies_a_noncontiguous_view(void **state)
{
    (void)state;
    int64_t s[2] = { 2, 3 };
    tgl_array *a = NULL, *t = NULL, *b;
    assert_int_equal(tgl_array_arange(ctx, TGL_INT32, 0, 5, 1, &a), TGL_OK);
    tgl_array *m = NULL;
    assert_int_equal(tgl_array_reshape(ctx, a, 2, s, &m), TGL_OK);
    assert_int_equal(tgl_array_transpose(ctx, m, NULL, &t), TGL_OK);
    assert_false(tgl_array_is_contiguous(t));
    assert_int_equal(tgl_npy_save(ctx, tpath("t.npy"), t), TGL_OK);
    b = load_ok(tpath("t.npy"));
    int64_t want_shape[2] = { 3, 2 };
    int32_t want[6] = { 0, 3, 1, 4, 2, 5 };
    assert_shape(b, TGL_INT32, 2, want_shape);
    assert_memory_equal(b->data, want, sizeof want);
    tgl_array_release(a);
    tgl_array_release(m);
    tgl_array_release(t);
    tgl_array_release(b);
}

/* ---- .npy: NumPy's files ---------------------------------------------- */

static void test_load_numpy_fixtures_values(void **state)
{
    (void)state;
    tgl_array *a = load_ok(fixture("f4_2x3.npy"));
    int64_t s23[2] = { 2, 3 };
    float f4[6] = { -2, -0.5f, 1, 2.5f, 4, 5.5f };
    assert_shape(a, TGL_FLOAT32, 2, s23);
    assert_memory_equal(a->data, f4, sizeof f4);
    tgl_array_release(a);

    a = load_ok(fixture("f8_special.npy"));
    uint64_t bits[7];
    memcpy(bits, a->data, sizeof bits);
    assert_true(bits[0] == 0 && bits[1] == 0x8000000000000000u && bits[2] == 0x7ff0000000000000u &&
                bits[3] == 0xfff0000000000000u && bits[4] == 0x7ff8000000000001u && bits[5] == 1);
    assert_true(((double *)a->data)[6] == 1.5);
    tgl_array_release(a);

    struct { const char *file; int dtype; int64_t n; double v[5]; } cases[] = {
        { "i4_ext.npy", TGL_INT32, 3, { -2147483648.0, 0, 2147483647.0 } },
        { "u1.npy", TGL_UINT8, 5, { 0, 1, 127, 128, 255 } },
        { "b1.npy", TGL_BOOL, 3, { 1, 0, 1 } },
        { "b1_nonzero.npy", TGL_BOOL, 4, { 0, 1, 1, 1 } },
        { "be_f4.npy", TGL_FLOAT32, 3, { 1.5, -2.25, (float)3e38 } },
        { "be_f8.npy", TGL_FLOAT64, 3, { 1.5, -2.25, 1e300 } },
        { "be_i4.npy", TGL_INT32, 3, { 1, -2, 305419896 } },
        { "be_i8.npy", TGL_INT64, 3, { 1, -2, 1099511627781.0 } },
        { "v2_f8.npy", TGL_FLOAT64, 3, { 1, 2, 3 } },
        { "v3_u1.npy", TGL_UINT8, 2, { 7, 8 } },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        a = load_ok(fixture(cases[k].file));
        assert_shape(a, cases[k].dtype, 1, &cases[k].n);
        for (int64_t i = 0; i < cases[k].n; i++) {
            double v;
            assert_int_equal(tgl_array_get(ctx, a, &i, &v), TGL_OK);
            if (v != cases[k].v[i])
                fail_msg("%s[%d] = %.17g, want %.17g", cases[k].file, (int)i, v, cases[k].v[i]);
        }
        tgl_array_release(a);
    }
    a = load_ok(fixture("b1_nonzero.npy"));   /* bytes 0, 1, 2, 255 */
    assert_memory_equal(a->data, "\0\1\1\1", 4);
    tgl_array_release(a);
    a = load_ok(fixture("i8_ext.npy"));
    int64_t i8[3] = { INT64_MIN, -1, INT64_MAX };
    assert_memory_equal(a->data, i8, sizeof i8);
    tgl_array_release(a);

    a = load_ok(fixture("scalar_f8.npy"));
    assert_int_equal(a->ndim, 0);
    assert_true(a->size == 1 && ((double *)a->data)[0] == 3.25);
    tgl_array_release(a);
    a = load_ok(fixture("empty_0x3.npy"));
    int64_t s03[2] = { 0, 3 };
    assert_shape(a, TGL_FLOAT32, 2, s03);
    assert_int_equal(a->size, 0);
    tgl_array_release(a);
    a = load_ok(fixture("nd8_i4.npy"));
    int64_t s8[8] = { 1, 2, 1, 2, 1, 2, 1, 2 };
    assert_shape(a, TGL_INT32, 8, s8);
    for (int i = 0; i < 16; i++)
        assert_int_equal(((int32_t *)a->data)[i], i);
    tgl_array_release(a);
}

static void test_load_fortran_order_transposes_into_c_order(void **state)
{
    (void)state;
    tgl_array *a = load_ok(fixture("fortran_i4.npy"));
    int64_t s[3] = { 2, 3, 4 };
    assert_shape(a, TGL_INT32, 3, s);
    assert_true(tgl_array_is_contiguous(a));
    for (int i = 0; i < 24; i++)
        assert_int_equal(((int32_t *)a->data)[i], i);
    tgl_array_release(a);
    a = load_ok(fixture("fortran_be_f8.npy"));   /* Fortran and big-endian at once */
    assert_shape(a, TGL_FLOAT64, 2, s);
    for (int i = 0; i < 6; i++)
        assert_true(((double *)a->data)[i] == i);
    tgl_array_release(a);
}

static void test_load_refuses_unsupported_dtypes(void **state)
{
    (void)state;
    expect_load_fails(fixture("bad_c8.npy"), TGL_EDTYPE, "unsupported dtype '<c8'");
    expect_load_fails(fixture("bad_U3.npy"), TGL_EDTYPE, "unsupported dtype '<U3'");
    expect_load_fails(fixture("bad_obj.npy"), TGL_EDTYPE, "object arrays");
    expect_load_fails(fixture("savez.npz"), TGL_EFORMAT, "not a .npy file");
    expect_load_fails(tpath("missing.npy"), TGL_EIO, "No such file");
    expect_load_fails(scratch, TGL_EIO, "not a regular file");
}

/* ---- .npy: headers ---------------------------------------------------- */

static void test_header_parser_accepts_python_dict_variants(void **state)
{
    (void)state;
    int32_t v[2] = { 5, -7 };
    const char *ok[] = {
        "{'shape': (2,), 'fortran_order': False, 'descr': '<i4'}",
        "{ 'descr' : \"<i4\" ,\n\t'fortran_order':False,'shape':( 2 , ) , }   \n",
        "{'descr': '=i4', 'fortran_order': True, 'shape': (2L,), }",
        "{'descr': 'i4', 'fortran_order': False, 'shape': (1, 2), }",
    };
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
        craft(tpath("h.npy"), k == 1 ? 3 : 1, ok[k], v, sizeof v);
        tgl_array *a = load_ok(tpath("h.npy"));
        assert_int_equal(a->dtype_id, TGL_INT32);
        assert_memory_equal(a->data, v, sizeof v);
        tgl_array_release(a);
    }
    uint8_t u = 9;
    const char *bytes[] = { "<u1", ">u1", "|u1", "u1" };
    for (size_t k = 0; k < 4; k++) {
        char h[128];
        snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': ()}", bytes[k]);
        craft(tpath("h.npy"), 2, h, &u, 1);
        tgl_array *a = load_ok(tpath("h.npy"));
        assert_true(a->dtype_id == TGL_UINT8 && a->ndim == 0 && *(uint8_t *)a->data == 9);
        tgl_array_release(a);
    }
}

static void test_header_parser_rejects_garbage(void **state)
{
    (void)state;
    static const struct { const char *header; size_t ndata; tgl_status st; const char *msg; } bad[] = {
        { "", 8, TGL_EFORMAT, "expected '{'" },
        { "garbage", 8, TGL_EFORMAT, "expected '{'" },
        { "{'descr': '<i4', 'fortran_order': False}", 8, TGL_EFORMAT, "missing key 'shape'" },
        { "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8, TGL_EFORMAT,
          "unexpected key 'x'" },
        { "{'descr': '<i4', 'fortran_order': 0, 'shape': (2,)}", 8, TGL_EFORMAT, "True or False" },
        { "{'descr': '<i4', 'fortran_order': Falsey, 'shape': (2,)}", 8, TGL_EFORMAT, "True or False" },
        { "{'descr': '<i4', 'fortran_order': False, 'shape': (2)}", 8, TGL_EFORMAT, "not one" },
        { "{'descr': '<i4', 'fortran_order': False, 'shape': 2}", 8, TGL_EFORMAT, "must be a tuple" },
        { "{'descr': '<i4', 'fortran_order': False, 'shape': (2 3)}", 8, TGL_EFORMAT, "expected ','" },
        { "{'descr': '<i4', 'fortran_order': False, 'shape': (-1,)}", 8, TGL_EFORMAT,
          "negative dimension" },
        { "{'descr': '<i4', 'fortran_order': False, 'shape': (99999999999999999999,)}", 8,
          TGL_EFORMAT, "does not fit in 64 bits" },
        { "{'descr': '<i4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}", 8, TGL_EFORMAT,
          "more than 8 dimensions" },
        { "{'descr': '<i4', 'fortran_order': False, 'shape': (4611686018427387904, 4)}", 8,
          TGL_EFORMAT, "shape too large" },
        { "{'descr': '<i4', 'fortran_order': False, 'shape': (1099511627776,)}", 8, TGL_EFORMAT,
          "claims 1099511627776 elements (4398046511104 bytes) but only 8 bytes follow" },
        { "{'descr': '<i4', 'fortran_order': False, 'shape': (3,)}", 8, TGL_EFORMAT,
          "truncated: header claims 3 elements (12 bytes) but only 8 bytes follow" },
        { "{'descr': '<i4', 'fortran_order': False, 'shape': (1,)}", 8, TGL_EFORMAT,
          "4 bytes of unexpected data" },
        { "{'descr': '<i4', 'fortran_order': False, 'shape': (2,)} junk", 8, TGL_EFORMAT,
          "unexpected text after the dict" },
        { "{'descr': '<i4', 'descr': '<i4', 'fortran_order': False, 'shape': (2,)}", 8,
          TGL_EFORMAT, "appears twice" },
        { "{'descr': '<i4", 8, TGL_EFORMAT, "unterminated string" },
        { "{'descr' '<i4', 'fortran_order': False, 'shape': (2,)}", 8, TGL_EFORMAT, "expected ':'" },
        { "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (2,)}", 8, TGL_EDTYPE,
          "structured dtypes" },
        { "{'descr': '|f4', 'fortran_order': False, 'shape': (2,)}", 8, TGL_EDTYPE,
          "unsupported dtype '|f4'" },
        { "{'descr': '<i2', 'fortran_order': False, 'shape': (4,)}", 8, TGL_EDTYPE,
          "unsupported dtype '<i2'" },
        { "{'descr': '<f4x', 'fortran_order': False, 'shape': (2,)}", 8, TGL_EDTYPE,
          "unsupported dtype '<f4x'" },
        { "{'descr': 5, 'fortran_order': False, 'shape': (2,)}", 8, TGL_EFORMAT,
          "expected a quoted string" },
    };
    int32_t data[2] = { 1, 2 };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        craft(tpath("bad.npy"), 1, bad[k].header, data, bad[k].ndata);
        expect_load_fails(tpath("bad.npy"), bad[k].st, bad[k].msg);
        assert_non_null(strstr(tgl_ctx_error(ctx), "tgl_npy_load: '"));
    }
    write_all(tpath("bad.npy"), "\x93NUMPX\x01\x00", 8);
    expect_load_fails(tpath("bad.npy"), TGL_EFORMAT, "not a .npy file");
    write_all(tpath("bad.npy"), "\x93NUMPY\x04\x00\x00\x00", 10);
    expect_load_fails(tpath("bad.npy"), TGL_EFORMAT, "unsupported .npy format version 4.0");
    /* A 4 GiB header length in a 12-byte file. */
    write_all(tpath("bad.npy"), "\x93NUMPY\x02\x00\xf0\xff\xff\xff", 12);
    expect_load_fails(tpath("bad.npy"), TGL_EFORMAT, "header claims 4294967280 bytes");
    write_all(tpath("bad.npy"), "", 0);
    expect_load_fails(tpath("bad.npy"), TGL_EFORMAT, "truncated");
}

/* ---- .npy: corruption ------------------------------------------------- */

static void test_truncated_file_fails_at_every_offset(void **state)
{
    (void)state;
    const char *sources[2] = { tpath("full.npy"), fixture("fortran_be_f8.npy") };
    int64_t s[2] = { 3, 4 };
    tgl_array *a = make(TGL_FLOAT64, 2, s);
    assert_int_equal(tgl_npy_save(ctx, sources[0], a), TGL_OK);
    tgl_array_release(a);
    for (int k = 0; k < 2; k++) {
        size_t len;
        unsigned char *full = read_all(sources[k], &len);
        for (size_t cut = 0; cut < len; cut++) {
            write_all(tpath("cut.npy"), full, cut);
            expect_load_fails(tpath("cut.npy"), TGL_EFORMAT, "truncated");
        }
        write_all(tpath("cut.npy"), full, len);
        tgl_array_release(load_ok(tpath("cut.npy")));
        free(full);
    }
}

static void test_flipped_header_bytes_fail_cleanly(void **state)
{
    (void)state;
    int64_t s[2] = { 3, 4 };
    tgl_array *a = make(TGL_FLOAT32, 2, s);
    assert_int_equal(tgl_npy_save(ctx, tpath("flip.npy"), a), TGL_OK);
    tgl_array_release(a);
    size_t len;
    unsigned char *full = read_all(tpath("flip.npy"), &len);
    size_t hend = len - 48;
    for (size_t i = 0; i < hend; i++) {
        /* Inverting a header byte always breaks it... */
        full[i] ^= 0xff;
        write_all(tpath("f.npy"), full, len);
        int64_t live = tgl_memory_live_bytes();
        a = NULL;
        tgl_status st = tgl_npy_load(ctx, tpath("f.npy"), &a);
        if (st != TGL_EFORMAT && st != TGL_EDTYPE)
            fail_msg("byte %zu inverted: status %d", i, st);
        assert_null(a);
        assert_int_equal(tgl_memory_live_bytes(), live);
        full[i] ^= 0xff;
        /* ...flipping its low bit may not ('<' -> '=' is fine): no crash. */
        full[i] ^= 1;
        write_all(tpath("f.npy"), full, len);
        a = NULL;
        if (tgl_npy_load(ctx, tpath("f.npy"), &a) == TGL_OK)
            tgl_array_release(a);
        full[i] ^= 1;
    }
    free(full);
}

/* ---- .npy: saving ----------------------------------------------------- */

static void test_failed_save_leaves_the_old_file_and_no_temp_file(void **state)
{
    (void)state;
    int64_t n = 4;
    tgl_array *a = make(TGL_INT32, 1, &n);
    char p[256];
    snprintf(p, sizeof p, "%s", tpath("keep.npy"));
    assert_int_equal(tgl_npy_save(ctx, p, a), TGL_OK);
    size_t l1, l2;
    unsigned char *before = read_all(p, &l1);

    tgl_array bad = *a;
    bad.dtype_id = 99;
    assert_error(tgl_npy_save(ctx, p, &bad), TGL_EDTYPE, "unknown dtype 99");
    bad = *a;
    bad.size = 5;
    assert_error(tgl_npy_save(ctx, p, &bad), TGL_EINVAL, "size 5");
    assert_error(tgl_npy_save(ctx, p, NULL), TGL_EINVAL, "is NULL");
    const char *ns[1] = { "x" };
    const tgl_array *as[1] = { &bad };
    assert_error(tgl_npz_save(ctx, p, 1, ns, as, 0), TGL_EINVAL, "array 'x' has size 5");
    unsigned char *after = read_all(p, &l2);
    assert_int_equal(l1, l2);
    assert_memory_equal(before, after, l1);
    free(after);

    /* The destination is not a regular file: refused before anything is
     * written, and left as it was. */
    mkdir(tpath("adir"), 0755);
    assert_error(tgl_npy_save(ctx, tpath("adir"), a), TGL_EIO, "is a directory, not a regular file");
    as[0] = a;
    assert_error(tgl_npz_save(ctx, tpath("adir"), 1, ns, as, 1), TGL_EIO,
                 "is a directory, not a regular file");
    assert_int_equal(mkfifo(tpath("fifo"), 0644), 0);
    assert_error(tgl_npy_save(ctx, tpath("fifo"), a), TGL_EIO, "is a FIFO (named pipe)");
    assert_error(tgl_npz_save(ctx, tpath("fifo"), 1, ns, as, 0), TGL_EIO, "is a FIFO (named pipe)");
    struct stat fsb;
    assert_int_equal(lstat(tpath("fifo"), &fsb), 0);
    assert_true(S_ISFIFO(fsb.st_mode));
    assert_int_equal(symlink("nowhere", tpath("dangling")), 0);
    assert_error(tgl_npy_save(ctx, tpath("dangling"), a), TGL_EIO, "dangling symbolic link");
    assert_int_equal(lstat(tpath("nowhere"), &fsb), -1);
    assert_int_equal(count_tmp_files(), 0);
    assert_error(tgl_npy_save(ctx, tpath("no/such/dir/x.npy"), a), TGL_EIO, "No such file");
    assert_error(tgl_npz_save(ctx, tpath("no/such/dir/x.npz"), 1, ns, as, 0), TGL_EIO,
                 "No such file");
    assert_int_equal(count_tmp_files(), 0);

    /* A successful save replaces the file whole, with a plain file's mode. */
    int64_t one = 1;
    tgl_array *small = make(TGL_UINT8, 1, &one);
    mode_t old = umask(022);
    unlink(p);
    assert_int_equal(tgl_npy_save(ctx, p, small), TGL_OK);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0644);
    assert_int_equal(sb.st_size, 129);
    umask(old);
    free(before);
    tgl_array_release(a);
    tgl_array_release(small);
}

/* ---- .npz ------------------------------------------------------------- */

static void test_npz_loads_numpy_savez_and_savez_compressed(void **state)
{
    (void)state;
    const char *files[] = { "savez.npz", "savez_compressed.npz", "zip64.npz" };
    float W[6] = { -2, -0.5f, 1, 2.5f, 4, 5.5f };
    int64_t b[2] = { 1, 2 };
    for (int k = 0; k < 3; k++) {
        tgl_npz *z = npz_ok(fixture(files[k]));
        assert_int_equal(z->n, k == 2 ? 2 : 3);
        assert_string_equal(z->names[0], "W");
        assert_string_equal(z->names[1], "b");
        assert_memory_equal(z->arrays[0]->data, W, sizeof W);
        assert_int_equal(z->arrays[0]->shape[1], 3);
        assert_memory_equal(z->arrays[1]->data, b, sizeof b);
        if (k == 0) {
            assert_string_equal(z->names[2], "flag");
            assert_true(z->arrays[2]->ndim == 0 && *(uint8_t *)z->arrays[2]->data == 1);
        } else if (k == 1) {
            assert_string_equal(z->names[2], "zeros");
            assert_int_equal(z->arrays[2]->size, 100);
            for (int i = 0; i < 100; i++)
                assert_true(((double *)z->arrays[2]->data)[i] == 0.0);
        }
        tgl_npz_free(z);
    }
}

static void test_npz_roundtrip_stored_and_compressed(void **state)
{
    (void)state;
    int64_t s23[2] = { 2, 3 }, s03[2] = { 0, 3 };
    tgl_array *as[TGL_NDTYPES + 2];
    const char *names[TGL_NDTYPES + 2] = { "f32", "f64", "i32", "layer.1/W", "u8", "b",
                                           "scalar", "\xd1\x82\xd0\xb5\xd1\x81\xd1\x82" };
    for (int d = 0; d < TGL_NDTYPES; d++)
        as[d] = make(d, 2, s23);
    as[TGL_NDTYPES] = make(TGL_FLOAT64, 0, NULL);
    as[TGL_NDTYPES + 1] = make(TGL_INT32, 2, s03);
    for (int compress = 0; compress < 2; compress++) {
        assert_int_equal(tgl_npz_save(ctx, tpath("rt.npz"), TGL_NDTYPES + 2, names,
                                      (const tgl_array *const *)as, compress), TGL_OK);
        tgl_npz *z = npz_ok(tpath("rt.npz"));
        assert_int_equal(z->n, TGL_NDTYPES + 2);
        for (int k = 0; k < z->n; k++) {
            assert_string_equal(z->names[k], names[k]);
            assert_same(as[k], z->arrays[k]);
        }
        tgl_npz_free(z);
    }
    for (int k = 0; k < TGL_NDTYPES + 2; k++)
        tgl_array_release(as[k]);
    /* An empty archive is valid, as np.savez() writes it. */
    assert_int_equal(tgl_npz_save(ctx, tpath("empty.npz"), 0, NULL, NULL, 0), TGL_OK);
    tgl_npz *z = npz_ok(tpath("empty.npz"));
    assert_int_equal(z->n, 0);
    tgl_npz_free(z);
}

static void test_npz_save_rejects_bad_names(void **state)
{
    (void)state;
    int64_t n = 2;
    tgl_array *a = make(TGL_FLOAT32, 1, &n);
    const tgl_array *as[2] = { a, a };
    const char *dup[2] = { "W", "W" }, *empty[2] = { "W", "" }, *null[2] = { "W", NULL };
    assert_error(tgl_npz_save(ctx, tpath("n.npz"), 2, dup, as, 0), TGL_EINVAL,
                 "the name 'W' is given twice");
    assert_error(tgl_npz_save(ctx, tpath("n.npz"), 2, empty, as, 0), TGL_EINVAL, "name 2 is empty");
    assert_error(tgl_npz_save(ctx, tpath("n.npz"), 2, null, as, 0), TGL_EINVAL, "name 2 is NULL");
    assert_error(tgl_npz_save(ctx, tpath("n.npz"), -1, dup, as, 0), TGL_EINVAL, "negative");
    assert_int_equal(access(tpath("n.npz"), F_OK), -1);
    assert_int_equal(count_tmp_files(), 0);
    tgl_array_release(a);
}

/* Saves {W: 2x3 float32, b: int64[2]} and returns the archive's bytes. */
static unsigned char *two_entry_npz(const char *name, int compress, size_t *len)
{
    int64_t s[2] = { 2, 3 }, n = 2;
    tgl_array *W = make(TGL_FLOAT32, 2, s), *b = make(TGL_INT64, 1, &n);
    const char *names[2] = { "W", "b" };
    const tgl_array *as[2] = { W, b };
    assert_int_equal(tgl_npz_save(ctx, tpath(name), 2, names, as, compress), TGL_OK);
    tgl_array_release(W);
    tgl_array_release(b);
    return read_all(tpath(name), len);
}

static void test_npz_detects_crc_mismatch(void **state)
{
    (void)state;
    size_t len;
    for (int compress = 0; compress < 2; compress++) {
        unsigned char *p = two_entry_npz("crc.npz", compress, &len);
        long cd = find_sig(p, len, "PK\x01\x02");
        assert_true(cd > 0);
        p[cd + 16] ^= 0x01;      /* W.npy's CRC in the central directory */
        write_all(tpath("c.npz"), p, len);
        expect_npz_fails(tpath("c.npz"), TGL_EFORMAT, "CRC mismatch in entry 'W.npy'");
        p[cd + 16] ^= 0x01;
        if (!compress) {
            p[cd - 1] ^= 0x80;   /* the last data byte of b.npy */
            write_all(tpath("c.npz"), p, len);
            expect_npz_fails(tpath("c.npz"), TGL_EFORMAT, "CRC mismatch in entry 'b.npy'");
        }
        free(p);
    }
}

static void test_npz_truncated_fails_at_every_offset(void **state)
{
    (void)state;
    const char *numpy[2] = { "savez.npz", "savez_compressed.npz" };
    for (int k = 0; k < 4; k++) {
        size_t len;
        unsigned char *p = k < 2 ? two_entry_npz("t.npz", k, &len) : read_all(fixture(numpy[k - 2]), &len);
        for (size_t cut = 0; cut < len; cut++) {
            write_all(tpath("cut.npz"), p, cut);
            expect_npz_fails(tpath("cut.npz"), TGL_EFORMAT, "");
        }
        free(p);
    }
}

static void patch_and_expect(const unsigned char *orig, size_t len, long off, const void *bytes,
                             size_t n, long off2, const char *msg)
{
    unsigned char *p = malloc(len);
    memcpy(p, orig, len);
    memcpy(p + off, bytes, n);
    if (off2 >= 0)
        memcpy(p + off2, bytes, n);
    write_all(tpath("p.npz"), p, len);
    expect_npz_fails(tpath("p.npz"), TGL_EFORMAT, msg);
    free(p);
}

static void test_npz_rejects_corrupt_archives(void **state)
{
    (void)state;
    size_t len;
    unsigned char *p = two_entry_npz("r.npz", 1, &len);
    long cd = find_sig(p, len, "PK\x01\x02"), eocd = find_sig(p, len, "PK\x05\x06");
    /* Encrypted, and an unknown method (changed in both headers). */
    patch_and_expect(p, len, cd + 8, "\x01\x00", 2, 6, "entry 'W.npy' is encrypted");
    patch_and_expect(p, len, cd + 10, "\x0c\x00", 2, 8, "compression method 12");
    /* Sizes past the end of the data, or beyond what deflate can produce. */
    patch_and_expect(p, len, cd + 20, "\x00\x00\x01\x00", 4, -1, "runs past the end");
    patch_and_expect(p, len, cd + 24, "\xf0\xff\xff\xff", 4, -1, "claims 4294967280 bytes");
    patch_and_expect(p, len, cd + 24, "\x10\x00\x00\x00", 4, -1, "inflates to more than");
    patch_and_expect(p, len, cd + 24, "\x00\x01\x00\x00", 4, -1, "inflates to 152 bytes");
    patch_and_expect(p, len, cd + 42, "\x00\x00\x00\x01", 4, -1, "past the data");
    patch_and_expect(p, len, cd + 42, "\x01\x00\x00\x00", 4, -1, "local header does not match");
    /* Directory bounds and counts in the EOCD. */
    patch_and_expect(p, len, eocd + 16, "\xff\xff\xff\x7f", 4, -1, "lies outside the archive");
    patch_and_expect(p, len, eocd + 8, "\x09\x00\x09\x00", 4, -1, "entries claimed");
    patch_and_expect(p, len, eocd + 4, "\x01\x00", 2, -1, "multi-volume");
    patch_and_expect(p, len, 40, "\xff\xff\xff\xff", 4, -1, "corrupt deflate data");
    /* The same name twice (names are outside the CRC). */
    long b2 = find_sig(p + cd + 1, len - (size_t)cd - 1, "PK\x01\x02") + cd + 1;
    patch_and_expect(p, len, b2 + 46, "W", 1, find_sig(p, len, "b.np"), "two entries are named 'W'");
    free(p);

    /* Zip64 sizes that point far past the file. */
    unsigned char *z = read_all(fixture("zip64.npz"), &len);
    cd = find_sig(z, len, "PK\x01\x02");
    patch_and_expect(z, len, cd + 46 + 5 + 4, "\x00\x00\x00\x00\x00\x00\x00\x10", 8, -1,
                     "claims 1152921504606846976 bytes from 152 stored");
    free(z);
    expect_npz_fails(fixture("notnpy.npz"), TGL_EFORMAT, "entry 'x.npy': not a .npy file");
    expect_npz_fails(fixture("f4_2x3.npy"), TGL_EFORMAT, "no end-of-central-directory");
    expect_npz_fails(tpath("missing.npz"), TGL_EIO, "No such file");
}

/* More than 65535 entries need the Zip64 end record, on write and read. */
static void test_npz_many_entries_use_zip64_end_record(void **state)
{
    (void)state;
    enum { N = 70000 };
    char (*names)[16] = malloc(sizeof *names * N);
    const char **np = malloc(sizeof *np * N);
    const tgl_array **as = malloc(sizeof *as * N);
    tgl_array *a = make(TGL_UINT8, 0, NULL);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "a%d", i);
        np[i] = names[i];
        as[i] = a;
    }
    assert_int_equal(tgl_npz_save(ctx, tpath("many.npz"), N, np, as, 0), TGL_OK);
    size_t len;
    unsigned char *p = read_all(tpath("many.npz"), &len);
    assert_true(find_sig(p + len - 200, 200, "PK\x06\x06") >= 0);
    free(p);
    tgl_npz *z = npz_ok(tpath("many.npz"));
    assert_int_equal(z->n, N);
    assert_string_equal(z->names[N - 1], "a69999");
    assert_int_equal(*(uint8_t *)z->arrays[N - 1]->data, *(uint8_t *)a->data);
    tgl_npz_free(z);
    tgl_array_release(a);
    free(names);
    free(np);
    free(as);
}

/* An entry over 4 GiB, then one past 4 GiB (stored): Zip64 sizes and
 * offsets in the local headers, the directory and the end record. */
static void test_npz_entry_over_4gib(void **state)
{
    (void)state;
    if (!getenv("TGL_TEST_BIG"))
        skip();
    int64_t n = (int64_t)1 << 32 | 12345, one = 1;
    for (int compress = 1; compress >= 0; compress--) {
        tgl_array *a = NULL, *b = make(TGL_INT64, 1, &one);
        assert_int_equal(tgl_array_zeros(ctx, TGL_UINT8, 1, &n, &a), TGL_OK);
        ((uint8_t *)a->data)[n - 1] = 7;
        const char *names[2] = { "big", "after" };
        const tgl_array *as[2] = { a, b };
        assert_int_equal(tgl_npz_save(ctx, tpath("big.npz"), 2, names, as, compress), TGL_OK);
        tgl_array_release(a);
        tgl_npz *z = npz_ok(tpath("big.npz"));
        assert_int_equal(z->arrays[0]->size, n);
        assert_int_equal(((uint8_t *)z->arrays[0]->data)[n - 1], 7);
        assert_int_equal(((uint8_t *)z->arrays[0]->data)[n / 2], 0);
        assert_same(b, z->arrays[1]);
        tgl_npz_free(z);
        tgl_array_release(b);
    }
    unlink(tpath("big.npz"));
}

static int setup(void **state)
{
    (void)state;
    ctx = tgl_ctx_new();
    snprintf(scratch, sizeof scratch, "npy_test.XXXXXX");
    return ctx && mkdtemp(scratch) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    tgl_ctx_free(ctx);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_every_dtype_and_shape),
        cmocka_unit_test(test_roundtrip_keeps_special_values_bit_exact),
        cmocka_unit_test(test_save_writes_the_bytes_numpy_writes),
        cmocka_unit_test(test_save_copies_a_noncontiguous_view),
        cmocka_unit_test(test_load_numpy_fixtures_values),
        cmocka_unit_test(test_load_fortran_order_transposes_into_c_order),
        cmocka_unit_test(test_load_refuses_unsupported_dtypes),
        cmocka_unit_test(test_header_parser_accepts_python_dict_variants),
        cmocka_unit_test(test_header_parser_rejects_garbage),
        cmocka_unit_test(test_truncated_file_fails_at_every_offset),
        cmocka_unit_test(test_flipped_header_bytes_fail_cleanly),
        cmocka_unit_test(test_failed_save_leaves_the_old_file_and_no_temp_file),
        cmocka_unit_test(test_npz_loads_numpy_savez_and_savez_compressed),
        cmocka_unit_test(test_npz_roundtrip_stored_and_compressed),
        cmocka_unit_test(test_npz_save_rejects_bad_names),
        cmocka_unit_test(test_npz_detects_crc_mismatch),
        cmocka_unit_test(test_npz_truncated_fails_at_every_offset),
        cmocka_unit_test(test_npz_rejects_corrupt_archives),
        cmocka_unit_test(test_npz_many_entries_use_zip64_end_record),
        cmocka_unit_test(test_npz_entry_over_4gib),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
