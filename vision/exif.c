/* vision/exif.c — the one EXIF tag we need (orientation, 0x0112 in IFD0) and applying it. The
 * segment comes from an untrusted file: every offset is checked against the segment's length
 * before it is read. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gemma_vision.h"
#include "vision/image_internal.h"

static uint32_t rd16(const uint8_t *p, bool le) { return le ? p[0] | p[1] << 8 : p[0] << 8 | p[1]; }
static uint32_t rd32(const uint8_t *p, bool le) {
    return le ? rd16(p, true) | rd16(p + 2, true) << 16 : rd16(p, false) << 16 | rd16(p + 2, false);
}

#define TAG_ORIENTATION 0x0112
#define TYPE_SHORT 3

int gm_exif_orientation(const uint8_t *app1, size_t len) {
    if (len < 6 + 8 || memcmp(app1, "Exif\0\0", 6)) return 1;
    const uint8_t *t = app1 + 6; /* the TIFF header; offsets below are from here */
    size_t n = len - 6;
    bool le;
    if (t[0] == 'I' && t[1] == 'I') le = true;
    else if (t[0] == 'M' && t[1] == 'M') le = false;
    else return 1;
    if (rd16(t + 2, le) != 42) return 1;
    size_t ifd = rd32(t + 4, le);
    if (ifd > n || n - ifd < 2) return 1;
    size_t count = rd16(t + ifd, le);
    for (size_t i = 0; i < count; i++) {
        size_t e = ifd + 2 + 12 * i;
        if (e > n || n - e < 12) return 1;
        if (rd16(t + e, le) != TAG_ORIENTATION) continue;
        if (rd16(t + e + 2, le) != TYPE_SHORT || rd32(t + e + 4, le) < 1) return 1;
        uint32_t o = rd16(t + e + 8, le); /* a SHORT value sits left-aligned in the 4-byte field */
        return o >= 1 && o <= 8 ? (int)o : 1;
    }
    return 1;
}

/* Where output pixel (x, y) comes from in the W x H input, for orientation o: the inverse of
 * Pillow's exif_transpose method for o (2 FLIP_LEFT_RIGHT, 3 ROTATE_180, 4 FLIP_TOP_BOTTOM,
 * 5 TRANSPOSE, 6 ROTATE_270, 7 TRANSVERSE, 8 ROTATE_90; Pillow's rotations are counter-clockwise). */
static void source_of(int o, int x, int y, int W, int H, int *sx, int *sy) {
    switch (o) {
    case 2: *sx = W - 1 - x, *sy = y; break;
    case 3: *sx = W - 1 - x, *sy = H - 1 - y; break;
    case 4: *sx = x, *sy = H - 1 - y; break;
    case 5: *sx = y, *sy = x; break;
    case 6: *sx = y, *sy = H - 1 - x; break;
    case 7: *sx = W - 1 - y, *sy = H - 1 - x; break;
    default: *sx = W - 1 - y, *sy = x; break; /* 8 */
    }
}

gm_status gm_image_orient(gm_image *img, int o, gm_error *err) {
    if (o < 2 || o > 8) return GM_OK;
    int W = img->width, H = img->height;
    int ow = o >= 5 ? H : W, oh = o >= 5 ? W : H;
    gm_image r = {0};
    gm_status st = gm_image_alloc(&r, ow, oh, err);
    if (st) return st;
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++) {
            int sx, sy;
            source_of(o, x, y, W, H, &sx, &sy);
            memcpy(r.pixels + ((size_t)y * ow + x) * 3, img->pixels + ((size_t)sy * W + sx) * 3, 3);
        }
    gm_image_free(img);
    *img = r;
    return GM_OK;
}
