/* tests/test_grammar.c — the grammar engine (grammar/): the GBNF parser (valid grammars, errors
 * with their line:column), the matcher (accept / reject strings for JSON, arithmetic and list
 * grammars; partial UTF-8; clone and rollback), the JSON-schema translator (valid instances
 * accepted, invalid ones rejected, unsupported keywords refused by name), token masks on a small
 * vocabulary and on the default model's (every allowed token advances, refused ones do not) and
 * random walks through the real vocabulary that always end in valid JSON; chat-format markers in
 * GBNF and in a vocabulary, the tool-call schema dialects and rule prefixes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "grammar/grammar.h"
#include "gemma_grammar.h"
#include "support/test.h"
#include "text/tokenizer.h"

/* ------------------------------------------------------------------ helpers */
static gm_grammar *gbnf(const char *text) {
    gm_grammar *g = NULL;
    gm_error err = {0};
    CHECK_OK(gm_grammar_from_gbnf(text, strlen(text), &g, &err), &err);
    return g;
}

static gm_grammar *gbnf_file(const char *name) {
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
static int match(gm_grammar *g, const char *s) {
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

#define ACCEPT(g, s) CHECK_MSG(match(g, s) == 1, "should accept: %s", s)
#define PREFIX(g, s) CHECK_MSG(match(g, s) == 0, "should be a prefix only: %s", s)
#define REJECT(g, s) CHECK_MSG(match(g, s) == -1, "should reject: %s", s)

/* The error of compiling text: status and message. */
static gm_status bad(const char *text, gm_error *err) {
    gm_grammar *g = NULL;
    memset(err, 0, sizeof *err);
    gm_status st = gm_grammar_from_gbnf(text, strlen(text), &g, err);
    gm_grammar_free(g);
    return st;
}

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
        CHECK_MSG(bad(ok[i], &err) == GM_OK, "grammar %zu: %s", i, err.msg);
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
        gm_status st = bad(cases[i].g, &err);
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
    CHECK_EQ_INT(bad(s, &err), GM_ERR_FORMAT);
    CHECK(strstr(err.msg, "nested too deep") != NULL);
    CHECK_EQ_INT(bad("root ::= ((((\"a\"{4096}){4096}){4096}){4096})", &err), GM_ERR_NOMEM);
    CHECK(strstr(err.msg, "too large") != NULL);
    /* a chain of 20000 rules, each calling the next: inlined up to a bound, called beyond */
    size_t cap = 20000 * 40;
    char *c = malloc(cap);
    size_t at = (size_t)snprintf(c, cap, "root ::= r0\n");
    for (int i = 0; i < 20000; i++) at += (size_t)snprintf(c + at, cap - at, "r%d ::= \"x\" r%d\n", i, i + 1);
    snprintf(c + at, cap - at, "r20000 ::= \"y\"\n");
    gm_grammar *g = gbnf(c);
    CHECK(g != NULL);
    gm_grammar_free(g);
    free(c);
    free(s);
}

/* ------------------------------------------------------------------ matcher */
TEST(match_basics) {
    gm_grammar *g = gbnf("root ::= \"ab\" [0-9]{2,3} (\"x\" | \"yz\")* \"!\"?");
    ACCEPT(g, "ab12");
    ACCEPT(g, "ab123xyzx!");
    PREFIX(g, "ab1");
    PREFIX(g, "");
    REJECT(g, "ab1234");
    REJECT(g, "ab12!x");
    REJECT(g, "ac");
    gm_grammar_free(g);
    g = gbnf("root ::= [^a-c\\n]+");
    ACCEPT(g, "xyz");
    ACCEPT(g, "é漢😀");
    REJECT(g, "xby");
    REJECT(g, "x\n");
    gm_grammar_free(g);
}

TEST(match_utf8) {
    gm_grammar *g = gbnf("root ::= \"é\" [\\u4E00-\\u9FFF] \"😀\"");
    ACCEPT(g, "é漢😀");
    PREFIX(g, "\xC3");          /* half of é: a viable prefix */
    PREFIX(g, "é\xE6\xBC");     /* two thirds of 漢 */
    REJECT(g, "\xC3\x28");      /* not a continuation byte */
    REJECT(g, "é\xE0\x80\x80"); /* overlong */
    REJECT(g, "é\xED\xA0\x80"); /* a surrogate */
    REJECT(g, "é\xC3");         /* é again where a CJK character must come: no prefix of one */
    REJECT(g, "\xC0\xA9");      /* invalid lead byte */
    gm_grammar_free(g);
    g = gbnf("root ::= [\\x80-\\xFF]"); /* code points U+0080..U+00FF, not bytes */
    ACCEPT(g, "\xC2\x80");
    ACCEPT(g, "ÿ");
    REJECT(g, "\x80");
    gm_grammar_free(g);
}

TEST(match_json_gbnf) {
    gm_grammar *g = gbnf_file("json.gbnf");
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
    gm_grammar *g = gbnf_file("arithmetic.gbnf");
    if (g) {
        ACCEPT(g, "1+2=3\n");
        ACCEPT(g, "(a *b1) -4 = x_2\nq=1\n");
        PREFIX(g, "(1+");
        REJECT(g, "1+=3\n");
        REJECT(g, "A=1\n");
    }
    gm_grammar_free(g);
    g = gbnf_file("list.gbnf");
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
    gm_grammar *g = gbnf("root ::= \"\"");
    ACCEPT(g, "");
    REJECT(g, "a");
    gm_grammar_free(g);
    /* and by the same fuzzer: [^] sorted a NULL range list (it is every character) */
    g = gbnf("root ::= [^]");
    ACCEPT(g, "x");
    ACCEPT(g, "\n");
    gm_grammar_free(g);
}

TEST(clone_rollback) {
    gm_grammar *g = gbnf("root ::= \"a\" (\"b\" | \"c\")+ \"d\"");
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


/* ------------------------------------------------------------------ JSON schemas */
static cJSON *load_cases(void) {
    size_t n;
    unsigned char *t = test_read_file(test_data_path("grammar/schemas.json"), &n);
    CHECK(t != NULL);
    cJSON *cases = t ? cJSON_ParseWithLength((const char *)t, n) : NULL;
    free(t);
    CHECK(cJSON_IsArray(cases));
    return cases;
}

static gm_grammar *schema_grammar(const cJSON *schema, const char *name) {
    char *text = cJSON_PrintUnformatted(schema);
    gm_grammar *g = NULL;
    gm_error err = {0};
    gm_status st = gm_grammar_from_json_schema(text, strlen(text), NULL, &g, &err);
    CHECK_MSG(st == GM_OK, "schema %s: %s", name, err.msg);
    cJSON_free(text);
    return g;
}

/* Every case of tests/data/grammar/schemas.json (checked against Python's jsonschema by
 * tests/grammar_check.py): valid instances accepted, invalid ones and those outside the generated
 * subset refused. */
TEST(schema_cases) {
    cJSON *cases = load_cases();
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cases) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        gm_grammar *g = schema_grammar(cJSON_GetObjectItem(c, "schema"), name);
        if (!g) continue;
        n++;
        const cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(c, "valid"))
            CHECK_MSG(match(g, t->valuestring) == 1, "%s: should accept %s", name, t->valuestring);
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(c, "invalid"))
            CHECK_MSG(match(g, t->valuestring) != 1, "%s: should refuse %s", name, t->valuestring);
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(c, "outside"))
            CHECK_MSG(match(g, t->valuestring) != 1, "%s: should refuse %s", name, t->valuestring);
        gm_grammar_free(g);
    }
    CHECK(n >= 30);
    cJSON_Delete(cases);
}

/* Found by tests/server/test_structured.py: a rule body over 512 bytes (an integer range with 4+ digit
 * bounds such as [1, 9999], a long enum) was "json schema: out of memory" (the text buffer's printf had a
 * fixed 512-byte scratch). And the range text doubled per digit (1.1 MB for [1, 1e15 - 1]). Every integer
 * near the bounds and on a stride through the range matches exactly when it is inside. */
TEST(schema_integer_ranges_wide) {
    const long long ranges[][2] = {{1, 9999}, {0, 9999}, {1000, 99999}, {-99999, -1000}, {-12345, 678901},
                                   {1000000, -1}, {-1, 0}, {7, 7}, {1, 999999999999999LL},
                                   {123456789012345LL, 987654321098765LL}, {-999999999999999LL, -1}};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        const long long lo = ranges[i][0], hi = ranges[i][1]; /* hi -1 with lo > 0: no maximum */
        const bool has_hi = !(hi == -1 && lo > 0);
        char schema[160];
        if (has_hi)
            snprintf(schema, sizeof schema, "{\"type\":\"integer\",\"minimum\":%lld,\"maximum\":%lld}", lo, hi);
        else
            snprintf(schema, sizeof schema, "{\"type\":\"integer\",\"minimum\":%lld}", lo);
        gm_grammar *g = NULL;
        gm_error err = {0};
        CHECK_OK(gm_grammar_from_json_schema(schema, strlen(schema), NULL, &g, &err), &err);
        if (!g) continue;
        CHECK_MSG(strlen(gm_grammar_source(g)) < 8192, "%s: %zu bytes of GBNF", schema, strlen(gm_grammar_source(g)));
        const long long top = has_hi ? hi : lo + 1000000000LL;
        long long probes[64];
        int n = 0;
        for (long long d = -3; d <= 3; d++) { probes[n++] = lo + d; probes[n++] = hi + d; }
        for (int k = 0; k < 40; k++) probes[n++] = lo + (top - lo) / 40 * k + k;
        probes[n++] = -lo; probes[n++] = 10 * hi + 3; probes[n++] = 0;
        for (int k = 0; k < n; k++) {
            char num[32];
            snprintf(num, sizeof num, "%lld", probes[k]);
            const bool in = probes[k] >= lo && (!has_hi || probes[k] <= hi) && strlen(num) <= 16;
            CHECK_MSG((match(g, num) == 1) == in, "%s: %s should be %s", schema, num, in ? "accepted" : "refused");
        }
        gm_grammar_free(g);
    }
    /* a long enum: one rule body of ~1.5 KB */
    char schema[4096] = "{\"enum\":[";
    for (int k = 0; k < 100; k++)
        snprintf(schema + strlen(schema), sizeof schema - strlen(schema), "%s\"value-%03d\"", k ? "," : "", k);
    strcat(schema, "]}");
    gm_grammar *g = NULL;
    gm_error err = {0};
    CHECK_OK(gm_grammar_from_json_schema(schema, strlen(schema), NULL, &g, &err), &err);
    if (g) {
        ACCEPT(g, "\"value-000\"");
        ACCEPT(g, "\"value-099\"");
        REJECT(g, "\"value-100\"");
        gm_grammar_free(g);
    }
}

/* Keywords that cannot be honoured are errors naming the keyword; bad schemas are format errors. */
TEST(schema_refusals) {
    struct { const char *schema, *what; gm_status st; } cases[] = {
        {"{\"type\":\"string\",\"not\":{\"const\":\"a\"}}", "'not'", GM_ERR_UNSUPPORTED},
        {"{\"if\":{},\"then\":{}}", "'if'", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"patternProperties\":{}}", "'patternProperties'", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"minProperties\":1}", "'minProperties'", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"number\",\"multipleOf\":2}", "'multipleOf'", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems'", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"array\",\"contains\":{}}", "'contains'", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"number\",\"maximum\":5}", "'maximum'", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"format\":\"uri\"}", "format 'uri'", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"pattern\":\"(?=a)b\"}", "lookaround", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreferences", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"pattern\":\"a^b\"}", "anchors", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"pattern\":\"^a$\",\"maxLength\":3}", "minLength / maxLength", GM_ERR_UNSUPPORTED},
        {"{\"$ref\":\"http://example.com/s.json\"}", "$ref", GM_ERR_UNSUPPORTED},
        {"{\"$ref\":\"#/$defs/missing\"}", "$ref", GM_ERR_UNSUPPORTED},
        {"{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":3}]}", "allOf", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"nullable\":true}}}", "'nullable'", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"unevaluatedProperties\":false}", "'unevaluatedProperties'", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"strng\"}", "type 'strng'", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"maxLength\":100000}", "'maxLength'", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer", GM_ERR_FORMAT},
        /* a part closed by additionalProperties false cannot take another part's required property */
        {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":false},"
         "{\"type\":\"object\",\"properties\":{\"b\":{}},\"required\":[\"b\"]}]}", "no object satisfies", GM_ERR_FORMAT},
        /* found by fuzz_json_schema: a huge bound was converted to long long (undefined) */
        {"{\"type\":\"integer\",\"exclusiveMinimum\":9e137}", "beyond 1e15", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"integer\",\"maximum\":-9e137}", "beyond 1e15", GM_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"required\":[\"x\"]}", "required property 'x'", GM_ERR_UNSUPPORTED},
        {"{\"type\":", "not valid JSON", GM_ERR_FORMAT},
        {"false", "matches nothing", GM_ERR_FORMAT},
        {"{\"$ref\":\"#\"}", "left-recursive", GM_ERR_FORMAT},
        /* found by fuzz_json_schema: cJSON lets invalid UTF-8 through, which became invalid GBNF */
        {"{\"const\":\"\xff\"}", "invalid UTF-8", GM_ERR_FORMAT},
        {"{\"type\":\"string\",\"pattern\":\"[^\xf4\x91\x81\x92]\"}", "invalid UTF-8", GM_ERR_UNSUPPORTED}, /* > U+10FFFF */
        {"{\"type\":\"object\",\"properties\":{\"\xc3\":{}}}", "invalid UTF-8", GM_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gm_grammar *g = NULL;
        gm_error err = {0};
        gm_status st = gm_grammar_from_json_schema(cases[i].schema, strlen(cases[i].schema), NULL, &g, &err);
        CHECK_MSG(st == cases[i].st, "case %zu (%s): status %d, %s", i, cases[i].schema, st, err.msg);
        CHECK_MSG(strstr(err.msg, cases[i].what) != NULL, "case %zu: '%s' lacks '%s'", i, err.msg, cases[i].what);
        gm_grammar_free(g);
    }
    /* the error names where: a JSON pointer */
    const char *deep = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"not\":{}}}}}";
    gm_grammar *g = NULL;
    gm_error err = {0};
    CHECK_EQ_INT(gm_grammar_from_json_schema(deep, strlen(deep), NULL, &g, &err), GM_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "/properties/a/items") != NULL, "%s", err.msg);
}

/* Whitespace is bounded: no run of blanks longer than a newline and max_indent. */
TEST(schema_whitespace) {
    const char *sch = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}";
    gm_schema_options o = gm_schema_options_default();
    o.max_indent = 4;
    gm_grammar *g = NULL;
    gm_error err = {0};
    CHECK_OK(gm_grammar_from_json_schema(sch, strlen(sch), &o, &g, &err), &err);
    ACCEPT(g, "{\n    \"a\": 1\n}");
    REJECT(g, "{\n     \"a\": 1}");
    REJECT(g, "{  \"a\": 1}");
    REJECT(g, "{\n\n\"a\": 1}");
    REJECT(g, "{\"a\": 1} ");
    gm_grammar_free(g);
    o.max_indent = 0;
    CHECK_OK(gm_grammar_from_json_schema(sch, strlen(sch), &o, &g, &err), &err);
    ACCEPT(g, "{\"a\":1}");
    REJECT(g, "{\"a\": 1}");
    gm_grammar_free(g);
}

/* ------------------------------------------------------------------ masks */
static bool bit(const uint32_t *m, int32_t i) { return m[i / 32] >> (i % 32) & 1; }

/* The mask equals token-by-token checks, for every token. */
static void check_mask_exact(gm_matcher *m, int32_t n, const char *where) {
    uint32_t *mask = calloc(((size_t)n + 31) / 32, 4);
    gm_error err = {0};
    CHECK_OK(gm_matcher_fill_mask(m, mask, &err), &err);
    int bad = 0;
    for (int32_t i = 0; i < n && bad < 5; i++) {
        bool ok = false;
        CHECK_OK(gm_matcher_check_token(m, i, &ok, &err), &err);
        if (ok != bit(mask, i)) {
            bad++;
            CHECK_MSG(false, "%s: token %d: mask %d, check %d", where, i, bit(mask, i), ok);
        }
    }
    free(mask);
}

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
        check_mask_exact(m, (int32_t)n, where);
        bool ok = false;
        CHECK_OK(gm_matcher_accept_token(m, path[k], &ok, &err), &err);
        CHECK_MSG(ok, "step %zu: token '%s' refused", k, pieces[path[k]]);
    }
    CHECK(gm_matcher_accepts_end(m));
    check_mask_exact(m, (int32_t)n, "end");
    uint32_t mask[1];
    CHECK_OK(gm_matcher_fill_mask(m, mask, &err), &err);
    CHECK(bit(mask, 17) && !bit(mask, 15) && !bit(mask, 16));
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
    gm_grammar *g = schema_grammar(schema, name);
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
        if (step < 2 || step % 50 == 49) check_mask_exact(m, n, name);
        CHECK_OK(gm_matcher_fill_mask(m, mask, &err), &err);
        size_t na = 0, closing = 0;
        int32_t end = -1;
        for (int32_t i = 0; i < n; i++) {
            if (!bit(mask, i)) continue;
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
            CHECK(ok == bit(mask, x));
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
    cJSON *cases = load_cases();
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
            gm_grammar *g = schema_grammar(cJSON_GetObjectItem(c, "schema"), name);
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

/* ------------------------------------------------------------------ markers and dialects */
/* s with every marker text (<|"|>, <escape>, <|tool_call>, ...) replaced by its private-use
 * character, and `delim` (when not NULL) spelled instead of <|"|> first: FunctionGemma's cases are
 * Gemma 4's with <escape>. malloc'd. */
static char *subst(const char *s, const char *delim) {
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

/* match() of s with its markers as their characters. */
static int match_m(gm_grammar *g, const char *s, const char *delim) {
    char *t = subst(s, delim);
    int r = match(g, t);
    free(t);
    return r;
}

TEST(gbnf_markers) {
    CHECK(gm_gbnf_marker_cp("<|tool_call>", 12) == GM_GBNF_MARKER_FIRST + 9);
    CHECK(gm_gbnf_marker_cp("<|\"|>", 5) == GM_GBNF_MARKER_FIRST + 13);
    CHECK(gm_gbnf_marker_cp("<escape>", 8) == GM_GBNF_MARKER_FIRST + 20);
    CHECK(gm_gbnf_marker_cp("<start_of_turn>", 15) == GM_GBNF_MARKER_FIRST);
    CHECK(gm_gbnf_marker_cp("<|tool_call", 11) == 0 && gm_gbnf_marker_cp("<|tool_call>x", 13) == 0);
    CHECK(gm_gbnf_marker_cp("<eos>", 5) == 0 && gm_gbnf_marker_cp(NULL, 0) == 0);
    gm_grammar *g = gbnf("root ::= <|tool_call> \"call:\" [a-z]+ \"{\" (<|\"|> [^\\U000F0000-\\U000F00FF]* <|\"|>)? \"}\" <tool_call|>");
    CHECK(match_m(g, "<|tool_call>call:f{<|\"|>a \"b\"<|\"|>}<tool_call|>", NULL) == 1);
    CHECK(match_m(g, "<|tool_call>call:f{}<tool_call|>", NULL) == 1);
    CHECK(match_m(g, "<|tool_call>call:f{<|\"|>a<|tool_call>b<|\"|>}<tool_call|>", NULL) == -1);
    REJECT(g, "<|tool_call>call:f{}<tool_call|>"); /* the characters spelled out are not the marker */
    REJECT(g, "<");
    gm_grammar_free(g);
    /* the longest marker wins: <|tool> and <|tool_call> share a prefix */
    g = gbnf("root ::= <|tool> | <|tool_call> \"x\"");
    CHECK(match_m(g, "<|tool>", NULL) == 1 && match_m(g, "<|tool_call>x", NULL) == 1);
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
        CHECK_EQ_INT(bad(cases[i].g, &err), GM_ERR_FORMAT);
        CHECK_MSG(strstr(err.msg, cases[i].what) && strstr(err.msg, "token references"), "case %zu: %s", i, err.msg);
        CHECK_MSG(strstr(err.msg, "grammar 1:10") != NULL, "case %zu: %s", i, err.msg);
    }
}

typedef struct dialect_case {
    const char *schema;
    const char *valid[6], *invalid[11];
} dialect_case;

static gm_grammar *dialect_grammar(const char *schema, gm_schema_dialect d, const char *prefix) {
    gm_schema_options o = gm_schema_options_default();
    o.dialect = d;
    o.rule_prefix = prefix;
    gm_grammar *g = NULL;
    gm_error err = {0};
    CHECK_MSG(gm_grammar_from_json_schema(schema, strlen(schema), &o, &g, &err) == GM_OK, "%s: %s", schema, err.msg);
    return g;
}

/* Every case: the grammar compiles, valid instances match (markers as their characters), invalid
 * ones do not. */
static void run_dialect_cases(const dialect_case *cs, size_t n, gm_schema_dialect d, const char *delim) {
    for (size_t i = 0; i < n; i++) {
        gm_grammar *g = dialect_grammar(cs[i].schema, d, NULL);
        if (!g) continue;
        for (int k = 0; k < 6 && cs[i].valid[k]; k++)
            CHECK_MSG(match_m(g, cs[i].valid[k], delim) == 1, "dialect %d case %zu: should accept %s", d, i, cs[i].valid[k]);
        for (int k = 0; k < 11 && cs[i].invalid[k]; k++)
            CHECK_MSG(match_m(g, cs[i].invalid[k], delim) != 1, "dialect %d case %zu: should refuse %s", d, i, cs[i].invalid[k]);
        gm_grammar_free(g);
    }
}

#define WEATHER "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":5},\"unit\":{\"enum\":[\"c\",\"f\"]}," \
                "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":14}},\"required\":[\"city\"]}"
#define NESTED "{\"type\":\"object\",\"properties\":{\"pos\":{\"type\":\"object\",\"properties\":{\"lat\":{\"type\":\"number\"}," \
               "\"lon\":{\"type\":\"number\"}},\"required\":[\"lat\",\"lon\"]},\"tags\":{\"type\":\"array\",\"items\":" \
               "{\"type\":\"string\"},\"minItems\":1,\"maxItems\":2},\"exact\":{\"type\":\"boolean\"},\"note\":{\"type\":\"null\"}}," \
               "\"required\":[\"pos\",\"tags\"]}"
#define FORMATS "{\"type\":\"object\",\"properties\":{\"day\":{\"type\":\"string\",\"format\":\"date\"},\"code\":{\"type\":\"string\"," \
                "\"pattern\":\"^[A-Z]{3}$\"},\"kind\":{\"const\":\"x\"},\"v\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]}," \
                "\"o\":{\"enum\":[{\"b\":1,\"a\":[true,null]}]}},\"required\":[\"day\",\"code\",\"kind\",\"v\"]}"

/* Gemma 4: the root's arguments (no braces: the caller writes call:name{ }), bare keys in sorted
 * order, <|"|> strings with raw content, no whitespace. FunctionGemma runs the same cases with
 * <escape>. */
static const dialect_case GEMMA_CASES[] = {
    {WEATHER,
     {"city:<|\"|>Paris<|\"|>", "city:<|\"|>Oslo<|\"|>,days:14,unit:<|\"|>c<|\"|>", "city:<|\"|>a\"b\\<|\"|>,unit:<|\"|>f<|\"|>",
      "city:<|\"|><|\"|>", "city:<|\"|>\n\t{}<|\"|>,days:1"},
     {"city:\"Paris\"", "\"city\":<|\"|>Paris<|\"|>", "city:<|\"|>Parisx<|\"|>", "days:3,city:<|\"|>Oslo<|\"|>",
      "city:<|\"|>Oslo<|\"|>,days:15", "city:<|\"|>Oslo<|\"|>,days:0", "city: <|\"|>Oslo<|\"|>",
      "city:<|\"|>Oslo<|\"|>,unit:<|\"|>k<|\"|>", "", "city:<|\"|>a<|tool_call>b<|\"|>", "{city:<|\"|>Oslo<|\"|>}"}},
    {NESTED,
     {"pos:{lat:1.5,lon:-2},tags:[<|\"|>a<|\"|>]", "exact:true,note:null,pos:{lat:0,lon:0},tags:[<|\"|>a<|\"|>,<|\"|>b<|\"|>]"},
     {"pos:{lat:1.5,lon:-2},tags:[]", "pos:{lat:1,lon:2},tags:[<|\"|>a<|\"|>,<|\"|>b<|\"|>,<|\"|>c<|\"|>]",
      "pos:{lon:2,lat:1},tags:[<|\"|>a<|\"|>]", "exact:True,pos:{lat:1,lon:2},tags:[<|\"|>a<|\"|>]",
      "pos:{lat:1,lon:2},tags:[<|\"|>a<|\"|>, <|\"|>b<|\"|>]", "pos:{lat:1,lon:2},tags:[\"a\"]",
      "note:None,pos:{lat:1,lon:2},tags:[<|\"|>a<|\"|>]", "pos:{\"lat\":1,\"lon\":2},tags:[<|\"|>a<|\"|>]"}},
    {FORMATS,
     {"code:<|\"|>ABC<|\"|>,day:<|\"|>2024-01-31<|\"|>,kind:<|\"|>x<|\"|>,v:5",
      "code:<|\"|>ABC<|\"|>,day:<|\"|>2024-01-31<|\"|>,kind:<|\"|>x<|\"|>,o:{a:[true,null],b:1},v:<|\"|>five<|\"|>"},
     {"code:<|\"|>AB<|\"|>,day:<|\"|>2024-01-31<|\"|>,kind:<|\"|>x<|\"|>,v:5",
      "code:<|\"|>ABC<|\"|>,day:<|\"|>2024-13-31<|\"|>,kind:<|\"|>x<|\"|>,v:5",
      "code:<|\"|>ABC<|\"|>,day:<|\"|>2024-01-31<|\"|>,kind:<|\"|>y<|\"|>,v:5",
      "code:<|\"|>ABC<|\"|>,day:<|\"|>2024-01-31<|\"|>,kind:<|\"|>x<|\"|>,o:{b:1,a:[true,null]},v:5",
      "code:<|\"|>ABC<|\"|>,day:<|\"|>2024-01-31<|\"|>,kind:<|\"|>x<|\"|>,v:true"}},
};

TEST(schema_dialect_gemma4) {
    run_dialect_cases(GEMMA_CASES, sizeof GEMMA_CASES / sizeof *GEMMA_CASES, GM_SCHEMA_GEMMA4, NULL);
    gm_grammar *g = dialect_grammar(WEATHER, GM_SCHEMA_GEMMA4, NULL);
    if (!g) return;
    CHECK(strstr(gm_grammar_source(g), "<|\"|>") != NULL); /* the delimiter is written as the marker */
    CHECK(match_m(g, "city:<escape>Oslo<escape>", NULL) == -1);
    gm_grammar_free(g);
    const char *empty = "{\"type\":\"object\",\"properties\":{}}"; /* a tool without arguments: call:f{} */
    g = dialect_grammar(empty, GM_SCHEMA_GEMMA4, NULL);
    ACCEPT(g, "");
    REJECT(g, "{}");
    gm_grammar_free(g);
}

TEST(schema_dialect_functiongemma) {
    run_dialect_cases(GEMMA_CASES, sizeof GEMMA_CASES / sizeof *GEMMA_CASES, GM_SCHEMA_FUNCTIONGEMMA, "<escape>");
    gm_grammar *g = dialect_grammar(WEATHER, GM_SCHEMA_FUNCTIONGEMMA, NULL);
    if (!g) return;
    CHECK(strstr(gm_grammar_source(g), "<escape>") != NULL);
    CHECK(match_m(g, "city:<|\"|>Oslo<|\"|>", NULL) == -1);
    CHECK(match_m(g, "city:<escape>Oslo<escape>", NULL) == 1);
    gm_grammar_free(g);
}

/* Python: keyword arguments at the root (schema order, ", "), JSON values with True / False / None. */
TEST(schema_dialect_python) {
    static const dialect_case cases[] = {
        {WEATHER,
         {"city=\"Paris\"", "city=\"Oslo\", unit=\"c\", days=14", "city=\"a\\\"b\"", "city=\"\\u00e9t\\u00e9\", days=3"},
         {"{\"city\": \"Paris\"}", "city='Paris'", "city=\"Paris\",unit=\"c\"", "city = \"Paris\"", "city=\"Parisxx\"",
          "city=\"Oslo\", days=15", "unit=\"c\"", "days=3, city=\"Oslo\"", "city=\"a\\/b\"", "city=\"a\n\""}},
        {NESTED,
         {"pos={\"lat\": 1.5, \"lon\": -2}, tags=[\"a\"]", "pos={\"lat\":0,\"lon\":0}, tags=[\"a\", \"b\"], exact=True, note=None"},
         {"pos={\"lat\": 1, \"lon\": 2}, tags=[\"a\"], exact=true", "pos={\"lat\": 1, \"lon\": 2}, tags=[]",
          "pos={lat: 1, lon: 2}, tags=[\"a\"]", "pos={\"lat\": 1, \"lon\": 2}, tags=[\"a\"], note=null"}},
        {FORMATS,
         {"day=\"2024-01-31\", code=\"ABC\", kind=\"x\", v=5, o={\"b\":1,\"a\":[True,None]}",
          "day=\"2024-01-31\", code=\"ABC\", kind=\"x\", v=\"s\""},
         {"day=\"2024-01-31\", code=\"ABCD\", kind=\"x\", v=5",
          "day=\"2024-01-31\", code=\"ABC\", kind=\"x\", v=5, o={\"b\":1,\"a\":[true,null]}"}},
        {"{\"type\":\"object\",\"properties\":{\"o\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}},"
         "\"required\":[\"o\"]}",
         {"o={\"x\": 1}", "o={}"}, {"o={\"x\": \"a\"}", "o={x: 1}"}},
        {"{\"$ref\":\"#/$defs/args\",\"$defs\":{\"args\":{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}}}}}",
         {"q=\"x\"", ""}, {"{\"q\": \"x\"}"}},
        {"{\"type\":\"object\",\"properties\":{}}", {""}, {"{}"}},
    };
    run_dialect_cases(cases, sizeof cases / sizeof *cases, GM_SCHEMA_PYTHON, NULL);
}

/* What a dialect cannot write is refused by name; bad options are argument errors. */
TEST(schema_dialect_refusals) {
    struct { const char *schema, *what; gm_schema_dialect d; gm_status st; } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\",\"additionalProperties\":true}}}",
         "'additionalProperties'", GM_SCHEMA_GEMMA4, GM_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\",\"additionalProperties\":{}}}}", "'additionalProperties'",
         GM_SCHEMA_FUNCTIONGEMMA, GM_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "'additionalProperties'", GM_SCHEMA_PYTHON,
         GM_ERR_UNSUPPORTED},
        {"{\"type\":\"string\"}", "root", GM_SCHEMA_PYTHON, GM_ERR_UNSUPPORTED},
        {"{\"type\":\"string\"}", "root", GM_SCHEMA_GEMMA4, GM_ERR_UNSUPPORTED},
        {"{}", "root", GM_SCHEMA_PYTHON, GM_ERR_UNSUPPORTED},
        {"{\"type\":\"json_object\"}", "root", GM_SCHEMA_PYTHON, GM_ERR_UNSUPPORTED},
        {"{\"anyOf\":[{\"type\":\"object\"}]}", "anyOf", GM_SCHEMA_PYTHON, GM_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{\"my-key\":{}}}", "'my-key' is not a Python identifier", GM_SCHEMA_PYTHON,
         GM_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{\"class\":{}}}", "'class' is not a Python identifier", GM_SCHEMA_PYTHON,
         GM_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"const\":\"\\uDB80\\uDC0D\"}}}", "marker character", GM_SCHEMA_GEMMA4,
         GM_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[\"\\uDB80\\uDC09\"]}}}", "marker character", GM_SCHEMA_PYTHON,
         GM_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{\"\\uDB80\\uDC0D\":{}}}", "marker character", GM_SCHEMA_GEMMA4, GM_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"^\\uDB80\\uDC0D$\"}}}", "marker characters",
         GM_SCHEMA_GEMMA4, GM_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}}", "'not'", GM_SCHEMA_GEMMA4, GM_ERR_UNSUPPORTED},
        {"{\"type\":\"object\"}", "unknown dialect", (gm_schema_dialect)7, GM_ERR_ARG},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gm_schema_options o = gm_schema_options_default();
        o.dialect = cases[i].d;
        char *text = NULL;
        gm_error err = {0};
        gm_status st = gm_json_schema_to_gbnf(cases[i].schema, strlen(cases[i].schema), &o, &text, &err);
        CHECK_MSG(st == cases[i].st, "case %zu (%s): status %d, %s", i, cases[i].schema, st, err.msg);
        CHECK_MSG(strstr(err.msg, cases[i].what) != NULL, "case %zu: '%s' lacks '%s'", i, err.msg, cases[i].what);
        CHECK(text == NULL);
        free(text);
    }
    const char *prefixes[] = {"a b", "x\"", "0123456789012345678901234567890123"};
    for (size_t i = 0; i < 3; i++) {
        gm_schema_options o = gm_schema_options_default();
        o.rule_prefix = prefixes[i];
        char *text = NULL;
        gm_error err = {0};
        CHECK_EQ_INT(gm_json_schema_to_gbnf("{}", 2, &o, &text, &err), GM_ERR_ARG);
        CHECK(strstr(err.msg, "rule_prefix") != NULL);
    }
}

/* JSON: a prefix renames every rule (definitions and references) and nothing else; "" changes
 * nothing; exclude_markers keeps marker characters out of strings. */
TEST(schema_rule_prefix) {
    gm_schema_options o = gm_schema_options_default();
    char *plain = NULL, *pre = NULL;
    gm_error err = {0};
    CHECK_OK(gm_json_schema_to_gbnf(NESTED, strlen(NESTED), &o, &plain, &err), &err);
    o.rule_prefix = "p_";
    CHECK_OK(gm_json_schema_to_gbnf(NESTED, strlen(NESTED), &o, &pre, &err), &err);
    if (!plain || !pre) return;
    /* removing every "p_" at a word start gives the plain text back */
    char *back = malloc(strlen(pre) + 1), *o2 = back;
    for (const char *q = pre; *q;) {
        if (!strncmp(q, "p_", 2) && (q == pre || q[-1] == ' ' || q[-1] == '\n' || q[-1] == '(' || q[-1] == '|')) q += 2;
        else *o2++ = *q++;
    }
    *o2 = 0;
    CHECK_MSG(!strcmp(back, plain), "%s", pre);
    CHECK(strstr(pre, "\np_root ::= ") != NULL && strstr(pre, "\nroot ::=") == NULL && !strncmp(pre, "p_", 2));
    free(back);
    free(plain);
    free(pre);
    gm_grammar *g = dialect_grammar(NESTED, GM_SCHEMA_JSON, "p_"); /* alone, root calls p_root */
    ACCEPT(g, "{\"pos\": {\"lat\": 1, \"lon\": 2}, \"tags\": [\"a\"]}");
    gm_grammar_free(g);
    o = gm_schema_options_default();
    const char *str = "{\"type\":\"string\"}";
    CHECK_OK(gm_grammar_from_json_schema(str, strlen(str), &o, &g, &err), &err);
    CHECK(match_m(g, "\"a<|tool_call>\"", NULL) == 1); /* plain JSON: any character */
    gm_grammar_free(g);
    o.exclude_markers = true;
    CHECK_OK(gm_grammar_from_json_schema(str, strlen(str), &o, &g, &err), &err);
    CHECK(match_m(g, "\"a<|tool_call>\"", NULL) == -1);
    ACCEPT(g, "\"a\\/b\"");
    gm_grammar_free(g);
}

/* Two tools' argument grammars (Gemma 4, prefixes w- and s-) under one hand-written root: every
 * shared rule (ws, char, string, ...) exists once per prefix and they do not clash. */
#define SEARCH "{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\"},\"limit\":{\"type\":\"integer\",\"minimum\":1," \
               "\"maximum\":50},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"query\"]}"
static gm_grammar *tool_call_grammar(void) {
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

TEST(tool_call_two_tools) {
    gm_grammar *g = tool_call_grammar();
    if (!g) return;
    /* the root writes call:name{ and }, each tool's grammar the arguments between */
    CHECK(match_m(g, "<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>,days:3}<tool_call|>", NULL) == 1);
    CHECK(match_m(g, "<|tool_call>call:search{limit:50,query:<|\"|>gemma \"4\"<|\"|>,tags:[<|\"|>a<|\"|>]}<tool_call|>", NULL) == 1);
    CHECK(match_m(g, "<|tool_call>call:search{query:<|\"|>x<|\"|>}<tool_call|>", NULL) == 1);
    CHECK(match_m(g, "<|tool_call>call:search{city:<|\"|>Oslo<|\"|>}<tool_call|>", NULL) == -1); /* another tool's argument */
    CHECK(match_m(g, "<|tool_call>call:get_weather{query:<|\"|>x<|\"|>}<tool_call|>", NULL) == -1);
    CHECK(match_m(g, "<|tool_call>call:search{query:<|\"|>x<|\"|>,limit:51}<tool_call|>", NULL) == -1);
    CHECK(match_m(g, "<|tool_call>call:search{{query:<|\"|>x<|\"|>}}<tool_call|>", NULL) == -1);
    CHECK(match_m(g, "<|tool_call>call:search{query:<|\"|>x<|\"|>}", NULL) == 0); /* not closed yet */
    CHECK(match_m(g, "<|tool_call>call:other{}<tool_call|>", NULL) == -1);
    REJECT(g, "<|tool_call>call:search{query:<|\"|>x<|\"|>}<tool_call|>"); /* markers spelled out */
    gm_grammar_free(g);
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
    gm_grammar *g = gbnf("root ::= <|tool_call> \"call:f{a:\" <|\"|> [^\\U000F0000-\\U000F00FF]* <|\"|> \"}\" <tool_call|>");
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
        check_mask_exact(m, n, where);
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
    g = gbnf("root ::= [^a]*");
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
    g = tool_call_grammar();
    if (g) {
        CHECK_OK(gm_grammar_ctx_new(g, mk, &c, &err), &err);
        CHECK_OK(gm_matcher_new(c, &m, &err), &err);
        CHECK_OK(gm_matcher_accept_token(m, TC, &ok, &err), &err);
        CHECK(ok);
        CHECK_OK(gm_matcher_accept_token(m, CALL, &ok, &err), &err);
        for (const char *q = "search{query:"; *q && ok; q++) CHECK_OK(gm_matcher_accept_token(m, CH(*q), &ok, &err), &err);
        check_mask_exact(m, n, "tool call string");
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
    RUN(parse_valid);
    RUN(parse_errors);
    RUN(parse_hostile);
    RUN(match_basics);
    RUN(match_utf8);
    RUN(match_json_gbnf);
    RUN(match_arithmetic_list);
    RUN(match_empty_language);
    RUN(clone_rollback);
    RUN(schema_cases);
    RUN(schema_integer_ranges_wide);
    RUN(schema_refusals);
    RUN(schema_whitespace);
    RUN(mask_small_vocab);
    RUN(gbnf_markers);
    RUN(schema_dialect_gemma4);
    RUN(schema_dialect_functiongemma);
    RUN(schema_dialect_python);
    RUN(schema_dialect_refusals);
    RUN(schema_rule_prefix);
    RUN(tool_call_two_tools);
    RUN(vocab_markers);
    RUN(mask_real_vocab_walks);
    return test_summary();
}
