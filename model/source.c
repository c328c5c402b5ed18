/* model/source.c — one view of a model's tensors, from a GGUF file or a Hugging Face folder.
 *
 * HF tensors are renamed to the GGUF scheme and their shapes reversed into ggml order, so the
 * rest of the engine knows only one naming. Vision / audio towers of multimodal checkpoints
 * are skipped; the text model's "language_model." / "model.language_model." prefixes dropped.
 */
#include "model/source.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "formats/safetensors.h"
#include "model/family.h"

#define GM_MAX_CONFIG_JSON (16ll * 1024 * 1024)

struct gm_source {
    char *path;
    gguf_file *gguf;  /* GGUF source */
    st_set *st;       /* HF source */
    st_set *dense[2]; /* sentence-transformers 2_Dense / 3_Dense modules (embedding models), or NULL */
    char *hf_dir;
    cJSON *hf_config;
    gm_tensor *tensors;
    int64_t n_tensors;
    gm_tensor **sorted; /* by name */
};

/* ------------------------------------------------------------------ small helpers */

static bool is_dir(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISDIR(s.st_mode);
}

static bool is_file(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISREG(s.st_mode);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static bool starts_with(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

static bool has_gguf_magic(const char *path) {
    FILE *f = fopen(path, "rb");
    char m[4] = {0};
    bool ok = f && fread(m, 1, 4, f) == 4 && !memcmp(m, "GGUF", 4);
    if (f) fclose(f);
    return ok;
}

static int cmp_tensor_ptr(const void *a, const void *b) {
    return strcmp((*(gm_tensor *const *)a)->name, (*(gm_tensor *const *)b)->name);
}

static gm_status build_lookup(gm_source *s, gm_error *err) {
    s->sorted = malloc((size_t)(s->n_tensors ? s->n_tensors : 1) * sizeof *s->sorted);
    if (!s->sorted) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", s->path);
    for (int64_t i = 0; i < s->n_tensors; i++) s->sorted[i] = &s->tensors[i];
    qsort(s->sorted, (size_t)s->n_tensors, sizeof *s->sorted, cmp_tensor_ptr);
    for (int64_t i = 1; i < s->n_tensors; i++)
        if (!strcmp(s->sorted[i - 1]->name, s->sorted[i]->name))
            return gm_fail(err, GM_ERR_FORMAT, "%s: tensors '%s' and '%s' both map to '%s'", s->path,
                           s->sorted[i - 1]->orig_name, s->sorted[i]->orig_name, s->sorted[i]->name);
    return GM_OK;
}

/* ------------------------------------------------------------------ GGUF */

/* Wraps an opened GGUF file: every visible tensor, in file order. */
static gm_status wrap_gguf(gm_source *s, gm_error *err) {
    const gguf_file *g = s->gguf;
    s->tensors = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *s->tensors);
    if (!s->tensors) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", s->path);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        if (t->hidden) continue;
        gm_tensor *o = &s->tensors[s->n_tensors++];
        o->name = o->orig_name = t->name;
        o->type = t->type;
        o->n_dims = t->n_dims;
        memcpy(o->ne, t->ne, sizeof o->ne);
        o->data = t->data;
        o->nbytes = t->nbytes;
    }
    return build_lookup(s, err);
}

static gm_status open_gguf(gm_source *s, bool keep_mtp, gm_error *err) {
    gguf_open_options opt = {keep_mtp};
    gm_status st = gguf_open(s->path, &opt, &s->gguf, err);
    return st ? st : wrap_gguf(s, err);
}

/* ------------------------------------------------------------------ HF names */

/* The entries of one kind in the family's HF name tables (model/family.h), one at a time: it = NULL to start. */
static const gm_hf_name *next_name(const gm_family *fam, gm_hf_kind kind, int *table, const gm_hf_name *it) {
    for (it = it ? it + 1 : NULL; fam && fam->hf_names && fam->hf_names[*table]; (*table)++, it = NULL)
        for (it = it ? it : fam->hf_names[*table]; it->kind != GM_HF_END; it++)
            if (it->kind == kind) return it;
    return NULL;
}

/* The module of a family name: a global's name up to its last part ("model.x." of "model.x.weight"), a
 * numbered list's prefix. */
static bool in_module(const char *n, const gm_hf_name *e) {
    const char *dot = e->kind == GM_HF_GLOBAL ? strrchr(e->hf, '.') : NULL;
    const size_t k = dot ? (size_t)(dot - e->hf) + 1 : strlen(e->hf);
    return !strncmp(n, e->hf, k);
}

/* Whether n ("model.*") lies in a module the family adds to the text model (3n's AltUp, the per-layer inputs). */
static bool family_module(const gm_family *fam, const char *n) {
    const gm_hf_kind kinds[] = {GM_HF_GLOBAL, GM_HF_NUMBERED};
    for (int k = 0; k < 2; k++) {
        int table = 0;
        for (const gm_hf_name *e = NULL; (e = next_name(fam, kinds[k], &table, e));)
            if (in_module(n, e)) return true;
    }
    return false;
}

/* Strips multimodal prefixes ("language_model.", "model.language_model." -> "model."); NULL for tensors that are
 * not part of the text decoder: the Gemma block's modules and the ones the family adds are. */
static const char *text_name(const char *n, const gm_family *fam) {
    if (starts_with(n, "language_model.")) n += strlen("language_model.");
    const bool mm = starts_with(n, "model.language_model.");
    if (mm) n += strlen("model.language_model.") - strlen("model."); /* the tail "model." of "language_model." */
    static const char *const keep[] = {"model.layers.", "model.embed_tokens.", "model.norm."};
    if (!mm && starts_with(n, "lm_head.")) return n;
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (starts_with(n, keep[i])) return n;
    return family_module(fam, n) ? n : NULL;
}

/* Per-layer HF suffix -> GGUF suffix: the Gemma block's names, then the family's. Gemma 1's
 * post_attention_layernorm is its pre-FFN norm; Gemma 2/3 have a real post-attention norm and call the pre-FFN
 * one pre_feedforward_layernorm. */
static const char *layer_suffix(const char *hf, const gm_family *fam) {
    static const char *const map[][2] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
        {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
    };
    if (!strcmp(hf, "post_attention_layernorm.weight"))
        return fam && fam->rules.hf_gemma1_names ? "ffn_norm.weight" : "post_attention_norm.weight";
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(hf, map[i][0])) return map[i][1];
    int table = 0;
    for (const gm_hf_name *e = NULL; (e = next_name(fam, GM_HF_LAYER, &table, e));)
        if (!strcmp(hf, e->hf)) return e->gguf;
    return NULL;
}

/* "<prefix><k>.weight" -> "<gguf prefix><k>.weight" for a numbered list of the family (malloc'd), or NULL. */
static char *numbered_name(const char *n, const gm_family *fam) {
    int table = 0;
    for (const gm_hf_name *e = NULL; (e = next_name(fam, GM_HF_NUMBERED, &table, e));) {
        const char *rest = n + strlen(e->hf);
        int k = -1, used = 0;
        if (!starts_with(n, e->hf) || sscanf(rest, "%d.weight%n", &k, &used) != 1 || used <= 0 || rest[used] || k < 0 ||
            k >= 8)
            continue;
        char buf[128];
        snprintf(buf, sizeof buf, "%s%d.weight", e->gguf, k);
        return strdup(buf);
    }
    return NULL;
}

/* GGUF name for a text-model HF name (malloc'd); unknown tensors keep their HF name. */
static char *gguf_name(const char *n, const gm_family *fam) {
    if (!strcmp(n, "model.embed_tokens.weight")) return strdup("token_embd.weight");
    if (!strcmp(n, "model.norm.weight")) return strdup("output_norm.weight");
    if (!strcmp(n, "lm_head.weight")) return strdup("output.weight");
    int table = 0;
    for (const gm_hf_name *e = NULL; (e = next_name(fam, GM_HF_GLOBAL, &table, e));)
        if (!strcmp(n, e->hf)) return strdup(e->gguf);
    char *numbered = numbered_name(n, fam);
    if (numbered) return numbered;
    int layer = -1, used = 0;
    if (sscanf(n, "model.layers.%d.%n", &layer, &used) == 1 && used > 0 && layer >= 0) {
        const char *suf = layer_suffix(n + used, fam);
        if (suf) {
            char buf[256];
            snprintf(buf, sizeof buf, "blk.%d.%s", layer, suf);
            return strdup(buf);
        }
    }
    return strdup(n);
}

/* ------------------------------------------------------------------ HF folder */

static gm_status load_config(gm_source *s, gm_error *err) {
    size_t n = strlen(s->hf_dir) + 16;
    char *p = malloc(n);
    if (!p) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
    snprintf(p, n, "%s/config.json", s->hf_dir);
    FILE *f = is_file(p) ? fopen(p, "rb") : NULL; /* a regular file: never block on a FIFO */
    if (!f) {
        gm_status st = gm_fail(err, GM_ERR_NOT_FOUND, "%s: no config.json in the folder", s->hf_dir);
        free(p);
        return st;
    }
    char *text = malloc((size_t)GM_MAX_CONFIG_JSON + 1);
    size_t len = text ? fread(text, 1, (size_t)GM_MAX_CONFIG_JSON + 1, f) : 0;
    fclose(f);
    gm_status st = GM_OK;
    if (!text) st = gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", p);
    else if (len > (size_t)GM_MAX_CONFIG_JSON) st = gm_fail(err, GM_ERR_FORMAT, "%s: file too large", p);
    else {
        s->hf_config = cJSON_ParseWithLength(text, len);
        if (!cJSON_IsObject(s->hf_config)) st = gm_fail(err, GM_ERR_FORMAT, "%s: not a valid JSON object", p);
    }
    free(text);
    free(p);
    return st;
}

/* The family config.json's model_type names (text_config's, else the top level's), whose tables rename the
 * tensors; NULL for an unknown type (the Gemma block's names only: gm_config_load refuses it later). */
static const gm_family *hf_family(const cJSON *cfg) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cJSON_IsObject(tc) ? tc : cfg, "model_type");
    return cJSON_IsString(mt) ? gm_family_by_hf_type(mt->valuestring) : NULL;
}

static gm_status hf_tensor(gm_source *s, const st_set *set, const st_tensor *t, const char *text,
                           const gm_family *fam, gm_error *err) {
    const char *file = st_set_file_of(set, t);
    int type;
    gm_status st = st_tensor_type(t, file, &type, err);
    if (st) return st;
    if (t->n_dims > 4)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: tensor '%s' has %d dimensions (at most 4)", file, t->name,
                       t->n_dims);
    gm_tensor *o = &s->tensors[s->n_tensors];
    o->name = gguf_name(text, fam);
    if (!o->name) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
    s->n_tensors++;
    o->orig_name = t->name;
    o->type = type;
    o->n_dims = t->n_dims ? t->n_dims : 1;
    for (int d = 0; d < 4; d++) o->ne[d] = 1;
    for (int d = 0; d < t->n_dims; d++) o->ne[d] = t->shape[t->n_dims - 1 - d]; /* ggml order */
    o->data = t->data;
    o->nbytes = t->nbytes;
    return GM_OK;
}

/* Natural order for HF tensors (the files list them alphabetically): embedding and output tensors
 * first, then layer by layer in GGUF order. */
static int64_t order_key(const gm_tensor *t) {
    static const char *const top[] = {"token_embd.weight", "output_norm.weight", "output.weight"};
    static const char *const per_layer[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm",
                                            "attn_output", "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up",
                                            "ffn_down", "post_ffw_norm"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(t->name, top[i])) return i;
    int layer = -1, used = 0;
    if (sscanf(t->name, "blk.%d.%n", &layer, &used) == 1 && used > 0 && layer >= 0) {
        size_t n = strcspn(t->name + used, ".");
        for (int k = 0; k < 13; k++)
            if (strlen(per_layer[k]) == n && !strncmp(t->name + used, per_layer[k], n))
                return 16 + (int64_t)layer * 16 + k;
        return 16 + (int64_t)layer * 16 + 15;
    }
    return INT64_MAX; /* unknown tensors last */
}

static int cmp_order(const void *a, const void *b) {
    const gm_tensor *x = a, *y = b;
    int64_t kx = order_key(x), ky = order_key(y);
    if (kx != ky) return kx < ky ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* EmbeddingGemma's sentence-transformers folder keeps its projections after pooling in <k>_Dense/model.safetensors
 * (one tensor, linear.weight, torch [out, in]); they become dense_2.weight / dense_3.weight, as llama.cpp's
 * converter names them. A bias is refused (neither EmbeddingGemma nor llama.cpp's gemma-embedding has one). */
static gm_status open_dense_modules(gm_source *s, gm_error *err) {
    for (int k = 0; k < 2; k++) {
        char path[4096], name[32];
        snprintf(path, sizeof path, "%s/%d_Dense/model.safetensors", s->hf_dir, k + 2);
        if (!is_file(path)) continue;
        gm_status st = st_set_open(path, &s->dense[k], err);
        if (st) return st;
        const st_tensor *w = st_set_find(s->dense[k], "linear.weight");
        if (!w) return gm_fail(err, GM_ERR_NOT_FOUND, "%s: tensor linear.weight is missing", path);
        if (st_set_find(s->dense[k], "linear.bias"))
            return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: a dense module with a bias is not supported", path);
        snprintf(name, sizeof name, "dense_%d.weight", k + 2);
        if ((st = hf_tensor(s, s->dense[k], w, name, NULL, err))) return st;
    }
    return GM_OK;
}

static gm_status open_hf(gm_source *s, const char *st_path, gm_error *err) {
    gm_status st = load_config(s, err);
    if (st || (st = st_set_open(st_path, &s->st, err))) return st;
    const gm_family *fam = hf_family(s->hf_config);
    s->tensors = calloc((size_t)s->st->n_tensors + 2, sizeof *s->tensors); /* + the dense modules */
    if (!s->tensors) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", s->path);
    for (uint64_t i = 0; i < s->st->n_tensors; i++) {
        const st_tensor *t = s->st->tensors[i];
        const char *text = text_name(t->name, fam);
        if (!text) continue; /* vision tower, projector, ... */
        if ((st = hf_tensor(s, s->st, t, text, fam, err))) return st;
    }
    if ((st = open_dense_modules(s, err))) return st;
    qsort(s->tensors, (size_t)s->n_tensors, sizeof *s->tensors, cmp_order);
    return build_lookup(s, err);
}

/* A .safetensors file: its folder must hold config.json; a shard of an indexed set opens the set. */
static gm_status open_hf_file(gm_source *s, gm_error *err) {
    const char *slash = strrchr(s->path, '/');
    s->hf_dir = slash ? strndup(s->path, (size_t)(slash - s->path)) : strdup(".");
    if (!s->hf_dir) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
    size_t n = strlen(s->hf_dir) + 40;
    char *index = malloc(n);
    if (!index) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
    snprintf(index, n, "%s/model.safetensors.index.json", s->hf_dir);
    bool sharded = is_file(index);
    free(index);
    return open_hf(s, sharded ? s->hf_dir : s->path, err);
}

/* ------------------------------------------------------------------ public */

gm_status gm_source_open(const char *path, bool keep_mtp, gm_source **out, gm_error *err) {
    *out = NULL;
    if (!path || !*path) return gm_fail(err, GM_ERR_ARG, "model path is empty");
    gm_source *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", path);
    }
    gm_status st;
    if (is_dir(path)) {
        s->hf_dir = strdup(path);
        st = s->hf_dir ? open_hf(s, path, err) : gm_fail(err, GM_ERR_NOMEM, "out of memory");
    } else if (ends_with(path, ".safetensors") && is_file(path) && !has_gguf_magic(path)) {
        st = open_hf_file(s, err);
    } else {
        st = open_gguf(s, keep_mtp, err); /* also the error path for missing or unknown files */
    }
    if (st) {
        gm_source_close(s);
        return st;
    }
    *out = s;
    return GM_OK;
}

gm_status gm_source_open_gguf_memory(const void *buf, uint64_t size, const char *name, bool keep_mtp,
                                     gm_source **out, gm_error *err) {
    *out = NULL;
    if (!name) name = "<memory>";
    gm_source *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(name))) {
        free(s);
        return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", name);
    }
    gguf_open_options opt = {keep_mtp};
    gm_status st = gguf_open_memory(buf, size, name, &opt, &s->gguf, err);
    if (!st) st = wrap_gguf(s, err);
    if (st) {
        gm_source_close(s);
        return st;
    }
    *out = s;
    return GM_OK;
}

void gm_source_close(gm_source *s) {
    if (!s) return;
    if (s->st)
        for (int64_t i = 0; i < s->n_tensors; i++) free((char *)s->tensors[i].name);
    free(s->tensors);
    free(s->sorted);
    gguf_close(s->gguf);
    st_set_close(s->st);
    st_set_close(s->dense[0]);
    st_set_close(s->dense[1]);
    cJSON_Delete(s->hf_config);
    free(s->hf_dir);
    free(s->path);
    free(s);
}

const char *gm_source_path(const gm_source *s) { return s ? s->path : NULL; }
bool gm_source_is_gguf(const gm_source *s) { return s && s->gguf; }
static bool in_map(const uint8_t *b, uint64_t size, const void *p, uint64_t n) {
    const uint8_t *q = p;
    return b && q >= b && n <= size && (uint64_t)(q - b) <= size - n;
}

bool gm_source_file_mapped(const gm_source *s, const void *p, uint64_t n) {
    if (!s || !p) return false;
    if (s->gguf) return gguf_file_backed(s->gguf) && in_map(s->gguf->map, s->gguf->size, p, n);
    for (int i = 0; s->st && i < s->st->n_files; i++)
        if (st_file_backed(s->st->files[i]) && in_map(s->st->files[i]->map, s->st->files[i]->size, p, n)) return true;
    return false;
}
const gguf_file *gm_source_gguf(const gm_source *s) { return s ? s->gguf : NULL; }
const char *gm_source_hf_dir(const gm_source *s) { return s && !s->gguf ? s->hf_dir : NULL; }
const void *gm_source_hf_config(const gm_source *s) { return s ? s->hf_config : NULL; }
int64_t gm_source_n_tensors(const gm_source *s) { return s ? s->n_tensors : 0; }

const gm_tensor *gm_source_tensor_at(const gm_source *s, int64_t i) {
    return s && i >= 0 && i < s->n_tensors ? &s->tensors[i] : NULL;
}

const gm_tensor *gm_source_tensor(const gm_source *s, const char *name) {
    if (!s || !name || !s->sorted) return NULL;
    gm_tensor key = {0};
    key.name = name;
    const gm_tensor *kp = &key;
    gm_tensor *const *r = bsearch(&kp, s->sorted, (size_t)s->n_tensors, sizeof *s->sorted, cmp_tensor_ptr);
    return r ? *r : NULL;
}
