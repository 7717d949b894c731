/*
 * fuzz_common.h — what the libFuzzer harnesses of spec/fuzz share.
 *
 * The file readers are fuzzed through their real entry points, which take
 * a path: each input is written into one anonymous in-memory file
 * (memfd_create), reached as /proc/self/fd/N, so the reader runs exactly
 * the code a file on disk runs (open, fstat, the reads) without touching
 * the disk.  The harnesses are also linked into the plain replay driver
 * (replay.c), built by gcc without libFuzzer.
 */
#ifndef TGL_FUZZ_COMMON_H
#define TGL_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional (weak): set-up before the first input, outside its time limit. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* Under AddressSanitizer (the fuzz build, the ASan test build): an
 * allocation over 1 GiB fails (returns NULL) instead of being made, so
 * that an input asking for a huge array, as a graph may (arange(0, 2^31)
 * is 16 GiB), exercises tgl's out-of-memory error instead of exhausting
 * the machine; libFuzzer's own limit (-malloc_limit_mb) is above it.
 * ASAN_OPTIONS may still override these. */
#if defined(__SANITIZE_ADDRESS__)
#define TGL_FUZZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TGL_FUZZ_ASAN 1
#endif
#endif
/* Defined once, in the harness: replay.c (TGL_FUZZ_REPLAY) includes this
 * header too.  Not weak: the sanitizer runtime's own default is weak. */
#if defined(TGL_FUZZ_ASAN) && !defined(TGL_FUZZ_REPLAY)
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1:max_allocation_size_mb=1024";
}
#endif

/* Aborts with a message: a harness's own set-up failed (not a finding in
 * the code under test, but it must not pass silently either). */
static inline void fuzz_die(const char *what)
{
    fprintf(stderr, "fuzz harness: %s\n", what);
    abort();
}

/* The in-memory file, created once; each input replaces its contents.
 * path receives /proc/self/fd/N; returns the descriptor. */
static inline int fuzz_memfile(const uint8_t *data, size_t size, char path[64])
{
    static int fd = -1;
    if (fd < 0 && (fd = memfd_create("tgl-fuzz", MFD_CLOEXEC)) < 0)
        fuzz_die("memfd_create failed");
    if (ftruncate(fd, 0) != 0)
        fuzz_die("ftruncate failed");
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(fd, data + done, size - done, (off_t)done);
        if (w <= 0)
            fuzz_die("pwrite failed");
        done += (size_t)w;
    }
    snprintf(path, 64, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
