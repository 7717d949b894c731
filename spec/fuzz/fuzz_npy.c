/*
 * fuzz_npy.c — libFuzzer target "npy": the .npy reader.
 *
 * Each input is read twice, by the two readers that share the header
 * parser: tgl_npy_load (the file reader, streaming from a file; here an
 * in-memory file) and tgl_npy_decode (the buffer reader the .npz reader
 * uses).  Any bytes must give an array or an error status with a message,
 * and the two must agree: the same status, and on success the same bits.
 */
#include "fuzz_common.h"

#include "io/npyfmt.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tgl_ctx *ctx;
    if (!ctx && !(ctx = tgl_ctx_new()))
        fuzz_die("tgl_ctx_new failed");
    char path[64];
    fuzz_memfile(data, size, path);
    tgl_array *a = NULL, *b = NULL;
    tgl_status sa = tgl_npy_load(ctx, path, &a);
    if (sa && !tgl_ctx_error(ctx)[0])
        fuzz_die("tgl_npy_load failed without a message");
    tgl_status sb = tgl_npy_decode(ctx, "tgl_npy_decode", "fuzz input", data, size, &b);
    if (sb && !tgl_ctx_error(ctx)[0])
        fuzz_die("tgl_npy_decode failed without a message");
    if (sa != sb) {
        fprintf(stderr, "npy: the file reader says %d, the buffer reader %d\n", sa, sb);
        abort();
    }
    if (!sa) {
        if (!(a->flags & TGL_ARRAY_CONTIGUOUS) || a->device != TGL_DEVICE_CPU)
            fuzz_die("npy: a loaded array is not a contiguous CPU array");
        if (!tgl_array_equal_bits(a, b))
            fuzz_die("npy: the file and buffer readers give different arrays");
    }
    tgl_array_release(a);
    tgl_array_release(b);
    tgl_ctx_clear_error(ctx);
    return 0;
}
