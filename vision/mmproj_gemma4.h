/* vision/mmproj_gemma4.h — a Gemma 4 mmproj GGUF (llama.cpp's `clip` files, vision projector "gemma4v") as
 * validated config and weight views, as mmproj.h is for Gemma 3: matrices in place in the mapped file, vectors
 * copied out as f32. Internal to vision/. */
#ifndef GM_VISION_MMPROJ_GEMMA4_H
#define GM_VISION_MMPROJ_GEMMA4_H

#include "vision/mmproj.h"
#include "gemma_vision.h"

/* llama.cpp's defaults for Gemma 4 (clip.cpp load_hparams): none of them is in the file. */
enum { G4V_POOL = 3, G4V_MIN_TOKENS = 70, G4V_MAX_TOKENS = 1120 };
#define G4V_ROPE_THETA 100.0

typedef struct g4v_config {
    int patch_size;                /* pixels (16) */
    int n_embd, n_ff, n_layers, n_head, head_dim;
    int proj_dim;                  /* the text model's width */
    int pool;                      /* average-pooling kernel and stride in patches (3; scale_factor overrides) */
    int align;                     /* patch_size * pool: image sides are multiples of it */
    int pos_rows;                  /* rows of each position table: the most patches per side */
    int min_tokens, max_tokens;    /* the size rule's bounds (options, else 70 and 1120) */
    int max_patches;               /* max_tokens * pool^2: what the scratch holds */
    float eps;                     /* every RMSNorm */
    float mean[3], std[3];
    vit_act act;                   /* the gated FFN's activation */
} g4v_config;

/* A linear layer (Gemma4ClippableLinear): y = clamp(W clamp(x, in), out); a clamp is absent unless the file
 * has its scalar tensors, as llama.cpp reads them (missing bounds are +-FLT_MAX). */
typedef struct g4v_linear {
    gm_matrix w;
    bool clamp_in, clamp_out;
    float in_min, in_max, out_min, out_max;
} g4v_linear;

typedef struct g4v_layer {
    g4v_linear q, k, v, o, gate, up, down;
    const float *ln1, *ln2;          /* pre-attention, pre-FFN RMSNorm weights (raw, no 1 +) */
    const float *q_norm, *k_norm;    /* per-head, head_dim each */
    const float *attn_post, *ffn_post;
    const float *out_scale;          /* NULL, or out_scale_n (1 or n_embd) values multiplying the block's output */
    int out_scale_n;
} g4v_layer;

typedef struct g4v_weights {
    g4v_config cfg;
    gguf_file *file;
    struct mmp_hf *hf;                /* a Hugging Face folder's tensors (mmproj_hf.h); NULL for a GGUF */
    gm_matrix patch;                  /* n_embd x (3 * patch^2), columns (channel, y, x); no bias */
    const float *pos;                 /* 2 x pos_rows x n_embd: the x table, then the y table */
    const float *std_bias, *std_scale; /* both or neither */
    g4v_linear proj;                  /* proj_dim x n_embd, applied the usual way (y = W x) */
    g4v_layer *layers;
    float *arena;                     /* every f32 copy above */
} g4v_weights;

/* Opens path (a gemma4v mmproj, or a Hugging Face folder read through mmproj_hf.h) and fills w, with the
 * options' token bounds and activation choice (the matrices are views: the encoder binds its level's kernels per
 * call). On failure w holds nothing to free. */
gm_status g4v_load(const char *path, const gm_vision_options *o, g4v_weights *w, gm_error *err);
void g4v_weights_free(g4v_weights *w);

#endif
