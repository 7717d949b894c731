/*
 * main.c — the tgl host binary: parses options the way luajit does, sets up
 * a LuaJIT state with tgl's Lua directory on package.path and the `tgl`
 * module preloaded, runs -e/-l/script/stdin chunks in protected calls with
 * tracebacks, and owns Ctrl-C handling (the interrupt flag the engine polls
 * and the debug hook that stops interpreted Lua code).
 *
 * Exit status: 0 on success, 1 when a chunk fails, an option is bad or the
 * `tgl` module cannot be loaded; os.exit(n) exits with n.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>

#include "args.h"
#include "repl.h"
#include "tgl.h"

#ifndef TGL_SOURCE_LUA_DIR
#error "TGL_SOURCE_LUA_DIR must name the source tree's lua/ directory"
#endif
#ifndef TGL_BUILD_LUA_DIR
#error "TGL_BUILD_LUA_DIR must name the build tree's lua/ directory (generated modules)"
#endif
#ifndef TGL_INSTALL_LUA_SUBDIR
#error "TGL_INSTALL_LUA_SUBDIR must name the installed lua dir, relative to the prefix"
#endif

/* ---- Signal state: the only globals, because a signal handler needs them */

/* Set to 1 by SIGINT; the engine polls it through tgl_host_interrupt_flag. */
static volatile int host_interrupt;
/* The state the interrupt hook is installed on (LuaJIT hooks are global to
 * a state, so the main state covers its coroutines too). */
static lua_State *volatile host_L;

volatile int *tgl_host_interrupt_flag(void)
{
    return &host_interrupt;
}

lua_State *tgl_host_lua(void)
{
    return host_L;
}

/* True when a chunk name names one of tgl's own Lua files, ".../tgl/x.lua"
 * (the test of core.lua's user_level). */
static int is_tgl_source(const char *src)
{
    size_t n = strlen(src);
    const char *p;

    if (src[0] != '@' || n < 4 || strcmp(src + n - 4, ".lua") != 0)
        return 0;
    for (p = src + n - 4; p > src && (isalnum((unsigned char)p[-1]) || p[-1] == '_'); p--)
        ;
    if (p == src + n - 4 || p - src < 5 || (p[-1] != '/' && p[-1] != '\\'))
        return 0;
    return strncmp(p - 4, "tgl", 3) == 0 && (p - 5 == src || p[-5] == '/' || p[-5] == '\\');
}

/* The stack level the interruption is reported at: the first Lua frame
 * outside tgl's own Lua files, so that Ctrl-C during f.fn{n_calls = N}
 * names the user's line rather than function.lua, and Ctrl-C inside a C
 * function (collectgarbage, pcall) names the line that called it (a C
 * frame has no line: luaL_where would say nothing).  Level 0 (the running
 * function) when no frame is the user's Lua code. */
static int user_level(lua_State *L)
{
    lua_Debug ar;
    int level;

    for (level = 0; lua_getstack(L, level, &ar); level++) {
        if (!lua_getinfo(L, "Sl", &ar))
            return level;
        if (ar.currentline > 0 && !is_tgl_source(ar.source))
            return level;
    }
    return 0;
}

/* Whether the innermost Lua frame (C frames skipped: ffi.gc, a C call
 * tgl's Lua code makes) runs one of tgl's own Lua files. */
static int in_tgl_source(lua_State *L)
{
    lua_Debug ar;

    for (int level = 0; lua_getstack(L, level, &ar); level++) {
        if (!lua_getinfo(L, "S", &ar))
            return 0;
        if (strcmp(ar.what, "C") != 0)
            return is_tgl_source(ar.source);
    }
    return 0;
}

static void on_sigint_chunk(int sig);
static void set_sigint(void (*handler)(int), int flags, struct sigaction *old);

/* Debug hook installed by the SIGINT handler: raises the error in the
 * running chunk at the next call, return or instruction.  luaL_where
 * rather than luaL_error because a C hook adds no frame of its own.
 *
 * Raising delivers the Ctrl-C: the flag is cleared, so that a script that
 * catches the error (pcall) can go on calling tgl (save a checkpoint), and
 * the handler is armed again, so that a later Ctrl-C interrupts as the
 * first did.  Until then the handler stays reset (SA_RESETHAND): a second
 * Ctrl-C that arrives before the first is delivered (a JIT-compiled loop
 * that never reaches the hook) kills the process.  An engine call that
 * sees the flag first fails with its own "interrupted" error and clears
 * the flag (tgl_ctx_set_error); the hook then raises at once, on that
 * error's path (no new array is in flight there: the call failed), so
 * the error that propagates, and that a pcall catches, is this one. */
static void stop_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    /* Not inside tgl's own Lua files: there an error between a C call
     * that hands over a new array and the box that takes it (core.wrap)
     * would leak the array.  The hook stays installed and fires again at
     * the next instruction, call or return, so the interruption lands at
     * the first instruction of the caller's code, or as soon as an
     * engine call made meanwhile has reported it (the flag is 0 then). */
    if (host_interrupt && in_tgl_source(L))
        return;
    lua_sethook(L, NULL, 0, 0);
    host_interrupt = 0;
    set_sigint(on_sigint_chunk, (int)SA_RESETHAND, NULL);
    luaL_where(L, user_level(L));
    lua_pushfstring(L, "%sinterrupted!", lua_tostring(L, -1));
    lua_error(L);
}

/* SIGINT while a chunk runs.  Installed with SA_RESETHAND, so the next
 * SIGINT takes the default action and kills the process: that is the way
 * out of a JIT-compiled loop, where hooks never fire and which calls
 * nothing that polls the flag. */
static void on_sigint_chunk(int sig)
{
    (void)sig;
    host_interrupt = 1;
    if (host_L)
        lua_sethook(host_L, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* SIGINT at the prompt: only note it.  Without SA_RESTART the blocking
 * read returns EINTR and the REPL abandons the line. */
static void on_sigint_prompt(int sig)
{
    (void)sig;
    host_interrupt = 1;
}

static void set_sigint(void (*handler)(int), int flags, struct sigaction *old)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, old);
}

void tgl_host_arm_prompt(void)
{
    set_sigint(on_sigint_prompt, 0, NULL);
    host_interrupt = 0;
    if (host_L)
        lua_sethook(host_L, NULL, 0, 0);
}

int tgl_host_take_interrupt(void)
{
    int was = host_interrupt;
    host_interrupt = 0;
    return was != 0;
}

/* ---- Protected calls ------------------------------------------------- */

/* Message handler: turns the error into "message\nstack traceback:...".
 * A nil error object stays nil (busted raises error() with nil to set the
 * exit status, which must stay silent); other non-strings go through
 * __tostring when they have one. */
static int msghandler(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (lua_isnoneornil(L, 1))
            return 1;
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            msg = lua_tostring(L, -1);
        else
            msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

int tgl_host_docall(lua_State *L, int narg, int nres)
{
    struct sigaction old;
    int base = lua_gettop(L) - narg;
    int status;

    lua_pushcfunction(L, msghandler);
    lua_insert(L, base);
    host_interrupt = 0;
    lua_sethook(L, NULL, 0, 0);
    set_sigint(on_sigint_chunk, (int)SA_RESETHAND, &old);
    status = lua_pcall(L, narg, nres, base);
    sigaction(SIGINT, &old, NULL);
    /* A Ctrl-C that landed after the chunk's last instruction must not
     * fire in whatever Lua code runs next. */
    lua_sethook(L, NULL, 0, 0);
    lua_remove(L, base);
    if (status != 0)
        lua_gc(L, LUA_GCCOLLECT, 0);
    return status;
}

void tgl_host_report(lua_State *L, int status)
{
    const char *msg;
    if (status == 0)
        return;
    if (!lua_isnil(L, -1)) {
        msg = lua_tostring(L, -1);
        if (msg == NULL)
            msg = "(error object is not a string)";
        fflush(stdout);  /* keep stdout and stderr in order on a shared terminal */
        fprintf(stderr, "tgl: %s\n", msg);
        fflush(stderr);
    }
    lua_pop(L, 1);
}

/* ---- Options ---------------------------------------------------------- */


static void usage(FILE *f)
{
    fputs("usage: tgl [options] [script [args]]\n"
          "  -e chunk   run the string 'chunk' (may be repeated; runs in order)\n"
          "  -l name    require module 'name' into the global 'name'\n"
          "  -i         enter the REPL after running the script and chunks,\n"
          "             also when stdin is a pipe\n"
          "  -v         print the versions of tgl, LuaJIT, BLAS and CUDA, and the\n"
          "             thresholds measured on this machine (doc/calibration.md)\n"
          "  --calibrate    measure those thresholds again and rewrite their record\n"
          "  --cache-info   print the kernel cache's directory, entries and size\n"
          "  --cache-clear  delete every compiled kernel in the cache\n"
          "  -h, --help print this help\n"
          "  --         stop handling options\n"
          "  -          run stdin as a script and stop handling options\n"
          "With no script and no -e, tgl starts the REPL when stdin is a terminal\n"
          "and otherwise runs stdin as a script.  Script arguments are in the\n"
          "global 'arg' (arg[0] is the script) and in '...'.\n",
          f);
}

/* --cache-info / --cache-clear: the kernel cache of a fresh context
 * (settings from the environment, e.g. TGL_CACHE_DIR). */
static int cache_command(int which)
{
    tgl_ctx *ctx = tgl_ctx_new();
    if (!ctx) {
        fputs("tgl: out of memory\n", stderr);
        return 1;
    }
    char *text = NULL;
    tgl_status st = tgl_cache_info(ctx, &text);
    if (!st && which == 2) {
        tgl_free(text);
        text = NULL;
        st = tgl_cache_clear(ctx);
        if (!st)
            st = tgl_cache_info(ctx, &text);
        if (!st)
            fputs("cache cleared\n", stdout);
    }
    if (!st)
        fputs(text, stdout);
    else
        fprintf(stderr, "tgl: %s\n", tgl_ctx_error(ctx));
    tgl_free(text);
    tgl_ctx_free(ctx);
    fflush(stdout);
    return st ? 1 : 0;
}

/* The measured thresholds (tgl_tune_info) under a heading; --calibrate
 * measures them again first.  A fresh context: settings from the
 * environment (TGL_CACHE_DIR, TGL_TUNE). */
static int tune_command(int calibrate)
{
    tgl_ctx *ctx = tgl_ctx_new();
    if (!ctx) {
        fputs("tgl: out of memory\n", stderr);
        return 1;
    }
    char *text = NULL;
    tgl_status st = calibrate ? tgl_calibrate(ctx) : TGL_OK;
    if (!st)
        st = tgl_tune_info(ctx, &text);
    if (!st)
        printf("%s\n%s", calibrate ? "calibrated:" : "thresholds (doc/calibration.md):", text);
    else
        fprintf(stderr, "tgl: %s\n", tgl_ctx_error(ctx));
    tgl_free(text);
    tgl_ctx_free(ctx);
    fflush(stdout);
    return st ? 1 : 0;
}

static void print_version(void)
{
    printf("tgl %s\n", tgl_version());
    printf("%s\n", LUAJIT_VERSION);
    printf("BLAS: %s\n", tgl_blas_info());
    if (tgl_cuda_built()) {
        int n = tgl_cuda_device_count();
        printf("CUDA: built in (runtime %s, %d device%s)\n", tgl_cuda_version(), n,
               n == 1 ? "" : "s");
    } else {
        printf("CUDA: not built in\n");
    }
    if (tgl_dist_available())
        printf("MPI: built in (%s; tgl.dist)\n", tgl_dist_library());
    else
        printf("MPI: not built in\n");
    fflush(stdout);
}

/* ---- State setup ------------------------------------------------------- */

/* The global `arg`, exactly as luajit builds it: the script at index 0,
 * its arguments at 1.., everything before it (options, the interpreter)
 * at negative indexes.  Without a script, argf is argc. */
static void create_arg_table(lua_State *L, char **argv, int argc, int argf)
{
    int i;
    lua_createtable(L, argc - argf, argf);
    for (i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - argf);
    }
    lua_setglobal(L, "arg");
}

/* 1 when path names an existing file. */
static int file_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* Finds tgl's Lua directory: the installed one next to the executable
 * (<exe_dir>/../TGL_INSTALL_LUA_SUBDIR) when it holds tgl/init.lua, else
 * the source tree's.  Writes it to buf (size bytes); returns 1 for the
 * installed one, 0 for the source tree's. */
static int find_lua_dir(char *buf, size_t size)
{
    char exe[PATH_MAX], cand[PATH_MAX], probe[PATH_MAX + 32];
    const char *sub = TGL_INSTALL_LUA_SUBDIR;
    char *slash;
    int n;

    if (realpath("/proc/self/exe", exe) != NULL && (slash = strrchr(exe, '/')) != NULL) {
        *slash = '\0';
        if (sub[0] == '/')  /* an absolute install dir stands on its own */
            n = snprintf(cand, sizeof cand, "%s", sub);
        else
            n = snprintf(cand, sizeof cand, "%s/../%s", exe, sub);
        if (n > 0 && (size_t)n < sizeof cand) {
            n = snprintf(probe, sizeof probe, "%s/tgl/init.lua", cand);
            if (n > 0 && (size_t)n < sizeof probe && file_exists(probe)) {
                /* canonical, so tracebacks show a clean path */
                if (realpath(cand, exe) != NULL)
                    snprintf(buf, size, "%s", exe);
                else
                    snprintf(buf, size, "%s", cand);
                return 1;
            }
        }
    }
    snprintf(buf, size, "%s", TGL_SOURCE_LUA_DIR);
    return 0;
}

/* Puts DIR/?.lua and DIR/?/init.lua in front of package.path (which
 * luaL_openlibs already built from LUA_PATH or the default), for dir and
 * then, when not NULL, for gen (the build tree's generated modules). */
static void prepend_package_path(lua_State *L, const char *dir, const char *gen)
{
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "path");
    if (gen)
        lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s/?.lua;%s/?/init.lua;%s", dir, dir, gen,
                        gen, lua_isstring(L, -1) ? lua_tostring(L, -1) : "");
    else
        lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", dir, dir,
                        lua_isstring(L, -1) ? lua_tostring(L, -1) : "");
    lua_setfield(L, -3, "path");
    lua_pop(L, 2);
}

/* os.exit(code [, close]) with close defaulting to true (LuaJIT honours
 * Lua 5.2's second argument): the state is closed before exit(), so
 * finalizers run — tgl releases engine memory and device state — and leak
 * checkers see a clean exit.  The original os.exit is upvalue 1. */
static int host_os_exit(lua_State *L)
{
    lua_settop(L, 2);
    if (lua_isnil(L, 2)) {
        lua_pushboolean(L, 1);
        lua_replace(L, 2);
    }
    /* store the kernels still compiling before the functions go */
    tgl_compile_wait_all();
    /* leave a job of several processes (tgl.dist) with the exit status:
     * a failing one ends the whole job, so the others do not wait for it */
    tgl_dist_shutdown(lua_isnumber(L, 1)    ? (int)lua_tointeger(L, 1)
                      : lua_isboolean(L, 1) ? !lua_toboolean(L, 1)
                                            : 0);
    if (lua_toboolean(L, 2)) {
        /* the state is about to go: keep the SIGINT handler off it */
        signal(SIGINT, SIG_DFL);
        host_L = NULL;
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, 2, 0);
    return 0;
}

static void wrap_os_exit(lua_State *L)
{
    lua_getglobal(L, "os");
    lua_getfield(L, -1, "exit");
    lua_pushcclosure(L, host_os_exit, 1);
    lua_setfield(L, -2, "exit");
    lua_pop(L, 1);
}

/* require(name) and store the result in the global of that name. */
static int require_global(lua_State *L, const char *name)
{
    int status;
    lua_getglobal(L, "require");
    lua_pushstring(L, name);
    status = tgl_host_docall(L, 1, 1);
    if (status == 0)
        lua_setglobal(L, name);
    return status;
}

/* ---- Running ----------------------------------------------------------- */

/* Runs a chunk loaded above its narg arguments, or reports its load
 * error; returns the status. */
static int run_loaded(lua_State *L, int load_status, int narg)
{
    int status = load_status;
    /* the chunk (or its load error) was pushed above its arguments */
    lua_insert(L, -(narg + 1));
    if (status == 0)
        status = tgl_host_docall(L, narg, 0);
    else
        lua_pop(L, narg);
    tgl_host_report(L, status);
    return status;
}

/* -e and -l in command-line order (second pass over what host_collect_args
 * validated). */
static int run_options(host *h, lua_State *L)
{
    int i = 1, kind;
    const char *val;
    while ((kind = host_next_option(h, &i, &val))) {
        int status;
        if (kind == 'e') {
            status = run_loaded(L, luaL_loadbuffer(L, val, strlen(val), "=(command line)"), 0);
        } else {
            status = require_global(L, val);
            tgl_host_report(L, status);
        }
        if (status != 0)
            return status;
    }
    return 0;
}

/* The script at argv[h->script] with argv[h->script+1..] as `...`. */
static int run_script(host *h, lua_State *L)
{
    const char *fname = host_script_name(h);
    int i, narg = h->argc - h->script - 1;

    luaL_checkstack(L, narg + 3, "too many arguments to script");
    for (i = h->script + 1; i < h->argc; i++)
        lua_pushstring(L, h->argv[i]);
    return run_loaded(L, luaL_loadfile(L, fname), narg);
}

/* Everything that needs the state, run under lua_cpcall so that an
 * out-of-memory error during setup is caught and reported too. */
static int host_main(lua_State *L)
{
    host *h = (host *)lua_touserdata(L, 1);
    char luadir[PATH_MAX];
    int status;

    lua_pop(L, 1);
    h->status = 1;
    lua_gc(L, LUA_GCSTOP, 0);  /* faster library setup, as luajit does */
    luaL_openlibs(L);
    lua_gc(L, LUA_GCRESTART, -1);
    wrap_os_exit(L);
    create_arg_table(L, h->argv, h->argc, h->script ? h->script : h->argc);
    /* The source tree's lua/ holds what is written by hand; the build
     * tree's holds what the build generates (tgl/cdef.lua).  An install
     * puts both in one directory. */
    if (find_lua_dir(luadir, sizeof luadir))
        prepend_package_path(L, luadir, NULL);
    else
        prepend_package_path(L, luadir, TGL_BUILD_LUA_DIR);

    status = require_global(L, "tgl");
    if (status != 0) {
        tgl_host_report(L, status);
        return 0;
    }
    if (run_options(h, L) != 0)
        return 0;
    if (h->script && run_script(h, L) != 0)
        return 0;

    if (h->interactive) {
        status = tgl_repl_run(L);
    } else if (!h->script && !h->exec && !h->version) {
        if (isatty(STDIN_FILENO))
            status = tgl_repl_run(L);
        else
            status = run_loaded(L, luaL_loadfile(L, NULL), 0) ? 1 : 0;
    } else {
        status = 0;
    }
    h->status = status;
    return 0;
}

int main(int argc, char **argv)
{
    host h;
    const char *bad = NULL, *why = NULL;
    lua_State *L;
    int rc;

    memset(&h, 0, sizeof h);
    h.argc = argc;
    h.argv = argv;
    if (argc < 1 || argv[0] == NULL) {
        fputs("tgl: no program name in argv\n", stderr);
        return 1;
    }
    switch (host_collect_args(&h, &bad, &why)) {
    case ARGS_HELP:
        usage(stdout);
        return 0;
    case ARGS_BAD:
        fprintf(stderr, "tgl: '%s' %s\n", bad, why);
        usage(stderr);
        return 1;
    default:
        break;
    }
    /* Every TGL_* variable is checked before anything runs: a bad one is
     * reported here, once, and nothing else happens. */
    {
        tgl_ctx *ctx = tgl_ctx_new();
        const char *env = ctx ? tgl_config_env_error(ctx) : NULL;
        int bad_env = env != NULL;
        for (const char *p = env; p && *p;) {
            size_t n = strcspn(p, "\n");
            fprintf(stderr, "tgl: %.*s\n", (int)n, p);
            p += n + (p[n] == '\n');
        }
        tgl_ctx_free(ctx);
        if (bad_env)
            return 1;
    }
    if (h.cache) {
        int crc = cache_command(h.cache);
        if (crc || (!h.script && !h.exec && !h.libs && !h.interactive && !h.version))
            return crc;
    }
    if (h.calibrate) {
        int crc = tune_command(1);
        if (crc || (!h.script && !h.exec && !h.libs && !h.interactive && !h.version))
            return crc;
    }
    if (h.version) {
        print_version();
        if (!h.calibrate && tune_command(0))
            return 1;
        if (!h.script && !h.exec && !h.libs && !h.interactive)
            return 0;
    }

    L = luaL_newstate();
    if (L == NULL) {
        fputs("tgl: cannot create the Lua state (out of memory)\n", stderr);
        return 1;
    }
    host_L = L;
    rc = lua_cpcall(L, host_main, &h);
    if (rc != 0) {
        tgl_host_report(L, rc);
        h.status = 1;
    }
    host_L = NULL;
    /* Store the kernels still compiling (bounded by exit_wait) while the
     * functions that wait for them are alive: lua_close releases them. */
    tgl_compile_wait_all();
    /* A job of several processes (tgl.dist): leave it cleanly, or, after
     * an error, end it, so the others stop instead of waiting for us. */
    tgl_dist_shutdown(h.status);
    lua_close(L);
    return h.status;
}
