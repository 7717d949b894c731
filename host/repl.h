/*
 * repl.h — the seam between the tgl host's two files.  main.c owns the Lua
 * state, the Ctrl-C machinery and the protected calls; repl.c owns the
 * interactive loop and uses main.c's helpers to run what the user types.
 */
#ifndef TGL_HOST_REPL_H
#define TGL_HOST_REPL_H

#include <lua.h>

#include "tgl_host.h"  /* what the host exports to the Lua layer */

/* ---- provided by main.c ------------------------------------------------ */

/* Calls the function below narg arguments on L's stack with a traceback
 * message handler, with Ctrl-C armed (a press stops the chunk with an
 * "interrupted!" error, which clears the flag and re-arms the handler when
 * it is raised; a second press before that kills the process).  Leaves nres
 * results (or LUA_MULTRET) or the error object; returns the pcall status.
 * The SIGINT disposition in force before the call is restored after it. */
int tgl_host_docall(lua_State *L, int narg, int nres);

/* Prints the error object on top of L's stack as "tgl: message" to stderr
 * (a nil error object prints nothing) and pops it.  No-op when status is 0. */
void tgl_host_report(lua_State *L, int status);

/* Ctrl-C at the prompt: installs a handler that only sets the interrupt
 * flag and makes a blocking read fail with EINTR, then clears the flag and
 * any pending interrupt hook. */
void tgl_host_arm_prompt(void);

/* 1 when Ctrl-C was pressed since the last arm; clears the flag. */
int tgl_host_take_interrupt(void);

/* The main Lua state (the one the interrupt hook targets); readline's
 * completion callback has no user-data argument and needs it. */
lua_State *tgl_host_lua(void);

/* ---- provided by repl.c ------------------------------------------------ */

/* Runs the REPL on L until end of input.  Reads with libedit (line editing,
 * history, completion) when stdin is a terminal, and with plain stdio
 * otherwise.  Returns the process exit status (0 at end of input, 1 when
 * the REPL could not start). */
int tgl_repl_run(lua_State *L);

#endif /* TGL_HOST_REPL_H */
