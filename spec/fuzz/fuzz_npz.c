/*
 * fuzz_npz.c — libFuzzer target "npz": the .npz (zip of .npy) reader.
 *
 * Each input is an archive read by tgl_npz_load from an in-memory file.
 * Any bytes must give an archive or an error status with a message; an
 * archive read holds n named, contiguous CPU arrays with distinct names.
 */
#include "fuzz_common.h"

#include "tgl.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tgl_ctx *ctx;
    if (!ctx && !(ctx = tgl_ctx_new()))
        fuzz_die("tgl_ctx_new failed");
    char path[64];
    fuzz_memfile(data, size, path);
    tgl_npz *z = NULL;
    tgl_status st = tgl_npz_load(ctx, path, &z);
    if (st) {
        if (!tgl_ctx_error(ctx)[0])
            fuzz_die("npz: tgl_npz_load failed without a message");
        if (z)
            fuzz_die("npz: a failed load set its output");
    } else {
        for (int i = 0; i < z->n; i++) {
            const tgl_array *a = z->arrays[i];
            if (!z->names[i] || !a || !(a->flags & TGL_ARRAY_CONTIGUOUS) ||
                a->device != TGL_DEVICE_CPU)
                fuzz_die("npz: an entry is not a named contiguous CPU array");
            for (int j = 0; j < i; j++)
                if (strcmp(z->names[i], z->names[j]) == 0)
                    fuzz_die("npz: two entries have one name");
        }
        tgl_npz_free(z);
    }
    tgl_ctx_clear_error(ctx);
    return 0;
}
