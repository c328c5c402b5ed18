/* tests/support/tiny_gemma3n.h — the tiny synthetic Gemma 3n GGUF of tests/gen/gen_gemma3n_fixtures.py,
 * rebuilt in C (its ~17 MB of F32 weights are not committed): the same keys, vocabulary and tensors, every
 * value the same deterministic function of (tensor name, index) as the Python generator's, so llama.cpp's
 * logits recorded there apply. The test checks each tensor's sums against the ones recorded there.
 *
 * Model: d=64, 25 layers, 4 heads / 2 KV heads of 16, FFN 128, P=256, LAuReL rank 64, 4 AltUp streams,
 * vocabulary 300, sliding window 8 (layer il slides iff il % 5 < 4), RoPE bases 1e6 / 1e4.
 * The options make broken variants for the bad-file tests. */
#ifndef GM_TESTS_TINY_GEMMA3N_H
#define GM_TESTS_TINY_GEMMA3N_H

#include <stdbool.h>
#include <stddef.h>

typedef struct t3n_options {
    int n_layers;             /* 25 */
    int context_length;       /* 128 */
    const char *drop;         /* a tensor left out, or NULL */
    const char *reshape;      /* a tensor written with its last dimension halved, or NULL */
    int shared_kv_layers;     /* the attention.shared_kv_layers key: -1 = n_layers - 20 (0 below 21 layers) */
    int pattern;              /* 0: the bool array il % 5 < 4; else the scalar sliding_window_pattern key */
    bool non_uniform_ff;      /* feed_forward_length as a per-layer array whose last entry differs */
    /* weight overrides (both forms), for comparing the HF and GGUF variants where their math agrees */
    bool zero_sparse_gates;   /* ffn_gate of layers 0-9 all zero: sparsity has nothing to cut */
    float clamp_correct_coef; /* nonzero: altup_correct_coef values clamped to +-this when written */
    bool correct_scale_ones;  /* altup_correct_scale all 1 */
    /* HF config only */
    bool hf_no_sparsity;      /* activation_sparsity_pattern all 0 (default: 0.95 on layers 0-9) */
    bool hf_no_correct_scale; /* "altup_correct_scale": false */
    float hf_coef_clip;       /* "altup_coef_clip" (0: 120, the released models' value) */
} t3n_options;

void t3n_options_default(t3n_options *o);
bool t3n_write_gguf(const t3n_options *o, const char *path, char *err, size_t err_len);
/* The HF form of the same model (Gemma3nForConditionalGeneration layout: config.json with text_config,
 * tokenizer.json, model.safetensors with "model.language_model." names, the AltUp projections as three
 * [d, d] tensors); creates dir. */
bool t3n_write_hf(const t3n_options *o, const char *dir, char *err, size_t err_len);

#endif
