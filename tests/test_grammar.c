/* tests/test_grammar.c — token masks (grammar/mask.c) and vocabularies: masks on a small vocabulary with the awkward
 * cases and on the default model's (every allowed token advances, refused ones do not), random walks through the
 * real vocabulary that always end in valid JSON (tests/cli_grammar.sh runs only those, GM_GRAMMAR_ONLY_WALKS, and
 * validates them), marker tokens and extra END ids in a vocabulary. */
#include <cjson/cJSON.h>
#include <time.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "support/grammar_check.h"
#include "text/tokenizer.h"

/* A small vocabulary with the awkward cases: tokens spanning several grammar elements, partial
 * UTF-8 characters, duplicates, an empty piece, a control token and an END token. */
TEST(mask_small_vocab) {
    const char *pieces[] = {"{", "}", "\"", "\"a", "a\":", ":", " ", "1", "12", "2}", "\"x\": 1}", "\xC3", "\xA9",
                            "é", "a", "<ctl>", "", "<eos>", "{\"", "\"}", "\"a\": \"", "\xE6\xBC", "\xA2", "a", ",", "\n  "};
    size_t n = sizeof pieces / sizeof pieces[0];
    size_t lens[32];
    uint8_t kinds[32];
    for (size_t i = 0; i < n; i++) {
        lens[i] = strlen(pieces[i]);
        kinds[i] = GM_GTOKEN_TEXT;
    }
    kinds[15] = GM_GTOKEN_NEVER;
    kinds[17] = GM_GTOKEN_END;
    gm_gvocab *v = NULL;
    gm_error err = {0};
    CHECK_OK(gm_gvocab_new((int32_t)n, pieces, lens, kinds, &v, &err), &err);
    const char *sch = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"x\":{\"type\":\"integer\"}}}";
    gm_grammar *g = NULL;
    CHECK_OK(gm_grammar_from_json_schema(sch, strlen(sch), NULL, &g, &err), &err);
    gm_grammar_ctx *c = NULL;
    gm_matcher *m = NULL;
    CHECK_OK(gm_grammar_ctx_new(g, v, &c, &err), &err);
    CHECK_OK(gm_matcher_new(c, &m, &err), &err);
    /* {"a": "é漢" , "x": 12} then <eos>, one token at a time, checking the mask at each step */
    int path[] = {18, 4, 6, 2, 11, 12, 21, 22, 2, 24, 6, 10};
    char where[32];
    for (size_t k = 0; k < sizeof path / sizeof path[0]; k++) {
        snprintf(where, sizeof where, "step %zu", k);
        gt_check_mask_exact(m, (int32_t)n, where);
        bool ok = false;
        CHECK_OK(gm_matcher_accept_token(m, path[k], &ok, &err), &err);
        CHECK_MSG(ok, "step %zu: token '%s' refused", k, pieces[path[k]]);
    }
    CHECK(gm_matcher_accepts_end(m));
    gt_check_mask_exact(m, (int32_t)n, "end");
    uint32_t mask[1];
    CHECK_OK(gm_matcher_fill_mask(m, mask, &err), &err);
    CHECK(gt_mask_bit(mask, 17) && !gt_mask_bit(mask, 15) && !gt_mask_bit(mask, 16));
    bool ok = false;
    CHECK_OK(gm_matcher_accept_token(m, 17, &ok, &err), &err);
    CHECK(ok && gm_matcher_is_finished(m));
    CHECK_OK(gm_matcher_fill_mask(m, mask, &err), &err);
    CHECK(mask[0] == 0); /* nothing after the end */
    gm_matcher_free(m);
    gm_grammar_ctx_free(c);
    gm_grammar_free(g);
    gm_gvocab_free(v);
}

/* Random walks through the default model's vocabulary picking only allowed tokens: each step's
 * mask is checked (a sample of allowed tokens advance, a sample of refused ones do not; the whole
 * vocabulary at a few steps), and every walk ends in JSON that the schema validates (checked by
 * cJSON here, by jsonschema in tests/grammar_check.py through GM_GRAMMAR_WALKS). */
typedef struct rng { uint64_t s; } rng;
static uint32_t rnd(rng *r) {
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(r->s >> 33);
}

static bool closing_piece(const char *p, size_t l) {
    for (size_t i = 0; i < l; i++) if (p[i] == '"' || p[i] == '}' || p[i] == ']' || p[i] == ',') return true;
    return false;
}

static void walk_schema(gm_tokenizer *tok, gm_gvocab *v, const cJSON *schema, const char *name, rng *r, FILE *out) {
    gm_grammar *g = gt_schema_grammar(schema, name);
    if (!g) return;
    gm_error err = {0};
    gm_grammar_ctx *c = NULL;
    gm_matcher *m = NULL;
    CHECK_OK(gm_grammar_ctx_new(g, v, &c, &err), &err);
    CHECK_OK(gm_matcher_new(c, &m, &err), &err);
    int32_t n = gm_gvocab_size(v);
    uint32_t *mask = calloc(((size_t)n + 31) / 32, 4);
    int32_t *allowed = malloc((size_t)n * sizeof(int32_t));
    char *text = calloc(1, 1);
    size_t tl = 0;
    bool ended = false;
    for (int step = 0; step < 600 && !ended; step++) {
        if (step < 2 || step % 50 == 49) gt_check_mask_exact(m, n, name);
        CHECK_OK(gm_matcher_fill_mask(m, mask, &err), &err);
        size_t na = 0, closing = 0;
        int32_t end = -1;
        for (int32_t i = 0; i < n; i++) {
            if (!gt_mask_bit(mask, i)) continue;
            if (gm_token_is_eog(tok, i)) end = i;
            else allowed[na++] = i;
        }
        CHECK_MSG(na || end >= 0, "%s: empty mask at step %d", name, step);
        if (!na && end < 0) break;
        for (int k = 0; k < 64; k++) { /* samples: allowed advance, refused do not */
            bool ok = false;
            if (na) {
                CHECK_OK(gm_matcher_check_token(m, allowed[rnd(r) % na], &ok, &err), &err);
                CHECK(ok);
            }
            int32_t x = (int32_t)(rnd(r) % (uint32_t)n);
            CHECK_OK(gm_matcher_check_token(m, x, &ok, &err), &err);
            CHECK(ok == gt_mask_bit(mask, x));
        }
        int32_t pick;
        if (end >= 0 && (rnd(r) % 2 || !na)) {
            pick = end;
        } else {
            /* towards the end: often a token with a closing character (quote, bracket, comma) */
            for (size_t k = 0; k < na; k++) {
                const char *p;
                size_t l;
                gm_token_to_piece(tok, allowed[k], false, &p, &l, &err);
                if (closing_piece(p, l)) allowed[closing++] = allowed[k]; /* the front: a subset, order kept */
            }
            pick = closing && rnd(r) % 3 ? allowed[rnd(r) % closing] : allowed[rnd(r) % na];
            if (step > 150) { /* a long walk: single-byte tokens, so a needed digit or quote comes up */
                size_t ns = 0;
                for (size_t k = 0; k < na; k++) {
                    const char *p;
                    size_t l;
                    gm_token_to_piece(tok, allowed[k], false, &p, &l, &err);
                    if (l == 1) allowed[ns++] = allowed[k];
                }
                if (ns) pick = allowed[rnd(r) % ns];
            }
        }
        bool ok = false;
        CHECK_OK(gm_matcher_accept_token(m, pick, &ok, &err), &err);
        CHECK(ok);
        if (pick == end) { ended = true; break; }
        const char *p;
        size_t l;
        gm_token_to_piece(tok, pick, false, &p, &l, &err);
        text = realloc(text, tl + l + 1);
        memcpy(text + tl, p, l);
        tl += l;
        text[tl] = 0;
    }
    CHECK_MSG(ended, "%s: the walk did not end: %s", name, text);
    cJSON *parsed = cJSON_ParseWithLength(text, tl);
    CHECK_MSG(parsed != NULL, "%s: not JSON: %s", name, text);
    cJSON_Delete(parsed);
    if (out) {
        cJSON *line = cJSON_CreateObject();
        cJSON_AddStringToObject(line, "case", name);
        cJSON_AddStringToObject(line, "text", text);
        char *js = cJSON_PrintUnformatted(line);
        fprintf(out, "%s\n", js);
        cJSON_free(js);
        cJSON_Delete(line);
    }
    free(text); free(allowed); free(mask);
    gm_matcher_free(m);
    gm_grammar_ctx_free(c);
    gm_grammar_free(g);
}

TEST(mask_real_vocab_walks) {
    gm_tokenizer *tok = NULL;
    gm_error err = {0};
    if (!test_have_default_model("real-vocabulary walks")) return;
    CHECK_OK(gm_tokenizer_open(GM_DEFAULT_MODEL, &tok, &err), &err);
    if (!tok) return;
    gm_gvocab *v = NULL;
    CHECK_OK(gm_gvocab_from_tokenizer(tok, NULL, &v, &err), &err);
    /* markers and control tokens are never allowed */
    int32_t sot = gm_token_id(tok, "<start_of_turn>", 15);
    cJSON *cases = gt_load_cases();
    const char *env = getenv("GM_GRAMMAR_WALKS");
    FILE *out = env ? fopen(env, "w") : NULL;
    rng r = {42};
    const cJSON *c;
    int walks = 0;
    const char *every = getenv("GM_GRAMMAR_ALL_WALKS");
    cJSON_ArrayForEach(c, cases) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        /* in CI a few kinds; GM_GRAMMAR_ALL_WALKS=N walks every schema N times */
        bool pick = every || strstr(name, "nested") || strstr(name, "recursive") || strstr(name, "pattern-anchored") ||
                    strstr(name, "integer-range") || strstr(name, "format-date-time") || strstr(name, "additional-schema");
        int times = every ? atoi(every) : 2;
        for (int k = 0; pick && k < times; k++, walks++) walk_schema(tok, v, cJSON_GetObjectItem(c, "schema"), name, &r, out);
        if (sot >= 0 && !strcmp(name, "string")) {
            gm_grammar *g = gt_schema_grammar(cJSON_GetObjectItem(c, "schema"), name);
            gm_grammar_ctx *cx = NULL;
            gm_matcher *m = NULL;
            CHECK_OK(gm_grammar_ctx_new(g, v, &cx, &err), &err);
            CHECK_OK(gm_matcher_new(cx, &m, &err), &err);
            bool ok = true;
            CHECK_OK(gm_matcher_accept_bytes(m, "\"", 1, &ok, &err), &err);
            CHECK_OK(gm_matcher_check_token(m, sot, &ok, &err), &err);
            CHECK(!ok);
            gm_matcher_free(m);
            gm_grammar_ctx_free(cx);
            gm_grammar_free(g);
        }
    }
    fprintf(stderr, "  %d random walks\n", walks);
    if (out) fclose(out);
    cJSON_Delete(cases);
    gm_gvocab_free(v);
    gm_tokenizer_free(tok);
}

/* A tiny tokenizer with Gemma 4's tool markers: with markers = true the marker token is the
 * delimiter and its ordinary-text spelling is not; <0xF3> cannot start a marker character; extra
 * END ids end generation. Without markers the marker tokens are never allowed. */
TEST(vocab_markers) {
    static char chars[95][2];
    const char *pieces[128];
    uint32_t lens[128];
    int32_t types[128];
    const char *special[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<|tool_call>", "<tool_call|>", "<|\"|>", "<|tool_response>", "<0xF3>"};
    int n = 0;
    for (int i = 0; i < 9; i++) pieces[n] = special[i], types[n++] = i == 3 ? 2 : i == 8 ? 6 : 3;
    for (int c = 32; c < 127; c++) {
        chars[c - 32][0] = (char)c;
        pieces[n] = chars[c - 32], types[n++] = 1;
    }
    pieces[n] = "call:", types[n++] = 1;
    for (int i = 0; i < n; i++) lens[i] = (uint32_t)strlen(pieces[i]);
    gm_vocab_spec spec = {.n = n, .pieces = pieces, .piece_lens = lens, .types = types, .bos_id = 2, .eos_id = 1,
                          .unk_id = 3, .pad_id = 0, .eot_id = -1};
    gm_tokenizer *tok = NULL;
    gm_error err = {0};
    CHECK_OK(gm_tokenizer_build(&spec, "tool vocab", &tok, &err), &err);
    if (!tok) return;
    const int32_t TC = 4, TC_END = 5, QUOTE = 6, RESP = 7, F3 = 8, CALL = n - 1;
#define CH(c) ((int32_t)(9 + (c) - 32))
    gm_gvocab *plain = NULL, *mk = NULL, *bad = NULL;
    int32_t ends[] = {RESP}, wrong[] = {n};
    gm_gvocab_options opt = {.markers = true, .end_ids = ends, .n_end_ids = 1};
    CHECK_OK(gm_gvocab_from_tokenizer(tok, NULL, &plain, &err), &err);
    CHECK_OK(gm_gvocab_from_tokenizer(tok, &opt, &mk, &err), &err);
    opt.end_ids = wrong;
    CHECK_EQ_INT(gm_gvocab_from_tokenizer(tok, &opt, &bad, &err), GM_ERR_ARG);
    CHECK(bad == NULL);
    gm_grammar *g = gt_gbnf("root ::= <|tool_call> \"call:f{a:\" <|\"|> [^\\U000F0000-\\U000F00FF]* <|\"|> \"}\" <tool_call|>");
    gm_grammar_ctx *c = NULL, *cp = NULL;
    gm_matcher *m = NULL, *mp = NULL;
    CHECK_OK(gm_grammar_ctx_new(g, mk, &c, &err), &err);
    CHECK_OK(gm_grammar_ctx_new(g, plain, &cp, &err), &err);
    CHECK_OK(gm_matcher_new(c, &m, &err), &err);
    CHECK_OK(gm_matcher_new(cp, &mp, &err), &err);
    bool ok = true;
    CHECK_OK(gm_matcher_check_token(mp, TC, &ok, &err), &err);
    CHECK(!ok); /* without markers: never */
    CHECK_OK(gm_matcher_check_token(m, CH('<'), &ok, &err), &err);
    CHECK(!ok); /* the spelling is not the marker */
    int32_t path[] = {TC, CALL, CH('f'), CH('{'), CH('a'), CH(':'), QUOTE, CH('<'), CH('|'), CH('"'), CH('|'), CH('>'), QUOTE, CH('}'), TC_END};
    char where[32];
    for (size_t k = 0; k < sizeof path / sizeof *path; k++) {
        snprintf(where, sizeof where, "marker step %zu", k);
        gt_check_mask_exact(m, n, where);
        if (k == 7) { /* inside the string: the byte token could only start a marker character */
            CHECK_OK(gm_matcher_check_token(m, F3, &ok, &err), &err);
            CHECK(!ok);
            CHECK_OK(gm_matcher_check_token(m, QUOTE, &ok, &err), &err);
            CHECK(ok);
        }
        CHECK_OK(gm_matcher_accept_token(m, path[k], &ok, &err), &err);
        CHECK_MSG(ok, "step %zu: token %d refused", k, path[k]);
    }
    CHECK(gm_matcher_accepts_end(m));
    CHECK_OK(gm_matcher_check_token(m, RESP, &ok, &err), &err);
    CHECK(ok); /* an extra END id */
    CHECK_OK(gm_matcher_check_token(m, 1, &ok, &err), &err);
    CHECK(ok); /* <eos> stays END */
    gm_matcher_free(m);
    gm_matcher_free(mp);
    gm_grammar_ctx_free(c);
    gm_grammar_ctx_free(cp);
    gm_grammar_free(g);
    /* the plain vocabulary lets <0xF3> start a plane-15 character; the markers one does not */
    g = gt_gbnf("root ::= [^a]*");
    CHECK_OK(gm_grammar_ctx_new(g, plain, &cp, &err), &err);
    CHECK_OK(gm_grammar_ctx_new(g, mk, &c, &err), &err);
    CHECK_OK(gm_matcher_new(cp, &mp, &err), &err);
    CHECK_OK(gm_matcher_new(c, &m, &err), &err);
    CHECK_OK(gm_matcher_check_token(mp, F3, &ok, &err), &err);
    CHECK(ok);
    CHECK_OK(gm_matcher_check_token(m, F3, &ok, &err), &err);
    CHECK(!ok);
    gm_matcher_free(m);
    gm_matcher_free(mp);
    gm_grammar_ctx_free(c);
    gm_grammar_ctx_free(cp);
    gm_grammar_free(g);
    /* the two-tool grammar token by token: <|tool_call>call:search{query:<|"|>x<|"|>}<tool_call|> */
    g = gt_tool_call_grammar();
    if (g) {
        CHECK_OK(gm_grammar_ctx_new(g, mk, &c, &err), &err);
        CHECK_OK(gm_matcher_new(c, &m, &err), &err);
        CHECK_OK(gm_matcher_accept_token(m, TC, &ok, &err), &err);
        CHECK(ok);
        CHECK_OK(gm_matcher_accept_token(m, CALL, &ok, &err), &err);
        for (const char *q = "search{query:"; *q && ok; q++) CHECK_OK(gm_matcher_accept_token(m, CH(*q), &ok, &err), &err);
        gt_check_mask_exact(m, n, "tool call string");
        int32_t rest[] = {QUOTE, CH('x'), QUOTE, CH('}'), TC_END};
        for (size_t k = 0; k < 5 && ok; k++) CHECK_OK(gm_matcher_accept_token(m, rest[k], &ok, &err), &err);
        CHECK(ok && gm_matcher_accepts_end(m));
        gm_matcher_free(m);
        gm_grammar_ctx_free(c);
        gm_grammar_free(g);
    }
#undef CH
    gm_gvocab_free(plain);
    gm_gvocab_free(mk);
    gm_tokenizer_free(tok);
}

int main(void) {
    if (getenv("GM_GRAMMAR_ONLY_WALKS")) { /* tests/cli_grammar.sh: just the walks, for jsonschema */
        RUN(mask_real_vocab_walks);
        return test_summary();
    }
    RUN(mask_small_vocab);
    RUN(vocab_markers);
    RUN(mask_real_vocab_walks);
    return test_summary();
}
