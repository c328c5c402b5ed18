/* fuzz/fuzz_http.c — libFuzzer harness for the whole HTTP layer of `gemma serve`. Raw bytes (request
 * lines, headers, bodies, chunked uploads, pipelined requests) go through a socket into an in-process
 * server (srv_start without a listening socket, then srv_add_connection) over the tiny Gemma 3 test
 * model, so they meet the same libmicrohttpd parsing, routing, guard, request checks, scheduler and
 * writers as `gemma serve` does. The connection is one end of a Unix socket pair with a made-up
 * 127.0.0.1 address: no ports, no TIME_WAIT, no resets losing data, and the server's hang-up checks
 * (POLLRDHUP, a half-close probe) behave as on TCP; libmicrohttpd only logs that TCP_NODELAY and
 * TCP_CORK do not apply. Byte 0 bit 0 picks the server: an open one (loopback, no key), or one with
 * API keys, keyed prefix scopes, --cors, --allowed-hosts and --lookup. The remaining bytes are written
 * to the connection while its answer is read; then the harness half-closes and reads to the end.
 * Properties (abort() on violation):
 *  - every connection ends: nothing moving for HANG_SECONDS on a connection still open is a hang (the
 *    harness half-closes, the server has a request deadline, and generation is bounded by the context);
 *  - the answer is a run of whole responses, each starting "HTTP/1.x NNN " and delimited by its
 *    Content-Length, its chunked encoding, or the end of the connection;
 *  - an application/json body is a JSON object; a 200 text/event-stream body is SSE `data:` events of
 *    JSON objects (and comments), ending with [DONE], or named `event:` + `data:` events (Anthropic's, ending
 *    with message_stop or error; Responses', ending with response.completed, .incomplete or .failed); a 200
 *    application/x-ndjson body (Ollama's) lines of JSON objects, the last one done or an error;
 *  - no 500 except for running out of memory. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/server.h"

enum { HANG_SECONDS = 5 };
/* bytes of answer kept for checking: pipelined requests for the chat page can ask for far more; what is
 * past this is read and dropped, and the response it cuts is not checked */
enum { KEEP_BYTES = 8 << 20 };

static srv *g_srv[2];
static struct sockaddr_in g_peer; /* the address every connection claims to come from */
static char *g_answer;            /* reused across inputs: the per-input heap stays flat */
/* libmicrohttpd logs to stderr every malformed request and, on a Unix socket, every response (TCP
 * options that do not apply), so a long run may close it (-close_fd_mask=2): the harness says its
 * findings on a copy of stderr taken before libFuzzer closes it */
static FILE *g_err;

static void fail(const char *what) {
    fprintf(g_err, "fuzz_http: property violated: %s\n", what);
    fflush(g_err);
    abort();
}

/* A system call of the harness's own failed: not a property of the server, but nothing to go on with. */
static void fail_sys(const char *what) {
    fprintf(g_err, "fuzz_http: %s: %s\n", what, strerror(errno));
    fflush(g_err);
    abort();
}

/* ---------------------------------------------------------------- the servers */

static const char *const g_keys[] = {"fuzz-key-1", "fuzz-key-2"};

/* Small limits everywhere so that mutations reach them: a 128-token context, 2 sequences, a queue of 2. */
static srv_options options(bool guarded) {
    srv_options o = {.model_path = GM_TEST_DATA "/tiny/gemma3.gguf", .model_name = "tiny", .host = "127.0.0.1",
                     .threads = 1, .n_ctx = 128, .parallel = 2, .queue = 2, .chunk = 32, .max_conns = 64,
                     .max_conns_per_ip = 0, .request_timeout = 2, .idle_timeout = 4, .max_body = 65536, .max_prompt = 127,
                     .max_tokens = 8, .quiet = true};
    if (guarded) {
        o.model_name = "tiny \"q\" \\ m"; /* echoed in every response and label: must be escaped */
        o.api_keys = g_keys;
        o.n_api_keys = 2;
        o.prefix_scope_key = true;
        o.cors = "https://app.example";
        o.allowed_hosts = "app.example,api.example";
        o.lookup = true;
        o.responses_store = 4; /* /v1/responses kept for previous_response_id, per key */
        o.responses_store_bytes = 1 << 16;
    }
    return o;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN); /* a server writing to a closed connection gets EPIPE, not a signal */
    const int err_fd = dup(2);
    g_err = err_fd >= 0 ? fdopen(err_fd, "w") : NULL;
    if (!g_err) g_err = stderr;
    g_peer.sin_family = AF_INET;
    g_peer.sin_port = htons(40000);
    g_peer.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (!(g_answer = malloc(KEEP_BYTES))) fail("out of memory");
    for (int i = 0; i < 2; i++) {
        /* the servers read their options for as long as they live */
        static srv_options o[2];
        o[i] = options(i == 1);
        char msg[1024];
        if (!srv_start(&o[i], false, &g_srv[i], msg, sizeof msg)) {
            fprintf(g_err, "fuzz_http: cannot start the server: %s\n", msg);
            exit(1);
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- one connection */

/* Sends what poll said fits; a server that closed (it read no further) ends the sending. */
static void send_some(int fd, const uint8_t *data, size_t n, size_t *sent) {
    const ssize_t k = send(fd, data + *sent, n - *sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) *sent += (size_t)k;
    else if (k < 0 && errno != EAGAIN && errno != EINTR) *sent = n;
}

/* Reads what is there; false at the end of the connection (a Unix socket whose peer closed with bytes
 * unread says ECONNRESET, but only once everything sent before has been read). */
static bool recv_some(int fd, size_t *got, size_t *dropped) {
    static char sink[1 << 16];
    char *dst = *got < KEEP_BYTES ? g_answer + *got : sink;
    const size_t room = *got < KEEP_BYTES ? KEEP_BYTES - *got : sizeof sink;
    const ssize_t k = recv(fd, dst, room, MSG_DONTWAIT);
    if (k > 0) {
        if (dst == sink) *dropped += (size_t)k;
        else *got += (size_t)k;
        return true;
    }
    return k < 0 && (errno == EAGAIN || errno == EINTR);
}

/* Writes the request bytes while reading the answer (either side may wait on the other: a server
 * answers one pipelined request before it reads the next), half-closes once all is written, reads to
 * the end. Returns the bytes kept in g_answer; *dropped: those read past KEEP_BYTES. */
static size_t exchange(int fd, const uint8_t *data, size_t n, size_t *dropped) {
    size_t sent = 0, got = 0;
    bool half_closed = false;
    double last = srv_now();
    for (;;) {
        if (!half_closed && sent == n) {
            shutdown(fd, SHUT_WR);
            half_closed = true;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN | (half_closed ? 0 : POLLOUT)};
        if (poll(&p, 1, 100) < 0 && errno != EINTR) fail_sys("poll");
        const size_t before = sent + got + *dropped;
        if (p.revents & POLLOUT) send_some(fd, data, n, &sent);
        if ((p.revents & (POLLIN | POLLHUP | POLLERR)) && !recv_some(fd, &got, dropped)) return got;
        if (sent + got + *dropped != before) last = srv_now();
        else if (srv_now() - last > HANG_SECONDS) fail("a connection did not end (nothing moved for 5 s)");
    }
}

/* ---------------------------------------------------------------- the answer */

typedef struct response {
    int status;
    bool typed, json, sse, ndjson, chunked, has_length;
    size_t length;
    const char *body;   /* in the answer, or (chunked) decoded into a buffer of its own */
    size_t body_len;
} response;

static const char *find(const char *p, const char *end, const char *s) {
    return memmem(p, (size_t)(end - p), s, strlen(s));
}

static bool header_is(const char *line, const char *name) {
    return !strncasecmp(line, name, strlen(name)) && line[strlen(name)] == ':';
}

static const char *header_value(const char *line) {
    const char *v = strchr(line, ':') + 1;
    while (*v == ' ' || *v == '\t') v++;
    return v;
}

/* The status line and headers in [p, end) (end: just past "\r\n\r\n"). */
static void parse_head(const char *p, const char *end, response *r) {
    if (end - p < 13 || (strncmp(p, "HTTP/1.1 ", 9) && strncmp(p, "HTTP/1.0 ", 9))) fail("a response without an HTTP/1.x status line");
    for (int i = 9; i < 12; i++)
        if (p[i] < '0' || p[i] > '9') fail("a status that is not 3 digits");
    if (p[12] != ' ' && p[12] != '\r') fail("a status that is not 3 digits");
    r->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    for (const char *line = find(p, end, "\r\n") + 2; line < end - 2;) {
        const char *eol = find(line, end, "\r\n");
        char h[512];
        const size_t n = (size_t)(eol - line) < sizeof h - 1 ? (size_t)(eol - line) : sizeof h - 1;
        memcpy(h, line, n);
        h[n] = 0;
        if (!strchr(h, ':')) fail("a header line without ':'");
        if (header_is(h, "Content-Type")) {
            r->typed = true;
            r->json = !strncasecmp(header_value(h), "application/json", 16);
            r->sse = !strncasecmp(header_value(h), "text/event-stream", 17);
            r->ndjson = !strncasecmp(header_value(h), "application/x-ndjson", 20);
        } else if (header_is(h, "Transfer-Encoding")) {
            r->chunked = !strcasecmp(header_value(h), "chunked");
        } else if (header_is(h, "Content-Length")) {
            char *e;
            r->length = strtoull(header_value(h), &e, 10);
            r->has_length = e != header_value(h);
        }
        line = eol + 2;
    }
}

/* The trailers after the last chunk: header lines up to an empty one. NULL when cut short. */
static const char *skip_trailers(const char *t, const char *end) {
    while (t && end - t >= 2 && strncmp(t, "\r\n", 2)) {
        const char *eol = find(t, end, "\r\n");
        t = eol ? eol + 2 : NULL;
    }
    return t && end - t >= 2 ? t + 2 : NULL;
}

/* A chunked body at *p, decoded into *out (malloc'd); *p moves past it. false when it is cut short. */
static bool dechunk(const char **p, const char *end, char **out, size_t *out_len) {
    size_t cap = 256, len = 0;
    char *buf = malloc(cap);
    if (!buf) fail("out of memory");
    for (;;) {
        const char *eol = find(*p, end, "\r\n");
        char *e;
        const unsigned long long size = eol ? strtoull(*p, &e, 16) : 0;
        if (eol && e == *p) fail("a chunk size that is not hexadecimal");
        const char *data = eol ? eol + 2 : NULL;
        if (!data || size + 2 > (unsigned long long)(end - data)) break; /* cut short */
        if (size == 0) {
            const char *next = skip_trailers(data, end);
            if (!next) break;
            *p = next, *out = buf, *out_len = len;
            return true;
        }
        if (strncmp(data + size, "\r\n", 2)) fail("a chunk not followed by CRLF");
        if (len + size + 1 > cap) {
            cap = (len + size + 1) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) fail("out of memory");
            buf = nb;
        }
        memcpy(buf + len, data, size);
        len += size;
        *p = data + size + 2;
    }
    free(buf);
    return false;
}

static void check_json_object(const char *s, size_t n, const char *what) {
    cJSON *o = cJSON_ParseWithLength(s, n);
    if (!cJSON_IsObject(o)) {
        fprintf(g_err, "fuzz_http: %s: %.*s\n", what, (int)(n < 400 ? n : 400), s);
        fail("a JSON body that is not a JSON object");
    }
    cJSON_Delete(o);
}

/* SSE: events of `data: ` + JSON object, or comments (":" lines: the half-close probe), then [DONE]; or
 * named events (`event: NAME` + `data: ` JSON object: Anthropic's and Responses' streams), whose last is
 * message_stop or error (Anthropic) or response.completed, .incomplete or .failed (Responses). */
static bool final_event(const char *name, size_t n) {
    static const char *const finals[] = {"message_stop", "error", "response.completed", "response.incomplete",
                                         "response.failed"};
    for (size_t i = 0; i < sizeof finals / sizeof *finals; i++)
        if (n == strlen(finals[i]) && !strncmp(name, finals[i], n)) return true;
    return false;
}

static void check_sse(const char *p, size_t n) {
    const char *end = p + n, *last = NULL; /* a named stream's last event */
    size_t last_n = 0;
    bool done = false;
    while (p < end) {
        const char *e = find(p, end, "\n\n");
        if (!e) fail("an SSE event not ended by a blank line");
        if (done) fail("an SSE event after [DONE]");
        if (*p == ':') {
        } else if (e - p == 12 && !strncmp(p, "data: [DONE]", 12)) {
            done = true;
        } else if (!strncmp(p, "data: ", 6)) {
            check_json_object(p + 6, (size_t)(e - p - 6), "an SSE event");
        } else if (!strncmp(p, "event: ", 7)) {
            const char *data = find(p, e, "\ndata: ");
            if (!data) fail("an SSE event line without its data");
            check_json_object(data + 7, (size_t)(e - data - 7), "an SSE event");
            last = p + 7, last_n = (size_t)(data - p - 7);
        } else {
            fail("an SSE line that is neither data nor a comment");
        }
        p = e + 2;
    }
    if (last && !done) {
        if (!final_event(last, last_n)) fail("a named stream that does not end with its final event");
        return;
    }
    if (!done) fail("a stream without [DONE]");
}

/* NDJSON (Ollama's streams): lines of JSON objects, the last one done or an error. */
static void check_ndjson(const char *p, size_t n) {
    const char *end = p + n;
    bool last = false;
    while (p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e) fail("an NDJSON line without its newline");
        if (last) fail("an NDJSON line after the last one");
        cJSON *o = cJSON_ParseWithLength(p, (size_t)(e - p));
        if (!cJSON_IsObject(o)) fail("an NDJSON line that is not a JSON object");
        last = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "done")) || cJSON_GetObjectItemCaseSensitive(o, "error");
        cJSON_Delete(o);
        p = e + 1;
    }
    if (!last) fail("an NDJSON stream without its last line");
}

static void check_body(const response *r) {
    if (r->json) check_json_object(r->body, r->body_len, "a JSON body");
    if (r->status == 500 && !memmem(r->body, r->body_len, "out of memory", 13)) {
        fprintf(g_err, "fuzz_http: 500: %.*s\n", (int)(r->body_len < 400 ? r->body_len : 400), r->body);
        fail("a 500 that is not out of memory");
    }
    if (r->sse && r->status == 200) check_sse(r->body, r->body_len);
    if (r->ndjson && r->status == 200) check_ndjson(r->body, r->body_len);
}

/* Whether a response has no body at all: interim ones, 204, 304, and (when the input has a HEAD
 * request) one announcing a length whose body is not there: the next response follows at once. */
static bool bodiless(const response *r, const char *p, const char *end, bool head_sent) {
    if (r->status < 200 || r->status == 204 || r->status == 304) return true;
    if (!head_sent || !r->has_length || r->length == 0) return false;
    return p == end || ((size_t)(end - p) >= 7 && !strncmp(p, "HTTP/1.", 7));
}

/* libmicrohttpd 0.9.75 writes the head of an error response of its own twice when it finds the error
 * while parsing the headers (a Content-Length too large or not a number): parse_connection_headers
 * queues the response and builds its head, then the state machine goes on to START_REPLY, which builds
 * it again. Its error pages have no Content-Type and ours always do, so a head without one followed at
 * once by the same status line is that first copy. */
static bool mhd_doubled_head(const response *r, const char *p, const char *head_end, const char *end) {
    const size_t line = (size_t)(find(p, head_end, "\r\n") - p);
    return !r->typed && r->status >= 400 && (size_t)(end - head_end) >= line && !memcmp(head_end, p, line);
}

/* One response at *p; false when the answer ends inside it. `cut`: the answer may lack its end. */
static bool check_response(const char **p, const char *end, bool head_sent, bool cut) {
    const char *head_end = find(*p, end, "\r\n\r\n");
    if (!head_end) return false;
    head_end += 4;
    response r = {0};
    parse_head(*p, head_end, &r);
    if (mhd_doubled_head(&r, *p, head_end, end)) {
        *p = head_end;
        return true;
    }
    const char *b = head_end;
    char *decoded = NULL;
    if (bodiless(&r, b, end, head_sent)) {
        *p = b; /* nothing to check: a head says nothing about a body's JSON */
        return true;
    }
    if (r.chunked) {
        if (!dechunk(&b, end, &decoded, &r.body_len)) return false;
        r.body = decoded;
    } else if (r.has_length) {
        if ((size_t)(end - b) < r.length) return false;
        r.body = b, r.body_len = r.length;
        b += r.length;
    } else { /* delimited by the end of the connection */
        if (cut) return false;
        r.body = b, r.body_len = (size_t)(end - b);
        b = end;
    }
    check_body(&r);
    free(decoded);
    *p = b;
    return true;
}

static void check_answer(const char *a, size_t n, bool cut, bool head_sent) {
    const char *p = a, *end = a + n;
    while (p < end)
        if (!check_response(&p, end, head_sent, cut)) {
            if (cut) return;
            fprintf(g_err, "fuzz_http: the answer ends inside a response: %.*s\n", (int)(end - p < 400 ? end - p : 400), p);
            fail("a response cut short");
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) fail_sys("socketpair");
    /* the server owns sv[1] from here, closing it even when it refuses the connection */
    if (!srv_add_connection(g_srv[data[0] & 1], sv[1], (const struct sockaddr *)&g_peer, sizeof g_peer))
        fail("the server refused a connection");
    size_t dropped = 0;
    const size_t n = exchange(sv[0], data + 1, size - 1, &dropped);
    close(sv[0]);
    if (getenv("FUZZ_HTTP_DUMP")) fwrite(g_answer, 1, n, g_err); /* to see an answer while debugging */
    check_answer(g_answer, n, dropped > 0, memmem(data + 1, size - 1, "HEAD", 4) != NULL);
    return 0;
}
