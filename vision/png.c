/* vision/png.c — PNG through libpng's classic API, from memory. libpng reports errors by calling
 * our error function, which must not return: it longjmps back to png_run's setjmp. Everything
 * allocated is held in png_job (outside png_run's frame), so the caller frees it on either path. */
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gemma_vision.h"
#include "vision/image_internal.h"

typedef struct png_job {
    const uint8_t *data;
    size_t len, pos;
    char msg[200];    /* libpng's last error, for our message */
    png_bytep *rows;  /* row pointers into the output, freed by the caller */
} png_job;

static void on_error(png_structp png, png_const_charp msg) {
    png_job *job = png_get_error_ptr(png);
    snprintf(job->msg, sizeof job->msg, "%s", msg);
    png_longjmp(png, 1);
}

/* Warnings (a bad ancillary chunk's CRC, an unknown sRGB profile, ...) do not stop a decode, and
 * the library prints nothing. */
static void on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

static void read_bytes(png_structp png, png_bytep dst, size_t n) {
    png_job *job = png_get_io_ptr(png);
    if (n > job->len - job->pos) png_error(png, "file is truncated");
    memcpy(dst, job->data + job->pos, n);
    job->pos += n;
}

/* Every input layout to 8-bit RGB: palettes expanded, gray replicated, 16-bit to its high byte,
 * alpha (and tRNS transparency, which the palette expansion turns into alpha) dropped. */
static void set_rgb8_transforms(png_structp png, png_infop info) {
    int type = png_get_color_type(png, info);
    if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (type == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_bit_depth(png, info) == 16) png_set_strip_16(png);
    if (type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
}

static gm_status png_run(png_structp png, png_infop info, png_job *job, const gm_image_bounds *b, gm_image *out,
                         gm_error *err) {
    if (setjmp(png_jmpbuf(png))) return gm_fail(err, GM_ERR_FORMAT, "PNG: %s", job->msg);
    png_set_read_fn(png, job, read_bytes);
    /* ancillary chunks (text, ICC profiles) are held in memory whole: bound them */
    png_set_chunk_malloc_max(png, 8u << 20);
    png_read_info(png, info);
    gm_status st = gm_image_check_dims(b, png_get_image_width(png, info), png_get_image_height(png, info), "PNG", err);
    if (st) return st;
    set_rgb8_transforms(png, info);
    int w = (int)png_get_image_width(png, info), h = (int)png_get_image_height(png, info);
    if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
        png_get_rowbytes(png, info) != (size_t)w * 3)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "PNG: colour type %d, depth %d does not convert to RGB8",
                       png_get_color_type(png, info), png_get_bit_depth(png, info));
    if ((st = gm_image_alloc(out, w, h, err))) return st;
    job->rows = malloc((size_t)h * sizeof *job->rows);
    if (!job->rows) return gm_fail(err, GM_ERR_NOMEM, "PNG: cannot allocate %d row pointers", h);
    for (int y = 0; y < h; y++) job->rows[y] = out->pixels + (size_t)y * w * 3;
    png_read_image(png, job->rows);
    /* No png_read_end: the pixels are complete here, and a file cut after its last IDAT (no IEND)
     * is still a whole image, as Pillow and stb_image read it. */
    return GM_OK;
}

/* IHDR must be the first chunk (signature, length, "IHDR", width, height): its dimensions are
 * checked here, before libpng reads on to the image data (a header alone is refused as too big,
 * not as truncated). */
static gm_status check_ihdr(const uint8_t *d, size_t len, const gm_image_bounds *b, gm_error *err) {
    if (len < 24 || memcmp(d + 12, "IHDR", 4)) return GM_OK; /* libpng says what is wrong */
    int64_t w = (int64_t)d[16] << 24 | d[17] << 16 | d[18] << 8 | d[19];
    int64_t h = (int64_t)d[20] << 24 | d[21] << 16 | d[22] << 8 | d[23];
    return gm_image_check_dims(b, w, h, "PNG", err);
}

gm_status gm_png_decode(const uint8_t *data, size_t len, const gm_image_bounds *b, gm_image *out, gm_error *err) {
    gm_status st = check_ihdr(data, len, b, err);
    if (st) return st;
    png_job job = {.data = data, .len = len};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &job, on_error, on_warning);
    if (!png) return gm_fail(err, GM_ERR_NOMEM, "PNG: cannot create a decoder");
    png_infop info = png_create_info_struct(png);
    st = info ? png_run(png, info, &job, b, out, err) : gm_fail(err, GM_ERR_NOMEM, "PNG: no memory");
    png_destroy_read_struct(&png, info ? &info : NULL, NULL);
    free(job.rows);
    if (st) gm_image_free(out);
    return st;
}
