/* server/openai.c — the OpenAI wire format, /v1/chat/completions and /v1/completions as two
 * gen_endpoints: request bodies into gen_requests (every field checked: a wrong type or an out-of-range
 * value is a 400 naming the field, never a default silently used; so is a field the server does not read,
 * as OpenAI's API answers one it does not know), and a job's generation sessions into responses and
 * Server-Sent Events chunks (finish reasons, field names and framing are this file's alone). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"
#include "gemma_chat.h"
#include "gemma_grammar.h"
#include "gemma_vision.h"

typedef enum { CALL_CHAT, CALL_COMPLETION } call_kind;

/* What answering needs besides the request and the job: this wire format's own fields. */
typedef struct openai_call {
    call_kind kind;
    bool include_usage;     /* stream_options.include_usage */
    char id[48];
    long created;
    const char *model;
    const char *fingerprint; /* system_fingerprint: the replica id */
    bool echo;              /* completions: each choice's text starts with its prompt's */
    char *echo_text[SRV_MAX_N]; /* by prompt group */
    int per_group;          /* choices per prompt group */
} openai_call;

static void free_call(void *call) {
    openai_call *q = call;
    for (int g = 0; q && g < SRV_MAX_N; g++) free(q->echo_text[g]);
    free(q);
}

/* A body being read into a request. */
typedef struct parse {
    gen_request *rq;
    openai_call *q;
    srv_error *e;
    const gen_call_in *in;
} parse;

/* ---------------------------------------------------------------- field readers */

static bool bad(parse *ps, const char *fmt, const char *field) { return srq_bad(ps->e, fmt, field); }

/* A number field in [lo, hi] (whole when integral); absent or null keeps *out. */
static bool get_num(parse *ps, const cJSON *o, const char *name, double lo, double hi, bool integral, double *out) {
    return srq_num(o, name, NULL, lo, hi, integral, out, ps->e);
}

static bool get_int(parse *ps, const cJSON *o, const char *name, int lo, int hi, int *out) {
    return srq_int(o, name, NULL, lo, hi, out, ps->e);
}

static bool get_float(parse *ps, const cJSON *o, const char *name, double lo, double hi, float *out) {
    return srq_float(o, name, NULL, lo, hi, out, ps->e);
}

static bool get_bool(parse *ps, const cJSON *o, const char *name, bool *out) { return srq_bool(o, name, NULL, out, ps->e); }

/* A JSON number that is a token id in [0, V): checked as a double before any conversion (a cast of
 * 1e300 to an integer is undefined). */
bool srv_token_id(const cJSON *e, int V, int32_t *out) {
    if (!cJSON_IsNumber(e)) return false;
    const double x = e->valuedouble;
    if (!(x >= 0 && x < (double)V) || x != floor(x)) return false;
    *out = (int32_t)x;
    return true;
}

/* "stop": a string or a list of strings, each non-empty. */
static bool get_stop(parse *ps, const cJSON *o) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "stop");
    if (!v || cJSON_IsNull(v)) return true;
    const int n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0) return bad(ps, "'%s' must be a string or a list of strings", "stop");
    if (n > SRV_MAX_STOP) {
        srv_error_set(ps->e, 400, "invalid_request_error", NULL, "'stop' has %d entries; at most %d", n, SRV_MAX_STOP);
        return false;
    }
    const cJSON *s = cJSON_IsString(v) ? v : v->child; /* walked once, not by index */
    for (int i = 0; i < n; i++, s = s->next) {
        if (!cJSON_IsString(s)) return bad(ps, "'%s' must be a string or a list of strings", "stop");
        if (!srq_stop(ps->rq, "stop", s->valuestring, ps->e)) return false;
    }
    return true;
}

/* ---------------------------------------------------------------- prompts */

/* An image_url part's URL: {"image_url": {"url": "...", "detail": ...}} or {"image_url": "..."}. */
static const char *image_url_of(parse *ps, const cJSON *part, int idx) {
    const cJSON *iu = cJSON_GetObjectItemCaseSensitive(part, "image_url");
    const cJSON *url = cJSON_IsObject(iu) ? cJSON_GetObjectItemCaseSensitive(iu, "url") : iu;
    if (!cJSON_IsString(url)) {
        srv_error_set(ps->e, 400, "invalid_request_error", NULL, "messages[%d].content: an image_url part needs "
                      "image_url.url (a string)", idx);
        return NULL;
    }
    const cJSON *f;
    const cJSON *fields = cJSON_IsObject(iu) ? iu : NULL;
    cJSON_ArrayForEach(f, fields) {
        if (strcmp(f->string, "url") && strcmp(f->string, "detail")) {
            srv_error_set(ps->e, 400, "invalid_request_error", "unsupported_field",
                          "messages[%d].content: image_url.%.40s is not supported", idx, f->string);
            return NULL;
        }
    }
    return url->valuestring;
}

/* A message's content into the conversation's last message: a string, null (an assistant turn without
 * text) or a list of parts: text, and image_url when the server has a vision encoder (each image at its
 * place in the text). */
static bool message_content(parse *ps, srq_conv *cv, const cJSON *content, int idx) {
    if (!content || cJSON_IsNull(content)) return true;
    if (cJSON_IsString(content)) return srq_conv_text(cv, content->valuestring, strlen(content->valuestring));
    if (!cJSON_IsArray(content)) {
        srv_error_set(ps->e, 400, "invalid_request_error", NULL, "messages[%d].content must be a string or a list of parts", idx);
        return false;
    }
    const cJSON *part;
    cJSON_ArrayForEach(part, content) { /* checked first: no image is decoded for a request refused later */
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (cJSON_IsString(type) && !strcmp(type->valuestring, "image_url")) continue;
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(t)) {
            srv_error_set(ps->e, 400, "invalid_request_error", NULL,
                     "messages[%d].content: only parts of type \"text\" and \"image_url\" are supported", idx);
            return false;
        }
    }
    cJSON_ArrayForEach(part, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        if (!strcmp(type->valuestring, "image_url")) {
            const char *url = image_url_of(ps, part, idx);
            if (!url || !srq_conv_image(cv, url)) return false;
            continue;
        }
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        if (!srq_conv_text(cv, t, strlen(t))) return false;
    }
    return true;
}

/* A message's fields: role and content; the tool fields (tool_calls, tool_call_id, reasoning_content); name
 * is accepted (a speaker's name is not rendered: Gemma has none). Anything else is a 400. */
static bool message_fields(parse *ps, const cJSON *e, int idx) {
    if (!cJSON_IsObject(e)) {
        srv_error_set(ps->e, 400, "invalid_request_error", NULL, "messages[%d] must be an object", idx);
        return false;
    }
    static const char *const known[] = {"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content",
                                        "reasoning"};
    char where[32];
    snprintf(where, sizeof where, "messages[%d]", idx);
    return srq_known(e, where, known, sizeof known / sizeof *known, ps->e);
}

static const char *message_role(parse *ps, const cJSON *e, int i) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
    if (!cJSON_IsString(role)) return bad(ps, "every message needs a string '%s'", "role"), NULL;
    const char *r = role->valuestring;
    if (!strcmp(r, "developer")) r = "system"; /* OpenAI's newer name for the system role */
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool")) {
        srv_error_set(ps->e, 400, "invalid_request_error", NULL,
                 "messages[%d].role '%.40s' is not supported (system, developer, user, assistant, tool)", i, r);
        return NULL;
    }
    if (!strcmp(r, "system") && i > 0) {
        srv_error_set(ps->e, 400, "invalid_request_error", NULL, "messages[%d]: a system message may only come first", i);
        return NULL;
    }
    return r;
}

/* "messages" -> ids through the conversation builder: contents are text, never control tokens. */
static bool chat_prompt(parse *ps, const cJSON *root, int limit) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(msgs)) return bad(ps, "'%s' must be a list of messages", "messages");
    if (cJSON_GetArraySize(msgs) > limit) /* before any image is decoded */
        return bad(ps, "'%s' has more entries than this server's context can hold", "messages");
    srq_conv *cv = srq_conv_new(ps->in, "messages", ps->e);
    bool ok = cv != NULL;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, msgs) { /* walked once: cJSON_GetArrayItem(i) in a loop is quadratic */
        const char *role = NULL;
        char where[32];
        snprintf(where, sizeof where, "messages[%d]", i);
        ok = ok && message_fields(ps, e, i) && (role = message_role(ps, e, i)) != NULL &&
             srq_conv_message(cv, role, where) &&
             message_content(ps, cv, cJSON_GetObjectItemCaseSensitive(e, "content"), i) &&
             openai_message_tools(e, i, role, cv, ps->e);
        if (!ok) break;
        i++;
    }
    ok = ok && srq_conv_tokenize(cv, ps->rq, limit);
    srq_conv_free(cv);
    return ok;
}

/* One prompt of a request (group g): a string (control-token texts parsed: a raw completion writes its own
 * template) or a list of token ids, appended to the request's prompt; with echo, its text is kept. */
static bool one_prompt(parse *ps, const cJSON *p, const gm_tokenizer *tok, int limit, int g) {
    gen_request *rq = ps->rq;
    int32_t *ids = NULL;
    size_t nid = 0;
    gm_error err = {0};
    if (cJSON_IsString(p)) {
        const size_t len = strlen(p->valuestring);
        if (!srq_bytes_fit(tok, len, limit, ps->e)) return false;
        if (gm_tokenize(tok, p->valuestring, len, gm_tokenizer_add_bos(tok), true, &ids, &nid, &err)) {
            srv_error_set(ps->e, 400, "invalid_request_error", NULL, "prompt: %s", err.msg);
            return false;
        }
    } else {
        const int n = cJSON_IsArray(p) ? cJSON_GetArraySize(p) : 0, V = gm_tokenizer_n_vocab(tok);
        if (n == 0) return bad(ps, "'%s' must be a string, a list of token ids, or a list of those (a batch)", "prompt");
        if (n > limit) {
            srv_error_set(ps->e, 400, "invalid_request_error", "context_length_exceeded",
                          "the prompt has %d tokens; this server takes at most %d", n, limit);
            return false;
        }
        if (!(ids = malloc((size_t)n * sizeof *ids))) return bad(ps, "out of memory reading '%s'", "prompt");
        const cJSON *e;
        cJSON_ArrayForEach(e, p) {
            if (!srv_token_id(e, V, &ids[nid])) {
                free(ids);
                srv_error_set(ps->e, 400, "invalid_request_error", NULL,
                              "'prompt': a list of token ids must hold only ids in [0, %d)", V);
                return false;
            }
            nid++;
        }
    }
    int32_t *all = realloc(rq->prompt, ((size_t)rq->n_prompt + nid + 1) * sizeof *all);
    if (!all) {
        free(ids);
        return bad(ps, "out of memory reading '%s'", "prompt");
    }
    rq->prompt = all;
    if (nid) memcpy(all + rq->n_prompt, ids, nid * sizeof *ids);
    rq->n_prompt += (int)nid;
    rq->group_end[g] = rq->n_prompt;
    bool ok = true;
    if (ps->q->echo) {
        size_t len = 0;
        if (cJSON_IsString(p)) ps->q->echo_text[g] = strdup(p->valuestring);
        else gm_detokenize(tok, ids, nid, true, &ps->q->echo_text[g], &len, NULL);
        ok = ps->q->echo_text[g] != NULL || bad(ps, "out of memory reading '%s'", "prompt");
    }
    free(ids);
    return ok;
}

/* "prompt": one prompt (a string, a list of token ids, a list of one string) or a batch: a list of up to 8
 * strings or lists of token ids, each its own group of n choices (choice index = prompt * n + i). */
static bool completion_prompt(parse *ps, const cJSON *root, const gm_tokenizer *tok, int limit) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!get_bool(ps, root, "echo", &ps->q->echo)) return false;
    if (ps->q->echo && ps->rq->logprobs)
        return bad(ps, "'%s' with logprobs is not supported (the prompt's log-probabilities are not computed)", "echo");
    const bool batch = cJSON_IsArray(p) && p->child && (cJSON_IsString(p->child) || cJSON_IsArray(p->child));
    if (!batch) return one_prompt(ps, p, tok, limit, 0);
    const int n = cJSON_GetArraySize(p);
    if (n > SRV_MAX_N) {
        srv_error_set(ps->e, 400, "invalid_request_error", NULL, "'prompt' is a batch of %d prompts; at most %d", n, SRV_MAX_N);
        return false;
    }
    const cJSON *e;
    int g = 0;
    cJSON_ArrayForEach(e, p) {
        if (!cJSON_IsString(e) && !cJSON_IsArray(e))
            return bad(ps, "'%s': a batch is a list of strings or of lists of token ids", "prompt");
        if (!one_prompt(ps, e, tok, limit, g++)) return false;
    }
    ps->rq->n_groups = n;
    return true;
}

/* ---------------------------------------------------------------- the request */

/* One logit_bias entry: OpenAI's {"<token id>": bias in [-100, 100]}, or llama-server's [[id, bias], ...] where
 * bias false bans the token. Ids are checked against the vocabulary here: a 400, not a sampling error later. */
static bool bias_entry(parse *ps, const char *key, long id, const cJSON *v, int V, gm_logit_bias *out) {
    if (id < 0 || id >= V) {
        srv_error_set(ps->e, 400, "invalid_request_error", "logit_bias",
                      "logit_bias: token id %.20s is outside the vocabulary [0, %d)", key, V);
        return false;
    }
    if (cJSON_IsFalse(v)) {
        *out = (gm_logit_bias){(int32_t)id, -INFINITY};
        return true;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= -100 && v->valuedouble <= 100)) {
        srv_error_set(ps->e, 400, "invalid_request_error", "logit_bias",
                      "logit_bias: the bias of token %.20s must be a number in [-100, 100]", key);
        return false;
    }
    *out = (gm_logit_bias){(int32_t)id, (float)v->valuedouble};
    return true;
}

/* a whole decimal token id, as OpenAI's keys are */
static bool token_id_of(const char *s, long *out) {
    char *end = NULL;
    if (!*s || strlen(s) > 10 || !(*s >= '0' && *s <= '9')) return false;
    *out = strtol(s, &end, 10);
    return *end == 0;
}

/* A schema or grammar that cannot be honoured is a 400 naming why (never unconstrained output). */
/* Structured output: OpenAI's response_format (json_object, json_schema), llama-server's json_schema (a
 * schema) and grammar (GBNF text). At most one; the request's choices then sample only what it allows. */
static bool grammar_fields(parse *ps, const cJSON *root) {
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(root, "json_schema");
    const cJSON *gb = cJSON_GetObjectItemCaseSensitive(root, "grammar");
    if (rf && cJSON_IsNull(rf)) rf = NULL;
    if (js && cJSON_IsNull(js)) js = NULL;
    if (gb && cJSON_IsNull(gb)) gb = NULL;
    const cJSON *type = rf ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
    if (rf && (!cJSON_IsObject(rf) || !cJSON_IsString(type)))
        return bad(ps, "'%s' must be an object with a string 'type'", "response_format");
    if (rf && !strcmp(type->valuestring, "text")) rf = NULL;
    if (!!rf + !!js + !!gb > 1) return bad(ps, "give one of response_format, json_schema and grammar (%s)", "several");
    if (gb) {
        if (!cJSON_IsString(gb)) return bad(ps, "'%s' must be a string of GBNF rules", "grammar");
        return srq_gbnf(ps->rq, "grammar", gb->valuestring, ps->e);
    } else if (js) {
        if (!cJSON_IsObject(js) && !cJSON_IsTrue(js)) return bad(ps, "'%s' must be a JSON schema object", "json_schema");
        return srq_schema(ps->rq, "json_schema", js, ps->e);
    } else if (rf && !strcmp(type->valuestring, "json_object")) {
        return srq_schema(ps->rq, "response_format", NULL, ps->e); /* any object */
    } else if (rf && !strcmp(type->valuestring, "json_schema")) {
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
        const cJSON *sc = cJSON_IsObject(w) ? cJSON_GetObjectItemCaseSensitive(w, "schema") : NULL;
        if (!cJSON_IsObject(sc)) return bad(ps, "'%s' needs json_schema.schema, a JSON schema object", "response_format");
        return srq_schema(ps->rq, "response_format", sc, ps->e);
    } else if (rf) {
        return bad(ps, "response_format type '%.40s' is not one of text, json_object, json_schema", type->valuestring);
    }
    return true;
}

static bool logit_bias_field(parse *ps, const cJSON *root, const gm_tokenizer *tok) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
    if (!f || cJSON_IsNull(f)) return true;
    if (!cJSON_IsObject(f) && !cJSON_IsArray(f))
        return bad(ps, "'%s' must be an object of token id -> bias (or a list of [id, bias] pairs)", "logit_bias");
    const int V = gm_tokenizer_n_vocab(tok), n = cJSON_GetArraySize(f);
    if (n > V) return bad(ps, "'%s' has more entries than the vocabulary has tokens", "logit_bias");
    if (n == 0) return true;
    gen_request *rq = ps->rq;
    if (!(rq->bias = malloc((size_t)n * sizeof *rq->bias))) return bad(ps, "out of memory reading '%s'", "logit_bias");
    const cJSON *e;
    int k = 0;
    cJSON_ArrayForEach(e, f) {
        long id = -1;
        char key[24];
        const cJSON *v = e;
        if (cJSON_IsObject(f)) {
            snprintf(key, sizeof key, "%.20s", e->string);
            if (!token_id_of(e->string, &id)) return bad(ps, "logit_bias keys must be token ids, got '%.40s'", e->string);
        } else {
            const cJSON *a = cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 ? e->child : NULL;
            /* the range before the cast: a double past long's range converts to undefined behaviour */
            if (!a || !cJSON_IsNumber(a) || !(a->valuedouble >= -1e9 && a->valuedouble <= 1e9) ||
                a->valuedouble != floor(a->valuedouble))
                return bad(ps, "'%s' list entries must be [token id, bias]", "logit_bias");
            id = (long)a->valuedouble;
            snprintf(key, sizeof key, "%ld", id);
            v = a->next;
        }
        if (!bias_entry(ps, key, id, v, V, &rq->bias[k++])) return false;
    }
    rq->smp.logit_bias = rq->bias;
    rq->smp.n_logit_bias = k;
    return true;
}

static bool sampling_fields(parse *ps, const cJSON *root) {
    gm_sampling *s = &ps->rq->smp;
    s->temperature = 1.0f; /* OpenAI's default */
    s->repeat_last_n = 64;
    if (!get_float(ps, root, "temperature", 0, 2, &s->temperature) || !get_float(ps, root, "top_p", 0, 1, &s->top_p) ||
        !get_int(ps, root, "top_k", 0, 1 << 20, &s->top_k) || !get_float(ps, root, "min_p", 0, 1, &s->min_p) ||
        !get_float(ps, root, "presence_penalty", -2, 2, &s->presence_penalty) ||
        !get_float(ps, root, "frequency_penalty", -2, 2, &s->frequency_penalty) ||
        !get_float(ps, root, "repeat_penalty", 1e-3, 100, &s->repeat_penalty) ||
        !get_float(ps, root, "repetition_penalty", 1e-3, 100, &s->repeat_penalty) || /* vLLM's name for it */
        !get_int(ps, root, "repeat_last_n", -1, 1 << 20, &s->repeat_last_n))
        return false;
    double seed = -1;
    if (!get_num(ps, root, "seed", -9.2e18, 9.2e18, true, &seed)) return false;
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(root, "seed");
    if (sv && !cJSON_IsNull(sv)) s->seed = (uint64_t)(int64_t)seed;
    return srq_sampling_check(ps->rq, ps->e);
}

static bool limits(parse *ps, const cJSON *root, const srv_options *o, int n_ctx) {
    int max_tokens = 0;
    if (!get_int(ps, root, "n_predict", -1, o->max_tokens, &max_tokens)) return false; /* llama-server's; -1: none */
    if (max_tokens < 0) max_tokens = 0;
    if (!get_int(ps, root, "max_tokens", 1, o->max_tokens, &max_tokens) ||
        !get_int(ps, root, "max_completion_tokens", 1, o->max_tokens, &max_tokens))
        return false;
    ps->rq->max_tokens = max_tokens;
    const int groups = gen_request_groups(ps->rq);
    for (int g = 0; g < groups; g++) { /* each prompt of a batch fits on its own */
        const int32_t *p;
        int np;
        gen_request_group(ps->rq, g, &p, &np);
        if (!srq_fits(o, n_ctx, np, max_tokens, ps->e)) return false;
    }
    const int n = ps->rq->n * groups;
    if (n > SRV_MAX_N || n > o->parallel) {
        srv_error_set(ps->e, 400, "invalid_request_error", NULL,
                      "%d prompts of n = %d are %d choices; this server runs at most %d at once", groups, ps->rq->n, n,
                      SRV_MAX_N < o->parallel ? SRV_MAX_N : o->parallel);
        return false;
    }
    ps->q->per_group = ps->rq->n;
    ps->rq->n = n;
    return true;
}

static bool output_fields(parse *ps, const cJSON *root, call_kind kind, const srv_options *o) {
    ps->rq->n = 1;
    if (!get_int(ps, root, "n", 1, SRV_MAX_N, &ps->rq->n)) return false;
    if (ps->rq->n > o->parallel) {
        srv_error_set(ps->e, 400, "invalid_request_error", NULL, "'n' is %d; this server runs at most %d sequences (--parallel)",
                 ps->rq->n, o->parallel);
        return false;
    }
    if (!get_bool(ps, root, "stream", &ps->rq->stream) || !get_bool(ps, root, "ignore_eos", &ps->rq->ignore_eos) ||
        !get_stop(ps, root))
        return false;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return bad(ps, "'%s' must be an object", "stream_options");
        if (!get_bool(ps, so, "include_usage", &ps->q->include_usage)) return false;
    }
    const bool drafter = srv_has_drafter(o);
    ps->rq->speculative = drafter;
    if (!get_bool(ps, root, "speculative", &ps->rq->speculative)) return false;
    if (ps->rq->speculative && !drafter)
        return bad(ps, "'%s': this server has no drafter (start it with --lookup, --draft-model or --mtp)", "speculative");
    if (kind == CALL_CHAT) {
        if (!get_bool(ps, root, "logprobs", &ps->rq->logprobs) ||
            !get_int(ps, root, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &ps->rq->top_logprobs))
            return false;
        if (ps->rq->top_logprobs && !ps->rq->logprobs) return bad(ps, "'%s' needs \"logprobs\": true", "top_logprobs");
    } else {
        int lp = -1;
        if (!get_int(ps, root, "logprobs", 0, 5, &lp)) return false;
        ps->rq->logprobs = lp >= 0;
        ps->rq->top_logprobs = lp > 0 ? lp : 0;
    }
    if (ps->rq->logprobs) ps->rq->speculative = false; /* accepted tokens come without their logits */
    return true;
}

/* Every top-level field is one this server reads, one documented as ignored (it cannot change the
 * output), or a field it cannot honour given at its neutral value. Anything else is a 400 naming it: a
 * request for logit_bias, tools or a JSON schema must never get unconstrained output silently. */
static const char *const read_fields[] = {
    "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
    "frequency_penalty", "repeat_penalty", "repeat_last_n", "seed", "stop", "n", "stream", "stream_options",
    "logprobs", "ignore_eos", "speculative", "n_predict", "repetition_penalty", "logit_bias", "response_format",
    "json_schema", "grammar",
    /* ignored: bookkeeping of OpenAI's and llama-server's that does not change tokens */
    "user", "metadata", "store", "service_tier", "cache_prompt", "id_slot", "timings_per_token"};

static bool is_empty_list_or_object(const cJSON *v) { return (cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child; }

static bool str_is(const cJSON *v, const char *a, const char *b) {
    return cJSON_IsString(v) && (!strcmp(v->valuestring, a) || (b && !strcmp(v->valuestring, b)));
}

/* A field this server does not implement, given a value that asks for nothing. */
static bool neutral(const cJSON *f) {
    const char *k = f->string;
    if (!strcmp(k, "tools") || !strcmp(k, "functions")) return is_empty_list_or_object(f);
    if (!strcmp(k, "tool_choice") || !strcmp(k, "function_call")) return str_is(f, "none", "auto");
    if (!strcmp(k, "parallel_tool_calls")) return cJSON_IsBool(f);
    if (!strcmp(k, "echo")) return cJSON_IsFalse(f);
    if (!strcmp(k, "suffix")) return str_is(f, "", NULL);
    if (!strcmp(k, "best_of")) return cJSON_IsNumber(f) && f->valuedouble == 1;
    return false;
}

static bool request_fields(parse *ps, const cJSON *root, call_kind kind) {
    const cJSON *f;
    cJSON_ArrayForEach(f, root) {
        const char *k = f->string;
        bool known = cJSON_IsNull(f) || neutral(f) || !strcmp(k, kind == CALL_CHAT ? "messages" : "prompt") ||
                     (kind == CALL_COMPLETION && !strcmp(k, "echo")) ||
                     (kind == CALL_CHAT && (!strcmp(k, "top_logprobs") || !strcmp(k, "tools") || !strcmp(k, "tool_choice") ||
                                            !strcmp(k, "parallel_tool_calls")));
        for (size_t i = 0; !known && i < sizeof read_fields / sizeof *read_fields; i++) known = !strcmp(k, read_fields[i]);
        if (!known) {
            srv_error_set(ps->e, 400, "invalid_request_error", "unsupported_field",
                     "'%.60s' is not supported by this server (docs/server.md lists the fields it reads)", k);
            return false;
        }
    }
    return true;
}

static bool parse_body(parse *ps, call_kind kind, const char *body, size_t len, const gm_tokenizer *tok,
                       const srv_options *o, int n_ctx) {
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) return bad(ps, "the body is not valid JSON (%s)", "parse error");
    const int limit = srq_prompt_limit(o, n_ctx);
    bool ok = cJSON_IsObject(root) ? true : bad(ps, "the body must be a JSON %s", "object");
    ok = ok && request_fields(ps, root, kind) && sampling_fields(ps, root) && logit_bias_field(ps, root, tok) &&
         output_fields(ps, root, kind, o) && grammar_fields(ps, root);
    ok = ok && (kind != CALL_CHAT || openai_tools_parse(root, tok, ps->rq, ps->e));
    ok = ok && (kind == CALL_CHAT ? chat_prompt(ps, root, limit) : completion_prompt(ps, root, tok, limit));
    ok = ok && limits(ps, root, o, n_ctx);
    cJSON_Delete(root);
    return ok;
}

static void *parse_call(const gen_call_in *in, gen_request *rq, srv_error *e, call_kind kind) {
    openai_call *q = calloc(1, sizeof *q);
    if (!q) {
        srv_error_set(e, 500, "server_error", NULL, "out of memory");
        return NULL;
    }
    q->kind = kind;
    q->model = in->model;
    q->fingerprint = in->o->replica_id;
    q->created = (long)time(NULL);
    snprintf(q->id, sizeof q->id, "%s%016llx", kind == CALL_CHAT ? "chatcmpl-" : "cmpl-", (unsigned long long)srv_fresh_u64());
    parse ps = {rq, q, e, in};
    const bool ok = parse_body(&ps, kind, in->body ? in->body : "", in->len, in->tok, in->o, in->n_ctx);
    if (!ok) {
        free_call(q);
        return NULL;
    }
    return q;
}

/* ---------------------------------------------------------------- rendering */

/* JSON strings must be UTF-8 and cJSON stops at a NUL: invalid bytes and NULs become U+FFFD. */
char *srv_clean_utf8(const char *s, size_t n) {
    char *out = malloc(n * 3 + 1), *p = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n;) {
        const unsigned char b = (unsigned char)s[i];
        const size_t l = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (b != 0 && l && i + l <= n && gm_text_is_utf8(s + i, l)) {
            memcpy(p, s + i, l);
            p += l;
            i += l;
        } else {
            memcpy(p, "\xEF\xBF\xBD", 3);
            p += 3;
            i++;
        }
    }
    *p = 0;
    return out;
}

static cJSON *text_item(const char *s, size_t n) {
    char *c = srv_clean_utf8(s, n);
    cJSON *item = cJSON_CreateString(c ? c : "");
    free(c);
    return item;
}

/* The text ended (end of turn, a stop string), with tool calls, or ran out of room. */
static const char *finish_reason(gen_finish f, int n_calls) {
    return gen_finish_is_length(f) ? "length" : n_calls ? "tool_calls" : "stop";
}

/* Speculation's counts go where OpenAI puts a predicted output's (completion_tokens_details: accepted and rejected
 * prediction tokens) and where llama-server puts its drafts' (timings.draft_n, draft_n_accepted), when it drafted. */
static cJSON *usage_json(int n_prompt, int gen, int cached, int64_t drafted, int64_t accepted) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", gen);
    cJSON_AddNumberToObject(u, "total_tokens", n_prompt + gen);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", cached);
    if (drafted > 0) {
        cJSON *d = cJSON_AddObjectToObject(u, "completion_tokens_details");
        cJSON_AddNumberToObject(d, "accepted_prediction_tokens", (double)accepted);
        cJSON_AddNumberToObject(d, "rejected_prediction_tokens", (double)(drafted - accepted));
    }
    return u;
}

static void add_timings(cJSON *o, int n_prompt, int cached, int gen, int64_t drafted, int64_t accepted) {
    if (drafted <= 0) return;
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    cJSON_AddNumberToObject(t, "prompt_n", n_prompt - cached);
    cJSON_AddNumberToObject(t, "cache_n", cached);
    cJSON_AddNumberToObject(t, "predicted_n", gen);
    cJSON_AddNumberToObject(t, "draft_n", (double)drafted);
    cJSON_AddNumberToObject(t, "draft_n_accepted", (double)accepted);
}

static cJSON *token_item(const gm_tokenizer *tok, int32_t id, float lp, bool chat) {
    const char *piece = "";
    size_t n = 0;
    gm_token_to_piece(tok, id, true, &piece, &n, NULL);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "token", text_item(piece, n));
    cJSON_AddNumberToObject(o, "logprob", lp);
    if (chat) {
        cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
        for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)piece[i]));
    }
    return o;
}

static cJSON *chat_logprobs(const gen_logprob *lp, int n, const gm_tokenizer *tok) {
    cJSON *o = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(o, "content");
    for (int i = 0; i < n; i++) {
        const gen_logprob *e = &lp[i];
        cJSON *t = token_item(tok, e->id, e->lp, true), *top = cJSON_AddArrayToObject(t, "top_logprobs");
        for (int k = 0; k < e->n_top; k++) cJSON_AddItemToArray(top, token_item(tok, e->top_id[k], e->top_lp[k], true));
        cJSON_AddItemToArray(content, t);
    }
    cJSON_AddNullToObject(o, "refusal");
    return o;
}

/* The legacy shape: parallel lists, the alternatives as an object keyed by their text. */
static cJSON *legacy_logprobs(const gen_logprob *lp, int n, size_t first_offset, const gm_tokenizer *tok) {
    cJSON *o = cJSON_CreateObject(), *tokens = cJSON_AddArrayToObject(o, "tokens"),
          *lps = cJSON_AddArrayToObject(o, "token_logprobs"), *tops = cJSON_AddArrayToObject(o, "top_logprobs"),
          *offs = cJSON_AddArrayToObject(o, "text_offset");
    for (int i = 0; i < n; i++) {
        const gen_logprob *e = &lp[i];
        cJSON *t = token_item(tok, e->id, e->lp, false);
        cJSON_AddItemToArray(tokens, cJSON_Duplicate(cJSON_GetObjectItem(t, "token"), true));
        cJSON_Delete(t);
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(e->lp));
        cJSON *top = cJSON_CreateObject();
        for (int k = 0; k < e->n_top; k++) {
            const char *piece = "";
            size_t pn = 0;
            gm_token_to_piece(tok, e->top_id[k], true, &piece, &pn, NULL);
            char *name = srv_clean_utf8(piece, pn);
            if (name && !cJSON_GetObjectItemCaseSensitive(top, name)) cJSON_AddNumberToObject(top, name, e->top_lp[k]);
            free(name);
        }
        cJSON_AddItemToArray(tops, top);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber(i ? (double)lp[i - 1].text_end : (double)first_offset));
    }
    return o;
}

/* The log-probabilities of n entries; the first one's text starts at byte first_offset of the choice's
 * text, each later one where the one before it ended. */
static cJSON *logprobs_json(call_kind kind, const gen_logprob *lp, int n, size_t first_offset, const gm_tokenizer *tok) {
    return kind == CALL_CHAT ? chat_logprobs(lp, n, tok) : legacy_logprobs(lp, n, first_offset, tok);
}

static cJSON *envelope(const openai_call *q, bool chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", q->id);
    cJSON_AddStringToObject(o, "object", q->kind == CALL_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                              : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)q->created);
    cJSON_AddStringToObject(o, "model", q->model);
    /* the replica that answered (--replica-id): behind a balancer, which cache and build served it */
    if (q->fingerprint) cJSON_AddStringToObject(o, "system_fingerprint", q->fingerprint);
    else cJSON_AddNullToObject(o, "system_fingerprint");
    return o;
}

static cJSON *choice_json(const openai_call *q, const job *j, int i, const gm_tokenizer *tok) {
    const gen_session *g = &j->gen[i];
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", i);
    if (q->kind == CALL_CHAT) {
        cJSON *msg = cJSON_AddObjectToObject(ch, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        if (!g->len && gen_session_n_calls(g)) cJSON_AddNullToObject(msg, "content");
        else cJSON_AddItemToObject(msg, "content", text_item(g->text ? g->text : "", g->len));
        cJSON_AddNullToObject(msg, "refusal");
        openai_add_tool_calls(msg, g);
        size_t rl = 0;
        const char *r = g->tp ? gm_tool_parser_reasoning(g->tp, &rl) : "";
        if (rl) cJSON_AddItemToObject(msg, "reasoning_content", text_item(r, rl));
    } else {
        const char *echo = q->echo ? q->echo_text[i / q->per_group] : NULL;
        if (echo) { /* the prompt's text, then the choice's */
            const size_t el = strlen(echo);
            char *t = malloc(el + g->len + 1);
            if (t) memcpy(t, echo, el), memcpy(t + el, g->text ? g->text : "", g->len), t[el + g->len] = 0;
            cJSON_AddItemToObject(ch, "text", text_item(t ? t : "", t ? el + g->len : 0));
            free(t);
        } else {
            cJSON_AddItemToObject(ch, "text", text_item(g->text ? g->text : "", g->len));
        }
    }
    if (j->rq.logprobs) cJSON_AddItemToObject(ch, "logprobs", logprobs_json(q->kind, g->lp, gen_session_lp_shown(g, g->len), 0, tok));
    else cJSON_AddNullToObject(ch, "logprobs");
    cJSON_AddStringToObject(ch, "finish_reason", finish_reason(g->finish, gen_session_n_calls(g)));
    return ch;
}

static char *response(const void *call, const job *j, const gm_tokenizer *tok) {
    const openai_call *q = call;
    cJSON *o = envelope(q, false), *choices = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < j->rq.n; i++) cJSON_AddItemToArray(choices, choice_json(q, j, i, tok));
    cJSON_AddItemToObject(o, "usage", usage_json(j->rq.n_prompt, job_generated(j), j->cached, j->draft_n,
                                                  j->draft_n_accepted));
    add_timings(o, j->rq.n_prompt, j->cached, job_generated(j), j->draft_n, j->draft_n_accepted);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *openai_error_json(const char *type, const char *code, const char *msg) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddItemToObject(e, "message", text_item(msg, strlen(msg)));
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNullToObject(e, "param");
    if (code && *code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* ---------------------------------------------------------------- streaming (Server-Sent Events) */

static bool put_event(srv_buf *out, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    const bool ok = s && srv_buf_put(out, "data: ", 6) && srv_buf_put(out, s, strlen(s)) && srv_buf_put(out, "\n\n", 2);
    free(s);
    return ok;
}

/* One chunk: delta text (or the role, when a chat choice opens), log-probabilities, finish reason. */
static void put_piece(const openai_call *q, const stream_view *v, const stream_piece *pc, const gm_tokenizer *tok,
                      srv_buf *out) {
    if (pc->open && q->kind != CALL_CHAT && !q->echo) return; /* completions announce nothing but an echo */
    if (pc->reason_n) return; /* thoughts: reasoning_content of the whole answer only */
    if (pc->call >= 0) { /* a tool call: its announcement (id, name), then its arguments */
        const char *id = v->text + pc->call_off, *name = id + strlen(id) + 1, *args = name + strlen(name) + 1;
        for (int part = 0; part < 2; part++) {
            cJSON *o = envelope(q, true), *choices = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
            cJSON_AddNumberToObject(ch, "index", pc->choice);
            openai_add_call_delta(cJSON_AddObjectToObject(ch, "delta"), pc->call, part ? NULL : id, name, args);
            cJSON_AddNullToObject(ch, "logprobs");
            cJSON_AddNullToObject(ch, "finish_reason");
            cJSON_AddItemToArray(choices, ch);
            if (q->include_usage) cJSON_AddNullToObject(o, "usage");
            put_event(out, o);
        }
        return;
    }
    cJSON *o = envelope(q, true), *choices = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
    const char *text = pc->has_text && v->text ? v->text + pc->text_off : NULL;
    const size_t n = text ? pc->text_n : 0;
    cJSON_AddNumberToObject(ch, "index", pc->choice);
    if (q->kind == CALL_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(ch, "delta");
        if (pc->open) cJSON_AddStringToObject(d, "role", "assistant");
        if (pc->open || text) cJSON_AddItemToObject(d, "content", text_item(text ? text : "", n));
    } else if (pc->open) { /* echo: the prompt's text first */
        const char *echo = q->echo_text[pc->choice / q->per_group];
        cJSON_AddItemToObject(ch, "text", text_item(echo, strlen(echo)));
    } else {
        cJSON_AddItemToObject(ch, "text", text_item(text ? text : "", n));
    }
    if (pc->lp_n > 0 && v->lp)
        cJSON_AddItemToObject(ch, "logprobs", logprobs_json(q->kind, v->lp + pc->lp_off, pc->lp_n, pc->lp_first_offset, tok));
    else cJSON_AddNullToObject(ch, "logprobs");
    if (pc->finish) cJSON_AddStringToObject(ch, "finish_reason", finish_reason(pc->finish, pc->n_calls));
    else cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(choices, ch);
    if (q->include_usage) cJSON_AddNullToObject(o, "usage");
    put_event(out, o);
}

/* After a 200 has started, an error goes out as a data event, then the end. */
static void render(const void *call, const stream_view *v, const gm_tokenizer *tok, srv_buf *out) {
    const openai_call *q = call;
    if (v->err) {
        char *e = openai_error_json("server_error", NULL, v->err_msg);
        srv_buf_put(out, "data: ", 6);
        if (e) srv_buf_put(out, e, strlen(e));
        srv_buf_put(out, "\n\ndata: [DONE]\n\n", 16);
        free(e);
        return;
    }
    for (int k = 0; k < v->n_pieces; k++) put_piece(q, v, &v->piece[k], tok, out);
    if (!v->end) return;
    if (q->include_usage) {
        cJSON *o = envelope(q, true);
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", usage_json(v->n_prompt, v->gen, v->cached, v->draft_n, v->draft_n_accepted));
        add_timings(o, v->n_prompt, v->cached, v->gen, v->draft_n, v->draft_n_accepted);
        put_event(out, o);
    }
    srv_buf_put(out, "data: [DONE]\n\n", 14);
}

/* ---------------------------------------------------------------- the two endpoints */

static void *parse_chat(const gen_call_in *in, gen_request *rq, srv_error *e) { return parse_call(in, rq, e, CALL_CHAT); }
static void *parse_completion(const gen_call_in *in, gen_request *rq, srv_error *e) {
    return parse_call(in, rq, e, CALL_COMPLETION);
}

const gen_endpoint openai_chat = {parse_chat, response, render, "text/event-stream", ":\n\n", free_call};
const gen_endpoint openai_completions = {parse_completion, response, render, "text/event-stream", ":\n\n", free_call};
