/* tests/test_vulkan.c — the Vulkan backend (backends/vulkan/) against the reference backend, on whatever Vulkan
 * device is present: Mesa's lavapipe in CI (a conformant Vulkan 1.3 device on the CPU), with the Khronos
 * validation layer on (a validation error fails the call it follows, so any one fails this test).
 *
 * What is checked:
 *   - every weight type the shaders read (tiny Gemma 3 models written in each type, logits of 24 positions):
 *     the Vulkan backend dequantizes to f32 and sums in f32; the reference backend dequantizes to f32 and sums in
 *     double, so they differ by f32 rounding only;
 *   - every tiny family model that runs on it (Gemma 1, 2, 3: windows, soft-caps, query scales, the KV in F32 and
 *     F16) and an image span (rows attending both ways): KL, max |dlogit|, top-1 and greedy tokens;
 *   - batch invariance: a sequence's logits alone == beside seven others in one engine == computed in chunks of 5,
 *     bit for bit;
 *   - the default model (Q4_K_M: Q8_0, Q5_0, Q4_K, Q6_K) against the reference on real text, and the CPU backend's
 *     distance to the reference beside it;
 *   - refusals: Gemma 3n / Gemma 4 (host-code hooks) by name; AUTO picks the CPU when only a CPU device exists.
 * Without a Vulkan build or device the test is skipped (77), unless GM_REQUIRE_VULKAN is set (CI sets it). */
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
#include "support/tiny_model.h"

typedef struct cmp_stats {
    double kl_max, dlogit_max, spread_min;
    int top1_agree, n;
} cmp_stats;

static const gm_prompt_span *g_span; /* an image span in the prompt (NULL: none) */
static gm_kv_dtype g_kv = GM_KV_DTYPE_F32;

/* logits of every position of ids under one backend: n x V (n_batch: the chunk size) */
static float *logits_on(const gm_model *m, gm_backend_kind kind, const int32_t *ids, int n, int n_batch) {
    gm_error err = {0};
    gm_generator *g = NULL;
    const gm_generator_options o = {.n_threads = gm_test_threads(2), .n_batch = n_batch, .backend = kind,
                                    .kv_type = g_kv, .gpu_validate = kind == GM_BACKEND_VULKAN};
    const int V = gm_model_config(m)->n_vocab;
    float *out = malloc((size_t)n * V * sizeof *out);
    CHECK_OK(gm_generator_new(m, &o, &g, &err), &err);
    if (!g) {
        free(out);
        return NULL;
    }
    if (g_span) n -= g_span->span.n;
    CHECK_OK(gm_generator_prefill_spans(g, ids, n, g_span, g_span ? 1 : 0, &err), &err);
    CHECK_OK(gm_generator_score(g, out, &err), &err);
    gm_generator_free(g);
    return out;
}

static cmp_stats compare_rows(const float *ref, const float *got, int n, int V) {
    cmp_stats s = {.spread_min = INFINITY, .n = n};
    for (int p = 0; p < n; p++) {
        const float *a = ref + (size_t)p * V, *b = got + (size_t)p * V;
        s.kl_max = fmax(s.kl_max, test_kl(a, b, V));
        s.top1_agree += test_argmax(a, V) == test_argmax(b, V);
        double lo = a[0], hi = a[0];
        for (int i = 0; i < V; i++) {
            s.dlogit_max = fmax(s.dlogit_max, fabs((double)a[i] - b[i]));
            lo = fmin(lo, a[i]), hi = fmax(hi, a[i]);
        }
        s.spread_min = fmin(s.spread_min, hi - lo);
    }
    return s;
}

static cmp_stats compare(const gm_model *m, gm_backend_kind kind, const int32_t *ids, int n) {
    const int V = gm_model_config(m)->n_vocab;
    float *ref = logits_on(m, GM_BACKEND_REFERENCE, ids, n, 16), *got = logits_on(m, kind, ids, n, 16);
    cmp_stats s = {0};
    if (ref && got) s = compare_rows(ref, got, n, V);
    free(ref);
    free(got);
    return s;
}

/* f32 sums against double ones: measured on lavapipe (Zen 3) when written: tiny models KL <= 2e-12, max |dlogit|
 * <= 1e-5 of spreads >= 2; the bounds are ~10x that, far below what a wrong mask, window or scale gives */
static const double KL_TINY = 1e-9, DLOGIT_TINY = 1e-4;

static void check_tiny(const char *what, const gm_model *m, int n, bool with_greedy) {
    int32_t ids[64];
    test_ids_for(m, ids, n);
    const cmp_stats s = compare(m, GM_BACKEND_VULKAN, ids, n);
    fprintf(stderr, "  %-40s KL max %.2e, max |dlogit| %.2e (spread >= %.2f), top-1 %d/%d\n", what, s.kl_max,
            s.dlogit_max, s.spread_min, s.top1_agree, s.n);
    CHECK_EQ_INT(s.n, n);
    CHECK_MSG(s.kl_max <= KL_TINY && s.dlogit_max <= DLOGIT_TINY * s.spread_min, "%s: KL %.3g, max |dlogit| %.3g",
              what, s.kl_max, s.dlogit_max);
    CHECK_EQ_INT(s.top1_agree, n);
    if (with_greedy) {
        int32_t x[12], y[12];
        test_greedy(m, GM_BACKEND_REFERENCE, ids, 8, 12, x);
        test_greedy(m, GM_BACKEND_VULKAN, ids, 8, 12, y);
        CHECK_MSG(!memcmp(x, y, sizeof x), "%s: greedy tokens differ", what);
    }
}

static gm_model *open_data(const char *rel) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", GM_TEST_DATA, rel);
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(path, NULL, &m, &err), &err);
    return m;
}

TEST(weight_types) {
    static const int types[] = {GM_TYPE_F32, GM_TYPE_F16, GM_TYPE_BF16, GM_TYPE_Q4_0, GM_TYPE_Q4_1, GM_TYPE_Q5_0,
                                GM_TYPE_Q5_1, GM_TYPE_Q8_0, GM_TYPE_Q4_K, GM_TYPE_Q5_K, GM_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        tm_options o;
        tm_options_default(&o, "gemma3");
        o.d_model = o.d_ff = 256, o.n_heads = 4, o.n_kv_heads = 2, o.head_dim = 64; /* rows of 256: K-quant blocks */
        o.weight_type = o.embd_type = types[i];
        char path[128], msg[256], what[64];
        snprintf(path, sizeof path, "/tmp/gm_vk_type_%d_%d.gguf", types[i], (int)getpid());
        CHECK_MSG(tm_write_gguf(&o, path, msg, sizeof msg), "%s", msg);
        gm_error err = {0};
        gm_model *m = NULL;
        CHECK_OK(gm_model_open(path, NULL, &m, &err), &err);
        unlink(path);
        if (!m) continue;
        snprintf(what, sizeof what, "gemma3 tiny, %s weights", gm_type_name(types[i]));
        check_tiny(what, m, 24, false);
        gm_model_free(m);
    }
}

TEST(tiny_families) {
    static const char *files[] = {"tiny/gemma.gguf", "tiny/gemma2.gguf", "tiny/gemma3.gguf"};
    for (int kv = 0; kv < 2; kv++) {
        g_kv = kv ? GM_KV_DTYPE_F16 : GM_KV_DTYPE_F32;
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            gm_model *m = open_data(files[i]);
            if (!m) continue;
            char what[96];
            snprintf(what, sizeof what, "%s, KV %s", files[i], kv ? "F16" : "F32");
            check_tiny(what, m, 40, kv == 0);
            gm_model_free(m);
        }
    }
    g_kv = GM_KV_DTYPE_F32;
}

TEST(image_span) {
    gm_model *m = open_data("tiny/gemma3.gguf");
    if (!m) return;
    const int d = gm_model_config(m)->d_model, R = 12;
    float *rows = malloc((size_t)R * d * sizeof *rows);
    for (int k = 0; k < R * d; k++) rows[k] = (float)((k * 7919) % 2001) / 1000.0f - 1.0f;
    const gm_prompt_span sp = {.at = 9, .span = {.embeds = rows, .n = R, .placeholder = 0, .key = {1, 2},
                                                 .bidirectional = true}};
    g_span = &sp;
    check_tiny("tiny/gemma3.gguf with an image span", m, 40, false);
    g_span = NULL;
    free(rows);
    gm_model_free(m);
}

/* A sequence's logits: computed alone in chunks of 64 == in chunks of 5 == beside 7 other sequences. */
TEST(batch_invariance) {
    gm_model *m = open_data("tiny/gemma3.gguf");
    if (!m) return;
    const int V = gm_model_config(m)->n_vocab, N = 8, L = 30;
    int32_t ids[8][30];
    for (int s = 0; s < N; s++)
        for (int i = 0; i < L; i++) ids[s][i] = i ? (int32_t)((s * 131 + i * 7919) % (V - 8)) + 4 : 2;
    float *alone = logits_on(m, GM_BACKEND_VULKAN, ids[3], L, 64), *chunked = logits_on(m, GM_BACKEND_VULKAN, ids[3], L, 5);
    gm_error err = {0};
    gm_engine *e = NULL;
    const gm_engine_options eo = {.n_ctx = 64, .n_batch = 256, .kv_mem = (size_t)16 << 20, .backend = GM_BACKEND_VULKAN,
                                  .gpu_validate = true};
    CHECK_OK(gm_engine_new(m, &eo, &e, &err), &err);
    gm_seq *seqs[8] = {0};
    for (int s = 0; e && s < N; s++) {
        CHECK_OK(gm_seq_new(e, &seqs[s], &err), &err);
        CHECK_OK(gm_seq_append(seqs[s], ids[s], s == 3 ? L : L - s, &err), &err);
    }
    if (e) CHECK_OK(gm_engine_eval(e, seqs, N, &err), &err);
    const float *last = e && seqs[3] ? gm_seq_logits(seqs[3]) : NULL;
    CHECK(alone && chunked && last);
    if (alone && chunked && last) {
        CHECK_MSG(!memcmp(alone, chunked, (size_t)L * V * sizeof *alone), "chunks of 5 differ from one chunk");
        CHECK_MSG(!memcmp(alone + (size_t)(L - 1) * V, last, (size_t)V * sizeof *last),
                  "the last position beside 7 sequences differs from alone");
    }
    for (int s = 0; s < N; s++) gm_seq_free(seqs[s]);
    gm_engine_free(e);
    free(alone);
    free(chunked);
    gm_model_free(m);
}

/* Decode steps of one shape replay a recorded command buffer; the tokens are those of a run that records every
 * step (the reference's: greedy equality is checked in tiny_families). */
TEST(replays) {
    gm_model *m = open_data("tiny/gemma3.gguf");
    if (!m) return;
    gm_error err = {0};
    gm_generator *g = NULL;
    const gm_generator_options o = {.n_threads = 1, .ignore_stop = true, .backend = GM_BACKEND_VULKAN, .gpu_validate = true};
    CHECK_OK(gm_generator_new(m, &o, &g, &err), &err);
    if (g) {
        int32_t ids[8], out[24];
        test_ids_for(m, ids, 8);
        int got = 0;
        const gm_sampling greedy_s = gm_sampling_default();
        CHECK_OK(gm_generator_prefill(g, ids, 8, &err), &err);
        CHECK_OK(gm_generator_generate_cached(g, 24, &greedy_s, out, &got, &err), &err);
        gm_backend_stats s;
        gm_engine_backend_stats(gm_generator_engine(g), &s);
        fprintf(stderr, "  24 decode steps: %lld submissions, %lld recorded, %lld replayed, %lld dispatches\n",
                (long long)s.submits, (long long)s.recordings, (long long)s.replays, (long long)s.dispatches);
        CHECK_MSG(s.replays >= 30 && s.recordings + s.replays == s.submits, "recorded %lld, replayed %lld of %lld",
                  (long long)s.recordings, (long long)s.replays, (long long)s.submits);
        gm_generator_free(g);
    }
    gm_backend_stats z;
    gm_engine_backend_stats(NULL, &z);
    CHECK(z.submits == 0 && z.replays == 0);
    gm_model_free(m);
}

/* The default model on real text against the reference; the CPU backend's distance beside it. */
TEST(default_model) {
    if (!test_have_default_model(__func__)) return;
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(GM_DEFAULT_MODEL, NULL, &m, &err), &err);
    if (!m) return;
    static const char text[] = "The old lighthouse keeper climbed the spiral stairs every evening at dusk. He checked "
                               "the lamp and wrote the weather in his log.";
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(gm_tokenize(gm_model_tokenizer(m), text, sizeof text - 1, true, false, &ids, &n, &err), &err);
    const int V = gm_model_config(m)->n_vocab;
    float *ref = logits_on(m, GM_BACKEND_REFERENCE, ids, (int)n, 32), *vk = logits_on(m, GM_BACKEND_VULKAN, ids, (int)n, 32),
          *cpu = logits_on(m, GM_BACKEND_CPU, ids, (int)n, 32);
    if (ref && vk && cpu) {
        const cmp_stats sv = compare_rows(ref, vk, (int)n, V), sc = compare_rows(ref, cpu, (int)n, V);
        fprintf(stderr, "  default model, %d tokens: vulkan KL max %.2e, max |dlogit| %.2e, top-1 %d/%d; cpu KL max "
                "%.2e, max |dlogit| %.2e, top-1 %d/%d\n", (int)n, sv.kl_max, sv.dlogit_max, sv.top1_agree, sv.n,
                sc.kl_max, sc.dlogit_max, sc.top1_agree, sc.n);
        /* f32 sums of dequantized weights: measured KL max 2e-10 (the CPU's 8-bit activations: ~1e-2) */
        CHECK_MSG(sv.kl_max <= 1e-7 && sv.top1_agree == (int)n, "vulkan: KL %.3g, top-1 %d of %d", sv.kl_max,
                  sv.top1_agree, (int)n);
    }
    free(ref), free(vk), free(cpu), free(ids);
    gm_model_free(m);
}

TEST(refusals) {
    char path[256], msg[256];
    snprintf(path, sizeof path, "/tmp/gm_vk_gemma3n_%d.gguf", (int)getpid());
    t3n_options o;
    t3n_options_default(&o);
    CHECK_MSG(t3n_write_gguf(&o, path, msg, sizeof msg), "%s", msg);
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(path, NULL, &m, &err), &err);
    unlink(path);
    if (m) {
        gm_engine *e = NULL;
        const gm_engine_options eo = {.backend = GM_BACKEND_VULKAN};
        CHECK(gm_engine_new(m, &eo, &e, &err) == GM_ERR_UNSUPPORTED && !e && strstr(err.msg, "vulkan"));
        fprintf(stderr, "  gemma3n on vulkan: %s\n", err.msg);
        /* AUTO: the CPU, when no GPU can run it */
        const gm_engine_options ao = {.backend = GM_BACKEND_AUTO};
        CHECK_OK(gm_engine_new(m, &ao, &e, &err), &err);
        if (e) CHECK(!strcmp(gm_engine_backend_name(e), "cpu"));
        gm_engine_free(e);
        gm_model_free(m);
    }
    gm_backend_kind k = GM_BACKEND_CPU;
    CHECK(gm_backend_kind_parse("vulkan", &k) && k == GM_BACKEND_VULKAN);
    CHECK(gm_backend_kind_parse("auto", &k) && k == GM_BACKEND_AUTO);
    m = open_data("tiny/gemma3.gguf");
    if (m) {
        gm_engine *e = NULL;
        const gm_engine_options eo = {.backend = GM_BACKEND_VULKAN, .device = 60};
        CHECK(gm_engine_new(m, &eo, &e, &err) == GM_ERR_ARG && !e && strstr(err.msg, "no device"));
        gm_model_free(m);
    }
}

int main(void) {
    gm_gpu_device d[8];
    int n = 0;
    gm_error err = {0};
    if (gm_gpu_devices(d, 8, &n, &err) || n == 0) {
        fprintf(stderr, "no Vulkan device: %s\n", n ? "" : err.msg[0] ? err.msg : "none listed");
        if (!getenv("GM_REQUIRE_VULKAN")) return 77;
        return 1;
    }
    for (int i = 0; i < n && i < 8; i++)
        fprintf(stderr, "  device %d: %s (%s, Vulkan %s)%s%s\n", i, d[i].name, d[i].type, d[i].api,
                d[i].usable ? "" : ", lacks ", d[i].missing);
    RUN(weight_types);
    RUN(tiny_families);
    RUN(image_span);
    RUN(batch_invariance);
    RUN(replays);
    RUN(refusals);
    RUN(default_model);
    return test_summary();
}
