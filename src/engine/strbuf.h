/*
 * strbuf.h — the engine's string builder, tgl_sb (internal; src/engine
 * and src/cgen share it): append text or printf into it, then finish it
 * into malloc'd text the caller frees.  A failed allocation drops all
 * further output and finish reports it, so a builder need not check each
 * append.
 */
#ifndef TGL_STRBUF_H
#define TGL_STRBUF_H

#include "tgl.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* Zero-initialize ({0}) to start empty.  p is NUL-terminated once
 * anything was appended; oom is set when memory ran out. */
typedef struct tgl_sb {
    char *p;
    size_t n, cap;
    bool oom;
} tgl_sb;

/* Appends n bytes of s. */
void tgl_sb_append(tgl_sb *b, const char *s, size_t n);

/* Appends src's text; b fails too if src ran out of memory. */
void tgl_sb_cat(tgl_sb *b, const tgl_sb *src);

/* Appends printf-formatted text (vprintf: from a va_list). */
void tgl_sb_printf(tgl_sb *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void tgl_sb_vprintf(tgl_sb *b, const char *fmt, va_list ap);

/* Hands the text to *text (malloc'd, "" when nothing was appended; release
 * with free or tgl_free) and leaves b empty.  When memory ran out: frees
 * the text, leaves *text alone and returns TGL_ENOMEM with
 * "<who>: out of memory" in ctx. */
tgl_status tgl_sb_finish(tgl_sb *b, tgl_ctx *ctx, const char *who, char **text);

/* Frees b's text and leaves b empty (the path that gives no text). */
void tgl_sb_free(tgl_sb *b);

#endif
