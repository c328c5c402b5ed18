/* vision/encoders.c — the encoder families behind gm_vision, one row each (vision_internal.h): what tells them
 * apart is data (the projector type that selects the row, the letterbox's filter, the shape facts gm_vision_info
 * reports) and four hooks (the input size for an image, the sizes the encoder takes, open, encode). vision.c reads
 * the row; nothing else names a family.
 *   Gemma 3 (siglip.c): one fixed size, a bilinear letterbox (llama.cpp's mtmd-image.cpp for gemma3).
 *   Gemma 4 (gemma4v.c): sizes chosen per image by llama.cpp's size rule, a bicubic letterbox. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "vision/vision_internal.h"

static const char *const k_act[] = {[VIT_GELU_TANH] = "gelu-tanh", [VIT_GELU_QUICK] = "gelu-quick",
                                    [VIT_SILU] = "silu"};

/* ---- Gemma 3: SigLIP at image_size x image_size, n_tokens rows */

static gm_status g3_open(const char *path, const gm_vision_options *o, void **enc, gm_error *err) {
    siglip *s = NULL;
    gm_status st = siglip_open(path, o, &s, err);
    *enc = s;
    return st;
}

static void g3_free(void *enc) { siglip_free(enc); }

static void g3_info(const void *enc, gm_vision_info *out) {
    const vit_config *c = siglip_config(enc);
    *out = (gm_vision_info){.image_size = c->image_size,
                            .patch_size = c->patch_size,
                            .n_layers = c->n_layers,
                            .n_embd = c->n_embd,
                            .n_ff = c->n_ff,
                            .n_head = c->n_head,
                            .n_tokens = c->n_tokens,
                            .embd_dim = c->proj_dim,
                            .activation = k_act[c->act]};
    memcpy(out->mean, c->mean, sizeof out->mean);
    memcpy(out->std, c->std, sizeof out->std);
}

static void g3_input_size(const void *enc, int w, int h, int *ow, int *oh, int *n_tokens) {
    (void)w, (void)h;
    const vit_config *c = siglip_config(enc);
    *ow = *oh = c->image_size;
    *n_tokens = c->n_tokens;
}

static gm_status g3_check_size(const void *enc, int w, int h, gm_error *err) {
    const int S = siglip_config(enc)->image_size;
    if (w != S || h != S)
        return gm_fail(err, GM_ERR_ARG, "gm_vision_encode_chw: this encoder takes %d x %d, not %d x %d", S, S, w, h);
    return GM_OK;
}

static gm_status g3_encode(void *enc, const float *chw, int w, int h, float *out, gm_error *err) {
    (void)w, (void)h; /* checked: its one size */
    return siglip_encode(enc, chw, out, err);
}

const gm_vision_kind gm_vision_kind_gemma3 = {.family = 3,
                                              .projector = "gemma3",
                                              .resample = GM_RESAMPLE_BILINEAR,
                                              .open = g3_open,
                                              .free = g3_free,
                                              .info = g3_info,
                                              .input_size = g3_input_size,
                                              .check_size = g3_check_size,
                                              .encode = g3_encode};

/* ---- Gemma 4: sides multiples of align = patch x pool, (w / align) (h / align) rows */

static gm_status g4_open(const char *path, const gm_vision_options *o, void **enc, gm_error *err) {
    g4v *g = NULL;
    gm_status st = g4v_open(path, o, &g, err);
    *enc = g;
    return st;
}

static void g4_free(void *enc) { g4v_free(enc); }

static void g4_info(const void *enc, gm_vision_info *out) {
    const g4v_config *c = g4v_get_config(enc);
    *out = (gm_vision_info){.image_size = 0,
                            .patch_size = c->patch_size,
                            .n_layers = c->n_layers,
                            .n_embd = c->n_embd,
                            .n_ff = c->n_ff,
                            .n_head = c->n_head,
                            .n_tokens = c->max_tokens,
                            .embd_dim = c->proj_dim,
                            .activation = k_act[c->act]};
    memcpy(out->mean, c->mean, sizeof out->mean);
    memcpy(out->std, c->std, sizeof out->std);
}

/* llama.cpp's img_tool::calc_size_preserved_ratio, in its float arithmetic */
static int round_by(float x, int a) { return (int)roundf(x / (float)a) * a; }
static int ceil_by(float x, int a) { return (int)ceilf(x / (float)a) * a; }
static int floor_by(float x, int a) { return (int)floorf(x / (float)a) * a; }
static int at_least(int x, int a) { return x > a ? x : a; }

static void g4_input_size(const void *enc, int w, int h, int *ow, int *oh, int *n_tokens) {
    const g4v_config *c = g4v_get_config(enc);
    const int a = c->align;
    const int min_px = c->min_tokens * a * a, max_px = c->max_tokens * a * a;
    int wb = at_least(round_by((float)w, a), a), hb = at_least(round_by((float)h, a), a);
    if ((int64_t)wb * hb > max_px) {
        const float beta = sqrtf((float)h * (float)w / (float)max_px);
        hb = at_least(floor_by((float)h / beta, a), a);
        wb = at_least(floor_by((float)w / beta, a), a);
    } else if ((int64_t)wb * hb < min_px) {
        const float beta = sqrtf((float)min_px / ((float)h * (float)w));
        hb = ceil_by((float)h * beta, a);
        wb = ceil_by((float)w * beta, a);
    }
    *ow = wb;
    *oh = hb;
    *n_tokens = (wb / a) * (hb / a);
}

/* sides multiples of align, within the scratch (max_tokens) and the position tables */
static gm_status g4_check_size(const void *enc, int w, int h, gm_error *err) {
    const g4v_config *c = g4v_get_config(enc);
    if (w <= 0 || h <= 0 || w % c->align || h % c->align)
        return gm_fail(err, GM_ERR_ARG, "gm_vision_encode_chw: %d x %d: sides must be positive multiples of %d", w, h,
                       c->align);
    if ((int64_t)(w / c->align) * (h / c->align) > c->max_tokens)
        return gm_fail(err, GM_ERR_ARG,
                       "gm_vision_encode_chw: %d x %d makes %lld tokens, more than the %d it was opened for", w, h,
                       (long long)(w / c->align) * (h / c->align), c->max_tokens);
    if (w / c->patch_size > c->pos_rows || h / c->patch_size > c->pos_rows)
        return gm_fail(err, GM_ERR_ARG,
                       "gm_vision_encode_chw: %d x %d has more than the %d patches per side of the position table", w,
                       h, c->pos_rows);
    return GM_OK;
}

static gm_status g4_encode(void *enc, const float *chw, int w, int h, float *out, gm_error *err) {
    return g4v_encode(enc, chw, w, h, out, err);
}

const gm_vision_kind gm_vision_kind_gemma4 = {.family = 4,
                                              .projector = "gemma4v",
                                              .resample = GM_RESAMPLE_BICUBIC,
                                              .open = g4_open,
                                              .free = g4_free,
                                              .info = g4_info,
                                              .input_size = g4_input_size,
                                              .check_size = g4_check_size,
                                              .encode = g4_encode};
