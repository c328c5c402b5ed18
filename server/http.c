/* server/http.c — the HTTP side of `gemma serve`, on libmicrohttpd with a thread per connection: a
 * connection thread reads and checks the request, hands a job to the scheduler and then blocks on that
 * job (a stream's writer waits for tokens; a non-streaming request waits for the end), watching its socket
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
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/server.h"
#include "gemma_chat.h"
#include "gemma_vision.h"
#include "gemma_generator.h"

#if MHD_VERSION < 0x00097002
typedef int MHD_Result;
#else
typedef enum MHD_Result MHD_Result;
#endif

struct srv {
    srv_options opt;        /* the caller's, with defaults derived from the model filled in */
    const srv_options *o;   /* &opt */
    struct MHD_Daemon *d;
    srv_guard *guard;
    bool loopback_bind;     /* listening on a loopback address only: the Host check applies */
    int state;              /* (atomic) srv_state: what /health says and which requests are taken */
    int working;            /* (atomic) completion and embedding requests not yet completed: a drain waits
                             * for them */
    int host_warned;        /* (atomic) the first Host refusal was logged */
    gm_model *m;
    const gm_tokenizer *tok;
    gm_threadpool *pool;    /* the one pool: the engine (or embedder) and the image encoder take turns on it */
    srv_sched *sched;       /* a generative model: the scheduler owns the engine */
    gm_embedder *emb;       /* an embedding model: no scheduler, requests take turns on this */
    srv_turns emb_turns;    /* embedding requests take the embedder input by input, in turn */
    srv_metrics *met;
    srv_media *media;       /* --mmproj: images in chat requests */
    resp_store *responses;  /* /v1/responses kept for previous_response_id (NULL: --responses-store 0) */
    char model_id[128];
    ollama_facts ollama;    /* what Ollama's model endpoints report */
    char replica_id[128];   /* --replica-id, or host name:port: in /health, /metrics, every response */
    int n_ctx;
    int inflight;       /* requests not yet completed (atomic): shutdown lets them finish writing */
};
typedef struct srv server;

/* A replica's life, as a load balancer sees it through /health: loading (503; the daemon listens while
 * the model opens, so a balancer can tell a slow start from a dead process), ready (200), draining
 * (SIGTERM: 503 to health checks and to new work, running requests finish), stopping (503). */
typedef enum { SRV_LOADING, SRV_READY, SRV_DRAINING, SRV_STOPPING } srv_state;

static srv_state state_of(const struct srv *s) { return (srv_state)__atomic_load_n(&s->state, __ATOMIC_ACQUIRE); }

typedef enum { R_NONE, R_PAGE, R_HEALTH, R_MODELS, R_METRICS, R_GENERATE, R_TOKENIZE, R_DETOKENIZE, R_EMBEDDINGS,
               R_COUNT, R_STORED, R_OLLAMA_VERSION, R_OLLAMA_TAGS, R_OLLAMA_PS, R_OLLAMA_SHOW } route;

/* A path the server answers: what it does, its method, the wire format of its answers and errors, and
 * (R_GENERATE) the endpoint that translates that format. A new protocol is an endpoint and rows here. */
typedef struct route_row {
    const char *path;
    route r;
    bool post;
    srv_protocol proto;
    const gen_endpoint *ep;
    const char *name;       /* in metrics and the request log */
} route_row;

/* One request on a connection. */
typedef struct req {
    char *body;
    size_t len, cap;
    bool too_big, early_reply;
    bool working;           /* counted in server.working */
    srv_protocol proto;     /* the shape of its errors */
    int key;                /* the API key the request gave (index + 1; 0: none) */
    bool http11;
    int status;
    const char *endpoint;
    double t0;
    int prompt, cached, gen;
    const char *url, *method; /* the current call's (MHD's, valid during it) */
} req;

/* ---------------------------------------------------------------- replies */

srv_error srv_error_of(int status, const char *type, const char *code, const char *msg) {
    srv_error e = {.status = status};
    snprintf(e.type, sizeof e.type, "%s", type ? type : "");
    snprintf(e.code, sizeof e.code, "%s", code ? code : "");
    snprintf(e.msg, sizeof e.msg, "%s", msg ? msg : "");
    return e;
}

char *srv_error_json(srv_protocol p, const srv_error *e) {
    switch (p) {
    case PROTO_OPENAI: break;
    case PROTO_ANTHROPIC: return anthropic_error_json(e);
    case PROTO_OLLAMA: return ollama_error_json(e);
    }
    return openai_error_json(e->type, e->code, e->msg);
}

static void add_common_headers(const server *s, struct MHD_Response *resp) {
    /* which replica answered, for clients and tests behind a balancer (also system_fingerprint) */
    MHD_add_response_header(resp, "X-Gemma-Replica", s->replica_id);
    if (s->o->cors) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", s->o->cors);
        MHD_add_response_header(resp, "Vary", "Origin");
    }
}

/* libmicrohttpd judges its inactivity timeout when a callback returns, counting the time spent inside
 * it: a generation or a queue wait longer than the timeout would lose its answer. So whenever the
 * server hands something to send, the connection's clock restarts (setting the timeout resets it only
 * from 0, hence the two calls). */
static void restart_idle_clock(const server *s, struct MHD_Connection *c) {
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->o->idle_timeout);
}

static MHD_Result reply(struct MHD_Connection *c, const server *s, req *r, int status, const char *type, char *body) {
    restart_idle_clock(s, c);
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
    add_common_headers(s, resp);
    if (status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    if (status == 429 || status == 503) MHD_add_response_header(resp, "Retry-After", "1");
    if (status == 503) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    r->status = status;
    MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static MHD_Result reply_json(struct MHD_Connection *c, const server *s, req *r, int status, cJSON *o) {
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return reply(c, s, r, status, "application/json", text);
}

static MHD_Result reply_error(struct MHD_Connection *c, const server *s, req *r, int status, const char *type,
                              const char *code, const char *msg) {
    const srv_error e = srv_error_of(status, type, code, msg);
    return reply(c, s, r, status, "application/json", srv_error_json(r->proto, &e));
}

/* ---------------------------------------------------------------- request checks */

/* Which --api-key the request gives (index + 1), 0 for none that matches. Each key is compared in time
 * independent of where it differs. */
static int key_of(const server *s, struct MHD_Connection *c) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h && !strncasecmp(h, "Bearer ", 7)) h += 7;
    else if (!(h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key"))) return 0; /* Anthropic's header */
    const size_t hl = strlen(h);
    int found = 0;
    for (int i = 0; i < s->o->n_api_keys; i++) {
        const char *k = s->o->api_keys[i];
        const size_t kl = strlen(k);
        unsigned char diff = hl != kl;
        for (size_t b = 0; b < kl; b++) diff |= (unsigned char)(k[b] ^ (b < hl ? h[b] : 0));
        if (diff == 0 && !found) found = i + 1;
    }
    return found;
}

static bool is_json_type(struct MHD_Connection *c) {
    const char *t = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    if (!t) return false;
    while (*t == ' ') t++;
    return !strncasecmp(t, "application/json", 16) && (t[16] == 0 || t[16] == ';' || t[16] == ' ');
}

/* The most JSON values (strings, numbers, literals, arrays, objects) a body may hold: cJSON keeps ~80
 * bytes per value, so an 8 MiB body of small numbers would cost ~300 MiB parsed. A request needs at most
 * a few values per prompt token; embeddings of token arrays at most their tokens. */
static long max_json_values(const server *s, route rt) {
    return rt == R_EMBEDDINGS ? (long)SRV_MAX_EMBED_INPUTS * (s->n_ctx + 1) + 65536 : 8L * s->n_ctx + 65536;
}

/* Scanned before cJSON sees the body: nesting deeper than 64 is refused before cJSON recurses into it;
 * a \u0000 escape would be cut at by every C string below, so it is refused rather than silently
 * dropping the rest of a message; more values than max_values are refused before they are allocated. */
static const char *json_shape_problem(const char *b, size_t n, long max_values) {
    int depth = 0;
    bool in_str = false;
    long values = 1; /* every value but the first follows a ',' or an opening bracket */
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
            values++;
        } else if (ch == '}' || ch == ']') {
            depth--;
        } else if (ch == ',') {
            values++;
        }
        if (values > max_values) return "the JSON holds too many values for this server's context (a list longer than any prompt it can take)";
    }
    return NULL;
}

/* ---------------------------------------------------------------- hang-up watch */

/* A waiting request's view of its client's socket. */
typedef struct conn_watch {
    int fd;                 /* -1: none */
    bool http11;            /* the client speaks HTTP/1.1: it must accept an interim 100 response */
    bool stream;            /* the answer is a stream: a probe is its keep-alive bytes */
    bool probed;            /* the client half-closed; a probe was written to tell a close from a half-close */
    bool probe_pending;     /* a stream's probe is still to be sent */
} conn_watch;

typedef enum { PEER_HERE, PEER_HALF_CLOSED, PEER_GONE } peer_state;

static peer_state peer_state_of(int fd) {
    if (fd < 0) return PEER_HERE;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return PEER_HERE;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return PEER_GONE;
    return p.revents & POLLRDHUP ? PEER_HALF_CLOSED : PEER_HERE;
}

/* A client that sent its end-of-stream (FIN) may have closed its socket, or only shut down its sending
 * side and still be reading. The two look the same until something is written: a closed socket answers
 * with a reset, which the next poll sees. So the first time, a probe is written that a reading client
 * ignores: for a stream its keep-alive bytes (stream_read sends them; an SSE comment for OpenAI), otherwise an interim "100 Continue",
 * which an HTTP/1.1 client must accept before the final response. An HTTP/1.0 client cannot be probed:
 * its end-of-stream is taken for a departure (proxies such as nginx speak HTTP/1.0 to their upstream by
 * default and close it when their client leaves). */
static bool still_there(conn_watch *w) {
    const peer_state ps = peer_state_of(w->fd);
    if (ps == PEER_GONE) return false;
    if (ps == PEER_HALF_CLOSED && !w->probed) {
        w->probed = true;
        if (w->stream) w->probe_pending = true;
        else if (!w->http11) return false; /* cannot be probed: nginx's default upstream protocol closes so */
        else {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            if (send(w->fd, cont, sizeof cont - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) return false;
        }
    }
    return true;
}

static conn_watch watch_of(struct MHD_Connection *c, const req *r, bool stream) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return (conn_watch){.fd = ci ? ci->connect_fd : -1, .http11 = r->http11, .stream = stream};
}

/* Waits up to 100 ms for the job to change (under j->mu); false when the client went away (the job is
 * cancelled). */
static bool wait_job(job *j, conn_watch *w) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* job_new makes the condition variable wait on this clock */
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    if (!j->done && !still_there(w)) {
        j->cancelled = true;
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- generation endpoints */

/* The HTTP status of a failed job. */
static int job_status(job_error e) {
    return e == JOB_ERR_REQUEST ? 400 : e == JOB_ERR_UNAVAILABLE ? 503 : 500;
}

/* A streamed answer: the job, the endpoint that renders it, the reader's marks and the bytes not yet
 * sent. All of it belongs to this connection's thread. */
typedef struct stream_ctx {
    job *j;
    const gen_endpoint *ep;
    void *call;
    job_reader rd;
    srv_buf out;
    conn_watch w;
    server *s;
    req *r;
    struct MHD_Connection *c;
} stream_ctx;

/* Bytes the stream's readers skip (the endpoint's, an SSE comment for OpenAI): the half-close probe, and
 * a keep-alive after SRV_KEEPALIVE seconds of silence so that proxies and idle timeouts do not take a
 * stream still waiting in the queue for dead. */
static ssize_t keepalive(stream_ctx *x, char *buf, size_t max) {
    const size_t len = strlen(x->ep->stream_keepalive), n = len < max ? len : max;
    memcpy(buf, x->ep->stream_keepalive, n);
    restart_idle_clock(x->s, x->c);
    return (ssize_t)n;
}

static size_t take_out(srv_buf *b, char *buf, size_t max) {
    const size_t n = b->len - b->pos < max ? b->len - b->pos : max;
    memcpy(buf, b->p + b->pos, n);
    b->pos += n;
    if (b->pos == b->len) b->pos = b->len = 0;
    return n;
}

/* MHD asks for more of the stream. The bytes are rendered here, outside the job's lock (the scheduler
 * takes it for every token): under the lock only the new text and log-probabilities are copied out
 * (job_stream_take). */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *x = cls;
    job *j = x->j;
    for (;;) {
        if (x->out.pos < x->out.len) {
            restart_idle_clock(x->s, x->c);
            return (ssize_t)take_out(&x->out, buf, max);
        }
        if (x->rd.closed) break;
        stream_view v;
        const double t0 = srv_now();
        pthread_mutex_lock(&j->mu);
        bool have = job_stream_take(j, &x->rd, &v), quiet = false;
        while (!have && !x->w.probe_pending && !(quiet = srv_now() - t0 > SRV_KEEPALIVE)) {
            if (!wait_job(j, &x->w)) {
                pthread_mutex_unlock(&j->mu);
                sched_withdraw(x->s->sched, j);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            have = job_stream_take(j, &x->rd, &v);
        }
        const bool comment = !have && (x->w.probe_pending || quiet);
        x->w.probe_pending = false;
        pthread_mutex_unlock(&j->mu);
        if (comment) return keepalive(x, buf, max);
        x->ep->render(x->call, &v, x->s->tok, &x->out);
        stream_view_free(&v);
    }
    pthread_mutex_lock(&j->mu);
    x->r->gen = job_generated(j);
    x->r->cached = j->cached;
    pthread_mutex_unlock(&j->mu);
    return MHD_CONTENT_READER_END_OF_STREAM;
}

/* The response is gone (sent, or the connection died): a job still running is abandoned. */
static void stream_free(void *cls) {
    stream_ctx *x = cls;
    pthread_mutex_lock(&x->j->mu);
    const bool abandoned = !x->j->done;
    if (abandoned) x->j->cancelled = true;
    pthread_mutex_unlock(&x->j->mu);
    if (abandoned) sched_withdraw(x->s->sched, x->j);
    job_release(x->j);
    x->ep->free_call(x->call);
    srv_buf_free(&x->out);
    free(x);
}

static MHD_Result start_stream(struct MHD_Connection *c, server *s, req *r, job *j, const gen_endpoint *ep, void *call) {
    stream_ctx *x = calloc(1, sizeof *x);
    struct MHD_Response *resp = x ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, x, stream_free) : NULL;
    if (!resp) {
        free(x);
        pthread_mutex_lock(&j->mu);
        j->cancelled = true;
        pthread_mutex_unlock(&j->mu);
        sched_withdraw(s->sched, j);
        job_release(j);
        ep->free_call(call);
        return reply_error(c, s, r, 500, "server_error", NULL, "out of memory");
    }
    *x = (stream_ctx){.j = j, .ep = ep, .call = call, .w = watch_of(c, r, true), .s = s, .r = r, .c = c};
    MHD_add_response_header(resp, "Content-Type", ep->stream_type);
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    add_common_headers(s, resp);
    r->status = 200;
    MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

static MHD_Result finish_blocking(struct MHD_Connection *c, server *s, req *r, job *j, const gen_endpoint *ep, void *call) {
    conn_watch w = watch_of(c, r, false);
    pthread_mutex_lock(&j->mu);
    bool alive = true;
    while (!j->done && (alive = wait_job(j, &w))) {}
    r->cached = j->cached;
    r->gen = job_generated(j);
    pthread_mutex_unlock(&j->mu);
    MHD_Result ret;
    if (!alive) { /* nobody to answer: close the connection */
        sched_withdraw(s->sched, j);
        r->status = 499;
        ret = MHD_NO;
    } else if (j->err) {
        ret = reply_error(c, s, r, job_status(j->err), "server_error", NULL, j->err_msg);
    } else {
        ret = reply(c, s, r, 200, "application/json", ep->response(call, j, s->tok));
    }
    job_release(j);
    ep->free_call(call);
    return ret;
}

/* A generation request: the endpoint reads it into a job, the scheduler runs it, the endpoint writes it. */
static MHD_Result completion(struct MHD_Connection *c, server *s, req *r, const gen_endpoint *ep) {
    if (!s->sched)
        return reply_error(c, s, r, 400, "invalid_request_error", "model_not_supported",
                           "this server's model is an embedding model: it cannot generate text (use /v1/embeddings)");
    job *j = job_new();
    if (!j) return reply_error(c, s, r, 500, "server_error", NULL, "out of memory");
    j->t_submit = srv_now();
    j->rq.smp.seed = srv_fresh_u64(); /* kept unless the request gives a seed */
    j->rq.prefix_scope = s->o->prefix_scope_key ? (uint64_t)r->key : 0;
    const gen_call_in in = {r->body, r->len, s->tok, s->o, s->n_ctx, s->model_id, s->media, s->responses, r->key};
    srv_error e = {0};
    guard_parse_enter(s->guard);
    void *call = ep->parse(&in, &j->rq, &e);
    guard_parse_leave(s->guard);
    if (!call) {
        job_release(j);
        return reply_error(c, s, r, e.status, e.type, e.code, e.msg);
    }
    r->prompt = j->rq.n_prompt;
    const submit_result sr = sched_submit(s->sched, j);
    if (sr != SUBMIT_OK) {
        job_release(j);
        ep->free_call(call);
        if (sr == SUBMIT_STOPPING)
            return reply_error(c, s, r, 503, "server_error", NULL, "the server is shutting down");
        return reply_error(c, s, r, 429, "rate_limit_error", NULL,
                           "the server is busy: every slot is taken and the queue is full (--parallel, --queue); retry later");
    }
    return j->rq.stream ? start_stream(c, s, r, j, ep, call) : finish_blocking(c, s, r, j, ep, call);
}

typedef struct embed_watch {
    server *s;
    conn_watch w; /* still_there() decides as for completions */
} embed_watch;

static bool embed_keep_going(void *arg) {
    embed_watch *w = arg;
    return state_of(w->s) != SRV_STOPPING && still_there(&w->w);
}

static MHD_Result embeddings(struct MHD_Connection *c, server *s, req *r, srv_protocol proto) {
    int status = 500;
    embed_watch w = {.s = s, .w = watch_of(c, r, false)};
    const srv_embed_ctx x = {s->emb, &s->emb_turns, s->m, s->model_id, s->guard, embed_keep_going, &w};
    char *out = proto == PROTO_OLLAMA ? ollama_embed(&x, &s->ollama, r->body, r->len, &status, &r->prompt)
                                      : srv_embeddings(&x, r->body, r->len, &status, &r->prompt);
    if (status == 499 && state_of(s) == SRV_STOPPING) {
        free(out);
        return reply_error(c, s, r, 503, "server_error", NULL, "the server is shutting down");
    }
    if (status == 499) { /* the client left mid-request: nobody to answer */
        free(out);
        r->status = 499;
        return MHD_NO;
    }
    return reply(c, s, r, status, "application/json", out);
}

/* A counting endpoint (/v1/responses/input_tokens, Anthropic's /v1/messages/count_tokens): the request read
 * as its generating twin reads it, answered (the endpoint's response() of a job never submitted) with its
 * prompt's size; nothing runs. */
static MHD_Result count_tokens(struct MHD_Connection *c, server *s, req *r, const gen_endpoint *ep) {
    if (!s->sched)
        return reply_error(c, s, r, 400, "invalid_request_error", "model_not_supported",
                           "this server's model is an embedding model: it has no chat format");
    job *j = job_new();
    if (!j) return reply_error(c, s, r, 500, "server_error", NULL, "out of memory");
    const gen_call_in in = {r->body, r->len, s->tok, s->o, s->n_ctx, s->model_id, s->media, s->responses, r->key};
    srv_error e = {0};
    guard_parse_enter(s->guard);
    void *call = ep->parse(&in, &j->rq, &e);
    guard_parse_leave(s->guard);
    char *out = call ? ep->response(call, j, s->tok) : NULL;
    if (call) ep->free_call(call);
    r->prompt = j->rq.n_prompt;
    job_release(j);
    if (!call) return reply_error(c, s, r, e.status, e.type, e.code, e.msg);
    return reply(c, s, r, 200, "application/json", out);
}

/* GET or DELETE /v1/responses/{id}: a response kept for previous_response_id, under the request's key. */
static MHD_Result stored_response(struct MHD_Connection *c, server *s, req *r, const char *url, const char *method) {
    const char *id = url + strlen("/v1/responses/");
    int status = 500;
    char *out = resp_store_answer(s->responses, r->key, id, !strcmp(method, "DELETE"), &status);
    return reply(c, s, r, status, "application/json", out);
}

/* ---------------------------------------------------------------- small endpoints */

static MHD_Result tokenize(struct MHD_Connection *c, server *s, req *r) {
    guard_parse_enter(s->guard);
    cJSON *in = cJSON_ParseWithLength(r->body ? r->body : "", r->len);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(in, "content");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(in, "add_special");
    const cJSON *parse = cJSON_GetObjectItemCaseSensitive(in, "parse_special");
    if (!cJSON_IsString(content) || (add && !cJSON_IsBool(add)) || (parse && !cJSON_IsBool(parse))) {
        cJSON_Delete(in);
        guard_parse_leave(s->guard);
        return reply_error(c, s, r, 400, "invalid_request_error", NULL,
                           "expected {\"content\": string, \"add_special\"?: bool, \"parse_special\"?: bool}");
    }
    const size_t len = strlen(content->valuestring), k = gm_tokenizer_max_token_bytes(s->tok);
    if (k && len / k > (size_t)s->n_ctx) { /* its token list alone would cost ~80 bytes a token as JSON */
        cJSON_Delete(in);
        guard_parse_leave(s->guard);
        char msg[160];
        snprintf(msg, sizeof msg, "'content' has at least %zu tokens, more than this server's context (%d)", len / k, s->n_ctx);
        return reply_error(c, s, r, 400, "invalid_request_error", "context_length_exceeded", msg);
    }
    int32_t *ids = NULL;
    size_t n = 0;
    gm_error err = {0};
    gm_status st = gm_tokenize(s->tok, content->valuestring, len, cJSON_IsTrue(add),
                               !parse || cJSON_IsTrue(parse), &ids, &n, &err);
    cJSON_Delete(in);
    guard_parse_leave(s->guard);
    if (st) return reply_error(c, s, r, 400, "invalid_request_error", NULL, err.msg);
    cJSON *o = cJSON_CreateObject(), *t = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(t, cJSON_CreateNumber(ids[i]));
    free(ids);
    return reply_json(c, s, r, 200, o);
}

static MHD_Result detokenize(struct MHD_Connection *c, server *s, req *r) {
    guard_parse_enter(s->guard);
    cJSON *in = cJSON_ParseWithLength(r->body ? r->body : "", r->len);
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(in, "tokens");
    const int n = cJSON_IsArray(toks) ? cJSON_GetArraySize(toks) : -1, V = gm_tokenizer_n_vocab(s->tok);
    int32_t *ids = n > 0 ? malloc((size_t)n * sizeof *ids) : NULL;
    bool ok = n == 0 || (n > 0 && ids);
    int i = 0;
    const cJSON *e;
    if (ok && n > 0) /* walked once: cJSON_GetArrayItem(i) in a loop would be quadratic */
        cJSON_ArrayForEach(e, toks) if (!(ok = srv_token_id(e, V, &ids[i++]))) break;
    cJSON_Delete(in);
    char *text = NULL;
    size_t len = 0;
    gm_error err = {0};
    if (ok) ok = !gm_detokenize(s->tok, ids, (size_t)(n > 0 ? n : 0), false, &text, &len, &err);
    guard_parse_leave(s->guard);
    free(ids);
    if (!ok) {
        char msg[128];
        snprintf(msg, sizeof msg, "expected {\"tokens\": [token ids in [0, %d)]}", V);
        return reply_error(c, s, r, 400, "invalid_request_error", NULL, msg);
    }
    cJSON *o = cJSON_CreateObject();
    char *clean = srv_clean_utf8(text, len); /* invalid UTF-8 cannot travel in JSON */
    cJSON_AddStringToObject(o, "content", clean ? clean : "");
    free(clean);
    free(text);
    return reply_json(c, s, r, 200, o);
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
    cJSON_AddBoolToObject(meta, "vision", s->media != NULL); /* --mmproj: image_url parts are read (the page's attach button) */
    cJSON_AddItemToArray(data, m);
    return reply_json(c, s, r, 200, o);
}

/* ---------------------------------------------------------------- health */

static const char *state_name(srv_state st) {
    static const char *names[] = {"loading", "ready", "draining", "stopping"};
    return names[st];
}

/* 200 only when ready: a balancer's check (HAProxy's `http-check expect status 200`, a Kubernetes
 * readiness probe) takes the replica out while it loads, drains or stops. "status" keeps llama-server's
 * "ok" for ready; "state" names every state. */
static MHD_Result health(struct MHD_Connection *c, server *s, req *r) {
    const srv_state st = state_of(s);
    cJSON *o = cJSON_CreateObject();
    if (!o) return reply(c, s, r, 500, "application/json", NULL);
    cJSON_AddStringToObject(o, "status", st == SRV_READY ? "ok" : state_name(st));
    cJSON_AddStringToObject(o, "state", state_name(st));
    cJSON_AddStringToObject(o, "replica", s->replica_id);
    return reply_json(c, s, r, st == SRV_READY ? 200 : 503, o);
}

/* ---------------------------------------------------------------- routing */


static const route_row routes[] = {
    {"/", R_PAGE, false, PROTO_OPENAI, NULL, "/"},
    {"/index.html", R_PAGE, false, PROTO_OPENAI, NULL, "/"},
    {"/health", R_HEALTH, false, PROTO_OPENAI, NULL, "/health"},
    {"/v1/health", R_HEALTH, false, PROTO_OPENAI, NULL, "/health"},
    {"/v1/models", R_MODELS, false, PROTO_OPENAI, NULL, "/v1/models"},
    {"/models", R_MODELS, false, PROTO_OPENAI, NULL, "/v1/models"},
    {"/metrics", R_METRICS, false, PROTO_OPENAI, NULL, "/metrics"},
    {"/v1/chat/completions", R_GENERATE, true, PROTO_OPENAI, &openai_chat, "/v1/chat/completions"},
    {"/chat/completions", R_GENERATE, true, PROTO_OPENAI, &openai_chat, "/v1/chat/completions"},
    {"/v1/completions", R_GENERATE, true, PROTO_OPENAI, &openai_completions, "/v1/completions"},
    {"/completions", R_GENERATE, true, PROTO_OPENAI, &openai_completions, "/v1/completions"},
    {"/tokenize", R_TOKENIZE, true, PROTO_OPENAI, NULL, "/tokenize"},
    {"/detokenize", R_DETOKENIZE, true, PROTO_OPENAI, NULL, "/detokenize"},
    {"/v1/embeddings", R_EMBEDDINGS, true, PROTO_OPENAI, NULL, "/v1/embeddings"},
    {"/embeddings", R_EMBEDDINGS, true, PROTO_OPENAI, NULL, "/v1/embeddings"},
    {"/v1/responses", R_GENERATE, true, PROTO_OPENAI, &openai_responses, "/v1/responses"},
    {"/responses", R_GENERATE, true, PROTO_OPENAI, &openai_responses, "/v1/responses"},
    {"/v1/responses/input_tokens", R_COUNT, true, PROTO_OPENAI, &openai_responses_count, "/v1/responses/input_tokens"},
    {"/v1/messages", R_GENERATE, true, PROTO_ANTHROPIC, &anthropic_messages, "/v1/messages"},
    {"/v1/messages/count_tokens", R_COUNT, true, PROTO_ANTHROPIC, &anthropic_count_tokens, "/v1/messages/count_tokens"},
    {"/api/chat", R_GENERATE, true, PROTO_OLLAMA, &ollama_chat, "/api/chat"},
    {"/api/generate", R_GENERATE, true, PROTO_OLLAMA, &ollama_generate, "/api/generate"},
    {"/api/embed", R_EMBEDDINGS, true, PROTO_OLLAMA, NULL, "/api/embed"},
    {"/api/version", R_OLLAMA_VERSION, false, PROTO_OLLAMA, NULL, "/api/version"},
    {"/api/tags", R_OLLAMA_TAGS, false, PROTO_OLLAMA, NULL, "/api/tags"},
    {"/api/ps", R_OLLAMA_PS, false, PROTO_OLLAMA, NULL, "/api/ps"},
    {"/api/show", R_OLLAMA_SHOW, true, PROTO_OLLAMA, NULL, "/api/show"},
};
/* /v1/responses/{id}: GET or DELETE of a kept response (matched by prefix after the rows above) */
static const route_row stored_row = {"/v1/responses/", R_STORED, false, PROTO_OPENAI, NULL, "/v1/responses/{id}"};

static const route_row no_route = {"", R_NONE, false, PROTO_OPENAI, NULL, "other"};
static const route_row no_ollama_route = {"", R_NONE, false, PROTO_OLLAMA, NULL, "other"};

static const route_row *route_of(const char *url) {
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) return &routes[i];
    if (!strncmp(url, stored_row.path, strlen(stored_row.path)) && url[strlen(stored_row.path)]) return &stored_row;
    return strncmp(url, "/api/", 5) ? &no_route : &no_ollama_route; /* Ollama's other endpoints: 404 in its shape */
}

/* A browser asks for the page at /; an API client (Accept absent or not HTML) gets Ollama's answer. */
static bool wants_html(struct MHD_Connection *c) {
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
    return a && strcasestr(a, "text/html") != NULL;
}

static MHD_Result dispatch(struct MHD_Connection *c, server *s, req *r, const route_row *row) {
    guard_request_received(s->guard, c); /* answering has no deadline */
    switch (row->r) {
    case R_PAGE: {
        if (!strcmp(row->path, "/") && !wants_html(c)) /* Ollama's clients look for this at / */
            return reply(c, s, r, 200, "text/plain; charset=utf-8", strdup("Ollama is running"));
        char *page = malloc(srv_chat_html_len + 1);
        if (page) memcpy(page, srv_chat_html, srv_chat_html_len + 1);
        return reply(c, s, r, 200, "text/html; charset=utf-8", page);
    }
    case R_HEALTH: return health(c, s, r);
    case R_MODELS: return models(c, s, r);
    case R_METRICS:
        if (state_of(s) != SRV_LOADING && s->media) { /* the encoder exists once the model is open */
            srv_media_stats ms;
            media_stats(s->media, &ms);
            metrics_images(s->met, &ms);
        }
        return reply(c, s, r, 200, "text/plain; version=0.0.4",
                     metrics_render(s->met, s->model_id, s->replica_id, state_name(state_of(s))));
    case R_GENERATE: {
        char *load = row->proto == PROTO_OLLAMA && s->sched
                         ? ollama_load_reply(&s->ollama, r->body, r->len, row->ep == &ollama_generate) : NULL;
        return load ? reply(c, s, r, 200, "application/json", load) : completion(c, s, r, row->ep);
    }
    case R_TOKENIZE: return tokenize(c, s, r);
    case R_DETOKENIZE: return detokenize(c, s, r);
    case R_EMBEDDINGS: return embeddings(c, s, r, row->proto);
    case R_COUNT: return count_tokens(c, s, r, row->ep);
    case R_STORED: return stored_response(c, s, r, r->url, r->method);
    case R_OLLAMA_VERSION: return reply(c, s, r, 200, "application/json", ollama_version());
    case R_OLLAMA_TAGS: return reply(c, s, r, 200, "application/json", ollama_tags(&s->ollama));
    case R_OLLAMA_PS: return reply(c, s, r, 200, "application/json", ollama_ps(&s->ollama));
    case R_OLLAMA_SHOW: {
        int status = 500;
        char *out = ollama_show(&s->ollama, r->body, r->len, &status);
        return reply(c, s, r, status, "application/json", out);
    }
    default: return reply_error(c, s, r, 404, "invalid_request_error", NULL, "no such endpoint");
    }
}

static MHD_Result preflight(struct MHD_Connection *c, server *s, req *r, const char *methods) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    add_common_headers(s, resp);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", methods);
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    r->status = 204;
    MHD_Result ret = MHD_queue_response(c, 204, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* The first call of a request sees only its headers: refuse early what needs no body to refuse. */
static MHD_Result first_call(struct MHD_Connection *c, server *s, req *r, const route_row *row, const char *method) {
    const route rt = row->r;
    const bool want_post = row->post;
    const bool is_post = !strcmp(method, "POST"), is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    if (!guard_host_ok(s->o, s->loopback_bind, host)) {
        if (!__atomic_exchange_n(&s->host_warned, 1, __ATOMIC_ACQ_REL))
            fprintf(stderr, "gemma serve: refused a request for Host '%.100s' (403): a proxy in front must send a "
                            "loopback Host, or start the server with --allowed-hosts NAME (docs/server.md, Security)\n",
                    host);
        return reply_error(c, s, r, 403, "invalid_request_error", "host_not_allowed",
                           "this server answers requests for loopback host names only (a page on another name may "
                           "have rebound its DNS to this machine); give --allowed-hosts NAME to accept it");
    }
    if (rt == R_NONE) return reply_error(c, s, r, 404, "invalid_request_error", NULL, "no such endpoint");
    if (rt != R_HEALTH && guard_open(s->guard) > s->o->max_conns)
        return reply_error(c, s, r, 503, "server_error", NULL,
                           "the server holds too many connections (--max-conns); retry later");
    if (s->o->cors && !strcmp(method, "OPTIONS")) /* no key needed to ask */
        return preflight(c, s, r, want_post ? "POST, OPTIONS" : rt == R_STORED ? "GET, DELETE, OPTIONS" : "GET, OPTIONS");
    const bool is_delete = rt == R_STORED && !strcmp(method, "DELETE"); /* a kept response can be deleted */
    if (want_post ? !is_post : !(is_get || is_delete)) {
        char msg[96];
        snprintf(msg, sizeof msg, "this endpoint takes %s", want_post ? "POST" : rt == R_STORED ? "GET or DELETE" : "GET");
        return reply_error(c, s, r, 405, "invalid_request_error", NULL, msg);
    }
    r->key = key_of(s, c);
    if (rt != R_HEALTH && rt != R_PAGE && s->o->n_api_keys && !r->key)
        return reply_error(c, s, r, 401, "invalid_request_error", "invalid_api_key", "a valid API key is needed: Authorization: Bearer <key>");
    if (rt != R_HEALTH && rt != R_PAGE && rt != R_METRICS && state_of(s) == SRV_LOADING)
        return reply_error(c, s, r, 503, "server_error", "loading", "the model is still loading; retry shortly");
    if (!want_post) return MHD_YES;
    if (state_of(s) == SRV_STOPPING)
        return reply_error(c, s, r, 503, "server_error", NULL, "the server is shutting down");
    if (rt == R_GENERATE || rt == R_EMBEDDINGS || rt == R_COUNT) {
        /* counted before the state is read, both sequentially consistent (srv_drain does the reverse):
         * either this request sees the drain and is refused, or the drain sees it and waits for it */
        r->working = true;
        __atomic_add_fetch(&s->working, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&s->state, __ATOMIC_SEQ_CST) == SRV_DRAINING)
            return reply_error(c, s, r, 503, "server_error", "draining",
                               "this replica is draining (it was told to stop): send the request to another");
    }
    if (!is_json_type(c))
        return reply_error(c, s, r, 415, "invalid_request_error", NULL, "the body must be JSON (Content-Type: application/json)");
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    char *end = NULL;
    const unsigned long long want = cl ? strtoull(cl, &end, 10) : 0;
    if (cl && want > s->o->max_body) {
        char msg[96];
        snprintf(msg, sizeof msg, "the body is larger than %zu bytes (--max-body)", s->o->max_body);
        return reply_error(c, s, r, 413, "invalid_request_error", NULL, msg);
    }
    /* the announced length, up to 1 MiB, is allocated at once; a larger body grows as it arrives (a
     * length is a claim: many connections claiming the maximum must not reserve it before sending) */
    const size_t first = want < (1u << 20) ? (size_t)want + 1 : (1u << 20);
    if (cl && end != cl && want > 0 && !(r->body = malloc(first))) return MHD_NO;
    r->cap = r->body ? first : 0;
    return MHD_YES;
}

/* Appends an uploaded piece of the body; false on out of memory. Grows by half (an exact Content-Length
 * was allocated up front), never past --max-body + 1. */
static bool take_upload(server *s, req *r, const char *data, size_t n) {
    if (r->too_big || r->len + n > s->o->max_body) {
        r->too_big = true;
        return true;
    }
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap + r->cap / 2 > r->len + n + 1 ? r->cap + r->cap / 2 : r->len + n + 1;
        if (cap > s->o->max_body + 1) cap = s->o->max_body + 1;
        char *p = realloc(r->body, cap);
        if (!p) return false;
        r->body = p;
        r->cap = cap;
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    r->body[r->len] = 0;
    return true;
}

static MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                             const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    server *s = cls;
    const route_row *row = route_of(url);
    req *r = *con_cls;
    if (r) r->url = url, r->method = method;
    if (!r) {
        if (!(r = calloc(1, sizeof *r))) return MHD_NO;
        __atomic_add_fetch(&s->inflight, 1, __ATOMIC_ACQ_REL);
        r->t0 = srv_now();
        r->endpoint = row->name;
        r->proto = row->proto;
        r->http11 = version && !strcmp(version, MHD_HTTP_VERSION_1_1);
        *con_cls = r;
        MHD_Result ret = first_call(c, s, r, row, method);
        r->early_reply = r->status != 0;
        return ret;
    }
    if (r->early_reply) { /* already answered: drop whatever body follows */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!take_upload(s, r, upload, *upload_size)) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    if (!row->post) return dispatch(c, s, r, row);
    guard_request_received(s->guard, c);
    if (r->too_big) {
        char msg[96];
        snprintf(msg, sizeof msg, "the body is larger than %zu bytes (--max-body)", s->o->max_body);
        return reply_error(c, s, r, 413, "invalid_request_error", NULL, msg);
    }
    if (!gm_text_is_utf8(r->body, r->len) || (r->body && memchr(r->body, 0, r->len)))
        return reply_error(c, s, r, 400, "invalid_request_error", NULL, "the body is not valid UTF-8 text");
    const char *shape = json_shape_problem(r->body ? r->body : "", r->len, max_json_values(s, row->r));
    if (shape) return reply_error(c, s, r, 400, "invalid_request_error", NULL, shape);
    return dispatch(c, s, r, row);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why) {
    server *s = cls;
    req *r = *con_cls;
    guard_request_done(s->guard, c);
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
    if (r->working) __atomic_sub_fetch(&s->working, 1, __ATOMIC_SEQ_CST);
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

static bool is_loopback_addr(const struct sockaddr_storage *ss) {
    if (ss->ss_family == AF_INET) return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss->ss_family == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ss)->sin6_addr);
    return false;
}

static void model_id_of(const char *path, char *out, size_t n) {
    const char *b = strrchr(path, '/');
    b = b && b[1] ? b + 1 : path;
    size_t k = 0;
    for (; *b && k + 1 < n; b++) /* keeps the id readable in logs; JSON and Prometheus escape it anyway */
        out[k++] = (*b == '"' || *b == '\\' || (unsigned char)*b < 0x20) ? '_' : *b;
    out[k] = 0;
}

/* Thread-per-connection needs a descriptor per connection besides the model's: the soft limit is raised
 * toward the hard one so --max-conns can be reached. */
static void raise_fd_limit(int want) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return;
    const rlim_t need = (rlim_t)want + 256;
    if (rl.rlim_cur >= need) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

static bool open_model(server *s, char *msg, size_t n) {
    const srv_options *o = s->o;
    gm_error err = {0};
    if (gm_model_open(o->model_path, &o->model_opts, &s->m, &err)) {
        snprintf(msg, n, "%s", err.msg);
        return false;
    }
    s->tok = gm_model_tokenizer(s->m);
    const gm_config *mc = gm_model_config(s->m);
    /* an embedding model gets an embedder (its context capped at the model's) instead of the scheduler */
    if (o->mmproj_path && mc->is_embedding) {
        snprintf(msg, n, "--mmproj: an embedding model reads text only");
        return false;
    }
    if (gm_threadpool_new(o->threads, &s->pool, &err)) {
        snprintf(msg, n, "%s", err.msg);
        return false;
    }
    const gm_embedder_options eo = {.n_threads = o->threads, .pool = s->pool, .backend = o->backend,
                                    .device = o->device, .gpu_validate = o->gpu_validate,
                                    .n_ctx = o->n_ctx < mc->context_length ? o->n_ctx : mc->context_length};
    if (media_new(o, s->m, s->pool, &s->media, &err)) {
        snprintf(msg, n, "%s%s", o->mmproj_path ? "--mmproj: " : "", err.msg);
        return false;
    }
    if (s->media) { /* an image's rows are computed in one forward call beside the decode rows */
        gm_vision_info vi;
        gm_vision_get_info(media_vision(s->media), &vi);
        s->opt.min_batch = vi.n_tokens + o->parallel;
    }
    if (mc->is_embedding ? gm_embedder_new(s->m, &eo, &s->emb, &err) : sched_new(s->m, o, s->pool, s->met, &s->sched, &err)) {
        snprintf(msg, n, "%s", err.msg);
        return false;
    }
    s->n_ctx = s->emb ? gm_embedder_n_ctx(s->emb) : sched_n_ctx(s->sched);
    if (o->backend != GM_BACKEND_CPU && s->sched) fprintf(stderr, "gemma serve: backend %s\n", sched_backend(s->sched));
    ollama_facts_init(&s->ollama, o->model_path, s->model_id, s->m, s->n_ctx, s->media != NULL);
    return true;
}

/* The default --max-body: the longest prompt the context holds, written as JSON at its most expensive (a
 * token's text of k bytes, each escaped as \u00XX), with room for the rest of the request; at least 1 MiB. */
static size_t default_max_body(const server *s) {
    const size_t k = gm_tokenizer_max_token_bytes(s->tok);
    size_t b = (size_t)s->n_ctx * (k ? k : 64) * 6 + (256u << 10);
    if (s->emb) b *= 4; /* embedding requests batch several inputs */
    if (s->media && b < (size_t)32 << 20) b = (size_t)32 << 20; /* images come as base64 in the body */
    return b < (1u << 20) ? 1u << 20 : b > (1u << 30) ? 1u << 30 : b;
}

/* --replica-id, or this machine's name and the port: stable across restarts of the same replica, which is
 * what dashboards and affinity checks key on. With --port 0 the port is known only once the daemon runs,
 * after the first response could read the id: the process id stands in. */
static void set_replica_id(server *s, unsigned port) {
    if (s->o->replica_id) {
        model_id_of(s->o->replica_id, s->replica_id, sizeof s->replica_id);
        return;
    }
    char host[64] = "localhost", id[sizeof s->replica_id];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    if (port) snprintf(id, sizeof id, "%s:%u", host, port);
    else snprintf(id, sizeof id, "%s-pid%ld", host, (long)getpid());
    model_id_of(id, s->replica_id, sizeof s->replica_id);
}

/* The daemon starts before the model opens: until then /health answers 503 "loading" and model requests
 * 503, so a balancer can tell a replica that is starting from one that is gone. */
bool srv_start(const srv_options *o, bool listen, srv **out, char *msg, size_t n) {
    server *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s) return snprintf(msg, n, "out of memory"), false;
    s->opt = *o;
    s->o = o = &s->opt;
    s->state = SRV_LOADING;
    turns_init(&s->emb_turns);
    if (o->model_name) snprintf(s->model_id, sizeof s->model_id, "%s", o->model_name);
    else model_id_of(o->model_path, s->model_id, sizeof s->model_id);
    s->met = metrics_new();
    s->guard = guard_new(o);
    if (!s->met || !s->guard) {
        snprintf(msg, n, "out of memory");
        srv_stop(s);
        return false;
    }
    struct sockaddr_storage ss = {0};
    socklen_t sl = 0;
    if (listen && !resolve(o->host, o->port, &ss, &sl, msg, n)) {
        srv_stop(s);
        return false;
    }
    s->loopback_bind = !listen || is_loopback_addr(&ss);
    raise_fd_limit(o->max_conns + 64);
    /* --quiet also silences libmicrohttpd's own log: it writes a line for every malformed request, which a
     * hostile client could turn into a flood of the log */
    /* poll(), not select(): select cannot watch descriptors past FD_SETSIZE, which --max-conns can reach */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                     (o->quiet ? 0 : MHD_USE_ERROR_LOG);
    if (!listen) flags |= MHD_USE_NO_LISTEN_SOCKET;
    if (ss.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    /* MHD's own limit sits above --max-conns (at it MHD stops accepting, and new clients would wait in
     * the backlog): requests above --max-conns get a 503 from first_call instead */
    struct MHD_OptionItem opts[] = {
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, s},
        {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)guard_notify, s->guard},
        {MHD_OPTION_CONNECTION_LIMIT, o->max_conns + 64, NULL},
        {MHD_OPTION_PER_IP_CONNECTION_LIMIT, o->max_conns_per_ip, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, o->idle_timeout, NULL},
        {MHD_OPTION_THREAD_STACK_SIZE, 1 << 20, NULL},
        {listen ? MHD_OPTION_SOCK_ADDR : MHD_OPTION_END, 0, &ss},
        {MHD_OPTION_END, 0, NULL},
    };
    /* the replica id is in every response's headers: it is set before the first one can be sent */
    set_replica_id(s, (unsigned)o->port);
    s->opt.replica_id = s->replica_id; /* what responses put in system_fingerprint */
    s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, s, MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
    if (!s->d) {
        snprintf(msg, n, "cannot listen on %s:%d (in use, or not an address of this machine?)", o->host, o->port);
        srv_stop(s);
        return false;
    }
    if (listen) /* a start that takes long (a large model on a cold disk) shows in /health, not only here */
        fprintf(stderr, "gemma serve: opening %s; port %u answers /health with 503 \"loading\" until it is ready\n",
                o->model_path, srv_port(s));
    if (!open_model(s, msg, n)) {
        srv_stop(s);
        return false;
    }
    if (!s->opt.max_body) s->opt.max_body = default_max_body(s);
    s->responses = resp_store_new(o->responses_store, o->responses_store_bytes);
    if (o->responses_store > 0 && o->responses_store_bytes > 0 && !s->responses) {
        snprintf(msg, n, "out of memory");
        srv_stop(s);
        return false;
    }
    __atomic_store_n(&s->state, SRV_READY, __ATOMIC_SEQ_CST); /* publishes the model to connection threads */
    *out = s;
    return true;
}

unsigned srv_port(const srv *s) {
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    return di ? di->port : (unsigned)s->o->port;
}

bool srv_add_connection(srv *s, int fd, const struct sockaddr *addr, unsigned addr_len) {
    return MHD_add_connection(s->d, fd, addr, (socklen_t)addr_len) == MHD_YES;
}

void srv_drain(srv *s) {
    int ready = SRV_READY; /* a server already stopping stays so */
    __atomic_compare_exchange_n(&s->state, &ready, SRV_DRAINING, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

bool srv_idle(const srv *s) { return __atomic_load_n(&s->working, __ATOMIC_SEQ_CST) == 0; }

void srv_stop(srv *s) {
    if (!s) return;
    __atomic_store_n(&s->state, SRV_STOPPING, __ATOMIC_SEQ_CST);
    if (s->d) MHD_quiesce_daemon(s->d); /* no new connections */
    sched_stop(s->sched);                /* every open job ends: its connection thread writes the end and returns */
    for (int i = 0; s->d && i < 200 && __atomic_load_n(&s->inflight, __ATOMIC_ACQUIRE) > 0; i++) {
        struct timespec ts = {0, 25 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (s->d) MHD_stop_daemon(s->d);
    sched_free(s->sched);
    gm_embedder_free(s->emb);
    media_free(s->media);
    resp_store_free(s->responses);
    gm_threadpool_free(s->pool); /* after the engine, embedder and encoder that ran on it */
    guard_free(s->guard);
    metrics_free(s->met);
    gm_model_free(s->m);
    turns_destroy(&s->emb_turns);
    free(s);
}

/* SIGTERM is how systemd, Kubernetes and a deploy script stop a replica: it drains first. /health turns
 * 503 so the balancer stops sending, requests that still arrive get a 503 it can retry elsewhere, and the
 * running ones finish, up to the deadline. A second signal stops at once. */
static void drain_then_stop(srv *s, const sigset_t *sigs, int seconds) {
    srv_drain(s);
    fprintf(stderr, "gemma serve: SIGTERM: draining (/health 503, new requests 503; %d running may take up to "
                    "%d s; another signal stops now)\n", __atomic_load_n(&s->working, __ATOMIC_SEQ_CST), seconds);
    const double deadline = srv_now() + seconds;
    const struct timespec tick = {0, 50 * 1000 * 1000};
    while (!srv_idle(s)) {
        if (srv_now() >= deadline) {
            fprintf(stderr, "gemma serve: drain deadline (--drain-timeout %d) passed: stopping (ending open streams)\n",
                    seconds);
            return;
        }
        const int sig = sigtimedwait(sigs, NULL, &tick);
        if (sig > 0) {
            fprintf(stderr, "gemma serve: %s while draining: stopping (ending open streams)\n",
                    sig == SIGINT ? "SIGINT" : "SIGTERM");
            return;
        }
    }
    fprintf(stderr, "gemma serve: drained: every request finished; stopping\n");
}

int srv_run(const srv_options *o) {
    /* SIGINT / SIGTERM go to sigwait below, not to a random thread */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    srv *s;
    char msg[1024];
    if (!srv_start(o, true, &s, msg, sizeof msg)) {
        fprintf(stderr, "gemma serve: %s\n", msg);
        return 1;
    }
    if (!s->loopback_bind && !o->n_api_keys)
        fprintf(stderr, "gemma serve: warning: listening on %s without --api-key: anyone who can reach this address "
                        "can use the server (see docs/server.md, Security)\n", o->host);
    const bool v6 = strchr(o->host, ':') != NULL;
    fprintf(stderr, "gemma serve: %s, context %d per sequence, %d parallel%s, listening on http://%s%s%s:%u\n",
            s->model_id, s->n_ctx, s->emb ? 1 : o->parallel, s->emb ? " (embedding model: /v1/embeddings)" : "",
            v6 ? "[" : "", o->host, v6 ? "]" : "", srv_port(s));
    int sig = 0;
    sigwait(&sigs, &sig);
    if (sig == SIGTERM && o->drain_timeout > 0) drain_then_stop(s, &sigs, o->drain_timeout);
    else fprintf(stderr, "gemma serve: %s: stopping (ending open streams)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv_stop(s);
    return 0;
}
