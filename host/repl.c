/*
 * repl.c — the tgl REPL.  Reads lines (libedit on a terminal: line editing,
 * persistent history, tab completion; plain stdio on a pipe, so that
 * `tgl -i < file` evaluates each line as if typed), accumulates multi-line
 * input until it compiles, runs it and auto-prints what it returns.
 *
 * The Lua-side decisions — how to compile a chunk, when input is
 * incomplete, how to print values, which names complete — live in
 * lua/tgl/repl.lua so specs can test them; this file is the terminal and
 * signal plumbing around them.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <editline/readline.h>
#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>

#include "repl.h"
#include "tgl.h"

/* Lines kept in the history file. */
#define HISTORY_MAX 1000
/* Most completion candidates handed to libedit. */
#define MATCHES_MAX 10000
/* Registry key of the tgl.repl helper module. */
#define HELPER_KEY "tgl.host.repl"
/* Characters that end the word being completed.  '.' and ':' are not among
 * them, so `tgl.ze` and `a:sh` reach the completer whole. */
#define WORD_BREAKS " \t\n\"\\'`@$><=;|&{}()[],+-*/%^~#"

/* One REPL session. */
typedef struct repl {
    lua_State *L;
    int tty;                  /* stdin is a terminal: libedit, prompts, history */
    int buf;                  /* stack slot of the pending input; nil when none */
    char history[PATH_MAX];   /* history file, "" when history is off */
    char *last;               /* last line put in the history (skip repeats) */
} repl;

enum { READ_LINE, READ_EOF, READ_INTERRUPT };

/* Pushes field `name` of the tgl.repl helper module. */
static void push_helper(lua_State *L, const char *name)
{
    lua_getfield(L, LUA_REGISTRYINDEX, HELPER_KEY);
    lua_getfield(L, -1, name);
    lua_remove(L, -2);
}

/* ---- Tab completion ----------------------------------------------------- */

/* Frees a NULL-terminated match array (of which m[0] may be NULL). */
static void free_matches(char **m, int n)
{
    int i;
    for (i = 0; i <= n; i++)
        free(m[i]);
    free(m);
}

/* libedit's rl_attempted_completion_function.  Asks tgl.repl.complete for
 * full-word candidates and returns them in readline's layout: m[0] is
 * what replaces the word (the single match, or the candidates' longest
 * common prefix), then the candidates, then NULL. */
static char **complete(const char *text, int start, int end)
{
    lua_State *L = tgl_host_lua();
    char **m;
    size_t len;
    int top, n, i;

    (void)start;
    (void)end;
    rl_attempted_completion_over = 1;  /* never fall back to file names */
    if (L == NULL)
        return NULL;
    top = lua_gettop(L);
    push_helper(L, "complete");
    lua_pushstring(L, text);
    /* completion only reads tables (raw access), so no message handler and
     * no interrupt hook are needed */
    if (lua_pcall(L, 1, 1, 0) != 0 || !lua_istable(L, -1)) {
        lua_settop(L, top);
        return NULL;
    }
    n = lua_objlen(L, -1) > MATCHES_MAX ? MATCHES_MAX : (int)lua_objlen(L, -1);
    if (n == 0 || (m = calloc((size_t)n + 2, sizeof *m)) == NULL) {
        lua_settop(L, top);
        return NULL;
    }
    for (i = 1; i <= n; i++) {
        const char *s;
        lua_rawgeti(L, -1, i);
        s = lua_tostring(L, -1);
        m[i] = strdup(s ? s : "");
        lua_pop(L, 1);
        if (m[i] == NULL) {
            free_matches(m, n);
            lua_settop(L, top);
            return NULL;
        }
    }
    lua_settop(L, top);
    if (n == 1) {  /* a single match stands alone in m[0] */
        m[0] = m[1];
        m[1] = NULL;
        return m;
    }
    len = strlen(m[1]);
    for (i = 2; i <= n; i++) {
        size_t k = 0;
        while (k < len && m[i][k] == m[1][k])
            k++;
        len = k;
    }
    m[0] = strndup(m[1], len);
    if (m[0] == NULL) {
        free_matches(m, n);
        return NULL;
    }
    return m;
}

/* ---- History ------------------------------------------------------------- */

/* The first line libedit writes in a history file. */
#define HISTORY_COOKIE "_HiStOrY_V2_"

/* True when path exists, is not empty and does not start with libedit's
 * cookie line: another program's file (GNU readline's, a plain list of
 * lines), which libedit would not read and which writing would replace
 * with this session's lines alone. */
static int history_foreign(const char *path)
{
    char head[sizeof HISTORY_COOKIE];
    size_t n;
    FILE *f = fopen(path, "r");

    if (f == NULL)
        return 0;
    n = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    if (n == 0)
        return 0;
    return n < sizeof head - 1 || memcmp(head, HISTORY_COOKIE, sizeof head - 1) != 0;
}

/* False, after one warning, when the history file is in another format:
 * then it is left alone and this session's history stays in memory.
 * Checked before each write too, since another program may replace the
 * file while the session runs. */
static int history_writable(repl *r)
{
    struct stat sb;
    const char *why;

    if (r->history[0] == '\0')
        return 0;
    /* Something that is not a regular file (a FIFO would block the REPL
     * on open, a directory or device is no history) is left alone too. */
    if (stat(r->history, &sb) == 0 && !S_ISREG(sb.st_mode))
        why = "is not a regular file";
    else if (!history_foreign(r->history))
        return 1;
    else
        why = "is not a tgl (libedit) history file";
    fprintf(stderr, "tgl: %s %s; leaving it as it is "
            "and keeping this session's history in memory only (set TGL_HISTORY "
            "to another file)\n", r->history, why);
    fflush(stderr);
    r->history[0] = '\0';
    return 0;
}

/* $TGL_HISTORY (empty turns history off), else ~/.tgl_history. */
static void history_setup(repl *r)
{
    const char *env = getenv("TGL_HISTORY"), *home = getenv("HOME");
    int n = -1;

    r->history[0] = '\0';
    if (env != NULL)
        n = snprintf(r->history, sizeof r->history, "%s", env);
    else if (home != NULL && home[0] != '\0')
        n = snprintf(r->history, sizeof r->history, "%s/.tgl_history", home);
    if (n < 0 || (size_t)n >= sizeof r->history)
        r->history[0] = '\0';  /* a path that does not fit: no history */
    using_history();
    stifle_history(HISTORY_MAX);
    if (history_writable(r))
        read_history(r->history);  /* a missing file is not an error */
}

/* Adds a typed line to the history unless it is blank or repeats the
 * previous one, and writes the file at once: a session that ends in
 * os.exit, a crash or a kill keeps what was typed.  An unwritable file is
 * silently skipped: history is a convenience.  A file in another format
 * is never written (history_writable). */
static void history_add(repl *r, const char *line)
{
    if (line[strspn(line, " \t\r\n")] == '\0')
        return;
    if (r->last != NULL && strcmp(r->last, line) == 0)
        return;
    add_history(line);
    free(r->last);
    r->last = strdup(line);
    if (history_writable(r))
        write_history(r->history);
}

/* At exit.  The file needs no trimming: the list is stifled to
 * HISTORY_MAX entries, and write_history writes the whole list.  (libedit's
 * history_truncate_file would also leave an empty /tmp/.historyXXXXXX
 * behind on every call.) */
static void history_close(repl *r)
{
    free(r->last);
    r->last = NULL;
}

/* ---- Reading lines ------------------------------------------------------- */

/* A line from stdin with plain stdio (no terminal).  Lines of any length:
 * the fixed buffer is only a window, the line grows in a luaL_Buffer. */
static int read_plain(repl *r)
{
    char chunk[4096];
    luaL_Buffer b;
    int got = 0;

    luaL_buffinit(r->L, &b);
    for (;;) {
        size_t n;
        errno = 0;
        if (fgets(chunk, sizeof chunk, stdin) == NULL) {
            if (tgl_host_take_interrupt()) {
                clearerr(stdin);
                luaL_pushresult(&b);
                lua_pop(r->L, 1);
                return READ_INTERRUPT;
            }
            if (ferror(stdin) && errno == EINTR) {  /* some other signal */
                clearerr(stdin);
                continue;
            }
            luaL_pushresult(&b);
            if (got)  /* a last line without a newline */
                return READ_LINE;
            lua_pop(r->L, 1);
            return READ_EOF;
        }
        got = 1;
        n = strlen(chunk);
        if (n > 0 && chunk[n - 1] == '\n') {
            luaL_addlstring(&b, chunk, n - 1);
            luaL_pushresult(&b);
            return READ_LINE;
        }
        luaL_addlstring(&b, chunk, n);
    }
}

/* Reads one line and pushes it (READ_LINE), or returns READ_EOF or
 * READ_INTERRUPT (Ctrl-C) with nothing pushed. */
static int read_line(repl *r, const char *prompt)
{
    char *line;

    tgl_host_arm_prompt();
    if (!r->tty)
        return read_plain(r);
    errno = 0;
    line = readline(prompt);
    if (line == NULL) {
        /* libedit returns NULL both at EOF and when the read fails with
         * EINTR; the flag tells them apart, and errno when the signal
         * libedit re-raises to our handler has not been delivered yet */
        int interrupted = errno == EINTR;
        if (tgl_host_take_interrupt() || interrupted) {
            fputs("\n", stdout);
            fflush(stdout);
            return READ_INTERRUPT;
        }
        return READ_EOF;
    }
    history_add(r, line);
    lua_pushstring(r->L, line);
    free(line);
    return READ_LINE;
}

/* ---- Evaluating ---------------------------------------------------------- */

/* Compiles the pending input with tgl.repl.compile.  Returns 1 with the
 * function pushed; 0 when the input is incomplete (more lines may finish
 * it; at_eof turns that into an error); -1 after reporting an error. */
static int compile_pending(repl *r, int at_eof)
{
    lua_State *L = r->L;
    int status;

    push_helper(L, "compile");
    lua_pushvalue(L, r->buf);
    status = lua_pcall(L, 1, 3, 0);
    if (status != 0) {
        tgl_host_report(L, status);
        return -1;
    }
    if (!lua_isnil(L, -3)) {  /* fn, nil, nil */
        lua_pop(L, 2);
        return 1;
    }
    if (lua_toboolean(L, -1) && !at_eof) {  /* nil, msg, true */
        lua_pop(L, 3);
        return 0;
    }
    lua_pop(L, 1);
    lua_remove(L, -2);
    tgl_host_report(L, 1);  /* "tgl: stdin:1: ..." */
    return -1;
}

/* Runs the compiled chunk on top of the stack and prints its results. */
static void run_chunk(repl *r)
{
    lua_State *L = r->L;
    int fn = lua_gettop(L), n;
    int status = tgl_host_docall(L, 0, LUA_MULTRET);

    if (status == 0 && (n = lua_gettop(L) - fn + 1) > 0) {
        luaL_checkstack(L, 2, "too many results to print");
        push_helper(L, "show");
        lua_insert(L, -(n + 1));
        /* printing runs __tostring metamethods: user code, so interruptible */
        status = tgl_host_docall(L, n, 0);
    }
    tgl_host_report(L, status);
    fflush(stdout);
}

/* Appends the line on top of the stack to the pending input. */
static void append_line(repl *r)
{
    lua_State *L = r->L;
    if (!lua_isnil(L, r->buf)) {
        lua_pushvalue(L, r->buf);
        lua_pushliteral(L, "\n");
        lua_pushvalue(L, -3);
        lua_concat(L, 3);
        lua_remove(L, -2);
    }
    lua_replace(L, r->buf);
}

static void clear_pending(repl *r)
{
    lua_pushnil(r->L);
    lua_replace(r->L, r->buf);
}

/* ---- The loop ------------------------------------------------------------ */

static void setup_terminal(repl *r)
{
    /* libedit's own signal handlers stay on (rl_catch_signals): on SIGINT,
     * SIGTERM, SIGTSTP... they restore the terminal, then re-raise the
     * signal to the handler in place before (for SIGINT, main.c's prompt
     * handler), and they redraw after SIGCONT and SIGWINCH. */
    rl_catch_signals = 1;
    rl_readline_name = "tgl";
    rl_initialize();
    rl_basic_word_break_characters = WORD_BREAKS;
    rl_attempted_completion_function = complete;
    rl_completion_append_character = '\0';  /* `string.format` then `(`, no space */
    history_setup(r);
    printf("tgl %s (%s, %s)\n", tgl_version(), LUAJIT_VERSION, tgl_blas_info());
    fflush(stdout);
}

int tgl_repl_run(lua_State *L)
{
    repl r;
    int top = lua_gettop(L), status;

    memset(&r, 0, sizeof r);
    r.L = L;
    r.tty = isatty(STDIN_FILENO);

    lua_getglobal(L, "require");
    lua_pushliteral(L, "tgl.repl");
    status = tgl_host_docall(L, 1, 1);
    if (status != 0) {
        tgl_host_report(L, status);
        return 1;
    }
    lua_setfield(L, LUA_REGISTRYINDEX, HELPER_KEY);
    if (r.tty)
        setup_terminal(&r);

    lua_pushnil(L);
    r.buf = lua_gettop(L);
    for (;;) {
        int pending = !lua_isnil(L, r.buf);
        int got = read_line(&r, pending ? ">> " : "> ");

        if (got == READ_INTERRUPT) {  /* abandon the line and pending input */
            clear_pending(&r);
            continue;
        }
        if (got == READ_EOF) {
            if (pending)  /* say why the unfinished chunk did not run */
                compile_pending(&r, 1);
            break;
        }
        if (!pending && lua_objlen(L, -1) == 0) {  /* empty line: nothing to do */
            lua_pop(L, 1);
            continue;
        }
        append_line(&r);
        switch (compile_pending(&r, 0)) {
        case 1:
            run_chunk(&r);
            clear_pending(&r);
            break;
        case -1:
            clear_pending(&r);
            break;
        default:  /* incomplete: read a continuation line */
            break;
        }
    }
    if (r.tty) {
        fputs("\n", stdout);  /* leave the shell's prompt on a fresh line */
        fflush(stdout);
        history_close(&r);
    }
    lua_settop(L, top);
    return 0;
}
