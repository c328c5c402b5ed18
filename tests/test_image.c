/* tests/test_image.c — vision/: decoding (PNG, JPEG, WebP) and preprocessing (resize, letterbox,
 * CHW). Pixels are checked against Pillow (fixtures from tests/gen/gen_image_fixtures.py: exactly
 * for lossless formats and the resize, within a small tolerance for lossy ones) and against files
 * this test writes with libpng / libjpeg itself (16-bit, gray, interlaced, progressive); bad files
 * (empty, garbage, other formats, every truncation, huge headers, limits) must fail with a message. */
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "gemma.h"
#include "gemma_vision.h"
#include "support/test.h"
#include "vision/image_internal.h"

/* ---- helpers */

typedef struct blob {
    uint8_t *p;
    size_t n;
} blob;

static blob load(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "images/%s", name);
    blob b = {0};
    b.p = test_read_file(test_data_path(rel), &b.n);
    if (!b.p) fprintf(stderr, "  cannot read %s\n", rel);
    return b;
}

/* The largest difference between an image and expected RGB bytes; -1 when the sizes differ. */
static int max_diff(const gm_image *img, const uint8_t *want, size_t n) {
    if (!img->pixels || (size_t)img->width * img->height * 3 != n) return -1;
    int m = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)img->pixels[i] - (int)want[i]);
        if (d > m) m = d;
    }
    return m;
}

/* Decodes fixture `name` and compares it with `expect` (w x h) within tol. */
static void check_fixture(const char *name, const char *expect, int w, int h, int tol) {
    blob in = load(name), want = load(expect);
    gm_image img;
    gm_error err = {0};
    CHECK_OK(gm_image_decode(in.p, in.n, NULL, &img, &err), &err);
    CHECK_EQ_INT(img.width, w);
    CHECK_EQ_INT(img.height, h);
    int d = max_diff(&img, want.p, want.n);
    CHECK_MSG(d >= 0 && d <= tol, "%s: max difference %d (tolerance %d)", name, d, tol);
    gm_image_free(&img);
    free(in.p);
    free(want.p);
}

/* A decode that must fail with `code` and a message containing `part`. */
static void check_fails(const void *p, size_t n, const gm_image_limits *lim, gm_status code, const char *part) {
    gm_image img;
    gm_error err = {0};
    gm_status st = gm_image_decode(p, n, lim, &img, &err);
    CHECK_MSG(st == code, "status %d, want %d: %s", (int)st, (int)code, err.msg);
    CHECK_MSG(strstr(err.msg, part) != NULL, "message '%s' lacks '%s'", err.msg, part);
    CHECK(img.pixels == NULL && img.width == 0);
}

/* ---- writing test images with the libraries */

typedef struct png_out {
    uint8_t *p;
    size_t n, cap;
} png_out;

static void png_put(png_structp png, png_bytep data, size_t n) {
    png_out *o = png_get_io_ptr(png);
    if (o->n + n > o->cap) {
        o->cap = (o->n + n) * 2;
        o->p = realloc(o->p, o->cap);
    }
    memcpy(o->p + o->n, data, n);
    o->n += n;
}
static void png_flush_nop(png_structp png) { (void)png; }

/* A PNG of w x h with the given colour type / depth / interlace from raw rows (packed as libpng
 * expects them: 16-bit big-endian); rows == NULL writes the header only. */
static blob write_png(int w, int h, int type, int depth, int interlace, const uint8_t *raw, size_t row_bytes) {
    png_out o = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        free(o.p);
        return (blob){0};
    }
    png_set_write_fn(png, &o, png_put, png_flush_nop);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, type, interlace, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    if (raw) {
        png_set_interlace_handling(png);
        png_bytep *rows = malloc((size_t)h * sizeof *rows);
        for (int y = 0; y < h; y++) rows[y] = (png_bytep)raw + (size_t)y * row_bytes;
        png_write_image(png, rows);
        png_write_end(png, NULL);
        free(rows);
    }
    png_destroy_write_struct(&png, &info);
    return (blob){o.p, o.n};
}

/* A JPEG of an RGB image (progressive or baseline) at quality 100. */
static blob write_jpeg(const uint8_t *rgb, int w, int h, bool progressive) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&c, &buf, &n);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    for (int i = 0; i < 3; i++) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1; /* 4:4:4 */
    jpeg_set_quality(&c, 100, TRUE);
    if (progressive) jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)rgb + (size_t)c.next_scanline * w * 3;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return (blob){buf, n};
}

/* ---- decoding: Pillow's fixtures */

TEST(png_alpha_dropped) { check_fixture("rgba.png", "rgba.rgb", 7, 5, 0); }
TEST(png_palette) { check_fixture("palette.png", "palette.rgb", 7, 5, 0); }
TEST(jpeg_gray) { check_fixture("gray.jpg", "gray.rgb", 16, 12, 1); }
TEST(jpeg_cmyk) { check_fixture("cmyk.jpg", "cmyk.rgb", 8, 8, 1); }
TEST(webp_lossless_alpha) { check_fixture("lossless.webp", "lossless.rgb", 7, 5, 0); }
TEST(webp_lossy) { check_fixture("lossy.webp", "lossy.rgb", 16, 12, 2); }

/* The fixture's orientation tag rewritten to 1..8: each decode equals Pillow's exif_transpose. */
TEST(jpeg_exif_orientation) {
    blob in = load("exif6.jpg"), want = load("exif.rgb");
    if (!in.p || !want.p) return;
    /* Pillow writes big-endian ("MM") EXIF: tag 0x0112, SHORT, count 1, value 6 */
    static const uint8_t tag[] = {0x01, 0x12, 0x00, 0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x06};
    size_t at = 0;
    for (size_t i = 0; i + sizeof tag <= in.n; i++)
        if (!memcmp(in.p + i, tag, sizeof tag)) at = i + 9;
    CHECK(at > 0);
    CHECK_EQ_INT(want.n, 8 * 16 * 8 * 3);
    for (int o = 1; o <= 8 && at; o++) {
        in.p[at] = (uint8_t)o;
        gm_image img;
        gm_error err = {0};
        CHECK_OK(gm_image_decode(in.p, in.n, NULL, &img, &err), &err);
        CHECK_EQ_INT(img.width, o >= 5 ? 8 : 16);
        CHECK_EQ_INT(img.height, o >= 5 ? 16 : 8);
        int d = max_diff(&img, want.p + (size_t)(o - 1) * 384, 384);
        CHECK_MSG(d >= 0 && d <= 1, "orientation %d: max difference %d", o, d);
        gm_image_free(&img);
    }
    free(in.p);
    free(want.p);
}

/* ---- decoding: files written here, with exact expectations */

TEST(png_layouts) {
    enum { W = 5, H = 3 };
    uint8_t rgb16[H][W * 6], gray16[H][W * 2], ga8[H][W * 2], gray1[H][1], rgb8[H][W * 3];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            for (int i = 0; i < 6; i++) rgb16[y][x * 6 + i] = (uint8_t)(x * 50 + y * 7 + i * 13);
            gray16[y][x * 2] = (uint8_t)(x * 60 + y), gray16[y][x * 2 + 1] = 0xff;
            ga8[y][x * 2] = (uint8_t)(x * 40 + y), ga8[y][x * 2 + 1] = (uint8_t)(x * 10);
            for (int i = 0; i < 3; i++) rgb8[y][x * 3 + i] = (uint8_t)(x * 31 + y * 17 + i * 5);
        }
    for (int y = 0; y < H; y++) gray1[y][0] = y == 1 ? 0xa8 : 0x50; /* 1-bit: 10101 / 01010 */
    struct { int type, depth, interlace; const uint8_t *raw; size_t row; } cases[] = {
        {PNG_COLOR_TYPE_RGB, 16, PNG_INTERLACE_NONE, &rgb16[0][0], W * 6},
        {PNG_COLOR_TYPE_GRAY, 16, PNG_INTERLACE_NONE, &gray16[0][0], W * 2},
        {PNG_COLOR_TYPE_GRAY_ALPHA, 8, PNG_INTERLACE_NONE, &ga8[0][0], W * 2},
        {PNG_COLOR_TYPE_GRAY, 1, PNG_INTERLACE_NONE, &gray1[0][0], 1},
        {PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_ADAM7, &rgb8[0][0], W * 3},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        blob f = write_png(W, H, cases[c].type, cases[c].depth, cases[c].interlace, cases[c].raw, cases[c].row);
        gm_image img;
        gm_error err = {0};
        CHECK_OK(gm_image_decode(f.p, f.n, NULL, &img, &err), &err);
        for (int y = 0; y < H && img.pixels; y++)
            for (int x = 0; x < W; x++)
                for (int i = 0; i < 3; i++) {
                    int want;
                    switch (c) {
                    case 0: want = rgb16[y][x * 6 + i * 2]; break; /* the high byte */
                    case 1: want = gray16[y][x * 2]; break;
                    case 2: want = ga8[y][x * 2]; break;
                    case 3: want = (gray1[y][0] >> (7 - x)) & 1 ? 255 : 0; break;
                    default: want = rgb8[y][x * 3 + i]; break;
                    }
                    CHECK_MSG(img.pixels[(y * W + x) * 3 + i] == want, "case %zu (%d,%d,%d): %d != %d", c, x, y,
                              i, img.pixels[(y * W + x) * 3 + i], want);
                }
        gm_image_free(&img);
        free(f.p);
    }
}

TEST(jpeg_baseline_and_progressive) {
    enum { W = 24, H = 16 };
    uint8_t rgb[W * H * 3];
    for (int i = 0; i < W * H; i++) /* flat 8x8 blocks: quality 100 keeps them within a few levels */
        for (int c = 0; c < 3; c++) rgb[i * 3 + c] = (uint8_t)(((i % W) / 8 * 90 + (i / W) / 8 * 60 + c * 40) % 256);
    for (int prog = 0; prog < 2; prog++) {
        blob f = write_jpeg(rgb, W, H, prog);
        gm_image img;
        gm_error err = {0};
        CHECK_OK(gm_image_decode(f.p, f.n, NULL, &img, &err), &err);
        int d = max_diff(&img, rgb, sizeof rgb);
        CHECK_MSG(d >= 0 && d <= 3, "progressive %d: max difference %d", prog, d);
        gm_image_free(&img);
        free(f.p);
    }
}

/* ---- bad input */

TEST(bad_inputs) {
    check_fails("", 0, NULL, GM_ERR_FORMAT, "empty");
    check_fails("GIF89a\1\0\1\0", 10, NULL, GM_ERR_FORMAT, "GIF");
    check_fails("BM\0\0\0\0", 6, NULL, GM_ERR_FORMAT, "BMP");
    check_fails("\0\0\0\x1c" "ftypavif", 12, NULL, GM_ERR_FORMAT, "AVIF");
    check_fails("RIFF\4\0\0\0WAVE", 12, NULL, GM_ERR_FORMAT, "RIFF");
    check_fails("hello, world", 12, NULL, GM_ERR_FORMAT, "68 65 6c 6c");
    check_fails("\x89PNG\r\n\x1a\n", 8, NULL, GM_ERR_FORMAT, "PNG: ");
    check_fails("\x89PNG\r\n\x1a\nxxxxxxxxxxxxxxxxxxxxxxxx", 32, NULL, GM_ERR_FORMAT, "PNG: ");
    check_fails("\xff\xd8\xff\xe0garbage", 11, NULL, GM_ERR_FORMAT, "JPEG: ");
    check_fails("RIFF\x20\0\0\0WEBPVP8 garbage.........", 32, NULL, GM_ERR_FORMAT, "WebP: ");
    gm_image img;
    CHECK_EQ_INT(gm_image_decode(NULL, 4, NULL, &img, NULL), GM_ERR_ARG);
    CHECK_EQ_INT(gm_image_decode("x", 1, NULL, NULL, NULL), GM_ERR_ARG);
    gm_image_free(NULL);
}

/* Every prefix of each fixture: an error with a message, or (cut after the pixel data) a whole
 * image; never a crash or a leak (ASan runs this too). Short prefixes must all fail. */
TEST(truncated_files) {
    const char *names[] = {"rgba.png", "palette.png", "gray.jpg", "exif6.jpg", "cmyk.jpg", "lossy.webp", "lossless.webp"};
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        blob in = load(names[f]);
        for (size_t n = 0; in.p && n < in.n; n++) {
            gm_image img;
            gm_error err = {0};
            gm_status st = gm_image_decode(in.p, n, NULL, &img, &err);
            if (st == GM_OK) {
                CHECK_MSG(n > in.n * 3 / 4, "%s cut to %zu of %zu bytes decoded", names[f], n, in.n);
                CHECK(img.pixels != NULL);
            } else {
                CHECK_MSG(err.msg[0] && !img.pixels, "%s cut to %zu: status %d, '%s'", names[f], n, (int)st, err.msg);
            }
            gm_image_free(&img);
        }
        free(in.p);
    }
}

/* Headers that claim more pixels than the limits: refused before any pixel memory exists. */
TEST(huge_headers_and_limits) {
    blob png = write_png(100000, 100000, PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_NONE, NULL, 0);
    check_fails(png.p, png.n, NULL, GM_ERR_UNSUPPORTED, "100000 x 100000");
    free(png.p);
    /* a JPEG whose SOF says 65000 x 65000 */
    blob jpg = load("gray.jpg");
    for (size_t i = 0; jpg.p && i + 9 < jpg.n; i++)
        if (jpg.p[i] == 0xff && jpg.p[i + 1] == 0xc0) {
            jpg.p[i + 5] = jpg.p[i + 7] = 0xfd, jpg.p[i + 6] = jpg.p[i + 8] = 0xe8;
            break;
        }
    check_fails(jpg.p, jpg.n, NULL, GM_ERR_UNSUPPORTED, "65000 x 65000");
    free(jpg.p);
    /* the caller's limits: width, height, pixels */
    blob webp = load("lossy.webp"), rgba = load("rgba.png");
    check_fails(webp.p, webp.n, &(gm_image_limits){.max_width = 15}, GM_ERR_UNSUPPORTED, "WebP: image of 16 x 12");
    check_fails(rgba.p, rgba.n, &(gm_image_limits){.max_height = 4}, GM_ERR_UNSUPPORTED, "over the limit");
    check_fails(rgba.p, rgba.n, &(gm_image_limits){.max_pixels = 34}, GM_ERR_UNSUPPORTED, "34 pixels");
    gm_image img;
    gm_error err = {0};
    CHECK_OK(gm_image_decode(rgba.p, rgba.n, &(gm_image_limits){7, 5, 35}, &img, &err), &err);
    gm_image_free(&img);
    free(webp.p);
    free(rgba.p);
}

/* The EXIF parser on hand-made segments: both byte orders, and every malformed one gives 1. */
TEST(exif_parser) {
    uint8_t le[] = {'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0, 2, 0,
                    0x0f, 0x01, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, /* Make, skipped */
                    0x12, 0x01, 3, 0, 1, 0, 0, 0, 8, 0, 0, 0};
    CHECK_EQ_INT(gm_exif_orientation(le, sizeof le), 8);
    uint8_t be[] = {'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1,
                    0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 3, 0, 0};
    CHECK_EQ_INT(gm_exif_orientation(be, sizeof be), 3);
    for (size_t n = 0; n < sizeof le; n++) CHECK_EQ_INT(gm_exif_orientation(le, n), 1); /* every truncation */
    uint8_t bad[sizeof le];
    memcpy(bad, le, sizeof le);
    bad[36] = 9; /* out of range */
    CHECK_EQ_INT(gm_exif_orientation(bad, sizeof bad), 1);
    memcpy(bad, le, sizeof le);
    bad[30] = 4; /* LONG, not SHORT */
    CHECK_EQ_INT(gm_exif_orientation(bad, sizeof bad), 1);
    memcpy(bad, le, sizeof le);
    bad[10] = 0xf0, bad[13] = 0xff; /* IFD offset far past the end */
    CHECK_EQ_INT(gm_exif_orientation(bad, sizeof bad), 1);
    memcpy(bad, le, sizeof le);
    bad[14] = 0xff, bad[15] = 0xff, bad[28] = 0x13; /* 65535 entries claimed, none the orientation */
    CHECK_EQ_INT(gm_exif_orientation(bad, sizeof bad), 1);
    memcpy(bad, le, sizeof le);
    bad[8] = 43; /* not TIFF */
    CHECK_EQ_INT(gm_exif_orientation(bad, sizeof bad), 1);
}

/* ---- preprocessing */

static gm_image fixture_image(const char *name, int w, int h) {
    blob b = load(name);
    gm_image img = {w, h, b.p};
    CHECK_EQ_INT(b.n, (size_t)w * h * 3);
    return img;
}

TEST(resize_matches_pillow) {
    gm_image src = fixture_image("resize_src.rgb", 23, 13);
    static const int sizes[][2] = {{9, 5}, {31, 19}, {47, 6}, {5, 29}, {1, 1}, {23, 4}, {11, 13}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && src.pixels; i++) {
        char name[64];
        snprintf(name, sizeof name, "resize_%dx%d.rgb", sizes[i][0], sizes[i][1]);
        blob want = load(name);
        gm_image out;
        gm_error err = {0};
        CHECK_OK(gm_image_resize_bilinear(&src, sizes[i][0], sizes[i][1], &out, &err), &err);
        CHECK_MSG(max_diff(&out, want.p, want.n) == 0, "%s differs (max %d)", name, max_diff(&out, want.p, want.n));
        gm_image_free(&out);
        free(want.p);
    }
    /* 7 x 23 -> 4 x 10: Pillow >= 13 runs the vertical pass first here (26 bytes differ from the
     * horizontal-first order); so does 23 x 13 -> 47 x 6 above */
    gm_image tall = fixture_image("resize_tall.rgb", 7, 23), small;
    blob want = load("resize_tall_4x10.rgb");
    gm_error err = {0};
    CHECK_OK(gm_image_resize_bilinear(&tall, 4, 10, &small, &err), &err);
    CHECK_MSG(max_diff(&small, want.p, want.n) == 0, "tall 4x10 differs (max %d)", max_diff(&small, want.p, want.n));
    gm_image_free(&small);
    gm_image_free(&tall);
    free(want.p);
    gm_image same;
    CHECK_OK(gm_image_resize_bilinear(&src, 23, 13, &same, &err), &err);
    CHECK(same.pixels != src.pixels && max_diff(&same, src.pixels, 23 * 13 * 3) == 0);
    gm_image_free(&same);
    CHECK_EQ_INT(gm_image_resize_bilinear(&src, 0, 5, &same, &err), GM_ERR_ARG);
    CHECK_EQ_INT(gm_image_resize_bilinear(&src, 5, 70000, &same, &err), GM_ERR_ARG);
    CHECK_EQ_INT(gm_image_resize_bilinear(&(gm_image){0}, 5, 5, &same, &err), GM_ERR_ARG);
    gm_image_free(&src);
}

/* A uniform image stays uniform through any resize (the weights of each output sum to one). */
TEST(resize_flat) {
    gm_image src = {0};
    gm_error err = {0};
    CHECK_OK(gm_image_alloc(&src, 37, 3, &err), &err);
    memset(src.pixels, 173, 37 * 3 * 3);
    gm_image out;
    CHECK_OK(gm_image_resize_bilinear(&src, 4, 11, &out, &err), &err);
    for (int i = 0; out.pixels && i < 4 * 11 * 3; i++) CHECK_EQ_INT(out.pixels[i], 173);
    gm_image_free(&out);
    gm_image_free(&src);
}

TEST(letterbox_matches_reference) {
    gm_image src = fixture_image("resize_src.rgb", 23, 13);
    static const int sizes[] = {16, 32};
    for (int i = 0; i < 2 && src.pixels; i++) {
        char name[64];
        snprintf(name, sizeof name, "letterbox_%dx%d.rgb", sizes[i], sizes[i]);
        blob want = load(name);
        gm_image out;
        gm_error err = {0};
        CHECK_OK(gm_image_letterbox(&src, sizes[i], sizes[i], &out, &err), &err);
        CHECK_MSG(max_diff(&out, want.p, want.n) == 0, "%s differs", name);
        /* 23 x 13 into 32 x 32: 32 x 19 (ceil of 18.09) at y = 6; rows above and below are black */
        if (sizes[i] == 32 && out.pixels) {
            for (int x = 0; x < 32 * 3; x++) CHECK_EQ_INT(out.pixels[5 * 32 * 3 + x] | out.pixels[25 * 32 * 3 + x], 0);
            int lit = 0;
            for (int x = 0; x < 32 * 3; x++) lit |= out.pixels[6 * 32 * 3 + x] | out.pixels[24 * 32 * 3 + x];
            CHECK(lit);
        }
        gm_image_free(&out);
        free(want.p);
    }
    /* a portrait image: llama.cpp's horizontal-first order even where Pillow >= 13 goes vertical first */
    gm_image tall = fixture_image("resize_tall.rgb", 7, 23), boxed;
    blob want = load("letterbox_tall_10x10.rgb");
    gm_error err = {0};
    CHECK_OK(gm_image_letterbox(&tall, 10, 10, &boxed, &err), &err);
    CHECK_MSG(max_diff(&boxed, want.p, want.n) == 0, "tall letterbox differs (max %d)", max_diff(&boxed, want.p, want.n));
    gm_image_free(&boxed);
    gm_image_free(&tall);
    free(want.p);
    gm_image same;
    CHECK_OK(gm_image_letterbox(&src, 23, 13, &same, &err), &err);
    CHECK(max_diff(&same, src.pixels, 23 * 13 * 3) == 0);
    gm_image_free(&same);
    CHECK_EQ_INT(gm_image_letterbox(&src, -1, 16, &same, &err), GM_ERR_ARG);
    gm_image_free(&src);
}

TEST(to_chw) {
    uint8_t px[2 * 3] = {0, 128, 255, 10, 20, 30}; /* 2 x 1: (0,128,255), (10,20,30) */
    gm_image img = {2, 1, px};
    const float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.5f, 0.5f, 0.5f};
    float out[6];
    gm_error err = {0};
    CHECK_OK(gm_image_to_chw(&img, mean, std, out, &err), &err);
    const int order[6] = {0, 3, 1, 4, 2, 5}; /* plane c, pixel i -> interleaved index */
    for (int k = 0; k < 6; k++) CHECK(out[k] == ((float)px[order[k]] / 255.0f - 0.5f) / 0.5f);
    CHECK(out[0] == -1.0f && out[4] == 1.0f);
    const float mean2[3] = {0.48145466f, 0.4578275f, 0.40821073f}, std2[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    CHECK_OK(gm_image_to_chw(&img, mean2, std2, out, &err), &err);
    CHECK_NEAR(out[3], (20 / 255.0 - 0.4578275) / 0.26130258, 1e-6);
    const float zero[3] = {1, 0, 1};
    CHECK_EQ_INT(gm_image_to_chw(&img, mean, zero, out, &err), GM_ERR_ARG);
    CHECK_EQ_INT(gm_image_to_chw(&(gm_image){0}, mean, std, out, &err), GM_ERR_ARG);
}

int main(void) {
    RUN(png_alpha_dropped);
    RUN(png_palette);
    RUN(jpeg_gray);
    RUN(jpeg_cmyk);
    RUN(webp_lossless_alpha);
    RUN(webp_lossy);
    RUN(jpeg_exif_orientation);
    RUN(png_layouts);
    RUN(jpeg_baseline_and_progressive);
    RUN(bad_inputs);
    RUN(truncated_files);
    RUN(huge_headers_and_limits);
    RUN(exif_parser);
    RUN(resize_matches_pillow);
    RUN(resize_flat);
    RUN(letterbox_matches_reference);
    RUN(to_chw);
    return test_summary();
}
