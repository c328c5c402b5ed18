/* model/families/gemma3n.h — what Gemma 3n adds to the Gemma 3 decoder, as llama.cpp computes it for GGUF files
 * (src/models/gemma3n.cpp; facts in docs/model-files.md):
 *
 *   AltUp: the hidden state is 4 streams of d per row. Stream 0 is the embedding; streams 1..3 are
 *     altup_proj[k-1] x0 rescaled to x0's L2 norm. Each layer predicts (p_j = s_j + sum_k c[4j+k] s_k with
 *     c = predict_coef . r(s0)), runs the Gemma block on p0, then corrects (s'_j = p_j + (1 + correct_coef .
 *     r(y))_j (y - p0)), r(x) = tanh(router . RMS_router_norm(x) / d). At the end streams 1..3 go back
 *     through altup_unembd_proj rescaled to s0's norm and the 4 are averaged.
 *   LAuReL (rank 64): lau = h + RMS(laurel_r laurel_l h) beside attention; a = (attn + p0 + lau) / sqrt 2.
 *   Per-layer embeddings (P = 256): ple[l] = (RMS(per_layer_model_proj x0 / sqrt d)[l] + tok_table[tok][l]
 *     * sqrt P) / sqrt 2; after the correction, t = RMS(proj (gelu(inp_gate (s'_0 * correct_scale)) * ple[l]))
 *     is added to streams 1..3.
 *   Activation sparsity on layers < 10: gate = relu(gate - mean - 1.6448533535 std), std over the FFN width
 *     with (n - 1) in the denominator as llama.cpp (HF divides by n).
 *   KV sharing: layers >= 20 compute no K/V; they attend over layer 18's cache when sliding, 19's when full.
 *   Raw norm weights (no +1), V RMS-normed without weight, attention scale 1, final soft-cap 30.
 * Where HF differs (not followed here, we match llama.cpp): std with n, correction coefficients clamped to
 * +-120, altup_correct_scale applied only when the config says so (its default is on). */
#ifndef GM_FAMILY_GEMMA3N_H
#define GM_FAMILY_GEMMA3N_H

#include <stdbool.h>

#include "formats/gguf.h"
#include "gemma.h"
#include "kernels/matmul.h"
#include "model/family.h"
#include "model/source.h"

/* llama.cpp hard-codes these for gemma3n (the converter's keys are ignored there; we check them). */
enum {
    GM_3N_STREAMS = 4,
    GM_3N_PLE = 256,
    GM_3N_LAUREL = 64,
    GM_3N_KV_FROM = 20,      /* first layer without its own K/V */
    GM_3N_SPARSE_LAYERS = 10 /* layers < 10 have activation sparsity */
};

typedef struct gm_model gm_model;

typedef struct gm_3n_layer {
    gm_matrix laurel_l, laurel_r; /* [64 x d], [d x 64] */
    gm_matrix inp_gate, proj;     /* [256 x d], [d x 256] */
    const float *laurel_post_norm, *router_norm, *correct_scale, *post_norm; /* d each */
    float *router;                /* 4 x d (f32 copy) */
    float predict[GM_3N_STREAMS * GM_3N_STREAMS * GM_3N_STREAMS]; /* 16 x 4 */
    float correct[GM_3N_STREAMS * GM_3N_STREAMS];                 /* 4 x 4 */
} gm_3n_layer;

/* Where the HF form (transformers' Gemma3nText*) computes otherwise than llama.cpp; an HF folder gets HF's
 * variant, a GGUF llama.cpp's. */
typedef struct gm_3n_variant {
    bool std_n;          /* sparsity std divided by n (HF) instead of n - 1 (llama.cpp) */
    float coef_clip;     /* correction coefficients clamped to +-clip (HF altup_coef_clip); 0 = none */
    bool correct_scale;  /* multiply the per-layer gate input by altup_correct_scale (HF: the config flag) */
    float *sparsity;     /* per layer: the std multiplier (0 = no sparsity) */
} gm_3n_variant;

typedef struct gm_3n_weights {
    gm_matrix altup_proj[GM_3N_STREAMS - 1], altup_unembd[GM_3N_STREAMS - 1]; /* [d x d] each */
    gm_matrix ple_tok;      /* [V x 256 L] per_layer_token_embd */
    gm_matrix ple_proj;     /* [256 L x d] per_layer_model_proj */
    const float *ple_norm;  /* 256 */
    gm_3n_layer *layers;
    float *store;           /* f32 copies of the norms, router and coefficients */
    gm_3n_variant v;
} gm_3n_weights;

/* The HF tensor names 3n adds (the row's hf_names, with the per-layer inputs' table). */
extern const gm_hf_name gm_3n_hf_names[];
/* The gemma3n keys of a GGUF on top of the generic ones already in c: window, RoPE bases, the layer
 * pattern (gm_config_gguf_pattern, default 5), the hard-coded constants checked against the converter's keys. */
gm_status gm_3n_config_gguf(const gguf_file *f, gm_config *c, gm_error *err);
/* The layer whose K/V layer il attends over: llama.cpp's rule for GGUF (from layer 20: 18 when sliding,
 * 19 when full), HF's for folders (from num_hidden_layers - num_kv_shared_layers: the last earlier layer of
 * the same kind). */
int gm_3n_kv_source(const gm_source *src, const gm_config *c, int il);
/* Binds the 3n tensors (gm_model.family_weights); shapes checked, clear errors for missing ones. */
gm_status gm_3n_load(gm_model *m, gm_error *err);
void gm_3n_free(gm_3n_weights *w);


#endif
