/* fuzz/fuzz_grammar.c — libFuzzer harness for the GBNF parser and compiler (grammar/gbnf.c,
 * compile.c) and the matcher. The input is cut at the first NUL: the part before is the grammar,
 * the part after is text to feed the matcher byte by byte. Properties (abort() on violation):
 *  - compiling returns GM_OK or an error with a message, never crashes, hangs or leaks;
 *  - on success, matching the text never fails with anything but a limit (GM_ERR_NOMEM), a refused
 *    byte leaves the state unchanged, rollback of every step returns to the start state, and a
 *    clone taken midway agrees with the original on the rest. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "gemma_grammar.h"

static void fail(const char *what) {
    fprintf(stderr, "fuzz_grammar: property violated: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : "";
    size_t tlen = nul ? size - glen - 1 : 0;
    gm_grammar *g = NULL;
    gm_error err = {0};
    gm_status st = gm_grammar_from_gbnf((const char *)data, glen, &g, &err);
    if (st) {
        if (!err.msg[0] || g) fail("an error without a message, or a grammar with an error");
        return 0;
    }
    gm_grammar_ctx *c = NULL;
    gm_matcher *m = NULL, *k = NULL;
    if (gm_grammar_ctx_new(g, NULL, &c, &err) || gm_matcher_new(c, &m, &err)) {
        if (err.code != GM_ERR_NOMEM) fail("a compiled grammar without a matcher");
        gm_grammar_ctx_free(c);
        gm_grammar_free(g);
        return 0;
    }
    bool start_end = gm_matcher_accepts_end(m);
    size_t taken = 0;
    for (size_t i = 0; i < tlen && i < 4096; i++) {
        bool ok = false;
        size_t before = gm_matcher_n_steps(m);
        st = gm_matcher_accept_bytes(m, text + i, 1, &ok, &err);
        if (st && st != GM_ERR_NOMEM) fail("matching failed with something but a limit");
        if (st) break;
        if (!ok && gm_matcher_n_steps(m) != before) fail("a refused byte changed the state");
        if (ok) taken++;
        if (i == tlen / 2 && !k && gm_matcher_clone(m, &k, &err)) break;
    }
    if (k) { /* the clone replays the same second half */
        for (size_t i = tlen / 2 + 1; i < tlen && i < 4096; i++) {
            bool a = false, b = false;
            if (gm_matcher_check_token(k, 0, &a, &err) != GM_ERR_STATE) fail("check_token without a vocabulary");
            (void)b;
            if (gm_matcher_accept_bytes(k, text + i, 1, &a, &err)) break;
        }
        if (gm_matcher_accepts_end(k) != gm_matcher_accepts_end(m) && tlen < 4096) fail("a clone disagrees");
    }
    if (gm_matcher_rollback(m, taken, &err) || gm_matcher_accepts_end(m) != start_end) fail("rollback to the start");
    gm_matcher_free(k);
    gm_matcher_free(m);
    gm_grammar_ctx_free(c);
    gm_grammar_free(g);
    return 0;
}
