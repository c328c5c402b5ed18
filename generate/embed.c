/* generate/embed.c — the embedder (see gemma.h, "embeddings"): one engine sequence evaluated in a single
 * bidirectional pass from position 0, its final-normed hidden states pooled (model/pooling.c).
 *
 * The engine is made with a batch as large as its context (bidirectional attention needs every key of the
 * input in the cache before any query runs, so the whole input is one forward chunk), F32 keys and values
 * (llama.cpp's reference runs use F32 too) and no prefix index (positions computed bidirectionally depend
 * on the tokens after them, so they must never be reused as a causal prefix). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gemma_generator.h"
#include "engine/engine.h"
#include "model/pooling.h"

struct gm_embedder {
    const gm_model *m;
    gm_engine *e;
    gm_seq *s;
    int n_ctx, dim;
    float *hidden;  /* n_ctx x d: every position's final-normed hidden state */
    float *pooled;  /* d */
    float *row;     /* the widest dense input */
    float *tmp;     /* dense_2's output */
};

static gm_status refuse_generative(const gm_model *m, gm_error *err) {
    return gm_fail(err, GM_ERR_UNSUPPORTED,
                   "%s is not an embedding model (architecture %s): embeddings need one such as EmbeddingGemma "
                   "(gemma-embedding); the pooled hidden state of a text generator is not a trained embedding",
                   gm_source_path(m->src), m->cfg.arch);
}

void gm_embedder_free(gm_embedder *e) {
    if (!e) return;
    gm_seq_free(e->s);
    gm_engine_free(e->e);
    free(e->hidden);
    free(e->pooled);
    free(e->row);
    free(e->tmp);
    free(e);
}

gm_status gm_embedder_new(const gm_model *m, const gm_embedder_options *opt, gm_embedder **out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "embedder: out is NULL");
    *out = NULL;
    if (!m) return gm_fail(err, GM_ERR_ARG, "embedder: model is NULL");
    const gm_config *c = &m->cfg;
    if (!c->is_embedding) return refuse_generative(m, err);
    const gm_embedder_options o = opt ? *opt : (gm_embedder_options){0};
    if (o.n_ctx < 0 || o.n_ctx > c->context_length)
        return gm_fail(err, GM_ERR_ARG, "embedder: n_ctx %d must be in [0, %d] (the model's context length; 0 = default)",
                       o.n_ctx, c->context_length);
    gm_embedder *e = calloc(1, sizeof *e);
    if (!e) return gm_fail(err, GM_ERR_NOMEM, "embedder: out of memory");
    e->m = m;
    e->n_ctx = o.n_ctx ? o.n_ctx : (c->context_length < GM_DEFAULT_MAX_CTX ? c->context_length : GM_DEFAULT_MAX_CTX);
    e->dim = c->embedding_dim;
    const gm_engine_options eo = {.n_threads = o.n_threads, .n_ctx = e->n_ctx, .n_batch = e->n_ctx,
                                  .kv_type = GM_KV_DTYPE_F32, .no_prefix_cache = true, .backend = o.backend, .isa = o.isa,
                                  .pool = o.pool, .device = o.device, .gpu_validate = o.gpu_validate};
    gm_status st = gm_engine_create(m, &eo, &e->e, err);
    if (!st) st = gm_seq_new(e->e, &e->s, err);
    if (!st) {
        const int widest = c->dense_2_out > c->d_model ? c->dense_2_out : c->d_model;
        e->hidden = malloc((size_t)e->n_ctx * (size_t)c->d_model * sizeof *e->hidden);
        e->pooled = malloc((size_t)c->d_model * sizeof *e->pooled);
        e->row = malloc((size_t)widest * sizeof *e->row);
        e->tmp = malloc((size_t)widest * sizeof *e->tmp);
        if (!e->hidden || !e->pooled || !e->row || !e->tmp)
            st = gm_fail(err, GM_ERR_NOMEM, "embedder: out of memory for %d positions", e->n_ctx);
    }
    if (st) {
        gm_embedder_free(e);
        return st;
    }
    *out = e;
    return GM_OK;
}

int gm_embedder_dim(const gm_embedder *e) { return e ? e->dim : 0; }
int gm_embedder_n_ctx(const gm_embedder *e) { return e ? e->n_ctx : 0; }

gm_status gm_embed_tokens(gm_embedder *e, const int32_t *ids, int n, float *out, gm_error *err) {
    if (!e || !out || (n > 0 && !ids)) return gm_fail(err, GM_ERR_ARG, "gm_embed_tokens: NULL argument");
    if (n < 1) return gm_fail(err, GM_ERR_ARG, "gm_embed_tokens: the input is empty");
    if (n > e->n_ctx)
        return gm_fail(err, GM_ERR_CONTEXT, "gm_embed_tokens: the input has %d tokens, more than the context size %d", n,
                       e->n_ctx);
    gm_status st = gm_seq_truncate(e->s, 0, err);
    if (!st) st = gm_seq_append(e->s, ids, n, err);
    const gm_eval_extras x = {.no_adopt = true, .bidirectional = true, .hidden_out = e->hidden};
    if (!st) st = gm_engine_eval_ex(e->e, e->s, &x, err);
    if (st) return st;
    gm_pool_mean(e->hidden, n, e->m->cfg.d_model, e->pooled);
    return gm_pool_project(e->m, e->pooled, out, e->row, e->tmp, err);
}

gm_status gm_embed_tokenize(const gm_model *m, const char *text, size_t len, int32_t **ids, size_t *n, gm_error *err) {
    if (!m || !ids || !n || (len > 0 && !text)) return gm_fail(err, GM_ERR_ARG, "gm_embed_tokenize: NULL argument");
    *ids = NULL;
    *n = 0;
    const gm_tokenizer *tok = m->tok;
    /* parse_special as llama.cpp's embedding paths (llama-server, llama-embedding) tokenize */
    gm_status st = gm_tokenize(tok, text, len, gm_tokenizer_add_bos(tok), true, ids, n, err);
    if (st) return st;
    const int32_t eos = gm_tokenizer_eos(tok);
    if (m->cfg.add_eos && eos >= 0 && (*n == 0 || (*ids)[*n - 1] != eos)) {
        int32_t *p = realloc(*ids, (*n + 1) * sizeof *p);
        if (!p) {
            free(*ids);
            *ids = NULL;
            *n = 0;
            return gm_fail(err, GM_ERR_NOMEM, "gm_embed_tokenize: out of memory");
        }
        p[(*n)++] = eos;
        *ids = p;
    }
    return GM_OK;
}

gm_status gm_embed_text(gm_embedder *e, const char *text, size_t len, float *out, int *n_tokens, gm_error *err) {
    if (n_tokens) *n_tokens = 0;
    if (!e) return gm_fail(err, GM_ERR_ARG, "gm_embed_text: embedder is NULL");
    int32_t *ids;
    size_t n;
    gm_status st = gm_embed_tokenize(e->m, text, len, &ids, &n, err);
    if (st) return st;
    if (n > (size_t)e->n_ctx)
        st = gm_fail(err, GM_ERR_CONTEXT, "gm_embed_text: the text has %zu tokens, more than the context size %d", n,
                     e->n_ctx);
    else st = gm_embed_tokens(e, ids, (int)n, out, err);
    if (!st && n_tokens) *n_tokens = (int)n;
    free(ids);
    return st;
}

void gm_embedding_normalize(float *v, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)v[i] * v[i];
    if (!(s > 0.0)) return;
    const double k = 1.0 / sqrt(s);
    for (int i = 0; i < n; i++) v[i] = (float)(v[i] * k);
}
