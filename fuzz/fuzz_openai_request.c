/* fuzz/fuzz_openai_request.c — libFuzzer harness for the server's request parsers and response writers
 * (server/openai.c, server/responses.c, server/anthropic.c, server/ollama.c, through their gen_endpoints).
 * Byte 0 picks the endpoint (bit 0 and bits 2-4: an entry of `endpoints`, bit 0 alone choosing OpenAI's chat or
 * completions), whether the rendered job fails midway (bit 1) and the API key (bits 5-7: Responses keep
 * finished answers per key in a small store, for previous_response_id); the rest is the body.
 * Properties (abort() on violation):
 *  - the endpoint's parse either accepts (then: a non-empty prompt of in-vocabulary ids shorter than the
 *    context, n in 1..8, max_tokens within the limits, sampling options gm_sampling_validate accepts,
 *    stop strings non-empty) or fails with a 400/500 and a message;
 *  - for an accepted request, a job whose choices hold arbitrary bytes (the body itself: invalid
 *    UTF-8, NULs, quotes) streams, taken and rendered as the connection thread does it (half the text,
 *    then the rest), as `data:` events of JSON objects ending with [DONE] (an error event first when
 *    the job fails midway) — Anthropic's: `event: NAME` + `data:` events of JSON objects whose type is
 *    NAME, from message_start to message_stop (or ending with an error event); Ollama's: NDJSON, lines of
 *    JSON objects, the last one done (or the error) — and renders whole as a JSON object. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_vocab.h"
#include "server/server.h"

/* The endpoints byte 0 picks from, with the protocol of their errors and streams. */
static const struct {
    const gen_endpoint *ep;
    srv_protocol proto;
} endpoints[] = {
    {&openai_completions, PROTO_OPENAI},
    {&openai_chat, PROTO_OPENAI},
    {&anthropic_messages, PROTO_ANTHROPIC},
    {&anthropic_count_tokens, PROTO_ANTHROPIC},
    {&openai_responses, PROTO_OPENAI},
    {&openai_responses_count, PROTO_OPENAI},
    {&ollama_generate, PROTO_OLLAMA},
    {&ollama_chat, PROTO_OLLAMA},
};

static gm_tokenizer *g_tok;
static srv_options g_opt;
static resp_store *g_store;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_tok = fv_build(true, NULL);
    g_opt = (srv_options){.parallel = 4, .max_prompt = 200, .max_tokens = 256, .n_ctx = 256};
    g_store = resp_store_new(4, 64 << 10);
    return 0;
}

static void fail(const char *what) {
    fprintf(stderr, "fuzz_openai_request: property violated: %s\n", what);
    abort();
}

static void check_accepted(const gen_request *rq) {
    if (rq->n_prompt <= 0 || rq->n_prompt >= 256 || rq->n_prompt > g_opt.max_prompt) fail("prompt length");
    for (int i = 0; i < rq->n_prompt; i++)
        if (rq->prompt[i] < 0 || rq->prompt[i] >= gm_tokenizer_n_vocab(g_tok)) fail("prompt id out of range");
    if (rq->n < 1 || rq->n > SRV_MAX_N || rq->n > g_opt.parallel) fail("n");
    if (rq->max_tokens < 0 || rq->max_tokens > g_opt.max_tokens || rq->n_prompt + rq->max_tokens > 256) fail("max_tokens");
    if (gm_sampling_validate(&rq->smp, NULL) != GM_OK) fail("sampling options");
    for (int i = 0; i < rq->n_stop; i++)
        if (!rq->stop[i] || !rq->stop[i][0]) fail("empty stop string");
    if (rq->top_logprobs < 0 || rq->top_logprobs > SRV_MAX_TOP_LOGPROBS) fail("top_logprobs");
}

/* An accepted call: the job, its endpoint's state, and what a streaming reader keeps. */
typedef struct call {
    job *j;
    const gen_endpoint *ep;
    srv_protocol proto;
    void *state;
    job_reader rd;
    srv_buf out;
} call;

static void check_json_object(const char *s, size_t n) {
    cJSON *o = cJSON_ParseWithLength(s, n);
    if (!cJSON_IsObject(o)) fail("output is not a JSON object");
    cJSON_Delete(o);
}

/* Takes and renders whatever the job has to stream now, as the connection thread does (the take is
 * the part under j->mu; there is no other thread here). false when there was nothing to take. */
static bool stream_step(call *k) {
    stream_view v;
    const bool have = job_stream_take(k->j, &k->rd, &v);
    if (have) k->ep->render(k->state, &v, g_tok, &k->out);
    stream_view_free(&v);
    return have;
}

/* The stream's bytes as SSE: `data:` events of JSON objects (an error object if `failed`), ending with [DONE]. */
static void check_sse(const srv_buf *out, bool failed) {
    const char *p = out->p, *end = out->p + out->len;
    bool done = false, saw_error = false;
    while (p < end) {
        const char *e = memmem(p, (size_t)(end - p), "\n\n", 2);
        if (!e || strncmp(p, "data: ", 6)) fail("SSE framing");
        if (done) fail("an event after [DONE]");
        if (e - p == 12 && !strncmp(p + 6, "[DONE]", 6)) {
            done = true;
        } else {
            check_json_object(p + 6, (size_t)(e - p - 6));
            saw_error = saw_error || !strncmp(p + 6, "{\"error\":", 9);
        }
        p = e + 2;
    }
    if (!done) fail("no [DONE]");
    if (failed != saw_error) fail(failed ? "a failed stream without its error event" : "an error event in a good stream");
}

/* NDJSON: lines of JSON objects; the last one the error (`failed`) or the end ("done": true), no other
 * line done. */
static void check_ndjson(const srv_buf *out, bool failed) {
    const char *p = out->p, *end = out->p + out->len;
    bool saw_done = false, saw_error = false;
    while (p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e) fail("an NDJSON line without its newline");
        if (saw_done || saw_error) fail("a line after the last one");
        cJSON *o = cJSON_ParseWithLength(p, (size_t)(e - p));
        if (!cJSON_IsObject(o)) fail("an NDJSON line that is not a JSON object");
        saw_done = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "done"));
        saw_error = cJSON_GetObjectItemCaseSensitive(o, "error") != NULL;
        cJSON_Delete(o);
        p = e + 1;
    }
    if (failed ? !saw_error : !saw_done) fail(failed ? "a failed stream without its error line" : "a stream without its done line");
}

/* Responses' SSE: `event: T` / `data: {"type": T, ..., "sequence_number": 0, 1, ...}` blocks, ending with
 * response.completed or .incomplete, or (failed) an error event and response.failed. */
static void check_typed_sse(const srv_buf *out, bool failed) {
    const char *p = out->p, *end = out->p + out->len;
    double seq = 0;
    char last[64] = "";
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *e = memmem(p, (size_t)(end - p), "\n\n", 2);
        if (!nl || !e || strncmp(p, "event: ", 7) || strncmp(nl + 1, "data: ", 6)) fail("typed SSE framing");
        cJSON *o = cJSON_ParseWithLength(nl + 7, (size_t)(e - nl - 7));
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type"), *sn = cJSON_GetObjectItemCaseSensitive(o, "sequence_number");
        if (!cJSON_IsString(type) || (size_t)(nl - p - 7) != strlen(type->valuestring) ||
            strncmp(p + 7, type->valuestring, (size_t)(nl - p - 7)))
            fail("an event whose data does not name its type");
        if (!cJSON_IsNumber(sn) || sn->valuedouble != seq++) fail("sequence numbers are not 0, 1, 2, ...");
        snprintf(last, sizeof last, "%s", type->valuestring);
        cJSON_Delete(o);
        p = e + 2;
    }
    if (failed ? strcmp(last, "response.failed") : strcmp(last, "response.completed") && strcmp(last, "response.incomplete"))
        fail("the stream does not end with its final event");
}

/* Anthropic's stream: `event: NAME\ndata: {"type": NAME, ...}` events, message_start first, message_stop
 * last (an error event last if `failed`); content blocks opened, filled and closed by index in order. */
static void check_named_sse(const srv_buf *out, bool failed) {
    const char *p = out->p, *end = out->p + out->len;
    char last[40] = "";
    int n = 0, opened = 0, open = -1;
    while (p < end) {
        const char *e = memmem(p, (size_t)(end - p), "\n\n", 2), *nl = memchr(p, '\n', (size_t)(end - p));
        if (!e || strncmp(p, "event: ", 7) || nl >= e || strncmp(nl + 1, "data: ", 6)) fail("named SSE framing");
        if (!strcmp(last, "message_stop") || !strcmp(last, "error")) fail("an event after the end");
        snprintf(last, sizeof last, "%.*s", (int)(nl - p - 7 < 39 ? nl - p - 7 : 39), p + 7);
        cJSON *o = cJSON_ParseWithLength(nl + 7, (size_t)(e - nl - 7));
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type"), *idx = cJSON_GetObjectItemCaseSensitive(o, "index");
        if (!cJSON_IsObject(o) || !cJSON_IsString(type) || strcmp(type->valuestring, last)) fail("an event's data type is not its name");
        if (n++ == 0 && strcmp(last, "message_start") && strcmp(last, "error")) fail("a stream not opened by message_start");
        if (!strcmp(last, "content_block_start")) {
            if (open >= 0 || !cJSON_IsNumber(idx) || idx->valueint != opened) fail("content block indices");
            open = opened++;
        } else if (!strcmp(last, "content_block_delta") || !strcmp(last, "content_block_stop")) {
            if (open < 0 || !cJSON_IsNumber(idx) || idx->valueint != open) fail("a delta or stop outside its block");
            if (!strcmp(last, "content_block_stop")) open = -1;
        } else if (!strcmp(last, "message_delta") && (open >= 0 || !opened)) {
            fail("message_delta with a block open, or no block");
        }
        cJSON_Delete(o);
        p = e + 2;
    }
    if (strcmp(last, failed ? "error" : "message_stop")) fail(failed ? "a failed stream without its error event" : "no message_stop");
}

/* Choice c holds `text` (visible up to its first half: the rest could still be a stop string) and,
 * when asked, two log-probability entries splitting the text. */
static void fill_choice(const job *j, gen_session *c, int i, const uint8_t *text, size_t len) {
    c->text = malloc(len + 1);
    if (!c->text) fail("out of memory");
    memcpy(c->text, text, len);
    c->text[len] = 0;
    c->len = len;
    c->visible = len / 2;
    c->n_gen = (int)(len % 7);
    if (!j->rq.logprobs) return;
    c->lp = calloc(2, sizeof *c->lp);
    if (!c->lp) fail("out of memory");
    c->n_lp = c->cap_lp = 2;
    c->lp[0] = (gen_logprob){.id = (int32_t)((len + (size_t)i) % 300), .lp = -0.5f, .n_top = j->rq.top_logprobs, .text_end = len / 2};
    c->lp[1] = (gen_logprob){.id = 5, .lp = -1.5f, .text_end = len};
    for (int k = 0; k < j->rq.top_logprobs; k++) c->lp[0].top_id[k] = k, c->lp[0].top_lp[k] = -(float)k;
}

/* An accepted job whose choices say `text`: streamed in two steps (half the text, then the rest and
 * the end, or a failure when `fail_midway`), then answered whole. Both must be well-formed JSON. */
static void check_rendering(call *k, const uint8_t *text, size_t len, bool fail_midway) {
    job *j = k->j;
    for (int i = 0; i < j->rq.n; i++) fill_choice(j, &j->gen[i], i, text, len);
    j->started = true;
    stream_step(k); /* the role chunks and the first halves */
    if (k->rd.closed) fail("a stream closed before its job ended");
    if (fail_midway) {
        job_fail(j, JOB_ERR_INTERNAL, "step failed: %.*s", (int)(len < 40 ? len : 40), (const char *)text);
    } else {
        for (int i = 0; i < j->rq.n; i++) j->gen[i].visible = len, j->gen[i].finish = i % 2 ? GEN_MAX_TOKENS : GEN_STOP_STRING;
    }
    j->done = true;
    for (int steps = 0; !k->rd.closed; steps++)
        if (!stream_step(k) || steps > 2) fail("a finished job's stream does not end");
    if (stream_step(k)) fail("something to send after the end");
    if (k->proto == PROTO_ANTHROPIC) check_named_sse(&k->out, fail_midway);
    else if (k->ep == &openai_responses) check_typed_sse(&k->out, fail_midway);
    else if (k->proto == PROTO_OLLAMA) check_ndjson(&k->out, fail_midway);
    else check_sse(&k->out, fail_midway);
    if (fail_midway) return;
    char *resp = k->ep->response(k->state, j, g_tok);
    if (!resp) fail("no response");
    check_json_object(resp, strlen(resp));
    free(resp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || !g_tok) return 0;
    const unsigned pick = ((unsigned)((data[0] >> 2) & 7) << 1 | (data[0] & 1)) % (sizeof endpoints / sizeof *endpoints);
    call k = {.j = job_new(), .ep = endpoints[pick].ep, .proto = endpoints[pick].proto};
    if (!k.j) return 0;
    const bool fail_midway = data[0] & 2;
    /* no vision encoder: image parts are 400s */
    const gen_call_in in = {(const char *)data + 1, size - 1, g_tok, &g_opt, 256, "m\"odel", NULL, g_store, data[0] >> 5};
    srv_error err = {0};
    if ((k.state = k.ep->parse(&in, &k.j->rq, &err))) {
        if (err.status) fail("accepted with an error set");
        check_accepted(&k.j->rq);
        if (k.ep == &openai_responses_count || k.ep == &anthropic_count_tokens) { /* a count: nothing runs */
            char *c = k.ep->response(k.state, k.j, g_tok);
            if (!c) fail("no count");
            check_json_object(c, strlen(c));
            free(c);
        } else {
            check_rendering(&k, data + 1, size - 1 < 512 ? size - 1 : 512, fail_midway);
        }
        k.ep->free_call(k.state);
    } else {
        if ((err.status != 400 && err.status != 404 && err.status != 500) || !err.msg[0])
            fail("a refusal without a 400 (404: an unknown previous_response_id, another model's name) and a message");
        char *e = k.proto == PROTO_ANTHROPIC ? anthropic_error_json(&err)
                  : k.proto == PROTO_OLLAMA  ? ollama_error_json(&err)
                                             : openai_error_json(err.type, err.code, err.msg);
        if (!e) fail("no error JSON");
        check_json_object(e, strlen(e));
        free(e);
    }
    srv_buf_free(&k.out);
    job_release(k.j);
    return 0;
}
