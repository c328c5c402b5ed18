/* server/openai.c — the OpenAI wire format: request bodies into jobs (every field checked: a wrong type
 * or an out-of-range value is a 400 naming the field, never a default silently used; so is a field the
 * server does not read, as OpenAI's API answers one it does not know), and jobs into responses and
 * Server-Sent Events chunks. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

/* ---------------------------------------------------------------- field readers */

static bool bad(job *j, const char *fmt, const char *field) {
    job_fail(j, 400, "invalid_request_error", NULL, fmt, field);
    return false;
}

/* A number field in [lo, hi] (whole when integral); absent or null keeps *out. */
static bool get_num(job *j, const cJSON *o, const char *name, double lo, double hi, bool integral, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsNumber(v)) return bad(j, "'%s' must be a number", name);
    const double x = v->valuedouble;
    if (!isfinite(x) || x < lo || x > hi) {
        job_fail(j, 400, "invalid_request_error", NULL, "'%s' is %g; it must be in [%g, %g]", name, x, lo, hi);
        return false;
    }
    if (integral && x != floor(x)) return bad(j, "'%s' must be a whole number", name);
    *out = x;
    return true;
}

static bool get_int(job *j, const cJSON *o, const char *name, int lo, int hi, int *out) {
    double x = *out;
    if (!get_num(j, o, name, lo, hi, true, &x)) return false;
    *out = (int)x;
    return true;
}

static bool get_float(job *j, const cJSON *o, const char *name, double lo, double hi, float *out) {
    double x = *out;
    if (!get_num(j, o, name, lo, hi, false, &x)) return false;
    *out = (float)x;
    return true;
}

static bool get_bool(job *j, const cJSON *o, const char *name, bool *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsBool(v)) return bad(j, "'%s' must be true or false", name);
    *out = cJSON_IsTrue(v);
    return true;
}

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
static bool get_stop(job *j, const cJSON *o) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "stop");
    if (!v || cJSON_IsNull(v)) return true;
    const int n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0) return bad(j, "'%s' must be a string or a list of strings", "stop");
    if (n > SRV_MAX_STOP) {
        job_fail(j, 400, "invalid_request_error", NULL, "'stop' has %d entries; at most %d", n, SRV_MAX_STOP);
        return false;
    }
    const cJSON *s = cJSON_IsString(v) ? v : v->child; /* walked once, not by index */
    for (int i = 0; i < n; i++, s = s->next) {
        if (!cJSON_IsString(s)) return bad(j, "'%s' must be a string or a list of strings", "stop");
        const size_t len = strlen(s->valuestring);
        if (len == 0 || len > SRV_MAX_STOP_LEN) {
            job_fail(j, 400, "invalid_request_error", NULL, "each 'stop' string must have 1 to %d bytes", SRV_MAX_STOP_LEN);
            return false;
        }
        if (!(j->stop[j->n_stop] = strdup(s->valuestring))) return bad(j, "out of memory reading '%s'", "stop");
        j->n_stop++;
    }
    return true;
}

/* ---------------------------------------------------------------- prompts */

/* A message's content: a string, null (an assistant turn without text) or a list of text parts. */
static char *message_text(job *j, const cJSON *content, int idx) {
    if (!content || cJSON_IsNull(content)) return strdup("");
    if (cJSON_IsString(content)) return strdup(content->valuestring);
    if (!cJSON_IsArray(content)) {
        job_fail(j, 400, "invalid_request_error", NULL, "messages[%d].content must be a string or a list of parts", idx);
        return NULL;
    }
    size_t len = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(t)) {
            job_fail(j, 400, "invalid_request_error", NULL,
                     "messages[%d].content: only parts of type \"text\" are supported (this model reads text)", idx);
            return NULL;
        }
        len += strlen(t->valuestring);
    }
    char *out = malloc(len + 1), *p = out;
    if (!out) return NULL;
    cJSON_ArrayForEach(part, content) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        const size_t n = strlen(t);
        memcpy(p, t, n);
        p += n;
    }
    *p = 0;
    return out;
}

/* A prompt of B bytes has at least B / k tokens (k: the most bytes one token covers): one that cannot fit
 * is refused before it is tokenized, so a huge body costs a scan, not a tokenization. */
static bool bytes_fit(job *j, const gm_tokenizer *tok, size_t bytes, int limit) {
    const size_t k = gm_tokenizer_max_token_bytes(tok);
    if (k == 0 || bytes / k <= (size_t)limit) return true;
    job_fail(j, 400, "invalid_request_error", "context_length_exceeded",
             "the prompt has at least %zu tokens (%zu bytes); this server takes at most %d", bytes / k, bytes, limit);
    return false;
}

/* A message's fields: role and content are read; name is documented as ignored (Gemma's template has no
 * speaker names); anything else (tool_calls, tool_call_id, ...) would change the turn and is refused. */
static bool message_fields(job *j, const cJSON *e, int idx) {
    if (!cJSON_IsObject(e)) {
        job_fail(j, 400, "invalid_request_error", NULL, "messages[%d] must be an object", idx);
        return false;
    }
    const cJSON *f;
    cJSON_ArrayForEach(f, e) {
        if (!strcmp(f->string, "role") || !strcmp(f->string, "content") || !strcmp(f->string, "name") || cJSON_IsNull(f))
            continue;
        job_fail(j, 400, "invalid_request_error", "unsupported_field", "messages[%d].%.60s is not supported by this server",
                 idx, f->string);
        return false;
    }
    return true;
}

static const char *message_role(job *j, const cJSON *e, int i) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
    if (!cJSON_IsString(role)) return bad(j, "every message needs a string '%s'", "role"), NULL;
    const char *r = role->valuestring;
    if (!strcmp(r, "developer")) r = "system"; /* OpenAI's newer name for the system role */
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant")) {
        job_fail(j, 400, "invalid_request_error", NULL,
                 "messages[%d].role '%.40s' is not supported (system, developer, user, assistant)", i, r);
        return NULL;
    }
    if (!strcmp(r, "system") && i > 0) {
        job_fail(j, 400, "invalid_request_error", NULL, "messages[%d]: a system message may only come first", i);
        return NULL;
    }
    return r;
}

/* "messages" -> ids through gm_chat_tokenize: contents are text, never control tokens. */
static bool chat_prompt(job *j, const cJSON *root, const gm_tokenizer *tok, int limit) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(msgs)) return bad(j, "'%s' must be a list of messages", "messages");
    const int n = cJSON_GetArraySize(msgs);
    if (n == 0) return bad(j, "'%s' is empty", "messages");
    if (n > 4096 || n > limit) return bad(j, "'%s' has more entries than this server's context can hold", "messages");
    gm_chat_message *m = calloc((size_t)n, sizeof *m);
    char **owned = calloc((size_t)n, sizeof *owned);
    bool ok = m && owned;
    if (!ok) job_fail(j, 500, "server_error", NULL, "out of memory");
    int i = 0;
    size_t bytes = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, msgs) { /* walked once: cJSON_GetArrayItem(i) in a loop is quadratic */
        if (!ok || !(ok = message_fields(j, e, i)) || !(ok = (m[i].role = message_role(j, e, i)) != NULL)) break;
        ok = (m[i].content = owned[i] = message_text(j, cJSON_GetObjectItemCaseSensitive(e, "content"), i)) != NULL;
        if (!ok && !j->err_http) job_fail(j, 500, "server_error", NULL, "out of memory");
        if (!ok) break;
        bytes += strlen(m[i].content);
        i++;
    }
    ok = ok && bytes_fit(j, tok, bytes, limit);
    if (ok) {
        gm_error err = {0};
        size_t nid = 0;
        if (gm_chat_tokenize(tok, m, (size_t)n, true, &j->prompt, &nid, &err)) {
            job_fail(j, err.code == GM_ERR_NOMEM ? 500 : 400, "invalid_request_error", NULL, "messages: %s", err.msg);
            ok = false;
        }
        j->n_prompt = (int)nid;
    }
    for (int k = 0; owned && k < n; k++) free(owned[k]);
    free(owned);
    free(m);
    return ok;
}

/* "prompt": a string (control-token texts parsed: a raw completion writes its own template), a list of
 * one string, or a list of token ids. */
static bool completion_prompt(job *j, const cJSON *root, const gm_tokenizer *tok, int limit) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(p->child)) p = p->child;
    if (cJSON_IsString(p)) {
        gm_error err = {0};
        size_t nid = 0;
        const size_t len = strlen(p->valuestring);
        if (!bytes_fit(j, tok, len, limit)) return false;
        if (gm_tokenize(tok, p->valuestring, len, gm_tokenizer_add_bos(tok), true, &j->prompt, &nid, &err)) {
            job_fail(j, 400, "invalid_request_error", NULL, "prompt: %s", err.msg);
            return false;
        }
        j->n_prompt = (int)nid;
        return true;
    }
    const int n = cJSON_IsArray(p) ? cJSON_GetArraySize(p) : 0, V = gm_tokenizer_n_vocab(tok);
    if (n == 0) return bad(j, "'%s' must be a string, a list of one string, or a non-empty list of token ids", "prompt");
    if (n > limit) {
        job_fail(j, 400, "invalid_request_error", "context_length_exceeded",
                 "the prompt has %d tokens; this server takes at most %d", n, limit);
        return false;
    }
    if (!(j->prompt = malloc((size_t)n * sizeof *j->prompt))) return bad(j, "out of memory reading '%s'", "prompt");
    const cJSON *e;
    cJSON_ArrayForEach(e, p) {
        if (!srv_token_id(e, V, &j->prompt[j->n_prompt])) {
            job_fail(j, 400, "invalid_request_error", NULL,
                     "'prompt': a list must hold only token ids in [0, %d) (batches of prompts are not supported)", V);
            return false;
        }
        j->n_prompt++;
    }
    return true;
}

/* ---------------------------------------------------------------- the request */

static bool sampling_fields(job *j, const cJSON *root) {
    gm_sampling *s = &j->smp;
    s->temperature = 1.0f; /* OpenAI's default */
    s->repeat_last_n = 64;
    if (!get_float(j, root, "temperature", 0, 2, &s->temperature) || !get_float(j, root, "top_p", 0, 1, &s->top_p) ||
        !get_int(j, root, "top_k", 0, 1 << 20, &s->top_k) || !get_float(j, root, "min_p", 0, 1, &s->min_p) ||
        !get_float(j, root, "presence_penalty", -2, 2, &s->presence_penalty) ||
        !get_float(j, root, "frequency_penalty", -2, 2, &s->frequency_penalty) ||
        !get_float(j, root, "repeat_penalty", 1e-3, 100, &s->repeat_penalty) ||
        !get_float(j, root, "repetition_penalty", 1e-3, 100, &s->repeat_penalty) || /* vLLM's name for it */
        !get_int(j, root, "repeat_last_n", -1, 1 << 20, &s->repeat_last_n))
        return false;
    if (s->top_p == 0) { /* the limit of a nucleus that shrinks to the best token */
        s->top_p = 1;
        s->temperature = 0;
    }
    double seed = -1;
    if (!get_num(j, root, "seed", -9.2e18, 9.2e18, true, &seed)) return false;
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(root, "seed");
    if (sv && !cJSON_IsNull(sv)) s->seed = (uint64_t)(int64_t)seed;
    gm_error err = {0};
    if (gm_sampling_validate(s, &err)) return bad(j, "%s", err.msg);
    return true;
}

static bool limits(job *j, const cJSON *root, const srv_options *o, int n_ctx) {
    int max_tokens = 0;
    if (!get_int(j, root, "n_predict", -1, o->max_tokens, &max_tokens)) return false; /* llama-server's; -1: none */
    if (max_tokens < 0) max_tokens = 0;
    if (!get_int(j, root, "max_tokens", 1, o->max_tokens, &max_tokens) ||
        !get_int(j, root, "max_completion_tokens", 1, o->max_tokens, &max_tokens))
        return false;
    j->max_tokens = max_tokens;
    if (j->n_prompt == 0) return bad(j, "the %s is empty", "prompt");
    if (j->n_prompt > o->max_prompt || j->n_prompt >= n_ctx) {
        job_fail(j, 400, "invalid_request_error", "context_length_exceeded",
                 "the prompt has %d tokens; this server takes at most %d (context %d, --max-prompt %d)", j->n_prompt,
                 n_ctx - 1 < o->max_prompt ? n_ctx - 1 : o->max_prompt, n_ctx, o->max_prompt);
        return false;
    }
    if (max_tokens && j->n_prompt + max_tokens > n_ctx) {
        job_fail(j, 400, "invalid_request_error", "context_length_exceeded",
                 "this model's context is %d tokens; the prompt (%d) plus max_tokens (%d) would exceed it", n_ctx,
                 j->n_prompt, max_tokens);
        return false;
    }
    return true;
}

static bool output_fields(job *j, const cJSON *root, job_kind kind, const srv_options *o) {
    j->n = 1;
    if (!get_int(j, root, "n", 1, SRV_MAX_N, &j->n)) return false;
    if (j->n > o->parallel) {
        job_fail(j, 400, "invalid_request_error", NULL, "'n' is %d; this server runs at most %d sequences (--parallel)",
                 j->n, o->parallel);
        return false;
    }
    if (!get_bool(j, root, "stream", &j->stream) || !get_bool(j, root, "ignore_eos", &j->ignore_eos) ||
        !get_stop(j, root))
        return false;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return bad(j, "'%s' must be an object", "stream_options");
        if (!get_bool(j, so, "include_usage", &j->include_usage)) return false;
    }
    const bool drafter = o->lookup || o->draft_model_path;
    j->speculative = drafter;
    if (!get_bool(j, root, "speculative", &j->speculative)) return false;
    if (j->speculative && !drafter)
        return bad(j, "'%s': this server has no drafter (start it with --lookup or --draft-model)", "speculative");
    if (kind == JOB_CHAT) {
        if (!get_bool(j, root, "logprobs", &j->logprobs) ||
            !get_int(j, root, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &j->top_logprobs))
            return false;
        if (j->top_logprobs && !j->logprobs) return bad(j, "'%s' needs \"logprobs\": true", "top_logprobs");
    } else {
        int lp = -1;
        if (!get_int(j, root, "logprobs", 0, 5, &lp)) return false;
        j->logprobs = lp >= 0;
        j->top_logprobs = lp > 0 ? lp : 0;
    }
    if (j->logprobs) j->speculative = false; /* accepted tokens come without their logits */
    return true;
}

/* Every top-level field is one this server reads, one documented as ignored (it cannot change the
 * output), or a field it cannot honour given at its neutral value. Anything else is a 400 naming it: a
 * request for logit_bias, tools or a JSON schema must never get unconstrained output silently. */
static const char *const read_fields[] = {
    "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
    "frequency_penalty", "repeat_penalty", "repeat_last_n", "seed", "stop", "n", "stream", "stream_options",
    "logprobs", "ignore_eos", "speculative", "n_predict", "repetition_penalty",
    /* ignored: bookkeeping of OpenAI's and llama-server's that does not change tokens */
    "user", "metadata", "store", "service_tier", "cache_prompt", "id_slot", "timings_per_token"};

static bool is_empty_list_or_object(const cJSON *v) { return (cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child; }

static bool str_is(const cJSON *v, const char *a, const char *b) {
    return cJSON_IsString(v) && (!strcmp(v->valuestring, a) || (b && !strcmp(v->valuestring, b)));
}

/* A field this server does not implement, given a value that asks for nothing. */
static bool neutral(const cJSON *f) {
    const char *k = f->string;
    if (!strcmp(k, "logit_bias") || !strcmp(k, "tools") || !strcmp(k, "functions")) return is_empty_list_or_object(f);
    if (!strcmp(k, "tool_choice") || !strcmp(k, "function_call")) return str_is(f, "none", "auto");
    if (!strcmp(k, "parallel_tool_calls")) return cJSON_IsBool(f);
    if (!strcmp(k, "response_format"))
        return cJSON_IsObject(f) && str_is(cJSON_GetObjectItemCaseSensitive(f, "type"), "text", NULL) && !f->child->next;
    if (!strcmp(k, "echo")) return cJSON_IsFalse(f);
    if (!strcmp(k, "suffix")) return str_is(f, "", NULL);
    if (!strcmp(k, "best_of")) return cJSON_IsNumber(f) && f->valuedouble == 1;
    return false;
}

static bool request_fields(job *j, const cJSON *root, job_kind kind) {
    const cJSON *f;
    cJSON_ArrayForEach(f, root) {
        const char *k = f->string;
        bool known = cJSON_IsNull(f) || neutral(f) || !strcmp(k, kind == JOB_CHAT ? "messages" : "prompt") ||
                     (kind == JOB_CHAT && !strcmp(k, "top_logprobs"));
        for (size_t i = 0; !known && i < sizeof read_fields / sizeof *read_fields; i++) known = !strcmp(k, read_fields[i]);
        if (!known) {
            job_fail(j, 400, "invalid_request_error", "unsupported_field",
                     "'%.60s' is not supported by this server (docs/server.md lists the fields it reads)", k);
            return false;
        }
    }
    return true;
}

bool openai_parse(job *j, job_kind kind, const char *body, size_t len, const gm_tokenizer *tok,
                  const srv_options *o, int n_ctx) {
    j->kind = kind;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) return bad(j, "the body is not valid JSON (%s)", "parse error");
    const int limit = n_ctx - 1 < o->max_prompt ? n_ctx - 1 : o->max_prompt;
    bool ok = cJSON_IsObject(root) ? true : bad(j, "the body must be a JSON %s", "object");
    ok = ok && request_fields(j, root, kind) && sampling_fields(j, root) && output_fields(j, root, kind, o);
    ok = ok && (kind == JOB_CHAT ? chat_prompt(j, root, tok, limit) : completion_prompt(j, root, tok, limit));
    ok = ok && limits(j, root, o, n_ctx);
    cJSON_Delete(root);
    return ok;
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

static cJSON *usage_json(const job *j) {
    int gen = 0;
    for (int i = 0; i < j->n; i++) gen += j->ch[i].n_gen;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", gen);
    cJSON_AddNumberToObject(u, "total_tokens", j->n_prompt + gen);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", j->cached);
    return u;
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

/* The log-probabilities of n entries in the chat or the legacy shape; the first one's text starts at
 * byte first_offset of the choice's text, each later one where the one before it ended. */
static cJSON *logprobs_json(job_kind kind, const lp_entry *lp, int n, size_t first_offset, const gm_tokenizer *tok) {
    if (kind == JOB_CHAT) {
        cJSON *o = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(o, "content");
        for (int i = 0; i < n; i++) {
            const lp_entry *e = &lp[i];
            cJSON *t = token_item(tok, e->id, e->lp, true), *top = cJSON_AddArrayToObject(t, "top_logprobs");
            for (int k = 0; k < e->n_top; k++) cJSON_AddItemToArray(top, token_item(tok, e->top_id[k], e->top_lp[k], true));
            cJSON_AddItemToArray(content, t);
        }
        cJSON_AddNullToObject(o, "refusal");
        return o;
    }
    cJSON *o = cJSON_CreateObject(), *tokens = cJSON_AddArrayToObject(o, "tokens"),
          *lps = cJSON_AddArrayToObject(o, "token_logprobs"), *tops = cJSON_AddArrayToObject(o, "top_logprobs"),
          *offs = cJSON_AddArrayToObject(o, "text_offset");
    for (int i = 0; i < n; i++) {
        const lp_entry *e = &lp[i];
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

/* Entries whose text starts before the end of the shown text (a stop string's tokens are dropped). */
static int lp_shown(const choice *c, size_t upto) {
    int k = 0;
    while (k < c->n_lp && (k == 0 ? 0 : c->lp[k - 1].text_end) < upto) k++;
    if (c->finish && upto == c->len && k < c->n_lp && c->finish[0] == 'l') k = c->n_lp; /* length: all of them */
    return k;
}

static cJSON *envelope(const job *j, bool chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", j->kind == JOB_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                             : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->model);
    cJSON_AddNullToObject(o, "system_fingerprint");
    return o;
}

char *openai_response(job *j, const gm_tokenizer *tok) {
    cJSON *o = envelope(j, false), *choices = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < j->n; i++) {
        const choice *c = &j->ch[i];
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", i);
        if (j->kind == JOB_CHAT) {
            cJSON *msg = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            cJSON_AddItemToObject(msg, "content", text_item(c->text ? c->text : "", c->len));
            cJSON_AddNullToObject(msg, "refusal");
        } else {
            cJSON_AddItemToObject(ch, "text", text_item(c->text ? c->text : "", c->len));
        }
        if (j->logprobs) cJSON_AddItemToObject(ch, "logprobs", logprobs_json(j->kind, c->lp, lp_shown(c, c->len), 0, tok));
        else cJSON_AddNullToObject(ch, "logprobs");
        cJSON_AddStringToObject(ch, "finish_reason", c->finish ? c->finish : "length");
        cJSON_AddItemToArray(choices, ch);
    }
    cJSON_AddItemToObject(o, "usage", usage_json(j));
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

/* ---------------------------------------------------------------- streaming */

static bool put_event(job *j, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    const bool ok = s && job_out(j, "data: ", 6) && job_out(j, s, strlen(s)) && job_out(j, "\n\n", 2);
    free(s);
    return ok;
}

/* Copies n bytes of text into the view; false on out of memory. */
static bool view_text(stream_view *v, const char *t, size_t n, size_t *off) {
    char *p = realloc(v->text, v->text_len + n + 1);
    if (!p) return v->oom = true, false;
    v->text = p;
    memcpy(v->text + v->text_len, t, n);
    *off = v->text_len;
    v->text_len += n;
    return true;
}

static bool view_lp(stream_view *v, const choice *c, int from, int to, stream_piece *pc) {
    pc->lp_off = v->n_lp;
    pc->lp_n = to - from;
    pc->lp_first_offset = from ? c->lp[from - 1].text_end : 0;
    if (to <= from) return true;
    lp_entry *p = realloc(v->lp, (size_t)(v->n_lp + to - from) * sizeof *p);
    if (!p) return v->oom = true, false;
    v->lp = p;
    memcpy(v->lp + v->n_lp, c->lp + from, (size_t)(to - from) * sizeof *p);
    v->n_lp += to - from;
    return true;
}

/* The pieces choice i has to send now (the same order of events as it is made visible). */
static void take_choice(job *j, int i, stream_view *v) {
    choice *c = &j->ch[i];
    if (!c->role_sent && j->kind == JOB_CHAT) {
        v->piece[v->n_pieces++] = (stream_piece){.choice = i, .role = true};
        c->role_sent = true;
    }
    if (c->visible > c->sent) {
        stream_piece *pc = &v->piece[v->n_pieces++];
        *pc = (stream_piece){.choice = i, .has_text = true, .text_n = c->visible - c->sent};
        view_text(v, c->text + c->sent, c->visible - c->sent, &pc->text_off);
        const int k = lp_shown(c, c->visible);
        if (j->logprobs && k > c->lp_sent && view_lp(v, c, c->lp_sent, k, pc)) c->lp_sent = k;
        c->sent = c->visible;
    }
    if (c->finish && !c->finish_sent && c->sent == c->len) {
        stream_piece *pc = &v->piece[v->n_pieces++];
        *pc = (stream_piece){.choice = i, .finish = c->finish};
        const int k = lp_shown(c, c->len);
        if (j->logprobs && k > c->lp_sent && view_lp(v, c, c->lp_sent, k, pc)) c->lp_sent = k;
        c->finish_sent = true;
    }
}

bool openai_stream_take(job *j, stream_view *v) {
    memset(v, 0, sizeof *v);
    if (j->stream_closed) return false;
    if (j->err_http) { /* after a 200 has started: the error as a data event, then the end */
        v->error = true;
        memcpy(v->err_type, j->err_type, sizeof v->err_type);
        memcpy(v->err_code, j->err_code, sizeof v->err_code);
        memcpy(v->err_msg, j->err_msg, sizeof v->err_msg);
        j->stream_closed = true;
        return true;
    }
    if (!j->started) return false;
    bool all = true;
    for (int i = 0; i < j->n; i++) {
        take_choice(j, i, v);
        all = all && j->ch[i].finish_sent;
    }
    if (all && j->done) {
        v->end = true;
        v->n_prompt = j->n_prompt;
        v->cached = j->cached;
        for (int i = 0; i < j->n; i++) v->gen += j->ch[i].n_gen;
        j->stream_closed = true;
    }
    if (v->oom) { /* what was taken cannot be sent: the stream ends with the error */
        v->error = true;
        snprintf(v->err_type, sizeof v->err_type, "server_error");
        snprintf(v->err_msg, sizeof v->err_msg, "out of memory while streaming");
        j->stream_closed = true;
    }
    return v->n_pieces > 0 || v->end || v->error;
}

void stream_view_free(stream_view *v) {
    free(v->text);
    free(v->lp);
    v->text = NULL;
    v->lp = NULL;
}

/* One chunk: delta text (or role), log-probabilities, finish reason. */
static void put_piece(job *j, const stream_view *v, const stream_piece *pc, const gm_tokenizer *tok) {
    cJSON *o = envelope(j, true), *choices = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
    const char *text = pc->has_text && v->text ? v->text + pc->text_off : NULL;
    const size_t n = text ? pc->text_n : 0;
    cJSON_AddNumberToObject(ch, "index", pc->choice);
    if (j->kind == JOB_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(ch, "delta");
        if (pc->role) cJSON_AddStringToObject(d, "role", "assistant");
        if (pc->role || text) cJSON_AddItemToObject(d, "content", text_item(text ? text : "", n));
    } else {
        cJSON_AddItemToObject(ch, "text", text_item(text ? text : "", n));
    }
    if (pc->lp_n > 0 && v->lp)
        cJSON_AddItemToObject(ch, "logprobs", logprobs_json(j->kind, v->lp + pc->lp_off, pc->lp_n, pc->lp_first_offset, tok));
    else cJSON_AddNullToObject(ch, "logprobs");
    if (pc->finish) cJSON_AddStringToObject(ch, "finish_reason", pc->finish);
    else cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(choices, ch);
    if (j->include_usage) cJSON_AddNullToObject(o, "usage");
    put_event(j, o);
}

void openai_stream_render(job *j, const stream_view *v, const gm_tokenizer *tok) {
    if (v->error) {
        char *e = openai_error_json(v->err_type, v->err_code, v->err_msg);
        job_out(j, "data: ", 6);
        if (e) job_out(j, e, strlen(e));
        job_out(j, "\n\ndata: [DONE]\n\n", 16);
        free(e);
        return;
    }
    for (int k = 0; k < v->n_pieces; k++) put_piece(j, v, &v->piece[k], tok);
    if (!v->end) return;
    if (j->include_usage) {
        cJSON *o = envelope(j, true);
        cJSON_AddArrayToObject(o, "choices");
        cJSON *u = cJSON_CreateObject();
        cJSON_AddNumberToObject(u, "prompt_tokens", v->n_prompt);
        cJSON_AddNumberToObject(u, "completion_tokens", v->gen);
        cJSON_AddNumberToObject(u, "total_tokens", v->n_prompt + v->gen);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", v->cached);
        cJSON_AddItemToObject(o, "usage", u);
        put_event(j, o);
    }
    job_out(j, "data: [DONE]\n\n", 14);
}
