/* engine/engine.c — the engine (model, backend, KV pool) and its sequences (see gemma.h, "engine and
 * sequences").
 *
 * A sequence's state: tok[0..n_tok) is its history; positions [0, n_kv) have keys and values in its
 * block table; logits_valid says its logits buffer holds the logits after tok[n_tok - 1]. An evaluation
 * first adopts what the prefix index holds of the pending tokens, then computes the rest in forward calls
 * of at most n_batch rows shared by every sequence being evaluated, then enters the new full blocks in
 * the index and lets go of sliding-window blocks the sequence no longer needs. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gemma_grammar.h"
#include "gemma_generator.h"
#include "core/random.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "engine/engine.h"
#include "backends/vulkan/vulkan.h"

/* ---------------------------------------------------------------- engine */

static gm_status check_engine_options(const gm_config *c, const gm_engine_options *o, gm_error *err) {
    if (o->n_ctx < 0 || o->n_ctx > c->context_length)
        return gm_fail(err, GM_ERR_ARG, "engine: n_ctx %d must be in [0, %d] (the model's context length; 0 = default)",
                       o->n_ctx, c->context_length);
    if (o->n_batch < 0 || o->n_batch > 65536)
        return gm_fail(err, GM_ERR_ARG, "engine: n_batch %d must be in [0, 65536] (0 = default)", o->n_batch);
    if (o->n_threads > 1024) return gm_fail(err, GM_ERR_ARG, "engine: %d threads is more than 1024", o->n_threads);
    if (o->kv_type != GM_KV_DTYPE_F32 && o->kv_type != GM_KV_DTYPE_F16)
        return gm_fail(err, GM_ERR_ARG, "engine: unknown KV storage type %d", (int)o->kv_type);
    if (o->backend < GM_BACKEND_CPU || o->backend > GM_BACKEND_AUTO)
        return gm_fail(err, GM_ERR_ARG, "engine: unknown backend %d", (int)o->backend);
    if (o->device < 0 || o->device > 64) return gm_fail(err, GM_ERR_ARG, "engine: device %d must be in [0, 64]", o->device);
    if (!gm_isa_valid(o->isa)) return gm_fail(err, GM_ERR_ARG, "engine: unknown ISA level %d", (int)o->isa);
    return GM_OK;
}

/* The model's level: the CPU backends on a model share one set of weight copies (backends/cpu/repack.c), made for
 * it, so a request for another (once lowered to what the CPU runs) cannot be honoured without reopening it. */
static gm_status engine_isa(const gm_model *m, gm_isa want, gm_isa *out, gm_error *err) {
    *out = m->isa;
    if (want == GM_ISA_AUTO || gm_isa_resolve(want) == m->isa) return GM_OK;
    return gm_fail(err, GM_ERR_ARG, "engine: ISA level %s asked, but the model was opened for %s "
                   "(gm_model_options.isa: the level its CPU engines share weight copies for)",
                   gm_isa_name(gm_isa_resolve(want)), gm_isa_name(m->isa));
}

bool gm_backend_kind_parse(const char *name, gm_backend_kind *out) {
    if (!name) return false;
    if (!strcmp(name, "cpu")) *out = GM_BACKEND_CPU;
    else if (!strcmp(name, "reference")) *out = GM_BACKEND_REFERENCE;
    else if (!strcmp(name, "vulkan")) *out = GM_BACKEND_VULKAN;
    else if (!strcmp(name, "auto")) *out = GM_BACKEND_AUTO;
    else return false;
    return true;
}

/* The engine's backend of kind k and its forward pass; on failure neither is kept. */
static gm_status open_backend(gm_engine *e, gm_backend_kind k, const gm_backend_options *bo, gm_error *err) {
    gm_status st = (k == GM_BACKEND_VULKAN ? gm_backend_vulkan_new : k == GM_BACKEND_REFERENCE ? gm_backend_ref_new
                                                                                                : gm_backend_cpu_new)(
        e->m, &e->lay, bo, &e->be, err);
    if (!st) st = gm_forward_new(e->m, &e->lay, e->be, e->n_batch, e->n_ctx, &e->fwd, err);
    if (st) {
        if (e->be) e->be->ops->free(e->be);
        e->be = NULL;
        return st;
    }
    e->kind = k, e->bo = *bo;
    if (k == GM_BACKEND_VULKAN) snprintf(e->backend_name, sizeof e->backend_name, "vulkan: %s", gm_backend_vulkan_device(e->be));
    else snprintf(e->backend_name, sizeof e->backend_name, "%s", e->be->ops->name);
    return GM_OK;
}

/* The backend the options ask for. AUTO: Vulkan on a GPU (or on the device asked for), else the CPU — where the
 * build has no Vulkan, no GPU is found, or the GPU cannot run the model (GM_ERR_UNSUPPORTED: its message dropped). */
static gm_status create_backend(gm_engine *e, const gm_engine_options *o, const gm_backend_options *bo, gm_error *err) {
    if (o->backend != GM_BACKEND_AUTO) return open_backend(e, o->backend, bo, err);
    gm_backend_options gpu = *bo;
    gpu.gpu_only = o->device == 0;
    gm_error quiet = {0};
    const gm_status st = gm_backend_vulkan_built() ? open_backend(e, GM_BACKEND_VULKAN, &gpu, &quiet) : GM_ERR_UNSUPPORTED;
    if (st != GM_ERR_UNSUPPORTED) return st ? gm_fail(err, st, "%s", quiet.msg) : GM_OK;
    return open_backend(e, GM_BACKEND_CPU, bo, err);
}

gm_status gm_engine_side_backend(const gm_engine *e, const gm_model *m, const gm_kv_layout *lay, int max_rows,
                                 const char *who, gm_backend **out, gm_error *err) {
    *out = NULL;
    if (e->kind != GM_BACKEND_CPU && e->kind != GM_BACKEND_REFERENCE)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s runs beside a CPU or reference backend (the target's is %s)", who,
                       e->backend_name);
    gm_backend_options bo = e->bo;
    bo.max_batch = max_rows;
    bo.isa = m->isa;
    return (e->kind == GM_BACKEND_REFERENCE ? gm_backend_ref_new : gm_backend_cpu_new)(m, lay, &bo, out, err);
}

const char *gm_engine_backend_name(const gm_engine *e) { return e ? e->backend_name : ""; }

void gm_engine_backend_stats(const gm_engine *e, gm_backend_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (e && e->be->ops->stats) e->be->ops->stats(e->be, out);
}

gm_status gm_engine_new(const gm_model *m, const gm_engine_options *opt, gm_engine **out, gm_error *err) {
    if (out) *out = NULL;
    if (m && m->cfg.is_embedding)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s is an embedding model (%s): it cannot generate text; use "
                       "`gemma embed` / gm_embedder_new", gm_source_path(m->src), m->cfg.arch);
    return gm_engine_create(m, opt, out, err);
}

gm_status gm_engine_create(const gm_model *m, const gm_engine_options *opt, gm_engine **out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "engine: out is NULL");
    *out = NULL;
    if (!m) return gm_fail(err, GM_ERR_ARG, "engine: model is NULL");
    if (m->cfg.is_drafter)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s is a drafter (%s): it reads a target model's cache and cannot run "
                       "alone; use it with its target (`--mtp FILE`, gm_mtp_new, for a gemma4-assistant)", gm_source_path(m->src), m->cfg.arch);
    const gm_engine_options o = opt ? *opt : (gm_engine_options){0};
    const gm_config *c = &m->cfg;
    gm_isa isa;
    gm_status st = check_engine_options(c, &o, err);
    if (!st) st = engine_isa(m, o.isa, &isa, err);
    if (st) return st;
    gm_engine *e = calloc(1, sizeof *e);
    if (!e) return gm_fail(err, GM_ERR_NOMEM, "engine: out of memory");
    e->m = m;
    e->c = c;
    e->isa = isa;
    e->n_ctx = o.n_ctx ? o.n_ctx : (c->context_length < GM_DEFAULT_MAX_CTX ? c->context_length : GM_DEFAULT_MAX_CTX);
    e->n_batch = o.n_batch ? (o.n_batch < e->n_ctx ? o.n_batch : e->n_ctx) : (e->n_ctx < 512 ? e->n_ctx : 512);
    e->prefix_cache = !o.no_prefix_cache;
    e->rows = malloc((size_t)e->n_batch * sizeof *e->rows);
    e->row_seq = malloc((size_t)e->n_batch * sizeof *e->row_seq);
    if (!e->rows || !e->row_seq) st = gm_fail(err, GM_ERR_NOMEM, "engine: out of memory");
    if (!st) st = gm_kv_layout_init(&e->lay, m, o.kv_type, err);
    const gm_backend_options bo = {.n_threads = o.n_threads, .max_batch = e->n_batch, .max_ctx = e->n_ctx,
                                   .isa = e->isa, .pool = o.pool, .device = o.device, .validate = o.gpu_validate};
    if (!st) st = create_backend(e, &o, &bo, err);
    if (!st) {
        /* default budget: one sequence of n_ctx positions with every layer's blocks (no window savings) */
        const size_t blocks = (size_t)(e->n_ctx + GM_KV_BLOCK - 1) / GM_KV_BLOCK;
        const size_t budget = o.kv_mem ? o.kv_mem : blocks * (e->lay.block_bytes[0] + e->lay.block_bytes[1]);
        uint64_t key[2]; /* a fresh secret per engine: see gm_kv_chain_hash */
        gm_random_words(key, 2);
        st = gm_kvpool_new(&e->lay, e->be->ops->kv_storage(e->be), budget, e->prefix_cache, key, &e->pool, err);
    }
    if (st) {
        gm_engine_free(e);
        return st;
    }
    *out = e;
    return GM_OK;
}

gm_status gm_engine_free(gm_engine *e) {
    if (!e) return GM_OK;
    if (e->n_seqs > 0) return GM_ERR_STATE;
    gm_kvpool_free(e->pool);
    gm_forward_free(e->fwd);
    if (e->be) e->be->ops->free(e->be);
    gm_kv_layout_free(&e->lay);
    free(e->rows);
    free(e->row_seq);
    free(e);
    return GM_OK;
}

const gm_model *gm_engine_model(const gm_engine *e) { return e ? e->m : NULL; }
int gm_engine_n_ctx(const gm_engine *e) { return e ? e->n_ctx : 0; }

void gm_engine_wait_weights(gm_engine *e) {
    if (e && e->be->ops->wait_weights) e->be->ops->wait_weights(e->be);
}

void gm_engine_kv_stats(const gm_engine *e, gm_kv_stats *out) {
    if (!out) return;
    if (!e) {
        memset(out, 0, sizeof *out);
        return;
    }
    gm_kvpool_stats(e->pool, out);
}

/* ---------------------------------------------------------------- sequences */

gm_status gm_seq_new(gm_engine *e, gm_seq **out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "gm_seq_new: out is NULL");
    *out = NULL;
    if (!e) return gm_fail(err, GM_ERR_ARG, "gm_seq_new: engine is NULL");
    gm_seq *s = calloc(1, sizeof *s);
    if (!s) return gm_fail(err, GM_ERR_NOMEM, "gm_seq_new: out of memory");
    s->e = e;
    s->taint = INT_MAX;
    gm_kv_table_init(&s->kv);
    s->tok = malloc((size_t)e->n_ctx * sizeof *s->tok);
    const gm_exp_sum_fn exp_sum = gm_cpu_kernels_for(e->isa)->exp_sum; /* draws follow the engine's level */
    gm_status st = s->tok && gm_kv_table_reserve(&s->kv, (e->n_ctx + GM_KV_BLOCK - 1) / GM_KV_BLOCK)
                       ? gm_sampler_init(&s->smp, e->c->n_vocab, exp_sum, err)
                       : gm_fail(err, GM_ERR_NOMEM, "gm_seq_new: out of memory for %d positions", e->n_ctx);
    if (st) {
        gm_kv_table_free(NULL, &s->kv);
        free(s->tok);
        free(s);
        return st;
    }
    e->n_seqs++;
    *out = s;
    return GM_OK;
}

/* As s goes, the computed rows of its last, partly filled block enter the prefix index (full blocks entered
 * as they filled): a later prompt that repeats or extends its history computes only its last token. Text
 * rows only: a block with embedding rows, or rows after a tainted position, stays private. */
static void enter_tail(gm_seq *s) {
    if (!s->e->prefix_cache || s->taint < s->n_kv || gm_seq_span_from(s, s->n_kv / GM_KV_BLOCK * GM_KV_BLOCK) < s->n_kv)
        return;
    gm_kv_table_register_tail(s->e->pool, &s->kv, s->tok, s->n_kv);
}

void gm_seq_free(gm_seq *s) {
    if (!s) return;
    enter_tail(s);
    gm_kv_table_free(s->e->pool, &s->kv);
    gm_seq_spans_free(s);
    gm_sampler_free(&s->smp);
    free(s->mask);
    free(s->tok);
    free(s->logits);
    s->e->n_seqs--;
    free(s);
}

static gm_status ensure_logits(gm_seq *s, gm_error *err) {
    if (s->logits) return GM_OK;
    s->logits = malloc((size_t)s->e->c->n_vocab * sizeof *s->logits);
    return s->logits ? GM_OK : gm_fail(err, GM_ERR_NOMEM, "sequence: out of memory for logits");
}

gm_status gm_seq_fork(const gm_seq *s, gm_seq **out, gm_error *err) {
    if (!s || !out) return gm_fail(err, GM_ERR_ARG, "gm_seq_fork: NULL argument");
    gm_seq *f;
    gm_status st = gm_seq_new(s->e, &f, err);
    if (st) return st;
    memcpy(f->tok, s->tok, (size_t)s->n_tok * sizeof *s->tok);
    f->n_tok = s->n_tok;
    f->n_kv = s->n_kv;
    f->taint = s->taint;
    f->seed = s->seed;
    f->seeded = s->seeded;
    memcpy(f->smp.rng, s->smp.rng, sizeof f->smp.rng);
    if (!st && s->logits_valid && !(st = ensure_logits(f, err))) {
        memcpy(f->logits, s->logits, (size_t)s->e->c->n_vocab * sizeof *f->logits);
        f->logits_valid = true;
    }
    if (!st) st = gm_seq_spans_copy(f, s, err);
    if (!st) st = gm_kv_table_fork(s->e->pool, &f->kv, &s->kv, err);
    if (st) {
        gm_seq_free(f);
        return st;
    }
    *out = f;
    return GM_OK;
}

void gm_seq_forget(gm_seq *s) {
    gm_kv_table_drop_from(s->e->pool, &s->kv, 0);
    s->n_kv = 0;
    s->logits_valid = false;
    if (s->taint != INT_MAX) s->taint = INT_MAX; /* nothing computed from embeddings remains */
}

/* Positions [0, n) of the cache stay; the rest go, and with them any block only they used. */
static void keep_kv(gm_seq *s, int n) {
    if (n >= s->n_kv) return;
    if (!gm_kv_table_window_held(s->e->pool, &s->kv, n)) { /* the window before n is gone: start over */
        gm_seq_forget(s);
        return;
    }
    s->n_kv = n;
    gm_kv_table_drop_from(s->e->pool, &s->kv, (n + GM_KV_BLOCK - 1) / GM_KV_BLOCK);
    if (s->kv.n_hashed > n / GM_KV_BLOCK) s->kv.n_hashed = n / GM_KV_BLOCK;
}

gm_status gm_seq_truncate(gm_seq *s, int n, gm_error *err) {
    if (!s) return gm_fail(err, GM_ERR_ARG, "gm_seq_truncate: sequence is NULL");
    if (n < 0 || n > s->n_tok)
        return gm_fail(err, GM_ERR_ARG, "gm_seq_truncate: %d is outside the history [0, %d]", n, s->n_tok);
    if (n == s->n_tok) return GM_OK;
    s->n_tok = n;
    s->logits_valid = false;
    if (n <= s->taint) s->taint = INT_MAX;
    gm_seq_spans_truncate(s, n);
    keep_kv(s, n);
    return GM_OK;
}

static gm_status check_ids(const gm_engine *e, const char *fn, const int32_t *ids, int n, gm_error *err) {
    if (n < 0 || (n > 0 && !ids)) return gm_fail(err, GM_ERR_ARG, "%s: %d ids at %p", fn, n, (const void *)ids);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->c->n_vocab)
            return gm_fail(err, GM_ERR_ARG, "%s: token id %d at index %d is outside the vocabulary [0, %d)", fn,
                           (int)ids[i], i, e->c->n_vocab);
    return GM_OK;
}

gm_status gm_seq_append(gm_seq *s, const int32_t *ids, int n, gm_error *err) {
    if (!s) return gm_fail(err, GM_ERR_ARG, "gm_seq_append: sequence is NULL");
    gm_status st = check_ids(s->e, "gm_seq_append", ids, n, err);
    if (st) return st;
    if (n > s->e->n_ctx - s->n_tok)
        return gm_fail(err, GM_ERR_CONTEXT, "gm_seq_append: %d + %d tokens exceed the context size %d", s->n_tok, n,
                       s->e->n_ctx);
    if (n == 0) return GM_OK;
    memcpy(s->tok + s->n_tok, ids, (size_t)n * sizeof *ids);
    s->n_tok += n;
    s->logits_valid = false;
    return GM_OK;
}

const int32_t *gm_seq_tokens(const gm_seq *s, int *n) {
    if (n) *n = s ? s->n_tok : 0;
    return s ? s->tok : NULL;
}
int gm_seq_length(const gm_seq *s) { return s ? s->n_tok : 0; }
int gm_seq_n_computed(const gm_seq *s) { return s ? s->n_kv : 0; }
int gm_seq_n_reused(const gm_seq *s) { return s ? s->n_reused : 0; }
gm_status gm_seq_set_prefix_scope(gm_seq *s, uint64_t scope, gm_error *err) {
    if (!s) return gm_fail(err, GM_ERR_ARG, "gm_seq_set_prefix_scope: sequence is NULL");
    if (scope == s->kv.scope) return GM_OK;
    /* computed blocks were hashed (and maybe entered) under the old scope: they cannot change scope */
    if (s->n_kv > 0 || s->kv.n_hashed > 0)
        return gm_fail(err, GM_ERR_STATE, "gm_seq_set_prefix_scope: the sequence has computed %d positions; set the "
                       "scope before its first evaluation", s->n_kv);
    s->kv.scope = scope;
    return GM_OK;
}

const float *gm_seq_logits(const gm_seq *s) { return s && s->logits_valid ? s->logits : NULL; }

gm_sampler *gm_seq_sampler(gm_seq *s, const gm_sampling *opt) {
    if (!s->seeded || s->seed != opt->seed) {
        gm_sampler_seed(&s->smp, opt->seed);
        s->seed = opt->seed;
        s->seeded = true;
    }
    return &s->smp;
}

gm_status gm_seq_set_grammar(gm_seq *s, gm_matcher *m, gm_error *err) {
    if (!s) return gm_fail(err, GM_ERR_ARG, "gm_seq_set_grammar: sequence is NULL");
    const int V = s->e->c->n_vocab;
    if (m && (gm_matcher_vocab_size(m) <= 0 || gm_matcher_vocab_size(m) > V))
        return gm_fail(err, GM_ERR_ARG, "gm_seq_set_grammar: the grammar's vocabulary (%d tokens) is not the model's (%d)",
                       (int)gm_matcher_vocab_size(m), V);
    if (m && !s->mask && !(s->mask = malloc(((size_t)V + 31) / 32 * sizeof *s->mask)))
        return gm_fail(err, GM_ERR_NOMEM, "gm_seq_set_grammar: out of memory");
    s->grammar = m;
    return GM_OK;
}

gm_status gm_grammar_mask(gm_matcher *m, uint32_t *mask, int n_vocab, gm_error *err) {
    memset(mask, 0, ((size_t)n_vocab + 31) / 32 * sizeof *mask); /* tokens past the grammar's vocabulary: never */
    return gm_matcher_fill_mask(m, mask, err);
}

gm_status gm_pick_token(gm_sampler *smp, gm_matcher *m, uint32_t *mask, const gm_sampling *opt, const float *logits,
                        const int32_t *hist, int n_hist, int32_t *tok, gm_error *err) {
    if (!m) return gm_sampler_sample(smp, opt, logits, hist, n_hist, tok, err);
    gm_status st;
    bool taken = false;
    if (opt->temperature == 0.0f) {
        /* greedy: when the grammar takes the best token, it is the best allowed one (ties go to the lower id
         * either way), so the mask — up to milliseconds where the grammar is new — is needed only otherwise */
        if ((st = gm_sampler_sample(smp, opt, logits, hist, n_hist, tok, err)) ||
            (st = gm_matcher_accept_token(m, *tok, &taken, err)))
            return st;
        if (taken) return GM_OK;
    }
    if ((st = gm_grammar_mask(m, mask, smp->n_vocab, err))) return st;
    smp->mask = mask;
    st = gm_sampler_sample(smp, opt, logits, hist, n_hist, tok, err);
    smp->mask = NULL;
    if (st) return st;
    bool ok = false; /* the mask allowed it: the matcher takes it */
    if ((st = gm_matcher_accept_token(m, *tok, &ok, err))) return st;
    if (!ok) return gm_fail(err, GM_ERR_STATE, "sampling: the grammar refused token %d it allowed", (int)*tok);
    return GM_OK;
}

gm_status gm_seq_sample(gm_seq *s, const gm_sampling *opt, int32_t *tok, gm_error *err) {
    if (!s || !opt) return gm_fail(err, GM_ERR_ARG, "gm_seq_sample: sequence or options are NULL");
    gm_status st = gm_sampling_validate(opt, err);
    if (st) return st;
    if (!s->logits_valid) return gm_fail(err, GM_ERR_STATE, "gm_seq_sample: no logits (evaluate the sequence first)");
    if (s->n_tok >= s->e->n_ctx)
        return gm_fail(err, GM_ERR_CONTEXT, "gm_seq_sample: the context is full (%d tokens)", s->e->n_ctx);
    int32_t t;
    gm_sampler *smp = gm_seq_sampler(s, opt);
    if ((st = gm_pick_token(smp, s->grammar, s->mask, opt, s->logits, s->tok, s->n_tok, &t, err))) return st;
    s->tok[s->n_tok++] = t;
    s->logits_valid = false;
    if (tok) *tok = t;
    return GM_OK;
}

/* ---------------------------------------------------------------- forward calls */

/* One forward call over e->rows[0..n) (rows of a sequence consecutive, from its n_kv): blocks made
 * writable, the backend run, then each sequence's n_kv advanced and its new full blocks indexed. */
static gm_status run_rows(gm_engine *e, int n, gm_fwd_batch *b, bool tainted, gm_error *err) {
    gm_status st = GM_OK;
    for (int i = 0; i < n && !st; i++)
        if (i == 0 || e->row_seq[i] != e->row_seq[i - 1]) {
            int k = 1;
            while (i + k < n && e->row_seq[i + k] == e->row_seq[i]) k++;
            gm_seq *s = e->row_seq[i];
            st = gm_kv_table_prepare(e->pool, &s->kv, e->rows[i].pos, e->rows[i].pos + k, err);
        }
    if (st) return st;
    for (int i = 0; i < n; i++) e->rows[i].kv = &e->row_seq[i]->kv;
    b->n = n;
    b->rows = e->rows;
    if ((st = gm_forward_run(e->fwd, b, err))) return st;
    for (int i = 0; i < n; i++) {
        gm_seq *s = e->row_seq[i];
        s->n_kv = e->rows[i].pos + 1;
        /* rows of a keyed span are content like tokens; other embeddings cannot be named */
        if ((tainted || (e->rows[i].embed && !gm_seq_pos_keyed(s, e->rows[i].pos))) && e->rows[i].pos < s->taint)
            s->taint = e->rows[i].pos;
        if (i + 1 < n && e->row_seq[i + 1] == s) continue;
        /* the last row of s in this call: index its new full blocks, drop what its window no longer needs */
        const int full = (s->n_kv < s->taint ? s->n_kv : s->taint) / GM_KV_BLOCK;
        if (full > s->kv.n_hashed) gm_kv_table_register(e->pool, &s->kv, s->tok, gm_seq_salts(s, full), full);
        gm_kv_table_trim_window(e->pool, &s->kv, s->n_kv);
    }
    return GM_OK;
}

/* How many positions of s the prefix index may serve: never the last (the caller wants its logits), nothing
 * from an anonymous span's block on, and in the block where it ends only text rows (a tail entry is keyed
 * by ids alone). */
static int adoptable(const gm_seq *s) {
    int n = s->n_tok - 1;
    const int limit = gm_seq_index_limit(s);
    if (limit <= n / GM_KV_BLOCK) n = limit * GM_KV_BLOCK;
    const int span = gm_seq_span_from(s, n / GM_KV_BLOCK * GM_KV_BLOCK);
    return span < n ? span : n;
}

/* Before computing: recompute the last position when only its logits are missing, and adopt from the
 * prefix index what it holds of the pending tokens. */
static void begin_eval(gm_engine *e, gm_seq *s, bool adopt) {
    if (s->n_kv >= s->n_tok && !s->logits_valid) keep_kv(s, s->n_tok - 1);
    if (!adopt || !e->prefix_cache || s->n_kv % GM_KV_BLOCK || s->kv.n_hashed != s->n_kv / GM_KV_BLOCK ||
        s->taint <= s->n_kv)
        return;
    const int n = adoptable(s);
    if (n <= s->n_kv) return;
    gm_kv_table_drop_from(e->pool, &s->kv, s->n_kv / GM_KV_BLOCK);
    const int got = gm_kv_table_adopt(e->pool, &s->kv, s->tok, gm_seq_salts(s, (n + GM_KV_BLOCK - 1) / GM_KV_BLOCK), n);
    s->n_kv += got;
    s->n_reused += got;
}

typedef struct logits_tramp {
    gm_engine *e;
    gm_seq *s;
    const gm_eval_extras *x;
} logits_tramp;

/* the generator's scoring callback gets positions; the last one's logits also stay in the sequence */
static void on_logits_row(void *user, int row, const float *l) {
    logits_tramp *t = user;
    const int pos = t->e->rows[row].pos;
    if (pos == t->s->n_tok - 1) memcpy(t->s->logits, l, (size_t)t->e->c->n_vocab * sizeof *l);
    if (t->x->on_logits && pos >= t->x->logits_from) t->x->on_logits(t->x->user, pos, l);
}

gm_status gm_engine_eval_ex(gm_engine *e, gm_seq *s, const gm_eval_extras *x, gm_error *err) {
    const gm_eval_extras none = {0};
    if (!x) x = &none;
    if (s->n_tok == 0) return gm_fail(err, GM_ERR_STATE, "evaluate: the history is empty (prefill first)");
    gm_status st = ensure_logits(s, err);
    if (st) return st;
    if (s->n_kv >= s->n_tok && s->logits_valid && !x->all_logits && !x->hidden_out) return GM_OK;
    if (x->bidirectional && (s->n_kv != 0 || s->n_tok > e->n_batch))
        return gm_fail(err, GM_ERR_ARG, "evaluate: bidirectional attention needs all %d positions in one pass from "
                       "position 0 (batch size %d, %d already computed)", s->n_tok, e->n_batch, s->n_kv);
    begin_eval(e, s, !x->no_adopt && !x->embeds && !x->bias && !x->all_logits && !x->hidden_out);
    const int V = e->c->n_vocab, d = e->c->d_model;
    logits_tramp tr = {e, s, x};
    gm_fwd_batch b = {.bias = x->bias, .bias_n = x->bias_n, .bias_is_mask = x->bias_is_mask,
                      .on_logits = on_logits_row, .user = &tr, .aux_layers = x->aux_layers, .n_aux = x->n_aux,
                      .bidirectional = x->bidirectional};
    if (x->aux_taken) *x->aux_taken = false;
    s->logits_valid = false;
    while (s->n_kv < s->n_tok) {
        const int n = x->embeds ? (s->n_tok - s->n_kv < e->n_batch ? s->n_tok - s->n_kv : e->n_batch)
                                : gm_seq_chunk_rows(s, s->n_kv, e->n_batch, true);
        bool tapped = false;
        for (int i = 0; i < n; i++) {
            const int pos = s->n_kv + i;
            const bool last = pos == s->n_tok - 1 && !x->hidden_out, all = x->all_logits && pos >= x->logits_from;
            e->row_seq[i] = s;
            e->rows[i] = gm_seq_row(s, pos);
            if (x->embeds) e->rows[i].embed = x->embeds + (size_t)pos * d;
            e->rows[i].logits = last || all;
            e->rows[i].logits_out = all ? (x->logits_out ? x->logits_out + (size_t)(pos - x->logits_from) * V : NULL)
                                        : (last ? s->logits : NULL);
            e->rows[i].hidden_out = x->hidden_out ? x->hidden_out + (size_t)pos * d : NULL;
            if (last && x->n_aux) e->rows[i].taps = x->aux_out, tapped = true;
        }
        if ((st = run_rows(e, n, &b, x->embeds || x->bias || x->bidirectional, err))) return st;
        if (tapped && x->aux_taken) *x->aux_taken = true;
    }
    if (x->all_logits && x->logits_out && s->n_tok - 1 >= x->logits_from)
        memcpy(s->logits, x->logits_out + (size_t)(s->n_tok - 1 - x->logits_from) * V, (size_t)V * sizeof *s->logits);
    s->logits_valid = !x->hidden_out;
    return GM_OK;
}

static gm_status check_eval_args(gm_engine *e, gm_seq *const *seqs, int n, const char *fn, gm_error *err) {
    if (!e || n < 0 || (n > 0 && !seqs)) return gm_fail(err, GM_ERR_ARG, "%s: bad arguments", fn);
    for (int i = 0; i < n; i++) {
        if (!seqs[i] || seqs[i]->e != e) return gm_fail(err, GM_ERR_ARG, "%s: sequence %d is not of this engine", fn, i);
        if (seqs[i]->n_tok == 0) return gm_fail(err, GM_ERR_STATE, "%s: sequence %d has an empty history", fn, i);
        for (int j = 0; j < i; j++)
            if (seqs[j] == seqs[i]) return gm_fail(err, GM_ERR_ARG, "%s: sequence %d is given twice", fn, i);
        gm_status st = ensure_logits(seqs[i], err);
        if (st) return st;
    }
    return GM_OK;
}

/* One forward call of at most max_rows rows: single decode tokens first, then prompt chunks in the
 * order of seqs. *n_rows: rows computed (0 when nothing is pending). */
static gm_status eval_call(gm_engine *e, gm_seq *const *seqs, int n, int max_rows, int *n_rows, gm_error *err) {
    int k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n && k < max_rows; i++) {
            gm_seq *s = seqs[i];
            const int pending = s->n_tok - s->n_kv;
            if (pending <= 0 || (pass == 0) != (pending == 1)) continue;
            /* an image's uncomputed rows go in one call: maybe fewer rows, or (alone) past max_rows */
            const int take = gm_seq_chunk_rows(s, s->n_kv, max_rows - k, k == 0);
            for (int r = 0; r < take; r++, k++) {
                const int pos = s->n_kv + r;
                e->row_seq[k] = s;
                e->rows[k] = gm_seq_row(s, pos);
                e->rows[k].logits = pos == s->n_tok - 1;
                e->rows[k].logits_out = pos == s->n_tok - 1 ? s->logits : NULL;
            }
        }
    *n_rows = k;
    if (k == 0) return GM_OK;
    gm_fwd_batch b = {0};
    gm_status st = run_rows(e, k, &b, false, err);
    if (st) return st;
    for (int i = 0; i < k; i++)
        if (e->rows[i].logits) e->row_seq[i]->logits_valid = true;
    return GM_OK;
}

gm_status gm_engine_eval(gm_engine *e, gm_seq *const *seqs, int n, gm_error *err) {
    gm_status st = check_eval_args(e, seqs, n, "gm_engine_eval", err);
    if (st) return st;
    for (int i = 0; i < n; i++) begin_eval(e, seqs[i], true);
    for (int k = 1; k > 0;)
        if ((st = eval_call(e, seqs, n, e->n_batch, &k, err))) return st;
    return GM_OK;
}

gm_status gm_engine_step(gm_engine *e, gm_seq *const *seqs, int n, int max_rows, int *n_rows, gm_error *err) {
    if (n_rows) *n_rows = 0;
    if (max_rows < 1) return gm_fail(err, GM_ERR_ARG, "gm_engine_step: max_rows %d < 1", max_rows);
    gm_status st = check_eval_args(e, seqs, n, "gm_engine_step", err);
    if (st) return st;
    for (int i = 0; i < n; i++) begin_eval(e, seqs[i], true);
    int k;
    st = eval_call(e, seqs, n, max_rows < e->n_batch ? max_rows : e->n_batch, &k, err);
    if (n_rows) *n_rows = k;
    return st;
}

gm_status gm_engine_forward(gm_engine *e, const gm_row *rows, int n, float *logits, gm_error *err) {
    if (!e || n < 0 || (n > 0 && !rows)) return gm_fail(err, GM_ERR_ARG, "gm_engine_forward: bad arguments");
    int want = 0;
    for (int i = 0; i < n; i++) { /* every row checked before anything changes */
        const gm_row *r = &rows[i];
        if (!r->seq || r->seq->e != e) return gm_fail(err, GM_ERR_ARG, "gm_engine_forward: row %d: sequence not of this engine", i);
        if (gm_seq_span_at(r->seq, r->pos))
            return gm_fail(err, GM_ERR_ARG, "gm_engine_forward: row %d: position %d holds appended embeddings "
                           "(gm_seq_append_embeds): gm_engine_eval / gm_engine_step compute them", i, r->pos);
        int expect = r->seq->n_kv;
        for (int j = i - 1; j >= 0; j--)
            if (rows[j].seq == r->seq) {
                expect = rows[j].pos + 1;
                break;
            }
        if (r->pos != expect)
            return gm_fail(err, GM_ERR_ARG, "gm_engine_forward: row %d: position %d, the sequence's next is %d", i, r->pos,
                           expect);
        if (r->pos >= e->n_ctx)
            return gm_fail(err, GM_ERR_CONTEXT, "gm_engine_forward: row %d: position %d exceeds the context size %d", i,
                           r->pos, e->n_ctx);
        if (r->token < 0 || r->token >= e->c->n_vocab)
            return gm_fail(err, GM_ERR_ARG, "gm_engine_forward: row %d: token id %d is outside the vocabulary [0, %d)", i,
                           (int)r->token, e->c->n_vocab);
        if (r->pos < r->seq->n_tok && r->seq->tok[r->pos] != r->token)
            return gm_fail(err, GM_ERR_ARG, "gm_engine_forward: row %d: token %d differs from the history's %d at %d", i,
                           (int)r->token, (int)r->seq->tok[r->pos], r->pos);
        if (r->taps && e->n_taps == 0)
            return gm_fail(err, GM_ERR_ARG, "gm_engine_forward: row %d asks for taps, but no layers are set "
                           "(gm_engine_set_taps)", i);
        want += r->logits;
        gm_status st = ensure_logits(r->seq, err);
        if (st) return st;
    }
    if (want && !logits) return gm_fail(err, GM_ERR_ARG, "gm_engine_forward: %d rows want logits, the buffer is NULL", want);
    for (int i = 0; i < n; i++) { /* appends, in order */
        gm_seq *s = rows[i].seq;
        if (rows[i].pos == s->n_tok) s->tok[s->n_tok++] = rows[i].token;
        s->logits_valid = false;
    }
    gm_fwd_batch b = {.aux_layers = e->tap_layers, .n_aux = e->n_taps};
    const size_t V = (size_t)e->c->n_vocab;
    int li = 0;
    for (int off = 0; off < n; off += e->n_batch) {
        const int k = n - off < e->n_batch ? n - off : e->n_batch;
        for (int i = 0; i < k; i++) {
            const gm_row *r = &rows[off + i];
            e->row_seq[i] = r->seq;
            e->rows[i] = (gm_fwd_row){.pos = r->pos, .token = r->token, .embed = r->embed, .logits = r->logits,
                                      .logits_out = r->logits ? logits + (size_t)li++ * V : NULL,
                                      .hidden_out = r->hidden, .taps = r->taps};
        }
        gm_status st = run_rows(e, k, &b, false, err);
        if (st) return st;
        for (int i = 0; i < k; i++) {
            gm_seq *s = e->row_seq[i];
            if (e->rows[i].logits && e->rows[i].pos == s->n_tok - 1) {
                memcpy(s->logits, e->rows[i].logits_out, V * sizeof *s->logits);
                s->logits_valid = true;
            }
        }
    }
    return GM_OK;
}

gm_status gm_engine_set_taps(gm_engine *e, const int *layers, int n, gm_error *err) {
    if (!e || n < 0 || n > GM_ENGINE_MAX_TAPS || (n > 0 && !layers))
        return gm_fail(err, GM_ERR_ARG, "gm_engine_set_taps: %d layers (at most %d)", n, GM_ENGINE_MAX_TAPS);
    for (int i = 0; i < n; i++)
        if (layers[i] < 0 || layers[i] >= e->c->n_layers)
            return gm_fail(err, GM_ERR_ARG, "gm_engine_set_taps: layer %d is outside [0, %d)", layers[i], e->c->n_layers);
    if (n > 0) memcpy(e->tap_layers, layers, (size_t)n * sizeof *layers); /* n 0: layers may be NULL */
    e->n_taps = n;
    return GM_OK;
}
