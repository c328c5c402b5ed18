/* tests/support/grammar_check.h — what the grammar tests (test_gbnf, test_schema, test_grammar) share: compiling
 * GBNF, matching strings, chat-format markers spelled as their characters, exact masks, a two-tool grammar. */
#ifndef GM_TEST_GRAMMAR_CHECK_H
#define GM_TEST_GRAMMAR_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "gemma_grammar.h"
#include "support/test.h"

/* The grammar of text (a checked failure when it does not compile); of tests/data/grammar/NAME. */
gm_grammar *gt_gbnf(const char *text);
gm_grammar *gt_gbnf_file(const char *name);
/* 1: s is a complete sentence; 0: a viable prefix only; -1: refused. */
int gt_match(gm_grammar *g, const char *s);
#define ACCEPT(g, s) CHECK_MSG(gt_match(g, s) == 1, "should accept: %s", s)
#define PREFIX(g, s) CHECK_MSG(gt_match(g, s) == 0, "should be a prefix only: %s", s)
#define REJECT(g, s) CHECK_MSG(gt_match(g, s) == -1, "should reject: %s", s)
/* The error of compiling text: status and message. */
gm_status gt_gbnf_error(const char *text, gm_error *err);
/* s with every marker text (<|"|>, <escape>, <|tool_call>, ...) replaced by its private-use character, and delim
 * (when not NULL) spelled instead of <|"|> first. malloc'd. */
char *gt_marker_subst(const char *s, const char *delim);
/* gt_match of s with its markers as their characters. */
int gt_match_m(gm_grammar *g, const char *s, const char *delim);
bool gt_mask_bit(const uint32_t *m, int32_t i);
/* The mask equals token-by-token checks, for every one of the n tokens. */
void gt_check_mask_exact(gm_matcher *m, int32_t n, const char *where);

#define WEATHER "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":5},\"unit\":{\"enum\":[\"c\",\"f\"]}," \
                "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":14}},\"required\":[\"city\"]}"
#define SEARCH "{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\"},\"limit\":{\"type\":\"integer\",\"minimum\":1," \
               "\"maximum\":50},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"query\"]}"
/* The cases of tests/data/grammar/schemas.json (a JSON array); the grammar of one schema (checked). */
struct cJSON;
struct cJSON *gt_load_cases(void);
gm_grammar *gt_schema_grammar(const struct cJSON *schema, const char *name);

/* Two tools' argument grammars (Gemma 4: WEATHER under prefix w-, SEARCH under s-) under one root. */
gm_grammar *gt_tool_call_grammar(void);

#endif
