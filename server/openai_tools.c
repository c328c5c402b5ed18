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

/* One entry of `tools`: {"type": "function", "function": {name, description?, parameters?, strict?}}. */
static bool read_tool(const cJSON *t, int i, gen_request *rq, srv_error *e) {
    char where[32];
    snprintf(where, sizeof where, "tools[%d]", i);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
    if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsObject(f))
        return fail(e, NULL, "%s must be {\"type\": \"function\", \"function\": {...}}", where);
    static const char *const known[] = {"name", "description", "parameters", "strict"};
    char inner[48];
    snprintf(inner, sizeof inner, "%s.function", where);
    if (!srq_known(f, inner, known, sizeof known / sizeof *known, e)) return false;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(f, "description");
    const cJSON *strict = cJSON_GetObjectItemCaseSensitive(f, "strict");
    if (!cJSON_IsString(name)) return fail(e, NULL, "%s.function.name must be a string", where);
    if (desc && !cJSON_IsNull(desc) && !cJSON_IsString(desc)) return fail(e, NULL, "%s.function.description must be a string", where);
    if (strict && !cJSON_IsNull(strict) && !cJSON_IsBool(strict)) return fail(e, NULL, "%s.function.strict must be true or false", where);
    return srq_tool(rq, inner, name->valuestring, cJSON_IsString(desc) ? desc->valuestring : NULL,
                    cJSON_GetObjectItemCaseSensitive(f, "parameters"), e);
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
        return true;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
    const cJSON *name = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "name") : NULL;
    if (!cJSON_IsObject(c) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
        return fail(e, NULL, "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": "
                    "{\"name\": ...}}%s", NULL);
    *mode = TOOLS_NAMED;
    *named = name->valuestring;
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
    const cJSON *t, *list = n ? tools : NULL;
    int i = 0;
    cJSON_ArrayForEach(t, list) {
        if (!read_tool(t, i++, rq, e)) return false;
    }
    tool_mode mode;
    const char *named;
    return read_choice(choice, rq, &mode, &named, e) && srq_tool_choice(rq, tok, mode, named, !cJSON_IsFalse(par), e);
}

/* ---------------------------------------------------------------- history */

static const char *string_field(const cJSON *msg, const char *k, int idx, srv_error *e, bool *ok) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, k);
    if (!v || cJSON_IsNull(v) || !*ok) return NULL;
    if (cJSON_IsString(v)) return v->valuestring;
    srv_error_set(e, 400, "invalid_request_error", NULL, "messages[%d].%s must be a string", idx, k);
    *ok = false;
    return NULL;
}

/* An assistant message's tool_calls: [{id, type: "function", function: {name, arguments}}], arguments a JSON
 * object as a string (or, leniently, the object itself). */
static bool read_calls(const cJSON *list, int idx, srq_conv *cv, srv_error *e) {
    if (!cJSON_IsArray(list)) {
        srv_error_set(e, 400, "invalid_request_error", NULL, "messages[%d].tool_calls must be a list", idx);
        return false;
    }
    const cJSON *c;
    int k = 0;
    cJSON_ArrayForEach(c, list) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        const cJSON *name = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "name") : NULL;
        const cJSON *args = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "arguments") : NULL;
        if (!cJSON_IsString(name) || !(cJSON_IsString(args) || cJSON_IsObject(args)) || (id && !cJSON_IsNull(id) && !cJSON_IsString(id))) {
            srv_error_set(e, 400, "invalid_request_error", NULL,
                          "messages[%d].tool_calls[%d] must be {id, type: \"function\", function: {name, arguments}}", idx, k);
            return false;
        }
        char *printed = cJSON_IsObject(args) ? cJSON_PrintUnformatted(args) : NULL;
        if (cJSON_IsObject(args) && !printed) {
            srv_error_set(e, 500, "server_error", NULL, "out of memory");
            return false;
        }
        const bool ok = srq_conv_call(cv, cJSON_IsString(id) ? id->valuestring : NULL, name->valuestring,
                                      printed ? printed : args->valuestring);
        free(printed);
        if (!ok) return false;
        k++;
    }
    return true;
}

bool openai_message_tools(const cJSON *msg, int idx, const char *role, srq_conv *cv, srv_error *e) {
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    if (calls && !cJSON_IsNull(calls) && strcmp(role, "assistant")) {
        srv_error_set(e, 400, "invalid_request_error", NULL, "messages[%d]: only assistant messages carry tool_calls", idx);
        return false;
    }
    if (calls && !cJSON_IsNull(calls) && !read_calls(calls, idx, cv, e)) return false;
    bool ok = true;
    const char *id = string_field(msg, "tool_call_id", idx, e, &ok), *name = string_field(msg, "name", idx, e, &ok);
    const char *r = string_field(msg, "reasoning_content", idx, e, &ok);
    if (!r) r = string_field(msg, "reasoning", idx, e, &ok);
    return ok && srq_conv_tool_result(cv, id, name) && (!r || srq_conv_reasoning(cv, r, strlen(r)));
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
