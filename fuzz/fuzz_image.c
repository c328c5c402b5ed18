/* fuzz/fuzz_image.c — libFuzzer harness for gm_image_decode (PNG, JPEG, WebP, EXIF) on arbitrary
 * bytes under small limits (so a header's claim cannot exhaust the fuzzer's memory; the limits are
 * what bounds memory for real callers too), then, on success, the preprocessing on the result:
 * a resize, a letterbox and the CHW conversion. A failure must leave no pixels and a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gemma.h"
#include "gemma_vision.h"

static volatile uint64_t g_sink;

static void preprocess(const gm_image *img, uint8_t knob) {
    gm_image r = {0}, l = {0};
    int w = 1 + knob % 17, h = 1 + (knob >> 4) % 13;
    if (gm_image_resize_bilinear(img, w, h, &r, NULL) != GM_OK) abort(); /* valid arguments: must succeed */
    if (gm_image_letterbox(img, 16, 16, &l, NULL) != GM_OK) abort();
    const float mean[3] = {0.5f, 0.5f, 0.5f}, sd[3] = {0.5f, 0.5f, 0.5f};
    float *chw = malloc((size_t)16 * 16 * 3 * sizeof *chw);
    if (chw && gm_image_to_chw(&l, mean, sd, chw, NULL) == GM_OK) g_sink += (uint64_t)(chw[0] < 0);
    g_sink += r.pixels[0] + r.pixels[(size_t)w * h * 3 - 1];
    free(chw);
    gm_image_free(&r);
    gm_image_free(&l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const gm_image_limits lim = {1024, 1024, 1 << 20};
    gm_image img;
    gm_error err = {0};
    if (gm_image_decode(data, size, &lim, &img, &err) != GM_OK) {
        if (!err.msg[0] || img.pixels || img.width || img.height) abort();
        return 0;
    }
    if (!img.pixels || img.width <= 0 || img.height <= 0 || (int64_t)img.width * img.height > lim.max_pixels) abort();
    g_sink += img.pixels[0] + img.pixels[(size_t)img.width * img.height * 3 - 1];
    if ((int64_t)img.width * img.height <= 64 * 64) preprocess(&img, size ? data[size - 1] : 0);
    gm_image_free(&img);
    return 0;
}
