/* tests/test_tokenizer_json_mem.c — gm_tokenizer_from_hf_json (tokenizer.json from memory, the
 * fuzz entry point) and the regression found by fuzz/fuzz_tokenizer_json: a tiny file naming a
 * huge token id used to make millions of "[PADn]" holes (hundreds of MB, seconds); ids must now
 * lie within the entries the file lists plus 64Ki of slack. Also checks that the memory reader
 * and the folder reader give the same vocabulary for the committed tiny tokenizer.json. */
#include <string.h>
#include <time.h>

#include "support/test.h"
#include "text/tokenizer.h"

static gm_status load(const char *json, gm_tokenizer **tok, gm_error *err) {
    return gm_tokenizer_from_hf_json(json, strlen(json), "mem.json", tok, err);
}

TEST(huge_id_is_rejected_fast) {
    const char *cases[] = {
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":16777215}}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":200000}}}",
        "{\"added_tokens\":[{\"id\":16000000,\"content\":\"<x>\"}],\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0]]}}",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gm_tokenizer *tok = NULL;
        gm_error err = {0};
        clock_t t0 = clock();
        gm_status st = load(cases[i], &tok, &err);
        double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
        CHECK_EQ_INT(st, GM_ERR_FORMAT);
        CHECK(tok == NULL);
        CHECK_MSG(strstr(err.msg, "out of range") != NULL, "message: %s", err.msg);
        CHECK_MSG(secs < 0.5, "case %zu took %.2f s", i, secs); /* was seconds before the bound */
    }
}

TEST(small_gaps_still_load) {
    /* ids 0, 1 and 40: 38 holes, well inside the slack; holes are UNUSED, decode to nothing */
    gm_tokenizer *tok = NULL;
    gm_error err = {0};
    CHECK_OK(load("{\"added_tokens\":[{\"id\":40,\"content\":\"<start_of_turn>\",\"special\":true}],"
                  "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1}}}", &tok, &err), &err);
    if (!tok) return;
    CHECK_EQ_INT(gm_tokenizer_n_vocab(tok), 41);
    CHECK_EQ_INT(gm_token_get_type(tok, 20), GM_TOKEN_UNUSED);
    CHECK_EQ_INT(gm_token_get_type(tok, 40), GM_TOKEN_CONTROL);
    CHECK_EQ_INT(gm_token_id(tok, "<start_of_turn>", 15), 40);
    gm_tokenizer_free(tok);
    /* exactly at the bound: 2 entries + 65536 slack -> the largest id allowed is 65537 */
    CHECK_OK(load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":65537}}}", &tok, &err), &err);
    if (tok) CHECK_EQ_INT(gm_tokenizer_n_vocab(tok), 65538);
    gm_tokenizer_free(tok);
    tok = NULL;
    CHECK_EQ_INT(load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":65538}}}", &tok, &err), GM_ERR_FORMAT);
}

TEST(memory_matches_folder) {
    size_t len = 0;
    unsigned char *buf = test_read_file(test_data_path("tokenizer/tiny/hf_json/tokenizer.json"), &len);
    CHECK(buf != NULL);
    if (!buf) return;
    gm_tokenizer *a = NULL, *b = NULL;
    gm_error err = {0};
    CHECK_OK(gm_tokenizer_from_hf_json(buf, len, "tokenizer.json", &a, &err), &err);
    CHECK_OK(gm_tokenizer_from_hf_dir(test_data_path("tokenizer/tiny/hf_json"), &b, &err), &err);
    free(buf);
    if (!a || !b) { gm_tokenizer_free(a); gm_tokenizer_free(b); return; }
    CHECK_EQ_INT(gm_tokenizer_n_vocab(a), gm_tokenizer_n_vocab(b));
    int same = 1;
    for (int32_t id = 0; id < gm_tokenizer_n_vocab(a) && id < gm_tokenizer_n_vocab(b); id++) {
        size_t la, lb;
        const char *pa = gm_token_text(a, id, &la), *pb = gm_token_text(b, id, &lb);
        same &= la == lb && !memcmp(pa, pb, la);
    }
    CHECK(same);
    /* the same text encodes the same way (the config only adds ids / flags, not pieces here) */
    const char *text = "Hello world <b>x</b>\n\n";
    int32_t *ia = NULL, *ib = NULL;
    size_t na = 0, nb = 0;
    CHECK_OK(gm_tokenize(a, text, strlen(text), false, true, &ia, &na, &err), &err);
    CHECK_OK(gm_tokenize(b, text, strlen(text), false, true, &ib, &nb, &err), &err);
    CHECK(na == nb && na > 0 && !memcmp(ia, ib, na * sizeof *ia));
    free(ia);
    free(ib);
    gm_tokenizer_free(a);
    gm_tokenizer_free(b);
}

TEST(bad_arguments) {
    gm_tokenizer *tok = (gm_tokenizer *)1;
    gm_error err = {0};
    CHECK_EQ_INT(gm_tokenizer_from_hf_json(NULL, 5, "x", &tok, &err), GM_ERR_ARG);
    CHECK(tok == NULL);
    CHECK_EQ_INT(gm_tokenizer_from_hf_json("{", 1, "x.json", &tok, &err), GM_ERR_FORMAT);
    CHECK(strstr(err.msg, "x.json") != NULL);
    CHECK_EQ_INT(gm_tokenizer_from_hf_json("{}", 2, NULL, NULL, &err), GM_ERR_ARG);
}

int main(void) {
    RUN(huge_id_is_rejected_fast);
    RUN(small_gaps_still_load);
    RUN(memory_matches_folder);
    RUN(bad_arguments);
    return test_summary();
}
