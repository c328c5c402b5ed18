/* fuzz/fuzz_json_schema.c — libFuzzer harness for the JSON-schema translator (grammar/schema.c,
 * regex.c). The input is a schema. Properties (abort() on violation):
 *  - translation returns GM_OK or an error with a message;
 *  - on success the GBNF it produced compiles (the translator never emits a grammar our own parser
 *    refuses, except when a size limit is hit: GM_ERR_NOMEM) and a matcher starts on it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "gemma_grammar.h"

static void fail(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_json_schema: property violated: %s: %s\n", what, detail);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *gbnf = NULL;
    gm_error err = {0};
    gm_status st = gm_json_schema_to_gbnf((const char *)data, size, NULL, &gbnf, &err);
    if (st) {
        if (!err.msg[0] || gbnf) fail("an error without a message, or text with an error", err.msg);
        return 0;
    }
    gm_grammar *g = NULL;
    st = gm_grammar_from_gbnf(gbnf, strlen(gbnf), &g, &err);
    if (st && st != GM_ERR_NOMEM && !strstr(err.msg, "left-recursive") && !strstr(err.msg, "never finish"))
        fail("the generated grammar does not compile", err.msg);
    /* left recursion / never-finishing rules come from schemas such as {"$ref": "#"}: refused, fine */
    if (!st) {
        gm_grammar_ctx *c = NULL;
        gm_matcher *m = NULL;
        if (!gm_grammar_ctx_new(g, NULL, &c, &err) && !gm_matcher_new(c, &m, &err)) {
            bool ok;
            gm_matcher_accept_bytes(m, "{\"a\": [1, \"x\"]}", 16, &ok, &err);
        }
        gm_matcher_free(m);
        gm_grammar_ctx_free(c);
    }
    gm_grammar_free(g);
    free(gbnf);
    return 0;
}
