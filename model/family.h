/* model/family.h — a model family as data: one row per family (model/families/registry.c) with the names that
 * select it, the rules in which Gemma 1, 2 and 3 differ, and hooks for what a family adds at named points of
 * reading and loading a model. The row is looked up once, when the config is read (gm_config.family), and the
 * rest of model/ reads it instead of testing names or generation numbers. What a family computes at the forward
 * pass's named points is runtime's (runtime/families/hooks.c: the hooks per row), so model/ stays below runtime/.
 *
 * Dependencies point one way: the generic code (config.c, model.c, describe.c, source.c) includes only this
 * header; the families (model/families/) implement the hooks on top of the generic code, and the registry is
 * the one place that names them all. */
#ifndef GM_MODEL_FAMILY_H
#define GM_MODEL_FAMILY_H

#include <stdbool.h>
#include <stddef.h>

#include "formats/gguf.h"
#include "gemma.h"
#include "model/source.h"

typedef struct gm_model gm_model;

/* The rules the generic readers and the loader follow (docs/model-files.md, "Config rules"): facts the files do
 * not carry, or carry under keys whose defaults differ per family. */
typedef struct gm_family_rules {
    bool post_norms;            /* post-attention and post-FFN norms (Gemma 2 on) */
    bool qk_norm;               /* q and k RMS-normed per head (Gemma 3 on) */
    bool v_norm;                /* V RMS-normed without a weight (3n, 4) */
    bool raw_norm_weights;      /* the model multiplies by w as stored (3n, 4): an HF file needs no +1 either */
    bool hf_gemma1_names;       /* HF post_attention_layernorm is the pre-FFN norm (Gemma 1's naming) */
    int sliding_pattern;        /* layer il is global iff (il + 1) % pattern == 0: 2 (Gemma 2), 6 (Gemma 3);
                                   0: no window, or windows per layer (a layer_config hook) */
    int window_default;         /* sliding_window when the file has none: 4096 (2), 0 = no window (3); -1: required */
    bool pattern_from_config;   /* HF: sliding_window_pattern / layer_types may give another repeating pattern */
    float attn_softcap;         /* the attention logit soft-cap when the file gives none: 50 (Gemma 2); 0: the
                                   family has none (a key met by a reader is checked as a number, then dropped) */
    bool final_softcap;         /* a final logit soft-cap */
    float final_softcap_default; /* its value when the file has no key: 30 (2, HF 3n), 0 (3) */
    bool local_rope;            /* sliding layers: their own RoPE base (default 10000) unscaled (Gemma 3) */
    bool rope_scaling;          /* global layers: linear RoPE scaling from the file (Gemma 3) */
    int n_layers_27b;           /* GGUF query scale 1/sqrt(d_model / n_heads) at this layer count (llama.cpp's
                                   27B rule: 46 for Gemma 2, 62 for Gemma 3); 0: never */
    bool hf_query_pre_attn_scalar; /* HF: the query scale is query_pre_attn_scalar^-0.5 (Gemma 2 on) */
    bool query_scale_one;       /* q is not scaled before q.k (3n, 4) */
    bool per_layer_shapes;      /* shapes differ per layer: tensors are checked by name when layers load (4) */
    bool kv_tensors_optional;   /* a layer reading another's K/V may omit attn_k / attn_v / attn_k_norm, and one
                                   without attn_v takes V from the K projection (4) */
    bool embedding;             /* an encoder: the <arch>.pooling_type / dense_* keys, pooled vectors */
    bool q_only;                /* a drafter: layers have queries only (no attn_k / attn_v / attn_k_norm) and read a
                                   target's cache (Gemma 4's assistant) */
    bool own_weights;           /* not a Gemma block: the family's load hook reads every tensor and checks it (EAGLE-3:
                                   attention over 2 d inputs, SwiGLU, no token_embd of its own when it uses the
                                   target's); n_vocab is the family's when the file has no token_embd */
    bool hf_bidirectional_embedding; /* HF: use_bidirectional_attention makes it EmbeddingGemma (Gemma 3) */
} gm_family_rules;

/* What `gemma inspect` shows of a layer beyond gm_layer_config; the neutral values for families without extras. */
typedef struct gm_layer_extras {
    int rotated_pairs; /* pairs that RoPE rotates on full layers; -1: all of rope_dims */
    bool v_from_k;     /* no attn_v: V is the raw K projection */
    float out_scale;   /* layer output scale (1 when absent) */
    int n_expert, n_expert_used, ff_exp; /* mixture-of-experts layers; 0 otherwise */
    bool reads_target; /* a drafter's layer: attends over the target's cache */
} gm_layer_extras;

/* A family's Hugging Face tensor names beyond the Gemma block's, as their GGUF names: model/source.c renames an HF
 * folder's text-model tensors by walking the row's tables (the Gemma 1/2/3 block it knows itself). A table ends
 * with an entry of kind GM_HF_END. */
typedef enum gm_hf_kind {
    GM_HF_END,      /* the end of a table */
    GM_HF_GLOBAL,   /* "model.<x>" -> gguf exactly; the module "model.<x minus its last part>." is the text model's */
    GM_HF_NUMBERED, /* "<hf><k>.weight" -> "<gguf><k>.weight", 0 <= k < 8 (3n's AltUp projections, one per stream) */
    GM_HF_LAYER,    /* "model.layers.<i>.<hf>" -> "blk.<i>.<gguf>" */
} gm_hf_kind;

typedef struct gm_hf_name {
    gm_hf_kind kind;
    const char *hf, *gguf;
} gm_hf_name;

typedef struct gm_family {
    const char *arch;               /* gm_config.arch: the name llama.cpp writes as general.architecture */
    int generation;                 /* gm_config.generation: 1, 2, 3 (3n and EmbeddingGemma too), 4 */
    const char *const *gguf_archs;  /* general.architecture values that select the row (NULL-terminated) */
    const char *const *hf_types;    /* config.json model_type values (text_config's, else the top level's) */
    gm_family_rules rules;
    const gm_hf_name *const *hf_names; /* the tables of its HF tensor names (NULL-terminated; NULL: none) */
    /* Hooks, each NULL where the generic code does it all. Config: */
    gm_status (*config_gguf)(const gguf_file *f, gm_config *c, gm_error *err);      /* every key, in place of the
                                                                                       generic reader (4) */
    gm_status (*config_gguf_keys)(const gguf_file *f, gm_config *c, gm_error *err); /* the family's keys after the
                                                                                       common ones (3n) */
    gm_status (*config_hf)(const gm_source *s, gm_config *c, gm_error *err);        /* every field of config.json,
                                                                                       in place of the generic one */
    /* Layer il's facts after the uniform rules (gm_layer_config_uniform): KV sharing (3n), per-layer geometry (4).
     * err may be NULL (describe). */
    gm_status (*layer_config)(const gm_source *s, const gm_config *c, int il, gm_layer_config *out, gm_error *err);
    /* Full layers' RoPE frequencies (n = rope_dims / 2 of them) adjusted by the file (4's rope_freqs). */
    gm_status (*rope_factors)(const gm_model *m, float *inv_freq, int n, gm_error *err);
    gm_status (*load)(gm_model *m, gm_error *err); /* the family's weights beyond the Gemma block */
    void (*unload)(gm_model *m);                   /* frees what load made (also after a failed load) */
    void (*layer_extras)(const gm_source *s, const gm_layer_config *l, int il, gm_layer_extras *out); /* inspect */
} gm_family;

/* The row whose gguf_archs / hf_types hold name; NULL for an unknown name (the caller says which are known). */
const gm_family *gm_family_by_gguf_arch(const char *name);
const gm_family *gm_family_by_hf_type(const char *name);
/* Every row, for lists and tests: NULL past the last. */
const gm_family *gm_family_at(int i);
/* "gemma, gemma2, ..." : the names of one kind (HF model types when hf) into buf, for error messages. */
void gm_family_names(bool hf, char *buf, size_t n);

#endif
