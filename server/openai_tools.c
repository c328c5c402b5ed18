/* server/openai_tools.c — OpenAI's tools on /v1/chat/completions: `tools`, `tool_choice` and
 * `parallel_tool_calls` into the request (declared in the prompt in the model's format, read back from its
 * replies; `required` and a named function constrain the reply to calls whose arguments follow the
 * function's parameters schema), assistant `tool_calls` and `tool` messages of the history into the chat
 * library's messages, and the calls read from a choice into `message.tool_calls` and stream deltas. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "gemma_chat.h"
#include "gemma_grammar.h"

#define MAX_TOOLS 128

static bool fail(srv_error *e, const char *code, const char *fmt, const char *a) {
    srv_error_set(e, 400, "invalid_request_error", code, fmt, a ? a : "");
    return false;
}

/* OpenAI's rule for function names: letters, digits, underscores and dashes, 1 to 64 (dots too, as
 * llama.cpp and vLLM accept them). */
static bool good_name(const char *s) {
    size_t n = 0;
    for (; s[n]; n++) {
        const char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return false;
    }
    return n >= 1 && n <= 64;
}

/* One entry of `tools`: {"type": "function", "function": {name, description?, parameters?, strict?}}. */
static bool read_tool(const cJSON *t, int i, gm_tool *out, srv_error *e) {
    char where[32];
    snprintf(where, sizeof where, "tools[%d]", i);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
    if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsObject(f))
        return fail(e, NULL, "%s must be {\"type\": \"function\", \"function\": {...}}", where);
    const cJSON *k;
    cJSON_ArrayForEach(k, f) {
        if (strcmp(k->string, "name") && strcmp(k->string, "description") && strcmp(k->string, "parameters") &&
            strcmp(k->string, "strict") && !cJSON_IsNull(k))
            return fail(e, "unsupported_field", "%s.function has a field this server does not read", where);
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(f, "description");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(f, "parameters");
    const cJSON *strict = cJSON_GetObjectItemCaseSensitive(f, "strict");
    if (!cJSON_IsString(name) || !good_name(name->valuestring))
        return fail(e, NULL, "%s.function.name must be 1 to 64 letters, digits, '_', '-' or '.'", where);
    if (desc && !cJSON_IsNull(desc) && !cJSON_IsString(desc)) return fail(e, NULL, "%s.function.description must be a string", where);
    if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params))
        return fail(e, NULL, "%s.function.parameters must be a JSON schema object", where);
    if (strict && !cJSON_IsNull(strict) && !cJSON_IsBool(strict)) return fail(e, NULL, "%s.function.strict must be true or false", where);
    out->name = strdup(name->valuestring);
    out->description = cJSON_IsString(desc) ? strdup(desc->valuestring) : NULL;
    out->parameters = cJSON_IsObject(params) ? cJSON_PrintUnformatted(params) : NULL;
    if (!out->name || (cJSON_IsString(desc) && !out->description) || (cJSON_IsObject(params) && !out->parameters)) {
        srv_error_set(e, 500, "server_error", NULL, "out of memory");
        return false;
    }
    return true;
}

/* tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name": ...}} */
static bool read_choice(const cJSON *c, const gen_request *rq, tool_mode *mode, const char **named, srv_error *e) {
    *named = NULL;
    if (!c || cJSON_IsNull(c)) {
        *mode = rq->n_tools ? TOOLS_AUTO : TOOLS_NONE;
        return true;
    }
    if (cJSON_IsString(c)) {
        const char *s = c->valuestring;
        *mode = !strcmp(s, "none") ? TOOLS_NONE : !strcmp(s, "auto") ? TOOLS_AUTO : !strcmp(s, "required") ? TOOLS_REQUIRED : -1;
        if ((int)*mode < 0) return fail(e, NULL, "tool_choice '%.40s' is not none, auto, required or a function", s);
    } else {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *name = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "name") : NULL;
        if (!cJSON_IsObject(c) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
            return fail(e, NULL, "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": "
                        "{\"name\": ...}}%s", NULL);
        *mode = TOOLS_NAMED;
        *named = name->valuestring;
        bool found = false;
        for (int i = 0; i < rq->n_tools && !found; i++) found = !strcmp(rq->tools[i].name, *named);
        if (!found) return fail(e, NULL, "tool_choice names '%.64s', which is not in tools", *named);
    }
    if (*mode == TOOLS_AUTO && !rq->n_tools) *mode = TOOLS_NONE; /* nothing to call: what "auto" means then */
    if (*mode != TOOLS_NONE && !rq->n_tools) return fail(e, NULL, "tool_choice '%s' needs tools", "required");
    return true;
}

bool openai_tools_parse(const cJSON *root, const gm_tokenizer *tok, gen_request *rq, srv_error *e) {
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON *choice = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(root, "parallel_tool_calls");
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools)) return fail(e, NULL, "'%s' must be a list of functions", "tools");
    if (par && !cJSON_IsNull(par) && !cJSON_IsBool(par)) return fail(e, NULL, "'%s' must be true or false", "parallel_tool_calls");
    const int n = cJSON_IsArray(tools) ? cJSON_GetArraySize(tools) : 0;
    if (n > MAX_TOOLS) return fail(e, NULL, "'tools' has more than %s functions", "128");
    if (n && !(rq->tools = calloc((size_t)n, sizeof *rq->tools))) {
        srv_error_set(e, 500, "server_error", NULL, "out of memory");
        return false;
    }
    const cJSON *t, *list = n ? tools : NULL;
    cJSON_ArrayForEach(t, list) {
        if (!read_tool(t, rq->n_tools, &rq->tools[rq->n_tools], e)) return rq->n_tools++, false;
        for (int k = 0; k < rq->n_tools; k++)
            if (!strcmp(rq->tools[k].name, rq->tools[rq->n_tools].name))
                return rq->n_tools++, fail(e, NULL, "tools: the function '%.64s' is declared twice", rq->tools[k].name);
        rq->n_tools++;
    }
    tool_mode mode;
    const char *named;
    if (!read_choice(choice, rq, &mode, &named, e)) return false;
    rq->tool_mode = mode;
    rq->parallel_tool_calls = !cJSON_IsFalse(par);
    if (mode == TOOLS_NONE) return true; /* declared but not to be called: the prompt does not offer them */
    const gm_tool_format tf = gm_tokenizer_tool_format(tok);
    if (tf == GM_TOOLS_NONE)
        return fail(e, NULL, "this model's vocabulary has no tool-call format (%s)", "Gemma 4 turns without its tool tokens");
    if (rq->grammar)
        return fail(e, NULL, "give either tools or one of response_format, json_schema and grammar (%s)", "not both");
    if (mode == TOOLS_REQUIRED || mode == TOOLS_NAMED) {
        gm_error err = {0};
        if (gm_tool_grammar(tok, rq->tools, (size_t)rq->n_tools, named, rq->parallel_tool_calls, &rq->grammar, &err)) {
            srv_error_set(e, 400, "invalid_request_error", err.code == GM_ERR_UNSUPPORTED ? "unsupported_schema" : NULL,
                          "tools: %s", err.msg);
            return false;
        }
        rq->grammar_markers = tf != GM_TOOLS_GEMMA3;
    }
    return true;
}

/* ---------------------------------------------------------------- history */

void openai_msg_free(openai_msg *m) {
    for (size_t k = 0; k < m->n_calls; k++) {
        free((char *)m->calls[k].id);
        free((char *)m->calls[k].name);
        free((char *)m->calls[k].arguments);
    }
    free(m->calls);
    free(m->tool_call_id);
    free(m->name);
    free(m->reasoning);
    memset(m, 0, sizeof *m);
}

static bool string_field(const cJSON *msg, const char *k, int idx, char **out, srv_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, k);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsString(v)) {
        srv_error_set(e, 400, "invalid_request_error", NULL, "messages[%d].%s must be a string", idx, k);
        return false;
    }
    if (!(*out = strdup(v->valuestring))) srv_error_set(e, 500, "server_error", NULL, "out of memory");
    return *out != NULL;
}

/* An assistant message's tool_calls: [{id, type: "function", function: {name, arguments}}], arguments a JSON
 * object as a string (or, leniently, the object itself). */
static bool read_calls(const cJSON *list, int idx, openai_msg *m, srv_error *e) {
    if (!cJSON_IsArray(list)) {
        srv_error_set(e, 400, "invalid_request_error", NULL, "messages[%d].tool_calls must be a list", idx);
        return false;
    }
    const int n = cJSON_GetArraySize(list);
    if (n > MAX_TOOLS) {
        srv_error_set(e, 400, "invalid_request_error", NULL, "messages[%d].tool_calls has more than 128 calls", idx);
        return false;
    }
    if (n && !(m->calls = calloc((size_t)n, sizeof *m->calls))) {
        srv_error_set(e, 500, "server_error", NULL, "out of memory");
        return false;
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, list) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        const cJSON *name = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "name") : NULL;
        const cJSON *args = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "arguments") : NULL;
        if (!cJSON_IsString(name) || !(cJSON_IsString(args) || cJSON_IsObject(args)) || (id && !cJSON_IsNull(id) && !cJSON_IsString(id))) {
            srv_error_set(e, 400, "invalid_request_error", NULL,
                          "messages[%d].tool_calls[%zu] must be {id, type: \"function\", function: {name, arguments}}", idx,
                          m->n_calls);
            return false;
        }
        gm_tool_call *d = &m->calls[m->n_calls++];
        d->name = strdup(name->valuestring);
        d->arguments = cJSON_IsString(args) ? strdup(args->valuestring) : cJSON_PrintUnformatted(args);
        d->id = cJSON_IsString(id) ? strdup(id->valuestring) : NULL;
        if (!d->name || !d->arguments || (cJSON_IsString(id) && !d->id)) {
            srv_error_set(e, 500, "server_error", NULL, "out of memory");
            return false;
        }
    }
    return true;
}

bool openai_message_tools(const cJSON *msg, int idx, const char *role, gm_chat_message *m, openai_msg *own, srv_error *e) {
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    const bool assistant = !strcmp(role, "assistant");
    if (calls && !cJSON_IsNull(calls) && !assistant) {
        srv_error_set(e, 400, "invalid_request_error", NULL, "messages[%d]: only assistant messages carry tool_calls", idx);
        return false;
    }
    if (calls && !cJSON_IsNull(calls) && !read_calls(calls, idx, own, e)) return false;
    if (!string_field(msg, "tool_call_id", idx, &own->tool_call_id, e) || !string_field(msg, "name", idx, &own->name, e) ||
        !string_field(msg, "reasoning_content", idx, &own->reasoning, e))
        return false;
    if (!own->reasoning && !string_field(msg, "reasoning", idx, &own->reasoning, e)) return false;
    m->tool_calls = own->calls;
    m->n_tool_calls = own->n_calls;
    m->tool_call_id = own->tool_call_id;
    m->name = !strcmp(role, "tool") ? own->name : NULL; /* a speaker's name is not rendered (Gemma has none) */
    m->reasoning = assistant ? own->reasoning : NULL;
    return true;
}

/* ---------------------------------------------------------------- answers */

static cJSON *call_json(int index, const char *id, const char *name, const char *args, bool with_index) {
    cJSON *c = cJSON_CreateObject();
    if (with_index) cJSON_AddNumberToObject(c, "index", index);
    if (id) {
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function");
    }
    cJSON *f = cJSON_AddObjectToObject(c, "function");
    if (name) cJSON_AddStringToObject(f, "name", name);
    cJSON_AddStringToObject(f, "arguments", args);
    return c;
}

void openai_add_tool_calls(cJSON *msg, const gen_session *g) {
    const int n = gen_session_n_calls(g);
    if (!n) return;
    cJSON *list = cJSON_AddArrayToObject(msg, "tool_calls");
    for (int i = 0; i < n; i++) {
        const char *name = NULL, *args = NULL;
        gm_tool_parser_call(g->tp, (size_t)i, &name, &args);
        cJSON_AddItemToArray(list, call_json(i, g->call_id[i], name, args, false));
    }
}

void openai_add_call_delta(cJSON *delta, int index, const char *id, const char *name, const char *args) {
    cJSON *list = cJSON_AddArrayToObject(delta, "tool_calls");
    if (id) cJSON_AddItemToArray(list, call_json(index, id, name, "", true));
    else cJSON_AddItemToArray(list, call_json(index, NULL, NULL, args, true));
}
