/*
 * fuzz_idx.c — libFuzzer target "idx": the IDX (MNIST format) reader.
 *
 * Each input is read by tgl_idx_load from an in-memory file, plain or
 * gzip-compressed as the bytes happen to be (zlib's gzdopen reads both).
 * Any bytes must give an array or an error status with a message; an
 * array read has the shape its header gives.
 */
#include "fuzz_common.h"

#include "tgl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tgl_ctx *ctx;
    if (!ctx && !(ctx = tgl_ctx_new()))
        fuzz_die("tgl_ctx_new failed");
    char path[64];
    fuzz_memfile(data, size, path);
    tgl_array *a = NULL;
    tgl_status st = tgl_idx_load(ctx, path, &a);
    if (st) {
        if (!tgl_ctx_error(ctx)[0])
            fuzz_die("idx: tgl_idx_load failed without a message");
    } else {
        /* An uncompressed file's header is its first bytes: the shape
         * must be the one it declares. */
        if (size >= 4 && data[0] == 0 && data[1] == 0 && (size_t)a->ndim == data[3] &&
            size >= 4 + 4 * (size_t)a->ndim) {
            for (int d = 0; d < a->ndim; d++) {
                const uint8_t *p = data + 4 + 4 * d;
                int64_t n = (int64_t)p[0] << 24 | (int64_t)p[1] << 16 | p[2] << 8 | p[3];
                if (a->shape[d] != n)
                    fuzz_die("idx: the shape read is not the header's");
            }
        } else if (size >= 4 && data[0] == 0) {
            fuzz_die("idx: an uncompressed file read with another rank than its header's");
        }
        tgl_array_release(a);
    }
    tgl_ctx_clear_error(ctx);
    return 0;
}
