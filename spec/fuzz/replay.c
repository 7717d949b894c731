/*
 * replay.c — a plain main() for a fuzz harness, without libFuzzer: runs
 * LLVMFuzzerTestOneInput once on every file of the directories given (a
 * target's regression inputs and seed corpus), in name order, so that the
 * normal build (gcc, and the ASan build in CI) replays every input that
 * once crashed.  A directory that does not exist counts as empty; a
 * crash, a sanitizer report or a harness's abort fails the run.
 */
#define TGL_FUZZ_REPLAY 1 /* the harness defines what fuzz_common.h defines once */
#include "fuzz_common.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* Reads path whole into a malloc'd buffer (*size bytes); NULL on error. */
static uint8_t *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct stat st;
    uint8_t *buf = NULL;
    if (fstat(fileno(f), &st) == 0 && (buf = malloc((size_t)st.st_size + 1)) &&
        fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        free(buf);
        buf = NULL;
    }
    *size = (size_t)st.st_size;
    fclose(f);
    return buf;
}

int main(int argc, char **argv)
{
    int total = 0;
#ifndef TGL_FUZZ_ASAN
    /* Without ASan (fuzz_common.h bounds single allocations there), the
     * address space is bounded instead: an input asking for a huge array
     * gets tgl's out-of-memory error, not the machine's memory. */
    struct rlimit lim = {(rlim_t)8 << 30, (rlim_t)8 << 30};
    if (setrlimit(RLIMIT_AS, &lim) != 0)
        fprintf(stderr, "replay: cannot bound the address space: %s\n", strerror(errno));
#endif
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    for (int d = 1; d < argc; d++) {
        struct dirent **names;
        int n = scandir(argv[d], &names, NULL, by_name);
        if (n < 0) {
            if (errno == ENOENT)
                continue;
            fprintf(stderr, "replay: cannot read %s: %s\n", argv[d], strerror(errno));
            return 1;
        }
        for (int i = 0; i < n; i++) {
            char path[4096];
            struct stat st;
            snprintf(path, sizeof path, "%s/%s", argv[d], names[i]->d_name);
            free(names[i]);
            if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
                continue;
            size_t size;
            uint8_t *buf = slurp(path, &size);
            if (!buf) {
                fprintf(stderr, "replay: cannot read %s\n", path);
                return 1;
            }
            fprintf(stderr, "replay: %s\n", path);
            LLVMFuzzerTestOneInput(buf, size);
            free(buf);
            total++;
        }
        free(names);
    }
    printf("replay: %d inputs, none crashed\n", total);
    return 0;
}
