/* tests/support/tiny_model.c — see tiny_model.h. */
#include "support/tiny_model.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "quant/quant.h"
#include "support/gguf_writer.h"
#include "support/hf_writer.h"

/* ------------------------------------------------------------------ options */

void tm_options_default(tm_options *o, const char *arch) {
    memset(o, 0, sizeof *o);
    o->arch = arch ? arch : "gemma3";
    o->n_layers = 2;
    o->d_model = 64;
    o->n_heads = 4;
    o->n_kv_heads = 2;
    o->head_dim = 16;
    o->d_ff = 128;
    o->context_length = 256;
    o->sliding_window = 8;
    o->norm_eps = 1e-6f;
    bool g3 = !strcmp(o->arch, "gemma3");
    bool g2 = !strcmp(o->arch, "gemma2");
    o->rope_base = g3 ? 1e6f : 1e4f;
    o->rope_scale_global = 1.0f;
    o->attn_softcap = g2 ? 50.0f : 0.0f;
    o->final_softcap = g2 ? 30.0f : 0.0f;
    o->query_pre_attn_scalar = (float)o->head_dim;
    o->weight_type = 0; /* GM_TYPE_F32 */
    o->embd_type = 0;
    o->seed = 1234;
}

static int generation(const tm_options *o) {
    if (!strcmp(o->arch, "gemma2")) return 2;
    if (!strcmp(o->arch, "gemma3")) return 3;
    return 1;
}

/* ------------------------------------------------------------------ vocabulary */

static const char *const k_control[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"};
/* Word pieces after the bytes, best (highest score) first. "\xe2\x96\x81" is U+2581. */
#define SP "\xe2\x96\x81" /* U+2581, SentencePiece's space */
static const char *const k_pieces[] = {
    SP, "e", "t", "a", "o", "i", "n", "s", "h", "r", "d", "l", "u", "c", "m", "w", "f", "g", "y",
    "p", "b", "v", "k", "j", "x", "q", "z", "\n", "th", "he", "in", "er", "an", "on", "re", "is", "at",
    SP "t", SP "a", SP "s", SP "i", SP "w", SP "o",
    "the", "ing", SP "the", SP "is", SP "of", SP "and", SP "to",
    SP "in", SP "capital", SP "France", SP "Paris", SP "hello",
    SP "world", "Hello", "user", "model", ".", ",", "?", "!", SP "The",
};
#undef SP
enum {
    N_CONTROL = sizeof k_control / sizeof k_control[0],
    N_PIECES = sizeof k_pieces / sizeof k_pieces[0],
    N_VOCAB = N_CONTROL + 256 + N_PIECES,
};

int tm_vocab_size(void) { return N_VOCAB; }

const char *tm_vocab_token(int id) {
    static char bytes[256][7];
    if (id < 0 || id >= N_VOCAB) return NULL;
    if (id < N_CONTROL) return k_control[id];
    if (id < N_CONTROL + 256) {
        char *b = bytes[id - N_CONTROL];
        snprintf(b, sizeof bytes[0], "<0x%02X>", id - N_CONTROL);
        return b;
    }
    return k_pieces[id - N_CONTROL - 256];
}

float tm_vocab_score(int id) {
    if (id < N_CONTROL + 256) return 0.0f;
    return -(float)(id - N_CONTROL - 256); /* earlier pieces win merges */
}

int tm_vocab_type(int id) {
    if (id == TM_UNK) return 2;
    if (id < N_CONTROL) return 3;
    if (id < N_CONTROL + 256) return 6;
    return 1;
}

/* ------------------------------------------------------------------ tensors */

typedef enum { K_MATRIX, K_EMBED, K_NORM } kind;

typedef struct tinfo {
    char name[96];
    int n_dims;
    int64_t ne[4];
    kind k;
} tinfo;

static const char *const k_layer_norms12[] = {"attn_norm", "ffn_norm"};

/* Enumerates the GGUF tensors in a fixed order; returns false past the end. */
static bool tensor_at(const tm_options *o, int i, tinfo *t) {
    memset(t, 0, sizeof *t);
    int64_t d = o->d_model, V = o->embd_rows > 0 ? o->embd_rows : N_VOCAB, q = (int64_t)o->n_heads * o->head_dim;
    int64_t kv = (int64_t)o->n_kv_heads * o->head_dim, ff = o->d_ff, hd = o->head_dim;
    int g = generation(o);
    int head = o->untied ? 3 : 2;
    t->ne[0] = t->ne[1] = t->ne[2] = t->ne[3] = 1;
#define SET(nm, nd, a, b, kk) \
    do { snprintf(t->name, sizeof t->name, "%s", nm); t->n_dims = nd; t->ne[0] = a; t->ne[1] = b; t->k = kk; } while (0)
    if (i == 0) { SET("token_embd.weight", 2, d, V, K_EMBED); return true; }
    if (i == 1) { SET("output_norm.weight", 1, d, 1, K_NORM); return true; }
    if (i == 2 && o->untied) { SET("output.weight", 2, d, V, K_EMBED); return true; }
    int per = 9 + (g >= 2 ? 2 : 0) + (g >= 3 ? 2 : 0);
    int j = i - head;
    if (j < per * o->n_layers) {
        int l = j / per, r = j % per;
        char nm[96];
        const char *base = NULL;
        int nd = 2;
        int64_t a = 0, b = 0;
        kind kk = K_MATRIX;
        switch (r) {
        case 0: base = k_layer_norms12[0]; nd = 1; a = d; kk = K_NORM; break;
        case 1: base = "attn_q"; a = d; b = q; break;
        case 2: base = "attn_k"; a = d; b = kv; break;
        case 3: base = "attn_v"; a = d; b = kv; break;
        case 4: base = "attn_output"; a = q; b = d; break;
        case 5: base = k_layer_norms12[1]; nd = 1; a = d; kk = K_NORM; break;
        case 6: base = "ffn_gate"; a = d; b = ff; break;
        case 7: base = "ffn_up"; a = d; b = ff; break;
        case 8: base = "ffn_down"; a = ff; b = d; break;
        case 9: base = "post_attention_norm"; nd = 1; a = d; kk = K_NORM; break;
        case 10: base = "post_ffw_norm"; nd = 1; a = d; kk = K_NORM; break;
        case 11: base = "attn_q_norm"; nd = 1; a = hd; kk = K_NORM; break;
        default: base = "attn_k_norm"; nd = 1; a = hd; kk = K_NORM; break;
        }
        snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, base);
        SET(nm, nd, a, nd == 2 ? b : 1, kk);
        return true;
    }
    if (o->add_mtp && j == per * o->n_layers) {
        char nm[96];
        snprintf(nm, sizeof nm, "blk.%d.nextn.eh_proj.weight", o->n_layers);
        SET(nm, 2, 2 * d, d, K_MATRIX);
        return true;
    }
#undef SET
    return false;
}

int tm_tensor_count(const tm_options *o) {
    tinfo t;
    int n = 0;
    while (tensor_at(o, n, &t)) n++;
    return n;
}

bool tm_tensor_info(const tm_options *o, int i, char *name, size_t name_len, int *n_dims, int64_t ne[4]) {
    tinfo t;
    if (!tensor_at(o, i, &t)) return false;
    snprintf(name, name_len, "%s", t.name);
    *n_dims = t.n_dims;
    memcpy(ne, t.ne, sizeof t.ne);
    return true;
}

static bool find_tensor(const tm_options *o, const char *name, tinfo *t) {
    for (int i = 0; tensor_at(o, i, t); i++)
        if (!strcmp(t->name, name)) return true;
    return false;
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

static int64_t numel(const tinfo *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }

static void fill_values(const tm_options *o, const tinfo *t, float *out) {
    uint64_t s = o->seed ^ fnv1a(t->name);
    float a = t->k == K_NORM ? 0.2f : t->k == K_EMBED ? 0.5f : sqrtf(3.0f / (float)t->ne[0]);
    for (int64_t i = 0; i < numel(t); i++) {
        double u = (double)(splitmix64(&s) >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
        float v = (float)((2.0 * u - 1.0) * a);
        if (t->k == K_EMBED && o->zero_embeddings) v = 0.0f;
        out[i] = gm_bf16_to_fp32(gm_fp32_to_bf16(v));
    }
}

bool tm_weight_values(const tm_options *o, const char *gguf_name, float *out, int64_t n) {
    tinfo t;
    if (!find_tensor(o, gguf_name, &t) || numel(&t) != n) return false;
    fill_values(o, &t, out);
    return true;
}

/* ------------------------------------------------------------------ GGUF */

static void add_key(gw_writer *w, const tm_options *o, const char *suffix, uint32_t v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", o->arch, suffix);
    gw_add_u32(w, key, v);
}

static void add_key_f(gw_writer *w, const tm_options *o, const char *suffix, float v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", o->arch, suffix);
    gw_add_f32(w, key, v);
}

static void add_hparams(gw_writer *w, const tm_options *o) {
    char name[64];
    snprintf(name, sizeof name, "tiny-%s", o->arch);
    gw_add_str(w, "general.architecture", o->arch);
    gw_add_str(w, "general.name", name);
    add_key(w, o, "context_length", (uint32_t)o->context_length);
    add_key(w, o, "embedding_length", (uint32_t)o->d_model);
    add_key(w, o, "block_count", (uint32_t)o->n_layers);
    add_key(w, o, "feed_forward_length", (uint32_t)o->d_ff);
    add_key(w, o, "attention.head_count", (uint32_t)o->n_heads);
    add_key(w, o, "attention.head_count_kv", (uint32_t)o->n_kv_heads);
    add_key(w, o, "attention.key_length", (uint32_t)o->head_dim);
    add_key(w, o, "attention.value_length", (uint32_t)o->head_dim);
    add_key_f(w, o, "attention.layer_norm_rms_epsilon", o->norm_eps);
    add_key_f(w, o, "rope.freq_base", o->rope_base);
    int g = generation(o);
    if (g >= 2) add_key(w, o, "attention.sliding_window", (uint32_t)o->sliding_window);
    if (g == 2) {
        add_key_f(w, o, "attn_logit_softcapping", o->attn_softcap);
        add_key_f(w, o, "final_logit_softcapping", o->final_softcap);
    }
    if (g == 3 && o->rope_scale_global != 1.0f) {
        gw_add_str(w, "gemma3.rope.scaling.type", "linear");
        add_key_f(w, o, "rope.scaling.factor", o->rope_scale_global);
    }
    if (g == 3 && o->final_softcap != 0.0f) add_key_f(w, o, "final_logit_softcapping", o->final_softcap);
}

static void add_tokenizer(gw_writer *w) {
    const char *toks[N_VOCAB];
    float scores[N_VOCAB];
    int32_t types[N_VOCAB];
    for (int i = 0; i < N_VOCAB; i++) {
        toks[i] = tm_vocab_token(i);
        scores[i] = tm_vocab_score(i);
        types[i] = tm_vocab_type(i);
    }
    gw_add_str(w, "tokenizer.ggml.model", "llama");
    gw_add_arr_str(w, "tokenizer.ggml.tokens", N_VOCAB, toks);
    gw_add_arr(w, "tokenizer.ggml.scores", GGUF_VT_F32, N_VOCAB, scores);
    gw_add_arr(w, "tokenizer.ggml.token_type", GGUF_VT_I32, N_VOCAB, types);
    gw_add_u32(w, "tokenizer.ggml.bos_token_id", TM_BOS);
    gw_add_u32(w, "tokenizer.ggml.eos_token_id", TM_EOS);
    gw_add_u32(w, "tokenizer.ggml.unknown_token_id", TM_UNK);
    gw_add_u32(w, "tokenizer.ggml.padding_token_id", TM_PAD);
    gw_add_bool(w, "tokenizer.ggml.add_bos_token", true);
    gw_add_bool(w, "tokenizer.ggml.add_eos_token", false);
    gw_add_bool(w, "tokenizer.ggml.add_space_prefix", false);
    gw_add_str(w, "tokenizer.chat_template",
               "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ message['role'] }}\n"
               "{{ message['content'] }}<end_of_turn>\n{% endfor %}<start_of_turn>model\n");
}

bool tm_write_gguf(const tm_options *o, const char *path, char *err, size_t err_len) {
    gw_writer *w = gw_new();
    add_hparams(w, o);
    add_tokenizer(w);
    bool ok = true;
    tinfo t;
    for (int i = 0; ok && tensor_at(o, i, &t); i++) {
        float *v = malloc((size_t)numel(&t) * sizeof *v);
        if (!v) abort();
        fill_values(o, &t, v);
        int type = t.k == K_NORM ? GM_TYPE_F32 : t.k == K_EMBED ? o->embd_type : o->weight_type;
        if (t.k == K_MATRIX && o->down_type && strstr(t.name, "ffn_down")) type = o->down_type;
        if (t.k == K_NORM) /* llama.cpp's converter stores 1 + w */
            for (int64_t k = 0; k < numel(&t); k++) v[k] += 1.0f;
        ok = gw_add_tensor_f32(w, t.name, type, t.n_dims, t.ne, v);
        free(v);
    }
    if (ok) ok = gw_write_file(w, path);
    if (!ok) snprintf(err, err_len, "tm_write_gguf(%s): %s", path, gw_error(w));
    gw_free(w);
    return ok;
}

/* ------------------------------------------------------------------ HF folder */

/* GGUF name -> HF name (without any language_model prefix). */
static void hf_name(const tm_options *o, const char *gguf, char *out, size_t n) {
    int l;
    char part[64];
    if (!strcmp(gguf, "token_embd.weight")) { snprintf(out, n, "model.embed_tokens.weight"); return; }
    if (!strcmp(gguf, "output_norm.weight")) { snprintf(out, n, "model.norm.weight"); return; }
    if (!strcmp(gguf, "output.weight")) { snprintf(out, n, "lm_head.weight"); return; }
    if (sscanf(gguf, "blk.%d.%63[^.]", &l, part) != 2) { snprintf(out, n, "%s", gguf); return; }
    static const char *const map[][2] = {
        {"attn_norm", "input_layernorm"},     {"attn_q", "self_attn.q_proj"},
        {"attn_k", "self_attn.k_proj"},       {"attn_v", "self_attn.v_proj"},
        {"attn_output", "self_attn.o_proj"},  {"ffn_gate", "mlp.gate_proj"},
        {"ffn_up", "mlp.up_proj"},            {"ffn_down", "mlp.down_proj"},
        {"post_attention_norm", "post_attention_layernorm"},
        {"post_ffw_norm", "post_feedforward_layernorm"},
        {"attn_q_norm", "self_attn.q_norm"},  {"attn_k_norm", "self_attn.k_norm"},
    };
    const char *hf = NULL;
    if (!strcmp(part, "ffn_norm")) /* Gemma 1 calls the pre-FFN norm post_attention_layernorm */
        hf = generation(o) == 1 ? "post_attention_layernorm" : "pre_feedforward_layernorm";
    for (size_t i = 0; !hf && i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(part, map[i][0])) hf = map[i][1];
    snprintf(out, n, "model.layers.%d.%s.weight", l, hf ? hf : part);
}

typedef struct st_entry {
    char name[160];
    int64_t shape[2]; /* PyTorch order */
    int n_dims;
    uint8_t *data;
    size_t nbytes;
} st_entry;

static bool write_safetensors(const char *path, const st_entry *e, int n, const char *dtype) {
    st_tensor *st = calloc((size_t)n, sizeof *st);
    if (!st) return false;
    for (int i = 0; i < n; i++)
        st[i] = (st_tensor){e[i].name, dtype, e[i].n_dims, {e[i].shape[0], e[i].shape[1]}, e[i].data, e[i].nbytes};
    const bool ok = st_write(path, st, n);
    free(st);
    return ok;
}

static cJSON *hf_text_config(const tm_options *o) {
    int g = generation(o);
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "model_type", g == 1 ? "gemma" : g == 2 ? "gemma2" : "gemma3_text");
    cJSON_AddNumberToObject(c, "hidden_size", o->d_model);
    cJSON_AddNumberToObject(c, "intermediate_size", o->d_ff);
    cJSON_AddNumberToObject(c, "num_hidden_layers", o->n_layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", o->n_heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", o->n_kv_heads);
    cJSON_AddNumberToObject(c, "head_dim", o->head_dim);
    cJSON_AddNumberToObject(c, "vocab_size", o->embd_rows > 0 ? o->embd_rows : N_VOCAB);
    cJSON_AddNumberToObject(c, "max_position_embeddings", o->context_length);
    cJSON_AddNumberToObject(c, "rms_norm_eps", o->norm_eps);
    cJSON_AddNumberToObject(c, "rope_theta", o->rope_base);
    cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
    cJSON_AddNumberToObject(c, "bos_token_id", TM_BOS);
    cJSON_AddNumberToObject(c, "pad_token_id", TM_PAD);
    if (g == 3) {
        int eos[2] = {TM_EOS, TM_EOT};
        cJSON_AddItemToObject(c, "eos_token_id", cJSON_CreateIntArray(eos, 2));
    } else {
        cJSON_AddNumberToObject(c, "eos_token_id", TM_EOS);
    }
    cJSON_AddBoolToObject(c, "tie_word_embeddings", !o->untied);
    if (g >= 2) {
        cJSON_AddNumberToObject(c, "query_pre_attn_scalar", o->query_pre_attn_scalar);
        cJSON_AddNumberToObject(c, "sliding_window", o->sliding_window);
    }
    if (g == 2) {
        cJSON_AddNumberToObject(c, "attn_logit_softcapping", o->attn_softcap);
        cJSON_AddNumberToObject(c, "final_logit_softcapping", o->final_softcap);
    }
    if (g == 3) {
        cJSON_AddNumberToObject(c, "rope_local_base_freq", 10000.0);
        cJSON_AddNumberToObject(c, "sliding_window_pattern", 6);
        cJSON_AddNullToObject(c, "attn_logit_softcapping");
        if (o->final_softcap != 0.0f) cJSON_AddNumberToObject(c, "final_logit_softcapping", o->final_softcap);
        else cJSON_AddNullToObject(c, "final_logit_softcapping");
        if (o->rope_scale_global != 1.0f) {
            cJSON *rs = cJSON_AddObjectToObject(c, "rope_scaling");
            cJSON_AddStringToObject(rs, "rope_type", "linear");
            cJSON_AddNumberToObject(rs, "factor", o->rope_scale_global);
        } else {
            cJSON_AddNullToObject(c, "rope_scaling");
        }
        cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
        for (int i = 0; i < o->n_layers; i++)
            cJSON_AddItemToArray(lt, cJSON_CreateString((i + 1) % 6 ? "sliding_attention" : "full_attention"));
    }
    return c;
}

static bool write_configs(const tm_options *o, const tm_hf_options *h, const char *dir) {
    cJSON *c = hf_text_config(o);
    if (h->multimodal) {
        cJSON *outer = cJSON_CreateObject();
        cJSON_AddStringToObject(outer, "model_type", "gemma3");
        cJSON *arch = cJSON_AddArrayToObject(outer, "architectures");
        cJSON_AddItemToArray(arch, cJSON_CreateString("Gemma3ForConditionalGeneration"));
        cJSON_AddItemToObject(outer, "text_config", c);
        cJSON *vc = cJSON_AddObjectToObject(outer, "vision_config");
        cJSON_AddStringToObject(vc, "model_type", "siglip_vision_model");
        c = outer;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    bool ok = st_write_json(path, c);
    /* tokenizer.json and tokenizer_config.json: the GGUF's vocabulary and scores, control tokens special */
    const char *toks[N_VOCAB];
    double scores[N_VOCAB];
    bool special[N_VOCAB];
    for (int i = 0; i < N_VOCAB; i++) toks[i] = tm_vocab_token(i), scores[i] = tm_vocab_score(i), special[i] = i < N_CONTROL;
    ok = ok && hf_write_tokenizer(dir, N_VOCAB, toks, scores, special, TM_UNK);
    return ok;
}

/* Fills e with one HF tensor: name mapped, shape reversed, norms without the +1. */
static void hf_entry(const tm_options *o, const tm_hf_options *h, const tinfo *t, st_entry *e) {
    char nm[128];
    hf_name(o, t->name, nm, sizeof nm);
    snprintf(e->name, sizeof e->name, "%s%s", h->multimodal ? "language_model." : "", nm);
    e->n_dims = t->n_dims;
    for (int d = 0; d < t->n_dims; d++) e->shape[d] = t->ne[t->n_dims - 1 - d];
    int64_t n = numel(t);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) abort();
    fill_values(o, t, v);
    size_t es = h->dtype == GM_TYPE_BF16 ? 2 : 4;
    e->nbytes = (size_t)n * es;
    e->data = malloc(e->nbytes);
    if (!e->data) abort();
    if (es == 4) {
        memcpy(e->data, v, e->nbytes);
    } else {
        for (int64_t i = 0; i < n; i++) {
            uint16_t b = gm_fp32_to_bf16(v[i]);
            memcpy(e->data + 2 * i, &b, 2);
        }
    }
    free(v);
}

bool tm_write_hf(const tm_options *o, const tm_hf_options *h, const char *dir, char *err, size_t err_len) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, err_len, "tm_write_hf: cannot create %s: %s", dir, strerror(errno));
        return false;
    }
    int n = 0;
    tinfo t;
    st_entry *e = calloc((size_t)tm_tensor_count(o) + 1, sizeof *e);
    if (!e) abort();
    for (int i = 0; tensor_at(o, i, &t); i++) {
        if (strstr(t.name, "nextn")) continue; /* MTP tensors are a GGUF-only test feature */
        hf_entry(o, h, &t, &e[n++]);
    }
    if (h->multimodal) { /* one vision tensor the loader must skip */
        st_entry *v = &e[n++];
        snprintf(v->name, sizeof v->name, "vision_tower.vision_model.embeddings.patch_embedding.weight");
        v->n_dims = 2;
        v->shape[0] = 4;
        v->shape[1] = 4;
        v->nbytes = 16 * (h->dtype == GM_TYPE_BF16 ? 2 : 4);
        v->data = calloc(1, v->nbytes);
    }
    const char *dtype = h->dtype == GM_TYPE_BF16 ? "BF16" : "F32";
    bool ok = write_configs(o, h, dir);
    char path[4096];
    if (h->n_shards <= 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        ok = ok && write_safetensors(path, e, n, dtype);
    } else {
        int half = n / 2;
        cJSON *idx = cJSON_CreateObject();
        cJSON *meta = cJSON_AddObjectToObject(idx, "metadata");
        size_t total = 0;
        for (int i = 0; i < n; i++) total += e[i].nbytes;
        cJSON_AddNumberToObject(meta, "total_size", (double)total);
        cJSON *wm = cJSON_AddObjectToObject(idx, "weight_map");
        for (int s = 0; s < 2; s++) {
            char fname[64];
            snprintf(fname, sizeof fname, "model-%05d-of-00002.safetensors", s + 1);
            int lo = s ? half : 0, hi = s ? n : half;
            for (int i = lo; i < hi; i++) cJSON_AddStringToObject(wm, e[i].name, fname);
            snprintf(path, sizeof path, "%s/%s", dir, fname);
            ok = ok && write_safetensors(path, e + lo, hi - lo, dtype);
        }
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        ok = st_write_json(path, idx) && ok;
    }
    for (int i = 0; i < n; i++) free(e[i].data);
    free(e);
    if (!ok) snprintf(err, err_len, "tm_write_hf: cannot write files in %s", dir);
    return ok;
}
