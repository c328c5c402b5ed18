/* vision/mmproj_hf.c — a Hugging Face Gemma 3 / Gemma 4 folder read as the mmproj llama.cpp's converter makes
 * of it (conversion/gemma.py Gemma3VisionModel, Gemma4VisionAudioModel; conversion/base.py MmprojModel for the
 * keys; gguf-py's tensor_mapping.py for the names): keys from config.json (vision_config, text_config.hidden_size,
 * mm_tokens_per_image) and preprocessor_config.json, tensors renamed, shapes reversed into ggml order. Every
 * tensor is checked here against config.json in HF terms (its HF name and torch shape), so an error names what
 * the folder holds; the loaders check the assembled file again as they check any GGUF. */
#include "vision/mmproj_hf.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "formats/safetensors.h"
#include "quant/quant.h"

enum { MAX_DIM = 65536, MAX_JSON = 16 * 1024 * 1024, MAX_OWNED = 4, MAX_KV = 24 };

struct mmp_hf {
    st_set *st;                /* the views' map */
    float *owned[MAX_OWNED];   /* transformed copies */
    int n_owned;
};

/* The mmproj being assembled. */
typedef struct hf_build {
    const char *dir;
    cJSON *cfg;                 /* config.json */
    const cJSON *vc;            /* its vision_config */
    mmp_hf *hf;
    gguf_kv kv[MAX_KV];
    int n_kv;
    gguf_tensor *t;             /* names malloc'd until assembled */
    size_t n_t, cap_t;
    const st_tensor **used;     /* the HF tensors taken, to find the ones nobody took */
    size_t n_used;
    float mean[3], std[3];
} hf_build;

bool mmp_is_folder(const char *path) {
    struct stat s;
    return path && stat(path, &s) == 0 && S_ISDIR(s.st_mode);
}

/* ------------------------------------------------------------------ JSON */

/* dir/name parsed; absent: *out NULL, GM_OK unless required. */
static gm_status read_json(const char *dir, const char *name, bool required, cJSON **out, gm_error *err) {
    *out = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat s;
    if (stat(path, &s) != 0 || !S_ISREG(s.st_mode)) /* a regular file: never block on a FIFO */
        return required ? gm_fail(err, GM_ERR_NOT_FOUND, "no %s in the folder", name) : GM_OK;
    if (s.st_size > MAX_JSON) return gm_fail(err, GM_ERR_FORMAT, "%s: larger than %d bytes", name, MAX_JSON);
    FILE *f = fopen(path, "rb");
    char *text = malloc((size_t)s.st_size + 1);
    size_t len = f && text ? fread(text, 1, (size_t)s.st_size, f) : 0;
    if (f) fclose(f);
    if (text) *out = cJSON_ParseWithLength(text, len);
    free(text);
    if (!text) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", name);
    if (cJSON_IsObject(*out)) return GM_OK;
    cJSON_Delete(*out);
    *out = NULL;
    return gm_fail(err, GM_ERR_FORMAT, "%s: not a JSON object", name);
}

/* An integer o[key] in [1, MAX_DIM]; absent: def (or NOT_FOUND when def < 0). where names o in messages. */
static gm_status json_dim(const cJSON *o, const char *where, const char *key, int def, int *out, gm_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j) {
        if (def < 0) return gm_fail(err, GM_ERR_NOT_FOUND, "config.json: %s.%s is missing", where, key);
        *out = def;
        return GM_OK;
    }
    const double v = cJSON_IsNumber(j) ? j->valuedouble : -1;
    if (!(v >= 1 && v <= MAX_DIM) || floor(v) != v)
        return gm_fail(err, GM_ERR_FORMAT, "config.json: %s.%s is not an integer in [1, %d]", where, key, MAX_DIM);
    *out = (int)v;
    return GM_OK;
}

/* A float o[key] in (0, 1) (an epsilon); absent: def. */
static gm_status json_eps(const cJSON *o, const char *key, float def, float *out, gm_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = def;
    if (!j) return GM_OK;
    if (!cJSON_IsNumber(j) || !(j->valuedouble > 0 && j->valuedouble < 1))
        return gm_fail(err, GM_ERR_FORMAT, "config.json: vision_config.%s is not a number in (0, 1)", key);
    *out = (float)j->valuedouble;
    return GM_OK;
}

static const char *json_str(const cJSON *o, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

/* image_mean / image_std: one number or three. */
static gm_status json_rgb(const cJSON *pre, const char *key, float out[3], gm_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(pre, key);
    if (!j) return GM_OK;
    if (cJSON_IsNumber(j)) {
        out[0] = out[1] = out[2] = (float)j->valuedouble;
        return GM_OK;
    }
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 3)
        return gm_fail(err, GM_ERR_FORMAT, "preprocessor config: %s is not a number or 3 numbers", key);
    for (int i = 0; i < 3; i++) {
        const cJSON *e = cJSON_GetArrayItem(j, i);
        if (!cJSON_IsNumber(e)) return gm_fail(err, GM_ERR_FORMAT, "preprocessor config: %s[%d] is not a number", key, i);
        out[i] = (float)e->valuedouble;
    }
    return GM_OK;
}

/* The normalisation transformers applies: preprocessor_config.json (else processor_config.json's
 * image_processor) image_mean / image_std, none at all (0 / 1) when it says do_normalize false; the family's
 * defaults (already in b->mean / b->std) for what it does not say. */
static gm_status read_mean_std(hf_build *b, gm_error *err) {
    cJSON *doc;
    gm_status st = read_json(b->dir, "preprocessor_config.json", false, &doc, err);
    if (!st && !doc) st = read_json(b->dir, "processor_config.json", false, &doc, err);
    if (st || !doc) return st;
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(doc, "image_processor");
    if (!cJSON_IsObject(pre)) pre = doc;
    if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(pre, "do_normalize"))) {
        for (int i = 0; i < 3; i++) b->mean[i] = 0, b->std[i] = 1;
    } else {
        st = json_rgb(pre, "image_mean", b->mean, err);
        if (!st) st = json_rgb(pre, "image_std", b->std, err);
    }
    cJSON_Delete(doc);
    return st;
}

/* ------------------------------------------------------------------ keys */

static gguf_kv *add_kv(hf_build *b, const char *key, gguf_vtype type) {
    gguf_kv *kv = &b->kv[b->n_kv++]; /* the builders add fewer than MAX_KV */
    kv->key = (char *)key;          /* copied by gguf_assemble */
    kv->val.type = type;
    return kv;
}

static void kv_u32(hf_build *b, const char *key, int v) { add_kv(b, key, GGUF_VT_U32)->val.v.u = (uint64_t)v; }
static void kv_f32(hf_build *b, const char *key, float v) { add_kv(b, key, GGUF_VT_F32)->val.v.f = v; }
static void kv_true(hf_build *b, const char *key) { add_kv(b, key, GGUF_VT_BOOL)->val.v.u = 1; }
static void kv_str(hf_build *b, const char *key, const char *s) {
    add_kv(b, key, GGUF_VT_STRING)->val.v.str = (gguf_str){s, strlen(s)};
}
static void kv_rgb(hf_build *b, const char *key, const float v[3]) {
    gguf_kv *kv = add_kv(b, key, GGUF_VT_ARRAY);
    kv->val.v.arr.elem = GGUF_VT_F32;
    kv->val.v.arr.n = 3;
    kv->val.v.arr.data = (const uint8_t *)v;
    kv->val.v.arr.nbytes = 3 * sizeof(float);
}

/* What every mmproj of both families says, and the vision block's sizes. */
static void kv_common(hf_build *b, int D, int F, int L, int H, int P, int PD, float eps) {
    kv_str(b, "general.architecture", "clip");
    kv_true(b, "clip.has_vision_encoder");
    kv_u32(b, "clip.vision.patch_size", P);
    kv_u32(b, "clip.vision.embedding_length", D);
    kv_u32(b, "clip.vision.feed_forward_length", F);
    kv_u32(b, "clip.vision.block_count", L);
    kv_u32(b, "clip.vision.attention.head_count", H);
    kv_u32(b, "clip.vision.projection_dim", PD);
    kv_f32(b, "clip.vision.attention.layer_norm_epsilon", eps);
    kv_rgb(b, "clip.vision.image_mean", b->mean);
    kv_rgb(b, "clip.vision.image_std", b->std);
}

/* ------------------------------------------------------------------ tensors */

static gm_status push_tensor(hf_build *b, const char *name, int type, int nd, const int64_t *ne, const void *data,
                             gm_error *err) {
    if (b->n_t == b->cap_t) {
        size_t cap = b->cap_t ? 2 * b->cap_t : 64;
        gguf_tensor *t = realloc(b->t, cap * sizeof *t);
        if (!t) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
        b->t = t, b->cap_t = cap;
    }
    gguf_tensor *t = &b->t[b->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
    b->n_t++;
    t->type = type;
    t->n_dims = nd;
    for (int d = 0; d < 4; d++) t->ne[d] = d < nd ? ne[d] : 1;
    t->data = data;
    return GM_OK;
}

static void shape_str(const int64_t *dims, int nd, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < nd && k < n; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)dims[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* The HF tensor name of torch shape dims[0..nd) (nd 0: a scalar, also taken as [1]), of a type we read;
 * absent: *out NULL, an error only when required. */
static gm_status find_hf(hf_build *b, const char *name, int nd, const int64_t *dims, bool required,
                         const st_tensor **out, gm_error *err) {
    const st_tensor *t = *out = st_set_find(b->hf->st, name);
    if (!t) return required ? gm_fail(err, GM_ERR_NOT_FOUND, "tensor %s is missing", name) : GM_OK;
    int type;
    gm_status st = st_tensor_type(t, st_set_file_of(b->hf->st, t), &type, err);
    if (st) return st;
    const bool scalar_ok = nd == 0 && (t->n_dims == 0 || (t->n_dims == 1 && t->shape[0] == 1));
    if (!scalar_ok && (t->n_dims != nd || memcmp(t->shape, dims, (size_t)nd * sizeof *dims))) {
        char got[96], want[96];
        shape_str(t->shape, t->n_dims, got, sizeof got);
        shape_str(dims, nd, want, sizeof want);
        return gm_fail(err, GM_ERR_FORMAT, "tensor %s has shape %s, config.json makes it %s", name, got, want);
    }
    b->used[b->n_used++] = t;
    return GM_OK;
}

/* The HF tensor hf (torch dims) viewed in place as the GGUF tensor gname (ne: the dims reversed). */
static gm_status view(hf_build *b, const char *hf, const char *gname, int nd, const int64_t *dims, bool required,
                      gm_error *err) {
    const st_tensor *t;
    gm_status st = find_hf(b, hf, nd, dims, required, &t, err);
    if (st || !t) return st;
    int64_t ne[4] = {1, 1, 1, 1};
    for (int d = 0; d < nd; d++) ne[d] = dims[nd - 1 - d];
    return push_tensor(b, gname, t->type, nd ? nd : 1, ne, t->data, err);
}

/* t's n elements as floats in a buffer the folder's mmp_hf owns. */
static gm_status owned_floats(hf_build *b, const st_tensor *t, int64_t n, float **out, gm_error *err) {
    const gm_type_traits *tr = gm_type_traits_of(t->type);
    if (b->hf->n_owned == MAX_OWNED || !tr || !tr->dequant_row)
        return gm_fail(err, GM_ERR_INTERNAL, "tensor %s cannot be copied", t->name);
    float *p = malloc((size_t)n * sizeof *p);
    if (!p) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
    tr->dequant_row(t->data, p, n);
    b->hf->owned[b->hf->n_owned++] = p;
    *out = p;
    return GM_OK;
}

/* hf[:] with no transform but the name: shorthand for the common 1- and 2-D views. */
static gm_status view1(hf_build *b, const char *hf, const char *gname, int64_t n, gm_error *err) {
    return view(b, hf, gname, 1, (int64_t[]){n}, true, err);
}
static gm_status view2(hf_build *b, const char *hf, const char *gname, int64_t rows, int64_t cols, gm_error *err) {
    return view(b, hf, gname, 2, (int64_t[]){rows, cols}, true, err);
}

static int cmp_ptr(const void *a, const void *b) {
    const void *x = *(const void *const *)a, *y = *(const void *const *)b;
    return x < y ? -1 : x > y;
}

/* Every tensor under the towers' prefixes was taken: one the converter would carry and we do not know would
 * change the model, so it is refused rather than ignored. skip: a sub-prefix the converter drops. */
static gm_status check_all_used(hf_build *b, const char *const *prefixes, int n_prefixes, const char *skip,
                                gm_error *err) {
    qsort(b->used, b->n_used, sizeof *b->used, cmp_ptr);
    const st_set *s = b->hf->st;
    for (uint64_t i = 0; i < s->n_tensors; i++) {
        const char *n = s->tensors[i]->name;
        bool ours = false;
        for (int k = 0; k < n_prefixes && !ours; k++) ours = !strncmp(n, prefixes[k], strlen(prefixes[k]));
        if (!ours || (skip && strstr(n, skip))) continue;
        if (!bsearch(&s->tensors[i], b->used, b->n_used, sizeof *b->used, cmp_ptr))
            return gm_fail(err, GM_ERR_UNSUPPORTED, "tensor %s is not part of the vision encoder this program runs", n);
    }
    return GM_OK;
}

/* The first root ("model." or "") under which probe exists. */
static gm_status pick_root(hf_build *b, const char *probe, const char **root, gm_error *err) {
    static const char *const roots[] = {"model.", ""};
    char name[256];
    for (int i = 0; i < 2; i++) {
        snprintf(name, sizeof name, "%s%s", roots[i], probe);
        if (st_set_find(b->hf->st, name)) {
            *root = roots[i];
            return GM_OK;
        }
    }
    return gm_fail(err, GM_ERR_NOT_FOUND, "no vision tower in the safetensors: tensor [model.]%s is missing", probe);
}

/* ------------------------------------------------------------------ Gemma 3 */

typedef struct g3_dims {
    int D, F, L, H, image, P, PD, scale;
    float eps;
} g3_dims;

static gm_status g3_config(hf_build *b, g3_dims *d, gm_error *err) {
    const cJSON *vc = b->vc, *tc = cJSON_GetObjectItemCaseSensitive(b->cfg, "text_config");
    int tokens;
    gm_status st = json_dim(vc, "vision_config", "hidden_size", -1, &d->D, err);
    if (!st) st = json_dim(vc, "vision_config", "intermediate_size", -1, &d->F, err);
    if (!st) st = json_dim(vc, "vision_config", "num_hidden_layers", -1, &d->L, err);
    if (!st) st = json_dim(vc, "vision_config", "num_attention_heads", -1, &d->H, err);
    if (!st) st = json_dim(vc, "vision_config", "image_size", -1, &d->image, err);
    if (!st) st = json_dim(vc, "vision_config", "patch_size", -1, &d->P, err);
    if (!st) st = json_eps(vc, "layer_norm_eps", 1e-6f, &d->eps, err);
    if (!st) st = json_dim(tc, "text_config", "hidden_size", -1, &d->PD, err);
    if (!st) st = json_dim(b->cfg, "config", "mm_tokens_per_image", 256, &tokens, err);
    if (st) return st;
    const char *act = json_str(vc, "hidden_act");
    if (act && strcmp(act, "gelu_pytorch_tanh") && strcmp(act, "gelu_tanh"))
        return gm_fail(err, GM_ERR_UNSUPPORTED, "config.json: vision_config.hidden_act \"%s\": only GELU (tanh)", act);
    /* the pooling kernel, as the converter derives it: patches per side over tokens per side */
    const int grid = d->image / d->P, side = (int)lround(sqrt((double)tokens));
    if (d->image % d->P || side * side != tokens || grid % side)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "config.json: image_size %d / patch_size %d does not pool to "
                       "mm_tokens_per_image %d (a square)", d->image, d->P, tokens);
    d->scale = grid / side;
    return GM_OK;
}

static void g3_keys(hf_build *b, const g3_dims *d) {
    kv_common(b, d->D, d->F, d->L, d->H, d->P, d->PD, d->eps);
    kv_str(b, "clip.projector_type", "gemma3");
    kv_true(b, "clip.use_gelu"); /* what the converter writes: SigLIP's gelu_pytorch_tanh */
    kv_u32(b, "clip.vision.image_size", d->image);
    if (d->scale != 4) kv_u32(b, "clip.vision.projector.scale_factor", d->scale);
}

static gm_status g3_layer(hf_build *b, const char *vr, int il, const g3_dims *d, gm_error *err) {
    static const struct { const char *hf, *gg; int kind; } map[] = {
        {"self_attn.q_proj", "attn_q", 0}, {"self_attn.k_proj", "attn_k", 0}, {"self_attn.v_proj", "attn_v", 0},
        {"self_attn.out_proj", "attn_out", 0}, {"mlp.fc1", "ffn_up", 1}, {"mlp.fc2", "ffn_down", 2},
        {"layer_norm1", "ln1", 3}, {"layer_norm2", "ln2", 3}};
    char hf[256], gg[96];
    gm_status st = GM_OK;
    for (size_t i = 0; i < sizeof map / sizeof map[0] && !st; i++) {
        const int64_t out = map[i].kind == 1 ? d->F : d->D, in = map[i].kind == 2 ? d->F : d->D;
        snprintf(hf, sizeof hf, "%sencoder.layers.%d.%s.weight", vr, il, map[i].hf);
        snprintf(gg, sizeof gg, "v.blk.%d.%s.weight", il, map[i].gg);
        st = map[i].kind == 3 ? view1(b, hf, gg, d->D, err) : view2(b, hf, gg, out, in, err);
        snprintf(hf, sizeof hf, "%sencoder.layers.%d.%s.bias", vr, il, map[i].hf);
        snprintf(gg, sizeof gg, "v.blk.%d.%s.bias", il, map[i].gg);
        if (!st) st = view1(b, hf, gg, out, err);
    }
    return st;
}

/* mm_soft_emb_norm: transformers' Gemma3RMSNorm scales by 1 + w; the converter stores 1 + w (in f32). */
static gm_status g3_soft_norm(hf_build *b, const char *pr, const g3_dims *d, gm_error *err) {
    char hf[256];
    snprintf(hf, sizeof hf, "%smm_soft_emb_norm.weight", pr);
    const st_tensor *t;
    float *w;
    gm_status st = find_hf(b, hf, 1, (int64_t[]){d->D}, true, &t, err);
    if (!st) st = owned_floats(b, t, d->D, &w, err);
    if (st) return st;
    for (int i = 0; i < d->D; i++) w[i] += 1.0f;
    return push_tensor(b, "mm.soft_emb_norm.weight", GM_TYPE_F32, 1, (int64_t[]){d->D}, w, err);
}

static gm_status g3_tensors(hf_build *b, const g3_dims *d, gm_error *err) {
    const char *vroot, *proot;
    gm_status st = pick_root(b, "vision_tower.vision_model.embeddings.patch_embedding.weight", &vroot, err);
    if (!st) st = pick_root(b, "multi_modal_projector.mm_input_projection_weight", &proot, err);
    if (st) return st;
    char vr[64], pr[64], hf[256];
    snprintf(vr, sizeof vr, "%svision_tower.vision_model.", vroot);
    snprintf(pr, sizeof pr, "%smulti_modal_projector.", proot);
    const int64_t D = d->D, P = d->P, NP = (int64_t)(d->image / d->P) * (d->image / d->P);
    snprintf(hf, sizeof hf, "%sembeddings.patch_embedding.weight", vr); /* [D, 3, P, P]: ggml {P, P, 3, D} as is */
    st = view(b, hf, "v.patch_embd.weight", 4, (int64_t[]){D, 3, P, P}, true, err);
    snprintf(hf, sizeof hf, "%sembeddings.patch_embedding.bias", vr);
    if (!st) st = view1(b, hf, "v.patch_embd.bias", D, err);
    snprintf(hf, sizeof hf, "%sembeddings.position_embedding.weight", vr);
    if (!st) st = view2(b, hf, "v.position_embd.weight", NP, D, err);
    for (int il = 0; il < d->L && !st; il++) st = g3_layer(b, vr, il, d, err);
    snprintf(hf, sizeof hf, "%spost_layernorm.weight", vr);
    if (!st) st = view1(b, hf, "v.post_ln.weight", D, err);
    snprintf(hf, sizeof hf, "%spost_layernorm.bias", vr);
    if (!st) st = view1(b, hf, "v.post_ln.bias", D, err);
    if (!st) st = g3_soft_norm(b, pr, d, err);
    snprintf(hf, sizeof hf, "%smm_input_projection_weight", pr); /* [D, PD], applied as x W: ggml {PD, D} as is */
    if (!st) st = view2(b, hf, "mm.input_projection.weight", D, d->PD, err);
    const char *const towers[] = {vr, pr};
    return st ? st : check_all_used(b, towers, 2, ".head.", err); /* tiny test models' unused pooling head */
}

static gm_status build_gemma3(hf_build *b, gm_error *err) {
    g3_dims d;
    for (int i = 0; i < 3; i++) b->mean[i] = b->std[i] = 0.5f; /* Gemma3ImageProcessor's defaults */
    gm_status st = g3_config(b, &d, err);
    if (!st) st = read_mean_std(b, err);
    if (st) return st;
    g3_keys(b, &d);
    return g3_tensors(b, &d, err);
}

/* ------------------------------------------------------------------ Gemma 4 */

typedef struct g4_dims {
    int D, F, L, H, P, PD, pool, rows, hd;
    float eps;
} g4_dims;

/* One attention layout is implemented: as many key / value heads as queries, head_dim = hidden / heads. */
static gm_status g4_check_heads(const cJSON *vc, g4_dims *d, gm_error *err) {
    int kv;
    gm_status st = json_dim(vc, "vision_config", "head_dim", d->D / d->H, &d->hd, err);
    if (!st) st = json_dim(vc, "vision_config", "num_key_value_heads", d->H, &kv, err);
    if (st) return st;
    if (d->D % d->H || d->hd != d->D / d->H || kv != d->H)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "config.json: vision_config head_dim %d, %d key/value heads: only %d "
                       "heads of hidden_size / heads", d->hd, kv, d->H);
    return GM_OK;
}

static gm_status g4_config(hf_build *b, g4_dims *d, gm_error *err) {
    const cJSON *vc = b->vc, *tc = cJSON_GetObjectItemCaseSensitive(b->cfg, "text_config");
    gm_status st = json_dim(vc, "vision_config", "hidden_size", -1, &d->D, err);
    if (!st) st = json_dim(vc, "vision_config", "intermediate_size", -1, &d->F, err);
    if (!st) st = json_dim(vc, "vision_config", "num_hidden_layers", -1, &d->L, err);
    if (!st) st = json_dim(vc, "vision_config", "num_attention_heads", -1, &d->H, err);
    if (!st) st = json_dim(vc, "vision_config", "patch_size", 16, &d->P, err);
    if (!st) st = json_dim(vc, "vision_config", "pooling_kernel_size", 3, &d->pool, err);
    if (!st) st = json_dim(vc, "vision_config", "position_embedding_size", 10240, &d->rows, err);
    /* transformers' RMSNorms use rms_norm_eps; the converter writes layer_norm_eps or 1e-6 (the same in Gemma 4) */
    if (!st) st = json_eps(vc, "rms_norm_eps", 1e-6f, &d->eps, err);
    if (!st) st = json_dim(tc, "text_config", "hidden_size", -1, &d->PD, err);
    if (!st) st = g4_check_heads(vc, d, err);
    if (st) return st;
    const char *act = json_str(vc, "hidden_activation");
    if (act && strcmp(act, "gelu_pytorch_tanh") && strcmp(act, "gelu_tanh"))
        return gm_fail(err, GM_ERR_UNSUPPORTED, "config.json: vision_config.hidden_activation \"%s\": only GELU (tanh)",
                       act);
    return GM_OK;
}

static void g4_keys(hf_build *b, const g4_dims *d) {
    kv_common(b, d->D, d->F, d->L, d->H, d->P, d->PD, d->eps);
    kv_str(b, "clip.vision.projector_type", "gemma4v");
    kv_u32(b, "clip.vision.image_size", 224); /* the converter's dummy: sizes are chosen per image */
    /* no clip.use_gelu, as the converter writes it: gm_vision_options.llama_cpp_act decides, as for its files */
    if (d->pool != 3) kv_u32(b, "clip.vision.projector.scale_factor", d->pool);
}

/* A Gemma4ClippableLinear: base.linear.weight [out, in] and its optional scalar bounds. */
static gm_status g4_linear(hf_build *b, const char *base, const char *gbase, int64_t out, int64_t in, gm_error *err) {
    static const char *const bounds[] = {"input_min", "input_max", "output_min", "output_max"};
    char hf[320], gg[128]; /* base: at most 255 characters, gbase 95 */
    snprintf(hf, sizeof hf, "%s.linear.weight", base);
    snprintf(gg, sizeof gg, "%s.weight", gbase);
    gm_status st = view2(b, hf, gg, out, in, err);
    for (int i = 0; i < 4 && !st; i++) { /* scalars in HF, {1} in the GGUF (the converter unsqueezes them) */
        snprintf(hf, sizeof hf, "%s.%s", base, bounds[i]);
        snprintf(gg, sizeof gg, "%s.%s", gbase, bounds[i]);
        st = view(b, hf, gg, 0, NULL, false, err);
    }
    return st;
}

static gm_status g4_layer(hf_build *b, const char *lr, int il, const g4_dims *d, gm_error *err) {
    static const struct { const char *hf, *gg; int kind; } lin[] = {
        {"self_attn.q_proj", "attn_q", 0}, {"self_attn.k_proj", "attn_k", 0}, {"self_attn.v_proj", "attn_v", 0},
        {"self_attn.o_proj", "attn_out", 0}, {"mlp.gate_proj", "ffn_gate", 1}, {"mlp.up_proj", "ffn_up", 1},
        {"mlp.down_proj", "ffn_down", 2}};
    static const struct { const char *hf, *gg; bool head; } norms[] = {
        {"input_layernorm", "ln1", false}, {"pre_feedforward_layernorm", "ln2", false},
        {"self_attn.q_norm", "attn_q_norm", true}, {"self_attn.k_norm", "attn_k_norm", true},
        {"post_attention_layernorm", "attn_post_norm", false}, {"post_feedforward_layernorm", "ffn_post_norm", false}};
    char hf[256], gg[96];
    gm_status st = GM_OK;
    for (size_t i = 0; i < sizeof lin / sizeof lin[0] && !st; i++) {
        snprintf(hf, sizeof hf, "%s%d.%s", lr, il, lin[i].hf);
        snprintf(gg, sizeof gg, "v.blk.%d.%s", il, lin[i].gg);
        st = g4_linear(b, hf, gg, lin[i].kind == 1 ? d->F : d->D, lin[i].kind == 2 ? d->F : d->D, err);
    }
    for (size_t i = 0; i < sizeof norms / sizeof norms[0] && !st; i++) { /* raw weights: no 1 + in Gemma 4 */
        snprintf(hf, sizeof hf, "%s%d.%s.weight", lr, il, norms[i].hf);
        snprintf(gg, sizeof gg, "v.blk.%d.%s.weight", il, norms[i].gg);
        st = view1(b, hf, gg, norms[i].head ? d->hd : d->D, err);
    }
    snprintf(hf, sizeof hf, "%s%d.layer_scalar", lr, il);
    snprintf(gg, sizeof gg, "v.blk.%d.out_scale.weight", il);
    return st ? st : view(b, hf, gg, 1, (int64_t[]){1}, false, err);
}

/* patch_embedder.input_proj [D, P * P * 3] takes a patch's pixels as (y, x, channel); the GGUF's columns are
 * (channel, y, x), as ggml's im2col lays a patch out: the converter permutes them, and so do we. */
static gm_status g4_patch(hf_build *b, const char *hf, const g4_dims *d, gm_error *err) {
    const int64_t D = d->D, P = d->P, K = 3 * P * P;
    const st_tensor *t;
    float *src;
    gm_status st = find_hf(b, hf, 2, (int64_t[]){D, K}, true, &t, err);
    if (!st) st = owned_floats(b, t, D * K, &src, err);
    float *w = st ? NULL : malloc((size_t)(D * K) * sizeof *w);
    if (!st && !w) st = gm_fail(err, GM_ERR_NOMEM, "out of memory");
    if (st) return st;
    for (int64_t o = 0; o < D; o++)
        for (int64_t c = 0; c < 3; c++)
            for (int64_t y = 0; y < P; y++)
                for (int64_t x = 0; x < P; x++) w[o * K + (c * P + y) * P + x] = src[o * K + (y * P + x) * 3 + c];
    memcpy(src, w, (size_t)(D * K) * sizeof *w); /* the owned buffer now holds the permuted matrix */
    free(w);
    return push_tensor(b, "v.patch_embd.weight", GM_TYPE_F32, 4, (int64_t[]){P, P, 3, D}, src, err);
}

static gm_status g4_tensors(hf_build *b, const g4_dims *d, gm_error *err) {
    const char *root;
    gm_status st = pick_root(b, "vision_tower.patch_embedder.input_proj.weight", &root, err);
    if (st) return st;
    char vr[64], er[64], lr[96], hf[256];
    snprintf(vr, sizeof vr, "%svision_tower.", root);
    snprintf(er, sizeof er, "%sembed_vision.", root);
    snprintf(lr, sizeof lr, "%sencoder.layers.", vr);
    snprintf(hf, sizeof hf, "%spatch_embedder.input_proj.weight", vr);
    st = g4_patch(b, hf, d, err);
    snprintf(hf, sizeof hf, "%spatch_embedder.position_embedding_table", vr); /* [2, rows, D]: {D, rows, 2} as is */
    if (!st) st = view(b, hf, "v.position_embd.weight", 3, (int64_t[]){2, d->rows, d->D}, true, err);
    for (int il = 0; il < d->L && !st; il++) st = g4_layer(b, lr, il, d, err);
    snprintf(hf, sizeof hf, "%sstd_bias", vr);
    if (!st) st = view(b, hf, "v.std_bias", 1, (int64_t[]){d->D}, false, err);
    snprintf(hf, sizeof hf, "%sstd_scale", vr);
    if (!st) st = view(b, hf, "v.std_scale", 1, (int64_t[]){d->D}, false, err);
    snprintf(hf, sizeof hf, "%sembedding_projection.weight", er); /* [PD, D]: {D, PD}, applied as W x */
    if (!st) st = view2(b, hf, "mm.input_projection.weight", d->PD, d->D, err);
    const char *const towers[] = {vr, er};
    return st ? st : check_all_used(b, towers, 2, NULL, err);
}

static gm_status build_gemma4(hf_build *b, gm_error *err) {
    g4_dims d;
    for (int i = 0; i < 3; i++) b->mean[i] = 0, b->std[i] = 1; /* Gemma4ImageProcessor: do_normalize false */
    gm_status st = g4_config(b, &d, err);
    if (!st) st = read_mean_std(b, err);
    if (st) return st;
    g4_keys(b, &d);
    return g4_tensors(b, &d, err);
}

/* ------------------------------------------------------------------ the folder */

/* Which vision tower cfg's vision_config is: 3, 4, or an error naming what is there. */
static gm_status family_of(const cJSON *cfg, const cJSON **vc, int *family, gm_error *err) {
    *vc = cJSON_GetObjectItemCaseSensitive(cfg, "vision_config");
    const char *arch = json_str(cfg, "model_type");
    if (!cJSON_IsObject(*vc))
        return gm_fail(err, GM_ERR_NOT_FOUND, "config.json has no vision_config (model_type \"%s\"): a text-only model "
                       "has no image encoder", arch ? arch : "?");
    const char *type = json_str(*vc, "model_type");
    if (type && !strcmp(type, "siglip_vision_model")) *family = 3;
    else if (type && !strcmp(type, "gemma4_vision")) *family = 4;
    else
        return gm_fail(err, GM_ERR_UNSUPPORTED, "config.json: vision_config.model_type \"%s\": only Gemma 3's "
                       "siglip_vision_model and Gemma 4's gemma4_vision are supported", type ? type : "(none)");
    return GM_OK;
}

gm_status mmp_hf_family(const char *dir, int *family, gm_error *err) {
    cJSON *cfg;
    const cJSON *vc;
    gm_status st = read_json(dir, "config.json", true, &cfg, err);
    if (!st) st = family_of(cfg, &vc, family, err);
    cJSON_Delete(cfg);
    return st ? gm_fail_prefix(err, "%s: ", dir) : GM_OK;
}

static gm_status build(hf_build *b, gm_error *err) {
    int family;
    gm_status st = read_json(b->dir, "config.json", true, &b->cfg, err);
    if (!st) st = family_of(b->cfg, &b->vc, &family, err);
    if (!st) st = st_set_open(b->dir, &b->hf->st, err);
    if (st) return st;
    if (!(b->used = malloc((size_t)(b->hf->st->n_tensors + 1) * sizeof *b->used)))
        return gm_fail(err, GM_ERR_NOMEM, "out of memory");
    return family == 4 ? build_gemma4(b, err) : build_gemma3(b, err);
}

void mmp_close(gguf_file *f, mmp_hf *hf) {
    gguf_close(f);
    if (!hf) return;
    st_set_close(hf->st);
    for (int i = 0; i < hf->n_owned; i++) free(hf->owned[i]);
    free(hf);
}

gm_status mmp_hf_open(const char *dir, gguf_file **f, mmp_hf **hf, gm_error *err) {
    *f = NULL;
    *hf = NULL;
    hf_build b = {.dir = dir, .hf = calloc(1, sizeof(mmp_hf))};
    gm_status st = b.hf ? build(&b, err) : gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", dir);
    if (!st) st = gguf_assemble(dir, b.kv, (uint64_t)b.n_kv, b.t, b.n_t, f, err);
    for (size_t i = 0; i < b.n_t; i++) free(b.t[i].name);
    free(b.t);
    free(b.used);
    cJSON_Delete(b.cfg);
    if (st) {
        mmp_close(NULL, b.hf);
        return gm_fail_prefix(err, "%s: ", dir);
    }
    *hf = b.hf;
    return GM_OK;
}

gm_status mmp_open(const char *path, gguf_file **f, mmp_hf **hf, gm_error *err) {
    *hf = NULL;
    if (mmp_is_folder(path)) return mmp_hf_open(path, f, hf, err);
    return gguf_open(path, NULL, f, err);
}
