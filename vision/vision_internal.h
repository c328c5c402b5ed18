/* vision/vision_internal.h — the encoder families behind gm_vision (vision.c dispatches on the mmproj's
 * projector type): Gemma 3's SigLIP at one fixed size (siglip.c) and Gemma 4's ViT at sizes chosen per image
 * (gemma4v.c). Internal to vision/. */
#ifndef GM_VISION_INTERNAL_H
#define GM_VISION_INTERNAL_H

#include "gemma.h"
#include "gemma_vision.h"
#include "vision/mmproj.h"
#include "vision/mmproj_gemma4.h"

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

struct gm_vision {
    int family; /* 3 or 4: which one of the two below is set */
    siglip *g3;
    g4v *g4;
};

/* Resampling filters of the letterbox (Pillow's, with llama.cpp's pass order: horizontal first). */
typedef enum gm_resample { GM_RESAMPLE_BILINEAR, GM_RESAMPLE_BICUBIC } gm_resample;
gm_status gm_image_letterbox_filter(const gm_image *src, int width, int height, gm_resample f, gm_image *out,
                                    gm_error *err);

#endif
