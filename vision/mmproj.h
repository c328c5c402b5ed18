/* vision/mmproj.h — a Gemma 3 mmproj GGUF (llama.cpp's `clip` files, projector "gemma3") as validated
 * config and weight views: the matrices stay in the mapped file as gm_matrix (any type gm_matmul runs),
 * the vectors and the projection are copied out as f32 once. Internal to vision/. */
#ifndef GM_VISION_MMPROJ_H
#define GM_VISION_MMPROJ_H

#include "formats/gguf.h"
#include "gemma.h"
#include "kernels/matmul.h"

/* The MLP's activation, as llama.cpp's clip loader picks it: clip.use_gelu -> GELU (tanh form),
 * clip.use_silu -> SiLU, neither -> gelu_quick. */
typedef enum vit_act { VIT_GELU_TANH, VIT_GELU_QUICK, VIT_SILU } vit_act;

typedef struct vit_config {
    int image_size, patch_size; /* pixels */
    int n_embd, n_ff, n_layers, n_head, head_dim;
    int proj_dim; /* the text model's width */
    int scale;    /* average-pooling kernel and stride, in patches (clip.vision.projector.scale_factor) */
    float eps;    /* LayerNorm and the soft-embedding RMSNorm */
    float mean[3], std[3];
    vit_act act;
    int grid;      /* patches per side */
    int n_patches; /* grid^2 */
    int n_tokens;  /* (grid / scale)^2 */
} vit_config;

typedef struct vit_layer {
    gm_matrix q, k, v, o, up, down;
    const float *bq, *bk, *bv, *bo, *bup, *bdown;
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
} vit_layer;

typedef struct vit_weights {
    vit_config cfg;
    gguf_file *file;     /* the matrices point into its map (or, for a Hugging Face folder, into hf's) */
    struct mmp_hf *hf;   /* a folder's safetensors and transformed copies (mmproj_hf.h); NULL for a GGUF */
    gm_matrix patch;     /* n_embd x (3 * patch^2), columns in (channel, y, x) order */
    const float *patch_b, *pos, *post_w, *post_b;
    const float *soft_norm; /* already 1 + w in the file */
    gm_matrix proj;      /* proj_dim x n_embd f32: the file's {proj_dim, n_embd} transposed (it is applied as x W) */
    vit_layer *layers;
    float *arena;        /* every f32 copy above */
} vit_weights;

/* ---- what the loaders (mmproj.c: Gemma 3, mmproj_gemma4.c: Gemma 4) share */

/* A bump allocator over a loader's f32 arena (its size computed from the config first). */
typedef struct mmp_arena {
    float *p;
    size_t used, cap;
} mmp_arena;

/* general.architecture is "clip" with clip.has_vision_encoder true: *type is the vision projector's name and
 * *key the key that held it (clip.vision.projector_type if present, else clip.projector_type). */
gm_status mmp_projector(const gguf_file *f, gguf_str *type, const char **key, gm_error *err);
bool mmp_str_is(gguf_str s, const char *want);
/* A u32 key in [lo, hi]; the _opt forms leave *out (the default) when the key is absent. */
gm_status mmp_get_dim(const gguf_file *f, const char *key, int lo, int hi, int *out, gm_error *err);
gm_status mmp_get_opt_dim(const gguf_file *f, const char *key, int lo, int hi, int *out, gm_error *err);
gm_status mmp_get_opt_bool(const gguf_file *f, const char *key, bool *out, gm_error *err);
/* image_mean / image_std: the first three values (llama.cpp throws on fewer). */
gm_status mmp_get_rgb(const gguf_file *f, const char *key, float out[3], gm_error *err);
/* A tensor of exactly this shape (ggml ne), or NOT_FOUND / FORMAT naming it. */
gm_status mmp_get_tensor(const gguf_file *f, const char *name, int64_t n0, int64_t n1, int64_t n2, int64_t n3,
                         const gguf_tensor **out, gm_error *err);
/* A matrix read in place, rows x cols in ggml order (ne {cols, rows}), of a type gm_matmul runs (a view: the
 * encoder binds its level's kernels per call, gm_mm_view). */
gm_status mmp_get_matrix(const gguf_file *f, const char *name, int64_t cols, int64_t rows, gm_matrix *m,
                         gm_error *err);
/* n elements of t as f32, copied into the arena. */
gm_status mmp_dequant(const gguf_tensor *t, int64_t n, mmp_arena *a, const float **out, gm_error *err);
/* A vector {n} as f32 in the arena. */
gm_status mmp_get_vec(const gguf_file *f, const char *name, int64_t n, mmp_arena *a, const float **out, gm_error *err);

/* Opens path (an mmproj GGUF, or a Hugging Face folder read through mmproj_hf.h) and fills w. On failure w holds
 * nothing to free. */
gm_status vit_load(const char *path, vit_weights *w, gm_error *err);
void vit_weights_free(vit_weights *w);

#endif
