/* tests/test_schema.c — JSON schemas to grammars (grammar/schema.c, grammar/tools.c): valid instances accepted,
 * invalid ones rejected, unsupported keywords refused by name, wide integer ranges, whitespace; the tool-call
 * dialects (Gemma 4, FunctionGemma, Python) and rule prefixes; two tools under one root. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "support/grammar_check.h"

/* ------------------------------------------------------------------ JSON schemas */
/* Every case of tests/data/grammar/schemas.json (checked against Python's jsonschema by
 * tests/grammar_check.py): valid instances accepted, invalid ones and those outside the generated
 * subset refused. */
TEST(schema_cases) {
    cJSON *cases = gt_load_cases();
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cases) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        gm_grammar *g = gt_schema_grammar(cJSON_GetObjectItem(c, "schema"), name);
        if (!g) continue;
        n++;
        const cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(c, "valid"))
            CHECK_MSG(gt_match(g, t->valuestring) == 1, "%s: should accept %s", name, t->valuestring);
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(c, "invalid"))
            CHECK_MSG(gt_match(g, t->valuestring) != 1, "%s: should refuse %s", name, t->valuestring);
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(c, "outside"))
            CHECK_MSG(gt_match(g, t->valuestring) != 1, "%s: should refuse %s", name, t->valuestring);
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
            CHECK_MSG((gt_match(g, num) == 1) == in, "%s: %s should be %s", schema, num, in ? "accepted" : "refused");
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
            CHECK_MSG(gt_match_m(g, cs[i].valid[k], delim) == 1, "dialect %d case %zu: should accept %s", d, i, cs[i].valid[k]);
        for (int k = 0; k < 11 && cs[i].invalid[k]; k++)
            CHECK_MSG(gt_match_m(g, cs[i].invalid[k], delim) != 1, "dialect %d case %zu: should refuse %s", d, i, cs[i].invalid[k]);
        gm_grammar_free(g);
    }
}

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
    CHECK(gt_match_m(g, "city:<escape>Oslo<escape>", NULL) == -1);
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
    CHECK(gt_match_m(g, "city:<|\"|>Oslo<|\"|>", NULL) == -1);
    CHECK(gt_match_m(g, "city:<escape>Oslo<escape>", NULL) == 1);
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
    CHECK(gt_match_m(g, "\"a<|tool_call>\"", NULL) == 1); /* plain JSON: any character */
    gm_grammar_free(g);
    o.exclude_markers = true;
    CHECK_OK(gm_grammar_from_json_schema(str, strlen(str), &o, &g, &err), &err);
    CHECK(gt_match_m(g, "\"a<|tool_call>\"", NULL) == -1);
    ACCEPT(g, "\"a\\/b\"");
    gm_grammar_free(g);
}

TEST(tool_call_two_tools) {
    gm_grammar *g = gt_tool_call_grammar();
    if (!g) return;
    /* the root writes call:name{ and }, each tool's grammar the arguments between */
    CHECK(gt_match_m(g, "<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>,days:3}<tool_call|>", NULL) == 1);
    CHECK(gt_match_m(g, "<|tool_call>call:search{limit:50,query:<|\"|>gemma \"4\"<|\"|>,tags:[<|\"|>a<|\"|>]}<tool_call|>", NULL) == 1);
    CHECK(gt_match_m(g, "<|tool_call>call:search{query:<|\"|>x<|\"|>}<tool_call|>", NULL) == 1);
    CHECK(gt_match_m(g, "<|tool_call>call:search{city:<|\"|>Oslo<|\"|>}<tool_call|>", NULL) == -1); /* another tool's argument */
    CHECK(gt_match_m(g, "<|tool_call>call:get_weather{query:<|\"|>x<|\"|>}<tool_call|>", NULL) == -1);
    CHECK(gt_match_m(g, "<|tool_call>call:search{query:<|\"|>x<|\"|>,limit:51}<tool_call|>", NULL) == -1);
    CHECK(gt_match_m(g, "<|tool_call>call:search{{query:<|\"|>x<|\"|>}}<tool_call|>", NULL) == -1);
    CHECK(gt_match_m(g, "<|tool_call>call:search{query:<|\"|>x<|\"|>}", NULL) == 0); /* not closed yet */
    CHECK(gt_match_m(g, "<|tool_call>call:other{}<tool_call|>", NULL) == -1);
    REJECT(g, "<|tool_call>call:search{query:<|\"|>x<|\"|>}<tool_call|>"); /* markers spelled out */
    gm_grammar_free(g);
}

int main(void) {
    RUN(schema_cases);
    RUN(schema_integer_ranges_wide);
    RUN(schema_refusals);
    RUN(schema_whitespace);
    RUN(schema_dialect_gemma4);
    RUN(schema_dialect_functiongemma);
    RUN(schema_dialect_python);
    RUN(schema_dialect_refusals);
    RUN(schema_rule_prefix);
    RUN(tool_call_two_tools);
    return test_summary();
}
