/* server/anthropic.c — Anthropic's Messages API, POST /v1/messages and /v1/messages/count_tokens, as
 * gen_endpoints over the same request and sessions as OpenAI's chat (request.c builds the conversation,
 * the tools and the grammar; the scheduler runs it): the same conversation asked here and on
 * /v1/chat/completions is one prompt, so greedy replies are the same text. What is this file's alone:
 * Anthropic's field names and content blocks (system, text / image / tool_use / tool_result / thinking),
 * its rules (max_tokens is required; unknown fields are a 400, as Anthropic answers them), its answer
 * (content blocks, stop_reason, usage with cache reads), its stream (event: lines, content blocks opened,
 * filled and closed by index, ping as the keep-alive) and its error objects. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "gemma_chat.h"

enum { MAX_BLOCKS = 4096 };
#define COUNT(a) (sizeof(a) / sizeof *(a))

/* A stream's progress (the connection thread's alone): which content blocks it has opened. */
typedef struct anth_stream {
    int blocks;                                        /* content blocks opened so far: the next one's index */
    enum { NONE_OPEN, TEXT_OPEN, THINKING_OPEN } open; /* the last of them, still open */
    bool answered;                                     /* a text or tool_use block was opened */
    gen_finish finish;
    char stop[SRV_MAX_STOP_LEN + 1]; /* the stop sequence that ended it ("" none) */
    int n_calls;
} anth_stream;

typedef struct anth_call {
    bool count;  /* count_tokens: the prompt is counted, not run */
    char id[48]; /* msg_ + 24 hex digits */
    const char *model;
    anth_stream *st; /* render's state (the call itself is const there) */
} anth_call;

static void free_call(void *call) {
    anth_call *q = call;
    if (q) free(q->st);
    free(q);
}

static bool oom(srv_error *e) {
    srv_error_set(e, 500, "server_error", NULL, "out of memory");
    return false;
}

/* A 400 whose message is printf of fmt; false. */
__attribute__((format(printf, 2, 3))) static bool bad(srv_error *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char msg[sizeof e->msg];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_error_set(e, 400, "invalid_request_error", NULL, "%s", msg);
    return false;
}

static const cJSON *field(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool type_is(const cJSON *block, const char *t) {
    const cJSON *ty = field(block, "type");
    return cJSON_IsString(ty) && !strcmp(ty->valuestring, t);
}

/* ---------------------------------------------------------------- content blocks: checked first */

static bool need_string(const cJSON *b, const char *k, const char *where, srv_error *e) {
    if (cJSON_IsString(field(b, k))) return true;
    return bad(e, "%s.%s must be a string", where, k);
}

static bool check_text(const cJSON *b, const char *where, srv_error *e) {
    static const char *const known[] = {"type", "text", "cache_control", "citations"};
    if (!srq_known(b, where, known, COUNT(known), e) || !need_string(b, "text", where, e)) return false;
    const cJSON *cit = field(b, "citations");
    if (cit && !(cJSON_IsArray(cit) && !cit->child)) return bad(e, "%s.citations are not supported", where);
    return true;
}

/* image: {source: {type: base64, media_type, data} | {type: url, url}} */
static bool check_image(const cJSON *b, const char *where, srv_error *e) {
    static const char *const known[] = {"type", "source", "cache_control"};
    if (!srq_known(b, where, known, COUNT(known), e)) return false;
    const cJSON *src = field(b, "source");
    if (!cJSON_IsObject(src)) return bad(e, "%s.source must be an object", where);
    char w[128];
    snprintf(w, sizeof w, "%s.source", where);
    if (type_is(src, "base64")) {
        static const char *const k64[] = {"type", "media_type", "data"};
        return srq_known(src, w, k64, COUNT(k64), e) && need_string(src, "media_type", w, e) &&
               need_string(src, "data", w, e);
    }
    if (type_is(src, "url")) {
        static const char *const kurl[] = {"type", "url"};
        return srq_known(src, w, kurl, COUNT(kurl), e) && need_string(src, "url", w, e);
    }
    return bad(e, "%s.type must be \"base64\" or \"url\" (the Files API is not supported)", w);
}

static bool check_tool_use(const cJSON *b, const char *where, srv_error *e) {
    static const char *const known[] = {"type", "id", "name", "input", "cache_control"};
    if (!srq_known(b, where, known, COUNT(known), e) || !need_string(b, "id", where, e) ||
        !need_string(b, "name", where, e))
        return false;
    if (!cJSON_IsObject(field(b, "input"))) return bad(e, "%s.input must be an object", where);
    return true;
}

/* tool_result: {tool_use_id, content: string | [text blocks], is_error} (images in results: not supported) */
static bool check_tool_result(const cJSON *b, const char *where, srv_error *e) {
    static const char *const known[] = {"type", "tool_use_id", "content", "is_error", "cache_control"};
    if (!srq_known(b, where, known, COUNT(known), e) || !need_string(b, "tool_use_id", where, e)) return false;
    const cJSON *err = field(b, "is_error");
    if (err && !cJSON_IsBool(err)) return bad(e, "%s.is_error must be true or false", where);
    const cJSON *c = field(b, "content");
    if (!c || cJSON_IsString(c)) return true;
    if (!cJSON_IsArray(c)) return bad(e, "%s.content must be a string or a list of text blocks", where);
    const cJSON *p;
    int k = 0;
    cJSON_ArrayForEach(p, c) {
        char w[128];
        snprintf(w, sizeof w, "%s.content[%d]", where, k++);
        if (!cJSON_IsObject(p) || !type_is(p, "text"))
            return bad(e, "%s: a tool result holds text blocks only (images in tool results are not supported)", w);
        if (!check_text(p, w, e)) return false;
    }
    return true;
}

static bool check_thinking(const cJSON *b, const char *where, srv_error *e) {
    static const char *const known[] = {"type", "thinking", "signature"};
    return srq_known(b, where, known, COUNT(known), e) && need_string(b, "thinking", where, e);
}

static bool check_redacted(const cJSON *b, const char *where, srv_error *e) {
    static const char *const known[] = {"type", "data"};
    return srq_known(b, where, known, COUNT(known), e);
}

/* One block of a message of role user (text, image, tool_result) or assistant (text, tool_use, thinking,
 * redacted_thinking). */
static bool check_block(const cJSON *b, bool user, const char *where, srv_error *e) {
    const cJSON *ty = field(b, "type");
    if (!cJSON_IsObject(b) || !cJSON_IsString(ty))
        return bad(e, "%s must be a content block with a string 'type'", where);
    const char *t = ty->valuestring;
    if (!strcmp(t, "text")) return check_text(b, where, e);
    if (user && !strcmp(t, "image")) return check_image(b, where, e);
    if (user && !strcmp(t, "tool_result")) return check_tool_result(b, where, e);
    if (!user && !strcmp(t, "tool_use")) return check_tool_use(b, where, e);
    if (!user && !strcmp(t, "thinking")) return check_thinking(b, where, e);
    if (!user && !strcmp(t, "redacted_thinking")) return check_redacted(b, where, e);
    return bad(e,
               "%s: content blocks of type '%.40s' are not supported in %s messages (user: text, image, tool_result; "
               "assistant: text, tool_use, thinking, redacted_thinking)",
               where, t, user ? "user" : "assistant");
}

static const char *role_of(const cJSON *m, int i, srv_error *e) {
    const cJSON *r = field(m, "role");
    if (cJSON_IsString(r) && (!strcmp(r->valuestring, "user") || !strcmp(r->valuestring, "assistant")))
        return r->valuestring;
    bad(e, "messages[%d].role must be \"user\" or \"assistant\"", i);
    return NULL;
}

/* Every message's shape, before anything is decoded (no image is decoded for a request refused later). */
static bool check_messages(const cJSON *msgs, int limit, srv_error *e) {
    if (!cJSON_IsArray(msgs)) return bad(e, "messages: Field required (a list of messages)");
    if (cJSON_GetArraySize(msgs) > limit)
        return bad(e, "messages has more entries than this server's context can hold");
    static const char *const known[] = {"role", "content"};
    const cJSON *m;
    int i = 0, blocks = 0;
    cJSON_ArrayForEach(m, msgs) {
        char where[48];
        snprintf(where, sizeof where, "messages[%d]", i);
        if (!cJSON_IsObject(m)) return bad(e, "%s must be an object", where);
        const char *role = NULL;
        if (!srq_known(m, where, known, COUNT(known), e) || !(role = role_of(m, i, e))) return false;
        const cJSON *c = field(m, "content");
        if (!cJSON_IsString(c) && !cJSON_IsArray(c))
            return bad(e, "%s.content must be a string or a list of content blocks", where);
        const cJSON *b, *blocks_of = cJSON_IsArray(c) ? c : NULL;
        int k = 0;
        cJSON_ArrayForEach(b, blocks_of) {
            char w[80];
            snprintf(w, sizeof w, "%s.content[%d]", where, k++);
            if (++blocks > MAX_BLOCKS) return bad(e, "messages hold more than %d content blocks", MAX_BLOCKS);
            if (!check_block(b, !strcmp(role, "user"), w, e)) return false;
        }
        i++;
    }
    if (i == 0) return bad(e, "messages: at least one message is required");
    if (!strcmp(role_of(cJSON_GetArrayItem(msgs, i - 1), i - 1, e), "assistant"))
        return bad(e, "messages: the last message must be a user message (a final assistant message, Anthropic's "
                      "prefill, is not supported by this server)");
    return true;
}

/* ---------------------------------------------------------------- the conversation */

/* Anthropic's roles are user and assistant, with tool results inside user messages: they become tool
 * messages (the chat library's shape), and consecutive messages of one role are one turn, as Anthropic
 * merges them. Text after a tool result (in its user message) joins that result: Gemma's tool turns end
 * with the results. */
typedef struct walk {
    srq_conv *cv;
    srv_error *e;
    const char *role; /* the conversation's last message's role (NULL: none) */
    bool has_text;    /* it has text already (merged text is set apart by a blank line) */
} walk;

static bool open_msg(walk *w, const char *role, const char *where) {
    if (!srq_conv_message(w->cv, role, where)) return false;
    w->role = role;
    w->has_text = false;
    return true;
}

static bool add_text(walk *w, const char *s, bool separate) {
    if (separate && w->has_text && !srq_conv_text(w->cv, "\n\n", 2)) return false;
    w->has_text = w->has_text || *s;
    return srq_conv_text(w->cv, s, strlen(s));
}

/* The user side's current message for text and images: this user turn, or the tool result it follows. */
static bool user_side(walk *w, const char *where) {
    if (w->role && (!strcmp(w->role, "user") || !strcmp(w->role, "tool"))) return true;
    return open_msg(w, "user", where);
}

static bool image_block(walk *w, const cJSON *b, const char *where) {
    if (strcmp(w->role, "user"))
        return bad(w->e, "%s: an image after a tool result is not supported (images go in user turns)", where);
    const cJSON *src = field(b, "source");
    if (type_is(src, "url")) return srq_conv_image(w->cv, field(src, "url")->valuestring);
    const char *mt = field(src, "media_type")->valuestring, *data = field(src, "data")->valuestring;
    const size_t n = strlen(mt) + strlen(data) + 16;
    char *uri = malloc(n);
    if (!uri) return oom(w->e);
    snprintf(uri, n, "data:%s;base64,%s", mt, data); /* what media_load reads for image_url parts */
    const bool ok = srq_conv_image(w->cv, uri);
    free(uri);
    return ok;
}

static bool tool_result_block(walk *w, const cJSON *b, const char *where) {
    if (!open_msg(w, "tool", where) || !srq_conv_tool_result(w->cv, field(b, "tool_use_id")->valuestring, NULL))
        return false;
    if (cJSON_IsTrue(field(b, "is_error")) && !add_text(w, "Error: ", false)) return false;
    const cJSON *c = field(b, "content"), *p;
    if (cJSON_IsString(c)) return add_text(w, c->valuestring, false);
    cJSON_ArrayForEach(p, c) if (!add_text(w, field(p, "text")->valuestring, false)) return false;
    return true;
}

static bool user_message(walk *w, const cJSON *content, const char *where) {
    if (cJSON_IsString(content)) return user_side(w, where) && add_text(w, content->valuestring, true);
    const cJSON *b;
    bool first = true; /* blocks of one message are concatenated as OpenAI's parts are; merged messages set apart */
    cJSON_ArrayForEach(b, content) {
        if (type_is(b, "tool_result")) {
            if (!tool_result_block(w, b, where)) return false;
            first = true;
            continue;
        }
        if (!user_side(w, where)) return false;
        if (type_is(b, "image") ? !image_block(w, b, where) : !add_text(w, field(b, "text")->valuestring, first))
            return false;
        first = false;
    }
    return true;
}

static bool assistant_message(walk *w, const cJSON *content, const char *where) {
    if (!(w->role && !strcmp(w->role, "assistant")) && !open_msg(w, "assistant", where)) return false;
    if (cJSON_IsString(content)) return add_text(w, content->valuestring, true);
    const cJSON *b;
    bool first = true;
    cJSON_ArrayForEach(b, content) {
        if (type_is(b, "text")) {
            if (!add_text(w, field(b, "text")->valuestring, first)) return false;
            first = false;
        } else if (type_is(b, "thinking")) {
            const char *t = field(b, "thinking")->valuestring;
            if (!srq_conv_reasoning(w->cv, t, strlen(t))) return false;
        } else if (type_is(b, "tool_use")) {
            char *args = cJSON_PrintUnformatted(field(b, "input"));
            if (!args) return oom(w->e);
            const bool ok = srq_conv_call(w->cv, field(b, "id")->valuestring, field(b, "name")->valuestring, args);
            free(args);
            if (!ok) return false;
        } /* redacted_thinking: encrypted thoughts of another model, nothing to render */
    }
    return true;
}

/* system: a string or a list of text blocks (set apart by blank lines). */
static bool system_prompt(walk *w, const cJSON *sys) {
    if (!sys) return true;
    if (cJSON_IsString(sys))
        return !*sys->valuestring || (open_msg(w, "system", "system") && add_text(w, sys->valuestring, true));
    if (!cJSON_IsArray(sys)) return bad(w->e, "system must be a string or a list of text blocks");
    const cJSON *b;
    int k = 0;
    cJSON_ArrayForEach(b, sys) {
        char where[32];
        snprintf(where, sizeof where, "system[%d]", k++);
        if (!cJSON_IsObject(b) || !type_is(b, "text")) return bad(w->e, "%s must be a text block", where);
        if (!check_text(b, where, w->e)) return false;
    }
    cJSON_ArrayForEach(b, sys) {
        const char *t = field(b, "text")->valuestring;
        /* Claude Code's billing stamp (it changes every request): not instructions, and it would make every
         * request's prompt differ from its first tokens on, so that nothing came from the prefix cache */
        if (!*t || !strncmp(t, "x-anthropic-billing-header:", 27)) continue;
        if (!w->role && !open_msg(w, "system", "system")) return false;
        if (!add_text(w, t, true)) return false;
    }
    return true;
}

static bool conversation(const gen_call_in *in, const cJSON *root, gen_request *rq, srv_error *e) {
    const int limit = srq_prompt_limit(in->o, in->n_ctx);
    const cJSON *msgs = field(root, "messages");
    if (!check_messages(msgs, limit, e)) return false;
    walk w = {.cv = srq_conv_new(in, "messages", e), .e = e};
    bool ok = w.cv && system_prompt(&w, field(root, "system"));
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, msgs) {
        if (!ok) break;
        char where[32];
        snprintf(where, sizeof where, "messages[%d]", i++);
        const cJSON *c = field(m, "content");
        ok = !strcmp(field(m, "role")->valuestring, "user") ? user_message(&w, c, where)
                                                            : assistant_message(&w, c, where);
    }
    ok = ok && srq_conv_tokenize(w.cv, rq, limit);
    srq_conv_free(w.cv);
    return ok;
}

/* ---------------------------------------------------------------- tools */

/* tools: custom tools {name, description, input_schema}; a server tool (web_search, bash, ...) is a 400.
 * defer_loading (Claude Code's tool search) is accepted: every tool is declared in the prompt. */
static bool read_tools(const cJSON *tools, gen_request *rq, srv_error *e) {
    if (!tools) return true;
    if (!cJSON_IsArray(tools)) return bad(e, "tools must be a list of tools");
    static const char *const known[] = {"type",          "name",   "description",           "input_schema",
                                        "cache_control", "strict", "eager_input_streaming", "input_examples",
                                        "defer_loading"};
    const cJSON *t;
    int i = 0;
    cJSON_ArrayForEach(t, tools) {
        char where[32];
        snprintf(where, sizeof where, "tools[%d]", i++);
        if (!cJSON_IsObject(t)) return bad(e, "%s must be an object", where);
        const cJSON *ty = field(t, "type");
        if (ty && !(cJSON_IsString(ty) && !strcmp(ty->valuestring, "custom")))
            return bad(e,
                       "%s: server tools are not supported ('%.60s'); declare custom tools with name and input_schema",
                       where, cJSON_IsString(ty) ? ty->valuestring : "?");
        if (!srq_known(t, where, known, COUNT(known), e)) return false;
        const cJSON *name = field(t, "name"), *desc = field(t, "description"), *schema = field(t, "input_schema");
        const cJSON *strict = field(t, "strict");
        if (!cJSON_IsString(name)) return bad(e, "%s.name must be a string", where);
        if (desc && !cJSON_IsString(desc)) return bad(e, "%s.description must be a string", where);
        if (strict && !cJSON_IsBool(strict)) return bad(e, "%s.strict must be true or false", where);
        if (!cJSON_IsObject(schema)) return bad(e, "%s.input_schema: Field required (a JSON schema object)", where);
        if (!srq_tool(rq, where, name->valuestring, desc ? desc->valuestring : NULL, schema, e)) return false;
    }
    return true;
}

/* tool_choice: {type: auto | any | tool (name) | none, disable_parallel_tool_use} */
static bool read_tool_choice(const cJSON *c, const gm_tokenizer *tok, gen_request *rq, srv_error *e) {
    tool_mode mode = TOOLS_AUTO;
    const char *named = NULL;
    bool parallel = true;
    if (c) {
        static const char *const known[] = {"type", "name", "disable_parallel_tool_use"};
        const cJSON *ty = field(c, "type"), *name = field(c, "name"), *dp = field(c, "disable_parallel_tool_use");
        if (!cJSON_IsObject(c) || !cJSON_IsString(ty))
            return bad(e, "tool_choice must be an object with a string 'type'");
        if (!srq_known(c, "tool_choice", known, COUNT(known), e)) return false;
        if (dp && !cJSON_IsBool(dp)) return bad(e, "tool_choice.disable_parallel_tool_use must be true or false");
        parallel = !cJSON_IsTrue(dp);
        const char *t = ty->valuestring;
        if (!strcmp(t, "auto")) mode = TOOLS_AUTO;
        else if (!strcmp(t, "any")) mode = TOOLS_REQUIRED;
        else if (!strcmp(t, "none")) mode = TOOLS_NONE;
        else if (!strcmp(t, "tool")) {
            if (!cJSON_IsString(name)) return bad(e, "tool_choice of type \"tool\" needs a string 'name'");
            mode = TOOLS_NAMED;
            named = name->valuestring;
        } else {
            return bad(e, "tool_choice.type '%.40s' is not auto, any, tool or none", t);
        }
        if (name && mode != TOOLS_NAMED) return bad(e, "tool_choice.name is only for type \"tool\"");
    }
    if ((mode == TOOLS_REQUIRED || mode == TOOLS_NAMED) && !rq->n_tools)
        return bad(e, "tool_choice '%s' needs tools", mode == TOOLS_NAMED ? "tool" : "any");
    return srq_tool_choice(rq, tok, mode, named, parallel, e);
}

/* ---------------------------------------------------------------- the other fields */

static const char *const message_fields[] = {
    "model", "messages", "system", "max_tokens", "stop_sequences", "stream", "temperature", "top_p", "top_k", "tools",
    "tool_choice", "thinking", "output_config",
    /* ignored: bookkeeping that cannot change the tokens; prompt caching is automatic here (cache_control);
     * context editing (context_management, which Claude Code sends) is not done: the whole conversation is
     * the prompt */
    "metadata", "service_tier", "cache_control", "speed", "inference_geo", "context_management"};
static const char *const count_fields[] = {"model",       "messages", "system",       "tools",
                                           "tool_choice", "thinking", "output_config"};

/* temperature (Anthropic's default 1.0; 0 is greedy), top_p, top_k: the anthropic SDK 2.x sends them with
 * extra_body. The rest of the sampler as OpenAI's chat sets it, so the two agree token for token. */
static bool sampling(const cJSON *root, gen_request *rq, srv_error *e) {
    gm_sampling *s = &rq->smp;
    s->temperature = 1.0f;
    s->repeat_last_n = 64;
    return srq_float(root, "temperature", NULL, 0, 1, &s->temperature, e) &&
           srq_float(root, "top_p", NULL, 0, 1, &s->top_p, e) &&
           srq_int(root, "top_k", NULL, 0, 1 << 20, &s->top_k, e) && srq_sampling_check(rq, e);
}

static bool stop_sequences(const cJSON *root, gen_request *rq, srv_error *e) {
    const cJSON *v = field(root, "stop_sequences"), *s;
    if (!v) return true;
    if (!cJSON_IsArray(v)) return bad(e, "stop_sequences must be a list of strings");
    cJSON_ArrayForEach(s, v) {
        if (!cJSON_IsString(s)) return bad(e, "stop_sequences must be a list of strings");
        if (!srq_stop(rq, "stop_sequences", s->valuestring, e)) return false;
    }
    return true;
}

/* thinking: {type: enabled, budget_tokens >= 1024 and < max_tokens} | {type: disabled} | {type: adaptive}.
 * Accepted and checked; the prompt is the same either way (the chat format opens Gemma 4's reply with an
 * empty thought channel), and thoughts the model writes come back as thinking blocks. */
static bool thinking(const cJSON *root, int max_tokens, srv_error *e) {
    const cJSON *t = field(root, "thinking");
    if (!t) return true;
    const cJSON *ty = field(t, "type");
    if (!cJSON_IsObject(t) || !cJSON_IsString(ty)) return bad(e, "thinking must be an object with a string 'type'");
    static const char *const known[] = {"type", "budget_tokens", "display"};
    if (!srq_known(t, "thinking", known, COUNT(known), e)) return false;
    const cJSON *display = field(t, "display");
    if (display && !cJSON_IsString(display)) return bad(e, "thinking.display must be a string");
    const char *k = ty->valuestring;
    if (!strcmp(k, "enabled")) {
        int budget = 0;
        if (!field(t, "budget_tokens")) return bad(e, "thinking.budget_tokens: Field required");
        if (!srq_int(t, "budget_tokens", "thinking.budget_tokens", 1024, 1 << 30, &budget, e)) return false;
        if (max_tokens && budget >= max_tokens) return bad(e, "thinking.budget_tokens must be less than max_tokens");
        return true;
    }
    if (field(t, "budget_tokens")) return bad(e, "thinking.budget_tokens is only for type \"enabled\"");
    if (!strcmp(k, "disabled") || !strcmp(k, "adaptive")) return true;
    return bad(e, "thinking.type '%.40s' is not enabled, disabled or adaptive", k);
}

/* output_config: {format: {type: json_schema, schema}} (structured output, by the grammar), effort (ignored). */
static bool output_config(const cJSON *root, gen_request *rq, srv_error *e) {
    const cJSON *oc = field(root, "output_config");
    if (!oc) return true;
    static const char *const known[] = {"format", "effort"};
    if (!cJSON_IsObject(oc)) return bad(e, "output_config must be an object");
    if (!srq_known(oc, "output_config", known, COUNT(known), e)) return false;
    const cJSON *f = field(oc, "format"), *ef = field(oc, "effort");
    if (ef && !cJSON_IsString(ef)) return bad(e, "output_config.effort must be a string");
    if (!f) return true;
    static const char *const fknown[] = {"type", "schema"};
    if (!cJSON_IsObject(f) || !type_is(f, "json_schema"))
        return bad(e, "output_config.format must be {\"type\": \"json_schema\", \"schema\": {...}}");
    if (!srq_known(f, "output_config.format", fknown, COUNT(fknown), e)) return false;
    const cJSON *schema = field(f, "schema");
    if (!cJSON_IsObject(schema)) return bad(e, "output_config.format.schema must be a JSON schema object");
    return srq_schema(rq, "output_config.format", schema, e);
}

/* max_tokens is required, as Anthropic's API requires it. It bounds the reply; past --max-tokens it is
 * --max-tokens, and past the room the context leaves the reply runs to the end of the context (stop_reason
 * model_context_window_exceeded): clients send large values by habit (Claude Code: 32000). */
static bool max_tokens_field(const cJSON *root, const srv_options *o, int *asked, int *out, srv_error *e) {
    if (!field(root, "max_tokens")) return bad(e, "max_tokens: Field required");
    if (!srq_int(root, "max_tokens", NULL, 1, 1 << 30, asked, e)) return false;
    *out = *asked > o->max_tokens ? o->max_tokens : *asked;
    return true;
}

static bool parse_body(const gen_call_in *in, const cJSON *root, gen_request *rq, anth_call *q, srv_error *e) {
    const srv_options *o = in->o;
    const bool count = q->count;
    if (!(count ? srq_known(root, NULL, count_fields, COUNT(count_fields), e)
                : srq_known(root, NULL, message_fields, COUNT(message_fields), e)))
        return false;
    const cJSON *model = field(root, "model"), *meta = field(root, "metadata"), *tier = field(root, "service_tier");
    const cJSON *cm = field(root, "context_management");
    if (model && !cJSON_IsString(model)) return bad(e, "model must be a string");
    if (meta && !cJSON_IsObject(meta)) return bad(e, "metadata must be an object");
    if (tier && !cJSON_IsString(tier)) return bad(e, "service_tier must be a string");
    if (cm && !cJSON_IsObject(cm)) return bad(e, "context_management must be an object");
    int asked = 0, max_tokens = 0;
    if (!count && !max_tokens_field(root, o, &asked, &max_tokens, e)) return false;
    rq->n = 1;
    rq->speculative = srv_has_drafter(o);
    if (!sampling(root, rq, e) || !srq_bool(root, "stream", NULL, &rq->stream, e) || !stop_sequences(root, rq, e) ||
        !thinking(root, asked, e) || !output_config(root, rq, e) || !read_tools(field(root, "tools"), rq, e) ||
        !read_tool_choice(field(root, "tool_choice"), in->tok, rq, e) || !conversation(in, root, rq, e))
        return false;
    if (!srq_fits(o, in->n_ctx, rq->n_prompt, 0, e)) return false; /* counted or run: one the server can take */
    if (count) return true;
    rq->max_tokens = rq->n_prompt + max_tokens > in->n_ctx ? 0 : max_tokens; /* 0: to the end of the context */
    return true;
}

static void *parse_call(const gen_call_in *in, gen_request *rq, srv_error *e, bool count) {
    anth_call *q = calloc(1, sizeof *q);
    if (q) q->st = calloc(1, sizeof *q->st);
    if (!q || !q->st) {
        free_call(q);
        oom(e);
        return NULL;
    }
    q->count = count;
    q->model = in->model;
    snprintf(q->id, sizeof q->id, "msg_%016llx%08llx", (unsigned long long)srv_fresh_u64(),
             (unsigned long long)(srv_fresh_u64() & 0xffffffffu));
    cJSON *root = cJSON_ParseWithLength(in->body ? in->body : "", in->len);
    bool ok = root ? true : bad(e, "the body is not valid JSON");
    ok = ok && (cJSON_IsObject(root) ? true : bad(e, "the body must be a JSON object"));
    ok = ok && parse_body(in, root, rq, q, e);
    cJSON_Delete(root);
    if (!ok) {
        free_call(q);
        return NULL;
    }
    return q;
}

static void *parse_messages(const gen_call_in *in, gen_request *rq, srv_error *e) {
    return parse_call(in, rq, e, false);
}
static void *parse_count(const gen_call_in *in, gen_request *rq, srv_error *e) { return parse_call(in, rq, e, true); }

/* ---------------------------------------------------------------- answers */

static cJSON *text_item(const char *s, size_t n) {
    char *c = srv_clean_utf8(s, n);
    cJSON *item = cJSON_CreateString(c ? c : "");
    free(c);
    return item;
}

/* The session's call id (call_ + hex) as Anthropic writes tool_use ids (toolu_ + the same hex). */
static void tool_id(const char *call_id, char *out, size_t n) {
    snprintf(out, n, "toolu_%s", !strncmp(call_id, "call_", 5) ? call_id + 5 : call_id);
}

static const char *stop_reason(gen_finish f, int n_calls) {
    switch (f) {
    case GEN_MAX_TOKENS: return "max_tokens";
    case GEN_CONTEXT_FULL: return "model_context_window_exceeded";
    case GEN_STOP_STRING: return "stop_sequence";
    default: return n_calls ? "tool_use" : "end_turn";
    }
}

/* usage: input_tokens are those not read from the cache (Anthropic counts cache reads apart). */
static cJSON *usage_json(int n_prompt, int cached, int gen) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", n_prompt - cached);
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", cached);
    cJSON_AddNumberToObject(u, "output_tokens", gen);
    return u;
}

/* A tool_use block; its input the call's arguments (a JSON object: the tool parser's), or {} to open a
 * streamed block. */
static cJSON *tool_use_block(const char *call_id, const char *name, const char *args, bool empty_input) {
    char id[48];
    tool_id(call_id, id, sizeof id);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", id);
    cJSON_AddItemToObject(b, "name", text_item(name, strlen(name)));
    cJSON *input = empty_input ? NULL : cJSON_Parse(args);
    if (input && !cJSON_IsObject(input)) cJSON_Delete(input), input = NULL;
    cJSON_AddItemToObject(b, "input", input ? input : cJSON_CreateObject());
    return b;
}

static cJSON *message_envelope(const anth_call *q) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", q->id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON_AddStringToObject(o, "model", q->model);
    return o;
}

static char *print(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static cJSON *text_block(const char *s, size_t n) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "text");
    cJSON_AddItemToObject(b, "text", text_item(s, n));
    return b;
}

/* Content blocks: thinking (Gemma 4's thoughts, signature ""), text (also when the reply is empty: there is
 * always a block to read), tool_use. */
static char *response(const void *call, const job *j, const gm_tokenizer *tok) {
    (void)tok;
    const anth_call *q = call;
    if (q->count) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "input_tokens", j->rq.n_prompt);
        return print(o);
    }
    const gen_session *g = &j->gen[0];
    const int n_calls = gen_session_n_calls(g);
    cJSON *o = message_envelope(q), *content = cJSON_AddArrayToObject(o, "content");
    size_t rl = 0;
    const char *r = g->tp ? gm_tool_parser_reasoning(g->tp, &rl) : "";
    if (rl) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "thinking");
        cJSON_AddItemToObject(b, "thinking", text_item(r, rl));
        cJSON_AddStringToObject(b, "signature", "");
        cJSON_AddItemToArray(content, b);
    }
    if (g->len || !n_calls) cJSON_AddItemToArray(content, text_block(g->text ? g->text : "", g->len));
    for (int i = 0; i < n_calls; i++) {
        const char *name = NULL, *args = NULL;
        gm_tool_parser_call(g->tp, (size_t)i, &name, &args);
        cJSON_AddItemToArray(content, tool_use_block(g->call_id[i], name, args, false));
    }
    cJSON_AddStringToObject(o, "stop_reason", stop_reason(g->finish, n_calls));
    if (g->finish == GEN_STOP_STRING && g->stop_matched)
        cJSON_AddItemToObject(o, "stop_sequence", text_item(g->stop_matched, strlen(g->stop_matched)));
    else cJSON_AddNullToObject(o, "stop_sequence");
    cJSON_AddItemToObject(o, "usage", usage_json(j->rq.n_prompt, j->cached, job_generated(j)));
    return print(o);
}

/* Anthropic's error types by HTTP status (its 529 overloaded_error is this server's 503). */
static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

/* An event's data (or an error body), its type first. */
static cJSON *event(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

static cJSON *error_object(const char *type, const char *msg) {
    cJSON *o = event("error"), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddItemToObject(e, "message", text_item(msg, strlen(msg)));
    return o;
}

char *anthropic_error_json(const srv_error *e) { return print(error_object(error_type(e->status), e->msg)); }

/* ---------------------------------------------------------------- streaming (Server-Sent Events) */

/* event: <type>\ndata: <o>\n\n, the event named by its data's type. */
static void put_event(srv_buf *out, const char *type, cJSON *o) {
    char *s = print(o);
    if (!s) return;
    const bool ok = srv_buf_put(out, "event: ", 7) && srv_buf_put(out, type, strlen(type)) &&
                    srv_buf_put(out, "\ndata: ", 7) && srv_buf_put(out, s, strlen(s)) && srv_buf_put(out, "\n\n", 2);
    (void)ok; /* out of memory: the stream is cut short, as OpenAI's is */
    free(s);
}

static void put_indexed(srv_buf *out, const char *type, int index, const char *key, cJSON *value) {
    cJSON *o = event(type);
    cJSON_AddNumberToObject(o, "index", index);
    if (key) cJSON_AddItemToObject(o, key, value);
    put_event(out, type, o);
}

static void block_start(anth_stream *st, srv_buf *out, cJSON *block) {
    put_indexed(out, "content_block_start", st->blocks++, "content_block", block);
}

static void block_delta(const anth_stream *st, srv_buf *out, const char *type, const char *key, cJSON *value) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "type", type);
    cJSON_AddItemToObject(d, key, value);
    put_indexed(out, "content_block_delta", st->blocks - 1, "delta", d);
}

/* The open block closed (a thinking block with its signature first: none here, so ""). */
static void block_stop(anth_stream *st, srv_buf *out) {
    if (st->open == NONE_OPEN) return;
    if (st->open == THINKING_OPEN) block_delta(st, out, "signature_delta", "signature", cJSON_CreateString(""));
    put_indexed(out, "content_block_stop", st->blocks - 1, NULL, NULL);
    st->open = NONE_OPEN;
}

/* n bytes of text or thoughts into an open block of that kind (the other kind closed, this one opened). */
static void block_text(anth_stream *st, srv_buf *out, bool thinking, const char *s, size_t n) {
    const bool same = st->open == (thinking ? THINKING_OPEN : TEXT_OPEN);
    if (!same) {
        block_stop(st, out);
        cJSON *b = thinking ? cJSON_CreateObject() : text_block("", 0);
        if (thinking) {
            cJSON_AddStringToObject(b, "type", "thinking");
            cJSON_AddStringToObject(b, "thinking", "");
            cJSON_AddStringToObject(b, "signature", "");
        }
        block_start(st, out, b);
        st->open = thinking ? THINKING_OPEN : TEXT_OPEN;
        st->answered = st->answered || !thinking;
    }
    if (n)
        block_delta(st, out, thinking ? "thinking_delta" : "text_delta", thinking ? "thinking" : "text",
                    text_item(s, n));
}

/* message_start: the message with no content yet; then a ping, as Anthropic's streams begin. */
static void message_start(const anth_call *q, const stream_view *v, srv_buf *out) {
    cJSON *m = message_envelope(q), *o = event("message_start");
    cJSON_AddArrayToObject(m, "content");
    cJSON_AddNullToObject(m, "stop_reason");
    cJSON_AddNullToObject(m, "stop_sequence");
    cJSON_AddItemToObject(m, "usage", usage_json(v->n_prompt, v->cached, 0));
    cJSON_AddItemToObject(o, "message", m);
    put_event(out, "message_start", o);
    put_event(out, "ping", event("ping"));
}

/* One piece: thoughts or text into an open block of their kind (opened first), a whole tool call as its own
 * block (opened with an empty input, the input as one input_json_delta, closed), the choice's end (the open
 * block closed). */
static void put_piece(const anth_call *q, const stream_view *v, const stream_piece *pc, srv_buf *out) {
    anth_stream *st = q->st;
    if (pc->open) {
        message_start(q, v, out);
        return;
    }
    if (pc->call >= 0) {
        const char *id = v->text + pc->call_off, *name = id + strlen(id) + 1, *args = name + strlen(name) + 1;
        block_stop(st, out);
        block_start(st, out, tool_use_block(id, name, args, true));
        st->answered = true;
        block_delta(st, out, "input_json_delta", "partial_json", text_item(args, strlen(args)));
        put_indexed(out, "content_block_stop", st->blocks - 1, NULL, NULL);
        return;
    }
    if (pc->reason_n && v->text) block_text(st, out, true, v->text + pc->reason_off, pc->reason_n);
    if (pc->has_text && pc->text_n && v->text) block_text(st, out, false, v->text + pc->text_off, pc->text_n);
    if (pc->finish) {
        if (!st->answered)
            block_text(st, out, false, "", 0); /* an empty reply: an empty text block, as answered whole */
        block_stop(st, out);
        st->finish = pc->finish;
        st->n_calls = pc->n_calls;
        snprintf(st->stop, sizeof st->stop, "%s", pc->finish == GEN_STOP_STRING && pc->stop ? pc->stop : "");
    }
}

/* After a 200 has started, an error goes out as an error event, and the stream ends. */
static void render(const void *call, const stream_view *v, const gm_tokenizer *tok, srv_buf *out) {
    (void)tok;
    const anth_call *q = call;
    if (v->err) {
        put_event(out, "error",
                  error_object(v->err == JOB_ERR_UNAVAILABLE ? "overloaded_error" : "api_error", v->err_msg));
        return;
    }
    for (int k = 0; k < v->n_pieces; k++) put_piece(q, v, &v->piece[k], out);
    if (!v->end) return;
    const anth_stream *st = q->st;
    cJSON *o = event("message_delta"), *d = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(d, "stop_reason", stop_reason(st->finish, st->n_calls));
    if (st->stop[0]) cJSON_AddItemToObject(d, "stop_sequence", text_item(st->stop, strlen(st->stop)));
    else cJSON_AddNullToObject(d, "stop_sequence");
    cJSON_AddItemToObject(o, "usage", usage_json(v->n_prompt, v->cached, v->gen));
    put_event(out, "message_delta", o);
    put_event(out, "message_stop", event("message_stop"));
}

/* The keep-alive: a ping event, which Anthropic's clients skip. */
#define PING "event: ping\ndata: {\"type\":\"ping\"}\n\n"

const gen_endpoint anthropic_messages = {parse_messages, response, render, "text/event-stream", PING, free_call};
const gen_endpoint anthropic_count_tokens = {parse_count, response, render, "text/event-stream", PING, free_call};
