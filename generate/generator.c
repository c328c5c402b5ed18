/* generate/generator.c — the generator: a token history over a KV cache, naive and cached steps,
 * logits for scoring, caller embeddings, hidden-state taps (see the generator section of gemma.h).
 *
 * State: tok[0..n_tok) is the history; the cache holds positions 0..n_cached-1; `logits` holds the
 * logits after tok[n_tok-1] when logits_valid (then n_cached == n_tok). Every entry point brings
 * the cache up to date through sync(), so prompt reuse and chat turns compute only what is new. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "generate/sampler.h"
#include "model/forward.h"
#include "model/kvcache.h"
#include "model/model.h"

struct gm_generator {
    gm_model *m;
    const gm_config *c;
    gm_generator_options opt;
    int n_ctx, n_batch;
    gm_pool *pool;
    gm_forward *fwd;
    gm_kvcache cache;
    int32_t *tok;
    int n_tok, n_cached;
    float *logits;
    bool logits_valid;
    gm_sampler smp;
    uint64_t seed;
    bool seeded;
    int32_t stop[8];
    int n_stop;
    int *aux_ids;
    int n_aux;
    float *aux_rows;
    int n_aux_rows;
};

static void collect_stop_ids(gm_generator *g) {
    int32_t ids[4];
    size_t n = g->m->tok ? gm_tokenizer_stop_ids(g->m->tok, ids) : 0;
    g->n_stop = 0;
    for (size_t i = 0; i < n && i < 4; i++) g->stop[g->n_stop++] = ids[i];
    if (g->c->eos_id >= 0) g->stop[g->n_stop++] = g->c->eos_id;
    if (g->c->eot_id >= 0) g->stop[g->n_stop++] = g->c->eot_id;
}

gm_status gm_generator_new(gm_model *m, const gm_generator_options *opt, gm_generator **out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "generator: out is NULL");
    *out = NULL;
    if (!m) return gm_fail(err, GM_ERR_ARG, "generator: model is NULL");
    gm_generator_options o = opt ? *opt : (gm_generator_options){0};
    const gm_config *c = &m->cfg;
    if (o.n_ctx < 0 || o.n_ctx > c->context_length)
        return gm_fail(err, GM_ERR_ARG, "generator: n_ctx %d must be in [0, %d] (the model's context length; 0 = default)",
                       o.n_ctx, c->context_length);
    if (o.n_batch < 0 || o.n_threads > 1024)
        return gm_fail(err, GM_ERR_ARG, "generator: bad n_batch %d or n_threads %d", o.n_batch, o.n_threads);
    gm_generator *g = calloc(1, sizeof *g);
    if (!g) return gm_fail(err, GM_ERR_NOMEM, "generator: out of memory");
    g->m = m;
    g->c = c;
    g->opt = o;
    g->n_ctx = o.n_ctx ? o.n_ctx : (c->context_length < GM_DEFAULT_MAX_CTX ? c->context_length : GM_DEFAULT_MAX_CTX);
    const int n_batch = o.n_batch ? (o.n_batch < g->n_ctx ? o.n_batch : g->n_ctx) : (g->n_ctx < 512 ? g->n_ctx : 512);
    g->n_batch = n_batch;
    gm_status st = GM_OK;
    g->pool = gm_pool_new(o.n_threads);
    g->tok = malloc((size_t)g->n_ctx * sizeof *g->tok);
    g->logits = malloc((size_t)c->n_vocab * sizeof *g->logits);
    if (!g->pool || !g->tok || !g->logits) st = gm_fail(err, GM_ERR_NOMEM, "generator: out of memory (threads or buffers)");
    if (!st) st = gm_forward_new(m, g->pool, n_batch, g->n_ctx, &g->fwd, err);
    if (!st) st = gm_kvcache_init(&g->cache, c->n_layers, c->n_kv_heads * c->head_dim, g->n_ctx,
                                  o.kv_full ? g->n_ctx : 1, err);
    if (!st) st = gm_sampler_init(&g->smp, c->n_vocab, err);
    if (st) {
        gm_generator_free(g);
        return st;
    }
    collect_stop_ids(g);
    *out = g;
    return GM_OK;
}

void gm_generator_free(gm_generator *g) {
    if (!g) return;
    gm_forward_free(g->fwd);
    gm_kvcache_free(&g->cache);
    gm_pool_free(g->pool);
    gm_sampler_free(&g->smp);
    free(g->tok);
    free(g->logits);
    free(g->aux_ids);
    free(g->aux_rows);
    free(g);
}

void gm_generator_reset(gm_generator *g) {
    if (!g) return;
    g->n_tok = g->n_cached = 0;
    g->logits_valid = false;
    g->seeded = false;
    g->n_aux_rows = 0;
}

const gm_config *gm_generator_config(const gm_generator *g) { return g ? g->c : NULL; }
gm_model *gm_generator_model(const gm_generator *g) { return g ? g->m : NULL; }
int gm_generator_n_ctx(const gm_generator *g) { return g ? g->n_ctx : 0; }

const int32_t *gm_generator_tokens(const gm_generator *g, int *n) {
    if (n) *n = g ? g->n_tok : 0;
    return g ? g->tok : NULL;
}

int gm_generator_n_cached(const gm_generator *g) { return g ? g->n_cached : 0; }

bool gm_generator_is_stop(const gm_generator *g, int32_t t) {
    for (int i = 0; g && i < g->n_stop; i++)
        if (g->stop[i] == t) return true;
    return false;
}

/* ---------------------------------------------------------------- history */

static gm_status check_ids(const gm_generator *g, const char *fn, const int32_t *ids, int n, gm_error *err) {
    if (n < 0 || (n > 0 && !ids)) return gm_fail(err, GM_ERR_ARG, "%s: %d ids at %p", fn, n, (const void *)ids);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= g->c->n_vocab)
            return gm_fail(err, GM_ERR_ARG, "%s: token id %d at index %d is outside the vocabulary [0, %d)", fn,
                           (int)ids[i], i, g->c->n_vocab);
    return GM_OK;
}

gm_status gm_generator_prefill(gm_generator *g, const int32_t *ids, int n, gm_error *err) {
    if (!g) return gm_fail(err, GM_ERR_ARG, "gm_generator_prefill: generator is NULL");
    gm_status st = check_ids(g, "gm_generator_prefill", ids, n, err);
    if (st) return st;
    if (n > g->n_ctx)
        return gm_fail(err, GM_ERR_CONTEXT, "gm_generator_prefill: the prompt has %d tokens, the context holds %d", n,
                       g->n_ctx);
    int common = 0;
    while (common < n && common < g->n_tok && g->tok[common] == ids[common]) common++;
    const bool same = common == n && n == g->n_tok;
    g->seeded = false;
    if (same) return GM_OK; /* identical history: cache and logits stay valid */
    memcpy(g->tok, ids, (size_t)n * sizeof *ids);
    g->n_tok = n;
    if (g->n_cached > common) g->n_cached = common;
    g->logits_valid = false;
    return GM_OK;
}

gm_status gm_generator_append(gm_generator *g, const int32_t *ids, int n, gm_error *err) {
    if (!g) return gm_fail(err, GM_ERR_ARG, "gm_generator_append: generator is NULL");
    gm_status st = check_ids(g, "gm_generator_append", ids, n, err);
    if (st) return st;
    if (n > g->n_ctx - g->n_tok)
        return gm_fail(err, GM_ERR_CONTEXT, "gm_generator_append: %d + %d tokens exceed the context size %d", g->n_tok,
                       n, g->n_ctx);
    if (n == 0) return GM_OK;
    memcpy(g->tok + g->n_tok, ids, (size_t)n * sizeof *ids);
    g->n_tok += n;
    g->logits_valid = false;
    return GM_OK;
}

/* ---------------------------------------------------------------- compute */

/* Brings the cache up to the whole history and the logits up to its last token. */
static gm_status sync(gm_generator *g, const char *fn, gm_error *err) {
    if (g->n_tok == 0) return gm_fail(err, GM_ERR_STATE, "%s: the history is empty (call prefill first)", fn);
    if (g->logits_valid && g->n_cached == g->n_tok) return GM_OK;
    if (g->n_cached >= g->n_tok) g->n_cached = g->n_tok - 1; /* recompute the last position for its logits */
    gm_fwd_batch b = {.n = g->n_tok - g->n_cached, .pos0 = g->n_cached, .ids = g->tok + g->n_cached,
                      .logits = g->logits, .aux_layers = g->aux_ids, .n_aux = g->n_aux, .aux_out = g->aux_rows};
    g->logits_valid = false;
    g->n_aux_rows = 0;
    gm_status st = gm_forward_run(g->fwd, &g->cache, &b, err);
    if (st) {
        g->n_cached = 0; /* the cache may be half written: recompute from scratch next time */
        return gm_fail_prefix(err, "%s: ", fn);
    }
    g->n_cached = g->n_tok;
    g->logits_valid = true;
    g->n_aux_rows = g->n_aux;
    return GM_OK;
}

/* Samples from the current logits and appends the token (the cache then lacks exactly it). */
static gm_status sample_append(gm_generator *g, const char *fn, const gm_sampling *s, int32_t *out, gm_error *err) {
    if (g->n_tok >= g->n_ctx)
        return gm_fail(err, GM_ERR_CONTEXT, "%s: the context is full (%d tokens)", fn, g->n_ctx);
    if (!g->seeded || g->seed != s->seed) {
        gm_sampler_seed(&g->smp, s->seed);
        g->seed = s->seed;
        g->seeded = true;
    }
    int32_t t;
    gm_status st = gm_sampler_sample(&g->smp, s, g->logits, g->tok, g->n_tok, &t, err);
    if (st) return st;
    g->tok[g->n_tok++] = t;
    g->logits_valid = false;
    if (out) *out = t;
    return GM_OK;
}

static gm_status check_step(gm_generator *g, const char *fn, const gm_sampling *s, gm_error *err) {
    if (!g) return gm_fail(err, GM_ERR_ARG, "%s: generator is NULL", fn);
    if (!s) return gm_fail(err, GM_ERR_ARG, "%s: sampling options are NULL", fn);
    gm_status st = gm_sampling_validate(s, err);
    if (st) return st;
    if (g->n_tok == 0) return gm_fail(err, GM_ERR_STATE, "%s: nothing to continue (call prefill first)", fn);
    if (g->n_tok >= g->n_ctx) return gm_fail(err, GM_ERR_CONTEXT, "%s: the context is full (%d tokens)", fn, g->n_ctx);
    return GM_OK;
}

gm_status gm_generator_step(gm_generator *g, const gm_sampling *s, int32_t *tok, gm_error *err) {
    gm_status st = check_step(g, "gm_generator_step", s, err);
    if (st) return st;
    g->n_cached = 0; /* naive: recompute everything from an empty cache */
    g->logits_valid = false;
    if ((st = sync(g, "gm_generator_step", err))) return st;
    return sample_append(g, "gm_generator_step", s, tok, err);
}

gm_status gm_generator_step_cached(gm_generator *g, const gm_sampling *s, int32_t *tok, gm_error *err) {
    gm_status st = check_step(g, "gm_generator_step_cached", s, err);
    if (st) return st;
    if ((st = sync(g, "gm_generator_step_cached", err))) return st;
    return sample_append(g, "gm_generator_step_cached", s, tok, err);
}

typedef gm_status (*step_fn)(gm_generator *, const gm_sampling *, int32_t *, gm_error *);

static gm_status generate_loop(gm_generator *g, step_fn step, int n, const gm_sampling *s, int32_t *out,
                               gm_token_fn cb, void *user, int *n_out, gm_error *err) {
    if (n_out) *n_out = 0;
    if (n < 0) return gm_fail(err, GM_ERR_ARG, "generate: n = %d must be >= 0", n);
    for (int i = 0; i < n; i++) {
        int32_t t;
        gm_status st = step(g, s, &t, err);
        if (st) return st;
        if (out) out[i] = t;
        if (n_out) *n_out = i + 1;
        if (cb && !cb(t, user)) break;
        if (!g->opt.ignore_stop && gm_generator_is_stop(g, t)) break;
    }
    return GM_OK;
}

gm_status gm_generator_generate(gm_generator *g, int n, const gm_sampling *s, int32_t *out, int *n_out,
                                gm_error *err) {
    return generate_loop(g, gm_generator_step, n, s, out, NULL, NULL, n_out, err);
}

gm_status gm_generator_generate_cached(gm_generator *g, int n, const gm_sampling *s, int32_t *out, int *n_out,
                                       gm_error *err) {
    return generate_loop(g, gm_generator_step_cached, n, s, out, NULL, NULL, n_out, err);
}

gm_status gm_generator_generate_cached_with(gm_generator *g, int n, const gm_sampling *s, gm_token_fn on_token,
                                            void *user, int *n_out, gm_error *err) {
    return generate_loop(g, gm_generator_step_cached, n, s, NULL, on_token, user, n_out, err);
}

/* ---------------------------------------------------------------- logits without sampling */

gm_status gm_generator_prefill_get_last_logits(gm_generator *g, const int32_t *ids, int n, const float **logits,
                                               gm_error *err) {
    const char *fn = "gm_generator_prefill_get_last_logits";
    if (!g || !logits) return gm_fail(err, GM_ERR_ARG, "%s: generator or logits pointer is NULL", fn);
    if (n <= 0) return gm_fail(err, GM_ERR_ARG, "%s: the prompt is empty", fn);
    gm_status st = gm_generator_prefill(g, ids, n, err);
    if (!st) st = sync(g, fn, err);
    *logits = st ? NULL : g->logits;
    return st;
}

gm_status gm_generator_decode_get_logits(gm_generator *g, int32_t id, const float **logits, gm_error *err) {
    const char *fn = "gm_generator_decode_get_logits";
    if (!g || !logits) return gm_fail(err, GM_ERR_ARG, "%s: generator or logits pointer is NULL", fn);
    *logits = NULL;
    if (g->n_tok == 0) return gm_fail(err, GM_ERR_STATE, "%s: call prefill first", fn);
    gm_status st = gm_generator_append(g, &id, 1, err);
    if (!st) st = sync(g, fn, err);
    if (!st) *logits = g->logits;
    return st;
}

gm_status gm_generator_score(gm_generator *g, float *out, gm_error *err) {
    if (!g || !out) return gm_fail(err, GM_ERR_ARG, "gm_generator_score: generator or output is NULL");
    if (g->n_tok == 0) return gm_fail(err, GM_ERR_STATE, "gm_generator_score: the history is empty");
    gm_fwd_batch b = {.n = g->n_tok, .pos0 = 0, .ids = g->tok, .logits = out, .all_logits = true};
    g->n_cached = 0;
    g->logits_valid = false;
    gm_status st = gm_forward_run(g->fwd, &g->cache, &b, err);
    if (st) return gm_fail_prefix(err, "gm_generator_score: ");
    g->n_cached = g->n_tok;
    memcpy(g->logits, out + (size_t)(g->n_tok - 1) * g->c->n_vocab, (size_t)g->c->n_vocab * sizeof *g->logits);
    g->logits_valid = true;
    return GM_OK;
}

static gm_status from_embeds(gm_generator *g, const char *fn, const int32_t *ids, int n, const float *embeds,
                             const float *attn_bias, bool is_mask, const float **logits, gm_error *err) {
    if (logits) *logits = NULL;
    if (!g) return gm_fail(err, GM_ERR_ARG, "%s: generator is NULL", fn);
    if (n <= 0 || !ids || !embeds)
        return gm_fail(err, GM_ERR_ARG, "%s: need n > 0 ids and n x d embeddings (n = %d, ids %s, embeds %s)", fn, n,
                       ids ? "set" : "NULL", embeds ? "set" : "NULL");
    if (n > g->n_ctx)
        return gm_fail(err, GM_ERR_CONTEXT, "%s: %d positions exceed the context size %d", fn, n, g->n_ctx);
    if (is_mask && n > g->n_batch)
        return gm_fail(err, GM_ERR_ARG, "%s: a full mask needs the whole prompt in one batch: %d positions, n_batch %d",
                       fn, n, g->n_batch);
    gm_status st = check_ids(g, fn, ids, n, err);
    if (st) return st;
    const size_t nd = (size_t)n * g->c->d_model;
    for (size_t i = 0; i < nd; i++)
        if (!isfinite(embeds[i]))
            return gm_fail(err, GM_ERR_ARG, "%s: embeds[%zu] (position %zu) is not finite", fn, i, i / g->c->d_model);
    if (attn_bias)
        for (size_t i = 0; i < (size_t)n * (size_t)n; i++)
            if (isnan(attn_bias[i]) || attn_bias[i] == INFINITY)
                return gm_fail(err, GM_ERR_ARG, "%s: %s[%zu] (query %zu, key %zu) is %s; use finite values or -INFINITY",
                               fn, is_mask ? "mask" : "attn_bias", i, i / (size_t)n, i % (size_t)n,
                               isnan(attn_bias[i]) ? "NaN" : "+inf");
    memcpy(g->tok, ids, (size_t)n * sizeof *ids);
    g->n_tok = n;
    g->n_cached = 0;
    g->logits_valid = false;
    g->seeded = false;
    gm_fwd_batch b = {.n = n, .pos0 = 0, .embeds = embeds, .bias = attn_bias, .bias_is_mask = is_mask, .logits = g->logits,
                      .aux_layers = g->aux_ids, .n_aux = g->n_aux, .aux_out = g->aux_rows};
    g->n_aux_rows = 0;
    if ((st = gm_forward_run(g->fwd, &g->cache, &b, err))) return gm_fail_prefix(err, "%s: ", fn);
    g->n_cached = n;
    g->logits_valid = true;
    g->n_aux_rows = g->n_aux;
    if (logits) *logits = g->logits;
    return GM_OK;
}

typedef struct logprob_ctx {
    gm_generator *g;
    float *out;
} logprob_ctx;

static void logprob_row(void *user, int i, const float *l) {
    logprob_ctx *x = user;
    gm_generator *g = x->g;
    const int V = g->c->n_vocab;
    if (i == g->n_tok - 1) { /* the last position: keep its logits for a following step */
        memcpy(g->logits, l, (size_t)V * sizeof *l);
        return;
    }
    float mx = l[0];
    for (int v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
    double z = 0.0;
    for (int v = 0; v < V; v++) z += exp((double)l[v] - mx);
    x->out[i] = (float)((double)l[g->tok[i + 1]] - mx - log(z));
}

gm_status gm_generator_score_logprobs(gm_generator *g, float *out, gm_error *err) {
    if (!g || !out) return gm_fail(err, GM_ERR_ARG, "gm_generator_score_logprobs: generator or output is NULL");
    if (g->n_tok < 2)
        return gm_fail(err, GM_ERR_STATE, "gm_generator_score_logprobs: the history has %d tokens, need at least 2",
                       g->n_tok);
    logprob_ctx x = {g, out};
    gm_fwd_batch b = {.n = g->n_tok, .pos0 = 0, .ids = g->tok, .on_logits = logprob_row, .user = &x};
    g->n_cached = 0;
    g->logits_valid = false;
    gm_status st = gm_forward_run(g->fwd, &g->cache, &b, err);
    if (st) return gm_fail_prefix(err, "gm_generator_score_logprobs: ");
    g->n_cached = g->n_tok;
    g->logits_valid = true;
    return GM_OK;
}

typedef struct score_with_ctx {
    gm_generator *g;
    int first, end;
    gm_logits_fn fn;
    void *user;
    bool stopped;
} score_with_ctx;

static void score_with_row(void *user, int i, const float *l) {
    score_with_ctx *x = user;
    if (i == x->g->n_tok - 1) /* keep the last position's logits for a following step */
        memcpy(x->g->logits, l, (size_t)x->g->c->n_vocab * sizeof *l);
    if (!x->stopped && i >= x->first && i < x->end) x->stopped = !x->fn(i, l, x->user);
}

gm_status gm_generator_score_with(gm_generator *g, int first, int end, gm_logits_fn fn, void *user, gm_error *err) {
    const char *name = "gm_generator_score_with";
    if (!g || !fn) return gm_fail(err, GM_ERR_ARG, "%s: generator or callback is NULL", name);
    if (g->n_tok == 0) return gm_fail(err, GM_ERR_STATE, "%s: the history is empty", name);
    if (first < 0 || end > g->n_tok || first > end)
        return gm_fail(err, GM_ERR_ARG, "%s: range [%d, %d) is not inside the history of %d tokens", name, first, end,
                       g->n_tok);
    score_with_ctx x = {g, first, end, fn, user, false};
    /* the last position is always computed: its logits are kept for a following step */
    gm_fwd_batch b = {.n = g->n_tok, .pos0 = 0, .ids = g->tok, .on_logits = score_with_row, .user = &x,
                      .logits_from = first < g->n_tok - 1 ? first : g->n_tok - 1};
    g->n_cached = 0;
    g->logits_valid = false;
    gm_status st = gm_forward_run(g->fwd, &g->cache, &b, err);
    if (st) return gm_fail_prefix(err, "%s: ", name);
    g->n_cached = g->n_tok;
    g->logits_valid = true;
    return GM_OK;
}

gm_status gm_generator_prefill_from_embeds(gm_generator *g, const int32_t *ids, int n, const float *embeds,
                                           const float *attn_bias, const float **logits, gm_error *err) {
    return from_embeds(g, "gm_generator_prefill_from_embeds", ids, n, embeds, attn_bias, false, logits, err);
}

gm_status gm_generator_prefill_from_embeds_masked(gm_generator *g, const int32_t *ids, int n, const float *embeds,
                                                  const float *mask, const float **logits, gm_error *err) {
    const char *fn = "gm_generator_prefill_from_embeds_masked";
    if (!mask) {
        if (logits) *logits = NULL;
        return gm_fail(err, GM_ERR_ARG, "%s: the mask is NULL (use gm_generator_prefill_from_embeds)", fn);
    }
    return from_embeds(g, fn, ids, n, embeds, mask, true, logits, err);
}

/* ---------------------------------------------------------------- hidden-state taps */

gm_status gm_generator_set_aux_hidden_layers(gm_generator *g, const int *layer_ids, int n, gm_error *err) {
    if (!g) return gm_fail(err, GM_ERR_ARG, "gm_generator_set_aux_hidden_layers: generator is NULL");
    if (n < 0 || (n > 0 && !layer_ids))
        return gm_fail(err, GM_ERR_ARG, "gm_generator_set_aux_hidden_layers: %d ids at %p", n, (const void *)layer_ids);
    const int L = g->c->n_layers;
    int *ids = malloc((size_t)(L > 0 ? L : 1) * sizeof *ids);
    float *rows = malloc((size_t)(L > 0 ? L : 1) * g->c->d_model * sizeof *rows);
    if (!ids || !rows) {
        free(ids);
        free(rows);
        return gm_fail(err, GM_ERR_NOMEM, "gm_generator_set_aux_hidden_layers: out of memory");
    }
    /* Mark the wanted layers, then read them out in order: drops out-of-range, merges, sorts. */
    bool *want = calloc((size_t)L, sizeof *want);
    if (!want) {
        free(ids);
        free(rows);
        return gm_fail(err, GM_ERR_NOMEM, "gm_generator_set_aux_hidden_layers: out of memory");
    }
    for (int i = 0; i < n; i++)
        if (layer_ids[i] >= 0 && layer_ids[i] < L) want[layer_ids[i]] = true;
    int k = 0;
    for (int l = 0; l < L; l++)
        if (want[l]) ids[k++] = l;
    free(want);
    free(g->aux_ids);
    free(g->aux_rows);
    g->aux_ids = ids;
    g->aux_rows = rows;
    g->n_aux = k;
    g->n_aux_rows = 0;
    return GM_OK;
}

void gm_generator_take_last_aux(gm_generator *g, const float **rows, const int **layers, int *n_rows) {
    if (rows) *rows = g ? g->aux_rows : NULL;
    if (layers) *layers = g ? g->aux_ids : NULL;
    if (n_rows) *n_rows = g ? g->n_aux_rows : 0;
    if (g) g->n_aux_rows = 0;
}
