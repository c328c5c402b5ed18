/* model/families/gemma3n.c — Gemma 3n: config keys and tensor binding (see gemma3n.h for the math; the AltUp /
 * LAuReL / per-layer-input / sparsity steps of the forward pass: runtime/families/gemma3n.c). */
#include "model/families/gemma3n.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/ops.h"
#include "model/model.h"

#define NS GM_3N_STREAMS

/* The model's Gemma 3n weights (gm_model.family_weights, which gm_3n_load made). */
static gm_3n_weights *weights(const gm_model *m) { return m->family_weights; }

/* ------------------------------------------------------------------ Hugging Face names */

/* What 3n adds to a folder's names (beside the per-layer inputs, registry.c's): the AltUp projections, kept apart
 * in HF as "altup_proj.<k>.weight" where the GGUF stacks them into one [d, d, 3] tensor (load_slices takes either
 * form), and the AltUp / LAuReL tensors of each layer. */
const gm_hf_name gm_3n_hf_names[] = {
    {GM_HF_NUMBERED, "model.altup_projections.", "altup_proj."},
    {GM_HF_NUMBERED, "model.altup_unembed_projections.", "altup_unembd_proj."},
    {GM_HF_LAYER, "altup.correction_coefs.weight", "altup_correct_coef.weight"},
    {GM_HF_LAYER, "altup.prediction_coefs.weight", "altup_predict_coef.weight"},
    {GM_HF_LAYER, "altup.correct_output_scale", "altup_correct_scale.weight"},
    {GM_HF_LAYER, "altup.modality_router.weight", "altup_router.weight"},
    {GM_HF_LAYER, "altup.router_norm.weight", "altup_router_norm.weight"},
    {GM_HF_LAYER, "laurel.linear_left.weight", "laurel_l.weight"},
    {GM_HF_LAYER, "laurel.linear_right.weight", "laurel_r.weight"},
    {GM_HF_LAYER, "laurel.post_laurel_norm.weight", "laurel_post_norm.weight"},
    {GM_HF_END, NULL, NULL},
};

/* ------------------------------------------------------------------ config */

/* An optional unsigned key that llama.cpp ignores: when present it must equal the hard-coded value. */
static gm_status check_fixed(const gguf_file *f, const char *suffix, int64_t want, gm_error *err) {
    char key[128];
    snprintf(key, sizeof key, "gemma3n.%s", suffix);
    if (!gguf_find(f, key)) return GM_OK;
    int32_t v;
    gm_status st = gguf_get_i32(f, key, &v, err);
    if (st) return st;
    if (v != want)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: %s = %d, but Gemma 3n is computed (as llama.cpp does) with %lld",
                       f->path, key, (int)v, (long long)want);
    return GM_OK;
}

gm_status gm_3n_config_gguf(const gguf_file *f, gm_config *c, gm_error *err) {
    const char *path = f->path;
    int32_t window;
    gm_status st = gguf_get_i32(f, "gemma3n.attention.sliding_window", &window, err);
    if (st) return st;
    if (window <= 0) return gm_fail(err, GM_ERR_FORMAT, "%s: gemma3n.attention.sliding_window must be positive", path);
    c->sliding_window = window;
    c->rope_base_local = 10000.0f; /* llama.cpp's default for freq_base_swa */
    if (gguf_find(f, "gemma3n.rope.freq_base_swa") &&
        ((st = gguf_get_f32(f, "gemma3n.rope.freq_base_swa", &c->rope_base_local, err)) ||
         (st = gm_config_number(path, "gemma3n.rope.freq_base_swa", c->rope_base_local, GM_NUM_POSITIVE, err))))
        return st;
    if ((st = gm_config_gguf_pattern(f, c, 5, err))) return st; /* llama.cpp's default for gemma3n: 5 */
    if ((st = check_fixed(f, "altup.num_inputs", NS, err)) || (st = check_fixed(f, "altup.active_idx", 0, err)) ||
        (st = check_fixed(f, "embedding_length_per_layer_input", GM_3N_PLE, err)))
        return st;
    /* llama.cpp shares K/V from layer 20 whatever the file says; a file that expects another split would be
     * computed differently from what its writer meant */
    const int shared = c->n_layers > GM_3N_KV_FROM ? c->n_layers - GM_3N_KV_FROM : 0;
    if (gguf_find(f, "gemma3n.attention.shared_kv_layers")) {
        int32_t v;
        if ((st = gguf_get_i32(f, "gemma3n.attention.shared_kv_layers", &v, err))) return st;
        if (v != shared)
            return gm_fail(err, GM_ERR_UNSUPPORTED,
                           "%s: gemma3n.attention.shared_kv_layers = %d with %d layers, but Gemma 3n shares K/V from "
                           "layer %d (llama.cpp's rule: %d shared layers%s)",
                           path, (int)v, c->n_layers, GM_3N_KV_FROM, shared,
                           c->n_layers <= GM_3N_KV_FROM ? "; KV sharing needs at least 21 layers" : "");
    }
    if (shared > 0) {
        /* sliding consumers read layer 18, full ones layer 19: those must be of the consumers' kinds */
        const bool s18 = gm_config_gguf_slides(f, c, GM_3N_KV_FROM - 2);
        const bool s19 = gm_config_gguf_slides(f, c, GM_3N_KV_FROM - 1);
        if (!s18 || s19)
            return gm_fail(err, GM_ERR_UNSUPPORTED,
                           "%s: Gemma 3n layers >= 20 attend over layer 18 (sliding) or 19 (full): layer 18 must slide "
                           "and layer 19 must be full, this layer pattern has layer 18 %s and layer 19 %s", path,
                           s18 ? "sliding" : "full", s19 ? "sliding" : "full");
    }
    c->final_softcap = 30.0f;
    c->attn_softcap = 0.0f;
    c->query_scale = 1.0f;
    c->norm_weights_plus_one = true; /* the file holds the raw w, which 3n multiplies by: use it as stored */
    c->has_v_norm = true;
    return GM_OK;
}

/* The text config of an HF folder (text_config when nested), NULL for GGUF. */
static const cJSON *hf_text_config_of(const gm_source *src) {
    const cJSON *root = gm_source_hf_config(src);
    if (!root) return NULL;
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    return cJSON_IsObject(tc) ? tc : root;
}

static const cJSON *hf_text_config(const gm_model *m) { return hf_text_config_of(m->src); }

int gm_3n_kv_source(const gm_source *src, const gm_config *c, int il) {
    const cJSON *hf = hf_text_config_of(src);
    if (hf) { /* HF: the last layer before the first shared one of il's kind */
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(hf, "num_kv_shared_layers");
        const double want = v ? (cJSON_IsNumber(v) ? v->valuedouble : 0.0) : 15.0; /* HF's default: 15 */
        const int shared = want >= 0 && want < c->n_layers ? (int)want : 0;
        const int first = c->n_layers - shared;
        if (shared == 0 || il < first) return il;
        for (int j = first - 1; j >= 0; j--)
            if (gm_layer_is_sliding(src, c, j) == gm_layer_is_sliding(src, c, il)) return j;
        return -1; /* none of its kind: refused by the layer check */
    }
    if (il < GM_3N_KV_FROM) return il;
    /* llama.cpp: n_layer_kv_from_start - (is_swa(il) ? 2 : 1) */
    return GM_3N_KV_FROM - (gm_layer_is_sliding(src, c, il) ? 2 : 1);
}

/* HF's standard normal quantile for activation_sparsity_pattern (torch computes it in f32; for the 0.95 of the
 * released models that gives 1.6448533535003662, llama.cpp's constant). */
static float normal_quantile(double p) {
    if (p == 0.95) return 1.6448533535003662f;
    double lo = -40.0, hi = 40.0;
    for (int i = 0; i < 200; i++) {
        const double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < p) lo = mid;
        else hi = mid;
    }
    return (float)(0.5 * (lo + hi));
}

/* The computation variant: llama.cpp's for GGUF, HF's (from config.json) for folders. */
static gm_status load_variant(gm_model *m, gm_error *err) {
    gm_3n_variant *v = &weights(m)->v;
    const gm_config *c = &m->cfg;
    v->sparsity = calloc((size_t)c->n_layers, sizeof *v->sparsity);
    if (!v->sparsity) return gm_fail(err, GM_ERR_NOMEM, "model: out of memory");
    const cJSON *hf = hf_text_config(m);
    if (!hf) {
        v->correct_scale = true;
        for (int il = 0; il < c->n_layers && il < GM_3N_SPARSE_LAYERS; il++) v->sparsity[il] = 1.6448533535003662f;
        return GM_OK;
    }
    const char *path = gm_source_path(m->src);
    v->std_n = true;
    const cJSON *clip = cJSON_GetObjectItemCaseSensitive(hf, "altup_coef_clip"); /* HF: default 120, null = none */
    v->coef_clip = !clip ? 120.0f : cJSON_IsNumber(clip) && clip->valuedouble > 0 ? (float)clip->valuedouble : 0.0f;
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(hf, "altup_correct_scale");
    v->correct_scale = !cJSON_IsBool(cs) || cJSON_IsTrue(cs);
    const struct { const char *key; int want; } fixed[] = {
        {"altup_num_inputs", NS}, {"altup_active_idx", 0}, {"hidden_size_per_layer_input", GM_3N_PLE},
        {"laurel_rank", GM_3N_LAUREL}};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(hf, fixed[i].key);
        if (e && (!cJSON_IsNumber(e) || (int)e->valuedouble != fixed[i].want))
            return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: \"%s\" must be %d (the only value this engine runs)", path,
                           fixed[i].key, fixed[i].want);
    }
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(hf, "activation_sparsity_pattern");
    if (!sp) { /* HF's default, (0.95,) * 10 + (0.0,) * 25, fits 35 layers only */
        if (c->n_layers != 35)
            return gm_fail(err, GM_ERR_FORMAT, "%s: \"activation_sparsity_pattern\" is missing (HF's default fits 35 "
                           "layers, this model has %d)", path, c->n_layers);
        for (int il = 0; il < 10; il++) v->sparsity[il] = 1.6448533535003662f;
    } else if (cJSON_IsArray(sp)) { /* null: no sparsity */
        if (cJSON_GetArraySize(sp) != c->n_layers)
            return gm_fail(err, GM_ERR_FORMAT, "%s: \"activation_sparsity_pattern\" has %d entries for %d layers", path,
                           cJSON_GetArraySize(sp), c->n_layers);
        int il = 0;
        for (const cJSON *e = sp->child; e; e = e->next, il++) {
            if (!cJSON_IsNumber(e) || e->valuedouble < 0.0 || e->valuedouble >= 1.0)
                return gm_fail(err, GM_ERR_FORMAT, "%s: activation_sparsity_pattern[%d] is not in [0, 1)", path, il);
            v->sparsity[il] = e->valuedouble > 0.0 ? normal_quantile(e->valuedouble) : 0.0f;
        }
    }
    return GM_OK;
}

/* ------------------------------------------------------------------ tensors */

/* Slice k of a 3-D [d, d, 3] tensor as a [d x d] matrix. */
static gm_status load_slices(gm_model *m, const char *name, gm_matrix *out, gm_error *err) {
    const gm_tensor *t = gm_source_tensor(m->src, name);
    const char *path = gm_source_path(m->src);
    const int64_t d = m->cfg.d_model;
    if (!t) { /* an HF folder: one [d x d] tensor per slice, "<stem>.<k>.weight" */
        char slice[96];
        const int stem = (int)(strlen(name) - strlen(".weight"));
        snprintf(slice, sizeof slice, "%.*s.0.weight", stem, name);
        if (!gm_source_tensor(m->src, slice)) return gm_fail(err, GM_ERR_NOT_FOUND, "%s: tensor %s is missing", path, name);
        for (int k = 0; k < NS - 1; k++) {
            snprintf(slice, sizeof slice, "%.*s.%d.weight", stem, name, k);
            gm_status st = gm_model_load_matrix(m, slice, d, d, &out[k], err);
            if (st) return st;
        }
        return GM_OK;
    }
    if (t->ne[0] != d || t->ne[1] != d || t->ne[2] != NS - 1 || t->ne[3] != 1)
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %d]",
                       path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                       (long long)d, (long long)d, NS - 1);
    const size_t rb = gm_row_bytes(t->type, d);
    if (rb == 0) return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: tensor %s: type %d is not supported", path, name, t->type);
    if (t->nbytes < rb * (uint64_t)d * (NS - 1))
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor %s is truncated", path, name);
    for (int k = 0; k < NS - 1; k++)
        out[k] = (gm_matrix){.type = t->type, .rows = d, .cols = d, .data = (const char *)t->data + rb * (size_t)d * k};
    return GM_OK;
}

/* A small matrix dequantized into dst (rows x cols floats). */
static gm_status load_small(gm_model *m, const char *name, int64_t cols, int64_t rows, float *dst, gm_error *err) {
    gm_matrix w;
    gm_status st = gm_model_load_matrix(m, name, cols, rows, &w, err);
    if (st) return st;
    for (int64_t r = 0; !st && r < rows; r++) st = gm_matrix_row(&w, r, dst + r * cols);
    if (st) return gm_fail(err, st, "%s: %s: cannot read its rows", gm_source_path(m->src), name);
    return GM_OK;
}

static gm_status load_layer(gm_model *m, int il, float **store, gm_error *err) {
    const int64_t d = m->cfg.d_model;
    gm_3n_layer *L = &weights(m)->layers[il];
    char name[96];
    gm_status st;
#define MAT(field, suffix, cols, rows)                                                   \
    snprintf(name, sizeof name, "blk.%d." suffix ".weight", il);                         \
    if ((st = gm_model_load_matrix(m, name, cols, rows, &L->field, err))) return st;
#define NORM(field, suffix)                                                              \
    snprintf(name, sizeof name, "blk.%d." suffix ".weight", il);                         \
    if ((st = gm_model_load_norm(m, name, (int)d, true, *store, &L->field, err))) return st; \
    *store += d;
    MAT(laurel_l, "laurel_l", d, GM_3N_LAUREL)
    MAT(laurel_r, "laurel_r", GM_3N_LAUREL, d)
    MAT(inp_gate, "inp_gate", d, GM_3N_PLE)
    MAT(proj, "proj", GM_3N_PLE, d)
    NORM(laurel_post_norm, "laurel_post_norm")
    NORM(router_norm, "altup_router_norm")
    NORM(correct_scale, "altup_correct_scale")
    NORM(post_norm, "post_norm")
#undef MAT
#undef NORM
    L->router = *store;
    *store += NS * d;
    snprintf(name, sizeof name, "blk.%d.altup_router.weight", il);
    if ((st = load_small(m, name, d, NS, L->router, err))) return st;
    snprintf(name, sizeof name, "blk.%d.altup_predict_coef.weight", il);
    if ((st = load_small(m, name, NS, NS * NS, L->predict, err))) return st;
    snprintf(name, sizeof name, "blk.%d.altup_correct_coef.weight", il);
    if ((st = load_small(m, name, NS, NS, L->correct, err))) return st;
    const float clip = weights(m)->v.coef_clip; /* HF clamps the correction coefficients (llama.cpp does not) */
    for (int k = 0; clip > 0.0f && k < NS * NS; k++)
        L->correct[k] = L->correct[k] > clip ? clip : L->correct[k] < -clip ? -clip : L->correct[k];
    return GM_OK;
}

/* Rows of the per-layer token table: the vocabulary for GGUF (llama.cpp requires it; the converter pads);
 * HF's vocab_size_per_layer_input may be smaller (262144 of 262400): ids past it take row 0, as in HF. */
static int64_t ple_rows(const gm_model *m) {
    const gm_tensor *t = gm_source_tensor(m->src, "per_layer_token_embd.weight");
    if (hf_text_config(m) && t && t->ne[1] > 0 && t->ne[1] <= m->cfg.n_vocab) return t->ne[1];
    return m->cfg.n_vocab;
}

gm_status gm_3n_load(gm_model *m, gm_error *err) {
    const gm_config *c = &m->cfg;
    const int64_t d = c->d_model, P = (int64_t)GM_3N_PLE * c->n_layers;
    gm_3n_weights *w = calloc(1, sizeof *w);
    m->family_weights = w;
    if (!w) return gm_fail(err, GM_ERR_NOMEM, "model: out of memory");
    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    /* per layer: 4 norms and the router (4 x d); then the PLE norm */
    w->store = malloc(((size_t)c->n_layers * (4 + NS) * (size_t)d + GM_3N_PLE) * sizeof(float));
    if (!w->layers || !w->store) return gm_fail(err, GM_ERR_NOMEM, "model: out of memory for Gemma 3n weights");
    gm_status st;
    if ((st = load_slices(m, "altup_proj.weight", w->altup_proj, err)) ||
        (st = load_slices(m, "altup_unembd_proj.weight", w->altup_unembd, err)) ||
        (st = load_variant(m, err)) ||
        (st = gm_model_load_matrix(m, "per_layer_token_embd.weight", P, ple_rows(m), &w->ple_tok, err)) ||
        (st = gm_model_load_matrix(m, "per_layer_model_proj.weight", d, P, &w->ple_proj, err)))
        return st;
    float *store = w->store;
    if ((st = gm_model_load_norm(m, "per_layer_proj_norm.weight", GM_3N_PLE, true, store, &w->ple_norm, err))) return st;
    store += GM_3N_PLE;
    for (int il = 0; il < c->n_layers; il++)
        if ((st = load_layer(m, il, &store, err))) return st;
    return GM_OK;
}

void gm_3n_free(gm_3n_weights *w) {
    if (!w) return;
    free(w->v.sparsity);
    free(w->layers);
    free(w->store);
    free(w);
}
