/* server/http.c — the HTTP side of `gemma serve`, on libmicrohttpd with a thread per connection: a
 * connection thread reads and checks the request, hands a job to the scheduler and then blocks on that
 * job (the SSE writer waits for tokens; a non-streaming request waits for the end), watching its socket
 * so a client that hangs up frees its sequences within a step. */
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "server/server.h"

#if MHD_VERSION < 0x00097002
typedef int MHD_Result;
#else
typedef enum MHD_Result MHD_Result;
#endif

typedef struct server {
    const srv_options *o;
    gm_model *m;
    const gm_tokenizer *tok;
    srv_sched *sched;       /* a generative model: the scheduler owns the engine */
    gm_embedder *emb;       /* an embedding model: no scheduler, requests take turns on this */
    pthread_mutex_t emb_mu;
    srv_metrics *met;
    char model_id[128];
    int n_ctx;
    int inflight;       /* requests not yet completed (atomic): shutdown lets them finish writing */
} server;

/* One request on a connection. */
typedef struct req {
    char *body;
    size_t len, cap;
    bool too_big, unauthorized, early_reply;
    int status;
    const char *endpoint;
    double t0;
    int prompt, cached, gen;
} req;

/* ---------------------------------------------------------------- replies */

static const char *g_cors; /* --cors, set once before the daemon starts */

static void add_common_headers(struct MHD_Response *resp) {
    if (g_cors) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", g_cors);
        MHD_add_response_header(resp, "Vary", "Origin");
    }
}

static MHD_Result reply(struct MHD_Connection *c, req *r, int status, const char *type, char *body) {
    if (!body) {
        status = 500;
        type = "application/json";
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
        if (!body) return MHD_NO;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", type);
    add_common_headers(resp);
    if (status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    if (status == 429) MHD_add_response_header(resp, "Retry-After", "1");
    r->status = status;
    MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static MHD_Result reply_json(struct MHD_Connection *c, req *r, int status, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return reply(c, r, status, "application/json", s);
}

static MHD_Result reply_error(struct MHD_Connection *c, req *r, int status, const char *type, const char *code,
                              const char *msg) {
    return reply(c, r, status, "application/json", openai_error_json(type, code, msg));
}

/* ---------------------------------------------------------------- request checks */

static bool authorized(const server *s, struct MHD_Connection *c) {
    if (!s->o->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    const char *k = s->o->api_key;
    const size_t hl = strlen(h), kl = strlen(k);
    unsigned char diff = hl != kl; /* compared in time independent of where they differ */
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)(k[i] ^ (i < hl ? h[i] : 0));
    return diff == 0;
}

static bool is_json_type(struct MHD_Connection *c) {
    const char *t = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    if (!t) return false;
    while (*t == ' ') t++;
    return !strncasecmp(t, "application/json", 16) && (t[16] == 0 || t[16] == ';' || t[16] == ' ');
}

/* Nesting deeper than 64 is refused before cJSON recurses into it; a \u0000 escape would be cut at by
 * every C string below, so it is refused rather than silently dropping the rest of a message. */
static const char *json_shape_problem(const char *b, size_t n) {
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        const char ch = b[i];
        if (in_str) {
            if (ch == '\\' && i + 1 < n) {
                if (b[i + 1] == 'u' && i + 5 < n && !strncmp(b + i + 2, "0000", 4)) return "the body holds a \\u0000 (NUL) character, which is not supported";
                i++;
            } else if (ch == '"') {
                in_str = false;
            }
        } else if (ch == '"') {
            in_str = true;
        } else if (ch == '{' || ch == '[') {
            if (++depth > 64) return "the JSON is nested too deeply (more than 64 levels)";
        } else if (ch == '}' || ch == ']') {
            depth--;
        }
    }
    return NULL;
}

/* ---------------------------------------------------------------- hang-up watch */

/* The peer closed its side (or the socket broke): nobody will read the answer. */
static bool peer_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Waits up to 100 ms for the job to change; false when the client went away (the job is cancelled). */
static bool wait_job(job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    if (!j->done && peer_gone(j->conn_fd)) {
        j->cancelled = true;
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- completions */

typedef struct stream_ctx {
    job *j;
    const server *s;
    req *r;
} stream_ctx;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ctx *x = cls;
    job *j = x->j;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        if (j->out_pos < j->out_len) {
            size_t n = j->out_len - j->out_pos < max ? j->out_len - j->out_pos : max;
            memcpy(buf, j->out + j->out_pos, n);
            j->out_pos += n;
            if (j->out_pos == j->out_len) j->out_pos = j->out_len = 0;
            pthread_mutex_unlock(&j->mu);
            return (ssize_t)n;
        }
        if (j->stream_closed) break;
        if (openai_stream_more(j, x->s->tok) || j->out_len) continue;
        if (!wait_job(j)) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    x->r->gen = 0;
    for (int i = 0; i < j->n; i++) x->r->gen += j->ch[i].n_gen;
    x->r->cached = j->cached;
    pthread_mutex_unlock(&j->mu);
    return MHD_CONTENT_READER_END_OF_STREAM;
}

/* The response is gone (sent, or the connection died): a job still running is abandoned. */
static void stream_free(void *cls) {
    stream_ctx *x = cls;
    pthread_mutex_lock(&x->j->mu);
    if (!x->j->done) x->j->cancelled = true;
    pthread_mutex_unlock(&x->j->mu);
    job_release(x->j);
    free(x);
}

static MHD_Result start_stream(struct MHD_Connection *c, server *s, req *r, job *j) {
    stream_ctx *x = malloc(sizeof *x);
    struct MHD_Response *resp = x ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, x, stream_free) : NULL;
    if (!resp) {
        free(x);
        pthread_mutex_lock(&j->mu);
        j->cancelled = true;
        pthread_mutex_unlock(&j->mu);
        job_release(j);
        return reply_error(c, r, 500, "server_error", NULL, "out of memory");
    }
    *x = (stream_ctx){j, s, r};
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    add_common_headers(resp);
    r->status = 200;
    MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

static MHD_Result finish_blocking(struct MHD_Connection *c, server *s, req *r, job *j) {
    pthread_mutex_lock(&j->mu);
    bool alive = true;
    while (!j->done && (alive = wait_job(j))) {}
    r->cached = j->cached;
    r->gen = 0;
    for (int i = 0; i < j->n; i++) r->gen += j->ch[i].n_gen;
    pthread_mutex_unlock(&j->mu);
    MHD_Result ret;
    if (!alive) { /* nobody to answer: close the connection */
        r->status = 499;
        ret = MHD_NO;
    } else if (j->err_http) {
        ret = reply_error(c, r, j->err_http, j->err_type, j->err_code, j->err_msg);
    } else {
        ret = reply(c, r, 200, "application/json", openai_response(j, s->tok));
    }
    job_release(j);
    return ret;
}

/* A fresh 64-bit value (ids, seeds of requests that give none). */
static uint64_t fresh_u64(void) {
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                 (__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    return x ^ (x >> 29);
}

static MHD_Result completion(struct MHD_Connection *c, server *s, req *r, job_kind kind) {
    if (!s->sched)
        return reply_error(c, r, 400, "invalid_request_error", "model_not_supported",
                           "this server's model is an embedding model: it cannot generate text (use /v1/embeddings)");
    job *j = job_new();
    if (!j) return reply_error(c, r, 500, "server_error", NULL, "out of memory");
    j->model = s->model_id;
    j->created = (long)time(NULL);
    snprintf(j->id, sizeof j->id, "%s%016llx", kind == JOB_CHAT ? "chatcmpl-" : "cmpl-", (unsigned long long)fresh_u64());
    j->t_submit = srv_now();
    j->smp.seed = fresh_u64(); /* kept unless the request gives a seed */
    if (!openai_parse(j, kind, r->body ? r->body : "", r->len, s->tok, s->o, s->n_ctx)) {
        MHD_Result ret = reply_error(c, r, j->err_http, j->err_type, j->err_code, j->err_msg);
        job_release(j);
        return ret;
    }
    r->prompt = j->n_prompt;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->conn_fd = ci ? ci->connect_fd : -1;
    if (!sched_submit(s->sched, j)) {
        job_release(j);
        return reply_error(c, r, 429, "rate_limit_error", NULL,
                           "the server is busy: every slot is taken and the queue is full (--parallel, --queue); retry later");
    }
    return j->stream ? start_stream(c, s, r, j) : finish_blocking(c, s, r, j);
}

static MHD_Result embeddings(struct MHD_Connection *c, server *s, req *r) {
    int status = 500;
    char *out = srv_embeddings(s->emb, &s->emb_mu, s->m, s->model_id, r->body, r->len, &status, &r->prompt);
    return reply(c, r, status, "application/json", out);
}

/* ---------------------------------------------------------------- small endpoints */

static MHD_Result tokenize(struct MHD_Connection *c, server *s, req *r) {
    cJSON *in = cJSON_ParseWithLength(r->body ? r->body : "", r->len);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(in, "content");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(in, "add_special");
    const cJSON *parse = cJSON_GetObjectItemCaseSensitive(in, "parse_special");
    if (!cJSON_IsString(content) || (add && !cJSON_IsBool(add)) || (parse && !cJSON_IsBool(parse))) {
        cJSON_Delete(in);
        return reply_error(c, r, 400, "invalid_request_error", NULL,
                           "expected {\"content\": string, \"add_special\"?: bool, \"parse_special\"?: bool}");
    }
    int32_t *ids = NULL;
    size_t n = 0;
    gm_error err = {0};
    gm_status st = gm_tokenize(s->tok, content->valuestring, strlen(content->valuestring), cJSON_IsTrue(add),
                               !parse || cJSON_IsTrue(parse), &ids, &n, &err);
    cJSON_Delete(in);
    if (st) return reply_error(c, r, 400, "invalid_request_error", NULL, err.msg);
    cJSON *o = cJSON_CreateObject(), *t = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(t, cJSON_CreateNumber(ids[i]));
    free(ids);
    return reply_json(c, r, 200, o);
}

static MHD_Result detokenize(struct MHD_Connection *c, server *s, req *r) {
    cJSON *in = cJSON_ParseWithLength(r->body ? r->body : "", r->len);
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(in, "tokens");
    const int n = cJSON_IsArray(toks) ? cJSON_GetArraySize(toks) : -1, V = gm_tokenizer_n_vocab(s->tok);
    int32_t *ids = n > 0 ? malloc((size_t)n * sizeof *ids) : NULL;
    bool ok = n == 0 || (n > 0 && ids);
    for (int i = 0; ok && i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(toks, i);
        ok = cJSON_IsNumber(e) && e->valuedouble == (double)(int32_t)e->valuedouble && e->valuedouble >= 0 &&
             e->valuedouble < V;
        if (ok) ids[i] = (int32_t)e->valuedouble;
    }
    cJSON_Delete(in);
    char *text = NULL;
    size_t len = 0;
    gm_error err = {0};
    if (!ok || gm_detokenize(s->tok, ids, (size_t)(n > 0 ? n : 0), false, &text, &len, &err)) {
        free(ids);
        char msg[128];
        snprintf(msg, sizeof msg, "expected {\"tokens\": [token ids in [0, %d)]}", V);
        return reply_error(c, r, 400, "invalid_request_error", NULL, msg);
    }
    free(ids);
    cJSON *o = cJSON_CreateObject();
    char *clean = srv_clean_utf8(text, len); /* invalid UTF-8 cannot travel in JSON */
    cJSON_AddStringToObject(o, "content", clean ? clean : "");
    free(clean);
    free(text);
    return reply_json(c, r, 200, o);
}

static MHD_Result models(struct MHD_Connection *c, server *s, req *r) {
    cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "gemma.c");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddNumberToObject(meta, "n_ctx", s->n_ctx);
    cJSON_AddNumberToObject(meta, "n_vocab", gm_tokenizer_n_vocab(s->tok));
    cJSON_AddNumberToObject(meta, "parallel", s->o->parallel);
    cJSON_AddItemToArray(data, m);
    return reply_json(c, r, 200, o);
}

/* ---------------------------------------------------------------- routing */

typedef enum {
    R_NONE, R_PAGE, R_HEALTH, R_MODELS, R_METRICS, R_CHAT, R_COMPLETION, R_TOKENIZE, R_DETOKENIZE, R_EMBEDDINGS
} route;

static route route_of(const char *url, bool *post) {
    static const struct {
        const char *path;
        route r;
        bool post;
    } table[] = {
        {"/", R_PAGE, false},
        {"/index.html", R_PAGE, false},
        {"/health", R_HEALTH, false},
        {"/v1/health", R_HEALTH, false},
        {"/v1/models", R_MODELS, false},
        {"/models", R_MODELS, false},
        {"/metrics", R_METRICS, false},
        {"/v1/chat/completions", R_CHAT, true},
        {"/chat/completions", R_CHAT, true},
        {"/v1/completions", R_COMPLETION, true},
        {"/completions", R_COMPLETION, true},
        {"/tokenize", R_TOKENIZE, true},
        {"/detokenize", R_DETOKENIZE, true},
        {"/v1/embeddings", R_EMBEDDINGS, true},
        {"/embeddings", R_EMBEDDINGS, true},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(url, table[i].path)) {
            *post = table[i].post;
            return table[i].r;
        }
    return R_NONE;
}

static const char *endpoint_name(route rt) {
    static const char *names[] = {"other", "/", "/health", "/v1/models", "/metrics", "/v1/chat/completions",
                                  "/v1/completions", "/tokenize", "/detokenize", "/v1/embeddings"};
    return names[rt];
}

static MHD_Result dispatch(struct MHD_Connection *c, server *s, req *r, route rt) {
    switch (rt) {
    case R_PAGE: {
        char *page = malloc(srv_chat_html_len + 1);
        if (page) memcpy(page, srv_chat_html, srv_chat_html_len + 1);
        return reply(c, r, 200, "text/html; charset=utf-8", page);
    }
    case R_HEALTH: return reply(c, r, 200, "application/json", strdup("{\"status\":\"ok\"}"));
    case R_MODELS: return models(c, s, r);
    case R_METRICS: return reply(c, r, 200, "text/plain; version=0.0.4", metrics_render(s->met, s->model_id));
    case R_CHAT: return completion(c, s, r, JOB_CHAT);
    case R_COMPLETION: return completion(c, s, r, JOB_COMPLETION);
    case R_TOKENIZE: return tokenize(c, s, r);
    case R_DETOKENIZE: return detokenize(c, s, r);
    case R_EMBEDDINGS: return embeddings(c, s, r);
    default: return reply_error(c, r, 404, "invalid_request_error", NULL, "no such endpoint");
    }
}

/* The first call of a request sees only its headers: refuse early what needs no body to refuse. */
static MHD_Result first_call(struct MHD_Connection *c, server *s, req *r, route rt, bool want_post, const char *method) {
    const bool is_post = !strcmp(method, "POST"), is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (rt == R_NONE) return reply_error(c, r, 404, "invalid_request_error", NULL, "no such endpoint");
    if (g_cors && !strcmp(method, "OPTIONS")) { /* a browser's preflight: no key needed to ask */
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        add_common_headers(resp);
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", want_post ? "POST, OPTIONS" : "GET, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
        r->status = 204;
        MHD_Result ret = MHD_queue_response(c, 204, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    if (want_post ? !is_post : !is_get) {
        char msg[96];
        snprintf(msg, sizeof msg, "this endpoint takes %s", want_post ? "POST" : "GET");
        return reply_error(c, r, 405, "invalid_request_error", NULL, msg);
    }
    if (rt != R_HEALTH && rt != R_PAGE && !authorized(s, c))
        return reply_error(c, r, 401, "invalid_request_error", "invalid_api_key", "a valid API key is needed: Authorization: Bearer <key>");
    if (!want_post) return MHD_YES;
    if (!is_json_type(c))
        return reply_error(c, r, 415, "invalid_request_error", NULL, "the body must be JSON (Content-Type: application/json)");
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > s->o->max_body) {
        char msg[96];
        snprintf(msg, sizeof msg, "the body is larger than %zu bytes (--max-body)", s->o->max_body);
        return reply_error(c, r, 413, "invalid_request_error", NULL, msg);
    }
    return MHD_YES;
}

static MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                             const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    server *s = cls;
    bool want_post = false;
    const route rt = route_of(url, &want_post);
    req *r = *con_cls;
    if (!r) {
        if (!(r = calloc(1, sizeof *r))) return MHD_NO;
        __atomic_add_fetch(&s->inflight, 1, __ATOMIC_ACQ_REL);
        r->t0 = srv_now();
        r->endpoint = endpoint_name(rt);
        *con_cls = r;
        MHD_Result ret = first_call(c, s, r, rt, want_post, method);
        r->early_reply = r->status != 0;
        return ret;
    }
    if (r->early_reply) { /* already answered: drop whatever body follows */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!r->too_big && r->len + *upload_size > s->o->max_body) r->too_big = true;
        if (!r->too_big) {
            if (r->len + *upload_size + 1 > r->cap) {
                size_t cap = (r->len + *upload_size + 1) * 2;
                char *p = realloc(r->body, cap);
                if (!p) return MHD_NO;
                r->body = p;
                r->cap = cap;
            }
            memcpy(r->body + r->len, upload, *upload_size);
            r->len += *upload_size;
            r->body[r->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (!want_post) return dispatch(c, s, r, rt);
    if (r->too_big) {
        char msg[96];
        snprintf(msg, sizeof msg, "the body is larger than %zu bytes (--max-body)", s->o->max_body);
        return reply_error(c, r, 413, "invalid_request_error", NULL, msg);
    }
    if (!gm_text_is_utf8(r->body, r->len) || (r->body && memchr(r->body, 0, r->len)))
        return reply_error(c, r, 400, "invalid_request_error", NULL, "the body is not valid UTF-8 text");
    const char *shape = json_shape_problem(r->body ? r->body : "", r->len);
    if (shape) return reply_error(c, r, 400, "invalid_request_error", NULL, shape);
    return dispatch(c, s, r, rt);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why) {
    server *s = cls;
    req *r = *con_cls;
    if (!r) return;
    const int status = r->status ? r->status : 499;
    metrics_request(s->met, r->endpoint, status);
    if (!s->o->quiet) {
        const char *end = why == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed early)";
        if (r->prompt)
            fprintf(stderr, "gemma serve: %s %d %.3fs prompt=%d cached=%d generated=%d%s\n", r->endpoint, status,
                    srv_now() - r->t0, r->prompt, r->cached, r->gen, end);
        else
            fprintf(stderr, "gemma serve: %s %d %.3fs%s\n", r->endpoint, status, srv_now() - r->t0, end);
    }
    free(r->body);
    free(r);
    *con_cls = NULL;
    __atomic_sub_fetch(&s->inflight, 1, __ATOMIC_ACQ_REL);
}

/* ---------------------------------------------------------------- start and stop */

static bool resolve(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len, char *err, size_t n) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    const int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc || !res) {
        snprintf(err, n, "cannot resolve --host '%s': %s", host, gai_strerror(rc));
        return false;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return true;
}

static void model_id_of(const char *path, char *out, size_t n) {
    const char *b = strrchr(path, '/');
    b = b && b[1] ? b + 1 : path;
    size_t k = 0;
    for (; *b && k + 1 < n; b++) /* keeps the id safe inside JSON and Prometheus labels */
        out[k++] = (*b == '"' || *b == '\\' || (unsigned char)*b < 0x20) ? '_' : *b;
    out[k] = 0;
}

int srv_run(const srv_options *o) {
    server s = {.o = o, .emb_mu = PTHREAD_MUTEX_INITIALIZER};
    gm_error err = {0};
    g_cors = o->cors;
    /* SIGINT / SIGTERM go to sigwait below, not to a random thread */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    gm_model_options mo = {0};
    if (gm_model_open(o->model_path, &mo, &s.m, &err)) {
        fprintf(stderr, "gemma serve: %s\n", err.msg);
        return 1;
    }
    s.tok = gm_model_tokenizer(s.m);
    if (o->model_name) snprintf(s.model_id, sizeof s.model_id, "%s", o->model_name);
    else model_id_of(o->model_path, s.model_id, sizeof s.model_id);
    s.met = metrics_new();
    int rc = 1;
    struct MHD_Daemon *d = NULL;
    const gm_config *mc = gm_model_config(s.m);
    /* an embedding model gets an embedder (its context capped at the model's) instead of the scheduler */
    const gm_embedder_options eo = {o->threads, o->n_ctx < mc->context_length ? o->n_ctx : mc->context_length};
    if (!s.met || (mc->is_embedding ? gm_embedder_new(s.m, &eo, &s.emb, &err) : sched_new(s.m, o, s.met, &s.sched, &err))) {
        fprintf(stderr, "gemma serve: %s\n", s.met ? err.msg : "out of memory");
        goto out;
    }
    s.n_ctx = s.emb ? gm_embedder_n_ctx(s.emb) : sched_n_ctx(s.sched);
    struct sockaddr_storage ss;
    socklen_t sl;
    char msg[256];
    if (!resolve(o->host, o->port, &ss, &sl, msg, sizeof msg)) {
        fprintf(stderr, "gemma serve: %s\n", msg);
        goto out;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (ss.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, &s, MHD_OPTION_SOCK_ADDR,
                         (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed, &s,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o->parallel + o->queue + 64),
                         MHD_OPTION_CONNECTION_TIMEOUT, 600u, MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1 << 20),
                         MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "gemma serve: cannot listen on %s:%d (in use, or not an address of this machine?)\n", o->host, o->port);
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "gemma serve: %s, context %d per sequence, %d parallel%s, listening on http://%s%s%s:%u\n",
            s.model_id, s.n_ctx, s.emb ? 1 : o->parallel, s.emb ? " (embedding model: /v1/embeddings)" : "", ss.ss_family == AF_INET6 ? "[" : "", o->host,
            ss.ss_family == AF_INET6 ? "]" : "", di ? di->port : (unsigned)o->port);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "gemma serve: %s: stopping (ending open streams)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;
out:
    if (d) MHD_quiesce_daemon(d); /* no new connections */
    sched_stop(s.sched);          /* every open job ends: its connection thread writes the end and returns */
    for (int i = 0; d && i < 200 && __atomic_load_n(&s.inflight, __ATOMIC_ACQUIRE) > 0; i++) {
        struct timespec ts = {0, 25 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (d) MHD_stop_daemon(d);
    sched_free(s.sched);
    gm_embedder_free(s.emb);
    metrics_free(s.met);
    gm_model_free(s.m);
    return rc;
}
