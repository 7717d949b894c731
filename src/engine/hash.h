/*
 * hash.h — the engine's one non-cryptographic hash (internal): a mixer
 * that folds 64-bit words into a hash, and FNV-1a for bytes.  Nodes are
 * hash-consed, fused programs interned and kernels named with it.  Keys
 * that must not collide across processes (the kernel cache on disk) use
 * SHA-256 instead (src/cgen/compile.c).
 */
#ifndef TGL_HASH_H
#define TGL_HASH_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a's offset basis: a starting h for tgl_hash_bytes. */
#define TGL_HASH_FNV_BASIS 0xcbf29ce484222325ull

/* h with the word v folded in (a golden-ratio combine, then one multiply
 * and xor-shift of MurmurHash3's finalizer).  Any h may start. */
static inline uint64_t tgl_hash_mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

/* h extended by the n bytes at p, FNV-1a style. */
static inline uint64_t tgl_hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

#endif
