/* vision/webp.c — WebP (lossy, lossless, with or without alpha) through libwebp, from memory.
 * libwebp returns errors as values; no longjmp here. */
#include <webp/decode.h>

#include "core/error.h"
#include "gemma_vision.h"
#include "vision/image_internal.h"

static const char *status_name(VP8StatusCode s) {
    switch (s) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "corrupt bitstream";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "file is truncated";
    default: return "error";
    }
}

gm_status gm_webp_decode(const uint8_t *data, size_t len, const gm_image_bounds *b, gm_image *out, gm_error *err) {
    WebPBitstreamFeatures f;
    VP8StatusCode s = WebPGetFeatures(data, len, &f);
    if (s != VP8_STATUS_OK) return gm_fail(err, GM_ERR_FORMAT, "WebP: %s", status_name(s));
    if (f.has_animation) return gm_fail(err, GM_ERR_UNSUPPORTED, "WebP: animated images are not supported");
    gm_status st = gm_image_check_dims(b, f.width, f.height, "WebP", err);
    if (st) return st;
    if ((st = gm_image_alloc(out, f.width, f.height, err))) return st;
    /* MODE_RGB keeps the stored colour of transparent pixels: alpha dropped, as Pillow's
     * convert("RGB") does */
    size_t size = (size_t)f.width * f.height * 3;
    if (!WebPDecodeRGBInto(data, len, out->pixels, size, f.width * 3)) {
        gm_image_free(out);
        return gm_fail(err, GM_ERR_FORMAT, "WebP: corrupt or truncated image data");
    }
    return GM_OK;
}
