/* server/session.c — a choice's tokens into text: incremental detokenization, stop strings matched
 * across token boundaries (the tail that may still grow into one is held back, never shown), the
 * limits, log-probabilities. Protocol-neutral: the endpoint decides how the result is written. */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/random.h"
#include "gemma_chat.h"
#include "gemma_grammar.h"
#include "gemma_vision.h"
#include "server/session.h"

void gen_request_init(gen_request *rq) {
    memset(rq, 0, sizeof *rq);
    rq->n = 1;
    rq->smp = gm_sampling_default();
}

int gen_request_groups(const gen_request *rq) { return rq->n_groups > 1 ? rq->n_groups : 1; }

void gen_request_group(const gen_request *rq, int g, const int32_t **prompt, int *n) {
    const int begin = g > 0 ? rq->group_end[g - 1] : 0, end = rq->n_groups > 1 ? rq->group_end[g] : rq->n_prompt;
    *prompt = rq->prompt + begin;
    *n = end - begin;
}

void gen_request_clear(gen_request *rq) {
    for (int i = 0; i < rq->n_stop; i++) free(rq->stop[i]);
    free(rq->prompt);
    free(rq->bias);
    gm_grammar_free(rq->grammar);
    rq->grammar = NULL;
    for (int i = 0; i < rq->n_tools; i++) {
        free((char *)rq->tools[i].name);
        free((char *)rq->tools[i].description);
        free((char *)rq->tools[i].parameters);
    }
    free(rq->tools);
    rq->tools = NULL;
    rq->n_tools = 0;
    for (int i = 0; i < rq->n_images; i++) gm_vision_rows_free(&rq->images[i]);
    free(rq->images);
    free(rq->image_pos);
    rq->images = NULL;
    rq->image_pos = NULL;
    rq->n_images = 0;
    rq->prompt = NULL;
    rq->bias = NULL;
    rq->smp.logit_bias = NULL;
    rq->smp.n_logit_bias = 0;
    rq->n_prompt = rq->n_stop = 0;
}

gm_status gen_session_start(gen_session *g, const gen_request *rq, const gm_tokenizer *tok, int n_vocab, int n_ctx,
                            gm_error *err) {
    g->rq = rq;
    g->tok = tok;
    g->n_vocab = n_vocab;
    g->n_ctx = n_ctx;
    /* with tools the parser decodes the reply (it holds its own detokenizer) */
    if (rq->tool_mode != TOOLS_NONE) return gm_tool_parser_new(tok, rq->tools, (size_t)rq->n_tools, &g->tp, err);
    return gm_detok_stream_new(tok, false, &g->ds, err);
}

/* The calls read that have an id (all of them, unless an id's allocation failed). */
int gen_session_n_calls(const gen_session *g) {
    const int n = g->tp ? (int)gm_tool_parser_n_calls(g->tp) : 0;
    return n < g->n_call_ids ? n : g->n_call_ids;
}

void gen_session_close(gen_session *g) {
    gm_detok_stream_free(g->ds);
    g->ds = NULL;
}

void gen_session_free(gen_session *g) {
    gen_session_close(g);
    gm_tool_parser_free(g->tp);
    free(g->call_id);
    g->tp = NULL;
    g->call_id = NULL;
    free(g->text);
    free(g->lp);
    g->text = NULL;
    g->lp = NULL;
}

/* ---------------------------------------------------------------- text */

static bool grow_text(gen_session *g, size_t add) {
    if (g->len + add + 1 <= g->cap) return true;
    size_t cap = (g->len + add + 1) * 2 + 64;
    char *p = realloc(g->text, cap);
    if (!p) return false;
    g->text = p;
    g->cap = cap;
    return true;
}

static void append_text(gen_session *g, const char *t, size_t n) {
    if (!n || !grow_text(g, n)) return;
    memcpy(g->text + g->len, t, n);
    g->len += n;
    g->text[g->len] = 0;
}

/* Ids for the calls read since the last look: OpenAI's call_ prefix and 16 random hex digits. */
static void name_calls(gen_session *g) {
    const int n = g->tp ? (int)gm_tool_parser_n_calls(g->tp) : 0;
    if (n <= g->n_call_ids) return;
    char (*p)[40] = realloc(g->call_id, (size_t)n * sizeof *p);
    if (!p) return;
    g->call_id = p;
    for (; g->n_call_ids < n; g->n_call_ids++) {
        uint64_t r;
        gm_random_words(&r, 1);
        snprintf(g->call_id[g->n_call_ids], sizeof *g->call_id, "call_%016llx", (unsigned long long)r);
    }
}

static void append_flushed(gen_session *g) {
    const char *t;
    size_t n;
    if (g->tp) gm_tool_parser_finish(g->tp, &t, &n);
    else gm_detok_stream_flush(g->ds, &t, &n);
    append_text(g, t, n);
    name_calls(g);
}

/* After new text from byte old_len on: cut at the earliest stop string (it and what follows are never
 * shown), else hold back the longest tail that could still grow into one. */
static void apply_stops(gen_session *g, size_t old_len) {
    const gen_request *rq = g->rq;
    size_t best = SIZE_MAX;
    int hit = -1;
    for (int k = 0; k < rq->n_stop; k++) {
        const size_t sl = strlen(rq->stop[k]);
        const size_t from = old_len >= sl - 1 ? old_len - (sl - 1) : 0; /* a match may straddle old_len */
        if (g->len < from + sl) continue;
        const char *p = memmem(g->text + from, g->len - from, rq->stop[k], sl);
        if (p && (size_t)(p - g->text) < best) best = (size_t)(p - g->text), hit = k;
    }
    if (best != SIZE_MAX) {
        g->stop_matched = rq->stop[hit]; /* Anthropic's stop_sequence names it */
        g->len = best;
        g->text[g->len] = 0;
        g->visible = g->len;
        g->finish = GEN_STOP_STRING;
        return;
    }
    size_t hold = 0;
    for (int k = 0; k < rq->n_stop; k++) {
        const size_t sl = strlen(rq->stop[k]);
        for (size_t h = sl - 1; h > hold; h--)
            if (h <= g->len && !memcmp(g->text + g->len - h, rq->stop[k], h)) {
                hold = h;
                break;
            }
    }
    if (g->len - hold > g->visible) g->visible = g->len - hold;
}

/* ---------------------------------------------------------------- log-probabilities */

static gen_logprob *new_lp(gen_session *g) {
    if (g->n_lp == g->cap_lp) {
        const int cap = g->cap_lp ? g->cap_lp * 2 : 32;
        gen_logprob *p = realloc(g->lp, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        g->lp = p;
        g->cap_lp = cap;
    }
    gen_logprob *e = &g->lp[g->n_lp++];
    memset(e, 0, sizeof *e);
    return e;
}

/* log-softmax of the raw logits: the taken token's and the top k */
static void record_logprobs(gen_session *g, const float *l, int32_t tok) {
    const int V = g->n_vocab, k = g->rq->top_logprobs;
    gen_logprob *e = new_lp(g);
    if (!e) return;
    float mx = l[0];
    for (int i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)l[i] - mx);
    const float lse = mx + (float)log(sum);
    e->id = tok;
    e->lp = l[tok] - lse;
    for (int i = 0; i < V && k > 0; i++) { /* insertion into the k best so far */
        if (e->n_top == k && l[i] <= e->top_lp[k - 1]) continue;
        int p = e->n_top < k ? e->n_top++ : k - 1;
        while (p > 0 && e->top_lp[p - 1] < l[i]) {
            e->top_lp[p] = e->top_lp[p - 1];
            e->top_id[p] = e->top_id[p - 1];
            p--;
        }
        e->top_lp[p] = l[i];
        e->top_id[p] = i;
    }
    for (int i = 0; i < e->n_top; i++) e->top_lp[i] -= lse;
}

int gen_session_lp_shown(const gen_session *g, size_t upto) {
    int k = 0;
    while (k < g->n_lp && (k == 0 ? 0 : g->lp[k - 1].text_end) < upto) k++;
    if (g->finish && upto == g->len && k < g->n_lp && gen_finish_is_length(g->finish)) k = g->n_lp;
    return k;
}

/* ---------------------------------------------------------------- one token */

void gen_session_take(gen_session *g, int32_t token, const float *logits, int length) {
    const gen_request *rq = g->rq;
    const size_t old_len = g->len;
    g->n_gen++;
    if (gm_token_is_eog(g->tok, token) && !rq->ignore_eos) {
        append_flushed(g);
        g->finish = GEN_END_OF_TURN;
    } else if (g->tp) { /* content, thoughts and calls apart; a calling turn's end token ends the choice */
        const char *t = NULL;
        size_t n = 0;
        const bool stop = gm_tool_parser_push(g->tp, token, &t, &n);
        append_text(g, t, n);
        name_calls(g);
        if (stop && !rq->ignore_eos) {
            append_flushed(g);
            g->finish = GEN_END_OF_TURN;
        }
    } else {
        const char *t = NULL;
        size_t n = 0;
        gm_error err = {0};
        if (!gm_detok_stream_push(g->ds, token, &t, &n, &err)) append_text(g, t, n);
    }
    if (rq->logprobs && logits) record_logprobs(g, logits, token);
    if (!g->finish) apply_stops(g, old_len);
    const int limit = rq->max_tokens > 0 ? rq->max_tokens : INT32_MAX;
    if (!g->finish && (g->n_gen >= limit || length >= g->n_ctx)) {
        const size_t before = g->len;
        append_flushed(g); /* the bytes of an unfinished character */
        apply_stops(g, before);
        if (!g->finish) g->finish = g->n_gen >= limit ? GEN_MAX_TOKENS : GEN_CONTEXT_FULL;
    }
    if (g->finish) g->visible = g->len;
    if (rq->logprobs && g->n_lp) g->lp[g->n_lp - 1].text_end = g->len;
}
