/* fuzz/fuzz_openai_request.c — libFuzzer harness for the server's OpenAI request parser and response
 * writer (server/openai.c). Byte 0 picks the endpoint (bit 0: chat or completions) and whether the
 * rendered job fails midway (bit 1); the rest is the body.
 * Properties (abort() on violation):
 *  - openai_parse either accepts (then: a non-empty prompt of in-vocabulary ids shorter than the
 *    context, n in 1..8, max_tokens within the limits, sampling options gm_sampling_validate accepts,
 *    stop strings non-empty) or fails with a 400/500 and a message;
 *  - for an accepted request, a job whose choices hold arbitrary bytes (the body itself: invalid
 *    UTF-8, NULs, quotes) streams, taken and rendered as the connection thread does it (half the text,
 *    then the rest), as `data:` events of JSON objects ending with [DONE] (an error event first when
 *    the job fails midway), and renders whole as a JSON object. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_vocab.h"
#include "server/server.h"

static gm_tokenizer *g_tok;
static srv_options g_opt;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_tok = fv_build(true, NULL);
    g_opt = (srv_options){.parallel = 4, .max_prompt = 200, .max_tokens = 256, .n_ctx = 256};
    return 0;
}

static void fail(const char *what) {
    fprintf(stderr, "fuzz_openai_request: property violated: %s\n", what);
    abort();
}

static void check_accepted(const job *j) {
    if (j->n_prompt <= 0 || j->n_prompt >= 256 || j->n_prompt > g_opt.max_prompt) fail("prompt length");
    for (int i = 0; i < j->n_prompt; i++)
        if (j->prompt[i] < 0 || j->prompt[i] >= gm_tokenizer_n_vocab(g_tok)) fail("prompt id out of range");
    if (j->n < 1 || j->n > SRV_MAX_N || j->n > g_opt.parallel) fail("n");
    if (j->max_tokens < 0 || j->max_tokens > g_opt.max_tokens || j->n_prompt + j->max_tokens > 256) fail("max_tokens");
    if (gm_sampling_validate(&j->smp, NULL) != GM_OK) fail("sampling options");
    for (int i = 0; i < j->n_stop; i++)
        if (!j->stop[i] || !j->stop[i][0]) fail("empty stop string");
    if (j->top_logprobs < 0 || j->top_logprobs > SRV_MAX_TOP_LOGPROBS) fail("top_logprobs");
}

static void check_json_object(const char *s, size_t n) {
    cJSON *o = cJSON_ParseWithLength(s, n);
    if (!cJSON_IsObject(o)) fail("output is not a JSON object");
    cJSON_Delete(o);
}

/* Takes and renders whatever the job has to stream now, as the connection thread does (the take is
 * the part under j->mu; there is no other thread here). false when there was nothing to take. */
static bool stream_step(job *j) {
    stream_view v;
    const bool have = openai_stream_take(j, &v);
    if (have) openai_stream_render(j, &v, g_tok);
    stream_view_free(&v);
    return have;
}

/* j->out as SSE: `data:` events of JSON objects (an error object if `failed`), ending with [DONE]. */
static void check_sse(const job *j, bool failed) {
    const char *p = j->out, *end = j->out + j->out_len;
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

/* Choice c holds `text` (visible up to its first half: the rest could still be a stop string) and,
 * when asked, two log-probability entries splitting the text. */
static void fill_choice(const job *j, choice *c, int i, const uint8_t *text, size_t len) {
    c->text = malloc(len + 1);
    if (!c->text) fail("out of memory");
    memcpy(c->text, text, len);
    c->text[len] = 0;
    c->len = len;
    c->visible = len / 2;
    c->n_gen = (int)(len % 7);
    if (!j->logprobs) return;
    c->lp = calloc(2, sizeof *c->lp);
    if (!c->lp) fail("out of memory");
    c->n_lp = c->cap_lp = 2;
    c->lp[0] = (lp_entry){.id = (int32_t)((len + (size_t)i) % 300), .lp = -0.5f, .n_top = j->top_logprobs, .text_end = len / 2};
    c->lp[1] = (lp_entry){.id = 5, .lp = -1.5f, .text_end = len};
    for (int k = 0; k < j->top_logprobs; k++) c->lp[0].top_id[k] = k, c->lp[0].top_lp[k] = -(float)k;
}

/* An accepted job whose choices say `text`: streamed in two steps (half the text, then the rest and
 * the end, or a failure when `fail_midway`), then answered whole. Both must be well-formed JSON. */
static void check_rendering(job *j, const uint8_t *text, size_t len, bool fail_midway) {
    for (int i = 0; i < j->n; i++) fill_choice(j, &j->ch[i], i, text, len);
    j->started = true;
    snprintf(j->id, sizeof j->id, "x");
    j->model = "m\"odel";
    stream_step(j); /* the role chunks and the first halves */
    if (j->stream_closed) fail("a stream closed before its job ended");
    if (fail_midway) {
        job_fail(j, 500, "server_error", NULL, "step failed: %.*s", (int)(len < 40 ? len : 40), (const char *)text);
    } else {
        for (int i = 0; i < j->n; i++) j->ch[i].visible = len, j->ch[i].finish = i % 2 ? "length" : "stop";
    }
    j->done = true;
    for (int steps = 0; !j->stream_closed; steps++)
        if (!stream_step(j) || steps > 2) fail("a finished job's stream does not end");
    if (stream_step(j)) fail("something to send after the end");
    check_sse(j, fail_midway);
    if (fail_midway) return;
    char *resp = openai_response(j, g_tok);
    if (!resp) fail("no response");
    check_json_object(resp, strlen(resp));
    free(resp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || !g_tok) return 0;
    job *j = job_new();
    if (!j) return 0;
    j->model = "m";
    const job_kind kind = data[0] & 1 ? JOB_CHAT : JOB_COMPLETION;
    const bool fail_midway = data[0] & 2;
    if (openai_parse(j, kind, (const char *)data + 1, size - 1, g_tok, &g_opt, 256)) {
        if (j->err_http) fail("accepted with an error set");
        check_accepted(j);
        check_rendering(j, data + 1, size - 1 < 512 ? size - 1 : 512, fail_midway);
    } else {
        if ((j->err_http != 400 && j->err_http != 500) || !j->err_msg[0]) fail("a refusal without a 400 and a message");
        char *e = openai_error_json(j->err_type, j->err_code, j->err_msg);
        if (!e) fail("no error JSON");
        check_json_object(e, strlen(e));
        free(e);
    }
    job_release(j);
    return 0;
}
