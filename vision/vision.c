/* vision/vision.c — an image file's bytes to the rows a sequence takes (gm_vision_encode_bytes): decode,
 * name, preprocess, encode. What the CLI and the server call for each image; only the public calls of the
 * decoders and the encoder. */
#include <stdlib.h>

#include "core/error.h"
#include "gemma.h"

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
