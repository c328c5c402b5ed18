/* model/families/gemma4_hf.c — Gemma 4's facts from a Hugging Face config.json (transformers' Gemma4TextConfig, alone as
 * model_type "gemma4_text" or nested as "text_config" of "gemma4"), the HF twin of the GGUF keys read in
 * model/families/gemma4.c. Names as llama.cpp's converter (conversion/gemma.py Gemma4Model) reads them:
 *
 *   layer_types[l]              "sliding_attention" / "full_attention" (default: 5 sliding : 1 full, last full)
 *   head_dim / global_head_dim  sliding / full layers' head size (global_head_dim absent: head_dim)
 *   num_key_value_heads / num_global_key_value_heads   sliding / full layers' KV heads (global absent or null:
 *                               num_key_value_heads)
 *   intermediate_size           a number (or one per layer); use_double_wide_mlp doubles it on the KV-shared layers
 *   rope_parameters.{sliding_attention,full_attention}.{rope_theta, partial_rotary_factor}; full layers rotate
 *                               the first int(factor * head_dim / 2) pairs with base^(-2i/head_dim) (HF's
 *                               "proportional" RoPE), the rest not at all
 *   num_kv_shared_layers        the last ones read the K/V of the last earlier non-shared layer of their kind
 *                               (HF's rule; llama.cpp's fixed kv_start-2 / kv_start-1 is the same where it applies)
 *   hidden_size_per_layer_input P (0 or null: no per-layer embeddings)
 *   num_experts, top_k_experts, moe_intermediate_size (with enable_moe_block)
 *   final_logit_softcapping     null or absent: no cap (llama.cpp's GGUF default is 30)
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/families/gemma4.h"


/* What Gemma 4 adds to a folder's names (beside the per-layer inputs, registry.c's): the layer scalar, the
 * mixture-of-experts router, the experts ([E, 2F, d] gate rows first, and [E, d, F]) and the extra FFN norms of
 * MoE layers. */
const gm_hf_name gm_4_hf_names[] = {
    {GM_HF_LAYER, "layer_scalar", "layer_output_scale.weight"},
    {GM_HF_LAYER, "router.proj.weight", "ffn_gate_inp.weight"},
    {GM_HF_LAYER, "router.scale", "ffn_gate_inp.scale"},
    {GM_HF_LAYER, "router.per_expert_scale", "ffn_down_exps.scale"},
    {GM_HF_LAYER, "experts.gate_up_proj", "ffn_gate_up_exps.weight"},
    {GM_HF_LAYER, "experts.down_proj", "ffn_down_exps.weight"},
    {GM_HF_LAYER, "pre_feedforward_layernorm_2.weight", "pre_ffw_norm_2.weight"},
    {GM_HF_LAYER, "post_feedforward_layernorm_1.weight", "post_ffw_norm_1.weight"},
    {GM_HF_LAYER, "post_feedforward_layernorm_2.weight", "post_ffw_norm_2.weight"},
    {GM_HF_END, NULL, NULL},
};

static const cJSON *text_cfg(const gm_source *src) {
    const cJSON *root = gm_source_hf_config(src);
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    return cJSON_IsObject(tc) ? tc : root;
}

static const char *cfg_file(const gm_source *src, char *buf, size_t n) {
    snprintf(buf, n, "%s/config.json", gm_source_hf_dir(src));
    return buf;
}

/* A non-negative integer field of o; absent or null -> def; def < 0: required. */
static gm_status j_int(const cJSON *o, const char *key, int64_t def, int *out, const char *file, gm_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (def < 0) return gm_fail(err, GM_ERR_NOT_FOUND, "%s: \"%s\" is missing", file, key);
        *out = (int)def;
        return GM_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > INT32_MAX || floor(v->valuedouble) != v->valuedouble)
        return gm_fail(err, GM_ERR_TYPE, "%s: \"%s\" is not a non-negative integer", file, key);
    *out = (int)v->valuedouble;
    return GM_OK;
}

/* A number field of o; absent or null -> def. */
static gm_status j_num(const cJSON *o, const char *key, double def, double *out, const char *file, gm_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) *out = def;
    else if (cJSON_IsNumber(v)) *out = v->valuedouble;
    else return gm_fail(err, GM_ERR_TYPE, "%s: \"%s\" is not a number", file, key);
    return GM_OK;
}

/* Whether layer il slides: layer_types, or HF's default (every 6th layer and the last are full). */
static gm_status sliding_at(const cJSON *cfg, int il, int L, bool *out, const char *file, gm_error *err) {
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(cfg, "layer_types");
    if (!lt || cJSON_IsNull(lt)) {
        *out = (il + 1) % 6 != 0 && il != L - 1;
        return GM_OK;
    }
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != L)
        return gm_fail(err, GM_ERR_FORMAT, "%s: \"layer_types\" must list %d layers", file, L);
    const cJSON *e = cJSON_GetArrayItem(lt, il);
    const bool sl = cJSON_IsString(e) && !strcmp(e->valuestring, "sliding_attention");
    if (!sl && !(cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention")))
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: layer_types[%d] is neither \"sliding_attention\" nor "
                       "\"full_attention\"", file, il);
    *out = sl;
    return GM_OK;
}

/* rope_parameters.<kind>: base and partial_rotary_factor (defaults: HF's, 1e4 / 1e6 and 1 / 0.25). */
static gm_status rope_of(const cJSON *cfg, bool sliding, double *base, double *factor, const char *file, gm_error *err) {
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(cfg, "rope_parameters");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(rp, sliding ? "sliding_attention" : "full_attention");
    gm_status st;
    if ((st = j_num(e, "rope_theta", sliding ? 10000.0 : 1000000.0, base, file, err)) ||
        (st = j_num(e, "partial_rotary_factor", sliding ? 1.0 : 0.25, factor, file, err)))
        return st;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "rope_type");
    if (type && !(cJSON_IsString(type) && (!strcmp(type->valuestring, "default") ||
                                           !strcmp(type->valuestring, "proportional"))))
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: rope_parameters.%s: only \"default\" and \"proportional\" RoPE are "
                       "supported", file, sliding ? "sliding_attention" : "full_attention");
    const char *kind = sliding ? "sliding_attention" : "full_attention";
    if (!(*factor > 0.0) || *factor > 1.0)
        return gm_fail(err, GM_ERR_FORMAT, "%s: rope_parameters.%s: partial_rotary_factor must be in (0, 1]", file, kind);
    char key[64];
    snprintf(key, sizeof key, "rope_parameters.%s.rope_theta", kind);
    return gm_config_number(file, key, (float)*base, GM_NUM_POSITIVE, err);
}

/* intermediate_size for layer il: a number or one per layer; doubled on shared layers by use_double_wide_mlp. */
static gm_status ff_of(const cJSON *cfg, int il, int L, int kv_start, int *out, const char *file, gm_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, "intermediate_size");
    gm_status st;
    if (cJSON_IsArray(v)) {
        if (cJSON_GetArraySize(v) != L)
            return gm_fail(err, GM_ERR_FORMAT, "%s: \"intermediate_size\" has %d entries for %d layers", file,
                           cJSON_GetArraySize(v), L);
        const cJSON *e = cJSON_GetArrayItem(v, il);
        if (!cJSON_IsNumber(e) || e->valuedouble < 1 || e->valuedouble > INT32_MAX || floor(e->valuedouble) != e->valuedouble)
            return gm_fail(err, GM_ERR_TYPE, "%s: \"intermediate_size\"[%d] is not a positive integer", file, il);
        *out = (int)e->valuedouble;
    } else if ((st = j_int(cfg, "intermediate_size", -1, out, file, err))) {
        return st;
    }
    const cJSON *dw = cJSON_GetObjectItemCaseSensitive(cfg, "use_double_wide_mlp");
    if (cJSON_IsTrue(dw) && il >= kv_start) *out *= 2;
    return GM_OK;
}

/* Layer il's facts without the KV source. */
static gm_status layer_own(const cJSON *cfg, const gm_config *c, int il, int shared, gm_layer_config *out,
                           const char *file, gm_error *err) {
    const int L = c->n_layers;
    bool sl = false;
    int hd_swa = 0, hd_full = 0, kv_swa = 0, kv_full = 0;
    double base = 0, factor = 0;
    gm_layer_config l = {.rope_scale = 1.0f, .kv_source = il};
    gm_status st;
    if ((st = sliding_at(cfg, il, L, &sl, file, err)) ||
        (st = j_int(cfg, "head_dim", c->n_heads > 0 ? c->d_model / c->n_heads : 0, &hd_swa, file, err)) ||
        (st = j_int(cfg, "global_head_dim", hd_swa, &hd_full, file, err)) ||
        (st = j_int(cfg, "num_attention_heads", -1, &l.n_heads, file, err)) ||
        (st = j_int(cfg, "num_key_value_heads", l.n_heads, &kv_swa, file, err)) ||
        (st = j_int(cfg, "num_global_key_value_heads", kv_swa, &kv_full, file, err)) ||
        (st = ff_of(cfg, il, L, L - shared, &l.d_ff, file, err)) || (st = rope_of(cfg, sl, &base, &factor, file, err)))
        return st;
    l.head_dim = sl ? hd_swa : hd_full;
    l.n_kv_heads = sl ? kv_swa : kv_full;
    l.window = sl ? c->sliding_window : 0;
    l.rope_base = (float)base;
    /* sliding layers rotate factor * head_dim dims; full layers span the head, unrotated pairs set at load */
    l.rope_dims = sl ? (int)(l.head_dim * factor) / 2 * 2 : l.head_dim;
    *out = l;
    return GM_OK;
}

static gm_status shared_of(const cJSON *cfg, int L, int *shared, const char *file, gm_error *err) {
    gm_status st = j_int(cfg, "num_kv_shared_layers", 0, shared, file, err);
    if (!st && *shared >= L)
        return gm_fail(err, GM_ERR_FORMAT, "%s: num_kv_shared_layers = %d with only %d layers", file, *shared, L);
    return st;
}

gm_status gm_4_layer_config_hf(const gm_source *src, const gm_config *c, int il, gm_layer_config *out, gm_error *err) {
    char file[4200];
    cfg_file(src, file, sizeof file);
    const cJSON *cfg = text_cfg(src);
    const int L = c->n_layers;
    int shared = 0;
    gm_status st;
    if ((st = shared_of(cfg, L, &shared, file, err)) || (st = layer_own(cfg, c, il, shared, out, file, err))) return st;
    const int kv_start = L - shared;
    if (il < kv_start) return GM_OK;
    for (int j = kv_start - 1; j >= 0; j--) { /* HF: the last non-shared layer of the same kind */
        bool sl = false;
        if ((st = sliding_at(cfg, j, L, &sl, file, err))) return st;
        if (sl != (out->window > 0)) continue;
        gm_layer_config s;
        if ((st = layer_own(cfg, c, j, shared, &s, file, err))) return st;
        if (s.n_kv_heads != out->n_kv_heads || s.head_dim != out->head_dim)
            return gm_fail(err, GM_ERR_FORMAT, "%s: layer %d shares the K/V of layer %d but has %d KV heads of %d "
                           "(layer %d: %d of %d)", file, il, j, out->n_kv_heads, out->head_dim, j, s.n_kv_heads,
                           s.head_dim);
        out->kv_source = j;
        return GM_OK;
    }
    return gm_fail(err, GM_ERR_FORMAT, "%s: layer %d shares K/V but no earlier non-shared layer is %s", file, il,
                   out->window ? "sliding" : "full");
}

gm_status gm_4_config_hf(const gm_source *src, gm_config *c, gm_error *err) {
    char file[4200];
    cfg_file(src, file, sizeof file);
    const cJSON *cfg = text_cfg(src);
    gm_status st;
    double eps = 0, cap = 0;
    int shared = 0;
    if ((st = j_int(cfg, "hidden_size", -1, &c->d_model, file, err)) ||
        (st = j_int(cfg, "num_hidden_layers", -1, &c->n_layers, file, err)) ||
        (st = j_int(cfg, "max_position_embeddings", 131072, &c->context_length, file, err)) ||
        (st = j_int(cfg, "sliding_window", 512, &c->sliding_window, file, err)) ||
        (st = j_num(cfg, "rms_norm_eps", 1e-6, &eps, file, err)) ||
        (st = j_num(cfg, "final_logit_softcapping", 0.0, &cap, file, err)))
        return st;
    const int L = c->n_layers;
    if ((st = gm_config_check_layer_count(file, L, err))) return st;
    if (c->sliding_window <= 0) return gm_fail(err, GM_ERR_FORMAT, "%s: \"sliding_window\" must be positive", file);
    c->norm_eps = (float)eps;
    c->final_softcap = (float)cap;
    if ((st = shared_of(cfg, L, &shared, file, err)) ||
        (st = gm_config_number(file, "rms_norm_eps", c->norm_eps, GM_NUM_POSITIVE, err)) ||
        (st = gm_config_number(file, "final_logit_softcapping", c->final_softcap, GM_NUM_NONNEG, err)))
        return st;
    /* nominal sizes: layer 0's (every layer's config is checked here, once, KV sources included) */
    for (int il = L - 1; il >= 0; il--) {
        gm_layer_config l;
        if ((st = gm_4_layer_config_hf(src, c, il, &l, err))) return st;
        c->n_heads = l.n_heads, c->n_kv_heads = l.n_kv_heads, c->d_ff = l.d_ff;
        if (l.window) c->rope_base_local = l.rope_base;
        else c->rope_base_global = l.rope_base, c->head_dim = l.head_dim;
    }
    if (c->head_dim == 0) { /* no full layer */
        gm_layer_config l;
        if ((st = gm_4_layer_config_hf(src, c, 0, &l, err))) return st;
        c->head_dim = l.head_dim;
    }
    if (c->rope_base_global == 0.0f) c->rope_base_global = 1000000.0f;
    if (c->rope_base_local == 0.0f) c->rope_base_local = 10000.0f;
    c->sliding_pattern = 0; /* per layer */
    c->rope_scale_global = 1.0f;
    c->attn_softcap = 0.0f;
    c->query_scale = 1.0f;
    c->norm_weights_plus_one = true; /* HF multiplies by the raw w as stored: nothing to add */
    c->has_v_norm = true;
    return GM_OK;
}

gm_status gm_4_hparams_hf(const gm_source *src, int *P, int *n_expert, int *n_used, int *ff_exp, gm_error *err) {
    char file[4200];
    cfg_file(src, file, sizeof file);
    const cJSON *cfg = text_cfg(src);
    gm_status st;
    *n_expert = *n_used = *ff_exp = 0;
    if ((st = j_int(cfg, "hidden_size_per_layer_input", 0, P, file, err))) return st;
    const cJSON *moe = cJSON_GetObjectItemCaseSensitive(cfg, "enable_moe_block");
    if (moe && !cJSON_IsTrue(moe)) return GM_OK;
    if ((st = j_int(cfg, "num_experts", 0, n_expert, file, err))) return st;
    if (*n_expert == 0) return GM_OK;
    if ((st = j_int(cfg, "top_k_experts", -1, n_used, file, err)) ||
        (st = j_int(cfg, "moe_intermediate_size", -1, ff_exp, file, err)))
        return st;
    if (*n_used < 1 || *n_used > *n_expert)
        return gm_fail(err, GM_ERR_FORMAT, "%s: top_k_experts = %d with %d experts", file, *n_used, *n_expert);
    return GM_OK;
}

int gm_4_rotated_pairs_hf(const gm_source *src, int head_dim) {
    double base, factor;
    char file[4200];
    if (rope_of(text_cfg(src), false, &base, &factor, cfg_file(src, file, sizeof file), NULL)) return head_dim / 2;
    return (int)(factor * head_dim / 2); /* HF: int(partial_rotary_factor * head_dim / 2) */
}
