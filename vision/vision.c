/* vision/vision.c — gm_vision: the public calls over the encoder family's row (vision_internal.h; the rows and
 * each family's preprocessing as llama.cpp does it are in encoders.c), chosen by the projector type the mmproj
 * names. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gemma_vision.h"
#include "kernels/cpu.h"
#include "vision/mmproj_hf.h"
#include "vision/vision_internal.h"

/* Gemma 3's first: the row for a file of another or no projector type, whose loader's checks name what is wrong
 * (not an mmproj, no vision encoder, another projector). */
static const gm_vision_kind *const k_families[] = {&gm_vision_kind_gemma3, &gm_vision_kind_gemma4};
enum { N_FAMILIES = sizeof k_families / sizeof k_families[0] };

/* The row of the file's projector type, or of the family a Hugging Face folder's config.json names. */
static gm_status peek_family(const char *path, const gm_vision_kind **out, gm_error *err) {
    *out = k_families[0];
    if (mmp_is_folder(path)) {
        int family = 0;
        gm_status st = mmp_hf_family(path, &family, err);
        for (int i = 0; !st && i < N_FAMILIES; i++)
            if (k_families[i]->family == family) *out = k_families[i];
        return st;
    }
    gguf_file *f;
    gm_status st = gguf_open(path, NULL, &f, err);
    if (st) return st;
    gguf_str type;
    const char *key;
    gm_error quiet = {0};
    const bool typed = !mmp_projector(f, &type, &key, &quiet);
    for (int i = 0; typed && i < N_FAMILIES; i++)
        if (mmp_str_is(type, k_families[i]->projector)) *out = k_families[i];
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
    gm_status st = peek_family(path, &v->fam, err);
    if (!st) st = v->fam->open(path, o, &v->enc, err);
    if (st) {
        free(v);
        return st;
    }
    v->fam->info(v->enc, &v->info);
    v->info.family = v->fam->family;
    v->info.projector = v->fam->projector;
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
    v->fam->free(v->enc);
    free(v);
}

int gm_vision_family(const gm_vision *v) { return v ? v->info.family : 0; }
int gm_vision_image_size(const gm_vision *v) { return v ? v->info.image_size : 0; }
int gm_vision_n_tokens(const gm_vision *v) { return v ? v->info.n_tokens : 0; }
int gm_vision_embd_dim(const gm_vision *v) { return v ? v->info.embd_dim : 0; }

void gm_vision_mean_std(const gm_vision *v, float mean[3], float std[3]) {
    for (int i = 0; i < 3; i++) {
        if (mean) mean[i] = v ? v->info.mean[i] : 0.0f;
        if (std) std[i] = v ? v->info.std[i] : 1.0f;
    }
}

gm_status gm_vision_encode(gm_vision *v, const float *chw, float *out, gm_error *err) {
    if (!v || !chw || !out) return gm_fail(err, GM_ERR_ARG, "gm_vision_encode: NULL %s", !v ? "encoder" : !chw ? "image" : "out");
    const int S = v->info.image_size;
    if (!S)
        return gm_fail(err, GM_ERR_ARG, "gm_vision_encode: %s has no fixed size: use gm_vision_encode_chw",
                       v->info.projector);
    return v->fam->encode(v->enc, chw, S, S, out, err);
}

gm_status gm_vision_input_size(const gm_vision *v, int w, int h, int *out_w, int *out_h, int *n_tokens, gm_error *err) {
    if (!v) return gm_fail(err, GM_ERR_ARG, "gm_vision_input_size: NULL encoder");
    if (w <= 0 || h <= 0 || w > GM_IMAGE_MAX_SIDE * 8 || h > GM_IMAGE_MAX_SIDE * 8)
        return gm_fail(err, GM_ERR_ARG, "gm_vision_input_size: image %d x %d", w, h);
    int W, H, T;
    v->fam->input_size(v->enc, w, h, &W, &H, &T);
    if (out_w) *out_w = W;
    if (out_h) *out_h = H;
    if (n_tokens) *n_tokens = T;
    return GM_OK;
}

/* ---- preprocessing and encoding of any family */

gm_status gm_vision_preprocess(const gm_vision *v, const gm_image *img, float **chw, int *w, int *h, int *n_tokens,
                               gm_error *err) {
    if (!v || !img || !img->pixels || !chw)
        return gm_fail(err, GM_ERR_ARG, "gm_vision_preprocess: NULL %s", !v ? "encoder" : !chw ? "out" : "image");
    *chw = NULL;
    int W, H, T;
    gm_status st = gm_vision_input_size(v, img->width, img->height, &W, &H, &T, err);
    if (!st) st = v->fam->check_size(v->enc, W, H, err); /* a size rule may pick one the encoder cannot take */
    if (st) return st;
    gm_image sq = {0};
    if ((st = gm_image_letterbox_filter(img, W, H, v->fam->resample, &sq, err))) return st;
    float *x = malloc((size_t)3 * W * H * sizeof *x);
    if (!x) st = gm_fail(err, GM_ERR_NOMEM, "gm_vision_preprocess: %d x %d", W, H);
    if (!st) st = gm_image_to_chw(&sq, v->info.mean, v->info.std, x, err);
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
    gm_status st = v->fam->check_size(v->enc, w, h, err);
    if (st) return st;
    return v->fam->encode(v->enc, chw, w, h, out, err);
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
    if (v) *out = v->info;
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
