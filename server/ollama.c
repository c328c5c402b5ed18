/* server/ollama.c — Ollama's native API over the same sessions as the OpenAI endpoints: /api/chat and
 * /api/generate as two gen_endpoints (a request body into a gen_request, a job into one JSON object or an
 * NDJSON stream: one object a line, the last with "done": true and the counters), and their load requests.
 * The model endpoints (/api/tags, /api/show, /api/ps, /api/version) and /api/embed: ollama_models.c.
 *
 * Everything a request means is decided where the OpenAI endpoints decide it (request.c: the same
 * conversation builder, tool declarations, schema compiler and limits), so one conversation asked through
 * either API is one prompt, one grammar and one sampler. What differs is Ollama's: `options` for the sampling
 * fields (an option the server cannot honour is a 400 naming it, as is any unknown field), `format` for
 * structured output, `stream` true unless said otherwise, tool call arguments as JSON objects, images as
 * base64 strings beside the text, durations in nanoseconds and errors as {"error": "..."}. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "server/server.h"
#include "gemma_chat.h"

typedef enum { OLL_CHAT, OLL_GENERATE } oll_kind;

/* A call's own state: what answering needs besides the job. */
typedef struct oll_call {
    oll_kind kind;
    char model[200];   /* the name the request gave, echoed */
    gen_finish finish; /* a stream's: why its choice ended (seen before the end is) */
} oll_call;

/* A body being read into a request. */
typedef struct parse {
    gen_request *rq;
    oll_call *q;
    srv_error *e;
    const gen_call_in *in;
} parse;

static bool bad(srv_error *e, const char *fmt, const char *field) { return srq_bad(e, fmt, field); }

static bool oom(srv_error *e) {
    srv_error_set(e, 500, "server_error", NULL, "out of memory");
    return false;
}

/* ---------------------------------------------------------------- small helpers */

static bool empty_or_null(const cJSON *v) {
    return !v || cJSON_IsNull(v) || (cJSON_IsString(v) && !v->valuestring[0]) || (cJSON_IsArray(v) && !v->child);
}

/* Now as RFC 3339 in UTC with nanoseconds, as Ollama writes created_at. */
static void rfc3339_now(char *out, size_t n) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, n, "%s.%09ldZ", day, ts.tv_nsec);
}

static char *print_free(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

char *ollama_error_json(const srv_error *e) {
    cJSON *o = cJSON_CreateObject();
    char *clean = srv_clean_utf8(e->msg, strlen(e->msg));
    cJSON_AddStringToObject(o, "error", clean ? clean : "error");
    free(clean);
    return print_free(o);
}

static cJSON *text_item(const char *s, size_t n) {
    char *c = srv_clean_utf8(s ? s : "", s ? n : 0);
    cJSON *item = cJSON_CreateString(c ? c : "");
    free(c);
    return item;
}

/* The request's model: the served id, or its Ollama name (the id with ":latest" when it has no tag). A
 * missing name is a 400 and another one a 404, as Ollama answers. */
bool ollama_model_ok(const cJSON *root, const char *id, char *echo, size_t n, srv_error *e) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsString(m) || !m->valuestring[0]) return bad(e, "%s is required", "model");
    const char *s = m->valuestring;
    const size_t il = strlen(id);
    const bool tagged = strchr(id, ':') != NULL;
    if (strcmp(s, id) && (tagged || strncmp(s, id, il) || strcmp(s + il, ":latest"))) {
        srv_error_set(e, 404, "not_found_error", "model_not_found", "model '%.200s' not found", s);
        return false;
    }
    snprintf(echo, n, "%s", s);
    return true;
}

/* ---------------------------------------------------------------- options */

/* Options that tune loading or speed, not the tokens: accepted and ignored (the server's settings hold). */
static const char *const ignored_options[] = {
    "num_keep",     "numa",        "num_batch", "num_gpu",   "main_gpu",       "low_vram",   "f16_kv",
    "logits_all",   "vocab_only",  "use_mmap",  "use_mlock", "embedding_only", "num_thread", "penalize_newline",
    "mirostat_tau", "mirostat_eta"};
static const char *const read_options[] = {"temperature",    "top_k",         "top_p",           "min_p",
                                           "seed",           "num_predict",   "num_ctx",         "stop",
                                           "repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty"};

static bool in_list(const char *k, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, list[i])) return true;
    return false;
}

/* An option the server does not implement, at the value that asks for nothing. */
static bool neutral_option(const cJSON *f) {
    const char *k = f->string;
    if (!strcmp(k, "typical_p") || !strcmp(k, "tfs_z")) return cJSON_IsNumber(f) && f->valuedouble == 1;
    if (!strcmp(k, "mirostat")) return cJSON_IsNumber(f) && f->valuedouble == 0;
    return false;
}

static bool option_names(const cJSON *opts, srv_error *e) {
    const cJSON *f;
    cJSON_ArrayForEach(f, opts) {
        const char *k = f->string;
        if (cJSON_IsNull(f) || neutral_option(f) ||
            in_list(k, read_options, sizeof read_options / sizeof *read_options) ||
            in_list(k, ignored_options, sizeof ignored_options / sizeof *ignored_options))
            continue;
        srv_error_set(e, 400, "invalid_request_error", "unsupported_field",
                      "options.%.60s is not supported by this server (docs/server.md lists the options it reads)", k);
        return false;
    }
    return true;
}

static bool option_stop(gen_request *rq, const cJSON *opts, srv_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(opts, "stop");
    if (!v || cJSON_IsNull(v)) return true;
    if (cJSON_IsString(v)) return srq_stop(rq, "options.stop", v->valuestring, e);
    if (!cJSON_IsArray(v)) return bad(e, "'%s' must be a list of strings", "options.stop");
    const cJSON *s;
    cJSON_ArrayForEach(s, v) {
        if (!cJSON_IsString(s)) return bad(e, "'%s' must be a list of strings", "options.stop");
        if (!srq_stop(rq, "options.stop", s->valuestring, e)) return false;
    }
    return true;
}

/* The sampling fields, from Gemma's recommended settings (Ollama's gemma3 parameters: temperature 1, top_k 64,
 * top_p 0.95; no repeat penalty) overridden by options. */
static bool sampling(parse *ps, const cJSON *opts) {
    gm_sampling *s = &ps->rq->smp;
    srv_error *e = ps->e;
    s->temperature = 1.0f;
    s->top_k = 64;
    s->top_p = 0.95f;
    s->repeat_last_n = 64;
    if (opts && !option_names(opts, e)) return false;
    if (!srq_float(opts, "temperature", "options.temperature", 0, 100, &s->temperature, e) ||
        !srq_int(opts, "top_k", "options.top_k", 0, 1 << 20, &s->top_k, e) ||
        !srq_float(opts, "top_p", "options.top_p", 0, 1, &s->top_p, e) ||
        !srq_float(opts, "min_p", "options.min_p", 0, 1, &s->min_p, e) ||
        !srq_float(opts, "repeat_penalty", "options.repeat_penalty", 1e-3, 100, &s->repeat_penalty, e) ||
        !srq_int(opts, "repeat_last_n", "options.repeat_last_n", -1, 1 << 20, &s->repeat_last_n, e) ||
        !srq_float(opts, "presence_penalty", "options.presence_penalty", -2, 2, &s->presence_penalty, e) ||
        !srq_float(opts, "frequency_penalty", "options.frequency_penalty", -2, 2, &s->frequency_penalty, e) ||
        !option_stop(ps->rq, opts, e))
        return false;
    double seed = -1;
    if (!srq_num(opts, "seed", "options.seed", -9.2e18, 9.2e18, true, &seed, e)) return false;
    if (seed >= 0) s->seed = (uint64_t)seed; /* Ollama's -1 (and no seed): a fresh one */
    return srq_sampling_check(ps->rq, e);
}

/* num_predict (-1, -2 or 0: up to the context) and num_ctx (a smaller context for this request; a larger one
 * is the server's), then whether the prompt fits. */
static bool limits(parse *ps, const cJSON *opts) {
    const srv_options *o = ps->in->o;
    int predict = 0, num_ctx = 0;
    if (!srq_int(opts, "num_predict", "options.num_predict", -2, o->max_tokens, &predict, ps->e) ||
        !srq_int(opts, "num_ctx", "options.num_ctx", 0, 1 << 30, &num_ctx, ps->e))
        return false;
    const int ctx = num_ctx > 0 && num_ctx < ps->in->n_ctx ? num_ctx : ps->in->n_ctx;
    if (!srq_fits(o, ctx, ps->rq->n_prompt, predict > 0 ? predict : 0, ps->e)) return false;
    /* no limit asked: up to the context (num_ctx's), within --max-tokens, the most one request generates */
    const int room = ctx - ps->rq->n_prompt;
    ps->rq->max_tokens = predict > 0 ? predict : room < o->max_tokens ? room : o->max_tokens;
    return true;
}

/* ---------------------------------------------------------------- shared top-level fields */

/* format: "json" (any object), a JSON schema, or "" (none). */
static bool format_field(parse *ps, const cJSON *root) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!f || cJSON_IsNull(f) || (cJSON_IsString(f) && !f->valuestring[0])) return true;
    if (cJSON_IsString(f) && !strcmp(f->valuestring, "json")) return srq_schema(ps->rq, "format", NULL, ps->e);
    if (cJSON_IsObject(f)) return srq_schema(ps->rq, "format", f, ps->e);
    return bad(ps->e, "'%s' must be \"json\" or a JSON schema object", "format");
}

/* think: false (or absent) always; true or a level only for a model that thinks (Gemma 4). */
static bool think_field(parse *ps, const cJSON *root) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "think");
    if (!t || cJSON_IsNull(t) || cJSON_IsFalse(t)) return true;
    if (!cJSON_IsTrue(t) && !cJSON_IsString(t))
        return bad(ps->e, "'%s' must be true, false, or high / medium / low", "think");
    if (gm_tokenizer_tool_format(ps->in->tok) == GM_TOOLS_GEMMA4) return true;
    srv_error_set(ps->e, 400, "invalid_request_error", NULL, "\"%.200s\" does not support thinking", ps->q->model);
    return false;
}

/* keep_alive: a duration (string or number), accepted: the server keeps its one model loaded. logprobs and
 * top_logprobs only at their off values. */
static bool other_fields(parse *ps, const cJSON *root) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(root, "keep_alive");
    if (k && !cJSON_IsNull(k) && !cJSON_IsString(k) && !cJSON_IsNumber(k))
        return bad(ps->e, "'%s' must be a duration (\"5m\") or a number of seconds", "keep_alive");
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
    const cJSON *tlp = cJSON_GetObjectItemCaseSensitive(root, "top_logprobs");
    if ((lp && !cJSON_IsNull(lp) && !cJSON_IsFalse(lp)) ||
        (tlp && !cJSON_IsNull(tlp) && !(cJSON_IsNumber(tlp) && tlp->valuedouble == 0)))
        return bad(ps->e, "'%s' is not supported by this server's Ollama API (use /v1/chat/completions)", "logprobs");
    ps->rq->stream = true; /* Ollama streams unless told not to */
    if (!srq_bool(root, "stream", NULL, &ps->rq->stream, ps->e)) return false;
    ps->rq->speculative = srv_has_drafter(ps->in->o);
    return true;
}

/* ---------------------------------------------------------------- conversations */

/* An image of `images`: base64 bytes (or a data URI) into the conversation's last message. */
static bool add_image(parse *ps, srq_conv *cv, const cJSON *img, const char *where) {
    if (!cJSON_IsString(img)) {
        srv_error_set(ps->e, 400, "invalid_request_error", NULL, "%s.images must be a list of base64 strings", where);
        return false;
    }
    const char *b = img->valuestring;
    if (!strncmp(b, "data:", 5)) return srq_conv_image(cv, b);
    /* the decoder reads the format from the bytes; the type only names it */
    const char *type = !strncmp(b, "iVBOR", 5)   ? "png"
                       : !strncmp(b, "/9j/", 4)  ? "jpeg"
                       : !strncmp(b, "UklGR", 5) ? "webp"
                                                 : "unknown";
    const size_t n = strlen(b);
    char *uri = malloc(n + 40);
    if (!uri) return oom(ps->e);
    snprintf(uri, n + 40, "data:image/%s;base64,%s", type, b);
    const bool ok = srq_conv_image(cv, uri);
    free(uri);
    return ok;
}

static bool add_images(parse *ps, srq_conv *cv, const cJSON *imgs, const char *where) {
    if (!imgs || cJSON_IsNull(imgs)) return true;
    if (!cJSON_IsArray(imgs)) {
        srv_error_set(ps->e, 400, "invalid_request_error", NULL, "%s.images must be a list of base64 strings", where);
        return false;
    }
    const cJSON *img;
    cJSON_ArrayForEach(img, imgs) if (!add_image(ps, cv, img, where)) return false;
    return true;
}

/* An assistant message's tool_calls: [{function: {name, arguments: {...}}}] (an id, a type and the function's
 * index accepted; arguments as a JSON string too). */
static bool add_calls(parse *ps, srq_conv *cv, const cJSON *calls, const char *where) {
    if (!cJSON_IsArray(calls)) {
        srv_error_set(ps->e, 400, "invalid_request_error", NULL, "%s.tool_calls must be a list", where);
        return false;
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, calls) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        const cJSON *name = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "name") : NULL;
        const cJSON *args = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "arguments") : NULL;
        static const char *const known_call[] = {"id", "type", "function"}, *const known_fn[] = {"name", "arguments",
                                                                                                 "index"};
        char w[80];
        snprintf(w, sizeof w, "%s.tool_calls[]", where);
        if (!cJSON_IsObject(c)) return bad(ps->e, "%s must be objects", w);
        if (!srq_known(c, w, known_call, 3, ps->e)) return false;
        if (!cJSON_IsString(name) || !(cJSON_IsObject(args) || cJSON_IsString(args) || !args) ||
            (id && !cJSON_IsNull(id) && !cJSON_IsString(id)))
            return bad(ps->e, "%s must be {\"function\": {\"name\": ..., \"arguments\": {...}}}", w);
        snprintf(w, sizeof w, "%s.tool_calls[].function", where);
        if (!srq_known(f, w, known_fn, 3, ps->e)) return false;
        char *printed = cJSON_IsObject(args) ? cJSON_PrintUnformatted(args) : NULL;
        if (cJSON_IsObject(args) && !printed) return oom(ps->e);
        const bool ok = srq_conv_call(cv, cJSON_IsString(id) ? id->valuestring : NULL, name->valuestring,
                                      printed ? printed
                                      : args  ? args->valuestring
                                              : "{}");
        free(printed);
        if (!ok) return false;
    }
    return true;
}

static const char *string_of(parse *ps, const cJSON *o, const char *k, const char *where, bool *ok) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!*ok || !v || cJSON_IsNull(v)) return NULL;
    if (cJSON_IsString(v)) return v->valuestring;
    srv_error_set(ps->e, 400, "invalid_request_error", NULL, "%s.%s must be a string", where, k);
    *ok = false;
    return NULL;
}

/* One message of `messages`: {role, content, images, thinking, tool_calls, tool_name, tool_call_id}. */
static bool chat_message(parse *ps, srq_conv *cv, const cJSON *m, int i) {
    char where[32];
    snprintf(where, sizeof where, "messages[%d]", i);
    static const char *const known[] = {"role",       "content",   "images",      "thinking",
                                        "tool_calls", "tool_name", "tool_call_id"};
    if (!cJSON_IsObject(m)) return bad(ps->e, "%s must be an object", where);
    if (!srq_known(m, where, known, sizeof known / sizeof *known, ps->e)) return false;
    bool ok = true;
    const char *role = string_of(ps, m, "role", where, &ok), *content = string_of(ps, m, "content", where, &ok);
    const char *thinking = string_of(ps, m, "thinking", where, &ok), *tool = string_of(ps, m, "tool_name", where, &ok);
    const char *call_id = string_of(ps, m, "tool_call_id", where, &ok);
    if (!ok) return false;
    if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool"))) {
        srv_error_set(ps->e, 400, "invalid_request_error", NULL, "%s.role must be system, user, assistant or tool",
                      where);
        return false;
    }
    if (!strcmp(role, "system") && i > 0) return bad(ps->e, "%s: a system message may only come first", where);
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (!srq_conv_message(cv, role, where) ||
        !add_images(ps, cv, cJSON_GetObjectItemCaseSensitive(m, "images"), where) ||
        (content && !srq_conv_text(cv, content, strlen(content))))
        return false;
    if (calls && !cJSON_IsNull(calls) && !add_calls(ps, cv, calls, where)) return false;
    if ((tool || call_id) && !srq_conv_tool_result(cv, call_id, tool)) return false;
    return !thinking || srq_conv_reasoning(cv, thinking, strlen(thinking));
}

static bool chat_prompt(parse *ps, const cJSON *root) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    const int limit = srq_prompt_limit(ps->in->o, ps->in->n_ctx);
    if (!cJSON_IsArray(msgs)) return bad(ps->e, "'%s' must be a list of messages", "messages");
    if (cJSON_GetArraySize(msgs) > limit)
        return bad(ps->e, "'%s' has more entries than this server's context can hold", "messages");
    srq_conv *cv = srq_conv_new(ps->in, "messages", ps->e);
    bool ok = cv != NULL;
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        if (!(ok = ok && chat_message(ps, cv, m, i++))) break;
    }
    ok = ok && srq_conv_tokenize(cv, ps->rq, limit);
    srq_conv_free(cv);
    return ok;
}

/* /api/generate's prompt: a user turn (after `system`) in the chat format, images before the text; raw: the
 * text as it is (control-token texts parsed: the caller wrote the template). */
static bool generate_prompt(parse *ps, const cJSON *root) {
    bool ok = true, raw = false;
    const char *prompt = string_of(ps, root, "prompt", "body", &ok),
               *system = string_of(ps, root, "system", "body", &ok);
    const cJSON *imgs = cJSON_GetObjectItemCaseSensitive(root, "images");
    if (!ok || !srq_bool(root, "raw", NULL, &raw, ps->e)) return false;
    const int limit = srq_prompt_limit(ps->in->o, ps->in->n_ctx);
    if (raw) {
        if ((imgs && !cJSON_IsNull(imgs)) || (system && *system))
            return bad(ps->e, "%s: a raw prompt is sent as it is (write the system text and images into a chat request)",
                       "raw");
        const size_t len = prompt ? strlen(prompt) : 0;
        if (!len) return bad(ps->e, "the %s is empty", "prompt");
        if (!srq_bytes_fit(ps->in->tok, len, limit, ps->e)) return false;
        gm_error err = {0};
        size_t n = 0;
        if (gm_tokenize(ps->in->tok, prompt, len, gm_tokenizer_add_bos(ps->in->tok), true, &ps->rq->prompt, &n, &err)) {
            srv_error_set(ps->e, 400, "invalid_request_error", NULL, "prompt: %s", err.msg);
            return false;
        }
        ps->rq->n_prompt = (int)n;
        return true;
    }
    if ((!prompt || !*prompt) && empty_or_null(imgs)) return bad(ps->e, "the %s is empty", "prompt");
    srq_conv *cv = srq_conv_new(ps->in, "prompt", ps->e);
    ok = cv != NULL;
    if (ok && system && *system)
        ok = srq_conv_message(cv, "system", "system") && srq_conv_text(cv, system, strlen(system));
    ok = ok && srq_conv_message(cv, "user", "prompt") && add_images(ps, cv, imgs, "body") &&
         (!prompt || srq_conv_text(cv, prompt, strlen(prompt)));
    ok = ok && srq_conv_tokenize(cv, ps->rq, limit);
    srq_conv_free(cv);
    return ok;
}

/* ---------------------------------------------------------------- the request */

/* Fields of generate the server cannot honour, refused with why (given empty they ask for nothing). */
static bool generate_refusals(parse *ps, const cJSON *root) {
    if (!empty_or_null(cJSON_GetObjectItemCaseSensitive(root, "suffix")))
        return bad(ps->e, "'%s' is not supported: Gemma has no fill-in-the-middle format", "suffix");
    if (!empty_or_null(cJSON_GetObjectItemCaseSensitive(root, "context")))
        return bad(ps->e, "'%s' is not supported: send the conversation as messages to /api/chat", "context");
    if (!empty_or_null(cJSON_GetObjectItemCaseSensitive(root, "template")))
        return bad(ps->e, "'%s' is not supported: the model's chat format is used (or raw: true)", "template");
    return true;
}

static bool known_fields(parse *ps, const cJSON *root) {
    static const char *const chat[] = {"model",  "messages",   "tools", "format",   "options",
                                       "stream", "keep_alive", "think", "logprobs", "top_logprobs"};
    static const char *const gen[] = {"model",  "prompt",     "system",   "raw",      "images",
                                      "suffix", "context",    "template", "format",   "options",
                                      "stream", "keep_alive", "think",    "logprobs", "top_logprobs"};
    const bool is_chat = ps->q->kind == OLL_CHAT;
    return srq_known(root, NULL, is_chat ? chat : gen, is_chat ? sizeof chat / sizeof *chat : sizeof gen / sizeof *gen,
                     ps->e);
}

static bool parse_body(parse *ps, const char *body, size_t len) {
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) return bad(ps->e, "the body is not valid JSON (%s)", "parse error");
    const cJSON *opts = cJSON_GetObjectItemCaseSensitive(root, "options");
    bool ok = cJSON_IsObject(root) || bad(ps->e, "the body must be a JSON %s", "object");
    ok = ok && known_fields(ps, root) && ollama_model_ok(root, ps->in->model, ps->q->model, sizeof ps->q->model, ps->e);
    if (ok && opts && !cJSON_IsNull(opts) && !cJSON_IsObject(opts))
        ok = bad(ps->e, "'%s' must be an object", "options");
    if (opts && !cJSON_IsObject(opts)) opts = NULL;
    ok = ok && think_field(ps, root) && other_fields(ps, root) && sampling(ps, opts) && format_field(ps, root);
    if (ps->q->kind == OLL_CHAT) {
        ok = ok && openai_tools_parse(root, ps->in->tok, ps->rq, ps->e) && chat_prompt(ps, root);
    } else {
        ok = ok && generate_refusals(ps, root) && generate_prompt(ps, root);
    }
    ok = ok && limits(ps, opts);
    cJSON_Delete(root);
    return ok;
}

static void free_call(void *call) { free(call); }

static void *parse_call(const gen_call_in *in, gen_request *rq, srv_error *e, oll_kind kind) {
    oll_call *q = calloc(1, sizeof *q);
    if (!q) return oom(e), NULL;
    q->kind = kind;
    parse ps = {rq, q, e, in};
    rq->n = 1;
    if (!parse_body(&ps, in->body ? in->body : "", in->len)) {
        free(q);
        return NULL;
    }
    return q;
}

static void *parse_chat(const gen_call_in *in, gen_request *rq, srv_error *e) {
    return parse_call(in, rq, e, OLL_CHAT);
}
static void *parse_generate(const gen_call_in *in, gen_request *rq, srv_error *e) {
    return parse_call(in, rq, e, OLL_GENERATE);
}

/* ---------------------------------------------------------------- answers */

static cJSON *envelope(const oll_call *q) {
    cJSON *o = cJSON_CreateObject();
    char now[48];
    rfc3339_now(now, sizeof now);
    cJSON_AddStringToObject(o, "model", q->model);
    cJSON_AddStringToObject(o, "created_at", now);
    return o;
}

/* Ollama's message (chat) or response field (generate) holding text. */
static cJSON *add_text(const oll_call *q, cJSON *o, const char *s, size_t n) {
    if (q->kind == OLL_GENERATE) {
        cJSON_AddItemToObject(o, "response", text_item(s, n));
        return o;
    }
    cJSON *m = cJSON_AddObjectToObject(o, "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddItemToObject(m, "content", text_item(s, n));
    return m;
}

/* A call with its arguments as a JSON object (the parser checked them: an object's text). */
static cJSON *call_json(const char *name, const char *args, int index) {
    cJSON *c = cJSON_CreateObject(), *f = cJSON_AddObjectToObject(c, "function");
    cJSON_AddNumberToObject(f, "index", index);
    cJSON_AddStringToObject(f, "name", name);
    cJSON *a = cJSON_Parse(args);
    cJSON_AddItemToObject(f, "arguments", cJSON_IsObject(a) ? a : cJSON_CreateObject());
    if (a && !cJSON_IsObject(a)) cJSON_Delete(a);
    return c;
}

static int64_t ns(double seconds) { return seconds > 0 ? (int64_t)llround(seconds * 1e9) : 0; }

/* done, done_reason and the counters. prompt_eval_duration runs from the request's arrival to its prompt
 * computed (the queue included); eval_duration from then to now; nothing is loaded per request. */
static void add_done(cJSON *o, gen_finish f, int n_prompt, int gen, double t_submit, double t_started) {
    const double now = srv_now();
    if (t_started <= 0) t_started = now;
    cJSON_AddBoolToObject(o, "done", true);
    cJSON_AddStringToObject(o, "done_reason", gen_finish_is_length(f) ? "length" : "stop");
    cJSON_AddNumberToObject(o, "total_duration", (double)ns(now - t_submit));
    cJSON_AddNumberToObject(o, "load_duration", 0);
    cJSON_AddNumberToObject(o, "prompt_eval_count", n_prompt);
    cJSON_AddNumberToObject(o, "prompt_eval_duration", (double)ns(t_started - t_submit));
    cJSON_AddNumberToObject(o, "eval_count", gen);
    cJSON_AddNumberToObject(o, "eval_duration", (double)ns(now - t_started));
}

static char *response(const void *call, const job *j, const gm_tokenizer *tok) {
    (void)tok;
    const oll_call *q = call;
    const gen_session *g = &j->gen[0];
    cJSON *o = envelope(q), *m = add_text(q, o, g->text, g->len);
    size_t rl = 0;
    const char *r = g->tp ? gm_tool_parser_reasoning(g->tp, &rl) : "";
    if (rl) cJSON_AddItemToObject(m, "thinking", text_item(r, rl));
    const int n = gen_session_n_calls(g);
    cJSON *calls = n ? cJSON_AddArrayToObject(m, "tool_calls") : NULL;
    for (int i = 0; i < n; i++) {
        const char *name = NULL, *args = NULL;
        gm_tool_parser_call(g->tp, (size_t)i, &name, &args);
        cJSON_AddItemToArray(calls, call_json(name, args, i));
    }
    add_done(o, g->finish, j->rq.n_prompt, job_generated(j), j->t_submit, j->t_started);
    return print_free(o);
}

static void put_line(srv_buf *out, cJSON *o) {
    char *s = print_free(o);
    if (s) srv_buf_put(out, s, strlen(s)), srv_buf_put(out, "\n", 1);
    free(s);
}

/* NDJSON: a line per piece of text or tool call, then the last line with done and the counters; an error
 * after the 200 as a line {"error": ...}, then the end. The call's finish is this stream's own state (one
 * connection thread renders it). */
static void render(const void *call, const stream_view *v, const gm_tokenizer *tok, srv_buf *out) {
    (void)tok;
    oll_call *q = (oll_call *)call;
    if (v->err) {
        srv_error e;
        srv_error_set(&e, 500, "server_error", NULL, "%s", v->err_msg);
        char *s = ollama_error_json(&e);
        if (s) srv_buf_put(out, s, strlen(s)), srv_buf_put(out, "\n", 1);
        free(s);
        return;
    }
    for (int k = 0; k < v->n_pieces; k++) {
        const stream_piece *pc = &v->piece[k];
        if (pc->finish) q->finish = pc->finish;
        if (pc->reason_n && v->text) { /* thoughts (Gemma 4): a line of their own */
            cJSON *o = envelope(q), *m = add_text(q, o, "", 0);
            cJSON_AddItemToObject(m, "thinking", text_item(v->text + pc->reason_off, pc->reason_n));
            cJSON_AddBoolToObject(o, "done", false);
            put_line(out, o);
        }
        if (pc->call >= 0) {
            const char *id = v->text + pc->call_off, *name = id + strlen(id) + 1, *args = name + strlen(name) + 1;
            cJSON *o = envelope(q), *m = add_text(q, o, "", 0);
            cJSON_AddItemToArray(cJSON_AddArrayToObject(m, "tool_calls"), call_json(name, args, pc->call));
            cJSON_AddBoolToObject(o, "done", false);
            put_line(out, o);
        } else if (pc->has_text && pc->text_n && v->text) {
            cJSON *o = envelope(q);
            add_text(q, o, v->text + pc->text_off, pc->text_n);
            cJSON_AddBoolToObject(o, "done", false);
            put_line(out, o);
        }
    }
    if (!v->end) return;
    cJSON *o = envelope(q);
    add_text(q, o, "", 0);
    add_done(o, q->finish, v->n_prompt, v->gen, v->t_submit, v->t_started);
    put_line(out, o);
}

/* A keep-alive its readers take as an empty piece (the official clients parse every line as JSON). */
const gen_endpoint ollama_chat = {parse_chat,
                                  response,
                                  render,
                                  "application/x-ndjson",
                                  "{\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":false}\n",
                                  free_call};
const gen_endpoint ollama_generate = {
    parse_generate, response, render, "application/x-ndjson", "{\"response\":\"\",\"done\":false}\n", free_call};

/* ---------------------------------------------------------------- load requests */

char *ollama_load_reply(const ollama_facts *f, const char *body, size_t len, bool generate) {
    if (len > 4096) return NULL; /* a load request is small; anything larger is read by the endpoint */
    cJSON *root = cJSON_ParseWithLength(body ? body : "", len);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, generate ? "prompt" : "messages");
    const cJSON *imgs = cJSON_GetObjectItemCaseSensitive(root, "images");
    const cJSON *ka = cJSON_GetObjectItemCaseSensitive(root, "keep_alive");
    oll_call q = {.kind = generate ? OLL_GENERATE : OLL_CHAT};
    srv_error e;
    const bool load = cJSON_IsObject(root) && empty_or_null(p) && (!generate || empty_or_null(imgs)) &&
                      ollama_model_ok(root, f->id, q.model, sizeof q.model, &e);
    const bool unload = load && ((cJSON_IsNumber(ka) && ka->valuedouble == 0) ||
                                 (cJSON_IsString(ka) && !strcmp(ka->valuestring, "0")));
    cJSON_Delete(root);
    if (!load) return NULL;
    cJSON *o = envelope(&q);
    add_text(&q, o, "", 0);
    cJSON_AddBoolToObject(o, "done", true);
    cJSON_AddStringToObject(o, "done_reason", unload ? "unload" : "load"); /* the server keeps its model either way */
    return print_free(o);
}
