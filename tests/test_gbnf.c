/* tests/test_gbnf.c — GBNF grammars (grammar/gbnf.c, compile.c, matcher.c, markers.c): the parser (valid grammars,
 * errors with their line:column, hostile input), the matcher (accept / reject strings for JSON, arithmetic and list
 * grammars; partial UTF-8; the empty language; clone and rollback), chat-format markers as grammar elements. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "support/grammar_check.h"

/* ------------------------------------------------------------------ parser */
TEST(parse_valid) {
    const char *ok[] = {
        "root ::= \"a\"",
        "root ::= \"a\" | \"b\" # comment\n",
        "# leading comment\n\nroot ::= x y\nx ::= [a-z]+\ny ::= [^a-z]*\n",
        "root ::= (\"a\" (\"b\" | \"c\")?)* \"d\"{2,3} \"e\"{2} \"f\"{1,}\n",
        "root ::=\n  \"a\" |\n  \"b\"\n",
        "root ::= ( \"a\"\n   \"b\" )\n",
        "root ::= \"\\x41\\u00e9\\U0001F600\\t\\n\\r\\\\\\\"\"",
        "root ::= [\\x00-\\x1F\\]\\[-]",
        "root ::= .",
        "root ::= \"\"",
        "root ::= \"é漢😀\" [à-ÿ]",
        "root ::= a\na ::= \"x\" a | \"y\"\n",
        "root-rule_2 ::= \"x\"\nroot ::= root-rule_2\n",
        "root ::= \"a\" *",
        "root ::= x\nunused ::= unused \"q\"\nx ::= \"x\"\n", /* unreachable rules are not checked */
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        gm_error err = {0};
        CHECK_MSG(gt_gbnf_error(ok[i], &err) == GM_OK, "grammar %zu: %s", i, err.msg);
    }
}

TEST(parse_errors) {
    struct { const char *g, *where, *what; } cases[] = {
        {"root ::= \"a", "1:12", "unterminated"},
        {"root ::= [a-", "1:13", "unterminated"},
        {"root ::= x", "1:10", "undefined rule 'x'"},
        {"x ::= \"a\"", NULL, "no 'root'"},
        {"root ::= \"a\"\nroot ::= \"b\"", "2:", "defined twice"},
        {"root ::= (\"a\"", "1:14", "expecting ')'"},
        {"root ::= \"a\")", "1:13", "unbalanced"},
        {"root ::= [z-a]", "1:14", "out of order"},
        {"root ::= \"\\q\"", "1:11", "unknown escape"},
        {"root ::= \"\\x4\"", "1:11", "hex"},
        {"root ::= []", "1:11", "empty character class"},
        {"root ::= \"a\"{3,2}", "1:", "n < m"},
        {"root ::= \"a\"{99999}", "1:", "too large"},
        {"root ::= * \"a\"", "1:10", "without an element"},
        {"root ::= <[12]>", "1:10", "token references"},
        {"root ::= root \"a\" | \"b\"", "1:1", "left-recursive"},
        {"root ::= x\nx ::= y? x \"a\"\ny ::= \"b\"", "2:1", "left-recursive"},
        {"root ::= \"a\" root", "1:1", "never finish"},
        {"root = \"a\"", "1:6", "expecting '::='"},
        {"root ::= \"a\"\n  | \"b\"", "2:3", "expecting a rule name"},
        {"root ::= \"\xff\"", "1:11", "UTF-8"},
        {"root ::= \"a\" @", "1:14", "unexpected character"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gm_error err;
        gm_status st = gt_gbnf_error(cases[i].g, &err);
        CHECK_MSG(st == GM_ERR_FORMAT || st == GM_ERR_NOMEM, "case %zu: status %d", i, st);
        CHECK_MSG(strstr(err.msg, cases[i].what) != NULL, "case %zu: '%s' lacks '%s'", i, err.msg, cases[i].what);
        if (cases[i].where) {
            char w[32];
            snprintf(w, sizeof w, "grammar %s", cases[i].where);
            CHECK_MSG(strstr(err.msg, w) != NULL, "case %zu: '%s' lacks position '%s'", i, err.msg, w);
        }
    }
}

/* Deep nesting, long repetition chains and huge expansions end in errors, not crashes. */
TEST(parse_hostile) {
    size_t n = 100000;
    char *s = malloc(n * 2 + 64);
    strcpy(s, "root ::= ");
    size_t k = strlen(s);
    for (size_t i = 0; i < n; i++) s[k++] = '(';
    s[k++] = '"'; s[k++] = 'a'; s[k++] = '"';
    for (size_t i = 0; i < n; i++) s[k++] = ')';
    s[k] = 0;
    gm_error err;
    CHECK_EQ_INT(gt_gbnf_error(s, &err), GM_ERR_FORMAT);
    CHECK(strstr(err.msg, "nested too deep") != NULL);
    CHECK_EQ_INT(gt_gbnf_error("root ::= ((((\"a\"{4096}){4096}){4096}){4096})", &err), GM_ERR_NOMEM);
    CHECK(strstr(err.msg, "too large") != NULL);
    /* a chain of 20000 rules, each calling the next: inlined up to a bound, called beyond */
    size_t cap = 20000 * 40;
    char *c = malloc(cap);
    size_t at = (size_t)snprintf(c, cap, "root ::= r0\n");
    for (int i = 0; i < 20000; i++) at += (size_t)snprintf(c + at, cap - at, "r%d ::= \"x\" r%d\n", i, i + 1);
    snprintf(c + at, cap - at, "r20000 ::= \"y\"\n");
    gm_grammar *g = gt_gbnf(c);
    CHECK(g != NULL);
    gm_grammar_free(g);
    free(c);
    free(s);
}

/* ------------------------------------------------------------------ matcher */
TEST(match_basics) {
    gm_grammar *g = gt_gbnf("root ::= \"ab\" [0-9]{2,3} (\"x\" | \"yz\")* \"!\"?");
    ACCEPT(g, "ab12");
    ACCEPT(g, "ab123xyzx!");
    PREFIX(g, "ab1");
    PREFIX(g, "");
    REJECT(g, "ab1234");
    REJECT(g, "ab12!x");
    REJECT(g, "ac");
    gm_grammar_free(g);
    g = gt_gbnf("root ::= [^a-c\\n]+");
    ACCEPT(g, "xyz");
    ACCEPT(g, "é漢😀");
    REJECT(g, "xby");
    REJECT(g, "x\n");
    gm_grammar_free(g);
}

TEST(match_utf8) {
    gm_grammar *g = gt_gbnf("root ::= \"é\" [\\u4E00-\\u9FFF] \"😀\"");
    ACCEPT(g, "é漢😀");
    PREFIX(g, "\xC3");          /* half of é: a viable prefix */
    PREFIX(g, "é\xE6\xBC");     /* two thirds of 漢 */
    REJECT(g, "\xC3\x28");      /* not a continuation byte */
    REJECT(g, "é\xE0\x80\x80"); /* overlong */
    REJECT(g, "é\xED\xA0\x80"); /* a surrogate */
    REJECT(g, "é\xC3");         /* é again where a CJK character must come: no prefix of one */
    REJECT(g, "\xC0\xA9");      /* invalid lead byte */
    gm_grammar_free(g);
    g = gt_gbnf("root ::= [\\x80-\\xFF]"); /* code points U+0080..U+00FF, not bytes */
    ACCEPT(g, "\xC2\x80");
    ACCEPT(g, "ÿ");
    REJECT(g, "\x80");
    gm_grammar_free(g);
}

TEST(match_json_gbnf) {
    gm_grammar *g = gt_gbnf_file("json.gbnf");
    if (!g) return;
    ACCEPT(g, "{}");
    ACCEPT(g, "{\"a\": 1, \"b\": [true, false, null, -0.5e10, \"x\\n\\u00e9\"], \"c\": {\"d\": []}}");
    ACCEPT(g, "{\n  \"a\": \"b\"\n}");
    PREFIX(g, "{\"a\": [1, 2");
    REJECT(g, "[]");
    REJECT(g, "{\"a\" 1}");
    REJECT(g, "{\"a\": 01}");
    REJECT(g, "{\"a\": \"\x01\"}");
    REJECT(g, "{\"a\": tru}");
    REJECT(g, "{\"a\": \"\\x\"}");
    gm_grammar_free(g);
}

TEST(match_arithmetic_list) {
    gm_grammar *g = gt_gbnf_file("arithmetic.gbnf");
    if (g) {
        ACCEPT(g, "1+2=3\n");
        ACCEPT(g, "(a *b1) -4 = x_2\nq=1\n");
        PREFIX(g, "(1+");
        REJECT(g, "1+=3\n");
        REJECT(g, "A=1\n");
    }
    gm_grammar_free(g);
    g = gt_gbnf_file("list.gbnf");
    if (g) {
        ACCEPT(g, "- one\n- two items\n");
        PREFIX(g, "- one");
        REJECT(g, "-one\n");
        REJECT(g, "- a\u2028b\n");
        REJECT(g, "- \n");
    }
    gm_grammar_free(g);
}

/* Clones are independent; rollback returns to an earlier state exactly. */
/* Found by fuzz_grammar: a grammar matching only "" closed its first state over an empty list
 * (qsort on NULL, undefined behaviour under UBSan). */
TEST(match_empty_language) {
    gm_grammar *g = gt_gbnf("root ::= \"\"");
    ACCEPT(g, "");
    REJECT(g, "a");
    gm_grammar_free(g);
    /* and by the same fuzzer: [^] sorted a NULL range list (it is every character) */
    g = gt_gbnf("root ::= [^]");
    ACCEPT(g, "x");
    ACCEPT(g, "\n");
    gm_grammar_free(g);
}

TEST(clone_rollback) {
    gm_grammar *g = gt_gbnf("root ::= \"a\" (\"b\" | \"c\")+ \"d\"");
    gm_grammar_ctx *c = NULL;
    gm_matcher *m = NULL, *k = NULL;
    gm_error err = {0};
    bool ok;
    CHECK_OK(gm_grammar_ctx_new(g, NULL, &c, &err), &err);
    CHECK_OK(gm_matcher_new(c, &m, &err), &err);
    CHECK_OK(gm_matcher_accept_bytes(m, "ab", 2, &ok, &err), &err);
    CHECK(ok);
    CHECK_OK(gm_matcher_clone(m, &k, &err), &err);
    CHECK_OK(gm_matcher_accept_bytes(k, "cd", 2, &ok, &err), &err);
    CHECK(ok && gm_matcher_accepts_end(k) && !gm_matcher_accepts_end(m));
    CHECK_OK(gm_matcher_accept_bytes(m, "x", 1, &ok, &err), &err);
    CHECK(!ok && gm_matcher_n_steps(m) == 1); /* refused: unchanged */
    CHECK_OK(gm_matcher_accept_bytes(m, "b", 1, &ok, &err), &err);
    CHECK_OK(gm_matcher_accept_bytes(m, "d", 1, &ok, &err), &err);
    CHECK(ok && gm_matcher_accepts_end(m) && gm_matcher_is_finished(m));
    CHECK_OK(gm_matcher_rollback(m, 2, &err), &err);
    CHECK(!gm_matcher_accepts_end(m) && gm_matcher_n_steps(m) == 1);
    CHECK_OK(gm_matcher_accept_bytes(m, "d", 1, &ok, &err), &err);
    CHECK(ok && gm_matcher_accepts_end(m));
    CHECK_EQ_INT(gm_matcher_rollback(m, 5, &err), GM_ERR_ARG);
    gm_matcher_free(m);
    gm_matcher_free(k);
    gm_grammar_ctx_free(c);
    gm_grammar_free(g);
}


TEST(gbnf_markers) {
    CHECK(gm_gbnf_marker_cp("<|tool_call>", 12) == GM_GBNF_MARKER_FIRST + 9);
    CHECK(gm_gbnf_marker_cp("<|\"|>", 5) == GM_GBNF_MARKER_FIRST + 13);
    CHECK(gm_gbnf_marker_cp("<escape>", 8) == GM_GBNF_MARKER_FIRST + 20);
    CHECK(gm_gbnf_marker_cp("<start_of_turn>", 15) == GM_GBNF_MARKER_FIRST);
    CHECK(gm_gbnf_marker_cp("<|tool_call", 11) == 0 && gm_gbnf_marker_cp("<|tool_call>x", 13) == 0);
    CHECK(gm_gbnf_marker_cp("<eos>", 5) == 0 && gm_gbnf_marker_cp(NULL, 0) == 0);
    gm_grammar *g = gt_gbnf("root ::= <|tool_call> \"call:\" [a-z]+ \"{\" (<|\"|> [^\\U000F0000-\\U000F00FF]* <|\"|>)? \"}\" <tool_call|>");
    CHECK(gt_match_m(g, "<|tool_call>call:f{<|\"|>a \"b\"<|\"|>}<tool_call|>", NULL) == 1);
    CHECK(gt_match_m(g, "<|tool_call>call:f{}<tool_call|>", NULL) == 1);
    CHECK(gt_match_m(g, "<|tool_call>call:f{<|\"|>a<|tool_call>b<|\"|>}<tool_call|>", NULL) == -1);
    REJECT(g, "<|tool_call>call:f{}<tool_call|>"); /* the characters spelled out are not the marker */
    REJECT(g, "<");
    gm_grammar_free(g);
    /* the longest marker wins: <|tool> and <|tool_call> share a prefix */
    g = gt_gbnf("root ::= <|tool> | <|tool_call> \"x\"");
    CHECK(gt_match_m(g, "<|tool>", NULL) == 1 && gt_match_m(g, "<|tool_call>x", NULL) == 1);
    gm_grammar_free(g);
    struct { const char *g, *what; } cases[] = {
        {"root ::= <foo>", "(<foo>)"},
        {"root ::= <[12]>", "(<[12]>)"},
        {"root ::= !<|tool_call>", "(!<|tool_call>)"},
        {"root ::= <|tool_cal", "(<|tool_cal)"},
        {"root ::= <|tool_call", "(<|tool_call)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gm_error err;
        CHECK_EQ_INT(gt_gbnf_error(cases[i].g, &err), GM_ERR_FORMAT);
        CHECK_MSG(strstr(err.msg, cases[i].what) && strstr(err.msg, "token references"), "case %zu: %s", i, err.msg);
        CHECK_MSG(strstr(err.msg, "grammar 1:10") != NULL, "case %zu: %s", i, err.msg);
    }
}

int main(void) {
    RUN(parse_valid);
    RUN(parse_errors);
    RUN(parse_hostile);
    RUN(match_basics);
    RUN(match_utf8);
    RUN(match_json_gbnf);
    RUN(match_arithmetic_list);
    RUN(match_empty_language);
    RUN(clone_rollback);
    RUN(gbnf_markers);
    return test_summary();
}
