/* tests/test_vision_hf.c — gm_vision_open on Hugging Face folders (vision/mmproj_hf.c) against the mmproj GGUF
 * llama.cpp's converter makes of the same folder, from tests/gen/gen_vision_hf_fixtures.py (tiny random
 * Gemma3ForConditionalGeneration and Gemma4ForConditionalGeneration folders, the GGUFs written with the
 * converter's transforms). The same input through both must give:
 *   - g3 (BF16 matrices, F16 projection, "model." names) and g4 (BF16 matrices, permuted patch embedding,
 *     clamps, standardisation): bit-identical embeddings, the weights being the same values in the same types;
 *   - g3_old (F32 weights, old names, two shards): within 2e-3 of the largest output, the converter having
 *     rounded the projection to F16 (measured ~3e-4);
 * and the same gm_vision_info (sizes, activation, mean / std: Gemma 3's from preprocessor_config.json or the
 * default 0.5; Gemma 4's do_normalize false -> 0 / 1). Refusals: a missing tensor, a tensor config.json gives
 * another shape, a tensor the encoder does not have, a text-only folder, no config.json, another vision tower. */
#include <string.h>
#include <unistd.h>

#include "gemma.h"
#include "gemma_vision.h"
#include "support/test.h"

static float *read_floats(const char *rel, size_t n) {
    size_t len = 0;
    unsigned char *p = test_read_file(test_data_path(rel), &len);
    CHECK_MSG(p && len == n * sizeof(float), "%s: %zu bytes, expected %zu", rel, len, n * sizeof(float));
    if (p && len == n * sizeof(float)) return (float *)p;
    free(p);
    return NULL;
}

static gm_vision *open_rel(const char *rel) {
    gm_error err = {0};
    gm_vision *v = NULL;
    const gm_vision_options o = {.n_threads = gm_test_threads(2)};
    CHECK_OK(gm_vision_open(test_data_path(rel), &o, &v, &err), &err);
    return v;
}

static void check_same_info(const gm_vision *a, const gm_vision *b) {
    gm_vision_info x, y;
    gm_vision_get_info(a, &x);
    gm_vision_get_info(b, &y);
    CHECK_EQ_INT(x.family, y.family);
    CHECK(!strcmp(x.projector, y.projector));
    CHECK_EQ_INT(x.image_size, y.image_size);
    CHECK_EQ_INT(x.patch_size, y.patch_size);
    CHECK_EQ_INT(x.n_layers, y.n_layers);
    CHECK_EQ_INT(x.n_embd, y.n_embd);
    CHECK_EQ_INT(x.n_ff, y.n_ff);
    CHECK_EQ_INT(x.n_head, y.n_head);
    CHECK_EQ_INT(x.n_tokens, y.n_tokens);
    CHECK_EQ_INT(x.embd_dim, y.embd_dim);
    CHECK(!strcmp(x.activation, y.activation));
    CHECK(!memcmp(x.mean, y.mean, sizeof x.mean) && !memcmp(x.std, y.std, sizeof x.std));
}

/* The folder and the GGUF encode input (w x h) alike: max |a - b| / max |b| <= tol (0: bit-identical). */
static void check_pair(const char *folder, const char *file, const char *input, int w, int h, int tokens, double tol) {
    char rel[96];
    snprintf(rel, sizeof rel, "vision/hf/%s", folder);
    gm_vision *hf = open_rel(rel);
    snprintf(rel, sizeof rel, "vision/hf/%s", file);
    gm_vision *gg = open_rel(rel);
    snprintf(rel, sizeof rel, "vision/hf/%s", input);
    float *chw = read_floats(rel, (size_t)3 * w * h);
    if (!hf || !gg || !chw) goto done;
    check_same_info(hf, gg);
    const int D = gm_vision_embd_dim(gg), n = tokens * D;
    float *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
    gm_error err = {0};
    CHECK_OK(gm_vision_encode_chw(hf, chw, w, h, a, &err), &err);
    CHECK_OK(gm_vision_encode_chw(gg, chw, w, h, b, &err), &err);
    double md = 0, mb = 0;
    for (int i = 0; i < n; i++) md = fmax(md, fabs((double)a[i] - b[i])), mb = fmax(mb, fabs((double)b[i]));
    fprintf(stderr, "  %s vs %s: %d x %d, max |diff| %.3g, max |out| %.3g\n", folder, file, tokens, D, md, mb);
    CHECK(mb > 0.1);
    if (tol == 0) CHECK_MSG(!memcmp(a, b, (size_t)n * sizeof *a), "%s: not bit-identical (max diff %g)", folder, md);
    else CHECK_MSG(md <= tol * mb, "%s: max diff %g > %g x %g", folder, md, tol, mb);
    free(a);
    free(b);
done:
    free(chw);
    gm_vision_free(hf);
    gm_vision_free(gg);
}

TEST(gemma3_folder) {
    check_pair("g3", "g3.gguf", "input_g3.f32", 16, 16, 4, 0);
    gm_vision *v = open_rel("vision/hf/g3");
    if (!v) return;
    float mean[3], std[3];
    gm_vision_mean_std(v, mean, std);
    CHECK(mean[0] == 0.25f && mean[1] == 0.5f && mean[2] == 0.75f); /* preprocessor_config.json's */
    CHECK(std[0] == 0.5f && std[1] == 0.25f && std[2] == 1.0f);
    CHECK_EQ_INT(gm_vision_family(v), 3);
    CHECK_EQ_INT(gm_vision_image_size(v), 16);
    CHECK_EQ_INT(gm_vision_n_tokens(v), 4);
    CHECK_EQ_INT(gm_vision_embd_dim(v), 20);
    gm_vision_free(v);
}

TEST(gemma3_old_names_sharded) {
    check_pair("g3_old", "g3_old.gguf", "input_g3.f32", 16, 16, 4, 2e-3);
    gm_vision *v = open_rel("vision/hf/g3_old");
    if (!v) return;
    float mean[3], std[3];
    gm_vision_mean_std(v, mean, std);
    CHECK(mean[0] == 0.5f && std[2] == 0.5f); /* no preprocessor_config.json: Gemma 3's defaults */
    gm_vision_free(v);
}

TEST(gemma4_folder) {
    check_pair("g4", "g4.gguf", "input_g4.f32", 48, 24, 2, 0);
    gm_vision *v = open_rel("vision/hf/g4");
    if (!v) return;
    float mean[3], std[3];
    gm_vision_mean_std(v, mean, std);
    CHECK(mean[0] == 0 && mean[2] == 0 && std[0] == 1 && std[2] == 1); /* do_normalize false */
    CHECK_EQ_INT(gm_vision_family(v), 4);
    gm_vision_info i;
    gm_vision_get_info(v, &i);
    CHECK(!strcmp(i.activation, "gelu-tanh"));
    gm_vision_free(v);
}

static void check_refused(const char *path, gm_status want, const char *needle) {
    gm_error err = {0};
    gm_vision *v = (gm_vision *)&err;
    gm_status st = gm_vision_open(path, NULL, &v, &err);
    CHECK_MSG(st == want, "%s: status %s, expected %s: %s", path, gm_status_name(st), gm_status_name(want), err.msg);
    CHECK(v == NULL);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: message \"%s\" does not name \"%s\"", path, err.msg, needle);
}

/* A scratch folder holding config.json (text) and a link to g3's safetensors. */
static void make_folder(const char *dir, const char *config) {
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(config, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    CHECK(symlink(test_data_path("vision/hf/g3/model.safetensors"), p) == 0);
}

static void cleanup(const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    rmdir(dir);
}

TEST(refusals) {
    check_refused(test_data_path("vision/hf/bad_missing"), GM_ERR_NOT_FOUND,
                  "model.vision_tower.vision_model.encoder.layers.1.mlp.fc2.bias is missing");
    check_refused(test_data_path("vision/hf/bad_extra"), GM_ERR_UNSUPPORTED,
                  "model.vision_tower.encoder.layers.0.self_attn.q_proj.linear.bias");
    char dir[] = "/tmp/gm_vision_hf_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(false);
        return;
    }
    check_refused(dir, GM_ERR_NOT_FOUND, "no config.json");
    const char *vc = "\"vision_config\": {\"model_type\": \"siglip_vision_model\", \"hidden_size\": 16, "
                     "\"image_size\": 16, \"num_attention_heads\": 2, \"num_hidden_layers\": 2, \"patch_size\": 4, ";
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "{\"model_type\": \"gemma3\", \"mm_tokens_per_image\": 4, \"text_config\": "
             "{\"hidden_size\": 20}, %s \"intermediate_size\": 32}}", vc);
    make_folder(dir, cfg);
    check_refused(dir, GM_ERR_FORMAT, "layers.0.mlp.fc1.weight has shape [24, 16], config.json makes it [32, 16]");
    snprintf(cfg, sizeof cfg, "{\"model_type\": \"gemma3\", \"text_config\": {\"hidden_size\": 20}, %s "
             "\"intermediate_size\": 24}}", vc);
    make_folder(dir, cfg);
    check_refused(dir, GM_ERR_UNSUPPORTED, "mm_tokens_per_image 256"); /* the default: 4 x 4 patches cannot pool to it */
    make_folder(dir, "{\"model_type\": \"gemma3_text\", \"hidden_size\": 20}");
    check_refused(dir, GM_ERR_NOT_FOUND, "no vision_config");
    make_folder(dir, "{\"model_type\": \"gemma3n\", \"vision_config\": {\"model_type\": \"gemma3n_vision\"}}");
    check_refused(dir, GM_ERR_UNSUPPORTED, "gemma3n_vision");
    snprintf(cfg, sizeof cfg, "{\"model_type\": \"gemma3\", \"mm_tokens_per_image\": 4, %s \"intermediate_size\": 24}}",
             vc);
    make_folder(dir, cfg);
    check_refused(dir, GM_ERR_NOT_FOUND, "text_config.hidden_size is missing");
    cleanup(dir);
}

int main(void) {
    RUN(gemma3_folder);
    RUN(gemma3_old_names_sharded);
    RUN(gemma4_folder);
    RUN(refusals);
    return test_summary();
}
