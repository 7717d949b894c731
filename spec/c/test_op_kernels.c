/*
 * test_op_kernels.c — op kernels per backend (engine/backend.h): the CPU
 * backend's table has a kernel for exactly the ops that need one, of the
 * right form (run for single-output ops, run_n for multi-output ones);
 * the compiler binds each instruction's kernel on the program's backend;
 * and a backend without a kernel for an op (a fake table: the CPU's with
 * class_xent taken out) gives the compile-time error naming the op and
 * the device, as does one that does not run the node's dtypes.
 *
 * It reaches internal symbols (tgl_backend_op_kernel, the program's
 * instructions): it links the objects.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <string.h>

#include "engine/program.h"
#include "tgl_fixture.h"

#define CTX (((fixture *)*state)->ctx)

static const tgl_backend *cpu(void)
{
    const tgl_backend *be = tgl_backend_get(TGL_DEVICE_CPU);
    assert_non_null(be);
    return be;
}

/* ---- the CPU table covers the catalog ---------------------------------- */

static void cpu_table_covers_catalog(void **state)
{
    (void)state;
    int with = 0;
    for (int op = 0; op < TGL_NOPS; op++) {
        tgl_node n;
        memset(&n, 0, sizeof n);
        n.kind = TGL_NODE_APPLY;
        n.op = (int16_t)op;
        const tgl_opimpl *impl = tgl_op_impl(op);
        const tgl_op_kernel *k = cpu()->op_kernel(op);
        if (tgl_op_needs_kernel(&n) != (k != NULL))
            fail_msg("op '%s': %s", tgl_op_name(op),
                     k ? "has a CPU kernel but needs none" : "needs a kernel, the CPU has none");
        if (!k)
            continue;
        with++;
        if (impl->shape_k ? !(k->run_n && !k->run) : !(k->run && !k->run_n))
            fail_msg("op '%s': its kernel's form does not match its outputs", tgl_op_name(op));
    }
    /* Every op but the views, output, scan and fused has one. */
    assert_true(with >= TGL_NOPS - 8);
    assert_null(cpu()->op_kernel(TGL_OP_DIMSHUFFLE));
    assert_null(cpu()->op_kernel(TGL_OP_SCAN));
    assert_null(cpu()->op_kernel(TGL_OP_FUSED));
    assert_null(cpu()->op_kernel(-1));
    assert_null(cpu()->op_kernel(TGL_NOPS));
}

/* ---- a class_xent node ------------------------------------------------- */

static tgl_node *input(tgl_ctx *ctx, int dtype, int ndim, const char *name)
{
    tgl_node *n = NULL;
    tgl_type t = {dtype, ndim, 0};
    assert_ok(ctx, tgl_node_input(ctx, t, name, &n));
    return n;
}

static tgl_node *class_xent(tgl_ctx *ctx, tgl_node **in)
{
    in[0] = input(ctx, TGL_FLOAT32, 2, "h");
    in[1] = input(ctx, TGL_FLOAT32, 2, "Wc");
    in[2] = input(ctx, TGL_FLOAT32, 2, "Ws");
    in[3] = input(ctx, TGL_INT64, 1, "cls");
    in[4] = input(ctx, TGL_INT64, 1, "tgt");
    in[5] = input(ctx, TGL_INT64, 1, "owner");
    tgl_node *n = NULL;
    assert_ok(ctx, tgl_apply(ctx, tgl_op_lookup("class_xent"), 6, in, NULL, "model.lua:12", &n));
    return n;
}

/* ---- fake backends ----------------------------------------------------- */

/* The CPU's kernels but class_xent's. */
static const tgl_op_kernel *no_class_xent(int op)
{
    return op == TGL_OP_CLASS_XENT ? NULL : tgl_backend_get(TGL_DEVICE_CPU)->op_kernel(op);
}

/* Runs nothing in float32. */
static bool no_float32(const tgl_node *n)
{
    return n->type.dtype != TGL_FLOAT32;
}

static tgl_backend fake(const tgl_op_kernel *(*op_kernel)(int), bool (*supports)(const tgl_node *))
{
    tgl_backend be = *tgl_backend_get(TGL_DEVICE_CPU);
    be.name = "fake";
    be.op_kernel = op_kernel;
    be.supports_op = supports;
    return be;
}

static void missing_kernel_is_an_error(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *in[6];
    tgl_node *n = class_xent(ctx, in);
    tgl_backend be = fake(no_class_xent, NULL);
    const tgl_op_kernel *k = (const tgl_op_kernel *)1;
    assert_int_equal(tgl_backend_op_kernel(ctx, &be, n, &k), TGL_EINVAL);
    assert_null(k);
    assert_string_equal(tgl_ctx_error(ctx),
                        "op 'class_xent' has no kernel on device 'fake'; built at model.lua:12");
    /* The other ops keep the CPU's kernels. */
    tgl_node *s = NULL;
    tgl_params p = {0};
    p.n = 1;
    assert_ok(ctx, tgl_apply(ctx, tgl_op_lookup("softmax"), 1, &in[0], &p, NULL, &s));
    assert_ok(ctx, tgl_backend_op_kernel(ctx, &be, s, &k));
    assert_ptr_equal(k, cpu()->op_kernel(TGL_OP_SOFTMAX));
    /* No op_kernel entry at all: every op is missing. */
    tgl_backend none = fake(NULL, NULL);
    assert_int_equal(tgl_backend_op_kernel(ctx, &none, s, &k), TGL_EINVAL);
    assert_string_equal(tgl_ctx_error(ctx), "op 'softmax' has no kernel on device 'fake'");
}

static void unsupported_dtypes_are_an_error(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *in[6];
    tgl_node *n = class_xent(ctx, in);
    tgl_backend be = fake(no_class_xent, no_float32);
    tgl_node *s = NULL;
    tgl_params p = {0};
    p.n = 1;
    assert_ok(ctx, tgl_apply(ctx, tgl_op_lookup("softmax"), 1, &in[0], &p, "model.lua:14", &s));
    const tgl_op_kernel *k = NULL;
    assert_int_equal(tgl_backend_op_kernel(ctx, &be, s, &k), TGL_EINVAL);
    assert_null(k);
    assert_string_equal(tgl_ctx_error(ctx),
                        "op 'softmax' has no kernel on device 'fake' for the dtypes of its node "
                        "(output float32 (?,?)); built at model.lua:14");
    /* The missing kernel is reported first. */
    assert_int_equal(tgl_backend_op_kernel(ctx, &be, n, &k), TGL_EINVAL);
    assert_non_null(strstr(tgl_ctx_error(ctx), "op 'class_xent' has no kernel on device 'fake'"));
}

/* ---- the compiler binds kernels once ----------------------------------- */

static void compile_binds_kernels(void **state)
{
    tgl_ctx *ctx = CTX;
    tgl_node *in[6];
    tgl_node *n = class_xent(ctx, in);
    tgl_function *fn = NULL;
    assert_ok(ctx, tgl_function_new(ctx, 6, in, 1, &n, 0, NULL, NULL, NULL, &fn));
    const tgl_program *prog = fn->prog;
    assert_int_equal(prog->device, TGL_DEVICE_CPU);
    assert_ptr_equal(prog->backend, cpu());
    int bound = 0, cx = 0;
    for (int32_t pc = 0; pc < prog->ncode; pc++) {
        const tgl_instr *ins = &prog->code[pc];
        if (ins->kind != TGL_I_OP)
            continue;
        if (tgl_op_needs_kernel(ins->node)) {
            assert_ptr_equal(ins->kern, cpu()->op_kernel(ins->node->op));
            bound++;
        } else {
            assert_null(ins->kern);
        }
        cx += ins->node->op == TGL_OP_CLASS_XENT;
    }
    assert_int_equal(cx, 1);
    assert_true(bound >= 1);
    tgl_function_free(fn);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cpu_table_covers_catalog),
        cmocka_unit_test_setup_teardown(missing_kernel_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(unsupported_dtypes_are_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(compile_binds_kernels, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
