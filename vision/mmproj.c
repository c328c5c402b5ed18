/* vision/mmproj.c — reads and validates a Gemma 3 mmproj GGUF (keys and tensors as llama.cpp's converter
 * writes them: ../shared/docs/vision-facts.md section 1 mirrors conversion/gemma.py and clip.cpp). Every
 * shape is checked against the keys before anything is computed, so the forward pass never reads outside
 * a tensor; whatever llama.cpp would run differently from the math we implement is refused, not guessed. */
#include "vision/mmproj.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cpu.h"
#include "quant/quant.h"
#include "vision/mmproj_hf.h"

/* Bounds on the keys: far above any Gemma, low enough that the scratch sizes cannot overflow. */
enum { MAX_IMAGE = 4096, MAX_WIDTH = 16384, MAX_FF = 65536, MAX_LAYERS = 256, MAX_PROJ = 65536 };

gm_status mmp_get_dim(const gguf_file *f, const char *key, int lo, int hi, int *out, gm_error *err) {
    uint32_t v;
    gm_status st = gguf_get_u32(f, key, &v, err);
    if (st) return st;
    if (v < (uint32_t)lo || v > (uint32_t)hi)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s = %u is outside [%d, %d]", key, v, lo, hi);
    *out = (int)v;
    return GM_OK;
}

/* An optional key: absent leaves *out (the default). */
gm_status mmp_get_opt_dim(const gguf_file *f, const char *key, int lo, int hi, int *out, gm_error *err) {
    return gguf_find(f, key) ? mmp_get_dim(f, key, lo, hi, out, err) : GM_OK;
}

gm_status mmp_get_opt_bool(const gguf_file *f, const char *key, bool *out, gm_error *err) {
    *out = false;
    return gguf_find(f, key) ? gguf_get_bool(f, key, out, err) : GM_OK;
}

bool mmp_str_is(gguf_str s, const char *want) { return s.len == strlen(want) && !memcmp(s.ptr, want, s.len); }

/* image_mean / image_std: llama.cpp reads the first three values and throws on fewer */
gm_status mmp_get_rgb(const gguf_file *f, const char *key, float out[3], gm_error *err) {
    const gguf_value *a;
    gm_status st = gguf_get_arr(f, key, GGUF_VT_F32, &a, err);
    if (st) return st;
    if (a->v.arr.n < 3) return gm_fail(err, GM_ERR_FORMAT, "%s has %llu values, not 3", key, (unsigned long long)a->v.arr.n);
    memcpy(out, a->v.arr.data, 3 * sizeof(float)); /* GGUF is little-endian, as every host we build for */
    return GM_OK;
}

gm_status mmp_projector(const gguf_file *f, gguf_str *type, const char **key, gm_error *err) {
    gguf_str s;
    gm_status st = gguf_get_str(f, "general.architecture", &s, err);
    if (st) return st;
    if (!mmp_str_is(s, "clip"))
        return gm_fail(err, GM_ERR_UNSUPPORTED, "general.architecture is \"%.*s\", not \"clip\" (not an mmproj file)",
                       (int)s.len, s.ptr);
    bool has = false;
    if ((st = gguf_get_bool(f, "clip.has_vision_encoder", &has, err))) return st;
    if (!has) return gm_fail(err, GM_ERR_UNSUPPORTED, "clip.has_vision_encoder is false: no image encoder in this file");
    /* a mixed-modality file names the vision projector apart (llama.cpp prefers it) */
    *key = gguf_find(f, "clip.vision.projector_type") ? "clip.vision.projector_type" : "clip.projector_type";
    return gguf_get_str(f, *key, type, err);
}

/* The file is a vision encoder with the Gemma 3 projector. */
static gm_status check_kind(const gguf_file *f, gm_error *err) {
    gguf_str s;
    const char *key;
    gm_status st = mmp_projector(f, &s, &key, err);
    if (st) return st;
    if (!mmp_str_is(s, "gemma3"))
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s is \"%.*s\": only \"gemma3\" and \"gemma4v\" are supported", key,
                       (int)s.len, s.ptr);
    return GM_OK;
}

static gm_status read_act(const gguf_file *f, vit_act *act, gm_error *err) {
    bool gelu, silu;
    gm_status st = mmp_get_opt_bool(f, "clip.use_gelu", &gelu, err);
    if (!st) st = mmp_get_opt_bool(f, "clip.use_silu", &silu, err);
    if (st) return st;
    if (gelu && silu) return gm_fail(err, GM_ERR_FORMAT, "clip.use_gelu and clip.use_silu are both true");
    *act = gelu ? VIT_GELU_TANH : silu ? VIT_SILU : VIT_GELU_QUICK;
    return GM_OK;
}

/* The shape rules the forward pass relies on, between keys. */
static gm_status check_config(const vit_config *c, gm_error *err) {
    if (c->image_size % c->patch_size)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "clip.vision.image_size %d is not a multiple of patch_size %d",
                       c->image_size, c->patch_size);
    if (c->grid % c->scale)
        return gm_fail(err, GM_ERR_UNSUPPORTED,
                       "clip.vision.projector.scale_factor %d does not divide the %d patches per side", c->scale, c->grid);
    if (c->n_embd % c->n_head)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "clip.vision.embedding_length %d is not a multiple of head_count %d",
                       c->n_embd, c->n_head);
    /* llama.cpp takes ffn_down with ne[0] == width for a swapped up/down pair: with n_ff == width it would
     * swap a correct file, so the two programs would disagree on it */
    if (c->n_ff == c->n_embd)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "clip.vision.feed_forward_length equals embedding_length (%d): "
                       "llama.cpp reads such a file with up and down swapped", c->n_ff);
    return GM_OK;
}

static gm_status read_config(const gguf_file *f, vit_config *c, gm_error *err) {
    memset(c, 0, sizeof *c);
    gm_status st = check_kind(f, err);
    if (!st) st = mmp_get_dim(f, "clip.vision.image_size", 1, MAX_IMAGE, &c->image_size, err);
    if (!st) st = mmp_get_dim(f, "clip.vision.patch_size", 1, MAX_IMAGE, &c->patch_size, err);
    if (!st) st = mmp_get_dim(f, "clip.vision.embedding_length", 1, MAX_WIDTH, &c->n_embd, err);
    if (!st) st = mmp_get_dim(f, "clip.vision.feed_forward_length", 1, MAX_FF, &c->n_ff, err);
    if (!st) st = mmp_get_dim(f, "clip.vision.block_count", 1, MAX_LAYERS, &c->n_layers, err);
    if (!st) st = mmp_get_dim(f, "clip.vision.attention.head_count", 1, MAX_WIDTH, &c->n_head, err);
    if (!st) st = mmp_get_dim(f, "clip.vision.projection_dim", 1, MAX_PROJ, &c->proj_dim, err);
    if (!st) st = gguf_get_f32(f, "clip.vision.attention.layer_norm_epsilon", &c->eps, err);
    if (!st) st = mmp_get_rgb(f, "clip.vision.image_mean", c->mean, err);
    if (!st) st = mmp_get_rgb(f, "clip.vision.image_std", c->std, err);
    if (!st) st = read_act(f, &c->act, err);
    c->scale = 4; /* llama.cpp's default for every Gemma 3 */
    if (!st) st = mmp_get_opt_dim(f, "clip.vision.projector.scale_factor", 1, MAX_IMAGE, &c->scale, err);
    if (st) return st;
    if (!(c->eps > 0 && c->eps < 1)) return gm_fail(err, GM_ERR_FORMAT, "clip.vision.attention.layer_norm_epsilon %g", c->eps);
    for (int i = 0; i < 3; i++)
        if (!(c->std[i] != 0)) return gm_fail(err, GM_ERR_FORMAT, "clip.vision.image_std[%d] is %g", i, c->std[i]);
    c->grid = c->image_size / c->patch_size;
    c->n_patches = c->grid * c->grid;
    c->head_dim = c->n_embd / c->n_head;
    if ((st = check_config(c, err))) return st;
    c->n_tokens = (c->grid / c->scale) * (c->grid / c->scale);
    /* grouped heads or another head size would be a different attention: refuse rather than ignore */
    int kv = c->n_head, hd = c->head_dim;
    if ((st = mmp_get_opt_dim(f, "clip.vision.attention.head_count_kv", 1, MAX_WIDTH, &kv, err))) return st;
    if ((st = mmp_get_opt_dim(f, "clip.vision.attention.head_dim", 1, MAX_WIDTH, &hd, err))) return st;
    if (kv != c->n_head || hd != c->head_dim)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "attention.head_count_kv %d / head_dim %d: only %d heads of %d (width / heads)",
                       kv, hd, c->n_head, c->head_dim);
    return GM_OK;
}

/* ---- tensors */

gm_status mmp_get_tensor(const gguf_file *f, const char *name, int64_t n0, int64_t n1, int64_t n2, int64_t n3,
                            const gguf_tensor **out, gm_error *err) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return gm_fail(err, GM_ERR_NOT_FOUND, "tensor %s is missing", name);
    const int64_t want[4] = {n0, n1, n2, n3};
    if (memcmp(t->ne, want, sizeof want))
        return gm_fail(err, GM_ERR_FORMAT, "tensor %s has shape {%lld, %lld, %lld, %lld}, expected {%lld, %lld, %lld, %lld}",
                       name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                       (long long)n0, (long long)n1, (long long)n2, (long long)n3);
    *out = t;
    return GM_OK;
}

/* A matrix read in place: rows x cols in ggml order, of a type gm_matmul runs at any cols. */
gm_status mmp_get_matrix(const gguf_file *f, const char *name, int64_t cols, int64_t rows, gm_matrix *m,
                         gm_error *err) {
    const gguf_tensor *t;
    gm_status st = mmp_get_tensor(f, name, cols, rows, 1, 1, &t, err);
    if (st) return st;
    const gm_type_traits *tr = gm_type_traits_of(t->type);
    if (!tr || !tr->vec_dot || !gm_row_bytes(t->type, cols))
        return gm_fail(err, GM_ERR_UNSUPPORTED, "tensor %s: type %s with %lld columns has no matmul kernel", name,
                       gm_type_name(t->type), (long long)cols);
    *m = (gm_matrix){.type = t->type, .rows = rows, .cols = cols, .data = t->data};
    return GM_OK;
}

/* n elements of t as f32 into the arena */
gm_status mmp_dequant(const gguf_tensor *t, int64_t n, mmp_arena *a, const float **out, gm_error *err) {
    const gm_type_traits *tr = gm_type_traits_of(t->type);
    if (!tr || !tr->dequant_row || !gm_row_bytes(t->type, n))
        return gm_fail(err, GM_ERR_UNSUPPORTED, "tensor %s: type %s cannot be read as floats", t->name, gm_type_name(t->type));
    if (a->used + (size_t)n > a->cap) return gm_fail(err, GM_ERR_INTERNAL, "vision weight arena too small");
    float *dst = a->p + a->used;
    tr->dequant_row(t->data, dst, n);
    a->used += (size_t)n;
    *out = dst;
    return GM_OK;
}

gm_status mmp_get_vec(const gguf_file *f, const char *name, int64_t n, mmp_arena *a, const float **out, gm_error *err) {
    const gguf_tensor *t;
    gm_status st = mmp_get_tensor(f, name, n, 1, 1, 1, &t, err);
    return st ? st : mmp_dequant(t, n, a, out, err);
}

static size_t arena_floats(const vit_config *c) {
    const size_t D = (size_t)c->n_embd;
    const size_t per_layer = 9 * D + (size_t)c->n_ff; /* 4 attention biases, 4 LayerNorm vectors, 2 FFN biases */
    return (size_t)c->n_layers * per_layer + 4 * D + (size_t)c->n_patches * D + 2 * D * (size_t)c->proj_dim;
}

static gm_status load_layer(const gguf_file *f, int il, const vit_config *c, mmp_arena *a, vit_layer *l,
                            gm_error *err) {
    const int64_t D = c->n_embd, F = c->n_ff;
    struct { const char *name; gm_matrix *m; const float **b; int64_t cols, rows; } mats[] = {
        {"attn_q", &l->q, &l->bq, D, D},     {"attn_k", &l->k, &l->bk, D, D},
        {"attn_v", &l->v, &l->bv, D, D},     {"attn_out", &l->o, &l->bo, D, D},
        {"ffn_up", &l->up, &l->bup, D, F},   {"ffn_down", &l->down, &l->bdown, F, D},
    };
    char name[96];
    gm_status st = GM_OK;
    for (size_t i = 0; i < sizeof mats / sizeof mats[0] && !st; i++) {
        snprintf(name, sizeof name, "v.blk.%d.%s.weight", il, mats[i].name);
        st = mmp_get_matrix(f, name, mats[i].cols, mats[i].rows, mats[i].m, err);
        snprintf(name, sizeof name, "v.blk.%d.%s.bias", il, mats[i].name);
        if (!st) st = mmp_get_vec(f, name, mats[i].rows, a, mats[i].b, err);
    }
    struct { const char *name; const float **p; } vecs[] = {
        {"ln1.weight", &l->ln1_w}, {"ln1.bias", &l->ln1_b}, {"ln2.weight", &l->ln2_w}, {"ln2.bias", &l->ln2_b}};
    for (size_t i = 0; i < 4 && !st; i++) {
        snprintf(name, sizeof name, "v.blk.%d.%s", il, vecs[i].name);
        st = mmp_get_vec(f, name, D, a, vecs[i].p, err);
    }
    return st;
}

/* mm.input_projection {proj_dim, n_embd} is used as x W (llama.cpp transposes it): stored here transposed, f32,
 * so gm_matmul's y = x W^T computes it */
static gm_status load_projection(const gguf_file *f, const vit_config *c, mmp_arena *a, gm_matrix *proj, gm_error *err) {
    const gguf_tensor *t;
    const int64_t D = c->n_embd, PD = c->proj_dim;
    gm_status st = mmp_get_tensor(f, "mm.input_projection.weight", PD, D, 1, 1, &t, err);
    const float *rows = NULL;
    if (!st) st = mmp_dequant(t, PD * D, a, &rows, err); /* the file's layout first, then transposed after it */
    if (st) return st;
    if (a->used + (size_t)(PD * D) > a->cap) return gm_fail(err, GM_ERR_INTERNAL, "vision weight arena too small");
    float *tr = a->p + a->used;
    a->used += (size_t)(PD * D);
    for (int64_t k = 0; k < D; k++)
        for (int64_t j = 0; j < PD; j++) tr[j * D + k] = rows[k * PD + j];
    *proj = (gm_matrix){.type = GM_TYPE_F32, .rows = PD, .cols = D, .data = tr};
    return GM_OK;
}

static gm_status load_tensors(const gguf_file *f, vit_weights *w, mmp_arena *a, gm_error *err) {
    const vit_config *c = &w->cfg;
    const int64_t D = c->n_embd, P = c->patch_size;
    const gguf_tensor *t;
    gm_status st = mmp_get_tensor(f, "v.patch_embd.weight", P, P, 3, D, &t, err);
    const gm_type_traits *tr = st ? NULL : gm_type_traits_of(t->type);
    if (!st && (!tr || !tr->vec_dot || !gm_row_bytes(t->type, 3 * P * P)))
        st = gm_fail(err, GM_ERR_UNSUPPORTED, "tensor v.patch_embd.weight: type %s has no matmul kernel", gm_type_name(t->type));
    if (!st) {
        w->patch = (gm_matrix){.type = t->type, .rows = D, .cols = 3 * P * P, .data = t->data};
        st = mmp_get_vec(f, "v.patch_embd.bias", D, a, &w->patch_b, err);
    }
    if (!st && !(st = mmp_get_tensor(f, "v.position_embd.weight", D, c->n_patches, 1, 1, &t, err)))
        st = mmp_dequant(t, D * c->n_patches, a, &w->pos, err);
    for (int il = 0; il < c->n_layers && !st; il++) st = load_layer(f, il, c, a, &w->layers[il], err);
    if (!st) st = mmp_get_vec(f, "v.post_ln.weight", D, a, &w->post_w, err);
    if (!st) st = mmp_get_vec(f, "v.post_ln.bias", D, a, &w->post_b, err);
    if (!st) st = mmp_get_vec(f, "mm.soft_emb_norm.weight", D, a, &w->soft_norm, err);
    if (!st) st = load_projection(f, c, a, &w->proj, err);
    return st;
}

gm_status vit_load(const char *path, vit_weights *w, gm_error *err) {
    memset(w, 0, sizeof *w);
    gm_status st = mmp_open(path, &w->file, &w->hf, err);
    if (st) return st; /* the reader's message names the file */
    if ((st = read_config(w->file, &w->cfg, err))) goto fail;
    mmp_arena a = {.cap = arena_floats(&w->cfg)};
    w->arena = a.p = malloc(a.cap * sizeof(float));
    w->layers = calloc((size_t)w->cfg.n_layers, sizeof *w->layers);
    if (!a.p || !w->layers) {
        st = gm_fail(err, GM_ERR_NOMEM, "vision weights: %zu floats", a.cap);
        goto fail;
    }
    if ((st = load_tensors(w->file, w, &a, err))) goto fail;
    return GM_OK;
fail:
    vit_weights_free(w);
    return gm_fail_prefix(err, "%s: ", path);
}

void vit_weights_free(vit_weights *w) {
    if (!w) return;
    free(w->arena);
    free(w->layers);
    mmp_close(w->file, w->hf);
    memset(w, 0, sizeof *w);
}
