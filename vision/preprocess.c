/* vision/preprocess.c — what the vision encoders' references do to pixels before the first layer:
 * Pillow's bilinear and bicubic resizes, llama.cpp's letterbox, and the float CHW tensor. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gemma_vision.h"
#include "vision/image_internal.h"
#include "vision/vision_internal.h"

/* Pillow's fixed point: 32-bit sums of 8-bit samples times weights, with two bits of headroom. */
#define PRECISION_BITS (32 - 8 - 2)
#define MAX_SIDE 65536

/* One axis of a resize: output sample i sums n[i] input samples from first[i] with weights
 * w[i * ksize ..]. */
typedef struct axis_weights {
    int ksize;
    int *first, *n;
    int32_t *w;
} axis_weights;

static void axis_free(axis_weights *a) {
    free(a->first);
    free(a->n);
    free(a->w);
}

static double triangle(double x) {
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Pillow's bicubic_filter: Keys' cubic convolution with a = -0.5 (PyTorch and OpenCV use -0.75). */
static double cubic(double x) {
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

static double filter_support(gm_resample f) { return f == GM_RESAMPLE_BICUBIC ? 2.0 : 1.0; }

/* Pillow's precompute_coeffs: the filter (support 1 bilinear, 2 bicubic) is widened by the scale when
 * downscaling, so every input pixel contributes (antialiasing); weights are normalised in double, then
 * rounded half away from zero to fixed point. */
static void axis_coeffs(axis_weights *a, int in, int out, gm_resample f, double *tmp) {
    double scale = (double)in / out, fscale = scale < 1.0 ? 1.0 : scale, support = filter_support(f) * fscale,
           ss = 1.0 / fscale;
    for (int i = 0; i < out; i++) {
        double center = (i + 0.5) * scale, sum = 0.0;
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in) hi = in;
        int n = hi - lo;
        for (int k = 0; k < n; k++) { /* Pillow's order */
            const double x = (k + lo - center + 0.5) * ss;
            sum += tmp[k] = f == GM_RESAMPLE_BICUBIC ? cubic(x) : triangle(x);
        }
        int32_t *w = a->w + (size_t)i * a->ksize;
        for (int k = 0; k < a->ksize; k++) {
            double v = k < n && sum != 0.0 ? tmp[k] / sum : 0.0;
            w[k] = (int32_t)(v * (1 << PRECISION_BITS) + (v < 0 ? -0.5 : 0.5));
        }
        a->first[i] = lo;
        a->n[i] = n;
    }
}

static gm_status axis_new(axis_weights *a, int in, int out, gm_resample f, gm_error *err) {
    memset(a, 0, sizeof *a);
    double fscale = (double)in / out < 1.0 ? 1.0 : (double)in / out;
    a->ksize = (int)ceil(filter_support(f) * fscale) * 2 + 1;
    a->first = malloc((size_t)out * sizeof *a->first);
    a->n = malloc((size_t)out * sizeof *a->n);
    a->w = malloc((size_t)out * a->ksize * sizeof *a->w);
    double *tmp = malloc((size_t)a->ksize * sizeof *tmp);
    if (!a->first || !a->n || !a->w || !tmp) {
        free(tmp);
        axis_free(a);
        return gm_fail(err, GM_ERR_NOMEM, "resize: cannot allocate weights for %d -> %d", in, out);
    }
    axis_coeffs(a, in, out, f, tmp);
    free(tmp);
    return GM_OK;
}

/* A sum back to 8 bits: Pillow's clip8 (bicubic's negative lobes can take a sum below 0 or above 255). */
static uint8_t clip8(int32_t s) {
    if (s < 0) return 0;
    s >>= PRECISION_BITS;
    return s > 255 ? 255 : (uint8_t)s;
}

/* src (sw x h) -> dst (a's output width x h), each row independently. */
static void pass_horizontal(const uint8_t *src, int sw, int h, uint8_t *dst, int dw, const axis_weights *a) {
    for (int y = 0; y < h; y++) {
        const uint8_t *row = src + (size_t)y * sw * 3;
        for (int x = 0; x < dw; x++) {
            const int32_t *k = a->w + (size_t)x * a->ksize;
            const uint8_t *p = row + (size_t)a->first[x] * 3;
            int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
            for (int i = 0; i < a->n[x]; i++, p += 3) s0 += p[0] * k[i], s1 += p[1] * k[i], s2 += p[2] * k[i];
            uint8_t *o = dst + ((size_t)y * dw + x) * 3;
            o[0] = clip8(s0), o[1] = clip8(s1), o[2] = clip8(s2);
        }
    }
}

/* src (w x sh) -> dst (w x a's output height), each column independently. */
static void pass_vertical(const uint8_t *src, int w, uint8_t *dst, int dh, const axis_weights *a) {
    size_t stride = (size_t)w * 3;
    for (int y = 0; y < dh; y++) {
        const int32_t *k = a->w + (size_t)y * a->ksize;
        for (size_t i = 0; i < stride; i++) {
            const uint8_t *p = src + (size_t)a->first[y] * stride + i;
            int32_t s = 1 << (PRECISION_BITS - 1);
            for (int j = 0; j < a->n[y]; j++, p += stride) s += *p * k[j];
            dst[(size_t)y * stride + i] = clip8(s);
        }
    }
}

static gm_status check_image(const gm_image *img, const char *fn, gm_error *err) {
    if (!img || !img->pixels || img->width <= 0 || img->height <= 0)
        return gm_fail(err, GM_ERR_ARG, "%s: the image is empty", fn);
    return GM_OK;
}

static gm_status check_size(int w, int h, const char *fn, gm_error *err) {
    if (w <= 0 || h <= 0 || w > MAX_SIDE || h > MAX_SIDE)
        return gm_fail(err, GM_ERR_ARG, "%s: target %d x %d is out of range (1..%d)", fn, w, h, MAX_SIDE);
    return GM_OK;
}

static gm_status copy_image(const gm_image *src, gm_image *out, gm_error *err) {
    gm_status st = gm_image_alloc(out, src->width, src->height, err);
    if (!st) memcpy(out->pixels, src->pixels, (size_t)src->width * src->height * 3);
    return st;
}

/* Which pass runs first. Each pass rounds to 8 bits, so the order changes some bytes by one. */
typedef enum pass_order { ORDER_PILLOW, ORDER_HORIZONTAL_FIRST } pass_order;

/* Pillow >= 13 (ImagingResampleInner) runs the vertical pass first when the height shrinks by more
 * than twice what the width does; Pillow before it, and llama.cpp's resize_pillow, always run the
 * horizontal pass first. */
static bool vertical_first(pass_order order, int sw, int sh, int w, int h) {
    return order == ORDER_PILLOW && sh - h > 0 && sh - h > (sw - w) * 2;
}

/* The two passes, each skipped when its side keeps its size, through an intermediate image. */
static gm_status resample(const gm_image *src, int w, int h, gm_resample f, pass_order order, gm_image *out,
                          gm_error *err) {
    axis_weights ax = {0}, ay = {0};
    uint8_t *mid = NULL;
    gm_status st = GM_OK;
    bool hpass = w != src->width, vpass = h != src->height, vfirst = vertical_first(order, src->width, src->height, w, h);
    if (hpass && (st = axis_new(&ax, src->width, w, f, err))) goto done;
    if (vpass && (st = axis_new(&ay, src->height, h, f, err))) goto done;
    if ((st = gm_image_alloc(out, w, h, err))) goto done;
    int mw = vfirst ? src->width : w, mh = vfirst ? h : src->height; /* the intermediate's size */
    if (hpass && vpass && !(mid = malloc((size_t)mw * mh * 3))) {
        st = gm_fail(err, GM_ERR_NOMEM, "resize: cannot allocate %d x %d", mw, mh);
        goto done;
    }
    uint8_t *first = hpass && vpass ? mid : out->pixels;
    if (vfirst) {
        if (vpass) pass_vertical(src->pixels, src->width, first, h, &ay);
        if (hpass) pass_horizontal(vpass ? mid : src->pixels, src->width, h, out->pixels, w, &ax);
    } else {
        if (hpass) pass_horizontal(src->pixels, src->width, src->height, first, w, &ax);
        if (vpass) pass_vertical(hpass ? mid : src->pixels, w, out->pixels, h, &ay);
    }
done:
    free(mid);
    axis_free(&ax);
    axis_free(&ay);
    if (st) gm_image_free(out);
    return st;
}

static gm_status resize(const gm_image *src, int width, int height, gm_resample f, pass_order order, gm_image *out,
                        gm_error *err) {
    if (width == src->width && height == src->height) return copy_image(src, out, err);
    return resample(src, width, height, f, order, out, err);
}

static gm_status resize_public(const gm_image *src, int width, int height, gm_resample f, gm_image *out, const char *fn,
                               gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "%s: out is NULL", fn);
    memset(out, 0, sizeof *out);
    gm_status st = check_image(src, fn, err);
    if (!st) st = check_size(width, height, fn, err);
    if (st) return st;
    return resize(src, width, height, f, ORDER_PILLOW, out, err);
}

gm_status gm_image_resize_bilinear(const gm_image *src, int width, int height, gm_image *out, gm_error *err) {
    return resize_public(src, width, height, GM_RESAMPLE_BILINEAR, out, "gm_image_resize_bilinear", err);
}

gm_status gm_image_resize_bicubic(const gm_image *src, int width, int height, gm_image *out, gm_error *err) {
    return resize_public(src, width, height, GM_RESAMPLE_BICUBIC, out, "gm_image_resize_bicubic", err);
}

/* llama.cpp's PAD_CEIL size, in its float arithmetic: min(W / w, H / h), each side ceil'd and
 * capped at the canvas. */
static void fit_size(int sw, int sh, int W, int H, int *w, int *h) {
    float scale = fminf((float)W / (float)sw, (float)H / (float)sh);
    int fw = (int)ceilf((float)sw * scale), fh = (int)ceilf((float)sh * scale);
    *w = fw < W ? fw : W;
    *h = fh < H ? fh : H;
}

gm_status gm_image_letterbox(const gm_image *src, int width, int height, gm_image *out, gm_error *err) {
    return gm_image_letterbox_filter(src, width, height, GM_RESAMPLE_BILINEAR, out, err);
}

gm_status gm_image_letterbox_filter(const gm_image *src, int width, int height, gm_resample f, gm_image *out,
                                    gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "gm_image_letterbox: out is NULL");
    memset(out, 0, sizeof *out);
    gm_status st = check_image(src, "gm_image_letterbox", err);
    if (!st) st = check_size(width, height, "gm_image_letterbox", err);
    if (st) return st;
    if (width == src->width && height == src->height) return copy_image(src, out, err);
    int w, h;
    fit_size(src->width, src->height, width, height, &w, &h);
    gm_image fit = {0};
    if ((st = resize(src, w, h, f, ORDER_HORIZONTAL_FIRST, &fit, err))) return st;
    if ((st = gm_image_alloc(out, width, height, err))) {
        gm_image_free(&fit);
        return st;
    }
    memset(out->pixels, 0, (size_t)width * height * 3);
    int x0 = (width - w) / 2, y0 = (height - h) / 2;
    for (int y = 0; y < h; y++)
        memcpy(out->pixels + ((size_t)(y0 + y) * width + x0) * 3, fit.pixels + (size_t)y * w * 3, (size_t)w * 3);
    gm_image_free(&fit);
    return GM_OK;
}

gm_status gm_image_to_chw(const gm_image *img, const float mean[3], const float std[3], float *out, gm_error *err) {
    gm_status st = check_image(img, "gm_image_to_chw", err);
    if (st) return st;
    if (!mean || !std || !out) return gm_fail(err, GM_ERR_ARG, "gm_image_to_chw: mean, std and out are required");
    for (int c = 0; c < 3; c++)
        if (std[c] == 0.0f) return gm_fail(err, GM_ERR_ARG, "gm_image_to_chw: std[%d] is 0", c);
    size_t plane = (size_t)img->width * img->height;
    for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < plane; i++)
            out[c * plane + i] = ((float)img->pixels[i * 3 + c] / 255.0f - mean[c]) / std[c];
    return GM_OK;
}
