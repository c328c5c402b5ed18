/* tests/support/tiny_gemma4.h — the Hugging Face folder form of a Gemma 4 GGUF (the committed llama.cpp fixtures
 * under tests/data/gemma4/), written at test time: the same F32 weights under transformers' Gemma 4 names
 * (model.language_model.*, Gemma4ForConditionalGeneration layout), a config.json whose text_config says what
 * the GGUF's keys say, in two safetensors shards with an index, and the vocabulary as tokenizer.json.
 *
 * What has no HF twin is translated: rope_freqs.weight (1 on the rotated pairs, 1e30 on the rest) becomes
 * rope_parameters.full_attention.partial_rotary_factor = 2 x rotated pairs / head_dim; the GGUF's per-layer
 * arrays become layer_types, head_dim / global_head_dim, num_key_value_heads / num_global_key_value_heads and an
 * intermediate_size list. The soft-cap is the option's (HF's default is none, llama.cpp's 30). */
#ifndef GM_TESTS_TINY_GEMMA4_H
#define GM_TESTS_TINY_GEMMA4_H

#include <stdbool.h>
#include <stddef.h>

typedef struct t4_hf_options {
    float softcap;     /* final_logit_softcapping; < 0: written as null (HF: no cap) */
    bool text_only;    /* model_type gemma4_text at the top level, names model.* (Gemma4ForCausalLM) */
} t4_hf_options;

bool t4_gguf_to_hf(const char *gguf_path, const t4_hf_options *o, const char *dir, char *err, size_t err_len);

#endif
