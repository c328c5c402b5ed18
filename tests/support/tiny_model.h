/* tests/support/tiny_model.h — synthetic tiny Gemma models for tests, as a GGUF file (the llama.cpp
 * convention) or as a Hugging Face folder (config.json + safetensors), with the SAME weights.
 *
 *   tm_options o;
 *   tm_options_default(&o, "gemma3");     // d=64, 2 layers, 4 heads / 2 kv, head_dim 16, ffn 128
 *   o.weight_type = GM_TYPE_Q8_0;         // matrices; norms are always F32
 *   char err[256];
 *   if (!tm_write_gguf(&o, "/tmp/tiny.gguf", err, sizeof err)) ...
 *   tm_hf_options h = {GM_TYPE_F32, 2, false};  // dtype, shards, multimodal
 *   if (!tm_write_hf(&o, &h, "/tmp/tiny_hf", err, sizeof err)) ...   // creates the folder
 *
 * Weights: every value is a deterministic function of (seed, GGUF tensor name, index) from a
 * splitmix64 stream, rounded to bfloat16 precision so the F32 and BF16 forms hold identical
 * values. Matrices are uniform with variance 1/fan_in; the embedding uniform in [-0.5, 0.5];
 * norm weights w are small (uniform [-0.2, 0.2]) and zero-centred, as HF stores them: the HF
 * folder holds w, the GGUF holds 1 + w (rounded to f32), the llama.cpp convention.
 * tm_weight_values() returns those f32 values for any tensor (norms: w, without the +1), so a
 * test can build an independent reference forward pass.
 *
 * Tensors (GGUF names, ggml shape): token_embd [d, V]; output_norm [d]; output [d, V] only if
 * untied; per layer attn_norm [d], attn_q [d, H*hd], attn_k/attn_v [d, Hkv*hd],
 * attn_output [H*hd, d], ffn_norm [d], ffn_gate/ffn_up [d, ff], ffn_down [ff, d];
 * gemma2/gemma3 add post_attention_norm [d], post_ffw_norm [d]; gemma3 adds attn_q_norm [hd],
 * attn_k_norm [hd]. add_mtp adds "blk.<n_layers>.nextn.eh_proj.weight" [2d, d] (GGUF only),
 * to test hiding.
 *
 * Vocabulary (tm_vocab_*): 0 <pad>, 1 <eos>, 2 <bos>, 3 <unk>, 4 <start_of_turn>,
 * 5 <end_of_turn> (control, unk = type 2), 6..261 byte tokens <0x00>..<0xFF> (type 6), then word
 * pieces with scores: "▁" (U+2581), a..z, and common pieces ("▁the", "th", "▁Paris", "\n", ...).
 * GGUF metadata written: general.architecture/name, <arch>.* hyper-parameters (context_length,
 * embedding_length, block_count, feed_forward_length, attention.head_count(_kv), key_length,
 * value_length, layer_norm_rms_epsilon, rope.freq_base, and per arch: gemma2
 * attention.sliding_window + attn/final_logit_softcapping; gemma3 attention.sliding_window,
 * rope.scaling.type/factor when rope_scale_global != 1, final_logit_softcapping when nonzero),
 * tokenizer.ggml.{model="llama", tokens, scores, token_type, bos/eos/unknown/padding ids,
 * add_bos_token=true, add_eos_token=false, add_space_prefix=false}, tokenizer.chat_template.
 * HF folder: config.json (model_type gemma / gemma2 / gemma3_text, or gemma3 with text_config when
 * multimodal: tensor names then get the "language_model.model." prefix plus one vision tensor
 * that loaders must skip), tokenizer_config.json (added_tokens_decoder for the control tokens,
 * bos/eos/unk/pad, add_bos_token), tokenizer.json (the same vocabulary and scores as a Unigram
 * model with byte_fallback, control tokens in added_tokens, " " -> U+2581 normalizer),
 * model.safetensors or model-0000{1,2}-of-00002.safetensors + model.safetensors.index.json.
 * gemma3's config.json lists eos_token_id as [1, 5] (eos, end_of_turn), as HF Gemma 3 does.
 */
#ifndef GM_TESTS_TINY_MODEL_H
#define GM_TESTS_TINY_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tm_options {
    const char *arch;        /* "gemma", "gemma2", "gemma3" */
    int n_layers;            /* 2 */
    int d_model;             /* 64 */
    int n_heads, n_kv_heads; /* 4, 2 */
    int head_dim;            /* 16 */
    int d_ff;                /* 128 */
    int context_length;      /* 256 */
    int sliding_window;      /* 8 (gemma2 / gemma3) */
    float norm_eps;          /* 1e-6 */
    float rope_base;         /* gemma3: 1e6 (global); others 1e4 */
    float rope_scale_global; /* gemma3 linear scaling factor, 1 = none */
    float attn_softcap;      /* gemma2: 50 */
    float final_softcap;     /* gemma2: 30; gemma3: 0 = key not written */
    float query_pre_attn_scalar; /* HF config only; default head_dim */
    int weight_type;         /* gm_type of the matrices (F32 default). Every row length (d_model,
                                H*head_dim, d_ff) must be a multiple of the type's block: 32 for
                                Q4_0..Q8_0, 256 for K-quants (e.g. d_model = d_ff = 256, H*hd = 256) */
    int embd_type;           /* gm_type of token_embd / output (F32 default) */
    int down_type;           /* gm_type of ffn_down (0: weight_type), for files that mix types */
    bool untied;             /* write output.weight / lm_head.weight */
    bool add_mtp;            /* GGUF: add a hidden nextn tensor */
    uint64_t seed;           /* 1234 */
    bool zero_embeddings;    /* token_embd all zeros: every logit is 0, a uniform next-token
                                distribution (perplexity = vocabulary size exactly) */
    int embd_rows;           /* rows of token_embd / output (and HF vocab_size); 0: the vocabulary's
                                size. More rows pad the vocabulary; fewer make a broken file */
} tm_options;

void tm_options_default(tm_options *o, const char *arch);

int tm_vocab_size(void);
const char *tm_vocab_token(int id);  /* NULL if out of range */
float tm_vocab_score(int id);
int tm_vocab_type(int id);           /* SentencePiece token type as in tokenizer.ggml.token_type */
enum { TM_PAD = 0, TM_EOS = 1, TM_BOS = 2, TM_UNK = 3, TM_SOT = 4, TM_EOT = 5, TM_BYTE0 = 6 };

/* Number of tensors the GGUF / HF form holds (HF: without the vision tensor). */
int tm_tensor_count(const tm_options *o);
/* The i-th GGUF tensor: name (static buffer, valid until the next call), n_dims, ne. */
bool tm_tensor_info(const tm_options *o, int i, char *name, size_t name_len, int *n_dims, int64_t ne[4]);
/* Values of a tensor by GGUF name (norms: w, zero-centred); n must equal the element count. */
bool tm_weight_values(const tm_options *o, const char *gguf_name, float *out, int64_t n);

bool tm_write_gguf(const tm_options *o, const char *path, char *err, size_t err_len);

typedef struct tm_hf_options {
    int dtype;       /* GM_TYPE_F32 or GM_TYPE_BF16 */
    int n_shards;    /* 1 or 2 */
    bool multimodal; /* gemma3 only: "gemma3" config with text_config, language_model. prefix */
} tm_hf_options;

/* Creates dir (mkdir -p semantics for the last component) and writes the HF form into it. */
bool tm_write_hf(const tm_options *o, const tm_hf_options *h, const char *dir, char *err, size_t err_len);

#endif
