/* tests/test_error.c — core/error.c: gm_fail and gm_fail_prefix keep the failing status whether
 * or not the caller passed an error struct (a library caller may pass err = NULL), and a prefixed
 * message keeps the original text after the prefix. */
#include <string.h>

#include "core/error.h"
#include "gemma.h"
#include "support/test.h"

/* The caller pattern used across the library: a callee fails with st, the caller adds context. */
static gm_status callee(gm_status code, gm_error *err) { return gm_fail(err, code, "callee failed (%d)", (int)code); }
static gm_status caller(gm_status code, gm_error *err) {
    gm_status st = callee(code, err);
    if (st) return gm_fail_prefix(err, "caller %s: ", "ctx");
    return GM_OK;
}

TEST(fail_prefix_keeps_status_without_err) {
    const gm_status codes[] = {GM_ERR_CONTEXT, GM_ERR_NOMEM, GM_ERR_IO, GM_ERR_ARG, GM_ERR_FORMAT, GM_ERR_STATE};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        CHECK_EQ_INT(caller(codes[i], NULL), codes[i]);
        gm_error err = {0};
        CHECK_EQ_INT(caller(codes[i], &err), codes[i]);
        CHECK_EQ_INT(err.code, codes[i]);
        CHECK_MSG(!strncmp(err.msg, "caller ctx: callee failed", 25), "%s", err.msg);
    }
}

TEST(fail_prefix_direct) {
    gm_error err = {0};
    gm_fail(&err, GM_ERR_NOMEM, "out of memory");
    CHECK_EQ_INT(gm_fail_prefix_code(&err, GM_ERR_NOMEM, "a.gguf: "), GM_ERR_NOMEM);
    CHECK(!strcmp(err.msg, "a.gguf: out of memory"));
    CHECK_EQ_INT(gm_fail_prefix_code(NULL, GM_ERR_CONTEXT, "x: "), GM_ERR_CONTEXT);
    /* a failure path never reports success, even if handed GM_OK by mistake */
    CHECK(gm_fail_prefix_code(NULL, GM_OK, "x: ") != GM_OK);
    /* the callee failed without filling err (a raw status): the message names the status instead
     * of repeating a stale one, and err->code matches what is returned */
    gm_error stale = {0};
    gm_fail(&stale, GM_ERR_ARG, "an old, unrelated failure");
    CHECK_EQ_INT(gm_fail_prefix_code(&stale, GM_ERR_NOMEM, "forward: "), GM_ERR_NOMEM);
    CHECK_EQ_INT(stale.code, GM_ERR_NOMEM);
    CHECK_MSG(!strcmp(stale.msg, "forward: out of memory"), "%s", stale.msg);
    /* a long prefix truncates, NUL-terminated */
    char big[2000];
    memset(big, 'p', sizeof big - 1);
    big[sizeof big - 1] = 0;
    gm_fail(&err, GM_ERR_IO, "tail");
    CHECK_EQ_INT(gm_fail_prefix_code(&err, GM_ERR_IO, "%s", big), GM_ERR_IO);
    CHECK_EQ_INT(strlen(err.msg), sizeof err.msg - 1);
}

/* Through the public API: gm_detokenize prefixes gm_token_to_piece's error. */
TEST(library_call_without_err) {
    gm_error err = {0};
    gm_tokenizer *t = NULL;
    CHECK_OK(gm_tokenizer_open(test_data_path("tokenizer/tiny/hf_json"), &t, &err), &err);
    if (!t) return;
    const int32_t ids[2] = {2, 1 << 30};
    char *out = NULL;
    size_t len = 0;
    CHECK_EQ_INT(gm_detokenize(t, ids, 2, false, &out, &len, NULL), GM_ERR_ARG);
    CHECK(out == NULL);
    CHECK_EQ_INT(gm_detokenize(t, ids, 2, false, &out, &len, &err), GM_ERR_ARG);
    CHECK_MSG(strstr(err.msg, "ids[1]: ") == err.msg && strstr(err.msg, "out of range"), "%s", err.msg);
    gm_tokenizer_free(t);
}

int main(void) {
    RUN(fail_prefix_keeps_status_without_err);
    RUN(fail_prefix_direct);
    RUN(library_call_without_err);
    return test_summary();
}
