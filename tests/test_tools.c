/* tests/test_tools.c — tools in Gemma's formats (text/tools.c, text/chat.c): Gemma 4 conversations with
 * tools, calls, results and thoughts against the official template rendered by jinja2
 * (tests/data/tokenizer/tools_gemma4.json, tests/gen/gen_tool_chat_fixture.py); FunctionGemma against
 * Google's documented example; Gemma 3's pythonic prompt on the default model; and the parser reading
 * replies of each format back into calls, thoughts and text (malformed calls stay text). */
#include <cjson/cJSON.h>
#include <string.h>

#include "support/test.h"
#include "gemma_chat.h"
#include "text/tokenizer.h"

static gm_tokenizer *g_tok; /* the default model's (Gemma 3) */

/* A vocabulary with single printable characters, "\n", the SentencePiece space and the given markers
 * (CONTROL), so any ASCII text encodes. */
static gm_tokenizer *marker_vocab(const char *const *markers, size_t n_markers) {
    static char chars[95][2];
    const char *pieces[160];
    uint32_t lens[160];
    int32_t types[160];
    const char *special[] = {"<pad>", "<eos>", "<bos>", "<unk>"};
    int n = 0;
    for (int i = 0; i < 4; i++) pieces[n] = special[i], types[n++] = i == 3 ? 2 : 3;
    for (int c = 32; c < 127; c++) {
        chars[c - 32][0] = (char)c;
        pieces[n] = chars[c - 32], types[n++] = 1;
    }
    pieces[n] = "\n", types[n++] = 1;
    pieces[n] = "\xe2\x96\x81", types[n++] = 1;
    for (size_t i = 0; i < n_markers; i++) pieces[n] = markers[i], types[n++] = 3;
    for (int i = 0; i < n; i++) lens[i] = (uint32_t)strlen(pieces[i]);
    gm_vocab_spec s = {.n = n, .pieces = pieces, .piece_lens = lens, .types = types, .bos_id = 2, .eos_id = 1,
                       .unk_id = 3, .pad_id = 0, .eot_id = -1, .add_bos = true};
    gm_tokenizer *t = NULL;
    gm_error err = {0};
    CHECK_OK(gm_tokenizer_build(&s, "tool test vocab", &t, &err), &err);
    return t;
}

static const char *const G4[] = {"<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>", "<|tool>", "<tool|>",
                                 "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", "<|\"|>"};
static const char *const FG[] = {"<start_of_turn>", "<end_of_turn>", "<escape>", "<start_function_declaration>",
                                 "<end_function_declaration>", "<start_function_call>", "<end_function_call>",
                                 "<start_function_response>", "<end_function_response>"};

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The fixture's OpenAI-shaped tools and messages as the library's structs (strings borrowed from the tree;
 * parameters printed, freed by the caller through *owned). */
typedef struct conv {
    gm_tool tools[8];
    size_t n_tools;
    gm_chat_message msgs[16];
    size_t n;
    gm_tool_call calls[16][4];
    char *owned[64];
    size_t n_owned;
} conv;

static void conv_read(conv *c, const cJSON *tools, const cJSON *msgs) {
    memset(c, 0, sizeof *c);
    const cJSON *t, *m;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        gm_tool *d = &c->tools[c->n_tools++];
        d->name = str(f, "name");
        d->description = str(f, "description");
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(f, "parameters");
        if (p) d->parameters = c->owned[c->n_owned++] = cJSON_PrintUnformatted(p);
    }
    cJSON_ArrayForEach(m, msgs) {
        gm_chat_message *d = &c->msgs[c->n];
        d->role = str(m, "role");
        d->content = str(m, "content");
        d->tool_call_id = str(m, "tool_call_id");
        d->reasoning = str(m, "reasoning_content");
        const cJSON *tc;
        cJSON_ArrayForEach(tc, cJSON_GetObjectItemCaseSensitive(m, "tool_calls")) {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(tc, "function");
            c->calls[c->n][d->n_tool_calls++] = (gm_tool_call){str(tc, "id"), str(f, "name"), str(f, "arguments")};
        }
        d->tool_calls = d->n_tool_calls ? c->calls[c->n] : NULL;
        c->n++;
    }
}

static void conv_free(conv *c) {
    for (size_t i = 0; i < c->n_owned; i++) free(c->owned[i]);
}

TEST(gemma4_like_the_official_template) {
    gm_tokenizer *t = marker_vocab(G4, sizeof G4 / sizeof *G4);
    if (!t) return;
    CHECK_EQ_INT(gm_tokenizer_tool_format(t), GM_TOOLS_GEMMA4);
    size_t len = 0;
    char *buf = (char *)test_read_file(test_data_path("tokenizer/tools_gemma4.json"), &len);
    cJSON *root = buf ? cJSON_ParseWithLength(buf, len) : NULL;
    CHECK(root != NULL);
    const cJSON *c;
    int k = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "cases")) {
        conv v;
        conv_read(&v, cJSON_GetObjectItemCaseSensitive(c, "tools"), cJSON_GetObjectItemCaseSensitive(c, "messages"));
        const gm_chat_options o = {.add_generation_prompt = true, .tools = v.tools, .n_tools = v.n_tools};
        char *out = NULL;
        gm_error err = {0};
        CHECK_OK(gm_chat_render(t, v.msgs, v.n, &o, &out, &err), &err);
        const char *want = str(c, "rendered");
        CHECK_MSG(out && !strcmp(out, want), "case %d:\n got  %s\n want %s", k, out ? out : "(null)", want);
        /* ids: the markers' ids, the rest text; equal to the rendered text parsed for specials */
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        CHECK_OK(gm_chat_tokenize(t, v.msgs, v.n, &o, &a, &na, &err), &err);
        if (out) CHECK_OK(gm_tokenize(t, out, strlen(out), false, true, &b, &nb, &err), &err);
        CHECK_MSG(na == nb && a && b && !memcmp(a, b, na * sizeof *a), "case %d: ids differ", k);
        free(a), free(b), free(out);
        conv_free(&v);
        k++;
    }
    CHECK(k >= 6);
    cJSON_Delete(root);
    free(buf);
    gm_tokenizer_free(t);
}

/* Google's FunctionGemma example (ai.google.dev/gemma/docs/functiongemma/formatting-and-best-practices). */
TEST(functiongemma_documented_example) {
    gm_tokenizer *t = marker_vocab(FG, sizeof FG / sizeof *FG);
    if (!t) return;
    CHECK_EQ_INT(gm_tokenizer_tool_format(t), GM_TOOLS_FUNCTIONGEMMA);
    const gm_tool tool = {"get_current_weather", "Gets the current weather",
                          "{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\",\"description\":"
                          "\"The city and state\"}},\"required\":[\"location\"]}"};
    const gm_tool_call call = {"c1", "get_current_weather", "{\"location\": \"Tokyo, Japan\"}"};
    gm_chat_message m[4] = {{.role = "user", .content = "Hey, what's the weather in Tokyo right now?"},
                            {.role = "assistant", .tool_calls = &call, .n_tool_calls = 1},
                            {.role = "tool", .tool_call_id = "c1", .content = "sunny, 15 C"},
                            {.role = "assistant", .content = "It is sunny, 15 C."}};
    const gm_chat_options o = {.add_generation_prompt = false, .tools = &tool, .n_tools = 1};
    char *out = NULL;
    gm_error err = {0};
    CHECK_OK(gm_chat_render(t, m, 4, &o, &out, &err), &err);
    const char *want =
        "<bos><start_of_turn>developer\nYou are a model that can do function calling with the following functions"
        "<start_function_declaration>declaration:get_current_weather{description:<escape>Gets the current weather<escape>,"
        "parameters:{properties:{location:{description:<escape>The city and state<escape>,type:<escape>STRING<escape>}},"
        "required:[<escape>location<escape>],type:<escape>OBJECT<escape>}}<end_function_declaration><end_of_turn>\n"
        "<start_of_turn>user\nHey, what's the weather in Tokyo right now?<end_of_turn>\n"
        "<start_of_turn>model\n<start_function_call>call:get_current_weather{location:<escape>Tokyo, Japan<escape>}"
        "<end_function_call><start_function_response>response:get_current_weather{value:<escape>sunny, 15 C<escape>}"
        "<end_function_response>It is sunny, 15 C.<end_of_turn>\n";
    CHECK_MSG(out && !strcmp(out, want), "got  %s\nwant %s", out ? out : "(null)", want);
    free(out);
    /* waiting for the result: the turn stays open after the call; no generation prompt after it */
    const gm_chat_options g = {.add_generation_prompt = true, .tools = &tool, .n_tools = 1};
    CHECK_OK(gm_chat_render(t, m, 2, &g, &out, &err), &err);
    CHECK(out && strstr(out, "<end_function_call><start_function_response>") &&
          !strcmp(out + strlen(out) - strlen("<start_function_response>"), "<start_function_response>"));
    free(out);
    gm_tokenizer_free(t);
}

/* Gemma 3: Google's prompt in the first user turn (after the system text), calls as a Python list in the
 * model turn, results as a user turn. */
TEST(gemma3_pythonic_prompt) {
    CHECK_EQ_INT(gm_tokenizer_tool_format(g_tok), GM_TOOLS_GEMMA3);
    const gm_tool tool = {"get_weather", "Weather", "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}"};
    const gm_tool_call calls[2] = {{"a", "get_weather", "{\"city\": \"Paris\", \"days\": 2}"}, {"b", "get_weather", "{}"}};
    gm_chat_message m[5] = {{.role = "system", .content = "Be brief."},
                            {.role = "user", .content = "Weather?"},
                            {.role = "assistant", .tool_calls = calls, .n_tool_calls = 2},
                            {.role = "tool", .tool_call_id = "a", .content = "sun"},
                            {.role = "tool", .tool_call_id = "b", .content = "rain"}};
    const gm_chat_options o = {.add_generation_prompt = true, .tools = &tool, .n_tools = 1};
    char *out = NULL;
    gm_error err = {0};
    CHECK_OK(gm_chat_render(g_tok, m, 5, &o, &out, &err), &err);
    const char *want =
        "<bos><start_of_turn>user\nBe brief.\n\nYou have access to functions. If you decide to invoke any of the "
        "function(s), you MUST put it in the format of\n[func_name1(params_name1=params_value1, "
        "params_name2=params_value2...), func_name2(params)]\nYou SHOULD NOT include any other text in the response "
        "if you call a function\n[{\"name\":\"get_weather\",\"description\":\"Weather\",\"parameters\":{\"type\":"
        "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}]\n\nWeather?<end_of_turn>\n"
        "<start_of_turn>model\n[get_weather(city=\"Paris\", days=2), get_weather()]<end_of_turn>\n"
        "<start_of_turn>user\n<tool_response>\nsun</tool_response>\n<tool_response>\nrain</tool_response><end_of_turn>\n"
        "<start_of_turn>model\n";
    CHECK_MSG(out && !strcmp(out, want), "got  %s\nwant %s", out ? out : "(null)", want);
    free(out);
    /* without tools the plain template, bit for bit */
    char *plain = NULL;
    const gm_chat_options none = {.add_generation_prompt = true};
    CHECK_OK(gm_chat_render(g_tok, m, 2, &none, &out, &err), &err);
    CHECK_OK(gm_chat_render(g_tok, m, 2, &(gm_chat_options){.add_generation_prompt = true}, &plain, &err), &err);
    CHECK(out && plain && !strcmp(out, plain));
    free(out), free(plain);
}

TEST(conversation_shape_errors) {
    const gm_tool_call call = {"a", "f", "{}"};
    gm_error err = {0};
    char *out = NULL;
    const gm_chat_options o = {.add_generation_prompt = true};
    gm_chat_message bad1[2] = {{.role = "user", .content = "x"}, {.role = "tool", .content = "r"}};
    CHECK_EQ_INT(gm_chat_render(g_tok, bad1, 2, &o, &out, &err), GM_ERR_ARG);
    CHECK(strstr(err.msg, "tool result") != NULL);
    gm_chat_message bad2[3] = {{.role = "user", .content = "x"}, {.role = "assistant", .tool_calls = &call, .n_tool_calls = 1},
                               {.role = "user", .content = "y"}};
    CHECK_EQ_INT(gm_chat_render(g_tok, bad2, 3, &o, &out, &err), GM_ERR_ARG);
    const gm_tool_call notobj = {"a", "f", "[1]"};
    gm_chat_message bad3[2] = {{.role = "user", .content = "x"}, {.role = "assistant", .tool_calls = &notobj, .n_tool_calls = 1}};
    CHECK_EQ_INT(gm_chat_render(g_tok, bad3, 2, &o, &out, &err), GM_ERR_ARG);
    CHECK(strstr(err.msg, "not a JSON object") != NULL);
    const gm_tool badparams = {"f", NULL, "{oops"};
    const gm_chat_options ob = {.add_generation_prompt = true, .tools = &badparams, .n_tools = 1};
    CHECK_EQ_INT(gm_chat_render(g_tok, bad1, 1, &ob, &out, &err), GM_ERR_ARG);
    CHECK(out == NULL);
}

/* ---- the parser */

/* Feeds text (markers parsed) to a parser token by token; returns the content it let out. */
static char *feed(gm_tool_parser *p, const gm_tokenizer *t, const char *text, bool *stopped) {
    int32_t *ids = NULL;
    size_t n = 0;
    gm_error err = {0};
    CHECK_OK(gm_tokenize(t, text, strlen(text), false, true, &ids, &n, &err), &err);
    size_t cap = 4096, len = 0;
    char *out = calloc(cap, 1);
    *stopped = false;
    for (size_t i = 0; i < n && !*stopped; i++) {
        const char *s;
        size_t k;
        *stopped = gm_tool_parser_push(p, ids[i], &s, &k);
        if (len + k < cap) memcpy(out + len, s, k), len += k;
    }
    const char *s;
    size_t k;
    gm_tool_parser_finish(p, &s, &k);
    if (len + k < cap) memcpy(out + len, s, k), len += k;
    free(ids);
    return out;
}

static bool call_is(const gm_tool_parser *p, size_t i, const char *name, const char *args) {
    const char *n = NULL, *a = NULL;
    gm_tool_parser_call(p, i, &n, &a);
    if (!n || strcmp(n, name) || strcmp(a, args)) {
        fprintf(stderr, "  call %zu: %s %s, want %s %s\n", i, n ? n : "-", a ? a : "-", name, args);
        return false;
    }
    return true;
}

TEST(parse_gemma4_replies) {
    gm_tokenizer *t = marker_vocab(G4, sizeof G4 / sizeof *G4);
    if (!t) return;
    const gm_tool tools[2] = {{"get_weather", NULL, NULL}, {"search", NULL, NULL}};
    gm_error err = {0};
    gm_tool_parser *p = NULL;
    bool stop;
    CHECK_OK(gm_tool_parser_new(t, tools, 2, &p, &err), &err);
    char *txt = feed(p, t,
                     "Sure.<|tool_call>call:get_weather{city:<|\"|>Paris, FR<|\"|>,days:3,opts:{metric:true,x:None},"
                     "tags:[<|\"|>a{b}<|\"|>,2.5]}<tool_call|><|tool_call>call:search{q:<|\"|>x<|\"|>}<tool_call|>"
                     "<|tool_response>ignored",
                     &stop);
    CHECK(stop);
    CHECK_MSG(!strcmp(txt, "Sure."), "content '%s'", txt);
    CHECK_EQ_INT(gm_tool_parser_n_calls(p), 2);
    CHECK(call_is(p, 0, "get_weather",
                  "{\"city\":\"Paris, FR\",\"days\":3,\"opts\":{\"metric\":true,\"x\":null},\"tags\":[\"a{b}\",2.5]}"));
    CHECK(call_is(p, 1, "search", "{\"q\":\"x\"}"));
    free(txt);
    gm_tool_parser_free(p);
    /* thoughts apart; an unknown function, a malformed call and an unterminated one are text */
    CHECK_OK(gm_tool_parser_new(t, tools, 2, &p, &err), &err);
    txt = feed(p, t, "<|channel>thought\nhmm<channel|>A<|tool_call>call:nope{}<tool_call|>B<|tool_call>call:search{q:"
                     "<tool_call|>C<|tool_call>call:search{q:1}",
               &stop);
    CHECK(!stop);
    size_t rl;
    CHECK(!strcmp(gm_tool_parser_reasoning(p, &rl), "thought\nhmm"));
    CHECK_MSG(!strcmp(txt, "A<|tool_call>call:nope{}<tool_call|>B<|tool_call>call:search{q:<tool_call|>C"
                           "<|tool_call>call:search{q:1}"),
              "content '%s'", txt);
    CHECK_EQ_INT(gm_tool_parser_n_calls(p), 0);
    free(txt);
    gm_tool_parser_free(p);
    gm_tokenizer_free(t);
}

TEST(parse_functiongemma_replies) {
    gm_tokenizer *t = marker_vocab(FG, sizeof FG / sizeof *FG);
    if (!t) return;
    const gm_tool tool = {"get_current_weather", NULL, NULL};
    gm_error err = {0};
    gm_tool_parser *p = NULL;
    bool stop;
    CHECK_OK(gm_tool_parser_new(t, &tool, 1, &p, &err), &err);
    char *txt = feed(p, t,
                     "<start_function_call>call:get_current_weather{location:<escape>Tokyo, Japan<escape>}"
                     "<end_function_call><start_function_response>",
                     &stop);
    CHECK(stop && !txt[0]);
    CHECK(call_is(p, 0, "get_current_weather", "{\"location\":\"Tokyo, Japan\"}"));
    free(txt);
    gm_tool_parser_free(p);
    gm_tokenizer_free(t);
}

TEST(parse_gemma3_replies) {
    const gm_tool tools[2] = {{"get_weather", NULL, NULL}, {"now", NULL, NULL}};
    struct { const char *reply, *content; int n_calls; const char *args0; } cases[] = {
        {"[get_weather(city=\"Paris\", days=3, metric=True, x=None)]", "", 1,
         "{\"city\":\"Paris\",\"days\":3,\"metric\":true,\"x\":null}"},
        {"  [get_weather(city='O\\'Hare', tags=['a', \"b\"], o={'k': -1.5}), now()]\n", "", 2,
         "{\"city\":\"O'Hare\",\"tags\":[\"a\",\"b\"],\"o\":{\"k\":-1.5}}"},
        {"```tool_code\n[now()]\n```", "", 1, "{}"},
        {"Hello there [not a call]", "Hello there [not a call]", 0, NULL},
        {"[get_weather(city=paris)]", "[get_weather(city=paris)]", 0, NULL}, /* a variable, not a value */
        {"[unknown(a=1)]", "[unknown(a=1)]", 0, NULL},
        {"[now()] and more", "[now()] and more", 0, NULL},
        {"[now(", "[now(", 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gm_tool_parser *p = NULL;
        gm_error err = {0};
        bool stop;
        CHECK_OK(gm_tool_parser_new(g_tok, tools, 2, &p, &err), &err);
        char *txt = feed(p, g_tok, cases[i].reply, &stop);
        CHECK_MSG(!strcmp(txt, cases[i].content), "case %zu: content '%s'", i, txt);
        CHECK_MSG(gm_tool_parser_n_calls(p) == (size_t)cases[i].n_calls, "case %zu: %zu calls", i, gm_tool_parser_n_calls(p));
        if (cases[i].args0) CHECK(call_is(p, 0, strstr(cases[i].reply, "now()]\n```") ? "now" : "get_weather", cases[i].args0));
        free(txt);
        gm_tool_parser_free(p);
    }
}

/* What the writers render, the parser reads back: the same calls. */
TEST(round_trip) {
    gm_tokenizer *t4 = marker_vocab(G4, sizeof G4 / sizeof *G4), *fg = marker_vocab(FG, sizeof FG / sizeof *FG);
    const gm_tokenizer *toks[3] = {t4, fg, g_tok};
    const gm_tool tool = {"f", NULL, NULL};
    const gm_tool_call call = {"c", "f", "{\"a\":\"x, y}\",\"b\":[1,2.5,{\"c\":false}],\"d\":\"\"}"};
    for (int k = 0; k < 3; k++) {
        if (!toks[k]) continue;
        gm_chat_message m[2] = {{.role = "user", .content = "u"}, {.role = "assistant", .tool_calls = &call, .n_tool_calls = 1}};
        const gm_chat_options o = {.tools = &tool, .n_tools = 1};
        char *out = NULL;
        gm_error err = {0};
        CHECK_OK(gm_chat_render(toks[k], m, 2, &o, &out, &err), &err);
        const char *open = k == 0 ? "<|turn>model\n" : "<start_of_turn>model\n";
        const char *reply = out ? strstr(out, open) : NULL;
        CHECK(reply != NULL);
        if (!reply) continue;
        gm_tool_parser *p = NULL;
        bool stop;
        CHECK_OK(gm_tool_parser_new(toks[k], &tool, 1, &p, &err), &err);
        char *txt = feed(p, toks[k], reply + strlen(open), &stop);
        CHECK_MSG(gm_tool_parser_n_calls(p) == 1, "format %d: %s", k, txt);
        CHECK(call_is(p, 0, "f", "{\"a\":\"x, y}\",\"b\":[1,2.5,{\"c\":false}],\"d\":\"\"}"));
        free(txt), free(out);
        gm_tool_parser_free(p);
    }
    gm_tokenizer_free(t4);
    gm_tokenizer_free(fg);
}

int main(void) {
    gm_error err = {0};
    if (!test_have_default_model(NULL)) return TEST_SKIP;
    if (gm_tokenizer_open(GM_DEFAULT_MODEL, &g_tok, &err) != GM_OK) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        return 1;
    }
    RUN(gemma4_like_the_official_template);
    RUN(functiongemma_documented_example);
    RUN(gemma3_pythonic_prompt);
    RUN(conversation_shape_errors);
    RUN(parse_gemma4_replies);
    RUN(parse_functiongemma_replies);
    RUN(parse_gemma3_replies);
    RUN(round_trip);
    gm_tokenizer_free(g_tok);
    return test_summary();
}
