/*
 * test_strbuf.c — the engine's string builder (src/engine/strbuf.c):
 * printf and append grow the text past any initial size, byte-exact;
 * cat joins two builders; finish hands over "" for an empty builder and
 * leaves the builder empty and reusable; a builder that ran out of memory
 * (its own or a joined one's) finishes with TGL_ENOMEM and a message, and
 * hands over nothing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "engine/strbuf.h"

static void printf_and_append_grow_past_the_first_allocation(void **state)
{
    (void)state;
    tgl_ctx *ctx = tgl_ctx_new();
    assert_non_null(ctx);
    tgl_sb b = {0};
    static char want[200000];
    size_t n = 0;
    for (int i = 0; i < 10000; i++) {
        tgl_sb_printf(&b, "%d:%s;", i, i % 7 ? "x" : "seven");
        n += (size_t)snprintf(want + n, sizeof want - n, "%d:%s;", i, i % 7 ? "x" : "seven");
        tgl_sb_append(&b, "ab\0c", i % 3 ? 2 : 0);  /* n bytes of s, never past them */
        if (i % 3) {
            memcpy(want + n, "ab", 2);
            n += 2;
        }
    }
    assert_int_equal(b.n, n);
    char *text = NULL;
    assert_int_equal(tgl_sb_finish(&b, ctx, "test", &text), TGL_OK);
    assert_int_equal(strlen(text), n);
    assert_memory_equal(text, want, n);
    tgl_free(text);
    tgl_ctx_free(ctx);
}

static void cat_joins_and_finish_leaves_the_builder_reusable(void **state)
{
    (void)state;
    tgl_ctx *ctx = tgl_ctx_new();
    assert_non_null(ctx);
    tgl_sb a = {0}, b = {0};
    char *text = NULL;
    assert_int_equal(tgl_sb_finish(&a, ctx, "test", &text), TGL_OK);
    assert_string_equal(text, "");
    tgl_free(text);
    tgl_sb_printf(&a, "head %s", "|");
    tgl_sb_cat(&a, &b);  /* an empty builder adds nothing */
    tgl_sb_printf(&b, "%05.1f", 2.25);
    tgl_sb_cat(&a, &b);
    tgl_sb_free(&b);
    assert_null(b.p);
    assert_int_equal(tgl_sb_finish(&a, ctx, "test", &text), TGL_OK);
    assert_string_equal(text, "head |002.2");
    tgl_free(text);
    assert_null(a.p);
    assert_int_equal(a.n, 0);
    tgl_sb_printf(&a, "again");
    assert_int_equal(tgl_sb_finish(&a, ctx, "test", &text), TGL_OK);
    assert_string_equal(text, "again");
    tgl_free(text);
    tgl_ctx_free(ctx);
}

static void a_failed_builder_finishes_with_enomem_and_no_text(void **state)
{
    (void)state;
    tgl_ctx *ctx = tgl_ctx_new();
    assert_non_null(ctx);
    tgl_sb a = {0}, b = {0};
    tgl_sb_printf(&a, "kept until finish");
    b.oom = true;             /* as after a failed realloc */
    tgl_sb_printf(&b, "dropped");
    assert_null(b.p);
    tgl_sb_cat(&a, &b);
    char *text = (char *)"untouched";
    assert_int_equal(tgl_sb_finish(&a, ctx, "render", &text), TGL_ENOMEM);
    assert_string_equal(text, "untouched");
    assert_string_equal(tgl_ctx_error(ctx), "render: out of memory");
    assert_null(a.p);
    assert_false(a.oom);      /* empty again */
    tgl_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(printf_and_append_grow_past_the_first_allocation),
        cmocka_unit_test(cat_joins_and_finish_leaves_the_builder_reusable),
        cmocka_unit_test(a_failed_builder_finishes_with_enomem_and_no_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
