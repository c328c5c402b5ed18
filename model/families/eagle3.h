/* model/families/eagle3.h — an EAGLE-3 draft head (GGUF arch "eagle3", as llama.cpp's converter writes SpecForge /
 * vLLM / RedHat speculators; facts: docs/speculative.md): one Llama-style decoder layer that drafts for a target
 * from three of the target's hidden states (taps).
 *
 *   encoder:  g = fc (norm_before_fc ? RMS_enc(taps) : taps), taps = concat of 3 target states (3 x d_target)
 *   decoder:  c = concat(RMS_attn(E[t]), RMS_attn2(g)) (2 d); q, k, v = W c; NORM (adjacent-pair) RoPE;
 *             attention over its own cache, scale 1/sqrt(head_dim); r = Wo a + (norm_before_residual ?
 *             RMS_attn2(g) : g); out = r + down(silu(gate n) * up n), n = RMS_ffn(r)
 *   logits = output RMS_out(out) over the draft vocabulary (d2t maps draft id -> target id); the next g is out.
 * E is its own token_embd, or the target's (unscaled) when it has none. The file's tensors are read here (family
 * rule own_weights); gm_config.d_backbone is the target's width, is_drafter is set. */
#ifndef GM_FAMILY_EAGLE3_H
#define GM_FAMILY_EAGLE3_H

#include <stdbool.h>

#include "formats/gguf.h"
#include "gemma.h"
#include "kernels/matmul.h"

typedef struct gm_model gm_model;

typedef struct gm_e3_weights {
    int taps[3];               /* eagle3.target_layers: target layer ids; == the target's layer count: its final
                                  normed hidden state */
    bool norm_before_fc, norm_before_residual;
    gm_matrix fc;              /* [d x 3 d_target] */
    const float *enc_norm;     /* 3 d_target, norm_before_fc only */
    const float *attn_norm2;   /* d: the norm of g */
    bool own_embd;             /* false: the target's token embedding (unscaled) */
    int n_draft;               /* output rows: the draft vocabulary */
    int32_t *d2t;              /* n_draft target ids (NULL: the draft vocabulary is the target's) */
    float *store;
} gm_e3_weights;

/* The keys after the common ones (gm_config_load's reader): block_count 1, eagle3.target_hidden_size, the
 * vocabulary from the tokenizer when the file has no token_embd. */
gm_status gm_e3_config_keys(const gguf_file *f, gm_config *c, gm_error *err);
gm_status gm_e3_load(gm_model *m, gm_error *err);
void gm_e3_free(gm_e3_weights *w);

#endif
