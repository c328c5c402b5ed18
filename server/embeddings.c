/* server/embeddings.c — POST /v1/embeddings in the OpenAI format, served by an embedding model.
 *
 * Request: {"input": string | [string, ...] | [id, ...] | [[id, ...], ...], "model"?: string,
 *           "encoding_format"?: "float" | "base64", "dimensions"?: int, "user"?: string}
 * Response: {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...] | "base64"}],
 *            "model": id, "usage": {"prompt_tokens": n, "total_tokens": n}}
 * Vectors are L2-normalised, as OpenAI's are (the model itself does not normalise); "dimensions" keeps the
 * first k components before normalising (EmbeddingGemma is trained for such Matryoshka truncation to 512,
 * 256 or 128). Strings are tokenized as the model's tokenizer config says (BOS, EOS); token ids are used
 * as given. Everything is checked before anything is computed: a bad input, an input longer than the
 * context or a model that is not an embedding model gets a 400 in the OpenAI error format.
 *
 * The embedder is one per server and runs on the connection thread that holds its lock (a model is
 * either generative, with the scheduler, or an embedding model, with this): one forward pass per input,
 * the lock taken per input, so requests interleave input by input; between inputs a request whose
 * client left, or a server that is stopping, ends (status 499 / 503). */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "gemma_generator.h"

enum { MAX_INPUTS = SRV_MAX_EMBED_INPUTS };

typedef struct inputs {
    int32_t **ids;
    int *n;
    int count;
    long total;
} inputs;

static void free_inputs(inputs *in) {
    for (int i = 0; i < in->count; i++) free(in->ids[i]);
    free(in->ids);
    free(in->n);
}

/* A growable string with printf. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0) sb_put(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

static void sb_base64(sbuf *b, const unsigned char *d, size_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        const unsigned v = (unsigned)d[i] << 16 | (i + 1 < n ? (unsigned)d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
        const char q[4] = {A[v >> 18 & 63], A[v >> 12 & 63], i + 1 < n ? A[v >> 6 & 63] : '=', i + 2 < n ? A[v & 63] : '='};
        sb_put(b, q, 4);
    }
}

static char *fail(int *status, int code, const char *err_code, const char *msg) {
    *status = code;
    return openai_error_json(code == 400 ? "invalid_request_error" : "server_error", err_code, msg);
}

static bool add_input(inputs *in, int32_t *ids, int n) {
    if (in->count == MAX_INPUTS) return false;
    in->ids[in->count] = ids;
    in->n[in->count++] = n;
    in->total += n;
    return true;
}

/* One array of token ids; false with msg on a bad item. */
static bool token_array(const cJSON *a, int V, int32_t **out, int *n, char *msg, size_t mlen) {
    const int k = cJSON_GetArraySize(a);
    *out = NULL;
    *n = k;
    if (k == 0) return snprintf(msg, mlen, "'input' holds an empty token array"), false;
    int32_t *ids = malloc((size_t)k * sizeof *ids);
    if (!ids) return snprintf(msg, mlen, "out of memory"), false;
    int i = 0;
    for (const cJSON *e = a->child; e; e = e->next, i++)
        if (!srv_token_id(e, V, &ids[i])) {
            free(ids);
            return snprintf(msg, mlen, "'input' token %d is not a token id in [0, %d)", i, V), false;
        }
    *out = ids;
    return true;
}

/* The request's inputs as token ids; false with msg. */
static bool parse_inputs(const cJSON *input, const gm_model *m, int n_ctx, inputs *in, char *msg, size_t mlen) {
    const int V = gm_tokenizer_n_vocab(gm_model_tokenizer(m));
    const int count = cJSON_IsArray(input) ? cJSON_GetArraySize(input) : 1;
    if (!input || (!cJSON_IsString(input) && !cJSON_IsArray(input)))
        return snprintf(msg, mlen, "'input' must be a string, an array of strings, or array(s) of token ids"), false;
    if (count == 0) return snprintf(msg, mlen, "'input' is an empty array"), false;
    if (count > MAX_INPUTS) return snprintf(msg, mlen, "'input' has %d items, more than %d", count, MAX_INPUTS), false;
    in->ids = calloc((size_t)count, sizeof *in->ids);
    in->n = calloc((size_t)count, sizeof *in->n);
    if (!in->ids || !in->n) return snprintf(msg, mlen, "out of memory"), false;
    if (cJSON_IsArray(input) && cJSON_IsNumber(input->child)) { /* one array of ids */
        int32_t *ids;
        int n;
        if (!token_array(input, V, &ids, &n, msg, mlen)) return false;
        add_input(in, ids, n);
        return true;
    }
    int i = 0;
    for (const cJSON *e = cJSON_IsArray(input) ? input->child : input; e; e = cJSON_IsArray(input) ? e->next : NULL, i++) {
        int32_t *ids = NULL;
        int n = 0;
        if (cJSON_IsString(e)) {
            const size_t len = strlen(e->valuestring);
            if (len == 0) return snprintf(msg, mlen, "'input' item %d is an empty string", i), false;
            const size_t k = gm_tokenizer_max_token_bytes(gm_model_tokenizer(m)); /* refused before tokenizing */
            if (k && len / k > (size_t)n_ctx)
                return snprintf(msg, mlen, "'input' item %d has at least %zu tokens, more than the context size %d", i,
                                len / k, n_ctx), false;
            size_t nt = 0;
            gm_error err = {0};
            if (gm_embed_tokenize(m, e->valuestring, len, &ids, &nt, &err))
                return snprintf(msg, mlen, "'input' item %d: %.700s", i, err.msg), false;
            n = nt > (size_t)INT32_MAX ? INT32_MAX : (int)nt;
        } else if (cJSON_IsArray(e)) {
            if (!token_array(e, V, &ids, &n, msg, mlen)) return false;
        } else {
            return snprintf(msg, mlen, "'input' item %d is neither a string nor an array of token ids", i), false;
        }
        add_input(in, ids, n);
    }
    return true;
}

/* The request's fields and inputs; false with msg. */
static bool parse_request(const srv_embed_ctx *x, const char *body, size_t len, inputs *in, bool *b64, int *keep,
                          char *msg, size_t mlen) {
    cJSON *req = cJSON_ParseWithLength(body ? body : "", len);
    if (!cJSON_IsObject(req)) {
        cJSON_Delete(req);
        return snprintf(msg, mlen, "the body is not a JSON object"), false;
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(req, "encoding_format");
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(req, "dimensions");
    const int dim = gm_embedder_dim(x->e);
    bool ok = true;
    *keep = dim;
    if (fmt && !cJSON_IsNull(fmt)) {
        *b64 = cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "base64");
        if (!*b64 && !(cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "float")))
            ok = false, snprintf(msg, mlen, "'encoding_format' must be \"float\" or \"base64\"");
    }
    if (ok && dims && !cJSON_IsNull(dims)) {
        if (!cJSON_IsNumber(dims) || !(dims->valuedouble >= 1 && dims->valuedouble <= dim) ||
            dims->valuedouble != (double)(int)dims->valuedouble)
            ok = false, snprintf(msg, mlen, "'dimensions' must be an integer in [1, %d]", dim);
        else *keep = (int)dims->valuedouble;
    }
    const cJSON *f;
    cJSON_ArrayForEach(f, req) {
        static const char *const known[] = {"input", "model", "encoding_format", "dimensions", "user"};
        bool k = cJSON_IsNull(f);
        for (size_t i = 0; !k && i < sizeof known / sizeof *known; i++) k = !strcmp(f->string, known[i]);
        if (ok && !k) ok = false, snprintf(msg, mlen, "'%.60s' is not supported by this server", f->string);
    }
    if (ok) ok = parse_inputs(cJSON_GetObjectItemCaseSensitive(req, "input"), x->m, gm_embedder_n_ctx(x->e), in, msg, mlen);
    cJSON_Delete(req);
    return ok;
}

char *srv_embeddings(const srv_embed_ctx *x, const char *body, size_t len, int *status, int *n_prompt) {
    *n_prompt = 0;
    gm_embedder *e = x->e;
    if (!e)
        return fail(status, 400, "model_not_supported",
                    "this server's model is not an embedding model: /v1/embeddings needs one such as EmbeddingGemma");
    char msg[1024];
    inputs in = {0};
    const int dim = gm_embedder_dim(e), n_ctx = gm_embedder_n_ctx(e);
    bool b64 = false;
    int keep = dim;
    guard_parse_enter(x->guard);
    bool ok = parse_request(x, body, len, &in, &b64, &keep, msg, sizeof msg);
    guard_parse_leave(x->guard);
    for (int i = 0; ok && i < in.count; i++)
        if (in.n[i] > n_ctx) {
            snprintf(msg, sizeof msg, "'input' item %d has %d tokens, more than the context size %d", i, in.n[i], n_ctx);
            free_inputs(&in);
            return fail(status, 400, "context_length_exceeded", msg);
        }
    if (!ok) {
        free_inputs(&in);
        return fail(status, 400, NULL, msg);
    }
    float *v = malloc((size_t)dim * sizeof *v);
    sbuf b = {0};
    sb_put(&b, "{\"object\":\"list\",\"data\":[", 25);
    gm_error err = {0};
    gm_status st = v ? GM_OK : GM_ERR_NOMEM;
    bool left = false;
    for (int i = 0; !st && i < in.count; i++) {
        if (x->keep_going && !x->keep_going(x->arg)) {
            left = true;
            break;
        }
        turns_take(x->turns);
        st = gm_embed_tokens(e, in.ids[i], in.n[i], v, &err);
        turns_give(x->turns);
        if (st) break;
        gm_embedding_normalize(v, keep);
        sb_printf(&b, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "", i);
        if (b64) {
            sb_put(&b, "\"", 1);
            sb_base64(&b, (const unsigned char *)v, (size_t)keep * sizeof *v); /* little-endian float32, as OpenAI's */
            sb_put(&b, "\"}", 2);
        } else {
            sb_put(&b, "[", 1);
            for (int k = 0; k < keep; k++) sb_printf(&b, k ? ",%.9g" : "%.9g", (double)v[k]);
            sb_put(&b, "]}", 2);
        }
    }
    free(v);
    if (left) {
        free(b.p);
        free_inputs(&in);
        return fail(status, 499, NULL, "the client went away or the server is stopping");
    }
    if (st || b.oom) {
        free(b.p);
        free_inputs(&in);
        return fail(status, 500, NULL, st ? err.msg : "out of memory");
    }
    char *model_json = srv_clean_utf8(x->model_id, strlen(x->model_id));
    cJSON *mj = cJSON_CreateString(model_json ? model_json : "");
    char *ms = cJSON_PrintUnformatted(mj);
    cJSON_Delete(mj);
    free(model_json);
    sb_printf(&b, "],\"model\":");
    sb_put(&b, ms ? ms : "\"\"", ms ? strlen(ms) : 2);
    free(ms);
    sb_printf(&b, ",\"usage\":{\"prompt_tokens\":%ld,\"total_tokens\":%ld}}", in.total, in.total);
    *n_prompt = in.total > INT32_MAX ? INT32_MAX : (int)in.total;
    free_inputs(&in);
    if (b.oom) {
        free(b.p);
        return fail(status, 500, NULL, "out of memory");
    }
    *status = 200;
    return b.p;
}
