/* server/server.h — `gemma serve`: an OpenAI-compatible HTTP server over one engine.
 *
 *   http.c       libmicrohttpd: routing, limits, API key, request log, the SSE writer (a thread per
 *                connection; each blocks on its job while the scheduler fills it)
 *   openai.c     request JSON -> a job (validation, 400s) and a job -> response / stream chunks JSON
 *   scheduler.c  the one thread that owns the engine: admits queued jobs, runs one forward call per step
 *                (a decode row for every active sequence plus a chunk of pending prompt), samples
 *   job.c        a request's state, shared by its connection thread and the scheduler (lock + condvar)
 *   guard.c      connection limits, the request deadline, the Host check, parses at once
 *   metrics.c    counters, gauges and histograms; Prometheus text
 *   embeddings.c /v1/embeddings with an embedding model (no scheduler then: see there)
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

enum { SRV_MAX_N = 8, SRV_MAX_STOP = 16, SRV_MAX_STOP_LEN = 256, SRV_MAX_TOP_LOGPROBS = 20, SRV_MAX_EMBED_INPUTS = 2048 };
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
    int draft_max;          /* most tokens proposed per pass (0: the library's default) */
} srv_options;

typedef struct srv_guard srv_guard;

/* ---------------------------------------------------------------- jobs (job.c) */

typedef enum { JOB_CHAT, JOB_COMPLETION } job_kind;

/* One generated token's log-probabilities (log-softmax of the raw logits). */
typedef struct lp_entry {
    int32_t id;
    float lp;
    int n_top;
    int32_t top_id[SRV_MAX_TOP_LOGPROBS];
    float top_lp[SRV_MAX_TOP_LOGPROBS];
    size_t text_end;        /* bytes of the choice's text once this token is decoded */
} lp_entry;

typedef struct choice {
    gm_seq *seq;
    gm_detok_stream *ds;
    char *text;             /* decoded so far (cut at the stop string once finished) */
    size_t len, cap;
    size_t visible;         /* bytes no stop string can still claim */
    size_t sent;            /* bytes already streamed */
    int n_gen;              /* tokens sampled */
    const char *finish;     /* NULL while generating; "stop" or "length" */
    lp_entry *lp;
    int n_lp, cap_lp, lp_sent;
    bool role_sent, finish_sent;
    gm_spec *spec;          /* speculative decoding state, when the request speculates */
    double t_last;          /* when its last token came (inter-token latency) */
} choice;

typedef struct job {
    /* the request, fixed before submission */
    job_kind kind;
    bool stream, include_usage;
    int n;                  /* choices */
    gm_sampling smp;        /* choice i samples with seed + i */
    int max_tokens;         /* 0: up to the context */
    char *stop[SRV_MAX_STOP];
    int n_stop;
    bool logprobs;
    int top_logprobs;
    bool ignore_eos;        /* llama-server's extension: generate past <eos> / <end_of_turn> (benchmarks) */
    bool speculative;       /* propose and verify several tokens per step (--lookup / --draft-model) */
    int32_t *prompt;
    int n_prompt;
    char id[48];
    long created;
    const char *model;
    int conn_fd;            /* the client's socket, watched for a hang-up while waiting; -1: none */
    bool http11;            /* the client speaks HTTP/1.1: it must accept an interim 100 response */
    bool probed;            /* the client half-closed; a probe was written to tell a close from a half-close */
    bool probe_pending;     /* a stream's probe (an SSE comment) is still to be sent */
    uint64_t prefix_scope;  /* the engine's prefix scope of its sequences (0: shared) */

    /* progress, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    choice ch[SRV_MAX_N];
    int cached;             /* prompt tokens taken from the prefix cache */
    bool started;           /* prompt computed, choices forked */
    bool done;
    int err_http;           /* non-zero: failed with this status */
    char err_type[40], err_code[40], err_msg[300];
    bool cancelled;         /* the client went away (set by the connection thread) */
    int refs;
    double t_submit, t_first;

    /* the connection thread's stream writer */
    char *out;
    size_t out_len, out_pos, out_cap;
    bool stream_closed;
    struct job *next;       /* queue link (scheduler) */
} job;

job *job_new(void);
void job_release(job *j); /* drops one reference; frees at zero */
void job_fail(job *j, int http, const char *type, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Appends bytes to the stream writer's buffer; false on out of memory. */
bool job_out(job *j, const char *s, size_t n);

/* ---------------------------------------------------------------- metrics (metrics.c) */

typedef struct srv_metrics srv_metrics;
srv_metrics *metrics_new(void);
void metrics_free(srv_metrics *m);
void metrics_request(srv_metrics *m, const char *endpoint, int status);
void metrics_tokens(srv_metrics *m, int prompt, int cached, int generated);
void metrics_ttft(srv_metrics *m, double seconds);
void metrics_itl(srv_metrics *m, double seconds);
void metrics_speculative(srv_metrics *m, const gm_spec_stats *st);
void metrics_state(srv_metrics *m, int queued, int active, int64_t preemptions, const gm_kv_stats *kv);
/* Prometheus text exposition; malloc'd. */
char *metrics_render(srv_metrics *m, const char *model);

/* ---------------------------------------------------------------- scheduler (scheduler.c) */

typedef struct srv_sched srv_sched;
gm_status sched_new(gm_model *m, const srv_options *o, srv_metrics *metrics, srv_sched **out, gm_error *err);
typedef enum { SUBMIT_OK, SUBMIT_FULL, SUBMIT_STOPPING } submit_result;
/* Queues j (the scheduler takes a reference) unless the queue is full or the server stops. */
submit_result sched_submit(srv_sched *s, job *j);
/* A job whose client left: taken out of the queue at once (its slot freed) if it is still there. */
void sched_withdraw(srv_sched *s, job *j);
/* Ends every stream (their clients get an error event), refuses new jobs, joins the thread. */
void sched_stop(srv_sched *s);
void sched_free(srv_sched *s);
int sched_n_ctx(const srv_sched *s);

/* ---------------------------------------------------------------- OpenAI JSON (openai.c) */

/* Parses a /v1/chat/completions or /v1/completions body into j (prompt tokenized, fields checked:
 * unknown fields, and known ones this server cannot honour, are refused). A prompt whose bytes cannot
 * fit the context is refused before it is tokenized. false: j carries the 400 (job_fail). */
bool openai_parse(job *j, job_kind kind, const char *body, size_t len, const gm_tokenizer *tok,
                  const srv_options *o, int n_ctx);
/* The non-streaming response body; malloc'd. */
char *openai_response(job *j, const gm_tokenizer *tok);
/* What a stream has to send since the last look: copied out under j->mu (openai_stream_take, which
 * also advances the job's sent marks), rendered into SSE events in j->out without the lock
 * (openai_stream_render), so a slow reader asking for many log-probabilities never holds up the
 * scheduler. */
typedef struct stream_piece {
    int choice;
    bool role;              /* the opening chunk with the role */
    size_t text_off, text_n; /* new visible text: view.text[text_off, +text_n) */
    bool has_text;
    int lp_off, lp_n;       /* log-probabilities: view.lp[lp_off, +lp_n) */
    size_t lp_first_offset; /* text offset of the first of them */
    const char *finish;     /* the finishing chunk, with this reason */
} stream_piece;
typedef struct stream_view {
    stream_piece piece[SRV_MAX_N * 3];
    int n_pieces;
    char *text;
    size_t text_len;
    lp_entry *lp;
    int n_lp;
    bool oom;
    bool error;             /* the job failed: an error event, then [DONE] */
    char err_type[40], err_code[40], err_msg[300];
    bool end;               /* every choice finished: usage (if asked), then [DONE] */
    int n_prompt, cached, gen;
} stream_view;
/* true when there is something to render (then the view must be freed) */
bool openai_stream_take(job *j, stream_view *v);
void openai_stream_render(job *j, const stream_view *v, const gm_tokenizer *tok);
void stream_view_free(stream_view *v);
/* A JSON number that is a token id in [0, V) (checked before any conversion to an integer). */
struct cJSON;
bool srv_token_id(const struct cJSON *e, int V, int32_t *out);
/* s[0..n) with invalid UTF-8 and NULs replaced by U+FFFD (JSON strings carry neither); malloc'd. */
char *srv_clean_utf8(const char *s, size_t n);
/* {"error": {...}} for j's failure (or the given one); malloc'd. */
char *openai_error_json(const char *type, const char *code, const char *msg);

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

/* ---------------------------------------------------------------- guard (guard.c) */

srv_guard *guard_new(const srv_options *o); /* starts the reaper when o->request_timeout > 0 */
void guard_free(srv_guard *g);
/* MHD_OPTION_NOTIFY_CONNECTION's callback */
void guard_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe);
void guard_request_received(srv_guard *g, struct MHD_Connection *c);
void guard_request_done(srv_guard *g, struct MHD_Connection *c);
int guard_open(srv_guard *g);       /* connections open now */
int guard_timed_out(srv_guard *g);  /* connections shut for missing the request deadline */
void guard_parse_enter(srv_guard *g);
void guard_parse_leave(srv_guard *g);
bool guard_host_ok(const srv_options *o, bool loopback_bind, const char *host);
bool srv_is_loopback_host(const char *h, size_t n);

/* ---------------------------------------------------------------- the page (chat.html, embedded) */

extern const char srv_chat_html[];
extern const size_t srv_chat_html_len;

/* ---------------------------------------------------------------- the server (http.c) */

/* Opens the model, starts the scheduler and the HTTP daemon, serves until SIGINT / SIGTERM, then stops
 * cleanly. Returns the process exit status. */
int srv_run(const srv_options *o);

/* The same server without signals, for tests and fuzzing. listen false: no socket is opened and
 * connections come from srv_add_connection (a socketpair end, say). false with msg on failure. */
typedef struct srv srv;
bool srv_start(const srv_options *o, bool listen, srv **out, char *msg, size_t n);
unsigned srv_port(const srv *s);
bool srv_add_connection(srv *s, int fd, const struct sockaddr *addr, unsigned addr_len);
void srv_stop(srv *s);

double srv_now(void);

#endif
