/*
 * fuzz_cache_entry.c — libFuzzer target "cache_entry": the kernel cache's
 * entry check (src/cgen/cache.c).
 *
 * Before a cache entry <key>.so is handed to dlopen, tgl_cache_entry_trusted
 * decides from the open file whether it is whole: a regular file holding an
 * ELF shared object whose program headers, loaded segments and section
 * headers lie inside its size (dlopen of a truncated object can die of
 * SIGBUS).  Each input is an entry's bytes in an in-memory file; the check
 * must not crash, and what it accepts must really satisfy that contract,
 * checked here again in 128-bit arithmetic, where no sum can wrap.  The
 * harness never dlopens: the cache directory is the user's own, and the
 * dynamic loader is not made to survive objects crafted against it.
 */
#include "fuzz_common.h"

#include "cgen/cgint.h"

#include <elf.h>
#include <link.h>
#include <string.h>

/* The contract, independently: every extent [off, off + n*len) inside size. */
static int inside(uint64_t off, uint64_t n, uint64_t len, uint64_t size)
{
    return (unsigned __int128)off + (unsigned __int128)n * len <= size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_memfile(data, size, path);
    if (!tgl_cache_entry_trusted(fd))
        return 0;
    ElfW(Ehdr) eh;
    if (size < sizeof eh)
        fuzz_die("cache_entry: a file shorter than an ELF header was trusted");
    memcpy(&eh, data, sizeof eh);
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_type != ET_DYN)
        fuzz_die("cache_entry: a file that is no ELF shared object was trusted");
    if (!inside(eh.e_phoff, eh.e_phnum, eh.e_phentsize, size) ||
        !inside(eh.e_shoff, eh.e_shnum, eh.e_shentsize, size))
        fuzz_die("cache_entry: trusted with its program or section headers outside the file");
    for (int i = 0; i < eh.e_phnum; i++) {
        ElfW(Phdr) ph;
        memcpy(&ph, data + eh.e_phoff + (size_t)i * sizeof ph, sizeof ph);
        if (ph.p_type == PT_LOAD && !inside(ph.p_offset, 1, ph.p_filesz, size))
            fuzz_die("cache_entry: trusted with a loaded segment outside the file");
    }
    return 0;
}
