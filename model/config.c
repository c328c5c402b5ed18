/* model/config.c — gm_config from GGUF metadata or config.json, by the rules of the file's family, and the one
 * validator of the numbers (against core/limits.h).
 *
 * The family is looked up once by the file's architecture (model/family.h; the rows are in
 * model/families/registry.c); the readers follow its rules (facts the files do not carry):
 *   gemma  (1): no post norms, no q/k norms, query scale 1/sqrt(head_dim), no soft-caps,
 *               every layer global.
 *   gemma2 (2): post-attention and post-FFN norms; attention soft-cap (GGUF default 50) and
 *               final soft-cap (default 30); sliding window on even layers (pattern 2, window
 *               default 4096).
 *   gemma3 (3): adds q/k norms; no attention soft-cap; final soft-cap only when the file gives a
 *               nonzero value; pattern 6 (layers 5, 11, ... global); sliding layers use RoPE base
 *               10000 unscaled, global layers the file's freq_base with its linear scaling.
 * Gemma 3n and 4 read their own keys through the row's hooks.
 * Query scale: HF config.json gives query_pre_attn_scalar (scale = scalar^-0.5). GGUF files do not
 * carry it; llama.cpp uses 1/sqrt(key_length), except for the 27B models (gemma2 with 46 layers,
 * gemma3 with 62) where it uses 1/sqrt(d_model / n_heads); we follow it for GGUF files.
 * Embedding scale: sqrtf(d_model) unrounded, llama.cpp's convention (HF rounds it to bf16:
 * sqrt(640) = 25.298 vs 25.25); parity tests against HF must allow for that.
 * Norm weights: llama.cpp's converter stores 1 + w in Gemma 1/2/3 GGUFs; HF stores w.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/family.h"
#include "core/limits.h"
#include "model/source.h"

enum { MAX_MISSING_LISTED = 6 };

/* The family's row goes into c (arch, generation, family). */
static void set_family(gm_config *c, const gm_family *fam) {
    c->family = fam;
    c->generation = fam->generation;
    snprintf(c->arch, sizeof c->arch, "%s", fam->arch);
}

/* ------------------------------------------------------------------ GGUF */

typedef struct gguf_ctx {
    const gguf_file *f;
    const char *arch;
    gm_error *err;
} gguf_ctx;

/* <arch>.<suffix> as an int; def < 0 means required. */
static gm_status g_int(const gguf_ctx *c, const char *suffix, int64_t def, int *out) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", c->arch, suffix);
    if (!gguf_find(c->f, key)) {
        if (def < 0) return gm_fail(c->err, GM_ERR_NOT_FOUND, "%s: metadata key '%s' is missing", c->f->path, key);
        *out = (int)def;
        return GM_OK;
    }
    int32_t v;
    gm_status st = gguf_get_i32(c->f, key, &v, c->err);
    if (st) return st;
    if (v < 0) return gm_fail(c->err, GM_ERR_FORMAT, "%s: metadata key '%s' is negative (%d)", c->f->path, key, v);
    *out = v;
    return GM_OK;
}

gm_status gm_config_number(const char *file, const char *key, float v, gm_num_rule rule, gm_error *err) {
    if (!isfinite(v)) return gm_fail(err, GM_ERR_FORMAT, "%s: '%s' is %g, not a finite number", file, key, (double)v);
    if (rule == GM_NUM_POSITIVE && !(v > 0.0f))
        return gm_fail(err, GM_ERR_FORMAT, "%s: '%s' is %g, it must be positive", file, key, (double)v);
    if (rule == GM_NUM_NONNEG && !(v >= 0.0f))
        return gm_fail(err, GM_ERR_FORMAT, "%s: '%s' is %g, it must be >= 0", file, key, (double)v);
    return GM_OK;
}

/* <arch>.<suffix> as a float that obeys rule; absent -> def. */
static gm_status g_float(const gguf_ctx *c, const char *suffix, float def, gm_num_rule rule, float *out) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", c->arch, suffix);
    if (!gguf_find(c->f, key)) {
        *out = def;
        return GM_OK;
    }
    gm_status st = gguf_get_f32(c->f, key, out, c->err);
    return st ? st : gm_config_number(c->f->path, key, *out, rule, c->err);
}

/* ---- the layer pattern: which layers slide */

/* Whether entry il of a per-layer pattern array is nonzero, i.e. the layer slides (llama.cpp's is_swa_impl[il]);
 * byte by byte, so that bool (1 byte) and int32 / uint32 entries (4) read alike on any host. */
static bool entry_nonzero(const gguf_value *arr, int il) {
    const size_t size = gguf_vtype_size(arr->v.arr.elem);
    const uint8_t *p = arr->v.arr.data + (size_t)il * size;
    for (size_t k = 0; k < size; k++)
        if (p[k]) return true;
    return false;
}

/* The period p of a per-layer array that repeats one (layer il full iff (il + 1) % p == 0; n_layers + 1 when no
 * layer is full), else 0. */
static int array_period(const gguf_value *arr, int n_layers) {
    int p = n_layers + 1;
    for (int il = 0; il < n_layers; il++)
        if (!entry_nonzero(arr, il)) {
            p = il + 1;
            break;
        }
    for (int il = 0; il < n_layers; il++)
        if (entry_nonzero(arr, il) != ((il + 1) % p != 0)) return 0;
    return p;
}

static bool pattern_elem(int elem) { return elem == GGUF_VT_BOOL || elem == GGUF_VT_I32 || elem == GGUF_VT_U32; }

/* A per-layer flag array's element type and length, as llama.cpp's get_arr takes them (it also takes a shorter
 * array, the rest 0, and ignores extra entries: we refuse both). */
static gm_status check_flags(const gguf_file *f, const char *key, const gguf_value *arr, int n_layers, gm_error *err) {
    if (!pattern_elem(arr->v.arr.elem))
        return gm_fail(err, GM_ERR_TYPE, "%s: %s is an array of %s; a layer pattern is one bool (or int32 / uint32) "
                       "per layer", f->path, key, gguf_vtype_name(arr->v.arr.elem));
    if (arr->v.arr.n != (uint64_t)n_layers)
        return gm_fail(err, GM_ERR_FORMAT, "%s: %s has %llu entries for %d layers", f->path, key,
                       (unsigned long long)arr->v.arr.n, n_layers);
    return GM_OK;
}

gm_status gm_config_gguf_layer_flag(const gguf_file *f, const char *key, int n_layers, int il, bool *out,
                                    gm_error *err) {
    const gguf_value *arr;
    gm_status st = gguf_get_arr(f, key, -1, &arr, err);
    if (st || (st = check_flags(f, key, arr, n_layers, err))) return st;
    *out = il >= 0 && il < n_layers && entry_nonzero(arr, il);
    return GM_OK;
}

gm_status gm_config_gguf_pattern(const gguf_file *f, gm_config *c, int def, gm_error *err) {
    char key[160];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", c->arch);
    const gguf_kv *kv = gguf_find(f, key);
    int n = def;
    if (kv && kv->val.type == GGUF_VT_ARRAY) {
        gm_status st = check_flags(f, key, &kv->val, c->n_layers, err);
        if (!st) c->sliding_pattern = array_period(&kv->val, c->n_layers);
        return st;
    }
    if (kv) {
        int32_t v;
        gm_status st = gguf_get_i32(f, key, &v, err);
        if (st) return st;
        if (v < 0) return gm_fail(err, GM_ERR_FORMAT, "%s: metadata key '%s' is negative (%d)", f->path, key, (int)v);
        n = v;
    }
    c->sliding_pattern = n == 0 ? c->n_layers + 1 : n; /* 0: every layer slides, i.e. none is full */
    return GM_OK;
}

bool gm_config_gguf_slides(const gguf_file *f, const gm_config *c, int il) {
    if (c->sliding_window <= 0 || il < 0 || il >= c->n_layers) return false;
    if (c->sliding_pattern > 0) return (il + 1) % c->sliding_pattern != 0;
    char key[160];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", c->arch);
    const gguf_kv *kv = f ? gguf_find(f, key) : NULL;
    if (!kv || kv->val.type != GGUF_VT_ARRAY || !pattern_elem(kv->val.v.arr.elem) ||
        kv->val.v.arr.n != (uint64_t)c->n_layers)
        return false; /* no per-layer array: a config that did not come from this file's reader */
    return entry_nonzero(&kv->val, il);
}

static int token_id(const gguf_file *f, const char *key, int def) {
    int32_t v;
    return gguf_get_i32(f, key, &v, NULL) == GM_OK ? v : def;
}

/* Id of a token by its text in tokenizer.ggml.tokens, -1 if absent. */
static int find_token(const gguf_file *f, const char *text) {
    const gguf_value *arr;
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_VT_STRING, &arr, NULL)) return -1;
    size_t n = strlen(text);
    gguf_arr_iter it;
    gguf_value v;
    gguf_arr_iter_init(&it, arr);
    for (int64_t i = 0; gguf_arr_iter_next(&it, &v); i++)
        if (v.v.str.len == n && !memcmp(v.v.str.ptr, text, n)) return i > INT32_MAX ? -1 : (int)i;
    return -1;
}

static gm_status arch_from_gguf(const gguf_file *f, gm_config *c, gm_error *err) {
    gguf_str a;
    gm_status st = gguf_get_str(f, "general.architecture", &a, err);
    if (st) return st;
    if (a.len == 0 || a.len >= sizeof c->arch || memchr(a.ptr, 0, (size_t)a.len))
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: architecture '%.*s' is not supported yet", f->path,
                       (int)(a.len > 64 ? 64 : a.len), a.ptr);
    char arch[sizeof c->arch], known[256];
    memcpy(arch, a.ptr, (size_t)a.len);
    arch[a.len] = 0;
    const gm_family *fam = gm_family_by_gguf_arch(arch);
    if (!fam) {
        gm_family_names(false, known, sizeof known);
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: architecture %s is not supported yet (%s are)", f->path, arch,
                       known);
    }
    set_family(c, fam);
    return GM_OK;
}

/* <arch>.feed_forward_length as a number or (Gemma 3n's converter) a per-layer array, which must be uniform:
 * llama.cpp checks every layer against layer 0's width. */
static gm_status g_ff(const gguf_ctx *c, int n_layers, int *out) {
    char key[160];
    snprintf(key, sizeof key, "%s.feed_forward_length", c->arch);
    const gguf_kv *kv = gguf_find(c->f, key);
    if (!kv || kv->val.type != GGUF_VT_ARRAY) return g_int(c, "feed_forward_length", -1, out);
    const gguf_value *arr = &kv->val;
    if (arr->v.arr.n != (uint64_t)n_layers)
        return gm_fail(c->err, GM_ERR_FORMAT, "%s: %s has %llu entries for %d layers", c->f->path, key,
                       (unsigned long long)arr->v.arr.n, n_layers);
    gguf_arr_iter it;
    gguf_value v;
    gguf_arr_iter_init(&it, arr);
    for (int i = 0; gguf_arr_iter_next(&it, &v); i++) {
        const bool is_int = v.type == GGUF_VT_I32 || v.type == GGUF_VT_I64 || v.type == GGUF_VT_I16;
        const int64_t x = is_int ? v.v.i : (int64_t)v.v.u;
        if ((v.type != GGUF_VT_U32 && v.type != GGUF_VT_U64 && !is_int) || x <= 0 || x > INT32_MAX)
            return gm_fail(c->err, GM_ERR_FORMAT, "%s: %s[%d] is not a positive integer", c->f->path, key, i);
        if (i == 0) *out = (int)x;
        else if (x != *out)
            return gm_fail(c->err, GM_ERR_UNSUPPORTED, "%s: %s differs between layers (%d vs %lld at layer %d); only "
                           "uniform widths run (as in llama.cpp)", c->f->path, key, *out, (long long)x, i);
    }
    return GM_OK;
}

/* EmbeddingGemma (arch gemma-embedding): Gemma 3 keys plus the pooling type and the optional dense
 * projections' sizes (the window, required as in llama.cpp, and the pattern are read by the rules). */
static gm_status embedding_from_gguf(const gguf_ctx *g, gm_config *c) {
    gm_status st;
    if ((st = g_float(g, "rope.freq_base_swa", 10000.0f, GM_NUM_POSITIVE, &c->rope_base_local)) ||
        (st = g_int(g, "pooling_type", GM_POOLING_MEAN, &c->pooling)) ||
        (st = g_int(g, "dense_2_feat_in", 0, &c->dense_2_in)) || (st = g_int(g, "dense_2_feat_out", 0, &c->dense_2_out)) ||
        (st = g_int(g, "dense_3_feat_in", 0, &c->dense_3_in)) || (st = g_int(g, "dense_3_feat_out", 0, &c->dense_3_out)))
        return st;
    c->is_embedding = true;
    bool add_eos = false;
    if (gguf_find(g->f, "tokenizer.ggml.add_eos_token") &&
        (st = gguf_get_bool(g->f, "tokenizer.ggml.add_eos_token", &add_eos, g->err)))
        return st;
    c->add_eos = add_eos;
    return GM_OK;
}

/* The rope.scaling keys of a family with linear RoPE scaling (Gemma 3): linear or none. */
static gm_status rope_scaling_from_gguf(const gguf_ctx *g, gm_config *c) {
    char key[160];
    gguf_str type;
    snprintf(key, sizeof key, "%s.rope.scaling.type", c->arch);
    if (gguf_get_str(g->f, key, &type, NULL) != GM_OK || (type.len == 4 && !memcmp(type.ptr, "none", 4))) return GM_OK;
    if (!(type.len == 6 && !memcmp(type.ptr, "linear", 6)))
        return gm_fail(g->err, GM_ERR_UNSUPPORTED, "%s: %s = '%.*s' is not supported (linear is)", g->f->path, key,
                       (int)(type.len > 32 ? 32 : type.len), type.ptr);
    return g_float(g, "rope.scaling.factor", 1.0f, GM_NUM_POSITIVE, &c->rope_scale_global);
}

/* The keys whose presence and defaults the family's rules decide (Gemma 1/2/3 and EmbeddingGemma). */
static gm_status rules_from_gguf(const gguf_ctx *g, const gm_family_rules *r, gm_config *c) {
    gm_status st;
    int window = 0;
    if (r->sliding_pattern) { /* the pattern only with a window, as llama.cpp reads Gemma 3's */
        if ((st = g_int(g, "attention.sliding_window", r->window_default, &window))) return st;
        c->sliding_window = window;
        c->sliding_pattern = 0;
        if (window > 0 && (st = gm_config_gguf_pattern(g->f, c, r->sliding_pattern, g->err))) return st;
    }
    if ((r->attn_softcap > 0.0f &&
         (st = g_float(g, "attn_logit_softcapping", r->attn_softcap, GM_NUM_NONNEG, &c->attn_softcap))) ||
        (r->final_softcap &&
         (st = g_float(g, "final_logit_softcapping", r->final_softcap_default, GM_NUM_NONNEG, &c->final_softcap))))
        return st;
    if (r->local_rope) c->rope_base_local = 10000.0f;
    if (r->rope_scaling && (st = rope_scaling_from_gguf(g, c))) return st;
    return r->embedding ? embedding_from_gguf(g, c) : GM_OK;
}

/* The keys every Gemma 1/2/3/3n GGUF has, under <arch>. */
static gm_status common_from_gguf(const gguf_ctx *g, gm_config *c) {
    gm_status st;
    int kl = 0, vl = 0;
    if ((st = g_int(g, "embedding_length", -1, &c->d_model)) || (st = g_int(g, "block_count", -1, &c->n_layers)) ||
        (st = gm_config_check_layer_count(g->f->path, c->n_layers, g->err)) || (st = g_ff(g, c->n_layers, &c->d_ff)) ||
        (st = g_int(g, "attention.head_count", -1, &c->n_heads)) ||
        (st = g_int(g, "attention.head_count_kv", c->n_heads, &c->n_kv_heads)) ||
        (st = g_int(g, "context_length", 8192, &c->context_length)))
        return st;
    int def_hd = c->n_heads > 0 ? c->d_model / c->n_heads : 0;
    if ((st = g_int(g, "attention.key_length", def_hd, &kl)) || (st = g_int(g, "attention.value_length", kl, &vl)))
        return st;
    if (kl != vl)
        return gm_fail(g->err, GM_ERR_UNSUPPORTED, "%s: key_length %d differs from value_length %d", g->f->path, kl, vl);
    c->head_dim = kl;
    if ((st = g_float(g, "attention.layer_norm_rms_epsilon", 1e-6f, GM_NUM_POSITIVE, &c->norm_eps)) ||
        (st = g_float(g, "rope.freq_base", 10000.0f, GM_NUM_POSITIVE, &c->rope_base_global)))
        return st;
    c->rope_base_local = c->rope_base_global;
    c->rope_scale_global = 1.0f;
    return GM_OK;
}

/* llama.cpp's query scale for GGUF files (they carry no query_pre_attn_scalar): 1/sqrt(key_length), but
 * 1/sqrt(d_model / n_heads) for the 27B models. The file holds 1 + w for the norms (llama.cpp's converter). */
static void gguf_query_scale(const gm_family_rules *r, gm_config *c) {
    const bool is27b = r->n_layers_27b > 0 && c->n_layers == r->n_layers_27b;
    const int scale_dim = is27b && c->n_heads > 0 ? c->d_model / c->n_heads : c->head_dim;
    c->query_scale = scale_dim > 0 ? 1.0f / sqrtf((float)scale_dim) : 0.0f;
    c->norm_weights_plus_one = true;
}

static gm_status config_from_gguf(const gm_source *s, gm_config *c, gm_error *err) {
    const gguf_file *f = gm_source_gguf(s);
    gm_status st = arch_from_gguf(f, c, err);
    if (st) return st;
    const gm_family *fam = c->family;
    const gguf_ctx g = {f, c->arch, err};
    if (fam->config_gguf) st = fam->config_gguf(f, c, err); /* every key its own (Gemma 4's per-layer arrays) */
    else if (!(st = common_from_gguf(&g, c))) {
        gguf_query_scale(&fam->rules, c);
        st = fam->config_gguf_keys ? fam->config_gguf_keys(f, c, err) : rules_from_gguf(&g, &fam->rules, c);
    }
    if (st) return st;
    c->bos_id = token_id(f, "tokenizer.ggml.bos_token_id", 2);
    c->eos_id = token_id(f, "tokenizer.ggml.eos_token_id", 1);
    c->pad_id = token_id(f, "tokenizer.ggml.padding_token_id", 0);
    c->eot_id = find_token(f, "<end_of_turn>");
    if (c->eot_id < 0) c->eot_id = find_token(f, "<turn|>"); /* Gemma 4 */
    return GM_OK;
}

/* ------------------------------------------------------------------ config.json */

typedef struct hf_ctx {
    const cJSON *cfg; /* the text config */
    const char *file;
    gm_error *err;
} hf_ctx;

/* An integer field; def < 0 means required. */
static gm_status j_int(const hf_ctx *h, const char *key, int64_t def, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->cfg, key);
    if (!v || cJSON_IsNull(v)) {
        if (def < 0) return gm_fail(h->err, GM_ERR_NOT_FOUND, "%s: \"%s\" is missing", h->file, key);
        *out = (int)def;
        return GM_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > INT32_MAX || floor(v->valuedouble) != v->valuedouble)
        return gm_fail(h->err, GM_ERR_TYPE, "%s: \"%s\" is not a non-negative integer", h->file, key);
    *out = (int)v->valuedouble;
    return GM_OK;
}

/* A number field that obeys rule; absent -> def; JSON null -> null_value. */
static gm_status j_float(const hf_ctx *h, const char *key, float def, float null_value, gm_num_rule rule, float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->cfg, key);
    *out = !v ? def : null_value;
    if (!v || cJSON_IsNull(v)) return GM_OK; /* the defaults obey the rules (a derived one is checked later) */
    if (!cJSON_IsNumber(v)) return gm_fail(h->err, GM_ERR_TYPE, "%s: \"%s\" is not a number", h->file, key);
    *out = (float)v->valuedouble;
    return gm_config_number(h->file, key, *out, rule, h->err);
}

/* Token id that may be an integer or a list (the first element is the main one). */
static int j_token(const cJSON *cfg, const char *key, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsArray(v)) v = v->child;
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= INT32_MAX ? (int)v->valuedouble : def;
}

/* tokenizer_config.json parsed (NULL when absent or unreadable); cJSON_Delete it. */
static cJSON *hf_tokenizer_config(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    enum { MAX = 64 << 20 };
    char *buf = malloc(MAX + 1);
    size_t n = buf ? fread(buf, 1, MAX + 1, f) : 0;
    fclose(f);
    cJSON *root = buf && n <= MAX ? cJSON_ParseWithLength(buf, n) : NULL;
    free(buf);
    return root;
}

/* A boolean of tokenizer_config.json; false when absent. */
static bool hf_bool(const char *dir, const char *key) {
    cJSON *root = hf_tokenizer_config(dir);
    const bool v = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, key));
    cJSON_Delete(root);
    return v;
}

/* <end_of_turn> from tokenizer_config.json's added_tokens_decoder, -1 if unknown. */
static int hf_find_token(const char *dir, const char *text) {
    int id = -1;
    cJSON *root = hf_tokenizer_config(dir);
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "added_tokens_decoder");
    for (const cJSON *e = dec ? dec->child : NULL; e && id < 0; e = e->next) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        char *end;
        long v = e->string ? strtol(e->string, &end, 10) : -1;
        if (cJSON_IsString(content) && !strcmp(content->valuestring, text) && e->string && !*end && v >= 0 &&
            v <= INT32_MAX)
            id = (int)v;
    }
    cJSON_Delete(root);
    return id;
}

static bool pattern_fits(const cJSON *lt, int p) {
    int i = 0;
    for (const cJSON *e = lt->child; e; e = e->next, i++) {
        bool global = cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention");
        bool sliding = cJSON_IsString(e) && !strcmp(e->valuestring, "sliding_attention");
        if ((!global && !sliding) || global != ((i + 1) % p == 0)) return false;
    }
    return true;
}

/* Gemma 3's layer pattern: sliding_window_pattern (default 6), checked against layer_types when
 * present; otherwise derived from layer_types. Only repeating patterns are supported. */
static gm_status hf_pattern(const hf_ctx *h, int n_layers, int *pattern) {
    gm_status st = j_int(h, "sliding_window_pattern", 6, pattern);
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(h->cfg, "layer_types");
    if (st || !cJSON_IsArray(lt) || (*pattern > 0 && pattern_fits(lt, *pattern))) return st;
    int p = n_layers + 1, i = 0; /* no full_attention layer: every layer slides */
    for (const cJSON *e = lt->child; e; e = e->next, i++)
        if (cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention")) {
            p = i + 1;
            break;
        }
    if (!pattern_fits(lt, p))
        return gm_fail(h->err, GM_ERR_UNSUPPORTED, "%s: layer_types is not a repeating sliding/full pattern", h->file);
    *pattern = p;
    return GM_OK;
}

static gm_status hf_rope_scaling(const hf_ctx *h, float *scale) {
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(h->cfg, "rope_scaling");
    *scale = 1.0f;
    if (!rs || cJSON_IsNull(rs)) return GM_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!type) type = cJSON_GetObjectItemCaseSensitive(rs, "type");
    const cJSON *factor = cJSON_GetObjectItemCaseSensitive(rs, "factor");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "linear") != 0 || !cJSON_IsNumber(factor))
        return gm_fail(h->err, GM_ERR_UNSUPPORTED, "%s: rope_scaling other than {\"rope_type\": \"linear\", "
                       "\"factor\": x} is not supported", h->file);
    *scale = (float)factor->valuedouble;
    return gm_config_number(h->file, "rope_scaling.factor", *scale, GM_NUM_POSITIVE, h->err);
}

/* One rope_parameters entry: {"rope_type": "default" | "linear", "rope_theta": x, "factor": f}. */
static gm_status hf_rope_entry(const hf_ctx *h, const cJSON *e, const char *which, float *base, float *scale) {
    const cJSON *theta = cJSON_GetObjectItemCaseSensitive(e, "rope_theta");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "rope_type");
    const cJSON *factor = cJSON_GetObjectItemCaseSensitive(e, "factor");
    char key[96];
    if (cJSON_IsNumber(theta)) {
        *base = (float)theta->valuedouble;
        snprintf(key, sizeof key, "rope_parameters%s%s.rope_theta", which[0] ? "." : "", which);
        gm_status st = gm_config_number(h->file, key, *base, GM_NUM_POSITIVE, h->err);
        if (st) return st;
    }
    if (!type || (cJSON_IsString(type) && !strcmp(type->valuestring, "default"))) return GM_OK;
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "linear") && cJSON_IsNumber(factor) && scale) {
        *scale = (float)factor->valuedouble;
        snprintf(key, sizeof key, "rope_parameters%s%s.factor", which[0] ? "." : "", which);
        return gm_config_number(h->file, key, *scale, GM_NUM_POSITIVE, h->err);
    }
    return gm_fail(h->err, GM_ERR_UNSUPPORTED, "%s: rope_parameters%s%s: only \"default\"%s RoPE is supported", h->file,
                   which[0] ? "." : "", which, scale ? " and \"linear\"" : "");
}

/* transformers v5 writes rope_parameters, per layer kind ({"full_attention": {...},
 * "sliding_attention": {...}}) or one entry for every layer; it overrides the older keys. */
static gm_status hf_rope_parameters(const hf_ctx *h, gm_config *c) {
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(h->cfg, "rope_parameters");
    if (!cJSON_IsObject(rp)) return GM_OK;
    const cJSON *full = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
    const cJSON *sliding = cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention");
    if (!cJSON_IsObject(full) && !cJSON_IsObject(sliding)) {
        gm_status st = hf_rope_entry(h, rp, "", &c->rope_base_global, &c->rope_scale_global);
        if (!c->family->rules.local_rope) c->rope_base_local = c->rope_base_global; /* one base for every layer */
        return st;
    }
    gm_status st = GM_OK;
    if (cJSON_IsObject(full)) st = hf_rope_entry(h, full, "full_attention", &c->rope_base_global, &c->rope_scale_global);
    if (!st && cJSON_IsObject(sliding)) st = hf_rope_entry(h, sliding, "sliding_attention", &c->rope_base_local, NULL);
    return st;
}

static gm_status hf_arch(const cJSON *root, const cJSON **cfg, gm_config *c, const char *file, gm_error *err) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    *cfg = cJSON_IsObject(tc) ? tc : root;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(*cfg, "model_type");
    if (!cJSON_IsString(mt) && *cfg != root) mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (!cJSON_IsString(mt)) return gm_fail(err, GM_ERR_FORMAT, "%s: \"model_type\" is missing", file);
    const gm_family *fam = gm_family_by_hf_type(mt->valuestring);
    if (!fam) {
        char known[256];
        gm_family_names(true, known, sizeof known);
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: architecture %.40s is not supported yet (%s are)", file,
                       mt->valuestring, known);
    }
    set_family(c, fam);
    return GM_OK;
}

/* A JSON file of the folder, parsed (NULL when absent or not JSON). */
static cJSON *hf_json(const char *dir, const char *rel) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return n < sizeof buf ? cJSON_ParseWithLength(buf, n) : NULL;
}

/* EmbeddingGemma as a sentence-transformers folder: Gemma3TextModel with use_bidirectional_attention. The
 * window in config.json is the original one (transformers halves it when it loads the config). Pooling is
 * 1_Pooling's (mean); the dense projections (model/source.c maps <k>_Dense to dense_<k>.weight) take their
 * sizes from the tensors and must be plain linear maps. The closing Normalize module is left to the caller,
 * as llama.cpp leaves it. */
static gm_status hf_embedding(const hf_ctx *h, const gm_source *s, gm_config *c) {
    const char *dir = gm_source_hf_dir(s);
    const cJSON *bi = cJSON_GetObjectItemCaseSensitive(h->cfg, "use_bidirectional_attention");
    if (!cJSON_IsTrue(bi)) return GM_OK;
    const gm_family *fam = gm_family_by_gguf_arch("gemma-embedding"); /* the GGUF name of the same model */
    if (!fam) return gm_fail(h->err, GM_ERR_UNSUPPORTED, "%s: no family for an embedding model", h->file);
    set_family(c, fam);
    c->is_embedding = true;
    c->pooling = GM_POOLING_MEAN;
    c->add_eos = hf_bool(dir, "add_eos_token");
    cJSON *pool = hf_json(dir, "1_Pooling/config.json");
    const bool mean = !pool || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pool, "pooling_mode_mean_tokens"));
    cJSON_Delete(pool);
    if (!mean) return gm_fail(h->err, GM_ERR_UNSUPPORTED, "%s/1_Pooling: only mean pooling is supported", dir);
    int *in[2] = {&c->dense_2_in, &c->dense_3_in}, *out[2] = {&c->dense_2_out, &c->dense_3_out};
    for (int k = 0; k < 2; k++) {
        char rel[32], name[32];
        snprintf(name, sizeof name, "dense_%d.weight", k + 2);
        const gm_tensor *t = gm_source_tensor(s, name);
        if (!t) continue;
        snprintf(rel, sizeof rel, "%d_Dense/config.json", k + 2);
        cJSON *mc = hf_json(dir, rel);
        const cJSON *act = cJSON_GetObjectItemCaseSensitive(mc, "activation_function");
        const bool linear = !act || (cJSON_IsString(act) && strstr(act->valuestring, "Identity"));
        const bool bias = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mc, "bias"));
        cJSON_Delete(mc);
        if (!linear || bias)
            return gm_fail(h->err, GM_ERR_UNSUPPORTED, "%s/%d_Dense: only a linear map without bias or activation is "
                           "supported", dir, k + 2);
        if (t->n_dims != 2 || t->ne[0] <= 0 || t->ne[1] <= 0 || t->ne[0] > GM_MAX_DENSE_DIM || t->ne[1] > GM_MAX_DENSE_DIM)
            return gm_fail(h->err, GM_ERR_FORMAT, "%s/%d_Dense: linear.weight is not a matrix", dir, k + 2);
        *in[k] = (int)t->ne[0];
        *out[k] = (int)t->ne[1];
    }
    return GM_OK;
}

/* intermediate_size: a number or (Gemma 3n) a per-layer list, which must be uniform. */
static gm_status j_ff(const hf_ctx *h, int n_layers, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->cfg, "intermediate_size");
    if (!cJSON_IsArray(v)) return j_int(h, "intermediate_size", -1, out);
    if (cJSON_GetArraySize(v) != n_layers)
        return gm_fail(h->err, GM_ERR_FORMAT, "%s: \"intermediate_size\" has %d entries for %d layers", h->file,
                       cJSON_GetArraySize(v), n_layers);
    int i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 1 || e->valuedouble > INT32_MAX || floor(e->valuedouble) != e->valuedouble)
            return gm_fail(h->err, GM_ERR_TYPE, "%s: \"intermediate_size\"[%d] is not a positive integer", h->file, i);
        if (i == 0) *out = (int)e->valuedouble;
        else if ((int)e->valuedouble != *out)
            return gm_fail(h->err, GM_ERR_UNSUPPORTED, "%s: \"intermediate_size\" differs between layers; only uniform "
                           "widths run", h->file);
    }
    return GM_OK;
}

/* bos / eos / pad from the text config or the top level; <end_of_turn> from tokenizer_config.json. */
static void hf_tokens(const gm_source *s, const cJSON *cfg, gm_config *c) {
    c->bos_id = j_token(cfg, "bos_token_id", j_token(gm_source_hf_config(s), "bos_token_id", 2));
    c->eos_id = j_token(cfg, "eos_token_id", j_token(gm_source_hf_config(s), "eos_token_id", 1));
    c->pad_id = j_token(cfg, "pad_token_id", j_token(gm_source_hf_config(s), "pad_token_id", 0));
    c->eot_id = hf_find_token(gm_source_hf_dir(s), "<end_of_turn>");
    if (c->eot_id < 0) c->eot_id = hf_find_token(gm_source_hf_dir(s), "<turn|>"); /* Gemma 4 */
}

/* The fields whose presence and defaults the family's rules decide (Gemma 1/2/3/3n; null soft-caps are 0). */
static gm_status rules_from_hf(const hf_ctx *h, const gm_source *s, const gm_family_rules *r, gm_config *c) {
    gm_status st;
    if ((r->sliding_pattern && (st = j_int(h, "sliding_window", r->window_default, &c->sliding_window))) ||
        (st = j_float(h, "attn_logit_softcapping", r->attn_softcap, 0.0f, GM_NUM_NONNEG, &c->attn_softcap)) ||
        (r->final_softcap && (st = j_float(h, "final_logit_softcapping", r->final_softcap_default, 0.0f,
                                           GM_NUM_NONNEG, &c->final_softcap))) ||
        (r->local_rope && (st = j_float(h, "rope_local_base_freq", 10000.0f, 10000.0f, GM_NUM_POSITIVE,
                                        &c->rope_base_local))) ||
        (r->rope_scaling && (st = hf_rope_scaling(h, &c->rope_scale_global))))
        return st;
    c->sliding_pattern = r->sliding_pattern;
    if (r->pattern_from_config && (st = hf_pattern(h, c->n_layers, &c->sliding_pattern))) return st;
    if (c->sliding_window <= 0) c->sliding_pattern = 0;
    if (r->query_scale_one) c->query_scale = 1.0f;
    return r->hf_bidirectional_embedding ? hf_embedding(h, s, c) : GM_OK;
}

static gm_status config_from_hf(const gm_source *s, gm_config *c, gm_error *err) {
    char file[4096];
    snprintf(file, sizeof file, "%s/config.json", gm_source_hf_dir(s));
    const cJSON *cfg;
    gm_status st = hf_arch(gm_source_hf_config(s), &cfg, c, file, err);
    if (st) return st;
    const gm_family *fam = c->family;
    if (fam->config_hf) { /* every field its own (Gemma 4's per-layer geometry) */
        if ((st = fam->config_hf(s, c, err))) return st;
        hf_tokens(s, cfg, c);
        return GM_OK;
    }
    hf_ctx h = {cfg, file, err};
    if ((st = j_int(&h, "hidden_size", -1, &c->d_model)) || (st = j_int(&h, "num_hidden_layers", -1, &c->n_layers)) ||
        (st = gm_config_check_layer_count(file, c->n_layers, err)) || (st = j_ff(&h, c->n_layers, &c->d_ff)) ||
        (st = j_int(&h, "num_attention_heads", -1, &c->n_heads)) ||
        (st = j_int(&h, "num_key_value_heads", c->n_heads, &c->n_kv_heads)) ||
        (st = j_int(&h, "head_dim", c->n_heads > 0 ? c->d_model / c->n_heads : 0, &c->head_dim)) ||
        (st = j_int(&h, "max_position_embeddings", 8192, &c->context_length)) ||
        (st = j_float(&h, "rms_norm_eps", 1e-6f, 1e-6f, GM_NUM_POSITIVE, &c->norm_eps)) ||
        (st = j_float(&h, "rope_theta", 10000.0f, 10000.0f, GM_NUM_POSITIVE, &c->rope_base_global)))
        return st;
    c->rope_base_local = c->rope_base_global;
    c->rope_scale_global = 1.0f;
    float qpas = (float)c->head_dim;
    if (fam->rules.hf_query_pre_attn_scalar &&
        (st = j_float(&h, "query_pre_attn_scalar", qpas, qpas, GM_NUM_POSITIVE, &qpas)))
        return st;
    c->query_scale = qpas > 0 ? 1.0f / sqrtf(qpas) : 0.0f;
    if ((st = rules_from_hf(&h, s, &fam->rules, c)) || (st = hf_rope_parameters(&h, c))) return st;
    c->norm_weights_plus_one = fam->rules.raw_norm_weights; /* the rest multiply by 1 + w: HF stores w */
    hf_tokens(s, cfg, c);
    return GM_OK;
}

/* ------------------------------------------------------------------ checks */

/* ---- the one validator: every number of a config and of each layer's facts against core/limits.h */

/* Every float of the config once more, whatever path set it (readers check their keys; this catches a
 * value some rule or a later reader derived), named by its gm_config field. */
static gm_status check_floats(const char *path, const gm_config *c, gm_error *err) {
    const struct { const char *name; float v; gm_num_rule rule; } f[] = {
        {"norm_eps", c->norm_eps, GM_NUM_POSITIVE},
        {"rope_base_global", c->rope_base_global, GM_NUM_POSITIVE},
        {"rope_base_local", c->rope_base_local, GM_NUM_POSITIVE},
        {"rope_scale_global", c->rope_scale_global, GM_NUM_POSITIVE},
        {"query_scale", c->query_scale, GM_NUM_POSITIVE},
        {"attn_softcap", c->attn_softcap, GM_NUM_NONNEG},
        {"final_softcap", c->final_softcap, GM_NUM_NONNEG},
        {"embed_scale", c->embed_scale, GM_NUM_POSITIVE},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        gm_status st = gm_config_number(path, f[i].name, f[i].v, f[i].rule, err);
        if (st) return st;
    }
    return GM_OK;
}

gm_status gm_config_check_layer_count(const char *path, int n_layers, gm_error *err) {
    if (n_layers <= 0 || n_layers > GM_MAX_LAYERS)
        return gm_fail(err, GM_ERR_FORMAT, "%s: layer count %d out of range", path, n_layers);
    return GM_OK;
}

gm_status gm_config_check(const char *path, const gm_config *c, gm_error *err) {
#define BAD(...) return gm_fail(err, GM_ERR_FORMAT, __VA_ARGS__)
    if (!c->family) return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: the config names no model family", path);
    if (c->d_model <= 0 || c->d_model > GM_MAX_D_MODEL) BAD("%s: embedding length %d out of range", path, c->d_model);
    gm_status st = gm_config_check_layer_count(path, c->n_layers, err);
    if (st) return st;
    if (c->n_heads <= 0 || c->n_heads > GM_MAX_HEADS) BAD("%s: head count %d out of range", path, c->n_heads);
    if (c->n_kv_heads <= 0 || c->n_heads % c->n_kv_heads != 0)
        BAD("%s: kv head count %d does not divide the head count %d", path, c->n_kv_heads, c->n_heads);
    if (c->head_dim <= 0 || c->head_dim > GM_MAX_HEAD_DIM || c->head_dim % 2 != 0)
        BAD("%s: head dimension %d is not a positive even number up to %d", path, c->head_dim, GM_MAX_HEAD_DIM);
    if (c->d_ff <= 0 || c->d_ff > GM_MAX_D_FF) BAD("%s: feed-forward length %d out of range", path, c->d_ff);
    if (c->n_vocab <= 0) BAD("%s: vocabulary size %d must be positive", path, c->n_vocab);
    if (c->context_length <= 0) BAD("%s: context length %d must be positive", path, c->context_length);
    if (c->sliding_window < 0) BAD("%s: sliding window %d is negative", path, c->sliding_window);
    if (c->sliding_pattern < 0) BAD("%s: sliding pattern %d is negative", path, c->sliding_pattern);
#undef BAD
    return check_floats(path, c, err);
}

gm_status gm_config_check_layer(const gm_layer_config *l, int il, const char *path, gm_error *err) {
#define NEED(cond, what)                                                                      \
    if (!(cond)) return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: cannot run layer %d: %s", path, il, what)
    NEED(l->n_heads > 0 && l->n_heads <= GM_MAX_HEADS && l->n_kv_heads > 0 && l->n_heads % l->n_kv_heads == 0,
         "head counts must be positive (at most 4096) and query heads a multiple of KV heads");
    NEED(l->head_dim > 0 && l->head_dim % 2 == 0 && l->head_dim <= GM_MAX_HEAD_DIM,
         "head_dim must be even, positive and at most 4096");
    NEED(l->rope_dims >= 0 && l->rope_dims % 2 == 0 && l->rope_dims <= l->head_dim, "rotated dims must be even, <= head_dim");
    NEED(l->d_ff > 0 && l->d_ff <= GM_MAX_D_FF, "feed-forward size must be positive (at most 2^20)");
    NEED(l->window >= 0, "negative sliding window");
    NEED(l->rope_base > 0.0f && isfinite(l->rope_base) && l->rope_scale > 0.0f && isfinite(l->rope_scale),
         "RoPE base and scale must be positive");
    NEED(l->kv_source >= 0 && l->kv_source <= il, "KV source must be this layer or an earlier one");
#undef NEED
    return GM_OK;
}

static gm_status check_ids(const char *path, const gm_config *c, gm_error *err) {
    const int ids[4] = {c->bos_id, c->eos_id, c->pad_id, c->eot_id};
    const char *names[4] = {"bos", "eos", "pad", "end_of_turn"};
    for (int i = 0; i < 4; i++)
        if (ids[i] >= c->n_vocab)
            return gm_fail(err, GM_ERR_FORMAT, "%s: %s token id %d is outside the vocabulary of %d", path, names[i],
                           ids[i], c->n_vocab);
    return GM_OK;
}

typedef struct want {
    char name[96];
    int n_dims;
    int64_t ne[2];
} want;

static bool shape_is(const gm_tensor *t, const want *w) {
    int nd = t->n_dims;
    while (nd > 1 && t->ne[nd - 1] == 1) nd--; /* [d, 1] is [d] */
    int wd = w->n_dims == 2 && w->ne[1] == 1 ? 1 : w->n_dims;
    return nd == wd && t->ne[0] == w->ne[0] && (wd == 1 || t->ne[1] == w->ne[1]);
}

/* Appends a name to the "missing" list, counting the ones left out. */
static void note_missing(char *list, size_t cap, int *n, const char *name) {
    if (*n < MAX_MISSING_LISTED) {
        size_t len = strlen(list);
        snprintf(list + len, cap - len, "%s%s", len ? ", " : "", name);
    }
    (*n)++;
}

static gm_status check_one(const gm_source *s, const want *w, char *missing, size_t cap, int *n_missing,
                           gm_error *err) {
    const gm_tensor *t = gm_source_tensor(s, w->name);
    if (!t) {
        note_missing(missing, cap, n_missing, w->name);
        return GM_OK;
    }
    if (!shape_is(t, w))
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld%s%lld]",
                       gm_source_path(s), w->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)w->ne[0], w->n_dims == 2 ? ", " : "",
                       w->n_dims == 2 ? (long long)w->ne[1] : 0LL);
    return GM_OK;
}

static gm_status check_tensors(const gm_source *s, const gm_config *c, gm_error *err) {
    int64_t d = c->d_model, q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim;
    int64_t ff = c->d_ff, hd = c->head_dim, V = c->n_vocab;
    char missing[512] = "";
    int n_missing = 0;
    gm_status st;
    want top[] = {{"token_embd.weight", 2, {d, V}}, {"output_norm.weight", 1, {d, 1}}, {"output.weight", 2, {d, V}}};
    for (int i = 0; i < 3; i++) {
        if (i == 2 && c->tied_embeddings) continue;
        if ((st = check_one(s, &top[i], missing, sizeof missing, &n_missing, err))) return st;
    }
    enum { ALL, POST, QK }; /* required by every family, with post norms, with q/k norms */
    static const struct { const char *name; int nd; int a, b, need; } layer[] = {
        /* dims: 0 d, 1 q, 2 kv, 3 ff, 4 hd */
        {"attn_norm", 1, 0, 0, ALL},   {"attn_q", 2, 0, 1, ALL},   {"attn_k", 2, 0, 2, ALL},
        {"attn_v", 2, 0, 2, ALL},      {"attn_output", 2, 1, 0, ALL}, {"ffn_norm", 1, 0, 0, ALL},
        {"ffn_gate", 2, 0, 3, ALL},    {"ffn_up", 2, 0, 3, ALL},   {"ffn_down", 2, 3, 0, ALL},
        {"post_attention_norm", 1, 0, 0, POST}, {"post_ffw_norm", 1, 0, 0, POST},
        {"attn_q_norm", 1, 4, 0, QK}, {"attn_k_norm", 1, 4, 0, QK},
    };
    const gm_family_rules *r = &c->family->rules;
    const bool need[3] = {true, r->post_norms, r->qk_norm};
    int64_t dims[5] = {d, q, kv, ff, hd};
    /* shapes that differ per layer (Gemma 4) are checked by name when the layers load (model/model.c) */
    for (int l = 0; l < (r->per_layer_shapes ? 0 : c->n_layers); l++) {
        for (size_t k = 0; k < sizeof layer / sizeof layer[0]; k++) {
            if (!need[layer[k].need]) continue;
            want w = {"", layer[k].nd, {dims[layer[k].a], layer[k].nd == 2 ? dims[layer[k].b] : 1}};
            snprintf(w.name, sizeof w.name, "blk.%d.%s.weight", l, layer[k].name);
            if ((st = check_one(s, &w, missing, sizeof missing, &n_missing, err))) return st;
        }
    }
    if (n_missing)
        return gm_fail(err, GM_ERR_NOT_FOUND, "%s: %d required tensor%s missing: %s%s", gm_source_path(s), n_missing,
                       n_missing == 1 ? " is" : "s are", missing, n_missing > MAX_MISSING_LISTED ? ", ..." : "");
    return GM_OK;
}

/* The optional dense projections of an embedding model: each tensor goes with its two size keys
 * (llama.cpp shapes the tensor from them), the chain d -> dense_2 -> dense_3 must fit, and a
 * generative model must not carry them. */
static gm_status check_dense(const gm_source *s, gm_config *c, gm_error *err) {
    const char *path = gm_source_path(s);
    const int *in[2] = {&c->dense_2_in, &c->dense_3_in}, *out[2] = {&c->dense_2_out, &c->dense_3_out};
    int dim = c->d_model;
    for (int k = 0; k < 2; k++) {
        char name[32];
        snprintf(name, sizeof name, "dense_%d.weight", k + 2);
        const gm_tensor *t = gm_source_tensor(s, name);
        const bool keys = *in[k] > 0 || *out[k] > 0;
        if (t && !c->is_embedding)
            return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: tensor %s belongs to an embedding model, not to %s", path, name,
                           c->arch);
        if (t && !keys)
            return gm_fail(err, GM_ERR_FORMAT, "%s: tensor %s is present but %s.dense_%d_feat_in / _out are missing",
                           path, name, c->arch, k + 2);
        if (!keys) continue;
        if (!t) return gm_fail(err, GM_ERR_NOT_FOUND, "%s: %s.dense_%d_feat_* are set but tensor %s is missing", path,
                               c->arch, k + 2, name);
        if (*in[k] <= 0 || *out[k] <= 0 || *out[k] > GM_MAX_DENSE_DIM || *in[k] != dim)
            return gm_fail(err, GM_ERR_FORMAT, "%s: dense_%d maps %d -> %d features, but its input is %d wide", path,
                           k + 2, *in[k], *out[k], dim);
        const want w = {"", 2, {*in[k], *out[k]}};
        if (!shape_is(t, &w))
            return gm_fail(err, GM_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld, %lld, %lld], expected [%d, %d]", path,
                           name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                           *in[k], *out[k]);
        dim = *out[k];
    }
    if (c->dense_3_out > 0 && c->dense_3_out != c->d_model)
        return gm_fail(err, GM_ERR_FORMAT, "%s: dense_3 must map back to the embedding length %d, not %d", path,
                       c->d_model, c->dense_3_out);
    if (c->is_embedding && c->pooling != GM_POOLING_MEAN)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: pooling type %d is not supported (1 = mean is)", path, c->pooling);
    c->embedding_dim = c->is_embedding ? dim : 0;
    return GM_OK;
}

/* ------------------------------------------------------------------ entry point */

gm_status gm_config_load(const gm_source *s, gm_config *out, gm_error *err) {
    if (!s || !out) return gm_fail(err, GM_ERR_ARG, "gm_config_load: NULL argument");
    gm_config c;
    memset(&c, 0, sizeof c);
    gm_status st = gm_source_is_gguf(s) ? config_from_gguf(s, &c, err) : config_from_hf(s, &c, err);
    if (st) return st;
    const gm_tensor *embd = gm_source_tensor(s, "token_embd.weight");
    const bool own = c.family->rules.own_weights;
    if (!embd && !own)
        return gm_fail(err, GM_ERR_NOT_FOUND, "%s: tensor token_embd.weight (the embedding) is missing", gm_source_path(s));
    if (embd && (embd->ne[1] <= 0 || embd->ne[1] > INT32_MAX))
        return gm_fail(err, GM_ERR_FORMAT, "%s: token_embd.weight has %lld rows", gm_source_path(s), (long long)embd->ne[1]);
    if (embd) c.n_vocab = (int)embd->ne[1];
    c.embed_scale = sqrtf((float)c.d_model);
    const gm_family_rules *r = &c.family->rules;
    c.has_post_norms = r->post_norms;
    c.has_qk_norm = r->qk_norm;
    c.has_v_norm = r->v_norm;
    if (r->attn_softcap <= 0.0f) c.attn_softcap = 0.0f; /* a key of a family without one is dropped */
    if (!r->final_softcap) c.final_softcap = 0.0f;
    c.tied_embeddings = gm_source_tensor(s, "output.weight") == NULL;
    if ((st = gm_config_check(gm_source_path(s), &c, err)) || (!own && (st = check_tensors(s, &c, err))) ||
        (st = check_dense(s, &c, err)) || (st = check_ids(gm_source_path(s), &c, err)))
        return st;
    *out = c;
    return GM_OK;
}
