/* tests/support/tiny_gemma3n.c — see tiny_gemma3n.h; mirrors tests/gen/gen_gemma3n_fixtures.py. */
#include "support/tiny_gemma3n.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemma.h"
#include "support/gguf_writer.h"

enum { D = 64, H = 4, HKV = 2, HD = 16, FF = 128, V = 300, W = 8, P = 256, R = 64, NA = 4 };
static const uint64_t SEED = 0x3E3E3E;

void t3n_options_default(t3n_options *o) {
    memset(o, 0, sizeof *o);
    o->n_layers = 25;
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

static void add_vocab(gw_writer *w) {
    static char bytes[256][8];
    const char *toks[V];
    float scores[V];
    int32_t types[V];
    const char *special[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"};
    int n = 0;
    for (int i = 0; i < 6; i++, n++) toks[n] = special[i], scores[n] = 0.0f, types[n] = i == 3 ? 2 : 3;
    for (int b = 0; b < 256; b++, n++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        toks[n] = bytes[b], scores[n] = 0.0f, types[n] = 6;
    }
    for (size_t i = 0; i < sizeof WORDS / sizeof WORDS[0]; i++, n++)
        toks[n] = WORDS[i], scores[n] = -(float)(i + 1), types[n] = 1;
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
    gw_add_u32(w, "gemma3n.context_length", 128);
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
        fill(t[i].name, v, count, t[i].a, t[i].mean);
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
