/* model/families/gemma4.h — Gemma 4 text decoders (GGUF arch "gemma4"), as llama.cpp computes them
 * (src/models/gemma4.cpp; facts in docs/model-files.md):
 *
 *   Per-layer geometry: the bool array attention.sliding_window_pattern says which layers slide; sliding
 *     layers have head_dim key_length_swa, RoPE base freq_base_swa over rope.dimension_count_swa dims, full
 *     layers key_length, freq_base over rope.dimension_count dims with the global rope_freqs tensor dividing
 *     each pair's frequency (1e30 = that pair does not rotate: proportional partial RoPE). head_count,
 *     head_count_kv and feed_forward_length are a number or one entry per layer.
 *   Raw norm weights; q/k RMS-normed per head, V RMS-normed without weight; attention scale 1.
 *   A layer without attn_v uses the raw K projection as V (before k_norm and RoPE; then the V norm).
 *   KV sharing: the last attention.shared_kv_layers layers compute no K/V; with kv_start = L - shared they
 *     attend over layer kv_start-2's cache when sliding, kv_start-1's when full (those must be of the kinds).
 *   Block: a = x + RMS_post_attn(attn(RMS_attn(x))); y = a + RMS_post_ffw(FFN(RMS_ffn(a))); then the per-layer
 *     embedding (P = embedding_length_per_layer_input > 0: y += RMS_post_norm(proj (gelu(inp_gate y) ple[l])),
 *     runtime/families/ple.h); then y *= layer_output_scale when the layer has one.
 *   Final soft-cap: final_logit_softcapping, 30 when the key is absent, 0 = none.
 *   Mixture of experts (a layer with ffn_gate_inp): the dense FFN stays beside the experts;
 *     m1 = RMS_post_ffw_norm_1(denseFFN(RMS_ffn(a)));
 *     router logits = ffn_gate_inp (rms(a) / sqrt d * ffn_gate_inp.scale); softmax over the E experts, the
 *     top expert_used_count kept and renormalised (sum clamped to >= 2^-14, as llama.cpp), each times
 *     ffn_down_exps.scale[e] when present; experts e: down_e(gelu(gate_e z) * up_e z), z = RMS_pre_ffw_norm_2(a);
 *     y = a + RMS_post_ffw(m1 + RMS_post_ffw_norm_2(sum_k w_k expert_k)).
 *     The experts run batched: the rows routed to an expert are gathered and go through one matmul each.
 * HF folders (model/families/gemma4_hf.c): the same model from config.json and model.language_model.* tensors; where HF
 *   differs from llama.cpp the HF rule is taken: no final soft-cap unless final_logit_softcapping is set, KV
 *   sharing from the last earlier non-shared layer of the same kind, RoPE pairs past partial_rotary_factor
 *   unrotated (no rope_freqs tensor).
 * Not supported (refused at open): fused attn_qkv. */
#ifndef GM_FAMILY_GEMMA4_H
#define GM_FAMILY_GEMMA4_H

#include <stdbool.h>

#include "formats/gguf.h"
#include "gemma.h"
#include "kernels/matmul.h"
#include "model/family.h"
#include "model/source.h"

typedef struct gm_model gm_model;

typedef struct gm_4_layer {
    gm_matrix inp_gate, proj;  /* PLE: [P x d], [d x P] (P > 0 only) */
    const float *post_norm;    /* PLE: d */
    float out_scale;           /* layer_output_scale, 1 when absent */
    /* mixture of experts (moe only) */
    bool moe;
    int n_ff_exp;              /* expert width F */
    gm_matrix router;          /* [E x d] ffn_gate_inp */
    gm_matrix *gate_e, *up_e, *down_e; /* E each: [F x d], [F x d], [d x F] (views into the 3-D tensors) */
    const float *router_scale; /* d: ffn_gate_inp.scale */
    const float *expert_scale; /* E: ffn_down_exps.scale, NULL = ones */
    const float *pre_norm2, *post_norm1, *post_norm2; /* d each */
} gm_4_layer;

/* Experts per MoE layer at most (the router picks from a stack of this many). */
enum { GM_4_MAX_EXPERTS = 256 };

typedef struct gm_4_weights {
    int P;                     /* per-layer embedding width, 0 = none */
    int n_expert, n_expert_used; /* 0 without MoE layers */
    int n_ff_exp_hf;           /* HF folders: moe_intermediate_size (GGUFs say it per layer) */
    gm_matrix *expert_views;   /* backing store of the layers' per-expert views */
    gm_matrix ple_tok;         /* [V x P L] */
    gm_matrix ple_proj;        /* [P L x d] */
    const float *ple_norm;     /* P */
    gm_4_layer *layers;
    float *store;
} gm_4_weights;

/* Gemma 4's MTP assistant (GGUF arch "gemma4-assistant", a gemma4-shaped file under its own key prefix; facts:
 * docs/speculative.md): layers with queries only (attn_q, attn_q_norm, attn_output, the FFN and the four norms)
 * that attend over a target's cache, and these weights beyond them. */
typedef struct gm_4a_weights {
    gm_matrix pre_proj;  /* [d x 2 d_backbone]: concat(target embedding * sqrt(d_backbone), h) -> d */
    gm_matrix post_proj; /* [d_backbone x d]: the final-normed state -> the next step's h */
    float *out_scale;    /* per layer: layer_output_scale */
} gm_4a_weights;
gm_status gm_4a_load(gm_model *m, gm_error *err);
void gm_4a_free(gm_4a_weights *w);

/* Every gemma4 key of a GGUF (after general.architecture): global sizes (layer 0's where per layer), window,
 * soft-cap, and the checks of the per-layer arrays and the KV-sharing split. */
gm_status gm_4_config_gguf(const gguf_file *f, gm_config *c, gm_error *err);
/* Layer il's facts from the file (head sizes, heads, KV heads, FFN width, window, RoPE, KV source). */
gm_status gm_4_layer_config(const gm_source *src, const gm_config *c, int il, gm_layer_config *out, gm_error *err);
/* What `gemma inspect` shows of a layer beyond gm_layer_config, from the file's tensors. */
void gm_4_layer_extras_of(const gm_source *src, const gm_layer_config *l, int il, gm_layer_extras *out);
/* model/families/gemma4_hf.c: the same facts from an HF folder's config.json (Gemma4TextConfig names; see there). */
/* The HF tensor names Gemma 4 adds (the row's hf_names, with the per-layer inputs' table). */
extern const gm_hf_name gm_4_hf_names[];
gm_status gm_4_config_hf(const gm_source *src, gm_config *c, gm_error *err);
gm_status gm_4_layer_config_hf(const gm_source *src, const gm_config *c, int il, gm_layer_config *out, gm_error *err);
/* P (hidden_size_per_layer_input), experts, top-k and expert width (0s without experts). */
gm_status gm_4_hparams_hf(const gm_source *src, int *P, int *n_expert, int *n_used, int *ff_exp, gm_error *err);
/* Full layers' rotated RoPE pairs: int(partial_rotary_factor * head_dim / 2). */
int gm_4_rotated_pairs_hf(const gm_source *src, int head_dim);
/* Full layers' RoPE frequencies divided by rope_freqs (n = rope_dims / 2 of them). */
gm_status gm_4_rope_factors(const gm_model *m, float *inv_freq, int n, gm_error *err);
/* Binds the Gemma 4 tensors beyond the Gemma 3 block (gm_model.family_weights): PLE, layer output scales, experts. */
gm_status gm_4_load(gm_model *m, gm_error *err);
void gm_4_free(gm_4_weights *w);


#endif
