/* vision/vision.c — gm_vision: the public calls, dispatched to the family the mmproj names (Gemma 3: siglip.c,
 * Gemma 4: gemma4v.c), and each family's preprocessing as llama.cpp does it (mtmd-image.cpp: the fixed-size
 * letterbox for Gemma 3, the dynamic size rule and a bicubic letterbox for Gemma 4). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gemma_vision.h"
#include "kernels/cpu.h"
#include "vision/mmproj_hf.h"
#include "vision/vision_internal.h"

/* Which family the file (or folder) is: Gemma 4 for "gemma4v"; anything else goes to the Gemma 3 loader, whose checks
 * name what is wrong (not an mmproj, no vision encoder, another projector). */
static gm_status peek_family(const char *path, int *family, gm_error *err) {
    if (mmp_is_folder(path)) return mmp_hf_family(path, family, err); /* a Hugging Face folder: its config.json */
    gguf_file *f;
    gm_status st = gguf_open(path, NULL, &f, err);
    if (st) return st;
    gguf_str type;
    const char *key;
    gm_error quiet = {0};
    *family = !mmp_projector(f, &type, &key, &quiet) && mmp_str_is(type, "gemma4v") ? 4 : 3;
    gguf_close(f);
    return GM_OK;
}

gm_status gm_vision_open(const char *path, const gm_vision_options *o, gm_vision **out, gm_error *err) {
    if (!path || !out) return gm_fail(err, GM_ERR_ARG, "gm_vision_open: NULL %s", path ? "out" : "path");
    *out = NULL;
    const gm_vision_options def = {0};
    if (!o) o = &def;
    if (!gm_isa_valid(o->isa)) return gm_fail(err, GM_ERR_ARG, "gm_vision_open: isa %d", (int)o->isa);
    if (o->backend != GM_BACKEND_CPU && o->backend != GM_BACKEND_REFERENCE)
        return gm_fail(err, GM_ERR_ARG, "gm_vision_open: unknown backend %d", (int)o->backend);
    if (o->n_threads > 1024) return gm_fail(err, GM_ERR_ARG, "gm_vision_open: %d threads is more than 1024", o->n_threads);
    if (o->image_min_tokens < 0 || o->image_max_tokens < 0)
        return gm_fail(err, GM_ERR_ARG, "gm_vision_open: image tokens %d..%d", o->image_min_tokens, o->image_max_tokens);
    gm_vision *v = calloc(1, sizeof *v);
    if (!v) return gm_fail(err, GM_ERR_NOMEM, "gm_vision_open");
    gm_status st = peek_family(path, &v->family, err);
    if (!st) st = v->family == 4 ? g4v_open(path, o, &v->g4, err) : siglip_open(path, o, &v->g3, err);
    if (st) {
        free(v);
        return st;
    }
    *out = v;
    return GM_OK;
}

gm_status vit_backend_new(const gm_vision_options *o, bool float_gemm, const gm_dense_shape *s, gm_backend **out,
                          gm_error *err) {
    const gm_backend_options bo = {.n_threads = o->n_threads, .max_batch = s->max_rows, .isa = gm_isa_resolve(o->isa),
                                   .pool = o->pool, .float_gemm = float_gemm};
    gm_status st = (o->backend == GM_BACKEND_REFERENCE ? gm_backend_ref_new : gm_backend_cpu_new)(NULL, NULL, &bo, out, err);
    if (st) return st;
    if (!(*out)->ops->host_memory) /* none today: both backends keep activations in host memory */
        st = gm_fail(err, GM_ERR_UNSUPPORTED, "the %s backend's activations are not host memory: the encoder's "
                     "patch, position and pooling steps need them", (*out)->ops->name);
    if (!st) st = (*out)->ops->dense_reserve(*out, s, err);
    if (st) {
        (*out)->ops->free(*out);
        *out = NULL;
    }
    return st;
}

void gm_vision_free(gm_vision *v) {
    if (!v) return;
    siglip_free(v->g3);
    g4v_free(v->g4);
    free(v);
}

int gm_vision_family(const gm_vision *v) { return v ? v->family : 0; }
int gm_vision_image_size(const gm_vision *v) { return v && v->g3 ? siglip_config(v->g3)->image_size : 0; }

int gm_vision_n_tokens(const gm_vision *v) {
    if (!v) return 0;
    return v->g3 ? siglip_config(v->g3)->n_tokens : g4v_get_config(v->g4)->max_tokens;
}

int gm_vision_embd_dim(const gm_vision *v) {
    if (!v) return 0;
    return v->g3 ? siglip_config(v->g3)->proj_dim : g4v_get_config(v->g4)->proj_dim;
}

void gm_vision_mean_std(const gm_vision *v, float mean[3], float std[3]) {
    const float *m = NULL, *s = NULL;
    if (v && v->g3) m = siglip_config(v->g3)->mean, s = siglip_config(v->g3)->std;
    if (v && v->g4) m = g4v_get_config(v->g4)->mean, s = g4v_get_config(v->g4)->std;
    for (int i = 0; i < 3; i++) {
        if (mean) mean[i] = m ? m[i] : 0.0f;
        if (std) std[i] = s ? s[i] : 1.0f;
    }
}

gm_status gm_vision_encode(gm_vision *v, const float *chw, float *out, gm_error *err) {
    if (!v || !chw || !out) return gm_fail(err, GM_ERR_ARG, "gm_vision_encode: NULL %s", !v ? "encoder" : !chw ? "image" : "out");
    if (!v->g3) return gm_fail(err, GM_ERR_ARG, "gm_vision_encode: Gemma 4 has no fixed size: use gm_vision_encode_chw");
    return siglip_encode(v->g3, chw, out, err);
}

/* ---- Gemma 4's size rule (llama.cpp img_tool::calc_size_preserved_ratio, in its float arithmetic) */

static int round_by(float x, int a) { return (int)roundf(x / (float)a) * a; }
static int ceil_by(float x, int a) { return (int)ceilf(x / (float)a) * a; }
static int floor_by(float x, int a) { return (int)floorf(x / (float)a) * a; }
static int at_least(int x, int a) { return x > a ? x : a; }

static void g4_size(const g4v_config *c, int w, int h, int *ow, int *oh) {
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
}

gm_status gm_vision_input_size(const gm_vision *v, int w, int h, int *out_w, int *out_h, int *n_tokens, gm_error *err) {
    if (!v) return gm_fail(err, GM_ERR_ARG, "gm_vision_input_size: NULL encoder");
    if (w <= 0 || h <= 0 || w > GM_IMAGE_MAX_SIDE * 8 || h > GM_IMAGE_MAX_SIDE * 8)
        return gm_fail(err, GM_ERR_ARG, "gm_vision_input_size: image %d x %d", w, h);
    int W, H, T;
    if (v->g3) {
        const vit_config *c = siglip_config(v->g3);
        W = H = c->image_size;
        T = c->n_tokens;
    } else {
        const g4v_config *c = g4v_get_config(v->g4);
        g4_size(c, w, h, &W, &H);
        T = (W / c->align) * (H / c->align);
    }
    if (out_w) *out_w = W;
    if (out_h) *out_h = H;
    if (n_tokens) *n_tokens = T;
    return GM_OK;
}

/* ---- preprocessing and encoding of any family */

/* A size the encoder takes: Gemma 3 its one size; Gemma 4 sides multiples of align, within its scratch
 * (max_tokens) and its position tables. */
static gm_status check_encode_size(const gm_vision *v, int w, int h, gm_error *err) {
    if (v->g3) {
        const int S = siglip_config(v->g3)->image_size;
        if (w != S || h != S)
            return gm_fail(err, GM_ERR_ARG, "gm_vision_encode_chw: this encoder takes %d x %d, not %d x %d", S, S, w, h);
        return GM_OK;
    }
    const g4v_config *c = g4v_get_config(v->g4);
    if (w <= 0 || h <= 0 || w % c->align || h % c->align)
        return gm_fail(err, GM_ERR_ARG, "gm_vision_encode_chw: %d x %d: sides must be positive multiples of %d", w, h, c->align);
    if ((int64_t)(w / c->align) * (h / c->align) > c->max_tokens)
        return gm_fail(err, GM_ERR_ARG, "gm_vision_encode_chw: %d x %d makes %lld tokens, more than the %d it was opened for",
                       w, h, (long long)(w / c->align) * (h / c->align), c->max_tokens);
    if (w / c->patch_size > c->pos_rows || h / c->patch_size > c->pos_rows)
        return gm_fail(err, GM_ERR_ARG, "gm_vision_encode_chw: %d x %d has more than the %d patches per side of the position table",
                       w, h, c->pos_rows);
    return GM_OK;
}

gm_status gm_vision_preprocess(const gm_vision *v, const gm_image *img, float **chw, int *w, int *h, int *n_tokens,
                               gm_error *err) {
    if (!v || !img || !img->pixels || !chw)
        return gm_fail(err, GM_ERR_ARG, "gm_vision_preprocess: NULL %s", !v ? "encoder" : !chw ? "out" : "image");
    *chw = NULL;
    int W, H, T;
    gm_status st = gm_vision_input_size(v, img->width, img->height, &W, &H, &T, err);
    if (!st && v->g4) st = check_encode_size(v, W, H, err);
    if (st) return st;
    gm_image sq = {0};
    if ((st = gm_image_letterbox_filter(img, W, H, v->g4 ? GM_RESAMPLE_BICUBIC : GM_RESAMPLE_BILINEAR, &sq, err))) return st;
    float mean[3], std[3];
    gm_vision_mean_std(v, mean, std);
    float *x = malloc((size_t)3 * W * H * sizeof *x);
    if (!x) st = gm_fail(err, GM_ERR_NOMEM, "gm_vision_preprocess: %d x %d", W, H);
    if (!st) st = gm_image_to_chw(&sq, mean, std, x, err);
    gm_image_free(&sq);
    if (st) {
        free(x);
        return st;
    }
    *chw = x;
    if (w) *w = W;
    if (h) *h = H;
    if (n_tokens) *n_tokens = T;
    return GM_OK;
}

gm_status gm_vision_encode_chw(gm_vision *v, const float *chw, int w, int h, float *out, gm_error *err) {
    if (!v || !chw || !out)
        return gm_fail(err, GM_ERR_ARG, "gm_vision_encode_chw: NULL %s", !v ? "encoder" : !chw ? "image" : "out");
    gm_status st = check_encode_size(v, w, h, err);
    if (st) return st;
    return v->g3 ? siglip_encode(v->g3, chw, out, err) : g4v_encode(v->g4, chw, w, h, out, err);
}

gm_status gm_vision_encode_image(gm_vision *v, const gm_image *img, float **out, int *n_tokens, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "gm_vision_encode_image: out is NULL");
    *out = NULL;
    float *chw;
    int w, h, n;
    gm_status st = gm_vision_preprocess(v, img, &chw, &w, &h, &n, err);
    if (st) return st;
    float *e = malloc((size_t)n * (size_t)gm_vision_embd_dim(v) * sizeof *e);
    st = e ? gm_vision_encode_chw(v, chw, w, h, e, err) : gm_fail(err, GM_ERR_NOMEM, "gm_vision_encode_image");
    free(chw);
    if (st) {
        free(e);
        return st;
    }
    *out = e;
    if (n_tokens) *n_tokens = n;
    return GM_OK;
}

void gm_vision_get_info(const gm_vision *v, gm_vision_info *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!v) return;
    static const char *const act[] = {[VIT_GELU_TANH] = "gelu-tanh", [VIT_GELU_QUICK] = "gelu-quick", [VIT_SILU] = "silu"};
    if (v->g3) {
        const vit_config *c = siglip_config(v->g3);
        *out = (gm_vision_info){.family = 3, .projector = "gemma3", .image_size = c->image_size,
                                .patch_size = c->patch_size, .n_layers = c->n_layers, .n_embd = c->n_embd,
                                .n_ff = c->n_ff, .n_head = c->n_head, .n_tokens = c->n_tokens,
                                .embd_dim = c->proj_dim, .activation = act[c->act]};
        memcpy(out->mean, c->mean, sizeof out->mean);
        memcpy(out->std, c->std, sizeof out->std);
    } else {
        const g4v_config *c = g4v_get_config(v->g4);
        *out = (gm_vision_info){.family = 4, .projector = "gemma4v", .image_size = 0, .patch_size = c->patch_size,
                                .n_layers = c->n_layers, .n_embd = c->n_embd, .n_ff = c->n_ff, .n_head = c->n_head,
                                .n_tokens = c->max_tokens, .embd_dim = c->proj_dim, .activation = act[c->act]};
        memcpy(out->mean, c->mean, sizeof out->mean);
        memcpy(out->std, c->std, sizeof out->std);
    }
}

/* ---- an image file's bytes to the rows a sequence takes: what the CLI and the server call */

gm_status gm_vision_encode_bytes(gm_vision *v, const void *bytes, size_t len, const gm_image_limits *lim,
                                 const uint64_t secret[2], gm_vision_rows *out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "gm_vision_encode_bytes: out is NULL");
    *out = (gm_vision_rows){0};
    if (!v || !bytes || !secret) return gm_fail(err, GM_ERR_ARG, "gm_vision_encode_bytes: NULL argument");
    gm_image img;
    gm_status st = gm_image_decode(bytes, len, lim, &img, err);
    if (st) return st;
    out->width = img.width, out->height = img.height;
    gm_image_digest(&img, secret, out->key);
    st = gm_vision_encode_image(v, &img, &out->rows, &out->n_rows, err);
    gm_image_free(&img);
    if (st) *out = (gm_vision_rows){0};
    return st;
}

void gm_vision_rows_free(gm_vision_rows *r) {
    if (!r) return;
    free(r->rows);
    *r = (gm_vision_rows){0};
}
