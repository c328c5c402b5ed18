/* model/describe.c — the description `gemma inspect` prints (and gm_model_describe): format,
 * architecture, config, tokenizer summary, tensor table and totals, as text or JSON. Writes only
 * to the stream the caller passes. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/family.h"
#include "model/model.h"
#include "model/source.h"
#include "quant/quant.h"

/* ------------------------------------------------------------------ config fields */

typedef enum { F_INT, F_FLOAT, F_BOOL, F_STR } field_kind;
typedef struct field {
    const char *name;
    field_kind kind;
    size_t off;
} field;

#define FI(n) {#n, F_INT, offsetof(gm_config, n)}
#define FF(n) {#n, F_FLOAT, offsetof(gm_config, n)}
#define FB(n) {#n, F_BOOL, offsetof(gm_config, n)}
static const field k_fields[] = {
    {"arch", F_STR, offsetof(gm_config, arch)}, FI(generation), FI(n_vocab), FI(d_model), FI(n_layers),
    FI(n_heads), FI(n_kv_heads), FI(head_dim), FI(d_ff), FI(context_length), FI(sliding_window),
    FI(sliding_pattern), FF(norm_eps), FF(rope_base_global), FF(rope_base_local), FF(rope_scale_global),
    FF(query_scale), FF(attn_softcap), FF(final_softcap), FF(embed_scale), FB(norm_weights_plus_one),
    FB(has_qk_norm), FB(has_post_norms), FB(tied_embeddings), FI(bos_id), FI(eos_id), FI(eot_id), FI(pad_id),
};
/* listed only for embedding models */
static const field k_embedding_fields[] = {
    FB(is_embedding), FI(pooling), FI(dense_2_in), FI(dense_2_out), FI(dense_3_in), FI(dense_3_out),
    FI(embedding_dim), FB(add_eos),
};
/* listed only for drafters */
static const field k_drafter_fields[] = {FB(is_drafter), FI(d_backbone)};
#undef FI
#undef FF
#undef FB

/* The shortest decimal that reads back as the same float (1e-06, not 9.99999997e-07). */
static const char *shortest(float f, char buf[32]) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, 32, "%.*g", prec, (double)f);
        if ((float)strtod(buf, NULL) == f) break;
    }
    return buf;
}

static double float_for_json(float f) {
    char buf[32];
    return strtod(shortest(f, buf), NULL);
}

static void fields_text(const gm_config *c, const field *k_fields, size_t n, FILE *out) {
    char buf[32];
    for (size_t i = 0; i < n; i++) {
        const void *p = (const char *)c + k_fields[i].off;
        fprintf(out, "  %-22s ", k_fields[i].name);
        switch (k_fields[i].kind) {
        case F_INT: fprintf(out, "%d\n", *(const int *)p); break;
        case F_FLOAT: fprintf(out, "%s\n", shortest(*(const float *)p, buf)); break;
        case F_BOOL: fprintf(out, "%s\n", *(const bool *)p ? "true" : "false"); break;
        case F_STR: fprintf(out, "%s\n", (const char *)p); break;
        }
    }
}

static void config_text(const gm_config *c, FILE *out) {
    fprintf(out, "config:\n");
    fields_text(c, k_fields, sizeof k_fields / sizeof k_fields[0], out);
    if (c->is_embedding) fields_text(c, k_embedding_fields, sizeof k_embedding_fields / sizeof k_embedding_fields[0], out);
    if (c->is_drafter) fields_text(c, k_drafter_fields, sizeof k_drafter_fields / sizeof k_drafter_fields[0], out);
}


static void fields_json(const gm_config *c, const field *k_fields, size_t nf, cJSON *o) {
    for (size_t i = 0; i < nf; i++) {
        const void *p = (const char *)c + k_fields[i].off;
        const char *n = k_fields[i].name;
        switch (k_fields[i].kind) {
        case F_INT: cJSON_AddNumberToObject(o, n, *(const int *)p); break;
        case F_FLOAT: cJSON_AddNumberToObject(o, n, float_for_json(*(const float *)p)); break;
        case F_BOOL: cJSON_AddBoolToObject(o, n, *(const bool *)p); break;
        case F_STR: cJSON_AddStringToObject(o, n, (const char *)p); break;
        }
    }
}

static cJSON *config_json(const gm_config *c) {
    cJSON *o = cJSON_CreateObject();
    fields_json(c, k_fields, sizeof k_fields / sizeof k_fields[0], o);
    if (c->is_embedding) fields_json(c, k_embedding_fields, sizeof k_embedding_fields / sizeof k_embedding_fields[0], o);
    if (c->is_drafter) fields_json(c, k_drafter_fields, sizeof k_drafter_fields / sizeof k_drafter_fields[0], o);
    return o;
}

/* ------------------------------------------------------------------ tokenizer summary */

typedef struct tok_summary {
    char model[32];
    int64_t vocab;           /* -1 unknown */
    int64_t bos, eos, unk, pad;
    int add_bos, add_eos;    /* -1 unknown */
    bool chat_template;
} tok_summary;

static int64_t gguf_id(const gguf_file *f, const char *key) {
    int32_t v;
    return gguf_get_i32(f, key, &v, NULL) == GM_OK ? v : -1;
}

static int gguf_flag(const gguf_file *f, const char *key) {
    bool b;
    return gguf_get_bool(f, key, &b, NULL) == GM_OK ? b : -1;
}

static void tokenizer_gguf(const gguf_file *f, tok_summary *t) {
    gguf_str s;
    if (gguf_get_str(f, "tokenizer.ggml.model", &s, NULL) == GM_OK)
        snprintf(t->model, sizeof t->model, "%.*s", (int)(s.len > 31 ? 31 : s.len), s.ptr);
    const gguf_value *arr;
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_VT_STRING, &arr, NULL) == GM_OK) t->vocab = (int64_t)arr->v.arr.n;
    t->bos = gguf_id(f, "tokenizer.ggml.bos_token_id");
    t->eos = gguf_id(f, "tokenizer.ggml.eos_token_id");
    t->unk = gguf_id(f, "tokenizer.ggml.unknown_token_id");
    t->pad = gguf_id(f, "tokenizer.ggml.padding_token_id");
    t->add_bos = gguf_flag(f, "tokenizer.ggml.add_bos_token");
    t->add_eos = gguf_flag(f, "tokenizer.ggml.add_eos_token");
    t->chat_template = gguf_find(f, "tokenizer.chat_template") != NULL;
}

static cJSON *read_json(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    enum { MAX = 64 << 20 };
    char *buf = malloc(MAX + 1);
    size_t n = buf ? fread(buf, 1, MAX + 1, f) : 0;
    fclose(f);
    cJSON *j = buf && n <= MAX ? cJSON_ParseWithLength(buf, n) : NULL;
    free(buf);
    return j;
}

static int64_t json_id(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsArray(v)) v = v->child;
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : -1;
}

/* HF: ids from config.json, the rest from tokenizer.json / tokenizer_config.json when present. */
static void tokenizer_hf(const gm_source *s, const gm_config *c, bool have_cfg, tok_summary *t) {
    const char *dir = gm_source_hf_dir(s);
    const cJSON *cfg = gm_source_hf_config(s);
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
    if (cJSON_IsObject(tc)) cfg = tc;
    t->bos = json_id(cfg, "bos_token_id");
    t->eos = json_id(cfg, "eos_token_id");
    t->pad = json_id(cfg, "pad_token_id");
    t->vocab = have_cfg ? c->n_vocab : json_id(cfg, "vocab_size");
    cJSON *tj = read_json(dir, "tokenizer.json");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (cJSON_IsString(type)) snprintf(t->model, sizeof t->model, "%.31s", type->valuestring);
    cJSON_Delete(tj);
    cJSON *tcfg = read_json(dir, "tokenizer_config.json");
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(tcfg, "add_bos_token");
    const cJSON *ae = cJSON_GetObjectItemCaseSensitive(tcfg, "add_eos_token");
    if (cJSON_IsBool(ab)) t->add_bos = cJSON_IsTrue(ab);
    if (cJSON_IsBool(ae)) t->add_eos = cJSON_IsTrue(ae);
    t->chat_template = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(tcfg, "chat_template"));
    cJSON_Delete(tcfg);
    char path[4096];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    FILE *f = fopen(path, "rb");
    if (f) {
        t->chat_template = true;
        fclose(f);
    }
}

static const char *flag_text(int v) { return v < 0 ? "unknown" : v ? "true" : "false"; }

static void tokenizer_text(const tok_summary *t, const gm_config *c, bool have_cfg, FILE *out) {
    fprintf(out, "tokenizer:\n  model                  %s\n", t->model[0] ? t->model : "unknown");
    fprintf(out, "  vocab size             %" PRId64 "\n", t->vocab);
    fprintf(out, "  bos / eos / unk / pad  %" PRId64 " / %" PRId64 " / %" PRId64 " / %" PRId64 "\n", t->bos, t->eos,
            t->unk, t->pad);
    if (have_cfg) fprintf(out, "  end_of_turn            %d\n", c->eot_id);
    fprintf(out, "  add_bos / add_eos      %s / %s\n", flag_text(t->add_bos), flag_text(t->add_eos));
    fprintf(out, "  chat template          %s\n", t->chat_template ? "yes" : "no");
}

static cJSON *tokenizer_json(const tok_summary *t, const gm_config *c, bool have_cfg) {
    cJSON *o = cJSON_CreateObject();
    if (t->model[0]) cJSON_AddStringToObject(o, "model", t->model);
    else cJSON_AddNullToObject(o, "model");
    cJSON_AddNumberToObject(o, "vocab_size", (double)t->vocab);
    cJSON_AddNumberToObject(o, "bos_id", (double)t->bos);
    cJSON_AddNumberToObject(o, "eos_id", (double)t->eos);
    cJSON_AddNumberToObject(o, "unk_id", (double)t->unk);
    cJSON_AddNumberToObject(o, "pad_id", (double)t->pad);
    cJSON_AddNumberToObject(o, "eot_id", have_cfg ? c->eot_id : -1);
    if (t->add_bos >= 0) cJSON_AddBoolToObject(o, "add_bos", t->add_bos);
    else cJSON_AddNullToObject(o, "add_bos");
    if (t->add_eos >= 0) cJSON_AddBoolToObject(o, "add_eos", t->add_eos);
    else cJSON_AddNullToObject(o, "add_eos");
    cJSON_AddBoolToObject(o, "has_chat_template", t->chat_template);
    return o;
}

/* ------------------------------------------------------------------ tensors */

static const char *type_name(int type) {
    const char *n = gm_type_name(type);
    return n ? n : "?";
}

typedef struct totals {
    int64_t count;
    uint64_t bytes;
    int64_t per_type[64];
    uint64_t bytes_per_type[64];
} totals;

static void count(totals *t, const gm_tensor *x) {
    t->count++;
    t->bytes += x->nbytes;
    if (x->type >= 0 && x->type < 64) {
        t->per_type[x->type]++;
        t->bytes_per_type[x->type] += x->nbytes;
    }
}

static void shape_text(const gm_tensor *t, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int d = 0; d < t->n_dims && len < n; d++)
        len += (size_t)snprintf(buf + len, n - len, "%s%" PRId64, d ? ", " : "[", t->ne[d]);
    if (len < n) snprintf(buf + len, n - len, "]");
}

static void tensors_text(const gm_source *s, totals *tt, FILE *out) {
    fprintf(out, "tensors (shape in ggml order, ne[0] contiguous):\n");
    fprintf(out, "  %-40s %-6s %-22s %14s\n", "name", "type", "shape", "bytes");
    for (int64_t i = 0; i < gm_source_n_tensors(s); i++) {
        const gm_tensor *t = gm_source_tensor_at(s, i);
        char shape[96];
        shape_text(t, shape, sizeof shape);
        fprintf(out, "  %-40s %-6s %-22s %14" PRIu64 "\n", t->name, type_name(t->type), shape, t->nbytes);
        count(tt, t);
    }
    fprintf(out, "totals:\n  tensors                %" PRId64 "\n  bytes                  %" PRIu64 " (%.2f MiB)\n",
            tt->count, tt->bytes, (double)tt->bytes / (1024.0 * 1024.0));
    for (int k = 0; k < 64; k++)
        if (tt->per_type[k])
            fprintf(out, "  %-6s                 %" PRId64 " tensors, %" PRIu64 " bytes\n", type_name(k), tt->per_type[k],
                    tt->bytes_per_type[k]);
}

static cJSON *tensors_json(const gm_source *s, totals *tt, cJSON **totals_out) {
    cJSON *arr = cJSON_CreateArray();
    for (int64_t i = 0; i < gm_source_n_tensors(s); i++) {
        const gm_tensor *t = gm_source_tensor_at(s, i);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", t->name);
        if (strcmp(t->name, t->orig_name) != 0) cJSON_AddStringToObject(o, "file_name", t->orig_name);
        cJSON_AddStringToObject(o, "type", type_name(t->type));
        cJSON *shape = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->ne[d]));
        cJSON_AddNumberToObject(o, "bytes", (double)t->nbytes);
        cJSON_AddItemToArray(arr, o);
        count(tt, t);
    }
    cJSON *tot = cJSON_CreateObject();
    cJSON_AddNumberToObject(tot, "tensors", (double)tt->count);
    cJSON_AddNumberToObject(tot, "bytes", (double)tt->bytes);
    cJSON *by = cJSON_AddObjectToObject(tot, "by_type");
    for (int k = 0; k < 64; k++)
        if (tt->per_type[k]) cJSON_AddNumberToObject(by, type_name(k), (double)tt->per_type[k]);
    *totals_out = tot;
    return arr;
}

static const char *format_text(const gm_source *s, char *buf, size_t n) {
    if (gm_source_is_gguf(s)) {
        const gguf_file *g = gm_source_gguf(s);
        snprintf(buf, n, "GGUF v%u, %" PRIu64 " metadata keys, %" PRIu64 " tensors", g->version, g->n_kv, g->n_tensors);
    } else {
        snprintf(buf, n, "Hugging Face folder %s", gm_source_hf_dir(s));
    }
    return buf;
}

/* ---- per-layer table: runs of layers with the same facts (Gemma 1-3: the uniform rules of model/model.c) */

/* a layer's facts as shown: gm_layer_config plus the family's extras (neutral for families without) */
typedef struct shown_layer {
    gm_layer_config l;
    gm_layer_extras x;
} shown_layer;

static bool same_layer(const shown_layer *sa, const shown_layer *sb, int ia, int ib) {
    const gm_layer_config *a = &sa->l, *b = &sb->l;
    return a->head_dim == b->head_dim && a->n_heads == b->n_heads && a->n_kv_heads == b->n_kv_heads &&
           a->d_ff == b->d_ff && a->window == b->window && a->rope_base == b->rope_base &&
           a->rope_scale == b->rope_scale && a->rope_dims == b->rope_dims && (a->kv_source == ia) == (b->kv_source == ib) &&
           (a->kv_source == ia || a->kv_source == b->kv_source) && sa->x.rotated_pairs == sb->x.rotated_pairs &&
           sa->x.v_from_k == sb->x.v_from_k && sa->x.out_scale == sb->x.out_scale && sa->x.n_expert == sb->x.n_expert &&
           sa->x.n_expert_used == sb->x.n_expert_used && sa->x.ff_exp == sb->x.ff_exp;
}

/* layer il's facts: the uniform rules, then the family's per-layer facts and extras (3n's KV sharing, 4's
 * per-layer keys and tensors; read without error here: the config loaded, so they were checked) */
static shown_layer layer_at(const gm_source *s, const gm_config *c, int il) {
    shown_layer r = {.l = gm_layer_config_uniform(s, c, il), .x = {.rotated_pairs = -1, .out_scale = 1.0f}};
    const gm_family *f = c->family;
    if (f && f->layer_config && f->layer_config(s, c, il, &r.l, NULL) == GM_OK && f->layer_extras)
        f->layer_extras(s, &r.l, il, &r.x);
    return r;
}

/* calls fn(first, last, facts) for each run of alike layers */
static void layer_runs(const gm_source *s, const gm_config *c, void (*fn)(int, int, const shown_layer *, void *),
                       void *user) {
    for (int i = 0; i < c->n_layers;) {
        const shown_layer a = layer_at(s, c, i);
        int j = i + 1;
        for (; j < c->n_layers; j++) {
            const shown_layer b = layer_at(s, c, j);
            if (!same_layer(&a, &b, i, j)) break;
        }
        fn(i, j - 1, &a, user);
        i = j;
    }
}

static void layer_line(int first, int last, const shown_layer *sl, void *user) {
    FILE *out = user;
    const gm_layer_config *l = &sl->l;
    char span[32], kv[32], rot[32] = "", extra[128] = "";
    snprintf(span, sizeof span, first == last ? "%d" : "%d-%d", first, last);
    snprintf(kv, sizeof kv, sl->x.reads_target ? "the target's" : l->kv_source == first ? "own" : "of layer %d",
             l->kv_source);
    if (sl->x.rotated_pairs >= 0) snprintf(rot, sizeof rot, ", %d rotate", sl->x.rotated_pairs);
    if (sl->x.v_from_k) snprintf(extra, sizeof extra, "  no attn_v (V = K)");
    if (sl->x.out_scale != 1.0f)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "  out x%g", sl->x.out_scale);
    if (sl->x.n_expert > 0)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "  moe %d experts top %d width %d",
                 sl->x.n_expert, sl->x.n_expert_used, sl->x.ff_exp);
    fprintf(out, "  %-8s %-7s window %-5d head_dim %-4d heads %d/%d  ffn %-6d rope base %g scale %g (%d dims%s)  kv %s%s\n",
            span, l->window ? "sliding" : "full", l->window, l->head_dim, l->n_heads, l->n_kv_heads, l->d_ff,
            l->rope_base, l->rope_scale, l->rope_dims, rot, kv, extra);
}

static void layer_obj(int first, int last, const shown_layer *sl, void *user) {
    const gm_layer_config *l = &sl->l;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "first", first);
    cJSON_AddNumberToObject(o, "last", last);
    cJSON_AddStringToObject(o, "kind", l->window ? "sliding" : "full");
    cJSON_AddNumberToObject(o, "window", l->window);
    cJSON_AddNumberToObject(o, "head_dim", l->head_dim);
    cJSON_AddNumberToObject(o, "n_heads", l->n_heads);
    cJSON_AddNumberToObject(o, "n_kv_heads", l->n_kv_heads);
    cJSON_AddNumberToObject(o, "d_ff", l->d_ff);
    cJSON_AddNumberToObject(o, "rope_base", float_for_json(l->rope_base));
    cJSON_AddNumberToObject(o, "rope_scale", float_for_json(l->rope_scale));
    cJSON_AddNumberToObject(o, "rope_dims", l->rope_dims);
    cJSON_AddBoolToObject(o, "kv_shared", l->kv_source != first || sl->x.reads_target);
    if (sl->x.reads_target) cJSON_AddBoolToObject(o, "kv_of_target", true);
    cJSON_AddNumberToObject(o, "kv_source", l->kv_source == first ? first : l->kv_source);
    if (sl->x.rotated_pairs >= 0) cJSON_AddNumberToObject(o, "rope_rotated_pairs", sl->x.rotated_pairs);
    if (sl->x.v_from_k) cJSON_AddBoolToObject(o, "v_from_k", true);
    if (sl->x.out_scale != 1.0f) cJSON_AddNumberToObject(o, "output_scale", float_for_json(sl->x.out_scale));
    if (sl->x.n_expert > 0) {
        cJSON_AddNumberToObject(o, "n_experts", sl->x.n_expert);
        cJSON_AddNumberToObject(o, "n_experts_used", sl->x.n_expert_used);
        cJSON_AddNumberToObject(o, "expert_d_ff", sl->x.ff_exp);
    }
    cJSON_AddItemToArray(user, o);
}

static void describe_text(const gm_source *s, const gm_config *c, bool have_cfg, const tok_summary *tok, FILE *out) {
    char fmt[4200];
    fprintf(out, "file: %s\nformat: %s\n", gm_source_path(s), format_text(s, fmt, sizeof fmt));
    if (have_cfg) {
        if (c->generation) fprintf(out, "architecture: %s (Gemma %d)\n", c->arch, c->generation);
        else fprintf(out, "architecture: %s (a draft head)\n", c->arch);
        config_text(c, out);
        fprintf(out, "layers:\n");
        layer_runs(s, c, layer_line, out);
    }
    tokenizer_text(tok, c, have_cfg, out);
    totals tt;
    memset(&tt, 0, sizeof tt);
    tensors_text(s, &tt, out);
}

static bool describe_json(const gm_source *s, const gm_config *c, bool have_cfg, const char *cfg_err,
                          const tok_summary *tok, FILE *out) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", gm_source_path(s));
    cJSON_AddStringToObject(o, "format", gm_source_is_gguf(s) ? "gguf" : "hf");
    if (gm_source_is_gguf(s)) cJSON_AddNumberToObject(o, "gguf_version", gm_source_gguf(s)->version);
    if (have_cfg) {
        cJSON_AddStringToObject(o, "architecture", c->arch);
        cJSON_AddItemToObject(o, "config", config_json(c));
        cJSON *layers = cJSON_CreateArray();
        layer_runs(s, c, layer_obj, layers);
        cJSON_AddItemToObject(o, "layers", layers);
    } else {
        cJSON_AddNullToObject(o, "config");
        cJSON_AddStringToObject(o, "config_error", cfg_err);
    }
    cJSON_AddItemToObject(o, "tokenizer", tokenizer_json(tok, c, have_cfg));
    totals tt;
    memset(&tt, 0, sizeof tt);
    cJSON *tot = NULL;
    cJSON_AddItemToObject(o, "tensors", tensors_json(s, &tt, &tot));
    cJSON_AddItemToObject(o, "totals", tot);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    bool ok = text && fputs(text, out) >= 0 && fputc('\n', out) != EOF;
    free(text);
    return ok;
}

gm_status gm_source_describe(const gm_source *s, const gm_config *cfg, const char *cfg_error, bool json,
                             void *FILE_stream, gm_error *err) {
    FILE *out = FILE_stream;
    if (!s || !out) return gm_fail(err, GM_ERR_ARG, "gm_source_describe: NULL argument");
    gm_config none;
    memset(&none, 0, sizeof none);
    bool have_cfg = cfg != NULL;
    const gm_config *c = cfg ? cfg : &none;
    tok_summary tok = {"", -1, -1, -1, -1, -1, -1, -1, false};
    if (gm_source_is_gguf(s)) tokenizer_gguf(gm_source_gguf(s), &tok);
    else tokenizer_hf(s, c, have_cfg, &tok);
    bool ok = true;
    if (json) ok = describe_json(s, c, have_cfg, cfg_error ? cfg_error : "", &tok, out);
    else describe_text(s, c, have_cfg, &tok, out);
    if (fflush(out) != 0 || ferror(out) || !ok)
        return gm_fail(err, GM_ERR_IO, "%s: cannot write the description", gm_source_path(s));
    return GM_OK;
}

gm_status gm_model_describe(const char *path, bool json, bool keep_mtp, void *FILE_stream, gm_error *err) {
    gm_source *s = NULL;
    gm_status st = gm_source_open(path, keep_mtp, &s, err);
    if (st) return st;
    gm_config c;
    gm_error cerr = {0};
    const bool have_cfg = gm_config_load(s, &c, &cerr) == GM_OK;
    st = gm_source_describe(s, have_cfg ? &c : NULL, cerr.msg, json, FILE_stream, err);
    gm_source_close(s);
    if (st || have_cfg) return st; /* a write error comes first */
    if (err) *err = cerr;
    return cerr.code;
}
