/*
 * strbuf.c — the engine's string builder, tgl_sb (strbuf.h).  The buffer
 * doubles; printf formats straight into its free space and grows only
 * when the text did not fit.
 */
#include "engine/strbuf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Makes room for extra more bytes and the NUL; false (and oom) if none. */
static bool reserve(tgl_sb *b, size_t extra)
{
    if (b->oom)
        return false;
    if (extra < b->cap - b->n)
        return true;
    if (extra > SIZE_MAX / 4 - b->n) {
        b->oom = true;
        return false;
    }
    size_t need = b->n + extra + 1, cap = b->cap ? b->cap * 2 : 256;
    while (cap < need)
        cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) {
        b->oom = true;
        return false;
    }
    b->p = q;
    b->cap = cap;
    return true;
}

void tgl_sb_append(tgl_sb *b, const char *s, size_t n)
{
    if (n == 0 || !reserve(b, n))
        return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void tgl_sb_cat(tgl_sb *b, const tgl_sb *src)
{
    if (src->oom)
        b->oom = true;
    else
        tgl_sb_append(b, src->p, src->n);
}

void tgl_sb_vprintf(tgl_sb *b, const char *fmt, va_list ap)
{
    if (b->oom)
        return;
    va_list aq;
    va_copy(aq, ap);
    int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, aq);
    va_end(aq);
    if (k < 0) {           /* an encoding error: treated as a failed build */
        b->oom = true;
        return;
    }
    if (b->p && (size_t)k < b->cap - b->n) {
        b->n += (size_t)k;
        return;
    }
    if (!reserve(b, (size_t)k))
        return;
    vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
    b->n += (size_t)k;
}

void tgl_sb_printf(tgl_sb *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tgl_sb_vprintf(b, fmt, ap);
    va_end(ap);
}

tgl_status tgl_sb_finish(tgl_sb *b, tgl_ctx *ctx, const char *who, char **text)
{
    if (!b->oom && !b->p && (b->p = malloc(1)) != NULL)
        b->p[0] = '\0';
    if (b->oom || !b->p) {
        tgl_sb_free(b);
        return tgl_ctx_set_error(ctx, TGL_ENOMEM, "%s: out of memory", who);
    }
    *text = b->p;
    *b = (tgl_sb){0};
    return TGL_OK;
}

void tgl_sb_free(tgl_sb *b)
{
    free(b->p);
    *b = (tgl_sb){0};
}
