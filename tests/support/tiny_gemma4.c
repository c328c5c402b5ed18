/* tests/support/tiny_gemma4.c — a Gemma 4 GGUF rewritten as a Hugging Face folder (see tiny_gemma4.h). */
#include "support/tiny_gemma4.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/gguf.h"
#include "gemma.h"
#include "support/hf_writer.h"

/* Value number il of gemma4.<key> (a number, or an array with one entry per layer); def when absent. */
static double key_at(const gguf_file *f, const char *suffix, int il, double def) {
    char key[128];
    snprintf(key, sizeof key, "gemma4.%s", suffix);
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return def;
    gguf_value v = kv->val;
    if (v.type == GGUF_VT_ARRAY) {
        gguf_arr_iter it;
        gguf_arr_iter_init(&it, &kv->val);
        for (int i = 0; gguf_arr_iter_next(&it, &v) && i < il; i++) {}
    }
    if (v.type == GGUF_VT_F32 || v.type == GGUF_VT_F64) return v.v.f;
    if (v.type == GGUF_VT_I8 || v.type == GGUF_VT_I16 || v.type == GGUF_VT_I32 || v.type == GGUF_VT_I64)
        return (double)v.v.i;
    return (double)v.v.u;
}

/* GGUF name -> transformers' name under prefix ("model.language_model." or "model."); NULL: no HF twin. */
static bool hf_name(const char *g, const char *prefix, char *out, size_t n) {
    static const char *const top[][2] = {
        {"token_embd.weight", "embed_tokens.weight"},
        {"per_layer_token_embd.weight", "embed_tokens_per_layer.weight"},
        {"per_layer_model_proj.weight", "per_layer_model_projection.weight"},
        {"per_layer_proj_norm.weight", "per_layer_projection_norm.weight"},
        {"output_norm.weight", "norm.weight"},
    };
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (!strcmp(g, top[i][0])) return snprintf(out, n, "%s%s", prefix, top[i][1]), true;
    static const char *const layer[][2] = {
        {"attn_norm.weight", "input_layernorm.weight"}, {"attn_q.weight", "self_attn.q_proj.weight"},
        {"attn_k.weight", "self_attn.k_proj.weight"}, {"attn_v.weight", "self_attn.v_proj.weight"},
        {"attn_output.weight", "self_attn.o_proj.weight"}, {"attn_q_norm.weight", "self_attn.q_norm.weight"},
        {"attn_k_norm.weight", "self_attn.k_norm.weight"},
        {"post_attention_norm.weight", "post_attention_layernorm.weight"},
        {"ffn_norm.weight", "pre_feedforward_layernorm.weight"}, {"ffn_gate.weight", "mlp.gate_proj.weight"},
        {"ffn_up.weight", "mlp.up_proj.weight"}, {"ffn_down.weight", "mlp.down_proj.weight"},
        {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
        {"inp_gate.weight", "per_layer_input_gate.weight"}, {"proj.weight", "per_layer_projection.weight"},
        {"post_norm.weight", "post_per_layer_input_norm.weight"}, {"layer_output_scale.weight", "layer_scalar"},
        {"ffn_gate_inp.weight", "router.proj.weight"}, {"ffn_gate_inp.scale", "router.scale"},
        {"ffn_down_exps.scale", "router.per_expert_scale"}, {"ffn_gate_up_exps.weight", "experts.gate_up_proj"},
        {"ffn_down_exps.weight", "experts.down_proj"}, {"pre_ffw_norm_2.weight", "pre_feedforward_layernorm_2.weight"},
        {"post_ffw_norm_1.weight", "post_feedforward_layernorm_1.weight"},
        {"post_ffw_norm_2.weight", "post_feedforward_layernorm_2.weight"},
    };
    int il, used = 0;
    if (sscanf(g, "blk.%d.%n", &il, &used) == 1 && used > 0)
        for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++)
            if (!strcmp(g + used, layer[i][0])) return snprintf(out, n, "%slayers.%d.%s", prefix, il, layer[i][1]), true;
    return false;
}

/* Separate gate and up experts have no HF twin: they are fused as [E, 2F, d], gate rows first. */
static float *fuse_gate_up(const gguf_file *f, int il, int64_t ne[3]) {
    char a[64], b[64];
    snprintf(a, sizeof a, "blk.%d.ffn_gate_exps.weight", il);
    snprintf(b, sizeof b, "blk.%d.ffn_up_exps.weight", il);
    const gguf_tensor *g = gguf_find_tensor(f, a), *u = gguf_find_tensor(f, b);
    if (!g || !u) return NULL;
    const int64_t d = g->ne[0], F = g->ne[1], E = g->ne[2];
    float *out = malloc((size_t)(d * 2 * F * E) * sizeof *out);
    if (!out) abort();
    for (int64_t e = 0; e < E; e++) {
        memcpy(out + e * 2 * F * d, (const float *)g->data + e * F * d, (size_t)(F * d) * sizeof(float));
        memcpy(out + e * 2 * F * d + F * d, (const float *)u->data + e * F * d, (size_t)(F * d) * sizeof(float));
    }
    ne[0] = d, ne[1] = 2 * F, ne[2] = E;
    return out;
}

typedef struct st_entry {
    char name[160];
    int nd;
    int64_t ne[4]; /* ggml order */
    const float *data;
    float *owned;
} st_entry;

static bool write_shard(const char *path, const st_entry *t, int n) {
    st_tensor *st = calloc((size_t)n, sizeof *st);
    if (!st) return false;
    for (int i = 0; i < n; i++) {
        int64_t count = 1;
        st[i] = (st_tensor){.name = t[i].name, .dtype = "F32", .nd = t[i].nd, .data = t[i].data};
        for (int d = 0; d < t[i].nd; d++) st[i].shape[d] = t[i].ne[t[i].nd - 1 - d], count *= t[i].ne[d]; /* torch order */
        st[i].nbytes = (size_t)count * sizeof(float);
    }
    const bool ok = st_write(path, st, n);
    free(st);
    return ok;
}

static cJSON *config_json(const gguf_file *f, const t4_hf_options *o) {
    const int L = (int)key_at(f, "block_count", 0, 0);
    const int hd_full = (int)key_at(f, "attention.key_length", 0, 0), hd_swa = (int)key_at(f, "attention.key_length_swa", 0, 0);
    const gguf_kv *pat = gguf_find(f, "gemma4.attention.sliding_window_pattern");
    int kv_swa = 0, kv_full = 0;
    cJSON *root = cJSON_CreateObject(), *c = root;
    if (o->text_only) {
        cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "architectures"), cJSON_CreateString("Gemma4ForCausalLM"));
    } else {
        cJSON_AddStringToObject(root, "model_type", "gemma4");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "architectures"),
                             cJSON_CreateString("Gemma4ForConditionalGeneration"));
        c = cJSON_AddObjectToObject(root, "text_config");
    }
    cJSON_AddStringToObject(c, "model_type", "gemma4_text");
    cJSON *lt = cJSON_AddArrayToObject(c, "layer_types"), *ff = cJSON_AddArrayToObject(c, "intermediate_size");
    for (int il = 0; il < L; il++) {
        const bool sl = pat->val.v.arr.data[il] != 0;
        cJSON_AddItemToArray(lt, cJSON_CreateString(sl ? "sliding_attention" : "full_attention"));
        cJSON_AddItemToArray(ff, cJSON_CreateNumber(key_at(f, "feed_forward_length", il, 0)));
        *(sl ? &kv_swa : &kv_full) = (int)key_at(f, "attention.head_count_kv", il, 0);
    }
    cJSON_AddNumberToObject(c, "hidden_size", key_at(f, "embedding_length", 0, 0));
    cJSON_AddNumberToObject(c, "num_hidden_layers", L);
    cJSON_AddNumberToObject(c, "num_attention_heads", key_at(f, "attention.head_count", 0, 0));
    cJSON_AddNumberToObject(c, "num_key_value_heads", kv_swa);
    cJSON_AddNumberToObject(c, "num_global_key_value_heads", kv_full);
    cJSON_AddNumberToObject(c, "head_dim", hd_swa);
    cJSON_AddNumberToObject(c, "global_head_dim", hd_full);
    cJSON_AddBoolToObject(c, "attention_k_eq_v", true);
    cJSON_AddNumberToObject(c, "max_position_embeddings", key_at(f, "context_length", 0, 0));
    cJSON_AddNumberToObject(c, "rms_norm_eps", key_at(f, "attention.layer_norm_rms_epsilon", 0, 0));
    cJSON_AddNumberToObject(c, "sliding_window", key_at(f, "attention.sliding_window", 0, 0));
    cJSON_AddNumberToObject(c, "num_kv_shared_layers", key_at(f, "attention.shared_kv_layers", 0, 0));
    cJSON_AddNumberToObject(c, "hidden_size_per_layer_input", key_at(f, "embedding_length_per_layer_input", 0, 0));
    const gguf_tensor *tok = gguf_find_tensor(f, "token_embd.weight");
    cJSON_AddNumberToObject(c, "vocab_size", (double)tok->ne[1]);
    cJSON_AddNumberToObject(c, "vocab_size_per_layer_input", (double)tok->ne[1]);
    cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
    if (o->softcap < 0) cJSON_AddNullToObject(c, "final_logit_softcapping");
    else cJSON_AddNumberToObject(c, "final_logit_softcapping", o->softcap);
    const int E = (int)key_at(f, "expert_count", 0, 0);
    cJSON_AddBoolToObject(c, "enable_moe_block", E > 0);
    if (E > 0) {
        cJSON_AddNumberToObject(c, "num_experts", E);
        cJSON_AddNumberToObject(c, "top_k_experts", key_at(f, "expert_used_count", 0, 0));
        cJSON_AddNumberToObject(c, "moe_intermediate_size", key_at(f, "expert_feed_forward_length", 0, 0));
    }
    /* rope_freqs: the pairs with factor 1 rotate */
    const gguf_tensor *rf = gguf_find_tensor(f, "rope_freqs.weight");
    int rot = 0;
    for (int64_t i = 0; rf && i < rf->ne[0]; i++) rot += ((const float *)rf->data)[i] < 1e20f;
    cJSON *rp = cJSON_AddObjectToObject(c, "rope_parameters");
    cJSON *full = cJSON_AddObjectToObject(rp, "full_attention"), *swa = cJSON_AddObjectToObject(rp, "sliding_attention");
    cJSON_AddStringToObject(full, "rope_type", "proportional");
    cJSON_AddNumberToObject(full, "rope_theta", key_at(f, "rope.freq_base", 0, 10000.0));
    cJSON_AddNumberToObject(full, "partial_rotary_factor", 2.0 * rot / hd_full);
    cJSON_AddStringToObject(swa, "rope_type", "default");
    cJSON_AddNumberToObject(swa, "rope_theta", key_at(f, "rope.freq_base_swa", 0, 10000.0));
    cJSON_AddNumberToObject(c, "bos_token_id", 2);
    cJSON_AddNumberToObject(c, "eos_token_id", 1);
    cJSON_AddNumberToObject(c, "pad_token_id", 0);
    return root;
}

/* tokenizer.json and tokenizer_config.json: the GGUF's tokens and scores; control and unknown tokens
 * (types 3, 2) special */
static bool write_tokenizer(const gguf_file *f, const char *dir) {
    const gguf_kv *toks = gguf_find(f, "tokenizer.ggml.tokens"), *scores = gguf_find(f, "tokenizer.ggml.scores"),
                  *types = gguf_find(f, "tokenizer.ggml.token_type");
    const int n = (int)toks->val.v.arr.n;
    char (*text)[256] = malloc((size_t)n * sizeof *text);
    const char **tp = malloc((size_t)n * sizeof *tp);
    double *sc = malloc((size_t)n * sizeof *sc);
    bool *special = malloc((size_t)n * sizeof *special);
    if (!text || !tp || !sc || !special) abort();
    gguf_arr_iter it;
    gguf_value v;
    gguf_arr_iter_init(&it, &toks->val);
    for (int i = 0; i < n && gguf_arr_iter_next(&it, &v); i++) {
        snprintf(text[i], sizeof text[i], "%.*s", (int)v.v.str.len, v.v.str.ptr);
        float score;
        int32_t type;
        memcpy(&score, scores->val.v.arr.data + 4 * (size_t)i, 4);
        memcpy(&type, types->val.v.arr.data + 4 * (size_t)i, 4);
        tp[i] = text[i], sc[i] = score, special[i] = type == 2 || type == 3;
    }
    const bool ok = hf_write_tokenizer(dir, n, tp, sc, special, 3);
    free(text), free(tp), free(sc), free(special);
    return ok;
}

bool t4_gguf_to_hf(const char *gguf_path, const t4_hf_options *o, const char *dir, char *err, size_t err_len) {
    gguf_file *f = NULL;
    gm_error gerr = {0};
    if (err_len) err[0] = '\0';
    if (gguf_open(gguf_path, NULL, &f, &gerr)) {
        snprintf(err, err_len, "t4_gguf_to_hf: %s", gerr.msg);
        return false;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, err_len, "t4_gguf_to_hf: cannot create %s", dir);
        gguf_close(f);
        return false;
    }
    const char *prefix = o->text_only ? "model." : "model.language_model.";
    st_entry *t = calloc((size_t)f->n_tensors + 1, sizeof *t);
    if (!t) abort();
    int n = 0;
    bool ok = true;
    for (uint64_t i = 0; i < f->n_tensors && ok; i++) {
        const gguf_tensor *g = &f->tensors[i];
        int il;
        char part[64];
        if (sscanf(g->name, "blk.%d.%63s", &il, part) == 2 && !strcmp(part, "ffn_up_exps.weight")) continue;
        st_entry *e = &t[n];
        e->nd = g->n_dims;
        memcpy(e->ne, g->ne, sizeof e->ne);
        e->data = g->data;
        if (sscanf(g->name, "blk.%d.%63s", &il, part) == 2 && !strcmp(part, "ffn_gate_exps.weight")) {
            e->data = e->owned = fuse_gate_up(f, il, e->ne);
            snprintf(e->name, sizeof e->name, "%slayers.%d.experts.gate_up_proj", prefix, il);
        } else if (!hf_name(g->name, prefix, e->name, sizeof e->name)) {
            if (!strcmp(g->name, "rope_freqs.weight")) continue; /* partial_rotary_factor in config.json */
            snprintf(err, err_len, "t4_gguf_to_hf: no HF name for %s", g->name);
            ok = false;
        }
        if (g->type != GM_TYPE_F32) {
            snprintf(err, err_len, "t4_gguf_to_hf: %s is not F32", g->name);
            ok = false;
        }
        n++;
    }
    char path[4096];
    const int half = n / 2; /* two shards and an index, as released checkpoints come */
    cJSON *index = cJSON_CreateObject(), *map = cJSON_AddObjectToObject(index, "weight_map");
    for (int i = 0; i < n; i++)
        cJSON_AddStringToObject(map, t[i].name, i < half ? "model-00001-of-00002.safetensors"
                                                         : "model-00002-of-00002.safetensors");
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    if (ok) ok = write_shard(path, t, half);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    if (ok) ok = write_shard(path, t + half, n - half);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (ok) ok = st_write_json(path, index);
    else cJSON_Delete(index);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (ok) ok = st_write_json(path, config_json(f, o));
    if (ok) ok = write_tokenizer(f, dir);
    if (!ok && !err[0]) snprintf(err, err_len, "t4_gguf_to_hf(%s): cannot write the folder", dir);
    for (int i = 0; i < n; i++) free(t[i].owned);
    free(t);
    gguf_close(f);
    return ok;
}
