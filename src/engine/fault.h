/* fault.h — failure injection (a testing hook, built only with
 * -DTGL_FAULT_INJECT=ON; doc/contributing.md, spec/fault_inject_spec.lua).
 *
 * The build force-includes this header (-include) into the engine's own
 * object files (src/engine, src/io, src/cgen, src/cpu, src/sim, src/scan,
 * src/rop, src/backends.c), so that every allocation and every file-creating
 * call they make goes through a counting wrapper in fault.c without one of
 * the ~400 call sites changing; third-party code (LuaJIT, OpenBLAS, libtcc,
 * zlib) is untouched.  tgl_fault_arm(kind, n) makes the n-th call of a
 * kind after the arming fail once, the way the real call fails (NULL with
 * ENOMEM; -1 or a short count with ENOSPC or EIO).
 *
 * The system headers come first, so that their declarations keep the real
 * names; the redirections are function-like macros, so that a function's
 * address (a table's `.free = free`) and a struct member (`be->free(p)`)
 * stay what they are. */
#ifndef TGL_FAULT_H
#define TGL_FAULT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

#ifndef TGL_FAULT_API
#define TGL_FAULT_API __attribute__((visibility("default")))
#endif

/* The kinds counted: allocations, and writes to files (open for writing,
 * mkstemp/mkdtemp, fwrite/write/fflush on a file opened for writing, its
 * fclose/close, rename, fsync/fdatasync, mkdir). */
enum { TGL_FAULT_ALLOC = 0, TGL_FAULT_IO = 1, TGL_FAULT_KINDS = 2 };

/* Resets the count of kind to 0 and makes its n-th call from now on fail
 * (once); n = 0 only counts.  Returns 0, or -1 for an unknown kind. */
TGL_FAULT_API int tgl_fault_arm(int kind, long n);
/* Calls of kind since it was last armed. */
TGL_FAULT_API long tgl_fault_count(int kind);
/* Failures injected into kind since it was last armed (0 or 1). */
TGL_FAULT_API long tgl_fault_fired(int kind);
/* The name of the call the last injected failure of kind made fail
 * ("malloc", "rename", ...), or "" when none has. */
TGL_FAULT_API const char *tgl_fault_last(int kind);
/* The return address in the engine of that call (NULL when none): where
 * the failure was injected, for addr2line (the spec's TGL_FAULT_VERBOSE). */
TGL_FAULT_API void *tgl_fault_site(int kind);

void *tgl_fault_malloc(size_t n);
void *tgl_fault_calloc(size_t n, size_t size);
void *tgl_fault_realloc(void *p, size_t n);
char *tgl_fault_strdup(const char *s);
char *tgl_fault_strndup(const char *s, size_t n);
int tgl_fault_posix_memalign(void **p, size_t align, size_t n);
void *tgl_fault_aligned_alloc(size_t align, size_t n);
FILE *tgl_fault_fopen(const char *path, const char *mode);
FILE *tgl_fault_fdopen(int fd, const char *mode);
int tgl_fault_open(const char *path, int flags, ...);
int tgl_fault_mkstemp(char *tmpl);
char *tgl_fault_mkdtemp(char *tmpl);
size_t tgl_fault_fwrite(const void *p, size_t size, size_t n, FILE *f);
ssize_t tgl_fault_write(int fd, const void *p, size_t n);
int tgl_fault_fflush(FILE *f);
int tgl_fault_fclose(FILE *f);
int tgl_fault_close(int fd);
int tgl_fault_rename(const char *from, const char *to);
int tgl_fault_fsync(int fd);
int tgl_fault_fdatasync(int fd);
int tgl_fault_mkdir(const char *path, mode_t mode);

#ifndef TGL_FAULT_IMPL
#define malloc(n) tgl_fault_malloc(n)
#define calloc(n, size) tgl_fault_calloc(n, size)
#define realloc(p, n) tgl_fault_realloc(p, n)
#define strdup(s) tgl_fault_strdup(s)
#define strndup(s, n) tgl_fault_strndup(s, n)
#define posix_memalign(p, align, n) tgl_fault_posix_memalign(p, align, n)
#define aligned_alloc(align, n) tgl_fault_aligned_alloc(align, n)
#define fopen(path, mode) tgl_fault_fopen(path, mode)
#define fdopen(fd, mode) tgl_fault_fdopen(fd, mode)
#define open(...) tgl_fault_open(__VA_ARGS__)
#define mkstemp(tmpl) tgl_fault_mkstemp(tmpl)
#define mkdtemp(tmpl) tgl_fault_mkdtemp(tmpl)
#define fwrite(p, size, n, f) tgl_fault_fwrite(p, size, n, f)
#define write(fd, p, n) tgl_fault_write(fd, p, n)
#define fflush(f) tgl_fault_fflush(f)
#define fclose(f) tgl_fault_fclose(f)
#define close(fd) tgl_fault_close(fd)
#define rename(from, to) tgl_fault_rename(from, to)
#define fsync(fd) tgl_fault_fsync(fd)
#define fdatasync(fd) tgl_fault_fdatasync(fd)
#define mkdir(path, mode) tgl_fault_mkdir(path, mode)
#endif

#endif
