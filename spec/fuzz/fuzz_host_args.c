/*
 * fuzz_host_args.c — libFuzzer target "host_args": the tgl host's
 * command-line handling (host/args.c, the code host/main.c runs).
 *
 * The input is split at NUL bytes into words, argv[1..] after the program
 * name "tgl".  host_collect_args must accept, reject (naming the bad word)
 * or ask for help; on acceptance the second pass (host_next_option) and
 * the script's name (host_script_name) must only ever hand out words of
 * argv, in order, before the script.
 */
#include "fuzz_common.h"

#include "args.h"

#include <string.h>

#define MAX_WORDS 64

/* Which word of argv p points into, or -1. */
static int word_of(char **argv, int argc, const char *p)
{
    for (int k = 0; k < argc; k++)
        if (p >= argv[k] && p <= argv[k] + strlen(argv[k]))
            return k;
    return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* One allocation holding the words, each NUL-ended, so that a read
     * past a word's end runs into the next word or out of the block
     * (ASan), never into something that happens to be a string. */
    char *text = malloc(size + 1);
    char *argv[MAX_WORDS + 2];
    int argc = 0;
    if (!text)
        fuzz_die("out of memory");
    memcpy(text, data, size);
    text[size] = '\0';
    argv[argc++] = "tgl";
    for (char *p = text; argc <= MAX_WORDS && p <= text + size; p += strlen(p) + 1)
        argv[argc++] = p;
    argv[argc] = NULL;

    host h;
    memset(&h, 0, sizeof h);
    h.argc = argc;
    h.argv = argv;
    const char *bad = NULL, *why = NULL;
    int r = host_collect_args(&h, &bad, &why);
    if (r == ARGS_BAD) {
        if (!bad || !why || word_of(argv, argc, bad) < 1)
            fuzz_die("host_args: a rejection names no word of argv");
    } else if (r == ARGS_OK) {
        if (h.script < 0 || h.script >= argc)
            fuzz_die("host_args: the script index is outside argv");
        int end = h.script ? h.script : argc, i = 1, last = 0, kind;
        const char *val;
        while ((kind = host_next_option(&h, &i, &val))) {
            int w = word_of(argv, argc, val);
            if ((kind != 'e' && kind != 'l') || w < 1 || w >= end || w < last || i > end)
                fuzz_die("host_args: an option's value is not a word before the script");
            if ((kind == 'e' && !h.exec) || (kind == 'l' && !h.libs))
                fuzz_die("host_args: an option ran that the first pass did not see");
            last = w;
        }
        if (h.script) {
            const char *name = host_script_name(&h);
            if (name && name != argv[h.script])
                fuzz_die("host_args: the script's name is not its word");
            if (!name && strcmp(argv[h.script], "-") != 0)
                fuzz_die("host_args: stdin chosen for a script that is not '-'");
        }
    } else if (r != ARGS_HELP) {
        fuzz_die("host_args: an unknown result");
    }
    free(text);
    return 0;
}
