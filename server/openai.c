/* server/openai.c — the OpenAI wire format: request bodies into jobs (every field checked: a wrong type
 * or an out-of-range value is a 400 naming the field, never a default silently used), and jobs into
 * responses and Server-Sent Events chunks. Unknown fields are ignored, as OpenAI's API does. */
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

/* "stop": a string or a list of strings, each non-empty. */
static bool get_stop(job *j, const cJSON *o) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "stop");
    if (!v || cJSON_IsNull(v)) return true;
    const cJSON *one[1] = {v};
    const int n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0) return bad(j, "'%s' must be a string or a list of strings", "stop");
    if (n > SRV_MAX_STOP) {
        job_fail(j, 400, "invalid_request_error", NULL, "'stop' has %d entries; at most %d", n, SRV_MAX_STOP);
        return false;
    }
    for (int i = 0; i < n; i++) {
        const cJSON *s = cJSON_IsString(v) ? one[0] : cJSON_GetArrayItem(v, i);
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

/* "messages" -> ids through gm_chat_tokenize: contents are text, never control tokens. */
static bool chat_prompt(job *j, const cJSON *root, const gm_tokenizer *tok) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(msgs)) return bad(j, "'%s' must be a list of messages", "messages");
    const int n = cJSON_GetArraySize(msgs);
    if (n == 0) return bad(j, "'%s' is empty", "messages");
    if (n > 4096) return bad(j, "'%s' has too many entries (at most 4096)", "messages");
    gm_chat_message *m = calloc((size_t)n, sizeof *m);
    char **owned = calloc((size_t)n, sizeof *owned);
    bool ok = m && owned;
    for (int i = 0; ok && i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(msgs, i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
        if (!cJSON_IsString(role)) {
            ok = bad(j, "every message needs a string '%s'", "role");
            break;
        }
        const char *r = role->valuestring;
        if (!strcmp(r, "developer")) r = "system"; /* OpenAI's newer name for the system role */
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant")) {
            job_fail(j, 400, "invalid_request_error", NULL,
                     "messages[%d].role '%.40s' is not supported (system, developer, user, assistant)", i, r);
            ok = false;
            break;
        }
        if (!strcmp(r, "system") && i > 0) {
            job_fail(j, 400, "invalid_request_error", NULL, "messages[%d]: a system message may only come first", i);
            ok = false;
            break;
        }
        m[i].role = r;
        ok = (m[i].content = owned[i] = message_text(j, cJSON_GetObjectItemCaseSensitive(e, "content"), i)) != NULL;
        if (!ok && !j->err_http) job_fail(j, 500, "server_error", NULL, "out of memory");
    }
    if (ok) {
        gm_error err = {0};
        size_t nid = 0;
        if (gm_chat_tokenize(tok, m, (size_t)n, true, &j->prompt, &nid, &err)) {
            job_fail(j, err.code == GM_ERR_NOMEM ? 500 : 400, "invalid_request_error", NULL, "messages: %s", err.msg);
            ok = false;
        }
        j->n_prompt = (int)nid;
    }
    for (int i = 0; owned && i < n; i++) free(owned[i]);
    free(owned);
    free(m);
    return ok;
}

/* "prompt": a string (control-token texts parsed: a raw completion writes its own template), a list of
 * one string, or a list of token ids. */
static bool completion_prompt(job *j, const cJSON *root, const gm_tokenizer *tok) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(cJSON_GetArrayItem(p, 0)))
        p = cJSON_GetArrayItem(p, 0);
    if (cJSON_IsString(p)) {
        gm_error err = {0};
        size_t nid = 0;
        const size_t len = strlen(p->valuestring);
        if (gm_tokenize(tok, p->valuestring, len, gm_tokenizer_add_bos(tok), true, &j->prompt, &nid, &err)) {
            job_fail(j, 400, "invalid_request_error", NULL, "prompt: %s", err.msg);
            return false;
        }
        j->n_prompt = (int)nid;
        return true;
    }
    if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) == 0)
        return bad(j, "'%s' must be a string, a list of one string, or a non-empty list of token ids", "prompt");
    const int n = cJSON_GetArraySize(p), V = gm_tokenizer_n_vocab(tok);
    if (n > 1 << 20) return bad(j, "'%s' is too long", "prompt");
    if (!(j->prompt = malloc((size_t)n * sizeof *j->prompt))) return bad(j, "out of memory reading '%s'", "prompt");
    const cJSON *e;
    cJSON_ArrayForEach(e, p) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 || e->valuedouble >= V) {
            job_fail(j, 400, "invalid_request_error", NULL,
                     "'prompt': a list must hold only token ids in [0, %d) (batches of prompts are not supported)", V);
            return false;
        }
        j->prompt[j->n_prompt++] = (int32_t)e->valuedouble;
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

bool openai_parse(job *j, job_kind kind, const char *body, size_t len, const gm_tokenizer *tok,
                  const srv_options *o, int n_ctx) {
    j->kind = kind;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) return bad(j, "the body is not valid JSON (%s)", "parse error");
    bool ok = cJSON_IsObject(root) ? true : bad(j, "the body must be a JSON %s", "object");
    ok = ok && sampling_fields(j, root) && output_fields(j, root, kind, o);
    ok = ok && (kind == JOB_CHAT ? chat_prompt(j, root, tok) : completion_prompt(j, root, tok));
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

/* The log-probabilities of entries [from, to) of choice c, in the chat or the legacy shape. */
static cJSON *logprobs_json(const job *j, const choice *c, int from, int to, const gm_tokenizer *tok) {
    if (j->kind == JOB_CHAT) {
        cJSON *o = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(o, "content");
        for (int i = from; i < to; i++) {
            const lp_entry *e = &c->lp[i];
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
    for (int i = from; i < to; i++) {
        const lp_entry *e = &c->lp[i];
        cJSON *t = token_item(tok, e->id, e->lp, false);
        cJSON_AddItemToArray(tokens, cJSON_Duplicate(cJSON_GetObjectItem(t, "token"), true));
        cJSON_Delete(t);
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(e->lp));
        cJSON *top = cJSON_CreateObject();
        for (int k = 0; k < e->n_top; k++) {
            const char *piece = "";
            size_t n = 0;
            gm_token_to_piece(tok, e->top_id[k], true, &piece, &n, NULL);
            char *name = srv_clean_utf8(piece, n);
            if (name && !cJSON_GetObjectItemCaseSensitive(top, name)) cJSON_AddNumberToObject(top, name, e->top_lp[k]);
            free(name);
        }
        cJSON_AddItemToArray(tops, top);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber(i ? (double)c->lp[i - 1].text_end : 0));
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
        if (j->logprobs) cJSON_AddItemToObject(ch, "logprobs", logprobs_json(j, c, 0, lp_shown(c, c->len), tok));
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

/* One chunk for choice i: delta text (or role), log-probabilities, finish reason. */
static void put_chunk(job *j, int i, const char *role, const char *text, size_t n, cJSON *lp, const char *finish) {
    cJSON *o = envelope(j, true), *choices = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", i);
    if (j->kind == JOB_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(ch, "delta");
        if (role) cJSON_AddStringToObject(d, "role", role);
        if (text) cJSON_AddItemToObject(d, "content", text_item(text, n));
    } else {
        cJSON_AddItemToObject(ch, "text", text_item(text ? text : "", text ? n : 0));
    }
    if (lp) cJSON_AddItemToObject(ch, "logprobs", lp);
    else cJSON_AddNullToObject(ch, "logprobs");
    if (finish) cJSON_AddStringToObject(ch, "finish_reason", finish);
    else cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(choices, ch);
    if (j->include_usage) cJSON_AddNullToObject(o, "usage");
    put_event(j, o);
}

static void stream_choice(job *j, int i, const gm_tokenizer *tok) {
    choice *c = &j->ch[i];
    if (!c->role_sent && j->kind == JOB_CHAT) {
        put_chunk(j, i, "assistant", "", 0, NULL, NULL);
        c->role_sent = true;
    }
    if (c->visible > c->sent) {
        const int k = lp_shown(c, c->visible);
        cJSON *lp = j->logprobs && k > c->lp_sent ? logprobs_json(j, c, c->lp_sent, k, tok) : NULL;
        put_chunk(j, i, NULL, c->text + c->sent, c->visible - c->sent, lp, NULL);
        c->sent = c->visible;
        if (lp) c->lp_sent = k;
    }
    if (c->finish && !c->finish_sent && c->sent == c->len) {
        const int k = lp_shown(c, c->len);
        cJSON *lp = j->logprobs && k > c->lp_sent ? logprobs_json(j, c, c->lp_sent, k, tok) : NULL;
        put_chunk(j, i, NULL, NULL, 0, lp, c->finish);
        c->finish_sent = true;
    }
}

bool openai_stream_more(job *j, const gm_tokenizer *tok) {
    if (j->stream_closed) return true;
    if (j->err_http) { /* after a 200 has started: the error as a data event, then the end */
        char *e = openai_error_json(j->err_type, j->err_code, j->err_msg);
        job_out(j, "data: ", 6);
        if (e) job_out(j, e, strlen(e));
        job_out(j, "\n\ndata: [DONE]\n\n", 16);
        free(e);
        j->stream_closed = true;
        return true;
    }
    if (!j->started) return false;
    bool all = true;
    for (int i = 0; i < j->n; i++) {
        stream_choice(j, i, tok);
        all = all && j->ch[i].finish_sent;
    }
    if (!all || !j->done) return false;
    if (j->include_usage) {
        cJSON *o = envelope(j, true);
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", usage_json(j));
        put_event(j, o);
    }
    job_out(j, "data: [DONE]\n\n", 14);
    j->stream_closed = true;
    return true;
}
