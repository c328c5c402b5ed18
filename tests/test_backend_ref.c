/* tests/test_backend_ref.c — the second backend proves the seam: every family's tiny model and the default
 * model run through the reference backend (backends/ref/: plain loops, double sums) and the CPU backend with
 * the same forward pass (runtime/forward.c), and their logits agree within the stated tolerances.
 *
 * The two differ by rounding only. The CPU backend quantizes activations to 8 bits for quantized weights
 * and sums in f32 in blocked orders; the reference dequantizes weights and sums in double. Measured on
 * Zen 4 (AVX-512, also with GEMMA_ISA=avx2 / scalar) when this test was written:
 *   tiny models (F32 weights, every family): KL <= 7e-12, max |dlogit| <= 2e-5 against logit spreads of
 *   8-68, top-1 and 12 greedy tokens identical; the embedding model's vector: cosine 1 - 1e-12;
 *   default model (Q4_K_M, 37 tokens of English): KL mean 0.0052, max 0.014, top-1 33 of 37 — the size of
 *   the CPU's documented distance to a float64 reference on long text (docs/perplexity.md: KL 0.0047).
 * The bounds are a few times those figures, far below what a real bug gives (a wrong mask, window, RoPE
 * or norm moves KL to 0.1 and beyond, and the logits of the tiny models by whole units). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemma.h"
#include "gemma_generator.h"
#include "support/test.h"
#include "support/tiny_gemma3n.h"

typedef struct cmp_stats {
    double kl_max, kl_mean, dlogit_max;
    double spread_min; /* the smallest (max - min) of a reference logit row: what dlogit is measured against */
    double step_min;   /* the smallest max |change| of the reference logits from one position to the next */
    int top1_agree, n;
} cmp_stats;

/* An image span in the prompt (NULL: none): its rows at `at`, both ways inside it. */
static const gm_prompt_span *g_span;

/* Logits of every position of ids (and g_span's rows) under one backend: n x V. */
static float *logits_on(const gm_model *m, gm_backend_kind kind, const int32_t *ids, int n) {
    gm_error err = {0};
    gm_generator *g = NULL;
    const gm_generator_options o = {.n_threads = gm_test_threads(2), .n_batch = 16, .backend = kind};
    const int V = gm_model_config(m)->n_vocab;
    float *out = malloc((size_t)n * V * sizeof *out);
    CHECK_OK(gm_generator_new(m, &o, &g, &err), &err);
    if (!g) {
        free(out);
        return NULL;
    }
    if (g_span) n -= g_span->span.n; /* n positions in all */
    CHECK_OK(gm_generator_prefill_spans(g, ids, n, g_span, g_span ? 1 : 0, &err), &err);
    CHECK_OK(gm_generator_score(g, out, &err), &err);
    gm_generator_free(g);
    return out;
}

static cmp_stats compare(const gm_model *m, const int32_t *ids, int n) {
    cmp_stats s = {.spread_min = INFINITY, .step_min = INFINITY};
    const int V = gm_model_config(m)->n_vocab;
    float *ref = logits_on(m, GM_BACKEND_REFERENCE, ids, n), *cpu = logits_on(m, GM_BACKEND_CPU, ids, n);
    if (ref && cpu) {
        for (int p = 0; p < n; p++) {
            const float *a = ref + (size_t)p * V, *b = cpu + (size_t)p * V;
            const double kl = test_kl(a, b, V);
            s.kl_max = kl > s.kl_max ? kl : s.kl_max;
            s.kl_mean += kl / n;
            s.top1_agree += test_argmax(a, V) == test_argmax(b, V);
            double lo = a[0], hi = a[0], step = 0.0;
            for (int i = 0; i < V; i++) {
                const double dl = fabs((double)a[i] - b[i]);
                s.dlogit_max = dl > s.dlogit_max ? dl : s.dlogit_max;
                lo = fmin(lo, a[i]), hi = fmax(hi, a[i]);
                if (p > 0) step = fmax(step, fabs((double)a[i] - a[i - V]));
            }
            s.spread_min = fmin(s.spread_min, hi - lo);
            if (p > 0) s.step_min = fmin(s.step_min, step);
        }
        s.n = n;
    }
    free(ref);
    free(cpu);
    return s;
}

/* The default model reads real text: random ids give flat, unstable distributions. */
static int ids_of_text(const gm_model *m, int32_t *ids, int cap) {
    static const char text[] =
        "The old lighthouse keeper climbed the spiral stairs every evening at dusk. He checked the lamp, wiped "
        "the salt from the windows and wrote the weather in his log before the ships passed.";
    gm_error err = {0};
    int32_t *all = NULL;
    size_t n = 0;
    CHECK_OK(gm_tokenize(gm_model_tokenizer(m), text, sizeof text - 1, true, false, &all, &n, &err), &err);
    const int k = (int)n < cap ? (int)n : cap;
    if (all) memcpy(ids, all, (size_t)k * sizeof *ids);
    free(all);
    return k;
}

typedef struct bounds {
    double kl_max, kl_mean, dlogit_rel; /* dlogit_rel: max |dlogit| / the smallest logit spread */
    double top1_min;                    /* fraction of positions */
    int n_greedy;
} bounds;

static void check_model(const char *path, bool text, int n, bounds b) {
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(path, NULL, &m, &err), &err);
    if (!m) return;
    int32_t ids[64];
    if (text) n = ids_of_text(m, ids, n);
    else test_ids_for(m, ids, n);
    const cmp_stats s = compare(m, ids, n);
    fprintf(stderr, "  %-48s KL max %.2e mean %.2e, max |dlogit| %.2e (spread >= %.3f, step >= %.3f), top-1 %d/%d\n",
            path, s.kl_max, s.kl_mean, s.dlogit_max, s.spread_min, s.step_min, s.top1_agree, s.n);
    CHECK_EQ_INT(s.n, n);
    CHECK_MSG(s.kl_max <= b.kl_max && s.kl_mean <= b.kl_mean, "%s: KL max %.3g mean %.3g", path, s.kl_max, s.kl_mean);
    CHECK_MSG(s.dlogit_max <= b.dlogit_rel * s.spread_min, "%s: max |dlogit| %.4g", path, s.dlogit_max);
    CHECK_MSG(s.top1_agree >= b.top1_min * n, "%s: top-1 agreement %d of %d", path, s.top1_agree, n);
    if (b.n_greedy > 0) {
        int32_t x[16], y[16];
        test_greedy(m, GM_BACKEND_REFERENCE, ids, 8, b.n_greedy, x);
        test_greedy(m, GM_BACKEND_CPU, ids, 8, b.n_greedy, y);
        CHECK_MSG(!memcmp(x, y, (size_t)b.n_greedy * sizeof *x), "%s: greedy tokens differ", path);
    }
    gm_model_free(m);
}

/* F32 weights, no activation quantization: the backends agree to f32 rounding */
static const bounds tiny_bounds = {.kl_max = 1e-9, .kl_mean = 1e-9, .dlogit_rel = 1e-5, .top1_min = 1.0, .n_greedy = 12};

TEST(tiny_families) {
    static const char *files[] = {"tiny/gemma.gguf", "tiny/gemma2.gguf", "tiny/gemma3.gguf",
                                  "gemma4/gemma4-dense.gguf", "gemma4/gemma4-moe.gguf", "gemma4/gemma4-ple.gguf"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", GM_TEST_DATA, files[i]);
        check_model(path, false, 40, tiny_bounds);
    }
}

/* An image's rows inside the prompt (attention both ways inside the span, sliding windows around it): the
 * reference backend's key ranges against the CPU backend's, on the Gemma 3 and Gemma 4 tiny models. */
TEST(image_span) {
    static const char *files[] = {"tiny/gemma3.gguf", "gemma4/gemma4-dense.gguf"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", GM_TEST_DATA, files[i]);
        gm_error err = {0};
        gm_model *m = NULL;
        CHECK_OK(gm_model_open(path, NULL, &m, &err), &err);
        if (!m) continue;
        const int d = gm_model_config(m)->d_model, R = 12;
        float *rows = malloc((size_t)R * d * sizeof *rows);
        for (int k = 0; k < R * d; k++) rows[k] = (float)((k * 7919) % 2001) / 1000.0f - 1.0f;
        for (int sliding_only = 0; sliding_only < 2; sliding_only++) { /* every layer both ways; llama.cpp's Gemma 4 */
            const gm_prompt_span sp = {.at = 9, .span = {.embeds = rows, .n = R, .placeholder = 0, .key = {1, 2},
                                                         .bidirectional = true, .sliding_only = sliding_only}};
            int32_t ids[40];
            test_ids_for(m, ids, 40);
            g_span = &sp;
            const cmp_stats st = compare(m, ids, 40);
            g_span = NULL;
            fprintf(stderr, "  %-48s image span%s: KL max %.2e, max |dlogit| %.2e (spread >= %.3f), top-1 %d/%d\n",
                    path, sliding_only ? " (sliding layers only)" : "", st.kl_max, st.dlogit_max, st.spread_min,
                    st.top1_agree, st.n);
            CHECK_EQ_INT(st.n, 40);
            CHECK_MSG(st.kl_max <= tiny_bounds.kl_max && st.dlogit_max <= tiny_bounds.dlogit_rel * st.spread_min,
                      "%s: image span: KL %.3g, max |dlogit| %.3g", path, st.kl_max, st.dlogit_max);
            CHECK_EQ_INT(st.top1_agree, 40);
        }
        free(rows);
        gm_model_free(m);
    }
}

TEST(tiny_gemma3n) {
    char path[256], msg[256];
    snprintf(path, sizeof path, "/tmp/gm_ref_gemma3n_%d.gguf", (int)getpid());
    t3n_options o;
    t3n_options_default(&o);
    CHECK_MSG(t3n_write_gguf(&o, path, msg, sizeof msg), "%s", msg);
    check_model(path, false, 40, tiny_bounds);
    unlink(path);
}

/* Bidirectional attention and the pooled vector (EmbeddingGemma's path) */
TEST(embedding) {
    char path[512];
    snprintf(path, sizeof path, "%s/embedding/dense.gguf", GM_TEST_DATA);
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(path, NULL, &m, &err), &err);
    if (!m) return;
    int32_t ids[24];
    test_ids_for(m, ids, 24);
    float *v[2] = {0};
    int dim = 0;
    for (int k = 0; k < 2; k++) {
        gm_embedder *e = NULL;
        const gm_embedder_options eo = {.n_threads = gm_test_threads(2), .backend = k ? GM_BACKEND_CPU : GM_BACKEND_REFERENCE};
        CHECK_OK(gm_embedder_new(m, &eo, &e, &err), &err);
        if (!e) break;
        dim = gm_embedder_dim(e);
        v[k] = malloc((size_t)dim * sizeof *v[k]);
        CHECK_OK(gm_embed_tokens(e, ids, 24, v[k], &err), &err);
        gm_embedder_free(e);
    }
    if (v[0] && v[1]) {
        double dot = 0.0, n0 = 0.0, n1 = 0.0, dmax = 0.0;
        for (int i = 0; i < dim; i++) {
            dot += (double)v[0][i] * v[1][i], n0 += (double)v[0][i] * v[0][i], n1 += (double)v[1][i] * v[1][i];
            dmax = fmax(dmax, fabs((double)v[0][i] - v[1][i]));
        }
        const double cosine = dot / sqrt(n0 * n1);
        fprintf(stderr, "  embedding: cosine %.12f, max |d| %.2e of |v| %.3f\n", cosine, dmax, sqrt(n0));
        CHECK_MSG(cosine > 1.0 - 1e-9 && dmax < 1e-5 * sqrt(n0), "cosine %.12f, max |d| %.3g", cosine, dmax);
    }
    free(v[0]);
    free(v[1]);
    gm_model_free(m);
}

TEST(default_model) {
    if (!test_have_default_model(__func__)) return;
    /* 8-bit activations on the CPU (docs/perplexity.md: against a float64 reference on long text, KL 0.0047
     * and top-1 95.6%; llama.cpp 0.0046 / 95.8%) */
    const bounds q4 = {.kl_max = 0.1, .kl_mean = 0.02, .dlogit_rel = 0.2, .top1_min = 0.8};
    check_model(GM_DEFAULT_MODEL, true, getenv("GM_SANITIZER_BUILD") ? 12 : 48, q4); /* the reference is slow there */
}

/* An unknown backend is refused, not silently replaced. */
TEST(unknown_backend) {
    char path[512];
    snprintf(path, sizeof path, "%s/tiny/gemma3.gguf", GM_TEST_DATA);
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(path, NULL, &m, &err), &err);
    if (!m) return;
    gm_engine *e = NULL;
    const gm_engine_options o = {.backend = (gm_backend_kind)7};
    CHECK(gm_engine_new(m, &o, &e, &err) == GM_ERR_ARG && !e && strstr(err.msg, "backend"));
    gm_backend_kind k = GM_BACKEND_CPU;
    CHECK(gm_backend_kind_parse("reference", &k) && k == GM_BACKEND_REFERENCE);
    CHECK(gm_backend_kind_parse("cpu", &k) && k == GM_BACKEND_CPU);
    CHECK(!gm_backend_kind_parse("cuda", &k) && !gm_backend_kind_parse("", &k));
    gm_model_free(m);
}

int main(void) {
    RUN(tiny_families);
    RUN(image_span);
    RUN(tiny_gemma3n);
    RUN(embedding);
    RUN(default_model);
    RUN(unknown_backend);
    return test_summary();
}
