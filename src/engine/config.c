/*
 * config.c — the context's settings (struct tgl_config): defaults, the
 * environment variables that override them when a context is made
 * (TGL_EXCLUDE, TGL_NUM_THREADS, TGL_CC, TGL_CFLAGS, TGL_CACHE_DIR,
 * TGL_COMPILE, TGL_EXIT_WAIT, TGL_WHOLE_STEP, TGL_DEVICE, TGL_TUNE; TGL_FLOATX is only checked: floatX lives in
 * Lua), the record of bad ones (tgl_config_env_error), and tgl_config_set /
 * tgl_config_get.
 */
#include "engine/backend.h"
#include "engine/tune.h"

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

/* Whether every name in a comma-separated list (blanks ignored) is a
 * rewrite rule. */
static bool rules_known(const char *list)
{
    const char *p = list;
    while (*p) {
        while (*p == ',' || *p == ' ' || *p == '\t')
            p++;
        size_t n = 0;
        while (p[n] && p[n] != ',' && p[n] != ' ' && p[n] != '\t')
            n++;
        if (!n)
            break;
        bool found = false;
        for (int i = 0; i < tgl_rule_count() && !found; i++) {
            const char *r = tgl_rule_name(i);
            found = strlen(r) == n && !strncmp(r, p, n);
        }
        if (!found)
            return false;
        p += n;
    }
    return true;
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
    if (strcmp(key, "whole_step") == 0) {
        TGL_CHECK(!strcmp(value, "on") || !strcmp(value, "off") || !strcmp(value, "bound"),
                  TGL_EINVAL, "tgl_config_set: whole_step must be on, off or bound, got '%s'",
                  value);
        c->whole_step = !strcmp(value, "on") ? 1 : !strcmp(value, "bound") ? 2 : 0;
        return TGL_OK;
    }
    if (strcmp(key, "device") == 0) {
        /* Only devices this build has a backend for, and that can be used
         * now (a build with CUDA on a machine without a GPU has the
         * backend but no device): the setting stays as it was otherwise. */
        char names[128] = "";
        size_t used = 0;
        for (int d = 0; d < TGL_NDEVICES; d++) {
            const tgl_backend *be = tgl_backend_get(d);
            if (!be) {
                if (d == TGL_DEVICE_CUDA && !strcmp(value, tgl_device_name(d)))
                    return tgl_ctx_set_error(ctx, TGL_EINVAL,
                                             "tgl_config_set: device 'cuda': tgl was built "
                                             "without CUDA");
                continue;
            }
            if (!strcmp(value, tgl_device_name(d))) {
                tgl_errbuf e;
                if (be->ready && be->ready(&e) != TGL_OK)
                    return tgl_ctx_set_error(ctx, TGL_EINVAL,
                                             "tgl_config_set: device '%s' cannot be used: %s",
                                             value, e.msg);
                c->device = d;
                return TGL_OK;
            }
            int k = snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "",
                             tgl_device_name(d));
            used = k < 0 || used + (size_t)k >= sizeof names ? sizeof names - 1 : used + (size_t)k;
        }
        return tgl_ctx_set_error(ctx, TGL_EINVAL,
                                 "tgl_config_set: device must be one of this build's devices "
                                 "(%s), got '%s'", names, value);
    }
    if (strcmp(key, "allow_tf32") == 0) {
        TGL_CHECK(!strcmp(value, "true") || !strcmp(value, "false"), TGL_EINVAL,
                  "tgl_config_set: allow_tf32 must be true or false, got '%s'", value);
        c->allow_tf32 = !strcmp(value, "true");
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
    if (strcmp(key, "tune") == 0) {
        /* process-wide, as the thresholds are (engine/tune.h) */
        char why[200];
        if (tgl_tune_override(value, why, sizeof why) != 0)
            return tgl_ctx_set_error(ctx, TGL_EINVAL, "tgl_config_set: tune: %s", why);
        return TGL_OK;
    }
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
    if (strcmp(key, "whole_step") == 0)
        return c->whole_step == 1 ? "on" : c->whole_step == 2 ? "bound" : "off";
    if (strcmp(key, "device") == 0)
        return tgl_device_name(c->device);
    if (strcmp(key, "allow_tf32") == 0)
        return c->allow_tf32 ? "true" : "false";
    if (strcmp(key, "compile") == 0)
        return c->compile;
    if (strcmp(key, "cc") == 0)
        return c->cc;
    if (strcmp(key, "cflags") == 0)
        return c->cflags;
    if (strcmp(key, "cache_dir") == 0)
        return c->cache_dir;
    if (strcmp(key, "tune") == 0)
        return tgl_tune_overrides();
    return NULL;
}

/* Every key tgl_config_set and tgl_config_get know, in the order
 * tostring(tgl.config) shows them: the Lua layer builds tgl.config from
 * this list (tgl_config_key), and spec/cdef_spec.lua fails when a key
 * handled above is missing here. */
static const char *const config_keys[] = {
    "compile", "threads", "exclude", "cc", "cflags", "cache_dir", "cache_max_bytes",
    "exit_wait", "whole_step", "device", "allow_tf32", "tune",
};

int tgl_config_count(void)
{
    return (int)(sizeof config_keys / sizeof config_keys[0]);
}

const char *tgl_config_key(int i)
{
    return i >= 0 && i < tgl_config_count() ? config_keys[i] : NULL;
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
    c->whole_step = 1;
    /* The environment overrides the defaults.  A bad value (or an empty
     * one, but for TGL_EXCLUDE's empty list) keeps the default and is recorded, naming the variable, for
     * tgl_config_env_error: the Lua module raises it when it loads, and the
     * host exits with it before running anything. */
    static const struct { const char *env, *key, *accepted; } vars[] = {
        {"TGL_FLOATX", NULL, "float32 or float64"},
        {"TGL_EXCLUDE", "exclude", "a comma-separated list of rewrite rule names (see tgl.rules())"},
        {"TGL_NUM_THREADS", "threads", "an integer from 0 to 256 (0: one thread per CPU)"},
        {"TGL_CC", "cc", "a compiler command, such as cc or gcc (at most 255 bytes)"},
        {"TGL_CFLAGS", "cflags", "compiler flags, such as -O3 -march=native (at most 255 bytes)"},
        {"TGL_CACHE_DIR", "cache_dir", "a directory's path (at most 1023 bytes)"},
        {"TGL_COMPILE", "compile", "tiered, sync, tcc or cc"},
        {"TGL_EXIT_WAIT", "exit_wait", "seconds from 0 to 3600"},
        {"TGL_WHOLE_STEP", "whole_step", "on, off or bound"},
        {"TGL_DEVICE", "device", "a device this build has, such as cpu or sim"},
        {"TGL_TUNE", "tune", "a comma-separated list of name=value (an integer >= 0 or never), "
                             "names as tgl -v prints them"},
    };
    size_t used = 0;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i].env);
        if (!v)
            continue;
        bool ok;
        char why[TGL_ERRMSG_SIZE] = "";
        if (!vars[i].key)
            ok = !strcmp(v, "float32") || !strcmp(v, "float64");
        else if (!*v && strcmp(vars[i].key, "exclude") != 0 && strcmp(vars[i].key, "tune") != 0)
            ok = false;   /* empty is a bad value, except TGL_EXCLUDE= (no rule off), TGL_TUNE= */
        else if (!strcmp(vars[i].key, "exclude") && !rules_known(v))
            ok = false;
        else if (!(ok = tgl_config_set(ctx, vars[i].key, v) == TGL_OK)) {
            /* a device this build knows but cannot use now: say why */
            if (!strcmp(vars[i].key, "device"))
                for (int d = 0; d < TGL_NDEVICES; d++)
                    if (!strcmp(v, tgl_device_name(d)))
                        snprintf(why, sizeof why, " (%s)", tgl_ctx_error(ctx));
            tgl_ctx_clear_error(ctx);
        }
        if (ok || used >= sizeof c->env_error - 1)
            continue;
        int n = snprintf(c->env_error + used, sizeof c->env_error - used,
                         "%senvironment variable %s='%.*s%s' is not valid: expected %s%s",
                         used ? "\n" : "", vars[i].env, 64, v, strlen(v) > 64 ? "..." : "",
                         vars[i].accepted, why);
        used = n < 0 ? used : used + (size_t)n < sizeof c->env_error ? used + (size_t)n
                                                                     : sizeof c->env_error - 1;
    }
    tgl_backend_opts_sync(ctx);
}

const char *tgl_config_env_error(tgl_ctx *ctx)
{
    return ctx && ctx->config.env_error[0] ? ctx->config.env_error : NULL;
}
