/* tests/support/grammar_check.c — what the grammar tests share (see grammar_check.h). */
#include "support/grammar_check.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gm_grammar *gt_gbnf(const char *text) {
    gm_grammar *g = NULL;
    gm_error err = {0};
    CHECK_OK(gm_grammar_from_gbnf(text, strlen(text), &g, &err), &err);
    return g;
}

gm_grammar *gt_gbnf_file(const char *name) {
    char rel[128];
    snprintf(rel, sizeof rel, "grammar/%s", name);
    size_t n;
    unsigned char *t = test_read_file(test_data_path(rel), &n);
    CHECK(t != NULL);
    if (!t) return NULL;
    gm_grammar *g = NULL;
    gm_error err = {0};
    CHECK_OK(gm_grammar_from_gbnf((const char *)t, n, &g, &err), &err);
    free(t);
    return g;
}

/* 1: s is a complete sentence; 0: a viable prefix only; -1: refused. */
int gt_match(gm_grammar *g, const char *s) {
    gm_grammar_ctx *c = NULL;
    gm_matcher *m = NULL;
    gm_error err = {0};
    CHECK_OK(gm_grammar_ctx_new(g, NULL, &c, &err), &err);
    CHECK_OK(gm_matcher_new(c, &m, &err), &err);
    bool ok = false;
    CHECK_OK(gm_matcher_accept_bytes(m, s, strlen(s), &ok, &err), &err);
    int r = !ok ? -1 : gm_matcher_accepts_end(m) ? 1 : 0;
    gm_matcher_free(m);
    gm_grammar_ctx_free(c);
    return r;
}

#define ACCEPT(g, s) CHECK_MSG(gt_match(g, s) == 1, "should accept: %s", s)
#define PREFIX(g, s) CHECK_MSG(gt_match(g, s) == 0, "should be a prefix only: %s", s)
#define REJECT(g, s) CHECK_MSG(gt_match(g, s) == -1, "should reject: %s", s)

/* The error of compiling text: status and message. */
gm_status gt_gbnf_error(const char *text, gm_error *err) {
    gm_grammar *g = NULL;
    memset(err, 0, sizeof *err);
    gm_status st = gm_grammar_from_gbnf(text, strlen(text), &g, err);
    gm_grammar_free(g);
    return st;
}

/* s with every marker text (<|"|>, <escape>, <|tool_call>, ...) replaced by its private-use
 * character, and `delim` (when not NULL) spelled instead of <|"|> first: FunctionGemma's cases are
 * Gemma 4's with <escape>. malloc'd. */
char *gt_marker_subst(const char *s, const char *delim) {
    size_t n = strlen(s);
    char *out = malloc(4 * n + 1), *o = out;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        size_t best = 0;
        for (size_t l = 2; s[i] == '<' && l <= 32 && i + l <= n; l++) {
            uint32_t c = gm_gbnf_marker_cp(s + i, l);
            if (c) { cp = c; best = l; }
        }
        if (delim && best == 5 && !memcmp(s + i, "<|\"|>", 5)) cp = gm_gbnf_marker_cp(delim, strlen(delim));
        if (!best) { *o++ = s[i++]; continue; }
        *o++ = (char)(0xF0 | cp >> 18);
        *o++ = (char)(0x80 | (cp >> 12 & 0x3F));
        *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
        i += best;
    }
    *o = 0;
    return out;
}

/* gt_match() of s with its markers as their characters. */
int gt_match_m(gm_grammar *g, const char *s, const char *delim) {
    char *t = gt_marker_subst(s, delim);
    int r = gt_match(g, t);
    free(t);
    return r;
}

bool gt_mask_bit(const uint32_t *m, int32_t i) { return m[i / 32] >> (i % 32) & 1; }

/* The mask equals token-by-token checks, for every token. */
void gt_check_mask_exact(gm_matcher *m, int32_t n, const char *where) {
    uint32_t *mask = calloc(((size_t)n + 31) / 32, 4);
    gm_error err = {0};
    CHECK_OK(gm_matcher_fill_mask(m, mask, &err), &err);
    int bad = 0;
    for (int32_t i = 0; i < n && bad < 5; i++) {
        bool ok = false;
        CHECK_OK(gm_matcher_check_token(m, i, &ok, &err), &err);
        if (ok != gt_mask_bit(mask, i)) {
            bad++;
            CHECK_MSG(false, "%s: token %d: mask %d, check %d", where, i, gt_mask_bit(mask, i), ok);
        }
    }
    free(mask);
}

/* Two tools' argument grammars (Gemma 4, prefixes w- and s-) under one hand-written root: every
 * shared rule (ws, char, string, ...) exists once per prefix and they do not clash. */
gm_grammar *gt_tool_call_grammar(void) {
    gm_schema_options o = gm_schema_options_default();
    o.dialect = GM_SCHEMA_GEMMA4;
    char *w = NULL, *sx = NULL;
    gm_error err = {0};
    o.rule_prefix = "w-";
    CHECK_OK(gm_json_schema_to_gbnf(WEATHER, strlen(WEATHER), &o, &w, &err), &err);
    o.rule_prefix = "s-";
    CHECK_OK(gm_json_schema_to_gbnf(SEARCH, strlen(SEARCH), &o, &sx, &err), &err);
    if (!w || !sx) return NULL;
    CHECK(strstr(w, "w-char ::= ") && strstr(sx, "s-char ::= ") && strstr(sx, "s-ws ::= "));
    CHECK(strstr(sx, "s-string ::= ") && strstr(w, "\nw-root ::= ") && strstr(sx, "\ns-root ::= "));
    for (const char *q = w; *q; q = strchr(q, '\n') + 1) CHECK(!strncmp(q, "w-", 2)); /* every rule is prefixed */
    for (const char *q = sx; *q; q = strchr(q, '\n') + 1) CHECK(!strncmp(q, "s-", 2));
    const char *root = "root ::= <|tool_call> \"call:\" ( \"get_weather\" \"{\" w-root \"}\" | \"search\" \"{\" s-root \"}\" ) <tool_call|>\n";
    size_t n = strlen(w) + strlen(sx) + strlen(root) + 1;
    char *text = malloc(n);
    snprintf(text, n, "%s%s%s", w, sx, root);
    gm_grammar *g = NULL;
    CHECK_OK(gm_grammar_from_gbnf(text, strlen(text), &g, &err), &err);
    free(text);
    free(w);
    free(sx);
    return g;
}

cJSON *gt_load_cases(void) {
    size_t n;
    unsigned char *t = test_read_file(test_data_path("grammar/schemas.json"), &n);
    CHECK(t != NULL);
    cJSON *cases = t ? cJSON_ParseWithLength((const char *)t, n) : NULL;
    free(t);
    CHECK(cJSON_IsArray(cases));
    return cases;
}

gm_grammar *gt_schema_grammar(const cJSON *schema, const char *name) {
    char *text = cJSON_PrintUnformatted(schema);
    gm_grammar *g = NULL;
    gm_error err = {0};
    gm_status st = gm_grammar_from_json_schema(text, strlen(text), NULL, &g, &err);
    CHECK_MSG(st == GM_OK, "schema %s: %s", name, err.msg);
    cJSON_free(text);
    return g;
}
