/* tests/test_llama_tiny.c — our logits against llama.cpp's on tiny synthetic Gemma 1 / 2 / 3 GGUFs.
 *
 * The models and logits were written by tests/gen/gen_tiny_llama_fixtures.py: the GGUF by the `gguf`
 * Python package (an independent writer), the logits by llama.cpp (F32 weights, F32 KV cache) for every
 * position of a 24-token sequence that runs past the 8-token sliding window. What separates the two
 * engines is rounding only: llama.cpp's CPU GELU reads an f16 table (|error| up to ~1e-3 per activation)
 * and the ops run in a different order. Tolerance: max |diff| <= 2e-2 on logits of magnitude up to ~70
 * (relative ~3e-4), and the argmax must agree at every position. A real error (a wrong norm, mask,
 * window, RoPE base, soft-cap or scale) moves logits by whole units. */
#include <stdlib.h>
#include <string.h>

#include "gemma.h"
#include "gemma_generator.h"
#include "support/test.h"

#define MAX_TOK 64
#define TOL 2e-2

typedef struct {
    int n_tok;
    int32_t tok[MAX_TOK];
    int n_vocab;
    float *logits; /* n_tok x n_vocab */
} fixture;

static bool load_fixture(const char *path, fixture *fx) {
    size_t len;
    char *text = (char *)test_read_file(path, &len);
    if (!text) return false;
    memset(fx, 0, sizeof *fx);
    int pos_seen = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *p = line, *end;
        if (!strncmp(line, "tokens ", 7)) {
            fx->n_tok = (int)strtol(p + 7, &p, 10);
            if (fx->n_tok <= 0 || fx->n_tok > MAX_TOK) break;
            for (int i = 0; i < fx->n_tok; i++) fx->tok[i] = (int32_t)strtol(p, &p, 10);
        } else if (!strncmp(line, "pos ", 4)) {
            int pos = (int)strtol(p + 4, &p, 10);
            float row[4096];
            int n = 0;
            for (;; n++) {
                float v = strtof(p, &end);
                if (end == p || n == 4096) break;
                row[n] = v, p = end;
            }
            if (!fx->logits) {
                fx->n_vocab = n;
                fx->logits = malloc(sizeof(float) * (size_t)n * (size_t)fx->n_tok);
            }
            if (pos != pos_seen || n != fx->n_vocab || pos >= fx->n_tok) break;
            memcpy(fx->logits + (size_t)pos * (size_t)n, row, sizeof(float) * (size_t)n);
            pos_seen++;
        }
    }
    free(text);
    return fx->logits && pos_seen == fx->n_tok;
}

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static void check_arch(const char *arch, int n_threads) {
    char path[256], lpath[256];
    snprintf(path, sizeof path, "tiny/%s.gguf", arch);
    snprintf(lpath, sizeof lpath, "%s", test_data_path(path));
    snprintf(path, sizeof path, "tiny/%s.logits.txt", arch);
    fixture fx;
    CHECK_MSG(load_fixture(test_data_path(path), &fx), "cannot parse %s", path);
    if (!fx.logits) return;
    gm_error err = {0};
    gm_model *m = NULL;
    gm_generator *g = NULL;
    CHECK_OK(gm_model_open(lpath, NULL, &m, &err), &err);
    gm_generator_options o = {.n_threads = gm_test_threads(n_threads), .n_ctx = 64};
    if (m) CHECK_OK(gm_generator_new(m, &o, &g, &err), &err);
    if (!g) goto out;
    CHECK_EQ_INT(gm_generator_config(g)->n_vocab, fx.n_vocab);
    float *ours = malloc(sizeof(float) * (size_t)fx.n_tok * (size_t)fx.n_vocab);
    CHECK_OK(gm_generator_prefill(g, fx.tok, fx.n_tok, &err), &err);
    CHECK_OK(gm_generator_score(g, ours, &err), &err);
    double max_diff = 0, max_abs = 0;
    int argmax_ok = 0;
    for (int p = 0; p < fx.n_tok; p++) {
        const float *a = ours + (size_t)p * (size_t)fx.n_vocab, *b = fx.logits + (size_t)p * (size_t)fx.n_vocab;
        for (int v = 0; v < fx.n_vocab; v++) {
            max_diff = fmax(max_diff, fabs((double)a[v] - (double)b[v]));
            max_abs = fmax(max_abs, fabs((double)b[v]));
        }
        argmax_ok += argmax(a, fx.n_vocab) == argmax(b, fx.n_vocab);
    }
    fprintf(stderr, "  %s (%d threads): max |ours - llama.cpp| = %.3g over %d positions (max |logit| %.1f), argmax %d/%d\n",
            arch, n_threads, max_diff, fx.n_tok, max_abs, argmax_ok, fx.n_tok);
    CHECK_MSG(max_diff <= TOL, "%s: max diff %g > %g", arch, max_diff, TOL);
    CHECK_EQ_INT(argmax_ok, fx.n_tok);
    free(ours);
out:
    gm_generator_free(g);
    gm_model_free(m);
    free(fx.logits);
}

TEST(gemma1_matches_llama_cpp) { check_arch("gemma", 1); }
TEST(gemma2_matches_llama_cpp) { check_arch("gemma2", 1); }
TEST(gemma3_matches_llama_cpp) { check_arch("gemma3", 1); }
TEST(gemma3_matches_llama_cpp_2_threads) { check_arch("gemma3", 2); }

int main(void) {
    RUN(gemma1_matches_llama_cpp);
    RUN(gemma2_matches_llama_cpp);
    RUN(gemma3_matches_llama_cpp);
    RUN(gemma3_matches_llama_cpp_2_threads);
    return test_summary();
}
