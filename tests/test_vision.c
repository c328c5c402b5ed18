/* tests/test_vision.c — the Gemma 3 image encoder (vision/) against tests/gen/gen_vision_fixtures.py: tiny
 * synthetic mmproj files (image 16, patch 4, width 32, ffn 48, 2 blocks, 4 heads, 2x2 pooling -> 4 tokens of 64)
 * whose embeddings a float64 numpy forward computed on the file's own (rounded) weights. So F16 weights are
 * exact on both sides and differ only by our f32 arithmetic; Q8_0 adds our activation quantization (llama.cpp's
 * too). Errors are measured relative to the largest output magnitude (about 3):
 *   F32, F16, gelu_quick: max |ours - ref| <= 1e-4 * max|ref|     (f32 sums over 48 terms and 2 blocks)
 *   Q8_0 attention:       max |ours - ref| <= 3e-2 * max|ref|     (activations rounded to 8 bits per matmul: ~1e-2)
 * The reference backend (its dense ops in double) meets them within 1e-5, Q8_0 included.
 * Also: the sizes and normalisation reported, the thread count not changing the result, and files with a
 * missing tensor, a wrong shape, another projector, no vision encoder, a bad scale factor or the up / down
 * swap trap refused with the status and a message naming what is wrong. */
#include <string.h>
#include <time.h>

#include "gemma.h"
#include "gemma_vision.h"
#include "support/test.h"

enum { S = 16, TOKENS = 4, DIM = 64 };

static bool read_exact(const char *rel, void *dst, size_t bytes) {
    size_t n = 0;
    unsigned char *p = test_read_file(test_data_path(rel), &n);
    bool ok = p && n == bytes;
    if (ok) memcpy(dst, p, bytes);
    free(p);
    return ok;
}

/* max |a - ref| / max |ref|. Compares, not fmax: GCC 12's aarch64 vectorizer crashes on an fmax
 * reduction whose trip count it knows (here after inlining; ICE in vect_transform_reduction). */
static double rel_err(const float *a, const double *ref, int n) {
    double md = 0, mr = 0;
    for (int i = 0; i < n; i++) {
        const double d = fabs(a[i] - ref[i]), r = fabs(ref[i]);
        if (d > md) md = d;
        if (r > mr) mr = r;
    }
    return md / mr;
}

static void check_file_on(const char *name, int threads, gm_isa isa, gm_backend_kind be, double tol) {
    char path[64];
    snprintf(path, sizeof path, "vision/%s.gguf", name);
    gm_error err = {0};
    gm_vision *v = NULL;
    const gm_vision_options o = {.n_threads = gm_test_threads(threads), .isa = isa, .backend = be};
    CHECK_OK(gm_vision_open(test_data_path(path), &o, &v, &err), &err);
    if (!v) return;
    CHECK_EQ_INT(gm_vision_image_size(v), S);
    CHECK_EQ_INT(gm_vision_n_tokens(v), TOKENS);
    CHECK_EQ_INT(gm_vision_embd_dim(v), DIM);
    float mean[3], std[3];
    gm_vision_mean_std(v, mean, std);
    for (int i = 0; i < 3; i++) CHECK(mean[i] == 0.5f && std[i] == 0.5f);
    static float img[3 * S * S], out[TOKENS * DIM];
    static double ref[TOKENS * DIM];
    snprintf(path, sizeof path, "vision/%s.out.f64", name);
    CHECK(read_exact("vision/input.f32", img, sizeof img));
    CHECK(read_exact(path, ref, sizeof ref));
    for (int rep = 0; rep < 2; rep++) { /* the second call reuses every buffer: same bits */
        static float first[TOKENS * DIM];
        CHECK_OK(gm_vision_encode(v, img, out, &err), &err);
        if (rep == 0) memcpy(first, out, sizeof out);
        else CHECK(!memcmp(first, out, sizeof out));
    }
    const double e = rel_err(out, ref, TOKENS * DIM);
    fprintf(stderr, "  %s, %s backend, %d threads, isa %s: max error %.3g of max |ref| (tolerance %g)\n", name,
            be == GM_BACKEND_REFERENCE ? "reference" : "cpu", threads, gm_isa_name(isa), e, tol);
    CHECK_MSG(e <= tol, "%s: relative error %g > %g", name, e, tol);
    gm_vision_free(v);
}

static void check_file(const char *name, int threads, gm_isa isa, double tol) {
    check_file_on(name, threads, isa, GM_BACKEND_CPU, tol);
}

TEST(encode_f32) {
    check_file("f32", 1, GM_ISA_AUTO, 1e-4);
    check_file("f32", 2, GM_ISA_AUTO, 1e-4);
    check_file("f32", 2, GM_ISA_SCALAR, 1e-4);
}
TEST(encode_f16) {
    check_file("f16", 2, GM_ISA_AUTO, 1e-4);
    check_file("f16", 1, GM_ISA_SCALAR, 1e-4);
}
TEST(encode_gelu_quick) { check_file("quick", 2, GM_ISA_AUTO, 1e-4); }
TEST(encode_q8_0) {
    check_file("q8", 2, GM_ISA_AUTO, 3e-2);
    check_file("q8", 1, GM_ISA_SCALAR, 3e-2);
}

/* The same encoders on the reference backend's dense ops (plain loops, sums in double): the references' numbers
 * up to f32 rounding, Q8_0 too (no activation quantization there). */
TEST(encode_reference_backend) {
    const char *const names[] = {"f32", "f16", "quick", "q8"};
    for (int i = 0; i < 4; i++) check_file_on(names[i], 1, GM_ISA_AUTO, GM_BACKEND_REFERENCE, 1e-5);
}

static void check_refused(const char *name, gm_status want, const char *needle) {
    char path[64];
    snprintf(path, sizeof path, "vision/bad_%s.gguf", name);
    gm_error err = {0};
    gm_vision *v = (gm_vision *)&err; /* must be reset to NULL */
    gm_status st = gm_vision_open(test_data_path(path), NULL, &v, &err);
    CHECK_MSG(st == want, "%s: status %s, expected %s: %s", name, gm_status_name(st), gm_status_name(want), err.msg);
    CHECK(v == NULL);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: message \"%s\" does not name \"%s\"", name, err.msg, needle);
}

TEST(refuses_bad_files) {
    check_refused("missing", GM_ERR_NOT_FOUND, "v.blk.1.ffn_down.bias");
    check_refused("shape", GM_ERR_FORMAT, "v.blk.0.attn_k.weight");
    check_refused("projector", GM_ERR_UNSUPPORTED, "idefics3");
    check_refused("novision", GM_ERR_UNSUPPORTED, "clip.has_vision_encoder");
    check_refused("scale", GM_ERR_UNSUPPORTED, "scale_factor");
    check_refused("swap", GM_ERR_FORMAT, "v.blk.0.ffn_down.weight");
    gm_error err = {0};
    gm_vision *v = NULL;
    /* a text model is not an mmproj; a raw float file is not a GGUF */
    CHECK(gm_vision_open(test_data_path("tiny/gemma3.gguf"), NULL, &v, &err) == GM_ERR_UNSUPPORTED && v == NULL);
    CHECK(strstr(err.msg, "\"clip\"") != NULL);
    CHECK(gm_vision_open(test_data_path("vision/input.f32"), NULL, &v, &err) == GM_ERR_FORMAT && v == NULL);
    CHECK(gm_vision_open(NULL, NULL, &v, &err) == GM_ERR_ARG);
    CHECK(gm_vision_encode(NULL, NULL, NULL, &err) == GM_ERR_ARG);
    gm_vision_free(NULL);
}

int main(void) {
    RUN(encode_f32);
    RUN(encode_f16);
    RUN(encode_gelu_quick);
    RUN(encode_q8_0);
    RUN(encode_reference_backend);
    RUN(refuses_bad_files);
    return test_summary();
}
