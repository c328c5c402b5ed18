/* vision/vision_internal.h — the encoder families behind gm_vision, one row each (gm_vision_kind; the rows in
 * encoders.c, selected by the mmproj's projector type): Gemma 3's SigLIP at one fixed size (siglip.c) and Gemma 4's
 * ViT at sizes chosen per image (gemma4v.c). Internal to vision/. */
#ifndef GM_VISION_INTERNAL_H
#define GM_VISION_INTERNAL_H

#include "gemma.h"
#include "gemma_vision.h"
#include "runtime/backend.h"
#include "vision/mmproj.h"
#include "vision/mmproj_gemma4.h"

/* The backend an encoder runs on (o->backend, on o->pool or a pool of its own), its dense scratch reserved for
 * shape s. float_gemm: as gm_backend_options.float_gemm (Gemma 3's). The encoders' patch extraction, position
 * tables and pooling are host code between the ops, so the backend's activations must be host memory (both
 * backends' are; a device backend would need those steps as ops, and an upload). */
gm_status vit_backend_new(const gm_vision_options *o, bool float_gemm, const gm_dense_shape *s, gm_backend **out,
                          gm_error *err);
static inline gm_act vit_act_op(vit_act a) {
    return a == VIT_GELU_TANH ? GM_ACT_GELU_TANH : a == VIT_GELU_QUICK ? GM_ACT_GELU_QUICK : GM_ACT_SILU;
}

/* Gemma 3 (siglip.c). o is never NULL here. */
typedef struct siglip siglip;
gm_status siglip_open(const char *path, const gm_vision_options *o, siglip **out, gm_error *err);
void siglip_free(siglip *s);
const vit_config *siglip_config(const siglip *s);
/* chw: 3 x image_size^2 normalised floats; out: n_tokens x proj_dim. */
gm_status siglip_encode(siglip *s, const float *chw, float *out, gm_error *err);

/* Gemma 4 (gemma4v.c). */
typedef struct g4v g4v;
gm_status g4v_open(const char *path, const gm_vision_options *o, g4v **out, gm_error *err);
void g4v_free(g4v *g);
const g4v_config *g4v_get_config(const g4v *g);
/* chw: 3 x h x w normalised floats, w and h multiples of patch * pool with at most max_tokens tokens
 * (checked by the caller); out: (w / a) (h / a) x proj_dim, a = patch * pool. */
gm_status g4v_encode(g4v *g, const float *chw, int w, int h, float *out, gm_error *err);

/* Resampling filters of the letterbox (Pillow's, with llama.cpp's pass order: horizontal first). */
typedef enum gm_resample { GM_RESAMPLE_BILINEAR, GM_RESAMPLE_BICUBIC } gm_resample;

/* An encoder family as a row (vision/encoders.c): the data that tells the families apart, and hooks over the
 * family's encoder (enc: what open made). vision.c reads the row and names no family. */
typedef struct gm_vision_kind {
    int family;            /* gm_vision_family(): 3, 4 */
    const char *projector; /* the mmproj's clip.projector_type that selects the row; gm_vision_info.projector */
    gm_resample resample;  /* the letterbox's filter */
    gm_status (*open)(const char *path, const gm_vision_options *o, void **enc, gm_error *err); /* o not NULL */
    void (*free)(void *enc);
    void (*info)(const void *enc, gm_vision_info *out); /* every field but family and projector */
    /* The input size the family's reference picks for a w x h image (its one size, or a size rule) and the
     * rows it makes. */
    void (*input_size)(const void *enc, int w, int h, int *out_w, int *out_h, int *n_tokens);
    gm_status (*check_size)(const void *enc, int w, int h, gm_error *err); /* a size encode takes, or GM_ERR_ARG */
    /* chw: 3 x h x w normalised floats of a size check_size took; out: rows x embd_dim. */
    gm_status (*encode)(void *enc, const float *chw, int w, int h, float *out, gm_error *err);
} gm_vision_kind;

extern const gm_vision_kind gm_vision_kind_gemma3, gm_vision_kind_gemma4;

struct gm_vision {
    const gm_vision_kind *fam;
    void *enc;           /* the family's encoder */
    gm_vision_info info; /* the row's and the encoder's facts, fixed at open */
};
gm_status gm_image_letterbox_filter(const gm_image *src, int width, int height, gm_resample f, gm_image *out,
                                    gm_error *err);

#endif
