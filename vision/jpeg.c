/* vision/jpeg.c — JPEG through libjpeg-turbo, from memory. libjpeg's fatal errors call
 * error_exit, which must not return: ours longjmps back to jpeg_run's setjmp. Everything allocated
 * outside libjpeg is held in jpeg_job, so the caller frees it on either path. */
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "core/error.h"
#include "gemma_vision.h"
#include "vision/image_internal.h"

/* Progressive JPEGs can hold thousands of tiny scans, each a pass over the whole image: a CPU bomb
 * in a small file. libjpeg-turbo's own tools cap scans at 500; so do we. */
#define MAX_SCANS 500

typedef struct jpeg_job {
    struct jpeg_error_mgr mgr; /* first: libjpeg hands us a pointer to it */
    struct jpeg_progress_mgr progress;
    jmp_buf jmp;
    char msg[JMSG_LENGTH_MAX + 32];
    uint8_t *cmyk_row; /* one row of CMYK samples, freed by the caller */
} jpeg_job;

static void on_error_exit(j_common_ptr c) {
    jpeg_job *job = (jpeg_job *)c->err;
    c->err->format_message(c, job->msg);
    longjmp(job->jmp, 1);
}

/* Warnings are tolerated (Pillow decodes JPEGs with extraneous bytes or a bad Huffman code in a
 * corner), except the end of data in the middle of the image: libjpeg would fill the rest with
 * grey, Pillow says "image file is truncated", and so do we. Nothing is printed. */
static void on_message(j_common_ptr c, int level) {
    jpeg_job *job = (jpeg_job *)c->err;
    if (level == -1 && c->err->msg_code == JWRN_JPEG_EOF) {
        snprintf(job->msg, sizeof job->msg, "file is truncated (data ends inside the image)");
        longjmp(job->jmp, 1);
    }
}

static void on_output(j_common_ptr c) { (void)c; }

static void on_progress(j_common_ptr c) {
    jpeg_job *job = (jpeg_job *)c->err;
    if (c->is_decompressor && ((j_decompress_ptr)c)->input_scan_number > MAX_SCANS) {
        snprintf(job->msg, sizeof job->msg, "more than %d progressive scans", MAX_SCANS);
        longjmp(job->jmp, 1);
    }
}

/* Pillow reads every CMYK JPEG as Adobe's inverted CMYK ("CMYK;I") and converts with
 * R = (255 - K) - (C * (255 - K)) / 255, its rounding; with the stored (inverted) samples s,
 * C = 255 - s_c and 255 - K = s_k. */
static uint8_t cmyk_channel(int stored_c, int stored_k) {
    int c = 255 - stored_c, nk = stored_k, t = c * nk + 128;
    return (uint8_t)(nk - (((t >> 8) + t) >> 8));
}

static void cmyk_to_rgb(const uint8_t *in, uint8_t *out, int w) {
    for (int x = 0; x < w; x++, in += 4, out += 3)
        for (int c = 0; c < 3; c++) out[c] = cmyk_channel(in[c], in[3]);
}

/* The orientation of the first Exif APP1 segment (saved by jpeg_save_markers). */
static int exif_orientation(j_decompress_ptr c) {
    for (jpeg_saved_marker_ptr m = c->marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && !memcmp(m->data, "Exif\0\0", 6))
            return gm_exif_orientation(m->data, m->data_length);
    return 1;
}

static gm_status read_rows(j_decompress_ptr c, jpeg_job *job, gm_image *out, gm_error *err) {
    int w = out->width;
    bool cmyk = c->out_color_space == JCS_CMYK;
    if (cmyk && !(job->cmyk_row = malloc((size_t)w * 4)))
        return gm_fail(err, GM_ERR_NOMEM, "JPEG: cannot allocate a row");
    while (c->output_scanline < c->output_height) {
        uint8_t *dst = out->pixels + (size_t)c->output_scanline * w * 3;
        JSAMPROW row = cmyk ? job->cmyk_row : dst;
        if (jpeg_read_scanlines(c, &row, 1) != 1) return gm_fail(err, GM_ERR_FORMAT, "JPEG: no scanline read");
        if (cmyk) cmyk_to_rgb(job->cmyk_row, dst, w);
    }
    return GM_OK;
}

static gm_status jpeg_run(j_decompress_ptr c, jpeg_job *job, const uint8_t *data, size_t len,
                          const gm_image_bounds *b, gm_image *out, gm_error *err) {
    if (setjmp(job->jmp)) return gm_fail(err, GM_ERR_FORMAT, "JPEG: %s", job->msg);
    jpeg_create_decompress(c);
    c->progress = &job->progress;
    jpeg_mem_src(c, data, (unsigned long)len);
    jpeg_save_markers(c, JPEG_APP0 + 1, 0xffff);
    jpeg_read_header(c, TRUE);
    gm_status st = gm_image_check_dims(b, c->image_width, c->image_height, "JPEG", err);
    if (st) return st;
    /* libjpeg's whole-image buffers (progressive coefficients) beyond what the pixel limit
     * implies are refused instead of allocated: about 6 bytes a pixel for 3 full-size components */
    int64_t cap = b->max_pixels < (INT64_MAX >> 4) ? b->max_pixels * 8 + (64 << 20) : INT64_MAX;
    c->mem->max_memory_to_use = cap < LONG_MAX ? (long)cap : LONG_MAX;
    bool cmyk = c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK;
    if (!cmyk && c->num_components != 1 && c->num_components != 3)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "JPEG: %d colour components", c->num_components);
    c->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(c);
    if (c->output_components != (cmyk ? 4 : 3))
        return gm_fail(err, GM_ERR_UNSUPPORTED, "JPEG: %d output components", c->output_components);
    if ((st = gm_image_alloc(out, (int)c->output_width, (int)c->output_height, err))) return st;
    if ((st = read_rows(c, job, out, err))) return st;
    /* No jpeg_finish_decompress: every row is here; a file missing only its EOI marker is whole. */
    return gm_image_orient(out, exif_orientation(c), err);
}

gm_status gm_jpeg_decode(const uint8_t *data, size_t len, const gm_image_bounds *b, gm_image *out, gm_error *err) {
    jpeg_job job;
    memset(&job, 0, sizeof job);
    struct jpeg_decompress_struct c;
    memset(&c, 0, sizeof c);
    c.err = jpeg_std_error(&job.mgr);
    job.mgr.error_exit = on_error_exit;
    job.mgr.emit_message = on_message;
    job.mgr.output_message = on_output;
    job.progress.progress_monitor = on_progress;
    gm_status st = jpeg_run(&c, &job, data, len, b, out, err);
    jpeg_destroy_decompress(&c);
    free(job.cmyk_row);
    if (st) gm_image_free(out);
    return st;
}
