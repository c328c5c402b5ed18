/* server/request.c — the protocol-neutral steps of reading a generation request, shared by every wire
 * format's parser (OpenAI chat and completions, Responses, Anthropic Messages, Ollama): checked field
 * readers, stop strings, structured output, declared tools and the tool choice, and a conversation built
 * message by message and tokenized in the model's chat format with its images in place. Each protocol
 * walks its own JSON and names its own fields in errors; what a request *means* is decided here once, so
 * the same conversation asked through two protocols is one prompt, one grammar and one sampler. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "gemma_chat.h"
#include "gemma_grammar.h"
#include "gemma_vision.h"

enum { MAX_TOOLS = 128, MAX_MESSAGES = 4096 };

static bool oom(srv_error *e) {
    srv_error_set(e, 500, "server_error", NULL, "out of memory");
    return false;
}

/* ---------------------------------------------------------------- field readers */

static const char *label(const char *path, const char *name) { return path ? path : name; }

bool srq_num(const cJSON *o, const char *name, const char *path, double lo, double hi, bool integral, double *out,
             srv_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsNumber(v)) return srq_bad(e, "'%s' must be a number", label(path, name));
    const double x = v->valuedouble;
    if (!isfinite(x) || x < lo || x > hi) {
        srv_error_set(e, 400, "invalid_request_error", NULL, "'%s' is %g; it must be in [%g, %g]", label(path, name), x,
                      lo, hi);
        return false;
    }
    if (integral && x != floor(x)) return srq_bad(e, "'%s' must be a whole number", label(path, name));
    *out = x;
    return true;
}

bool srq_int(const cJSON *o, const char *name, const char *path, int lo, int hi, int *out, srv_error *e) {
    double x = *out;
    if (!srq_num(o, name, path, lo, hi, true, &x, e)) return false;
    *out = (int)x;
    return true;
}

bool srq_float(const cJSON *o, const char *name, const char *path, double lo, double hi, float *out, srv_error *e) {
    double x = *out;
    if (!srq_num(o, name, path, lo, hi, false, &x, e)) return false;
    *out = (float)x;
    return true;
}

bool srq_bool(const cJSON *o, const char *name, const char *path, bool *out, srv_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsBool(v)) return srq_bad(e, "'%s' must be true or false", label(path, name));
    *out = cJSON_IsTrue(v);
    return true;
}

bool srq_bad(srv_error *e, const char *fmt, const char *field) {
    srv_error_set(e, 400, "invalid_request_error", NULL, fmt, field);
    return false;
}

bool srq_known(const cJSON *obj, const char *where, const char *const *known, size_t n, srv_error *e) {
    const cJSON *f;
    cJSON_ArrayForEach(f, obj) {
        bool ok = cJSON_IsNull(f);
        for (size_t k = 0; !ok && k < n; k++) ok = !strcmp(f->string, known[k]);
        if (ok) continue;
        srv_error_set(e, 400, "invalid_request_error", "unsupported_field", "%s%s%.60s is not supported by this server",
                      where ? where : "", where ? "." : "", f->string);
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- sampling, stop strings */

bool srq_sampling_check(gen_request *rq, srv_error *e) {
    gm_sampling *s = &rq->smp;
    if (s->top_p == 0) { /* the limit of a nucleus that shrinks to the best token */
        s->top_p = 1;
        s->temperature = 0;
    }
    gm_error err = {0};
    if (gm_sampling_validate(s, &err)) return srq_bad(e, "%s", err.msg);
    return true;
}

bool srq_stop(gen_request *rq, const char *field, const char *s, srv_error *e) {
    if (rq->n_stop >= SRV_MAX_STOP) {
        srv_error_set(e, 400, "invalid_request_error", NULL, "'%s' has more than %d entries", field, SRV_MAX_STOP);
        return false;
    }
    const size_t len = strlen(s);
    if (len == 0 || len > SRV_MAX_STOP_LEN) {
        srv_error_set(e, 400, "invalid_request_error", NULL, "each '%s' string must have 1 to %d bytes", field,
                      SRV_MAX_STOP_LEN);
        return false;
    }
    if (!(rq->stop[rq->n_stop] = strdup(s))) return oom(e);
    rq->n_stop++;
    return true;
}

/* ---------------------------------------------------------------- structured output */

static bool compile_failed(srv_error *e, const char *field, const gm_error *err) {
    srv_error_set(e, 400, "invalid_request_error", err->code == GM_ERR_UNSUPPORTED ? "unsupported_schema" : field,
                  "%s: %s", field, err->msg);
    return false;
}

static bool one_grammar(const gen_request *rq, const char *field, srv_error *e) {
    if (!rq->grammar) return true;
    srv_error_set(e, 400, "invalid_request_error", NULL, "'%s': the request is already constrained by another field",
                  field);
    return false;
}

bool srq_schema_text(gen_request *rq, const char *field, const char *text, srv_error *e) {
    if (!one_grammar(rq, field, e)) return false;
    gm_error err = {0};
    if (gm_grammar_from_json_schema(text, strlen(text), NULL, &rq->grammar, &err)) return compile_failed(e, field, &err);
    return true;
}

bool srq_schema(gen_request *rq, const char *field, const cJSON *schema, srv_error *e) {
    if (!schema) return srq_schema_text(rq, field, "{\"type\": \"object\"}", e); /* any object */
    char *text = cJSON_PrintUnformatted(schema);
    if (!text) return oom(e);
    const bool ok = srq_schema_text(rq, field, text, e);
    free(text);
    return ok;
}

bool srq_gbnf(gen_request *rq, const char *field, const char *text, srv_error *e) {
    if (!one_grammar(rq, field, e)) return false;
    gm_error err = {0};
    if (gm_grammar_from_gbnf(text, strlen(text), &rq->grammar, &err)) return compile_failed(e, field, &err);
    return true;
}

/* ---------------------------------------------------------------- tools */

/* OpenAI's rule for function names: letters, digits, underscores and dashes, 1 to 64 (dots too, as
 * llama.cpp and vLLM accept them). Anthropic's is the same without dots. */
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

bool srq_tool(gen_request *rq, const char *where, const char *name, const char *description, const cJSON *parameters,
              srv_error *e) {
    if (rq->n_tools >= MAX_TOOLS) {
        srv_error_set(e, 400, "invalid_request_error", NULL, "%s: more than %d functions are declared", where, MAX_TOOLS);
        return false;
    }
    if (!name || !good_name(name)) {
        srv_error_set(e, 400, "invalid_request_error", NULL, "%s: the name must be 1 to 64 letters, digits, '_', '-' or '.'",
                      where);
        return false;
    }
    if (parameters && !cJSON_IsNull(parameters) && !cJSON_IsObject(parameters)) {
        srv_error_set(e, 400, "invalid_request_error", NULL, "%s: the parameters must be a JSON schema object", where);
        return false;
    }
    for (int k = 0; k < rq->n_tools; k++)
        if (!strcmp(rq->tools[k].name, name)) {
            srv_error_set(e, 400, "invalid_request_error", NULL, "tools: the function '%.64s' is declared twice", name);
            return false;
        }
    gm_tool *t = realloc(rq->tools, (size_t)(rq->n_tools + 1) * sizeof *t);
    if (!t) return oom(e);
    rq->tools = t;
    gm_tool *d = &t[rq->n_tools];
    *d = (gm_tool){0};
    rq->n_tools++; /* counted at once: gen_request_clear frees what was copied */
    d->name = strdup(name);
    d->description = description ? strdup(description) : NULL;
    d->parameters = cJSON_IsObject(parameters) ? cJSON_PrintUnformatted(parameters) : NULL;
    if (!d->name || (description && !d->description) || (cJSON_IsObject(parameters) && !d->parameters)) return oom(e);
    return true;
}

bool srq_tool_choice(gen_request *rq, const gm_tokenizer *tok, tool_mode mode, const char *named, bool parallel,
                     srv_error *e) {
    if (mode == TOOLS_NAMED) {
        bool found = false;
        for (int i = 0; i < rq->n_tools && !found; i++) found = !strcmp(rq->tools[i].name, named);
        if (!found) {
            srv_error_set(e, 400, "invalid_request_error", NULL, "tool_choice names '%.64s', which is not in tools", named);
            return false;
        }
    }
    if (mode == TOOLS_AUTO && !rq->n_tools) mode = TOOLS_NONE; /* nothing to call: what "auto" means then */
    if (mode != TOOLS_NONE && !rq->n_tools) return srq_bad(e, "tool_choice '%s' needs tools", "required");
    rq->tool_mode = mode;
    rq->parallel_tool_calls = parallel;
    if (mode == TOOLS_NONE) return true; /* declared but not to be called: the prompt does not offer them */
    const gm_tool_format tf = gm_tokenizer_tool_format(tok);
    if (tf == GM_TOOLS_NONE)
        return srq_bad(e, "this model's vocabulary has no tool-call format (%s)", "Gemma 4 turns without its tool tokens");
    if (rq->grammar) return srq_bad(e, "give either tools or a structured output format (%s)", "not both");
    if (mode == TOOLS_REQUIRED || mode == TOOLS_NAMED) {
        gm_error err = {0};
        if (gm_tool_grammar(tok, rq->tools, (size_t)rq->n_tools, named, parallel, &rq->grammar, &err)) {
            srv_error_set(e, 400, "invalid_request_error", err.code == GM_ERR_UNSUPPORTED ? "unsupported_schema" : NULL,
                          "tools: %s", err.msg);
            return false;
        }
        rq->grammar_markers = tf != GM_TOOLS_GEMMA3;
    }
    return true;
}

/* ---------------------------------------------------------------- conversations */

typedef struct conv_msg {
    char *role;
    char *text;
    size_t len, cap;
    gm_tool_call *calls;
    size_t n_calls;
    char *tool_call_id, *name, *reasoning;
    char where[48];         /* the protocol's name for it, in errors */
    int first_img, n_img;   /* its images in the conversation's list */
} conv_msg;

struct srq_conv {
    const gen_call_in *in;
    srv_error *e;
    char field[24];         /* the protocol's field holding the conversation ("messages", "input") */
    conv_msg *m;
    int n, cap;
    gm_vision_rows *img;    /* the images in order, each at byte img_at of its message's text */
    size_t *img_at;
    int n_img, cap_img;
    size_t bytes;
};

srq_conv *srq_conv_new(const gen_call_in *in, const char *field, srv_error *e) {
    srq_conv *c = calloc(1, sizeof *c);
    if (!c) return oom(e), NULL;
    c->in = in;
    c->e = e;
    snprintf(c->field, sizeof c->field, "%s", field);
    return c;
}

static void msg_free(conv_msg *m) {
    for (size_t k = 0; k < m->n_calls; k++) {
        free((char *)m->calls[k].id);
        free((char *)m->calls[k].name);
        free((char *)m->calls[k].arguments);
    }
    free(m->calls);
    free(m->role), free(m->text), free(m->tool_call_id), free(m->name), free(m->reasoning);
}

void srq_conv_free(srq_conv *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) msg_free(&c->m[i]);
    for (int i = 0; i < c->n_img; i++) gm_vision_rows_free(&c->img[i]); /* not taken by a request: a failure */
    free(c->m), free(c->img), free(c->img_at), free(c);
}

int srq_conv_count(const srq_conv *c) { return c->n; }

const char *srq_conv_role(const srq_conv *c) { return c->n ? c->m[c->n - 1].role : NULL; }

bool srq_conv_message(srq_conv *c, const char *role, const char *where) {
    if (c->n >= MAX_MESSAGES) return srq_bad(c->e, "'%s' has more entries than this server can take", c->field);
    if (c->n == c->cap) {
        const int cap = c->cap ? 2 * c->cap : 8;
        conv_msg *m = realloc(c->m, (size_t)cap * sizeof *m);
        if (!m) return oom(c->e);
        c->m = m, c->cap = cap;
    }
    conv_msg *m = &c->m[c->n];
    *m = (conv_msg){.first_img = c->n_img};
    snprintf(m->where, sizeof m->where, "%s", where);
    if (!(m->role = strdup(role)) || !(m->text = malloc(1))) {
        free(m->role);
        return oom(c->e);
    }
    m->text[0] = 0;
    m->cap = 1;
    c->n++;
    return true;
}

static conv_msg *last(srq_conv *c) { return c->n ? &c->m[c->n - 1] : NULL; }

bool srq_conv_text(srq_conv *c, const char *s, size_t n) {
    conv_msg *m = last(c);
    if (!m) return srq_bad(c->e, "%s: text outside a message", c->field);
    if (m->len + n + 1 > m->cap) {
        size_t cap = m->cap * 2 > m->len + n + 1 ? m->cap * 2 : m->len + n + 1;
        char *t = realloc(m->text, cap);
        if (!t) return oom(c->e);
        m->text = t, m->cap = cap;
    }
    memcpy(m->text + m->len, s, n);
    m->len += n;
    m->text[m->len] = 0;
    c->bytes += n;
    return true;
}

bool srq_conv_image(srq_conv *c, const char *url) {
    conv_msg *m = last(c);
    if (!m || strcmp(m->role, "user")) {
        srv_error_set(c->e, 400, "invalid_request_error", NULL, "%s: only user messages may hold images",
                      m ? m->where : c->field);
        return false;
    }
    const srv_options *o = c->in->o;
    if (c->in->media && c->n_img >= o->max_images) {
        srv_error_set(c->e, 400, "invalid_request_error", "too_many_images", "the request has more than %d images "
                      "(--max-images)", o->max_images);
        return false;
    }
    if (c->n_img == c->cap_img) {
        const int cap = c->cap_img ? 2 * c->cap_img : 4;
        gm_vision_rows *im = realloc(c->img, (size_t)cap * sizeof *im);
        if (im) c->img = im;
        size_t *a = im ? realloc(c->img_at, (size_t)cap * sizeof *a) : NULL;
        if (!a) return oom(c->e);
        c->img_at = a, c->cap_img = cap;
    }
    if (!media_load(c->in->media, url, o->max_body, &c->img[c->n_img], c->e)) return false;
    c->img_at[c->n_img++] = m->len;
    m->n_img++;
    return true;
}

bool srq_conv_call(srq_conv *c, const char *id, const char *name, const char *arguments) {
    conv_msg *m = last(c);
    if (!m || strcmp(m->role, "assistant")) {
        srv_error_set(c->e, 400, "invalid_request_error", NULL, "%s: only assistant messages carry tool calls",
                      m ? m->where : c->field);
        return false;
    }
    if (m->n_calls >= MAX_TOOLS) {
        srv_error_set(c->e, 400, "invalid_request_error", NULL, "%s: more than %d tool calls", m->where, MAX_TOOLS);
        return false;
    }
    gm_tool_call *t = realloc(m->calls, (m->n_calls + 1) * sizeof *t);
    if (!t) return oom(c->e);
    m->calls = t;
    gm_tool_call *d = &t[m->n_calls++];
    d->id = id ? strdup(id) : NULL;
    d->name = strdup(name);
    d->arguments = strdup(arguments);
    if ((id && !d->id) || !d->name || !d->arguments) return oom(c->e);
    return true;
}

static bool set_str(srq_conv *c, char **dst, const char *s) {
    free(*dst);
    *dst = NULL;
    if (s && !(*dst = strdup(s))) return oom(c->e);
    return true;
}

bool srq_conv_tool_result(srq_conv *c, const char *tool_call_id, const char *name) {
    conv_msg *m = last(c);
    if (!m) return srq_bad(c->e, "%s: a tool result outside a message", c->field);
    return set_str(c, &m->tool_call_id, tool_call_id) && set_str(c, &m->name, name);
}

bool srq_conv_reasoning(srq_conv *c, const char *s, size_t n) {
    conv_msg *m = last(c);
    if (!m) return srq_bad(c->e, "%s: reasoning outside a message", c->field);
    const size_t have = m->reasoning ? strlen(m->reasoning) : 0;
    char *r = realloc(m->reasoning, have + n + 1);
    if (!r) return oom(c->e);
    memcpy(r + have, s, n);
    r[have + n] = 0;
    m->reasoning = r;
    return true;
}

/* A prompt of B bytes has at least B / k tokens (k: the most bytes one token covers): one that cannot fit
 * is refused before it is tokenized, so a huge body costs a scan, not a tokenization. */
bool srq_bytes_fit(const gm_tokenizer *tok, size_t bytes, int limit, srv_error *e) {
    const size_t k = gm_tokenizer_max_token_bytes(tok);
    if (k == 0 || bytes / k <= (size_t)limit) return true;
    srv_error_set(e, 400, "invalid_request_error", "context_length_exceeded",
                  "the prompt has at least %zu tokens (%zu bytes); this server takes at most %d", bytes / k, bytes, limit);
    return false;
}

/* The ids with each image's rows in place: n_rows placeholders where the chat tokenizer put the image
 * (image_pos), and rq->images / rq->image_pos taking the conversation's images. */
static bool place_images(srq_conv *c, gen_request *rq, const size_t *image_pos) {
    if (c->n_img == 0) return true;
    int64_t total = rq->n_prompt;
    for (int i = 0; i < c->n_img; i++) total += c->img[i].n_rows;
    if (total > INT32_MAX / 2) return srq_bad(c->e, "the %s is too long", "prompt");
    int32_t *ids = malloc((size_t)total * sizeof *ids);
    int *pos = malloc((size_t)c->n_img * sizeof *pos);
    if (!ids || !pos) {
        free(ids), free(pos);
        return oom(c->e);
    }
    rq->image_placeholder = media_placeholder(c->in->media);
    size_t from = 0;
    int w = 0;
    for (int i = 0; i < c->n_img; i++) {
        memcpy(ids + w, rq->prompt + from, (image_pos[i] - from) * sizeof *ids);
        w += (int)(image_pos[i] - from);
        pos[i] = w;
        for (int r = 0; r < c->img[i].n_rows; r++) ids[w++] = rq->image_placeholder;
        from = image_pos[i];
    }
    memcpy(ids + w, rq->prompt + from, ((size_t)rq->n_prompt - from) * sizeof *ids);
    free(rq->prompt);
    rq->prompt = ids;
    rq->n_prompt = (int)total;
    rq->images = c->img, rq->image_pos = pos, rq->n_images = c->n_img;
    c->img = NULL, c->n_img = c->cap_img = 0;
    return true;
}

/* The chat library's view of the messages (pointers into c). */
static gm_chat_message *chat_messages(srq_conv *c) {
    gm_chat_message *m = calloc((size_t)c->n, sizeof *m);
    for (int i = 0; m && i < c->n; i++) {
        const conv_msg *s = &c->m[i];
        const bool assistant = !strcmp(s->role, "assistant");
        m[i] = (gm_chat_message){.role = s->role, .content = s->text, .tool_calls = s->calls, .n_tool_calls = s->n_calls,
                                 .tool_call_id = s->tool_call_id,
                                 .name = !strcmp(s->role, "tool") ? s->name : NULL, /* a speaker's name is not rendered */
                                 .reasoning = assistant ? s->reasoning : NULL,
                                 .image_at = s->n_img ? c->img_at + s->first_img : NULL, .n_images = (size_t)s->n_img};
    }
    return m;
}

bool srq_conv_tokenize(srq_conv *c, gen_request *rq, int limit) {
    if (c->n == 0) return srq_bad(c->e, "'%s' is empty", c->field);
    if (c->n > limit) return srq_bad(c->e, "'%s' has more entries than this server's context can hold", c->field);
    if (!srq_bytes_fit(c->in->tok, c->bytes, limit, c->e)) return false;
    gm_chat_message *m = chat_messages(c);
    size_t *image_pos = c->n_img ? malloc((size_t)c->n_img * sizeof *image_pos) : NULL;
    bool ok = m && (!c->n_img || image_pos);
    if (!ok) oom(c->e);
    if (ok) {
        gm_error err = {0};
        size_t nid = 0;
        const bool offer = rq->tool_mode != TOOLS_NONE; /* tool_choice none: the tools are not offered */
        const gm_chat_options co = {.add_generation_prompt = true, .tools = offer ? rq->tools : NULL,
                                    .n_tools = offer ? (size_t)rq->n_tools : 0, .image_pos = image_pos,
                                    .n_image_pos = (size_t)c->n_img};
        if (gm_chat_tokenize(c->in->tok, m, (size_t)c->n, &co, &rq->prompt, &nid, &err)) {
            srv_error_set(c->e, err.code == GM_ERR_NOMEM ? 500 : 400, "invalid_request_error", NULL, "%s: %s", c->field,
                          err.msg);
            ok = false;
        }
        rq->n_prompt = (int)nid;
    }
    ok = ok && place_images(c, rq, image_pos);
    free(image_pos);
    free(m);
    return ok;
}

/* ---------------------------------------------------------------- limits */

int srq_prompt_limit(const srv_options *o, int n_ctx) { return n_ctx - 1 < o->max_prompt ? n_ctx - 1 : o->max_prompt; }

bool srq_fits(const srv_options *o, int n_ctx, int n_prompt, int max_tokens, srv_error *e) {
    if (n_prompt == 0) return srq_bad(e, "the %s is empty", "prompt");
    if (n_prompt > o->max_prompt || n_prompt >= n_ctx) {
        srv_error_set(e, 400, "invalid_request_error", "context_length_exceeded",
                      "the prompt has %d tokens; this server takes at most %d (context %d, --max-prompt %d)", n_prompt,
                      srq_prompt_limit(o, n_ctx), n_ctx, o->max_prompt);
        return false;
    }
    if (max_tokens && n_prompt + max_tokens > n_ctx) {
        srv_error_set(e, 400, "invalid_request_error", "context_length_exceeded",
                      "this model's context is %d tokens; the prompt (%d) plus max_tokens (%d) would exceed it", n_ctx,
                      n_prompt, max_tokens);
        return false;
    }
    return true;
}
