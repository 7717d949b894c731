/*
 * config.c — the context's settings (struct tgl_config): defaults, the
 * environment variables that override them when a context is made
 * (TGL_EXCLUDE, TGL_NUM_THREADS, TGL_CC, TGL_CACHE_DIR, TGL_COMPILE,
 * TGL_EXIT_WAIT), and
 * tgl_config_set / tgl_config_get.
 */
#include "engine/backend.h"

#include <inttypes.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tgl_status set_string(tgl_ctx *ctx, char *dst, size_t size, const char *key,
                             const char *value)
{
    TGL_CHECK(strlen(value) < size, TGL_EINVAL, "tgl_config_set: %s is too long (%zu bytes max)",
              key, size - 1);
    snprintf(dst, size, "%s", value);
    return TGL_OK;
}

/* ",a,b," from "a, b": commas around every name make lookups exact. */
static tgl_status set_exclude(tgl_ctx *ctx, const char *value)
{
    char buf[sizeof ctx->config.exclude];
    size_t k = 0;
    buf[k++] = ',';
    for (const char *p = value; *p; p++) {
        if (*p == ' ' || *p == '\t')
            continue;
        if (k + 2 >= sizeof buf)
            return tgl_ctx_set_error(ctx, TGL_EINVAL, "tgl_config_set: exclude is too long");
        if (*p == ',' && buf[k - 1] == ',')
            continue;
        buf[k++] = *p;
    }
    if (buf[k - 1] != ',')
        buf[k++] = ',';
    buf[k] = '\0';
    memcpy(ctx->config.exclude, buf, k + 1);
    return TGL_OK;
}

static tgl_status config_set(tgl_ctx *ctx, const char *key, const char *value)
{
    TGL_CHECK(key && value, TGL_EINVAL, "tgl_config_set: NULL argument");
    struct tgl_config *c = &ctx->config;
    if (strcmp(key, "exclude") == 0)
        return set_exclude(ctx, value);
    if (strcmp(key, "threads") == 0) {
        char *end;
        long v = strtol(value, &end, 10);
        TGL_CHECK(*value && !*end && v >= 0 && v <= 256, TGL_EINVAL,
                  "tgl_config_set: threads must be an integer from 0 to 256, got '%s'", value);
        c->threads = (int)v;
        /* One thread budget for tgl's kernels and BLAS: they run one after
         * the other, never at once, so both get the same count. */
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        for (int d = 0; d < TGL_NDEVICES; d++) {
            const tgl_backend *be = tgl_backend_get(d);
            if (be && be->set_threads)
                be->set_threads(v > 0 ? (int)v : (int)(cpus > 0 ? cpus : 1));
        }
        return TGL_OK;
    }
    if (strcmp(key, "cache_max_bytes") == 0) {
        char *end;
        long long v = strtoll(value, &end, 10);
        TGL_CHECK(*value && !*end && v >= 0, TGL_EINVAL,
                  "tgl_config_set: cache_max_bytes must be a non-negative integer, got '%s'", value);
        c->cache_max_bytes = v;
        return TGL_OK;
    }
    if (strcmp(key, "exit_wait") == 0) {
        char *end;
        double v = strtod(value, &end);
        TGL_CHECK(*value && !*end && v >= 0 && v <= 3600, TGL_EINVAL,
                  "tgl_config_set: exit_wait must be a number of seconds from 0 to 3600, got '%s'",
                  value);
        c->exit_wait = v;
        return TGL_OK;
    }
    if (strcmp(key, "compile") == 0) {
        TGL_CHECK(!strcmp(value, "tiered") || !strcmp(value, "sync") || !strcmp(value, "tcc") ||
                      !strcmp(value, "cc"),
                  TGL_EINVAL, "tgl_config_set: compile must be tiered, sync, tcc or cc, got '%s'",
                  value);
        return set_string(ctx, c->compile, sizeof c->compile, key, value);
    }
    if (strcmp(key, "cc") == 0)
        return set_string(ctx, c->cc, sizeof c->cc, key, value);
    if (strcmp(key, "cflags") == 0)
        return set_string(ctx, c->cflags, sizeof c->cflags, key, value);
    if (strcmp(key, "cache_dir") == 0)
        return set_string(ctx, c->cache_dir, sizeof c->cache_dir, key, value);
    return tgl_ctx_set_error(ctx, TGL_EINVAL, "tgl_config_set: unknown setting '%s'", key);
}

tgl_status tgl_config_set(tgl_ctx *ctx, const char *key, const char *value)
{
    TGL_CHECK_CTX(ctx);
    tgl_status st = config_set(ctx, key, value);
    tgl_backend_opts_sync(ctx);
    return st;
}

const char *tgl_config_get(tgl_ctx *ctx, const char *key)
{
    if (!ctx || !key)
        return NULL;
    struct tgl_config *c = &ctx->config;
    static _Thread_local char num[32];
    if (strcmp(key, "exclude") == 0)
        return c->exclude;
    if (strcmp(key, "threads") == 0) {
        snprintf(num, sizeof num, "%d", c->threads);
        return num;
    }
    if (strcmp(key, "cache_max_bytes") == 0) {
        snprintf(num, sizeof num, "%" PRId64, c->cache_max_bytes);
        return num;
    }
    if (strcmp(key, "exit_wait") == 0) {
        snprintf(num, sizeof num, "%g", c->exit_wait);
        return num;
    }
    if (strcmp(key, "compile") == 0)
        return c->compile;
    if (strcmp(key, "cc") == 0)
        return c->cc;
    if (strcmp(key, "cflags") == 0)
        return c->cflags;
    if (strcmp(key, "cache_dir") == 0)
        return c->cache_dir;
    return NULL;
}

void tgl_config_defaults(tgl_ctx *ctx)
{
    struct tgl_config *c = &ctx->config;
    memset(c, 0, sizeof *c);
    snprintf(c->exclude, sizeof c->exclude, ",");
    snprintf(c->cc, sizeof c->cc, "cc");
    snprintf(c->cflags, sizeof c->cflags, "-O3 -march=native");
    snprintf(c->compile, sizeof c->compile, "tiered");
    c->cache_max_bytes = (int64_t)256 << 20;
    c->exit_wait = 5;
    /* The environment overrides the defaults; bad values are ignored
     * (there is no caller to report them to yet). */
    static const struct { const char *env, *key; } vars[] = {
        {"TGL_EXCLUDE", "exclude"}, {"TGL_NUM_THREADS", "threads"}, {"TGL_CC", "cc"},
        {"TGL_CFLAGS", "cflags"},   {"TGL_CACHE_DIR", "cache_dir"}, {"TGL_COMPILE", "compile"},
        {"TGL_EXIT_WAIT", "exit_wait"},
    };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i].env);
        if (v && tgl_config_set(ctx, vars[i].key, v) != TGL_OK)
            tgl_ctx_clear_error(ctx);
    }
    tgl_backend_opts_sync(ctx);
}
