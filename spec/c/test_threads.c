/*
 * test_threads.c — one compiled function called from several OS threads
 * at once (issue 24, item 4; the contract is in doc/c-api.md, "Threads").
 *
 * Each thread has a tgl_ctx and a frame of its own (tgl_function_frame_new)
 * and all of them start together behind a barrier, then run many calls
 * each, with inputs of their own, on three kinds of program: fused
 * generated kernels, a whole step that binds (the same shapes every call)
 * and a scan.  Every result is checked against values computed here by
 * hand, so a run that read another thread's registers or buffers fails.
 * A counter of calls in flight shows the calls really overlapped.
 *
 * Then one frame shared by two threads (a frame of its own, and the
 * default frame, there through tgl_function_call against tgl_function_run
 * and tgl_function_output): a call that finds the frame taken fails with
 * TGL_EBUSY and a message saying so, changes nothing, and the same call
 * retried later gives the right answer.
 *
 * cmocka's assertions longjmp, which only the main thread may do: worker
 * threads record their first failure in their own struct and the main
 * thread fails the test with it after joining them.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "tgl_fixture.h"

#define CTX (((fixture *)*state)->ctx)
#ifndef NTHREADS
#define NTHREADS 4
#endif
#define T_SCAN 48   /* scan steps */
#define N_SCAN 5    /* scan state width */
#define R_X 4       /* rows of the whole step's x */
#define C_X 3       /* columns of x, rows of W */
#define C_W 2       /* columns of W */
#define N_FUSED 2048  /* elements of the fused function's input */

/* ---- building the three programs (main thread) ---------------------------- */

static int op(const char *name)
{
    int id = tgl_op_lookup(name);
    if (id < 0)
        fail_msg("no op named %s", name);
    return id;
}

static tgl_node *input(tgl_ctx *ctx, int ndim, const char *name)
{
    tgl_node *n = NULL;
    tgl_type t = {TGL_FLOAT64, ndim, 0};
    assert_ok(ctx, tgl_node_input(ctx, t, name, &n));
    return n;
}

static tgl_node *ap(tgl_ctx *ctx, const char *name, int nin, tgl_node *const *in,
                    const tgl_params *p)
{
    tgl_node *n = NULL;
    assert_ok(ctx, tgl_apply(ctx, op(name), nin, in, p, NULL, &n));
    return n;
}

static tgl_node *ap1(tgl_ctx *ctx, const char *name, tgl_node *a)
{
    return ap(ctx, name, 1, &a, NULL);
}

static tgl_node *ap2(tgl_ctx *ctx, const char *name, tgl_node *a, tgl_node *b)
{
    tgl_node *in[2] = {a, b};
    return ap(ctx, name, 2, in, NULL);
}

static tgl_array *f64(tgl_ctx *ctx, int ndim, const int64_t *shape, const double *vals)
{
    tgl_array *a = NULL;
    assert_ok(ctx, tgl_array_empty(ctx, TGL_FLOAT64, ndim, shape, &a));
    for (int64_t i = 0; i < a->size; i++)
        ((double *)a->data)[i] = vals ? vals[i] : 0;
    return a;
}

/* A scalar constant node. */
static tgl_node *scalar(tgl_ctx *ctx, double v)
{
    tgl_array *a = NULL;
    tgl_node *n = NULL;
    assert_ok(ctx, tgl_array_full(ctx, TGL_FLOAT64, 0, NULL, v, &a));
    assert_ok(ctx, tgl_node_constant(ctx, a, &n));
    tgl_array_release(a);
    return n;
}

static tgl_node *sum_all(tgl_ctx *ctx, tgl_node *x)
{
    tgl_params p = {0};
    p.n = tgl_node_type(x).ndim;
    for (int d = 0; d < p.n; d++)
        p.i[d] = d;
    return ap(ctx, "sum", 1, &x, &p);
}

static const double W_VALS[C_X * C_W] = {0.5, -0.25, 0.75, 0.1, -0.6, 0.3};

typedef struct programs {
    tgl_function *fused; /* x -> y = tanh(2x) + exp(x) x, sum(y) */
    tgl_function *step;  /* x -> sum(tanh(x W)^2), d/dx; W shared */
    tgl_function *scan;  /* X, h0 -> h_t = tanh(0.5 h_{t-1} + X_t), every t */
} programs;

static tgl_function *compile(tgl_ctx *ctx, int nin, tgl_node *const *in, int nout,
                             tgl_node *const *out, const char *name)
{
    tgl_compile_options o;
    memset(&o, 0, sizeof o);
    o.linker = TGL_LINKER_CVM;
    o.name = name;
    tgl_function *fn = NULL;
    assert_ok(ctx, tgl_function_new(ctx, nin, in, nout, out, 0, NULL, NULL, &o, &fn));
    return fn;
}

static void build(tgl_ctx *ctx, programs *p)
{
    /* fused elementwise kernels */
    tgl_node *x = input(ctx, 1, "x");
    tgl_node *y = ap2(ctx, "add", ap1(ctx, "tanh", ap2(ctx, "mul", x, scalar(ctx, 2))),
                      ap2(ctx, "mul", ap1(ctx, "exp", x), x));
    tgl_node *fo[2] = {y, sum_all(ctx, y)};
    p->fused = compile(ctx, 1, &x, 2, fo, "fused");

    /* a step with a product, its gradient and a shared variable */
    tgl_node *xm = input(ctx, 2, "xm");
    tgl_node *W = NULL;
    tgl_array *wv = f64(ctx, 2, (int64_t[]){C_X, C_W}, W_VALS);
    assert_ok(ctx, tgl_node_shared(ctx, wv, 0, "W", &W));
    tgl_array_release(wv);
    tgl_node *h = ap1(ctx, "tanh", ap2(ctx, "dot", xm, W));
    tgl_node *cost = sum_all(ctx, ap2(ctx, "mul", h, h));
    tgl_node *gx = NULL;
    assert_ok(ctx, tgl_grad(ctx, cost, 1, &xm, 0, NULL, NULL, TGL_DISCONNECTED_RAISE, &gx));
    tgl_node *so[2] = {cost, gx};
    p->step = compile(ctx, 1, &xm, 2, so, "step");

    /* a scan: h_t = tanh(0.5 h_{t-1} + x_t) */
    tgl_node *xs = input(ctx, 2, "xs"), *h0 = input(ctx, 2, "h0");
    tgl_node *xt = input(ctx, 1, "xt"), *hp = input(ctx, 1, "hp");
    tgl_node *ht = ap1(ctx, "tanh", ap2(ctx, "add", ap2(ctx, "mul", hp, scalar(ctx, 0.5)), xt));
    int seq_ntaps = 1, seq_taps = 0, rec_ntaps = 1, rec_taps = -1;
    tgl_node *inner_in[2] = {xt, hp};
    tgl_scan_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.name = "rnn";
    sp.nseq = 1;
    sp.seq_ntaps = &seq_ntaps;
    sp.seq_taps = &seq_taps;
    sp.nrec = 1;
    sp.rec_ntaps = &rec_ntaps;
    sp.rec_taps = &rec_taps;
    sp.truncate_gradient = -1;
    sp.inner_in = inner_in;
    sp.inner_out = &ht;
    sp.seqs = &xs;
    sp.inits = &h0;
    tgl_node *sc = NULL, *hs = NULL;
    assert_ok(ctx, tgl_scan(ctx, &sp, NULL, &sc));
    assert_ok(ctx, tgl_node_output(ctx, sc, 0, &hs));
    tgl_node *scan_in[2] = {xs, h0};
    p->scan = compile(ctx, 2, scan_in, 1, &hs, "scan");
}

static void free_programs(programs *p)
{
    tgl_function_free(p->fused);
    tgl_function_free(p->step);
    tgl_function_free(p->scan);
}

/* ---- inputs and the values expected, computed here --------------------------- */

/* Input element i of a call: differs per thread and per call. */
static double in_val(int thread, int call, int i)
{
    return 0.9 * sin(0.37 * i + 1.3 * thread + 0.071 * call);
}

static void fill(tgl_array *a, int thread, int call)
{
    for (int64_t i = 0; i < a->size; i++)
        ((double *)a->data)[i] = in_val(thread, call, (int)i);
}

/* The first mismatch, written into msg; 0 when every value matched.  The
 * elements are read through a's strides (no tgl_ctx: the workers' own
 * are busy with their calls, and this is the thread's test code). */
static int close_to(const tgl_array *a, const double *want, int64_t n, const char *what,
                    char *msg, size_t size)
{
    if (a->size != n || a->dtype_id != TGL_FLOAT64) {
        snprintf(msg, size, "%s: %lld elements of dtype %d, expected %lld float64", what,
                 (long long)a->size, (int)a->dtype_id, (long long)n);
        return 1;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0, r = i;
        for (int d = a->ndim - 1; d >= 0; d--) {
            off += (r % a->shape[d]) * a->strides[d];
            r /= a->shape[d];
        }
        double g = ((const double *)a->data)[off];
        if (!(fabs(g - want[i]) <= 1e-10 * (1 + fabs(want[i])))) {
            snprintf(msg, size, "%s: element %lld is %.17g, expected %.17g", what, (long long)i,
                     g, want[i]);
            return 1;
        }
    }
    return 0;
}

static void want_fused(const tgl_array *x, double *y, double *s)
{
    *s = 0;
    for (int64_t i = 0; i < x->size; i++) {
        double v = ((const double *)x->data)[i];
        y[i] = tanh(2 * v) + exp(v) * v;
        *s += y[i];
    }
}

static void want_step(const tgl_array *x, double *cost, double *gx)
{
    const double *xv = x->data;
    double dz[R_X][C_W];
    *cost = 0;
    for (int r = 0; r < R_X; r++)
        for (int j = 0; j < C_W; j++) {
            double z = 0;
            for (int k = 0; k < C_X; k++)
                z += xv[r * C_X + k] * W_VALS[k * C_W + j];
            double h = tanh(z);
            *cost += h * h;
            dz[r][j] = 2 * h * (1 - h * h);
        }
    for (int r = 0; r < R_X; r++)
        for (int k = 0; k < C_X; k++) {
            double g = 0;
            for (int j = 0; j < C_W; j++)
                g += dz[r][j] * W_VALS[k * C_W + j];
            gx[r * C_X + k] = g;
        }
}

static void want_scan(const tgl_array *xs, const tgl_array *h0, double *hs)
{
    int64_t T = xs->shape[0], n = xs->shape[1];
    const double *xv = xs->data, *hv = h0->data;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < n; i++) {
            double prev = t ? hs[(t - 1) * n + i] : hv[i];
            hs[t * n + i] = tanh(0.5 * prev + xv[t * n + i]);
        }
}

/* ---- many threads, a frame each ------------------------------------------------- */

#ifndef ITERS
#define ITERS 100
#endif

typedef struct shared_state {
    programs *p;
    pthread_barrier_t start;
    atomic_int inflight;
    atomic_int max_inflight;
} shared_state;

typedef struct worker {
    shared_state *sh;
    int id;
    int calls;   /* calls that ran and were checked */
    char err[512];
} worker;

static void enter_call(shared_state *sh)
{
    int now = atomic_fetch_add(&sh->inflight, 1) + 1;
    int m = atomic_load(&sh->max_inflight);
    while (now > m && !atomic_compare_exchange_weak(&sh->max_inflight, &m, now))
        ;
}

static void leave_call(shared_state *sh)
{
    atomic_fetch_sub(&sh->inflight, 1);
}

/* Records the first failure of w. */
static void failed(worker *w, const char *fmt, ...)
{
    if (w->err[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
}

static void *own_frames(void *arg)
{
    worker *w = arg;
    shared_state *sh = w->sh;
    programs *p = sh->p;
    tgl_ctx *ctx = tgl_ctx_new();
    tgl_frame *ff = NULL, *fs = NULL, *fc = NULL;
    tgl_array *x = NULL, *xm = NULL, *xs = NULL, *h0 = NULL;
    if (!ctx || tgl_function_frame_new(ctx, p->fused, &ff) || tgl_function_frame_new(ctx, p->step, &fs) ||
        tgl_function_frame_new(ctx, p->scan, &fc) ||
        tgl_array_empty(ctx, TGL_FLOAT64, 1, (int64_t[]){N_FUSED}, &x) ||
        tgl_array_empty(ctx, TGL_FLOAT64, 2, (int64_t[]){R_X, C_X}, &xm) ||
        tgl_array_empty(ctx, TGL_FLOAT64, 2, (int64_t[]){T_SCAN, N_SCAN}, &xs) ||
        tgl_array_empty(ctx, TGL_FLOAT64, 2, (int64_t[]){1, N_SCAN}, &h0))
        failed(w, "thread %d: setup failed: %s", w->id, ctx ? tgl_ctx_error(ctx) : "no ctx");
    pthread_barrier_wait(&sh->start);
    for (int k = 0; k < ITERS && !w->err[0]; k++) {
        double y[N_FUSED], s, cost, gx[R_X * C_X], hs[T_SCAN * N_SCAN], c1;
        tgl_array *o[2] = {NULL, NULL};
        char msg[400] = "";

        fill(x, w->id, k);
        enter_call(sh);
        tgl_status st = tgl_function_call_frame(ctx, p->fused, ff, &x, o);
        leave_call(sh);
        if (st) {
            failed(w, "thread %d call %d: fused: %s", w->id, k, tgl_ctx_error(ctx));
            break;
        }
        want_fused(x, y, &s);
        if (close_to(o[0], y, N_FUSED, "fused y", msg, sizeof msg) ||
            close_to(o[1], &s, 1, "fused sum", msg, sizeof msg))
            failed(w, "thread %d call %d: %s", w->id, k, msg);
        tgl_array_release(o[0]);
        tgl_array_release(o[1]);

        fill(xm, w->id, k);
        enter_call(sh);
        st = tgl_function_call_frame(ctx, p->step, fs, &xm, o);
        leave_call(sh);
        if (st) {
            failed(w, "thread %d call %d: step: %s", w->id, k, tgl_ctx_error(ctx));
            break;
        }
        want_step(xm, &cost, gx);
        c1 = cost;
        if (close_to(o[0], &c1, 1, "step cost", msg, sizeof msg) ||
            close_to(o[1], gx, R_X * C_X, "step gradient", msg, sizeof msg))
            failed(w, "thread %d call %d: %s", w->id, k, msg);
        tgl_array_release(o[0]);
        tgl_array_release(o[1]);

        fill(xs, w->id, k);
        fill(h0, w->id + 17, k);
        tgl_array *si[2] = {xs, h0};
        enter_call(sh);
        st = tgl_function_call_frame(ctx, p->scan, fc, si, o);
        leave_call(sh);
        if (st) {
            failed(w, "thread %d call %d: scan: %s", w->id, k, tgl_ctx_error(ctx));
            break;
        }
        want_scan(xs, h0, hs);
        if (close_to(o[0], hs, T_SCAN * N_SCAN, "scan", msg, sizeof msg))
            failed(w, "thread %d call %d: %s", w->id, k, msg);
        tgl_array_release(o[0]);
        w->calls += 3;
    }
    tgl_array_release(x);
    tgl_array_release(xm);
    tgl_array_release(xs);
    tgl_array_release(h0);
    tgl_frame_free(ff);
    tgl_frame_free(fs);
    tgl_frame_free(fc);
    tgl_ctx_free(ctx);
    return NULL;
}

/* The whole step binds (and its generated function is made) on the main
 * thread's default frame first, so the threads' frames bind to a step
 * whose code is already in the cache while the others run. */
static void warm_step(tgl_ctx *ctx, programs *p)
{
    tgl_array *xm = f64(ctx, 2, (int64_t[]){R_X, C_X}, NULL);
    fill(xm, 99, 0);
    int generated = 0;
    /* bind on the second call, record after GEN_AFTER (2) more, then the
     * generated function compiles in the background */
    for (int k = 0; k < 8 && !generated; k++) {
        tgl_array *o[2] = {NULL, NULL};
        assert_ok(ctx, tgl_function_call(ctx, p->step, &xm, o, 0));
        tgl_array_release(o[0]);
        tgl_array_release(o[1]);
        assert_ok(ctx, tgl_function_wait_compiled(ctx, p->step));
        tgl_function_whole_step(p->step, NULL, NULL, NULL, &generated);
    }
    assert_int_equal(tgl_function_whole_step(p->step, NULL, NULL, NULL, NULL), 1);
    assert_int_equal(generated, 1);
    tgl_array_release(xm);
}

static void threads_with_their_own_frames_run_at_once_and_agree(void **state)
{
    tgl_ctx *ctx = CTX;
    programs p;
    build(ctx, &p);
    warm_step(ctx, &p);
    shared_state sh = {.p = &p};
    atomic_init(&sh.inflight, 0);
    atomic_init(&sh.max_inflight, 0);
    /* On a loaded machine the scheduler may run the threads one after
     * another for a whole round; rounds repeat (fresh frames each time)
     * until two calls were seen in flight at once. */
    int rounds = 0;
    for (; rounds < 20 && atomic_load(&sh.max_inflight) < 2; rounds++) {
        pthread_barrier_init(&sh.start, NULL, NTHREADS);
        worker w[NTHREADS];
        pthread_t th[NTHREADS];
        memset(w, 0, sizeof w);
        for (int i = 0; i < NTHREADS; i++) {
            w[i].sh = &sh;
            w[i].id = i;
            assert_int_equal(pthread_create(&th[i], NULL, own_frames, &w[i]), 0);
        }
        for (int i = 0; i < NTHREADS; i++)
            pthread_join(th[i], NULL);
        pthread_barrier_destroy(&sh.start);
        for (int i = 0; i < NTHREADS; i++)
            if (w[i].err[0])
                fail_msg("round %d: %s", rounds + 1, w[i].err);
        for (int i = 0; i < NTHREADS; i++)
            assert_int_equal(w[i].calls, 3 * ITERS);
    }
    /* The calls overlapped: at some moment at least two were in flight. */
    if (atomic_load(&sh.max_inflight) < 2)
        fail_msg("the calls never overlapped in %d rounds (at most %d in flight)", rounds,
                 atomic_load(&sh.max_inflight));
    print_message("threads: %d x %d calls per round, %d round(s), up to %d in flight at once\n",
                  NTHREADS, 3 * ITERS, rounds, atomic_load(&sh.max_inflight));
    free_programs(&p);
}

/* ---- one frame, two threads ------------------------------------------------------- *
 * On a frame made for the purpose both threads call; on the default frame
 * one calls (tgl_function_call) while the other runs it again
 * (tgl_function_run, then tgl_function_output): each entry refuses a
 * frame in use. */

#define SHARED_T 3000 /* steps of the long scan: a call lasts long enough to collide */
#define SHARED_SECONDS 20

typedef struct contender {
    programs *p;
    tgl_frame *frame;  /* NULL: the function's default frame */
    pthread_barrier_t *start;
    atomic_int *busy_seen; /* EBUSY errors, both threads together */
    int id;
    int seed;  /* whose inputs: its own, or (run) those of contender 0 */
    bool run;  /* tgl_function_run + tgl_function_output on the default frame */
    int ok_calls, busy_calls;
    char err[512];
} contender;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Calls the long scan on the shared frame until both threads have seen
 * the frame busy and each has had several calls succeed (or time runs
 * out): every success must be right for this thread's own inputs, every
 * failure TGL_EBUSY with its message, leaving nothing changed. */
static void *contend(void *arg)
{
    contender *c = arg;
    tgl_ctx *ctx = tgl_ctx_new();
    tgl_array *xs = NULL, *h0 = NULL;
    if (!ctx || tgl_array_empty(ctx, TGL_FLOAT64, 2, (int64_t[]){SHARED_T, N_SCAN}, &xs) ||
        tgl_array_empty(ctx, TGL_FLOAT64, 2, (int64_t[]){1, N_SCAN}, &h0)) {
        snprintf(c->err, sizeof c->err, "contender %d: setup failed", c->id);
        pthread_barrier_wait(c->start);
        goto out;
    }
    double *want = malloc(sizeof *want * SHARED_T * N_SCAN);
    fill(xs, 50 + c->seed, 0);
    fill(h0, 60 + c->seed, 0);
    want_scan(xs, h0, want);
    pthread_barrier_wait(c->start);
    double deadline = now_s() + SHARED_SECONDS;
    while (now_s() < deadline &&
           !(atomic_load(c->busy_seen) >= 2 && c->ok_calls >= 3)) {
        tgl_array *si[2] = {xs, h0}, *o = NULL;
        tgl_status st;
        if (c->run) {
            /* again on the inputs of the frame's last call: contender 0's,
             * the only ones ever given to it */
            st = tgl_function_run(ctx, c->p->scan, 1);
            if (!st)
                st = tgl_function_output(ctx, c->p->scan, 0, &o);
        } else if (c->frame) {
            st = tgl_function_call_frame(ctx, c->p->scan, c->frame, si, &o);
        } else {
            st = tgl_function_call(ctx, c->p->scan, si, &o, 0);
        }
        if (st == TGL_EBUSY) {
            if (!strstr(tgl_ctx_error(ctx), "in use by another thread")) {
                snprintf(c->err, sizeof c->err, "contender %d: EBUSY says '%s'", c->id,
                         tgl_ctx_error(ctx));
                break;
            }
            if (o) {
                snprintf(c->err, sizeof c->err, "contender %d: EBUSY wrote the output", c->id);
                break;
            }
            c->busy_calls++;
            atomic_fetch_add(c->busy_seen, 1);
            /* retried after a moment: the refused call must have left the
             * frame as it was for the other thread's run and for ours */
            nanosleep(&(struct timespec){0, 100000}, NULL);
            continue;
        }
        if (st) {
            snprintf(c->err, sizeof c->err, "contender %d: status %d: %s", c->id, (int)st,
                     tgl_ctx_error(ctx));
            break;
        }
        char msg[400];
        if (close_to(o, want, SHARED_T * N_SCAN, "shared-frame scan", msg, sizeof msg)) {
            snprintf(c->err, sizeof c->err, "contender %d call %d: %s", c->id, c->ok_calls, msg);
            tgl_array_release(o);
            break;
        }
        tgl_array_release(o);
        c->ok_calls++;
    }
    free(want);
out:
    tgl_array_release(xs);
    tgl_array_release(h0);
    tgl_ctx_free(ctx);
    return NULL;
}

static void one_frame_shared(void **state, bool default_frame)
{
    tgl_ctx *ctx = CTX;
    programs p;
    build(ctx, &p);
    tgl_frame *fr = NULL;
    if (!default_frame)
        assert_ok(ctx, tgl_function_frame_new(ctx, p.scan, &fr));
    if (default_frame) {
        /* the default frame's inputs for tgl_function_run: contender 0's */
        tgl_array *xs = f64(ctx, 2, (int64_t[]){SHARED_T, N_SCAN}, NULL);
        tgl_array *h0 = f64(ctx, 2, (int64_t[]){1, N_SCAN}, NULL), *o = NULL;
        fill(xs, 50, 0);
        fill(h0, 60, 0);
        tgl_array *si[2] = {xs, h0};
        assert_ok(ctx, tgl_function_call(ctx, p.scan, si, &o, 0));
        tgl_array_release(o);
        tgl_array_release(xs);
        tgl_array_release(h0);
    }
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    atomic_int busy_seen;
    atomic_init(&busy_seen, 0);
    contender c[2];
    pthread_t th[2];
    memset(c, 0, sizeof c);
    for (int i = 0; i < 2; i++) {
        c[i].p = &p;
        c[i].frame = fr;
        c[i].start = &start;
        c[i].busy_seen = &busy_seen;
        c[i].id = i;
        /* on the default frame the second thread runs (tgl_function_run,
         * tgl_function_output) what the first calls */
        c[i].run = default_frame && i == 1;
        c[i].seed = c[i].run ? 0 : i;
        assert_int_equal(pthread_create(&th[i], NULL, contend, &c[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < 2; i++)
        if (c[i].err[0])
            fail_msg("%s", c[i].err);
    /* Both saw successes; at least one call met the frame taken. */
    assert_true(c[0].ok_calls >= 1 && c[1].ok_calls >= 1);
    if (c[0].busy_calls + c[1].busy_calls == 0)
        fail_msg("no call ever found the frame busy in %d s", SHARED_SECONDS);
    print_message("shared %s frame: %d + %d calls right, %d + %d refused as busy\n",
                  default_frame ? "default" : "extra", c[0].ok_calls, c[1].ok_calls,
                  c[0].busy_calls, c[1].busy_calls);
    /* The frame still works on this thread, and gives the right answer. */
    tgl_array *xs = f64(ctx, 2, (int64_t[]){T_SCAN, N_SCAN}, NULL);
    tgl_array *h0 = f64(ctx, 2, (int64_t[]){1, N_SCAN}, NULL);
    fill(xs, 7, 7);
    fill(h0, 8, 8);
    tgl_array *si[2] = {xs, h0}, *o = NULL;
    if (fr)
        assert_ok(ctx, tgl_function_call_frame(ctx, p.scan, fr, si, &o));
    else
        assert_ok(ctx, tgl_function_call(ctx, p.scan, si, &o, 0));
    double want[T_SCAN * N_SCAN];
    char msg[400];
    want_scan(xs, h0, want);
    if (close_to(o, want, T_SCAN * N_SCAN, "after sharing", msg, sizeof msg))
        fail_msg("%s", msg);
    tgl_array_release(o);
    tgl_array_release(xs);
    tgl_array_release(h0);
    tgl_frame_free(fr);
    free_programs(&p);
}

static void a_frame_shared_by_two_threads_refuses_the_second_call(void **state)
{
    one_frame_shared(state, false);
}

static void the_default_frame_shared_by_two_threads_refuses_the_second_call(void **state)
{
    one_frame_shared(state, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(threads_with_their_own_frames_run_at_once_and_agree,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(a_frame_shared_by_two_threads_refuses_the_second_call,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            the_default_frame_shared_by_two_threads_refuses_the_second_call, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
