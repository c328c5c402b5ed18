/* tests/test_vision_gemma4.c — the Gemma 4 image encoder (vision/gemma4v.c) and its preprocessing against
 * tests/gen/gen_vision_gemma4_fixtures.py: tiny synthetic gemma4v mmproj files (patch 16, width 32, ffn 48,
 * 2 blocks, 2 heads of 16, pooling 3, projection 40, position tables of 11 rows) whose embeddings a float64
 * numpy forward computed on the file's own weights, for two non-square images (96 x 48 -> 2 tokens, 48 x 144
 * -> 3) through the whole public path (gm_vision_encode_image: the size rule, the letterbox (here a copy), the
 * normalisation, the encoder). Errors relative to the largest output magnitude (about 3):
 *   F32, F16 weights, gelu_quick, clamps: max |ours - ref| <= 1e-5 * max|ref| (measured ~3e-7)
 * Also: llama.cpp's size rule (sizes.txt, computed in float32 by the script from the rule in
 * ../shared/docs/vision-facts.md section 3) for default and custom token bounds; gm_image_resize_bicubic
 * against Pillow's BICUBIC bytes (both pass orders); the bicubic letterbox of gm_vision_preprocess; sizes the
 * encoder refuses; files the loader refuses. */
#include <string.h>

#include "gemma.h"
#include "gemma_vision.h"
#include "support/test.h"

enum { PD = 40, MAX_TOK = 8 };

static unsigned char *read_rel(const char *rel, size_t want) {
    size_t n = 0;
    unsigned char *p = test_read_file(test_data_path(rel), &n);
    CHECK_MSG(p && n == want, "%s: %zu bytes, expected %zu", rel, n, want);
    if (p && n == want) return p;
    free(p);
    return NULL;
}

static double rel_err(const float *a, const double *ref, int n) {
    double md = 0, mr = 0;
    for (int i = 0; i < n; i++) {
        md = fmax(md, fabs(a[i] - ref[i]));
        mr = fmax(mr, fabs(ref[i]));
    }
    return md / mr;
}

static gm_vision *open_g4_on(const char *model, int threads, gm_isa isa, bool quick, int min_tok, int max_tok,
                             gm_backend_kind be) {
    char path[64];
    snprintf(path, sizeof path, "vision/g4/%s.gguf", model);
    const gm_vision_options o = {.n_threads = gm_test_threads(threads), .isa = isa, .image_min_tokens = min_tok,
                                 .image_max_tokens = max_tok, .llama_cpp_act = quick, .backend = be};
    gm_error err = {0};
    gm_vision *v = NULL;
    CHECK_OK(gm_vision_open(test_data_path(path), &o, &v, &err), &err);
    return v;
}

static gm_vision *open_g4(const char *model, int threads, gm_isa isa, bool quick, int min_tok, int max_tok) {
    return open_g4_on(model, threads, isa, quick, min_tok, max_tok, GM_BACKEND_CPU);
}

/* image name ("a" 96 x 48, "b" 48 x 144) through gm_vision_encode_image against <ref>_<name>.f64 */
static void check_image(gm_vision *v, const char *ref, const char *name, int w, int h, double tol) {
    char rel[64];
    snprintf(rel, sizeof rel, "vision/g4/%s.rgb", name);
    gm_image img = {.width = w, .height = h, .pixels = read_rel(rel, (size_t)w * h * 3)};
    const int T = (w / 48) * (h / 48);
    snprintf(rel, sizeof rel, "vision/g4/%s_%s.f64", ref, name);
    double *want = (double *)read_rel(rel, (size_t)T * PD * sizeof(double));
    if (!img.pixels || !want) goto done;
    gm_error err = {0};
    float *out = NULL, *again = NULL;
    int n = 0;
    CHECK_OK(gm_vision_encode_image(v, &img, &out, &n, &err), &err);
    CHECK_OK(gm_vision_encode_image(v, &img, &again, &n, &err), &err); /* buffers reused: the same bits */
    CHECK_EQ_INT(n, T);
    if (out && again && n == T) {
        CHECK(!memcmp(out, again, (size_t)T * PD * sizeof(float)));
        const double e = rel_err(out, want, T * PD);
        fprintf(stderr, "  %s %s (%d x %d, %d tokens): max error %.3g of max |ref| (tolerance %g)\n", ref, name, w, h, T, e, tol);
        CHECK_MSG(e <= tol, "%s %s: relative error %g > %g", ref, name, e, tol);
    }
    free(out);
    free(again);
done:
    free(img.pixels);
    free(want);
}

static void check_model_on(const char *model, const char *ref, bool quick, int threads, gm_isa isa,
                           gm_backend_kind be) {
    gm_vision *v = open_g4_on(model, threads, isa, quick, 1, MAX_TOK, be);
    if (!v) return;
    CHECK_EQ_INT(gm_vision_family(v), 4);
    CHECK_EQ_INT(gm_vision_image_size(v), 0);
    CHECK_EQ_INT(gm_vision_n_tokens(v), MAX_TOK);
    CHECK_EQ_INT(gm_vision_embd_dim(v), PD);
    float mean[3], std[3];
    gm_vision_mean_std(v, mean, std);
    CHECK(mean[0] == 0.25f && mean[2] == 0.75f && std[1] == 0.25f && std[2] == 1.0f);
    check_image(v, ref, "a", 96, 48, 1e-5);
    check_image(v, ref, "b", 48, 144, 1e-5);
    gm_vision_free(v);
}

static void check_model(const char *model, const char *ref, bool quick, int threads, gm_isa isa) {
    check_model_on(model, ref, quick, threads, isa, GM_BACKEND_CPU);
}

TEST(encode_f32) {
    check_model("f32", "f32", false, 1, GM_ISA_AUTO);
    check_model("f32", "f32", false, 2, GM_ISA_AUTO);
    check_model("f32", "f32", false, 2, GM_ISA_SCALAR);
}
TEST(encode_f16) {
    check_model("f16", "f16", false, 2, GM_ISA_AUTO);
    check_model("f16", "f16", false, 1, GM_ISA_SCALAR);
}
TEST(encode_gelu_quick) { check_model("f32", "quick", true, 2, GM_ISA_AUTO); }
TEST(encode_clamps) { check_model("clamp", "clamp", false, 2, GM_ISA_AUTO); }
/* The reference backend's dense ops (sums in double, its own RoPE and GELU) meet the references too. */
TEST(encode_reference_backend) {
    check_model_on("f32", "f32", false, 1, GM_ISA_AUTO, GM_BACKEND_REFERENCE);
    check_model_on("f16", "f16", false, 1, GM_ISA_AUTO, GM_BACKEND_REFERENCE);
    check_model_on("f32", "quick", true, 1, GM_ISA_AUTO, GM_BACKEND_REFERENCE);
    check_model_on("clamp", "clamp", false, 1, GM_ISA_AUTO, GM_BACKEND_REFERENCE);
}

/* sizes.txt: "w h min max -> W H" (0: the defaults 70 / 1120) */
TEST(size_rule) {
    size_t len = 0;
    char *txt = (char *)test_read_file(test_data_path("vision/g4/sizes.txt"), &len);
    CHECK(txt != NULL);
    if (!txt) return;
    char *save = NULL;
    int lines = 0;
    for (char *line = strtok_r(txt, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int w, h, mn, mx, W, H;
        if (sscanf(line, "%d %d %d %d -> %d %d", &w, &h, &mn, &mx, &W, &H) != 6) continue;
        gm_vision *v = open_g4("f32", 1, GM_ISA_AUTO, false, mn, mx);
        if (!v) break;
        int ow = 0, oh = 0, t = 0;
        gm_error err = {0};
        CHECK_OK(gm_vision_input_size(v, w, h, &ow, &oh, &t, &err), &err);
        CHECK_MSG(ow == W && oh == H, "%d x %d (tokens %d..%d): %d x %d, llama.cpp %d x %d", w, h, mn, mx, ow, oh, W, H);
        CHECK_EQ_INT(t, (W / 48) * (H / 48));
        gm_vision_free(v);
        lines++;
    }
    CHECK(lines >= 20);
    free(txt);
}

static void check_bicubic(const gm_image *src, int w, int h, const char *rel) {
    unsigned char *want = read_rel(rel, (size_t)w * h * 3);
    gm_image out = {0};
    gm_error err = {0};
    CHECK_OK(gm_image_resize_bicubic(src, w, h, &out, &err), &err);
    if (want && out.pixels) CHECK_MSG(!memcmp(out.pixels, want, (size_t)w * h * 3), "%s differs from Pillow", rel);
    gm_image_free(&out);
    free(want);
}

TEST(bicubic_is_pillow) {
    static const int sizes[][2] = {{9, 5}, {31, 19}, {47, 6}, {5, 29}, {1, 1}, {23, 4}, {11, 13}, {50, 40}, {46, 26}};
    gm_image src = {.width = 23, .height = 13, .pixels = read_rel("vision/g4/resize_src.rgb", 23 * 13 * 3)};
    gm_image tall = {.width = 7, .height = 23, .pixels = read_rel("vision/g4/resize_tall.rgb", 7 * 23 * 3)};
    char rel[64];
    for (size_t i = 0; src.pixels && i < sizeof sizes / sizeof sizes[0]; i++) {
        snprintf(rel, sizeof rel, "vision/g4/bicubic_%dx%d.rgb", sizes[i][0], sizes[i][1]);
        check_bicubic(&src, sizes[i][0], sizes[i][1], rel);
    }
    if (tall.pixels) check_bicubic(&tall, 4, 10, "vision/g4/tall_4x10.rgb"); /* Pillow 13: vertical pass first */
    /* gm_vision_preprocess: 23 x 13 -> 48 x 48 (one token), bicubic letterbox, then the file's mean / std */
    gm_vision *v = open_g4("f32", 1, GM_ISA_AUTO, false, 1, MAX_TOK);
    unsigned char *box = read_rel("vision/g4/letterbox.rgb", 48 * 48 * 3);
    float *chw = NULL, mean[3], std[3];
    int w = 0, h = 0, t = 0;
    gm_error err = {0};
    if (v && src.pixels && box) {
        CHECK_OK(gm_vision_preprocess(v, &src, &chw, &w, &h, &t, &err), &err);
        CHECK(w == 48 && h == 48 && t == 1);
        gm_vision_mean_std(v, mean, std);
        int bad = 0;
        for (int c = 0; chw && c < 3; c++)
            for (int i = 0; i < 48 * 48; i++) bad += chw[c * 48 * 48 + i] != ((float)box[i * 3 + c] / 255.0f - mean[c]) / std[c];
        CHECK_MSG(chw && bad == 0, "letterbox: %d values differ", bad);
    }
    free(chw);
    free(box);
    gm_vision_free(v);
    free(src.pixels);
    free(tall.pixels);
}

TEST(refuses_sizes) {
    gm_vision *v = open_g4("f32", 1, GM_ISA_AUTO, false, 1, MAX_TOK);
    if (!v) return;
    static float chw[3 * 48 * 528], out[16 * PD];
    gm_error err = {0};
    CHECK(gm_vision_encode_chw(v, chw, 50, 48, out, &err) == GM_ERR_ARG);       /* not a multiple of 48 */
    CHECK(gm_vision_encode_chw(v, chw, 432, 48, out, &err) == GM_ERR_ARG);      /* 9 tokens > 8 */
    CHECK(strstr(err.msg, "8") != NULL);
    gm_vision_free(v);
    v = open_g4("f32", 1, GM_ISA_AUTO, false, 1, 16);
    if (!v) return;
    CHECK(gm_vision_encode_chw(v, chw, 528, 48, out, &err) == GM_ERR_ARG);      /* 33 patches > 11 table rows */
    CHECK(strstr(err.msg, "position table") != NULL);
    CHECK_OK(gm_vision_encode_chw(v, chw, 144, 96, out, &err), &err);          /* 6 tokens: fine */
    CHECK(gm_vision_encode(v, chw, out, &err) == GM_ERR_ARG);                   /* no fixed size */
    CHECK(gm_vision_input_size(v, 0, 5, NULL, NULL, NULL, &err) == GM_ERR_ARG);
    gm_vision_free(v);
    const gm_vision_options bad = {.image_min_tokens = 9, .image_max_tokens = 8};
    CHECK(gm_vision_open(test_data_path("vision/g4/f32.gguf"), &bad, &v, &err) == GM_ERR_ARG && v == NULL);
}

static void check_refused(const char *name, gm_status want, const char *needle) {
    char path[64];
    snprintf(path, sizeof path, "vision/g4/bad_%s.gguf", name);
    gm_error err = {0};
    gm_vision *v = (gm_vision *)&err;
    gm_status st = gm_vision_open(test_data_path(path), NULL, &v, &err);
    CHECK_MSG(st == want, "%s: status %s, expected %s: %s", name, gm_status_name(st), gm_status_name(want), err.msg);
    CHECK(v == NULL);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: message \"%s\" does not name \"%s\"", name, err.msg, needle);
}

TEST(refuses_bad_files) {
    check_refused("qnorm", GM_ERR_NOT_FOUND, "v.blk.1.attn_k_norm.weight");
    check_refused("bias", GM_ERR_UNSUPPORTED, "v.blk.0.attn_v.bias");
    check_refused("std", GM_ERR_FORMAT, "v.std_bias");
    check_refused("heads", GM_ERR_UNSUPPORTED, "multiple of 4");
}

int main(void) {
    RUN(encode_f32);
    RUN(encode_f16);
    RUN(encode_gelu_quick);
    RUN(encode_clamps);
    RUN(encode_reference_backend);
    RUN(size_rule);
    RUN(bicubic_is_pillow);
    RUN(refuses_sizes);
    RUN(refuses_bad_files);
    return test_summary();
}
