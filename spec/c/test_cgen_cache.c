/*
 * test_cgen_cache.c — making kernels callable (src/cgen/compile.c,
 * cache.c) and the kernel threads (engine/pool.c): libtcc and cc give the
 * same values; tiered mode runs libtcc code at once and swaps in the cc
 * code; many background compiles share at most max(1, CPUs - 1) workers
 * that exit when the queue is empty; the disk cache hits on a second prepare (also from another
 * context), rebuilds a truncated or garbage entry, survives two processes
 * compiling the same kernel at once, evicts least recently used entries
 * beyond its cap, and answers --cache-info / --cache-clear; a missing
 * compiler means one warning and the reference path, a failing one an
 * internal error; the cache key names the backend and its target; the
 * context's settings and interrupt flag reach the backend through its
 * options; the pool runs every task once, nested runs inline.
 */
#include "cgen_test.h"

#include <pthread.h>

/* ---- tiers and compilation ------------------------------------------------ */

/* An exact program (no libm): x * y + 3 - floor(x / 2), maximum with y. */
static void exact_prog(pb *b, double k)
{
    pb_init(b, 1);
    int x = pb_in(b, TGL_FLOAT64, 0), y = pb_in(b, TGL_FLOAT64, 0);
    int v = pb_op(b, TGL_OP_MUL, TGL_FLOAT64, x, y, -1);
    v = pb_op(b, TGL_OP_ADD, TGL_FLOAT64, v, pb_const(b, TGL_FLOAT64, k), -1);
    int h = pb_op(b, TGL_OP_DIV, TGL_FLOAT64, x, pb_const(b, TGL_FLOAT64, 2), -1);
    v = pb_op(b, TGL_OP_SUB, TGL_FLOAT64, v, pb_op(b, TGL_OP_FLOOR, TGL_FLOAT64, h, -1, -1), -1);
    pb_out(b, pb_op(b, TGL_OP_MAXIMUM, TGL_FLOAT64, v, y, -1));
}

static void exact_inputs(tgl_ctx *ctx, tgl_array **in)
{
    int64_t n = (int64_t)COUNT(fvals) * COUNT(fvals);
    in[0] = edge_array(ctx, TGL_FLOAT64, n, 0, false);
    in[1] = edge_array(ctx, TGL_FLOAT64, n, 1, false);
}

static void tcc_and_cc_tiers_give_identical_results(void **state)
{
    pb b;
    exact_prog(&b, 3);
    tgl_array *in[2], *got[2][1] = {{NULL}, {NULL}};
    exact_inputs(CTX, in);
    run_prog(CTX, &b.p, "tcc", in, got[0]);
    assert_int_equal(tgl_backend_tier(&b.p, TGL_DEVICE_CPU), 1);
    tgl_backend_release(&b.p);
    run_prog(CTX, &b.p, "cc", in, got[1]);
    assert_int_equal(tgl_backend_tier(&b.p, TGL_DEVICE_CPU), 2);
    expect_match(got[1][0], got[0][0], 0, "cc vs libtcc");
    tgl_backend_release(&b.p);
    tgl_array *all[] = {in[0], in[1], got[0][0], got[1][0]};
    release_all(all, 4);
}

/* Tiered: libtcc code at once, the cc code swapped in later, same values. */
static void tiered_mode_swaps_in_cc_code(void **state)
{
    pb b;
    exact_prog(&b, 4);
    tgl_array *in[2], *got[2][1] = {{NULL}, {NULL}};
    exact_inputs(CTX, in);
    run_prog(CTX, &b.p, "tiered", in, got[0]);
    tgl_kernel_fn first = tgl_cgen_kernel_fn(b.p.kernel[TGL_DEVICE_CPU]);
    /* gcc takes tens of milliseconds; prepare returned in well under one */
    assert_int_equal(tgl_backend_tier(&b.p, TGL_DEVICE_CPU), 1);
    tgl_backend_wait(&b.p, TGL_DEVICE_CPU);
    assert_int_equal(tgl_backend_tier(&b.p, TGL_DEVICE_CPU), 2);
    assert_true(tgl_cgen_kernel_fn(b.p.kernel[TGL_DEVICE_CPU]) != first);
    run_prog(CTX, &b.p, "tiered", in, got[1]);
    expect_match(got[1][0], got[0][0], 0, "after the swap");
    tgl_backend_release(&b.p);
    /* Now cached: tiered goes straight to the cc code. */
    tgl_array_release(got[1][0]);
    run_prog(CTX, &b.p, "tiered", in, got[1]);
    assert_int_equal(tgl_backend_tier(&b.p, TGL_DEVICE_CPU), 2);
    tgl_backend_release(&b.p);
    tgl_array *all[] = {in[0], in[1], got[0][0], got[1][0]};
    release_all(all, 4);
}

/* The process's thread count. */
static int threads_now(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

/* Many kernels compiled in the background share at most max(1, CPUs - 1)
 * workers, which exit once the queue is empty; a kernel released before
 * or while its job runs is never published into (ASan/TSan watch that);
 * the others get their cc code, with the libtcc code's values. */
static void background_compiles_share_a_bounded_set_of_workers(void **state)
{
    enum { N = 24 };
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int bound = cpus > 2 ? (int)cpus - 1 : 1;
    int base = threads_now(), most = base;
    set(CTX, "compile", "tiered");
    set(CTX, "cflags", "-O0"); /* the queue is under test, not the optimizer */
    pb *bs = calloc(N, sizeof *bs);
    assert_non_null(bs);
    for (int i = 0; i < N; i++) {
        exact_prog(&bs[i], 100 + i);
        assert_ok(CTX, tgl_backend_prepare(CTX, TGL_DEVICE_CPU, &bs[i].p));
        int t = threads_now();
        most = t > most ? t : most;
        if (i % 2)
            tgl_backend_release(&bs[i].p);
    }
    if (most == base || most > base + bound)
        fail_msg("%d threads while compiling, %d before, bound %d", most, base, bound);
    tgl_array *in[2];
    exact_inputs(CTX, in);
    for (int i = 0; i < N; i += 2) {
        tgl_backend_wait(&bs[i].p, TGL_DEVICE_CPU);
        assert_int_equal(tgl_backend_tier(&bs[i].p, TGL_DEVICE_CPU), 2);
        tgl_array *got[1] = {NULL}, *ref[1] = {NULL};
        run_prog(CTX, &bs[i].p, "tiered", in, got);
        tgl_backend_release(&bs[i].p);
        run_prog(CTX, &bs[i].p, "tcc", in, ref);
        tgl_backend_release(&bs[i].p);
        expect_match(got[0], ref[0], 0, "background kernel");
        release_all(got, 1);
        release_all(ref, 1);
    }
    release_all(in, 2);
    free(bs);
    /* Idle workers exit (the released kernels' jobs done or dropped by then). */
    double t0 = now_ms();
    while (threads_now() > base && now_ms() - t0 < 20000)
        usleep(10000);
    assert_int_equal(threads_now(), base);
}

/* Releasing a program does not wait for its background compile. */
static void release_does_not_wait_for_the_background_compile(void **state)
{
    pb b;
    exact_prog(&b, 8);
    set(CTX, "compile", "tiered");
    assert_ok(CTX, tgl_backend_prepare(CTX, TGL_DEVICE_CPU, &b.p));
    assert_int_equal(tgl_backend_tier(&b.p, TGL_DEVICE_CPU), 1);
    double t0 = now_ms();
    tgl_backend_release(&b.p);
    double t = now_ms() - t0;
    assert_null(b.p.kernel[TGL_DEVICE_CPU]);
    /* gcc needs tens of milliseconds for any kernel */
    if (t > 10)
        fail_msg("release took %.1f ms", t);
}

/* Prepares an exact program with constant k through the counting cc in
 * sync mode, checks its values, releases it; returns milliseconds spent
 * preparing. */
static double prepare_exact(void **state, tgl_ctx *ctx, double k)
{
    pb b;
    exact_prog(&b, k);
    set(ctx, "cc", F->cc);
    set(ctx, "compile", "sync");
    double t0 = now_ms();
    assert_ok(ctx, tgl_backend_prepare(ctx, TGL_DEVICE_CPU, &b.p));
    double t = now_ms() - t0;
    assert_int_equal(tgl_backend_tier(&b.p, TGL_DEVICE_CPU), 2);
    tgl_array *in[2], *got[1] = {NULL}, *ref[1] = {NULL};
    exact_inputs(ctx, in);
    run_prog(ctx, &b.p, "sync", in, got);
    tgl_backend_release(&b.p);
    run_prog(ctx, &b.p, "tcc", in, ref);
    expect_match(got[0], ref[0], 0, "cached kernel");
    tgl_backend_release(&b.p);
    tgl_array *all[] = {in[0], in[1], got[0], ref[0]};
    release_all(all, 4);
    return t;
}

/* The path of the cache's only entry. */
static void only_entry(const char *dir, char *path, size_t size)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    path[0] = '\0';
    for (struct dirent *e; (e = readdir(d));)
        if (strlen(e->d_name) == TGL_CACHE_KEY_HEX + 3)
            snprintf(path, size, "%s/%s", dir, e->d_name);
    closedir(d);
    assert_true(path[0] != '\0');
}

static void second_prepare_hits_the_cache(void **state)
{
    double cold = prepare_exact(state, CTX, 5);
    assert_int_equal(compiles(state), 1);
    double warm = prepare_exact(state, CTX, 5);
    assert_int_equal(compiles(state), 1);
    /* Another context (as another process would) finds it too. */
    tgl_ctx *other = tgl_ctx_new();
    set(other, "cache_dir", F->dir);
    prepare_exact(state, other, 5);
    tgl_ctx_free(other);
    assert_int_equal(compiles(state), 1);
    assert_int_equal(entries(F->dir, NULL), 1);
    print_message("    cold prepare %.1f ms, cache hit %.2f ms\n", cold, warm);
    assert_true(warm < cold);
}

static void damaged_cache_entry_is_rebuilt(void **state)
{
    prepare_exact(state, CTX, 6);
    char path[600];
    only_entry(F->dir, path, sizeof path);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    off_t whole = st.st_size;
    /* Truncated (dlopen of such a file can crash with SIGBUS).  Damage
     * arrives as a new file: this process still maps the old one. */
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.damaged", path);
    assert_int_equal(link(path, tmp), 0);
    assert_int_equal(unlink(path), 0);
    FILE *in = fopen(tmp, "rb"), *out = fopen(path, "wb");
    for (off_t i = 0; i < whole / 2; i++)
        fputc(fgetc(in), out);
    fclose(in);
    fclose(out);
    unlink(tmp);
    prepare_exact(state, CTX, 6);
    assert_int_equal(compiles(state), 2);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, whole);
    /* Garbage. */
    unlink(path);
    FILE *f = fopen(path, "w");
    fputs("not an ELF file", f);
    fclose(f);
    prepare_exact(state, CTX, 6);
    assert_int_equal(compiles(state), 3);
    assert_int_equal(entries(F->dir, NULL), 1);
}

/* Two processes compiling the same kernel into an empty cache at once
 * both succeed. */
static void two_processes_compile_the_same_kernel(void **state)
{
    int go[2];
    assert_int_equal(pipe(go), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* The child reports through its exit status, not cmocka. */
        char c;
        if (read(go[0], &c, 1) != 1)
            _exit(2);
        tgl_ctx *ctx = tgl_ctx_new();
        pb b;
        exact_prog(&b, 7);
        tgl_config_set(ctx, "cache_dir", F->dir);
        tgl_config_set(ctx, "cc", F->cc);
        tgl_config_set(ctx, "compile", "sync");
        tgl_config_set(ctx, "threads", "1");
        if (tgl_backend_prepare(ctx, TGL_DEVICE_CPU, &b.p) != TGL_OK || tgl_backend_tier(&b.p, TGL_DEVICE_CPU) != 2)
            _exit(3);
        tgl_array *in[2], *out = NULL;
        int64_t n = 4;
        tgl_array_full(ctx, TGL_FLOAT64, 1, &n, 2.0, &in[0]);
        tgl_array_full(ctx, TGL_FLOAT64, 1, &n, -5.0, &in[1]);
        tgl_array_empty(ctx, TGL_FLOAT64, 1, &n, &out);
        /* max(2 * -5 + 7 - floor(2 / 2), -5) = -4 */
        if (tgl_backend_launch(ctx, &b.p, TGL_DEVICE_CPU, in, &out, NULL) != TGL_OK ||
            ((double *)out->data)[3] != -4.0)
            _exit(4);
        _exit(0);
    }
    assert_int_equal(write(go[1], "go", 2), 2);
    prepare_exact(state, CTX, 7);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    close(go[0]);
    close(go[1]);
    assert_int_equal(entries(F->dir, NULL), 1);
    assert_true(compiles(state) >= 1 && compiles(state) <= 2);
}

/* With room for two entries, inserting a third evicts the least recently
 * used one. */
static void cache_evicts_least_recently_used_beyond_the_cap(void **state)
{
    prepare_exact(state, CTX, 10); /* A */
    int64_t one;
    entries(F->dir, &one);
    char cap[32];
    snprintf(cap, sizeof cap, "%lld", (long long)(one * 5 / 2));
    set(CTX, "cache_max_bytes", cap);
    prepare_exact(state, CTX, 11); /* B */
    prepare_exact(state, CTX, 12); /* C evicts A */
    int64_t bytes;
    assert_int_equal(entries(F->dir, &bytes), 2);
    assert_true(bytes <= one * 5 / 2);
    assert_int_equal(compiles(state), 3);
    prepare_exact(state, CTX, 11); /* B: a hit, now the most recent */
    assert_int_equal(compiles(state), 3);
    prepare_exact(state, CTX, 10); /* A again: compiled, evicts C */
    assert_int_equal(compiles(state), 4);
    prepare_exact(state, CTX, 11); /* B survived */
    assert_int_equal(compiles(state), 4);
    prepare_exact(state, CTX, 12); /* C did not */
    assert_int_equal(compiles(state), 5);
}

/* A cache directory that cannot be made: kernels still compile, uncached. */
static void unusable_cache_directory_compiles_without_caching(void **state)
{
    char bad[400];
    snprintf(bad, sizeof bad, "%s/cc.sh/sub", F->dir); /* under a regular file */
    set(CTX, "cache_dir", bad);
    prepare_exact(state, CTX, 30);
    prepare_exact(state, CTX, 30);
    assert_int_equal(compiles(state), 2);
    assert_int_equal(entries(F->dir, NULL), 0);
}

/* Declared in tgl.h once integrated; repeated here for the scratch build. */
tgl_status tgl_cache_clear(tgl_ctx *ctx);
tgl_status tgl_cache_info(tgl_ctx *ctx, char **text);

static void cache_info_and_clear(void **state)
{
    prepare_exact(state, CTX, 13);
    prepare_exact(state, CTX, 14);
    char *text = NULL;
    assert_ok(CTX, tgl_cache_info(CTX, &text));
    assert_non_null(strstr(text, F->dir));
    assert_non_null(strstr(text, "entries: 2\n"));
    assert_non_null(strstr(text, "max_bytes: 268435456\n"));
    free(text);
    assert_ok(CTX, tgl_cache_clear(CTX));
    assert_int_equal(entries(F->dir, NULL), 0);
    assert_ok(CTX, tgl_cache_info(CTX, &text));
    assert_non_null(strstr(text, "entries: 0\n"));
    free(text);
}

/* No compiler: the reference path (sync) or the libtcc code (tiered), one
 * warning per process, never an error. */
static void missing_compiler_falls_back_with_one_warning(void **state)
{
    char log[300];
    snprintf(log, sizeof log, "%s/stderr", F->dir);
    fflush(stderr);
    int saved = dup(2);
    FILE *l = fopen(log, "w");
    dup2(fileno(l), 2);
    set(CTX, "cc", "/nonexistent/cc");
    pb b;
    exact_prog(&b, 20);
    set(CTX, "compile", "sync");
    tgl_status st1 = tgl_backend_prepare(CTX, TGL_DEVICE_CPU, &b.p);
    int tier1 = tgl_backend_tier(&b.p, TGL_DEVICE_CPU);
    tgl_kernel_fn fn1 = tgl_cgen_kernel_fn(b.p.kernel[TGL_DEVICE_CPU]);
    tgl_backend_release(&b.p);
    set(CTX, "compile", "tiered");
    tgl_status st2 = tgl_backend_prepare(CTX, TGL_DEVICE_CPU, &b.p);
    tgl_backend_wait(&b.p, TGL_DEVICE_CPU);
    int tier2 = tgl_backend_tier(&b.p, TGL_DEVICE_CPU);
    tgl_backend_release(&b.p);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(l);
    assert_int_equal(st1, TGL_OK);
    assert_int_equal(tier1, 0);
    assert_null(fn1);
    assert_int_equal(st2, TGL_OK);
    assert_int_equal(tier2, 1);
    char text[1000] = {0};
    FILE *r = fopen(log, "r");
    size_t n = fread(text, 1, sizeof text - 1, r);
    fclose(r);
    text[n] = '\0';
    const char *w = "tgl: no C compiler (/nonexistent/cc): using reference kernels\n";
    assert_string_equal(text, w);
}

/* A kernel the compiler rejects is tgl's bug: TGL_EINTERNAL with the
 * compiler's message; the program keeps no kernel. */
static void compiler_failure_is_an_internal_error(void **state)
{
    pb b;
    exact_prog(&b, 21);
    set(CTX, "compile", "sync");
    set(CTX, "cflags", "-O2 -fno-such-flag-tgl");
    assert_int_equal(tgl_backend_prepare(CTX, TGL_DEVICE_CPU, &b.p), TGL_EINTERNAL);
    const char *msg = tgl_ctx_error(CTX);
    assert_non_null(strstr(msg, "does not compile"));
    assert_non_null(strstr(msg, "-fno-such-flag-tgl"));
    assert_null(tgl_cgen_kernel_fn(b.p.kernel[TGL_DEVICE_CPU]));
    set(CTX, "cflags", "-O2");
    assert_ok(CTX, tgl_backend_prepare(CTX, TGL_DEVICE_CPU, &b.p));
    assert_int_equal(tgl_backend_tier(&b.p, TGL_DEVICE_CPU), 2);
    tgl_backend_release(&b.p);
    /* A program the renderer cannot express. */
    pb_init(&b, 1);
    int x = pb_in(&b, TGL_FLOAT32, 0);
    pb_out(&b, pb_op(&b, TGL_OP_SUM, TGL_FLOAT32, x, -1, -1));
    assert_int_equal(tgl_backend_prepare(CTX, TGL_DEVICE_CPU, &b.p), TGL_EINTERNAL);
    assert_non_null(strstr(tgl_ctx_error(CTX), "not elementwise"));
    tgl_backend_release(&b.p);
}

/* ---- the backend seam -------------------------------------------------------- */

/* The cache key covers the backend's name and its target: the same source,
 * compiler and flags for another backend or another CPU is another entry. */
static void cache_key_names_the_backend_and_its_target(void **state)
{
    (void)state;
    char k1[TGL_CACHE_KEY_HEX + 1], k2[TGL_CACHE_KEY_HEX + 1], k3[TGL_CACHE_KEY_HEX + 1],
        k4[TGL_CACHE_KEY_HEX + 1];
    const char *cpu = tgl_cache_host_target();
    assert_true(strlen(cpu) > 0);
    assert_int_equal(tgl_cache_key("cpu", cpu, "src", "cc", "cc 12", "-O2", k1), 0);
    assert_int_equal(tgl_cache_key("cuda", cpu, "src", "cc", "cc 12", "-O2", k2), 0);
    assert_int_equal(tgl_cache_key("cpu", "another cpu", "src", "cc", "cc 12", "-O2", k3), 0);
    assert_int_equal(tgl_cache_key("cpu", cpu, "src", "cc", "cc 12", "-O2", k4), 0);
    assert_string_not_equal(k1, k2);
    assert_string_not_equal(k1, k3);
    assert_string_equal(k1, k4);
}

/* What the backends read of the context follows every setting, and the
 * interrupt flag stops a launch with the context's message. */
static void settings_and_interrupts_reach_the_backend(void **state)
{
    const tgl_backend_opts *o = &CTX->backend_opts;
    set(CTX, "threads", "3");
    set(CTX, "compile", "tcc");
    set(CTX, "cache_max_bytes", "12345");
    assert_int_equal(o->threads, 3);
    assert_string_equal(o->compile, "tcc");
    assert_string_equal(o->cache_dir, F->dir);
    assert_int_equal(o->cache_max_bytes, 12345);
    assert_true(o->pool == &CTX->pool);
    assert_null(o->interrupt);
    pb b;
    exact_prog(&b, 40);
    tgl_array *in[2], *out[1] = {NULL};
    exact_inputs(CTX, in);
    run_prog(CTX, &b.p, "tcc", in, out);
    volatile int flag = 1;
    tgl_ctx_set_interrupt_flag(CTX, &flag);
    assert_true(o->interrupt == &flag);
    assert_int_equal(tgl_backend_launch(CTX, &b.p, TGL_DEVICE_CPU, in, out, NULL), TGL_EINTERRUPT);
    assert_string_equal(tgl_ctx_error(CTX), "interrupted");
    tgl_ctx_set_interrupt_flag(CTX, NULL);
    assert_ok(CTX, tgl_backend_launch(CTX, &b.p, TGL_DEVICE_CPU, in, out, NULL));
    /* The kernel's head names the backend that made it. */
    assert_true(b.p.kernel[TGL_DEVICE_CPU]->backend == &tgl_backend_cpu);
    assert_int_equal(b.p.kernel[TGL_DEVICE_CPU]->tier, 1);
    tgl_backend_release(&b.p);
    assert_int_equal(tgl_backend_tier(&b.p, TGL_DEVICE_CPU), 0);
    tgl_array *all[] = {in[0], in[1], out[0]};
    release_all(all, 3);
}

/* ---- the pool --------------------------------------------------------------- */

typedef struct pool_probe {
    tgl_ctx *ctx;
    atomic_int hits[1000];
    atomic_int nested;
} pool_probe;

static void count_nested(void *arg, int t)
{
    atomic_fetch_add(&((pool_probe *)arg)->nested, t + 1);
}

static void count_task(void *arg, int t)
{
    pool_probe *p = arg;
    atomic_fetch_add(&p->hits[t], 1);
    if (t == 7) /* a task calling back in runs inline instead of deadlocking */
        tgl_pool_run(p->ctx, 3, count_nested, p);
}

static void pool_runs_every_task_exactly_once(void **state)
{
    static const char *threads[] = {"1", "4", "2"};
    for (int k = 0; k < 3; k++) {
        set(CTX, "threads", threads[k]);
        assert_int_equal(tgl_pool_threads(CTX), atoi(threads[k]));
        for (int rep = 0; rep < 50; rep++) {
            pool_probe *p = calloc(1, sizeof *p);
            p->ctx = CTX;
            tgl_pool_run(CTX, 1000, count_task, p);
            for (int t = 0; t < 1000; t++)
                assert_int_equal(atomic_load(&p->hits[t]), 1);
            assert_int_equal(atomic_load(&p->nested), 6);
            free(p);
        }
    }
    tgl_pool_free(CTX);
    tgl_pool_free(CTX); /* idempotent */
}

/* Runs from two threads at once on the one process-wide pool (one finds it
 * busy and runs inline), with contexts asking for different counts (the
 * pool grows to the larger), many short runs in a row (a worker waking
 * late must never take a task of a later run): every task exactly once. */
typedef struct pool_racer {
    int threads;
    int bad;
} pool_racer;

static void count_plain(void *arg, int t)
{
    atomic_fetch_add(&((pool_probe *)arg)->hits[t], 1);
}

static void *race_runs(void *arg)
{
    pool_racer *r = arg;
    struct tgl_pool *slot = NULL;
    for (int rep = 0; rep < 2000; rep++) {
        pool_probe *p = calloc(1, sizeof *p);
        int n = 1 + rep % 7;
        tgl_pool_run_in(&slot, r->threads, n, count_plain, p);
        for (int t = 0; t < n; t++)
            r->bad += atomic_load(&p->hits[t]) != 1;
        free(p);
    }
    return NULL;
}

static void pool_shared_between_threads_runs_every_task_once(void **state)
{
    (void)state;
    pool_racer a = {2, 0}, b = {3, 0};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, race_runs, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, race_runs, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.bad, 0);
    assert_int_equal(b.bad, 0);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(tcc_and_cc_tiers_give_identical_results),
        T(tiered_mode_swaps_in_cc_code),
        T(background_compiles_share_a_bounded_set_of_workers),
        T(second_prepare_hits_the_cache),
        T(damaged_cache_entry_is_rebuilt),
        T(two_processes_compile_the_same_kernel),
        T(cache_evicts_least_recently_used_beyond_the_cap),
        T(cache_info_and_clear),
        T(unusable_cache_directory_compiles_without_caching),
        T(missing_compiler_falls_back_with_one_warning),
        T(compiler_failure_is_an_internal_error),
        T(cache_key_names_the_backend_and_its_target),
        T(settings_and_interrupts_reach_the_backend),
        T(pool_runs_every_task_exactly_once),
        T(pool_shared_between_threads_runs_every_task_once),
        /* last: its compile goes on in the background (no fork after it) */
        T(release_does_not_wait_for_the_background_compile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
