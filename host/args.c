/*
 * args.c — the tgl host's command-line parsing (args.h): main.c's, and the
 * fuzz target host_args's.  No Lua and no engine here: only argv.
 */
#include "args.h"

#include <stddef.h>
#include <string.h>

int host_collect_args(host *h, const char **bad, const char **why)
{
    int i;
    for (i = 1; i < h->argc; i++) {
        const char *a = h->argv[i];
        if (a[0] != '-' || a[1] == '\0') {  /* the script, or "-" for stdin */
            h->script = i;
            return ARGS_OK;
        }
        if (strcmp(a, "--") == 0) {
            if (i + 1 < h->argc)
                h->script = i + 1;
            return ARGS_OK;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
            return ARGS_HELP;
        if (strcmp(a, "--cache-info") == 0 || strcmp(a, "--cache-clear") == 0) {
            h->cache = a[8] == 'i' ? 1 : 2;
            continue;
        }
        if (strcmp(a, "--calibrate") == 0) {
            h->calibrate = 1;
            continue;
        }
        if (strcmp(a, "-i") == 0) {
            h->interactive = 1;
        } else if (strcmp(a, "-v") == 0) {
            h->version = 1;
        } else if (a[1] == 'e' || a[1] == 'l') {
            if (a[1] == 'e')
                h->exec = 1;
            else
                h->libs = 1;
            /* the argument is attached ("-eprint(1)") or the next word */
            if (a[2] == '\0' && ++i >= h->argc) {
                *bad = a;
                *why = "needs an argument";
                return ARGS_BAD;
            }
        } else {
            *bad = a;
            *why = "is not a known option";
            return ARGS_BAD;
        }
    }
    return ARGS_OK;
}

int host_next_option(const host *h, int *i, const char **val)
{
    int end = h->script ? h->script : h->argc;
    for (; *i < end; (*i)++) {
        const char *a = h->argv[*i];
        if (a[0] != '-' || (a[1] != 'e' && a[1] != 'l'))
            continue;
        *val = a[2] ? a + 2 : h->argv[++*i];
        (*i)++;
        return a[1];
    }
    return 0;
}

const char *host_script_name(const host *h)
{
    const char *fname = h->argv[h->script];
    if (strcmp(fname, "-") == 0 && strcmp(h->argv[h->script - 1], "--") != 0)
        return NULL;
    return fname;
}
