/* generate/generator.c — the seed's one-sequence API (see the generator section of gemma.h) as a thin
 * layer over one engine and one sequence (engine/engine.c): the history is the sequence's, the KV cache
 * its block table, the logits its logits. Naive steps and scoring forget the cache and recompute from
 * position 0 without the prefix index, so they stay an independent reference for the cached path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gemma_grammar.h"
#include "gemma_generator.h"
#include "engine/engine.h"
#include "engine/sampler.h"

struct gm_generator {
    const gm_model *m;
    const gm_config *c;
    gm_generator_options opt;
    gm_engine *e;
    gm_seq *s;
    int32_t stop[8];
    int n_stop;
    int *aux_ids;
    int n_aux;
    float *aux_rows;
    int n_aux_rows;
    gm_spec *spec;         /* speculative decoding in the cached generate calls (NULL: off) */
};

static void collect_stop_ids(gm_generator *g) {
    int32_t ids[4];
    size_t n = g->m->tok ? gm_tokenizer_stop_ids(g->m->tok, ids) : 0;
    g->n_stop = 0;
    for (size_t i = 0; i < n && i < 4; i++) g->stop[g->n_stop++] = ids[i];
    if (g->c->eos_id >= 0) g->stop[g->n_stop++] = g->c->eos_id;
    if (g->c->eot_id >= 0) g->stop[g->n_stop++] = g->c->eot_id;
}

gm_status gm_generator_new(const gm_model *m, const gm_generator_options *opt, gm_generator **out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "generator: out is NULL");
    *out = NULL;
    if (!m) return gm_fail(err, GM_ERR_ARG, "generator: model is NULL");
    gm_generator_options o = opt ? *opt : (gm_generator_options){0};
    gm_generator *g = calloc(1, sizeof *g);
    if (!g) return gm_fail(err, GM_ERR_NOMEM, "generator: out of memory");
    g->m = m;
    g->c = &m->cfg;
    g->opt = o;
    const gm_engine_options eo = {.n_threads = o.n_threads, .n_ctx = o.n_ctx, .n_batch = o.n_batch,
                                  .kv_mem = o.kv_mem, .kv_type = o.kv_type,
                                  .no_prefix_cache = o.no_prefix_cache, .backend = o.backend, .isa = o.isa,
                                  .pool = o.pool, .device = o.device, .gpu_validate = o.gpu_validate};
    gm_status st = gm_engine_new(m, &eo, &g->e, err);
    if (!st) st = gm_seq_new(g->e, &g->s, err);
    if (!st && o.kv_full) { /* the blocks of one whole context, allocated now */
        const int blocks = (g->e->n_ctx + GM_KV_BLOCK - 1) / GM_KV_BLOCK;
        const int n[GM_KV_GROUPS] = {blocks, blocks};
        st = gm_kvpool_reserve(g->e->pool, n, err);
    }
    if (st) {
        gm_generator_free(g);
        return gm_fail_prefix(err, "generator: ");
    }
    collect_stop_ids(g);
    *out = g;
    return GM_OK;
}

void gm_generator_free(gm_generator *g) {
    if (!g) return;
    gm_spec_free(g->spec);
    gm_seq_free(g->s);
    gm_engine_free(g->e);
    free(g->aux_ids);
    free(g->aux_rows);
    free(g);
}

void gm_generator_reset(gm_generator *g) {
    if (!g) return;
    gm_seq_truncate(g->s, 0, NULL);
    g->s->seeded = false;
    g->n_aux_rows = 0;
}

const gm_config *gm_generator_config(const gm_generator *g) { return g ? g->c : NULL; }
gm_engine *gm_generator_engine(const gm_generator *g) { return g ? g->e : NULL; }
gm_seq *gm_generator_seq(const gm_generator *g) { return g ? g->s : NULL; }
int gm_generator_n_ctx(const gm_generator *g) { return g ? g->e->n_ctx : 0; }

const int32_t *gm_generator_tokens(const gm_generator *g, int *n) { return gm_seq_tokens(g ? g->s : NULL, n); }

int gm_generator_n_cached(const gm_generator *g) { return g ? g->s->n_kv : 0; }

bool gm_generator_is_stop(const gm_generator *g, int32_t t) {
    for (int i = 0; g && i < g->n_stop; i++)
        if (g->stop[i] == t) return true;
    return false;
}

/* ---------------------------------------------------------------- history */

gm_status gm_generator_prefill(gm_generator *g, const int32_t *ids, int n, gm_error *err) {
    if (!g) return gm_fail(err, GM_ERR_ARG, "gm_generator_prefill: generator is NULL");
    if (n < 0 || (n > 0 && !ids)) return gm_fail(err, GM_ERR_ARG, "gm_generator_prefill: %d ids at %p", n, (const void *)ids);
    if (n > g->e->n_ctx)
        return gm_fail(err, GM_ERR_CONTEXT, "gm_generator_prefill: the prompt has %d tokens, the context holds %d", n,
                       g->e->n_ctx);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= g->c->n_vocab)
            return gm_fail(err, GM_ERR_ARG, "gm_generator_prefill: token id %d at index %d is outside the vocabulary [0, %d)",
                           (int)ids[i], i, g->c->n_vocab);
    gm_seq *s = g->s;
    int common = 0;
    while (common < n && common < s->n_tok && s->tok[common] == ids[common] && !gm_seq_span_at(s, common)) common++;
    s->seeded = false;
    if (common == n && n == s->n_tok) return GM_OK; /* identical history: cache and logits stay valid */
    gm_status st = gm_seq_truncate(s, common, err);
    if (!st) st = gm_seq_append(s, ids + common, n - common, err);
    return st;
}

/* Walks the wanted history (ids with spans before ids[at]) position by position. */
typedef struct want_walk {
    const int32_t *ids;
    int n;
    const gm_prompt_span *sp;
    int n_sp;
    int i, k, r; /* next id, next span, row inside span k (r > 0: inside it) */
} want_walk;

/* Does position pos of s hold what the walk's current position wants? Advances the walk when it does. */
static bool want_matches(want_walk *w, const gm_seq *s, int pos) {
    const gm_seq_span *have = gm_seq_span_at(s, pos);
    if (w->k < w->n_sp && w->sp[w->k].at == (size_t)w->i) { /* a span row is wanted */
        const gm_embed_span *x = &w->sp[w->k].span;
        if (!have || !(x->key[0] | x->key[1]) || have->key[0] != x->key[0] || have->key[1] != x->key[1] ||
            have->n != x->n || have->bidirectional != x->bidirectional ||
            have->sliding_only != (x->bidirectional && x->sliding_only) || pos - have->pos != w->r ||
            s->tok[pos] != x->placeholder)
            return false;
        if (++w->r == x->n) w->r = 0, w->k++;
        return true;
    }
    if (w->i >= w->n || have || s->tok[pos] != w->ids[w->i]) return false;
    w->i++;
    return true;
}

gm_status gm_generator_prefill_spans(gm_generator *g, const int32_t *ids, int n, const gm_prompt_span *spans,
                                     int n_spans, gm_error *err) {
    const char *fn = "gm_generator_prefill_spans";
    if (!g) return gm_fail(err, GM_ERR_ARG, "%s: generator is NULL", fn);
    if (n < 0 || (n > 0 && !ids) || n_spans < 0 || (n_spans > 0 && !spans))
        return gm_fail(err, GM_ERR_ARG, "%s: %d ids, %d spans", fn, n, n_spans);
    int64_t total = n;
    for (int k = 0; k < n_spans; k++) {
        if (spans[k].at > (size_t)n || (k && spans[k].at < spans[k - 1].at) || spans[k].span.n < 1)
            return gm_fail(err, GM_ERR_ARG, "%s: span %d (at %zu, %d rows) is out of order or past the %d ids", fn, k,
                           spans[k].at, spans[k].span.n, n);
        total += spans[k].span.n;
    }
    if (total > g->e->n_ctx)
        return gm_fail(err, GM_ERR_CONTEXT, "%s: the prompt has %lld positions, the context holds %d", fn,
                       (long long)total, g->e->n_ctx);
    gm_seq *s = g->s;
    want_walk w = {ids, n, spans, n_spans, 0, 0, 0};
    int common = 0;
    while (common < s->n_tok && want_matches(&w, s, common)) common++;
    s->seeded = false;
    if (common == total && total == s->n_tok) return GM_OK; /* identical history: cache and logits stay valid */
    const gm_seq_span *cut = gm_seq_span_at(s, common);
    if (cut && cut->pos < common) { /* never keep part of a span: restart the walk at its first row */
        common = cut->pos;
        w = (want_walk){ids, n, spans, n_spans, 0, 0, 0};
        for (int p = 0; p < common; p++) want_matches(&w, s, p);
    }
    gm_status st = gm_seq_truncate(s, common, err);
    while (!st && (w.i < n || w.k < n_spans)) {
        if (w.k < n_spans && spans[w.k].at == (size_t)w.i) {
            st = gm_seq_append_embeds(s, &spans[w.k].span, err);
            w.k++;
            continue;
        }
        const int stop = w.k < n_spans ? (int)spans[w.k].at : n;
        st = gm_seq_append(s, ids + w.i, stop - w.i, err);
        w.i = stop;
    }
    return st ? gm_fail_prefix(err, "%s: ", fn) : GM_OK;
}

gm_status gm_generator_append(gm_generator *g, const int32_t *ids, int n, gm_error *err) {
    if (!g) return gm_fail(err, GM_ERR_ARG, "gm_generator_append: generator is NULL");
    gm_status st = gm_seq_append(g->s, ids, n, err);
    return st ? gm_fail_prefix(err, "gm_generator_append: ") : GM_OK;
}

/* ---------------------------------------------------------------- compute */

/* Brings the cache up to the whole history and the logits up to its last token. */
static gm_status sync(gm_generator *g, const char *fn, gm_error *err) {
    if (g->s->n_tok == 0) return gm_fail(err, GM_ERR_STATE, "%s: the history is empty (call prefill first)", fn);
    if (g->s->logits_valid && g->s->n_kv == g->s->n_tok) return GM_OK;
    bool taken = false;
    const gm_eval_extras x = {.aux_layers = g->aux_ids, .n_aux = g->n_aux, .aux_out = g->aux_rows, .aux_taken = &taken};
    g->n_aux_rows = 0;
    gm_status st = gm_engine_eval_ex(g->e, g->s, &x, err);
    if (st) return gm_fail_prefix(err, "%s: ", fn);
    g->n_aux_rows = taken ? g->n_aux : 0;
    return GM_OK;
}

static gm_status check_step(gm_generator *g, const char *fn, const gm_sampling *s, gm_error *err) {
    if (!g) return gm_fail(err, GM_ERR_ARG, "%s: generator is NULL", fn);
    if (!s) return gm_fail(err, GM_ERR_ARG, "%s: sampling options are NULL", fn);
    gm_status st = gm_sampling_validate(s, err);
    if (st) return st;
    if (g->s->n_tok == 0) return gm_fail(err, GM_ERR_STATE, "%s: nothing to continue (call prefill first)", fn);
    if (g->s->n_tok >= g->e->n_ctx) return gm_fail(err, GM_ERR_CONTEXT, "%s: the context is full (%d tokens)", fn, g->e->n_ctx);
    return GM_OK;
}

static gm_status sample_append(gm_generator *g, const char *fn, const gm_sampling *s, int32_t *tok, gm_error *err) {
    gm_status st = gm_seq_sample(g->s, s, tok, err);
    return st ? gm_fail_prefix(err, "%s: ", fn) : GM_OK;
}

gm_status gm_generator_step(gm_generator *g, const gm_sampling *s, int32_t *tok, gm_error *err) {
    gm_status st = check_step(g, "gm_generator_step", s, err);
    if (st) return st;
    /* naive: recompute everything from an empty cache, without the prefix index */
    gm_seq_forget(g->s);
    const gm_eval_extras x = {.no_adopt = true};
    if ((st = gm_engine_eval_ex(g->e, g->s, &x, err))) return gm_fail_prefix(err, "gm_generator_step: ");
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

/* Speculative generation: each step appends up to k + 1 tokens; they are handed out one by one, and
 * those after a stop (stop token, callback, n) are rolled back so the history is what was emitted (and
 * the grammar's matcher, which took them, with it). */
static gm_status spec_loop(gm_generator *g, int n, const gm_sampling *s, int32_t *out, gm_token_fn cb, void *user,
                           int *n_out, gm_error *err) {
    for (int done = 0; done < n;) {
        gm_status st = check_step(g, "generate", s, err);
        if (st) return st;
        const int32_t *t;
        int k;
        if ((st = gm_spec_step(g->spec, s, n - done, &t, &k, err))) return gm_fail_prefix(err, "generate: ");
        for (int i = 0; i < k; i++) {
            if (out) out[done] = t[i];
            if (n_out) *n_out = ++done;
            const bool stop = (cb && !cb(t[i], user)) || (!g->opt.ignore_stop && gm_generator_is_stop(g, t[i]));
            if (stop || done == n) {
                gm_seq_truncate(g->s, g->s->n_tok - (k - 1 - i), NULL);
                /* the grammar took the step's tokens: it forgets those rolled back with them */
                if (g->s->grammar && k - 1 - i > 0) return gm_matcher_rollback(g->s->grammar, (size_t)(k - 1 - i), err);
                return GM_OK;
            }
        }
    }
    return GM_OK;
}

gm_status gm_generator_set_speculative(gm_generator *g, const gm_spec_options *o, gm_error *err) {
    if (!g) return gm_fail(err, GM_ERR_ARG, "gm_generator_set_speculative: generator is NULL");
    gm_spec *sp = NULL;
    if (o) {
        gm_status st = gm_spec_new(g->s, o, &sp, err);
        if (st) return st;
    }
    gm_spec_free(g->spec);
    g->spec = sp;
    return GM_OK;
}

gm_spec *gm_generator_speculative(const gm_generator *g) { return g ? g->spec : NULL; }

gm_status gm_generator_generate(gm_generator *g, int n, const gm_sampling *s, int32_t *out, int *n_out,
                                gm_error *err) {
    return generate_loop(g, gm_generator_step, n, s, out, NULL, NULL, n_out, err);
}

gm_status gm_generator_generate_cached(gm_generator *g, int n, const gm_sampling *s, int32_t *out, int *n_out,
                                       gm_error *err) {
    if (g && g->spec && n > 0) {
        if (n_out) *n_out = 0;
        return spec_loop(g, n, s, out, NULL, NULL, n_out, err);
    }
    return generate_loop(g, gm_generator_step_cached, n, s, out, NULL, NULL, n_out, err);
}

gm_status gm_generator_generate_cached_with(gm_generator *g, int n, const gm_sampling *s, gm_token_fn on_token,
                                            void *user, int *n_out, gm_error *err) {
    if (g && g->spec && n > 0) {
        if (n_out) *n_out = 0;
        return spec_loop(g, n, s, NULL, on_token, user, n_out, err);
    }
    return generate_loop(g, gm_generator_step_cached, n, s, NULL, on_token, user, n_out, err);
}

/* ---------------------------------------------------------------- logits without sampling */

gm_status gm_generator_prefill_get_last_logits(gm_generator *g, const int32_t *ids, int n, const float **logits,
                                               gm_error *err) {
    const char *fn = "gm_generator_prefill_get_last_logits";
    if (!g || !logits) return gm_fail(err, GM_ERR_ARG, "%s: generator or logits pointer is NULL", fn);
    *logits = NULL;
    if (n <= 0) return gm_fail(err, GM_ERR_ARG, "%s: the prompt is empty", fn);
    gm_status st = gm_generator_prefill(g, ids, n, err);
    if (!st) st = sync(g, fn, err);
    if (!st) *logits = g->s->logits;
    return st;
}

gm_status gm_generator_decode_get_logits(gm_generator *g, int32_t id, const float **logits, gm_error *err) {
    const char *fn = "gm_generator_decode_get_logits";
    if (!g || !logits) return gm_fail(err, GM_ERR_ARG, "%s: generator or logits pointer is NULL", fn);
    *logits = NULL;
    if (g->s->n_tok == 0) return gm_fail(err, GM_ERR_STATE, "%s: call prefill first", fn);
    gm_status st = gm_generator_append(g, &id, 1, err);
    if (!st) st = sync(g, fn, err);
    if (!st) *logits = g->s->logits;
    return st;
}

/* Every position's logits from an empty cache (no prefix index: scoring is a reference pass). */
static gm_status score_pass(gm_generator *g, const char *fn, gm_eval_extras *x, gm_error *err) {
    if (g->s->n_tok == 0) return gm_fail(err, GM_ERR_STATE, "%s: the history is empty", fn);
    gm_seq_forget(g->s);
    x->no_adopt = true;
    x->all_logits = true;
    gm_status st = gm_engine_eval_ex(g->e, g->s, x, err);
    return st ? gm_fail_prefix(err, "%s: ", fn) : GM_OK;
}

gm_status gm_generator_score(gm_generator *g, float *out, gm_error *err) {
    if (!g || !out) return gm_fail(err, GM_ERR_ARG, "gm_generator_score: generator or output is NULL");
    gm_eval_extras x = {.logits_out = out};
    return score_pass(g, "gm_generator_score", &x, err);
}

static gm_status from_embeds(gm_generator *g, const char *fn, const int32_t *ids, int n, const float *embeds,
                             const float *attn_bias, bool is_mask, const float **logits, gm_error *err) {
    if (logits) *logits = NULL;
    if (!g) return gm_fail(err, GM_ERR_ARG, "%s: generator is NULL", fn);
    if (n <= 0 || !ids || !embeds)
        return gm_fail(err, GM_ERR_ARG, "%s: need n > 0 ids and n x d embeddings (n = %d, ids %s, embeds %s)", fn, n,
                       ids ? "set" : "NULL", embeds ? "set" : "NULL");
    if (n > g->e->n_ctx)
        return gm_fail(err, GM_ERR_CONTEXT, "%s: %d positions exceed the context size %d", fn, n, g->e->n_ctx);
    if (is_mask && n > g->e->n_batch)
        return gm_fail(err, GM_ERR_ARG, "%s: a full mask needs the whole prompt in one batch: %d positions, n_batch %d",
                       fn, n, g->e->n_batch);
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
    gm_seq *s = g->s;
    gm_status st = gm_seq_truncate(s, 0, err);
    if (!st) st = gm_seq_append(s, ids, n, err);
    if (st) return gm_fail_prefix(err, "%s: ", fn);
    s->seeded = false;
    bool taken = false;
    const gm_eval_extras x = {.no_adopt = true, .embeds = embeds, .bias = attn_bias, .bias_n = attn_bias ? n : 0,
                              .bias_is_mask = is_mask, .aux_layers = g->aux_ids, .n_aux = g->n_aux,
                              .aux_out = g->aux_rows, .aux_taken = &taken};
    g->n_aux_rows = 0;
    if ((st = gm_engine_eval_ex(g->e, s, &x, err))) return gm_fail_prefix(err, "%s: ", fn);
    g->n_aux_rows = taken ? g->n_aux : 0;
    if (logits) *logits = s->logits;
    return GM_OK;
}

typedef struct logprob_ctx {
    gm_generator *g;
    float *out;
} logprob_ctx;

static void logprob_row(void *user, int i, const float *l) {
    logprob_ctx *x = user;
    gm_seq *s = x->g->s;
    const int V = x->g->c->n_vocab;
    if (i == s->n_tok - 1) return; /* the last position has no next token (its logits stay in the sequence) */
    float mx = l[0];
    for (int v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
    double z = 0.0;
    for (int v = 0; v < V; v++) z += exp((double)l[v] - mx);
    x->out[i] = (float)((double)l[s->tok[i + 1]] - mx - log(z));
}

gm_status gm_generator_score_logprobs(gm_generator *g, float *out, gm_error *err) {
    if (!g || !out) return gm_fail(err, GM_ERR_ARG, "gm_generator_score_logprobs: generator or output is NULL");
    if (g->s->n_tok < 2)
        return gm_fail(err, GM_ERR_STATE, "gm_generator_score_logprobs: the history has %d tokens, need at least 2",
                       g->s->n_tok);
    logprob_ctx c = {g, out};
    gm_eval_extras x = {.on_logits = logprob_row, .user = &c};
    return score_pass(g, "gm_generator_score_logprobs", &x, err);
}

typedef struct score_with_ctx {
    int first, end;
    gm_logits_fn fn;
    void *user;
    bool stopped;
} score_with_ctx;

static void score_with_row(void *user, int i, const float *l) {
    score_with_ctx *x = user;
    if (!x->stopped && i >= x->first && i < x->end) x->stopped = !x->fn(i, l, x->user);
}

gm_status gm_generator_score_with(gm_generator *g, int first, int end, gm_logits_fn fn, void *user, gm_error *err) {
    const char *name = "gm_generator_score_with";
    if (!g || !fn) return gm_fail(err, GM_ERR_ARG, "%s: generator or callback is NULL", name);
    const int n = g->s->n_tok;
    if (n == 0) return gm_fail(err, GM_ERR_STATE, "%s: the history is empty", name);
    if (first < 0 || end > n || first > end)
        return gm_fail(err, GM_ERR_ARG, "%s: range [%d, %d) is not inside the history of %d tokens", name, first, end, n);
    score_with_ctx c = {first, end, fn, user, false};
    /* rows before `first` need no LM head (the last position is always computed: its logits are kept) */
    gm_eval_extras x = {.on_logits = score_with_row, .user = &c, .logits_from = first};
    return score_pass(g, name, &x, err);
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
