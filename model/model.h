/* model/model.h — an opened Gemma model: the tensor source, its config, the tokenizer, and per-layer
 * weight references. Matrices are views into the mapped file (no copies), numbered (gm_matrix.id) so that a
 * backend can keep its own copy of each (the CPU backend's: backends/cpu/repack.c); norm weights are converted to
 * f32 once, with the Gemma "+1" folded in when the file stores the raw w (HF). Nothing in a model changes after
 * gm_model_open returns. */
#ifndef GM_MODEL_MODEL_H
#define GM_MODEL_MODEL_H

#include <pthread.h>
#include <stdbool.h>

#include "gemma.h"
#include "kernels/matmul.h"
#include "model/source.h"

typedef struct gm_layer {
    gm_matrix wq, wk, wv, wo;       /* [H*hd x d], [Hkv*hd x d] x2, [d x H*hd] */
    gm_matrix gate, up, down;       /* [ff x d] x2, [d x ff] */
    const float *attn_norm;         /* d, always present */
    const float *post_attn_norm;    /* d, NULL without post norms (Gemma 1) */
    const float *ffn_norm;          /* d, pre-FFN norm */
    const float *post_ffn_norm;     /* d, NULL without post norms */
    const float *q_norm, *k_norm;   /* hd, NULL without q/k norm (Gemma 1/2) */
    gm_layer_config lc;             /* shapes, window, RoPE, KV source */
    const float *inv_freq;          /* rope_dims/2 RoPE inverse frequencies (base, linear scale folded) */
    bool v_from_k;                  /* Gemma 4 layer without attn_v: V is the raw K projection */
} gm_layer;

/* What the backends on one model share: the CPU backend's weight copies (backends/cpu/repack.c), made by the first
 * CPU backend on the model and freed by the last. The box sits beside the model, not in it: the model's fields
 * never change; the backends fill this one, under its lock. */
typedef struct gm_backend_share {
    pthread_mutex_t mu;
    void *cpu_weights; /* a gm_cpu_weights, NULL while no CPU backend runs the model */
} gm_backend_share;

struct gm_model {
    gm_source *src;
    gm_config cfg;
    gm_tokenizer *tok;              /* owned */
    gm_matrix embd;                 /* [vocab x d] token embeddings */
    gm_matrix output;               /* LM head: == embd when tied */
    const float *output_norm;       /* d */
    gm_matrix dense_2, dense_3;     /* embedding models: projections after pooling (rows 0 when absent) */
    gm_layer *layers;
    float *f32_store;               /* backing store of every f32 vector above */
    void *family_weights;           /* the family's weights beyond the Gemma block (3n: AltUp, LAuReL, per-layer
                                       inputs; 4: per-layer inputs, output scales, experts), made by its row's load
                                       hook and freed by its unload hook; opaque here, NULL for Gemma 1/2/3 */
    int n_matrices;                 /* the matrices' ids: 1 .. n_matrices (gm_model_load_matrix) */
    gm_isa isa;                     /* gm_model_options.isa resolved: the level of the CPU backends on the model */
    gm_repack repack;               /* gm_model_options.repack: the copies those backends make */
    gm_backend_share *share;        /* owned: allocated at open, filled by the backends */
};

/* True when layer il attends through a sliding window: the config's pattern, or the file's per-layer one
 * (gm_config_gguf_slides). */
bool gm_layer_is_sliding(const gm_source *s, const gm_config *c, int il);
/* Layer il's facts under Gemma 1/2/3's uniform rules (shapes from the global config, window and RoPE
 * base by the layer's kind). */
gm_layer_config gm_layer_config_uniform(const gm_source *s, const gm_config *c, int il);
/* The largest of a per-layer field over the model's layers (scratch sizes). */
typedef struct gm_layer_max {
    int head_dim, n_heads, n_kv_heads, d_ff, q_dim, kv_dim, group; /* group: n_heads / n_kv_heads */
} gm_layer_max;
gm_layer_max gm_model_layer_max(const gm_model *m);
/* Row tok of the token embeddings as d_model floats (no scale applied). */
gm_status gm_model_embedding_row(const gm_model *m, int32_t tok, float *out);
/* A 2-D weight [rows x cols] (GGUF ne = [cols, rows]) as a matrix view, its shape checked, numbered (the next id). */
gm_status gm_model_load_matrix(gm_model *m, const char *name, int64_t cols, int64_t rows, gm_matrix *out,
                               gm_error *err);
/* A norm weight of n elements into dst as f32, +1 added unless cfg.norm_weights_plus_one. */
gm_status gm_model_load_norm(gm_model *m, const char *name, int n, bool required, float *dst, const float **out,
                             gm_error *err);

#endif
