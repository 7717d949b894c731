/*
 * args.h — the tgl host's command line: what it asked for, and the walk
 * over it.  Kept apart from main.c (which needs a Lua state for everything
 * else) so that the fuzz target host_args (spec/fuzz) runs this very code
 * on arbitrary argv arrays.
 */
#ifndef TGL_HOST_ARGS_H
#define TGL_HOST_ARGS_H

/* What the command line asked for; argv indexes point into argv. */
typedef struct host {
    int argc;
    char **argv;
    int script;       /* argv index of the script ("-" = stdin), 0 if none */
    int interactive;  /* -i */
    int version;      /* -v */
    int cache;        /* --cache-info (1) or --cache-clear (2)              */
    int calibrate;    /* --calibrate                                        */
    int exec;         /* at least one -e */
    int libs;         /* at least one -l */
    int status;       /* the exit status, set by host_main */
} host;

enum { ARGS_OK, ARGS_HELP, ARGS_BAD };

/* First pass over h->argv (h->argc entries, argv[0] the program), as
 * luajit's collectargs: validates the options and finds the script; -e
 * and -l run later, in order, once the state exists.  On ARGS_BAD, *bad
 * names the offending argument and *why says what. */
int host_collect_args(host *h, const char **bad, const char **why);

/* The second pass, over what host_collect_args accepted: the next -e or -l
 * at or after *i (start with *i = 1), before the script.  Returns 'e' or
 * 'l' with its chunk or module name in *val and *i past it, or 0 when
 * none is left. */
int host_next_option(const host *h, int *i, const char **val);

/* The script's file name, or NULL for stdin ("-", unless it came after
 * "--": then it is a file named "-").  Only when h->script is set. */
const char *host_script_name(const host *h);

#endif /* TGL_HOST_ARGS_H */
