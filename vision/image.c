/* vision/image.c — gm_image_decode: the format from the magic bytes, the limits, and the
 * allocation the decoders share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gemma_vision.h"
#include "core/siphash.h"
#include "vision/image_internal.h"

gm_image_bounds gm_image_bounds_of(const gm_image_limits *lim) {
    gm_image_bounds b = {GM_IMAGE_MAX_SIDE, GM_IMAGE_MAX_SIDE, GM_IMAGE_MAX_PIXELS};
    if (lim && lim->max_width > 0) b.max_width = lim->max_width;
    if (lim && lim->max_height > 0) b.max_height = lim->max_height;
    if (lim && lim->max_pixels > 0) b.max_pixels = lim->max_pixels;
    return b;
}

gm_status gm_image_check_dims(const gm_image_bounds *b, int64_t w, int64_t h, const char *what, gm_error *err) {
    if (w <= 0 || h <= 0)
        return gm_fail(err, GM_ERR_FORMAT, "%s: image has no pixels (%lld x %lld)", what, (long long)w, (long long)h);
    /* w and h fit in 32 bits for every format (their headers say so), so w * h cannot overflow */
    if (w > b->max_width || h > b->max_height || w * h > b->max_pixels)
        return gm_fail(err, GM_ERR_UNSUPPORTED,
                       "%s: image of %lld x %lld pixels is over the limit (%lld x %lld, %lld pixels)", what,
                       (long long)w, (long long)h, (long long)b->max_width, (long long)b->max_height,
                       (long long)b->max_pixels);
    return GM_OK;
}

gm_status gm_image_alloc(gm_image *img, int w, int h, gm_error *err) {
    size_t n = (size_t)w * (size_t)h * 3;
    img->pixels = malloc(n);
    if (!img->pixels) return gm_fail(err, GM_ERR_NOMEM, "image: cannot allocate %d x %d pixels", w, h);
    img->width = w;
    img->height = h;
    return GM_OK;
}

void gm_image_free(gm_image *img) {
    if (!img) return;
    free(img->pixels);
    memset(img, 0, sizeof *img);
}

static bool starts(const uint8_t *d, size_t len, size_t at, const char *magic, size_t n) {
    return len >= at + n && !memcmp(d + at, magic, n);
}

/* A name for a format we do not decode, so the caller's error says what was sent. NULL: unknown. */
static const char *other_format(const uint8_t *d, size_t len) {
    static const struct { size_t at; const char *magic; size_t n; const char *name; } known[] = {
        {0, "GIF87a", 6, "GIF"}, {0, "GIF89a", 6, "GIF"}, {0, "BM", 2, "BMP"},
        {0, "II*\0", 4, "TIFF"}, {0, "MM\0*", 4, "TIFF"}, {4, "ftypavif", 8, "AVIF"},
        {4, "ftypheic", 8, "HEIF"}, {4, "ftypheix", 8, "HEIF"}, {4, "ftypmif1", 8, "HEIF"},
        {4, "ftyp", 4, "an ISO media file (MP4 / MOV)"}, {0, "\0\0\1\0", 4, "ICO"},
        {0, "\xff\x0a", 2, "JPEG XL"}, {0, "\0\0\0\x0cJXL ", 8, "JPEG XL"},
        {0, "\0\0\0\x0cjP  ", 8, "JPEG 2000"}, {0, "8BPS", 4, "Photoshop (PSD)"}, {0, "qoif", 4, "QOI"},
        {0, "%PDF", 4, "PDF"}, {0, "<svg", 4, "SVG"}, {0, "<?xml", 5, "XML (SVG?)"},
        {0, "<!DOCTYPE", 9, "HTML"}, {0, "<html", 5, "HTML"}, {0, "\x1f\x8b", 2, "gzip"},
        {0, "PK\3\4", 4, "ZIP"}, {0, "RIFF", 4, "RIFF but not WebP (WAV / AVI?)"},
        {0, "ID3", 3, "MP3"}, {0, "fLaC", 4, "FLAC"}, {0, "OggS", 4, "Ogg"}, {0, "P6", 2, "PPM"},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (starts(d, len, known[i].at, known[i].magic, known[i].n)) return known[i].name;
    return NULL;
}

static gm_status unknown_format(const uint8_t *d, size_t len, gm_error *err) {
    const char *name = other_format(d, len);
    if (name) return gm_fail(err, GM_ERR_FORMAT, "image: %s is not a supported format (PNG, JPEG, WebP)", name);
    char hex[3 * 8 + 1] = "";
    size_t used = 0;
    for (size_t i = 0; i < len && i < 8; i++) used += (size_t)snprintf(hex + used, sizeof hex - used, "%s%02x", i ? " " : "", d[i]);
    return gm_fail(err, GM_ERR_FORMAT, "image: unknown format (first bytes %s); PNG, JPEG and WebP are supported", hex);
}

gm_status gm_image_decode(const void *bytes, size_t len, const gm_image_limits *lim, gm_image *out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "gm_image_decode: out is NULL");
    memset(out, 0, sizeof *out);
    if (!bytes && len) return gm_fail(err, GM_ERR_ARG, "gm_image_decode: bytes is NULL");
    if (!len) return gm_fail(err, GM_ERR_FORMAT, "image: empty input (0 bytes)");
    const uint8_t *d = bytes;
    gm_image_bounds b = gm_image_bounds_of(lim);
    if (starts(d, len, 0, "\x89PNG\r\n\x1a\n", 8)) return gm_png_decode(d, len, &b, out, err);
    if (starts(d, len, 0, "\xff\xd8\xff", 3)) return gm_jpeg_decode(d, len, &b, out, err);
    if (starts(d, len, 0, "RIFF", 4) && starts(d, len, 8, "WEBP", 4)) return gm_webp_decode(d, len, &b, out, err);
    return unknown_format(d, len, err);
}

/* Pixels go in as little-endian 64-bit words (the tail zero-padded; the size words first fix the length). */
static uint64_t digest_half(const gm_image *img, const uint64_t key[2]) {
    gm_sip s = gm_sip_begin(key);
    gm_sip_word(&s, (uint64_t)(uint32_t)img->width << 32 | (uint32_t)img->height);
    const size_t n = (size_t)img->width * (size_t)img->height * 3;
    const uint8_t *p = img->pixels;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = 0;
        for (int b = 7; b >= 0; b--) w = w << 8 | p[i + (size_t)b];
        gm_sip_word(&s, w);
    }
    uint64_t w = 0;
    for (size_t b = n; b > i; b--) w = w << 8 | p[b - 1];
    gm_sip_word(&s, w);
    return gm_sip_end(&s);
}

void gm_image_digest(const gm_image *img, const uint64_t key[2], uint64_t out[2]) {
    const uint64_t swapped[2] = {key[1], key[0] ^ 0x9E3779B97F4A7C15ull};
    out[0] = img && img->pixels ? digest_half(img, key) : 0;
    out[1] = img && img->pixels ? digest_half(img, swapped) : 0;
}
