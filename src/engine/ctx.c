/*
 * ctx.c — the engine context: the error message of the last failed call,
 * the counter-based random generator's state, and the interrupt flag.
 * One context per user (the Lua layer makes one per Lua state); the engine
 * keeps no other mutable global state except the live-memory counter.
 */
#include "engine/backend.h"
#include "engine/fused_prog.h"
#include "engine/graph.h"
#include "engine/pool.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tgl_ctx *tgl_ctx_new(void)
{
    tgl_ctx *ctx = calloc(1, sizeof *ctx);
    if (ctx) {
        ctx->refcount = 1;
        tgl_config_defaults(ctx);
    }
    return ctx;
}

void tgl_ctx_retain(tgl_ctx *ctx)
{
    __atomic_add_fetch(&ctx->refcount, 1, __ATOMIC_RELAXED);
}

void tgl_ctx_release(tgl_ctx *ctx)
{
    if (ctx && __atomic_sub_fetch(&ctx->refcount, 1, __ATOMIC_ACQ_REL) == 0) {
        tgl_pool_free(ctx);
        tgl_graph_free(&ctx->graph);
        free(ctx);
    }
}

void tgl_ctx_free(tgl_ctx *ctx)
{
    tgl_ctx_release(ctx);
}

const char *tgl_ctx_error(const tgl_ctx *ctx)
{
    return ctx ? ctx->errmsg : "tgl: NULL context";
}

tgl_status tgl_ctx_set_error(tgl_ctx *ctx, tgl_status st, const char *fmt, ...)
{
    if (!ctx)
        return st;
    ctx->nerrors++;
    ctx->last_status = st;
    /* An interrupt reported as this error is delivered: the flag goes
     * back to 0, so that the caller can go on calling (save a checkpoint)
     * and the host's hook, seeing it consumed, raises nothing more. */
    if (st == TGL_EINTERRUPT && ctx->interrupt)
        *ctx->interrupt = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->errmsg, sizeof ctx->errmsg, fmt, ap);
    va_end(ap);
    return st;
}

void tgl_ctx_clear_error(tgl_ctx *ctx)
{
    if (ctx)
        ctx->errmsg[0] = '\0';
}

void tgl_ctx_manual_seed(tgl_ctx *ctx, uint64_t seed)
{
    if (!ctx)
        return;
    ctx->rng_seed = seed;
    ctx->rng_offset = 0;
}

void tgl_ctx_rng_state(const tgl_ctx *ctx, uint64_t *seed, uint64_t *offset)
{
    if (!ctx)
        return;
    if (seed)
        *seed = ctx->rng_seed;
    if (offset)
        *offset = ctx->rng_offset;
}

void tgl_ctx_set_rng_state(tgl_ctx *ctx, uint64_t seed, uint64_t offset)
{
    if (!ctx)
        return;
    ctx->rng_seed = seed;
    ctx->rng_offset = offset;
}

void tgl_ctx_set_interrupt_flag(tgl_ctx *ctx, volatile int *flag)
{
    if (!ctx)
        return;
    ctx->interrupt = flag;
    tgl_backend_opts_sync(ctx);
}
