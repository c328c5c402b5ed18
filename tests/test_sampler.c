/* tests/test_sampler.c — sampling: validation, greedy, penalties (llama.cpp semantics), the
 * distributions after temperature / top-k / top-p / min-p (empirical frequencies against the exact
 * probabilities, 3-sigma-ish tolerance of 0.012 at 40000 draws), seeding, and the partial top-k
 * selection against a full sort. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"
#include "support/test.h"

static gm_sampler S;

/* The shared sampler has a vocabulary of 16; shorter logit arrays are padded with -inf. */
#define sample(o, l, h, nh) sample_n(o, l, (int)(sizeof(l) / sizeof((l)[0])), h, nh)
static int32_t sample_n(const gm_sampling *o, const float *logits, int n, const int32_t *hist, int n_hist) {
    float full[16];
    for (int i = 0; i < 16; i++) full[i] = i < n ? logits[i] : -INFINITY;
    int32_t t = -1;
    gm_error err = {0};
    CHECK_OK(gm_sampler_sample(&S, o, full, hist, n_hist, &t, &err), &err);
    return t;
}

TEST(validation) {
    gm_error err = {0};
    gm_sampling s = gm_sampling_default();
    CHECK_OK(gm_sampling_validate(&s, &err), &err);
    struct { const char *what; gm_sampling s; } bad[8];
    for (int i = 0; i < 8; i++) bad[i].s = gm_sampling_default();
    bad[0].what = "temperature"; bad[0].s.temperature = -0.1f;
    bad[1].what = "top_p"; bad[1].s.top_p = 0.0f;
    bad[2].what = "top_p"; bad[2].s.top_p = 1.5f;
    bad[3].what = "min_p"; bad[3].s.min_p = -0.1f;
    bad[4].what = "min_p"; bad[4].s.min_p = 1.1f;
    bad[5].what = "top_k"; bad[5].s.top_k = -1;
    bad[6].what = "repeat_penalty"; bad[6].s.repeat_penalty = 0.0f;
    bad[7].what = "repeat_last_n"; bad[7].s.repeat_last_n = -2;
    for (int i = 0; i < 8; i++) {
        memset(&err, 0, sizeof err);
        CHECK_EQ_INT(gm_sampling_validate(&bad[i].s, &err), GM_ERR_ARG);
        CHECK_MSG(strstr(err.msg, bad[i].what) != NULL, "message '%s' should name %s", err.msg, bad[i].what);
        float l[16] = {0, 1};
        int32_t t;
        CHECK_EQ_INT(gm_sampler_sample(&S, &bad[i].s, l, NULL, 0, &t, &err), GM_ERR_ARG);
    }
    s.temperature = NAN;
    CHECK_EQ_INT(gm_sampling_validate(&s, &err), GM_ERR_ARG);
}

TEST(greedy_and_ties) {
    gm_sampling s = gm_sampling_default();
    float l[5] = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f};
    CHECK_EQ_INT(sample(&s, l, NULL, 0), 1); /* tie: the lower id */
    s.temperature = 1.0f;
    s.top_k = 1;
    for (int i = 0; i < 20; i++) CHECK_EQ_INT(sample(&s, l, NULL, 0), 1);
}

TEST(penalties) {
    gm_sampling s = gm_sampling_default();
    s.repeat_penalty = 2.0f;
    float a[3] = {2.0f, -2.0f, 1.5f};
    int32_t h0[1] = {0};
    CHECK_EQ_INT(sample(&s, a, h0, 1), 2);  /* positive logit divided: 2 -> 1 < 1.5 */
    float b[2] = {-1.0f, -1.5f};
    CHECK_EQ_INT(sample(&s, b, h0, 1), 1);  /* negative logit multiplied: -1 -> -2 < -1.5 */
    int32_t h1[4] = {0, 1, 1, 1};
    float c[2] = {2.0f, 1.5f};
    s.repeat_last_n = 1;                    /* only the last token (1) is in the window */
    CHECK_EQ_INT(sample(&s, c, h1, 4), 0);
    s.repeat_last_n = -1;                   /* whole history: both penalised, 1 < 0.75 */
    CHECK_EQ_INT(sample(&s, c, h1, 4), 0);
    s.repeat_last_n = 0;                    /* none */
    CHECK_EQ_INT(sample(&s, c, h1, 4), 0);
    s = gm_sampling_default();
    float d[2] = {1.0f, 0.5f};
    int32_t h2[3] = {0, 0, 0};
    s.frequency_penalty = 0.1f;             /* 1 - 3*0.1 = 0.7 > 0.5 */
    CHECK_EQ_INT(sample(&s, d, h2, 3), 0);
    s.frequency_penalty = 0.2f;             /* 1 - 0.6 = 0.4 < 0.5 */
    CHECK_EQ_INT(sample(&s, d, h2, 3), 1);
    s.frequency_penalty = 0.0f;
    s.presence_penalty = 0.6f;              /* 1 - 0.6 = 0.4 */
    CHECK_EQ_INT(sample(&s, d, h2, 3), 1);
    /* the caller's logits are not modified */
    CHECK(d[0] == 1.0f && d[1] == 0.5f);
}

/* Empirical frequencies of n draws vs expected probabilities. */
static void check_freq(const gm_sampling *s, const float *l, int V, const double *expect, const char *what) {
    enum { N = 40000 };
    int count[8] = {0};
    for (int i = 0; i < N; i++) {
        int32_t t = sample_n(s, l, V, NULL, 0);
        if (t >= 0 && t < V) count[t]++;
    }
    for (int v = 0; v < V; v++)
        CHECK_MSG(fabs((double)count[v] / N - expect[v]) < 0.012, "%s: token %d frequency %.4f, expected %.4f", what, v,
                  (double)count[v] / N, expect[v]);
}

TEST(distributions) {
    const double p[4] = {0.1, 0.2, 0.3, 0.4};
    float l[4];
    for (int i = 0; i < 4; i++) l[i] = (float)log(p[i]) + 5.0f;
    gm_sampling s = gm_sampling_default();
    s.temperature = 1.0f;
    s.seed = 7;
    gm_sampler_seed(&S, 7);
    check_freq(&s, l, 4, p, "temperature 1");
    s.temperature = 0.5f; /* p^2 renormalised */
    const double p2[4] = {0.01 / 0.30, 0.04 / 0.30, 0.09 / 0.30, 0.16 / 0.30};
    check_freq(&s, l, 4, p2, "temperature 0.5");
    s.temperature = 1.0f;
    s.top_k = 2;
    const double pk[4] = {0, 0, 0.3 / 0.7, 0.4 / 0.7};
    check_freq(&s, l, 4, pk, "top_k 2");
    s.top_k = 0;
    s.top_p = 0.5f; /* 0.4 < 0.5 <= 0.4 + 0.3 */
    check_freq(&s, l, 4, pk, "top_p 0.5");
    s.top_p = 0.35f; /* the best alone reaches it */
    const double p1[4] = {0, 0, 0, 1};
    check_freq(&s, l, 4, p1, "top_p 0.35");
    s.top_p = 1.0f;
    s.min_p = 0.6f; /* keep p >= 0.24 */
    check_freq(&s, l, 4, pk, "min_p 0.6");
    s.min_p = 0.2f; /* keep p >= 0.08: all */
    check_freq(&s, l, 4, p, "min_p 0.2");
}

TEST(seeding) {
    float l[16];
    for (int i = 0; i < 16; i++) l[i] = (float)(i % 5);
    gm_sampling s = gm_sampling_default();
    s.temperature = 1.5f;
    int32_t a[64], b[64], c[64];
    gm_sampler_seed(&S, 123);
    for (int i = 0; i < 64; i++) a[i] = sample(&s, l, NULL, 0);
    gm_sampler_seed(&S, 123);
    for (int i = 0; i < 64; i++) b[i] = sample(&s, l, NULL, 0);
    gm_sampler_seed(&S, 124);
    for (int i = 0; i < 64; i++) c[i] = sample(&s, l, NULL, 0);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
}

static int cmp_desc(const void *pa, const void *pb) {
    const gm_cand *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

TEST(partial_top_k_matches_full_sort) {
    enum { V = 262144 };
    gm_cand *a = malloc(sizeof *a * V), *b = malloc(sizeof *b * V);
    uint64_t x = 99;
    for (int i = 0; i < V; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        /* few distinct values, so ties are exercised */
        a[i] = (gm_cand){(float)((x >> 40) % 5000) * 0.01f, i};
    }
    memcpy(b, a, sizeof *a * V);
    qsort(b, V, sizeof *b, cmp_desc);
    const int ks[] = {1, 2, 40, 1000, V};
    for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
        gm_cand *c = malloc(sizeof *c * V);
        memcpy(c, a, sizeof *a * V);
        gm_cand_top_k(c, V, ks[t]);
        int diff = 0;
        for (int i = 0; i < ks[t]; i++) diff += c[i].id != b[i].id || c[i].logit != b[i].logit;
        CHECK_MSG(diff == 0, "top_k %d: %d entries differ from the full sort", ks[t], diff);
        free(c);
    }
    /* top-p over a large flat-ish vocabulary: the draw stays within the nucleus */
    float *l = malloc(sizeof *l * V);
    for (int i = 0; i < V; i++) l[i] = a[i].logit;
    gm_sampler big;
    gm_error err = {0};
    CHECK_OK(gm_sampler_init(&big, V, gm_cpu_kernels_for(GM_ISA_AUTO)->exp_sum, &err), &err);
    gm_sampling s = gm_sampling_default();
    s.temperature = 1.0f;
    s.top_p = 0.01f;
    /* nucleus boundary from the full sort */
    double z = 0, cum = 0;
    for (int i = 0; i < V; i++) z += exp((double)b[i].logit - b[0].logit);
    float min_kept = b[0].logit;
    for (int i = 0; i < V; i++) {
        cum += exp((double)b[i].logit - b[0].logit);
        min_kept = b[i].logit;
        if (cum >= 0.01 * z) break;
    }
    for (int i = 0; i < 50; i++) {
        int32_t t = -1;
        CHECK_OK(gm_sampler_sample(&big, &s, l, NULL, 0, &t, &err), &err);
        CHECK(t >= 0 && t < V && l[t] >= min_kept);
    }
    gm_sampler_free(&big);
    free(l);
    free(a);
    free(b);
}

/* A Gemma-sized vocabulary (262144) with a realistic spread: the binned selection (top-k / top-p /
 * min-p without sorting everything) must draw only from the set a full double-precision sort
 * defines, and the best token as often as its exact probability says. */
static int cmp_logit_desc(const void *pa, const void *pb) {
    const float a = *(const float *)pa, b = *(const float *)pb;
    return (a < b) - (a > b);
}

TEST(large_vocab_matches_full_sort) {
    enum { V = 262144, DRAWS = 400 };
    gm_sampler big;
    gm_error err = {0};
    CHECK_OK(gm_sampler_init(&big, V, gm_cpu_kernels_for(GM_ISA_AUTO)->exp_sum, &err), &err);
    float *l = malloc(sizeof(float) * V), *sorted = malloc(sizeof(float) * V);
    unsigned r = 99;
    for (int i = 0; i < V; i++) { /* a few strong tokens over a broad tail */
        r = r * 1664525u + 1013904223u;
        const float u = (float)((r >> 8) * (1.0 / 16777216.0));
        l[i] = 8.0f * u * u * u * u + (i % 997 == 0 ? 6.0f : 0.0f) - (i % 5 == 0 ? INFINITY : 0.0f);
    }
    l[12345] = NAN;
    struct { float temp, top_p, min_p; int top_k; } cfg[] = {
        {1.0f, 0.9f, 0.0f, 0}, {0.7f, 0.95f, 0.05f, 0}, {1.0f, 1.0f, 0.1f, 0}, {1.3f, 0.8f, 0.0f, 40}, {1.0f, 1.0f, 0.0f, 64}};
    for (size_t k = 0; k < sizeof cfg / sizeof *cfg; k++) {
        const float inv_t = 1.0f / cfg[k].temp;
        int n = 0;
        for (int i = 0; i < V; i++)
            if (!isnan(l[i]) && l[i] != -INFINITY) sorted[n++] = l[i] * inv_t;
        qsort(sorted, n, sizeof *sorted, cmp_logit_desc);
        const float mx = sorted[0];
        int m = cfg[k].top_k > 0 && cfg[k].top_k < n ? cfg[k].top_k : n;
        double z = 0, cum = 0;
        for (int i = 0; i < m; i++) z += exp((double)sorted[i] - mx);
        if (cfg[k].top_p < 1.0f) {
            int j = 0;
            while (j < m && (cum += exp((double)sorted[j] - mx)) < cfg[k].top_p * z) j++;
            m = j + 1 < m ? j + 1 : m;
        }
        if (cfg[k].min_p > 0.0f)
            while (m > 1 && sorted[m - 1] < mx + logf(cfg[k].min_p)) m--;
        const float floor_l = sorted[m - 1]; /* the weakest logit allowed */
        double zk = 0;
        for (int i = 0; i < m; i++) zk += exp((double)sorted[i] - mx);
        gm_sampling o = gm_sampling_default();
        o.temperature = cfg[k].temp, o.top_p = cfg[k].top_p, o.min_p = cfg[k].min_p, o.top_k = cfg[k].top_k;
        gm_sampler_seed(&big, 5 + k);
        int outside = 0, best_hits = 0;
        for (int d = 0; d < DRAWS; d++) {
            int32_t t = -1;
            CHECK_OK(gm_sampler_sample(&big, &o, l, NULL, 0, &t, &err), &err);
            if (t < 0 || isnan(l[t]) || l[t] * inv_t < floor_l) outside++;
            if (t >= 0 && l[t] * inv_t == mx) best_hits++;
        }
        const double p_best = 1.0 / zk; /* the best token's exact probability (it is unique here) */
        CHECK_MSG(outside == 0, "config %zu: %d draws outside the full-sort set of %d", k, outside, m);
        CHECK_MSG(fabs((double)best_hits / DRAWS - p_best) < 4 * sqrt(p_best * (1 - p_best) / DRAWS) + 1e-3,
                  "config %zu: best drawn %.4f, exact %.4f (set of %d)", k, (double)best_hits / DRAWS, p_best, m);
    }
    free(l);
    free(sorted);
    gm_sampler_free(&big);
}

/* Temperatures near 0 are the greedy limit, whatever the filters: 1/T (or logit/T) overflowing
 * float must not turn the logits into inf / NaN garbage. Huge temperatures are valid (nearly
 * uniform) and every draw is still one of the finite candidates. */
TEST(extreme_temperatures) {
    const float l[5] = {0.1f, 30.0f, -10.0f, 29.5f, 29.0f}; /* a real model's logit range */
    const float tiny[] = {1.2e-38f, 1e-45f /* subnormal: 1/T is inf */, 1e-30f, 1e-20f};
    const int32_t hist[3] = {3, 4, 3};
    for (size_t k = 0; k < sizeof tiny / sizeof tiny[0]; k++)
        for (int cfg = 0; cfg < 5; cfg++) {
            gm_sampling s = gm_sampling_default();
            s.temperature = tiny[k];
            s.seed = 11 + (uint64_t)cfg;
            if (cfg == 1) s.top_k = 3;
            if (cfg == 2) s.top_p = 0.9f;
            if (cfg == 3) s.min_p = 0.05f;
            if (cfg == 4) s.repeat_penalty = 1.1f, s.frequency_penalty = 0.1f;
            gm_error err = {0};
            CHECK_OK(gm_sampling_validate(&s, &err), &err);
            int wrong = 0;
            for (int i = 0; i < 200; i++) wrong += sample(&s, l, cfg == 4 ? hist : NULL, cfg == 4 ? 3 : 0) != 1;
            CHECK_MSG(wrong == 0, "temperature %g, config %d: %d of 200 draws were not the argmax", (double)tiny[k],
                      cfg, wrong);
        }
    /* large logits at a small temperature: logit/T overflows even though 1/T does not */
    const float big[4] = {-30000.0f, 20000.0f, 30000.0f, 29999.0f};
    gm_sampling s = gm_sampling_default();
    s.temperature = 1e-35f;
    for (int i = 0; i < 50; i++) CHECK_EQ_INT(sample(&s, big, NULL, 0), 2);
    /* huge temperatures: valid, nearly uniform over the finite logits */
    const float huge[] = {1e30f, 3.4e38f};
    for (size_t k = 0; k < 2; k++) {
        s = gm_sampling_default();
        s.temperature = huge[k];
        int seen[5] = {0};
        for (int i = 0; i < 400; i++) {
            int32_t t = sample(&s, l, NULL, 0);
            CHECK(t >= 0 && t < 5);
            if (t >= 0 && t < 5) seen[t]++;
        }
        for (int t = 0; t < 5; t++) CHECK_MSG(seen[t] > 40, "temperature %g: token %d drawn %d of 400 times",
                                              (double)huge[k], t, seen[t]);
    }
    /* still rejected: negative, NaN, infinite */
    const float badt[] = {-1e-38f, -2.0f, NAN, INFINITY, -INFINITY};
    for (size_t k = 0; k < sizeof badt / sizeof badt[0]; k++) {
        s = gm_sampling_default();
        s.temperature = badt[k];
        gm_error err = {0};
        CHECK_EQ_INT(gm_sampling_validate(&s, &err), GM_ERR_ARG);
        CHECK(strstr(err.msg, "temperature") != NULL);
    }
}

/* logit_bias: added before everything, greedy included; -inf bans; bad entries refused. */
TEST(logit_bias) {
    const float l[4] = {1.0f, 3.0f, 2.0f, 0.5f};
    gm_sampling o = gm_sampling_default();
    CHECK_EQ_INT(sample(&o, l, NULL, 0), 1);
    const gm_logit_bias ban1[1] = {{1, -INFINITY}}, up3[2] = {{1, -INFINITY}, {3, 2.0f}};
    o.logit_bias = ban1, o.n_logit_bias = 1;
    CHECK_EQ_INT(sample(&o, l, NULL, 0), 2);
    o.logit_bias = up3, o.n_logit_bias = 2;
    CHECK_EQ_INT(sample(&o, l, NULL, 0), 3); /* 0.5 + 2 > 2 */
    /* sampled: a banned token never comes */
    o.temperature = 1.0f;
    for (int i = 0; i < 200; i++) CHECK(sample(&o, l, NULL, 0) != 1);
    /* every token banned: an error, not a banned token */
    gm_logit_bias all[16];
    for (int i = 0; i < 16; i++) all[i] = (gm_logit_bias){i, -INFINITY};
    o.logit_bias = all, o.n_logit_bias = 16;
    float full[16];
    for (int i = 0; i < 16; i++) full[i] = (float)i;
    int32_t t = -1;
    gm_error err = {0};
    for (int greedy = 0; greedy < 2; greedy++) {
        o.temperature = greedy ? 0.0f : 1.0f;
        CHECK_EQ_INT(gm_sampler_sample(&S, &o, full, NULL, 0, &t, &err), GM_ERR_ARG);
    }
    /* outside the vocabulary, NaN, +inf, a count without a list */
    const gm_logit_bias far[1] = {{16, 1.0f}}, nan_b[1] = {{2, NAN}}, inf_b[1] = {{2, INFINITY}}, neg[1] = {{-1, 1}};
    o = gm_sampling_default();
    o.logit_bias = far, o.n_logit_bias = 1;
    CHECK(gm_sampler_sample(&S, &o, full, NULL, 0, &t, &err) == GM_ERR_ARG && strstr(err.msg, "vocabulary"));
    o.logit_bias = nan_b;
    CHECK_EQ_INT(gm_sampling_validate(&o, &err), GM_ERR_ARG);
    o.logit_bias = inf_b;
    CHECK_EQ_INT(gm_sampling_validate(&o, &err), GM_ERR_ARG);
    o.logit_bias = neg;
    CHECK_EQ_INT(gm_sampling_validate(&o, &err), GM_ERR_ARG);
    o.logit_bias = NULL;
    CHECK_EQ_INT(gm_sampling_validate(&o, &err), GM_ERR_ARG);
}

int main(void) {
    gm_error err = {0};
    if (gm_sampler_init(&S, 16, gm_cpu_kernels_for(GM_ISA_AUTO)->exp_sum, &err) != GM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    RUN(validation);
    RUN(greedy_and_ties);
    RUN(penalties);
    RUN(distributions);
    RUN(seeding);
    RUN(partial_top_k_matches_full_sort);
    RUN(large_vocab_matches_full_sort);
    RUN(extreme_temperatures);
    RUN(logit_bias);
    gm_sampler_free(&S);
    return test_summary();
}
