/* server/server.h — `gemma serve`: an OpenAI-compatible HTTP server over one engine.
 *
 *   http.c       libmicrohttpd: routing, limits, API key, request log, waiting on jobs, the stream's
 *                transport (a thread per connection; each blocks on its job while the scheduler fills it)
 *   openai.c     the OpenAI wire format as two gen_endpoints: request JSON -> a gen_request (validation,
 *                400s) and a job's sessions -> response / Server-Sent Events chunks
 *   responses.c  OpenAI Responses as a gen_endpoint (input items -> a gen_request, sessions -> output items and
 *                typed events), and the store of recent responses for previous_response_id
 *   anthropic.c  Anthropic's Messages API (/v1/messages, count_tokens) as gen_endpoints, the same way
 *   scheduler.c  the one thread that owns the engine: admits queued jobs, runs one forward call per step
 *                (a decode row for every active sequence plus a chunk of pending prompt), samples, and
 *                feeds every token to its choice's session; no HTTP, no JSON
 *   session.c/h  protocol-neutral generation: the request (gen_request) and each choice's progress
 *                (gen_session: detokenization, stop strings, limits, log-probabilities, why it ended)
 *   job.c        a request's state, shared by its connection thread and the scheduler (lock + condvar),
 *                and what a streaming reader takes out of it
 *   guard.c      connection limits, the request deadline, the Host check, parses at once
 *   metrics.c    counters, gauges and histograms; Prometheus text
 *   embeddings.c /v1/embeddings with an embedding model (no scheduler then: see there)
 *   ollama.c     Ollama's native API: /api/chat, /api/generate as gen_endpoints (NDJSON streams); its model
 *                endpoints (/api/tags, /api/show, /api/ps, /api/version) and /api/embed in ollama_models.c
 *   chat.html    the chat page at / (embedded at build time by cmake/embed.cmake as srv_chat_html)
 *
 * Threads: the scheduler is the only thread that touches the engine and sequences; connection threads
 * only tokenize (the tokenizer is immutable) and read/write jobs under the job's lock. */
#ifndef GM_SERVER_SERVER_H
#define GM_SERVER_SERVER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <microhttpd.h>

#include "gemma.h"
#include "gemma_chat.h"
#include "gemma_grammar.h"
#include "gemma_vision.h"
#include "gemma_generator.h"
#include "server/session.h"

/* seconds of silence after which a stream gets an SSE comment (a keep-alive for proxies) */
enum { SRV_KEEPALIVE = 15 };

typedef struct srv_options {
    const char *model_path;
    gm_model_options model_opts; /* how the model (and a draft model) are opened */
    const char *model_name; /* the id /v1/models reports and responses echo */
    const char *host;
    int port;
    int threads;
    int n_ctx;              /* positions per sequence */
    int parallel;           /* sequences generating at once (a request with n = k takes k) */
    int queue;              /* requests waiting for a slot; one more gets 429 */
    int chunk;              /* prompt tokens per step (chunked prefill) */
    size_t kv_mem;
    gm_backend_kind backend; /* --backend */
    int device;              /* gm_engine_options.device */
    bool gpu_validate;
    gm_kv_dtype kv_type;
    bool no_prefix_cache;
    const char *const *api_keys; /* any of them is accepted (--api-key, repeatable); none: no key needed */
    int n_api_keys;
    bool prefix_scope_key;  /* --prefix-cache-scope key: sequences share prefix blocks only within one key */
    const char *cors;       /* Access-Control-Allow-Origin for browsers on other origins; NULL: none */
    const char *allowed_hosts; /* comma-separated Host names accepted besides loopback ones (--allowed-hosts) */
    int max_conns;          /* open connections; a request arriving above this gets 503 */
    int max_conns_per_ip;   /* connections from one address (0: no limit) */
    int request_timeout;    /* seconds to receive a whole request (headers and body); 0: none */
    int idle_timeout;       /* seconds a connection may stay silent while the server sends (a client that
                             * stops reading); time the server spends computing does not count */
    size_t max_body;        /* bytes */
    int max_prompt;         /* prompt tokens */
    int max_tokens;         /* cap on a request's max_tokens */
    bool quiet;             /* no request log */
    bool lookup;            /* speculative decoding by prompt lookup, for requests that do not say */
    const char *draft_model_path; /* speculative decoding with this draft model */
    const char *mtp_path;   /* speculative decoding with this Gemma 4 MTP assistant of the model */
    int draft_max;          /* most tokens proposed per pass (0: the library's default) */
    const char *mmproj_path; /* the vision encoder: image_url parts are read (NULL: text only) */
    const char *media_path; /* file:// image URLs are read under this folder only (NULL: refused) */
    int max_images;         /* images per request */
    int64_t image_max_pixels; /* a decoded image's pixels (0: the library's default) */
    size_t image_cache_bytes; /* recent images' rows kept for repeats */
    int min_batch;          /* (derived) rows a forward call must take: an image's and the decode rows */
    const char *replica_id; /* reported in /health, /metrics, X-Gemma-Replica, system_fingerprint (NULL:
                             * host name:port) */
    int drain_timeout;      /* seconds SIGTERM lets running requests finish (0: stop at once, as SIGINT) */
    int responses_store;    /* /v1/responses kept for previous_response_id (0: none kept) */
    size_t responses_store_bytes; /* their total size */
} srv_options;

/* Whether the server was started with a drafter (--lookup, --draft-model or --mtp): requests then speculate
 * unless they say not to. */
static inline bool srv_has_drafter(const srv_options *o) { return o->lookup || o->draft_model_path || o->mtp_path; }

typedef struct srv_guard srv_guard;
typedef struct srv_media srv_media;

/* ---------------------------------------------------------------- jobs (job.c) */

/* Why a submitted request failed, in no protocol's terms (the HTTP side maps it to a status). */
typedef enum {
    JOB_OK = 0,
    JOB_ERR_REQUEST,        /* it cannot run as asked (its prompt does not fit the engine): 400 */
    JOB_ERR_UNAVAILABLE,    /* no room now (KV memory), or the server is stopping: 503 */
    JOB_ERR_INTERNAL,       /* 500 */
} job_error;

/* A request's shared state: made by its connection thread, filled by the scheduler, freed when both
 * have let go (refs). */
typedef struct job {
    gen_request rq;         /* fixed before submission */

    /* progress, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    gen_session gen[SRV_MAX_N]; /* choice i's text, log-probabilities, finish */
    int cached;             /* prompt tokens taken from the prefix cache */
    int64_t draft_n, draft_n_accepted; /* speculation: tokens drafted and accepted over its choices (at the end) */
    bool started;           /* prompt computed, choices forked */
    bool done;
    double t_started;       /* when the prompt was computed (srv_now) */
    job_error err;          /* JOB_OK, or failed with err_msg */
    char err_msg[300];
    bool cancelled;         /* the client went away (set by the connection thread) */
    int refs;
    double t_submit;

    /* the scheduler thread's own: the engine's objects of each choice */
    gm_seq *seq[SRV_MAX_N];
    gm_spec *spec[SRV_MAX_N]; /* speculative decoding state, when the request speculates */
    gm_grammar_ctx *gctx;     /* the request's grammar bound to the vocabulary (the scheduler's cache), shared by
                                 its choices */
    struct grammar_slot *gslot; /* the cache slot it holds (scheduler thread only) */
    gm_matcher *gm[SRV_MAX_N]; /* choice i's position in the grammar (borrowed by seq[i]) */
    double t_last[SRV_MAX_N]; /* when its last token came (inter-token latency) */
    struct job *next;       /* queue link */
} job;

job *job_new(void);
void job_release(job *j); /* drops one reference; frees at zero */
/* Call with j->mu held, or before the job is shared. */
void job_fail(job *j, job_error e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int job_generated(const job *j); /* tokens taken by all its choices */

/* What a streaming reader has to send since its last look, copied out of the job under j->mu
 * (job_stream_take, which advances the reader's marks) so that it is rendered without the lock: a slow
 * reader asking for many log-probabilities never holds up the scheduler. */
typedef struct reader_mark {
    size_t sent;            /* bytes of text taken */
    int lp_sent;            /* log-probability entries taken */
    int calls_sent;         /* tool calls taken */
    size_t reason_sent;     /* bytes of thoughts taken */
    bool opened, finished;
} reader_mark;
typedef struct job_reader {
    reader_mark ch[SRV_MAX_N];
    bool closed;            /* the end (or the error) was taken */
} job_reader;
typedef struct stream_piece {
    int choice;
    bool open;              /* the choice's first piece, alone (an endpoint may announce the choice) */
    size_t text_off, text_n; /* new visible text: view.text[text_off, +text_n) */
    bool has_text;
    int lp_off, lp_n;       /* log-probabilities: view.lp[lp_off, +lp_n) */
    size_t lp_first_offset; /* text offset of the first of them */
    gen_finish finish;      /* the finishing piece: why the choice ended */
    const char *stop;       /* the finishing piece of GEN_STOP_STRING: the stop string (the job's request holds it) */
    int n_calls;            /* the finishing piece: the tool calls the choice made */
    int call;               /* a tool call piece: its index in the choice (-1: none), with its id, name and
                             * arguments at view.text[call_off]: three NUL-terminated strings */
    size_t call_off;
    size_t reason_off, reason_n; /* new thoughts (the tool parser's): view.text[reason_off, +reason_n) */
} stream_piece;
typedef struct stream_view {
    stream_piece piece[SRV_MAX_N * 8];
    int n_pieces;
    char *text;
    size_t text_len;
    gen_logprob *lp;
    int n_lp;
    bool oom;
    job_error err;          /* the job failed: an error, then the end of the stream */
    char err_msg[300];
    bool end;               /* every choice finished */
    int n_prompt, cached;   /* the prompt's tokens and those from the prefix cache (once the job started) */
    int gen;                /* tokens generated (at the end) */
    int64_t draft_n, draft_n_accepted; /* (at the end) speculation: drafted and accepted tokens */
    double t_submit, t_started; /* (at the end) when the job was submitted, when its prompt was computed */
} stream_view;
/* true when there is something to render (then the view must be freed) */
bool job_stream_take(job *j, job_reader *rd, stream_view *v);
void stream_view_free(stream_view *v);

/* An error answered to a client: HTTP status and the error object's fields. */
typedef struct srv_error {
    int status;
    char type[40], code[40], msg[300];
} srv_error;
void srv_error_set(srv_error *e, int status, const char *type, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
srv_error srv_error_of(int status, const char *type, const char *code, const char *msg);

/* The wire formats the server speaks (a route's): each writes its errors in its own shape. */
typedef enum { PROTO_OPENAI, PROTO_ANTHROPIC, PROTO_OLLAMA } srv_protocol;
/* e as protocol p's error body; malloc'd (NULL on out of memory). */
char *srv_error_json(srv_protocol p, const srv_error *e);

/* Bytes a connection has still to send. */
typedef struct srv_buf {
    char *p;
    size_t len, pos, cap;
} srv_buf;
bool srv_buf_put(srv_buf *b, const char *s, size_t n); /* false on out of memory */
void srv_buf_free(srv_buf *b);

double srv_now(void);
uint64_t srv_fresh_u64(void); /* a fresh 64-bit value (ids, seeds of requests that give none) */

/* ---------------------------------------------------------------- metrics (metrics.c) */

typedef struct srv_metrics srv_metrics;
srv_metrics *metrics_new(void);
void metrics_free(srv_metrics *m);
void metrics_request(srv_metrics *m, const char *endpoint, int status);
/* looked_up: the prefix cache is on (a finished completion is then one lookup) */
void metrics_tokens(srv_metrics *m, int prompt, int cached, int generated, bool looked_up);
void metrics_ttft(srv_metrics *m, double seconds);
void metrics_itl(srv_metrics *m, double seconds);
void metrics_speculative(srv_metrics *m, const gm_spec_stats *st);
void metrics_state(srv_metrics *m, int queued, int active, int64_t preemptions, const gm_kv_stats *kv);
typedef struct srv_media_stats {
    uint64_t encoded, cache_hits;
    double encode_seconds;
} srv_media_stats;
void metrics_images(srv_metrics *m, const srv_media_stats *st); /* the encoder's counters, as of now */
/* Prometheus text exposition; malloc'd. */
/* state: "loading", "ready", "draining" or "stopping" (gemma_server_state) */
char *metrics_render(srv_metrics *m, const char *model, const char *replica, const char *state);

/* ---------------------------------------------------------------- scheduler (scheduler.c) */

typedef struct srv_sched srv_sched;
/* The engine (and a draft engine) run on pool, the server's one pool (shared with the image encoder). */
gm_status sched_new(gm_model *m, const srv_options *o, gm_threadpool *pool, srv_metrics *metrics, srv_sched **out,
                    gm_error *err);
typedef enum { SUBMIT_OK, SUBMIT_FULL, SUBMIT_STOPPING } submit_result;
/* Queues j (the scheduler takes a reference) unless the queue is full or the server stops. */
submit_result sched_submit(srv_sched *s, job *j);
/* A job whose client left: taken out of the queue at once (its slot freed) if it is still there. */
void sched_withdraw(srv_sched *s, job *j);
/* Ends every stream (their clients get an error event), refuses new jobs, joins the thread. */
void sched_stop(srv_sched *s);
void sched_free(srv_sched *s);
int sched_n_ctx(const srv_sched *s);
/* what runs the engine (gm_engine_backend_name) */
const char *sched_backend(const srv_sched *s);

/* ---------------------------------------------------------------- generation endpoints */

/* An endpoint that generates text translates its wire format into a gen_request and the job's sessions
 * back out; http.c does the rest (limits, the queue, waiting, hang-ups, the stream's transport). So a new
 * one is a file defining a gen_endpoint and a row in http.c's route table. */
typedef struct gen_call_in {
    const char *body;
    size_t len;
    const gm_tokenizer *tok;
    const srv_options *o;
    int n_ctx;
    const char *model;      /* the id responses echo */
    srv_media *media;       /* images (NULL: text only) */
    struct resp_store *responses; /* stored /v1/responses (NULL: none kept) */
    int key;                /* the API key the request gave (index + 1; 0: none) */
} gen_call_in;
typedef struct gen_endpoint {
    /* Parses the body into rq (prompt tokenized, every field checked); returns the endpoint's state of
     * this call (freed by free_call), or NULL with *e set. rq comes with its seed and prefix scope set. */
    void *(*parse)(const gen_call_in *in, gen_request *rq, srv_error *e);
    /* The body of a whole (non-streaming) answer of a finished job; malloc'd. A counting endpoint (an
     * R_COUNT route: nothing runs) answers its parsed, never submitted job. */
    char *(*response)(const void *call, const job *j, const gm_tokenizer *tok);
    /* A stream's next bytes for what the reader took; when v->end or v->err, the stream's end too. */
    void (*render)(const void *call, const stream_view *v, const gm_tokenizer *tok, srv_buf *out);
    const char *stream_type; /* the streaming answer's Content-Type */
    const char *stream_keepalive; /* bytes its readers skip: sent after a silence, and as the half-close probe */
    void (*free_call)(void *call);
} gen_endpoint;

struct cJSON;

/* ---------------------------------------------------------------- request building (request.c) */

/* The protocol-neutral steps of reading a request, for every endpoint's parser: each wire format walks
 * its own JSON (and names its own fields in errors); what the request means is decided here once. */

/* Checked readers of o's field name (absent or null keeps *out); path: the name errors use (NULL: name). */
bool srq_num(const struct cJSON *o, const char *name, const char *path, double lo, double hi, bool integral,
             double *out, srv_error *e);
bool srq_int(const struct cJSON *o, const char *name, const char *path, int lo, int hi, int *out, srv_error *e);
bool srq_float(const struct cJSON *o, const char *name, const char *path, double lo, double hi, float *out,
               srv_error *e);
bool srq_bool(const struct cJSON *o, const char *name, const char *path, bool *out, srv_error *e);
/* A 400 invalid_request_error of fmt with one %s; false. */
bool srq_bad(srv_error *e, const char *fmt, const char *field);
/* Every field of obj (an object) is null or one of known: else a 400 "where.field is not supported". */
bool srq_known(const struct cJSON *obj, const char *where, const char *const *known, size_t n, srv_error *e);

/* rq->smp as the request set it: top_p 0 is greedy; then the library's validation. */
bool srq_sampling_check(gen_request *rq, srv_error *e);
/* One more stop string (1 to SRV_MAX_STOP_LEN bytes, at most SRV_MAX_STOP of them). */
bool srq_stop(gen_request *rq, const char *field, const char *s, srv_error *e);

/* Structured output: at most one constraint per request; field names it in errors. schema NULL: any JSON
 * object. */
bool srq_schema(gen_request *rq, const char *field, const struct cJSON *schema, srv_error *e);
bool srq_schema_text(gen_request *rq, const char *field, const char *schema_json, srv_error *e);
bool srq_gbnf(gen_request *rq, const char *field, const char *gbnf, srv_error *e);

/* A declared function (name checked, no duplicates, at most 128); where names it in errors. */
bool srq_tool(gen_request *rq, const char *where, const char *name, const char *description,
              const struct cJSON *parameters, srv_error *e);
/* After the tools: how they may be used. TOOLS_NAMED needs named in the tools; REQUIRED / NAMED constrain the
 * reply to calls (a grammar, so not with structured output); AUTO without tools is NONE. */
bool srq_tool_choice(gen_request *rq, const gm_tokenizer *tok, tool_mode mode, const char *named, bool parallel,
                     srv_error *e);

/* A conversation built message by message, then tokenized in the model's chat format (with the request's
 * tools, when offered) and its images' rows in place. field: the protocol's name for the conversation. */
typedef struct srq_conv srq_conv;
srq_conv *srq_conv_new(const gen_call_in *in, const char *field, srv_error *e);
void srq_conv_free(srq_conv *c);
/* A new message: role system | user | assistant | tool; where: its name in errors ("messages[3]"). */
bool srq_conv_message(srq_conv *c, const char *role, const char *where);
int srq_conv_count(const srq_conv *c);
const char *srq_conv_role(const srq_conv *c); /* the last message's role (NULL: none) */
/* Into the last message: text appended; an image (a URL media_load reads) where its text is now; a tool
 * call (assistant; arguments a JSON object as text); the call a tool message answers; thoughts. */
bool srq_conv_text(srq_conv *c, const char *s, size_t n);
bool srq_conv_image(srq_conv *c, const char *url);
bool srq_conv_call(srq_conv *c, const char *id, const char *name, const char *arguments);
bool srq_conv_tool_result(srq_conv *c, const char *tool_call_id, const char *name);
bool srq_conv_reasoning(srq_conv *c, const char *s, size_t n);
/* rq->prompt (and rq->images) from the conversation; limit: the most prompt tokens (srq_prompt_limit). */
bool srq_conv_tokenize(srq_conv *c, gen_request *rq, int limit);

/* The most prompt tokens a request may have, and whether one of n_prompt tokens plus max_tokens (0: up to
 * the context) fits; a prompt of `bytes` that cannot (checked before tokenizing). */
int srq_prompt_limit(const srv_options *o, int n_ctx);
bool srq_fits(const srv_options *o, int n_ctx, int n_prompt, int max_tokens, srv_error *e);
bool srq_bytes_fit(const gm_tokenizer *tok, size_t bytes, int limit, srv_error *e);

/* ---------------------------------------------------------------- images (media.c) */

/* The encoder of o->mmproj_path for model m, on pool (the engine's); *out NULL when the server has none. */
gm_status media_new(const srv_options *o, const gm_model *m, gm_threadpool *pool, srv_media **out, gm_error *err);
void media_free(srv_media *x);
/* An image_url part's URL into rows (x NULL: a 400 saying the server reads text only). max_bytes bounds a
 * file:// image. false with a 400 (or 500) in e. */
bool media_load(srv_media *x, const char *url, size_t max_bytes, gm_vision_rows *out, srv_error *e);
int32_t media_placeholder(const srv_media *x);
gm_vision *media_vision(srv_media *x);
void media_stats(srv_media *x, srv_media_stats *out);

/* ---------------------------------------------------------------- OpenAI JSON (openai.c) */

extern const gen_endpoint openai_chat, openai_completions;
/* A JSON number that is a token id in [0, V) (checked before any conversion to an integer). */
struct cJSON;
bool srv_token_id(const struct cJSON *e, int V, int32_t *out);
/* s[0..n) with invalid UTF-8 and NULs replaced by U+FFFD (JSON strings carry neither); malloc'd. */
char *srv_clean_utf8(const char *s, size_t n);
/* {"error": {...}}; malloc'd. */
char *openai_error_json(const char *type, const char *code, const char *msg);

/* ---------------------------------------------------------------- OpenAI Responses (responses.c) */

/* /v1/responses and /v1/responses/input_tokens (its count). */
extern const gen_endpoint openai_responses, openai_responses_count;
/* Recent responses kept for previous_response_id, per API key: at most max_items and max_bytes (the
 * oldest go first); shared by the connection threads. NULL when max_items is 0 (none kept). */
typedef struct resp_store resp_store;
resp_store *resp_store_new(int max_items, size_t max_bytes);
void resp_store_free(resp_store *s);
/* GET /v1/responses/{id} (del false) or DELETE: the JSON to answer (malloc'd) and its *status; a 404 for
 * an id not kept under key. */
char *resp_store_answer(resp_store *s, int key, const char *id, bool del, int *status);
/* ---------------------------------------------------------------- Anthropic Messages (anthropic.c) */

/* POST /v1/messages, and /v1/messages/count_tokens (its response() answers {"input_tokens"} for a job
 * that is parsed, never submitted: http.c's R_COUNT). */
extern const gen_endpoint anthropic_messages, anthropic_count_tokens;
/* {"type": "error", "error": {"type": <Anthropic's type for e->status>, "message"}}; malloc'd. */
char *anthropic_error_json(const srv_error *e);

/* ---------------------------------------------------------------- OpenAI tools (openai_tools.c) */

/* tools / tool_choice / parallel_tool_calls into rq (its grammar for required / named calls); a 400 in e. */
bool openai_tools_parse(const struct cJSON *root, const gm_tokenizer *tok, gen_request *rq, srv_error *e);
/* A message's tool_calls / tool_call_id / name / reasoning_content into the conversation's last message. */
bool openai_message_tools(const struct cJSON *msg, int idx, const char *role, srq_conv *cv, srv_error *e);
/* message.tool_calls of a choice (nothing when it made no call). */
void openai_add_tool_calls(struct cJSON *msg, const gen_session *g);
/* A stream delta's tool_calls: with an id, the call's announcement (id, type, name, empty arguments);
 * without, its arguments. */
void openai_add_call_delta(struct cJSON *delta, int index, const char *id, const char *name, const char *args);

/* ---------------------------------------------------------------- embeddings (embeddings.c) */

/* Answers a /v1/embeddings body: returns the malloc'd JSON to send with *status (200, or 400 / 500 with
 * an OpenAI error object); e is NULL when the model is not an embedding model. The embedder runs under
 * mu. *n_prompt: the tokens embedded. */
/* A lock taken in arrival order: requests taking the embedder input by input must alternate, and a plain
 * mutex lets the thread that just released it take it again before a waiter wakes. */
typedef struct srv_turns {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned long next, serving;
} srv_turns;
void turns_init(srv_turns *t);
void turns_destroy(srv_turns *t);
void turns_take(srv_turns *t);
void turns_give(srv_turns *t);

typedef struct srv_embed_ctx {
    gm_embedder *e;
    srv_turns *turns;
    const gm_model *m;
    const char *model_id;
    srv_guard *guard;       /* bounds the requests parsed at once */
    /* between inputs the embedder is let go; false from this ends the request (client gone, shutdown) */
    bool (*keep_going)(void *arg);
    void *arg;
} srv_embed_ctx;
char *srv_embeddings(const srv_embed_ctx *x, const char *body, size_t len, int *status, int *n_prompt);

/* ---------------------------------------------------------------- Ollama's API (ollama.c) */

/* What Ollama's model endpoints say about the one model served: read once when the model opens. */
typedef struct ollama_facts {
    char name[160];         /* the model's Ollama name: "<id>:latest" ("<id>" when the id has a tag) */
    const char *id;         /* the served id (also accepted without ":latest") */
    char family[32];        /* the GGUF architecture ("gemma3") */
    char parameter_size[16]; /* "268.10M" */
    char quantization[16];  /* "Q4_K_M" */
    char digest[65];        /* hex: an identity of the file (its name, size and time), not its SHA-256 */
    char modified_at[40];   /* the file's time, RFC 3339 */
    int64_t size;           /* the file's bytes */
    int64_t n_params;
    const gm_config *cfg;
    int n_ctx;
    bool completion, tools, vision, embedding, thinking; /* its capabilities */
} ollama_facts;
void ollama_facts_init(ollama_facts *f, const char *path, const char *id, const gm_model *m, int n_ctx, bool vision);

extern const gen_endpoint ollama_chat, ollama_generate;
/* {"error": msg}; malloc'd. */
char *ollama_error_json(const srv_error *e);
/* The request's "model" names the served id (or "<id>:latest"): its name copied to echo; else a 400 (none
 * given) or a 404. */
bool ollama_model_ok(const struct cJSON *root, const char *id, char *echo, size_t n, srv_error *e);
/* (ollama_models.c) GET /api/version, /api/tags, /api/ps; POST /api/show: the malloc'd JSON with *status. */
char *ollama_version(void);
char *ollama_tags(const ollama_facts *f);
char *ollama_ps(const ollama_facts *f);
char *ollama_show(const ollama_facts *f, const char *body, size_t len, int *status);
/* A load request of /api/chat or /api/generate (no messages, no prompt): its answer (NULL: not one; the
 * endpoint reads it). generate: which endpoint. */
char *ollama_load_reply(const ollama_facts *f, const char *body, size_t len, bool generate);
/* POST /api/embed over the embedder (srv_embeddings): the malloc'd JSON with *status. */
char *ollama_embed(const srv_embed_ctx *x, const ollama_facts *f, const char *body, size_t len, int *status,
                   int *n_prompt);

/* ---------------------------------------------------------------- guard (guard.c) */

srv_guard *guard_new(const srv_options *o); /* starts the reaper when o->request_timeout > 0 */
void guard_free(srv_guard *g);
/* MHD_OPTION_NOTIFY_CONNECTION's callback */
void guard_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe);
void guard_request_received(srv_guard *g, struct MHD_Connection *c);
void guard_request_done(srv_guard *g, struct MHD_Connection *c);
int guard_open(srv_guard *g);       /* connections open now */
void guard_parse_enter(srv_guard *g);
void guard_parse_leave(srv_guard *g);
bool guard_host_ok(const srv_options *o, bool loopback_bind, const char *host);
bool srv_is_loopback_host(const char *h, size_t n);

/* ---------------------------------------------------------------- the page (chat.html, embedded) */

extern const char srv_chat_html[];
extern const size_t srv_chat_html_len;

/* ---------------------------------------------------------------- the server (http.c) */

/* Starts the HTTP daemon, opens the model, starts the scheduler, serves until SIGINT (stop now) or SIGTERM
 * (drain, then stop). Returns the process exit status. */
int srv_run(const srv_options *o);

/* The same server without signals, for tests and fuzzing. listen false: no socket is opened and
 * connections come from srv_add_connection (a socketpair end, say). false with msg on failure. */
typedef struct srv srv;
bool srv_start(const srv_options *o, bool listen, srv **out, char *msg, size_t n);
unsigned srv_port(const srv *s);
bool srv_add_connection(srv *s, int fd, const struct sockaddr *addr, unsigned addr_len);
void srv_stop(srv *s);
/* Draining: /health answers 503 "draining", new completion and embedding requests 503, the running ones
 * go on; srv_idle says when none is left. srv_run does this on SIGTERM. */
void srv_drain(srv *s);
bool srv_idle(const srv *s);

#endif
