/* tests/support/tiny_gemma3n.c — see tiny_gemma3n.h; mirrors tests/gen/gen_gemma3n_fixtures.py. */
#include "support/tiny_gemma3n.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gemma.h"
#include "support/gguf_writer.h"
#include "support/hf_writer.h"

enum { D = 64, H = 4, HKV = 2, HD = 16, FF = 128, V = 300, W = 8, P = 256, R = 64, NA = 4 };
static const uint64_t SEED = 0x3E3E3E;

void t3n_options_default(t3n_options *o) {
    memset(o, 0, sizeof *o);
    o->n_layers = 25;
    o->context_length = 128;
    o->shared_kv_layers = -1;
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* value i: splitmix64 output i+1 of the state SEED ^ fnv1a(name), as the Python generator computes it */
static void fill(const char *name, float *out, int64_t n, double a, double mean) {
    uint64_t s = SEED ^ fnv1a(name);
    for (int64_t i = 0; i < n; i++) {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        const double u = (double)(z >> 11) * (1.0 / 9007199254740992.0);
        out[i] = (float)((2.0 * u - 1.0) * a + mean);
    }
}

static const char *const WORDS[] = {"\xe2\x96\x81", "\xe2\x96\x81the", "\xe2\x96\x81" "a", "e", "t", "a", "o", "n",
                                    "\xe2\x96\x81of", "\xe2\x96\x81" "and", "th", "he", "in", "er", "an", "re", "on",
                                    "at", "en", "nd", "ti", "es", "or", "te", "of", "ed", "is", "it", "al", "ar", "st",
                                    "to", "nt", "ng", "se", "ha", "as", "ou"};

/* the vocabulary: 6 control tokens (<unk> as type 2), 256 byte tokens, WORDS with falling scores */
static void vocab(const char **toks, float *scores, int32_t *types) {
    static char bytes[256][8];
    static const char *const special[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"};
    int n = 0;
    for (int i = 0; i < 6; i++, n++) toks[n] = special[i], scores[n] = 0.0f, types[n] = i == 3 ? 2 : 3;
    for (int b = 0; b < 256; b++, n++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        toks[n] = bytes[b], scores[n] = 0.0f, types[n] = 6;
    }
    for (size_t i = 0; i < sizeof WORDS / sizeof WORDS[0]; i++, n++)
        toks[n] = WORDS[i], scores[n] = -(float)(i + 1), types[n] = 1;
}

static void add_vocab(gw_writer *w) {
    const char *toks[V];
    float scores[V];
    int32_t types[V];
    vocab(toks, scores, types);
    gw_add_str(w, "tokenizer.ggml.model", "llama");
    gw_add_arr_str(w, "tokenizer.ggml.tokens", V, toks);
    gw_add_arr(w, "tokenizer.ggml.scores", GGUF_VT_F32, V, scores);
    gw_add_arr(w, "tokenizer.ggml.token_type", GGUF_VT_I32, V, types);
    gw_add_u32(w, "tokenizer.ggml.bos_token_id", 2);
    gw_add_u32(w, "tokenizer.ggml.eos_token_id", 1);
    gw_add_u32(w, "tokenizer.ggml.unknown_token_id", 3);
    gw_add_u32(w, "tokenizer.ggml.padding_token_id", 0);
    gw_add_bool(w, "tokenizer.ggml.add_bos_token", true);
    gw_add_bool(w, "tokenizer.ggml.add_space_prefix", false);
}

static void add_keys(gw_writer *w, const t3n_options *o) {
    const int L = o->n_layers;
    gw_add_str(w, "general.architecture", "gemma3n");
    gw_add_u32(w, "gemma3n.context_length", (uint32_t)o->context_length);
    gw_add_u32(w, "gemma3n.embedding_length", D);
    gw_add_u32(w, "gemma3n.block_count", (uint32_t)L);
    if (o->non_uniform_ff) {
        int32_t *ff = malloc((size_t)L * sizeof *ff);
        for (int i = 0; i < L; i++) ff[i] = i == L - 1 ? 2 * FF : FF;
        gw_add_arr(w, "gemma3n.feed_forward_length", GGUF_VT_I32, (uint64_t)L, ff);
        free(ff);
    } else {
        gw_add_u32(w, "gemma3n.feed_forward_length", FF);
    }
    gw_add_u32(w, "gemma3n.attention.head_count", H);
    gw_add_u32(w, "gemma3n.attention.head_count_kv", HKV);
    gw_add_u32(w, "gemma3n.attention.key_length", HD);
    gw_add_u32(w, "gemma3n.attention.value_length", HD);
    gw_add_f32(w, "gemma3n.attention.layer_norm_rms_epsilon", 1e-6f);
    gw_add_u32(w, "gemma3n.attention.sliding_window", W);
    if (o->pattern) {
        gw_add_u32(w, "gemma3n.attention.sliding_window_pattern", (uint32_t)o->pattern);
    } else {
        uint8_t *swa = malloc((size_t)L);
        for (int i = 0; i < L; i++) swa[i] = i % 5 < 4;
        gw_add_arr(w, "gemma3n.attention.sliding_window_pattern", GGUF_VT_BOOL, (uint64_t)L, swa);
        free(swa);
    }
    gw_add_f32(w, "gemma3n.rope.freq_base", 1000000.0f);
    gw_add_f32(w, "gemma3n.rope.freq_base_swa", 10000.0f);
    gw_add_f32(w, "gemma3n.final_logit_softcapping", 30.0f);
    gw_add_u32(w, "gemma3n.altup.num_inputs", NA);
    gw_add_u32(w, "gemma3n.altup.active_idx", 0);
    gw_add_u32(w, "gemma3n.embedding_length_per_layer_input", P);
    const int shared = o->shared_kv_layers >= 0 ? o->shared_kv_layers : L > 20 ? L - 20 : 0;
    gw_add_u32(w, "gemma3n.attention.shared_kv_layers", (uint32_t)shared);
    add_vocab(w);
}

typedef struct tdesc {
    char name[64];
    int nd;
    int64_t ne[3];
    double a, mean;
} tdesc;

/* the tensors in the Python generator's order (ggml shapes) */
static int describe(int L, tdesc *t) {
    int n = 0;
#define T(nm, ndims, e0, e1, e2, aa, mm)                                                               \
    do {                                                                                               \
        snprintf(t[n].name, sizeof t[n].name, "%s", nm);                                               \
        t[n].nd = ndims, t[n].ne[0] = e0, t[n].ne[1] = e1, t[n].ne[2] = e2, t[n].a = aa, t[n].mean = mm; \
        n++;                                                                                           \
    } while (0)
#define FAN(k) sqrt(3.0 / (double)(k))
    T("token_embd.weight", 2, D, V, 1, 0.5, 0.0);
    T("altup_proj.weight", 3, D, D, NA - 1, FAN(D), 0.0);
    T("altup_unembd_proj.weight", 3, D, D, NA - 1, FAN(D), 0.0);
    T("per_layer_token_embd.weight", 2, (int64_t)P * L, V, 1, 0.1, 0.0);
    T("per_layer_model_proj.weight", 2, D, (int64_t)P * L, 1, FAN(D), 0.0);
    T("per_layer_proj_norm.weight", 1, P, 1, 1, 0.2, 1.0);
    T("output_norm.weight", 1, D, 1, 1, 0.2, 1.0);
    for (int i = 0; i < L; i++) {
        char nm[64];
#define B(suffix, ndims, e0, e1, aa, mm)                                \
    snprintf(nm, sizeof nm, "blk.%d.%s.weight", i, suffix);           \
    T(nm, ndims, e0, e1, 1, aa, mm);
        B("attn_norm", 1, D, 1, 0.2, 1.0)
        B("attn_q", 2, D, H * HD, FAN(D), 0.0)
        B("attn_k", 2, D, HKV * HD, FAN(D), 0.0)
        B("attn_v", 2, D, HKV * HD, FAN(D), 0.0)
        B("attn_output", 2, H * HD, D, FAN(H * HD), 0.0)
        B("attn_q_norm", 1, HD, 1, 0.1, 0.5)
        B("attn_k_norm", 1, HD, 1, 0.1, 0.5)
        B("post_attention_norm", 1, D, 1, 0.1, 0.3)
        B("ffn_norm", 1, D, 1, 0.2, 1.0)
        B("ffn_gate", 2, D, FF, FAN(D), 0.0)
        B("ffn_up", 2, D, FF, FAN(D), 0.0)
        B("ffn_down", 2, FF, D, FAN(FF), 0.0)
        B("post_ffw_norm", 1, D, 1, 0.1, 0.3)
        B("inp_gate", 2, D, P, FAN(D), 0.0)
        B("proj", 2, P, D, FAN(P), 0.0)
        B("post_norm", 1, D, 1, 0.1, 0.3)
        B("altup_correct_coef", 2, NA, NA, 0.25, 0.0)
        B("altup_correct_scale", 1, D, 1, 0.2, 1.0)
        B("altup_predict_coef", 2, NA, NA * NA, 0.25, 0.0)
        B("altup_router", 2, D, NA, 6.0, 0.0)
        B("altup_router_norm", 1, D, 1, 0.2, 1.0)
        B("laurel_l", 2, D, R, FAN(D), 0.0)
        B("laurel_r", 2, R, D, FAN(R), 0.0)
        B("laurel_post_norm", 1, D, 1, 0.1, 0.3)
#undef B
    }
#undef T
#undef FAN
    return n;
}

/* A tensor's values with the options' overrides applied. */
static void values(const t3n_options *o, const tdesc *t, float *v, int64_t count) {
    fill(t->name, v, count, t->a, t->mean);
    int il = -1;
    char part[48] = "";
    if (sscanf(t->name, "blk.%d.%47[^.]", &il, part) != 2) return;
    float set = 0.0f;
    bool over = false;
    if (o->zero_sparse_gates && il < 10 && !strcmp(part, "ffn_gate")) over = true, set = 0.0f;
    const float clip = o->clamp_correct_coef;
    for (int64_t k = 0; clip > 0.0f && !strcmp(part, "altup_correct_coef") && k < count; k++)
        v[k] = v[k] > clip ? clip : v[k] < -clip ? -clip : v[k];
    if (o->correct_scale_ones && !strcmp(part, "altup_correct_scale")) over = true, set = 1.0f;
    for (int64_t k = 0; over && k < count; k++) v[k] = set;
}

bool t3n_write_gguf(const t3n_options *o, const char *path, char *err, size_t err_len) {
    const int L = o->n_layers;
    tdesc *t = malloc((size_t)(8 + 24 * L) * sizeof *t);
    if (!t) abort();
    const int n = describe(L, t);
    gw_writer *w = gw_new();
    add_keys(w, o);
    bool ok = true;
    for (int i = 0; ok && i < n; i++) {
        if (o->drop && !strcmp(o->drop, t[i].name)) continue;
        int64_t ne[3] = {t[i].ne[0], t[i].ne[1], t[i].ne[2]};
        const int64_t count = ne[0] * ne[1] * ne[2];
        float *v = malloc((size_t)count * sizeof *v);
        if (!v) abort();
        values(o, &t[i], v, count);
        if (o->reshape && !strcmp(o->reshape, t[i].name)) ne[t[i].nd - 1] /= 2;
        ok = gw_add_tensor_f32(w, t[i].name, GM_TYPE_F32, t[i].nd, ne, v);
        free(v);
    }
    if (ok) ok = gw_write_file(w, path);
    if (!ok) snprintf(err, err_len, "t3n_write_gguf(%s): %s", path, gw_error(w));
    gw_free(w);
    free(t);
    return ok;
}

/* ------------------------------------------------------------------ HF form */

/* GGUF name -> HF name (Gemma3nForConditionalGeneration: model.language_model.*); the stacked AltUp tensors
 * are handled by the caller. */
static void hf_name(const char *gguf, char *out, size_t n) {
    static const char *const top[][2] = {
        {"token_embd.weight", "embed_tokens.weight"},
        {"per_layer_token_embd.weight", "embed_tokens_per_layer.weight"},
        {"per_layer_model_proj.weight", "per_layer_model_projection.weight"},
        {"per_layer_proj_norm.weight", "per_layer_projection_norm.weight"},
        {"output_norm.weight", "norm.weight"},
    };
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (!strcmp(gguf, top[i][0])) {
            snprintf(out, n, "model.language_model.%s", top[i][1]);
            return;
        }
    static const char *const layer[][2] = {
        {"attn_norm", "input_layernorm.weight"}, {"attn_q", "self_attn.q_proj.weight"},
        {"attn_k", "self_attn.k_proj.weight"}, {"attn_v", "self_attn.v_proj.weight"},
        {"attn_output", "self_attn.o_proj.weight"}, {"attn_q_norm", "self_attn.q_norm.weight"},
        {"attn_k_norm", "self_attn.k_norm.weight"}, {"post_attention_norm", "post_attention_layernorm.weight"},
        {"ffn_norm", "pre_feedforward_layernorm.weight"}, {"ffn_gate", "mlp.gate_proj.weight"},
        {"ffn_up", "mlp.up_proj.weight"}, {"ffn_down", "mlp.down_proj.weight"},
        {"post_ffw_norm", "post_feedforward_layernorm.weight"}, {"inp_gate", "per_layer_input_gate.weight"},
        {"proj", "per_layer_projection.weight"}, {"post_norm", "post_per_layer_input_norm.weight"},
        {"altup_correct_coef", "altup.correction_coefs.weight"}, {"altup_correct_scale", "altup.correct_output_scale"},
        {"altup_predict_coef", "altup.prediction_coefs.weight"}, {"altup_router", "altup.modality_router.weight"},
        {"altup_router_norm", "altup.router_norm.weight"}, {"laurel_l", "laurel.linear_left.weight"},
        {"laurel_r", "laurel.linear_right.weight"}, {"laurel_post_norm", "laurel.post_laurel_norm.weight"},
    };
    int il;
    char part[48];
    if (sscanf(gguf, "blk.%d.%47[^.]", &il, part) == 2)
        for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++)
            if (!strcmp(part, layer[i][0])) {
                snprintf(out, n, "model.language_model.layers.%d.%s", il, layer[i][1]);
                return;
            }
    snprintf(out, n, "%s", gguf);
}

typedef struct hf_tensor {
    char name[128];
    int nd;
    int64_t shape[2]; /* torch order */
    float *data;
    int64_t count;
} hf_tensor;

static bool write_safetensors(const char *path, const hf_tensor *t, int n) {
    st_tensor *st = calloc((size_t)n, sizeof *st);
    if (!st) return false;
    for (int i = 0; i < n; i++)
        st[i] = (st_tensor){t[i].name, "F32", t[i].nd, {t[i].shape[0], t[i].shape[1]}, t[i].data,
                            (size_t)t[i].count * sizeof(float)};
    const bool ok = st_write(path, st, n);
    free(st);
    return ok;
}

static cJSON *hf_config(const t3n_options *o) {
    const int L = o->n_layers;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model_type", "gemma3n");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "architectures"),
                         cJSON_CreateString("Gemma3nForConditionalGeneration"));
    cJSON *c = cJSON_AddObjectToObject(root, "text_config");
    cJSON_AddStringToObject(c, "model_type", "gemma3n_text");
    cJSON_AddNumberToObject(c, "vocab_size", V);
    cJSON_AddNumberToObject(c, "vocab_size_per_layer_input", V);
    cJSON_AddNumberToObject(c, "hidden_size", D);
    cJSON_AddNumberToObject(c, "hidden_size_per_layer_input", P);
    cJSON *ff = cJSON_AddArrayToObject(c, "intermediate_size");
    cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
    cJSON *sp = cJSON_AddArrayToObject(c, "activation_sparsity_pattern");
    for (int i = 0; i < L; i++) {
        cJSON_AddItemToArray(ff, cJSON_CreateNumber(FF));
        cJSON_AddItemToArray(lt, cJSON_CreateString(i % 5 < 4 ? "sliding_attention" : "full_attention"));
        cJSON_AddItemToArray(sp, cJSON_CreateNumber(!o->hf_no_sparsity && i < 10 ? 0.95 : 0.0));
    }
    cJSON_AddNumberToObject(c, "num_hidden_layers", L);
    cJSON_AddNumberToObject(c, "num_attention_heads", H);
    cJSON_AddNumberToObject(c, "num_key_value_heads", HKV);
    cJSON_AddNumberToObject(c, "head_dim", HD);
    cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
    cJSON_AddNumberToObject(c, "max_position_embeddings", o->context_length);
    cJSON_AddNumberToObject(c, "rms_norm_eps", 1e-6);
    cJSON_AddNumberToObject(c, "rope_theta", 1000000.0);
    cJSON_AddNumberToObject(c, "rope_local_base_freq", 10000.0);
    cJSON_AddNumberToObject(c, "sliding_window", W);
    cJSON_AddNumberToObject(c, "final_logit_softcapping", 30.0);
    cJSON_AddNumberToObject(c, "altup_active_idx", 0);
    cJSON_AddNumberToObject(c, "altup_coef_clip", o->hf_coef_clip > 0.0f ? o->hf_coef_clip : 120.0);
    cJSON_AddBoolToObject(c, "altup_correct_scale", !o->hf_no_correct_scale);
    cJSON_AddNumberToObject(c, "altup_num_inputs", NA);
    cJSON_AddNumberToObject(c, "num_kv_shared_layers", L > 20 ? L - 20 : 0);
    cJSON_AddNumberToObject(c, "laurel_rank", R);
    cJSON_AddNumberToObject(c, "bos_token_id", 2);
    cJSON_AddNumberToObject(c, "eos_token_id", 1);
    cJSON_AddNumberToObject(c, "pad_token_id", 0);
    return root;
}

/* tokenizer.json and tokenizer_config.json: the GGUF's vocabulary, its control tokens special */
static bool write_tokenizer(const char *dir) {
    const char *toks[V];
    float scores[V];
    int32_t types[V];
    double sc[V];
    bool special[V];
    vocab(toks, scores, types);
    for (int i = 0; i < V; i++) sc[i] = scores[i], special[i] = types[i] == 2 || types[i] == 3;
    return hf_write_tokenizer(dir, V, toks, sc, special, 3);
}

bool t3n_write_hf(const t3n_options *o, const char *dir, char *err, size_t err_len) {
    const int L = o->n_layers;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, err_len, "t3n_write_hf: cannot create %s", dir);
        return false;
    }
    tdesc *t = malloc((size_t)(8 + 24 * L) * sizeof *t);
    hf_tensor *h = calloc((size_t)(16 + 24 * L), sizeof *h);
    if (!t || !h) abort();
    const int n = describe(L, t);
    int m = 0;
    for (int i = 0; i < n; i++) {
        const int64_t count = t[i].ne[0] * t[i].ne[1] * t[i].ne[2];
        float *v = malloc((size_t)count * sizeof *v);
        if (!v) abort();
        values(o, &t[i], v, count);
        if (t[i].nd == 3) { /* the stacked AltUp projections: one [d, d] tensor per slice */
            const bool un = strstr(t[i].name, "unembd") != NULL;
            for (int k = 0; k < t[i].ne[2]; k++) {
                hf_tensor *e = &h[m++];
                snprintf(e->name, sizeof e->name, "model.language_model.%s.%d.weight",
                         un ? "altup_unembed_projections" : "altup_projections", k);
                e->nd = 2, e->shape[0] = t[i].ne[1], e->shape[1] = t[i].ne[0];
                e->count = t[i].ne[0] * t[i].ne[1];
                e->data = malloc((size_t)e->count * sizeof(float));
                if (!e->data) abort();
                memcpy(e->data, v + (size_t)k * (size_t)e->count, (size_t)e->count * sizeof(float));
            }
            free(v);
            continue;
        }
        hf_tensor *e = &h[m++];
        hf_name(t[i].name, e->name, sizeof e->name);
        e->nd = t[i].nd;
        if (t[i].nd == 1) e->shape[0] = t[i].ne[0];
        else e->shape[0] = t[i].ne[1], e->shape[1] = t[i].ne[0];
        e->data = v, e->count = count;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    bool ok = write_safetensors(path, h, m);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (ok) ok = st_write_json(path, hf_config(o));
    if (ok) ok = write_tokenizer(dir);
    if (!ok) snprintf(err, err_len, "t3n_write_hf(%s): cannot write the folder", dir);
    for (int i = 0; i < m; i++) free(h[i].data);
    free(h);
    free(t);
    return ok;
}
