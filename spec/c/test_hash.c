/*
 * test_hash.c — the engine's non-cryptographic hash (src/engine/hash.h):
 * tgl_hash_bytes is FNV-1a (the published 64-bit test vectors; kernel
 * names derive from it) and continues a running hash; tgl_hash_mix
 * depends on every word and on their order.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine/hash.h"

static void hash_bytes_is_fnv1a_and_continues_a_running_hash(void **state)
{
    (void)state;
    assert_true(tgl_hash_bytes(TGL_HASH_FNV_BASIS, "", 0) == 0xcbf29ce484222325ull);
    assert_true(tgl_hash_bytes(TGL_HASH_FNV_BASIS, "a", 1) == 0xaf63dc4c8601ec8cull);
    assert_true(tgl_hash_bytes(TGL_HASH_FNV_BASIS, "foobar", 6) == 0x85944171f73967e8ull);
    uint64_t h = tgl_hash_bytes(TGL_HASH_FNV_BASIS, "foo", 3);
    assert_true(tgl_hash_bytes(h, "bar", 3) == 0x85944171f73967e8ull);
}

static void hash_mix_depends_on_every_word_and_their_order(void **state)
{
    (void)state;
    uint64_t ab = tgl_hash_mix(tgl_hash_mix(1, 2), 3);
    assert_true(ab == tgl_hash_mix(tgl_hash_mix(1, 2), 3));
    assert_true(ab != tgl_hash_mix(tgl_hash_mix(1, 3), 2));
    assert_true(ab != tgl_hash_mix(tgl_hash_mix(0, 2), 3));
    assert_true(ab != tgl_hash_mix(tgl_hash_mix(1, 2), 4));
    /* golden-ratio combine, then h *= 0xff51afd7ed558ccd; h ^= h >> 33 */
    uint64_t h = 0 ^ (0 + 0x9e3779b97f4a7c15ull);
    h *= 0xff51afd7ed558ccdull;
    assert_true(tgl_hash_mix(0, 0) == (h ^ (h >> 33)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hash_bytes_is_fnv1a_and_continues_a_running_hash),
        cmocka_unit_test(hash_mix_depends_on_every_word_and_their_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
