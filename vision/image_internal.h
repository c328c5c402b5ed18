/* vision/image_internal.h — what the image decoders share: the limits resolved to numbers, the
 * allocation every decoder makes once the header passed them, and EXIF orientation. */
#ifndef GM_VISION_IMAGE_INTERNAL_H
#define GM_VISION_IMAGE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "gemma.h"
#include "gemma_vision.h"

/* Limits with every default filled in. */
typedef struct gm_image_bounds {
    int64_t max_width, max_height, max_pixels;
} gm_image_bounds;

gm_image_bounds gm_image_bounds_of(const gm_image_limits *lim);

/* A header's dimensions against the bounds; `what` names the format in the message. Called
 * before any pixel memory exists, so a decompression bomb costs nothing. */
gm_status gm_image_check_dims(const gm_image_bounds *b, int64_t w, int64_t h, const char *what, gm_error *err);

/* img->pixels = malloc(w * h * 3), img->width / height set; w, h already checked. */
gm_status gm_image_alloc(gm_image *img, int w, int h, gm_error *err);

/* The decoders. Each fills *out (zeroed on entry) or fails with *out freed. */
gm_status gm_png_decode(const uint8_t *data, size_t len, const gm_image_bounds *b, gm_image *out, gm_error *err);
gm_status gm_jpeg_decode(const uint8_t *data, size_t len, const gm_image_bounds *b, gm_image *out, gm_error *err);
gm_status gm_webp_decode(const uint8_t *data, size_t len, const gm_image_bounds *b, gm_image *out, gm_error *err);

/* The orientation tag (1..8) of an APP1 segment's payload ("Exif\0\0" + TIFF); 1 when the
 * segment is not Exif, has no orientation tag, or is malformed (a bad tag is ignored, as
 * viewers do, rather than failing the image). Every read is bounds-checked against len. */
int gm_exif_orientation(const uint8_t *app1, size_t len);

/* Applies EXIF orientation o (1..8) to *img in place (new pixels; 5..8 swap width and height),
 * as Pillow's ImageOps.exif_transpose. o outside 2..8 does nothing. */
gm_status gm_image_orient(gm_image *img, int o, gm_error *err);

#endif
