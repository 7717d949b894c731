/*
 * backend.c — the engine's side of the backend seam (backend.h): device
 * names, the options a backend may read (filled from the
 * context), error messages copied from backends into the context, and the
 * wrappers through which the engine compiles and launches the kernels of
 * fused programs and serves the public kernel-cache calls.
 *
 * A fused program keeps one kernel, made by the backend of the device it
 * was prepared for; the kernel's head names that backend, so asking for
 * its tier, waiting for it or releasing it needs no device.
 */
#include "engine/backend.h"
#include "engine/fused_prog.h"
#include "engine/ops/ops.h"
#include "engine/tune.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const device_names[TGL_NDEVICES] = {
    [TGL_DEVICE_CPU] = "cpu",
    [TGL_DEVICE_CUDA] = "cuda",
    [TGL_DEVICE_SIM] = "sim",
};

const char *tgl_device_name(int device)
{
    return device >= 0 && device < TGL_NDEVICES ? device_names[device] : NULL;
}

tgl_status tgl_errbuf_set(tgl_errbuf *e, tgl_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return st;
}

tgl_status tgl_errbuf_take(tgl_ctx *ctx, tgl_status st, const tgl_errbuf *e)
{
    return tgl_ctx_set_error(ctx, st, "%s", e->msg);
}

tgl_status tgl_backend_check(tgl_ctx *ctx, const char *fn, const tgl_array *a,
                             const tgl_backend **be)
{
    *be = tgl_backend_get(a->device);
    if (*be)
        return TGL_OK;
    const char *name = tgl_device_name(a->device);
    if (name)
        return tgl_ctx_set_error(ctx, TGL_EINVAL,
                                 "%s: the array is on device %s, which this build of tgl does "
                                 "not support", fn, name);
    return tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: the array has an invalid device %d", fn,
                             (int)a->device);
}

bool tgl_op_needs_kernel(const tgl_node *n)
{
    const tgl_opimpl *impl = tgl_op_impl(n->op);
    return (impl->shape || impl->shape_k) && !impl->view && !impl->prepare_inner &&
           n->op != TGL_OP_FUSED;
}

void tgl_backend_tune(tgl_ctx *ctx, const tgl_backend *be)
{
    if (be && be->tune && !tgl_tune_ready())
        be->tune(&ctx->backend_opts, false);
}

tgl_status tgl_backend_op_kernel(tgl_ctx *ctx, const tgl_backend *be, const tgl_node *n,
                                 const tgl_op_kernel **k)
{
    tgl_backend_tune(ctx, be);
    *k = be && be->op_kernel ? be->op_kernel(n->op) : NULL;
    if (*k && (!be->supports_op || be->supports_op(n)))
        return TGL_OK;
    const char *dev = be ? be->name : "(none)";
    int op = n->op; /* the op that runs, not the one the user wrote */
    char ty[96];
    if (*k) {
        *k = NULL;
        return tgl_ctx_set_error(ctx, TGL_EINVAL,
                                 "op '%s' has no kernel on device '%s' for the dtypes of "
                                 "its node (output %s)%s%s",
                                 tgl_op_name(op), dev, tgl_type_str(n->type, ty, sizeof ty),
                                 n->source ? "; built at " : "", n->source ? n->source : "");
    }
    return tgl_ctx_set_error(ctx, TGL_EINVAL, "op '%s' has no kernel on device '%s'%s%s",
                             tgl_op_name(op), dev, n->source ? "; built at " : "",
                             n->source ? n->source : "");
}

void tgl_backend_opts_sync(tgl_ctx *ctx)
{
    tgl_backend_opts *o = &ctx->backend_opts;
    o->cc = ctx->config.cc;
    o->cflags = ctx->config.cflags;
    o->cache_dir = ctx->config.cache_dir;
    o->compile = ctx->config.compile;
    o->cache_max_bytes = ctx->config.cache_max_bytes;
    o->exit_wait = ctx->config.exit_wait;
    o->threads = ctx->config.threads;
    o->pool = &ctx->pool;
    o->interrupt = ctx->interrupt;
    o->allow_tf32 = ctx->config.allow_tf32 != 0;
}

tgl_status tgl_array_require_host(tgl_ctx *ctx, const char *fn, const tgl_array *a)
{
    if (a->device == TGL_DEVICE_CPU)
        return TGL_OK;
    const char *name = tgl_device_name(a->device);
    return tgl_ctx_set_error(ctx, TGL_EINVAL, "%s: needs a cpu array, got one on device %s", fn,
                             name ? name : "(invalid)");
}

tgl_status tgl_array_read_elem(tgl_ctx *ctx, const tgl_array *a, int64_t off, void *elem)
{
    size_t es = tgl_dtype_size(a->dtype_id);
    const char *p = (const char *)a->data + off * (int64_t)es;
    if (a->device == TGL_DEVICE_CPU) {
        memcpy(elem, p, es);
        return TGL_OK;
    }
    const tgl_backend *be;
    tgl_status st = tgl_backend_check(ctx, "tgl_array_read_elem", a, &be);
    if (st)
        return st;
    tgl_errbuf e;
    if ((st = be->copy_to_host(elem, p, es, &e)))
        return tgl_errbuf_take(ctx, st, &e);
    return TGL_OK;
}

tgl_status tgl_array_load(tgl_ctx *ctx, const tgl_array *a, int64_t off, double *out)
{
    if (a->device == TGL_DEVICE_CPU) {
        *out = tgl_load_as_double(a->dtype_id, a->data, off);
        return TGL_OK;
    }
    unsigned char elem[8];
    tgl_status st = tgl_array_read_elem(ctx, a, off, elem);
    if (st)
        return st;
    *out = tgl_load_as_double(a->dtype_id, elem, 0);
    return TGL_OK;
}

tgl_status tgl_array_scalar(tgl_ctx *ctx, const tgl_array *a, double *out)
{
    if (a->device == TGL_DEVICE_CPU) {
        *out = tgl_load_as_double(a->dtype_id, a->data, 0);
        return TGL_OK;
    }
    const tgl_backend *be;
    tgl_status st = tgl_backend_check(ctx, "tgl_array_scalar", a, &be);
    if (st)
        return st;
    unsigned char elem[8];
    tgl_errbuf e;
    if ((st = be->copy_to_host(elem, a->data, tgl_dtype_size(a->dtype_id), &e)))
        return tgl_errbuf_take(ctx, st, &e);
    *out = tgl_load_as_double(a->dtype_id, elem, 0);
    return TGL_OK;
}

/* ---- kernels of fused programs ---------------------------------------- */

/* Kernels made by tgl_backend_prepare and not released yet, in every
 * context (tgl_kernels_live). */
static int64_t live_kernels;

int64_t tgl_kernels_live(void)
{
    return __atomic_load_n(&live_kernels, __ATOMIC_RELAXED);
}

tgl_status tgl_backend_prepare(tgl_ctx *ctx, int device, tgl_fused_prog *prog)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(prog, TGL_EINVAL, "tgl_backend_prepare: NULL program");
    const tgl_backend *be = tgl_backend_get(device);
    TGL_CHECK(be, TGL_EINVAL, "tgl_backend_prepare: no backend for device %d", device);
    tgl_backend_tune(ctx, be);
    tgl_errbuf e;
    if (prog->kernel[device]) {
        /* One kernel per program and device, however many functions use it;
         * one made under another compile mode (libtcc's under 'tcc') gets
         * the code this function's mode promises (doc/compile.md). */
        if (be->upgrade) {
            tgl_status st = be->upgrade(&ctx->backend_opts, prog, prog->kernel[device], &e);
            if (st)
                return tgl_errbuf_take(ctx, st, &e);
        }
        prog->kernel_users[device]++;
        return TGL_OK;
    }
    tgl_kernel_ref *k = NULL;
    tgl_status st = be->prepare(&ctx->backend_opts, prog, &k, &e);
    if (st)
        return tgl_errbuf_take(ctx, st, &e);
    prog->kernel[device] = k;
    prog->kernel_users[device] = 1;
    __atomic_add_fetch(&live_kernels, 1, __ATOMIC_RELAXED);
    return TGL_OK;
}

/* Frees prog's kernel on device, if any. */
static void release_on(tgl_fused_prog *prog, int device)
{
    tgl_kernel_ref *k = prog->kernel[device];
    if (k) {
        prog->kernel[device] = NULL;
        prog->kernel_users[device] = 0;
        k->backend->release(k);
        __atomic_sub_fetch(&live_kernels, 1, __ATOMIC_RELAXED);
    }
}

void tgl_backend_unuse(tgl_fused_prog *prog, int device)
{
    if (prog && prog->kernel_users[device] > 0 && --prog->kernel_users[device] == 0)
        release_on(prog, device);
}

int tgl_backend_tier(const tgl_fused_prog *prog, int device)
{
    const tgl_kernel_ref *k = prog ? prog->kernel[device] : NULL;
    return k ? __atomic_load_n(&k->tier, __ATOMIC_ACQUIRE) : 0;
}

void tgl_backend_wait(const tgl_fused_prog *prog, int device)
{
    tgl_kernel_ref *k = prog ? prog->kernel[device] : NULL;
    if (k)
        k->backend->wait(k);
}

void tgl_backend_release(tgl_fused_prog *prog)
{
    for (int d = 0; prog && d < TGL_NDEVICES; d++)
        release_on(prog, d);
}

tgl_status tgl_backend_launch(tgl_ctx *ctx, const tgl_fused_prog *prog, int device,
                              tgl_array *const *in, tgl_array *const *out, void **cache)
{
    /* On every run of a fused op: the backend checks its arguments. */
    tgl_kernel_ref *k = prog->kernel[device];
    TGL_CHECK(k, TGL_EINTERNAL, "fused program %d has no kernel to launch on %s", prog->id,
              tgl_device_name(device));
    tgl_errbuf e;
    const tgl_backend_opts *o = &ctx->backend_opts;
    tgl_backend_opts quiet; /* held interrupts (tgl_ctx_hold_interrupts) */
    if (o->interrupt && __atomic_load_n(&ctx->interrupt_hold, __ATOMIC_RELAXED)) {
        quiet = *o;
        quiet.interrupt = NULL;
        o = &quiet;
    }
    tgl_status st = k->backend->launch(o, prog, k, in, out, cache, &e);
    return st ? tgl_errbuf_take(ctx, st, &e) : TGL_OK;
}

void tgl_backend_launch_cache_free(const tgl_fused_prog *prog, int device, void *cache)
{
    /* A cache exists only where the program's kernel made it. */
    tgl_kernel_ref *k = prog ? prog->kernel[device] : NULL;
    if (cache && k && k->backend->launch_cache_free)
        k->backend->launch_cache_free(cache);
}

/* ---- the public kernel-cache calls ------------------------------------ */

void tgl_compile_wait_all(void)
{
    for (int d = 0; d < TGL_NDEVICES; d++)
        if (tgl_backends[d] && tgl_backends[d]->wait_compiles)
            tgl_backends[d]->wait_compiles();
}

void tgl_cache_flush(void)
{
    tgl_compile_wait_all();
}

tgl_status tgl_cache_clear(tgl_ctx *ctx)
{
    TGL_CHECK_CTX(ctx);
    for (int d = 0; d < TGL_NDEVICES; d++) {
        const tgl_backend *be = tgl_backends[d];
        tgl_errbuf e;
        tgl_status st = be && be->cache_clear ? be->cache_clear(&ctx->backend_opts, &e) : TGL_OK;
        if (st)
            return tgl_errbuf_take(ctx, st, &e);
    }
    return TGL_OK;
}

tgl_status tgl_cache_info(tgl_ctx *ctx, char **text)
{
    TGL_CHECK_CTX(ctx);
    TGL_CHECK(text, TGL_EINVAL, "tgl_cache_info: NULL argument");
    /* Every backend with a kernel cache, in device order (the CPU's alone
     * today: sim's kernels are the CPU backend's). */
    char *all = NULL;
    size_t len = 0;
    for (int d = 0; d < TGL_NDEVICES; d++) {
        const tgl_backend *be = tgl_backends[d];
        if (!be || !be->cache_info)
            continue;
        char *t = NULL;
        tgl_errbuf e;
        tgl_status st = be->cache_info(&ctx->backend_opts, &t, &e);
        if (st) {
            free(all);
            return tgl_errbuf_take(ctx, st, &e);
        }
        size_t n = strlen(t);
        char *grown = realloc(all, len + n + 1);
        if (!grown) {
            free(t);
            free(all);
            return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_cache_info: out of memory");
        }
        all = grown;
        memcpy(all + len, t, n + 1);
        len += n;
        free(t);
    }
    if (!all && !(all = calloc(1, 1)))
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "tgl_cache_info: out of memory");
    *text = all;
    return TGL_OK;
}
