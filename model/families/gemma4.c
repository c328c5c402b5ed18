/* model/families/gemma4.c — Gemma 4's keys, per-layer facts and extra tensors (see gemma4.h;
 * its forward steps: runtime/families/gemma4.c). */
#include "model/families/gemma4.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/limits.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "quant/quant.h"

/* The model's Gemma 4 weights (gm_model.family_weights, which gm_4_load made). */
static gm_4_weights *weights(const gm_model *m) { return m->family_weights; }

/* ------------------------------------------------------------------ keys */

/* The keys' prefix: the file's architecture, "gemma4" or "gemma4-assistant" (the MTP drafter writes Gemma 4's keys
 * under its own name). */
static const char *arch_of(const gguf_file *f) {
    gguf_str a;
    static const char assistant[] = "gemma4-assistant";
    if (gguf_get_str(f, "general.architecture", &a, NULL) == GM_OK && a.len == sizeof assistant - 1 &&
        !memcmp(a.ptr, assistant, sizeof assistant - 1))
        return assistant;
    return "gemma4";
}

static const gguf_kv *key_of(const gguf_file *f, const char *suffix, char *key, size_t n) {
    snprintf(key, n, "%s.%s", arch_of(f), suffix);
    return gguf_find(f, key);
}

/* gemma4.<suffix> as a non-negative number; def < 0: required. */
static gm_status key_int(const gguf_file *f, const char *suffix, int64_t def, int *out, gm_error *err) {
    char key[128];
    if (!key_of(f, suffix, key, sizeof key)) {
        if (def < 0) return gm_fail(err, GM_ERR_NOT_FOUND, "%s: metadata key '%s' is missing", f->path, key);
        *out = (int)def;
        return GM_OK;
    }
    int32_t v;
    gm_status st = gguf_get_i32(f, key, &v, err);
    if (st) return st;
    if (v < 0) return gm_fail(err, GM_ERR_FORMAT, "%s: metadata key '%s' is negative (%d)", f->path, key, (int)v);
    *out = v;
    return GM_OK;
}

/* gemma4.<suffix> as a float that obeys rule; absent -> def (unchecked: a required key's sentinel). */
static gm_status key_float(const gguf_file *f, const char *suffix, float def, gm_num_rule rule, float *out,
                           gm_error *err) {
    char key[128];
    if (!key_of(f, suffix, key, sizeof key)) {
        *out = def;
        return GM_OK;
    }
    gm_status st = gguf_get_f32(f, key, out, err);
    return st ? st : gm_config_number(f->path, key, *out, rule, err);
}

/* gemma4.<suffix> for layer il: one number for every layer, or an array of exactly n_layers integers (as
 * llama.cpp's get_key_or_arr). def < 0: required. */
static gm_status layer_int(const gguf_file *f, const char *suffix, int il, int n_layers, int64_t def, int *out,
                           gm_error *err) {
    char key[128];
    const gguf_kv *kv = key_of(f, suffix, key, sizeof key);
    if (!kv || kv->val.type != GGUF_VT_ARRAY) return key_int(f, suffix, def, out, err);
    if (kv->val.v.arr.n != (uint64_t)n_layers)
        return gm_fail(err, GM_ERR_FORMAT, "%s: %s has %llu entries for %d layers", f->path, key,
                       (unsigned long long)kv->val.v.arr.n, n_layers);
    gguf_arr_iter it;
    gguf_value v;
    gguf_arr_iter_init(&it, &kv->val);
    for (int i = 0; gguf_arr_iter_next(&it, &v); i++) {
        if (i != il) continue;
        const bool is_int = v.type == GGUF_VT_I32 || v.type == GGUF_VT_I64 || v.type == GGUF_VT_I16 || v.type == GGUF_VT_I8;
        const bool is_uint = v.type == GGUF_VT_U32 || v.type == GGUF_VT_U64 || v.type == GGUF_VT_U16 || v.type == GGUF_VT_U8;
        const int64_t x = is_int ? v.v.i : (int64_t)v.v.u;
        if ((!is_int && !is_uint) || x < 0 || x > INT32_MAX)
            return gm_fail(err, GM_ERR_FORMAT, "%s: %s[%d] is not a non-negative integer", f->path, key, i);
        *out = (int)x;
        return GM_OK;
    }
    return gm_fail(err, GM_ERR_FORMAT, "%s: %s is unreadable", f->path, key);
}

/* Whether layer il slides: the required array attention.sliding_window_pattern, one bool (or int32 / uint32, as
 * llama.cpp's get_arr reads it) per layer. */
static gm_status sliding_at(const gguf_file *f, int il, int n_layers, bool *out, gm_error *err) {
    char key[128];
    if (!key_of(f, "attention.sliding_window_pattern", key, sizeof key))
        return gm_fail(err, GM_ERR_NOT_FOUND, "%s: metadata key '%s' (a bool per layer) is missing", f->path, key);
    return gm_config_gguf_layer_flag(f, key, n_layers, il, out, err);
}

/* The head sizes of full and sliding layers (key and value lengths must agree, as llama.cpp requires). */
static gm_status head_dims(const gguf_file *f, const gm_config *c, int *full, int *swa, gm_error *err) {
    int vl = 0, vls = 0;
    gm_status st;
    if ((st = key_int(f, "attention.key_length", c->n_heads > 0 ? c->d_model / c->n_heads : 0, full, err)) ||
        (st = key_int(f, "attention.value_length", *full, &vl, err)) ||
        (st = key_int(f, "attention.key_length_swa", -1, swa, err)) ||
        (st = key_int(f, "attention.value_length_swa", -1, &vls, err)))
        return st;
    if (*full != vl || *swa != vls)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: Gemma 4 needs equal key and value lengths (full %d/%d, sliding %d/%d)",
                       f->path, *full, vl, *swa, vls);
    return GM_OK;
}

static gm_status layer_config_gguf(const gguf_file *f, const gm_config *c, int il, gm_layer_config *out, gm_error *err) {
    const int L = c->n_layers;
    bool sliding = false;
    int hd_full = 0, hd_swa = 0, rot_full = 0, rot_swa = 0, shared = 0;
    gm_status st;
    if ((st = sliding_at(f, il, L, &sliding, err)) || (st = head_dims(f, c, &hd_full, &hd_swa, err)) ||
        (st = key_int(f, "rope.dimension_count", hd_full, &rot_full, err)) ||
        (st = key_int(f, "rope.dimension_count_swa", rot_full, &rot_swa, err)) ||
        (st = key_int(f, "attention.shared_kv_layers", 0, &shared, err)))
        return st;
    gm_layer_config l = {.head_dim = sliding ? hd_swa : hd_full, .window = sliding ? c->sliding_window : 0,
                         .rope_base = sliding ? c->rope_base_local : c->rope_base_global, .rope_scale = 1.0f,
                         .rope_dims = sliding ? rot_swa : rot_full, .kv_source = il};
    if ((st = layer_int(f, "attention.head_count", il, L, -1, &l.n_heads, err)) ||
        (st = layer_int(f, "attention.head_count_kv", il, L, l.n_heads, &l.n_kv_heads, err)) ||
        (st = layer_int(f, "feed_forward_length", il, L, -1, &l.d_ff, err)))
        return st;
    const int kv_start = L - shared;
    if (shared > 0 && il >= kv_start && !c->family->rules.q_only)
        l.kv_source = kv_start - (sliding ? 2 : 1); /* llama.cpp's rule */
    *out = l;
    return GM_OK;
}

gm_status gm_4_layer_config(const gm_source *src, const gm_config *c, int il, gm_layer_config *out, gm_error *err) {
    if (!gm_source_is_gguf(src)) return gm_4_layer_config_hf(src, c, il, out, err);
    return layer_config_gguf(gm_source_gguf(src), c, il, out, err);
}

/* KV sharing must point at a layer that computes K/V of the consumer's kind and shape. */
static gm_status check_sharing(const gguf_file *f, const gm_config *c, int shared, gm_error *err) {
    const int L = c->n_layers, kv_start = L - shared;
    if (shared == 0) return GM_OK;
    if (kv_start < 2)
        return gm_fail(err, GM_ERR_FORMAT,
                       "%s: gemma4.attention.shared_kv_layers = %d with %d layers: the shared layers read layers %d "
                       "and %d, which do not exist", f->path, shared, L, kv_start - 2, kv_start - 1);
    gm_layer_config a, b;
    gm_status st;
    if ((st = layer_config_gguf(f, c, kv_start - 2, &a, err)) || (st = layer_config_gguf(f, c, kv_start - 1, &b, err)))
        return st;
    if (!a.window || b.window)
        return gm_fail(err, GM_ERR_FORMAT,
                       "%s: KV sharing from layer %d: sliding consumers read layer %d and full ones layer %d, so "
                       "layer %d must slide and layer %d must be full (they are %s and %s)", f->path, kv_start,
                       kv_start - 2, kv_start - 1, kv_start - 2, kv_start - 1, a.window ? "sliding" : "full",
                       b.window ? "sliding" : "full");
    for (int il = kv_start; il < L; il++) {
        gm_layer_config l, s;
        if ((st = layer_config_gguf(f, c, il, &l, err)) || (st = layer_config_gguf(f, c, l.kv_source, &s, err)))
            return st;
        if (l.n_kv_heads != s.n_kv_heads || l.head_dim != s.head_dim)
            return gm_fail(err, GM_ERR_FORMAT,
                           "%s: layer %d shares the K/V of layer %d but has %d KV heads of %d (layer %d: %d of %d)",
                           f->path, il, l.kv_source, l.n_kv_heads, l.head_dim, l.kv_source, s.n_kv_heads, s.head_dim);
    }
    return GM_OK;
}

gm_status gm_4_config_gguf(const gguf_file *f, gm_config *c, gm_error *err) {
    gm_status st;
    int window = 0, P = 0, shared = 0, experts = 0, hd_full = 0, hd_swa = 0;
    if ((st = key_int(f, "embedding_length", -1, &c->d_model, err)) ||
        (st = key_int(f, "block_count", -1, &c->n_layers, err)) ||
        (st = key_int(f, "context_length", 8192, &c->context_length, err)))
        return st;
    const int L = c->n_layers;
    if ((st = gm_config_check_layer_count(f->path, L, err))) return st;
    /* nominal sizes: layer 0's; every per-layer array is read (its length checked) here, once */
    for (int il = L - 1; il >= 0; il--) {
        bool sl;
        if ((st = layer_int(f, "attention.head_count", il, L, -1, &c->n_heads, err)) ||
            (st = layer_int(f, "attention.head_count_kv", il, L, c->n_heads, &c->n_kv_heads, err)) ||
            (st = layer_int(f, "feed_forward_length", il, L, -1, &c->d_ff, err)) || (st = sliding_at(f, il, L, &sl, err)))
            return st;
    }
    if ((st = head_dims(f, c, &hd_full, &hd_swa, err)) || (st = key_int(f, "attention.sliding_window", -1, &window, err)) ||
        (st = key_float(f, "attention.layer_norm_rms_epsilon", -1.0f, GM_NUM_POSITIVE, &c->norm_eps, err)) ||
        (st = key_float(f, "rope.freq_base", 10000.0f, GM_NUM_POSITIVE, &c->rope_base_global, err)) ||
        (st = key_float(f, "rope.freq_base_swa", 10000.0f, GM_NUM_POSITIVE, &c->rope_base_local, err)) ||
        (st = key_float(f, "final_logit_softcapping", 30.0f, GM_NUM_NONNEG, &c->final_softcap, err)) ||
        (st = key_int(f, "attention.shared_kv_layers", 0, &shared, err)) ||
        (st = key_int(f, "embedding_length_per_layer_input", c->family->rules.q_only ? 0 : -1, &P, err)) ||
        (st = key_int(f, "expert_count", 0, &experts, err)))
        return st;
    if (c->norm_eps <= 0.0f)
        return gm_fail(err, GM_ERR_NOT_FOUND, "%s: metadata key 'gemma4.attention.layer_norm_rms_epsilon' is missing or "
                       "not positive", f->path);
    if (window <= 0) return gm_fail(err, GM_ERR_FORMAT, "%s: gemma4.attention.sliding_window must be positive", f->path);
    if (experts > 0) { /* the expert keys must agree with each other; the tensors are checked at load */
        int used = 0, fe = 0;
        if (experts > GM_4_MAX_EXPERTS)
            return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: %d experts (at most %d are supported)", f->path, experts,
                           GM_4_MAX_EXPERTS);
        if ((st = key_int(f, "expert_used_count", -1, &used, err))) return st;
        if (used < 1 || used > experts)
            return gm_fail(err, GM_ERR_FORMAT, "%s: gemma4.expert_used_count = %d with %d experts", f->path, used, experts);
        for (int il = 0; il < L; il++)
            if ((st = layer_int(f, "expert_feed_forward_length", il, L, -1, &fe, err))) return st;
    }
    const bool drafter = c->family->rules.q_only;
    if (drafter) { /* every layer reads the target's cache: shared_kv_layers (= block_count) is not used */
        int layers_nextn = 0;
        if ((st = key_int(f, "embedding_length_out", -1, &c->d_backbone, err)) ||
            (st = key_int(f, "nextn_predict_layers", -1, &layers_nextn, err)))
            return st;
        if (c->d_backbone <= 0 || c->d_backbone == c->d_model || c->d_backbone > GM_MAX_D_MODEL)
            return gm_fail(err, GM_ERR_FORMAT, "%s: %s.embedding_length_out = %d: a drafter reads a target's hidden "
                           "states of another width than its own %d (at most %d)", f->path, arch_of(f), c->d_backbone,
                           c->d_model, GM_MAX_D_MODEL);
        if (layers_nextn != L)
            return gm_fail(err, GM_ERR_FORMAT, "%s: %s.nextn_predict_layers = %d, block_count = %d: every layer of a "
                           "Gemma 4 assistant is a draft layer", f->path, arch_of(f), layers_nextn, L);
        if (experts > 0 || P > 0)
            return gm_fail(err, GM_ERR_FORMAT, "%s: a Gemma 4 assistant has no experts or per-layer inputs", f->path);
        c->is_drafter = true;
        shared = 0;
    } else if (shared >= L) {
        return gm_fail(err, GM_ERR_FORMAT, "%s: gemma4.attention.shared_kv_layers = %d with only %d layers", f->path,
                       shared, L);
    }
    c->head_dim = hd_full;
    c->sliding_window = window;
    c->sliding_pattern = 0; /* per layer: gm_4_layer_config */
    c->rope_scale_global = 1.0f;
    c->attn_softcap = 0.0f;
    c->query_scale = 1.0f;
    c->norm_weights_plus_one = true; /* the file holds the raw w, which Gemma 4 multiplies by: use it as stored */
    c->has_v_norm = true;
    if (c->final_softcap < 0.0f) return gm_fail(err, GM_ERR_FORMAT, "%s: negative final_logit_softcapping", f->path);
    if (drafter) c->final_softcap = 0.0f; /* llama.cpp reads no soft-cap for the assistant, even when the key is there */
    return check_sharing(f, c, shared, err);
}

/* ------------------------------------------------------------------ tensors */

gm_status gm_4_rope_factors(const gm_model *m, float *inv_freq, int n, gm_error *err) {
    const char *path = gm_source_path(m->src);
    if (!gm_source_is_gguf(m->src)) { /* HF: the pairs past partial_rotary_factor do not rotate (angle 0) */
        for (int i = gm_4_rotated_pairs_hf(m->src, 2 * n); i < n; i++) inv_freq[i] = 0.0f;
        return GM_OK;
    }
    const gm_tensor *t = gm_source_tensor(m->src, "rope_freqs.weight");
    if (!t) return gm_fail(err, GM_ERR_NOT_FOUND, "%s: tensor rope_freqs.weight (full layers' RoPE) is missing", path);
    const gm_type_traits *tr = gm_type_traits_of(t->type);
    if (t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1 || t->ne[0] < n || !tr || !tr->dequant_row ||
        t->nbytes < gm_row_bytes(t->type, t->ne[0]))
        return gm_fail(err, GM_ERR_FORMAT, "%s: rope_freqs.weight must be a vector of at least %d factors", path, n);
    float *fac = malloc((size_t)t->ne[0] * sizeof *fac);
    if (!fac) return gm_fail(err, GM_ERR_NOMEM, "model: out of memory");
    tr->dequant_row(t->data, fac, t->ne[0]);
    for (int i = 0; i < n; i++) {
        if (!(fac[i] > 0.0f) || isinf(fac[i]) || isnan(fac[i])) {
            free(fac);
            return gm_fail(err, GM_ERR_FORMAT, "%s: rope_freqs.weight[%d] is not a positive number", path, i);
        }
        inv_freq[i] /= fac[i]; /* ggml divides the angle by the factor: 1e30 leaves the pair unrotated */
    }
    free(fac);
    return GM_OK;
}

static gm_status out_scale(gm_model *m, int il, float *out, gm_error *err) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.layer_output_scale.weight", il);
    const gm_tensor *t = gm_source_tensor(m->src, name);
    *out = 1.0f;
    if (!t) return GM_OK;
    const gm_type_traits *tr = gm_type_traits_of(t->type);
    if (t->ne[0] != 1 || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1 || !tr || !tr->dequant_row ||
        t->nbytes < gm_row_bytes(t->type, 1))
        return gm_fail(err, GM_ERR_FORMAT, "%s: %s must hold one number", gm_source_path(m->src), name);
    tr->dequant_row(t->data, out, 1);
    if (!isfinite(*out)) return gm_fail(err, GM_ERR_FORMAT, "%s: %s is not finite", gm_source_path(m->src), name);
    return GM_OK;
}

void gm_4_layer_extras_of(const gm_source *src, const gm_layer_config *l, int il, gm_layer_extras *out) {
    *out = (gm_layer_extras){.rotated_pairs = -1, .out_scale = 1.0f};
    char name[96];
    snprintf(name, sizeof name, "blk.%d.attn_v.weight", il);
    out->reads_target = gm_source_is_gguf(src) && !strcmp(arch_of(gm_source_gguf(src)), "gemma4-assistant");
    out->v_from_k = l->kv_source == il && !out->reads_target && !gm_source_tensor(src, name);
    snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", il);
    const gm_tensor *t = gm_source_tensor(src, name);
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", il);
    if (t && gm_source_tensor(src, name)) { /* experts and width from the tensor, top-k from the metadata */
        out->n_expert = (int)t->ne[2], out->ff_exp = (int)t->ne[0];
        int P, E, fe;
        if (gm_source_is_gguf(src)) key_int(gm_source_gguf(src), "expert_used_count", 0, &out->n_expert_used, NULL);
        else gm_4_hparams_hf(src, &P, &E, &out->n_expert_used, &fe, NULL);
    }
    snprintf(name, sizeof name, "blk.%d.layer_output_scale.weight", il);
    t = gm_source_tensor(src, name);
    if (t && t->type == GM_TYPE_F32 && t->nbytes >= sizeof(float)) memcpy(&out->out_scale, t->data, sizeof(float));
    if (!l->window && !gm_source_is_gguf(src)) {
        out->rotated_pairs = gm_4_rotated_pairs_hf(src, l->rope_dims);
        return;
    }
    t = gm_source_tensor(src, "rope_freqs.weight");
    if (l->window || !t || t->type != GM_TYPE_F32 || t->nbytes < (uint64_t)(l->rope_dims / 2) * sizeof(float)) return;
    out->rotated_pairs = 0;
    for (int i = 0; i < l->rope_dims / 2; i++) {
        float f;
        memcpy(&f, (const char *)t->data + (size_t)i * sizeof f, sizeof f);
        out->rotated_pairs += f < 1e20f;
    }
}

/* Expert e's rows [r0, r0 + rows) of a 3-D tensor {cols, rows_total, E} as a matrix view. */
static gm_status expert_slices(gm_model *m, const char *name, int64_t cols, int64_t rows_total, int E, int64_t r0,
                               int64_t rows, gm_matrix *out, gm_error *err) {
    const char *path = gm_source_path(m->src);
    const gm_tensor *t = gm_source_tensor(m->src, name);
    if (!t) return gm_fail(err, GM_ERR_NOT_FOUND, "%s: tensor %s is missing", path, name);
    if (t->ne[0] != cols || t->ne[1] != rows_total || t->ne[2] != E || t->ne[3] != 1)
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %d] "
                       "(the experts' shapes disagree with the keys or each other)", path, name, (long long)t->ne[0],
                       (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], (long long)cols,
                       (long long)rows_total, E);
    const size_t rb = gm_row_bytes(t->type, cols);
    if (rb == 0 || !gm_type_traits_of(t->type))
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: tensor %s: type %d is not supported", path, name, t->type);
    if (t->nbytes < (uint64_t)rb * (uint64_t)rows_total * (uint64_t)E)
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor %s is truncated", path, name);
    for (int e = 0; e < E; e++) /* no id: the backends run a slice as it is */
        out[e] = (gm_matrix){.type = t->type, .rows = rows, .cols = cols,
                             .data = (const char *)t->data + ((size_t)e * (size_t)rows_total + (size_t)r0) * rb};
    return GM_OK;
}

/* A vector of n f32-convertible values into dst (no +1: these are scales, not Gemma norms). */
static gm_status load_vector(gm_model *m, const char *name, int n, float *dst, gm_error *err) {
    const char *path = gm_source_path(m->src);
    const gm_tensor *t = gm_source_tensor(m->src, name);
    if (!t) return gm_fail(err, GM_ERR_NOT_FOUND, "%s: tensor %s is missing", path, name);
    const gm_type_traits *tr = gm_type_traits_of(t->type);
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1 || !tr || !tr->dequant_row ||
        t->nbytes < gm_row_bytes(t->type, n))
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor %s must be a vector of %d numbers", path, name, n);
    tr->dequant_row(t->data, dst, n);
    for (int i = 0; i < n; i++)
        if (!isfinite(dst[i])) return gm_fail(err, GM_ERR_FORMAT, "%s: tensor %s holds a non-finite value", path, name);
    return GM_OK;
}

/* Layer il's experts, when it has a router (ffn_gate_inp). */
static gm_status load_moe(gm_model *m, int il, float **store, gm_error *err) {
    gm_4_weights *w = weights(m);
    gm_4_layer *l = &w->layers[il];
    const char *path = gm_source_path(m->src);
    const int64_t d = m->cfg.d_model;
    const int E = w->n_expert;
    char name[96];
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", il);
    if (!gm_source_tensor(m->src, name)) return GM_OK;
    if (E <= 0)
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor %s makes layer %d a mixture of experts, but "
                       "gemma4.expert_count is missing or 0", path, name, il);
    gm_status st = GM_OK;
    if (gm_source_is_gguf(m->src))
        st = layer_int(gm_source_gguf(m->src), "expert_feed_forward_length", il, m->cfg.n_layers, -1, &l->n_ff_exp, err);
    else
        l->n_ff_exp = w->n_ff_exp_hf;
    if (st) return st;
    const int64_t F = l->n_ff_exp;
    if (F <= 0) return gm_fail(err, GM_ERR_FORMAT, "%s: layer %d: expert_feed_forward_length is 0", path, il);
    l->moe = true;
    if ((st = gm_model_load_matrix(m, name, d, E, &l->router, err))) return st;
    float *v = *store;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.scale", il);
    if ((st = load_vector(m, name, (int)d, v, err))) return st;
    l->router_scale = v, v += d;
    static const char *const norms[3] = {"pre_ffw_norm_2", "post_ffw_norm_1", "post_ffw_norm_2"};
    const float **dst[3] = {&l->pre_norm2, &l->post_norm1, &l->post_norm2};
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "blk.%d.%s.weight", il, norms[k]);
        if ((st = gm_model_load_norm(m, name, (int)d, true, v, dst[k], err))) return st;
        v += d;
    }
    snprintf(name, sizeof name, "blk.%d.ffn_down_exps.scale", il);
    if (gm_source_tensor(m->src, name)) {
        if ((st = load_vector(m, name, E, v, err))) return st;
        l->expert_scale = v, v += E;
    }
    *store = v;
    gm_matrix *views = w->expert_views + (size_t)il * 3 * (size_t)E;
    l->gate_e = views, l->up_e = views + E, l->down_e = views + 2 * E;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_up_exps.weight", il);
    if (gm_source_tensor(m->src, name)) { /* fused: gate rows first, then up */
        if ((st = expert_slices(m, name, d, 2 * F, E, 0, F, l->gate_e, err)) ||
            (st = expert_slices(m, name, d, 2 * F, E, F, F, l->up_e, err)))
            return st;
    } else {
        snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", il);
        if ((st = expert_slices(m, name, d, F, E, 0, F, l->gate_e, err))) return st;
        snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", il);
        if ((st = expert_slices(m, name, d, F, E, 0, F, l->up_e, err))) return st;
    }
    snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", il);
    return expert_slices(m, name, F, d, E, 0, d, l->down_e, err);
}

gm_status gm_4_load(gm_model *m, gm_error *err) {
    const gm_config *c = &m->cfg;
    const char *path = gm_source_path(m->src);
    const int L = c->n_layers;
    const int64_t d = c->d_model;
    char name[96];
    for (int il = 0; il < L; il++) { /* what this engine does not run yet, refused by name */
        snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", il);
        if (gm_source_tensor(m->src, name))
            return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: tensor %s: Gemma 4 fused-QKV layers are not supported yet", path,
                           name);
    }
    gm_4_weights *w = calloc(1, sizeof *w);
    m->family_weights = w;
    if (!w) return gm_fail(err, GM_ERR_NOMEM, "model: out of memory");
    const gguf_file *f = gm_source_gguf(m->src);
    gm_status st;
    if (!f) {
        if ((st = gm_4_hparams_hf(m->src, &w->P, &w->n_expert, &w->n_expert_used, &w->n_ff_exp_hf, err))) return st;
    } else if ((st = key_int(f, "embedding_length_per_layer_input", 0, &w->P, err)) ||
               (st = key_int(f, "expert_count", 0, &w->n_expert, err)) ||
               (st = key_int(f, "expert_used_count", 0, &w->n_expert_used, err))) {
        return st;
    }
    if (w->n_expert > GM_4_MAX_EXPERTS)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: %d experts (at most %d are supported)", path, w->n_expert,
                       GM_4_MAX_EXPERTS);
    const int P = w->P, E = w->n_expert;
    w->layers = calloc((size_t)L, sizeof *w->layers);
    /* per layer: the PLE norm, 4 MoE vectors of d and the expert scales; then the PLE input norm */
    w->store = malloc(((size_t)L * (5 * (size_t)d + (size_t)E) + (size_t)P + 1) * sizeof(float));
    if (E > 0) w->expert_views = calloc((size_t)L * 3 * (size_t)E, sizeof *w->expert_views);
    if (E > 0 && !w->expert_views) return gm_fail(err, GM_ERR_NOMEM, "model: out of memory for Gemma 4 weights");
    if (!w->layers || !w->store) return gm_fail(err, GM_ERR_NOMEM, "model: out of memory for Gemma 4 weights");
    float *store = w->store;
    if (P > 0) {
        const int64_t PL = (int64_t)P * L;
        if ((st = gm_model_load_matrix(m, "per_layer_token_embd.weight", PL, c->n_vocab, &w->ple_tok, err)) ||
            (st = gm_model_load_matrix(m, "per_layer_model_proj.weight", d, PL, &w->ple_proj, err)) ||
            (st = gm_model_load_norm(m, "per_layer_proj_norm.weight", P, true, store, &w->ple_norm, err)))
            return st;
        store += P;
    }
    for (int il = 0; il < L; il++) {
        gm_4_layer *l = &w->layers[il];
        if ((st = out_scale(m, il, &l->out_scale, err))) return st;
        if ((st = load_moe(m, il, &store, err))) return st;
        if (P == 0) continue;
        snprintf(name, sizeof name, "blk.%d.inp_gate.weight", il);
        if ((st = gm_model_load_matrix(m, name, d, P, &l->inp_gate, err))) return st;
        snprintf(name, sizeof name, "blk.%d.proj.weight", il);
        if ((st = gm_model_load_matrix(m, name, P, d, &l->proj, err))) return st;
        snprintf(name, sizeof name, "blk.%d.post_norm.weight", il);
        if ((st = gm_model_load_norm(m, name, (int)d, true, store, &l->post_norm, err))) return st;
        store += d;
    }
    return GM_OK;
}

/* The Gemma 4 assistant's weights beyond its layers (gm_4a_weights): the two projections and each layer's output
 * scale, which every assistant layer has (llama.cpp requires it). */
gm_status gm_4a_load(gm_model *m, gm_error *err) {
    const gm_config *c = &m->cfg;
    const char *path = gm_source_path(m->src);
    const int64_t d = c->d_model, bb = c->d_backbone;
    gm_4a_weights *w = calloc(1, sizeof *w);
    m->family_weights = w;
    if (!w || !(w->out_scale = malloc((size_t)c->n_layers * sizeof *w->out_scale)))
        return gm_fail(err, GM_ERR_NOMEM, "model: out of memory for the assistant's weights");
    gm_status st;
    if ((st = gm_model_load_matrix(m, "nextn.pre_projection.weight", 2 * bb, d, &w->pre_proj, err)) ||
        (st = gm_model_load_matrix(m, "nextn.post_projection.weight", d, bb, &w->post_proj, err)))
        return st;
    char name[96];
    for (int il = 0; il < c->n_layers; il++) {
        snprintf(name, sizeof name, "blk.%d.layer_output_scale.weight", il);
        if (!gm_source_tensor(m->src, name))
            return gm_fail(err, GM_ERR_NOT_FOUND, "%s: tensor %s is missing (every assistant layer has one)", path, name);
        if ((st = out_scale(m, il, &w->out_scale[il], err))) return st;
    }
    return GM_OK;
}

void gm_4a_free(gm_4a_weights *w) {
    if (!w) return;
    free(w->out_scale);
    free(w);
}

void gm_4_free(gm_4_weights *w) {
    if (!w) return;
    free(w->expert_views);
    free(w->layers);
    free(w->store);
    free(w);
}
