/* server/responses.c — OpenAI's Responses API (/v1/responses, /v1/responses/input_tokens) as one more
 * gen_endpoint over the protocol-neutral request: `input` (a string or items: messages with input_text /
 * input_image / output_text parts, function_call, function_call_output, reasoning) and `instructions`
 * become one conversation (request.c's builder, so the same turns asked through /v1/chat/completions are
 * the same prompt), `tools` / `tool_choice` / `text.format` the same tool-call grammar and structured
 * output; a job's session comes back as output items (reasoning, message, function_call) and, streamed, as
 * Responses' typed events with sequence numbers. Responses are kept for previous_response_id in a small
 * store per API key (bounded by count and bytes, the oldest evicted): what a continuation needs, the
 * conversation's items and the output. Every field is checked; one the server does not read is a 400. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"
#include "gemma_chat.h"

/* ---------------------------------------------------------------- the store */

typedef struct stored {
    char id[48];
    int key;                /* the API key that made it: found only under it */
    char *items;            /* the conversation's items with the output's, as a JSON list (previous_response_id) */
    char *response;         /* the response object (GET /v1/responses/{id}) */
    size_t bytes;
    struct stored *next;    /* newer */
} stored;

struct resp_store {
    pthread_mutex_t mu;
    stored *oldest, *newest;
    int n, max_items;
    size_t bytes, max_bytes;
};

resp_store *resp_store_new(int max_items, size_t max_bytes) {
    if (max_items <= 0 || max_bytes == 0) return NULL;
    resp_store *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->mu, NULL);
    s->max_items = max_items;
    s->max_bytes = max_bytes;
    return s;
}

static void stored_free(stored *e) {
    if (!e) return;
    free(e->items), free(e->response), free(e);
}

void resp_store_free(resp_store *s) {
    if (!s) return;
    for (stored *e = s->oldest, *next; e; e = next) next = e->next, stored_free(e);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Under s->mu: unlinks e (prev: the entry before it, NULL for the oldest). */
static void unlink_entry(resp_store *s, stored *prev, stored *e) {
    if (prev) prev->next = e->next;
    else s->oldest = e->next;
    if (s->newest == e) s->newest = prev;
    s->n--;
    s->bytes -= e->bytes;
}

/* Keeps e (taking it), evicting the oldest until it fits; false (e freed) when it alone is too large. */
static bool store_put(resp_store *s, stored *e) {
    e->bytes = sizeof *e + strlen(e->items) + strlen(e->response);
    if (e->bytes > s->max_bytes) {
        stored_free(e);
        return false;
    }
    pthread_mutex_lock(&s->mu);
    while (s->oldest && (s->n + 1 > s->max_items || s->bytes + e->bytes > s->max_bytes)) {
        stored *old = s->oldest;
        unlink_entry(s, NULL, old);
        stored_free(old);
    }
    e->next = NULL;
    if (s->newest) s->newest->next = e;
    else s->oldest = e;
    s->newest = e;
    s->n++;
    s->bytes += e->bytes;
    pthread_mutex_unlock(&s->mu);
    return true;
}

/* A copy of id's items (want_items) or response under key (malloc'd), or NULL when it is not kept; del
 * takes it out. */
static char *store_take(resp_store *s, int key, const char *id, bool want_items, bool del) {
    char *out = NULL;
    pthread_mutex_lock(&s->mu);
    stored *prev = NULL, *e = s->oldest;
    for (; e && (e->key != key || strcmp(e->id, id)); e = e->next) prev = e;
    if (e && del) {
        unlink_entry(s, prev, e);
        stored_free(e);
        out = strdup("");
    } else if (e) {
        out = strdup(want_items ? e->items : e->response);
    }
    pthread_mutex_unlock(&s->mu);
    return out;
}

static char *error_body(int *status, int code, const char *type, const char *err_code, const char *fmt, const char *a) {
    char msg[200];
    snprintf(msg, sizeof msg, fmt, a);
    *status = code;
    return openai_error_json(type, err_code, msg);
}

char *resp_store_answer(resp_store *s, int key, const char *id, bool del, int *status) {
    if (!s)
        return error_body(status, 404, "invalid_request_error", NULL, "Response with id '%.60s' not found: this "
                          "server keeps no responses (--responses-store 0)", id);
    char *found = store_take(s, key, id, false, del);
    if (!found)
        return error_body(status, 404, "invalid_request_error", NULL, "Response with id '%.60s' not found.", id);
    *status = 200;
    if (!del) return found;
    free(found);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddBoolToObject(o, "deleted", true);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

/* ---------------------------------------------------------------- a call's state */

/* A stream's progress, the connection thread's own (render runs on it alone): the items open now, the
 * finished ones, and the events' sequence number. */
typedef struct resp_stream {
    int seq;
    bool started;
    int n_items;            /* output items announced */
    int reason_idx, msg_idx; /* the open reasoning / message item's output_index (-1: none open) */
    char reason_id[48], msg_id[48];
    srv_buf reason, text;   /* the open items' text so far */
    srv_buf thoughts;       /* every reasoning item's text (usage counts it) */
    cJSON *output;          /* the closed items, in order */
    gen_finish finish;
    bool any_message;       /* a message item was opened */
} resp_stream;

typedef struct resp_call {
    bool count_only;        /* /v1/responses/input_tokens */
    char id[48];
    long created;
    resp_store *store;
    int key;
    bool store_it;          /* store: true, and the server keeps responses */
    bool encrypted;         /* include: reasoning.encrypted_content (the thoughts, to be sent back) */
    cJSON *echo;            /* the response's fields that repeat the request: model, instructions, tools, ... */
    cJSON *items;           /* the conversation's items (the previous responses' and this input) for the store */
    resp_stream *st;
} resp_call;

static void free_call(void *call) {
    resp_call *q = call;
    if (!q) return;
    cJSON_Delete(q->echo);
    cJSON_Delete(q->items);
    if (q->st) {
        srv_buf_free(&q->st->reason);
        srv_buf_free(&q->st->text);
        srv_buf_free(&q->st->thoughts);
        cJSON_Delete(q->st->output);
        free(q->st);
    }
    free(q);
}

/* A body being read. */
typedef struct parse {
    const gen_call_in *in;
    gen_request *rq;
    resp_call *q;
    srv_error *e;
    srq_conv *cv;
    bool last_text;         /* the conversation's last message has text (a merged one is separated) */
} parse;

static bool bad(parse *ps, const char *fmt, const char *field) { return srq_bad(ps->e, fmt, field); }

static bool badi(parse *ps, const char *fmt, const char *where, const char *what) {
    srv_error_set(ps->e, 400, "invalid_request_error", NULL, fmt, where, what);
    return false;
}

static bool oom(parse *ps) {
    srv_error_set(ps->e, 500, "server_error", NULL, "out of memory");
    return false;
}

static const cJSON *field(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool str_in(const cJSON *v, const char *const *names, size_t n) {
    for (size_t i = 0; cJSON_IsString(v) && i < n; i++)
        if (!strcmp(v->valuestring, names[i])) return true;
    return false;
}

/* ---------------------------------------------------------------- input items */

/* The conversation's last message, or a new one of role (consecutive items of one role are one turn:
 * Gemma's turns alternate). */
static bool open_turn(parse *ps, const char *role, const char *where) {
    const char *last = srq_conv_role(ps->cv);
    if (last && !strcmp(last, role) && strcmp(role, "tool")) return true;
    ps->last_text = false;
    return srq_conv_message(ps->cv, role, where);
}

static bool add_text(parse *ps, const char *s) {
    if (ps->last_text && !srq_conv_text(ps->cv, "\n\n", 2)) return false;
    ps->last_text = true;
    return srq_conv_text(ps->cv, s, strlen(s));
}

/* One content part of a message: input_text / input_image (user, system), output_text / refusal
 * (assistant). */
static bool content_part(parse *ps, const cJSON *p, bool assistant, const char *where) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
    if (!cJSON_IsObject(p) || !cJSON_IsString(type)) return badi(ps, "%s%s: a content part is an object with a string 'type'", where, "");
    const char *t = type->valuestring;
    char at[80];
    snprintf(at, sizeof at, "%s.content[]", where);
    if (!strcmp(t, assistant ? "output_text" : "input_text")) {
        static const char *const known[] = {"type", "text", "annotations", "logprobs"};
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!srq_known(p, at, known, assistant ? 4 : 2, ps->e)) return false;
        if (!cJSON_IsString(text)) return badi(ps, "%s: a%s part needs a string 'text'", where, assistant ? "n output_text" : "n input_text");
        return add_text(ps, text->valuestring);
    }
    if (assistant && !strcmp(t, "refusal")) {
        static const char *const known[] = {"type", "refusal"};
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, "refusal");
        if (!srq_known(p, at, known, 2, ps->e)) return false;
        if (!cJSON_IsString(r)) return badi(ps, "%s: a refusal part needs a string '%s'", where, "refusal");
        return add_text(ps, r->valuestring);
    }
    if (!assistant && !strcmp(t, "input_image")) {
        static const char *const known[] = {"type", "image_url", "detail"};
        const cJSON *url = cJSON_GetObjectItemCaseSensitive(p, "image_url");
        if (!srq_known(p, at, known, 3, ps->e)) return false;
        if (!cJSON_IsString(url))
            return badi(ps, "%s: an input_image part needs 'image_url' (a data: URL%s; file_id is not supported)", where,
                        ps->in->o->media_path ? " or file://" : "");
        ps->last_text = false;
        return srq_conv_image(ps->cv, url->valuestring);
    }
    srv_error_set(ps->e, 400, "invalid_request_error", "unsupported_content", "%s: content parts of type '%.40s' are not "
                  "supported here (%s)", where, t, assistant ? "output_text, refusal" : "input_text, input_image");
    return false;
}

/* {type?: "message", role, content: string | parts, id?, status?} */
static bool message_item(parse *ps, const cJSON *it, const char *where) {
    static const char *const known[] = {"type", "role", "content", "id", "status"};
    if (!srq_known(it, where, known, 5, ps->e)) return false;
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role"), *content = field(it, "content");
    static const char *const roles[] = {"user", "assistant", "system", "developer"};
    if (!str_in(role, roles, 4)) return badi(ps, "%s: a message's role is user, assistant, system or developer%s", where, "");
    const bool assistant = !strcmp(role->valuestring, "assistant");
    const char *r = assistant ? "assistant" : !strcmp(role->valuestring, "user") ? "user" : "system";
    if (!strcmp(r, "system") && srq_conv_count(ps->cv) > 0 && strcmp(srq_conv_role(ps->cv), "system"))
        return badi(ps, "%s: a %s message may only come before the conversation's other items", where, role->valuestring);
    if (!open_turn(ps, r, where)) return false;
    if (!content) return badi(ps, "%s: a message needs 'content'%s", where, "");
    if (cJSON_IsString(content)) return add_text(ps, content->valuestring);
    if (!cJSON_IsArray(content)) return badi(ps, "%s.content must be a string or a list of parts%s", where, "");
    const cJSON *p;
    cJSON_ArrayForEach(p, content) {
        if (!content_part(ps, p, assistant, where)) return false;
    }
    return true;
}

/* {type: "function_call", call_id, name, arguments, id?, status?}: a call of the assistant's turn. */
static bool call_item(parse *ps, const cJSON *it, const char *where) {
    static const char *const known[] = {"type", "call_id", "name", "arguments", "id", "status"};
    if (!srq_known(it, where, known, 6, ps->e)) return false;
    const cJSON *id = field(it, "call_id"), *name = field(it, "name"), *args = field(it, "arguments");
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(args))
        return badi(ps, "%s: a function_call needs string call_id, name and arguments (a JSON object as text)%s", where, "");
    return open_turn(ps, "assistant", where) && srq_conv_call(ps->cv, id->valuestring, name->valuestring, args->valuestring);
}

/* {type: "function_call_output", call_id, output: string | [input_text parts], id?, status?}: a tool turn. */
static bool call_output_item(parse *ps, const cJSON *it, const char *where) {
    static const char *const known[] = {"type", "call_id", "output", "id", "status"};
    if (!srq_known(it, where, known, 5, ps->e)) return false;
    const cJSON *id = field(it, "call_id"), *out = field(it, "output");
    if (!cJSON_IsString(id) || !(cJSON_IsString(out) || cJSON_IsArray(out)))
        return badi(ps, "%s: a function_call_output needs a string call_id and an output (a string or input_text parts)%s",
                    where, "");
    if (!open_turn(ps, "tool", where) || !srq_conv_tool_result(ps->cv, id->valuestring, NULL)) return false;
    if (cJSON_IsString(out)) return add_text(ps, out->valuestring);
    const cJSON *p;
    cJSON_ArrayForEach(p, out) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "input_text"))
            return badi(ps, "%s.output: only input_text parts are supported (images go in user messages)%s", where, "");
        if (!content_part(ps, p, false, where)) return false;
    }
    return true;
}

/* {type: "reasoning", id?, summary, content?: [{type: reasoning_text, text}], encrypted_content?, status?}:
 * thoughts of the assistant's turn (the content's text; else what encrypted_content carried back). */
static bool reasoning_item(parse *ps, const cJSON *it, const char *where) {
    static const char *const known[] = {"type", "id", "summary", "content", "encrypted_content", "status"};
    if (!srq_known(it, where, known, 6, ps->e) || !open_turn(ps, "assistant", where)) return false;
    const cJSON *content = field(it, "content"), *enc = field(it, "encrypted_content"), *p;
    if (content && !cJSON_IsArray(content)) return badi(ps, "%s.content must be a list of reasoning_text parts%s", where, "");
    if (enc && !cJSON_IsString(enc)) return badi(ps, "%s.encrypted_content must be a string%s", where, "");
    bool any = false;
    cJSON_ArrayForEach(p, content) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(t)) return badi(ps, "%s.content: a reasoning_text part needs a string 'text'%s", where, "");
        if (!srq_conv_reasoning(ps->cv, t->valuestring, strlen(t->valuestring))) return false;
        any = true;
    }
    if (!any && enc) return srq_conv_reasoning(ps->cv, enc->valuestring, strlen(enc->valuestring));
    return true;
}

static bool one_item(parse *ps, const cJSON *it, const char *where) {
    if (!cJSON_IsObject(it)) return badi(ps, "%s must be an object%s", where, "");
    const cJSON *type = field(it, "type");
    if (type && !cJSON_IsString(type)) return badi(ps, "%s.type must be a string%s", where, "");
    const char *t = type ? type->valuestring : "message";
    if (!strcmp(t, "message")) return message_item(ps, it, where);
    if (!strcmp(t, "function_call")) return call_item(ps, it, where);
    if (!strcmp(t, "function_call_output")) return call_output_item(ps, it, where);
    if (!strcmp(t, "reasoning")) return reasoning_item(ps, it, where);
    srv_error_set(ps->e, 400, "invalid_request_error", "unsupported_item", "%s: items of type '%.40s' are not supported "
                  "(message, function_call, function_call_output, reasoning)", where, t);
    return false;
}

/* A list of items into the conversation; keep: copied into the call's items (what the store keeps). */
static bool items_into(parse *ps, const cJSON *list, const char *field_name, bool keep) {
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, list) {
        char where[48];
        snprintf(where, sizeof where, "%s[%d]", field_name, i++);
        if (!one_item(ps, it, where)) return false;
        if (keep && ps->q->items && !cJSON_AddItemToArray(ps->q->items, cJSON_Duplicate(it, true))) return oom(ps);
    }
    return true;
}

/* The items of previous_response_id's conversation (kept under this request's key), read first. */
static bool previous_items(parse *ps, const cJSON *root) {
    const cJSON *prev = field(root, "previous_response_id");
    if (!prev) return true;
    if (!cJSON_IsString(prev)) return bad(ps, "'%s' must be a string", "previous_response_id");
    if (!ps->in->responses) {
        srv_error_set(ps->e, 400, "invalid_request_error", "responses_not_stored", "previous_response_id: this server "
                      "keeps no responses (it was started with --responses-store 0): send the whole conversation in 'input'");
        return false;
    }
    char *text = store_take(ps->in->responses, ps->in->key, prev->valuestring, true, false);
    if (!text) {
        srv_error_set(ps->e, 404, "invalid_request_error", "previous_response_not_found",
                      "Previous response with id '%.60s' not found.", prev->valuestring);
        return false;
    }
    cJSON *list = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsArray(list)) {
        cJSON_Delete(list);
        return oom(ps);
    }
    const bool ok = items_into(ps, list, "previous_response_id", true);
    cJSON_Delete(list);
    return ok;
}

/* instructions (a system turn: not carried to a continuation, as OpenAI's), the previous response's
 * items, then input; tokenized in the model's chat format. */
static bool conversation(parse *ps, const cJSON *root) {
    const int limit = srq_prompt_limit(ps->in->o, ps->in->n_ctx);
    const cJSON *ins = field(root, "instructions"), *input = field(root, "input");
    if (ins && !cJSON_IsString(ins)) return bad(ps, "'%s' must be a string", "instructions");
    if (!input && !field(root, "previous_response_id")) return bad(ps, "'%s' is required", "input");
    if (input && !cJSON_IsString(input) && !cJSON_IsArray(input))
        return bad(ps, "'%s' must be a string or a list of items", "input");
    if (cJSON_IsArray(input) && cJSON_GetArraySize(input) > limit) /* before any image is decoded */
        return bad(ps, "'%s' has more items than this server's context can hold", "input");
    if (!(ps->cv = srq_conv_new(ps->in, "input", ps->e))) return false;
    if (ins && (!srq_conv_message(ps->cv, "system", "instructions") || !add_text(ps, ins->valuestring))) return false;
    if (!previous_items(ps, root)) return false;
    if (cJSON_IsString(input)) {
        cJSON *item = cJSON_CreateObject();
        if (!item || !cJSON_AddStringToObject(item, "role", "user") ||
            !cJSON_AddStringToObject(item, "content", input->valuestring)) {
            cJSON_Delete(item);
            return oom(ps);
        }
        cJSON *list = cJSON_CreateArray();
        cJSON_AddItemToArray(list, item);
        const bool ok = items_into(ps, list, "input", true);
        cJSON_Delete(list);
        if (!ok) return false;
    } else if (input && !items_into(ps, input, "input", true)) {
        return false;
    }
    return srq_conv_tokenize(ps->cv, ps->rq, limit);
}

/* ---------------------------------------------------------------- the other fields */

/* tools: [{type: "function", name, description?, parameters, strict?}] (the flat form). */
static bool tools_field(parse *ps, const cJSON *root) {
    const cJSON *tools = field(root, "tools"), *t;
    if (tools && !cJSON_IsArray(tools)) return bad(ps, "'%s' must be a list of functions", "tools");
    int i = 0;
    cJSON_ArrayForEach(t, tools) {
        char where[32];
        snprintf(where, sizeof where, "tools[%d]", i++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        if (!cJSON_IsObject(t) || !cJSON_IsString(type)) return badi(ps, "%s must be an object with a string 'type'%s", where, "");
        if (strcmp(type->valuestring, "function")) {
            srv_error_set(ps->e, 400, "invalid_request_error", "unsupported_tool", "%s: tools of type '%.40s' are not "
                          "supported (only \"function\")", where, type->valuestring);
            return false;
        }
        static const char *const known[] = {"type", "name", "description", "parameters", "strict"};
        if (!srq_known(t, where, known, 5, ps->e)) return false;
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name"), *desc = field(t, "description");
        const cJSON *strict = field(t, "strict");
        if (!cJSON_IsString(name)) return badi(ps, "%s.name must be a string%s", where, "");
        if (desc && !cJSON_IsString(desc)) return badi(ps, "%s.description must be a string%s", where, "");
        if (strict && !cJSON_IsBool(strict)) return badi(ps, "%s.strict must be true or false%s", where, "");
        if (!srq_tool(ps->rq, where, name->valuestring, desc ? desc->valuestring : NULL, field(t, "parameters"), ps->e))
            return false;
    }
    return true;
}

/* tool_choice: "none" | "auto" | "required" | {type: "function", name}. */
static bool tool_choice_field(parse *ps, const cJSON *root) {
    const cJSON *c = field(root, "tool_choice"), *par = field(root, "parallel_tool_calls");
    if (par && !cJSON_IsBool(par)) return bad(ps, "'%s' must be true or false", "parallel_tool_calls");
    tool_mode mode = ps->rq->n_tools ? TOOLS_AUTO : TOOLS_NONE;
    const char *named = NULL;
    if (cJSON_IsString(c)) {
        const char *s = c->valuestring;
        mode = !strcmp(s, "none") ? TOOLS_NONE : !strcmp(s, "auto") ? TOOLS_AUTO : !strcmp(s, "required") ? TOOLS_REQUIRED : -1;
        if ((int)mode < 0) return bad(ps, "tool_choice '%.40s' is not none, auto, required or {\"type\": \"function\", \"name\": ...}", s);
    } else if (c) {
        static const char *const known[] = {"type", "name"};
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type"), *name = cJSON_GetObjectItemCaseSensitive(c, "name");
        if (!cJSON_IsObject(c) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
            return bad(ps, "tool_choice must be none, auto, required or {\"type\": \"function\", \"name\": ...}%s", "");
        if (!srq_known(c, "tool_choice", known, 2, ps->e)) return false;
        mode = TOOLS_NAMED;
        named = name->valuestring;
    }
    return srq_tool_choice(ps->rq, ps->in->tok, mode, named, !cJSON_IsFalse(par), ps->e);
}

/* text: {format: {type: text | json_object | json_schema (name, schema, strict?, description?)}, verbosity?} */
static bool text_field(parse *ps, const cJSON *root) {
    const cJSON *t = field(root, "text");
    if (!t) return true;
    static const char *const known[] = {"format", "verbosity"};
    if (!cJSON_IsObject(t)) return bad(ps, "'%s' must be an object", "text");
    if (!srq_known(t, "text", known, 2, ps->e)) return false;
    static const char *const verbosities[] = {"low", "medium", "high"};
    if (field(t, "verbosity") && !str_in(field(t, "verbosity"), verbosities, 3))
        return bad(ps, "'%s' must be low, medium or high", "text.verbosity");
    const cJSON *f = field(t, "format");
    if (!f) return true;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(f, "type");
    if (!cJSON_IsObject(f) || !cJSON_IsString(type)) return bad(ps, "'%s' must be an object with a string 'type'", "text.format");
    const char *ty = type->valuestring;
    if (!strcmp(ty, "text") || !strcmp(ty, "json_object")) {
        static const char *const k1[] = {"type"};
        if (!srq_known(f, "text.format", k1, 1, ps->e)) return false;
        return !strcmp(ty, "text") || srq_schema(ps->rq, "text.format", NULL, ps->e);
    }
    if (strcmp(ty, "json_schema"))
        return bad(ps, "text.format type '%.40s' is not one of text, json_object, json_schema", ty);
    static const char *const k2[] = {"type", "name", "schema", "strict", "description"};
    if (!srq_known(f, "text.format", k2, 5, ps->e)) return false;
    const cJSON *name = field(f, "name"), *schema = field(f, "schema"), *strict = field(f, "strict");
    if (!cJSON_IsString(name)) return bad(ps, "'%s' needs a string 'name'", "text.format");
    if (!cJSON_IsObject(schema)) return bad(ps, "'%s' needs 'schema', a JSON schema object", "text.format");
    if (strict && !cJSON_IsBool(strict)) return bad(ps, "'%s' must be true or false", "text.format.strict");
    return srq_schema(ps->rq, "text.format", schema, ps->e);
}

/* include: what the response adds; reasoning.encrypted_content is honoured (the thoughts, returned to be
 * sent back in a reasoning item: nothing here is encrypted, nor needs to be: they are the client's). */
static bool include_field(parse *ps, const cJSON *root) {
    const cJSON *inc = field(root, "include"), *v;
    if (inc && !cJSON_IsArray(inc)) return bad(ps, "'%s' must be a list of strings", "include");
    cJSON_ArrayForEach(v, inc) {
        if (cJSON_IsString(v) && !strcmp(v->valuestring, "reasoning.encrypted_content")) {
            ps->q->encrypted = true;
            continue;
        }
        return bad(ps, "include '%.60s' is not supported (only reasoning.encrypted_content)",
                   cJSON_IsString(v) ? v->valuestring : "(not a string)");
    }
    return true;
}

/* Fields read as given or checked only: reasoning (effort accepted: Gemma 4 thinks when its template
 * says so), truncation "disabled", metadata, user, store, background false, stream_options. */
static bool bookkeeping_fields(parse *ps, const cJSON *root) {
    const cJSON *r = field(root, "reasoning"), *tr = field(root, "truncation"), *md = field(root, "metadata"), *v;
    if (r) {
        static const char *const known[] = {"effort", "summary", "generate_summary"};
        static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
        static const char *const summaries[] = {"auto", "concise", "detailed"};
        if (!cJSON_IsObject(r)) return bad(ps, "'%s' must be an object", "reasoning");
        if (!srq_known(r, "reasoning", known, 3, ps->e)) return false;
        if (field(r, "effort") && !str_in(field(r, "effort"), efforts, 6))
            return bad(ps, "'%s' must be none, minimal, low, medium, high or xhigh", "reasoning.effort");
        if ((field(r, "summary") && !str_in(field(r, "summary"), summaries, 3)) ||
            (field(r, "generate_summary") && !str_in(field(r, "generate_summary"), summaries, 3)))
            return bad(ps, "'%s' must be auto, concise or detailed", "reasoning.summary");
    }
    if (tr && !(cJSON_IsString(tr) && !strcmp(tr->valuestring, "disabled")))
        return bad(ps, "truncation must be \"disabled\" (%s)", "a conversation longer than the context is a 400, never cut");
    if (md && !cJSON_IsObject(md)) return bad(ps, "'%s' must be an object of strings", "metadata");
    int n = 0;
    cJSON_ArrayForEach(v, md) {
        if (!cJSON_IsString(v) || ++n > 16 || strlen(v->string) > 64 || strlen(v->valuestring) > 512)
            return bad(ps, "'%s' holds at most 16 strings (keys up to 64 characters, values up to 512)", "metadata");
    }
    if (field(root, "user") && !cJSON_IsString(field(root, "user"))) return bad(ps, "'%s' must be a string", "user");
    if (field(root, "background") && !cJSON_IsFalse(field(root, "background")))
        return bad(ps, "'%s' is not supported (requests run while their client waits)", "background");
    const cJSON *so = field(root, "stream_options");
    static const char *const sok[] = {"include_obfuscation"};
    if (so && (!cJSON_IsObject(so) || !srq_known(so, "stream_options", sok, 1, ps->e)))
        return cJSON_IsObject(so) ? false : bad(ps, "'%s' must be an object", "stream_options");
    bool store = true;
    if (!srq_bool(root, "store", NULL, &store, ps->e) || !srq_bool(root, "stream", NULL, &ps->rq->stream, ps->e))
        return false;
    ps->q->store_it = store && ps->in->responses != NULL;
    return true;
}

/* temperature, top_p, seed, max_output_tokens; the defaults are /v1/chat/completions' (so one
 * conversation is one sampler through both). */
static bool sampling_fields(parse *ps, const cJSON *root) {
    gm_sampling *s = &ps->rq->smp;
    s->temperature = 1.0f;
    s->repeat_last_n = 64;
    double seed = 0;
    if (!srq_float(root, "temperature", NULL, 0, 2, &s->temperature, ps->e) ||
        !srq_float(root, "top_p", NULL, 0, 1, &s->top_p, ps->e) ||
        !srq_num(root, "seed", NULL, -9.2e18, 9.2e18, true, &seed, ps->e) ||
        !srq_int(root, "max_output_tokens", NULL, 1, ps->in->o->max_tokens, &ps->rq->max_tokens, ps->e))
        return false;
    if (field(root, "seed")) s->seed = (uint64_t)(int64_t)seed;
    if (field(root, "top_logprobs") && !(cJSON_IsNumber(field(root, "top_logprobs")) && field(root, "top_logprobs")->valuedouble == 0))
        return bad(ps, "'%s' is not supported", "top_logprobs");
    if (field(root, "max_tool_calls")) return bad(ps, "'%s' is not supported", "max_tool_calls");
    ps->rq->speculative = srv_has_drafter(ps->in->o);
    return srq_sampling_check(ps->rq, ps->e);
}

/* The request fields the response object repeats (as the request gave them, or their defaults). */
static bool make_echo(parse *ps, const cJSON *root) {
    cJSON *o = ps->q->echo = cJSON_CreateObject();
    if (!o) return oom(ps);
    const gm_sampling *s = &ps->rq->smp;
    const char *copy[] = {"instructions", "max_output_tokens", "previous_response_id", "user"};
    for (size_t i = 0; i < sizeof copy / sizeof *copy; i++) {
        const cJSON *v = field(root, copy[i]);
        cJSON_AddItemToObject(o, copy[i], v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
    }
    const cJSON *md = field(root, "metadata"), *tools = field(root, "tools"), *tc = field(root, "tool_choice");
    const cJSON *r = field(root, "reasoning"), *t = field(root, "text");
    cJSON_AddItemToObject(o, "metadata", md ? cJSON_Duplicate(md, true) : cJSON_CreateObject());
    cJSON_AddItemToObject(o, "tools", tools ? cJSON_Duplicate(tools, true) : cJSON_CreateArray());
    cJSON_AddItemToObject(o, "tool_choice", tc ? cJSON_Duplicate(tc, true) : cJSON_CreateString("auto"));
    cJSON_AddBoolToObject(o, "parallel_tool_calls", ps->rq->parallel_tool_calls);
    cJSON *ro = cJSON_AddObjectToObject(o, "reasoning");
    const cJSON *eff = r ? field(r, "effort") : NULL, *sum = r ? field(r, "summary") : NULL;
    cJSON_AddItemToObject(ro, "effort", eff ? cJSON_Duplicate(eff, true) : cJSON_CreateNull());
    cJSON_AddItemToObject(ro, "summary", sum ? cJSON_Duplicate(sum, true) : cJSON_CreateNull());
    cJSON *to = cJSON_AddObjectToObject(o, "text");
    const cJSON *fmt = t ? field(t, "format") : NULL, *verb = t ? field(t, "verbosity") : NULL;
    if (fmt) cJSON_AddItemToObject(to, "format", cJSON_Duplicate(fmt, true));
    else cJSON_AddStringToObject(cJSON_AddObjectToObject(to, "format"), "type", "text");
    cJSON_AddItemToObject(to, "verbosity", verb ? cJSON_Duplicate(verb, true) : cJSON_CreateString("medium"));
    cJSON_AddNumberToObject(o, "temperature", s->temperature);
    cJSON_AddNumberToObject(o, "top_p", s->top_p);
    cJSON_AddStringToObject(o, "truncation", "disabled");
    cJSON_AddStringToObject(o, "model", ps->in->model);
    return true;
}

static const char *const create_fields[] = {
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text", "max_output_tokens",
    "temperature", "top_p", "seed", "reasoning", "stream", "stream_options", "store", "previous_response_id",
    "metadata", "user", "truncation", "include", "background", "top_logprobs", "max_tool_calls",
    /* ignored: hints and bookkeeping that do not change tokens (the prefix cache needs no key) */
    "service_tier", "prompt_cache_key", "prompt_cache_retention", "safety_identifier"};
static const char *const count_fields[] = {"model", "input", "instructions", "tools", "tool_choice",
                                           "parallel_tool_calls", "text", "reasoning", "previous_response_id",
                                           "truncation"};

static bool parse_body(parse *ps, const cJSON *root) {
    if (!cJSON_IsObject(root)) return bad(ps, "the body must be a JSON %s", "object");
    const bool count = ps->q->count_only;
    if (!srq_known(root, NULL, count ? count_fields : create_fields,
                   count ? sizeof count_fields / sizeof *count_fields : sizeof create_fields / sizeof *create_fields, ps->e))
        return false;
    if (field(root, "model") && !cJSON_IsString(field(root, "model"))) return bad(ps, "'%s' must be a string", "model");
    ps->q->items = cJSON_CreateArray();
    if (!ps->q->items) return oom(ps);
    return include_field(ps, root) && bookkeeping_fields(ps, root) && sampling_fields(ps, root) && text_field(ps, root) &&
           tools_field(ps, root) && tool_choice_field(ps, root) && conversation(ps, root) &&
           srq_fits(ps->in->o, ps->in->n_ctx, ps->rq->n_prompt, ps->rq->max_tokens, ps->e) && make_echo(ps, root);
}

static void *parse_call(const gen_call_in *in, gen_request *rq, srv_error *e, bool count_only) {
    resp_call *q = calloc(1, sizeof *q);
    if (!q || !(q->st = calloc(1, sizeof *q->st))) {
        free(q);
        srv_error_set(e, 500, "server_error", NULL, "out of memory");
        return NULL;
    }
    q->count_only = count_only;
    q->created = (long)time(NULL);
    q->store = in->responses;
    q->key = in->key;
    q->st->reason_idx = q->st->msg_idx = -1;
    const unsigned long long a = (unsigned long long)srv_fresh_u64(), b = (unsigned long long)srv_fresh_u64();
    snprintf(q->id, sizeof q->id, "resp_%016llx%016llx", a, b);
    rq->n = 1;
    parse ps = {.in = in, .rq = rq, .q = q, .e = e};
    cJSON *root = cJSON_ParseWithLength(in->body ? in->body : "", in->len);
    bool ok = root ? parse_body(&ps, root) : bad(&ps, "the body is not valid JSON (%s)", "parse error");
    cJSON_Delete(root);
    srq_conv_free(ps.cv);
    if (!ok) {
        free_call(q);
        return NULL;
    }
    return q;
}

static void *parse_create(const gen_call_in *in, gen_request *rq, srv_error *e) { return parse_call(in, rq, e, false); }
static void *parse_count(const gen_call_in *in, gen_request *rq, srv_error *e) { return parse_call(in, rq, e, true); }

/* /v1/responses/input_tokens: the parsed request's prompt (its job never runs). */
static char *count_answer(const void *call, const job *j, const gm_tokenizer *tok) {
    (void)call, (void)tok;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "response.input_tokens");
    cJSON_AddNumberToObject(o, "input_tokens", j->rq.n_prompt);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* ---------------------------------------------------------------- output */

static cJSON *text_json(const char *s, size_t n) {
    char *c = srv_clean_utf8(s ? s : "", s ? n : 0);
    cJSON *v = cJSON_CreateString(c ? c : "");
    free(c);
    return v;
}

static void fresh_id(char *out, size_t n, const char *prefix) {
    snprintf(out, n, "%s%016llx%08llx", prefix, (unsigned long long)srv_fresh_u64(),
             (unsigned long long)(srv_fresh_u64() & 0xffffffffu));
}

static cJSON *reasoning_json(const resp_call *q, const char *id, const char *text, size_t n) {
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "type", "reasoning");
    cJSON_AddArrayToObject(it, "summary");
    cJSON *content = cJSON_AddArrayToObject(it, "content"), *part = cJSON_CreateObject();
    cJSON_AddStringToObject(part, "type", "reasoning_text");
    cJSON_AddItemToObject(part, "text", text_json(text, n));
    cJSON_AddItemToArray(content, part);
    if (q->encrypted) cJSON_AddItemToObject(it, "encrypted_content", text_json(text, n));
    return it;
}

static cJSON *output_text_part(const char *text, size_t n) {
    cJSON *part = cJSON_CreateObject();
    cJSON_AddStringToObject(part, "type", "output_text");
    cJSON_AddItemToObject(part, "text", text_json(text, n));
    cJSON_AddArrayToObject(part, "annotations");
    cJSON_AddArrayToObject(part, "logprobs");
    return part;
}

/* status: in_progress (announced, empty), completed or incomplete. */
static cJSON *message_json(const char *id, const char *status, const char *text, size_t n, bool with_part) {
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "type", "message");
    cJSON_AddStringToObject(it, "status", status);
    cJSON_AddStringToObject(it, "role", "assistant");
    cJSON *content = cJSON_AddArrayToObject(it, "content");
    if (with_part) cJSON_AddItemToArray(content, output_text_part(text, n));
    return it;
}

/* call_id: the session's "call_" id; the item's id is "fc_" with the same digits. */
static cJSON *call_json(const char *call_id, const char *name, const char *args, bool done) {
    cJSON *it = cJSON_CreateObject();
    char id[48];
    snprintf(id, sizeof id, "fc_%s", strncmp(call_id, "call_", 5) ? call_id : call_id + 5);
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "type", "function_call");
    cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
    cJSON_AddStringToObject(it, "arguments", done ? args : "");
    cJSON_AddStringToObject(it, "call_id", call_id);
    cJSON_AddStringToObject(it, "name", name);
    return it;
}

/* Thoughts' tokens, as the thought text re-tokenized (the session counts a choice's tokens, not which
 * channel they went to). */
static int reasoning_tokens(const gm_tokenizer *tok, const char *r, size_t n) {
    if (!n) return 0;
    int32_t *ids = NULL;
    size_t nid = 0;
    if (gm_tokenize(tok, r, n, false, false, &ids, &nid, NULL)) return 0;
    free(ids);
    return (int)nid;
}

static cJSON *usage_json(int n_prompt, int cached, int gen, int reasoning) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", n_prompt);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens", cached);
    cJSON_AddNumberToObject(u, "output_tokens", gen);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens",
                            reasoning < gen ? reasoning : gen);
    cJSON_AddNumberToObject(u, "total_tokens", n_prompt + gen);
    return u;
}

/* The response object: status in_progress (no usage yet), completed, incomplete or failed; output taken. */
static cJSON *response_json(const resp_call *q, const char *status, cJSON *output, cJSON *usage, const char *err) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", q->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)q->created);
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddBoolToObject(o, "background", false);
    if (err) {
        cJSON *e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "code", "server_error");
        cJSON_AddItemToObject(e, "message", text_json(err, strlen(err)));
    } else {
        cJSON_AddNullToObject(o, "error");
    }
    if (!strcmp(status, "incomplete"))
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason", "max_output_tokens");
    else cJSON_AddNullToObject(o, "incomplete_details");
    const cJSON *f;
    cJSON_ArrayForEach(f, q->echo) cJSON_AddItemToObject(o, f->string, cJSON_Duplicate(f, true));
    cJSON_AddItemToObject(o, "output", output ? output : cJSON_CreateArray());
    cJSON_AddNullToObject(o, "max_tool_calls");
    cJSON_AddStringToObject(o, "service_tier", "default");
    cJSON_AddBoolToObject(o, "store", q->store_it);
    cJSON_AddNumberToObject(o, "top_logprobs", 0);
    if (usage) cJSON_AddItemToObject(o, "usage", usage);
    else cJSON_AddNullToObject(o, "usage");
    return o;
}

/* Keeps a finished response (its conversation's items and output) for previous_response_id; false when
 * it cannot be (too large for the store, out of memory): the response then says store: false. */
static bool keep(const resp_call *q, const cJSON *output, cJSON *resp) {
    if (!q->store_it) return false;
    cJSON *items = cJSON_Duplicate(q->items, true);
    const cJSON *it;
    cJSON_ArrayForEach(it, output) cJSON_AddItemToArray(items, cJSON_Duplicate(it, true));
    stored *e = calloc(1, sizeof *e);
    char *text = cJSON_PrintUnformatted(items);
    cJSON_Delete(items);
    if (!e || !text) {
        free(e), free(text);
        cJSON_ReplaceItemInObjectCaseSensitive(resp, "store", cJSON_CreateFalse());
        return false;
    }
    snprintf(e->id, sizeof e->id, "%s", q->id);
    e->key = q->key;
    e->items = text;
    e->response = cJSON_PrintUnformatted(resp); /* as answered: store true */
    bool kept = false;
    if (e->response) kept = store_put(q->store, e); /* takes e */
    else stored_free(e);
    if (!kept) cJSON_ReplaceItemInObjectCaseSensitive(resp, "store", cJSON_CreateFalse());
    return kept;
}

static const char *status_of(gen_finish f) { return gen_finish_is_length(f) ? "incomplete" : "completed"; }

static char *response(const void *call, const job *j, const gm_tokenizer *tok) {
    const resp_call *q = call;
    const gen_session *g = &j->gen[0];
    const char *status = status_of(g->finish);
    cJSON *output = cJSON_CreateArray();
    size_t rl = 0;
    const char *r = g->tp ? gm_tool_parser_reasoning(g->tp, &rl) : "";
    char id[48];
    if (rl) {
        fresh_id(id, sizeof id, "rs_");
        cJSON_AddItemToArray(output, reasoning_json(q, id, r, rl));
    }
    const int calls = gen_session_n_calls(g);
    if (g->len || !calls) {
        fresh_id(id, sizeof id, "msg_");
        cJSON_AddItemToArray(output, message_json(id, status, g->text, g->len, true));
    }
    for (int i = 0; i < calls; i++) {
        const char *name = NULL, *args = NULL;
        gm_tool_parser_call(g->tp, (size_t)i, &name, &args);
        cJSON_AddItemToArray(output, call_json(g->call_id[i], name, args, true));
    }
    cJSON *o = response_json(q, status, output, usage_json(j->rq.n_prompt, j->cached, job_generated(j),
                                                           reasoning_tokens(tok, r, rl)), NULL);
    keep(q, output, o);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* ---------------------------------------------------------------- streaming */

/* One event: `event: <type>` and its JSON with the next sequence number. */
static void put_event(resp_stream *st, srv_buf *out, const char *type, cJSON *o) {
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", type);
    const cJSON *f;
    cJSON_ArrayForEach(f, o) cJSON_AddItemToObject(ev, f->string, cJSON_Duplicate(f, true));
    cJSON_AddNumberToObject(ev, "sequence_number", st->seq++);
    cJSON_Delete(o);
    char *s = cJSON_PrintUnformatted(ev);
    cJSON_Delete(ev);
    if (!s) return;
    srv_buf_put(out, "event: ", 7);
    srv_buf_put(out, type, strlen(type));
    srv_buf_put(out, "\ndata: ", 7);
    srv_buf_put(out, s, strlen(s));
    srv_buf_put(out, "\n\n", 2);
    free(s);
}

/* {output_index, item_id?, content_index?} */
static cJSON *at(int output_index, const char *item_id, int content_index) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", output_index);
    if (item_id) cJSON_AddStringToObject(o, "item_id", item_id);
    if (content_index >= 0) cJSON_AddNumberToObject(o, "content_index", content_index);
    return o;
}

static void item_event(resp_stream *st, srv_buf *out, const char *type, int idx, cJSON *item) {
    cJSON *o = at(idx, NULL, -1);
    cJSON_AddItemToObject(o, "item", item);
    put_event(st, out, type, o);
}

static cJSON *reasoning_part(const char *text, size_t n) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "reasoning_text");
    cJSON_AddItemToObject(p, "text", text_json(text, n));
    return p;
}

static void open_reasoning(const resp_call *q, resp_stream *st, srv_buf *out) {
    fresh_id(st->reason_id, sizeof st->reason_id, "rs_");
    st->reason_idx = st->n_items++;
    st->reason.len = st->reason.pos = 0;
    cJSON *it = reasoning_json(q, st->reason_id, "", 0);
    cJSON_ReplaceItemInObjectCaseSensitive(it, "content", cJSON_CreateArray());
    item_event(st, out, "response.output_item.added", st->reason_idx, it);
    cJSON *o = at(st->reason_idx, st->reason_id, 0);
    cJSON_AddItemToObject(o, "part", reasoning_part("", 0));
    put_event(st, out, "response.content_part.added", o);
}

static void close_reasoning(const resp_call *q, resp_stream *st, srv_buf *out) {
    if (st->reason_idx < 0) return;
    const char *t = st->reason.p ? st->reason.p : "";
    cJSON *o = at(st->reason_idx, st->reason_id, 0);
    cJSON_AddItemToObject(o, "text", text_json(t, st->reason.len));
    put_event(st, out, "response.reasoning_text.done", o);
    o = at(st->reason_idx, st->reason_id, 0);
    cJSON_AddItemToObject(o, "part", reasoning_part(t, st->reason.len));
    put_event(st, out, "response.content_part.done", o);
    cJSON *it = reasoning_json(q, st->reason_id, t, st->reason.len);
    cJSON_AddItemToArray(st->output, cJSON_Duplicate(it, true));
    item_event(st, out, "response.output_item.done", st->reason_idx, it);
    st->reason_idx = -1;
}

static void open_message(resp_stream *st, srv_buf *out) {
    fresh_id(st->msg_id, sizeof st->msg_id, "msg_");
    st->msg_idx = st->n_items++;
    st->any_message = true;
    st->text.len = st->text.pos = 0;
    item_event(st, out, "response.output_item.added", st->msg_idx, message_json(st->msg_id, "in_progress", "", 0, false));
    cJSON *o = at(st->msg_idx, st->msg_id, 0);
    cJSON_AddItemToObject(o, "part", output_text_part("", 0));
    put_event(st, out, "response.content_part.added", o);
}

static void close_message(resp_stream *st, srv_buf *out, const char *status) {
    if (st->msg_idx < 0) return;
    const char *t = st->text.p ? st->text.p : "";
    cJSON *o = at(st->msg_idx, st->msg_id, 0);
    cJSON_AddItemToObject(o, "text", text_json(t, st->text.len));
    cJSON_AddArrayToObject(o, "logprobs");
    put_event(st, out, "response.output_text.done", o);
    o = at(st->msg_idx, st->msg_id, 0);
    cJSON_AddItemToObject(o, "part", output_text_part(t, st->text.len));
    put_event(st, out, "response.content_part.done", o);
    cJSON *it = message_json(st->msg_id, status, t, st->text.len, true);
    cJSON_AddItemToArray(st->output, cJSON_Duplicate(it, true));
    item_event(st, out, "response.output_item.done", st->msg_idx, it);
    st->msg_idx = -1;
}

static void stream_call(resp_stream *st, srv_buf *out, const char *call_id, const char *name, const char *args) {
    const int idx = st->n_items++;
    cJSON *added = call_json(call_id, name, args, false);
    char item_id[48];
    snprintf(item_id, sizeof item_id, "%s", cJSON_GetObjectItemCaseSensitive(added, "id")->valuestring);
    item_event(st, out, "response.output_item.added", idx, added);
    cJSON *o = at(idx, item_id, -1);
    cJSON_AddStringToObject(o, "delta", args);
    put_event(st, out, "response.function_call_arguments.delta", o);
    o = at(idx, item_id, -1);
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "arguments", args);
    put_event(st, out, "response.function_call_arguments.done", o);
    cJSON *it = call_json(call_id, name, args, true);
    cJSON_AddItemToArray(st->output, cJSON_Duplicate(it, true));
    item_event(st, out, "response.output_item.done", idx, it);
}

static void delta(resp_stream *st, srv_buf *out, const char *type, int idx, const char *id, const char *s, size_t n,
                  bool logprobs) {
    cJSON *o = at(idx, id, 0);
    cJSON_AddItemToObject(o, "delta", text_json(s, n));
    if (logprobs) cJSON_AddArrayToObject(o, "logprobs");
    put_event(st, out, type, o);
}

static void put_piece(const resp_call *q, resp_stream *st, const stream_view *v, const stream_piece *pc, srv_buf *out) {
    if (pc->reason_n) {
        close_message(st, out, "completed"); /* thoughts after text start a new reasoning item */
        if (st->reason_idx < 0) open_reasoning(q, st, out);
        srv_buf_put(&st->reason, v->text + pc->reason_off, pc->reason_n);
        srv_buf_put(&st->thoughts, v->text + pc->reason_off, pc->reason_n);
        delta(st, out, "response.reasoning_text.delta", st->reason_idx, st->reason_id, v->text + pc->reason_off,
              pc->reason_n, false);
    }
    if (pc->has_text && pc->text_n && v->text) {
        close_reasoning(q, st, out);
        if (st->msg_idx < 0) open_message(st, out);
        srv_buf_put(&st->text, v->text + pc->text_off, pc->text_n);
        delta(st, out, "response.output_text.delta", st->msg_idx, st->msg_id, v->text + pc->text_off, pc->text_n, true);
    }
    if (pc->call >= 0) {
        const char *id = v->text + pc->call_off, *name = id + strlen(id) + 1, *args = name + strlen(name) + 1;
        close_reasoning(q, st, out);
        close_message(st, out, "completed");
        stream_call(st, out, id, name, args);
    }
    if (pc->finish) {
        st->finish = pc->finish;
        close_reasoning(q, st, out);
        if (!st->any_message && !pc->n_calls) open_message(st, out); /* an empty answer is an empty message */
        close_message(st, out, status_of(pc->finish));
    }
}

static void render(const void *call, const stream_view *v, const gm_tokenizer *tok, srv_buf *out) {
    const resp_call *q = call;
    resp_stream *st = q->st; /* the call is the connection thread's: its stream state changes as it renders */
    if (!st->output) st->output = cJSON_CreateArray();
    if (!st->started) {
        st->started = true;
        for (int k = 0; k < 2; k++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToObject(o, "response", response_json(q, "in_progress", NULL, NULL, NULL));
            put_event(st, out, k ? "response.in_progress" : "response.created", o);
        }
    }
    if (v->err) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "code", "server_error");
        cJSON_AddItemToObject(o, "message", text_json(v->err_msg, strlen(v->err_msg)));
        cJSON_AddNullToObject(o, "param");
        put_event(st, out, "error", o);
        o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "response", response_json(q, "failed", cJSON_Duplicate(st->output, true), NULL, v->err_msg));
        put_event(st, out, "response.failed", o);
        return;
    }
    for (int k = 0; k < v->n_pieces; k++)
        if (v->piece[k].choice == 0) put_piece(q, st, v, &v->piece[k], out);
    if (!v->end) return;
    const char *status = status_of(st->finish);
    cJSON *output = cJSON_Duplicate(st->output, true);
    cJSON *resp = response_json(q, status, output, usage_json(v->n_prompt, v->cached, v->gen,
                                                             reasoning_tokens(tok, st->thoughts.p, st->thoughts.len)), NULL);
    keep(q, output, resp);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", resp);
    put_event(st, out, !strcmp(status, "completed") ? "response.completed" : "response.incomplete", o);
}

const gen_endpoint openai_responses = {parse_create, response, render, "text/event-stream", ":\n\n", free_call};
const gen_endpoint openai_responses_count = {parse_count, count_answer, NULL, "application/json", "", free_call};
