/* vision/mmproj_gemma4.c — reads and validates a Gemma 4 mmproj GGUF (clip.vision.projector_type "gemma4v", as
 * llama.cpp's conversion/gemma.py Gemma4VisionAudioModel writes it; ../shared/docs/vision-facts.md section 3).
 * Every shape is checked against the keys before anything runs; tensors llama.cpp would apply and our forward
 * does not know (biases, pre / post LayerNorms, layer scales) are refused rather than ignored. */
#include "vision/mmproj_gemma4.h"
#include "gemma_vision.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cpu.h"
#include "quant/quant.h"
#include "vision/mmproj_hf.h"

/* Bounds on the keys: far above any Gemma, low enough that the scratch sizes cannot overflow. */
enum { MAX_PATCH = 1024, MAX_WIDTH = 16384, MAX_FF = 65536, MAX_LAYERS = 256, MAX_PROJ = 65536, MAX_TOKENS = 65536,
       MAX_PATCHES = 1 << 20, MAX_POS = 1 << 20 };

/* clip.use_gelu / use_silu as llama.cpp reads them; neither (what the converter writes) is the choice the
 * options make: gelu_tanh as transformers trained the model (gelu_pytorch_tanh), or llama.cpp's gelu_quick. */
static gm_status read_act(const gguf_file *f, bool llama_cpp_act, vit_act *act, gm_error *err) {
    bool gelu, silu;
    gm_status st = mmp_get_opt_bool(f, "clip.use_gelu", &gelu, err);
    if (!st) st = mmp_get_opt_bool(f, "clip.use_silu", &silu, err);
    if (st) return st;
    if (gelu && silu) return gm_fail(err, GM_ERR_FORMAT, "clip.use_gelu and clip.use_silu are both true");
    *act = gelu ? VIT_GELU_TANH : silu ? VIT_SILU : llama_cpp_act ? VIT_GELU_QUICK : VIT_GELU_TANH;
    return GM_OK;
}

/* The token bounds of the size rule: the options', else llama.cpp's; the scratch is sized by the maximum. */
static gm_status read_bounds(const gm_vision_options *o, g4v_config *c, gm_error *err) {
    c->min_tokens = o->image_min_tokens > 0 ? o->image_min_tokens : G4V_MIN_TOKENS;
    c->max_tokens = o->image_max_tokens > 0 ? o->image_max_tokens : G4V_MAX_TOKENS;
    if (c->max_tokens > MAX_TOKENS || c->min_tokens > c->max_tokens)
        return gm_fail(err, GM_ERR_ARG, "gm_vision_options: image tokens %d..%d (at most %d, min <= max)", c->min_tokens,
                       c->max_tokens, MAX_TOKENS);
    if ((int64_t)c->max_tokens * c->pool * c->pool > MAX_PATCHES)
        return gm_fail(err, GM_ERR_ARG, "gm_vision_options: %d tokens of %d x %d patches is too many", c->max_tokens,
                       c->pool, c->pool);
    c->max_patches = c->max_tokens * c->pool * c->pool;
    return GM_OK;
}

static gm_status check_config(const g4v_config *c, gm_error *err) {
    if (c->n_embd % c->n_head)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "clip.vision.embedding_length %d is not a multiple of head_count %d",
                       c->n_embd, c->n_head);
    /* 2D RoPE: each half of a head is a NEOX rotation, so a half has an even number of dims */
    if (c->head_dim % 4)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "head dim %d is not a multiple of 4 (2D RoPE over two halves)", c->head_dim);
    if (!(c->eps > 0 && c->eps < 1)) return gm_fail(err, GM_ERR_FORMAT, "clip.vision.attention.layer_norm_epsilon %g", c->eps);
    for (int i = 0; i < 3; i++)
        if (!(c->std[i] != 0)) return gm_fail(err, GM_ERR_FORMAT, "clip.vision.image_std[%d] is %g", i, c->std[i]);
    return GM_OK;
}

/* Grouped heads or another head size would be another attention: refused rather than ignored. */
static gm_status check_heads(const gguf_file *f, const g4v_config *c, gm_error *err) {
    int kv = c->n_head, hd = c->head_dim;
    gm_status st = mmp_get_opt_dim(f, "clip.vision.attention.head_count_kv", 1, MAX_WIDTH, &kv, err);
    if (!st) st = mmp_get_opt_dim(f, "clip.vision.attention.head_dim", 1, MAX_WIDTH, &hd, err);
    if (st) return st;
    if (kv != c->n_head || hd != c->head_dim)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "attention.head_count_kv %d / head_dim %d: only %d heads of %d (width / heads)",
                       kv, hd, c->n_head, c->head_dim);
    return GM_OK;
}

static gm_status read_config(const gguf_file *f, const gm_vision_options *o, g4v_config *c, gm_error *err) {
    memset(c, 0, sizeof *c);
    /* clip.vision.image_size is a dummy (224) for Gemma 4: sizes are chosen per image */
    gm_status st = mmp_get_dim(f, "clip.vision.patch_size", 1, MAX_PATCH, &c->patch_size, err);
    if (!st) st = mmp_get_dim(f, "clip.vision.embedding_length", 1, MAX_WIDTH, &c->n_embd, err);
    if (!st) st = mmp_get_dim(f, "clip.vision.feed_forward_length", 1, MAX_FF, &c->n_ff, err);
    if (!st) st = mmp_get_dim(f, "clip.vision.block_count", 1, MAX_LAYERS, &c->n_layers, err);
    if (!st) st = mmp_get_dim(f, "clip.vision.attention.head_count", 1, MAX_WIDTH, &c->n_head, err);
    if (!st) st = mmp_get_dim(f, "clip.vision.projection_dim", 1, MAX_PROJ, &c->proj_dim, err);
    if (!st) st = gguf_get_f32(f, "clip.vision.attention.layer_norm_epsilon", &c->eps, err);
    if (!st) st = mmp_get_rgb(f, "clip.vision.image_mean", c->mean, err);
    if (!st) st = mmp_get_rgb(f, "clip.vision.image_std", c->std, err);
    if (!st) st = read_act(f, o->llama_cpp_act, &c->act, err);
    c->pool = G4V_POOL;
    if (!st) st = mmp_get_opt_dim(f, "clip.vision.projector.scale_factor", 1, 64, &c->pool, err);
    if (st) return st;
    c->head_dim = c->n_embd / c->n_head;
    c->align = c->patch_size * c->pool;
    if ((st = check_config(c, err)) || (st = check_heads(f, c, err))) return st;
    return read_bounds(o, c, err);
}

/* ---- tensors */

/* What llama.cpp's build_vit would apply if present and Gemma 4 has not: refused, so both programs agree. */
static gm_status check_no_extras(const gguf_file *f, gm_error *err) {
    static const char *const subs[] = {".ls1.", ".ls2.", ".attn_qkv.", "v.pre_ln.", "v.post_ln.", "v.patch_embd.bias"};
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const char *n = f->tensors[i].name;
        if (strncmp(n, "v.", 2)) continue; /* audio tensors of a mixed file are not ours */
        size_t len = strlen(n);
        bool extra = len > 5 && !strcmp(n + len - 5, ".bias");
        for (size_t k = 0; k < sizeof subs / sizeof subs[0] && !extra; k++) extra = strstr(n, subs[k]) != NULL;
        if (extra) return gm_fail(err, GM_ERR_UNSUPPORTED, "tensor %s: not part of the Gemma 4 vision encoder", n);
    }
    return GM_OK;
}

/* An optional 1-element tensor (a clamp bound), read as f32. */
static gm_status get_scalar(const gguf_file *f, const char *name, bool *found, float *out, gm_error *err) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return GM_OK;
    const gm_type_traits *tr = gm_type_traits_of(t->type);
    if (t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3] != 1)
        return gm_fail(err, GM_ERR_FORMAT, "tensor %s: a clamp bound has 1 element, not %lld", name,
                       (long long)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]));
    if (!tr || !tr->dequant_row || !gm_row_bytes(t->type, 1))
        return gm_fail(err, GM_ERR_UNSUPPORTED, "tensor %s: type %s cannot be read as a float", name, gm_type_name(t->type));
    tr->dequant_row(t->data, out, 1);
    *found = true;
    return GM_OK;
}

/* base.weight {cols, rows} and its optional clamp bounds base.{input,output}_{min,max}. */
static gm_status get_linear(const gguf_file *f, const char *base, int64_t cols, int64_t rows, g4v_linear *l,
                            gm_error *err) {
    char name[128];
    snprintf(name, sizeof name, "%s.weight", base);
    gm_status st = mmp_get_matrix(f, name, cols, rows, &l->w, err);
    l->in_min = l->out_min = -FLT_MAX;
    l->in_max = l->out_max = FLT_MAX;
    struct { const char *suffix; float *v; bool *on; } b[] = {
        {"input_min", &l->in_min, &l->clamp_in},   {"input_max", &l->in_max, &l->clamp_in},
        {"output_min", &l->out_min, &l->clamp_out}, {"output_max", &l->out_max, &l->clamp_out}};
    for (size_t i = 0; i < 4 && !st; i++) {
        snprintf(name, sizeof name, "%s.%s", base, b[i].suffix);
        st = get_scalar(f, name, b[i].on, b[i].v, err);
    }
    return st;
}

static gm_status get_out_scale(const gguf_file *f, int il, const g4v_config *c, mmp_arena *a, g4v_layer *l, gm_error *err) {
    char name[96];
    snprintf(name, sizeof name, "v.blk.%d.out_scale.weight", il);
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return GM_OK;
    /* HF's layer_scalar is one number; ggml_mul would broadcast a full row as well */
    const int64_t n = t->ne[0] == 1 ? 1 : c->n_embd;
    gm_status st = mmp_get_tensor(f, name, n, 1, 1, 1, &t, err);
    if (!st) st = mmp_dequant(t, n, a, &l->out_scale, err);
    l->out_scale_n = (int)n;
    return st;
}

static gm_status load_layer(const gguf_file *f, int il, const g4v_config *c, mmp_arena *a, g4v_layer *l,
                            gm_error *err) {
    const int64_t D = c->n_embd, F = c->n_ff, hd = c->head_dim;
    struct { const char *name; g4v_linear *l; int64_t cols, rows; } lin[] = {
        {"attn_q", &l->q, D, D},      {"attn_k", &l->k, D, D},    {"attn_v", &l->v, D, D}, {"attn_out", &l->o, D, D},
        {"ffn_gate", &l->gate, D, F}, {"ffn_up", &l->up, D, F},   {"ffn_down", &l->down, F, D}};
    char name[96];
    gm_status st = GM_OK;
    for (size_t i = 0; i < sizeof lin / sizeof lin[0] && !st; i++) {
        snprintf(name, sizeof name, "v.blk.%d.%s", il, lin[i].name);
        st = get_linear(f, name, lin[i].cols, lin[i].rows, lin[i].l, err);
    }
    struct { const char *name; const float **p; int64_t n; } vecs[] = {
        {"ln1", &l->ln1, D}, {"ln2", &l->ln2, D}, {"attn_q_norm", &l->q_norm, hd}, {"attn_k_norm", &l->k_norm, hd},
        {"attn_post_norm", &l->attn_post, D}, {"ffn_post_norm", &l->ffn_post, D}};
    for (size_t i = 0; i < sizeof vecs / sizeof vecs[0] && !st; i++) {
        snprintf(name, sizeof name, "v.blk.%d.%s.weight", il, vecs[i].name);
        st = mmp_get_vec(f, name, vecs[i].n, a, vecs[i].p, err);
    }
    return st ? st : get_out_scale(f, il, c, a, l, err);
}

static gm_status load_patch(const gguf_file *f, const g4v_config *c, g4v_weights *w, gm_error *err) {
    const int64_t P = c->patch_size;
    const gguf_tensor *t;
    gm_status st = mmp_get_tensor(f, "v.patch_embd.weight", P, P, 3, c->n_embd, &t, err);
    if (st) return st;
    const gm_type_traits *tr = gm_type_traits_of(t->type);
    if (!tr || !tr->vec_dot || !gm_row_bytes(t->type, 3 * P * P))
        return gm_fail(err, GM_ERR_UNSUPPORTED, "tensor v.patch_embd.weight: type %s has no matmul kernel", gm_type_name(t->type));
    w->patch = (gm_matrix){.type = t->type, .rows = c->n_embd, .cols = 3 * P * P, .data = t->data};
    return GM_OK;
}

/* The position tables {n_embd, rows, 2}: rows (the most patches per side) come from the tensor. */
static gm_status load_positions(const gguf_file *f, g4v_config *c, mmp_arena *a, g4v_weights *w, gm_error *err) {
    const gguf_tensor *t = gguf_find_tensor(f, "v.position_embd.weight");
    if (!t) return gm_fail(err, GM_ERR_NOT_FOUND, "tensor v.position_embd.weight is missing");
    if (t->ne[1] < 1 || t->ne[1] > MAX_POS)
        return gm_fail(err, GM_ERR_FORMAT, "tensor v.position_embd.weight has %lld rows", (long long)t->ne[1]);
    c->pos_rows = (int)t->ne[1];
    gm_status st = mmp_get_tensor(f, "v.position_embd.weight", c->n_embd, c->pos_rows, 2, 1, &t, err);
    if (st) return st;
    if (t->type == GM_TYPE_F32) { /* as the converter writes it: read in place (94 MB at 10240 x 1152 x 2) */
        w->pos = t->data;
        return GM_OK;
    }
    return mmp_dequant(t, 2 * (int64_t)c->pos_rows * c->n_embd, a, &w->pos, err);
}

static gm_status load_standardize(const gguf_file *f, const g4v_config *c, mmp_arena *a, g4v_weights *w, gm_error *err) {
    const bool b = gguf_find_tensor(f, "v.std_bias") != NULL, s = gguf_find_tensor(f, "v.std_scale") != NULL;
    if (b != s) return gm_fail(err, GM_ERR_FORMAT, "v.std_bias and v.std_scale come together (only %s is here)",
                               b ? "v.std_bias" : "v.std_scale");
    gm_status st = b ? mmp_get_vec(f, "v.std_bias", c->n_embd, a, &w->std_bias, err) : GM_OK;
    return st || !s ? st : mmp_get_vec(f, "v.std_scale", c->n_embd, a, &w->std_scale, err);
}

static size_t arena_floats(const gguf_file *f, const g4v_config *c) {
    const gguf_tensor *t = gguf_find_tensor(f, "v.position_embd.weight");
    const bool copied = t && t->type != GM_TYPE_F32 && t->ne[1] > 0 && t->ne[1] <= MAX_POS; /* else read in place */
    const size_t D = (size_t)c->n_embd, rows = copied ? (size_t)t->ne[1] : 0;
    const size_t per_layer = 5 * D + 2 * (size_t)c->head_dim; /* 4 norms + out_scale; q / k norms */
    return (size_t)c->n_layers * per_layer + 2 * D + 2 * rows * D;
}

static gm_status load_tensors(const gguf_file *f, g4v_weights *w, mmp_arena *a, gm_error *err) {
    g4v_config *c = &w->cfg;
    gm_status st = check_no_extras(f, err);
    if (!st) st = load_patch(f, c, w, err);
    if (!st) st = load_positions(f, c, a, w, err);
    for (int il = 0; il < c->n_layers && !st; il++) st = load_layer(f, il, c, a, &w->layers[il], err);
    if (!st) st = load_standardize(f, c, a, w, err);
    if (!st) st = get_linear(f, "mm.input_projection", c->n_embd, c->proj_dim, &w->proj, err);
    return st;
}

gm_status g4v_load(const char *path, const gm_vision_options *o, g4v_weights *w, gm_error *err) {
    memset(w, 0, sizeof *w);
    gm_status st = mmp_open(path, &w->file, &w->hf, err);
    if (st) return st;
    if ((st = read_config(w->file, o, &w->cfg, err))) goto fail;
    mmp_arena a = {.cap = arena_floats(w->file, &w->cfg)};
    w->arena = a.p = malloc(a.cap * sizeof(float));
    w->layers = calloc((size_t)w->cfg.n_layers, sizeof *w->layers);
    if (!a.p || !w->layers) {
        st = gm_fail(err, GM_ERR_NOMEM, "vision weights: %zu floats", a.cap);
        goto fail;
    }
    if ((st = load_tensors(w->file, w, &a, err))) goto fail;
    return GM_OK;
fail:
    g4v_weights_free(w);
    return gm_fail_prefix(err, "%s: ", path);
}

void g4v_weights_free(g4v_weights *w) {
    if (!w) return;
    free(w->arena);
    free(w->layers);
    mmp_close(w->file, w->hf);
    memset(w, 0, sizeof *w);
}
