/* model/model.c — open a model: source + config + tokenizer + per-layer weight views. What a family adds is
 * reached through its row (model/family.h: layer facts, RoPE factors, extra weights). No weight is copied or
 * rearranged here: the layouts a backend's kernels want are its own (backends/cpu/repack.c). */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdbool.h>

#include "core/error.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "model/family.h"
#include "quant/quant.h"
#include "text/tokenizer.h"

bool gm_layer_is_sliding(const gm_source *s, const gm_config *c, int il) {
    return gm_config_gguf_slides(gm_source_gguf(s), c, il);
}

gm_layer_config gm_layer_config_uniform(const gm_source *s, const gm_config *c, int il) {
    const bool sliding = gm_layer_is_sliding(s, c, il);
    /* Gemma 3: local layers use the local base unscaled; global layers the global base with linear
     * scaling. Gemma 1/2 have one base (the config sets both). */
    return (gm_layer_config){.head_dim = c->head_dim, .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads,
                             .d_ff = c->d_ff, .window = sliding ? c->sliding_window : 0,
                             .rope_base = sliding ? c->rope_base_local : c->rope_base_global,
                             .rope_scale = sliding ? 1.0f : c->rope_scale_global, .rope_dims = c->head_dim,
                             .kv_source = il};
}

gm_layer_max gm_model_layer_max(const gm_model *m) {
    gm_layer_max x = {0};
    for (int il = 0; il < m->cfg.n_layers; il++) {
        const gm_layer_config *l = &m->layers[il].lc;
#define MAXOF(f, v) x.f = (v) > x.f ? (v) : x.f
        MAXOF(head_dim, l->head_dim);
        MAXOF(n_heads, l->n_heads);
        MAXOF(n_kv_heads, l->n_kv_heads);
        MAXOF(d_ff, l->d_ff);
        MAXOF(q_dim, l->n_heads * l->head_dim);
        MAXOF(kv_dim, l->n_kv_heads * l->head_dim);
        MAXOF(group, l->n_heads / l->n_kv_heads);
#undef MAXOF
    }
    return x;
}

gm_status gm_model_embedding_row(const gm_model *m, int32_t tok, float *out) {
    const gm_matrix *E = &m->embd;
    const gm_type_traits *tr = gm_type_traits_of(E->type);
    if (!tr || !tr->dequant_row) return GM_ERR_UNSUPPORTED;
    if (tok < 0 || tok >= E->rows) return GM_ERR_ARG;
    tr->dequant_row((const char *)E->data + (size_t)tok * gm_row_bytes(E->type, E->cols), out, E->cols);
    return GM_OK;
}

const gm_layer_config *gm_model_layer(const gm_model *m, int il) {
    return m && il >= 0 && il < m->cfg.n_layers ? &m->layers[il].lc : NULL;
}

static gm_status find(const gm_model *m, const char *name, bool required, const gm_tensor **out,
                      gm_error *err) {
    *out = gm_source_tensor(m->src, name);
    if (!*out && required)
        return gm_fail(err, GM_ERR_NOT_FOUND, "%s: tensor %s is missing", gm_source_path(m->src), name);
    return GM_OK;
}

/* A 2-D weight of shape ne = [cols, rows] as a matrix view, with its size checked. */
gm_status gm_model_load_matrix(gm_model *m, const char *name, int64_t cols, int64_t rows, gm_matrix *out,
                               gm_error *err) {
    const gm_tensor *t;
    gm_status st = find(m, name, true, &t, err);
    if (st) return st;
    const char *path = gm_source_path(m->src);
    if (t->n_dims > 2 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                       path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)cols, (long long)rows);
    const size_t rb = gm_row_bytes(t->type, cols);
    if (rb == 0 || !gm_type_traits_of(t->type))
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: tensor %s: type %s (%d) with rows of %lld is not supported",
                       path, name, gm_type_name(t->type) ? gm_type_name(t->type) : "?", t->type, (long long)cols);
    if (t->nbytes < (uint64_t)rb * (uint64_t)rows)
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor %s holds %llu bytes, needs %llu", path, name,
                       (unsigned long long)t->nbytes, (unsigned long long)rb * (unsigned long long)rows);
    *out = (gm_matrix){.type = t->type, .rows = rows, .cols = cols, .data = t->data, .id = ++m->n_matrices};
    return GM_OK;
}

/* A 1-D norm weight of n elements converted to f32 into dst, with +1 added when the file stores the
 * raw (zero-centred) w. Absent optional norms leave *out NULL. */
gm_status gm_model_load_norm(gm_model *m, const char *name, int n, bool required, float *dst, const float **out,
                             gm_error *err) {
    const gm_tensor *t;
    *out = NULL;
    gm_status st = find(m, name, required, &t, err);
    if (st || !t) return st;
    const char *path = gm_source_path(m->src);
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return gm_fail(err, GM_ERR_FORMAT, "%s: norm %s has %lld x %lld elements, expected %d", path, name,
                       (long long)t->ne[0], (long long)t->ne[1], n);
    const gm_type_traits *tr = gm_type_traits_of(t->type);
    const size_t rb = gm_row_bytes(t->type, n);
    if (!tr || !tr->dequant_row || rb == 0)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: norm %s has unsupported type %d", path, name, t->type);
    if (t->nbytes < rb) return gm_fail(err, GM_ERR_FORMAT, "%s: norm %s is truncated", path, name);
    tr->dequant_row(t->data, dst, n);
    if (!m->cfg.norm_weights_plus_one)
        for (int i = 0; i < n; i++) dst[i] += 1.0f;
    for (int i = 0; i < n; i++)
        if (!isfinite(dst[i])) return gm_fail(err, GM_ERR_FORMAT, "%s: norm %s holds a non-finite value", path, name);
    *out = dst;
    return GM_OK;
}

/* Layer il's facts: the uniform rules, then what the family says per layer (3n's KV sharing, 4's geometry),
 * checked against the limits. */
static gm_status layer_facts(gm_model *m, int il, gm_error *err) {
    const gm_config *c = &m->cfg;
    gm_layer *L = &m->layers[il];
    L->lc = gm_layer_config_uniform(m->src, c, il);
    gm_status st = c->family->layer_config ? c->family->layer_config(m->src, c, il, &L->lc, err) : GM_OK;
    return st ? st : gm_config_check_layer(&L->lc, il, gm_source_path(m->src), err);
}

static gm_status load_layer(gm_model *m, int il, float **store, gm_error *err) {
    const gm_config *c = &m->cfg;
    gm_layer *L = &m->layers[il];
    const gm_layer_config *lc = &L->lc;
    gm_status st;
    const int64_t d = c->d_model, qd = (int64_t)lc->n_heads * lc->head_dim,
                  kvd = (int64_t)lc->n_kv_heads * lc->head_dim, ff = lc->d_ff;
    /* a family may let layers that read another layer's K/V omit attn_k / attn_v / attn_k_norm, and a layer
     * without attn_v take V from the K projection (Gemma 4) */
    const bool opt_kv = c->family->rules.kv_tensors_optional, own_kv = lc->kv_source == il;
    char name[96];
#define PRESENT(suffix) (snprintf(name, sizeof name, "blk.%d." suffix ".weight", il), gm_source_tensor(m->src, name) != NULL)
#define MAT(field, suffix, cols, rows)                                             \
    snprintf(name, sizeof name, "blk.%d." suffix ".weight", il);                   \
    if ((st = gm_model_load_matrix(m, name, cols, rows, &L->field, err))) return st;
#define NORM(field, suffix, n, req)                                                \
    snprintf(name, sizeof name, "blk.%d." suffix ".weight", il);                   \
    if ((st = gm_model_load_norm(m, name, n, req, *store, &L->field, err))) return st;      \
    if (L->field) *store += (n);
    const bool q_only = c->family->rules.q_only; /* a drafter's layers: no K/V of their own at all */
    MAT(wq, "attn_q", d, qd)
    if (!q_only && (!opt_kv || own_kv || PRESENT("attn_k"))) { MAT(wk, "attn_k", d, kvd) }
    if (!q_only && (!opt_kv || PRESENT("attn_v"))) { MAT(wv, "attn_v", d, kvd) }
    else L->v_from_k = own_kv && !q_only;
    MAT(wo, "attn_output", qd, d)
    MAT(gate, "ffn_gate", d, ff)
    MAT(up, "ffn_up", d, ff)
    MAT(down, "ffn_down", ff, d)
    NORM(attn_norm, "attn_norm", (int)d, true)
    NORM(ffn_norm, "ffn_norm", (int)d, true)
    NORM(post_attn_norm, "post_attention_norm", (int)d, c->has_post_norms)
    NORM(post_ffn_norm, "post_ffw_norm", (int)d, c->has_post_norms)
    NORM(q_norm, "attn_q_norm", lc->head_dim, c->has_qk_norm)
    NORM(k_norm, "attn_k_norm", lc->head_dim, c->has_qk_norm && !q_only && (!opt_kv || own_kv))
#undef MAT
#undef NORM
#undef PRESENT
    if (!c->has_post_norms) L->post_attn_norm = L->post_ffn_norm = NULL;
    if (!c->has_qk_norm) L->q_norm = L->k_norm = NULL;
    float *inv = *store;
    gm_rope_inv_freq(inv, lc->rope_dims, lc->rope_base, 1.0 / lc->rope_scale);
    if (!lc->window && c->family->rope_factors && (st = c->family->rope_factors(m, inv, lc->rope_dims / 2, err)))
        return st;
    L->inv_freq = inv;
    *store += lc->rope_dims / 2;
    return GM_OK;
}

static gm_status load_weights(gm_model *m, gm_error *err) {
    const gm_config *c = &m->cfg;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) return gm_fail(err, GM_ERR_NOMEM, "model: out of memory for weights");
    gm_status st;
    for (int il = 0; il < c->n_layers; il++)
        if ((st = layer_facts(m, il, err))) return st;
    if (c->family->rules.own_weights) return c->family->load(m, err); /* every tensor the family's */
    /* per layer: 4 norms of d, q/k norms and RoPE frequencies of at most the largest head_dim each */
    const size_t hd = (size_t)gm_model_layer_max(m).head_dim;
    const size_t per_layer = 4 * (size_t)c->d_model + 2 * hd + hd / 2;
    m->f32_store = malloc(((size_t)c->n_layers * per_layer + (size_t)c->d_model) * sizeof(float));
    if (!m->f32_store) return gm_fail(err, GM_ERR_NOMEM, "model: out of memory for weights");
    st = gm_model_load_matrix(m, "token_embd.weight", c->d_model, c->n_vocab, &m->embd, err);
    if (st) return st;
    m->output = m->embd;
    if (gm_source_tensor(m->src, "output.weight") && !c->tied_embeddings) {
        st = gm_model_load_matrix(m, "output.weight", c->d_model, c->n_vocab, &m->output, err);
        if (st) return st;
    }
    float *store = m->f32_store;
    st = gm_model_load_norm(m, "output_norm.weight", c->d_model, true, store, &m->output_norm, err);
    if (st) return st;
    store += c->d_model;
    if (c->dense_2_out && (st = gm_model_load_matrix(m, "dense_2.weight", c->dense_2_in, c->dense_2_out, &m->dense_2, err)))
        return st;
    if (c->dense_3_out && (st = gm_model_load_matrix(m, "dense_3.weight", c->dense_3_in, c->dense_3_out, &m->dense_3, err)))
        return st;
    for (int il = 0; il < c->n_layers; il++)
        if ((st = load_layer(m, il, &store, err))) return st;
    return c->family->load ? c->family->load(m, err) : GM_OK;
}

/* The vocabulary travels with the weights: GGUF metadata, or the HF folder's tokenizer files. */
static gm_status load_tokenizer(gm_model *m, gm_error *err) {
    gm_status st = gm_source_is_gguf(m->src) ? gm_tokenizer_from_gguf(gm_source_gguf(m->src), &m->tok, err)
                                             : gm_tokenizer_from_hf_dir(gm_source_hf_dir(m->src), &m->tok, err);
    if (st) return gm_fail_prefix(err, "%s: tokenizer: ", gm_source_path(m->src));
    /* Every id the tokenizer can produce must have an embedding row (and a logit): the id checks
     * downstream trust n_vocab, the row count. More rows than ids is the usual padding. */
    const int32_t n_tok = gm_tokenizer_n_vocab(m->tok);
    if (n_tok > m->cfg.n_vocab)
        return gm_fail(err, GM_ERR_FORMAT, "%s: the tokenizer has %d ids but token_embd.weight has only %d rows",
                       gm_source_path(m->src), (int)n_tok, m->cfg.n_vocab);
    return GM_OK;
}

void gm_model_free(gm_model *m) {
    if (!m) return;
    gm_tokenizer_free(m->tok);
    gm_source_close(m->src);
    free(m->layers);
    free(m->f32_store);
    if (m->cfg.family && m->cfg.family->unload) m->cfg.family->unload(m);
    if (m->share) pthread_mutex_destroy(&m->share->mu);
    free(m->share);
    free(m);
}

const gm_tokenizer *gm_model_tokenizer(const gm_model *m) { return m ? m->tok : NULL; }

static gm_status share_new(gm_model *m, gm_error *err) {
    if (!(m->share = calloc(1, sizeof *m->share))) return gm_fail(err, GM_ERR_NOMEM, "model: out of memory");
    pthread_mutex_init(&m->share->mu, NULL);
    return GM_OK;
}

gm_status gm_model_open(const char *path, const gm_model_options *opt, gm_model **out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "gm_model_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return gm_fail(err, GM_ERR_ARG, "gm_model_open: empty model path");
    if (opt && !gm_isa_valid(opt->isa))
        return gm_fail(err, GM_ERR_ARG, "gm_model_open: unknown ISA level %d", (int)opt->isa);
    gm_model *m = calloc(1, sizeof *m);
    if (!m) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", path);
    m->isa = gm_isa_resolve(opt ? opt->isa : GM_ISA_AUTO);
    m->repack = opt ? opt->repack : GM_REPACK_DEFAULT;
    gm_status st = share_new(m, err);
    if (!st) st = gm_source_open(path, opt ? opt->keep_mtp : false, &m->src, err);
    if (!st) st = gm_config_load(m->src, &m->cfg, err); /* checked there, against core/limits.h */
    if (!st) st = load_weights(m, err);
    if (!st) st = load_tokenizer(m, err);
    if (st) {
        gm_model_free(m);
        return st;
    }
    *out = m;
    return GM_OK;
}

const gm_config *gm_model_config(const gm_model *m) { return m ? &m->cfg : NULL; }

gm_isa gm_model_isa(const gm_model *m) { return m ? m->isa : GM_ISA_AUTO; }
