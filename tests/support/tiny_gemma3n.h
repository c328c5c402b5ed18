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
    const char *drop;         /* a tensor left out, or NULL */
    const char *reshape;      /* a tensor written with its last dimension halved, or NULL */
    int shared_kv_layers;     /* the attention.shared_kv_layers key: -1 = n_layers - 20 (0 below 21 layers) */
    int pattern;              /* 0: the bool array il % 5 < 4; else the scalar sliding_window_pattern key */
    bool non_uniform_ff;      /* feed_forward_length as a per-layer array whose last entry differs */
} t3n_options;

void t3n_options_default(t3n_options *o);
bool t3n_write_gguf(const t3n_options *o, const char *path, char *err, size_t err_len);

#endif
