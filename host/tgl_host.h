/*
 * tgl_host.h — what the tgl host binary exports to tgl's Lua layer, which
 * reaches it through ffi.C.  The build turns this header into FFI
 * declarations (the `host` field of the generated module tgl.cdef) as it
 * does include/tgl.h, so keep it to plain C that LuaJIT can parse: no Lua
 * types here (those go in repl.h).  Outside the host (plain luajit) the
 * declarations exist but the symbols do not.
 */
#ifndef TGL_HOST_H
#define TGL_HOST_H

#if defined(__GNUC__)
#define TGL_HOST_API __attribute__((visibility("default")))
#else
#define TGL_HOST_API
#endif

/* The flag the SIGINT handler sets to 1.  tgl.core hands it to the engine
 * (tgl_ctx_set_interrupt_flag): tgl's long-running C calls poll it and fail
 * with an "interrupted" error. */
TGL_HOST_API volatile int *tgl_host_interrupt_flag(void);

#endif /* TGL_HOST_H */
