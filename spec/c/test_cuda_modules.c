/*
 * test_cuda_modules.c — the CUDA modules and fused kernels
 * (src/cuda/modules.c, fused.c) on a device: the emulated GPU
 * (TGL_CUDA_EMU=1, set here unless the environment says otherwise, so a
 * machine with a GPU can run this with TGL_CUDA_EMU=0).
 *
 *   - the disk cache: a source compiled once is stored (one entry), a
 *     second process loads that entry (same file, its mtime refreshed:
 *     no rebuild), a damaged entry (truncated, bytes flipped, a FIFO or
 *     an empty directory at its name) is deleted and rebuilt, and the
 *     module works; cache_info counts the entries and cache_clear
 *     deletes them;
 *   - the module table: a source loads once per process;
 *   - fused kernels: hand-built programs prepared and launched over
 *     device arrays with broadcast and non-contiguous operands, equal to
 *     the values computed here; a reduction program gets tier 0.
 *
 * Each case runs in a child process (fork before any device work), so
 * every case starts with an empty module table and reads the disk.
 * Without a device (no driver, no emulator) the cases skip, saying why.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgen/render_cuda.h"
#include "cuda/cuda_int.h"
#include "engine/fused_prog.h"
#include "engine/ops/ops.h"

static char cache_root[256];
static tgl_backend_opts opts;

/* ---- helpers ------------------------------------------------------------------ */

/* Runs fn in a child; its exit status (0: passed).  A child failing an
 * assertion prints why and exits 1. */
static int in_child(int (*fn)(void))
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(fn());
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#define CHILD_CHECK(cond, ...)                                                                 \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                    \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n");                                                             \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

/* The one cache entry in the directory (its path), or "" and the count. */
static int entries(char *path, size_t size)
{
    DIR *d = opendir(cache_root);
    int n = 0;
    if (path)
        path[0] = '\0';
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *dot = strchr(e->d_name, '.');
        if (!dot || dot - e->d_name != 64 ||
            (strcmp(dot, ".cubin") != 0 && strcmp(dot, ".emu.so") != 0))
            continue;
        n++;
        if (path)
            snprintf(path, size, "%s/%s", cache_root, e->d_name);
    }
    if (d)
        closedir(d);
    return n;
}

/* A source with one kernel writing out[i] = i * factor + nonce. */
static char source[512];
static const int nonce = 3;

typedef struct fill_args {
    double *out;
    int64_t n;
    double factor;
} fill_args;

/* Loads the module of `source`, runs its kernel over 1000 elements and
 * checks them: 0 when right. */
static int run_source(void)
{
    tgl_errbuf err;
    tgl_cuda_module *m = NULL, *m2 = NULL;
    CHILD_CHECK(tgl_cuda_module_from_source(&opts, source, "test_fill.cu", &m, &err) == TGL_OK,
                "module: %s", err.msg);
    CHILD_CHECK(tgl_cuda_module_from_source(&opts, source, "test_fill.cu", &m2, &err) == TGL_OK,
                "module again: %s", err.msg);
    CHILD_CHECK(m == m2, "the same source made two modules in one process");
    const tgl_cuda_driver *drv = tgl_cuda_drv();
    tgl_cuda_func *f;
    CHILD_CHECK(drv->func(m, "tgl_test_fill", &f, &err) == TGL_OK, "func: %s", err.msg);
    const int64_t n = 1000;
    void *d = NULL;
    CHILD_CHECK(drv->malloc(&d, n * sizeof(double), &err) == TGL_OK, "malloc: %s", err.msg);
    fill_args a = {d, n, 0.5};
    void *params[1] = {&a};
    unsigned grid, block;
    tgl_cuda_geometry(n, &grid, &block);
    const unsigned g3[3] = {grid, 1, 1};
    CHILD_CHECK(drv->launch(f, g3, block, 0, params, &err) == TGL_OK, "launch: %s", err.msg);
    double *h = malloc(n * sizeof(double));
    CHILD_CHECK(h && drv->memcpy(h, d, n * sizeof(double), TGL_CUDA_D2H, &err) == TGL_OK,
                "copy: %s", err.msg);
    for (int64_t i = 0; i < n; i++)
        CHILD_CHECK(h[i] == (double)i * 0.5 + nonce, "element %lld: %g", (long long)i, h[i]);
    free(h);
    drv->free(d);
    return 0;
}

/* Whether a device is there; if not, skips saying why. */
static int probe(void)
{
    tgl_errbuf err;
    if (tgl_cuda_ready(&err) != TGL_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 77;
    }
    return 0;
}

static void need_device(void)
{
    int rc = in_child(probe);
    if (rc == 77) {
        print_message("skipped: no CUDA device (the emulator is TGL_CUDA_EMU=1)\n");
        skip();
    }
    assert_int_equal(rc, 0);
}

static struct stat stat_of(const char *path)
{
    struct stat st;
    memset(&st, 0, sizeof st);
    assert_int_equal(lstat(path, &st), 0);
    return st;
}

/* ---- the disk cache ------------------------------------------------------------------- */

static void cache_hits_and_rebuilds(void **state)
{
    (void)state;
    need_device();
    /* a fresh key: the time in the source */
    snprintf(source, sizeof source,
             "/* %lld */\nstruct fill_args { double *out; int64_t n; double factor; };\n"
             "TGL_KERNEL(tgl_test_fill, fill_args)\n"
             "{ TGL_GRID_LOOP(i, a.n) a.out[i] = (double)i * a.factor + %d; }\n",
             (long long)time(NULL) ^ (long long)getpid(), nonce);
    char text[1300];
    tgl_errbuf err;
    char *info = NULL;
    assert_int_equal(tgl_cuda_cache_clear(&opts, &err), TGL_OK);
    assert_int_equal(entries(NULL, 0), 0);

    /* compiled and stored */
    assert_int_equal(in_child(run_source), 0);
    char path[1200];
    assert_int_equal(entries(path, sizeof path), 1);
    struct stat first = stat_of(path);
    assert_true(S_ISREG(first.st_mode));
    assert_int_equal(tgl_cuda_cache_info(&opts, &info, &err), TGL_OK);
    snprintf(text, sizeof text, "directory: %s\nentries: 1\nbytes: %lld\nmax_bytes: %lld\n",
             cache_root, (long long)first.st_size, (long long)opts.cache_max_bytes);
    assert_string_equal(info, text);
    free(info);

    /* a hit: the same file, used (mtime refreshed), not rebuilt */
    struct timespec old[2] = {{.tv_sec = 1000000}, {.tv_sec = 1000000}};
    assert_int_equal(utimensat(AT_FDCWD, path, old, 0), 0);
    assert_int_equal(in_child(run_source), 0);
    struct stat hit = stat_of(path);
    assert_int_equal(hit.st_ino, first.st_ino);
    assert_true(hit.st_mtime > 1000000);

    /* damage of every kind: deleted and rebuilt, and the module works */
    for (int kind = 0; kind < 4; kind++) {
        if (kind == 0) { /* truncated */
            assert_int_equal(truncate(path, first.st_size / 2), 0);
        } else if (kind == 1) { /* a byte of the image flipped */
            FILE *f = fopen(path, "r+b");
            assert_non_null(f);
            fseek(f, first.st_size / 3, SEEK_SET);
            int c = fgetc(f);
            fseek(f, first.st_size / 3, SEEK_SET);
            fputc(c ^ 0x5a, f);
            fclose(f);
        } else if (kind == 2) { /* a FIFO: never waited on */
            assert_int_equal(unlink(path), 0);
            assert_int_equal(mkfifo(path, 0644), 0);
        } else { /* an empty directory */
            assert_int_equal(unlink(path), 0);
            assert_int_equal(mkdir(path, 0755), 0);
        }
        assert_int_equal(in_child(run_source), 0);
        struct stat now = stat_of(path);
        assert_true(S_ISREG(now.st_mode));
        assert_int_equal(now.st_size, first.st_size);
    }

    /* clear */
    assert_int_equal(tgl_cuda_cache_clear(&opts, &err), TGL_OK);
    assert_int_equal(entries(NULL, 0), 0);
    /* no temporaries left behind */
    DIR *d = opendir(cache_root);
    for (struct dirent *e; d && (e = readdir(d));)
        assert_null(strstr(e->d_name, ".tmp."));
    closedir(d);
}

/* A directory that cannot be written: the module is loaded all the same. */
static int unwritable(void)
{
    tgl_backend_opts o = opts;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/ro", cache_root);
    mkdir(dir, 0555);
    chmod(dir, 0555);
    o.cache_dir = dir;
    tgl_errbuf err;
    tgl_cuda_module *m;
    if (access(dir, W_OK) == 0)
        return 0; /* root writes anyway: nothing to test */
    CHILD_CHECK(tgl_cuda_module_from_source(&o, source, "test_fill.cu", &m, &err) == TGL_OK,
                "an unwritable cache failed the compile: %s", err.msg);
    return 0;
}

static void an_unwritable_cache_is_no_error(void **state)
{
    (void)state;
    need_device();
    snprintf(source, sizeof source,
             "/* ro %lld */\nstruct fill_args { double *out; int64_t n; double factor; };\n"
             "TGL_KERNEL(tgl_test_fill, fill_args)\n"
             "{ TGL_GRID_LOOP(i, a.n) a.out[i] = (double)i * a.factor + %d; }\n",
             (long long)time(NULL), nonce);
    assert_int_equal(in_child(unwritable), 0);
}

/* Info and clear need no device: they count and delete the CUDA entries
 * only (a CPU kernel's <key>.so and temporaries stay), and info creates
 * nothing. */
static void info_and_clear_touch_only_cuda_entries(void **state)
{
    (void)state;
    tgl_backend_opts o = opts;
    char dir[400], path[600], text[1000];
    snprintf(dir, sizeof dir, "%s/info", cache_root);
    o.cache_dir = dir;
    tgl_errbuf err;
    char *info = NULL;
    assert_int_equal(tgl_cuda_cache_info(&o, &info, &err), TGL_OK);
    snprintf(text, sizeof text,
             "directory: %s (not created yet)\nentries: 0\nbytes: 0\nmax_bytes: %lld\n", dir,
             (long long)o.cache_max_bytes);
    assert_string_equal(info, text);
    free(info);
    struct stat st;
    assert_int_not_equal(stat(dir, &st), 0);
    assert_int_equal(mkdir(dir, 0755), 0);
    const char *hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const char *names[] = {".cubin", ".emu.so", ".so", ".cubin.tmp.1.2"};
    const int sizes[] = {100, 50, 70, 30};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s%s", dir, hex, names[i]);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        for (int b = 0; b < sizes[i]; b++)
            fputc('x', f);
        fclose(f);
    }
    assert_int_equal(tgl_cuda_cache_info(&o, &info, &err), TGL_OK);
    snprintf(text, sizeof text, "directory: %s\nentries: 2\nbytes: 150\nmax_bytes: %lld\n", dir,
             (long long)o.cache_max_bytes);
    assert_string_equal(info, text);
    free(info);
    assert_int_equal(tgl_cuda_cache_clear(&o, &err), TGL_OK);
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s%s", dir, hex, names[i]);
        assert_int_equal(access(path, F_OK) == 0, i >= 2);
    }
}

/* ---- the library ------------------------------------------------------------------- */

static int lib_errors(void)
{
    tgl_errbuf err;
    tgl_cuda_func *f;
    CHILD_CHECK(tgl_cuda_lib_func(&opts, "no_such_family", "k", &f, &err) == TGL_EINTERNAL,
                "an unknown family");
    CHILD_CHECK(strstr(err.msg, "no kernel family 'no_such_family'"), "%s", err.msg);
    if (tgl_cuda_families[0]) {
        const char *fam = tgl_cuda_families[0];
        CHILD_CHECK(tgl_cuda_lib_func(&opts, fam, "tgl_no_such_symbol", &f, &err) != TGL_OK,
                    "an unknown symbol of %s", fam);
    }
    return 0;
}

static void library_errors_are_clear(void **state)
{
    (void)state;
    need_device();
    assert_int_equal(in_child(lib_errors), 0);
}

static void geometry_covers_and_is_bounded(void **state)
{
    (void)state;
    unsigned g, b;
    tgl_cuda_geometry(0, &g, &b);
    assert_int_equal(g, 1);
    assert_int_equal(b, 256);
    tgl_cuda_geometry(1, &g, &b);
    assert_int_equal(g, 1);
    tgl_cuda_geometry(257, &g, &b);
    assert_true(g >= 1 && g <= 2);
    tgl_cuda_geometry(INT64_C(1) << 40, &g, &b);
    assert_true(g >= 1 && g < (1u << 31));
}

/* ---- fused kernels ------------------------------------------------------------------- */

/* out0 = tanh(x) * r + s (x: m x n, r: a row, s: broadcast on both
 * axes), out1 = x - r, over device arrays; x is given transposed
 * (strides 1, m). */
static int fused_case(void)
{
    const int64_t m = 37, n = 23;
    tgl_type tx = {TGL_FLOAT64, 2, 0}, tr = {TGL_FLOAT64, 2, 1}, ts = {TGL_FLOAT64, 2, 3};
    tgl_type in_type[3] = {tx, tr, ts};
    tgl_finstr code[7] = {
        {TGL_FP_INPUT, TGL_FLOAT64, {0, -1, -1}, 0}, {TGL_FP_INPUT, TGL_FLOAT64, {1, -1, -1}, 0},
        {TGL_FP_INPUT, TGL_FLOAT64, {2, -1, -1}, 0}, {TGL_OP_TANH, TGL_FLOAT64, {0, -1, -1}, 0},
        {TGL_OP_MUL, TGL_FLOAT64, {3, 1, -1}, 0},    {TGL_OP_ADD, TGL_FLOAT64, {4, 2, -1}, 0},
        {TGL_OP_SUB, TGL_FLOAT64, {0, 1, -1}, 0},
    };
    int32_t out_instr[2] = {5, 6};
    tgl_type out_type[2] = {tx, tx};
    tgl_fused_prog p;
    memset(&p, 0, sizeof p);
    p.id = 1;
    p.ndim = 2;
    p.nin = 3;
    p.in_type = in_type;
    p.ninstr = 7;
    p.code = code;
    p.nout = 2;
    p.out_instr = out_instr;
    p.out_type = out_type;
    p.reduce_op = -1;

    tgl_errbuf err;
    tgl_kernel_ref *k = NULL;
    CHILD_CHECK(tgl_cuda_fused_prepare(&opts, &p, &k, &err) == TGL_OK, "prepare: %s", err.msg);
    CHILD_CHECK(k->tier == 2, "tier %d", k->tier);
    const tgl_cuda_driver *drv = tgl_cuda_drv();

    double *hx = malloc(sizeof(double) * m * n), hr[64], hs = 0.25;
    for (int64_t i = 0; i < m * n; i++)
        hx[i] = sin((double)i);
    for (int64_t j = 0; j < n; j++)
        hr[j] = cos((double)j);
    void *dx, *dr, *ds, *d0, *d1;
    CHILD_CHECK(drv->malloc(&dx, sizeof(double) * m * n, &err) == TGL_OK &&
                    drv->malloc(&dr, sizeof(double) * n, &err) == TGL_OK &&
                    drv->malloc(&ds, sizeof(double), &err) == TGL_OK &&
                    drv->malloc(&d0, sizeof(double) * m * n, &err) == TGL_OK &&
                    drv->malloc(&d1, sizeof(double) * m * n, &err) == TGL_OK,
                "malloc: %s", err.msg);
    /* x stored as its transpose: element (i, j) at j * m + i */
    double *xt = malloc(sizeof(double) * m * n);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            xt[j * m + i] = hx[i * n + j];
    drv->memcpy(dx, xt, sizeof(double) * m * n, TGL_CUDA_H2D, &err);
    drv->memcpy(dr, hr, sizeof(double) * n, TGL_CUDA_H2D, &err);
    drv->memcpy(ds, &hs, sizeof(double), TGL_CUDA_H2D, &err);
    tgl_array ax = {.data = dx, .shape = {m, n}, .strides = {1, m}, .size = m * n, .ndim = 2,
                    .dtype_id = TGL_FLOAT64, .device = TGL_DEVICE_CUDA};
    tgl_array ar = {.data = dr, .shape = {1, n}, .strides = {n, 1}, .size = n, .ndim = 2,
                    .dtype_id = TGL_FLOAT64, .device = TGL_DEVICE_CUDA};
    tgl_array as = {.data = ds, .shape = {1, 1}, .strides = {1, 1}, .size = 1, .ndim = 2,
                    .dtype_id = TGL_FLOAT64, .device = TGL_DEVICE_CUDA};
    tgl_array ao0 = {.data = d0, .shape = {m, n}, .strides = {n, 1}, .size = m * n, .ndim = 2,
                     .dtype_id = TGL_FLOAT64, .device = TGL_DEVICE_CUDA};
    tgl_array ao1 = ao0;
    ao1.data = d1;
    tgl_array *in[3] = {&ax, &ar, &as}, *out[2] = {&ao0, &ao1};
    void *cache = NULL;
    double *h0 = malloc(sizeof(double) * m * n), *h1 = malloc(sizeof(double) * m * n);
    for (int call = 0; call < 3; call++) {
        /* call 2: x contiguous this time (the cached layout no longer holds) */
        if (call == 2) {
            drv->memcpy(dx, hx, sizeof(double) * m * n, TGL_CUDA_H2D, &err);
            ax.strides[0] = n;
            ax.strides[1] = 1;
        }
        CHILD_CHECK(tgl_cuda_fused_launch(&opts, &p, k, in, out, &cache, &err) == TGL_OK,
                    "launch %d: %s", call, err.msg);
        CHILD_CHECK(cache != NULL, "no launch cache");
        drv->memcpy(h0, d0, sizeof(double) * m * n, TGL_CUDA_D2H, &err);
        drv->memcpy(h1, d1, sizeof(double) * m * n, TGL_CUDA_D2H, &err);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double x = hx[i * n + j], w0 = tanh(x) * hr[j] + hs, w1 = x - hr[j];
                double g0 = h0[i * n + j], g1 = h1[i * n + j];
                CHILD_CHECK(fabs(g0 - w0) <= 1e-15 + 1e-12 * fabs(w0) && g1 == w1,
                            "call %d (%lld,%lld): %.17g %.17g, want %.17g %.17g", call,
                            (long long)i, (long long)j, g0, g1, w0, w1);
            }
    }
    /* a whole step's copy of the geometry, launched over new pointers */
    drv->memset(d0, 0, sizeof(double) * m * n, &err);
    void *geo = tgl_cuda_fused_geometry_dup(cache);
    CHILD_CHECK(geo, "no geometry");
    p.kernel[TGL_DEVICE_CUDA] = k;
    void *ptrs[5] = {dx, dr, ds, d0, d1};
    CHILD_CHECK(tgl_cuda_fused_launch_at(&p, geo, ptrs, &err) == TGL_OK, "launch_at: %s",
                err.msg);
    drv->memcpy(h0, d0, sizeof(double) * m * n, TGL_CUDA_D2H, &err);
    CHILD_CHECK(fabs(h0[5] - (tanh(hx[5]) * hr[5] + hs)) < 1e-12, "launch_at: %g", h0[5]);
    tgl_cuda_fused_geometry_free(geo);
    /* a 0-size space launches nothing */
    ax.shape[0] = ao0.shape[0] = ao1.shape[0] = 0;
    CHILD_CHECK(tgl_cuda_fused_launch(&opts, &p, k, in, out, &cache, &err) == TGL_OK,
                "an empty launch: %s", err.msg);
    /* a wrong shape is an error, not a launch */
    ax.shape[0] = 5;
    CHILD_CHECK(tgl_cuda_fused_launch(&opts, &p, k, in, out, &cache, &err) == TGL_ESHAPE,
                "a wrong shape launched");
    tgl_cuda_fused_launch_cache_free(cache);
    tgl_cuda_fused_release(k);

    /* a reduction program: tier 0 (the reference path runs it) */
    p.reduce_op = TGL_OP_SUM;
    p.reduce_mask = 1;
    p.reduce_type = (tgl_type){TGL_FLOAT64, 1, 0};
    CHILD_CHECK(tgl_cuda_fused_prepare(&opts, &p, &k, &err) == TGL_OK, "prepare: %s", err.msg);
    CHILD_CHECK(k->tier == 0, "a reduction at tier %d", k->tier);
    tgl_cuda_fused_release(k);
    free(hx);
    free(xt);
    free(h0);
    free(h1);
    return 0;
}

static void fused_kernels_compute_on_the_device(void **state)
{
    (void)state;
    need_device();
    assert_int_equal(in_child(fused_case), 0);
}

int main(void)
{
    setenv("TGL_CUDA_EMU", "1", 0);
    snprintf(cache_root, sizeof cache_root, "/tmp/tgl-cuda-modules-XXXXXX");
    if (!mkdtemp(cache_root)) {
        perror("mkdtemp");
        return 1;
    }
    opts.cache_dir = cache_root;
    opts.cache_max_bytes = INT64_C(1) << 30;
    opts.compile = "sync";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cache_hits_and_rebuilds),
        cmocka_unit_test(an_unwritable_cache_is_no_error),
        cmocka_unit_test(info_and_clear_touch_only_cuda_entries),
        cmocka_unit_test(library_errors_are_clear),
        cmocka_unit_test(geometry_covers_and_is_bounded),
        cmocka_unit_test(fused_kernels_compute_on_the_device),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "chmod -R u+w %s; rm -rf %s", cache_root, cache_root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", cache_root);
    return rc;
}
