/*
 * fuzz_graph.c — libFuzzer target "graph": the graph builder, the
 * differentiators, the compiler and the CVM through the public C API
 * (include/tgl.h), driven by a byte string decoded as a program of API
 * calls.
 *
 * Encoding (every read past the end gives 0, so any input is a program):
 *   byte 0      mode (FAST_RUN, FAST_COMPILE, DEBUG) = b % 3
 *   byte 1      linker (CVM, CVM_NOGC, VM) = b % 3
 *   byte 2      the number of steps, b % (MAX_STEPS + 1)
 *   then the steps, each an opcode byte b, by b % 9:
 *     0 input     dtype, ndim (0-4), bcast bits; the shape it is called
 *                 with: a byte (0-3) per axis that is not broadcastable
 *     1 constant  dtype, ndim, a shape byte (0-3) per axis, a value
 *                 (VALUES[b % 12])
 *     2 shared    bcast bits, then as constant (no shape byte for a
 *                 broadcastable axis: its size is 1)
 *     3 apply     op (two bytes, modulo the catalog's size), nin (0-4),
 *                 each operand an existing node; p.n (0-8), each p.i a
 *                 signed byte, p.flags (0-3), p.f from VALUES
 *     4 grad      cost node, up to 3 wrt nodes, the disconnected rule
 *     5 rop       f node, wrt node, direction node
 *     6 output    node, k (a multi-output node's k-th value)
 *     7 update    a shared variable and its new value, for the compile
 *     8 eval      as apply, but eagerly (tgl_eval) on the values of
 *                 constant operands (others end the operand list); the
 *                 result becomes a constant node
 *   and finally the outputs: up to 3 nodes; whether to leave the first
 *   input out of the input list (which must then be refused if needed).
 * The function is compiled and, when that succeeds, called on arrays of
 * the inputs' shapes filled with one value each, then run once more.
 *
 * Every call must succeed or fail with an error status and a message;
 * a crash, a sanitizer report, a leak (LSan, after the context is freed)
 * or TGL_EINTERNAL (in DEBUG mode also a generated kernel that differs
 * from the reference kernel) is a finding.  The seed corpus (make_corpus.py) holds programs
 * that build a few real graphs.
 */
#include "fuzz_common.h"

#include "tgl.h"

#include <math.h>
#include <string.h>

#define MAX_STEPS 24
#define MAX_NODES 40
#define MAX_UPD 4
#define MAX_RANK 4 /* conv2d and the pools take 4-d inputs */

static const double VALUES[12] = {0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -0.0, 1e30, -1e-30,
                                  NAN, INFINITY, -7.0};

typedef struct reader {
    const uint8_t *p;
    size_t n, at;
} reader;

static unsigned next(reader *r)
{
    return r->at < r->n ? r->p[r->at++] : 0;
}

typedef struct prog {
    tgl_ctx *ctx;
    tgl_node *node[MAX_NODES];
    int nnodes;
    tgl_node *input[MAX_NODES];    /* the symbolic inputs, in order     */
    int64_t ishape[MAX_NODES][MAX_RANK]; /* the shape each is called with */
    int nin;
    tgl_node *upd_var[MAX_UPD], *upd_expr[MAX_UPD];
    int nupd;
} prog;

/* A failed call must say why.  With TGL_FUZZ_GRAPH_TRACE set, every call
 * and its outcome is printed (to see what a seed program builds). */
static void check(prog *g, tgl_status st, const char *what)
{
    static int trace = -1;
    if (trace < 0)
        trace = getenv("TGL_FUZZ_GRAPH_TRACE") != NULL;
    if (trace)
        fprintf(stderr, "graph: node %d: %s: %s\n", g->nnodes, what,
                st ? tgl_ctx_error(g->ctx) : "ok");
    /* TGL_EINTERNAL is tgl's own bug (an inferred type the kernel did
     * not produce, DEBUG mode's generated kernel differing from the
     * reference, ...): a finding, as a crash is. */
    if (st == TGL_EINTERNAL) {
        fprintf(stderr, "graph: %s: internal error: %s\n", what, tgl_ctx_error(g->ctx));
        abort();
    }
    if (st != TGL_OK && !tgl_ctx_error(g->ctx)[0]) {
        fprintf(stderr, "graph: %s failed (status %d) without a message\n", what, st);
        abort();
    }
    tgl_ctx_clear_error(g->ctx);
}

static void add(prog *g, tgl_node *n)
{
    if (n && g->nnodes < MAX_NODES)
        g->node[g->nnodes++] = n;
}

static tgl_node *pick(prog *g, reader *r)
{
    unsigned b = next(r);
    return g->nnodes ? g->node[b % (unsigned)g->nnodes] : NULL;
}

/* A small array: dtype, ndim and sizes from the program. */
static tgl_status small_array(prog *g, reader *r, uint32_t bcast, tgl_array **out)
{
    int dtype = (int)(next(r) % 6), ndim = (int)(next(r) % (MAX_RANK + 1));
    int64_t shape[MAX_RANK];
    for (int d = 0; d < ndim; d++)
        shape[d] = bcast >> d & 1 ? 1 : (int64_t)(next(r) % 4);
    return tgl_array_full(g->ctx, dtype, ndim, shape, VALUES[next(r) % 12], out);
}

static void step(prog *g, reader *r)
{
    tgl_node *n = NULL;
    tgl_status st;
    unsigned opcode = next(r) % 9;
    switch (opcode) {
    case 0: { /* input */
        tgl_type t = {(int32_t)(next(r) % 6), (int32_t)(next(r) % (MAX_RANK + 1)), 0};
        t.bcast = next(r) & ((1u << t.ndim) - 1);
        check(g, st = tgl_node_input(g->ctx, t, "x", &n), "tgl_node_input");
        if (!st && g->nin < MAX_NODES) {
            for (int d = 0; d < t.ndim; d++)
                g->ishape[g->nin][d] = t.bcast >> d & 1 ? 1 : (int64_t)(next(r) % 4);
            g->input[g->nin++] = n;
            add(g, n);
        }
        break;
    }
    case 1:
    case 2: { /* constant, shared */
        int shared = opcode == 2;
        uint32_t bcast = shared ? next(r) & 15 : 0;
        tgl_array *a = NULL;
        check(g, st = small_array(g, r, bcast, &a), "tgl_array_full");
        if (st)
            break;
        if (shared)
            check(g, st = tgl_node_shared(g->ctx, a, bcast, "w", &n), "tgl_node_shared");
        else
            check(g, st = tgl_node_constant(g->ctx, a, &n), "tgl_node_constant");
        tgl_array_release(a);
        if (!st)
            add(g, n);
        break;
    }
    case 3:   /* apply */
    case 8: { /* eval */
        int eager = opcode == 8;
        unsigned hi = next(r), lo = next(r);
        int op = (int)((hi << 8 | lo) % (unsigned)tgl_op_count());
        int nin = (int)(next(r) % 5);
        tgl_node *in[4];
        tgl_array *val[4];
        for (int k = 0; k < nin; k++)
            in[k] = pick(g, r);
        for (int k = 0; k < nin; k++)
            if (!in[k] || (eager && !(val[k] = tgl_node_value(in[k]))))
                nin = k;
        tgl_params p;
        memset(&p, 0, sizeof p);
        p.n = (int32_t)(next(r) % 9);
        for (int k = 0; k < p.n; k++)
            p.i[k] = (int8_t)next(r);
        p.flags = (int32_t)(next(r) % 4);
        p.f[0] = VALUES[next(r) % 12];
        p.f[1] = VALUES[next(r) % 12];
        if (eager) {
            tgl_array *res = NULL;
            check(g, st = tgl_eval(g->ctx, op, nin, val, &p, &res), tgl_op_name(op));
            if (st)
                break;
            check(g, st = tgl_node_constant(g->ctx, res, &n), "tgl_node_constant");
            tgl_array_release(res);
        } else {
            check(g, st = tgl_apply(g->ctx, op, nin, in, &p, "fuzz", &n), tgl_op_name(op));
        }
        if (!st)
            add(g, n);
        break;
    }
    case 4: { /* grad */
        tgl_node *cost = pick(g, r), *wrt[3], *grads[3];
        int nwrt = 1 + (int)(next(r) % 3);
        for (int k = 0; k < nwrt; k++)
            wrt[k] = pick(g, r);
        int disc = (int)(next(r) % 2);
        if (!cost)
            break;
        check(g, st = tgl_grad(g->ctx, cost, nwrt, wrt, 0, NULL, NULL, disc, grads), "tgl_grad");
        for (int k = 0; !st && k < nwrt; k++)
            add(g, grads[k]);
        break;
    }
    case 5: { /* rop */
        tgl_node *f = pick(g, r), *wrt = pick(g, r), *v = pick(g, r), *res;
        if (!f)
            break;
        check(g, st = tgl_rop(g->ctx, 1, &f, 1, &wrt, &v, (tgl_disconnected)(next(r) % 2), &res),
              "tgl_rop");
        if (!st)
            add(g, res);
        break;
    }
    case 6: { /* output k of a node */
        tgl_node *m = pick(g, r);
        int k = (int)(next(r) % 4);
        if (!m)
            break;
        check(g, st = tgl_node_output(g->ctx, m, k, &n), "tgl_node_output");
        if (!st)
            add(g, n);
        break;
    }
    case 7: { /* update */
        tgl_node *var = pick(g, r), *expr = pick(g, r);
        if (var && expr && g->nupd < MAX_UPD) {
            g->upd_var[g->nupd] = var;
            g->upd_expr[g->nupd++] = expr;
        }
        break;
    }
    }
}

/* Compiles the outputs and calls the function twice. */
static void compile_and_call(prog *g, reader *r, int mode, int linker)
{
    tgl_node *outs[3];
    int nout = (int)(next(r) % 4), skip_first = next(r) % 4 == 0;
    for (int k = 0; k < nout; k++)
        outs[k] = pick(g, r);
    if (!g->nnodes)
        nout = 0;
    tgl_node *const *ins = g->input + (skip_first && g->nin ? 1 : 0);
    int nin = g->nin - (skip_first && g->nin ? 1 : 0);
    tgl_compile_options o = {linker, 0, "fuzz", mode};
    tgl_function *fn = NULL;
    tgl_status st = tgl_function_new(g->ctx, nin, ins, nout, outs, g->nupd, g->upd_var,
                                     g->upd_expr, &o, &fn);
    check(g, st, "tgl_function_new");
    if (st)
        return;
    tgl_array *args[MAX_NODES] = {NULL}, *res[3] = {NULL};
    int ok = 1;
    for (int k = 0; k < nin && ok; k++) {
        int idx = (int)(ins - g->input) + k;
        tgl_type t = tgl_node_type(ins[k]);
        check(g, st = tgl_array_full(g->ctx, t.dtype, t.ndim, g->ishape[idx],
                                     VALUES[next(r) % 12], &args[k]), "tgl_array_full");
        ok = !st;
    }
    for (int call = 0; ok && call < 2; call++) {
        check(g, st = tgl_function_call(g->ctx, fn, args, res, 0), "tgl_function_call");
        for (int k = 0; !st && k < nout; k++) {
            tgl_array_release(res[k]);
            res[k] = NULL;
        }
        ok = !st;
    }
    for (int k = 0; k < nin; k++)
        tgl_array_release(args[k]);
    tgl_function_free(fn);
}

/* Once, before the first input: the CPU backend's first use loads this
 * machine's calibration record, measuring it (seconds, more under the
 * sanitizers) when the kernel cache has none; that must not count
 * against the first input's time limit. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tgl_ctx *ctx = tgl_ctx_new();
    char *text = NULL;
    if (!ctx || tgl_tune_info(ctx, &text))
        fuzz_die("the calibration record cannot be loaded");
    tgl_free(text);
    tgl_ctx_free(ctx);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size, 0};
    prog g;
    memset(&g, 0, sizeof g);
    if (!(g.ctx = tgl_ctx_new()))
        fuzz_die("tgl_ctx_new failed");
    /* In-memory compiles (libtcc): no compiler process per input, one
     * thread, and no wait for background compiles at exit. */
    if (tgl_config_set(g.ctx, "compile", "tcc") || tgl_config_set(g.ctx, "threads", "1"))
        fuzz_die(tgl_ctx_error(g.ctx));
    int mode = (int)(next(&r) % 3), linker = (int)(next(&r) % 3);
    int nsteps = (int)(next(&r) % (MAX_STEPS + 1));
    for (int s = 0; s < nsteps; s++)
        step(&g, &r);
    compile_and_call(&g, &r, mode, linker);
    tgl_ctx_free(g.ctx);
    return 0;
}
