/* model/families/gemma3n.c — Gemma 3n: config keys, tensor binding and the AltUp / LAuReL / per-layer-input /
 * sparsity steps the forward pass calls around the Gemma block (see gemma3n.h for the math). */
#include "model/families/gemma3n.h"
#include "model/families/ple.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/ops.h"
#include "model/model.h"

#define NS GM_3N_STREAMS

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

/* gemma3n.attention.sliding_window_pattern: a bool per layer (true = sliding) or a number n (layer il slides
 * iff il % n < n - 1; 0: every layer); absent: 5. We run repeating patterns: the array must be one. */
static gm_status layer_pattern(const gguf_file *f, gm_config *c, gm_error *err) {
    const char *key = "gemma3n.attention.sliding_window_pattern";
    const gguf_kv *kv = gguf_find(f, key);
    int p = 5;
    if (kv && kv->val.type != GGUF_VT_ARRAY) {
        int32_t v;
        gm_status st = gguf_get_i32(f, key, &v, err);
        if (st) return st;
        if (v < 0) return gm_fail(err, GM_ERR_FORMAT, "%s: %s is negative", f->path, key);
        p = v == 0 ? c->n_layers + 1 : v; /* 0: every layer slides, i.e. no full layer among them */
    } else if (kv) {
        const gguf_value *arr;
        gm_status st = gguf_get_arr(f, key, GGUF_VT_BOOL, &arr, err);
        if (st) return st;
        if (arr->v.arr.n != (uint64_t)c->n_layers)
            return gm_fail(err, GM_ERR_FORMAT, "%s: %s has %llu entries for %d layers", f->path, key,
                           (unsigned long long)arr->v.arr.n, c->n_layers);
        const uint8_t *b = arr->v.arr.data;
        p = c->n_layers + 1;
        for (int i = 0; i < c->n_layers; i++)
            if (!b[i]) {
                p = i + 1;
                break;
            }
        for (int i = 0; i < c->n_layers; i++)
            if ((b[i] != 0) != ((i + 1) % p != 0))
                return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: %s is not a repeating sliding/full pattern", f->path, key);
    }
    c->sliding_pattern = p;
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
    if ((st = layer_pattern(f, c, err))) return st;
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
        const bool s18 = (GM_3N_KV_FROM - 1) % c->sliding_pattern != 0, s19 = GM_3N_KV_FROM % c->sliding_pattern != 0;
        if (!s18 || s19)
            return gm_fail(err, GM_ERR_UNSUPPORTED,
                           "%s: Gemma 3n layers >= 20 attend over layer 18 (sliding) or 19 (full): layer 18 must slide "
                           "and layer 19 must be full, this layer pattern (%d) has them otherwise", path, c->sliding_pattern);
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

static bool is_sliding(const gm_config *c, int il) {
    return c->sliding_window > 0 && c->sliding_pattern > 0 && (il + 1) % c->sliding_pattern != 0;
}

int gm_3n_kv_source(const gm_source *src, const gm_config *c, int il) {
    const cJSON *hf = hf_text_config_of(src);
    if (hf) { /* HF: the last layer before the first shared one of il's kind */
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(hf, "num_kv_shared_layers");
        const double want = v ? (cJSON_IsNumber(v) ? v->valuedouble : 0.0) : 15.0; /* HF's default: 15 */
        const int shared = want >= 0 && want < c->n_layers ? (int)want : 0;
        const int first = c->n_layers - shared;
        if (shared == 0 || il < first) return il;
        for (int j = first - 1; j >= 0; j--)
            if (is_sliding(c, j) == is_sliding(c, il)) return j;
        return -1; /* none of its kind: refused by the layer check */
    }
    if (il < GM_3N_KV_FROM) return il;
    /* llama.cpp: n_layer_kv_from_start - (is_swa(il) ? 2 : 1) */
    return GM_3N_KV_FROM - (is_sliding(c, il) ? 2 : 1);
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
    gm_3n_variant *v = &m->g3n->v;
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
    gm_3n_layer *L = &m->g3n->layers[il];
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
    const float clip = m->g3n->v.coef_clip; /* HF clamps the correction coefficients (llama.cpp does not) */
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
    gm_3n_weights *w = m->g3n = calloc(1, sizeof *w);
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
    for (int k = 0; k < NS - 1; k++) {
        gm_matrix_bind(&w->altup_proj[k], m->isa);
        gm_matrix_bind(&w->altup_unembd[k], m->isa);
    }
    gm_matrix_bind(&w->ple_tok, m->isa);
    gm_matrix_bind(&w->ple_proj, m->isa);
    for (int il = 0; il < c->n_layers; il++) {
        gm_3n_layer *L = &w->layers[il];
        gm_matrix *mats[] = {&L->laurel_l, &L->laurel_r, &L->inp_gate, &L->proj};
        for (int i = 0; i < 4; i++) gm_matrix_bind(mats[i], m->isa);
    }
    return GM_OK;
}

void gm_3n_free(gm_3n_weights *w) {
    if (!w) return;
    free(w->v.sparsity);
    free(w->layers);
    free(w->store);
    free(w);
}

/* ------------------------------------------------------------------ forward steps */

typedef struct gm_3n_state gm_3n_state;
static void gm_3n_state_free(gm_3n_state *s);

struct gm_3n_state {
    const gm_model *m;
    gm_backend *be; /* runs the matmuls */
    int max_batch, d;
    float *s;    /* streams: stream k of row i at (k * max_batch + i) * d */
    float *p;    /* predictions, same layout */
    float *ple;  /* per row: 256 L per-layer inputs */
    float *lau;  /* per row: d (LAuReL output) */
    float *t;    /* per row: max(256 L, d) scratch */
    float *t2;   /* per row: d scratch */
    float *ones; /* d ones: weightless RMSNorm */
    float (*dot)(const float *a, const float *b, int n); /* the router's: the model's ISA level's */
};

static float *stream(float *base, const gm_3n_state *s, int k, int i) {
    return base + ((size_t)k * (size_t)s->max_batch + (size_t)i) * (size_t)s->d;
}

/* be runs the matmuls; its activations are host memory (x, xn, gate of the hooks). */
static gm_status gm_3n_state_new(const gm_model *m, int max_batch, gm_backend *be, gm_3n_state **out, gm_error *err) {
    *out = NULL;
    gm_3n_state *s = calloc(1, sizeof *s);
    if (!s) return gm_fail(err, GM_ERR_NOMEM, "forward: out of memory");
    const size_t B = (size_t)max_batch, d = (size_t)m->cfg.d_model, P = (size_t)GM_3N_PLE * (size_t)m->cfg.n_layers;
    s->m = m, s->be = be, s->max_batch = max_batch, s->d = (int)d;
    s->dot = gm_cpu_kernels_for(m->isa)->dot;
    s->s = malloc(NS * B * d * sizeof(float));
    s->p = malloc(NS * B * d * sizeof(float));
    s->ple = malloc(B * P * sizeof(float));
    s->lau = malloc(B * d * sizeof(float));
    s->t = malloc(B * (P > d ? P : d) * sizeof(float));
    s->t2 = malloc(B * d * sizeof(float));
    s->ones = malloc(d * sizeof(float));
    if (!s->s || !s->p || !s->ple || !s->lau || !s->t || !s->t2 || !s->ones) {
        gm_3n_state_free(s);
        return gm_fail(err, GM_ERR_NOMEM, "forward: cannot allocate the Gemma 3n streams for %d rows", max_batch);
    }
    for (size_t i = 0; i < d; i++) s->ones[i] = 1.0f;
    *out = s;
    return GM_OK;
}

static void gm_3n_state_free(gm_3n_state *s) {
    if (!s) return;
    free(s->s);
    free(s->p);
    free(s->ple);
    free(s->lau);
    free(s->t);
    free(s->t2);
    free(s->ones);
    free(s);
}

static float l2norm(const float *x, int n) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    return (float)sqrt(ss);
}

/* y = y * target / |y| (llama.cpp: (y * |target|) / |y|, elementwise in f32) */
static void rescale_to(float *y, int n, float target) {
    const float have = l2norm(y, n);
    for (int i = 0; i < n; i++) y[i] = y[i] * target / have;
}

/* Before layer 0: x holds the scaled embeddings of n rows. Per-layer inputs and the 4 streams. */
static gm_status gm_3n_begin(gm_3n_state *s, const gm_fwd_row *rows, const float *x, int n) {
    const gm_3n_weights *w = s->m->g3n;
    const gm_config *c = &s->m->cfg;
    const int d = s->d;
    gm_status st = gm_ple_inputs(&w->ple_tok, &w->ple_proj, w->ple_norm, GM_3N_PLE, c->n_layers, c->norm_eps, rows, x, n,
                              d, s->ple, s->t, s->be);
    if (st) return st;
    /* streams: 0 is the embedding, k = 1..3 its projections rescaled to its norm */
    for (int i = 0; i < n; i++) memcpy(stream(s->s, s, 0, i), x + (size_t)i * d, (size_t)d * sizeof(float));
    for (int k = 1; k < NS; k++) {
        float *sk = stream(s->s, s, k, 0);
        if ((st = gm_be_matmul(s->be, &w->altup_proj[k - 1], x, n, sk))) return st;
        for (int i = 0; i < n; i++) rescale_to(sk + (size_t)i * d, d, l2norm(x + (size_t)i * d, d));
    }
    return GM_OK;
}

/* r = tanh(router . RMS_router_norm(x) / d) */
static void router(const gm_3n_state *s, const gm_3n_layer *L, const float *x, float r[NS], float *tmp) {
    const int d = s->d;
    gm_rmsnorm(tmp, x, L->router_norm, d, s->m->cfg.norm_eps);
    gm_scale(tmp, d, 1.0f / (float)d);
    for (int j = 0; j < NS; j++) r[j] = tanhf(s->dot(L->router + (size_t)j * d, tmp, d));
}

/* Layer start: predictions from the streams; x = the active prediction p0. */
static void gm_3n_predict(gm_3n_state *s, int il, float *x, int n) {
    const gm_3n_layer *L = &s->m->g3n->layers[il];
    const int d = s->d;
    for (int i = 0; i < n; i++) {
        float r[NS], c[NS * NS];
        router(s, L, stream(s->s, s, 0, i), r, s->t2 + (size_t)i * d);
        for (int m = 0; m < NS * NS; m++) {
            c[m] = 0.0f;
            for (int k = 0; k < NS; k++) c[m] += L->predict[m * NS + k] * r[k];
        }
        /* p_j = s_j + sum_k c[4j + k] s_k, summed over k first as llama.cpp's matmul does */
        for (int j = 0; j < NS; j++) {
            float *p = stream(s->p, s, j, i);
            const float *sj = stream(s->s, s, j, i);
            for (int e = 0; e < d; e++) {
                float acc = 0.0f;
                for (int k = 0; k < NS; k++) acc += stream(s->s, s, k, i)[e] * c[NS * j + k];
                p[e] = acc + sj[e];
            }
        }
        memcpy(x + (size_t)i * d, stream(s->p, s, 0, i), (size_t)d * sizeof(float));
    }
}

/* LAuReL of the normed input xn (kept until gm_3n_attn_residual). */
static gm_status gm_3n_laurel(gm_3n_state *s, int il, const float *xn, int n) {
    const gm_3n_layer *L = &s->m->g3n->layers[il];
    const int d = s->d;
    gm_status st;
    if ((st = gm_be_matmul(s->be, &L->laurel_l, xn, n, s->t)) ||
        (st = gm_be_matmul(s->be, &L->laurel_r, s->t, n, s->lau)))
        return st;
    for (int i = 0; i < n; i++) {
        float *lau = s->lau + (size_t)i * d;
        gm_rmsnorm(lau, lau, L->laurel_post_norm, d, s->m->cfg.norm_eps);
        gm_add(lau, xn + (size_t)i * d, d);
    }
    return GM_OK;
}

/* x holds p0 + attention: x = (x + lau) / sqrt 2. */
static void gm_3n_attn_residual(gm_3n_state *s, float *x, int n) {
    const size_t nd = (size_t)n * (size_t)s->d;
    gm_add(x, s->lau, (int)nd);
    gm_scale(x, (int)nd, 1.0f / sqrtf(2.0f));
}

/* Activation sparsity of n rows of ff gate values (GGUF: layers < GM_3N_SPARSE_LAYERS; HF: by the config). */
static void gm_3n_sparsify(const gm_3n_state *s, int il, float *gate, int n, int ff) {
    const gm_3n_variant *v = &s->m->g3n->v;
    const float mul = v->sparsity[il]; /* the standard normal's quantile of the target sparsity (0.95) */
    if (mul == 0.0f) return;
    for (int i = 0; i < n; i++) {
        float *g = gate + (size_t)i * ff;
        double sum = 0.0;
        for (int k = 0; k < ff; k++) sum += g[k];
        const float mean = (float)(sum / ff);
        double ss = 0.0;
        for (int k = 0; k < ff; k++) ss += (double)(g[k] - mean) * (g[k] - mean);
        /* llama.cpp divides by n - 1, HF by n */
        const float sd = sqrtf((float)ss * (1.0f / (float)(v->std_n ? ff : ff - 1)));
        const float cut = mean + sd * mul;
        for (int k = 0; k < ff; k++) g[k] = g[k] - cut > 0.0f ? g[k] - cut : 0.0f;
    }
}

/* Layer end: y (x) corrects the predictions into the new streams, plus the per-layer input. */
static gm_status gm_3n_correct(gm_3n_state *s, int il, const float *y, int n) {
    const gm_3n_layer *L = &s->m->g3n->layers[il];
    const gm_config *c = &s->m->cfg;
    const int d = s->d, P = GM_3N_PLE;
    for (int i = 0; i < n; i++) {
        const float *yi = y + (size_t)i * d, *p0 = stream(s->p, s, 0, i);
        float r[NS], cc[NS];
        router(s, L, yi, r, s->t2 + (size_t)i * d);
        for (int j = 0; j < NS; j++) {
            cc[j] = 0.0f;
            for (int k = 0; k < NS; k++) cc[j] += L->correct[j * NS + k] * r[k];
            cc[j] += 1.0f;
        }
        for (int j = 0; j < NS; j++) {
            float *sj = stream(s->s, s, j, i);
            const float *pj = stream(s->p, s, j, i);
            for (int e = 0; e < d; e++) sj[e] = (yi[e] - p0[e]) * cc[j] + pj[e];
        }
        /* the per-layer input's gate reads the corrected active stream times correct_scale */
        float *g = s->t2 + (size_t)i * d;
        const float *s0 = stream(s->s, s, 0, i);
        if (s->m->g3n->v.correct_scale)
            for (int e = 0; e < d; e++) g[e] = s0[e] * L->correct_scale[e];
        else
            memcpy(g, s0, (size_t)d * sizeof *g);
    }
    /* the per-layer input joins streams 1..3 */
    const size_t PL = (size_t)P * (size_t)c->n_layers;
    gm_status st = gm_ple_residual(&L->inp_gate, &L->proj, L->post_norm, c->norm_eps, s->t2, s->ple + (size_t)il * P, PL,
                                n, P, s->t, s->t2, s->be);
    if (st) return st;
    for (int i = 0; i < n; i++)
        for (int j = 1; j < NS; j++) gm_add(stream(s->s, s, j, i), s->t2 + (size_t)i * d, d);
    return GM_OK;
}

/* After the last layer: x = the mean of stream 0 and the unembedded streams 1..3. */
static gm_status gm_3n_end(gm_3n_state *s, float *x, int n) {
    const gm_3n_weights *w = s->m->g3n;
    const int d = s->d;
    /* streams 1..3 unembedded into p (free now), rescaled to stream 0's norm */
    for (int k = 1; k < NS; k++) {
        float *u = stream(s->p, s, k, 0);
        gm_status st = gm_be_matmul(s->be, &w->altup_unembd[k - 1], stream(s->s, s, k, 0), n, u);
        if (st) return st;
        for (int i = 0; i < n; i++) rescale_to(u + (size_t)i * d, d, l2norm(stream(s->s, s, 0, i), d));
    }
    for (int i = 0; i < n; i++) {
        float *h = x + (size_t)i * d;
        memcpy(h, stream(s->s, s, 0, i), (size_t)d * sizeof(float));
        for (int k = 1; k < NS; k++) gm_add(h, stream(s->p, s, k, i), d);
        gm_scale(h, d, 1.0f / (float)NS);
    }
    return GM_OK;
}

/* ------------------------------------------------------------------ the hooks of the forward pass */

static gm_status hk_new(const gm_model *m, int max_batch, gm_backend *be, void **state, gm_error *err) {
    gm_3n_state *s = NULL;
    gm_status st = gm_3n_state_new(m, max_batch, be, &s, err);
    *state = s;
    return st;
}
static void hk_free(void *s) { gm_3n_state_free(s); }
static gm_status hk_begin(void *s, const gm_fwd_row *rows, const float *x, int n) { return gm_3n_begin(s, rows, x, n); }
static gm_status hk_predict(void *s, int il, float *x, int n) {
    gm_3n_predict(s, il, x, n);
    return GM_OK;
}
static gm_status hk_laurel(void *s, int il, const float *xn, int n) { return gm_3n_laurel(s, il, xn, n); }
static gm_status hk_attn_residual(void *s, int il, float *x, int n) {
    (void)il;
    gm_3n_attn_residual(s, x, n);
    return GM_OK;
}
static gm_status hk_sparsify(void *s, int il, float *gate, int n, int ff) {
    gm_3n_sparsify(s, il, gate, n, ff);
    return GM_OK;
}
static gm_status hk_correct(void *s, int il, float *x, int n) { return gm_3n_correct(s, il, x, n); }
static gm_status hk_end(void *s, float *x, int n) { return gm_3n_end(s, x, n); }

const gm_forward_hooks gm_3n_forward_hooks = {
    .state_new = hk_new,
    .state_free = hk_free,
    .chunk_begin = hk_begin,
    .layer_begin = hk_predict,
    .attn_input = hk_laurel,
    .attn_residual = hk_attn_residual,
    .ffn_gate = hk_sparsify,
    .layer_end = hk_correct,
    .chunk_end = hk_end,
};
